"""Every command of the docs works: each command of a ```sh block of the README or of a page under
``docs/`` runs here in a smoke form (one block, one proof, one scenario, few packets) that takes the
same code path as the command itself (``JOBS`` at its default). A documented command without a smoke
form in ``SMOKE`` fails, so a newly documented command cannot go untested; ``make test`` alone is left
out (it runs the suite, this test included). Generated sections (``<!-- name -->`` ... ``<!-- /name -->``)
are their commands' output, not commands.

The commands run in a copy of the sources in ``build/readme-<xdist worker>/`` (as in a fresh clone,
sharing the venv) whose own ``build/`` is kept between runs as a cache: they never write into the
test directories of the suite's tests running next to them, nor into another worker's copy, nor into
the folders the user's own commands read. Runs are shared between smokes where one serves several
(`make sim`'s run: the waveform views, the pcaps, the speed table).
"""
import os
import re
import shutil
import subprocess
import time

import pytest

from demos import NAMES
from registry import ROOT
from scenarios import SCENARIOS as SCENARIO_NAMES
from testbenches.test_sim import check_story, unwrap
from tools import gtkw, sections

pytestmark = pytest.mark.xdist_group("readme")

README = ROOT / "README.md"
#: The pages whose commands are smoke-tested.
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
#: Documented commands not run here, and why.
EXCLUDED = {"make test": "runs the whole suite, this test included",
            "make setup": "every other command runs it first",
            "make regress SEEDS=32 CLUSTER=slurm JOBS=16 CLUSTER_OPTIONS='queue=normal account=myproj "
            "walltime=01:00:00'": "needs a Slurm cluster (its job script is checked: the --job-script command)"}
SIM = '-k "random_traffic and flow"'       # a one-test selection of the spill buffer's testbench
GENERATED = re.compile(r"<!-- ([\w:-]+) -->.*?<!-- /\1 -->", re.S)


def hand_written(text):
    """``text`` without its generated sections."""
    return GENERATED.sub("", text)


def doc_commands(pages=None):
    """The commands of the ```sh blocks of ``pages`` (default ``PAGES``), comments stripped, in order."""
    texts = [hand_written(p.read_text()) for p in (PAGES if pages is None else pages)]
    blocks = [b for text in texts for b in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)]
    commands = [re.sub(r"\s+#.*$", "", line).strip() for block in blocks for line in block.splitlines()]
    return list(dict.fromkeys(c for c in commands if c))


def clone(root=ROOT, into=None):
    """Copy the sources of ``root`` (not ``build/``, ``.venv``, ``.git``) to ``into`` (default: one
    directory per xdist worker, so two workers never rewrite one clone); link its venv."""
    into = into or root / "build" / f"readme-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
    into.mkdir(parents=True, exist_ok=True)
    skip = {"build", ".venv", ".git", "__pycache__"}
    for old in into.iterdir():
        if old.name in skip:
            continue
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink()
    for path in root.iterdir():
        if path.name in skip:
            continue
        if path.is_dir():
            shutil.copytree(path, into / path.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, into)            # keeps mtimes: make's setup stamp stays valid
    if not (into / ".venv").exists():
        (into / ".venv").symlink_to((root / ".venv").resolve())
    return into


class Shell:
    """Runs commands in the clone, without the calling make's flags."""

    def __init__(self, root):
        self.root = root
        self.env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        self._sim = self._scenarios = None
        self.sim_output = ""

    def __call__(self, command):
        """Run ``command`` with bash; return (stdout, stderr); fail the test naming it unless it exits 0."""
        result = subprocess.run(["bash", "-c", command], cwd=self.root, env=self.env, capture_output=True,
                                text=True, timeout=900)
        output = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
        assert result.returncode == 0, f"`{command}` exited with {result.returncode}:\n{output}"
        return result.stdout, result.stderr

    def fails(self, command):
        """Run ``command``; its output (stdout and stderr), failing the test unless it exits non-zero."""
        result = subprocess.run(["bash", "-c", command], cwd=self.root, env=self.env, capture_output=True,
                                text=True, timeout=900)
        assert result.returncode != 0, f"`{command}` succeeded"
        return result.stdout + result.stderr

    def newest(self, pattern, since=0.0):
        """The newest file under build/ matching ``pattern`` written after ``since``."""
        files = [p for p in (self.root / "build").glob(pattern) if p.stat().st_mtime >= since]
        assert files, f"no build/{pattern} written"
        return max(files, key=lambda p: p.stat().st_mtime)

    def sim(self):
        """Run `make sim` once (Spillway's demonstration); its waveform."""
        if self._sim is None:
            start = time.time()
            self.sim_output, _ = self("make sim")
            self._sim = self.newest("spillway.top/*-vcd/burst/dump.vcd", start)
        return self._sim

    def scenarios(self):
        """Run `make scenarios` once, on one scenario (MRC's, the shortest)."""
        if not self._scenarios:
            start = time.time()
            self("make scenarios SCENARIOS=mrc")
            self._scenarios = self.newest("scenarios/mrc.csv", start)

    def after_sim(self):
        """`make sim`'s waveform, made the newest dump of the clone's runs (as right after `make sim`)."""
        dump = self.sim()
        os.utime(dump)
        return dump


def _shape(line):
    """A line of terminal output with its numbers and parameter tags masked (they change run to run)."""
    line = re.sub(r"\((drawn for this run|from INNET_SEED)\)", "(seeded)", line.strip())
    return re.sub(r"\d+", "N", re.sub(r"build/([\w.]+)/[^/ ]+/", r"build/\1/<params>/", line))


def _sim(sh):
    dump = sh.sim()
    saved = dump.with_suffix(".gtkw")               # the GTKWave save file the runner writes beside it
    assert saved.exists(), f"no {saved}"
    assert gtkw.signals(saved) and not gtkw.missing(saved, dump), gtkw.missing(saved, dump)
    check_story("spillway", sh.sim_output, sh.root)     # seed, replay line, every number of the story
    # the story's make waves line opens the window of the first spill and the first drain
    line = re.search(r"^ +(make waves DUMP=\S+ SIGNALS='[^']+' START=(\d+) ROWS=(\d+))$", sh.sim_output, re.M)
    story = " ".join(sh.sim_output.split())
    spill = int(re.search(r"first spill at cycle (\d+)", story).group(1))
    drain = int(re.search(r"first drain at cycle (\d+)", story).group(1))
    out, _ = sh(line.group(1))
    rows = [r.split() for r in out.splitlines()]
    header = next(i for i, r in enumerate(rows) if r[:2] == ["cycle", "time"])
    column = rows[header].index("spill_o__valid")
    valid = {int(r[0]): r[column] for r in rows[header + 1:]}
    assert min(valid) == int(line.group(2)) < spill < drain <= max(valid), (line.group(0), spill, drain)
    assert len(valid) == int(line.group(3)) and valid[spill] == "1" and valid[spill - 1] == "0", out
    # the README's sample of `make sim`'s output has the shape of this run's, line for line in order
    sample = unwrap(re.search(r"```text\n(.*?)```", sections.body(README, "sim-output"), re.S).group(1))
    lines = iter(_shape(line) for line in unwrap(sh.sim_output))
    missing = [line for line in sample if _shape(line) not in lines]
    assert not missing, f"README's make sim sample is not what make sim prints: {missing}\n{sh.sim_output}"


def _report(sh):
    out, _ = sh("make report BLOCKS=packet_fifo")
    assert re.search(r"^packet_fifo\s+\d+\s+\d+", out, re.M), out


def _fpga(sh):
    out, err = sh("make fpga BLOCKS=packet_fifo")
    assert "[1/1] packet_fifo ..." in err, err
    assert re.search(r"^\| packet_fifo \| \d+\.\d \| `.+` → `.+` \(\d+\) \| \d+ \|", out, re.M), out


def _fpga_docs(sh):
    if not (sh.root / "build/fpga/fpga.csv").exists():
        _fpga(sh)
    out, _ = sh(".venv/bin/python -m tools.fpga --from-csv build/fpga/fpga.csv --docs")
    assert "(fpga table)" in out, out
    assert "| packet_fifo |" in sections.body(sh.root / "docs/verification.md", "fpga")


def _bench(sh):
    out, err = sh("make bench PACKETS=200 BLOCKS=packet_fifo")
    assert "[6/6] packet_fifo amaranth-pysim ..." in err, err
    assert len(re.findall(r"^packet_fifo\s+\S+\s+200\s", out, re.M)) == 6, out
    assert re.search(r"^packet_fifo\s+cocotb-checked\s+200\s", out, re.M), out


def _bench_docs(sh):
    if not (sh.root / "build/bench/bench.csv").exists():
        _bench(sh)
    out, _ = sh(".venv/bin/python -m tools.bench --from-csv build/bench/bench.csv --packets 100000 --docs")
    assert "(bench table)" in out, out
    assert "| packet_fifo |" in sections.body(sh.root / "docs/verification.md", "bench")


def _verilog(sh):
    out, _ = sh("make verilog BLOCKS=packet_fifo")
    assert "build/verilog/packet_fifo.v" in out and "build/verilog/packet_fifo_axis.v" in out, out
    wrapper = (sh.root / "build/verilog/packet_fifo_axis.v").read_text()
    assert wrapper.startswith("// AXI4-Stream wrapper of packet_fifo (hdl/axis.py); i: tuser[7:0] = meta.port")
    assert re.search(r"^module packet_fifo_axis\(.*\bs_axis_tuser\b.*\bm_axis_tlast\b", wrapper, re.M), wrapper[:600]


FORMAL = "make formal PYTEST_ARGS='-k ev_expander'"     # one block's proofs: its proof and cover


def _formal(sh):
    out, _ = sh(FORMAL)
    assert re.search(r"\b\d+ passed\b", out) and "failed" not in out, out


def _proofs_docs(sh):
    if not list((sh.root / "build/formal").glob("ev_expander*/result.json")):
        _formal(sh)
    out, _ = sh(".venv/bin/python -m tools.proofs --docs")
    assert re.search(r"^docs: proofs tables of .*\bev_expander\b.* and the totals written$", out, re.M), out


def _scenarios(sh):
    sh.scenarios()


def _scenario_table(sh):
    sh.scenarios()          # a run whose CSVs to tabulate
    out, _ = sh(".venv/bin/python -m tools.scenario_table --docs")
    assert "mrc" in out and "written from build/scenarios" in out, out


SMALL_SPILLWAY = ("--hosts 3 --remote 2 --a2a 8 --ring 2 --chunk 4 --service 4 --limit 12 --high 6 --low 2 "
                  "--capacity 4 --wan 300 --window 16 --latencies 7 --limits ''")


def _scenario(sh):
    start = time.time()
    out, _ = sh(f"make scenario NAME=spillway ARGS=\"{SMALL_SPILLWAY}\"")
    assert "Spillway (link 7) vs taildrop" in out, out
    assert sh.newest("scenarios/spillway.txt", start).read_text().startswith("spillway, seed 1"), out


def _scenarios_help(sh):
    out, _ = sh(".venv/bin/python -m scenarios --help")
    assert [line.split()[0] for line in out.splitlines() if line.startswith("  ")] == list(SCENARIO_NAMES), out


def _scale(sh):
    out, _ = sh(f".venv/bin/python -m scenarios spillway {SMALL_SPILLWAY.replace('--hosts 3', '--hosts 4')}")
    assert re.search(r"^\d+ events in [\d.]+ s \([\d,]+ events/s\)$", out, re.M), out


def _waves_vcd(sh):
    start = time.time()
    sh(f"WAVES=1 .venv/bin/python -m pytest testbenches/spillway/test_inswitch.py {SIM}")
    sh.newest("spillway.inswitch/*-vcd/random_traffic/dump.vcd", start)


def _waves_fst(sh):
    start = time.time()
    sh(f"WAVES=1 INNET_WAVES=fst .venv/bin/python -m pytest testbenches/spillway/test_inswitch.py {SIM}")
    fst = sh.newest("spillway.inswitch/*/random_traffic/dump.fst", start)
    out, _ = sh(f".venv/bin/python -m tools.waves --list {fst}")
    assert "o__valid" in out, out
    assert fst.with_suffix(".gtkw").exists() and not gtkw.missing(fst.with_suffix(".gtkw"), fst)


def _make_waves(sh):
    dump = sh.after_sim()
    out, _ = sh("make waves SIGNALS='i__valid i__ready o__valid o__payload' START=100 ROWS=40")
    lines = out.splitlines()
    assert any(line.startswith(f"# {dump} ") for line in lines), f"not make sim's dump {dump}:\n{out}"
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["cycle", "time"])
    assert lines[header].split() == ["cycle", "time", "i__valid", "i__ready", "o__valid", "o__payload"], out
    assert len(lines) - header - 1 == 40 and lines[header + 1].split()[0] == "100", out


def _make_waves_svg(sh):
    dump = sh.after_sim()
    out, _ = sh("make waves SIGNALS='qdepth spill_o__valid node_stored drains spill_i__valid "
                "reinjected o__valid o__payload.meta' START=30 ROWS=32 SVG=build/window.svg")
    assert f"({dump}, cycles 30..61)" in out, out
    svg = (sh.root / "build/window.svg").read_text()
    for lane in ("qdepth", "[0] (dec)", "spill_o__valid", "node_stored", "drains (dec)", "spill_i__valid",
                 "reinjected (dec)", "o__valid", "port (dec)", "spilled", "cycles 30..61"):
        assert f">{lane}<" in svg, lane


def _tshark(sh):
    sh.sim()                # a run whose pcaps to decode
    if not shutil.which("tshark"):
        if os.geteuid() == 0:
            pytest.fail("tshark is missing although this runs as root: tools/setup.sh (make setup) installs it")
        pytest.skip("tshark is not installed and this is not root")
    out, _ = sh(".venv/bin/python -m tools.tshark build/spillway.top")
    rows = [line.split() for line in out.splitlines()[1:]]
    # columns: packets, fields, dns, malformed, mismatch; no DNS even in the bad-input tests' pcaps
    assert rows and all(r[2] == "0" and r[4] == "0" for r in rows) and any("infiniband" in r for r in rows), out
    # the spill link's pcaps, both directions: every frame decoded by the spill dissector
    for name in ("spill_o.pcap:", "spill_i.pcap:"):
        link = [r for r in rows if r[5].endswith(f"burst/{name}")]
        assert link and all(r[r.index("spill") + 1].rstrip(",") == r[0] != "0" for r in link), (name, out)


def _waves_list(sh):
    out, _ = sh(f".venv/bin/python -m tools.waves --list {sh.sim()}")
    assert "top.o__valid" in out.split(), out


def _gtkw(sh):
    dump = sh.sim()
    out, _ = sh(f".venv/bin/python -m tools.gtkw {dump}")
    assert out.strip() == str(dump.with_suffix(".gtkw")), out
    assert re.search(r"^\*-?[\d.]+ -1", dump.with_suffix(".gtkw").read_text(), re.M), "no zoom"


def _regress(sh):
    out, _ = sh("make regress SEEDS=2 SHARD=2/2 TESTS=testbenches/test_headers.py")
    assert "regress: shard 2/2, seed 2 (2 of 2)" in out and "0 failed -> build/regress/shard-2-of-2.xml" in out, out


def _regress_merge(sh):
    sh("rm -rf build/regress && for i in 1 2; do .venv/bin/python -m tools.regress --seeds 2 --shard $i/2 "
       "--tests testbenches/test_headers.py; done")
    out, _ = sh("make regress-merge")
    assert re.search(r"regress: \d+ test runs over 2 seeds, 0 failed -> build/regress/report.xml", out), out


def _regress_cluster(sh):
    """The campaign on a local Dask cluster of 2 worker processes, on one test file."""
    out, _ = sh("make regress SEEDS=2 CLUSTER=local JOBS=2 TESTS=testbenches/test_headers.py")
    assert "regress: 2 units on 2 workers" in out and "[2/2 done, 0 failed" in out, out
    assert re.search(r"regress: \d+ test runs over 2 seeds, 0 failed -> build/regress/report.xml", out), out


def _mutants_cluster(sh):
    out, _ = sh("make mutants BLOCK=spillway.link CLUSTER=local MUTANT_ARGS='--id 42 --no-baseline'")
    assert "mutants: 1 units on 2 workers" in out and "1 mutants: invalid 1" in out, out


def _sweep(sh):
    out, _ = sh("make sweep NAME=esa GRID='slots=4,8 seed=1 rounds=4 sweep-slots=4 sweep-jobs=2'")
    assert "sweep: esa: 2 points, 6 rows -> " in out and "0 units ran again" in out, out
    assert (sh.root / "build/sweeps/esa.csv").read_text().startswith("slots,seed,rounds,sweep-slots,sweep-jobs,")


def _job_script(sh):
    """What each Slurm job of the worked example runs (no Slurm here: the script, nothing submitted)."""
    out, _ = sh(".venv/bin/python -m tools.cluster regress --cluster slurm --cluster-option queue=normal "
                "--cluster-option account=myproj --cluster-option walltime=01:00:00 --job-script")
    for line in ("#SBATCH -p normal", "#SBATCH -A myproj", "#SBATCH -t 01:00:00", f"cd {sh.root}"):
        assert line in out, out
    assert "-m distributed.cli.dask_worker tcp://" in out and "--nthreads 1" in out, out


def _coverage(sh):
    out, _ = sh("""make coverage BLOCKS=spillway.inswitch PYTEST_ARGS='-k "random_traffic and flow"'""")
    assert re.search(r"^spillway\.inswitch\s+\d+/\d+ \([\d.]+ %\)\s+\d+/\d+", out, re.M), out
    assert (sh.root / "build/coverage/spillway.inswitch/hdl/spillway/inswitch.py").exists()


def _mutants(sh):
    """The real mutation run at the default JOBS: three of the expander's mutants through screening
    (one C++ build of its schemata, a static one on a build of its own), the testbenches and proofs
    (pytest-xdist) and the miter, ending with the block's table; then the testbench stage alone on a
    mutant its tests kill (an assignment of a register dropped: a killed mutant made the xdist run exit
    with 2)."""
    out, _ = sh("make mutants BLOCK=ev_expander N=3")
    assert "--jobs 2" in out, out
    assert re.search(r"^mutants: \[\d+/3, \d+ s(, ETA \d+ s)?\] screening ev_expander on ev_expander: ", out, re.M), out
    assert re.search(r"^mutants: ev_expander: \d+ mutants: invalid \d+, screening \d+, testbench \d+, proof \d+, "
                     r"proved equiv \d+, bounded equiv \d+, argued equiv \d+, survivors \d+", out, re.M), out
    listed, _ = sh(".venv/bin/python -m tools.mutants ev_expander --list")
    drops = re.findall(r"^\s*(\d+) drop +hdl/ev_expander.py:\d+: m\.d\.sync \+=", listed, re.M)
    assert drops, listed
    out, _ = sh(f"make mutants BLOCK=ev_expander MUTANT_ARGS='--id {drops[0]} --no-screen --no-formal --no-miter "
                "--no-baseline --out build/mutants-drop'")          # its own CSV: not merged with the run above
    assert re.search(rf"ev_expander #{drops[0]} drop hdl/ev_expander\.py:\d+: sim fail", out), out
    assert "testbench 1, proof 0, proved equiv 0, bounded equiv 0, argued equiv 0, survivors 0" in out, out


def _mutants_all(sh):
    """The whole campaign is hours of CPU on 2 cores: its smoke form is its first block, one mutant."""
    out, _ = sh("make mutants BLOCK=spillway.top N=1")
    assert re.search(r"^mutants: spillway\.top: 1 mutants: ", out, re.M), out


def _mutants_summary(sh):
    out, _ = sh("make mutants BLOCK=all MUTANT_ARGS=--summary")
    assert re.search(r"^block\s+mutants\s+run\s+invalid\s+screening\s+testbench\s+proof\s+proved equiv\s+"
                     r"bounded equiv\s+argued equiv\s+survivors\s+sim kills", out, re.M), out
    assert re.search(r"^spillway\.inswitch\s+\d+\s+\d+", out, re.M), out
    assert re.search(r"^chunk_bitmap\s+\d+", out, re.M), out


def _mutants_list(sh):
    out, _ = sh(".venv/bin/python -m tools.mutants aggregator --list")
    assert re.search(r"^\s*0 \w+ +hdl/aggregator.py:\d+: ", out, re.M), out


def _speed(sh):
    sh.sim()                # a run to report on
    out, _ = sh(".venv/bin/python -m tools.speed")
    assert re.search(r"^spillway\.top\s+\d+", out, re.M), out


def _blocks(sh):
    out, _ = sh(".venv/bin/python -m tools.blocks")
    assert out.startswith("packet_fifo"), out


def _blocks_readme(sh):
    out, _ = sh(".venv/bin/python -m tools.blocks --readme")
    assert out.strip().endswith("README.md: block table up to date"), out


def _sim_list(sh):
    out, _ = sh("make sim BLOCK=list")
    assert [line.split()[0] for line in out.splitlines() if line.strip()][-6:] == list(NAMES), out


def _test_block(sh):
    """The selection ``make test BLOCK=`` makes (collected, not run: the suite runs these tests itself)."""
    out, _ = sh("make test BLOCK=spillway.node PYTEST_ARGS=--collect-only")
    collected = {line.split("[")[0] for line in out.splitlines() if "::" in line}
    wanted = {"testbenches/spillway/test_node.py::test_node", "formal/spillway/test_node.py::test_node_prove",
              "testbenches/test_soak.py::test_soak", "testbenches/test_layout.py::test_one_name_everywhere"}
    assert wanted <= collected, out
    assert not any("test_link" in test or "test_switch" in test for test in collected), out
    assert "testbenches/test_soak.py::test_soak[spillway.node-soak]" in out and "spillway.link-soak" not in out, out
    assert "unknown block 'nope'" in sh.fails("make test BLOCK=nope")


def _new_block(sh):
    from testbenches.scaffold import new_block_gets_every_service
    new_block_gets_every_service()         # in a clone of its own: the block must not reach the other smokes


#: Documented command -> its smoke form (a function of a ``Shell``, or the command itself when cheap).
SMOKE = {
    "make new-block NAME=my_counter": _new_block,
    "make new-block NAME=my_counter TITLE='My packet counter'": _new_block,
    "make test BLOCK=my_counter": _new_block,
    "make test BLOCK=spillway.node": _test_block,
    "make sim": _sim,
    "make sim BLOCK=list": _sim_list,
    "make lint": "make lint",
    "make formal": _formal,
    "make scenarios": _scenarios,
    "make scenario NAME=spillway ARGS='--latencies 10,100'": _scenario,
    ".venv/bin/python -m scenarios --help": _scenarios_help,
    ".venv/bin/python -m scenarios spillway --hosts 32 --remote 32 --service 32 --a2a 16 --ring 8 --latencies 10 "
    "--limits ''": _scale,
    "make verilog": _verilog,
    "make report": _report,
    "make fpga BLOCKS=packet_fifo": _fpga,
    "make bench": _bench,
    '.venv/bin/python -m pytest testbenches/spillway/test_inswitch.py -k "watermark_edges and flow"':
        '.venv/bin/python -m pytest testbenches/spillway/test_inswitch.py -k "watermark_edges and flow"',
    f"INNET_SEED=1234 .venv/bin/python -m pytest testbenches/spillway/test_inswitch.py {SIM}":
        f"INNET_SEED=1234 .venv/bin/python -m pytest testbenches/spillway/test_inswitch.py {SIM}",
    "WAVES=1 .venv/bin/python -m pytest testbenches/spillway/test_inswitch.py": _waves_vcd,
    "WAVES=1 INNET_WAVES=fst .venv/bin/python -m pytest testbenches/spillway/test_inswitch.py": _waves_fst,
    "make waves SIGNALS='i__valid i__ready o__valid o__payload' START=100 ROWS=40": _make_waves,
    "make waves SIGNALS='qdepth spill_o__valid node_stored drains spill_i__valid reinjected o__valid o__payload.meta' "
    "START=30 ROWS=32 SVG=build/window.svg": _make_waves_svg,
    ".venv/bin/python -m tools.tshark build/spillway.top": _tshark,
    ".venv/bin/python -m tools.waves --list build/spillway.inswitch/<params>-vcd/random_traffic/dump.vcd": _waves_list,
    ".venv/bin/python -m tools.gtkw build/spillway.inswitch/<params>-vcd/random_traffic/dump.vcd": _gtkw,
    "make regress SEEDS=8 SHARD=2/4": _regress,
    "make regress-merge": _regress_merge,
    "make regress SEEDS=4 CLUSTER=local JOBS=2": _regress_cluster,
    "make mutants BLOCK=spillway.link CLUSTER=local MUTANT_ARGS='--id 42 --no-baseline'": _mutants_cluster,
    "make sweep NAME=esa GRID='slots=4,8 seed=1,2'": _sweep,
    ".venv/bin/python -m tools.cluster regress --cluster slurm --cluster-option queue=normal --cluster-option "
    "account=myproj --cluster-option walltime=01:00:00 --job-script": _job_script,
    "make coverage BLOCKS=spillway.inswitch": _coverage,
    "make mutants BLOCK=ev_expander N=3": _mutants,
    "make mutants BLOCK=all": _mutants_all,
    "make mutants BLOCK=all MUTANT_ARGS=--summary": _mutants_summary,
    ".venv/bin/python -m tools.mutants aggregator --list": _mutants_list,
    ".venv/bin/python -m tools.speed": _speed,
    ".venv/bin/python -m tools.blocks": _blocks,
    ".venv/bin/python -m tools.blocks --readme": _blocks_readme,
    ".venv/bin/python -m tools.scenario_table --docs": _scenario_table,
    ".venv/bin/python -m tools.proofs --docs": _proofs_docs,
    ".venv/bin/python -m tools.bench --from-csv build/bench/bench.csv --packets 100000 --docs": _bench_docs,
    ".venv/bin/python -m tools.fpga --from-csv build/fpga/fpga.csv --docs": _fpga_docs,
}


@pytest.fixture(scope="module")
def sh():
    return Shell(clone())


def test_smoke_forms_match_docs():
    commands = doc_commands()
    stale = [c for c in SMOKE if c not in commands]
    assert not stale, f"smoke forms of commands no longer in the docs: {stale}"
    assert set(EXCLUDED) <= set(commands)


@pytest.mark.parametrize("command", [c for c in doc_commands() if c not in EXCLUDED], ids=lambda c: c[:70])
def test_doc_command(sh, command):
    smoke = SMOKE.get(command)
    assert smoke is not None, f"documented command without a smoke form in testbenches/test_readme.py: {command}"
    if callable(smoke):
        smoke(sh)
    else:
        sh(smoke)

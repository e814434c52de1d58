"""Every ``tools.*`` CLI answers bad input with one line on stderr and a non-zero exit, and works on
good input. Waveforms: a VCD from Amaranth's simulator and an FST from Verilator's own writer."""
import os
import subprocess
import sys

import pytest
from amaranth.sim import Simulator

from registry import BLOCKS, ROOT
from testbenches.runner import verilator_env
from tools.waves import newest_dump

pytestmark = pytest.mark.xdist_group("cli")

#: A counter with a 1-bit ``valid``, dumped by Verilator's FST writer (``$dumpfile`` + --trace-fst).
COUNTER_V = """\
module top;
  reg clk = 0;
  reg [7:0] count = 0;
  reg valid = 0;
  always #5 clk = ~clk;
  always @(posedge clk) begin count <= count + 1; valid <= count[0]; end
  initial begin $dumpfile("dump.fst"); $dumpvars; #200 $finish; end
endmodule
"""


def cli(*args):
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def fails(tool, *args):
    """Run ``tools.<tool> args``: it must fail with one line ``<tool>: ...`` and no traceback."""
    result = cli(f"tools.{tool}", *args)
    assert result.returncode != 0, f"tools.{tool} {args} succeeded:\n{result.stdout}"
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{tool}: "), f"not one line:\n{result.stderr}"
    return lines[0]


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """``{name: path}`` of good and bad waveform files."""
    tmp = tmp_path_factory.mktemp("dumps")
    fifo = BLOCKS["packet_fifo"].build(BLOCKS["packet_fifo"].make_params({"data_bytes": 8}))
    sim = Simulator(fifo)
    sim.add_clock(1e-8)

    async def drive(ctx):
        ctx.set(fifo.o.ready, 1)
        for n in range(10):
            ctx.set(fifo.i.valid, 1)
            ctx.set(fifo.i.payload.data, n)
            await ctx.tick()
        ctx.set(fifo.i.valid, 0)
        await ctx.tick().repeat(4)

    sim.add_testbench(drive)
    with sim.write_vcd(str(tmp / "dump.vcd")):
        sim.run()
    vcd = (tmp / "dump.vcd").read_bytes()
    (tmp / "cut.vcd").write_bytes(vcd[:len(vcd) // 2 + 3])
    (tmp / "header_cut.vcd").write_bytes(vcd[:200] + b"\n")
    (tmp / "garbage.vcd").write_bytes(b"not a waveform\n")
    (tmp / "garbage.fst").write_bytes(b"\x00\x01garbage")

    verilator_env()
    work = tmp / "fst"
    work.mkdir()
    (work / "top.v").write_text(COUNTER_V)
    subprocess.run(["verilator", "--binary", "--trace-fst", "-Wno-fatal", "top.v", "-Mdir", "obj", "-o", "sim",
                    "-CFLAGS", "-fcoroutines"], cwd=work, check=True, capture_output=True)
    subprocess.run(["obj/sim"], cwd=work, check=True, capture_output=True)
    fst = (work / "dump.fst").read_bytes()
    (tmp / "cut.fst").write_bytes(fst[:len(fst) // 2])
    return {p.name: p for p in tmp.iterdir()} | {"dump.fst": work / "dump.fst", "dir": work}


@pytest.mark.parametrize("args, says", [
    (["nosuch.vcd"], "No such file"),
    (["{cut.vcd}"], "cut off"),
    (["{header_cut.vcd}"], "failed to load"),
    (["{garbage.vcd}"], "unknown file format"),
    (["{garbage.fst}"], "unknown file format"),
    (["{cut.fst}"], "failed to load"),
    (["{dump.vcd}", "no_such_signal"], "no signal matches no_such_signal"),
    (["{dump.fst}", "--clock", "count"], "no 1-bit clock"),
    (["{dump.vcd}", "--start", "-1"], "--start: must be at least 0"),
    (["{dump.vcd}", "--start", "1000"], "the waveform has 14 clock cycles"),
    (["{dump.vcd}", "--start", "x"], "--start: expected an integer"),
    (["{dump.vcd}", "--rows", "0"], "--rows: must be at least 1"),
    (["{dump.fst}", "--rows", "1.5"], "--rows: expected an integer"),
    (["{dir}"], "Is a directory"),
])
def test_waves_bad_input(dumps, args, says):
    args = [str(dumps[a.strip("{}")]) if a.startswith("{") else a for a in args]
    assert says in fails("waves", *args)


def test_waves_vcd(dumps):
    result = cli("tools.waves", str(dumps["dump.vcd"]), "o__valid", "i__payload.data", "--start", "2", "--rows", "3")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "(VCD" in lines[0]
    assert lines[1].split() == ["cycle", "time", "o__valid", "i__payload.data"]
    assert [line.split()[0] for line in lines[2:]] == ["2", "3", "4"]
    listed = cli("tools.waves", "--list", str(dumps["dump.vcd"])).stdout.split()
    assert "bench.top.o__valid" in listed and "bench.top.fifo.level" in listed


def test_waves_fst(dumps):
    result = cli("tools.waves", str(dumps["dump.fst"]), "count", "valid", "--start", "3", "--rows", "4")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "(FST" in lines[0]
    # sampled just before each rising edge (5, 15, 25, ...): count = cycle, valid = bit 0 of the cycle before
    assert [line.split() for line in lines[2:]] == [["3", "35", "3", "0"], ["4", "45", "4", "1"],
                                                    ["5", "55", "5", "0"], ["6", "65", "6", "1"]]
    assert cli("tools.waves", "--list", str(dumps["dump.fst"])).stdout.split() == ["top.clk", "top.count",
                                                                                   "top.valid"]


def test_waves_newest_dump(tmp_path):
    vcd, fst = tmp_path / "a" / "dump.vcd", tmp_path / "b" / "dump.fst"
    for path, mtime in ((vcd, 1000), (fst, 2000)):
        path.parent.mkdir()
        path.write_text("")
        os.utime(path, (mtime, mtime))
    assert newest_dump(tmp_path) == fst
    os.utime(vcd, (3000, 3000))
    assert newest_dump(tmp_path) == vcd
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no dump.vcd or dump.fst"):
        newest_dump(tmp_path / "empty")


def test_waves_newest_dump_is_the_users(tmp_path):
    """A newer dump inside a copy of the repository under build/ (the suite's clones in
    ``build/readme-*``, a mutation run's tree) is not the user's: the user's newest is shown."""
    own = tmp_path / "spillway" / "p3-vcd" / "random_traffic" / "dump.vcd"
    clone = tmp_path / "readme-gw1"
    copied = clone / "build" / "spillway.top" / "x-vcd" / "random_traffic" / "dump.vcd"
    for path, mtime in ((own, 1000), (copied, 2000)):
        path.parent.mkdir(parents=True)
        path.write_text("")
        os.utime(path, (mtime, mtime))
    (clone / "registry.py").write_text("")
    assert newest_dump(tmp_path) == own


def test_waves_unknown_signal_names_close_ones(dumps):
    """A signal name that matches nothing is an error naming the close matches, even beside names that
    match (it was dropped without a word, and a timing diagram drew the others)."""
    line = fails("waves", str(dumps["dump.vcd"]), "o__valid", "o__vaild", "i__payload.dat")
    assert "no signal matches o__vaild, close: o__valid" in line, line
    assert "no signal matches i__payload.dat, close: i__payload.data" in line, line
    assert "no signal matches nonexistent_sig (see --list)" in fails("waves", str(dumps["dump.vcd"]),
                                                                     "nonexistent_sig", "o__valid")


def test_report_unknown_block():
    assert "unknown block 'nosuchblock'; known: packet_fifo" in fails("report", "nosuchblock")


@pytest.mark.parametrize("args, says", [
    (["/nonexistent"], "git exited with status 128"),
    ([str(ROOT / ".git"), "--commit", "0" * 40], "git exited with status 128"),
    ([], "the following arguments are required: git_dir"),
])
def test_ocp_vectors_bad_input(args, says):
    assert says in fails("ocp_vectors", *args)


@pytest.mark.parametrize("args, says", [
    (["--burst-p", "2"], "Setting.burst_p, burst_load must be in 0..1"),
    (["--age-out", "20"], "Setting.age_out must be in 0..14, got 20"),
    (["--steps", "0"], "Setting.steps must be >= 1, got 0"),
    (["--seeds", "0"], "--seeds: must be in 1..1000"),
    (["--delta", "one"], "--delta: invalid int value"),
])
def test_sym_measure_bad_input(args, says):
    assert says in fails("sym_measure", *args)


def test_sym_measure(tmp_path):
    out = tmp_path / "sym.csv"
    result = cli("tools.sym_measure", "--seeds", "1", "--steps", "3", "--sweep", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_text().splitlines()[0] == "burst_p,delta,job,none,symphony,gain"
    assert len(out.read_text().splitlines()) == 1 + 4 * 3 * 2
    result = cli("tools.sym_measure", "--seeds", "1", "--steps", "3")
    assert result.returncode == 0, result.stderr
    assert [line.split()[:2] for line in result.stdout.splitlines()] == [["job", "A:"], ["job", "B:"]]


@pytest.mark.parametrize("args, says", [
    (["--slots", "0"], "AggregatorParams.slots = 0: must be in 1..65536"),
    (["--workers", "1"], "AggregatorParams.workers = 1"),
    (["--values", "1000"], "AggregatorParams"),
    (["--jobs", "0"], "--jobs: must be in 1..256"),
    (["--rounds", "70000"], "--rounds: must be in 1..65536"),
    (["--window", "0"], "--window: must be at least 1"),
    (["--slots", "two"], "--slots: invalid int value"),
])
def test_agg_measure_bad_input(args, says):
    assert says in fails("agg_measure", *args)


def test_agg_measure(tmp_path):
    out = tmp_path / "agg.csv"
    result = cli("tools.agg_measure", "--jobs", "2", "--rounds", "3", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_text().splitlines()[0].startswith("policy,job0_prio0,job1_prio1,mean_jct")
    assert [line.split()[0] for line in result.stdout.splitlines()[2:5]] == ["atp", "switchml", "esa"]


@pytest.mark.parametrize("args, says", [
    (["nosuchblock"], "unknown block 'nosuchblock'"),
    (["aggregator[nosuch]"], "unknown variant 'aggregator[nosuch]'; known: atp, switchml"),
    (["--packets", "0"], "--packets: must be at least 1"),
    (["--packets", "-3", "packet_fifo"], "--packets: must be at least 1"),
    (["--engines", "cocotb,nosuch", "packet_fifo"], "--engines: unknown engine nosuch; known: verilator-cpp"),
    (["--from-csv", "README.md"], "README.md: not a bench CSV"),
])
def test_bench_bad_input(args, says):
    assert says in fails("bench", *args)


@pytest.mark.parametrize("args, says", [
    (["--shard", "3/2"], "--shard: expected i/n with 1 <= i <= n (e.g. 2/4), got '3/2'"),
    (["--shard", "0/4"], "--shard: expected i/n"),
    (["--seeds", "0"], "--seeds: must be at least 1"),
    (["--first", "-1"], "--first: must be in 0..4294967295"),
    (["--first", "4294967295", "--seeds", "2"], "exceeds the 32-bit seed range"),
    (["--merge", "nosuch.xml"], "nosuch.xml: No such file"),
])
def test_regress_bad_input(args, says):
    assert says in fails("regress", *args)


def test_regress_shards(tmp_path):
    """Two shards of a two-seed sweep run every test once per seed; the merge counts them all. Written
    under ``tmp_path``: the user's ``build/regress`` is never touched (a later ``make regress-merge``
    would count these runs)."""
    test = "testbenches/test_headers.py"
    regress = ROOT / "build" / "regress"
    listing = lambda: {p: p.stat().st_mtime for p in regress.rglob("*")} if regress.exists() else {}  # noqa: E731
    before = listing()
    runs = [cli("tools.regress", "--seeds", "2", "--first", "7", "--shard", f"{i}/2", "--tests", test,
                "--out", str(tmp_path)) for i in (1, 2)]
    assert all(r.returncode == 0 for r in runs), [r.stdout[-2000:] for r in runs]
    merged = cli("tools.regress", "--out", str(tmp_path), "--merge", *(str(tmp_path / f"shard-{i}-of-2.xml")
                                                                       for i in (1, 2)))
    assert listing() == before, "wrote into build/regress"
    assert merged.returncode == 0, merged.stdout
    collected = cli("pytest", "--collect-only", "-q", test).stdout
    count = sum("::" in line for line in collected.splitlines())
    assert f"regress: {2 * count} test runs over 2 seeds, 0 failed" in merged.stdout, merged.stdout


def test_emit_unwritable(tmp_path):
    (tmp_path / "file").write_text("")
    assert "Not a directory" in fails("emit", "-o", str(tmp_path / "file" / "verilog"))
    assert "unknown block 'nosuch'" in fails("emit", "nosuch")


def test_emit(tmp_path):
    """Verilog of a block with packet ports (and its AXI4-Stream wrapper) and of one without; no
    Component is built and left unused (Amaranth's UnusedElaboratable warning: it built a block
    without packet ports twice, once only to look for packet ports)."""
    result = cli("tools.emit", "-o", str(tmp_path), "packet_fifo", "ev_expander")
    assert result.returncode == 0, result.stderr
    assert "module packet_fifo" in (tmp_path / "packet_fifo.v").read_text()
    assert "module ev_expander" in (tmp_path / "ev_expander.v").read_text()
    assert "UnusedElaboratable" not in result.stderr, result.stderr


def test_speed_bad_input(tmp_path):
    assert "No such file" in fails("speed", str(tmp_path / "none.csv"))
    (tmp_path / "bad.csv").write_text("fifo,tag,case,100,1.0\nnot,a,row\n")
    assert "bad.csv:2: expected block,tag,test,cycles,seconds" in fails("speed", str(tmp_path / "bad.csv"))
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00")
    assert "not a CSV file" in fails("speed", str(tmp_path / "binary.csv"))


def test_speed(tmp_path):
    (tmp_path / "speed.csv").write_text("fifo,tag,a,100,1.0\nfifo,tag,b,300,1.0\n")
    result = cli("tools.speed", str(tmp_path / "speed.csv"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].split() == ["fifo", "2", "400", "2.0", "200"]


def test_blocks():
    result = cli("tools.blocks")
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()[::2]] == list(BLOCKS)
    assert "unrecognized arguments: --nosuch" in fails("blocks", "--nosuch")


def test_coverage_merge_drops_bins_declared_unreachable_later(tmp_path, monkeypatch):
    """A test directory written before a bin was declared unreachable still lists it with 0 hits;
    the merge must not report it as a hole."""
    import json

    from tools import coverage
    monkeypatch.setattr(coverage, "BUILD", tmp_path)
    old = {"items": {"p": {"bins": {"a": 0, "b": 2}, "unreachable": {}}}}
    new = {"items": {"p": {"bins": {"b": 1}, "unreachable": {"a": "cannot happen"}}}}
    for test, record in (("old", old), ("new", new)):
        (tmp_path / "blk" / "x-cov" / test).mkdir(parents=True)
        (tmp_path / "blk" / "x-cov" / test / "functional.json").write_text(json.dumps(record))
    assert coverage.functional("blk") == {"p": {"bins": {"b": 3}, "unreachable": {"a": "cannot happen"}}}


def test_coverage_cross_counts_the_same_sample(tmp_path, monkeypatch):
    """A cross bin counts the points' values of the same ``sample`` call (cocotb-coverage samples an
    item before what it wraps: crosses once read the previous call's point hits)."""
    import json

    from testbenches import functional
    monkeypatch.setattr(functional, "run_dir", lambda: tmp_path)
    cover = functional.Coverage("selftest_cross")
    cover.point("a", ("x", "y"))
    cover.point("b", (1, 2))
    cover.cross("axb", "a", "b", unreachable={("y", 1): "never"})
    cover.sample(a="x", b=1)
    cover.sample(a="y", b=2)
    cover.sample(a="x")
    cover.write()
    bins = json.loads((tmp_path / "functional.json").read_text())["items"]["axb"]["bins"]
    assert bins == {"('x', 1)": 1, "('x', 2)": 0, "('y', 2)": 1}, bins


def test_coverage_bin_none_is_refused():
    """A missing value is None and hits no bin (``sample`` skips the points a call does not name), so None
    cannot be a bin."""
    from testbenches import functional
    with pytest.raises(ValueError, match="bins of point 'p'"):
        functional.Coverage("selftest_none").point("p", ("a", None))


def test_xdist_status_once():
    """Under ``make test`` (``-q -n 2``, output not a terminal) pytest-xdist's status line is written
    once, not "bringing up nodes..." twice."""
    result = cli("pytest", "-q", "-n", "2", "testbenches/test_headers.py")
    assert result.returncode == 0, result.stdout[-2000:]
    assert result.stdout.count("bringing up nodes...") == 1, result.stdout


def test_make_coverage_unknown_block():
    """``make coverage BLOCKS=nonexistent`` answers with one line naming the known blocks (it ran
    pytest on a missing file: "no tests ran ... Error 5")."""
    result = subprocess.run(["make", "coverage", "BLOCKS=nonexistent"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300, env={k: v for k, v in os.environ.items() if not k.startswith("MAKE")})
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if not line.startswith("make")]
    assert lines == ["blocks: unknown block 'nonexistent'; known: " + ", ".join(BLOCKS)], result.stderr
    assert "pytest" not in result.stdout, result.stdout

"""The mutation tool: its operators on a small Amaranth function, and a fixed sample of spill buffer
mutants that the spill buffer's testbench must kill (the sample CI runs; ``make mutants`` runs more)."""
import ast
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from registry import ROOT, block
from tools import sections
from tools.mutants import generate

pytestmark = pytest.mark.xdist_group("mutants")

SOURCE = '''\
def elaborate(self, platform):
    m = Module()
    count = Signal(4, init=3)
    with m.If((self.a < 5) & ~self.b):
        m.d.sync += count.eq(count + 1)
    m.d.comb += self.o.eq(count[0:2] | self.a)
    if self.mode == "x":
        m.d.comb += self.p.eq(1)
    m.d.comb += Assert(count < 9, "a property, not logic")
    return m


def _invariants(self, m):
    with m.If(self.a == 1):
        m.d.comb += [Assert(self.b), Cover(self.c)]
'''


def test_operators():
    mutants = generate(SOURCE)
    assert {m.operator for m in mutants} == {"cmp", "const", "arith", "logic", "drop", "init"}
    texts = [m.apply(SOURCE) for m in mutants]
    for text in texts:
        ast.parse(text)
        assert text != SOURCE
    assert len(set(texts)) == len(texts), "no mutant twice"
    changed = [m.describe(SOURCE)[1] for m in mutants]
    assert "with m.If(((self.a <= 5)) & ~self.b):" in changed, "a comparison swapped"
    assert "with m.If(((self.a < 5) | ~self.b)):" in changed, "an and made an or, in parentheses"
    assert "m.d.sync += count.eq(count + (2))" in changed, "a constant off by one"
    assert changed.count("pass") == 3, "each assignment dropped"
    assert not any("count[0:3]" in t or "count[1:2]" in t for t in texts), "slices are elaboration, not logic"
    assert not any("self.mode != 'x'" in t for t in texts), "a configuration choice is not a mutant"
    assert any("Signal(4, init=(0))" in t for t in texts), "a reset value changed"
    assert all("count < 9" in t and "self.a == 1" in t for t in texts), "properties are the proofs' code, not logic"


#: The fixed CI sample: the spill node's FIFO-full test at a frame's first beat, and its hold to the last.
SAMPLE = ("full = Mux(parser.first, port_ok & (counts[port] == C), full_held)", "m.d.sync += full_held.eq(full)")


def test_sample_killed():
    """Faults in the spill node's FIFO-full test: the testbench kills each (the testbench stage alone:
    no screening, no proofs, no miter)."""
    matches = [arg for text in SAMPLE for arg in ("--match", text)]
    listed = subprocess.run([sys.executable, "-m", "tools.mutants", "spillway.node", "--list", *matches], cwd=ROOT,
                            capture_output=True, text=True)
    count = len(listed.stdout.splitlines())
    assert listed.returncode == 0 and count >= 2, listed.stdout + listed.stderr
    out = ROOT / "build" / "mutants-selftest" / "sample"        # not the user's tables in build/mutants
    shutil.rmtree(out, ignore_errors=True)
    result = subprocess.run([sys.executable, "-m", "tools.mutants", "spillway.node", *matches, "--no-screen",
                             "--no-formal", "--no-miter", "--no-baseline", "--out", str(out.relative_to(ROOT))],
                            cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stderr
    assert f"testbench {count}, proof 0, proved equiv 0, bounded equiv 0, argued equiv 0, survivors 0; killed by " \
           "simulation 100.0 %" in result.stdout, result.stdout


def test_equivalent_not_counted(tmp_path, monkeypatch, capsys):
    """A survivor argued equivalent in the equivalence file is listed with its reason, not counted."""
    from tools import mutants
    argued = tmp_path / "equivalent.toml"
    argued.write_text('[[demo]]\nbefore = "x = a < b"\nafter = "x = (a <= b)"\nwhy = "a never equals b"\n')
    monkeypatch.setattr(mutants, "EQUIVALENT", argued)
    monkeypatch.setattr(mutants, "OUT", ROOT / "build" / "mutants-selftest")
    (ROOT / "build" / "mutants-selftest").mkdir(parents=True, exist_ok=True)
    rows = [dict(id=1, operator="cmp", line=3, sim="pass", formal="pass", before="x = a < b", after="x = (a <= b)"),
            dict(id=2, operator="drop", line=4, sim="fail", formal="pass", before="m.d.sync += y", after="pass")]
    mutants.report("demo", lambda line: f"hdl/demo.py:{line}", rows)
    out = capsys.readouterr().out
    assert "argued equivalent #1 cmp hdl/demo.py:3: x = a < b  ->  x = (a <= b): a never equals b" in out, out
    assert "2 mutants: invalid 0, screening 0, testbench 1, proof 0, proved equiv 0, bounded equiv 0, " \
           "argued equiv 1, survivors 0; killed by simulation 100.0 % of the non-equivalent" in out, out
    assert "survivor #" not in out, out
    argued.write_text('[[demo]]\nbefore = "x = a < b"\nafter = "x = (a <= b)"\nnth = 1\nwhy = "the second"\n')
    mutants.report("demo", lambda line: f"hdl/demo.py:{line}",
                   [dict(rows[0], nth=0), dict(rows[0], id=3, line=5, nth=1)])
    out = capsys.readouterr().out
    assert "equivalent #3" in out and "survivor #1" in out, "nth: only that mutant of the line text"


def test_argued_mutant_is_decided_by_its_argument(monkeypatch, capsys):
    """A mutant screening lets pass that ``tools/equivalent_mutants.toml`` argues equivalent runs no test (its
    argument decides it); ``--argued`` lists only such mutants and takes them through the tests."""
    from tools import campaign, mutants
    sources = mutants.Sources(block("ev_expander").sources())
    every, argued = generate(sources.text), mutants.equivalent("ev_expander")
    ranks = mutants._ranks(sources.text, every)
    is_argued = {m.id: bool(mutants.why_of(argued, dict(zip(("before", "after"), m.describe(sources.text)),
                                                        nth=ranks[m.id]))) for m in every}
    one, other = next(m for m in every if is_argued[m.id]), next(m for m in every if not is_argued[m.id])
    monkeypatch.setattr(mutants, "screen_block", lambda p, args, progress, work: {
        m.id: {"screen": "pass", "reason": "", "place": None} for m in (one, other)})
    ran = []
    monkeypatch.setattr(mutants.TestStage, "run", lambda self, p, row, place: ran.append(row["id"]))
    for options, tested in (([], [other.id]), (["--argued"], [one.id, other.id])):
        args = mutants.parser().parse_args(["ev_expander", "--no-miter", *options])
        plan = mutants.Plan(block("ev_expander"), sources, every, [one, other],
                            mutants.argued_ids("ev_expander", sources.text, every))
        rows = mutants.decide([plan], args, campaign.Progress(2))["ev_expander"]
        assert sorted(ran) == sorted(tested), options
        assert [mutants._fate(r, argued) for r in rows] == ["argued", "survivor"], rows
        ran.clear()
    capsys.readouterr()
    mutants.main(["ev_expander", "--argued", "--list"])
    listed = [int(line.split()[0]) for line in capsys.readouterr().out.splitlines()]
    assert one.id in listed and all(is_argued[n] for n in listed), listed


def test_likeliest_killers_run_first(monkeypatch):
    """``INNET_FIRST`` (the tests that killed a block's mutants so far, the testbench stage's order) moves those
    tests to the front of the session, in its order; the others keep theirs."""
    import conftest

    class Item:
        def __init__(self, nodeid):
            self.nodeid = nodeid

    class Config:
        option = None

        def getoption(self, name, default=None):
            return default
    items = [Item(f"testbenches/test_x.py::test_x[{k}]") for k in "abcd"]
    monkeypatch.setenv("INNET_FIRST", "testbenches/test_x.py::test_x[c],testbenches/test_x.py::test_x[a]")
    conftest.pytest_collection_modifyitems(Config(), items)
    assert [item.nodeid[-2] for item in items] == ["c", "a", "b", "d"]


def test_equivalences_are_mutants():
    """Every mutant argued equivalent is still a mutant of its block's source (no stale argument)."""
    import tomllib

    from tools import mutants
    argued = tomllib.loads(mutants.EQUIVALENT.read_text())
    assert argued, "the equivalence file argues no mutant"
    for name, entries in argued.items():
        source = mutants.Sources(block(name).sources()).text
        pairs = [m.describe(source) for m in generate(source)]
        for e in entries:
            assert pairs.count((e["before"], e["after"])) > e.get("nth", 0), \
                f"{name}: {e['before']} -> {e['after']} (nth {e.get('nth', 0)}) is no mutant"
            assert len(e["why"].split()) >= 10, f"{name}: {e['before']}: argue why no input tells them apart"


def test_rerun_merges(monkeypatch, capsys):
    """A run of some mutants replaces their rows of the block's CSV and keeps the others; rows of
    mutants the source no longer has are dropped, moved lines are followed; the summary counts the
    merged table, and ``--docs`` writes it into the page's generated section (here a page of the test's)."""
    from tools import mutants
    out = ROOT / "build" / "mutants-selftest" / "merge"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    monkeypatch.setattr(mutants, "OUT", out)
    source = mutants.Sources(block("ev_expander").sources()).text
    every, argued = generate(source), mutants.equivalent("ev_expander")
    ranks = mutants._ranks(source, every)
    first, second = [m for m in every if ranks[m.id] == 0 and not mutants.why_of(argued, dict(
        zip(("before", "after"), m.describe(source)), nth=0))][:2]          # not argued: --again lists them
    row = lambda m, sim: dict(id=m.id, operator=m.operator, line=m.line, nth=0, sim=sim,  # noqa: E731
                              formal="pass", before=m.describe(source)[0], after=m.describe(source)[1])
    stale = dict(row(second, "pass"), after="no such mutant")
    where = mutants.Sources(block("ev_expander").sources()).where
    mutants.report("ev_expander", where, [row(first, "pass"), row(second, "pass"), stale])
    rows = mutants.merged("ev_expander", source, [dict(row(second, "fail"), formal="fail")])
    assert [(r["id"], r["sim"]) for r in rows] == [(first.id, "pass"), (second.id, "fail")]
    mutants.report("ev_expander", where, rows)
    capsys.readouterr()
    mutants.main(["ev_expander", "--again", "--list"])
    assert [int(line.split()[0]) for line in capsys.readouterr().out.splitlines()] == [first.id], "--again: survivors"
    moved = mutants.merged("ev_expander", "# an edit above every line\n" + source, [])
    assert [(r["id"], r["line"]) for r in moved] == [(first.id, first.line + 1), (second.id, second.line + 1)]
    capsys.readouterr()
    mutants.summary(["ev_expander"])
    line = capsys.readouterr().out.splitlines()[1].split()
    assert line == ["ev_expander", str(len(generate(source))), "2", "0", "0", "1", "0", "0", "0", "0", "1", "50.0",
                    "%"], "invalid, screening, testbench, proof, proved, bounded, argued, survivors; simulation 1 of 2"
    out = ROOT / "build" / "mutants-selftest" / "docs.md"
    out.write_text("# page\n\n<!-- mutants -->\n<!-- /mutants -->\n")
    monkeypatch.setattr(mutants, "DOCS", out)
    mutants.main(["ev_expander", "--docs"])
    table = sections.body(out, "mutants").splitlines()
    assert table[0].startswith("| block | mutants | run | invalid | screening | testbench | proof |"), table
    assert table[2] == f"| ev_expander | {len(generate(source))} | 2 | 0 | 0 | 1 | 0 | 0 | 0 | 0 | 1 | 50.0 % |", table
    assert table[-1].startswith(f"- ev_expander #{first.id} `hdl/ev_expander.py:"), "each survivor, with its line"


def test_sim_tests_exist():
    """Every block's simulations that ``make mutants`` runs are tests pytest collects (a missing one
    would stop the run: pytest's usage errors are not kills)."""
    from registry import BLOCKS
    from tools import mutants
    paths = [path for b in BLOCKS.values() if b.name != "packet_fifo" for path in mutants.sim_tests(b)]
    assert "testbenches/spillway/test_top.py" in paths, "the whole Spillway, for its parts"
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *paths], cwd=ROOT,
                            capture_output=True, text=True)
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    with pytest.raises(RuntimeError, match="could not run"):
        mutants._pytest(ROOT, ["testbenches/test_soak.py::test_soak[no_such_block-soak]"], 1, 0, 600)


def _gone(pid, deadline=60):
    """Whether process ``pid`` has ended (gone, or a zombie) within ``deadline`` seconds: a process
    killed with SIGKILL is not gone at once, and on a busy machine its end can take a while."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.1)
    return False


def test_timeout_kills_the_group(tmp_path):
    """A test run past the timeout counts as a kill and leaves no process behind (the simulators it
    started die with it). The timeout leaves the hung test ample time to start its child on a busy
    machine; the child is then waited for, not checked at once."""
    from tools import mutants
    (tmp_path / "test_hang.py").write_text(
        "import subprocess, time\n"
        "def test_hang():\n"
        "    open('child.pid', 'w').write(str(subprocess.Popen(['sleep', '600']).pid))\n"
        "    time.sleep(600)\n")
    assert mutants._pytest(tmp_path, ["test_hang.py"], 1, 0, 15) == "timeout"
    child = int((tmp_path / "child.pid").read_text())
    assert _gone(child), "the hung test's child process survived the timeout"


def test_xdist_failure_is_a_kill(tmp_path):
    """Under pytest-xdist (``make mutants`` runs with ``JOBS=2``) a failing test is a kill, though
    ``pytest -x -n 2`` exits with 2 where plain ``pytest -x`` exits with 1; a module that cannot be
    collected is still no kill but a broken run."""
    from tools import mutants
    (tmp_path / "test_some.py").write_text("def test_a():\n    assert 0\n"
                                           + "".join(f"def test_{n}():\n    pass\n" for n in range(8)))
    (tmp_path / "test_pass.py").write_text("def test_ok():\n    pass\n")
    (tmp_path / "test_broken.py").write_text("import no_such_module\n")
    for jobs in (0, 2):
        assert mutants._pytest(tmp_path, ["test_some.py"], 1, jobs, 600) == "fail", jobs
        assert mutants._pytest(tmp_path, ["test_pass.py"], 1, jobs, 600) == "pass", jobs
        with pytest.raises(RuntimeError, match="could not run test_broken.py"):
            mutants._pytest(tmp_path, ["test_broken.py"], 1, jobs, 600)


#: Elaborate a registered block with its soak parameters (in a tree) and print its RTLIL without source
#: locations, for each mutant forced (``schemata.forcing``) given on the command line (``none``: no mutant's
#: site a choice, ``schemata.restricting``), or as it is.
ELABORATE = """
import sys
from amaranth.back import rtlil
from registry import block
from testbenches.checked import soak_params
from tools import schemata
b = block(sys.argv[1])
params = b.make_params(soak_params(b.name)['params'])
for n in [a if a == 'none' else int(a) for a in sys.argv[2:]] or [None]:
    with schemata.restricting(()) if n == 'none' else schemata.forcing(n):
        try:
            text = rtlil.convert(b.build(params), emit_src=False)
        except Exception as error:
            text = 'invalid: ' + type(error).__name__
    print(repr(text))
"""


def _elaborate(tree, name, *forced):
    done = subprocess.run([sys.executable, "-c", ELABORATE, name, *map(str, forced)], cwd=tree, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return [ast.literal_eval(line) for line in done.stdout.splitlines()]


def test_schemata_forced_is_the_ast_mutant(tmp_path):
    """Mutant n of a block's schemata, forced, elaborates to the very netlist of the AST mutant n (the
    mutant numbers and CSVs of the two are one), and the design forced to the original to the design's;
    the schemata holds every mutant as a run-time choice or an elaboration-time value, and restricted to
    no mutant's sites (``restricting``, a later design's screening) is the design. The sample: two of
    each operator of the chunk bitmap, and its static (elaboration-time) mutants' first two."""
    from tools import schemata
    from tools.mutants import Sources, copy_tree
    b = block("chunk_bitmap")
    sources = Sources(b.sources())
    mutants = generate(sources.text)
    held = set()
    for path, text, start in zip(sources.paths, sources.texts, sources.starts):
        held |= schemata.rewrite(text, mutants, start - 1)[1]
    assert held == {m.id for m in mutants}, "every mutant is in the schemata"
    sample = [m for op in ("cmp", "const", "arith", "logic", "drop")
              for m in [x for x in mutants if x.operator == op][:2]]
    sample += [m for m in mutants if "Signal(range(" in m.describe(sources.text)[0]][:2]
    rewritten, plain = tmp_path / "schemata", tmp_path / "ast"
    copy_tree(rewritten)
    schemata.write(sources, mutants, rewritten)
    copy_tree(plain)
    forced = _elaborate(rewritten, b.name, schemata.ORIGINAL, "none", *(m.id for m in sample))
    assert forced[0] == _elaborate(plain, b.name)[0], "forced to the original: the design"
    assert forced[1] == forced[0], "restricted to no mutant: the design"
    for m, netlist in zip(sample, forced[2:]):
        sources.write(plain, m.apply(sources.text))
        assert netlist == _elaborate(plain, b.name)[0], f"#{m.id} {m.describe(sources.text)}"


#: A toy design: four counters of ``range(n + 1)``, two read for their numbers (an add, a compare, a ``Mux``, a
#: slice within the narrower width), two for their widths (``~``, a ``Cat`` part below another).
TOY = """
from amaranth.hdl import Cat, Elaboratable, Module, Mux, Signal


class Toy(Elaboratable):
    def __init__(self, n):
        self.n, self.out = n, Signal(32)

    def elaborate(self, platform):
        m = Module()
        counter = Signal(range(self.n + 1))
        low = Signal(range(self.n + 1))
        masked = Signal(range(self.n + 1))
        catted = Signal(range(self.n + 1))
        m.d.sync += [counter.eq(counter + 3), low.eq(low + 5), masked.eq(masked + 1), catted.eq(catted + 1)]
        counted = Signal(8)
        m.d.comb += counted.eq(Mux(counter > 4, counter, 0))
        m.d.comb += self.out.eq(Cat(counted, low[:2], ~masked, catted, Signal(2, init=3)))
        return m
"""


def _toy(tmp_path, text):
    """The ``Toy`` class of ``text``, loaded from ``tmp_path``."""
    import importlib.util
    (tmp_path / "toy.py").write_text(text)
    spec = importlib.util.spec_from_file_location(f"toy_{abs(hash(text))}", tmp_path / "toy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Toy


def _trace(design, top=None, select=None, value=0, cycles=24):
    """``design.out`` (simulated as ``top``: its elaborated fragment) over ``cycles`` cycles, the mutant-select
    signal ``select`` at ``value``."""
    from amaranth.sim import Simulator
    seen = []

    async def bench(ctx):
        if select is not None:
            ctx.set(select, value)
        for _ in range(cycles):
            await ctx.tick()
            seen.append(ctx.get(design.out))
    simulator = Simulator(design if top is None else top)
    simulator.add_clock(1e-6)
    simulator.add_testbench(bench)
    simulator.run()
    return seen


def _schemata_trace(Toy, n, value):
    """``_trace`` of ``Toy(n)`` elaborated as a schemata, as screening elaborates one (every site a choice on a
    fresh mutant-select signal, narrowing sites narrowed), the mutant-select signal at ``value``."""
    from amaranth.hdl import Fragment

    from tools import schemata
    schemata.clear()
    with schemata.sharing() as select:
        design = Toy(n)
        fragment = Fragment.get(design, None)
        schemata.narrow(fragment)
    return _trace(design, fragment, select, value)


def test_narrowing_width_site_is_the_mutant(tmp_path):
    """A width site whose mutant narrows a signal (``range(n + 1)`` -> ``range(n - 1)``) is a run-time choice
    of the schemata where the signal is used for its number only: selected, the design runs as the AST mutant
    does (the counter wraps at the narrower width), unselected as the design; the same mutant of a signal
    whose width a use sees (``~``, a ``Cat`` part below another) stays static (a build of its own)."""
    from tools import schemata
    mutants = generate(TOY)
    lines = TOY.splitlines()
    narrowing = {lines[m.line - 1].split("=")[0].strip(): m for m in mutants
                 if m.operator == "arith" and "Signal(range(self.n + 1))" in lines[m.line - 1]}
    assert set(narrowing) == {"counter", "low", "masked", "catted"}
    Toy = _toy(tmp_path, schemata.rewrite(TOY, mutants)[0])
    plain = _trace(Toy(8))
    assert _schemata_trace(Toy, 8, 0) == plain
    seen = schemata.outcomes()
    assert {name: seen[m.id] for name, m in narrowing.items()} == {
        "counter": {"selected"}, "low": {"selected"}, "masked": {"static"}, "catted": {"static"}}, seen
    for name in ("counter", "low"):             # the low bits of a wrapping counter: the same at both widths
        mutant = _trace(_toy(tmp_path, narrowing[name].apply(TOY))(8))
        assert _schemata_trace(Toy, 8, narrowing[name].id + 1) == mutant, name
        assert (mutant != plain) == (name == "counter"), name


#: A toy design: five numbers of elaboration-time Python, given to Amaranth through a local name read only by a
#: compare (``top``), as an assignment's value (the mask), as a constant of a given width (``Const``), read by
#: Python itself (``wrap``: a signal's range), and bound to a name read only by code these parameters skip.
NUMBERS = """
from amaranth.hdl import Cat, Const, Elaboratable, Module, Mux, Signal


class Toy(Elaboratable):
    def __init__(self, n):
        self.n, self.out = n, Signal(32)

    def elaborate(self, platform):
        m = Module()
        top = (1 << self.n) - 1
        wrap = (1 << self.n) - 1
        spare = (1 << self.n) - 1
        counter, mask = Signal(8), Signal(8)
        if self.n > 8:
            m.d.sync += counter.eq(counter == spare)
        m.d.sync += counter.eq(Mux(counter == top, 0, counter + 1))
        m.d.comb += mask.eq((1 << self.n) - 1)
        m.d.comb += self.out.eq(Cat(counter, mask, Signal(range(wrap), init=1), Const((1 << self.n) - 1, 4)))
        return m
"""


def test_numbers_given_to_amaranth_are_choices(tmp_path):
    """A site whose value is an elaboration-time number is a run-time choice where the design gives the number
    to Amaranth only (through a name read only as another site's operand, as an assignment's value, or as a
    constant of a given width): selected, the design runs as the AST mutant does, unselected as the design; a
    number Python itself uses (a range) stays static, and one whose name the elaboration never reads is the
    design (same)."""
    from tools import schemata
    mutants = generate(NUMBERS)
    lines = NUMBERS.splitlines()
    numbers = {}
    for m in mutants:
        line = lines[m.line - 1].strip()
        if "(1 << self.n) - 1" in line and m.operator in ("arith", "const"):
            numbers.setdefault(line.split(" = ")[0] if " = " in line else "Const" if "Const" in line else "mask",
                               []).append(m)
    assert {name: len(ms) for name, ms in numbers.items()} == {name: 2 for name in ("top", "wrap", "spare", "mask",
                                                                                     "Const")}, numbers
    Toy = _toy(tmp_path, schemata.rewrite(NUMBERS, mutants)[0])
    plain = _trace(Toy(3))
    assert _schemata_trace(Toy, 3, 0) == plain
    seen = schemata.outcomes()
    assert {name: [seen[m.id] for m in ms] for name, ms in numbers.items()} == {
        **{name: [{"selected"}] * 2 for name in ("top", "mask", "Const")}, "wrap": [{"static"}] * 2,
        "spare": [{"same"}] * 2}, seen
    for m in numbers["top"] + numbers["mask"] + numbers["Const"]:
        mutant = _trace(_toy(tmp_path, m.apply(NUMBERS))(3))
        assert mutant != plain and _schemata_trace(Toy, 3, m.id + 1) == mutant, m.describe(NUMBERS)


def test_mutant_runs_share_an_up_to_date_schemata_build(tmp_path, monkeypatch):
    """A mutant's test run finds the shared schemata build up to date with the build's lock shared, as the
    other mutants' runs hold it while their simulators run (side by side, not one after another); it takes
    the lock exclusive only to write the schemata."""
    from testbenches import runner
    build_dir = tmp_path / "block" / "params"
    shared = build_dir.with_name("params-schemata")
    shared.mkdir(parents=True)
    modes, emitted = [], []
    monkeypatch.setattr(runner.fcntl, "flock", lambda file, mode: modes.append(mode))

    def emit(make, path, src):
        emitted.append(path)
        path.write_text("module top; endmodule")
        return {2: {"selected"}}
    monkeypatch.setattr(runner, "emit_schemata", emit)
    monkeypatch.setenv("INNET_MUTANT", "3")
    assert runner._build_of(build_dir, None, "stamp", {}, False)[0] == shared and emitted == [shared / "top.v"]
    assert modes == [runner.fcntl.LOCK_SH, runner.fcntl.LOCK_EX], "written under the lock exclusive"
    modes.clear()
    assert runner._build_of(build_dir, None, "stamp", {}, False)[2] == ["+INNET_MUTANT=3"]
    assert modes == [runner.fcntl.LOCK_SH] and len(emitted) == 1, "up to date: the lock shared only"


def _schemata_tree(tmp_path, sources, mutants):
    """A copy of the repository at ``tmp_path/schemata`` holding ``sources`` as the schemata of ``mutants``."""
    from tools import schemata
    from tools.mutants import copy_tree
    tree = tmp_path / "schemata"
    copy_tree(tree)
    schemata.write(sources, mutants, tree)
    return tree


def _screen(tree, name, *args, timeout=900):
    """The report (JSON) of ``python -m tools.screening name --out out.json *args`` run in ``tree``, its Verilator
    runtime objects the repository's (as a campaign's trees share them: compiled once, not once a test)."""
    import json

    from tools.campaign import OBJECTS
    subprocess.run([sys.executable, "-m", "tools.screening", name, "--out", "out.json", *args], cwd=tree, check=True,
                   capture_output=True, timeout=timeout, env=dict(os.environ, INNET_SCREEN_RUNTIME=str(OBJECTS)))
    return json.loads((tree / "out.json").read_text())


def test_screening_small_block(tmp_path):
    """The spill link's delay line, screened on one build of its schemata: the design passes its soak
    traffic, and each mutant the delay line elaborates is judged by the checked engine's verdict; the
    schemata's run-time choice of a mutant says what a build of that mutant alone (forced) says, and what a
    build of a few mutants' sites only (``--mutants``: the others the design's) says; with no run-time choice
    among them, nothing is built or run."""
    from tools import campaign
    from tools.mutants import Sources
    b = block("spillway.link")
    assert campaign.designs(b) == [("spillway.link", None), ("spillway.link", "tb-l1"), ("spillway.link", "tb-l7w48"),
                                   ("spillway.switch", None), ("spillway.top", None)]
    sources = Sources(b.sources())
    tree = _schemata_tree(tmp_path, sources, generate(sources.text))
    report = _screen(tree, b.name, "--packets", "2000")
    selected = sorted(int(n) for n, seen in report["outcomes"].items() if seen == ["selected"])
    assert selected and sorted(map(int, report["results"])) == selected, report["outcomes"]
    killed = [n for n in selected if report["results"][str(n)]["killed"]]
    assert killed and all(report["results"][str(n)]["reason"].startswith("checked: ") for n in killed), report
    forced = _screen(tree, b.name, "--packets", "2000", "--force", f"{killed[0]},{selected[-1]}")["results"]
    for n in (killed[0], selected[-1]):
        alone = forced[str(n)]
        assert [alone[k] for k in ("killed", "reason", "cycles")] == [report["results"][str(n)][k] for k in (
            "killed", "reason", "cycles")], (n, alone, report["results"][str(n)])
    whole = (tree / "build" / "screening" / b.name / "top.v").stat().st_size
    few = _screen(tree, b.name, "--packets", "2000", "--mutants", f"{killed[0]},{selected[-1]}")
    assert set(few["outcomes"]) == {str(killed[0]), str(selected[-1])}, few["outcomes"]
    assert few["results"] == {n: report["results"][n] | {"seconds": few["results"][n]["seconds"]}
                              for n in few["results"]}, "the same verdicts on a build of those mutants' sites"
    assert (tree / "build" / "screening" / b.name / "top.v").stat().st_size < whole
    other, seen = next((n, seen) for n, seen in report["outcomes"].items() if seen != ["selected"])
    alone = _screen(tree, b.name, "--packets", "2000", "--mutants", other)
    assert alone["outcomes"] == {other: seen} and alone["results"] == {} and alone["cycles"] is None, alone


def test_screening_checks_the_designs_invariants(tmp_path):
    """The DBLP tracker's bank accesses per cycle are instrumentation no output shows, bounded by one of its
    own invariants (``Assert(bank_users[k] <= 1)``, elaborated for simulation: ``runner.INVARIANTS``):
    screening kills the mutants of that count by the invariant's failure, with its message."""
    from tools.mutants import Sources
    b = block("bounded_loss_tracker")
    sources = Sources(b.sources())
    mutants = generate(sources.text)
    counting = [m.id for m in mutants if "self.bank_users[k].eq(" in sources.text.splitlines()[m.line - 1]]
    assert len(counting) >= 4
    tree = _schemata_tree(tmp_path, sources, mutants)
    results = _screen(tree, b.name, "--packets", "2000", "--mutants", ",".join(map(str, counting)))["results"]
    reasons = [results[str(n)]["reason"] for n in counting if results[str(n)]["killed"]]
    assert len(reasons) >= 4 and all(r.startswith("an invariant of the design failed at cycle ")
                                      and r.endswith("one access per cycle") for r in reasons), results


def test_stalling_mutant_stops_at_hang_times_the_design(tmp_path):
    """The EV expander's model is a transaction model (no cycle-exact end): its mutant that drops the input's
    ``ready`` stalls, and screening stops it at ``HANG`` times the cycles the design took on the same traffic
    (the design runs first), not at the engine's absolute limit, and says why."""
    from tools.mutants import Sources
    from tools.screening import HANG
    b = block("ev_expander")
    sources = Sources(b.sources())
    mutants = generate(sources.text)
    lines = sources.text.splitlines()
    stalling = next(m.id for m in mutants if m.operator == "drop" and "self.i.ready.eq(" in lines[m.line - 1])
    tree = _schemata_tree(tmp_path, sources, mutants)
    report = _screen(tree, b.name, "--packets", "2000", "--mutants", str(stalling))
    result, limit = report["results"][str(stalling)], HANG * report["cycles"]
    assert result["killed"] and result["cycles"] == limit, (report["cycles"], result)
    assert result["reason"].endswith(f"(stopped at {limit} cycles, {HANG} times the design's: it stalls)"), result


def test_elaboration_failing_at_other_parameters_kills(monkeypatch):
    """A mutant the block's soak design elaborates but a later design (a testbench's parameter set) cannot
    is caught by those parameters (killed, as the testbench's elaboration would fail); one that no design
    before elaborates is invalid. A design nothing was built for (no run-time choice) is no schemata build in
    the closing line."""
    from tools import campaign
    b = block("aggregator")
    first, later = campaign.designs(b)[0], campaign.designs(b)[-1]
    reports = {first: {"outcomes": {"1": ["selected"]}, "results": {"1": {"killed": False}}, "cycles": 9,
                       "seconds": {"runs": 0.1}},
               later: {"outcomes": {"1": ["invalid"], "2": ["invalid"]}, "results": {}, "cycles": None,
                       "seconds": {"runs": 0.0}}}
    monkeypatch.setattr(campaign, "designs", lambda block: [first, later])
    monkeypatch.setattr(campaign.Screening, "_screening", lambda self, design, variant, *args: reports[design, variant])
    screening = campaign.Screening(b, ROOT, [1, 2], 10, 1)
    progress = campaign.Progress(2)
    screening.run(progress)
    verdicts = screening.verdicts()
    assert verdicts[1]["screen"] == "killed" and verdicts[1]["place"] == first, verdicts
    assert verdicts[2]["screen"] == "invalid", verdicts
    assert (progress.builds, progress.runs) == (1, 1), progress.summary()


def test_forced_elaboration_that_loops_is_invalid(tmp_path):
    """A static mutant whose elaboration never ends (the register file's minimum tree: ``while len(others) >
    1`` -> ``>= 1``) is invalid once the elaboration limit passes, not a screening slot held for the whole
    screening timeout; the mutant after it in the same process is still screened."""
    from tools.mutants import Sources
    b = block("progress_regfile")
    sources = Sources(b.sources())
    mutants = generate(sources.text)
    loop, bound = [m for m in mutants if "while len(others)" in m.describe(sources.text)[0]]
    assert loop.describe(sources.text)[1] == "while (len(others) >= 1):", loop.describe(sources.text)
    tree = _schemata_tree(tmp_path, sources, mutants)
    results = _screen(tree, b.name, "--packets", "200", "--force", f"{loop.id},{bound.id}", "--elaboration-limit",
                      "8", timeout=300)["results"]          # over ten times the design's (0.6 s)
    assert results[str(loop.id)] == {"invalid": True, "reason": "TimeoutError: its elaboration ran past 8 s"}, results
    assert "killed" in results[str(bound.id)], results


def test_miter_proves_a_known_equivalent(tmp_path):
    """The in-switch spill buffer's round-robin pointer stored as P after port P - 1 (instead of 0) was
    argued equivalent in tools/equivalent_mutants.toml; the miter proves it (Yosys's equivalence passes
    over the two netlists from the same initial state). It does not prove equivalent the mutant that writes a
    packet into the spill core's FIFO memories of every other port (memories are compared as memories)."""
    from tools.mutants import Sources
    b = block("spillway.inswitch")
    sources = Sources(b.sources())
    mutants = generate(sources.text)
    rr = [m for m in mutants if m.describe(sources.text)[1].endswith("Mux(chosen == (P + 1), 0, chosen + 1))")]
    assert len(rr) == 1, "the argued mutant is still a mutant of the spill core"
    misplaced = [m for m in mutants if m.describe(sources.text)[1].strip() == "push = self.spill & ((port != p))"]
    assert len(misplaced) == 1, "the spill core still pushes into its FIFOs the same way"
    tree = _schemata_tree(tmp_path, sources, mutants)
    code = ("from pathlib import Path; from tools.miter import proof; "
            f"print([proof({b.name!r}, n, None, Path(f'equiv-{{n}}'), 600) for n in ({rr[0].id}, {misplaced[0].id})])")
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True, text=True, timeout=900)
    assert done.stdout.strip().splitlines()[-1:] == ["[True, False]"], done.stdout[-1000:] + done.stderr[-2000:]


def test_run_mutant(tmp_path):
    """One mutant of one block through the stages, as a distributed campaign takes it: the delay line's
    mutant #37 (its input never ready) is killed by screening, and its CSV row says so; an unknown option
    is a TypeError naming it."""
    from tools.mutants import _fate, run_mutant
    with pytest.raises(TypeError, match="no_such_option"):
        run_mutant("spillway.link", 37, no_such_option=1)
    row = run_mutant("spillway.link", 37, packets=2000, out=str(tmp_path), no_formal=True, no_miter=True)
    assert row["id"] == 37 and row["screen"] == "killed" and _fate(row, {}) == "screening", row
    assert row["reason"].startswith("spillway.link: checked: "), row
    assert not (tmp_path / "spillway.link.csv").exists(), "the row is the caller's to merge"


def test_testbench_stage_shares_one_build(tmp_path):
    """The testbench stage runs each mutant in the block's schemata tree (``INNET_MUTANT``): the design and a
    run-time mutant share one Verilator build, the simulator given the mutant (the delay line's input ready
    inverted, #38, fails its cocotb test, the design passes it, the build untouched between them); a Python
    simulation builds the AST mutant itself (the encapsulator's last beat ORed, #5, fails its pysim test)."""
    from tools.mutants import Sources, _pytest
    b = block("spillway.link")
    sources = Sources(b.sources())
    mutants = generate(sources.text)
    assert "self.i.ready.eq((self.pause))" in mutants[38].describe(sources.text)[1]
    assert "out.last.eq((beat.last | ~spills))" in mutants[5].describe(sources.text)[1]
    tree = _schemata_tree(tmp_path, sources, mutants)
    cocotb_test = ["testbenches/spillway/test_link.py::test_link[l1-random_frames]"]
    assert _pytest(tree, cocotb_test, 1, 0, 900, 0) == "pass"
    builds = sorted(p.name for p in (tree / "build" / "spillway.link").iterdir())
    assert len(builds) == 1 and builds[0].endswith("-schemata"), builds
    design = tree / "build" / "spillway.link" / builds[0] / "Vtop__ALL.o"
    built = design.stat().st_mtime_ns
    assert _pytest(tree, cocotb_test, 1, 0, 900, 38 + 1) == "fail"
    assert design.stat().st_mtime_ns == built, "the mutant ran on the design's build"
    pysim_test = ["testbenches/spillway/test_link.py::test_encapsulator[64]"]
    assert _pytest(tree, pysim_test, 1, 0, 900, 0) == "pass"
    assert _pytest(tree, pysim_test, 1, 0, 900, 5 + 1) == "fail"


def test_screen_only_forces_constructor_sites(tmp_path):
    """``--screen-only`` screens and lists, writing no CSV; a mutant of a value the constructor sets (the
    tracker's slots dirty at reset: ``init=1`` -> 0, elaboration-time) is screened on a build of its own
    with the constructor's sites forced too, and the soak's opening packet into the reset wipe kills it."""
    out = tmp_path / "mutants"
    done = subprocess.run([sys.executable, "-m", "tools.mutants", "bounded_loss_tracker", "--match",
                           'regs("dirty", 1, init=1)', "--screen-only", "--packets", "300", "--jobs", "1",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mutants: bounded_loss_tracker: 1 screened: killed 1, invalid 0, pass 0" in done.stdout, done.stdout
    assert "on builds of their own: #" in done.stdout and " killed" in done.stdout, done.stdout
    assert re.search(r"^mutants: 1 of 1 decided in \d+ s; screening: 0 mutant runs on \d+ schemata builds in [\d.]+ s "
                     r"of C\+\+ simulation; static mutants on builds of their own: 1$", done.stdout, re.M), done.stdout
    assert not (out / "bounded_loss_tracker.csv").exists()
    both = subprocess.run([sys.executable, "-m", "tools.mutants", "bounded_loss_tracker", "--screen-only",
                           "--no-screen"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert both.returncode != 0 and "--screen-only and --no-screen" in both.stderr, both.stderr


def test_blocks_take_turns_by_their_screening():
    """In a stage, the block with the most screening (mutants times designs) goes first, whatever order its
    thread submits in: the aggregator (six designs) before the delay line's link (two)."""
    import threading

    from tools import mutants
    from tools.priority_pool import PriorityPool
    args = mutants.parser().parse_args(["all"])
    plans = [mutants.select(name, args) for name in ("spillway.link", "aggregator")]
    turns = mutants._turns(plans)
    assert turns == {"aggregator": 0, "spillway.link": 1}, turns
    started, order = threading.Event(), []
    with PriorityPool(1) as pool:
        busy = pool.submit((0, 0), started.wait, 10)
        link, aggregator = (mutants._Turn(pool, turns[name]) for name in ("spillway.link", "aggregator"))
        waiting = [link.submit("screening", order.append, "link screening"),
                   aggregator.submit("screening", order.append, "aggregator screening"),
                   link.submit("tests", order.append, "link tests")]
        started.set()
        busy.result()
        for future in waiting:
            future.result()
    assert order == ["link tests", "aggregator screening", "link screening"]

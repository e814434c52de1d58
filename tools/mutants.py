"""Mutation run of one block or all: ``python -m tools.mutants BLOCK|all [--n N] [--seed S] [--list] [--summary]``.

Mutants are small faults put into the block's RTL sources (its Component's module and its ``parts``:
``registry.Block.sources()``), one at a time, by
source-level operators on the code that builds logic (functions that add to ``m.d``):

- ``cmp``: ``<`` and ``<=``, ``>`` and ``>=``, ``==`` and ``!=`` swapped;
- ``const``: an integer compared with or added to a signal off by one (``n`` -> ``n + 1``);
- ``arith``: ``+`` and ``-`` swapped;
- ``logic``: ``&`` and ``|`` swapped, ``~x`` -> ``x``;
- ``drop``: an assignment ``m.d.<domain> += ...`` removed (a register not updated, a signal left
  at its default);
- ``init``: a signal's ``init=`` value changed (a register reset to the wrong value).

``Assert``/``Assume``/``Cover`` calls in a block's source (invariants for the proofs) are not
mutated: they are verification code, not the design.

``--n`` draws that many with ``--seed`` (the same sample every time). Each mutant goes through the
stages until one decides it (``_fate``):

1. *screening* (tools/campaign.py, tools/screening.py): every mutant of the block in one design, a
   mutant schemata (tools/schemata.py) picked by a mutant-select input, in
   ``build/mutants/<block>/schemata``; the checked engine runs the soak traffic against each mutant in
   turn at C++ speed, the golden model's expected outputs computed once; the first mismatch, or a failed
   invariant of the design (its own ``Assert`` statements, which the engine simulates), kills;
2. a survivor argued equivalent in ``tools/equivalent_mutants.toml`` is decided by its argument
   (``--argued`` runs the stages below on the argued mutants instead: a wrong argument shows as a kill);
   the others run the block's simulations (``sim_tests``: its testbench ``registry.Block.testbench()``,
   the other testbenches that exercise it, its soak run unless screened), then, if they pass, its proofs
   (``Block.proofs()``), a pytest session each stopping at the first failure (``TestStage``), ``--jobs``
   processes at a time in the schemata tree; a test that fails counts only if the unmutated design passes
   it; a mutant Amaranth cannot elaborate is ``invalid``;
3. what is left goes to the *miter* (tools/miter.py): proved equivalent to the design, or not;
4. only then does a survivor need an argument in ``tools/equivalent_mutants.toml``, or a new test or
   property that kills it.

The report (terminal and ``build/mutants/<block>.csv``) counts the mutants each stage decided, the share
of the non-equivalent ones simulation (screening and testbenches) killed, and lists every survivor with
its line and why it is left; ``--summary`` prints the table of every block's CSV, ``--docs`` writes it
into docs/verification.md. A run ends with one line: the mutants decided, its time, and screening's
throughput (mutant runs per second of C++ simulation, on how many schemata builds; the static mutants
screened on builds of their own).
"""
import ast
import collections
import csv
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import tomllib
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import registry
from registry import ROOT, block
from testbenches import runner
from tools import campaign, schemata, sections
from tools.cli import Parser, integer, run
from tools.priority_pool import PriorityPool

OUT = ROOT / "build" / "mutants"
#: The surviving mutants argued equivalent, per block: ``[[<block>]]`` tables of before, after, why
#: (and nth, when several mutants have that line text).
EQUIVALENT = ROOT / "tools" / "equivalent_mutants.toml"
#: Directories and files the copy needs to build and test a block.
COPY = ("hdl", "models", "testbenches", "formal", "scenarios", "tools", "registry.py", "conftest.py",
        "pyproject.toml")
CHECKS = ("Assert", "Assume", "Cover")
KILLED = ("fail", "timeout")
SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
#: Seconds a mutant's test run may take before it counts as killed (a hang the tests' bounds missed).
TIMEOUT = 1800
#: Packets of soak traffic a screening run sends (the soak's 1e5), and the miter's bounded depth.
PACKETS, DEPTH = 100_000, 10
#: Static mutants (elaboration-time sites) a screening process builds one by one (one traffic, one model).
STATICS = 8
#: The order the campaign's processes take their turns in (``tools.priority_pool``): a mutant's tests and miter
#: (the longest runs, whose block is otherwise decided last) before static builds, before the next screening;
#: within a stage, by the blocks' turns (``_turns``).
RANK = {"tests": 0, "static": 1, "screening": 2}
#: The page holding the campaign's table (``--docs``).
DOCS = ROOT / "docs" / "verification.md"


#: The line that joins a block's source files into the one text its mutants are numbered over.
JOIN = "# --- innet mutants: next file {path}"


class Sources:
    """A block's source files as one text (``text``), joined by ``JOIN`` lines: its mutants are
    generated, numbered and described on it; ``where`` maps a line of it to its file and line;
    ``write`` puts a (mutated) text back into the files under a tree."""

    def __init__(self, paths, root=None):
        root = root or ROOT
        self.paths = list(paths)
        self.texts = [(root / p).read_text() for p in self.paths]
        self.text = "".join(f"{JOIN.format(path=p)}\n{t}" for p, t in zip(self.paths, self.texts))
        self.starts, line = [], 1
        for text in self.texts:
            self.starts.append(line + 1)              # the file's first line, after its JOIN line
            line += 1 + text.count("\n")

    def where(self, line):
        """``path:line`` of a line of ``text``."""
        k = max(i for i, start in enumerate(self.starts) if start <= line)
        return f"{self.paths[k]}:{line - self.starts[k] + 1}"

    def write(self, root, text):
        """Write ``text`` (``self.text``, mutated) back into the files under ``root``."""
        parts = text.split("\n")
        chunks, current = {}, None
        for line in parts:
            if line.startswith(JOIN.format(path="")):
                current = line[len(JOIN.format(path="")):]
                chunks[current] = []
            else:
                chunks[current].append(line)
        for path, lines in chunks.items():
            text = "\n".join(lines)
            (root / path).write_text(text if text.endswith("\n") else text + "\n")


@dataclass
class Mutant:
    id: int
    operator: str
    line: int
    start: tuple        # (line, col) of the replaced source segment
    end: tuple
    text: str           # the replacement

    def apply(self, source):
        lines = source.splitlines(keepends=True)
        offset = [0]
        for line in lines:
            offset.append(offset[-1] + len(line))
        a = offset[self.start[0] - 1] + self.start[1]
        b = offset[self.end[0] - 1] + self.end[1]
        return source[:a] + self.text + source[b:]

    def describe(self, source):
        before = source.splitlines()[self.line - 1].strip()
        after = self.apply(source).splitlines()[self.line - 1].strip()
        return before, after


def _is_check(node):
    """An ``Assert``/``Assume``/``Cover`` call: a property for the proofs, not logic of the design."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CHECKS


def _adds(function):
    """The values a function adds to ``m.d.<domain>``, each list flattened."""
    for node in ast.walk(function):
        if (isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute)
                and ast.unparse(node.target.value) == "m.d"):
            yield from node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]


def _logic_functions(tree):
    """Function definitions that add logic to ``m.d`` (not only properties: those are the proofs' code)."""
    functions = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)]
    return [f for f, adds in ((f, list(_adds(f))) for f in functions) if adds and not all(map(_is_check, adds))]


def _replace(node, new, operator, found):
    text = ast.unparse(new)
    found.append((operator, node.lineno, (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset),
                  text if isinstance(new, ast.stmt) else f"({text})"))


def _is_int(node):
    return isinstance(node, ast.Constant) and type(node.value) is int


def generate(source):
    """Every mutant of ``source``, in source order."""
    tree = ast.parse(source)
    found, seen = [], set()
    for node in ast.walk(tree):       # bit positions and widths are elaboration-time Python, not logic
        if isinstance(node, ast.Subscript):
            seen.update(id(n) for n in ast.walk(node.slice))
        elif _is_check(node):
            seen.update(id(n) for n in ast.walk(node))
    for function in _logic_functions(tree):
        for node in ast.walk(function):
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and not any(
                    isinstance(side, ast.Constant) and isinstance(side.value, str)
                    for side in (node.left, *node.comparators)):     # a configuration choice, not logic
                op = type(node.ops[0])
                if op in SWAP:
                    _replace(node, ast.Compare(node.left, [SWAP[op]()], node.comparators), "cmp", found)
                for side in (node.left, node.comparators[0]):
                    if _is_int(side):
                        _replace(side, ast.Constant(side.value + 1), "const", found)
            elif isinstance(node, ast.BinOp):
                if isinstance(node.op, (ast.Add, ast.Sub)):
                    other = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
                    _replace(node, ast.BinOp(node.left, other, node.right), "arith", found)
                    for side in (node.left, node.right):
                        if _is_int(side) and not _is_int(node.left if side is node.right else node.right):
                            _replace(side, ast.Constant(side.value + 1), "const", found)
                elif isinstance(node.op, (ast.BitAnd, ast.BitOr)):
                    other = ast.BitOr() if isinstance(node.op, ast.BitAnd) else ast.BitAnd()
                    _replace(node, ast.BinOp(node.left, other, node.right), "logic", found)
            elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
                _replace(node, node.operand, "logic", found)
            elif (isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute)
                  and ast.unparse(node.target.value) == "m.d" and not all(map(_is_check, _adds(node)))):
                _replace(node, ast.Pass(), "drop", found)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in ("init", "reset") and _is_int(node.value):
            _replace(node.value, ast.Constant(0 if node.value.value else 1), "init", found)
    found.sort(key=lambda m: (m[2], m[3]))
    return [Mutant(n, *m) for n, m in enumerate(found)]


def copy_tree(dest):
    """A copy of the repository's sources at ``dest`` (its build cache kept between mutants)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in COPY:
        src, dst = ROOT / name, dest / name
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dst)
    venv = dest / ".venv"
    if not venv.exists():
        venv.symlink_to(ROOT / ".venv")


def sim_tests(b, soak=True):
    """The tests that simulate block ``b``, in the order run: its testbench, the other testbenches
    that exercise it (``Block.tests``), its soak run (``soak``: a mutant screening let pass has been
    through the soak's traffic already, at C++ speed)."""
    return [b.testbench(), *b.tests, *([f"testbenches/test_soak.py::test_soak[{b.name}-soak]"] if soak else [])]


def _pytest(tree, paths, seed, jobs, timeout, mutant=None, env=None):
    """The verdict of ``_run_tests`` alone: "pass", "fail" or "timeout"."""
    return _run_tests(tree, paths, seed, jobs, timeout, mutant, env)[0]


def _run_tests(tree, paths, seed, jobs, timeout, mutant=None, env=None):
    """Run the tests ``paths`` in ``tree`` (a schemata tree: on ``mutant``, its mutant-select value, ``n + 1``
    for mutant ``n``, 0 for the design; ``env``: more variables) stopping at the first failure: (verdict,
    test), the verdict "pass", "fail" or "timeout", the test the pytest node id of the failing one (None
    unless "fail"); ``RuntimeError`` when pytest cannot run them (a test path that does not exist, a usage
    error, a module that does not import).

    A failure is read from the run's JUnit file, not from the exit status: under pytest-xdist,
    ``pytest -x -n N`` exits with 2 (interrupted) on a failing test, where plain ``pytest -x`` exits
    with 1; 2 is also a collection error, which is no kill."""
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "results.xml"
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--junitxml", str(junit),
                   *paths, *(["-n", str(jobs)] if jobs else [])]
        # its own process group: a timeout kills the simulators pytest started too, not pytest alone; every
        # tree's builds start from this repository's Verilator runtime objects (compiled once, not once a tree)
        env = dict(os.environ, INNET_SEED=str(seed), INNET_VERILATOR_RUNTIME=str(runner.RUNTIME_CACHE),
                   **(env or {}), **({} if mutant is None else {schemata.MUTANT: str(mutant)}))
        with subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) as process:
            try:
                output, _ = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                campaign.kill_session(process.pid)
                process.communicate()
                return "timeout", None
        if process.returncode == 0:
            return "pass", None
        failing = _failed(junit) if process.returncode in (1, 2) else None
        if failing:
            return "fail", failing
    tail = output.strip().splitlines()[-1:] or [""]
    raise RuntimeError(f"pytest could not run {' '.join(paths)} (exit {process.returncode}): {tail[0]}")


def _failed(junit):
    """The node id of the first test the JUnit file ``junit`` records as failed or erred, or None (a module
    that could not be collected is not one: that is a broken run, not a kill). The suite's tests are module
    functions, so a case's class name is its module's dotted path (as ``tools.regress`` reads it too)."""
    if not junit.exists():
        return None
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        if case.find("failure") is not None or any(e.get("message") != "collection failure"
                                                   for e in case.findall("error")):
            return f"{case.get('classname').replace('.', '/')}.py::{case.get('name')}"
    return None


def valid(tree, name, mutant):
    """Whether the block in the schemata ``tree``, as ``mutant`` (its mutant-select value), elaborates and converts
    to RTLIL."""
    code = f"from amaranth.back import rtlil; from registry import block; rtlil.convert(block({name!r}).build())"
    return subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True,
                          env=dict(os.environ, **{schemata.MUTANT: str(mutant)})).returncode == 0


def parser():
    """The command line of ``main`` (and the options ``run_mutant`` takes)."""
    parser = Parser(prog="mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("block", help="a registered block, or all (every block with logic of its own)")
    parser.add_argument("--n", type=integer(1), default=None, help="mutants to draw per block (default: all)")
    parser.add_argument("--seed", type=integer(0), default=1, help="sample seed and traffic seed (default 1)")
    parser.add_argument("--match", action="append", default=[],
                        help="only mutants of source lines containing this text (repeatable: any of them)")
    parser.add_argument("--id", type=integer(0), action="append", default=[],
                        help="only this mutant (repeatable; the numbers --list and the report print)")
    parser.add_argument("--again", action="store_true",
                        help="only the mutants of the block's CSV that no stage killed or showed equivalent (and "
                             "are not argued equivalent), run again (after a new test or property)")
    parser.add_argument("--argued", action="store_true",
                        help="only the mutants argued equivalent in tools/equivalent_mutants.toml, through every "
                             "stage (the campaign takes an argument as the verdict and runs none): a wrong "
                             "argument shows as a kill, which the report warns of")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--summary", action="store_true",
                        help="print the table of the results in build/mutants/, run nothing")
    parser.add_argument("--docs", action="store_true",
                        help="write that table into docs/verification.md, run nothing")
    parser.add_argument("--out", default=None,
                        help="directory of the trees and CSVs, under the repository (default build/mutants)")
    parser.add_argument("--jobs", type=integer(0), default=0,
                        help="processes at a time: screening builds, mutants' test runs, miters (0 = 1)")
    parser.add_argument("--packets", type=integer(1), default=PACKETS, help=f"screening packets ({PACKETS})")
    parser.add_argument("--depth", type=integer(1), default=DEPTH, help=f"the miter's bounded depth ({DEPTH})")
    parser.add_argument("--miter-timeout", type=integer(1), default=campaign.MITER,
                        help=f"seconds a miter may take; past them the mutant survives ({campaign.MITER})")
    parser.add_argument("--no-screen", action="store_true", help="no screening: every mutant runs the testbenches")
    parser.add_argument("--screen-only", action="store_true",
                        help="screening only: list the mutants it lets pass (its survivors), write no CSV")
    parser.add_argument("--no-formal", action="store_true", help="no proofs")
    parser.add_argument("--no-miter", action="store_true", help="no equivalence miter")
    parser.add_argument("--no-baseline", action="store_true",
                        help="count a failing test as a kill without checking that the unmutated design passes it")
    return parser


def _use_out(args):
    if args.out is not None:
        global OUT
        OUT = ROOT / args.out


def main(argv=None):
    args = parser().parse_args(argv)
    _use_out(args)
    if args.block == "all":
        if args.match or args.id:
            raise ValueError("--match and --id need one block, not all")
        names = [n for n in registry.names() if generate(Sources(block(n).sources()).text)]
    else:
        names = [block(args.block).name]
    if args.screen_only and args.no_screen:
        raise ValueError("--screen-only and --no-screen: choose one")
    if args.docs:
        changed = sections.rewrite(DOCS, "mutants", markdown(names))
        print(f"{'written' if changed else 'unchanged'}: {DOCS.relative_to(ROOT)} (mutants table)")
        return
    progress = None
    if not args.summary:
        plans = [plan for plan in (select(name, args) for name in names) if plan]
        if plans and not args.list:
            progress = campaign_run(plans, args)
    if args.summary or (len(names) > 1 and not args.screen_only):
        summary(names)
    if progress:
        print(progress.summary())


@dataclass
class Plan:
    """The mutants of one block a run takes (``mutants``), of all its mutants (``every``) on ``sources``; the ids
    of those argued equivalent (``argued``: ``argued_ids``)."""
    block: object
    sources: Sources
    every: list
    mutants: list
    argued: set


def select(name, args):
    """The ``Plan`` of block ``name`` for ``args`` (listed and None with ``--list``)."""
    b = block(name)
    sources = Sources(b.sources())
    path, source = " ".join(sources.paths), sources.text
    mutants = every = generate(source)
    if not mutants:
        raise ValueError(f"{path} builds no logic of its own to mutate (only submodules)")
    for text in args.match:
        if not any(text in source.splitlines()[m.line - 1] for m in mutants):
            raise ValueError(f"--match {text!r}: no mutant of a line containing it in {path}")
    if args.match:
        mutants = [m for m in mutants if any(text in source.splitlines()[m.line - 1] for text in args.match)]
    for n in args.id:
        if n >= len(every):
            raise ValueError(f"--id {n}: {path} has mutants 0..{len(every) - 1}")
    if args.id:
        mutants = [m for m in mutants if m.id in args.id]
    if args.again:
        argued = equivalent(b.name)
        left = {int(r["id"]) for r in merged(b.name, source, []) if _fate(r, argued) == "survivor"}
        mutants = [m for m in mutants if m.id in left]
    argued = argued_ids(b.name, source, every)
    if args.argued:
        mutants = [m for m in mutants if m.id in argued]
    if args.n is not None and args.n < len(mutants):
        mutants = sorted(random.Random(args.seed).sample(mutants, args.n), key=lambda m: m.id)
    if args.list:
        for m in mutants:
            before, after = m.describe(source)
            print(f"{m.id:4} {m.operator:6} {sources.where(m.line)}: {before}  ->  {after}")
        return None
    return Plan(b, sources, every, mutants, argued)


def run_mutant(name, mutant, **options):
    """Mutant ``mutant`` (its id, as ``--list`` prints it) of block ``name`` through every stage, as the
    campaign takes it (screening on its block's schemata, then its testbenches and proofs, then the
    miter); returns its CSV row (a dict; ``_fate`` tells what became of it), without merging it into the
    block's CSV (``merged`` and ``report`` do that). ``options`` are the command line's (``jobs=2``,
    ``no_formal=True``, ``out="build/mutants-w1"``: a directory of its own per concurrent caller); a failing
    test is not run on the unmutated design unless ``no_baseline=False`` (a campaign has its own baseline)."""
    args = parser().parse_args([name, "--id", str(mutant)])
    unknown = set(options) - set(vars(args)) - {"block", "id"}
    if unknown:
        raise TypeError(f"run_mutant: unknown options {', '.join(sorted(unknown))}")
    vars(args).update({"no_baseline": True, **options})
    global OUT
    before = OUT
    try:
        _use_out(args)
        plan = select(block(name).name, args)
        return decide([plan], args, campaign.Progress(1))[plan.block.name][0]
    finally:
        OUT = before


def campaign_run(plans, args):
    """Every stage on the plans' mutants (``decide``), each block's report (merged into its CSV) as soon as its
    mutants are decided; with ``--screen-only`` screening alone, then the mutants it let pass (``screened``).
    Returns the campaign's ``campaign.Progress`` (its ``summary``: the time and screening's throughput)."""
    progress = campaign.Progress(sum(len(p.mutants) for p in plans))
    shutil.rmtree(campaign.STIMULI, ignore_errors=True)     # this campaign's models only
    if args.screen_only:
        verdicts = screen(plans, args, progress)
        for p in plans:
            screened(p, verdicts[p.block.name])
        return progress
    lock = threading.Lock()

    def done(p, rows):
        with lock:
            progress({(p.block.name, m.id) for m in p.mutants}, f"{p.block.name}: done")
            report(p.block.name, p.sources.where, merged(p.block.name, p.sources.text, rows))
    decide(plans, args, progress, done)
    return progress


def _pools(plans, args, each):
    """[each(plan, work)] of every plan, side by side: ``work`` (a ``_Turn``) runs the stages' processes, ``jobs``
    at a time, the later stages first (``RANK``; a block's next stage starts as soon as its last one ends,
    whatever the other blocks are doing), and in a stage the blocks by their turns (``_turns``)."""
    turns = _turns(plans)
    with PriorityPool(max(1, args.jobs)) as pool, ThreadPoolExecutor(len(plans)) as blocks:
        return list(blocks.map(lambda p: each(p, _Turn(pool, turns[p.block.name])), plans))


def _turns(plans):
    """{block: its turn}: the most screening first (mutants times designs to screen them on), so the blocks
    whose later stages take long are likelier to start them early, and the smallest blocks fill the end
    (longest processing time first; without it the order was the threads' race)."""
    work = {p.block.name: len(p.mutants) * len(campaign.designs(p.block)) for p in plans}
    return {name: turn for turn, name in enumerate(sorted(work, key=lambda name: -work[name]))}


class _Turn:
    """A block's view of the campaign's ``PriorityPool``: ``submit(stage, fn, *args)`` ranks a call by its stage
    (``RANK``), then by the block's ``turn``."""

    def __init__(self, pool, turn):
        self.pool, self.turn = pool, turn

    def submit(self, stage, fn, *args):
        return self.pool.submit((RANK[stage], self.turn), fn, *args)


def screen(plans, args, progress):
    """{block: {id: verdict}} of the plans' mutants (``screen_block``)."""
    return {p.block.name: verdicts for p, verdicts in zip(plans, _pools(
        plans, args, lambda p, work: screen_block(p, args, progress, work)))}


def screen_block(p, args, progress, work):
    """{id: verdict} of plan ``p``'s mutants (``campaign.Screening.verdicts``; screen ``-``: not screened, with
    ``--no-screen``), its screening processes run by the executor ``work``."""
    verdicts = {m.id: {"screen": "-", "reason": "", "place": None} for m in p.mutants}
    tree = OUT / p.block.name / "schemata"
    copy_tree(tree)
    schemata.write(p.sources, p.every, tree)
    if args.no_screen:
        return verdicts
    s = campaign.Screening(p.block, tree, [m.id for m in p.mutants], args.packets, args.seed)
    work.submit("screening", s.run, progress).result()
    # an argued static mutant is decided without a build of its own
    s.unbuilt(set(s.statics()) & (set() if args.argued else p.argued))
    batches = _batches(s.statics(), STATICS, max(1, args.jobs))
    progress.screened(forced=len(s.statics()))
    for fates in [f.result() for f in [work.submit("static", s.force, batch) for batch in batches]]:
        progress({(p.block.name, n) for n, fate in fates.items() if fate != "pass"},
                 f"screening {p.block.name} on builds of their own: " + ", ".join(
                     f"#{n} {fate}" for n, fate in fates.items()))
    verdicts.update(s.verdicts())
    return verdicts


def _batches(items, most, least):
    """``items`` split into consecutive batches of at most ``most``, and at least ``least`` batches (when
    there are as many items), as even as can be."""
    count = min(len(items), max(least, -(-len(items) // most)))
    return [items[k * len(items) // count:(k + 1) * len(items) // count] for k in range(count)]


def decide(plans, args, progress, done=None):
    """{block: rows} of the plans' mutants through the stages: screening, then each survivor's testbenches and
    proofs and, when they let it pass, its miter (``jobs`` processes at a time, every block's together, each
    block going on to its next stage on its own); ``done(plan, rows)`` as each block's rows are complete."""
    stage = TestStage(args, progress)

    def through(p, row, place):
        stage.run(p, row, place)
        if not args.no_miter and place and _fate(row, {}) == "survivor":
            row["miter"], row["reason"] = campaign.miter(p.block, OUT / p.block.name / "schemata", row["id"], place,
                                                         args.depth, args.miter_timeout)
            progress({(p.block.name, row["id"])}, f"miter {p.block.name} #{row['id']}: {row['miter']}: {row['reason']}")

    def block_stages(p, work):
        verdicts = screen_block(p, args, progress, work)
        ranks = _ranks(p.sources.text, p.every)
        rows = [_row(p, m, verdicts[m.id], ranks) for m in p.mutants]
        going = []
        for row in rows:
            if row["screen"] not in ("pass", "-"):
                continue
            if row["id"] in p.argued and not args.argued:   # decided by its argument (``--argued``: by the stages)
                row["reason"] = f"argued equivalent in {EQUIVALENT.name}: its tests not run"
                progress({(p.block.name, row["id"])}, f"{p.block.name} #{row['id']}: argued equivalent")
            else:
                going.append(work.submit("tests", through, p, row, verdicts[row["id"]]["place"]))
        for future in going:
            future.result()
        if done:
            done(p, rows)
        return rows
    return {p.block.name: rows for p, rows in zip(plans, _pools(plans, args, block_stages))}


def _row(p, m, verdict, ranks):
    """Mutant ``m``'s row of plan ``p``'s CSV as screening (``verdict``) left it (``ranks``: ``_ranks``)."""
    before, after = m.describe(p.sources.text)
    return dict(id=m.id, operator=m.operator, line=m.line, nth=ranks[m.id],
                screen=verdict["screen"], sim="-", formal="-", miter="-", before=before, after=after,
                reason=verdict["reason"])


def screened(p, verdicts):
    """Print what screening made of plan ``p``'s mutants, and each mutant it let pass with its line and why."""
    counts = {k: sum(v["screen"] == k for v in verdicts.values()) for k in ("killed", "invalid", "pass")}
    print(f"mutants: {p.block.name}: {len(verdicts)} screened: " + ", ".join(f"{k} {n}" for k, n in counts.items()))
    source = p.sources.text
    for m in p.mutants:
        if verdicts[m.id]["screen"] == "pass":
            before, after = m.describe(source)
            print(f"  pass #{m.id} {m.operator} {p.sources.where(m.line)}: {before}  ->  {after}: "
                  f"{verdicts[m.id]['reason']}")


class TestStage:
    """Today's stage (``run``): a mutant that screening let pass (every mutant with ``--no-screen``) runs its
    block's simulations, then (if they pass) its proofs, a pytest session each in the block's schemata tree,
    stopping at the first failure. The run for mutant ``n`` has ``INNET_MUTANT=n + 1`` (tools/schemata.py): its
    cocotb tests share one Verilator build per parameter set with every other mutant and the unmutated design (the
    simulator is given the mutant); every other elaboration (proofs, Python simulation) builds the AST
    mutant itself. Mutants of one tree run side by side, each with run and proof directories of its own
    (``INNET_RUNS``, ``INNET_FORMAL``); the tests that killed the block's mutants so far run first, the most
    killing first (``INNET_FIRST``: a kill comes sooner, a mutant no test kills still runs every test). A
    failure is a kill only if the unmutated design passes that test (``design_passes``: each killing test
    run once on the design; without ``--no-baseline``)."""

    def __init__(self, args, progress):
        self.args, self.progress = args, progress
        self.lock, self.designs, self.killers = threading.Lock(), {}, {}

    def run(self, p, row, place):
        """Fill in ``row`` (mutant ``row["id"]`` of plan ``p``): sim and formal each pass, fail or timeout
        (``-``: not reached), or both invalid; ``place``: the design screening elaborated it on (None:
        none, so whether Amaranth can elaborate it is asked first)."""
        b, n, args = p.block, row["id"], self.args
        tree = OUT / b.name / "schemata"
        sims, proofs = sim_tests(b, soak=row["screen"] == "-"), [b.proofs()] if b.formal and not args.no_formal else []
        if place is None and not valid(tree, b.name, n + 1):
            row.update(sim="invalid", formal="invalid", reason="Amaranth cannot elaborate it")
        else:
            verdict, test = self._session(tree, b.name, sims, n)
            in_proofs = verdict == "pass" and bool(proofs)
            if in_proofs:
                verdict, test = self._session(tree, b.name, proofs, n)
            row["sim"] = "pass" if in_proofs else verdict
            row["formal"] = verdict if in_proofs else "-"
            if verdict != "pass":
                row["reason"] = f"killed by {test}" if test else f"its tests ran past {TIMEOUT} s"
            shutil.rmtree(tree / "build" / "mutant-runs" / str(n + 1), ignore_errors=True)
        self.progress({(b.name, n)} if _fate(row, {}) != "survivor" else (),
                      f"{b.name} #{n} {row['operator']} {p.sources.where(row['line'])}: sim {row['sim']}, "
                      f"formal {row['formal']}")

    def _session(self, tree, name, paths, n):
        """(verdict, test) of mutant ``n`` of block ``name`` on the tests ``paths`` (``_run_tests``), the tests
        that killed the block's mutants so far first; a kill counts for its test (if the design passes it)."""
        with self.lock:
            killers = self.killers.setdefault(name, collections.Counter())
            first = ",".join(test for test, _ in killers.most_common())
        verdict, test = _run_tests(tree, paths, self.args.seed, 0, TIMEOUT, n + 1,
                                   {**self._dirs(tree, n + 1), "INNET_FIRST": first})
        if verdict == "fail" and not self.args.no_baseline and not self.design_passes(tree, test):
            raise ValueError(f"the unmutated {name} fails its own test {test} (seed {self.args.seed}): fix that first")
        if verdict == "fail":
            with self.lock:
                killers[test] += 1
        return verdict, test

    @staticmethod
    def _dirs(tree, mutant):
        """The variables that give the run of mutant-select value ``mutant`` its own run and proof directories."""
        own = tree / "build" / "mutant-runs" / str(mutant)
        return {"INNET_RUNS": str(own / "runs"), "INNET_FORMAL": str(own / "formal")}

    def design_passes(self, tree, test):
        """Whether the unmutated design passes ``test`` in ``tree`` (run once per test)."""
        with self.lock:
            entry = self.designs.setdefault((tree, test), [threading.Lock(), None])
        with entry[0]:
            if entry[1] is None:
                entry[1] = _pytest(tree, [test], self.args.seed, 0, TIMEOUT, 0, self._dirs(tree, 0))
            return entry[1] == "pass"


def _by_text(source, mutants):
    """``mutants`` of ``source`` grouped by their line text before and after, each group in source order."""
    groups = {}
    for m in mutants:
        groups.setdefault(m.describe(source), []).append(m)
    return groups


def _ranks(source, mutants):
    """{id: nth}: how many mutants before each have its line text before and after (so a mutant is
    found again when edits elsewhere move its line)."""
    return {m.id: k for group in _by_text(source, mutants).values() for k, m in enumerate(group)}


def merged(name, source, rows):
    """``rows`` with the earlier results in ``build/mutants/<name>.csv`` of the other mutants that the
    source still has (the same line text before and after, and the same ``nth`` such mutant;
    renumbered as now): a re-run of some mutants updates the table."""
    out = OUT / f"{name}.csv"
    by_text = _by_text(source, generate(source))
    new = {r["id"] for r in rows}
    kept = []
    if out.exists():
        with open(out, newline="") as f:
            for r in csv.DictReader(f):
                r.pop("equivalent", None)
                same = by_text.get((r["before"], r["after"]), [])
                k = int(r.get("nth") or 0)
                if k < len(same) and same[k].id not in new:
                    kept.append(dict(r, id=same[k].id, line=same[k].line, nth=k))
    return sorted(kept + rows, key=lambda r: r["id"])


#: What became of a mutant (``_fate``), in the order of the stages, and the table's heading of each.
FATES = {"invalid": "invalid", "screening": "screening", "testbench": "testbench", "proof": "proof",
         "proved": "proved equiv", "bounded": "bounded equiv", "argued": "argued equiv", "survivor": "survivors"}


def _fate(row, argued):
    """What became of the mutant of ``row`` (a key of ``FATES``): the first stage that decided it. A
    mutant the miter finds no difference in within its depth (``bounded``: mcy's criterion) counts as
    equivalent, but is listed: an argument makes it a proof."""
    if "invalid" in (row.get("screen"), row["sim"]):
        return "invalid"
    if row.get("screen") == "killed":
        return "screening"
    if row["sim"] in KILLED:
        return "testbench"
    if row["formal"] in KILLED:
        return "proof"
    if row.get("miter") == "equivalent":
        return "proved"
    if why_of(argued, row):
        return "argued"
    return "bounded" if row.get("miter") == "bounded" else "survivor"


def tally(rows, argued):
    """{fate: count} of ``rows``, and the share of the non-equivalent mutants simulation killed."""
    counts = dict.fromkeys(FATES, 0)
    for r in rows:
        counts[_fate(r, argued)] += 1
    live = sum(counts[k] for k in ("screening", "testbench", "proof", "survivor"))
    return counts, (counts["screening"] + counts["testbench"]) / live if live else None


def _table(names):
    """[(block, mutants, rows)] of the results in ``OUT``."""
    out = []
    for name in names:
        source = Sources(block(name).sources()).text
        rows = merged(name, source, []) if (OUT / f"{name}.csv").exists() else []
        out.append((name, len(generate(source)), rows))
    return out


def summary(names):
    """One line per block of the results in ``build/mutants/<block>.csv``."""
    print(f"{'block':22} {'mutants':>7} {'run':>5} " + " ".join(f"{h:>12}" for h in FATES.values())
          + f" {'sim kills':>9}")
    for name, total, rows in _table(names):
        counts, rate = tally(rows, equivalent(name))
        print(f"{name:22} {total:7} {len(rows):5} " + " ".join(f"{counts[k]:12}" for k in FATES)
              + f" {'-' if rate is None else f'{100 * rate:.1f} %':>9}")
    print(f"(each block's mutants, results and mutated lines: {OUT.relative_to(ROOT)}/<block>.csv; sim kills: "
          "screening and testbenches, of the mutants not invalid nor equivalent)")


def markdown(names):
    """The mutants section of docs/verification.md: the table of the CSVs in ``OUT``, and each survivor."""
    lines = ["| block | mutants | run | " + " | ".join(FATES.values()) + " | killed by simulation |",
             "|---|" + "---:|" * (len(FATES) + 3)]
    totals, survivors = dict.fromkeys(["mutants", "run", *FATES], 0), []
    for name, total, rows in _table(names):
        argued = equivalent(name)
        counts, rate = tally(rows, argued)
        totals["mutants"] += total
        totals["run"] += len(rows)
        for k in FATES:
            totals[k] += counts[k]
        lines.append(f"| {name} | {total} | {len(rows)} | " + " | ".join(str(counts[k]) for k in FATES)
                     + f" | {'—' if rate is None else f'{100 * rate:.1f} %'} |")
        where = Sources(block(name).sources()).where
        survivors += [f"- {name} #{r['id']} `{where(int(r['line']))}`: `{r['before']}` → `{r['after']}`: "
                      f"{r.get('reason') or 'no stage killed it'}" for r in rows if _fate(r, argued) == "survivor"]
    live = sum(totals[k] for k in ("screening", "testbench", "proof", "survivor"))
    rate = f"{100 * (totals['screening'] + totals['testbench']) / live:.1f} %" if live else "—"
    lines.append(f"| all | {totals['mutants']} | {totals['run']} | " + " | ".join(str(totals[k]) for k in FATES)
                 + f" | {rate} |")
    lines += ["", "Survivors:" if survivors else "No survivors.", *survivors]
    return "\n".join(lines) + "\n"


def equivalent(name):
    """{(line before, line after, nth): why} of the mutants of block ``name`` argued equivalent (no
    input tells them from the design) in ``EQUIVALENT``; an entry without ``nth`` argues every mutant
    of that line text (``why_of`` looks a row up)."""
    table = tomllib.loads(EQUIVALENT.read_text()).get(name, {}) if EQUIVALENT.exists() else {}
    return {(e["before"], e["after"], e.get("nth")): e["why"] for e in table}


def argued_ids(name, source, every):
    """The ids of the mutants of block ``name`` (``every``: all of ``source``'s) argued equivalent."""
    argued, ranks = equivalent(name), _ranks(source, every)
    return {m.id for m in every if why_of(argued, dict(zip(("before", "after"), m.describe(source)), nth=ranks[m.id]))}


def why_of(argued, row):
    """The argument for ``row``'s mutant in ``argued`` (``equivalent``), or ""."""
    key = (row["before"], row["after"])
    return argued.get((*key, int(row.get("nth") or 0)), argued.get((*key, None), ""))


def report(name, where, rows):
    """What became of each mutant (``_fate``) and the share simulation killed, every mutant proved or
    argued equivalent and every survivor with its line (``where(line)``: its file and line) and why,
    on the terminal and in ``build/mutants/<block>.csv``."""
    argued = equivalent(name)
    for r in rows:
        r.setdefault("screen", "-")
        r.setdefault("miter", "-")
        r.setdefault("reason", "")
        r["equivalent"] = why_of(argued, r)
    out = OUT / f"{name}.csv"
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)
    counts, rate = tally(rows, argued)
    line = lambda r: f"#{r['id']} {r['operator']} {where(int(r['line']))}: {r['before']}  ->  {r['after']}"  # noqa: E731
    for r in rows:
        fate = _fate(r, argued)
        if fate == "argued":
            print(f"  argued equivalent {line(r)}: " + " ".join(r["equivalent"].split()))
        elif fate in ("proved", "bounded"):
            print(f"  {fate} equivalent {line(r)}: {r['reason']}")
        elif r["equivalent"]:
            print(f"  warning: {line(r)} is argued equivalent in {EQUIVALENT.name}, but {FATES[fate]} decided it")
    print(f"mutants: {name}: {len(rows)} mutants: " + ", ".join(f"{FATES[k]} {counts[k]}" for k in FATES)
          + ("" if rate is None else f"; killed by simulation {100 * rate:.1f} % of the non-equivalent")
          + f" -> {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    for r in rows:
        if _fate(r, argued) == "survivor":
            print(f"  survivor {line(r)}: {r['reason'] or 'no stage killed it'}")


if __name__ == "__main__":
    run("mutants", main)

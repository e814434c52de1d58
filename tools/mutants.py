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

``--n`` draws that many with ``--seed`` (the same sample every time). Each mutant is applied to a
copy of the repository under ``build/mutants/<block>/tree``; a mutant Amaranth cannot elaborate
or emit is ``invalid``. The others run the block's simulations (``sim_tests``: its testbench
``registry.Block.testbench()``, the other testbenches that exercise it, its soak run) and its
proofs (``Block.proofs()``), each stopping at the first failure; a mutant is killed by
simulation, by formal, or survives. The report (terminal and ``build/mutants/<block>.csv``) gives
the kill rates and every survivor with its line, to be killed by a new test or property or argued
equivalent in ``tools/equivalent_mutants.toml`` (the rates count the other mutants).
"""
import ast
import csv
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

import registry
from registry import ROOT, block
from tools.cli import Parser, integer, run

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


def sim_tests(b):
    """The tests that simulate block ``b``, in the order run: its testbench, the other testbenches
    that exercise it (``Block.tests``), its soak run."""
    return [b.testbench(), *b.tests, f"testbenches/test_soak.py::test_soak[{b.name}-soak]"]


def _pytest(tree, paths, seed, jobs, timeout):
    """Run the tests ``paths`` in ``tree`` stopping at the first failure: "pass", "fail" or "timeout";
    ``RuntimeError`` when pytest cannot run them (a test path that does not exist, a usage error, a
    module that does not import).

    A failure is read from the run's JUnit file, not from the exit status: under pytest-xdist,
    ``pytest -x -n N`` exits with 2 (interrupted) on a failing test, where plain ``pytest -x`` exits
    with 1; 2 is also a collection error, which is no kill."""
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "results.xml"
        command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--junitxml", str(junit),
                   *paths, *(["-n", str(jobs)] if jobs else [])]
        # its own process group: a timeout kills the simulators pytest started too, not pytest alone
        with subprocess.Popen(command, cwd=tree, env=dict(os.environ, INNET_SEED=str(seed)), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True) as process:
            try:
                output, _ = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
                return "timeout"
        if process.returncode == 0:
            return "pass"
        if process.returncode in (1, 2) and _failed(junit):
            return "fail"
    tail = output.strip().splitlines()[-1:] or [""]
    raise RuntimeError(f"pytest could not run {' '.join(paths)} (exit {process.returncode}): {tail[0]}")


def _failed(junit):
    """Whether the JUnit file ``junit`` records a test that failed or erred (not a module that could not
    be collected: that is a broken run, not a kill)."""
    if not junit.exists():
        return False
    cases = ElementTree.parse(junit).getroot().iter("testcase")
    return any(case.find("failure") is not None
               or any(e.get("message") != "collection failure" for e in case.findall("error")) for case in cases)


def valid(tree, name):
    """Whether the (mutated) block in ``tree`` elaborates and converts to Verilog."""
    code = f"from amaranth.back import rtlil; from registry import block; rtlil.convert(block({name!r}).build())"
    return subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True).returncode == 0


def main(argv=None):
    parser = Parser(prog="mutants", description=__doc__.split("\n\n")[0])
    parser.add_argument("block", help="a registered block, or all (every block with logic of its own)")
    parser.add_argument("--n", type=integer(1), default=None, help="mutants to draw per block (default: all)")
    parser.add_argument("--seed", type=integer(0), default=1, help="sample seed and traffic seed (default 1)")
    parser.add_argument("--match", action="append", default=[],
                        help="only mutants of source lines containing this text (repeatable: any of them)")
    parser.add_argument("--id", type=integer(0), action="append", default=[],
                        help="only this mutant (repeatable; the numbers --list and the report print)")
    parser.add_argument("--again", action="store_true",
                        help="only the mutants of the block's CSV that simulation or formal let pass (and are not "
                             "argued equivalent), each run again where it passed (after a new test or property)")
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--summary", action="store_true",
                        help="print the table of the results in build/mutants/, run nothing")
    parser.add_argument("--out", default=None,
                        help="directory of the trees and CSVs, under the repository (default build/mutants)")
    parser.add_argument("--jobs", type=integer(0), default=0, help="pytest-xdist workers per run (0 = none)")
    parser.add_argument("--no-formal", action="store_true", help="simulation only")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the unmutated run (when the suite has just run the block's tests)")
    args = parser.parse_args(argv)
    if args.out is not None:
        global OUT
        OUT = ROOT / args.out
    if args.block == "all":
        if args.match or args.id:
            raise ValueError("--match and --id need one block, not all")
        names = [n for n in registry.names() if generate(Sources(block(n).sources()).text)]
    else:
        names = [block(args.block).name]
    if not args.summary:
        for name in names:
            run_block(name, args)
    if args.summary or len(names) > 1:
        summary(names)


def run_block(name, args):
    """``args``' mutants of block ``name``: listed, or run and reported (merged into its CSV)."""
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
    earlier = {}                # --again: the earlier rows, whose kills stand
    if args.again:
        argued = equivalent(b.name)
        earlier = {r["id"]: r for r in merged(b.name, source, [])
                   if "pass" in (r["sim"], r["formal"]) and not why_of(argued, r)}
        mutants = [m for m in mutants if m.id in earlier]
    if args.n is not None and args.n < len(mutants):
        mutants = sorted(random.Random(args.seed).sample(mutants, args.n), key=lambda m: m.id)
    if args.list:
        for m in mutants:
            before, after = m.describe(source)
            print(f"{m.id:4} {m.operator:6} {sources.where(m.line)}: {before}  ->  {after}")
        return
    tree = OUT / b.name / "tree"
    copy_tree(tree)
    sims, proofs = sim_tests(b), [b.proofs()]
    formal = b.formal and not args.no_formal
    print(f"mutants: {b.name}: {len(mutants)} mutants, seed {args.seed}"
          + ("" if args.no_baseline else "; baseline run first"), flush=True)
    if not args.no_baseline and (_pytest(tree, sims, args.seed, args.jobs, TIMEOUT) != "pass" or (
            formal and _pytest(tree, proofs, args.seed, args.jobs, TIMEOUT) != "pass")):
        raise ValueError(f"the unmutated {b.name} fails its own tests (seed {args.seed}): fix that first")
    rows, started, rank = [], time.monotonic(), _ranks(source, every)
    try:
        for n, m in enumerate(mutants, 1):
            before, after = m.describe(source)
            sources.write(tree, m.apply(source))
            before_run = earlier.get(m.id, {})
            if not valid(tree, b.name):
                sim = form = "invalid"
            else:
                sim = before_run.get("sim") if before_run.get("sim") in KILLED else _pytest(
                    tree, sims, args.seed, args.jobs, TIMEOUT)
                form = "-" if not formal else before_run.get("formal") if before_run.get("formal") in KILLED else (
                    _pytest(tree, proofs, args.seed, args.jobs, TIMEOUT))
            rows.append(dict(id=m.id, operator=m.operator, line=m.line, nth=rank[m.id], sim=sim, formal=form,
                             before=before, after=after))
            print(f"mutants: [{n}/{len(mutants)}, {time.monotonic() - started:.0f} s] #{m.id} {m.operator} "
                  f"line {m.line}: sim {sim}, formal {form}", flush=True)
    finally:
        sources.write(tree, source)
    report(b.name, sources.where, merged(b.name, source, rows), formal)


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


def _dead(row, key):
    return row[key] in KILLED


def _tally(rows, argued):
    """(valid, live, proved) rows: not invalid; of those, not argued equivalent (the rates count these);
    of those, run with the proofs (the formal rate counts these)."""
    valid_rows = [r for r in rows if r["sim"] != "invalid"]
    live = [r for r in valid_rows if not why_of(argued, r)]
    return valid_rows, live, [r for r in live if r["formal"] != "-"]


def summary(names):
    """One line per block of the results in ``build/mutants/<block>.csv``."""
    print(f"{'block':22} {'mutants':>7} {'run':>5} {'invalid':>7} {'equiv':>5} {'sim':>13} {'formal':>13} "
          f"{'combined':>13} survivors")
    for name in names:
        source = Sources(block(name).sources()).text
        total, out = len(generate(source)), OUT / f"{name}.csv"
        rows = merged(name, source, []) if out.exists() else []
        if not rows:
            print(f"{name:22} {total:7} {0:5}")
            continue
        valid_rows, live, proved = _tally(rows, equivalent(name))
        rate = lambda k, of=live: f"{k}/{len(of)} {100 * k / len(of):3.0f}%" if of else "-"     # noqa: E731
        left = [f"#{r['id']}" for r in live if not _dead(r, "sim") and not _dead(r, "formal")]
        print(f"{name:22} {total:7} {len(rows):5} {len(rows) - len(valid_rows):7} {len(valid_rows) - len(live):5} "
              f"{rate(sum(_dead(r, 'sim') for r in live)):>13} "
              f"{rate(sum(_dead(r, 'formal') for r in proved), proved):>13} "
              f"{rate(sum(_dead(r, 'sim') or _dead(r, 'formal') for r in live)):>13} {' '.join(left) or '-'}")
    print(f"(each block's mutants, results and mutated lines: {OUT.relative_to(ROOT)}/<block>.csv)")


def equivalent(name):
    """{(line before, line after, nth): why} of the mutants of block ``name`` argued equivalent (no
    input tells them from the design) in ``EQUIVALENT``; an entry without ``nth`` argues every mutant
    of that line text (``why_of`` looks a row up)."""
    table = tomllib.loads(EQUIVALENT.read_text()).get(name, {}) if EQUIVALENT.exists() else {}
    return {(e["before"], e["after"], e.get("nth")): e["why"] for e in table}


def why_of(argued, row):
    """The argument for ``row``'s mutant in ``argued`` (``equivalent``), or ""."""
    key = (row["before"], row["after"])
    return argued.get((*key, int(row.get("nth") or 0)), argued.get((*key, None), ""))


def report(name, where, rows, formal):
    """Kill rates over the non-equivalent mutants, and the survivors (``where(line)``: their file and
    line), on the terminal and in ``build/mutants/<block>.csv``."""
    argued = equivalent(name)
    for r in rows:
        r["equivalent"] = why_of(argued, r)
    out = OUT / f"{name}.csv"
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    valid_rows, live, proved = _tally(rows, argued)
    for r in valid_rows:
        if r["equivalent"]:
            print(f"  equivalent #{r['id']} {r['operator']} {where(int(r['line']))}: {r['before']}  ->  "
                  f"{r['after']}: "
                  + " ".join(r["equivalent"].split()))
    killed = lambda key, of=live: sum(_dead(r, key) for r in of)      # noqa: E731
    both = sum(_dead(r, "sim") or _dead(r, "formal") for r in live)
    rate = lambda k, of=live: f"{k}/{len(of)} ({100 * k / len(of):.0f} %)" if of else "-"  # noqa: E731
    same = len(valid_rows) - len(live)
    print(f"mutants: {name}: {len(rows)} mutants, {len(rows) - len(valid_rows)} invalid, {same} "
          f"equivalent; of the other {len(live)}, killed by simulation "
          f"{rate(killed('sim'))}" + (f", by formal {rate(killed('formal', proved), proved)}" if formal else "")
          + f", combined {rate(both)} -> {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    for r in live:
        if not _dead(r, "sim") and not _dead(r, "formal"):
            print(f"  survivor #{r['id']} {r['operator']} {where(int(r['line']))}: {r['before']}  ->  "
                  f"{r['after']}")


if __name__ == "__main__":
    run("mutants", main)

"""Seed-sweep regression, sharded: ``python -m tools.regress --seeds N --shard i/n [--first S]``.

The sweep is every seed ``S .. S+N-1`` crossed with the randomized testbenches (``testbenches/``
without the README, CLI and layout checks, or ``--tests``). Shard ``i`` of ``n`` runs, for every
seed, the ``i``-th of ``n`` groups pytest-split makes of the collected tests (the same groups on
every machine: deterministic), with ``INNET_SEED`` set; each run writes JUnit XML and the shard's
runs are merged (junitparser) into ``build/regress/shard-<i>-of-<n>.xml``, each test case named
with its seed. ``--merge FILE ...`` merges the shards' files into ``build/regress/report.xml``.
``--out DIR`` writes elsewhere (the suite's own checks do: ``build/regress`` is the user's).
Both print the totals and, per failure, the one command that reproduces it; the exit status is
non-zero when a test failed.
"""
import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from junitparser import Error, Failure, JUnitXml

from tools.cli import Parser, integer, run

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "regress"
#: Deterministic checks that do not depend on the seed.
FIXED = ("test_readme.py", "test_cli.py", "test_layout.py")
PY = sys.executable


def shown(path):
    """``path`` relative to the repository when inside it."""
    path = Path(path)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def python():
    """How the README spells this interpreter (``.venv/bin/python`` inside the repository)."""
    return shown(PY)


def shard(text):
    """``"i/n"`` with 1 <= i <= n -> (i, n)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise argparse.ArgumentTypeError(f"expected i/n with 1 <= i <= n (e.g. 2/4), got {text!r}")
    return int(match[1]), int(match[2])


def named(path, seed):
    """The JUnit file at ``path`` with every test case renamed ``name[seed=S]``, the seed a property."""
    suites = list(JUnitXml.fromfile(str(path)))
    for suite in suites:
        suite.name = f"seed {seed}"
        for case in suite:
            case.name = f"{case.name}[seed={seed}]"
        suite.add_property("seed", str(seed))
    return suites


def failures(xml):
    """(seed, class name, test name, message) of every failed or erroring case in ``xml``."""
    found = []
    for suite in xml:
        seed = next((p.value for p in suite.properties() if p.name == "seed"), "?")
        for case in suite:
            for result in case.result:
                if isinstance(result, (Failure, Error)):
                    found.append((seed, case.classname, case.name, (result.message or "").splitlines()[:1]))
    return found


def summary(xml, out):
    """Print totals and one replay command per failure; True when nothing failed."""
    xml.update_statistics()
    tests = sum(s.tests for s in xml)
    failed = failures(xml)
    seeds = {p.value for s in xml for p in s.properties() if p.name == "seed"}
    print(f"regress: {tests} test runs over {len(seeds)} seeds, {len(failed)} failed -> {shown(out)}")
    for seed, classname, name, message in failed:
        path = classname.replace(".", "/") + ".py"
        test = re.sub(r"\[seed=\d+\]$", "", name)
        print(f"  FAILED seed {seed}: INNET_SEED={seed} {python()} -m pytest '{path}::{test}'"
              + (f"  ({message[0][:100]})" if message else ""))
    return not failed


def sweep(seeds, first, index, count, tests, jobs, select, out=OUT):
    """Run shard ``index``/``count`` of the sweep into directory ``out``; whether it passed."""
    runs = out / f"shard-{index}-of-{count}"
    runs.mkdir(parents=True, exist_ok=True)
    merged = JUnitXml(name=f"innet regress shard {index}/{count}")
    for k, seed in enumerate(range(first, first + seeds)):
        print(f"regress: shard {index}/{count}, seed {seed} ({k + 1} of {seeds})", flush=True)
        junit = runs / f"seed-{seed}.xml"
        command = [PY, "-m", "pytest", "-q", "--splits", str(count), "--group", str(index), "--junitxml", str(junit),
                   *(["-n", str(jobs)] if jobs else []), *(["-k", select] if select else []), *tests]
        if not tests:
            command += ["testbenches", *(f"--ignore=testbenches/{name}" for name in FIXED)]
        result = subprocess.run(command, cwd=ROOT, env=dict(os.environ, INNET_SEED=str(seed)))
        if result.returncode not in (0, 1) or not junit.exists():       # 1 = tests failed: reported below
            raise ValueError(f"pytest exited with status {result.returncode} for seed {seed} (no test results)")
        for suite in named(junit, seed):
            merged.add_testsuite(suite)
    path = out / f"shard-{index}-of-{count}.xml"
    merged.write(str(path))
    return summary(merged, path)


def merge(paths, out=OUT):
    """Merge shard files into ``<out>/report.xml``; whether nothing failed."""
    merged = JUnitXml(name="innet regress")
    for path in paths:
        for suite in JUnitXml.fromfile(str(path)):
            merged.add_testsuite(suite)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.xml"
    merged.write(str(path))
    return summary(merged, path)


def main(argv=None):
    parser = Parser(prog="regress", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=integer(1), default=4, help="number of seeds (default 4)")
    parser.add_argument("--first", type=integer(0, (1 << 32) - 1), default=1, help="first seed (default 1)")
    parser.add_argument("--shard", type=shard, default=(1, 1), help="i/n: run shard i of n (default 1/1)")
    parser.add_argument("--jobs", type=integer(0), default=0, help="pytest-xdist workers per run (0 = none)")
    parser.add_argument("--tests", nargs="*", default=[], help="test paths or node ids (default: testbenches)")
    parser.add_argument("-k", dest="select", default="", help="pytest -k expression selecting tests")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="FILE", help="merge shard files instead")
    parser.add_argument("--out", type=Path, default=OUT, help="directory of the results (default build/regress)")
    args = parser.parse_args(argv)
    out = args.out if args.out.is_absolute() else Path.cwd() / args.out
    if args.merge:
        ok = merge(args.merge, out)
    else:
        if args.first + args.seeds > 1 << 32:
            raise ValueError(f"--first {args.first} + --seeds {args.seeds} exceeds the 32-bit seed range")
        ok = sweep(args.seeds, args.first, *args.shard, args.tests, args.jobs, args.select, out)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    run("regress", main)

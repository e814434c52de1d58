"""The seed regression as campaign units: a unit is one pytest run of one test file (or node id) at one seed.

The sweep is the one ``tools.regress`` runs (``--tests``, else every test file of ``testbenches/`` but its
deterministic checks), crossed with the seeds. A unit runs ``pytest <test> --junitxml`` with ``INNET_SEED``
and returns the JUnit XML; its simulations keep their run directories under the campaign's work directory
(``INNET_RUNS``: seeds of one test run at once), while the Verilator models are built in the shared
``build/`` tree, once per parameter set (``testbenches.runner``: a directory per parameter hash, a file lock,
rebuilt only when the design changes), which a cluster's workers must share (a shared filesystem). The units'
files merge, each case named with its seed (``tools.regress.named``), into ``<out>/report.xml``; the summary
gives one replay command per failure.
"""
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from junitparser import JUnitXml

from tools import regress
from tools.cluster.engine import Unit

ROOT = regress.ROOT


def tests_of(tests):
    """The units' test paths: ``tests`` as given, else the test files of ``testbenches/`` (its subfolders
    too) but ``tools.regress.FIXED``, in path order."""
    if tests:
        return list(tests)
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "testbenches").rglob("test_*.py")
                  if p.name not in regress.FIXED)


def key(test, seed):
    return f"regress-{test.replace('/', '.').replace('::', '.')}-seed{seed}"


def replay(test, seed, select=""):
    return f"INNET_SEED={seed} {regress.python()} -m pytest '{test}'" + (f" -k '{select}'" if select else "")


def run_test(test, seed, select, runs):
    """One unit: ``pytest test`` at ``seed`` (``select``: its ``-k``), run directories under ``runs``; the
    JUnit XML (text; empty when ``select`` leaves no test in the file)."""
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "results.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", str(junit), test,
                   *(["-k", select] if select else [])]
        env = dict(os.environ, INNET_SEED=str(seed), INNET_RUNS=str(runs))
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if result.returncode == 5:            # no test selected in this file
            return ""
        if result.returncode not in (0, 1) or not junit.exists():
            tail = (result.stdout + result.stderr).strip().splitlines()[-1:] or [""]
            raise RuntimeError(f"pytest exited with status {result.returncode} on {test} at seed {seed}: {tail[0]}")
        return junit.read_text()


def failed(xml):
    return bool(xml) and ('<failure' in xml or '<error' in xml)


def units(seeds, first, tests, select, work):
    """The campaign's units: every test of ``tests_of(tests)`` at every seed."""
    return [Unit(key(t, s), run_test, (t, s, select, str(Path(work) / "runs" / key(t, s))), replay(t, s, select),
                 failed) for s in range(first, first + seeds) for t in tests_of(tests)]


def merge(units_, results, out):
    """The units' JUnit files merged into ``<out>/report.xml`` (each suite with its unit's attempt and
    worker); the summary's lines printed; whether nothing failed."""
    parts = out / "units"
    parts.mkdir(parents=True, exist_ok=True)
    merged, ok = JUnitXml(name="innet regress"), True
    for u in units_:
        r = results[u.key]
        if r.error:
            print(f"  ERROR {u.key}: {r.error}; replay: {u.replay}")
            ok = False
            continue
        if not r.value:
            continue
        path = parts / f"{u.key}.xml"
        path.write_text(r.value)
        for suite in regress.named(path, u.args[1]):
            suite.add_property("attempt", str(r.attempt))
            suite.add_property("worker", r.worker)
            merged.add_testsuite(suite)
    path = out / "report.xml"
    merged.write(str(path))
    return regress.summary(merged, path) and ok


def builds(since):
    """(designs compiled since ``since``, a ``time.time()``; of all): Verilator models whose design object
    (``build/<block>/<tag>/Vtop__ALL.o``) was compiled. A run on a model already built only relinks it."""
    models = list((ROOT / "build").glob("*/*/Vtop__ALL.o"))
    return sum(p.stat().st_mtime >= since for p in models), len(models)


def campaign(run, seeds, first, tests, select, out):
    """Run the sweep on the campaign runner ``run`` (``Campaign.run``); whether nothing failed."""
    since = time.time()
    todo = units(seeds, first, tests, select, out / "work")
    results = run(todo)
    ok = merge(todo, results, out)
    built, models = builds(since)
    print(f"regress: {built} Verilator models built for {len(todo)} units ({models} in build/, shared by the "
          f"workers)")
    return ok, results

"""The campaign layer (tools/cluster/) on a real Dask LocalCluster (a scheduler and 2 worker processes): a small
regress, a small mutant batch and a small sweep give what a serial run of the same work gives, and a worker
killed in the middle of a unit loses nothing (the unit runs again, and the report says so)."""
import csv
import os
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
from junitparser import JUnitXml

from tools import mutants as serial_mutants
from tools import regress as serial_regress
from tools.cluster import engine, mutants, regress, sweep
from tools.cluster.__main__ import campaign, parser

pytestmark = pytest.mark.xdist_group("cluster")

#: One fast randomized test (its Verilator model is small).
TEST = "testbenches/test_packet_fifo.py::test_packet_fifo[8B-round_trip]"


@pytest.fixture(scope="module")
def client():
    client = engine.connect("local", jobs=2, dashboard=":0")
    assert len(client.scheduler_info()["workers"]) == 2
    yield client
    client.close_all()


def outcomes(xml):
    """{(test case name, outcome)} of a JUnit file."""
    return {(case.name, type(case.result[0]).__name__ if case.result else "passed")
            for suite in JUnitXml.fromfile(str(xml)) for case in suite}


def test_regress_equals_serial(client, tmp_path, capsys):
    args = parser().parse_args(["regress", "--seeds", "2", "--tests", TEST, "--out", str(tmp_path / "cluster")])
    assert campaign(args, client)
    assert serial_regress.sweep(2, 1, 1, 1, [TEST], 0, "", out=tmp_path / "serial")
    got, want = outcomes(tmp_path / "cluster" / "report.xml"), outcomes(tmp_path / "serial" / "shard-1-of-1.xml")
    assert got == want and len(want) == 2, (got, want)
    suites = list(JUnitXml.fromfile(str(tmp_path / "cluster" / "report.xml")))
    assert all({p.name for p in s.properties()} >= {"seed", "attempt", "worker"} for s in suites)
    assert "0 units ran again" in capsys.readouterr().out


def test_mutants_equal_serial(client, tmp_path, monkeypatch):
    """Two mutants of the spill link (one Amaranth cannot elaborate, one its testbench kills), simulation only:
    the rows of a serial ``tools.mutants`` run of the same mutants."""
    name, ids = "spillway.link", [37, 42]
    args = parser().parse_args(["mutants", name, *(x for n in ids for x in ("--id", str(n))), "--no-formal",
                                "--no-baseline", "--out", str(tmp_path / "cluster")])
    assert campaign(args, client)
    monkeypatch.setattr(serial_mutants, "OUT", tmp_path / "serial")
    (tmp_path / "serial" / name / "tree" / "build").mkdir(parents=True)      # the same runtime objects shared
    (tmp_path / "serial" / name / "tree" / "build" / "verilator-runtime").symlink_to(mutants.RUNTIME)
    serial_mutants.run_block(name, SimpleNamespace(id=ids, match=[], again=False, n=None, seed=1, list=False, jobs=0,
                                                   no_formal=True, no_baseline=True))

    def rows(path):
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    got, want = rows(tmp_path / "cluster" / f"{name}.csv"), rows(tmp_path / "serial" / f"{name}.csv")
    assert got == want and [r["sim"] for r in want] == ["fail", "invalid"], (got, want)


def test_sweep_equals_serial(client, tmp_path):
    grid = ["rounds=4", "slots=4", "sweep-slots=4", "sweep-jobs=2", "seed=1,2"]
    args = parser().parse_args(["sweep", "esa", *(x for g in grid for x in ("--grid", g)),
                                "--out", str(tmp_path / "cluster")])
    assert campaign(args, client)
    want = []
    for k, point in enumerate(sweep.grid(grid)):
        want += sweep.point_rows("esa", point, tmp_path / "serial" / str(k))["rows"]
    with open(tmp_path / "cluster" / "esa.csv", newline="") as f:
        got = list(csv.DictReader(f))
    assert got == want and len(want) == 2 * 3 and got[0] != got[3], (got, want)


def test_running_scheduler(client, tmp_path, capsys):
    """``--scheduler tcp://...``: a campaign on a running cluster (this one's scheduler), which it leaves running."""
    address = client.scheduler.address
    args = parser().parse_args(["sweep", "esa", "--grid", "rounds=4", "--grid", "sweep-slots=4", "--grid",
                                "sweep-jobs=2", "--scheduler", address, "--out", str(tmp_path)])
    other = engine.connect(scheduler=address)
    try:
        assert campaign(args, other)
    finally:
        other.close_all()
    assert f"sweep: 1 units on 2 workers ({address})" in capsys.readouterr().out
    assert len(client.scheduler_info()["workers"]) == 2 and (tmp_path / "esa.csv").exists()


def killed_once(marker, value):
    """A unit that kills its own worker process the first time it runs (``marker`` not there yet)."""
    marker = Path(marker)
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return value * 2


def test_worker_killed_loses_nothing(client, tmp_path):
    """Unit 1 kills its worker process on its first run: every unit still gives its value, unit 1 from its
    second attempt on a live worker, and the report names it."""
    for k in (0, 2):
        (tmp_path / f"marker-{k}").write_text("")
    units = [engine.Unit(f"unit-{k}", killed_once, (str(tmp_path / f"marker-{k}"), k), f"replay {k}") for k in range(3)]
    runner = engine.Campaign(client, tmp_path / "work", "killtest", out=lambda *a, **k: None)
    results = runner.run(units)
    assert {k: r.value for k, r in results.items()} == {"unit-0": 0, "unit-1": 2, "unit-2": 4}
    assert [results[f"unit-{k}"].attempt for k in range(3)] == [1, 2, 1]
    killed = (tmp_path / "marker-1").read_text()
    assert results["unit-1"].worker.endswith(")") and f"pid {killed})" not in results["unit-1"].worker
    assert runner.retried(results) == [f"  retried unit-1: attempt 2 gave the result on {results['unit-1'].worker}"]


def test_bad_cluster_arguments():
    with pytest.raises(ValueError, match="cluster 'moon'"):
        engine.connect("moon")
    with pytest.raises(ValueError, match="jobs 0"):
        engine.connect("local", jobs=0)
    with pytest.raises(ValueError, match="expected KEY=V1"):
        sweep.grid(["slots"])
    with pytest.raises(ValueError, match="expected key=value"):
        engine.options(["queue"])
    assert regress.tests_of([TEST]) == [TEST]
    assert mutants.replay("spillway.link", 3, 1, False).endswith("-m tools.mutants spillway.link --id 3 --seed 1 "
                                                                 "--no-baseline --no-formal")

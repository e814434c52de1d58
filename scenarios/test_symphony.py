"""The Symphony scenario (``scenarios/symphony.py``), small: 2 jobs of 4 ranks on 4 leaves and 1 spine.

The spine's register file in the run with Symphony and jitter is replayed on the ``ProgressRegfile`` RTL
cycle by cycle through the lockstep (commands, packets, the timer = the cycle since reset): every mark
the senders reacted to is the RTL's. The oracle: every job completes; without jitter Symphony (almost)
never marks and does not change completion (the case where it cannot help); with jitter it marks more.
"""
import json
from dataclasses import replace

import cocotb
import pytest

from hdl.progress_regfile import ProgressRegfile
from models.progress_regfile import ProgressRegfileModel
from scenarios.common import replay
from scenarios.net import seed
from scenarios.symphony import Setting, simulate
from testbenches import runner, tb
from testbenches.lockstep import Lockstep

SMALL = Setting(jobs=2, leaves=4, spines=1, chunk=16, service=8, fabric=5, window=16, kmin=8, kmax=16, delta=1,
                burst_p=0.004, burst_on=300, rto=4000, max_cycles=200_000)


@cocotb.test()
async def symphony_rtl(dut):
    """The small run's spine, replayed on the RTL through the lockstep."""
    run = simulate(SMALL, True, tb.seed(), rtl=True)
    lockstep = Lockstep(ProgressRegfile(SMALL.params), ProgressRegfileModel(SMALL.params))
    await replay(dut, lockstep, run["record"], "symphony")
    (tb.run_dir() / "result.json").write_text(json.dumps({"cycles": len(run["record"]), "marks": run["marks"]}))


def test_symphony_rtl(record_property):
    """The spine's marks in the small run are the RTL's."""
    run = runner.run(ProgressRegfile, SMALL.params, "scenarios.test_symphony", "symphony_rtl",
                     block="scenario_symphony", seed=seed())
    result = json.loads((run / "result.json").read_text())
    assert result["cycles"] > 0 and result["marks"] > 0, result
    record_property("innet", run)


def test_symphony():
    """Every job completes; without jitter the steps stay aligned: Symphony marks (almost) nothing and the
    collective's completion moves by under 1 %; jitter misaligns them and it marks more."""
    runs = {}
    for burst in (0.0, SMALL.burst_p):
        s = replace(SMALL, burst_p=burst)
        runs[burst] = none, sym = simulate(s, False, seed()), simulate(s, True, seed())
        assert none["collective"] is not None and sym["collective"] is not None, (none["done"], sym["done"])
    calm, jitter = runs[0.0][1], runs[SMALL.burst_p][1]
    assert abs(calm["collective"] - runs[0.0][0]["collective"]) < 0.01 * calm["collective"], runs[0.0]
    assert jitter["marks"] > max(calm["marks"], 0), (calm["marks"], jitter["marks"])


pytestmark = pytest.mark.xdist_group("scenario_symphony")

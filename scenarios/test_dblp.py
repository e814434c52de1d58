"""The DBLP scenario (``scenarios/dblp.py``), small: 48 rounds per policy, 150 per oracle loss rate.

Every cycle of every policy's run is replayed on the ``BoundedLossTracker`` RTL through the testbench's
lockstep (every output compared with the model's: the rounds' closes and NACKs the sender reacted to are
the RTL's). The oracle: reliable (tau = 0) closes only FULL or ABORT and delivers everything; every other
round's delivered loss is within its tau; a round whose first transmission lost no more than tau allows,
LAST included, closes without a NACK before its deadline; the no-NACK fraction under i.i.d. loss falls in
the binomial acceptance interval at every loss rate; bounded loss beats reliable on burst rounds.
"""
import json

import cocotb
import pytest
from cocotb.triggers import RisingEdge

from models.bounded_loss_tracker import BoundedLossTrackerParams
from scenarios.dblp import BACKGROUND, BURST_EVERY, DEADLINE, TAUS, E, oracle, simulate, summary
from scenarios.net import seed
from testbenches import runner, tb

ROUNDS, ORACLE_ROUNDS = 48, 150


def runs(seed_value, record=False):
    return {name: simulate(taus, BACKGROUND, BURST_EVERY, ROUNDS, seed_value, record=record)
            for name, taus in TAUS.items()}


class Replay(tb.BlockTB):
    """The tracker and its model in lockstep, the inputs driven from a run's record."""

    name = "bounded_loss_tracker"

    async def play(self, record):
        layouts, driven = self.lockstep.ports.inputs, {}
        for inputs in record:
            for port in layouts:
                value = inputs[port]
                if port.endswith("__payload"):
                    if value is None:
                        continue
                    value = tb.pack(layouts[port], value)
                if driven.get(port) != value:
                    getattr(self.dut, port).value = driven[port] = value
            await RisingEdge(self.dut.clk)


@cocotb.test()
async def dblp_rtl(dut):
    """Every policy's run, replayed on the RTL cycle by cycle."""
    t = Replay(dut)
    for port in ("i__valid", "cfg__valid"):
        getattr(dut, port).value = 0
    total = 0
    for name, (_, _, _, record) in runs(tb.seed(), record=True).items():
        await t.reset(3)
        await t.play(record)
        dut.i__valid.value = dut.cfg__valid.value = 0
        total += len(record)
        cocotb.log.info("%s: %d cycles replayed on the RTL, every output as the model", name, len(record))
    await t.edge()
    t.check_counters()
    (tb.run_dir() / "result.json").write_text(json.dumps({"cycles": total}))


def test_dblp_rtl(record_property):
    from hdl.bounded_loss_tracker import BoundedLossTracker
    run = runner.run(BoundedLossTracker, BoundedLossTrackerParams(), "scenarios.test_dblp", "dblp_rtl",
                     block="bounded_loss_tracker", seed=seed())
    assert json.loads((run / "result.json").read_text())["cycles"] > 0
    record_property("innet", run)


def test_dblp():
    """The oracle on the golden model."""
    result = {name: stats for name, (stats, _, _, _) in runs(seed()).items()}
    for name, stats in result.items():
        assert len(stats) == ROUNDS and all("kind" in s for s in stats), f"{name}: a round never closed"
        for s in stats:
            if s["kind"] != "ABORT":
                assert E - s["count"] <= s["tau"] * E >> 8, f"{name}: round {s['round']} lost beyond tau"
            if s["lost_first"] and not s["tau"]:
                assert s["nacks"] and s["latency"] >= DEADLINE, f"{name}: round {s['round']} {s}"
            if s["lost_first"] <= s["tau"] * E >> 8 and s["last_in"]:
                assert not s["nacks"] and s["latency"] < DEADLINE, f"{name}: round {s['round']} waited: {s}"
    assert all(s["kind"] in ("FULL", "ABORT") for s in result["reliable"]), "tau = 0 closed a round BOUNDED"
    assert summary(result["reliable"])["loss"] == 0
    base = summary(result["reliable"])["burst_mean"]
    for name in ("static", "phase"):
        assert base / summary(result[name])["burst_mean"] > 1, f"{name}: burst rounds no faster than reliable"
    for p, rounds, fraction, prob, lo, hi in oracle(seed(), ORACLE_ROUNDS):
        assert lo <= fraction <= hi, f"p = {p}: no-NACK fraction {fraction} outside [{lo}, {hi}] of {prob:.4f}"


pytestmark = pytest.mark.xdist_group("bounded_loss_tracker-default")

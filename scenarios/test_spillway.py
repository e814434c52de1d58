"""The Spillway scenario (``scenarios/spillway.py``), small: 3 hosts, 2 remote ranks, a ring of 3.

Its Spillway run on the hardware of ``testbenches/spillway/test_top.py``'s ``p3`` and its in-switch run on
``testbenches/spillway/test_inswitch.py``'s ``port`` parameters (the suite builds both) are replayed on the
RTL cycle by cycle through the lockstep: every output the model's run used must be the RTL's. The oracle:
every flow completes in every mode; Spillway's counters balance (every spilled packet re-injected, none out
of order, none stored at a full node) and its iteration beats tail drop's.
"""
import json
import os

import cocotb
import pytest

from hdl.spillway.inswitch import InSwitchSpillBuffer
from hdl.spillway.top import Spillway
from models.spillway.inswitch import InSwitchModel
from models.spillway.params import InSwitchParams
from models.spillway.top import SpillwayModel
from scenarios.common import replay
from scenarios.net import seed
from scenarios.spillway import Setting, simulate
from testbenches import runner, tb
from testbenches.lockstep import Lockstep
from testbenches.spillway.test_top import P3

SMALL = Setting(hosts=3, remote=2, a2a=40, ring=3, chunk=24, service=4, limit=12, kmin=4, kmax=8, high=6, low=2,
                capacity=4, latency=7, wan=300, fabric=5, window=32, ring_window=8, rto=600, drain_window=3,
                return_slots=2, flows=8, jitter=20)
#: ``testbenches/spillway/test_inswitch.py``'s ``port`` set (its build is shared).
INSWITCH = InSwitchParams(ports=3, high=10, low=3, capacity=9, drain_rate=2, drain_window=5, flows=8, order="port")
RTL = {"spillway": (Spillway, SpillwayModel, P3, "spillway.top"),
       "inswitch": (InSwitchSpillBuffer, InSwitchModel, INSWITCH, "spillway.inswitch")}


@cocotb.test()
async def spillway_rtl(dut):
    """The small run of one mode (``INNET_MODE``), replayed on the RTL through the lockstep."""
    mode = os.environ["INNET_MODE"]
    component, model, params, _ = RTL[mode]
    run = simulate(SMALL, mode, tb.seed(), params=params, rtl=True)
    lockstep = Lockstep(component(params), model(params))
    await replay(dut, lockstep, run["record"], f"spillway {mode}")
    cocotb.log.info("spillway %s: %d cycles replayed on the RTL, every output as the model's", mode, len(run["record"]))
    (tb.run_dir() / "result.json").write_text(json.dumps({"cycles": len(run["record"]),
                                                          "iteration": run["iteration"]}))


@pytest.mark.parametrize("mode", [pytest.param("spillway", marks=pytest.mark.xdist_group("spillway.top-p3")),
                                  pytest.param("inswitch", marks=pytest.mark.xdist_group("spillway.inswitch-port"))])
def test_spillway_rtl(mode, record_property):
    """The block's decisions in the small run are the RTL's."""
    component, _, params, block = RTL[mode]
    run = runner.run(component, params, "scenarios.test_spillway", "spillway_rtl", block=block,
                     env={"INNET_MODE": mode}, seed=seed())
    result = json.loads((run / "result.json").read_text())
    assert result["cycles"] > 0 and result["iteration"] is not None, result
    record_property("innet", run)


def test_spillway():
    """The oracle on the golden models: every flow completes; Spillway balances and beats tail drop."""
    runs = {mode: simulate(SMALL, mode, seed(), params=P3 if mode == "spillway" else None)
            for mode in ("taildrop", "deflect", "inswitch", "spillway")}
    for mode, run in runs.items():
        assert run["iteration"] is not None and None not in run["fct"], f"{mode}: a flow never completed"
    c = runs["spillway"]["counters"]
    assert c["spilled"] > 0 and c["spilled"] == c["reinjected"] == c["node_returned"], c
    assert c["misordered"] == 0 and c["node_overflow"] == 0 and c["node_drain_empty"] == 0, c
    assert runs["spillway"]["iteration"] < runs["taildrop"]["iteration"], {m: r["iteration"] for m, r in runs.items()}


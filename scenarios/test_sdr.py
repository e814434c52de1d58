"""The SDR scenario (``scenarios/sdr.py``), small: RTT 200 chunk times, 64-chunk messages, 25 a point.

The tracker's inputs of every message of one run of each scheme at P_drop 1e-1 (commands and packets, in
the order the model took them) are replayed on the ``ChunkBitmap`` RTL; the testbench's lockstep compares
every output with the model's (a differing bit fails), so every decision the senders reacted to is the
RTL's. The oracle (``check``): the SR mean within 5 % of App. A where 3 standard errors fit in 5 %, the EC
fallback rate within 4 standard errors of 1 - P_EC^L, lossless times at low loss, MDS faster than SR-RTO
from 1e-2 on.
"""
import json
import random

import cocotb
import pytest

from hdl.chunk_bitmap import ChunkBitmap
from scenarios.net import seed
from scenarios.sdr import PARAMS, SCHEMES, Tracker, check, run_point, sweep
from testbenches import runner, tb
from testbenches.test_chunk_bitmap import TB

RTT, SIZE, TRIALS = 200, 64, 25


def recorded(seed_value):
    """The tracker's inputs of 3 messages of every scheme at P_drop 1e-1, and the model's outcome counts."""
    tracker = Tracker(record=True)
    for k, scheme in enumerate(SCHEMES):
        run_point(scheme, SIZE, 1e-1, seed_value, tracker, 3, RTT, first_msg=3 * k)
    return tracker.record, tracker.model.counters()


@cocotb.test()
async def sdr_rtl(dut):
    """The recorded inputs on the RTL; the lockstep checks every output."""
    t = TB(dut, random.Random(0))
    await tb.reset(dut)
    record, counters = recorded(tb.seed())
    for kind, arg in record:
        if kind == "cmd":
            await t.settle()
            t.command(arg)
            await t.settle()
        else:
            t.send(arg)
    await t.finish("sdr")
    (tb.run_dir() / "result.json").write_text(json.dumps({"inputs": len(record), "outputs": len(t.outputs)}))


@pytest.mark.xdist_group("chunk_bitmap-default")     # the cocotb tests' build of the same parameters
def test_sdr_rtl(record_property):
    """The tracker's decisions in the small runs are the RTL's."""
    run = runner.run(ChunkBitmap, PARAMS, "scenarios.test_sdr", "sdr_rtl", block="chunk_bitmap", seed=seed())
    result = json.loads((run / "result.json").read_text())
    assert result["outputs"] == sum(kind == "pkt" for kind, _ in recorded(seed())[0]), result
    record_property("innet", run)


def test_sdr():
    """The oracle on the golden model, small."""
    rows = sweep(seed(), sizes=(SIZE,), rates=(1e-6, 1e-2, 1e-1), trials=TRIALS, rtt=RTT)
    bad = check(rows)
    assert not bad, "\n".join(bad)

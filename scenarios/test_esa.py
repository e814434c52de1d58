"""ESA scenario: several jobs of different priority share a small aggregator pool.

The closed loop of ``tools/agg_measure.py`` (workers with a window of outstanding rounds and
retransmission timeouts, a parameter server that sums the pieces it receives and ACKs completed
rounds with the sum, link latencies) runs one multi-job trace under ATP, SwitchML and ESA, with the
``Aggregator`` RTL of that policy under Verilator as the switch: each packet the loop hands to the
switch is driven into the RTL (one per cycle), the loop reacts to the RTL's outputs, and every
output is checked against the golden model by the lockstep (fed the packets the RTL took), the slots'
occupancy every cycle too. The sweep over pool sizes and job counts on the golden models, its CSV and
plots: ``python -m scenarios esa``.
"""
import json
import os
from collections import Counter

import cocotb
import numpy as np
import pytest
from cocotb.triggers import RisingEdge

from hdl.aggregator import POLICIES, Aggregator, AggregatorParams
from models.aggregator import AggregatorModel
from models.headers import INA, Ether
from models.packet import beats_of
from testbenches import runner, tb
from testbenches.lockstep import Lockstep
from tools.agg_measure import IN_PORT, ClosedLoop, job_round, occupancy, simulate

PARAMS = AggregatorParams(slots=4, workers=4, values=2, data_bytes=64)
#: ``INNET_SCALE=n`` runs n times as many rounds per job.
SCALE = int(os.environ.get("INNET_SCALE") or 1)
TRACE = dict(jobs=4, rounds=20 * SCALE, window=3, latency=20, jitter=8, timeout=400, ps_cost=6)
#: Liveness bound: the trace ends well before this (about 75 cycles per round).
MAX_CYCLES = 1000 * TRACE["rounds"]


def seed():
    """The trace's seed: ``INNET_SEED`` if set, else 1 (the run reported in the README)."""
    return runner.traffic_seed(default=1)


def config():
    """Keyword arguments of ``ClosedLoop`` / ``simulate`` besides policy and seed."""
    return dict(TRACE, slots=PARAMS.slots, workers=PARAMS.workers, values=PARAMS.values)


def int_keys(obj):
    """JSON object hook: integer keys (jobs) back from strings."""
    return {int(k) if k.isdigit() else k: v for k, v in obj.items()}


@cocotb.test()
async def esa(dut):
    """The policy's closed loop with the RTL as the switch, checked against the model each cycle."""
    params = tb.params()
    policy, width, slots = params.policy, params.data_bytes, params.slots
    loop = ClosedLoop(policy, tb.seed(), **config())
    lockstep = Lockstep(Aggregator(params), AggregatorModel(params))
    model = lockstep.model
    if policy == "switchml":
        probes = [getattr(dut, f"count{k}_{t}") for k in range(slots) for t in range(2)]
        expect = lambda: [c for s in model.pool for c in s.count]                # noqa: E731
    else:
        probes = [getattr(dut, f"{name}{k}") for k in range(slots) for name in ("jobseq", "count")]
        expect = lambda: [v for s in model.state for v in (s.jobseq, s.count)]   # noqa: E731
    layout = lockstep.ports.by_name["i"].layout
    handles = {name: getattr(dut, name) for name in lockstep.ports.names()}
    tb.start_clock(dut)
    dut.i__valid.value = 0
    dut.o__ready.value = 1
    await tb.reset(dut, 3)
    lockstep.reset()
    edge = RisingEdge(dut.clk)
    taken, sent, out = None, [], []
    collisions, preempted = Counter(), Counter()
    while loop.busy() or any(lockstep.pending.values()):
        assert loop.cycle < MAX_CYCLES, f"{policy}: the trace has not finished in {MAX_CYCLES} cycles"
        raw = loop.arrivals()
        dut.i__valid.value = int(raw is not None)
        if raw is not None:
            dut.i__payload.value = tb.pack(layout, beats_of(raw, {"port": IN_PORT}, width)[0])
        await edge                      # values read now are those of the cycle that just ended
        if raw is not None:
            sent.append(tb.Frame(tb.now(), raw))
        state = [int(v.value) for v in probes]
        assert state == expect(), f"{policy}: cycle {loop.cycle}: slot state RTL {state}, model {expect()}"
        busy = occupancy(model)         # the model before this cycle's packet, as the RTL's slots
        values = tb.PortValues(handles)
        lockstep.cycle(values, where=f"{policy}: cycle {loop.cycle}")      # every output as the model's
        assert raw is None or values["i__ready"], f"{policy}: cycle {loop.cycle}: input not taken"
        outputs = []
        if values["o__valid"]:
            beat = tb.unpack(lockstep.ports.by_name["o"].layout, values["o__payload"])
            assert beat["first"] and beat["last"], f"{policy}: cycle {loop.cycle}: output is not one beat"
            outputs.append((beat["data"].to_bytes(width, "little")[:beat["keep"].bit_length()], beat["meta"]))
        for item in outputs:
            out.append(tb.Frame(tb.now(), item[0]))
            h = Ether(item[0])[INA]
            owner = job_round(h.jobseq)[0]  # evicted by another job's packet: preempted
            collisions[owner] += h.collision
            preempted[owner] += h.evict and not h.resend and job_round(Ether(taken)[INA].jobseq)[0] != owner
        loop.leave(outputs)
        loop.tick(*busy)
        taken = raw
    lockstep.done()
    counters = {name: int(getattr(dut, name).value) for name in model.counters()}
    assert counters == model.counters(), f"{policy}: counters RTL {counters}, model {model.counters()}"
    assert sum(collisions.values()) == counters["collision"]
    assert sum(preempted.values()) == counters["preempted"]
    tb.write_pcap("in", sent)
    tb.write_pcap("out", out)
    cocotb.log.info("%s: %d cycles, %d packets in, %d out, all as the model; completion %s",
                    policy, loop.cycle, len(sent), len(out), loop.finish)
    (tb.run_dir() / "result.json").write_text(json.dumps({
        "finish": loop.finish, "stats": loop.stats(counters), "fanin": loop.fanin,
        "collisions": collisions, "preempted": preempted,
        "learned": [[j, r, v] for (j, r), v in sorted(loop.learned.items())]}))


def test_esa(record_property):
    """All policies finish every round with numpy's sums; ESA's mean completion is no worse than ATP's."""
    results, pcaps = {}, []
    for policy in POLICIES:
        run = runner.run(Aggregator, PARAMS.replace(policy=policy), "scenarios.test_esa", "esa",
                         block="scenario_esa", env={"INNET_SCALE": str(SCALE)}, seed=seed())
        results[policy] = json.loads((run / "result.json").read_text(), object_hook=int_keys)
        pcaps += run["artefacts"]["pcaps"]
    jobs, rounds = TRACE["jobs"], TRACE["rounds"]
    reference = ClosedLoop("esa", seed(), **config())      # the workers' gradients (numpy)
    for policy, r in results.items():
        assert sorted(r["finish"]) == list(range(jobs)), f"{policy}: jobs finished {sorted(r['finish'])}"
        assert len(r["learned"]) == jobs * rounds, f"{policy}: {len(r['learned'])} rounds learned"
        for j, rnd, values in r["learned"]:
            assert values == reference.expected(j, rnd).tolist(), (
                f"{policy}: job {j} round {rnd}: workers got {values}, numpy sum "
                f"{reference.expected(j, rnd).tolist()}")
        model_loop, _ = simulate(policy, seed(), **config())
        assert model_loop.finish == r["finish"], f"{policy}: model-only loop {model_loop.finish}"

    mean = {p: float(np.mean(list(r["finish"].values()))) for p, r in results.items()}
    record_property("innet", {"kind": "scenario", "name": "esa", "seed": seed(), "files": pcaps,
                              "headline": ", ".join(f"{p} {m:.1f}" for p, m in mean.items())})
    assert mean["esa"] <= mean["atp"], f"ESA's mean completion {mean['esa']} is worse than ATP's {mean['atp']}"


pytestmark = pytest.mark.xdist_group("scenario_esa")

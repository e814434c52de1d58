"""ESA at work (``make sim BLOCK=esa``): a higher-priority job preempts an aggregator slot.

Job A (priority 1) aggregates a round in slot ``SLOT``: three of its four workers are in when job B
(priority 5) sends its first contribution to the same slot. ESA evicts A's partial aggregate to the
parameter server in one packet (its values and bitmap) and gives the slot to B; A's last contribution
then collides and goes to the PS as it is, and B's round completes in the switch. The baseline is ATP
as published (its golden model, fed the same packets): A keeps the slot and every contribution of B goes
to the PS unaggregated.
"""
import dataclasses
import random

import cocotb
from scapy.layers.l2 import Ether

from demos import Run, cycle, linger, plural, window
from models.aggregator import AggregatorModel, AggregatorParams
from models.contract import Packet
from models.headers import INA, ina_packet
from testbenches import tb

TITLE = "a higher-priority job preempts a slot, with the eviction packet"
#: The aggregator testbench's ESA parameters (one build for both): 4 slots, 4 workers, 8 values.
PARAMS = AggregatorParams(policy="esa", slots=4, workers=4, values=8, data_bytes=128, ps_port=0, mcast_port=255)
RUNS = (Run("aggregator", PARAMS, "preemption"),)
PCAPS = {"in": "workers' contributions", "out": "to the parameter server"}
SLOT = 2
#: job+seq and priority of each job's round.
JOBS = {"A": (0x0001_0007, 1), "B": (0x0002_0003, 5)}
SIGNALS = ("i__valid", "o__valid", "consumed", "preempted", "collision", "completed")


class Aggregation(tb.BlockTB):
    """Contributions in, packets to the PS out; the lockstep checks each output against the model."""

    name = "aggregator"

    def __init__(self, dut):
        super().__init__(dut)
        self.source, self.sink = self.packet_source("i"), self.packet_sink("o")


def contributions(rng):
    """Each job's workers' values: ``{job: [[int] * values] * workers]}``."""
    return {job: [[rng.randrange(-1000, 1000) for _ in range(PARAMS.values)] for _ in range(PARAMS.workers)]
            for job in JOBS}


#: (job, worker) in arrival order: A's first three, B's first, A's last, B's other three.
SEQUENCE = (("A", 0), ("A", 1), ("A", 2), ("B", 0), ("A", 3), ("B", 1), ("B", 2), ("B", 3))


def packet(grads, job, worker):
    jobseq, priority = JOBS[job]
    return bytes(ina_packet(worker, jobseq, SLOT, grads[job][worker], fanin=PARAMS.workers, priority=priority))


def atp_outputs(packets):
    """What ATP's golden model sends for ``packets`` (raw, meta): INA headers."""
    model = AggregatorModel(dataclasses.replace(PARAMS, policy="atp"))
    return [Ether(out.data)[INA] for raw, meta in packets for out in model.process("i", Packet(raw, meta))["o"]]


def summary_of(h):
    return {"jobseq": h.jobseq, "bitmap": h.bitmap, "evict": h.evict, "collision": h.collision,
            "values": list(h.values)}


@cocotb.test()
async def preemption(dut):
    rng = random.Random(tb.seed())
    t = Aggregation(dut)
    await t.reset()
    grads = contributions(rng)
    sent = [(packet(grads, job, w), {"port": 1 + w}) for job, w in SEQUENCE]
    for raw, meta in sent:
        t.source.send_nowait(raw, meta)
    await t.source.wait_idle()
    while any(t.lockstep.pending.values()):     # every packet the model made has come out of the RTL
        await t.edge()
    await linger(t)
    t.check_done()
    counters = t.check_counters()
    t.write_pcaps()
    out = [(f, Ether(f.data)[INA]) for f in t.sink.log]
    evicted = next(f for f, h in out if h.evict)
    collided = next(f for f, h in out if h.collision)
    complete = next(f for f, h in out if h.jobseq == JOBS["B"][0] and not h.collision)
    eviction = Ether(evicted.data)[INA]
    assert eviction.values == [sum(col) for col in zip(*grads["A"][:3])], "the eviction carries A's partial sum"
    tb.summary(demo={"sent": len(sent), "b_delay": cycle(complete.time) - cycle(t.source.log[-1].time),
                     "out": [summary_of(h) for _, h in out],
                     "atp": [summary_of(h) for h in atp_outputs(sent)],
                     "window": window(SIGNALS, {"eviction": cycle(evicted.time), "A collision": cycle(collided.time),
                                                "B complete": cycle(complete.time)})})
    assert counters["preempted"] == 1


def pieces(outputs, job):
    """(packets to the PS of ``job``, how many are single contributions)."""
    mine = [h for h in outputs if h["jobseq"] == JOBS[job][0]]
    return len(mine), sum(bin(h["bitmap"]).count("1") == 1 for h in mine)


def story(summaries):
    (run,) = summaries
    d, c = run["demo"], run["counters"]
    at = d["window"]["events"]
    ev = next(h for h in d["out"] if h["evict"])
    shown = ", ".join(map(str, ev["values"][:3]))
    atp_b, atp_b_single = pieces(d["atp"], "B")
    esa_b, _ = pieces(d["out"], "B")
    return [
        ("in", f"{d['sent']} contributions of {PARAMS.values} int32 values to slot {SLOT}: job A (priority "
               f"{JOBS['A'][1]}) workers 0-2, job B (priority {JOBS['B'][1]}) worker 0, A's worker 3, B's workers 1-3"),
        ("esa", f"B preempted the slot ({c['preempted']} preemption): one eviction packet took A's partial "
                f"aggregate to the PS (job+seq {ev['jobseq']:#x}, bitmap {ev['bitmap']:#x}, values {shown}, ... = "
                f"the sum of workers 0-2); A's worker 3 collided ({c['collision']}) and went to the PS as it was; "
                f"B completed in the switch ({c['completed']} complete, {esa_b} packet to the PS)"),
        ("baseline", f"ATP (its model, the same packets): A keeps the slot, B's {atp_b} contributions collide "
                     f"and reach the PS one by one ({atp_b_single} unaggregated); {len(d['atp'])} packets to the PS "
                     f"against ESA's {len(d['out'])}"),
        ("latency", f"A's round reaches the PS in two pieces (cycles {at['eviction']} and {at['A collision']}) "
                    f"instead of one aggregate; B's leaves the switch whole at cycle {at['B complete']}, "
                    f"{plural(d['b_delay'], 'cycle')} after its last contribution went in, where ATP leaves its "
                    f"{PARAMS.workers} contributions to the PS"),
    ]

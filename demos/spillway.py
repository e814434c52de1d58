"""Spillway at work (``make sim``): a burst of RoCEv2 flows into a congested egress port.

The port sends one packet every ``SERVICE`` cycles while the burst arrives at line rate. Its queue
reaches the high watermark; the switch spills packets whole to the spill node (and, per flow, every
later packet behind a spilled one, to keep the flow in order); once the queue falls to the low
watermark it asks for them back and re-injects them. Nothing is lost. The baseline is a tail-drop
port with the buffer the Spillway port needed (its queue's peak), fed the same arrivals: a model-level
queue (``tail_drop``), served at the same rate.
"""
import random
import statistics

import cocotb
from scapy.layers.l2 import Ether

from demos import Run, cycle, window
from models import wire
from models.headers import Spill
from models.spillway.params import SpillSwitchParams, SpillwayParams
from testbenches import tb
from testbenches.spillway import traffic
from testbenches.spillway.test_top import TB

TITLE = "a burst into a congested egress port"
#: Two ports, watermarks 8 / 3, 32 credits a port at the node, spill links of 8 cycles each way.
PARAMS = SpillwayParams(switch=SpillSwitchParams(ports=2, high=8, low=3, capacity=32, drain_rate=1, drain_window=4,
                                                 flows=16, order="flow", mtu=256, buffer=16, return_slots=2,
                                                 data_bytes=64, counter_bits=16), latency=8)
RUNS = (Run("spillway.top", PARAMS, "burst"),)
#: The pcaps of a run and what they hold.
PCAPS = {"in": "host in", "out": "host out", "spill_o": "switch to node: DATA, DRAIN",
         "spill_i": "node to switch: RETURN"}
PACKETS, FLOWS, PORT = 40, 4, 0
#: The congested port sends one packet every SERVICE cycles.
SERVICE = 4
SIGNALS = ("i__valid", "o__valid", "qdepth", "spill_o__valid", "spill_i__valid", "outstanding", "node_stored")


def tail_drop(arrivals, buffer, service):
    """Packets a tail-drop port drops: ``arrivals`` are waveform cycles (sorted); each cycle the queue first
    sends a packet when the cycle is a multiple of ``service``, then takes the cycle's arrivals while it holds
    fewer than ``buffer``."""
    queue = dropped = 0
    pending = list(arrivals)
    for now in range(pending[0], pending[-1] + 1) if pending else ():
        if now % service == 0:
            queue = max(queue - 1, 0)
        while pending and pending[0] == now:
            pending.pop(0)
            if queue < buffer:
                queue += 1
            else:
                dropped += 1
    return dropped


class Burst(TB):
    """The top's testbench (the lockstep every cycle, the egress queues, the spill link's frames) with the
    congested port's queue peak."""

    def __init__(self, dut):
        super().__init__(dut, service=SERVICE)
        self.peak = 0

    def sampled(self, values):
        self.peak = max(self.peak, self.queues[PORT])


@cocotb.test()
async def burst(dut):
    """FLOWS flows, PACKETS packets of one or two beats at line rate into port PORT."""
    rng = random.Random(tb.seed())
    t = Burst(dut)
    await t.reset()
    flows = traffic.flows(rng, FLOWS, 1)
    for n in range(PACKETS):
        t.send(traffic.packet(flows[n % FLOWS], n, rng.randrange(0, 48)), PORT)
    await t.settle()
    t.check("burst")        # counters = model's, conservation, nothing lost or reordered; the four pcaps
    arrivals = {f.data: cycle(f.time) for f in t.source.log}
    spilled = {bytes(Ether(f.data)[Spill].payload) for f in t.links["spill_o"].log
               if Ether(f.data)[Spill].op == wire.SPILL_DATA}
    delay = {True: [], False: []}
    for f in t.sink.log:
        delay[f.data in spilled].append(cycle(f.time) - arrivals[f.data])
    frames = t.links["spill_o"].log
    events = {"first spill": cycle(next(f.time for f in frames if Ether(f.data)[Spill].op == wire.SPILL_DATA)),
              "first drain": cycle(next(f.time for f in frames if Ether(f.data)[Spill].op == wire.SPILL_DRAIN)),
              "first back": cycle(next(f.time for f in t.sink.log if f.meta["spilled"]))}
    tb.summary(demo={
        "packets": len(arrivals), "flows": FLOWS, "bytes": [min(map(len, arrivals)), max(map(len, arrivals))],
        "span": max(arrivals.values()) - min(arrivals.values()) + 1, "service": SERVICE, "peak": t.peak,
        "stored": t.max_stored, "dropped": tail_drop(sorted(arrivals.values()), t.peak, SERVICE),
        "delay": {"direct": statistics.mean(delay[False]), "spilled": statistics.mean(delay[True]),
                  "max": max(delay[True])},
        "window": window(SIGNALS, events)})


def story(summaries):
    """What went in, what Spillway did, what tail drop would have done, the latency paid."""
    (run,) = summaries
    d, c, p = run["demo"], run["counters"], PARAMS.switch
    delay = d["delay"]
    return [
        ("in", f"{d['packets']} RoCEv2 packets ({d['bytes'][0]}-{d['bytes'][1]} bytes) of {d['flows']} flows at "
               f"line rate ({d['span']} cycles) into one egress port that sends a packet every {d['service']} "
               f"cycles; watermarks high {p.high}, low {p.low}"),
        ("spillway", f"{c['spilled']} spilled whole to the spill node (at most {d['stored']} held there), "
                     f"{c['drain_requests']} asked back once the queue fell to {p.low}, {c['reinjected']} re-injected "
                     f"in flow order; {c['forwarded']} forwarded at once; lost {c['spill_overflow']}"),
        ("baseline", f"tail drop with the same {d['peak']}-packet queue and the same arrivals: {d['dropped']} of "
                     f"the {d['packets']} dropped (each a go-back-N retransmission for RoCE)"),
        ("latency", f"spilled packets took {delay['spilled']:.0f} cycles from in to out on average (at most "
                    f"{delay['max']}), forwarded ones {delay['direct']:.0f}: "
                    f"+{delay['spilled'] - delay['direct']:.0f} cycles each, paid instead of a drop"),
    ]

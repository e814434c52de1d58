"""Spillway scenario: a cross-DC burst collides with an intra-DC incast at one egress port.

Senders are go-back-N RoCEv2 flows (the receiver takes only the next PSN; a sender that sees no
ACK progress for its retransmission timeout resends from the first unacknowledged PSN). Four
intra-DC flows (short RTT) and one cross-DC flow (long RTT, a window worth a burst) all go to
egress port 0, which sends one packet every ``SERVICE`` cycles from a queue of ``LIMIT`` packets.

- without the spill buffer: a packet that finds the egress queue full is dropped (tail drop);
- with it: the ``SpillBuffer`` sits in front of the queue (``high`` < ``LIMIT``): packets that
  would overflow are spilled and drained back when the queue is down to ``low``.

The closed loop runs on the golden model (cycle-accurate); every cycle's inputs and outputs are
recorded and the RTL replays them under Verilator, so each decision the loop used is checked
against the RTL. Output: ``build/scenarios/spillway.csv`` (per mode and flow) and ``.png``. The flow
start offsets come from the run's traffic seed (``INNET_SEED`` replays them).
"""
import collections
import json
import random

import cocotb
import pytest
from amaranth.lib import data

from hdl.packet import beat_layout
from hdl.spill_buffer import SpillBuffer, SpillBufferParams, descriptor_layout
from models.headers import roce_packet
from models.packet import beats_of
from models.spill_buffer import SpillBufferModel
from scenarios.common import OUT, figure, replay, write_csv
from testbenches import runner, tb

PARAMS = SpillBufferParams(ports=2, high=16, low=4, capacity=256, drain_rate=1, drain_window=2,
                           flows=16, order="flow", depth_bits=16, handle_bits=16, data_bytes=64)
LIMIT, SERVICE = 24, 2
#: (name, packets, one-way delay, window, retransmission timeout), cycles.
FLOWS = [(f"intra{n}", 150, 10, 16, 400) for n in range(4)] + [("cross", 400, 150, 160, 1200)]
JITTER = 50                                     # random start offset of each flow, cycles
MAX_CYCLES = 40000


class Sender:
    """A go-back-N sender and its receiver."""

    def __init__(self, index, name, total, delay, window, rto, start):
        self.index, self.name, self.total, self.delay, self.window, self.rto = index, name, total, delay, window, rto
        self.start = start
        self.next = self.una = self.expected = 0
        self.progress = 0
        self.sent = self.resent = self.dropped = self.discarded = 0
        self.done = None

    def packet(self, psn):
        """The RoCEv2 frame of ``psn`` of this flow."""
        return bytes(roce_packet(src=f"10.{1 + (self.name == 'cross')}.0.{self.index + 1}",
                                 dst="10.0.0.100", sport=49152 + self.index, qp=0x10 + self.index, psn=psn))


def simulate(spill, seed):
    """Run the closed loop (flow starts drawn from ``seed``); return (per-flow stats, time series,
    recorded RTL cycles or None, spill counters, ingress frames)."""
    rng = random.Random(seed)
    senders = [Sender(n, *flow, rng.randrange(JITTER)) for n, flow in enumerate(FLOWS)]
    model = SpillBufferModel(PARAMS) if spill else None
    layout = beat_layout(PARAMS.data_bytes)
    depth_layout = data.ArrayLayout(PARAMS.depth_bits, PARAMS.ports)
    descriptor = descriptor_layout(PARAMS.handle_bits)
    events = collections.defaultdict(list)      # cycle -> [(kind, sender, psn)]
    ingress = collections.deque()               # packets at the switch input (one per cycle)
    queue = collections.deque()                 # egress port 0
    handles = []                                # handle -> (sender, psn)
    series, record, frames = [], [], []        # frames: (recorded cycle, ingress frame)
    served_at = 0
    cycle = 0
    while cycle < MAX_CYCLES and not all(s.done is not None for s in senders):
        for kind, s, psn in events.pop(cycle, ()):
            if kind == "arrive":                # at the switch input
                ingress.append((s, psn))
            elif kind == "deliver":             # at the receiver
                if psn == s.expected:
                    s.expected += 1
                    if s.expected == s.total:
                        s.done = cycle
                else:
                    s.discarded += 1
                events[cycle + s.delay].append(("ack", s, s.expected))
            elif kind == "ack" and psn > s.una:
                s.una, s.progress = psn, cycle
        for s in senders:                       # one packet per sender per cycle
            if cycle < s.start:
                continue
            if s.una < s.next and cycle - s.progress > s.rto:
                s.next, s.progress = s.una, cycle
            if s.next < min(s.una + s.window, s.total):
                if s.next < s.sent:
                    s.resent += 1
                s.sent = max(s.sent, s.next + 1)
                if s.next == s.una:
                    s.progress = max(s.progress, cycle)
                events[cycle + s.delay].append(("arrive", s, s.next))
                s.next += 1

        depth = [len(queue), 0]
        head = ingress[0] if ingress else None
        if not spill:
            if head is not None:
                ingress.popleft()
                if len(queue) >= LIMIT:
                    head[0].dropped += 1
                else:
                    queue.append(head)
        else:
            frame = head[0].packet(head[1]) if head else None
            beat = beats_of(frame, {"port": 0}, PARAMS.data_bytes)[0] if head else None
            before = model.counters["spill_overflow"]
            i_ready, o_valid, out = model.step(beat, depth, True)
            inputs = {"i__valid": int(head is not None), "i__payload": tb.pack(layout, beat) if head else 0,
                      "qdepth": tb.pack(depth_layout, depth), "o__ready": 1}
            expected = {"o__valid": int(o_valid)}
            if head is not None:
                expected["i__ready"] = int(i_ready)
            if o_valid:
                expected["o__payload"] = tb.pack(descriptor, out)
                if len(queue) >= LIMIT:
                    handles[out["handle"]][0].dropped += 1
                else:
                    queue.append(handles[out["handle"]])
            if head is not None and i_ready:
                ingress.popleft()
                handles.append(head)
                frames.append((len(record), frame))
                if model.counters["spill_overflow"] > before:
                    head[0].dropped += 1
            record.append((inputs, expected))
        if queue and cycle >= served_at:
            s, psn = queue.popleft()
            served_at = cycle + SERVICE
            events[cycle + 1].append(("deliver", s, psn))
        if cycle % 10 == 0:
            series.append((cycle, len(queue), model.pending if spill else 0))
        cycle += 1
    stats = [dict(flow=s.name, packets=s.total, sent=s.sent + s.resent, resent=s.resent,
                  dropped=s.dropped, discarded=s.discarded, completion=s.done) for s in senders]
    return stats, series, (record if spill else None), (dict(model.counters) if spill else {}), frames


@cocotb.test()
async def spillway(dut):
    """The closed loop with the spill buffer, replayed on the RTL cycle by cycle."""
    seed = tb.seed()
    stats, series, record, counters, frames = simulate(True, seed)
    times = await replay(dut, record, "spillway")
    tb.write_pcap("in", [tb.Frame(times[cycle], frame) for cycle, frame in frames])
    cocotb.log.info("spillway: %d cycles replayed on the RTL, counters %s", len(record), counters)
    (tb.run_dir() / "result.json").write_text(json.dumps({"seed": seed, "stats": stats, "series": series,
                                                          "counters": counters}))


def test_spillway(record_property):
    """With the spill buffer: fewer drops and an earlier cross-DC completion than tail drop."""
    run = runner.run(SpillBuffer, PARAMS, "scenarios.test_spillway", "spillway", block="scenario_spillway")
    result = json.loads((run / "result.json").read_text())
    without, series_without, _, _, _ = simulate(False, result["seed"])
    modes = {"spill": result["stats"], "taildrop": without}
    rows = [(mode, s["flow"], s["packets"], s["sent"], s["resent"], s["dropped"], s["discarded"], s["completion"])
            for mode, stats in modes.items() for s in stats]
    write_csv("spillway", ["mode", "flow", "packets", "sent", "resent", "dropped", "discarded", "completion"], rows)
    with figure("spillway", cols=2) as (depth_ax, bars):
        for mode, series, style in (("spill", result["series"], "-"), ("taildrop", series_without, "--")):
            depth_ax.plot([c for c, _, _ in series], [q for _, q, _ in series], style, label=f"{mode}: egress queue")
        depth_ax.plot([c for c, _, _ in result["series"]], [p for _, _, p in result["series"]], ":",
                      label="spill: packets in the spill buffer")
        depth_ax.axhline(LIMIT, color="grey", lw=0.5)
        depth_ax.set(xlabel="cycle", ylabel="packets", title="egress port 0")
        depth_ax.legend()
        names = [s["flow"] for s in without]
        for offset, (mode, stats) in enumerate(modes.items()):
            bars.bar([n + 0.4 * offset for n in range(len(names))], [s["completion"] or 0 for s in stats],
                     width=0.4, label=mode)
        bars.set_xticks([n + 0.2 for n in range(len(names))], names)
        bars.set(ylabel="completion cycle", title="flow completion")
        bars.legend()
    drops = {mode: sum(s["dropped"] for s in stats) for mode, stats in modes.items()}
    cross = {mode: next(s["completion"] for s in stats if s["flow"] == "cross") for mode, stats in modes.items()}
    headline = f"drops {drops}, cross-DC completion {cross}, spill counters {result['counters']}"
    print(f"seed {result['seed']}: {headline}")
    record_property("innet", {"kind": "scenario", "name": "spillway", "seed": result["seed"], "headline": headline,
                              "files": [OUT / "spillway.csv", OUT / "spillway.png", *run["artefacts"]["pcaps"]]})
    assert all(s["completion"] is not None for stats in modes.values() for s in stats), "a flow never completed"
    assert drops["spill"] < drops["taildrop"], drops
    assert cross["spill"] < cross["taildrop"], cross


pytestmark = pytest.mark.xdist_group("scenario_spillway")

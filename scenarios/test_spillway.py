"""Spillway scenario: a cross-DC burst collides with an intra-DC incast at one egress port.

Senders are go-back-N RoCEv2 flows (the receiver takes only the next PSN; a sender that sees no
ACK progress for its retransmission timeout resends from the first unacknowledged PSN). Four
intra-DC flows (short RTT) and one cross-DC flow (long RTT, a window worth a burst) all go to
egress port 0, which sends one packet every ``SERVICE`` cycles from a queue of ``LIMIT`` packets.
Three modes, same extra memory (``capacity`` packets per port):

- ``taildrop``: a packet that finds the egress queue full is dropped;
- ``inswitch`` (the baseline): ``InSwitchSpillBuffer`` sits in front of the queue (``high`` <
  ``LIMIT``): packets that would overflow wait as handles in the switch's own memory and are drained
  back when the queue is down to ``low``;
- ``disaggregated`` (Spillway): ``Spillway`` (its switch side sends them whole on the spill link to its
  spill node and asks for them back; the link is a delay line of ``latency`` cycles each way), swept from
  short to long (``LATENCIES``).

The in-switch closed loop runs on the golden model and every cycle's inputs are replayed on the RTL
under Verilator in lockstep with the model, so each decision that loop used is checked against the RTL.
The disaggregated sweep runs on the golden model ``SpillwayModel`` (a Verilator build per latency point
is over the scenario's time budget; ``testbenches/spillway/test_top.py`` checks it against the RTL every
cycle); one disaggregated point, scaled down to the hardware the suite already builds for that testbench
(``RTL_TOP``), is replayed cycle by cycle on the whole ``Spillway``, beside tail drop with the same queue.
Output: ``build/scenarios/spillway.csv`` (per mode, latency and flow) and ``.png``. The flow start
offsets come from the trace seed (default 1, ``INNET_SEED`` replays another). A longer sweep:
``python -m scenarios.test_spillway --latencies 10,20,50,...``.
"""
import argparse
import collections
import functools
import json
import random

import cocotb
import pytest
from cocotb.triggers import RisingEdge

from hdl.spillway.inswitch import InSwitchSpillBuffer
from hdl.spillway.top import Spillway
from models.headers import roce_packet
from models.packet import beats_of
from models.spillway.inswitch import InSwitchModel
from models.spillway.params import InSwitchParams, SpillSwitchParams, SpillwayParams
from models.spillway.top import SpillwayModel
from scenarios.common import OUT, figure, replay, write_csv
from testbenches import runner, tb
from testbenches.lockstep import Lockstep
from testbenches.spillway.test_top import P3

PARAMS = InSwitchParams(ports=2, high=16, low=4, capacity=256, drain_rate=1, drain_window=2,
                        flows=16, order="flow", depth_bits=16, handle_bits=16, data_bytes=64)
#: Spillway: the same thresholds and per-port capacity (now at the node); the return buffer holds
#: ``return_slots`` packets, so at most that many drain requests are in flight (one round trip each).
DISAGG = SpillSwitchParams(**PARAMS.as_dict(), mtu=128, buffer=8, return_slots=64)
LIMIT, SERVICE = 24, 2
#: (name, packets, one-way delay, window, retransmission timeout), cycles.
FLOWS = [(f"intra{n}", 150, 10, 16, 400) for n in range(4)] + [("cross", 400, 150, 160, 1200)]
JITTER = 50                                     # random start offset of each flow, cycles
MAX_CYCLES = 40000
#: Spill-link latencies (cycles each way) of the default sweep.
LATENCIES = (10, 100, 300)
#: One disaggregated point replayed cycle by cycle on the RTL (``Spillway``: switch side, spill node and
#: links) with the hardware of ``testbenches/spillway/test_top.py``'s ``p3`` (the suite builds it: no
#: Verilator build of the scenario's own): 3 ports, spill at queue depth 6, drain at 2, 4 packets per port
#: at the node, 2 returns in flight, links of 7 cycles each way. The workload scaled to it: the same five
#: flows with fewer packets and smaller windows (``RTL_FLOWS``), an egress queue of ``RTL_LIMIT`` packets;
#: tail drop with the same queue on the model beside it.
RTL_TOP, RTL_LIMIT, RTL_LATENCY = P3, 7, P3.latency
RTL_FLOWS = [(f"intra{n}", 40, 10, 6, 400) for n in range(4)] + [("cross", 60, 150, 16, 1200)]


def seed():
    """The trace's seed: ``INNET_SEED`` if set, else 1 (the run reported in the README)."""
    return runner.traffic_seed(default=1)


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
        return _frame(self.index, self.name == "cross", psn)


@functools.cache
def _frame(index, cross, psn):
    # Built once per process (scapy is the slowest part of the model loops).
    return bytes(roce_packet(src=f"10.{1 + cross}.0.{index + 1}", dst="10.0.0.100", sport=49152 + index,
                             qp=0x10 + index, psn=psn))


def _packet_bytes(beat, width):
    return beat["data"].to_bytes(width, "little")[:beat["keep"].bit_length()]


def simulate(mode, seed, latency=0, params=None, limit=LIMIT, rtl=False, flows=FLOWS):
    """Run the closed loop of ``mode`` (``MODES``; ``latency``: the spill link's, cycles each way) with
    the flow starts drawn from ``seed``. Returns a dict: ``stats`` (per flow), ``series`` ((cycle,
    egress queue, packets spilled) every 10 cycles), ``counters`` of the spill buffer, ``cycles``,
    ``link`` (spill-link beats switch -> node and back), and for ``inswitch`` the model's inputs of every
    cycle ``record`` and ingress ``frames`` ((recorded cycle, frame)). ``disaggregated``: ``params`` the
    switch side's (default ``DISAGG``; the node takes its ports, capacity and mtu), ``limit`` the egress
    queue, ``rtl`` records every cycle's inputs of ``Spillway`` in ``record``."""
    rng = random.Random(seed)
    senders = [Sender(n, *flow, rng.randrange(JITTER)) for n, flow in enumerate(flows)]
    width = PARAMS.data_bytes
    sw = params or DISAGG
    model = (InSwitchModel(PARAMS) if mode == "inswitch" else
             SpillwayModel(SpillwayParams(switch=sw, latency=latency)) if mode == "disaggregated" else None)
    if rtl:
        assert SpillwayParams(switch=sw, latency=latency) == RTL_TOP, "record: only RTL_TOP's Spillway is built"
    events = collections.defaultdict(list)      # cycle -> [(kind, sender, psn)]
    ingress = collections.deque()               # packets at the switch input (one per cycle)
    queue = collections.deque()                 # egress port 0
    handles = []                                # in-switch: handle -> (sender, psn)
    owner = {}                                  # disaggregated: frame bytes -> (sender, psn)
    link = [0, 0]
    series, record, frames = [], [], []         # frames: (recorded cycle, ingress frame)
    served_at = 0
    cycle = 0

    def enqueue(item):
        if len(queue) >= limit:
            item[0].dropped += 1
        else:
            queue.append(item)

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

        depth = [len(queue)] + [0] * ((sw if mode == "disaggregated" else PARAMS).ports - 1)
        head = ingress[0] if ingress else None
        frame = head[0].packet(head[1]) if head and model else None
        beat = beats_of(frame, {"port": 0}, width)[0] if frame else None
        if mode == "taildrop":
            if head is not None:
                ingress.popleft()
                enqueue(head)
        elif mode == "inswitch":
            before = model.counters["spill_overflow"]
            inputs = {"i__valid": int(head is not None), "i__payload": beat, "qdepth": depth, "o__ready": 1}
            r = model.step(inputs)
            if r["o__valid"]:
                enqueue(handles[r["o__payload"]["handle"]])
            if head is not None and r["i__ready"]:
                ingress.popleft()
                handles.append(head)
                frames.append((len(record), frame))
                if model.counters["spill_overflow"] > before:
                    head[0].dropped += 1
            record.append(inputs)
        else:
            before = model.switch.counters()["spill_overflow"]
            inputs = {"i__valid": int(head is not None), "i__payload": beat, "qdepth": depth, "o__ready": 1,
                      "spill_pause": 0, "node_pause": 0}
            r = model.step(inputs)
            if rtl:
                record.append(inputs)
            if head is not None and r["i__ready"]:
                ingress.popleft()
                owner[frame] = head
                if rtl:
                    frames.append((len(record) - 1, frame))
                if model.switch.counters()["spill_overflow"] > before:
                    head[0].dropped += 1
            if r["o__valid"]:                   # single-beat packets: one per beat
                enqueue(owner[_packet_bytes(r["o__payload"], width)])
            link[0] += model.down.line[-1] is not None      # what entered each link in this cycle
            link[1] += model.up.line[-1] is not None
        if queue and cycle >= served_at:
            s, psn = queue.popleft()
            served_at = cycle + SERVICE
            events[cycle + 1].append(("deliver", s, psn))
        if cycle % 10 == 0:
            spilled = (model.pending if mode == "inswitch" else model.switch.outstanding()) if model else 0
            series.append((cycle, len(queue), spilled))
        cycle += 1
    stats = [dict(flow=s.name, packets=s.total, sent=s.sent + s.resent, resent=s.resent,
                  dropped=s.dropped, discarded=s.discarded, completion=s.done) for s in senders]
    counters = model.counters() if model else {}
    return {"stats": stats, "series": series, "cycles": cycle, "link": link, "record": record, "frames": frames,
            "counters": {k: v for k, v in counters.items() if not k.startswith("node_")},
            "node": {k[5:]: v for k, v in counters.items() if k.startswith("node_")}}


@cocotb.test()
async def spillway(dut):
    """The in-switch closed loop, replayed on the RTL cycle by cycle."""
    run = simulate("inswitch", tb.seed())
    times = await replay(dut, Lockstep(InSwitchSpillBuffer(PARAMS), InSwitchModel(PARAMS)), run["record"], "spillway")
    tb.write_pcap("in", [tb.Frame(times[cycle], frame) for cycle, frame in run["frames"]])
    cocotb.log.info("spillway: %d cycles replayed on the RTL, counters %s", len(run["record"]), run["counters"])
    (tb.run_dir() / "result.json").write_text(json.dumps({k: run[k] for k in ("stats", "series", "counters",
                                                                               "cycles", "link")}))


@cocotb.test()
async def spillway_disaggregated(dut):
    """The scaled-down Spillway point (``RTL_TOP``), replayed on the switch side and the node: every output
    of both, every cycle; then the counters of both against the models'."""
    run = simulate("disaggregated", tb.seed(), RTL_LATENCY, RTL_TOP.switch, RTL_LIMIT, rtl=True, flows=RTL_FLOWS)
    lockstep = Lockstep(Spillway(RTL_TOP), SpillwayModel(RTL_TOP))
    times = await replay(dut, lockstep, run["record"], "spillway_disaggregated")
    dut.i__valid.value = 0
    await RisingEdge(dut.clk)                    # the counters after the last recorded cycle's edge
    bits = RTL_TOP.switch.counter_bits
    got = {name: int(getattr(dut, name).value) for name in lockstep.model.counters()}
    assert got == {k: v % (1 << bits) for k, v in lockstep.model.counters().items()}, (got, run["counters"])
    tb.write_pcap("in", [tb.Frame(times[cycle], frame) for cycle, frame in run["frames"]])
    cocotb.log.info("spillway_disaggregated: %d cycles replayed on the RTL, counters %s, node %s",
                    len(run["record"]), run["counters"], run["node"])
    (tb.run_dir() / "result.json").write_text(json.dumps({k: run[k] for k in ("stats", "series", "counters",
                                                                               "cycles", "link", "node")}))


def iteration(stats):
    """Iteration time: the cycle the last flow completed (None if one never did)."""
    done = [s["completion"] for s in stats]
    return None if None in done else max(done)


def sweep(seed, latencies, inswitch=None):
    """Every mode on trace ``seed``: {(mode, latency): run}; ``inswitch`` is that mode's run if already
    made (on the RTL), latency 0 for the two modes without a spill link."""
    runs = {("taildrop", 0): simulate("taildrop", seed), ("inswitch", 0): inswitch or simulate("inswitch", seed)}
    runs.update({("disaggregated", lat): simulate("disaggregated", seed, lat) for lat in latencies})
    return runs


def report(seed, runs, name="spillway", point=None):
    """CSV + PNG of ``runs`` (``sweep``) and of the RTL ``point`` ({"taildrop": run, "disaggregated": run}
    of the scaled-down workload; CSV modes ``rtl_point_*``); returns (headline, files)."""
    everything = dict(runs)
    everything.update({(f"rtl_point_{mode}", RTL_LATENCY if mode == "disaggregated" else 0): run
                       for mode, run in (point or {}).items()})
    rows = [(mode, lat, s["flow"], s["packets"], s["sent"], s["resent"], s["dropped"], s["discarded"],
             s["completion"], iteration(run["stats"]), run["link"][0], run["link"][1], run["cycles"])
            for (mode, lat), run in everything.items() for s in run["stats"]]
    csv_path = write_csv(name, ["mode", "latency", "flow", "packets", "sent", "resent", "dropped", "discarded",
                                "completion", "iteration", "spill_beats_out", "spill_beats_back", "cycles"], rows)
    lats = sorted(lat for mode, lat in runs if mode == "disaggregated")
    disagg = [runs["disaggregated", lat] for lat in lats]
    with figure(name, cols=3, seed=seed) as (depth_ax, time_ax, drop_ax):
        for (mode, lat), run in runs.items():
            if mode != "disaggregated" or lat in (lats[0], lats[-1]):
                label = f"{mode}" + (f" (latency {lat})" if mode == "disaggregated" else "")
                depth_ax.plot([c for c, _, _ in run["series"]], [q for _, q, _ in run["series"]], label=label)
        depth_ax.axhline(LIMIT, color="grey", lw=0.5)
        depth_ax.set(xlabel="cycle", ylabel="egress queue (packets)", title="egress port 0")
        depth_ax.legend(fontsize="small")
        for mode, style in (("taildrop", "--"), ("inswitch", ":")):
            time_ax.axhline(iteration(runs[mode, 0]["stats"]) or MAX_CYCLES, ls=style, color="grey", label=mode)
            drop_ax.axhline(sum(s["dropped"] for s in runs[mode, 0]["stats"]), ls=style, color="grey", label=mode)
        time_ax.plot(lats, [iteration(r["stats"]) or MAX_CYCLES for r in disagg], "o-", label="disaggregated")
        cross = [next(s["completion"] for s in r["stats"] if s["flow"] == "cross") or MAX_CYCLES for r in disagg]
        time_ax.plot(lats, cross, "s--", label="disaggregated: cross-DC flow")
        time_ax.set(xscale="log", xlabel="spill link latency, cycles each way", ylabel="iteration time (cycles)",
                    title="last flow done")
        time_ax.legend(fontsize="small")
        drop_ax.plot(lats, [sum(s["dropped"] for s in r["stats"]) for r in disagg], "o-", label="disaggregated")
        drop_ax.set(xscale="log", xlabel="spill link latency, cycles each way", ylabel="packets dropped",
                    title="drops and spill-link load")
        drop_ax.legend(fontsize="small", loc="upper left")
        load_ax = drop_ax.twinx()
        for k, (style, way) in enumerate((("^:", "switch -> node"), ("v:", "node -> switch"))):
            load_ax.plot(lats, [r["link"][k] / r["cycles"] for r in disagg], style, color=f"C{k + 2}",
                         label=f"spill link {way}")
        load_ax.set(ylabel="spill link load, beats/cycle", ylim=(0, 1))
        load_ax.legend(fontsize="small", loc="center left")
    parts = [f"{mode}" + (f"@{lat}" if mode == "disaggregated" else "")
             + f": iteration {iteration(run['stats'])}, drops {sum(s['dropped'] for s in run['stats'])}"
             + (f", link {run['link'][0] / run['cycles']:.2f}/{run['link'][1] / run['cycles']:.2f} beats/cycle"
                if mode == "disaggregated" else "")
             for (mode, lat), run in runs.items()]
    if point:
        spill, tail = point["disaggregated"], point["taildrop"]
        parts.append(f"RTL point (p3 switch + node on Verilator, queue {RTL_LIMIT}, latency {RTL_LATENCY}, "
                     f"{spill['cycles']} cycles): Spillway iteration {iteration(spill['stats'])}, drops "
                     f"{sum(s['dropped'] for s in spill['stats'])} vs tail drop {iteration(tail['stats'])}, "
                     f"{sum(s['dropped'] for s in tail['stats'])}")
    return "; ".join(parts), [csv_path, OUT / f"{name}.png"]


def test_spillway(record_property):
    """Tail drop vs in-switch (its decisions from the RTL) vs Spillway over the latency sweep: spilling
    drops less and ends earlier than tail drop; the round trip costs (the longest link is slower than the
    shortest); the spill link never reorders (``misordered`` 0)."""
    run = runner.run(InSwitchSpillBuffer, PARAMS, "scenarios.test_spillway", "spillway", block="scenario_spillway",
                     seed=seed())
    inswitch = json.loads((run / "result.json").read_text())
    # One Spillway point on the RTL, on the build testbenches/spillway/test_top.py's p3 uses.
    top = runner.run(Spillway, RTL_TOP, "scenarios.test_spillway", "spillway_disaggregated", block="spillway.top",
                     seed=seed())
    point = {"taildrop": simulate("taildrop", seed(), limit=RTL_LIMIT, flows=RTL_FLOWS),
             "disaggregated": json.loads((top / "result.json").read_text())}
    runs = sweep(seed(), LATENCIES, inswitch)
    headline, files = report(seed(), runs, point=point)
    print(f"seed {seed()}: {headline}")
    record_property("innet", {"kind": "scenario", "name": "spillway", "seed": seed(), "headline": headline,
                              "files": [*files, *run["artefacts"]["pcaps"], *top["artefacts"]["pcaps"]]})
    for mode, r in point.items():
        assert iteration(r["stats"]) is not None, f"RTL point, {mode}: a flow never completed"
    c, node = point["disaggregated"]["counters"], point["disaggregated"]["node"]
    assert c["misordered"] == 0 and node["overflow"] == 0 and node["drain_empty"] == 0, (c, node)
    assert c["spilled"] > 0 and c["reinjected"] == c["spilled"], c
    drops = {key: sum(s["dropped"] for s in r["stats"]) for key, r in runs.items()}
    times = {key: iteration(r["stats"]) for key, r in runs.items()}
    assert None not in times.values(), f"a flow never completed: {times}"
    for lat in LATENCIES:
        assert runs["disaggregated", lat]["counters"]["misordered"] == 0
    short = ("disaggregated", LATENCIES[0])
    assert drops["inswitch", 0] < drops["taildrop", 0] and drops[short] < drops["taildrop", 0], drops
    assert times["inswitch", 0] < times["taildrop", 0] and times[short] < times["taildrop", 0], times
    assert times["disaggregated", LATENCIES[-1]] > times[short], times


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m scenarios.test_spillway", description="Spillway latency sweep "
                                     "on the golden models (in-switch included), CSV + PNG under build/scenarios.")
    parser.add_argument("--latencies", default="10,20,50,100,200,500,1000",
                        help="spill link latencies, cycles each way (comma-separated)")
    parser.add_argument("--seed", type=int, default=None, help="trace seed (default: INNET_SEED or 1)")
    args = parser.parse_args(argv)
    try:
        latencies = [int(x) for x in args.latencies.split(",")]
        if not latencies or min(latencies) < 1:
            raise ValueError
    except ValueError:
        parser.error(f"--latencies: {args.latencies!r} is not a list of cycle counts >= 1")
    s = seed() if args.seed is None else args.seed
    headline, files = report(s, sweep(s, latencies), name="spillway_sweep")
    print(f"seed {s}: {headline}")
    print("written", *files)


if __name__ == "__main__":
    main()


pytestmark = pytest.mark.xdist_group("scenario_spillway")

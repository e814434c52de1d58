"""Spillway: a cross-DC all-to-all collides with an intra-DC ring all-reduce at the destination leaf.

The setting (after the paper's, *chosen* sizes; one time unit = one cycle of the leaf's pipeline, which
takes one packet per cycle from the fabric):

- the destination leaf: its pipeline (one packet a cycle; the fabric before it is lossless, PFC), ``hosts``
  host ports each sending one packet every ``service`` cycles from a queue of ``limit`` packets (ECN
  marking from ``kmin`` to ``kmax`` packets, DCQCN's RED);
- the cross-DC all-to-all: ``remote`` ranks of the other DC send ``a2a`` packets to each host, every rank
  through its NIC at host line rate and a long-haul link of ``wan`` cycles one way (``remote x hosts``
  flows); go-back-N RoCE (NAK on a gap, RTO = 3 one-way delays) with DCQCN, a window of ``window``
  packets. A CNP takes ``wan`` cycles back, far longer than the queue takes to fill: the congestion-control
  loop is much slower than the burst;
- the intra-DC collective: a ring all-reduce of ``ring`` ranks on hosts ``0..ring-1`` (steps of ``chunk``
  packets, rank r to r + 1 through the leaf, ``fabric`` cycles from a host to the leaf), go-back-N with
  DCQCN (RTO ``rto``: RoCE's timeouts are far longer than a round trip; a NAK recovers a drop), starting as
  the cross-DC burst reaches the leaf (``wan`` cycles after it left, plus a jitter).

Modes, the same extra memory (``capacity`` packets per port) for the last two:

- ``taildrop``: a packet that finds its port's queue full is dropped;
- ``deflect``: it is sent back up to the fabric and returns ``2 * fabric`` cycles later (no block: the
  network's own policy, reordering the flow);
- ``inswitch``: ``InSwitchSpillBuffer``'s model: packets of a port at ``high`` wait in the switch's memory,
  drained at ``low``;
- ``spillway``: ``Spillway``'s model (switch side, spill node, spill links of ``latency`` cycles each way).

Reported: iteration time (both collectives done), the cross-DC flows' completion times (FCT, mean and
p99), drops, retransmissions, spilled packets. A run on the golden models; ``rtl=True`` records every cycle
of the block's inputs, which the thin test replays on the RTL through the lockstep.
"""
import collections
import functools
import math
import statistics
import time
from dataclasses import asdict, dataclass, fields, replace

from models.headers import roce_packet
from models.spillway.inswitch import InSwitchModel
from models.spillway.params import InSwitchParams, SpillSwitchParams, SpillwayParams
from models.spillway.top import SpillwayModel
from scenarios.common import OUT, figure, write_csv, write_summary
from scenarios.net import AllToAll, Calendar, Clocked, Dcqcn, Ecn, GoBackN, Port, RingAllReduce, stream

__all__ = ["Setting", "MODES", "simulate", "sweep", "arguments", "main"]

MODES = ("taildrop", "deflect", "inswitch", "spillway")
SIZE = 1024                     # bytes per packet: the pipeline moves SIZE bytes a cycle
WIDTH = 64                      # the blocks' bus: every frame is one beat


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One run's setting (module docstring)."""
    hosts: int = 8
    remote: int = 8
    a2a: int = 48
    ring: int = 4
    chunk: int = 64
    service: int = 8
    limit: int = 32
    kmin: int = 8
    kmax: int = 24
    high: int = 16
    low: int = 4
    capacity: int = 128
    latency: int = 10
    wan: int = 2000
    fabric: int = 10
    window: int = 128
    ring_window: int = 32
    rto: int = 2000
    drain_window: int = 2
    return_slots: int = 64
    flows: int = 256
    jitter: int = 100
    max_cycles: int = 400_000

    def __post_init__(self):
        for f in fields(self):
            if getattr(self, f.name) < (0 if f.name in ("jitter", "kmin") else 1):
                raise ValueError(f"Setting.{f.name} must be >= 1, got {getattr(self, f.name)}")
        if not 2 <= self.ring <= self.hosts:
            raise ValueError(f"Setting.ring must be in 2..hosts = {self.hosts}, got {self.ring}")
        if not self.low < self.high < self.limit:
            raise ValueError(f"Setting: need low < high < limit, got {self.low}, {self.high}, {self.limit}")

    def inswitch(self):
        return InSwitchParams(ports=self.hosts, high=self.high, low=self.low, capacity=self.capacity, drain_rate=1,
                              drain_window=self.drain_window, flows=self.flows, order="flow", depth_bits=16,
                              handle_bits=16, data_bytes=WIDTH)

    def spillway(self):
        switch = SpillSwitchParams(**self.inswitch().as_dict(), mtu=128, buffer=8, return_slots=self.return_slots)
        return SpillwayParams(switch=switch, latency=self.latency)


@functools.cache
def _template(src, dst, qp):
    return bytearray(bytes(roce_packet(src=src, dst=dst, sport=49152 + qp % 16384, qp=qp)))


def frame(src, dst, qp, psn):
    """The RoCEv2 frame of one packet (a cached scapy template, the PSN and IP id patched in)."""
    raw = _template(src, dst, qp)[:]
    raw[18:20] = (psn & 0xFFFF).to_bytes(2, "big")              # IPv4 identification
    raw[14 + 20 + 8 + 9:14 + 20 + 8 + 12] = (psn & 0xFFFFFF).to_bytes(3, "big")
    return bytes(raw)


class Leaf:
    """The destination leaf in one mode: its pipeline (``arrive``) and host ports (``ports``)."""

    def __init__(self, cal, s, mode, receive, seed, params=None, record=False):
        self.cal, self.s, self.mode = cal, s, mode
        self.dropped = collections.Counter()       # flow kind -> packets dropped at the leaf
        self.deflected = 0
        ecn = Ecn(s.kmin, s.kmax, 1.0, stream(seed, "spillway", "ecn")) if s.kmin else None
        self.ports = [Port(cal, receive, SIZE / s.service, s.fabric, s.limit, ecn, on_drop=self._drop, name=f"h{h}")
                      for h in range(s.hosts)]
        self.ingress = collections.deque()
        self.series = []                           # (cycle, queue of host 1, spilled or held) per 50 cycles
        self.block = None
        if mode in ("taildrop", "deflect"):
            self.pipe = Port(cal, self._decide, SIZE, 0, name="pipeline")
            return
        self.model = InSwitchModel(params or s.inswitch()) if mode == "inswitch" else SpillwayModel(
            params or s.spillway())
        self.owner = collections.defaultdict(collections.deque)     # frame or handle -> packets (a resent PSN
        #                                                             repeats its frame)
        self.block = Clocked(cal, self.model, self._inputs, self._outputs, record)
        self.link = [0, 0]                         # spill-link frames switch -> node, node -> switch

    def arrive(self, packet):
        """A packet reaches the leaf's pipeline from the fabric."""
        if self.block is None:
            self.pipe.send(packet)
        else:
            self.ingress.append(packet)

    def _drop(self, packet):
        self.dropped[packet.tag[0]] += 1

    def _decide(self, packet):
        port = self.ports[packet.tag[2]]
        if self.mode == "deflect" and port.depth >= self.s.limit:
            self.deflected += 1
            self.cal.after(2 * self.s.fabric, self.arrive, packet)
        else:
            port.send(packet)

    def _inputs(self):
        head = self.ingress[0] if self.ingress else None
        beat = None
        if head is not None:
            raw = self.raw = head.tag[3](head.seq)
            beat = {"data": int.from_bytes(raw, "little"), "keep": (1 << len(raw)) - 1, "first": 1, "last": 1,
                    "meta": {"port": head.tag[2]}}
        inputs = {"i__valid": int(beat is not None), "i__payload": beat,
                  "qdepth": [min(p.depth, 0xFFFF) for p in self.ports], "o__ready": 1}
        if self.mode == "spillway":
            inputs.update(spill_pause=0, node_pause=0)
        else:
            self.handle = self.model.next_handle
        return inputs

    def _outputs(self, inputs, out):
        if inputs["i__valid"] and out["i__ready"]:
            packet = self.ingress.popleft()
            if self.mode == "spillway":
                before = self._overflow
                self._overflow = self.model.switch.counters()["spill_overflow"]
                if self._overflow > before:
                    self._drop(packet)
                else:
                    self.owner[self.raw].append(packet)
            elif self.model.decision is not None:
                if self.model.decision[0] == "spill_overflow":
                    self._drop(packet)
                else:
                    self.owner[self.handle].append(packet)
        if out["o__valid"]:
            beat = out["o__payload"]
            key = (beat["data"].to_bytes(WIDTH, "little")[:beat["keep"].bit_length()] if self.mode == "spillway"
                   else beat["handle"])
            packet = self.owner[key].popleft()
            self.ports[packet.tag[2]].send(packet)
        if self.mode == "spillway":
            self.link[0] += self.model.down.line[-1] is not None
            self.link[1] += self.model.up.line[-1] is not None
        if self.block.cycles % 50 == 0:
            held = self.model.switch.outstanding() if self.mode == "spillway" else self.model.pending
            self.series.append((self.cal.now, self.ports[1].depth, held))

    _overflow = 0

    def counters(self):
        return dict(self.model.counters()) if self.block is not None else {}


def simulate(setting, mode, seed, params=None, rtl=False):
    """One run: a dict of ``iteration``, ``a2a``/``ring`` (their completion), ``fct`` (every cross-DC flow's),
    ``drops``, ``resent``, ``deflected``, ``counters`` (the block's), ``link``, ``series``, ``cycles``,
    ``events``, ``seconds``, and with ``rtl`` the block's inputs of every cycle (``record``)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    s, cal = setting, Calendar()
    wall = time.perf_counter()
    leaf = Leaf(cal, s, mode, lambda p: p.flow.receive(p), seed, params, rtl)
    line = SIZE / s.service
    nics = [Port(cal, leaf.arrive, line, s.wan, name=f"remote{r}") for r in range(s.remote)]
    hosts = [Port(cal, leaf.arrive, line, s.fabric, name=f"host{h}") for h in range(s.hosts)]
    qps = iter(range(16, 1 << 20))

    def cross(src, dst, packets, done, progress):
        qp = next(qps)
        make = functools.partial(frame, f"10.2.{src // 256}.{src % 256}", f"10.1.0.{dst}", qp)
        dcqcn = Dcqcn(cal, line, period=s.wan // 4, increase=line / 64, cnp_gap=s.wan // 8)
        return GoBackN(cal, f"x{src}->{dst}", packets, SIZE, nics[src].send, s.window, 3 * s.wan, s.wan, line,
                       dcqcn, done, progress, tag=("cross", src, dst, make))

    def intra(src, dst, packets, done, progress):
        qp = next(qps)
        make = functools.partial(frame, f"10.1.0.{src}", f"10.1.0.{dst}", qp)
        dcqcn = Dcqcn(cal, line, period=8 * s.fabric, increase=line / 16, cnp_gap=4 * s.fabric)
        return GoBackN(cal, f"r{src}->{dst}", packets, SIZE, hosts[src].send, s.ring_window, s.rto,
                       2 * s.fabric, line, dcqcn, done, progress, tag=("ring", src, dst, make))

    finished = []
    a2a = AllToAll(cal, range(s.remote), range(s.hosts), s.a2a, cross, done=finished.append)
    ring = RingAllReduce(cal, s.ring, s.chunk, intra, done=finished.append)
    rng = stream(seed, "spillway", "start")
    cal.at(rng.randrange(s.jitter + 1), a2a.begin)
    cal.at(s.wan + rng.randrange(s.jitter + 1), ring.begin)     # as the burst reaches the leaf
    if leaf.block is not None:
        leaf.block.start()
    cal.run(until=s.max_cycles, stop=lambda: len(finished) == 2)
    if leaf.block is not None:
        leaf.block.stop()
    flows = a2a.flows + ring.flows
    iteration = math.ceil(max(a2a.finish, ring.finish)) if len(finished) == 2 else None
    whole = lambda t: None if t is None else math.ceil(t)         # noqa: E731
    return dict(mode=mode, iteration=iteration, a2a=whole(a2a.finish), ring=whole(ring.finish),
                fct=[whole(f.finish - f.start) if f.finish is not None else None for f in a2a.flows],
                drops=dict(leaf.dropped), deflected=leaf.deflected, resent=sum(f.resent for f in flows),
                sent=sum(f.sent for f in flows), counters=leaf.counters(),
                link=getattr(leaf, "link", [0, 0]), series=leaf.series, cycles=math.ceil(cal.now), events=cal.events,
                seconds=time.perf_counter() - wall, flows=len(flows),
                record=leaf.block.record if rtl and leaf.block is not None else None)


def fct_stats(fct):
    done = sorted(f for f in fct if f is not None)
    if len(done) < len(fct):
        return None, None
    return statistics.fmean(done), done[min(len(done) - 1, math.ceil(0.99 * len(done)) - 1)]


#: The default sweeps: the spill link's latency (cycles each way; the other modes do not depend on it) and the
#: egress queue (packets; the watermarks follow it: high = limit / 2, low = limit / 8).
LATENCIES = (10, 100, 400)
LIMITS = (16, 24, 32, 64, 128, 256)
COLUMNS = ("sweep", "mode", "latency", "limit", "capacity", "iteration", "a2a", "ring", "fct_mean", "fct_p99",
           "drops_cross", "drops_ring", "deflected", "resent", "spilled", "link_out", "link_back", "flows", "cycles",
           "events", "seconds")


def row(sweep_name, setting, run):
    mean, p99 = fct_stats(run["fct"])
    c = run["counters"]
    return dict(sweep=sweep_name, mode=run["mode"], latency=setting.latency if run["mode"] == "spillway" else "",
                limit=setting.limit, capacity=setting.capacity, iteration=run["iteration"], a2a=run["a2a"],
                ring=run["ring"], fct_mean=None if mean is None else round(mean, 1), fct_p99=p99,
                drops_cross=run["drops"].get("cross", 0), drops_ring=run["drops"].get("ring", 0),
                deflected=run["deflected"], resent=run["resent"], spilled=c.get("spilled", ""),
                link_out=run["link"][0], link_back=run["link"][1], flows=run["flows"], cycles=run["cycles"],
                events=run["events"], seconds=round(run["seconds"], 2))


def at_limit(setting, limit):
    """``setting`` with egress queue ``limit`` and the watermarks and ECN thresholds that follow it."""
    return replace(setting, limit=limit, high=limit // 2, low=max(1, limit // 8), kmin=min(setting.kmin, limit // 4),
                   kmax=min(setting.kmax, limit // 2))


def sweep(setting, seed, latencies=LATENCIES, limits=LIMITS):
    """Rows: every mode on ``setting`` with Spillway over ``latencies`` (sweep ``modes``); tail drop, the
    in-switch buffer and Spillway (shortest link) over egress queue ``limits`` (sweep ``limit``)."""
    rows = [row("modes", setting, simulate(setting, mode, seed)) for mode in ("taildrop", "deflect", "inswitch")]
    rows += [row("modes", s, simulate(s, "spillway", seed)) for s in (replace(setting, latency=lat)
                                                                      for lat in latencies)]
    for limit in limits:
        s = at_limit(replace(setting, latency=min(latencies)), limit)
        rows += [row("limit", s, simulate(s, mode, seed)) for mode in ("taildrop", "inswitch", "spillway")]
    return rows


def gains(rows, baseline):
    """Per queue limit of the ``limit`` sweep: Spillway's iteration time against ``baseline``'s, as a fraction
    (negative: Spillway faster)."""
    at = {(r["mode"], r["limit"]): r["iteration"] for r in rows if r["sweep"] == "limit"}
    return {limit: at["spillway", limit] / at[baseline, limit] - 1 for mode, limit in at
            if mode == "spillway" and at["spillway", limit] and at.get((baseline, limit))}


def plot(rows, seed, name, out):
    """Two panels: iteration time and cross-DC FCT p99 per mode; Spillway's gain over the queue sweep."""
    label = {"taildrop": "tail drop", "deflect": "deflection", "inswitch": "in-switch\nbuffer", "spillway": "Spillway"}
    with figure(name, cols=2, width=6.5, height=4.2, seed=seed, out=out) as (bars, sweep_ax):
        modes = [r for r in rows if r["sweep"] == "modes"]
        names = [label[r["mode"]] + (f"\nlink {r['latency']}" if r["latency"] != "" else "") for r in modes]
        x = range(len(modes))
        bars.bar([k - 0.2 for k in x], [r["iteration"] or 0 for r in modes], width=0.4, label="iteration time")
        bars.bar([k + 0.2 for k in x], [r["fct_p99"] or 0 for r in modes], width=0.4, label="cross-DC FCT p99")
        bars.set_xticks(list(x), names, fontsize="small")
        bars.set(ylabel="cycles", title=f"queue {modes[0]['limit']} packets (lower is better)")
        bars.legend(fontsize="small")
        for baseline, style in (("taildrop", "o-"), ("inswitch", "s--")):
            g = gains(rows, baseline)
            sweep_ax.plot(list(g), [100 * v for v in g.values()], style, label=f"Spillway vs {label[baseline]}")
        sweep_ax.axhline(-14, color="grey", ls=":", label="paper: up to 14 % lower")
        sweep_ax.axhline(0, color="black", lw=0.5)
        if any(r["sweep"] == "limit" for r in rows):
            sweep_ax.set_xscale("log")
        sweep_ax.set(xlabel="egress queue, packets (watermarks follow)",
                     ylabel="iteration time change, %", title="Spillway's iteration time against the baselines")
        sweep_ax.legend(fontsize="small")
    return out / f"{name}.png"


def headline(rows):
    """The run's sentences: each mode of the ``modes`` sweep, then Spillway against the baselines."""
    modes = [r for r in rows if r["sweep"] == "modes"]
    spill = min((r for r in modes if r["mode"] == "spillway"), key=lambda r: r["latency"])
    lines = []
    for r in modes:
        name = r["mode"] + (f" (link {r['latency']})" if r["latency"] != "" else "")
        if r["iteration"] is None:
            lines.append(f"{name}: did not finish in {r['cycles']} cycles")
            continue
        lines.append(f"{name}: iteration {r['iteration']}, FCT mean {r['fct_mean']} p99 {r['fct_p99']}, drops "
                     f"{r['drops_cross']} cross-DC + {r['drops_ring']} ring, resent {r['resent']}"
                     + (f", deflected {r['deflected']}" if r["deflected"] else "")
                     + (f", spilled {r['spilled']}" if r["spilled"] != "" else ""))
    for r in modes:
        if r["mode"] != "spillway" and r["iteration"] and spill["iteration"]:
            lines.append(f"Spillway (link {spill['latency']}) vs {r['mode']}: iteration "
                         f"{spill['iteration'] / r['iteration'] - 1:+.1%}, "
                         f"FCT p99 {spill['fct_p99'] / r['fct_p99'] - 1:+.1%}")
    for baseline in ("taildrop", "inswitch"):
        g = gains(rows, baseline)
        if g:
            lines.append(f"queue sweep, Spillway vs {baseline}: "
                         + ", ".join(f"{k} packets {v:+.1%}" for k, v in g.items()))
    return lines


def arguments(parser):
    """The scenario's options (``python -m scenarios spillway --help``)."""
    for f in fields(Setting):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=int, default=f.default, metavar="N")
    parser.add_argument("--latencies", default=",".join(map(str, LATENCIES)),
                        help="Spillway's spill-link latencies, cycles each way (comma-separated)")
    parser.add_argument("--limits", default=",".join(map(str, LIMITS)),
                        help="egress queues of the queue sweep, packets (comma-separated; empty: none)")


def main(args, out=OUT, name="spillway"):
    """Run the sweep of ``args``: CSV, PNG, summary under ``out``; returns the rows."""
    setting = Setting(**{f.name: getattr(args, f.name) for f in fields(Setting)})
    lists = {}
    for key in ("latencies", "limits"):
        try:
            lists[key] = [int(x) for x in getattr(args, key).split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"--{key}: {getattr(args, key)!r} is not a list of integers") from None
    if not lists["latencies"] or min(lists["latencies"]) < 1 or min(lists["limits"] + [8]) < 8:
        raise ValueError("--latencies must be integers >= 1 and --limits integers >= 8")
    rows = sweep(setting, args.seed, lists["latencies"], lists["limits"])
    csv = write_csv(name, COLUMNS, [[r[c] for c in COLUMNS] for r in rows], out)
    png = plot(rows, args.seed, name, out)
    events = sum(r["events"] for r in rows)
    seconds = sum(r["seconds"] for r in rows)
    lines = [f"spillway, seed {args.seed}: {setting.remote}x{setting.hosts} cross-DC flows of {setting.a2a} packets "
             f"+ a ring of {setting.ring}; " + ", ".join(f"{k}={v}" for k, v in asdict(setting).items()),
             *headline(rows), f"{events} events in {seconds:.1f} s ({events / max(seconds, 1e-9):,.0f} events/s)",
             f"written {csv}, {png}"]
    write_summary(name, lines, out)
    return rows

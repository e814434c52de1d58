"""Formal proofs of the Spillway spill core (hdl/spillway/, descriptor level).

The spec drives every input of ``SpillCore`` freely (arrivals, queue depths, ``o.ready``) and
tracks two packets by handle (``AnyConst``): ``early`` and ``late`` of one flow and port, ``late``
accepted after ``early``; each tracked handle is accepted at most once (the parser numbers
packets). Properties:

- storage: every spill FIFO holds at most ``capacity``; ``pending`` is their sum; the flow table
  counts exactly the stored handles of each flow;
- conservation (modulo the counter width): accepted = forwarded + spilled + spill_overflow +
  malformed, and spilled = drained + pending;
- no duplicate: a tracked packet is, at any time, in at most one place (a FIFO slot, the output
  register, already left, or dropped), so it leaves on ``o`` at most once;
- per-flow order: ``late`` is never on ``o`` before ``early`` has left or was dropped;
- drain only from a non-empty FIFO whose queue depth is <= ``low``, at most ``drain_rate`` per
  window;
- when each decision must be taken (``Spec.decisions``, from the spec's own view: the stored
  handles read from the FIFO memories, its own rate window): spill iff depth >= ``high`` or the
  flow (port) has packets stored, dropped iff that FIFO is full; drain only *and always* when a port
  is eligible, the window has room and ``o`` takes it; ``d.ready`` exactly when an arrival may wait;
  round-robin fairness (an eligible port waits for at most ports-1 drains of other ports); each
  counter increments exactly when its event happens;
- reset: ``rst`` is an input of the proof, free at every cycle (the spec's registers reset with the
  design); the cycle after a reset the FIFOs, the output register, the rate window, the round-robin
  pointer and the counters are clear (a cover reaches a reset with packets stored).

``HandleSpec`` checks that the in-switch block numbers its packets (handles are distinct arrival
numbers; bounded). ``DecapSpec`` checks the return path's header stripping (``Decapsulator``) byte for byte: a tracked
byte of a tracked frame leaves at its position less the header, output frames are link-shaped and
hold their input's length less the header (bounded, depth 8: frames of up to 3 beats).

Where a slot's content matters (the tracked packets, the flow table) the spec reads the FIFO
memories through extra combinational read ports. All assertions together are k-inductive, so
``prove`` gives an unbounded proof; covers show the interesting cases are reachable.
"""
import os

import pytest
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Array, Assert, Assume, Cat, Const, Cover, Elaboratable, Module, Mux, ResetSignal, Signal, Value
from amaranth.lib import data

from formal.props import after_reset, counters_follow, link_beat
from formal.runner import prove
from hdl.spillway.credit import CreditCore
from hdl.spillway.inswitch import InSwitchSpillBuffer
from hdl.spillway.link import Decapsulator
from hdl.spillway.node import SpillNode
from hdl.spillway.spill_core import SpillCore
from hdl.spillway.switch import SpillSwitch
from models import wire
from models.headers import IP, UDP, Ether
from models.spillway.credit import CREDIT_COUNTERS
from models.spillway.params import InSwitchParams, SpillNodeParams, SpillSwitchParams

PARAMS = InSwitchParams(ports=2, high=2, low=1, capacity=3, drain_rate=1, drain_window=2, flows=2,
                        depth_bits=2, handle_bits=3, counter_bits=4)


class Tracked:
    """Where one tracked handle is: accepted, dropped, left on ``o``; stored or in ``o``."""

    def __init__(self, m, core, handle, slots, name):
        self.handle = handle
        self.seen = Signal(name=f"{name}_seen")
        self.lost = Signal(name=f"{name}_lost")
        self.gone = Signal(name=f"{name}_gone")
        self.presented = core.d.valid & (core.d.payload.handle == handle)
        self.accepted = self.presented & core.arrival
        self.out = core.o.valid & (core.o.payload.handle == handle)
        self.leaves = self.out & core.o.ready
        self.where = [(p, pos, live & (entry.handle == handle)) for p, pos, live, entry in slots]
        self.stored = Signal(range(len(slots) + 1), name=f"{name}_stored")
        m.d.comb += self.stored.eq(sum(hit for _, _, hit in self.where))
        with m.If(self.accepted):
            m.d.sync += [self.seen.eq(1), self.lost.eq(core.drop)]
        with m.If(self.leaves):
            m.d.sync += self.gone.eq(1)
        m.d.comb += Assert(self.stored + self.out + self.gone + self.lost == self.seen,
                           f"{name}: in exactly one place once accepted, nowhere before")
        m.d.comb += Assert(~(self.gone & self.leaves), f"{name}: leaves on o at most once")


class Spec(Elaboratable):
    """SpillCore with free inputs; storage, conservation, no-duplicate, order and drain properties."""

    def __init__(self, order):
        self.core = SpillCore(PARAMS.replace(order=order))

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        P, C, F = core.ports, core.capacity, core.flows
        m.d.comb += [core.d.valid.eq(AnySeq(1)), core.d.payload.eq(AnySeq(core.d.payload.shape().size)),
                     core.qdepth.eq(AnySeq(core.qdepth.shape().size)), core.o.ready.eq(AnySeq(1))]

        # Every FIFO slot: its port, position behind the head, whether it holds a packet, content.
        slots = []
        for p, fifo in enumerate(core.fifos):
            head, count, tail = core.heads[p], core.counts[p], core.tails[p]
            m.d.comb += [Assert(head < C, f"head {p} in range"), Assert(tail < C, f"tail {p} in range"),
                         Assert(count <= C, f"FIFO {p} holds at most capacity"),
                         Assert(tail == Mux(head + count >= C, head + count - C, head + count),
                                f"FIFO {p}: tail = head + count")]
            for k in range(C):
                read = fifo.read_port(domain="comb")
                m.d.comb += read.addr.eq(k)
                pos = Signal(range(C), name=f"pos{p}_{k}")
                m.d.comb += pos.eq(Mux(k >= head, k - head, k + C - head))
                slots.append((p, pos, pos < count, read.data))
        m.d.comb += Assert(core.pending == sum(core.counts), "pending is the sum of the FIFOs")
        for f in range(F):
            m.d.comb += Assert(core.flow_count[f] == sum(live & (e.flow == f) for _, _, live, e in slots),
                               f"flow table entry {f} counts its stored handles")

        # Conservation, modulo the counter width.
        bits = len(core.forwarded)
        accepted = Signal(bits)
        with m.If(core.arrival):
            m.d.sync += accepted.eq(accepted + 1)
        m.d.comb += Assert(accepted == (core.forwarded + core.spilled + core.spill_overflow
                                        + core.malformed)[:bits], "every accepted packet is counted once")
        m.d.comb += Assert(core.spilled == (core.drained + core.pending)[:bits],
                           "every spilled packet is stored or drained")

        # Drain only when allowed.
        m.d.comb += [
            Assert(~core.drain | (core.qdepth[core.drain_port] <= core.low),
                   "drain only when the queue depth is <= low"),
            Assert(~core.drain | (core.stored[core.drain_port] != 0), "drain only from a non-empty FIFO"),
            Assert(~core.drain | (core.used < core.drain_rate), "at most drain_rate drains per window"),
            Assert(core.rr < P, "round-robin pointer in range"),
        ]

        # Two tracked packets of one flow and port: early is accepted before late.
        early_handle, late_handle = AnyConst(core.handle_bits), AnyConst(core.handle_bits)
        flow, port = AnyConst(range(F)), AnyConst(range(P))
        m.d.comb += Assume(early_handle != late_handle)
        early = Tracked(m, core, early_handle, slots, "early")
        late = Tracked(m, core, late_handle, slots, "late")
        for t in (early, late):
            m.d.comb += Assume(~(t.presented & t.seen))     # handles are unique
            with m.If(t.presented):
                m.d.comb += Assume((core.d.payload.flow == flow) & (core.d.payload.port == port))
            for (p, _, hit), (_, _, live, entry) in zip(t.where, slots):
                m.d.comb += Assert(~hit | ((p == port) & (entry.flow == flow)),
                                   "a tracked packet is stored in its port's FIFO with its flow")
        m.d.comb += Assume(~(late.presented & ~early.seen))
        m.d.comb += Assert(~late.seen | early.seen, "late is accepted after early")
        for (p, pos_late, hit_late) in late.where:
            for (q, pos_early, hit_early) in early.where:
                if p == q:
                    m.d.comb += Assert(~(hit_late & hit_early) | (pos_early < pos_late),
                                       "early is stored ahead of late")
        m.d.comb += Assert(~((late.out | late.gone) & ~(early.gone | early.lost)),
                           "late is never on o before early left or was dropped")

        self.decisions(m, core, slots)
        m.d.comb += [
            Cover(early.gone & late.gone & core.drained.any()),
            Cover(core.spill_overflow != 0),
            Cover((core.counts[0] == C) & (core.counts[1] != 0)),
            Cover(ResetSignal() & (core.pending != 0)),
        ]
        return m

    def decisions(self, m, core, slots):
        """When each decision must be taken, from the spec's own view (the stored handles read from the
        FIFO memories, its own rate window): spill iff depth >= high or the flow (port) has packets
        stored; drain iff a port is eligible, the window has room and ``o`` takes it; round-robin
        fairness; each counter increments exactly when its event happens; a reset empties the block."""
        P, C = core.ports, core.capacity
        a = core.d.payload
        bad = a.malformed | (a.port >= P)
        port = a.port[:max(1, (P - 1).bit_length())]
        stored = Array(core.stored)[port]
        flow_out = sum(live & (e.flow == a.flow) for _, _, live, e in slots) != 0
        outstanding = Signal()
        m.d.comb += outstanding.eq(flow_out if core.order == "flow" else stored != 0)
        must_spill = Signal()
        m.d.comb += must_spill.eq((Array(core.qdepth)[port] >= core.high) | outstanding)
        load = ~core.o.valid | core.o.ready
        window, used = Signal(range(core.drain_window)), Signal(range(core.drain_rate + 1))
        eligible = [Signal(name=f"eligible{p}") for p in range(P)]
        m.d.comb += [eligible[p].eq((core.stored[p] != 0) & (core.qdepth[p] <= core.low)) for p in range(P)]
        wants = Signal()
        m.d.comb += wants.eq(Cat(*eligible).any() & (used < core.drain_rate))
        with m.If(window == core.drain_window - 1):
            m.d.sync += [window.eq(0), used.eq(0)]
        with m.Else():
            m.d.sync += [window.eq(window + 1), used.eq(used + core.drain)]
        m.d.comb += [
            Assert(window == core.window, "drain windows aligned with the spec's"),
            Assert(used == core.used, "drains in this window (spec count)"),
            Assert(core.drain == (wants & load), "drain only and always when a port is eligible, under the rate "
                                                 "and o takes it"),
            Assert(core.d.ready == (bad | must_spill | (load & ~wants)),
                   "an arrival waits only when it is forwarded and o is taken or a drain wants it"),
            Assert(~(core.arrival & ~bad) | ((core.spill | core.drop) == must_spill),
                   "spilled (or dropped when full) iff depth >= high or its flow has packets stored"),
            Assert(~(core.arrival & ~bad & must_spill) | (core.drop == (stored == C)),
                   "a spill is dropped iff its FIFO is full"),
            Assert(~(core.arrival & bad) | core.drop, "a malformed arrival is dropped"),
        ]
        # Round-robin fairness: an eligible port waits for at most ports-1 drains of other ports (the
        # distance from the pointer strengthens the induction).
        for p in range(P):
            skipped = Signal(range(P + 1), name=f"skipped{p}")
            with m.If(~eligible[p] | (core.drain & (core.drain_port == p))):
                m.d.sync += skipped.eq(0)
            with m.Elif(core.drain):
                m.d.sync += skipped.eq(skipped + 1)
            distance = Mux(core.rr <= p, p - core.rr, p + P - core.rr)
            m.d.comb += [Assert(skipped + distance <= P - 1, f"port {p}: skipped drains + distance from rr"),
                         Assert(skipped <= P - 1, f"round-robin: eligible port {p} waits at most ports-1 drains")]
        # Counter increments, from the spec's decision.
        arrival = core.arrival
        events = {"forwarded": arrival & ~bad & ~must_spill, "spilled": arrival & ~bad & must_spill & (stored != C),
                  "spill_overflow": arrival & ~bad & must_spill & (stored == C), "malformed": arrival & bad,
                  "drained": wants & load}
        bits = len(core.forwarded)
        for name, event in events.items():
            before, happened = Signal(bits, name=f"{name}_before"), Signal(name=f"{name}_event")
            m.d.sync += [before.eq(getattr(core, name)), happened.eq(event)]
            m.d.comb += Assert(getattr(core, name) == (before + happened)[:bits],
                               f"{name} increments exactly when its event happens")
        # Reset (free at every cycle: rst is an input of the proof): the cycle after it the block is empty.
        was_reset = Signal(reset_less=True)
        m.d.sync += was_reset.eq(ResetSignal())
        empty = (core.pending == 0) & ~core.o.valid & (core.rr == 0) & (core.used == 0) & (core.window == 0)
        for name in events:
            empty &= getattr(core, name) == 0
        m.d.comb += Assert(~was_reset | empty, "a reset empties the FIFOs, the output, the window, the pointer "
                                               "and the counters")


@pytest.mark.parametrize("order", ["flow", "port"])
def test_spill_buffer_prove(order):
    result = prove(Spec(order), f"spill_buffer_{order}", depth=6, mode="prove")
    print(f"{order}: {result.mode} depth {result.depth} in {result.seconds:.1f} s")


def test_spill_buffer_cover():
    prove(Spec("flow"), "spill_buffer_cover", depth=16, mode="cover")


# --- Disaggregated mode: CreditCore with the links and the spill node as free-delay channels ---------

CREDIT_PARAMS = SpillSwitchParams(ports=2, high=2, low=1, capacity=2, drain_rate=1, drain_window=2, flows=2,
                                  depth_bits=2, handle_bits=3, counter_bits=4, mtu=100, return_slots=2)


class ShiftFifo:
    """A spec-side FIFO of ``depth`` records (shift register): ``push``/``pop`` in the same cycle work."""

    def __init__(self, m, layout, depth, name):
        self.m, self.depth = m, depth
        self.items = [Signal(layout, name=f"{name}{k}") for k in range(depth)]
        self.len = Signal(range(depth + 1), name=f"{name}_len")

    def head(self):
        return self.items[0]

    def update(self, push, item, pop, push2=0, item2=None):
        """``push2``/``item2``: a second item pushed in the same cycle, behind ``item``."""
        m, items = self.m, self.items
        with m.If(pop):
            m.d.sync += [items[k].eq(items[k + 1]) for k in range(self.depth - 1)]
        with m.If(push):
            for k in range(self.depth):
                with m.If(self.len - pop == k):
                    m.d.sync += items[k].eq(item)
        if item2 is not None:
            with m.If(push2):
                for k in range(self.depth):
                    with m.If(self.len - pop + push == k):
                        m.d.sync += items[k].eq(item2)
        m.d.sync += self.len.eq(self.len + push + push2 - pop)


def tracked_pair(m, core):
    """Two tracked packets of one flow and port offered to CreditCore ``core`` (``AnyConst`` handles),
    each decided once, early before late: (early handle, late handle, flow, port, {name: decided})."""
    p, a = core.params, core.d.payload
    early_h, late_h = AnyConst(p.handle_bits), AnyConst(p.handle_bits)
    flow, port = AnyConst(range(p.flows)), AnyConst(range(p.ports))
    m.d.comb += Assume(early_h != late_h)
    seen = {}
    for name, h in (("early", early_h), ("late", late_h)):
        here = core.d.valid & (a.handle == h)
        s = seen[name] = Signal(name=f"{name}_seen")
        m.d.comb += Assume(~(here & s))
        with m.If(here):
            m.d.comb += Assume((a.flow == flow) & (a.port == port) & ~a.malformed)
        with m.If(here & core.v.ready):
            m.d.sync += s.eq(1)
    m.d.comb += Assume(~(core.d.valid & (a.handle == late_h) & ~seen["early"]))
    return early_h, late_h, flow, port, seen


def tracked_trips(m, handle, spill, done, tag, early_h, late_h):
    """Round trips of the two tracked packets: {"early"/"late": (spilled, back, re-injected now)}, set
    when ``spill`` takes the packet of ``handle`` (``early_h``, ``late_h``) and when ``done`` re-injects
    the frame whose ``tag`` bit (0 early, 1 late) is set."""
    out = {}
    for name, h, bit in (("early", early_h, 0), ("late", late_h, 1)):
        spilled, back = Signal(name=f"{name}_spilled"), Signal(name=f"{name}_back")
        with m.If(spill & (handle == h)):
            m.d.sync += spilled.eq(1)
        with m.If(done & tag[bit]):
            m.d.sync += back.eq(1)
        out[name] = (spilled, back, done & tag[bit])
    return out


class CreditSpec(Elaboratable):
    """CreditCore with free arrivals, queue depths and ready signals; the spill link, the node and the
    return link are one free-delay FIFO channel per origin port (requests and returns are free events
    constrained only by what was asked), re-injection a free-delay FIFO. Properties:

    - no credit underflow or overflow: ``credit[p] + (packets of p at the node or held) == capacity``,
      so the node never holds more than ``capacity`` packets of a port (never overwrites);
    - a return the switch asked for is accepted, one it did not ask for is refused; held returns fit
      ``return_slots``; the seq numbers come back in order (``misordered`` stays 0);
    - drain requests only for ports with ``qdepth <= low``, at most ``drain_rate`` per aligned window
      (counted by the spec's own window);
    - per-flow order across the round trip: of two tracked packets of one flow and port, ``late`` is
      never forwarded while ``early`` is out (spilled, not yet re-injected), and never re-injected
      before ``early``.
    """

    def __init__(self, order="flow"):
        self.core = CreditCore(CREDIT_PARAMS.replace(order=order))

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        p = core.params
        P, C, F, S = p.ports, p.capacity, p.flows, p.return_slots
        m.d.comb += [core.d.valid.eq(AnySeq(1)), core.d.payload.eq(AnySeq(core.d.payload.shape().size)),
                     core.qdepth.eq(AnySeq(core.qdepth.shape().size)), core.v.ready.eq(AnySeq(1)),
                     core.req.ready.eq(AnySeq(1)), core.ret_valid.eq(AnySeq(1)), core.ret_port.eq(AnySeq(8)),
                     core.ret_bad.eq(AnySeq(1)), core.hold.eq(AnySeq(P))]
        v, a = core.v.payload, core.d.payload
        decided = core.d.valid & core.v.ready
        spill = decided & (v.kind == 1)

        # Tracked packets: early and late of one flow and port, early decided first.
        early_h, late_h, flow, port, seen = tracked_pair(m, core)

        # The world: per origin port a FIFO (spill link + node + return link), the requests in flight,
        # and the returns held by the switch until re-injected.
        record = data.StructLayout({"port": range(P), "flow": range(F), "seq": 16, "tag": 2})
        tag = Cat(a.handle == early_h, a.handle == late_h)
        node = [ShiftFifo(m, record, C + 1, f"node{q}") for q in range(P)]
        held = ShiftFifo(m, record, S + 1, "held")
        inflight = [Signal(range(C + 1), name=f"inflight{q}") for q in range(P)]
        ret_port = core.ret_port[:1]
        ret_fits = core.ret_valid & ~core.ret_bad & (core.ret_port < P)
        m.d.comb += Assert(core.ret_ok == (ret_fits & (Array(inflight)[ret_port] != 0)),
                           "a return is accepted iff it was asked for")
        for q in range(P):
            asked = core.ret_ok & (ret_port == q)
            new = Signal(record, name=f"new{q}")
            m.d.comb += [new.port.eq(q), new.flow.eq(v.flow), new.seq.eq(v.seq), new.tag.eq(tag)]
            node[q].update(spill & (v.port == q), new, asked)
            requested = core.req.valid & core.req.ready & (core.req.payload.port == q)
            m.d.sync += inflight[q].eq(inflight[q] + requested - asked)
            in_held = sum((held.len > k) & (held.items[k].port == q) for k in range(S + 1))
            m.d.comb += [
                Assert(node[q].len <= C, f"the node never holds more than capacity packets of port {q}"),
                Assert(core.credit[q] + node[q].len + in_held == C, f"credits of port {q}: no underflow or overflow"),
                Assert(inflight[q] <= node[q].len, f"port {q}: only stored packets are requested"),
                Assert(core.asked[q] == inflight[q], f"port {q}: requests in flight"),
            ]
        picked = Signal(record)
        m.d.comb += picked.eq(Array(node[q].head() for q in range(P))[ret_port])
        done = AnySeq(1) & (held.len != 0)
        head = held.head()
        m.d.comb += [core.done_valid.eq(done), core.done_port.eq(head.port), core.done_flow.eq(head.flow),
                     core.done_seq.eq(head.seq)]
        held.update(core.ret_ok, picked, done)
        m.d.comb += [Assert(held.len + sum(inflight) == core.reserved, "returns requested or held are reserved"),
                     Assert(core.reserved <= S, "reserved within return_slots"),
                     Assert(core.misordered == 0, "returns come back in seq order")]

        # Drain requests: queue depth and the spec's own rate window.
        window, used = Signal(range(p.drain_window)), Signal(range(p.drain_rate + 2))
        requested = core.req.valid & core.req.ready
        with m.If(window == p.drain_window - 1):
            m.d.sync += [window.eq(0), used.eq(0)]
        with m.Else():
            m.d.sync += [window.eq(window + 1), used.eq(used + requested)]
        m.d.comb += [
            Assert(~core.req.valid | (Array(core.qdepth)[core.req.payload.port[:1]] <= p.low),
                   "drain request only when the queue depth is <= low"),
            Assert(~core.req.valid | ~core.hold.bit_select(core.req.payload.port[:1], 1),
                   "no drain request for a held port"),
            Assert(~requested | (used < p.drain_rate), "at most drain_rate requests per window"),
            Assert(window == core.window, "windows aligned"), Assert(used == core.used, "requests in this window"),
        ]

        # Inductive strengthening: the core's tables against the world's contents.
        live = [(node[q], k, node[q].items[k], node[q].len > k) for q in range(P) for k in range(C + 1)]
        live += [(held, k, held.items[k], held.len > k) for k in range(S + 1)]
        for f in range(F):
            m.d.comb += Assert(core.flow_count[f] == sum(ok & (r.flow == f) for _, _, r, ok in live),
                               f"flow table entry {f} counts the packets out")
        for q in range(P):
            in_held = [sum((held.len > j) & (held.items[j].port == q) for j in range(k)) for k in range(S + 1)]
            total = sum((held.len > k) & (held.items[k].port == q) for k in range(S + 1))
            for k in range(S + 1):
                with m.If((held.len > k) & (held.items[k].port == q)):
                    m.d.comb += Assert(held.items[k].seq == (core.expect[q] + in_held[k])[:16], "held seqs in order")
            for k in range(C + 1):
                with m.If(node[q].len > k):
                    m.d.comb += Assert((node[q].items[k].seq == (core.expect[q] + total + k)[:16])
                                       & (node[q].items[k].port == q), f"node {q} seqs in order")
            m.d.comb += [Assert(core.seqs[q] == (core.expect[q] + total + node[q].len)[:16], f"seq {q} numbering"),
                         Assert(core.unasked[q] + core.asked[q] == node[q].len, f"port {q}: asked + unasked")]

        # Per-flow order across the round trip.
        out = tracked_trips(m, a.handle, spill, done, head.tag, early_h, late_h)
        early_out = out["early"][0] & ~out["early"][1]
        late_forwarded = decided & (a.handle == late_h) & (v.kind == 0)
        where = {}
        for name, bit in (("early", 0), ("late", 1)):
            hits = [(fifo, k, ok & r.tag[bit]) for fifo, k, r, ok in live]
            for _, _, r, ok in live:
                m.d.comb += Assert(~(ok & r.tag[bit]) | ((r.flow == flow) & (r.port == port)),
                                   f"{name} is out with its flow and port")
            m.d.comb += Assert(sum(hit for _, _, hit in hits) == (out[name][0] & ~out[name][1]),
                               f"{name} is in one place while out")
            where[name] = hits
        for (fe, ke, he) in where["early"]:
            for (fl, kl, hl) in where["late"]:
                if fe is fl and ke >= kl:
                    m.d.comb += Assert(~(he & hl), "early is ahead of late")
                if fl is held and fe is not held:
                    m.d.comb += Assert(~(he & hl), "late is not re-injected-side while early is at the node")
        m.d.comb += [
            Assert(~out["late"][0] | seen["early"], "late after early"),
            Assert(~out["early"][0] | seen["early"], "early spilled after seen"),
            Assert(~out["early"][1] | out["early"][0], "early back after spilled"),
            Assert(~out["late"][1] | out["late"][0], "late back after spilled"),
            Assert(~out["late"][0] | seen["late"], "late spilled after seen"),
            Assert(~(late_forwarded & early_out), "late is never forwarded while early is out"),
            Assert(~(out["late"][2] & early_out), "late is never re-injected before early"),
        ]
        # The verdict and every counter, from the spec's own judgement of the arrival: bad (malformed or
        # port >= ports); must spill (queue depth >= high, or packets of the flow (port: of the port) out,
        # from the shadow's records); oversize (length > mtu); overflow (the shadow's credit, capacity minus
        # the port's packets out, is 0).
        outq = Array(node[q].len + sum((held.len > k) & (held.items[k].port == q) for k in range(S + 1))
                     for q in range(P))
        flow_out = Array(sum(ok & (r.flow == f) for _, _, r, ok in live) for f in range(F))
        bad = a.malformed | (a.port >= P)
        ordered = (flow_out[a.flow] != 0) if p.order == "flow" else (outq[a.port[:1]] != 0)
        must_spill = ~bad & ((Array(core.qdepth)[a.port[:1]] >= p.high) | ordered)
        oversize = must_spill & (a.length > p.mtu)
        overflow = must_spill & ~oversize & (outq[a.port[:1]] == C)
        kind = Mux(bad | oversize | overflow, 2, Mux(must_spill, 1, 0))
        m.d.comb += Assert(~decided | (v.kind == kind), "the verdict is the spec's: forward, spill or drop")
        counters_follow(m, {name: getattr(core, name) for name in CREDIT_COUNTERS}, {
            "forwarded": decided & ~bad & ~must_spill, "spilled": decided & must_spill & ~oversize & ~overflow,
            "reinjected": done, "spill_overflow": decided & overflow, "spill_oversize": decided & oversize,
            "malformed": decided & bad, "drain_requests": requested,
            "return_malformed": core.ret_valid & ~(ret_fits & (Array(inflight)[ret_port] != 0)),
            "misordered": Const(0)}, saturating=False, block="credit core ")
        # Reset (free at every cycle): the cycle after it every credit is capacity, nothing asked or held.
        m.d.comb += Assert(~after_reset(m) | ((Cat(*core.credit) == Cat(*(Const(C, range(C + 1)) for _ in range(P))))
                                              & (Cat(*core.unasked, *core.asked) == 0) & (core.reserved == 0)
                                              & (core.window == 0) & (core.used == 0) & (core.rr == 0)
                                              & ~core.req.valid),
                           "a reset gives every credit back, nothing asked, no return slot, window at 0")
        m.d.comb += [Cover(out["early"][1] & out["late"][1]), Cover(core.spill_overflow != 0)]
        return m


@pytest.mark.parametrize("order", ["flow", "port"])
def test_credit_core_prove(order):
    prove(CreditSpec(order), f"spill_credit_{order}", depth=4, mode="prove")


# --- Disaggregated mode, byte level: the whole switch side (SpillSwitch) --------

SWITCH_PARAMS = SpillSwitchParams(ports=2, high=2, low=1, capacity=2, drain_rate=1, drain_window=2, flows=2,
                                  depth_bits=2, handle_bits=3, counter_bits=4, data_bytes=42, mtu=42, buffer=3,
                                  return_slots=1)


class SwitchSpec(Elaboratable):
    """``SpillSwitch`` with every input free (packets and bytes on ``i`` and on the
    return link ``spill_i``, queue depths, ``o.ready``, ``spill_o.ready``). The spec watches only the
    ports: it parses each frame's spill header on ``spill_o`` at the frame's first beat (its own frame
    boundaries) and counts, per origin port, DATA frames started and sent whole, DRAIN frames, and
    packets re-injected on ``o`` (``spilled=1``, last beat). Properties (bounded, ``depth`` cycles):

    - every frame on ``spill_o`` carries EtherType 0x88B5 and op DATA or DRAIN; a DRAIN frame is one
      beat with ``count = 1``; DATA seqs of a port are 0, 1, 2, ... (the spec's count);
    - a DRAIN frame for port p only after a DATA frame of p left whole for each request (drains(p) <=
      DATA frames of p sent whole: it never overtakes the packet it asks for on the FIFO link);
    - drain only when ``qdepth[p] <= low``, at most ``drain_rate`` per aligned window (spec's window);
    - re-injected(p) <= drains(p) (only asked-for packets come back in) and credits: ``credits[p] +
      DATA(p) - re-injected(p) <= capacity`` (never more packets at the node than it holds);
    - no packet both forwarded and spilled: forwarded + DATA frames <= packets accepted on ``i``;
    - ``o`` marks ``first`` exactly on a packet's first beat (the spec's framing of ``o``: a verdict
      leaving the FIFO head before its packet's beats do shows as a ``first`` mid-packet).
    """

    def __init__(self, params=SWITCH_PARAMS):
        self.dut = SpillSwitch(params)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        p = dut.params
        P, C = p.ports, p.capacity
        # Free beats, but their bytes are one of a few frames (the proof's cost is in the bus width): on
        # i two UDP packets of different flows or a non-IP frame, on spill_i a frame with a free spill
        # header (EtherType, op, port, flow, seq) and zeros after it.
        for port in (dut.i, dut.spill_i):
            m.d.comb += [port.valid.eq(AnySeq(1)), port.payload.eq(AnySeq(port.payload.shape().size))]
        frames = [int.from_bytes(bytes(Ether() / IP(src="10.0.0.1") / UDP(sport=sport))[:p.data_bytes].ljust(
            p.data_bytes, b"\0"), "little") for sport in (1, 2)]
        frames.append(frames[0] ^ 0xFF << 8 * wire.ETHERTYPE_AT)
        pick = AnySeq(2)
        m.d.comb += Assume(pick < 3)
        m.d.comb += dut.i.payload.data.eq(Array(Const(f, 8 * p.data_bytes) for f in frames)[pick])
        header = AnySeq(8 * (wire.SPILL_SEQ_AT + 2 - wire.ETHERTYPE_AT))
        m.d.comb += dut.spill_i.payload.data.eq(Cat(Const(0, 8 * wire.ETHERTYPE_AT), header))
        # keep: a full beat or its first 1, 21 or 22 bytes; ports 0, 1 or a bad one (2).
        keeps = Array(Const((1 << k) - 1, p.data_bytes) for k in (p.data_bytes, 1, 21, 22))
        for port in (dut.i, dut.spill_i):
            m.d.comb += port.payload.keep.eq(keeps[AnySeq(2)])
        m.d.comb += Assume(dut.i.payload.meta.port < 3)
        m.d.comb += [dut.qdepth.eq(AnySeq(dut.qdepth.shape().size)), dut.o.ready.eq(AnySeq(1)),
                     dut.spill_o.ready.eq(AnySeq(1))]

        def byte(value, at):
            return value.data[8 * at:8 * at + 8]

        n = 6                                           # counter width: more than the proof's depth
        so, o = dut.spill_o, dut.o
        so_take, o_take = so.valid & so.ready, o.valid & o.ready
        inside, op, oport = Signal(), Signal(8), Signal(8)
        first = so_take & ~inside
        cur_op = Mux(first, byte(so.payload, wire.SPILL_OP_AT), op)
        cur_port = Mux(first, byte(so.payload, wire.SPILL_PORT_AT), oport)
        with m.If(so_take):
            m.d.sync += [inside.eq(~so.payload.last), op.eq(cur_op), oport.eq(cur_port)]
        o_inside = Signal()                             # the spec's framing of o
        with m.If(o_take):
            m.d.sync += o_inside.eq(~o.payload.last)
        with m.If(o.valid):
            m.d.comb += Assert(o.payload.first == ~o_inside, "o: first exactly on a packet's first beat")
        accepted, forwarded = Signal(n), Signal(n)
        m.d.sync += [accepted.eq(accepted + (dut.i.valid & dut.i.ready & dut.i.payload.last)),
                     forwarded.eq(forwarded + (o_take & o.payload.last & ~o.payload.meta.spilled))]
        ethertype = Cat(byte(so.payload, wire.ETHERTYPE_AT + 1), byte(so.payload, wire.ETHERTYPE_AT))
        seq = Cat(byte(so.payload, wire.SPILL_SEQ_AT + 1), byte(so.payload, wire.SPILL_SEQ_AT))
        m.d.comb += [
            Assert(~first | (ethertype == wire.ETHERTYPE_SPILL), "spill_o frames carry EtherType 0x88B5"),
            Assert(~first | (cur_op == wire.SPILL_DATA) | (cur_op == wire.SPILL_DRAIN), "spill_o: op DATA or DRAIN"),
            Assert(~first | (cur_port < P), "spill_o: origin port < ports"),
            Assert(~(first & (cur_op == wire.SPILL_DRAIN)) | so.payload.last
                   & (byte(so.payload, wire.SPILL_COUNT_AT) == 1), "a DRAIN frame is one beat asking for 1"),
        ]
        window, used = Signal(range(p.drain_window)), Signal(range(p.drain_window + 2))
        drain = first & (cur_op == wire.SPILL_DRAIN)
        last_window = window == p.drain_window - 1
        m.d.sync += [window.eq(Mux(last_window, 0, window + 1)), used.eq(Mux(last_window, 0, used + drain))]
        m.d.comb += [Assert(used + drain <= p.drain_rate, "at most drain_rate DRAIN frames per window"),
                     Assert(~drain | (Array(dut.qdepth)[cur_port[:1]] <= p.low), "drain only at qdepth <= low")]
        total_data = []
        for q in range(P):
            data_started, data_sent, drains, back = (Signal(n, name=f"{k}{q}") for k in
                                                     ("data_started", "data_sent", "drains", "reinjected"))
            mine = cur_port == q
            m.d.sync += [
                data_started.eq(data_started + (first & mine & (cur_op == wire.SPILL_DATA))),
                data_sent.eq(data_sent + (so_take & so.payload.last & mine & (cur_op == wire.SPILL_DATA))),
                drains.eq(drains + (drain & mine)),
                back.eq(back + (o_take & o.payload.last & o.payload.meta.spilled & (o.payload.meta.port == q))),
            ]
            m.d.comb += [
                Assert(~(first & mine & (cur_op == wire.SPILL_DATA)) | (seq == data_started[:16]),
                       f"port {q}: DATA seqs 0, 1, 2, ..."),
                Assert(drains + (drain & mine) <= data_sent, f"port {q}: a DRAIN never overtakes its DATA frame"),
                Assert(back <= drains, f"port {q}: only asked-for packets are re-injected"),
                Assert(dut.credits[q] + data_started <= C + back, f"port {q}: credits never exceed the node's room"),
            ]
            total_data.append(data_started)
        m.d.comb += Assert(forwarded + sum(total_data) <= accepted, "no packet both forwarded and spilled")

        # Counters seen from the ports. Re-injected: a spilled packet's last beat leaving o; drain
        # requests: a DRAIN frame leaving spill_o (the spec's parse); return_malformed: a frame's first
        # beat on spill_i (the spec's own framing; spill_i.ready is 1) that is not a RETURN of the spill
        # EtherType with a payload for a port < ports with a drain outstanding (the spec's drains minus
        # the returns it accepted); every packet accepted on i is counted once by one verdict counter.
        ri, rx_inside = dut.spill_i, Signal()
        r_first = ri.valid & ~rx_inside
        with m.If(ri.valid):
            m.d.sync += rx_inside.eq(~ri.payload.last)
        r_port = byte(ri.payload, wire.SPILL_PORT_AT)
        r_good = ((Cat(byte(ri.payload, wire.ETHERTYPE_AT + 1), byte(ri.payload, wire.ETHERTYPE_AT))
                   == wire.ETHERTYPE_SPILL) & (byte(ri.payload, wire.SPILL_OP_AT) == wire.SPILL_RETURN)
                  & ~(ri.payload.last & ~ri.payload.keep[wire.SPILL_HEADER_BYTES]) & (r_port < P))
        asked = [Signal(range(C + 2), name=f"spec_asked{q}") for q in range(P)]
        accept = r_first & r_good & (Array(asked)[r_port[:1]] != 0)
        for q in range(P):
            m.d.sync += asked[q].eq(asked[q] + (drain & (cur_port == q)) - (accept & (r_port == q)))
        counters_follow(m, {name: getattr(dut, name) for name in CREDIT_COUNTERS}, {
            "reinjected": o_take & o.payload.last & o.payload.meta.spilled, "drain_requests": drain,
            "return_malformed": r_first & ~accept}, saturating=False, block="switch ")
        verdicts = sum(getattr(dut, name) for name in ("forwarded", "spilled", "spill_overflow", "spill_oversize",
                                                        "malformed"))
        m.d.comb += Assert(verdicts[:p.counter_bits] == accepted[:p.counter_bits],
                           "every packet accepted on i is counted by exactly one verdict counter")
        # Reset (free at every cycle): the cycle after it both outputs are idle, every credit is back.
        idle = ~o.valid & ~so.valid & (dut.outstanding == 0)
        for q in range(P):
            idle &= dut.credits[q] == C
        for name in CREDIT_COUNTERS:
            idle &= getattr(dut, name) == 0
        m.d.comb += Assert(~after_reset(m) | idle, "switch: a reset idles o and spill_o, returns every credit and "
                                                  "clears the counters")
        return m


#: Bounded depth of the default run: 6 cycles reach a spill, its DATA frame (2 beats) and a drain
#: request, or a 3-beat packet forwarded behind another (~12 s); a round trip back to ``o`` needs about 10
#: (many minutes): ``INNET_SPILL_DEPTH=10 pytest formal/test_spill_buffer.py -k disaggregated_switch``.
SWITCH_DEPTH = int(os.environ.get("INNET_SPILL_DEPTH") or 6)


def test_disaggregated_switch_bmc():
    prove(SwitchSpec(), "spill_switch_bmc", depth=SWITCH_DEPTH, mode="bmc")


# --- Disaggregated mode, round trip: CreditCore + the SpillNode RTL, the links as free-delay channels ----

#: The switch side's decisions (``CreditCore``) and the real spill node, at the node proof's narrow bus.
TRIP_PARAMS = CREDIT_PARAMS.replace(return_slots=1, mtu=42)
TRIP_NODE = SpillNodeParams(ports=2, capacity=2, mtu=42, data_bytes=23, counter_bits=4)


class RoundTripSpec(Elaboratable):
    """Per-flow order across the whole round trip with the node's RTL in the loop (abstract packets).

    ``CreditCore`` decides with free arrivals, queue depths and ``hold``; each spill verdict puts an
    abstract DATA frame (the 22-byte spill header with the verdict's port, flow and seq, and one inner
    byte carrying the spec's tag of the tracked packets) on the **spill link**, each drain request a
    one-beat DRAIN frame (count 1), in decision order (the byte-level switch keeps a DRAIN behind its
    DATA frame: ``SwitchSpec``'s "a DRAIN never overtakes its DATA frame"). The spill link is a
    free-delay FIFO channel: a frame's beats reach ``SpillNode.i`` whenever a free choice says so
    (gaps between beats included); ``node.o.ready`` is free; RETURN frames go on the **return link**,
    another free-delay FIFO channel, whose head reaches the core (``ret_valid``) at a free time, then
    waits in a return buffer until a free ``done`` re-injects it. The spec's independent shadow:
    per-port FIFOs of the DATA frames sent, the tracked packets' state (spilled, back) and the
    channels' contents. Properties:

    - the node returns, per origin port, exactly the DATA frames it was sent, in order, unchanged but
      for ``op = RETURN`` (port, flow, seq, inner byte; on a 23-byte bus every frame is one beat);
    - every return reaching the switch is accepted (it was asked for); ``misordered`` stays 0;
    - credits: ``credit[p]`` + DATA frames of ``p`` not yet returned + returns of ``p`` on the link or
      held == capacity; the node never overflows, never finds a DRAIN empty, sees nothing malformed;
    - per-flow order across the round trip: of two tracked packets of one flow and port, ``late`` is
      never forwarded while ``early`` is out, and never re-injected before ``early``.

    With ``inductive`` the spec adds the invariants that make all of this k-inductive (``_strengthen``:
    the core's tables, the node's FIFO pointers, requests and memory contents, and the channels,
    against the shadow), so ``prove`` gives an unbounded proof. Every frame is one beat (the node's
    multi-beat frames are its own proof's and the simulations' business).
    """

    def __init__(self, depth, inductive=False):
        self.core = CreditCore(TRIP_PARAMS)
        self.node = SpillNode(TRIP_NODE)
        self.depth, self.inductive = depth, inductive
        if inductive:       # the spec reads each slot's first beat (where every one-beat frame is)
            self.slots = [self.node.mem.read_port(domain="comb") for _ in range(TRIP_NODE.ports * TRIP_NODE.capacity)]

    def _strengthen(self, m, env):
        """Invariants that make the properties k-inductive: the core's tables, the node's FIFOs and
        memory, and the channels, against the spec's shadow (``env``: ``elaborate``'s locals)."""
        core, node, link, sent, back, held = (env[k] for k in ("core", "node", "link", "sent", "back", "held"))
        p, P, C, S, F = core.params, env["P"], env["C"], env["S"], env["F"]
        encode, H, B = env["encode"], env["H"], node.beats
        requested, out = env["requested"], env["out"]
        flow, port, seen = env["flow"], env["port"], env["seen"]
        D = link.depth
        node_parser = node.parser
        m.d.comb += [Assert(~node_parser.inside, "node: every frame is one beat"),
                     Assert(node.index == 0, "node: output at a frame's first beat"),
                     Assert(node.rr < P, "node pointer"), Assert(node.current < P, "node current")]
        m.d.comb += Assert(~node.busy | (Array(node.requests)[node.current] != 0), "node: busy on a requested port")
        # Drain rate window (the spec's own).
        window, used = Signal(range(p.drain_window)), Signal(range(p.drain_rate + 2))
        with m.If(window == p.drain_window - 1):
            m.d.sync += [window.eq(0), used.eq(0)]
        with m.Else():
            m.d.sync += [window.eq(window + 1), used.eq(used + requested)]
        m.d.comb += [Assert(window == core.window, "windows aligned"), Assert(used == core.used, "used"),
                     Assert(core.rr < P, "core pointer")]
        live_link = [link.len > j for j in range(D)]
        total_asked = []
        for q in range(P):
            count, head, tail, req = node.counts[q], node.heads[q], node.tails[q], node.requests[q]
            m.d.comb += [Assert(count <= C, f"node {q} count"), Assert(req <= count, f"node {q} requests"),
                         Assert(tail == Mux(head + count >= C, head + count - C, head + count), f"node {q} tail")]
            data_q = [live_link[j] & ~link.items[j].drain & (link.items[j].port == q) for j in range(D)]
            drain_q = [live_link[j] & link.items[j].drain & (link.items[j].port == q) for j in range(D)]
            on_back = sum((back.len > k) & (back.items[k].port == q) for k in range(S + 1))
            m.d.comb += [
                Assert(sent[q].len == count + sum(data_q), f"port {q}: sent = stored + DATA on the link"),
                Assert(core.unasked[q] + core.asked[q] == sent[q].len + on_back, f"port {q}: unasked + asked"),
                Assert(core.asked[q] == sum(drain_q) + req + on_back, f"port {q}: asked = DRAINs + requests + back"),
            ]
            total_asked.append(core.asked[q])
            # Each DRAIN finds a stored frame not yet asked for when it arrives.
            for j in range(D):
                before_data = sum(data_q[:j])
                drains_upto = sum(drain_q[:j + 1])
                m.d.comb += Assert(~drain_q[j] | (drains_upto + req <= count + before_data),
                                   f"port {q}: link DRAIN {j} finds a frame")
                with m.If(data_q[j]):
                    nth = Array(x.as_value() for x in sent[q].items)[count + before_data]
                    m.d.comb += Assert(link.items[j].as_value() == nth,
                                       f"port {q}: link DATA {j} is the next sent frame")
            # Stored frames: memory slot (head + k) holds sent[q][k].
            for k in range(C):
                rp = self.slots[q * C + k]
                slot = Mux(head + k >= C, head + k - C, head + k)
                m.d.comb += rp.addr.eq((q * C + slot) * B)
                with m.If(count > k):
                    m.d.comb += Assert((rp.data.data == encode(sent[q].items[k])) & (rp.data.last == 1)
                                       & (rp.data.keep == (1 << H + 1) - 1) & (sent[q].items[k].drain == 0)
                                       & (sent[q].items[k].port == q),
                                       f"node {q} slot +{k} holds the frame sent")
            # Seqs per port: held, back, then sent, consecutive from expect.
            seq_chain = [(held, k) for k in range(S + 1)] + [(back, k) for k in range(S + 1)]
            before = 0
            for fifo, k in seq_chain:
                here = (fifo.len > k) & (fifo.items[k].port == q)
                with m.If(here):
                    m.d.comb += Assert(fifo.items[k].seq == (core.expect[q] + before)[:16], f"port {q}: seqs held/back")
                before = before + here
            for k in range(C + 1):
                with m.If(sent[q].len > k):
                    m.d.comb += Assert((sent[q].items[k].seq == (core.expect[q] + before + k)[:16])
                                       & (sent[q].items[k].port == q) & ~sent[q].items[k].drain,
                                       f"port {q}: sent seqs")
            m.d.comb += Assert(core.seqs[q] == (core.expect[q] + before + sent[q].len)[:16], f"port {q}: seq numbering")
        m.d.comb += [Assert(core.reserved == held.len + sum(total_asked), "reserved = held + asked"),
                     Assert(sum(total_asked) + held.len <= S, "return slots")]
        for j in range(D):
            with m.If(live_link[j] & link.items[j].drain):
                m.d.comb += Assert((link.items[j].tag == 0) & (link.items[j].seq == 0) & (link.items[j].flow == 0),
                                   "a DRAIN carries nothing")
        # Flow table and tracked packets against every place a spilled packet can be.
        places = [(held, k, held.items[k], held.len > k) for k in range(S + 1)]
        places += [(back, k, back.items[k], back.len > k) for k in range(S + 1)]
        places += [(sent[q], k, sent[q].items[k], sent[q].len > k) for q in range(P) for k in range(C + 1)]
        for f in range(F):
            m.d.comb += Assert(core.flow_count[f] == sum(ok & (r.flow == f) for _, _, r, ok in places),
                               f"flow table entry {f}")
        for name, bit in (("early", 0), ("late", 1)):
            for _, _, r, ok in places:
                m.d.comb += Assert(~(ok & r.tag[bit]) | ((r.flow == flow) & (r.port == port)),
                                   f"{name} is out with its flow and port")
            m.d.comb += Assert(sum(ok & r.tag[bit] for _, _, r, ok in places) == (out[name][0] & ~out[name][1]),
                               f"{name} is in one place while out")
        for a_i, (_, _, ra, oka) in enumerate(places):
            for b_i, (_, _, rb, okb) in enumerate(places):
                if b_i <= a_i:          # late at or before early in the chain (held, back, sent)
                    m.d.comb += Assert(~(oka & ra.tag[0] & okb & rb.tag[1]), "early is ahead of late")
        m.d.comb += [
            Assert(~out["late"][0] | seen["early"], "late after early"),
            Assert(~out["early"][0] | seen["early"], "early spilled after seen"),
            Assert(~out["early"][1] | out["early"][0], "early back after spilled"),
            Assert(~out["late"][1] | out["late"][0], "late back after spilled"),
            Assert(~out["late"][0] | seen["late"], "late spilled after seen"),
        ]

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        m.submodules.node = node = self.node
        p = core.params
        P, C, F, S, W = p.ports, p.capacity, p.flows, p.return_slots, TRIP_NODE.data_bytes
        m.d.comb += [core.d.valid.eq(AnySeq(1)), core.d.payload.eq(AnySeq(core.d.payload.shape().size)),
                     core.qdepth.eq(AnySeq(core.qdepth.shape().size)), core.v.ready.eq(AnySeq(1)),
                     core.req.ready.eq(AnySeq(1)), core.hold.eq(AnySeq(P)), core.ret_bad.eq(0),
                     node.o.ready.eq(AnySeq(1))]
        v, a = core.v.payload, core.d.payload
        decided = core.d.valid & core.v.ready
        spill = decided & (v.kind == 1)
        requested = core.req.valid & core.req.ready

        # Tracked packets (as in CreditSpec): early and late of one flow and port, early decided first.
        early_h, late_h, flow, port, seen = tracked_pair(m, core)
        tag = Cat(a.handle == early_h, a.handle == late_h)

        # The spill link: DATA frames at their spill decision, DRAIN frames at their request (DATA first).
        frame = data.StructLayout({"drain": 1, "port": range(P), "flow": range(F), "seq": 16, "tag": 2})
        link = ShiftFifo(m, frame, P * C + S + 2, "down")
        data_f, drain_f = Signal(frame), Signal(frame)
        m.d.comb += [data_f.port.eq(v.port), data_f.flow.eq(v.flow), data_f.seq.eq(v.seq), data_f.tag.eq(tag),
                     drain_f.drain.eq(1), drain_f.port.eq(core.req.payload.port)]
        head = link.head()
        go = AnySeq(1) & (link.len != 0)
        link.update(spill, data_f, go, requested, drain_f)
        hdr = [0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01]          # node and switch MACs (any)
        byte = lambda value: Cat(value, Const(0, 8 - len(Value.cast(value))))      # noqa: E731

        def encode(item):
            """The frame's one beat: the spill header, then (DATA) the tag as the inner byte."""
            return Cat(*(Const(b, 8) for b in hdr), Const(wire.ETHERTYPE_SPILL >> 8, 8),
                       Const(wire.ETHERTYPE_SPILL & 0xFF, 8),
                       byte(Mux(item.drain, wire.SPILL_DRAIN, wire.SPILL_DATA)), byte(item.port), Const(0, 8),
                       byte(item.flow), item.seq[8:16], item.seq[0:8], byte(item.drain), Const(0, 8),
                       byte(item.tag))
        header = encode(head)[:8 * wire.SPILL_HEADER_BYTES]
        H = wire.SPILL_HEADER_BYTES
        assert len(header) == 8 * H and W >= H + 1
        m.d.comb += [       # one beat per frame: a DATA frame's one inner byte is the tag
            node.i.valid.eq(go),
            node.i.payload.data.eq(encode(head)),
            node.i.payload.keep.eq(Mux(head.drain, (1 << H) - 1, (1 << H + 1) - 1)),
            node.i.payload.last.eq(1),
            Assert(link.len < link.depth, "the spill link channel is deep enough"),
        ]

        # Shadow: per origin port, the DATA frames sent and not yet returned, in order.
        sent = [ShiftFifo(m, frame, C + 1, f"sent{q}") for q in range(P)]

        # The node's RETURN frames (one beat each), parsed from its output.
        o = node.o
        o_byte = lambda k: o.payload.data[8 * k:8 * k + 8]         # noqa: E731
        returning = o.valid & o.ready
        got = Signal(frame)
        m.d.comb += [got.port.eq(o_byte(wire.SPILL_PORT_AT)), got.flow.eq(o_byte(wire.SPILL_FLOW_AT + 1)),
                     got.seq.eq(Cat(o_byte(wire.SPILL_SEQ_AT + 1), o_byte(wire.SPILL_SEQ_AT))),
                     got.tag.eq(o_byte(H))]
        m.d.comb += Assert(~o.valid | (
            (o_byte(wire.ETHERTYPE_AT) == wire.ETHERTYPE_SPILL >> 8)
            & (o_byte(wire.ETHERTYPE_AT + 1) == wire.ETHERTYPE_SPILL & 0xFF)
            & (o_byte(wire.SPILL_OP_AT) == wire.SPILL_RETURN) & (o_byte(wire.SPILL_PORT_AT) < P)
            & o.payload.last & (o.payload.keep == (1 << H + 1) - 1) & (o_byte(H)[2:] == 0)
            & (o_byte(wire.SPILL_FLOW_AT) == 0) & (o_byte(wire.SPILL_FLOW_AT + 1) < F)),
            "a RETURN frame: one beat, spill EtherType, op RETURN, a port, one inner byte")
        # The return link, then the switch's return buffer until re-injection.
        back = ShiftFifo(m, frame, S + 1, "up")
        held = ShiftFifo(m, frame, S + 1, "held")
        deliver = AnySeq(1) & (back.len != 0)
        bh = back.head()
        m.d.comb += [core.ret_valid.eq(deliver), core.ret_port.eq(bh.port)]
        m.d.comb += Assert(core.ret_ok == deliver, "every return reaching the switch was asked for")
        back.update(returning, got, deliver)
        done = AnySeq(1) & (held.len != 0)
        hh = held.head()
        m.d.comb += [core.done_valid.eq(done), core.done_port.eq(hh.port), core.done_flow.eq(hh.flow),
                     core.done_seq.eq(hh.seq)]
        held.update(core.ret_ok, bh, done)
        m.d.comb += [Assert(back.len <= S, "returns on the link within return_slots"),
                     Assert(held.len <= S, "held returns within return_slots")]
        for q in range(P):
            sh = sent[q].head()
            mine = returning & (got.port == q)
            m.d.comb += Assert(~mine | ((sent[q].len != 0) & (got.flow == sh.flow) & (got.seq == sh.seq)
                                        & (got.tag == sh.tag)),
                               f"port {q}: the node returns the oldest DATA frame it holds, unchanged")
            sent[q].update(spill & (v.port == q), data_f, mine)
            on_link = sum((back.len > k) & (back.items[k].port == q) for k in range(S + 1))
            in_held = sum((held.len > k) & (held.items[k].port == q) for k in range(S + 1))
            m.d.comb += [Assert(core.credit[q] + sent[q].len + on_link + in_held == C,
                                f"port {q}: credits + packets out == capacity"),
                         Assert(sent[q].len <= C, f"port {q}: the shadow is deep enough")]
        m.d.comb += [Assert(core.misordered == 0, "returns come back in seq order"),
                     Assert((node.overflow == 0) & (node.drain_empty == 0) & (node.malformed == 0)
                            & (node.oversize == 0), "the node never overflows, never drains empty, takes every frame")]

        # Per-flow order across the round trip.
        out = tracked_trips(m, a.handle, spill, done, hh.tag, early_h, late_h)
        early_out = out["early"][0] & ~out["early"][1]
        late_forwarded = decided & (a.handle == late_h) & (v.kind == 0)
        m.d.comb += [
            Assert(~(late_forwarded & early_out), "late is never forwarded while early is out"),
            Assert(~(out["late"][2] & early_out), "late is never re-injected before early"),
            Assert(~out["late"][2] | out["late"][0], "late is re-injected only after it was spilled"),
            Cover(out["early"][1]),                             # one round trip: 7 cycles
        ]
        # Reset (free at every cycle; the links reset with both ends): the cycle after it the node holds
        # nothing and sends nothing, the switch has every credit back and no return slot reserved.
        idle = ~node.o.valid & (core.reserved == 0)
        for q in range(P):
            idle &= (node.counts[q] == 0) & (node.requests[q] == 0) & (core.credit[q] == C)
        m.d.comb += Assert(~after_reset(m) | idle, "round trip: a reset empties the node and returns every credit")
        if self.inductive:
            self._strengthen(m, locals())
        if self.depth >= 12:                                    # both tracked packets through the node: 12
            m.d.comb += Cover(out["early"][1] & out["late"][1])
        return m


#: Cover depth: 7 cycles hold one packet's whole round trip (spill decision, the node stores it, drain
#: request, RETURN, accepted, re-injected; ~7 s); with 12 (``INNET_TRIP_DEPTH=12``, ~30 s) also both
#: tracked packets through the node, in order.
TRIP_DEPTH = int(os.environ.get("INNET_TRIP_DEPTH") or 7)


def test_round_trip_prove():
    prove(RoundTripSpec(TRIP_DEPTH, inductive=True), "spill_round_trip_prove", depth=3, mode="prove")


def test_round_trip_cover():
    prove(RoundTripSpec(TRIP_DEPTH), f"spill_round_trip_cover_{TRIP_DEPTH}", depth=TRIP_DEPTH, mode="cover")


class DecapSpec(Elaboratable):
    """The ``Decapsulator`` alone, ``data_bytes`` = 24 (two bytes past the 22-byte spill header): frames
    on ``i`` are link-shaped (every beat full but the last, which holds 1..24 bytes from byte 0) and
    longer than the header; ``o.ready`` and ``rst`` are free. The spec counts each frame's bytes on
    both sides and tracks one byte, chosen by ``AnyConst`` (frame number and position past the
    header): on ``o`` that frame's byte at position - 22 is the byte that came in; every output beat
    but a frame's last is full, a last beat holds 1..24 bytes from byte 0, ``first`` marks exactly a
    frame's first beat, and an output frame holds its input frame's length - 22 bytes."""

    W = 24

    def elaborate(self, platform):
        m = Module()
        W, H = self.W, wire.SPILL_HEADER_BYTES
        m.submodules.dut = dut = Decapsulator(W)
        beat, out = dut.i.payload, dut.o.payload
        m.d.comb += [dut.i.valid.eq(AnySeq(1)), beat.data.eq(AnySeq(8 * W)), beat.last.eq(AnySeq(1)),
                     beat.keep.eq(AnySeq(W)), dut.o.ready.eq(AnySeq(1))]

        in_bytes, in_shaped = link_beat(m, beat.keep, beat.last)
        out_bytes, out_shaped = link_beat(m, out.keep, out.last)
        take, give = dut.i.valid & dut.i.ready, dut.o.valid & dut.o.ready
        in_pos, out_pos = Signal(8), Signal(8)           # bytes of the current frame so far
        in_frame, out_frame = Signal(3), Signal(3)       # frames so far (numbers wrap; depth < 8 frames)
        m.d.comb += [Assume(in_shaped), beat.first.eq(in_pos == 0)]
        with m.If(take & beat.last):
            m.d.comb += Assume(in_pos + in_bytes > H)      # a frame carries more than its header
        with m.If(take):
            m.d.sync += in_pos.eq(Mux(beat.last, 0, in_pos + W))
            with m.If(beat.last):
                m.d.sync += in_frame.eq(in_frame + 1)
        with m.If(give):
            m.d.sync += out_pos.eq(Mux(out.last, 0, out_pos + W))
            with m.If(out.last):
                m.d.sync += out_frame.eq(out_frame + 1)

        frame, pos = Signal(3), Signal(8)
        m.d.comb += [frame.eq(AnyConst(3)), pos.eq(AnyConst(8)), Assume(pos >= H), Assume(pos < 4 * W)]
        # the tracked byte and the frame's length, latched as they come in (and seen the same cycle:
        # an output beat carries bytes of the input beat taken in that cycle)
        byte, seen, length, ended = Signal(8), Signal(), Signal(8), Signal()
        byte_now, seen_now, length_now, ended_now = Signal(8), Signal(), Signal(8), Signal()
        here = take & (in_frame == frame) & (in_pos <= pos) & (pos < in_pos + in_bytes)
        closing = take & beat.last & (in_frame == frame)
        m.d.comb += [byte_now.eq(Mux(here, beat.data.word_select((pos - in_pos)[:5], 8), byte)),
                     seen_now.eq(seen | here), length_now.eq(Mux(closing, in_pos + in_bytes, length)),
                     ended_now.eq(ended | closing)]
        m.d.sync += [byte.eq(byte_now), seen.eq(seen_now), length.eq(length_now), ended.eq(ended_now)]
        with m.If(give & (out_frame == frame) & (out_pos <= pos - H) & (pos - H < out_pos + out_bytes)):
            m.d.comb += Assert(seen_now & (out.data.word_select((pos - H - out_pos)[:5], 8) == byte_now),
                               "the tracked byte leaves at its position less the header, unchanged")
        with m.If(dut.o.valid):
            m.d.comb += [Assert(out_shaped, "o beats are link-shaped"),
                         Assert(out.first == (out_pos == 0), "first marks a frame's first beat")]
        with m.If(give & out.last & (out_frame == frame)):
            m.d.comb += Assert(ended_now & (out_pos + out_bytes == length_now - H),
                               "a frame leaves with its length less the header")
        m.d.comb += Cover(give & out.last & (out_frame == frame) & (length > W + H))
        return m


def test_decapsulator_bmc():
    """The return path's header stripping, byte for byte, at depth 8 (frames of up to 3 beats)."""
    prove(DecapSpec(), "spill_decapsulator", depth=8, mode="bmc")


class HandleSpec(Elaboratable):
    """The in-switch ``InSwitchSpillBuffer`` numbers packets: every packet whose last beat is taken on ``i``
    (malformed or not) takes the next handle, from 0 after reset (its docstring). The spec counts
    those packets itself; within the bound (fewer than 2**handle_bits packets) a descriptor leaving on
    ``o`` carries a handle below that count, and no handle leaves twice. Beats, queue depths,
    ``o.ready`` and ``rst`` are free."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = InSwitchSpillBuffer(PARAMS)
        m.d.comb += [dut.i.valid.eq(AnySeq(1)), dut.i.payload.as_value().eq(AnySeq(len(dut.i.payload.as_value()))),
                     dut.qdepth.as_value().eq(AnySeq(len(dut.qdepth.as_value()))), dut.o.ready.eq(AnySeq(1))]
        arrivals = Signal(8)
        with m.If(dut.i.valid & dut.i.ready & dut.i.payload.last):
            m.d.sync += arrivals.eq(arrivals + 1)
        left = Signal(1 << PARAMS.handle_bits)          # handles that have left on o
        handle = dut.o.payload.handle
        with m.If(dut.o.valid):
            m.d.comb += [Assert(handle < arrivals, "a descriptor's handle is the number of an arrival"),
                         Assert(~left.bit_select(handle, 1), "no two packets leave with one handle")]
        with m.If(dut.o.valid & dut.o.ready):
            m.d.sync += left.eq(left | (1 << handle))
        m.d.comb += Cover(dut.o.valid & (handle == 2))
        return m


def test_inswitch_handles_bmc():
    """Handles are distinct arrival numbers (bounded: depth 6 < 2**handle_bits packets)."""
    prove(HandleSpec(), "spill_buffer_handles", depth=6, mode="bmc")


# --- Disaggregated mode, the return buffer byte for byte (SpillSwitch) ------------------------------------

#: Two return slots (the slots cycle), of two 42-byte beats each; one port's worth of the switch side.
RETURN_PARAMS = SWITCH_PARAMS.replace(return_slots=2)


class ReturnSpec(Elaboratable):
    """The switch side's return path, unbounded: every input free (packets on ``i`` of the few frames
    ``SwitchSpec`` uses, free beats on ``spill_i``, queue depths, ``o.ready``, ``spill_o.ready``). The spec
    frames ``spill_i`` itself (a frame starts after a last beat; ``spill_i.ready`` is 1) and judges each
    frame's first beat (SPEC: a RETURN is EtherType 0x88B5, op RETURN, and carries a packet: more than its
    22-byte header); it counts the frames accepted (the credit core's ``ret_ok``, proved against the
    requests in ``CreditSpec``), their beats and the re-injected packets leaving ``o``. Properties:

    - the first beat's judgement and origin port reach the credit core as the spec's (``ret_bad``,
      ``ret_port``);
    - the return buffer never holds more than ``return_slots`` frames (accepted, not yet re-injected:
      ``reserved`` = requests outstanding + those; ``reserved <= return_slots``);
    - byte for byte: one tracked accepted frame (chosen freely) and its tracked beat ``tj`` are read back
      into the decapsulator in acceptance order (the spec's own write and read slots), beat ``tj`` with its
      byte ``lane`` (any: ``AnyConst``, so every lane is checked) and keep as they came, ``last`` on the
      frame's last beat (the slot's last beat for a longer frame), ``first`` on beat 0.

    Strengthening: the receive and read pointers, the frames committed and the decapsulator's state
    against the spec's counts, and the memory cells of the tracked frame (read through extra ports)."""

    def __init__(self, params=RETURN_PARAMS):
        self.dut = SpillSwitch(params)
        self.cells = [self.dut.ret_mem.read_port(domain="comb") for _ in range(self.dut.slot_beats)]
        self.slot_cells = [[self.dut.ret_mem.read_port(domain="comb") for _ in range(self.dut.slot_beats)]
                           for _ in range(self.dut.slots)]

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        p = dut.params
        P, S, B, W, H = p.ports, dut.slots, dut.slot_beats, p.data_bytes, wire.SPILL_HEADER_BYTES
        core, dec = dut.core, dut.dec
        for port in (dut.i, dut.spill_i):
            m.d.comb += [port.valid.eq(AnySeq(1)), port.payload.eq(AnySeq(port.payload.shape().size))]
        frames = [int.from_bytes(bytes(Ether() / IP(src="10.0.0.1") / UDP(sport=sport))[:W].ljust(W, b"\0"), "little")
                  for sport in (1, 2)]
        pick = AnySeq(1)
        m.d.comb += dut.i.payload.data.eq(Array(Const(f, 8 * W) for f in frames)[pick])
        m.d.comb += [Assume(dut.i.payload.meta.port < P), dut.qdepth.eq(AnySeq(dut.qdepth.shape().size)),
                     dut.o.ready.eq(AnySeq(1)), dut.spill_o.ready.eq(AnySeq(1))]

        # --- the spec's framing and judgement of spill_i ---
        ri = dut.spill_i
        beat = ri.payload
        inside, index = Signal(), Signal(range(B + 1))      # beats of the frame so far (saturating at B)
        first = ri.valid & ~inside
        octet = lambda at: beat.data.word_select(at, 8)      # noqa: E731
        good = ((Cat(octet(wire.ETHERTYPE_AT + 1), octet(wire.ETHERTYPE_AT)) == wire.ETHERTYPE_SPILL)
                & (octet(wire.SPILL_OP_AT) == wire.SPILL_RETURN) & ~(beat.last & ~beat.keep[H]))
        with m.If(ri.valid):
            m.d.sync += [inside.eq(~beat.last), index.eq(Mux(beat.last, 0, Mux(index == B, B, index + 1)))]
        m.d.comb += [Assert(dut.rx_inside == inside, "return link: inside a frame as the spec frames it"),
                     Assert(dut.wr_index == index, "return link: the frame's beat count as the spec's"),
                     Assert((inside == (index != 0)) & (index <= B),
                            "spec framing: beats counted exactly within a frame")]
        with m.If(first):
            m.d.comb += Assert((core.ret_bad == ~good) & (core.ret_port == octet(wire.SPILL_PORT_AT)),
                               "return link: a frame's first beat judged as the SPEC says (a RETURN with a packet)")
        accepted = Signal()                 # the frame arriving was accepted at its first beat
        take = first & core.ret_ok
        with m.If(first):
            m.d.sync += accepted.eq(core.ret_ok)
        ok = Mux(first, core.ret_ok, accepted)
        m.d.comb += Assert(~inside | (dut.wr_ok == accepted),
                           "return link: the frame arriving accepted as the spec saw")
        commit = ri.valid & ok & beat.last

        # --- frames held: accepted and not yet re-injected; slots written and read ---
        o = dut.o
        reinjected = o.valid & o.ready & o.payload.last & o.payload.meta.spilled
        held = Signal(range(S + 2))
        m.d.sync += held.eq(held + take - reinjected)
        wr, rd, stored = Signal(range(S)), Signal(range(S)), Signal(range(S + 1))
        feed = dec.i.valid & dec.i.ready
        read_last = feed & dec.i.payload.last
        with m.If(commit):
            m.d.sync += wr.eq(Mux(wr == S - 1, 0, wr + 1))
        with m.If(read_last):
            m.d.sync += rd.eq(Mux(rd == S - 1, 0, rd + 1))
        m.d.sync += stored.eq(stored + commit - read_last)
        arriving = inside & accepted
        m.d.comb += [
            Assert(core.reserved == sum(core.asked) + held, "return slots reserved: requests outstanding + held"),
            Assert(core.reserved <= S, "return slots reserved within return_slots"),
            Assert(held == arriving + stored + dec.flush, "held: arriving, stored, or the decapsulator's last beat"),
            Assert((dut.wr_slot == wr) & (dut.rd_slot == rd) & (dut.committed == stored),
                   "return buffer: write and read slots and frames stored as the spec's"),
            Assert(wr == Mux(rd + stored >= S, rd + stored - S, rd + stored), "return buffer: write = read + stored"),
            Assert((wr < S) & (rd < S) & (dut.rd_index < B), "return buffer: pointers in range"),
            Assert(dec.have == (dut.rd_index != 0), "decapsulator: holds a beat exactly within a frame"),
            Assert((dut.rd_index == 0) | (stored != 0), "return buffer: a frame read from is stored"),
            Assert(~dec.flush | ~dec.have, "decapsulator: the extra beat after the frame's input"),
            Assert(((dut.owner == 1) == dec.emitted) & (dut.owner != 3), "o: a returned packet in progress is the "
                                                                          "decapsulator's frame begun"),
            Assert(~dec.emitted | dec.have | dec.flush, "decapsulator: a frame begun is held or ending"),
        ]

        # every stored frame ends within its slot; the one being read has not ended before its read index
        for k, cells in enumerate(self.slot_cells):
            m.d.comb += [cell.addr.eq(k * B + b) for b, cell in enumerate(cells)]
            live = Mux(k >= rd, k - rd, k + S - rd) < stored
            m.d.comb += [Assert(~live | Cat(*(cell.data.last for cell in cells)).any(),
                                f"return slot {k}: a stored frame ends within its slot"),
                         Assert(~live | ~cells[0].data.last | cells[0].data.keep[H],
                                f"return slot {k}: a stored one-beat frame carries a packet")]
            with m.If(live & (rd == k)):
                m.d.comb += [Assert(~((b < dut.rd_index) & cell.data.last), f"return slot {k}: read past its end")
                             for b, cell in enumerate(cells)]
            with m.If(arriving & (wr == k)):
                m.d.comb += [Assert(~(b < index) | (cell.data.last == (b == B - 1)),
                                    f"return slot {k}: an arriving frame's beats, last only on the slot's last")
                             for b, cell in enumerate(cells)]

        # --- the tracked frame: its beat tj, byte lane `lane` (and every keep bit) ---
        tj, lane = Signal(range(B)), Signal(range(W))
        m.d.comb += [tj.eq(AnyConst(range(B))), Assume(tj < B), lane.eq(AnyConst(range(W))), Assume(lane < W)]

        def byte(value):
            return value.word_select(lane, 8)
        state = Signal(2)                   # 0 none, 1 arriving, 2 stored (read from beat `pos` on)
        slot, length = Signal(range(S)), Signal(range(B + 1))
        t_data, t_keep, t_last = Signal(8), Signal(W), Signal()
        starts = take & AnySeq(1) & (state == 0)
        with m.If((starts | (state == 1)) & ri.valid):
            with m.If(index == tj):
                m.d.sync += [t_data.eq(byte(beat.data)), t_keep.eq(beat.keep), t_last.eq(beat.last | (index == B - 1))]
            m.d.sync += state.eq(1)
            with m.If(starts):
                m.d.sync += slot.eq(wr)
            with m.If(beat.last):
                m.d.sync += [state.eq(2), length.eq(Mux(index >= B, B, index + 1))]
        ours = (state == 2) & (rd == slot) & dec.i.valid
        with m.If(ours):
            m.d.comb += [Assert(dec.i.payload.last == (dut.rd_index == length - 1),
                                "the tracked frame is read back with its beats, last on its last (or the slot's)"),
                         Assert(dec.i.payload.first == (dut.rd_index == 0), "first on a frame's first beat read")]
            with m.If((dut.rd_index == tj) & (tj < length)):
                m.d.comb += Assert((byte(dec.i.payload.data) == t_data) & (dec.i.payload.keep == t_keep)
                                   & (dec.i.payload.last == t_last),
                                   "the tracked beat is read back as it came in, byte for byte")
        with m.If(ours & feed & dec.i.payload.last):
            m.d.sync += state.eq(0)
        # strengthening: the tracked frame's place, and its cells
        m.d.comb += Assert(state != 3, "tracked frame: a state of three")
        stored_ahead = Mux(slot >= rd, slot - rd, slot + S - rd)
        with m.If(state == 1):
            m.d.comb += Assert(arriving & (slot == wr), "tracked frame arriving: into the write slot")
        with m.If(state == 2):
            m.d.comb += [Assert(stored_ahead < stored, "tracked frame stored: behind the frames read before it"),
                         Assert((length >= 1) & (length <= B), "tracked frame: 1..slot beats"),
                         Assert(~(dec.have & (rd == slot)) | (dut.rd_index < length), "tracked frame: read within")]
        for k, cell in enumerate(self.cells):
            m.d.comb += cell.addr.eq(slot * B + k)
            written = Mux(state == 1, k < index, k < length)
            with m.If((state != 0) & written):
                m.d.comb += Assert(cell.data.last == Mux(state == 1, k == B - 1, k == length - 1),
                                   f"tracked frame: beat {k} stored with its last flag (the slot's last beat too)")
                with m.If(tj == k):
                    m.d.comb += Assert((byte(cell.data.data) == t_data) & (cell.data.keep == t_keep)
                                       & (cell.data.last == t_last), f"tracked frame: beat {k} stored as it came")
        m.d.comb += Cover(ours & feed & dec.i.payload.last & (length == B))
        return m


def test_return_buffer_prove():
    """The return buffer byte for byte, the RETURN judgement and the return slots (unbounded)."""
    prove(ReturnSpec(), "spill_return_buffer", depth=2, mode="prove")


def test_return_buffer_cover():
    """Not vacuous: a tracked two-beat frame read back (a packet spilled, asked for, returned)."""
    prove(ReturnSpec(), "spill_return_buffer_cover", depth=11, mode="cover")

"""Formal proofs of Spillway's in-switch baseline (hdl/spillway/spill_core.py, descriptor level; inswitch.py).

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

``HandleSpec`` checks that the in-switch block numbers its packets (handles are arrival numbers, distinct
while they have not wrapped; k-induction).

Where a slot's content matters (the tracked packets, the flow table) the spec reads the FIFO
memories through extra combinational read ports. All assertions together are k-inductive, so
``prove`` gives an unbounded proof; covers show the interesting cases are reachable.
"""

import pytest
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Array, Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, ResetSignal, Signal

from formal.runner import prove
from hdl.spillway.inswitch import InSwitchSpillBuffer
from hdl.spillway.spill_core import SpillCore
from models.spillway.params import InSwitchParams

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
def test_inswitch_prove(order):
    result = prove(Spec(order), f"spillway_inswitch_{order}", depth=6, mode="prove")
    print(f"{order}: {result.mode} depth {result.depth} in {result.seconds:.1f} s")


def test_inswitch_cover():
    prove(Spec("flow"), "spillway_inswitch_cover", depth=16, mode="cover")


class HandleSpec(Elaboratable):
    """The in-switch ``InSwitchSpillBuffer`` numbers packets: every packet whose last beat is taken on ``i``
    (malformed or not) takes the next handle, from 0 after reset (its docstring). The spec counts those
    packets itself (modulo 2**handle_bits, and whether 2**handle_bits have come since the reset):

    - every arrival handed to the spill core carries its arrival number modulo 2**handle_bits (always);
    - while fewer than 2**handle_bits packets have arrived, a descriptor leaving on ``o`` carries the
      handle of an earlier arrival, and no handle leaves twice. (Past that, handles wrap: a packet kept in
      a spill FIFO while 2**handle_bits others pass shares its handle with a newer one, by design.)

    Beats, queue depths, ``o.ready`` and ``rst`` are free; k-induction (unbounded in time). Strengthening
    invariant: the spill core's FIFO pointers (head, tail, count) and, for every handle value ``h`` while
    the count has not wrapped, the places holding it (live FIFO slots, read through extra read ports, the
    output register, already left) number at most one, and none if ``h`` was not given yet."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = InSwitchSpillBuffer(PARAMS)
        core, B, C = dut.core, PARAMS.handle_bits, PARAMS.capacity
        m.d.comb += [dut.i.valid.eq(AnySeq(1)), dut.i.payload.as_value().eq(AnySeq(len(dut.i.payload.as_value()))),
                     dut.qdepth.as_value().eq(AnySeq(len(dut.qdepth.as_value()))), dut.o.ready.eq(AnySeq(1))]
        given, wrapped = Signal(B), Signal()             # arrivals so far (mod 2**B); 2**B of them came
        with m.If(dut.i.valid & dut.i.ready & dut.i.payload.last):
            m.d.sync += given.eq(given + 1)
            with m.If(given == (1 << B) - 1):
                m.d.sync += wrapped.eq(1)
        m.d.comb += Assert(core.d.payload.handle == given,      # offered or not: the next arrival's
                           "an arrival's handle is its arrival number modulo 2**handle_bits")
        left = Signal(1 << B)                            # handles that have left on o
        handle = dut.o.payload.handle
        with m.If(dut.o.valid & ~wrapped):
            m.d.comb += [Assert(handle < given, "a descriptor's handle is the number of an arrival"),
                         Assert(~left.bit_select(handle, 1), "no two packets leave with one handle")]
        with m.If(dut.o.valid & dut.o.ready):
            m.d.sync += left.eq(left | (1 << handle))

        # strengthening: the FIFOs' pointers and, per handle value, its places (at most one; none if not given)
        places = [(dut.o.valid, handle)]
        for p, fifo in enumerate(core.fifos):
            head, count, tail = core.heads[p], core.counts[p], core.tails[p]
            m.d.comb += [Assert((head < C) & (tail < C) & (count <= C), f"FIFO {p}: pointers in range"),
                         Assert(tail == Mux(head + count >= C, head + count - C, head + count),
                                f"FIFO {p}: tail = head + count")]
            for k in range(C):
                read = fifo.read_port(domain="comb")
                m.d.comb += read.addr.eq(k)
                places.append((Mux(k >= head, k - head, k + C - head) < count, read.data.handle))
        for h in range(1 << B):
            held = sum(live & (value == h) for live, value in places) + left[h]
            with m.If(~wrapped):
                m.d.comb += Assert(held <= (h < given), f"handle {h}: in at most one place, none before it is given")
        m.d.comb += Cover(dut.o.valid & (handle == 2))
        return m


def test_inswitch_handles_prove():
    """Handles are arrival numbers; distinct while they have not wrapped (k-induction)."""
    prove(HandleSpec(), "spillway_inswitch_handles", depth=3)

"""Formal proofs of the Spillway spill core (hdl/spill_buffer.py, descriptor level).

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
  window.

Where a slot's content matters (the tracked packets, the flow table) the spec reads the FIFO
memories through extra combinational read ports. All assertions together are k-inductive, so
``prove`` gives an unbounded proof; covers show the interesting cases are reachable.
"""
import pytest
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cover, Elaboratable, Module, Mux, Signal

from formal.runner import prove
from hdl.spill_buffer import SpillBufferParams, SpillCore

PARAMS = SpillBufferParams(ports=2, high=2, low=1, capacity=3, drain_rate=1, drain_window=2, flows=2,
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

        m.d.comb += [
            Cover(early.gone & late.gone & core.drained.any()),
            Cover(core.spill_overflow != 0),
            Cover((core.counts[0] == C) & (core.counts[1] != 0)),
        ]
        return m


@pytest.mark.parametrize("order", ["flow", "port"])
def test_spill_buffer_prove(order):
    result = prove(Spec(order), f"spill_buffer_{order}", depth=6, mode="prove")
    print(f"{order}: {result.mode} depth {result.depth} in {result.seconds:.1f} s")


def test_spill_buffer_cover():
    prove(Spec("flow"), "spill_buffer_cover", depth=16, mode="cover")

"""Formal properties of the aggregator allocator, proved by k-induction for every policy.

The spec drives single-beat INA packets whose header fields, values, ``i.valid`` and ``o.ready`` are
free on every cycle, and follows one job+seq ``X`` (any constant) whose worker ``b`` always carries
the gradient ``g_b`` (any constant, small enough not to saturate), retransmits (``resend``) only
after its original, and repeats its original only while that original is in the slot's partial
aggregate (the window in which a switch can recognise a duplicate). Packets map to slot
``index == jobseq mod slots`` (the ATP-style hash; any other index is a bad header or another slot).
Proved for all such traces:

- single owner: a held slot (and a shadow copy) ``k`` holds a job+seq ``== k mod slots``, so no two
  slots hold the same job+seq, and each slot has exactly one owner;
- nothing added twice, nothing lost: every result, eviction or forwarded contribution of ``X``
  carries exactly ``sum(g_b for b in its bitmap)``; the bitmaps of the non-retransmission pieces of
  ``X`` are disjoint; the workers of ``X`` sent so far are exactly those already emitted, pending
  in the output register, or in the slot's partial aggregate;
- eviction carries exactly the partial aggregate: an eviction of ``X`` has the slot's bitmap and
  the sum of exactly those workers' gradients (the same two properties, applied to evictions).
"""
import pytest
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, Signal, signed

from formal.runner import prove
from hdl.aggregator import Aggregator, AggregatorParams
from hdl.headers import INA, INA_HEADER_BYTES, INA_OFFSET, wire_bytes, wire_view
from models.headers import ina_packet

LIMIT = 1 << 20     # |g_b| below this: W gradients never saturate an int32


class AggregatorSpec(Elaboratable):
    """The DUT fed free INA packets, with the properties above on a tracked job+seq."""

    def __init__(self, policy, slots=2, workers=2, values=1, cover=False):
        assert slots & (slots - 1) == 0, "slots a power of two (index = jobseq mod slots)"
        self.policy, self.slots, self.workers, self.values = policy, slots, workers, values
        self.cover = cover

    def elaborate(self, platform):
        m = Module()
        P, W, V = self.slots, self.workers, self.values
        m.submodules.dut = dut = Aggregator(AggregatorParams(policy=self.policy, slots=P, workers=W,
                                                             values=V, data_bytes=64))
        template = bytes(ina_packet(0, 0, 0, [0] * V)).ljust(64, b"\0")
        data = Signal(8 * 64)
        ina = wire_view(INA, data, INA_OFFSET)
        values = [wire_bytes(data, INA_HEADER_BYTES + 4 * v, 4).as_signed() for v in range(V)]
        m.d.comb += data.eq(int.from_bytes(template, "little"))
        m.d.comb += [ina.as_value().eq(AnySeq(INA.size))]
        m.d.comb += [wire_bytes(data, INA_HEADER_BYTES + 4 * v, 4).eq(AnySeq(32)) for v in range(V)]
        m.d.comb += [
            dut.i.payload.data.eq(data), dut.i.payload.keep.eq((1 << dut.length) - 1),
            dut.i.payload.first.eq(1), dut.i.payload.last.eq(1), dut.i.payload.meta.port.eq(AnySeq(8)),
            dut.i.valid.eq(AnySeq(1)), dut.o.ready.eq(AnySeq(1)),
        ]
        mask = P - 1
        m.d.comb += Assume((ina.index & mask) == (ina.jobseq & mask))

        # --- the tracked job+seq X ---
        x = Signal(32)
        fanin = Signal(8)
        grads = [[Signal(signed(32), name=f"g{b}_{v}") for v in range(V)] for b in range(W)]
        m.d.comb += [x.eq(AnyConst(32)), fanin.eq(AnyConst(8))]
        m.d.comb += [g.eq(AnyConst(signed(32))) for row in grads for g in row]
        m.d.comb += Assume((fanin >= 2) & (fanin <= W))
        for row in grads:
            m.d.comb += [Assume((g < LIMIT) & (g > -LIMIT)) for g in row]
        full = Signal(W)
        m.d.comb += full.eq(Cat(*(fanin > b for b in range(W))))
        kx = x & mask
        in_bits, out_bits = Signal(W), Signal(W)   # X's workers sent / emitted as pieces

        def gsum(bitmap):
            return [sum(Mux(bitmap[b], grads[b][v], 0) for b in range(W)) for v in range(V)]

        # --- the output register's packet ---
        o_ina = wire_view(INA, dut.o.payload.data, INA_OFFSET)
        o_values = [wire_bytes(dut.o.payload.data, INA_HEADER_BYTES + 4 * v, 4).as_signed()
                    for v in range(V)]
        of_x = dut.o.valid & (o_ina.jobseq == x) & ~o_ina.ack
        carries = of_x & (o_ina.result | o_ina.evict | o_ina.collision)
        piece = Signal()       # a result, eviction or forwarded original: counts at the PS
        m.d.comb += piece.eq(carries & ((o_ina.result & ~o_ina.resend) | o_ina.evict
                                        | (o_ina.collision & ~o_ina.resend)))
        pend_bits = Signal(W)
        m.d.comb += pend_bits.eq(piece.replicate(W) & o_ina.bitmap[:W])
        with m.If(dut.o.valid & dut.o.ready & piece):
            m.d.sync += out_bits.eq(out_bits | o_ina.bitmap[:W])

        # --- the slot of X ---
        valid = [dut.slot_valid[k] for k in range(P)]
        holds = Signal()
        m.d.comb += holds.eq(
            sum((valid[k] & (dut.slot_jobseq[k] == x) & (kx == k)) for k in range(P)) != 0)
        s_bitmap = Signal(W)
        s_complete = Signal()
        s_fanin = Signal(8)
        s_values = [Signal(signed(32), name=f"s_value{v}") for v in range(V)]
        for k in range(P):
            with m.If(kx == k):
                m.d.comb += [s_bitmap.eq(dut.slot_bitmap[k]), s_complete.eq(dut.slot_complete[k]),
                             s_fanin.eq(dut.slot_fanin[k])]
                m.d.comb += [s_values[v].eq(dut.slot_values[k][v]) for v in range(V)]
        partial = Signal(W)
        m.d.comb += partial.eq((holds & ~s_complete).replicate(W) & s_bitmap)

        transfer = dut.i.valid & dut.i.ready
        contribution = Signal()
        m.d.comb += contribution.eq(
            (ina.jobseq == x) & ~ina.ack & (ina.bitmap < (1 << W)) & (ina.fanin >= 2)
            & (ina.fanin <= W) & (ina.index < P) & (ina.overflow == 0) & (ina.collision == 0)
            & (ina.evict == 0) & (ina.result == 0) & (ina.resv == 0)
            & (sum(ina.bitmap[b] for b in range(W)) == 1))
        with m.If(transfer & contribution):
            m.d.comb += [Assume(ina.fanin == fanin), Assume((ina.bitmap[:W] & ~full) == 0)]
            for b in range(W):
                with m.If(ina.bitmap[b]):
                    m.d.comb += [Assume(values[v] == grads[b][v]) for v in range(V)]
            with m.If(ina.resend):
                m.d.comb += Assume((ina.bitmap[:W] & ~in_bits) == 0)
            with m.Else():
                # a plain duplicate only while the original sits in the slot's partial aggregate
                m.d.comb += Assume((ina.bitmap[:W] & in_bits & ~partial) == 0)
                m.d.sync += in_bits.eq(in_bits | ina.bitmap[:W])

        # single owner
        for k in range(P):
            with m.If(valid[k]):
                m.d.comb += Assert((dut.slot_jobseq[k] & mask) == k, f"slot {k} holds a job+seq of slot {k}")
            for j in range(k):
                with m.If(valid[j] & valid[k]):
                    m.d.comb += Assert(dut.slot_jobseq[j] != dut.slot_jobseq[k],
                                       f"slots {j} and {k} never hold the same job+seq")
        # nothing added twice, nothing lost, evictions carry exactly the partial aggregate
        with m.If(carries):
            m.d.comb += [Assert(o_values[v] == gsum(o_ina.bitmap)[v],
                                "an emitted piece of X carries exactly the sum of its workers")
                         for v in range(V)]
            m.d.comb += Assert((o_ina.bitmap[:W] & ~full) == 0, "an emitted piece of X has X's workers")
        m.d.comb += [
            Assert((in_bits & ~full) == 0, "only X's workers contribute to X"),
            Assert((pend_bits & out_bits) == 0, "no worker of X is emitted twice"),
            Assert((partial & (out_bits | pend_bits)) == 0, "a partial aggregate holds no emitted worker"),
            Assert(in_bits == (out_bits | pend_bits | partial),
                   "every contribution of X is emitted, pending or in its slot's partial aggregate"),
        ]
        with m.If(holds):
            m.d.comb += [Assert(s_values[v] == gsum(s_bitmap)[v], "the slot holds exactly its workers' sum")
                         for v in range(V)]
            m.d.comb += Assert(s_fanin == fanin, "the slot of X has X's fan-in")
            with m.If(s_complete):
                m.d.comb += Assert((s_bitmap == full) & ((out_bits | pend_bits) == full),
                                   "a complete slot's aggregate was emitted")
        if dut.shadow:
            for k in range(P):
                with m.If(dut.shadow_valid[k]):
                    m.d.comb += Assert((dut.shadow_jobseq[k] & mask) == k, f"shadow {k} holds a job+seq of slot {k}")
                with m.If(dut.shadow_valid[k] & (dut.shadow_jobseq[k] == x)):
                    m.d.comb += [Assert(dut.shadow_values[k][v] == gsum(dut.shadow_bitmap[k])[v],
                                        "the shadow copy holds exactly its workers' sum") for v in range(V)]
                    m.d.comb += Assert((dut.shadow_bitmap[k] == full) & ((out_bits | pend_bits) == full)
                                       & (partial == 0), "the shadow copy of X is X's emitted result")

        if self.cover:
            m.d.comb += [
                Cover(piece & o_ina.result & (o_ina.bitmap[:W] == full), "X aggregated in the switch"),
                Cover(piece & o_ina.evict & (o_ina.bitmap[:W] != 0) & ~o_ina.resend, "X's partial evicted"),
                Cover(piece & o_ina.collision, "a contribution of X forwarded to the PS"),
                Cover(carries & o_ina.result & o_ina.resend, "a retransmission of X answered"),
            ]
        return m


@pytest.mark.parametrize("policy", ["atp", "switchml", "esa"])
def test_aggregator_proof(policy):
    prove(AggregatorSpec(policy), f"aggregator_{policy}", depth=4, mode="prove")


@pytest.mark.parametrize("policy", ["atp", "esa"])
def test_aggregator_cover(policy):
    """The properties are not vacuous: aggregation, eviction/flush, forwarding and resends happen."""
    prove(AggregatorSpec(policy, cover=True), f"aggregator_cover_{policy}", depth=8, mode="cover")

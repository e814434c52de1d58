"""Formal properties of the aggregator allocator, proved by k-induction for every policy.

The spec drives single-beat INA packets whose header fields, values, ``i.valid`` and ``o.ready`` are
free on every cycle. Shadows computed here (never the design's own decisions) are compared with
what the design holds and emits.

ATP and ESA: packets map to slot ``index == jobseq mod slots`` (the ATP-style hash; any other index
is a bad header or another slot). The spec follows one job+seq ``X != 0`` whose worker ``b`` always
carries the gradient ``g_b`` (small enough never to reach ATP's bound), retransmits (``resend``)
only after its original, repeats its original only while that original is in the slot (the window
in which a switch can recognise a duplicate), and whose PS ACK comes only once every worker of X
reached the PS (ACKs of other job+seqs, stray or early, are free). Proved:

- single owner: a held slot ``k`` holds a job+seq ``== k mod slots``; no two slots hold the same one;
- a bit added at most once: a slot holding X holds exactly ``sum(g_b for b in its bitmap)``;
- an eviction (and every other piece of X the switch emits: results, flushes, collisions,
  forwarded packets) carries exactly the sum of the workers in its bitmap, only X's workers;
- nothing lost: the workers of X sent so far are exactly those emitted, pending in the output
  register, or in X's slot;
- ATP/ESA ACK: the cycle after an ACK that frees (not overflow=1 with resend=0), no slot holds its
  job+seq.

Counters (``CounterSpec``, every policy, free reset): every counter rises by exactly one on the
outcome the spec gives the beat from its own framing, length, header and slot-table shadow, wrapping.

SwitchML: the spec follows one slot ``k0`` (any constant) whose packets all carry fan-in ``F`` and
worker ``b``'s gradient ``g_b``; a worker sends to set ``t`` only while set ``1 - t`` is not
mid-round (the workers alternate sets after a result; SwitchML's own window). Proved: for each
set, while its count-down is non-zero it equals ``F - popcount(bitmap)`` and its values are the
sum of exactly the workers in the bitmap; every result or retransmission answer for ``k0`` has
the full bitmap and carries the sum of all ``F`` workers.
"""
import pytest
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Array, Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, Signal, signed

from formal.props import counters_follow, popcount
from formal.runner import prove
from hdl.aggregator import COUNTERS, Aggregator, AggregatorParams
from hdl.headers import INA, INA_HEADER_BYTES, INA_OFFSET, UDP, wire_bytes, wire_view
from models.headers import ina_packet
from models.wire import INA_PORT, INT32_MAX, INT32_MIN, UDP_OFFSET

LIMIT = 1 << 20     # |g_b| below this: W gradients never reach an int32 bound


class AggregatorSpec(Elaboratable):
    """The DUT fed free INA packets, with the properties above."""

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
        self.ina = ina = wire_view(INA, data, INA_OFFSET)
        self.pkt_values = [wire_bytes(data, INA_HEADER_BYTES + 4 * v, 4).as_signed() for v in range(V)]
        m.d.comb += data.eq(int.from_bytes(template, "little"))
        m.d.comb += [ina.as_value().eq(AnySeq(INA.size))]
        m.d.comb += [wire_bytes(data, INA_HEADER_BYTES + 4 * v, 4).eq(AnySeq(32)) for v in range(V)]
        m.d.comb += [
            dut.i.payload.data.eq(data), dut.i.payload.keep.eq((1 << dut.length) - 1),
            dut.i.payload.first.eq(1), dut.i.payload.last.eq(1), dut.i.payload.meta.port.eq(AnySeq(8)),
            dut.i.valid.eq(AnySeq(1)), dut.o.ready.eq(AnySeq(1)),
        ]
        self.grads = [[Signal(signed(32), name=f"g{b}_{v}") for v in range(V)] for b in range(W)]
        m.d.comb += [g.eq(AnyConst(signed(32))) for row in self.grads for g in row]
        for row in self.grads:
            m.d.comb += [Assume((g < LIMIT) & (g > -LIMIT)) for g in row]
        self.fanin = Signal(8)
        m.d.comb += [self.fanin.eq(AnyConst(8)), Assume((self.fanin >= 2) & (self.fanin <= W))]
        self.full = Signal(W)
        m.d.comb += self.full.eq(Cat(*(self.fanin > b for b in range(W))))
        self.o_ina = wire_view(INA, dut.o.payload.data, INA_OFFSET)
        self.o_values = [wire_bytes(dut.o.payload.data, INA_HEADER_BYTES + 4 * v, 4).as_signed()
                         for v in range(V)]
        self.transfer = dut.i.valid & dut.i.ready
        if self.policy == "switchml":
            self._switchml(m, dut)
        else:
            self._atp(m, dut)
        return m

    def gsum(self, bitmap):
        return [sum(Mux(bitmap[b], self.grads[b][v], 0) for b in range(self.workers)) for v in range(self.values)]

    def _atp(self, m, dut):
        P, W, V = self.slots, self.workers, self.values
        ina, o_ina, o_values, full, fanin, transfer = (self.ina, self.o_ina, self.o_values, self.full, self.fanin,
                                                       self.transfer)
        mask = P - 1
        m.d.comb += Assume((ina.index & mask) == (ina.jobseq & mask))
        x = Signal(32)
        m.d.comb += [x.eq(AnyConst(32)), Assume(x != 0)]
        kx = x & mask
        in_bits, out_bits = Signal(W), Signal(W)   # X's workers sent / emitted as pieces

        # the output register's packet: every non-ACK packet of X is a piece the PS may count
        piece = Signal()
        m.d.comb += piece.eq(dut.o.valid & (o_ina.jobseq == x) & ~o_ina.ack)
        pend_bits = Signal(W)
        m.d.comb += pend_bits.eq(piece.replicate(W) & o_ina.bitmap[:W])
        with m.If(dut.o.valid & dut.o.ready & piece):
            m.d.sync += out_bits.eq(out_bits | o_ina.bitmap[:W])

        # the slot of X
        jobseq = dut.slot_jobseq
        holds = Signal()
        m.d.comb += holds.eq(sum(((jobseq[k] == x) & (kx == k)) for k in range(P)) != 0)
        s_bitmap, s_count, s_fanin = Signal(W), Signal(8), Signal(8)
        s_values = [Signal(signed(32), name=f"s_value{v}") for v in range(V)]
        for k in range(P):
            with m.If(kx == k):
                m.d.comb += [s_bitmap.eq(dut.slot_bitmap[k]), s_count.eq(dut.slot_count[k]),
                             s_fanin.eq(dut.slot_fanin[k])]
                m.d.comb += [s_values[v].eq(dut.slot_values[k][v]) for v in range(V)]
        in_slot = Signal(W)
        m.d.comb += in_slot.eq(holds.replicate(W) & s_bitmap)

        contribution = Signal()
        m.d.comb += contribution.eq(
            (ina.jobseq == x) & ~ina.ack & (ina.bitmap < (1 << W)) & (ina.fanin >= 2)
            & (ina.fanin <= W) & (ina.index < P) & (ina.collision == 0)
            & (ina.evict == 0) & (ina.result == 0) & (ina.resv == 0) & (popcount(ina.bitmap) == 1))
        with m.If(transfer & contribution):
            m.d.comb += [Assume(ina.fanin == fanin), Assume((ina.bitmap[:W] & ~full) == 0)]
            for b in range(W):
                with m.If(ina.bitmap[b]):
                    m.d.comb += [Assume(self.pkt_values[v] == self.grads[b][v]) for v in range(V)]
            with m.If(ina.resend):
                m.d.comb += Assume((ina.bitmap[:W] & ~in_bits) == 0)
            with m.Else():
                # a plain duplicate only while the original sits in the slot
                m.d.comb += Assume((ina.bitmap[:W] & in_bits & ~in_slot) == 0)
                m.d.sync += in_bits.eq(in_bits | ina.bitmap[:W])
        with m.If(transfer & ina.ack & (ina.jobseq == x)):
            m.d.comb += Assume(out_bits == full)

        # single owner
        for k in range(P):
            with m.If(jobseq[k] != 0):
                m.d.comb += Assert((jobseq[k] & mask) == k, f"slot {k} holds a job+seq of slot {k}")
            for j in range(k):
                with m.If(jobseq[j] != 0):
                    m.d.comb += Assert(jobseq[j] != jobseq[k], f"slots {j} and {k} never hold the same job+seq")
        # pieces exact, bit added at most once, nothing lost
        with m.If(piece):
            m.d.comb += [Assert(o_values[v] == self.gsum(o_ina.bitmap)[v],
                                "an emitted piece of X (eviction, result, flush, forward) carries exactly "
                                "the sum of its workers") for v in range(V)]
            m.d.comb += Assert((o_ina.bitmap[:W] & ~full) == 0, "an emitted piece of X has X's workers")
        m.d.comb += [
            Assert((in_bits & ~full) == 0, "only X's workers contribute to X"),
            Assert(in_bits == (out_bits | pend_bits | in_slot),
                   "every contribution of X is emitted, pending or in its slot"),
        ]
        with m.If(holds):
            m.d.comb += [Assert(s_values[v] == self.gsum(s_bitmap)[v],
                                "a bit is added at most once: the slot holds exactly its workers' sum")
                         for v in range(V)]
            m.d.comb += Assert(s_count == popcount(s_bitmap), "the slot of X counts its bitmap")
            with m.If(s_count == fanin):
                m.d.comb += Assert((out_bits | pend_bits) == full, "a complete slot's aggregate was emitted")
        # an ACK that frees leaves no slot of its job+seq held
        ack_check, ack_js = Signal(), Signal(32)
        m.d.sync += [ack_check.eq(transfer & ina.ack & (ina.jobseq != 0) & ~(ina.overflow & ~ina.resend)
                                  & (ina.index < P)), ack_js.eq(ina.jobseq)]
        with m.If(ack_check):
            m.d.comb += [Assert(jobseq[k] != ack_js, "an ACK leaves no slot of its job+seq held")
                         for k in range(P)]
        if self.cover:
            if self.policy == "esa":
                m.d.comb += Cover(piece & o_ina.evict & ~o_ina.resend, "X's partial evicted (ESA)")
            m.d.comb += [
                Cover(piece & o_ina.result & ~o_ina.evict & (o_ina.bitmap[:W] == full), "X aggregated in the switch"),
                Cover(piece & o_ina.evict & o_ina.resend, "X's slot flushed by a resend"),
                Cover(piece & o_ina.collision, "a contribution of X forwarded with the collision flag"),
                Cover(ack_check & (ack_js == x), "X ACKed and freed"),
            ]

    def _switchml(self, m, dut):
        P, W, V = self.slots, self.workers, self.values
        ina, o_ina, o_values, full, fanin, transfer = (self.ina, self.o_ina, self.o_values, self.full, self.fanin,
                                                       self.transfer)
        k0 = Signal(range(P))
        m.d.comb += k0.eq(AnyConst(range(P)))
        counts = [[Signal(range(W), name=f"c{t}") for t in range(2)]]
        bitmaps = [[Signal(W, name=f"bm{t}") for t in range(2)]]
        vals = [[[Signal(signed(32), name=f"val{t}_{v}") for v in range(V)] for t in range(2)]]
        for k in range(P):
            with m.If(k0 == k):
                for t in range(2):
                    m.d.comb += [counts[0][t].eq(dut.sml_count[k][t]), bitmaps[0][t].eq(dut.sml_bitmap[k][t])]
                    m.d.comb += [vals[0][t][v].eq(dut.sml_values[k][t][v]) for v in range(V)]
        counts, bitmaps, vals = counts[0], bitmaps[0], vals[0]
        to_k0 = Signal()
        m.d.comb += to_k0.eq(transfer & ~ina.ack & (ina.index[:15] == k0))
        s = ina.index[15]
        with m.If(to_k0):
            m.d.comb += [Assume(ina.fanin == fanin), Assume((ina.bitmap[:W] & ~full) == 0),
                         Assume(Mux(s, counts[0], counts[1]) == 0)]
            for b in range(W):
                with m.If(ina.bitmap[b]):
                    m.d.comb += [Assume(self.pkt_values[v] == self.grads[b][v]) for v in range(V)]
        for t in range(2):
            with m.If(counts[t] != 0):
                m.d.comb += Assert(counts[t] == fanin - popcount(bitmaps[t]),
                                   f"set {t}: the count-down equals fan-in minus the popcount of its bitmap")
                m.d.comb += [Assert(vals[t][v] == self.gsum(bitmaps[t])[v],
                                    f"set {t}: values are the sum of exactly its bitmap's workers") for v in range(V)]
            m.d.comb += Assert((bitmaps[t] & ~full) == 0, f"set {t}: only the slot's workers")
            # the alternation, as invariants: one set mid-round at a time; a finished set is full or empty
            with m.If(counts[t] != 0):
                m.d.comb += Assert(counts[1 - t] == 0, f"set {t} mid-round: set {1 - t} is not")
                m.d.comb += Assert((bitmaps[1 - t] == 0) | (bitmaps[1 - t] == (full & ~bitmaps[t])),
                                   f"set {t} mid-round: set {1 - t} holds the workers that have not moved on")
            with m.If((counts[t] == 0) & (counts[1 - t] == 0)):
                m.d.comb += Assert((bitmaps[t] == 0) | (bitmaps[t] == full), f"set {t} done: full or emptied")
            with m.If((counts[t] == 0) & (bitmaps[t] == full)):
                m.d.comb += [Assert(vals[t][v] == self.gsum(full)[v], f"set {t} done: the full sum")
                             for v in range(V)]
        m.d.comb += Assert((bitmaps[0] & bitmaps[1]) == 0, "a worker's bit is in one set at most")
        # every emission for k0 (only results and answers are emitted) is the full sum
        emitted = Signal()
        m.d.comb += emitted.eq(dut.o.valid & o_ina.result & ~o_ina.ack & (o_ina.index[:15] == k0))
        with m.If(emitted):
            m.d.comb += Assert(o_ina.bitmap[:W] == full, "a result of k0 has every worker")
            m.d.comb += [Assert(o_values[v] == self.gsum(full)[v], "a result of k0 is the sum of all its workers")
                         for v in range(V)]
        if self.cover:
            m.d.comb += [Cover(emitted & (dut.o.payload.meta.port == 255), "k0's result multicast"),
                         Cover(emitted & (dut.o.payload.meta.port != 255), "k0's result sent back to a worker")]


class SlotRulesSpec(Elaboratable):
    """ATP/ESA slot rules at the edges the main spec leaves out: free single-beat INA packets with free
    header fields and *unrestricted* int32 values (the main spec keeps gradients far from the bounds
    so it can state exact sums), one or two slots. The spec observes the slot registers before and
    after each accepted packet. Proved by k-induction:

    - saturating arithmetic: when a slot keeps its job+seq and gains a worker's bit, its value becomes
      ATP's ``noequ0_write_data_entry`` of the old value and the packet's (add while the old value is
      strictly inside +-INT32_MAX, clamp the sum to int32; a value at a bound sticks);
    - the priority rule: a well-formed contribution (not resend, not overflow) to a slot held by another
      job+seq takes the slot iff the policy is ESA and its priority is strictly higher (ESA preempts
      only a strictly lower-priority holder; ATP never does).
    """

    def __init__(self, policy, slots=2):
        self.policy, self.slots = policy, slots

    def elaborate(self, platform):
        m = Module()
        P, W = self.slots, 3              # fan-in 3: an ESA slot outlives its second contribution
        m.submodules.dut = dut = Aggregator(AggregatorParams(policy=self.policy, slots=P, workers=W, values=1,
                                                             data_bytes=64))
        template = bytes(ina_packet(0, 0, 0, [0])).ljust(64, b"\0")
        data = Signal(8 * 64)
        ina = wire_view(INA, data, INA_OFFSET)
        value = wire_bytes(data, INA_HEADER_BYTES, 4).as_signed()
        m.d.comb += data.eq(int.from_bytes(template, "little"))
        m.d.comb += [ina.as_value().eq(AnySeq(INA.size)), wire_bytes(data, INA_HEADER_BYTES, 4).eq(AnySeq(32))]
        m.d.comb += [
            dut.i.payload.data.eq(data), dut.i.payload.keep.eq((1 << dut.length) - 1),
            dut.i.payload.first.eq(1), dut.i.payload.last.eq(1), dut.i.payload.meta.port.eq(AnySeq(8)),
            dut.i.valid.eq(AnySeq(1)), dut.o.ready.eq(AnySeq(1)),
        ]
        m.d.comb += Assume(ina.index < P)
        k = ina.index[:max(1, (P - 1).bit_length())]
        js, bm = Array(dut.slot_jobseq)[k], Array(dut.slot_bitmap)[k]
        val, prio = Array(dut.slot_values[q][0] for q in range(P))[k], Array(dut.slot_priority)[k]
        take = dut.i.valid & dut.i.ready
        well_formed = ((popcount(ina.bitmap) == 1) & (ina.bitmap < (1 << W)) & (ina.fanin >= 2) & (ina.fanin <= W)
                       & ~ina.collision & ~ina.ack & ~ina.evict & ~ina.result & (ina.resv == 0) & (ina.jobseq != 0))
        # The slot this cycle's packet names, before and after the edge.
        p_take, p_k, p_js = Signal(name="p_take"), Signal.like(k, name="p_k"), Signal(32, name="p_js")
        p_bm, p_val = Signal(len(bm), name="p_bm"), Signal(signed(32), name="p_val")
        p_v = Signal(signed(32), name="p_v")
        p_contest, p_higher, p_ina_js = Signal(name="p_contest"), Signal(name="p_higher"), Signal(32, name="p_ina_js")
        m.d.sync += [p_take.eq(take), p_k.eq(k), p_js.eq(js), p_bm.eq(bm), p_val.eq(val), p_v.eq(value),
                     p_contest.eq(take & well_formed & ~ina.resend & ~ina.overflow & (js != 0) & (js != ina.jobseq)),
                     p_higher.eq(ina.priority > prio), p_ina_js.eq(ina.jobseq)]
        a_js, a_bm = Array(dut.slot_jobseq)[p_k], Array(dut.slot_bitmap)[p_k]
        a_val = Array(dut.slot_values[q][0] for q in range(P))[p_k]
        grew = Signal()
        m.d.comb += grew.eq(p_take & (p_js != 0) & (a_js == p_js) & ((a_bm & ~p_bm) != 0) & (p_bm != 0))
        wide = Signal(signed(34))
        m.d.comb += wide.eq(p_val + p_v)
        inside = (p_val > -INT32_MAX) & (p_val < INT32_MAX)
        clamped = Mux(wide > INT32_MAX, INT32_MAX, Mux(wide < INT32_MIN, INT32_MIN, wide[:32].as_signed()))
        m.d.comb += Assert(~grew | (a_val == Mux(inside, clamped, p_val)),
                           "a contribution adds with ATP's saturating int32 arithmetic (a bound sticks)")
        took = a_js == p_ina_js
        rule = p_higher if self.policy == "esa" else 0
        m.d.comb += Assert(~p_contest | (took == rule),
                           "a contribution takes a slot held by another job+seq iff ESA and strictly higher priority")
        m.d.comb += [Cover(grew & (wide > INT32_MAX)), Cover(grew & (wide < INT32_MIN)), Cover(grew & ~inside)]
        if self.policy == "esa":
            m.d.comb += Cover(p_contest & ~p_higher & (p_ina_js != 0))
        return m


class CounterSpec(Elaboratable):
    """Every counter rises by exactly one on its event, as the spec classifies each beat itself (SPEC
    section 3, the order of the block's docstring), and wraps (``counter_bits = 2``: the model masks
    the count, so the fourth event of a kind wraps it to 0). Free single- or multi-beat traffic: free
    ``first``/``last``, a free contiguous ``keep`` (any byte count 0..``data_bytes``), a free UDP
    destination port (INA's or the next one), free INA header fields; reset free at every cycle.

    The spec's own slot table (job+seq, bitmap, priority of a held slot; SwitchML: per set bitmap
    and count-down) follows the packets it classified, reset empty with the design, and is asserted
    equal to the design's registers (the invariant that makes the k-induction go through). From it
    and the packet alone the spec names the outcome: a continuation beat outside a packet is
    ``malformed``; a first beat too short to hold the UDP port or to another port ``passed``; an
    INA packet not exactly one beat of ``length`` bytes ``malformed``; an ACK ``ack_freed`` iff it
    frees (ATP/ESA: index in range, job+seq != 0 held by the slot, not overflow=1 with resend=0),
    else ``ack_passed``; a bad header ``bad_header``; then the policy's outcome. What leaves unchanged
    (on ``o`` the next cycle, with its ``last``): a continuation beat of a passed packet, a first beat
    not INA, an ACK; nothing for a stray continuation beat, a dropped packet's rest or a malformed INA
    first beat."""

    def __init__(self, policy, slots=2, workers=3):
        self.policy, self.slots, self.workers = policy, slots, workers

    def elaborate(self, platform):
        m = Module()
        P, W, sml, esa = self.slots, self.workers, self.policy == "switchml", self.policy == "esa"
        params = AggregatorParams(policy=self.policy, slots=P, workers=W, values=1, data_bytes=64, counter_bits=2)
        m.submodules.dut = dut = Aggregator(params)
        L = params.length
        template = bytes(ina_packet(0, 0, 0, [0])).ljust(64, b"\0")
        data = Signal(8 * 64)
        ina = wire_view(INA, data, INA_OFFSET)
        udp = wire_view(UDP, data, UDP_OFFSET)
        to_ina, first, last = Signal(), Signal(), Signal()
        n = Signal(range(65))        # bytes in the beat (keep is contiguous from byte 0)
        m.d.comb += [data.eq(int.from_bytes(template, "little")), ina.as_value().eq(AnySeq(INA.size)),
                     to_ina.eq(AnySeq(1)), udp.dport.eq(Mux(to_ina, INA_PORT, INA_PORT + 1)),
                     first.eq(AnySeq(1)), last.eq(AnySeq(1)), n.eq(AnySeq(len(n))), Assume(n <= 64)]
        m.d.comb += [
            dut.i.payload.data.eq(data), dut.i.payload.keep.eq(Cat(*(n > b for b in range(64)))),
            dut.i.payload.first.eq(first), dut.i.payload.last.eq(last), dut.i.payload.meta.port.eq(AnySeq(8)),
            dut.i.valid.eq(AnySeq(1)), dut.o.ready.eq(AnySeq(1)),
        ]
        take = dut.i.valid & dut.i.ready
        # framing (SPEC: a packet starts with a beat that has `first`; it ends with `last`)
        inside, dropping = Signal(), Signal()
        with m.If(take):
            m.d.sync += inside.eq(~last & (first | inside))
            with m.If(first):
                m.d.sync += dropping.eq(to_ina & (n >= UDP_OFFSET + 4))
        m.d.comb += [Assert(inside == dut.in_packet, "spec framing: inside a packet as the design's parser"),
                     Assert(~inside | (dropping == dut.drop_rest),
                            "spec framing: a dropped packet's rest as the design's")]
        ev = {name: Signal(name=f"spec_{name}") for name in COUNTERS}
        is_ina = to_ina & (n >= UDP_OFFSET + 4)
        exact = last & (n == L)
        bitmap_ok = (popcount(ina.bitmap) == 1) & (ina.bitmap < (1 << W))
        fanin_ok = (ina.fanin >= 2) & (ina.fanin <= W)
        index = ina.index[:15] if sml else ina.index
        flags_ok = ~ina.collision & ~ina.ack & ~ina.evict & ~ina.result & (ina.resv == 0)
        if sml:
            flags_ok &= ~ina.overflow & ~ina.ecn
        else:
            flags_ok &= ina.jobseq != 0
        header_ok = bitmap_ok & fanin_ok & (index < P) & flags_ok
        k = index[:max(1, (P - 1).bit_length())]
        bit = ina.bitmap[:W]
        contribution = Signal()
        with m.If(~first):
            m.d.comb += ev["malformed"].eq(~inside)
        with m.Elif(~is_ina):
            m.d.comb += ev["passed"].eq(1)
        with m.Elif(~exact):
            m.d.comb += ev["malformed"].eq(1)
        with m.Elif(ina.ack):
            if sml:
                m.d.comb += ev["ack_passed"].eq(1)
        with m.Elif(~header_ok):
            m.d.comb += ev["bad_header"].eq(1)
        with m.Else():
            m.d.comb += contribution.eq(1)
        ack = first & is_ina & exact & ina.ack
        # what leaves unchanged: a continuation beat of a passed packet (inside, rest not dropped), a first
        # beat not INA (passed) and an ACK; nothing for a stray beat, a dropped packet's rest or an INA
        # first beat not exactly one beat of `length` bytes (the register stage: on o the next cycle)
        took, judged, passes, was_last = Signal(), Signal(), Signal(), Signal()
        m.d.sync += [took.eq(take), judged.eq(~first | ~is_ina | ~exact | ina.ack), was_last.eq(last),
                     passes.eq(Mux(first, ~is_ina | (exact & ina.ack), inside & ~dropping))]
        with m.If(took & judged):
            m.d.comb += Assert(dut.o.valid == passes, "a beat leaves iff the spec passes it (its packet's framing)")
            with m.If(dut.o.valid):
                m.d.comb += Assert(dut.o.payload.last == was_last, "a passed beat leaves with its last flag")
        if sml:
            self._switchml(m, dut, ev, contribution & take, ina, k, bit)
        else:
            self._atp(m, dut, ev, ack, contribution, take, ina, k, bit, esa)
        counters_follow(m, {name: getattr(dut, name) for name in COUNTERS},
                        {name: take & ev[name] for name in COUNTERS}, saturating=False,
                        block=f"aggregator ({self.policy}) ")
        return m

    def _atp(self, m, dut, ev, ack, contribution, take, ina, k, bit, esa):
        P, W = self.slots, self.workers
        js = [Signal(32, name=f"spec_js{q}") for q in range(P)]
        bm = [Signal(W, name=f"spec_bm{q}") for q in range(P)]
        prio = [Signal(8, name=f"spec_prio{q}") for q in range(P)]
        for q in range(P):
            m.d.comb += [Assert(js[q] == dut.slot_jobseq[q], f"spec slot {q}: job+seq as the design's"),
                         Assert(bm[q] == dut.slot_bitmap[q], f"spec slot {q}: bitmap as the design's")]
            with m.If(js[q] != 0):
                m.d.comb += Assert(prio[q] == dut.slot_priority[q], f"spec slot {q}: a holder's priority")
        r_js, r_bm, r_prio = Array(js)[k], Array(bm)[k], Array(prio)[k]
        frees = (ina.index < P) & ~(ina.overflow & ~ina.resend) & (ina.jobseq != 0) & (r_js == ina.jobseq)
        with m.If(ack):
            m.d.comb += [ev["ack_freed"].eq(frees), ev["ack_passed"].eq(~frees)]
        held_by_other = (r_js != 0) & (r_js != ina.jobseq)
        match = ~held_by_other & ~((r_js == 0) & ina.resend)
        new = (bit & ~r_bm) != 0
        complete = popcount(r_bm | bit) == ina.fanin
        occupy, release, claim = Signal(), Signal(), Signal()
        with m.If(~contribution):
            pass
        with m.Elif(ina.overflow | (~match & ina.resend)):
            m.d.comb += ev["forwarded"].eq(1)
        with m.Elif(~match & ((ina.priority > r_prio) if esa else 0)):
            m.d.comb += [ev["preempted"].eq(1), claim.eq(1)]
        with m.Elif(~match):
            m.d.comb += ev["collision"].eq(1)
        with m.Elif(ina.resend):
            m.d.comb += [ev["flushed"].eq(1), release.eq(1)]
        with m.Elif(complete):
            m.d.comb += [ev["completed"].eq(new), ev["resent"].eq(~new)]
            m.d.comb += (release if esa else occupy).eq(1)
        with m.Else():
            m.d.comb += [ev["consumed"].eq(new), ev["duplicate"].eq(~new), occupy.eq(1)]
        for q in range(P):
            with m.If(take & (k == q)):
                with m.If(claim):
                    m.d.sync += [js[q].eq(ina.jobseq), bm[q].eq(bit), prio[q].eq(ina.priority)]
                with m.If(occupy):
                    m.d.sync += [js[q].eq(ina.jobseq), bm[q].eq(r_bm | bit)]
                    with m.If(r_js == 0):
                        m.d.sync += prio[q].eq(ina.priority)
                with m.If(release | (ack & frees)):
                    m.d.sync += [js[q].eq(0), bm[q].eq(0)]

    def _switchml(self, m, dut, ev, contribute, ina, k, bit):
        P, W = self.slots, self.workers
        bm = [[Signal(W, name=f"spec_bm{q}_{t}") for t in range(2)] for q in range(P)]
        cnt = [[Signal(range(W), name=f"spec_cnt{q}_{t}") for t in range(2)] for q in range(P)]
        for q in range(P):
            for t in range(2):
                m.d.comb += [Assert(bm[q][t] == dut.sml_bitmap[q][t], f"spec slot {q} set {t}: bitmap as the design's"),
                             Assert(cnt[q][t] == dut.sml_count[q][t],
                                    f"spec slot {q} set {t}: count-down as the design's")]
        s = ina.index[15]
        mine = Array(Array(row) for row in bm)[k][s]
        count = Array(Array(row) for row in cnt)[k][s]
        retrans = (mine & bit) != 0
        with m.If(contribute):
            with m.If(retrans):
                m.d.comb += [ev["resent"].eq(count == 0), ev["duplicate"].eq(count != 0)]
            with m.Else():
                m.d.comb += [ev["completed"].eq(count == 1), ev["consumed"].eq(count != 1)]
            for q in range(P):
                with m.If(k == q):
                    for t in range(2):
                        with m.If(s == t):
                            m.d.sync += bm[q][t].eq(bm[q][t] | bit)
                            with m.If(~retrans):
                                m.d.sync += cnt[q][t].eq(Mux(cnt[q][t] == 0, ina.fanin - 1, cnt[q][t] - 1))
                        with m.Else():
                            m.d.sync += bm[q][t].eq(bm[q][t] & ~bit)


@pytest.mark.parametrize("policy", ["atp", "esa"])
def test_aggregator_slot_rules(policy):
    """Saturation at the int32 bounds and the priority rule (proof), and their covers reached (ESA)."""
    prove(SlotRulesSpec(policy), f"aggregator_slot_rules_{policy}", depth=3, mode="prove")
    if policy == "esa":         # the add is ATP's code path under both policies: ESA's covers reach both rules
        prove(SlotRulesSpec(policy), f"aggregator_slot_rules_cover_{policy}", depth=4, mode="cover")


@pytest.mark.parametrize("policy", ["atp", "switchml", "esa"])
def test_aggregator_proof(policy):
    prove(AggregatorSpec(policy), f"aggregator_{policy}", depth=4, mode="prove")


@pytest.mark.parametrize("policy", ["atp", "switchml", "esa"])
def test_aggregator_cover(policy):
    """The properties are not vacuous: aggregation, eviction/flush, forwarding, ACK frees, answers."""
    prove(AggregatorSpec(policy, cover=True), f"aggregator_cover_{policy}", depth=8, mode="cover")


@pytest.mark.parametrize("policy", ["atp", "switchml", "esa"])
def test_aggregator_counters(policy):
    """Every counter increments exactly on the spec's own classification of the beat, wrapping; free reset."""
    prove(CounterSpec(policy), f"aggregator_counters_{policy}", depth=2, mode="prove")

"""Aggregator allocator (SPEC section 3): in-network gradient aggregation with ATP, SwitchML or ESA slots."""
from amaranth.hdl import Array, Assert, Cat, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.headers import INA, UDP, wire_bytes, wire_view
from hdl.packet import packet_signature
from hdl.parse import Parser
from models.aggregator import COUNTERS, POLICIES, AggregatorParams
from models.params import check
from models.wire import INA_HEADER_BYTES, INA_OFFSET, INT32_MAX, INT32_MIN, UDP_OFFSET

__all__ = ["Aggregator", "AggregatorParams", "COUNTERS", "POLICIES"]


def _popcount(value):
    return sum(value[i] for i in range(len(value)))


class Aggregator(wiring.Component):
    """Pool of ``slots`` aggregators summing ``values`` int32 per packet from ``workers`` workers.

    Bus: a packet byte stream of ``data_bytes`` per beat in (``i``) and out (``o``); an INA packet
    (Ethernet/IPv4/UDP to ``INA_PORT``/INA header/``values`` int32) fits one beat, so the block
    takes one packet per cycle: each input beat is decided in the cycle it arrives (one
    read-modify-write of slot ``index`` of every register array) and yields at most one output
    beat, registered (latency 1, ``i.ready = ~o.valid | o.ready``).

    Per packet, in this order (*chosen* rules are marked):

    - Not Ethernet/IPv4 (IHL 5)/UDP to ``INA_PORT``, or too short to tell: forwarded unchanged,
      every beat (``passed``). A continuation beat outside a packet is dropped (``malformed``).
    - INA packet not exactly ``INA_HEADER_BYTES + 4*values`` bytes in one beat: dropped with all its
      beats (``malformed``).
    - ``ack`` flag (a PS ACK): forwarded unchanged; under ATP it frees slot ``index`` if that slot
      holds its job+seq complete (``ack_freed``), otherwise no state change (``ack_passed``).
    - A contribution must have a one-hot bitmap within ``workers`` bits, ``2 <= fanin <= workers``
      (*chosen*: fan-in 1 would need two outputs on a preemption), ``index < slots`` and no flag
      but ``resend``; else dropped (``bad_header``).
    - SwitchML and ESA (*chosen* for ESA too) keep a shadow copy of each slot's last result; a
      contribution of that job+seq is answered with it (result+resend flags, ``resent``). ATP
      answers a contribution to its complete slot (awaiting the ACK) the same way from the slot.
    - Retransmission (*chosen*, ATP-style loss recovery): a ``resend`` contribution whose bit is
      already in its slot flushes the partial aggregate to the PS (evict flag) and frees the slot
      (``flushed``); any other ``resend`` contribution is forwarded to the PS with ``collision``
      set and never claims or preempts a slot, so the PS can deduplicate it by its bit.
    - Same job+seq, bit already set: dropped, never added twice (``duplicate``).
    - Same job+seq, new bit: OR bit, count+1, saturating int32 add (sticky ``overflow``)
      (``consumed``); at count == fan-in the aggregate is emitted (``completed``): ATP keeps the
      slot until the PS ACK, SwitchML and ESA free it and store the shadow copy.
    - Free slot: claimed, initialised from the packet (``consumed``).
    - Slot held by another job+seq: ESA with a strictly higher packet priority evicts the holder's
      partial aggregate (values, bitmap, overflow, its job+seq/fan-in/priority) to the PS in one
      packet and re-initialises the slot from the packet (``preempted``); otherwise the packet goes
      to the PS with ``collision`` set (``collision``).

    Parameters: ``policy`` (``atp``, ``switchml``, ``esa``), ``slots`` P, ``workers`` W (<= 32, the
    bitmap width used), ``values`` V, ``data_bytes`` (bus width), ``ps_port``/``mcast_port`` (egress
    ``meta.port`` of generated packets), ``counter_bits``. Counters (one ``Out`` port per name in
    ``COUNTERS``) count packets by outcome; they sum to the packets in (plus stray beats).
    Slot state: {valid, complete (ATP), job+seq, priority, fan-in, bitmap, count, overflow,
    values[V]}; shadow: {valid, job+seq, bitmap, overflow, values[V]}.

    Emitted packets (*chosen*) reuse the triggering packet's L2-L4 headers and ``index`` with UDP
    checksum 0 and the INA fields rewritten; ``meta.port`` is ``ps_port`` for collisions and
    evictions, and for results ``mcast_port`` under SwitchML (multicast to the workers) or
    ``ps_port`` under ATP and ESA (the PS multicasts). Forwarded packets keep their meta.
    """

    def __init__(self, params=None):
        p = self.params = check(params, AggregatorParams)
        policy, slots, workers, values, data_bytes, counter_bits = (
            p.policy, p.slots, p.workers, p.values, p.data_bytes, p.counter_bits)
        self.policy, self.slots, self.workers, self.values = policy, slots, workers, values
        self.data_bytes, self.ps_port, self.mcast_port = data_bytes, p.ps_port, p.mcast_port
        self.length = p.length
        signature = {"i": In(packet_signature(data_bytes)), "o": Out(packet_signature(data_bytes))}
        signature.update({name: Out(counter_bits) for name in COUNTERS})
        super().__init__(signature)
        # slot register arrays (exposed for the formal spec)
        P, W = slots, workers
        self.slot_valid = [Signal(name=f"valid{k}") for k in range(P)]
        self.slot_complete = [Signal(name=f"complete{k}") for k in range(P)]
        self.slot_jobseq = [Signal(32, name=f"jobseq{k}") for k in range(P)]
        self.slot_priority = [Signal(8, name=f"priority{k}") for k in range(P)]
        self.slot_fanin = [Signal(8, name=f"fanin{k}") for k in range(P)]
        self.slot_bitmap = [Signal(W, name=f"bitmap{k}") for k in range(P)]
        self.slot_count = [Signal(range(W + 1), name=f"count{k}") for k in range(P)]
        self.slot_overflow = [Signal(name=f"overflow{k}") for k in range(P)]
        self.slot_values = [[Signal(signed(32), name=f"value{k}_{v}") for v in range(values)]
                            for k in range(P)]
        self.shadow = policy != "atp"
        if self.shadow:
            self.shadow_valid = [Signal(name=f"sh_valid{k}") for k in range(P)]
            self.shadow_jobseq = [Signal(32, name=f"sh_jobseq{k}") for k in range(P)]
            self.shadow_bitmap = [Signal(W, name=f"sh_bitmap{k}") for k in range(P)]
            self.shadow_overflow = [Signal(name=f"sh_overflow{k}") for k in range(P)]
            self.shadow_values = [[Signal(signed(32), name=f"sh_value{k}_{v}") for v in range(values)]
                                  for k in range(P)]

    def elaborate(self, platform):
        m = Module()
        P, W, V = self.slots, self.workers, self.values
        beat, out = self.i.payload, self.o.payload
        transfer = Signal()
        m.d.comb += [self.i.ready.eq(~self.o.valid | self.o.ready),
                     transfer.eq(self.i.valid & self.i.ready)]
        m.submodules.parser = parser = Parser(beat, transfer, header_bytes=INA_HEADER_BYTES, framing="flag")
        ina = parser.ina
        pkt_values = [wire_bytes(beat.data, INA_HEADER_BYTES + 4 * v, 4).as_signed() for v in range(V)]
        out_udp = wire_view(UDP, out.data, UDP_OFFSET)
        out_ina = wire_view(INA, out.data, INA_OFFSET)
        out_values = [wire_bytes(out.data, INA_HEADER_BYTES + 4 * v, 4) for v in range(V)]

        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)

        # --- classification of the beat ---
        is_ina = Signal()
        exact = Signal()
        m.d.comb += [
            is_ina.eq(beat.keep[UDP_OFFSET + 3] & parser.is_ipv4 & parser.is_ihl5 & parser.is_udp & parser.is_ina),
            exact.eq(beat.last & beat.keep[self.length - 1]
                     & (~beat.keep[self.length] if self.length < self.data_bytes else 1)),
        ]
        in_packet = parser.inside   # a multi-beat packet is in progress
        drop_rest = Signal()        # ... and its remaining beats are dropped
        flags_ok = (ina.overflow == 0) & (ina.collision == 0) & (ina.evict == 0) & (ina.result == 0) \
            & (ina.resv == 0)
        header_ok = Signal()
        m.d.comb += header_ok.eq(
            (_popcount(ina.bitmap[:W]) == 1) & (ina.bitmap[W:] == 0 if W < 32 else 1)
            & (ina.fanin >= 2) & (ina.fanin <= W) & (ina.index < P) & flags_ok)

        # --- read slot `index` of every array (index truncated to the pool; index < slots is checked) ---
        sel = Signal(range(P))
        m.d.comb += sel.eq(ina.index)

        def read(array):
            return Array(array)[sel]
        r_valid, r_complete = read(self.slot_valid), read(self.slot_complete)
        r_jobseq, r_priority = read(self.slot_jobseq), read(self.slot_priority)
        r_fanin, r_bitmap = read(self.slot_fanin), read(self.slot_bitmap)
        r_count, r_overflow = read(self.slot_count), read(self.slot_overflow)
        r_values = [Array(self.slot_values[k][v] for k in range(P))[sel] for v in range(V)]
        bit = ina.bitmap[:W]
        own = Signal()
        bit_set = Signal()
        shadow_hit = Signal()
        m.d.comb += [own.eq(r_valid & (r_jobseq == ina.jobseq)), bit_set.eq((r_bitmap & bit) != 0)]
        if self.shadow:
            m.d.comb += shadow_hit.eq(read(self.shadow_valid) & (read(self.shadow_jobseq) == ina.jobseq))

        # saturating add of the packet's values to the slot's
        sums = [Signal(signed(32), name=f"sum{v}") for v in range(V)]
        add_overflow = Signal()
        overs = []
        for v in range(V):
            wide = Signal(signed(33), name=f"wide{v}")
            m.d.comb += [wide.eq(r_values[v] + pkt_values[v]),
                         sums[v].eq(Mux(wide > INT32_MAX, INT32_MAX,
                                        Mux(wide < INT32_MIN, INT32_MIN, wide[:32])))]
            overs.append((wide > INT32_MAX) | (wide < INT32_MIN))
        m.d.comb += add_overflow.eq(r_overflow | Cat(*overs).any())
        new_count = Signal.like(self.slot_count[0])
        m.d.comb += new_count.eq(r_count + 1)

        # --- decision: exactly one event per packet ---
        ev = {name: Signal(name=f"ev_{name}") for name in COUNTERS}
        forward = Signal()      # forward the beat unchanged
        from_shadow = Signal()  # resent answered from the shadow copy
        add = Signal()          # add into the owned slot
        claim = Signal()        # (re)initialise the slot from the packet
        with m.If(~parser.first):
            m.d.comb += forward.eq(in_packet & ~drop_rest)
            m.d.comb += ev["malformed"].eq(~in_packet)
        with m.Elif(~is_ina):
            m.d.comb += [forward.eq(1), ev["passed"].eq(1)]
        with m.Elif(~exact):
            m.d.comb += ev["malformed"].eq(1)
        with m.Elif(ina.ack):
            m.d.comb += forward.eq(1)
            if self.policy == "atp":
                with m.If((ina.index < P) & own & r_complete):
                    m.d.comb += ev["ack_freed"].eq(1)
                with m.Else():
                    m.d.comb += ev["ack_passed"].eq(1)
            else:
                m.d.comb += ev["ack_passed"].eq(1)
        with m.Elif(~header_ok):
            m.d.comb += ev["bad_header"].eq(1)
        with m.Elif(shadow_hit):
            m.d.comb += [ev["resent"].eq(1), from_shadow.eq(1)]
        with m.Elif(own & r_complete):
            m.d.comb += ev["resent"].eq(1)
        with m.Elif(own & ina.resend & bit_set):
            m.d.comb += ev["flushed"].eq(1)
        with m.Elif(own & bit_set):
            m.d.comb += ev["duplicate"].eq(1)
        with m.Elif(own & ~ina.resend):
            m.d.comb += add.eq(1)
            with m.If(new_count == r_fanin):
                m.d.comb += ev["completed"].eq(1)
            with m.Else():
                m.d.comb += ev["consumed"].eq(1)
        with m.Elif(ina.resend | (r_valid & ~((self.policy == "esa") & (ina.priority > r_priority)))):
            m.d.comb += ev["collision"].eq(1)
        with m.Else():
            m.d.comb += claim.eq(1)
            with m.If(r_valid):
                m.d.comb += ev["preempted"].eq(1)
            with m.Else():
                m.d.comb += ev["consumed"].eq(1)

        # --- beat framing state (the parser tracks in_packet) ---
        with m.If(transfer & parser.first):
            m.d.sync += drop_rest.eq(is_ina)

        # --- counters ---
        for name in COUNTERS:
            with m.If(transfer & ev[name]):
                m.d.sync += getattr(self, name).eq(getattr(self, name) + 1)

        # --- slot state updates (slot `index` only) ---
        result_port = self.mcast_port if self.policy == "switchml" else self.ps_port
        for k in range(P):
            with m.If(transfer & (ina.index == k)):
                with m.If(claim):
                    m.d.sync += [
                        self.slot_valid[k].eq(1), self.slot_complete[k].eq(0),
                        self.slot_jobseq[k].eq(ina.jobseq), self.slot_priority[k].eq(ina.priority),
                        self.slot_fanin[k].eq(ina.fanin), self.slot_bitmap[k].eq(bit),
                        self.slot_count[k].eq(1), self.slot_overflow[k].eq(0),
                    ]
                    m.d.sync += [self.slot_values[k][v].eq(pkt_values[v]) for v in range(V)]
                with m.If(add):
                    m.d.sync += [self.slot_bitmap[k].eq(r_bitmap | bit), self.slot_count[k].eq(new_count),
                                 self.slot_overflow[k].eq(add_overflow)]
                    m.d.sync += [self.slot_values[k][v].eq(sums[v]) for v in range(V)]
                with m.If(ev["completed"]):
                    if self.policy == "atp":
                        m.d.sync += self.slot_complete[k].eq(1)
                    else:
                        m.d.sync += [self.slot_valid[k].eq(0), self.shadow_valid[k].eq(1),
                                     self.shadow_jobseq[k].eq(ina.jobseq),
                                     self.shadow_bitmap[k].eq(r_bitmap | bit),
                                     self.shadow_overflow[k].eq(add_overflow)]
                        m.d.sync += [self.shadow_values[k][v].eq(sums[v]) for v in range(V)]
                with m.If(ev["flushed"] | ev["ack_freed"]):
                    m.d.sync += [self.slot_valid[k].eq(0), self.slot_complete[k].eq(0)]

        # --- output beat ---
        emit_slot = ev["flushed"] | ev["preempted"] | (ev["resent"] & ~from_shadow)
        with m.If(transfer):
            m.d.sync += out.eq(beat)
            with m.If(forward):
                m.d.sync += self.o.valid.eq(1)
            with m.If(ev["collision"] | ev["completed"] | ev["resent"] | ev["flushed"] | ev["preempted"]):
                m.d.sync += [self.o.valid.eq(1), out_udp.chksum.eq(0),
                             out_ina.overflow.eq(0), out_ina.resend.eq(0), out_ina.collision.eq(0),
                             out_ina.evict.eq(0), out_ina.result.eq(0)]
            with m.If(ev["collision"]):
                m.d.sync += [out_ina.collision.eq(1), out_ina.resend.eq(ina.resend),
                             out.meta.port.eq(self.ps_port)]
            with m.If(emit_slot):
                m.d.sync += [out_ina.bitmap.eq(r_bitmap), out_ina.fanin.eq(r_fanin),
                             out_ina.jobseq.eq(r_jobseq), out_ina.priority.eq(r_priority),
                             out_ina.overflow.eq(r_overflow)]
                m.d.sync += [out_values[v].eq(r_values[v]) for v in range(V)]
            with m.If(ev["flushed"] | ev["preempted"]):
                m.d.sync += [out_ina.evict.eq(1), out.meta.port.eq(self.ps_port)]
            with m.If(ev["resent"]):
                m.d.sync += [out_ina.result.eq(1), out_ina.resend.eq(1), out.meta.port.eq(result_port)]
            if self.shadow:
                with m.If(from_shadow):
                    m.d.sync += [out_ina.bitmap.eq(read(self.shadow_bitmap)),
                                 out_ina.overflow.eq(read(self.shadow_overflow))]
                    m.d.sync += [out_values[v].eq(Array(self.shadow_values[k][v] for k in range(P))[sel])
                                 for v in range(V)]
            with m.If(ev["completed"]):
                m.d.sync += [out_ina.bitmap.eq(r_bitmap | bit), out_ina.fanin.eq(r_fanin),
                             out_ina.priority.eq(r_priority), out_ina.result.eq(1),
                             out_ina.overflow.eq(add_overflow), out.meta.port.eq(result_port)]
                m.d.sync += [out_values[v].eq(sums[v]) for v in range(V)]

        if platform == "formal":
            self._invariants(m)
        return m

    def _invariants(self, m):
        """Slot invariants (asserted; they also make the k-induction proofs of the spec go through)."""
        for k in range(self.slots):
            valid, count, fanin = self.slot_valid[k], self.slot_count[k], self.slot_fanin[k]
            bitmap, complete = self.slot_bitmap[k], self.slot_complete[k]
            with m.If(valid):
                m.d.comb += [
                    Assert(count == _popcount(bitmap), f"slot {k}: count equals the bitmap's popcount"),
                    Assert((fanin >= 2) & (fanin <= self.workers), f"slot {k}: fan-in within 2..workers"),
                    Assert(count >= 1, f"slot {k}: a held slot has a contribution"),
                ]
                if self.policy == "atp":
                    m.d.comb += Assert(complete == (count == fanin), f"slot {k}: complete iff count == fan-in")
                else:
                    m.d.comb += Assert(count < fanin, f"slot {k}: a held slot is incomplete")
            with m.Else():
                m.d.comb += Assert(~complete, f"slot {k}: a free slot is not complete")

"""Aggregator allocator (SPEC section 3): in-network gradient aggregation with ATP, SwitchML or ESA slots."""
from amaranth.hdl import Array, Assert, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl.counters import count_event
from hdl.headers import INA, UDP, wire_bytes, wire_view
from hdl.invariants import asserted
from hdl.packet import packet_signature
from hdl.parse import Parser
from models import wire
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
    read-modify-write of entry ``index`` of every register array) and yields at most one output
    beat, registered (latency 1, ``i.ready = ~o.valid | o.ready``).

    Every policy, first:

    - Not Ethernet/IPv4 (IHL 5)/UDP to ``INA_PORT``, or too short to tell: forwarded unchanged,
      every beat (``passed``). A continuation beat outside a packet is dropped (``malformed``).
    - INA packet not exactly ``INA_HEADER_BYTES + 4*values`` bytes in one beat: dropped with all its
      beats (``malformed``).
    - ``ack`` (a PS ACK): forwarded unchanged (the PS's multicast). ATP/ESA free slot ``index`` when
      it holds the ACK's job+seq, unless the ACK has overflow=1 and resend=0 (``ack_freed``,
      p4ml.p4:37-58); otherwise, and always under SwitchML, ``ack_passed``.
    - A contribution needs a one-hot bitmap within ``workers`` bits, ``2 <= fanin <= workers``, a
      slot in range, and only the flags the policy reads (ATP/ESA: resend, overflow, ecn; SwitchML:
      resend, which it ignores); ATP/ESA also job+seq != 0 (ATP's empty marker); else
      ``bad_header``.

    ATP (in-ATP/ATP ``p4src/p4ml.p4``; file/line of each rule in PROGRESS.md):

    - ``overflow=1``: to the PS unchanged (``forwarded``).
    - Claim (``check_app_id_and_seq``): the slot matches if it holds the packet's job+seq or is
      empty (job+seq 0); a resend matches only on equality (``check_app_id_and_seq_resend``).
    - No match: a resend goes to the PS unchanged (``forwarded``); any other packet gets
      ``collision`` and goes to the PS (``collision``).
    - Match: the bit is new if not in the slot's bitmap; a new bit is ORed in, the counter +1, the
      values written (empty bitmap) or added: a value register updates only while its stored value
      is strictly inside +-2147483647 and the add saturates (``noequ0_write_data_entry``), so it
      sticks at INT32_MAX/MIN (the PS reads those as switch overflow). The slot's ECN register ORs
      the packet's (INA ``ecn`` or IP CE); the packet's ``ecn`` becomes its own OR the register's
      old value (``do_check_ecn``).
    - Resend with a match: after adding a new bit, the aggregate (partial or complete) goes to the
      PS and the slot's job+seq, bitmap and counter are cleared (``flushed``; the ECN register is
      not, as in ``p4ml.p4``).
    - Counter == the packet's fan-in: the aggregate goes to the PS, the slot stays held
      (``completed`` for a new bit, ``resent`` for a duplicate); otherwise a new bit is
      ``consumed`` and a duplicate dropped (``duplicate``).

    ESA (*chosen* where the paper is silent): ATP's rules, plus: a non-resend packet without a match
    whose priority is strictly higher than the holder's evicts the holder's partial aggregate
    (its job+seq, fan-in, priority, bitmap, values, ECN; flags result+evict) to the PS and
    re-initialises the slot from the packet (``preempted``); a completed aggregate frees the slot
    at once (job+seq, bitmap, counter and ECN cleared).

    SwitchML (p4lang/p4app-switchML ``dev_root/p4``): ``index`` is the pool index, bit 15 the set
    and bits 14..0 the slot. The set's bitmap gets the bit, the other set loses it; a bit already
    in the set's bitmap marks a retransmission. A new packet reads the set's count-down (0: set to
    fan-in - 1, else - 1) and writes (set bitmap empty) or adds (wrapping 32 bits) its values. Read
    1 (last): the result is multicast to ``mcast_port`` (``completed``); other new packets are
    dropped (``consumed``). A retransmission changes neither count nor values; read 0 (the set is
    complete): the result goes back to the worker, on the packet's own ``meta.port`` (``resent``);
    otherwise it is dropped (``duplicate``).

    Emitted packets are the triggering packet with UDP checksum 0 and the INA fields rewritten;
    aggregates carry ``result`` (and ``evict`` when they free the slot on a resend or preemption);
    ``meta.port`` is ``ps_port`` except for SwitchML's results. Forwarded packets keep their meta.

    Hardware-forced simplifications (each with its reason):

    - One aggregator index and ``values`` int32 per packet; ATP carries two indexes (2 x 31 values)
      and resubmits the packet for the second: one beat, one slot per cycle keeps line rate.
    - SwitchML's worker bit and worker count come from the INA header (one-hot ``bitmap``, ``fanin``)
      instead of the ``receive_udp`` table keyed on the source address: no table in this block.
    - SwitchML's ``retransmit`` sends to the ingress port; ``Meta`` carries one port, so the answer
      keeps the packet's ``meta.port`` (the pipeline puts the worker's port there).
    - The published programs trust the pool index; so does this block (no per-job range check).

    Parameters: ``policy`` (``atp``, ``switchml``, ``esa``), ``slots`` P, ``workers`` W (<= 32, the
    bitmap width used), ``values`` V, ``data_bytes`` (bus width), ``ps_port``/``mcast_port`` (egress
    ``meta.port`` of generated packets), ``counter_bits``. Counters (one ``Out`` port per name in
    ``COUNTERS``) count packets by outcome; they sum to the packets in (plus stray beats).
    ATP/ESA state per slot: {job+seq, bitmap, count, ecn, priority, fan-in, values[V]}; SwitchML per
    slot: {bitmap[2]} and per (slot, set): {count, values[V]}.
    """

    def __init__(self, params=None):
        p = self.params = check(params, AggregatorParams)
        self.policy, self.slots, self.workers, self.values = p.policy, p.slots, p.workers, p.values
        self.data_bytes, self.ps_port, self.mcast_port = p.data_bytes, p.ps_port, p.mcast_port
        self.length = p.length
        signature = {"i": In(packet_signature(p.data_bytes)), "o": Out(packet_signature(p.data_bytes))}
        signature.update({name: Out(p.counter_bits) for name in COUNTERS})
        super().__init__(signature)
        # register arrays, one entry per slot (exposed for the formal spec)
        P, W, V = p.slots, p.workers, p.values
        if p.policy == "switchml":
            self.sml_bitmap = [[Signal(W, name=f"bitmap{k}_{s}") for s in range(2)] for k in range(P)]
            self.sml_count = [[Signal(range(W), name=f"count{k}_{s}") for s in range(2)] for k in range(P)]
            self.sml_values = [[[Signal(signed(32), name=f"value{k}_{s}_{v}") for v in range(V)] for s in range(2)]
                               for k in range(P)]
        else:
            self.slot_jobseq = [Signal(32, name=f"jobseq{k}") for k in range(P)]
            self.slot_bitmap = [Signal(W, name=f"bitmap{k}") for k in range(P)]
            self.slot_count = [Signal(range(W + 1), name=f"count{k}") for k in range(P)]
            self.slot_ecn = [Signal(name=f"ecn{k}") for k in range(P)]
            self.slot_priority = [Signal(8, name=f"priority{k}") for k in range(P)]
            self.slot_fanin = [Signal(8, name=f"fanin{k}") for k in range(P)]
            self.slot_values = [[Signal(signed(32), name=f"value{k}_{v}") for v in range(V)] for k in range(P)]
        self.in_packet = Signal(name="in_packet")      # framing: a packet's beat was accepted, no last yet
        self.drop_rest = Signal(name="drop_rest")      # ... and its remaining beats are dropped

    def elaborate(self, platform):
        m = Module()
        P, W, V = self.slots, self.workers, self.values
        sml, esa = self.policy == "switchml", self.policy == "esa"
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
        is_ina, exact = Signal(), Signal()
        m.d.comb += [
            is_ina.eq(beat.keep[UDP_OFFSET + 3] & parser.is_ipv4 & parser.is_ihl5 & parser.is_udp & parser.is_ina),
            exact.eq(beat.last & beat.keep[self.length - 1]
                     & (~beat.keep[self.length] if self.length < self.data_bytes else 1)),
        ]
        in_packet, drop_rest = self.in_packet, self.drop_rest
        m.d.comb += in_packet.eq(parser.inside)
        bit = ina.bitmap[:W]
        slot_index = ina.index[:15] if sml else ina.index
        index_ok = slot_index < P
        allowed = ~ina.collision & ~ina.ack & ~ina.evict & ~ina.result & ~ina.resv
        if sml:
            allowed &= ~ina.overflow & ~ina.ecn
        header_ok = Signal()
        m.d.comb += header_ok.eq(
            (_popcount(bit) == 1) & (ina.bitmap[W:] == 0 if W < 32 else 1)
            & (ina.fanin >= 2) & (ina.fanin <= W) & index_ok & allowed & (1 if sml else ina.jobseq != 0))

        # --- read entry `index` of every array (index truncated to the pool; index_ok is checked) ---
        sel = Signal(range(P))
        m.d.comb += sel.eq(slot_index)

        def read(array):
            return Array(array)[sel]

        ev = {name: Signal(name=f"ev_{name}") for name in COUNTERS}
        forward = Signal()          # forward the beat unchanged, meta kept
        emit = Signal()             # emit the beat with checksum 0 and the o_* INA fields below
        o_flags = {f: Signal(name=f"o_{f}") for f in ("overflow", "resend", "collision", "evict", "result", "ecn")}
        o_bitmap, o_jobseq = Signal(32), Signal(32)
        o_fanin, o_priority, o_port = Signal(8), Signal(8), Signal(8)
        o_values = [Signal(32, name=f"o_value{v}") for v in range(V)]
        m.d.comb += [o_bitmap.eq(ina.bitmap), o_jobseq.eq(ina.jobseq), o_fanin.eq(ina.fanin),
                     o_priority.eq(ina.priority), o_port.eq(self.ps_port)]
        m.d.comb += [o_values[v].eq(pkt_values[v]) for v in range(V)]
        m.d.comb += [o_flags[f].eq(getattr(ina, f)) for f in o_flags]

        with m.If(~parser.first):
            m.d.comb += forward.eq(in_packet & ~drop_rest)
            m.d.comb += ev["malformed"].eq(~in_packet)
        with m.Elif(~is_ina):
            m.d.comb += [forward.eq(1), ev["passed"].eq(1)]
        with m.Elif(~exact):
            m.d.comb += ev["malformed"].eq(1)
        with m.Elif(ina.ack):
            m.d.comb += forward.eq(1)
            if sml:
                m.d.comb += ev["ack_passed"].eq(1)
            else:
                keep = ina.overflow & ~ina.resend
                frees = index_ok & ~keep & (ina.jobseq != 0) & (read(self.slot_jobseq) == ina.jobseq)
                m.d.comb += [ev["ack_freed"].eq(frees), ev["ack_passed"].eq(~frees)]
        contribution = Signal()     # a valid contribution: the policy decides (state updates outside the chain)
        with m.Elif(~header_ok):
            m.d.comb += ev["bad_header"].eq(1)
        with m.Else():
            m.d.comb += contribution.eq(1)
        if sml:
            self._switchml(m, read, ina, bit, pkt_values, transfer, contribution, ev, emit, o_flags, o_bitmap,
                           o_values, o_port, beat)
        else:
            self._atp(m, read, ina, bit, pkt_values, parser, transfer, contribution, ev, emit, o_flags, o_bitmap,
                      o_values, o_jobseq, o_fanin, o_priority, esa)

        # --- beat framing state (the parser tracks in_packet) ---
        with m.If(transfer & parser.first):
            m.d.sync += drop_rest.eq(is_ina)

        # --- counters ---
        for name in COUNTERS:
            count_event(m, getattr(self, name), transfer & ev[name], overflow="wrap")

        # --- output beat ---
        with m.If(transfer):
            m.d.sync += out.eq(beat)
            with m.If(forward):
                m.d.sync += self.o.valid.eq(1)
            with m.If(emit):
                m.d.sync += [self.o.valid.eq(1), out_udp.chksum.eq(0), out.meta.port.eq(o_port),
                             out_ina.bitmap.eq(o_bitmap), out_ina.jobseq.eq(o_jobseq), out_ina.fanin.eq(o_fanin),
                             out_ina.priority.eq(o_priority), out_ina.ack.eq(0), out_ina.resv.eq(0)]
                m.d.sync += [getattr(out_ina, f).eq(o_flags[f]) for f in o_flags]
                m.d.sync += [out_values[v].eq(o_values[v]) for v in range(V)]

        if asserted(platform):
            self._invariants(m)
        return m

    def _atp(self, m, read, ina, bit, pkt_values, parser, transfer, contribution, ev, emit, o_flags, o_bitmap, o_values,
             o_jobseq, o_fanin, o_priority, esa):
        """ATP's ingress (p4ml.p4:60-226); ESA adds preemption and frees on completion."""
        P, V = self.slots, self.values
        r_jobseq, r_bitmap, r_count = read(self.slot_jobseq), read(self.slot_bitmap), read(self.slot_count)
        r_ecn, r_priority, r_fanin = read(self.slot_ecn), read(self.slot_priority), read(self.slot_fanin)
        r_values = [read([self.slot_values[k][v] for k in range(P)]) for v in range(V)]
        match, new, complete = Signal(), Signal(), Signal()
        n_bitmap, n_count = Signal.like(r_bitmap), Signal.like(r_count)
        pkt_ecn = Signal()
        acc = [Signal(signed(32), name=f"acc{v}") for v in range(V)]
        m.d.comb += [
            match.eq((r_jobseq == ina.jobseq) | ((r_jobseq == 0) & ~ina.resend)),
            new.eq((bit & ~r_bitmap) != 0),
            n_bitmap.eq(r_bitmap | bit),
            n_count.eq(r_count + new),
            complete.eq(n_count == ina.fanin),
            pkt_ecn.eq(ina.ecn | (parser.ip.tos[:2] == wire.ECN_CE)),
        ]
        for v in range(V):
            wide = Signal(signed(34), name=f"wide{v}")
            inside = (r_values[v] > -INT32_MAX) & (r_values[v] < INT32_MAX)
            clamp = Mux(wide > INT32_MAX, INT32_MAX, Mux(wide < INT32_MIN, INT32_MIN, wide[:32]))
            m.d.comb += [wide.eq(r_values[v] + pkt_values[v]),
                         acc[v].eq(Mux(~new, r_values[v], Mux(r_bitmap == 0, pkt_values[v],
                                                              Mux(inside, clamp, r_values[v]))))]
        aggregate = [o_bitmap.eq(n_bitmap), o_flags["ecn"].eq(ina.ecn | r_ecn), o_flags["result"].eq(1)]
        aggregate += [o_values[v].eq(acc[v]) for v in range(V)]
        update, free, claim = Signal(name="update"), Signal(name="free"), Signal(name="claim")
        with m.If(~contribution):
            pass
        with m.Elif(ina.overflow):
            m.d.comb += [ev["forwarded"].eq(1), emit.eq(1)]
        with m.Elif(~match & ina.resend):
            m.d.comb += [ev["forwarded"].eq(1), emit.eq(1)]
        with m.Elif(~match & ((ina.priority > r_priority) if esa else 0)):
            m.d.comb += [ev["preempted"].eq(1), emit.eq(1), claim.eq(1),
                         o_bitmap.eq(r_bitmap), o_jobseq.eq(r_jobseq), o_fanin.eq(r_fanin),
                         o_priority.eq(r_priority), o_flags["result"].eq(1), o_flags["evict"].eq(1),
                         o_flags["ecn"].eq(r_ecn), o_flags["resend"].eq(0), o_flags["overflow"].eq(0)]
            m.d.comb += [o_values[v].eq(r_values[v]) for v in range(V)]
        with m.Elif(~match):
            m.d.comb += [ev["collision"].eq(1), emit.eq(1), o_flags["collision"].eq(1)]
        with m.Elif(ina.resend):
            m.d.comb += [ev["flushed"].eq(1), emit.eq(1), update.eq(1), free.eq(1), o_flags["evict"].eq(1)]
            m.d.comb += aggregate
        with m.Elif(complete):
            m.d.comb += [ev["completed"].eq(new), ev["resent"].eq(~new), emit.eq(1), update.eq(1)]
            m.d.comb += aggregate
            if esa:
                m.d.comb += free.eq(1)
        with m.Else():
            m.d.comb += [ev["consumed"].eq(new), ev["duplicate"].eq(~new), update.eq(1)]

        for k in range(P):
            with m.If(transfer & (ina.index == k)):
                with m.If(claim):
                    m.d.sync += [self.slot_jobseq[k].eq(ina.jobseq), self.slot_bitmap[k].eq(bit),
                                 self.slot_count[k].eq(1), self.slot_ecn[k].eq(pkt_ecn),
                                 self.slot_priority[k].eq(ina.priority), self.slot_fanin[k].eq(ina.fanin)]
                    m.d.sync += [self.slot_values[k][v].eq(pkt_values[v]) for v in range(V)]
                with m.If(update):
                    m.d.sync += [self.slot_jobseq[k].eq(ina.jobseq), self.slot_bitmap[k].eq(n_bitmap),
                                 self.slot_count[k].eq(n_count), self.slot_ecn[k].eq(r_ecn | pkt_ecn)]
                    m.d.sync += [self.slot_values[k][v].eq(acc[v]) for v in range(V)]
                    with m.If(r_jobseq == 0):
                        m.d.sync += [self.slot_priority[k].eq(ina.priority), self.slot_fanin[k].eq(ina.fanin)]
                with m.If(free):
                    m.d.sync += [self.slot_jobseq[k].eq(0), self.slot_bitmap[k].eq(0), self.slot_count[k].eq(0)]
                    if esa:
                        with m.If(~ina.resend):
                            m.d.sync += self.slot_ecn[k].eq(0)
                with m.If(ev["ack_freed"]):
                    m.d.sync += [self.slot_jobseq[k].eq(0), self.slot_bitmap[k].eq(0), self.slot_count[k].eq(0),
                                 self.slot_ecn[k].eq(0)]

    def _switchml(self, m, read, ina, bit, pkt_values, transfer, contribution, ev, emit, o_flags, o_bitmap,
                  o_values, o_port, beat):
        """SwitchML (bitmap_checker.p4, workers_counter.p4, processor.p4, next_step_selector.py)."""
        P, V = self.slots, self.values
        s = ina.index[15]
        r_bitmap = [read([self.sml_bitmap[k][t] for k in range(P)]) for t in range(2)]
        r_count = [read([self.sml_count[k][t] for k in range(P)]) for t in range(2)]
        r_values = [[read([self.sml_values[k][t][v] for k in range(P)]) for v in range(V)] for t in range(2)]
        mine, count = Mux(s, r_bitmap[1], r_bitmap[0]), Mux(s, r_count[1], r_count[0])
        values = [Mux(s, r_values[1][v], r_values[0][v]) for v in range(V)]
        retrans, n_count = Signal(), Signal.like(r_count[0])
        acc = [Signal(signed(32), name=f"acc{v}") for v in range(V)]
        m.d.comb += [retrans.eq((mine & bit) != 0),
                     n_count.eq(Mux(count == 0, ina.fanin - 1, count - 1))]
        m.d.comb += [acc[v].eq(Mux(retrans, values[v], Mux(mine == 0, pkt_values[v], (values[v] + pkt_values[v])[:32])))
                     for v in range(V)]
        m.d.comb += [o_bitmap.eq(mine | bit), o_flags["result"].eq(1), o_flags["resend"].eq(0)]
        m.d.comb += [o_values[v].eq(acc[v]) for v in range(V)]
        with m.If(~contribution):
            pass
        with m.Elif(retrans):
            with m.If(count == 0):
                m.d.comb += [ev["resent"].eq(1), emit.eq(1), o_port.eq(beat.meta.port)]
            with m.Else():
                m.d.comb += ev["duplicate"].eq(1)
        with m.Elif(count == 1):
            m.d.comb += [ev["completed"].eq(1), emit.eq(1), o_port.eq(self.mcast_port)]
        with m.Else():
            m.d.comb += ev["consumed"].eq(1)
        for k in range(P):
            with m.If(transfer & (ina.index[:15] == k) & (ev["resent"] | ev["duplicate"] | ev["completed"]
                                                         | ev["consumed"])):
                for t in range(2):
                    with m.If(s == t):
                        m.d.sync += self.sml_bitmap[k][t].eq(mine | bit)
                        with m.If(~retrans):
                            m.d.sync += self.sml_count[k][t].eq(n_count)
                            m.d.sync += [self.sml_values[k][t][v].eq(acc[v]) for v in range(V)]
                    with m.Else():
                        m.d.sync += self.sml_bitmap[k][t].eq(r_bitmap[t] & ~bit)

    def _invariants(self, m):
        """Slot invariants (asserted; they also make the k-induction proofs of the spec go through)."""
        if self.policy == "switchml":
            return
        for k in range(self.slots):
            jobseq, count, bitmap = self.slot_jobseq[k], self.slot_count[k], self.slot_bitmap[k]
            with m.If(jobseq != 0):
                m.d.comb += [
                    Assert(count == _popcount(bitmap), f"slot {k}: count equals the bitmap's popcount"),
                    Assert(count >= 1, f"slot {k}: a held slot has a contribution"),
                ]
            with m.Else():
                m.d.comb += Assert((bitmap == 0) & (count == 0), f"slot {k}: a free slot has no bitmap or count")

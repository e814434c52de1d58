"""MRC SRv6 uSID forwarder with ECN and trimming (SPEC section 5): one packet descriptor per cycle."""
from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.counters import count_event
from hdl.headers import BTH, ETHERNET, IPV6, UDP, wire_view
from hdl.packet import output_register
from models import wire
from models.params import check
from models.usid_forwarder import COUNTERS, HDR_BYTES, LFSR_TAPS, VERDICTS, UsidForwarderParams

__all__ = ["UsidForwarder", "UsidForwarderParams", "COUNTERS", "VERDICTS", "HDR_BYTES", "descriptor_layout",
           "result_layout", "route_layout"]


def descriptor_layout(params):
    """Input descriptor: the packet's first ``HDR_BYTES`` bytes (byte 0 in the lowest lane, zero past
    the packet), its length, ingress port and the egress queues' depths sampled for it."""
    depths = data.ArrayLayout(params.depth_bits, params.ports)
    return data.StructLayout({"hdr": 8 * HDR_BYTES, "length": 16, "port": 8, "data_depth": depths,
                              "prio_depth": depths})


def result_layout():
    """Output: the verdict (index into ``VERDICTS``), egress port, queue (``prio``), ``decap``,
    ``marked``, the output packet's length and its rewritten leading bytes."""
    return data.StructLayout({"verdict": range(len(VERDICTS)), "port": 8, "prio": 1, "decap": 1, "marked": 1,
                              "length": 16, "hdr": 8 * HDR_BYTES})


def route_layout(params):
    """Table write: entry ``index`` <- ``{valid, key: {locator, uSID}, port, decap}``."""
    return data.StructLayout({"index": range(params.table_entries), "valid": 1, "key": 48, "port": 8, "decap": 1})


class UsidForwarder(wiring.Component):
    """SRv6 uN forwarding of IPv6-in-IPv6 packets with a RED-like ECN ramp and MRC trimming.

    The rules, their order and the counters are those of ``models/usid_forwarder.py`` (its docstring
    is the contract); this block implements them on a per-packet *descriptor* (SPEC common
    conventions), as a switch's match-action pipeline does on its header vector:

    - ``i`` takes one descriptor per cycle (``descriptor_layout``): the packet's leading ``HDR_BYTES``
      = 114 bytes (Ethernet, both IPv6 headers, UDP, BTH), its length, ingress port and the depths
      of every egress port's data and priority queue. The payload stays in the packet buffer.
    - ``o`` gives one result per descriptor, in order, registered (latency 1, ``i.ready = ~o.valid |
      o.ready``): the verdict, and for a packet that leaves, its egress port and queue, the new
      length and the rewritten header bytes. *Chosen*: the deparser sends ``hdr[:min(length_in,
      HDR_BYTES) - 40 * decap]`` followed by the stored bytes from ``HDR_BYTES`` on, cut to
      ``length`` (decapsulation drops the 40 outer IPv6 bytes; trimming only shortens).
    - ``cfg`` writes one table entry per cycle (always ready; ``route_layout``); the control plane
      keeps keys unique (*chosen*: with duplicates the lowest matching index wins). Reset clears
      the table and reseeds the LFSR.

    Datapath, all in the cycle of the descriptor: the parse checks (EtherType, versions, payload
    lengths against ``length``, next headers, hop limit), the uSID match on the DA's first 48 bits,
    the shift, one exact-match search of every table entry in parallel on the (shifted or unshifted)
    48-bit key, the ECN ramp ``r + kmin < d`` (``r`` the LFSR's top ``ecn_span_log2`` bits; the LFSR
    is 16-bit Galois with toggle mask ``LFSR_TAPS`` and steps once per descriptor), the trim and the
    header rewrite. Counters: one ``Out`` port per name in ``COUNTERS``, saturating.
    """

    def __init__(self, params=None):
        p = self.params = check(params, UsidForwarderParams)
        signature = {"i": In(stream.Signature(descriptor_layout(p))),
                     "o": Out(stream.Signature(result_layout())),
                     "cfg": In(stream.Signature(route_layout(p)))}
        signature.update({name: Out(p.counter_bits) for name in COUNTERS})
        super().__init__(signature)
        n = p.table_entries
        self.route_valid = [Signal(name=f"route_valid{k}") for k in range(n)]
        self.route_key = [Signal(48, name=f"route_key{k}") for k in range(n)]
        self.route_port = [Signal(8, name=f"route_port{k}") for k in range(n)]
        self.route_decap = [Signal(name=f"route_decap{k}") for k in range(n)]
        self.lfsr = Signal(16, init=p.lfsr_seed)

    def elaborate(self, platform):
        m = Module()
        p = self.params
        d, res = self.i.payload, self.o.payload
        transfer = output_register(m, self.i, self.o)
        m.d.comb += self.cfg.ready.eq(1)

        # --- table writes ---
        c = self.cfg.payload
        for k in range(p.table_entries):
            with m.If(self.cfg.valid & (c.index == k)):
                m.d.sync += [self.route_valid[k].eq(c.valid), self.route_key[k].eq(c.key),
                             self.route_port[k].eq(c.port), self.route_decap[k].eq(c.decap)]

        # --- parse ---
        o_at, i_at, n = wire.OUTER_OFFSET, wire.INNER_OFFSET, d.length
        eth = wire_view(ETHERNET, d.hdr, wire.ETH_OFFSET)
        outer, inner = wire_view(IPV6, d.hdr, o_at), wire_view(IPV6, d.hdr, i_at)
        udp, bth = wire_view(UDP, d.hdr, wire.MRC_UDP_OFFSET), wire_view(BTH, d.hdr, wire.MRC_BTH_OFFSET)
        bad_outer, bad_nh, bad_inner, expired, mrc = (Signal(name=x) for x in
                                                      ("bad_outer", "bad_nh", "bad_inner", "expired", "mrc"))
        m.d.comb += [
            bad_outer.eq((n < i_at) | (eth.type != wire.ETHERTYPE_IPV6) | (outer.version != wire.IPV6_VERSION)
                         | (d.port >= p.ports) | (outer.plen + i_at != n)),
            bad_nh.eq(outer.nh != wire.NH_IPV6),
            bad_inner.eq((n < wire.MRC_UDP_OFFSET) | (inner.version != wire.IPV6_VERSION)
                         | (inner.plen + wire.MRC_UDP_OFFSET != n)),
            expired.eq(outer.hlim <= 1),
            mrc.eq((n >= HDR_BYTES) & (inner.nh == wire.NH_UDP) & (udp.dport == wire.ROCEV2_PORT)
                   & (bth.opcode <= wire.RC_WRITE_ONLY_IMM)),
        ]

        # --- uSID match, shift and exact-match lookup ---
        da = outer.dst
        mine, hit, egress, decap = Signal(), Signal(), Signal(8), Signal()
        key, shifted = Signal(48), Signal(128)
        m.d.comb += [
            mine.eq(da[80:] == (p.locator << 16 | p.my_usid)),
            shifted.eq(Cat(Const(0, 16), da[:80], da[96:])),
            key.eq(Mux(mine, shifted[80:], da[80:])),
        ]
        for k in reversed(range(p.table_entries)):          # the lowest matching index wins
            with m.If(self.route_valid[k] & (self.route_key[k] == key)):
                m.d.comb += [hit.eq(1), egress.eq(self.route_port[k]), decap.eq(self.route_decap[k])]

        # --- header rewrite: decapsulation (RFC 6040 ECN, trim DSCP) or hop limit and DA ---
        out_hdr = Signal(8 * HDR_BYTES)
        head = wire_view(IPV6, out_hdr, o_at)
        tc_out, tc_in = outer.tc, inner.tc
        trim_dscps = (p.dscp_trim, p.dscp_trim_last)
        tc_dec = Signal(8)
        ect = lambda tc: (tc[:2] == wire.ECT0) | (tc[:2] == wire.ECT1)   # noqa: E731
        m.d.comb += tc_dec.eq(Cat(Mux((tc_out[:2] == wire.ECN_CE) & ect(tc_in), wire.ECN_CE, tc_in[:2]),
                                  Mux((tc_out[2:] == trim_dscps[0]) | (tc_out[2:] == trim_dscps[1]),
                                      tc_out[2:], tc_in[2:])))
        with m.If(decap):
            m.d.comb += [out_hdr.eq(Cat(d.hdr[:8 * o_at], d.hdr[8 * i_at:])), head.tc.eq(tc_dec)]
        with m.Else():
            m.d.comb += [out_hdr.eq(d.hdr), head.hlim.eq(outer.hlim - 1), head.dst.eq(Mux(mine, shifted, da))]
        tc = Signal(8)
        m.d.comb += tc.eq(Mux(decap, tc_dec, tc_out))

        # --- queueing: trim-forward, ECN ramp, trim ---
        last = Signal()
        dd, pd = Signal(p.depth_bits), Signal(p.depth_bits)
        m.d.comb += [last.eq(Const(p.last_hop, p.ports).bit_select(egress, 1)),
                     dd.eq(d.data_depth[egress]), pd.eq(d.prio_depth[egress])]
        r = self.lfsr[16 - p.ecn_span_log2:] if p.ecn_span_log2 else Const(0, 1)
        trimmed_in, prio_full, mark = Signal(), Signal(), Signal()
        m.d.comb += [
            trimmed_in.eq((tc[2:] == trim_dscps[0]) | (tc[2:] == trim_dscps[1])),
            prio_full.eq(pd >= p.prio_capacity),
            mark.eq(~last & ect(tc) & (dd > p.ecn_kmin) & (r + p.ecn_kmin < dd)),
        ]
        length = Signal(16)
        m.d.comb += length.eq(n - Mux(decap, wire.IPV6_BYTES, 0))

        verdict = Signal(range(len(VERDICTS)))
        V = {name: k for k, name in enumerate(VERDICTS)}
        leaves, prio, marked = Signal(), Signal(), Signal()
        trim = Signal()
        with m.If(bad_outer):
            m.d.comb += verdict.eq(V["malformed"])
        with m.Elif(bad_nh):
            m.d.comb += verdict.eq(V["bad_next_header"])
        with m.Elif(bad_inner):
            m.d.comb += verdict.eq(V["malformed"])
        with m.Elif(expired):
            m.d.comb += verdict.eq(V["hop_limit"])
        with m.Elif(~hit):
            m.d.comb += verdict.eq(V["no_route"])
        with m.Elif(trimmed_in):
            m.d.comb += [verdict.eq(Mux(prio_full, V["trim_overflow"], V["trim_forwarded"])),
                         leaves.eq(~prio_full), prio.eq(1)]
        with m.Elif(dd < p.data_capacity):
            m.d.comb += [verdict.eq(V["forwarded"]), leaves.eq(1), marked.eq(mark)]
        with m.Elif(~mrc):
            m.d.comb += verdict.eq(V["data_overflow"])
        with m.Elif(prio_full):
            m.d.comb += verdict.eq(V["trim_overflow"])
        with m.Else():
            m.d.comb += [verdict.eq(V["trimmed"]), leaves.eq(1), prio.eq(1), trim.eq(1)]

        # --- output ---
        routed = ~bad_outer & ~bad_nh & ~bad_inner & ~expired & hit
        cut = trim & (length > p.trim_len)
        with m.If(transfer):
            m.d.sync += [self.o.valid.eq(1), res.verdict.eq(verdict), res.port.eq(Mux(leaves, egress, 0)),
                         res.prio.eq(prio), res.decap.eq(leaves & decap), res.marked.eq(marked),
                         res.length.eq(Mux(cut, p.trim_len, length)), res.hdr.eq(out_hdr)]
            oh = wire_view(IPV6, res.hdr, o_at)
            with m.If(marked):
                m.d.sync += oh.tc.eq(tc | wire.ECN_CE)
            with m.If(trim):
                m.d.sync += oh.tc.eq(Cat(tc[:2], Mux(last, p.dscp_trim_last, p.dscp_trim)))
            with m.If(cut):
                m.d.sync += oh.plen.eq(p.trim_len - o_at - wire.IPV6_BYTES)
                with m.If(decap):
                    m.d.sync += wire_view(UDP, res.hdr, i_at).len.eq(p.trim_len - i_at)
                with m.Else():
                    m.d.sync += [wire_view(IPV6, res.hdr, i_at).plen.eq(p.trim_len - wire.MRC_UDP_OFFSET),
                                 wire_view(UDP, res.hdr, wire.MRC_UDP_OFFSET).len.eq(
                                     p.trim_len - wire.MRC_UDP_OFFSET)]
            m.d.sync += self.lfsr.eq((self.lfsr >> 1) ^ Mux(self.lfsr[0], LFSR_TAPS, 0))

        # --- counters ---
        events = {name: verdict == k for k, name in enumerate(VERDICTS)}
        events.update(decapsulated=routed & decap, ce_marked=marked)
        for name, hit_ in events.items():
            count_event(m, getattr(self, name), transfer & hit_, overflow="saturate")
        return m

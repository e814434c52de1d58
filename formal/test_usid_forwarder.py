"""Formal properties of the MRC uSID forwarder, proved by k-induction.

Descriptors (all 114 header bytes, length, ingress port, queue depths) and table writes are free on
every cycle; ``o.ready`` is held high so every result answers the descriptor of the cycle before,
which the spec keeps (its own copy, read with its own byte slicing). For every result that leaves:

- a shifted DA equals ``{locator, old uSIDs << 16}`` (the input DA's first 48 bits were
  ``{locator, my_usid}``); any other DA leaves unchanged (no decapsulation);
- no CE mark on a last-hop port: the outer ECN of a non-decapsulated packet leaves as it came, a
  decapsulated one carries its inner ECN (or the outer CE, RFC 6040), and ``marked`` is low;
- a trimmed packet is exactly ``trim_len`` bytes when it was longer, never longer otherwise, and
  its outer IPv6 payload length says so.

The whole result is also the spec's own judgement (``judge``) of the descriptor taken, read byte by
byte as the model's docstring reads a packet (rules 1-7): the verdict (malformed outer/inner header,
bad next header, hop limit, no route, trim-forward, forward, data overflow, trim, trim overflow), and
for a packet that leaves its port, queue, decap flag, length and every header byte the deparser sends
(``min(length, HDR_BYTES) - 40 * decap``): hop limit - 1 (or the inner header after a decap, with the
RFC 6040 ECN and trim DSCP), the (shifted) DA, the CE mark of the spec's ECN ramp (``r < d - kmin``
with ``r`` from the spec's LFSR), the trim DSCP and a cut packet's payload and UDP lengths. Route
ports >= ``ports`` (which the model's ``add_route`` refuses) leave the judgement unchecked.

Reset is explored: ``rst`` is free at every cycle. The spec keeps its own route table (from the
``cfg`` writes, empty after reset as the SPEC says) and its own LFSR (``lfsr_seed`` after reset, one
Galois step per descriptor taken); the design's table and LFSR equal them on every cycle, so a
register left out of reset is caught the cycle after a reset; ``o`` is empty after a reset.
Counters: every verdict counter increments (saturating) exactly when a result with that verdict is
loaded; ``ce_marked`` on a loaded ``marked``; ``decapsulated`` on a routed verdict whose route (the
spec's own lowest matching entry of its table, for the key it computes) has ``decap``.
"""
from amaranth.hdl import Assert, Cat, Const, Cover, Elaboratable, Module, Mux, ResetSignal, Signal, Value

from formal.props import after_reset, counters_follow
from formal.runner import any_streams, prove
from hdl.usid_forwarder import COUNTERS, HDR_BYTES, LFSR_TAPS, VERDICTS, UsidForwarder, UsidForwarderParams
from models import wire

PARAMS = UsidForwarderParams(ports=4, table_entries=2, last_hop=0b1000, data_capacity=6, prio_capacity=2,
                             depth_bits=4, ecn_kmin=1, ecn_span_log2=2, counter_bits=2)


def field(hdr, at, size):
    """Bytes ``at .. at + size - 1`` of a descriptor's header (byte 0 in the lowest lane), big-endian."""
    return Cat(*(hdr[8 * b:8 * b + 8] for b in reversed(range(at, at + size))))


def named(m, value, name):
    """``value`` as a comb signal (so the expression is built once, not at every use)."""
    value = Value.cast(value)
    sig = Signal(value.shape(), name=f"spec_{name}")
    m.d.comb += sig.eq(value)
    return sig


def judge(m, p, desc, hit, egress, route_decap, r):
    """The spec's result for descriptor ``desc``, read byte by byte as the model's docstring reads a
    packet: rules 1-7 (header judgement, route, rewrite, queueing, ECN, trim). ``hit``/``egress``/
    ``route_decap``: the spec's own lookup; ``r``: the top bits of the spec's own LFSR. Returns the
    verdict (index into ``VERDICTS``), whether the packet leaves, its port, queue (1: priority),
    decap, marked, length, the number of header bytes the deparser sends and those bytes."""
    B = [desc.hdr[8 * b:8 * b + 8] for b in range(HDR_BYTES)]

    def f(at, size):                                    # big-endian field of the packet bytes
        return Cat(*reversed(B[at:at + size]))

    def get_tc(at):                                     # version:4 | tc:8 | flow label:20
        return Cat(B[at + 1][4:], B[at][:4])

    def set_tc(out, at, tc):
        out[at] = Cat(tc[4:], out[at][4:])
        out[at + 1] = Cat(out[at + 1][:4], tc[:4])

    def set_field(out, at, size, value):
        value = Const(value, 8 * size)
        for k in range(size):
            out[at + k] = value[8 * (size - 1 - k):8 * (size - k)]

    n, o, i = desc.length, wire.OUTER_OFFSET, wire.INNER_OFFSET
    udp = i + wire.IPV6_BYTES
    trims = (p.dscp_trim, p.dscp_trim_last)
    # rules 1-4: the header judgement
    bad_outer = named(m, (n < o + wire.IPV6_BYTES) | (f(wire.ETHERTYPE_AT, 2) != wire.ETHERTYPE_IPV6)
                 | (B[o][4:] != wire.IPV6_VERSION) | (desc.port >= p.ports)
                 | (f(o + wire.IPV6_PLEN_AT, 2) != n - (o + wire.IPV6_BYTES)), "bad_outer")
    bad_nh = named(m, B[o + wire.IPV6_NH_AT] != wire.NH_IPV6, "bad_nh")
    bad_inner = named(m, (n < i + wire.IPV6_BYTES) | (B[i][4:] != wire.IPV6_VERSION)
                 | (f(i + wire.IPV6_PLEN_AT, 2) != n - (i + wire.IPV6_BYTES)), "bad_inner")
    expired = named(m, B[o + wire.IPV6_HLIM_AT] <= 1, "expired")
    mrc = named(m, (n >= udp + wire.UDP_BYTES + wire.BTH_BYTES) & (B[i + wire.IPV6_NH_AT] == wire.NH_UDP)
           & (f(udp + 2, 2) == wire.ROCEV2_PORT) & (B[udp + wire.UDP_BYTES] <= wire.RC_WRITE_ONLY_IMM), "mrc")
    # rule 5: the rewrite (decapsulation with RFC 6040 ECN and the trim DSCP, or hop limit and DA)
    da_at = o + wire.IPV6_DST_AT
    da = f(da_at, 16)
    da = named(m, Mux(da[80:] == (p.locator << 16 | p.my_usid), Cat(Const(0, 16), da[:80], da[96:]), da), "da")
    fwd = list(B)
    fwd[o + wire.IPV6_HLIM_AT] = B[o + wire.IPV6_HLIM_AT] - 1
    for k in range(16):
        fwd[da_at + k] = da[8 * (15 - k):8 * (16 - k)]
    tc_out, tc_in = get_tc(o), get_tc(i)
    ect = lambda tc: (tc[:2] == wire.ECT0) | (tc[:2] == wire.ECT1)      # noqa: E731
    in_ecn = named(m, Mux((tc_out[:2] == wire.ECN_CE) & ect(tc_in), wire.ECN_CE, tc_in[:2]), "in_ecn")
    in_dscp = named(m, Mux((tc_out[2:] == trims[0]) | (tc_out[2:] == trims[1]), tc_out[2:], tc_in[2:]), "in_dscp")
    dec = B[:o] + B[i:] + [Const(0, 8)] * wire.IPV6_BYTES
    set_tc(dec, o, Cat(in_ecn, in_dscp))
    out = [named(m, Mux(route_decap, x, y)[:8], f"out{b}") for b, (x, y) in enumerate(zip(dec, fwd))]
    # rules 6-7: queueing, ECN, trim (on the egress port's depths and the outermost traffic class)
    tc = named(m, Mux(route_decap, Cat(in_ecn, in_dscp), tc_out), "tc")
    dd = pd = Const(0, p.depth_bits)
    for k in range(p.ports):
        dd = Mux(egress == k, desc.data_depth[k], dd)
        pd = Mux(egress == k, desc.prio_depth[k], pd)
    last = Const(0, 1)
    for k in range(p.ports):
        if p.last_hop >> k & 1:
            last = last | (egress == k)
    dd, pd = named(m, dd, "dd"), named(m, pd, "pd")
    last = named(m, last, "last")
    trimmed_in = (tc[2:] == trims[0]) | (tc[2:] == trims[1])
    marked = named(m, ~last & ect(tc) & (dd > p.ecn_kmin) & (r < dd - p.ecn_kmin), "ramp")
    V = {name: k for k, name in enumerate(VERDICTS)}
    full = pd >= p.prio_capacity
    rules = [(bad_outer, V["malformed"]), (bad_nh, V["bad_next_header"]), (bad_inner, V["malformed"]),
             (expired, V["hop_limit"]), (~hit, V["no_route"]),
             (trimmed_in, Mux(full, V["trim_overflow"], V["trim_forwarded"])), (dd < p.data_capacity, V["forwarded"]),
             (~mrc, V["data_overflow"]), (full, V["trim_overflow"])]
    verdict = V["trimmed"]
    for applies, name in reversed(rules):               # the first rule that applies decides
        verdict = Mux(applies, name, verdict)
    verdict = named(m, verdict, "verdict")
    forwarded, trimmed = named(m, verdict == V["forwarded"], "forwarded"), named(m, verdict == V["trimmed"], "trimmed")
    marked = named(m, forwarded & marked, "marked")
    length = named(m, n - Mux(route_decap, wire.IPV6_BYTES, 0), "length")
    cut = named(m, trimmed & (length > p.trim_len), "cut")
    trim_tc = named(m, Cat(tc[:2], Mux(last, p.dscp_trim_last, p.dscp_trim)), "trim_tc")
    marked_out, trimmed_out, cut_out = list(out), list(out), list(out)
    set_tc(marked_out, o, tc | wire.ECN_CE)
    set_tc(trimmed_out, o, trim_tc)
    set_tc(cut_out, o, trim_tc)
    dec_cut, fwd_cut = list(cut_out), list(cut_out)
    set_field(dec_cut, o + wire.IPV6_PLEN_AT, 2, p.trim_len - o - wire.IPV6_BYTES)
    set_field(dec_cut, i + 4, 2, p.trim_len - i)                        # UDP length, now at i
    set_field(fwd_cut, o + wire.IPV6_PLEN_AT, 2, p.trim_len - o - wire.IPV6_BYTES)
    set_field(fwd_cut, i + wire.IPV6_PLEN_AT, 2, p.trim_len - i - wire.IPV6_BYTES)
    set_field(fwd_cut, udp + 4, 2, p.trim_len - udp)
    final = [x if a is c is d is t is x else Mux(marked, a, Mux(cut, Mux(route_decap, c, d), Mux(trimmed, t, x)))
             for a, c, d, t, x in zip(marked_out, dec_cut, fwd_cut, trimmed_out, out)]
    leaves = forwarded | trimmed | (verdict == V["trim_forwarded"])
    sent = Mux(n < HDR_BYTES, n, HDR_BYTES) - Mux(route_decap, wire.IPV6_BYTES, 0)
    return {"verdict": verdict, "leaves": leaves, "port": egress, "prio": leaves & ~forwarded,
            "decap": leaves & route_decap, "marked": marked, "length": Mux(cut, p.trim_len, length),
            "sent": sent, "bytes": [Value.cast(x)[:8] for x in final]}


class ForwarderSpec(Elaboratable):
    def elaborate(self, platform):
        m = Module()
        p = PARAMS
        m.submodules.dut = dut = UsidForwarder(p)
        m.d.comb += dut.o.ready.eq(1)            # rst stays free: a reset may come at any cycle
        any_streams(m, dut.i, dut.cfg)
        # the spec's copy of the descriptor the next result answers
        fresh, hdr, length = Signal(), Signal(8 * HDR_BYTES), Signal(16)
        m.d.sync += fresh.eq(dut.i.valid & dut.i.ready)
        with m.If(dut.i.valid & dut.i.ready):
            m.d.sync += [hdr.eq(dut.i.payload.hdr), length.eq(dut.i.payload.length)]
        out = dut.o.payload
        verdict = {name: out.verdict == k for k, name in enumerate(VERDICTS)}
        leaves = verdict["forwarded"] | verdict["trimmed"] | verdict["trim_forwarded"]
        check = fresh & dut.o.valid & leaves

        # shifted DA
        o_at, i_at = wire.OUTER_OFFSET, wire.INNER_OFFSET
        da_at = o_at + wire.IPV6_DST_AT
        in_da, out_da = field(hdr, da_at, 16), field(out.hdr, da_at, 16)
        mine = field(hdr, da_at, 6) == (p.locator << 16 | p.my_usid)
        locator, usids = field(hdr, da_at, 4), field(hdr, da_at + 4, 12)
        shifted = Cat(Const(0, 16), usids[:80], locator)
        with m.If(check & ~out.decap):
            m.d.comb += Assert(out_da == Mux(mine, shifted, in_da),
                               "a shifted DA is the locator, then the uSIDs shifted left by 16")

        # no CE mark on a last-hop port
        ecn_at = wire.OUTER_OFFSET + 1            # the traffic class's low two bits: byte 15, bits 5..4
        outer_ecn = hdr[8 * ecn_at + 4:8 * ecn_at + 6]
        inner_ecn = hdr[8 * (wire.INNER_OFFSET + 1) + 4:8 * (wire.INNER_OFFSET + 1) + 6]
        out_ecn = out.hdr[8 * ecn_at + 4:8 * ecn_at + 6]
        last = Const(p.last_hop, p.ports).bit_select(out.port[:2], 1)
        with m.If(check & last):
            m.d.comb += Assert(~out.marked, "no CE mark on a last-hop port")
            with m.If(~out.decap):
                m.d.comb += Assert(out_ecn == outer_ecn, "a last-hop port leaves the ECN as it came")
            with m.Else():
                m.d.comb += Assert((out_ecn == inner_ecn) | ((outer_ecn == wire.ECN_CE) & (out_ecn == wire.ECN_CE)),
                                   "a last-hop port leaves the inner ECN (or the outer CE) after decapsulation")

        # a trimmed packet is exactly trim_len bytes
        before = Signal(16)
        m.d.comb += before.eq(length - Mux(out.decap, wire.IPV6_BYTES, 0))
        with m.If(fresh & dut.o.valid & verdict["trimmed"]):
            m.d.comb += Assert(out.length == Mux(before > p.trim_len, p.trim_len, before),
                               "a trimmed packet is exactly trim_len bytes (or as short as it was)")
            with m.If(before > p.trim_len):
                m.d.comb += Assert(field(out.hdr, wire.OUTER_OFFSET + wire.IPV6_PLEN_AT, 2)
                                   == p.trim_len - wire.INNER_OFFSET, "a trimmed packet's payload length")

        # the spec's route table and LFSR (reset: empty table, the seed), equal to the design's
        n = p.table_entries
        t_valid = [Signal(name=f"t_valid{k}") for k in range(n)]
        t_key = [Signal(48, name=f"t_key{k}") for k in range(n)]
        t_port = [Signal(8, name=f"t_port{k}") for k in range(n)]
        t_decap = [Signal(name=f"t_decap{k}") for k in range(n)]
        c = dut.cfg.payload
        for k in range(n):
            with m.If(dut.cfg.valid & dut.cfg.ready & (c.index == k)):
                m.d.sync += [t_valid[k].eq(c.valid), t_key[k].eq(c.key), t_port[k].eq(c.port), t_decap[k].eq(c.decap)]
            m.d.comb += Assert((dut.route_valid[k] == t_valid[k]) & (dut.route_key[k] == t_key[k])
                               & (dut.route_port[k] == t_port[k]) & (dut.route_decap[k] == t_decap[k]),
                               f"route entry {k} follows the writes (empty after reset)")
        m.d.comb += Assert(dut.cfg.ready, "cfg is always ready (one table write per cycle)")
        lfsr = Signal(16, init=p.lfsr_seed)
        with m.If(dut.i.valid & dut.i.ready):
            m.d.sync += lfsr.eq((lfsr >> 1) ^ Mux(lfsr[0], LFSR_TAPS, 0))
        m.d.comb += Assert(dut.lfsr == lfsr, "the LFSR is the seed after reset and steps once per descriptor")
        m.d.comb += [Assert(dut.o.valid == fresh, "one result the cycle after each descriptor (none after reset)"),
                     Assert(~after_reset(m) | ~dut.o.valid, "a reset empties the output register")]
        # the route of the descriptor taken (the spec's key, its table's lowest matching entry)
        in_hdr = dut.i.payload.hdr
        i_da = field(in_hdr, da_at, 16)
        i_key = Mux(field(in_hdr, da_at, 6) == (p.locator << 16 | p.my_usid), Cat(i_da[64:80], i_da[96:]), i_da[80:])
        route_hit, route_port, route_decap, sh_decap = Signal(), Signal(8), Signal(), Signal()
        for k in reversed(range(n)):
            with m.If(t_valid[k] & (t_key[k] == i_key)):
                m.d.comb += [route_hit.eq(1), route_port.eq(t_port[k]), route_decap.eq(t_decap[k])]
        m.d.sync += sh_decap.eq(route_decap)

        # the result is the spec's judgement of the descriptor taken (its bytes, its route, its LFSR)
        r = lfsr[16 - p.ecn_span_log2:] if p.ecn_span_log2 else Const(0, 1)
        e = judge(m, p, dut.i.payload, route_hit, route_port, route_decap, r)
        exp = {name: Signal(Value.cast(value).shape(), name=f"exp_{name}") for name, value in e.items()
               if name != "bytes"}
        exp_bytes = Signal(8 * HDR_BYTES)
        judged = Signal()                      # the route's port exists (the control plane's contract)
        with m.If(dut.i.valid & dut.i.ready):
            m.d.sync += [exp[name].eq(e[name]) for name in exp]
            m.d.sync += [exp_bytes.eq(Cat(*e["bytes"])), judged.eq(~route_hit | (route_port < p.ports))]
        with m.If(fresh & dut.o.valid & judged):
            m.d.comb += Assert(out.verdict == exp["verdict"],
                               "the verdict is the spec's judgement of the packet bytes (rules 1-6)")
            m.d.comb += Assert(out.marked == exp["marked"], "CE marked iff the spec's ECN ramp marks (rule 7)")
            with m.If(exp["leaves"]):
                m.d.comb += Assert((out.port == exp["port"]) & (out.prio == exp["prio"]) & (out.decap == exp["decap"]),
                                   "a packet leaves on the route's port, queue and decap")
                m.d.comb += Assert(out.length == exp["length"], "the output length: decap -40, trim cut")
                regions = {"the hop limit leaves decremented (the inner one untouched by a decap)":
                           [o_at + wire.IPV6_HLIM_AT],
                           "the DA leaves shifted per the uSID rule": range(da_at, da_at + 16),
                           "the outer traffic class (ECN mark, trim DSCP, RFC 6040 decap)": [o_at, o_at + 1],
                           "the payload lengths of a cut packet": [o_at + 4, o_at + 5, i_at + 4, i_at + 5,
                                                                    i_at + 44, i_at + 45]}
                regions["every other header byte sent is as the spec's rewrite has it"] = [
                    b for b in range(HDR_BYTES) if all(b not in r_ for r_ in regions.values())]
                for message, where in regions.items():
                    same = Const(1)
                    for b in where:
                        same = same & ((b >= exp["sent"]) | (out.hdr[8 * b:8 * b + 8] == exp_bytes[8 * b:8 * b + 8]))
                    m.d.comb += Assert(same, message)
        routed = verdict["forwarded"] | verdict["trimmed"] | verdict["trim_forwarded"] | verdict["data_overflow"] \
            | verdict["trim_overflow"]
        events = {name: fresh & verdict[name] for name in VERDICTS}
        events.update(decapsulated=fresh & routed & sh_decap, ce_marked=fresh & out.marked)
        counters_follow(m, {name: getattr(dut, name) for name in COUNTERS}, events, delayed=True)
        m.d.comb += [Cover(check & out.decap & verdict["trimmed"]), Cover(check & mine & ~out.decap & last),
                     Cover(ResetSignal() & t_valid[0] & (dut.forwarded != 0))]
        return m


def test_usid_forwarder_proof():
    prove(ForwarderSpec(), "usid_forwarder", depth=2, mode="prove")


def test_usid_forwarder_cover():
    """The properties are not vacuous: a decapsulated trim and a shifted packet to a last-hop port happen."""
    prove(ForwarderSpec(), "usid_forwarder_cover", depth=4, mode="cover")

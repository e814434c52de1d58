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

Reset is explored: ``rst`` is free at every cycle. The spec keeps its own route table (from the
``cfg`` writes, empty after reset as the SPEC says) and its own LFSR (``lfsr_seed`` after reset, one
Galois step per descriptor taken); the design's table and LFSR equal them on every cycle, so a
register left out of reset is caught the cycle after a reset; ``o`` is empty after a reset.
Counters: every verdict counter increments (saturating) exactly when a result with that verdict is
loaded; ``ce_marked`` on a loaded ``marked``; ``decapsulated`` on a routed verdict whose route (the
spec's own lowest matching entry of its table, for the key it computes) has ``decap``.
"""
from amaranth.hdl import Assert, Cat, Const, Cover, Elaboratable, Module, Mux, ResetSignal, Signal

from formal.props import after_reset, counters_follow
from formal.runner import any_streams, prove
from hdl.usid_forwarder import COUNTERS, HDR_BYTES, LFSR_TAPS, VERDICTS, UsidForwarder, UsidForwarderParams
from models import wire

PARAMS = UsidForwarderParams(ports=4, table_entries=2, last_hop=0b1000, data_capacity=6, prio_capacity=2,
                             depth_bits=4, ecn_kmin=1, ecn_span_log2=2, counter_bits=2)


def field(hdr, at, size):
    """Bytes ``at .. at + size - 1`` of a descriptor's header (byte 0 in the lowest lane), big-endian."""
    return Cat(*(hdr[8 * b:8 * b + 8] for b in reversed(range(at, at + size))))


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
        da_at = wire.OUTER_OFFSET + wire.IPV6_DST_AT
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
            with m.If(dut.cfg.valid & (c.index == k)):
                m.d.sync += [t_valid[k].eq(c.valid), t_key[k].eq(c.key), t_port[k].eq(c.port), t_decap[k].eq(c.decap)]
            m.d.comb += Assert((dut.route_valid[k] == t_valid[k]) & (dut.route_key[k] == t_key[k])
                               & (dut.route_port[k] == t_port[k]) & (dut.route_decap[k] == t_decap[k]),
                               f"route entry {k} follows the writes (empty after reset)")
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
        route_decap, sh_decap = Signal(), Signal()
        for k in reversed(range(n)):
            with m.If(t_valid[k] & (t_key[k] == i_key)):
                m.d.comb += route_decap.eq(t_decap[k])
        m.d.sync += sh_decap.eq(route_decap)
        routed = verdict["forwarded"] | verdict["trimmed"] | verdict["trim_forwarded"] | verdict["data_overflow"] \
            | verdict["trim_overflow"]
        events = {name: fresh & verdict[name] for name in VERDICTS}
        events.update(decapsulated=fresh & routed & sh_decap, ce_marked=fresh & out.marked)
        counters_follow(m, {name: getattr(dut, name) for name in COUNTERS}, events, delayed=True)
        m.d.comb += [Cover(check & out.decap & verdict["trimmed"]), Cover(check & mine & ~out.decap & last),
                     Cover(ResetSignal() & t_valid[0] & (dut.forwarded != 0))]
        return m


def test_usid_forwarder_proof():
    prove(ForwarderSpec(), "usid_forwarder", depth=3, mode="prove")


def test_usid_forwarder_cover():
    """The properties are not vacuous: a decapsulated trim and a shifted packet to a last-hop port happen."""
    prove(ForwarderSpec(), "usid_forwarder_cover", depth=4, mode="cover")

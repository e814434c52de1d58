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
"""
from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Elaboratable, Module, Mux, ResetSignal, Signal

from formal.runner import any_streams, prove
from hdl.usid_forwarder import HDR_BYTES, VERDICTS, UsidForwarder, UsidForwarderParams
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
        m.d.comb += [Assume(~ResetSignal()), dut.o.ready.eq(1)]
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
        m.d.comb += [Cover(check & out.decap & verdict["trimmed"]), Cover(check & mine & ~out.decap & last)]
        return m


def test_usid_forwarder_proof():
    prove(ForwarderSpec(), "usid_forwarder", depth=3, mode="prove")


def test_usid_forwarder_cover():
    """The properties are not vacuous: a decapsulated trim and a shifted packet to a last-hop port happen."""
    prove(ForwarderSpec(), "usid_forwarder_cover", depth=4, mode="cover")

"""Wire-format header layouts and views onto a packet beat.

Fields are declared in wire order; each layout is built in reverse, because ``data.Struct`` lays
fields out from bit 0 upward while the wire is big-endian. A header is read by byte-reversing its
bytes of the beat (``wire_view``) so that every field holds its value in network byte order.
Offsets and constants come from ``models.wire``; at import each layout's size and the position of
every field ``models.wire`` names are checked against it (``ValueError`` if they differ).
``testbenches/test_headers.py`` proves each layout equal to the scapy layer of the same name.
"""
from amaranth.hdl import Cat, Value
from amaranth.lib import data

from models import wire
from models.wire import (
    BTH_OFFSET,
    ETH_OFFSET,
    ETHERTYPE_IPV4,
    INA_HEADER_BYTES,
    INA_OFFSET,
    INA_PORT,
    IP_OFFSET,
    IPPROTO_UDP,
    ROCE_HEADER_BYTES,
    ROCEV2_PORT,
    SPILL_HEADER_BYTES,
    SPILL_OFFSET,
    UDP_OFFSET,
)

__all__ = [
    "wire_layout", "wire_view", "wire_bytes", "wire_bit",
    "ETHERNET", "IPV4", "UDP", "BTH", "INA", "SPILL",
    "ETH_OFFSET", "IP_OFFSET", "UDP_OFFSET", "BTH_OFFSET", "INA_OFFSET",
    "ROCE_HEADER_BYTES", "INA_HEADER_BYTES", "SPILL_OFFSET", "SPILL_HEADER_BYTES",
    "ETHERTYPE_IPV4", "IPPROTO_UDP", "ROCEV2_PORT", "INA_PORT",
]


def wire_layout(*fields):
    """``StructLayout`` of a header given its ``(name, width)`` fields in wire order."""
    layout = data.StructLayout(dict(reversed(fields)))
    if layout.size % 8:
        raise ValueError(f"wire_layout: fields of {layout.size} bits are not a whole number of bytes")
    return layout


def wire_bit(layout, name):
    """Bit of the header where field ``name`` starts on the wire (0 = most significant bit of byte 0)."""
    field = layout[name]
    return layout.size - field.offset - field.width


def wire_bytes(value, offset, length):
    """Bytes ``offset .. offset+length-1`` of a beat, first byte in the most significant bits."""
    value = Value.cast(value)
    return Cat(*(value[8 * i:8 * i + 8] for i in reversed(range(offset, offset + length))))


def wire_view(layout, value, offset):
    """View of the header ``layout`` that starts at byte ``offset`` of the beat ``value``."""
    return data.View(layout, wire_bytes(value, offset, layout.size // 8))


ETHERNET = wire_layout(("dst", 48), ("src", 48), ("type", 16))

IPV4 = wire_layout(
    ("version", 4), ("ihl", 4), ("tos", 8), ("len", 16),
    ("id", 16), ("flags", 3), ("frag", 13),
    ("ttl", 8), ("proto", 8), ("chksum", 16),
    ("src", 32), ("dst", 32))

UDP = wire_layout(("sport", 16), ("dport", 16), ("len", 16), ("chksum", 16))

BTH = wire_layout(
    ("opcode", 8), ("solicited", 1), ("migreq", 1), ("padcount", 2), ("version", 4),
    ("pkey", 16), ("fecn", 1), ("becn", 1), ("resv6", 6), ("dqpn", 24),
    ("ackreq", 1), ("resv7", 7), ("psn", 24))

#: INA (ATP-style aggregation shim, SPEC section 3) after Ethernet/IPv4/UDP: ATP's bitmap, fan-in,
#: flags, ECN, job+seq and aggregator index, plus (*chosen*) the ``evict`` and ``result`` flags, one
#: reserved bit and an 8-bit ESA priority. ``values`` signed big-endian int32 follow the header.
INA = wire_layout(
    ("bitmap", 32), ("fanin", 8),
    ("overflow", 1), ("resend", 1), ("collision", 1), ("ack", 1), ("evict", 1), ("result", 1),
    ("ecn", 1), ("resv", 1),
    ("jobseq", 32), ("index", 16), ("priority", 8))

#: Spill-link shim (SPEC section 1, *chosen*) after an outer Ethernet header of EtherType 0x88B5:
#: opcode, origin egress port, flow index, per-port sequence number, drain count, reserved.
SPILL = wire_layout(("op", 8), ("port", 8), ("flow", 16), ("seq", 16), ("count", 8), ("resv", 8))


def _check(name, layout, offset, size, fields):
    """``layout`` is ``size`` bytes; each of ``fields`` (name -> wire bit in the packet) is where it starts."""
    if layout.size != 8 * size:
        raise ValueError(f"hdl.headers.{name} is {layout.size // 8} bytes, models.wire says {size}")
    for field, at in fields.items():
        if 8 * offset + wire_bit(layout, field) != at:
            raise ValueError(f"hdl.headers.{name}.{field} starts at bit {8 * offset + wire_bit(layout, field)} "
                             f"of the packet, models.wire says {at}")


def _flag(mask):
    """Wire bit, in the packet, of the first bit of ``mask`` in the INA flags byte (byte 5)."""
    return 8 * (INA_OFFSET + 5) + 8 - mask.bit_length()


_check("ETHERNET", ETHERNET, ETH_OFFSET, wire.ETH_BYTES, {"type": 8 * wire.ETHERTYPE_AT})
_check("IPV4", IPV4, IP_OFFSET, wire.IPV4_BYTES,
       {"version": 8 * wire.IP_VERSION_IHL_AT, "tos": 8 * wire.IP_TOS_AT, "proto": 8 * wire.IP_PROTO_AT,
        "chksum": 8 * wire.IP_CHECKSUM_AT, "src": 8 * wire.IP_SRC_AT})
_check("UDP", UDP, UDP_OFFSET, wire.UDP_BYTES,
       {"sport": 8 * wire.UDP_SPORT_AT, "dport": 8 * wire.UDP_DPORT_AT, "chksum": 8 * wire.UDP_CHECKSUM_AT})
# BTH_DQPN_AT is the 32-bit word of a reserved byte and the 24-bit QP.
_check("BTH", BTH, BTH_OFFSET, wire.BTH_BYTES, {"opcode": 8 * wire.BTH_OPCODE_AT, "dqpn": 8 * wire.BTH_DQPN_AT + 8})
_check("INA", INA, INA_OFFSET, wire.INA_BYTES,
       {"index": 8 * wire.INA_INDEX_AT, "overflow": _flag(wire.INA_OVERFLOW), "resend": _flag(wire.INA_RESEND),
        "collision": _flag(wire.INA_COLLISION), "ack": _flag(wire.INA_ACK), "evict": _flag(wire.INA_EVICT),
        "result": _flag(wire.INA_RESULT), "ecn": _flag(wire.INA_ECN), "resv": _flag(wire.INA_RESV_MASK)})

#: IPv6 fixed header (SPEC section 5: the outer and inner headers of an MRC packet); ``tc`` is the
#: traffic class (DSCP in its upper six bits, ECN in the lower two).
IPV6 = wire_layout(
    ("version", 4), ("tc", 8), ("fl", 20), ("plen", 16), ("nh", 8), ("hlim", 8),
    ("src", 128), ("dst", 128))

_check("IPV6", IPV6, wire.OUTER_OFFSET, wire.IPV6_BYTES,
       {"plen": 8 * (wire.OUTER_OFFSET + wire.IPV6_PLEN_AT), "nh": 8 * (wire.OUTER_OFFSET + wire.IPV6_NH_AT),
        "hlim": 8 * (wire.OUTER_OFFSET + wire.IPV6_HLIM_AT), "src": 8 * (wire.OUTER_OFFSET + wire.IPV6_SRC_AT),
        "dst": 8 * (wire.OUTER_OFFSET + wire.IPV6_DST_AT)})
__all__ += ["IPV6"]
_check("SPILL", SPILL, wire.SPILL_OFFSET, wire.SPILL_BYTES,
       {"op": 8 * wire.SPILL_OP_AT, "port": 8 * wire.SPILL_PORT_AT, "flow": 8 * wire.SPILL_FLOW_AT,
        "seq": 8 * wire.SPILL_SEQ_AT, "count": 8 * wire.SPILL_COUNT_AT})

#: DBLP round shim (SPEC section 4) after Ethernet/IPv4/UDP: version, flags (LAST, RETX, two
#: reserved bits), training phase, a reserved nibble, job, round, packet index, packet count (E)
#: and a reserved half-word; the payload follows at ``DBLP_HEADER_BYTES``.
DBLP = wire_layout(
    ("ver", 4), ("last", 1), ("retx", 1), ("fresv", 2), ("phase", 4), ("resv", 4),
    ("job", 8), ("round", 16), ("idx", 16), ("cnt", 16), ("resv2", 16))
DBLP_OFFSET, DBLP_HEADER_BYTES = wire.DBLP_OFFSET, wire.DBLP_HEADER_BYTES
__all__ += ["DBLP", "DBLP_OFFSET", "DBLP_HEADER_BYTES"]


def _dblp_flag(mask):
    """Wire bit, in the packet, of the first bit of ``mask`` in the low nibble of DBLP byte 0."""
    return 8 * DBLP_OFFSET + 8 - mask.bit_length()


_check("DBLP", DBLP, DBLP_OFFSET, wire.DBLP_BYTES,
       {"ver": 8 * DBLP_OFFSET, "last": _dblp_flag(wire.DBLP_LAST), "retx": _dblp_flag(wire.DBLP_RETX),
        "fresv": _dblp_flag(wire.DBLP_FLAGS_RESV), "phase": 8 * (DBLP_OFFSET + 1),
        "round": 8 * (DBLP_OFFSET + 3), "cnt": 8 * (DBLP_OFFSET + 7)})

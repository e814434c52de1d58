"""Wire-format header layouts and views onto a packet beat.

Fields are declared in wire order; each layout is built in reverse, because ``data.Struct`` lays
fields out from bit 0 upward while the wire is big-endian. A header is read by byte-reversing its
bytes of the beat (``wire_view``) so that every field holds its value in network byte order.
``testbenches/test_headers.py`` proves each layout equal to the scapy layer of the same name.
"""
from amaranth.hdl import Cat, Value
from amaranth.lib import data

__all__ = [
    "wire_layout", "wire_view", "wire_bytes",
    "ETHERNET", "IPV4", "UDP", "BTH",
    "ETH_OFFSET", "IP_OFFSET", "UDP_OFFSET", "BTH_OFFSET", "ROCE_HEADER_BYTES",
    "ETHERTYPE_IPV4", "IPPROTO_UDP", "ROCEV2_PORT",
]


def wire_layout(*fields):
    """``StructLayout`` of a header given its ``(name, width)`` fields in wire order."""
    layout = data.StructLayout(dict(reversed(fields)))
    assert layout.size % 8 == 0, "a header is a whole number of bytes"
    return layout


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

ETH_OFFSET = 0
IP_OFFSET = ETH_OFFSET + ETHERNET.size // 8
UDP_OFFSET = IP_OFFSET + IPV4.size // 8
BTH_OFFSET = UDP_OFFSET + UDP.size // 8
#: Ethernet + IPv4 (no options) + UDP + BTH: 54 bytes, inside the first beat of a 64-byte bus.
ROCE_HEADER_BYTES = BTH_OFFSET + BTH.size // 8

ETHERTYPE_IPV4 = 0x0800
IPPROTO_UDP = 17
ROCEV2_PORT = 4791


# --- INA: ATP-style in-network aggregation shim (SPEC section 3) ---------------------------------

#: INA header after Ethernet/IPv4/UDP: ATP's bitmap, fan-in, flags, job+seq and aggregator index,
#: plus (*chosen*) the ``evict`` and ``result`` flags, two reserved bits and an 8-bit ESA priority.
#: ``values`` signed big-endian int32 follow the header.
INA = wire_layout(
    ("bitmap", 32), ("fanin", 8),
    ("overflow", 1), ("resend", 1), ("collision", 1), ("ack", 1), ("evict", 1), ("result", 1),
    ("resv", 2),
    ("jobseq", 32), ("index", 16), ("priority", 8))
INA_OFFSET = UDP_OFFSET + UDP.size // 8
#: Ethernet + IPv4 + UDP + INA header: the int32 values start at this byte.
INA_HEADER_BYTES = INA_OFFSET + INA.size // 8
#: UDP destination port of INA packets (*chosen*: 48864 = 0xBEE0, the port SwitchML uses).
INA_PORT = 0xBEE0

__all__ += ["INA", "INA_OFFSET", "INA_HEADER_BYTES", "INA_PORT"]

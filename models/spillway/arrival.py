"""What a Spillway switch side reads of an arriving packet (``hdl/spillway/arrival.py``)."""
import struct

from models import wire

__all__ = ["MIN_LENGTH", "flow_of", "malformed"]

#: Ethernet + IPv4 + UDP: the shortest packet whose 5-tuple can be read.
MIN_LENGTH = wire.UDP_HEADER_END


def flow_of(packet, flows):
    """Flow-table entry of a packet: its 5-tuple, XOR-folded into log2(flows) bits."""
    src, dst = struct.unpack_from("!II", packet, wire.IP_SRC_AT)
    proto = packet[wire.IP_PROTO_AT]
    sport, dport = struct.unpack_from("!HH", packet, wire.UDP_SPORT_AT)
    key = (((((src << 32 | dst) << 8 | proto) << 16) | sport) << 16) | dport
    bits = (flows - 1).bit_length()
    flow = 0
    while key:
        flow ^= key & (flows - 1)
        key >>= bits
    return flow


def malformed(header, length, port, ports):
    """Whether a packet with these first bytes and length cannot be handled (see InSwitchSpillBuffer)."""
    return (length < MIN_LENGTH
            or int.from_bytes(header[wire.ETHERTYPE_AT:wire.ETHERTYPE_AT + 2], "big") != wire.ETHERTYPE_IPV4
            or header[wire.IP_VERSION_IHL_AT] != wire.IPV4_VERSION_IHL5
            or header[wire.IP_PROTO_AT] != wire.IPPROTO_UDP or port >= ports)

"""What Spillway's switch sides know of an arriving packet: the descriptor a parser gives at its last beat."""
from amaranth.hdl import Cat, Const
from amaranth.lib import data

from hdl.parse import Parser
from models.spillway.arrival import MIN_LENGTH

__all__ = ["descriptor_layout", "arrival_layout", "parse_arrival"]


def descriptor_layout(handle_bits=16):
    """What the block hands to an egress queue: packet handle, port, length, re-injected mark."""
    return data.StructLayout({"handle": handle_bits, "port": 8, "length": 16, "spilled": 1})


def arrival_layout(handle_bits=16, flows=16):
    """What the parser hands to the spill core for each packet."""
    return data.StructLayout({"handle": handle_bits, "port": 8, "length": 16,
                              "flow": range(flows), "malformed": 1})

def flow_fold(parser, flows):
    """The 5-tuple src/dst/proto/sport/dport XOR-folded into log2(``flows``) bits."""
    ip, udp = parser.ip, parser.udp
    key = Cat(udp.dport, udp.sport, ip.proto, ip.dst, ip.src)
    bits = (flows - 1).bit_length()
    fold = Const(0, bits)
    for k in range(0, len(key), bits):
        fold ^= key[k:k + bits]
    return fold


def parse_arrival(m, beat, transfer, flows):
    """A ``Parser`` (submodule ``parser``) of the packets of a byte stream whose beat ``beat`` is taken
    when ``transfer``; returns ``(length, flow, malformed)`` of the packet at its last beat: the bytes so
    far, the 5-tuple folded into ``flows`` entries (*chosen*), and whether it is shorter than
    ``MIN_LENGTH`` or not IPv4 with IHL 5 and UDP."""
    m.submodules.parser = parser = Parser(beat, transfer, header_bytes=MIN_LENGTH, hold=True)
    length = parser.length
    return length, flow_fold(parser, flows), (length < MIN_LENGTH) | ~(parser.is_ipv4 & parser.is_ihl5 & parser.is_udp)

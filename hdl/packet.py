"""Packet byte stream shared by every block.

A packet is a sequence of beats on an ``amaranth.lib.stream`` interface. Byte ``i`` of a beat is
``data[8*i:8*i+8]`` (byte 0 of the packet is the lowest lane, as in AXI-Stream); ``keep`` has one
bit per byte and is all ones except on the last beat, where it covers the low bytes that are
valid. ``meta`` is per-packet metadata set by the surrounding pipeline and is valid on every beat.
"""
from amaranth.hdl import Signal
from amaranth.lib import data, stream

__all__ = ["Meta", "beat_layout", "packet_signature", "output_register"]

#: Default per-packet metadata: the egress port chosen by the forwarding stage.
Meta = data.StructLayout({"port": 8})


def beat_layout(data_bytes=64, meta=Meta):
    """Layout of one beat: ``data``, ``keep``, ``first``, ``last`` and ``meta``."""
    return data.StructLayout({
        "data":  8 * data_bytes,
        "keep":  data_bytes,
        "first": 1,
        "last":  1,
        "meta":  meta,
    })


def packet_signature(data_bytes=64, meta=Meta):
    """Stream signature of a packet byte stream with ``data_bytes`` bytes per beat."""
    return stream.Signature(beat_layout(data_bytes, meta))


def output_register(m, i, o):
    """A one-entry register in front of stream ``o``: ``i`` is taken while ``o`` is empty or being
    taken, and ``o.valid`` falls once ``o`` is taken. Returns the transfer on ``i``, in whose cycle
    the caller loads ``o.payload`` and raises ``o.valid``."""
    transfer = Signal()
    m.d.comb += [i.ready.eq(~o.valid | o.ready), transfer.eq(i.valid & i.ready)]
    with m.If(o.ready):
        m.d.sync += o.valid.eq(0)
    return transfer

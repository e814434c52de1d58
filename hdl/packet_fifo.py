"""Elastic buffer for a packet byte stream."""
from amaranth.hdl import Module
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from hdl.packet import Meta, beat_layout, packet_signature

__all__ = ["PacketFifo"]


class PacketFifo(wiring.Component):
    """A packet byte stream through a synchronous FIFO of ``depth`` beats (one beat per cycle).

    Used between pipeline stages, and as the reference DUT of the testbench's own self-test and of
    the simulation benchmark (the cheapest possible block).
    """

    def __init__(self, data_bytes=64, depth=4, meta=Meta):
        self.data_bytes = data_bytes
        self.depth = depth
        self.meta = meta
        super().__init__({"i": In(packet_signature(data_bytes, meta)),
                          "o": Out(packet_signature(data_bytes, meta))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = queue = fifo.SyncFIFOBuffered(
            width=beat_layout(self.data_bytes, self.meta).size, depth=self.depth)
        wiring.connect(m, wiring.flipped(self.i), queue.w_stream)
        wiring.connect(m, queue.r_stream, wiring.flipped(self.o))
        return m

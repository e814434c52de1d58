"""Elastic buffer for a packet byte stream."""
from amaranth.hdl import Module
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

from hdl.packet import beat_layout, packet_signature
from models.packet_fifo import PacketFifoParams
from models.params import check

__all__ = ["PacketFifo", "PacketFifoParams"]


class PacketFifo(wiring.Component):
    """A packet byte stream through a synchronous FIFO of ``depth`` beats (one beat per cycle).

    Used between pipeline stages, and as the reference DUT of the testbench's own self-test and of
    the simulation benchmark (the cheapest possible block).
    """

    def __init__(self, params=None):
        p = self.params = check(params, PacketFifoParams)
        self.data_bytes, self.depth = p.data_bytes, p.depth
        super().__init__({"i": In(packet_signature(p.data_bytes)),
                          "o": Out(packet_signature(p.data_bytes))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = queue = fifo.SyncFIFOBuffered(
            width=beat_layout(self.data_bytes).size, depth=self.depth)
        wiring.connect(m, wiring.flipped(self.i), queue.w_stream)
        wiring.connect(m, queue.r_stream, wiring.flipped(self.o))
        return m

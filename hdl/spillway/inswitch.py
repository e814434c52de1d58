"""Spillway's in-switch buffering baseline (SPEC section 1): a parser and the handle-level ``SpillCore``."""
from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.packet import packet_signature
from hdl.spillway.arrival import parse_arrival
from hdl.spillway.spill_core import SpillCore
from models.params import check
from models.spillway.inswitch import COUNTERS
from models.spillway.params import InSwitchParams

__all__ = ["InSwitchSpillBuffer"]


class InSwitchSpillBuffer(wiring.Component):
    """The in-switch buffering baseline of Spillway (SPEC section 1): spilled packets wait in the switch.

    The block manages packet *handles*, as a traffic manager does; packet bytes stay in the
    switch's packet memory. A parser turns each packet of the byte stream ``i`` (egress port in
    ``meta.port``) into a descriptor on its last beat: ``handle`` (arrival number modulo
    2**``handle_bits``, from 0 after reset; every packet, malformed or not, takes one),
    ``port``, ``length`` (bytes: popcount of ``keep`` summed over the beats) and its flow (the
    5-tuple src/dst/proto/sport/dport XOR-folded into log2(``flows``) bits, *chosen*). A packet
    is malformed (dropped, ``malformed``) when shorter than ``MIN_LENGTH`` bytes, not IPv4
    (ethertype, version 4), IHL != 5, not UDP, or ``port >= ports``. Headers are read from beat 0
    (kept in a register for multi-beat packets); earlier beats are accepted without output.
    ``SpillCore`` then forwards, spills, drops and drains (see its docstring); ``qdepth[p]`` is the
    depth (packets) of egress queue ``p``. Reset empties the spill FIFOs (the traffic manager
    frees their packets) and the counters.
    """

    def __init__(self, params=None):
        p = self.params = check(params, InSwitchParams)
        self.core = SpillCore(p)
        ports, capacity, depth_bits, data_bytes, counter_bits = (
            p.ports, p.capacity, p.depth_bits, p.data_bytes, p.counter_bits)
        self.ports, self.high, self.low, self.capacity = ports, p.high, p.low, capacity
        self.depth_bits, self.data_bytes, self.flows = depth_bits, data_bytes, p.flows
        self.descriptor = self.core.descriptor
        signature = {
            "i": In(packet_signature(data_bytes)),
            "o": Out(stream.Signature(self.descriptor)),
            "qdepth": In(data.ArrayLayout(depth_bits, ports)),
            "stored": Out(data.ArrayLayout(range(capacity + 1), ports)),
            "pending": Out(range(ports * capacity + 1)),
        }
        signature.update({name: Out(counter_bits) for name in COUNTERS})
        super().__init__(signature)

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        beat = self.i.payload
        length, flow, malformed = parse_arrival(m, beat, self.i.valid & self.i.ready, self.flows)

        handle = Signal(core.handle_bits)
        with m.If(core.d.valid & core.d.ready):
            m.d.sync += handle.eq(handle + 1)
        m.d.comb += [
            core.d.valid.eq(self.i.valid & beat.last),
            core.d.payload.handle.eq(handle),
            core.d.payload.port.eq(beat.meta.port),
            core.d.payload.length.eq(length),
            core.d.payload.flow.eq(flow),
            core.d.payload.malformed.eq(malformed),
            self.i.ready.eq(~beat.last | core.d.ready),
            core.qdepth.eq(self.qdepth),
        ]
        wiring.connect(m, wiring.flipped(self.o), core.o)
        m.d.comb += [self.stored.eq(core.stored), self.pending.eq(core.pending)]
        m.d.comb += [getattr(self, name).eq(getattr(core, name)) for name in COUNTERS]
        return m

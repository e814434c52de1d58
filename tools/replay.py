"""Replay: runs a block from pre-loaded stimulus so a cocotb test needs no Python per clock cycle.

The wrapper holds ``depth`` input beats in a memory the test writes once (through VPI) before the
run, streams them ``rounds`` times over into the block's ``i`` at the rate the block accepts them
(so a long run needs only a small memory), keeps every output
stream ready and counts output transfers and packets (beats with ``last``). The cocotb side then
waits on a single Timer while Verilator runs freely; this is the benchmark's batched-stimulus mode.
"""
from amaranth.hdl import Module, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Replay"]


class Replay(wiring.Component):
    """Feeds ``block.i`` from a stimulus memory of ``depth`` beats; counts what leaves its outputs."""

    def __init__(self, block, depth):
        self.block = block
        self.depth = depth
        self.layout = block.signature.members["i"].signature.members["payload"].shape
        super().__init__({
            "beats": In(range(depth + 1)),
            "rounds": In(16),
            "start": In(1),
            "done": Out(1),
            "cycles": Out(32),
            "transfers": Out(32),
            "packets": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.block = block = self.block
        m.submodules.stimulus = stim = memory.Memory(shape=self.layout.size, depth=self.depth, init=[])
        read = stim.read_port(transparent_for=())
        index = Signal(range(self.depth + 1))
        round_ = Signal(16)
        running = Signal()
        valid = Signal()

        with m.If(self.start & ~running):
            m.d.sync += [running.eq(1), index.eq(0), round_.eq(1), valid.eq(0), self.cycles.eq(0)]
        with m.If(running):
            m.d.sync += self.cycles.eq(self.cycles + 1)
            # The read port has one cycle of latency: `valid` marks that its data is beat `index`.
            advance = ~valid | block.i.ready
            m.d.comb += [read.en.eq(advance), read.addr.eq(index)]
            with m.If(advance):
                with m.If(index < self.beats):
                    m.d.sync += [index.eq(index + 1), valid.eq(1)]
                with m.Elif(round_ < self.rounds):
                    m.d.comb += read.addr.eq(0)
                    m.d.sync += [index.eq(1), round_.eq(round_ + 1), valid.eq(1)]
                with m.Else():
                    m.d.sync += [valid.eq(0), running.eq(0), self.done.eq(1)]
        m.d.comb += [block.i.valid.eq(valid & running), block.i.payload.eq(read.data)]

        transfers, packets = [], []
        for name, member in block.signature.members.items():
            if member.flow == Out and member.is_signature and isinstance(member.signature, stream.Signature):
                port = getattr(block, name)
                layout = member.signature.members["payload"].shape
                has_last = isinstance(layout, data.StructLayout) and "last" in dict(layout)
                m.d.comb += port.ready.eq(1)
                transfers.append(port.valid)
                packets.append(port.valid & port.payload.last if has_last else port.valid)
        m.d.sync += [self.transfers.eq(self.transfers + sum(transfers)),
                     self.packets.eq(self.packets + sum(packets))]
        return m

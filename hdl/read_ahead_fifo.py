"""A synchronous FIFO whose storage is SRAM with a registered read, and no more latency than a combinational read."""
from amaranth.hdl import Elaboratable, Module, Mux, Signal
from amaranth.lib import memory

__all__ = ["ReadAheadFIFO"]


class ReadAheadFIFO(Elaboratable):
    """``amaranth.lib.fifo.SyncFIFO``'s ports and cycle behaviour (first-word fall-through: ``r_data`` is the
    head while ``r_rdy``; ``w_rdy`` while not full; no write when full, no read when empty, even in a cycle
    that also reads or writes), its storage read through a register (block RAM on an FPGA): the storage is
    read at the position the head will have in the next cycle, and a word written there in this cycle is
    read through (a write into an empty FIFO), so ``r_data`` is what a combinational read would show.

    Parameters
    ----------
    width : int
        Bits of a word.
    depth : int
        Words held, at least 1.

    Attributes
    ----------
    storage : Memory
        The words, created here so a formal spec can add read ports to it.
    produce, consume : Signal
        The position written next and the head's position.
    """

    def __new__(cls, *, width, depth):
        # Checked before the object exists, so a refused FIFO leaves no unused Elaboratable behind.
        if not isinstance(width, int) or width < 0:
            raise TypeError(f"width must be a non-negative integer, not {width!r}")
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be a positive integer, not {depth!r}")
        return super().__new__(cls, src_loc_at=1)

    def __init__(self, *, width, depth):
        self.width, self.depth = width, depth
        self.w_data, self.w_en, self.w_rdy = Signal(width), Signal(), Signal()
        self.r_data, self.r_en, self.r_rdy = Signal(width), Signal(), Signal()
        self.level = Signal(range(depth + 1))
        self.storage = memory.Memory(shape=width, depth=depth, init=[])
        self.produce, self.consume = Signal(range(depth), name="produce"), Signal(range(depth), name="consume")

    def elaborate(self, platform):
        m = Module()
        m.submodules.storage = storage = self.storage
        write = storage.write_port()
        read = storage.read_port(transparent_for=(write,))
        produce, consume = self.produce, self.consume

        def succ(pointer):
            return Mux(pointer == self.depth - 1, 0, pointer + 1)

        m.d.comb += [self.w_rdy.eq(self.level != self.depth), self.r_rdy.eq(self.level != 0)]
        do_write, do_read = self.w_en & self.w_rdy, self.r_en & self.r_rdy
        next_consume = Mux(do_read, succ(consume), consume)
        m.d.comb += [write.addr.eq(produce), write.en.eq(do_write), write.data.eq(self.w_data),
                     read.addr.eq(next_consume), self.r_data.eq(read.data)]
        m.d.sync += [consume.eq(next_consume), self.level.eq(self.level + do_write - do_read)]
        with m.If(do_write):
            m.d.sync += produce.eq(succ(produce))
        return m

"""A synchronous FIFO whose storage a formal spec can read."""
from amaranth.hdl import Module, Mux, Signal
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory

__all__ = ["ReadableSyncFIFO"]


class ReadableSyncFIFO(SyncFIFO):
    """``amaranth.lib.fifo.SyncFIFO``: the same ports and the same cycle behaviour (combinational read of the
    oldest entry, ``w_rdy`` while not full, ``r_rdy`` while not empty, ``level``), with its storage and
    pointers created in ``__init__``: ``storage`` (a ``Memory`` of ``depth`` entries, to which a formal spec
    can add read ports), ``produce`` (the entry written next) and ``consume`` (the oldest entry)."""

    def __init__(self, *, width, depth):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"ReadableSyncFIFO: depth = {depth!r} must be an int >= 1")
        super().__init__(width=width, depth=depth)
        self.storage = Memory(shape=width, depth=depth, init=[])
        self.produce, self.consume = Signal(range(depth), name="produce"), Signal(range(depth), name="consume")

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.w_rdy.eq(self.level != self.depth), self.r_rdy.eq(self.level != 0),
                     self.w_level.eq(self.level), self.r_level.eq(self.level)]
        do_read, do_write = self.r_rdy & self.r_en, self.w_rdy & self.w_en
        m.submodules.storage = storage = self.storage
        w_port, r_port = storage.write_port(), storage.read_port(domain="comb")

        def incr(pointer):
            return Mux(pointer == self.depth - 1, 0, pointer + 1)
        m.d.comb += [w_port.addr.eq(self.produce), w_port.data.eq(self.w_data), w_port.en.eq(do_write),
                     r_port.addr.eq(self.consume), self.r_data.eq(r_port.data)]
        with m.If(do_write):
            m.d.sync += self.produce.eq(incr(self.produce))
        with m.If(do_read):
            m.d.sync += self.consume.eq(incr(self.consume))
        with m.If(do_write & ~do_read):
            m.d.sync += self.level.eq(self.level + 1)
        with m.If(do_read & ~do_write):
            m.d.sync += self.level.eq(self.level - 1)
        return m

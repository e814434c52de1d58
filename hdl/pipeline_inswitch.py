"""The in-switch baseline of the switch pipeline: stage 3 is Spillway's in-switch spill buffer, with a packet
store as a traffic manager holds."""
from amaranth.hdl import Array, Const, Module, Mux, Signal
from amaranth.lib import data, memory

from hdl.counters import count_event
from hdl.pipeline import PipelineStages
from hdl.spillway.inswitch import InSwitchSpillBuffer
from models.pipeline_inswitch import COUNTERS, InSwitchPipelineParams
from models.spillway.inswitch import COUNTERS as INSWITCH_COUNTERS

__all__ = ["InSwitchPipeline"]


class InSwitchPipeline(PipelineStages):
    """Ingress packets (``meta.port``: egress port chosen by forwarding) through the aggregator and the
    progress register file (``PipelineStages``) and, as stage 3, ``InSwitchSpillBuffer`` (``ports``,
    ``high``, ``low``, ``capacity``, ``drain_rate``, ``drain_window``, ``flows``, ``order``; ``qdepth``
    from the egress queues): every packet is forwarded, spilled and later drained, or dropped, by handle.

    Between stage 3 and the egress sits the packet store a traffic manager holds: ``2**handle_bits``
    entries of ``beats`` beats, entry = the spill buffer's handle. A packet's beats are written as they
    enter stage 3; its entry is busy until its descriptor has been sent on ``o`` (or the spill buffer
    dropped it). Stage 3 waits while the entry of the next handle is busy (``store_stalls`` counts those
    cycles): a stored packet is never overwritten. A packet longer than ``beats`` beats is not stored;
    its descriptor is dropped at egress (``oversize``). ``o`` sends the stored beats of each descriptor
    with ``meta.port`` and ``meta.spilled``. Counters: ``agg_*``, ``sym_*``, ``spill_*`` and the store's
    (``models.pipeline_inswitch.COUNTERS``).
    """

    PARAMS = InSwitchPipelineParams
    COUNTERS = COUNTERS

    def __init__(self, params=None):
        super().__init__(params)
        p = self.params
        self.handle_bits, self.beats = p.spill.handle_bits, p.beats
        # The store's bookkeeping (public for the formal spec): entries in use, entries holding a packet longer
        # than the store, the entering packet's entry (the spill buffer's handle) and beats stored so far,
        # the beats of the current descriptor already sent.
        self.busy = Signal(1 << self.handle_bits)
        self.oversized = Signal(1 << self.handle_bits)
        self.entering_handle = Signal(self.handle_bits)
        self.entering_index = Signal(range(self.beats + 1))
        self.sent = Signal(range(self.beats))
        # The packet store, written as beats enter stage 3 (its write port public for the formal spec).
        entry = data.StructLayout({"data": 8 * p.data_bytes, "keep": p.data_bytes, "last": 1})
        self.store = memory.Memory(shape=entry, depth=(1 << self.handle_bits) * self.beats, init=[])
        # A synchronous read port (SRAM-like: Yosys keeps it a memory, Verilator an array) whose address
        # is the one egress will use in the next cycle; transparent, so a beat written in this cycle
        # is read back: the data egress sees is the same as a combinational read's (cycle-identical).
        self.store_write = self.store.write_port()
        self.store_read = self.store.read_port(domain="sync", transparent_for=(self.store_write,))

    @staticmethod
    def stage3(p):
        return InSwitchSpillBuffer(p.spill)

    @staticmethod
    def ports_of(p):
        return {}

    def _one_hot(self, m, index, name):
        """``1 << index`` over the store's entries, as a signal."""
        one_hot = Signal(1 << self.handle_bits, name=name)
        m.d.comb += one_hot.eq((Const(1, len(one_hot)) << index)[:len(one_hot)])
        return one_hot

    def elaborate(self, platform):
        m = Module()
        agg, sym, spill = self._stages(m)
        B = self.beats

        m.submodules.store = self.store
        write, read = self.store_write, self.store_read
        busy, oversize = self.busy, self.oversized
        handle = self.entering_handle           # the spill buffer's handle of the entering packet
        index = self.entering_index             # beats of it stored so far
        waiting = busy.bit_select(handle, 1)
        entering = self._one_hot(m, handle, "entering")     # the entry of the entering packet
        beat = sym.o.payload
        m.d.comb += [
            spill.i.valid.eq(sym.o.valid & ~waiting),
            spill.i.payload.eq(beat),
            sym.o.ready.eq(spill.i.ready & ~waiting),
        ]
        enter = spill.i.valid & spill.i.ready
        m.d.comb += [
            write.addr.eq(handle * B + index),
            write.data.data.eq(beat.data), write.data.keep.eq(beat.keep), write.data.last.eq(beat.last),
            write.en.eq(enter & (index < B)),
        ]
        with m.If(enter):
            m.d.sync += index.eq(Mux(beat.last, 0, Mux(index == B, B, index + 1)))
            with m.If(beat.last):
                # oversize[handle] = index == B, as whole-vector operations (a bit_select on the left
                # is a case over every entry: 64 branches Verilator evaluates every cycle)
                m.d.sync += [handle.eq(handle + 1),
                             oversize.eq((oversize & ~entering) | Mux(index == B, entering, 0))]

        # Egress: the stored beats of each descriptor.
        desc = spill.o.payload
        sent = self.sent                        # beats of the current descriptor already sent
        long = oversize.bit_select(desc.handle, 1)
        # The descriptor and beat egress shows in the next cycle: the spill core's output register
        # loads a drained head or a forwarded arrival (as hdl/spillway/spill_core.py SpillCore does).
        core = spill.core
        heads = [read.data.handle for read in core.head_reads]     # each spill FIFO's head (registered read)
        load = ~spill.o.valid | spill.o.ready
        next_handle = Mux(load & core.drain, Array(heads)[core.drain_port],
                          Mux(load & core.forward, core.d.payload.handle, desc.handle))
        next_sent = Mux(self.o.valid & self.o.ready, Mux(read.data.last, 0, sent + 1), sent)
        m.d.comb += [
            read.addr.eq(next_handle * B + next_sent),
            self.o.valid.eq(spill.o.valid & ~long),
            self.o.payload.data.eq(read.data.data),
            self.o.payload.keep.eq(read.data.keep),
            self.o.payload.first.eq(sent == 0),
            self.o.payload.last.eq(read.data.last),
            self.o.payload.meta.port.eq(desc.port),
            self.o.payload.meta.spilled.eq(desc.spilled),
            spill.o.ready.eq(long | (self.o.ready & read.data.last)),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += sent.eq(Mux(read.data.last, 0, sent + 1))
        done = spill.o.valid & spill.o.ready
        dropped = spill.core.arrival & spill.core.drop
        arrived = enter & beat.last & ~dropped
        # busy[handle] set when a stored packet arrives, busy[desc.handle] cleared when its descriptor
        # is done (a set wins over a clear of the same entry); whole-vector operations as above.
        leaving = self._one_hot(m, desc.handle, "leaving")
        m.d.sync += busy.eq((busy & ~Mux(done, leaving, 0)) | Mux(arrived, entering, 0))

        # Counters.
        self._counters(m, agg, sym, INSWITCH_COUNTERS)
        for name, event in (("oversize", done & long), ("store_stalls", sym.o.valid & waiting)):
            count_event(m, getattr(self, name), event, overflow="wrap")
        return m

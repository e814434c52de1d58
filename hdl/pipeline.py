"""Switch pipeline top: aggregator, progress register file and spill buffer manager in one datapath."""
from amaranth.hdl import Array, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl import aggregator, progress_regfile, spill_buffer
from hdl.aggregator import Aggregator
from hdl.packet import packet_signature
from hdl.progress_regfile import ProgressRegfile
from hdl.spill_buffer import SpillBuffer
from hdl.spill_node import link_layout
from models.params import check
from models.pipeline import COUNTERS, PipelineParams, counters

__all__ = ["Pipeline", "PipelineParams", "COUNTERS", "OutMeta"]

#: Egress metadata: the port and whether the packet came back from the spill buffer.
OutMeta = data.StructLayout({"port": 8, "spilled": 1})


class Pipeline(wiring.Component):
    """Ingress packets (``meta.port``: egress port chosen by forwarding) through three stages.

    1. ``Aggregator`` (``policy``, ``slots``, ``workers``, ``values``): INA packets are
       aggregated, results/evictions/collisions go to ``ps_port`` (``mcast_port``, default the
       last port, for SwitchML results); every other packet passes unchanged.
    2. ``ProgressRegfile`` (``jobs``, ``ring``, ``table``; its ``cfg`` port is ``cfg``):
       tracked RoCEv2 flows that outpace their ring are ECN-marked; others pass unchanged.
    3. ``SpillBuffer`` (``ports``, ``high``, ``low``, ``capacity``, ``drain_rate``,
       ``drain_window``, ``flows``, ``order``; ``qdepth`` from the egress queues): every packet
       is forwarded, spilled and later drained, or dropped, by handle.

    Each stage parses the headers it acts on from beat 0 of the shared ``data_bytes`` bus and
    passes other packets through, as the stages of a match-action pipeline do. Between stage 3
    and the egress sits the packet store a traffic manager holds: ``2**handle_bits`` entries of
    ``beats`` beats, entry = the spill buffer's handle. A packet's beats are written as they enter
    stage 3; its entry is busy until its descriptor has been sent on ``o`` (or the spill buffer
    dropped it). Stage 3 waits while the entry of the next handle is busy (``store_stalls``
    counts those cycles): a stored packet is never overwritten. A packet longer than ``beats``
    beats is not stored; its descriptor is dropped at egress (``oversize``). ``o`` sends the
    stored beats of each descriptor with ``meta.port`` and ``meta.spilled``.

    Stages 1 and 2 are register stages (latency 1 each); one beat per cycle end to end.

    ``spill.mode`` selects stage 3. ``"inswitch"`` (the baseline: spilled handles wait
    in the switch, the packets in the packet store above). ``"disaggregated"`` (the default; Spillway
    as the paper describes it): stage 3 is the switch side of the disaggregated design (``SpillBuffer``
    in that mode: its ingress FIFO of ``spill.buffer`` beats, the credit core, the return buffer)
    and its ``o`` is the pipeline's ``o``; there is no packet store (``beats`` unused). Spilled
    packets leave whole on ``spill_o`` (spill header, DATA) with the drain requests (DRAIN), and
    come back on ``spill_i`` (RETURN, always ready); ``credits`` and ``outstanding`` are the
    switch side's; the counters are ``agg_*``, ``sym_*`` and ``spill_*`` of ``CREDIT_COUNTERS``
    (``models.pipeline.counters(params)``).
    """

    def __init__(self, params=None):
        p = self.params = check(params, PipelineParams)
        self.agg, self.sym, self.spill = Aggregator(p.agg), ProgressRegfile(p.sym), SpillBuffer(p.spill)
        ports, data_bytes, counter_bits = p.spill.ports, p.data_bytes, p.spill.counter_bits
        self.ports, self.handle_bits, self.beats, self.data_bytes = ports, p.spill.handle_bits, p.beats, data_bytes
        self.disaggregated = p.spill.mode == "disaggregated"
        self.counter_names = counters(p)
        signature = {
            "i": In(packet_signature(data_bytes)),
            "o": Out(packet_signature(data_bytes, OutMeta)),
            "cfg": In(stream.Signature(progress_regfile.config_layout(p.sym.jobs, p.sym.ring, p.sym.step_bits,
                                                                      p.sym.age_bits))),
            "qdepth": In(data.ArrayLayout(p.spill.depth_bits, ports)),
        }
        if self.disaggregated:
            link = link_layout(data_bytes)
            signature.update({
                "spill_o": Out(stream.Signature(link)),
                "spill_i": In(stream.Signature(link)),
                "credits": Out(data.ArrayLayout(range(p.spill.capacity + 1), ports)),
                "outstanding": Out(range(ports * p.spill.capacity + 1)),
            })
        signature.update({name: Out(counter_bits) for name in self.counter_names})
        super().__init__(signature)
        if not self.disaggregated:
            self.busy = Signal(1 << self.handle_bits)    # store entries in use (public for the formal spec)
            # The packet store, written as beats enter stage 3 (its write port public for the formal spec).
            entry = data.StructLayout({"data": 8 * data_bytes, "keep": data_bytes, "last": 1})
            self.store = memory.Memory(shape=entry, depth=(1 << self.handle_bits) * self.beats, init=[])
            # A synchronous read port (SRAM-like: Yosys keeps it a memory, Verilator an array) whose address
            # is the one egress will use in the next cycle; transparent, so a beat written in this cycle
            # is read back: the data egress sees is the same as a combinational read's (cycle-identical).
            self.store_write = self.store.write_port()
            self.store_read = self.store.read_port(domain="sync", transparent_for=(self.store_write,))

    def _stages(self, m):
        """Stages 1 and 2 and their wiring; returns the three stages."""
        m.submodules.agg, m.submodules.sym, m.submodules.spill = agg, sym, spill = (
            self.agg, self.sym, self.spill)
        wiring.connect(m, wiring.flipped(self.i), agg.i)
        wiring.connect(m, agg.o, sym.i)
        wiring.connect(m, wiring.flipped(self.cfg), sym.cfg)
        m.d.comb += spill.qdepth.eq(self.qdepth)
        return agg, sym, spill

    def _one_hot(self, m, index, name):
        """``1 << index`` over the store's entries, as a signal."""
        one_hot = Signal(1 << self.handle_bits, name=name)
        m.d.comb += one_hot.eq((Const(1, len(one_hot)) << index)[:len(one_hot)])
        return one_hot

    def _counters(self, m, agg, sym, spill_names):
        for block, names, prefix in ((agg, aggregator.COUNTERS, "agg_"),
                                     (sym, progress_regfile.COUNTERS, "sym_"),
                                     (self.spill, spill_names, "spill_")):
            m.d.comb += [getattr(self, prefix + name).eq(getattr(block, name)) for name in names]

    def _elaborate_disaggregated(self):
        m = Module()
        agg, sym, spill = self._stages(m)
        wiring.connect(m, sym.o, spill.i)
        wiring.connect(m, spill.o, wiring.flipped(self.o))
        wiring.connect(m, spill.spill_o, wiring.flipped(self.spill_o))
        wiring.connect(m, wiring.flipped(self.spill_i), spill.spill_i)
        m.d.comb += [self.credits.eq(spill.credits), self.outstanding.eq(spill.outstanding)]
        self._counters(m, agg, sym, spill_buffer.CREDIT_COUNTERS)
        return m

    def elaborate(self, platform):
        if self.disaggregated:
            return self._elaborate_disaggregated()
        m = Module()
        agg, sym, spill = self._stages(m)
        B, entries = self.beats, 1 << self.handle_bits

        m.submodules.store = self.store
        write, read = self.store_write, self.store_read
        busy = self.busy
        oversize = Signal(entries)
        handle = Signal(self.handle_bits)       # the spill buffer's handle of the entering packet
        index = Signal(range(B + 1))            # beats of it stored so far
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
        sent = Signal(range(B))                 # beats of the current descriptor already sent
        long = oversize.bit_select(desc.handle, 1)
        # The descriptor and beat egress shows in the next cycle: the spill core's output register
        # loads a drained head or a forwarded arrival (as hdl/spill_buffer.py SpillCore does).
        core = spill.core
        heads = []
        for p, fifo in enumerate(core.fifos):
            head = fifo.read_port(domain="comb")
            m.d.comb += head.addr.eq(core.heads[p])
            heads.append(head.data.handle)
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
        self._counters(m, agg, sym, spill_buffer.COUNTERS)
        for name, event in (("oversize", done & long), ("store_stalls", sym.o.valid & waiting)):
            counter = getattr(self, name)
            with m.If(event):
                m.d.sync += counter.eq(counter + 1)
        return m

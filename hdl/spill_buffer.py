"""Spillway spill buffer manager (SPEC section 1): parser + descriptor-level spill core."""
from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from hdl.headers import SPILL_HEADER_BYTES
from hdl.packet import packet_signature
from hdl.parse import Parser
from hdl.spill_node import link_layout
from models.params import check
from models.spill_buffer import (
    COUNTERS,
    CREDIT_COUNTERS,
    DROP,
    FORWARD,
    MIN_LENGTH,
    SPILL,
    SpillBufferParams,
    return_slot_beats,
    spill_header,
)
from models.wire import (
    ETHERTYPE_AT,
    ETHERTYPE_SPILL,
    SPILL_DATA,
    SPILL_DRAIN,
    SPILL_FLOW_AT,
    SPILL_OP_AT,
    SPILL_PORT_AT,
    SPILL_RETURN,
    SPILL_SEQ_AT,
)

__all__ = ["SpillBuffer", "SpillCore", "CreditCore", "SpillBufferParams", "COUNTERS", "CREDIT_COUNTERS",
           "MIN_LENGTH", "descriptor_layout", "arrival_layout", "verdict_layout", "Encapsulator",
           "Decapsulator"]

SEQ_BITS = 16


def descriptor_layout(handle_bits=16):
    """What the block hands to an egress queue: packet handle, port, length, re-injected mark."""
    return data.StructLayout({"handle": handle_bits, "port": 8, "length": 16, "spilled": 1})


def arrival_layout(handle_bits=16, flows=16):
    """What the parser hands to the spill core for each packet."""
    return data.StructLayout({"handle": handle_bits, "port": 8, "length": 16,
                              "flow": range(flows), "malformed": 1})


class SpillCore(wiring.Component):
    """Descriptor-level Spillway: decides forward / spill / drop per arrival on ``d`` and drains.

    Per arrival (one read-modify-write of the flow table and of the port's spill FIFO):

    - ``malformed`` set or ``port >= ports``: dropped, counter ``malformed``;
    - spilled when ``qdepth[port] >= high``, or, to keep per-flow order (go-back-N transparency),
      when its flow already has packets in the spill buffer (``order="flow"``; with
      ``order="port"``: when its port's spill FIFO is not empty). Flows sharing a flow-table entry
      are ordered together (safe, possibly more spilling than needed);
    - a spill into a FIFO holding ``capacity`` handles is dropped, ``spill_overflow``: a stored
      handle is never overwritten;
    - otherwise forwarded on ``o`` with ``spilled=0`` (``forwarded``).

    Drain: port ``p`` is eligible when its FIFO is not empty and ``qdepth[p] <= low``; at most
    ``drain_rate`` handles leave in each aligned window of ``drain_window`` cycles, ports served
    round-robin (starting after the last port served), FIFO order within a port. A drained handle
    leaves on ``o`` with ``spilled=1`` (``drained``) and is never spilled again. ``o`` is a
    register stage (latency 1, one descriptor per cycle): a drain takes it before a forwarded
    arrival, which then waits (``d.ready`` low); an arrival that is spilled or dropped never waits
    for ``o``. In a cycle with both a drain and an arrival of the same flow, the arrival sees the
    flow count before the drain's decrement, so it is spilled behind the drained packet.
    """

    def __init__(self, params=None):
        p = self.params = check(params, SpillBufferParams)
        ports, capacity, flows, handle_bits = p.ports, p.capacity, p.flows, p.handle_bits
        depth_bits, drain_rate, drain_window, counter_bits = p.depth_bits, p.drain_rate, p.drain_window, p.counter_bits
        self.ports, self.high, self.low, self.capacity = ports, p.high, p.low, capacity
        self.drain_rate, self.drain_window, self.flows, self.order = drain_rate, drain_window, flows, p.order
        self.handle_bits = handle_bits
        self.descriptor = descriptor_layout(handle_bits)
        signature = {
            "d": In(stream.Signature(arrival_layout(handle_bits, flows))),
            "o": Out(stream.Signature(self.descriptor)),
            "qdepth": In(data.ArrayLayout(depth_bits, ports)),
            "stored": Out(data.ArrayLayout(range(capacity + 1), ports)),
            "pending": Out(range(ports * capacity + 1)),
        }
        signature.update({name: Out(counter_bits) for name in COUNTERS})
        super().__init__(signature)
        # State, public for the formal spec: spill FIFOs (ring buffers) and the flow table.
        self.entry = data.StructLayout({"handle": handle_bits, "length": 16, "flow": range(flows)})
        self.fifos = [memory.Memory(shape=self.entry, depth=capacity, init=[]) for _ in range(ports)]
        self.heads = [Signal(range(capacity), name=f"head{p}") for p in range(ports)]
        self.tails = [Signal(range(capacity), name=f"tail{p}") for p in range(ports)]
        self.counts = [Signal(range(capacity + 1), name=f"count{p}") for p in range(ports)]
        self.flow_count = [Signal(range(ports * capacity + 1), name=f"flow_count{f}") for f in range(flows)]
        self.window = Signal(range(drain_window))   # cycle within the aligned drain window
        self.used = Signal(range(drain_rate + 1))   # drains in the current window
        self.rr = Signal(range(ports))              # round-robin: first port to look at
        # Decision of the current cycle.
        self.arrival = Signal()                     # a descriptor is accepted on d
        self.forward = Signal()
        self.spill = Signal()
        self.drop = Signal()
        self.drain = Signal()                       # a handle leaves the spill buffer
        self.drain_port = Signal(range(ports))

    def elaborate(self, platform):
        m = Module()
        P, C = self.ports, self.capacity
        arrival = self.d.payload
        port = arrival.port[:(P - 1).bit_length()]
        malformed = arrival.malformed | (arrival.port >= P)

        heads_data = []
        for p, fifo in enumerate(self.fifos):
            m.submodules[f"fifo{p}"] = fifo
            read = fifo.read_port(domain="comb")
            m.d.comb += read.addr.eq(self.heads[p])
            heads_data.append(read.data)
        counts = Array(self.counts)
        flow_count = Array(self.flow_count)
        window = self.window

        # Drain choice: the first eligible port at or after rr.
        eligible = Cat(*((self.counts[p] != 0) & (self.qdepth[p] <= self.low) for p in range(P)))
        chosen = self.drain_port
        found = Signal()
        for offset in reversed(range(P)):
            p = (self.rr + offset) % P
            with m.If(eligible.bit_select(p, 1)):
                m.d.comb += [chosen.eq(p), found.eq(1)]
        head = Array(heads_data)[chosen]
        load = ~self.o.valid | self.o.ready     # the output register takes a descriptor
        drain_wants = found & (self.used < self.drain_rate)
        m.d.comb += self.drain.eq(drain_wants & load)

        # Arrival decision.
        ordered = (flow_count[arrival.flow] if self.order == "flow" else counts[port]) != 0
        must_spill = (Array(self.qdepth)[port] >= self.high) | ordered
        full = counts[port] == C
        m.d.comb += [
            self.d.ready.eq(malformed | must_spill | (load & ~drain_wants)),
            self.arrival.eq(self.d.valid & self.d.ready),
            self.drop.eq(self.arrival & (malformed | (must_spill & full))),
            self.spill.eq(self.arrival & ~malformed & must_spill & ~full),
            self.forward.eq(self.arrival & ~malformed & ~must_spill),
        ]

        # Output register: a drained handle first, else a forwarded arrival.
        with m.If(load):
            m.d.sync += self.o.valid.eq(self.drain | self.forward)
            with m.If(self.drain):
                m.d.sync += [self.o.payload.handle.eq(head.handle), self.o.payload.port.eq(chosen),
                             self.o.payload.length.eq(head.length), self.o.payload.spilled.eq(1)]
            with m.Elif(self.forward):
                m.d.sync += [self.o.payload.handle.eq(arrival.handle), self.o.payload.port.eq(port),
                             self.o.payload.length.eq(arrival.length), self.o.payload.spilled.eq(0)]

        # Spill FIFOs and flow table: push on a spill, pop on a drain (same port: count unchanged).
        for p, fifo in enumerate(self.fifos):
            write = fifo.write_port()
            push = self.spill & (port == p)
            pop = self.drain & (chosen == p)
            m.d.comb += [write.addr.eq(self.tails[p]), write.en.eq(push),
                         write.data.handle.eq(arrival.handle), write.data.length.eq(arrival.length),
                         write.data.flow.eq(arrival.flow)]
            with m.If(push):
                m.d.sync += self.tails[p].eq(Mux(self.tails[p] == C - 1, 0, self.tails[p] + 1))
            with m.If(pop):
                m.d.sync += self.heads[p].eq(Mux(self.heads[p] == C - 1, 0, self.heads[p] + 1))
            m.d.sync += self.counts[p].eq(self.counts[p] + push - pop)
        for f in range(self.flows):
            add = self.spill & (arrival.flow == f)
            remove = self.drain & (head.flow == f)
            m.d.sync += self.flow_count[f].eq(self.flow_count[f] + add - remove)

        # Rate limiter (aligned windows) and round-robin pointer.
        with m.If(window == self.drain_window - 1):
            m.d.sync += [window.eq(0), self.used.eq(0)]
        with m.Else():
            m.d.sync += [window.eq(window + 1), self.used.eq(self.used + self.drain)]
        with m.If(self.drain):
            m.d.sync += self.rr.eq(Mux(chosen == P - 1, 0, chosen + 1))

        # Counters and occupancy.
        for name, event in (("forwarded", self.forward), ("spilled", self.spill),
                            ("drained", self.drain), ("spill_overflow", self.drop & ~malformed),
                            ("malformed", self.arrival & malformed)):
            counter = getattr(self, name)
            with m.If(event):
                m.d.sync += counter.eq(counter + 1)
        m.d.comb += [self.stored[p].eq(self.counts[p]) for p in range(P)]
        m.d.comb += self.pending.eq(sum(self.counts))
        return m


def _header(op, port, flow, seq, count=0):
    """The 22-byte spill header (``models.spill_buffer.spill_header``) as a value, byte 0 in the low lane."""
    fixed = spill_header(op, 0)
    flow, seq = (Cat(v, Const(0, 16))[:16] if hasattr(v, "shape") else Const(v, 16) for v in (flow, seq))
    return Cat(*(Const(b, 8) for b in fixed[:SPILL_PORT_AT]), port[:8] if hasattr(port, "shape") else Const(port, 8),
               flow[8:16], flow[0:8], seq[8:16], seq[0:8], Const(count, 8), Const(0, 8))


def _flow_fold(parser, flows):
    """The 5-tuple src/dst/proto/sport/dport XOR-folded into log2(``flows``) bits."""
    ip, udp = parser.ip, parser.udp
    key = Cat(udp.dport, udp.sport, ip.proto, ip.dst, ip.src)
    bits = (flows - 1).bit_length()
    fold = Const(0, bits)
    for k in range(0, len(key), bits):
        fold ^= key[k:k + bits]
    return fold


class SpillBuffer(wiring.Component):
    """Spills packets of congested egress ports to a disaggregated buffer and drains them back.

    ``params.mode`` chooses the design: ``"disaggregated"`` (the default, Spillway as the paper
    describes it: spilled packets leave whole on ``spill_o`` for a spill node and come back on
    ``spill_i``; see ``_elaborate_disaggregated``) or ``"inswitch"`` (the baseline, described next:
    spilled handles wait in FIFOs inside the switch, the packets in its packet store).

    In-switch mode: the block manages packet *handles*, as a traffic manager does; packet bytes stay in the
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
        p = self.params = check(params, SpillBufferParams)
        self.mode = p.mode
        if p.mode == "disaggregated":
            self._init_disaggregated(p)
            return
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
        if self.mode == "disaggregated":
            return self._elaborate_disaggregated(platform)
        m = Module()
        m.submodules.core = core = self.core
        beat = self.i.payload
        m.submodules.parser = parser = Parser(beat, self.i.valid & self.i.ready, header_bytes=MIN_LENGTH, hold=True)
        total = parser.length
        fold = _flow_fold(parser, self.flows)

        handle = Signal(core.handle_bits)
        with m.If(core.d.valid & core.d.ready):
            m.d.sync += handle.eq(handle + 1)
        m.d.comb += [
            core.d.valid.eq(self.i.valid & beat.last),
            core.d.payload.handle.eq(handle),
            core.d.payload.port.eq(beat.meta.port),
            core.d.payload.length.eq(total),
            core.d.payload.flow.eq(fold),
            core.d.payload.malformed.eq((total < MIN_LENGTH) | ~(parser.is_ipv4 & parser.is_ihl5 & parser.is_udp)),
            self.i.ready.eq(~beat.last | core.d.ready),
            core.qdepth.eq(self.qdepth),
        ]
        wiring.connect(m, wiring.flipped(self.o), core.o)
        m.d.comb += [self.stored.eq(core.stored), self.pending.eq(core.pending)]
        m.d.comb += [getattr(self, name).eq(getattr(core, name)) for name in COUNTERS]
        return m

    # --- mode="disaggregated": the switch side of the disaggregated Spillway -----------------------------

    def _init_disaggregated(self, p):
        """Ports: ``i``, ``qdepth`` as in-switch; ``o`` the packet stream out (``meta = {port, spilled}``:
        forwarded and re-injected packets); ``spill_o`` / ``spill_i`` the spill link (``spill_i.ready``
        always 1); ``credits[p]``; ``outstanding`` (spilled, not yet re-injected); ``CREDIT_COUNTERS``."""
        self.core = CreditCore(p)
        self.ports, self.capacity, self.data_bytes, self.flows = p.ports, p.capacity, p.data_bytes, p.flows
        self.buffer, self.slots, self.slot_beats = p.buffer, p.return_slots, return_slot_beats(p)
        self.out_meta = data.StructLayout({"port": 8, "spilled": 1})
        self.link = link_layout(p.data_bytes)
        signature = {
            "i": In(packet_signature(p.data_bytes)),
            "o": Out(packet_signature(p.data_bytes, self.out_meta)),
            "qdepth": In(data.ArrayLayout(p.depth_bits, p.ports)),
            "spill_o": Out(stream.Signature(self.link)),
            "spill_i": In(stream.Signature(self.link)),
            "credits": Out(data.ArrayLayout(range(p.capacity + 1), p.ports)),
            "outstanding": Out(range(p.ports * p.capacity + 1)),
        }
        signature.update({name: Out(p.counter_bits) for name in CREDIT_COUNTERS})
        wiring.Component.__init__(self, signature)
        # The return buffer, public for the formal spec: its memory (``return_slots`` slots of ``slot_beats``
        # beats), the receive side (inside a frame, that frame accepted, its slot and next beat), the frames
        # committed and not yet read, and the read side (slot and next beat).
        B, S = self.slot_beats, self.slots
        cell = data.StructLayout({"data": 8 * p.data_bytes, "keep": p.data_bytes, "last": 1})
        self.ret_mem = memory.Memory(shape=cell, depth=S * B, init=[])
        self.rx_inside, self.wr_ok = Signal(name="rx_inside"), Signal(name="wr_ok")
        self.wr_slot, self.wr_index = Signal(range(S), name="wr_slot"), Signal(range(B + 1), name="wr_index")
        self.committed = Signal(range(S + 1))
        self.rd_slot, self.rd_index = Signal(range(S), name="rd_slot"), Signal(range(B), name="rd_index")
        self.dec = Decapsulator(p.data_bytes)
        self.owner = Signal(2, name="owner")   # o's packet in progress: 0 none, 1 a returned, 2 a forwarded one

    def _elaborate_disaggregated(self, platform):
        m = Module()
        p = self.params
        W, P, C, B, S = self.data_bytes, self.ports, self.capacity, self.slot_beats, self.slots
        H = SPILL_HEADER_BYTES
        m.submodules.core = core = self.core
        m.submodules.enc = enc = Encapsulator(W)
        m.submodules.dec = dec = self.dec
        cell = data.StructLayout({"data": 8 * W, "keep": W, "last": 1})
        entry = data.StructLayout({"verdict": verdict_layout(p.handle_bits, p.flows), "beats": range(p.buffer + 1)})
        m.submodules.beats = beats = SyncFIFO(width=cell.size, depth=p.buffer)
        m.submodules.verdicts = verdicts = SyncFIFO(width=entry.size, depth=p.buffer)

        # --- Ingress: the FIFO of beats, the parser and the credit core's verdict at the last beat.
        beat = self.i.payload
        wcount = Signal(range(p.buffer + 1))    # beats of the current packet written (saturates)
        discard = wcount == p.buffer            # a giant packet: its further beats are discarded
        m.d.comb += self.i.ready.eq(beats.w_rdy | discard)
        transfer = self.i.valid & self.i.ready
        write = transfer & ~discard
        m.submodules.parser = parser = Parser(beat, transfer, header_bytes=MIN_LENGTH, hold=True)
        w_cell = data.View(cell, beats.w_data)
        m.d.comb += [beats.w_en.eq(write), w_cell.data.eq(beat.data), w_cell.keep.eq(beat.keep),
                     w_cell.last.eq(beat.last)]
        handle = Signal(p.handle_bits)
        total = parser.length
        m.d.comb += [
            core.d.valid.eq(transfer & beat.last),
            core.d.payload.handle.eq(handle),
            core.d.payload.port.eq(beat.meta.port),
            core.d.payload.length.eq(total),
            core.d.payload.flow.eq(_flow_fold(parser, self.flows)),
            core.d.payload.malformed.eq((total < MIN_LENGTH) | ~(parser.is_ipv4 & parser.is_ihl5 & parser.is_udp)
                                        | discard),
            core.v.ready.eq(1),                 # the verdict FIFO holds at most one entry per beat held
            core.qdepth.eq(self.qdepth),
        ]
        w_entry = data.View(entry, verdicts.w_data)
        m.d.comb += [verdicts.w_en.eq(core.d.valid), w_entry.verdict.eq(core.v.payload),
                     w_entry.beats.eq(wcount + write)]
        with m.If(transfer):
            m.d.sync += wcount.eq(Mux(beat.last, 0, wcount + write))
            with m.If(beat.last):
                m.d.sync += handle.eq(handle + 1)

        # --- FIFO head: forward (to o), spill (to the encapsulator) or discard.
        head = data.View(entry, verdicts.r_data)
        hbeat = data.View(cell, beats.r_data)
        verdict = head.verdict
        hindex = Signal(range(p.buffer))
        have = verdicts.r_rdy
        fwd_valid = have & (verdict.kind == FORWARD)
        drop = have & (verdict.kind == DROP)
        m.d.comb += [
            enc.i.valid.eq(have & (verdict.kind == SPILL)),
            enc.i.payload.data.eq(hbeat.data), enc.i.payload.keep.eq(hbeat.keep),
            enc.i.payload.last.eq(hbeat.last), enc.i.payload.first.eq(hindex == 0),
            enc.hdr.eq(_header(SPILL_DATA, verdict.port[:8], verdict.flow, verdict.seq)),
        ]

        # --- Return buffer: read side through the decapsulator.
        m.submodules.ret_mem = mem = self.ret_mem
        committed = self.committed
        rd_slot, rd_index = self.rd_slot, self.rd_index
        ret_port, ret_flow, ret_seq = Signal(8), Signal(SEQ_BITS), Signal(SEQ_BITS)
        read = mem.read_port(domain="comb")
        m.d.comb += [read.addr.eq(rd_slot * B + rd_index), dec.i.valid.eq(committed != 0),
                     dec.i.payload.data.eq(read.data.data), dec.i.payload.keep.eq(read.data.keep),
                     dec.i.payload.last.eq(read.data.last), dec.i.payload.first.eq(rd_index == 0)]
        rd_last = dec.i.valid & dec.i.ready & read.data.last
        with m.If(dec.i.valid & dec.i.ready):
            m.d.sync += [rd_index.eq(Mux(read.data.last, 0, rd_index + 1))]
            with m.If(read.data.last):
                m.d.sync += rd_slot.eq(Mux(rd_slot == S - 1, 0, rd_slot + 1))
            with m.If(rd_index == 0):
                octets = [read.data.data[8 * k:8 * k + 8] for k in range(H)]
                m.d.sync += [ret_port.eq(octets[SPILL_PORT_AT]),
                             ret_flow.eq(Cat(octets[SPILL_FLOW_AT + 1], octets[SPILL_FLOW_AT])),
                             ret_seq.eq(Cat(octets[SPILL_SEQ_AT + 1], octets[SPILL_SEQ_AT]))]

        # --- o: packet-boundary arbitration, returned packets first.
        owner = self.owner
        sel_r = (owner == 1) | ((owner == 0) & dec.o.valid)
        sel_f = (owner == 2) | ((owner == 0) & ~dec.o.valid & fwd_valid)
        out = self.o.payload
        with m.If(sel_r):
            m.d.comb += [self.o.valid.eq(dec.o.valid), out.data.eq(dec.o.payload.data),
                         out.keep.eq(dec.o.payload.keep), out.first.eq(dec.o.payload.first),
                         out.last.eq(dec.o.payload.last), out.meta.port.eq(ret_port), out.meta.spilled.eq(1)]
        with m.Elif(sel_f):
            m.d.comb += [self.o.valid.eq(fwd_valid), out.data.eq(hbeat.data), out.keep.eq(hbeat.keep),
                         out.first.eq(hindex == 0), out.last.eq(hbeat.last), out.meta.port.eq(verdict.port[:8]),
                         out.meta.spilled.eq(0)]
        m.d.comb += dec.o.ready.eq(self.o.ready & sel_r)
        sent = self.o.valid & self.o.ready
        with m.If(sent):
            m.d.sync += owner.eq(Mux(out.last, 0, Mux(sel_r, 1, 2)))
        m.d.comb += [core.done_valid.eq(sent & sel_r & out.last), core.done_port.eq(ret_port),
                     core.done_flow.eq(ret_flow), core.done_seq.eq(ret_seq)]

        # --- spill_o: a DRAIN frame first at frame boundaries, else the encapsulator.
        enc_busy = enc.inside | enc.extra
        drain_sel = core.req.valid & ~enc_busy
        m.d.comb += [core.req.ready.eq(~enc_busy & self.spill_o.ready),
                     enc.o.ready.eq(self.spill_o.ready & ~drain_sel)]
        with m.If(drain_sel):
            m.d.comb += [self.spill_o.valid.eq(1),
                         self.spill_o.payload.data.eq(_header(SPILL_DRAIN, core.req.payload.port, 0, 0, 1)),
                         self.spill_o.payload.keep.eq((1 << H) - 1),
                         self.spill_o.payload.first.eq(1), self.spill_o.payload.last.eq(1)]
        with m.Else():
            m.d.comb += [self.spill_o.valid.eq(enc.o.valid), self.spill_o.payload.eq(enc.o.payload)]

        # Head pops: a beat forwarded, taken by the encapsulator, or discarded.
        pop = (fwd_valid & self.o.ready & sel_f) | (enc.i.valid & enc.i.ready) | drop
        end = hbeat.last | (hindex + 1 == head.beats)
        m.d.comb += [beats.r_en.eq(pop), verdicts.r_en.eq(pop & end)]
        with m.If(pop):
            m.d.sync += hindex.eq(Mux(end, 0, hindex + 1))

        # A drain request for port q only while some of q's unrequested packets have left on spill_o
        # (the DRAIN frame must reach the node behind the DATA frame it asks for).
        spilled_now = core.decided & (core.v.payload.kind == SPILL)
        sent_now = enc.i.valid & enc.i.ready & end
        unsent = [Signal(range(C + 1), name=f"unsent{q}") for q in range(P)]
        for q in range(P):
            m.d.sync += unsent[q].eq(unsent[q] + (spilled_now & (core.v.payload.port == q))
                                     - (sent_now & (verdict.port == q)))
            m.d.comb += core.hold[q].eq(core.unasked[q] <= unsent[q])

        # --- Return link: first-beat check, write into the next slot, commit at the last beat.
        rx = self.spill_i.valid
        rbeat = self.spill_i.payload
        m.d.comb += self.spill_i.ready.eq(1)
        rx_inside, wr_ok = self.rx_inside, self.wr_ok
        wr_slot, wr_index = self.wr_slot, self.wr_index
        first = rx & ~rx_inside
        octets = [rbeat.data[8 * k:8 * k + 8] for k in range(H)]
        good = ((Cat(octets[ETHERTYPE_AT + 1], octets[ETHERTYPE_AT]) == ETHERTYPE_SPILL)
                & (octets[SPILL_OP_AT] == SPILL_RETURN) & ~(rbeat.last & ~rbeat.keep[H]))
        m.d.comb += [core.ret_valid.eq(first), core.ret_port.eq(octets[SPILL_PORT_AT]), core.ret_bad.eq(~good)]
        ok = Mux(first, core.ret_ok, wr_ok)
        write_port = mem.write_port()
        m.d.comb += [write_port.addr.eq(wr_slot * B + wr_index), write_port.en.eq(rx & ok & (wr_index < B)),
                     write_port.data.data.eq(rbeat.data), write_port.data.keep.eq(rbeat.keep),
                     write_port.data.last.eq(rbeat.last | (wr_index == B - 1))]
        commit = rx & ok & rbeat.last
        with m.If(rx):
            m.d.sync += [rx_inside.eq(~rbeat.last),
                         wr_index.eq(Mux(rbeat.last, 0, Mux(wr_index == B, B, wr_index + 1)))]
            with m.If(first):
                m.d.sync += wr_ok.eq(core.ret_ok)
        with m.If(commit):
            m.d.sync += wr_slot.eq(Mux(wr_slot == S - 1, 0, wr_slot + 1))
        m.d.sync += committed.eq(committed + commit - rd_last)

        m.d.comb += [self.credits[q].eq(core.credits[q]) for q in range(P)]
        m.d.comb += self.outstanding.eq(P * C - sum(core.credits[q] for q in range(P)))
        m.d.comb += [getattr(self, name).eq(getattr(core, name)) for name in CREDIT_COUNTERS]
        return m


def verdict_layout(handle_bits=16, flows=16):
    """What ``CreditCore`` decides for an arrival: the descriptor, its spill ``seq`` and ``kind``
    (``models.spill_buffer.FORWARD``, ``SPILL`` or ``DROP``)."""
    return data.StructLayout({"handle": handle_bits, "port": 8, "length": 16, "flow": range(flows),
                              "seq": SEQ_BITS, "kind": 2})


class CreditCore(wiring.Component):
    """Disaggregated Spillway, descriptor level: spill decisions with per-port credits for the spill
    node, drain requests, and the bookkeeping of returns (see ``models.spill_buffer.CreditCoreModel``,
    which this matches cycle for cycle).

    Ports: ``d`` arrivals (as ``SpillCore``); ``v`` the verdict of the arrival on ``d`` in the same
    cycle (``d.ready = v.ready``); ``qdepth``; ``req`` drain requests (origin ``port``; port ``q`` is not eligible while
    ``hold[q]``); ``ret_valid``
    / ``ret_port`` a RETURN frame's first beat (``ret_bad``: its header is not a RETURN's, never ok)
    and ``ret_ok`` whether it was asked for; ``done_*`` a
    re-injected packet's last beat (its port, flow and seq from the spill header); ``credits[p]``.
    State (public for the formal spec): ``credit``, ``unasked``, ``asked``, ``seqs``, ``expect``,
    ``flow_count``, ``reserved``, ``window``, ``used``, ``rr``.
    """

    def __init__(self, params=None):
        p = self.params = check(params, SpillBufferParams)
        P, C, F = p.ports, p.capacity, p.flows
        self.ports, self.capacity, self.flows = P, C, F
        signature = {
            "d": In(stream.Signature(arrival_layout(p.handle_bits, F))),
            "v": Out(stream.Signature(verdict_layout(p.handle_bits, F))),
            "qdepth": In(data.ArrayLayout(p.depth_bits, P)),
            "req": Out(stream.Signature(data.StructLayout({"port": 8}))),
            "hold": In(P),
            "ret_valid": In(1), "ret_port": In(8), "ret_bad": In(1), "ret_ok": Out(1),
            "done_valid": In(1), "done_port": In(8), "done_flow": In(SEQ_BITS), "done_seq": In(SEQ_BITS),
            "credits": Out(data.ArrayLayout(range(C + 1), P)),
        }
        signature.update({name: Out(p.counter_bits) for name in CREDIT_COUNTERS})
        super().__init__(signature)
        self.credit = [Signal(range(C + 1), name=f"credit{q}", init=C) for q in range(P)]
        self.unasked = [Signal(range(C + 1), name=f"unasked{q}") for q in range(P)]
        self.asked = [Signal(range(C + 1), name=f"asked{q}") for q in range(P)]
        self.seqs = [Signal(SEQ_BITS, name=f"seq{q}") for q in range(P)]
        self.expect = [Signal(SEQ_BITS, name=f"expect{q}") for q in range(P)]
        self.flow_count = [Signal(range(P * C + 1), name=f"flow_count{f}") for f in range(F)]
        self.reserved = Signal(range(p.return_slots + 1))
        self.window = Signal(range(p.drain_window))
        self.used = Signal(range(p.drain_rate + 1))
        self.rr = Signal(range(P))
        self.decided = Signal()                 # a verdict is taken in this cycle
        self.requested = Signal()               # a drain request is made in this cycle

    def elaborate(self, platform):
        m = Module()
        p = self.params
        P, C = self.ports, self.capacity
        bits = max(1, (P - 1).bit_length())
        credit, asked, seqs = Array(self.credit), Array(self.asked), Array(self.seqs)
        flow_count = Array(self.flow_count)
        a = self.d.payload
        port = a.port[:bits]
        port_ok = a.port < P
        bad = a.malformed | ~port_ok
        ordered = (flow_count[a.flow] != 0) if p.order == "flow" else (credit[port] != C)
        must_spill = ~bad & ((Array(self.qdepth)[port] >= p.high) | ordered)
        oversize = must_spill & (a.length > p.mtu)
        overflow = must_spill & ~oversize & (credit[port] == 0)
        spill = must_spill & ~oversize & ~overflow
        forward = ~bad & ~must_spill
        kind = Mux(spill, SPILL, Mux(forward, 0, 2))
        m.d.comb += [
            self.d.ready.eq(self.v.ready), self.v.valid.eq(self.d.valid),
            self.v.payload.handle.eq(a.handle), self.v.payload.port.eq(a.port),
            self.v.payload.length.eq(a.length), self.v.payload.flow.eq(a.flow),
            self.v.payload.seq.eq(Mux(spill, seqs[port], 0)), self.v.payload.kind.eq(kind),
            self.decided.eq(self.d.valid & self.v.ready),
        ]
        take = self.decided & spill

        # Drain request: round-robin over eligible ports, rate and return-slot limits.
        eligible = Cat(*((self.unasked[q] != 0) & (self.qdepth[q] <= p.low) & ~self.hold[q] for q in range(P)))
        chosen = Signal(range(P))
        found = Signal()
        for offset in reversed(range(P)):
            q = (self.rr + offset) % P
            with m.If(eligible.bit_select(q, 1)):
                m.d.comb += [chosen.eq(q), found.eq(1)]
        m.d.comb += [
            self.req.valid.eq(found & (self.used < p.drain_rate) & (self.reserved < p.return_slots)),
            self.req.payload.port.eq(chosen),
            self.requested.eq(self.req.valid & self.req.ready),
        ]

        # Returns: a frame's first beat, and a re-injected packet's last beat.
        ret_port = self.ret_port[:bits]
        m.d.comb += self.ret_ok.eq(self.ret_valid & ~self.ret_bad & (self.ret_port < P) & (asked[ret_port] != 0))
        done_port = self.done_port[:bits]
        done_flow = self.done_flow[:max(1, (self.flows - 1).bit_length())]
        misordered = self.done_valid & (self.done_seq != Array(self.expect)[done_port])

        for q in range(P):
            spend = take & (port == q)
            refund = self.done_valid & (done_port == q)
            ask = self.requested & (chosen == q)
            got = self.ret_ok & (ret_port == q)
            m.d.sync += [
                self.credit[q].eq(self.credit[q] - spend + refund),
                self.unasked[q].eq(self.unasked[q] + spend - ask),
                self.asked[q].eq(self.asked[q] + ask - got),
            ]
            with m.If(spend):
                m.d.sync += self.seqs[q].eq(self.seqs[q] + 1)
            with m.If(refund):
                m.d.sync += self.expect[q].eq(self.expect[q] + 1)
        for f in range(self.flows):
            m.d.sync += self.flow_count[f].eq(self.flow_count[f] + (take & (a.flow == f))
                                              - (self.done_valid & (done_flow == f)))
        m.d.sync += self.reserved.eq(self.reserved + self.requested - self.done_valid)
        with m.If(self.window == p.drain_window - 1):
            m.d.sync += [self.window.eq(0), self.used.eq(0)]
        with m.Else():
            m.d.sync += [self.window.eq(self.window + 1), self.used.eq(self.used + self.requested)]
        with m.If(self.requested):
            m.d.sync += self.rr.eq(Mux(chosen == P - 1, 0, chosen + 1))

        for name, event in (("forwarded", self.decided & forward), ("spilled", take),
                            ("reinjected", self.done_valid), ("spill_overflow", self.decided & overflow),
                            ("spill_oversize", self.decided & oversize), ("malformed", self.decided & bad),
                            ("drain_requests", self.requested),
                            ("return_malformed", self.ret_valid & ~self.ret_ok), ("misordered", misordered)):
            counter = getattr(self, name)
            with m.If(event):
                m.d.sync += counter.eq(counter + 1)
        m.d.comb += [self.credits[q].eq(self.credit[q]) for q in range(P)]
        return m


class Encapsulator(wiring.Component):
    """Prepends a spill header to a packet: the byte stream ``i`` (one packet after another) leaves on
    ``o`` as ``hdr`` (``SPILL_HEADER_BYTES`` bytes, byte 0 in the low lane, sampled at each packet's
    first beat) followed by the packet. Each output beat is the previous input beat's top 22 bytes
    (or the header) and the current beat's low ``data_bytes - 22``; a last input beat holding more
    than ``data_bytes - 22`` bytes is followed by one extra output beat. ``i.ready = o.ready``
    except during that extra beat; no added latency (combinational path from ``i`` to ``o``).
    """

    def __init__(self, data_bytes=64):
        if not isinstance(data_bytes, int) or data_bytes <= SPILL_HEADER_BYTES:
            raise ValueError(f"Encapsulator: data_bytes = {data_bytes!r} must be an int above {SPILL_HEADER_BYTES}")
        self.data_bytes, self.H = data_bytes, SPILL_HEADER_BYTES
        layout = link_layout(data_bytes)
        super().__init__({"i": In(stream.Signature(layout)), "o": Out(stream.Signature(layout)),
                          "hdr": In(8 * SPILL_HEADER_BYTES)})
        self.inside, self.extra = Signal(), Signal()    # within a frame; sending the extra last beat

    def elaborate(self, platform):
        m = Module()
        W, H = self.data_bytes, self.H
        beat, out = self.i.payload, self.o.payload
        inside, extra = self.inside, self.extra
        carry, extra_keep = Signal(8 * H), Signal(H)
        head = Mux(inside, carry, self.hdr)
        spills = beat.keep[W - H]               # the last beat has more than W - H bytes
        with m.If(extra):
            m.d.comb += [self.o.valid.eq(1), out.data.eq(carry), out.keep.eq(extra_keep), out.last.eq(1),
                         out.first.eq(0), self.i.ready.eq(0)]
            with m.If(self.o.ready):
                m.d.sync += extra.eq(0)
        with m.Else():
            m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready),
                         out.data.eq(Cat(head, beat.data[:8 * (W - H)])),
                         out.keep.eq(Cat(Const((1 << H) - 1, H), beat.keep[:W - H])),
                         out.last.eq(beat.last & ~spills), out.first.eq(~inside)]
            with m.If(self.i.valid & self.o.ready):
                m.d.sync += [carry.eq(beat.data[8 * (W - H):]), inside.eq(~beat.last)]
                with m.If(beat.last & spills):
                    m.d.sync += [extra.eq(1), extra_keep.eq(beat.keep[W - H:])]
        return m


class Decapsulator(wiring.Component):
    """Strips the spill header: each frame on ``i`` leaves on ``o`` without its first
    ``SPILL_HEADER_BYTES`` bytes. Output beat k is the top ``data_bytes - 22`` bytes of input beat k
    and the low 22 bytes of input beat k + 1: the first input beat is absorbed without output (one
    beat of lookahead), and a last input beat with more than 22 bytes is followed by one extra
    output beat. A frame of at most 22 bytes produces nothing (the caller drops it as malformed).
    """

    def __init__(self, data_bytes=64):
        if not isinstance(data_bytes, int) or data_bytes <= SPILL_HEADER_BYTES:
            raise ValueError(f"Decapsulator: data_bytes = {data_bytes!r} must be an int above {SPILL_HEADER_BYTES}")
        self.data_bytes, self.H = data_bytes, SPILL_HEADER_BYTES
        layout = link_layout(data_bytes)
        super().__init__({"i": In(stream.Signature(layout)), "o": Out(stream.Signature(layout))})
        # State, public for the formal spec: a frame's beat is held, its output has begun, the extra beat is due.
        self.have, self.emitted, self.flush = Signal(name="have"), Signal(name="emitted"), Signal(name="flush")

    def elaborate(self, platform):
        m = Module()
        W, H = self.data_bytes, self.H
        beat, out = self.i.payload, self.o.payload
        have, emitted, flush = self.have, self.emitted, self.flush
        held, flush_keep = Signal(8 * (W - H)), Signal(W - H)
        rest = beat.keep[H]                     # the beat holds more than H bytes
        with m.If(flush):
            m.d.comb += [self.o.valid.eq(1), out.data.eq(held), out.keep.eq(flush_keep), out.last.eq(1),
                         out.first.eq(~emitted), self.i.ready.eq(0)]
            with m.If(self.o.ready):
                m.d.sync += [flush.eq(0), emitted.eq(0)]
        with m.Elif(~have):
            m.d.comb += self.i.ready.eq(1)
            with m.If(self.i.valid):
                m.d.sync += [held.eq(beat.data[8 * H:]), have.eq(~beat.last)]
                with m.If(beat.last & rest):
                    m.d.sync += [flush.eq(1), flush_keep.eq(beat.keep[H:])]
        with m.Else():
            m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready),
                         out.data.eq(Cat(held, beat.data[:8 * H])),
                         out.keep.eq(Cat(Const((1 << (W - H)) - 1, W - H), beat.keep[:H])),
                         out.last.eq(beat.last & ~rest), out.first.eq(~emitted)]
            with m.If(self.i.valid & self.o.ready):
                m.d.sync += [held.eq(beat.data[8 * H:]), emitted.eq(~(beat.last & ~rest))]
                with m.If(beat.last):
                    m.d.sync += have.eq(0)
                    with m.If(rest):
                        m.d.sync += [flush.eq(1), flush_keep.eq(beat.keep[H:])]
        return m

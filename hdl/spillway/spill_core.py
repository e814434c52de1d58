"""The in-switch Spillway baseline's descriptor-level core: spill FIFOs of packet handles in the switch."""
from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.counters import count_event
from hdl.spillway.arrival import arrival_layout, descriptor_layout
from models.params import check
from models.spillway.inswitch import COUNTERS
from models.spillway.params import InSwitchParams

__all__ = ["SpillCore"]


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

    The spill FIFOs are SRAM with a registered read (block RAM on an FPGA): each head is read at the
    address the head will have in the next cycle (written through when a handle is pushed there), so the
    head is what a combinational read would show, with no added latency.
    """

    def __init__(self, params=None):
        p = self.params = check(params, InSwitchParams)
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
        # Each FIFO's head through a registered read (SRAM): its address is the next cycle's head, and a
        # handle written to that address in this cycle is read through (a push into an empty FIFO); the
        # heads' data, public for a design around the core, is what a combinational read of the heads shows.
        self.writes = [fifo.write_port() for fifo in self.fifos]
        self.head_reads = [fifo.read_port(transparent_for=(write,)) for fifo, write in zip(self.fifos, self.writes)]
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

        writes, reads = self.writes, self.head_reads
        for p, fifo in enumerate(self.fifos):
            m.submodules[f"fifo{p}"] = fifo
        heads_data = [read.data for read in reads]
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
        for p, write in enumerate(writes):
            push = self.spill & (port == p)
            pop = self.drain & (chosen == p)
            m.d.comb += [write.addr.eq(self.tails[p]), write.en.eq(push),
                         write.data.handle.eq(arrival.handle), write.data.length.eq(arrival.length),
                         write.data.flow.eq(arrival.flow)]
            with m.If(push):
                m.d.sync += self.tails[p].eq(Mux(self.tails[p] == C - 1, 0, self.tails[p] + 1))
            next_head = Mux(pop, Mux(self.heads[p] == C - 1, 0, self.heads[p] + 1), self.heads[p])
            m.d.comb += reads[p].addr.eq(next_head)
            m.d.sync += [self.heads[p].eq(next_head), self.counts[p].eq(self.counts[p] + push - pop)]
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
            count_event(m, getattr(self, name), event, overflow="wrap")
        m.d.comb += [self.stored[p].eq(self.counts[p]) for p in range(P)]
        m.d.comb += self.pending.eq(sum(self.counts))
        return m

"""Spillway spill buffer manager (SPEC section 1)."""
from amaranth.hdl import Array, Assert, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.headers import ETHERNET, ETHERTYPE_IPV4, IP_OFFSET, IPPROTO_UDP, IPV4, UDP, UDP_OFFSET, wire_view
from hdl.packet import packet_signature

__all__ = ["SpillBuffer", "COUNTERS", "MIN_LENGTH", "descriptor_layout"]

#: Per-reason packet counters; packets in = forwarded + pending + drained + spill_overflow + malformed.
COUNTERS = ("forwarded", "spilled", "drained", "spill_overflow", "malformed")
#: Ethernet + IPv4 + UDP: the shortest packet whose 5-tuple can be read.
MIN_LENGTH = UDP_OFFSET + UDP.size // 8


def descriptor_layout(handle_bits=16, port_bits=8, length_bits=16):
    """What the block hands to an egress queue: packet handle, port, length, re-injected mark."""
    return data.StructLayout({"handle": handle_bits, "port": port_bits, "length": length_bits,
                              "spilled": 1})


class SpillBuffer(wiring.Component):
    """Spills packets of congested egress ports to a disaggregated buffer and drains them back.

    The block manages packet *handles*, as a traffic manager does; packet bytes stay in the
    switch's packet memory. A parser turns each packet of the byte stream ``i`` (egress port in
    ``meta.port``) into a descriptor on its last beat: ``handle`` (arrival number modulo
    2**``handle_bits``), ``port``, ``length`` (bytes) and its flow (5-tuple XOR-folded into
    log2(``flows``) bits, *chosen*). ``qdepth[p]`` is the depth (packets) of egress queue ``p``.

    Per packet, decided in the cycle its last beat arrives (one read-modify-write of the flow
    table and of the port's spill FIFO):

    - not Ethernet/IPv4 (IHL 5)/UDP, shorter than ``MIN_LENGTH`` bytes, or ``port >= ports``:
      dropped, ``malformed`` (*chosen*);
    - spilled when ``qdepth[port] >= high``, or, to keep per-flow order (go-back-N transparency),
      when its flow already has packets in the spill buffer (``order="flow"``; with
      ``order="port"``: when its port's spill FIFO is not empty). Flows sharing a flow-table entry
      are ordered together (safe, possibly more spilling than needed);
    - a spill into a FIFO holding ``capacity`` handles is dropped, ``spill_overflow``: a stored
      handle is never overwritten;
    - otherwise forwarded on ``o`` with ``spilled=0`` (``forwarded``).

    Drain: port ``p`` is eligible when its FIFO is not empty and ``qdepth[p] <= low``; at most
    ``drain_rate`` handles leave in each aligned window of ``drain_window`` cycles, ports served
    round-robin, FIFO order within a port. A drained handle leaves on ``o`` with ``spilled=1``
    (``drained``) and is never spilled again. ``o`` is a register stage (latency 1, one
    descriptor per cycle): a drain takes it before a forwarded arrival, which then waits
    (``i.ready`` low); an arrival that is spilled or dropped never waits for ``o``.

    Reset empties the spill FIFOs (the traffic manager frees their packets) and the counters.
    """

    def __init__(self, ports=4, high=24, low=8, capacity=16, drain_rate=1, drain_window=2,
                 flows=16, order="flow", depth_bits=16, handle_bits=16, data_bytes=64,
                 counter_bits=32):
        assert order in ("flow", "port"), "order is 'flow' or 'port'"
        assert 0 <= low < high < 1 << depth_bits, "watermarks need 0 <= low < high"
        assert 1 <= drain_rate <= drain_window and capacity >= 1 and ports >= 1
        assert flows >= 2 and flows & (flows - 1) == 0, "flows is a power of two >= 2"
        assert data_bytes >= MIN_LENGTH, "the 5-tuple must sit in the first beat"
        self.ports, self.high, self.low, self.capacity = ports, high, low, capacity
        self.drain_rate, self.drain_window, self.flows, self.order = drain_rate, drain_window, flows, order
        self.depth_bits, self.handle_bits, self.data_bytes = depth_bits, handle_bits, data_bytes
        self.descriptor = descriptor_layout(handle_bits)
        signature = {
            "i": In(packet_signature(data_bytes)),
            "o": Out(stream.Signature(self.descriptor)),
            "qdepth": In(data.ArrayLayout(depth_bits, ports)),
            "stored": Out(data.ArrayLayout(range(capacity + 1), ports)),
            "pending": Out(range(ports * capacity + 1)),
        }
        signature.update({name: Out(counter_bits) for name in COUNTERS})
        super().__init__(signature)
        # Decision of the current cycle, named for the formal spec and the waveforms.
        self.arrival = Signal()                 # a descriptor is accepted this cycle
        self.handle = Signal(handle_bits)
        self.flow = Signal(range(flows))
        self.forward = Signal()
        self.spill = Signal()
        self.drop = Signal()
        self.drain = Signal()                   # a handle leaves the spill buffer this cycle
        self.drain_port = Signal(range(ports))

    def _parse(self, m):
        """Descriptor fields of the packet whose last beat is on ``i`` (headers from beat 0)."""
        beat = self.i.payload
        inside = Signal()                       # a beat of this packet was already accepted
        length = Signal(16)
        header = Signal(8 * MIN_LENGTH)         # the first MIN_LENGTH bytes of the packet
        count = Signal(range(self.data_bytes + 1))
        m.d.comb += count.eq(sum(beat.keep[k] for k in range(self.data_bytes)))
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += inside.eq(~beat.last)
            with m.If(~inside):
                m.d.sync += header.eq(beat.data[:8 * MIN_LENGTH])
            m.d.sync += length.eq(Mux(inside, length, 0) + count)
        first = Signal(8 * MIN_LENGTH)
        m.d.comb += first.eq(Mux(inside, header, beat.data[:8 * MIN_LENGTH]))
        eth = wire_view(ETHERNET, first, 0)
        ip = wire_view(IPV4, first, IP_OFFSET)
        udp = wire_view(UDP, first, UDP_OFFSET)
        total = Signal(16)
        m.d.comb += total.eq(Mux(inside, length, 0) + count)
        malformed = Signal()
        m.d.comb += malformed.eq((total < MIN_LENGTH) | (eth.type != ETHERTYPE_IPV4) | (ip.version != 4) |
                     (ip.ihl != 5) | (ip.proto != IPPROTO_UDP) | (beat.meta.port >= self.ports))
        flow = Signal(range(self.flows))
        key = Cat(udp.dport, udp.sport, ip.proto, ip.dst, ip.src)
        bits = (self.flows - 1).bit_length()
        fold = 0
        for k in range(0, len(key), bits):
            fold ^= key[k:k + bits]
        m.d.comb += flow.eq(fold)
        return total, malformed, flow

    def elaborate(self, platform):
        m = Module()
        P, C = self.ports, self.capacity
        beat = self.i.payload
        length, malformed, flow = self._parse(m)
        port = beat.meta.port[:max(1, (P - 1).bit_length())]

        # Spill FIFOs (handle, length, flow per entry), flow table, rate limiter, round-robin.
        entry = data.StructLayout({"handle": self.handle_bits, "length": 16, "flow": range(self.flows)})
        fifos, heads, tails, counts = [], [], [], []
        for p in range(P):
            fifo = memory.Memory(shape=entry, depth=C, init=[])
            m.submodules[f"fifo{p}"] = fifo
            fifos.append((fifo.write_port(), fifo.read_port(domain="comb")))
            heads.append(Signal(range(C), name=f"head{p}"))
            tails.append(Signal(range(C), name=f"tail{p}"))
            counts.append(Signal(range(C + 1), name=f"count{p}"))
        counts_a = Array(counts)
        depths = Array(self.qdepth[p] for p in range(P))
        flow_count = Array(Signal(range(P * C + 1), name=f"flow_count{f}") for f in range(self.flows))
        window = Signal(range(self.drain_window))
        used = Signal(range(self.drain_rate + 1))
        rr = Signal(range(P))

        # Drain choice: the first eligible port at or after rr.
        eligible = Cat(*((counts[p] != 0) & (self.qdepth[p] <= self.low) for p in range(P)))
        chosen = Signal(range(P))
        found = Signal()
        for offset in reversed(range(P)):
            p = (rr + offset) % P if P > 1 else Const(0)
            with m.If(eligible.bit_select(p, 1)):
                m.d.comb += [chosen.eq(p), found.eq(1)]
        heads_data = Array(read.data for _, read in fifos)
        for p, (_, read) in enumerate(fifos):
            m.d.comb += read.addr.eq(heads[p])
        head = heads_data[chosen]

        load = ~self.o.valid | self.o.ready     # the output register takes a descriptor
        m.d.comb += [
            self.drain.eq(found & (used < self.drain_rate) & load),
            self.drain_port.eq(chosen),
        ]

        # Arrival decision.
        next_handle = Signal(self.handle_bits)
        if self.order == "flow":
            ordered = flow_count[flow] != 0
        else:
            ordered = counts_a[port] != 0
        must_spill = (depths[port] >= self.high) | ordered
        full = counts_a[port] == C
        drain_wants = found & (used < self.drain_rate)
        decide = Signal()
        m.d.comb += [
            decide.eq(self.i.valid & beat.last),
            self.i.ready.eq(~beat.last | malformed | must_spill | (load & ~drain_wants)),
            self.arrival.eq(decide & self.i.ready),
            self.handle.eq(next_handle),
            self.flow.eq(flow),
            self.drop.eq(self.arrival & (malformed | (must_spill & full))),
            self.spill.eq(self.arrival & ~malformed & must_spill & ~full),
            self.forward.eq(self.arrival & ~malformed & ~must_spill),
        ]
        with m.If(self.arrival):
            m.d.sync += next_handle.eq(next_handle + 1)

        # Output register: a drained handle first, else a forwarded arrival.
        with m.If(load):
            m.d.sync += self.o.valid.eq(self.drain | self.forward)
            with m.If(self.drain):
                m.d.sync += [self.o.payload.handle.eq(head.handle), self.o.payload.port.eq(chosen),
                             self.o.payload.length.eq(head.length), self.o.payload.spilled.eq(1)]
            with m.Elif(self.forward):
                m.d.sync += [self.o.payload.handle.eq(next_handle), self.o.payload.port.eq(port),
                             self.o.payload.length.eq(length), self.o.payload.spilled.eq(0)]

        # Spill FIFOs and flow table: push on a spill, pop on a drain (same port: count unchanged).
        for p, (write, _) in enumerate(fifos):
            push = self.spill & (port == p)
            pop = self.drain & (chosen == p)
            m.d.comb += [write.addr.eq(tails[p]), write.en.eq(push), write.data.handle.eq(next_handle),
                         write.data.length.eq(length), write.data.flow.eq(flow)]
            with m.If(push):
                m.d.sync += tails[p].eq(Mux(tails[p] == C - 1, 0, tails[p] + 1))
            with m.If(pop):
                m.d.sync += heads[p].eq(Mux(heads[p] == C - 1, 0, heads[p] + 1))
            m.d.sync += counts[p].eq(counts[p] + push - pop)
        for f in range(self.flows):
            add = self.spill & (flow == f)
            remove = self.drain & (head.flow == f)
            m.d.sync += flow_count[f].eq(flow_count[f] + add - remove)

        # Rate limiter (aligned windows) and round-robin pointer.
        with m.If(window == self.drain_window - 1):
            m.d.sync += [window.eq(0), used.eq(0)]
        with m.Else():
            m.d.sync += [window.eq(window + 1), used.eq(used + self.drain)]
        with m.If(self.drain):
            m.d.sync += rr.eq(Mux(chosen == P - 1, 0, chosen + 1))

        # Counters and occupancy.
        for name, event in (("forwarded", self.forward), ("spilled", self.spill),
                            ("drained", self.drain), ("spill_overflow", self.drop & ~malformed),
                            ("malformed", self.arrival & malformed)):
            counter = getattr(self, name)
            with m.If(event):
                m.d.sync += counter.eq(counter + 1)
        m.d.comb += [self.stored[p].eq(counts[p]) for p in range(P)]
        m.d.comb += self.pending.eq(sum(counts))

        if platform == "formal":
            for p in range(P):
                m.d.comb += Assert(counts[p] <= C, f"spill FIFO {p} holds at most capacity")
            m.d.comb += Assert(sum(flow_count) == sum(counts), "flow table counts every stored handle")
        return m

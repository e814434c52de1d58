"""Spillway's spill node (SPEC section 1): the disaggregated buffer that holds a switch's spilled packets."""
from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.counters import count_event
from hdl.headers import ETHERNET, SPILL, wire_view
from hdl.parse import Parser
from hdl.spillway.link import link_layout
from models import wire
from models.params import check
from models.spillway.node import COUNTERS, SpillNodeParams, slot_beats

__all__ = ["SpillNode", "SpillNodeParams", "COUNTERS"]


class SpillNode(wiring.Component):
    """Holds spilled packets in per-origin-port FIFOs and returns them when the switch asks.

    ``i`` carries spill-link frames from the switch (``Ether(type=0x88B5) / Spill / inner``);
    ``i.ready`` is always 1 (a link does not push back; the switch's credits keep the node from
    overflowing). ``o`` carries RETURN frames to the switch, with back-pressure. The memory holds
    ``ports * capacity`` slots of ``slot_beats`` beats (data, keep, last of each beat), addressed by
    fields (``address``: port, slot, beat, each its own bits; no multiplier on the address path).

    - A frame's header is read from its first beat (the parser holds it); a DATA frame's beats are
      written into the tail slot of its port's FIFO as they arrive, unless that FIFO was full at
      the frame's first beat (then nothing is written: a stored frame is never overwritten) or the
      beat is past the slot. At the last beat the frame is classified (``models.spillway.node.classify``):
      stored (``received``, the tail advances), ``overflow`` (full at the first beat), ``oversize``,
      ``malformed``, or a DRAIN request (``drains``): ``min(count, stored - requested)`` packets
      are added to the port's requests, the rest counted ``drain_empty``.
    - Output: while idle, the first port at or after the round-robin pointer with a request is chosen
      in the same cycle (zero-latency selection) and its head slot sent,
      one beat per cycle while ``o.ready``, with the MAC addresses swapped and ``op = RETURN`` on
      its first beat. After the last beat the slot is free, the request served (``returned``) and
      the pointer moves past the port; the next frame starts in the next cycle.
    - The memory is SRAM with a registered read (block RAM on an FPGA): its read address is the beat the
      output shows in the next cycle, taken from the next state of the output and of the FIFO pointers,
      so the output is what a combinational read would show, with no added latency. No write lands in a
      slot the output may read (only stored frames are requested; a frame being written is not stored).
    - ``stored[p]``: frames held for port ``p``. Reset empties the node.
    """

    def __init__(self, params=None):
        p = self.params = check(params, SpillNodeParams)
        self.ports, self.capacity, self.data_bytes = p.ports, p.capacity, p.data_bytes
        self.beats = slot_beats(p)
        self.layout = link_layout(p.data_bytes)
        signature = {
            "i": In(stream.Signature(self.layout)),
            "o": Out(stream.Signature(self.layout)),
            "stored": Out(data.ArrayLayout(range(p.capacity + 1), p.ports)),
        }
        signature.update({name: Out(p.counter_bits) for name in COUNTERS})
        super().__init__(signature)
        P, C = p.ports, p.capacity
        # State, public for the formal spec.
        self.cell = data.StructLayout({"data": 8 * p.data_bytes, "keep": p.data_bytes, "last": 1})
        self.beat_bits, self.slot_bits, self.port_bits = ((n - 1).bit_length() for n in (self.beats, C, P))
        self.mem = memory.Memory(shape=self.cell, depth=P << (self.slot_bits + self.beat_bits), init=[])
        self.heads = [Signal(range(C), name=f"head{q}") for q in range(P)]
        self.tails = [Signal(range(C), name=f"tail{q}") for q in range(P)]
        self.counts = [Signal(range(C + 1), name=f"count{q}") for q in range(P)]
        self.requests = [Signal(range(C + 1), name=f"request{q}") for q in range(P)]
        self.rr = Signal(range(P))
        self.busy = Signal()                    # a frame is being sent on o
        self.current = Signal(range(P))         # its port
        self.index = Signal(range(self.beats))  # its next beat
        self.commit = Signal()                  # a DATA frame is stored in this cycle
        self.pop = Signal()                     # the last beat of a returned frame leaves
        self.port_out = Signal(range(P))        # port of the frame on o
        self.write = self.mem.write_port()      # the memory's one write port
        self.parser = Parser(self.i.payload, self.i.valid, header_bytes=wire.SPILL_HEADER_BYTES, hold=True)
        self.full_held = Signal()               # the frame's FIFO was full at its first beat
        self.beat_no = Signal(range(self.beats + 1))    # beats of the frame before this one (saturating)

    def address(self, port, slot, beat):
        """The memory address of beat ``beat`` of slot ``slot`` of port ``port`` (ints or values)."""
        def field(value, bits):
            return Const(value, bits) if isinstance(value, int) else Cat(Value.cast(value), Const(0, bits))[:bits]
        return Cat(field(beat, self.beat_bits), field(slot, self.slot_bits), field(port, self.port_bits))

    def elaborate(self, platform):
        m = Module()
        P, C, B, W = self.ports, self.capacity, self.beats, self.data_bytes
        m.submodules.mem = mem = self.mem
        counts, tails, requests = Array(self.counts), Array(self.tails), Array(self.requests)

        # --- Input: parse, write beats into the tail slot, classify at the last beat.
        beat = self.i.payload
        transfer = self.i.valid
        m.d.comb += self.i.ready.eq(1)
        m.submodules.parser = parser = self.parser
        eth = wire_view(ETHERNET, parser.header, wire.ETH_OFFSET)
        shim = wire_view(SPILL, parser.header, wire.SPILL_OFFSET)
        port_ok = shim.port < P
        port = shim.port[:max(1, (P - 1).bit_length())]
        beat_no = self.beat_no
        full_held = self.full_held
        full = Mux(parser.first, port_ok & (counts[port] == C), full_held)
        with m.If(transfer):
            m.d.sync += beat_no.eq(Mux(beat.last, 0, Mux(beat_no == B, B, beat_no + 1)))
            with m.If(parser.first):
                m.d.sync += full_held.eq(full)
        index = Mux(parser.first, 0, beat_no)

        write = self.write
        m.d.comb += [
            write.addr.eq(self.address(port, tails[port], index)),
            write.en.eq(transfer & port_ok & ~full & (index < B)),
            write.data.data.eq(beat.data), write.data.keep.eq(beat.keep), write.data.last.eq(beat.last),
        ]

        end = transfer & beat.last
        short = parser.first & (parser.count < wire.SPILL_HEADER_BYTES)
        bare = parser.first & (parser.count == wire.SPILL_HEADER_BYTES)
        bad = short | (eth.type != wire.ETHERTYPE_SPILL) | ~port_ok
        is_drain = ~bad & (shim.op == wire.SPILL_DRAIN) & (shim.count != 0)
        is_data = ~bad & (shim.op == wire.SPILL_DATA) & ~bare
        malformed = ~is_drain & ~is_data
        oversize = is_data & (index >= B)
        overflow = is_data & ~oversize & full
        m.d.comb += self.commit.eq(end & is_data & ~oversize & ~full)
        available = Signal(range(C + 1))
        granted = Signal(range(C + 1))
        m.d.comb += [available.eq(counts[port] - requests[port]),
                     granted.eq(Mux(shim.count < available, shim.count, available))]
        drain = end & is_drain

        # --- Output: choose a port, send its head slot. The memory's read is registered: its address is
        # the one the output will show in the next cycle, from the next state of the pointers below.
        def choose(requests, rr):
            found, chosen = Signal(), Signal(range(P))
            for offset in reversed(range(P)):
                q = (rr + offset) % P
                with m.If(requests[q] != 0):
                    m.d.comb += [chosen.eq(q), found.eq(1)]
            return found, chosen

        found, chosen = choose(requests, self.rr)
        sel = self.port_out
        m.d.comb += sel.eq(Mux(self.busy, self.current, chosen))
        read = mem.read_port()
        out = read.data
        first = self.index == 0
        octets = [out.data[8 * k:8 * k + 8] for k in range(W)]
        rewritten = octets[6:12] + octets[0:6] + octets[12:wire.SPILL_OP_AT] + [Const(wire.SPILL_RETURN, 8)] \
            + octets[wire.SPILL_OP_AT + 1:]
        m.d.comb += [
            self.o.valid.eq(self.busy | found),
            self.o.payload.data.eq(Mux(first, Cat(*rewritten), out.data)),
            self.o.payload.keep.eq(out.keep),
            self.o.payload.last.eq(out.last),
            self.o.payload.first.eq(first),
        ]
        sent = self.o.valid & self.o.ready
        m.d.comb += self.pop.eq(sent & out.last)

        # --- The next state of the output and of the FIFO pointers, counts and requests.
        busy, current, index, rr = (Signal.like(self.busy), Signal.like(self.current), Signal.like(self.index),
                                    Signal.like(self.rr))
        m.d.comb += [busy.eq(self.busy), current.eq(self.current), index.eq(self.index), rr.eq(self.rr)]
        with m.If(sent):
            with m.If(out.last):
                m.d.comb += [busy.eq(0), index.eq(0), rr.eq(Mux(sel == P - 1, 0, sel + 1))]
            with m.Else():
                m.d.comb += [busy.eq(1), current.eq(sel), index.eq(self.index + 1)]
        with m.Elif(self.o.valid):
            m.d.comb += [busy.eq(1), current.eq(sel)]
        next_heads = [Signal.like(h, name=f"next_head{q}") for q, h in enumerate(self.heads)]
        next_requests = [Signal.like(r, name=f"next_request{q}") for q, r in enumerate(self.requests)]
        for q in range(P):
            push = self.commit & (port == q)
            pop = self.pop & (sel == q)
            ask = drain & (port == q)
            m.d.comb += [next_heads[q].eq(Mux(pop, Mux(self.heads[q] == C - 1, 0, self.heads[q] + 1), self.heads[q])),
                         next_requests[q].eq(self.requests[q] + Mux(ask, granted, 0) - pop)]
            with m.If(push):
                m.d.sync += self.tails[q].eq(Mux(self.tails[q] == C - 1, 0, self.tails[q] + 1))
            m.d.sync += [self.heads[q].eq(next_heads[q]), self.counts[q].eq(self.counts[q] + push - pop),
                         self.requests[q].eq(next_requests[q])]
        m.d.sync += [self.busy.eq(busy), self.current.eq(current), self.index.eq(index), self.rr.eq(rr)]
        _, next_chosen = choose(Array(next_requests), rr)
        next_sel = Mux(busy, current, next_chosen)
        m.d.comb += read.addr.eq(self.address(next_sel, Array(next_heads)[next_sel], index))
        m.d.comb += [self.stored[q].eq(self.counts[q]) for q in range(P)]

        # --- Counters.
        for name, event, amount in (("received", self.commit, 1), ("returned", self.pop, 1),
                                    ("overflow", end & overflow, 1), ("oversize", end & oversize, 1),
                                    ("malformed", end & malformed, 1), ("drains", drain, 1),
                                    ("drain_empty", drain, shim.count - granted)):
            count_event(m, getattr(self, name), event, amount=amount, overflow="wrap")
        return m

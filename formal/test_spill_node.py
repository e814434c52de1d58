"""Formal proofs of the Spillway spill node (hdl/spillway/node.py).

Every input is free (frames on ``i``, ``o.ready``). Properties, k-inductive together:

- storage: each FIFO holds at most ``capacity`` frames, ``tail = head + count``, requests never
  exceed what is stored, the output only sends from a port with a request;
- a stored packet is never overwritten: a memory write never lands in a slot that holds a frame
  (slot ``k`` of port ``q`` is live when its distance from the head is below the count);
- ``i`` is always ready; counters conserve frames modulo their width
  (``received = returned + stored``); ``returned`` increments exactly when a frame's last beat
  leaves ``o``;
- reset (``rst`` free at every cycle, as it always was here): the cycle after a reset the FIFOs are
  empty, no request is pending, nothing is being sent, the pointer is at port 0 and every counter is
  zero (the SPEC's empty node).
"""
from amaranth.asserts import AnySeq
from amaranth.hdl import Array, Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, Signal

from formal.props import after_reset, counters_follow, link_beat
from formal.runner import prove
from hdl.headers import SPILL, wire_view
from hdl.spillway.node import COUNTERS, SpillNode, SpillNodeParams
from models import wire

PARAMS = SpillNodeParams(ports=2, capacity=2, mtu=42, data_bytes=22, counter_bits=4)


class Spec(Elaboratable):
    def __init__(self, params=PARAMS):
        self.node = SpillNode(params)

    def elaborate(self, platform):
        m = Module()
        m.submodules.node = node = self.node
        P, C, B = node.ports, node.capacity, node.beats
        m.d.comb += [node.i.valid.eq(AnySeq(1)), node.i.payload.eq(AnySeq(node.i.payload.shape().size)),
                     node.o.ready.eq(AnySeq(1))]
        write = node.write
        m.d.comb += Assert(node.i.ready, "i is always ready")
        for q in range(P):
            head, tail, count, req = node.heads[q], node.tails[q], node.counts[q], node.requests[q]
            m.d.comb += [
                Assert(count <= C, f"FIFO {q} holds at most capacity"),
                Assert(req <= count, f"port {q}: requests only for stored frames"),
                Assert(tail == Mux(head + count >= C, head + count - C, head + count),
                       f"FIFO {q}: tail = head + count"),
            ]
            for k in range(C):
                pos = Signal(range(C), name=f"pos{q}_{k}")
                m.d.comb += pos.eq(Mux(k >= head, k - head, k + C - head))
                slot = q * C + k
                hit = write.en & (write.addr >= slot * B) & (write.addr < (slot + 1) * B)
                m.d.comb += Assert(~(hit & (pos < count)), f"a write never lands in a stored frame (port {q} slot {k})")
        m.d.comb += [
            Assert(~node.busy | (Array(node.requests)[node.current] != 0), "the output sends a requested frame"),
            Assert(node.current < P, "current port in range"), Assert(node.rr < P, "pointer in range"),
            Assert(~write.en | (write.addr < P * C * B), "writes stay in the memory"),
        ]
        shim = wire_view(SPILL, node.parser.header, wire.SPILL_OFFSET)
        with m.If(node.parser.inside & ~node.full_held & (shim.port < P)):
            m.d.comb += Assert(Array(node.counts)[shim.port[:1]] < C, "a frame being written has a free slot")
        bits = len(node.received)
        m.d.comb += Assert(node.received == (node.returned + sum(node.counts))[:bits], "received = returned + stored")
        counters_follow(m, {"returned": node.returned},
                        {"returned": node.o.valid & node.o.ready & node.o.payload.last}, saturating=False)
        empty = [c == 0 for c in node.counts] + [r == 0 for r in node.requests] + [~node.busy, node.rr == 0]
        empty += [getattr(node, name) == 0 for name in COUNTERS]
        m.d.comb += Assert(~after_reset(m) | (sum(empty) == len(empty)),
                           "a reset empties the FIFOs and requests, stops sending, clears the pointer and counters")
        m.d.comb += [Cover(node.returned == 2), Cover((node.overflow != 0) & (node.counts[0] == C))]
        return m


class CounterSpec(Spec):
    """Every counter against the spec's own judgement of each frame (``models.spillway.node.classify``,
    SPEC section 1), k-inductive with the base properties. Frames as a link carries them: every beat
    but the last full, the last one 1..``data_bytes`` bytes from byte 0 (the judgement is on lengths).
    The spec's framing (a frame starts after a last beat), the first beat's header held (EtherType,
    op, port, count, byte count), the beats counted. At a frame's last beat: malformed (a one-beat frame
    shorter than the header, EtherType not 0x88B5, port >= ports, op neither DATA nor DRAIN, a DATA
    frame of the header alone, a DRAIN of count 0), oversize (DATA of more than ``beats`` beats),
    overflow (DATA whose port's FIFO was full at the frame's first beat), received (stored), drains
    (a DRAIN) and drain_empty (by ``count - min(count, stored - requested)`` of its port). The FIFO
    fill and requests are the node's architectural state, bounded and conserved by ``Spec``."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        node = self.node
        P, C, B = node.ports, node.capacity, node.beats
        H = wire.SPILL_HEADER_BYTES
        beat = node.i.payload
        n, shaped = link_beat(m, beat.keep, beat.last)
        m.d.comb += Assume(shaped)
        take = node.i.valid
        inside, nb = Signal(), Signal(range(B + 1))
        first = ~inside
        byte = lambda at: beat.data[8 * at:8 * at + 8]      # noqa: E731
        h_type, h_op, h_port, h_count, h_full = Signal(16), Signal(8), Signal(8), Signal(8), Signal()
        etype = Mux(first, Cat(byte(wire.ETHERTYPE_AT + 1), byte(wire.ETHERTYPE_AT)), h_type)
        op, port = Mux(first, byte(wire.SPILL_OP_AT), h_op), Mux(first, byte(wire.SPILL_PORT_AT), h_port)
        cnt = Mux(first, byte(wire.SPILL_COUNT_AT), h_count)
        port_ok = port < P
        counts, requests = Array(node.counts), Array(node.requests)
        full = Mux(first, port_ok & (counts[port[:1]] == C), h_full)
        with m.If(take):
            m.d.sync += [inside.eq(~beat.last), nb.eq(Mux(beat.last, 0, Mux(nb == B, B, nb + 1))),
                         h_type.eq(etype), h_op.eq(op), h_port.eq(port), h_count.eq(cnt), h_full.eq(full)]
        m.d.comb += [Assert(inside == node.parser.inside, "spec framing: inside a frame as the node's parser"),
                     Assert(nb == node.beat_no, "spec framing: beats of the frame so far"),
                     Assert(~inside | (h_full == node.full_held), "spec framing: full at the first beat")]
        held = node.parser.header            # inside a frame: the header the node holds from its first beat
        hbyte = lambda at: held[8 * at:8 * at + 8]          # noqa: E731
        m.d.comb += Assert(~inside | ((h_type == Cat(hbyte(wire.ETHERTYPE_AT + 1), hbyte(wire.ETHERTYPE_AT)))
                                      & (h_op == hbyte(wire.SPILL_OP_AT)) & (h_port == hbyte(wire.SPILL_PORT_AT))
                                      & (h_count == hbyte(wire.SPILL_COUNT_AT))),
                           "spec framing: the first beat's header as the node holds it")
        end = take & beat.last
        header_ok = ~(first & (n < H)) & (etype == wire.ETHERTYPE_SPILL) & port_ok
        is_drain = header_ok & (op == wire.SPILL_DRAIN) & (cnt != 0)
        is_data = header_ok & (op == wire.SPILL_DATA) & ~(first & (n == H))
        oversize = is_data & (nb >= B)
        available = counts[port[:1]] - requests[port[:1]]
        granted = Mux(cnt < available, cnt, available)
        counters_follow(m, {name: getattr(node, name) for name in COUNTERS}, {
            "received": end & is_data & ~oversize & ~full, "overflow": end & is_data & ~oversize & full,
            "oversize": end & oversize, "malformed": end & ~is_data & ~is_drain, "drains": end & is_drain,
            "drain_empty": Mux(end & is_drain, cnt - granted, 0)}, saturating=False, block="spill node ")
        return m


def test_spill_node_prove():
    prove(Spec(), "spill_node", depth=6, mode="prove")


def test_spill_node_cover():
    prove(Spec(), "spill_node_cover", depth=20, mode="cover")


def test_spill_node_counters():
    prove(CounterSpec(), "spill_node_counters", depth=6, mode="prove")

"""Formal proofs of the Spillway spill node (hdl/spill_node.py).

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
from amaranth.hdl import Array, Assert, Cover, Elaboratable, Module, Mux, Signal

from formal.props import after_reset, counters_follow
from formal.runner import prove
from hdl.headers import SPILL, wire_view
from hdl.spill_node import COUNTERS, SpillNode, SpillNodeParams
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


def test_spill_node_prove():
    prove(Spec(), "spill_node", depth=6, mode="prove")


def test_spill_node_cover():
    prove(Spec(), "spill_node_cover", depth=20, mode="cover")

"""Formal proofs of the whole disaggregated Spillway: the switch side's decisions and the spill node's RTL
across the round trip (``RoundTripSpec``, hdl/spillway/credit.py and node.py)."""

import os

from amaranth.asserts import AnySeq
from amaranth.hdl import Array, Assert, Cat, Const, Cover, Elaboratable, Module, Mux, Signal, Value
from amaranth.lib import data

from formal.props import after_reset
from formal.runner import prove
from formal.spillway.channels import ShiftFifo, tracked_pair, tracked_trips
from formal.spillway.test_switch import CREDIT_PARAMS
from hdl.spillway.credit import CreditCore
from hdl.spillway.node import SpillNode
from models import wire
from models.spillway.params import SpillNodeParams

# --- Disaggregated mode, round trip: CreditCore + the SpillNode RTL, the links as free-delay channels ----

#: The switch side's decisions (``CreditCore``) and the real spill node, at the node proof's narrow bus.
TRIP_PARAMS = CREDIT_PARAMS.replace(return_slots=1, mtu=42)
TRIP_NODE = SpillNodeParams(ports=2, capacity=2, mtu=42, data_bytes=23, counter_bits=4)


class RoundTripSpec(Elaboratable):
    """Per-flow order across the whole round trip with the node's RTL in the loop (abstract packets).

    ``CreditCore`` decides with free arrivals, queue depths and ``hold``; each spill verdict puts an
    abstract DATA frame (the 22-byte spill header with the verdict's port, flow and seq, and one inner
    byte carrying the spec's tag of the tracked packets) on the **spill link**, each drain request a
    one-beat DRAIN frame (count 1), in decision order (the byte-level switch keeps a DRAIN behind its
    DATA frame: ``SwitchSpec``'s "a DRAIN never overtakes its DATA frame"). The spill link is a
    free-delay FIFO channel: a frame's beats reach ``SpillNode.i`` whenever a free choice says so
    (gaps between beats included); ``node.o.ready`` is free; RETURN frames go on the **return link**,
    another free-delay FIFO channel, whose head reaches the core (``ret_valid``) at a free time, then
    waits in a return buffer until a free ``done`` re-injects it. The spec's independent shadow:
    per-port FIFOs of the DATA frames sent, the tracked packets' state (spilled, back) and the
    channels' contents. Properties:

    - the node returns, per origin port, exactly the DATA frames it was sent, in order, unchanged but
      for ``op = RETURN`` (port, flow, seq, inner byte; on a 23-byte bus every frame is one beat);
    - every return reaching the switch is accepted (it was asked for); ``misordered`` stays 0;
    - credits: ``credit[p]`` + DATA frames of ``p`` not yet returned + returns of ``p`` on the link or
      held == capacity; the node never overflows, never finds a DRAIN empty, sees nothing malformed;
    - per-flow order across the round trip: of two tracked packets of one flow and port, ``late`` is
      never forwarded while ``early`` is out, and never re-injected before ``early``.

    With ``inductive`` the spec adds the invariants that make all of this k-inductive (``_strengthen``:
    the core's tables, the node's FIFO pointers, requests and memory contents, and the channels,
    against the shadow), so ``prove`` gives an unbounded proof. Every frame is one beat (the node's
    multi-beat frames are its own proof's and the simulations' business).
    """

    def __init__(self, depth, inductive=False):
        self.core = CreditCore(TRIP_PARAMS)
        self.node = SpillNode(TRIP_NODE)
        self.depth, self.inductive = depth, inductive
        if inductive:       # the spec reads each slot's first beat (where every one-beat frame is)
            self.slots = [self.node.mem.read_port(domain="comb") for _ in range(TRIP_NODE.ports * TRIP_NODE.capacity)]

    def _strengthen(self, m, env):
        """Invariants that make the properties k-inductive: the core's tables, the node's FIFOs and
        memory, and the channels, against the spec's shadow (``env``: ``elaborate``'s locals)."""
        core, node, link, sent, back, held = (env[k] for k in ("core", "node", "link", "sent", "back", "held"))
        p, P, C, S, F = core.params, env["P"], env["C"], env["S"], env["F"]
        encode, H = env["encode"], env["H"]
        requested, out = env["requested"], env["out"]
        flow, port, seen = env["flow"], env["port"], env["seen"]
        D = link.depth
        node_parser = node.parser
        m.d.comb += [Assert(~node_parser.inside, "node: every frame is one beat"),
                     Assert(node.index == 0, "node: output at a frame's first beat"),
                     Assert(node.rr < P, "node pointer"), Assert(node.current < P, "node current")]
        m.d.comb += Assert(~node.busy | (Array(node.requests)[node.current] != 0), "node: busy on a requested port")
        # Drain rate window (the spec's own).
        window, used = Signal(range(p.drain_window)), Signal(range(p.drain_rate + 2))
        with m.If(window == p.drain_window - 1):
            m.d.sync += [window.eq(0), used.eq(0)]
        with m.Else():
            m.d.sync += [window.eq(window + 1), used.eq(used + requested)]
        m.d.comb += [Assert(window == core.window, "windows aligned"), Assert(used == core.used, "used"),
                     Assert(core.rr < P, "core pointer")]
        live_link = [link.len > j for j in range(D)]
        total_asked = []
        for q in range(P):
            count, head, tail, req = node.counts[q], node.heads[q], node.tails[q], node.requests[q]
            m.d.comb += [Assert(count <= C, f"node {q} count"), Assert(req <= count, f"node {q} requests"),
                         Assert(tail == Mux(head + count >= C, head + count - C, head + count), f"node {q} tail")]
            data_q = [live_link[j] & ~link.items[j].drain & (link.items[j].port == q) for j in range(D)]
            drain_q = [live_link[j] & link.items[j].drain & (link.items[j].port == q) for j in range(D)]
            on_back = sum((back.len > k) & (back.items[k].port == q) for k in range(S + 1))
            m.d.comb += [
                Assert(sent[q].len == count + sum(data_q), f"port {q}: sent = stored + DATA on the link"),
                Assert(core.unasked[q] + core.asked[q] == sent[q].len + on_back, f"port {q}: unasked + asked"),
                Assert(core.asked[q] == sum(drain_q) + req + on_back, f"port {q}: asked = DRAINs + requests + back"),
            ]
            total_asked.append(core.asked[q])
            # Each DRAIN finds a stored frame not yet asked for when it arrives.
            for j in range(D):
                before_data = sum(data_q[:j])
                drains_upto = sum(drain_q[:j + 1])
                m.d.comb += Assert(~drain_q[j] | (drains_upto + req <= count + before_data),
                                   f"port {q}: link DRAIN {j} finds a frame")
                with m.If(data_q[j]):
                    nth = Array(x.as_value() for x in sent[q].items)[count + before_data]
                    m.d.comb += Assert(link.items[j].as_value() == nth,
                                       f"port {q}: link DATA {j} is the next sent frame")
            # Stored frames: memory slot (head + k) holds sent[q][k].
            for k in range(C):
                rp = self.slots[q * C + k]
                slot = Mux(head + k >= C, head + k - C, head + k)
                m.d.comb += rp.addr.eq(node.address(q, slot, 0))
                with m.If(count > k):
                    m.d.comb += Assert((rp.data.data == encode(sent[q].items[k])) & (rp.data.last == 1)
                                       & (rp.data.keep == (1 << H + 1) - 1) & (sent[q].items[k].drain == 0)
                                       & (sent[q].items[k].port == q),
                                       f"node {q} slot +{k} holds the frame sent")
            # Seqs per port: held, back, then sent, consecutive from expect.
            seq_chain = [(held, k) for k in range(S + 1)] + [(back, k) for k in range(S + 1)]
            before = 0
            for fifo, k in seq_chain:
                here = (fifo.len > k) & (fifo.items[k].port == q)
                with m.If(here):
                    m.d.comb += Assert(fifo.items[k].seq == (core.expect[q] + before)[:16], f"port {q}: seqs held/back")
                before = before + here
            for k in range(C + 1):
                with m.If(sent[q].len > k):
                    m.d.comb += Assert((sent[q].items[k].seq == (core.expect[q] + before + k)[:16])
                                       & (sent[q].items[k].port == q) & ~sent[q].items[k].drain,
                                       f"port {q}: sent seqs")
            m.d.comb += Assert(core.seqs[q] == (core.expect[q] + before + sent[q].len)[:16], f"port {q}: seq numbering")
        m.d.comb += [Assert(core.reserved == held.len + sum(total_asked), "reserved = held + asked"),
                     Assert(sum(total_asked) + held.len <= S, "return slots")]
        for j in range(D):
            with m.If(live_link[j] & link.items[j].drain):
                m.d.comb += Assert((link.items[j].tag == 0) & (link.items[j].seq == 0) & (link.items[j].flow == 0),
                                   "a DRAIN carries nothing")
        # Flow table and tracked packets against every place a spilled packet can be.
        places = [(held, k, held.items[k], held.len > k) for k in range(S + 1)]
        places += [(back, k, back.items[k], back.len > k) for k in range(S + 1)]
        places += [(sent[q], k, sent[q].items[k], sent[q].len > k) for q in range(P) for k in range(C + 1)]
        for f in range(F):
            m.d.comb += Assert(core.flow_count[f] == sum(ok & (r.flow == f) for _, _, r, ok in places),
                               f"flow table entry {f}")
        for name, bit in (("early", 0), ("late", 1)):
            for _, _, r, ok in places:
                m.d.comb += Assert(~(ok & r.tag[bit]) | ((r.flow == flow) & (r.port == port)),
                                   f"{name} is out with its flow and port")
            m.d.comb += Assert(sum(ok & r.tag[bit] for _, _, r, ok in places) == (out[name][0] & ~out[name][1]),
                               f"{name} is in one place while out")
        for a_i, (_, _, ra, oka) in enumerate(places):
            for b_i, (_, _, rb, okb) in enumerate(places):
                if b_i <= a_i:          # late at or before early in the chain (held, back, sent)
                    m.d.comb += Assert(~(oka & ra.tag[0] & okb & rb.tag[1]), "early is ahead of late")
        m.d.comb += [
            Assert(~out["late"][0] | seen["early"], "late after early"),
            Assert(~out["early"][0] | seen["early"], "early spilled after seen"),
            Assert(~out["early"][1] | out["early"][0], "early back after spilled"),
            Assert(~out["late"][1] | out["late"][0], "late back after spilled"),
            Assert(~out["late"][0] | seen["late"], "late spilled after seen"),
        ]

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        m.submodules.node = node = self.node
        p = core.params
        P, C, F, S, W = p.ports, p.capacity, p.flows, p.return_slots, TRIP_NODE.data_bytes
        m.d.comb += [core.d.valid.eq(AnySeq(1)), core.d.payload.eq(AnySeq(core.d.payload.shape().size)),
                     core.qdepth.eq(AnySeq(core.qdepth.shape().size)), core.v.ready.eq(AnySeq(1)),
                     core.req.ready.eq(AnySeq(1)), core.hold.eq(AnySeq(P)), core.ret_bad.eq(0),
                     node.o.ready.eq(AnySeq(1))]
        v, a = core.v.payload, core.d.payload
        decided = core.d.valid & core.v.ready
        spill = decided & (v.kind == 1)
        requested = core.req.valid & core.req.ready

        # Tracked packets (as in CreditSpec): early and late of one flow and port, early decided first.
        early_h, late_h, flow, port, seen = tracked_pair(m, core)
        tag = Cat(a.handle == early_h, a.handle == late_h)

        # The spill link: DATA frames at their spill decision, DRAIN frames at their request (DATA first).
        frame = data.StructLayout({"drain": 1, "port": range(P), "flow": range(F), "seq": 16, "tag": 2})
        link = ShiftFifo(m, frame, P * C + S + 2, "down")
        data_f, drain_f = Signal(frame), Signal(frame)
        m.d.comb += [data_f.port.eq(v.port), data_f.flow.eq(v.flow), data_f.seq.eq(v.seq), data_f.tag.eq(tag),
                     drain_f.drain.eq(1), drain_f.port.eq(core.req.payload.port)]
        head = link.head()
        go = AnySeq(1) & (link.len != 0)
        link.update(spill, data_f, go, requested, drain_f)
        hdr = [0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01]          # node and switch MACs (any)
        byte = lambda value: Cat(value, Const(0, 8 - len(Value.cast(value))))      # noqa: E731

        def encode(item):
            """The frame's one beat: the spill header, then (DATA) the tag as the inner byte."""
            return Cat(*(Const(b, 8) for b in hdr), Const(wire.ETHERTYPE_SPILL >> 8, 8),
                       Const(wire.ETHERTYPE_SPILL & 0xFF, 8),
                       byte(Mux(item.drain, wire.SPILL_DRAIN, wire.SPILL_DATA)), byte(item.port), Const(0, 8),
                       byte(item.flow), item.seq[8:16], item.seq[0:8], byte(item.drain), Const(0, 8),
                       byte(item.tag))
        header = encode(head)[:8 * wire.SPILL_HEADER_BYTES]
        H = wire.SPILL_HEADER_BYTES
        assert len(header) == 8 * H and W >= H + 1
        m.d.comb += [       # one beat per frame: a DATA frame's one inner byte is the tag
            node.i.valid.eq(go),
            node.i.payload.data.eq(encode(head)),
            node.i.payload.keep.eq(Mux(head.drain, (1 << H) - 1, (1 << H + 1) - 1)),
            node.i.payload.last.eq(1),
            Assert(link.len < link.depth, "the spill link channel is deep enough"),
        ]

        # Shadow: per origin port, the DATA frames sent and not yet returned, in order.
        sent = [ShiftFifo(m, frame, C + 1, f"sent{q}") for q in range(P)]

        # The node's RETURN frames (one beat each), parsed from its output.
        o = node.o
        o_byte = lambda k: o.payload.data[8 * k:8 * k + 8]         # noqa: E731
        returning = o.valid & o.ready
        got = Signal(frame)
        m.d.comb += [got.port.eq(o_byte(wire.SPILL_PORT_AT)), got.flow.eq(o_byte(wire.SPILL_FLOW_AT + 1)),
                     got.seq.eq(Cat(o_byte(wire.SPILL_SEQ_AT + 1), o_byte(wire.SPILL_SEQ_AT))),
                     got.tag.eq(o_byte(H))]
        m.d.comb += Assert(~o.valid | (
            (o_byte(wire.ETHERTYPE_AT) == wire.ETHERTYPE_SPILL >> 8)
            & (o_byte(wire.ETHERTYPE_AT + 1) == wire.ETHERTYPE_SPILL & 0xFF)
            & (o_byte(wire.SPILL_OP_AT) == wire.SPILL_RETURN) & (o_byte(wire.SPILL_PORT_AT) < P)
            & o.payload.last & (o.payload.keep == (1 << H + 1) - 1) & (o_byte(H)[2:] == 0)
            & (o_byte(wire.SPILL_FLOW_AT) == 0) & (o_byte(wire.SPILL_FLOW_AT + 1) < F)),
            "a RETURN frame: one beat, spill EtherType, op RETURN, a port, one inner byte")
        # The return link, then the switch's return buffer until re-injection.
        back = ShiftFifo(m, frame, S + 1, "up")
        held = ShiftFifo(m, frame, S + 1, "held")
        deliver = AnySeq(1) & (back.len != 0)
        bh = back.head()
        m.d.comb += [core.ret_valid.eq(deliver), core.ret_port.eq(bh.port)]
        m.d.comb += Assert(core.ret_ok == deliver, "every return reaching the switch was asked for")
        back.update(returning, got, deliver)
        done = AnySeq(1) & (held.len != 0)
        hh = held.head()
        m.d.comb += [core.done_valid.eq(done), core.done_port.eq(hh.port), core.done_flow.eq(hh.flow),
                     core.done_seq.eq(hh.seq)]
        held.update(core.ret_ok, bh, done)
        m.d.comb += [Assert(back.len <= S, "returns on the link within return_slots"),
                     Assert(held.len <= S, "held returns within return_slots")]
        for q in range(P):
            sh = sent[q].head()
            mine = returning & (got.port == q)
            m.d.comb += Assert(~mine | ((sent[q].len != 0) & (got.flow == sh.flow) & (got.seq == sh.seq)
                                        & (got.tag == sh.tag)),
                               f"port {q}: the node returns the oldest DATA frame it holds, unchanged")
            sent[q].update(spill & (v.port == q), data_f, mine)
            on_link = sum((back.len > k) & (back.items[k].port == q) for k in range(S + 1))
            in_held = sum((held.len > k) & (held.items[k].port == q) for k in range(S + 1))
            m.d.comb += [Assert(core.credit[q] + sent[q].len + on_link + in_held == C,
                                f"port {q}: credits + packets out == capacity"),
                         Assert(sent[q].len <= C, f"port {q}: the shadow is deep enough")]
        m.d.comb += [Assert(core.misordered == 0, "returns come back in seq order"),
                     Assert((node.overflow == 0) & (node.drain_empty == 0) & (node.malformed == 0)
                            & (node.oversize == 0), "the node never overflows, never drains empty, takes every frame")]

        # Per-flow order across the round trip.
        out = tracked_trips(m, a.handle, spill, done, hh.tag, early_h, late_h)
        early_out = out["early"][0] & ~out["early"][1]
        late_forwarded = decided & (a.handle == late_h) & (v.kind == 0)
        m.d.comb += [
            Assert(~(late_forwarded & early_out), "late is never forwarded while early is out"),
            Assert(~(out["late"][2] & early_out), "late is never re-injected before early"),
            Assert(~out["late"][2] | out["late"][0], "late is re-injected only after it was spilled"),
            Cover(out["early"][1]),                             # one round trip: 7 cycles
        ]
        # Reset (free at every cycle; the links reset with both ends): the cycle after it the node holds
        # nothing and sends nothing, the switch has every credit back and no return slot reserved.
        idle = ~node.o.valid & (core.reserved == 0)
        for q in range(P):
            idle &= (node.counts[q] == 0) & (node.requests[q] == 0) & (core.credit[q] == C)
        m.d.comb += Assert(~after_reset(m) | idle, "round trip: a reset empties the node and returns every credit")
        if self.inductive:
            self._strengthen(m, locals())
        if self.depth >= 12:                                    # both tracked packets through the node: 12
            m.d.comb += Cover(out["early"][1] & out["late"][1])
        return m


#: Cover depth: 7 cycles hold one packet's whole round trip (spill decision, the node stores it, drain
#: request, RETURN, accepted, re-injected; ~7 s); with 12 (``INNET_TRIP_DEPTH=12``, ~30 s) also both
#: tracked packets through the node, in order.
TRIP_DEPTH = int(os.environ.get("INNET_TRIP_DEPTH") or 7)


def test_round_trip_prove():
    prove(RoundTripSpec(TRIP_DEPTH, inductive=True), "spill_round_trip_prove", depth=3, mode="prove")


def test_round_trip_cover():
    prove(RoundTripSpec(TRIP_DEPTH), f"spill_round_trip_cover_{TRIP_DEPTH}", depth=TRIP_DEPTH, mode="cover")

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

``CounterSpec`` adds every counter against the spec's own judgement of each frame; ``FifoSpec`` (3 slots
per port) adds round-robin fairness and FIFO data integrity against the spec's shadow of the stored and
requested frames, one tracked frame and its tracked beat (all k-inductive: unbounded).
"""
import pytest
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Array, Assert, Assume, Cat, Const, Cover, Elaboratable, Module, Mux, Signal

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
                Assert((head < C) & (tail < C), f"FIFO {q}: head and tail in range"),
                Assert(req <= count, f"port {q}: requests only for stored frames"),
                Assert(tail == Mux(head + count >= C, head + count - C, head + count),
                       f"FIFO {q}: tail = head + count"),
            ]
            for k in range(C):
                pos = Signal(range(C), name=f"pos{q}_{k}")
                m.d.comb += pos.eq(Mux(k >= head, k - head, k + C - head))
                hit = write.en & (write.addr >> node.beat_bits == node.address(q, k, 0) >> node.beat_bits)
                m.d.comb += Assert(~(hit & (pos < count)), f"a write never lands in a stored frame (port {q} slot {k})")
        m.d.comb += [
            Assert(~node.busy | (Array(node.requests)[node.current] != 0), "the output sends a requested frame"),
            Assert(node.current < P, "current port in range"), Assert(node.rr < P, "pointer in range"),
            Assert(~write.en | (write.addr < node.address(P - 1, C - 1, B - 1) + 1), "writes stay in the memory"),
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
        self.frame = dict(take=take, first=first, nb=nb, port=port, end=end, is_data=is_data, full=full,
                          received=end & is_data & ~oversize & ~full, drain=end & is_drain, cnt=cnt)
        counters_follow(m, {name: getattr(node, name) for name in COUNTERS}, {
            "received": end & is_data & ~oversize & ~full, "overflow": end & is_data & ~oversize & full,
            "oversize": end & oversize, "malformed": end & ~is_data & ~is_drain, "drains": end & is_drain,
            "drain_empty": Mux(end & is_drain, cnt - granted, 0)}, saturating=False, block="spill node ")
        return m


#: Three slots per port (not a power of two: a pointer stepping the wrong way leaves the range), two ports.
FIFO_PARAMS = PARAMS.replace(capacity=3)


class FifoSpec(CounterSpec):
    """Round-robin fairness and FIFO data integrity, against the spec's own shadow, k-inductive with
    ``CounterSpec`` and ``Spec`` (``FIFO_PARAMS``: 2 ports, 3 slots of 3 beats).

    Shadow: per port the frames stored and requested, from the spec's judgement of each frame
    (``CounterSpec``: stored on a DATA frame's last beat, ``min(count, stored - requested)`` granted by
    a DRAIN) and the frames it sees leave ``o`` (the origin port read from a returned frame's header);
    the node's ``counts``/``requests`` must equal them. The spec frames ``o`` itself (a frame starts
    after a last beat).

    - Round robin (SPEC: the first port at or after the pointer, which moves past the port served):
      a frame starts on ``o`` exactly when the shadow has a request, from the first port with one at or
      after the spec's pointer; once started it is sent to its last beat without a gap.
    - FIFO data integrity: one tracked frame (any port ``tq``, chosen freely at its first beat; one
      tracked beat ``tj``) is stored with its beat count ``L`` and beat ``tj`` (data, keep, last); it
      leaves after exactly the frames of ``tq`` stored before it, with ``L`` beats (``last`` on beat
      ``L - 1`` only) and beat ``tj`` as it came in (on the first beat the MAC addresses swapped and
      ``op = RETURN``).

    Strengthening: the shadow equals the node's counts and requests, ``rr`` the spec's pointer, the
    output state (``busy``, ``current``, ``index``) the spec's framing of ``o``, and the memory cells of
    the tracked frame's slot (read through extra ports) hold its beats as recorded."""

    def __init__(self, params=FIFO_PARAMS):
        super().__init__(params)
        node = self.node
        self.cells = [node.mem.read_port(domain="comb") for _ in range(node.beats)]
        self.heads = [node.mem.read_port(domain="comb") for _ in range(node.ports * node.capacity + 1)]
        self.rest = [[node.mem.read_port(domain="comb") for _ in range(node.beats - 1)]
                     for _ in range(node.ports * node.capacity)]

    def elaborate(self, platform):
        m = super().elaborate(platform)
        node, fr = self.node, self.frame
        P, C, B, W = node.ports, node.capacity, node.beats, node.data_bytes
        beat = node.i.payload
        # --- shadow counts and requests ---
        o = node.o
        # o_started: a frame was presented (or a beat of it sent) and has not ended; o_held its port
        o_started, o_idx, o_held = Signal(), Signal(range(B + 1)), Signal(8)
        o_port = Mux(o_started, o_held, o.payload.data.word_select(wire.SPILL_PORT_AT, 8))
        sent = o.valid & o.ready
        with m.If(o.valid):
            m.d.sync += [o_started.eq(~(sent & o.payload.last)), o_held.eq(o_port)]
        with m.If(sent):
            m.d.sync += o_idx.eq(Mux(o.payload.last, 0, o_idx + 1))
        done = sent & o.payload.last
        counts = [Signal(range(C + 1), name=f"sh_count{q}") for q in range(P)]
        requests = [Signal(range(C + 1), name=f"sh_request{q}") for q in range(P)]
        self.started, self.held, self.requests, self.idx = o_started, o_held, requests, o_idx
        port = fr["port"][:1]
        available = Array(counts)[port] - Array(requests)[port]
        granted = Mux(fr["cnt"] < available, fr["cnt"], available)
        for q in range(P):
            back = done & (o_port == q)
            m.d.sync += [counts[q].eq(counts[q] + (fr["received"] & (port == q)) - back),
                         requests[q].eq(requests[q] + Mux(fr["drain"] & (port == q), granted, 0) - back)]
            m.d.comb += [Assert(node.counts[q] == counts[q], f"port {q}: frames stored as the spec's shadow"),
                         Assert(node.requests[q] == requests[q], f"port {q}: frames requested as the spec's shadow")]
        # --- round robin ---
        rr = Signal(range(P))
        with m.If(done):
            m.d.sync += rr.eq(Mux(o_port == P - 1, 0, o_port + 1))
        wanted = Cat(*(r != 0 for r in requests))
        pick = Const(0, range(P))
        for offset in reversed(range(P)):
            q = (rr + offset) % P
            pick = Mux(wanted.bit_select(q, 1), q, pick)
        self.pick = pick
        m.d.comb += [
            Assert(node.rr == rr, "round robin: the node's pointer is the spec's"),
            Assert(o.valid == (o_started | wanted.any()), "o sends exactly while a frame is started or requested"),
            Assert(o_started | ~o.valid | (o_port == pick),
                   "round robin: a frame starts from the first requested port at or after the pointer"),
            Assert(~o_started | (Array(requests)[o_held[:1]] != 0), "a frame being sent was requested"),
            Assert(node.index == o_idx, "o: beat index as the spec's framing"),
            Assert(~o.valid | (o.payload.first == (o_idx == 0)), "o: first marks a frame's first beat"),
            Assert(node.busy == o_started, "o: the node is busy exactly within a frame the spec framed"),
            Assert(~o_started | ((node.current == o_held) & (o_held < P)), "o: the node sends the frame started"),
        ]
        # every stored frame (and the one arriving, once its first beat is written) names its port: the
        # spec reads the port of a frame leaving o from its first beat
        def port_byte(cell):
            return cell.data.data.word_select(wire.SPILL_PORT_AT, 8)
        for q in range(P):
            for k in range(C):
                cell = self.heads[q * C + k]
                m.d.comb += cell.addr.eq(node.address(q, k, 0))
                live = Mux(k >= node.heads[q], k - node.heads[q], k + C - node.heads[q]) < node.counts[q]
                m.d.comb += Assert(~live | (port_byte(cell) == q), f"port {q} slot {k}: a stored frame names its port")
                lasts = [cell.data.last]
                for b, rest in enumerate(self.rest[q * C + k], start=1):
                    m.d.comb += rest.addr.eq(node.address(q, k, b))
                    lasts.append(rest.data.last)
                m.d.comb += Assert(~live | Cat(*lasts).any(), f"port {q} slot {k}: a stored frame ends in its slot")
                with m.If(o_started & (o_held == q) & (node.heads[q] == k)):
                    m.d.comb += [Assert(~((b < o_idx) & last), f"port {q} slot {k}: a beat sent was not the last")
                                 for b, last in enumerate(lasts)]
        cell = self.heads[-1]
        m.d.comb += cell.addr.eq(node.address(port, Array(node.tails)[port], 0))
        with m.If(~fr["first"] & ~fr["full"] & (fr["port"] < P)):
            m.d.comb += Assert(port_byte(cell) == fr["port"], "a frame arriving names its port in its tail slot")
        # --- the tracked frame ---
        tq, tj = Signal(range(P)), Signal(range(B))
        m.d.comb += [tq.eq(AnyConst(range(P))), tj.eq(AnyConst(range(B))), Assume(tq < P), Assume(tj < B)]
        state = Signal(2)          # 0 none, 1 arriving, 2 stored
        pos = Signal(range(C))     # frames of tq ahead of it
        length = Signal(range(B + 1))
        t_data, t_keep, t_last = Signal(8 * W), Signal(W), Signal()
        choose = AnySeq(1)
        starts = fr["take"] & fr["first"] & (fr["port"] == tq) & ~fr["full"] & (state == 0) & choose
        arriving = (state == 1) | starts
        with m.If(fr["take"] & arriving):
            with m.If(fr["nb"] == tj):
                m.d.sync += [t_data.eq(beat.data), t_keep.eq(beat.keep), t_last.eq(beat.last)]
            m.d.sync += state.eq(1)
            with m.If(beat.last):
                m.d.sync += [state.eq(Mux(fr["received"], 2, 0)), pos.eq(Array(counts)[tq] - (done & (o_port == tq))),
                             length.eq(fr["nb"] + 1)]
        ours = (state == 2) & (pos == 0) & (o_port == tq) & o.valid
        with m.If(done & (o_port == tq) & (state == 2)):
            m.d.sync += pos.eq(pos - 1)
            with m.If(pos == 0):
                m.d.sync += state.eq(0)
        first_rewritten = Cat(t_data[48:96], t_data[0:48], t_data[96:8 * wire.SPILL_OP_AT],
                              Const(wire.SPILL_RETURN, 8), t_data[8 * wire.SPILL_OP_AT + 8:])
        with m.If(ours):
            m.d.comb += [Assert(o_idx < length, "the tracked frame leaves with no more beats than it came with"),
                         Assert(o.payload.last == (o_idx == length - 1), "the tracked frame ends where it ended")]
            with m.If((o_idx == tj) & (tj < length)):
                m.d.comb += Assert((o.payload.keep == t_keep) & (o.payload.last == t_last)
                                   & (o.payload.data == Mux(tj == 0, first_rewritten, t_data)),
                                   "the tracked beat leaves as it came in (first beat: MACs swapped, op RETURN)")
        # strengthening: where the tracked frame is, and its cells
        head, tail = Array(node.heads)[tq], Array(node.tails)[tq]
        at = Signal(range(C))
        m.d.comb += at.eq(Mux(state == 1, tail, Mux(head + pos >= C, head + pos - C, head + pos)))
        for k, cell in enumerate(self.cells):
            m.d.comb += cell.addr.eq(node.address(tq, at, k))
            written = Mux(state == 1, k < fr["nb"], k < length)
            with m.If((state != 0) & written):
                m.d.comb += Assert(cell.data.last == Mux(state == 1, 0, k == length - 1),
                                   f"tracked frame: beat {k} stored with its last flag")
                with m.If(tj == k):
                    m.d.comb += Assert((cell.data.data == t_data) & (cell.data.keep == t_keep)
                                       & (cell.data.last == t_last), f"tracked frame: beat {k} stored as it came")
        m.d.comb += [Assert(state != 3, "tracked frame: a state of three"), Assert(o_idx < B, "o: beat index in range"),
                     Assert(o_started | (o_idx == 0), "o: beat index 0 between frames"),
                     Assert(fr["first"] == (fr["nb"] == 0), "spec framing: beats counted exactly within a frame")]
        with m.If(state == 1):
            m.d.comb += [Assert(node.parser.inside & (node.full_held == 0) & (fr["port"] == tq) & (fr["nb"] >= 1),
                                "tracked frame arriving: the node writes it into tq's tail slot"),
                         Assert(Array(counts)[tq] < C, "tracked frame arriving: its FIFO has room")]
        with m.If(state == 2):
            m.d.comb += [Assert(pos < Array(counts)[tq], "tracked frame stored: behind pos frames of its port"),
                         Assert((length >= 1) & (length <= B), "tracked frame: 1..beats beats")]
        m.d.comb += Cover(ours & o.payload.last & (length == B) & (tq == 1))
        return m


class DrainResponseSpec(FifoSpec):
    """A drain request is answered: with ``o`` always ready (the switch takes returns), a port with frames
    requested sees one of them leave within ``bound`` cycles (the frame being sent, then at most one frame
    of each other port in round-robin order, then its own: ``ports * beats`` cycles), k-inductive with
    ``FifoSpec``'s invariants."""

    def __init__(self, params=FIFO_PARAMS):
        super().__init__(params)
        if self.node.ports != 2:
            raise ValueError(f"DrainResponseSpec: ports = {self.node.ports}: its strengthening is for two ports")
        self.bound = self.node.ports * self.node.beats

    def elaborate(self, platform):
        m = super().elaborate(platform)
        node = self.node
        m.d.comb += Assume(node.o.ready)
        o = node.o
        port = Mux(self.started, self.held, o.payload.data.word_select(wire.SPILL_PORT_AT, 8))
        for q, request in enumerate(self.requests):
            waited = Signal(range(self.bound + 2), name=f"waited{q}")
            served = o.valid & o.payload.last & (port == q)
            with m.If(served | (request == 0)):
                m.d.sync += waited.eq(0)
            with m.Elif(waited <= self.bound):
                m.d.sync += waited.eq(waited + 1)
            m.d.comb += Assert(waited < self.bound, f"port {q}: a drain request is answered within ports x beats")
            # strengthening (two ports): the waiting time plus the most beats that can go first
            B = node.beats
            ahead = Mux(self.started, Mux(self.held == q, B - self.idx, 2 * B - self.idx),
                        Mux(self.pick == q, B, 2 * B))
            with m.If(request != 0):
                m.d.comb += Assert(waited + ahead <= self.bound, f"port {q}: waited plus the beats ahead")
        return m


def test_node_prove():
    prove(Spec(), "spillway_node", depth=6, mode="prove")


def test_node_cover():
    prove(Spec(), "spillway_node_cover", depth=20, mode="cover")


def test_node_fifo_prove():
    """Round-robin fairness and FIFO data integrity, with every counter and the base properties (unbounded)."""
    prove(FifoSpec(), "spillway_node_fifo", depth=3, mode="prove")


def test_node_fifo_cover():
    """Not vacuous: the tracked frame of port 1, of every beat, leaves."""
    prove(FifoSpec(), "spillway_node_fifo_cover", depth=10, mode="cover")


@pytest.mark.deep
def test_node_drain_response():
    """A drain request is answered within ports x beats cycles while the switch takes returns (unbounded;
    ~1 min: ``make formal-deep``)."""
    prove(DrainResponseSpec(), "spillway_node_drain_response", depth=3, mode="prove")

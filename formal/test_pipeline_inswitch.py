"""Proofs of the in-switch pipeline's packet store and egress (hdl/pipeline_inswitch.py), unbounded.

The stages are proved on their own (formal/test_<block>.py); this spec drives every input of a
small ``InSwitchPipeline`` freely (ingress beats, ``cfg``, queue depths, ``o.ready``) and checks the
bookkeeping that joins them:

- the store is never written where a packet is waiting: an entry being written is free;
- busy entries are exactly the spill buffer's packets: pending in its FIFOs or in its output
  register (``popcount(busy) == pending + o.valid``), and the egress only reads a busy entry;
- conservation at egress (modulo the counter width): every descriptor that left the spill buffer
  was sent on ``o`` as a whole packet or dropped as ``oversize``;
- counters (wrapping, as the conservation above): ``oversize`` increments exactly when a descriptor is
  taken from the spill buffer while ``o`` shows no beat of it, ``store_stalls`` exactly in a cycle where
  stage 2 offers a beat that stage 3 is not offered (the store entry is busy).

k-induction (depth 2); covers show a store stall, an oversize drop and a drained packet sent.
Strengthening invariants (``store_invariants``; the store's bookkeeping registers are public): the
spill FIFOs' pointers; the store's entering handle is the spill buffer's; ``busy`` is exactly the
handles the spill buffer holds (its FIFO slots, read through extra read ports, and its output
register), each held once; a held packet that fits the store has its last beat there, none among the
beats already sent; the store's registered read holds the beat egress shows; egress is within a
packet exactly when beats of it were sent. The stages before stage 3 need none: they only make its
input stream, which the properties take whatever it is.

Data integrity (``IntegritySpec``, reset free at every cycle): the bytes that leave ``o`` for a handle
are the bytes that entered stage 3 (the store's input, after the aggregator's and progress file's
rewrites) for that handle. The spec numbers the packets entering stage 3 itself (from 0 after a
reset: its own arrival count) and tracks one of them, number ``pick`` (an ``AnyConst``), keeping a
shadow copy of its beats (byte ``lane`` if kept, ``keep``, ``last``, ``meta.port``; ``lane`` is an
``AnyConst`` too, so every byte lane is checked: one lane instead of all 64 halves the solver's time).
Every packet's descriptor carries the SPEC's handle (that number modulo ``2**handle_bits``). The SPEC's handle of that
packet is ``pick mod 2**handle_bits``; while the packet is stored (until it left, or the next
packet with the same handle entered) the descriptor of that handle on the spill buffer's output is
the tracked packet: each beat ``o`` sends for it equals the shadow's beat of the spec's own beat
index (kept byte, keep, last, port), and a packet longer than ``beats`` beats is never sent.
Unbounded (k-induction, depth 2): the spec's numbering is modulo 256 (a handle is reused 2**handle_bits
packets later, after which the tracking has ended). Invariants besides the store's: the store's beat
index of the entering packet is the spec's; not entered yet: no beat of it in the shadow; entering:
its number is the spec's count, its beats so far at its entry, which is free; stored: fewer than
2**handle_bits packets after it, and while held its beats at its entry, ``oversized`` iff longer than
the store, in its port's FIFO or at egress with its port and the beats sent as the spec counted; no
beat of it sent before it is at egress.
"""
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Array, Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, ResetSignal, Signal, Value

from formal.props import counters_follow
from formal.runner import prove
from hdl.pipeline_inswitch import InSwitchPipeline
from models.pipeline_inswitch import InSwitchPipelineParams

PARAMS = InSwitchPipelineParams.of(
    agg=dict(policy="esa", slots=1, workers=2, values=1), sym=dict(jobs=1, ring=2, table=2),
    spill=dict(ports=2, high=2, low=1, capacity=2, drain_rate=1, drain_window=2, flows=2, depth_bits=2,
               handle_bits=2), beats=1, data_bytes=64, counter_bits=4)


def store_invariants(m, dut):
    """What k-induction needs of the store and the spill core (the stages before stage 3 only make its input
    stream, which is free anyway): the spill FIFOs' pointers; the store's entering handle is the spill
    buffer's; ``busy`` is exactly the handles the spill buffer holds (live FIFO slots, read through extra
    read ports, and its output register), each held once; a held packet that fits the store has a last
    beat there, and none among the beats of the current descriptor already sent. Returns ``held(h)``,
    ``(port, live, handle)`` of every FIFO slot, and the store's read of entry ``h`` beat ``k``."""
    p = dut.params
    B, entries, C = p.beats, 1 << p.spill.handle_bits, p.spill.capacity
    spill, core = dut.spill, dut.spill.core
    desc = spill.o.payload
    slots = []
    for q, fifo in enumerate(core.fifos):
        head, count, tail = core.heads[q], core.counts[q], core.tails[q]
        m.d.comb += [Assert((head < C) & (tail < C) & (count <= C), f"FIFO {q}: pointers in range"),
                     Assert(tail == Mux(head + count >= C, head + count - C, head + count),
                            f"FIFO {q}: tail = head + count")]
        for k in range(C):
            read = fifo.read_port(domain="comb")
            m.d.comb += read.addr.eq(k)
            slots.append((q, Mux(k >= head, k - head, k + C - head) < count, read.data.handle))

    def held(h):
        return sum(live & (handle == h) for _, live, handle in slots) + (spill.o.valid & (desc.handle == h))

    store = {}
    for h in range(entries):
        for k in range(B):
            read = dut.store.read_port(domain="comb")
            m.d.comb += read.addr.eq(h * B + k)
            store[h, k] = read.data
    m.d.comb += Assert(dut.entering_handle == core.d.payload.handle, "the store's entering handle is the spill "
                                                                     "buffer's")
    for h in range(entries):
        m.d.comb += Assert(held(h) == dut.busy[h], f"entry {h}: busy exactly while the spill buffer holds it, once")
        with m.If(dut.busy[h] & ~dut.oversized[h]):
            m.d.comb += Assert(Cat(*(store[h, k].last for k in range(B))).any(),
                               f"entry {h}: a packet that fits the store has its last beat there")
        with m.If(spill.o.valid & (desc.handle == h)):
            m.d.comb += Assert(~Cat(*(store[h, k].last & (k < dut.sent) for k in range(B))).any(),
                               f"entry {h}: no beat sent of it so far was its last")
    # the store's read port (registered, its address the next cycle's) holds the beat egress shows
    now = dut.store.read_port(domain="comb")
    m.d.comb += now.addr.eq(desc.handle * B + dut.sent)
    with m.If(spill.o.valid):
        m.d.comb += Assert(dut.store_read.data.as_value() == now.data.as_value(),
                           "egress reads its descriptor's entry at the beat to send")
    return held, slots, store


class Spec(Elaboratable):
    """Pipeline with free inputs; store and egress bookkeeping properties."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = InSwitchPipeline(PARAMS)
        for port in (dut.i.valid, dut.i.payload, dut.cfg.valid, dut.cfg.payload, dut.qdepth, dut.o.ready):
            m.d.comb += port.eq(AnySeq(len(Value.cast(port))))
        spill = dut.spill
        busy = Signal(range(len(dut.busy) + 1))
        m.d.comb += busy.eq(sum(dut.busy[k] for k in range(len(dut.busy))))
        handle = spill.core.d.payload.handle
        entering = spill.i.valid & spill.i.ready
        sent = Signal(PARAMS.spill.counter_bits)            # whole packets sent on o
        with m.If(dut.o.valid & dut.o.ready & dut.o.payload.last):
            m.d.sync += sent.eq(sent + 1)
        left = Signal(PARAMS.spill.counter_bits)            # descriptors that left the spill buffer
        m.d.comb += left.eq(spill.forwarded + spill.drained - spill.o.valid)
        m.d.comb += [
            Assert(~(entering & dut.busy.bit_select(handle, 1)), "a busy store entry was written"),
            Assert(busy == spill.pending + spill.o.valid, "busy entries != the spill buffer's packets"),
            Assert(~spill.o.valid | dut.busy.bit_select(spill.o.payload.handle, 1),
                   "egress reads a free store entry"),
            Assert(left == (sent + dut.oversize)[:len(left)],
                   "a descriptor left without its packet being sent or counted oversize"),
            Cover(dut.store_stalls != 0),
            Cover(dut.oversize != 0),
            Cover(dut.o.valid & dut.o.payload.meta.spilled),
        ]
        # the spec's framing of o: a packet's first beat (and only it) says ``first``
        o_inside = Signal()
        with m.If(dut.o.valid & dut.o.ready):
            m.d.sync += o_inside.eq(~dut.o.payload.last)
        with m.If(dut.o.valid):
            m.d.comb += Assert(dut.o.payload.first == ~o_inside, "o: first on a packet's first beat only")
        m.d.comb += Assert(o_inside == (dut.sent != 0), "o: within a packet exactly when beats of it were sent")
        store_invariants(m, dut)
        counters_follow(m, {"oversize": dut.oversize, "store_stalls": dut.store_stalls},
                        {"oversize": spill.o.valid & spill.o.ready & ~dut.o.valid,
                         "store_stalls": dut.sym.o.valid & ~spill.i.valid}, saturating=False, block="pipeline ")
        return m


class IntegritySpec(Elaboratable):
    """Pipeline with free inputs and free reset; one tracked packet's bytes from stage 3's input to ``o``."""

    def __init__(self, params=PARAMS, cover=False):
        self.params, self.cover = params, cover

    def elaborate(self, platform):
        m = Module()
        p = self.params
        m.submodules.dut = dut = InSwitchPipeline(p)
        for port in (dut.i.valid, dut.i.payload, dut.cfg.valid, dut.cfg.payload, dut.qdepth, dut.o.ready):
            m.d.comb += port.eq(AnySeq(len(Value.cast(port))))
        B, hb, nb = p.beats, p.spill.handle_bits, p.data_bytes
        spill = dut.spill
        beat = spill.i.payload
        enter = spill.i.valid & spill.i.ready

        # The spec's numbering of the packets entering stage 3 (modulo 256: a tracked packet's handle is
        # reused 2**handle_bits packets later, and its tracking has ended by then).
        arrivals = Signal(8)
        with m.If(enter & beat.last):
            m.d.sync += arrivals.eq(arrivals + 1)
        pick = Signal(8)
        m.d.comb += pick.eq(AnyConst(8))
        lane = Signal(range(nb))
        m.d.comb += [lane.eq(AnyConst(len(lane))), Assume(lane < nb)]
        # tracked: 0 not yet, 1 entering, 2 stored (whole), 3 done (left, or its handle reused)
        state = Signal(2)
        n_in = Signal(range(B + 2))                 # its beats entered (B + 1: longer than the store)
        kept = [Signal(8, name=f"shadow_byte{k}") for k in range(B)]
        keep = [Signal(nb, name=f"shadow_keep{k}") for k in range(B)]
        last = [Signal(name=f"shadow_last{k}") for k in range(B)]
        port = Signal(8)

        def masked(value, mask):
            """Byte ``lane`` of ``value`` if ``mask`` keeps it, else 0."""
            return Mux(mask.bit_select(lane, 1), value.word_select(lane, 8), 0)

        with m.If(enter & (arrivals == pick) & (state <= 1)):
            with m.If(n_in < B):
                m.d.sync += [Array(kept)[n_in].eq(masked(beat.data, beat.keep)), Array(keep)[n_in].eq(beat.keep),
                             Array(last)[n_in].eq(beat.last)]
            m.d.sync += [n_in.eq(Mux(n_in == B + 1, n_in, n_in + 1)), port.eq(beat.meta.port),
                         state.eq(Mux(beat.last, 2, 1))]
        # every packet's descriptor (the spill core's arrival, on its last beat) has the SPEC's handle
        m.d.comb += Assert(spill.core.d.payload.handle == arrivals[:hb],     # (offered on its last beat)
                           "a packet's handle is its arrival number modulo 2**handle_bits (from 0 after reset)")
        # the next packet of the same handle entered: tracking ends (the stored packet must have left)
        with m.If(enter & beat.last & (state == 2) & (arrivals == (pick + (1 << hb))[:8])):
            m.d.sync += state.eq(3)

        # the store is written with beat k < beats of a packet entering stage 3, at its entry (the SPEC's
        # handle) and beat: never past it (a longer packet's further beats are not stored)
        beat_no = Signal(range(B + 2))              # the spec's count of the entering packet's beats
        with m.If(enter):
            m.d.sync += beat_no.eq(Mux(beat.last, 0, Mux(beat_no == B + 1, beat_no, beat_no + 1)))
        m.d.comb += Assert(dut.store_write.en == (enter & (beat_no < B)),
                           "the store is written with each beat of an entering packet that fits it")
        with m.If(dut.store_write.en):
            m.d.comb += Assert(dut.store_write.addr == arrivals[:hb] * B + beat_no,
                               "a beat is stored at its packet's entry (its handle) and beat index")

        desc = spill.o.payload
        ours = spill.o.valid & (desc.handle == pick[:hb]) & (state == 2)
        out_idx = Signal(range(B + 1))              # the spec's beat index of the tracked packet on o
        sending = ours & dut.o.valid & dut.o.ready
        o = dut.o.payload
        with m.If(sending):
            m.d.sync += out_idx.eq(out_idx + 1)
            with m.If(o.last):
                m.d.sync += state.eq(3)
        with m.If(ours & dut.o.valid):
            m.d.comb += [
                Assert(n_in <= B, "a packet longer than the store is never sent"),
                Assert(out_idx < n_in, "a handle's packet leaves with no more beats than entered"),
                Assert((masked(o.data, o.keep) == Array(kept)[out_idx]) & (o.keep == Array(keep)[out_idx]),
                       "the bytes that leave for a handle are the bytes that entered for it"),
                Assert(o.last == Array(last)[out_idx], "a handle's packet ends where it ended"),
                Assert(o.meta.port == port, "a handle's packet leaves for the port it entered with"),
            ]
        # strengthening (k-induction): the store's and spill core's invariants, and where the tracked packet is
        held, slots, store = store_invariants(m, dut)
        h = pick[:hb]
        m.d.comb += Assert((beat_no <= B + 1) & (dut.entering_index == Mux(beat_no > B, B, beat_no)),
                           "the store's beat index of the entering packet is the spec's")

        def shadow_stored(k):
            entry = Array(store[e, k] for e in range(1 << hb))[h]
            return ((masked(entry.data, entry.keep) == kept[k]) & (entry.keep == keep[k])
                    & (entry.last == last[k]))
        matches = Cat(*(shadow_stored(k) | (k >= n_in) for k in range(B))).all()
        with m.If(state == 0):
            m.d.comb += Assert((n_in == 0) & ((arrivals != pick) | (beat_no == 0)),
                               "tracked, not yet entered: no beat of it entered")
        with m.If(state == 1):
            m.d.comb += Assert((arrivals == pick) & (n_in == beat_no) & (n_in >= 1) & (n_in <= B + 1)
                               & ~dut.busy.bit_select(h, 1) & matches,
                               "tracked, entering: its beats so far stored at its entry, which is free")
        at_egress = (state == 2) & dut.busy.bit_select(h, 1) & spill.o.valid & (desc.handle == h)
        with m.If((state <= 2) & ~at_egress):
            m.d.comb += Assert(out_idx == 0, "tracked: no beat of it sent before it is at egress")
        with m.If(state == 2):
            since = (arrivals - pick)[:8]
            m.d.comb += Assert((since >= 1) & (since <= 1 << hb) & (n_in >= 1) & (n_in <= B + 1),
                               "tracked, stored: fewer than 2**handle_bits packets entered after it")
            with m.If(dut.busy.bit_select(h, 1)):
                m.d.comb += Assert(matches & (dut.oversized.bit_select(h, 1) == (n_in > B)),
                                   "tracked, held: its beats at its entry, oversized iff longer than the store")
                for q, live, handle in slots:
                    with m.If(live & (handle == h)):
                        m.d.comb += Assert(port == q, "tracked, spilled: in its port's FIFO")
                with m.If(spill.o.valid & (desc.handle == h)):
                    m.d.comb += Assert((desc.port == port) & (out_idx == dut.sent),
                                       "tracked, at egress: its port, the beats sent as the spec counted")

        if self.cover:
            m.d.comb += [Cover(sending & o.last & ~o.meta.spilled, "the tracked packet leaves forwarded"),
                         Cover(sending & o.last & o.meta.spilled, "the tracked packet leaves after a spill"),
                         Cover(ResetSignal() & (state == 2), "a reset while the tracked packet is stored")]
        return m


#: The covers' depth: the tracked packet leaves forwarded, after a spill and a drain; a reset while it is stored.
COVER_DEPTH = 7


def test_pipeline_inswitch_integrity_prove():
    """The bytes that leave for a handle are the bytes that entered for it (k-induction, reset free)."""
    prove(IntegritySpec(), "pipeline_integrity", depth=2)


def test_pipeline_inswitch_integrity_cover():
    """Not vacuous: the tracked packet leaves forwarded and after a spill; a reset while it is stored."""
    prove(IntegritySpec(cover=True), "pipeline_integrity_cover", depth=COVER_DEPTH, mode="cover")


def test_pipeline_inswitch_prove():
    result = prove(Spec(), "pipeline_store", depth=2)
    print(f"pipeline: {result.mode} depth {result.depth} in {result.seconds:.1f} s")


def test_pipeline_inswitch_cover():
    prove(Spec(), "pipeline_cover", depth=14, mode="cover")

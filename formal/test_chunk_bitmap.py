"""Formal properties of the SDR-RDMA chunk-bitmap tracker against an independent shadow in the spec.

Packets (first beats: free dest QP, immediate, opcode, EtherType, truncation and ``last``) and commands
(free fields) are free on every cycle, streams obeying their rules. The spec parses what it drove
itself and keeps its own slot table (posts checked with a table of words per (n_pkts, chunk) computed
in Python, not with the design's reciprocals), its own clear-engine length, and for one tracked slot
``ts`` (any constant) the set of packet offsets received in the current generation. From these it
predicts every result and compares, unbounded (k-induction):

- readies: ``cmd.ready`` low exactly while the spec's clear runs, ``i.ready`` also when a command is
  offered (back-pressure of every packet during a clear);
- every result on ``o``, ``LATENCY`` cycles after its packet: outcome (malformed, no_slot,
  gen_mismatch, offset_oob for every slot; placed/dup for ``ts``), fields, ``chunk_done`` exactly when
  the packet completes its chunk, ``msg_done`` exactly when it completes the message;
- ``chunk_done`` at most once per (slot, generation, chunk) and ``msg_done`` once per generation;
- the packet and chunk words of ``ts`` (through the host read port, any word of the message) equal the
  shadow's: packet bits = offsets received, chunk bit c set iff all of chunk c's packet bits are
  (so: chunk bit iff all its packet bits; all zero after a post's clear; no state change on
  ``no_slot``/``gen_mismatch``, which never reach the shadow); the slot table equals the shadow's;
- conservation: the outcome counters plus the packet in the pipeline equal the packets accepted;
- every counter increments (saturating) exactly on its event: an outcome / ``chunk_done`` /
  ``msg_done`` on a result loaded on ``o`` (whose fields the properties above pin to the shadow's),
  ``posts``, ``completes`` and ``cmd_rejected`` on a command taken as the spec judges it;
- reset explored: ``rst`` is free at every cycle (no assumption); the spec's registers reset with the
  design (slot table empty, no clear running, no result in flight, counters zero as the SPEC says), so
  every comparison above also checks the state after any reset (the memories keep their contents: a
  slot is read only after a post, whose clear the spec waits for).

Unbounded: k-induction of depth 2 (formal parameters: 2 slots, W = 8, 2 words per slot, chunks <= 4).
The memories are SRAM: the proof starts them with arbitrary contents (``sram``), so the clear engine of
a post must wipe every word of the message before a packet is judged on it. The strengthening
invariants (``_invariants``), the memories read through formal-only read ports (the design creates
them in ``__init__``):

- every word of ts's message in both memories equals the shadow's (packet bits: the offsets received;
  chunk bits: the chunks all of whose offsets are), less the packet in stage 1 (the spec has it, the
  memory gets it at that stage's edge), but for the words the clear engine has not reached yet;
- the clear engine (``clear_left``, ``clear_next``, ``clear_base``, public) against the spec's: words
  left, words cleared + left = the posted message's words, the posted slot valid, nothing received
  while ts is cleared; ts's done count = the chunks done in memory, its chunk count the message's;
- every valid slot holds a message a post accepts; ts valid -> posted; the shadow only within the
  message; the parser's framing (``inside``, public) as the spec's;
- the shadow's own consistency: the stage-1 packet's offset in it, its chunk/message done as the shadow
  has them; the chunks and message seen done on ``o`` = the shadow's less those in flight.

The chunks done are a function of the offsets received (not state of their own). The cover (depth 7)
reaches a whole 2-chunk message.

Liveness: the tracker has no timeout, by the SPEC (section 6: a message ends by its last chunk, or by the
host's ``complete``; recovering lost packets is the sender's, SR's RTO or EC). Its bounded responses are
proved above as safety, unbounded: every accepted packet's result exactly ``LATENCY`` cycles later,
``msg_done`` on the result of the packet that completes the message, and a post's clear over within its
message's words (``cmd.ready`` low exactly while the spec's count of them runs).
"""
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Array, Assert, Assume, Cat, Const, Cover, Elaboratable, Module, Mux, ResetSignal, Signal

from formal.props import counters_follow, popcount
from formal.runner import prove
from hdl.chunk_bitmap import COUNTERS, LATENCY, OP_COMPLETE, OP_POST, OUTCOMES, ChunkBitmap, ChunkBitmapParams
from hdl.headers import wire_bytes
from models import wire
from models.headers import sdr_packet

PARAMS = ChunkBitmapParams(msg_slots=2, msg_bits=2, user_bits=26, generations=2, channels=1, qp_base=4,
                           word_bits=8, slot_words=2, max_chunk=4, data_bytes=wire.SDR_MIN_LENGTH, counter_bits=5)
CODE = {name: i for i, name in enumerate(OUTCOMES)}


def words(n, chunk, w=PARAMS.word_bits):
    return -(-(-(-n // chunk)) // (w // chunk))


def lut(index, values, width):
    return Array(Const(v, width) for v in values)[index]


def entry_parts(entry, p=PARAMS):
    """The parts of a prediction-line entry: valid, outcome, unknown (a valid packet of the other slot),
    chunk done, chunk, message done, msg, offset, gen, epoch, slot index."""
    N = p.offset_bits
    parts, at = [], 0
    for w in (1, 3, 1, 1, N, 1, p.msg_bits, N, 1, 2, 1):
        parts.append(entry[at:at + w])
        at += w
    return parts


class ChunkBitmapSpec(Elaboratable):
    #: The packet and chunk memories are SRAM: they start with arbitrary contents (the clear engine of a
    #: post must wipe them before a packet of the message is judged).
    sram = True

    def __init__(self, cover=False):
        self.cover = cover

    def elaborate(self, platform):
        m = Module()
        p = PARAMS
        N, NMAX, W, SW, S, G, MC = p.offset_bits, 1 << p.offset_bits, p.word_bits, p.slot_words, p.msg_slots, \
            p.generations, p.max_chunk
        m.submodules.dut = dut = ChunkBitmap(p)
        m.d.comb += dut.o.ready.eq(1)            # rst stays free: a reset may come at any cycle

        # --- free packets (one beat each unless `last` is low), held while not taken ---
        dqpn, imm, opcode = Signal(24), Signal(32), Signal(8)
        bad_eth, last, short = Signal(), Signal(), Signal()
        fields = Cat(dqpn, imm, opcode, bad_eth, last, short)
        m.d.comb += [fields.eq(AnySeq(len(fields))), dut.i.valid.eq(AnySeq(1))]
        template = bytes(sdr_packet(0, 0, qp_base=p.qp_base, generations=G, msg_bits=p.msg_bits,
                                    user_bits=p.user_bits, payload=b""))
        assert len(template) == p.data_bytes
        data = dut.i.payload.data
        m.d.comb += [data.eq(int.from_bytes(template, "little")),
                     wire_bytes(data, wire.BTH_DQPN_AT + 1, 3).eq(dqpn),
                     wire_bytes(data, wire.IMMDT_OFFSET, 4).eq(imm),
                     wire_bytes(data, wire.BTH_OPCODE_AT, 1).eq(opcode),
                     wire_bytes(data, wire.ETHERTYPE_AT, 2).eq(Mux(bad_eth, 0x86DD, wire.ETHERTYPE_IPV4)),
                     dut.i.payload.last.eq(last),
                     dut.i.payload.keep.eq(Mux(last & short, (1 << (p.data_bytes - 1)) - 1, (1 << p.data_bytes) - 1))]
        cmd = dut.cmd.payload
        m.d.comb += [cmd.as_value().eq(AnySeq(len(cmd.as_value()))), dut.cmd.valid.eq(AnySeq(1))]
        for port, value in ((dut.i, fields), (dut.cmd, cmd.as_value())):
            held, before = Signal(), Signal(len(value))
            m.d.sync += [held.eq(port.valid & ~port.ready), before.eq(value)]
            with m.If(held):
                m.d.comb += Assume(port.valid & (value == before))

        # --- the spec's parse ---
        inside = Signal()
        first = ~inside
        take = Signal()
        m.d.comb += take.eq(dut.i.valid & dut.i.ready & first)
        with m.If(dut.i.valid & dut.i.ready):
            m.d.sync += inside.eq(~last)
        malformed = Signal()
        m.d.comb += malformed.eq(bad_eth | (opcode != wire.SDR_OPCODE) | (last & short) | (dqpn < p.qp_base)
                                 | (dqpn >= p.qp_base + G * p.channels))
        msg, off, gen = imm[32 - p.msg_bits:], imm[p.user_bits:p.user_bits + N], Signal()
        m.d.comb += gen.eq((dqpn - p.qp_base)[0])
        idx = msg[0]

        # --- the spec's slot table and clear length ---
        sv = [Signal(name=f"sv{s}") for s in range(S)]
        stag = [Signal(p.msg_bits, name=f"stag{s}") for s in range(S)]
        sgen = [Signal(name=f"sgen{s}") for s in range(S)]
        sn = [Signal(N + 1, name=f"sn{s}") for s in range(S)]
        sch = [Signal(3, name=f"sch{s}") for s in range(S)]
        busy = Signal(range(SW + 1))
        take_cmd = dut.cmd.valid & dut.cmd.ready
        cidx = cmd.msg[0]
        table = [words(n, c) if 1 <= n <= NMAX and 1 <= c <= MC else 99 for c in range(8) for n in range(32)]
        cwords = Signal(8)
        m.d.comb += cwords.eq(lut(Cat(cmd.n_pkts, cmd.chunk[:3]), table, 8))
        post_ok = Signal()
        m.d.comb += post_ok.eq((cmd.op == OP_POST) & (cmd.gen < G) & (cmd.n_pkts >= 1) & (cmd.n_pkts <= NMAX)
                               & (cmd.chunk >= 1) & (cmd.chunk <= MC) & (cwords <= SW))
        complete_ok = (cmd.op == OP_COMPLETE) & Array(sv)[cidx] & (Array(stag)[cidx] == cmd.msg)
        with m.If(busy != 0):
            m.d.sync += busy.eq(busy - 1)
        with m.If(take_cmd & post_ok):
            m.d.sync += busy.eq(cwords)
        for s in range(S):
            with m.If(take_cmd & post_ok & (cidx == s)):
                m.d.sync += [sv[s].eq(1), stag[s].eq(cmd.msg), sgen[s].eq(cmd.gen), sn[s].eq(cmd.n_pkts),
                             sch[s].eq(cmd.chunk)]
            with m.If(take_cmd & complete_ok & (cidx == s)):
                m.d.sync += sv[s].eq(0)
        m.d.comb += [Assert(dut.cmd.ready == (busy == 0), "cmd.ready low exactly while the clear runs"),
                     Assert(dut.i.ready == ((busy == 0) & ~dut.cmd.valid),
                            "i.ready low while the clear runs or a command is offered")]
        for s in range(S):
            m.d.comb += Assert(dut.s_valid[s] == sv[s], f"slot {s}: valid as the shadow's")
            with m.If(sv[s]):
                m.d.comb += Assert((dut.s_tag[s] == stag[s]) & (dut.s_gen[s] == sgen[s]) & (dut.s_n[s] == sn[s])
                                   & (dut.s_chunk[s] == sch[s]), f"slot {s}: tag, gen, n_pkts, chunk as the shadow's")

        # --- the tracked slot: offsets received in this generation; its chunks done follow from them ---
        ts = Signal()
        m.d.comb += ts.eq(AnyConst(1))
        got = Signal(NMAX)
        epoch = Signal(2)                   # posts of ts accepted (mod 4): the generation of a result
        posted = Signal()
        since = Signal(range(8))
        with m.If(since != 7):
            m.d.sync += since.eq(since + 1)
        n_t, ch_t = Array(sn)[ts], Array(sch)[ts]
        nmask = Signal(NMAX)
        m.d.comb += nmask.eq(lut(n_t, [(1 << min(n, NMAX)) - 1 for n in range(32)], NMAX))
        chunk_of = Signal(N)
        m.d.comb += chunk_of.eq(lut(Cat(off, ch_t), [o // c if c else 0 for c in range(8) for o in range(NMAX)], N))
        cmask = Signal(NMAX)
        m.d.comb += cmask.eq(lut(Cat(off, ch_t), [sum(1 << i for i in range(o // c * c, o // c * c + c) if i < NMAX)
                                                  if c else 0 for c in range(8) for o in range(NMAX)], NMAX) & nmask)
        # the offsets of chunk c of ts's message, for every c
        chunk_masks = [Signal(NMAX, name=f"chunk_mask{c}") for c in range(NMAX)]
        m.d.comb += [chunk_masks[c].eq(lut(ch_t, [sum(1 << i for i in range(c * k, c * k + k) if i < NMAX)
                                                  if k else 0 for k in range(8)], NMAX) & nmask)
                     for c in range(NMAX)]

        def chunks_done(offsets, name):
            """Bit c: chunk c of ts's message has all its offsets in ``offsets``."""
            done = Signal(NMAX, name=name)
            m.d.comb += done.eq(Cat(*((chunk_masks[c] != 0) & ((offsets & chunk_masks[c]) == chunk_masks[c])
                                      for c in range(NMAX))))
            return done
        cdone = chunks_done(got, "cdone")
        own = ~malformed & Array(sv)[idx] & (Array(stag)[idx] == msg)
        no_slot = ~malformed & ~own
        gen_mm = own & (Array(sgen)[idx] != gen)
        oob = own & ~gen_mm & (off >= Array(sn)[idx])
        valid_pkt = own & ~gen_mm & ~oob
        tracked = valid_pkt & (idx == ts)
        dup = tracked & got.bit_select(off, 1)
        new_got = Signal(NMAX)
        m.d.comb += new_got.eq(got | (Const(1, NMAX) << off))
        chunk_fin = tracked & ~dup & ((new_got & cmask) == cmask)
        msg_fin = tracked & ~dup & (new_got == nmask)
        with m.If(take & tracked & ~dup):
            m.d.sync += got.eq(new_got)
        with m.If(take_cmd & post_ok & (cidx == ts)):
            m.d.sync += [got.eq(0), epoch.eq(epoch + 1), posted.eq(1), since.eq(0)]

        # --- predicted result, delayed LATENCY cycles ---
        outcome = Mux(malformed, CODE["malformed"], Mux(no_slot, CODE["no_slot"], Mux(
            gen_mm, CODE["gen_mismatch"], Mux(oob, CODE["offset_oob"], Mux(dup, CODE["dup"], CODE["placed"])))))
        pred = Cat(take, outcome.as_unsigned()[:3], valid_pkt & (idx != ts), chunk_fin, chunk_of, msg_fin, msg, off,
                   gen, epoch, idx)
        line = [Signal(len(pred), name=f"pred{d}") for d in range(LATENCY)]
        m.d.sync += line[0].eq(pred)
        for d in range(1, LATENCY):
            m.d.sync += line[d].eq(line[d - 1])
        q = line[-1]
        q_valid, q_outcome, q_unknown, q_cdone, q_chunk, q_mdone, q_msg, q_off, q_gen, q_epoch, q_idx = entry_parts(q)
        o = dut.o.payload
        m.d.comb += Assert(dut.o.valid == q_valid, "a result exactly LATENCY cycles after each packet")
        with m.If(q_valid):
            with m.If(q_unknown):
                m.d.comb += Assert((o.outcome == CODE["placed"]) | (o.outcome == CODE["dup"]),
                                   "a valid packet of the untracked slot is placed or dup")
            with m.Else():
                m.d.comb += [Assert(o.outcome == q_outcome, "outcome as the shadow's"),
                             Assert(o.chunk_done == q_cdone, "chunk_done exactly when the packet completes its chunk"),
                             Assert(o.msg_done == q_mdone, "msg_done exactly when the packet completes the message")]
                with m.If(q_cdone):
                    m.d.comb += Assert(o.chunk == q_chunk, "chunk_done names the packet's chunk")
            with m.If(q_outcome != CODE["malformed"]):
                m.d.comb += Assert((o.msg == q_msg) & (o.offset == q_off) & (o.gen == q_gen),
                                   "placement descriptor fields")
        # once per (slot, generation, chunk) / per generation, from the outputs
        seen, seen_msg = Signal(NMAX), Signal()
        current = q_valid & ~q_unknown & (q_idx == ts) & (q_epoch == epoch) & posted
        with m.If(take_cmd & post_ok & (cidx == ts)):
            m.d.sync += [seen.eq(0), seen_msg.eq(0)]
        with m.Elif(current & o.chunk_done):
            m.d.sync += seen.eq(seen | (Const(1, NMAX) << o.chunk))
            with m.If(o.msg_done):
                m.d.sync += seen_msg.eq(1)
        with m.If(current & o.chunk_done):
            m.d.comb += Assert(~seen.bit_select(o.chunk, 1), "chunk_done once per (slot, generation, chunk)")
        with m.If(current & o.msg_done):
            m.d.comb += Assert(~seen_msg, "msg_done once per generation")

        # --- memories of ts through the host read port ---
        tw = Signal(range(SW))
        m.d.comb += [tw.eq(AnyConst(range(SW))), Assume(tw < SW), dut.rd_addr.eq(ts * SW + tw)]

        def packet_word(offsets, w):
            """Word ``w`` of ts's packet memory holding ``offsets`` (the layout of ``position``)."""
            value = Const(0, W)
            for c in reversed(range(1, MC + 1)):
                bits = [0] * W
                for o_ in range(NMAX):
                    word, bit = p.position(o_, c)
                    if word == w:
                        bits[bit] = offsets[o_]
                value = Mux(ch_t == c, Cat(*bits), value)
            return value
        exp_pkt = Signal(W)
        m.d.comb += exp_pkt.eq(Array(packet_word(got, w) for w in range(SW))[tw])
        exp_chunk = Signal(W)
        m.d.comb += exp_chunk.eq(Array(cdone[w * W:(w + 1) * W] for w in range(SW))[tw])
        d_pkt = [Signal(W, name=f"d_pkt{d}") for d in range(2)]
        d_chunk = [Signal(W, name=f"d_chunk{d}") for d in range(2)]
        m.d.sync += [d_pkt[0].eq(exp_pkt), d_pkt[1].eq(d_pkt[0]), d_chunk[0].eq(exp_chunk), d_chunk[1].eq(d_chunk[0])]
        in_message = Signal()
        m.d.comb += in_message.eq(tw < lut(Cat(n_t, ch_t), [words(n, c) if 1 <= n <= NMAX and 1 <= c <= MC else 0
                                                            for c in range(8) for n in range(32)], 4))
        with m.If(posted & (since >= SW + 2) & in_message):
            m.d.comb += [Assert(dut.rd_pkt == d_pkt[1], "packet word of ts equals the offsets received"),
                         Assert(dut.rd_chunk == d_chunk[1], "chunk word of ts: chunk bit iff all its packet bits")]

        # --- conservation ---
        cmax = (1 << p.counter_bits) - 1
        accepted = Signal(p.counter_bits)             # saturating: no outcome counter has saturated below it
        with m.If(take & (accepted != cmax)):
            m.d.sync += accepted.eq(accepted + 1)
        with m.If(accepted != cmax):
            m.d.comb += Assert(sum(getattr(dut, name) for name in OUTCOMES) + line[0][0] == accepted,
                               "conservation: outcome counters + the packet in flight = packets accepted")

        # --- counters: each on its event (results from o, whose fields the shadow pins; commands as judged) ---
        counters_follow(m, {name: getattr(dut, name) for name in COUNTERS},
                        {**{name: dut.o.valid & (o.outcome == CODE[name]) for name in OUTCOMES},
                         "chunk_done": dut.o.valid & o.chunk_done, "msg_done": dut.o.valid & o.msg_done},
                        delayed=True)
        counters_follow(m, {name: getattr(dut, name) for name in COUNTERS},
                        {"posts": take_cmd & post_ok, "completes": take_cmd & complete_ok,
                         "cmd_rejected": take_cmd & ~post_ok & ~complete_ok})

        self._invariants(m, dut, ts, posted, since, busy, sv, sn, sch, got, cdone, line, epoch, seen, seen_msg,
                         nmask, chunks_done, packet_word, take_cmd & post_ok, cidx, inside)

        if self.cover:
            o_ts = dut.o.valid & (o.msg[0] == ts) & (o.outcome == CODE["placed"])
            m.d.comb += [
                Cover(o_ts & o.msg_done & (o.chunk == 1)),
                Cover(dut.o.valid & (o.outcome == CODE["dup"])),
                Cover(dut.o.valid & (o.outcome == CODE["gen_mismatch"])),
                Cover(posted & (since >= SW + 2) & in_message & (dut.rd_pkt != 0) & (tw == 1)),
                Cover(posted & (since >= SW + 2) & in_message & (dut.rd_chunk != 0)),
                Cover(ResetSignal() & Cat(*sv).any() & (busy != 0)),
            ]
        return m

    def _invariants(self, m, dut, ts, posted, since, busy, sv, sn, sch, got, cdone, line, epoch, seen, seen_msg,
                    nmask, chunks_done, packet_word, post, cidx, inside):
        """What k-induction needs besides the properties: the memories' words of ts's message equal the
        shadow's (less the packet in stage 1, which writes at its edge; the words the clear engine has not
        reached yet excepted), the clear engine's progress, ts's done count and chunks, the shadow's own
        consistency (the packet in flight, the chunks seen done on ``o``)."""
        p = PARAMS
        NMAX, W, SW = 1 << p.offset_bits, p.word_bits, p.slot_words
        n_t, ch_t = Array(sn)[ts], Array(sch)[ts]
        cslot = Signal(name="clear_slot")                # the slot the clear engine wipes
        with m.If(post):
            m.d.sync += cslot.eq(cidx)
        n_c, ch_c = Array(sn)[cslot], Array(sch)[cslot]
        words_table = [words(n, c) if 1 <= n <= NMAX and 1 <= c <= p.max_chunk else 0
                       for c in range(8) for n in range(32)]
        m.d.comb += [Assert(dut.clear_left == busy, "the clear engine has the spec's words left"),
                     Assert(dut.inside == inside, "within a packet as the spec's framing")]
        with m.If(busy != 0):
            m.d.comb += [Assert(Array(sv)[cslot] & (dut.clear_base == cslot * SW),
                                "the clear engine wipes the posted slot (valid: no command is taken meanwhile)"),
                         Assert(dut.clear_next + busy == lut(Cat(n_c, ch_c), words_table, 4),
                                "the clear engine: words cleared + words left = the message's words")]
        clearing_ts = (busy != 0) & (cslot == ts)
        with m.If(clearing_ts):
            m.d.comb += Assert((since + busy == lut(Cat(n_t, ch_t), words_table, 4)) & (got == 0),
                               "clearing ts: cycles since its post + words left = its words; nothing received")
        for s in range(p.msg_slots):
            with m.If(sv[s]):
                m.d.comb += Assert((sn[s] >= 1) & (sn[s] <= NMAX) & (sch[s] >= 1) & (sch[s] <= p.max_chunk)
                                   & (lut(Cat(sn[s], sch[s]), words_table, 4) != 0)
                                   & (lut(Cat(sn[s], sch[s]), words_table, 4) <= SW),
                                   f"slot {s}: a valid slot holds a message a post accepts")
        m.d.comb += [Assert(~Array(sv)[ts] | posted, "ts valid: posted since the reset"),
                     Assert((got & ~nmask) == 0, "the shadow holds offsets of the message only")]
        # the packet in stage 1 (line 0) and at the output (line 1), as the spec predicted them
        placed = CODE["placed"]
        v0, out0, unk0, cfin0, chunk0, mfin0, _, off0, _, ep0, idx0 = entry_parts(line[0])
        v1, out1, unk1, cfin1, chunk1, mfin1, _, _, _, ep1, idx1 = entry_parts(line[1])
        fly0 = Signal(name="fly0")                       # a packet of ts in stage 1, placed in this generation
        m.d.comb += fly0.eq(v0 & ~unk0 & (out0 == placed) & (idx0 == ts) & (ep0 == epoch) & posted)
        fly1 = v1 & ~unk1 & (out1 == placed) & (idx1 == ts) & (ep1 == epoch) & posted
        with m.If(fly0):
            m.d.comb += [Assert(got.bit_select(off0, 1), "the packet in stage 1 is in the shadow"),
                         Assert(cfin0 == cdone.bit_select(chunk0, 1), "stage 1: chunk done as the shadow has it"),
                         Assert(mfin0 == (got == nmask), "stage 1: message done as the shadow has it")]
        with m.If(fly1 & cfin1):
            m.d.comb += Assert(cdone.bit_select(chunk1, 1), "the output's chunk done is in the shadow")
        m.d.comb += [
            Assert(seen == (cdone & ~Mux(fly0 & cfin0, Const(1, NMAX) << chunk0, 0)
                          & ~Mux(fly1 & cfin1, Const(1, NMAX) << chunk1, 0)),
                   "the chunks seen done on o: the shadow's less those in flight"),
            Assert(seen_msg == (posted & (got == nmask) & ~(fly0 & mfin0) & ~(fly1 & mfin1)),
                   "the message seen done on o: the shadow's less one in flight")]
        # the memories' words of ts's message: the shadow's, less the packet in stage 1
        got_mem = Signal(NMAX, name="got_mem")
        m.d.comb += got_mem.eq(Mux(fly0, got & ~(Const(1, NMAX) << off0), got))
        cdone_mem = chunks_done(got_mem, "cdone_mem")
        for w in range(SW):
            pkt_word, chunk_word = dut.pkt_mem.read_port(domain="comb"), dut.chunk_mem.read_port(domain="comb")
            m.d.comb += [pkt_word.addr.eq(ts * SW + w), chunk_word.addr.eq(ts * SW + w)]
            in_message = w < lut(Cat(n_t, ch_t), words_table, 4)
            with m.If(posted & in_message & ~(clearing_ts & (w >= dut.clear_next))):
                m.d.comb += [Assert(pkt_word.data == packet_word(got_mem, w),
                                    f"word {w} of ts's packet memory: the offsets received"),
                             Assert(chunk_word.data == cdone_mem[w * W:(w + 1) * W],
                                    f"word {w} of ts's chunk memory: the chunks done")]
        # ts's chunk count and done count (the message is done when done + 1 == chunks)
        chunks_table = [p.chunks(n, c) if 1 <= n <= NMAX and 1 <= c <= p.max_chunk else 0
                        for c in range(8) for n in range(32)]
        with m.If(Array(sv)[ts]):
            m.d.comb += [Assert(Array(dut.s_chunks)[ts] == lut(Cat(n_t, ch_t), chunks_table, p.offset_bits + 1),
                                "ts: its chunk count"),
                         Assert(Array(dut.s_done)[ts] == popcount(cdone_mem),
                                "ts: its done count is the chunks done in memory")]


def test_chunk_bitmap_prove():
    """Every result, the memories of the tracked slot, conservation and counters, unbounded (k-induction)."""
    prove(ChunkBitmapSpec(), "chunk_bitmap", depth=2)


def test_chunk_bitmap_cover():
    """The properties are not vacuous: a two-chunk message done, dup, gen_mismatch, bits read back."""
    prove(ChunkBitmapSpec(cover=True), "chunk_bitmap_cover", depth=7, mode="cover")

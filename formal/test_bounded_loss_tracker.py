"""Formal properties of the DBLP bounded-loss round tracker, against shadows kept by the spec.

The spec drives packets whose shim fields (version, flags, phase, job, round, idx, cnt, reserved
fields), UDP port (right or wrong), length, beat boundaries and ``i.valid`` are free on every cycle,
phase-table writes and the three outputs' ``ready`` free too. It watches only the block's ports:
an output register holds a *new* event in a cycle when it is valid and was free (empty or taken) in
the cycle before. For one slot ``s`` (any constant) it keeps a shadow of the live round's received
indices, built from the ``fwd`` events alone. Properties:

- every close is FULL with count = E, or BOUNDED with need <= count < E, or ABORT with
  retries = ``retry_max`` and count < need; every NACK has count < need and 1 <= retries <= max;
- count equals the popcount of the round's bitmap: a close or NACK of slot ``s`` carries the number
  of distinct indices the shadow saw forwarded, and a NACK names the shadow's first missing index;
- every forward carries the header fields (job, round, idx, phase) of its packet's first beat and
  its handle (the packets' number from 0 after reset, modulo 2**handle_bits), all from the spec's
  own framing of the beats taken (which a reset restarts); the length (its packet's bytes after the
  shim) is left to simulation: comparing it tripled the run (19 -> 58 s);
- each (round, idx) is forwarded at most once per round; nothing is forwarded for a round of slot
  ``s`` after its close (until another round reopened the slot);
- conservation every cycle: the per-reason packet counters sum to the last beats accepted, and
  ``forwarded``, ``full + bounded + abort`` and ``nacks`` equal the events loaded on their outputs
  (while no counter can have saturated);
- counters: ``forwarded``, ``full``, ``bounded``, ``abort`` and ``nacks`` increment (saturating)
  exactly on a new event of their kind on the outputs, ``loss_accepted`` / ``loss_aborted`` by
  ``cnt - count`` of a new BOUNDED / ABORT close, ``cfg_writes`` / ``cfg_rejected`` on a table write
  the spec judges valid / invalid (SPEC: phase < phases, tau <= 255, 1 <= deadline < 2**deadline_bits);
- reset explored: ``rst`` is free at every cycle in every run (no assumption keeps it low; the spec's
  registers reset with the design): the shadow of slot ``s`` restarts empty, so a round state kept
  over a reset shows as a close or NACK the shadow never saw forwarded; the cycle after a reset the
  three outputs are empty, and the phase table (the spec's own, from the valid writes) is reset to
  ``(tau 0, deadline)``;
- malformed (its own bmc run, ``test_tracker_malformed``, depth ``MALFORMED_DEPTH``): the spec judges
  every packet by the SPEC's header rules itself, on its own framing (first beat held, length from the
  beats: an earlier beat or a last beat of >= 53 bytes): ver 1, reserved flag bits and fields 0,
  phase < phases, 1 <= cnt <= e_max, idx < cnt, UDP to ``port``; a packet they reject raises
  ``malformed`` by one; a packet they accept, of slot ``s``, raises it by one iff it belongs to the
  live round (the shadow's) with another cnt or phase than the round's opening packet (the shadow
  records them from its forward and the spec's framing); no decision, no change;
- liveness (with the close/NACK outputs always ready and no table writes): each deadline period of an
  open round of slot ``s`` is answered (closed or NACKed) within D + rounds x (words + 2) cycles of its
  opening or its last NACK, so the round closes within (``retry_max`` + 1) times that, + 1
  (``live_bound``); the tight per-period bound at ``RESPONSE`` (7: 6 fails) in a run of its own.

Every run is k-induction (unbounded), at ``PARAMS`` but the tight response's. Strengthening invariants
(``_invariants``; the parser, the packet numbering, the scanner and the clear engine are public): the
parser's framing, held header and bytes so far equal the spec's; the next handle is the spec's packet
count; for every slot: 1 <= E <= e_max, no bitmap bit at or above E, dirty or closed only when not live,
a clean free slot's bitmap zero, its round maps to it; the clear engine's slot dirty with the words
before its word zero; the scanner's searched slot live, below its bound, with no missing index before
its word; slot ``s`` live, closed, tag, bitmap, E and phase equal to the shadow's with this cycle's new
events. The liveness runs add: the design's age of slot ``s`` (now - t_first) is the spec's wait (1 in
the cycle of a NACK), the phase table as reset left it, and (close bound) slot ``s``'s age is at most a
period per NACK so far plus the wait. The stimulus keeps packets under 64 KiB (the parser counts bytes
modulo 2**16; an IPv4 datagram is shorter).

The design's own invariants (``BoundedLossTracker._invariants``: count == popcount of the bitmap
registers, 1 <= count < E, a live slot is clean, one access per bitmap bank per cycle) are checked
along the way.
"""
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Array, Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, ResetSignal, Signal

from formal.props import after_reset, counters_follow, popcount
from formal.runner import prove
from hdl.bounded_loss_tracker import ABORT, BOUNDED, COUNTERS, FULL, BoundedLossTracker, BoundedLossTrackerParams
from hdl.headers import DBLP, DBLP_OFFSET, UDP, UDP_OFFSET, wire_view
from models import wire
from models.bounded_loss_tracker import PACKET_COUNTERS
from models.headers import dblp_packet

#: Small enough for the solver, large enough for every mechanism: 2 slots, E <= 4 in 2-bit words
#: (two words: the search walks), 2 phases, 1 retry, a 53-byte bus (payload in extra beats).
PARAMS = BoundedLossTrackerParams(rounds=2, e_max=4, word_bits=2, phases=2, retry_max=1, deadline=4,
                                  deadline_bits=4, time_bits=6, data_bytes=53, handle_bits=2, counter_bits=8)


class _Discard:
    """Stands in for ``m.d.comb`` where a run leaves the safety properties out: drops what is added
    (marked as used: Amaranth would warn about a property never added to a module)."""

    def __iadd__(self, statements):
        for statement in statements if isinstance(statements, list) else [statements]:
            statement._MustUse__used = True
        return self


class TrackerSpec(Elaboratable):
    """The tracker with free inputs and the properties above (``liveness``: outputs ready, no cfg)."""

    def __init__(self, params=PARAMS, liveness=False, cover=False, malformed=False, period=None):
        self.params, self.liveness, self.cover, self.malformed = params, liveness, cover, malformed
        self.period = period

    def elaborate(self, platform):
        m = Module()
        p = self.params
        m.submodules.dut = dut = BoundedLossTracker(p)
        R, E, W = p.rounds, p.e_max, p.word_bits
        cmax = (1 << p.counter_bits) - 1

        # --- free stimulus ---
        template = bytes(dblp_packet()).ljust(p.data_bytes, b"\0")[:p.data_bytes]
        data = Signal(8 * p.data_bytes)
        shim = wire_view(DBLP, data, DBLP_OFFSET)
        udp = wire_view(UDP, data, UDP_OFFSET)
        wrong_port = AnySeq(1)
        m.d.comb += [data.eq(int.from_bytes(template, "little")), shim.as_value().eq(AnySeq(DBLP.size)),
                     udp.dport.eq(Mux(wrong_port, p.port + 1, p.port))]
        keep_bytes = Signal(range(p.data_bytes + 1))
        last = AnySeq(1)
        m.d.comb += [keep_bytes.eq(AnySeq(len(keep_bytes))), Assume(keep_bytes >= 1),
                     Assume(keep_bytes <= p.data_bytes)]
        beat = dut.i.payload
        m.d.comb += [beat.data.eq(data), beat.last.eq(last), beat.first.eq(0),
                     beat.keep.eq(Mux(last, (1 << keep_bytes) - 1, (1 << p.data_bytes) - 1)),
                     dut.i.valid.eq(AnySeq(1)), dut.cfg.payload.as_value().eq(AnySeq(len(dut.cfg.payload.as_value())))]
        # small fields keep the state space small; cnt, idx and the rest stay free
        m.d.comb += [Assume(shim.job < 2), Assume(shim.round < 2 * R)]
        if self.liveness:
            m.d.comb += [dut.cfg.valid.eq(0), dut.close.ready.eq(1), dut.nack.ready.eq(1),
                         dut.fwd.ready.eq(AnySeq(1))]
        else:
            m.d.comb += [dut.cfg.valid.eq(AnySeq(1)), dut.close.ready.eq(AnySeq(1)), dut.nack.ready.eq(AnySeq(1)),
                         dut.fwd.ready.eq(AnySeq(1))]

        # --- new events on the outputs ---
        def new_event(port, name):
            was_free = Signal(init=1, name=f"{name}_was_free")
            m.d.sync += was_free.eq(~port.valid | port.ready)
            new = Signal(name=f"new_{name}")
            m.d.comb += new.eq(port.valid & was_free)
            return new
        new_fwd, new_close = new_event(dut.fwd, "fwd"), new_event(dut.close, "close")
        new_nack = new_event(dut.nack, "nack")
        f, c, n = dut.fwd.payload, dut.close.payload, dut.nack.payload

        # the safety properties (the liveness runs check only their own: the safety run proves these); the
        # malformed run adds the malformed judgement to them
        safety = _Discard() if self.liveness else m.d.comb
        judged = m.d.comb if self.malformed else _Discard()

        # --- the spec's own framing: every forward carries its packet's header fields and handle ---
        taken = dut.i.valid & dut.i.ready
        sp_inside = Signal()                          # a beat of the current packet was taken (resets)
        # the first beat's shim and port, held: the packet's header as the spec drove it
        sp_shim, sp_wrong = Signal(DBLP.size), Signal()
        sp_len = Signal(16)                           # bytes of the packet before this beat
        held = Signal(8 * p.data_bytes)
        m.d.comb += [held.eq(int.from_bytes(template, "little")),
                     wire_view(DBLP, held, DBLP_OFFSET).as_value().eq(sp_shim),
                     wire_view(UDP, held, UDP_OFFSET).dport.eq(Mux(sp_wrong, p.port + 1, p.port))]
        sp = wire_view(DBLP, held, DBLP_OFFSET)
        first = ~sp_inside
        cur = [Mux(first, shim.job, sp.job), Mux(first, shim.round, sp.round), Mux(first, shim.idx, sp.idx),
               Mux(first, shim.phase, sp.phase)]

        # the SPEC's header rules, judged on the first beat (held) and the spec's own length
        def rules(h, wrong):
            return ((h.ver == wire.DBLP_VERSION) & (h.fresv == 0) & (h.resv == 0) & (h.resv2 == 0)
                    & (h.phase < p.phases) & (h.cnt >= 1) & (h.cnt <= E) & (h.idx < h.cnt) & ~wrong)
        hdr_rules = rules(shim, wrong_port)
        with m.If(taken & first):
            m.d.sync += [sp_shim.eq(shim.as_value()), sp_wrong.eq(wrong_port)]
        cur_cnt = Mux(first, shim.cnt, sp.cnt)
        # well formed: header rules and at least DBLP_HEADER_BYTES (an earlier beat is data_bytes long)
        well_formed = Mux(first, hdr_rules, rules(sp, sp_wrong)) & (sp_inside | (keep_bytes >= wire.DBLP_HEADER_BYTES))

        with m.If(taken):
            m.d.sync += [sp_inside.eq(~last), sp_len.eq(Mux(last, 0, Mux(first, 0, sp_len) + p.data_bytes))]
        # packets are shorter than 64 KiB (an IPv4 datagram's length is 16 bits; the parser counts modulo 2**16)
        m.d.comb += Assume(~(taken & sp_inside) | (sp_len + Mux(last, keep_bytes, p.data_bytes) <= 0xFFFF))
        decided, d_job, d_round, d_idx, d_phase = Signal(), Signal(8), Signal(16), Signal(16), Signal(4)
        d_handle, handles = Signal(p.handle_bits), Signal(p.handle_bits)
        m.d.sync += decided.eq(taken & last)
        d_cnt = Signal(16)
        with m.If(taken & last):
            m.d.sync += [d_job.eq(cur[0]), d_round.eq(cur[1]), d_idx.eq(cur[2]), d_phase.eq(cur[3]),
                         d_handle.eq(handles), handles.eq(handles + 1), d_cnt.eq(cur_cnt)]

        with m.If(new_fwd):
            safety += [Assert(decided, "a forward follows the last beat of its packet"),
                       Assert((f.job == d_job) & (f.round == d_round) & (f.idx == d_idx) & (f.phase == d_phase),
                              "a forward carries the header fields of its packet's first beat (the spec's framing)"),
                       Assert(f.handle == d_handle, "a forward's handle is its packet's number (from 0 after reset)")]

        # --- kinds of every close and NACK ---
        with m.If(dut.close.valid):
            with m.Switch(c.kind):
                with m.Case(FULL):
                    safety += Assert(c.count == c.cnt, "a FULL close has count == E")
                with m.Case(BOUNDED):
                    safety += Assert((c.need <= c.count) & (c.count < c.cnt), "a BOUNDED close has need <= count < E")
                with m.Case(ABORT):
                    safety += Assert((c.retries == p.retry_max) & (c.count < c.need),
                                       "an ABORT close follows retry_max NACKs, below its bound")
                with m.Default():
                    safety += Assert(0, "a close is FULL, BOUNDED or ABORT")
        with m.If(dut.nack.valid):
            safety += Assert((n.count < n.need) & (n.retries >= 1) & (n.retries <= p.retry_max),
                               "a NACK is below its bound, within retry_max")

        # --- shadow of slot s: indices forwarded in its live round ---
        s = Signal(range(R))
        m.d.comb += s.eq(AnyConst(len(s)))
        lr = (R - 1).bit_length()

        def of_s(event):
            return (event.round[:lr] == s) if lr else 1
        sh_live, sh_closed = Signal(), Signal()
        sh_job, sh_round = Signal(8), Signal(16)
        sh_bits = Signal(E)
        cap = live_bound(p) + 1                  # the age saturates past the liveness bound
        sh_age = Signal(range(cap + 1))
        bit = Signal(E)
        m.d.comb += bit.eq(Mux(f.idx < E, 1 << f.idx[:(E - 1).bit_length() or 1], 0))
        fwd_s = new_fwd & of_s(f)
        same = (f.job == sh_job) & (f.round == sh_round)
        bits_now = Signal(E)               # the shadow after this cycle's new fwd
        m.d.comb += bits_now.eq(Mux(fwd_s, Mux(sh_live, sh_bits, 0) | bit, sh_bits))
        ones = popcount(bits_now)
        with m.If(fwd_s):
            safety += Assert(f.idx < E, "a forwarded index is below e_max")
            with m.If(sh_live):
                safety += [Assert(same, "slot s forwards only its live round"),
                             Assert((sh_bits & bit) == 0, "each (round, idx) is forwarded at most once")]
            with m.Elif(sh_closed & same):
                safety += Assert(0, "nothing is forwarded for a closed round")
            m.d.sync += [sh_live.eq(1), sh_bits.eq(bits_now), sh_job.eq(f.job), sh_round.eq(f.round),
                         sh_closed.eq(0)]
            with m.If(~sh_live):
                m.d.sync += sh_age.eq(1)
        with m.If(sh_live):
            m.d.sync += sh_age.eq(Mux(sh_age == cap, sh_age, sh_age + 1))
        close_s, nack_s = new_close & of_s(c), new_nack & of_s(n)
        with m.If(close_s):
            safety += [Assert(sh_live | fwd_s, "a close of slot s ends a round that forwarded"),
                         Assert((c.job == Mux(fwd_s, f.job, sh_job)) & (c.round == Mux(fwd_s, f.round, sh_round)),
                                "a close of slot s is for its live round"),
                         Assert(c.count == ones, "a close's count is the popcount of the round's bitmap")]
            m.d.sync += [sh_live.eq(0), sh_closed.eq(1), sh_bits.eq(0)]
        with m.If(nack_s):
            first_missing = Signal(range(E + 1))
            value = E
            for b in reversed(range(E)):
                value = Mux(~bits_now[b], b, value)
            m.d.comb += first_missing.eq(value)
            safety += [Assert(sh_live & (n.job == sh_job) & (n.round == sh_round), "a NACK is for a live round"),
                         Assert(n.count == ones, "a NACK's count is the popcount of the round's bitmap"),
                         Assert(n.missing == first_missing, "a NACK names the first missing index")]

        # --- malformed: exactly the packets the SPEC's rules reject ---
        # Header rules (any slot): the counter rises by one. A well-formed packet of slot s: by one iff
        # it is of the live round (the shadow's, with this cycle's forward and close) with another cnt or
        # phase than the round's opening packet (the shadow keeps them, from its own framing).
        sh_cnt, sh_phase = Signal(16), Signal(4)
        opens = fwd_s & ~sh_live
        with m.If(opens):
            m.d.sync += [sh_cnt.eq(d_cnt), sh_phase.eq(f.phase)]
        live_now = (sh_live | fwd_s) & ~close_s
        tag_now = Mux(fwd_s, Cat(f.job, f.round), Cat(sh_job, sh_round))
        cnt_now, phase_now = Mux(opens, d_cnt, sh_cnt), Mux(opens, f.phase, sh_phase)
        mismatch = (live_now & (tag_now == Cat(cur[0], cur[1]))
                    & ((cur_cnt != cnt_now) | (cur[3] != phase_now)))
        m_dec, m_bad, m_s, m_mis = Signal(), Signal(), Signal(), Signal()
        m_before = Signal(p.counter_bits)
        m.d.sync += [m_dec.eq(taken & last), m_bad.eq(~well_formed), m_s.eq((cur[1][:lr] == s) if lr else 1),
                     m_mis.eq(mismatch), m_before.eq(dut.malformed)]
        plus_one = Mux(m_before == cmax, cmax, m_before + 1)
        with m.If(~m_dec):
            judged += Assert(dut.malformed == m_before, "malformed: unchanged without a decision")
        with m.Elif(m_bad):
            judged += Assert(dut.malformed == plus_one,
                             "malformed: +1 for a packet the header rules reject (length, port, ver, reserved, "
                             "phase, cnt, idx)")
        with m.Elif(m_s):
            judged += Assert(dut.malformed == Mux(m_mis, plus_one, m_before),
                             "malformed: a well-formed packet of slot s counts iff its cnt or phase differ from "
                             "its live round's")

        # --- conservation (until a counter may have saturated) ---
        accepted, fwds, closes, nacks = (Signal(p.counter_bits, name=x)
                                         for x in ("accepted", "fwds", "closes", "nacks"))
        for reg, inc in ((accepted, dut.i.valid & dut.i.ready & beat.last), (fwds, new_fwd), (closes, new_close),
                         (nacks, new_nack)):
            with m.If(inc & (reg != cmax)):
                m.d.sync += reg.eq(reg + 1)
        safe = (accepted < cmax - 1) & (fwds < cmax - 1) & (closes < cmax - 1) & (nacks < cmax - 1)
        with m.If(safe):
            safety += [
                Assert(sum(getattr(dut, k) for k in PACKET_COUNTERS) == accepted,
                       "conservation: every accepted packet is counted by exactly one reason"),
                Assert(dut.forwarded == fwds + new_fwd, "conservation: forwarded == fwd events"),
                Assert(dut.full + dut.bounded + dut.abort == closes + new_close,
                       "conservation: full + bounded + abort == closes"),
                Assert(dut.nacks == nacks + new_nack, "conservation: nacks == NACK events"),
            ]
        assert set(PACKET_COUNTERS) <= set(COUNTERS)

        # --- counter increments and reset ---
        if not self.liveness and not self.malformed:
            lost = Signal.like(c.cnt)
            m.d.comb += lost.eq(c.cnt - c.count)
            q = dut.cfg.payload
            cfg_ok = (q.phase < p.phases) & (q.tau <= 255) & (q.deadline >= 1) & (q.deadline < (1 << p.deadline_bits))
            counters_follow(m, {name: getattr(dut, name) for name in COUNTERS},
                            {"forwarded": new_fwd, "full": new_close & (c.kind == FULL),
                             "bounded": new_close & (c.kind == BOUNDED), "abort": new_close & (c.kind == ABORT),
                             "nacks": new_nack, "loss_accepted": Mux(new_close & (c.kind == BOUNDED), lost, 0),
                             "loss_aborted": Mux(new_close & (c.kind == ABORT), lost, 0)}, delayed=True)
            counters_follow(m, {name: getattr(dut, name) for name in COUNTERS},
                            {"cfg_writes": dut.cfg.valid & cfg_ok, "cfg_rejected": dut.cfg.valid & ~cfg_ok})
            m.d.comb += Assert(~after_reset(m) | ~(dut.fwd.valid | dut.close.valid | dut.nack.valid),
                               "a reset empties the three output registers")
            # the phase table from the writes the spec judges valid (reset: tau 0, the deadline parameter)
            for ph in range(p.phases):
                tau = Signal(8, name=f"shadow_tau{ph}")
                dl = Signal(p.deadline_bits, name=f"shadow_dl{ph}", init=p.deadline)
                with m.If(dut.cfg.valid & cfg_ok & (q.phase == ph)):
                    m.d.sync += [tau.eq(q.tau), dl.eq(q.deadline)]
                m.d.comb += Assert((dut.tau[ph] == tau) & (dut.dl[ph] == dl),
                                   f"phase {ph}: (tau, deadline) follow the valid writes (reset: 0, deadline)")

        # --- liveness: each deadline period answered, and (close bound) every open round closed in time ---
        if self.liveness:
            # each deadline period answered: an open round of slot s is closed or NACKed within `period`
            # cycles of its opening or of its last NACK (its deadline D plus the scanner's lap and search)
            period = self.period or per_period(p)
            waited = Signal(range(period + 2))
            with m.If((fwd_s & ~sh_live) | nack_s):
                m.d.sync += waited.eq(1)
            with m.Elif(sh_live & (waited <= period)):
                m.d.sync += waited.eq(waited + 1)
            with m.If(sh_live):
                m.d.comb += Assert(waited <= period, "an open round is closed or NACKed within D plus the "
                                                     "scanner's lap and search of each deadline period")
                # strengthening: the round's age in the design is the spec's wait (its last NACK or its opening)
                age = (dut.now - Array(dut.t_first)[s])[:p.time_bits]
                m.d.comb += Assert(age == Mux(nack_s, 1, waited + 1), "slot s: its age is the spec's wait")
            if self.period is None:
                # the close bound: (retry_max + 1) periods; strengthening: each NACK so far ended a period
                with m.If(sh_live):
                    m.d.comb += [Assert(sh_age <= live_bound(p), "an open round closes within (retry_max+1)(D + scan "
                                                                 "time)"),
                                 Assert(sh_age <= Array(dut.retries)[s] * (period + 1) + waited,
                                        "slot s: its age is at most a period per NACK plus the wait")]

        self._invariants(m, dut, p, locals())
        if self.liveness:           # no table writes: the phase table stays as the reset left it
            m.d.comb += [Assert((dut.tau[ph] == 0) & (dut.dl[ph] == p.deadline), f"phase {ph}: as after reset")
                         for ph in range(p.phases)]

        if self.cover and self.malformed:
            m.d.comb += [Cover(m_dec & m_bad, "a packet the header rules reject"),
                         Cover(m_dec & m_s & m_mis & ~m_bad, "a well-formed packet of slot s with another cnt/phase")]
        elif self.cover:
            m.d.comb += [
                Cover(close_s & (c.kind == BOUNDED) & (c.count < c.cnt), "slot s closes BOUNDED with loss"),
                Cover(close_s & (c.kind == ABORT), "slot s aborts"),
                Cover(nack_s & (n.missing >= W), "a NACK names an index in the second word"),
                Cover(close_s & (c.kind == FULL) & (c.cnt == E), "slot s closes FULL with E = e_max"),
                Cover(dut.dup != 0, "a duplicate is dropped"),
                Cover(dut.late != 0, "a late packet is dropped"),
                Cover(ResetSignal() & sh_live, "a reset while slot s has a live round"),
            ]
        return m


    def _invariants(self, m, dut, p, env):
        """What k-induction needs besides the properties (``env``: ``elaborate``'s locals): the parser's
        framing and held header against the spec's, the packet numbering, every slot's bitmap against its
        state (and the clear engine's and the scanner's progress through it), and slot ``s`` against the
        spec's shadow with this cycle's new events."""
        R, E, W, WORDS = p.rounds, p.e_max, p.word_bits, p.words
        lr = (R - 1).bit_length()
        parser = dut.parser
        m.d.comb += [Assert(parser.inside == env["sp_inside"], "framing: inside a packet as the spec's"),
                     Assert(dut.handle == env["handles"], "the next handle is the spec's packet count")]
        with m.If(env["sp_inside"]):
            m.d.comb += Assert((parser.held == env["held"][:len(parser.held)]) & (parser.done == env["sp_len"])
                               & (env["sp_len"] >= p.data_bytes) & (env["sp"].job < 2) & (env["sp"].round < 2 * R),
                               "framing: the held header (a job and round the stimulus draws) and the bytes so far "
                               "as the spec's")

        def words_of(n):
            return (n + W - 1) >> (W - 1).bit_length()

        def full_word(k, w):
            """Word ``w`` of slot ``k`` has no missing index below its count."""
            return Cat(*(dut.bitmap[k][w][b] | (w * W + b >= dut.cnt[k]) for b in range(W))).all()
        for k in range(R):
            bits = Cat(*dut.bitmap[k])
            m.d.comb += [
                Assert((dut.cnt[k] >= 1) & (dut.cnt[k] <= E), f"slot {k}: 1 <= E <= e_max"),
                Assert((bits >> dut.cnt[k]) == 0, f"slot {k}: no bit at or above E, ever"),
                Assert(~(dut.dirty[k] & dut.live[k]) & ~(dut.closed[k] & dut.live[k]),
                       f"slot {k}: dirty or closed only when not live"),
                Assert(dut.live[k] | dut.dirty[k] | (bits == 0), f"slot {k}: a clean free slot has no bit"),
                Assert(~(dut.live[k] | dut.closed[k]) | ((dut.round[k][:lr] == k if lr else 1) & (dut.job[k] < 2)
                                                           & (dut.round[k] < 2 * R)),
                       f"slot {k}: its round maps to it (a job and round the stimulus draws)"),
            ]
            with m.If(dut.clearing & (dut.c_slot == k)):
                m.d.comb += Assert(dut.dirty[k] & (dut.c_word >= 1) & (dut.c_word < words_of(dut.cnt[k]))
                                   & Cat(*((dut.bitmap[k][w] == 0) | (w >= dut.c_word) for w in range(WORDS))).all(),
                                   f"slot {k} cleared: dirty, the words before the engine's are zero")
            with m.If(dut.searching & (dut.s_slot == k)):
                m.d.comb += Assert(dut.live[k] & (dut.count[k] < dut.need[k]) & (dut.retries[k] < p.retry_max)
                                   & (dut.s_word < words_of(dut.cnt[k]))
                                   & Cat(*(full_word(k, w) | (w >= dut.s_word) for w in range(WORDS))).all(),
                                   f"slot {k} searched: live, below its bound, no missing index before the word")
        # slot s against the shadow, with this cycle's new events
        s, fwd_s, close_s = env["s"], env["fwd_s"], env["close_s"]
        sh_live, sh_closed, sh_bits = env["sh_live"], env["sh_closed"], env["sh_bits"]
        closed_now = Mux(close_s, 1, Mux(fwd_s, 0, sh_closed))
        live_now, tag_now = env["live_now"], env["tag_now"]
        m.d.comb += [Assert(~(sh_live & sh_closed) & (sh_live | (sh_bits == 0)), "shadow: live or closed; no bits when "
                                                                                  "not live"),
                     Assert((Array(dut.live)[s] == live_now) & (Array(dut.closed)[s] == closed_now),
                            "slot s: live and closed as the shadow's")]
        with m.If(live_now | closed_now):
            m.d.comb += Assert(Cat(Array(dut.job)[s], Array(dut.round)[s]) == tag_now, "slot s: its round's tag")
        with m.If(live_now):
            m.d.comb += Assert((Array(Cat(*dut.bitmap[k]) for k in range(R))[s] == env["bits_now"])
                               & (Array(dut.cnt)[s] == env["cnt_now"]) & (Array(dut.phase)[s] == env["phase_now"]),
                               "slot s: bitmap, E and phase as the shadow's")


def per_period(p):
    """D + the scanner's lap and search: every deadline period of an open round is answered by then."""
    return p.deadline + p.rounds * (p.words + 2)


def live_bound(p):
    """(retry_max + 1) x (D + the scanner's lap and search) + 1: an open round closes by then."""
    return (p.retry_max + 1) * per_period(p) + 1


def test_tracker_safety(depth=2, name="bounded_loss_tracker_safety"):
    """Close kinds, count == popcount, forwarded once, nothing after close, conservation (k-induction)."""
    prove(TrackerSpec(), name, depth=depth)


def test_tracker_malformed():
    """``malformed`` counts exactly the packets the SPEC's rules reject, with the safety properties (k-induction)."""
    prove(TrackerSpec(malformed=True), "bounded_loss_tracker_malformed", depth=2)


def test_tracker_liveness():
    """Every deadline period of an open round of slot s is answered within ``per_period``, and the round
    closes within ``live_bound`` (k-induction, a period deep)."""
    prove(TrackerSpec(liveness=True), "bounded_loss_tracker_liveness", depth=per_period(PARAMS) + 2)


#: Two slots, E <= 2 in 1-bit words (the search still walks two words), D = 2, one retry: small enough that
#: the response bound is tight at 7.
RESPONSE = PARAMS.replace(e_max=2, word_bits=1, deadline=2, time_bits=6, handle_bits=2)
#: The tight per-period bound at ``RESPONSE``: 7 cycles pass, 6 fail (a counterexample at step 12).
RESPONSE_PERIOD = 7


def test_tracker_response():
    """Each deadline period of an open round is answered (closed or NACKed) within ``RESPONSE_PERIOD``
    cycles of its opening or its last NACK (k-induction); tight: a scanner one cycle late fails it."""
    prove(TrackerSpec(RESPONSE, liveness=True, period=RESPONSE_PERIOD), "bounded_loss_tracker_response",
          depth=RESPONSE_PERIOD + 2)


def test_tracker_cover():
    """The properties are not vacuous: lossy BOUNDED closes, ABORT, a NACK in word 1, FULL, dup, late."""
    prove(TrackerSpec(cover=True), "bounded_loss_tracker_cover", depth=24, mode="cover")

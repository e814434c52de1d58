"""DBLP bounded-loss round tracker (SPEC section 4): innet's receiver-side (NIC) reading of DBLP."""
from amaranth.hdl import Array, Assert, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.counters import count_event
from hdl.headers import DBLP, DBLP_HEADER_BYTES, DBLP_OFFSET, wire_view
from hdl.invariants import asserted
from hdl.packet import packet_signature
from hdl.parse import Parser
from models.bounded_loss_tracker import COUNTERS, KINDS, BoundedLossTrackerParams
from models.params import check
from models.wire import DBLP_VERSION

__all__ = ["BoundedLossTracker", "BoundedLossTrackerParams", "COUNTERS", "KINDS", "FULL", "BOUNDED", "ABORT",
           "cfg_layout", "fwd_layout", "close_layout", "nack_layout"]

#: ``close.kind`` codes, in the order of ``KINDS``.
FULL, BOUNDED, ABORT = range(len(KINDS))


def cfg_layout(deadline_bits=16):
    """A phase-table write; fields are wider than the table so that bad rows can be sent (and rejected)."""
    return data.StructLayout({"phase": 4, "tau": 16, "deadline": 32 if deadline_bits < 32 else 33})


def fwd_layout(handle_bits=16):
    """A forwarded packet: its handle in the packet store, shim fields, payload length."""
    return data.StructLayout({"handle": handle_bits, "job": 8, "round": 16, "idx": 16, "phase": 4, "length": 16})


def close_layout():
    return data.StructLayout({"job": 8, "round": 16, "kind": 2, "cnt": 16, "count": 16, "need": 16, "retries": 8})


def nack_layout():
    return data.StructLayout({"job": 8, "round": 16, "count": 16, "need": 16, "missing": 16, "retries": 8})


def _first_set(m, vec, name):
    """Index of the lowest set bit of ``vec`` (0 when none)."""
    out = Signal(range(max(len(vec), 2)), name=name)
    value = Const(0, out.shape())
    for k in reversed(range(len(vec))):
        value = Mux(vec[k], k, value)
    m.d.comb += out.eq(value)
    return out


class BoundedLossTracker(wiring.Component):
    """Tracks rounds of DBLP chunk packets; closes each FULL, BOUNDED (loss within tau) or ABORT.

    Follows the contract of ``models.bounded_loss_tracker`` cycle by cycle (its docstring lists the
    rules; all are *chosen*). Interfaces: ``i`` (packet beats), ``cfg`` (phase-table writes, always
    ready), ``fwd``/``close``/``nack`` (output registers, latency 1), one ``Out`` counter per name in
    ``COUNTERS``. The packet path decides a packet in the cycle its last beat is accepted, on the
    header held from its first beat; a last beat waits (``i.ready`` low) on a busy ``fwd``/``close``
    register, on its slot being the deadline scanner's target or dirty, or on a scanner close.

    Storage (*chosen*):

    - slot fields ``live, closed, dirty, job, round, cnt, need, count, t_first, retries, phase,
      last`` are per-slot registers: the packet path and the scanner may write two different slots
      in one cycle, each with one read-modify-write of its slot;
    - the received bitmaps are a register file banked by slot: bank ``s`` holds slot ``s``'s
      ``words`` words of ``word_bits`` and has ONE read-modify-write port (one word address, read
      asynchronously, written at the edge). The packet path (read the packet's word, set its bit),
      the clear engine (write a zero word) and the scanner's search (read a word) share the banks and
      never need the same bank in one cycle: the packet path writes only a live slot other than the
      scanner's target, the clear engine only a dirty slot, the search only its (live) target. So
      each packet makes one read-modify-write of one word, and no bank needs a second port. (The
      asynchronous read is what lets a one-beat packet be decided in the cycle it arrives, as the
      model's contract asks: distributed RAM or flip-flops, not block RAM.) The bitmap keeps its
      contents through reset (the clear engine wipes every word after it).

    Attributes for the formal spec: ``bitmap[s][w]``, the slot registers (``live``, ``count``, ...),
    ``decide`` (a packet is decided this cycle) and ``bank_users[s]`` (accesses of bank ``s`` this
    cycle).
    """

    def __init__(self, params=None):
        p = self.params = check(params, BoundedLossTrackerParams)
        self.rounds, self.e_max, self.word_bits, self.words = p.rounds, p.e_max, p.word_bits, p.words
        self.phases, self.retry_max, self.deadline = p.phases, p.retry_max, p.deadline
        self.deadline_bits, self.time_bits, self.port = p.deadline_bits, p.time_bits, p.port
        self.data_bytes, self.handle_bits, self.counter_bits = p.data_bytes, p.handle_bits, p.counter_bits
        signature = {
            "i": In(packet_signature(p.data_bytes)),
            "cfg": In(stream.Signature(cfg_layout(p.deadline_bits))),
            "fwd": Out(stream.Signature(fwd_layout(p.handle_bits))),
            "close": Out(stream.Signature(close_layout())),
            "nack": Out(stream.Signature(nack_layout())),
        }
        signature.update({name: Out(p.counter_bits) for name in COUNTERS})
        super().__init__(signature)
        R, W, E = p.rounds, p.word_bits, p.e_max

        def regs(name, shape, **kw):
            return [Signal(shape, name=f"{name}{k}", **kw) for k in range(R)]
        self.live, self.closed, self.last = regs("live", 1), regs("closed", 1), regs("last", 1)
        self.dirty = regs("dirty", 1, init=1)
        self.job, self.round = regs("job", 8), regs("round", 16)
        self.cnt = regs("cnt", range(E + 1), init=E)
        self.need, self.count = regs("need", range(E + 1)), regs("count", range(E + 1))
        self.t_first, self.retries = regs("t_first", p.time_bits), regs("retries", range(p.retry_max + 1))
        self.phase = regs("phase", range(p.phases))
        self.bitmap = [[Signal(W, name=f"bitmap{k}_{w}", reset_less=True) for w in range(self.words)]
                       for k in range(R)]
        self.tau = [Signal(8, name=f"tau{ph}") for ph in range(p.phases)]
        self.dl = [Signal(p.deadline_bits, name=f"deadline{ph}", init=p.deadline) for ph in range(p.phases)]
        self.now = Signal(p.time_bits)
        self.decide = Signal()
        self.bank_users = [Signal(range(4), name=f"bank_users{k}") for k in range(R)]
        # the parser (its framing and held header), the packet numbering, the deadline scanner (its next
        # slot; searching slot s_slot from word s_word for a missing index) and the clear engine (wiping
        # slot c_slot from word c_word; cptr: where it looks for a dirty slot first)
        self.accept = Signal(name="accept")
        self.parser = Parser(self.i.payload, self.accept, header_bytes=DBLP_HEADER_BYTES, hold=True)
        self.handle = Signal(p.handle_bits, name="handle")
        self.scan, self.searching = Signal(range(R), name="scan"), Signal(name="searching")
        self.s_slot, self.s_word = Signal(range(R), name="s_slot"), Signal(range(self.words), name="s_word")
        self.clearing, self.c_slot = Signal(name="clearing"), Signal(range(R), name="c_slot")
        self.c_word, self.cptr = Signal(range(self.words), name="c_word"), Signal(range(R), name="cptr")

    def elaborate(self, platform):
        m = Module()
        R, W, WORDS, E = self.rounds, self.word_bits, self.words, self.e_max
        lw = (W - 1).bit_length()                      # log2 W
        lr = (R - 1).bit_length()                      # log2 R
        tmask = (1 << self.time_bits) - 1
        live, closed, dirty, last = Array(self.live), Array(self.closed), Array(self.dirty), Array(self.last)
        job, rnd, cnt, need = Array(self.job), Array(self.round), Array(self.cnt), Array(self.need)
        count, t_first, retries, phase = Array(self.count), Array(self.t_first), Array(self.retries), Array(self.phase)
        tau, dl = Array(self.tau), Array(self.dl)

        fwd_free = ~self.fwd.valid | self.fwd.ready
        close_free = ~self.close.valid | self.close.ready
        nack_free = ~self.nack.valid | self.nack.ready
        m.d.sync += self.now.eq(self.now + 1)

        def slot_of(round_):
            return round_[:lr] if lr else Const(0, 1)

        # --- deadline scanner: target and action of this cycle ---
        scan = self.scan
        searching, s_slot, s_word = self.searching, self.s_slot, self.s_word
        age = Signal(self.time_bits)
        m.d.comb += age.eq((self.now - t_first[scan]) & tmask)
        expired = live[scan] & (age >= dl[phase[scan]])
        target = Signal(range(R))
        has_target = Signal()
        act_close, act_kind, act_start = Signal(), Signal(2), Signal()
        m.d.comb += [target.eq(Mux(searching, s_slot, scan)), has_target.eq(searching | expired)]
        with m.If(~searching & expired):
            with m.If(count[scan] >= need[scan]):
                m.d.comb += [act_close.eq(1), act_kind.eq(BOUNDED)]
            with m.Elif(retries[scan] >= self.retry_max):
                m.d.comb += [act_close.eq(1), act_kind.eq(ABORT)]
            with m.Else():
                m.d.comb += act_start.eq(1)
        scanner_close = Signal()
        m.d.comb += scanner_close.eq(act_close & close_free)

        # --- clear engine: the slot and word it wipes this cycle ---
        clearing, c_slot, c_word, cptr = self.clearing, self.c_slot, self.c_word, self.cptr
        dirty_vec = Cat(*self.dirty)
        at_or_after = Cat(*(k >= cptr for k in range(R)))
        upper = dirty_vec & at_or_after
        pick = Mux(upper.any(), _first_set(m, upper, "clear_upper"), _first_set(m, dirty_vec, "clear_any"))
        wipe, w_slot, w_word = Signal(), Signal(range(R)), Signal(range(WORDS))
        m.d.comb += [wipe.eq(clearing | dirty_vec.any()),
                     w_slot.eq(Mux(clearing, c_slot, pick)), w_word.eq(Mux(clearing, c_word, 0))]
        w_words = (cnt[w_slot] + (W - 1)) >> lw        # words of the slot being wiped
        with m.If(wipe):
            with m.If(w_word + 1 >= w_words):
                m.d.sync += [dirty[w_slot].eq(0), clearing.eq(0), cptr.eq(w_slot + 1)]
            with m.Else():
                m.d.sync += [clearing.eq(1), c_slot.eq(w_slot), c_word.eq(w_word + 1)]

        # --- packet path: parse the header held from the first beat ---
        beat = self.i.payload
        accept = self.accept
        m.submodules.parser = parser = self.parser
        h = wire_view(DBLP, parser.header, DBLP_OFFSET)
        p_slot = Signal(range(R))
        m.d.comb += p_slot.eq(slot_of(h.round))
        parsed = Signal()
        m.d.comb += parsed.eq(
            (parser.length >= DBLP_HEADER_BYTES) & parser.is_ipv4 & parser.is_ihl5 & parser.is_udp
            & parser.dport(self.port) & (h.ver == DBLP_VERSION) & (h.fresv == 0) & (h.resv == 0)
            & (h.resv2 == 0) & (h.phase < self.phases) & (h.cnt != 0) & (h.cnt <= E) & (h.idx < h.cnt))
        p_word = Signal(range(WORDS))
        p_bit = Signal(W)
        m.d.comb += [p_word.eq(h.idx >> lw), p_bit.eq(Const(1, W) << h.idx[:lw] if lw else 1)]

        # --- bitmap banks: one read-modify-write port each ---
        bank_addr = [Signal(range(WORDS), name=f"bank_addr{k}") for k in range(R)]
        bank_rdata = [Signal(W, name=f"bank_rdata{k}") for k in range(R)]
        for k in range(R):
            c_hit, s_hit = wipe & (w_slot == k), searching & (s_slot == k)
            m.d.comb += [bank_addr[k].eq(Mux(c_hit, w_word, Mux(s_hit, s_word, p_word))),
                         bank_rdata[k].eq(Array(self.bitmap[k])[bank_addr[k]])]
        p_rdata = Array(bank_rdata)[p_slot]

        # --- classification of the packet against its slot ---
        tag_eq = (job[p_slot] == h.job) & (rnd[p_slot] == h.round)
        outcome = {name: Signal(name=f"is_{name}") for name in ("malformed", "slot_busy", "dup", "forwarded",
                                                                  "late", "wait", "open")}
        with m.If(~parsed):
            m.d.comb += outcome["malformed"].eq(1)
        with m.Elif(live[p_slot]):
            with m.If(~tag_eq):
                m.d.comb += outcome["slot_busy"].eq(1)
            with m.Elif((h.cnt != cnt[p_slot]) | (h.phase != phase[p_slot])):
                m.d.comb += outcome["malformed"].eq(1)
            with m.Elif((p_rdata & p_bit).any()):
                m.d.comb += outcome["dup"].eq(1)
            with m.Else():
                m.d.comb += outcome["forwarded"].eq(1)
        with m.Elif(closed[p_slot] & tag_eq):
            m.d.comb += outcome["late"].eq(1)
        with m.Elif(dirty[p_slot]):
            m.d.comb += outcome["wait"].eq(1)
        with m.Else():
            m.d.comb += outcome["open"].eq(1)
        blocked = parsed & (outcome["wait"] | (has_target & (p_slot == target)))
        m.d.comb += [self.i.ready.eq(~beat.last | (fwd_free & close_free & ~scanner_close & ~blocked)),
                     accept.eq(self.i.valid & self.i.ready),
                     self.decide.eq(accept & beat.last)]

        # --- the packet's slot update (one read-modify-write of slot p_slot) ---
        handle = self.handle
        inc = {name: Signal(16, name=f"inc_{name}") for name in COUNTERS}
        opening, adding = self.decide & outcome["open"], self.decide & outcome["forwarded"]
        storing = opening | adding
        n_count = Signal(range(E + 1))
        n_need = Signal(range(E + 1))
        n_last = Signal()
        product = Signal(24)
        m.d.comb += [product.eq(tau[h.phase] * h.cnt),
                     n_need.eq(Mux(opening, h.cnt - (product >> 8), need[p_slot])),
                     n_count.eq(Mux(opening, 1, count[p_slot] + 1)),
                     n_last.eq(h.last | (~opening & last[p_slot]))]
        p_full = n_count == h.cnt
        p_bounded = ~p_full & n_last & (n_count >= n_need)
        p_close = storing & (p_full | p_bounded)
        with m.If(self.decide):
            m.d.sync += handle.eq(handle + 1)
            for name in ("malformed", "slot_busy", "dup", "late"):
                m.d.comb += inc[name].eq(outcome[name])
            m.d.comb += [inc["forwarded"].eq(storing), inc["opened"].eq(opening)]
        with m.If(storing):
            m.d.sync += [live[p_slot].eq(~p_close), closed[p_slot].eq(p_close), dirty[p_slot].eq(p_close),
                         count[p_slot].eq(n_count), last[p_slot].eq(n_last)]
            with m.If(opening):
                m.d.sync += [job[p_slot].eq(h.job), rnd[p_slot].eq(h.round), cnt[p_slot].eq(h.cnt),
                             need[p_slot].eq(n_need), t_first[p_slot].eq(self.now), retries[p_slot].eq(0),
                             phase[p_slot].eq(h.phase)]
            with m.If(p_full):
                m.d.comb += inc["full"].eq(1)
            with m.Elif(p_bounded):
                m.d.comb += [inc["bounded"].eq(1), inc["loss_accepted"].eq(h.cnt - n_count)]

        # --- bitmap writes: the packet's bit, or the clear engine's zero word ---
        for k in range(R):
            for w in range(WORDS):
                with m.If(wipe & (w_slot == k) & (w_word == w)):
                    m.d.sync += self.bitmap[k][w].eq(0)
                with m.Elif(storing & (p_slot == k) & (p_word == w)):
                    m.d.sync += self.bitmap[k][w].eq(bank_rdata[k] | p_bit)
            m.d.comb += self.bank_users[k].eq((wipe & (w_slot == k)) + (searching & (s_slot == k))
                                              + (storing & (p_slot == k)))

        # --- scanner at the edge ---
        s_cnt = cnt[s_slot]
        word = Signal(W)
        s_rdata = Array(bank_rdata)[s_slot]
        m.d.comb += word.eq(s_rdata | Cat(*((s_word * W + b) >= s_cnt for b in range(W))))
        free = Signal(W)
        m.d.comb += free.eq(~word)
        first_free = _first_set(m, free, "first_free")
        send_nack = Signal()
        m.d.comb += send_nack.eq(searching & free.any() & nack_free)
        with m.If(act_close):
            with m.If(close_free):
                m.d.sync += [live[scan].eq(0), closed[scan].eq(1), dirty[scan].eq(1), scan.eq(scan + 1)]
                with m.If(act_kind == BOUNDED):
                    m.d.comb += [inc["bounded"].eq(1), inc["loss_accepted"].eq(cnt[scan] - count[scan])]
                with m.Else():
                    m.d.comb += [inc["abort"].eq(1), inc["loss_aborted"].eq(cnt[scan] - count[scan])]
        with m.Elif(act_start):
            m.d.sync += [searching.eq(1), s_slot.eq(scan), s_word.eq(0)]
        with m.Elif(searching):
            with m.If(~free.any()):
                m.d.sync += s_word.eq(s_word + 1)
            with m.Elif(nack_free):
                m.d.sync += [retries[s_slot].eq(retries[s_slot] + 1), t_first[s_slot].eq(self.now),
                             searching.eq(0), scan.eq(s_slot + 1)]
                m.d.comb += inc["nacks"].eq(1)
        with m.Else():
            m.d.sync += scan.eq(scan + 1)

        # --- phase table ---
        c = self.cfg.payload
        cfg_ok = (c.phase < self.phases) & (c.tau <= 255) & (c.deadline >= 1) & (c.deadline < (1 << self.deadline_bits))
        m.d.comb += self.cfg.ready.eq(1)
        with m.If(self.cfg.valid):
            m.d.comb += [inc["cfg_writes"].eq(cfg_ok), inc["cfg_rejected"].eq(~cfg_ok)]
            with m.If(cfg_ok):
                m.d.sync += [tau[c.phase].eq(c.tau), dl[c.phase].eq(c.deadline)]

        # --- output registers ---
        with m.If(fwd_free):
            m.d.sync += self.fwd.valid.eq(storing)
            f = self.fwd.payload
            m.d.sync += [f.handle.eq(handle), f.job.eq(h.job), f.round.eq(h.round), f.idx.eq(h.idx),
                         f.phase.eq(h.phase), f.length.eq(parser.length - DBLP_HEADER_BYTES)]
        with m.If(close_free):
            e = self.close.payload
            m.d.sync += self.close.valid.eq(p_close | scanner_close)
            with m.If(scanner_close):
                m.d.sync += [e.job.eq(job[scan]), e.round.eq(rnd[scan]), e.kind.eq(act_kind), e.cnt.eq(cnt[scan]),
                             e.count.eq(count[scan]), e.need.eq(need[scan]), e.retries.eq(retries[scan])]
            with m.Else():
                m.d.sync += [e.job.eq(h.job), e.round.eq(h.round), e.kind.eq(Mux(p_full, FULL, BOUNDED)),
                             e.cnt.eq(h.cnt), e.count.eq(n_count), e.need.eq(n_need),
                             e.retries.eq(Mux(opening, 0, retries[p_slot]))]
        with m.If(nack_free):
            n = self.nack.payload
            m.d.sync += [self.nack.valid.eq(send_nack), n.job.eq(job[s_slot]), n.round.eq(rnd[s_slot]),
                         n.count.eq(count[s_slot]), n.need.eq(need[s_slot]),
                         n.missing.eq((s_word << lw) | first_free), n.retries.eq(retries[s_slot] + 1)]

        # --- counters (saturating) ---
        for name in COUNTERS:
            count_event(m, getattr(self, name), amount=inc[name], overflow="saturate")

        if asserted(platform):
            self._invariants(m)
        return m

    def _invariants(self, m):
        """Slot invariants the k-induction proofs rely on (asserted)."""
        for k in range(self.rounds):
            bits = Cat(*self.bitmap[k])
            with m.If(self.live[k]):
                m.d.comb += [
                    Assert(self.count[k] == sum(bits[b] for b in range(len(bits))),
                           f"slot {k}: count equals the popcount of its bitmap"),
                    Assert((self.count[k] >= 1) & (self.count[k] < self.cnt[k]), f"slot {k}: 1 <= count < E"),
                    Assert((self.need[k] >= 1) & (self.need[k] <= self.cnt[k]), f"slot {k}: 1 <= need <= E"),
                    Assert(~self.dirty[k] & ~self.closed[k], f"slot {k}: a live slot is clean and open"),
                    Assert((bits >> self.cnt[k]) == 0, f"slot {k}: no bit at or above E"),
                ]
            m.d.comb += Assert(self.bank_users[k] <= 1, f"bank {k}: one access per cycle")

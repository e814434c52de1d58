"""SDR-RDMA chunk-bitmap tracker (SPEC section 6): per-message packet and chunk bitmaps with generations."""
from amaranth.hdl import Array, Const, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from hdl.counters import count_event
from hdl.headers import wire_bytes
from hdl.packet import packet_signature
from hdl.parse import Parser
from models import wire
from models.chunk_bitmap import COUNTERS, LATENCY, OP_COMPLETE, OP_POST, OUTCOMES, ChunkBitmapParams
from models.params import check

if LATENCY != 2:    # the RTL is two stages (read, test-and-set) plus the result register
    raise ImportError(f"models.chunk_bitmap.LATENCY = {LATENCY}: hdl/chunk_bitmap.py implements 2")

__all__ = ["ChunkBitmap", "ChunkBitmapParams", "COUNTERS", "OUTCOMES", "OP_POST", "OP_COMPLETE", "LATENCY",
           "cmd_layout", "result_layout", "reciprocal_shift", "reciprocal"]


def cmd_layout(p):
    """Command: ``op`` (``OP_POST``, ``OP_COMPLETE``), ``msg``, ``gen``, ``n_pkts``, ``chunk``. ``gen``,
    ``n_pkts`` and ``chunk`` are one bit wider than their largest legal value needs, so that every
    rejection rule of the model can be exercised."""
    return data.StructLayout({
        "op": 2, "msg": p.msg_bits, "gen": max(1, exact_log2(p.generations)) + 1,
        "n_pkts": p.offset_bits + 1, "chunk": 7})


def result_layout(p):
    """One packet's result: ``outcome`` (index into ``OUTCOMES``), the fields parsed (meaningless when
    malformed), ``chunk_done`` (the packet completed chunk ``chunk``) and ``msg_done``."""
    return data.StructLayout({
        "outcome": range(len(OUTCOMES)), "msg": p.msg_bits, "offset": p.offset_bits,
        "gen": range(p.generations), "channel": range(p.channels),
        "chunk_done": 1, "chunk": p.offset_bits, "msg_done": 1})


def reciprocal_shift(p):
    """k of the reciprocals: floor(n * ceil(2**k / d) / 2**k) == n // d for every n < 2**offset_bits and
    d <= word_bits (the error ceil(2**k/d)*d - 2**k < d <= word_bits, times n, stays below 2**k)."""
    return p.offset_bits + exact_log2(p.word_bits) + 1


def reciprocal(p, d):
    return -(-(1 << reciprocal_shift(p)) // d)


class ChunkBitmap(wiring.Component):
    """Receiver-NIC chunk-bitmap tracker of SDR-RDMA; the golden model ``models.chunk_bitmap`` (its
    docstring is the contract: rules, layout, timing) is followed cycle by cycle.

    Ports: ``i`` the packet byte stream (``data_bytes`` >= ``SDR_MIN_LENGTH`` per beat, so every header
    of a packet is in its first beat), ``cmd`` the command stream (``cmd_layout``), ``o`` the results
    (``result_layout``), one per packet, ``LATENCY`` = 2 cycles after its first beat was accepted;
    ``o.ready`` is ignored (the model has no output back-pressure: the consumer takes a result every
    cycle). ``rd_addr`` -> ``rd_pkt``/``rd_chunk`` (next cycle): a host read port on word
    ``slot * slot_words + word`` of the two memories (software's view, used for the EC check and by
    the tests). One ``Out`` per name in ``COUNTERS`` (saturating at ``counter_bits``).

    Chosen in the RTL (the model is silent on them):

    - A packet is decided on its first beat (headers in one beat). It is truncated when that beat is
      also its last and holds fewer than ``SDR_MIN_LENGTH`` bytes (a longer packet has a full first
      beat of ``data_bytes`` >= ``SDR_MIN_LENGTH`` bytes). Later beats are consumed without effect;
      ``i.ready`` is low in a cycle whose command is taken and while the clear engine runs, for every
      beat. Framing by count: a packet starts with the beat after a ``last`` beat.
    - Division by the runtime chunk size without a divider: ceil(2**k/chunk) and ceil(2**k/span)
      (span = chunks per word * chunk, ``reciprocal``) come from constant tables indexed by the chunk
      size (one copy, shared: a packet indexes them with its slot's chunk, a command with its own);
      per packet chunk = (offset * rc) >> k and word = (offset * rs) >> k, the bit in the word is
      offset - word * span (the layout of the model: ``position``). ``post`` finds the message's
      chunks and words the same way from n_pkts - 1, on the same two multipliers (a cycle with a
      valid command takes no packet). The slot keeps only the chunk size, not its reciprocals.
    - Pipeline: stage 0 (acceptance cycle) parses, reads the slot table (registers), multiplies and
      issues the reads of one packet word and one chunk word (synchronous SRAM read ports);
      stage 1 tests and sets the packet bit, sets the chunk bit when the chunk's bits are all set,
      counts the chunk in the slot (its ``done`` count is read in stage 1, after the previous
      packet's update) and registers the result. The read ports are transparent to the single write
      port of their memory, so a packet sees the word its predecessor writes in the same cycle
      (back-to-back packets of one slot need no other forwarding). A command taken in a packet's
      stage 1 is applied after it (the model's order).
    - Clear engine: ``post`` zeroes word i of the slot's packet and chunk memories in the i-th cycle
      after it through the same write ports (no packet is in stage 1 then).
    - The slot table is registers (reset clears it); the memories have no reset (SRAM). Reset stops
      the clear engine at once (no word is cleared in a reset cycle); a packet accepted before the
      reset cycle still writes its word in it (the model applies a packet when it is accepted).
    """

    def __init__(self, params=None):
        p = self.params = check(params, ChunkBitmapParams)
        self.data_bytes = p.data_bytes
        self.cmd_layout, self.result_layout = cmd_layout(p), result_layout(p)
        self.depth = p.msg_slots * p.slot_words
        super().__init__({
            "i": In(packet_signature(p.data_bytes)),
            "cmd": In(stream.Signature(self.cmd_layout)),
            "o": Out(stream.Signature(self.result_layout)),
            "rd_addr": In(range(self.depth)),
            "rd_pkt": Out(p.word_bits),
            "rd_chunk": Out(p.word_bits),
            **{name: Out(p.counter_bits) for name in COUNTERS},
        })
        N, S = p.offset_bits, p.msg_slots
        self.k = reciprocal_shift(p)
        # slot table (registers; exposed for the formal spec's invariants)
        self.s_valid = [Signal(name=f"valid{s}") for s in range(S)]
        self.s_tag = [Signal(p.msg_bits, name=f"tag{s}") for s in range(S)]
        self.s_gen = [Signal(range(p.generations), name=f"gen{s}") for s in range(S)]
        self.s_n = [Signal(N + 1, name=f"n_pkts{s}") for s in range(S)]
        self.s_chunk = [Signal(7, name=f"chunk{s}") for s in range(S)]
        self.s_chunks = [Signal(N + 1, name=f"n_chunks{s}") for s in range(S)]
        self.s_done = [Signal(N + 1, name=f"done{s}") for s in range(S)]
        self.busy = Signal()
        # the memories (created here so that the formal spec can read every word) and the clear engine
        self.pkt_mem = memory.Memory(shape=p.word_bits, depth=self.depth, init=[])
        self.chunk_mem = memory.Memory(shape=p.word_bits, depth=self.depth, init=[])
        self.clear_left = Signal(range(p.slot_words + 1))     # words left to clear
        self.clear_next = Signal(range(p.slot_words + 1))     # the word of the slot cleared next
        self.clear_base = Signal(range(self.depth + 1))       # the slot's first word
        self.inside = Signal()                                # within a packet (the parser's framing)

    def elaborate(self, platform):
        m = Module()
        p = self.params
        N, W, S, SW, k = p.offset_bits, p.word_bits, p.msg_slots, p.slot_words, self.k
        beat = self.i.payload
        transfer = Signal()
        m.d.comb += transfer.eq(self.i.valid & self.i.ready)
        m.submodules.parser = parser = Parser(beat, transfer, header_bytes=wire.SDR_HEADER_BYTES)
        m.d.comb += self.inside.eq(parser.inside)

        # --- memories: one write port each (packet RMW or clear engine), transparent RMW read port ---
        m.submodules.pkt_mem = pkt_mem = self.pkt_mem
        m.submodules.chunk_mem = chunk_mem = self.chunk_mem
        pkt_w, chunk_w = pkt_mem.write_port(), chunk_mem.write_port()
        pkt_r = pkt_mem.read_port(transparent_for=(pkt_w,))
        chunk_r = chunk_mem.read_port(transparent_for=(chunk_w,))
        pkt_h, chunk_h = pkt_mem.read_port(), chunk_mem.read_port()
        m.d.comb += [pkt_h.addr.eq(self.rd_addr), chunk_h.addr.eq(self.rd_addr),
                     self.rd_pkt.eq(pkt_h.data), self.rd_chunk.eq(chunk_h.data)]

        # --- constant tables indexed by a chunk size 0..max_chunk, read once per command (one copy each);
        # a larger size reads some entry, but such a post is rejected whatever the entry holds ---
        def span_of(c):
            return (W // c) * c

        sizes = range(p.max_chunk + 1)
        rc_rom = Array(Const(reciprocal(p, c) if c else 0, k + 1) for c in sizes)
        rs_rom = Array(Const(reciprocal(p, span_of(c)) if c else 0, k + 1) for c in sizes)
        span_rom = Array(Const(span_of(c) if c else 0, range(W + 1)) for c in sizes)

        # --- commands and the clear engine ---
        cmd = self.cmd.payload
        clear_left, clear_next, clear_base = self.clear_left, self.clear_next, self.clear_base
        take_cmd = Signal()
        m.d.comb += [self.busy.eq(clear_left != 0), self.cmd.ready.eq(~self.busy),
                     take_cmd.eq(self.cmd.valid & self.cmd.ready),
                     self.i.ready.eq(~self.busy & ~self.cmd.valid)]
        c_index = Signal(range(S))
        m.d.comb += c_index.eq(cmd.msg[:exact_log2(S)] if S > 1 else 0)
        c_rc, c_rs, c_span = Signal(k + 1), Signal(k + 1), Signal(range(W + 1))
        c_last = Signal(N + 1)                                      # n_pkts - 1
        c_chunks, c_words = Signal(N + 1), Signal(N + 2)
        # The tables and two multipliers are shared by the command (its chunk, n_pkts - 1) and the packet
        # (its slot's chunk, offset): a cycle whose command is valid takes no packet (i.ready is low), so
        # the packet's lookups and products are unused then.
        size = Signal(7)
        mul_a, mul_c, mul_s = Signal(N + 1), Signal(N + 1 + k + 1), Signal(N + 1 + k + 1)
        m.d.comb += [c_last.eq(cmd.n_pkts - 1),
                     c_chunks.eq((mul_c >> k) + 1), c_words.eq((mul_s >> k) + 1)]
        post_ok = Signal()
        m.d.comb += post_ok.eq((cmd.op == OP_POST) & (cmd.gen < p.generations) & (cmd.n_pkts >= 1)
                               & (cmd.n_pkts <= (1 << N)) & (cmd.chunk >= 1) & (cmd.chunk <= p.max_chunk)
                               & (c_words <= SW))
        complete_ok = Signal()
        m.d.comb += complete_ok.eq((cmd.op == OP_COMPLETE) & Array(self.s_valid)[c_index]
                                   & (Array(self.s_tag)[c_index] == cmd.msg))
        ev = {name: Signal(name=f"ev_{name}") for name in COUNTERS}
        m.d.comb += [ev["posts"].eq(take_cmd & post_ok), ev["completes"].eq(take_cmd & complete_ok),
                     ev["cmd_rejected"].eq(take_cmd & ~post_ok & ~complete_ok)]

        # --- stage 0: parse, slot lookup, addresses ---
        take = Signal()
        m.d.comb += take.eq(transfer & parser.first)
        bth = parser.bth
        imm = wire_bytes(beat.data, wire.IMMDT_OFFSET, 4)
        q = Signal(25)
        m.d.comb += q.eq(bth.dqpn - p.qp_base)
        long_enough = ~beat.last | (parser.count >= wire.SDR_MIN_LENGTH)
        malformed = Signal()
        m.d.comb += malformed.eq(~(long_enough & parser.is_ipv4 & parser.is_ihl5 & parser.is_udp & parser.is_roce
                                   & (bth.opcode == wire.SDR_OPCODE) & (bth.dqpn >= p.qp_base)
                                   & (q < p.generations * p.channels)))
        msg, offset = Signal(p.msg_bits), Signal(N)
        gen, channel = Signal(range(p.generations)), Signal(range(p.channels))
        gbits = exact_log2(p.generations)
        m.d.comb += [msg.eq(imm[32 - p.msg_bits:]), offset.eq(imm[p.user_bits:p.user_bits + N]),
                     gen.eq(q[:gbits] if gbits else 0), channel.eq(q[gbits:])]
        index = Signal(range(S))
        m.d.comb += index.eq(msg[:exact_log2(S)] if S > 1 else 0)

        def read(array):
            return Array(array)[index]
        r_chunk, r_n = read(self.s_chunk), read(self.s_n)
        outcome0 = Signal(range(len(OUTCOMES)))
        code = {name: OUTCOMES.index(name) for name in OUTCOMES}
        with m.If(malformed):
            m.d.comb += outcome0.eq(code["malformed"])
        with m.Elif(~read(self.s_valid) | (read(self.s_tag) != msg)):
            m.d.comb += outcome0.eq(code["no_slot"])
        with m.Elif(read(self.s_gen) != gen):
            m.d.comb += outcome0.eq(code["gen_mismatch"])
        with m.Elif(offset >= r_n):
            m.d.comb += outcome0.eq(code["offset_oob"])
        with m.Else():
            m.d.comb += outcome0.eq(code["placed"])           # or dup: decided in stage 1
        c0, word0 = Signal(N), Signal(N)
        m.d.comb += [size.eq(Mux(self.cmd.valid, cmd.chunk, r_chunk)),
                     c_rc.eq(rc_rom[size]), c_rs.eq(rs_rom[size]), c_span.eq(span_rom[size]),
                     mul_a.eq(Mux(self.cmd.valid, c_last, offset)), mul_c.eq(mul_a * c_rc), mul_s.eq(mul_a * c_rs),
                     c0.eq(mul_c >> k), word0.eq(mul_s >> k)]
        bit0, first0 = Signal(range(W)), Signal(range(W))
        cbase = Signal(N + 7)
        size0 = Signal(7)
        m.d.comb += [bit0.eq(offset - word0 * c_span), cbase.eq(c0 * r_chunk),
                     first0.eq(bit0 - (offset - cbase)),
                     size0.eq(Mux(r_n - cbase < r_chunk, r_n - cbase, r_chunk))]
        base = Signal(range(self.depth + 1))
        m.d.comb += [base.eq(index * SW),
                     pkt_r.addr.eq(base + word0), chunk_r.addr.eq(base + (c0 >> exact_log2(W))),
                     pkt_r.en.eq(take), chunk_r.en.eq(take)]

        # --- stage 1 registers ---
        s1 = Signal()
        s1_outcome = Signal.like(outcome0)
        s1_msg, s1_offset, s1_gen, s1_channel = Signal.like(msg), Signal.like(offset), Signal.like(gen), \
            Signal.like(channel)
        s1_index, s1_c, s1_bit, s1_first, s1_size = Signal.like(index), Signal.like(c0), Signal.like(bit0), \
            Signal.like(first0), Signal.like(size0)
        s1_paddr, s1_caddr = Signal.like(pkt_r.addr), Signal.like(chunk_r.addr)
        m.d.sync += s1.eq(take)
        with m.If(take):
            m.d.sync += [s1_outcome.eq(outcome0), s1_msg.eq(msg), s1_offset.eq(offset), s1_gen.eq(gen),
                         s1_channel.eq(channel), s1_index.eq(index), s1_c.eq(c0), s1_bit.eq(bit0),
                         s1_first.eq(first0), s1_size.eq(size0), s1_paddr.eq(pkt_r.addr),
                         s1_caddr.eq(chunk_r.addr)]

        # --- stage 1: test and set ---
        pword, cword = pkt_r.data, chunk_r.data
        candidate = s1 & (s1_outcome == code["placed"])
        dup = Signal()
        placed = Signal()
        m.d.comb += [dup.eq(candidate & pword.bit_select(s1_bit, 1)), placed.eq(candidate & ~dup)]
        new_word = Signal(W)
        m.d.comb += new_word.eq(pword | (Const(1, W) << s1_bit))
        mask = Signal(W)
        m.d.comb += mask.eq((((Const(1, W + 1) << s1_size) - 1) << s1_first)[:W])
        finished = Signal()
        m.d.comb += finished.eq(placed & ((new_word & mask) == mask))
        r_done = Array(self.s_done)[s1_index]
        r_chunks = Array(self.s_chunks)[s1_index]
        msg_finished = Signal()
        m.d.comb += msg_finished.eq(finished & (r_done + 1 == r_chunks))
        outcome1 = Signal.like(s1_outcome)
        m.d.comb += outcome1.eq(Mux(dup, code["dup"], s1_outcome))
        for name in OUTCOMES:
            m.d.comb += ev[name].eq(s1 & (outcome1 == code[name]))
        m.d.comb += [ev["chunk_done"].eq(finished), ev["msg_done"].eq(msg_finished)]

        # write ports: packet stage 1 or the clear engine (never both)
        with m.If(self.busy):
            m.d.comb += [pkt_w.addr.eq(clear_base + clear_next), pkt_w.data.eq(0), pkt_w.en.eq(~ResetSignal()),
                         chunk_w.addr.eq(clear_base + clear_next), chunk_w.data.eq(0),
                         chunk_w.en.eq(~ResetSignal())]
            m.d.sync += [clear_next.eq(clear_next + 1), clear_left.eq(clear_left - 1)]
        with m.Else():
            m.d.comb += [pkt_w.addr.eq(s1_paddr), pkt_w.data.eq(new_word), pkt_w.en.eq(placed),
                         chunk_w.addr.eq(s1_caddr),
                         chunk_w.data.eq(cword | (Const(1, W) << s1_c[:exact_log2(W)])),
                         chunk_w.en.eq(finished)]
        for s in range(S):
            with m.If(finished & (s1_index == s)):
                m.d.sync += self.s_done[s].eq(self.s_done[s] + 1)

        # commands (after the stage-1 packet: a post of its slot overrides its done count)
        for s in range(S):
            with m.If(ev["posts"] & (c_index == s)):
                m.d.sync += [self.s_valid[s].eq(1), self.s_tag[s].eq(cmd.msg), self.s_gen[s].eq(cmd.gen),
                             self.s_n[s].eq(cmd.n_pkts), self.s_chunk[s].eq(cmd.chunk),
                             self.s_chunks[s].eq(c_chunks), self.s_done[s].eq(0)]
            with m.If(ev["completes"] & (c_index == s)):
                m.d.sync += self.s_valid[s].eq(0)
        with m.If(ev["posts"]):
            m.d.sync += [clear_base.eq(c_index * SW), clear_next.eq(0), clear_left.eq(c_words)]

        # --- result register (stage 2: the outputs) ---
        out = self.o.payload
        m.d.sync += self.o.valid.eq(s1)
        with m.If(s1):
            m.d.sync += [out.outcome.eq(outcome1), out.msg.eq(s1_msg), out.offset.eq(s1_offset),
                         out.gen.eq(s1_gen), out.channel.eq(s1_channel), out.chunk_done.eq(finished),
                         out.chunk.eq(s1_c), out.msg_done.eq(msg_finished)]

        # --- counters (saturating) ---
        for name in COUNTERS:
            count_event(m, getattr(self, name), ev[name], overflow="saturate")
        return m

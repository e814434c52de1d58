"""Formal proofs of the spill link (hdl/spillway/link.py): ``DecapSpec`` checks the return path's header
stripping (``Decapsulator``) byte for byte: a tracked byte of a tracked frame leaves at its position less
the header, output frames are link-shaped and hold their input's length less the header (k-induction,
unbounded: frames of up to ``MAX_BEATS`` beats)."""


from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cover, Elaboratable, Module, Mux, Signal

from formal.props import link_beat
from formal.runner import prove
from hdl.spillway.link import Decapsulator
from models import wire


class DecapSpec(Elaboratable):
    """The ``Decapsulator`` alone, ``data_bytes`` = 24 (two bytes past the 22-byte spill header): frames
    on ``i`` are link-shaped (every beat full but the last, which holds 1..24 bytes from byte 0) and
    longer than the header; ``o.ready`` and ``rst`` are free. The spec counts each frame's bytes on
    both sides and tracks one byte, chosen by ``AnyConst`` (frame number and position past the
    header): on ``o`` that frame's byte at position - 22 is the byte that came in; every output beat
    but a frame's last is full, a last beat holds 1..24 bytes from byte 0, ``first`` marks exactly a
    frame's first beat, and an output frame holds its input frame's length - 22 bytes.

    Unbounded (k-induction) with frames of at most ``MAX_BEATS`` beats (the spec's byte positions are 8
    bits; from its second beat on a frame takes the same path through the design every beat, so longer
    frames add no behaviour). Strengthening invariants, relating the design's state to the spec's
    positions: between frames (neither ``have`` nor ``flush``) both positions are 0 and the frame numbers
    equal; while a frame's beat is held (``have``) the input is one beat ahead (``in_pos == out_pos + W``,
    same frame), ``held`` is the last input beat's top ``W - 22`` bytes (the tracked byte among them equals
    the spec's), ``emitted`` iff ``out_pos != 0``; during the extra beat (``flush``) the input frame has
    ended (``in_pos == 0``, next frame number), ``flush_keep`` holds 1..``W - 22`` bytes from byte 0 and
    the frame's length is ``out_pos + 22 + bytes(flush_keep)``."""

    W = 24
    #: The longest input frame, in beats (the byte positions stay within 8 bits).
    MAX_BEATS = 5

    def elaborate(self, platform):
        m = Module()
        W, H = self.W, wire.SPILL_HEADER_BYTES
        m.submodules.dut = dut = Decapsulator(W)
        beat, out = dut.i.payload, dut.o.payload
        m.d.comb += [dut.i.valid.eq(AnySeq(1)), beat.data.eq(AnySeq(8 * W)), beat.last.eq(AnySeq(1)),
                     beat.keep.eq(AnySeq(W)), dut.o.ready.eq(AnySeq(1))]

        in_bytes, in_shaped = link_beat(m, beat.keep, beat.last)
        out_bytes, out_shaped = link_beat(m, out.keep, out.last)
        take, give = dut.i.valid & dut.i.ready, dut.o.valid & dut.o.ready
        in_pos, out_pos = Signal(8), Signal(8)           # bytes of the current frame so far
        in_frame, out_frame = Signal(3), Signal(3)       # frames so far (numbers wrap; depth < 8 frames)
        m.d.comb += [Assume(in_shaped), beat.first.eq(in_pos == 0)]
        with m.If(take & beat.last):
            m.d.comb += Assume(in_pos + in_bytes > H)      # a frame carries more than its header
        with m.If(take):
            m.d.comb += Assume(beat.last | (in_pos < (self.MAX_BEATS - 1) * W))   # frames of <= MAX_BEATS beats
        with m.If(take):
            m.d.sync += in_pos.eq(Mux(beat.last, 0, in_pos + W))
            with m.If(beat.last):
                m.d.sync += in_frame.eq(in_frame + 1)
        with m.If(give):
            m.d.sync += out_pos.eq(Mux(out.last, 0, out_pos + W))
            with m.If(out.last):
                m.d.sync += out_frame.eq(out_frame + 1)

        frame, pos = Signal(3), Signal(8)
        m.d.comb += [frame.eq(AnyConst(3)), pos.eq(AnyConst(8)), Assume(pos >= H), Assume(pos < 4 * W)]
        # the tracked byte and the frame's length, latched as they come in (and seen the same cycle:
        # an output beat carries bytes of the input beat taken in that cycle)
        byte, seen, length, ended = Signal(8), Signal(), Signal(8), Signal()
        byte_now, seen_now, length_now, ended_now = Signal(8), Signal(), Signal(8), Signal()
        here = take & (in_frame == frame) & (in_pos <= pos) & (pos < in_pos + in_bytes)
        closing = take & beat.last & (in_frame == frame)
        m.d.comb += [byte_now.eq(Mux(here, beat.data.word_select((pos - in_pos)[:5], 8), byte)),
                     seen_now.eq(seen | here), length_now.eq(Mux(closing, in_pos + in_bytes, length)),
                     ended_now.eq(ended | closing)]
        m.d.sync += [byte.eq(byte_now), seen.eq(seen_now), length.eq(length_now), ended.eq(ended_now)]
        with m.If(give & (out_frame == frame) & (out_pos <= pos - H) & (pos - H < out_pos + out_bytes)):
            m.d.comb += Assert(seen_now & (out.data.word_select((pos - H - out_pos)[:5], 8) == byte_now),
                               "the tracked byte leaves at its position less the header, unchanged")
        with m.If(dut.o.valid):
            m.d.comb += [Assert(out_shaped, "o beats are link-shaped"),
                         Assert(out.first == (out_pos == 0), "first marks a frame's first beat")]
        with m.If(give & out.last & (out_frame == frame)):
            m.d.comb += Assert(ended_now & (out_pos + out_bytes == length_now - H),
                               "a frame leaves with its length less the header")
        m.d.comb += Cover(give & out.last & (out_frame == frame) & (length > W + H))
        self._invariants(m, dut, in_pos, out_pos, in_frame, out_frame, frame, pos, byte, seen, length, ended)
        return m

    def _invariants(self, m, dut, in_pos, out_pos, in_frame, out_frame, frame, pos, byte, seen, length, ended):
        """The design's state against the spec's positions (see the class docstring)."""
        W, H = self.W, wire.SPILL_HEADER_BYTES
        have, emitted, flush = dut.have, dut.emitted, dut.flush
        held, flush_keep = dut.held, dut.flush_keep
        beat_starts = sum(in_pos == k * W for k in range(self.MAX_BEATS))
        m.d.comb += [Assert(~(have & flush), "never a held beat and the extra beat at once"),
                     Assert(beat_starts == 1, "the input position is a whole number of beats"),
                     Assert(emitted == (out_pos != 0), "emitted iff the output frame has begun")]
        with m.If(~have & ~flush):
            m.d.comb += Assert((in_pos == 0) & (out_pos == 0) & (in_frame == out_frame),
                               "between frames: both positions 0, the same frame number")
        with m.If(have):
            m.d.comb += Assert((in_pos == out_pos + W) & (in_frame == out_frame),
                               "a held beat: the input one beat ahead of the output, in the same frame")
        with m.If(flush):
            m.d.comb += Assert((in_pos == 0) & (in_frame == (out_frame + 1)[:3]),
                               "the extra beat: the input frame has ended")
            m.d.comb += Assert(sum(flush_keep == (1 << n) - 1 for n in range(1, W - H + 1)) == 1,
                               "the extra beat holds 1..W-22 bytes from byte 0")
            with m.If(out_frame == frame):
                m.d.comb += Assert(ended & (length == out_pos + H + sum(flush_keep[k] for k in range(W - H))),
                                   "the extra beat: the tracked frame's length is its output so far plus it")
        # held is the input bytes at out_pos + 22 ... of the output frame (all W - 22 of them, or flush_keep's)
        held_bytes = Mux(flush, sum(flush_keep[k] for k in range(W - H)), W - H)
        with m.If((have | flush) & (out_frame == frame) & (pos - H >= out_pos) & (pos - H < out_pos + held_bytes)):
            m.d.comb += Assert(seen & (held.word_select((pos - H - out_pos)[:5], 8) == byte),
                               "the held bytes are the input bytes 22 past the output position")


def test_decapsulator_prove():
    """The return path's header stripping, byte for byte (k-induction)."""
    prove(DecapSpec(), "spill_decapsulator", depth=2)


def test_decapsulator_cover():
    """Not vacuous: the tracked frame, longer than a beat past its header, leaves whole."""
    prove(DecapSpec(), "spill_decapsulator_cover", depth=8, mode="cover")

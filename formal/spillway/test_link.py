"""Formal proofs of the spill link (hdl/spillway/link.py): ``DecapSpec`` checks the return path's header
stripping (``Decapsulator``) byte for byte: a tracked byte of a tracked frame leaves at its position less
the header, output frames are link-shaped and hold their input's length less the header (bounded, depth 8:
frames of up to 3 beats)."""


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
    frame's first beat, and an output frame holds its input frame's length - 22 bytes."""

    W = 24

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
        return m


def test_decapsulator_bmc():
    """The return path's header stripping, byte for byte, at depth 8 (frames of up to 3 beats)."""
    prove(DecapSpec(), "spill_decapsulator", depth=8, mode="bmc")

"""The spill link (SPEC section 1): its frames' beats, the spill header, encapsulation, decapsulation, and
the link itself as a delay line."""
from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.headers import SPILL_HEADER_BYTES
from hdl.packet import beat_layout
from models.params import check
from models.spillway.link import LinkParams, spill_header
from models.wire import SPILL_PORT_AT

__all__ = ["link_layout", "header", "Encapsulator", "Decapsulator", "DelayLine", "LinkParams", "SEQ_BITS"]

#: Width of the spill header's ``flow`` and ``seq`` fields.
SEQ_BITS = 16


def link_layout(data_bytes=64):
    """One beat of the spill link: a packet-stream beat without metadata."""
    return beat_layout(data_bytes, data.StructLayout({}))


def header(op, port, flow, seq, count=0):
    """The 22-byte spill header (``models.spillway.link.spill_header``) as a value, byte 0 in the low lane."""
    fixed = spill_header(op, 0)
    flow, seq = (Cat(v, Const(0, 16))[:16] if hasattr(v, "shape") else Const(v, 16) for v in (flow, seq))
    return Cat(*(Const(b, 8) for b in fixed[:SPILL_PORT_AT]), port[:8] if hasattr(port, "shape") else Const(port, 8),
               flow[8:16], flow[0:8], seq[8:16], seq[0:8], Const(count, 8), Const(0, 8))


class Encapsulator(wiring.Component):
    """Prepends a spill header to a packet: the byte stream ``i`` (one packet after another) leaves on
    ``o`` as ``hdr`` (``SPILL_HEADER_BYTES`` bytes, byte 0 in the low lane, sampled at each packet's
    first beat) followed by the packet. Each output beat is the previous input beat's top 22 bytes
    (or the header) and the current beat's low ``data_bytes - 22``; a last input beat holding more
    than ``data_bytes - 22`` bytes is followed by one extra output beat. ``i.ready = o.ready``
    except during that extra beat; no added latency (combinational path from ``i`` to ``o``).
    """

    def __init__(self, data_bytes=64):
        if not isinstance(data_bytes, int) or data_bytes <= SPILL_HEADER_BYTES:
            raise ValueError(f"Encapsulator: data_bytes = {data_bytes!r} must be an int above {SPILL_HEADER_BYTES}")
        self.data_bytes, self.H = data_bytes, SPILL_HEADER_BYTES
        layout = link_layout(data_bytes)
        super().__init__({"i": In(stream.Signature(layout)), "o": Out(stream.Signature(layout)),
                          "hdr": In(8 * SPILL_HEADER_BYTES)})
        self.inside, self.extra = Signal(), Signal()    # within a frame; sending the extra last beat

    def elaborate(self, platform):
        m = Module()
        W, H = self.data_bytes, self.H
        beat, out = self.i.payload, self.o.payload
        inside, extra = self.inside, self.extra
        carry, extra_keep = Signal(8 * H), Signal(H)
        head = Mux(inside, carry, self.hdr)
        spills = beat.keep[W - H]               # the last beat has more than W - H bytes
        with m.If(extra):
            m.d.comb += [self.o.valid.eq(1), out.data.eq(carry), out.keep.eq(extra_keep), out.last.eq(1),
                         out.first.eq(0), self.i.ready.eq(0)]
            with m.If(self.o.ready):
                m.d.sync += extra.eq(0)
        with m.Else():
            m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready),
                         out.data.eq(Cat(head, beat.data[:8 * (W - H)])),
                         out.keep.eq(Cat(Const((1 << H) - 1, H), beat.keep[:W - H])),
                         out.last.eq(beat.last & ~spills), out.first.eq(~inside)]
            with m.If(self.i.valid & self.o.ready):
                m.d.sync += [carry.eq(beat.data[8 * (W - H):]), inside.eq(~beat.last)]
                with m.If(beat.last & spills):
                    m.d.sync += [extra.eq(1), extra_keep.eq(beat.keep[W - H:])]
        return m


class Decapsulator(wiring.Component):
    """Strips the spill header: each frame on ``i`` leaves on ``o`` without its first
    ``SPILL_HEADER_BYTES`` bytes. Output beat k is the top ``data_bytes - 22`` bytes of input beat k
    and the low 22 bytes of input beat k + 1: the first input beat is absorbed without output (one
    beat of lookahead), and a last input beat with more than 22 bytes is followed by one extra
    output beat. A frame of at most 22 bytes produces nothing (the caller drops it as malformed).
    """

    def __init__(self, data_bytes=64):
        if not isinstance(data_bytes, int) or data_bytes <= SPILL_HEADER_BYTES:
            raise ValueError(f"Decapsulator: data_bytes = {data_bytes!r} must be an int above {SPILL_HEADER_BYTES}")
        self.data_bytes, self.H = data_bytes, SPILL_HEADER_BYTES
        layout = link_layout(data_bytes)
        super().__init__({"i": In(stream.Signature(layout)), "o": Out(stream.Signature(layout))})
        # State, public for the formal spec: a frame's beat is held, its output has begun, the extra beat is due;
        # the held beat's top bytes and the extra beat's byte enables.
        self.have, self.emitted, self.flush = Signal(name="have"), Signal(name="emitted"), Signal(name="flush")
        self.held = Signal(8 * (data_bytes - self.H), name="held")
        self.flush_keep = Signal(data_bytes - self.H, name="flush_keep")

    def elaborate(self, platform):
        m = Module()
        W, H = self.data_bytes, self.H
        beat, out = self.i.payload, self.o.payload
        have, emitted, flush, held, flush_keep = self.have, self.emitted, self.flush, self.held, self.flush_keep
        rest = beat.keep[H]                     # the beat holds more than H bytes
        with m.If(flush):
            m.d.comb += [self.o.valid.eq(1), out.data.eq(held), out.keep.eq(flush_keep), out.last.eq(1),
                         out.first.eq(~emitted), self.i.ready.eq(0)]
            with m.If(self.o.ready):
                m.d.sync += [flush.eq(0), emitted.eq(0)]
        with m.Elif(~have):
            m.d.comb += self.i.ready.eq(1)
            with m.If(self.i.valid):
                m.d.sync += [held.eq(beat.data[8 * H:]), have.eq(~beat.last)]
                with m.If(beat.last & rest):
                    m.d.sync += [flush.eq(1), flush_keep.eq(beat.keep[H:])]
        with m.Else():
            m.d.comb += [self.o.valid.eq(self.i.valid), self.i.ready.eq(self.o.ready),
                         out.data.eq(Cat(held, beat.data[:8 * H])),
                         out.keep.eq(Cat(Const((1 << (W - H)) - 1, W - H), beat.keep[:H])),
                         out.last.eq(beat.last & ~rest), out.first.eq(~emitted)]
            with m.If(self.i.valid & self.o.ready):
                m.d.sync += [held.eq(beat.data[8 * H:]), emitted.eq(~(beat.last & ~rest))]
                with m.If(beat.last):
                    m.d.sync += have.eq(0)
                    with m.If(rest):
                        m.d.sync += [flush.eq(1), flush_keep.eq(beat.keep[H:])]
        return m


class DelayLine(wiring.Component):
    """A spill link in one direction: a frame's beat taken on ``i`` in cycle c leaves on ``o`` in
    cycle c + ``latency`` (a shift register of ``latency`` beats). ``i.ready`` is ``~pause`` (the
    sender's serialiser held: back-pressure on the link); ``o`` does not wait for ``o.ready``: both
    ends of the spill link always take what arrives (the switch's return port and the node's input
    are always ready), as a wire does."""

    def __init__(self, params=None):
        p = self.params = check(params, LinkParams)
        self.latency = p.latency
        layout = link_layout(p.data_bytes)
        super().__init__({"i": In(stream.Signature(layout)), "o": Out(stream.Signature(layout)), "pause": In(1)})

    def elaborate(self, platform):
        m = Module()
        valid = [Signal(name=f"valid_{k}") for k in range(self.latency)]
        payload = [Signal(self.i.payload.shape(), name=f"payload_{k}") for k in range(self.latency)]
        m.d.comb += self.i.ready.eq(~self.pause)
        m.d.sync += [valid[0].eq(self.i.valid & self.i.ready), payload[0].eq(self.i.payload)]
        m.d.sync += [v.eq(w) for v, w in zip(valid[1:], valid)] + [q.eq(r) for q, r in zip(payload[1:], payload)]
        m.d.comb += [self.o.valid.eq(valid[-1]), self.o.payload.eq(payload[-1])]
        return m

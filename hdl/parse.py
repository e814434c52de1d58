"""Parse front end shared by the blocks: packet framing, byte counts and header views of a beat stream."""
from amaranth.hdl import Const, Elaboratable, Module, Mux, Signal

from hdl.headers import BTH, ETHERNET, INA, IPV4, UDP, wire_view
from models import wire

__all__ = ["Parser", "FRAMINGS", "popcount"]

#: ``count``: a packet starts with the beat after a ``last`` beat (``first`` of the beat is
#: ignored); ``flag``: a packet starts with a beat that has ``first`` set.
FRAMINGS = ("count", "flag")


def popcount(m, value, name="popcount"):
    """The number of set bits of ``value`` (``range(len(value) + 1)``); helper signals go into
    ``m``'s comb domain (named ``name``...).

    Each 63-bit chunk is counted bit-parallel (the classic SWAR reduction: 2-, 4-, 8-bit field sums
    by masks and shifts, then the bytes folded together), and the chunk counts are added. Every step
    is a 63-bit signal whose sums are 64 bits wide: Verilator evaluates each as a few machine-word
    operations (a 64-bit chunk's 65-bit sums would be wide arithmetic). (``sum()`` of the
    bits chains 127 adders each one bit wider than the last: a 129-bit sum added word by word; a tree
    of bit pairs becomes 64 calls of Verilator's popcount of 2 bits.)"""
    counts = []
    for chunk, base in enumerate(range(0, len(value), 63)):
        width = min(63, len(value) - base)
        x = value[base:base + width]
        if width == 1:
            counts.append(x)
            continue
        mask = {pattern: Const(int(pattern * 16, 16) & ((1 << width) - 1), width) for pattern in ("5", "3", "0f")}
        steps = [lambda x: x - ((x >> 1) & mask["5"]),               # 2-bit fields: 0..2 (never borrows)
                 lambda x: (x & mask["3"]) + ((x >> 2) & mask["3"]),  # 4-bit fields: 0..4
                 lambda x: (x + (x >> 4)) & mask["0f"]]              # bytes: 0..8
        steps += [lambda x, shift=shift: x + (x >> shift) for shift in (8, 16, 32) if shift < width]
        for k, step in enumerate(steps):                          # the low byte ends as the sum of all bytes
            signal = Signal(width, name=f"{name}{chunk}_{k}")
            m.d.comb += signal.eq(step(x))                          # truncated: every field sum fits
            x = signal
        counts.append(x[:min(width, 6)])                           # 0..63
    if not counts:
        return Const(0, 1)
    return sum(counts[1:], counts[0])[:len(value).bit_length()]


class Parser(Elaboratable):
    """Where a beat stands in its packet, and the packet's leading ``header_bytes`` bytes.

    Parameters
    ----------
    beat : View of ``hdl.packet.beat_layout``
        The block's input beat.
    transfer : Value
        The beat is accepted in this cycle (framing and registers advance only then).
    header_bytes : int
        Leading bytes of the packet on ``header``, 1 .. the bus width.
    hold : bool
        Keep the header bytes of the first beat in a register, so that ``header`` is the packet's
        on every beat; without, ``header`` is the bytes of the beat itself (the packet's on its
        first beat only).
    framing : str
        How a packet starts, one of ``FRAMINGS``.

    Attributes
    ----------
    first : Signal
        The beat starts a packet.
    inside : Signal
        A beat of the current packet was accepted before (register); with ``flag`` framing a beat
        without ``first`` outside a packet (a stray beat) leaves it clear.
    count : Signal
        Valid bytes of the beat (popcount of ``keep``).
    length : Signal(16)
        Bytes of the packet up to and including this beat (modulo 2**16).
    header : Signal(8 * header_bytes)
        See ``hold``. Views onto it, for the headers that fit: ``eth``, ``ip``, ``udp``, ``bth``
        (RoCEv2), ``ina``; predicates on them: ``is_ipv4`` (EtherType and version), ``is_ihl5``,
        ``is_udp`` (IP protocol), ``is_roce`` and ``is_ina`` (UDP destination port), ``dport(port)``.
    """

    def __init__(self, beat, transfer, *, header_bytes, hold=False, framing="count"):
        data_bytes = len(beat.keep)
        if not isinstance(header_bytes, int) or not 1 <= header_bytes <= data_bytes:
            raise ValueError(f"Parser: header_bytes = {header_bytes!r} must be an int within 1..{data_bytes}")
        if not isinstance(hold, bool):
            raise TypeError(f"Parser: hold = {hold!r} must be a bool")
        if framing not in FRAMINGS:
            raise ValueError(f"Parser: framing = {framing!r} must be one of {', '.join(FRAMINGS)}")
        self.beat, self.transfer = beat, transfer
        self.header_bytes, self.hold, self.framing = header_bytes, hold, framing
        self.first = Signal()
        self.inside = Signal()
        self.count = Signal(range(data_bytes + 1))
        self.length = Signal(16)
        self.header = Signal(8 * header_bytes)
        views = (("eth", ETHERNET, wire.ETH_OFFSET), ("ip", IPV4, wire.IP_OFFSET), ("udp", UDP, wire.UDP_OFFSET),
                 ("bth", BTH, wire.BTH_OFFSET), ("ina", INA, wire.INA_OFFSET))
        for name, layout, offset in views:
            if offset + layout.size // 8 <= header_bytes:
                setattr(self, name, wire_view(layout, self.header, offset))

    @property
    def is_ipv4(self):
        return (self.eth.type == wire.ETHERTYPE_IPV4) & (self.ip.version == 4)

    @property
    def is_ihl5(self):
        return self.ip.ihl == 5

    @property
    def is_udp(self):
        return self.ip.proto == wire.IPPROTO_UDP

    def dport(self, port):
        """The UDP destination port is ``port``."""
        return self.udp.dport == port

    @property
    def is_roce(self):
        return self.dport(wire.ROCEV2_PORT)

    @property
    def is_ina(self):
        return self.dport(wire.INA_PORT)

    def elaborate(self, platform):
        m = Module()
        beat = self.beat
        m.d.comb += [
            self.first.eq(beat.first if self.framing == "flag" else ~self.inside),
            self.count.eq(popcount(m, beat.keep, name="keep_count")),
        ]
        done = Signal(16)                       # bytes of the packet before this beat
        m.d.comb += self.length.eq(Mux(self.first, 0, done) + self.count)
        with m.If(self.transfer):
            m.d.sync += [self.inside.eq(~beat.last & (self.first | self.inside)), done.eq(self.length)]
        leading = beat.data[:8 * self.header_bytes]
        if self.hold:
            held = Signal.like(self.header)
            with m.If(self.transfer & self.first):
                m.d.sync += held.eq(leading)
            m.d.comb += self.header.eq(Mux(self.first, leading, held))
        else:
            m.d.comb += self.header.eq(leading)
        return m

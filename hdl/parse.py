"""Parse front end shared by the blocks: packet framing, byte counts and header views of a beat stream."""
from amaranth.hdl import Const, Elaboratable, Module, Mux, Signal

from hdl.headers import BTH, ETHERNET, INA, IPV4, UDP, wire_view
from models import wire

__all__ = ["Parser", "FRAMINGS", "popcount"]

#: ``count``: a packet starts with the beat after a ``last`` beat (``first`` of the beat is
#: ignored); ``flag``: a packet starts with a beat that has ``first`` set.
FRAMINGS = ("count", "flag")


def popcount(value):
    """The number of set bits of ``value``.

    Up to 64 bits, the sum of the bits. Wider, the sum of the bits of each 63-bit chunk, then of the
    chunk counts: ``sum()`` over 128 bits chains 127 adders each one bit wider than the last, up to
    a 129-bit sum that Verilator adds word by word (``VL_ADD_W``) in every parser of the pipeline;
    a chunk's chain stays within 64 bits, machine words. (Measured on the C++ bench harness, in
    instructions per cycle: a balanced adder tree becomes 64 calls of Verilator's 2-bit popcount, a
    SWAR popcount per chunk costs more than the chained chunk sums, and below 64 bits more than the
    plain sum.)"""
    if len(value) <= 64:
        return sum(value[i] for i in range(len(value)))
    chunks = [value[base:base + 63] for base in range(0, len(value), 63)]
    return sum(sum((chunk[i] for i in range(len(chunk))), Const(0, 1)) for chunk in chunks)


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
    done : Signal(16)
        Bytes of the packet before this beat (register, meaningful inside a packet).
    held : Signal(8 * header_bytes)
        With ``hold``: the first beat's leading bytes (register, meaningful inside a packet).
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
        self.done, self.held = Signal(16, name="done"), Signal(8 * header_bytes, name="held")
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
            self.count.eq(popcount(beat.keep)),
        ]
        done = self.done                        # bytes of the packet before this beat
        m.d.comb += self.length.eq(Mux(self.first, 0, done) + self.count)
        with m.If(self.transfer):
            m.d.sync += [self.inside.eq(~beat.last & (self.first | self.inside)), done.eq(self.length)]
        leading = beat.data[:8 * self.header_bytes]
        if self.hold:
            held = self.held
            with m.If(self.transfer & self.first):
                m.d.sync += held.eq(leading)
            m.d.comb += self.header.eq(Mux(self.first, leading, held))
        else:
            m.d.comb += self.header.eq(leading)
        return m

"""MRC EV expander (SPEC section 5): a 32-bit entropy value -> the outer SRv6 uSID DA, one per cycle."""
from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.packet import output_register
from models.ev_expander import COUNTERS, EvExpanderParams, field_widths
from models.params import check

__all__ = ["EvExpander", "EvExpanderParams", "COUNTERS", "config_layout"]


def config_layout(params):
    """Register write: field ``field`` (0 = the locator, then the uSIDs) <- ``(init, mask)``."""
    return data.StructLayout({"field": range(1 + params.usids), "init": 32, "mask": 32})


class EvExpander(wiring.Component):
    """OCP MRC field expansion of an EV into the 128-bit DA, by the rules of ``EvExpanderModel``.

    Interface: ``i`` takes one EV per cycle (``{ev}``); ``o`` answers each in order, registered
    (latency 1, ``i.ready = ~o.valid | o.ready``) with ``{ok, da}`` (``ok`` low: unused EV bits set,
    ``bad_ev``; ``da`` then 0). ``cfg`` (always ready) writes one field's ``(init, mask)`` register;
    software writes a whole configuration between requests and checks it (the model refuses a bad
    one); reset clears every register to ``(0, 0)``.

    Datapath (*chosen*): the fields' masks and inits are laid out as one 128-bit mask ``M`` and value
    ``I`` in DA order (locator at the top, bits past the last uSID zero). A prefix count ``c[j]``,
    the set bits of ``M`` above bit ``j``, is the rank of bit ``j`` among the bits the fields take,
    so DA bit ``j`` is ``EV[ev_bits - 1 - c[j]]`` where ``M[j]`` is set and ``I[j]`` elsewhere: every
    field takes the next EV bits MSB-first and its first bit lands on its mask's most significant set
    bit. The request is refused when ``EV << popcount(M)`` keeps a set bit within ``ev_bits``.
    Counters: ``expanded``, ``bad_ev`` (one ``Out`` port each, saturating).
    """

    def __init__(self, params=None):
        p = self.params = check(params, EvExpanderParams)
        signature = {"i": In(stream.Signature(data.StructLayout({"ev": p.ev_bits}))),
                     "o": Out(stream.Signature(data.StructLayout({"ok": 1, "da": 128}))),
                     "cfg": In(stream.Signature(config_layout(p)))}
        signature.update({name: Out(p.counter_bits) for name in COUNTERS})
        super().__init__(signature)
        self.widths = field_widths(p.usids)
        self.init = [Signal(w, name=f"init{f}") for f, w in enumerate(self.widths)]
        self.mask = [Signal(w, name=f"mask{f}") for f, w in enumerate(self.widths)]

    def elaborate(self, platform):
        m = Module()
        p, bits = self.params, self.params.ev_bits
        transfer = output_register(m, self.i, self.o)
        m.d.comb += self.cfg.ready.eq(1)
        c = self.cfg.payload
        for f, w in enumerate(self.widths):
            with m.If(self.cfg.valid & (c.field == f)):
                m.d.sync += [self.init[f].eq(c.init[:w]), self.mask[f].eq(c.mask[:w])]

        pad = 128 - sum(self.widths)
        dmask, dinit = Signal(128), Signal(128)
        m.d.comb += [dmask.eq(Cat(Const(0, pad), *reversed(self.mask))),
                     dinit.eq(Cat(Const(0, pad), *reversed(self.init)))]
        ev = self.i.payload.ev
        da = Signal(128)
        msb_first = Cat(ev[k] for k in reversed(range(bits)))       # msb_first[r] = EV[ev_bits - 1 - r]
        rank = [Signal(8, name=f"rank{j}") for j in range(128)]   # set bits of dmask above bit j
        for j in range(128):
            m.d.comb += rank[j].eq(0 if j == 127 else rank[j + 1] + dmask[j + 1])
            pick = Mux(rank[j] < bits, msb_first.bit_select(rank[j], 1), 0)
            m.d.comb += da[j].eq(Mux(dmask[j], pick, dinit[j]))
        total = Signal(range(129))
        m.d.comb += total.eq(sum(dmask[j] for j in range(128)))
        ok = Signal()
        m.d.comb += ok.eq((ev << total)[:bits] == 0)
        with m.If(transfer):
            m.d.sync += [self.o.valid.eq(1), self.o.payload.ok.eq(ok), self.o.payload.da.eq(Mux(ok, da, 0))]
        top = (1 << p.counter_bits) - 1
        for name, hit in (("expanded", ok), ("bad_ev", ~ok)):
            counter = getattr(self, name)
            with m.If(transfer & hit & (counter != top)):
                m.d.sync += counter.eq(counter + 1)
        return m

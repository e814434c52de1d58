"""Formal properties of the MRC EV expander, proved by k-induction.

EVs and register writes are free on every cycle; ``o.ready`` is held high, so every answer is the
expansion of the previous cycle's EV under the configuration of that cycle. The spec keeps its own
copy of the configuration from the writes (asserted equal to the design's registers, which makes
the induction go through) and checks each answer with properties of field expansion that do not
compute it the design's way:

- ``ok`` exactly when the EV bits no field takes (the low ``ev_bits - popcount(masks)``) are zero;
- every DA bit outside the masks is the field's init value (past the last uSID: 0);
- the first mask bit (the most significant set bit of the first non-zero mask) takes the EV's MSB.
(The full expansion is checked against the model and the pdep oracle in simulation; a popcount
property over the 128 masked bits was too slow for the solver.)
"""
from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Elaboratable, Module, Mux, ResetSignal, Signal

from formal.runner import any_streams, prove
from hdl.ev_expander import EvExpander, EvExpanderParams
from models.ev_expander import field_widths

PARAMS = EvExpanderParams(usids=2, ev_bits=12, counter_bits=2)


class ExpanderSpec(Elaboratable):
    def elaborate(self, platform):
        m = Module()
        p = PARAMS
        m.submodules.dut = dut = EvExpander(p)
        m.d.comb += [Assume(~ResetSignal()), dut.o.ready.eq(1)]
        any_streams(m, dut.i, dut.cfg)
        widths = field_widths(p.usids)
        init = [Signal(w, name=f"shadow_init{f}") for f, w in enumerate(widths)]
        mask = [Signal(w, name=f"shadow_mask{f}") for f, w in enumerate(widths)]
        c = dut.cfg.payload
        for f, w in enumerate(widths):
            with m.If(dut.cfg.valid & (c.field == f)):
                m.d.sync += [init[f].eq(c.init[:w]), mask[f].eq(c.mask[:w])]
            m.d.comb += Assert((init[f] == dut.init[f]) & (mask[f] == dut.mask[f]), "registers follow the writes")
        # the request of the previous cycle and the configuration it saw
        fresh, ev = Signal(), Signal(p.ev_bits)
        seen_init, seen_mask = Signal(128), Signal(128)
        pad = 128 - sum(widths)
        m.d.sync += [fresh.eq(dut.i.valid & dut.i.ready), ev.eq(dut.i.payload.ev),
                     seen_init.eq(Cat(Const(0, pad), *reversed(init))),
                     seen_mask.eq(Cat(Const(0, pad), *reversed(mask)))]
        taken = Signal(range(129))
        m.d.comb += taken.eq(sum(seen_mask[j] for j in range(128)))
        unused_clear = Signal()
        m.d.comb += unused_clear.eq(Cat(ev[j] & (j < p.ev_bits - taken) for j in range(p.ev_bits)) == 0)
        out = dut.o.payload
        first = Signal(range(128))                 # the most significant set bit of the masks
        for j in range(128):
            with m.If(seen_mask[j]):
                m.d.comb += first.eq(j)
        with m.If(fresh):
            m.d.comb += Assert(dut.o.valid, "one answer per request, the cycle after")
            m.d.comb += Assert(out.ok == unused_clear, "ok exactly when the unused EV bits are zero")
            with m.If(out.ok):
                m.d.comb += [
                    Assert((out.da & ~seen_mask) == (seen_init & ~seen_mask), "DA bits outside the masks are init"),
                    Assert((taken == 0) | (out.da.bit_select(first, 1) == ev[-1]),
                           "the first mask bit takes the EV's most significant bit"),
                ]
        m.d.comb += Cover(fresh & out.ok & (taken == p.ev_bits) & (Mux(ev == 0, 0, 1) == 1))
        return m


def test_ev_expander_proof():
    prove(ExpanderSpec(), "ev_expander", depth=3, mode="prove")

"""Formal properties of the MRC EV expander, proved by k-induction.

EVs and register writes are free on every cycle; ``o.ready`` is held high, so every answer is the
expansion of the previous cycle's EV under the configuration of that cycle. The spec keeps its own
copy of the configuration from the writes (asserted equal to the design's registers, which makes
the induction go through) and checks each answer with properties of field expansion that do not
compute it the design's way:

- ``ok`` exactly when the EV bits no field takes (the low ``ev_bits - popcount(masks)``) are zero;
- every DA bit outside the masks is the field's init value (past the last uSID: 0);
- the first mask bit (the most significant set bit of the first non-zero mask) takes the EV's MSB,
  the second one the EV's next bit (the rank of a mask bit moves the EV bit it takes);
- ``cfg`` is always ready (the block's docstring).
(The full expansion is checked against the model and the pdep oracle in simulation; a popcount
property over the 128 masked bits was too slow for the solver.)

Reset is explored: ``rst`` is free at every cycle (no assumption); the spec's registers reset with
the design, its register copy to ``(0, 0)`` as the SPEC says, so "registers follow the writes" checks
every register after any reset; the cycle after a reset ``o`` is empty. Counters: ``expanded`` and
``bad_ev`` increment (saturating) exactly when an answer with ``ok`` high / low (the spec's own
``ok``) is loaded.
"""
from amaranth.hdl import Assert, Cat, Const, Cover, Elaboratable, Module, Mux, ResetSignal, Signal

from formal.props import after_reset, counters_follow
from formal.runner import any_streams, prove
from hdl.ev_expander import COUNTERS, EvExpander, EvExpanderParams
from models.ev_expander import field_widths

PARAMS = EvExpanderParams(usids=2, ev_bits=12, counter_bits=2)


class ExpanderSpec(Elaboratable):
    def elaborate(self, platform):
        m = Module()
        p = PARAMS
        m.submodules.dut = dut = EvExpander(p)
        m.d.comb += dut.o.ready.eq(1)            # rst stays free: a reset may come at any cycle
        any_streams(m, dut.i, dut.cfg)
        widths = field_widths(p.usids)
        init = [Signal(w, name=f"shadow_init{f}") for f, w in enumerate(widths)]
        mask = [Signal(w, name=f"shadow_mask{f}") for f, w in enumerate(widths)]
        c = dut.cfg.payload
        for f, w in enumerate(widths):
            with m.If(dut.cfg.valid & dut.cfg.ready & (c.field == f)):
                m.d.sync += [init[f].eq(c.init[:w]), mask[f].eq(c.mask[:w])]
            m.d.comb += Assert((init[f] == dut.init[f]) & (mask[f] == dut.mask[f]), "registers follow the writes")
        m.d.comb += Assert(dut.cfg.ready, "cfg is always ready (one register write per cycle)")
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
        # the second most significant set bit of the masks, one-hot, in reversed bit order (x & -x)
        rev = Signal(128)
        m.d.comb += rev.eq(Cat(*reversed([seen_mask[j] for j in range(128)])))
        rest, second = Signal(128), Signal(128)
        m.d.comb += [rest.eq(rev & ~(rev & -rev)[:128]), second.eq((rest & -rest)[:128])]
        da_rev = Cat(*reversed([out.da[j] for j in range(128)]))
        with m.If(fresh):
            m.d.comb += Assert(dut.o.valid, "one answer per request, the cycle after")
            m.d.comb += Assert(out.ok == unused_clear, "ok exactly when the unused EV bits are zero")
            with m.If(out.ok):
                m.d.comb += [
                    Assert((out.da & ~seen_mask) == (seen_init & ~seen_mask), "DA bits outside the masks are init"),
                    Assert((taken == 0) | (out.da.bit_select(first, 1) == ev[-1]),
                           "the first mask bit takes the EV's most significant bit"),
                    Assert((da_rev & second) == Mux(ev[-2], second, 0),
                           "the second mask bit takes the EV's second most significant bit"),
                ]
        m.d.comb += Assert(dut.o.valid == fresh, "an answer exactly the cycle after each request (none after a reset)")
        m.d.comb += Assert(~after_reset(m) | ~dut.o.valid, "a reset empties the output register")
        counters_follow(m, {name: getattr(dut, name) for name in COUNTERS},
                        {"expanded": fresh & unused_clear, "bad_ev": fresh & ~unused_clear}, delayed=True)
        m.d.comb += [Cover(fresh & out.ok & (taken == p.ev_bits) & (Mux(ev == 0, 0, 1) == 1)),
                     Cover(ResetSignal() & (mask[0] != 0) & (dut.expanded != 0))]
        return m


def test_ev_expander_proof():
    prove(ExpanderSpec(), "ev_expander", depth=2, mode="prove")


def test_ev_expander_cover():
    """Not vacuous: a full-width expansion answered; a reset with registers written and counts taken."""
    prove(ExpanderSpec(), "ev_expander_cover", depth=5, mode="cover")

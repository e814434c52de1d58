"""Formal check of the MRC EV expander: a symbolic OCP profile, configured and then expanding symbolic EVs.

Bounded model check from reset, deep enough for any profile's configuration scan (``config_cycles``
at ``PARAMS``: at most 5 + 2 x (2 + 6) = 21 cycles) and requests after it. The profile on ``cfg`` is one
free constant (every member of every field: mode, counts, format widths, width, init_val, min_val,
max_val, mask), offered from the first cycle and held until taken; EVs are free every cycle. The spec
computes, its own way and not the design's:

- OCP's verdict (``check_profs``, the ``ev_t`` layout, the block's bounds), as ``models.ev_expander.refusal``
  states them: the profile is taken exactly when the spec accepts it (counters ``configured``/``refused``);
- the expansion, field by field: the bit under mask bit ``b`` of field ``f`` is EV bit ``off_f`` +
  popcount(mask_f above ``b``) (``off_f``: the mask bits of the fields before), the others init_val;
  the value right-aligned in its format slot, cut to it, the slots concatenated from the top (on a
  refused EV too: the expansion of its consumed bits); ``ok`` exactly when the EV bits past the
  consumed ones are zero. Every answer to a request taken after the
  profile's transfer equals it, and one taken before equals the empty (reset) profile's;
- the ``cfg`` transfer comes within ``config_cycles`` and never in the cycle of a request; one answer
  per request, the cycle after.
"""
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Elaboratable, Module, Mux, ResetSignal, Signal
from amaranth.lib.data import View

from formal.props import counters_follow
from formal.runner import prove
from hdl.ev_expander import COUNTERS, EvExpander, EvExpanderParams, config_layout
from models import wire

PARAMS = EvExpanderParams(ev_bits=6, exp_bits=6, max_fields=2, field_bits=3, counter_bits=2)
#: config_cycles bound at PARAMS: 5 + max_fields x (2 + max(exp_bits, field_bits)).
BOUND = 5 + PARAMS.max_fields * (2 + max(PARAMS.exp_bits, PARAMS.field_bits))


def popcount(m, v):
    """The set bits of ``v``, as a signal of its own width (a shift by it stays narrow)."""
    n = Signal(range(len(v) + 1))
    m.d.comb += n.eq(sum(v[k] for k in range(len(v))))
    return n


class ProfileSpec(Elaboratable):
    def elaborate(self, platform):
        m = Module()
        p, E, X, B, F = PARAMS, PARAMS.ev_bits, PARAMS.exp_bits, PARAMS.field_bits, PARAMS.max_fields
        m.submodules.dut = dut = EvExpander(p)
        m.d.comb += [Assume(~ResetSignal()), dut.o.ready.eq(1)]
        prof = View(config_layout(p), Signal(config_layout(p).size, name="profile"))
        m.d.comb += prof.as_value().eq(AnyConst(len(prof.as_value())))
        sent = Signal()
        m.d.comb += [dut.cfg.valid.eq(~sent), dut.cfg.payload.eq(prof),
                     dut.i.valid.eq(AnySeq(1)), dut.i.payload.ev.eq(AnySeq(E))]
        taken = dut.cfg.valid & dut.cfg.ready
        with m.If(taken):
            m.d.sync += sent.eq(1)

        # OCP's verdict, the spec's way
        nf, n = prof.fmt_field_count, prof.field_count
        fmts = [prof.fmt_fields[k] for k in range(F)]
        fields = [prof.fields[k] for k in range(F)]
        in_fmt = [Const(k, 8) < nf for k in range(F)]
        in_field = [Const(k, 8) < n for k in range(F)]
        total = sum(Mux(in_fmt[k], fmts[k], 0) for k in range(F))
        ones = [popcount(m, fields[k].mask) for k in range(F)]
        bad_field = [
            (fields[k].width > 32) | ((fields[k].init_val >> fields[k].width) != 0)
            | ((fields[k].mask >> fields[k].width) != 0)
            | ((fields[k].mask != 0) & ((fields[k].max_val >> ones[k]) != 0)) | (fields[k].width > B)
            for k in range(F)]
        mode = prof.ev_fmt_mode
        limit = Mux(mode == wire.EV_FMT_MODE_STEV, wire.STEV_BITS, wire.SRV6_BITS)
        consumed = Signal(range(F * 32 + 1))
        m.d.comb += consumed.eq(sum(Mux(in_field[k], ones[k], 0) for k in range(F)))
        accept = Signal()
        m.d.comb += accept.eq(
            (nf <= F) & (n <= F) & (n <= nf)
            & (sum(Mux(in_field[k], fields[k].width, 0) for k in range(F)) <= total)
            & ~Cat(in_field[k] & bad_field[k] for k in range(F)).any()
            & ((mode == wire.EV_FMT_MODE_STEV) | (mode == wire.EV_FMT_MODE_SRV6))
            & (total <= limit) & (total <= X) & (consumed <= E))

        # the expansion of an EV under the profile, field by field
        def expansion(ev):
            first = [ev[E - 1 - q] for q in range(E)]          # EV bits in ev_t order
            out, start, off = Const(0, X), Const(0, 16), Const(0, 16)
            for k in range(F):
                value = []
                for b in range(B):
                    rank = off + popcount(m, fields[k].mask[b + 1:B]) if b + 1 < B else off
                    src = Mux(rank < E, Cat(*first).bit_select(rank[:3], 1), 0)
                    value.append(Mux(fields[k].mask[b], src, fields[k].init_val[b]))
                w = fmts[k]
                slot = Cat(*value) & ((Const(1, 2 * X) << w) - 1)[:B]
                placed = (Cat(slot, Const(0, X)) << X) >> (start + w)
                out = Mux(in_field[k], out | placed[:X], out)
                start = start + Mux(in_field[k], w, 0)
                off = off + Mux(in_field[k], ones[k], 0)
            unused_clear = (ev << consumed)[:E] == 0        # the EV bits past the consumed ones
            return unused_clear, out

        # the request answered this cycle: its EV and the profile in force when it was taken
        fresh, ev, new = Signal(), Signal(E), Signal()
        installed = Signal()
        with m.If(taken & accept):
            m.d.sync += installed.eq(1)
        m.d.sync += [fresh.eq(dut.i.valid & dut.i.ready), ev.eq(dut.i.payload.ev), new.eq(installed)]
        ok_new, exp_new = expansion(ev)
        want_ok = Mux(new, ok_new, ev == 0)
        out = dut.o.payload
        m.d.comb += [
            Assert(dut.o.valid == fresh, "one answer per request, the cycle after"),
            Assert(~taken | ~(dut.i.valid & dut.i.ready), "no request taken in the cycle of a profile"),
        ]
        with m.If(fresh):
            m.d.comb += Assert(out.ok == want_ok, "ok exactly when the EV bits past the consumed ones are zero")
            m.d.comb += Assert(out.exp_ev == Mux(new, exp_new, 0),
                               "the expansion deposits each field's EV bits under its mask, in its slot")
        cycle = Signal(range(BOUND + 2))
        with m.If(cycle != BOUND + 1):
            m.d.sync += cycle.eq(cycle + 1)
        m.d.comb += Assert(sent | (cycle <= BOUND), "the profile is taken within config_cycles")
        counters = {name: getattr(dut, name) for name in COUNTERS}
        counters_follow(m, counters, {"configured": taken & accept, "refused": taken & ~accept})
        counters_follow(m, counters, {"expanded": fresh & want_ok, "bad_ev": fresh & ~want_ok}, delayed=True)
        m.d.comb += [
            Cover(fresh & new & out.ok & (fields[0].mask != 0) & (fields[1].mask != 0) & (ev != 0)
                  & (fmts[0] < fields[0].width)),
            Cover(fresh & sent & ~new & (prof.fmt_field_count == 2) & (prof.field_count == 2)),
        ]
        return m


def test_ev_expander_proof():
    prove(ProfileSpec(), "ev_expander", depth=BOUND + 4, mode="bmc")


def test_ev_expander_cover():
    """Not vacuous: an accepted two-field profile (a field wider than its slot) expanding a non-zero EV;
    a refused two-field profile."""
    prove(ProfileSpec(), "ev_expander_cover", depth=BOUND + 4, mode="cover")

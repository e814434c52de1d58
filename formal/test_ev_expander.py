"""Formal proof of the MRC EV expander: a symbolic OCP profile, configured and then expanding symbolic EVs.

The profile on ``cfg`` is one free constant (every member of every field: mode, counts, format widths,
width, init_val, min_val, max_val, mask), offered from the cycle after the reset of the first cycle and
held until taken; EVs are free every cycle. The spec computes, its own way and not the design's:

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

Unbounded (k-induction of depth ``BOUND + 4``, deeper than any profile's configuration scan:
``config_cycles`` at ``PARAMS`` is at most 5 + 2 x (2 + 6) = 21 cycles). The spec's cycle count is
reset-less and ``rst`` is high exactly in its cycle 0, so an induction trace that reaches back to a
cycle during the configuration starts with a reset: the scan is checked on real traces from reset, with
no invariant of its own. After the transfer (the spec's cycle count saturates past ``BOUND``) the
strengthening invariants are: the configuration FSM idle with nothing to install (``idle``, ``install``,
public for the spec), and every output bit's registered source (``sel``) and the unused-EV-bit mask
(``unused``) equal to what the spec derives from the profile (the source of slot bit j of field k: EV
bit off_k + popcount(mask_k above j) under a mask bit, else init_val bit j; 0 outside every slot), or to
the empty profile's while none was installed.
"""
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Cat, Const, Cover, Elaboratable, Module, Mux, ResetSignal, Signal
from amaranth.lib.data import View

from formal.props import counters_follow, popcount
from formal.runner import prove
from hdl.ev_expander import COUNTERS, EvExpander, EvExpanderParams, config_layout
from models import wire

PARAMS = EvExpanderParams(ev_bits=6, exp_bits=6, max_fields=2, field_bits=3, counter_bits=2)
#: config_cycles bound at PARAMS: 5 + max_fields x (2 + max(exp_bits, field_bits)).
BOUND = 5 + PARAMS.max_fields * (2 + max(PARAMS.exp_bits, PARAMS.field_bits))


def set_bits(m, v):
    """How many bits of ``v`` are set, as a signal of its own width (a shift by it stays narrow)."""
    n = Signal(range(len(v) + 1))
    m.d.comb += n.eq(popcount(v))
    return n


class ProfileSpec(Elaboratable):
    def elaborate(self, platform):
        m = Module()
        p, E, X, B, F = PARAMS, PARAMS.ev_bits, PARAMS.exp_bits, PARAMS.field_bits, PARAMS.max_fields
        m.submodules.dut = dut = EvExpander(p)
        # rst high exactly in the first cycle of the spec's reset-less count (see the module docstring)
        cycle = Signal(range(BOUND + 3), reset_less=True)
        with m.If(cycle != BOUND + 2):
            m.d.sync += cycle.eq(cycle + 1)
        m.d.comb += [Assume(ResetSignal() == (cycle == 0)), dut.o.ready.eq(1)]
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
        ones = [set_bits(m, fields[k].mask) for k in range(F)]
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
                    rank = off + set_bits(m, fields[k].mask[b + 1:B]) if b + 1 < B else off
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
        m.d.comb += Assert(sent | (cycle <= BOUND + 1), "the profile is taken within config_cycles (of the reset)")
        self.invariants(m, dut, fields, fmts, in_field, consumed, sent, installed, accept)
        counters = {name: getattr(dut, name) for name in COUNTERS}
        counters_follow(m, counters, {"configured": taken & accept, "refused": taken & ~accept})
        counters_follow(m, counters, {"expanded": fresh & want_ok, "bad_ev": fresh & ~want_ok}, delayed=True)
        m.d.comb += [
            Cover(fresh & new & out.ok & (fields[0].mask != 0) & (fields[1].mask != 0) & (ev != 0)
                  & (fmts[0] < fields[0].width)),
            Cover(fresh & sent & ~new & (prof.fmt_field_count == 2) & (prof.field_count == 2)),
        ]
        return m

    def invariants(self, m, dut, fields, fmts, in_field, consumed, sent, installed, accept):
        """After the transfer: nothing left to install, ``sel`` and ``unused`` as the spec derives them from
        the profile (the empty profile's before)."""
        E, X, B, F = PARAMS.ev_bits, PARAMS.exp_bits, PARAMS.field_bits, PARAMS.max_fields
        m.d.comb += [Assert(installed == (sent & accept), "the profile is installed iff taken and accepted"),
                     Assert(~sent | (dut.idle & ~dut.install), "after the transfer the configuration waits")]
        for t in range(X):                      # output bit t of ev_t order (sel[t])
            from_ev, index, start, off = Const(0, 1), Const(0, dut.index_bits), Const(0, 16), Const(0, 16)
            for k in range(F):
                w = fmts[k]
                j = (start + w - 1 - t)[:16]     # the slot bit of field k at t
                inside = in_field[k] & (start <= t) & (t < start + w) & (j < B)
                bit = Signal(range(B), name=f"slot_bit{t}_{k}")
                m.d.comb += bit.eq(j)
                above = set_bits(m, (fields[k].mask[:B] >> (bit + 1))[:B])
                masked = inside & fields[k].mask.bit_select(bit, 1)
                from_ev = Mux(masked, 1, from_ev)
                index = Mux(masked, (off + above)[:dut.index_bits],
                            Mux(inside, fields[k].init_val.bit_select(bit, 1), index))
                start = start + Mux(in_field[k], w, 0)
                off = off + Mux(in_field[k], set_bits(m, fields[k].mask[:B]), 0)
            m.d.comb += Assert(dut.sel[t].as_value() == Mux(installed, Cat(index, from_ev), 0),
                               f"output bit {t}: its source as the spec derives it from the profile")
        unused = Cat((E - 1 - j) >= consumed for j in range(E))
        m.d.comb += Assert(dut.unused == Mux(installed, unused, (1 << E) - 1),
                           "the unused EV bits: those past the consumed ones")


def test_ev_expander_proof():
    """Verdict, expansion, answers and counters, unbounded (k-induction; see the module docstring)."""
    prove(ProfileSpec(), "ev_expander", depth=BOUND + 4)


def test_ev_expander_cover():
    """Not vacuous: an accepted two-field profile (a field wider than its slot) expanding a non-zero EV;
    a refused two-field profile."""
    prove(ProfileSpec(), "ev_expander_cover", depth=BOUND + 4, mode="cover")

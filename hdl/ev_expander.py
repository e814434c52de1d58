"""MRC EV expander (SPEC section 5): an EV -> its OCP MRC 1.0 expansion under a whole profile, one per cycle."""
from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.counters import count_event
from models import wire
from models.ev_expander import COUNTERS, FIELD_MEMBERS, EvExpanderParams
from models.params import check

__all__ = ["EvExpander", "EvExpanderParams", "COUNTERS", "config_layout", "config_cycles"]


def config_layout(params):
    """A whole profile: OCP's format mode, format field widths (``uint8_t``) and EV fields (five
    ``uint32_t``: ``struct mrc_ctl_ev_field``), ``max_fields`` entries each, the counts saying how many count."""
    count = range(params.max_fields + 1)
    field = data.StructLayout({m: wire.EV_FIELD_BITS for m in FIELD_MEMBERS})
    return data.StructLayout({"ev_fmt_mode": 3, "fmt_field_count": count,
                              "fmt_fields": data.ArrayLayout(wire.EV_FMT_WIDTH_BITS, params.max_fields),
                              "field_count": count, "fields": data.ArrayLayout(field, params.max_fields)})


def config_cycles(params, fmt_widths):
    """Cycles from a profile's ``cfg.valid`` to its transfer (format widths as far as the scan goes)."""
    return 5 + sum(2 + max(w, params.field_bits) for w in fmt_widths)


class EvExpander(wiring.Component):
    """OCP MRC 1.0 EV expansion, by the rules of ``EvExpanderModel``.

    Interface: ``i`` takes one EV per cycle (``{ev}``, the first ``ev_bits`` bits of OCP's ``ev_t``);
    ``o`` answers each in order, registered (latency 1, ``i.ready = ~o.valid | o.ready`` but for one
    cycle per profile) with ``{ok, exp_ev}`` (the first ``exp_bits`` bits of the expanded ``ev_t``;
    ``ok`` low: a bit past the consumed ones is set, ``bad_ev``, and ``exp_ev`` the expansion of the
    consumed bits, not to be used). ``cfg`` takes a whole profile (``config_layout``): ``cfg.ready``
    rises once it has been checked and, accepted, installed,
    ``config_cycles`` after ``cfg.valid`` (5 + the sum over the format fields of 2 + max(width,
    ``field_bits``): 73 cycles for two 16-bit STEV fields, 345 for OCP's SRv6+SRH example); meanwhile
    requests go on under the old profile, and ``i`` is not ready in the cycle of the ``cfg`` transfer, so a
    request is never taken in the same cycle as a profile. Reset installs the empty profile (only EV 0
    expands, to 0). Counters (one ``Out`` port each, saturating): ``expanded``, ``bad_ev``,
    ``configured``, ``refused``.

    Datapath (*chosen*, the configuration precomputed): each output bit has a registered source, an EV
    bit index or a constant (``sel``: ``{index, from_ev}``), and the request path is a wide multiplexer
    per output bit from the EV, plus ``(ev & unused) == 0`` with ``unused`` also registered. A profile is
    scanned one bit a cycle into shadow registers (``shadow``, written at a one-hot position), field by
    field and from each field's bit ``max(width, field_bits) - 1`` down (its format slot's bits are the
    output bits; its mask bits take the next EV bit, counted by ``taken``), which checks OCP's rules on
    the way; it is copied into ``sel`` in the cycle of the ``cfg`` transfer when accepted.

    Bounds (parameters): the first ``ev_bits`` EV bits (default 64), the first ``exp_bits`` expanded
    bits (default 128: the SRv6 destination address), ``max_fields`` fields (default 8), fields of at most
    ``field_bits`` bits (default 32, OCP's). The request path's multiplexers grow as ``exp_bits`` x
    ``ev_bits`` (a full crossbar: 8k inputs at the defaults, 32k for all of OCP's example), which sets the
    defaults. OCP profiles the block refuses though OCP's ``check_profs`` takes them: masks taking more
    than ``ev_bits`` EV bits; a format wider than ``exp_bits``; more than ``max_fields`` format fields;
    UDP mode (``mrc_ctl.h`` gives ``ev_t`` no layout for it); an STEV format wider than 32 bits or an SRv6
    one wider than 256 (``mrc_ctl.h``'s ``ev_t``). Format fields are ``uint8_t`` wide as in ``mrc_ctl.h``.
    The defaults hold nine of the ten profiles of OCP's example; SRv6+SRH Explicit (ten fields, a 192-bit
    format, 128 EV bits) needs ``max_fields`` >= 10, ``exp_bits`` >= 192 and ``ev_bits`` >= 128 (the
    tests' ``ocp`` parameters hold all ten).
    """

    def __init__(self, params=None):
        p = self.params = check(params, EvExpanderParams)
        signature = {"i": In(stream.Signature(data.StructLayout({"ev": p.ev_bits}))),
                     "o": Out(stream.Signature(data.StructLayout({"ok": 1, "exp_ev": p.exp_bits}))),
                     "cfg": In(stream.Signature(config_layout(p)))}
        signature.update({name: Out(p.counter_bits) for name in COUNTERS})
        super().__init__(signature)
        self.index_bits = max(1, (p.ev_bits - 1).bit_length())
        sel = data.StructLayout({"index": self.index_bits, "from_ev": 1})
        self.sel = [Signal(sel, name=f"sel{k}") for k in range(p.exp_bits)]
        self.shadow = [Signal(sel, name=f"shadow{k}") for k in range(p.exp_bits)]
        self.unused = Signal(p.ev_bits, init=(1 << p.ev_bits) - 1)   # EV bits (ev's numbering) past the consumed
        self.commit = Signal()                    # the cycle of a cfg transfer
        # public for the formal spec: the configuration waits for a profile; the verdict installs it (DONE)
        self.idle, self.install = Signal(init=1, name="idle"), Signal(name="install")

    def elaborate(self, platform):
        m = Module()
        self._request_path(m)
        self._configuration(m)
        return m

    def _request_path(self, m):
        p, o = self.params, self.o
        m.d.comb += self.i.ready.eq((~o.valid | o.ready) & ~self.commit)
        transfer = self.i.valid & self.i.ready
        with m.If(o.ready):
            m.d.sync += o.valid.eq(0)
        ev = self.i.payload.ev
        first = Cat(ev[p.ev_bits - 1 - q] for q in range(p.ev_bits))     # first[q]: EV bit q of ev_t order
        value = Cat(Mux(s.from_ev, first.bit_select(s.index, 1), s.index[0]) for s in reversed(self.sel))
        ok = (ev & self.unused) == 0
        with m.If(transfer):
            m.d.sync += [o.valid.eq(1), o.payload.ok.eq(ok), o.payload.exp_ev.eq(value)]
        count_event(m, self.expanded, transfer & ok, overflow="saturate")
        count_event(m, self.bad_ev, transfer & ~ok, overflow="saturate")

    def _configuration(self, m):
        p, c = self.params, self.cfg.payload
        B = p.field_bits
        f = Signal(range(p.max_fields + 1))              # the format field being scanned
        b = Signal(wire.EV_FMT_WIDTH_BITS)               # its bit being scanned, from max(width, B) - 1 down
        pos = Signal(range(p.exp_bits + 1))              # output bits written
        hot = Signal(p.exp_bits)                         # one-hot: the output bit written next
        taken = Signal(range(p.max_fields * B + 1))      # EV bits the masks take
        widths = Signal(range(p.max_fields * (B + 1) + 1))   # EV field widths, each counted up to B + 1
        bad = Signal()
        slot = Signal(wire.EV_FMT_WIDTH_BITS)
        init, mask, top = Signal(B), Signal(B), Signal(B)   # the field's init_val, mask, max_val, bit b at MSB
        width = Signal(range(B + 2))
        ones, length = Signal(range(B + 1)), Signal(range(B + 1))   # mask bits so far; bit length of max_val
        top_high = Signal()                                          # max_val has bits at or above B

        mode = c.ev_fmt_mode
        known = (mode == wire.EV_FMT_MODE_STEV) | (mode == wire.EV_FMT_MODE_SRV6)
        limit = Mux(mode == wire.EV_FMT_MODE_STEV, min(wire.STEV_BITS, p.exp_bits), min(wire.SRV6_BITS, p.exp_bits))
        m.d.comb += self.cfg.ready.eq(self.commit)

        # the f-th entries, staged (FETCH) so that LOAD's checks start from registers
        entry, field, has, end = Signal(wire.EV_FMT_WIDTH_BITS), Signal.like(c.fields[0]), Signal(), Signal()
        install = self.install                            # DONE: the verdict, accepted
        with m.FSM() as fsm:
            with m.State("IDLE"):
                with m.If(self.cfg.valid):
                    m.d.sync += [f.eq(0), pos.eq(0), hot.eq(1), taken.eq(0), widths.eq(0), bad.eq(~known),
                                 ones.eq(0), length.eq(0), top_high.eq(0)]
                    m.d.sync += [s.eq(0) for s in self.shadow]
                    m.next = "FETCH"
            with m.State("FETCH"):
                m.d.sync += [entry.eq(c.fmt_fields[f]), field.eq(c.fields[f]), has.eq(f < c.field_count),
                             end.eq((f == c.fmt_field_count) | (f == p.max_fields))]
                with m.If((ones != 0) & ((length > ones) | top_high)):
                    m.d.sync += bad.eq(1)                 # the field before: max_val wider than its mask bits
                m.next = "LOAD"
            with m.State("LOAD"):
                with m.If(end):
                    m.next = "VERDICT"
                with m.Elif(pos + entry > limit):         # wider than the mode or exp_bits: no need to scan on
                    m.d.sync += bad.eq(1)
                    m.next = "VERDICT"
                with m.Else():
                    too_wide = field.width > B
                    outside = (field.init_val[B:] != 0) | (field.mask[B:] != 0) if B < wire.EV_FIELD_BITS else 0
                    m.d.sync += [
                        slot.eq(entry), b.eq(Mux(entry > B, entry, B) - 1), ones.eq(0), length.eq(0),
                        init.eq(Mux(has, field.init_val[:B], 0)), mask.eq(Mux(has, field.mask[:B], 0)),
                        top.eq(Mux(has, field.max_val[:B], 0)),
                        top_high.eq(has & (field.max_val[B:] != 0) if B < wire.EV_FIELD_BITS else 0),
                        width.eq(Mux(has, Mux(too_wide, B + 1, field.width), 0)),
                        widths.eq(widths + Mux(has, Mux(too_wide, B + 1, field.width), 0)),
                        bad.eq(bad | (has & (too_wide | outside))),
                    ]
                    m.next = "SCAN"
            with m.State("SCAN"):
                inside = b < B                            # bit b is the working registers' MSB
                ib, mb, tb = init[-1] & inside, mask[-1] & inside, top[-1] & inside
                with m.If(inside):
                    m.d.sync += [init.eq(init << 1), mask.eq(mask << 1), top.eq(top << 1)]
                with m.If(b < slot):                      # an output bit: its source
                    source = Mux(mb, Cat(taken[:self.index_bits], Const(1, 1)), Cat(ib, Const(0, self.index_bits)))
                    for k, s in enumerate(self.shadow):
                        with m.If(hot[k]):
                            m.d.sync += s.as_value().eq(source)
                    m.d.sync += [hot.eq(hot << 1), pos.eq(pos + 1)]
                with m.If(mb):
                    m.d.sync += [taken.eq(taken + 1), ones.eq(ones + 1)]
                with m.If(inside & (b >= width) & (ib | mb)):
                    m.d.sync += bad.eq(1)             # init_val or mask outside the field's width
                with m.If(tb & (length == 0)):
                    m.d.sync += length.eq(b + 1)
                with m.If(b == 0):
                    m.d.sync += f.eq(f + 1)
                    m.next = "FETCH"
                with m.Else():
                    m.d.sync += b.eq(b - 1)
            with m.State("VERDICT"):
                m.d.sync += install.eq(~bad & (c.field_count <= c.fmt_field_count)
                                       & (c.fmt_field_count <= p.max_fields) & (widths <= pos) & (taken <= p.ev_bits))
                m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += self.commit.eq(1)
                m.d.sync += install.eq(0)
                m.next = "IDLE"

        m.d.comb += self.idle.eq(fsm.ongoing("IDLE"))
        with m.If(install):
            m.d.sync += [s.eq(t) for s, t in zip(self.sel, self.shadow)]
            m.d.sync += self.unused.eq(Cat(p.ev_bits - 1 - j >= taken for j in range(p.ev_bits)))
        count_event(m, self.configured, install, overflow="saturate")
        count_event(m, self.refused, self.commit & ~install, overflow="saturate")

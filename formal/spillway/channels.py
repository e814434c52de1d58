"""Spec-side channels the Spillway proofs share: a shift-register FIFO, and the two tracked packets of one
flow offered to the credit core with their round trips."""
from amaranth.asserts import AnyConst
from amaranth.hdl import Assume, Signal

__all__ = ["ShiftFifo", "tracked_pair", "tracked_trips"]


class ShiftFifo:
    """A spec-side FIFO of ``depth`` records (shift register): ``push``/``pop`` in the same cycle work."""

    def __init__(self, m, layout, depth, name):
        self.m, self.depth = m, depth
        self.items = [Signal(layout, name=f"{name}{k}") for k in range(depth)]
        self.len = Signal(range(depth + 1), name=f"{name}_len")

    def head(self):
        return self.items[0]

    def update(self, push, item, pop, push2=0, item2=None):
        """``push2``/``item2``: a second item pushed in the same cycle, behind ``item``."""
        m, items = self.m, self.items
        with m.If(pop):
            m.d.sync += [items[k].eq(items[k + 1]) for k in range(self.depth - 1)]
        with m.If(push):
            for k in range(self.depth):
                with m.If(self.len - pop == k):
                    m.d.sync += items[k].eq(item)
        if item2 is not None:
            with m.If(push2):
                for k in range(self.depth):
                    with m.If(self.len - pop + push == k):
                        m.d.sync += items[k].eq(item2)
        m.d.sync += self.len.eq(self.len + push + push2 - pop)


def tracked_pair(m, core):
    """Two tracked packets of one flow and port offered to CreditCore ``core`` (``AnyConst`` handles),
    each decided once, early before late: (early handle, late handle, flow, port, {name: decided})."""
    p, a = core.params, core.d.payload
    early_h, late_h = AnyConst(p.handle_bits), AnyConst(p.handle_bits)
    flow, port = AnyConst(range(p.flows)), AnyConst(range(p.ports))
    m.d.comb += Assume(early_h != late_h)
    seen = {}
    for name, h in (("early", early_h), ("late", late_h)):
        here = core.d.valid & (a.handle == h)
        s = seen[name] = Signal(name=f"{name}_seen")
        m.d.comb += Assume(~(here & s))
        with m.If(here):
            m.d.comb += Assume((a.flow == flow) & (a.port == port) & ~a.malformed)
        with m.If(here & core.v.ready):
            m.d.sync += s.eq(1)
    m.d.comb += Assume(~(core.d.valid & (a.handle == late_h) & ~seen["early"]))
    return early_h, late_h, flow, port, seen


def tracked_trips(m, handle, spill, done, tag, early_h, late_h):
    """Round trips of the two tracked packets: {"early"/"late": (spilled, back, re-injected now)}, set
    when ``spill`` takes the packet of ``handle`` (``early_h``, ``late_h``) and when ``done`` re-injects
    the frame whose ``tag`` bit (0 early, 1 late) is set."""
    out = {}
    for name, h, bit in (("early", early_h, 0), ("late", late_h, 1)):
        spilled, back = Signal(name=f"{name}_spilled"), Signal(name=f"{name}_back")
        with m.If(spill & (handle == h)):
            m.d.sync += spilled.eq(1)
        with m.If(done & tag[bit]):
            m.d.sync += back.eq(1)
        out[name] = (spilled, back, done & tag[bit])
    return out

"""Event counters with their overflow made an explicit choice: the RTL side of ``models.contract.Counters``."""
from amaranth.hdl import Const, Mux, Value

__all__ = ["OVERFLOWS", "count_event"]

#: ``saturate``: the counter stops at its top; ``wrap``: it drops the carry and goes on from 0.
OVERFLOWS = ("saturate", "wrap")


def count_event(m, counter, when=None, *, overflow, amount=1):
    """In the sync domain, add ``amount`` (an int or a Value) to ``counter`` in each cycle ``when`` is
    high (every cycle when None), overflowing as ``overflow`` says. Returns the cycles in which the
    sum passes the top (for a sticky flag); a saturating counter stays at the top in those."""
    if overflow not in OVERFLOWS:
        raise ValueError(f"count_event: overflow = {overflow!r}: must be one of {', '.join(OVERFLOWS)}")
    when = Const(1) if when is None else Value.cast(when)
    top = (1 << len(counter)) - 1
    if isinstance(amount, int) and amount == 1:
        over = when & (counter == top)
        if overflow == "saturate":
            with m.If(when & ~over):
                m.d.sync += counter.eq(counter + 1)
        else:
            with m.If(when):
                m.d.sync += counter.eq(counter + 1)
        return over
    total = counter + amount
    over = when & (total > top)
    with m.If(when):
        m.d.sync += counter.eq(Mux(over, top, total) if overflow == "saturate" else total)
    return over

"""Property helpers shared by the formal specs: reset explored, counter increments, bit counts.

Both compare the design's *ports* with what the spec computed itself:

- ``after_reset(m)``: a spec signal, high in the cycle after ``rst`` was high (``rst`` is an input
  of every proof, free at any cycle unless a spec assumes it low; the spec's own registers are in
  the design's domain, so they reset with it and the shadow comparisons keep holding after it);
- ``counters_follow(m, counters, events, ...)``: each counter port equals its value one cycle
  before plus one exactly when the spec's event for it happened in that cycle (saturating at the
  counter's top, or wrapping), and is zero the cycle after a reset;
- ``link_beat(m, keep, last)``: the bytes of a beat and whether it is shaped as a link carries it;
- ``popcount(bits)``: how many of ``bits`` are set, as a balanced tree of adders.
"""
from amaranth.hdl import Assert, Const, Mux, ResetSignal, Signal, Value

__all__ = ["after_reset", "counters_follow", "link_beat", "popcount"]


def popcount(bits):
    """How many of ``bits`` (a value, or an iterable of 1-bit values) are set: pairs summed level by level, a
    tree of adders as narrow as each level's count (the same number as ``sum(bits)``, whose chain of adders
    widens one bit an input: Yices proves the chunk bitmap's k-induction, whose invariant counts 16 bits, in
    two thirds of the time on the tree)."""
    level = [bits[k] for k in range(len(bits))] if isinstance(bits, Value) else list(bits)
    while len(level) > 1:
        level = [level[k] + level[k + 1] if k + 1 < len(level) else level[k] for k in range(0, len(level), 2)]
    return level[0]


def link_beat(m, keep, last):
    """(bytes, shaped) of a beat with byte-enable ``keep``: its byte count, and whether it is shaped as
    a link carries frames (every beat full but the last, which holds 1 or more bytes from byte 0)."""
    W = len(keep)
    n = Signal(range(W + 1), name="beat_bytes")
    m.d.comb += n.eq(popcount(keep))
    return n, (keep == Mux(last, (Const(1, W + 1) << n) - 1, (1 << W) - 1)) & (n >= 1)


def after_reset(m):
    """A reset-less spec register: ``rst`` was high in the cycle before."""
    was_reset = Signal(reset_less=True, name="was_reset")
    m.d.sync += was_reset.eq(ResetSignal())
    return was_reset


def counters_follow(m, counters, events, *, saturating=True, when=None, delayed=False, block=""):
    """Assert ``counters[name] == sat(before + event)`` for every ``name`` of ``events``.

    ``counters``: name -> the design's counter port; ``events``: name -> a spec expression, high in
    the cycle whose clock edge counts the event. ``when`` (optional, a spec expression) limits the
    check to the cycles after one where it held (e.g. while the spec's shadow is defined).
    An event may be wider than one bit: the counter then adds its value (e.g. packets lost by a close).
    ``delayed``: the events are given one cycle late (high in the cycle after the counting edge, as
    a result register loaded on that edge is)."""
    for name, event in events.items():
        counter = counters[name]
        bits = len(counter)
        top = (1 << bits) - 1
        before = Signal(bits, name=f"{name}_before")
        happened = Signal(len(Value.cast(event)), name=f"{name}_event")
        ok = Signal(name=f"{name}_checked", init=1)
        m.d.sync += [before.eq(counter), ok.eq(1 if when is None else when)]
        m.d.comb += happened.eq(event) if delayed else []
        if not delayed:
            m.d.sync += happened.eq(event)
        total = before + happened
        expected = Mux(total > top, top, total[:bits]) if saturating else total[:bits]
        with m.If(ok):
            m.d.comb += Assert(counter == expected, f"{block}{name} increments exactly when its event happens")

"""``hdl.counters.count_event`` against ``models.contract.Counters``: the same overflow on both sides."""
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from hdl.counters import count_event
from models.contract import Counters


def _run(overflow, amounts, bits=3):
    """The counter's value after each cycle, and the overflow flag in each cycle, for ``amounts`` (0: idle)."""
    m = Module()
    counter, amount, event, over = Signal(bits), Signal(4), Signal(), Signal()
    m.d.comb += over.eq(count_event(m, counter, event, amount=amount, overflow=overflow))
    seen = []

    async def bench(ctx):
        for n in amounts:
            ctx.set(event, n != 0)
            ctx.set(amount, n)
            flag = ctx.get(over)
            await ctx.tick()
            seen.append((ctx.get(counter), flag))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return seen


@pytest.mark.parametrize("overflow", ["saturate", "wrap"])
def test_count_event_matches_counters(overflow, rng):
    amounts = [rng.choice([0, 1, 1, 2, 5]) for _ in range(200)]
    model = Counters(["c"], 3, overflow)
    for (value, flag), n in zip(_run(overflow, amounts), amounts):
        before = model["c"]
        model.add("c", n)
        assert value == model["c"], (overflow, n)
        assert flag == (before + n > 7), (overflow, before, n)


@pytest.mark.parametrize("overflow", ["saturate", "wrap"])
def test_count_event_by_one(overflow):
    m = Module()
    counter = Signal(2)
    count_event(m, counter, 1, overflow=overflow)
    values = []

    async def bench(ctx):
        for _ in range(6):
            await ctx.tick()
            values.append(ctx.get(counter))

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert values == ([1, 2, 3, 3, 3, 3] if overflow == "saturate" else [1, 2, 3, 0, 1, 2])


def test_count_event_names_a_bad_overflow():
    with pytest.raises(ValueError, match="overflow = 'clamp'"):
        count_event(None, Signal(4), 1, overflow="clamp")     # checked before the module is touched

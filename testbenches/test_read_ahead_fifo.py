"""``ReadAheadFIFO`` (hdl/read_ahead_fifo.py) against ``amaranth.lib.fifo.SyncFIFO`` cycle by cycle: the same random
writes, reads and resets into both, the same ready flags, level and head word (Amaranth's simulator)."""
import random

import pytest
from amaranth.hdl import ClockDomain, Module
from amaranth.lib.fifo import SyncFIFO
from amaranth.sim import Simulator

from hdl.read_ahead_fifo import ReadAheadFIFO


@pytest.mark.parametrize("depth", [1, 2, 5, 8])
def test_same_as_sync_fifo(depth):
    m = Module()
    m.domains.sync = sync = ClockDomain()
    m.submodules.ours = ours = ReadAheadFIFO(width=8, depth=depth)
    m.submodules.theirs = theirs = SyncFIFO(width=8, depth=depth)
    rng = random.Random(depth)

    async def bench(ctx):
        for cycle in range(3000):
            w_en, r_en, word = rng.random() < 0.6, rng.random() < 0.5, rng.randrange(256)
            reset = rng.random() < 0.01
            for fifo in (ours, theirs):
                ctx.set(fifo.w_en, w_en)
                ctx.set(fifo.r_en, r_en)
                ctx.set(fifo.w_data, word)
            ctx.set(sync.rst, reset)
            state = [(ctx.get(f.w_rdy), ctx.get(f.r_rdy), ctx.get(f.level)) for f in (ours, theirs)]
            assert state[0] == state[1], f"cycle {cycle}: (w_rdy, r_rdy, level) {state[0]} != SyncFIFO's {state[1]}"
            if state[0][1]:
                assert ctx.get(ours.r_data) == ctx.get(theirs.r_data), f"cycle {cycle}: head word differs"
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_bad_parameters():
    with pytest.raises(ValueError, match="depth"):
        ReadAheadFIFO(width=8, depth=0)
    with pytest.raises(TypeError, match="width"):
        ReadAheadFIFO(width="8", depth=2)

"""Checked engine: every output compared with the golden model, with no Python per clock cycle.

The golden model runs first, in Python, over the whole stimulus (``expect(block, component, beats)``:
the one lockstep, ``expected.py``) and gives the expected beats of every output stream, each with
a mask of the bits that matter and, for a cycle-accurate model, the cycle it must leave in. The
stimulus and the expected beats go into memories of an HDL wrapper (``Checked``, generated from the
block's stream ports) that Verilator loads with ``$fread`` (binary); the clock is generated inside the
wrapper (Verilator ``--timing``), only the wrapper's own ports are public (no ``--public-flat-rw``),
so Python wakes only when the run is over (``wrapper.py``). The wrapper feeds ``i`` from its memory at the rate the
block accepts beats, holds every output ready, compares each output beat with the next expected one
(masked payload, and the cycle when the model gives one; an expected beat that does not come in its
cycle is a mismatch too) and latches the first mismatch, where the run stops: its cycle, port, beat
index and the RTL's value. ``check(dut, ...)`` (cocotb side) then reads that, the beats seen per port, the cycle of the
last accepted input and the block's counters, and raises an ``AssertionError`` naming the cycle (``run.py``).

What the engine drives: stream ``i``, and from a side memory indexed by the cycle the block's other
inputs (``qdepth``, ``rd_addr``), a stall per output stream and the gaps of ``i``: zero for ``make bench``
(outputs always ready, a beat offered every cycle), random for a soak (``side_table``: ``qdepth`` in
[0, 2 * high], each output stalled one cycle in four where the model takes the output's ready, ``i``
idle one cycle in eight with its payload inverted: a block that reads a beat not offered takes garbage).
A block's command stream (``cfg`` or ``cmd``: ``command_port``) comes from a third memory: a stimulus
item ``{"cmd": payload}`` among the beats of a batch is offered once every input beat before it went in
(``after``: the beats before it), and while a command is offered ``i`` is not (a command goes in between
the beats it was placed between, so an order-only model applies it in the same order; a cycle-accurate
one sees it in its cycle).
``make bench`` sends none: the block keeps its reset configuration.

A long run (``soak``) goes in batches: the wrapper's ``keep`` holds the block's state (it is frozen
between batches: ``EnableInserter``), and the model session keeps the model's; every batch is
checked beat by beat, the counters when the run is over. testbenches/test_soak.py runs 1e5 packets
per block this way.
"""
from testbenches.checked.expected import (
    TAIL,
    Expected,
    Side,
    expect,
    lockstep_runner,
    session,
    side_table,
    split_commands,
)
from testbenches.checked.run import (
    BATCH,
    EXPECTED,
    batches,
    check,
    checked_of,
    controls,
    outputs_of,
    soak,
    soak_params,
    verdict,
    write_files,
)
from testbenches.checked.wrapper import NO_CYCLE, SIDE, Checked

__all__ = ["Checked", "Expected", "Side", "NO_CYCLE", "SIDE", "TAIL", "BATCH", "EXPECTED", "expect", "session",
           "side_table", "lockstep_runner", "split_commands", "check", "controls", "outputs_of", "verdict",
           "checked_of", "soak", "soak_params", "batches", "write_files"]

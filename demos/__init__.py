"""Demonstrations: each mechanism at work on its RTL under Verilator, told as a short story
(``make sim BLOCK=<name>``; ``tools/sim.py`` runs them).

A demonstration is one module here, the one place a mechanism's name meets its stimulus: ``TITLE``;
``RUNS``, each a registered block (``registry.py`` gives its Component), its parameters and one of the
module's cocotb tests; ``PCAPS`` (optional), what each pcap of a run holds; the cocotb tests themselves
(a short setting in the paper's spirit, every output checked against the block's golden model by the
lockstep of ``tb.BlockTB``), which record what the story needs in their ``summary.json``
(``tb.summary(demo={...})``); and ``story(summaries)``, the lines that tell the run, built from the
runs' summaries: the recorded facts and the block's counters (which equal the model's).

Cycles in a story are the waveform's: row ``n`` of ``make waves`` is the ``n``-th rising clock edge.
"""
import importlib
from dataclasses import dataclass

from testbenches import tb

__all__ = ["NAMES", "Run", "load", "cycle", "window", "plural", "linger"]

#: The demonstrations, ``make sim``'s default first.
NAMES = ("spillway", "symphony", "esa", "mrc", "dblp", "sdr")
#: Cycles a ``make waves`` window shows past its last event.
AFTER = 6


@dataclass(frozen=True)
class Run:
    """One simulation of a demonstration: the registered ``block``, its ``params`` and the cocotb ``test``."""
    block: str
    params: object
    test: str


def load(name):
    """The demonstration module ``name``; ``KeyError`` naming the known ones otherwise."""
    if name not in NAMES:
        raise KeyError(f"unknown demonstration {name!r}; known: {', '.join(NAMES)}")
    return importlib.import_module(f"demos.{name}")


def cycle(time_ns, period_ns=tb.BlockTB.period_ns):
    """The waveform cycle (``make waves`` row) whose rising edge is at ``time_ns``: the clock rises first
    one period after time 0."""
    return time_ns // period_ns - 1


def plural(count, noun):
    """``"1 cycle"``, ``"2 cycles"``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


async def linger(t, cycles=AFTER + 2):
    """``cycles`` more clock cycles of testbench ``t``: the waveform goes on past a window's last event."""
    for _ in range(cycles):
        await t.edge()


def window(signals, events, before=3, after=AFTER):
    """A ``make waves`` window showing ``signals`` from ``before`` cycles ahead of the first of ``events``
    (name -> waveform cycle) to ``after`` cycles past the last."""
    start = max(min(events.values()) - before, 0)
    return {"signals": list(signals), "events": dict(events), "start": start,
            "rows": max(events.values()) + after - start + 1}


"""Shared output of the system scenarios: one CSV and one PNG per scenario in ``build/scenarios``."""
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)

OUT = Path(__file__).resolve().parents[1] / "build" / "scenarios"

__all__ = ["OUT", "write_csv", "figure", "plt"]


def write_csv(name, header, rows):
    """Write ``rows`` under ``header`` to ``build/scenarios/<name>.csv``; return the path."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.csv"
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows(rows)
    return path


class figure:
    """``with figure(name, cols, seed=S) as axes:`` draws into ``cols`` side-by-side axes, saved as
    ``build/scenarios/<name>.png`` on exit, titled with the scenario and the seed of its run."""

    def __init__(self, name, cols=1, width=6.0, height=4.0, seed=None):
        self.path = OUT / f"{name}.png"
        self.fig, axes = plt.subplots(1, cols, figsize=(width * cols, height), squeeze=False)
        self.axes = list(axes[0])
        if seed is not None:
            self.fig.suptitle(f"scenario {name}, seed {seed} (INNET_SEED={seed} replays it)", fontsize="medium")

    def __enter__(self):
        return self.axes if len(self.axes) > 1 else self.axes[0]

    def __exit__(self, *exc):
        if exc[0] is None:
            OUT.mkdir(parents=True, exist_ok=True)
            self.fig.tight_layout()
            self.fig.savefig(self.path, dpi=120)
        plt.close(self.fig)
        return False


async def replay(dut, cycles, name):
    """Drive ``cycles`` into ``dut`` and compare its outputs cycle by cycle.

    Each cycle is ``(inputs, expected)``: port name -> integer value to drive, and port name ->
    integer value the golden model produced in that cycle (ports absent from ``expected`` are not
    compared in that cycle), or ``(value, mask)``: only the bits of ``mask`` are compared (don't-care
    bytes of a beat). Fails on the first difference, naming the cycle. Returns the simulation time
    (ns) of each cycle's clock edge.
    """
    from cocotb.triggers import RisingEdge

    from testbenches import tb

    tb.start_clock(dut)
    for port in cycles[0][0]:
        getattr(dut, port).value = 0
    await tb.reset(dut, 3)
    edge = RisingEdge(dut.clk)
    handles, times = {}, []
    for cycle, (inputs, expected) in enumerate(cycles):
        for port, value in inputs.items():
            getattr(dut, port).value = value
        await edge
        times.append(tb.now())
        for port, value in expected.items():
            if port not in handles:
                handles[port] = getattr(dut, port)
            actual = int(handles[port].value)
            if isinstance(value, tuple):
                value, mask = value
                actual &= mask
            assert actual == value, f"{name}: cycle {cycle}: {port} = {actual:#x}, model {value:#x}"
    return times

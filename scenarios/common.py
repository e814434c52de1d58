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


async def replay(dut, lockstep, records, name):
    """Drive the inputs ``records`` (one dict a cycle, the model's inputs: port name -> value as the model
    took it, a payload dict or None; ``<port>__packet`` the whole packet of a first beat, for a model's
    ``LOOKAHEAD``) into ``dut`` after a reset, and compare every cycle through ``lockstep`` (the
    Component's golden model, fresh): the RTL must make the decisions the scenario's model loop made.
    Fails on the first difference, naming the cycle. Returns the simulation time (ns) of each cycle's
    clock edge."""
    from cocotb.triggers import RisingEdge

    from testbenches import tb
    from testbenches.layouts import pack

    tb.start_clock(dut)
    inputs = lockstep.ports.inputs
    for port in inputs:
        getattr(dut, port).value = 0
    await tb.reset(dut, 3)
    lockstep.reset()
    edge, handles, times = RisingEdge(dut.clk), {port: getattr(dut, port) for port in lockstep.ports.names()}, []
    for cycle, record in enumerate(records):
        for port, layout in inputs.items():
            value = record.get(port)
            handles[port].value = 0 if value is None else pack(layout, value)
        await edge
        times.append(tb.now())
        lockstep.cycle(tb.PortValues(handles), lambda port: record[f"{port}__packet"], where=f"{name}: cycle {cycle}")
    return times

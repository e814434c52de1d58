"""Shared output of the system scenarios: a CSV, a PNG and a summary per run in ``build/scenarios`` (or the
directory a command names), and the RTL replay of a recorded run."""
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)

OUT = Path(__file__).resolve().parents[1] / "build" / "scenarios"

__all__ = ["OUT", "write_csv", "write_summary", "figure", "plt", "replay"]


def write_csv(name, header, rows, out=OUT):
    """Write ``rows`` under ``header`` to ``<out>/<name>.csv``; return the path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.csv"
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_summary(name, lines, out=OUT):
    """Write the run's summary (``lines``) to ``<out>/<name>.txt``, print it; return the path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.txt"
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return path


class figure:
    """``with figure(name, cols, seed=S) as axes:`` draws into ``cols`` side-by-side axes, saved as
    ``<out>/<name>.png`` on exit, titled with the scenario and the seed of its run."""

    def __init__(self, name, cols=1, width=6.0, height=4.0, seed=None, out=OUT):
        self.out = Path(out)
        self.path = self.out / f"{name}.png"
        self.fig, axes = plt.subplots(1, cols, figsize=(width * cols, height), squeeze=False)
        self.axes = list(axes[0])
        if seed is not None:
            self.fig.suptitle(f"scenario {name}, seed {seed} (INNET_SEED={seed} replays it)", fontsize="medium")

    def __enter__(self):
        return self.axes if len(self.axes) > 1 else self.axes[0]

    def __exit__(self, *exc):
        if exc[0] is None:
            self.out.mkdir(parents=True, exist_ok=True)
            self.fig.tight_layout()
            self.fig.savefig(self.path, dpi=120)
        plt.close(self.fig)
        return False


async def replay(dut, lockstep, records, name):
    """Drive the inputs ``records`` (one dict a cycle, the model's inputs: port name -> value as the model
    took it, a payload dict or None; ``<port>__packet`` the whole packet of a first beat on a model's
    ``LOOKAHEAD`` port) into ``dut`` after a reset, and compare every cycle through
    ``lockstep`` (the Component's golden model, fresh): the RTL must make the decisions the scenario's
    model loop made. Fails on the first difference, naming the cycle. Returns the simulation time (ns)
    of each cycle's clock edge."""
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
        lockstep.cycle(tb.PortValues(handles), lambda port, r=record: r[f"{port}__packet"],
                       where=f"{name}: cycle {cycle}")
    return times

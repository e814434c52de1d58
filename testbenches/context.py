"""The run context of a cocotb test: its parameters, seed, run directory and summary, the simulation time,
the clock and reset, and pcaps stamped in simulation time (so a frame in Wireshark matches a cycle)."""
import collections
import importlib
import json
import logging
import os
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge
from cocotb.utils import get_sim_time
from scapy.data import DLT_EN10MB
from scapy.utils import RawPcapWriter

__all__ = ["Frame", "log", "params", "run_dir", "current_test", "seed", "now", "summary", "write_pcap",
           "start_clock", "reset"]

log = logging.getLogger("cocotb.innet")

#: A packet seen on an interface: simulation time (ns) of its first beat, bytes, sideband.
Frame = collections.namedtuple("Frame", "time data meta", defaults=(None,))


def params():
    """Parameters object of the Component under test in this run (set by the runner); a dict for
    wrappers built from keyword arguments."""
    spec = json.loads(os.environ.get("INNET_PARAMS", '{"class": null, "values": {}}'))
    if spec["class"] is None:
        return spec["values"]
    module, name = spec["class"].split(":")
    return getattr(importlib.import_module(module), name).from_dict(spec["values"])


def run_dir():
    """Directory of this test's artefacts (waveform, pcaps, summary); in a batch of tests sharing one
    simulation (``INNET_BATCH``), the running test's directory under ``INNET_RUN_DIR``."""
    path = Path(os.environ.get("INNET_RUN_DIR", "."))
    if os.environ.get("INNET_BATCH"):
        path /= current_test()
    path.mkdir(parents=True, exist_ok=True)
    return path


def current_test():
    """The name of the cocotb test running now (cocotb 2.1 keeps it in its regression manager)."""
    from cocotb import regression
    return regression._manager_inst._test.name


def seed():
    """The run's traffic seed: ``COCOTB_RANDOM_SEED`` as the runner passed it (``INNET_SEED``, or the
    seed drawn once for the pytest run), which cocotb also records in ``results.xml``."""
    value = int(os.environ.get("COCOTB_RANDOM_SEED") or cocotb.RANDOM_SEED)
    log.info("traffic seed %d (replay with INNET_SEED=%d)", value, value)
    return value


def now():
    """Current simulation time in ns."""
    return round(get_sim_time("ns"))


def summary(**fields):
    """Merge ``fields`` into this test's ``summary.json``; ``pcaps`` entries are appended to its
    artefacts. The runner adds block, parameters, test, seed, cycles, log and waveform."""
    path = run_dir() / "summary.json"
    record = json.loads(path.read_text()) if path.exists() else {}
    for pcap in fields.pop("pcaps", ()):
        pcaps = record.setdefault("artefacts", {}).setdefault("pcaps", [])
        if str(pcap) not in pcaps:
            pcaps.append(str(pcap))
    record.update(fields)
    path.write_text(json.dumps(record, indent=1))


def write_pcap(name, packets):
    """Write ``packets`` to ``<run dir>/<name>.pcap`` (nanosecond pcap) and list it in the summary.

    Each packet is a ``Frame`` (stamped with its simulation time) or bytes / scapy (stamped now).
    """
    path = run_dir() / f"{name}.pcap"
    with RawPcapWriter(str(path), linktype=DLT_EN10MB, nano=True, sync=False) as out:
        out.write_header(None)
        for p in packets:       # raw frames: truncated ones are written as they were
            time, raw = (p.time, p.data) if isinstance(p, Frame) else (now(), p)
            out.write_packet(bytes(raw), sec=time // 10**9, usec=time % 10**9)
    summary(pcaps=[path])
    return path


def start_clock(dut, period_ns=2):
    """Start the ``clk`` of ``dut``."""
    Clock(dut.clk, period_ns, unit="ns").start()


async def reset(dut, cycles=2):
    """Hold ``rst`` high for ``cycles`` rising edges (the drivers drop their state on their own)."""
    dut.rst.value = 1
    for _ in range(cycles):
        await RisingEdge(dut.clk)
    dut.rst.value = 0

"""Reusable cocotb testbench pieces: stream and packet Source/Sink, Scoreboard, clock/reset, run files.

The drivers follow cocotbext-axi: a coroutine per interface wakes on each rising edge, samples the
handshake that happened at that edge, then drives the next beat. Payloads are packed and unpacked
with the Amaranth layout of the port, so the Python side always agrees with the RTL's bit layout.
With ``layout=None`` a stream carries raw payload integers (no packing). Backpressure and idle
cycles come from pause generators (iterators of bools, e.g.
``itertools.cycle([0, 1, 1])``): a true value pauses the interface for that cycle.
"""
import collections
import importlib
import json
import logging
import os
import random
from pathlib import Path

import cocotb
from amaranth.hdl import Shape
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import Event, RisingEdge
from scapy.data import DLT_EN10MB
from scapy.layers.l2 import Ether
from scapy.utils import PcapWriter

from models.packet import beats_of

__all__ = [
    "pack", "unpack", "StreamSource", "StreamSink", "PacketSource", "PacketSink", "Scoreboard",
    "start_clock", "reset", "params", "run_dir", "seed", "write_pcap",
]

log = logging.getLogger("cocotb.innet")


# --- Amaranth layouts <-> Python values ----------------------------------------------------------

def pack(layout, value):
    """Pack a (nested) dict / list / int ``value`` into the integer of ``layout``'s bits."""
    if isinstance(layout, data.StructLayout):
        word = 0
        for name, field in layout:
            word |= pack(field.shape, value.get(name, 0)) << field.offset
        return word
    if isinstance(layout, data.ArrayLayout):
        width = Shape.cast(layout.elem_shape).width
        return sum(pack(layout.elem_shape, v) << (i * width) for i, v in enumerate(value))
    width = Shape.cast(layout).width
    return int(value) & ((1 << width) - 1)


def unpack(layout, word):
    """Unpack the integer ``word`` into a (nested) dict / list / int following ``layout``."""
    if isinstance(layout, data.StructLayout):
        return {name: unpack(field.shape, word >> field.offset) for name, field in layout}
    if isinstance(layout, data.ArrayLayout):
        width = Shape.cast(layout.elem_shape).width
        return [unpack(layout.elem_shape, word >> (i * width)) for i in range(layout.length)]
    shape = Shape.cast(layout)
    value = word & ((1 << shape.width) - 1)
    if shape.signed and value >> (shape.width - 1):
        value -= 1 << shape.width
    return value


# --- Run context -------------------------------------------------------------------------------

def params():
    """Parameters object of the Component under test in this run (set by the runner); a dict for
    wrappers built from keyword arguments."""
    spec = json.loads(os.environ.get("INNET_PARAMS", '{"class": null, "values": {}}'))
    if spec["class"] is None:
        return spec["values"]
    module, name = spec["class"].split(":")
    return getattr(importlib.import_module(module), name).from_dict(spec["values"])


def run_dir():
    """Directory of this test's artefacts (waveform, pcaps)."""
    path = Path(os.environ.get("INNET_RUN_DIR", "."))
    path.mkdir(parents=True, exist_ok=True)
    return path


def seed():
    """Seed for this test's random traffic: ``INNET_SEED`` if set, else fresh; always logged."""
    value = int(os.environ.get("INNET_SEED") or random.SystemRandom().randrange(1 << 32))
    log.info("random seed %d (reproduce with INNET_SEED=%d)", value, value)
    return value


def write_pcap(name, packets):
    """Write ``packets`` (bytes or scapy) to ``<run dir>/<name>.pcap`` for Wireshark."""
    path = run_dir() / f"{name}.pcap"
    with PcapWriter(str(path), linktype=DLT_EN10MB, sync=False) as out:
        for p in packets:       # raw frames: truncated ones are written as they were
            out.write(bytes(p))
    return path


def start_clock(dut, period_ns=2):
    """Start the ``clk`` of ``dut``."""
    Clock(dut.clk, period_ns, unit="ns").start()


async def reset(dut, cycles=2):
    """Hold ``rst`` high for ``cycles`` rising edges."""
    dut.rst.value = 1
    for _ in range(cycles):
        await RisingEdge(dut.clk)
    dut.rst.value = 0


# --- Streams -----------------------------------------------------------------------------------

class _Stream:
    def __init__(self, dut, name, layout):
        self.edge = RisingEdge(dut.clk)
        self.layout = layout
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.payload = getattr(dut, f"{name}__payload")
        self.queue = collections.deque()
        self.pause = None
        self.active = Event()

    def set_pause_generator(self, generator=None):
        """Pause the interface on the cycles where ``generator`` yields a true value."""
        self.pause = iter(generator) if generator is not None else None

    def _paused(self):
        return self.pause is not None and bool(next(self.pause))

    def __len__(self):
        return len(self.queue)

    def empty(self):
        return not self.queue

    def clear(self):
        self.queue.clear()


class StreamSource(_Stream):
    """Drives ``<name>__valid``/``__payload`` from a queue of dicts and counts transfers."""

    def __init__(self, dut, name, layout):
        super().__init__(dut, name, layout)
        self.sent = 0
        self.driving = False
        self.valid.value = 0
        self.idle = Event()
        self.idle.set()
        cocotb.start_soon(self._run())

    def send_nowait(self, item):
        self.queue.append(item)
        self.idle.clear()

    async def send(self, item):
        self.send_nowait(item)

    async def wait_idle(self):
        """Wait until every queued item has been transferred."""
        await self.idle.wait()

    def clear(self):
        """Drop everything queued and release ``valid`` (e.g. when the DUT is reset)."""
        super().clear()
        self.driving = False
        self.valid.value = 0
        self.idle.set()

    async def _run(self):
        while True:
            await self.edge
            if self.driving and self.ready.value:
                self.queue.popleft()
                self.sent += 1
                self.driving = False
            if not self.driving and not self.queue:
                self.idle.set()
            if not self.driving and self.queue and not self._paused():
                item = self.queue[0]
                self.payload.value = item if self.layout is None else pack(self.layout, item)
                self.driving = True
            self.valid.value = int(self.driving)


class StreamSink(_Stream):
    """Drives ``<name>__ready`` and collects transferred payloads as dicts."""

    def __init__(self, dut, name, layout):
        super().__init__(dut, name, layout)
        self.ready.value = 0
        cocotb.start_soon(self._run())

    async def recv(self):
        while not self.queue:
            self.active.clear()
            await self.active.wait()
        return self.queue.popleft()

    def _accept(self, item):
        self.queue.append(item)
        self.active.set()

    async def _run(self):
        while True:
            await self.edge
            if self.ready.value and self.valid.value:
                word = self.payload.value.to_unsigned()
                self._accept(word if self.layout is None else unpack(self.layout, word))
            self.ready.value = int(not self._paused())


class PacketSource(StreamSource):
    """Sends whole packets (bytes or scapy) as beats of a ``hdl.packet.beat_layout`` stream."""

    def __init__(self, dut, name, layout):
        super().__init__(dut, name, layout)
        self.width = Shape.cast(layout["keep"].shape).width

    def send_nowait(self, packet, meta=None):
        raw = bytes(packet)
        assert raw, "a packet has at least one byte"
        for beat in beats_of(raw, meta or {}, self.width):
            super().send_nowait(beat)


class PacketSink(StreamSink):
    """Reassembles beats of a ``hdl.packet.beat_layout`` stream into ``(bytes, meta)`` packets."""

    def __init__(self, dut, name, layout):
        super().__init__(dut, name, layout)
        self.width = Shape.cast(layout["keep"].shape).width
        self.partial = bytearray()

    def _accept(self, beat):
        keep = beat["keep"]
        length = keep.bit_length()
        assert keep == (1 << length) - 1, f"keep {keep:#x} is not contiguous from byte 0"
        assert beat["first"] == (not self.partial), "first flag does not match packet boundary"
        assert beat["last"] or length == self.width, "a beat before the last is not full"
        self.partial += beat["data"].to_bytes(self.width, "little")[:length]
        if beat["last"]:
            super()._accept((bytes(self.partial), beat["meta"]))
            self.partial = bytearray()

    def clear(self):
        super().clear()
        self.partial = bytearray()


# --- Checking ----------------------------------------------------------------------------------

def _describe(item):
    if isinstance(item, (bytes, bytearray)):
        return f"{len(item)} bytes: {Ether(item).summary()}"
    if isinstance(item, tuple) and item and isinstance(item[0], (bytes, bytearray)):
        return f"({_describe(item[0])}, {item[1:]})"
    return repr(item)


def _first_difference(expected, actual):
    if isinstance(expected, tuple) and isinstance(actual, tuple) and expected and actual:
        expected, actual = expected[0], actual[0]
    if isinstance(expected, (bytes, bytearray)) and isinstance(actual, (bytes, bytearray)):
        for offset, (e, a) in enumerate(zip(expected, actual)):
            if e != a:
                return f"first differing byte at offset {offset}: expected {e:#04x}, got {a:#04x}"
        return f"lengths differ: expected {len(expected)}, got {len(actual)}"
    return ""


class Scoreboard:
    """In-order checker: ``expect`` golden-model items, ``check`` RTL items against them."""

    def __init__(self, name):
        self.name = name
        self.expected = collections.deque()
        self.matched = 0

    def expect(self, item):
        self.expected.append(item)

    def check(self, actual):
        assert self.expected, f"{self.name}: RTL produced {_describe(actual)} the model did not expect"
        expected = self.expected.popleft()
        if expected != actual:
            raise AssertionError(
                f"{self.name}: item {self.matched} differs from the golden model\n"
                f"  expected {_describe(expected)}\n  actual   {_describe(actual)}\n  "
                + _first_difference(expected, actual))
        self.matched += 1

    def check_done(self):
        assert not self.expected, (
            f"{self.name}: {len(self.expected)} expected items never came out of the RTL, "
            f"next: {_describe(self.expected[0])}")
        log.info("%s: %d items matched the golden model", self.name, self.matched)

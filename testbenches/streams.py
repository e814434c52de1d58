"""Stream and packet drivers of a cocotb testbench, after cocotbext-axi.

A coroutine per interface wakes on each rising edge, samples the handshake that happened at that edge,
then drives the next beat. The drivers follow the DUT's ``rst`` themselves (a coroutine per driver
watches it, as cocotbext-axi's ``_handle_reset``): when ``rst`` rises a source drops its queue and
releases ``valid``, a sink drops a partial packet; while it is high nothing is transferred. Payloads
are packed and unpacked with the Amaranth layout of the port (``testbenches/layouts.py``); with
``layout=None`` a stream carries raw payload integers. Backpressure and idle cycles come from pause
generators (iterators of bools, e.g. ``itertools.cycle([0, 1, 1])``): a true value pauses the interface
for that cycle. Packet drivers log every packet with the simulation time (ns) of its first beat's
transfer; the pcaps carry these times, so a frame in Wireshark matches a cycle in the waveform.
"""
import collections

import cocotb
from amaranth.hdl import Shape
from cocotb.triggers import Event, RisingEdge

from models.packet import beats_of
from testbenches.context import Frame, now
from testbenches.layouts import pack, unpack

__all__ = ["StreamSource", "StreamSink", "PacketSource", "PacketSink", "HANG_CYCLES"]


class _Stream:
    def __init__(self, dut, name, layout):
        self.edge = RisingEdge(dut.clk)
        self.rst = getattr(dut, "rst", None)
        self.name, self.layout = name, layout
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.payload = getattr(dut, f"{name}__payload")
        self.queue = collections.deque()
        self.pause = None
        self.active = Event()
        if self.rst is not None:
            cocotb.start_soon(self._follow_reset())

    async def _follow_reset(self):
        while True:
            await RisingEdge(self.rst)
            self._reset()

    def _reset(self):
        """Drop what a reset loses."""

    def set_pause_generator(self, generator=None):
        """Pause the interface on the cycles where ``generator`` yields a true value."""
        self.pause = iter(generator) if generator is not None else None

    def _paused(self):
        return self.pause is not None and bool(next(self.pause))

    def _in_reset(self):
        return self.rst is not None and bool(self.rst.value)

    def __len__(self):
        return len(self.queue)

    def empty(self):
        return not self.queue

    def clear(self):
        self.queue.clear()


#: Cycles an offered item may wait for ``ready`` before its source calls the DUT hung (no test holds
#: a stream anywhere near this long; a design that never takes an item fails the test, not the timeout).
HANG_CYCLES = 100_000


class StreamSource(_Stream):
    """Drives ``<name>__valid``/``__payload`` from a queue of dicts and counts transfers; drops its
    queue and releases ``valid`` while the DUT is in reset; fails the test when an offered item waits
    ``HANG_CYCLES`` cycles for ``ready``."""

    def __init__(self, dut, name, layout):
        super().__init__(dut, name, layout)
        self.sent = 0
        self.waited = 0
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
        """Wait until every queued item has been transferred (or dropped by a reset)."""
        await self.idle.wait()

    def clear(self):
        """Drop everything queued and release ``valid``."""
        super().clear()
        self.driving = False
        self.waited = 0
        self.valid.value = 0
        self.idle.set()

    def _reset(self):
        self.clear()

    def _transferred(self, item):
        self.sent += 1

    async def _run(self):
        while True:
            await self.edge
            if self._in_reset():
                continue
            if self.driving and self.ready.value:
                self._transferred(self.queue.popleft())
                self.driving = False
                self.waited = 0
            elif self.driving:
                self.waited += 1
                if self.waited >= HANG_CYCLES:
                    raise AssertionError(f"{self.name}: ready stayed low for {HANG_CYCLES} cycles with an item "
                                         "offered (the DUT never takes it)")
            if not self.driving and not self.queue:
                self.idle.set()
            if not self.driving and self.queue and not self._paused():
                item = self.queue[0]
                self.payload.value = item if self.layout is None else pack(self.layout, item)
                self.driving = True
            self.valid.value = int(self.driving)


class StreamSink(_Stream):
    """Drives ``<name>__ready`` and collects transferred payloads as dicts (none while in reset)."""

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
            if self.ready.value and self.valid.value and not self._in_reset():
                word = self.payload.value.to_unsigned()
                self._accept(word if self.layout is None else unpack(self.layout, word))
            self.ready.value = int(not self._paused())


class PacketSource(StreamSource):
    """Sends whole packets (bytes or scapy) as beats of a ``hdl.packet.beat_layout`` stream; ``log``
    holds a ``Frame`` per packet that went in entirely."""

    def __init__(self, dut, name, layout):
        super().__init__(dut, name, layout)
        self.width = Shape.cast(layout["keep"].shape).width
        self.packets = collections.deque()      # (bytes, meta) of the queued packets, in order
        self.start = None
        self.log = []

    def send_nowait(self, packet, meta=None):
        raw = bytes(packet)
        assert raw, "a packet has at least one byte"
        self.packets.append((raw, meta or {}))
        for beat in beats_of(raw, meta or {}, self.width):
            super().send_nowait(beat)

    def clear(self):
        super().clear()
        self.packets.clear()

    def _transferred(self, beat):
        super()._transferred(beat)
        if beat["first"]:
            self.start = now()
        if beat["last"]:
            raw, meta = self.packets.popleft()
            self.log.append(Frame(self.start, raw, meta))


class PacketSink(StreamSink):
    """Reassembles beats of a ``hdl.packet.beat_layout`` stream into ``(bytes, meta)`` packets (in
    ``queue``, for the test) and ``Frame`` records (in ``log``, kept for the pcap); a reset drops a
    partial packet."""

    def __init__(self, dut, name, layout):
        super().__init__(dut, name, layout)
        self.width = Shape.cast(layout["keep"].shape).width
        self.partial = bytearray()
        self.start = None
        self.log = []

    def _accept(self, beat):
        keep = beat["keep"]
        length = keep.bit_length()
        assert keep == (1 << length) - 1, f"keep {keep:#x} is not contiguous from byte 0"
        assert beat["first"] == (not self.partial), "first flag does not match packet boundary"
        assert beat["last"] or length == self.width, "a beat before the last is not full"
        if beat["first"]:
            self.start = now()
        self.partial += beat["data"].to_bytes(self.width, "little")[:length]
        if beat["last"]:
            raw = bytes(self.partial)
            self.log.append(Frame(self.start, raw, beat["meta"]))
            super()._accept((raw, beat["meta"]))
            self.partial = bytearray()

    def _reset(self):
        self.partial = bytearray()

    def clear(self):
        super().clear()
        self._reset()

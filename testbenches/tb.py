"""Reusable cocotb testbench pieces: the block testbench base, stream and packet drivers, Scoreboard,
the run context (parameters, seed, run directory, summary) and pcaps in simulation time.

The drivers follow cocotbext-axi: a coroutine per interface wakes on each rising edge, samples the
handshake that happened at that edge, then drives the next beat. They follow the DUT's ``rst``
themselves (a coroutine per driver watches it, as cocotbext-axi's ``_handle_reset``): when ``rst``
rises a source drops its queue and releases ``valid``, a sink drops a partial packet; while it is
high nothing is transferred. Payloads are packed and unpacked with the Amaranth layout of the port, so the
Python side always agrees with the RTL's bit layout. With ``layout=None`` a stream carries raw
payload integers (no packing). Backpressure and idle cycles come from pause generators (iterators
of bools, e.g. ``itertools.cycle([0, 1, 1])``): a true value pauses the interface for that cycle.
Packet drivers log every packet with the simulation time (ns) of its first beat's transfer; the
pcaps carry these times, so a frame in Wireshark matches a cycle in the waveform.
"""
import collections
import functools
import importlib
import json
import logging
import os
from pathlib import Path

import cocotb
from amaranth.hdl import Shape
from amaranth.lib import data
from cocotb.clock import Clock
from cocotb.triggers import Event, ReadWrite, RisingEdge
from cocotb.utils import get_sim_time
from cocotb_coverage.coverage import CoverCross, CoverPoint, coverage_db
from scapy.data import DLT_EN10MB
from scapy.layers.l2 import Ether
from scapy.utils import RawPcapWriter

import registry
from models.contract import Packet
from models.packet import beats_of
from testbenches.lockstep import Lockstep

__all__ = [
    "pack", "unpack", "Frame", "StreamSource", "StreamSink", "PacketSource", "PacketSink", "Scoreboard",
    "BlockTB", "PortValues", "follow", "start_clock", "reset", "params", "run_dir", "seed", "now", "summary",
    "write_pcap",
]

log = logging.getLogger("cocotb.innet")

#: A packet seen on an interface: simulation time (ns) of its first beat, bytes, sideband.
Frame = collections.namedtuple("Frame", "time data meta", defaults=(None,))


# --- Amaranth layouts <-> Python values ----------------------------------------------------------

def pack(layout, value):
    """Pack a (nested) dict / list / int ``value`` into the integer of ``layout``'s bits."""
    return _packer(layout)(value)


@functools.lru_cache(maxsize=None)
def _packer(layout):
    """``pack`` for one layout, its offsets and widths worked out once (the checked engine and the
    soak pack ~10^5 beats a run)."""
    if isinstance(layout, data.StructLayout):
        fields = [(name, _packer(field.shape), field.offset) for name, field in layout]

        def struct(value):
            word = 0
            for name, inner, offset in fields:
                if name in value:
                    word |= inner(value[name]) << offset
            return word
        return struct
    if isinstance(layout, data.ArrayLayout):
        width, inner = Shape.cast(layout.elem_shape).width, _packer(layout.elem_shape)
        return lambda value: sum(inner(v) << (i * width) for i, v in enumerate(value))
    mask = (1 << Shape.cast(layout).width) - 1
    return lambda value: int(value) & mask


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


class Coverage:
    """Functional coverage of one test with cocotb-coverage, under the block's name.

    Declare ``point(name, bins)`` and ``cross(name, *points, unreachable={bin: reason})`` once, then
    ``sample(**values)`` (a value missing or outside a point's bins hits nothing). A cross bin that
    cannot happen is declared ``unreachable`` with the reason (cocotb-coverage ignores it; the report
    prints the reason). ``write()`` saves the hits to ``functional.json`` in the test directory, which
    ``make coverage`` merges per block.
    """

    def __init__(self, block):
        self.block, self.order, self.reasons, self._sample = block, [], {}, None

    def point(self, name, bins):
        self.order.append(CoverPoint(f"{self.block}.{name}", xf=lambda v, n=name: v.get(n), bins=list(bins)))

    def cross(self, name, *points, unreachable=None):
        unreachable = unreachable or {}
        self.reasons[name] = {str(b): reason for b, reason in unreachable.items()}
        self.order.append(CoverCross(f"{self.block}.{name}", items=[f"{self.block}.{p}" for p in points],
                                     ign_bins=list(unreachable)))

    def sample(self, **values):
        if self._sample is None:
            def sample(values):
                pass
            # cocotb-coverage samples an item before calling what it wraps, and a cross reads its points'
            # hits of the current call: wrap in reverse so the points (declared first) run first
            for item in reversed(self.order):
                sample = item(sample)
            self._sample = sample
        self._sample(values)

    def write(self):
        """Hits per bin of every point and cross; unreachable bins with their reasons."""
        items = {}
        for name, item in coverage_db.items():
            if not name.startswith(f"{self.block}."):
                continue
            short = name.split(".", 1)[1]
            items[short] = {"bins": {str(b): n for b, n in item.detailed_coverage.items()},
                            "unreachable": self.reasons.get(short, {})}
        (run_dir() / "functional.json").write_text(json.dumps({"block": self.block, "items": items}, indent=1))


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


# --- Streams -----------------------------------------------------------------------------------

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


# --- Block testbench base ----------------------------------------------------------------------

class PortValues(dict):
    """The integer value of each port in the cycle that just ended, read from the simulator when first
    asked for (a port the model does not name this cycle is never read)."""

    def __init__(self, handles):
        super().__init__()
        self.handles = handles

    def __missing__(self, name):
        value = self[name] = int(self.handles[name].value)
        return value


async def follow(scope, lockstep, clk, in_reset, packets=None, before=None, after=None):
    """Run ``lockstep`` beside the Component whose ports are the handles of ``scope`` (the DUT, or a
    wrapper's submodule such as ``AxiStream``'s ``dut.block``): from the first cycle after a reset,
    every rising edge of ``clk`` compares the cycle that just ended (``in_reset()``: nothing compared,
    the model reset once it ends). ``packets(port)``: the whole packet of a first beat (a model's
    ``LOOKAHEAD``); ``before(values)`` / ``after(values)``: called around the model's step."""
    handles = {name: getattr(scope, name) for name in lockstep.ports.names()}
    after_reset = False
    while True:
        await RisingEdge(clk)
        if in_reset():
            after_reset = True
            continue
        if after_reset:
            lockstep.reset()
            after_reset = False
        values = PortValues(handles)
        if before:
            before(values)
        lockstep.cycle(values, packets, where=f"cycle {lockstep.cycles}")
        if after:
            after(values)


class BlockTB:
    """Base of a block's testbench: clock, reset, the golden model in lockstep, drivers, counters,
    conservation, pcaps.

    A subclass sets ``name`` (the block's registry name) and creates the drivers it needs with
    ``packet_source``, ``stream_source``, ``packet_sink`` and ``stream_sink`` (each takes the port's own
    layout from the Component). ``params`` is the run's parameters object, ``block`` the Component built
    from it, ``model`` the block's golden model (the registry's, or the one given) and ``lockstep`` the
    two side by side (``testbenches/lockstep.py``): from the first cycle after a reset, every cycle of
    the RTL is compared with the model (a cycle model: every port it names; a transaction model: every
    output transfer). ``sample(values)`` is called each cycle before the model's step, with the ports'
    values (``PortValues``), and ``sampled(values)`` after it: a testbench's functional coverage and
    bookkeeping (what a cycle met, what it decided). A testbench that reads the model's state to choose
    its next stimulus waits with ``edge()``. While ``resetting`` is true nothing is compared; ``cycle``
    counts the compared cycles since the last reset.
    """

    name = None
    period_ns = 2

    def __init__(self, dut, model=None):
        self.dut = dut
        self.params = params()
        entry = registry.block(self.name)
        self.block = entry.interface(self.params)
        self.model = model if model is not None else entry.model(self.params)
        self.lockstep = Lockstep(self.block, self.model)
        self.resetting = False
        self.muted = False          # outputs are discarded while a reset lands mid-traffic
        self.source = self.sink = None
        self.drivers = {}
        start_clock(dut, self.period_ns)
        cocotb.start_soon(follow(dut, self.lockstep, dut.clk, self.in_reset, self._lookahead, self.sample,
                                 self.sampled))

    @property
    def cycle(self):
        return self.lockstep.cycles

    def _layout(self, port):
        return self.lockstep.ports.by_name[port].layout

    def _driver(self, kind, port):
        driver = self.drivers[port] = kind(self.dut, port, self._layout(port))
        return driver

    def packet_source(self, port="i"):
        return self._driver(PacketSource, port)

    def stream_source(self, port):
        return self._driver(StreamSource, port)

    def packet_sink(self, port="o"):
        return self._driver(PacketSink, port)

    def stream_sink(self, port):
        return self._driver(StreamSink, port)

    def _lookahead(self, port):
        """The whole packet whose first beat is on ``port`` now (a model's ``LOOKAHEAD``)."""
        raw, meta = self.drivers[port].packets[0]
        return Packet(raw, meta)

    def sample(self, values):
        """Functional coverage of one cycle, before the model's step (a testbench may override it)."""

    def sampled(self, values):
        """The same cycle after the model's step (a testbench may override it): what the model decided
        in it (its state after the edge, its counters)."""

    async def edge(self):
        """The next rising edge, once the lockstep has stepped the model on it (the tasks one edge wakes
        run in the order they began waiting: a testbench's own ``RisingEdge`` may come first)."""
        await RisingEdge(self.dut.clk)
        await ReadWrite()

    def in_reset(self):
        """True while ``reset`` runs or the DUT's ``rst`` is high."""
        return self.resetting or bool(self.dut.rst.value)

    async def reset(self, cycles=3):
        """Hold ``rst`` for ``cycles`` edges; the drivers drop their queued and partial packets, the
        model starts again."""
        self.resetting = True
        await reset(self.dut, cycles)
        self.lockstep.reset()
        self.resetting = False

    async def reset_mid_traffic(self, landing, cycles=2):
        """Reset once the source has sent ``landing`` beats with more still queued: outputs seen
        meanwhile are discarded (``muted``), the sink is cleared, the model starts again; afterwards
        every counter reads 0."""
        while self.source.sent < landing:
            await RisingEdge(self.dut.clk)
        assert self.source.queue, "the reset lands mid-traffic"
        self.muted = True
        await self.reset(cycles)
        self.sink.clear()
        self.muted = False
        assert not any(self.counters().values()), f"counters cleared by reset: {self.counters()}"

    def counters(self):
        """The DUT's counter ports (those the model counts), by name."""
        return {name: int(getattr(self.dut, name).value) for name in self.model.counters()}

    def check_counters(self, expected=None):
        """The DUT's counters equal ``expected`` (default: the model's); recorded in the summary; returned."""
        got, expected = self.counters(), dict(self.model.counters() if expected is None else expected)
        if got != expected:
            differ = {k: (got.get(k), expected.get(k)) for k in {**got, **expected} if got.get(k) != expected.get(k)}
            raise AssertionError(f"counters: RTL {got}, model {expected}; differing (RTL, model): {differ}")
        summary(counters=got)
        return got

    def check_done(self):
        """Every output the model expects came out of the RTL (a transaction model)."""
        self.lockstep.done()

    @staticmethod
    def conserved(what, total, **parts):
        """Conservation: ``total`` equals the sum of the named ``parts``."""
        if total != sum(parts.values()):
            terms = " + ".join(f"{k} {v}" for k, v in parts.items())
            raise AssertionError(f"conservation of {what}: {total} != {terms} = {sum(parts.values())}")

    def write_pcaps(self, inputs=None, outputs=None):
        """``in.pcap`` and ``out.pcap``: by default the packets the source transferred and those the
        sink captured from the RTL, at their simulation times."""
        write_pcap("in", self.source.log if inputs is None else inputs)
        write_pcap("out", self.sink.log if outputs is None else outputs)


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

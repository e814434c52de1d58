"""The spill link: the delay line under Verilator in lockstep with its model; the encapsulator and the
decapsulator in Amaranth's simulator, frame for frame against ``spill_frame``."""
import itertools
import random

import cocotb
import pytest
from amaranth.sim import Simulator
from cocotb.triggers import RisingEdge

from hdl.spillway.link import Decapsulator, DelayLine, Encapsulator
from models.headers import drain_request, roce_packet, spill_frame
from models.packet import beats_of
from models.spillway.params import LinkParams
from testbenches import runner, tb


class TB(tb.BlockTB):
    """Frames into a ``DelayLine``, ``pause`` at random; the lockstep compares ``i.ready`` and ``o`` every cycle."""

    name = "spillway.link"

    def __init__(self, dut, pause=0.0):
        super().__init__(dut)
        self.source = self.packet_source("i")
        self.sink = self.packet_sink("o")
        self.pause, self.rng = pause, random.Random(tb.seed() + 1)
        dut.pause.value = 0
        cocotb.start_soon(self._pauses())

    async def _pauses(self):
        while True:
            await RisingEdge(self.dut.clk)
            self.dut.pause.value = int(self.rng.random() < self.pause)


def frames(rng, count):
    """DATA frames of several beats and one-beat DRAIN requests."""
    return [bytes(spill_frame(roce_packet(psn=n, payload=bytes(rng.choice([0, 40, 200]))), port=n % 4, seq=n))
            if rng.random() < 0.7 else bytes(drain_request(n % 4, 1)) for n in range(count)]


@cocotb.test()
async def random_frames(dut):
    """Frames with idle input and pauses arrive unchanged, in order, each ``latency`` cycles after it left."""
    rng = random.Random(tb.seed())
    t = TB(dut, pause=0.2)
    t.source.set_pause_generator(rng.random() < 0.3 for _ in itertools.count())
    await t.reset()
    sent = frames(rng, 200)
    for frame in sent:
        t.source.send_nowait(frame)
    await t.source.wait_idle()
    for _ in range(t.block.latency + 2):
        await RisingEdge(dut.clk)
    assert [raw for raw, _ in t.sink.queue] == sent
    t.write_pcaps()


@cocotb.test()
async def line_rate(dut):
    """Without pauses a frame's beats cross back to back: the line takes one beat per cycle."""
    t = TB(dut)
    await t.reset()
    sent = frames(random.Random(tb.seed()), 50)
    for frame in sent:
        t.source.send_nowait(frame)
    beats = sum(len(beats_of(f, {}, t.block.params.data_bytes)) for f in sent)
    await t.source.wait_idle()
    assert t.source.sent == beats
    for _ in range(t.block.latency + 2):
        await RisingEdge(dut.clk)
    assert [raw for raw, _ in t.sink.queue] == sent


PARAMS = {"l1": LinkParams(latency=1, data_bytes=64), "l7w48": LinkParams(latency=7, data_bytes=48)}


@runner.parametrize(__name__, PARAMS)
def test_link(params, testcase, record_property):
    record_property("innet", runner.run(DelayLine, params, __name__, testcase))


@pytest.mark.parametrize("width", [64, 48])
def test_encapsulator(width):
    """Encapsulator in Amaranth's simulator: random packet lengths around the beat boundaries, idle
    input and back-pressure; every output frame equals ``spill_frame`` of the packet, byte for byte."""
    rng = random.Random(runner.traffic_seed())
    dut = Encapsulator(width)
    H = 22
    sizes = [1, width - H - 1, width - H, width - H + 1, width, width + 1, 2 * width - H, 2 * width - H + 1, 300]
    packets = [rng.randbytes(rng.choice(sizes)) for _ in range(60)]
    frames = [bytes(spill_frame(p, port=rng.randrange(4), flow=rng.randrange(1 << 16), seq=n))
              for n, p in enumerate(packets)]
    got = []

    async def bench(ctx):
        beats = [(frame[:H], b) for frame, p in zip(frames, packets) for b in beats_of(p, {}, width)]
        partial = bytearray()
        cycles = 0
        while len(got) < len(frames):
            cycles += 1
            assert cycles < 20000, "encapsulator stalled"
            offer = beats and rng.random() < 0.8
            if offer:
                hdr, b = beats[0]
                ctx.set(dut.hdr, int.from_bytes(hdr, "little"))
                ctx.set(dut.i.payload, b)
            ctx.set(dut.i.valid, bool(offer))
            ready = rng.random() < 0.7
            ctx.set(dut.o.ready, ready)
            if offer and ctx.get(dut.i.ready):
                beats.pop(0)
            if ctx.get(dut.o.valid) and ready:
                o = ctx.get(dut.o.payload)
                keep = int(o.keep)
                assert keep == (1 << keep.bit_length()) - 1 and keep
                assert bool(o.first) == (not partial)
                assert o.last or keep.bit_length() == width
                partial += int(o.data).to_bytes(width, "little")[:keep.bit_length()]
                if o.last:
                    got.append(bytes(partial))
                    partial = bytearray()
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == frames


@pytest.mark.parametrize("width", [64, 48])
def test_decapsulator(width):
    """Decapsulator in Amaranth's simulator: spill frames of inner lengths around the beat boundaries,
    idle input and back-pressure; every output packet equals the inner frame, byte for byte."""
    rng = random.Random(runner.traffic_seed())
    dut = Decapsulator(width)
    H = 22
    sizes = [1, H - 1, H, H + 1, width - H, width - H + 1, width, width + H, width + H + 1, 2 * width, 300]
    packets = [rng.randbytes(rng.choice(sizes)) for _ in range(60)]
    frames = [bytes(spill_frame(p, port=1, seq=n, op=2)) for n, p in enumerate(packets)]
    got = []

    async def bench(ctx):
        beats = [b for frame in frames for b in beats_of(frame, {}, width)]
        partial = bytearray()
        cycles = 0
        while len(got) < len(packets):
            cycles += 1
            assert cycles < 20000, "decapsulator stalled"
            offer = beats and rng.random() < 0.8
            if offer:
                ctx.set(dut.i.payload, beats[0])
            ctx.set(dut.i.valid, bool(offer))
            ready = rng.random() < 0.7
            ctx.set(dut.o.ready, ready)
            if offer and ctx.get(dut.i.ready):
                beats.pop(0)
            if ctx.get(dut.o.valid) and ready:
                o = ctx.get(dut.o.payload)
                keep = int(o.keep)
                assert keep == (1 << keep.bit_length()) - 1 and keep
                assert bool(o.first) == (not partial)
                assert o.last or keep.bit_length() == width
                partial += int(o.data).to_bytes(width, "little")[:keep.bit_length()]
                if o.last:
                    got.append(bytes(partial))
                    partial = bytearray()
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == packets

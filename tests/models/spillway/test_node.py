"""The spill node's golden model alone (``models/spillway/node.py``): slots, classification, order, full."""
import random

import pytest

from models import wire
from models.headers import Ether, Spill, drain_request, roce_packet, spill_frame
from models.packet import beats_of
from models.spillway.node import COUNTERS, SpillNodeModel, classify, returned, slot_beats
from models.spillway.params import SpillNodeParams

P = SpillNodeParams(ports=3, capacity=4, mtu=200, data_bytes=64)


class Harness:
    """Feeds whole frames to the model (``i`` never waits) and collects what ``o`` sends."""

    def __init__(self, params=P, o_ready=lambda cycle: True, gap=lambda cycle: False):
        self.model = SpillNodeModel(params)
        self.width = params.data_bytes
        self.o_ready, self.gap = o_ready, gap
        self.beats, self.out, self.partial, self.cycle = [], [], bytearray(), 0

    def send(self, frame):
        self.beats += beats_of(bytes(frame), {}, self.width)

    def run(self, cycles):
        for _ in range(cycles):
            beat = self.beats.pop(0) if self.beats and not self.gap(self.cycle) else None
            ready = self.o_ready(self.cycle)
            valid, out = self.model.tick(beat, ready)
            if valid and ready:
                keep = out["keep"]
                assert keep == (1 << keep.bit_length()) - 1
                assert out["first"] == (not self.partial)
                self.partial += out["data"].to_bytes(self.width, "little")[:keep.bit_length()]
                if out["last"]:
                    self.out.append(bytes(self.partial))
                    self.partial = bytearray()
            self.cycle += 1

    def conserved(self, frames):
        c = self.model.counters()
        assert frames == c["received"] + c["overflow"] + c["oversize"] + c["malformed"] + c["drains"], c
        assert c["received"] == sum(self.model.stored) + c["returned"], c
        assert len(self.out) == c["returned"]


def inner(n, size=0):
    return bytes(roce_packet(src=f"10.0.0.{n % 250 + 1}", sport=49152 + n, psn=n, payload=bytes(size)))


def test_slot_and_classify():
    assert slot_beats(P) == 4                                  # (200 + 22) / 64, rounded up
    data = bytes(spill_frame(inner(0), port=1))
    assert classify(data, 3, 4, 64) == "data"
    assert classify(bytes(drain_request(2, 3)), 3, 4, 64) == "drain"
    assert classify(bytes(drain_request(2, 0)), 3, 4, 64) == "malformed"
    assert classify(bytes(drain_request(3)), 3, 4, 64) == "malformed"                 # no such port
    assert classify(data[:21], 3, 4, 64) == "malformed"                               # truncated header
    assert classify(data[:22], 3, 4, 64) == "malformed"                               # no inner frame
    assert classify(bytes(spill_frame(inner(0), port=1, op=wire.SPILL_RETURN)), 3, 4, 64) == "malformed"
    assert classify(bytes(Ether(type=wire.ETHERTYPE_IPV4)) + data[14:], 3, 4, 64) == "malformed"
    assert classify(bytes(spill_frame(inner(0, 300), port=1)), 3, 4, 64) == "oversize"
    assert classify(bytes(spill_frame(bytes(256 - 22), port=1)), 3, 4, 64) == "data"   # exactly 4 beats
    assert classify(bytes(spill_frame(bytes(257 - 22), port=1)), 3, 4, 64) == "oversize"


def test_store_and_return_in_order():
    """Per-port FIFO order, frames returned whole with op RETURN and the MACs swapped."""
    h = Harness()
    frames = [spill_frame(inner(n, 60 * (n % 3)), port=n % 3, flow=n, seq=n // 3) for n in range(9)]
    for f in frames:
        h.send(f)
    h.run(60)
    assert h.model.stored == [3, 3, 3] and h.out == []            # nothing leaves unasked
    h.send(drain_request(1, 2))
    h.send(drain_request(0, 3))
    h.run(80)
    expected = [returned(bytes(frames[n])) for n in (1, 0, 4, 3, 6)]    # round-robin over ports
    assert h.out == expected
    back = Ether(h.out[0])
    assert back[Spill].op == wire.SPILL_RETURN and bytes(back[Spill].payload) == inner(1, 60)
    assert (back.src, back.dst) == (Ether(bytes(frames[1])).dst, Ether(bytes(frames[1])).src)
    assert h.model.stored == [0, 1, 3]
    h.conserved(11)


def test_full_never_overwrites():
    """A DATA frame for a full FIFO is dropped (overflow); the stored frames come back unchanged."""
    h = Harness()
    frames = [spill_frame(inner(n), port=2, seq=n) for n in range(P.capacity + 2)]
    for f in frames:
        h.send(f)
    h.send(drain_request(2, P.capacity + 2))
    h.run(100)
    assert h.model.counters()["overflow"] == 2 and h.model.counters()["drain_empty"] == 2
    assert h.out == [returned(bytes(f)) for f in frames[:P.capacity]]
    h.conserved(P.capacity + 3)


def test_full_at_first_beat_even_if_freed_during_the_frame():
    """The slot is claimed at the first beat: a frame whose FIFO is full at its first beat is dropped
    even when a return frees a slot before its last beat (its beats were never written)."""
    h = Harness(o_ready=lambda cycle: False)
    for n in range(P.capacity):
        h.send(spill_frame(inner(n), port=0, seq=n))
    h.send(drain_request(0, 1))
    h.run(40)
    late = beats_of(bytes(spill_frame(inner(9, 150), port=0)), {}, 64)
    assert len(late) == 4
    h.model.tick(late[0], False)                 # first beat: full, the return is stalled
    for beat in late[1:]:
        h.model.tick(beat, True)                 # the return's single beat leaves, a slot frees
    assert h.model.counters()["returned"] == 1 and h.model.counters()["overflow"] == 1
    assert h.model.stored == [P.capacity - 1, 0, 0]


@pytest.mark.parametrize("seed", range(4))
def test_random_with_backpressure(seed):
    """Random DATA / DRAIN / malformed frames, idle input and back-pressured output: per-port order,
    nothing lost or duplicated, conservation."""
    rng = random.Random(seed)
    h = Harness(o_ready=lambda c: rng.random() < 0.6, gap=lambda c: rng.random() < 0.2)
    sent = [[] for _ in range(P.ports)]
    frames = 0
    for n in range(300):
        port = rng.randrange(P.ports)
        kind = rng.random()
        if kind < 0.6:
            frame = bytes(spill_frame(inner(n, rng.choice([0, 50, 140])), port=port, flow=rng.randrange(16), seq=n))
            sent[port].append(frame)
        elif kind < 0.9:
            frame = drain_request(port, rng.randrange(1, 3))
        else:
            frame = bytes(spill_frame(inner(n), port=port))[:rng.randrange(1, 22)]
        h.send(frame)
        frames += 1
        h.run(rng.randrange(0, 6))
    for port in range(P.ports):
        h.send(drain_request(port, P.capacity))
        frames += 1
    h.run(3000)
    assert not h.beats and all(s == 0 for s in h.model.stored)
    h.conserved(frames)
    assert h.model.counters()["overflow"] == sum(map(len, sent)) - len(h.out) > 0
    for port in range(P.ports):
        back = [f for f in h.out if f[wire.SPILL_PORT_AT] == port]
        assert back == [returned(f) for f in sent[port] if returned(f) in back], f"port {port}: order changed"
    assert set(COUNTERS) == set(h.model.counters())


def test_bench_stimulus():
    """``make bench``'s ``spill`` stimulus: alternating DATA and DRAIN frames for the node, one beat each;
    the node model returns every DATA frame, nothing dropped."""
    from registry import block
    from tools.bench import bench_params
    from tools.traffic import spill_frames
    p = bench_params("spillway.node")
    node = SpillNodeModel(p)
    beats = spill_frames(block("spillway.node").interface(p), 200, random.Random(1))
    returned = 0
    for beat in beats + [None] * 4:
        assert beat is None or beat["last"]
        valid, _ = node.tick(beat, True)
        returned += valid
    counters = node.counters()
    assert returned == 100 and counters["returned"] == 100, counters
    assert counters["overflow"] == counters["malformed"] == counters["drain_empty"] == 0

"""Spillway's spill node under Verilator, checked cycle by cycle against its golden model (the lockstep)."""
import itertools
import random

import cocotb
from cocotb.triggers import RisingEdge

from hdl.spillway.node import SpillNode
from models import wire
from models.headers import Ether, drain_request, roce_packet, spill_frame
from models.spillway.node import classify, returned, slot_beats
from models.spillway.params import SpillNodeParams
from testbenches import runner, tb

P = SpillNodeParams(ports=3, capacity=4, mtu=200, data_bytes=64)

OUTCOMES = ("received", "overflow", "oversize", "malformed", "drain_all", "drain_part", "drain_none")
FILLS = ("empty", "partial", "one_free", "full")
LENGTHS = ("min", "one_beat", "mid", "=slot", "=slot+1", ">slot+1")
#: Cross bins that cannot happen, and why (the coverage report prints the reason).
FULL_DROPS = "a DATA frame whose FIFO was full at its first beat is dropped (overflow), never stored"
ROOM_STORES = "a DATA frame of at most slot_beats beats whose FIFO had room at its first beat is stored"
SLOT_FITS = "a frame of at most slot_beats beats is never oversize (classify)"
SLOT_EXCEEDED = "a frame of more than slot_beats beats is oversize (classify), never stored nor overflow"
MIN_FITS = "the shortest DATA frame (header + 1 byte) is one beat (data_bytes >= 22)"


def fill(count, capacity):
    return "full" if count == capacity else "empty" if not count else "one_free" if count == capacity - 1 \
        else "partial"


def length(frame, p):
    beats, slot = -(-len(frame) // p.data_bytes), slot_beats(p)
    return ("min" if len(frame) == wire.SPILL_HEADER_BYTES + 1 else "one_beat" if beats == 1 else
            "=slot" if beats == slot else "=slot+1" if beats == slot + 1 else ">slot+1" if beats > slot else "mid")


def reason(frame, ports):
    """Why ``classify`` calls ``frame`` malformed (its first failing rule)."""
    if len(frame) < wire.SPILL_HEADER_BYTES:
        return "short"
    if int.from_bytes(frame[wire.ETHERTYPE_AT:wire.ETHERTYPE_AT + 2], "big") != wire.ETHERTYPE_SPILL:
        return "ethertype"
    if frame[wire.SPILL_PORT_AT] >= ports:
        return "port"
    op = frame[wire.SPILL_OP_AT]
    return "drain_zero" if op == wire.SPILL_DRAIN else "op" if op != wire.SPILL_DATA else "no_inner"


def coverage(p):
    """The spill node's functional coverage: every frame outcome (each counter reason, each malformed
    rule) at every FIFO fill and slot-length edge; DRAIN grants; the return path's choice and stalls."""
    cover = tb.Coverage("spillway.node")
    cover.point("outcome", OUTCOMES)
    cover.point("fill", FILLS)
    cover.point("length", LENGTHS)
    cover.point("malformed", ("short", "ethertype", "port", "op", "no_inner", "drain_zero"))
    cover.point("drain_vs_free", ("<free", "=free", ">free", "none_free"))
    cover.point("choice", ("at_rr", "after_rr", "wrapped"))
    cover.point("o_stall", ("first", "middle", "last"))
    data = ("received", "overflow", "oversize")
    cover.point("data_outcome", data)
    cover.cross("outcome_x_fill", "data_outcome", "fill", unreachable={
        **{("received", "full"): FULL_DROPS},
        **{("overflow", f): ROOM_STORES for f in FILLS if f != "full"}})
    cover.cross("outcome_x_length", "data_outcome", "length", unreachable={
        **{("oversize", b): SLOT_FITS for b in LENGTHS if b not in ("=slot+1", ">slot+1")},
        **{(o, b): SLOT_EXCEEDED for o in ("received", "overflow") for b in ("=slot+1", ">slot+1")},
        ("oversize", "min"): MIN_FITS})
    return cover


# --- RTL testbench ------------------------------------------------------------------------------

class TB(tb.BlockTB):
    """Sends spill-link frames into a SpillNode; the lockstep compares ``i.ready``, ``o`` and ``stored``
    with the golden model every cycle (``o.data`` under ``keep``: bytes past the end are don't-care)."""

    name = "spillway.node"

    def __init__(self, dut):
        super().__init__(dut)
        self.source = self.packet_source("i")
        self.sink = self.packet_sink("o")
        self.frames = 0
        self.sent = []                          # DATA frames sent, in order
        self.out_cycles = []                    # cycles of the beats sent on o
        self.cover = coverage(self.params)
        self.fill_at_first = None               # fill of the arriving frame's FIFO at its first beat

    async def reset(self):
        await super().reset()
        self.sink.clear()
        self.sent, self.frames, self.out_cycles = [], 0, []

    def send(self, frame):
        frame = bytes(frame)
        self.frames += 1
        if classify(frame, self.block.ports, self.block.beats, self.block.data_bytes) == "data":
            self.sent.append(frame)
        self.source.send_nowait(frame)

    def sample(self, values):
        """Functional coverage of this cycle, from the model's state before its step; the cycles of the
        beats sent on ``o``."""
        beat = tb.unpack(self._layout("i"), values["i__payload"]) if values["i__valid"] else None
        o_ready = values["o__ready"]
        if values["o__valid"] and o_ready:
            self.out_cycles.append(self.cycle)
        m, p = self.model, self.params
        if beat is not None:
            data = beat["data"].to_bytes(p.data_bytes, "little")
            if not m.partial:
                origin = data[wire.SPILL_PORT_AT]
                self.fill_at_first = fill(len(m.fifos[origin]), p.capacity) if origin < p.ports else None
            if beat["last"]:
                frame = bytes(m.partial) + data[:bin(beat["keep"]).count("1")]
                kind = classify(frame, p.ports, slot_beats(p), p.data_bytes)
                values = {}
                if kind == "malformed":
                    values = {"outcome": "malformed", "malformed": reason(frame, p.ports)}
                elif kind == "drain":
                    q, count = frame[wire.SPILL_PORT_AT], frame[wire.SPILL_COUNT_AT]
                    free = len(m.fifos[q]) - m.requested[q]
                    values = {"outcome": "drain_all" if count <= free else "drain_part" if free else "drain_none",
                              "drain_vs_free": "none_free" if not free else "<free" if count < free else
                              "=free" if count == free else ">free"}
                else:
                    outcome = "overflow" if kind == "data" and self.fill_at_first == "full" else \
                        "received" if kind == "data" else "oversize"
                    values = {"outcome": outcome, "data_outcome": outcome, "fill": self.fill_at_first,
                              "length": length(frame, p)}
                self.cover.sample(**values)
        if m.current is None:
            chosen = m._choice()
            if chosen is not None:
                self.cover.sample(choice="at_rr" if chosen == m.rr else "after_rr" if chosen > m.rr else "wrapped")
        port = m._choice()
        if port is not None and not o_ready:
            out = m._beat(port)
            self.cover.sample(o_stall="first" if out["first"] else "last" if out["last"] else "middle")

    async def settle(self, limit=20000):
        """Wait until every frame went in and every requested frame came out."""
        await self.source.wait_idle()
        for _ in range(limit):
            await RisingEdge(self.dut.clk)
            if not any(self.model.requested) and not self.dut.o__valid.value:
                break
        for _ in range(3):
            await RisingEdge(self.dut.clk)
        assert not any(self.model.requested), "requested frames never came out"

    def check(self, name):
        """Counters equal the model's; frames conserved; per-port order and content of the returns."""
        c = self.check_counters()
        stored = tb.unpack(self.block.stored.shape(), self.dut.stored.value.to_unsigned())
        self.conserved("frames", self.frames, received=c["received"], overflow=c["overflow"],
                       oversize=c["oversize"], malformed=c["malformed"], drains=c["drains"])
        self.conserved("stored frames", c["received"], stored=sum(stored), returned=c["returned"])
        back = [raw for raw, _ in self.sink.queue]
        assert len(back) == c["returned"] and len(set(back)) == len(back), "a frame came back twice"
        self.conserved("DATA frames", len(self.sent), received=c["received"], overflow=c["overflow"])
        for port in range(self.block.ports):
            mine = [f for f in back if f[wire.SPILL_PORT_AT] == port]
            sent = [returned(f) for f in self.sent if f[wire.SPILL_PORT_AT] == port]
            assert mine == [f for f in sent if f in mine], f"port {port}: returns out of order"
        self.write_pcaps()
        self.cover.write()
        cocotb.log.info("%s: %d frames in, counters %s, %d cycles", name, self.frames, c, self.cycle)


def inner(n, size=0):
    return bytes(roce_packet(src=f"10.0.0.{n % 250 + 1}", sport=49152 + n, psn=n, payload=bytes(size)))


def frames_of(rng, t, count, ports=None):
    """Random DATA (sizes up to the slot), DRAIN and malformed frames."""
    out = []
    for n in range(count):
        port = rng.randrange(ports or t.block.ports)
        kind = rng.random()
        if kind < 0.55:
            out.append(spill_frame(inner(n, rng.choice([0, 8, 60, t.params.mtu - 58])), port=port,
                                   flow=rng.randrange(1 << 16), seq=n))
        elif kind < 0.85:
            out.append(drain_request(port, rng.randrange(1, 4)))
        else:
            raw = bytes(spill_frame(inner(n), port=port))
            out.append(rng.choice([raw[:rng.randrange(1, 23)], bytes(drain_request(port, 0)),
                                   bytes(spill_frame(inner(n), port=t.block.ports + rng.randrange(3))),
                                   bytes(spill_frame(inner(n), port=port, op=wire.SPILL_RETURN)),
                                   bytes(Ether(type=wire.ETHERTYPE_IPV4)) + raw[14:],
                                   bytes(spill_frame(inner(n, t.params.mtu), port=port))]))    # oversize
    return out


@cocotb.test()
async def random_frames(dut):
    """Random DATA / DRAIN / malformed / truncated / oversize frames, idle input, back-pressure on o."""
    rng = random.Random(tb.seed())
    t = TB(dut)
    t.source.set_pause_generator(rng.random() < 0.3 for _ in itertools.count())
    t.sink.set_pause_generator(rng.random() < 0.4 for _ in itertools.count())
    await t.reset()
    for frame in frames_of(rng, t, 400):
        t.send(frame)
    for port in range(t.block.ports):
        t.send(drain_request(port, 255))
    await t.settle()
    counters = t.model.counters()
    assert counters["returned"] > 20 and counters["overflow"] > 0, counters
    assert counters["oversize"] > 0 and counters["malformed"] > 0
    t.check("random_frames")


@cocotb.test()
async def node_full(dut):
    """Frames for a full FIFO are dropped (overflow) and never overwrite what it holds."""
    t = TB(dut)
    await t.reset()
    C = t.block.capacity
    port = 1 % t.block.ports
    for n in range(C + 3):
        t.send(spill_frame(inner(n, 40), port=port, seq=n))
    await t.source.wait_idle()
    for _ in range(5):
        await RisingEdge(dut.clk)
    assert t.counters()["overflow"] == 3 and t.counters()["received"] == C
    t.send(drain_request(port, 255))
    await t.settle()
    assert [raw for raw, _ in t.sink.queue] == [returned(f) for f in t.sent[:C]]
    t.check("node_full")


@cocotb.test()
async def line_rate(dut):
    """DATA frames in at one beat per cycle; returns out back to back, one beat per cycle."""
    t = TB(dut)
    t.sink.set_pause_generator(None)
    await t.reset()
    C, P = t.block.capacity, t.block.ports
    for n in range(C * P):
        t.send(spill_frame(inner(n, t.params.mtu - 58), port=n % P, seq=n))     # multi-beat, the largest
    await t.source.wait_idle()
    for port in range(P):
        t.send(drain_request(port, C))
    await t.settle()
    assert len(t.sink.queue) == C * P
    beats = t.out_cycles
    assert beats[-1] - beats[0] == len(beats) - 1, \
        f"{len(beats)} beats of returns took {beats[-1] - beats[0] + 1} cycles"
    t.check("line_rate")


@cocotb.test()
async def reset_mid_traffic(dut):
    """A reset with frames stored, arriving and leaving empties the node; traffic then resumes. The random
    frames end with one DATA frame per port, so some frame is stored at the reset whatever the seed drew."""
    rng = random.Random(tb.seed())
    t = TB(dut)
    t.sink.set_pause_generator(rng.random() < 0.3 for _ in itertools.count())
    await t.reset()
    for frame in frames_of(rng, t, 120):
        t.send(frame)
    for n in range(t.block.ports):      # the drains above may empty the node: these stay until the reset
        t.send(spill_frame(inner(n, 8), port=n, flow=n, seq=n))
    for cycle in range(2300):           # 300 cycles, then on until a frame is stored
        await RisingEdge(dut.clk)
        if cycle >= 300 and sum(tb.unpack(t.block.stored.shape(), dut.stored.value.to_unsigned())):
            break
    assert sum(tb.unpack(t.block.stored.shape(), dut.stored.value.to_unsigned())) > 0, "nothing stored at the reset"
    await t.reset()
    assert all(v == 0 for v in t.counters().values())
    for frame in frames_of(rng, t, 150):
        t.send(frame)
    for port in range(t.block.ports):
        t.send(drain_request(port, 255))
    await t.settle()
    t.check("reset_mid_traffic")


@cocotb.test()
async def frame_edges(dut):
    """Every classification edge by construction: the shortest DATA frame (header + 1 byte), one full
    beat, exactly ``slot_beats`` beats (stored) and one beat more (oversize); the first two again into
    a full FIFO (overflow); DRAIN below, above, at the unrequested frames and with none left; one
    frame per malformed rule."""
    t = TB(dut)
    await t.reset()
    W, S, C, P = t.block.data_bytes, t.block.beats, t.block.capacity, t.block.ports
    assert C >= 2, "the drain edges need two stored frames"
    small, one_beat = bytes(spill_frame(b"\x01", port=0)), bytes(spill_frame(bytes(W - 22), port=0))
    assert len(small) == 23 and len(one_beat) == W
    for frame in (small, one_beat, bytes(spill_frame(bytes(S * W - 22), port=0))):
        t.send(frame)
        t.send(drain_request(0, 1))                               # = the one unrequested frame
        await t.settle()
    t.send(spill_frame(bytes(S * W - 21), port=0))                # slot_beats + 1 beats: oversize
    for n in range(C):
        t.send(spill_frame(inner(n), port=0, seq=n))
    t.send(spill_frame(b"\x02", port=0, seq=1))                    # both edges again (other bytes: the
    t.send(spill_frame(bytes(W - 22), port=0, seq=1))             # returns are matched by content) into
                                                                   # the full FIFO: overflow
    t.send(drain_request(0, 1))                                    # below the C unrequested frames
    t.send(drain_request(0, C))                                    # above the C - 1 left: one empty
    t.send(drain_request(0, 1))                                    # none left: one empty
    raw = bytes(spill_frame(inner(0), port=0))
    bad = [raw[:10], bytes(Ether(type=wire.ETHERTYPE_IPV4)) + raw[14:], bytes(spill_frame(inner(0), port=P)),
           bytes(spill_frame(inner(0), port=0, op=wire.SPILL_RETURN)), raw[:wire.SPILL_HEADER_BYTES],
           bytes(drain_request(0, 0))]
    for frame in bad:
        t.send(frame)
    await t.settle()
    c = t.counters()
    assert (c["received"], c["overflow"], c["oversize"], c["malformed"]) == (3 + C, 2, 1, len(bad)), c
    assert (c["drains"], c["drain_empty"], c["returned"]) == (6, 2, 3 + C), c
    t.check("frame_edges")


PARAMS = {
    "p3": P,
    "p1w32": SpillNodeParams(ports=1, capacity=2, mtu=120, data_bytes=32),
    #: a capacity that is not a power of two: the FIFO pointers wrap at C - 1 before their width does
    "p2c3": SpillNodeParams(ports=2, capacity=3, mtu=120, data_bytes=32),
}


@runner.parametrize(__name__, PARAMS)
def test_node(params, testcase, record_property):
    record_property("innet", runner.run(SpillNode, params, __name__, testcase))

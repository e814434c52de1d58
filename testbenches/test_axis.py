"""The AXI4-Stream wrappers (``hdl/axis.py``) driven by cocotbext-axi's ``AxiStreamSource`` and
``AxiStreamSink`` (with their pause generators) under Verilator. The wrapped block runs in lockstep with
its golden model every cycle (``tb.follow`` on the wrapper's submodule ``block``: the one lockstep, on
the block's own ports), and what the AXI side carried is what the block's ports did: every frame the
AXI sinks received equals, byte for byte and ``tuser`` for meta, the items the block sent
(``Transfers``, from the same per-cycle port values). The project's own drivers are not used here.
"""
import itertools
import random

import cocotb
from cocotb.triggers import RisingEdge, Timer
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from hdl.aggregator import Aggregator
from hdl.axis import AxiStream
from hdl.bounded_loss_tracker import BoundedLossTracker
from hdl.spillway.inswitch import InSwitchSpillBuffer
from hdl.spillway.node import SpillNode
from models.aggregator import AggregatorModel, AggregatorParams
from models.bounded_loss_tracker import KINDS, PACKET_COUNTERS, BoundedLossTrackerModel, BoundedLossTrackerParams
from models.headers import dblp_packet, drain_request, ina_packet, roce_packet, spill_frame
from models.spillway.inswitch import InSwitchModel
from models.spillway.node import SpillNodeModel
from models.spillway.params import InSwitchParams, SpillNodeParams
from testbenches import runner, tb
from testbenches.lockstep import Lockstep

AGG = AggregatorParams(policy="atp", slots=4, workers=3, values=2, data_bytes=64, ps_port=5, mcast_port=255)
SPILL = InSwitchParams(ports=4, high=6, low=2, capacity=4, drain_window=3, data_bytes=64)
NODE = SpillNodeParams(ports=2, capacity=3, mtu=200, data_bytes=64)
DBLP = BoundedLossTrackerParams(rounds=4, e_max=8, word_bits=8, deadline=120, data_bytes=64)


class AxisAggregator(AxiStream):
    def __init__(self, params):
        super().__init__(Aggregator(params))


class AxisSpillBuffer(AxiStream):
    def __init__(self, params):
        super().__init__(InSwitchSpillBuffer(params))


class AxisSpillNode(AxiStream):
    def __init__(self, params):
        super().__init__(SpillNode(params))


class AxisBoundedLossTracker(AxiStream):
    def __init__(self, params):
        super().__init__(BoundedLossTracker(params))


class Transfers:
    """The items the wrapped block sent on each output stream, from the lockstep's port values of each
    cycle: a packet stream's whole packets ``(bytes, meta)``, another stream's payloads (dicts)."""

    def __init__(self, lockstep):
        self.ports = lockstep.ports.streams_out
        self.items = {p.name: [] for p in self.ports}
        self.partial = {p.name: [] for p in self.ports}

    def __call__(self, values):
        for p in self.ports:
            if values[f"{p.name}__valid"] and values[f"{p.name}__ready"]:
                beat = tb.unpack(p.layout, values[f"{p.name}__payload"])
                if not p.packet:
                    self.items[p.name].append(beat)
                    continue
                self.partial[p.name].append(beat)
                if beat["last"]:
                    beats, self.partial[p.name] = self.partial[p.name], []
                    raw = b"".join(b["data"].to_bytes(p.bytes, "little")[:b["keep"].bit_length()] for b in beats)
                    self.items[p.name].append((raw, beats[-1]["meta"]))


def lockstep(dut, component, model):
    """Start the lockstep of ``model`` beside the wrapper's block (``component`` gives the block's ports);
    returns it and the ``Transfers`` of the block's outputs."""
    ls = Lockstep(component, model)
    transfers = Transfers(ls)
    cocotb.start_soon(tb.follow(dut.block, ls, dut.clk, lambda: bool(dut.rst.value), after=transfers))
    return ls, transfers


async def start(dut, rng):
    tb.start_clock(dut)
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    source.set_pause_generator(itertools.cycle([rng.random() < 0.3 for _ in range(97)]))
    await tb.reset(dut)
    return source


def sink_of(dut, prefix, rng):
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, prefix), dut.clk, dut.rst)
    sink.set_pause_generator(itertools.cycle([rng.random() < 0.4 for _ in range(89)]))
    return sink


def frames(sink):
    """Every frame the AXI ``sink`` holds, taken out: ``(tdata bytes, tuser values)``."""
    out = []
    while not sink.empty():
        frame = sink.recv_nowait()
        out.append((bytes(frame.tdata), set(frame.tuser) if isinstance(frame.tuser, list) else {frame.tuser}))
    return out


def descriptors(sink, layout):
    """The payloads of a non-packet stream's AXI ``sink``: each ``tdata`` word unpacked with ``layout``."""
    return [tb.unpack(layout, int.from_bytes(data, "little")) for data, _ in frames(sink)]


def check_counters(dut, ls):
    counters = ls.model.counters()
    got = {name: int(getattr(dut, name).value) for name in counters}
    assert got == counters, f"counters: RTL {got}, model {counters}"
    return counters


@cocotb.test()
async def aggregator(dut):
    """Rounds of contributions, an ACK per round, a non-INA packet between them: the block in lockstep;
    every AXI frame out is a packet the block sent, ``tuser`` its egress port."""
    p = tb.params()
    rng = random.Random(tb.seed())
    ls, sent_by_block = lockstep(dut, Aggregator(p), AggregatorModel(p))
    source = await start(dut, rng)
    sink = sink_of(dut, "m_axis", rng)
    sent = 0
    for round_ in range(12):
        index, jobseq = round_ % p.slots, round_ + 1
        packets = [ina_packet(worker=w, jobseq=jobseq, index=index, fanin=p.workers,
                              values=[rng.randrange(-1000, 1000) for _ in range(p.values)]) for w in range(p.workers)]
        packets.append(roce_packet(sport=rng.randrange(49152, 65536), qp=rng.randrange(2, 64), payload=bytes(16)))
        packets.append(ina_packet(jobseq=jobseq, index=index, fanin=p.workers, values=[0] * p.values, ack=1,
                                  bitmap=(1 << p.workers) - 1))
        for packet in packets:
            await source.send(AxiStreamFrame(bytes(packet), tuser=rng.randrange(4)))
            sent += 1
    await source.wait()
    await Timer(400, "ns")
    ls.done()
    got = frames(sink)
    assert got == [(raw, {meta["port"]}) for raw, meta in sent_by_block.items["o"]], "the AXI side differs"
    counters = check_counters(dut, ls)
    assert counters["completed"] == 12, counters
    tb.summary(counters=counters, packets_in=sent, packets_out=len(got))


@cocotb.test()
async def spill_buffer(dut):
    """RoCE packets of random length and port while the queue depths sweep across the watermarks: the
    in-switch spill buffer in lockstep every cycle; every descriptor on ``m_o_axis`` is one it sent."""
    p = tb.params()
    rng = random.Random(tb.seed())
    ls, sent_by_block = lockstep(dut, InSwitchSpillBuffer(p), InSwitchModel(p))
    source = await start(dut, rng)
    sink = sink_of(dut, "m_o_axis", rng)
    qdepth = [0] * p.ports
    stop = False

    async def queues():
        while not stop:
            for port in range(p.ports):
                qdepth[port] = max(0, min(p.high + 3, qdepth[port] + rng.choice((-2, -1, 0, 1, 2))))
            dut.qdepth.value = sum(q << (16 * i) for i, q in enumerate(qdepth))
            for _ in range(rng.randrange(1, 12)):
                await RisingEdge(dut.clk)

    def packet(n):
        return roce_packet(src=f"10.0.{rng.randrange(4)}.{rng.randrange(1, 255)}", sport=rng.randrange(49152, 65536),
                           qp=rng.randrange(2, 64), psn=n, payload=bytes(rng.choice((2, 40, 120))))

    # Directed first: every queue at the high watermark spills, then every queue empty drains them
    # and forwards (so each kind happens by construction), then random depths.
    dut.qdepth.value = sum(p.high << (16 * i) for i in range(p.ports))
    for port in range(p.ports):
        await source.send(AxiStreamFrame(bytes(packet(port)), tuser=port))
    await source.wait()
    for _ in range(10):
        await RisingEdge(dut.clk)
    dut.qdepth.value = 0
    for _ in range(1000):
        if ls.model.pending == 0:
            break
        await RisingEdge(dut.clk)
    await source.send(AxiStreamFrame(bytes(packet(p.ports)), tuser=0))
    await source.wait()
    for _ in range(10):
        await RisingEdge(dut.clk)
    counters = ls.model.counters()
    assert counters["spilled"] == p.ports and counters["drained"] == p.ports and counters["forwarded"] == 1, counters
    cocotb.start_soon(queues())
    for n in range(p.ports + 1, 160):
        await source.send(AxiStreamFrame(bytes(packet(n)), tuser=rng.randrange(p.ports)))
    await source.wait()
    stop = True
    dut.qdepth.value = 0
    for _ in range(400):
        await RisingEdge(dut.clk)
    assert ls.model.pending == 0 and int(dut.pending.value) == 0
    assert descriptors(sink, ls.ports.by_name["o"].layout) == sent_by_block.items["o"], "the AXI side differs"
    tb.summary(counters=check_counters(dut, ls))


@cocotb.test()
async def spill_node(dut):
    """DATA frames for both ports and DRAIN requests (no tuser: the node's meta is empty), under sink
    back-pressure: the node in lockstep every cycle; every AXI frame out is a RETURN frame it sent."""
    p = tb.params()
    rng = random.Random(tb.seed())
    ls, sent_by_block = lockstep(dut, SpillNode(p), SpillNodeModel(p))
    source = await start(dut, rng)
    sink = sink_of(dut, "m_axis", rng)
    for n in range(60):
        port = rng.randrange(p.ports)
        if rng.random() < 0.7:
            inner = roce_packet(sport=rng.randrange(49152, 65536), qp=rng.randrange(2, 64), psn=n,
                                payload=bytes(rng.choice((2, 60, 130))))
            frame = spill_frame(inner, port, flow=rng.randrange(16), seq=n)
        else:
            frame = drain_request(port, rng.randrange(1, 4))
        await source.send(AxiStreamFrame(bytes(frame)))
    for port in range(p.ports):
        await source.send(AxiStreamFrame(bytes(drain_request(port, 255))))
    await source.wait()
    for _ in range(600):
        await RisingEdge(dut.clk)
    returned = [raw for raw, _ in frames(sink)]
    assert returned and returned == [raw for raw, _ in sent_by_block.items["o"]], "the AXI side differs"
    counters = check_counters(dut, ls)
    assert len(returned) == counters["returned"], (len(returned), counters)
    tb.summary(counters=counters)


@cocotb.test()
async def bounded_loss_tracker(dut):
    """DBLP rounds with losses and duplicates on ``s_axis``, phase-table rows on ``s_cfg_axis`` (``tdata``
    = the row's bits), the three descriptor streams on ``m_fwd_axis``, ``m_close_axis`` and ``m_nack_axis``
    under back-pressure: the tracker in lockstep every cycle; every AXI descriptor out is one it sent;
    FULL, BOUNDED and NACK-then-ABORT closes are all reached (a round with every packet, one within tau,
    one far below it)."""
    p = tb.params()
    rng = random.Random(tb.seed())
    ls, sent_by_block = lockstep(dut, BoundedLossTracker(p), BoundedLossTrackerModel(p))
    source = await start(dut, rng)
    cfg = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_cfg_axis"), dut.clk, dut.rst)
    sinks = {n: sink_of(dut, f"m_{n}_axis", rng) for n in ("fwd", "close", "nack")}
    layout = ls.ports.by_name["cfg"].layout
    row = tb.pack(layout, {"phase": 1, "tau": 64, "deadline": 120})     # phase 1: a quarter may be lost
    await cfg.send(AxiStreamFrame(row.to_bytes((layout.size + 7) // 8, "little")))
    sent = 0
    plans = [(0, range(8)), (1, [0, 1, 2, 3, 4, 6, 7]), (0, [0, 5]), (1, range(8)), (1, [1, 2, 3])]
    for rnd, (phase, idxs) in enumerate(plans):
        packets = [dblp_packet(job=7, round=rnd, idx=i, cnt=8, phase=phase, last=int(i == 7), sport=50000 + rnd,
                               payload=bytes(rng.choice((4, 40, 90)))) for i in idxs]
        packets += [rng.choice(packets)]                      # a network duplicate
        rng.shuffle(packets)
        for packet in packets:
            await source.send(AxiStreamFrame(bytes(packet)))
            sent += 1
    await source.wait()
    for _ in range(2000):                                     # deadlines, NACKs, retries, aborts
        await RisingEdge(dut.clk)
    taken = {n: descriptors(sink, ls.ports.by_name[n].layout) for n, sink in sinks.items()}
    assert taken == sent_by_block.items, "the AXI side differs"
    kinds = {KINDS[e["kind"]] for e in taken["close"]}
    assert kinds == {"FULL", "BOUNDED", "ABORT"} and taken["nack"], (kinds, len(taken["nack"]))
    counters = check_counters(dut, ls)
    assert len(taken["fwd"]) == counters["forwarded"], (len(taken["fwd"]), counters)
    assert sum(counters[k] for k in PACKET_COUNTERS) == sent, (sent, counters)      # each packet once
    tb.summary(counters=counters)


def test_axis_aggregator(record_property):
    record_property("innet", runner.run(AxisAggregator, AGG, __name__, "aggregator", block="axis_aggregator"))


def test_axis_spill_buffer(record_property):
    record_property("innet", runner.run(AxisSpillBuffer, SPILL, __name__, "spill_buffer", block="axis_spill_buffer"))


def test_axis_spill_node(record_property):
    record_property("innet", runner.run(AxisSpillNode, NODE, __name__, "spill_node", block="axis_spill_node"))


def test_axis_bounded_loss_tracker(record_property):
    record_property("innet", runner.run(AxisBoundedLossTracker, DBLP, __name__, "bounded_loss_tracker",
                                        block="axis_bounded_loss_tracker"))

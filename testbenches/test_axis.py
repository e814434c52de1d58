"""The AXI4-Stream wrappers (``hdl/axis.py``) driven by cocotbext-axi's ``AxiStreamSource`` and
``AxiStreamSink`` (with their pause generators) under Verilator, checked against the blocks' golden
models: the aggregator packet by packet (``AggregatorModel.process``), the spill buffer and the spill
node cycle by cycle (``SpillBufferModel.step``, ``SpillNodeModel.step``: every cycle's ``tready``,
``tvalid`` and output beat). The project's own drivers (``tb.PacketSource``/``PacketSink``) are not
used here; they stay for the blocks' own testbenches (reset-following, per-beat logs with
simulation times for the pcaps, the batched runner), see PROGRESS.md.
"""
import itertools
import random

import cocotb
from cocotb.triggers import FallingEdge, RisingEdge, Timer
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from hdl.spill_buffer import SpillBuffer
from hdl.spill_node import SpillNode
from models.spill_buffer import SpillBufferModel, SpillBufferParams
from models.spill_node import SpillNodeModel, SpillNodeParams

from hdl.aggregator import Aggregator
from hdl.axis import AxiStream
from hdl.bounded_loss_tracker import BoundedLossTracker, cfg_layout, close_layout, fwd_layout, nack_layout
from models import wire
from models.aggregator import AggregatorModel, AggregatorParams
from models.bounded_loss_tracker import KINDS, PACKET_COUNTERS, BoundedLossTrackerModel, BoundedLossTrackerParams
from models.contract import Packet
from models.headers import dblp_packet, drain_request, ina_packet, roce_packet, spill_frame
from testbenches import runner, tb

AGG = AggregatorParams(policy="atp", slots=4, workers=3, values=2, data_bytes=64, ps_port=5, mcast_port=255)
SPILL = SpillBufferParams(mode="inswitch", ports=4, high=6, low=2, capacity=4, drain_window=3, data_bytes=64)
NODE = SpillNodeParams(ports=2, capacity=3, mtu=200, data_bytes=64)
DBLP = BoundedLossTrackerParams(rounds=4, e_max=8, word_bits=8, deadline=120, data_bytes=64)


class AxisAggregator(AxiStream):
    def __init__(self, params):
        super().__init__(Aggregator(params))


class AxisSpillBuffer(AxiStream):
    def __init__(self, params):
        super().__init__(SpillBuffer(params))


class AxisSpillNode(AxiStream):
    def __init__(self, params):
        super().__init__(SpillNode(params))


class AxisBoundedLossTracker(AxiStream):
    def __init__(self, params):
        super().__init__(BoundedLossTracker(params))


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


def beat_in(dut, data_bytes, tuser=True):
    """The beat on ``s_axis`` now (a model beat dict), or None when ``tvalid`` is low."""
    if not int(dut.s_axis_tvalid.value):
        return None
    return {"data": int(dut.s_axis_tdata.value), "keep": int(dut.s_axis_tkeep.value), "first": None,
            "last": int(dut.s_axis_tlast.value), "meta": {"port": int(dut.s_axis_tuser.value)} if tuser else {}}


@cocotb.test()
async def aggregator(dut):
    """Rounds of contributions, an ACK per round, a non-INA packet between them; compared packet by
    packet with the model, tuser = the egress port."""
    p = tb.params()
    rng = random.Random(tb.seed())
    model = AggregatorModel(p)
    source = await start(dut, rng)
    sink = sink_of(dut, "m_axis", rng)
    expected, sent = [], 0
    for round_ in range(12):
        index, jobseq = round_ % p.slots, round_ + 1
        packets = [ina_packet(worker=w, jobseq=jobseq, index=index, fanin=p.workers,
                              values=[rng.randrange(-1000, 1000) for _ in range(p.values)]) for w in range(p.workers)]
        packets.append(roce_packet(sport=rng.randrange(49152, 65536), qp=rng.randrange(2, 64), payload=bytes(16)))
        packets.append(ina_packet(jobseq=jobseq, index=index, fanin=p.workers, values=[0] * p.values, ack=1,
                                  bitmap=(1 << p.workers) - 1))
        for packet in packets:
            port = rng.randrange(4)
            expected += model.process("i", Packet(bytes(packet), {"port": port}))["o"]
            await source.send(AxiStreamFrame(bytes(packet), tuser=port))
            sent += 1
    got = [await sink.recv() for _ in expected]
    await Timer(200, "ns")
    assert sink.empty(), "the wrapper sent packets the model did not"
    for n, (frame, (raw, meta)) in enumerate(zip(got, expected)):
        assert bytes(frame.tdata) == raw, f"packet {n}: {bytes(frame.tdata).hex()} != {raw.hex()}"
        tuser = set(frame.tuser) if isinstance(frame.tuser, list) else {frame.tuser}
        assert tuser == {meta["port"]}, f"packet {n}: tuser {tuser} != port {meta['port']}"
    for name in ("passed", "completed", "consumed", "ack_freed"):
        assert int(getattr(dut, name).value) == model.counters[name], name
    assert model.counters["completed"] == 12
    tb.summary(counters={k: int(getattr(dut, k).value) for k in ("passed", "completed", "consumed")},
               packets_in=sent, packets_out=len(got))


@cocotb.test()
async def spill_buffer(dut):
    """RoCE packets of random length and port while the queue depths sweep across the watermarks:
    every cycle ``s_axis_tready``, ``m_o_axis_tvalid`` and the descriptor equal the model's."""
    p = tb.params()
    rng = random.Random(tb.seed())
    model = SpillBufferModel(p)
    source = await start(dut, rng)
    sink = sink_of(dut, "m_o_axis", rng)
    layout = dut.m_o_axis_tdata
    qdepth = [0] * p.ports
    stop = False

    async def queues():
        while not stop:
            for port in range(p.ports):
                qdepth[port] = max(0, min(p.high + 3, qdepth[port] + rng.choice((-2, -1, 0, 1, 2))))
            dut.qdepth.value = sum(q << (16 * i) for i, q in enumerate(qdepth))
            for _ in range(rng.randrange(1, 12)):
                await RisingEdge(dut.clk)

    seen = {"spilled": 0, "drained": 0, "forwarded": 0}

    async def monitor():
        while True:
            await FallingEdge(dut.clk)
            beat = beat_in(dut, p.data_bytes)
            depth = [(int(dut.qdepth.value) >> (16 * i)) & 0xFFFF for i in range(p.ports)]
            i_ready, o_valid, o_payload = model.step(beat, depth, int(dut.m_o_axis_tready.value))
            if beat is not None:
                assert int(dut.s_axis_tready.value) == i_ready, f"s_axis_tready at {tb.now()} ns"
            assert int(dut.m_o_axis_tvalid.value) == o_valid, f"m_o_axis_tvalid at {tb.now()} ns"
            if o_valid:
                word = int(layout.value)
                got = {"handle": word & 0xFFFF, "port": (word >> 16) & 0xFF, "length": (word >> 24) & 0xFFFF,
                       "spilled": word >> 40 & 1}
                assert got == o_payload, f"descriptor at {tb.now()} ns: {got} != {o_payload}"
            if model.decision is not None and model.decision[0] in seen:
                seen[model.decision[0]] += 1
            seen["drained"] += model.drained_port is not None

    cocotb.start_soon(monitor())
    received = []

    async def collect():
        while True:
            received.append(await sink.recv())

    cocotb.start_soon(collect())

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
        if model.pending == 0:
            break
        await RisingEdge(dut.clk)
    await source.send(AxiStreamFrame(bytes(packet(p.ports)), tuser=0))
    await source.wait()
    for _ in range(10):
        await RisingEdge(dut.clk)
    assert seen["spilled"] == p.ports and seen["drained"] == p.ports and seen["forwarded"] == 1, seen
    cocotb.start_soon(queues())
    for n in range(p.ports + 1, 160):
        await source.send(AxiStreamFrame(bytes(packet(n)), tuser=rng.randrange(p.ports)))
    await source.wait()
    stop = True
    dut.qdepth.value = 0
    for _ in range(400):
        await RisingEdge(dut.clk)
    assert model.pending == 0 and int(dut.pending.value) == 0
    assert len(received) == seen["forwarded"] + seen["drained"], (len(received), seen)
    tb.summary(counters={k: int(getattr(dut, k).value) for k in ("forwarded", "spilled", "drained")})


@cocotb.test()
async def spill_node(dut):
    """DATA frames for both ports and DRAIN requests (no tuser: the node's meta is empty); every
    cycle ``m_axis_tvalid`` and the returned beat equal the model's, under sink back-pressure."""
    p = tb.params()
    rng = random.Random(tb.seed())
    model = SpillNodeModel(p)
    source = await start(dut, rng)
    sink = sink_of(dut, "m_axis", rng)
    returned = []

    async def monitor():
        while True:
            await FallingEdge(dut.clk)
            beat = beat_in(dut, p.data_bytes, tuser=False)
            if beat is not None and not int(dut.s_axis_tready.value):
                beat = None
            o_valid, o_payload = model.step(beat, int(dut.m_axis_tready.value))
            assert int(dut.m_axis_tvalid.value) == o_valid, f"m_axis_tvalid at {tb.now()} ns"
            if o_valid:
                got = (int(dut.m_axis_tdata.value), int(dut.m_axis_tkeep.value), int(dut.m_axis_tlast.value))
                want = (o_payload["data"], o_payload["keep"], o_payload["last"])
                assert got == want, f"beat at {tb.now()} ns"

    cocotb.start_soon(monitor())
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
    while not sink.empty():
        returned.append(sink.recv_nowait())
    assert returned and len(returned) == model.counters["returned"], (len(returned), model.counters)
    assert all(bytes(f.tdata)[12:14] == wire.ETHERTYPE_SPILL.to_bytes(2, "big") for f in returned)
    tb.summary(counters=dict(model.counters))


@cocotb.test()
async def bounded_loss_tracker(dut):
    """DBLP rounds with losses and duplicates on ``s_axis``, phase-table rows on ``s_cfg_axis``
    (``tdata`` = the row's bits), the three descriptor streams on ``m_fwd_axis``, ``m_close_axis`` and
    ``m_nack_axis`` under back-pressure: every cycle ``s_axis_tready`` and each output's ``tvalid`` and
    ``tdata`` equal the model's; FULL, BOUNDED and NACK-then-ABORT closes are all reached (a round with
    every packet, one within tau, one far below it)."""
    p = tb.params()
    rng = random.Random(tb.seed())
    model = BoundedLossTrackerModel(p)
    layouts = {"cfg": cfg_layout(p.deadline_bits), "fwd": fwd_layout(p.handle_bits), "close": close_layout(),
               "nack": nack_layout()}
    source = await start(dut, rng)
    cfg = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_cfg_axis"), dut.clk, dut.rst)
    sinks = {n: sink_of(dut, f"m_{n}_axis", rng) for n in ("fwd", "close", "nack")}
    taken = {n: [] for n in sinks}
    kinds = dict(enumerate(KINDS))

    async def monitor():
        cycle = 0
        while True:
            await RisingEdge(dut.clk)
            beat = beat_in(dut, p.data_bytes, tuser=False)
            row = (tb.unpack(layouts["cfg"], int(dut.s_cfg_axis_tdata.value))
                   if int(dut.s_cfg_axis_tvalid.value) else None)
            readies = [bool(int(getattr(dut, f"m_{n}_axis_tready").value)) for n in sinks]
            out = model.tick(beat, row, *readies)
            if beat is not None:
                assert int(dut.s_axis_tready.value) == out.i_ready, f"cycle {cycle}: s_axis_tready"
            for (name, expected), ready in zip(zip(sinks, out[1:]), readies):
                valid = int(getattr(dut, f"m_{name}_axis_tvalid").value)
                assert valid == (expected is not None), f"cycle {cycle}: m_{name}_axis_tvalid {valid}, {expected}"
                if valid:
                    got = tb.unpack(layouts[name], int(getattr(dut, f"m_{name}_axis_tdata").value))
                    if name == "close":
                        got["kind"] = kinds[got["kind"]]
                    assert got == expected, f"cycle {cycle}: m_{name}_axis {got}, model {expected}"
                    if ready:
                        taken[name].append(got)
            cycle += 1

    cocotb.start_soon(monitor())
    width = (layouts["cfg"].size + 7) // 8
    row = tb.pack(layouts["cfg"], {"phase": 1, "tau": 64, "deadline": 120})     # phase 1: a quarter may be lost
    await cfg.send(AxiStreamFrame(row.to_bytes(width, "little")))
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
    closes = {e["kind"] for e in taken["close"]}
    assert closes == {"FULL", "BOUNDED", "ABORT"} and taken["nack"], (closes, len(taken["nack"]))
    assert len(taken["fwd"]) == model.counters["forwarded"], (len(taken["fwd"]), model.counters())
    assert sum(model.counters[k] for k in PACKET_COUNTERS) == sent, (sent, model.counters())   # each packet once
    for name, value in model.counters().items():
        assert int(getattr(dut, name).value) == value, name
    tb.summary(counters=model.counters())


def test_axis_aggregator(record_property):
    record_property("innet", runner.run(AxisAggregator, AGG, __name__, "aggregator", block="axis_aggregator"))


def test_axis_spill_buffer(record_property):
    record_property("innet", runner.run(AxisSpillBuffer, SPILL, __name__, "spill_buffer", block="axis_spill_buffer"))


def test_axis_spill_node(record_property):
    record_property("innet", runner.run(AxisSpillNode, NODE, __name__, "spill_node", block="axis_spill_node"))


def test_axis_bounded_loss_tracker(record_property):
    record_property("innet", runner.run(AxisBoundedLossTracker, DBLP, __name__, "bounded_loss_tracker",
                                        block="axis_bounded_loss_tracker"))

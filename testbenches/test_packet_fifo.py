"""PacketFifo, and self-test of the packet Source/Sink: packets survive idle cycles and backpressure."""
import itertools
import random

import cocotb
import pytest

from hdl.packet import beat_layout
from hdl.packet_fifo import PacketFifo, PacketFifoParams
from models.headers import roce_packet
from testbenches import runner, tb


@cocotb.test()
async def round_trip(dut):
    """Random packets, random idle on the source and random backpressure on the sink."""
    rng = random.Random(tb.seed())
    layout = beat_layout(tb.params().data_bytes)
    tb.start_clock(dut)
    source = tb.PacketSource(dut, "i", layout)
    sink = tb.PacketSink(dut, "o", layout)
    source.set_pause_generator(rng.random() < 0.3 for _ in itertools.count())
    sink.set_pause_generator(rng.random() < 0.4 for _ in itertools.count())
    await tb.reset(dut)
    board = tb.Scoreboard("fifo")
    sent = []
    for n in range(200):
        packet = roce_packet(qp=rng.randrange(1 << 24), psn=n, payload=rng.randbytes(rng.randrange(0, 300)))
        meta = {"port": rng.randrange(256)}
        source.send_nowait(packet, meta)
        board.expect((bytes(packet), meta))
        sent.append(packet)
    for _ in range(200):
        board.check(await sink.recv())
    board.check_done()
    assert sink.empty()
    tb.write_pcap("in", sent)


@pytest.mark.parametrize("data_bytes", [8, 64])
def test_packet_fifo(data_bytes):
    runner.run(PacketFifo, PacketFifoParams(data_bytes=data_bytes, depth=4),
               "testbenches.test_packet_fifo", "round_trip")

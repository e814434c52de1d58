"""PacketFifo, and self-test of the packet Source/Sink: packets survive idle cycles and backpressure."""
import itertools
import random

import cocotb

from hdl.packet_fifo import PacketFifo, PacketFifoParams
from models.headers import roce_packet
from testbenches import runner, tb


class TB(tb.BlockTB):
    """A PacketFifo between a packet source and a packet sink."""

    name = "packet_fifo"

    def __init__(self, dut):
        super().__init__(dut)
        self.source = self.packet_source("i")
        self.sink = self.packet_sink("o")


@cocotb.test()
async def round_trip(dut):
    """Random packets, random idle on the source and random backpressure on the sink."""
    rng = random.Random(tb.seed())
    t = TB(dut)
    t.source.set_pause_generator(rng.random() < 0.3 for _ in itertools.count())
    t.sink.set_pause_generator(rng.random() < 0.4 for _ in itertools.count())
    await t.reset(2)
    board = tb.Scoreboard("fifo")
    for n in range(200):
        packet = roce_packet(qp=rng.randrange(1 << 24), psn=n, payload=rng.randbytes(rng.randrange(0, 300)))
        meta = {"port": rng.randrange(256)}
        t.source.send_nowait(packet, meta)
        board.expect((bytes(packet), meta))
    for _ in range(200):
        board.check(await t.sink.recv())
    board.check_done()
    t.check_done()
    assert t.sink.empty()
    t.write_pcaps()


PARAMS = {f"{n}B": PacketFifoParams(data_bytes=n, depth=4) for n in (8, 64)}


@runner.parametrize(__name__, PARAMS)
def test_packet_fifo(params, testcase, record_property):
    record_property("innet", runner.run(PacketFifo, params, __name__, testcase))

"""SDR-RDMA at work (``make sim BLOCK=sdr``): a message's chunks complete out of order; a late packet dies.

The receiver posts a message of ``CHUNKS`` chunks of ``CHUNK`` packets in generation 1. Its packets arrive
sprayed over four channels, out of order: each chunk is signalled the moment its last packet lands, in
whatever order that is, and the message once all are in. The slot is then re-posted for the next message
in generation 2; a copy of an old packet, delayed on a slow path, arrives on generation 1's QP and is
dropped by its generation. The baseline is a receiver without generations (the one QP of the SDR QP): the
stale packet would be placed into the new message's buffer.
"""
import random

import cocotb

from demos import Run, cycle, linger, window
from models.chunk_bitmap import LATENCY, OP_POST, OUTCOMES, ChunkBitmapParams
from models.headers import sdr_packet
from testbenches import tb

TITLE = "a message's chunks completing out of order, with a late packet dropped by generation"
#: The tracker testbench's default parameters (one build for both): 16 message slots, 4 generations x 4 channels.
PARAMS = ChunkBitmapParams()
RUNS = (Run("chunk_bitmap", PARAMS, "chunks"),)
PCAPS = {"in": "RDMA writes in"}
MSG, CHUNK, CHUNKS, OLD, NEW = 0x2C, 8, 4, 1, 2
SIGNALS = ("i__valid", "o__valid", "chunk_done", "msg_done", "gen_mismatch")


class Receiver(tb.BlockTB):
    """RDMA writes and commands in, one result a packet out (kept with its cycle); the lockstep compares
    every cycle."""

    name = "chunk_bitmap"

    def __init__(self, dut):
        super().__init__(dut)
        self.source, self.cmds = self.packet_source("i"), self.stream_source("cmd")
        self.results = []
        dut.o__ready.value = 1
        dut.rd_addr.value = 0

    def sampled(self, values):
        if values["o__valid"]:
            self.results.append((cycle(tb.now()), tb.unpack(self._layout("o"), values["o__payload"])))

    def write(self, offset, gen, channel):
        """RDMA Write-with-Immediate of packet ``offset`` of message MSG on generation ``gen``'s QP."""
        p = self.params
        self.source.send_nowait(bytes(sdr_packet(MSG, offset, gen, channel, qp_base=p.qp_base,
                                                 generations=p.generations, payload=bytes(16), psn=offset,
                                                 msg_bits=p.msg_bits, user_bits=p.user_bits)))

    async def bitmap(self):
        """The words of message MSG's packet bitmap that its post cleared, read through the host port."""
        p, words = self.params, []
        for word in range(p.words(CHUNK * CHUNKS, CHUNK)):
            self.dut.rd_addr.value = MSG % p.msg_slots * p.slot_words + word
            await self.edge()
            await self.edge()
            words.append(int(self.dut.rd_pkt.value))
        return words

    async def settle(self, results):
        await self.cmds.wait_idle()
        while len(self.results) < results:
            await self.edge()


@cocotb.test()
async def chunks(dut):
    rng = random.Random(tb.seed())
    t = Receiver(dut)
    await t.reset()
    n = CHUNK * CHUNKS
    t.cmds.send_nowait({"op": OP_POST, "msg": MSG, "gen": OLD, "n_pkts": n, "chunk": CHUNK})
    order = list(range(n))
    while True:                 # sprayed: the chunks complete in an order other than 0, 1, 2, ...
        rng.shuffle(order)
        done = sorted(range(CHUNKS), key=lambda c: max(order.index(o) for o in range(c * CHUNK, (c + 1) * CHUNK)))
        if done != sorted(done):
            break
    late = rng.choice(order)
    for offset in order:
        t.write(offset, OLD, rng.randrange(PARAMS.channels))
    await t.settle(n)
    t.cmds.send_nowait({"op": OP_POST, "msg": MSG, "gen": NEW, "n_pkts": n, "chunk": CHUNK})
    t.write(late, OLD, rng.randrange(PARAMS.channels))           # the copy delayed on a slow path
    await t.settle(n + 1)
    assert await t.bitmap() == [0] * PARAMS.words(n, CHUNK), "the late copy left the new message's bitmap alone"
    await linger(t)
    t.check_counters()
    tb.write_pcap("in", t.source.log)
    chunk_events = [(at, r["chunk"]) for at, r in t.results if r["chunk_done"]]
    message = next(at for at, r in t.results if r["msg_done"])
    stale = t.results[-1]
    assert OUTCOMES[stale[1]["outcome"]] == "gen_mismatch"
    tb.summary(demo={"packets": n, "order": order[:12], "chunks": [c for _, c in chunk_events],
                     "chunk_cycles": [at for at, _ in chunk_events], "late": late,
                     "window": window(SIGNALS, {"first chunk": chunk_events[0][0], "message": message,
                                                "late packet": stale[0]})})


def story(summaries):
    (run,) = summaries
    d, c = run["demo"], run["counters"]
    done = ", ".join(f"{chunk} (cycle {at})" for chunk, at in zip(d["chunks"], d["chunk_cycles"]))
    return [
        ("in", f"message {MSG:#x} posted in generation {OLD}: {d['packets']} RDMA writes ({CHUNKS} chunks of "
               f"{CHUNK}) sprayed over {PARAMS.channels} channels out of order (offsets "
               f"{', '.join(map(str, d['order']))}, ...); re-posted in generation {NEW}; then a late copy of "
               f"offset {d['late']} on generation {OLD}'s QP"),
        ("sdr", f"{c['placed']} placed; chunks done in the order {done}; message done ({c['msg_done']}); the late "
                f"copy dropped by its generation ({c['gen_mismatch']} gen_mismatch), the new message's bitmap "
                f"untouched"),
        ("baseline", f"without generations the late copy matches the re-posted message: offset {d['late']} "
                     "placed in the new buffer with stale data, and counted as arrived"),
        ("latency", f"none added: a chunk is signalled with its last packet's result, {LATENCY} cycles after that "
                    "packet went in, whichever chunks are still missing"),
    ]

"""Symphony at work (``make sim BLOCK=symphony``): a ring collective with one flow left behind.

One job's ring of four flows, ``CHUNK`` packets a step, ``DELTA`` steps of slack. Jitter holds one flow
back: the three others run ahead while it has sent its first step only. The progress register file marks
ECN CE on the packets of every flow more than ``DELTA`` steps ahead of the job's slowest live flow (their
senders' congestion control then slows them) and never the laggard's. The laggard then catches up and the
four run in lock step: nothing is marked. The baseline is a switch without the register file: it marks
nothing, so the flows ahead keep their pace.
"""
import random

import cocotb
from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from demos import Run, cycle, linger, window
from models import wire
from models.headers import BTH, RC_SEND_MIDDLE, roce_packet
from models.progress_regfile import OP_INSTALL, OP_JOB, ProgressRegfileParams
from testbenches import tb

TITLE = "an outpacing ring flow marked, then the laggard catches up"
#: The progress file's testbench parameters (one build for both).
PARAMS = ProgressRegfileParams(jobs=4, ring=4, table=16, epoch_bits=5, age_bits=4)
RUNS = (Run("progress_regfile", PARAMS, "ring"),)
PCAPS = {"in": "ring flows in", "out": "out, CE marks set"}
JOB, CHUNK, DELTA, LAGGARD = 0, 2, 1, 2
#: Steps the others run while the laggard has sent its first; then steps in lock step.
AHEAD, TOGETHER = 6, 3
#: Flow (dest QP) of each ring position.
QP = 0x2A00
SIGNALS = ("i__valid", "o__valid", "tracked", "marked")


def packet(position, psn, size):
    """The next packet of ring position ``position`` to its neighbour, ECT(0)."""
    return roce_packet(src=f"10.0.0.{position + 1}", dst=f"10.0.0.{(position + 1) % PARAMS.ring + 1}",
                       sport=0xC000 + position, qp=QP + position, psn=psn, op=RC_SEND_MIDDLE, tos=wire.ECT0,
                       payload=bytes(size))


def marked(raw):
    return Ether(raw)[IP].tos & 3 == wire.ECN_CE


class Ring(tb.BlockTB):
    """Packets in and out, configuration commands; the lockstep compares every cycle."""

    name = "progress_regfile"

    def __init__(self, dut):
        super().__init__(dut)
        self.source, self.sink, self.cfg = self.packet_source("i"), self.packet_sink("o"), self.stream_source("cfg")
        self.psn = [0] * PARAMS.ring

    def config(self, **cmd):
        self.cfg.send_nowait({"qp": 0, "job": 0, "position": 0, "chunk": 0, "delta": 0, "age_out": 0, **cmd})

    def step(self, rng, positions):
        """One step (``CHUNK`` packets) of each of ``positions``, in a random order."""
        for position in rng.sample(positions, len(positions)):
            for _ in range(CHUNK):
                self.source.send_nowait(bytes(packet(position, self.psn[position], rng.randrange(0, 64))))
                self.psn[position] += 1


@cocotb.test()
async def ring(dut):
    """The laggard's first step, AHEAD steps of the others, the laggard's catch-up, TOGETHER steps of all."""
    rng = random.Random(tb.seed())
    t = Ring(dut)
    await t.reset()
    t.config(op=OP_JOB, job=JOB, chunk=CHUNK, delta=DELTA)
    for position in range(PARAMS.ring):
        t.config(op=OP_INSTALL, qp=QP + position, job=JOB, position=position)
    await t.cfg.wait_idle()
    others = [p for p in range(PARAMS.ring) if p != LAGGARD]
    t.step(rng, [LAGGARD])
    for _ in range(AHEAD):
        t.step(rng, others)
    for _ in range(AHEAD - 1):
        t.step(rng, [LAGGARD])
    for _ in range(TOGETHER):
        t.step(rng, list(range(PARAMS.ring)))
    await t.source.wait_idle()
    while len(t.sink.log) < len(t.source.log):
        await t.edge()
    await linger(t)
    counters = t.check_counters()
    t.write_pcaps()
    out = t.sink.log
    marks = [f for f in out if marked(f.data)]
    by_flow = [sum(Ether(f.data)[BTH].dqpn == QP + p for f in marks) for p in range(PARAMS.ring)]
    together = TOGETHER * PARAMS.ring * CHUNK
    level = out[-together]                      # the first packet out once the laggard is level again
    delays = {cycle(o.time) - cycle(i.time) for i, o in zip(t.source.log, out)}
    events = {"first mark": cycle(marks[0].time), "last mark": cycle(marks[-1].time),
              "level again": cycle(level.time)}
    tb.summary(demo={"packets": len(out), "ahead": AHEAD, "together": TOGETHER, "marked_by_flow": by_flow,
                     "marked_after": sum(map(marked, (f.data for f in out[-together:]))), "delays": sorted(delays),
                     "window": window(SIGNALS, events)})
    assert counters["marked"] == len(marks) and by_flow[LAGGARD] == 0


def story(summaries):
    (run,) = summaries
    d, c = run["demo"], run["counters"]
    per_flow = "; ".join(f"flow {p}: {n}" for p, n in enumerate(d["marked_by_flow"]))
    return [
        ("in", f"{d['packets']} RoCEv2 packets of a ring of {PARAMS.ring} flows (one job, {CHUNK} packets a step, "
               f"{DELTA} step of slack): flow {LAGGARD} sent its first step while the others ran {d['ahead']} "
               f"steps, then it caught up and all ran {d['together']} steps in lock step"),
        ("symphony", f"{c['marked']} packets marked CE while their flow was more than {DELTA} step ahead of flow "
                     f"{LAGGARD} ({per_flow}); once it was level again {d['marked_after']} marked "
                     f"({c['tracked']} tracked)"),
        ("baseline", f"a switch without the progress file marks none: the flows ahead keep their pace, "
                     f"{d['ahead'] - 1} steps past flow {LAGGARD}"),
        ("latency", f"none added: every packet left {'-'.join(map(str, d['delays']))} "
                    f"{'cycle' if d['delays'] == [1] else 'cycles'} after it went in, marked or not"),
    ]

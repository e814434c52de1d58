"""DBLP at work (``make sim BLOCK=dblp``): two rounds hit by a microburst at a receiver with a loss bound.

The training phase tolerates ``TAU``/256 of a round's packets lost. A burst takes a few packets of the
first round: at its LAST packet it has what its bound needs and closes BOUNDED, the missing ones declared
lost. A longer burst takes more of the second: below the bound, it is NACKed at its deadline (naming the
first missing index); the sender resends just what the bound needs and the round closes BOUNDED. The
baseline is a reliable receiver (tau 0): every missing packet is NACKed and resent, and no round closes
before its deadline has passed.
"""
import random

import cocotb

from demos import Run, cycle, linger, window
from models.bounded_loss_tracker import KINDS, BoundedLossTrackerParams, need_of
from models.headers import DBLP, Ether, dblp_packet
from testbenches import tb

TITLE = "a round closed BOUNDED under a burst, and one NACKed"
#: The tracker testbench's default parameters (one build for both): 16 round slots, 64 packets a round.
PARAMS = BoundedLossTrackerParams()
RUNS = (Run("bounded_loss_tracker", PARAMS, "burst"),)
PCAPS = {"in": "round packets in", "out": "packets forwarded to the host"}
#: Loss bound (Q0.8: 64/256 = 25 %) and deadline of the phase, packets a round, packets each burst takes.
TAU, DEADLINE, CNT, JOB = 64, 80, 32, 1
BURSTS = {10: 6, 11: 12}
SIGNALS = ("i__valid", "fwd__valid", "close__valid", "close__payload", "nack__valid", "nack__payload")


class Receiver(tb.BlockTB):
    """Round packets and the phase table in; forward, close and NACK events out (each kept with its cycle);
    the lockstep compares every cycle. A NACK makes the sender resend what the round's bound needs."""

    name = "bounded_loss_tracker"

    def __init__(self, dut, rounds):
        super().__init__(dut)
        self.source, self.cfg = self.packet_source("i"), self.stream_source("cfg")
        self.sinks = {name: self.stream_sink(name) for name in ("fwd", "close", "nack")}
        self.rounds, self.events, self.resent = rounds, [], {}

    def sampled(self, values):
        for name in self.sinks:
            if values[f"{name}__valid"] and values[f"{name}__ready"]:
                event = tb.unpack(self._layout(name), values[f"{name}__payload"])
                self.events.append((name, cycle(tb.now()), event))
                if name == "nack":
                    self.answer(event)

    def answer(self, nack):
        """Resend the missing packets the bound needs, from the first missing one on (RETX)."""
        lost = self.rounds[nack["round"]]["lost"]
        again = sorted(lost)[:nack["need"] - nack["count"]]
        self.resent[nack["round"]] = again
        for idx in again:
            self.source.send_nowait(bytes(packet(nack["round"], idx, retx=1)))


def packet(round_, idx, retx=0):
    return dblp_packet(job=JOB, round=round_, idx=idx, cnt=CNT, last=int(idx == CNT - 1), retx=retx,
                       payload=bytes([idx]) * 16, sport=49152 + round_)


@cocotb.test()
async def burst(dut):
    rng = random.Random(tb.seed())
    rounds = {}
    for r, taken in BURSTS.items():
        start = rng.randrange(1, CNT - taken - 1)
        rounds[r] = {"lost": set(range(start, start + taken))}
    t = Receiver(dut, rounds)
    await t.reset()
    t.cfg.send_nowait({"phase": 0, "tau": TAU, "deadline": DEADLINE})
    await t.cfg.wait_idle()
    for r, info in rounds.items():
        for idx in range(CNT):
            if idx not in info["lost"]:
                t.source.send_nowait(bytes(packet(r, idx)))
    while sum(name == "close" for name, _, _ in t.events) < len(rounds):
        await t.edge()
    await linger(t)
    t.check_counters()
    forwarded = {(e["round"], e["idx"]) for name, _, e in t.events if name == "fwd"}
    t.write_pcaps(outputs=[f for f in t.source.log if (Ether(f.data)[DBLP].round, Ether(f.data)[DBLP].idx)
                           in forwarded])
    facts = {}
    for r in rounds:
        mine = [(name, at, e) for name, at, e in t.events if e["round"] == r]
        first = min(at for name, at, _ in mine if name == "fwd")
        close = next((at, e) for name, at, e in mine if name == "close")
        nack = next(((at, e) for name, at, e in mine if name == "nack"), None)
        facts[r] = {"lost": len(rounds[r]["lost"]), "first": first, "closed": close[0], "kind": KINDS[close[1]["kind"]],
                    "count": close[1]["count"], "need": close[1]["need"], "resent": len(t.resent.get(r, ())),
                    "nack": None if nack is None else {"at": nack[0], "count": nack[1]["count"],
                                                       "missing": nack[1]["missing"]}}
    quiet, noisy = (facts[r] for r in BURSTS)
    events = {f"round {min(BURSTS)} BOUNDED": quiet["closed"], f"round {max(BURSTS)} NACK": noisy["nack"]["at"],
              f"round {max(BURSTS)} BOUNDED": noisy["closed"]}
    tb.summary(demo={"rounds": facts, "window": window(SIGNALS, events)})


def story(summaries):
    (run,) = summaries
    c = run["counters"]
    a, b = (run["demo"]["rounds"][str(r)] for r in BURSTS)
    ra, rb = BURSTS
    need = need_of(CNT, TAU)
    return [
        ("in", f"two rounds of {CNT} packets, loss bound {TAU}/256 (a round needs {need}), deadline {DEADLINE} "
               f"cycles; a burst took {a['lost']} packets of round {ra} and {b['lost']} of round {rb}"),
        ("dblp", f"round {ra} closed {a['kind']} at its last packet, cycle {a['closed']} ({a['count']} of {CNT}, "
                 f"{CNT - a['count']} declared lost); round {rb} ({b['nack']['count']} of {CNT}) was NACKed at its "
                 f"deadline, cycle {b['nack']['at']} (first missing index {b['nack']['missing']}), the sender resent "
                 f"{b['resent']} and it closed {b['kind']} at cycle {b['closed']} ({CNT - b['count']} lost); "
                 f"counters: {c['bounded']} bounded, {c['nacks']} NACK, {c['loss_accepted']} packets lost within "
                 f"the bound"),
        ("baseline", f"a reliable receiver (tau 0) needs all {CNT}: it NACKs both rounds at their deadlines and "
                     f"waits for {a['lost']} and {b['lost']} resent packets"),
        ("latency", f"round {ra} took {a['closed'] - a['first']} cycles from its first packet to its close (reliable: "
                    f"more than its {DEADLINE}-cycle deadline); round {rb}, NACKed, took "
                    f"{b['closed'] - b['first']}"),
    ]

"""SDR-RDMA scenario: messages over a lossy long-haul link into the ``ChunkBitmap`` tracker.

A Python sender pushes one message at a time over a lossy link (time in injection units: one chunk
is injected per unit, the one-way delay is RTT/2) into the tracker, which decides which packets are
placed, which chunks are complete (``chunk_done``) and when the message is (``msg_done``); the
sender reacts only to those decisions (ACKs return RTT/2 after them). Schemes (SPEC section 6):
- ``sr_rto``: Selective Repeat, per-chunk RTO = RTT + alpha RTT with alpha = 2 (3 RTT);
- ``sr_nack``: the same with alpha = 0 (1 RTT, as a NACK-driven receiver answers);
- ``ec_mds`` / ``ec_xor``: EC(32, 8): submessages of 32 data chunks then 8 parity chunks (MDS or
  XOR, i mod m groups); a submessage is done as soon as the tracker's chunk bitmap makes it
  recoverable (``ec_recoverable``); one not done within RTT + beta RTT (beta = alpha / 2) of its last
  chunk's injection falls back to SR (3 RTT) for its data chunks not yet complete.
Link (*chosen*): each transmission of a chunk is lost with probability P_drop (the paper's chunk
drop probability); a lost transmission loses its packets from a uniformly drawn one to the chunk's
end (a burst), so the tracker sees partial chunks and duplicates, and a chunk completes exactly
when one of its transmissions is not lost: Y_i is geometric as App. A assumes. Packets of one time
unit arrive in random order over random channels. Retransmissions do not delay first transmissions
(App. A). The tracker processes a packet per cycle, far faster than a time unit: each unit's
arrivals are decided before the next unit's. A done message is ``complete``d (NULL key): packets
still in flight are then ``no_slot``.

Who decides: the drop-rate x size sweep runs on the golden model ``ChunkBitmapModel`` (the model the
RTL is compared with every cycle in ``testbenches/test_chunk_bitmap.py``); ``test_sdr_rtl`` runs a
subset on the ``ChunkBitmap`` RTL under Verilator (every cycle checked against the model by the
testbench's monitor) and requires the same completion times and outcome counts as the model-driven
run of the same seeds. Checks: the mean SR completion time within 5 % of App. A (``sr_mean_time``;
trials are added until 3 standard errors fit in 5 %), the EC fallback rate within 4 standard
errors of 1 - P_EC^L, and the trend (every scheme at its lossless time at low loss; MDS beats SR-RTO
from 1e-2 on without falling back at 1e-2; at 1e-1 XOR falls back more than twice as often as MDS and
lands between MDS and SR-RTO). Output: ``build/scenarios/sdr.csv`` and ``.png``.
``python -m scenarios.test_sdr --full`` runs a bigger sweep (more sizes and rates).
"""
import heapq
import json
import math
import random
import statistics
import sys
import time
from collections import Counter

import cocotb
import pytest

from hdl.chunk_bitmap import ChunkBitmap
from models.chunk_bitmap import OUTCOMES, ChunkBitmapModel, ChunkBitmapParams, ec_recoverable
from models.chunk_bitmap_oracle import ec_timeout, mds_fail, p_fallback, sr_mean_time, sr_rto, xor_fail
from scenarios.common import OUT, figure, write_csv
from testbenches import runner, tb
from testbenches.test_chunk_bitmap import TB, complete, pkt, post
from tools.cli import Parser, integer, run

#: The default parameters: the scenario shares the cocotb tests' Verilator build.
PARAMS = ChunkBitmapParams()
CHUNK = 2                       # packets per chunk
RTT = 100                       # injection units
ALPHA = 2                       # RTO = 3 RTT; EC timeout RTT + alpha / 2 RTT
K, M = 32, 8                    # EC(32, 8)
SCHEMES = ("sr_rto", "sr_nack", "ec_mds", "ec_xor")
SWEEPS = {"ci": dict(sizes=(32, 128), rates=(1e-6, 1e-3, 1e-2, 1e-1), ec_trials=60, max_trials=3000),
          "full": dict(sizes=(32, 64, 128, 160), rates=(1e-6, 1e-5, 1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1),
                       ec_trials=400, max_trials=10000)}
MIN_TRIALS = 40
#: RTL subset: (scheme, chunks, P_drop, trials) for every scheme.
RTL_RUNS = [(s, 32, 1e-1, 3) for s in SCHEMES] + [(s, 128, p, 1) for s in SCHEMES for p in (1e-2, 1e-1)]
ACK, ARRIVE, SEND, DEADLINE = range(4)  # order of events at the same time


def seed():
    """The scenario's seed: ``INNET_SEED`` if set, else 1 (the run reported in the README)."""
    return runner.traffic_seed(default=1)


def closed_form(scheme, chunks, p):
    """App. A's mean SR completion time, or the EC fallback probability 1 - P_EC^L."""
    if scheme.startswith("sr"):
        rto = int(sr_rto(RTT, ALPHA if scheme == "sr_rto" else 0))
        return sr_mean_time(chunks, 1, rto, RTT, p)
    return p_fallback((mds_fail if scheme == "ec_mds" else xor_fail)(K, M, p), chunks // K)


class Transfer:
    """One message of ``chunks`` data chunks under ``scheme``; ``run()`` is a generator yielding
    ``("cmd", command)`` (answer None) and ``("pkts", [raw, ...])`` (answer: per packet the tracker's
    ``(outcome, chunk_done, msg_done)``); it returns the message's stats."""

    def __init__(self, scheme, chunks, p_drop, rng, msg, gen):
        self.scheme, self.p, self.rng, self.msg, self.gen = scheme, p_drop, rng, msg, gen
        self.ec = scheme.startswith("ec")
        self.subs = chunks // K if self.ec else 0
        self.total = self.subs * (K + M) if self.ec else chunks
        self.o = int(sr_rto(RTT, ALPHA if scheme != "sr_nack" else 0)) + 1      # O = RTO + T_INJ
        self.heap, self.seq, self.arrivals = [], 0, {}

    def _at(self, t, kind, arg=None):
        heapq.heappush(self.heap, (t, kind, self.seq, arg))
        self.seq += 1

    def _send(self, t, c):
        """Transmit chunk ``c`` at ``t``: lost with probability P_drop, then from a random packet on."""
        cut = self.rng.randrange(CHUNK) if self.rng.random() < self.p else CHUNK
        if cut:
            if t + RTT // 2 not in self.arrivals:
                self._at(t + RTT // 2, ARRIVE)
            self.arrivals.setdefault(t + RTT // 2, []).extend(c * CHUNK + j for j in range(cut))
        self.sent += 1

    def run(self):
        p, ec = PARAMS, self.ec
        yield "cmd", post(self.msg, self.total * CHUNK, CHUNK, self.gen)
        acked, got, sub_ok, sub_acked = set(), set(), set(), set()
        fallback, outcomes, finish, self.sent = set(), Counter(), None, 0
        for c in range(self.total):
            self._at(c, SEND, (c, not ec))
        for sub in range(self.subs):
            self._at((sub + 1) * (K + M) - 1 + int(ec_timeout(RTT, ALPHA)), DEADLINE, sub)
        while self.heap:
            t, kind, _, arg = heapq.heappop(self.heap)
            if kind == ACK:
                (sub_acked if ec and arg < 0 else acked).add(arg if arg >= 0 else -1 - arg)
            elif kind == SEND:
                c, retry = arg
                if c in acked or (ec and c // (K + M) in sub_acked):
                    continue
                self._send(t, c)
                if retry:
                    self._at(t + self.o, SEND, (c, True))
            elif kind == DEADLINE and arg not in sub_acked:
                fallback.add(arg)
                for c in range(arg * (K + M), arg * (K + M) + K):
                    self._at(t, SEND, (c, True))
            elif kind == ARRIVE:
                offsets = self.arrivals.pop(t)
                self.rng.shuffle(offsets)
                results = yield "pkts", [pkt(p, self.msg, o, self.gen, self.rng.randrange(p.channels))
                                         for o in offsets]
                done = False
                for outcome, chunk, msg_done in results:
                    outcomes[outcome] += 1
                    if chunk is None:
                        done |= msg_done and not ec
                        continue
                    got.add(chunk)
                    self._at(t + RTT // 2, ACK, chunk)
                    sub = chunk // (K + M)
                    base = sub * (K + M)
                    if ec and sub not in sub_ok and ec_recoverable(
                            [i for i in range(K + M) if base + i not in got], K, M, self.scheme[3:]):
                        sub_ok.add(sub)
                        self._at(t + RTT // 2, ACK, -1 - sub)
                    done |= msg_done and not ec
                if finish is None and (done or (ec and len(sub_ok) == self.subs)):
                    finish = t + RTT // 2
                    yield "cmd", complete(self.msg)
        assert finish is not None, f"{self.scheme}: message {self.msg} never completed"
        return dict(finish=finish, fallback=len(fallback), sent=self.sent, outcomes=outcomes)


def model_receiver(model):
    """The tracker's answers from the golden model."""
    def answer(kind, arg):
        if kind == "cmd":
            model.command(arg)
            return None
        return [(r.outcome, r.chunk_done, r.msg_done) for r in map(model.packet, arg)]
    return answer


def drive(transfer, answer):
    """Run ``transfer`` against a synchronous ``answer(kind, arg)``; its stats."""
    gen, reply = transfer.run(), None
    try:
        while True:
            reply = answer(*gen.send(reply))
    except StopIteration as stop:
        return stop.value


def point_rng(seed_, scheme, chunks, p):
    return random.Random(f"{seed_}/{scheme}/{chunks}/{p}")


def run_point(scheme, chunks, p, seed_, answer, trials=None, max_trials=0, first_msg=0):
    """Messages of one sweep point: ``trials`` of them, or (SR) until 3 standard errors of the mean
    fit in 5 % of App. A (at least ``MIN_TRIALS``, at most ``max_trials``)."""
    rng, stats = point_rng(seed_, scheme, chunks, p), []
    target = closed_form(scheme, chunks, p) if scheme.startswith("sr") else None
    while True:
        n = len(stats)
        msg = (first_msg + n) % (1 << PARAMS.msg_bits)
        stats.append(drive(Transfer(scheme, chunks, p, rng, msg, n % PARAMS.generations), answer))
        if trials is not None:
            if len(stats) == trials:
                return stats
        elif len(stats) >= MIN_TRIALS:
            se = statistics.stdev(s["finish"] for s in stats) / math.sqrt(len(stats))
            if 3 * se <= 0.05 * target or len(stats) >= max_trials:
                return stats


def summarise(scheme, chunks, p, stats):
    finish = sorted(s["finish"] for s in stats)
    n = len(finish)
    mean = statistics.fmean(finish)
    ideal = chunks - 1 + RTT
    coded = (chunks // K - 1) * (K + M) + K - 1 + RTT if scheme.startswith("ec") else ideal
    row = dict(scheme=scheme, chunks=chunks, p_drop=p, trials=n, mean=mean,
               se=statistics.stdev(finish) / math.sqrt(n) if n > 1 else 0.0,
               p99=finish[min(n - 1, math.ceil(0.99 * n) - 1)], max=finish[-1], ideal=ideal, lossless=coded,
               slowdown=mean / ideal,
               fallback=sum(s["fallback"] > 0 for s in stats) / n, closed=closed_form(scheme, chunks, p),
               sent=sum(s["sent"] for s in stats))
    out = Counter()
    for s in stats:
        out.update(s["outcomes"])
    row.update({o: out[o] for o in OUTCOMES})
    return row


def sweep(kind, seed_):
    """Every scheme x size x rate on the golden model; rows (dicts)."""
    cfg, model, rows, msg = SWEEPS[kind], ChunkBitmapModel(PARAMS), [], 0
    answer = model_receiver(model)
    for chunks in cfg["sizes"]:
        for p in cfg["rates"]:
            for scheme in SCHEMES:
                ec = scheme.startswith("ec")
                stats = run_point(scheme, chunks, p, seed_, answer, trials=cfg["ec_trials"] if ec else None,
                                  max_trials=cfg["max_trials"], first_msg=msg)
                msg += len(stats)
                rows.append(summarise(scheme, chunks, p, stats))
    for row in rows:
        ref = next(r for r in rows if r["scheme"] == "sr_rto" and (r["chunks"], r["p_drop"]) == (row["chunks"],
                                                                                                   row["p_drop"]))
        row["speedup"] = ref["mean"] / row["mean"]
    return rows


def check(rows):
    """The scenario's assertions; the list of failures (empty when all hold)."""
    bad = []
    for r in rows:
        name = f"{r['scheme']} {r['chunks']} chunks P_drop {r['p_drop']:g}"
        if r["scheme"].startswith("sr"):
            if abs(r["mean"] - r["closed"]) > 0.05 * r["closed"]:
                bad.append(f"{name}: mean {r['mean']:.1f} vs App. A {r['closed']:.1f} (> 5 %, {r['trials']} trials)")
        else:
            tol = 4 * math.sqrt(r["closed"] * (1 - r["closed"]) / r["trials"]) + 2 / r["trials"]
            if abs(r["fallback"] - r["closed"]) > tol:
                bad.append(f"{name}: fallback {r['fallback']:.3f} vs 1 - P_EC^L {r['closed']:.3f} (tol {tol:.3f})")
        if r["p_drop"] <= 1e-4 and r["mean"] > 1.05 * r["lossless"]:
            bad.append(f"{name}: mean {r['mean']:.1f} vs {r['lossless']} without loss")
        if r["scheme"] == "ec_mds" and r["p_drop"] >= 1e-2 and r["speedup"] <= 1:
            bad.append(f"{name}: MDS not faster than SR-RTO ({r['speedup']:.2f}x)")
        if r["scheme"] == "ec_mds" and r["p_drop"] == 1e-2 and r["fallback"]:
            bad.append(f"{name}: MDS falls back at 1e-2 ({r['fallback']:.3f})")
    for size in {r["chunks"] for r in rows}:
        at = {r["scheme"]: r for r in rows if r["chunks"] == size and r["p_drop"] == 1e-1}
        if at and not (at["ec_xor"]["fallback"] > 2 * at["ec_mds"]["fallback"]
                       and at["ec_mds"]["mean"] < at["ec_xor"]["mean"] < at["sr_rto"]["mean"]):
            bad.append(f"{size} chunks at 1e-1: XOR should fall back more than MDS and sit between MDS and SR-RTO: "
                       f"{ {k: (round(v['fallback'], 3), round(v['mean'], 1)) for k, v in at.items()} }")
    return bad


COLUMNS = ("scheme", "chunks", "p_drop", "trials", "mean", "se", "p99", "max", "ideal", "lossless", "slowdown",
           "closed", "fallback", "speedup", "sent") + OUTCOMES
STYLE = {"sr_rto": ("tab:red", "SR RTO 3 RTT"), "sr_nack": ("tab:orange", "SR 1 RTT"),
         "ec_mds": ("tab:blue", "EC(32,8) MDS"), "ec_xor": ("tab:green", "EC(32,8) XOR")}


def write(rows, seed_, name="sdr"):
    """CSV + PNG; the headline (one line of numbers)."""
    csv = write_csv(name, COLUMNS, [[round(r[c], 6) if isinstance(r[c], float) else r[c] for c in COLUMNS]
                                    for r in rows])
    sizes = sorted({r["chunks"] for r in rows})
    with figure(name, cols=3, seed=seed_) as (slow, speed, fall):
        for scheme, (color, label) in STYLE.items():
            for size, dash in zip(sizes, ("--", ":", "-.", "-")[-len(sizes):]):
                pts = [r for r in rows if (r["scheme"], r["chunks"]) == (scheme, size)]
                x = [r["p_drop"] for r in pts]
                slow.plot(x, [r["slowdown"] for r in pts], dash, marker="o", color=color, label=f"{label}, {size}")
                if scheme.startswith("sr"):
                    slow.plot(x, [r["closed"] / r["ideal"] for r in pts], "x", color="black",
                              label="App. A" if (scheme, size) == ("sr_rto", sizes[0]) else None)
                else:
                    speed.plot(x, [r["speedup"] for r in pts], dash, marker="o", color=color, label=f"{label}, {size}")
                    fall.plot(x, [r["fallback"] for r in pts], dash, marker="o", color=color,
                              label=f"{label}, {size}")
                    fall.plot(x, [r["closed"] for r in pts], "x", color="black",
                              label="1 - P_EC^L" if (scheme, size) == ("ec_mds", sizes[0]) else None)
        slow.set(xscale="log", xlabel="chunk drop probability P_drop", ylabel="mean completion / ideal",
                 title=f"slowdown vs ideal (RTT {RTT} chunk times)")
        speed.set(xscale="log", xlabel="chunk drop probability P_drop", ylabel="mean T(SR RTO 3 RTT) / mean T(EC)",
                  title="EC speedup over SR")
        fall.set(xscale="log", xlabel="chunk drop probability P_drop", ylabel="messages falling back to SR",
                 title="EC fallback rate vs closed form")
        for ax in (slow, speed, fall):
            ax.legend(fontsize="x-small")
    worst = max((abs(r["mean"] - r["closed"]) / r["closed"] for r in rows if r["scheme"].startswith("sr")))
    big = max(sizes)
    at = {(r["scheme"], r["p_drop"]): r for r in rows if r["chunks"] == big}
    top = max(r["p_drop"] for r in rows)
    headline = (f"{big} chunks at P_drop {top:g}: slowdown SR-RTO {at['sr_rto', top]['slowdown']:.2f}x, "
                f"SR-1RTT {at['sr_nack', top]['slowdown']:.2f}x, MDS {at['ec_mds', top]['slowdown']:.2f}x "
                f"(speedup {at['ec_mds', top]['speedup']:.2f}x, p99 "
                f"{at['sr_rto', top]['p99'] / at['ec_mds', top]['p99']:.2f}x), XOR fallback "
                f"{at['ec_xor', top]['fallback']:.2f} (closed {at['ec_xor', top]['closed']:.2f}); "
                f"SR mean vs App. A within {100 * worst:.1f} %")
    return headline, [csv, OUT / f"{name}.png"]


@cocotb.test()
async def sdr(dut):
    """The RTL subset: the RTL's decisions drive the sender (the monitor checks every cycle)."""
    t = TB(dut, random.Random(0))
    await tb.reset(dut)
    out, msg = {}, 0

    async def answer(kind, arg):
        if kind == "cmd":
            t.command(arg)
            await t.settle()
            return None
        start = len(t.outputs)
        for raw in arg:
            t.send(raw)
        await t.settle()
        return [(OUTCOMES[g["outcome"]], g["chunk"] if g["chunk_done"] else None, bool(g["msg_done"]))
                for g in t.outputs[start:]]

    for scheme, chunks, p, trials in RTL_RUNS:
        rng, stats = point_rng(tb.seed(), scheme, chunks, p), []
        for n in range(trials):
            gen, reply = Transfer(scheme, chunks, p, rng, msg, n % t.params.generations).run(), None
            try:
                while True:
                    reply = await answer(*gen.send(reply))
            except StopIteration as stop:
                stats.append(stop.value)
            msg += 1
        out[f"{scheme}/{chunks}/{p}"] = stats
    await t.finish("sdr")
    (tb.run_dir() / "result.json").write_text(json.dumps(out))


def rtl_reference(seed_):
    """The RTL subset on the golden model: the same seeds, the same message ids."""
    model, out, msg = ChunkBitmapModel(PARAMS), {}, 0
    answer = model_receiver(model)
    for scheme, chunks, p, trials in RTL_RUNS:
        stats = run_point(scheme, chunks, p, seed_, answer, trials=trials, first_msg=msg)
        msg += trials
        out[f"{scheme}/{chunks}/{p}"] = [dict(s, outcomes=dict(s["outcomes"])) for s in stats]
    return out


@pytest.mark.xdist_group("chunk_bitmap-default")     # the cocotb tests' build of the same parameters
def test_sdr_rtl(record_property):
    """The RTL as the receiver: the same completion times, fallbacks and outcomes as the golden model."""
    run = runner.run(ChunkBitmap, PARAMS, "scenarios.test_sdr", "sdr", block="chunk_bitmap", seed=seed())
    got = json.loads((run / "result.json").read_text())
    assert got == rtl_reference(seed()), "the RTL-driven transfers differ from the model-driven ones"
    record_property("innet", run)


def test_sdr(record_property):
    """The drop-rate x size sweep on the golden model against App. A and 1 - P_EC^L, and the trend."""
    rows = sweep("ci", seed())
    headline, files = write(rows, seed())
    print(headline)
    record_property("innet", {"kind": "scenario", "name": "sdr", "seed": seed(), "headline": headline,
                              "files": files})
    bad = check(rows)
    assert not bad, "\n".join(bad)


def main(argv=None):
    parser = Parser(prog="sdr", description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the bigger sweep (4 sizes, 8 rates, more trials)")
    parser.add_argument("--seed", type=integer(0), default=None, help="seed (default: INNET_SEED or 1)")
    args = parser.parse_args(argv)
    seed_ = seed() if args.seed is None else args.seed
    start = time.time()
    rows = sweep("full" if args.full else "ci", seed_)
    headline, files = write(rows, seed_, "sdr_full" if args.full else "sdr")
    print(f"{headline} ({time.time() - start:.1f} s); files: {', '.join(map(str, files))}")
    bad = check(rows)
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(run("sdr", main))

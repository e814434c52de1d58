"""SDR-RDMA: messages over a lossy long-haul link into the ``ChunkBitmap`` tracker, selective repeat
against erasure coding, in the paper's regime.

Time is in chunk injection times (T_INJ). The default is the paper's regime: a 25 ms RTT at 400 Gbit/s with
64 KiB chunks (16 packets of 4 KiB: T_INJ = 1.31 us), so the RTT is ``rtt`` = 19073 T_INJ, far longer than a
message's injection time. The tracker sees each chunk as ``CHUNK`` packets (*chosen*, to keep the model's
work per message small; completion is per chunk either way). The run is event-driven (``scenarios.net``:
nothing happens between a chunk's injection, its arrival and its ACK), so a message costs events per chunk,
not per time unit. Schemes (SPEC section 6):

- ``sr_rto``: selective repeat, per-chunk RTO = RTT + alpha RTT, alpha = 2 (3 RTT);
- ``sr_nack``: the same with alpha = 0 (1 RTT, as a NACK-driven receiver answers);
- ``ec_mds`` / ``ec_xor``: EC(32, 8): submessages of 32 data chunks then 8 parity chunks (MDS or XOR, i mod m
  groups); a submessage is done as soon as the tracker's chunk bitmap makes it recoverable
  (``ec_recoverable``); one not done within RTT + beta RTT (beta = alpha / 2) of its last chunk's injection
  falls back to selective repeat (3 RTT) for its data chunks not yet complete.

Link (*chosen*): each transmission of a chunk is lost with probability P_drop (the paper's chunk drop
probability), from a uniformly drawn packet to the chunk's end, so the tracker sees partial chunks and
duplicates, and a chunk completes exactly when one of its transmissions is not lost (Y_i geometric, as App. A
assumes). Packets arriving at one time come in random order over random channels. A done message is
``complete``d (NULL key): packets still in flight are then ``no_slot``.

The tracker is the golden model ``ChunkBitmapModel``; ``record`` keeps its inputs (commands and packets in
order), which the thin test replays on the RTL through the lockstep. Reported per scheme, size and drop rate:
mean and p99.9 completion, slowdown against the lossless time, EC's speedup over SR-RTO, the fallback rate
against 1 - P_EC^L, the SR mean against App. A (``sr_mean_time``).
"""
import math
import statistics
import time
from collections import Counter

from models.chunk_bitmap import OUTCOMES, ChunkBitmapModel, ChunkBitmapParams, ec_recoverable
from models.chunk_bitmap_oracle import ec_timeout, mds_fail, p_fallback, sr_mean_time, sr_rto, xor_fail
from scenarios.common import OUT, figure, write_csv, write_summary
from scenarios.net import Calendar, SelectiveRepeat, stream
from testbenches.test_chunk_bitmap import complete, pkt, post

__all__ = ["Transfer", "sweep", "check", "arguments", "main", "RTT"]

PARAMS = ChunkBitmapParams()
CHUNK = 2                       # packets per chunk at the tracker
RTT = 19073                     # 25 ms at 400 Gbit/s in 64 KiB chunk times
ALPHA = 2                       # RTO = 3 RTT; EC timeout RTT + alpha / 2 RTT
K, M = 32, 8                    # EC(32, 8)
SCHEMES = ("sr_rto", "sr_nack", "ec_mds", "ec_xor")
SIZES = (128,)
RATES = (1e-6, 1e-5, 1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)


def closed_form(scheme, chunks, p, rtt):
    """App. A's mean SR completion time, or the EC fallback probability 1 - P_EC^L."""
    if scheme.startswith("sr"):
        return sr_mean_time(chunks, 1, int(sr_rto(rtt, ALPHA if scheme == "sr_rto" else 0)), rtt, p)
    return p_fallback((mds_fail if scheme == "ec_mds" else xor_fail)(K, M, p), chunks // K)


class Transfer:
    """One message of ``chunks`` data chunks under ``scheme`` on its own calendar (time 0 = its first
    injection); ``tracker(kind, arg)`` answers a command (``kind`` "cmd") or a packet (``kind`` "pkt": its
    ``(outcome, chunk_done, msg_done)``). ``run()`` returns the message's stats."""

    def __init__(self, scheme, chunks, p_drop, rng, msg, gen, tracker, rtt=RTT):
        self.scheme, self.p, self.rng, self.msg, self.gen, self.tracker, self.rtt = (
            scheme, p_drop, rng, msg, gen, tracker, rtt)
        self.ec = scheme.startswith("ec")
        self.subs = chunks // K if self.ec else 0
        self.total = self.subs * (K + M) if self.ec else chunks
        self.cal = Calendar()
        period = int(sr_rto(rtt, ALPHA if scheme != "sr_nack" else 0)) + 1          # O = RTO + T_INJ
        self.sr = SelectiveRepeat(self.cal, self._send, period)
        self.arrivals = {}
        self.got, self.sub_ok, self.sub_acked, self.fallback = set(), set(), set(), set()
        self.outcomes, self.finish, self.first_sent = Counter(), None, 0

    def run(self):
        self.tracker("cmd", post(self.msg, self.total * CHUNK, CHUNK, self.gen))
        for c in range(self.total):
            if self.ec:
                self.cal.at(c, self._send, c)           # EC: each chunk once, SR only on fallback
            else:
                self.sr.start(c, c)
        for sub in range(self.subs):
            self.cal.at((sub + 1) * (K + M) - 1 + int(ec_timeout(self.rtt, ALPHA)), self._deadline, sub)
        self.cal.run()                                  # until the packets in flight have arrived
        if self.finish is None:
            raise AssertionError(f"{self.scheme}: message {self.msg} never completed")
        return dict(finish=self.finish, fallback=len(self.fallback), sent=self.first_sent + self.sr.sent,
                    outcomes=self.outcomes, events=self.cal.events)

    def _send(self, c):
        """Transmit chunk ``c``: lost with probability P_drop, then from a random packet on."""
        if self.sr.stopped or (self.ec and c // (K + M) in self.sub_acked):
            return
        if self.ec:
            self.first_sent += 1
        cut = self.rng.randrange(CHUNK) if self.rng.random() < self.p else CHUNK
        if cut:
            at = self.cal.now + self.rtt // 2
            if at not in self.arrivals:
                self.arrivals[at] = []
                self.cal.at(at, self._arrive)
            self.arrivals[at].extend(c * CHUNK + j for j in range(cut))

    def _deadline(self, sub):
        if sub in self.sub_acked or self.sr.stopped:
            return
        self.fallback.add(sub)
        for c in range(sub * (K + M), sub * (K + M) + K):
            if c not in self.got:
                self.sr.start(c, self.cal.now)

    def _ack(self, item):
        if item < 0:                                    # a submessage recoverable: its chunks stop
            sub = -1 - item
            self.sub_acked.add(sub)
            for c in range(sub * (K + M), (sub + 1) * (K + M)):
                self.sr.ack(c)
        else:
            self.sr.ack(item)

    def _arrive(self):
        offsets = self.arrivals.pop(self.cal.now)
        self.rng.shuffle(offsets)
        done = False
        for o in offsets:
            outcome, chunk, msg_done = self.tracker(
                "pkt", pkt(PARAMS, self.msg, o, self.gen, self.rng.randrange(PARAMS.channels)))
            self.outcomes[outcome] += 1
            if chunk is None:
                done |= msg_done and not self.ec
                continue
            self.got.add(chunk)
            self.cal.after(self.rtt // 2, self._ack, chunk)
            sub = chunk // (K + M)
            base = sub * (K + M)
            if self.ec and sub not in self.sub_ok and ec_recoverable(
                    [i for i in range(K + M) if base + i not in self.got], K, M, self.scheme[3:]):
                self.sub_ok.add(sub)
                self.cal.after(self.rtt // 2, self._ack, -1 - sub)
            done |= msg_done and not self.ec
        if self.finish is None and (done or (self.ec and len(self.sub_ok) == self.subs)):
            self.finish = self.cal.now + self.rtt // 2
            self.tracker("cmd", complete(self.msg))       # NULL key: packets still in flight are no_slot
            self.cal.at(self.finish, self.sr.stop)           # the sender learns it: no more retransmissions


class Tracker:
    """The golden model as the receiver; ``record`` (if kept) lists its inputs in order."""

    def __init__(self, record=False):
        self.model = ChunkBitmapModel(PARAMS)
        self.record = [] if record else None

    def __call__(self, kind, arg):
        if self.record is not None:
            self.record.append((kind, arg))
        if kind == "cmd":
            return self.model.command(arg)
        r = self.model.packet(arg)
        return r.outcome, r.chunk_done, r.msg_done


def run_point(scheme, chunks, p, seed, tracker, trials, rtt=RTT, first_msg=0):
    """``trials`` messages of one point, the tracker ``tracker``'s message ids from ``first_msg`` on."""
    rng, stats = stream(seed, "sdr", scheme, chunks, p), []
    while len(stats) < trials:
        n = len(stats)
        msg = (first_msg + n) % (1 << PARAMS.msg_bits)
        stats.append(Transfer(scheme, chunks, p, rng, msg, n % PARAMS.generations, tracker, rtt).run())
    return stats


def percentile(ordered, q):
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summarise(scheme, chunks, p, stats, rtt):
    finish = sorted(s["finish"] for s in stats)
    n = len(finish)
    mean = statistics.fmean(finish)
    ideal = chunks - 1 + rtt
    lossless = (chunks // K - 1) * (K + M) + K - 1 + rtt if scheme.startswith("ec") else ideal
    row = dict(scheme=scheme, chunks=chunks, p_drop=p, trials=n, mean=mean,
               se=statistics.stdev(finish) / math.sqrt(n) if n > 1 else 0.0,
               p99=percentile(finish, 0.99), p999=percentile(finish, 0.999), max=finish[-1], ideal=ideal,
               lossless=lossless, slowdown=mean / ideal, fallback=sum(s["fallback"] > 0 for s in stats) / n,
               closed=closed_form(scheme, chunks, p, rtt), sent=sum(s["sent"] for s in stats),
               events=sum(s["events"] for s in stats))
    out = Counter()
    for s in stats:
        out.update(s["outcomes"])
    row.update({o: out[o] for o in OUTCOMES})
    return row


def sweep(seed, sizes=SIZES, rates=RATES, trials=1000, rtt=RTT, tracker=None):
    """Every scheme x size x rate; rows (dicts) with ``speedup`` and ``p999_speedup`` over SR-RTO."""
    tracker, rows, msg = tracker or Tracker(), [], 0
    for chunks in sizes:
        for p in rates:
            for scheme in SCHEMES:
                stats = run_point(scheme, chunks, p, seed, tracker, trials, rtt, first_msg=msg)
                msg += len(stats)
                rows.append(summarise(scheme, chunks, p, stats, rtt))
    for row in rows:
        ref = next(r for r in rows if r["scheme"] == "sr_rto" and (r["chunks"], r["p_drop"]) == (row["chunks"],
                                                                                                   row["p_drop"]))
        row["speedup"], row["p999_speedup"] = ref["mean"] / row["mean"], ref["p999"] / row["p999"]
    return rows


def check(rows):
    """The scenario's oracle; the list of failures (empty when all hold): the SR mean within 5 % of App. A
    (where enough trials make 3 standard errors fit in 5 %), the fallback rate within 4 standard errors of
    1 - P_EC^L, every scheme at its lossless time at low loss, MDS faster than SR-RTO from 1e-2 on."""
    bad = []
    for r in rows:
        name = f"{r['scheme']} {r['chunks']} chunks P_drop {r['p_drop']:g}"
        if r["scheme"].startswith("sr"):
            if 3 * r["se"] <= 0.05 * r["closed"] and abs(r["mean"] - r["closed"]) > 0.05 * r["closed"]:
                bad.append(f"{name}: mean {r['mean']:.1f} vs App. A {r['closed']:.1f} (> 5 %, {r['trials']} trials)")
        else:
            tol = 4 * math.sqrt(r["closed"] * (1 - r["closed"]) / r["trials"]) + 2 / r["trials"]
            if abs(r["fallback"] - r["closed"]) > tol:
                bad.append(f"{name}: fallback {r['fallback']:.3f} vs 1 - P_EC^L {r['closed']:.3f} (tol {tol:.3f})")
        if r["p_drop"] <= 1e-5 and r["mean"] > 1.05 * r["lossless"]:
            bad.append(f"{name}: mean {r['mean']:.1f} vs {r['lossless']} without loss")
        if r["scheme"] == "ec_mds" and r["p_drop"] >= 1e-2 and r["speedup"] <= 1:
            bad.append(f"{name}: MDS not faster than SR-RTO ({r['speedup']:.2f}x)")
    return bad


COLUMNS = ("scheme", "chunks", "p_drop", "trials", "mean", "se", "p99", "p999", "max", "ideal", "lossless",
           "slowdown", "closed", "fallback", "speedup", "p999_speedup", "sent", "events") + OUTCOMES
STYLE = {"sr_rto": ("tab:red", "SR RTO 3 RTT"), "sr_nack": ("tab:orange", "SR 1 RTT"),
         "ec_mds": ("tab:blue", "EC(32,8) MDS"), "ec_xor": ("tab:green", "EC(32,8) XOR")}


def plot(rows, seed, name, out, rtt):
    """Two panels: EC's speedup over SR-RTO (mean and p99.9) per drop rate; the fallback rate against
    1 - P_EC^L."""
    big = max(r["chunks"] for r in rows)
    with figure(name, cols=2, width=6.5, height=4.2, seed=seed, out=out) as (speed, fall):
        for scheme in ("sr_nack", "ec_mds", "ec_xor"):
            color, label = STYLE[scheme]
            pts = [r for r in rows if (r["scheme"], r["chunks"]) == (scheme, big)]
            x = [r["p_drop"] for r in pts]
            speed.plot(x, [r["speedup"] for r in pts], "o-", color=color, label=f"{label}: mean")
            speed.plot(x, [r["p999_speedup"] for r in pts], "s--", color=color, label=f"{label}: p99.9")
        speed.axhline(1, color="black", lw=0.5)
        speed.set(xscale="log", xlabel="chunk drop probability", ylabel="completion of SR-RTO / of the scheme",
                  title=f"speedup over SR-RTO, {big} chunks, RTT {rtt} chunk times")
        speed.legend(fontsize="x-small")
        for scheme in ("ec_mds", "ec_xor"):
            color, label = STYLE[scheme]
            for size, dash in zip(sorted({r["chunks"] for r in rows}), ("--", "-")):
                pts = [r for r in rows if (r["scheme"], r["chunks"]) == (scheme, size)]
                x = [r["p_drop"] for r in pts]
                fall.plot(x, [r["fallback"] for r in pts], dash, marker="o", color=color, label=f"{label}, {size}")
                fall.plot(x, [r["closed"] for r in pts], "x", color="black",
                          label="1 - P_EC^L" if (scheme, size) == ("ec_mds", big) else None)
        fall.set(xscale="log", xlabel="chunk drop probability", ylabel="messages falling back to SR",
                 title="EC fallback rate (x: closed form)")
        fall.legend(fontsize="x-small")
    return out / f"{name}.png"


def headline(rows):
    big = max(r["chunks"] for r in rows)
    at = {(r["scheme"], r["p_drop"]): r for r in rows if r["chunks"] == big}
    mds = max((r for r in rows if r["scheme"] == "ec_mds"), key=lambda r: r["speedup"])
    tail = max((r for r in rows if r["scheme"] == "ec_mds"), key=lambda r: r["p999_speedup"])
    worst = max((abs(r["mean"] - r["closed"]) / r["closed"], r) for r in rows if r["scheme"].startswith("sr"))
    top = max(r["p_drop"] for r in rows)
    return [f"EC MDS over SR-RTO: mean up to {mds['speedup']:.2f}x ({mds['chunks']} chunks, P_drop {mds['p_drop']:g}), "
            f"p99.9 up to {tail['p999_speedup']:.2f}x ({tail['chunks']} chunks, P_drop {tail['p_drop']:g}); "
            "paper: up to 5x mean, 12x p99.9",
            f"{big} chunks at P_drop {top:g}: slowdown SR-RTO {at['sr_rto', top]['slowdown']:.2f}x, SR-1RTT "
            f"{at['sr_nack', top]['slowdown']:.2f}x, MDS {at['ec_mds', top]['slowdown']:.2f}x, XOR "
            f"{at['ec_xor', top]['slowdown']:.2f}x; fallback MDS {at['ec_mds', top]['fallback']:.1%} (closed "
            f"{at['ec_mds', top]['closed']:.1%}), XOR {at['ec_xor', top]['fallback']:.1%} (closed "
            f"{at['ec_xor', top]['closed']:.1%})",
            f"SR mean vs App. A: within {100 * worst[0]:.1f} % (worst {worst[1]['scheme']} {worst[1]['chunks']} "
            f"chunks at {worst[1]['p_drop']:g}, {worst[1]['trials']} trials)"]


def arguments(parser):
    """The scenario's options (``python -m scenarios sdr --help``)."""
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="message sizes, chunks (multiples of 32)")
    parser.add_argument("--rates", default=",".join(f"{r:g}" for r in RATES), help="chunk drop probabilities")
    parser.add_argument("--trials", type=int, default=1000, help="messages per point (default 1000: p99.9)")
    parser.add_argument("--rtt", type=int, default=RTT, help="round trip, chunk injection times (default: 25 ms "
                        "at 400 Gbit/s, 64 KiB chunks)")


def main(args, out=OUT, name="sdr"):
    try:
        sizes = [int(x) for x in args.sizes.split(",")]
        rates = [float(x) for x in args.rates.split(",")]
    except ValueError:
        raise ValueError("--sizes and --rates: comma-separated numbers") from None
    if not sizes or any(s < K or s % K for s in sizes) or not rates or not all(0 <= r < 1 for r in rates):
        raise ValueError(f"--sizes must be multiples of {K}, --rates in [0, 1)")
    if args.trials < 2 or args.rtt < 2:
        raise ValueError("--trials and --rtt must be >= 2")
    wall = time.perf_counter()
    rows = sweep(args.seed, sizes, rates, args.trials, args.rtt)
    seconds = time.perf_counter() - wall
    csv = write_csv(name, COLUMNS, [[round(r[c], 6) if isinstance(r[c], float) else r[c] for c in COLUMNS]
                                    for r in rows], out)
    png = plot(rows, args.seed, name, out, args.rtt)
    events = sum(r["events"] for r in rows)
    bad = check(rows)
    lines = [f"sdr, seed {args.seed}: RTT {args.rtt} chunk times, sizes {sizes}, {args.trials} messages a point",
             *headline(rows), *(f"CHECK FAILED: {b}" for b in bad),
             f"{events} events in {seconds:.1f} s ({events / max(seconds, 1e-9):,.0f} events/s)",
             f"written {csv}, {png}"]
    write_summary(name, lines, out)
    if bad:
        raise ValueError(f"{len(bad)} oracle checks failed (see {out / name}.txt)")
    return rows

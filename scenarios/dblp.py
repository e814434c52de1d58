"""DBLP: training rounds under microbursts: reliable, static and phase-scheduled loss bounds.

One sender streams rounds of ``E`` one-beat packets (job 0, round r, phase ``r * PHASES // rounds``: the
training phases in order) into the ``BoundedLossTracker``, at most ``WINDOW`` rounds outstanding, one packet
per cycle on the wire; between rounds of one training step the workers compute for ``compute`` cycles
(a round = one step's gradient exchange). The network loses a first transmission with the background
probability, and every ``burst_every``-th round is hit by a microburst at a random packet after its first
(*chosen*: the tracker then always holds the round and its deadline runs): a Gilbert-Elliott channel forced
into its Bad state (every packet lost) that leaves it with probability ``burst_exit`` per packet (mean burst
``1 / burst_exit`` packets), at the latest with the round. The tracker's deadline is the retransmission timeout
(``deadline``): on a NACK the sender resends the round from the first missing index (RETX; background loss
only). Policies (the phase table written on the ``cfg`` port): *reliable* (tau = 0: rounds close FULL only),
*static* tau and *phase*-scheduled tau (``TAUS``). Per round: latency (close cycle - cycle its first packet
went on the wire), NACKs, delivered loss; per run: the end-to-end time (all rounds, compute included).

The loop runs on the golden model through ``scenarios.net.Clocked`` (its ``step``, the contract's cycle);
``record`` keeps every cycle's inputs (packets, table writes), which the thin test replays on the RTL through
the lockstep. The sweep (burst length x deadline) brackets the paper's burst-round speedup (up to 5.88x).
Oracle: with i.i.d. loss p (no bursts) a round closes without a NACK iff at most E - need packets are lost:
the fraction of such rounds must fall in the acceptance interval of P(Binomial(E, p) <= E - need).
"""
import collections
import statistics
import struct
import time

from models import wire
from models.bounded_loss_tracker import KINDS, BoundedLossTrackerModel, BoundedLossTrackerParams, need_of
from models.bounded_loss_tracker_oracle import GilbertElliott, acceptance, p_no_nack
from models.headers import dblp_packet
from scenarios.common import OUT, figure, write_csv, write_summary
from scenarios.net import Calendar, Clocked, stream

__all__ = ["simulate", "policies", "summary", "oracle", "sweep", "arguments", "main"]

#: The cocotb tests' default parameter set (16 slots, E <= 64 in 32-bit words, 64-byte bus): its build is shared.
PARAMS = BoundedLossTrackerParams()
E, WINDOW, PHASES = 32, 2, 4
BACKGROUND, BURST_EVERY, BURST_EXIT, DEADLINE, COMPUTE = 0.005, 4, 0.35, 200, 64
#: tau (Q0.8) per phase: reliable, static 1/8, phase-scheduled (tolerant mid-training, strict at the end).
TAUS = {"reliable": (0, 0, 0, 0), "static": (32, 32, 32, 32), "phase": (32, 64, 32, 8)}
#: Oracle sweep: i.i.d. loss rates, static tau.
SWEEP_P, SWEEP_TAU = (0.02, 0.05, 0.08, 0.12, 0.16), 32
#: The speedup sweep: mean burst length (1 / burst_exit) x deadline (cycles).
EXITS, DEADLINES = (0.5, 0.35, 0.1), (100, 200, 400, 800)
ALPHA = 1e-3
PORTS = ("fwd", "close", "nack")
TEMPLATE = bytes(dblp_packet(payload=bytes(8), sport=50000))


def packet(rnd, idx, phase, retx=False):
    """Packet ``idx`` of round ``rnd`` (the scapy template with the shim patched)."""
    raw = bytearray(TEMPLATE)
    flags = (wire.DBLP_LAST if idx == E - 1 else 0) | (wire.DBLP_RETX if retx else 0)
    struct.pack_into(wire.DBLP_STRUCT, raw, wire.DBLP_OFFSET, wire.DBLP_VERSION << 4 | flags, phase << 4,
                     0, rnd, idx, E, 0)
    return bytes(raw)


class Channel:
    """First transmissions: i.i.d. background loss ``p``; microbursts forced at every ``burst_every``-th
    round (a Gilbert-Elliott channel put in its Bad state at a random packet). Retransmissions: ``p``."""

    def __init__(self, p, burst_every, burst_exit, rng):
        self.p, self.burst_every, self.rng = p, burst_every, rng
        self.ge = GilbertElliott(0.0, burst_exit, loss_good=p, loss_bad=1.0, seed=rng.randrange(1 << 30))

    def first(self, rnd):
        """Losses of round ``rnd``'s first transmission: (lost flags, packets lost to the burst)."""
        onset = (self.rng.randrange(1, E) if self.burst_every and rnd % self.burst_every == self.burst_every - 1
                 else None)
        lost, burst = [], 0
        for idx in range(E):
            if idx == onset:
                self.ge.bad = True
            bad = self.ge.bad
            lost.append(self.ge.lost())
            burst += bad
        self.ge.bad = False                      # the burst ends with its round
        return lost, burst

    def retx(self):
        return self.rng.random() < self.p


class Sender:
    """The sender, its wire and the tracker's table writes around the tracker's model, one cycle at a time
    (``Clocked``'s ``inputs`` and ``outputs``)."""

    def __init__(self, cal, taus, p, burst_every, burst_exit, rounds, deadline, compute, rng):
        self.cal, self.taus, self.rounds, self.compute = cal, taus, rounds, compute
        self.channel = Channel(p, burst_every, burst_exit, rng)
        self.model = BoundedLossTrackerModel(PARAMS)
        self.cfgs = collections.deque({"phase": ph, "tau": taus[ph], "deadline": deadline} for ph in range(PHASES))
        self.wire = collections.deque()             # (raw, lost, round): one goes on the wire per cycle
        self.stats, self.outstanding = [], set()
        self.started, self.ready_at = 0, 0
        self.finish = None

    def _start_rounds(self):
        while (self.started < self.rounds and len(self.outstanding) < WINDOW and not self.cfgs
               and self.cal.now >= self.ready_at and (self.started or not any(s.dirty for s in self.model.slots))):
            r = self.started
            phase = r * PHASES // self.rounds
            lost, burst = self.channel.first(r)
            self.wire.extend((packet(r, idx, phase), lost[idx], r) for idx in range(E))
            self.stats.append({"round": r, "phase": phase, "tau": self.taus[phase], "burst": burst,
                               "lost_first": sum(lost), "last_in": not lost[-1], "first": None, "nacks": 0})
            self.outstanding.add(r)
            self.started += 1

    def inputs(self):
        self._start_rounds()
        row = self.cfgs[0] if self.cfgs else None
        head = self.wire[0] if self.wire else None
        if head is not None and self.stats[head[2]]["first"] is None:
            self.stats[head[2]]["first"] = self.cal.now
        beat = {"data": int.from_bytes(head[0], "little"), "keep": (1 << len(head[0])) - 1, "first": 1,
                "last": 1, "meta": {}} if head is not None and not head[1] else None
        return {"i__valid": int(beat is not None), "i__payload": beat, "cfg__valid": int(row is not None),
                "cfg__payload": row, **{f"{name}__ready": 1 for name in PORTS}}

    def outputs(self, inputs, out):
        if inputs["cfg__valid"]:
            self.cfgs.popleft()
        head = self.wire[0] if self.wire else None
        if head is not None and (head[1] or out["i__ready"]):
            self.wire.popleft()
        if out["close__valid"]:                     # outputs always ready: taken this cycle
            close = out["close__payload"]
            s = self.stats[close["round"]]
            s.update(kind=KINDS[close["kind"]], count=close["count"], need=close["need"],
                     latency=self.cal.now - s["first"])
            self.outstanding.discard(close["round"])
            self.ready_at = self.cal.now + self.compute         # the workers compute before the next round
            if len(self.stats) == self.rounds and not self.outstanding:
                self.finish = self.cal.now
        if out["nack__valid"]:
            n = out["nack__payload"]
            self.stats[n["round"]]["nacks"] += 1
            phase = self.stats[n["round"]]["phase"]
            resend = [(packet(n["round"], idx, phase, retx=True), self.channel.retx(), n["round"])
                      for idx in range(n["missing"], E)]
            self.wire.extendleft(reversed(resend))  # retransmissions go first


def simulate(taus, p, burst_every, rounds, seed, burst_exit=BURST_EXIT, deadline=DEADLINE, compute=COMPUTE,
             record=False):
    """One run on the golden model: (per-round stats, end-to-end cycles, events, every cycle's inputs or
    None)."""
    cal = Calendar()
    sender = Sender(cal, taus, p, burst_every, burst_exit, rounds, deadline, compute, stream(seed, "dblp"))
    block = Clocked(cal, sender.model, sender.inputs, sender.outputs, record)
    block.start()
    limit = 4000 * (rounds + 10)
    cal.run(until=limit, stop=lambda: sender.finish is not None)
    block.stop()
    if sender.finish is None:
        raise AssertionError(f"the loop has not finished in {limit} cycles")
    return sender.stats, sender.finish, cal.events, block.record


def percentile(values, q):
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-q * len(ordered) // 100) - 1))]


def policies(seed, rounds, burst_exit=BURST_EXIT, deadline=DEADLINE, compute=COMPUTE):
    """Every policy on one setting: name -> (stats, end-to-end cycles, events)."""
    return {name: simulate(taus, BACKGROUND, BURST_EVERY, rounds, seed, burst_exit, deadline, compute)[:3]
            for name, taus in TAUS.items()}


def summary(stats):
    """Latency percentiles, burst-round mean and delivered loss of one run's rounds."""
    burst = [s["latency"] for s in stats if s["burst"]]
    lat = [s["latency"] for s in stats]
    delivered = sum(E - s["count"] for s in stats if s["kind"] != "ABORT")
    return {"p50": percentile(lat, 50), "p99": percentile(lat, 99), "max": max(lat),
            "burst_mean": statistics.fmean(burst) if burst else float("nan"), "loss": delivered / (E * len(stats)),
            "nacks": sum(s["nacks"] for s in stats), "abort": sum(s["kind"] == "ABORT" for s in stats)}


def oracle(seed, rounds):
    """The binomial oracle's rows: (p, rounds, no-NACK fraction, closed form, interval low, high)."""
    rows = []
    for k, p in enumerate(SWEEP_P):
        stats = simulate((SWEEP_TAU,) * PHASES, p, 0, rounds, f"{seed}/oracle/{k}")[0]
        fraction = sum(s["nacks"] == 0 for s in stats) / len(stats)
        prob = p_no_nack(E, need_of(E, SWEEP_TAU), p)
        lo, hi = acceptance(len(stats), prob, ALPHA)
        rows.append((p, len(stats), round(fraction, 4), round(prob, 4), round(lo, 4), round(hi, 4)))
    return rows


COLUMNS = ("sweep", "burst_len", "deadline", "policy", "rounds", "p50", "p99", "max", "burst_mean", "speedup",
           "loss", "nacks", "aborts", "end_to_end", "e2e_gain", "events")


def sweep(seed, rounds, exits=EXITS, deadlines=DEADLINES, compute=COMPUTE):
    """Rows: every policy at every (mean burst length, deadline); the first point is the main setting."""
    rows = []
    for burst_exit in exits:
        for deadline in deadlines:
            runs = policies(seed, rounds, burst_exit, deadline, compute)
            base = summary(runs["reliable"][0])
            for name, (stats, end, events) in runs.items():
                x = summary(stats)
                rows.append(dict(sweep="speedup", burst_len=round(1 / burst_exit, 1), deadline=deadline, policy=name,
                                 rounds=len(stats), p50=x["p50"], p99=x["p99"], max=x["max"],
                                 burst_mean=round(x["burst_mean"], 1),
                                 speedup=round(base["burst_mean"] / x["burst_mean"], 3), loss=round(x["loss"], 4),
                                 nacks=x["nacks"], aborts=x["abort"], end_to_end=end,
                                 e2e_gain=round(1 - end / runs["reliable"][1], 4), events=events))
    return rows


def plot(rows, oracle_rows, seed, name, out):
    """Two panels: the burst-round speedup over reliable per deadline and burst length; the oracle."""
    with figure(name, cols=2, width=6.5, height=4.2, seed=seed, out=out) as (speed, orc):
        for (policy, burst_len), style in zip([(p, b) for p in ("static", "phase")
                                               for b in sorted({r["burst_len"] for r in rows})],
                                              ("o-", "o--", "o:", "s-", "s--", "s:")):
            pts = [r for r in rows if r["policy"] == policy and r["burst_len"] == burst_len]
            speed.plot([r["deadline"] for r in pts], [r["speedup"] for r in pts], style,
                       label=f"{policy}, bursts of {burst_len} packets")
        speed.axhline(5.88, color="grey", ls=":", label="paper: up to 5.88x")
        speed.set(xscale="log", xlabel="deadline = retransmission timeout, cycles",
                  ylabel="burst rounds: reliable / policy", title=f"burst-round speedup (rounds of E = {E})")
        speed.legend(fontsize="x-small")
        ps = [r[0] for r in oracle_rows]
        orc.plot(ps, [r[3] for r in oracle_rows], "k-", label=f"P(Bin(E, p) <= {E - need_of(E, SWEEP_TAU)})")
        orc.fill_between(ps, [r[4] for r in oracle_rows], [r[5] for r in oracle_rows], alpha=0.2,
                         label=f"acceptance ({1 - ALPHA:.3f})")
        orc.plot(ps, [r[2] for r in oracle_rows], "o", label=f"measured ({oracle_rows[0][1]} rounds each)")
        orc.set(xlabel="i.i.d. loss rate p", ylabel="rounds closing without NACK",
                title=f"binomial oracle, tau = {SWEEP_TAU}/256")
        orc.legend(fontsize="small")
    return out / f"{name}.png"


def arguments(parser):
    """The scenario's options (``python -m scenarios dblp --help``)."""
    parser.add_argument("--rounds", type=int, default=480, help="rounds per run (default 480)")
    parser.add_argument("--oracle-rounds", type=int, default=1500, help="rounds per oracle loss rate")
    parser.add_argument("--exits", default=",".join(map(str, EXITS)),
                        help="burst exit probabilities per packet (mean burst 1/x packets)")
    parser.add_argument("--deadlines", default=",".join(map(str, DEADLINES)), help="deadlines, cycles")
    parser.add_argument("--compute", type=int, default=COMPUTE, help="compute cycles between rounds")


def main(args, out=OUT, name="dblp"):
    try:
        exits = [float(x) for x in args.exits.split(",")]
        deadlines = [int(x) for x in args.deadlines.split(",")]
    except ValueError:
        raise ValueError("--exits and --deadlines: comma-separated numbers") from None
    if args.rounds < 8 or args.oracle_rounds < 10 or not all(0 < x <= 1 for x in exits) or min(deadlines) < E:
        raise ValueError(f"--rounds >= 8, --oracle-rounds >= 10, --exits in (0, 1], --deadlines >= {E} needed")
    if args.compute < 0:
        raise ValueError("--compute must be >= 0")
    wall = time.perf_counter()
    rows = sweep(args.seed, args.rounds, exits, deadlines, args.compute)
    oracle_rows = oracle(args.seed, args.oracle_rounds)
    seconds = time.perf_counter() - wall
    csv = write_csv(name, COLUMNS, [[r[c] for c in COLUMNS] for r in rows], out)
    write_csv(f"{name}_oracle", ["loss", "rounds", "no_nack_fraction", "closed_form", "lo", "hi"], oracle_rows, out)
    png = plot(rows, oracle_rows, args.seed, name, out)
    first = [r for r in rows if (r["burst_len"], r["deadline"]) == (rows[0]["burst_len"], rows[0]["deadline"])]
    top = max(rows, key=lambda r: r["speedup"])
    events = sum(r["events"] for r in rows)
    lines = [f"dblp, seed {args.seed}: {args.rounds} rounds of E = {E}, window {WINDOW}, compute {args.compute}, "
             f"burst every {BURST_EVERY} rounds, background loss {BACKGROUND}",
             *(f"bursts of {r['burst_len']} packets, deadline {r['deadline']}: {r['policy']} p50/p99/max "
               f"{r['p50']}/{r['p99']}/{r['max']}, burst rounds {r['speedup']:.2f}x, loss {r['loss']:.2%}, "
               f"end to end {r['end_to_end']} ({r['e2e_gain']:+.1%})" for r in first),
             f"best burst-round speedup {top['speedup']:.2f}x ({top['policy']}, bursts of {top['burst_len']} "
             f"packets, deadline {top['deadline']}; end to end {top['e2e_gain']:+.1%}); paper: up to 5.88x",
             "oracle: " + ", ".join(f"p={r[0]} {r[2]:.3f} in [{r[4]:.3f}, {r[5]:.3f}]" for r in oracle_rows),
             f"{events} events in {seconds:.1f} s ({events / max(seconds, 1e-9):,.0f} events/s)",
             f"written {csv}, {png}"]
    write_summary(name, lines, out)
    return rows

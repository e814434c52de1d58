"""Slot utilisation and job completion of ATP vs SwitchML vs ESA on one multi-job trace.

``python -m tools.agg_measure [--seed N] [--slots P] ...`` prints a table and writes
``build/agg_measure.csv``; with ``--sweep`` it runs the trace over a grid of pool sizes
(``SWEEP_SLOTS``) and loads (``SWEEP_JOBS`` concurrent jobs) instead and writes
``build/agg_sweep.csv`` and ``.png`` (mean job completion per policy). This is a measurement, not a
test: nothing is asserted.

``ClosedLoop`` is a cycle-level harness around a switch that takes at most one packet per cycle
in arrival order and emits its outputs the next cycle (the RTL's latency 1, see the ``line_rate``
test); ``simulate`` closes it with ``models.aggregator.AggregatorModel`` and
``scenarios/test_esa.py`` with the ``Aggregator`` RTL under Verilator:

- ``jobs`` jobs, job ``j`` has priority ``j`` (higher = more urgent under ESA), ``2..workers``
  workers and ``rounds`` rounds; round ``r`` of job ``j`` is job+seq ``(j + 1) << 16 | r`` (``jobseq``;
  never 0, ATP's empty slot). ATP/ESA: round ``r`` uses slot
  ``(3j + r) mod slots``. SwitchML as deployed: the control plane splits the pool into one range
  per job (sizes differ by at most one); round ``r`` uses slot ``r mod size`` of the job's range,
  set ``(r div size) mod 2``, and a job keeps at most ``size`` rounds outstanding (SwitchML's
  window is its pool: a worker reuses a slot only after its result);
- each worker keeps ``window`` rounds outstanding: it sends round ``r`` once it has learned that
  round ``r - window`` is complete, after a random jitter of up to ``jitter`` cycles;
- every link (worker <-> switch <-> PS) takes ``latency`` cycles; the switch's input port takes one
  packet per cycle (workers' contributions and the PS's ACKs share it);
- results go to the PS (ATP, ESA), which multicasts an ACK back through the switch (freeing the
  ATP slot) to the workers, or are multicast to the workers by the switch (SwitchML); pieces the
  PS receives (collisions, evictions, flushes) are summed there and completed rounds ACKed the
  same way, the ACK carrying the PS's sum; the PS serves one packet per ``ps_cost`` cycles (its
  NIC/CPU is the bottleneck in-network aggregation relieves);
- a worker that has not learned completion ``timeout`` cycles after sending retransmits (ATP/ESA:
  resend flag; SwitchML: the same packet, the switch tells a retransmission by its bitmap); the PS
  drops a piece holding a worker it already has (ATP's ``ParameterServer.cc``);
- gradients are random int32 (numpy); ``wrong_sums`` counts rounds whose sum the workers learned
  differs from numpy's sum of their gradients (or never came).

Slot utilisation: mean over cycles of held slots / slots ("held": holding a job+seq under
ATP/ESA, every slot of a job's range under SwitchML, whose pool is reserved by the control plane),
and of slots holding an incomplete aggregate ("aggregating"; under ATP a complete slot waits for
the ACK round trip).
"""
import csv
import random
from collections import defaultdict
from pathlib import Path

import numpy as np

from models.aggregator import POLICIES, AggregatorModel, AggregatorParams
from models.contract import Packet
from models.headers import INA, Ether, ina_packet
from scenarios.net import Calendar
from tools.cli import Parser, integer, run

BUILD = Path(__file__).resolve().parents[1] / "build"
#: ``meta.port`` of every packet into the switch; the switch's port towards the PS (its default).
IN_PORT, PS_PORT = 1, 0


def jobseq(j, r):
    """Job+seq of round ``r`` of job ``j``: never 0 (ATP's empty slot)."""
    return (j + 1) << 16 | r


def job_round(js):
    """``(job, round)`` of a job+seq."""
    return (js >> 16) - 1, js & 0xFFFF


class ClosedLoop:
    """Workers, parameter server and links of the trace around a switch taking one packet a cycle.

    Each cycle: ``arrivals()`` (the packet the switch takes, or None), ``leave(outputs)`` (the
    switch's outputs leaving now, i.e. those of the packet it took the cycle before), then
    ``tick(held, aggregating)`` (its slot occupancy during the cycle). Workers' gradients are
    random int32 drawn with numpy; ``learned`` maps each ``(job, round)`` to the sum the workers
    got (the switch's multicast result or the PS's ACK, whichever came first).
    """

    def __init__(self, policy, seed, jobs, rounds, slots, workers, values, window, latency, jitter,
                 timeout, ps_cost):
        self.policy, self.jobs, self.rounds, self.slots, self.values = policy, jobs, rounds, slots, values
        if policy == "switchml" and slots < jobs:
            raise ValueError(f"switchml: slots = {slots} cannot give each of jobs = {jobs} its own pool range")
        sizes = [slots // jobs + (j < slots % jobs) for j in range(jobs)]
        self.base = {j: sum(sizes[:j]) for j in range(jobs)}
        self.size = dict(enumerate(sizes))
        self.window_of = {j: min(window, sizes[j]) if policy == "switchml" else window for j in range(jobs)}
        self.window, self.latency, self.jitter, self.timeout, self.ps_cost = window, latency, jitter, timeout, ps_cost
        self.rng = random.Random(seed)
        self.fanin = {j: random.Random(seed * 1000 + j).randrange(2, workers + 1) for j in range(jobs)}
        self.grads = np.random.default_rng(seed).integers(-1 << 20, 1 << 20, (jobs, rounds, workers, values))
        self.cal = Calendar()    # the loop's events (``scenarios.net``), run up to each cycle
        self.queue = []          # the switch's input port
        self.known = set()       # rounds whose completion the workers know
        self.learned, self.finish = {}, {}
        self.ps_bits, self.ps_sums, self.ps_done = defaultdict(int), {}, set()
        self.cycle = self.held = self.aggregating = self.ps_free = 0
        for j in range(jobs):
            for r in range(min(self.window_of[j], rounds)):
                self._send_round(j, r)

    def expected(self, j, r):
        """numpy sum of the gradients of round ``r`` of job ``j`` over its workers."""
        return self.grads[j, r, :self.fanin[j]].sum(axis=0)

    def wrong_sums(self):
        """Rounds the workers never learned or learned with a sum other than numpy's."""
        return [(j, r) for j in range(self.jobs) for r in range(self.rounds)
                if (j, r) not in self.learned or self.learned[j, r] != self.expected(j, r).tolist()]

    def busy(self):
        """Whether anything is still scheduled or waiting at the switch."""
        return bool(self.cal.pending() or self.queue)

    def _at(self, cycle, kind, payload):
        self.cal.at(cycle, getattr(self, f"_on_{kind}"), payload)

    def index(self, j, r):
        """Slot (SwitchML: pool index with the set in bit 15) of round ``r`` of job ``j``."""
        if self.policy == "switchml":
            return ((r // self.size[j]) % 2) << 15 | (self.base[j] + r % self.size[j])
        return (3 * j + r) % self.slots

    def _contribution(self, j, r, w, resend=0):
        return bytes(ina_packet(w, jobseq(j, r), self.index(j, r), self.grads[j, r, w].tolist(),
                                fanin=self.fanin[j], priority=j, resend=resend))

    def _send_round(self, j, r):
        for w in range(self.fanin[j]):
            self._at(self.cycle + self.rng.randrange(self.jitter + 1) + self.latency, "switch",
                     self._contribution(j, r, w))
            self._at(self.cycle + self.timeout, "timeout", (j, r, w))

    def arrivals(self):
        """Handle the events due this cycle; return the packet the switch takes now, or None."""
        self.cal.run(until=self.cycle)
        return self.queue.pop(0) if self.queue else None

    def _on_switch(self, raw):
        self.queue.append(raw)

    def _on_ps(self, raw):
        self.ps_free = max(self.cycle, self.ps_free) + self.ps_cost
        self._at(self.ps_free, "ps_served", raw)

    def _on_ps_served(self, raw):
        h = Ether(raw)[INA]
        if h.jobseq in self.ps_done or self.ps_bits[h.jobseq] & h.bitmap:
            return                 # ParameterServer.cc: a piece with a worker already in is dropped whole
        self.ps_bits[h.jobseq] |= h.bitmap
        self.ps_sums[h.jobseq] = self.ps_sums.get(h.jobseq, 0) + np.array(h.values, dtype=np.int64)
        fanin = self.fanin[job_round(h.jobseq)[0]]
        if self.ps_bits[h.jobseq] == (1 << fanin) - 1:
            self.ps_done.add(h.jobseq)
            ack = ina_packet(0, h.jobseq, h.index, self.ps_sums[h.jobseq].tolist(), fanin=fanin, ack=1,
                             bitmap=self.ps_bits[h.jobseq])
            self._at(self.cycle + self.latency, "switch", bytes(ack))

    def _on_workers(self, raw):
        h = Ether(raw)[INA]
        j, r = job_round(h.jobseq)
        if (j, r) in self.known:
            return
        self.known.add((j, r))
        self.learned[j, r] = list(h.values)
        if r + self.window_of[j] < self.rounds:
            self._send_round(j, r + self.window_of[j])
        if sum((j, rr) in self.known for rr in range(self.rounds)) == self.rounds:
            self.finish[j] = self.cycle

    def _on_timeout(self, key):
        j, r, w = key
        if (j, r) not in self.known:
            self._at(self.cycle + self.latency, "switch",
                     self._contribution(j, r, w, resend=int(self.policy != "switchml")))
            self._at(self.cycle + self.timeout, "timeout", key)

    def leave(self, outputs):
        """Route the switch's ``(bytes, meta)`` outputs leaving this cycle."""
        for raw, meta in outputs:
            h = Ether(raw)[INA]
            if meta["port"] != PS_PORT:        # ACKs and SwitchML's multicast go to the workers
                self._at(self.cycle + self.latency, "workers", raw)
                if h.result and not h.resend:
                    self.ps_done.add(h.jobseq)
            else:
                self._at(self.cycle + self.latency, "ps", raw)

    def tick(self, held, aggregating):
        """End the cycle: the switch held ``held`` slots, ``aggregating`` of them incomplete."""
        self.held += held
        self.aggregating += aggregating
        self.cycle += 1

    def stats(self, counters):
        """Utilisation (fractions of slot-cycles) and the switch's ``counters``."""
        total = self.cycle * self.slots
        return dict(cycles=self.cycle, held=self.held / total, aggregating=self.aggregating / total,
                    **counters)


def occupancy(model):
    """(held, aggregating) slots of the golden model's state (see the module docstring)."""
    if model.policy == "switchml":
        return model.slots, sum(any(c != 0 for c in s.count) for s in model.pool)
    return (sum(s.jobseq != 0 for s in model.state),
            sum(s.jobseq != 0 and s.count < s.fanin for s in model.state))


def simulate(policy, seed, **config):
    """Run the trace under ``policy`` on the golden model; return (finished loop, model)."""
    loop = ClosedLoop(policy, seed, **config)
    model = AggregatorModel(AggregatorParams(policy=policy, slots=config["slots"], workers=config["workers"],
                                             values=config["values"]))
    outputs = []
    while loop.busy() or outputs:
        raw = loop.arrivals()
        loop.leave(outputs)
        loop.tick(*occupancy(model))
        outputs = model.process("i", Packet(raw, {"port": IN_PORT}))["o"] if raw is not None else []
    return loop, model


SWEEP_SLOTS = (4, 6, 8, 12, 16)
SWEEP_JOBS = (2, 4, 8)


def sweep(config, out):
    """Mean job completion of every policy over ``SWEEP_SLOTS`` x ``SWEEP_JOBS``; CSV and PNG; the rows."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = []
    for jobs in SWEEP_JOBS:
        for slots in SWEEP_SLOTS:
            row = dict(jobs=jobs, slots=slots)
            for policy in POLICIES:
                if policy == "switchml" and slots < jobs:
                    row[policy] = ""        # no pool range for every job
                    continue
                loop, _ = simulate(policy, **dict(config, jobs=jobs, slots=slots))
                row[policy] = sum(loop.finish.values()) / max(len(loop.finish), 1)
            rows.append(row)
            print(" ".join(f"{k}={v:.0f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                  flush=True)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    fig, axes = plt.subplots(1, len(SWEEP_JOBS), figsize=(4.5 * len(SWEEP_JOBS), 3.6), sharey=True)
    for ax, jobs in zip(axes, SWEEP_JOBS):
        for policy in POLICIES:
            pts = [(r["slots"], r[policy]) for r in rows if r["jobs"] == jobs and r[policy] != ""]
            ax.plot(*zip(*pts), marker="o", label=policy)
        ax.set(title=f"{jobs} jobs", xlabel="aggregator slots")
    axes[0].set(ylabel="mean job completion (cycles)")
    axes[0].legend()
    fig.suptitle(f"{config['rounds']} rounds per job, window {config['window']}, {config['workers']} workers, "
                 f"seed {config['seed']}", fontsize="medium")
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    print(f"written {out} and {out.with_suffix('.png')}")
    return rows


def main(argv=None):
    parser = Parser(prog="agg_measure", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=integer(0), default=1)
    parser.add_argument("--jobs", type=integer(1, 256), default=4, help="job j has priority j (one byte)")
    parser.add_argument("--rounds", type=integer(1, 1 << 16), default=40, help="rounds per job (16-bit seq)")
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--values", type=int, default=8)
    parser.add_argument("--window", type=integer(1), default=3)
    parser.add_argument("--latency", type=integer(0), default=20)
    parser.add_argument("--jitter", type=integer(0), default=8)
    parser.add_argument("--timeout", type=integer(1), default=400)
    parser.add_argument("--ps-cost", type=integer(1), default=6)
    parser.add_argument("--out", default=None, help="CSV path (default build/agg_measure.csv, agg_sweep.csv)")
    parser.add_argument("--sweep", action="store_true", help="slots x jobs grid instead of one trace")
    args = parser.parse_args(argv)
    AggregatorParams(slots=args.slots, workers=args.workers, values=args.values)   # ValueError naming one
    config = {k: v for k, v in vars(args).items() if k not in ("out", "sweep")}
    if args.sweep:
        sweep(config, args.out or BUILD / "agg_sweep.csv")
        return
    args.out = args.out or str(BUILD / "agg_measure.csv")
    rows = []
    for policy in POLICIES:
        loop, model = simulate(policy, **config)
        finish = loop.finish
        row = dict(policy=policy, **{f"job{j}_prio{j}": finish.get(j, "") for j in range(args.jobs)},
                   mean_jct=sum(finish.values()) / max(len(finish), 1), wrong_sums=len(loop.wrong_sums()),
                   **loop.stats(model.counters()))
        rows.append(row)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(" ".join(f"{k}={v}" for k, v in config.items()))
    shown = ["policy"] + [k for k in rows[0] if k.startswith("job")] + [
        "mean_jct", "wrong_sums", "held", "aggregating", "completed", "collision", "preempted", "flushed", "resent"]
    print(" ".join(f"{k:>12}" for k in shown))
    for row in rows:
        print(" ".join(f"{row[k]:>12.3f}" if isinstance(row[k], float) else f"{row[k]:>12}" for k in shown))
    print(f"written {args.out}")


if __name__ == "__main__":
    run("agg_measure", main)

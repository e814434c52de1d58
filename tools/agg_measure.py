"""Slot utilisation and job completion of ATP vs SwitchML vs ESA on one multi-job trace.

``python -m tools.agg_measure [--seed N] [--slots P] ...`` prints a table and writes
``build/agg_measure.csv``. This is a measurement, not a test: nothing is asserted.

Closed-loop, cycle-level harness around ``models.aggregator.AggregatorModel`` (the golden model
the RTL is checked against packet by packet; the RTL takes one packet per cycle with latency 1, see
the ``line_rate`` test, so the model is fed at most one packet per cycle in arrival order):

- ``jobs`` jobs, job ``j`` has priority ``j`` (higher = more urgent under ESA), ``2..workers``
  workers and ``rounds`` rounds; round ``r`` of job ``j`` uses slot ``(3j + r) mod slots``;
- each worker keeps ``window`` rounds outstanding: it sends round ``r`` once it has learned that
  round ``r - window`` is complete, after a random jitter of up to ``jitter`` cycles;
- every link (worker <-> switch <-> PS) takes ``latency`` cycles; the switch's input port takes one
  packet per cycle (workers' contributions and the PS's ACKs share it);
- results go to the PS (ATP, ESA), which multicasts an ACK back through the switch (freeing the
  ATP slot) to the workers, or are multicast to the workers by the switch (SwitchML); pieces the
  PS receives (collisions, evictions, flushes) are summed there and completed rounds ACKed the
  same way; the PS serves one packet per ``ps_cost`` cycles (its NIC/CPU is the bottleneck
  in-network aggregation relieves);
- a worker that has not learned completion ``timeout`` cycles after sending retransmits (resend).

Slot utilisation: mean over cycles of held slots / slots ("held"), and of slots holding an
incomplete aggregate ("aggregating"; under ATP a complete slot waits for the ACK round trip).
"""
import argparse
import csv
import heapq
import random
from collections import defaultdict
from pathlib import Path

from models.aggregator import POLICIES, AggregatorModel
from models.headers import INA, Ether, ina_packet

BUILD = Path(__file__).resolve().parents[1] / "build"


def simulate(policy, seed, jobs, rounds, slots, workers, values, window, latency, jitter, timeout,
             ps_cost, trace=None):
    """Run the trace under ``policy``; return (per-job completion cycles, stats dict).

    ``trace``, a list, receives ``(cycle, packet, outputs)`` for every packet the switch takes.
    """
    rng = random.Random(seed)
    model = AggregatorModel(policy=policy, slots=slots, workers=workers, values=values)
    fanin = {j: random.Random(seed * 1000 + j).randrange(2, workers + 1) for j in range(jobs)}
    events = []          # (cycle, order, kind, payload)
    order = iter(range(1 << 62))

    def at(cycle, kind, payload):
        heapq.heappush(events, (cycle, next(order), kind, payload))

    def contribution(j, r, w, resend=0):
        return ina_packet(w, (j << 16) | r, (3 * j + r) % slots, [1] * values, fanin=fanin[j],
                          priority=j, resend=resend)

    def send_round(cycle, j, r):
        for w in range(fanin[j]):
            at(cycle + rng.randrange(jitter + 1) + latency, "switch", bytes(contribution(j, r, w)))
            at(cycle + timeout, "timeout", (j, r, w))

    known = set()        # rounds whose completion the workers know
    ps_bits = defaultdict(int)
    ps_done = set()
    finish = {}
    for j in range(jobs):
        for r in range(min(window, rounds)):
            send_round(0, j, r)

    queue = []           # switch input port
    cycle = held = aggregating = ps_free = 0
    while events or queue:
        while events and events[0][0] <= cycle:
            _, _, kind, payload = heapq.heappop(events)
            if kind == "switch":
                queue.append(payload)
            elif kind == "ps":         # the PS serves one packet per `ps_cost` cycles
                ps_free = max(cycle, ps_free) + ps_cost
                at(ps_free, "ps_served", payload)
            elif kind == "ps_served":
                h = Ether(payload)[INA]
                if h.result and h.resend or h.jobseq in ps_done:
                    continue
                ps_bits[h.jobseq] |= h.bitmap
                if ps_bits[h.jobseq] == (1 << fanin[h.jobseq >> 16]) - 1:
                    ps_done.add(h.jobseq)
                    ack = ina_packet(0, h.jobseq, h.index, [0] * values, fanin=fanin[h.jobseq >> 16], ack=1)
                    at(cycle + latency, "switch", bytes(ack))
            elif kind == "workers":
                j, r = payload
                if (j, r) in known:
                    continue
                known.add((j, r))
                if r + window < rounds:
                    send_round(cycle, j, r + window)
                if sum(1 for rr in range(rounds) if (j, rr) in known) == rounds:
                    finish[j] = cycle
            elif kind == "timeout":
                j, r, w = payload
                if (j, r) not in known:
                    at(cycle + latency, "switch", bytes(contribution(j, r, w, resend=1)))
                    at(cycle + timeout, "timeout", payload)
        if queue:
            raw = queue.pop(0)
            outputs = model.process(raw, {"port": 1})
            if trace is not None:
                trace.append((cycle, raw, outputs))
            for out, meta in outputs:
                h = Ether(out)[INA]
                jr = (h.jobseq >> 16, h.jobseq & 0xFFFF)
                if h.ack:
                    at(cycle + 1 + latency, "workers", jr)
                elif meta["port"] == model.mcast_port:
                    at(cycle + 1 + latency, "workers", jr)
                    if not h.resend:
                        ps_done.add(h.jobseq)
                else:
                    at(cycle + 1 + latency, "ps", out)
        held += sum(s.valid for s in model.state)
        aggregating += sum(s.valid and not s.complete for s in model.state)
        cycle += 1
    stats = dict(cycles=cycle, held=held / (cycle * slots), aggregating=aggregating / (cycle * slots),
                 **model.counters)
    return finish, stats


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--values", type=int, default=8)
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--latency", type=int, default=20)
    parser.add_argument("--jitter", type=int, default=8)
    parser.add_argument("--timeout", type=int, default=400)
    parser.add_argument("--ps-cost", type=int, default=6)
    parser.add_argument("--out", default=str(BUILD / "agg_measure.csv"))
    args = parser.parse_args()
    config = {k: v for k, v in vars(args).items() if k != "out"}
    rows = []
    for policy in POLICIES:
        finish, stats = simulate(policy, **config)
        row = dict(policy=policy, **{f"job{j}_prio{j}": finish.get(j, "") for j in range(args.jobs)},
                   mean_jct=sum(finish.values()) / len(finish), **stats)
        rows.append(row)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(" ".join(f"{k}={v}" for k, v in config.items()))
    shown = ["policy"] + [k for k in rows[0] if k.startswith("job")] + [
        "mean_jct", "held", "aggregating", "completed", "collision", "preempted", "flushed", "resent"]
    print(" ".join(f"{k:>12}" for k in shown))
    for row in rows:
        print(" ".join(f"{row[k]:>12.3f}" if isinstance(row[k], float) else f"{row[k]:>12}" for k in shown))
    print(f"written {args.out}")


if __name__ == "__main__":
    main()

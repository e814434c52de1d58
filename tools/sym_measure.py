"""Symphony's closed loop: two ring all-reduce jobs whose flows share one hop, with and without throttling.

``python -m tools.sym_measure [--seeds N] [--delta D] ...`` runs one setting with and without Symphony
and prints the jobs' completion; ``--sweep`` runs the background-burst (jitter) x ``delta`` grid
instead and writes ``build/sym_sweep.csv`` (the scenario runs a small grid of it in CI). A
measurement, not a test: nothing is asserted.

The setting (``Setting``, one cycle = one switch cycle): jobs A (0) and B (1), each a ring of
``ring`` flows (flow ``p`` sends to ``p + 1``), ``steps`` steps of ``chunk`` packets per flow. Ring
dependency of a pipelined ring all-reduce: a flow sends step ``s`` once its predecessor has delivered
step ``s - run_ahead + 1``, and keeps at most ``window`` packets in flight. Every packet crosses the
switch (the ``ProgressRegfile`` model, one packet per cycle), then its flow's egress link (one packet
per ``service`` cycles, FIFO). A's flow 1 and B's flow 0 share one link, ``S``: each alone would use it
fully, so together each gets half. Background bursts (jitter) on B's flow 2 link: a burst starts with
probability ``burst_p`` per cycle, lasts ``burst_on`` cycles and takes ``burst_load`` of the link, so
B2 is B's laggard and B0, held back only ``run_ahead`` steps ahead of it, outpaces it on S while A1
needs S. Senders are DCQCN-like: line rate at start; with Symphony a sender cuts its rate by ``cut``
on a CE echo (``rtt`` after the marked packet left its link), at most once per ``cnp_gap`` cycles
(DCQCN's CNP pacing per QP), and recovers ``recover`` every ``recover_period`` cycles; without it the
switch marks the same way but senders ignore the marks. ``reroute=(job, position, cycle)`` moves a
flow off the switch from that cycle (its packets bypass it, same latency): the switch sees it stall
at its step, which holds its job's minimum down unless ageing (``age_out`` epochs of
``2**epoch_bits`` cycles) declares it stale. Completion of a job = the cycle its last flow delivered
its last packet.
"""
import collections
import csv
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from models.headers import RC_SEND_MIDDLE, roce_packet
from models.progress_regfile import OP_INSTALL, OP_JOB, ProgressRegfileModel, ProgressRegfileParams
from tools.cli import Parser, integer, run

__all__ = ["PARAMS", "Setting", "simulate", "sweep", "SWEEP_BURSTS", "SWEEP_DELTAS"]

BUILD = Path(__file__).resolve().parents[1] / "build"
#: The switch's register file: 2 jobs of 4 positions, 64-cycle epochs.
PARAMS = ProgressRegfileParams(jobs=2, ring=4, table=16, step_bits=16, data_bytes=64, epoch_bits=6, age_bits=4)
#: The jitter axis of the sweep: burst start probability per cycle (0 = no background traffic).
SWEEP_BURSTS = (0.0, 0.004, 0.01, 0.02)
SWEEP_DELTAS = (0, 1, 2)
JOBS = 2
SHARED = ((0, 1), (1, 0))          # the flows on link S
JITTERY = (1, 2)                   # the flow whose link carries the background bursts


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One closed-loop setting (see the module docstring)."""
    steps: int = 24
    chunk: int = 8
    run_ahead: int = 4
    service: int = 8
    delay: int = 5
    rtt: int = 40
    window: int = 16
    cut: float = 0.5
    floor: float = 1 / 64
    recover: float = 1 / 64
    recover_period: int = 40
    cnp_gap: int = 50
    delta: int = 1
    age_out: int = 0
    burst_p: float = 0.01
    burst_on: int = 1000
    burst_load: float = 0.9
    reroute: tuple = None
    max_cycles: int = 60000

    def __post_init__(self):
        for name in ("steps", "chunk", "run_ahead", "service", "window", "cnp_gap", "recover_period"):
            if getattr(self, name) < 1:
                raise ValueError(f"Setting.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.burst_p <= 1 or not 0 <= self.burst_load <= 1 or not 0 < self.cut <= 1:
            raise ValueError("Setting.burst_p, burst_load must be in 0..1 and cut in (0, 1]")
        if not 0 <= self.age_out <= (1 << PARAMS.age_bits) - 2:
            raise ValueError(f"Setting.age_out must be in 0..{(1 << PARAMS.age_bits) - 2}, got {self.age_out}")


def qp(job, position):
    """Distinct flow-table entries for every flow (the table is direct-mapped by QP)."""
    return 0x100 + PARAMS.ring * job + position


class Flow:
    def __init__(self, job, position, service):
        self.job, self.position = job, position
        self.sent = self.delivered = self.marks = 0
        self.rate, self.credit, self.calm, self.last_cnp = 1 / service, 0.0, 0, None
        self.done = None
        self.link = "S" if (job, position) in SHARED else f"{job}{position}"
        dst = f"10.{job}.0.{(position + 1) % PARAMS.ring + 1}"
        self.raw = bytes(roce_packet(src=f"10.{job}.0.{position + 1}", dst=dst,
                                     qp=qp(job, position), op=RC_SEND_MIDDLE, payload=bytes(4)))


def commands(setting):
    for job in range(JOBS):
        yield dict(op=OP_JOB, qp=0, job=job, position=0, chunk=setting.chunk, delta=setting.delta,
                   age_out=setting.age_out)
        for p in range(PARAMS.ring):
            yield dict(op=OP_INSTALL, qp=qp(job, p), job=job, position=p, chunk=0, delta=0, age_out=0)


def simulate(setting, throttle, seed, record=False):
    """Run the loop; a dict: ``done`` (per job), ``marks`` (per flow), ``counters`` (the model's),
    ``cycles`` and, with ``record``, ``cycles_io``: per switch cycle from reset ``(command, packet in,
    packet out)`` (None where idle; a packet leaves the cycle after it entered), to replay on the RTL.
    The model's timer is the index into that list: the commands, one idle cycle, then the loop."""
    rng = random.Random(seed)
    ring, s = PARAMS.ring, setting
    model = ProgressRegfileModel(PARAMS)
    flows = {(j, p): Flow(j, p, s.service) for j in range(JOBS) for p in range(ring)}
    io = []
    for cmd in commands(s):
        model.config(cmd, len(io))
        io.append((cmd, None, None))
    io.append((None, None, None))
    start = len(io)
    events = collections.defaultdict(list)
    ingress, queues = collections.deque(), collections.defaultdict(collections.deque)
    free_at = collections.defaultdict(int)
    burst_until, background, out = -1, 0.0, None
    total = s.steps * s.chunk
    cycle = 0
    while cycle < s.max_cycles and any(f.done is None for f in flows.values()):
        for kind, f in events.pop(cycle, ()):
            if kind == "arrive":
                ingress.append(f)
            elif kind == "deliver":
                f.delivered += 1
                if f.delivered == total:
                    f.done = cycle
            elif throttle and (f.last_cnp is None or cycle - f.last_cnp >= s.cnp_gap):     # a CNP
                f.rate, f.calm, f.last_cnp = max(f.rate * s.cut, s.floor), 0, cycle
        for f in flows.values():
            pred = flows[f.job, (f.position - 1) % ring]
            f.calm += 1
            if f.calm >= s.recover_period:
                f.rate, f.calm = min(f.rate + s.recover, 1 / s.service), 0
            f.credit = min(f.credit + f.rate, 1.0)
            if (f.sent < total and f.credit >= 1.0 and f.sent - f.delivered < s.window
                    and pred.delivered // s.chunk >= f.sent // s.chunk - s.run_ahead + 1):
                f.credit -= 1.0
                f.sent += 1
                if s.reroute and (f.job, f.position) == tuple(s.reroute[:2]) and cycle >= s.reroute[2]:
                    events[cycle + 2 * s.delay + s.service].append(("deliver", f))
                else:
                    events[cycle + s.delay].append(("arrive", f))
        if cycle >= burst_until and s.burst_p and rng.random() < s.burst_p:
            burst_until = cycle + s.burst_on
        if cycle < burst_until:
            background += s.burst_load / s.service
            if background >= 1:
                background -= 1
                queues["%d%d" % JITTERY].append(None)
        raw = None
        if ingress:
            f = ingress.popleft()
            raw = f.raw
            steps = model.rows[f.job][0]
            result = model.packet(raw, start + cycle)
            marked = result[15] & 3 == 3
            assert not (marked and steps[f.position] == model.live_minimum(f.job)), "a flow at the minimum was marked"
            f.marks += marked
            queues[f.link].append((f, marked))
        if record:
            io.append((None, raw, out))
            out = result if raw is not None else None
        for name, q in queues.items():
            if q and cycle >= free_at[name]:
                free_at[name] = cycle + s.service
                item = q.popleft()
                if item is not None:
                    f, marked = item
                    events[cycle + s.delay].append(("deliver", f))
                    if marked:
                        events[cycle + s.delay + s.rtt].append(("cnp", f))
        cycle += 1
    if record:
        io.append((None, None, out))
    done = {j: max(f.done if f.done is not None else s.max_cycles for f in flows.values() if f.job == j)
            for j in range(JOBS)}
    return dict(done=done, marks={f"{j}{p}": f.marks for (j, p), f in flows.items()},
                counters=model.counters(), cycles=cycle, **({"cycles_io": io} if record else {}))


def mean_done(setting, throttle, seeds):
    """Per job, the mean completion over seeds ``1..seeds``."""
    runs = [simulate(setting, throttle, seed)["done"] for seed in range(1, seeds + 1)]
    return [sum(r[j] for r in runs) / seeds for j in range(JOBS)]


def sweep(setting, seeds, bursts=SWEEP_BURSTS, deltas=SWEEP_DELTAS):
    """Rows (burst_p, delta, job, none, symphony, gain) of mean completion over ``seeds`` seeds."""
    rows = []
    for burst in bursts:
        base = replace(setting, burst_p=burst)
        none = mean_done(base, False, seeds)
        for delta in deltas:
            sym = mean_done(replace(base, delta=delta), True, seeds)
            for j in range(JOBS):
                rows.append(dict(burst_p=burst, delta=delta, job="AB"[j], none=round(none[j], 1),
                                 symphony=round(sym[j], 1), gain=round(1 - sym[j] / none[j], 4)))
    return rows


def write(rows, path):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main(argv=None):
    parser = Parser(prog="sym_measure", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=integer(1, 1000), default=3, help="mean over seeds 1..N")
    for name, value in asdict(Setting()).items():
        if name not in ("reroute", "max_cycles"):
            parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--sweep", action="store_true", help="burst_p x delta grid instead of one setting")
    parser.add_argument("--out", default=str(BUILD / "sym_sweep.csv"), help="sweep CSV path")
    args = parser.parse_args(argv)
    setting = Setting(**{k: v for k, v in vars(args).items() if k not in ("seeds", "sweep", "out")})
    if args.sweep:
        rows = sweep(setting, args.seeds)
        write(rows, args.out)
        for row in rows:
            print(" ".join(f"{k}={v}" for k, v in row.items()))
        print(f"written {args.out}")
        return
    none, sym = mean_done(setting, False, args.seeds), mean_done(setting, True, args.seeds)
    for j in range(JOBS):
        print(f"job {'AB'[j]}: none {none[j]:.1f} symphony {sym[j]:.1f} gain {1 - sym[j] / none[j]:+.1%}")


if __name__ == "__main__":
    run("sym_measure", main)

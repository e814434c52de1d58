"""Symphony: ring all-reduce jobs on a leaf-spine fabric with jitter, with and without Symphony.

The setting (after the paper's Astra-Sim runs, *chosen* sizes; one time unit = one cycle of a spine's
pipeline, which takes one packet a cycle):

- ``leaves`` leaves of ``jobs`` hosts and ``spines`` spines; job ``j``'s rank ``r`` is host ``j`` of leaf
  ``r`` (``ranks`` = ``leaves``), so every ring step crosses the fabric: host -> leaf -> spine -> leaf ->
  host. A job's flows are routed through spine ``j mod spines`` (*chosen*: the spine then sees the job's
  whole ring, as Symphony's switch must), so ``jobs / spines`` jobs share every uplink and downlink of a
  spine; links carry ``oversub`` host line rates (below ``jobs / spines``: the jobs contend);
- each job: a ring all-reduce, ``2 (ranks - 1)`` steps of ``chunk`` packets, rank ``r`` sending step ``s``
  once it has received step ``s - run_ahead`` (go-back-N RoCE, DCQCN; queues mark ECN from ``kmin``);
- jitter: each fabric link (leaf uplinks and spine downlinks) independently starts a background burst
  with probability ``burst_p`` per cycle, ``burst_on`` cycles long, taking ``burst_load`` of the link;
- Symphony: the ``ProgressRegfile`` model at every spine (its jobs' rings, ``delta``, one packet a cycle
  through ``Clocked``); a packet whose flow is more than ``delta`` steps ahead of its job's slowest is
  marked CE and its sender's DCQCN slows it; without Symphony the same spines run, their marks are not
  applied (the same timing; the queues' ECN is on in both).

Reported: each job's completion and the collective's (the last job's) with and without Symphony, over a
sweep of jitter (``burst_p``) and ``delta``. Without jitter nothing is misaligned and Symphony marks
nothing: the case where it cannot help. ``rtl=True`` records every cycle of spine 0's regfile inputs,
which the thin test replays on the RTL through the lockstep.
"""
import collections
import functools
import math
import statistics
import time
from dataclasses import asdict, dataclass, fields, replace

from models.contract import Packet as Frame
from models.headers import RC_SEND_MIDDLE, roce_packet
from models.progress_regfile import OP_INSTALL, OP_JOB, ProgressRegfileModel, ProgressRegfileParams
from scenarios.common import OUT, figure, write_csv, write_summary
from scenarios.net import CE, Calendar, Clocked, Dcqcn, Ecn, GoBackN, Packet, Port, RingAllReduce, stream

__all__ = ["Setting", "simulate", "sweep", "arguments", "main"]

SIZE = 1024
WIDTH = 64


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One run's setting (module docstring)."""
    jobs: int = 8
    leaves: int = 8
    spines: int = 4
    chunk: int = 16
    run_ahead: int = 1
    service: int = 16
    oversub: int = 1
    fabric: int = 20
    window: int = 32
    kmin: int = 16
    kmax: int = 64
    delta: int = 2
    burst_p: float = 0.0005
    burst_on: int = 2000
    burst_load: float = 0.8
    rto: int = 20000
    max_cycles: int = 2_000_000

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("burst_p", "burst_load"):
                if not 0 <= value <= 1:
                    raise ValueError(f"Setting.{f.name} must be in 0..1, got {value}")
            elif value < (0 if f.name in ("delta", "kmin") else 1):
                raise ValueError(f"Setting.{f.name} must be >= 1, got {value}")
        if self.leaves < 2 or self.jobs % self.spines:
            raise ValueError(f"Setting: leaves >= 2 and jobs a multiple of spines needed, got {self.leaves}, "
                             f"{self.jobs}, {self.spines}")

    @property
    def params(self):
        """A spine's register file: its jobs' rings."""
        return ProgressRegfileParams(jobs=self.jobs // self.spines, ring=self.leaves, table=16 * self.leaves,
                                     step_bits=16, data_bytes=WIDTH, epoch_bits=6, age_bits=4)


def qp(setting, job, rank):
    """The QP of job ``job``'s rank ``rank`` (distinct entries of its spine's direct-mapped table)."""
    return 0x100 + (job // setting.spines) * setting.leaves + rank


@functools.cache
def _frame(src, dst, number):
    return bytes(roce_packet(src=src, dst=dst, qp=number, op=RC_SEND_MIDDLE, payload=bytes(4)))


class Spine:
    """A spine: its pipeline (one packet a cycle) with the ``ProgressRegfile`` model when Symphony is on,
    and its downlinks (``ports``, one per leaf)."""

    def __init__(self, cal, s, index, deliver, symphony, seed, record=False):
        self.cal, self.s, self.symphony = cal, s, symphony
        ecn = Ecn(s.kmin, s.kmax, 1.0, stream(seed, "symphony", "ecn", index)) if s.kmin else None
        self.ports = [Port(cal, deliver, s.oversub * SIZE / s.service, s.fabric, ecn=ecn, name=f"s{index}l{leaf}")
                      for leaf in range(s.leaves)]
        self.ingress = collections.deque()
        self.model = ProgressRegfileModel(s.params)
        self.commands = collections.deque()
        for local in range(s.jobs // s.spines):
            self.commands.append(dict(op=OP_JOB, qp=0, job=local, position=0, chunk=s.chunk, delta=s.delta,
                                      age_out=0))
            job = index + local * s.spines
            for rank in range(s.leaves):
                self.commands.append(dict(op=OP_INSTALL, qp=qp(s, job, rank), job=local, position=rank, chunk=0,
                                          delta=0, age_out=0))
        self.marks = collections.Counter()
        self.leaving = collections.deque()
        self.block = Clocked(cal, self.model, self._inputs, self._outputs, record)

    def arrive(self, packet):
        if packet.flow is None:                 # background: it leaves the fabric here
            return
        self.ingress.append(packet)

    def _inputs(self):
        cmd = self.commands[0] if self.commands else None
        head = self.ingress[0] if self.ingress and cmd is None else None
        beat = raw = None
        if head is not None:
            raw = head.tag[2]
            beat = {"data": int.from_bytes(raw, "little"), "keep": (1 << len(raw)) - 1, "first": 1, "last": 1,
                    "meta": {"port": 0}}
        inputs = {"cfg__valid": int(cmd is not None), "cfg__payload": cmd, "i__valid": int(beat is not None),
                  "i__payload": beat, "o__ready": 1}
        if raw is not None:
            inputs["i__packet"] = Frame(raw, {"port": 0})
        return inputs

    def _outputs(self, inputs, out):
        if inputs["cfg__valid"] and out["cfg__ready"]:
            self.commands.popleft()
        if out["o__valid"]:                     # the packet taken the cycle before (the output register)
            packet = self.leaving.popleft()
            if out["o__payload"]["data"].to_bytes(WIDTH, "little")[15] & 3 == 3 and packet.ecn != CE:
                if self.symphony:
                    packet.ecn = CE
                self.marks[packet.flow.name] += 1
            self.ports[packet.tag[1]].send(packet)
        if inputs["i__valid"] and out["i__ready"]:
            self.leaving.append(self.ingress.popleft())


def simulate(setting, symphony, seed, rtl=False):
    """One run: ``done`` (per job), ``collective`` (the last job's), ``marks``, ``counters`` (spine 0's
    regfile), ``cycles``, ``events``, ``seconds``; with ``rtl`` spine 0's regfile inputs of every cycle
    (``record``)."""
    s, cal = setting, Calendar()
    wall = time.perf_counter()
    line = SIZE / s.service
    def down(packet):                           # spine -> leaf: to the destination host's port
        if packet.flow is not None:
            leaf_down[packet.tag[1]][packet.tag[3]].send(packet)

    spines = [Spine(cal, s, k, down, symphony, seed, rtl and k == 0) for k in range(s.spines)]
    leaf_down = [[Port(cal, lambda p: p.flow.receive(p), line, s.fabric, name=f"l{leaf}h{h}")
                  for h in range(s.jobs)] for leaf in range(s.leaves)]
    uplinks = [[Port(cal, spines[k].arrive, s.oversub * line, s.fabric, ecn=Ecn(s.kmin, s.kmax, 1.0, stream(
        seed, "symphony", "up", leaf, k)) if s.kmin else None, name=f"l{leaf}s{k}") for k in range(s.spines)]
        for leaf in range(s.leaves)]
    nics = [[Port(cal, lambda p: uplinks[p.tag[4]][p.tag[0] % s.spines].send(p), line, s.fabric)
             for h in range(s.jobs)] for leaf in range(s.leaves)]
    rings = []
    for job in range(s.jobs):
        def connect(src, dst, packets, done, progress, job=job):
            raw = _frame(f"10.{job}.0.{src + 1}", f"10.{job}.0.{dst + 1}", qp(s, job, src))
            dcqcn = Dcqcn(cal, line, period=20 * s.fabric, increase=line / 32, cnp_gap=4 * s.fabric)
            return GoBackN(cal, f"{job}.{src}", packets, SIZE, nics[src][job].send, s.window, s.rto, 4 * s.fabric,
                           line, dcqcn, done, progress, tag=(job, dst, raw, job, src))
        rings.append(RingAllReduce(cal, s.leaves, s.chunk, connect, s.run_ahead, name=f"job{job}"))
    links = [p for row in uplinks for p in row] + [p for sp in spines for p in sp.ports]
    rng = stream(seed, "symphony", "jitter")
    _jitter(cal, s, links, rng, until=s.max_cycles)
    for ring in rings:
        cal.at(0, ring.begin)
    for spine in spines:
        spine.block.start()
    cal.run(until=s.max_cycles, stop=lambda: all(r.finish is not None for r in rings))
    for spine in spines:
        spine.block.stop()
    done = [math.ceil(r.finish) if r.finish is not None else None for r in rings]
    marks = collections.Counter()
    for spine in spines:
        marks.update(spine.marks)
    return dict(symphony=symphony, done=done, collective=None if None in done else max(done),
                marks=sum(marks.values()), counters=spines[0].model.counters(), cycles=math.ceil(cal.now),
                events=cal.events, seconds=time.perf_counter() - wall,
                record=spines[0].block.record if rtl else None)


def _jitter(cal, s, links, rng, until):
    """Background bursts on the fabric links (module docstring): each link's burst starts are a Bernoulli
    process of ``burst_p`` per cycle, drawn as geometric gaps."""
    if not s.burst_p or not s.burst_load:
        return
    gap = s.service / (s.oversub * s.burst_load)            # cycles between background packets in a burst

    def burst(link):
        for k in range(int(s.burst_on / gap)):
            cal.after(k * gap, link.send, Packet(None, 0, SIZE, 0))
        cal.after(s.burst_on + _geometric(rng, s.burst_p), burst, link)

    for link in links:
        start = _geometric(rng, s.burst_p)
        if start < until:
            cal.at(start, burst, link)


def _geometric(rng, p):
    return 1 + int(math.log(1 - rng.random()) / math.log(1 - p)) if p < 1 else 1


#: The default sweep: jitter (burst starts per cycle per link) x ``delta``.
BURSTS = (0.0, 0.0005, 0.001, 0.002)
DELTAS = (1, 2, 3)
COLUMNS = ("burst_p", "delta", "job", "none", "symphony", "gain", "marks", "events", "seconds")


def sweep(setting, seeds, bursts=BURSTS, deltas=DELTAS):
    """Rows (per burst rate, delta and job, plus ``job = all``: the collective) of the mean completion over
    seeds ``seeds`` without and with Symphony."""
    rows = []
    for burst in bursts:
        base = replace(setting, burst_p=burst)
        none = [simulate(base, False, seed) for seed in seeds]
        for delta in deltas:
            sym = [simulate(replace(base, delta=delta), True, seed) for seed in seeds]
            events = sum(r["events"] for r in none + sym)
            seconds = sum(r["seconds"] for r in none + sym)
            for job in [*range(setting.jobs), "all"]:
                pick = (lambda r: r["collective"]) if job == "all" else (lambda r, j=job: r["done"][j])
                a, b = (statistics.fmean(pick(r) or setting.max_cycles for r in runs) for runs in (none, sym))
                rows.append(dict(burst_p=burst, delta=delta, job=job, none=round(a, 1), symphony=round(b, 1),
                                 gain=round(1 - b / a, 4), marks=sum(r["marks"] for r in sym),
                                 events=events, seconds=round(seconds, 2)))
    return rows


def best(rows, job="all"):
    """The row of the largest gain (``job``: ``all`` the collective, ``any`` a single job)."""
    pool = [r for r in rows if (r["job"] == "all") == (job == "all")]
    return max(pool, key=lambda r: r["gain"])


def plot(rows, seed, name, out):
    """Two panels: the collective's gain over jitter per delta; per-job gains at the best setting."""
    with figure(name, cols=2, width=6.5, height=4.2, seed=seed, out=out) as (lines, jobs):
        for delta in sorted({r["delta"] for r in rows}):
            pts = [r for r in rows if r["delta"] == delta and r["job"] == "all"]
            lines.plot([r["burst_p"] for r in pts], [100 * r["gain"] for r in pts], "o-", label=f"delta {delta}")
        lines.axhline(0, color="black", lw=0.5)
        lines.set(xlabel="background burst starts per link per cycle (jitter)",
                  ylabel="collective completion gain, % (positive = faster)",
                  title="the collective (last job done) with Symphony")
        lines.legend(fontsize="small")
        top = best(rows)
        at = [r for r in rows if (r["burst_p"], r["delta"]) == (top["burst_p"], top["delta"]) and r["job"] != "all"]
        jobs.bar([str(r["job"]) for r in at], [100 * r["gain"] for r in at])
        jobs.axhline(0, color="black", lw=0.5)
        jobs.set(xlabel="job", ylabel="completion gain, %",
                 title=f"per job at burst_p {top['burst_p']}, delta {top['delta']} (the collective's best)")
    return out / f"{name}.png"


def arguments(parser):
    """The scenario's options (``python -m scenarios symphony --help``)."""
    for f in fields(Setting):
        kind = float if f.name in ("burst_p", "burst_load") else int
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=kind, default=f.default, metavar="X")
    parser.add_argument("--seeds", type=int, default=1, help="mean over seeds seed..seed+N-1 (default 1)")
    parser.add_argument("--bursts", default=",".join(map(str, BURSTS)), help="jitter axis (comma-separated)")
    parser.add_argument("--deltas", default=",".join(map(str, DELTAS)), help="delta axis (comma-separated)")


def main(args, out=OUT, name="symphony"):
    setting = Setting(**{f.name: getattr(args, f.name) for f in fields(Setting)})
    try:
        bursts = [float(x) for x in args.bursts.split(",")]
        deltas = [int(x) for x in args.deltas.split(",")]
    except ValueError:
        raise ValueError("--bursts and --deltas: comma-separated numbers") from None
    if args.seeds < 1 or not bursts or not deltas or not all(0 <= b <= 1 for b in bursts) or min(deltas) < 0:
        raise ValueError("--seeds >= 1, --bursts in 0..1 and --deltas >= 0 needed")
    rows = sweep(setting, range(args.seed, args.seed + args.seeds), bursts, deltas)
    csv = write_csv(name, COLUMNS, [[r[c] for c in COLUMNS] for r in rows], out)
    png = plot(rows, args.seed, name, out)
    top, job = best(rows), best(rows, "any")
    calm = [r for r in rows if r["burst_p"] == 0 and r["job"] == "all"]
    events, seconds = sum({(r["burst_p"], r["delta"]): r["events"] for r in rows}.values()), sum(
        {(r["burst_p"], r["delta"]): r["seconds"] for r in rows}.values())
    lines = [f"symphony, seeds {args.seed}..{args.seed + args.seeds - 1}: {setting.jobs} jobs of {setting.leaves} "
             f"ranks, {setting.spines} spines; " + ", ".join(f"{k}={v}" for k, v in asdict(setting).items()
                                                          if k not in ("burst_p", "delta")),
             f"collective: best {top['gain']:+.1%} at burst_p {top['burst_p']}, delta {top['delta']} "
             f"({top['none']} -> {top['symphony']} cycles); one job: best {job['gain']:+.1%} (job {job['job']}, "
             f"burst_p {job['burst_p']}, delta {job['delta']}); paper: up to 54 %",
             "without jitter: " + ", ".join(f"delta {r['delta']} {r['gain']:+.1%} ({r['marks']} marks)" for r in calm),
             *(f"burst_p {b}: " + ", ".join(f"delta {r['delta']} {r['gain']:+.1%}" for r in rows
                                            if r["burst_p"] == b and r["job"] == "all") for b in bursts),
             f"{events} events in {seconds:.1f} s ({events / max(seconds, 1e-9):,.0f} events/s)",
             f"written {csv}, {png}"]
    write_summary(name, lines, out)
    return rows

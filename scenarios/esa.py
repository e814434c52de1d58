"""ESA: jobs of different priorities sharing an aggregator pool, under ATP, SwitchML and ESA.

The closed loop of ``tools/agg_measure.py`` (on the library's calendar): ``jobs`` jobs, job ``j`` of priority
``j`` with 2..``workers`` workers and ``rounds`` rounds, a window of outstanding rounds, retransmission
timeouts, a parameter server serving one piece per ``ps_cost`` cycles that sums what it receives and ACKs
completed rounds, link latencies; the switch is the ``Aggregator`` golden model of each policy. The sweep
runs the trace over pool sizes x job counts and reports each policy's mean job completion against ESA's
(the paper: ESA up to 1.35x better average JCT). The thin test runs the default trace with the RTL of each
policy in the loop, every output checked by the lockstep.
"""
import time

from models.aggregator import POLICIES
from scenarios.common import OUT, figure, write_csv, write_summary
from tools.agg_measure import simulate

__all__ = ["TRACE", "arguments", "main", "sweep"]

TRACE = dict(jobs=4, rounds=20, window=3, latency=20, jitter=8, timeout=400, ps_cost=6, slots=4, workers=4, values=2)
SLOTS, JOBS = (4, 6, 8, 12, 16), (2, 4, 8)


def mean_completion(loop):
    return sum(loop.finish.values()) / max(len(loop.finish), 1)


def sweep(config, slots=SLOTS, jobs=JOBS):
    """Rows: mean job completion per policy at every (jobs, slots); SwitchML needs a range per job."""
    rows = []
    for j in jobs:
        for k in slots:
            row = dict(jobs=j, slots=k)
            for policy in POLICIES:
                row[policy] = "" if policy == "switchml" and k < j else round(
                    mean_completion(simulate(policy, **dict(config, jobs=j, slots=k))[0]), 1)
            row["atp_over_esa"] = round(row["atp"] / row["esa"], 3)
            row["switchml_over_esa"] = round(row["switchml"] / row["esa"], 3) if row["switchml"] != "" else ""
            rows.append(row)
    return rows


def plot(rows, seed, name, out):
    """One panel per ratio: ATP's and SwitchML's mean completion over ESA's against the pool size."""
    with figure(name, cols=2, width=6, height=4, seed=seed, out=out) as (atp, sml):
        for j in sorted({r["jobs"] for r in rows}):
            pts = [r for r in rows if r["jobs"] == j]
            atp.plot([r["slots"] for r in pts], [r["atp_over_esa"] for r in pts], "o-", label=f"{j} jobs")
            ok = [r for r in pts if r["switchml_over_esa"] != ""]
            sml.plot([r["slots"] for r in ok], [r["switchml_over_esa"] for r in ok], "o-", label=f"{j} jobs")
        for ax, who in ((atp, "ATP"), (sml, "SwitchML")):
            ax.axhline(1, color="black", lw=0.5)
            ax.set(xlabel="aggregator slots", ylabel=f"{who} / ESA mean job completion",
                   title=f"{who} against ESA (above 1: ESA faster)")
            ax.legend(fontsize="small")
        atp.axhline(1.35, color="grey", ls=":", label="paper: up to 1.35x")
        atp.legend(fontsize="small")
    return out / f"{name}.png"


def arguments(parser):
    """The scenario's options (``python -m scenarios esa --help``)."""
    for key, value in TRACE.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, default=value, metavar="N")
    parser.add_argument("--sweep-slots", default=",".join(map(str, SLOTS)), help="pool sizes of the sweep")
    parser.add_argument("--sweep-jobs", default=",".join(map(str, JOBS)), help="job counts of the sweep")


def main(args, out=OUT, name="esa"):
    config = {key: getattr(args, key) for key in TRACE}
    try:
        slots = [int(x) for x in args.sweep_slots.split(",")]
        jobs = [int(x) for x in args.sweep_jobs.split(",")]
    except ValueError:
        raise ValueError("--sweep-slots and --sweep-jobs: comma-separated integers") from None
    if min(config.values()) < 1 or min(slots + jobs) < 1:
        raise ValueError("every setting must be >= 1")
    wall = time.perf_counter()
    loops = {policy: simulate(policy, args.seed, **config) for policy in POLICIES}
    rows = [dict(jobs=config["jobs"], slots=config["slots"], policy=p, mean=round(mean_completion(loop), 1),
                 held=round(loop.stats(model.counters())["held"], 3), wrong_sums=len(loop.wrong_sums()),
                 collisions=model.counters()["collision"]) for p, (loop, model) in loops.items()]
    grid = sweep(dict(config, seed=args.seed), slots, jobs)
    seconds = time.perf_counter() - wall
    csv = write_csv(name, ["jobs", "slots", "policy", "mean", "held", "wrong_sums", "collisions"],
                    [list(r.values()) for r in rows], out)
    write_csv(f"{name}_sweep", list(grid[0]), [list(r.values()) for r in grid], out)
    png = plot(grid, args.seed, name, out)
    best = max(grid, key=lambda r: r["atp_over_esa"])
    mean = {r["policy"]: r["mean"] for r in rows}
    lines = [f"esa, seed {args.seed}: " + ", ".join(f"{k}={v}" for k, v in config.items()),
             "mean job completion " + ", ".join(f"{p} {m}" for p, m in mean.items())
             + f" cycles: ATP/ESA {mean['atp'] / mean['esa']:.2f}x, SwitchML/ESA {mean['switchml'] / mean['esa']:.2f}x",
             f"sweep: ATP/ESA up to {best['atp_over_esa']:.2f}x ({best['jobs']} jobs, {best['slots']} slots); "
             "paper: up to 1.35x",
             *(f"{j} jobs: ATP/ESA " + ", ".join(f"{r['slots']} slots {r['atp_over_esa']:.2f}x" for r in grid
                                                if r["jobs"] == j) for j in jobs),
             f"{seconds:.1f} s", f"written {csv}, {png}"]
    write_summary(name, lines, out)
    return rows

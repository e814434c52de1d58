"""The scenarios' results table, computed from their CSVs: ``python -m tools.scenario_table [--docs]``.

``make scenarios`` (and ``make test``) writes ``build/scenarios/<name>.csv``; each row of the table
is computed from one of them by its function in ``SUMMARIES`` (no number is typed by hand). Without
``--docs`` it prints the table; with it, it rewrites the rows of the CSVs written so far in the table
between the ``<!-- scenarios -->`` markers of ``docs/scenarios.md`` (the other rows stay). The
scenarios run at seed 1 unless ``INNET_SEED`` is set: ``scenarios/conftest.py`` checks, after each
scenario run at that seed, that the docs' rows of the CSVs it wrote are the ones this tool computes
from them.
"""
import csv
import statistics
from collections import defaultdict
from pathlib import Path

from tools import sections
from tools.cli import Parser, run

ROOT = Path(__file__).resolve().parents[1]
CSVS = ROOT / "build" / "scenarios"
DOCS = ROOT / "docs" / "scenarios.md"
HEADER = "| run (CSV) | result (seed 1) |\n|---|---|"


def _int(text):
    return int(float(text))


def _pct(new, old):
    return f"{(new - old) / old:+.1%}".replace("-", "−")


def _range(values, fmt="{:.2f}", unit=""):
    low, high = min(values), max(values)
    return (fmt.format(low) if low == high else f"{fmt.format(low)} … {fmt.format(high)}") + unit


def spillway(rows):
    """Iteration time (last flow done) and drops per mode and spill-link latency."""
    runs = defaultdict(lambda: [0, 0])
    for r in rows:
        run_ = runs[r["mode"], _int(r["latency"])]
        run_[0] = _int(r["iteration"])
        run_[1] += _int(r["dropped"])
    fmt = lambda key: f"{runs[key][0]} ({runs[key][1]} drops)"      # noqa: E731
    spill = [lat for mode, lat in runs if mode == "disaggregated"]
    parts = [f"iteration time, cycles: tail drop {fmt(('taildrop', 0))}; in-switch {fmt(('inswitch', 0))}; "
             "Spillway " + ", ".join(f"{fmt(('disaggregated', lat))} at latency {lat}" for lat in spill)]
    point = [key for key in runs if key[0].startswith("rtl_point")]
    if point:
        spill_point = next(k for k in point if k[0].endswith("disaggregated"))
        tail_point = next(k for k in point if k[0].endswith("taildrop"))
        parts.append(f"RTL point: Spillway {fmt(spill_point)} vs tail drop {fmt(tail_point)}")
    return "; ".join(parts)


def symphony(rows):
    """Completion per job with and without Symphony; the rerouted flow with and without ageing; the
    single-bottleneck counter-example's step skew."""
    at = {(r["case"], r["mode"], r["job"]): r for r in rows}
    done = lambda case, mode, job: _int(at[case, mode, job]["completion"])  # noqa: E731
    a0, a1 = done("shared", "none", "A"), done("shared", "symphony", "A")
    b0, b1 = done("shared", "none", "B"), done("shared", "symphony", "B")
    named = lambda mode: "without Symphony" if mode == "none" else mode.replace("symphony, ", "Symphony, ")  # noqa: E731
    reroute = [(named(mode), done("reroute", mode, "B"), _int(at["reroute", mode, "B"]["aged_switch"]))
               for case, mode, job in at if case == "reroute" and job == "B"]
    neck = {mode: at["bottleneck", mode, "ring"] for mode in ("none", "symphony")}
    return (f"shared hop: job A {a0} → {a1} cycles ({_pct(a1, a0)}), job B {b0} → {b1}; a flow rerouted, job B: "
            + ", ".join(f"{value} {mode}" + (f" ({aged} aged)" if aged else "") for mode, value, aged in reroute)
            + f"; one bottleneck: mean step skew {float(neck['none']['mean_skew']):.2f} → "
            f"{float(neck['symphony']['mean_skew']):.2f}, completion {neck['none']['completion']} vs "
            f"{neck['symphony']['completion']}")


def symphony_sweep(rows):
    """Symphony's gain per job over the burst rates, for each ``delta``."""
    gains = defaultdict(list)
    for r in rows:
        gains[_int(r["delta"]), r["job"]].append(100 * float(r["gain"]))
    deltas = sorted({d for d, _ in gains})
    return "gain over burst rates: " + "; ".join(
        f"delta {d}: " + ", ".join(f"{job} {_range(gains[d, job], '{:+.1f}', ' %')}" for job in ("A", "B"))
        for d in deltas).replace("-", "−")


def esa(rows):
    """Mean job completion and slot occupancy per policy."""
    mean = {r["policy"]: r for r in rows if r["job"] == "mean"}
    names = {"atp": "ATP", "switchml": "SwitchML", "esa": "ESA"}
    return ("mean job completion " + ", ".join(f"{names[p]} {float(r['completion']):.0f}" for p, r in mean.items())
            + " cycles; slots held " + " / ".join(f"{float(r['slots_held']):.0%}" for r in mean.values()))


def esa_sweep(rows):
    """ATP/ESA mean completion per job count over the pool sizes; where SwitchML is fastest."""
    by_jobs = defaultdict(list)
    for r in rows:
        by_jobs[_int(r["jobs"])].append(r)
    parts = []
    for jobs, group in sorted(by_jobs.items()):
        ratios = [float(r["atp"]) / float(r["esa"]) for r in group]
        fastest = [_int(r["slots"]) for r in group
                   if r["switchml"] and float(r["switchml"]) < min(float(r["atp"]), float(r["esa"]))]
        parts.append(f"{jobs} jobs: ATP/ESA {_range(ratios, unit='x')}, SwitchML fastest "
                     + (f"from {min(fastest)} slots" if fastest else "nowhere"))
    return "; ".join(parts)


def mrc(rows):
    """Goodput and the shared uplink's queue per run."""
    runs = defaultdict(list)
    for r in rows:
        runs[r["run"]].append(r)
    mean = lambda run, key: statistics.fmean(float(r[key]) for r in runs[run])  # noqa: E731
    low = lambda run: min(float(r["goodput"]) for r in runs[run])  # noqa: E731
    return (f"(a) a lossy EV: goodput {mean('drop', 'goodput'):.2f} (no loss: {mean('no_drop', 'goodput'):.2f}); "
            f"(b) two QPs on one uplink: queue {mean('ignore', 'uplink0_queue'):.1f} → "
            f"{mean('collide', 'uplink0_queue'):.1f} packets, goodput {mean('ignore', 'goodput'):.2f} → "
            f"{mean('collide', 'goodput'):.2f} when the ECN echo is acted on; (c) uplinks failed one by one: goodput "
            f"{mean('fail', 'goodput'):.2f} (min {low('fail'):.2f}) vs {mean('ecmp', 'goodput'):.2f} single-path ECMP")


def _percentile(values, q):
    """Nearest-rank percentile (as the scenario's)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-q * len(ordered) // 100) - 1))]


def dblp(rows):
    """Round latency per loss policy; burst rounds against the reliable policy; delivered loss."""
    runs = defaultdict(list)
    for r in rows:
        if not r["run"].startswith("sweep"):        # the oracle's loss sweep: dblp_sweep's row
            runs[r["run"]].append(r)
    size = max(_int(r["count"]) for r in runs["reliable"])        # E: every reliable round closes FULL
    burst_mean = {name: statistics.fmean(_int(r["latency"]) for r in group if _int(r["burst_lost"]))
                  for name, group in runs.items()}
    parts = []
    for name, group in runs.items():
        latency = [_int(r["latency"]) for r in group]
        lost = sum(size - _int(r["count"]) for r in group if r["kind"] != "ABORT") / (size * len(group))
        parts.append(f"{name} {_percentile(latency, 50)}/{_percentile(latency, 99)}/{max(latency)}, burst rounds "
                     f"{burst_mean['reliable'] / burst_mean[name]:.2f}x, loss {lost:.1%}")
    return "round latency p50/p99/max: " + "; ".join(parts)


def dblp_sweep(rows):
    """Fraction of rounds closed without a NACK against the binomial oracle's interval."""
    inside = all(float(r["lo"]) <= float(r["no_nack_fraction"]) <= float(r["hi"]) for r in rows)
    return ("no-NACK fraction (closed form) at loss " + ", ".join(
        f"{float(r['loss']):.0%}: {float(r['no_nack_fraction']):.3f} ({float(r['closed_form']):.3f})" for r in rows)
        + ("; inside the interval at every loss rate" if inside else "; OUTSIDE the interval somewhere"))


def sdr(rows):
    """Slowdown per scheme at the largest message and drop rate; EC fallbacks against 1 - P_EC^L."""
    chunks = max(_int(r["chunks"]) for r in rows)
    top = max(float(r["p_drop"]) for r in rows)
    at = {r["scheme"]: r for r in rows if _int(r["chunks"]) == chunks and float(r["p_drop"]) == top}
    names = {"sr_rto": "SR-RTO", "sr_nack": "SR-NACK", "ec_mds": "EC MDS", "ec_xor": "EC XOR"}
    return (f"{chunks} chunks at chunk drop {top:g}: slowdown vs ideal "
            + ", ".join(f"{names[s]} {float(r['slowdown']):.2f}x" for s, r in at.items())
            + "; fallback to SR " + ", ".join(f"{names[s]} {float(at[s]['fallback']):.0%} "
                                              f"(1 − P_EC^L {float(at[s]['closed']):.0%})"
                                              for s in ("ec_mds", "ec_xor") if s in at))


#: CSV name -> the function computing its row (in the table's order).
SUMMARIES = {"spillway": spillway, "symphony": symphony, "symphony_sweep": symphony_sweep, "esa": esa,
             "esa_sweep": esa_sweep, "mrc": mrc, "dblp": dblp, "dblp_sweep": dblp_sweep, "sdr": sdr}


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def row(name, path=None):
    """The table row of CSV ``name`` (default ``build/scenarios/<name>.csv``)."""
    path = Path(path) if path else CSVS / f"{name}.csv"
    try:
        text = SUMMARIES[name](read(path))
    except (KeyError, ValueError, ZeroDivisionError, StopIteration) as error:
        raise ValueError(f"{path}: not the CSV the {name} scenario writes ({type(error).__name__}: {error})") from None
    return f"| `{name}` | {text} |"


def written():
    """The names of ``SUMMARIES`` whose CSV is in ``build/scenarios``; ``FileNotFoundError`` if none is."""
    found = [name for name in SUMMARIES if (CSVS / f"{name}.csv").exists()]
    if not found:
        raise FileNotFoundError("no scenario CSV in build/scenarios: run make scenarios")
    return found


def documented(name, docs=DOCS):
    """The row of CSV ``name`` in the docs' table, or None."""
    prefix = f"| `{name}` |"
    return next((line for line in sections.body(docs, "scenarios").splitlines() if line.startswith(prefix)), None)


def main(argv=None):
    parser = Parser(prog="scenario_table", description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", action="store_true",
                        help="rewrite the rows of docs/scenarios.md of the CSVs in build/scenarios (the others stay)")
    args = parser.parse_args(argv)
    names = written()
    if not args.docs:
        print("\n".join([HEADER, *map(row, names)]))
        return
    rows = {name: row(name) if name in names else documented(name) for name in SUMMARIES}
    sections.rewrite(DOCS, "scenarios", "\n".join([HEADER, *filter(None, rows.values())]))
    print(f"{DOCS.relative_to(ROOT)}: rows of {', '.join(names)} written from build/scenarios")


if __name__ == "__main__":
    run("scenario_table", main)

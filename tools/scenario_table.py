"""The scenarios' results table, computed from their CSVs: ``python -m tools.scenario_table [--docs]``.

``make scenarios`` runs every scenario (``python -m scenarios NAME``, default settings, seed 1 unless
``INNET_SEED`` is set), each writing ``build/scenarios/<name>.csv``; each row of the table is computed
from one of them by its function in ``SUMMARIES`` (no number is typed by hand). Without ``--docs`` it
prints the table; with it, it rewrites the rows of the CSVs written so far in the table between the
``<!-- scenarios -->`` markers of ``docs/scenarios.md`` (the other rows stay).
"""
import csv
import re
import statistics
from collections import defaultdict
from pathlib import Path

from scenarios.mrc import QUEUE_WARMUP
from tools import sections
from tools.cli import Parser, run

ROOT = Path(__file__).resolve().parents[1]
CSVS = ROOT / "build" / "scenarios"
DOCS = ROOT / "docs" / "scenarios.md"
HEADER = "| run (CSV) | result (seed 1) |\n|---|---|"


def _int(text):
    return int(float(text))


def _pct(new, old):
    return f"{(new - old) / old:+.1%}"


def _minus(text):
    """Typographic minus signs on negative numbers."""
    return re.sub(r"-(?=\d)", "−", text)


def _range(values, fmt="{:.2f}", unit=""):
    low, high = min(values), max(values)
    return (fmt.format(low) if low == high else f"{fmt.format(low)} … {fmt.format(high)}") + unit


def spillway(rows):
    """Spillway against tail drop and the in-switch buffer: the modes at the default queue, the queue sweep."""
    modes = [r for r in rows if r["sweep"] == "modes"]
    at = {r["mode"]: r for r in modes if r["mode"] != "spillway"}
    spill = min((r for r in modes if r["mode"] == "spillway"), key=lambda r: _int(r["latency"]))
    sweep = defaultdict(dict)
    for r in rows:
        if r["sweep"] == "limit" and r["iteration"]:
            sweep[_int(r["limit"])][r["mode"]] = _int(r["iteration"])
    gains = {limit: m["spillway"] / m["taildrop"] - 1 for limit, m in sweep.items() if "taildrop" in m}
    it = lambda r: _int(r["iteration"])                                     # noqa: E731
    return (f"paper: up to 14 % lower iteration time. innet ({spill['flows']} flows, queue {spill['limit']}, spill "
            f"link {spill['latency']} cycles): iteration {it(spill)} vs tail drop {it(at['taildrop'])} "
            f"({_pct(it(spill), it(at['taildrop']))}), deflection {it(at['deflect'])}, in-switch "
            f"{it(at['inswitch'])} ({_pct(it(spill), it(at['inswitch']))}); cross-DC FCT p99 {spill['fct_p99']} vs "
            f"{at['taildrop']['fct_p99']} tail drop; queue sweep vs tail drop: "
            + ", ".join(f"{k} packets {100 * v:+.1f} %" for k, v in sorted(gains.items())))


def symphony(rows):
    """The collective's best gain and its conditions; no jitter."""
    coll = [r for r in rows if r["job"] == "all"]
    top = max(coll, key=lambda r: float(r["gain"]))
    jobs = max((r for r in rows if r["job"] != "all"), key=lambda r: float(r["gain"]))
    calm = [100 * float(r["gain"]) for r in coll if float(r["burst_p"]) == 0]
    return (f"paper: up to 54 % lower collective time. innet (8 jobs x 8 ranks, leaf-spine): collective "
            f"{100 * float(top['gain']):+.1f} % at burst_p {top['burst_p']}, delta {top['delta']} "
            f"({_int(top['none'])} → {_int(top['symphony'])} cycles); one job up to "
            f"{100 * float(jobs['gain']):+.1f} %; no jitter: {_range(calm, '{:+.1f}', ' %')}")


def esa(rows):
    """Mean job completion per policy on the default trace."""
    mean = {r["policy"]: float(r["mean"]) for r in rows}
    return (f"mean job completion ATP {mean['atp']:.0f}, SwitchML {mean['switchml']:.0f}, ESA {mean['esa']:.0f} "
            f"cycles (ATP/ESA {mean['atp'] / mean['esa']:.2f}x; paper: up to 1.35x)")


def esa_sweep(rows):
    """ATP/ESA per job count over the pool sizes."""
    by_jobs = defaultdict(list)
    for r in rows:
        by_jobs[_int(r["jobs"])].append(float(r["atp_over_esa"]))
    return "ATP/ESA mean completion: " + "; ".join(f"{j} jobs {_range(v, unit='x')}"
                                                   for j, v in sorted(by_jobs.items()))


def mrc(rows):
    """Goodput and the shared uplink's queue per run."""
    runs = defaultdict(list)
    for r in rows:
        runs[r["run"]].append(r)
    mean = lambda run, key, skip=1: statistics.fmean(float(r[key]) for r in runs[run][skip:])  # noqa: E731
    low = lambda run: min(float(r["goodput"]) for r in runs[run][1:])  # noqa: E731
    return (f"(a) a lossy EV: goodput {mean('drop', 'goodput'):.2f} (no loss: {mean('no_drop', 'goodput'):.2f}); "
            f"(b) two QPs on one uplink: queue {mean('ignore', 'uplink0_queue', QUEUE_WARMUP):.1f} → "
            f"{mean('collide', 'uplink0_queue', QUEUE_WARMUP):.1f} packets, goodput {mean('ignore', 'goodput'):.2f} → "
            f"{mean('collide', 'goodput'):.2f} when the ECN echo is acted on; (c) uplinks failed one by one: goodput "
            f"{mean('fail', 'goodput'):.2f} (min {low('fail'):.2f}) vs {mean('ecmp', 'goodput'):.2f} single-path ECMP")


def dblp(rows):
    """Burst-round speedup over reliable: the default point and the sweep's best."""
    first = [r for r in rows if (r["burst_len"], r["deadline"]) == (rows[0]["burst_len"], rows[0]["deadline"])]
    top = max(rows, key=lambda r: float(r["speedup"]))
    parts = ", ".join(f"{r['policy']} {float(r['speedup']):.2f}x (loss {float(r['loss']):.1%}, end to end "
                      f"{100 * float(r['e2e_gain']):+.1f} %)" for r in first[1:])
    return (f"paper: up to 5.88x on burst rounds. innet: bursts of {first[0]['burst_len']} packets, deadline "
            f"{first[0]['deadline']}: {parts}; best {float(top['speedup']):.2f}x ({top['policy']}, bursts of "
            f"{top['burst_len']}, deadline {top['deadline']})")


def dblp_oracle(rows):
    """Fraction of rounds closed without a NACK against the binomial oracle's interval."""
    inside = all(float(r["lo"]) <= float(r["no_nack_fraction"]) <= float(r["hi"]) for r in rows)
    return ("no-NACK fraction (closed form) at loss " + ", ".join(
        f"{float(r['loss']):.0%}: {float(r['no_nack_fraction']):.3f} ({float(r['closed_form']):.3f})" for r in rows)
        + ("; inside the interval at every loss rate" if inside else "; OUTSIDE the interval somewhere"))


def sdr(rows):
    """EC MDS's best speedup over SR-RTO (mean, p99.9) and the SR mean against App. A."""
    mds = [r for r in rows if r["scheme"] == "ec_mds"]
    mean, tail = max(mds, key=lambda r: float(r["speedup"])), max(mds, key=lambda r: float(r["p999_speedup"]))
    worst = max(abs(float(r["mean"]) - float(r["closed"])) / float(r["closed"]) for r in rows
                if r["scheme"].startswith("sr"))
    return (f"paper: up to 5x mean, 12x p99.9. innet (RTT 19073 chunk times = 25 ms at 400 Gbit/s, "
            f"{_int(mean['chunks'])} chunks, {_int(mean['trials'])} messages a point): EC(32,8) MDS over SR-RTO "
            f"mean {float(mean['speedup']):.2f}x at P_drop {float(mean['p_drop']):g}, p99.9 "
            f"{float(tail['p999_speedup']):.2f}x at {float(tail['p_drop']):g}; SR mean within {100 * worst:.1f} % "
            "of App. A")


#: CSV name -> the function computing its row (in the table's order).
SUMMARIES = {"spillway": spillway, "symphony": symphony, "esa": esa, "esa_sweep": esa_sweep, "mrc": mrc,
             "dblp": dblp, "dblp_oracle": dblp_oracle, "sdr": sdr}


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
    return f"| `{name}` | {_minus(text)} |"


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

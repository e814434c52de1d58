"""A scenario sweep as campaign units: a unit is one parameter point of a scenario -> its CSV rows.

``--grid KEY=V1,V2,...`` (repeatable) names the scenario's options (``python -m scenarios NAME --help``;
``seed`` its seed); the points are their cross product, in order. A unit runs ``python -m scenarios NAME``
with the point's options into a directory of its own and returns the rows of ``<NAME>.csv``, each with the
point's values in front; they merge into ``<out>/<NAME>.csv``. A point the scenario refuses or fails on is a
failed unit, with the command that runs it alone.
"""
import csv
import itertools
import shlex
import subprocess
import sys
from pathlib import Path

from scenarios import SCENARIOS
from tools.cluster.engine import Unit
from tools.regress import ROOT, python


def grid(pairs):
    """``["latency=10,100", "seed=1"]`` -> the points [{"latency": "10", "seed": "1"}, ...] of their product."""
    axes = {}
    for pair in pairs:
        key, sep, values = pair.partition("=")
        if not sep or not key or not values or key in axes:
            raise ValueError(f"--grid {pair!r}: expected KEY=V1,V2,... once per option (e.g. latency=10,100)")
        axes[key] = values.split(",")
    return [dict(zip(axes, values)) for values in itertools.product(*axes.values())]


def arguments(point):
    return [x for key, value in point.items() for x in (f"--{key.replace('_', '-')}", value)]


def replay(name, point):
    return f"{python()} -m scenarios {name} " + " ".join(map(shlex.quote, arguments(point)))


def point_rows(name, point, folder):
    """The unit: scenario ``name`` at ``point`` (written under ``folder``) -> {"rows": [...], "error": ""}, the
    rows of its CSV with the point's values in front; ``error`` the scenario's own message when it failed."""
    folder = Path(folder)
    result = subprocess.run([sys.executable, "-m", "scenarios", name, *arguments(point), "--out", str(folder)],
                            cwd=ROOT, capture_output=True, text=True)
    if result.returncode:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [""]
        return {"rows": [], "error": tail[0]}
    with open(folder / f"{name}.csv", newline="") as f:
        return {"rows": [{**point, **row} for row in csv.DictReader(f)], "error": ""}


def units(name, points, work):
    if name not in SCENARIOS:
        raise ValueError(f"no scenario {name!r}: one of {', '.join(SCENARIOS)}")
    if not points:
        raise ValueError("a sweep needs at least one --grid KEY=V1,V2,...")
    return [Unit(f"sweep-{name}-{k}", point_rows, (name, p, str(Path(work) / f"point-{k}")), replay(name, p),
                 lambda value: bool(value["error"])) for k, p in enumerate(points)]


def merge(name, todo, results, out):
    """The points' rows, in point order, into ``<out>/<name>.csv``; failures with their replay command;
    whether every point gave its rows."""
    rows, ok = [], True
    for u in todo:
        r = results[u.key]
        error = r.error or r.value["error"]
        if error:
            print(f"  FAILED {u.key} ({', '.join(f'{k}={v}' for k, v in u.args[1].items())}): {error}; "
                  f"replay: {u.replay}")
            ok = False
        else:
            rows += r.value["rows"]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.csv"
    columns = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    print(f"sweep: {name}: {len(todo)} points, {len(rows)} rows -> {path}")
    return ok

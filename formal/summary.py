"""The table of the formal runs: block, task, kind, mode, engine, depth, time, parameters, and for a bounded
(``bmc``) safety run its recorded reason (``formal/bounded.toml``).

``make formal`` prints it at the end of the run (``report``, from the root conftest) and writes it to
``build/formal/summary.csv``; ``python -m formal.summary`` prints that CSV again, ``--markdown`` as a
Markdown table for the docs (``-o FILE`` writes it to a file).

Kinds: ``cover`` (reachability: every ``Cover`` reached), ``liveness`` (a bounded-response property:
a task named ``*_liveness*`` or ``*_response*``) and ``safety`` (everything else). Modes: ``prove``
(k-induction: unbounded), ``bmc`` (only to ``depth`` cycles from reset), ``cover``.
"""
import csv
import sys
from pathlib import Path

from formal.runner import BUILD, bounded_reason
from tools.cli import Parser, run

__all__ = ["COLUMNS", "CSV", "kind_of", "markdown", "report", "rows", "write_csv"]

CSV = BUILD / "summary.csv"
COLUMNS = ("block", "task", "kind", "mode", "engine", "depth", "seconds", "params", "bounded_reason")


def kind_of(name, mode):
    """``cover``, ``liveness`` (a bounded-response task) or ``safety``."""
    if mode == "cover":
        return "cover"
    return "liveness" if any(word in name for word in ("_liveness", "_response")) else "safety"


def _block(nodeid):
    """The block of a formal test, its registry name: ``formal/test_<block>.py``, or
    ``formal/<family>/test_<member>.py`` for ``family.member``."""
    *family, stem = Path(nodeid.split("::")[0]).with_suffix("").parts[1:]
    return ".".join([*family, stem.removeprefix("test_")])


def rows(found):
    """One row (a dict of ``COLUMNS``) per formal run in ``found``: ``(nodeid, outcome, property dict)``."""
    out = []
    for nodeid, _, r in found:
        mode = r.get("mode", "-")
        out.append({"block": _block(nodeid), "task": r["name"], "kind": kind_of(r["name"], mode), "mode": mode,
                    "engine": r.get("engine", "-"), "depth": r.get("depth", "-"),
                    "seconds": f"{float(r.get('seconds', 0)):.1f}", "params": r.get("params", "-"),
                    "bounded_reason": (bounded_reason(r["name"]) or "") if mode == "bmc" else ""})
    return sorted(out, key=lambda row: (row["block"], row["kind"], row["task"]))


def write_csv(table, path=CSV):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, COLUMNS)
        writer.writeheader()
        writer.writerows(table)


def _text(table):
    """The table as aligned text lines (the reason and parameters last: they are long)."""
    heads = ("block", "task", "kind", "mode", "engine", "depth", "seconds")
    widths = {h: max([len(h)] + [len(str(row[h])) for row in table]) for h in heads}
    lines = ["  ".join(h.ljust(widths[h]) for h in heads) + "  params"]
    for row in table:
        lines.append("  ".join(str(row[h]).ljust(widths[h]) for h in heads) + f"  {row['params']}")
        if row["bounded_reason"]:
            lines.append(f"    bounded: {row['bounded_reason']}")
    return lines


def _totals(table):
    counts = {}
    for row in table:
        counts[row["mode"]] = counts.get(row["mode"], 0) + 1
    seconds = sum(float(row["seconds"]) for row in table)
    parts = ", ".join(f"{n} {mode}" for mode, n in sorted(counts.items()))
    return f"{len(table)} formal runs ({parts}), {seconds:.0f} s of solver runs"


def markdown(table):
    """The table as Markdown (one row per run; bounded runs with their reason)."""
    lines = ["| block | task | kind | mode | engine | depth | time (s) | parameters | bounded: why |",
             "| --- | --- | --- | --- | --- | ---: | ---: | --- | --- |"]
    for row in table:
        cells = [row[c] for c in COLUMNS]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines + ["", _totals(table)])


def report(write, found, properties=False):
    """Print the table of the formal runs in ``found`` with ``write`` (and each run's properties when
    ``properties``) and write it to ``build/formal/summary.csv``."""
    table = rows(found)
    write(f"formal summary: {_totals(table)} (table: {CSV.relative_to(BUILD.parents[1])})")
    for line in _text(table):
        write(f"  {line}")
    if properties:
        for nodeid, outcome, r in found:
            write(f"formal {r['name']}: {len(r.get('properties', []))} properties ({outcome})")
            for message in r.get("properties", []):
                write(f"    {message}")
    write_csv(table)


def main(argv=None):
    """Print the table of the last formal run (build/formal/summary.csv), as text or Markdown."""
    parser = Parser(prog="formal.summary", description=main.__doc__)
    parser.add_argument("--markdown", action="store_true", help="a Markdown table (for the docs)")
    parser.add_argument("--csv", default=str(CSV), help="the table to read (default build/formal/summary.csv)")
    parser.add_argument("-o", "--out", default=None, help="write to this file instead of printing")
    args = parser.parse_args(argv)
    path = Path(args.csv)
    if not path.exists():
        raise ValueError(f"{path}: no formal table yet (run `make formal` first)")
    with open(path, newline="") as source:
        table = list(csv.DictReader(source))
    text = markdown(table) if args.markdown else "\n".join(_text(table) + [_totals(table)])
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(run("formal.summary", main))

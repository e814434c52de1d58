"""Code coverage of the RTL per block, on the Python source: ``python -m tools.coverage [block ...]``.

``make coverage`` runs each block's testbench with ``INNET_COVERAGE=1``: Verilator builds with
``--coverage-line --coverage-toggle`` and every test writes ``coverage.dat``. This tool merges the
files of a block (all tests, all parameter sets; counts of the same point summed) and maps each
coverage point of the generated Verilog back to the Amaranth source line that made it, through the
``(* src = "file:line" *)`` attributes Amaranth emits: a point belongs to the nearest attribute
above it. Per block it reports

- lines: RTL source lines with coverage points, and how many were exercised (a line is exercised
  when one of its line or branch points executed, or, for a line that only makes signals, one of
  its signals toggled);
- branch points (each ``if``/``case`` arm of the generated Verilog) hit;
- toggle points (each bit of each signal, 0->1 and 1->0) hit;
- functional coverage: the bins of the cover points and crosses its testbench declares
  (``tb.Coverage``, written per test to ``functional.json``) hit by some test, every bin never hit,
  and the bins declared unreachable with their reasons;

writes ``build/coverage/<block>/<file>.py`` annotated (hits per line; ``%%%%`` marks a line never
exercised) and ``build/coverage/summary.csv``, and lists the lines never exercised.
"""
import csv
import json
import re
from collections import defaultdict
from pathlib import Path

from registry import BLOCKS, ROOT, block
from tools.cli import Parser, run

BUILD = ROOT / "build"
OUT = BUILD / "coverage"
SRC = re.compile(r'\(\* src = "([^"]+):(\d+)" \*\)')


def read_dat(path):
    """{(file, line, type, name): count} of one Verilator ``coverage.dat``."""
    points = {}
    for text in Path(path).read_text(errors="replace").splitlines():
        if not text.startswith("C '"):
            continue
        body, count = text[3:].rsplit("' ", 1)
        keys = dict(item.split("\x02", 1) for item in body.split("\x01") if "\x02" in item)
        key = (keys.get("f", ""), int(keys.get("l", 0)), keys.get("t", ""), keys.get("o", "") + "@" + keys.get("n", ""))
        points[key] = points.get(key, 0) + int(count)
    return points


NAME = r"(\\\S+|[A-Za-z_][\w$]*)"
DECL = re.compile(rf"^\s*(?:wire|reg|input|output|inout)\b[^;]*?{NAME}\s*(?:=[^;]*)?;")
ASSIGN = re.compile(rf"^\s*(?:assign\s+)?{NAME}\s*(?:\[[^\]]*\])?\s*<?=")
COND = re.compile(rf"^\s*(?:end\s+else\s+)?(?:if|casez|case)\s*\(\s*{NAME}")
#: Lines of the Verilog backend's own making (an always-false dummy ``if``, initial values): no design logic.
ARTEFACT = re.compile(r"dump_module\$|^\s*initial\b")
REGISTER = re.compile(rf"^\s*{NAME}\s*<=\s*(\\\$\d+)\s*;")
ARM = re.compile(r"^\s*(?:[\d']+[hbd]?[\w?]*\s*(?:,\s*[\d']+[hbd]?[\w?]*)*|default)\s*:")


def source_map(verilog):
    """Verilog line -> (python file, line) that made it: the ``src`` attribute on the line (an
    ``assign``), or that of the signal the line declares, assigns or tests (attributes sit on
    declarations, on registers' ``always`` blocks and inside ``assign`` expressions); a ``case`` arm
    takes its ``case``'s, an ``always`` line its first statement's."""
    text = Path(verilog).read_text().splitlines()
    names, uses, alias, pending = {}, {}, {}, None
    for line in text:                                   # signal name -> src
        match = SRC.search(line)
        if line.strip().startswith("(*") and line.strip().endswith("*)"):
            pending = (match[1], int(match[2])) if match else pending
            continue
        target = DECL.match(line) or ASSIGN.match(line)
        if target and (match or pending):
            names.setdefault(target[1].strip(), (match[1], int(match[2])) if match else pending)
        if match and target:                            # temporaries used here come from this line
            for used in re.findall(r"(\\\$\d+)\s", line.split("=", 1)[-1]):
                uses.setdefault(used, (match[1], int(match[2])))
        feeds = REGISTER.match(line)
        if feeds:
            alias[feeds[2]] = feeds[1]
        pending = None
    for temp, register in alias.items():                # a register's next state: the register's line
        if register in names:
            names.setdefault(temp, names[register])
    for temp, where in uses.items():
        names.setdefault(temp, where)
    mapping, case, block, first = {}, None, None, None
    for n, line in enumerate(text, 1):
        if ARTEFACT.search(line):
            mapping[n] = None
            continue
        match = SRC.search(line)
        found = (match[1], int(match[2])) if match and not line.strip().startswith("(*") else None
        for pattern in (DECL, COND, ASSIGN):
            target = found is None and pattern.match(line)
            if target:
                found = names.get(target[1].strip())
        if found is None and ARM.match(line):
            found = case
        if COND.match(line) and "case" in line.split("(")[0]:
            case = found
        if line.startswith("  always"):                 # a new block: its lines share the first mapping found
            block, first = None, n
        elif not line.startswith("   "):
            block, first = None, None
        if first is not None:
            if found is None:
                found = block
            elif block is None:
                block = found
                for k in range(first, n):               # the always line and tests before the first hit
                    if mapping[k] is None and not ARTEFACT.search(text[k - 1]):
                        mapping[k] = found
        mapping[n] = found
    return mapping


def merge(name):
    """{(python file, line): {"line": [hit, total], "branch": [...], "toggle": [...]}} of block ``name``."""
    runs = sorted((BUILD / name).glob("*-cov/*/coverage.dat"))
    if not runs:
        raise ValueError(f"no coverage data for {name}: run `make coverage BLOCKS={name}` first")
    per_build = defaultdict(dict)
    for dat in runs:
        points = per_build[dat.parent.parent]
        for key, count in read_dat(dat).items():
            points[key] = points.get(key, 0) + count
    lines = defaultdict(lambda: {"line": [0, 0], "branch": [0, 0], "toggle": [0, 0]})
    for build_dir, points in per_build.items():
        mapping = source_map(build_dir / "top.v")
        for (_, vline, kind, _), count in points.items():
            where = mapping.get(vline)
            if where is None or kind not in ("line", "branch", "toggle"):
                continue
            path = Path(where[0])
            if not path.is_relative_to(ROOT / "hdl"):      # Amaranth's library code (memories, FIFOs)
                continue
            stat = lines[(str(path.relative_to(ROOT)), where[1])][kind]
            stat[0] += count > 0
            stat[1] += 1
    return lines


def functional(name):
    """Block ``name``'s functional coverage merged over its tests: {item: {"bins": {bin: hits},
    "unreachable": {bin: reason}}}, or {} when its testbench declares none."""
    items = {}
    for path in sorted((BUILD / name).glob("*-cov/*/functional.json")):
        for item, record in json.loads(path.read_text())["items"].items():
            merged = items.setdefault(item, {"bins": {}, "unreachable": {}})
            for b, hits in record["bins"].items():
                merged["bins"][b] = merged["bins"].get(b, 0) + hits
            merged["unreachable"].update(record["unreachable"])
    for merged in items.values():       # a run older than a bin's `unreachable` declaration lists it
        for b in merged["unreachable"]:
            merged["bins"].pop(b, None)
    return items


def exercised(stat):
    """Whether a source line's logic ever did something (see the module docstring)."""
    if stat["line"][1] or stat["branch"][1]:
        return stat["line"][0] + stat["branch"][0] > 0
    return stat["toggle"][0] > 0


def annotate(name, lines):
    """Write the annotated sources of block ``name``; the paths."""
    written = []
    for file in sorted({f for f, _ in lines}):
        out = OUT / name / file
        out.parent.mkdir(parents=True, exist_ok=True)
        rows = []
        for n, text in enumerate((ROOT / file).read_text().splitlines(), 1):
            stat = lines.get((file, n))
            if stat is None:
                mark = " " * 16
            else:
                hit = sum(s[0] for s in stat.values())
                total = sum(s[1] for s in stat.values())
                mark = f"{hit:>6}/{total:<6}" + ("%% " if not exercised(stat) else "   ")
            rows.append(f"{mark}{n:5}  {text}")
        out.write_text("\n".join(rows) + "\n")
        written.append(out)
    return written


def main(argv=None):
    parser = Parser(prog="coverage", description=__doc__.split("\n\n")[0])
    parser.add_argument("blocks", nargs="*", help="blocks (default: every block with coverage data)")
    names = parser.parse_args(argv).blocks
    for name in names:
        block(name)
    names = names or [n for n in BLOCKS if list((BUILD / n).glob("*-cov/*/coverage.dat"))]
    if not names:
        raise ValueError("no coverage data under build/: run `make coverage` first")
    rows, missed, holes, excused = [], {}, {}, {}
    for name in names:
        lines = merge(name)
        annotate(name, lines)
        total = {k: [sum(s[k][0] for s in lines.values()), sum(s[k][1] for s in lines.values())]
                 for k in ("branch", "toggle")}
        hit = [key for key, stat in lines.items() if exercised(stat)]
        missed[name] = sorted(key for key in lines if key not in hit)
        cover = functional(name)
        bins = [(item, b) for item, r in cover.items() for b in r["bins"]]
        holes[name] = [(item, b) for item, b in bins if not cover[item]["bins"][b]]
        excused[name] = [(item, b, why) for item, r in cover.items() for b, why in r["unreachable"].items()]
        rows.append({"block": name, "bins": len(bins), "bins_hit": len(bins) - len(holes[name]),
                     "lines": len(lines), "lines_hit": len(hit),
                     "branches": total["branch"][1], "branches_hit": total["branch"][0],
                     "toggles": total["toggle"][1], "toggles_hit": total["toggle"][0]})
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)

    def pct(a, b):
        return f"{a}/{b} ({100 * a / b:.1f} %)" if b else "-"

    print(f"{'block':<18}{'functional bins hit':>24}{'RTL lines exercised':>24}{'branches hit':>24}"
          f"{'toggles hit':>26}")
    for r in rows:
        print(f"{r['block']:<18}{pct(r['bins_hit'], r['bins']):>24}{pct(r['lines_hit'], r['lines']):>24}"
              f"{pct(r['branches_hit'], r['branches']):>24}{pct(r['toggles_hit'], r['toggles']):>26}")
    for name in names:
        for item, b in holes[name]:
            print(f"  never hit: {name}.{item} {b}")
        for item, b, why in excused[name]:
            print(f"  unreachable: {name}.{item} {b}: {why}")
    for name, keys in missed.items():
        for file, n in keys:
            print(f"  never exercised: {file}:{n}: {(ROOT / file).read_text().splitlines()[n - 1].strip()}")
    print(f"annotated sources: build/coverage/<block>/hdl/*.py; table: {(OUT / 'summary.csv').relative_to(ROOT)}")


if __name__ == "__main__":
    run("coverage", main)

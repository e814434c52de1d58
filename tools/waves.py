"""Print chosen signals of a VCD waveform as a table, one row per rising clock edge.

    python -m tools.waves build/spill_buffer/<params>-vcd/random_traffic/dump.vcd o__valid o__payload
    python -m tools.waves --list dump.vcd            # every signal name in the file
    python -m tools.waves dump.vcd 'o__*' --start 100 --rows 40

Signals are matched by the end of their hierarchical name (glob patterns allowed); values are shown
in hex as sampled just before each rising edge of ``--clock`` (the value the flops see). With no
file, the newest ``dump.vcd`` under ``build/`` is used.
"""
import argparse
import fnmatch
import re
import sys
from pathlib import Path

from vcdvcd import VCDVCD

ROOT = Path(__file__).resolve().parents[1]


def newest_vcd():
    files = sorted((ROOT / "build").rglob("dump.vcd"), key=lambda p: p.stat().st_mtime)
    if not files:
        sys.exit("waves: no VCD under build/: run a test with WAVES=1 first")
    return files[-1]


def short(name):
    """``top.o__payload[81:0]`` -> ``o__payload``; ``top.qdepth[2][15:0]`` -> ``qdepth[2]``."""
    return re.sub(r"\[\d+:\d+\]$", "", name.rsplit(".", 1)[-1])


def match(names, pattern):
    """Signals whose full or short name matches ``pattern``; of same-named ones, the shallowest."""
    found = [n for n in names if "$" not in n
             and (fnmatch.fnmatch(n, pattern) or fnmatch.fnmatch(short(n), pattern))]
    shallowest = {}
    for n in found:
        shallowest[short(n)] = min(shallowest.get(short(n), n.count(".")), n.count("."))
    return [n for n in found if n.count(".") == shallowest[short(n)]]


def value_at(tv, time):
    """Value of a (time, value) list just before ``time``."""
    value = "x"
    for t, v in tv:
        if t >= time:
            break
        value = v
    return value


def hexval(bits):
    if any(c in bits for c in "xXzZ"):
        return bits if len(bits) <= 4 else "x"
    return f"{int(bits, 2):x}"


def table(vcd, patterns, clock="clk", start=0, rows=50):
    """Rows of [cycle, time, values...] for the signals matching ``patterns``."""
    trace = VCDVCD(str(vcd), store_tvs=True)
    names = list(trace.references_to_ids)
    signals = [n for p in patterns for n in match(names, p)]
    if not signals:
        sys.exit(f"waves: no signal matches {' '.join(patterns)} (see --list)")
    clocks = [n for n in match(names, clock) if int(trace[n].size) == 1]
    if not clocks:
        sys.exit(f"waves: no 1-bit clock named {clock!r} in {vcd}")
    edges = [t for t, v in trace[clocks[0]].tv if v == "1"]
    header = ["cycle", "time"] + [short(s) for s in dict.fromkeys(signals)]
    body = []
    for cycle, time in enumerate(edges[start:start + rows], start):
        body.append([str(cycle), str(time)] + [hexval(value_at(trace[s].tv, time))
                                               for s in dict.fromkeys(signals)])
    return header, body


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("vcd", nargs="?", help="VCD file (default: newest under build/)")
    parser.add_argument("signals", nargs="*", help="signal names or glob patterns")
    parser.add_argument("--clock", default="clk")
    parser.add_argument("--start", type=int, default=0, help="first clock cycle to show")
    parser.add_argument("--rows", type=int, default=50, help="number of cycles to show")
    parser.add_argument("--list", action="store_true", help="list the signals and exit")
    args = parser.parse_args(argv)
    if args.vcd and not args.vcd.endswith(".vcd"):
        args.signals.insert(0, args.vcd)
        args.vcd = None
    vcd = Path(args.vcd) if args.vcd else newest_vcd()
    if not vcd.exists():
        sys.exit(f"waves: {vcd} does not exist")
    if args.list:
        names = VCDVCD(str(vcd), only_sigs=True).references_to_ids
        print("\n".join(n for n in names if "$" not in n))
        return
    header, body = table(vcd, args.signals or ["*valid", "*ready"], args.clock, args.start, args.rows)
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    print(f"# {vcd}")
    for row in [header] + body:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths)))


if __name__ == "__main__":
    main()

"""Print chosen signals of a VCD or FST waveform as a table, one row per rising clock edge.

    python -m tools.waves build/spillway.top/<params>-vcd/random_traffic/dump.vcd o__valid o__payload
    python -m tools.waves --list dump.fst            # every signal name in the file
    python -m tools.waves dump.vcd 'o__*' --start 100 --rows 40
    python -m tools.waves dump.vcd i__valid o__payload --start 100 --rows 30 --svg window.svg   # timing diagram

Signals are matched by their name or full hierarchical name (glob patterns allowed; of same-named
signals, the shallowest); values are shown in hex as sampled just before each rising edge of
``--clock`` (the value the flops see); a name that matches no signal is an error naming the close
ones. With no file, the newest ``dump.vcd`` or ``dump.fst`` of the user's own runs under ``build/``
is used: copies of the repository there (the suite's clones, ``build/readme-*``, and the mutation
runs' trees) are not searched. Files are read with pywellen (VCD, FST and GHW). ``--svg`` draws the same window
as a timing diagram instead (``tools/timing.py``: WaveDrom, struct fields as named lanes, radix in
each lane's name).
"""
import difflib
import fnmatch
import os
from pathlib import Path

import pywellen

from tools.cli import Parser, integer, run

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = (".vcd", ".fst", ".ghw")


def newest_dump(root=ROOT / "build"):
    """The most recently written ``dump.vcd`` / ``dump.fst`` under ``root``, not searching the
    directories that hold a copy of the repository (a ``registry.py``): their runs are the suite's or a
    mutation run's, not the user's."""
    files = []
    for directory, subdirectories, names in os.walk(root):
        if directory != str(root) and "registry.py" in names:
            subdirectories.clear()
            continue
        files += [Path(directory) / name for name in names if name in ("dump.vcd", "dump.fst")]
    if not files:
        raise FileNotFoundError("no dump.vcd or dump.fst under build/: run a test with WAVES=1 first")
    return max(files, key=lambda p: p.stat().st_mtime)


def load(path):
    """The pywellen ``Waveform`` of ``path``; ``OSError`` / ``ValueError`` for a missing or bad file."""
    with open(path, "rb") as f:      # pywellen panics (a Rust backtrace) on a missing file
        f.seek(0, 2)
        size = f.tell()
        if path.suffix == ".vcd" and size:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                raise ValueError(f"{path}: the VCD ends mid-line (cut off: was the simulation killed?)")
    try:
        return pywellen.Waveform(str(path))
    except RuntimeError as error:
        raise ValueError(f"{path}: {error}") from None


def names(wave):
    """``{full name: (name, Var)}`` of the file's signals, without simulator-internal ones (``$``).

    Escaped identifiers lose their backslash (Amaranth's ``\\i__payload.data`` is ``i__payload.data``).
    """
    return {v.full_name.replace("\\", ""): (v.name.replace("\\", ""), v)
            for v in wave.all_vars() if "$" not in v.full_name}


def match(variables, pattern):
    """Full names whose full or short name matches ``pattern``; of same-named ones, the shallowest."""
    found = [n for n, (name, _) in variables.items()
             if pattern in (n, name) or fnmatch.fnmatchcase(n, pattern) or fnmatch.fnmatchcase(name, pattern)]
    depth = {n: n[:-len(variables[n][0])].count(".") for n in found}
    shallowest = {}
    for n in found:
        name = variables[n][0]
        shallowest[name] = min(shallowest.get(name, depth[n]), depth[n])
    return [n for n in found if depth[n] == shallowest[variables[n][0]]]


def close(variables, pattern):
    """``", close: a, b"`` naming the signals whose names are close to ``pattern`` (difflib), or ""."""
    shorts = sorted({name for name, _ in variables.values()})
    found = difflib.get_close_matches(pattern, shorts, n=4, cutoff=0.6)
    found += [n for n in difflib.get_close_matches(pattern, sorted(variables), n=4, cutoff=0.6)
              if variables[n][0] not in found]
    return f", close: {', '.join(found[:4])}" if found else ""


def hexval(value):
    if value is None:
        return "x"
    if isinstance(value, str):
        if set(value) <= {"0", "1"}:
            return f"{int(value, 2):x}"
        return value if len(value) <= 4 else "x"
    return f"{value:x}"


def rising_edges(wave, clock):
    """Times at which ``clock`` goes from 0 (or unknown) to 1."""
    edges, last = [], [None]

    def change(time, _signal, value):
        if value in (1, "1") and last[0] not in (1, "1") and time > 0:
            edges.append(time)
        last[0] = value

    wave.stream_changes(change, [clock])
    return edges


#: The signals shown when none are named: every handshake (patterns that may match nothing).
DEFAULT = ("*valid", "*ready")


def window(wave, patterns=(), clock="clk", start=0, rows=50):
    """(variables, the signals matching ``patterns`` (default ``DEFAULT``), the times of clock cycles
    ``start..start+rows``); ``KeyError`` naming each pattern that matches nothing and its close names."""
    variables = names(wave)
    unknown = [p for p in patterns if not match(variables, p)]
    if unknown:
        raise KeyError("; ".join(f"no signal matches {p}{close(variables, p)}" for p in unknown) + " (see --list)")
    signals = list(dict.fromkeys(n for p in patterns or DEFAULT for n in match(variables, p)))
    if not signals:
        raise KeyError(f"no signal matches {' '.join(DEFAULT)} (name some; see --list)")
    clocks = [n for n in match(variables, clock) if variables[n][1].bitwidth == 1]
    if not clocks:
        raise KeyError(f"no 1-bit clock named {clock!r} (see --list, --clock)")
    edges = rising_edges(wave, variables[clocks[0]][1])
    if start >= len(edges):
        raise ValueError(f"--start {start}: the waveform has {len(edges)} clock cycles")
    return variables, signals, edges[start:start + rows]


def table(wave, patterns=(), clock="clk", start=0, rows=50):
    """(header, rows of [cycle, time, values...]) for the signals matching ``patterns``."""
    variables, signals, times = window(wave, patterns, clock, start, rows)
    header = ["cycle", "time"] + [variables[s][0] for s in signals]
    body = [[str(cycle), str(time)] + [hexval(variables[s][1].signal.value_at(time - 1)) for s in signals]
            for cycle, time in enumerate(times, start)]
    return header, body


def main(argv=None):
    parser = Parser(prog="waves", description=__doc__.split("\n\n")[0])
    parser.add_argument("dump", nargs="?", help="VCD or FST file (default: the newest under build/)")
    parser.add_argument("signals", nargs="*", help="signal names or glob patterns")
    parser.add_argument("--clock", default="clk")
    parser.add_argument("--start", type=integer(0), default=0, help="first clock cycle to show")
    parser.add_argument("--rows", type=integer(1), default=50, help="number of cycles to show")
    parser.add_argument("--list", action="store_true", help="list the signals and exit")
    parser.add_argument("--svg", metavar="PATH", help="write the window as a timing diagram (SVG) instead")
    args = parser.parse_args(argv)
    if args.dump and not args.dump.endswith(SUFFIXES) and "/" not in args.dump:
        args.signals.insert(0, args.dump)        # a signal, not a file
        args.dump = None
    dump = Path(args.dump) if args.dump else newest_dump()
    wave = load(dump)
    if args.list:
        print("\n".join(names(wave)))
        return
    if args.svg:
        from tools import timing
        source = timing.diagram(wave, args.signals, args.clock, args.start, args.rows)
        print(f"{timing.render(source, args.svg)} ({dump}, cycles {args.start}..{args.start + args.rows - 1})")
        return
    header, body = table(wave, args.signals, args.clock, args.start, args.rows)
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    print(f"# {dump} ({wave.file_format}, time in {wave.timescale})")
    for row in [header] + body:
        print("  ".join(cell.rjust(w) for cell, w in zip(row, widths)))


if __name__ == "__main__":
    run("waves", main)

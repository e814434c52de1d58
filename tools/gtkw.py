"""A GTKWave save file (``.gtkw``) for a waveform of a block: ports grouped, struct fields split.

    python -m tools.gtkw build/spillway.top/<params>-vcd/random_traffic/dump.vcd   # -> dump.gtkw beside it
    gtkwave dump.vcd dump.gtkw

The runner writes one beside every waveform it keeps (``WAVES=1``). Signals are those of the
design's top module (scope ``top``): ``clk`` and ``rst`` first, then one group per stream port
(``i``, ``o``, ``d``, ...: ``valid``, ``ready``, the payload vector and, in a subgroup, each struct
field of the payload as Amaranth names it, ``i__payload.meta.port``), then the other ports (counters,
status). Radix: one-bit signals binary, data/keep/bitmap fields hexadecimal, the rest decimal.

GTKWave opens on the first interesting window (``first_window``): from a few cycles before the
first beat on any stream to a few cycles after every stream has carried its first beat (the first
packet in, the first out, the first spill and its return), at most ``MAX_CYCLES`` cycles, zoomed to
fill the wave pane; a dump in which no stream carries anything opens zoomed to fit.
"""
import bisect
import math
import re
from pathlib import Path

from tools.cli import Parser, run
from tools.waves import load, names, rising_edges

SCOPE = "top"
# GTKWave trace flags (analyzer.h): right-justified hex / decimal / binary; a group's begin and end.
HEX, DEC, BIN = "@22", "@24", "@28"
GROUP, CLOSED_GROUP, GROUP_END = "@800200", "@c00200", "@1000200"
#: Fields shown in hex (anything else wider than one bit is decimal).
HEX_WORDS = ("data", "keep", "bitmap", "header", "payload", "mask", "addr", "va", "imm")


#: Width in pixels of the wave pane of the window the save file opens (``[size]`` less the signal
#: tree and the names): the zoom fills it with the first window.
WAVE_PIXELS = 1000
#: Cycles shown before the first beat and after the last stream's first beat; the window's limit (10 pixels a cycle).
BEFORE, AFTER, MAX_CYCLES = 4, 12, 100


def first_window(wave, groups):
    """``(start, end)`` in the dump's time units of the first interesting window of ``wave`` (see the
    module docstring); ``None`` without a clock."""
    variables = names(wave)
    clock = variables.get(f"{SCOPE}.clk")
    edges = rising_edges(wave, clock[1]) if clock else []
    if len(edges) < 2:
        return None
    firsts = []
    for title, entries in groups:
        valid = next((name for name, width, _ in entries if name.endswith("__valid") and width == 1), None)
        if title and valid:
            rises = []

            def change(time, _signal, value, rises=rises):
                if value in (1, "1") and not rises:
                    rises.append(time)

            wave.stream_changes(change, [variables[valid][1]])
            if rises:       # the first edge that samples it high (just after the value changed)
                firsts.append(min(bisect.bisect_right(edges, rises[0]), len(edges) - 1))
    if not firsts:
        return edges[0], edges[-1]
    start = max(min(firsts) - BEFORE, 0)
    end = min(max(firsts) + AFTER, start + MAX_CYCLES, len(edges) - 1)
    return edges[start], edges[end]


def zoom(start, end):
    """GTKWave's zoom (log2 of pixels per time unit) that shows ``start..end`` across the wave pane."""
    return math.log2(WAVE_PIXELS / max(end - start, 1))


def gtkwave_name(full, width, vcd):
    """The name GTKWave 3.3 gives variable ``full`` of scope ``top``: array elements ``x.[0]`` as
    ``x[0]``, ``[msb:0]`` after a vector, and in a VCD a backslash before a name holding a dot
    (Amaranth's struct fields, ``top.\\i__payload.data``)."""
    scope, leaf = full.split(".", 1)
    leaf = leaf.replace(".[", "[")
    if vcd and "." in leaf:
        leaf = "\\" + leaf
    return f"{scope}.{leaf}" + (f"[{width - 1}:0]" if width > 1 else "")


def radix(name, width):
    if width == 1:
        return BIN
    leaf = name.rsplit(".", 1)[-1].split("__")[-1]
    return HEX if any(word in leaf for word in HEX_WORDS) else DEC


def layout(wave):
    """``[(group or None, [(name, width, [(field, width) ...]) ...])]`` of the top module's ports."""
    top = {n: v.bitwidth for n, (_, v) in names(wave).items() if n.startswith(SCOPE + ".")}
    ports = [v.full_name.split(".", 1)[1] for v in wave.all_vars() if v.full_name.startswith("$rootio.")]
    ports = [p for p in dict.fromkeys(ports) if f"{SCOPE}.{p}" in top]
    if not ports:
        raise ValueError(f"no ports of a `{SCOPE}` module in the waveform")

    def entry(port):
        full = f"{SCOPE}.{port}"
        return full, top[full], [(n, top[n]) for n in sorted(top) if n.startswith(full + ".")]

    first = [p for p in ("clk", "rst") if p in ports]
    streams = {}
    for p in ports:
        if "__" in p and p not in first:
            streams.setdefault(p.split("__", 1)[0], []).append(p)
    order = ("valid", "ready", "payload")
    groups = [(None, [entry(p) for p in first])]
    for stream, members in streams.items():
        members.sort(key=lambda m: order.index(m.split("__")[1]) if m.split("__")[1] in order else len(order))
        groups.append((stream, [entry(p) for p in members]))
    others = [p for p in ports if p not in first and not any(p in s for s in streams.values())]
    if others:
        groups.append(("other ports", [entry(p) for p in others]))
    return groups


def text(dump, wave):
    """The save file's text for ``dump``."""
    vcd = Path(dump).suffix == ".vcd"
    groups = layout(wave)
    shown = first_window(wave, groups)
    start = shown[0] if shown else 0
    lines = ["[*] GTKWave save file written by innet tools/gtkw.py",
             f'[dumpfile] "{Path(dump).resolve()}"', f'[savefile] "{Path(dump).with_suffix(".gtkw").resolve()}"',
             f"[timestart] {start}", "[size] 1600 900", "[pos] -1 -1"]
    if shown:       # zoom, primary marker (none), the 26 named markers (none)
        lines.append(f"*{zoom(*shown):.6f} -1" + " -1" * 26)
    lines += ["[sst_width] 260", "[signals_width] 300", "[sst_expanded] 1", "[sst_vpaned_height] 300"]
    flag = None

    def signal(name, width):
        nonlocal flag
        want = radix(name, width)
        if want != flag:
            lines.append(want)
            flag = want
        lines.append(gtkwave_name(name, width, vcd))

    def group(title, begin=GROUP):
        nonlocal flag
        lines.extend([begin, f"-{title}"])
        flag = None

    def end(title):
        nonlocal flag
        lines.extend([GROUP_END, f"-{title}"])
        flag = None

    for title, entries in groups:
        if title:
            group(title)
        for name, width, fields in entries:
            signal(name, width)
            if fields:
                short = name.split(".", 1)[1]
                group(f"{short} fields", CLOSED_GROUP if title == "other ports" else GROUP)
                for field, field_width in fields:
                    signal(field, field_width)
                end(f"{short} fields")
        if title:
            end(title)
    lines.append("[pattern_trace] 1")
    lines.append("[pattern_trace] 0")
    return "\n".join(lines) + "\n"


def signals(path):
    """The signal names a save file displays (lines that are not comments, flags or settings)."""
    return [line for line in Path(path).read_text().splitlines() if line and line[0] not in "[@-*"]


def missing(path, dump):
    """The signals of save file ``path`` that ``dump`` lacks (or holds with another width)."""
    variables = names(load(Path(dump)))
    wrong = []
    for shown in signals(path):
        match = re.fullmatch(r"(.*?)(?:\[(\d+):0\])?", shown)
        name, width = match.group(1), int(match.group(2)) + 1 if match.group(2) else 1
        name = re.sub(r"(?<!\.)\[", ".[", name.replace("\\", ""))
        if name not in variables or variables[name][1].bitwidth != width:
            wrong.append(shown)
    return wrong


def write(dump, out=None):
    """Write ``dump``'s save file (default: beside it, ``.gtkw``); return its path."""
    dump = Path(dump)
    out = Path(out) if out else dump.with_suffix(".gtkw")
    out.write_text(text(dump, load(dump)))
    return out


def main(argv=None):
    parser = Parser(prog="gtkw", description=__doc__.split("\n\n")[0])
    parser.add_argument("dump", help="VCD or FST file")
    parser.add_argument("-o", "--output", help="save file (default: beside the dump, .gtkw)")
    args = parser.parse_args(argv)
    print(write(args.dump, args.output))


if __name__ == "__main__":
    run("gtkw", main)

"""Run a demonstration (``demos/``) on the RTL under Verilator and tell its story: ``make sim [BLOCK=name]``.

    python -m tools.sim [NAME]      # NAME: spillway (default), symphony, esa, mrc, dblp, sdr
    python -m tools.sim list        # the demonstrations

Each run is a cocotb test of the demonstration's module built and run by ``testbenches.runner`` (the
suite's runner: the block's Component from ``registry.py``, every output checked against its golden
model); the waveform is kept unless ``WAVES`` says otherwise. The story ends with where to look: the
waveform and a ``make waves`` line opening the window of the mechanism's first events, the pcaps with
their frame counts, the log; then the command that replays the demonstration with its seed. A story's
lines wrap at ``WIDTH`` characters under their label.
"""
import os
import shlex
import sys
import textwrap
from pathlib import Path

from tools.cli import Parser, run

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = "spillway"
#: Width of a story's lines.
WIDTH = 110


def short(path):
    """``path`` relative to the repository when inside it."""
    path = Path(path)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def frames(pcap):
    """Frames in ``pcap``."""
    from scapy.utils import RawPcapReader
    with RawPcapReader(str(pcap)) as reader:
        return sum(1 for _ in reader)


def where(summary, pcaps_hold=None):
    """The lines that say where to look at one run: its waveform and window, its pcaps (``pcaps_hold``: what
    each holds, by name) with their frame counts, its log."""
    lines, artefacts = [], summary["artefacts"]
    wave, win = artefacts.get("waveform"), summary.get("demo", {}).get("window")
    events = ", ".join(f"{name} at cycle {at}" for name, at in win["events"].items()) if win else ""
    if wave:
        lines.append(("waveform", f"{short(wave)}: {events}" if events else short(wave)))
        if win:
            signals = shlex.quote(" ".join(win["signals"]))
            lines.append(("", f"make waves DUMP={short(wave)} SIGNALS={signals} START={win['start']} "
                              f"ROWS={win['rows']}"))
    else:
        lines.append(("waveform", f"none kept (WAVES=0){': ' + events if events else ''}"))
    pcaps = [Path(p) for p in artefacts.get("pcaps", [])]
    if pcaps:
        holds = pcaps_hold or {}
        counts = ", ".join(f"{p.name} {frames(p)}{' frames' if not n else ''}"
                           + (f" ({holds[p.stem]})" if p.stem in holds else "") for n, p in enumerate(pcaps))
        lines.append(("pcaps", f"in {short(pcaps[0].parent)}/ (timestamps: simulation ns): {counts}"))
    lines.append(("log", short(artefacts["log"])))
    return lines


def demonstrate(name, say=print):
    """Run demonstration ``name``, telling it through ``say``; returns the runs' summaries."""
    import demos
    import registry
    from testbenches import runner

    module = demos.load(name)
    summaries = []
    for r in module.RUNS:
        block = registry.block(r.block)
        summaries.append(runner.run(block.component, r.params, module.__name__, r.test, block=r.block))
    say(f"{name}: {module.TITLE} ({', '.join(dict.fromkeys(r.block for r in module.RUNS))})")
    lines = list(module.story(summaries))
    for s in summaries:
        model = registry.block(s["block"]).model
        lines.append(("checked", f"{s['block']} [{s['test']}]: {s['cycles']:,} cycles, every output against "
                                 f"{model.__name__} ({model.KIND} lockstep), counters equal"))
        lines += where(s, getattr(module, "PCAPS", None))
    for line in layout(lines):
        say(line)
    return summaries


def layout(lines, width=WIDTH):
    """``(label, text)`` lines as a two-column story ``width`` characters wide: each text wrapped under its
    label's column (a ``make waves`` line, to be copied whole, and a path are never broken)."""
    column = max(len(label) for label, _ in lines) + 2
    for label, text in lines:
        parts = [text] if text.startswith("make waves") else textwrap.wrap(
            text, width - 2 - column, break_long_words=False, break_on_hyphens=False)
        for n, part in enumerate(parts):
            yield f"  {label if n == 0 else '':<{column}}{part}"


def main(argv=None):
    from demos import NAMES

    parser = Parser(prog="sim", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", nargs="?", default=DEFAULT, help=f"a demonstration ({', '.join(NAMES)}) or list")
    args = parser.parse_args(argv)
    if args.name == "list":
        import demos
        for name in NAMES:
            module = demos.load(name)
            blocks = ", ".join(dict.fromkeys(r.block for r in module.RUNS))
            print(f"{name:<10} {blocks:<28} {module.TITLE}")
        return
    if args.name not in NAMES:
        raise KeyError(f"unknown demonstration {args.name!r}; known: {', '.join(NAMES)} (or list)")
    from testbenches import runner

    os.environ.setdefault("WAVES", "1")
    os.environ["INNET_REPLAY"] = f"make sim BLOCK={args.name}"
    seed = runner.traffic_seed()
    how = "from INNET_SEED" if os.environ.get("INNET_SEED", "").strip() else "drawn for this run"
    print(f"innet: traffic seed {seed} ({how})", flush=True)
    replay = f"replay: INNET_SEED={seed} make sim BLOCK={args.name}"
    try:
        demonstrate(args.name)
    except AssertionError as failure:      # the RTL left the golden model (the runner's message says where)
        sys.exit(f"sim: {args.name} failed: {failure}\n{replay}")
    print(replay)


if __name__ == "__main__":
    run("sim", main)

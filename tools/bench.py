"""Simulation throughput benchmark: ``python -m tools.bench [--packets N] [block ...]``.

The same stimulus (single-beat packets at line rate, every output always ready) runs through each
block on four engines, all in this run:

- ``verilator-cpp``: a plain Verilator C++ harness (tools/bench_harness.cpp), the speed limit;
- ``cocotb-replay``: cocotb + Verilator, beats pre-loaded into a stimulus memory (tools/replay.py),
  no Python per cycle;
- ``cocotb-batched``: cocotb + Verilator, one coroutine per clock with pre-packed beats;
- ``cocotb``: cocotb + Verilator with the testbenches' own StreamSource / StreamSink;
- ``amaranth-pysim``: Amaranth's Python simulator (fewer packets: it is the slowest).

``block[variant]`` benchmarks a registry variant (e.g. ``aggregator[atp]``).
It prints packets/s and cycles/s per engine and the ratio to the C++ harness, and writes
``build/bench/bench.csv``.
"""
import contextlib
import csv
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from amaranth.lib import stream
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from registry import BLOCKS, variant
from testbenches import checked, runner
from testbenches.tb import pack
from tools import sections
from tools.cli import Parser, integer, run
from tools.replay import Replay
from tools.traffic import STIMULI

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "bench"
DOCS = ROOT / "docs" / "verification.md"
#: Beats held by the Replay wrapper; the stimulus is replayed from it len(beats) // depth times.
REPLAY_DEPTH = 1000
#: Distinct packets of a benchmark's stimulus.
POOL = 2000
#: Runs of the C++ harness and of the checked engine per measurement, the fastest kept (a run of 10^5
#: cycles takes 15-150 ms: one alone swings 2x with the machine's noise).
REPEAT = 3


def _streams(component):
    """(input payload layout, [(output name, bit index of ``last`` or -1)]) of a block."""
    outputs, layout = [], None
    for name, member in component.signature.members.items():
        if not (member.is_signature and isinstance(member.signature, stream.Signature)):
            continue
        payload = member.signature.members["payload"].shape
        if member.flow == In and name == "i":
            layout = payload
        elif member.flow == Out:
            fields = dict(payload) if hasattr(payload, "__iter__") else {}
            outputs.append((name, fields["last"].offset if "last" in fields else -1))
    return layout, outputs


def _stimulus(block, component, packets, dicts=False):
    """The benchmark's ``packets`` beats: ``POOL`` drawn (scapy builds a few hundred packets a second),
    then sent again in order as often as it takes."""
    layout, outputs = _streams(component)
    pool = STIMULI[variant(block)[0].stimulus](component, min(packets, POOL), random.Random(1))
    items = [pool[n % len(pool)] for n in range(packets)]
    words = [pack(layout, beat) for beat in pool]
    beats = [words[n % len(pool)] for n in range(packets)]
    return (layout, outputs, beats, items) if dicts else (layout, outputs, beats)


def _member(name, port):
    """How Verilator spells the top-level port ``name__port`` in C++."""
    return f"{name}___05F{port}"


def run_cpp(block, params, component, layout, outputs, beats):
    """Build the plain Verilator harness for ``block`` and run it on ``beats``."""
    work = OUT / variant(block)[2] / "cpp"
    work.mkdir(parents=True, exist_ok=True)
    runner.verilator_env()
    runner.emit_verilog(component, work / "top.v")
    words = (layout.size + 31) // 32
    config = (f"#define IN_WORDS {words}\n#define IN_VALID {_member('i', 'valid')}\n"
              f"#define IN_READY {_member('i', 'ready')}\n#define IN_PAYLOAD {_member('i', 'payload')}\n"
              "#define OUTPUTS(X) " + " ".join(
                  f"X({_member(n, 'valid')}, {_member(n, 'ready')}, {_member(n, 'payload')}, {last})"
                  for n, last in outputs) + "\n")
    config_path = work / "bench_config.h"
    if not config_path.exists() or config_path.read_text() != config:
        config_path.write_text(config)
    stim = work / "stimulus.bin"
    stim.write_bytes(b"".join(b.to_bytes(words * 4, "little") for b in beats))
    subprocess.run(
        ["verilator", "--cc", "--exe", "--build", "-O3", "--x-assign", "fast", "--x-initial", "fast",
         "--top-module", "top", "--prefix", "Vtop", "-o", "harness", "-Mdir", str(work / "obj"),
         "-CFLAGS", f"-O2 -std=c++17 -I{work}", *runner.BUILD_ARGS,
         str(work / "top.v"), str(ROOT / "tools" / "bench_harness.cpp")],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    runs = [json.loads(subprocess.run([str(work / "obj" / "harness"), str(stim)], check=True, capture_output=True,
                                      text=True).stdout) for _ in range(REPEAT)]
    return min(runs, key=lambda r: r["seconds"])


def bench_params(block):
    """The benchmark parameters of ``block`` (``name`` or ``name[variant]``): its defaults with the
    registry's benchmark and variant overrides."""
    b, overrides, _ = variant(block)
    return b.make_params({**b.bench, **overrides})


def replay_of(block, depth):
    """The benchmark parameters of ``block`` inside a Replay wrapper holding ``depth`` beats."""
    return Replay(variant(block)[0].build(bench_params(block)), depth)


def run_cocotb(block, params, component, outputs, beats, testcase):
    """Run the cocotb side (tools/bench_cocotb.py) on the same stimulus."""
    stem = variant(block)[2]
    stim = OUT / stem / "stimulus.json"
    stim.parent.mkdir(parents=True, exist_ok=True)
    depth = min(REPLAY_DEPTH, len(beats))
    stim.write_text(json.dumps({"beats": beats, "outputs": outputs, "replay_depth": depth}))
    env = {"INNET_BENCH_STIM": str(stim)}
    if testcase == "replay":
        test_dir = runner.run(replay_of, {"block": block, "depth": depth}, "tools.bench_cocotb",
                              testcase, block="bench_replay", env=env)
    else:
        test_dir = runner.run(type(component), params, "tools.bench_cocotb", testcase,
                              block=f"bench_{stem}", env=env)
    return json.loads((test_dir / "bench.json").read_text())


def run_checked(block, params, component, beats, dicts):
    """The checked engine (testbenches/checked.py): the golden model runs first over the stimulus,
    then the wrapper compares every output beat with it inside the simulation."""
    stem = variant(block)[2]
    expected = checked.expect(variant(block)[0].name, component, params, dicts)
    spec = OUT / stem / "checked.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(json.dumps({"beats": beats, "expected": expected.outputs, "limit": expected.limit,
                                "last_accept": expected.last_accept, "counters": expected.counters,
                                "model_seconds": expected.model_seconds}))
    exp_depth = max(1, *(len(v) for v in expected.outputs.values()))
    test_dir = runner.run(checked.checked_of, {"block": variant(block)[0].name, "params": params.as_dict(),
                                               "depth": max(1, len(beats)), "exp_depth": exp_depth},
                          "tools.bench_cocotb", "checked", block=f"bench_checked_{stem}",
                          env={"INNET_BENCH_STIM": str(spec)})
    return json.loads((test_dir / "bench.json").read_text())


def run_pysim(component, outputs, beats):
    """Amaranth's Python simulator on the same stimulus."""
    sim = Simulator(component)
    sim.add_clock(2e-9)
    counts = {"packets": 0, "cycles": 0}
    ports = [(getattr(component, name), last) for name, last in outputs]

    async def drive(ctx):
        for port, _ in ports:
            ctx.set(port.ready, 1)
        for beat in beats:
            ctx.set(component.i.valid, 1)
            ctx.set(component.i.payload.as_value(), beat)
            await ctx.tick().until(component.i.ready)
        ctx.set(component.i.valid, 0)
        await ctx.tick().repeat(32)

    async def monitor(ctx):
        signals = [s for p, _ in ports for s in (p.valid, p.ready, p.payload.as_value())]
        async for _clk, _rst, *values in ctx.tick().sample(*signals):
            counts["cycles"] += 1
            for (_, last), (valid, ready, word) in zip(ports, zip(*[iter(values)] * 3)):
                if valid and ready:
                    counts["packets"] += last < 0 or (word >> last) & 1

    sim.add_testbench(drive)
    sim.add_testbench(monitor, background=True)
    start = time.perf_counter()
    sim.run()
    return {"cycles": counts["cycles"], "packets_out": counts["packets"],
            "seconds": time.perf_counter() - start, "beats_in": len(beats)}


#: The engines, in the order they run and are reported.
ENGINES = ["verilator-cpp", "cocotb-checked", "cocotb-replay", "cocotb-batched", "cocotb", "amaranth-pysim"]
#: Table column of each engine.
TITLES = {"verilator-cpp": "C++ harness", "cocotb-checked": "cocotb checked", "cocotb-replay": "cocotb Replay",
          "cocotb-batched": "cocotb batched", "cocotb": "cocotb", "amaranth-pysim": "Amaranth pysim"}
FIELDS = ["block", "engine", "packets", "cycles", "seconds", "packets_per_s", "cycles_per_s", "ratio_to_cpp",
          "model_packets_per_s", "load_seconds"]


def bench(name, packets, progress=lambda engine: contextlib.nullcontext(), engines=ENGINES):
    """Rows of the benchmark of block ``name`` on ``engines``; ``progress(engine)`` is a context for each
    engine (the checked engine compares every output with the block's golden model: the one lockstep)."""
    params = bench_params(name)
    b = variant(name)[0]
    component = b.interface(params)
    layout, outputs, beats, dicts = _stimulus(name, component, packets, dicts=True)
    _, _, few = _stimulus(name, component, max(packets // 20, 200))
    runs = {
        "verilator-cpp": lambda: run_cpp(name, params, component, layout, outputs, beats),
        "cocotb-checked": lambda: run_checked(name, params, component, beats, dicts),
        "cocotb-replay": lambda: run_cocotb(name, params, component, outputs, beats, "replay"),
        "cocotb-batched": lambda: run_cocotb(name, params, component, outputs, beats, "batched"),
        "cocotb": lambda: run_cocotb(name, params, component, outputs, beats, "standard"),
        "amaranth-pysim": lambda: run_pysim(b.build(params), outputs, few),
    }
    results = {}
    for engine in engines:
        with progress(engine):
            results[engine] = runs[engine]()
    rows = []
    limit = (results["verilator-cpp"]["cycles"] / results["verilator-cpp"]["seconds"]
             if "verilator-cpp" in results else None)
    for engine, r in results.items():
        cycles_s = r["cycles"] / r["seconds"]
        model = r.get("model_seconds")
        rows.append({"block": name, "engine": engine, "packets": r["packets_out"],
                     "cycles": r["cycles"], "seconds": round(r["seconds"], 4),
                     "packets_per_s": round(r["packets_out"] / r["seconds"]),
                     "cycles_per_s": round(cycles_s), "ratio_to_cpp": round(limit / cycles_s, 1) if limit else "",
                     "model_packets_per_s": round(r["beats_in"] / model) if model else "",
                     "load_seconds": round(r["load_seconds"], 3) if "load_seconds" in r else ""})
    return rows


class Progress:
    """``[3/25] spillway.top cocotb ... 12.3 s (elapsed 1:02)`` on stderr, one line per block and engine."""

    def __init__(self, total):
        self.total, self.done, self.block, self.start = total, 0, None, time.perf_counter()

    @contextlib.contextmanager
    def __call__(self, engine):
        self.done += 1
        print(f"[{self.done}/{self.total}] {self.block} {engine} ...", end="", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = int(time.perf_counter() - self.start)
            print(f" {time.perf_counter() - start:.1f} s (elapsed {elapsed // 60}:{elapsed % 60:02d})",
                  file=sys.stderr, flush=True)


def _si(value):
    """``2.39M``, ``35.5k``, ``585``."""
    value = float(value)
    for scale, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def read_rows(path):
    """Rows of a bench CSV (numbers as floats where they are numbers)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or set(FIELDS[:8]) - set(rows[0]):
        raise ValueError(f"{path}: not a bench CSV (expected columns {', '.join(FIELDS)})")
    return rows


def markdown(rows, packets):
    """The bench table of docs/verification.md: cycles/s per block and engine, with how much slower than C++."""
    blocks = list(dict.fromkeys(r["block"] for r in rows))
    engines = [e for e in ENGINES if any(r["engine"] == e for r in rows)]
    cell = {(r["block"], r["engine"]): r for r in rows}
    chosen = "" if engines == ENGINES else f" --engines {','.join(engines)}"
    lines = [f"`make bench` (`python -m tools.bench --packets {packets}{chosen} --docs`: {packets} beats, 2 cores; "
             f"cycles/s (C++ harness and cocotb checked: the fastest of {REPEAT} runs), and how much slower than "
             "the plain C++ harness; *model*: the golden model run ahead "
             "for the checked engine, packets/s):", "",
             "| block | " + " | ".join(TITLES[e] for e in engines) + " | model |",
             "|---|" + "---|" * (len(engines) + 1)]
    for block in blocks:
        cells = []
        for e in engines:
            r = cell.get((block, e))
            if r is None:
                cells.append("—")
            elif e == "verilator-cpp":
                cells.append(_si(r["cycles_per_s"]))
            else:
                ratio = float(r["ratio_to_cpp"]) if r["ratio_to_cpp"] != "" else None
                cells.append(_si(r["cycles_per_s"]) if ratio is None else
                             f"{_si(r['cycles_per_s'])} ({ratio:.0f}x)" if ratio >= 10 else
                             f"{_si(r['cycles_per_s'])} ({ratio:.1f}x)")
        model = cell.get((block, "cocotb-checked"), {}).get("model_packets_per_s") or ""
        lines.append(f"| {block} | " + " | ".join(cells) + f" | {_si(model) if model != '' else '—'} |")
    return "\n".join(lines) + "\n"


def plot(rows, path):
    """Cycles/s per block and engine (log scale), one bar group per block."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    blocks = list(dict.fromkeys(r["block"] for r in rows))
    engines = [e for e in ENGINES if any(r["engine"] == e for r in rows)]
    cell = {(r["block"], r["engine"]): float(r["cycles_per_s"]) for r in rows}
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(blocks)), 4.5))
    width = 0.8 / len(engines)
    for k, e in enumerate(engines):
        xs = [i + (k - (len(engines) - 1) / 2) * width for i in range(len(blocks))]
        ax.bar(xs, [cell.get((b, e), 0) for b in blocks], width, label=TITLES[e])
    ax.set_yscale("log")
    ax.set_xticks(range(len(blocks)), blocks, rotation=30, ha="right")
    ax.set_xlabel("block")
    ax.set_ylabel("simulated cycles per second (log)")
    ax.set_title("make bench: simulation throughput per engine")
    ax.legend(fontsize="small", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = Parser(prog="bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("blocks", nargs="*", help=f"blocks to run (default: all of {', '.join(BLOCKS)})")
    parser.add_argument("--packets", type=integer(1), default=100000, help="packets per engine (pysim: 1/20)")
    parser.add_argument("--engines", default=",".join(ENGINES),
                        help=f"comma-separated engines to run (default: all of {','.join(ENGINES)})")
    parser.add_argument("--docs", action="store_true", help="rewrite the bench table of docs/verification.md")
    parser.add_argument("--from-csv", type=Path, metavar="CSV",
                        help="run nothing: print (and with --docs write) the table of a bench CSV "
                             "(give the --packets it was run with)")
    args = parser.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines:
        raise ValueError(f"--engines: unknown engine {', '.join(unknown) or '(none)'}; known: {', '.join(ENGINES)}")
    OUT.mkdir(parents=True, exist_ok=True)
    if args.from_csv:
        rows = read_rows(args.from_csv)
        packets = args.packets                # the run's --packets (the CSV holds packets out)
    else:
        names = [name for name in args.blocks or BLOCKS if variant(name)]
        runner.verilator_env()
        os.environ["INNET_MAKE"] = "OPT_FAST=-O2"    # the cocotb engines' C++ as the harness's -CFLAGS -O2 (tests: -O0)
        progress = Progress(len(names) * len(engines))
        rows = []
        for name in names:                    # the CSV is rewritten after each block: a long run keeps its rows
            progress.block = name
            rows += bench(name, args.packets, progress, engines)
            with open(OUT / "bench.csv", "w", newline="") as out:
                writer = csv.DictWriter(out, fieldnames=FIELDS)
                writer.writeheader()
                writer.writerows(rows)
        packets = args.packets
    wide = max(18, *(len(r["block"]) + 2 for r in rows))      # the block column fits the longest name
    print(f"{'block':<{wide}}{'engine':<16}{'packets':>9}{'cycles':>9}{'packets/s':>12}"
          f"{'cycles/s':>12}{'slower than C++':>17}{'model pkt/s':>13}")
    for r in rows:
        ratio = f"{float(r['ratio_to_cpp']):g}x" if r["ratio_to_cpp"] != "" else "—"
        print(f"{r['block']:<{wide}}{r['engine']:<16}{r['packets']:>9}{r['cycles']:>9}"
              f"{r['packets_per_s']:>12}{r['cycles_per_s']:>12}{ratio:>17}{r.get('model_packets_per_s', ''):>13}")
    plot(rows, OUT / "bench.png")
    if not args.from_csv:
        print(f"written {OUT / 'bench.csv'}")
    print(f"written {OUT / 'bench.png'}")
    if args.docs:
        sections.rewrite(DOCS, "bench", markdown(rows, packets))
        print(f"written {DOCS} (bench table)")


if __name__ == "__main__":
    run("bench", main)

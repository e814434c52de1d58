"""Equivalence miter of a mutant against the design, in mcy's manner: ``python -m tools.miter DESIGN N --out FILE``.

Runs in a tree whose block sources are a mutant schemata (tools/schemata.py). It takes the design
``DESIGN`` (a registered block with its soak parameters, and a registry ``--variant``'s overrides, as
screening builds it) twice: as written (``schemata.forcing(ORIGINAL)``) and as mutant ``N``
(``forcing(N)``: what the AST mutant of ``tools.mutants`` builds). Two checks:

- a **proof** (Yosys ``equiv_make``/``equiv_struct``/``equiv_simple``/``equiv_induct``): the two
  netlists, their signals paired by name, every pair proved equal by induction over the paired state
  (two memories with the paired inputs and the same contents are one). It applies when both start
  from the same state (the same reset values and memory contents: checked first): then no input
  sequence tells them apart, ``equivalent``. A plain miter's k-induction cannot do this for a block
  with memories (the two copies' memories are free and unrelated in the induction step), hence the
  pairing;
- otherwise the **miter** itself (``Miter``): the two side by side, every input (and the reset) free at
  every cycle and shared, an ``Assert`` per output that the two agree (a stream's payload only while its
  ``valid`` is high, as the lockstep compares), checked by ``formal.runner.prove`` in ``bmc`` mode to
  ``--depth`` cycles from reset (``formal/bounded.toml``'s ``miter_*``): a failing trace says
  ``differs`` (the output, the step: a test could kill the mutant); none says ``bounded`` (mcy's
  criterion of equivalence, not a proof).

``FILE`` (JSON): {verdict, detail, seconds}.
"""
import json
import re
import subprocess
import time
from pathlib import Path

from amaranth.asserts import AnySeq
from amaranth.back import rtlil
from amaranth.hdl import Assert, Elaboratable, Fragment, Module, Value

from formal.runner import BUILD, FormalFailure, prove, tools
from tools import schemata
from tools.cli import Parser, integer, run
from tools.screening import design

__all__ = ["Miter", "proof", "check"]

#: The proof's Yosys script (the RTLIL of the design and the mutant, modules ``gold`` and ``gate``). Memories stay
#: memories: equiv_make gives both copies' memories the paired inputs, and equiv_struct merges two cells of the same
#: type, parameters (a memory's contents among them) and inputs (mapped to registers, the chunk bitmap's memories made
#: its proofs take 55 s each, not 12). equiv_simple looks one cycle back; equiv_induct proves what it leaves.
EQUIV = """\
read_rtlil gold.il
read_rtlil gate.il
setattr -mod -unset top
proc
flatten
memory -nomap
opt_clean
equiv_make gold gate equiv
hierarchy -top equiv
equiv_struct
equiv_simple
equiv_induct -seq 2
equiv_status -assert
"""


class _Elaborated(Elaboratable):
    def __init__(self, fragment):
        self.fragment = fragment

    def elaborate(self, platform):
        return self.fragment


class Miter(Elaboratable):
    """The design ``name`` (``variant``) against its mutant ``n``, outputs asserted equal (the module doc)."""

    def __init__(self, name, n, variant=None):
        self.b, self.params = design(name, variant)
        self.n = n

    def elaborate(self, platform):
        m = Module()
        copies = []
        for which, label in ((schemata.ORIGINAL, "design"), (self.n, "mutant")):
            with schemata.forcing(which):          # the constructor's sites too (init values, widths)
                component = self.b.build(self.params)
                m.submodules[label] = _Elaborated(Fragment.get(component, None))
            copies.append(component)
        first, second = copies
        leaves = list(zip(first.signature.flatten(first), second.signature.flatten(second)))
        by_path = {path: value for (path, _, value), _ in leaves}
        for (path, member, mine), (_, _, theirs) in leaves:
            mine, theirs = Value.cast(mine), Value.cast(theirs)
            name = "__".join(map(str, path))
            if member.flow.name == "In":
                free = AnySeq(len(mine))
                m.d.comb += [mine.eq(free), theirs.eq(free)]
            elif path[-1] == "payload" and path[:-1] + ("valid",) in by_path:
                with m.If(by_path[path[:-1] + ("valid",)]):
                    m.d.comb += Assert(mine == theirs, f"output {name}")
            else:
                m.d.comb += Assert(mine == theirs, f"output {name}")
        return m


def _initial(text, name):
    """The initial state of a netlist's RTLIL ``text`` (top module ``name``): every reset value and memory
    content, by module and signal."""
    state, module, init, cell = [], "", None, False
    for line in map(str.strip, text.splitlines()):
        if line.startswith("module "):
            module = line.split()[1].replace(f"\\{name}", "", 1)
        elif line.startswith("attribute \\init "):
            init = line.split(None, 2)[2]
        elif line.startswith("wire ") and init is not None:
            state.append((module, line.split()[-1], init))
            init = None
        elif line.startswith("cell "):
            cell = line.split()[1].startswith("$meminit")
        elif line == "end":
            cell = False
        elif cell and line.startswith(("parameter \\MEMID", "connect \\DATA", "connect \\ADDR")):
            state.append((module, "meminit", line))
    return sorted(state)


def proof(name, n, variant, work, timeout):
    """Whether Yosys proves mutant ``n`` equivalent to design ``name`` (the module doc); None when the
    two start from different states (the proof does not apply) or Yosys finds no proof in ``timeout``."""
    b, params = design(name, variant)
    texts = {}
    for which, label in ((schemata.ORIGINAL, "gold"), (n, "gate")):
        with schemata.forcing(which):
            texts[label] = rtlil.convert(b.build(params), name=label, emit_src=False)
    if _initial(texts["gold"], "gold") != _initial(texts["gate"], "gate"):
        return None
    work.mkdir(parents=True, exist_ok=True)
    for label, text in texts.items():
        (work / f"{label}.il").write_text(text)
    (work / "equiv.ys").write_text(EQUIV)
    yosys = tools()[0]
    try:
        done = subprocess.run([yosys, "-q", "-l", "equiv.log", "equiv.ys"], cwd=work, capture_output=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return done.returncode == 0


def check(name, n, variant=None, depth=10, timeout=600):
    """{verdict, detail, seconds} of mutant ``n`` against design ``name`` (the module doc)."""
    start = time.monotonic()
    label = f"miter_{name.replace('.', '_')}{'_' + variant if variant else ''}_{n}"
    if proof(name, n, variant, BUILD / f"{label}_equiv", timeout):
        return {"verdict": "equivalent", "detail": "proved at the soak parameters (Yosys equiv_induct: every signal "
                                                   "paired by name, the same initial state)",
                "seconds": time.monotonic() - start}
    try:
        prove(Miter(name, n, variant), label, depth=depth, mode="bmc")
    except FormalFailure as failure:
        return {"verdict": "differs", "detail": _output(str(failure)), "seconds": time.monotonic() - start}
    return {"verdict": "bounded", "detail": f"no output differs within {depth} cycles of reset (soak parameters)",
            "seconds": time.monotonic() - start}


def _output(message):
    """The first output a miter failure names, with its step."""
    found = re.search(r"failed assertion: output (\S+) \(.*?(step [\d, ]+)?\)", message)
    return f"output {found[1]} differs" + (f" at {found[2]}" if found[2] else "") if found else \
        message.splitlines()[0]


def main(argv=None):
    parser = Parser(prog="miter", description=__doc__.split("\n\n")[0])
    parser.add_argument("design", help="the registered design (the block, or one that contains it)")
    parser.add_argument("mutant", type=integer(0), help="the mutant's id")
    parser.add_argument("--variant", default=None, help="a registry variant of the design")
    parser.add_argument("--depth", type=integer(1), default=10, help="depth of the bounded check (10)")
    parser.add_argument("--out", required=True, help="the result file (JSON)")
    args = parser.parse_args(argv)
    result = check(args.design, args.mutant, args.variant, args.depth)
    Path(args.out).write_text(json.dumps(result))
    print(f"miter {args.design} #{args.mutant}: {result['verdict']}: {result['detail']}")


if __name__ == "__main__":
    run("miter", main)

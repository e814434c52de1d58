"""Equivalence miter of a mutant against the design, in mcy's manner: ``python -m tools.miter DESIGN N --out FILE``.

Runs in a tree whose block sources are a mutant schemata (tools/schemata.py). Two copies of the design
``DESIGN`` (a registered block, with its soak parameters and a registry ``--variant``'s overrides, as
screening builds it): the design as written (``schemata.forcing(ORIGINAL)``) and mutant ``N``
(``forcing(N)``: what the AST mutant of ``tools.mutants`` builds). They share every input, free at
every cycle (``AnySeq``), and the reset, also free; an ``Assert`` per output says the two agree (a
stream's payload only while its ``valid`` is high: the lockstep compares no more). With ``states``
(the default) every register of the mutant is also asserted equal to the design's (paired in
elaboration order, by name): that makes the k-induction go through when the mutant never changes the
state. ``formal.runner.prove`` runs the k-induction (depth ``INDUCTION``):

- it passes: ``equivalent`` (no input sequence tells them apart: a proof);
- an output differs on a trace from reset: ``differs`` (the output and the cycle: a test could kill it);
- otherwise (a register differs, or the induction fails): a bounded check of the outputs alone
  (``bmc`` of ``--depth`` cycles, ``formal/bounded.toml``'s ``miter_*``) says ``differs``, or ``bounded``
  (no difference within the depth; not a proof).

``FILE`` (JSON): {verdict, detail, seconds}.
"""
import json
import re
import time
from pathlib import Path

from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Elaboratable, Fragment, Module, Value

from formal.runner import FormalFailure, prove
from tools import schemata
from tools.cli import Parser, integer, run
from tools.screening import design

__all__ = ["Miter", "registers", "check"]


class _Elaborated(Elaboratable):
    def __init__(self, fragment):
        self.fragment = fragment

    def elaborate(self, platform):
        return self.fragment


def registers(fragment):
    """[(name, signal)] of the signals ``fragment`` and its subfragments drive from a clock domain, in
    elaboration order."""
    found = {}

    def walk(frag, path):
        for domain, statements in frag.statements.items():
            if domain != "comb":
                for statement in statements:
                    for signal in sorted(statement._lhs_signals(), key=lambda s: s.name):
                        found.setdefault(id(signal), (f"{path}{signal.name}", signal))
        for sub, name, _ in frag.subfragments:
            walk(sub, f"{path}{name}.")
    walk(fragment, "")
    return list(found.values())


class Miter(Elaboratable):
    """The design ``name`` (``variant``) against its mutant ``n``: the module doc."""

    def __init__(self, name, n, variant=None, states=True):
        self.b, self.params = design(name, variant)
        self.n, self.states = n, states

    def elaborate(self, platform):
        m = Module()
        copies = []
        for which, label in ((schemata.ORIGINAL, "design"), (self.n, "mutant")):
            component = self.b.build(self.params)
            with schemata.forcing(which):
                fragment = Fragment.get(component, None)
            m.submodules[label] = _Elaborated(fragment)
            copies.append((component, fragment))
        (design_, first), (mutant, second) = copies
        leaves = list(zip(design_.signature.flatten(design_), mutant.signature.flatten(mutant)))
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
        ours, others = registers(first), registers(second)
        if self.states and [n for n, _ in ours] == [n for n, _ in others]:
            for (name, mine), (_, theirs) in zip(ours, others):
                m.d.comb += Assert(mine == theirs, f"state {name}")
        return m


#: Depth of the k-induction (with the registers paired, a mutant that keeps the state proves at 1-2).
INDUCTION = 3


def check(name, n, variant=None, depth=20):
    """{verdict, detail, seconds} of mutant ``n`` against design ``name`` (the module doc)."""
    start = time.monotonic()
    label = f"miter_{name.replace('.', '_')}{'_' + variant if variant else ''}_{n}"
    try:
        prove(Miter(name, n, variant), label, depth=INDUCTION, mode="prove")
        return {"verdict": "equivalent", "detail": f"{INDUCTION}-induction", "seconds": time.monotonic() - start}
    except FormalFailure as failure:
        first = str(failure)
        if "bounded check failed" in first and re.search(r"failed assertion: output ", first):
            return {"verdict": "differs", "detail": _output(first), "seconds": time.monotonic() - start}
    try:
        prove(Miter(name, n, variant, states=False), label + "_outputs", depth=depth, mode="bmc")
    except FormalFailure as failure:
        return {"verdict": "differs", "detail": _output(str(failure)), "seconds": time.monotonic() - start}
    return {"verdict": "bounded", "detail": f"no output differs within {depth} cycles of reset; k-induction "
                                            "inconclusive", "seconds": time.monotonic() - start}


def _output(message):
    """The first output a miter failure names, with its step."""
    found = re.search(r"failed assertion: output (\S+) \(.*?(step [\d, ]+)?\)", message)
    return f"output {found[1]} differs" + (f" at {found[2]}" if found and found[2] else "") if found else \
        message.splitlines()[0]


def main(argv=None):
    parser = Parser(prog="miter", description=__doc__.split("\n\n")[0])
    parser.add_argument("design", help="the registered design (the block, or one that contains it)")
    parser.add_argument("mutant", type=integer(0), help="the mutant's id")
    parser.add_argument("--variant", default=None, help="a registry variant of the design")
    parser.add_argument("--depth", type=integer(1), default=20, help="depth of the bounded check (20)")
    parser.add_argument("--out", required=True, help="the result file (JSON)")
    args = parser.parse_args(argv)
    result = check(args.design, args.mutant, args.variant, args.depth)
    Path(args.out).write_text(json.dumps(result))
    print(f"miter {args.design} #{args.mutant}: {result['verdict']}: {result['detail']}")


if __name__ == "__main__":
    run("miter", main)

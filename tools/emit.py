"""Emit the Verilog of registered blocks with their default parameters.

    python -m tools.emit [-o OUTDIR] [block ...]      # default: every block, into build/verilog
"""
from pathlib import Path

from registry import BLOCKS, block
from testbenches.runner import emit_verilog
from tools.cli import Parser, run


def main(argv=None):
    parser = Parser(prog="emit", description=__doc__.split("\n\n")[0])
    parser.add_argument("blocks", nargs="*", help=f"blocks to emit (default: all of {', '.join(BLOCKS)})")
    parser.add_argument("-o", "--out", default="build/verilog", help="output directory")
    args = parser.parse_args(argv)
    blocks = [block(name) for name in args.blocks or BLOCKS]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for b in blocks:
        emit_verilog(b.build(), out / f"{b.name}.v", name=b.name)
        print(out / f"{b.name}.v")


if __name__ == "__main__":
    run("emit", main)

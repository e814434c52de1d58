"""Emit the Verilog of registered blocks with their default parameters and registry variants.

    python -m tools.emit [-o OUTDIR] [block ...]      # default: every block, into build/verilog

A block's variant ``v`` (``registry.Block.variants``) goes to ``<block>.<v>.v``; ``block[v]`` emits only it.
"""
from pathlib import Path

from registry import BLOCKS, variant
from testbenches.runner import emit_verilog
from tools.cli import Parser, run


def main(argv=None):
    parser = Parser(prog="emit", description=__doc__.split("\n\n")[0])
    parser.add_argument("blocks", nargs="*", help=f"blocks to emit (default: all of {', '.join(BLOCKS)})")
    parser.add_argument("-o", "--out", default="build/verilog", help="output directory")
    args = parser.parse_args(argv)
    labels = args.blocks or [f"{name}{v}" for name, b in BLOCKS.items() for v in ["", *(f"[{k}]" for k in b.variants)]]
    targets = [variant(label) for label in labels]      # KeyError naming the known ones, before any work
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for b, overrides, stem in targets:
        emit_verilog(b.build(b.make_params(overrides)), out / f"{stem}.v", name=stem.replace(".", "_"))
        print(out / f"{stem}.v")


if __name__ == "__main__":
    run("emit", main)

"""Emit the Verilog of registered blocks with their default parameters and registry variants.

    python -m tools.emit [-o OUTDIR] [block ...]      # default: every block, into build/verilog

A block's variant ``v`` (``registry.Block.variants``) goes to ``<block>.<v>.v``; ``block[v]`` emits only it.
A block with packet ports also gets its AXI4-Stream wrapper (``hdl/axis.py``), module ``<block>_axis``
in ``<block>_axis.v``, with a comment listing the ``tuser`` bit layout of its packet ports.
"""
from pathlib import Path

from hdl.axis import AxiStream, is_packet, meta_fields
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
        block = b.build(b.make_params(overrides))
        packets = [name for name, member in block.signature.members.items() if is_packet(member)]
        emit_verilog(block, out / f"{stem}.v", name=stem.replace(".", "_"))
        print(out / f"{stem}.v")
        if packets:
            name = stem.replace(".", "_") + "_axis"
            path = out / f"{stem}_axis.v"
            emit_verilog(AxiStream(b.build(b.make_params(overrides))), path, name=name)
            layout = "; ".join(f"{port}: " + (", ".join(f"tuser[{lo + width - 1}:{lo}] = meta.{field}"
                                                        for field, lo, width in meta_fields(block, port))
                                               or "no tuser") for port in packets)
            text = path.read_text()
            header = f"// AXI4-Stream wrapper of {stem} (hdl/axis.py); {layout}\n"
            if not text.startswith(header):
                path.write_text(header + text)
            print(path)


if __name__ == "__main__":
    run("emit", main)

"""Emit the Verilog of every block with its default parameters: ``python -m tools.emit OUTDIR``."""
import importlib
import sys
from pathlib import Path

from testbenches.runner import emit_verilog

#: block name -> (module, Component class); the file names follow the hdl/ layout.
BLOCKS = {
    "spill_buffer": ("hdl.spill_buffer", "SpillBuffer"),
    "progress_regfile": ("hdl.progress_regfile", "ProgressRegfile"),
    "aggregator": ("hdl.aggregator", "Aggregator"),
    "pipeline": ("hdl.pipeline", "Pipeline"),
}


def main(outdir="build/verilog"):
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    for name, (module, cls) in BLOCKS.items():
        component = getattr(importlib.import_module(module), cls)()
        emit_verilog(component, out / f"{name}.v", name=name)
        print(f"{out / name}.v")


if __name__ == "__main__":
    main(*sys.argv[1:])

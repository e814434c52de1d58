"""Verilator's runtime header, precompiled once and shared by every C++ build compiled the same way.

Each translation unit of a build (the Verilated design, cocotb's or the screening harness's ``main``)
starts by parsing ``verilated.h``: 0.4-0.6 s of a small design's 0.6-1.1 s. ``prepare`` asks the build's
makefile for the command that compiles the design (``make -n``), compiles ``verilated.h`` with it into
``innet_pch.h.gch`` in the build's runtime cache (the directory its Verilator runtime objects are kept in:
one per Verilator version and flags), and links it into the build directory beside a header that
includes ``verilated.h``. The build's ``OPT_FAST`` (``opt_fast``) then force-includes that header: GCC takes
the precompiled one, or, should it not match the command (``-Winvalid-pch`` says why), parses the header
as before. The runtime objects (``OPT_GLOBAL``) are compiled without it.

``python -m testbenches.precompiled BUILD_DIR CACHE [MAKE_VARIABLE ...]``: ``prepare`` as a build step.
"""
import os
import shlex
import subprocess
import sys
from pathlib import Path

#: The header every design translation unit is made to include first.
HEADER = "innet_pch.h"
#: The design's translation unit, whose compile command the precompiled header is built with.
UNIT = "Vtop__ALL"


def opt_fast(variables):
    """The make variables ``variables`` with ``OPT_FAST`` also force-including ``HEADER`` (verilated.mk's
    default ``-Os`` when it is not set)."""
    fast = next((v.partition("=")[2] for v in variables if v.startswith("OPT_FAST=")), "-Os")
    others = [v for v in variables if not v.startswith("OPT_FAST=")]
    return others + [f"OPT_FAST={fast} -Winvalid-pch -include {HEADER}"]


def prepare(build_dir, cache, variables=()):
    """Write ``HEADER`` into ``build_dir`` and link ``cache``'s precompiled copy of it beside it, compiling
    that first (atomically: builds share it) with the command make would compile the design with under
    ``variables``. Returns whether the precompiled header is there: without it the header is parsed."""
    build_dir, cache = Path(build_dir), Path(cache)
    (build_dir / HEADER).write_text('#include "verilated.h"\n')
    compiled = cache / f"{HEADER}.gch"
    if not compiled.exists():
        dry = subprocess.run(["make", "-n", "-B", "-C", str(build_dir), "-f", "Vtop.mk", *variables, f"{UNIT}.o"],
                             capture_output=True, text=True)
        line = next((text for text in dry.stdout.splitlines() if f"-c -o {UNIT}.o" in text), None)
        if line is None:
            return False
        command = [arg for arg in shlex.split(line) if arg not in ("-MMD", "-c", "-o", f"{UNIT}.o", f"{UNIT}.cpp")]
        cache.mkdir(parents=True, exist_ok=True)
        part = cache / f".{HEADER}.{os.getpid()}.gch"
        done = subprocess.run([*command, "-x", "c++-header", "-o", str(part), HEADER], cwd=build_dir,
                              capture_output=True, text=True)
        if done.returncode:
            part.unlink(missing_ok=True)
            return False
        part.replace(compiled)
    link = build_dir / f"{HEADER}.gch"
    link.unlink(missing_ok=True)
    link.symlink_to(compiled.resolve())
    return True


if __name__ == "__main__":
    prepare(sys.argv[1], sys.argv[2], sys.argv[3:])

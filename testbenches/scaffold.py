"""``make new-block`` gives a block every service with no other edit: in a fresh copy of the sources, a
block made from the scaffold is collected by ``make test`` (its testbench, proof, soak and layout checks)
and passes them, the soak sends it 1e5 packets, ``make bench`` measures it on the C++ harness and the
checked engine, ``make mutants`` runs two of its mutants, ``make verilog`` and ``make report`` include it.
It is the smoke form of docs/adding-a-block.md's commands (``testbenches/test_readme.py``), run once."""
import functools
import json
import re

from registry import ROOT

NAME = "my_counter"


@functools.cache
def new_block_gets_every_service():
    from testbenches.test_readme import Shell, clone
    sh = Shell(clone(into=ROOT / "build" / "scaffold"))
    out, _ = sh(f"make new-block NAME={NAME} TITLE='My packet counter'")
    assert f"registered {NAME}" in out, out
    again = sh.fails(f"make new-block NAME={NAME}")
    assert f"new_block: NAME '{NAME}': already registered in registry.py" in again, again

    collected, _ = sh(".venv/bin/python -m pytest --collect-only -q tests testbenches formal scenarios")
    for test in (f"testbenches/test_{NAME}.py::test_{NAME}[default-random_traffic]",
                 f"formal/test_{NAME}.py::test_{NAME}_counter", f"testbenches/test_soak.py::test_soak[{NAME}-soak]",
                 f"testbenches/test_layout.py::test_one_name_everywhere[{NAME}]"):
        assert test in collected, f"make test would not run {test}"
    out, _ = sh(f"make test BLOCK={NAME}")
    assert re.search(r"\b(\d+) passed", out) and " failed" not in out, out
    soak, = (sh.root / "build" / "checked").glob(f"block={NAME}-*/soak/summary.json")
    assert json.loads(soak.read_text())["soak"]["packets_in"] == 100_000

    out, _ = sh(f"make bench BLOCKS={NAME} PACKETS=2000 ENGINES=verilator-cpp,cocotb-checked")
    for engine in ("verilator-cpp", "cocotb-checked"):
        assert re.search(rf"^{NAME}\s+{engine}\s+2000\s", out, re.M), out
    out, _ = sh(f"make mutants BLOCK={NAME} N=2")
    assert re.search(rf"mutants: {NAME}: 2 mutants: invalid \d+", out), out
    out, _ = sh(f"make verilog BLOCKS={NAME}")
    assert f"build/verilog/{NAME}.v" in out, out
    out, _ = sh(f"make report BLOCKS={NAME}")
    assert re.search(rf"^{NAME}\s+\d+\s+\d+", out, re.M), out

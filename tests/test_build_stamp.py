"""The test runner's build stamp (testbenches/runner.py ``BUILT``): a build already made for the same commands
and sources is not run again, and any change to them, or a missing simulator, builds again."""
import os

from testbenches import runner

COUNTER = """module top(input clk, input rst, output reg [7:0] count);
  always @(posedge clk) count <= rst ? 8'd0 : count + 8'd{step};
endmodule
"""


def _build(build_dir, source, make=(), claim=lambda: None):
    """Build ``source`` as the runner builds a test's design; the simulator's modification time."""
    runner.verilator_env()
    cocotb_runner, runtime = runner._verilator_runner(runner.BUILD_ARGS, make=make, claim=claim)
    cocotb_runner.build(sources=[source], hdl_toplevel="top", build_dir=build_dir, build_args=runner.BUILD_ARGS,
                        timescale=("1ns", "1ps"), log_file=build_dir / "build.log")
    runner._keep_runtime(build_dir, runtime)
    return os.stat(build_dir / "top").st_mtime_ns


def test_a_build_runs_again_only_when_its_inputs_change(tmp_path):
    build_dir, source = tmp_path / "build", tmp_path / "top.v"
    source.write_text(COUNTER.format(step=1))
    first = _build(build_dir, source)
    assert (build_dir / runner.BUILT).exists()
    assert _build(build_dir, source) == first, "an unchanged build was made again"
    source.write_text(COUNTER.format(step=2))
    changed = _build(build_dir, source)
    assert changed != first, "a changed design was not built again"
    assert _build(build_dir, source, make=["OPT_FAST=-O1"]) != changed, "changed make variables were not applied"
    (build_dir / "top").unlink()
    _build(build_dir, source)
    assert (build_dir / "top").exists(), "a missing simulator was not built again"


def test_a_run_claims_the_build_only_to_write_it(tmp_path):
    """A run holds the build's lock shared, and exclusive (``claim``) only when it emits the design or builds
    the simulator: the runs of an up-to-date build (a campaign's mutants, xdist workers) go side by side."""
    build_dir, source = tmp_path / "build", tmp_path / "top.v"
    source.write_text(COUNTER.format(step=1))
    claims = []
    _build(build_dir, source, claim=lambda: claims.append("build"))
    assert claims == ["build"], "a build was made without claiming its directory"
    _build(build_dir, source, claim=lambda: claims.append("build"))
    assert claims == ["build"], "an up-to-date build was claimed"
    for _ in range(2):
        runner._emit_once(build_dir, "one", {}, lambda: (build_dir / "top.v").write_text(""),
                          claim=lambda: claims.append("emit"))
    assert claims == ["build", "emit"], "a design was emitted without a claim, or claimed when current"


def test_a_design_depends_on_the_sources_it_imports():
    """A design's stamp covers the modules its own imports, at any depth (hdl/headers.py through hdl/parse.py),
    with their packages; not another block's RTL, whose edit then leaves this design's builds alone."""
    hdl = runner.ROOT / "hdl"
    sources = runner.imported(hdl / "progress_regfile.py")
    assert {hdl / "progress_regfile.py", hdl / "parse.py", hdl / "headers.py", hdl / "__init__.py",
            runner.ROOT / "models" / "wire.py"} <= sources, sorted(sources)
    assert hdl / "chunk_bitmap.py" not in sources


def test_the_runtime_objects_go_where_they_are_shared(tmp_path, monkeypatch):
    """``INNET_VERILATOR_RUNTIME`` names where a build keeps, and finds, the Verilator runtime's objects (a
    mutation campaign's trees share one directory: compiled once, not once a tree)."""
    monkeypatch.setenv("INNET_VERILATOR_RUNTIME", str(tmp_path / "shared"))
    source = tmp_path / "top.v"
    source.write_text(COUNTER.format(step=1))
    _build(tmp_path / "first", source)
    kept = sorted(path.name for path in (tmp_path / "shared").glob("*/*.o"))
    assert kept == sorted(f"{name}.o" for name in runner.RUNTIME), kept


def test_the_design_takes_the_precompiled_runtime_header(tmp_path, monkeypatch):
    """A build's design and ``main`` compile with ``verilated.h`` precompiled once in the shared runtime
    directory (testbenches/precompiled.py): GCC's ``-H`` marks a precompiled header it used with ``!``."""
    import shlex
    import subprocess

    from testbenches import precompiled

    monkeypatch.setenv("INNET_VERILATOR_RUNTIME", str(tmp_path / "shared"))
    build_dir, source = tmp_path / "build", tmp_path / "top.v"
    source.write_text(COUNTER.format(step=1))
    _build(build_dir, source, make=runner.MAKE.split())
    assert [p.name for p in (tmp_path / "shared").glob(f"*/{precompiled.HEADER}.gch")] == [f"{precompiled.HEADER}.gch"]
    variables = precompiled.opt_fast([*runner.MAKE.split(), "VM_TRACE=0"])
    for unit in (precompiled.UNIT, "verilator"):
        dry = subprocess.run(["make", "-n", "-B", "-f", "Vtop.mk", *variables, f"{unit}.o"], cwd=build_dir,
                             capture_output=True, text=True, check=True).stdout
        line = next(text for text in dry.splitlines() if f"-c -o {unit}.o" in text)
        command = [arg for arg in shlex.split(line) if arg != "-MMD"]
        command[command.index(f"{unit}.o")] = str(tmp_path / f"{unit}.o")
        headers = subprocess.run([*command, "-H"], cwd=build_dir, capture_output=True, text=True).stderr
        assert headers.startswith(f"! ./{precompiled.HEADER}.gch"), f"{unit}: {headers[:300]}"

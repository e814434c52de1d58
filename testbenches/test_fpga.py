"""The FPGA flow (``tools/fpga.py``, ``make fpga``): one small block through synthesis, place and route within
the suite's budget, its report parsed and its Fmax against the goal; and ``make report`` and ``make fpga``
seeing the same memories in every block. The full run over every block is ``make fpga``."""
from types import SimpleNamespace

import pytest
from amaranth.hdl import Module
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

import registry
from tools import fpga, report

pytestmark = pytest.mark.xdist_group("fpga")

#: The block the suite places and routes: small, a memory, a clock well above the goal.
SMALL = "packet_fifo"


def test_flow_meets_goal(tmp_path, capsys):
    """The flow on one block; the CSV's row of a block not run is kept (a run of some blocks refreshes theirs)."""
    other = dict.fromkeys(fpga.FIELDS, "0") | {"block": "ev_expander", "params": "{}", "fmax_mhz": "129.3",
                                                "meets": "True", "memories": ""}
    fpga._write([other], tmp_path / "fpga.csv")
    fpga.main([SMALL, "--out", str(tmp_path)])
    out = capsys.readouterr().out
    row, kept = fpga.read_rows(tmp_path / "fpga.csv")
    assert kept == other, kept
    assert row["block"] == SMALL and float(row["fmax_mhz"]) >= fpga.GOAL, row
    assert row["meets"] == "True" and int(row["stages"]) >= 1 and row["path_from"] and row["path_to"], row
    assert int(row["lut4"]) > 0 and int(row["ffs"]) > 0, row
    assert row["memories"] == "fifo.storage: distributed RAM", row
    assert f"| {SMALL} | {float(row['fmax_mhz']):.1f} |" in out, out
    assert not fpga.problems([row], fpga.settings())


#: The blocks whose own design holds memories (the pipelines and Spillway's top hold those of their parts),
#: and the EV selector, whose case table Yosys turns into a ROM.
WITH_MEMORIES = ("packet_fifo", "spillway.node", "spillway.switch", "spillway.inswitch", "progress_regfile",
                 "chunk_bitmap", "ev_selector")


def _named(memories):
    """Memory names, a ROM Yosys made of a case table (named by Yosys, differently in each flow) as ``ROM``."""
    return sorted("ROM" if fpga.is_rom(memory) else memory for memory in memories)


@pytest.mark.parametrize("name", WITH_MEMORIES)
def test_report_and_fpga_agree_on_memories(name, tmp_path):
    """The register arrays ``make report`` keeps as memories (SRAM) are the memories the FPGA flow maps to
    RAM, by name, at the block's default parameters."""
    (tmp_path / "report").mkdir()
    _, generic = report.synthesised(name, out=tmp_path / "report")
    fpga.synthesise(name, {}, tmp_path / "fpga", full=False)
    assert _named(memory for memory, _, _ in generic) == _named(fpga.memories(tmp_path / "fpga"))
    assert generic, f"{name} holds no memory: WITH_MEMORIES is stale"


class CombinationalRead(wiring.Component):
    """A 16-word table read combinationally (no registered block in the project has one any more)."""

    addr: In(4)
    data: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.submodules.table = table = memory.Memory(shape=8, depth=16, init=[])
        read, write = table.read_port(domain="comb"), table.write_port()
        m.d.comb += [read.addr.eq(self.addr), self.data.eq(read.data),
                     write.addr.eq(self.addr), write.data.eq(self.addr), write.en.eq(1)]
        return m


def test_combinational_read_refused(tmp_path, monkeypatch):
    """A memory read combinationally cannot be block RAM: without its entry in tools/fpga.toml the flow stops,
    naming it."""
    monkeypatch.setattr(registry, "block", lambda name: SimpleNamespace(build=lambda params: CombinationalRead(),
                                                                        make_params=lambda overrides: None))
    with pytest.raises(ValueError, match="memory table has no block RAM mapping"):
        fpga.synthesise("combinational", {}, tmp_path, distributed=())


def test_progress_tables_in_block_ram(tmp_path):
    """The progress register file's three tables (SRAM) have registered reads: with no memory allowed to be
    distributed RAM, each maps to block RAM (small parameters for the suite's budget; ``make fpga`` maps them
    at the defaults)."""
    fpga.synthesise("progress_regfile", {"jobs": 2, "ring": 2, "table": 4}, tmp_path, distributed=())
    mapping = fpga.memory_mapping((tmp_path / "yosys.log").read_text())
    assert mapping == {"flows": "block RAM", "rows": "block RAM", "settings": "block RAM"}, mapping


def test_problems():
    row = {"block": "b", "fmax_mhz": "90.0", "goal_mhz": "125.0", "meets": "False",
           "memories": "mem: block RAM; fifo: distributed RAM; $auto$proc_rom.cc:155:do_switch$7: logic"}
    assert fpga.problems([row], {}) == ["b: 90.0 MHz < 125.0 MHz and no reason in tools/fpga.toml",
                                        "b: memory fifo mapped to distributed RAM, not block RAM"]
    assert fpga.problems([row], {"b": {"reason": "why", "fmax": 91.0, "distributed": {"fifo": "why"}}}) == []
    assert fpga.problems([row], {"b": {"reason": "why", "fmax": 70.0, "distributed": {"fifo": "why"}}}) == [
        "b: 90.0 MHz, but its reason in tools/fpga.toml was written at 70.0 MHz: read it again and give the new figure"]


def test_names_and_mapping():
    assert fpga.cell_name("block.count_TRELLIS_FF_Q") == "count"
    assert fpga.cell_name("i__payload$16_TRELLIS_FF_Q_522") == "port i__payload"
    assert fpga.cell_name("block.fifo.storage.0.72$DPRAM_COMB3") == "fifo.storage.0.72"
    assert fpga.cell_name("block.credits_TRELLIS_FF_Q_5_DI_CCU2C_S1_LUT4_D_Z_TRELLIS_FF_DI") == "credits"
    log = ("mapping memory top.block.mem via $__DP16KD_\nmapping memory top.block.wide via $__PDPW16KD_\n"
           "mapping memory top.block.fifo via $__TRELLIS_DPR16X4_\nusing FF mapping for memory top.block.rom\n")
    assert fpga.memory_mapping(log) == {"mem": "block RAM", "wide": "block RAM", "fifo": "distributed RAM",
                                        "rom": "logic"}

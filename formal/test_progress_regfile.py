"""Formal properties of the Symphony progress register file, proved with yosys-smtbmc.

Packets, config commands and ``o.ready`` are free (streams obey their rules). Proved by
k-induction:

- a flow at its job's minimum step is never marked (and the minimum never exceeds its step);
- counters never wrap silently: each one only grows, and an event lost at saturation has set
  the sticky ``saturated`` flag;
- one register access per array per packet: the job row is read and written at most once per
  packet, only on a packet's first beat or a config command, never both in a cycle.
"""
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Cover, Elaboratable, Module, Mux, ResetSignal, Signal

from formal.runner import prove
from hdl.progress_regfile import COUNTERS, ProgressRegfile

PARAMS = dict(jobs=2, ring=2, table=2, step_bits=3, counter_bits=3)


def free_stream(m, port, ready):
    """Drive stream ``port`` with free values that stay put until ``ready`` takes them."""
    payload = port.payload.as_value()
    m.d.comb += [port.valid.eq(AnySeq(1)), payload.eq(AnySeq(len(payload)))]
    held, value = Signal(), Signal(len(payload))
    m.d.sync += [held.eq(port.valid & ~ready), value.eq(payload)]
    with m.If(held):
        m.d.comb += Assume(port.valid & (payload == value))


class ProgressSpec(Elaboratable):
    """ProgressRegfile with free inputs and the three properties."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = ProgressRegfile(**PARAMS)
        m.d.comb += [Assume(~ResetSignal()), dut.o.ready.eq(AnySeq(1))]
        free_stream(m, dut.i, dut.i.ready)
        free_stream(m, dut.cfg, dut.cfg.ready)

        # A flow at the minimum is never marked.
        with m.If(dut.decide):
            m.d.comb += Assert(dut.min_step <= dut.step, "min_step never above the flow's step")
        m.d.comb += Assert(~dut.mark | (dut.step != dut.min_step), "a flow at the minimum was marked")

        # Counters only grow; a lost event has raised `saturated`.
        top = (1 << PARAMS["counter_bits"]) - 1
        started = Signal()
        m.d.sync += started.eq(1)
        lost = Signal()
        m.d.sync += lost.eq(lost | (dut.decide & (dut.tracked == top)) | (dut.mark & (dut.marked == top)))
        for name in COUNTERS:
            counter = getattr(dut, name)
            previous = Signal.like(counter, name=f"previous_{name}")
            m.d.sync += previous.eq(counter)
            with m.If(started):
                m.d.comb += Assert(counter >= previous, f"counter {name} wrapped")
        m.d.comb += Assert(~lost | dut.saturated, "an event was lost without the saturated flag")

        # One access per array per packet.
        accepted = dut.i.valid & dut.i.ready
        command = dut.cfg.valid & dut.cfg.ready
        accesses = Signal(2)
        with m.If(accepted):
            m.d.sync += accesses.eq(Mux(dut.first, 0, accesses) + dut.row_reads)
        m.d.comb += [
            Assert(accesses <= 1, "a packet accessed the job row twice"),
            Assert(~dut.decide | dut.first, "only a packet's first beat reads the state"),
            Assert(~(dut.decide & command), "a packet and a command wrote the row in one cycle"),
            Assert(~dut.row_writes.any() | dut.decide | command, "row written without a packet or command"),
            Cover(dut.mark),
            Cover(dut.saturated),
        ]
        return m


def test_properties():
    """All properties hold in every reachable state (k-induction)."""
    prove(ProgressSpec(), "progress_regfile", depth=4, mode="prove")


def test_covers():
    """Marking and counter saturation are reachable (the properties are not vacuous)."""
    prove(ProgressSpec(), "progress_regfile_cover", depth=14, mode="cover")

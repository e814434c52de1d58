"""Formal properties of the Symphony progress register file, proved with yosys-smtbmc.

Packets, config commands and ``o.ready`` are free (streams obey their rules). Proved by
k-induction:

- a flow at its job's minimum step is never marked (and the minimum never exceeds its step);
- counters never wrap silently: each one only grows, and an event lost at saturation has set
  the sticky ``saturated`` flag;
- one register access per array per packet: the flow table is read, the job row read and written
  at most once from a packet's first beat to its last, never outside an accepted beat; only the
  first beat touches the state, and a packet never shares the row's write port with a command.
"""
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Cover, Elaboratable, Module, Mux, ResetSignal, Signal

from formal.runner import prove
from hdl.progress_regfile import COUNTERS, ProgressRegfile, ProgressRegfileParams

PARAMS = ProgressRegfileParams(jobs=2, ring=2, table=2, step_bits=3, counter_bits=3)


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
        m.submodules.dut = dut = ProgressRegfile(PARAMS)
        m.d.comb += [Assume(~ResetSignal()), dut.o.ready.eq(AnySeq(1))]
        free_stream(m, dut.i, dut.i.ready)
        free_stream(m, dut.cfg, dut.cfg.ready)

        # A flow at the minimum is never marked.
        with m.If(dut.decide):
            m.d.comb += Assert(dut.min_step <= dut.step, "min_step never above the flow's step")
        m.d.comb += Assert(~dut.mark | (dut.step != dut.min_step), "a flow at the minimum was marked")

        # Counters only grow; a lost event has raised `saturated`.
        top = (1 << PARAMS.counter_bits) - 1
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

        # One access per array per packet: accesses summed from a packet's first beat to its last.
        accepted = dut.i.valid & dut.i.ready
        command = dut.cfg.valid & dut.cfg.ready
        for name in ("table_reads", "row_reads", "row_writes"):
            access = getattr(dut, name)
            before = Signal(2, name=f"{name}_before")     # this packet's accesses in earlier cycles
            with m.If(accepted):
                m.d.sync += before.eq(Mux(dut.first, 0, before) + access)
            total = Mux(dut.first, 0, before) + access
            m.d.comb += Assert(~accepted | (total <= 1), f"a packet accessed {name} twice")
            m.d.comb += Assert(accepted | ~access, f"{name} accessed without a packet")
            m.d.comb += Assert(before <= 1, f"{name}: a packet's earlier beats accessed it twice")
        m.d.comb += [
            Assert(~dut.decide | dut.first, "only a packet's first beat reads the state"),
            Assert(~(dut.decide & command), "a packet and a command wrote the row in one cycle"),
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

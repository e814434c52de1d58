"""Self-test of the formal runner: a true property is proved, a false one yields a counterexample."""
import pytest
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Cover, Elaboratable, Module, Mux
from amaranth.lib.wiring import Component, In, Out

from formal.runner import FormalFailure, prove


class Wrap(Component):
    """A counter that wraps from ``limit`` back to 0."""
    en: In(1)
    count: Out(4)

    def __init__(self, limit):
        self.limit = limit
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        with m.If(self.en):
            m.d.sync += self.count.eq(Mux(self.count == self.limit, 0, self.count + 1))
        return m


class Spec(Elaboratable):
    """The counter never exceeds ``bound``; it reaches ``limit``."""

    def __init__(self, limit, bound):
        self.limit, self.bound = limit, bound

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = Wrap(self.limit)
        m.d.comb += dut.en.eq(AnySeq(1))
        m.d.comb += Assert(dut.count <= self.bound, "count stays within bound")
        m.d.comb += Cover(dut.count == self.limit)
        return m


def test_proof_holds():
    result = prove(Spec(limit=9, bound=9), "runner_holds", depth=4, mode="prove")
    assert result.mode == "prove" and result.depth == 4
    assert result.properties == ["count stays within bound"]


def test_cover_reached():
    prove(Spec(limit=5, bound=5), "runner_cover", depth=8, mode="cover")


def test_counterexample():
    with pytest.raises(FormalFailure) as failure:
        prove(Spec(limit=9, bound=7), "runner_fails", depth=12, mode="bmc")
    assert "failed assertion: count stays within bound (formal/test_runner.py:" in str(failure.value)
    vcd = str(failure.value).split("counterexample: ")[1].split()[0]
    from vcdvcd import VCDVCD
    trace = VCDVCD(vcd)
    counts = [v for name in trace.references_to_ids if name.endswith("dut.count")
              for _, v in trace[name].tv]
    assert max(int(v, 2) for v in counts) == 8, "the trace shows the count passing the bound"

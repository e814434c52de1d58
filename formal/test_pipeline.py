"""Proofs of the switch pipeline (hdl/pipeline.py) whose stage 3 is Spillway's switch side: its credit ports,
unbounded (the stages are proved on their own, formal/test_<block>.py and formal/spillway/)."""


from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Const, Elaboratable, Module, Value

from formal.props import after_reset
from formal.runner import prove
from formal.spillway.test_switch import credit_invariants, return_path
from hdl.pipeline import Pipeline
from models.pipeline import PipelineParams

DISAGG_PARAMS = PipelineParams.of(
    agg=dict(policy="esa", slots=1, workers=2, values=1), sym=dict(jobs=1, ring=2, table=2),
    spill=dict(ports=2, high=2, low=1, capacity=2, drain_rate=1, drain_window=2, flows=2, depth_bits=2,
               handle_bits=2, buffer=2, mtu=64, return_slots=1), data_bytes=64, counter_bits=4)


class PortsSpec(Elaboratable):
    """The disaggregated pipeline's credit ports, every input free, reset free: after a reset every
    port holds its full credit (``capacity``) and nothing is outstanding (SPEC section 1: the node's
    slots are all free); at every cycle each of the ``ports * capacity`` node slots is either a credit
    or outstanding (``outstanding + sum(credits) == ports * capacity``). k-induction, strengthened by the
    return path's invariants (``formal.spillway.test_switch.return_path``) and every node slot of a port a
    credit or a packet spilled, unasked, asked or held in the return buffer (``credit_invariants``), so no
    credit exceeds ``capacity``."""

    def elaborate(self, platform):
        m = Module()
        p = DISAGG_PARAMS
        m.submodules.dut = dut = Pipeline(p)
        for port in (dut.i.valid, dut.i.payload, dut.cfg.valid, dut.cfg.payload, dut.qdepth, dut.o.ready,
                     dut.spill_o.ready, dut.spill_i.valid, dut.spill_i.payload):
            m.d.comb += port.eq(AnySeq(len(Value.cast(port))))
        P, C = p.spill.ports, p.spill.capacity
        with m.If(after_reset(m)):
            full = Const(1)
            for k in range(P):
                full = full & (dut.credits[k] == C)
            m.d.comb += Assert(full & (dut.outstanding == 0),
                               "after a reset every port has its full credit and nothing is outstanding")
        m.d.comb += Assert(dut.outstanding + sum(dut.credits[k] for k in range(P)) == P * C,
                           "every node slot is a credit or outstanding")
        # strengthening: the return path's invariants, and every node slot a credit or a packet spilled
        switch = dut.spill
        cells = [[switch.ret_mem.read_port(domain="comb") for _ in range(switch.slot_beats)]
                 for _ in range(switch.slots)]
        credit_invariants(m, switch, return_path(m, switch, cells))
        return m


def test_pipeline_disaggregated_ports_prove():
    """The disaggregated pipeline shows the spill stage's credits (full after reset) and outstanding (k-induction)."""
    prove(PortsSpec(), "pipeline_disaggregated_ports", depth=2)

"""Spillway end to end under Verilator (``Spillway``: the switch side, the spill node and a delay line each
way, all RTL), in lockstep with its golden model every cycle (``SpillwayModel``); then counters,
conservation and per-flow order end to end (``testbenches/spillway/traffic.py``)."""
import cocotb
from cocotb.triggers import RisingEdge

from hdl.spillway.top import Spillway
from models.spillway.params import SpillSwitchParams, SpillwayParams
from testbenches import runner, tb
from testbenches.spillway import traffic
from testbenches.spillway.traffic import SpillwayTB


class TB(SpillwayTB):
    """The switch's packets in and out, the egress queues, and back-pressure on both links (``spill_pause``,
    ``node_pause``) one cycle in ``1 / link_pause``."""

    name = "spillway.top"

    def __init__(self, dut, service=4):
        self.switch_params, self.latency = tb.params().switch, tb.params().latency
        self.switch = dut.switch
        super().__init__(dut, service)
        self.switch_model = self.model.switch
        dut.spill_pause.value = dut.node_pause.value = 0
        cocotb.start_soon(self._links())

    async def _links(self):
        while True:
            await RisingEdge(self.dut.clk)
            self.dut.spill_pause.value = int(self.rng.random() < self.link_pause)
            self.dut.node_pause.value = int(self.rng.random() < self.link_pause)

    def node_state(self):
        stored = tb.unpack(self._layout("node_stored"), self.dut.node_stored.value.to_unsigned())
        counters = {k.removeprefix("node_"): v for k, v in self.counters().items() if k.startswith("node_")}
        return stored, counters

    def quiet(self):
        lines = (*self.model.down.line, *self.model.up.line)
        return super().quiet() and not any(lines) and not any(self.model.node.requested)


@cocotb.test()
async def random_traffic(dut):
    """Random flows and sizes, cross traffic, back-pressure on o and both links; the shortest packets spilled."""
    await traffic.random_traffic(TB(dut))


@cocotb.test()
async def node_full(dut):
    """The node fills to its capacity, further spills are dropped by the switch; everything drains."""
    await traffic.node_full(TB(dut))


@cocotb.test()
async def line_rate(dut):
    """Uncongested multi-beat packets back to back: one beat per cycle in and out."""
    await traffic.line_rate(TB(dut, service=1))


@cocotb.test()
async def reset_mid_traffic(dut):
    """A reset with packets everywhere empties both ends and the links; traffic then resumes."""
    await traffic.reset_mid_traffic(TB(dut))


#: ``make sim``'s Spillway (the default suite's ``p3``): 3 ports, 4 credits each, links of 7 cycles.
P3 = SpillwayParams(switch=SpillSwitchParams(ports=3, high=6, low=2, capacity=4, drain_rate=1, drain_window=3,
                                             flows=8, order="flow", mtu=200, buffer=12, return_slots=2,
                                             data_bytes=64, counter_bits=16), latency=7)
PARAMS = {"p3": P3}


@runner.parametrize(__name__, PARAMS)
def test_top(params, testcase, record_property):
    record_property("innet", runner.run(Spillway, params, __name__, testcase))

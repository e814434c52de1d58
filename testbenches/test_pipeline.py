"""The switch pipeline (stage 3 Spillway's switch side) under Verilator, in lockstep with the composed
golden model every cycle; the spill link is closed by the spill node and the links as golden models
(``testbenches/spillway/far_end.py``)."""
import cocotb

from hdl.pipeline import Pipeline
from models.pipeline import PipelineParams
from testbenches import pipeline_traffic, runner
from testbenches.pipeline_traffic import PipelineTB
from testbenches.spillway.far_end import FarEnd

#: Spill link delay, cycles each way.
LATENCY = 6


class TB(PipelineTB):
    """``PipelineTB`` with the far end of the spill link (``FarEnd``)."""

    name = "pipeline"
    EVENTS = ("cmd_takes_stage2", "cmd_waits", "stage3_waits")
    POLICIES = ("esa",)
    RETURNED = "spill_reinjected"
    #: the longest packets of the traffic, beats (its packet store's entries in the in-switch pipeline)
    LONG_BEATS = 2

    def __init__(self, dut, service=3):
        super().__init__(dut, service)
        self.link_pause = 0.0
        self.switch_model = self.model.spill
        self.far = FarEnd(self, self.params.spill, LATENCY)
        self.HELD = 3 * self.LONG_BEATS + self.params.spill.buffer

    async def reset(self):
        await super().reset()
        self.far.reset()

    def idle(self):
        """Nothing inside the pipeline (model), nor on the spill link."""
        spill = self.model.spill
        return (self.model.stage1 is None and self.model.stage2 is None and not spill.verdicts
                and not spill.outstanding() and self.far.quiet())

    @staticmethod
    def stage3_in(c):
        return sum(c[f"spill_{k}"] for k in ("forwarded", "spilled", "spill_overflow", "spill_oversize", "malformed"))

    def check_stage3(self, c):
        outstanding = int(self.dut.outstanding.value)
        self.conserved("packets out", len(self.sink), spill_forwarded=c["spill_forwarded"],
                       spill_reinjected=c["spill_reinjected"])
        self.conserved("spilled", c["spill_spilled"], reinjected=c["spill_reinjected"], outstanding=outstanding)
        assert outstanding == 0, f"{outstanding} spilled packets never came back"
        node = self.far.node.counters()
        assert c["spill_misordered"] == c["spill_return_malformed"] == 0, c
        assert node["overflow"] == node["drain_empty"] == node["malformed"] == 0, node
        assert sum(m["spilled"] for _, m in self.sink.queue) == c["spill_reinjected"]

    def check_full(self):
        """The node's share of the port filled and came back: every credit is home."""
        assert self.far.node.counters()["returned"], self.far.node.counters()
        assert max(self.model.spill.core.credits) == self.params.spill.capacity


@cocotb.test()
async def random_traffic(dut):
    """Mixed traffic with random gaps, cross-traffic bursts and back-pressure on o and the spill link."""
    await pipeline_traffic.random_traffic(TB(dut))


@cocotb.test()
async def stage_outcomes(dut):
    """Every stage outcome the random mix leaves to luck, by construction."""
    await pipeline_traffic.stage_outcomes(TB(dut))


@cocotb.test()
async def line_rate(dut):
    """Single-beat packets back to back, no congestion: one packet per cycle in and out."""
    await pipeline_traffic.line_rate(TB(dut))


@cocotb.test()
async def store_full(dut):
    """A congested port fills the node's share, the credits run out (spill_overflow); all comes back."""
    await pipeline_traffic.store_full(TB(dut))


@cocotb.test()
async def reset_mid_traffic(dut):
    """A reset in the middle of traffic; the pipeline then carries on with fresh traffic."""
    await pipeline_traffic.reset_mid_traffic(TB(dut))


PARAMS = {
    "esa": PipelineParams.of(agg=dict(policy="esa"),
                             spill=dict(ports=2, high=5, low=2, capacity=6, drain_rate=1, drain_window=3, handle_bits=4,
                                        mtu=200, buffer=8, return_slots=2), data_bytes=96),
}


@runner.parametrize(__name__, PARAMS)
def test_pipeline(params, testcase, record_property):
    record_property("innet", runner.run(Pipeline, params, __name__, testcase))

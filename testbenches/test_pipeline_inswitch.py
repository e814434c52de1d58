"""The in-switch baseline of the switch pipeline (stage 3 the in-switch spill buffer and the packet store)
under Verilator, in lockstep with the composed golden model every cycle."""
import cocotb

from hdl.pipeline_inswitch import InSwitchPipeline
from models.pipeline_inswitch import InSwitchPipelineParams
from models.spillway.inswitch import COUNTERS as INSWITCH_COUNTERS
from testbenches import pipeline_traffic, runner
from testbenches.pipeline_traffic import PipelineTB


class TB(PipelineTB):
    """``PipelineTB`` with the packet store's events (a busy entry, an oversize entry skipped)."""

    name = "pipeline_inswitch"
    EVENTS = ("cmd_takes_stage2", "cmd_waits", "stage3_waits", "store_busy", "oversize_skipped")
    POLICIES = ("esa", "switchml")
    RETURNED = "spill_drained"

    def __init__(self, dut, service=3):
        super().__init__(dut, service)
        self.LONG_BEATS = self.params.beats
        self.HELD = 3 * self.params.beats + 32         # packets that fill the stages behind a held output

    def busy(self):
        return self.model.busy[self.model.handle]

    def events(self, before):
        return ["oversize_skipped"] if self.model.counters()["oversize"] > before["oversize"] else []

    def idle(self):
        return not self.model.spill.pending

    @staticmethod
    def stage3_in(c):
        return sum(c[f"spill_{k}"] for k in INSWITCH_COUNTERS if k != "drained")

    def check_stage3(self, c):
        self.conserved("packets out", len(self.sink), spill_forwarded=c["spill_forwarded"],
                       spill_drained=c["spill_drained"], oversize=-c["oversize"])

    def check_full(self):
        """Nothing more than the counters: the store stalled (``store_full``'s assertion)."""


@cocotb.test()
async def random_traffic(dut):
    """Mixed traffic with random gaps, cross-traffic bursts and egress backpressure vs the model."""
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
    """Congested ports fill the spill buffer and the packet store: stage 3 waits, nothing lost."""
    await pipeline_traffic.store_full(TB(dut))


@cocotb.test()
async def reset_mid_traffic(dut):
    """A reset in the middle of traffic; the pipeline then carries on with fresh traffic."""
    await pipeline_traffic.reset_mid_traffic(TB(dut))


PARAMS = {
    "esa": InSwitchPipelineParams.of(agg=dict(policy="esa"),
                                     spill=dict(ports=4, high=6, low=2, capacity=8, handle_bits=5), beats=3),
    "switchml": InSwitchPipelineParams.of(agg=dict(policy="switchml", slots=2),
                                          spill=dict(ports=2, high=5, low=1, capacity=6, drain_rate=2, drain_window=5,
                                                     order="port", handle_bits=3), beats=1, data_bytes=96),
}


@runner.parametrize(__name__, PARAMS)
def test_pipeline_inswitch(params, testcase, record_property):
    record_property("innet", runner.run(InSwitchPipeline, params, __name__, testcase))

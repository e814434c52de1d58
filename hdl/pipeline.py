"""Switch pipeline top: aggregator, progress register file and Spillway's switch side in one datapath."""
from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl import aggregator, progress_regfile
from hdl.aggregator import Aggregator
from hdl.packet import packet_signature
from hdl.progress_regfile import ProgressRegfile
from hdl.spillway.link import link_layout
from hdl.spillway.switch import SpillSwitch
from models.params import check
from models.pipeline import COUNTERS, PipelineParams
from models.spillway.credit import CREDIT_COUNTERS

__all__ = ["Pipeline", "PipelineStages", "OutMeta"]

#: Egress metadata: the port and whether the packet came back from the spill buffer.
OutMeta = data.StructLayout({"port": 8, "spilled": 1})


class PipelineStages(wiring.Component):
    """Stages 1 and 2 of a switch pipeline, and the ports every pipeline has; a pipeline's class adds
    stage 3 (``stage3(p)``), its ports (``ports(p)``) and its counters (``COUNTERS``, under their stage's
    prefix).

    1. ``Aggregator`` (``policy``, ``slots``, ``workers``, ``values``): INA packets are
       aggregated, results/evictions/collisions go to ``ps_port`` (``mcast_port``, default the
       last port, for SwitchML results); every other packet passes unchanged.
    2. ``ProgressRegfile`` (``jobs``, ``ring``, ``table``; its ``cfg`` port is ``cfg``):
       tracked RoCEv2 flows that outpace their ring are ECN-marked; others pass unchanged.

    Each stage parses the headers it acts on from beat 0 of the shared ``data_bytes`` bus and
    passes other packets through, as the stages of a match-action pipeline do. Stage 1 is a register
    stage (latency 1), stage 2 three (latency 3: its tables' registered reads); one beat per cycle end to end.
    """

    PARAMS = None
    COUNTERS = ()

    def __init__(self, params=None):
        p = self.params = check(params, self.PARAMS)
        self.agg, self.sym, self.spill = Aggregator(p.agg), ProgressRegfile(p.sym), self.stage3(p)
        ports, data_bytes, counter_bits = p.spill.ports, p.data_bytes, p.spill.counter_bits
        self.ports, self.data_bytes = ports, data_bytes
        signature = {
            "i": In(packet_signature(data_bytes)),
            "o": Out(packet_signature(data_bytes, OutMeta)),
            "cfg": In(stream.Signature(progress_regfile.config_layout(p.sym.jobs, p.sym.ring, p.sym.step_bits,
                                                                      p.sym.age_bits))),
            "qdepth": In(data.ArrayLayout(p.spill.depth_bits, ports)),
            **self.ports_of(p),
        }
        signature.update({name: Out(counter_bits) for name in self.COUNTERS})
        super().__init__(signature)

    def _stages(self, m):
        """Stages 1 and 2 and their wiring; returns the three stages."""
        m.submodules.agg, m.submodules.sym, m.submodules.spill = agg, sym, spill = (
            self.agg, self.sym, self.spill)
        wiring.connect(m, wiring.flipped(self.i), agg.i)
        wiring.connect(m, agg.o, sym.i)
        wiring.connect(m, wiring.flipped(self.cfg), sym.cfg)
        m.d.comb += spill.qdepth.eq(self.qdepth)
        return agg, sym, spill

    def _counters(self, m, agg, sym, spill_names):
        for block, names, prefix in ((agg, aggregator.COUNTERS, "agg_"),
                                     (sym, progress_regfile.COUNTERS, "sym_"),
                                     (self.spill, spill_names, "spill_")):
            m.d.comb += [getattr(self, prefix + name).eq(getattr(block, name)) for name in names]


class Pipeline(PipelineStages):
    """Ingress packets (``meta.port``: egress port chosen by forwarding) through three stages: the
    aggregator, the progress register file (``PipelineStages``) and, as stage 3, Spillway's switch
    side as the paper describes it (``SpillSwitch``: its ingress FIFO of ``spill.buffer`` beats, the
    credit core, the return buffer), whose ``o`` is the pipeline's ``o``. Spilled packets leave whole
    on ``spill_o`` (spill header, DATA) with the drain requests (DRAIN) and come back on ``spill_i``
    (RETURN, always ready); ``credits`` and ``outstanding`` are the switch side's; the counters are
    ``agg_*``, ``sym_*`` and ``spill_*`` of ``CREDIT_COUNTERS`` (``models.pipeline.COUNTERS``). The
    in-switch baseline is ``InSwitchPipeline``.
    """

    PARAMS = PipelineParams
    COUNTERS = COUNTERS

    @staticmethod
    def stage3(p):
        return SpillSwitch(p.spill)

    @staticmethod
    def ports_of(p):
        link = link_layout(p.data_bytes)
        return {"spill_o": Out(stream.Signature(link)), "spill_i": In(stream.Signature(link)),
                "credits": Out(data.ArrayLayout(range(p.spill.capacity + 1), p.spill.ports)),
                "outstanding": Out(range(p.spill.ports * p.spill.capacity + 1))}

    def elaborate(self, platform):
        m = Module()
        agg, sym, spill = self._stages(m)
        wiring.connect(m, sym.o, spill.i)
        wiring.connect(m, spill.o, wiring.flipped(self.o))
        wiring.connect(m, spill.spill_o, wiring.flipped(self.spill_o))
        wiring.connect(m, wiring.flipped(self.spill_i), spill.spill_i)
        m.d.comb += [self.credits.eq(spill.credits), self.outstanding.eq(spill.outstanding)]
        self._counters(m, agg, sym, CREDIT_COUNTERS)
        return m

"""Golden model of ``hdl.pipeline.Pipeline``: the three block models behind two register stages, stage 3
the switch side of the disaggregated Spillway (``models/pipeline_inswitch.py``: the in-switch baseline)."""
import collections
from dataclasses import dataclass

from models import aggregator, progress_regfile
from models.aggregator import AggregatorModel, AggregatorParams
from models.contract import Packet
from models.packet import beats_of
from models.params import Params, check, param
from models.progress_regfile import ProgressRegfileModel, ProgressRegfileParams
from models.spillway.credit import CREDIT_COUNTERS
from models.spillway.params import SpillSwitchParams
from models.spillway.switch import SpillSwitchModel

__all__ = ["PipelineParams", "PipelineModel", "PipelineStagesModel", "COUNTERS", "STAGE_COUNTERS"]

#: Counter ports of stages 1 and 2, under their prefix.
STAGE_COUNTERS = ([f"agg_{name}" for name in aggregator.COUNTERS]
                  + [f"sym_{name}" for name in progress_regfile.COUNTERS])
#: Counter ports of ``Pipeline``: stage 3's are the credit core's.
COUNTERS = STAGE_COUNTERS + [f"spill_{name}" for name in CREDIT_COUNTERS]


@dataclass(frozen=True, kw_only=True)
class PipelineParams(Params):
    """Parameters of ``Pipeline``: its three stages' own parameter objects.

    The stages share the bus (``data_bytes``) and counter width; the aggregator's PS and multicast
    ports are egress ports of stage 3; the switch side's ingress FIFO is ``spill.buffer`` beats.
    """
    agg: AggregatorParams = param(AggregatorParams(data_bytes=128, mcast_port=3), doc="stage 1")
    sym: ProgressRegfileParams = param(ProgressRegfileParams(data_bytes=128), doc="stage 2")
    spill: SpillSwitchParams = param(SpillSwitchParams(high=12, low=4, capacity=8, handle_bits=6,
                                                       data_bytes=128), doc="stage 3")

    def validate(self):
        widths = {self.agg.data_bytes, self.sym.data_bytes, self.spill.data_bytes}
        if len(widths) != 1:
            self.fail(f"agg, sym and spill data_bytes must be equal, got {self.agg.data_bytes}, "
                      f"{self.sym.data_bytes}, {self.spill.data_bytes}")
        if len({self.agg.counter_bits, self.sym.counter_bits, self.spill.counter_bits}) != 1:
            self.fail("agg, sym and spill counter_bits must be equal")
        for name in ("ps_port", "mcast_port"):
            if getattr(self.agg, name) >= self.spill.ports:
                self.fail(f"agg.{name} = {getattr(self.agg, name)} must be an egress port "
                          f"(< spill.ports = {self.spill.ports})")

    @property
    def data_bytes(self):
        return self.spill.data_bytes

    @classmethod
    def of(cls, *, data_bytes=128, counter_bits=32, agg=None, sym=None, spill=None, **more):
        """Parameters from partial stage settings (dicts over the defaults) sharing ``data_bytes``
        and ``counter_bits``; the multicast port defaults to the last egress port; ``more``: a subclass's
        own fields."""
        default, common = cls(), {"data_bytes": data_bytes, "counter_bits": counter_bits}
        spill = default.spill.replace(**common, **(spill or {}))
        return cls(agg=default.agg.replace(**{"mcast_port": spill.ports - 1, **common, **(agg or {})}),
                   sym=default.sym.replace(**common, **(sym or {})), spill=spill, **more)


class PipelineStagesModel:
    """Stages 1 and 2 of a pipeline's model (``hdl.pipeline.PipelineStages``), cycle-accurate at the ports;
    a pipeline's model adds stage 3 (``stage3(params)``), ``egress`` (one cycle of stage 3 and what
    follows it) and its own counters (``own``).

    The packets come whole with their first beat (``LOOKAHEAD``: stage 1 decides a packet when it takes
    its first beat); ``step(inputs)`` is one clock cycle (``models/contract.py``). Stage 2 is the progress
    file's own cycle model (``ProgressRegfileModel.step``: three register stages, a command taken once
    they drained); its output register is ``stage2``.
    """

    KIND = "cycle"
    LOOKAHEAD = ("i",)
    PARAMS = None

    def __init__(self, params=None):
        p = self.params = check(params, self.PARAMS)
        self.agg = AggregatorModel(p.agg)
        self.sym = ProgressRegfileModel(p.sym)
        self.spill = self.stage3(p)
        self.width = p.data_bytes
        self.reset()

    def reset(self):
        """Reset: empty stages; the Symphony tables keep their contents (SRAM)."""
        self.agg.reset()
        self.sym.reset()
        self.spill.reset()
        self.ingress = collections.deque()      # the beats of the packet on i: (packet, meta, beat)
        self.stage1 = None                      # stage 1's register: (packet, meta, beat) after the stage
        self.packet1 = self.beats1 = None       # the packet stage 1 is in, after the stage; its beats to come

    def counters(self):
        """Every counter port of the RTL with the value it must show."""
        counters = {f"agg_{k}": v for k, v in self.agg.counters().items()}
        counters.update({f"sym_{k}": v for k, v in self.sym.counters().items()})
        counters.update({f"spill_{k}": v for k, v in self.spill.counters().items()})
        counters.update(self.own())
        return counters

    def own(self):
        return {}

    def step(self, inputs):
        if inputs.get("i__packet") is not None and not self.ingress:
            raw, meta = inputs["i__packet"]
            self.ingress.extend((raw, meta, beat) for beat in beats_of(raw, meta, self.width))
        valid, cmd = inputs["i__valid"], inputs["cfg__payload"]
        outputs, enter = self.egress(inputs)
        load1, cfg_ready = self._advance(enter, valid, cmd)
        outputs.update({"i__ready": int(load1) if valid else None,
                        "cfg__ready": int(cfg_ready) if cmd is not None else None})
        return outputs

    @property
    def stage2(self):
        """Stage 2's output register: the progress file's, a beat or None."""
        return self.sym.out

    def _stage1(self, raw, meta, beat):
        """Stage 1 takes an ingress beat: the aggregator decides a packet on its first beat."""
        if beat["first"]:
            outputs = self.agg.process("i", Packet(raw, meta))["o"]
            if len(outputs) == 1 and beat["last"]:
                self.packet1 = outputs[0]
            else:           # passed unchanged beat for beat, or dropped with all its beats
                assert outputs in ([], [(raw, meta)]), "a multi-beat packet is passed or dropped"
                self.packet1 = outputs[0] if outputs else None
            self.beats1 = beats_of(*self.packet1, self.width) if self.packet1 is not None else None
        if self.packet1 is None:
            return None
        return *self.packet1, self.beats1.pop(0)

    def _advance(self, enter, valid, cmd):
        """Stages 1 and 2 at the clock edge; ``enter``: stage 3 takes stage 2's beat. Returns
        ``(load1, cfg_ready)`` (the ready of ``i`` and of ``cfg``)."""
        beat = self.stage1[2] if self.stage1 is not None else None
        sym = self.sym.step({"i__valid": int(beat is not None), "i__payload": beat,
                             "i__packet": Packet(*self.stage1[:2]) if beat is not None and beat["first"] else None,
                             "o__ready": int(enter), "cfg__valid": int(cmd is not None), "cfg__payload": cmd})
        load1 = self.stage1 is None or bool(sym["i__ready"])
        if load1:
            self.stage1 = self._stage1(*self.ingress.popleft()) if valid else None
        return load1, sym["cfg__ready"]


class PipelineModel(PipelineStagesModel):
    """Cycle-accurate model of ``Pipeline``: stages 1 and 2 (``PipelineStagesModel``), and stage 3
    ``SpillSwitchModel``, whose ``o`` is the pipeline's ``o`` and whose spill link is the pipeline's."""

    PARAMS = PipelineParams

    @staticmethod
    def stage3(p):
        return SpillSwitchModel(p.spill)

    def state(self):
        """Summary for failure messages."""
        return (f"stage1 {self.stage1 is not None}, stage2 {self.stage2 is not None}, "
                f"credits {self.spill.core.credits}, verdicts {len(self.spill.verdicts)}, "
                f"outstanding {self.spill.outstanding()}")

    def egress(self, inputs):
        out = self.spill.step({**inputs, "i__valid": int(self.stage2 is not None), "i__payload": self.stage2})
        enter = self.stage2 is not None and out["i__ready"]
        return {name: out[name] for name in ("o__valid", "o__payload", "spill_o__valid", "spill_o__payload",
                                             "spill_i__ready", "credits", "outstanding")}, enter

"""Golden model of ``hdl.pipeline_inswitch.InSwitchPipeline``: stages 1 and 2 (``models/pipeline.py``), the
in-switch spill buffer and the packet store."""
from dataclasses import dataclass

from models.contract import Counters
from models.params import check, param
from models.pipeline import STAGE_COUNTERS, PipelineParams, PipelineStagesModel
from models.spillway.inswitch import COUNTERS as INSWITCH_COUNTERS
from models.spillway.inswitch import InSwitchModel
from models.spillway.params import InSwitchParams

__all__ = ["InSwitchPipelineParams", "InSwitchPipelineModel", "COUNTERS"]

#: Counter ports: each stage's counters under its prefix, then the packet store's own.
COUNTERS = STAGE_COUNTERS + [f"spill_{name}" for name in INSWITCH_COUNTERS] + ["oversize", "store_stalls"]


@dataclass(frozen=True, kw_only=True)
class InSwitchPipelineParams(PipelineParams):
    """Parameters of ``InSwitchPipeline``: the stages' (stage 3 the in-switch spill buffer) and the packet
    store's, ``2**spill.handle_bits`` entries of ``beats`` beats."""
    spill: InSwitchParams = param(InSwitchParams(high=12, low=4, capacity=8, handle_bits=6, data_bytes=128),
                                  doc="stage 3")
    beats: int = param(2, lo=1, hi=64, doc="beats per packet-store entry")

    def validate(self):
        super().validate()
        if self.spill.handle_bits > 16:
            self.fail(f"spill.handle_bits = {self.spill.handle_bits}: the store takes at most 2**16 entries")


class InSwitchPipelineModel(PipelineStagesModel):
    """Cycle-accurate model of ``InSwitchPipeline``: stages 1 and 2 (``PipelineStagesModel``), the
    in-switch spill buffer (``InSwitchModel``) and the packet store in front of the egress."""

    PARAMS = InSwitchPipelineParams

    def __init__(self, params=None):
        p = check(params, InSwitchPipelineParams)
        self.store_counters = Counters(("oversize", "store_stalls"), p.spill.counter_bits, "wrap")
        super().__init__(p)

    @staticmethod
    def stage3(p):
        return InSwitchModel(p.spill)

    def reset(self):
        super().reset()
        p = self.params
        self.entries, self.beats = 1 << p.spill.handle_bits, p.beats
        self.store = [[] for _ in range(self.entries)]
        self.busy, self.long = [False] * self.entries, [False] * self.entries
        self.handle = self.sent = 0
        self.store_counters.clear()

    def own(self):
        return self.store_counters()

    def state(self):
        """Summary for failure messages: stages, handle, busy entries, current descriptor."""
        return (f"stage1 {self.stage1 is not None}, stage2 {self.stage2 is not None}, "
                f"handle {self.handle}, busy {[h for h, b in enumerate(self.busy) if b]}, "
                f"long {[h for h, b in enumerate(self.long) if b]}, descriptor {self.spill.out}, "
                f"sent {self.sent}")

    def egress(self, inputs):
        qdepth, o_ready = inputs["qdepth"], inputs["o__ready"]
        # Egress: the stored beats of the spill buffer's current descriptor.
        desc = self.spill.out
        o_beat, d_ready = None, False
        if desc is not None:
            if self.long[desc["handle"]]:
                d_ready = True
            else:
                stored = self.store[desc["handle"]][self.sent]
                o_beat = dict(stored, first=int(self.sent == 0),
                              meta={"port": desc["port"], "spilled": desc["spilled"]})
                d_ready = o_ready and bool(stored["last"])
        # Stage 3 waits while the next handle's store entry is busy.
        stage2, waiting = self.stage2, self.busy[self.handle]
        offered = stage2 if not waiting else None
        before = self.spill.counters["spill_overflow"] + self.spill.counters["malformed"]
        s_ready, _, _ = self.spill.tick(offered, qdepth, d_ready)
        dropped = self.spill.counters["spill_overflow"] + self.spill.counters["malformed"] > before
        enter = offered is not None and s_ready

        # The clock edge.
        if desc is not None and d_ready:
            self.busy[desc["handle"]] = False
            self.store_counters.add("oversize", self.long[desc["handle"]])
        if o_beat is not None and o_ready:
            self.sent = 0 if o_beat["last"] else self.sent + 1
        if stage2 is not None and waiting:
            self.store_counters.add("store_stalls")
        if enter:
            entry = self.store[self.handle]
            if stage2["first"]:
                entry.clear()
            if len(entry) < self.beats:
                entry.append({k: stage2[k] for k in ("data", "keep", "last")})
            if stage2["last"]:
                self.long[self.handle] = not entry[-1]["last"]
                self.busy[self.handle] = not dropped
                self.handle = (self.handle + 1) % self.entries
        return {"o__valid": int(o_beat is not None), "o__payload": o_beat}, enter

"""Golden model of ``hdl.pipeline.Pipeline``: the three block models behind two register stages.

``spill.mode`` selects stage 3: ``"disaggregated"`` (the default; Spillway's switch side: no packet
store, spilled packets leave on ``spill_o`` for a spill node and come back on ``spill_i``) or
``"inswitch"`` (the baseline: the in-switch spill buffer manager and the packet store)."""
import collections
from dataclasses import dataclass

from models import aggregator, progress_regfile, spill_buffer
from models.aggregator import AggregatorModel, AggregatorParams
from models.packet import beats_of
from models.params import Params, check, param
from models.progress_regfile import ProgressRegfileModel, ProgressRegfileParams
from models.spill_buffer import SpillBufferModel, SpillBufferParams

__all__ = ["PipelineParams", "PipelineModel", "COUNTERS", "DISAGGREGATED_COUNTERS", "counters"]

#: Counter ports (in-switch mode): each stage's counters under its prefix, then the packet store's own.
COUNTERS = ([f"agg_{name}" for name in aggregator.COUNTERS]
            + [f"sym_{name}" for name in progress_regfile.COUNTERS]
            + [f"spill_{name}" for name in spill_buffer.COUNTERS]
            + ["oversize", "store_stalls"])
#: Counter ports in disaggregated mode: stage 3's are the credit core's; there is no packet store.
DISAGGREGATED_COUNTERS = ([f"agg_{name}" for name in aggregator.COUNTERS]
                          + [f"sym_{name}" for name in progress_regfile.COUNTERS]
                          + [f"spill_{name}" for name in spill_buffer.CREDIT_COUNTERS])


def counters(params):
    """The counter port names of ``Pipeline(params)`` (they depend on ``params.spill.mode``)."""
    return DISAGGREGATED_COUNTERS if params.spill.mode == "disaggregated" else COUNTERS


@dataclass(frozen=True, kw_only=True)
class PipelineParams(Params):
    """Parameters of ``Pipeline``: its three stages' own parameter objects and the packet store.

    The stages share the bus (``data_bytes``) and counter width; the aggregator's PS and multicast
    ports are egress ports of the spill buffer; the store has ``2**spill.handle_bits`` entries of
    ``beats`` beats (in-switch mode only: with ``spill.mode="disaggregated"`` there is no store and
    ``beats`` is unused; the switch side's ingress FIFO is ``spill.buffer`` beats).
    """
    agg: AggregatorParams = param(AggregatorParams(data_bytes=128, mcast_port=3), doc="stage 1")
    sym: ProgressRegfileParams = param(ProgressRegfileParams(data_bytes=128), doc="stage 2")
    spill: SpillBufferParams = param(SpillBufferParams(high=12, low=4, capacity=8, handle_bits=6,
                                                       data_bytes=128), doc="stage 3")
    beats: int = param(2, lo=1, hi=64, doc="beats per packet-store entry")

    def validate(self):
        widths = {self.agg.data_bytes, self.sym.data_bytes, self.spill.data_bytes}
        if len(widths) != 1:
            self.fail(f"agg, sym and spill data_bytes must be equal, got {self.agg.data_bytes}, "
                      f"{self.sym.data_bytes}, {self.spill.data_bytes}")
        if len({self.agg.counter_bits, self.sym.counter_bits, self.spill.counter_bits}) != 1:
            self.fail("agg, sym and spill counter_bits must be equal")
        if self.spill.handle_bits > 16:
            self.fail(f"spill.handle_bits = {self.spill.handle_bits}: the store takes at most 2**16 entries")
        for name in ("ps_port", "mcast_port"):
            if getattr(self.agg, name) >= self.spill.ports:
                self.fail(f"agg.{name} = {getattr(self.agg, name)} must be an egress port "
                          f"(< spill.ports = {self.spill.ports})")

    @property
    def data_bytes(self):
        return self.spill.data_bytes

    @classmethod
    def of(cls, *, beats=2, data_bytes=128, counter_bits=32, agg=None, sym=None, spill=None):
        """Parameters from partial stage settings (dicts over the defaults) sharing ``data_bytes``
        and ``counter_bits``; the multicast port defaults to the last egress port."""
        default, common = cls(), {"data_bytes": data_bytes, "counter_bits": counter_bits}
        spill = default.spill.replace(**common, **(spill or {}))
        return cls(agg=default.agg.replace(**{"mcast_port": spill.ports - 1, **common, **(agg or {})}),
                   sym=default.sym.replace(**common, **(sym or {})), spill=spill, beats=beats)


class PipelineModel:
    """Takes the ``PipelineParams`` of ``Pipeline``; cycle-accurate at the ports.

    ``packet(raw, meta)`` announces the next ingress packet (in the order they are sent); stages
    1 and 2 decide a packet when they take its first beat. ``step(valid, qdepth, o_ready, cmd)``
    is one clock cycle (``valid``: the next announced beat is on ``i``; ``cmd``: the command on
    ``cfg``, or None); it returns ``(i_ready, cfg_ready, o_valid, o_beat)`` and advances the state
    as the clock edge does.

    With ``spill.mode="disaggregated"`` stage 3 is ``SpillSwitchModel`` and ``o`` is its ``o``
    directly; ``step`` also takes ``spill_o_ready`` and ``spill_i`` (the beat on the return link, or
    None) and leaves that cycle's ``spill_o`` beat (or None) and ``credits`` in ``self.spill_o`` /
    ``self.credits``.

    Symphony's ageing timer is the number of cycles since reset (``step`` calls): the cycle a beat
    enters stage 2 or a command is taken is passed to the progress file's model.
    """

    def __init__(self, params=None):
        p = self.params = check(params, PipelineParams)
        self.agg = AggregatorModel(p.agg)
        self.sym = ProgressRegfileModel(p.sym)
        self.spill = SpillBufferModel(p.spill)     # a SpillSwitchModel in disaggregated mode
        self.disaggregated = p.spill.mode == "disaggregated"
        self.entries, self.beats, self.width = 1 << p.spill.handle_bits, p.beats, p.data_bytes
        self.reset()

    def reset(self):
        """Reset: empty stages and store; the Symphony tables keep their contents (SRAM)."""
        self.agg.reset()
        self.sym.reset()
        self.spill.reset()
        self.ingress = collections.deque()      # announced ingress beats: (packet, meta, beat)
        self.stage1 = self.stage2 = None        # register stages: (packet, meta, first, last); a beat
        self.packet1 = self.packet2 = None      # the packet each stage is in, after the stage
        self.store = [[] for _ in range(self.entries)]
        self.busy, self.long = [False] * self.entries, [False] * self.entries
        self.handle = self.sent = 0
        self.time = 0                           # cycles since reset: Symphony's ageing timer
        self.counters = {} if self.disaggregated else {"oversize": 0, "store_stalls": 0}
        self.spill_o, self.credits = None, None

    def packet(self, raw, meta):
        raw = bytes(raw)
        self.ingress.extend((raw, meta, beat) for beat in beats_of(raw, meta, self.width))

    def _stage1(self, raw, meta, beat):
        """Stage 1 takes an ingress beat: the aggregator decides a packet on its first beat."""
        if beat["first"]:
            outputs = self.agg.process(raw, meta)
            if len(outputs) == 1 and beat["last"]:
                self.packet1 = outputs[0]
            else:           # passed unchanged beat for beat, or dropped with all its beats
                assert outputs in ([], [(raw, meta)]), "a multi-beat packet is passed or dropped"
                self.packet1 = outputs[0] if outputs else None
        if self.packet1 is None:
            return None
        out, out_meta = self.packet1
        return out, out_meta, beat["first"], beat["last"]

    def _stage2(self, entry):
        """Stage 2 takes a beat of stage 1: Symphony decides a packet on its first beat."""
        raw, meta, first, last = entry
        if first:
            self.packet2 = beats_of(self.sym.packet(raw, self.time), meta, self.width)
        return self.packet2.pop(0)

    def state(self):
        """Summary for failure messages: stages, handle, busy entries, current descriptor."""
        if self.disaggregated:
            return (f"stage1 {self.stage1 is not None}, stage2 {self.stage2 is not None}, "
                    f"credits {self.spill.core.credits}, verdicts {len(self.spill.verdicts)}, "
                    f"outstanding {self.spill.outstanding()}")
        return (f"stage1 {self.stage1 is not None}, stage2 {self.stage2 is not None}, "
                f"handle {self.handle}, busy {[h for h, b in enumerate(self.busy) if b]}, "
                f"long {[h for h, b in enumerate(self.long) if b]}, descriptor {self.spill.out}, "
                f"sent {self.sent}")

    def all_counters(self):
        """Every counter port of the RTL with the value it must show."""
        counters = {f"agg_{k}": v for k, v in self.agg.counters.items()}
        counters.update({f"sym_{k}": v for k, v in self.sym.counters.items()})
        counters.update({f"spill_{k}": v for k, v in self.spill.counters.items()})
        counters.update(self.counters)
        return counters

    def _advance(self, enter, valid, cmd):
        """Stages 1 and 2 at the clock edge; ``enter``: stage 3 takes stage 2's beat. Returns
        ``(load1, load2)`` (the ready of ``i`` and of ``cfg``)."""
        load2 = self.stage2 is None or enter
        take2 = load2 and cmd is None           # a command takes stage 2's cycle
        load1 = self.stage1 is None or take2
        if load2 and cmd is not None:
            self.sym.config(cmd, self.time)
        if load2:
            self.stage2 = None if self.stage1 is None or not take2 else self._stage2(self.stage1)
        if load1:
            self.stage1 = self._stage1(*self.ingress.popleft()) if valid else None
        self.time += 1
        return load1, load2

    def _step_disaggregated(self, valid, qdepth, o_ready, cmd, spill_o_ready, spill_i):
        out = self.spill.step(self.stage2, qdepth, o_ready, spill_o_ready, spill_i)
        self.spill_o, self.credits = out["spill_o"], out["credits"]
        enter = self.stage2 is not None and out["i_ready"]
        load1, load2 = self._advance(enter, valid, cmd)
        return load1, load2, out["o"] is not None, out["o"]

    def step(self, valid, qdepth, o_ready, cmd=None, spill_o_ready=True, spill_i=None):
        if self.disaggregated:
            return self._step_disaggregated(valid, qdepth, o_ready, cmd, spill_o_ready, spill_i)
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
        waiting = self.busy[self.handle]
        offered = self.stage2 if not waiting else None
        before = self.spill.counters["spill_overflow"] + self.spill.counters["malformed"]
        s_ready, _, _ = self.spill.step(offered, qdepth, d_ready)
        dropped = self.spill.counters["spill_overflow"] + self.spill.counters["malformed"] > before
        enter = offered is not None and s_ready

        # The clock edge.
        if desc is not None and d_ready:
            self.busy[desc["handle"]] = False
            self.counters["oversize"] += self.long[desc["handle"]]
        if o_beat is not None and o_ready:
            self.sent = 0 if o_beat["last"] else self.sent + 1
        if self.stage2 is not None and waiting:
            self.counters["store_stalls"] += 1
        if enter:
            entry = self.store[self.handle]
            if self.stage2["first"]:
                entry.clear()
            if len(entry) < self.beats:
                entry.append({k: self.stage2[k] for k in ("data", "keep", "last")})
            if self.stage2["last"]:
                self.long[self.handle] = not entry[-1]["last"]
                self.busy[self.handle] = not dropped
                self.handle = (self.handle + 1) % self.entries
        load1, load2 = self._advance(enter, valid, cmd)
        return load1, load2, o_beat is not None, o_beat

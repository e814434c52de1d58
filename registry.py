"""The block registry: every block innet knows, in one place.

``make verilog``, ``make report``, ``make bench``, the README's block table and the layout tests
read ``BLOCKS``. A block named ``name`` lives in ``hdl/<name>.py`` (the Component),
``models/<name>.py`` (its parameters object and golden model), ``testbenches/test_<name>.py`` and,
with ``formal``, ``formal/test_<name>.py``; ``testbenches/test_layout.py`` checks that these files
exist and that every Component file in ``hdl/`` is registered. See docs/adding-a-block.md.
"""
import importlib
from dataclasses import dataclass, field
from pathlib import Path

from amaranth._unused import MustUse

__all__ = ["Block", "BLOCKS", "ROOT", "block", "names", "variant"]

ROOT = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Block:
    """One registered block."""
    name: str                   #: file stem in hdl/, models/, testbenches/test_, formal/test_
    component: str              #: the Component class in hdl/<name>.py
    params: str                 #: its parameters class in models/<name>.py
    model: str                  #: its golden model class in models/<name>.py
    title: str                  #: what the block is, for tables
    spec: str = ""              #: SPEC.md section
    doc: str = ""               #: its specification page in docs/ (the README's block table links it)
    formal: bool = True         #: has formal/test_<name>.py
    stimulus: str = "roce"      #: line-rate benchmark stimulus (tools/traffic.py)
    bench: dict = field(default_factory=dict)   #: benchmark parameter overrides
    variants: dict = field(default_factory=dict)  #: named parameter overrides also reported by ``make report``
    tests: tuple = ()           #: more testbenches that exercise the block (``make mutants`` runs them too)

    def _load(self, module, name):
        return getattr(importlib.import_module(f"{module}.{self.name}"), name)

    @property
    def component_cls(self):
        return self._load("hdl", self.component)

    @property
    def params_cls(self):
        return self._load("models", self.params)

    @property
    def model_cls(self):
        return self._load("models", self.model)

    def make_params(self, values=None):
        """The parameters object from a (nested) dict of overrides of the defaults."""
        return self.params_cls.from_dict(values or {})

    def build(self, params=None):
        """The Component with ``params`` (default parameters when None)."""
        return self.component_cls(params if params is not None else self.params_cls())

    def interface(self, params=None):
        """The Component with ``params``, built for its ports and shapes only (never elaborated): it and
        the elaboratables it made (submodules, memories) are marked used, so Amaranth does not warn
        that they were created but never used (``UnusedElaboratable``)."""
        component = self.build(params)
        _mark_used(component, set())
        return component

    def files(self):
        """The block's files, relative to the repository root."""
        files = [f"hdl/{self.name}.py", f"models/{self.name}.py", f"testbenches/test_{self.name}.py"]
        return files + ([f"formal/test_{self.name}.py"] if self.formal else [])


def _mark_used(value, seen):
    """Mark every Amaranth elaboratable reachable from ``value`` through attributes, lists and dicts used."""
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, MustUse):
        value._MustUse__used = True
        children = vars(value).values()
    elif isinstance(value, (list, tuple)):
        children = value
    elif isinstance(value, dict):
        children = value.values()
    else:
        return
    for child in children:
        _mark_used(child, seen)


BLOCKS = {b.name: b for b in [
    Block("packet_fifo", "PacketFifo", "PacketFifoParams", "PacketFifoModel",
          "Packet FIFO (elastic buffer; reference DUT of the testbench self-test)", formal=False,
          bench={"data_bytes": 64}, doc="docs/blocks/packet_fifo.md"),
    Block("spill_buffer", "SpillBuffer", "SpillBufferParams", "SpillBufferModel",
          "Spillway spill buffer manager, switch side of a spill node (variant inswitch: "
          "in-switch buffering baseline)", spec="§1", variants={"inswitch": {"mode": "inswitch"}},
          tests=("testbenches/test_spillway.py",), doc="docs/blocks/spillway.md"),
    Block("spill_node", "SpillNode", "SpillNodeParams", "SpillNodeModel",
          "Spillway spill node (disaggregated buffer: per-port FIFOs, drain requests)", spec="§1",
          stimulus="spill", bench={"data_bytes": 128}, doc="docs/blocks/spillway.md"),
    Block("progress_regfile", "ProgressRegfile", "ProgressRegfileParams", "ProgressRegfileModel",
          "Symphony progress register file", spec="§2", doc="docs/blocks/symphony.md"),
    Block("aggregator", "Aggregator", "AggregatorParams", "AggregatorModel",
          "ESA aggregator allocator, ATP/SwitchML baselines", spec="§3", stimulus="ina",
          variants={"atp": {"policy": "atp"}, "switchml": {"policy": "switchml"}}, doc="docs/blocks/esa.md"),
    Block("pipeline", "Pipeline", "PipelineParams", "PipelineModel",
          "Switch pipeline top: aggregator → progress register file → Spillway switch side "
          "(variant inswitch: spill buffer + packet store)",
          stimulus="mixed",
          # the default stage 3 (models.pipeline.PipelineParams.spill) in the in-switch baseline mode
          variants={"inswitch": {"spill": {"high": 12, "low": 4, "capacity": 8, "handle_bits": 6,
                                           "data_bytes": 128, "mode": "inswitch"}}}, doc="docs/blocks/pipeline.md"),
    Block("usid_forwarder", "UsidForwarder", "UsidForwarderParams", "UsidForwarderModel",
          "MRC SRv6 uSID forwarder with ECN ramp and trimming", spec="§5", stimulus="mrc", doc="docs/blocks/mrc.md"),
    Block("ev_selector", "EvSelector", "EvSelectorParams", "EvSelectorModel",
          "MRC EV selector (per QP: active EVs, per-plane backups, probes)", spec="§5", stimulus="ev_requests",
          doc="docs/blocks/mrc.md"),
    Block("ev_expander", "EvExpander", "EvExpanderParams", "EvExpanderModel",
          "MRC EV expander (EV -> SRv6 uSID DA by OCP field expansion)", spec="§5", stimulus="evs",
          doc="docs/blocks/mrc.md"),
    Block("chunk_bitmap", "ChunkBitmap", "ChunkBitmapParams", "ChunkBitmapModel",
          "SDR-RDMA chunk-bitmap tracker with generations", spec="§6", stimulus="sdr", doc="docs/blocks/sdr.md"),
    Block("bounded_loss_tracker", "BoundedLossTracker", "BoundedLossTrackerParams", "BoundedLossTrackerModel",
          "DBLP bounded-loss round tracker (innet's receiver-side reading of DBLP)", spec="§4",
          stimulus="dblp", doc="docs/blocks/dblp.md"),
]}


def names():
    """Registered block names, in registry order."""
    return list(BLOCKS)


def block(name):
    """The registered block ``name``; ``KeyError`` naming the known blocks otherwise."""
    try:
        return BLOCKS[name]
    except KeyError:
        raise KeyError(f"unknown block {name!r}; known: {', '.join(BLOCKS)}") from None


def variant(label):
    """``(block, params overrides, file stem)`` of ``"name"`` (defaults) or ``"name[variant]"`` (a registry
    variant); ``KeyError`` naming the known blocks or variants otherwise."""
    name, _, rest = label.partition("[")
    b = block(name)
    if not rest:
        return b, {}, name
    key = rest.removesuffix("]")
    if not rest.endswith("]") or key not in b.variants:
        raise KeyError(f"unknown variant {label!r}; known: {', '.join(b.variants) or 'none'}")
    return b, b.variants[key], f"{name}.{key}"

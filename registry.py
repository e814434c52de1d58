"""The block registry: every block innet knows, in one place.

``make verilog``, ``make report``, ``make bench``, the README's block table and the layout tests
read ``BLOCKS``. A block named ``name`` lives in ``hdl/<name>.py`` (the Component),
``models/<name>.py`` (its parameters object and golden model), ``testbenches/test_<name>.py`` and,
with ``formal``, ``formal/test_<name>.py``; ``testbenches/test_layout.py`` checks that these files
exist and that every Component file in ``hdl/`` is registered. See "Adding a block" in the README.
"""
import importlib
from dataclasses import dataclass, field
from pathlib import Path

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

    def files(self):
        """The block's files, relative to the repository root."""
        files = [f"hdl/{self.name}.py", f"models/{self.name}.py", f"testbenches/test_{self.name}.py"]
        return files + ([f"formal/test_{self.name}.py"] if self.formal else [])


BLOCKS = {b.name: b for b in [
    Block("packet_fifo", "PacketFifo", "PacketFifoParams", "PacketFifoModel",
          "Packet FIFO (elastic buffer; reference DUT of the testbench self-test)", formal=False,
          bench={"data_bytes": 64}),
    Block("spill_buffer", "SpillBuffer", "SpillBufferParams", "SpillBufferModel",
          "Spillway spill buffer manager, switch side of a spill node (variant inswitch: "
          "in-switch buffering baseline)", spec="§1", variants={"inswitch": {"mode": "inswitch"}},
          tests=("testbenches/test_spillway.py",)),
    Block("spill_node", "SpillNode", "SpillNodeParams", "SpillNodeModel",
          "Spillway spill node (disaggregated buffer: per-port FIFOs, drain requests)", spec="§1",
          stimulus="spill", bench={"data_bytes": 128}),
    Block("progress_regfile", "ProgressRegfile", "ProgressRegfileParams", "ProgressRegfileModel",
          "Symphony progress register file", spec="§2"),
    Block("aggregator", "Aggregator", "AggregatorParams", "AggregatorModel",
          "ESA aggregator allocator, ATP/SwitchML baselines", spec="§3", stimulus="ina",
          variants={"atp": {"policy": "atp"}, "switchml": {"policy": "switchml"}}),
    Block("pipeline", "Pipeline", "PipelineParams", "PipelineModel",
          "Switch pipeline top: aggregator → progress register file → Spillway switch side "
          "(variant inswitch: spill buffer + packet store)",
          stimulus="mixed",
          # the default stage 3 (models.pipeline.PipelineParams.spill) in the in-switch baseline mode
          variants={"inswitch": {"spill": {"high": 12, "low": 4, "capacity": 8, "handle_bits": 6,
                                           "data_bytes": 128, "mode": "inswitch"}}}),
    Block("usid_forwarder", "UsidForwarder", "UsidForwarderParams", "UsidForwarderModel",
          "MRC SRv6 uSID forwarder with ECN ramp and trimming", spec="§5", stimulus="mrc"),
    Block("ev_selector", "EvSelector", "EvSelectorParams", "EvSelectorModel",
          "MRC EV selector (per QP: active EVs, per-plane backups, probes)", spec="§5", stimulus="ev_requests"),
    Block("ev_expander", "EvExpander", "EvExpanderParams", "EvExpanderModel",
          "MRC EV expander (OCP MRC 1.0 EV profiles: STEV, SRv6 DA + SRH)", spec="§5", stimulus="evs"),
    Block("chunk_bitmap", "ChunkBitmap", "ChunkBitmapParams", "ChunkBitmapModel",
          "SDR-RDMA chunk-bitmap tracker with generations", spec="§6", stimulus="sdr"),
    Block("bounded_loss_tracker", "BoundedLossTracker", "BoundedLossTrackerParams", "BoundedLossTrackerModel",
          "DBLP bounded-loss round tracker (innet's receiver-side reading of DBLP)", spec="§4",
          stimulus="dblp"),
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

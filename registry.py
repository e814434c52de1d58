"""The block registry: every block innet knows, in one place, as the classes themselves.

Every service reads ``BLOCKS`` and nothing else: the lockstep testbenches, the soak, the checked bench,
coverage, mutation, ``make verilog``, ``make report`` and the README's block table. A block has one
name everywhere: its registry key is its module path under ``hdl/`` (``chunk_bitmap``; a family's member
``spillway.node`` lives in ``hdl/spillway/node.py``), and the same path names its golden model
(``models/``), its testbench (``testbenches/<path>/test_<stem>.py``) and its proofs
(``formal/<path>/test_<stem>.py``). ``testbenches/test_layout.py`` checks all of it. See
``docs/adding-a-block.md``.
"""
import inspect
from dataclasses import dataclass, field
from pathlib import Path

from amaranth._unused import MustUse

from hdl.aggregator import Aggregator
from hdl.bounded_loss_tracker import BoundedLossTracker
from hdl.chunk_bitmap import ChunkBitmap
from hdl.ev_expander import EvExpander
from hdl.ev_selector import EvSelector
from hdl.packet_fifo import PacketFifo
from hdl.pipeline import Pipeline
from hdl.pipeline_inswitch import InSwitchPipeline
from hdl.progress_regfile import ProgressRegfile
from hdl.spillway.inswitch import InSwitchSpillBuffer
from hdl.spillway.link import DelayLine
from hdl.spillway.node import SpillNode
from hdl.spillway.switch import SpillSwitch
from hdl.spillway.top import Spillway
from hdl.usid_forwarder import UsidForwarder
from models.aggregator import AggregatorModel, AggregatorParams
from models.bounded_loss_tracker import COUNTERS as BLT_COUNTERS
from models.bounded_loss_tracker import BoundedLossTrackerModel, BoundedLossTrackerParams
from models.chunk_bitmap import ChunkBitmapModel, ChunkBitmapParams
from models.ev_expander import EvExpanderModel, EvExpanderParams
from models.ev_selector import COUNTERS as EV_SELECTOR_COUNTERS
from models.ev_selector import EvSelectorModel, EvSelectorParams
from models.packet_fifo import PacketFifoModel, PacketFifoParams
from models.pipeline import PipelineModel, PipelineParams
from models.pipeline_inswitch import InSwitchPipelineModel, InSwitchPipelineParams
from models.progress_regfile import ProgressRegfileModel, ProgressRegfileParams
from models.spillway.credit import CREDIT_COUNTERS
from models.spillway.inswitch import InSwitchModel
from models.spillway.link import DelayLineModel
from models.spillway.node import COUNTERS as NODE_COUNTERS
from models.spillway.node import SpillNodeModel
from models.spillway.params import InSwitchParams, LinkParams, SpillNodeParams, SpillSwitchParams, SpillwayParams
from models.spillway.switch import SpillSwitchModel
from models.spillway.top import SpillwayModel
from models.usid_forwarder import UsidForwarderModel, UsidForwarderParams
from testbenches import soak_traffic
from testbenches.soak_traffic import AGEING, EV_PHASE

__all__ = ["Block", "BLOCKS", "ROOT", "block", "names", "variant"]

ROOT = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Block:
    """One registered block: its Component, parameters and golden model classes, and what the
    services need to know of it."""
    name: str                   #: module path under hdl/ (and models/, testbenches/, formal/)
    component: type             #: the Component class; ``component(params)`` builds it
    params: type                #: its parameters class (``models.params.Params``)
    model: type                 #: its golden model class (``models/contract.py``); ``model(params)``
    title: str                  #: what the block is, for tables
    doc: str = ""               #: its specification page (the README's block table links it)
    formal: bool = True         #: has proofs
    stimulus: str = "roce"      #: line-rate traffic (tools/traffic.py) for the bench, the soak and mutants
    bench: dict = field(default_factory=dict)   #: benchmark (and soak) parameter overrides
    soak: dict = field(default_factory=dict)    #: further soak overrides (what the soak must reach)
    variants: dict = field(default_factory=dict)  #: named parameter overrides also reported by ``make report``
    tests: tuple = ()           #: more testbenches that exercise the block (``make mutants`` runs them too)
    parts: tuple = ()           #: its design's other hdl/ modules, not blocks (``make mutants`` mutates them too)
    traffic: object = None      #: configured soak traffic ``(component, rng) -> generate(count)``
    #: (testbenches/soak_traffic.py; None: the ``stimulus`` pool) and the counters it must reach:
    reached: dict = field(default_factory=dict)   #: counter -> the packets a run needs to reach it

    def must_reach(self, packets):
        """The counters a soak of ``packets`` packets must end with above 0."""
        return [name for name, needs in self.reached.items() if packets >= needs]

    def make_params(self, values=None):
        """The parameters object from a (nested) dict of overrides of the defaults."""
        return self.params.from_dict(values or {})

    def build(self, params=None):
        """The Component with ``params`` (default parameters when None)."""
        return self.component(params if params is not None else self.params())

    def interface(self, params=None):
        """The Component with ``params``, built for its ports and shapes only (never elaborated): it and
        the elaboratables it made (submodules, memories) are marked used, so Amaranth does not warn
        that they were created but never used (``UnusedElaboratable``)."""
        component = self.build(params)
        _mark_used(component, set())
        return component

    @property
    def path(self):
        """The block's path: ``spillway/node`` for ``spillway.node``."""
        return self.name.replace(".", "/")

    def testbench(self):
        """Its testbench, relative to the repository root."""
        head, _, stem = self.path.rpartition("/")
        return f"testbenches/{head + '/' if head else ''}test_{stem}.py"

    def proofs(self):
        """Its proofs, relative to the repository root (None without ``formal``)."""
        return self.testbench().replace("testbenches/", "formal/", 1) if self.formal else None

    def sources(self):
        """Its RTL sources, relative to the repository root: the Component's module and its ``parts``."""
        return [self.files()[0], *self.parts]

    def files(self):
        """The block's files, relative to the repository root."""
        sources = [Path(inspect.getsourcefile(cls)).relative_to(ROOT).as_posix()
                   for cls in (self.component, self.model)]
        return sources + [self.testbench()] + ([self.proofs()] if self.formal else [])


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
    Block("packet_fifo", PacketFifo, PacketFifoParams, PacketFifoModel,
          "Packet FIFO (elastic buffer; reference DUT of the testbench self-test)", formal=False,
          bench={"data_bytes": 64}, doc="docs/blocks/packet_fifo.md"),
    Block("spillway.top", Spillway, SpillwayParams, SpillwayModel,
          "Spillway as the paper describes it: switch side, spill node and the spill link each way",
          doc="docs/blocks/spillway.md"),
    Block("spillway.switch", SpillSwitch, SpillSwitchParams, SpillSwitchModel,
          "Spillway switch side (spills whole packets to a spill node, drains them back by credit)",
          doc="docs/blocks/spillway.md", tests=("testbenches/spillway/test_top.py",),
          parts=("hdl/spillway/credit.py", "hdl/spillway/arrival.py"), traffic=soak_traffic.spill_switch,
          # by chance (the queue depths' random walk decides spills and drains), within 3000 packets under 12 seeds
          reached=dict.fromkeys(CREDIT_COUNTERS, 3000)),
    Block("spillway.node", SpillNode, SpillNodeParams, SpillNodeModel,
          "Spillway spill node (disaggregated buffer: per-port FIFOs, drain requests)",
          doc="docs/blocks/spillway.md",
          stimulus="spill", bench={"data_bytes": 128}, tests=("testbenches/spillway/test_top.py",),
          # the opening phase fills the node (overflow); the rest by chance, within 2000 packets under 12 seeds
          traffic=soak_traffic.spill_node, reached=dict.fromkeys(NODE_COUNTERS, 2000)),
    Block("spillway.link", DelayLine, LinkParams, DelayLineModel,
          "Spillway spill link, one direction (a delay line of spill frames)", doc="docs/blocks/spillway.md",
          stimulus="spill", bench={"data_bytes": 128},
          tests=("testbenches/spillway/test_switch.py", "testbenches/spillway/test_top.py")),
    Block("spillway.inswitch", InSwitchSpillBuffer, InSwitchParams, InSwitchModel,
          "Spillway's in-switch buffering baseline (spilled handles wait in the switch)",
          doc="docs/blocks/spillway.md", parts=("hdl/spillway/spill_core.py",)),
    Block("progress_regfile", ProgressRegfile, ProgressRegfileParams, ProgressRegfileModel,
          "Symphony progress register file", doc="docs/blocks/symphony.md",
          # epochs of 16 cycles (ageing decided all the time, many at an epoch's edge: a timer one cycle
          # off shows) and 8-bit epochs (the timer wraps every 4096 cycles)
          soak={"epoch_bits": 4, "age_bits": 8}, traffic=soak_traffic.progress_regfile,
          # the opening's strays, malformed packet and ageing probe (AGEING packets after the clear) are decided
          # two packets after each went in (latency 3); the rest earlier in the opening
          reached={"unknown": AGEING + 7, "malformed": AGEING + 8, "tracked": 0, "marked": 0, "not_ect": 0,
                   "aged": AGEING + 9}),
    Block("aggregator", Aggregator, AggregatorParams, AggregatorModel,
          "ESA aggregator allocator, ATP/SwitchML baselines", doc="docs/blocks/esa.md", stimulus="ina",
          variants={"atp": {"policy": "atp"}, "switchml": {"policy": "switchml"}}, traffic=soak_traffic.aggregator,
          # junk by construction in the first episode; the rest by chance, within 100 packets under 12 seeds
          reached=dict.fromkeys(("passed", "malformed", "bad_header", "consumed", "completed", "duplicate", "collision",
                                 "forwarded", "flushed", "preempted", "ack_freed", "ack_passed"), 400)),
    Block("pipeline", Pipeline, PipelineParams, PipelineModel,
          "Switch pipeline: aggregator → progress register file → Spillway switch side", doc="docs/blocks/pipeline.md",
          stimulus="mixed"),
    Block("pipeline_inswitch", InSwitchPipeline, InSwitchPipelineParams, InSwitchPipelineModel,
          "Switch pipeline, in-switch baseline: aggregator → progress register file → in-switch spill buffer "
          "and packet store", doc="docs/blocks/pipeline.md", stimulus="mixed", traffic=soak_traffic.pipeline_inswitch,
          # the line-rate traffic's counters and the long packets' oversize, by chance within 2000 packets
          reached=dict.fromkeys(("agg_passed", "agg_consumed", "agg_completed", "agg_ack_passed", "sym_unknown",
                                 "spill_forwarded", "spill_spilled", "spill_drained", "spill_spill_overflow",
                                 "oversize", "store_stalls"), 2000)),
    Block("usid_forwarder", UsidForwarder, UsidForwarderParams, UsidForwarderModel,
          "MRC SRv6 uSID forwarder with ECN ramp and trimming", doc="docs/blocks/mrc.md", stimulus="mrc",
          soak={"last_hop": 0xC0},      # last-hop ports (no ECN mark, dscp_trim_last) in the soak
          traffic=soak_traffic.usid_forwarder,
          reached=dict.fromkeys(("forwarded", "trimmed", "trim_forwarded", "malformed", "bad_next_header", "hop_limit",
                                 "no_route", "data_overflow", "trim_overflow", "decapsulated", "ce_marked"), 0)),
    Block("ev_selector", EvSelector, EvSelectorParams, EvSelectorModel,
          "MRC EV selector (per QP: active EVs, per-plane backups, probes)", doc="docs/blocks/mrc.md",
          stimulus="ev_requests", traffic=soak_traffic.ev_selector, reached=dict.fromkeys(EV_SELECTOR_COUNTERS, 2000)),
    Block("ev_expander", EvExpander, EvExpanderParams, EvExpanderModel,
          "MRC EV expander (OCP MRC 1.0 EV profiles: STEV, SRv6 DA + SRH)", doc="docs/blocks/mrc.md", stimulus="evs",
          traffic=soak_traffic.ev_expander,
          # a refused profile comes with the second profile, EV_PHASE requests after the first
          reached={"expanded": 0, "bad_ev": 0, "configured": 0, "refused": EV_PHASE + 1}),
    Block("chunk_bitmap", ChunkBitmap, ChunkBitmapParams, ChunkBitmapModel,
          "SDR-RDMA chunk-bitmap tracker with generations", doc="docs/blocks/sdr.md", stimulus="sdr",
          # 9 offset bits: a slot (8 words of 64 bits) holds 2**9 one-packet chunks, so the soak's messages reach
          # the top offset and n_pkts = 2**offset_bits (the full width of the chunk and word arithmetic)
          soak={"user_bits": 13}, traffic=soak_traffic.chunk_bitmap,
          reached=dict.fromkeys(("placed", "malformed", "no_slot", "gen_mismatch", "offset_oob", "dup", "chunk_done",
                                 "msg_done", "posts", "completes", "cmd_rejected"), 0)),
    Block("bounded_loss_tracker", BoundedLossTracker, BoundedLossTrackerParams, BoundedLossTrackerModel,
          "DBLP bounded-loss round tracker (innet's receiver-side reading of DBLP)", doc="docs/blocks/dblp.md",
          stimulus="dblp", traffic=soak_traffic.bounded_loss_tracker,
          reached=dict.fromkeys(BLT_COUNTERS, 3000)),
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

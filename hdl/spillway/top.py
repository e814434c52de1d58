"""Spillway as one design (SPEC section 1): the switch side, the spill node and the spill link each way."""
from amaranth.hdl import Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.spillway.link import DelayLine
from hdl.spillway.node import SpillNode
from hdl.spillway.switch import SpillSwitch
from models.params import check
from models.spillway.credit import CREDIT_COUNTERS
from models.spillway.node import COUNTERS as NODE_COUNTERS
from models.spillway.params import SpillwayParams

__all__ = ["Spillway"]


class Spillway(wiring.Component):
    """``SpillSwitch`` and ``SpillNode`` joined by two ``DelayLine``s of ``latency`` cycles: the disaggregated
    Spillway end to end. Ports: the switch side's ``i``, ``o``, ``qdepth``, ``credits``, ``outstanding`` and
    counters; ``spill_pause`` and ``node_pause`` (the switch's and the node's link output held: back-pressure
    on the links); the node's ``stored`` as ``node_stored`` and its counters as ``node_<name>``. Submodules
    ``switch``, ``node``, ``down`` (switch to node) and ``up`` (node to switch)."""

    def __init__(self, params=None):
        p = self.params = check(params, SpillwayParams)
        self.switch, self.node = SpillSwitch(p.switch), SpillNode(p.node)
        self.down, self.up = DelayLine(p.link), DelayLine(p.link)
        keep = ("i", "o", "qdepth", "credits", "outstanding", *CREDIT_COUNTERS)
        signature = {name: self.switch.signature.members[name] for name in keep}
        signature.update({"spill_pause": In(1), "node_pause": In(1),
                          "node_stored": Out(data.ArrayLayout(range(p.switch.capacity + 1), p.switch.ports))})
        signature.update({f"node_{name}": Out(p.switch.counter_bits) for name in NODE_COUNTERS})
        super().__init__(signature)

    def elaborate(self, platform):
        m = Module()
        m.submodules.switch, m.submodules.node = switch, node = self.switch, self.node
        m.submodules.down, m.submodules.up = down, up = self.down, self.up
        wiring.connect(m, wiring.flipped(self.i), switch.i)
        wiring.connect(m, switch.o, wiring.flipped(self.o))
        wiring.connect(m, switch.spill_o, down.i)
        wiring.connect(m, down.o, node.i)
        wiring.connect(m, node.o, up.i)
        wiring.connect(m, up.o, switch.spill_i)
        m.d.comb += [switch.qdepth.eq(self.qdepth), down.pause.eq(self.spill_pause), up.pause.eq(self.node_pause),
                     self.credits.eq(switch.credits), self.outstanding.eq(switch.outstanding),
                     self.node_stored.eq(node.stored)]
        m.d.comb += [getattr(self, name).eq(getattr(switch, name)) for name in CREDIT_COUNTERS]
        m.d.comb += [getattr(self, f"node_{name}").eq(getattr(node, name)) for name in NODE_COUNTERS]
        return m

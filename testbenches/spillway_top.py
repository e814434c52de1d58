"""Testbench wrapper (not a registered block): the disaggregated Spillway's switch side and spill node
side by side, their spill-link ports exposed unconnected so that the cocotb test closes the links
through Python delay lines (latency changes need no rebuild)."""
from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.packet import packet_signature
from hdl.spill_buffer import CREDIT_COUNTERS, SpillBuffer, SpillBufferParams
from hdl.spill_node import COUNTERS as NODE_COUNTERS
from hdl.spill_node import SpillNode, SpillNodeParams, link_layout

__all__ = ["SpillwayTop", "LinkLoop", "switch_params", "node_params", "P3"]

#: The wrapper's parameters in the default suite (``testbenches/test_spillway.py`` config ``p3``); the
#: Spillway scenario replays one of its points on the same build. ``latency`` is the test's link delay.
P3 = dict(latency=7, ports=3, high=6, low=2, capacity=4, drain_rate=1, drain_window=3, flows=8, order="flow",
          mtu=200, buffer=12, return_slots=2, data_bytes=64, counter_bits=16)


def switch_params(values):
    """The switch side's ``SpillBufferParams`` (disaggregated) from the wrapper's keyword arguments."""
    return SpillBufferParams(**{k: v for k, v in values.items() if k != "latency"}, mode="disaggregated")


def node_params(switch):
    """The spill node's parameters, taken from the switch's so that both ends agree."""
    return SpillNodeParams(ports=switch.ports, capacity=switch.capacity, mtu=switch.mtu,
                           data_bytes=switch.data_bytes, counter_bits=switch.counter_bits)


class SpillwayTop(wiring.Component):
    """Switch ports ``i``, ``o``, ``qdepth``, ``spill_o``, ``spill_i``, ``credits``, ``outstanding`` and the
    credit core's counters; node ports ``node_i``, ``node_o``, ``node_stored`` and ``node_<counter>``.
    ``latency`` (the test's link delay) does not change the hardware."""

    def __init__(self, latency=0, **values):
        self.switch = SpillBuffer(switch_params(values))
        self.node = SpillNode(node_params(self.switch.params))
        p, link = self.switch.params, link_layout(self.switch.params.data_bytes)
        signature = {
            "i": In(packet_signature(p.data_bytes)),
            "o": Out(packet_signature(p.data_bytes, self.switch.out_meta)),
            "qdepth": In(data.ArrayLayout(p.depth_bits, p.ports)),
            "spill_o": Out(stream.Signature(link)), "spill_i": In(stream.Signature(link)),
            "node_i": In(stream.Signature(link)), "node_o": Out(stream.Signature(link)),
            "credits": Out(data.ArrayLayout(range(p.capacity + 1), p.ports)),
            "outstanding": Out(range(p.ports * p.capacity + 1)),
            "node_stored": Out(data.ArrayLayout(range(p.capacity + 1), p.ports)),
        }
        signature.update({name: Out(p.counter_bits) for name in CREDIT_COUNTERS})
        signature.update({f"node_{name}": Out(p.counter_bits) for name in NODE_COUNTERS})
        super().__init__(signature)

    def elaborate(self, platform):
        m = Module()
        m.submodules.switch = sw = self.switch
        m.submodules.node = node = self.node
        for name in ("i", "spill_i"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(sw, name))
        for name in ("o", "spill_o"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(sw, name))
        wiring.connect(m, wiring.flipped(self.node_i), node.i)
        wiring.connect(m, wiring.flipped(self.node_o), node.o)
        m.d.comb += [sw.qdepth.eq(self.qdepth), self.credits.eq(sw.credits), self.outstanding.eq(sw.outstanding),
                     self.node_stored.eq(node.stored)]
        m.d.comb += [getattr(self, name).eq(getattr(sw, name)) for name in CREDIT_COUNTERS]
        m.d.comb += [getattr(self, f"node_{name}").eq(getattr(node, name)) for name in NODE_COUNTERS]
        return m


class LinkLoop(wiring.Component):
    """A switch side in disaggregated mode (``inner``: the spill buffer or the pipeline) with a spill
    node, the two spill links closed in hardware, for the checked engine (no Python per cycle): each
    link a delay line of ``latency`` cycles (a frame sent in cycle c arrives in cycle c + latency, as
    test_spillway's Python lines; the far end always takes it). Ports: ``inner``'s but its spill
    links, ``spill_pause`` and ``node_pause`` (the switch's and the node's link output held:
    back-pressure on the links), ``node_stored`` and the node's counters as ``node_<name>``."""

    def __init__(self, inner, spill_params, latency):
        if not isinstance(latency, int) or isinstance(latency, bool) or latency < 1:
            raise ValueError(f"{type(self).__name__}.latency: an int >= 1, got {latency!r}")
        self.inner, self.latency = inner, latency
        self.node = SpillNode(node_params(spill_params))
        self.data_bytes = spill_params.data_bytes
        signature = {name: member for name, member in inner.signature.members.items()
                     if name not in ("spill_o", "spill_i")}
        signature.update({"spill_pause": In(1), "node_pause": In(1),
                          "node_stored": Out(data.ArrayLayout(range(spill_params.capacity + 1), spill_params.ports))})
        signature.update({f"node_{name}": Out(spill_params.counter_bits) for name in NODE_COUNTERS})
        super().__init__(signature)

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = self.inner
        m.submodules.node = node = self.node
        for name, member in inner.signature.members.items():
            if name in ("spill_o", "spill_i"):
                continue
            if member.is_signature:
                if member.flow == In:
                    wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(inner, name))
                else:
                    wiring.connect(m, getattr(inner, name), wiring.flipped(getattr(self, name)))
            elif member.flow == In:
                m.d.comb += getattr(inner, name).eq(getattr(self, name))
            else:
                m.d.comb += getattr(self, name).eq(getattr(inner, name))
        link = link_layout(self.data_bytes)
        for name, src, dst, pause in (("down", inner.spill_o, node.i, self.spill_pause),
                                      ("up", node.o, inner.spill_i, self.node_pause)):
            valid = [Signal(name=f"{name}_valid_{k}") for k in range(self.latency)]
            payload = [Signal(link, name=f"{name}_payload_{k}") for k in range(self.latency)]
            m.d.comb += src.ready.eq(~pause)
            m.d.sync += [valid[0].eq(src.valid & src.ready), payload[0].eq(src.payload)]
            m.d.sync += [v.eq(w) for v, w in zip(valid[1:], valid)] + [q.eq(r) for q, r in zip(payload[1:], payload)]
            m.d.comb += [dst.valid.eq(valid[-1]), dst.payload.eq(payload[-1])]
        m.d.comb += self.node_stored.eq(node.stored)
        m.d.comb += [getattr(self, f"node_{name}").eq(getattr(node, name)) for name in NODE_COUNTERS]
        return m

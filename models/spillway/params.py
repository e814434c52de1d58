"""Parameters of the Spillway family: one class per design, the switch sides sharing ``SpillParams``."""
from dataclasses import dataclass

from models import wire
from models.params import Params, param
from models.spillway.arrival import MIN_LENGTH

__all__ = ["SpillParams", "InSwitchParams", "SpillSwitchParams", "SpillNodeParams", "LinkParams", "SpillwayParams"]


@dataclass(frozen=True, kw_only=True)
class SpillParams(Params):
    """What both switch sides (in-switch baseline and disaggregated) take."""
    ports: int = param(4, lo=2, hi=256, doc="egress ports")
    high: int = param(24, lo=1, doc="high watermark: spill at queue depth >= high")
    low: int = param(8, lo=0, doc="low watermark: drain at queue depth <= low")
    capacity: int = param(16, lo=1, hi=1 << 16, doc="spilled packets held per port")
    drain_rate: int = param(1, lo=1, doc="drains per window at most")
    drain_window: int = param(2, lo=1, hi=1 << 16, doc="drain window, cycles")
    flows: int = param(16, lo=2, hi=1 << 12, pow2=True, doc="flow-table entries")
    order: str = param("flow", choices=("flow", "port"), doc="spill while the flow (or port) has spilled packets")
    depth_bits: int = param(16, lo=1, hi=32, doc="width of each qdepth input")
    handle_bits: int = param(16, lo=1, hi=32, doc="packet handle width (handles wrap)")
    data_bytes: int = param(64, lo=MIN_LENGTH, hi=1024, doc="bus width, bytes")
    counter_bits: int = param(32, lo=1, hi=64, doc="counter width")

    def validate(self):
        if not self.low < self.high:
            self.fail(f"low = {self.low} must be below high = {self.high}")
        if self.high >= 1 << self.depth_bits:
            self.fail(f"high = {self.high} must fit depth_bits = {self.depth_bits}")
        if self.drain_rate > self.drain_window:
            self.fail(f"drain_rate = {self.drain_rate} must be <= drain_window = {self.drain_window}")


@dataclass(frozen=True, kw_only=True)
class InSwitchParams(SpillParams):
    """Parameters of ``InSwitchSpillBuffer`` (the baseline): ``capacity`` handles per port's spill FIFO."""


@dataclass(frozen=True, kw_only=True)
class SpillSwitchParams(SpillParams):
    """Parameters of ``SpillSwitch`` (the disaggregated switch side): ``capacity`` is the credits per port
    for the spill node."""
    mtu: int = param(512, lo=MIN_LENGTH, hi=9216, doc="largest spillable packet, bytes (node slot)")
    return_slots: int = param(2, lo=1, hi=64, doc="returned packets the switch can hold")
    buffer: int = param(32, lo=1, hi=1 << 12, doc="ingress FIFO, beats")

    @property
    def node(self):
        """The spill node's parameters, taken from the switch's so that both ends agree."""
        return SpillNodeParams(ports=self.ports, capacity=self.capacity, mtu=self.mtu, data_bytes=self.data_bytes,
                               counter_bits=self.counter_bits)


@dataclass(frozen=True, kw_only=True)
class SpillNodeParams(Params):
    """Parameters of ``SpillNode`` and its model (the switch's testbench derives them from its own)."""
    ports: int = param(4, lo=1, hi=256, doc="origin egress ports (one FIFO each)")
    capacity: int = param(16, lo=1, hi=1 << 12, doc="stored packets per origin port (the switch's credits)")
    mtu: int = param(512, lo=wire.UDP_HEADER_END, hi=9216, doc="largest inner frame, bytes")
    data_bytes: int = param(64, lo=wire.SPILL_HEADER_BYTES, hi=1024, doc="bus width, bytes")
    counter_bits: int = param(32, lo=1, hi=64, doc="counter width")


@dataclass(frozen=True, kw_only=True)
class LinkParams(Params):
    """Parameters of one direction of the spill link (``DelayLine``)."""
    data_bytes: int = param(64, lo=wire.SPILL_HEADER_BYTES, hi=1024, doc="bus width, bytes")
    latency: int = param(7, lo=1, hi=1 << 12, doc="cycles from one end to the other")


@dataclass(frozen=True, kw_only=True)
class SpillwayParams(Params):
    """Parameters of ``Spillway``: the switch side's (the node's follow from them) and the links' latency."""
    switch: SpillSwitchParams = param(SpillSwitchParams(), doc="the switch side")
    latency: int = param(7, lo=1, hi=1 << 12, doc="spill-link latency each way, cycles")

    @property
    def node(self):
        return self.switch.node

    @property
    def link(self):
        return LinkParams(data_bytes=self.switch.data_bytes, latency=self.latency)

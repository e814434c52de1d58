"""Golden model of ``hdl.packet_fifo.PacketFifo``: packets leave as they came, in order."""
from dataclasses import dataclass

from models.params import Params, check, param

__all__ = ["PacketFifoParams", "PacketFifoModel"]


@dataclass(frozen=True, kw_only=True)
class PacketFifoParams(Params):
    """Parameters of ``PacketFifo``."""
    data_bytes: int = param(64, lo=1, hi=1024, doc="bus width, bytes")
    depth: int = param(4, lo=1, hi=1 << 16, doc="FIFO depth, beats")


class PacketFifoModel:
    """Transaction-level model (``models/contract.py``): each packet in on ``i`` leaves on ``o`` unchanged,
    in order."""

    KIND = "transaction"

    def __init__(self, params=None):
        self.params = check(params, PacketFifoParams)

    def reset(self):
        """Nothing to forget: the FIFO's contents are the lockstep's pending packets."""

    def process(self, port, item):
        return {"o": [item]}

    def counters(self):
        return {}

"""Golden model of ``hdl.packet_fifo.PacketFifo``: packets leave as they came, in order."""
import collections
from dataclasses import dataclass

from models.params import Params, check, param

__all__ = ["PacketFifoParams", "PacketFifoModel"]


@dataclass(frozen=True, kw_only=True)
class PacketFifoParams(Params):
    """Parameters of ``PacketFifo``."""
    data_bytes: int = param(64, lo=1, hi=1024, doc="bus width, bytes")
    depth: int = param(4, lo=1, hi=1 << 16, doc="FIFO depth, beats")


class PacketFifoModel:
    """Packet-level model: ``push`` packets, ``pop`` them in the same order."""

    def __init__(self, params=None):
        self.params = check(params, PacketFifoParams)
        self.queue = collections.deque()

    def push(self, raw, meta):
        self.queue.append((bytes(raw), dict(meta)))

    def pop(self):
        return self.queue.popleft()

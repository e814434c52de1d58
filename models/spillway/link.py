"""Golden models of the spill link (``hdl/spillway/link.py``): its header, encapsulation, decapsulation, and
the link as a delay line."""
import collections
import functools
import struct

from models import wire
from models.params import check
from models.spillway.params import LinkParams

__all__ = ["spill_header", "EncapsulatorModel", "DecapsulatorModel", "DelayLineModel", "LinkParams", "H"]

H = wire.SPILL_HEADER_BYTES


def spill_header(op, port, flow=0, seq=0, count=0):
    """The 22 bytes that start every spill-link frame (``models.headers.spill_frame``/``drain_request``)."""
    return _ethernet(op == wire.SPILL_RETURN) + struct.pack(
        wire.SPILL_STRUCT, op, port, flow & 0xFFFF, seq & 0xFFFF, count, 0)


@functools.cache
def _ethernet(returning):
    """The Ethernet header of a spill-link frame: from the node to the switch (``returning``) or back."""
    from models.headers import NODE_MAC, SWITCH_MAC
    src, dst = (NODE_MAC, SWITCH_MAC) if returning else (SWITCH_MAC, NODE_MAC)
    mac = [bytes.fromhex(a.replace(":", "")) for a in (dst, src)]
    return mac[0] + mac[1] + struct.pack(">H", wire.ETHERTYPE_SPILL)


def _ones(n):
    return (1 << n) - 1


class EncapsulatorModel:
    """Register-level mirror of ``Encapsulator`` (see its docstring): ``out`` the beat it shows, ``i_ready``,
    ``edge`` the clock edge."""

    def __init__(self, width):
        self.W = width
        self.inside = self.extra = False
        self.carry = self.extra_keep = 0

    def out(self, beat, hdr):
        W = self.W
        if self.extra:
            return {"data": self.carry, "keep": self.extra_keep, "first": 0, "last": 1, "meta": {}}
        if beat is None:
            return None
        head = self.carry if self.inside else int.from_bytes(hdr, "little")
        spills = beat["keep"] >> (W - H) & 1
        return {"data": head | (beat["data"] & _ones(8 * (W - H))) << 8 * H,
                "keep": _ones(H) | (beat["keep"] & _ones(W - H)) << H,
                "first": int(not self.inside), "last": int(beat["last"] and not spills), "meta": {}}

    def i_ready(self, o_ready):
        return o_ready and not self.extra

    def edge(self, beat, o_ready):
        W = self.W
        if self.extra:
            if o_ready:
                self.extra = False
        elif beat is not None and o_ready:
            self.carry = beat["data"] >> 8 * (W - H)
            self.inside = not beat["last"]
            if beat["last"] and beat["keep"] >> (W - H) & 1:
                self.extra, self.extra_keep = True, beat["keep"] >> (W - H)


class DecapsulatorModel:
    """Register-level mirror of ``Decapsulator`` (see its docstring): ``out``, ``i_ready``, ``edge``."""

    def __init__(self, width):
        self.W = width
        self.have = self.emitted = self.flush = False
        self.held = self.flush_keep = 0

    def out(self, beat):
        W = self.W
        if self.flush:
            return {"data": self.held, "keep": self.flush_keep, "first": int(not self.emitted), "last": 1}
        if not self.have or beat is None:
            return None
        rest = beat["keep"] >> H & 1
        return {"data": self.held | (beat["data"] & _ones(8 * H)) << 8 * (W - H),
                "keep": _ones(W - H) | (beat["keep"] & _ones(H)) << (W - H),
                "first": int(not self.emitted), "last": int(beat["last"] and not rest)}

    def i_ready(self, o_ready):
        return False if self.flush else (True if not self.have else o_ready)

    def edge(self, beat, o_ready):
        if self.flush:
            if o_ready:
                self.flush = self.emitted = False
        elif not self.have:
            if beat is not None:
                self.held, self.have = beat["data"] >> 8 * H, not beat["last"]
                if beat["last"] and beat["keep"] >> H & 1:
                    self.flush, self.flush_keep = True, beat["keep"] >> H
        elif beat is not None and o_ready:
            rest = beat["keep"] >> H & 1
            self.held, self.emitted = beat["data"] >> 8 * H, not (beat["last"] and not rest)
            if beat["last"]:
                self.have = False
                if rest:
                    self.flush, self.flush_keep = True, beat["keep"] >> H


class DelayLineModel:
    """Cycle-accurate model (``models/contract.py``) of ``DelayLine``: the beat taken in cycle c leaves in
    cycle c + ``latency``; ``i.ready = ~pause``; ``head()`` is the beat leaving in the current cycle (it
    does not depend on the cycle's inputs, so a composition may read it before stepping the line)."""

    KIND = "cycle"

    def __init__(self, params=None):
        self.params = check(params, LinkParams)
        self.reset()

    def reset(self):
        self.line = collections.deque([None] * self.params.latency)     # beats in flight, the oldest first

    def head(self):
        return self.line[0]

    def step(self, inputs):
        out, ready = self.line.popleft(), not inputs["pause"]
        self.line.append(inputs["i__payload"] if inputs["i__valid"] and ready else None)
        return {"i__ready": int(ready), "o__valid": int(out is not None), "o__payload": out}

    def counters(self):
        return {}

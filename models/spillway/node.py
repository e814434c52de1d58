"""Cycle-accurate golden model of Spillway's spill node (hdl/spillway/node.py, SPEC section 1).

The spill node is the buffer device in the destination DC that holds the packets a congested switch
spills. It speaks spill-link frames (``Ether(type=0x88B5) / Spill / inner``, see
``models.headers.Spill``) on a byte stream ``i`` (from the switch; no back-pressure: a link does not
push back) and ``o`` (to the switch; back-pressure from the link serialiser).
"""
from models import wire
from models.contract import Counters
from models.params import check
from models.spillway.params import SpillNodeParams

__all__ = ["SpillNodeParams", "SpillNodeModel", "COUNTERS", "slot_beats", "classify"]

#: Per-reason frame counters. Frames in = received + overflow + oversize + malformed + drains;
#: received = stored now + returned; drain_empty counts requested packets the node did not hold.
COUNTERS = ("received", "returned", "overflow", "oversize", "malformed", "drains", "drain_empty")




def slot_beats(params):
    """Beats of one memory slot: a spill frame with an inner frame of ``mtu`` bytes."""
    return -(-(params.mtu + wire.SPILL_HEADER_BYTES) // params.data_bytes)


def classify(frame, ports, beats, width):
    """What the node does with a whole frame from the switch: ``"data"``, ``"drain"``, ``"malformed"``
    or ``"oversize"`` (a DATA frame of more than ``beats`` beats of ``width`` bytes).

    Malformed: shorter than the 22-byte header, EtherType not 0x88B5, ``op`` neither DATA nor DRAIN,
    ``port >= ports``, a DATA frame without an inner byte, a DRAIN frame with ``count == 0``.
    """
    if len(frame) < wire.SPILL_HEADER_BYTES:
        return "malformed"
    ethertype = int.from_bytes(frame[wire.ETHERTYPE_AT:wire.ETHERTYPE_AT + 2], "big")
    op, port, count = frame[wire.SPILL_OP_AT], frame[wire.SPILL_PORT_AT], frame[wire.SPILL_COUNT_AT]
    if ethertype != wire.ETHERTYPE_SPILL or port >= ports:
        return "malformed"
    if op == wire.SPILL_DRAIN:
        return "drain" if count else "malformed"
    if op != wire.SPILL_DATA or len(frame) == wire.SPILL_HEADER_BYTES:
        return "malformed"
    return "oversize" if -(-len(frame) // width) > beats else "data"


def returned(frame):
    """The RETURN frame the node sends for a stored DATA frame: MAC addresses swapped, ``op = RETURN``."""
    out = bytearray(frame)
    out[0:6], out[6:12] = frame[6:12], frame[0:6]
    out[wire.SPILL_OP_AT] = wire.SPILL_RETURN
    return bytes(out)


class SpillNodeModel:
    """Cycle-accurate model (``models/contract.py``) of ``SpillNode``.

    ``tick(beat, o_ready)`` is one clock cycle: it takes the beat on ``i`` (a dict, or None when
    ``i.valid`` is low; ``i`` is always ready) and ``o.ready``, returns ``(o_valid, o_payload)`` as
    the RTL shows them in that cycle (``o_payload`` a beat dict, None when not valid), then advances
    the state as the clock edge.

    Behaviour (cycle level):

    - a frame is classified at its last beat (``classify``); a DATA frame for a port whose FIFO
      held ``capacity`` frames at the frame's first beat is dropped, ``overflow`` (none of its beats
      is written: nothing is overwritten); else it is stored at the FIFO's tail (``received``),
      visible to the output from the next cycle;
    - DRAIN(port, count): ``granted = min(count, stored[port] - requested[port])`` is added to the
      port's requests (``drains`` counts the frame, ``drain_empty`` the ``count - granted`` packets
      the node does not hold), visible to the output from the next cycle;
    - output: while idle, the first port at or after the round-robin pointer with a request is
      chosen in the same cycle and its head frame sent (``returned(frame)``), one beat per cycle
      while ``o.ready``; after its last beat the slot is free, the request is served
      (``returned``), the pointer moves past the port and the output is idle for that edge (the
      next frame starts in the next cycle).
    """

    KIND = "cycle"

    def __init__(self, params=None):
        p = self.params = check(params, SpillNodeParams)
        self.ports, self.capacity, self.width = p.ports, p.capacity, p.data_bytes
        self.beats = slot_beats(p)
        self.counters = Counters(COUNTERS, p.counter_bits, "wrap")
        self.reset()

    def reset(self):
        self.fifos = [[] for _ in range(self.ports)]   # stored frames per port, head first
        self.requested = [0] * self.ports
        self.partial = bytearray()                      # the frame arriving on i
        self.full = False                               # its port's FIFO was full at its first beat
        self.current, self.index = None, 0              # port being served, next beat
        self.rr = 0
        self.counters.clear()

    @property
    def stored(self):
        return [len(f) for f in self.fifos]

    def _choice(self):
        if self.current is not None:
            return self.current
        for offset in range(self.ports):
            p = (self.rr + offset) % self.ports
            if self.requested[p]:
                return p
        return None

    def _beat(self, port):
        frame = returned(self.fifos[port][0])
        chunk = frame[self.index * self.width:(self.index + 1) * self.width]
        last = (self.index + 1) * self.width >= len(frame)
        return {"data": int.from_bytes(chunk, "little"), "keep": (1 << len(chunk)) - 1,
                "first": int(self.index == 0), "last": int(last), "meta": {}}

    def step(self, inputs):
        stored = self.stored
        valid, out = self.tick(inputs["i__payload"], inputs["o__ready"])
        return {"i__ready": 1, "o__valid": int(valid), "o__payload": out, "stored": stored}

    def tick(self, beat, o_ready):
        port = self._choice()
        out = self._beat(port) if port is not None else None
        outputs = (out is not None, out)

        # The clock edge. A DATA frame's slot is claimed at its first beat: full then means overflow,
        # and none of its beats is written (a stored frame is never overwritten).
        if beat is not None and not self.partial:
            data = beat["data"].to_bytes(self.width, "little")
            origin = data[wire.SPILL_PORT_AT]
            self.full = origin < self.ports and len(self.fifos[origin]) == self.capacity
        if out is not None and o_ready:
            if out["last"]:
                self.fifos[port].pop(0)
                self.requested[port] -= 1
                self.counters.add("returned")
                self.rr, self.current, self.index = (port + 1) % self.ports, None, 0
            else:
                self.current, self.index = port, self.index + 1
        elif out is not None:
            self.current = port
        if beat is not None:
            self.partial += beat["data"].to_bytes(self.width, "little")[:bin(beat["keep"]).count("1")]
            if beat["last"]:
                self._frame(bytes(self.partial))
                self.partial = bytearray()
        return outputs

    def _frame(self, frame):
        kind = classify(frame, self.ports, self.beats, self.width)
        if kind == "data":
            port = frame[wire.SPILL_PORT_AT]
            if self.full:
                kind = "overflow"
            else:
                self.fifos[port].append(frame)
                kind = "received"
        elif kind == "drain":
            port, count = frame[wire.SPILL_PORT_AT], frame[wire.SPILL_COUNT_AT]
            granted = min(count, len(self.fifos[port]) - self.requested[port])
            self.requested[port] += granted
            self.counters.add("drain_empty", count - granted)
            kind = "drains"
        self.counters.add(kind)

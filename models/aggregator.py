"""Golden model of the aggregator allocator (SPEC section 3): ATP, SwitchML and ESA policies.

Packet-level and untimed: ``process(raw, meta)`` takes one whole packet and returns the packets the
RTL emits for it, in order, as ``(bytes, meta)``. Every rule, including the *chosen* ones, is
documented on ``hdl.aggregator.Aggregator``; this is a separate, sequential Python implementation
of those rules (no code shared with the RTL).
"""
import struct
from dataclasses import dataclass, field

from models import wire
from models.params import Params, check, param
from models.wire import INA_HEADER_BYTES, INA_OFFSET, INA_PORT, INT32_MAX, INT32_MIN, UDP_OFFSET

__all__ = ["AggregatorParams", "AggregatorModel", "COUNTERS", "POLICIES", "INT32_MAX", "INT32_MIN",
           "sat_add"]

POLICIES = ("atp", "switchml", "esa")
#: One counter per outcome of a packet; their sum is the number of packets in.
COUNTERS = ("passed", "malformed", "bad_header", "consumed", "completed", "duplicate", "resent",
            "collision", "preempted", "flushed", "ack_freed", "ack_passed")

OVERFLOW, RESEND, COLLISION, ACK, EVICT, RESULT = (
    wire.INA_OVERFLOW, wire.INA_RESEND, wire.INA_COLLISION, wire.INA_ACK, wire.INA_EVICT, wire.INA_RESULT)


@dataclass(frozen=True, kw_only=True)
class AggregatorParams(Params):
    """Parameters of ``Aggregator`` and its model."""
    policy: str = param("esa", choices=POLICIES, doc="slot policy")
    slots: int = param(4, lo=1, hi=1 << 16, doc="aggregator slots")
    workers: int = param(4, lo=2, hi=32, doc="workers (bitmap bits used)")
    values: int = param(8, lo=1, hi=256, doc="int32 values per packet")
    data_bytes: int = param(128, lo=INA_HEADER_BYTES + 4, hi=1024, doc="bus width, bytes")
    ps_port: int = param(0, lo=0, hi=255, doc="egress port of the parameter server")
    mcast_port: int = param(255, lo=0, hi=255, doc="egress port of SwitchML's result multicast")
    counter_bits: int = param(32, lo=1, hi=64, doc="counter width")

    @property
    def length(self):
        """Bytes of an INA packet: headers and ``values`` int32."""
        return INA_HEADER_BYTES + 4 * self.values

    def validate(self):
        if self.length > self.data_bytes:
            self.fail(f"an INA packet of values = {self.values} ({self.length} bytes) must fit one "
                      f"beat of data_bytes = {self.data_bytes}")


def sat_add(a, b):
    """Saturating int32 add: ``(sum, overflowed)``."""
    s = a + b
    if s > INT32_MAX:
        return INT32_MAX, True
    if s < INT32_MIN:
        return INT32_MIN, True
    return s, False


@dataclass
class Slot:
    """One aggregator: owner job+seq, priority, fan-in, bitmap, count, values, overflow."""
    valid: bool = False
    complete: bool = False
    jobseq: int = 0
    priority: int = 0
    fanin: int = 0
    bitmap: int = 0
    count: int = 0
    overflow: bool = False
    values: list = field(default_factory=list)


class AggregatorModel:
    """Reference behaviour of ``hdl.aggregator.Aggregator``; takes the same ``AggregatorParams``."""

    def __init__(self, params=None):
        p = self.params = check(params, AggregatorParams)
        self.policy, self.slots, self.workers, self.nvalues = p.policy, p.slots, p.workers, p.values
        self.data_bytes, self.ps_port, self.mcast_port = p.data_bytes, p.ps_port, p.mcast_port
        self.counter_mask = (1 << p.counter_bits) - 1
        self.length = p.length
        self.result_port = p.mcast_port if p.policy == "switchml" else p.ps_port
        self.reset()

    def reset(self):
        """Power-on state: every slot and shadow free, counters zero."""
        self.state = [Slot() for _ in range(self.slots)]
        self.shadow = [Slot() for _ in range(self.slots)]
        self.counters = dict.fromkeys(COUNTERS, 0)

    def occupied(self):
        """Number of slots holding a job+seq (aggregating, or complete awaiting the ATP ACK)."""
        return sum(s.valid for s in self.state)

    def _count(self, reason):
        self.counters[reason] = (self.counters[reason] + 1) & self.counter_mask

    # --- parsing -------------------------------------------------------------------------------

    @staticmethod
    def is_ina(raw):
        """Ethernet/IPv4 (no options)/UDP to the INA port; anything else is not ours."""
        return (len(raw) >= UDP_OFFSET + 4
                and int.from_bytes(raw[wire.ETHERTYPE_AT:wire.ETHERTYPE_AT + 2], "big") == wire.ETHERTYPE_IPV4
                and raw[wire.IP_VERSION_IHL_AT] == wire.IPV4_VERSION_IHL5
                and raw[wire.IP_PROTO_AT] == wire.IPPROTO_UDP
                and struct.unpack_from(">H", raw, wire.UDP_DPORT_AT)[0] == INA_PORT)

    def _header(self, raw):
        bitmap, fanin, flags, jobseq, index, priority = struct.unpack_from(wire.INA_STRUCT, raw, INA_OFFSET)
        values = list(struct.unpack_from(f">{self.nvalues}i", raw, INA_HEADER_BYTES))
        return dict(bitmap=bitmap, fanin=fanin, flags=flags, jobseq=jobseq, index=index,
                    priority=priority, values=values)

    def _valid_contribution(self, h):
        onehot = h["bitmap"] != 0 and h["bitmap"] & (h["bitmap"] - 1) == 0
        return (onehot and h["bitmap"] < (1 << self.workers) and 2 <= h["fanin"] <= self.workers
                and h["index"] < self.slots and h["flags"] & ~RESEND == 0)

    # --- emitting ------------------------------------------------------------------------------

    def _emit(self, raw, port, flags, bitmap, jobseq, fanin, priority, values):
        head = bytearray(raw[:INA_OFFSET])
        head[wire.UDP_CHECKSUM_AT:wire.UDP_CHECKSUM_AT + 2] = b"\0\0"
        index = struct.unpack_from(">H", raw, wire.INA_INDEX_AT)[0]
        head += struct.pack(wire.INA_STRUCT, bitmap, fanin, flags, jobseq, index, priority)
        head += struct.pack(f">{self.nvalues}i", *values)
        return bytes(head), {"port": port}

    def _from_slot(self, raw, slot, flags, port):
        flags |= OVERFLOW if slot.overflow else 0
        return self._emit(raw, port, flags, slot.bitmap, slot.jobseq, slot.fanin, slot.priority,
                          slot.values)

    # --- behaviour -----------------------------------------------------------------------------

    def process(self, raw, meta=None):
        """Process one whole packet; return the list of ``(bytes, meta)`` packets it produces."""
        raw, meta = bytes(raw), dict(meta or {"port": 0})
        if not self.is_ina(raw):
            self._count("passed")
            return [(raw, meta)]
        if len(raw) != self.length:
            self._count("malformed")
            return []
        h = self._header(raw)
        if h["flags"] & ACK:
            return self._ack(raw, meta, h)
        if not self._valid_contribution(h):
            self._count("bad_header")
            return []
        return self._contribution(raw, h)

    def _ack(self, raw, meta, h):
        slot = self.state[h["index"]] if h["index"] < self.slots else None
        if (self.policy == "atp" and slot is not None and slot.valid and slot.complete
                and slot.jobseq == h["jobseq"]):
            self.state[h["index"]] = Slot()
            self._count("ack_freed")
        else:
            self._count("ack_passed")
        return [(raw, meta)]

    def _contribution(self, raw, h):
        index, jobseq, bit = h["index"], h["jobseq"], h["bitmap"]
        resend = bool(h["flags"] & RESEND)
        slot, shadow = self.state[index], self.shadow[index]
        own = slot.valid and slot.jobseq == jobseq

        if self.policy != "atp" and shadow.valid and shadow.jobseq == jobseq:
            self._count("resent")
            return [self._emit(raw, self.result_port, RESULT | RESEND | (OVERFLOW if shadow.overflow else 0),
                               shadow.bitmap, jobseq, h["fanin"], h["priority"], shadow.values)]
        if own and slot.complete:
            self._count("resent")
            return [self._from_slot(raw, slot, RESULT | RESEND, self.result_port)]
        if own and resend and slot.bitmap & bit:
            self._count("flushed")
            self.state[index] = Slot()
            return [self._from_slot(raw, slot, EVICT, self.ps_port)]
        if own and slot.bitmap & bit:
            self._count("duplicate")
            return []
        if own and not resend:
            return self._add(raw, index, slot, h)
        if resend or (slot.valid and not (self.policy == "esa" and h["priority"] > slot.priority)):
            self._count("collision")
            return [self._emit(raw, self.ps_port, (h["flags"] & RESEND) | COLLISION, bit, jobseq,
                               h["fanin"], h["priority"], h["values"])]
        fresh = Slot(valid=True, jobseq=jobseq, priority=h["priority"], fanin=h["fanin"], bitmap=bit,
                     count=1, values=list(h["values"]))
        self.state[index] = fresh
        if slot.valid:
            self._count("preempted")
            return [self._from_slot(raw, slot, EVICT, self.ps_port)]
        self._count("consumed")
        return []

    def _add(self, raw, index, slot, h):
        for i, v in enumerate(h["values"]):
            slot.values[i], over = sat_add(slot.values[i], v)
            slot.overflow |= over
        slot.bitmap |= h["bitmap"]
        slot.count += 1
        if slot.count < slot.fanin:
            self._count("consumed")
            return []
        self._count("completed")
        if self.policy == "atp":
            slot.complete = True
        else:
            self.shadow[index] = Slot(valid=True, jobseq=slot.jobseq, bitmap=slot.bitmap,
                                      overflow=slot.overflow, values=list(slot.values))
            self.state[index] = Slot()
        return [self._from_slot(raw, slot, RESULT, self.result_port)]

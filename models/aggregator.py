"""Golden model of the aggregator allocator (SPEC section 3): ATP and SwitchML as published, and ESA.

Transaction-level and untimed (``models/contract.py``): ``process("i", Packet(raw, meta))`` takes one
whole packet and returns ``{"o": [Packet, ...]}``, the packets the RTL emits for it, in order. Every
rule, including the *chosen* ones, is documented on ``hdl.aggregator.Aggregator`` and in PROGRESS.md
with the P4 file/line it mirrors; this is a separate, sequential Python implementation of those rules
(no code shared with the RTL).
"""
import struct
from dataclasses import dataclass, field

from models import wire
from models.contract import Counters, Packet
from models.params import Params, check, param
from models.wire import INA_HEADER_BYTES, INA_OFFSET, INA_PORT, INT32_MAX, INT32_MIN, UDP_OFFSET

__all__ = ["AggregatorParams", "AggregatorModel", "COUNTERS", "POLICIES", "INT32_MAX", "INT32_MIN",
           "atp_add", "wrap_add"]

POLICIES = ("atp", "switchml", "esa")
#: One counter per outcome of a packet (wrapping); their sum is the number of packets in.
COUNTERS = ("passed", "malformed", "bad_header", "consumed", "completed", "duplicate", "resent", "collision",
            "forwarded", "flushed", "preempted", "ack_freed", "ack_passed")

OVERFLOW, RESEND, COLLISION, ACK, EVICT, RESULT, ECN = (
    wire.INA_OVERFLOW, wire.INA_RESEND, wire.INA_COLLISION, wire.INA_ACK, wire.INA_EVICT, wire.INA_RESULT,
    wire.INA_ECN)
#: ATP's value registers update only while the stored value is strictly inside this bound (registers.p4).
ATP_BOUND = INT32_MAX


@dataclass(frozen=True, kw_only=True)
class AggregatorParams(Params):
    """Parameters of ``Aggregator`` and its model."""
    policy: str = param("esa", choices=POLICIES, doc="slot policy")
    slots: int = param(4, lo=1, hi=1 << 16, doc="aggregator slots (SwitchML: each has two sets, at most 2**15)")
    workers: int = param(4, lo=2, hi=32, doc="workers (bitmap bits used)")
    values: int = param(8, lo=1, hi=256, doc="int32 values per packet")
    data_bytes: int = param(128, lo=INA_HEADER_BYTES + 4, hi=1024, doc="bus width, bytes")
    ps_port: int = param(0, lo=0, hi=255, doc="egress port of the parameter server (ATP, ESA)")
    mcast_port: int = param(255, lo=0, hi=255, doc="egress port of SwitchML's result multicast")
    counter_bits: int = param(32, lo=1, hi=64, doc="counter width")

    @property
    def length(self):
        """Bytes of an INA packet: headers and ``values`` int32."""
        return INA_HEADER_BYTES + 4 * self.values

    def validate(self):
        if self.policy == "switchml" and self.slots > 1 << 15:
            self.fail(f"slots = {self.slots}: SwitchML's pool index has 15 slot bits (bit 15 is the set)")
        if self.length > self.data_bytes:
            self.fail(f"an INA packet of values = {self.values} ({self.length} bytes) must fit one "
                      f"beat of data_bytes = {self.data_bytes}")


def atp_add(old, v):
    """ATP's ``noequ0_write_data_entry``: add only while ``old`` is strictly inside +-2147483647, saturating."""
    if -ATP_BOUND < old < ATP_BOUND:
        return max(INT32_MIN, min(INT32_MAX, old + v))
    return old


def wrap_add(old, v):
    """SwitchML's ``bit<32>`` register add: wraps modulo 2**32 (read back as int32)."""
    s = (old + v) & 0xFFFFFFFF
    return s - (1 << 32) if s & 0x80000000 else s


@dataclass
class Slot:
    """ATP/ESA aggregator: job+seq (0 = free), bitmap, counter, values, ECN; ESA also priority and fan-in."""
    jobseq: int = 0
    bitmap: int = 0
    count: int = 0
    ecn: int = 0
    priority: int = 0
    fanin: int = 0
    values: list = field(default_factory=list)

    def free(self):
        """Clean job+seq, bitmap and counter (the values stay; the next first contribution writes them)."""
        self.jobseq = self.bitmap = self.count = 0


@dataclass
class Pool:
    """SwitchML slot: a bitmap per set; a count-down and values per (slot, set)."""
    bitmap: list = field(default_factory=lambda: [0, 0])
    count: list = field(default_factory=lambda: [0, 0])
    values: list = field(default_factory=lambda: [[], []])


class AggregatorModel:
    """Transaction-level model of ``hdl.aggregator.Aggregator``; takes the same ``AggregatorParams``."""

    KIND = "transaction"

    def __init__(self, params=None):
        p = self.params = check(params, AggregatorParams)
        self.policy, self.slots, self.workers, self.nvalues = p.policy, p.slots, p.workers, p.values
        self.data_bytes, self.ps_port, self.mcast_port = p.data_bytes, p.ps_port, p.mcast_port
        self.counters = Counters(COUNTERS, p.counter_bits, "wrap")
        self.length = p.length
        self.reset()

    def reset(self):
        """Power-on state: every slot free, values zero, counters zero."""
        zero = [0] * self.nvalues
        self.state = [Slot(values=list(zero)) for _ in range(self.slots)]
        self.pool = [Pool(values=[list(zero), list(zero)]) for _ in range(self.slots)]
        self.counters.clear()

    def occupied(self):
        """Slots holding a job+seq (ATP, ESA) or (SwitchML) a set mid-aggregation."""
        if self.policy == "switchml":
            return sum(any(c != 0 for c in s.count) for s in self.pool)
        return sum(s.jobseq != 0 for s in self.state)

    def _count(self, reason):
        self.counters.add(reason)

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
        ce = raw[wire.IP_TOS_AT] & 3 == wire.ECN_CE
        return dict(bitmap=bitmap, fanin=fanin, flags=flags, jobseq=jobseq, index=index,
                    priority=priority, values=values, ecn=int(ce or bool(flags & ECN)))

    def _slot_of(self, index):
        return index & ~wire.INA_SET_BIT if self.policy == "switchml" else index

    def _valid_contribution(self, h):
        onehot = h["bitmap"] != 0 and h["bitmap"] & (h["bitmap"] - 1) == 0
        allowed = RESEND if self.policy == "switchml" else RESEND | OVERFLOW | ECN
        return (onehot and h["bitmap"] < (1 << self.workers) and 2 <= h["fanin"] <= self.workers
                and self._slot_of(h["index"]) < self.slots and h["flags"] & ~allowed == 0
                and (self.policy == "switchml" or h["jobseq"] != 0))

    # --- emitting ------------------------------------------------------------------------------

    def _emit(self, raw, port, flags, **fields):
        """The triggering packet with UDP checksum 0, ``flags`` and the INA ``fields`` given rewritten."""
        h = self._header(raw)
        h.update(fields)
        head = bytearray(raw[:INA_OFFSET])
        head[wire.UDP_CHECKSUM_AT:wire.UDP_CHECKSUM_AT + 2] = b"\0\0"
        head += struct.pack(wire.INA_STRUCT, h["bitmap"], h["fanin"], flags, h["jobseq"], h["index"], h["priority"])
        head += struct.pack(f">{self.nvalues}i", *h["values"])
        return Packet(bytes(head), {"port": port})

    # --- behaviour -----------------------------------------------------------------------------

    def process(self, port, item):
        """One whole packet ``item`` (a ``Packet``) in on ``i``: ``{"o": [the Packets it produces]}``."""
        raw, meta = bytes(item.data), dict(item.meta or {"port": 0})
        return {"o": self._decide(raw, meta)}

    def _decide(self, raw, meta):
        if not self.is_ina(raw):
            self._count("passed")
            return [Packet(raw, meta)]
        if len(raw) != self.length:
            self._count("malformed")
            return []
        h = self._header(raw)
        if h["flags"] & ACK:
            return self._ack(raw, meta, h)
        if not self._valid_contribution(h):
            self._count("bad_header")
            return []
        if self.policy == "switchml":
            return self._switchml(raw, meta, h)
        return self._atp(raw, h)

    def _ack(self, raw, meta, h):
        """ATP (p4ml.p4:37-58): free on a job+seq match unless overflow=1 and resend=0; forward (multicast)."""
        slot = self.state[h["index"]] if h["index"] < self.slots else None
        keep = h["flags"] & OVERFLOW and not h["flags"] & RESEND
        if (self.policy != "switchml" and slot is not None and not keep and h["jobseq"] != 0
                and slot.jobseq == h["jobseq"]):
            slot.free()
            slot.ecn = 0
            self._count("ack_freed")
        else:
            self._count("ack_passed")
        return [Packet(raw, meta)]

    def _atp(self, raw, h):
        """ATP's ingress (p4ml.p4:60-226), and ESA's preemption and free-on-completion on top of it."""
        esa = self.policy == "esa"
        flags, bit, resend = h["flags"], h["bitmap"], bool(h["flags"] & RESEND)
        if flags & OVERFLOW:
            self._count("forwarded")
            return [self._emit(raw, self.ps_port, flags)]
        slot = self.state[h["index"]]
        match = slot.jobseq == h["jobseq"] or (slot.jobseq == 0 and not resend)
        if not match:
            if resend:
                self._count("forwarded")
                return [self._emit(raw, self.ps_port, flags)]
            if esa and h["priority"] > slot.priority:
                self._count("preempted")
                out = self._emit(raw, self.ps_port, RESULT | EVICT | (ECN if slot.ecn else 0), bitmap=slot.bitmap,
                                 values=list(slot.values), jobseq=slot.jobseq, fanin=slot.fanin,
                                 priority=slot.priority)
                self.state[h["index"]] = Slot(jobseq=h["jobseq"], bitmap=bit, count=1, ecn=h["ecn"],
                                              priority=h["priority"], fanin=h["fanin"], values=list(h["values"]))
                return [out]
            self._count("collision")
            return [self._emit(raw, self.ps_port, flags | COLLISION)]
        if slot.jobseq == 0:
            slot.priority, slot.fanin = h["priority"], h["fanin"]
        slot.jobseq = h["jobseq"]
        ecn_out = (flags & ECN) | (ECN if slot.ecn else 0)
        slot.ecn |= h["ecn"]
        old = slot.bitmap
        new = bit & ~old
        if new:
            slot.bitmap |= bit
            slot.count += 1
            slot.values = list(h["values"]) if old == 0 else [atp_add(a, v) for a, v in zip(slot.values, h["values"])]
        out_flags = (flags & ~ECN) | ecn_out | RESULT
        if resend:
            self._count("flushed")
            out = self._emit(raw, self.ps_port, out_flags | EVICT, bitmap=slot.bitmap, values=list(slot.values))
            slot.free()
            return [out]
        if slot.count != h["fanin"]:
            self._count("consumed" if new else "duplicate")
            return []
        self._count("completed" if new else "resent")
        out = self._emit(raw, self.ps_port, out_flags, bitmap=slot.bitmap, values=list(slot.values))
        if esa:
            slot.free()
            slot.ecn = 0
        return [out]

    def _switchml(self, raw, meta, h):
        """SwitchML (bitmap_checker.p4, workers_counter.p4, processor.p4, next_step_selector.py)."""
        s, k = h["index"] >> 15, h["index"] & ~wire.INA_SET_BIT
        pool, bit = self.pool[k], h["bitmap"]
        old = pool.bitmap[s]
        pool.bitmap[s] |= bit
        pool.bitmap[1 - s] &= ~bit
        read = pool.count[s]
        if old & bit:
            if read != 0:
                self._count("duplicate")
                return []
            self._count("resent")
            return [self._emit(raw, meta["port"], RESULT, bitmap=pool.bitmap[s], values=list(pool.values[s]))]
        pool.count[s] = h["fanin"] - 1 if read == 0 else read - 1
        pool.values[s] = (list(h["values"]) if old == 0
                          else [wrap_add(a, v) for a, v in zip(pool.values[s], h["values"])])
        if read != 1:
            self._count("consumed")
            return []
        self._count("completed")
        return [self._emit(raw, self.mcast_port, RESULT, bitmap=pool.bitmap[s], values=list(pool.values[s]))]

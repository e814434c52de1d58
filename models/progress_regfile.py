"""Golden model of the Symphony progress register file (hdl/progress_regfile.py), per packet."""
import struct
from dataclasses import dataclass

from models import wire
from models.params import Params, check, param
from models.wire import ECN_CE, LAST_OPCODES

__all__ = ["ProgressRegfileParams", "ProgressRegfileModel", "ip_checksum_update", "COUNTERS",
           "OP_INSTALL", "OP_REMOVE", "OP_JOB"]

#: Per-reason packet counters (saturating); every packet is exactly one of the first three.
COUNTERS = ("unknown", "malformed", "tracked", "marked", "not_ect")
#: ``cfg`` command opcodes: map a QP, unmap it, (re)configure and clear a job.
OP_INSTALL, OP_REMOVE, OP_JOB = 1, 2, 3


@dataclass(frozen=True, kw_only=True)
class ProgressRegfileParams(Params):
    """Parameters of ``ProgressRegfile`` and its model."""
    jobs: int = param(4, lo=1, hi=1 << 12, doc="jobs (register rows)")
    ring: int = param(4, lo=2, hi=64, doc="ring positions per job")
    table: int = param(16, lo=2, hi=1 << 16, pow2=True, doc="flow-table entries (direct-mapped by QP)")
    step_bits: int = param(16, lo=1, hi=32, doc="step counter width (saturating)")
    counter_bits: int = param(32, lo=1, hi=64, doc="counter width (saturating)")
    data_bytes: int = param(64, lo=wire.ROCE_HEADER_BYTES, hi=1024, doc="bus width, bytes")
    message_steps: bool = param(False, doc="a message-last opcode also closes a step")


def ip_checksum_update(checksum, old_word, new_word):
    """RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') in one's complement arithmetic."""
    total = (~checksum & 0xFFFF) + (~old_word & 0xFFFF) + new_word
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


class ProgressRegfileModel:
    """Takes the ``ProgressRegfileParams`` of ``ProgressRegfile``; ``config`` and ``packet`` in the
    order the RTL took them."""

    def __init__(self, params=None):
        p = self.params = check(params, ProgressRegfileParams)
        jobs, ring, table = p.jobs, p.ring, p.table
        self.jobs, self.ring, self.table, self.step_bits = jobs, ring, table, p.step_bits
        self.counter_bits, self.data_bytes, self.message_steps = p.counter_bits, p.data_bytes, p.message_steps
        self.flows = [None] * table                         # (qp, job, position)
        self.rows = [([0] * ring, [0] * ring) for _ in range(jobs)]
        self.settings = [(0, 0)] * jobs                     # (chunk, delta)
        self.reset()

    def reset(self):
        """A reset clears counters and flags; the tables are SRAM and keep their contents."""
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.saturated = False

    def _count(self, name):
        if self.counters[name] == (1 << self.counter_bits) - 1:
            self.saturated = True
        else:
            self.counters[name] += 1

    def config(self, cmd):
        if cmd["op"] in (OP_INSTALL, OP_REMOVE):
            index = cmd["qp"] % self.table
            self.flows[index] = (cmd["qp"], cmd["job"], cmd["position"]) if cmd["op"] == OP_INSTALL else None
        elif cmd["op"] == OP_JOB:
            self.settings[cmd["job"]] = (max(cmd["chunk"], 1), cmd["delta"])
            self.rows[cmd["job"]] = ([0] * self.ring, [0] * self.ring)

    def packet(self, raw):
        """The bytes the RTL forwards for packet ``raw``."""
        raw = bytes(raw)
        head = raw[:self.data_bytes]
        ipv4_udp = (len(head) > wire.IP_PROTO_AT
                    and int.from_bytes(head[wire.ETHERTYPE_AT:wire.ETHERTYPE_AT + 2], "big") == wire.ETHERTYPE_IPV4
                    and head[wire.IP_VERSION_IHL_AT] >> 4 == 4 and head[wire.IP_PROTO_AT] == wire.IPPROTO_UDP)
        dport = (struct.unpack_from("!H", head, wire.UDP_DPORT_AT)[0]
                 if len(head) >= wire.UDP_DPORT_AT + 2 else None)
        malformed = ipv4_udp and (head[wire.IP_VERSION_IHL_AT] & 15 != 5 or dport is None
                                  or (dport == wire.ROCEV2_PORT and len(raw) < wire.ROCE_HEADER_BYTES))
        roce = ipv4_udp and not malformed and dport == wire.ROCEV2_PORT
        if malformed:
            self._count("malformed")
            return raw
        if not roce:
            self._count("unknown")
            return raw
        qp = int.from_bytes(head[wire.BTH_DQPN_AT:wire.BTH_DQPN_AT + 4], "big") & 0xFFFFFF
        entry = self.flows[qp % self.table]
        if entry is None or entry[0] != qp:
            self._count("unknown")
            return raw
        _, job, position = entry
        chunk, delta = self.settings[job]
        steps, counts = self.rows[job]
        top = (1 << self.step_bits) - 1
        closes = counts[position] + 1 >= chunk or (self.message_steps and head[wire.BTH_OPCODE_AT] in LAST_OPCODES)
        if closes and steps[position] == top:
            self.saturated = True
        if closes:
            steps[position] = min(steps[position] + 1, top)
            counts[position] = 0
        else:
            counts[position] += 1
        self._count("tracked")
        if steps[position] - min(steps) <= delta:
            return raw
        tos = head[wire.IP_TOS_AT]
        if tos & 3 == 0:
            self._count("not_ect")
            return raw
        if tos & 3 == ECN_CE:
            return raw
        self._count("marked")
        version_ihl = head[wire.IP_VERSION_IHL_AT]
        old_word, new_word = version_ihl << 8 | tos, version_ihl << 8 | tos | ECN_CE
        checksum = ip_checksum_update(struct.unpack_from("!H", head, wire.IP_CHECKSUM_AT)[0], old_word, new_word)
        out = bytearray(raw)
        out[wire.IP_TOS_AT] = tos | ECN_CE
        out[wire.IP_CHECKSUM_AT:wire.IP_CHECKSUM_AT + 2] = struct.pack("!H", checksum)
        return bytes(out)

"""Golden model of the Symphony progress register file (hdl/progress_regfile.py), per packet."""
import struct

from hdl.progress_regfile import COUNTERS, ECN_CE, LAST_OPCODES, OP_INSTALL, OP_JOB, OP_REMOVE

__all__ = ["ProgressRegfileModel", "ip_checksum_update"]


def ip_checksum_update(checksum, old_word, new_word):
    """RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') in one's complement arithmetic."""
    total = (~checksum & 0xFFFF) + (~old_word & 0xFFFF) + new_word
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


class ProgressRegfileModel:
    """Same parameters as ``ProgressRegfile``; ``config`` and ``packet`` in the order the RTL took them."""

    def __init__(self, jobs=4, ring=4, table=16, step_bits=16, counter_bits=32, data_bytes=64,
                 message_steps=False):
        self.jobs, self.ring, self.table, self.step_bits = jobs, ring, table, step_bits
        self.counter_bits, self.data_bytes, self.message_steps = counter_bits, data_bytes, message_steps
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
        ipv4_udp = len(head) >= 24 and head[12:14] == b"\x08\x00" and head[14] >> 4 == 4 and head[23] == 17
        dport = struct.unpack_from("!H", head, 36)[0] if len(head) >= 38 else None
        malformed = ipv4_udp and (head[14] & 15 != 5 or dport is None or (dport == 4791 and len(raw) < 54))
        roce = ipv4_udp and not malformed and dport == 4791
        if malformed:
            self._count("malformed")
            return raw
        if not roce:
            self._count("unknown")
            return raw
        qp = int.from_bytes(head[46:50], "big") & 0xFFFFFF
        entry = self.flows[qp % self.table]
        if entry is None or entry[0] != qp:
            self._count("unknown")
            return raw
        _, job, position = entry
        chunk, delta = self.settings[job]
        steps, counts = self.rows[job]
        top = (1 << self.step_bits) - 1
        closes = counts[position] + 1 >= chunk or (self.message_steps and head[42] in LAST_OPCODES)
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
        tos = head[15]
        if tos & 3 == 0:
            self._count("not_ect")
            return raw
        if tos & 3 == ECN_CE:
            return raw
        self._count("marked")
        old_word, new_word = head[14] << 8 | tos, head[14] << 8 | tos | ECN_CE
        checksum = ip_checksum_update(struct.unpack_from("!H", head, 24)[0], old_word, new_word)
        return raw[:15] + bytes([tos | ECN_CE]) + raw[16:24] + struct.pack("!H", checksum) + raw[26:]

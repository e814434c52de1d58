"""Golden model of the Symphony progress register file (hdl/progress_regfile.py): cycle-accurate at the
ports (its ageing reads the cycle a packet goes in), deciding per packet."""
import struct
from dataclasses import dataclass

from models import wire
from models.contract import Counters
from models.params import Params, check, param
from models.wire import ECN_CE, LAST_OPCODES

__all__ = ["ProgressRegfileParams", "ProgressRegfileModel", "ip_checksum_update", "COUNTERS",
           "OP_INSTALL", "OP_REMOVE", "OP_JOB"]

#: Per-reason packet counters (saturating); every packet is exactly one of the first three.
#: ``aged`` is an event counter outside that conservation: ring positions that turned stale.
COUNTERS = ("unknown", "malformed", "tracked", "marked", "not_ect", "aged")
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
    epoch_bits: int = param(10, lo=0, hi=40, doc="ageing epoch = 2**epoch_bits cycles")
    age_bits: int = param(4, lo=1, hi=16, doc="stored last-seen epoch width (age_out < 2**age_bits)")


def ip_checksum_update(checksum, old_word, new_word):
    """RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') in one's complement arithmetic."""
    total = (~checksum & 0xFFFF) + (~old_word & 0xFFFF) + new_word
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


class ProgressRegfileModel:
    """Cycle-accurate model (``models/contract.py``) of ``ProgressRegfile``, with its ``ProgressRegfileParams``.

    ``step`` is one clock cycle: three register stages behind ``i`` (B, C and the output register:
    latency 3, one beat a cycle), advancing together while the output can take a beat (``load = ~o.valid
    | o.ready``), ``i.ready = load`` while no command is offered; ``cfg.ready`` while stages B and C hold
    no beat (a command offered holds the packets back until the pipeline drained, then takes effect in
    its cycle); the counters and ``saturated`` as the RTL's registers show them. A packet is decided
    whole (``LOOKAHEAD``: its bytes come with its first beat) when its first beat leaves stage C, with
    the timer cycle of its acceptance: its first beat leaves with the header ``packet`` rewrites, the
    other beats unchanged. A reset loses the beats in the stages undecided.

    ``config`` and ``packet`` are the packet-level API (``models/pipeline.py`` composes them), in the
    order the RTL took them, each with ``cycle``: the number of cycles since the last reset was
    released in the cycle the RTL took the command or the packet's first beat (the RTL's free-running
    timer; only ageing uses it, so callers that never set ``age_out`` may leave it 0).

    Ageing (a job's ``age_out`` > 0): the epoch is ``(cycle >> epoch_bits) mod 2**age_bits``. Each
    ring position keeps its last-seen epoch ``seen`` and a sticky ``stale`` bit. ``OP_JOB`` clears
    the row with every position seen now. On each tracked packet the job's row is re-evaluated: a
    position other than the sender with ``(epoch - seen) mod 2**age_bits > age_out`` turns stale
    (``aged`` += the number that turned); the sender is seen now and live again, keeping its step
    (rejoin). ``min_step`` is the minimum over the live positions after the update (the sender is
    live, so when all the others are stale nothing is marked).
    """

    KIND = "cycle"
    LOOKAHEAD = ("i",)

    def __init__(self, params=None):
        p = self.params = check(params, ProgressRegfileParams)
        jobs, ring, table = p.jobs, p.ring, p.table
        self.jobs, self.ring, self.table, self.step_bits = jobs, ring, table, p.step_bits
        self.counter_bits, self.data_bytes, self.message_steps = p.counter_bits, p.data_bytes, p.message_steps
        self.flows = [None] * table                         # (qp, job, position)
        self.rows = [([0] * ring, [0] * ring, [0] * ring, [False] * ring) for _ in range(jobs)]
        self.settings = [(0, 0, 0)] * jobs                  # (chunk, delta, age_out)
        self.epoch_bits, self.age_bits = p.epoch_bits, p.age_bits
        self.counters = Counters(COUNTERS, p.counter_bits, "saturate")
        self.reset()

    def reset(self):
        """A reset clears counters, flags, the timer and the stages (their beats are lost); the tables are
        SRAM and keep their contents."""
        self.counters.clear()
        self.saturated = False
        self.time = 0                   # cycles since reset: the RTL's timer
        self.stages = [None, None]      # stages B and C: (beat, packet bytes or None, acceptance cycle)
        self.out = None                 # the output register's beat

    def step(self, inputs):
        outputs = {"o__valid": int(self.out is not None), "o__payload": self.out,
                   "saturated": int(self.saturated), **self.counters()}
        load = self.out is None or bool(inputs["o__ready"])
        cmd, beat = inputs["cfg__payload"], inputs["i__payload"]
        drained = self.stages == [None, None]
        outputs.update(cfg__ready=int(drained), i__ready=int(load and cmd is None))
        if cmd is not None and drained:
            self.config(cmd, self.time)
        if load:
            taken = None
            if beat is not None and cmd is None:
                taken = (beat, inputs["i__packet"].data if beat["first"] else None, self.time)
            self.out = self._decide(*self.stages[1]) if self.stages[1] is not None else None
            self.stages = [taken, self.stages[0]]
        self.time += 1
        return outputs

    def _decide(self, beat, raw, cycle):
        """The beat stage C passes on: a first beat's packet decided, its header rewritten."""
        if raw is None:
            return beat
        head = self.packet(raw, cycle)[:self.data_bytes]
        return dict(beat, data=int.from_bytes(head, "little"))

    def _count(self, name, n=1):
        if self.counters[name] + n > (1 << self.counter_bits) - 1:
            self.saturated = True
        self.counters.add(name, n)

    def epoch(self, cycle):
        """The RTL's epoch in cycle ``cycle`` after reset (its timer wraps at 2**(epoch_bits + age_bits))."""
        return (cycle >> self.epoch_bits) & ((1 << self.age_bits) - 1)

    def config(self, cmd, cycle=0):
        if cmd["op"] in (OP_INSTALL, OP_REMOVE):
            index = cmd["qp"] % self.table
            self.flows[index] = (cmd["qp"], cmd["job"], cmd["position"]) if cmd["op"] == OP_INSTALL else None
        elif cmd["op"] == OP_JOB:
            self.settings[cmd["job"]] = (max(cmd["chunk"], 1), cmd["delta"], cmd.get("age_out", 0))
            R = self.ring
            self.rows[cmd["job"]] = ([0] * R, [0] * R, [self.epoch(cycle)] * R, [False] * R)

    def live_minimum(self, job):
        """The minimum step over the job's live positions (its ``min_step`` after the last packet)."""
        steps, _, _, stale = self.rows[job]
        return min(s for s, dead in zip(steps, stale) if not dead)

    def packet(self, raw, cycle=0):
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
        chunk, delta, age_out = self.settings[job]
        steps, counts, seen, stale = self.rows[job]
        now = self.epoch(cycle)
        turned = 0
        for p in range(self.ring):
            if p == position:
                seen[p], stale[p] = now, False
            elif age_out and not stale[p] and (now - seen[p]) % (1 << self.age_bits) > age_out:
                stale[p] = True
                turned += 1
        if turned:
            self._count("aged", turned)
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
        if steps[position] - self.live_minimum(job) <= delta:
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

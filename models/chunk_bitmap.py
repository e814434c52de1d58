"""Golden model of the SDR-RDMA chunk-bitmap tracker ``ChunkBitmap`` (SPEC section 6).

The receiver NIC's side of SDR: per posted message a packet bitmap and a chunk bitmap, generations
from the delivering QP, placement descriptors and ``chunk_done`` / ``msg_done`` events.

Interface (the contract the RTL follows)
- ``step(inputs)`` is one clock cycle of the Component's ports (a cycle model, ``models/contract.py``):
  ``i.ready`` and ``cmd.ready`` of that cycle, and on ``o`` the result of the packet accepted
  ``LATENCY`` cycles before (``o.valid`` low in every other cycle; ``o.ready`` is ignored). A packet is
  decided on its first beat (the bytes it holds: every header, and its length when it is also the
  last); later beats are taken without effect. ``o`` compares ``outcome``, ``chunk_done`` and
  ``msg_done``, the parsed fields unless ``malformed`` and ``chunk`` only with ``chunk_done``.
- ``tick(pkt, cmd)`` is the same cycle on the model's terms: ``pkt`` the bytes of the packet offered on
  the packet input (None: not valid, or not a first beat), ``cmd`` the command offered (None: not
  valid). It returns ``Cycle(pkt_ready, cmd_ready, result)``: the two ready signals and, when the packet
  was accepted, its ``Result`` (also kept as ``result`` until the next cycle).
- ``packet(raw)`` and ``command(cmd)`` are the same rules without timing (a post's clear is done at
  once); ``tick`` is built on them.
- ``counters``: one per packet outcome (``OUTCOMES``; their sum is the packets accepted:
  conservation) and per event/command (``EVENTS``); all saturate at ``counter_bits``
  (``saturated``: one of them was counted at the top).

Rules (*chosen* where the SPEC is silent)
- Packet parse: a packet shorter than ``wire.SDR_MIN_LENGTH`` (headers + ICRC), not Ethernet/IPv4
  without options/UDP to port 4791, with an opcode other than UC RDMA_WRITE_ONLY_WITH_IMMEDIATE, or
  to a dest QP outside ``qp_base .. qp_base + generations * channels - 1`` is ``malformed``
  (*chosen*: one reason for everything that cannot be an SDR packet of this receiver; RETH contents,
  checksums and the ICRC are not checked). q = dqpn - qp_base, gen = q mod G, channel = q div G.
- Slot = msg id mod ``msg_slots`` (direct-mapped, tag = full msg id). In order: slot invalid or tag
  differs -> ``no_slot``; gen differs -> ``gen_mismatch``; offset >= n_pkts -> ``offset_oob``; bit
  already set -> ``dup``; else ``placed``: the bit is set by one read-modify-write of one packet
  word, the result carries the placement descriptor {msg, offset}. Drops change no state but their
  counter.
- Layout (*chosen*): chunk c = offset div chunk holds packets [c*chunk, (c+1)*chunk) (the last chunk
  is short when n_pkts is not a multiple); ``word_bits // chunk`` whole chunks per packet word, so a
  chunk never spans a word (the rest of a word is padding). Packet o is bit
  ``(c mod cpw) * chunk + o mod chunk`` of word ``c div cpw`` (cpw = chunks per word). Chunk c is bit
  ``c mod word_bits`` of chunk word ``c div word_bits``. Each slot owns ``slot_words`` words of both
  memories.
- The packet that sets the last missing bit of its chunk sets the chunk bit (one read-modify-write
  of one chunk word), increments the slot's chunks-done count and reports ``chunk_done = c``; the
  one that completes the last chunk also reports ``msg_done``. A done slot stays valid: later
  packets are ``dup``.
- ``post`` {msg, gen, n_pkts, chunk} (*chosen*: the command names the generation; software rotates
  it, as the SDR library picks the internal QP) overwrites the slot whatever it held: valid, tag =
  msg, gen, n_pkts, chunk, chunks done = 0. It is rejected (``cmd_rejected``, no state change) when
  gen >= generations, n_pkts is 0 or above 2**offset_bits, chunk is outside 1..max_chunk, or the
  message needs more than ``slot_words`` words. ``complete`` {msg} invalidates the slot if it holds
  msg (the NULL key: its late packets become ``no_slot``), else is rejected.
- Timing (*chosen*): a command wins over a packet in the same cycle (pkt_ready is low in a cycle
  whose command is accepted). A post then starts the clear engine, which zeroes word i of the slot's
  packet and chunk memories in the i-th cycle after the post, for ``words(n_pkts, chunk)`` cycles
  (the words the new message uses; words beyond them are never read for it). While the engine runs
  it owns the memories' write ports: pkt_ready and cmd_ready are both low (back-pressure, for every
  packet, not only the cleared slot's). ``complete`` takes its one cycle. Packets are otherwise
  accepted one per cycle, each seeing every earlier packet's effect (the RTL forwards its pipeline).
- Reset empties the slot table, stops the clear engine and zeroes the counters; the word memories
  keep their contents (SRAM; a post clears before use). The EC check (``ec_status``) reads the chunk
  bitmap of a slot: submessage l is chunks [l*(k+m), (l+1)*(k+m)), data chunks first, then parity.
"""
import collections
from dataclasses import dataclass
from typing import NamedTuple

from models import wire
from models.contract import Counters
from models.params import Params, check, param

__all__ = ["ChunkBitmapParams", "ChunkBitmapModel", "Result", "Cycle", "OUTCOMES", "EVENTS", "COUNTERS",
           "OP_POST", "OP_COMPLETE", "LATENCY", "xor_group", "ec_recoverable"]

#: Outcome of every accepted packet; their sum is the packets in (conservation).
OUTCOMES = ("placed", "malformed", "no_slot", "gen_mismatch", "offset_oob", "dup")
#: Events and commands, also counted.
EVENTS = ("chunk_done", "msg_done", "posts", "completes", "cmd_rejected")
COUNTERS = OUTCOMES + EVENTS
#: Command opcodes.
OP_POST, OP_COMPLETE = 1, 2
#: Cycles from a packet's acceptance to its result on the outputs.
LATENCY = 2


@dataclass(frozen=True, kw_only=True)
class ChunkBitmapParams(Params):
    """Parameters of ``ChunkBitmap`` and its model."""
    msg_slots: int = param(16, lo=1, hi=1 << 12, pow2=True, doc="message-table entries (slot = msg id mod this)")
    msg_bits: int = param(wire.SDR_MSG_BITS, lo=1, hi=30, doc="message id bits, imm[31:32-msg_bits]")
    user_bits: int = param(wire.SDR_USER_BITS, lo=0, hi=30, doc="user bits, imm[user_bits-1:0]")
    generations: int = param(4, lo=1, hi=1 << 12, pow2=True, doc="generations G (internal QPs per channel)")
    channels: int = param(4, lo=1, hi=1 << 12, pow2=True, doc="channels of the SDR QP")
    qp_base: int = param(0x100, lo=0, hi=(1 << 24) - 1, doc="first internal QP number")
    word_bits: int = param(64, lo=8, hi=512, pow2=True, doc="bitmap word width W")
    slot_words: int = param(8, lo=1, hi=1 << 16, doc="words per slot of the packet and chunk memories")
    max_chunk: int = param(64, lo=1, hi=64, doc="largest chunk, packets")
    data_bytes: int = param(128, lo=wire.SDR_MIN_LENGTH, hi=1024, doc="bus width, bytes (headers in one beat)")
    counter_bits: int = param(32, lo=1, hi=64, doc="counter width (saturating)")

    @property
    def offset_bits(self):
        return 32 - self.msg_bits - self.user_bits

    def validate(self):
        if self.offset_bits < 1:
            self.fail(f"msg_bits = {self.msg_bits} + user_bits = {self.user_bits} must leave offset bits in a "
                      "32-bit immediate")
        if self.msg_slots > 1 << self.msg_bits:
            self.fail(f"msg_slots = {self.msg_slots} must be <= 2**msg_bits = {1 << self.msg_bits}")
        if self.qp_base + self.generations * self.channels > 1 << 24:
            self.fail(f"qp_base = {self.qp_base} + generations * channels = {self.generations * self.channels} "
                      "must fit 24-bit QP numbers")
        if self.max_chunk > self.word_bits:
            self.fail(f"max_chunk = {self.max_chunk} must be <= word_bits = {self.word_bits} (a chunk never "
                      "spans a word)")

    def chunks(self, n_pkts, chunk):
        """Chunks of a message of ``n_pkts`` packets."""
        return -(-n_pkts // chunk)

    def words(self, n_pkts, chunk):
        """Packet-memory words a message uses (= clear-engine cycles of its post)."""
        return -(-self.chunks(n_pkts, chunk) // (self.word_bits // chunk))

    def position(self, offset, chunk):
        """(word, bit) of packet ``offset`` in the packet memory."""
        c, cpw = offset // chunk, self.word_bits // chunk
        return c // cpw, (c % cpw) * chunk + offset % chunk

    def imm_fields(self, imm):
        """(msg, offset, user) of a 32-bit immediate."""
        return (imm >> (32 - self.msg_bits), (imm >> self.user_bits) & ((1 << self.offset_bits) - 1),
                imm & ((1 << self.user_bits) - 1))


class Result(NamedTuple):
    """What one packet did: its outcome, the fields parsed (None when malformed), and its events."""
    outcome: str
    msg: int | None = None
    offset: int | None = None
    gen: int | None = None
    channel: int | None = None
    chunk_done: int | None = None
    msg_done: bool = False


class Cycle(NamedTuple):
    pkt_ready: bool
    cmd_ready: bool
    result: Result | None


@dataclass
class Slot:
    valid: bool = False
    tag: int = 0
    gen: int = 0
    n_pkts: int = 0
    chunk: int = 1
    n_chunks: int = 0
    done: int = 0


def xor_group(index, k, m):
    """XOR parity group of chunk ``index`` of a submessage: data j -> j mod m, parity i (index k+i) -> i."""
    return index % m if index < k else index - k


def ec_recoverable(missing, k, m, scheme):
    """Whether a submessage missing the chunk indices ``missing`` (in 0..k+m-1) can be decoded.

    MDS: at most m missing. XOR: at most one missing per parity group.
    """
    missing = set(missing)
    if scheme == "mds":
        return len(missing) <= m
    if scheme == "xor":
        groups = [xor_group(i, k, m) for i in missing]
        return len(groups) == len(set(groups))
    raise ValueError(f"scheme = {scheme!r}: must be 'mds' or 'xor'")


class ChunkBitmapModel:
    """Takes the ``ChunkBitmapParams`` of ``ChunkBitmap``; see the module docstring for the rules.
    ``due`` holds the results on their way to ``o`` (``LATENCY`` cycles, the oldest first)."""

    KIND = "cycle"
    IGNORES_READY = ("o",)      # the RTL has no output back-pressure

    def __init__(self, params=None):
        p = self.params = check(params, ChunkBitmapParams)
        self.pkt_mem = [[0] * p.slot_words for _ in range(p.msg_slots)]
        self.chunk_mem = [[0] * p.slot_words for _ in range(p.msg_slots)]
        self.counters = Counters(COUNTERS, p.counter_bits, "saturate")
        self.reset()

    def reset(self):
        p = self.params
        self.slots = [Slot() for _ in range(p.msg_slots)]
        self.clear_slot, self.clear_next, self.clear_left = 0, 0, 0
        self.counters.clear()
        self.saturated = False
        self.due = collections.deque([None] * LATENCY)
        self.result = None

    def _count(self, name):
        self.saturated |= self.counters[name] == self.counters.top
        self.counters.add(name)

    @property
    def busy(self):
        """The clear engine is running (both inputs back-pressured)."""
        return self.clear_left > 0

    # --- commands ------------------------------------------------------------------------------

    def _post_ok(self, cmd):
        p = self.params
        return (0 <= cmd["msg"] < 1 << p.msg_bits and 0 <= cmd["gen"] < p.generations
                and 1 <= cmd["n_pkts"] <= 1 << p.offset_bits and 1 <= cmd["chunk"] <= p.max_chunk
                and p.words(cmd["n_pkts"], cmd["chunk"]) <= p.slot_words)

    def command(self, cmd, clear=True):
        """Apply ``cmd``; a post clears its words at once unless ``clear`` is False (``step`` clears
        them one per cycle). Returns whether it was accepted (not ``cmd_rejected``)."""
        p = self.params
        if cmd["op"] == OP_POST and self._post_ok(cmd):
            index = cmd["msg"] % p.msg_slots
            n, chunk = cmd["n_pkts"], cmd["chunk"]
            self.slots[index] = Slot(True, cmd["msg"], cmd["gen"], n, chunk, p.chunks(n, chunk), 0)
            self.clear_slot, self.clear_next, self.clear_left = index, 0, p.words(n, chunk)
            if clear:
                while self.clear_left:
                    self._clear_word()
            self._count("posts")
            return True
        if cmd["op"] == OP_COMPLETE and 0 <= cmd["msg"] < 1 << p.msg_bits:
            slot = self.slots[cmd["msg"] % p.msg_slots]
            if slot.valid and slot.tag == cmd["msg"]:
                slot.valid = False
                self._count("completes")
                return True
        self._count("cmd_rejected")
        return False

    def _clear_word(self):
        self.pkt_mem[self.clear_slot][self.clear_next] = 0
        self.chunk_mem[self.clear_slot][self.clear_next] = 0
        self.clear_next += 1
        self.clear_left -= 1

    # --- packets -------------------------------------------------------------------------------

    def parse(self, raw):
        """(msg, offset, user, gen, channel) of an SDR packet, or None when it is malformed."""
        p = self.params
        raw = bytes(raw)
        if (len(raw) < wire.SDR_MIN_LENGTH
                or int.from_bytes(raw[wire.ETHERTYPE_AT:wire.ETHERTYPE_AT + 2], "big") != wire.ETHERTYPE_IPV4
                or raw[wire.IP_VERSION_IHL_AT] != wire.IPV4_VERSION_IHL5 or raw[wire.IP_PROTO_AT] != wire.IPPROTO_UDP
                or int.from_bytes(raw[wire.UDP_DPORT_AT:wire.UDP_DPORT_AT + 2], "big") != wire.ROCEV2_PORT
                or raw[wire.BTH_OPCODE_AT] != wire.SDR_OPCODE):
            return None
        q = (int.from_bytes(raw[wire.BTH_DQPN_AT:wire.BTH_DQPN_AT + 4], "big") & 0xFFFFFF) - p.qp_base
        if not 0 <= q < p.generations * p.channels:
            return None
        msg, offset, user = p.imm_fields(int.from_bytes(raw[wire.IMMDT_OFFSET:wire.IMMDT_OFFSET + 4], "big"))
        return msg, offset, user, q % p.generations, q // p.generations

    def packet(self, raw):
        """The ``Result`` of one packet, its state change and its counters."""
        p = self.params
        fields = self.parse(raw)
        if fields is None:
            self._count("malformed")
            return Result("malformed")
        msg, offset, _, gen, channel = fields
        index = msg % p.msg_slots
        slot = self.slots[index]
        outcome = ("no_slot" if not slot.valid or slot.tag != msg else "gen_mismatch" if slot.gen != gen
                   else "offset_oob" if offset >= slot.n_pkts else None)
        chunk_done, msg_done = None, False
        if outcome is None:
            word, bit = p.position(offset, slot.chunk)
            value = self.pkt_mem[index][word]
            if value >> bit & 1:
                outcome = "dup"
            else:
                outcome, value = "placed", value | 1 << bit
                self.pkt_mem[index][word] = value
                c = offset // slot.chunk
                size = min(slot.chunk, slot.n_pkts - c * slot.chunk)
                first = bit - offset % slot.chunk
                if (value >> first) & ((1 << size) - 1) == (1 << size) - 1:
                    self.chunk_mem[index][c // p.word_bits] |= 1 << (c % p.word_bits)
                    slot.done += 1
                    chunk_done, msg_done = c, slot.done == slot.n_chunks
                    self._count("chunk_done")
                    if msg_done:
                        self._count("msg_done")
        self._count(outcome)
        return Result(outcome, msg, offset, gen, channel, chunk_done, msg_done)

    # --- one clock cycle -----------------------------------------------------------------------

    def step(self, inputs):
        """One cycle of the Component's ports (see the docstring)."""
        beat, pkt = inputs["i__payload"], None
        if beat is not None and beat["first"]:
            pkt = beat["data"].to_bytes(self.params.data_bytes, "little")[:beat["keep"].bit_length()]
        shown = self.due.popleft()
        cycle = self.tick(pkt, inputs["cmd__payload"])
        self.due.append(cycle.result)
        outputs = {"i__ready": cycle.pkt_ready, "cmd__ready": cycle.cmd_ready, "o__valid": shown is not None}
        if shown is not None:
            outputs["o__payload"] = self.fields(shown)
        return outputs

    @staticmethod
    def fields(result):
        """The ``o`` payload of ``result``: the fields that hold something for its outcome."""
        out = {"outcome": OUTCOMES.index(result.outcome), "chunk_done": result.chunk_done is not None,
               "msg_done": result.msg_done}
        if result.outcome != "malformed":
            out.update(msg=result.msg, offset=result.offset, gen=result.gen, channel=result.channel)
        if result.chunk_done is not None:
            out["chunk"] = result.chunk_done
        return out

    def tick(self, pkt=None, cmd=None):
        """One cycle: inputs offered, readies and the accepted packet's ``Result`` (see the docstring)."""
        cmd_ready = not self.busy
        take_cmd = cmd is not None and cmd_ready
        pkt_ready = cmd_ready and not take_cmd
        self.result = self.packet(pkt) if pkt is not None and pkt_ready else None
        if self.busy:
            self._clear_word()
        if take_cmd:
            self.command(cmd, clear=False)
        return Cycle(pkt_ready, cmd_ready, self.result)

    # --- views ---------------------------------------------------------------------------------

    def slot_of(self, msg):
        """The slot holding ``msg`` (valid, same tag), else None."""
        slot = self.slots[msg % self.params.msg_slots]
        return slot if slot.valid and slot.tag == msg else None

    def packet_bit(self, index, offset):
        slot = self.slots[index]
        word, bit = self.params.position(offset, slot.chunk)
        return self.pkt_mem[index][word] >> bit & 1

    def chunk_bit(self, index, c):
        return self.chunk_mem[index][c // self.params.word_bits] >> (c % self.params.word_bits) & 1

    def ec_status(self, msg, k, m, scheme):
        """Per submessage of (k data + m parity) chunks of ``msg``'s slot: recoverable from the chunks
        received so far (``scheme`` 'mds' or 'xor'). The slot must hold ``msg`` with a whole number of
        submessages."""
        slot = self.slot_of(msg)
        if slot is None:
            raise ValueError(f"ec_status: msg = {msg} holds no slot")
        if slot.n_chunks % (k + m):
            raise ValueError(f"ec_status: {slot.n_chunks} chunks are not whole submessages of k + m = {k + m}")
        index = msg % self.params.msg_slots
        return [ec_recoverable([i for i in range(k + m) if not self.chunk_bit(index, base + i)], k, m, scheme)
                for base in range(0, slot.n_chunks, k + m)]

"""Cycle-accurate golden model of the DBLP bounded-loss round tracker (SPEC section 4).

innet's receiver-side (NIC) reading of DBLP; every rule below is *chosen* (only the paper's
abstract is public). ``step(inputs)`` is one clock cycle of the Component's ports (a cycle model,
``models/contract.py``), so the lockstep compares the RTL every cycle: ``i.ready`` while a beat is
offered, ``cfg.ready`` (always 1) and each output's valid and payload.

Interfaces (all streams: valid never waits on ready; payload stable until taken)
- ``i``: packet beats (``models.packet.beats_of``: data, keep, first, last), byte 0 in lane 0.
- ``cfg``: ``{"phase", "tau", "deadline"}`` writes one row of the phase table; always ready.
  A row with phase >= ``phases``, tau > 255 or deadline outside 1..2**deadline_bits-1 is ignored
  (``cfg_rejected``). Written at the clock edge: packets and the scanner see it the next cycle.
- ``fwd``: one descriptor per new packet ``{handle, job, round, idx, phase, length}``; the payload
  (``length`` bytes from byte ``DBLP_HEADER_BYTES``) stays in the packet store under ``handle``.
  Every packet gets the next handle (mod 2**handle_bits); a dropped packet's handle is freed.
- ``close``: ``{job, round, kind, cnt, count, need, retries}``, kind ``FULL``/``BOUNDED``/``ABORT``.
- ``nack``: ``{job, round, count, need, missing, retries}`` (missing = first missing idx,
  retries = NACKs sent for the round, this one included).
Each output is one register: loaded at the edge when empty or taken in that cycle ("free"), so
every output appears the cycle after the edge that decided it (latency 1).

Packet path (decision at the edge of the cycle that accepts the last beat, on the header of the
first beat; ``data_bytes >= 53`` so the whole header is in the first beat)
- Malformed: shorter than 53 bytes, not IPv4 (IHL 5) / UDP to ``port``, ver != 1, a reserved
  field or flag bit set, phase >= ``phases``, cnt = 0 or > ``e_max``, idx >= cnt; also a packet
  of the live round in its slot with another cnt or phase. Malformed packets touch no slot.
- Slot = round mod ``rounds``; tag {job, round}. Live slot, same tag: bit set -> ``dup``; else set
  the bit, count + 1, LAST remembered, forward. Live slot, other tag -> ``slot_busy``. Slot not
  live and remembering this tag as closed -> ``late``. Slot not live, other tag (or none), clean
  -> open (E = cnt, need = E - floor(tau[phase]*E/256), count 1, t_first = now, retries 0,
  phase, LAST) and forward. Drops change no state (a duplicate's LAST flag is ignored); RETX is
  informational.
- After the update: count == E -> close FULL; else LAST seen and count >= need -> close BOUNDED.
- A closed slot keeps its tag (``closed``) until a round with another tag reopens it; reuse needs
  the clear engine to have wiped the slot's bitmap (``dirty`` clear).
- ``i.ready`` is 1 on every beat but a last one; a last beat waits while the ``fwd`` or ``close``
  register is not free, or (a packet that parses) while its slot is the scanner's target, or it
  would open a dirty slot, or the scanner closes a round in that cycle (back-pressure, never a
  drop). Beats are delimited by ``last`` (``first`` is not used); non-last beats are always taken.

Deadline scanner (one slot per cycle, round-robin from slot 0 after reset)
- In SCAN it looks at slot ``scan``; a live slot whose age (now - t_first mod 2**time_bits)
  >= D[phase] is its *target*: count >= need -> close BOUNDED (E - count to ``loss_accepted``);
  else retries == ``retry_max`` -> close ABORT (``loss_aborted``); else go to SEARCH. A close
  needs a free ``close`` register (else the scanner holds on the slot) and has priority over the
  packet path: a last beat waits in a cycle the scanner closes. With no target (or after a close)
  the pointer advances by one.
- SEARCH reads one bitmap word of the target per cycle from word 0 (bits >= E masked); at the
  first word with a clear bit it sends the NACK (holding while ``nack`` is not free), sets
  retries + 1, re-arms (t_first = now) and advances the pointer past the slot.
- Limit: a ``close``/``nack`` output stalled for about 2**time_bits cycles lets ages wrap, which
  delays those deadlines.

Clear engine: wipes one bitmap word per cycle. Idle, it takes the first dirty slot in round-robin
order after the last one it cleared and wipes its word 0 in the same cycle; a slot of E packets
has ceil(E/word_bits) words; after the last one the slot is clean (at that edge).

Storage: every decision in a cycle uses the state before its edge. Slot fields are registers (the
packet path and the scanner may write two different slots in one cycle); the bitmap is a word
memory (``rounds`` x ``words`` words of ``word_bits``) with the packet path's read-modify-write
port, the clear engine's write port and the scanner's read port, never on the same slot at once.

Reset: slots not live, not closed, dirty with E = e_max (the bitmap memory keeps its contents and
the clear engine wipes every word), phase table = (tau 0, ``deadline``), counters zero.

Counters (saturating at 2**counter_bits-1): every accepted packet is exactly one of
``PACKET_COUNTERS``; ``opened`` = full + bounded + abort + live slots.
"""
from collections import namedtuple
from dataclasses import dataclass

from models import wire
from models.contract import Counters
from models.params import Params, check, param
from models.wire import DBLP_HEADER_BYTES, DBLP_OFFSET, DBLP_PORT

__all__ = ["BoundedLossTrackerParams", "BoundedLossTrackerModel", "COUNTERS", "PACKET_COUNTERS",
           "KINDS", "Outputs", "need_of", "parse"]

#: Per-packet outcomes (one each), then round and config events.
PACKET_COUNTERS = ("forwarded", "dup", "late", "slot_busy", "malformed")
COUNTERS = PACKET_COUNTERS + ("opened", "full", "bounded", "abort", "nacks", "loss_accepted",
                              "loss_aborted", "cfg_writes", "cfg_rejected")
KINDS = ("FULL", "BOUNDED", "ABORT")
#: What the RTL shows in one cycle: ``i.ready`` and the three output registers (None = not valid).
Outputs = namedtuple("Outputs", "i_ready fwd close nack")


@dataclass(frozen=True, kw_only=True)
class BoundedLossTrackerParams(Params):
    """Parameters of ``BoundedLossTracker`` and its model."""
    rounds: int = param(16, lo=1, hi=1 << 16, pow2=True, doc="round slots R (direct-mapped by round)")
    e_max: int = param(64, lo=1, hi=(1 << 16) - 1, doc="packets per round at most (bitmap bits per slot)")
    word_bits: int = param(32, lo=1, hi=512, pow2=True, doc="bitmap memory word width W")
    phases: int = param(4, lo=1, hi=16, doc="training phases (rows of the tau/deadline table)")
    retry_max: int = param(3, lo=0, hi=255, doc="NACKs before a round below its bound aborts")
    deadline: int = param(256, lo=1, doc="deadline D of every phase after reset, cycles")
    deadline_bits: int = param(16, lo=1, hi=32, doc="width of D in the phase table")
    time_bits: int = param(20, lo=2, hi=48, doc="cycle clock / t_first width")
    port: int = param(DBLP_PORT, lo=1, hi=(1 << 16) - 1, doc="UDP destination port of the shim")
    data_bytes: int = param(64, lo=DBLP_HEADER_BYTES, hi=1024, doc="bus width, bytes")
    handle_bits: int = param(16, lo=1, hi=32, doc="packet handle width (handles wrap)")
    counter_bits: int = param(32, lo=1, hi=64, doc="counter width (saturating)")

    @property
    def words(self):
        """Bitmap words per slot."""
        return -(-self.e_max // self.word_bits)

    def validate(self):
        if self.deadline >= 1 << self.deadline_bits:
            self.fail(f"deadline = {self.deadline} must fit deadline_bits = {self.deadline_bits}")
        if self.time_bits <= self.deadline_bits:
            self.fail(f"time_bits = {self.time_bits} must exceed deadline_bits = {self.deadline_bits}")
        if self.rounds + self.words >= 1 << self.deadline_bits:
            self.fail(f"rounds = {self.rounds} plus the search time must fit deadline_bits = "
                      f"{self.deadline_bits}")


def need_of(cnt, tau):
    """Packets a round of ``cnt`` needs under loss bound ``tau`` (Q0.8): cnt - floor(tau*cnt/256)."""
    return cnt - (tau * cnt >> 8)


def parse(raw_head, length, params):
    """The shim fields of a packet (first bytes ``raw_head``, ``length`` bytes), or None if malformed."""
    p = params
    if length < DBLP_HEADER_BYTES or len(raw_head) < DBLP_HEADER_BYTES:
        return None
    h = raw_head
    if (int.from_bytes(h[wire.ETHERTYPE_AT:wire.ETHERTYPE_AT + 2], "big") != wire.ETHERTYPE_IPV4
            or h[wire.IP_VERSION_IHL_AT] != wire.IPV4_VERSION_IHL5 or h[wire.IP_PROTO_AT] != wire.IPPROTO_UDP
            or int.from_bytes(h[wire.UDP_DPORT_AT:wire.UDP_DPORT_AT + 2], "big") != p.port):
        return None
    o = DBLP_OFFSET
    ver, flags, phase = h[o] >> 4, h[o] & 0xF, h[o + 1] >> 4
    job, rnd, idx, cnt, resv2 = h[o + 2], *(int.from_bytes(h[o + k:o + k + 2], "big") for k in (3, 5, 7, 9))
    if (ver != wire.DBLP_VERSION or flags & wire.DBLP_FLAGS_RESV or h[o + 1] & 0xF or resv2
            or phase >= p.phases or not 1 <= cnt <= p.e_max or idx >= cnt):
        return None
    return {"job": job, "round": rnd, "idx": idx, "cnt": cnt, "phase": phase,
            "last": bool(flags & wire.DBLP_LAST), "retx": bool(flags & wire.DBLP_RETX),
            "length": length - DBLP_HEADER_BYTES}


@dataclass
class Slot:
    """One round slot's registers (the bitmap lives in the model's word memory)."""
    live: bool = False
    closed: bool = False
    dirty: bool = True
    job: int = 0
    round: int = 0
    cnt: int = 0
    need: int = 0
    count: int = 0
    t_first: int = 0
    retries: int = 0
    phase: int = 0
    last: bool = False

    def tag(self):
        return self.job, self.round


class BoundedLossTrackerModel:
    """Takes the ``BoundedLossTrackerParams`` of ``BoundedLossTracker``; ``step`` is one cycle.

    ``tick(beat, cfg, fwd_ready, close_ready, nack_ready)`` is that cycle on the model's terms
    (``step`` is built on it): it returns the ``Outputs`` the RTL shows in that cycle (before the
    edge), then advances the state as the clock edge does. After it, ``decision`` describes the packet
    decided at that edge (or None). State a testbench may compare with the RTL: ``slots`` (``Slot``
    registers), ``bitmap[s]`` (slot s's words as one int, word w = bits w*W..w*W+W-1), ``table``,
    ``now``, ``scan``, ``search``, ``clearing``, ``counters`` (``Counters``).
    """

    KIND = "cycle"

    def __init__(self, params=None):
        p = self.params = check(params, BoundedLossTrackerParams)
        self.R, self.W, self.words = p.rounds, p.word_bits, p.words
        self.tmask = (1 << p.time_bits) - 1
        self.counters = Counters(COUNTERS, p.counter_bits, "saturate")
        self.bitmap = [0] * p.rounds                        # word memory: survives reset
        self.reset()

    def reset(self):
        p = self.params
        self.slots = [Slot(cnt=p.e_max) for _ in range(self.R)]
        self.table = [(0, p.deadline)] * p.phases          # (tau, D) per phase
        self.now = self.handle = 0
        self.inside, self.head, self.length = False, b"", 0
        self.fwd = self.close = self.nack = None
        self.scan, self.search = 0, None                    # search: (slot, word)
        self.clearing, self.cptr = None, 0                  # clearing: (slot, word)
        self.counters.clear()
        self.decision = None

    def age(self, slot):
        return (self.now - slot.t_first) & self.tmask

    # --- combinational parts ------------------------------------------------------------------

    def _target(self):
        """(slot, action) of the deadline scanner this cycle; action None = just advance."""
        if self.search is not None:
            return self.search[0], "search"
        s = self.slots[self.scan]
        if s.live and self.age(s) >= self.table[s.phase][1]:
            action = ("BOUNDED" if s.count >= s.need else "ABORT" if s.retries >= self.params.retry_max
                      else "start")
            return self.scan, action
        return None, None

    def _classify(self, h):
        """Outcome of a parsed packet against its slot: a counter name, "open" or "wait"."""
        if h is None:
            return "malformed"
        s = self.slots[h["round"] % self.R]
        tag = (h["job"], h["round"])
        if s.live:
            if s.tag() != tag:
                return "slot_busy"
            if h["cnt"] != s.cnt or h["phase"] != s.phase:
                return "malformed"
            return "dup" if self.bitmap[h["round"] % self.R] >> h["idx"] & 1 else "forwarded"
        if s.closed and s.tag() == tag:
            return "late"
        return "wait" if s.dirty else "open"

    # --- one cycle ----------------------------------------------------------------------------

    def step(self, inputs):
        beat = inputs["i__payload"]
        out = self.tick(beat, inputs["cfg__payload"], inputs["fwd__ready"], inputs["close__ready"],
                        inputs["nack__ready"])
        outputs = {"i__ready": None if beat is None else out.i_ready, "cfg__ready": 1}
        for name, event in zip(("fwd", "close", "nack"), out[1:]):
            outputs[f"{name}__valid"] = event is not None
            if event is not None:
                outputs[f"{name}__payload"] = dict(event, kind=KINDS.index(event["kind"])) if name == "close" else event
        return outputs

    def tick(self, beat=None, cfg=None, fwd_ready=True, close_ready=True, nack_ready=True):
        p = self.params
        fwd_free = self.fwd is None or fwd_ready
        close_free = self.close is None or close_ready
        nack_free = self.nack is None or nack_ready
        target, action = self._target()
        scanner_close = action in ("BOUNDED", "ABORT") and close_free

        h = outcome = None
        i_ready = True
        if beat is not None and beat["last"]:
            data = beat["data"].to_bytes(p.data_bytes, "little")
            head = self.head if self.inside else data[:DBLP_HEADER_BYTES]
            length = (self.length if self.inside else 0) + bin(beat["keep"]).count("1")
            h = parse(head, length, p)
            outcome = self._classify(h)
            blocked = h is not None and (outcome == "wait" or h["round"] % self.R == target)
            i_ready = fwd_free and close_free and not scanner_close and not blocked
        out = Outputs(i_ready, self.fwd, self.close, self.nack)

        # --- the clock edge (every decision above used the state before it) ---
        self._clear_engine()
        new_fwd = new_close = new_nack = None
        self.decision = None
        if beat is not None and i_ready:
            if not self.inside:
                data = beat["data"].to_bytes(p.data_bytes, "little")
                self.head, self.length = data[:DBLP_HEADER_BYTES], 0
            self.length += bin(beat["keep"]).count("1")
            self.inside = not beat["last"]
            if beat["last"]:
                new_fwd, new_close = self._packet(h, outcome)
        if action in ("BOUNDED", "ABORT"):
            if scanner_close:
                new_close = self._close(target, action)
                self.scan = (self.scan + 1) % self.R
        elif action == "start":
            self.search = (target, 0)
        elif action == "search":
            new_nack = self._search(nack_free)
        else:
            self.scan = (self.scan + 1) % self.R

        if cfg is not None:
            ok = (0 <= cfg["phase"] < p.phases and 0 <= cfg["tau"] <= 255
                  and 1 <= cfg["deadline"] < 1 << p.deadline_bits)
            self.counters.add("cfg_writes" if ok else "cfg_rejected")
            if ok:
                self.table[cfg["phase"]] = (cfg["tau"], cfg["deadline"])
        if fwd_free:
            self.fwd = new_fwd
        if close_free:
            self.close = new_close
        if nack_free:
            self.nack = new_nack
        self.now = (self.now + 1) & self.tmask
        return out

    def _packet(self, h, outcome):
        """Apply a decided packet; returns (fwd descriptor, close event) or Nones."""
        handle, self.handle = self.handle, (self.handle + 1) % (1 << self.params.handle_bits)
        slot = None if h is None else h["round"] % self.R
        self.decision = {"reason": "forwarded" if outcome == "open" else outcome, "slot": slot,
                         "tag": None if h is None else (h["job"], h["round"]),
                         "idx": None if h is None else h["idx"], "opened": outcome == "open",
                         "handle": handle}
        if outcome not in ("open", "forwarded"):
            self.counters.add(outcome)
            return None, None
        s = self.slots[slot]
        if outcome == "open":
            tau = self.table[h["phase"]][0]
            s.live, s.closed, s.job, s.round, s.cnt = True, False, h["job"], h["round"], h["cnt"]
            s.need, s.count, s.t_first = need_of(h["cnt"], tau), 0, self.now
            s.retries, s.phase, s.last = 0, h["phase"], False
            self.counters.add("opened")
        self.bitmap[slot] |= 1 << h["idx"]
        s.count += 1
        s.last = s.last or h["last"]
        self.counters.add("forwarded")
        fwd = {k: h[k] for k in ("job", "round", "idx", "phase", "length")}
        fwd["handle"] = handle
        close = None
        if s.count == s.cnt:
            close = self._close(slot, "FULL")
        elif s.last and s.count >= s.need:
            close = self._close(slot, "BOUNDED")
        return fwd, close

    def _close(self, slot, kind):
        s = self.slots[slot]
        s.live, s.closed, s.dirty = False, True, True
        self.counters.add(kind.lower())
        if kind == "BOUNDED":
            self.counters.add("loss_accepted", s.cnt - s.count)
        elif kind == "ABORT":
            self.counters.add("loss_aborted", s.cnt - s.count)
        return {"job": s.job, "round": s.round, "kind": kind, "cnt": s.cnt, "count": s.count,
                "need": s.need, "retries": s.retries}

    def _word(self, slot, w, cnt):
        """Word ``w`` of a slot's bitmap with the bits >= cnt masked to ones."""
        mask = (1 << self.W) - 1
        valid = max(0, min(self.W, cnt - w * self.W))
        return (self.bitmap[slot] >> (w * self.W) & mask) | (mask ^ ((1 << valid) - 1))

    def _search(self, nack_free):
        slot, w = self.search
        s = self.slots[slot]
        word = self._word(slot, w, s.cnt)
        mask = (1 << self.W) - 1
        if word == mask:
            self.search = (slot, w + 1)
            return None
        if not nack_free:
            return None
        free = ~word & mask
        missing = w * self.W + (free & -free).bit_length() - 1
        s.retries += 1
        s.t_first = self.now
        self.search = None
        self.scan = (slot + 1) % self.R
        self.counters.add("nacks")
        return {"job": s.job, "round": s.round, "count": s.count, "need": s.need, "missing": missing,
                "retries": s.retries}

    def _clear_engine(self):
        if self.clearing is None:
            for k in range(self.R):
                c = (self.cptr + k) % self.R
                if self.slots[c].dirty:
                    self.clearing = (c, 0)
                    break
            else:
                return
        c, w = self.clearing
        self.bitmap[c] &= ~(((1 << self.W) - 1) << (w * self.W))
        if w + 1 >= -(-self.slots[c].cnt // self.W):
            self.slots[c].dirty = False
            self.clearing, self.cptr = None, (c + 1) % self.R
        else:
            self.clearing = (c, w + 1)

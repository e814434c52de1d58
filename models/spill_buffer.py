"""Cycle-accurate golden model of the Spillway spill buffer manager (hdl/spill_buffer.py)."""
import collections
import struct
from dataclasses import dataclass

from models import wire
from models.params import Params, check, param

__all__ = ["SpillBufferParams", "SpillBufferModel", "COUNTERS", "MIN_LENGTH", "malformed", "flow_of",
           "CREDIT_COUNTERS", "FORWARD", "SPILL", "DROP", "CreditCoreModel", "SpillSwitchModel", "spill_header",
           "return_slot_beats"]

#: Per-reason packet counters; packets in = forwarded + pending + drained + spill_overflow + malformed.
COUNTERS = ("forwarded", "spilled", "drained", "spill_overflow", "malformed")
#: Ethernet + IPv4 + UDP: the shortest packet whose 5-tuple can be read.
MIN_LENGTH = wire.UDP_HEADER_END


@dataclass(frozen=True, kw_only=True)
class SpillBufferParams(Params):
    """Parameters of ``SpillBuffer`` / ``SpillCore`` and their model."""
    ports: int = param(4, lo=2, hi=256, doc="egress ports")
    high: int = param(24, lo=1, doc="high watermark: spill at queue depth >= high")
    low: int = param(8, lo=0, doc="low watermark: drain at queue depth <= low")
    capacity: int = param(16, lo=1, hi=1 << 16, doc="spill FIFO entries per port")
    drain_rate: int = param(1, lo=1, doc="drains per window at most")
    drain_window: int = param(2, lo=1, hi=1 << 16, doc="drain window, cycles")
    flows: int = param(16, lo=2, hi=1 << 12, pow2=True, doc="flow-table entries")
    order: str = param("flow", choices=("flow", "port"), doc="spill while the flow (or port) has spilled packets")
    depth_bits: int = param(16, lo=1, hi=32, doc="width of each qdepth input")
    handle_bits: int = param(16, lo=1, hi=32, doc="packet handle width (handles wrap)")
    data_bytes: int = param(64, lo=MIN_LENGTH, hi=1024, doc="bus width, bytes")
    counter_bits: int = param(32, lo=1, hi=64, doc="counter width")
    mtu: int = param(512, lo=MIN_LENGTH, hi=9216, doc="disaggregated: largest spillable packet, bytes (node slot)")
    return_slots: int = param(2, lo=1, hi=64, doc="disaggregated: returned packets the switch can hold")
    mode: str = param("disaggregated", choices=("disaggregated", "inswitch"),
                      doc="disaggregated (Spillway, the default): packets go to a spill node; "
                          "inswitch (the baseline): spilled handles wait in the switch")
    buffer: int = param(32, lo=1, hi=1 << 12, doc="disaggregated: ingress FIFO, beats")

    def validate(self):
        if not self.low < self.high:
            self.fail(f"low = {self.low} must be below high = {self.high}")
        if self.high >= 1 << self.depth_bits:
            self.fail(f"high = {self.high} must fit depth_bits = {self.depth_bits}")
        if self.drain_rate > self.drain_window:
            self.fail(f"drain_rate = {self.drain_rate} must be <= drain_window = {self.drain_window}")


def flow_of(packet, flows):
    """Flow-table entry of a packet: its 5-tuple, XOR-folded into log2(flows) bits."""
    src, dst = struct.unpack_from("!II", packet, wire.IP_SRC_AT)
    proto = packet[wire.IP_PROTO_AT]
    sport, dport = struct.unpack_from("!HH", packet, wire.UDP_SPORT_AT)
    key = (((((src << 32 | dst) << 8 | proto) << 16) | sport) << 16) | dport
    bits = (flows - 1).bit_length()
    flow = 0
    while key:
        flow ^= key & (flows - 1)
        key >>= bits
    return flow


def malformed(header, length, port, ports):
    """Whether a packet with these first bytes and length cannot be handled (see SpillBuffer)."""
    return (length < MIN_LENGTH
            or int.from_bytes(header[wire.ETHERTYPE_AT:wire.ETHERTYPE_AT + 2], "big") != wire.ETHERTYPE_IPV4
            or header[wire.IP_VERSION_IHL_AT] != wire.IPV4_VERSION_IHL5
            or header[wire.IP_PROTO_AT] != wire.IPPROTO_UDP or port >= ports)


class SpillBufferModel:
    """Takes the ``SpillBufferParams`` of ``SpillBuffer``; ``step`` is one clock cycle.

    ``step(beat, qdepth, o_ready)`` takes the cycle's inputs (``beat``: the dict on ``i`` when
    ``i.valid``, else None) and returns the outputs the RTL must show in that cycle:
    ``(i_ready, o_valid, o_payload)``; then it advances the state as the clock edge does.
    ``decision`` is then that cycle's decision on ``i`` (``(kind, port, length, flow)`` or None),
    ``drained_port`` the port drained in it (or None): what functional coverage samples.

    With ``mode="disaggregated"`` the constructor returns a ``SpillSwitchModel`` (the model of that
    mode's RTL), so ``SpillBufferModel(params)`` is the one entry point for both modes.
    """

    def __new__(cls, params=None):
        p = check(params, SpillBufferParams)
        if p.mode == "disaggregated":
            return SpillSwitchModel(p)
        return super().__new__(cls)

    def __init__(self, params=None):
        p = self.params = check(params, SpillBufferParams)
        self.ports, self.high, self.low, self.capacity = p.ports, p.high, p.low, p.capacity
        self.drain_rate, self.drain_window, self.flows, self.order = (
            p.drain_rate, p.drain_window, p.flows, p.order)
        self.handle_bits, self.data_bytes = p.handle_bits, p.data_bytes
        self.reset()

    def reset(self):
        self.fifos = [collections.deque() for _ in range(self.ports)]
        self.flow_count = [0] * self.flows
        self.window = self.used = self.rr = self.next_handle = 0
        self.inside, self.header, self.length = False, b"", 0
        self.out = None                                    # the output register
        self.decision = self.drained_port = None
        self.counters = dict.fromkeys(COUNTERS, 0)

    @property
    def pending(self):
        return sum(len(f) for f in self.fifos)

    def _drain_choice(self, qdepth):
        for offset in range(self.ports):
            p = (self.rr + offset) % self.ports
            if self.fifos[p] and qdepth[p] <= self.low:
                return p
        return None

    def _decide(self, beat, qdepth, load, drain_wants):
        """(i_ready, decision) for the beat on ``i``; decision is None unless a packet ends."""
        if beat is None or not beat["last"]:
            return True, None
        data = beat["data"].to_bytes(self.data_bytes, "little")
        header = self.header if self.inside else data[:MIN_LENGTH]
        length = (self.length if self.inside else 0) + bin(beat["keep"]).count("1")
        port = beat["meta"]["port"]
        if malformed(header, length, port, self.ports):
            return True, ("malformed", port, length, 0)
        flow = flow_of(header, self.flows)
        ordered = (self.flow_count[flow] if self.order == "flow" else len(self.fifos[port])) != 0
        if qdepth[port] >= self.high or ordered:
            kind = "spill_overflow" if len(self.fifos[port]) == self.capacity else "spilled"
            return True, (kind, port, length, flow)
        ready = load and not drain_wants
        return ready, (("forwarded", port, length, flow) if ready else None)

    def step(self, beat, qdepth, o_ready):
        load = self.out is None or o_ready
        chosen = self._drain_choice(qdepth)
        drain_wants = chosen is not None and self.used < self.drain_rate
        drain = drain_wants and load
        i_ready, decision = self._decide(beat, qdepth, load, drain_wants)
        outputs = (i_ready, self.out is not None, self.out)
        self.decision, self.drained_port = decision, chosen if drain else None

        # The clock edge.
        if beat is not None and i_ready:
            data = beat["data"].to_bytes(self.data_bytes, "little")
            if not self.inside:
                self.header, self.length = data[:MIN_LENGTH], 0
            self.length += bin(beat["keep"]).count("1")
            self.inside = not beat["last"]
        forwarded = drained = None
        if drain:
            entry = self.fifos[chosen].popleft()
            self.flow_count[entry["flow"]] -= 1
            self.counters["drained"] += 1
            self.rr = (chosen + 1) % self.ports
            drained = {"handle": entry["handle"], "port": chosen, "length": entry["length"], "spilled": 1}
        if decision is not None:
            kind, port, length, flow = decision
            handle, self.next_handle = self.next_handle, (self.next_handle + 1) % (1 << self.handle_bits)
            self.counters[kind] += 1
            if kind == "spilled":
                self.fifos[port].append({"handle": handle, "length": length, "flow": flow})
                self.flow_count[flow] += 1
            elif kind == "forwarded":
                forwarded = {"handle": handle, "port": port, "length": length, "spilled": 0}
        if load:
            self.out = drained or forwarded
        if self.window == self.drain_window - 1:
            self.window, self.used = 0, 0
        else:
            self.window, self.used = self.window + 1, self.used + drain
        return outputs


# --- Disaggregated mode: the descriptor-level credit core (hdl/spill_buffer.py: CreditCore) -----------

#: Verdict kinds of ``CreditCore``.
FORWARD, SPILL, DROP = 0, 1, 2
#: Per-reason counters of the credit core. Arrivals = forwarded + spilled + spill_overflow +
#: spill_oversize + malformed; spilled = reinjected + outstanding.
CREDIT_COUNTERS = ("forwarded", "spilled", "reinjected", "spill_overflow", "spill_oversize", "malformed",
                   "drain_requests", "return_malformed", "misordered")


class CreditCoreModel:
    """Cycle-accurate model of ``CreditCore``: the switch side's decisions in disaggregated mode.

    ``step(arrival, qdepth, v_ready, req_ready, ret, done)`` takes one cycle's inputs:
    ``arrival`` the descriptor on ``d`` (dict with handle, port, length, flow, malformed) or None;
    ``v_ready``; ``req_ready``; ``ret`` the origin port of a RETURN frame whose first beat arrives
    this cycle, or None; ``done`` a dict (port, flow, seq) of a re-injected packet whose last beat
    left this cycle, or None; ``hold`` a list of per-port flags (a held port asks for no drain), or None.
    It returns ``(d_ready, verdict, req_port, ret_ok)`` as the RTL shows
    them (``verdict`` a dict or None when ``d.valid`` is low; ``req_port`` None when ``req.valid`` is
    low), then advances the state as the clock edge does.

    - Arrival (verdict in the same cycle, ``d.ready = v.ready``): malformed or ``port >= ports``:
      DROP (``malformed``); spill when ``qdepth[port] >= high`` or the flow (``order="port"``: the
      port) has outstanding packets, seen before this cycle's ``done``; a spill longer than ``mtu``:
      DROP (``spill_oversize``); with no credit: DROP (``spill_overflow``); else SPILL with the
      port's next ``seq`` (a credit is taken); otherwise FORWARD.
    - Drain request (``req``): the first port at or after the round-robin pointer with
      ``qdepth <= low`` and spilled packets not yet requested, while fewer than ``return_slots``
      returns are requested or held and fewer than ``drain_rate`` requests were made in the current
      aligned window of ``drain_window`` cycles; the request is made when ``req.ready``.
    - ``ret``: accepted (``ret_ok``) when the port has requested packets not yet returned; else the
      frame is to be dropped (``return_malformed``).
    - ``done``: the credit comes back, the flow's count falls, ``reinjected``; a ``seq`` other than
      the port's next expected one counts ``misordered`` (the expectation moves on regardless).
    """

    def __init__(self, params=None):
        p = self.params = check(params, SpillBufferParams)
        self.ports, self.flows, self.order = p.ports, p.flows, p.order
        self.high, self.low, self.capacity, self.mtu = p.high, p.low, p.capacity, p.mtu
        self.rate, self.window_len, self.slots = p.drain_rate, p.drain_window, p.return_slots
        self.seq_mod = 1 << 16
        self.reset()

    def reset(self):
        P = self.ports
        self.credits = [self.capacity] * P
        self.unasked = [0] * P              # spilled, not yet requested
        self.asked = [0] * P                # requested, frame not yet arrived
        self.seq = [0] * P                  # next spill seq
        self.expect = [0] * P               # next return seq
        self.flow_count = [0] * self.flows
        self.reserved = 0                   # returns requested or held, not yet re-injected
        self.window = self.used = self.rr = 0
        self.counters = dict.fromkeys(CREDIT_COUNTERS, 0)

    def outstanding(self, port):
        return self.capacity - self.credits[port]

    def _verdict(self, a, qdepth):
        port = a["port"]
        if a["malformed"] or port >= self.ports:
            return DROP, "malformed"
        ordered = self.flow_count[a["flow"]] if self.order == "flow" else self.outstanding(port)
        if qdepth[port] < self.high and not ordered:
            return FORWARD, "forwarded"
        if a["length"] > self.mtu:
            return DROP, "spill_oversize"
        if self.credits[port] == 0:
            return DROP, "spill_overflow"
        return SPILL, "spilled"

    def _request(self, qdepth, hold):
        if self.used >= self.rate or self.reserved >= self.slots:
            return None
        for offset in range(self.ports):
            p = (self.rr + offset) % self.ports
            if self.unasked[p] and qdepth[p] <= self.low and not (hold and hold[p]):
                return p
        return None

    def step(self, arrival, qdepth, v_ready, req_ready, ret=None, done=None, hold=None):
        verdict = kind = None
        if arrival is not None:
            code, kind = self._verdict(arrival, qdepth)
            port = arrival["port"]
            verdict = {"handle": arrival["handle"], "port": port, "length": arrival["length"],
                       "flow": arrival["flow"], "kind": code,
                       "seq": self.seq[port] if code == SPILL else 0}
        req = self._request(qdepth, hold)
        ret_ok = ret is not None and ret < self.ports and self.asked[ret] > 0
        outputs = (v_ready, verdict, req, ret_ok)

        # The clock edge.
        if verdict is not None and v_ready:
            self.counters[kind] += 1
            if verdict["kind"] == SPILL:
                port = verdict["port"]
                self.credits[port] -= 1
                self.unasked[port] += 1
                self.seq[port] = (self.seq[port] + 1) % self.seq_mod
                self.flow_count[verdict["flow"]] += 1
        requested = req is not None and req_ready
        if requested:
            self.unasked[req] -= 1
            self.asked[req] += 1
            self.reserved += 1
            self.rr = (req + 1) % self.ports
            self.counters["drain_requests"] += 1
        if ret is not None:
            if ret_ok:
                self.asked[ret] -= 1
            else:
                self.counters["return_malformed"] += 1
        if done is not None:
            port = done["port"]
            self.credits[port] += 1
            self.flow_count[done["flow"] & (self.flows - 1)] -= 1
            self.reserved -= 1
            self.counters["reinjected"] += 1
            if done["seq"] != self.expect[port]:
                self.counters["misordered"] += 1
            self.expect[port] = (self.expect[port] + 1) % self.seq_mod
        if self.window == self.window_len - 1:
            self.window, self.used = 0, 0
        else:
            self.window, self.used = self.window + 1, self.used + requested
        return outputs


# --- Disaggregated mode, byte level: the switch side (hdl/spill_buffer.py: SpillBuffer, mode="disaggregated") --

H = wire.SPILL_HEADER_BYTES


def spill_header(op, port, flow=0, seq=0, count=0):
    """The 22 bytes that start every spill-link frame (``models.headers.spill_frame``/``drain_request``)."""
    from models.headers import NODE_MAC, SWITCH_MAC
    src, dst = (NODE_MAC, SWITCH_MAC) if op == wire.SPILL_RETURN else (SWITCH_MAC, NODE_MAC)
    mac = [bytes.fromhex(a.replace(":", "")) for a in (dst, src)]
    return mac[0] + mac[1] + struct.pack(">H", wire.ETHERTYPE_SPILL) + struct.pack(
        wire.SPILL_STRUCT, op, port, flow & 0xFFFF, seq & 0xFFFF, count, 0)


def return_slot_beats(params):
    """Beats of one return-buffer slot: a RETURN frame with an inner frame of ``mtu`` bytes."""
    return -(-(params.mtu + H) // params.data_bytes)


def _ones(n):
    return (1 << n) - 1


class _Encap:
    """Mirror of ``Encapsulator``'s state (see its docstring)."""

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


class _Decap:
    """Mirror of ``Decapsulator``'s state (see its docstring)."""

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


class SpillSwitchModel:
    """Cycle-accurate model of ``SpillBuffer`` in ``mode="disaggregated"`` (the switch side of the
    disaggregated Spillway); composes ``CreditCoreModel`` for the decisions.

    ``step(beat, qdepth, o_ready, spill_o_ready, spill_i)`` takes one cycle's inputs (``beat`` the
    beat on ``i`` or None, ``spill_i`` the beat on the return link or None) and returns the outputs
    the RTL shows in that cycle, a dict: ``i_ready``, ``o`` (beat with ``meta = {port, spilled}``, or
    None), ``spill_o`` (beat or None), ``credits``; then advances the state as the clock edge does.
    Data bytes past ``keep`` are don't-care. Structure (each a register-level mirror of the RTL):

    - ingress: beats are written into a FIFO of ``buffer`` beats (visible from the next cycle) while
      it has room; the parser gives the arrival descriptor at the last beat to the credit core, whose
      verdict (with the beats written) goes into a verdict FIFO in the same edge. A packet longer
      than ``buffer`` beats: beats past the ``buffer``-th are accepted and discarded, the packet is
      malformed (DROP), so the FIFO never deadlocks;
    - head: the packet at the FIFO head (verdict present) goes beat by beat to ``o`` (FORWARD), to the
      encapsulator (SPILL, header ``spill_header(DATA, port, flow, seq)``) or is discarded (DROP,
      one beat per cycle);
    - drain requests: port ``q`` is held (``CreditCore.hold``) while all its unrequested packets are
      still to be sent on ``spill_o`` (a DRAIN frame must reach the node behind the DATA frame it asks
      for: the link is FIFO);
    - ``spill_o``: when the encapsulator is between frames and the core asks for a drain, the
      one-beat DRAIN frame (``spill_header(DRAIN, port, count=1)``) goes first (the request is made
      when ``spill_o.ready``); else the encapsulator's output;
    - return link (always ready): a frame's first beat is checked (EtherType, ``op = RETURN``, more
      than 22 bytes; else it counts as a return to port ``ports``: not ok) and offered to the core
      (``ret``); an accepted frame is written beat by beat into the next return-buffer slot of
      ``return_slot_beats`` beats (beats past the slot are discarded, the slot's last beat is marked
      last), committed at its last beat; committed slots go, in order, through the decapsulator,
      which takes the port/flow/seq of each frame from its first beat;
    - ``o``: arbitrated at packet boundaries, the decapsulator (returned packets, ``spilled=1``)
      before the FIFO head (``spilled=0``); a returned packet's last beat on ``o`` is the core's
      ``done``.
    """

    def __init__(self, params=None):
        p = self.params = check(params, SpillBufferParams)
        if p.mode != "disaggregated":
            raise ValueError(f"SpillSwitchModel: mode = {p.mode!r} must be 'disaggregated'")
        self.W, self.ports, self.flows, self.buffer = p.data_bytes, p.ports, p.flows, p.buffer
        self.slots, self.slot_beats = p.return_slots, return_slot_beats(p)
        self.core = CreditCoreModel(p)
        self.reset()

    def reset(self):
        self.core.reset()
        self.inside, self.header, self.length, self.wcount, self.handle = False, b"", 0, 0, 0
        self.data, self.verdicts, self.hindex = collections.deque(), collections.deque(), 0
        self.enc, self.dec = _Encap(self.W), _Decap(self.W)
        self.rx_inside, self.wr_ok, self.wr_slot, self.wr_index = False, False, 0, 0
        self.mem = [[None] * self.slot_beats for _ in range(self.slots)]
        self.committed, self.rd_slot, self.rd_index = 0, 0, 0
        self.ret_hdr = (0, 0, 0)
        self.owner = None
        self.unsent = [0] * self.ports      # spilled packets not yet sent whole on spill_o, per port

    @property
    def counters(self):
        return self.core.counters

    def outstanding(self):
        return sum(self.core.outstanding(q) for q in range(self.ports))

    def _arrival(self, beat, discard):
        data = beat["data"].to_bytes(self.W, "little")
        header = self.header if self.inside else data[:MIN_LENGTH]
        length = ((self.length if self.inside else 0) + bin(beat["keep"]).count("1")) & 0xFFFF
        port = beat["meta"]["port"]
        bad = discard or malformed(header, length, port, 1 << 16)
        flow = flow_of(header, self.flows) if len(header) >= MIN_LENGTH else 0
        return {"handle": self.handle, "port": port, "length": length, "flow": flow, "malformed": int(bad)}

    def step(self, beat, qdepth, o_ready, spill_o_ready, spill_i=None):
        W, core = self.W, self.core
        # Ingress.
        discard = self.wcount == self.buffer
        i_ready = len(self.data) < self.buffer or discard
        take = beat is not None and i_ready
        write = take and not discard
        arrival = self._arrival(beat, discard) if take and beat["last"] else None

        # FIFO head.
        verdict = self.verdicts[0] if self.verdicts else None
        hbeat = self.data[0] if verdict is not None else None
        kind = verdict["kind"] if verdict is not None else None
        f_beat = (dict(hbeat, first=int(self.hindex == 0), meta={"port": verdict["port"] & 0xFF, "spilled": 0})
                  if kind == FORWARD else None)
        s_beat = dict(hbeat, first=int(self.hindex == 0), meta={}) if kind == SPILL else None
        hdr = spill_header(wire.SPILL_DATA, verdict["port"], verdict["flow"], verdict["seq"]) if verdict else bytes(H)

        # Return buffer read side and decapsulator.
        r_in = self.mem[self.rd_slot][self.rd_index] if self.committed else None
        r_out = self.dec.out(r_in)
        if r_out is not None:
            r_out = dict(r_out, meta={"port": self.ret_hdr[0], "spilled": 1})

        # o arbitration (packet boundaries, returns first).
        sel_r = self.owner == "R" or (self.owner is None and r_out is not None)
        sel_f = self.owner == "F" or (self.owner is None and r_out is None and f_beat is not None)
        o = r_out if sel_r else (f_beat if sel_f else None)
        r_ready, f_ready = o_ready and sel_r, o_ready and sel_f
        done = None
        if sel_r and o is not None and o_ready and o["last"]:
            port, flow, seq = self.ret_hdr
            done = {"port": port, "flow": flow, "seq": seq}

        # spill_o: a drain request first at frame boundaries, else the encapsulator.
        enc_busy = self.enc.inside or self.enc.extra
        req_ready = not enc_busy and spill_o_ready
        e_out = self.enc.out(s_beat, hdr)

        # Return link, first beat.
        ret = None
        rx_first = spill_i is not None and not self.rx_inside
        if rx_first:
            raw = spill_i["data"].to_bytes(W, "little")
            good = (int.from_bytes(raw[wire.ETHERTYPE_AT:wire.ETHERTYPE_AT + 2], "big") == wire.ETHERTYPE_SPILL
                    and raw[wire.SPILL_OP_AT] == wire.SPILL_RETURN
                    and not (spill_i["last"] and not spill_i["keep"] >> H & 1))
            ret = raw[wire.SPILL_PORT_AT] if good else self.ports

        credits = list(core.credits)
        hold = [core.unasked[q] <= self.unsent[q] for q in range(self.ports)]
        _, core_verdict, req, ret_ok = core.step(arrival, qdepth, True, req_ready, ret, done, hold)
        drain_sel = req is not None and not enc_busy
        if drain_sel:
            spill_o = {"data": int.from_bytes(spill_header(wire.SPILL_DRAIN, req, count=1), "little"),
                       "keep": _ones(H), "first": 1, "last": 1, "meta": {}}
        else:
            spill_o = e_out
        e_ready = spill_o_ready and not drain_sel
        outputs = {"i_ready": i_ready, "o": o, "spill_o": spill_o, "credits": credits}

        # The clock edge. Ingress.
        if take:
            data = beat["data"].to_bytes(W, "little")
            if not self.inside:
                self.header, self.length = data[:MIN_LENGTH], 0
            self.length += bin(beat["keep"]).count("1")
            self.inside = not beat["last"]
        pop_f = f_beat is not None and f_ready
        pop_s = s_beat is not None and self.enc.i_ready(e_ready)
        pop = pop_f or pop_s or kind == DROP
        self.enc.edge(s_beat, e_ready)
        if core_verdict is not None and core_verdict["kind"] == SPILL:
            self.unsent[core_verdict["port"]] += 1
        if pop_s and (hbeat["last"] or self.hindex + 1 == verdict["beats"]):
            self.unsent[verdict["port"]] -= 1
        if pop:
            end = hbeat["last"] or self.hindex + 1 == verdict["beats"]
            self.data.popleft()
            if end:
                self.verdicts.popleft()
            self.hindex = 0 if end else self.hindex + 1
        if write:
            self.data.append({"data": beat["data"], "keep": beat["keep"], "last": beat["last"]})
            assert len(self.data) <= self.buffer
        if take:
            if beat["last"]:
                self.verdicts.append(dict(core_verdict, beats=self.wcount + write))
                self.handle = (self.handle + 1) % (1 << self.params.handle_bits)
                assert len(self.verdicts) <= self.buffer
            self.wcount = 0 if beat["last"] else self.wcount + write

        # Return buffer read side.
        if r_in is not None and self.dec.i_ready(r_ready):
            if self.rd_index == 0:
                raw = r_in["data"].to_bytes(W, "little")
                flow, seq = struct.unpack_from(">HH", raw, wire.SPILL_FLOW_AT)
                self.ret_hdr = (raw[wire.SPILL_PORT_AT], flow, seq)
            if r_in["last"]:
                self.rd_index, self.rd_slot, self.committed = 0, (self.rd_slot + 1) % self.slots, self.committed - 1
            else:
                self.rd_index += 1
        self.dec.edge(r_in, r_ready)
        if o is not None and o_ready:
            self.owner = None if o["last"] else ("R" if sel_r else "F")

        # Return buffer write side.
        if spill_i is not None:
            ok = ret_ok if rx_first else self.wr_ok
            if ok and self.wr_index < self.slot_beats:
                self.mem[self.wr_slot][self.wr_index] = {
                    "data": spill_i["data"], "keep": spill_i["keep"],
                    "last": int(spill_i["last"] or self.wr_index == self.slot_beats - 1)}
            if ok and spill_i["last"]:
                self.wr_slot, self.committed = (self.wr_slot + 1) % self.slots, self.committed + 1
                assert self.committed <= self.slots
            if rx_first:
                self.wr_ok = ret_ok
            self.rx_inside = not spill_i["last"]
            self.wr_index = 0 if spill_i["last"] else min(self.wr_index + 1, self.slot_beats)
        return outputs

"""Cycle-accurate golden model of the Spillway spill buffer manager (hdl/spill_buffer.py)."""
import collections
import struct
from dataclasses import dataclass

from models import wire
from models.params import Params, check, param

__all__ = ["SpillBufferParams", "SpillBufferModel", "COUNTERS", "MIN_LENGTH", "malformed", "flow_of",
           "CREDIT_COUNTERS", "FORWARD", "SPILL", "DROP", "CreditCoreModel"]

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
    """

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
    left this cycle, or None. It returns ``(d_ready, verdict, req_port, ret_ok)`` as the RTL shows
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

    def _request(self, qdepth):
        if self.used >= self.rate or self.reserved >= self.slots:
            return None
        for offset in range(self.ports):
            p = (self.rr + offset) % self.ports
            if self.unasked[p] and qdepth[p] <= self.low:
                return p
        return None

    def step(self, arrival, qdepth, v_ready, req_ready, ret=None, done=None):
        verdict = kind = None
        if arrival is not None:
            code, kind = self._verdict(arrival, qdepth)
            port = arrival["port"]
            verdict = {"handle": arrival["handle"], "port": port, "length": arrival["length"],
                       "flow": arrival["flow"], "kind": code,
                       "seq": self.seq[port] if code == SPILL else 0}
        req = self._request(qdepth)
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

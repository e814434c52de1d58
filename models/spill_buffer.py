"""Cycle-accurate golden model of the Spillway spill buffer manager (hdl/spill_buffer.py)."""
import collections
import struct
from dataclasses import dataclass

from models import wire
from models.params import Params, check, param

__all__ = ["SpillBufferParams", "SpillBufferModel", "COUNTERS", "MIN_LENGTH", "malformed", "flow_of"]

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

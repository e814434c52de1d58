"""Cycle-accurate golden model of the Spillway spill buffer manager (hdl/spill_buffer.py)."""
import collections
import struct

__all__ = ["SpillBufferModel", "malformed", "flow_of"]

MIN_LENGTH = 42


def flow_of(packet, flows):
    """Flow-table entry of a packet: its 5-tuple, XOR-folded into log2(flows) bits."""
    src, dst = struct.unpack_from("!II", packet, 26)
    proto = packet[23]
    sport, dport = struct.unpack_from("!HH", packet, 34)
    key = (((((src << 32 | dst) << 8 | proto) << 16) | sport) << 16) | dport
    bits = (flows - 1).bit_length()
    flow = 0
    while key:
        flow ^= key & (flows - 1)
        key >>= bits
    return flow


def malformed(header, length, port, ports):
    """Whether a packet with these first bytes and length cannot be handled (see SpillBuffer)."""
    return (length < MIN_LENGTH or header[12:14] != b"\x08\x00" or header[14] != 0x45
            or header[23] != 17 or port >= ports)


class SpillBufferModel:
    """Same parameters as ``SpillBuffer``; ``step`` is one clock cycle.

    ``step(beat, qdepth, o_ready)`` takes the cycle's inputs (``beat``: the dict on ``i`` when
    ``i.valid``, else None) and returns the outputs the RTL must show in that cycle:
    ``(i_ready, o_valid, o_payload)``; then it advances the state as the clock edge does.
    """

    def __init__(self, ports=4, high=24, low=8, capacity=16, drain_rate=1, drain_window=2,
                 flows=16, order="flow", depth_bits=16, handle_bits=16, data_bytes=64,
                 counter_bits=32):
        self.ports, self.high, self.low, self.capacity = ports, high, low, capacity
        self.drain_rate, self.drain_window, self.flows, self.order = drain_rate, drain_window, flows, order
        self.handle_bits, self.data_bytes = handle_bits, data_bytes
        self.reset()

    def reset(self):
        self.fifos = [collections.deque() for _ in range(self.ports)]
        self.flow_count = [0] * self.flows
        self.window = self.used = self.rr = self.next_handle = 0
        self.inside, self.header, self.length = False, b"", 0
        self.out = None                                    # the output register
        self.counters = dict.fromkeys(("forwarded", "spilled", "drained", "spill_overflow",
                                       "malformed"), 0)

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

"""Cycle-accurate golden model of Spillway's in-switch buffering baseline (``hdl/spillway/inswitch.py``)."""
import collections

from models.contract import Counters
from models.params import check
from models.spillway.arrival import MIN_LENGTH, flow_of, malformed
from models.spillway.params import InSwitchParams

__all__ = ["InSwitchModel", "COUNTERS"]

#: Per-reason packet counters; packets in = forwarded + pending + drained + spill_overflow + malformed.
COUNTERS = ("forwarded", "spilled", "drained", "spill_overflow", "malformed")


class InSwitchModel:
    """Cycle-accurate model (``models/contract.py``) of ``InSwitchSpillBuffer``, the in-switch baseline.

    ``tick(beat, qdepth, o_ready)`` is one clock cycle: it takes the cycle's inputs (``beat``: the dict
    on ``i`` when ``i.valid``, else None) and returns the outputs the RTL must show in that cycle,
    ``(i_ready, o_valid, o_payload)``; then it advances the state as the clock edge does; ``step``
    speaks the contract (``i.ready`` is named only while ``i.valid``: the RTL's depends on the payload).
    ``decision`` is then that cycle's decision on ``i`` (``(kind, port, length, flow)`` or None),
    ``drained_port`` the port drained in it (or None): what functional coverage samples.
    """

    KIND = "cycle"

    def __init__(self, params=None):
        p = self.params = check(params, InSwitchParams)
        self.ports, self.high, self.low, self.capacity = p.ports, p.high, p.low, p.capacity
        self.drain_rate, self.drain_window, self.flows, self.order = (
            p.drain_rate, p.drain_window, p.flows, p.order)
        self.handle_bits, self.data_bytes = p.handle_bits, p.data_bytes
        self.counters = Counters(COUNTERS, p.counter_bits, "wrap")
        self.reset()

    def reset(self):
        self.fifos = [collections.deque() for _ in range(self.ports)]
        self.flow_count = [0] * self.flows
        self.window = self.used = self.rr = self.next_handle = 0
        self.inside, self.header, self.length = False, b"", 0
        self.out = None                                    # the output register
        self.decision = self.drained_port = None
        self.counters.clear()

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

    def step(self, inputs):
        stored = [len(f) for f in self.fifos]
        beat = inputs["i__payload"]
        i_ready, o_valid, o_payload = self.tick(beat, inputs["qdepth"], inputs["o__ready"])
        return {"i__ready": None if beat is None else int(i_ready), "o__valid": int(o_valid), "o__payload": o_payload,
                "stored": stored, "pending": sum(stored)}

    def tick(self, beat, qdepth, o_ready):
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
            self.counters.add("drained")
            self.rr = (chosen + 1) % self.ports
            drained = {"handle": entry["handle"], "port": chosen, "length": entry["length"], "spilled": 1}
        if decision is not None:
            kind, port, length, flow = decision
            handle, self.next_handle = self.next_handle, (self.next_handle + 1) % (1 << self.handle_bits)
            self.counters.add(kind)
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

"""Cycle-accurate golden model of the disaggregated switch side's decisions (``hdl/spillway/credit.py``)."""
from models.contract import Counters
from models.params import check
from models.spillway.params import SpillSwitchParams

__all__ = ["CreditCoreModel", "CREDIT_COUNTERS", "FORWARD", "SPILL", "DROP"]

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
        p = self.params = check(params, SpillSwitchParams)
        self.ports, self.flows, self.order = p.ports, p.flows, p.order
        self.high, self.low, self.capacity, self.mtu = p.high, p.low, p.capacity, p.mtu
        self.rate, self.window_len, self.slots = p.drain_rate, p.drain_window, p.return_slots
        self.seq_mod = 1 << 16
        self.counters = Counters(CREDIT_COUNTERS, p.counter_bits, "wrap")
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
        self.counters.clear()

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
            self.counters.add(kind)
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
            self.counters.add("drain_requests")
        if ret is not None:
            if ret_ok:
                self.asked[ret] -= 1
            else:
                self.counters.add("return_malformed")
        if done is not None:
            port = done["port"]
            self.credits[port] += 1
            self.flow_count[done["flow"] & (self.flows - 1)] -= 1
            self.reserved -= 1
            self.counters.add("reinjected")
            if done["seq"] != self.expect[port]:
                self.counters.add("misordered")
            self.expect[port] = (self.expect[port] + 1) % self.seq_mod
        if self.window == self.window_len - 1:
            self.window, self.used = 0, 0
        else:
            self.window, self.used = self.window + 1, self.used + requested
        return outputs

"""Transports of the scenarios: RoCE's go-back-N with DCQCN-like rate control, selective repeat, and
per-packet spraying over paths.

Times are the calendar's units; rates are bytes per time unit.
"""
from scenarios.net.port import CE, ECT0, Packet

__all__ = ["Dcqcn", "GoBackN", "SelectiveRepeat", "Spray"]


class Dcqcn:
    """DCQCN's reaction point, simplified (Zhu et al., SIGCOMM 2015, *chosen* constants): a CNP cuts the
    rate to ``rate * (1 - alpha / 2)`` (the old rate becomes the target) and raises ``alpha`` by ``g``;
    every ``period`` without a CNP ``alpha`` decays, and the rate recovers halfway to its target (fast
    recovery, ``fast`` periods) and then raises the target by ``increase`` (additive increase), up to
    ``line``. ``cnp_gap``: the notification point sends at most one CNP per flow per gap."""

    def __init__(self, calendar, line, period, increase, g=1 / 16, fast=5, floor=None, cnp_gap=0):
        self.cal, self.line, self.period, self.increase, self.g, self.fast = calendar, line, period, increase, g, fast
        self.floor = floor if floor is not None else line / 1000
        self.cnp_gap = cnp_gap
        self.rate = self.target = line
        self.alpha, self.stage, self.cuts = 1.0, 0, 0
        self.last_cnp = None
        self.timer = False

    def cnp(self):
        """A congestion notification from the receiver."""
        self.target, self.rate = self.rate, max(self.floor, self.rate * (1 - self.alpha / 2))
        self.alpha = (1 - self.g) * self.alpha + self.g
        self.stage, self.cuts, self.last_cnp = 0, self.cuts + 1, self.cal.now
        if not self.timer:
            self.timer = True
            self.cal.after(self.period, self._recover)

    def _recover(self):
        if self.last_cnp is not None and self.cal.now - self.last_cnp < self.period:
            self.cal.after(self.period, self._recover)
            return
        self.alpha *= 1 - self.g
        self.stage += 1
        if self.stage > self.fast:
            self.target = min(self.line, self.target + self.increase)
        self.rate = min(self.line, (self.rate + self.target) / 2)
        if self.rate >= self.line * 0.999:
            self.rate, self.timer = self.line, False
        else:
            self.cal.after(self.period, self._recover)


class GoBackN:
    """A RoCE RC flow of ``packets`` packets of ``size`` bytes: the requester and its responder.

    Requester: sends in PSN order at its rate (``dcqcn.rate`` or ``line``) while fewer than ``window``
    packets are unacknowledged; on a NAK it goes back to the NAK's PSN; without ACK progress for ``rto`` it
    goes back to the first unacknowledged PSN. Responder (``receive``): takes only the next expected PSN,
    drops others; the first out-of-order packet after an in-order one gets a NAK (RoCE's sequence-error
    NAK, one per gap); every in-order packet is ACKed; a CE-marked packet gets a CNP (at most one per
    ``dcqcn.cnp_gap``). ACKs, NAKs and CNPs take ``ack_delay`` back (the reverse path is not congested).
    ``send(packet)`` puts a packet on the first hop; ``done(flow)`` is called when the responder has
    every packet, ``progress(flow)`` after each in-order packet; ``allow(n)`` lets the requester send the
    first ``n`` packets only (a collective's step dependency; all of them by default). ``sent``, ``resent``,
    ``discarded``, ``finish`` (time) describe the run."""

    def __init__(self, calendar, name, packets, size, send, window, rto, ack_delay, line, dcqcn=None, done=None,
                 progress=None, tag=None):
        if packets < 1 or window < 1 or rto <= 0:
            raise ValueError(f"GoBackN {name}: packets, window >= 1 and rto > 0 needed")
        self.cal, self.name, self.packets, self.size, self._send = calendar, name, packets, size, send
        self.window, self.rto, self.ack_delay, self.line, self.dcqcn = window, rto, ack_delay, line, dcqcn
        self.on_done, self.on_progress, self.tag = done, progress, tag
        self.allowed = packets
        self.next = self.una = self.expected = 0
        self.sent = self.resent = self.discarded = self.highest = 0
        self.nak_sent = False
        self.start = self.finish = None
        self.free_at = 0
        self.pumping = False
        self.progress = 0               # time of the last ACK progress (or of the first packet outstanding)
        self.rto_armed = False

    @property
    def rate(self):
        return self.dcqcn.rate if self.dcqcn is not None else self.line

    @property
    def delivered(self):
        return self.expected

    def allow(self, n):
        """Let the requester send the first ``n`` packets."""
        self.allowed = min(n, self.packets)
        self._pump()

    def begin(self):
        """Start sending (now)."""
        self.start = self.progress = self.cal.now
        self._pump()

    def _pump(self):
        if self.pumping or self.finish is not None:
            return
        if self.next >= min(self.una + self.window, self.allowed):
            return
        self.pumping = True
        self.cal.at(max(self.cal.now, self.free_at), self._transmit)

    def _transmit(self):
        self.pumping = False
        if self.finish is not None or self.next >= min(self.una + self.window, self.allowed):
            return
        if self.una == self.next:
            self.progress = self.cal.now
        retx = self.next < self.highest
        self.resent += retx
        self.sent += 1
        self._send(Packet(self, self.next, self.size, ECT0, retx, self.tag, self.cal.now))
        self.next += 1
        self.highest = max(self.highest, self.next)
        self.free_at = self.cal.now + self.size / self.rate
        if not self.rto_armed:
            self.rto_armed = True
            self.cal.after(self.rto, self._timeout)
        self._pump()

    def _timeout(self):
        self.rto_armed = False
        if self.finish is not None or self.una >= self.next:
            return                      # re-armed by the next transmission
        due = self.progress + self.rto
        if self.cal.now >= due:         # no ACK progress for rto: go back
            self.next, self.progress = self.una, self.cal.now
            self._pump()
            due = self.cal.now + self.rto
        self.rto_armed = True
        self.cal.at(due, self._timeout)

    # --- responder -------------------------------------------------------------------------------------

    def receive(self, packet):
        """A packet of this flow arrives at the responder."""
        if packet.ecn == CE and self.dcqcn is not None and (
                self.dcqcn.last_cnp is None or self.cal.now - self.dcqcn.last_cnp >= self.dcqcn.cnp_gap):
            self.dcqcn.last_cnp = self.cal.now           # the NP's per-flow CNP pacing
            self.cal.after(self.ack_delay, self.dcqcn.cnp)
        if packet.seq != self.expected:
            self.discarded += 1
            if packet.seq > self.expected and not self.nak_sent:
                self.nak_sent = True
                self.cal.after(self.ack_delay, self._nak, self.expected)
            return
        self.expected += 1
        self.nak_sent = False
        self.cal.after(self.ack_delay, self._ack, self.expected)
        if self.on_progress:
            self.on_progress(self)
        if self.expected == self.packets:
            self.finish = self.cal.now
            if self.on_done:
                self.on_done(self)

    def _ack(self, psn):
        if psn > self.una:
            self.una, self.progress = psn, self.cal.now
            self._pump()

    def _nak(self, psn):
        self._ack(psn)
        if self.finish is None and self.next > psn:
            self.next = psn
            self._pump()


class SelectiveRepeat:
    """Selective repeat over ``items`` (chunks): ``start(item, at)`` sends an item at time ``at`` and again
    every ``period`` (= RTO + the injection time, App. A's O) until ``ack(item)`` or ``stop()`` (the sender
    learnt the whole message arrived); ``send(item)`` transmits once. ``sent`` counts transmissions."""

    def __init__(self, calendar, send, period):
        self.cal, self._send, self.period = calendar, send, period
        self.acked = set()
        self.sent = 0
        self.stopped = False

    def start(self, item, at):
        self.cal.at(at, self._fire, item)

    def _fire(self, item):
        if item in self.acked or self.stopped:
            return
        self.sent += 1
        self._send(item)
        self.cal.after(self.period, self._fire, item)

    def ack(self, item):
        self.acked.add(item)

    def stop(self):
        self.stopped = True


class Spray:
    """MRC-style spraying: each packet on the next usable path of ``paths`` in turn; ``skip(path)`` (an ECN
    echo) passes a path over once; ``fail(path)`` retires it, ``revive(path)`` brings it back."""

    def __init__(self, paths):
        self.paths = list(paths)
        self.cursor = 0
        self.skipped, self.failed = set(), set()

    def pick(self):
        """The path of the next packet, or None if every path is retired."""
        for _ in range(2 * len(self.paths)):
            path = self.paths[self.cursor]
            self.cursor = (self.cursor + 1) % len(self.paths)
            if path in self.failed:
                continue
            if path in self.skipped:
                self.skipped.discard(path)
                continue
            return path
        return None

    def skip(self, path):
        self.skipped.add(path)

    def fail(self, path):
        self.failed.add(path)

    def revive(self, path):
        self.failed.discard(path)

"""Collectives over transport flows: ring all-reduce with its step dependency, all-to-all, and
parameter-server rounds.

A collective opens its flows through ``connect(src, dst, packets, done, progress)``, which returns a
transport flow (``transports.GoBackN`` or one with the same ``begin``/``allow``/``delivered``); the
scenario decides the path and the transport. ``finish`` is the time the collective completed.
"""
__all__ = ["RingAllReduce", "AllToAll", "Rounds"]


class RingAllReduce:
    """Ring all-reduce of ``ranks`` ranks: ``2 (ranks - 1)`` steps of ``chunk`` packets, rank ``r`` sending to
    ``r + 1`` over one flow. Step dependency: rank ``r`` sends step ``s`` once it has received step
    ``s - run_ahead`` from ``r - 1`` (``run_ahead`` 1: the strict dependency of a ring; more lets a rank run
    ahead with later chunks of a pipelined ring). ``done(ring)`` when every flow has delivered."""

    def __init__(self, calendar, ranks, chunk, connect, run_ahead=1, done=None, name="ring"):
        if ranks < 2 or chunk < 1 or run_ahead < 1:
            raise ValueError(f"RingAllReduce {name}: ranks >= 2, chunk >= 1, run_ahead >= 1 needed")
        self.cal, self.ranks, self.chunk, self.run_ahead, self.on_done, self.name = (
            calendar, ranks, chunk, run_ahead, done, name)
        self.steps = 2 * (ranks - 1)
        self.start = self.finish = None
        self.left = ranks
        self.flows = [connect(r, (r + 1) % ranks, self.steps * chunk, self._flow_done, self._progress)
                      for r in range(ranks)]
        self.successor = {id(f): self.flows[(r + 1) % ranks] for r, f in enumerate(self.flows)}

    def begin(self):
        self.start = self.cal.now
        for flow in self.flows:
            flow.allow(self.run_ahead * self.chunk)
            flow.begin()

    def step_of(self, flow):
        """Steps ``flow``'s receiver has completed."""
        return flow.delivered // self.chunk

    def _progress(self, flow):
        nxt = self.successor[id(flow)]
        nxt.allow((flow.delivered // self.chunk + self.run_ahead) * self.chunk)

    def _flow_done(self, flow):
        self.left -= 1
        if not self.left:
            self.finish = self.cal.now
            if self.on_done:
                self.on_done(self)


class AllToAll:
    """All-to-all: every source in ``sources`` sends ``packets`` to every destination in ``destinations``
    (ranks of two groups, e.g. two datacenters; with ``same_group`` one group, each rank to the others),
    all flows at once. ``done(collective)`` when every flow has delivered."""

    def __init__(self, calendar, sources, destinations, packets, connect, done=None, same_group=False,
                 name="all-to-all"):
        self.cal, self.on_done, self.name = calendar, done, name
        self.start = self.finish = None
        self.flows = [connect(s, d, packets, self._flow_done, None) for s in sources for d in destinations
                      if not (same_group and s == d)]
        if not self.flows:
            raise ValueError(f"AllToAll {name}: no flow between {sources} and {destinations}")
        self.left = len(self.flows)

    def begin(self):
        self.start = self.cal.now
        for flow in self.flows:
            flow.begin()

    def _flow_done(self, flow):
        self.left -= 1
        if not self.left:
            self.finish = self.cal.now
            if self.on_done:
                self.on_done(self)


class Rounds:
    """Parameter-server rounds of one job: round ``r`` starts (``start(r)``) once round ``r - window`` has
    completed (``complete(r)``, called by the scenario when the workers learn the round's result), at
    most ``window`` rounds outstanding; ``done(rounds)`` after the last. ``finish`` is its time."""

    def __init__(self, calendar, rounds, window, start, done=None):
        if rounds < 1 or window < 1:
            raise ValueError(f"Rounds: rounds >= 1 and window >= 1 needed, got {rounds}, {window}")
        self.cal, self.rounds, self.window, self._start, self.on_done = calendar, rounds, window, start, done
        self.completed = set()
        self.finish = None

    def begin(self):
        for r in range(min(self.window, self.rounds)):
            self._start(r)

    def complete(self, r):
        """Round ``r``'s result reached the workers (repeats are ignored)."""
        if r in self.completed:
            return False
        self.completed.add(r)
        if r + self.window < self.rounds:
            self._start(r + self.window)
        if len(self.completed) == self.rounds:
            self.finish = self.cal.now
            if self.on_done:
                self.on_done(self)
        return True

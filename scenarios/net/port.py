"""Packets, and the output port every hop of a scenario's network is made of: a FIFO queue with tail drop,
ECN marking and PFC, served onto a link of some bandwidth and latency."""
__all__ = ["Packet", "Port", "Ecn", "Pfc"]

NOT_ECT, ECT0, CE = 0, 2, 3


class Packet:
    """One packet: its ``flow`` (the transport object that sent it), sequence number ``seq``, ``size`` in
    bytes, ``ecn`` (``ECT0`` when sent by an ECN-capable transport, ``CE`` once marked), ``retx`` (a
    retransmission) and ``tag`` (what else a scenario carries: a step, a path, a frame)."""

    __slots__ = ("flow", "seq", "size", "ecn", "retx", "tag", "sent")

    def __init__(self, flow, seq, size, ecn=ECT0, retx=False, tag=None, sent=0):
        self.flow, self.seq, self.size, self.ecn, self.retx, self.tag, self.sent = flow, seq, size, ecn, retx, tag, sent

    @property
    def marked(self):
        return self.ecn == CE


class Ecn:
    """RED-like marking as DCQCN's switches do (on enqueue, *chosen*): an ECT packet that finds ``kmin`` or
    more packets queued is marked CE with probability rising linearly to ``pmax`` at ``kmax``, always above."""

    def __init__(self, kmin, kmax, pmax, rng):
        if not 0 <= kmin <= kmax or not 0 < pmax <= 1:
            raise ValueError(f"Ecn: need 0 <= kmin <= kmax and 0 < pmax <= 1, got {kmin}, {kmax}, {pmax}")
        self.kmin, self.kmax, self.pmax, self.rng = kmin, kmax, pmax, rng

    def marks(self, depth):
        if depth < self.kmin:
            return False
        if depth >= self.kmax:
            return True
        return self.rng.random() < self.pmax * (depth - self.kmin + 1) / (self.kmax - self.kmin + 1)


class Pfc:
    """Priority flow control of one port: ``pause(True)`` is called (after ``delay``, the pause frame's
    flight) when the queue reaches ``xoff`` packets, ``pause(False)`` when it is back at ``xon``."""

    def __init__(self, xoff, xon, pause, delay=0):
        if not 0 <= xon < xoff:
            raise ValueError(f"Pfc: need 0 <= xon < xoff, got xon = {xon}, xoff = {xoff}")
        self.xoff, self.xon, self.pause, self.delay = xoff, xon, pause, delay
        self.paused = False


class Port:
    """An output queue and its link. ``send(packet)`` queues a packet (``capacity`` packets at most: tail
    drop beyond, ``on_drop(packet)`` told); the port serialises one packet at a time at ``bandwidth``
    bytes per time unit and hands it to ``deliver(packet)`` ``latency`` after its last byte left.
    ``ecn`` (an ``Ecn``) marks on enqueue; ``pfc`` (a ``Pfc``) pauses the sender upstream;
    ``paused`` (set by the downstream port's PFC through ``pause``) stops the service after the packet
    on the wire. ``depth`` counts the packets waiting and the one being sent."""

    def __init__(self, calendar, deliver, bandwidth, latency=0, capacity=None, ecn=None, pfc=None, on_drop=None,
                 name=""):
        if bandwidth <= 0 or latency < 0 or (capacity is not None and capacity < 1):
            raise ValueError(f"Port {name}: bandwidth > 0, latency >= 0, capacity >= 1 needed, got "
                             f"{bandwidth}, {latency}, {capacity}")
        self.cal, self.deliver, self.bandwidth, self.latency = calendar, deliver, bandwidth, latency
        self.capacity, self.ecn, self.pfc, self.on_drop, self.name = capacity, ecn, pfc, on_drop, name
        self.queue = []
        self.head = 0                   # index of the next packet to serve in ``queue`` (a list used as FIFO)
        self.busy = self.paused = False
        self.sent = self.dropped = self.marked = self.max_depth = 0

    @property
    def depth(self):
        return len(self.queue) - self.head + self.busy

    def send(self, packet):
        """Queue ``packet``; False if it was dropped (queue full)."""
        depth = self.depth
        if self.capacity is not None and depth >= self.capacity:
            self.dropped += 1
            if self.on_drop:
                self.on_drop(packet)
            return False
        if self.ecn is not None and packet.ecn == ECT0 and self.ecn.marks(depth):
            packet.ecn = CE
            self.marked += 1
        self.queue.append(packet)
        self.max_depth = max(self.max_depth, depth + 1)
        if self.pfc is not None and not self.pfc.paused and depth + 1 >= self.pfc.xoff:
            self.pfc.paused = True
            self.cal.after(self.pfc.delay, self.pfc.pause, True)
        if not self.busy and not self.paused:
            self._serve()
        return True

    def pause(self, paused):
        """PFC from downstream: stop (after the packet on the wire) or resume the service."""
        self.paused = paused
        if not paused and not self.busy:
            self._serve()

    def _serve(self):
        if self.head == len(self.queue):
            return
        packet = self.queue[self.head]
        self.head += 1
        if self.head > 1024:            # drop the served prefix now and then
            del self.queue[:self.head]
            self.head = 0
        self.busy = True
        self.cal.after(packet.size / self.bandwidth, self._sent, packet)

    def _sent(self, packet):
        self.busy = False
        self.sent += 1
        if self.latency:
            self.cal.after(self.latency, self.deliver, packet)
        else:
            self.deliver(packet)
        if self.pfc is not None and self.pfc.paused and self.depth <= self.pfc.xon:
            self.pfc.paused = False
            self.cal.after(self.pfc.delay, self.pfc.pause, False)
        if not self.paused:
            self._serve()

"""What the switch side's and the top's testbenches share: RoCEv2 traffic of flows, the egress queues
(``qdepth``), the spill link's frames as the switch's ports saw them (``spill_o.pcap``: DATA and DRAIN
frames; ``spill_i.pcap``: RETURN frames and any bogus ones), and the end-to-end checks (counters,
conservation, nothing lost, changed or duplicated, per-flow order). Each testbench adds what sits beyond
the switch's spill link."""
import collections
import itertools
import random

import cocotb
from cocotb.triggers import RisingEdge

from hdl.spillway.link import link_layout
from models import wire
from models.headers import IP, UDP, Ether, Spill, roce_packet
from testbenches import tb

__all__ = ["SpillwayTB", "flows", "packet", "sizes", "phases"]


class LinkLog:
    """The frames one direction of the spill link carried: a ``tb.Frame`` each, stamped with the simulation
    time of its first beat (for a pcap)."""

    def __init__(self, width):
        self.width, self.partial, self.start, self.log = width, bytearray(), None, []

    def beat(self, beat):
        if beat["first"]:
            self.partial, self.start = bytearray(), tb.now()
        self.partial += beat["data"].to_bytes(self.width, "little")[:beat["keep"].bit_length()]
        if beat["last"]:
            self.log.append(tb.Frame(self.start, bytes(self.partial)))
            self.partial = bytearray()

    def reset(self):
        self.partial = bytearray()


class SpillwayTB(tb.BlockTB):
    """Drives packets into the switch side and plays the egress queues: each sends a packet every
    ``service`` cycles and grows by the packets ``o`` sends; ``qdepth`` is their depth plus the cross
    traffic (``load``); logs the spill link's frames at the switch's ``spill_o`` and ``spill_i``
    (``links``). A subclass gives ``switch_params``, ``switch_model``, ``node_state()`` and ``switch``,
    the scope of the switch side's ports (the DUT, or the top's submodule)."""

    def __init__(self, dut, service=4):
        super().__init__(dut)
        p = self.switch_params
        self.ports, self.W = p.ports, p.data_bytes
        self.source = self.packet_source("i")
        self.sink = self.packet_sink("o")
        self.service = service
        self.load = [0] * self.ports            # cross traffic queued per port, packets
        self.link_pause = 0.0                   # probability of back-pressure on each link
        self.rng = random.Random(tb.seed() + 1)
        self.links = {"spill_o": LinkLog(self.W), "spill_i": LinkLog(self.W)}     # switch -> node, node -> switch
        self._clear()
        dut.qdepth.value = tb.pack(self._layout("qdepth"), self.qdepth())
        cocotb.start_soon(self._egress())
        cocotb.start_soon(self._spill_link())

    def _clear(self):
        self.sent, self.index = [], {}          # packets in arrival order; raw -> arrival number
        self.queues = [0] * self.ports
        self.i_cycles, self.o_cycles = [], []   # cycles of beats accepted on i / sent on o
        self.max_stored = 0

    async def reset(self):
        await super().reset()
        self.sink.clear()
        for link in self.links.values():
            link.reset()
        self._clear()

    def send(self, packet, port):
        raw = bytes(packet)
        self.index.setdefault(raw, len(self.sent))
        self.sent.append(raw)
        self.source.send_nowait(raw, {"port": port})

    def qdepth(self):
        limit = (1 << self.switch_params.depth_bits) - 1
        return [min(q + extra, limit) for q, extra in zip(self.queues, self.load)]

    async def _egress(self):
        dut, cycles = self.dut, 0
        while True:
            await RisingEdge(dut.clk)
            if not self.in_reset():
                if dut.i__valid.value and dut.i__ready.value:
                    self.i_cycles.append(self.cycle)
                if dut.o__valid.value and dut.o__ready.value:
                    self.o_cycles.append(self.cycle)
                    beat = tb.unpack(self._layout("o"), dut.o__payload.value.to_unsigned())
                    if beat["last"]:
                        self.queues[beat["meta"]["port"] % self.ports] += 1
                self.max_stored = max(self.max_stored, *self.node_state()[0])
                cycles += 1
                if cycles % self.service == 0:
                    self.queues = [max(q - 1, 0) for q in self.queues]
            dut.qdepth.value = tb.pack(self._layout("qdepth"), self.qdepth())

    async def _spill_link(self):
        """Each frame the switch side sent on ``spill_o`` and took on ``spill_i`` (always ready)."""
        scope, layout = self.switch, link_layout(self.W)
        while True:
            await RisingEdge(self.dut.clk)
            if self.in_reset():
                continue
            if scope.spill_o__valid.value and scope.spill_o__ready.value:
                self.links["spill_o"].beat(tb.unpack(layout, scope.spill_o__payload.value.to_unsigned()))
            if scope.spill_i__valid.value:
                self.links["spill_i"].beat(tb.unpack(layout, scope.spill_i__payload.value.to_unsigned()))

    def quiet(self):
        """Nothing more will come back (a subclass adds what is on its links)."""
        return not self.switch_model.verdicts

    async def settle(self, limit=30000):
        """Once all is sent, remove cross traffic; wait until every spilled packet is back and out."""
        await self.source.wait_idle()
        self.load = [0] * self.ports
        for _ in range(limit):
            await RisingEdge(self.dut.clk)
            if int(self.dut.outstanding.value) == 0 and not self.dut.o__valid.value and self.quiet():
                break
        for _ in range(4):
            await RisingEdge(self.dut.clk)
        assert int(self.dut.outstanding.value) == 0, \
            f"spilled packets never came back: {self.switch_model.core.credits}"

    def check(self, name, bogus=0):
        """Counters equal the model's; conservation; nothing lost, changed or duplicated; per-flow order
        end to end; the node neither overflowed nor was asked for what it did not hold; ``bogus`` frames
        on the return link counted as ``return_malformed``."""
        c = self.check_counters()
        stored, node = self.node_state()
        outstanding = int(self.dut.outstanding.value)
        self.conserved("packets", len(self.sent), forwarded=c["forwarded"], outstanding=outstanding,
                       reinjected=c["reinjected"], spill_overflow=c["spill_overflow"],
                       spill_oversize=c["spill_oversize"], malformed=c["malformed"])
        self.conserved("spilled", c["spilled"], reinjected=c["reinjected"], outstanding=outstanding)
        assert c["misordered"] == 0 and node["overflow"] == 0 and node["drain_empty"] == 0, (c, node)
        assert c["return_malformed"] == bogus and node["malformed"] == 0, (c, node, bogus)
        assert self.max_stored <= self.switch_params.capacity
        out = [(raw, meta) for raw, meta in self.sink.queue]
        numbers = [self.index.get(raw) for raw, _ in out]
        assert None not in numbers, "a packet left that never went in (or changed on the way)"
        assert len(set(numbers)) == len(numbers), "a packet left twice"
        assert sum(m["spilled"] for _, m in out) == c["reinjected"]
        assert len(out) == c["forwarded"] + c["reinjected"]
        last = {}
        for (raw, meta), n in zip(out, numbers):
            packet_ = Ether(raw)
            flow = (packet_[IP].src, packet_[IP].dst, packet_[UDP].sport, packet_[UDP].dport)
            assert n > last.get(flow, -1), f"flow {flow} reordered at packet {n}"
            last[flow] = n
        self.write_pcaps()
        for name, link in self.links.items():
            tb.write_pcap(name, link.log)
        cocotb.log.info("%s: %d in, switch %s, node %s, %d cycles", name, len(self.sent), c, node, self.cycle)


def flows(rng, count, ports):
    """(src, dst, sport, qp, port): each flow leaves on one egress port."""
    return [(f"10.0.{rng.randrange(4)}.{rng.randrange(1, 255)}", f"10.1.0.{rng.randrange(1, 255)}",
             rng.randrange(49152, 65536), rng.randrange(1, 1 << 24), k % ports) for k in range(count)]


def packet(flow, psn, size=0):
    src, dst, sport, qp, _ = flow
    return roce_packet(src=src, dst=dst, sport=sport, qp=qp, psn=psn, payload=bytes(size))


def sizes(t):
    """Payload sizes for packets around the beat boundaries, up to a packet of ``mtu`` bytes."""
    W, base = t.W, len(bytes(packet(("1.1.1.1", "2.2.2.2", 1, 1, 0), 0)))
    return [max(0, n - base) for n in (base, base + 1, W, W + 1, 2 * W, 2 * W + 1, t.switch_params.mtu)]


async def phases(t, rng, count, flows_, congested=(0.2, 0.5)):
    """Send ``count`` packets of random flows and sizes while cross traffic comes and goes."""
    high = t.switch_params.high
    for n in range(count):
        if n % 40 == 0:
            t.load = [high + 2 if rng.random() < rng.uniform(*congested) else 0 for _ in range(t.ports)]
        flow = rng.choice(flows_)
        t.send(packet(flow, n, rng.choice(sizes(t))), flow[4])
        if n % 8 == 7:
            while len(t.source.queue) > 16:
                await RisingEdge(t.dut.clk)


# --- Test bodies, each run on the switch side alone and on the top ------------------------------------

async def random_traffic(t):
    """Random flows and sizes, cross traffic bursts, idle input, back-pressure on o and both links; then
    the shortest packets the switch takes, spilled (one-beat RETURN frames)."""
    rng = random.Random(tb.seed())
    t.source.set_pause_generator(rng.random() < 0.2 for _ in itertools.count())
    t.sink.set_pause_generator(rng.random() < 0.2 for _ in itertools.count())
    t.link_pause = 0.15
    await t.reset()
    fl = flows(rng, 12, t.ports)
    await phases(t, rng, 500, fl)
    await t.settle()
    # the shortest packet the switch takes (Ethernet/IPv4/UDP, 42 bytes), spilled by construction: its
    # RETURN frame is header + 42 bytes, one beat when data_bytes >= 64
    spilled = t.model.counters()["spilled"]
    t.load = [t.switch_params.high + 2] * t.ports
    for flow in fl[:3]:
        src, dst, sport, _, port = flow
        t.send(Ether() / IP(src=src, dst=dst) / UDP(sport=sport, dport=4791), port)
    while t.source.queue:
        await RisingEdge(t.dut.clk)
    for _ in range(20):
        await RisingEdge(t.dut.clk)
    t.load = [0] * t.ports
    await t.settle()
    c = t.model.counters()
    assert c["spilled"] > 30 and c["reinjected"] == c["spilled"] and c["drain_requests"] > 30, c
    assert c["spilled"] == spilled + 3, "the three shortest packets were spilled (and came back)"
    t.check("random_traffic")
    # the spill link's pcaps: every frame a spill frame (EtherType 0x88B5), one per DATA, DRAIN and RETURN
    down, up = (collections.Counter(Ether(f.data)[Spill].op for f in t.links[name].log)
                for name in ("spill_o", "spill_i"))
    assert down == {wire.SPILL_DATA: c["spilled"], wire.SPILL_DRAIN: c["drain_requests"]}, (down, c)
    assert up == {wire.SPILL_RETURN: c["reinjected"]}, (up, c)


async def node_full(t):
    """Long congestion on every port: the node fills to its capacity, further spills are dropped
    (spill_overflow) by the switch and the node never overflows; everything drains afterwards."""
    rng = random.Random(tb.seed())
    await t.reset()
    fl = flows(rng, 8, t.ports)
    t.load = [t.switch_params.high + 2] * t.ports
    for n in range(12 * t.switch_params.capacity * t.ports):
        flow = rng.choice(fl)
        t.send(packet(flow, n, rng.choice(sizes(t)[:4])), flow[4])
    await t.source.wait_idle()
    for _ in range(2 * t.latency + 20):
        await RisingEdge(t.dut.clk)
    assert t.max_stored == t.switch_params.capacity, t.max_stored
    await t.settle()
    assert t.model.counters()["spill_overflow"] > 0
    t.check("node_full")


async def line_rate(t):
    """Uncongested multi-beat packets in back to back: i takes a beat every cycle and o sends one every
    cycle (store-and-forward latency, no bubbles)."""
    rng = random.Random(tb.seed())
    t.sink.set_pause_generator(None)
    await t.reset()
    fl = flows(rng, 4, t.ports)
    for n in range(60):
        flow = fl[n % 4]
        t.send(packet(flow, n, sizes(t)[-1]), flow[4])
    await t.settle()
    for name, cycles in (("i", t.i_cycles), ("o", t.o_cycles)):
        span = cycles[-1] - cycles[0] + 1
        assert span == len(cycles), f"{name}: {len(cycles)} beats in {span} cycles"
    assert t.model.counters()["forwarded"] == 60
    t.check("line_rate")


async def reset_mid_traffic(t):
    """A reset with packets in the ingress FIFO, on the links, at the node and in the return buffer
    empties both ends; traffic then resumes and is checked in full."""
    rng = random.Random(tb.seed())
    t.link_pause = 0.1
    await t.reset()
    fl = flows(rng, 8, t.ports)
    t.load = [t.switch_params.high + 2] * t.ports
    for n in range(80):
        flow = rng.choice(fl)
        t.send(packet(flow, n, rng.choice(sizes(t))), flow[4])
    for _ in range(rng.randrange(150, 400)):
        await RisingEdge(t.dut.clk)
    t.load = [0] * t.ports
    for _ in range(rng.randrange(0, 3 * t.latency + 10)):
        await RisingEdge(t.dut.clk)
    assert int(t.dut.outstanding.value) > 0, "nothing spilled at the reset"
    await t.reset()
    assert all(v == 0 for v in t.counters().values()) and int(t.dut.outstanding.value) == 0
    await phases(t, rng, 200, flows(rng, 8, t.ports))
    await t.settle()
    t.check("reset_mid_traffic")

"""Spillway's in-switch buffering baseline under Verilator, checked cycle by cycle against its golden model."""
import itertools
import random

import cocotb
from cocotb.triggers import RisingEdge

from hdl.spillway.inswitch import InSwitchSpillBuffer
from models.headers import IP, UDP, Ether, Raw, roce_packet
from models.spillway.arrival import MIN_LENGTH, flow_of
from models.spillway.params import InSwitchParams
from testbenches import runner, tb

ARP_ETHERTYPE = 0x0806
DECISIONS = ("forwarded", "spilled", "spill_overflow", "malformed", "stalled")
CONGESTION = ("<low", "=low", "mid", "=high-1", "=high", ">high")
#: Cross bins that cannot happen, and why (the coverage report prints the reason).
SPILLED_AT_HIGH = "a packet at or above the high watermark is spilled (SPEC 1), never forwarded nor stalled"
KEPT_IN_ORDER = "a packet of a flow (port) with spilled packets outstanding is spilled behind them (order)"
NO_PORT = "a malformed packet's port may not exist: congestion and order are not sampled for it"


def congestion(depth, low, high):
    """Where a queue depth sits relative to the watermarks (the decision's edges)."""
    return ("=high" if depth == high else ">high" if depth > high else "=high-1" if depth == high - 1
            else "=low" if depth == low else "<low" if depth < low else "mid")


def fifo_fill(count, capacity):
    return "full" if count == capacity else "one_free" if count == capacity - 1 else "empty" if not count \
        else "partial"


def coverage(block):
    """The spill buffer's functional coverage: every decision and drain outcome at every watermark edge."""
    cover = tb.Coverage("spillway.inswitch")
    cover.point("decision", DECISIONS)
    cover.point("congestion", CONGESTION)
    cover.point("ordered", ("outstanding", "clear"))
    cover.point("fifo_at_spill", ("empty", "partial", "one_free", "full"))
    cover.point("drain", ("drained", "rate_limited", "output_busy", "above_low"))
    cover.point("drain_vs_rr", ("at_rr", "after_rr", "wrapped"))
    cover.cross("decision_x_congestion", "decision", "congestion", unreachable={
        **{(kind, level): SPILLED_AT_HIGH for kind in ("forwarded", "stalled") for level in ("=high", ">high")},
        ("malformed", None): NO_PORT})
    cover.cross("decision_x_ordered", "decision", "ordered", unreachable={
        ("forwarded", "outstanding"): KEPT_IN_ORDER, ("stalled", "outstanding"): KEPT_IN_ORDER,
        ("malformed", None): NO_PORT})
    return cover


class TB(tb.BlockTB):
    """Drives packets into the in-switch spill buffer and plays the egress queues (``qdepth``) and the
    packet memory; the lockstep compares every cycle's ``i.ready``, ``o``, ``stored`` and ``pending``
    with the golden model."""

    name = "spillway.inswitch"

    def __init__(self, dut, service=4):
        super().__init__(dut)
        self.ports = self.block.ports
        self.source = self.packet_source("i")
        self.sink = self.stream_sink("o")
        self.service = service              # an egress queue sends one packet every `service` cycles
        self.load = [0] * self.ports        # extra (cross) traffic queued per port, in packets
        self.fixed = None                   # directed tests: force qdepth to these values
        self.queues = [0] * self.ports
        self.sent, self.out = [], []        # packets in arrival order (= handle); descriptors out
        self.accepts, self.emits = [], []   # cycles of the last beats accepted / descriptors sent
        self.emitted = []                   # (sim time, descriptor) of every descriptor the RTL emitted
        self.cover = coverage(self.block)
        self.before = None
        dut.qdepth.value = tb.pack(self._layout("qdepth"), self.qdepth())
        cocotb.start_soon(self._egress())

    async def reset(self):
        await super().reset()
        self.sink.clear()
        self.sent, self.out, self.queues, self.load = [], [], [0] * self.ports, [0] * self.ports
        self.accepts, self.emits = [], []

    def send(self, packet, port):
        self.sent.append(bytes(packet))
        self.source.send_nowait(packet, {"port": port})

    def qdepth(self):
        limit = (1 << self.block.depth_bits) - 1
        return list(self.fixed) if self.fixed is not None else [
            min(q + extra, limit) for q, extra in zip(self.queues, self.load)]

    async def _egress(self):
        """The egress queues: each sends a packet every ``service`` cycles, and grows by the
        descriptors ``o`` sends; ``qdepth`` is their depth plus the cross traffic (``load``)."""
        dut, cycles = self.dut, 0
        while True:
            await RisingEdge(dut.clk)
            if not self.in_reset():
                if dut.i__valid.value and dut.i__ready.value and tb.unpack(self._layout("i"),
                                                                           dut.i__payload.value.to_unsigned())["last"]:
                    self.accepts.append(self.cycle)
                if dut.o__valid.value and dut.o__ready.value:
                    payload = tb.unpack(self._layout("o"), dut.o__payload.value.to_unsigned())
                    self.out.append(payload)
                    self.emits.append(self.cycle)
                    self.emitted.append(tb.Frame(tb.now(), self.sent[payload["handle"]]))
                    self.queues[payload["port"]] += 1
                cycles += 1
                if cycles % self.service == 0:
                    self.queues = [max(q - 1, 0) for q in self.queues]
            dut.qdepth.value = tb.pack(self._layout("qdepth"), self.qdepth())

    def sample(self, values):
        m = self.model
        self.before = ([len(f) for f in m.fifos], list(m.flow_count), m.used, m.rr)

    def sampled(self, values):
        """Functional coverage of this cycle, from the model's state before it (``fifos`` ... ``rr``) and
        the decision it took."""
        fifos, flows, used, rr = self.before
        beat = tb.unpack(self._layout("i"), values["i__payload"]) if values["i__valid"] else None
        i_ready = values["i__ready"]
        depth = tb.unpack(self._layout("qdepth"), values["qdepth"])
        p, decision = self.params, self.model.decision
        if decision is not None:
            kind, port, _, flow = decision
            values = {"decision": kind}
            if kind != "malformed":
                outstanding = (flows[flow] if p.order == "flow" else fifos[port]) != 0
                values.update(congestion=congestion(depth[port], p.low, p.high),
                              ordered="outstanding" if outstanding else "clear")
                if kind in ("spilled", "spill_overflow"):
                    values["fifo_at_spill"] = fifo_fill(fifos[port], p.capacity)
            self.cover.sample(**values)
        elif beat is not None and beat["last"] and not i_ready:
            port = beat["meta"]["port"]
            self.cover.sample(decision="stalled", congestion=congestion(depth[port], p.low, p.high),
                              ordered="clear")
        eligible = [q for q in range(p.ports) if fifos[q] and depth[q] <= p.low]
        if self.model.drained_port is not None:
            chosen = self.model.drained_port
            self.cover.sample(drain="drained",
                              drain_vs_rr="at_rr" if chosen == rr else "after_rr" if chosen > rr else "wrapped")
        elif eligible:
            self.cover.sample(drain="rate_limited" if used >= p.drain_rate else "output_busy")
        elif any(fifos):
            self.cover.sample(drain="above_low")

    async def drain(self, limit=20000):
        """Once all is sent, remove cross traffic; wait until every spilled packet has left."""
        await self.source.wait_idle()
        self.load, self.fixed = [0] * self.ports, None
        for _ in range(limit):
            await RisingEdge(self.dut.clk)
            if int(self.dut.pending.value) == 0 and not self.dut.o__valid.value:
                break
        for _ in range(4):
            await RisingEdge(self.dut.clk)
        assert int(self.dut.pending.value) == 0, "spill buffer did not drain"

    def check(self, name="spill"):
        """Counters equal the model's; packets conserved; no duplicate; per-flow order kept."""
        counters = self.check_counters()
        pending = int(self.dut.pending.value)
        self.conserved("packets", len(self.sent), forwarded=counters["forwarded"], pending=pending,
                       drained=counters["drained"], spill_overflow=counters["spill_overflow"],
                       malformed=counters["malformed"])
        handles = [d["handle"] for d in self.out]
        assert len(handles) == len(set(handles)), "a packet left twice"
        assert sum(d["spilled"] for d in self.out) == counters["drained"]
        last = {}
        for d in self.out:
            packet = Ether(self.sent[d["handle"]])
            flow = (packet[IP].src, packet[IP].dst, packet[UDP].sport, packet[UDP].dport)
            assert d["handle"] > last.get(flow, -1), f"flow {flow} reordered at handle {d['handle']}"
            last[flow] = d["handle"]
            assert d["length"] == len(self.sent[d["handle"]])
        self.write_pcaps(outputs=self.emitted)    # out: the stored packets the RTL's descriptors name
        self.cover.write()
        cocotb.log.info("%s: %d in, counters %s, %d cycles", name, len(self.sent), counters, self.cycle)


def flows(rng, count):
    return [(f"10.0.{rng.randrange(4)}.{rng.randrange(1, 255)}", f"10.1.0.{rng.randrange(1, 255)}",
             rng.randrange(49152, 65536), rng.randrange(1, 1 << 24)) for _ in range(count)]


def packet(flow, psn, size=0):
    src, dst, sport, qp = flow
    return roce_packet(src=src, dst=dst, sport=sport, qp=qp, psn=psn, payload=bytes(size))


@cocotb.test()
async def random_traffic(dut):
    """Random RoCEv2 traffic, cross traffic bursts, idle input, backpressure on o."""
    rng = random.Random(tb.seed())
    t = TB(dut, service=3)
    t.source.set_pause_generator(rng.random() < 0.2 for _ in itertools.count())
    t.sink.set_pause_generator(rng.random() < 0.2 for _ in itertools.count())
    await t.reset()
    pool = flows(rng, 12)
    homes = {f: rng.randrange(t.ports) for f in pool}
    psn = dict.fromkeys(pool, 0)
    for burst in range(12):
        t.load = [rng.choice([0, 0, t.block.low, t.block.high + rng.randrange(8)]) for _ in range(t.ports)]
        for _ in range(rng.randrange(40, 120)):
            flow = rng.choice(pool)
            t.send(packet(flow, psn[flow], rng.choice([0, 8, 100, 200, 400])), homes[flow])
            psn[flow] += 1
        await t.source.wait_idle()
    await t.drain()
    assert t.model.counters()["spilled"] > 0 and t.model.counters()["forwarded"] > 0, "traffic never spilled"
    t.check("random_traffic")


@cocotb.test()
async def watermark_edges(dut):
    """depth H-1 forwards, H spills; L+1 holds the spilled packets, L drains them."""
    t = TB(dut)
    t.sink.set_pause_generator(None)
    await t.reset()
    H, L = t.block.high, t.block.low
    flow_a, flow_b = flows(random.Random(1), 2)
    t.fixed = [H - 1] * t.ports
    t.send(packet(flow_a, 0), 0)
    await t.source.wait_idle()
    t.fixed = [H] * t.ports
    t.send(packet(flow_b, 0), 0)
    t.send(packet(flow_b, 1), 0)
    await t.source.wait_idle()
    for _ in range(4):
        await RisingEdge(dut.clk)
    assert t.counters()["forwarded"] == 1 and t.counters()["spilled"] == 2
    t.fixed = [L + 1] * t.ports
    for _ in range(20):
        await RisingEdge(dut.clk)
    assert int(dut.pending.value) == 2, "drained above the low watermark"
    t.fixed = [L] * t.ports
    for _ in range(20):
        await RisingEdge(dut.clk)
    assert int(dut.pending.value) == 0, "did not drain at the low watermark"
    assert [d["spilled"] for d in t.out] == [0, 1, 1]
    t.check("watermark_edges")


@cocotb.test()
async def full_spill_buffer(dut):
    """A full spill FIFO drops (spill_overflow) and never overwrites what it holds."""
    t = TB(dut)
    await t.reset()
    C = t.block.capacity
    t.fixed = [t.block.high] * t.ports
    pool = flows(random.Random(2), 4)
    for n in range(C + 5):
        t.send(packet(pool[n % 4], n), 1)
    await t.source.wait_idle()
    for _ in range(4):
        await RisingEdge(dut.clk)
    assert t.counters()["spilled"] == C and t.counters()["spill_overflow"] == 5
    assert int(dut.pending.value) == C
    await t.drain()
    assert [d["handle"] for d in t.out] == list(range(C)), "the stored handles changed"
    t.check("full_spill_buffer")


@cocotb.test()
async def line_rate(dut):
    """Uncongested single-beat packets: one accepted and one forwarded per cycle."""
    t = TB(dut)
    t.sink.set_pause_generator(None)
    await t.reset()
    t.fixed = [0] * t.ports
    pool = flows(random.Random(3), 8)
    count = 200
    for n in range(count):
        t.send(packet(pool[n % 8], n), n % t.ports)
    await t.drain()
    assert t.counters()["forwarded"] == count
    assert t.accepts[-1] - t.accepts[0] == count - 1, \
        f"{count} packets entered in {t.accepts[-1] - t.accepts[0] + 1} cycles"
    assert t.emits[-1] - t.emits[0] == count - 1, f"{count} descriptors left in {t.emits[-1] - t.emits[0] + 1} cycles"
    t.check("line_rate")


@cocotb.test()
async def reset_mid_traffic(dut):
    """A reset while packets are stored and in flight empties the block; traffic then resumes."""
    rng = random.Random(tb.seed())
    t = TB(dut, service=2)
    t.sink.set_pause_generator(rng.random() < 0.3 for _ in itertools.count())
    await t.reset()
    pool = flows(rng, 6)
    homes = {f: rng.randrange(t.ports) for f in pool}
    t.load = [t.block.high + 2] * t.ports
    for n in range(120):
        flow = rng.choice(pool)
        t.send(packet(flow, n, rng.choice([0, 100, 300])), homes[flow])
    for _ in range(150):
        await RisingEdge(dut.clk)
    assert int(dut.pending.value) > 0, "nothing was stored when the reset came"
    await t.reset()
    assert int(dut.pending.value) == 0 and all(v == 0 for v in t.counters().values())
    for n in range(150):
        flow = rng.choice(pool)
        t.send(packet(flow, n, rng.choice([0, 100])), homes[flow])
    t.load = [t.block.high] * t.ports
    await t.source.wait_idle()
    await t.drain()
    t.check("reset_mid_traffic")


@cocotb.test()
async def malformed_packets(dut):
    """Truncated, non-IPv4, IPv4 with options, non-UDP and out-of-range port: dropped, counted."""
    t = TB(dut)
    await t.reset()
    t.fixed = [0] * t.ports
    good = packet(flows(random.Random(4), 1)[0], 0)
    raw = bytes(good)
    bad = [
        (raw[:30], 0),                                                        # truncated
        (bytes(Ether(type=ARP_ETHERTYPE) / Raw(bytes(60))), 0),               # not IPv4
        (bytes(Ether() / IP(options=[b"\x01" * 4], proto=17) / UDP(sport=49152, dport=4791) / Raw(bytes(20))), 0),
        (bytes(Ether() / IP(proto=6) / Raw(bytes(40))), 0),                   # not UDP
        (raw, t.ports),                                                        # no such port
    ]
    for n, (data, port) in enumerate(bad):
        t.send(data, port)
        t.send(packet(flows(random.Random(5 + n), 1)[0], n), n % t.ports)
    await t.drain()
    assert t.counters()["malformed"] == len(bad) and t.counters()["forwarded"] == len(bad)
    t.check("malformed_packets")


@cocotb.test()
async def parser_limits(dut):
    """Frames one byte short of, exactly at and one byte past the 42-byte Ethernet/IPv4/UDP header
    (MIN_LENGTH), and at the bus-width boundary (one beat exactly, one byte into the second beat):
    only the short one is malformed."""
    t = TB(dut)
    await t.reset()
    t.fixed = [0] * t.ports
    raw = bytes(packet(flows(random.Random(7), 1)[0], 0, size=3 * t.block.data_bytes))
    width = t.block.data_bytes
    lengths = [MIN_LENGTH - 1, MIN_LENGTH, MIN_LENGTH + 1, width - 1, width, width + 1]
    for n, length in enumerate(lengths):
        t.send(raw[:length], n % t.ports)
    await t.drain()
    counters = t.counters()
    assert counters["malformed"] == 1 and counters["forwarded"] == len(lengths) - 1, counters
    lengths_out = sorted(d["length"] for d in t.out)
    assert lengths_out == sorted(lengths[1:]), lengths_out
    t.check("parser_limits")


@cocotb.test()
async def flow_order(dut):
    """Between the watermarks a flow with spilled packets keeps spilling; other flows pass."""
    t = TB(dut)
    t.sink.set_pause_generator(None)
    await t.reset()
    H, L = t.block.high, t.block.low
    flow_a, flow_b = flows(random.Random(6), 2)
    t.fixed = [H] * t.ports
    for n in range(3):
        t.send(packet(flow_a, n), 2 % t.ports)
    await t.source.wait_idle()
    t.fixed = [(H + L) // 2] * t.ports
    for n in range(3, 6):
        t.send(packet(flow_a, n), 2 % t.ports)
        t.send(packet(flow_b, n), 3 % t.ports)
    await t.source.wait_idle()
    for _ in range(4):
        await RisingEdge(dut.clk)
    assert t.counters()["spilled"] == 6 and t.counters()["forwarded"] == 3, t.counters()
    await t.drain()
    t.check("flow_order")


@cocotb.test()
async def decision_edges(dut):
    """The decisions the random traffic leaves to luck, by construction: spilled and spill_overflow at
    high-1 and between the watermarks (a flow with packets outstanding), spill_overflow of a flow with
    nothing outstanding (flow order: the port's FIFO is full of another flow's packets) and at the low
    watermark (o held: no drain empties the FIFO), a packet stalled between the watermarks and at high-1
    (output register held by back-pressure)."""
    t = TB(dut)
    t.sink.set_pause_generator(None)
    await t.reset()
    p = t.params
    H, L, C, P = p.high, p.low, p.capacity, p.ports
    mid = (H + L) // 2
    assert L < mid < H - 1 and P >= 3

    async def settle():
        await t.source.wait_idle()
        for _ in range(4):
            await RisingEdge(dut.clk)

    pool = flows(random.Random(8), 16)
    entry = {f: flow_of(bytes(packet(f, 0)), p.flows) for f in pool}
    a, c, d = pool[0], pool[1], pool[2]
    b = next(f for f in pool if entry[f] != entry[a])
    t.fixed = [H] * P
    for n in range(C):
        t.send(packet(a, n), 0)                  # port 0's FIFO full of flow a
    await settle()
    t.send(packet(b, 0), 0)                      # overflow at =high (flow order: b has nothing outstanding)
    await settle()
    t.fixed = [H - 1] * P
    t.send(packet(a, C), 0)                      # overflow at =high-1: a has packets outstanding
    t.send(packet(c, 0), 1)                      # port 1 at high-1, c clear: forwarded
    await settle()
    t.fixed = [mid] * P
    t.send(packet(a, C + 1), 0)                  # overflow between the watermarks
    await settle()
    assert t.counters()["spilled"] == C and t.counters()["spill_overflow"] == 3, t.counters()
    t.fixed = [H] * P
    t.send(packet(d, 0), 1)                      # d spilled at =high on port 1 ...
    await settle()
    t.fixed = [H - 1] * P
    t.send(packet(d, 1), 1)                      # ... and behind it at =high-1 (outstanding)
    await settle()
    assert t.counters()["spilled"] == C + 2, t.counters()
    t.sink.set_pause_generator(itertools.repeat(True))     # o.ready low: the output register stays full
    t.fixed = [mid] * P
    t.send(packet(c, 1), 2)                      # forwarded into the output register (c has nothing spilled)
    await settle()
    t.fixed = [L] * P                            # every FIFO is eligible, but o is held: nothing drains,
    t.send(packet(a, C + 2), 0)                  # so port 0 is still full: overflow at =low
    await settle()
    assert t.counters()["spill_overflow"] == 4 and t.counters()["drained"] == 0, t.counters()
    t.fixed = [mid] * P
    t.send(packet(c, 2), 2)                      # stalled between the watermarks
    for _ in range(8):
        await RisingEdge(dut.clk)
    t.fixed = [H - 1] * P                        # still stalled, now at high-1
    for _ in range(8):
        await RisingEdge(dut.clk)
    assert t.counters()["forwarded"] == 2, "the stalled packet went in"
    t.sink.set_pause_generator(None)
    await t.drain()
    c_ = t.counters()
    assert (c_["forwarded"], c_["spilled"], c_["spill_overflow"], c_["drained"]) == (3, C + 2, 4, C + 2), c_
    t.check("decision_edges")


PARAMS = {
    "flow": InSwitchParams(ports=4, high=12, low=4, capacity=16, drain_rate=1, drain_window=2, flows=16,
                           order="flow"),
    "port": InSwitchParams(ports=3, high=10, low=3, capacity=9, drain_rate=2, drain_window=6, flows=8,
                           order="port"),
}


@runner.parametrize(__name__, PARAMS)
def test_inswitch(params, testcase, record_property):
    record_property("innet", runner.run(InSwitchSpillBuffer, params, __name__, testcase))

"""Spillway spill buffer manager under Verilator, checked cycle by cycle against its golden model."""
import collections
import itertools
import random

import cocotb
import pytest
from cocotb.triggers import RisingEdge

from hdl.packet import beat_layout
from hdl.spill_buffer import SpillBuffer, SpillBufferParams
from models.headers import IP, UDP, Ether, Raw, roce_packet
from models.spill_buffer import MIN_LENGTH, SpillBufferModel, flow_of
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
    cover = tb.Coverage("spill_buffer")
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
    """Drives packets into a SpillBuffer, plays the egress queues (``qdepth``) and the packet
    memory, and compares every cycle's ``i.ready``/``o`` with the golden model."""

    name = "spill_buffer"

    def __init__(self, dut, service=4):
        super().__init__(dut)
        self.ports = self.block.ports
        self.source = tb.PacketSource(dut, "i", beat_layout(self.block.data_bytes))
        self.sink = tb.StreamSink(dut, "o", self.block.descriptor)
        self.model = SpillBufferModel(self.params)
        self.service = service              # an egress queue sends one packet every `service` cycles
        self.load = [0] * self.ports        # extra (cross) traffic queued per port, in packets
        self.fixed = None                   # directed tests: force qdepth to these values
        self.queues = [0] * self.ports
        self.cycle = 0
        self.sent, self.out = [], []        # packets in arrival order (= handle); descriptors out
        self.accepts, self.emits = [], []   # cycles of the last beats accepted / descriptors sent
        self.emitted = []                   # (sim time, descriptor) of every descriptor the RTL emitted
        self.cover = coverage(self.block)
        cocotb.start_soon(self._monitor())

    async def reset(self):
        await super().reset()
        self.model.reset()
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

    async def _monitor(self):
        dut, beat_layout_ = self.dut, self.source.layout
        depth = self.qdepth()
        while True:
            await RisingEdge(dut.clk)
            if self.in_reset():
                depth = self.qdepth()
                dut.qdepth.value = tb.pack(self.block.qdepth.shape(), depth)
                continue
            i_valid, o_valid, o_ready = bool(dut.i__valid.value), bool(dut.o__valid.value), bool(dut.o__ready.value)
            beat = tb.unpack(beat_layout_, dut.i__payload.value.to_unsigned()) if i_valid else None
            model = self.model
            fifos, flows, used, rr = [len(f) for f in model.fifos], list(model.flow_count), model.used, model.rr
            i_ready, m_valid, m_payload = model.step(beat, depth, o_ready)
            self.sample(beat, i_ready, depth, fifos, flows, used, rr)
            where = f"cycle {self.cycle}, qdepth {depth}"
            if i_valid:
                assert bool(dut.i__ready.value) == i_ready, \
                    f"{where}: i.ready {int(dut.i__ready.value)}, model {i_ready}"
                if i_ready and beat["last"]:
                    self.accepts.append(self.cycle)
            assert o_valid == m_valid, f"{where}: o.valid {o_valid}, model {m_valid}"
            if o_valid:
                payload = tb.unpack(self.block.descriptor, dut.o__payload.value.to_unsigned())
                assert payload == m_payload, f"{where}: o {payload}, model {m_payload}"
                if o_ready:
                    self.out.append(payload)
                    self.emits.append(self.cycle)
                    self.emitted.append(tb.Frame(tb.now(), self.sent[payload["handle"]]))
                    self.queues[payload["port"]] += 1
            self.cycle += 1
            if self.cycle % self.service == 0:
                self.queues = [max(q - 1, 0) for q in self.queues]
            depth = self.qdepth()
            dut.qdepth.value = tb.pack(self.block.qdepth.shape(), depth)

    def sample(self, beat, i_ready, depth, fifos, flows, used, rr):
        """Functional coverage of this cycle, from the model's state before it (``fifos`` ... ``rr``)."""
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
        counters = self.check_counters(self.model.counters)
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
    assert t.model.counters["spilled"] > 0 and t.model.counters["forwarded"] > 0, "traffic never spilled"
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
    "flow": SpillBufferParams(ports=4, high=12, low=4, capacity=16, drain_rate=1, drain_window=2, flows=16,
                              order="flow", mode="inswitch"),
    "port": SpillBufferParams(ports=3, high=10, low=3, capacity=9, drain_rate=2, drain_window=5, flows=8,
                              order="port", mode="inswitch"),
}


@runner.parametrize(__name__, PARAMS)
def test_spill_buffer(params, testcase, record_property):
    record_property("innet", runner.run(SpillBuffer, params, __name__, testcase))


# --- Disaggregated mode: the credit core in Amaranth's simulator against its model -------------------

CREDIT_PARAMS = {
    "flow": SpillBufferParams(ports=3, high=6, low=2, capacity=4, drain_rate=1, drain_window=3, flows=8,
                              order="flow", mtu=300, return_slots=2, counter_bits=16),
    "port": SpillBufferParams(ports=2, high=5, low=3, capacity=3, drain_rate=2, drain_window=4, flows=4,
                              order="port", mtu=200, return_slots=3, counter_bits=16),
}


@pytest.mark.parametrize("config", CREDIT_PARAMS)
def test_credit_core_matches_model(config):
    """CreditCore vs CreditCoreModel every cycle, in a closed loop: spills go to a shadow node (per-port
    FIFOs behind a link of random delay), requests come back as returns, returns are re-injected;
    random queue depths, back-pressure on v and req, bogus returns. Then order and credits."""
    from amaranth.sim import Simulator

    from hdl.spill_buffer import CreditCore
    from models.spill_buffer import CREDIT_COUNTERS, SPILL, CreditCoreModel

    params = CREDIT_PARAMS[config]
    dut, model = CreditCore(params), CreditCoreModel(params)
    rng = random.Random(runner.traffic_seed())
    P, C = params.ports, params.capacity
    node = [collections.deque() for _ in range(P)]       # (flow, seq, arrival number) at the node
    returning = []                                         # (cycle, port): frames on the way back
    held = collections.deque()                             # accepted returns waiting to be re-injected
    done_log, spilled_log = [], []

    async def bench(ctx):
        handle = 0
        for cycle in range(2500):
            phase = (cycle // 300) % 3                     # congested, mixed, calm
            qdepth = [rng.choice([[params.high, params.high + 2], [0, params.low, params.high],
                                  [0, params.low]][phase]) for _ in range(P)]
            arrival = None
            if rng.random() < 0.7:
                flow = rng.randrange(params.flows)           # a flow has one egress port
                port = P if rng.random() < 0.03 else flow % P
                arrival = {"handle": handle % (1 << params.handle_bits), "port": port, "flow": flow,
                           "length": rng.choice([60, 200, params.mtu, params.mtu + 1]),
                           "malformed": int(rng.random() < 0.05)}
            v_ready, req_ready = rng.random() < 0.85, rng.random() < 0.7
            ret = None
            if returning and returning[0][0] <= cycle:
                ret = returning.pop(0)[1]
            elif rng.random() < 0.01:
                ret = rng.randrange(P + 1)                 # a return nobody asked for
            done = None
            if held and rng.random() < 0.5:
                done = held.popleft()
            ctx.set(dut.d.valid, arrival is not None)
            if arrival is not None:
                ctx.set(dut.d.payload, arrival)
            ctx.set(dut.qdepth, qdepth)
            ctx.set(dut.v.ready, v_ready)
            ctx.set(dut.req.ready, req_ready)
            ctx.set(dut.ret_valid, ret is not None)
            ctx.set(dut.ret_port, ret or 0)
            ctx.set(dut.done_valid, done is not None)
            if done is not None:
                ctx.set(dut.done_port, done["port"])
                ctx.set(dut.done_flow, done["flow"])
                ctx.set(dut.done_seq, done["seq"])
            credits = list(model.credits)
            d_ready, verdict, req, ret_ok = model.step(arrival, qdepth, v_ready, req_ready, ret, done)
            where = f"{config} cycle {cycle}"
            assert list(ctx.get(dut.credits)) == credits, where
            if arrival is not None:
                assert ctx.get(dut.d.ready) == d_ready, where
                got = ctx.get(dut.v.payload)
                assert {k: getattr(got, k) for k in verdict} == verdict, f"{where}: {got} vs {verdict}"
            assert ctx.get(dut.req.valid) == (req is not None), where
            if req is not None:
                assert ctx.get(dut.req.payload.port) == req, where
                if req_ready:
                    returning.append((cycle + rng.randrange(2, 30), req))
                    returning.sort()
            assert ctx.get(dut.ret_ok) == ret_ok, where
            if ret_ok:
                flow, seq, number = node[ret].popleft()
                held.append({"port": ret, "flow": flow, "seq": seq})
                done_log.append((ret, flow, number))
            if verdict is not None and v_ready:
                handle += 1
                if verdict["kind"] == SPILL:
                    node[verdict["port"]].append((verdict["flow"], verdict["seq"], handle))
                    spilled_log.append(verdict["flow"])
                    assert len(node[verdict["port"]]) <= C, f"{where}: node overflow"
            await ctx.tick()
        for name in CREDIT_COUNTERS:
            assert ctx.get(getattr(dut, name)) == model.counters[name], name

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    c = model.counters
    assert c["spilled"] > 20 and c["reinjected"] > 10 and c["spill_overflow"] > 0 and c["return_malformed"] > 0, c
    assert c["misordered"] == 0
    for q in range(P):
        assert model.credits[q] + model.unasked[q] + model.asked[q] + sum(h["port"] == q for h in held) == C
    last = {}
    for port, flow, number in done_log:                    # per-flow order of re-injection
        assert number > last.get(flow, -1), f"flow {flow} reordered"
        last[flow] = number


@pytest.mark.parametrize("width", [64, 48])
def test_encapsulator(width):
    """Encapsulator in Amaranth's simulator: random packet lengths around the beat boundaries, idle
    input and back-pressure; every output frame equals ``spill_frame`` of the packet, byte for byte."""
    from amaranth.sim import Simulator

    from hdl.spill_buffer import Encapsulator
    from models.headers import spill_frame
    from models.packet import beats_of

    rng = random.Random(runner.traffic_seed())
    dut = Encapsulator(width)
    H = 22
    sizes = [1, width - H - 1, width - H, width - H + 1, width, width + 1, 2 * width - H, 2 * width - H + 1, 300]
    packets = [rng.randbytes(rng.choice(sizes)) for _ in range(60)]
    frames = [bytes(spill_frame(p, port=rng.randrange(4), flow=rng.randrange(1 << 16), seq=n))
              for n, p in enumerate(packets)]
    got = []

    async def bench(ctx):
        beats = [(frame[:H], b) for frame, p in zip(frames, packets) for b in beats_of(p, {}, width)]
        partial = bytearray()
        cycles = 0
        while len(got) < len(frames):
            cycles += 1
            assert cycles < 20000, "encapsulator stalled"
            offer = beats and rng.random() < 0.8
            if offer:
                hdr, b = beats[0]
                ctx.set(dut.hdr, int.from_bytes(hdr, "little"))
                ctx.set(dut.i.payload, b)
            ctx.set(dut.i.valid, bool(offer))
            ready = rng.random() < 0.7
            ctx.set(dut.o.ready, ready)
            if offer and ctx.get(dut.i.ready):
                beats.pop(0)
            if ctx.get(dut.o.valid) and ready:
                o = ctx.get(dut.o.payload)
                keep = int(o.keep)
                assert keep == (1 << keep.bit_length()) - 1 and keep
                assert bool(o.first) == (not partial)
                assert o.last or keep.bit_length() == width
                partial += int(o.data).to_bytes(width, "little")[:keep.bit_length()]
                if o.last:
                    got.append(bytes(partial))
                    partial = bytearray()
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == frames


@pytest.mark.parametrize("width", [64, 48])
def test_decapsulator(width):
    """Decapsulator in Amaranth's simulator: spill frames of inner lengths around the beat boundaries,
    idle input and back-pressure; every output packet equals the inner frame, byte for byte."""
    from amaranth.sim import Simulator

    from hdl.spill_buffer import Decapsulator
    from models.headers import spill_frame
    from models.packet import beats_of

    rng = random.Random(runner.traffic_seed())
    dut = Decapsulator(width)
    H = 22
    sizes = [1, H - 1, H, H + 1, width - H, width - H + 1, width, width + H, width + H + 1, 2 * width, 300]
    packets = [rng.randbytes(rng.choice(sizes)) for _ in range(60)]
    frames = [bytes(spill_frame(p, port=1, seq=n, op=2)) for n, p in enumerate(packets)]
    got = []

    async def bench(ctx):
        beats = [b for frame in frames for b in beats_of(frame, {}, width)]
        partial = bytearray()
        cycles = 0
        while len(got) < len(packets):
            cycles += 1
            assert cycles < 20000, "decapsulator stalled"
            offer = beats and rng.random() < 0.8
            if offer:
                ctx.set(dut.i.payload, beats[0])
            ctx.set(dut.i.valid, bool(offer))
            ready = rng.random() < 0.7
            ctx.set(dut.o.ready, ready)
            if offer and ctx.get(dut.i.ready):
                beats.pop(0)
            if ctx.get(dut.o.valid) and ready:
                o = ctx.get(dut.o.payload)
                keep = int(o.keep)
                assert keep == (1 << keep.bit_length()) - 1 and keep
                assert bool(o.first) == (not partial)
                assert o.last or keep.bit_length() == width
                partial += int(o.data).to_bytes(width, "little")[:keep.bit_length()]
                if o.last:
                    got.append(bytes(partial))
                    partial = bytearray()
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert got == packets

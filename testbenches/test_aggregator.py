"""Aggregator allocator under Verilator: RTL vs golden model packet by packet, and sums vs numpy.

Every test drives scapy-built INA packets into ``i`` and checks every packet out of ``o`` against
``AggregatorModel`` fed the same packets in the same order. A test-side parameter server (``PS``)
additionally checks every emitted aggregate, eviction and forwarded contribution against gradients
summed independently with numpy: each piece's values equal the sum of exactly the workers in its
bitmap, no worker is counted twice across pieces, and at the end every round's total equals the
numpy sum of all its workers' gradients (no contribution lost). Under ATP it answers each completed
round with an ACK, fed back into the DUT (closed loop).
"""
import itertools
import random
from collections import defaultdict

import cocotb
import numpy as np
from amaranth.lib import data
from cocotb.triggers import RisingEdge

from hdl import headers
from hdl.aggregator import COUNTERS, Aggregator, AggregatorParams
from hdl.packet import beat_layout
from models.aggregator import COUNTERS as MODEL_COUNTERS
from models.aggregator import INT32_MAX, INT32_MIN, AggregatorModel
from models.headers import INA, Ether, ina_packet, roce_packet
from testbenches import runner, tb

PS_PORT, MCAST_PORT = 0, 255
#: Liveness bound (cycles) while waiting for the RTL to produce what the model expects.
PATIENCE = 5000


def saturating_sum(rows):
    """Row-by-row saturating int32 sum (numpy) and whether any step saturated."""
    total = np.zeros(rows.shape[1], dtype=np.int64)
    over = False
    for row in rows:
        total = total + row
        over |= bool(((total > INT32_MAX) | (total < INT32_MIN)).any())
        total = np.clip(total, INT32_MIN, INT32_MAX)
    return total, over


class Round:
    """One aggregation round of a job: its job+seq, slot index, priority, workers' gradients."""

    def __init__(self, jobseq, index, priority, grads):
        self.jobseq, self.index, self.priority, self.grads = jobseq, index, priority, grads
        self.fanin = grads.shape[0]

    def packet(self, worker, **flags):
        return ina_packet(worker, self.jobseq, self.index, self.grads[worker].tolist(),
                          fanin=self.fanin, priority=self.priority, **flags)


class PS:
    """Test-side parameter server and conservation checker (numpy sums, independent of the model)."""

    def __init__(self, rounds, ack):
        self.rounds = {r.jobseq: r for r in rounds}
        self.bits = defaultdict(int)
        self.sums = defaultdict(lambda: None)
        self.ack = ack
        self.done = {}
        self.pieces = 0

    def receive(self, raw, cycle):
        """Account one packet out of the DUT; return the packets the PS sends back (ATP ACKs)."""
        pkt = Ether(raw)
        if INA not in pkt or pkt[INA].ack:
            return []
        h = pkt[INA]
        rnd = self.rounds[h.jobseq]
        workers = [w for w in range(32) if h.bitmap >> w & 1]
        expected, over = saturating_sum(rnd.grads[workers])
        assert h.values == expected.tolist(), (
            f"job+seq {h.jobseq:#x}: piece with bitmap {h.bitmap:#x} carries {h.values}, "
            f"numpy sum of exactly those workers is {expected.tolist()}")
        assert h.overflow == over, f"job+seq {h.jobseq:#x}: overflow flag {h.overflow}, numpy says {over}"
        if h.result and h.resend:
            return []       # a copy of a result answering a retransmission
        if h.collision and h.resend and self.bits[h.jobseq] & h.bitmap == h.bitmap:
            return []       # a retransmitted contribution the PS already has
        assert self.bits[h.jobseq] & h.bitmap == 0, (
            f"job+seq {h.jobseq:#x}: workers {self.bits[h.jobseq] & h.bitmap:#x} counted twice")
        self.pieces += 1
        self.bits[h.jobseq] |= h.bitmap
        values = np.array(h.values, dtype=np.int64)
        self.sums[h.jobseq] = values if self.sums[h.jobseq] is None else self.sums[h.jobseq] + values
        if self.bits[h.jobseq] != (1 << rnd.fanin) - 1:
            return []
        self.done[h.jobseq] = cycle
        if not self.ack:
            return []
        return [ina_packet(0, h.jobseq, h.index, [0] * len(h.values), fanin=rnd.fanin, ack=1,
                           bitmap=self.bits[h.jobseq])]

    def incomplete(self):
        return [r for js, r in self.rounds.items() if js not in self.done]

    def check_complete(self):
        """Every round: all workers accounted once, total equals numpy's sum of the gradients."""
        for js, rnd in self.rounds.items():
            assert self.bits[js] == (1 << rnd.fanin) - 1, (
                f"job+seq {js:#x}: workers {((1 << rnd.fanin) - 1) & ~self.bits[js]:#x} lost")
            assert self.sums[js].tolist() == rnd.grads.sum(axis=0).tolist(), (
                f"job+seq {js:#x}: PS total {self.sums[js].tolist()} != numpy "
                f"{rnd.grads.sum(axis=0).tolist()}")


class TB(tb.BlockTB):
    """DUT + golden model + scoreboard + PS; every packet sent goes to both DUT and model."""

    name = "aggregator"

    def __init__(self, dut, rng, idle=0.0, backpressure=0.0):
        super().__init__(dut)
        self.rng = rng
        self.values = self.params.values
        self.layout = beat_layout(self.block.data_bytes)
        self.source = tb.PacketSource(dut, "i", self.layout)
        self.sink = tb.PacketSink(dut, "o", self.layout)
        self.source.set_pause_generator(rng.random() < idle for _ in itertools.count())
        self.sink.set_pause_generator(rng.random() < backpressure for _ in itertools.count())
        self.cycle = 0
        self.muted = False  # while the DUT is being reset, outputs are discarded unanswered
        self.fresh()
        cocotb.start_soon(self._count_cycles())
        cocotb.start_soon(self._consume())

    def fresh(self, rounds=()):
        self.model = AggregatorModel(self.params)
        self.board = tb.Scoreboard(f"aggregator[{self.params.policy}]")
        self.ps = PS(rounds, ack=self.params.policy == "atp")
        self.expected = self.received = 0
        self.sent, self.out = [], []

    async def _count_cycles(self):
        while True:
            await RisingEdge(self.dut.clk)
            self.cycle += 1

    async def _consume(self):
        while True:
            item = await self.sink.recv()
            if self.muted:
                continue
            self.board.check(item)
            self.received += 1
            self.out.append(item[0])
            for reply in self.ps.receive(item[0], self.cycle):
                self.send(reply, {"port": PS_PORT})

    def send(self, pkt, meta=None):
        raw = bytes(pkt)
        meta = meta if meta is not None else {"port": self.rng.randrange(1, 255)}
        self.source.send_nowait(raw, meta)
        self.sent.append(raw)
        for item in self.model.process(raw, meta):
            self.board.expect(item)
            self.expected += 1

    async def drain(self):
        """Wait until every packet sent went through and every expected output came out."""
        waited = 0
        while self.source.queue or self.received < self.expected:
            await RisingEdge(self.dut.clk)
            waited += 1
            assert waited < PATIENCE, (
                f"no progress: {len(self.source.queue)} beats unsent, {self.expected - self.received} "
                "expected packets missing")
        for _ in range(3):
            await RisingEdge(self.dut.clk)
        assert self.sink.empty() and self.received == self.expected

    async def flush_rounds(self):
        """Workers of unfinished rounds time out and retransmit (resend flag) until all complete."""
        for _ in range(3):
            pending = self.ps.incomplete()
            if not pending:
                return
            for rnd in pending:
                for w in range(rnd.fanin):
                    self.send(rnd.packet(w, resend=1))
            await self.drain()

    def finish(self, name):
        self.board.check_done()
        assert COUNTERS == MODEL_COUNTERS
        counters = self.check_counters(self.model.counters)
        self.write_pcaps()
        cocotb.log.info("%s: counters %s", name, counters)
        return counters


def make_rounds(rng, nprng, params, jobs, rounds, first_job=0, low=-1000, high=1000):
    """``jobs`` jobs (priority = job number, fan-in 2..workers) of ``rounds`` rounds sharing the pool."""
    out = []
    for j in range(first_job, first_job + jobs):
        fanin = rng.randrange(2, params.workers + 1)
        for r in range(rounds):
            grads = nprng.integers(low, high, size=(fanin, params.values), dtype=np.int64)
            out.append(Round((j << 16) | r, (3 * j + r) % params.slots, j, grads))
    return out


def interleave(rng, rounds, resend=0.0):
    """Workers' contributions, jobs interleaved at random, rounds of a job in order; retransmissions
    (resend flag) of a contribution are inserted later with probability ``resend``."""
    per_job = defaultdict(list)
    for rnd in rounds:
        order = list(range(rnd.fanin))
        rng.shuffle(order)
        per_job[rnd.jobseq >> 16] += [(rnd, w, {}) for w in order]
    queues = list(per_job.values())
    trace = []
    while queues:
        q = rng.choice(queues)
        trace.append(q.pop(0))
        if not q:
            queues.remove(q)
    for pos in range(len(trace) - 1, -1, -1):
        if rng.random() < resend and not trace[pos][2]:
            rnd, w, _ = trace[pos]
            trace.insert(rng.randrange(pos + 1, len(trace) + 1), (rnd, w, {"resend": 1}))
    return trace


def junk(rng, values):
    """A packet that is not a valid contribution: other traffic, truncated, oversized or bad header."""
    kind = rng.randrange(5)
    if kind == 0:
        return roce_packet(qp=rng.randrange(1 << 24), payload=rng.randbytes(rng.randrange(300)))
    if kind == 1:
        return bytes(ina_packet(0, 1, 0, [1] * values))[:rng.randrange(30, 55 + 4 * values)]
    if kind == 2:
        return ina_packet(0, 1, 0, [1] * (values + rng.randrange(1, 40)))
    if kind == 3:
        return ina_packet(0, 1, 0, [1] * values, fanin=rng.choice([0, 1, 33]))
    return ina_packet(0, 1, 0, [1] * values, bitmap=rng.choice([0, 3, 1 << 31]))


async def run_trace(t, rng, rounds, resend=0.1, junk_rate=0.05):
    t.ps = PS(rounds, ack=t.ps.ack)
    for rnd, w, flags in interleave(rng, rounds, resend):
        t.send(rnd.packet(w, **flags))
        if rng.random() < junk_rate:
            t.send(junk(rng, t.values))
    await t.drain()
    await t.flush_rounds()
    t.ps.check_complete()


# --- cocotb tests --------------------------------------------------------------------------------

@cocotb.test()
async def random_traffic(dut):
    """Jobs of different priorities share a small pool; idle, backpressure, retransmissions, junk."""
    rng = random.Random(tb.seed())
    nprng = np.random.default_rng(rng.randrange(1 << 32))
    t = TB(dut, rng, idle=0.2, backpressure=0.3)
    await tb.reset(dut)
    rounds = make_rounds(rng, nprng, t.params, jobs=3, rounds=20)
    await run_trace(t, rng, rounds)
    counters = t.finish("random")
    assert sum(counters.values()) == len(t.sent), "every packet in is accounted by one counter"
    assert counters["completed"] > 0, "rounds were aggregated in the switch"
    if t.params.policy == "atp":
        assert counters["ack_freed"] > 0
    assert t.model.occupied() == 0, "every slot freed at the end"


@cocotb.test()
async def preemption(dut):
    """A low-priority job holds every slot; a high-priority job arrives: ESA evicts, others collide."""
    rng = random.Random(tb.seed())
    nprng = np.random.default_rng(rng.randrange(1 << 32))
    t = TB(dut, rng)
    await tb.reset(dut)
    P, W, V = t.params.slots, t.params.workers, t.params.values
    grads = lambda n: nprng.integers(-1000, 1000, size=(n, V), dtype=np.int64)  # noqa: E731
    low = [Round((1 << 16) | k, k, 1, grads(W)) for k in range(P)]
    high = [Round((9 << 16) | k, k, 9, grads(W)) for k in range(P)]
    lower = [Round((0 << 16) | k, k, 0, grads(W)) for k in range(P)]
    t.ps = PS(low + high + lower, ack=t.ps.ack)
    for rnd in low:                       # partial aggregates of the low job in every slot
        for w in range(W - 1):
            t.send(rnd.packet(w))
    for rnd in lower:                     # lower priority: never preempts
        t.send(rnd.packet(0))
    for rnd in high:                      # higher priority: preempts under ESA
        for w in range(W):
            t.send(rnd.packet(w))
    for rnd in low + lower:               # the rest of the low job and of the lower job
        for w in range(W - 1 if rnd in low else 1, W):
            t.send(rnd.packet(w))
    await t.drain()
    await t.flush_rounds()
    t.ps.check_complete()
    counters = t.finish("preemption")
    if t.params.policy == "esa":
        assert counters["preempted"] == P, "every low-priority partial evicted exactly once"
    else:
        assert counters["preempted"] == 0


@cocotb.test()
async def duplicates(dut):
    """Duplicates are never added twice: while aggregating, retransmitted, after completion."""
    rng = random.Random(tb.seed())
    nprng = np.random.default_rng(rng.randrange(1 << 32))
    t = TB(dut, rng, backpressure=0.3)
    await tb.reset(dut)
    W, V, policy = t.params.workers, t.params.values, t.params.policy
    rounds = [Round(0x100 + k, 0, 1, nprng.integers(-1000, 1000, size=(W, V), dtype=np.int64))
              for k in range(3)]
    t.ps = PS(rounds, ack=False)
    a, b, c = rounds
    # a: plain duplicates while aggregating, then completion, then a retransmission after it
    for w in (0, 0, 1, 1):
        t.send(a.packet(w))
    for w in range(2, W):
        t.send(a.packet(w))
    t.send(a.packet(0, resend=1))         # answered with the complete result, not re-added
    t.send(a.packet(0))
    await t.drain()
    assert t.model.counters["duplicate"] == 2 and t.model.counters["completed"] == 1
    assert t.model.counters["resent"] == 2
    if policy == "atp":                   # the ACK frees the slot, then b can claim it
        t.send(ina_packet(0, a.jobseq, 0, [0] * V, fanin=W, ack=1))
    # b: a retransmission of a bit already in the slot flushes the partial; the PS dedups the rest
    for packet in (b.packet(0), b.packet(1), b.packet(1, resend=1), b.packet(0, resend=1)):
        t.send(packet)
    await t.drain()
    assert t.model.counters["flushed"] == 1
    await t.flush_rounds()
    # c: retransmission of a bit not yet in the slot goes to the PS and is not added
    t.send(c.packet(0))
    for _ in range(2):
        t.send(c.packet(1, resend=1))
    await t.drain()
    await t.flush_rounds()
    t.ps.check_complete()
    t.finish("duplicates")


@cocotb.test()
async def overflow(dut):
    """Saturating int32 add: the aggregate equals numpy's step-by-step clipped sum, flag set."""
    rng = random.Random(tb.seed())
    nprng = np.random.default_rng(rng.randrange(1 << 32))
    t = TB(dut, rng)
    await tb.reset(dut)
    W, V = t.params.workers, t.params.values
    big = [INT32_MAX, INT32_MIN, INT32_MAX // 2 + 7, -(INT32_MAX // 2) - 9]
    rounds = []
    for k in range(4):
        grads = nprng.integers(-1000, 1000, size=(W, V), dtype=np.int64)
        grads[:, 0] = big[k]
        grads[0, V - 1] = rng.choice([INT32_MAX, INT32_MIN])
        rounds.append(Round(0x200 + k, k % t.params.slots, 1, grads))
    t.ps = PS(rounds, ack=t.params.policy == "atp")
    for rnd in rounds:
        for w in range(W):
            t.send(rnd.packet(w))
        await t.drain()
    saturated = [Ether(raw)[INA] for raw in t.out if INA in Ether(raw) and Ether(raw)[INA].result]
    assert len(saturated) == len(rounds) and all(h.overflow for h in saturated[:2])
    for h, rnd in zip(saturated, rounds):
        total, over = saturating_sum(rnd.grads)
        assert h.values == total.tolist() and h.overflow == over
    t.finish("overflow")


@cocotb.test()
async def malformed(dut):
    """Other traffic passes unchanged (multi-beat too); truncated, oversized, bad headers dropped."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, idle=0.3, backpressure=0.3)
    await tb.reset(dut)
    V, W, P = t.params.values, t.params.workers, t.params.slots
    good = bytes(ina_packet(0, 5, 0, [1] * V, fanin=W))
    cases = [
        roce_packet(payload=rng.randbytes(400)),                       # multi-beat, passes
        roce_packet(payload=b"x"),                                     # single beat, passes
        good[:37],                                                     # too short to tell: passes
        good[:54], good[:-1], good + b"\0",                 # too short / long
        ina_packet(0, 5, 0, [1] * (V + 40), fanin=W),                  # multi-beat INA
        ina_packet(0, 5, P, [1] * V, fanin=W),                         # index out of range
        ina_packet(0, 5, 0, [1] * V, fanin=1), ina_packet(0, 5, 0, [1] * V, fanin=W + 1),
        ina_packet(0, 5, 0, [1] * V, fanin=W, bitmap=0),
        ina_packet(0, 5, 0, [1] * V, fanin=W, bitmap=0b11),
        ina_packet(0, 5, 0, [1] * V, fanin=W, bitmap=1 << W),
        ina_packet(0, 5, 0, [1] * V, fanin=W, collision=1),
        ina_packet(0, 5, 0, [1] * V, fanin=W, result=1),
        ina_packet(0, 5, 0, [1] * V, fanin=W, evict=1),
        ina_packet(0, 5, 0, [1] * V, fanin=W, overflow=1),
        ina_packet(0, 5, 0, [1] * V, fanin=W, resv=2),
        good[:14] + b"\x46" + good[15:],                               # IPv4 with options: not ours
    ]
    for pkt in cases:
        t.send(pkt)
    await t.drain()
    counters = t.finish("malformed")
    assert counters["passed"] == 4 and counters["malformed"] == 4 and counters["bad_header"] == 11
    assert all(v == 0 for k, v in counters.items() if k not in ("passed", "malformed", "bad_header"))


@cocotb.test()
async def line_rate(dut):
    """Without backpressure the block takes one packet per cycle, back to back."""
    rng = random.Random(tb.seed())
    nprng = np.random.default_rng(rng.randrange(1 << 32))
    t = TB(dut, rng)
    await tb.reset(dut)
    rounds = make_rounds(rng, nprng, t.params, jobs=3, rounds=8)
    t.ps = PS(rounds, ack=False)
    trace = interleave(rng, rounds)
    stalls = transfers = 0

    async def monitor():
        nonlocal stalls, transfers
        while True:
            await RisingEdge(dut.clk)
            if dut.i__valid.value:
                stalls += not dut.i__ready.value
                transfers += bool(dut.i__ready.value)
    cocotb.start_soon(monitor())
    for rnd, w, flags in trace:
        t.send(rnd.packet(w, **flags))
    busy = 0
    while t.source.queue:
        await RisingEdge(dut.clk)
        busy += 1
    await t.drain()
    assert stalls == 0, f"{stalls} cycles of backpressure with a ready sink"
    assert transfers == len(trace) and busy <= len(trace) + 2, (
        f"{len(trace)} packets took {busy} cycles: not one per cycle")
    cocotb.log.info("line rate: %d packets in %d cycles", len(trace), busy)
    t.finish("line_rate")


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset while packets are in flight: state and counters clear, the next traffic is exact."""
    rng = random.Random(tb.seed())
    nprng = np.random.default_rng(rng.randrange(1 << 32))
    t = TB(dut, rng, idle=0.2, backpressure=0.5)
    await tb.reset(dut)
    rounds = make_rounds(rng, nprng, t.params, jobs=3, rounds=6)
    t.ps = PS(rounds, ack=t.ps.ack)
    trace = interleave(rng, rounds)
    for rnd, w, flags in trace:
        t.send(rnd.packet(w, **flags))
    landing = rng.randrange(len(trace) // 4, 3 * len(trace) // 4)     # beats taken before the reset
    while t.source.sent < landing:
        await RisingEdge(dut.clk)
    assert t.source.queue, "reset lands mid-traffic"
    t.muted = True
    await t.reset(2)
    t.sink.clear()
    t.fresh()
    t.muted = False
    assert all(int(getattr(dut, name).value) == 0 for name in COUNTERS), "counters cleared"
    await run_trace(t, rng, make_rounds(rng, nprng, t.params, jobs=3, rounds=6, first_job=4))
    t.finish("after_reset")


# --- pytest ----------------------------------------------------------------------------------------

PARAMS = {policy: AggregatorParams(policy=policy, slots=4, workers=4, values=8, data_bytes=128, ps_port=PS_PORT,
                                   mcast_port=MCAST_PORT) for policy in ("atp", "switchml", "esa")}
#: ESA with a tiny pool on a 64-byte bus: 2 slots, 3 workers, 1 value.
PARAMS["small"] = AggregatorParams(policy="esa", slots=2, workers=3, values=1, data_bytes=64, ps_port=PS_PORT,
                                   mcast_port=MCAST_PORT)
#: Parsing and arithmetic are shared by the policies: these tests run once, under ESA.
SHARED = ("malformed", "overflow")


def runs(config, test):
    """Policy-dependent behaviour under every policy; ``SHARED`` under ESA; the tiny pool: random traffic."""
    if config == "small":
        return test == "random_traffic"
    return config == "esa" or test not in SHARED


@runner.parametrize(__name__, PARAMS, select=runs)
def test_aggregator(params, testcase, record_property):
    record_property("innet", runner.run(Aggregator, params, __name__, testcase))


def scapy_fields(layer):
    return {f.name: layer.getfieldval(f.name) for f in layer.fields_desc if f.name != "values"}


def test_ina_layout_matches_scapy():
    """scapy INA bytes -> ``headers.INA`` fields and back; values are big-endian int32 after it."""
    rng = random.Random(3)
    size = headers.INA.size // 8
    assert headers.INA_OFFSET == 42 and headers.INA_HEADER_BYTES == 42 + size
    for _ in range(100):
        flags = {f: rng.randrange(2) for f in ("overflow", "resend", "collision", "ack", "evict", "result")}
        values = [rng.randrange(INT32_MIN, INT32_MAX + 1) for _ in range(rng.randrange(1, 9))]
        pkt = ina_packet(rng.randrange(32), rng.randrange(1 << 32), rng.randrange(1 << 16), values,
                         fanin=rng.randrange(256), priority=rng.randrange(256), resv=rng.randrange(4),
                         **flags)
        raw = bytes(pkt)
        parsed = Ether(raw)[INA]
        expected = scapy_fields(parsed)
        assert set(expected) == {name for name, _ in headers.INA}
        view = data.Const(headers.INA, int.from_bytes(raw[42:42 + size], "big"))
        for name, value in expected.items():
            assert view[name] == value, name
        assert headers.INA.const(expected).as_value().value.to_bytes(size, "big") == raw[42:42 + size]
        tail = raw[headers.INA_HEADER_BYTES:]
        assert [int.from_bytes(tail[4 * i:4 * i + 4], "big", signed=True) for i in range(len(values))] \
            == parsed.values == values

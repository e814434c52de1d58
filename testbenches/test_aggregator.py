"""Aggregator allocator under Verilator: RTL vs golden model packet by packet, and sums vs numpy.

Every test drives scapy-built INA packets into ``i``; the lockstep checks every packet out of ``o``
against ``AggregatorModel`` fed the packets in the order the RTL took them. Directed tests, one per
rule of SPEC section 3 and named after the P4 table/action they mirror, also check each output
against values computed here with numpy. A test-side ``PS`` checks every piece the switch emits
independently: its values equal the numpy sum of exactly the workers in its bitmap; ATP/ESA's PS
keeps a piece only if none of its workers is already accounted (ATP's ``ParameterServer.cc``),
ACKs a round once every worker is in, and at the end every round's total equals numpy's (no
contribution lost or counted twice). SwitchML's workers check each multicast result and each
answer to a retransmission the same way.
"""
import itertools
import random
from collections import defaultdict

import cocotb
import numpy as np
from cocotb.triggers import RisingEdge

from hdl.aggregator import COUNTERS, Aggregator, AggregatorParams
from models.aggregator import ACK, INT32_MAX, INT32_MIN, OVERFLOW, RESEND, AggregatorModel, atp_add
from models.aggregator import COUNTERS as MODEL_COUNTERS
from models.headers import INA, IP, Ether, ina_packet, roce_packet
from models.wire import INA_SET_BIT
from testbenches import runner, tb
from testbenches.soak_traffic import aggregator_junk

PS_PORT, MCAST_PORT = 0, 255
#: Liveness bound (cycles) while waiting for the RTL to produce what the model expects.
PATIENCE = 5000


def atp_sum(rows):
    """ATP's value registers over ``rows`` in arrival order: first row written, then ``atp_add``."""
    total = [int(x) for x in rows[0]]
    for row in rows[1:]:
        total = [atp_add(a, int(v)) for a, v in zip(total, row)]
    return total


def wrap_sum(rows):
    """SwitchML's ``bit<32>`` sum (numpy, modulo 2**32, read as int32)."""
    return (np.asarray(rows, dtype=np.int64).sum(axis=0) % (1 << 32)).astype(np.uint32).astype(np.int32).tolist()


def worker_port(worker):
    """Ingress port of ``worker`` (meta.port of its packets; SwitchML answers retransmissions there)."""
    return 1 + worker


class Round:
    """One aggregation round of a job: job+seq, slot ``index`` (SwitchML: set bit 15), priority, gradients."""

    def __init__(self, jobseq, index, priority, grads):
        self.jobseq, self.index, self.priority, self.grads = jobseq, index, priority, grads
        self.fanin = grads.shape[0]

    def packet(self, worker, **flags):
        return ina_packet(worker, self.jobseq, self.index, self.grads[worker].tolist(),
                          fanin=self.fanin, priority=self.priority, **flags)


class PS:
    """Test-side parameter server (ATP/ESA) or SwitchML workers' result check, numpy only."""

    def __init__(self, rounds, policy):
        self.rounds = {r.jobseq: r for r in rounds}
        self.policy = policy
        self.bits = defaultdict(int)
        self.sums = {}
        self.done = {}
        self.pieces = self.discarded = 0

    def piece_ok(self, h, rnd):
        workers = [w for w in range(32) if h.bitmap >> w & 1]
        assert workers and max(workers) < rnd.fanin, f"job+seq {h.jobseq:#x}: bitmap {h.bitmap:#x}"
        expected = wrap_sum(rnd.grads[workers]) if self.policy == "switchml" else rnd.grads[workers].sum(axis=0)
        assert h.values == list(map(int, expected)), (
            f"job+seq {h.jobseq:#x}: piece with bitmap {h.bitmap:#x} carries {h.values}, "
            f"numpy sum of exactly those workers is {list(map(int, expected))}")

    def receive(self, raw, meta, cycle):
        """Account one packet out of the DUT; return the packets sent back (ATP/ESA ACKs)."""
        pkt = Ether(raw)
        if INA not in pkt or pkt[INA].ack or pkt[INA].jobseq not in self.rounds:
            return []
        h, rnd = pkt[INA], self.rounds[pkt[INA].jobseq]
        self.piece_ok(h, rnd)
        full = (1 << rnd.fanin) - 1
        if self.policy == "switchml":
            assert h.result and h.bitmap == full, f"job+seq {h.jobseq:#x}: SwitchML emits only full results"
            assert meta["port"] in (MCAST_PORT, *map(worker_port, range(rnd.fanin)))
            self.bits[h.jobseq] = full
            self.sums[h.jobseq] = np.array(h.values, dtype=np.int64)
            self.done.setdefault(h.jobseq, cycle)
            return []
        assert meta["port"] == PS_PORT
        if self.bits[h.jobseq] & h.bitmap:
            self.discarded += 1     # ParameterServer.cc: a piece with a worker already in is dropped whole
            return []
        self.pieces += 1
        self.bits[h.jobseq] |= h.bitmap
        values = np.array(h.values, dtype=np.int64)
        self.sums[h.jobseq] = values + self.sums.get(h.jobseq, 0)
        if self.bits[h.jobseq] != full:
            return []
        self.done[h.jobseq] = cycle
        return [ina_packet(0, h.jobseq, h.index, [0] * len(h.values), fanin=rnd.fanin, ack=1, bitmap=full)]

    def incomplete(self):
        return [r for js, r in self.rounds.items() if js not in self.done]

    def check_complete(self):
        """Every round: all workers accounted once, total equals numpy's sum of the gradients."""
        for js, rnd in self.rounds.items():
            assert self.bits[js] == (1 << rnd.fanin) - 1, (
                f"job+seq {js:#x}: workers {((1 << rnd.fanin) - 1) & ~self.bits[js]:#x} never reached the PS")
            total = rnd.grads.sum(axis=0)
            if self.policy == "switchml":
                total = wrap_sum(rnd.grads)
            assert self.sums[js].tolist() == list(map(int, total)), (
                f"job+seq {js:#x}: total {self.sums[js].tolist()} != numpy {list(map(int, total))}")


KINDS = ("data", "resend", "overflow", "ack", "other")
#: Outcomes a policy has no rule for: SwitchML has no job+seq, PS or collision; ATP does not preempt.
NEVER = {"switchml": ("collision", "forwarded", "flushed", "preempted", "ack_freed"), "atp": ("preempted",)}
NOT_OURS = "a packet that is not a well-formed INA contribution or ACK touches no slot"


def coverage(policy):
    """Every outcome counter; ATP/ESA: packet kind x what its slot held; ESA: contests by priority;
    SwitchML: the set's progress at each packet."""
    cover = tb.Coverage(f"aggregator.{policy}")
    cover.point("outcome", [c for c in MODEL_COUNTERS if c not in NEVER.get(policy, ())])
    cover.point("kind", ("data", "ack", "other") if policy == "switchml" else KINDS)   # SwitchML: no flags
    if policy == "switchml":
        cover.point("set", ("fresh", "mid", "completes", "complete"))
        cover.point("retransmission", ("yes", "no"))
        cover.cross("set_x_retransmission", "set", "retransmission", unreachable={
            ("fresh", "yes"): "a retransmission finds its bit set: the set is mid-round or complete",
            ("completes", "yes"): "a retransmission only reads the count-down, it completes nothing",
            ("complete", "no"): "a set at count 0 without the packet's bit starts a new round (fresh)"})
        return cover
    # ESA frees a slot the moment its round completes: it never holds a complete round.
    cover.point("slot", ("empty", "same", "other") + (("same_complete",) if policy == "atp" else ()))
    cover.cross("kind_x_slot", "kind", "slot", unreachable={("other", None): NOT_OURS})
    if policy == "esa":
        cover.point("contest", ("preempted", "collided"))
        cover.point("priority", ("higher", "equal", "lower"))
        only = "ESA preempts only a strictly lower-priority holder"
        cover.cross("contest_x_priority", "contest", "priority", unreachable={
            ("preempted", "equal"): only, ("preempted", "lower"): only,
            ("collided", "higher"): "a strictly higher priority always preempts (or flushes a resend)"})
    return cover


def sample_before(model, raw):
    """Coverage values of packet ``raw`` from the model's state before it is processed."""
    if not model.is_ina(raw) or len(raw) != model.length:
        return {"kind": "other"}
    h = model._header(raw)
    kind = ("ack" if h["flags"] & ACK else "data" if model.policy == "switchml" else "overflow"
            if h["flags"] & OVERFLOW else "resend" if h["flags"] & RESEND else "data")
    if kind != "ack" and not model._valid_contribution(h):
        return {"kind": "other"}
    if model.policy == "switchml":
        if kind == "ack":
            return {"kind": kind}
        pool, s = model.pool[h["index"] & ~INA_SET_BIT], h["index"] >> 15
        retransmission = bool(pool.bitmap[s] & h["bitmap"])
        count = pool.count[s]
        if retransmission:
            progress = "complete" if count == 0 else "mid"
        else:
            progress = "fresh" if count == 0 else "completes" if count == 1 else "mid"
        return {"kind": kind, "set": progress, "retransmission": "yes" if retransmission else "no"}
    if h["index"] >= model.slots:
        return {"kind": kind}
    slot = model.state[h["index"]]
    held = ("empty" if slot.jobseq == 0 else "other" if slot.jobseq != h["jobseq"]
            else "same_complete" if slot.count == h["fanin"] else "same")
    values = {"kind": kind, "slot": held}
    if held == "other":
        values["priority"] = ("higher" if h["priority"] > slot.priority else "equal"
                              if h["priority"] == slot.priority else "lower")
    return values


class Observed(AggregatorModel):
    """The golden model with the testbench's coverage sampled around each packet (the slot it meets,
    the outcome) and the packets it makes counted (``made``: what the RTL still owes)."""

    def __init__(self, params, cover):
        super().__init__(params)
        self.cover = cover

    def reset(self):
        super().reset()
        self.made = 0

    def process(self, port, item):
        before, values = self.counters(), sample_before(self, bytes(item.data))
        made = super().process(port, item)
        self.made += len(made["o"])
        for outcome in (k for k, v in self.counters().items() if v != before[k]):
            self.cover.sample(outcome=outcome, **values)
            if outcome in ("preempted", "collision") and "priority" in values and values.get("kind") == "data":
                self.cover.sample(contest="preempted" if outcome == "preempted" else "collided",
                                  priority=values["priority"])
        return made


class TB(tb.BlockTB):
    """DUT and golden model in lockstep, and the PS; every packet out goes to the PS."""

    name = "aggregator"

    def __init__(self, dut, rng, idle=0.0, backpressure=0.0):
        self.cover = coverage(tb.params().policy)
        super().__init__(dut, Observed(tb.params(), self.cover))
        self.rng = rng
        self.policy, self.values = self.params.policy, self.params.values
        self.source = self.packet_source("i")
        self.sink = self.packet_sink("o")
        self.source.set_pause_generator(rng.random() < idle for _ in itertools.count())
        self.sink.set_pause_generator(rng.random() < backpressure for _ in itertools.count())
        self.answer = True  # the PS answers complete rounds with an ACK
        self.fresh()
        cocotb.start_soon(self._consume())

    def fresh(self, rounds=()):
        """A new PS and tallies (the model is the lockstep's: a reset restarts it)."""
        self.ps = PS(rounds, self.policy)
        self.received = 0
        self.sent, self.out = [], []

    async def _consume(self):
        while True:
            item = await self.sink.recv()
            if self.muted:
                continue
            self.received += 1
            self.out.append(item)
            for reply in self.ps.receive(item[0], item[1], self.cycle):
                if self.answer:
                    self.send(reply, {"port": PS_PORT})

    def send(self, pkt, meta=None):
        raw = bytes(pkt)
        if meta is None:
            h = Ether(raw)[INA] if INA in Ether(raw) else None
            meta = {"port": worker_port(h.bitmap.bit_length() - 1) if h is not None and h.bitmap else 99}
        self.source.send_nowait(raw, meta)
        self.sent.append(raw)

    async def drain(self):
        """Wait until every packet sent went through and every output the model made came out (and
        stayed so for 3 cycles)."""
        waited = quiet = 0
        while quiet < 3:
            await RisingEdge(self.dut.clk)
            waited += 1
            assert waited < PATIENCE, (
                f"no progress: {len(self.source.queue)} beats unsent, {self.model.made - self.received} "
                "expected packets missing")
            quiet = quiet + 1 if not self.source.queue and self.received == self.model.made else 0
        assert self.sink.empty()

    async def outputs(self, *packets):
        """Send ``packets``, drain, return the INA headers and metas they produced."""
        mark = len(self.out)
        for p in packets:
            self.send(p)
        await self.drain()
        return [(Ether(raw)[INA], meta) for raw, meta in self.out[mark:]]

    async def recover(self, rounds=None):
        """Loss recovery until every round is done: ATP/ESA workers resend (resend flag); SwitchML
        workers retransmit the same packet (the switch tells a retransmission by its bitmap)."""
        for _ in range(4):
            pending = [r for r in (rounds or self.ps.rounds.values()) if r.jobseq not in self.ps.done]
            if not pending:
                return
            for rnd in pending:
                for w in range(rnd.fanin):
                    self.send(rnd.packet(w, resend=int(self.policy != "switchml")))
            await self.drain()
        assert False, f"rounds {[hex(r.jobseq) for r in pending]} never completed"

    def finish(self, name):
        self.check_done()
        assert COUNTERS == MODEL_COUNTERS
        counters = self.check_counters()
        self.conserved("packets in", len(self.sent), **counters)
        self.write_pcaps()
        self.cover.write()
        cocotb.log.info("%s: counters %s", name, counters)
        return counters


def make_rounds(rng, nprng, params, jobs, rounds, first_job=0, low=-1000, high=1000):
    """``jobs`` jobs (priority = job number, fan-in 2..workers) of ``rounds`` rounds sharing the pool.
    ATP/ESA: round r of job j at slot (3j + r) mod slots. SwitchML: job j owns a range of the pool
    (the control plane's split) and round r uses slot r mod size of it, set (r div size) mod 2."""
    out, P = [], params.slots
    sizes = [P // jobs + (j < P % jobs) for j in range(jobs)]
    for j in range(jobs):
        fanin = rng.randrange(2, params.workers + 1)
        base, size = sum(sizes[:j]), max(sizes[j], 1)
        for r in range(rounds):
            grads = nprng.integers(low, high, size=(fanin, params.values), dtype=np.int64)
            if params.policy == "switchml":
                index = (INA_SET_BIT if (r // size) % 2 else 0) | (base + r % size)
            else:
                index = (3 * (first_job + j) + r) % P
            out.append(Round(((first_job + j + 1) << 16) | r, index, first_job + j, grads))
    return out


def interleave(rng, rounds):
    """Workers' contributions, jobs interleaved at random, each job's rounds in order."""
    per_job = defaultdict(list)
    for rnd in rounds:
        order = list(range(rnd.fanin))
        rng.shuffle(order)
        per_job[rnd.jobseq >> 16] += [(rnd, w) for w in order]
    queues = list(per_job.values())
    trace = []
    while queues:
        q = rng.choice(queues)
        trace.append(q.pop(0))
        if not q:
            queues.remove(q)
    return trace


def junk(rng, values):
    """A packet that is not a valid contribution: other traffic, truncated, oversized or bad header (the
    soak's first five kinds)."""
    return aggregator_junk(rng, values, rng.randrange(5))


async def atp_traffic(t, rng, rounds, loss=0.1, resend=0.1, overflow=0.05, dup=0.1, acks=0.05, junk_rate=0.03):
    """ATP/ESA: losses, resends, overflow=1 contributions, plain duplicates, stray and early ACKs, junk;
    then recovery, then plain duplicates of finished rounds (arriving after their slot was freed)."""
    t.ps = PS(rounds, t.policy)
    sent = []
    for rnd, w in interleave(rng, rounds):
        if rng.random() < loss:
            continue
        t.send(rnd.packet(w, overflow=int(rng.random() < overflow)))
        sent.append((rnd, w))
        if rng.random() < resend:
            t.send(rnd.packet(w, resend=1))
        if rng.random() < dup:
            d_rnd, d_w = rng.choice(sent)
            t.send(d_rnd.packet(d_w))
        if rng.random() < acks:     # early ACK (the round just contributed to) or stray ACK (no such job+seq)
            early = rnd
            js = early.jobseq if rng.random() < 0.5 else 0xDEAD0000 | rng.randrange(1 << 16)
            t.send(ina_packet(0, js, early.index, [0] * t.values, fanin=early.fanin, ack=1,
                              overflow=int(rng.random() < 0.3), resend=int(rng.random() < 0.3)), {"port": PS_PORT})
        if rng.random() < junk_rate:
            t.send(junk(rng, t.values))
    await t.drain()
    await t.recover()
    t.ps.check_complete()
    for rnd, w in rng.sample(sent, min(len(sent), 8)):      # late plain duplicates
        t.send(rnd.packet(w))
    await t.drain()


async def switchml_traffic(t, rng, rounds, loss=0.1, dup=0.1, junk_rate=0.03):
    """SwitchML, wave by wave (a wave = one use of every job's pool range; the next flips the sets):
    losses, plain duplicates while the worker is still on that set, retransmissions until done."""
    t.ps = PS(rounds, t.policy)
    per_job = defaultdict(list)
    for rnd in rounds:
        per_job[rnd.jobseq >> 16].append(rnd)
    sizes = {j: len({r.index & ~INA_SET_BIT for r in rs}) for j, rs in per_job.items()}
    waves = defaultdict(list)
    for j, rs in per_job.items():
        for r, rnd in enumerate(rs):
            waves[r // sizes[j]].append(rnd)
    for wave in (waves[k] for k in sorted(waves)):
        sent = []
        for rnd, w in interleave(rng, wave):
            if rng.random() < loss:
                continue
            t.send(rnd.packet(w))
            sent.append((rnd, w))
            if rng.random() < dup:
                d_rnd, d_w = rng.choice(sent)
                t.send(d_rnd.packet(d_w))
            if rng.random() < junk_rate:
                t.send(junk(rng, t.values))
        await t.drain()
        await t.recover(wave)
    t.ps.check_complete()


async def traffic(t, rng, rounds):
    if t.policy == "switchml":
        await switchml_traffic(t, rng, rounds)
    else:
        await atp_traffic(t, rng, rounds)


# --- cocotb tests: random traffic ------------------------------------------------------------------

#: ATP/ESA random traffic: batches at most (3 jobs x 20 rounds each).
BATCHES = 6


@cocotb.test()
async def random_traffic(dut):
    """Jobs share a small pool; idle, backpressure, losses, resends, overflow packets, stray and early
    ACKs, plain duplicates (also after a slot was freed), junk; recovered until every round is done."""
    rng = random.Random(tb.seed())
    nprng = np.random.default_rng(rng.randrange(1 << 32))
    t = TB(dut, rng, idle=0.2, backpressure=0.3)
    await tb.reset(dut)
    if t.policy == "switchml":
        rounds = make_rounds(rng, nprng, t.params, jobs=3, rounds=20)
        await traffic(t, rng, rounds)
        last = rounds[19]       # job 0's last round: the last use of its (slot, set), complete
        t.send(last.packet(0), {"port": worker_port(0)})     # a retransmission answered to worker 0
        await t.drain()
        counters = t.finish("random")
        assert counters["completed"] > 0, "rounds were aggregated in the switch"
        assert counters["resent"] + counters["duplicate"] > 0
        return
    events, done = ("ack_freed", "forwarded", "flushed"), set()
    for batch in range(BATCHES):    # new jobs until every event was seen (an ESA ACK rarely finds its slot)
        rounds = make_rounds(rng, nprng, t.params, jobs=3, rounds=20, first_job=3 * batch)
        await atp_traffic(t, rng, rounds, acks=0.05 if batch == 0 else 0.3)
        done |= set(t.ps.done)
        if all(t.model.counters[e] for e in events):
            break
    done |= await every_event(t, nprng, first_job=3 * BATCHES)
    counters = t.finish("random")
    assert counters["completed"] > 0, "rounds were aggregated in the switch"
    assert all(counters[e] for e in events), f"after {BATCHES} batches some events never happened: {counters}"
    held = [s.jobseq for s in t.model.state if s.jobseq]
    assert all(js in done for js in held), "a slot is left held only by a finished round's late duplicate"


async def every_event(t, nprng, first_job):
    """ATP/ESA, after the random batches: each event ``random_traffic`` checks, reached by construction
    on slot 0 (a small pool can clog with other jobs' partials so that no random round completes):
    the holder's ACK frees the slot; an early ACK frees a partial (ack_freed); its round recovers by
    resends to the empty slot (forwarded); a resend with a match flushes (flushed); a round completes
    in the switch (completed). Returns the job+seqs the PS finished."""
    V, W = t.values, t.params.workers
    ack = dict(fanin=W, ack=1)
    if t.model.state[0].jobseq:
        t.send(ina_packet(0, t.model.state[0].jobseq, 0, [0] * V, **ack), {"port": PS_PORT})
    early, flush, whole = (Round((first_job + k + 1) << 16, 0, first_job + k, grads(nprng, t, 2)) for k in range(3))
    t.ps = PS([early, flush, whole], t.policy)
    t.send(early.packet(0))
    t.send(ina_packet(0, early.jobseq, 0, [0] * V, **ack), {"port": PS_PORT})
    t.send(flush.packet(0))
    t.send(flush.packet(1, resend=1))
    await t.drain()
    await t.recover([early])
    t.send(whole.packet(0))
    t.send(whole.packet(1))
    await t.drain()
    t.ps.check_complete()
    return set(t.ps.done)


# --- cocotb tests: ATP rules (run under ATP and ESA) -----------------------------------------------

def grads(nprng, t, n=None, low=-1000, high=1000):
    return nprng.integers(low, high, size=(n or t.params.workers, t.values), dtype=np.int64)


async def setup(dut, **kw):
    rng = random.Random(tb.seed())
    nprng = np.random.default_rng(rng.randrange(1 << 32))
    t = TB(dut, rng, **kw)
    await tb.reset(dut)
    return t, rng, nprng


@cocotb.test()
async def atp_check_app_id_and_seq(dut):
    """check_app_id_and_seq + tag_collision_incoming: a slot is claimed when empty or holding the
    packet's job+seq; another job+seq (ESA: not of strictly higher priority) goes to the PS unchanged
    but for the collision flag."""
    t, rng, nprng = await setup(dut)
    a, b = Round(0x10001, 1, 5, grads(nprng, t)), Round(0x20001, 1, 5, grads(nprng, t))
    t.answer = False
    assert await t.outputs(a.packet(0), a.packet(1)) == []
    assert t.model.state[1].jobseq == a.jobseq and t.model.state[1].bitmap == 0b11
    (h, meta), = await t.outputs(b.packet(2))
    assert h.collision and not h.result and meta["port"] == PS_PORT
    assert h.bitmap == 1 << 2 and h.jobseq == b.jobseq and h.values == b.grads[2].tolist()
    assert t.model.state[1].jobseq == a.jobseq, "the holder keeps its slot"
    t.finish("check_app_id_and_seq")


@cocotb.test()
async def atp_noequ0_write_data_entry(dut):
    """noequ0_write_data_entry: a value register adds (saturating) only while its stored value is
    strictly inside +-2147483647, so it sticks at the bound; the aggregate equals ATP's arithmetic
    in arrival order (the PS reads INT32_MAX/MIN as switch overflow). Both bounds, and a value that
    comes back inside before the bound is reached."""
    t, rng, nprng = await setup(dut)
    W, V = t.params.workers, t.values
    t.answer = False
    cols = [[INT32_MAX - 5, 3, 10, -100], [INT32_MIN + 2, -1, -7, 50], [INT32_MAX, -1, -1, -1],
            [2_000_000_000, 200_000_000, -300_000_000, 5], [-(INT32_MAX - 1), -1, 5, 5]]
    for k, col in enumerate(cols):
        g = grads(nprng, t)
        g[:, 0] = (col * W)[:W]
        rnd = Round(0x30000 + k + 1, k % t.params.slots, 1, g)
        outs = await t.outputs(*(rnd.packet(w) for w in range(W)))
        (h, _), = outs
        expected = atp_sum(g)
        assert h.values == expected, f"{col}: {h.values[0]} != ATP arithmetic {expected[0]}"
        if col[0] == INT32_MAX:
            assert h.values[0] == INT32_MAX, "a register at the bound sticks"
        await t.outputs(ina_packet(0, rnd.jobseq, rnd.index, [0] * V, fanin=W, ack=1))
    t.finish("noequ0_write_data_entry")


@cocotb.test()
async def atp_outPort_table_overflow(dut):
    """p4ml.p4:62: a data packet with overflow=1 bypasses aggregation to the PS unchanged; the slot
    is untouched (incomplete, and complete: ATP holds a complete round until its ACK). Also, by
    construction under both policies: a bad header (fan-in 1) dropped, and a repeat of a worker whose
    fan-in the slot's count meets answered as ``resent``."""
    t, rng, nprng = await setup(dut)
    a = Round(0x40001, 0, 1, grads(nprng, t))
    t.answer = False
    await t.outputs(a.packet(0))
    (h, meta), = await t.outputs(a.packet(1, overflow=1))
    assert h.overflow and not h.result and not h.collision and meta["port"] == PS_PORT
    assert h.bitmap == 0b10 and h.values == a.grads[1].tolist()
    assert t.model.state[0].bitmap == 0b1, "overflow packet not aggregated"
    b = Round(0x40002, 1, 1, grads(nprng, t))                # a complete round: ATP holds it until the ACK
    (h, _), = await t.outputs(*(b.packet(w) for w in range(b.fanin)))
    assert h.result
    (h, meta), = await t.outputs(b.packet(0, overflow=1))    # overflow=1 to the complete slot: bypasses it
    assert h.overflow and not h.result and meta["port"] == PS_PORT and h.values == b.grads[0].tolist()
    if t.policy == "atp":
        assert t.model.state[1].count == b.fanin and t.model.state[1].jobseq == b.jobseq
    W = t.params.workers
    assert await t.outputs(ina_packet(0, 0x40003, 2, [1] * t.values, fanin=1)) == []    # bad header: dropped
    c = Round(0x40003, 2, 1, grads(nprng, t))
    assert await t.outputs(c.packet(0), c.packet(1)) == []
    (h, meta), = await t.outputs(ina_packet(1, 0x40003, 2, c.grads[1].tolist(), fanin=2, priority=1))
    assert h.result and meta["port"] == PS_PORT     # a repeat whose fan-in the slot's count meets: resent
    counters = t.finish("outPort_table_overflow")
    assert counters["bad_header"] == 1 and counters["resent"] == 1 and W > 2


@cocotb.test()
async def atp_noequ0_processEntry_andWriteToPacket(dut):
    """Counter == fan-in: the aggregate (full bitmap, numpy sum) goes to the PS, its ECN the OR of
    the contributions' (do_check_ecn: INA ecn or IP CE); ATP keeps the slot until the ACK, ESA frees it."""
    t, rng, nprng = await setup(dut)
    W = t.params.workers
    a = Round(0x50001, 2, 1, grads(nprng, t))
    t.answer = False
    pkts = [a.packet(w) for w in range(W)]
    pkts[1][IP].tos = 3                     # CE on one contribution
    outs = await t.outputs(*pkts)
    (h, meta), = outs
    assert h.result and not h.evict and h.ecn and meta["port"] == PS_PORT
    assert h.bitmap == (1 << W) - 1 and h.values == a.grads.sum(axis=0).tolist()
    held = t.model.state[2].jobseq
    assert held == (a.jobseq if t.policy == "atp" else 0)
    b = Round(0x50002, 3, 1, grads(nprng, t))
    (h, _), = await t.outputs(*(b.packet(w) for w in range(W)))
    assert not h.ecn, "no contribution marked"
    t.finish("noequ0_processEntry_andWriteToPacket")


@cocotb.test()
async def atp_EntryWriteToPacket(dut):
    """A duplicate (bit set, not resend) to an incomplete slot is dropped; to a complete slot (ATP,
    awaiting the ACK) the aggregate goes to the PS again (EntryNWriteToPacket)."""
    t, rng, nprng = await setup(dut)
    W = t.params.workers
    a = Round(0x60001, 0, 1, grads(nprng, t))
    t.answer = False
    assert await t.outputs(a.packet(0), a.packet(0), a.packet(1), a.packet(0)) == []
    assert t.model.counters["duplicate"] == 2
    (h, _), = await t.outputs(*(a.packet(w) for w in range(2, W)))
    assert h.values == a.grads.sum(axis=0).tolist()
    again = await t.outputs(a.packet(1))
    if t.policy == "atp":
        (h2, _), = again
        assert h2.result and h2.bitmap == (1 << W) - 1 and h2.values == h.values
    else:   # ESA freed the slot: the duplicate claims it afresh (see late_duplicates)
        assert again == [] and t.model.state[0].bitmap == 0b10
    t.finish("EntryWriteToPacket")


@cocotb.test()
async def atp_check_app_id_and_seq_resend(dut):
    """check_app_id_and_seq_resend: a resend with a match adds a new bit first, sends the partial (or
    complete) aggregate to the PS and frees the slot; a resend of a bit already in reads it out and
    frees; a resend without a match goes to the PS unchanged, without the collision flag."""
    t, rng, nprng = await setup(dut)
    t.answer = False
    a, b, c = (Round(0x70001 + k, k, 1, grads(nprng, t)) for k in range(3))
    await t.outputs(a.packet(0))
    (h, _), = await t.outputs(a.packet(1, resend=1))            # new bit added first
    assert h.result and h.evict and h.resend and h.bitmap == 0b11
    assert h.values == a.grads[:2].sum(axis=0).tolist() and t.model.state[0].jobseq == 0
    await t.outputs(b.packet(0), b.packet(1))
    (h, _), = await t.outputs(b.packet(1, resend=1))            # bit already in: read out
    assert h.evict and h.bitmap == 0b11 and h.values == b.grads[:2].sum(axis=0).tolist()
    assert t.model.state[1].jobseq == 0
    (h, _), = await t.outputs(c.packet(2, resend=1))            # no match (empty): forwarded
    assert not h.collision and not h.result and h.bitmap == 0b100 and h.values == c.grads[2].tolist()
    await t.outputs(c.packet(0))
    other = Round(0x7FFFF, 2, 1, c.grads)
    (h, _), = await t.outputs(other.packet(1, resend=1))
    assert not h.collision and t.model.state[2].jobseq == c.jobseq, "another job's resend leaves the holder"
    t.finish("check_app_id_and_seq_resend")


@cocotb.test()
async def atp_clean_app_id_and_seq(dut):
    """clean_app_id_and_seq: a PS ACK frees the slot on a job+seq match, complete or not (an early
    ACK), unless overflow=1 and resend=0; a stray ACK frees nothing (another job+seq, or the holder's with
    an index past the pool); every ACK is forwarded as is."""
    t, rng, nprng = await setup(dut)
    V, W = t.values, t.params.workers
    t.answer = False
    a = Round(0x80001, 0, 1, grads(nprng, t))
    ack = dict(fanin=W, ack=1)
    await t.outputs(a.packet(0), a.packet(1))
    (h, meta), = await t.outputs(ina_packet(0, a.jobseq, 0, [0] * V, overflow=1, **ack))
    assert h.ack and meta["port"] == worker_port(0) and t.model.state[0].jobseq == a.jobseq, "overflow=1 resend=0 keeps"
    await t.outputs(ina_packet(0, 0xBAD, 0, [0] * V, **ack))             # stray
    alias = 1 << (t.params.slots - 1).bit_length()                     # past the pool; its low bits name slot 0
    await t.outputs(ina_packet(0, a.jobseq, alias, [0] * V, **ack))     # stray: the holder's job+seq, no such slot
    assert t.model.state[0].jobseq == a.jobseq
    t.check_counters()      # now: later steps would free the slot either way
    await t.outputs(ina_packet(0, a.jobseq, 0, [0] * V, overflow=1, resend=1, **ack))
    assert t.model.state[0].jobseq == 0 and t.model.counters["ack_freed"] == 1, "early ACK frees a partial"
    await t.outputs(a.packet(2), ina_packet(0, a.jobseq, 0, [0] * V, **ack))
    assert t.model.counters["ack_freed"] == 2 and t.model.counters["ack_passed"] == 3
    t.finish("clean_app_id_and_seq")


@cocotb.test()
async def esa_preemption(dut):
    """A low-priority job holds every slot; a higher one arrives: ESA evicts each partial to the PS in
    one packet (values, bitmap, its job+seq) and re-initialises the slot; equal or lower collides."""
    t, rng, nprng = await setup(dut)
    P, W = t.params.slots, t.params.workers
    low = [Round((2 << 16) | k, k, 1, grads(nprng, t)) for k in range(P)]
    high = [Round((9 << 16) | k, k, 9, grads(nprng, t)) for k in range(P)]
    lower = [Round((1 << 16) | k, k, 0, grads(nprng, t)) for k in range(P)]
    t.ps = PS(low + high + lower, t.policy)
    for rnd in low:
        for w in range(W - 1):
            t.send(rnd.packet(w))
    for rnd in lower:
        t.send(rnd.packet(0))
    await t.drain()
    evicted = await t.outputs(*(rnd.packet(0) for rnd in high))
    if t.policy == "esa":
        assert [h.jobseq for h, _ in evicted] == [r.jobseq for r in low]
        for (h, _), rnd in zip(evicted, low):
            assert h.evict and h.bitmap == (1 << (W - 1)) - 1 and h.values == rnd.grads[:W - 1].sum(axis=0).tolist()
    else:
        assert all(h.collision for h, _ in evicted)
    for rnd in high:
        for w in range(1, W):
            t.send(rnd.packet(w))
    for rnd in low + lower:
        for w in range(W - 1 if rnd in low else 1, W):
            t.send(rnd.packet(w))
    await t.drain()
    await t.recover()
    t.ps.check_complete()
    counters = t.finish("preemption")
    assert counters["preempted"] == (P if t.policy == "esa" else 0)


@cocotb.test()
async def late_duplicates(dut):
    """Plain network duplicates (no resend flag) arriving after a slot was freed. ATP: the duplicate
    claims the empty slot and holds it with a finished job+seq (nothing frees it but a resend or ACK
    of that job+seq); later rounds there collide and go to the PS. ESA: the same, but the PS's ACK
    (after the completion that freed the slot) or a higher-priority packet frees it; the eviction
    carries only the stale bit, which the PS discards. SwitchML: a duplicate of round r arriving
    after its worker moved to the other set is a new packet for the finished set: it re-opens the
    set (count fan-in - 1) with round r's values, so that set's next round broadcasts round r's
    value of that worker in place of its new one (numpy-checked below)."""
    t, rng, nprng = await setup(dut)
    W, V = t.params.workers, t.values
    t.answer = False
    if t.policy == "switchml":
        a, b, c = (Round(0x90001 + k, (INA_SET_BIT if k % 2 else 0) | 1, 0, grads(nprng, t)) for k in range(3))
        for rnd in (a, b):
            (h, meta), = await t.outputs(*(rnd.packet(w) for w in range(W)))
            assert meta["port"] == MCAST_PORT and h.values == wrap_sum(rnd.grads)
        assert await t.outputs(a.packet(0)) == [], "stale duplicate swallowed"
        outs = await t.outputs(*(c.packet(w) for w in range(W)))
        (h, meta), = outs
        stale = np.vstack([a.grads[:1], c.grads[1:]])
        assert h.values == wrap_sum(stale) and h.values != wrap_sum(c.grads), "round c carries a's worker 0"
        assert t.model.counters["duplicate"] == 1, "c's own worker 0 packet looked like a retransmission"
    else:
        a, b = Round(0x90001, 0, 1, grads(nprng, t)), Round(0x90002, 0, 1, grads(nprng, t))
        await t.outputs(*(a.packet(w) for w in range(W)))
        await t.outputs(ina_packet(0, a.jobseq, 0, [0] * V, fanin=W, ack=1))
        assert t.model.state[0].jobseq == 0
        assert await t.outputs(a.packet(1)) == [] and t.model.state[0].jobseq == a.jobseq, "stale claim"
        outs = await t.outputs(*(b.packet(w) for w in range(W)))
        assert all(h.collision for h, _ in outs), "the next round at that slot goes to the PS"
        if t.policy == "esa":
            hi = Round(0x90003, 0, 7, grads(nprng, t))
            (h, _), = await t.outputs(hi.packet(0))
            assert h.evict and h.jobseq == a.jobseq and h.bitmap == 0b10 and h.values == a.grads[1].tolist()
        assert t.model.counters["consumed"] >= 1
    t.finish("late_duplicates")


# --- cocotb tests: SwitchML rules ------------------------------------------------------------------

@cocotb.test()
async def switchml_worker_bitmap_update_set(dut):
    """worker_bitmap_update_set0/1: a packet ORs its bit into its set and clears it in the other; a bit
    already in its set marks a retransmission (nothing counted or added)."""
    t, rng, nprng = await setup(dut)
    W = t.params.workers
    s0, s1 = (Round(0xA0001 + k, (INA_SET_BIT if k else 0) | 2, 0, grads(nprng, t)) for k in range(2))
    await t.outputs(s0.packet(0), s0.packet(1))
    assert t.model.pool[2].bitmap == [0b11, 0]
    assert await t.outputs(s0.packet(1)) == [] and t.model.counters["duplicate"] == 1
    await t.outputs(s1.packet(1))
    assert t.model.pool[2].bitmap == [0b01, 0b10], "bit moved to set 1"
    assert await t.outputs(s0.packet(1)) == [] and t.model.counters["duplicate"] == 1, "now new again in set 0"
    assert t.model.pool[2].count[0] == W - 3
    t.finish("worker_bitmap_update_set")


@cocotb.test()
async def switchml_workers_count_action(dut):
    """workers_count_action: the first new packet of a (slot, set) sets the count-down to fan-in - 1,
    each new one subtracts 1; the one that reads 1 is the last: its result is multicast (broadcast);
    the others are dropped after aggregating (finish_consume)."""
    t, rng, nprng = await setup(dut)
    for fanin in (2, t.params.workers):
        rnd = Round(0xB0000 + fanin, 3 % t.params.slots, 0, grads(nprng, t, fanin))
        for w in range(fanin - 1):
            assert await t.outputs(rnd.packet(w)) == []
            assert t.model.pool[rnd.index].count[0] == fanin - 1 - w
        (h, meta), = await t.outputs(rnd.packet(fanin - 1))
        assert meta["port"] == MCAST_PORT and h.result and h.bitmap == (1 << fanin) - 1
        assert h.values == wrap_sum(rnd.grads) and t.model.pool[rnd.index].count[0] == 0
        for w in range(fanin):     # workers move on to the other set
            await t.outputs(Round(rnd.jobseq, rnd.index | INA_SET_BIT, 0, rnd.grads).packet(w))
    t.finish("workers_count_action")


@cocotb.test()
async def switchml_sum_read1_action(dut):
    """write_read1 / sum_read1: the first packet (set bitmap empty) writes, new packets add modulo
    2**32 (bit<32> registers wrap, no saturation), numpy-checked."""
    t, rng, nprng = await setup(dut)
    W = t.params.workers
    g = grads(nprng, t)
    g[:, 0] = [INT32_MAX, 5, INT32_MAX, 7][:W] + [1] * max(0, W - 4)
    g[:, -1] = [INT32_MIN, -1, -2, INT32_MIN][:W] + [0] * max(0, W - 4)
    rnd = Round(0xC0001, 0, 0, g)
    (h, _), = await t.outputs(*(rnd.packet(w) for w in range(W)))
    assert h.values == wrap_sum(g) and h.values[0] != int(g[:, 0].sum())
    t.finish("sum_read1_action")


@cocotb.test()
async def switchml_next_step_retransmit(dut):
    """next_step: a retransmission to a complete set is answered with the result to that worker only
    (retransmit, its ingress port); to an incomplete set it is dropped."""
    t, rng, nprng = await setup(dut)
    W = t.params.workers
    a = Round(0xD0001, 1, 0, grads(nprng, t))
    assert await t.outputs(a.packet(0), a.packet(0)) == [], "retransmission to an incomplete set dropped"
    await t.outputs(*(a.packet(w) for w in range(1, W)))
    (h, meta), = await t.outputs(a.packet(2 % W))
    assert meta["port"] == worker_port(2 % W) and h.result and h.values == wrap_sum(a.grads)
    assert h.bitmap == (1 << W) - 1
    (h, _), = await t.outputs(ina_packet(0, 0, 1, [0] * t.values, ack=1))     # SwitchML has no ACK rule:
    assert h.ack and not h.result                                             # passed unchanged
    counters = t.finish("next_step_retransmit")
    assert counters["resent"] == 1 and counters["duplicate"] == 1 and counters["completed"] == 1
    assert counters["ack_passed"] == 1


# --- cocotb tests: shared ------------------------------------------------------------------------

@cocotb.test()
async def malformed(dut):
    """Other traffic passes unchanged (multi-beat too); truncated, oversized, bad headers dropped."""
    t, rng, nprng = await setup(dut, idle=0.3, backpressure=0.3)
    V, W, P = t.values, t.params.workers, t.params.slots
    good = bytes(ina_packet(0, 5, 0, [1] * V, fanin=W))
    cases = [
        roce_packet(payload=rng.randbytes(400)),                       # multi-beat, passes
        roce_packet(payload=b"x"),                                     # single beat, passes
        good[:37],                                                     # too short to tell: passes
        good[:38],                                                     # UDP ports readable: INA, short
        good[:54], good[:-1], good + b"\0",                            # too short / long
        ina_packet(0, 5, 0, [1] * (V + 40), fanin=W),                  # multi-beat INA
        ina_packet(0, 5, P, [1] * V, fanin=W),                         # index out of range
        ina_packet(0, 5, 0, [1] * V, fanin=1), ina_packet(0, 5, 0, [1] * V, fanin=W + 1),
        ina_packet(0, 5, 0, [1] * V, fanin=W, bitmap=0),
        ina_packet(0, 5, 0, [1] * V, fanin=W, bitmap=0b11),
        ina_packet(0, 5, 0, [1] * V, fanin=W, bitmap=1 << W),
        ina_packet(0, 5, 0, [1] * V, fanin=W, collision=1),
        ina_packet(0, 5, 0, [1] * V, fanin=W, result=1),
        ina_packet(0, 5, 0, [1] * V, fanin=W, evict=1),
        ina_packet(0, 5, 0, [1] * V, fanin=W, resv=1),
        ina_packet(0, 0, 0, [1] * V, fanin=W),                         # job+seq 0: ATP's empty marker
        good[:14] + b"\x46" + good[15:],                               # IPv4 with options: not ours
    ]
    for pkt in cases:
        t.send(pkt)
    await t.drain()
    counters = t.finish("malformed")
    assert counters["passed"] == 4 and counters["malformed"] == 5 and counters["bad_header"] == 11
    assert all(v == 0 for k, v in counters.items() if k not in ("passed", "malformed", "bad_header"))


@cocotb.test()
async def line_rate(dut):
    """Without backpressure the block takes one packet per cycle, back to back."""
    t, rng, nprng = await setup(dut)
    rounds = make_rounds(rng, nprng, t.params, jobs=3, rounds=8 if t.policy != "switchml" else 2)
    t.ps = PS(rounds, t.policy)
    t.answer = False
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
    for rnd, w in trace:
        t.send(rnd.packet(w))
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
    t, rng, nprng = await setup(dut, idle=0.2, backpressure=0.5)
    rounds = make_rounds(rng, nprng, t.params, jobs=3, rounds=6)
    t.ps = PS(rounds, t.policy)
    trace = interleave(rng, rounds)
    for rnd, w in trace:
        t.send(rnd.packet(w))
    landing = rng.randrange(len(trace) // 4, 3 * len(trace) // 4)     # beats taken before the reset
    await t.reset_mid_traffic(landing)
    t.fresh()
    await traffic(t, rng, make_rounds(rng, nprng, t.params, jobs=3, rounds=6, first_job=4))
    t.finish("after_reset")


# --- pytest ----------------------------------------------------------------------------------------

PARAMS = {policy: AggregatorParams(policy=policy, slots=4, workers=4, values=8, data_bytes=128, ps_port=PS_PORT,
                                   mcast_port=MCAST_PORT) for policy in ("atp", "switchml", "esa")}
#: ESA with a tiny pool on a bus exactly one INA packet wide (55 header bytes + 1 value: 59 bytes, no byte
#: after the packet's last to check): 2 slots, 3 workers.
PARAMS["small"] = AggregatorParams(policy="esa", slots=2, workers=3, values=1, data_bytes=59, ps_port=PS_PORT,
                                   mcast_port=MCAST_PORT)
#: Parsing is shared by the policies: run once, under ESA.
SHARED = ("malformed",)


def runs(config, test):
    """ATP rules under ATP and ESA, SwitchML rules under SwitchML, the rest under every policy
    (``SHARED`` under ESA only); the tiny pool: random traffic."""
    if config == "small":
        return test == "random_traffic"
    if test.startswith(("atp_", "esa_")):
        return config in ("atp", "esa")
    if test.startswith("switchml_"):
        return config == "switchml"
    return config == "esa" or test not in SHARED


@runner.parametrize(__name__, PARAMS, select=runs)
def test_aggregator(params, testcase, record_property):
    record_property("innet", runner.run(Aggregator, params, __name__, testcase))



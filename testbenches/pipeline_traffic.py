"""What the two switch pipelines' testbenches share (``test_pipeline.py``: stage 3 Spillway's switch side;
``test_pipeline_inswitch.py``: the in-switch baseline): the testbench base, its traffic, its functional
coverage and the test bodies. Every cycle is compared with the composed golden model by the lockstep."""
import itertools
import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from hdl.progress_regfile import OP_INSTALL, OP_JOB
from models import wire
from models.headers import IP, UDP, Ether, Raw, ina_packet, roce_packet
from testbenches import tb

#: Aggregator outcomes a policy has no rule for (as in test_aggregator: SwitchML has no job+seq, PS
#: or collision).
NEVER = {"switchml": ("collision", "forwarded", "flushed", "preempted", "ack_freed"), "esa": ()}
#: Not sampled: the pipeline's spill link is closed by a well-behaved node model, so the returns are in
#: order and well-formed (``check`` asserts both counters stay 0; the credit core's own test reaches them).
CLOSED_LOOP = ("spill_misordered", "spill_return_malformed")


def coverage(name, counters, policies, events):
    """A pipeline's functional coverage: every counter reason of every stage, those of the aggregator
    and the spill stage under each aggregator policy, and the top's own timing ``events`` (a command
    takes stage 2's cycle, stage 3 waits, ...)."""
    counters = tuple(n for n in counters if n not in CLOSED_LOOP)
    configured = tuple(n for n in counters if not n.startswith("sym_"))
    cover = tb.Coverage(name)
    cover.point("counter", counters)
    cover.point("config_counter", configured)
    cover.point("config", policies)
    cover.cross("counter_x_config", "config_counter", "config", unreachable={
        (n, policy): f"the {policy} aggregator has no rule for {n[4:]}"
        for policy in policies for n in configured if n.startswith("agg_") and n[4:] in NEVER[policy]})
    cover.point("event", events)
    cover.cross("event_x_config", "event", "config")
    return cover


class PipelineTB(tb.BlockTB):
    """Drives ingress packets and ``cfg`` and plays the egress queues (``qdepth``); coverage of the counters
    each cycle moved and of the top's timing. A subclass names its ``EVENTS`` and samples them
    (``events(before, stage1, stage2)``)."""

    EVENTS = ()
    #: the aggregator policies its parameter sets run (coverage crosses the counters with them)
    POLICIES = ()

    def __init__(self, dut, service=3):
        super().__init__(dut)
        self.ports, self.width = self.block.ports, self.block.data_bytes
        self.source = self.packet_source("i")
        self.sink = self.packet_sink("o")
        self.cfg = self.stream_source("cfg")
        self.service = service              # an egress queue sends one packet every `service` cycles
        self.load = [0] * self.ports        # cross traffic queued per port, in packets
        self.queues = [0] * self.ports
        self.sent = []                      # ingress packets (bytes, port)
        self.bursting = False
        self.policy = self.params.agg.policy
        self.cover = coverage(self.name, self.block.COUNTERS, self.POLICIES, self.EVENTS)
        self.counted = set(self.block.COUNTERS) - set(CLOSED_LOOP)     # the counters coverage samples
        self.rng = random.Random(tb.seed() + 1)
        self.before = None
        dut.qdepth.value = tb.pack(self._layout("qdepth"), self.qdepth())
        cocotb.start_soon(self._egress())

    async def reset(self):
        await super().reset()
        self.sink.clear()
        self.queues = [0] * self.ports

    async def config(self, **cmd):
        """Send one cfg command and wait until it is taken."""
        self.cfg.send_nowait({"qp": 0, "job": 0, "position": 0, "chunk": 0, "delta": 0, **cmd})
        await self.cfg.wait_idle()

    def send(self, packet, port):
        raw = bytes(packet)
        self.sent.append((raw, port))
        self.source.send_nowait(raw, {"port": port})

    def qdepth(self):
        return [q + extra for q, extra in zip(self.queues, self.load)]

    async def _egress(self):
        dut, cycles = self.dut, 0
        while True:
            await RisingEdge(dut.clk)
            if not self.in_reset():
                if dut.o__valid.value and dut.o__ready.value:
                    beat = tb.unpack(self._layout("o"), dut.o__payload.value.to_unsigned())
                    if beat["last"]:
                        self.queues[beat["meta"]["port"]] += 1
                cycles += 1
                if cycles % self.service == 0:
                    self.queues = [max(q - 1, 0) for q in self.queues]
            dut.qdepth.value = tb.pack(self._layout("qdepth"), self.qdepth())

    def sample(self, values):
        self.before = (self.model.counters(), self.model.stage1, self.model.stage2, self.busy())

    def busy(self):
        """Whether stage 3 waits on something of its own this cycle (a subclass's store)."""
        return False

    def sampled(self, values):
        """Functional coverage of one cycle: the counters the model moved, the top's timing decisions."""
        before, stage1, stage2, busy = self.before
        for name, value in self.model.counters().items():
            if value > before[name] and name in self.counted:
                configured = not name.startswith("sym_")
                self.cover.sample(counter=name, config=self.policy, **({"config_counter": name} if configured else {}))
        events = []
        if values["cfg__valid"]:
            ready = values["cfg__ready"]
            events.append("cmd_takes_stage2" if ready and stage1 is not None else "cmd_waits" if not ready else None)
        if stage2 is not None and self.model.stage2 is stage2:
            events.append("store_busy" if busy else "stage3_waits")
        events += self.events(before)
        for event in events:
            if event:
                self.cover.sample(event=event, config=self.policy)

    def events(self, before):
        return []

    async def bursts(self, rng, period=100):
        """Cross traffic: every ``period`` cycles each port's load is 0 or above the high mark,
        until ``finish``."""
        self.bursting = True
        while self.bursting:
            self.load = [rng.choice([0, 0, self.params.spill.high + 4]) for _ in range(self.ports)]
            for _ in range(period):
                await RisingEdge(self.dut.clk)

    async def finish(self, limit=20000):
        """Remove cross traffic; wait until the spill stage is empty and the egress idle."""
        self.bursting, self.load = False, [0] * self.ports
        await self.source.wait_idle()
        quiet = 0
        for _ in range(limit):
            await RisingEdge(self.dut.clk)
            quiet = quiet + 1 if not self.dut.o__valid.value and self.idle() else 0
            if quiet == 8:
                break
        assert quiet == 8, "the pipeline did not go idle"

    def check(self, name):
        """Counters equal the model's; every packet of every stage is accounted for (a subclass checks
        stage 3's and what leaves: ``check_stage3``)."""
        c = self.check_counters()
        self.conserved("packets into stage 1", len(self.sent),
                       **{k: v for k, v in c.items() if k.startswith("agg_")})
        self.conserved("packets from stage 2 to stage 3", self.stage3_in(c),
                       **{k: c[f"sym_{k}"] for k in ("unknown", "malformed", "tracked")})
        self.check_stage3(c)
        self.write_pcaps()
        self.cover.write()
        cocotb.log.info("%s: %d in, %d out, counters %s, %d cycles", name, len(self.sent),
                        len(self.sink), {k: v for k, v in c.items() if v}, self.cycle)


RING_QPS = [0x100 + position for position in range(4)]
#: Bytes of a RoCEv2 packet without payload (headers and ICRC).
ROCE_BYTES = len(roce_packet())


async def setup_ring(t, chunk=2, delta=1):
    """Job 0 of Symphony: a ring of ``RING_QPS`` (as many positions as the block has)."""
    await t.config(op=OP_JOB, job=0, chunk=chunk, delta=delta)
    for position, qp in enumerate(RING_QPS[:t.block.sym.ring]):
        await t.config(op=OP_INSTALL, qp=qp, job=0, position=position)


def mixed_traffic(rng, t, count):
    """``count`` packets: INA rounds of two jobs (job+seq never 0; SwitchML: a slot per job, sets
    alternating), ring RoCEv2 flows (position 0 lagging), other RoCEv2 and UDP, multi-beat and
    over-long packets, truncated and non-IP frames."""
    width, beats = t.width, t.LONG_BEATS
    agg, ring = t.params.agg, t.params.sym.ring
    rounds = {0: 0, 1: 0}
    workers_left = {0: list(range(agg.workers)), 1: list(range(agg.workers))}
    psn = itertools.count()
    for _ in range(count):
        kind = rng.choices(["ina", "ring", "roce", "udp", "long", "oversize", "bad"],
                           [30, 30, 15, 10, 5, 4, 6])[0]
        port = rng.randrange(t.ports)
        if kind == "ina":
            job = rng.randrange(2)
            if not workers_left[job]:
                rounds[job] += 1
                workers_left[job] = list(range(agg.workers))
            worker = workers_left[job].pop(rng.randrange(len(workers_left[job])))
            values = [rng.randrange(-1 << 31, 1 << 31) for _ in range(agg.values)]
            if agg.policy == "switchml":        # the job's own slot, sets alternating by round
                index = job % agg.slots | (wire.INA_SET_BIT if rounds[job] % 2 else 0)
            else:
                index = (rounds[job] + job) % agg.slots
            yield ina_packet(worker, (job + 1) << 16 | rounds[job], index, values, fanin=agg.workers,
                             priority=job), port
        elif kind == "ring":
            position = rng.choices(range(ring), [1] + [4] * (ring - 1))[0]
            yield roce_packet(src=f"10.0.0.{position + 1}", qp=RING_QPS[position], psn=next(psn),
                              payload=bytes(rng.randrange(0, 40)), tos=rng.choice([1, 2, 2, 3, 0])), port
        elif kind == "roce":
            yield roce_packet(src=f"10.0.1.{rng.randrange(1, 9)}", qp=rng.randrange(0x200, 0x240),
                              psn=next(psn), payload=bytes(rng.randrange(0, 60))), port
        elif kind == "udp":
            yield Ether() / IP(src="10.0.2.1", dst="10.0.2.2") / UDP(sport=1000, dport=2000) / Raw(bytes(20)), port
        elif kind in ("long", "oversize"):    # up to `beats` beats; longer than `beats` beats
            room = beats * width - ROCE_BYTES
            size = rng.randrange(1, room + 1) if kind == "long" else room + rng.randrange(1, width)
            yield roce_packet(src="10.0.3.1", qp=RING_QPS[1], psn=next(psn), payload=bytes(size)), port
        else:
            good = bytes(roce_packet(qp=RING_QPS[2], psn=next(psn)))
            yield rng.choice([good[:rng.randrange(1, 40)], bytes(Ether(type=0x0806) / Raw(bytes(50)))]), port


# --- Test bodies, each run on both pipelines ----------------------------------------------------------

async def random_traffic(t):
    """Mixed traffic with random gaps, cross-traffic bursts and egress backpressure vs the model."""
    rng, dut = random.Random(tb.seed()), t.dut
    t.source.set_pause_generator(rng.random() < 0.2 for _ in itertools.count())
    t.sink.set_pause_generator(rng.random() < 0.2 for _ in itertools.count())
    t.link_pause = 0.15
    await t.reset()
    await setup_ring(t)
    for packet, port in mixed_traffic(rng, t, 600):
        t.send(packet, port)
    cocotb.start_soon(t.bursts(rng))
    await ClockCycles(dut.clk, 1500)
    await t.finish()
    c = t.counters()
    assert c["spill_spilled"] and c[t.RETURNED] and c["agg_completed"] and c["sym_marked"], c
    assert c.get("oversize", 1) and c["spill_malformed"] and c["agg_passed"], c
    t.check("random_traffic")


async def stage_outcomes(t):
    """Every stage outcome the random mix leaves to luck, by construction (checked against the model
    every cycle as everywhere): aggregator malformed (an INA frame one byte short), bad header (fan-in
    1), duplicate, resent, ACKs; ESA: forwarded (overflow=1), flushed (resend), an ACK that frees;
    Symphony ageing (job 0 with age_out 1, idle for 2 epochs); config commands while packets flow (one
    takes stage 2's cycle, one waits while the held output stops stage 3)."""
    dut = t.dut
    await t.reset()
    await setup_ring(t)
    agg = t.block.agg
    W, V = agg.workers, agg.values

    def part(worker, jobseq, index, fanin=W, **flags):
        return ina_packet(worker, jobseq, index, [worker + 1] * V, fanin=fanin, **flags)

    install = {"op": OP_INSTALL, "qp": RING_QPS[0], "job": 0, "position": 0, "chunk": 0, "delta": 0}
    t.send(bytes(part(0, 0x10001, 1))[:-1], 0)                  # malformed: one byte short
    t.send(part(0, 0x10001, 1, fanin=1), 0)                     # bad header
    if agg.policy == "switchml":
        for w in range(W):
            t.send(part(w, 0, 1), 0)                            # set 0 of slot 1 completes
        t.send(part(0, 0, 1), 0)                                # retransmission to the complete set: resent
        t.send(part(0, 0, 1 | wire.INA_SET_BIT), 0)             # set 1 starts ...
        t.send(part(0, 0, 1 | wire.INA_SET_BIT), 0)             # ... duplicate
        t.send(ina_packet(0, 0, 1, [0] * V, ack=1), 0)          # an ACK: passed
    else:
        t.send(part(0, 0x20001, 1), 0)
        t.send(part(1, 0x20001, 1), 0)
        t.send(part(1, 0x20001, 1), 0)                          # duplicate
        t.send(part(1, 0x20001, 1, fanin=2), 0)                 # count 2 = its fan-in, bit in: resent
        t.send(part(0, 0x20002, 2), 0)
        t.send(part(1, 0x20002, 2, resend=1), 0)                # flushed
        t.send(part(0, 0x20003, 3, overflow=1), 0)              # forwarded to the PS
        t.send(part(0, 0x20004, 0), 0)
        t.send(ina_packet(0, 0x20004, 0, [0] * V, ack=1), 0)    # the holder's ACK frees
        t.send(ina_packet(0, 0x20005, 0, [0] * V, ack=1), 0)    # nothing held: passed
    for n in range(8):                                          # packets in flight ...
        t.send(roce_packet(src="10.0.1.1", qp=0x200, psn=n), 1)
    t.cfg.send_nowait(install)                                  # ... when a command comes: it takes a cycle
    await t.cfg.wait_idle()
    await t.source.wait_idle()
    t.sink.set_pause_generator(itertools.repeat(True))          # o held: stage 3, then stage 2 stop
    for n in range(t.HELD):
        t.send(roce_packet(src="10.0.1.2", qp=0x201, psn=n), 1)
    await ClockCycles(dut.clk, 60)
    t.cfg.send_nowait(install)                                  # waits for stage 2
    await ClockCycles(dut.clk, 20)
    t.sink.set_pause_generator(None)
    await t.cfg.wait_idle()
    await t.config(op=OP_JOB, job=0, chunk=2, delta=1, age_out=1)
    await ClockCycles(dut.clk, 2 << t.params.sym.epoch_bits)   # two epochs later: age 2 > age_out
    t.send(roce_packet(src="10.0.0.2", qp=RING_QPS[1], psn=0), 2)
    await t.finish()
    c = t.counters()
    names = ["agg_malformed", "agg_bad_header", "agg_duplicate", "agg_resent", "agg_ack_passed", "sym_aged"]
    if agg.policy != "switchml":
        names += ["agg_forwarded", "agg_flushed", "agg_ack_freed"]
    assert all(c[name] for name in names), {name: c[name] for name in names}
    t.check("stage_outcomes")


async def line_rate(t):
    """Single-beat packets back to back, no congestion: one packet per cycle in and out."""
    dut = t.dut
    await t.reset()
    count = 64
    for n in range(count):
        t.send(roce_packet(src=f"10.0.1.{n % 7 + 1}", qp=0x300 + n % 5, psn=n), n % t.ports)
    t.service = 1
    start = t.cycle
    await t.source.wait_idle()
    accepted = t.cycle - start
    while len(t.sink) < count:
        await RisingEdge(dut.clk)
    total = t.cycle - start
    assert accepted <= count + 1, f"{count} packets took {accepted} cycles to enter"
    assert total <= count + 7, f"{count} packets took {total} cycles to leave"   # + latency (stage 2: 3 cycles)
    t.check("line_rate")
    cocotb.log.info("line rate: %d packets in %d cycles (in), %d cycles (out)", count, accepted, total)


async def store_full(t):
    """Congested ports fill the spill stage (in-switch: the spill buffer and the packet store, stage 3
    waits; disaggregated: the node's share of the port, the credits run out): nothing is lost."""
    rng, dut = random.Random(tb.seed()), t.dut
    await t.reset()
    t.load = [t.params.spill.high] + [0] * (t.ports - 1)
    for n in range(4 * (1 << t.params.spill.handle_bits)):
        t.send(roce_packet(src=f"10.0.4.{n % 5 + 1}", qp=0x400 + n % 3, psn=n,
                           payload=bytes(rng.randrange(0, 30))), 0)
    for _ in range(400):
        await RisingEdge(dut.clk)
    t.load = [0] * t.ports
    await t.finish()
    c = t.counters()
    assert c.get("store_stalls", 1) and c["spill_spill_overflow"], c
    t.check_full()
    t.check("store_full")


async def reset_mid_traffic(t):
    """A reset in the middle of traffic; the pipeline then carries on with fresh traffic."""
    rng, dut = random.Random(tb.seed()), t.dut
    await t.reset()
    await setup_ring(t)
    t.load = [t.params.spill.high + 2, 0, 0, 0][:t.ports]
    for packet, port in mixed_traffic(rng, t, 150):
        t.send(packet, port)
    for _ in range(rng.randrange(40, 120)):
        await RisingEdge(dut.clk)
    await t.reset()
    t.sent, t.load = [], [0] * t.ports
    for packet, port in mixed_traffic(rng, t, 150):
        t.send(packet, port)
    await t.finish()
    t.check("reset_mid_traffic")

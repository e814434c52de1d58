"""Switch pipeline top under Verilator, checked cycle by cycle against the composed golden model.

In disaggregated mode (``spill.mode="disaggregated"``) the spill link is closed by a spill node model
(``SpillNodeModel``) behind Python delay lines of ``LATENCY`` cycles each way: ``spill_o`` and
``credits`` are compared with the model every cycle, the node's returns drive ``spill_i``."""
import collections
import itertools
import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge

from hdl import aggregator, spill_buffer
from hdl.packet import beat_layout
from hdl.pipeline import OutMeta, Pipeline, PipelineParams
from hdl.progress_regfile import OP_INSTALL, OP_JOB, config_layout
from hdl.spill_node import link_layout
from models import wire
from models.headers import IP, UDP, Ether, Raw, ina_packet, roce_packet
from models.pipeline import COUNTERS, DISAGGREGATED_COUNTERS, PipelineModel, counters
from models.spill_node import SpillNodeModel
from testbenches import runner, tb
from testbenches.spillway_top import node_params

#: Spill link delay, cycles each way (disaggregated mode).
LATENCY = 6


#: Aggregator outcomes a policy has no rule for (as in test_aggregator: SwitchML has no job+seq, PS
#: or collision).
NEVER = {"switchml": ("collision", "forwarded", "flushed", "preempted", "ack_freed"), "esa": ()}
CONFIGS = ("esa/inswitch", "switchml/inswitch", "esa/disaggregated")
#: Not sampled: the pipeline's spill link is closed by a well-behaved node model, so the returns are in
#: order and well-formed (``check`` asserts both counters stay 0; the credit core's own test reaches them).
CLOSED_LOOP = ("spill_misordered", "spill_return_malformed")
ALL_COUNTERS = tuple(n for n in dict.fromkeys(COUNTERS + DISAGGREGATED_COUNTERS) if n not in CLOSED_LOOP)
#: Counters whose reasons depend on the configuration (policy, stage-3 mode): crossed with it.
CONFIG_COUNTERS = tuple(n for n in ALL_COUNTERS if not n.startswith("sym_"))
OTHER_MODE = "a counter port of the other stage-3 mode (in-switch store vs disaggregated switch side)"


def coverage():
    """The pipeline's functional coverage: every counter reason of every stage, those of the aggregator,
    the spill stage and the store under each configuration (policy x stage-3 mode), and the top's own
    timing decisions (a command takes stage 2's cycle, stage 3 waits on a busy store entry or
    back-pressures, an oversize entry is skipped)."""
    cover = tb.Coverage("pipeline")
    cover.point("counter", ALL_COUNTERS)
    cover.point("config_counter", CONFIG_COUNTERS)
    cover.point("config", CONFIGS)
    unreachable = {}
    for config in CONFIGS:
        policy, mode = config.split("/")
        mine = DISAGGREGATED_COUNTERS if mode == "disaggregated" else COUNTERS
        for name in CONFIG_COUNTERS:
            if name not in mine:
                unreachable[(name, config)] = OTHER_MODE
            elif name[4:] in NEVER[policy] and name.startswith("agg_"):
                unreachable[(name, config)] = f"the {policy} aggregator has no rule for {name[4:]}"
    cover.cross("counter_x_config", "config_counter", "config", unreachable=unreachable)
    cover.point("event", ("cmd_takes_stage2", "cmd_waits", "stage3_waits", "store_busy", "oversize_skipped"))
    cover.cross("event_x_config", "event", "config", unreachable={
        **{("store_busy", c): "no packet store in disaggregated mode" for c in CONFIGS if "disagg" in c},
        **{("oversize_skipped", c): "no packet store in disaggregated mode" for c in CONFIGS if "disagg" in c}})
    return cover


def _masked(beat):
    """A beat with the data bytes past ``keep`` cleared (they are don't-care)."""
    if beat is None:
        return None
    return dict(beat, data=beat["data"] & (1 << 8 * beat["keep"].bit_length()) - 1)


class TB(tb.BlockTB):
    """Drives ingress packets and ``cfg``, plays the egress queues (``qdepth``) and compares every
    cycle's ``i.ready`` and ``o`` with the model."""

    name = "pipeline"

    def __init__(self, dut, service=3):
        super().__init__(dut)
        self.ports, self.width = self.block.ports, self.block.data_bytes
        self.source = tb.PacketSource(dut, "i", beat_layout(self.width))
        self.sink = tb.PacketSink(dut, "o", beat_layout(self.width, OutMeta))
        self.cfg = tb.StreamSource(dut, "cfg", config_layout(self.block.sym.jobs, self.block.sym.ring, 16))
        self.model = PipelineModel(self.params)
        self.service = service              # an egress queue sends one packet every `service` cycles
        self.load = [0] * self.ports        # cross traffic queued per port, in packets
        self.queues = [0] * self.ports
        self.cycle = 0
        self.sent = []                      # ingress packets (bytes, port)
        self.bursting = False
        self.disaggregated = self.block.disaggregated
        self.config_name = f"{self.params.agg.policy}/{'disaggregated' if self.disaggregated else 'inswitch'}"
        self.cover = coverage()
        if self.disaggregated:
            self.counter_names = counters(self.params)
            self.link = link_layout(self.width)
            self.node = SpillNodeModel(node_params(self.params.spill))
            self.link_pause = 0.0               # probability of back-pressure on spill_o and the node's output
            self.down, self.up = collections.deque(), collections.deque()  # (due cycle, beat) each way
            dut.spill_i__valid.value = 0
            dut.spill_o__ready.value = 1
        cocotb.start_soon(self._monitor())

    async def reset(self):
        await super().reset()
        self.model.reset()
        self.sink.clear()
        self.queues = [0] * self.ports
        if self.disaggregated:                  # the links and the node are reset with the switch (chosen)
            self.node.reset()
            self.down.clear()
            self.up.clear()

    async def config(self, **cmd):
        """Send one cfg command and wait until it is taken."""
        self.cfg.send_nowait({"qp": 0, "job": 0, "position": 0, "chunk": 0, "delta": 0, **cmd})
        await self.cfg.wait_idle()

    def send(self, packet, port):
        raw = bytes(packet)
        self.sent.append((raw, port))
        self.model.packet(raw, {"port": port})
        self.source.send_nowait(raw, {"port": port})

    def qdepth(self):
        return [q + extra for q, extra in zip(self.queues, self.load)]

    async def _monitor(self):
        dut, layout = self.dut, beat_layout(self.width, OutMeta)
        depth = self.qdepth()
        rng = random.Random(tb.seed() + 1)
        while True:
            await RisingEdge(dut.clk)
            if self.in_reset():
                if self.disaggregated:
                    dut.spill_i__valid.value = 0
                continue
            i_valid, o_valid, o_ready = bool(dut.i__valid.value), bool(dut.o__valid.value), bool(dut.o__ready.value)
            cmd = (tb.unpack(self.cfg.layout, dut.cfg__payload.value.to_unsigned())
                   if dut.cfg__valid.value else None)
            state = self.model.state()
            link = {}
            if self.disaggregated:
                link = {"spill_o_ready": bool(dut.spill_o__ready.value),
                        "spill_i": (tb.unpack(self.link, dut.spill_i__payload.value.to_unsigned())
                                    if dut.spill_i__valid.value else None)}
            before = self.model.all_counters()
            stage1, stage2 = self.model.stage1, self.model.stage2
            busy = not self.disaggregated and self.model.busy[self.model.handle]
            i_ready, cfg_ready, m_valid, m_beat = self.model.step(i_valid, depth, o_ready, cmd, **link)
            self.sample(before, stage1, stage2, busy, cmd, cfg_ready)
            where = f"cycle {self.cycle}, qdepth {depth}, model before: {state}"
            if self.disaggregated:
                self._link(where, link["spill_o_ready"], rng)
            if i_valid:
                assert bool(dut.i__ready.value) == i_ready, \
                    f"{where}: i.ready {int(dut.i__ready.value)}, model {i_ready}"
            if cmd is not None:
                assert bool(dut.cfg__ready.value) == cfg_ready, \
                    f"{where}: cfg.ready {int(dut.cfg__ready.value)}, model {cfg_ready}"
            assert o_valid == m_valid, f"{where}: o.valid {o_valid}, model {m_valid}"
            if o_valid:
                beat = tb.unpack(layout, dut.o__payload.value.to_unsigned())
                beat["data"] &= (1 << 8 * beat["keep"].bit_length()) - 1   # bytes under keep only
                assert beat == m_beat, f"{where}: o {beat}, model {m_beat}"
                if o_ready and beat["last"]:
                    self.queues[beat["meta"]["port"]] += 1
            self.cycle += 1
            if self.cycle % self.service == 0:
                self.queues = [max(q - 1, 0) for q in self.queues]
            depth = self.qdepth()
            dut.qdepth.value = tb.pack(self.block.spill.qdepth.shape(), depth)

    def sample(self, before, stage1, stage2, busy, cmd, cfg_ready):
        """Functional coverage of one cycle: the counters the model moved, the top's timing decisions."""
        config = self.config_name
        for name, value in self.model.all_counters().items():
            if value > before[name] and name in ALL_COUNTERS:
                self.cover.sample(counter=name, config=config,
                                  **({"config_counter": name} if name in CONFIG_COUNTERS else {}))
        events = []
        if cmd is not None:
            events.append("cmd_takes_stage2" if cfg_ready and stage1 is not None else
                          "cmd_waits" if not cfg_ready else None)
        if stage2 is not None and self.model.stage2 is stage2:
            events.append("store_busy" if busy else "stage3_waits")
        if not self.disaggregated and self.model.counters["oversize"] > before["oversize"]:
            events.append("oversize_skipped")
        for event in events:
            if event:
                self.cover.sample(event=event, config=config)

    def _link(self, where, so_ready, rng):
        """Disaggregated mode: ``spill_o`` and ``credits`` vs the model; the spill link through the
        delay lines and the node model; ``spill_i`` and ``spill_o.ready`` for the next cycle."""
        dut = self.dut
        got = (_masked(tb.unpack(self.link, dut.spill_o__payload.value.to_unsigned()))
               if dut.spill_o__valid.value else None)
        assert got == _masked(self.model.spill_o), f"{where}: spill_o {got}, model {_masked(self.model.spill_o)}"
        credits = tb.unpack(self.block.credits.shape(), dut.credits.value.to_unsigned())
        assert credits == self.model.credits, f"{where}: credits {credits}, model {self.model.credits}"
        if got is not None and so_ready:
            self.down.append((self.cycle + 1 + LATENCY, self.model.spill_o))
        ni = self.down.popleft()[1] if self.down and self.down[0][0] <= self.cycle else None
        no_ready = rng.random() >= self.link_pause
        _, n_out = self.node.step(ni, no_ready)
        assert max(self.node.stored) <= self.params.spill.capacity, "the node overflowed"
        if n_out is not None and no_ready:
            self.up.append((self.cycle + 1 + LATENCY, n_out))
        if self.up and self.up[0][0] <= self.cycle + 1:
            dut.spill_i__payload.value = tb.pack(self.link, self.up.popleft()[1])
            dut.spill_i__valid.value = 1
        else:
            dut.spill_i__valid.value = 0
        dut.spill_o__ready.value = int(rng.random() >= self.link_pause)

    def idle(self):
        """Nothing left inside the pipeline (model), nor on the spill link."""
        if not self.disaggregated:
            return not self.model.spill.pending
        spill = self.model.spill
        return (self.model.stage1 is None and self.model.stage2 is None and not spill.verdicts
                and not spill.outstanding() and not self.down and not self.up)

    async def bursts(self, rng, period=100):
        """Cross traffic: every ``period`` cycles each port's load is 0 or above the high mark,
        until ``finish``."""
        self.bursting = True
        while self.bursting:
            self.load = [rng.choice([0, 0, self.params.spill.high + 4]) for _ in range(self.ports)]
            for _ in range(period):
                await RisingEdge(self.dut.clk)

    async def finish(self, limit=20000):
        """Remove cross traffic; wait until the spill buffer is empty and the egress idle."""
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
        """Counters equal the model's; every packet of every stage is accounted for."""
        c = self.check_counters(self.model.all_counters())
        self.conserved("packets into stage 1", len(self.sent), **{k: c[f"agg_{k}"] for k in aggregator.COUNTERS})
        if self.disaggregated:
            arrivals = ("forwarded", "spilled", "spill_overflow", "spill_oversize", "malformed")
            stage3_in = sum(c[f"spill_{k}"] for k in arrivals)
        else:
            stage3_in = sum(c[f"spill_{k}"] for k in spill_buffer.COUNTERS if k != "drained")
        self.conserved("packets from stage 2 to stage 3", stage3_in,
                       **{k: c[f"sym_{k}"] for k in ("unknown", "malformed", "tracked")})
        if self.disaggregated:
            outstanding = int(self.dut.outstanding.value)
            self.conserved("packets out", len(self.sink), spill_forwarded=c["spill_forwarded"],
                           spill_reinjected=c["spill_reinjected"])
            self.conserved("spilled", c["spill_spilled"], reinjected=c["spill_reinjected"], outstanding=outstanding)
            assert outstanding == 0, f"{outstanding} spilled packets never came back"
            node = self.node.counters
            assert c["spill_misordered"] == c["spill_return_malformed"] == 0, c
            assert node["overflow"] == node["drain_empty"] == node["malformed"] == 0, node
            assert sum(m["spilled"] for _, m in self.sink.queue) == c["spill_reinjected"]
        else:
            self.conserved("packets out", len(self.sink), spill_forwarded=c["spill_forwarded"],
                           spill_drained=c["spill_drained"], oversize=-c["oversize"])
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


def mixed_traffic(rng, block, count):
    """``count`` packets: INA rounds of two jobs (job+seq never 0; SwitchML: a slot per job, sets
    alternating), ring RoCEv2 flows (position 0 lagging), other RoCEv2 and UDP, multi-beat and
    over-long packets, truncated and non-IP frames."""
    width, beats = block.data_bytes, block.beats
    agg, ring = block.agg, block.sym.ring
    rounds = {0: 0, 1: 0}
    workers_left = {0: list(range(agg.workers)), 1: list(range(agg.workers))}
    psn = itertools.count()
    for _ in range(count):
        kind = rng.choices(["ina", "ring", "roce", "udp", "long", "oversize", "bad"],
                           [30, 30, 15, 10, 5, 4, 6])[0]
        port = rng.randrange(block.ports)
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


@cocotb.test()
async def random_traffic(dut):
    """Mixed traffic with random gaps, cross-traffic bursts and egress backpressure vs the model."""
    rng = random.Random(tb.seed())
    t = TB(dut)
    t.source.set_pause_generator(rng.random() < 0.2 for _ in itertools.count())
    t.sink.set_pause_generator(rng.random() < 0.2 for _ in itertools.count())
    if t.disaggregated:
        t.link_pause = 0.15
    await t.reset()
    await setup_ring(t)
    for packet, port in mixed_traffic(rng, t.block, 600):
        t.send(packet, port)
    cocotb.start_soon(t.bursts(rng))
    await ClockCycles(dut.clk, 1500)
    await t.finish()
    c = t.counters()
    back = c["spill_reinjected"] if t.disaggregated else c["spill_drained"]
    assert c["spill_spilled"] and back and c["agg_completed"] and c["sym_marked"], c
    assert (t.disaggregated or c["oversize"]) and c["spill_malformed"] and c["agg_passed"], c
    t.check("random_traffic")


@cocotb.test()
async def stage_outcomes(dut):
    """Every stage outcome the random mix leaves to luck, by construction (checked against the model
    every cycle as everywhere): aggregator malformed (an INA frame one byte short), bad header (fan-in
    1), duplicate, resent, ACKs; ESA: forwarded (overflow=1), flushed (resend), an ACK that frees;
    Symphony ageing (job 0 with age_out 1, idle for 2 epochs); config commands while packets flow (one
    takes stage 2's cycle, one waits while the held output stops stage 3)."""
    t = TB(dut)
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
    for n in range(3 * t.params.beats + t.params.spill.buffer):
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


@cocotb.test()
async def line_rate(dut):
    """Single-beat packets back to back, no congestion: one packet per cycle in and out."""
    t = TB(dut)
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
    assert total <= count + 5, f"{count} packets took {total} cycles to leave"
    t.check("line_rate")
    cocotb.log.info("line rate: %d packets in %d cycles (in), %d cycles (out)", count, accepted, total)


@cocotb.test()
async def store_full(dut):
    """Congested ports fill the spill buffer and the packet store: stage 3 waits, nothing lost.
    Disaggregated: the node's share of the port fills, the credits run out (``spill_overflow``)."""
    rng = random.Random(tb.seed())
    t = TB(dut)
    await t.reset()
    t.load = [t.params.spill.high] + [0] * (t.ports - 1)
    for n in range(4 * (1 << t.block.handle_bits)):
        t.send(roce_packet(src=f"10.0.4.{n % 5 + 1}", qp=0x400 + n % 3, psn=n,
                           payload=bytes(rng.randrange(0, 30))), 0)
    for _ in range(400):
        await RisingEdge(dut.clk)
    t.load = [0] * t.ports
    await t.finish()
    c = t.counters()
    assert (t.disaggregated or c["store_stalls"]) and c["spill_spill_overflow"], c
    if t.disaggregated:
        assert t.node.counters["returned"] and max(t.model.credits) == t.params.spill.capacity, (t.node.counters)
    t.check("store_full")


@cocotb.test()
async def reset_mid_traffic(dut):
    """A reset in the middle of traffic; the pipeline then carries on with fresh traffic."""
    rng = random.Random(tb.seed())
    t = TB(dut)
    await t.reset()
    await setup_ring(t)
    t.load = [t.params.spill.high + 2, 0, 0, 0][:t.ports]
    for packet, port in mixed_traffic(rng, t.block, 150):
        t.send(packet, port)
    for _ in range(rng.randrange(40, 120)):
        await RisingEdge(dut.clk)
    await t.reset()
    t.sent, t.load = [], [0] * t.ports
    for packet, port in mixed_traffic(rng, t.block, 150):
        t.send(packet, port)
    await t.finish()
    t.check("reset_mid_traffic")


PARAMS = {
    "esa": PipelineParams.of(agg=dict(policy="esa"), spill=dict(ports=4, high=6, low=2, capacity=8, handle_bits=5,
                                                                        mode="inswitch"),
                             beats=2),
    "switchml": PipelineParams.of(agg=dict(policy="switchml", slots=2),
                                  spill=dict(ports=2, high=5, low=1, capacity=6, drain_rate=2, drain_window=5,
                                             order="port", handle_bits=3, mode="inswitch"), beats=1, data_bytes=96),
    "disagg": PipelineParams.of(agg=dict(policy="esa"),
                                spill=dict(mode="disaggregated", ports=2, high=5, low=2, capacity=6, drain_rate=1,
                                           drain_window=3, handle_bits=4, mtu=200, buffer=8, return_slots=2),
                                beats=2, data_bytes=96),
}


@runner.parametrize(__name__, PARAMS)
def test_pipeline(params, testcase, record_property):
    record_property("innet", runner.run(Pipeline, params, __name__, testcase))

"""Symphony progress register file under Verilator, checked cycle by cycle against its golden model."""
import collections
import itertools
import random

import cocotb
from cocotb.triggers import RisingEdge

from hdl.progress_regfile import OP_INSTALL, OP_JOB, OP_REMOVE, ProgressRegfile, ProgressRegfileParams
from models import wire
from models.headers import BTH, IP, RC_SEND_LAST, RC_SEND_MIDDLE, UDP, Ether, Raw, roce_packet
from models.progress_regfile import ProgressRegfileModel
from testbenches import runner, tb
from testbenches.soak_traffic import ipv4_id_for_checksum, parser_edges

ECT0, ECT1, NOT_ECT, CE = 0b10, 0b01, 0b00, 0b11
ECN = {NOT_ECT: "not_ect", ECT0: "ect0", ECT1: "ect1", CE: "ce"}
#: Cross bins that cannot happen, and why (the coverage report prints the reason).
NOT_OUTPACING = "SPEC 2: only a flow more than delta steps ahead of its job's live minimum is marked"
OPS = {OP_INSTALL: "install", OP_REMOVE: "remove", OP_JOB: "job"}


def coverage():
    """The progress file's functional coverage (SPEC 2): config opcodes; per packet its outcome, where
    the flow stands against the job's live minimum (at it, within delta, at delta, delta + 1 beyond),
    its ECN codepoint, the step it closes or not, and the ageing transitions of the other positions."""
    cover = tb.Coverage("progress_regfile")
    cover.point("op", ("install", "remove", "job", "undefined"))
    cover.point("outcome", ("malformed", "unknown", "marked", "not_ect", "ce_kept", "not_marked"))
    cover.point("lead", ("at_min", "within_delta", "=delta", "=delta+1", ">delta+1"))   # step - live min
    cover.point("ecn", tuple(ECN.values()))
    cover.point("step", ("open", "closed_by_count", "closed_by_last_op", "saturated"))
    cover.point("others", ("all_live", "some_stale", "all_stale"))       # the job's other positions
    cover.point("ageing", ("off", "none_turned", "one_turned", "several_turned"))
    cover.point("sender", ("was_live", "rejoined"))                     # a stale position sending again
    cover.point("idle", ("<age_out", "=age_out", "=age_out+1"))          # a live position's idle epochs
    cover.cross("outcome_x_lead", "outcome", "lead", unreachable={
        **{(o, lead): NOT_OUTPACING for o in ("marked", "not_ect", "ce_kept")
           for lead in ("at_min", "within_delta", "=delta")},
        **{("not_marked", lead): "beyond delta an ECT packet is marked, a Not-ECT one counted not_ect, a CE one"
           " kept (ce_kept)" for lead in ("=delta+1", ">delta+1")},
        ("malformed", None): "not tracked", ("unknown", None): "not tracked"})
    cover.cross("lead_x_ecn", "lead", "ecn")
    cover.cross("outcome_x_others", "outcome", "others", unreachable={
        ("malformed", None): "not tracked", ("unknown", None): "not tracked",
        **{(o, "all_stale"): "the sender is the only live position: it is the minimum (SPEC 2: never marked)"
           for o in ("marked", "not_ect", "ce_kept")}})
    return cover


def coverage_values(model, raw, now):
    """What packet ``raw`` meets in ``model`` before it (its row, the idle epochs of the other live
    positions), or None if it is no tracked flow; ``outcome_values`` completes it after the packet."""
    head = bytes(raw)[:model.data_bytes]
    if len(head) < wire.BTH_DQPN_AT + 4:
        return None
    qp = int.from_bytes(head[wire.BTH_DQPN_AT:wire.BTH_DQPN_AT + 4], "big") & 0xFFFFFF
    entry = model.flows[qp % model.table]
    if entry is None or entry[0] != qp:
        return None
    _, job, position = entry
    age_out = model.settings[job][2]
    steps, counts, seen, stale = model.rows[job]
    epoch, idle = model.epoch(now), set()
    for q in range(model.ring):
        if age_out and q != position and not stale[q]:
            n = (epoch - seen[q]) % (1 << model.age_bits)
            idle.add("<age_out" if n < age_out else "=age_out" if n == age_out else
                     "=age_out+1" if n == age_out + 1 else "beyond")
    return {"job": job, "position": position, "step": steps[position], "count": counts[position],
            "ecn": ECN[head[wire.IP_TOS_AT] & 3], "sender": "rejoined" if stale[position] else "was_live", "idle": idle}


def outcome_values(model, pre, before):
    """The model's decision for a packet: the counters it moved, the flow's lead over the job's live
    minimum, the stale other positions, the step closed; ``pre`` from ``coverage_values``."""
    moved = {k for k, v in model.counters().items() if v != before[k]}
    if "tracked" not in moved:
        return {"outcome": "malformed" if "malformed" in moved else "unknown"}
    job, position = pre["job"], pre["position"]
    chunk, delta, age_out = model.settings[job]
    steps, counts, _, stale = model.rows[job]
    lead = steps[position] - model.live_minimum(job)
    others = [stale[q] for q in range(model.ring) if q != position]
    turned = model.counters["aged"] - before["aged"]
    closed = counts[position] == 0
    return {"outcome": ("marked" if "marked" in moved else "not_ect" if "not_ect" in moved
                        else "ce_kept" if lead > delta else "not_marked"),
            "lead": ("at_min" if lead == 0 else "within_delta" if lead < delta else "=delta" if lead == delta
                     else "=delta+1" if lead == delta + 1 else ">delta+1"),
            "others": "all_stale" if all(others) else "some_stale" if any(others) else "all_live",
            "ageing": ("off" if not age_out else "none_turned" if not turned else "one_turned" if turned == 1
                       else "several_turned"),
            "step": ("open" if not closed else "saturated" if pre["step"] == (1 << model.step_bits) - 1
                     else "closed_by_count" if pre["count"] + 1 >= max(chunk, 1) else "closed_by_last_op"),
            "ecn": pre["ecn"], "sender": pre["sender"]}


class Observed(ProgressRegfileModel):
    """The golden model with the testbench's functional coverage sampled around each command and packet
    (the model's state before and after it), and the order and timer cycle of each in ``events``."""

    def __init__(self, params, cover):
        super().__init__(params)
        self.cover = cover
        self.events = []                    # ("cfg", cmd, timer cycle) / ("pkt", bytes, timer cycle)

    def config(self, cmd, cycle=0):
        self.cover.sample(op=OPS.get(cmd["op"], "undefined"))
        self.events.append(("cfg", cmd, cycle))
        super().config(cmd, cycle)

    def packet(self, raw, cycle=0):
        self.events.append(("pkt", bytes(raw), cycle))
        pre, before = coverage_values(self, raw, cycle), self.counters()
        out = super().packet(raw, cycle)
        moved = {k for k, v in self.counters().items() if v != before[k]}
        if pre or "tracked" not in moved:
            self.cover.sample(**outcome_values(self, pre, before) if pre else
                              {"outcome": "malformed" if "malformed" in moved else "unknown"})
        for idle in pre["idle"] if pre else ():
            self.cover.sample(idle=idle)
        return out


class TB(tb.BlockTB):
    """Sends packets and config commands; the lockstep compares every cycle with the golden model; the
    model logs the order and timer cycle the RTL took them in (``events``)."""

    name = "progress_regfile"

    def __init__(self, dut):
        self.cover = coverage()
        super().__init__(dut, Observed(tb.params(), self.cover))
        self.source = self.packet_source("i")
        self.sink = self.packet_sink("o")
        self.cfg = self.stream_source("cfg")
        self.events = self.model.events
        self.received = []
        self.accepts, self.emits = [], []   # cycles of accepted first beats / delivered last beats

    @property
    def time(self):
        """Cycles since the reset was released (the RTL's timer)."""
        return self.model.time

    def sample(self, values):
        """The cycles of the first beats in and the last beats out; the packets the sink completed."""
        if values["i__valid"] and values["i__ready"] and values["i__payload"] >> self.source.layout["first"].offset & 1:
            self.accepts.append(self.cycle)
        if values["o__valid"] and values["o__ready"] and values["o__payload"] >> self.sink.layout["last"].offset & 1:
            self.emits.append(self.cycle)
        self.collect()

    def collect(self):
        """Move the packets the sink completed to ``received``."""
        while not self.sink.empty():
            self.received.append(self.sink.queue.popleft()[0])

    def send(self, packet):
        self.source.send_nowait(packet)

    def config(self, **cmd):
        self.cfg.send_nowait({"qp": 0, "job": 0, "position": 0, "chunk": 0, "delta": 0, "age_out": 0, **cmd})

    async def settle(self, cycles=8):
        await self.cfg.wait_idle()
        await self.source.wait_idle()
        for _ in range(cycles):
            await RisingEdge(self.dut.clk)

    def check(self, name):
        """End of a test (the lockstep compared every cycle): every packet out, counters, flag, checksums."""
        self.collect()
        assert self.model.out is None, f"{name}: a beat still waits in the output register"
        counters = self.check_counters()
        assert bool(self.dut.saturated.value) == self.model.saturated
        for raw in self.received:
            packet = Ether(raw)
            if IP in packet and packet[IP].ihl == 5 and len(raw) >= 34:
                rebuilt = Ether(raw)
                del rebuilt[IP].chksum
                assert Ether(bytes(rebuilt))[IP].chksum == packet[IP].chksum, "IPv4 checksum wrong"
        self.write_pcaps()
        self.cover.write()
        cocotb.log.info("%s: %d packets, counters %s", name, len(self.received), counters)
        return self.model


def qp_of(job, position):
    """Distinct flow-table entries for every (job, position) of both parameter sets (with a stride
    of 16 every job's flows collided in the 16-entry table and only the last job was tracked)."""
    return 0x1000 + 4 * job + position


def ring_packet(job, position, psn, tos=ECT0, op=RC_SEND_MIDDLE, size=16):
    return roce_packet(src=f"10.0.{job}.{position + 1}", dst=f"10.0.{job}.{position + 2}",
                       qp=qp_of(job, position), psn=psn, op=op, tos=tos, payload=bytes(size))


def ce_marked(raw):
    return Ether(raw)[IP].tos & 3 == CE


async def install_ring(t, job, chunk, delta, age_out=0):
    t.config(op=OP_JOB, job=job, chunk=chunk, delta=delta, age_out=age_out)
    for position in range(t.block.ring):
        t.config(op=OP_INSTALL, qp=qp_of(job, position), job=job, position=position)
    await t.settle()


@cocotb.test()
async def ring_allreduce_jitter(dut):
    """Ring all-reduce in lock step with one delayed flow: only flows ahead are marked."""
    t = TB(dut)
    await tb.reset(dut)
    R, chunk, delta, lag = t.block.ring, 2, 1, 1
    await install_ring(t, 0, chunk, delta)
    psn = [0] * R
    steps = 6
    for step in range(steps + 2):
        for position in range(R):
            behind = position == lag
            s = step - 2 if behind else step      # the jittery flow runs two steps late
            if not 0 <= s < steps:
                continue
            for _ in range(chunk):
                t.send(ring_packet(0, position, psn[position]))
                psn[position] += 1
    await t.settle()
    t.check("ring_allreduce_jitter")
    marks = collections.Counter(Ether(raw)[BTH].dqpn for raw in t.received if ce_marked(raw))
    assert marks[qp_of(0, lag)] == 0, "the lagging flow was marked"
    assert sum(marks.values()) > 0, "no outpacing flow was marked"
    cocotb.log.info("CE marks per QP: %s", dict(marks))


@cocotb.test()
async def random_traffic(dut):
    """Random configs (ageing on and off) and traffic (tracked, unknown, non-RoCE, malformed, all
    ECN codepoints), random idle cycles and backpressure; the config commands are paced through
    the traffic; rarely sending high ring positions age out and rejoin."""
    rng = random.Random(tb.seed())
    t = TB(dut)
    t.source.set_pause_generator(rng.random() < 0.2 for _ in itertools.count())
    t.sink.set_pause_generator(rng.random() < 0.25 for _ in itertools.count())
    await tb.reset(dut)
    J, R = t.block.jobs, t.block.ring
    ages = range(0, 1 << t.block.age_bits)              # 0 = off; 2**age_bits - 1 never ages
    for job in range(J):
        await install_ring(t, job, rng.randrange(1, 4), rng.randrange(0, 3), rng.choice(ages))
    commands = []
    for _ in range(12):
        job = rng.randrange(J)
        choice = rng.random()
        if choice < 0.4:
            commands.append(dict(op=OP_JOB, job=job, chunk=rng.randrange(0, 4), delta=rng.randrange(0, 3),
                                 age_out=rng.choice(ages)))
        elif choice < 0.7:
            commands.append(dict(op=OP_REMOVE, qp=qp_of(job, rng.randrange(R))))
        else:
            position = rng.randrange(R)
            commands.append(dict(op=OP_INSTALL, qp=qp_of(job, position), job=job, position=position))

    async def pace():
        """Config commands spread through the traffic (not queued ahead of it)."""
        for cmd in commands:
            for _ in range(rng.randrange(20, 90)):
                await RisingEdge(dut.clk)
            t.config(**cmd)

    start = len(t.events)
    pacer = cocotb.start_soon(pace())
    psn = collections.Counter()
    for n in range(600):
        kind = rng.random()
        if kind < 0.75:
            job = rng.randrange(J)
            position = min(int(rng.expovariate(1.0)), R - 1)   # low positions run ahead
            key = (job, position)
            t.send(ring_packet(job, position, psn[key], tos=rng.choice([ECT0, ECT0, ECT1, NOT_ECT, CE]),
                               op=rng.choice([RC_SEND_MIDDLE, RC_SEND_LAST]), size=rng.choice([0, 16, 200])))
            psn[key] += 1
        elif kind < 0.85:
            t.send(roce_packet(qp=rng.randrange(1 << 24), psn=n, payload=bytes(rng.randrange(40))))
        elif kind < 0.95:
            t.send(Ether() / IP(src="10.9.9.9", dst="10.9.9.8")
                   / UDP(sport=49152 + n % 16384, dport=rng.choice([9, 4791])) / Raw(bytes(rng.randrange(0, 30))))
        else:
            t.send(Ether() / IP(options=[b"\x01" * 4]) / UDP(sport=49152, dport=4791) / BTH(dqpn=qp_of(0, 0)))
    await pacer
    await t.settle(20)
    t.check("random_traffic")
    kinds = [kind for kind, _, _ in t.events[start:]]
    inside = [n for n, kind in enumerate(kinds) if kind == "cfg" and "pkt" in kinds[:n] and "pkt" in kinds[n:]]
    assert len(inside) >= len(commands) // 2, f"only {len(inside)} of {len(commands)} commands landed mid-traffic"


@cocotb.test()
async def unknown_flows_untouched(dut):
    """With no mapping installed every packet leaves byte for byte as it came."""
    rng = random.Random(tb.seed())
    t = TB(dut)
    await tb.reset(dut)
    sent = [bytes(roce_packet(qp=rng.randrange(1 << 24), psn=n, tos=rng.randrange(256),
                              payload=bytes(rng.randrange(300)))) for n in range(100)]
    # the undefined opcode 0 with the first packet's QP maps nothing (installed, an ECT one would be marked)
    t.config(op=0, qp=Ether(sent[0])[BTH].dqpn, job=0, position=0)
    await t.settle()
    for packet in sent:
        t.send(packet)
    await t.settle()
    assert t.received == sent
    t.check("unknown_flows_untouched")


@cocotb.test()
async def clear_job_mid_traffic(dut):
    """Clearing a job while its packets flow restarts its progress at the exact packet it lands on."""
    t = TB(dut)
    await tb.reset(dut)
    await install_ring(t, 0, 1, 0)
    for n in range(40):
        t.send(ring_packet(0, 0 if n % 3 else 1, n))
        if n == 20:
            t.config(op=OP_JOB, job=0, chunk=1, delta=0)
    await t.settle()
    t.check("clear_job_mid_traffic")


def marks_of(t, position, job=0):
    """CE marks, in order, on the forwarded packets of ``position``'s flow."""
    return [ce_marked(raw) for raw in t.received if Ether(raw)[BTH].dqpn == qp_of(job, position)]


@cocotb.test()
async def laggard_closes_step(dut):
    """delta = 0: the unique laggard closing its step moves the minimum with it and is not marked
    (a minimum taken from the row before the update would mark it)."""
    t = TB(dut)
    await tb.reset(dut)
    R, chunk = t.block.ring, 2
    await install_ring(t, 0, chunk, 0)
    psn = 0
    for _ in range(3):
        for position in range(1, R):
            for _ in range(chunk):
                t.send(ring_packet(0, position, psn))
                psn += 1
        await t.settle()
        for _ in range(chunk):              # the laggard catches up: its closing packet is the last
            t.send(ring_packet(0, 0, psn))
            psn += 1
        await t.settle()
    t.check("laggard_closes_step")
    assert not any(marks_of(t, 0)), "the laggard was marked when it closed its step"
    assert all(any(marks_of(t, p)) for p in range(1, R)), "flows a step ahead at delta 0 were not marked"


def with_checksum(job, position, tos, target):
    """A packet of the flow whose IPv4 checksum is ``target`` (crafted through the IPv4 id)."""
    packet = ring_packet(job, position, ipv4_id_for_checksum(bytes(ring_packet(job, position, 0, tos=tos)), target),
                         tos=tos)
    assert Ether(bytes(packet))[IP].chksum == target
    return packet


@cocotb.test()
async def checksum_second_fold(dut):
    """Marking packets whose checksum 0x0000 / 0x0001 needs RFC 1624's second end-around-carry fold
    (0x0000 with ECT(0), 0x0001 with ECT(1)), and the two that do not."""
    t = TB(dut)
    await tb.reset(dut)
    await install_ring(t, 0, 1, 0)
    cases = [(tos, target) for tos in (ECT0, ECT1) for target in (0x0000, 0x0001)]
    for tos, target in cases:
        t.send(with_checksum(0, 0, tos, target))    # flow 0 runs ahead of the others at delta 0
    await t.settle()
    t.check("checksum_second_fold")
    assert marks_of(t, 0) == [True] * len(cases)
    for raw, (tos, target) in zip(t.received, cases):
        expected = Ether(raw)
        del expected[IP].chksum
        assert Ether(raw)[IP].chksum == Ether(bytes(expected))[IP].chksum, f"checksum {target:#06x}, ECN {tos}"


@cocotb.test()
async def delta_edges(dut):
    """delta = 2: one flow walks ahead of its ring, one step per packet, through every edge of the
    mark decision with each ECN kind: Not-ECT within delta, ECT at delta (kept), Not-ECT at delta + 1
    (counted not_ect), ECT beyond (marked), CE beyond (kept CE, not counted); then a ring with delta 3:
    ECT(0) and ECT(1) strictly within delta (kept)."""
    t = TB(dut)
    await tb.reset(dut)
    await install_ring(t, 0, 1, 2)
    tos = [NOT_ECT, ECT0, NOT_ECT, ECT1, CE]
    for psn, code in enumerate(tos):
        t.send(ring_packet(0, 0, psn, tos=code))
    await t.settle()
    await install_ring(t, 1, 1, 3)              # job 1, delta 3: ECT(0) and ECT(1) strictly within delta
    t.send(ring_packet(1, 0, 0, tos=ECT0))
    t.send(ring_packet(1, 0, 1, tos=ECT1))
    await t.settle()
    model = t.check("delta_edges")
    assert [Ether(raw)[IP].tos & 3 for raw in t.received] == [NOT_ECT, ECT0, NOT_ECT, CE, CE, ECT0, ECT1]
    assert model.counters["marked"] == 1 and model.counters["not_ect"] == 1, model.counters()


@cocotb.test()
async def clear_changes_marking(dut):
    """OP_JOB landing between a ring's packets resets its row: a flow ahead stops being marked, a
    flow behind is marked once it passes the cleared others (with no clear, the reverse)."""
    t = TB(dut)
    await tb.reset(dut)
    R = t.block.ring
    await install_ring(t, 0, 1, 1)
    psn = 0

    def burst(position, packets):
        nonlocal psn
        for _ in range(packets):
            t.send(ring_packet(0, position, psn))
            psn += 1

    burst(0, 4)                                 # flow 0 at step 4, the others at 0: marked from step 2
    for position in range(1, R):
        burst(position, 2)
    await t.settle()
    t.config(op=OP_JOB, job=0, chunk=1, delta=1)
    for position in range(1, R):                # the others at 1, flow 0 at 1 after the clear (5 without)
        burst(position, 1)
    burst(0, 1)
    await t.settle()
    ahead = marks_of(t, 0)
    assert ahead == [False, True, True, True, False], f"flow 0 ahead, then cleared: {ahead}"
    for position in range(1, R):                # now the others run ahead: 4 vs flow 0's 1
        burst(position, 3)
    await t.settle()
    t.config(op=OP_JOB, job=0, chunk=1, delta=1)
    burst(0, 3)                                 # flow 0 at 3 against the cleared 0s: marked at 2 and 3
    await t.settle()
    t.check("clear_changes_marking")
    assert marks_of(t, 0)[5:] == [False, True, True], f"flow 0 after the second clear: {marks_of(t, 0)[5:]}"


@cocotb.test()
async def remove_mid_traffic(dut):
    """OP_REMOVE landing between a flow's packets: the next ones pass as unknown, untouched and
    unmarked; re-installed, the flow resumes at the step it had (the row keeps its position)."""
    t = TB(dut)
    await tb.reset(dut)
    await install_ring(t, 0, 1, 1)
    for n in range(3):                          # steps 1..3 against 0: 2 and 3 are marked
        t.send(ring_packet(0, 0, n))
    await t.settle()
    t.config(op=OP_REMOVE, qp=qp_of(0, 0))
    for n in range(3, 6):
        t.send(ring_packet(0, 0, n))
    await t.settle()
    assert int(dut.unknown.value) == 3 and int(dut.tracked.value) == 3
    t.config(op=OP_INSTALL, qp=qp_of(0, 0), job=0, position=0)
    t.send(ring_packet(0, 0, 6))                # step 4 against 0: marked
    await t.settle()
    t.check("remove_mid_traffic")
    assert marks_of(t, 0) == [False, True, True, False, False, False, True], marks_of(t, 0)


@cocotb.test()
async def parser_limits(dut):
    """IPv4/UDP packets of exactly 37 and 38 bytes (UDP port complete at 38) and RoCEv2 packets of
    53 and 54 bytes (BTH complete at 54): malformed below each limit, parsed at it; an IPv6 frame
    with 17 at the IPv4 protocol offset is not IPv4 (unknown)."""
    t = TB(dut)
    await tb.reset(dut)
    await install_ring(t, 0, 1, 0)
    limits = parser_edges(bytes(ring_packet(0, 0, 0)))
    # IPv6 carrying RoCEv2: its source address puts 17 (UDP) where IPv4 keeps the protocol: not IPv4, unknown
    v6 = limits[-1][0]
    assert v6[wire.IP_PROTO_AT] == 17
    cases = [*limits[:-1], (ring_packet(0, 0, 1), "tracked"), limits[-1]]
    for raw, _ in cases:
        t.send(raw)
    await t.settle()
    t.check("parser_limits")
    expected = collections.Counter(reason for _, reason in cases)
    for reason in ("malformed", "unknown", "tracked"):
        assert int(getattr(dut, reason).value) == expected[reason], f"{reason}: {getattr(dut, reason).value}"
    assert [len(raw) for raw in t.received] == [len(bytes(raw)) for raw, _ in cases]
    assert ce_marked(t.received[5]), "the 54-byte RoCEv2 packet (flow 0 ahead at delta 0) was not marked"


def tracked_log(t, job=0):
    """(position, step after the packet, timer cycle, marked) of each of the job's forwarded
    packets, with steps counted here from the cleared row (chunk from ``t.chunk``)."""
    log, sent = [], collections.Counter()
    packets = [(raw, now) for kind, raw, now in t.events if kind == "pkt"]
    for (raw, now), out in zip(packets, t.received):
        position = Ether(raw)[BTH].dqpn - qp_of(job, 0)
        sent[position] += 1
        log.append((position, sent[position] // t.chunk, now, ce_marked(out)))
    return log


def epochs_between(t, start, now):
    """Epoch boundaries the RTL's timer crossed from cycle ``start`` to cycle ``now`` (no wrap)."""
    return (now >> t.block.epoch_bits) - (start >> t.block.epoch_bits)


async def silent_flow(dut, age_out):
    """Flow 0 goes silent while the others keep sending one packet each per half epoch (chunk 1,
    delta 1), for
    2**age_bits + age_out + 2 epochs (past the wrap of the stored epoch); then flow 0 sends again,
    followed by one more round of the others. Returns (TB, log, the clear's timer cycle)."""
    t = TB(dut)
    await tb.reset(dut)
    R, E = t.block.ring, 1 << t.block.epoch_bits
    for _ in range(5 * E // 2):                 # the clear lands in epoch 2: its row is seen then, not 0
        await RisingEdge(dut.clk)
    t.chunk = 1
    await install_ring(t, 0, t.chunk, 1, age_out)
    clear = next(now for kind, cmd, now in t.events if kind == "cfg" and cmd["op"] == OP_JOB)
    psn = 0
    while t.time - clear < ((1 << t.block.age_bits) + age_out + 2) * E:
        for position in range(1, R):
            t.send(ring_packet(0, position, psn))
            psn += 1
        for _ in range(E // 2):
            await RisingEdge(dut.clk)
    t.send(ring_packet(0, 0, psn))              # flow 0 rejoins with its own step (0)
    for position in range(1, R):
        t.send(ring_packet(0, position, psn + position))
    await t.settle()
    return t, tracked_log(t), clear


@cocotb.test()
async def silent_flow_ages_out(dut):
    """A flow going silent holds the minimum down (the others a step ahead are marked) until its
    idle time passes age_out epochs; then it is stale: no more marks, aged = 1, and it stays stale
    when the stored epoch wraps round; when it sends again it rejoins at its old step, is the
    minimum again and is not marked, while the others are."""
    age_out = 2
    t, log, clear = await silent_flow(dut, age_out)
    t.check("silent_flow_ages_out")
    E = 1 << t.block.epoch_bits
    others, rejoin = log[:-t.block.ring], log[-t.block.ring:]
    stale_from = next(now for _, _, now, _ in others if epochs_between(t, clear, now) > age_out)
    expected = [step >= 2 and now < stale_from for _, step, now, _ in others]
    assert [marked for *_, marked in others] == expected, \
        f"marks before/after flow 0 turned stale at timer {stale_from} (clear {clear}, epoch {E} cycles)"
    assert any(expected) and not any(expected[-3 * (t.block.ring - 1):]), "the trace missed a phase"
    assert rejoin[0][0] == 0 and not rejoin[0][3], "the rejoining laggard was marked"
    assert all(marked for *_, marked in rejoin[1:]), "the others were not marked against the rejoined laggard"
    assert int(dut.aged.value) == 1, f"aged {int(dut.aged.value)}"


@cocotb.test()
async def ageing_off(dut):
    """The same silent flow with age_out = 0: it holds the minimum down for the whole trace."""
    t, log, _ = await silent_flow(dut, 0)
    t.check("ageing_off")
    assert [marked for _, _, _, marked in log] == [step >= 2 and position != 0 for position, step, _, marked in log]
    assert int(dut.aged.value) == 0


@cocotb.test()
async def all_others_stale(dut):
    """Flow 0 runs ahead alone at delta 0: marked while the silent others are live; one packet turns
    all of them stale at once (aged += ring - 1) and from then it is the only live position and is
    not marked; flow 1 sending again rejoins at step 0 and flow 0 is marked again."""
    t = TB(dut)
    await tb.reset(dut)
    R, E, age_out = t.block.ring, 1 << t.block.epoch_bits, 1
    t.chunk = 1
    await install_ring(t, 0, 1, 0, age_out)
    clear = next(now for kind, cmd, now in t.events if kind == "cfg" and cmd["op"] == OP_JOB)
    psn = 0
    while t.time - clear < (age_out + 2) * E:
        t.send(ring_packet(0, 0, psn))
        psn += 1
        await t.settle(E // 2 - 8)
    t.send(ring_packet(0, 1, psn))
    t.send(ring_packet(0, 0, psn + 1))
    await t.settle()
    t.check("all_others_stale")
    log = tracked_log(t)
    alone = log[:-2]
    stale_from = next(now for _, _, now, _ in alone if epochs_between(t, clear, now) > age_out)
    assert [marked for *_, marked in alone] == [now < stale_from for _, _, now, _ in alone], (stale_from, alone)
    assert not all(m for *_, m in alone) and any(m for *_, m in alone), "the trace missed a phase"
    assert [marked for *_, marked in log[-2:]] == [False, True], "after flow 1 rejoined at step 0"
    assert int(dut.aged.value) == R - 1, f"aged {int(dut.aged.value)}, expected {R - 1} in one packet"


@cocotb.test()
async def reset_mid_traffic(dut):
    """A reset drops the packets in flight and the counters; the tables keep the control plane's state."""
    rng = random.Random(tb.seed())
    t = TB(dut)
    t.sink.set_pause_generator(rng.random() < 0.3 for _ in itertools.count())
    await tb.reset(dut)
    await install_ring(t, 0, 2, 1)
    for n in range(60):
        t.send(ring_packet(0, rng.randrange(t.block.ring), n, size=rng.choice([0, 150])))
    for _ in range(40):
        await RisingEdge(dut.clk)
    await t.reset()
    assert int(dut.tracked.value) == 0
    for n in range(60):
        t.send(ring_packet(0, rng.randrange(t.block.ring), n))
    await t.settle()
    t.check("reset_mid_traffic")


@cocotb.test()
async def line_rate(dut):
    """Single-beat tracked packets enter and leave one per cycle, each 3 cycles after it entered (stages
    B, C and the output register)."""
    t = TB(dut)
    await tb.reset(dut)
    await install_ring(t, 0, 2, 1)
    count = 120
    for n in range(count):
        t.send(ring_packet(0, n % t.block.ring, n, size=0))      # 58 bytes: one beat
    await t.settle()
    t.check("line_rate")
    assert t.accepts[-1] - t.accepts[0] == count - 1, f"entered in {t.accepts[-1] - t.accepts[0] + 1} cycles"
    assert t.emits[-1] - t.emits[0] == count - 1, f"left in {t.emits[-1] - t.emits[0] + 1} cycles"
    assert [out - into for into, out in zip(t.accepts, t.emits)] == [3] * count, "latency 3 cycles"


PARAMS = {
    "default": ProgressRegfileParams(jobs=4, ring=4, table=16, epoch_bits=5, age_bits=4),
    "small": ProgressRegfileParams(jobs=2, ring=3, table=8, step_bits=3, counter_bits=6, message_steps=True,
                                   epoch_bits=3, age_bits=2),
}


@runner.parametrize(__name__, PARAMS)
def test_progress_regfile(params, testcase, record_property):
    record_property("innet", runner.run(ProgressRegfile, params, __name__, testcase))

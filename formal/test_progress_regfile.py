"""Formal properties of the Symphony progress register file, proved with yosys-smtbmc.

Packets, config commands and ``o.ready`` are free (streams obey their rules). The spec keeps its own
copy of the pipeline (``spec_stages``: stages B, C and the output register, advancing together while the
output can take a beat, read from the ports), so a packet is judged when its first beat leaves stage C
(SPEC: latency 3). Proved by k-induction:

- every beat leaves three stages after it was taken, in order, its framing kept; a command is taken
  only with stages B and C empty (the pipeline drained);

- a flow at its job's minimum step is never marked (and the minimum never exceeds its step);
- shadow run (ring 3): the counters `tracked`, `unknown`, `marked`, `not_ect` increment (saturating) exactly on
  the spec's judgement of each packet taken (its length, its shadow table hit, its expected mark),
  ``malformed`` on a template packet cut inside its UDP header or BTH;
- ``malformed`` increments (saturating) exactly on the spec's judgement of a packet's first beat, as it
  leaves stage C (the
  model's rules: IPv4/UDP with IHL != 5, no UDP dport in the beat, or RoCEv2 dport and shorter than
  the BTH), where the packet's bytes are defined (keep contiguous, first beat last or full);
- counters never wrap silently: each one only grows, and an event lost at saturation has set
  the sticky ``saturated`` flag, which rises only on a tracked packet (a step or ``aged`` saturating)
  or with a counter at its top;
- one register access per array per packet: the flow table is read at most once from a packet's
  first beat to its last, never outside an accepted beat; the job row read only as a first beat
  leaves stage B and written only as it leaves stage C (a beat leaves a stage once); only the first
  beat touches the state, and a packet never shares the row's write port with a command;
- reset explored: ``rst`` is free in this proof (asserted at any cycle, mid-packet too; the spec's
  own registers reset with it): the design's first-beat flag equals the spec's framing of the beats
  taken (a reset ends a packet), and the cycle after a reset the counters, ``saturated`` and the
  output register are clear.

Checked against an independent shadow (k-induction, unbounded): the spec keeps its own flow table,
job settings and job rows (steps and counts per position), updated from the same free config commands
and, as each packet leaves stage C, from its QP, TOS, length and epoch as the spec took them from the
beat when it was accepted; for every tracked packet the RTL's step equals the
shadow's, its ``min_step`` equals the true minimum of the *live* positions of the shadow row *after*
this packet's update (ageing: the spec keeps its own clock, last-seen epochs and stale bits; a stale
position never holds the minimum down), a live flow at that true minimum is never marked, ``aged``
equals the spec's count of positions that turned stale, and a packet is marked exactly when it is
ECT(0)/ECT(1) and more than ``delta`` steps ahead of that minimum; the counters increment on the
spec's judgement of each packet; every forwarded header (valid IPv4 checksum in, any id and TOS, so
any checksum value) leaves with a valid checksum (RFC 1624 with both end-around-carry folds);
forwarding: a packet right behind a packet of its job (decided on consecutive advances of the
pipeline) sees its update. Two runs: ring 2 (two jobs) and ring 3 (two positions can turn stale on one
packet, so ``aged`` must add the count); a cover run of the shadow reaches its cases, forwarding among them.

Reset in the shadow proofs: ``rst`` is free at every cycle. The SPEC's reset (the model's
``reset()``, the RTL docstring's choice): the tables are SRAM and keep their contents, a reset edge
writes none of them (the command or packet in flight is lost), the timer restarts at 0 and the
counters clear. So the spec's table and row shadows are reset-less and not updated on a reset edge,
its clock and ``aged`` reset with the design; every shadow property above then also holds across
resets. Strengthening invariants (the tables are created in the design's ``__init__``, so the spec
reads every word through formal-only read ports): every word of the flow table, the job settings and
the job rows equals the spec's shadow of it; the design's epoch is the spec's clock; every beat starts
a packet (the shadow runs drive single-beat packets); the design's stages hold the spec's packets
(stage B the flow entry of its QP, stage C its flow and the row and settings of its job as the shadow
holds them, forwarded or read; each header of the template with a right checksum, and the checksum it
gets if marked precomputed right).
"""
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Cat, Cover, Elaboratable, Module, Mux, ResetSignal, Signal, Value
from amaranth.lib import data

from formal.props import counters_follow
from formal.runner import any_streams, prove
from hdl.progress_regfile import COUNTERS, OP_INSTALL, OP_JOB, OP_REMOVE, ProgressRegfile, ProgressRegfileParams
from models.headers import roce_packet
from models.wire import (
    BTH_DQPN_AT,
    ECN_CE,
    ETHERTYPE_AT,
    ETHERTYPE_IPV4,
    IP_CHECKSUM_AT,
    IP_OFFSET,
    IP_PROTO_AT,
    IP_TOS_AT,
    IP_VERSION_IHL_AT,
    IPPROTO_UDP,
    ROCE_HEADER_BYTES,
    ROCEV2_PORT,
    UDP_DPORT_AT,
)

PARAMS = ProgressRegfileParams(jobs=2, ring=2, table=2, step_bits=3, counter_bits=3, epoch_bits=0, age_bits=2)
#: A ring of 3 (one job): two positions can turn stale on one packet, so ``aged`` must add the count.
RING3 = PARAMS.replace(jobs=1, ring=3)


def free_stream(m, port, ready):
    """Drive stream ``port`` with free values that stay put until ``ready`` takes them."""
    any_streams(m, port)
    payload = port.payload.as_value()
    held, value = Signal(), Signal(len(payload))
    m.d.sync += [held.eq(port.valid & ~ready), value.eq(payload)]
    with m.If(held):
        m.d.comb += Assume(port.valid & (payload == value))


def spec_stages(m, dut, taken):
    """The spec's own view of the block's pipeline (SPEC: stages B, C and the output register advance
    together while the output can take a beat, ``load = ~o.valid | o.ready``, read from the ports): each
    stage holds ``valid`` and the spec values ``taken`` (name -> value) had when its beat was accepted on
    ``i``. Returns ``(load, [B, C, O])``; they reset with the design (a reset loses the beats in flight)."""
    load = ~dut.o.valid | dut.o.ready
    layout = data.StructLayout({"valid": 1, **{name: len(Value.cast(v)) for name, v in taken.items()}})
    stages = [Signal(layout, name=f"spec_{name}") for name in "BCO"]
    with m.If(load):
        m.d.sync += [stages[0].valid.eq(dut.i.valid & dut.i.ready),
                     *(getattr(stages[0], name).eq(v) for name, v in taken.items()),
                     stages[1].eq(stages[0]), stages[2].eq(stages[1])]
    return load, stages


class ProgressSpec(Elaboratable):
    """ProgressRegfile with free inputs and the three properties."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = ProgressRegfile(PARAMS)
        # Reset is free (rst is an input of the proof: asserted at any cycle); the spec's registers are
        # in the same domain, so they reset with the design.
        m.d.comb += dut.o.ready.eq(AnySeq(1))
        free_stream(m, dut.i, dut.i.ready)
        free_stream(m, dut.cfg, dut.cfg.ready)

        # Packet framing: the spec's own view of the beats taken on i (a packet ends at its last beat;
        # a reset ends it too); the design's first-beat decision must agree, also after a reset.
        inside = Signal()
        with m.If(dut.i.valid & dut.i.ready):
            m.d.sync += inside.eq(~dut.i.payload.last)
        m.d.comb += Assert(dut.first == ~inside, "a beat starts a packet iff the previous one ended it (or a reset)")
        # `malformed` on the spec's judgement of each packet's first beat (the model's rules: IPv4 with
        # UDP, and IHL != 5, or no UDP dport in the beat, or RoCEv2 dport and the packet shorter than
        # the BTH end). Judged where the packet's bytes are defined: keep contiguous from lane 0, and the
        # first beat is its last or full (a longer packet is then longer than ROCE_HEADER_BYTES).
        beat = dut.i.payload
        nb = PARAMS.data_bytes
        n = Signal(range(nb + 1))
        m.d.comb += n.eq(sum(beat.keep[k] for k in range(nb)))

        def byte(k):
            return beat.data[8 * k:8 * k + 8]
        defined = ((beat.keep & (beat.keep + 1)[:nb]) == 0) & (beat.last | (n == nb))
        udp = ((n > IP_PROTO_AT) & (Cat(byte(ETHERTYPE_AT + 1), byte(ETHERTYPE_AT)) == ETHERTYPE_IPV4)
               & (byte(IP_VERSION_IHL_AT)[4:] == 4) & (byte(IP_PROTO_AT) == IPPROTO_UDP))
        dport = Cat(byte(UDP_DPORT_AT + 1), byte(UDP_DPORT_AT))
        bad = udp & ((byte(IP_VERSION_IHL_AT)[:4] != 5) | (n < UDP_DPORT_AT + 2)
                     | ((dport == ROCEV2_PORT) & beat.last & (n < ROCE_HEADER_BYTES)))
        # The spec's stages (SPEC: latency 3): a packet is judged when its first beat leaves stage C.
        load, (sb, sc, so) = spec_stages(m, dut, {"first": ~inside, "last": beat.last, "keep": beat.keep,
                                                  "bad": bad, "defined": defined})
        judged = load & sc.valid & sc.first
        counters_follow(m, {"malformed": dut.malformed}, {"malformed": judged & sc.bad}, when=~judged | sc.defined,
                        block="judged: ")
        m.d.comb += [Assert(dut.o.valid == so.valid, "latency 3: a beat leaves three stages after it was taken"),
                     Assert(~so.valid | ((dut.o.payload.last == so.last) & (dut.o.payload.keep == so.keep)),
                            "latency 3: the beats leave in the order they were taken, their framing kept")]
        # Strengthening: the design's stages hold the spec's beats, judged alike.
        for stage, spec in ((dut.stage_b, sb), (dut.stage_c, sc)):
            same = (stage.first == spec.first) & (stage.beat.last == spec.last) & (stage.beat.keep == spec.keep)
            m.d.comb += [Assert((stage.valid == spec.valid) & (~spec.valid | same),
                                "the design's stages hold the beats the spec's do"),
                         Assert(~(spec.valid & spec.first & spec.defined) | (stage.malformed == spec.bad),
                                "a beat in flight is judged malformed as the spec judged it")]
        was_reset = Signal(reset_less=True)
        m.d.sync += was_reset.eq(ResetSignal())
        zero = 1
        for name in COUNTERS:
            zero &= getattr(dut, name) == 0
        m.d.comb += Assert(~was_reset | (zero & ~dut.saturated & ~dut.o.valid),
                           "a reset clears the counters, the saturated flag and the output")

        # A flow at the minimum is never marked.
        with m.If(dut.decide):
            m.d.comb += Assert(dut.min_step <= dut.step, "min_step never above the flow's step")
        m.d.comb += Assert(~dut.mark | (dut.step != dut.min_step), "a flow at the minimum was marked")

        # Counters only grow; a lost event has raised `saturated`.
        top = (1 << PARAMS.counter_bits) - 1
        started = Signal()
        m.d.sync += started.eq(1)
        lost = Signal()
        m.d.sync += lost.eq(lost | (dut.decide & (dut.tracked == top)) | (dut.mark & (dut.marked == top)))
        for name in COUNTERS:
            counter = getattr(dut, name)
            previous = Signal.like(counter, name=f"previous_{name}")
            m.d.sync += previous.eq(counter)
            with m.If(started):
                m.d.comb += Assert(counter >= previous, f"counter {name} wrapped")
        m.d.comb += Assert(~lost | dut.saturated, "an event was lost without the saturated flag")
        # ... and the flag rises only on a saturating event: a step saturating or positions ageing past
        # the `aged` counter's room (both on a tracked packet), or a counter event with the counter at top
        flagged, cause = Signal(), Signal()
        m.d.sync += [flagged.eq(dut.saturated),
                     cause.eq(dut.decide | Cat(*(getattr(dut, name) == top for name in COUNTERS)).any())]
        with m.If(started):
            m.d.comb += Assert(~dut.saturated | flagged | cause,
                               "saturated rose without a tracked packet or a counter at its top")

        # One access per array per packet: the flow table read when its first beat is taken (accesses summed
        # from a packet's first beat to its last), the row read when it leaves stage B and written when it
        # leaves stage C (a beat leaves a stage once).
        accepted = dut.i.valid & dut.i.ready
        command = dut.cfg.valid & dut.cfg.ready
        m.d.comb += [
            Assert(~dut.row_reads | (load & sb.valid & sb.first), "row_reads outside a first beat leaving stage B"),
            Assert(~dut.row_writes | (load & sc.valid & sc.first), "row_writes outside a first beat leaving stage C"),
            Assert(~command | (~sb.valid & ~sc.valid), "a command taken with a beat in stage B or C (not drained)"),
        ]
        for name in ("table_reads",):
            access = getattr(dut, name)
            before = Signal(2, name=f"{name}_before")     # this packet's accesses in earlier cycles
            with m.If(accepted):
                m.d.sync += before.eq(Mux(dut.first, 0, before) + access)
            total = Mux(dut.first, 0, before) + access
            m.d.comb += Assert(~accepted | (total <= 1), f"a packet accessed {name} twice")
            m.d.comb += Assert(accepted | ~access, f"{name} accessed without a packet")
            m.d.comb += Assert(before <= 1, f"{name}: a packet's earlier beats accessed it twice")
        m.d.comb += [
            Assert(~dut.decide | (sc.valid & sc.first), "only a packet's first beat reads the state"),
            Assert(~(dut.decide & command), "a packet and a command wrote the row in one cycle"),
            Cover(dut.mark),
            Cover(dut.saturated),
        ]
        return m


class ShadowSpec(Elaboratable):
    """ProgressRegfile with free inputs against the spec's own shadow of the tables and rows."""

    def __init__(self, params=PARAMS):
        self.params = params

    def elaborate(self, platform):
        m = Module()
        PARAMS = self.params
        m.submodules.dut = dut = ProgressRegfile(PARAMS)
        m.d.comb += dut.o.ready.eq(AnySeq(1))      # rst stays free: a reset may come at any cycle
        live = ~ResetSignal()                       # a reset edge writes no table (SPEC)
        free_stream(m, dut.i, dut.i.ready)
        free_stream(m, dut.cfg, dut.cfg.ready)
        J, R, T, bits, A = PARAMS.jobs, PARAMS.ring, PARAMS.table, PARAMS.step_bits, PARAMS.age_bits
        top = (1 << bits) - 1
        index_bits = (T - 1).bit_length()

        def byte(k):
            return dut.i.payload.data[8 * k:8 * k + 8]

        # To keep the bounded run short the packets are single-beat RoCEv2 headers of one template
        # with free TOS, IPv4 id and checksum (a valid one) and free QP low bits, and commands' QP high
        # bits and chunk are narrowed (the parser and the free-input properties are ProgressSpec's).
        template = bytes(roce_packet(qp=0, payload=bytes(PARAMS.data_bytes)))[:PARAMS.data_bytes]
        ident = IP_OFFSET + 4                           # the IPv4 id: free, so any checksum value occurs
        free = (IP_TOS_AT, ident, ident + 1, IP_CHECKSUM_AT, IP_CHECKSUM_AT + 1, BTH_DQPN_AT + 3)

        def of_template(data):
            """The packet bytes ``data`` are the template's, but for the free ones."""
            return Cat(*(data[8 * k:8 * k + 8] == value for k, value in enumerate(template) if k not in free)).all()

        m.d.comb += Assume(of_template(dut.i.payload.data))

        def header_sum(data):
            """One's complement sum of the IPv4 header's 16-bit words (0xFFFF when its checksum is right)."""
            total = sum(Cat(data[8 * (k + 1):8 * (k + 2)], data[8 * k:8 * (k + 1)])
                        for k in range(IP_OFFSET, IP_OFFSET + 20, 2))
            total = (total & 0xFFFF) + (total >> 16)
            return ((total & 0xFFFF) + (total >> 16))[:16]

        m.d.comb += Assume(header_sum(dut.i.payload.data) == 0xFFFF)
        with m.If(dut.o.valid):
            m.d.comb += Assert(header_sum(dut.o.payload.data) == 0xFFFF,
                               "shadow: a forwarded header's IPv4 checksum is right (RFC 1624, both folds)")
        m.d.comb += Assume(dut.i.payload.last & (byte(BTH_DQPN_AT + 3) < 4))
        m.d.comb += Assume((dut.cfg.payload.qp < 4) & (dut.cfg.payload.chunk < 4))

        valid = [Signal(name=f"sh_valid{t}", reset_less=True) for t in range(T)]
        tag = [Signal(24, name=f"sh_qp{t}", reset_less=True) for t in range(T)]
        job_of = [Signal(range(J), name=f"sh_job{t}", reset_less=True) for t in range(T)]
        pos_of = [Signal(range(R), name=f"sh_pos{t}", reset_less=True) for t in range(T)]
        chunk = [Signal(16, name=f"sh_chunk{j}", reset_less=True) for j in range(J)]
        delta = [Signal(bits, name=f"sh_delta{j}", reset_less=True) for j in range(J)]
        age_out = [Signal(A, name=f"sh_age_out{j}", reset_less=True) for j in range(J)]
        steps = [[Signal(bits, name=f"sh_step{j}_{p}", reset_less=True) for p in range(R)] for j in range(J)]
        counts = [[Signal(16, name=f"sh_count{j}_{p}", reset_less=True) for p in range(R)] for j in range(J)]
        seen = [[Signal(A, name=f"sh_seen{j}_{p}", reset_less=True) for p in range(R)] for j in range(J)]
        stale = [[Signal(name=f"sh_stale{j}_{p}", reset_less=True) for p in range(R)] for j in range(J)]
        # The spec's own clock: cycles since reset, and the epoch (SPEC: an epoch is 2**epoch_bits cycles).
        clock = Signal(PARAMS.epoch_bits + A)
        m.d.sync += clock.eq(clock + 1)
        now = clock[PARAMS.epoch_bits:]

        cmd = dut.cfg.payload
        with m.If(dut.cfg.valid & dut.cfg.ready & live):
            for t in range(T):
                with m.If(((cmd.op == OP_INSTALL) | (cmd.op == OP_REMOVE)) & (cmd.qp[:index_bits] == t)):
                    m.d.sync += [valid[t].eq(cmd.op == OP_INSTALL), tag[t].eq(cmd.qp),
                                 job_of[t].eq(cmd.job), pos_of[t].eq(cmd.position)]
            for j in range(J):
                with m.If((cmd.op == OP_JOB) & (cmd.job == j)):
                    m.d.sync += [chunk[j].eq(Mux(cmd.chunk == 0, 1, cmd.chunk)), delta[j].eq(cmd.delta),
                                 age_out[j].eq(cmd.age_out)]
                    m.d.sync += [s.eq(0) for s in steps[j] + counts[j] + stale[j]]
                    m.d.sync += [s.eq(now) for s in seen[j]]

        # The spec's stages (SPEC: latency 3): each packet's QP, TOS, length and epoch as it was taken; it is
        # judged when it leaves stage C, against the shadow as the packets before it left it.
        n = Signal(range(PARAMS.data_bytes + 1))
        m.d.comb += n.eq(sum(dut.i.payload.keep[k] for k in range(PARAMS.data_bytes)))
        load, (sb, sc, _) = spec_stages(m, dut, {
            "qp": Cat(byte(BTH_DQPN_AT + 3), byte(BTH_DQPN_AT + 2), byte(BTH_DQPN_AT + 1)),
            "tos": byte(IP_TOS_AT), "n": n, "epoch": now})
        judged = load & sc.valid

        def lookup(qp):
            """The shadow table's (hit, job, position) of ``qp``."""
            hit, job, pos = Signal(), Signal(range(J)), Signal(range(R))
            for t in range(T):
                with m.If(qp[:index_bits] == t):
                    m.d.comb += [hit.eq(valid[t] & (tag[t] == qp)), job.eq(job_of[t]), pos.eq(pos_of[t])]
            return hit, job, pos

        # The judged packet's flow, looked up in the shadow table by the QP read from its beat.
        hit, job, pos = lookup(sc.qp)
        # The shadow row after this packet's update, and its true minimum.
        new = [Signal(bits, name=f"sh_new{p}") for p in range(R)]
        old_stale = [Signal(name=f"sh_old_stale{p}") for p in range(R)]
        idle = [Signal(A, name=f"sh_idle{p}") for p in range(R)]
        step, count, limit, ahead, ageing = Signal(bits), Signal(16), Signal(16), Signal(bits), Signal(A)
        for j in range(J):
            with m.If(job == j):
                m.d.comb += [limit.eq(chunk[j]), ahead.eq(delta[j]), ageing.eq(age_out[j])]
                for p in range(R):
                    m.d.comb += [new[p].eq(steps[j][p]), old_stale[p].eq(stale[j][p]),
                                 idle[p].eq(sc.epoch - seen[j][p])]
                    with m.If(pos == p):
                        m.d.comb += [step.eq(steps[j][p]), count.eq(counts[j][p])]
        closes = count + 1 >= limit
        new_step = Mux(closes & (step != top), step + 1, step)
        for p in range(R):
            with m.If(pos == p):
                m.d.comb += new[p].eq(new_step)
        # Ageing: the other positions idle for more than age_out epochs (mod 2**age_bits) at the packet's
        # acceptance are stale from now on; the sender is live. The true minimum is over the live positions.
        dead = [Signal(name=f"sh_dead{p}") for p in range(R)]
        turned = [Signal(name=f"sh_turned{p}") for p in range(R)]
        for p in range(R):
            expired = (ageing != 0) & (idle[p] > ageing)
            m.d.comb += [dead[p].eq((pos != p) & (old_stale[p] | expired)),
                         turned[p].eq((pos != p) & ~old_stale[p] & expired)]
        true_min = Signal(bits)
        lowest = new_step
        for p in range(R):
            lowest = Mux(~dead[p] & (new[p] < lowest), new[p], lowest)
        m.d.comb += true_min.eq(lowest)
        # Counters on the spec's own judgement of each (single-beat, well-formed) packet leaving stage C.
        # Of the template's bytes the packet keeps n (SPEC: shorter than IPv4 + 10 bytes: not IPv4/UDP,
        # unknown; IPv4/UDP, RoCEv2 port, shorter than the BTH: malformed).
        bad = (sc.n >= IP_OFFSET + 10) & (sc.n < ROCE_HEADER_BYTES)
        tracked = judged & (sc.n >= ROCE_HEADER_BYTES) & hit
        with m.If(tracked & live):
            for j in range(J):
                with m.If(job == j):
                    m.d.sync += [stale[j][p].eq(dead[p]) for p in range(R)]
                for p in range(R):
                    with m.If((job == j) & (pos == p)):
                        m.d.sync += [steps[j][p].eq(new_step), counts[j][p].eq(Mux(closes, 0, count + 1)),
                                     seen[j][p].eq(sc.epoch)]
        # The spec's own `aged` counter (saturating).
        aged, counter_top = Signal(PARAMS.counter_bits), (1 << PARAMS.counter_bits) - 1
        turning = sum(Cat(t, 0) for t in turned)
        with m.If(tracked):
            m.d.sync += aged.eq(Mux(aged + turning > counter_top, counter_top, aged + turning))
        m.d.comb += Assert(dut.aged == aged, "shadow: aged counts the positions that turned stale")
        ecn = sc.tos[:2]
        expect_mark = (new_step - true_min > ahead) & (ecn != 0) & (ecn != ECN_CE)
        m.d.comb += Assert(dut.decide == tracked, "shadow: the design decides exactly the tracked packets")
        with m.If(tracked):
            m.d.comb += [
                Assert(dut.step == new_step, "shadow: the flow's step equals the shadow's"),
                Assert(dut.min_step == true_min,
                       "shadow: min_step is the true minimum of the live positions of the updated row "
                       "(a stale position never holds it down)"),
                Assert(~dut.mark | (new_step != true_min), "shadow: a live flow at the true minimum was marked"),
                Assert(dut.mark == expect_mark, "shadow: marked exactly when ECT and more than delta ahead"),
            ]
        m.d.comb += Assert(~dut.mark | dut.decide, "shadow: only a tracked packet is marked")
        # Forwarding: a packet of the job the previous packet leaving stage C updated (its row read on that
        # edge, before the write) is judged on the updated row.
        previous, previous_job = Signal(), Signal(range(J))
        with m.If(load):
            m.d.sync += [previous.eq(tracked & live), previous_job.eq(job)]
        behind = tracked & previous & (previous_job == job)
        with m.If(behind):
            m.d.comb += Assert((dut.step == new_step) & (dut.min_step == true_min) & (dut.mark == expect_mark),
                               "forwarding: a packet right behind a packet of its job sees its update")
        ahead_by = (new_step - true_min > ahead)
        counters_follow(m, {name: getattr(dut, name) for name in COUNTERS},
                        {"tracked": tracked, "unknown": judged & ~bad & ~tracked, "malformed": judged & bad,
                         "marked": tracked & expect_mark, "not_ect": tracked & ahead_by & (ecn == 0)},
                        block="shadow: ")
        # Strengthening (k-induction): every word of the three tables equals the spec's shadow of it, the
        # design's epoch is the spec's clock, every beat starts a packet (single-beat packets), and the
        # design's stages hold the spec's packets: stage B the flow entry of its QP, stage C its flow, and
        # the row and settings of its job as the shadow holds them (forwarded or read), its header's
        # checksum right and the marked one too.
        for t in range(T):
            word = dut.flow_table.read_port(domain="comb")
            m.d.comb += [word.addr.eq(t),
                         Assert(word.data.as_value() == Cat(valid[t], tag[t], job_of[t], pos_of[t]),
                                f"shadow: flow table entry {t} as the shadow's")]
        for j in range(J):
            row, setting = dut.job_rows.read_port(domain="comb"), dut.job_settings.read_port(domain="comb")
            m.d.comb += [row.addr.eq(j), setting.addr.eq(j),
                         Assert(setting.data.as_value() == Cat(chunk[j], delta[j], age_out[j]),
                                f"shadow: job {j}'s settings as the shadow's"),
                         Assert(row.data.as_value() == Cat(*steps[j], *counts[j], *seen[j], *stale[j]),
                                f"shadow: job {j}'s row as the shadow's")]
            with m.If(dut.stage_c.valid & dut.stage_c.known & (dut.stage_c.job == j)):
                m.d.comb += [Assert(dut.setting_c.as_value() == Cat(chunk[j], delta[j], age_out[j]),
                                    f"shadow: stage C has job {j}'s settings"),
                             Assert(dut.row_c.as_value() == Cat(*steps[j], *counts[j], *seen[j], *stale[j]),
                                    f"shadow: stage C has job {j}'s row")]
        m.d.comb += [Assert(dut.epoch == now, "shadow: the design's epoch is the spec's clock"),
                     Assert(dut.first, "shadow: every beat starts a packet")]
        hit_b, job_b, pos_b = lookup(sb.qp)
        def marked_checksum(data):
            """RFC 1624 eqn. 3 for the TOS byte's ECN bits set to CE: HC' = ~(~HC + ~m + m')."""
            def word(k):
                return Cat(data[8 * (k + 1):8 * (k + 2)], data[8 * k:8 * (k + 1)])
            old_word = word(IP_TOS_AT - 1)
            total = (~word(IP_CHECKSUM_AT) & 0xFFFF) + (~old_word & 0xFFFF) + (old_word | ECN_CE)
            total = (total & 0xFFFF) + (total >> 16)
            return ~((total & 0xFFFF) + (total >> 16))[:16]

        for stage, spec in ((dut.stage_b, sb), (dut.stage_c, sc)):
            with m.If(spec.valid):
                m.d.comb += [
                    Assert((stage.valid == 1) & stage.first & (stage.qp == spec.qp) & (stage.tos == spec.tos)
                           & (stage.epoch == spec.epoch) & (stage.beat.data[8 * IP_TOS_AT:][:8] == spec.tos)
                           & (stage.roce == (spec.n >= ROCE_HEADER_BYTES))
                           & (stage.malformed == (spec.n >= IP_OFFSET + 10) & (spec.n < ROCE_HEADER_BYTES)),
                           "shadow: the design's stages hold the spec's packets"),
                    Assert(of_template(stage.beat.data) & (header_sum(stage.beat.data) == 0xFFFF)
                           & (stage.marked_checksum == marked_checksum(stage.beat.data)),
                           "shadow: a header in flight: the template, its checksum right, the one if marked"),
                ]
            m.d.comb += Assert(spec.valid | ~stage.valid, "shadow: the design's stages hold the spec's packets")
        with m.If(sb.valid & (sb.n >= ROCE_HEADER_BYTES)):
            entry = dut.entry_b
            m.d.comb += Assert((dut.known_b == hit_b) & (~hit_b | (entry.job == job_b) & (entry.position == pos_b)),
                               "shadow: stage B has its flow's entry")
        with m.If(sc.valid):
            m.d.comb += Assert((dut.stage_c.known == hit & (sc.n >= ROCE_HEADER_BYTES))
                               & (~dut.stage_c.known | (dut.stage_c.job == job) & (dut.stage_c.position == pos)),
                               "shadow: stage C has its flow")
        m.d.comb += Cover(dut.decide & (new_step == true_min) & (step != new_step) & (new[0] != new[R - 1]))
        m.d.comb += Cover(ResetSignal() & dut.decide & hit)
        m.d.comb += Cover(dut.decide & Cat(*(dead[p] & (new[p] < true_min) for p in range(R))).any())
        m.d.comb += Cover(behind & (dut.step != step))
        return m


def test_properties():
    """All properties hold in every reachable state (k-induction)."""
    prove(ProgressSpec(), "progress_regfile", depth=4, mode="prove")


def test_shadow():
    """The RTL's step, minimum and marking equal the independent shadow's (k-induction)."""
    prove(ShadowSpec(), "progress_regfile_shadow", depth=2)


def test_shadow_ring3():
    """The same shadow with a ring of 3 (``aged`` counts every position that turned stale on a packet), reset free."""
    prove(ShadowSpec(RING3), "progress_regfile_shadow_ring3", depth=2)


def test_covers():
    """Marking and counter saturation are reachable (the properties are not vacuous)."""
    prove(ProgressSpec(), "progress_regfile_cover", depth=14, mode="cover")


def test_shadow_covers():
    """The shadow's cases are reachable, the forwarding one among them: a packet right behind a packet of its
    job that moved its step."""
    prove(ShadowSpec(), "progress_regfile_shadow_cover", depth=12, mode="cover")

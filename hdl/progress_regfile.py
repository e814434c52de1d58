"""Symphony progress register file (SPEC section 2)."""
from amaranth.hdl import Cat, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.counters import count_event
from hdl.packet import beat_layout, packet_signature
from hdl.parse import Parser
from models.params import check
from models.progress_regfile import COUNTERS, OP_INSTALL, OP_JOB, OP_REMOVE, ProgressRegfileParams
from models.wire import ECN_CE, IP_CHECKSUM_AT, IP_OFFSET, IP_TOS_AT, LAST_OPCODES, ROCE_HEADER_BYTES, UDP_OFFSET

__all__ = ["ProgressRegfile", "ProgressRegfileParams", "COUNTERS", "OP_INSTALL", "OP_REMOVE",
           "OP_JOB", "LAST_OPCODES", "config_layout"]


def config_layout(jobs, ring, step_bits, age_bits=ProgressRegfileParams.age_bits):
    """Control-plane command: install/remove a QP's mapping, or (re)configure and clear a job."""
    return data.StructLayout({
        "op": 2, "qp": 24, "job": range(jobs), "position": range(ring),
        "chunk": 16, "delta": step_bits, "age_out": age_bits,
    })


class ProgressRegfile(wiring.Component):
    """Tracks ring-collective progress per flow and ECN-marks flows that run ahead of their job.

    A flow is a RoCEv2 dest QP. ``cfg`` (control plane) commands: ``OP_INSTALL`` maps ``qp`` to
    (``job``, ``position``) in a direct-mapped table of ``table`` entries indexed by the QP's low
    bits (the full QP is kept as tag); ``OP_REMOVE`` unmaps it; ``OP_JOB`` sets a job's ``chunk``
    (packets per step, >= 1), ``delta`` and ``age_out`` and clears its progress (a new job: every
    position live, seen now). A command offered holds the packets back (``i.ready`` low) and is taken
    once no beat is in stages B and C (``cfg.ready``: the pipeline drained), so a command never races
    a packet in flight: packets and commands act on the tables in the order they were taken.

    Pipeline (every table is block RAM with a registered read): stage A is the beat on ``i``; its
    dest QP addresses the flow table. Stage B: the entry is out; its job addresses the job row and the
    settings. Stage C: they are out; the packet is decided (below) and its row written back. The
    output register follows: latency 3, one beat per cycle; the stages advance together when the
    output can take a beat (``load``), every other beat passing through them unchanged. A row read in
    stage B while stage C writes that row gets the old row (read-first), so the row written is kept
    in a register and forwarded to the next packet (``forward``).

    Per packet (headers in beat 0), decided in stage C:

    - IPv4/UDP with IP options (the parser reads fixed offsets), truncated inside the UDP header,
      or RoCEv2 shorter than its BTH: passed untouched (``malformed``); any other packet that is
      not RoCEv2 (UDP port 4791), or whose QP is not installed: passed untouched (``unknown``);
    - a tracked flow (``tracked``): its packet count in the current step +1; at ``chunk`` packets
      (or, with ``message_steps``, on a message-last opcode) its step +1 and the count restarts;
      the job's laggard estimate ``min_step`` is the minimum over the job's ``ring`` positions
      over the job's *live* ring positions after this update (exact: the ring's step counters form
      one row read and written once per packet);
    - if ``step - min_step > delta`` the flow outpaces its job: an ECN-capable packet (ECT(0),
      ECT(1)) is marked CE, the IPv4 checksum updated incrementally (RFC 1624) (``marked``); a
      Not-ECT one is left as it is (``not_ect``); a CE packet stays CE. A flow at the minimum is
      never marked (``delta >= 0``). ICRC does not cover the TOS byte, so it stays valid.

    Ageing (*chosen*): a free-running timer counts cycles from reset; the epoch is its bits
    [``epoch_bits``, ``epoch_bits + age_bits``) (an epoch is 2**``epoch_bits`` cycles), and a packet's
    epoch is the one of the cycle its first beat was accepted (carried through the stages). Each position
    of a job row keeps its last-seen epoch ``seen`` and a sticky ``stale`` bit. On a tracked packet
    with its job's ``age_out`` > 0 (0 = ageing off), every other position with
    ``(epoch - seen) mod 2**age_bits > age_out`` turns stale (``aged`` += how many turned; a stale
    position stays stale, so the wrap of ``seen`` cannot revive it once a packet of its job has
    seen it stale); the sender is seen (in its packet's epoch) and is live again with its step (rejoin). Stale
    positions are left out of ``min_step``; the sender is always live, so with every other position
    stale its own step is the minimum and nothing is marked. Limits: ``age_out`` <= 2**age_bits - 2
    to ever age; a position is judged only when a packet of its job passes, so a job idle for
    2**age_bits epochs or more cannot tell an old epoch from a new one (its idle positions look
    fresh again until the timer moves past ``age_out`` once more).

    State a Tofino-class pipeline holds: the flow table (one read per packet), the job rows
    {step, count, seen, stale per position} (one read-modify-write per packet), the job settings
    {chunk, delta, age_out} (one read). Reset (*chosen*): the three tables are memories and keep
    their contents; a reset edge writes none of them, so the command taken then and the packets in
    stages A to C are lost whole (the model's reset).
    Step counters saturate at 2**``step_bits``-1; counters saturate at 2**``counter_bits``-1;
    either sets the sticky ``saturated`` output. A packet counts when its first beat leaves stage C.
    """

    def __init__(self, params=None):
        p = self.params = check(params, ProgressRegfileParams)
        jobs, ring, step_bits, counter_bits, data_bytes, message_steps = (
            p.jobs, p.ring, p.step_bits, p.counter_bits, p.data_bytes, p.message_steps)
        self.jobs, self.ring, self.table, self.step_bits = jobs, ring, p.table, step_bits
        self.counter_bits, self.data_bytes, self.message_steps = counter_bits, data_bytes, message_steps
        self.epoch_bits, self.age_bits = p.epoch_bits, p.age_bits
        self.row = data.StructLayout({"step": data.ArrayLayout(step_bits, ring),
                                      "count": data.ArrayLayout(16, ring),
                                      "seen": data.ArrayLayout(p.age_bits, ring),
                                      "stale": data.ArrayLayout(1, ring)})
        self.entry = data.StructLayout({"valid": 1, "qp": 24, "job": range(jobs), "position": range(ring)})
        self.settings = data.StructLayout({"chunk": 16, "delta": step_bits, "age_out": p.age_bits})
        signature = {
            "i": In(packet_signature(data_bytes)),
            "o": Out(packet_signature(data_bytes)),
            "cfg": In(stream.Signature(config_layout(jobs, ring, step_bits, p.age_bits))),
            "saturated": Out(1),
        }
        signature.update({name: Out(counter_bits) for name in COUNTERS})
        super().__init__(signature)
        # A beat in stage B or C, with what stage A parsed of it (the header fields the later stages use).
        carried = {"valid": 1, "beat": beat_layout(data_bytes), "first": 1, "malformed": 1, "roce": 1,
                   "qp": 24, "last_opcode": 1, "tos": 8, "marked_checksum": 16, "epoch": p.age_bits}
        self.stage_b = Signal(data.StructLayout(carried))
        self.stage_c = Signal(data.StructLayout({**carried, "known": 1, "job": range(jobs),
                                                 "position": range(ring)}))
        # The decision of the packet in stage C, named for the formal spec and the waveforms.
        self.decide = Signal()                  # stage C passes a tracked packet's first beat on (the decision)
        self.step = Signal(step_bits)           # the flow's step after this packet
        self.min_step = Signal(step_bits)       # its job's minimum step after this packet
        self.mark = Signal()
        self.epoch = Signal(p.age_bits)         # the current epoch
        self.first = Signal()                   # the beat on `i` starts a packet
        self.entry_b = Signal(self.entry)       # the flow-table entry of the beat in stage B (registered read)
        self.known_b = Signal()                 # ... and that entry is its flow's
        self.row_c = Signal(self.row)           # the job row stage C updates (the registered read, or forwarded)
        self.setting_c = Signal(self.settings)  # ... and its job's settings (registered read)
        self.forward = Signal()                 # the row read in stage B was written on that edge: forwarded
        self.table_reads = Signal()             # packet accesses of each array in this cycle
        self.row_reads = Signal()
        self.row_writes = Signal()
        # The three tables (created here so that the formal spec can read every word).
        self.flow_table = memory.Memory(shape=self.entry, depth=self.table, init=[])
        self.job_rows = memory.Memory(shape=self.row, depth=self.jobs, init=[])
        self.job_settings = memory.Memory(shape=self.settings, depth=self.jobs, init=[])

    def elaborate(self, platform):
        m = Module()
        R, bits = self.ring, self.step_bits
        top = (1 << bits) - 1
        index_bits = (self.table - 1).bit_length()

        # Block RAM: every read port is registered (read-first: a read and a write of one row on one edge
        # give the old row) and advances with the pipeline (`en`), holding its word while stalled.
        m.submodules.flows = flows = self.flow_table
        m.submodules.rows = rows = self.job_rows
        m.submodules.settings = settings = self.job_settings
        flow_read, flow_write = flows.read_port(), flows.write_port()
        row_read, row_write = rows.read_port(), rows.write_port()
        set_read, set_write = settings.read_port(), settings.write_port()

        # The stages advance together on `load`; a command waits until no beat is in B or C (drained).
        b, c = self.stage_b, self.stage_c
        load = ~self.o.valid | self.o.ready
        m.d.comb += [self.cfg.ready.eq(~b.valid & ~c.valid), self.i.ready.eq(load & ~self.cfg.valid),
                     flow_read.en.eq(load), row_read.en.eq(load), set_read.en.eq(load)]
        command = self.cfg.valid & self.cfg.ready
        live = ~ResetSignal()       # a reset edge writes no table: the packet or command in flight is lost

        # Stage A (the beat on `i`): parse beat 0, address the flow table by the dest QP's low bits.
        beat = self.i.payload
        accept = self.i.valid & self.i.ready
        m.submodules.parser = parser = Parser(beat, accept, header_bytes=ROCE_HEADER_BYTES)
        m.d.comb += self.first.eq(parser.first)
        ip, bth, length = parser.ip, parser.bth, parser.count
        ipv4_udp, malformed = Signal(), Signal()
        short = beat.last & (length < UDP_OFFSET + 4)
        m.d.comb += [
            ipv4_udp.eq((length >= IP_OFFSET + 10) & parser.is_ipv4 & parser.is_udp),
            malformed.eq(ipv4_udp & (~parser.is_ihl5 | short |
                                     parser.is_roce & beat.last & (length < ROCE_HEADER_BYTES))),
            flow_read.addr.eq(bth.dqpn[:index_bits]),
        ]
        # The checksum the header gets if marked (RFC 1624), ready before the decision.
        old_word = Cat(ip.tos, ip.ihl, ip.version)          # bytes 14..15 as a 16-bit word
        new_word = Cat(ip.tos | ECN_CE, ip.ihl, ip.version)
        total = (~ip.chksum & 0xFFFF) + (~old_word & 0xFFFF) + new_word
        total = (total & 0xFFFF) + (total >> 16)
        total = (total & 0xFFFF) + (total >> 16)
        timer = Signal(self.epoch_bits + self.age_bits)     # ageing: a free-running timer, its epoch
        m.d.sync += timer.eq(timer + 1)
        m.d.comb += self.epoch.eq(timer[self.epoch_bits:])
        with m.If(load):
            m.d.sync += [
                b.valid.eq(accept), b.beat.eq(beat), b.first.eq(parser.first), b.malformed.eq(malformed),
                b.roce.eq(ipv4_udp & ~malformed & parser.is_roce), b.qp.eq(bth.dqpn),
                b.last_opcode.eq(Cat(*(bth.opcode == op for op in LAST_OPCODES)).any()), b.tos.eq(ip.tos),
                b.marked_checksum.eq(~total[:16]),
                b.epoch.eq(self.epoch),
            ]

        # Stage B: the flow's entry is out; its job addresses the job row and settings.
        entry = self.entry_b
        m.d.comb += [entry.eq(flow_read.data),
                     self.known_b.eq(b.roce & entry.valid & (entry.qp == b.qp)),
                     row_read.addr.eq(entry.job), set_read.addr.eq(entry.job)]
        with m.If(load):
            m.d.sync += [c.eq(Cat(b, self.known_b, entry.job, entry.position))]

        # Stage C: the row is out (forwarded when stage C wrote it on the edge that read it); update
        # the flow's position in its job row; the row's new minimum; the decision.
        last_row = Signal(self.row)
        m.d.comb += [self.row_c.eq(Mux(self.forward, last_row, row_read.data)), self.setting_c.eq(set_read.data)]
        row, setting, position = self.row_c, self.setting_c, c.position
        m.d.comb += self.decide.eq(load & c.valid & c.first & c.known)
        count = Signal(16)
        step = Signal(bits)
        m.d.comb += [count.eq(row.count[position]), step.eq(row.step[position])]
        closes = (count + 1 >= setting.chunk)
        if self.message_steps:
            closes = closes | c.last_opcode
        new_step = Mux(closes & (step != top), step + 1, step)
        new_count = Mux(closes, 0, count + 1)

        # Ageing: the other positions idle for more than age_out epochs (at the packet's acceptance) turn
        # stale; the sender is seen then and live. The minimum is taken over the live positions.
        age_mask = (1 << self.age_bits) - 1
        expired = [(setting.age_out != 0) & (((c.epoch - row.seen[p]) & age_mask) > setting.age_out)
                   for p in range(R)]
        stale = [Mux(position == p, 0, row.stale[p] | expired[p]) for p in range(R)]
        turned = [~row.stale[p] & expired[p] & (position != p) for p in range(R)]
        # The minimum over the other live positions, a tree beside the sender's update; then the sender's step.
        others = [Cat(row.step[p], stale[p] | (position == p)) for p in range(R)]    # {step, left out}
        while len(others) > 1:
            pairs = [others[k:k + 2] for k in range(0, len(others), 2)]
            others = [pair[0] if len(pair) == 1 else Mux(pair[1] < pair[0], pair[1], pair[0]) for pair in pairs]
        lowest = others[0]
        minimum = Mux(~lowest[bits] & (lowest[:bits] < new_step), lowest[:bits], new_step)
        ecn = c.tos[:2]
        outpacing = (new_step - self.min_step) > setting.delta
        m.d.comb += [
            self.step.eq(new_step), self.min_step.eq(minimum),
            self.mark.eq(self.decide & outpacing & (ecn != 0) & (ecn != ECN_CE)),
        ]

        # Writes: a config command (only with stages B and C empty), or stage C's row update.
        cfg = self.cfg.payload
        with m.If(command & live):
            with m.Switch(cfg.op):
                with m.Case(OP_INSTALL, OP_REMOVE):
                    m.d.comb += [
                        flow_write.addr.eq(cfg.qp[:index_bits]), flow_write.en.eq(1),
                        flow_write.data.valid.eq(cfg.op == OP_INSTALL), flow_write.data.qp.eq(cfg.qp),
                        flow_write.data.job.eq(cfg.job), flow_write.data.position.eq(cfg.position),
                    ]
                with m.Case(OP_JOB):
                    m.d.comb += [
                        set_write.addr.eq(cfg.job), set_write.en.eq(1),
                        set_write.data.chunk.eq(Mux(cfg.chunk == 0, 1, cfg.chunk)),
                        set_write.data.delta.eq(cfg.delta),
                        set_write.data.age_out.eq(cfg.age_out),
                        row_write.addr.eq(cfg.job), row_write.en.eq(1), row_write.data.eq(0),
                    ]
                    m.d.comb += [row_write.data.seen[p].eq(self.epoch) for p in range(R)]
        with m.Elif(self.decide & live):
            m.d.comb += [row_write.addr.eq(c.job), row_write.en.eq(1), row_write.data.eq(row)]
            for p in range(R):
                m.d.comb += row_write.data.stale[p].eq(stale[p])
                with m.If(position == p):
                    m.d.comb += row_write.data.seen[p].eq(c.epoch)
                    m.d.comb += [row_write.data.step[p].eq(new_step), row_write.data.count[p].eq(new_count)]
        # Forwarding: the row stage B reads on this edge is the old one if stage C writes it now.
        with m.If(load):
            m.d.sync += [self.forward.eq(self.decide & live & (c.job == entry.job)), last_row.eq(row_write.data)]

        # Output register: the beat, with ECN CE and the checksum rewritten when marked.
        out = Signal.like(beat)
        m.d.comb += out.eq(c.beat)
        with m.If(self.mark):
            m.d.comb += [
                out.data[8 * IP_TOS_AT:8 * (IP_TOS_AT + 1)].eq(c.tos | ECN_CE),
                out.data[8 * IP_CHECKSUM_AT:8 * (IP_CHECKSUM_AT + 1)].eq(c.marked_checksum[8:16]),
                out.data[8 * (IP_CHECKSUM_AT + 1):8 * (IP_CHECKSUM_AT + 2)].eq(c.marked_checksum[0:8]),
            ]
        with m.If(load):
            m.d.sync += [self.o.valid.eq(c.valid), self.o.payload.eq(out)]

        # Saturating counters with a sticky flag: a packet counts when stage C passes its first beat on.
        judged = load & c.valid & c.first
        step_saturates = self.decide & closes & (step == top)
        events = {
            "unknown": judged & ~c.malformed & ~c.known,
            "malformed": judged & c.malformed,
            "tracked": self.decide,
            "marked": self.mark,
            "not_ect": self.decide & outpacing & (ecn == 0),
        }
        saturating = step_saturates
        aged = Signal(range(R + 1))
        m.d.comb += aged.eq(sum(Cat(t, 0) for t in turned))
        saturating = saturating | count_event(m, self.aged, self.decide, amount=aged, overflow="saturate")
        for name, event in events.items():
            saturating = saturating | count_event(m, getattr(self, name), event, overflow="saturate")
        with m.If(saturating):
            m.d.sync += self.saturated.eq(1)

        # Packet accesses per array in this cycle (for the formal spec): the flow lookup in stage A, the
        # row (and settings) read of a tracked packet leaving stage B, its row write leaving stage C.
        m.d.comb += [
            self.table_reads.eq(accept & parser.first),
            self.row_reads.eq(load & b.valid & b.first & self.known_b),
            self.row_writes.eq(row_write.en & ~command),
        ]
        return m

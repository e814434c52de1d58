"""ChunkBitmap (SDR-RDMA, SPEC section 6): scapy layers, golden model rules and invariants, oracles."""
import collections
import dataclasses
import functools
import itertools
import random

import cocotb
from cocotb.triggers import RisingEdge

from hdl.chunk_bitmap import ChunkBitmap
from models import wire
from models.chunk_bitmap import (
    COUNTERS,
    LATENCY,
    OP_COMPLETE,
    OP_POST,
    OUTCOMES,
    ChunkBitmapParams,
    Slot,
    ec_recoverable,
)
from models.chunk_bitmap_oracle import (
    mds_decode,
    mds_encode,
    xor_decode,
    xor_encode,
)
from models.headers import roce_packet, sdr_imm, sdr_packet
from testbenches import runner, tb

# --- Functional coverage ----------------------------------------------------------------------------

#: Cross bins that cannot happen, and why (the coverage report prints the reason).
OOB_ONLY = "an offset at or past n_pkts is offset_oob (checked before the bitmap): never placed nor dup"
IN_RANGE = "an offset below n_pkts is never offset_oob"
LAST_CHUNK = "the packet that completes the message completes its last chunk"


def offset_edge(offset, n):
    return ("0" if offset == 0 else "=n-1" if offset == n - 1 else "=n" if offset == n else ">n" if offset > n
            else "mid")


def coverage(p):
    """The chunk bitmap's functional coverage: every packet outcome (both no_slot reasons) at the offset
    edges, every chunk/message completion by chunk shape, bit and word edges of the layout, every command
    outcome (each rejection rule) and the command/packet timing (command wins, clear back-pressure)."""
    cover = tb.Coverage("chunk_bitmap")
    cover.point("outcome", ("placed", "malformed", "no_slot_invalid", "no_slot_tag", "gen_mismatch",
                            "offset_oob", "dup"))
    cover.point("offset", ("0", "mid", "=n-1", "=n", ">n"))
    cover.point("event", ("none", "chunk_done", "msg_done"))
    cover.point("chunk_kind", ("first", "inner", "last_full", "last_short"))
    cover.point("bit", ("lsb", "mid", "msb"))
    cover.point("word", ("first", "mid", "last_slot_word"))
    cover.point("cmd", ("post", "post_over_same", "post_over_other", "complete", "reject_gen", "reject_n_zero",
                        "reject_n_big", "reject_chunk_zero", "reject_chunk_big", "reject_words", "reject_complete",
                        "undefined"))
    # n_pkts = 2**offset_bits is accepted only when such a message fits slot_words (not in the suite's
    # configurations: the bound is then met by the words rule; reject_n_big checks 2**offset_bits + 1)
    top = ("=2^offset_bits",) if p.words(1 << p.offset_bits, p.max_chunk) <= p.slot_words else ()
    cover.point("post_n", ("1", *top, "=slot_words", "other"))
    cover.point("post_chunk", ("1", "=max_chunk", "other"))
    cover.point("timing", ("cmd_wins", "cmd_alone", "pkt_alone", "busy_pkt", "busy_cmd"))
    accepted = ("placed", "dup", "offset_oob")
    cover.point("slot_outcome", accepted)
    cover.cross("outcome_x_offset", "slot_outcome", "offset", unreachable={
        **{(o, e): OOB_ONLY for o in ("placed", "dup") for e in ("=n", ">n")},
        **{("offset_oob", e): IN_RANGE for e in ("0", "mid", "=n-1")}})
    cover.cross("event_x_chunk", "event", "chunk_kind", unreachable={
        ("msg_done", "first"): LAST_CHUNK, ("msg_done", "inner"): LAST_CHUNK})
    return cover


def post_outcome(p, cmd, slot):
    """The command point of ``cmd`` against the slot it names (the model's ``_post_ok`` rules, in order)."""
    if cmd["op"] == OP_COMPLETE:
        return "complete" if slot.valid and slot.tag == cmd["msg"] else "reject_complete"
    if cmd["op"] != OP_POST:
        return "undefined"
    if cmd["gen"] >= p.generations:
        return "reject_gen"
    if cmd["n_pkts"] == 0:
        return "reject_n_zero"
    if cmd["n_pkts"] > 1 << p.offset_bits:
        return "reject_n_big"
    if cmd["chunk"] == 0:
        return "reject_chunk_zero"
    if cmd["chunk"] > p.max_chunk:
        return "reject_chunk_big"
    if p.words(cmd["n_pkts"], cmd["chunk"]) > p.slot_words:
        return "reject_words"
    return "post" if not slot.valid else "post_over_same" if slot.tag == cmd["msg"] else "post_over_other"


def scapy_pkt(p, msg, offset, gen=0, channel=0, user=0, payload=b"\0" * 16):
    """Bytes of an SDR packet for the model of ``p``, built by scapy."""
    return bytes(sdr_packet(msg, offset, gen, channel, user, qp_base=p.qp_base, generations=p.generations,
                            msg_bits=p.msg_bits, user_bits=p.user_bits, payload=payload))


@functools.cache
def template(p):
    return bytearray(scapy_pkt(p, 0, 0))


def pkt(p, msg, offset, gen=0, channel=0, user=0):
    """``scapy_pkt`` (16-byte payload) without scapy's per-packet cost: scapy's template with the UDP
    source port, dest QP, RETH address and immediate patched (``test_fast_builder`` checks it against
    scapy); the ICRC is the template's (the tracker does not check it)."""
    raw = template(p)[:]
    dqpn = p.qp_base + gen + p.generations * channel
    raw[wire.UDP_SPORT_AT:wire.UDP_SPORT_AT + 2] = (0xC000 | (dqpn & 0x3FFF)).to_bytes(2, "big")
    raw[wire.BTH_DQPN_AT + 1:wire.BTH_DQPN_AT + 4] = dqpn.to_bytes(3, "big")
    raw[wire.RETH_OFFSET:wire.RETH_OFFSET + 8] = (0x1000_0000 + 16 * offset).to_bytes(8, "big")
    imm = sdr_imm(msg, offset, user, p.msg_bits, p.user_bits)
    raw[wire.IMMDT_OFFSET:wire.IMMDT_OFFSET + 4] = imm.to_bytes(4, "big")
    return bytes(raw)


def post(msg, n_pkts, chunk, gen=0):
    return {"op": OP_POST, "msg": msg, "gen": gen, "n_pkts": n_pkts, "chunk": chunk}


def complete(msg):
    return {"op": OP_COMPLETE, "msg": msg}


def conserved(model, packets):
    assert sum(model.counters[o] for o in OUTCOMES) == packets, model.counters


# --- scapy layers --------------------------------------------------------------------------------


# --- parameters ----------------------------------------------------------------------------------


# --- directed rules ------------------------------------------------------------------------------


# --- random traffic against an independent reference ---------------------------------------------


# --- EC recoverability against real decoding -----------------------------------------------------


# --- closed forms --------------------------------------------------------------------------------


# === RTL (cocotb + Verilator): ChunkBitmap against the model, cycle by cycle =====================

class TB(tb.BlockTB):
    """Drives packets into ``i`` and commands into ``cmd``; the lockstep compares both readies and ``o``
    with the golden model every cycle (a packet's result ``LATENCY`` cycles after it was accepted)."""

    name = "chunk_bitmap"

    def __init__(self, dut, rng, idle=0.0):
        super().__init__(dut)
        self.rng = rng
        self.source = self.packet_source("i")
        self.cmds = self.stream_source("cmd")
        self.source.set_pause_generator(rng.random() < idle for _ in itertools.count())
        dut.o__ready.value = 1
        dut.rd_addr.value = 0
        self.accepted = self.results = self.busy_cycles = 0
        self.seen = collections.Counter()
        self.takes = []                         # cycles in which a packet was accepted
        self.outputs = []                       # every result seen on o (unpacked), in order
        self.cover = coverage(self.params)
        self.before = None

    def sample(self, values):
        """What the cycle's inputs meet: the packet (its first beat) and command offered, the model's
        state before the edge."""
        p, m = self.params, self.model
        pkt = cmd = None
        if values["i__valid"]:
            beat = tb.unpack(self._layout("i"), values["i__payload"])
            if beat["first"]:
                pkt = beat["data"].to_bytes(p.data_bytes, "little")[:beat["keep"].bit_length()]
        if values["cmd__valid"]:
            cmd = tb.unpack(self._layout("cmd"), values["cmd__payload"])
        fields = m.parse(pkt) if pkt is not None else None
        slot = None
        if cmd is not None and cmd["op"] in (OP_POST, OP_COMPLETE):
            slot = dataclasses.replace(m.slots[cmd["msg"] % p.msg_slots])
        pkt_slot = dataclasses.replace(m.slots[fields[0] % p.msg_slots]) if fields else None
        self.before = (m.busy, pkt, cmd, slot, pkt_slot)

    def sampled(self, values):
        """The cycle's coverage and tallies: the packet the model accepted, the result ``o`` showed."""
        self.cover_cycle(*self.before, self.model.result)
        self.busy_cycles += not values["cmd__ready"]
        if self.model.result is not None:
            self.takes.append(self.cycle)
            self.accepted += 1
        if values["o__valid"]:
            got = tb.unpack(self._layout("o"), values["o__payload"])
            self.outputs.append(got)
            self.results += 1
            self.seen[OUTCOMES[got["outcome"]]] += 1
            self.seen["chunk_done"] += got["chunk_done"]
            self.seen["msg_done"] += got["msg_done"]

    def cover_cycle(self, busy, pkt, cmd, slot, pkt_slot, result):
        """Functional coverage of one cycle: the command and packet offered, the state they met (the
        model's before the step) and the model's result."""
        p, cover = self.params, self.cover
        if busy and (pkt is not None or cmd is not None):
            cover.sample(timing="busy_cmd" if cmd is not None else "busy_pkt")
        elif cmd is not None:
            cover.sample(timing="cmd_wins" if pkt is not None else "cmd_alone")
            outcome = post_outcome(p, {"gen": 0, "n_pkts": 0, "chunk": 0, **cmd}, slot or Slot())
            values = {"cmd": outcome}
            if outcome.startswith("post"):
                n, chunk = cmd["n_pkts"], cmd["chunk"]
                values.update(post_n="1" if n == 1 else "=2^offset_bits" if n == 1 << p.offset_bits else
                              "=slot_words" if p.words(n, chunk) == p.slot_words else "other",
                              post_chunk="1" if chunk == 1 else "=max_chunk" if chunk == p.max_chunk else "other")
            cover.sample(**values)
        elif pkt is not None:
            cover.sample(timing="pkt_alone")
        if result is None:
            return
        outcome = result.outcome
        if outcome == "no_slot":
            outcome = "no_slot_invalid" if not pkt_slot.valid else "no_slot_tag"
        values = {"outcome": outcome}
        if outcome in ("placed", "dup", "offset_oob"):
            n, chunk, offset = pkt_slot.n_pkts, pkt_slot.chunk, result.offset
            values.update(slot_outcome=outcome, offset=offset_edge(offset, n))
            if outcome == "placed":
                c = offset // chunk
                word, bit = p.position(offset, chunk)
                last = c == pkt_slot.n_chunks - 1
                values.update(
                    event="msg_done" if result.msg_done else "chunk_done" if result.chunk_done is not None else "none",
                    chunk_kind=("last_short" if n % chunk else "last_full") if last else "first" if c == 0 else "inner",
                    bit="lsb" if bit == 0 else "msb" if bit == p.word_bits - 1 else "mid",
                    word="first" if word == 0 else "last_slot_word" if word == p.slot_words - 1 else "mid")
        cover.sample(**values)

    def send(self, raw):
        self.source.send_nowait(raw)

    def command(self, cmd):
        self.cmds.send_nowait({"gen": 0, "n_pkts": 0, "chunk": 0, **cmd})

    async def settle(self, cycles=LATENCY + 2):
        """Wait until everything queued went in and its results came out."""
        await self.cmds.wait_idle()
        await self.source.wait_idle()
        for _ in range(cycles):
            await RisingEdge(self.dut.clk)
        assert not any(self.model.due)

    async def start(self):
        """Reset, then the model starts from what both memories hold: an SRAM keeps its contents across a
        reset, and across the tests that share one simulation (the host read port shows them)."""
        await tb.reset(self.dut)
        self.model.pkt_mem, self.model.chunk_mem = await self.read_memories()

    async def read_memories(self):
        """Both memories through the host read port, as the model's [slot][word] lists."""
        p = self.params
        pkt_mem = [[0] * p.slot_words for _ in range(p.msg_slots)]
        chunk_mem = [[0] * p.slot_words for _ in range(p.msg_slots)]
        for addr in range(self.block.depth):
            self.dut.rd_addr.value = addr
            await RisingEdge(self.dut.clk)
            await RisingEdge(self.dut.clk)
            slot, word = divmod(addr, p.slot_words)
            pkt_mem[slot][word] = int(self.dut.rd_pkt.value)
            chunk_mem[slot][word] = int(self.dut.rd_chunk.value)
        return pkt_mem, chunk_mem

    async def finish(self, name, memories=True):
        """Drain; counters equal the model's; conservation; memories equal the model's; pcaps."""
        await self.settle()
        counters = self.check_counters()
        self.conserved("packets", self.accepted, **{o: counters[o] for o in OUTCOMES})
        assert self.results == self.accepted
        if memories:
            pkt_mem, chunk_mem = await self.read_memories()
            assert pkt_mem == self.model.pkt_mem, "packet memory differs from the model's"
            assert chunk_mem == self.model.chunk_mem, "chunk memory differs from the model's"
        self.write_pcaps(outputs=[])
        self.cover.write()
        cocotb.log.info("%s: %d packets, %d cycles (%d busy), counters %s", name, self.accepted, self.cycle,
                        self.busy_cycles, counters)
        return counters


def rtl_pkt(p, msg, offset, gen=0, channel=0, user=0, payload=16):
    """``pkt`` with ``payload`` bytes (a multi-beat packet when it does not fit one beat)."""
    raw = pkt(p, msg, offset, gen, channel, user)
    return raw[:wire.SDR_HEADER_BYTES] + bytes(payload) + raw[-wire.ICRC_BYTES:] if payload != 16 else raw


def shuffled_message(rng, p, msg, n, gen, dup=0.1):
    """The packets of a message in random order over random channels, with duplicates."""
    order = list(range(n)) + [rng.randrange(n) for _ in range(int(n * dup))]
    rng.shuffle(order)
    return [rtl_pkt(p, msg, o, gen, rng.randrange(p.channels), rng.randrange(1 << p.user_bits)) for o in order]


@cocotb.test()
async def random_traffic(dut):
    """Posts, completes, re-posts (new generations), reordered packets over every channel, duplicates,
    late packets of old generations, offsets past the message, malformed/truncated and multi-beat
    packets, idle input; RTL = model every cycle; every outcome and event seen."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, idle=0.2)
    await t.start()
    p = t.params
    live = {}
    for _ in range(60):
        msg = rng.choice(list(live)) if live and rng.random() < 0.3 else rng.randrange(1 << p.msg_bits)
        if rng.random() < 0.15 and live:
            done = rng.choice(list(live))
            t.command(complete(done))
            live.pop(done)
            continue
        chunk = rng.randrange(1, min(16, p.max_chunk) + 1)
        n = rng.randrange(1, 3 * p.word_bits)
        if p.words(n, chunk) > p.slot_words:
            n = p.slot_words * (p.word_bits // chunk) * chunk
        gen = rng.randrange(p.generations)
        old = live.get(msg)
        t.command(post(msg, n, chunk, gen))
        live[msg] = (n, gen)
        traffic = shuffled_message(rng, p, msg, n, gen)[: n if rng.random() < 0.3 else None]
        if old:                                                  # late packets of the previous generation
            traffic += [rtl_pkt(p, msg, rng.randrange(old[0]), old[1]) for _ in range(4)]
        traffic += [rtl_pkt(p, msg, n + rng.randrange(3), gen), rtl_pkt(p, msg ^ 1, 0, gen),
                    rtl_pkt(p, msg, rng.randrange(n), gen, payload=rng.randrange(100, 300)),
                    rtl_pkt(p, msg, 0, gen)[:rng.randrange(1, wire.SDR_MIN_LENGTH)]]
        rng.shuffle(traffic)
        for raw in traffic:
            t.send(raw)
        if rng.random() < 0.5:
            await t.source.wait_idle()
    # an accepted complete by construction: the random ones may all meet a slot that another message
    # took over (seed 3348181532)
    msg = rng.randrange(1 << p.msg_bits)
    t.command(post(msg, 4, 1))
    t.command(complete(msg))
    counters = await t.finish("random")
    missing = [o for o in OUTCOMES + ("chunk_done", "msg_done") if not t.seen[o]]
    assert not missing, f"random traffic never produced {missing}: {dict(t.seen)}"
    assert counters["posts"] > 0 and counters["completes"] > 0


@cocotb.test()
async def every_chunk_size(dut):
    """Chunk sizes 1..max_chunk, messages not a multiple of the chunk, offsets n-1 and n, the largest
    message a slot holds; chunk_done once per chunk, msg_done once; memories equal the model's."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng)
    await t.start()
    p = t.params
    for chunk in range(1, p.max_chunk + 1):
        most = p.slot_words * (p.word_bits // chunk) * chunk
        n = most if chunk % 7 == 0 else min(most, chunk * rng.randrange(1, 4) + rng.randrange(chunk))
        msg = rng.randrange(1 << p.msg_bits)
        t.command(post(msg, n, chunk, chunk % p.generations))
        for raw in shuffled_message(rng, p, msg, n, chunk % p.generations, dup=0.05):
            t.send(raw)
        t.send(rtl_pkt(p, msg, n - 1, chunk % p.generations))
        t.send(rtl_pkt(p, msg, n, chunk % p.generations))
        await t.settle()
    counters = await t.finish("chunk_sizes")
    assert counters["msg_done"] == p.max_chunk and counters["offset_oob"] == p.max_chunk


@cocotb.test()
async def generations_and_complete(dut):
    """Late packets of an earlier generation, early complete (NULL key), message-id wrap onto one slot,
    back-to-back posts (each waits for the previous clear), a re-post clearing a full bitmap."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng)
    await t.start()
    p = t.params
    top = (1 << p.msg_bits) - 1
    wrap = top - p.msg_slots                                    # same slot as `top`, another tag
    n = p.slot_words * p.word_bits
    t.command(post(top, n, 1, 0))
    for o in range(n):
        t.send(rtl_pkt(p, top, o, 0))
    await t.settle()
    for gen in (1 % p.generations, 0):                          # back-to-back posts of the same slot
        t.command(post(top, n, p.max_chunk, gen))
    t.command(post(wrap, 8, 4, 0))                              # and of another message on that slot
    t.command(post(top, 40, 4, p.generations - 1))
    for o in (0, 1, 2, 3, 3):
        t.send(rtl_pkt(p, top, o, p.generations - 1))
    await t.settle()
    t.send(rtl_pkt(p, top, 5, 0))                               # a late packet of the older generation
    t.send(rtl_pkt(p, wrap, 0, 0))                              # the overwritten message: no slot
    await t.settle()
    t.command(complete(top))                                    # early complete: later packets dropped
    await t.settle()
    for o in range(4, 40):
        t.send(rtl_pkt(p, top, o, p.generations - 1))
    t.command(complete(top))                                    # rejected: already completed
    await t.settle()
    counters = await t.finish("generations")
    assert counters["no_slot"] == 37 and counters["cmd_rejected"] == 1 and counters["completes"] == 1
    assert counters["dup"] == 1 and counters["gen_mismatch"] == (1 if p.generations > 1 else 0)
    assert counters["msg_done"] == 1 and counters["chunk_done"] == n + 1


@cocotb.test()
async def bad_input(dut):
    """Malformed and truncated packets of every kind, multi-beat packets, and every rejected command
    (n_pkts at 2**offset_bits, and one whose n_pkts - 1 needs its top bit, both too many words):
    counted, and no state change (memories and slots equal the model's, later packets exact)."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng)
    await t.start()
    p = t.params
    t.command(post(37, 10, 4, p.generations - 1))
    good = rtl_pkt(p, 37, 9, p.generations - 1, p.channels - 1)
    g = wire
    bad = [good[:g.SDR_MIN_LENGTH - 1], good[:20], good[:1],
           good[:g.BTH_OPCODE_AT] + bytes([g.RC_WRITE_ONLY_IMM]) + good[g.BTH_OPCODE_AT + 1:],
           good[:g.UDP_DPORT_AT] + b"\x12\xb8" + good[g.UDP_DPORT_AT + 2:],
           good[:g.IP_VERSION_IHL_AT] + b"\x46" + good[g.IP_VERSION_IHL_AT + 1:],
           good[:g.IP_VERSION_IHL_AT] + b"\x65" + good[g.IP_VERSION_IHL_AT + 1:],
           good[:g.IP_PROTO_AT] + b"\x06" + good[g.IP_PROTO_AT + 1:],
           good[:g.ETHERTYPE_AT] + b"\x86\xdd" + good[g.ETHERTYPE_AT + 2:],
           bytes(sdr_packet(37, 9, gen=0, qp_base=p.qp_base - 1, generations=p.generations,
                            msg_bits=p.msg_bits, user_bits=p.user_bits)),
           bytes(sdr_packet(37, 9, gen=0, channel=p.channels, qp_base=p.qp_base, generations=p.generations,
                            msg_bits=p.msg_bits, user_bits=p.user_bits)),
           bytes(roce_packet(op=wire.SDR_OPCODE, qp=p.qp_base, payload=bytes(300)))[:wire.SDR_MIN_LENGTH - 1]]
    for raw in bad:
        t.send(raw)
    t.send(good[:wire.SDR_MIN_LENGTH])                          # shortest well-formed: placed
    t.send(rtl_pkt(p, 37, 8, p.generations - 1, payload=400))  # multi-beat: placed, completes chunk 2
    await t.settle()
    for cmd in (post(1, 0, 4), post(1, (1 << p.offset_bits) + 1, 1), post(1, 8, 0), post(1, 8, p.max_chunk + 1),
                post(1, 8, 4, p.generations), post(1, p.slot_words * p.word_bits + 1, 1),
                post(1, 1 << p.offset_bits, p.max_chunk), post(1, (1 << p.offset_bits - 1) + 1, 1),
                {"op": 0, "msg": 37}, {"op": 3, "msg": 37}, complete(38)):
        t.command(cmd)
    await t.settle()
    t.send(rtl_pkt(p, 37, 0, p.generations - 1))
    counters = await t.finish("bad_input")
    assert counters["malformed"] == len(bad) and counters["cmd_rejected"] == 11 and counters["placed"] == 3
    assert counters["chunk_done"] == 1 and counters["posts"] == 1


@cocotb.test()
async def line_rate(dut):
    """Without commands a packet is accepted every cycle, back to back, the same word and slot hit by
    consecutive packets (the read port's transparency is the forwarding); readies exact during clears."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng)
    await t.start()
    p = t.params
    slots, sizes = min(p.msg_slots, 4), []
    for s in range(slots):
        chunk = 1 + 2 * s % p.max_chunk
        sizes.append(p.slot_words * (p.word_bits // chunk) * chunk)
        t.command(post(s, sizes[s], chunk, s % p.generations))
    await t.settle()
    traffic = []
    for s in range(slots):
        for o in range(sizes[s]):
            traffic.append(rtl_pkt(p, s, o, s % p.generations, o % p.channels))
    for i in range(0, len(traffic) - 1, 7):                     # same word twice in a row: a dup
        traffic.insert(i, traffic[i])
    before = len(t.takes)
    for raw in traffic:
        t.send(raw)
    await t.settle()
    takes = t.takes[before:]
    assert len(takes) == len(traffic) and takes[-1] - takes[0] == len(traffic) - 1, (
        f"{len(traffic)} packets accepted over {takes[-1] - takes[0] + 1} cycles: not one per cycle")
    counters = await t.finish("line_rate", memories=False)
    assert counters["msg_done"] == slots and counters["dup"] > 0


@cocotb.test()
async def reset_mid_traffic(dut):
    """Reset while the clear engine runs and packets are in the pipeline: slots, counters and the engine
    clear, memories keep their contents; traffic after it is exact."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, idle=0.1)
    await t.start()
    p = t.params
    n = p.slot_words * p.word_bits
    t.command(post(3, n, 2, 0))
    for raw in shuffled_message(rng, p, 3, n, 0):
        t.send(raw)
    landing = rng.randrange(n // 4, n // 2)
    while t.accepted < landing:
        await t.edge()
    t.command(post(3, n, 2, 1 % p.generations))                # starts a clear ...
    while not t.model.busy:
        await t.edge()
    for _ in range(rng.randrange(p.words(n, 2) - 2)):
        await RisingEdge(dut.clk)
    await t.reset(1)                                            # ... that the reset stops
    await RisingEdge(dut.clk)
    t.accepted = t.results = 0
    assert all(int(getattr(dut, name).value) == 0 for name in COUNTERS), "counters cleared"
    assert not t.source.queue and t.model.counters() == dict.fromkeys(COUNTERS, 0)
    pkt_mem, chunk_mem = await t.read_memories()                # the half-done clear is kept as it is
    assert (pkt_mem, chunk_mem) == (t.model.pkt_mem, t.model.chunk_mem), "memories after the reset"
    assert any(pkt_mem[3 % p.msg_slots]), "the reset landed before the clear finished"
    t.send(rtl_pkt(p, 3, 0, 0))                                 # no slot after the reset
    await t.settle()
    t.command(post(3, n, 2, 0))
    await t.settle()
    for raw in shuffled_message(rng, p, 3, n, 0):
        t.send(raw)
    await t.settle()
    assert t.model.counters["no_slot"] == 1 and t.model.counters["msg_done"] == 1
    t.command(post(2, n, 4, 0))                                 # a reset while packets stream in
    for raw in shuffled_message(rng, p, 2, n, 0):
        t.send(raw)
    landing = t.accepted + rng.randrange(n // 4, n // 2)
    while t.accepted < landing:
        await t.edge()
    await t.reset(1)
    await RisingEdge(dut.clk)
    t.accepted = t.results = 0
    assert any(t.model.pkt_mem[2 % p.msg_slots])
    await t.finish("after_reset")                               # memories: the packets before it wrote


@cocotb.test()
async def ec_recoverability(dut):
    """EC per submessage from the RTL's chunk bitmap (host read port): MDS and XOR recoverability equal
    real decoding of random data (XOR by hand, Reed-Solomon with reedsolo) and the model's ec_status."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng)
    await t.start()
    p = t.params
    k, m, chunk = 8, 4, 2
    subs = min(4, p.slot_words * (p.word_bits // chunk) // (k + m))
    msg = 5
    t.command(post(msg, subs * (k + m) * chunk, chunk, 0))
    missing = [set(rng.sample(range(k + m), rng.randrange(0, m + 3))) for _ in range(subs)]
    missing[0] = {0, m}                                         # one XOR group loses two: MDS yes, XOR no
    for sub in range(subs):
        for i in range(k + m):
            first = (sub * (k + m) + i) * chunk
            for o in range(chunk if i not in missing[sub] else rng.randrange(chunk)):
                t.send(rtl_pkt(p, msg, first + o, 0))
    await t.settle()
    _, chunk_mem = await t.read_memories()
    index = msg % p.msg_slots
    for sub in range(subs):
        got = {i for i in range(k + m)
               if not chunk_mem[index][(sub * (k + m) + i) // p.word_bits] >> ((sub * (k + m) + i) % p.word_bits) & 1}
        assert got == missing[sub]
        data = [rng.randbytes(4) for _ in range(k)]
        for scheme, encode, decode in (("xor", xor_encode, xor_decode), ("mds", mds_encode, mds_decode)):
            coded = encode(data, m)
            ok = decode([None if i in got else c for i, c in enumerate(coded)], k, m) == data
            assert ok == ec_recoverable(got, k, m, scheme) == t.model.ec_status(msg, k, m, scheme)[sub], (scheme, got)
    await t.finish("ec")


PARAMS = {"default": ChunkBitmapParams(),
          "small": ChunkBitmapParams(msg_slots=4, word_bits=32, max_chunk=32, generations=2, channels=2,
                                     slot_words=4, msg_bits=8, user_bits=2, data_bytes=96)}


@runner.parametrize(__name__, PARAMS)
def test_chunk_bitmap(params, testcase, record_property):
    record_property("innet", runner.run(ChunkBitmap, params, __name__, testcase))

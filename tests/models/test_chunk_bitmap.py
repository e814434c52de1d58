"""The chunk_bitmap golden model alone (``models/chunk_bitmap.py``): the tests that need no RTL."""
import itertools
import math
import random

import numpy as np
import pytest

from models import wire
from models.chunk_bitmap import (
    COUNTERS,
    LATENCY,
    OP_POST,
    OUTCOMES,
    ChunkBitmapModel,
    ChunkBitmapParams,
    ec_recoverable,
)
from models.chunk_bitmap_oracle import (
    binom_upper,
    ec_timeout,
    mds_decode,
    mds_encode,
    mds_fail,
    p_chunk,
    p_fallback,
    p_mds,
    p_xor,
    sr_mean_time,
    sr_rto,
    xor_decode,
    xor_encode,
    xor_fail,
)
from models.headers import BTH, IP, RETH, UDP, Ether, ImmDt, Raw, roce_packet, sdr_imm, sdr_packet
from testbenches import runner
from testbenches.test_chunk_bitmap import complete, conserved, pkt, post, scapy_pkt


def seeded(name):
    return runner.model_rng(name)


def snapshot(model):
    return ([vars(s).copy() for s in model.slots], [list(w) for w in model.pkt_mem],
            [list(w) for w in model.chunk_mem])


def test_reth_immdt_round_trip():
    """build -> bytes -> parse keeps every BTH/RETH/ImmDt field; the layers sit at the wire offsets."""
    rng = seeded("round_trip")
    for _ in range(100):
        msg, off, user = rng.randrange(1 << 10), rng.randrange(1 << 18), rng.randrange(16)
        gen, ch = rng.randrange(4), rng.randrange(4)
        va, rkey, psn = rng.randrange(1 << 64), rng.randrange(1 << 32), rng.randrange(1 << 24)
        payload = rng.randbytes(rng.randrange(0, 100))
        raw = bytes(sdr_packet(msg, off, gen, ch, user, payload=payload, va=va, rkey=rkey, psn=psn))
        assert len(raw) == wire.SDR_MIN_LENGTH + len(payload)
        parsed = Ether(raw)
        assert parsed[UDP].dport == wire.ROCEV2_PORT and parsed[UDP].sport >= 0xC000
        bth, reth, imm = parsed[BTH], parsed[RETH], parsed[ImmDt]
        assert (bth.opcode, bth.dqpn, bth.psn) == (wire.SDR_OPCODE, 0x100 + gen + 4 * ch, psn)
        assert (reth.va, reth.rkey, reth.dlen) == (va, rkey, len(payload))
        assert imm.imm == (msg << 22) | (off << 4) | user
        assert bytes(parsed[Raw].load if Raw in parsed else b"") == payload
        assert raw[wire.RETH_OFFSET:wire.IMMDT_OFFSET] == bytes(RETH(va=va, rkey=rkey, dlen=len(payload)))
        assert raw[wire.IMMDT_OFFSET:wire.SDR_HEADER_BYTES] == imm.imm.to_bytes(4, "big")
        assert bytes(Ether(raw)) == raw


@pytest.mark.parametrize("op", sorted(set(wire.RETH_OPCODES) | set(wire.IMMDT_OPCODES)))
def test_opcode_bindings(op):
    """RETH after the BTH for the RETH opcodes; ImmDt after the RETH (Write Only Imm) or the BTH."""
    raw = bytes(roce_packet(op=op, payload=bytes(range(24))))
    parsed = Ether(raw)
    assert (RETH in parsed) == (op in wire.RETH_OPCODES)
    assert (ImmDt in parsed) == (op in wire.IMMDT_OPCODES)
    if ImmDt in parsed:
        at = 16 if op in wire.RETH_OPCODES else 0
        assert parsed[ImmDt].imm == int.from_bytes(bytes(range(at, at + 4)), "big")
    assert parsed[BTH].opcode == op
    assert (BTH() / RETH())[BTH].opcode == wire.SDR_OPCODE
    assert bytes(BTH(raw[wire.BTH_OFFSET:]))[:1] == bytes([op])


def test_fast_builder():
    """The patched-template builder equals scapy's packet but for the ICRC."""
    rng = seeded("fast_builder")
    for config in ({}, {"msg_bits": 8, "user_bits": 2, "generations": 8, "qp_base": 0x4000}):
        p = ChunkBitmapParams(**config)
        for _ in range(30):
            args = (rng.randrange(1 << p.msg_bits), rng.randrange(1 << p.offset_bits), rng.randrange(p.generations),
                    rng.randrange(p.channels), rng.randrange(1 << p.user_bits))
            assert pkt(p, *args)[:-wire.ICRC_BYTES] == scapy_pkt(p, *args)[:-wire.ICRC_BYTES]


def test_wire_constants_and_imm():
    p = Ether(bytes(sdr_packet(1, 2, payload=b"")))
    assert len(bytes(p[IP])) + wire.IP_OFFSET == wire.SDR_MIN_LENGTH
    assert len(RETH()) == wire.RETH_BYTES and len(ImmDt()) == wire.IMMDT_BYTES
    assert wire.UC_WRITE_ONLY_IMM == 0x2B and wire.SDR_MSG_BITS + wire.SDR_OFFSET_BITS + wire.SDR_USER_BITS == 32
    assert sdr_imm(0x3FF, 0x3FFFF, 0xF) == 0xFFFFFFFF
    assert sdr_imm(0xAB, 0x12345, 2, msg_bits=8, user_bits=2) == 0xAB << 24 | 0x12345 << 2 | 2
    for kwargs in ({"msg": 1024, "offset": 0}, {"msg": 0, "offset": 1 << 18}, {"msg": 0, "offset": 0, "user": 16}):
        with pytest.raises(ValueError, match=next(iter(k for k in kwargs if kwargs[k]))):
            sdr_imm(**kwargs)


@pytest.mark.parametrize("kwargs,name", [
    ({"msg_slots": 3}, "msg_slots"), ({"generations": 0}, "generations"), ({"word_bits": 48}, "word_bits"),
    ({"max_chunk": 65}, "max_chunk"), ({"max_chunk": 64, "word_bits": 32}, "max_chunk"),
    ({"msg_bits": 20, "user_bits": 12}, "user_bits"), ({"msg_bits": 3, "msg_slots": 16}, "msg_slots"),
    ({"qp_base": (1 << 24) - 4}, "qp_base"), ({"data_bytes": 64}, "data_bytes"), ({"slot_words": 0}, "slot_words"),
])
def test_bad_params(kwargs, name):
    with pytest.raises(ValueError, match=name):
        ChunkBitmapParams(**kwargs)


def test_bad_param_types():
    with pytest.raises(TypeError, match="msg_slots"):
        ChunkBitmapParams(msg_slots=16.0)
    with pytest.raises(TypeError, match="params"):
        ChunkBitmapModel({"msg_slots": 16})


def test_outcomes_in_order():
    """Each drop reason in the SPEC's order; drops change nothing but their counter."""
    p = ChunkBitmapParams()
    m = ChunkBitmapModel(p)
    assert m.command(post(37, 10, 4, gen=2))
    good = scapy_pkt(p, 37, 9, gen=2, channel=3)
    bad = [good[:wire.SDR_MIN_LENGTH - 1], good[:20],
           good[:wire.BTH_OPCODE_AT] + bytes([wire.RC_WRITE_ONLY_IMM]) + good[wire.BTH_OPCODE_AT + 1:],
           good[:wire.UDP_DPORT_AT] + b"\x12\xb8" + good[wire.UDP_DPORT_AT + 2:],
           good[:wire.IP_VERSION_IHL_AT] + b"\x46" + good[wire.IP_VERSION_IHL_AT + 1:],
           good[:wire.ETHERTYPE_AT] + b"\x86\xdd" + good[wire.ETHERTYPE_AT + 2:],
           bytes(sdr_packet(37, 9, gen=2, qp_base=p.qp_base - 3)),
           bytes(sdr_packet(37, 9, gen=0, channel=4, qp_base=p.qp_base)),
           bytes(roce_packet(op=wire.SDR_OPCODE, qp=p.qp_base, payload=b"\0" * 30))[:wire.SDR_MIN_LENGTH - 1]]
    cases = [(b, "malformed") for b in bad] + [
        (pkt(p, 38, 0, gen=2), "no_slot"), (pkt(p, 37 + p.msg_slots, 0, gen=2), "no_slot"),
        (pkt(p, 37, 0, gen=1), "gen_mismatch"), (pkt(p, 37, 10, gen=2), "offset_oob"),
        (pkt(p, 37, (1 << 18) - 1, gen=2), "offset_oob")]
    before = snapshot(m)
    for raw, outcome in cases:
        assert m.packet(raw).outcome == outcome
        assert snapshot(m) == before, outcome
    assert m.packet(good) == ("placed", 37, 9, 2, 3, None, False)
    assert m.packet(pkt(p, 37, 9, gen=2, channel=0)).outcome == "dup"
    r = m.packet(pkt(p, 37, 8, gen=2, channel=1, user=5))
    assert (r.outcome, r.chunk_done, r.msg_done) == ("placed", 2, False)   # last chunk: packets 8, 9
    assert m.counters() == dict(m.counters(), placed=2, malformed=len(bad), no_slot=2, gen_mismatch=1, offset_oob=2,
                              dup=1, chunk_done=1, msg_done=0, posts=1)
    conserved(m, len(cases) + 3)


def check_chunk_invariant(m, index):
    """Chunk bit <=> all its packet bits; chunks done = chunk bits set."""
    s = m.slots[index]
    bits = 0
    for c in range(s.n_chunks):
        full = all(m.packet_bit(index, o) for o in range(c * s.chunk, min((c + 1) * s.chunk, s.n_pkts)))
        assert m.chunk_bit(index, c) == full, (index, c)
        bits += full
    assert bits == s.done


@pytest.mark.parametrize("word_bits", [64, 32])
def test_every_chunk_size(word_bits):
    """Chunk sizes 1..max, messages not a multiple of the chunk: chunk_done exactly when a chunk's last
    packet lands, once; msg_done once; no chunk spans a word; chunk bit <=> all packet bits."""
    rng = seeded(f"chunk_sizes_{word_bits}")
    p = ChunkBitmapParams(word_bits=word_bits, max_chunk=min(64, word_bits), slot_words=16)
    m = ChunkBitmapModel(p)
    for chunk in range(1, p.max_chunk + 1):
        cpw = word_bits // chunk
        n = min(p.slot_words * cpw * chunk, chunk * rng.randrange(1, 6) + rng.randrange(chunk))
        msg = rng.randrange(1 << 10)
        assert m.command(post(msg, n, chunk, gen=chunk % 4))
        index = msg % p.msg_slots
        for o in range(n):
            word, bit = p.position(o, chunk)
            c = o // chunk
            assert (word, bit // chunk * chunk) == (c // cpw, (c % cpw) * chunk) and bit < word_bits
        order = list(range(n)) + [rng.randrange(n) for _ in range(n // 2)]
        rng.shuffle(order)
        got, done = set(), []
        for o in order:
            r = m.packet(pkt(p, msg, o, gen=chunk % 4, channel=rng.randrange(4)))
            assert r.outcome == ("dup" if o in got else "placed")
            got.add(o)
            c = o // chunk
            finishes = r.outcome == "placed" and got >= set(range(c * chunk, min(n, (c + 1) * chunk)))
            assert r.chunk_done == (c if finishes else None)
            done += [c] if finishes else []
            assert r.msg_done == (len(got) == n and r.outcome == "placed")
        assert sorted(done) == list(range(-(-n // chunk)))
        check_chunk_invariant(m, index)
        assert m.command(complete(msg))
    assert m.counters["msg_done"] == p.max_chunk


def test_late_generation_and_clear():
    """A re-post (new generation) clears the slot's words; the old generation's packets are gen_mismatch."""
    p = ChunkBitmapParams()
    m = ChunkBitmapModel(p)
    m.command(post(5, 200, 16, gen=0))
    for o in list(range(16)) + list(range(16, 200, 3)):
        m.packet(pkt(p, 5, o, gen=0))
    assert any(m.pkt_mem[5]) and any(m.chunk_mem[5])
    m.command(post(5, 200, 16, gen=1))
    assert not any(m.pkt_mem[5][:p.words(200, 16)]) and not any(m.chunk_mem[5][:p.words(200, 16)])
    before = snapshot(m)
    assert m.packet(pkt(p, 5, 3, gen=0)).outcome == "gen_mismatch"
    assert snapshot(m) == before
    assert m.packet(pkt(p, 5, 3, gen=1)).outcome == "placed"


def test_complete_and_message_wrap():
    """complete = NULL key (late packets no_slot); tag = the full message id, across its wrap."""
    p = ChunkBitmapParams(msg_slots=4)
    m = ChunkBitmapModel(p)
    assert m.command(post(1023, 8, 4)) and m.command(post(0, 8, 4))
    assert m.packet(pkt(p, 1023, 7)).outcome == "placed" and m.packet(pkt(p, 0, 7)).outcome == "placed"
    assert m.packet(pkt(p, 3, 0)).outcome == "no_slot"              # same slot as 1023, other tag
    assert m.command(complete(1023)) and not m.command(complete(1023)) and not m.command(complete(3))
    assert m.packet(pkt(p, 1023, 1)).outcome == "no_slot"           # early complete: late packets dropped
    assert m.command(post(3, 8, 4)) and m.packet(pkt(p, 3, 7)).outcome == "placed"   # bitmap cleared
    assert m.command(post(7, 8, 4)) and m.packet(pkt(p, 3, 1)).outcome == "no_slot"  # post overwrites
    assert (m.counters["posts"], m.counters["completes"], m.counters["cmd_rejected"]) == (4, 1, 2)


@pytest.mark.parametrize("cmd", [post(1, 0, 4), post(1, (1 << 18) + 1, 64), post(1, 8, 0), post(1, 8, 65),
                                 post(1, 8, 4, gen=4), post(1, 8 * 64 + 1, 64), post(1, 8 * 21 * 3 + 1, 3),
                                 post(1024, 8, 4), complete(1024), {"op": 3, "msg": 1}])
def test_bad_commands(cmd):
    """Bad commands are rejected, counted, and change nothing."""
    m = ChunkBitmapModel()
    m.command(post(1, 8, 4))
    before = snapshot(m)
    assert not m.command(cmd)
    assert snapshot(m) == before and m.counters["cmd_rejected"] == 1
    assert m.command(post(1, 8 * 64, 64)) and m.command(post(1, 8 * 21 * 3, 3)) and m.command(post(2, 1 << 18 >> 9, 1))


def test_clear_engine_timing():
    """A command wins over a packet; a post then back-pressures both inputs for words(n, chunk) cycles,
    zeroing word i of both memories in the i-th of them; complete takes one cycle."""
    p = ChunkBitmapParams(slot_words=8)
    m = ChunkBitmapModel(p)
    m.command(post(2, 512, 64))
    for o in range(512):
        m.packet(pkt(p, 2, o))
    assert all(w == (1 << 64) - 1 for w in m.pkt_mem[2])
    other = pkt(p, 9, 0)
    assert m.tick(other, post(2, 300, 50, gen=1)) == (False, True, None)
    words = p.words(300, 50)
    assert words == 6
    for i in range(words):
        assert m.busy and m.tick(other, complete(2)) == (False, False, None)
        assert m.pkt_mem[2][:i + 1] == [0] * (i + 1) and m.pkt_mem[2][i + 1] == (1 << 64) - 1
    assert not m.busy and m.chunk_mem[2][:words] == [0] * words
    cycle = m.tick(pkt(p, 2, 299, gen=1), None)
    assert cycle.pkt_ready and cycle.result.outcome == "placed"
    assert m.tick(pkt(p, 2, 0, gen=1), complete(2)) == (False, True, None)
    assert m.tick(pkt(p, 2, 0, gen=1), None).result.outcome == "no_slot"
    assert LATENCY >= 1


def test_line_rate_and_back_to_back_posts():
    """Without commands a packet is accepted every cycle; back-to-back posts each wait for the clear."""
    p = ChunkBitmapParams()
    m = ChunkBitmapModel(p)
    cycles = 0
    for msg in range(4):
        cmd = post(msg, 64 * 4, 16)
        while not m.tick(None, cmd).cmd_ready:
            cycles += 1
        cycles += 1
    assert cycles == 4 + 3 * p.words(256, 16)          # the last clear still runs
    while m.busy:
        m.tick()
    raws = [pkt(p, msg, o) for msg in range(4) for o in range(256)]
    assert all(m.tick(raw).result.outcome == "placed" for raw in raws)
    assert m.counters["msg_done"] == 4 and m.counters["chunk_done"] == 64
    conserved(m, len(raws))


def test_reset_mid_traffic():
    p = ChunkBitmapParams()
    m = ChunkBitmapModel(p)
    m.command(post(1, 256, 8))
    for o in range(100):
        m.tick(pkt(p, 1, o))
    m.tick(None, post(1, 256, 8, gen=1))
    assert m.busy
    words = [list(w) for w in m.pkt_mem]
    m.reset()
    assert not m.busy and not any(s.valid for s in m.slots) and m.counters() == dict.fromkeys(COUNTERS, 0)
    assert m.pkt_mem == words                          # SRAM keeps its contents
    assert m.tick(pkt(p, 1, 200, gen=1)).result.outcome == "no_slot"
    assert m.counters["no_slot"] == 1
    conserved(m, 1)


def test_counter_saturation():
    m = ChunkBitmapModel(ChunkBitmapParams(counter_bits=2))
    for _ in range(5):
        m.packet(b"\0" * 10)
    assert m.counters["malformed"] == 3 and m.saturated


class Reference:
    """Set-based restatement of the SPEC's per-packet rules."""

    def __init__(self, p):
        self.p, self.slots = p, {}
        self.seen_chunks, self.seen_msgs, self.posts = set(), set(), 0

    def post(self, cmd):
        p = self.p
        n, chunk = cmd["n_pkts"], cmd["chunk"]
        if not (cmd["gen"] < p.generations and 1 <= chunk <= p.max_chunk and 1 <= n <= 1 << p.offset_bits
                and -(-(-(-n // chunk)) // (p.word_bits // chunk)) <= p.slot_words):
            return
        self.posts += 1
        self.slots[cmd["msg"] % p.msg_slots] = dict(tag=cmd["msg"], gen=cmd["gen"], n=n, chunk=chunk, got=set(),
                                                    post=self.posts)

    def complete(self, msg):
        s = self.slots.get(msg % self.p.msg_slots)
        if s is not None and s["tag"] == msg:
            del self.slots[msg % self.p.msg_slots]

    def packet(self, fields):
        if fields is None:
            return "malformed", None, False
        msg, off, gen = fields
        s = self.slots.get(msg % self.p.msg_slots)
        if s is None or s["tag"] != msg:
            return "no_slot", None, False
        if s["gen"] != gen:
            return "gen_mismatch", None, False
        if off >= s["n"]:
            return "offset_oob", None, False
        if off in s["got"]:
            return "dup", None, False
        s["got"].add(off)
        c, chunk = off // s["chunk"], s["chunk"]
        done = s["got"] >= set(range(c * chunk, min(s["n"], (c + 1) * chunk)))
        if done:
            key = (s["post"], c)
            assert key not in self.seen_chunks, "chunk_done twice"
            self.seen_chunks.add(key)
        full = len(s["got"]) == s["n"]
        if full:
            assert s["post"] not in self.seen_msgs, "msg_done twice"
            self.seen_msgs.add(s["post"])
        return "placed", c if done else None, full


@pytest.mark.parametrize("config", [{}, {"msg_slots": 4, "word_bits": 32, "max_chunk": 32, "generations": 2},
                                    {"msg_bits": 8, "user_bits": 2, "channels": 1, "word_bits": 128,
                                     "slot_words": 2}])
def test_random_traffic(config):
    """Reordering across channels, duplicates, late generations, malformed packets, posts, completes and
    resets through ``step``: outcomes and events equal the reference's; readies follow the clear engine;
    conservation and chunk bit <=> packet bits after every cycle."""
    rng = seeded(f"random_traffic_{config}")
    p = ChunkBitmapParams(**config)
    m, ref = ChunkBitmapModel(p), Reference(p)
    live, stale = {}, []                   # slot -> [msg, gen, offsets to send] of the last post; older ones
    pending_pkt = pending_cmd = None
    accepted = clear_left = 0
    tally = dict.fromkeys(OUTCOMES + ("chunk_done", "msg_done", "resets"), 0)
    def covered():
        return min(tally[o] for o in OUTCOMES) > 0 and tally["chunk_done"] > 50 and tally["msg_done"] > 5

    for step in itertools.count():              # at least 5000 cycles, more until every case was seen
        if step >= 5000 and covered() or step == 50000:
            break
        if pending_cmd is None and rng.random() < 0.02:
            msg = rng.choice(list(live.values()))[0] if live and rng.random() < 0.5 else rng.randrange(1 << p.msg_bits)
            if rng.random() < 0.2:
                pending_cmd = complete(msg)
            else:
                small = rng.random() < 0.8
                chunk = rng.randrange(1, min(16, p.max_chunk) + 1) if small else rng.randrange(p.max_chunk + 2)
                n = rng.randrange(1, 2 * p.word_bits)
                pending_cmd = post(msg, n, chunk, gen=rng.randrange(p.generations))
                offsets = list(range(n + 1)) + [rng.randrange(n) for _ in range(n // 4)]
                rng.shuffle(offsets)
                if msg % p.msg_slots in live:
                    stale.append(live[msg % p.msg_slots])
                live[msg % p.msg_slots] = [msg, pending_cmd["gen"], offsets]
        if pending_pkt is None and live and rng.random() < 0.9:
            msg, gen, offsets = rng.choice(stale) if stale and rng.random() < 0.1 else rng.choice(list(live.values()))
            off = offsets.pop() if offsets and rng.random() < 0.99 else rng.randrange(1 << p.offset_bits)
            if rng.random() < 0.1:                      # another generation, or malformed: send it again later
                offsets.insert(0, off)
                gen = rng.randrange(p.generations)
            raw = pkt(p, msg, off, gen, rng.randrange(p.channels), rng.randrange(1 << p.user_bits))
            fields = (msg, off, gen)
            if rng.random() < 0.02:
                offsets.insert(0, off)
                raw, fields = raw[:rng.randrange(wire.SDR_MIN_LENGTH)], None
            pending_pkt = (raw, fields)
        before = snapshot(m)
        cycle = m.tick(pending_pkt and pending_pkt[0], pending_cmd)
        assert cycle.cmd_ready == (clear_left == 0)
        assert cycle.pkt_ready == (clear_left == 0 and pending_cmd is None)
        if cycle.result is not None and cycle.result.outcome != "placed":
            assert snapshot(m) == before, cycle.result          # drops change no state
        if clear_left == 1:                                     # the clear's last word: all its words are zero
            index = m.clear_slot
            words = p.words(m.slots[index].n_pkts, m.slots[index].chunk)
            assert not any(m.pkt_mem[index][:words]) and not any(m.chunk_mem[index][:words])
        clear_left = max(clear_left - 1, 0)
        if pending_pkt is not None and cycle.pkt_ready:
            outcome, chunk_done, msg_done = ref.packet(pending_pkt[1])
            r = cycle.result
            assert (r.outcome, r.chunk_done, r.msg_done) == (outcome, chunk_done, msg_done)
            accepted += 1
            pending_pkt = None
            tally[r.outcome] += 1
            tally["chunk_done"] += r.chunk_done is not None
            tally["msg_done"] += r.msg_done
        if pending_cmd is not None and cycle.cmd_ready:
            if pending_cmd["op"] == OP_POST:
                before = ref.posts
                ref.post(pending_cmd)
                if ref.posts > before:
                    clear_left = p.words(pending_cmd["n_pkts"], pending_cmd["chunk"])
            else:
                ref.complete(pending_cmd["msg"])
                index = pending_cmd["msg"] % p.msg_slots
                if index in live and live[index][0] == pending_cmd["msg"]:
                    stale.append(live.pop(index))
            pending_cmd = None
        if rng.random() < 0.001:
            m.reset()
            tally["resets"] += 1
            stale += live.values()
            live.clear()
            ref.slots.clear()
            accepted = clear_left = 0
            pending_pkt = pending_cmd = None
        conserved(m, accepted)
        if not m.busy:
            touched = [cycle.result.msg % p.msg_slots] if cycle.result and cycle.result.msg is not None else []
            for index in touched if step % 100 else range(p.msg_slots):
                if m.slots[index].valid:
                    check_chunk_invariant(m, index)
    print(tally)
    assert covered(), f"50000 cycles did not cover every outcome and event: {tally}"


@pytest.mark.parametrize("k,m", [(32, 8), (4, 2), (6, 3), (8, 4), (3, 1), (5, 2)])
def test_ec_oracle_vs_real_decoding(k, m):
    """MDS (Reed-Solomon, reedsolo) and XOR decoders recover the data exactly when the oracle says so."""
    rng = seeded(f"ec_{k}_{m}")
    for trial in range(60):
        data = [rng.randbytes(3) for _ in range(k)]
        lost = rng.randrange(0, 2 * m + 2) if trial % 3 else m + trial % 2
        missing = set(rng.sample(range(k + m), min(lost, k + m)))
        for scheme, encode, decode in (("xor", xor_encode, xor_decode), ("mds", mds_encode, mds_decode)):
            coded = encode(data, m)
            assert coded[:k] == data
            received = [None if i in missing else c for i, c in enumerate(coded)]
            decoded = decode(received, k, m)
            assert (decoded == data) == ec_recoverable(missing, k, m, scheme), (scheme, sorted(missing))
            if decoded is not None:
                assert decoded == data
    with pytest.raises(ValueError, match="scheme"):
        ec_recoverable(set(), 4, 2, "raid")


def test_model_ec_status():
    """ec_status reads the chunk bitmap: submessage l = chunks [l(k+m), (l+1)(k+m)), parity last."""
    rng = seeded("ec_status")
    p = ChunkBitmapParams(slot_words=4)
    mdl = ChunkBitmapModel(p)
    k, m, chunk, subs = 8, 4, 4, 3
    mdl.command(post(9, subs * (k + m) * chunk, chunk))
    missing = [set(rng.sample(range(k + m), rng.randrange(0, m + 2))) for _ in range(subs)]
    missing[0] = {0, 4}                                   # XOR group 0 loses two: MDS yes, XOR no
    for sub in range(subs):
        for i in range(k + m):
            if i not in missing[sub]:
                for o in range(chunk):
                    mdl.packet(pkt(p, 9, ((sub * (k + m) + i) * chunk) + o))
            else:
                mdl.packet(pkt(p, 9, (sub * (k + m) + i) * chunk))   # chunk not complete: still missing
    for scheme in ("mds", "xor"):
        assert mdl.ec_status(9, k, m, scheme) == [ec_recoverable(s, k, m, scheme) for s in missing]
    assert mdl.ec_status(9, k, m, "mds")[0] and not mdl.ec_status(9, k, m, "xor")[0]
    with pytest.raises(ValueError, match="msg"):
        mdl.ec_status(10, k, m, "mds")
    with pytest.raises(ValueError, match="k \\+ m"):
        mdl.ec_status(9, 5, 2, "mds")


def test_binomial_forms():
    """p_MDS, p_XOR equal the App. B sums; failures as upper sums stay exact where 1 - sum cancels."""
    for k, m, p in ((32, 8, 0.05), (8, 2, 0.2), (4, 4, 0.5)):
        n = k // m + 1
        assert p_mds(k, m, p) == pytest.approx(
            sum(math.comb(k + m, i) * p ** i * (1 - p) ** (k + m - i) for i in range(m + 1)), rel=1e-12)
        assert p_xor(k, m, p) == pytest.approx(((1 - p) ** n + n * p * (1 - p) ** (n - 1)) ** m, rel=1e-12)
    tiny = 1e-6
    assert 1 - p_mds(32, 8, tiny) == 0                    # the lower sum cancels ...
    assert mds_fail(32, 8, tiny) == pytest.approx(math.comb(40, 9) * tiny ** 9, rel=1e-4)   # ... the upper does not
    assert xor_fail(32, 8, tiny) == pytest.approx(8 * math.comb(5, 2) * tiny ** 2, rel=1e-4)
    assert binom_upper(10, 0, 0.3) == pytest.approx(1) and binom_upper(10, 11, 0.3) == 0
    assert p_fallback(0.01, 1) == pytest.approx(0.01) and p_fallback(1e-20, 1000) == pytest.approx(1e-17)
    assert p_fallback(1.0, 3) == 1.0 and p_fallback(0.3, 2) == pytest.approx(1 - 0.7 ** 2)
    assert p_chunk(0.1, 1) == pytest.approx(0.1) and p_chunk(1e-9, 16) == pytest.approx(16e-9, rel=1e-6)
    assert p_chunk(0.1, 16) == pytest.approx(1 - 0.9 ** 16) and p_chunk(1.0, 4) == 1.0
    with pytest.raises(ValueError, match="k = 30"):
        xor_fail(30, 8, 0.1)


def test_ec_closed_forms_monte_carlo():
    """Fallback probabilities of EC(k, m) against a seeded Monte-Carlo over the recoverability rule."""
    seed = random.randrange(1 << 32)
    print(f"ec_monte_carlo: seed {seed}")
    gen = np.random.default_rng(seed)
    trials = 20000
    for k, m, p in ((32, 8, 0.15), (8, 2, 0.1)):
        lost = gen.random((trials, k + m)) < p
        mds = (lost.sum(axis=1) > m).mean()
        groups = np.array([[(i % m if i < k else i - k) == g for i in range(k + m)] for g in range(m)])
        xor = ((lost[:, None, :] & groups[None]).sum(axis=2) > 1).any(axis=1).mean()
        for got, want in ((mds, mds_fail(k, m, p)), (xor, xor_fail(k, m, p))):
            assert abs(got - want) <= 4 * math.sqrt(want * (1 - want) / trials) + 1e-9, (k, m, got, want)
        subs = 4
        fallback = (lost.sum(axis=1) > m).reshape(-1, subs).any(axis=1).mean()
        want = p_fallback(mds_fail(k, m, p), subs)
        assert abs(fallback - want) <= 4 * math.sqrt(want * (1 - want) / (trials // subs)) + 1e-9


def sr_brute(chunks, t_inj, rto, rtt, p):
    """App. A summed over every q (small cases)."""
    o, total, q = rto + t_inj, 0.0, 1
    while True:
        prod = 1.0
        for i in range(chunks):
            s = i * t_inj
            prod *= 1 - (1.0 if q <= s else p ** math.ceil((q - s) / o))
        total += 1 - prod
        if q > (chunks - 1) * t_inj and 1 - prod < 1e-18:
            return total + rtt
        q += 1


def test_sr_mean_time():
    """E[T_SR] equals the per-q sum, a seeded Monte-Carlo and the limiting cases."""
    for args in ((1, 1, 4, 3, 0.1), (5, 2, 7, 3, 0.3), (16, 1, 4, 5, 0.05), (3, 4, 0, 2, 0.5), (20, 3, 11, 10, 0.01)):
        assert sr_mean_time(*args) == pytest.approx(sr_brute(*args), rel=1e-12)
    assert sr_mean_time(100, 2, 30, 10, 0.0) == 99 * 2 + 10
    assert sr_mean_time(1, 1, 4, 3, 0.2) == pytest.approx(5 * 0.2 / 0.8 + 3)
    first_round = sum(i + 301 - 63 for i in range(64))      # q in (s_max, s_i + O]: P(X_i >= q) = p
    assert sr_mean_time(64, 1, 300, 100, 1e-9) == pytest.approx(63 + 100 + 1e-9 * first_round, rel=1e-12)
    seed = random.randrange(1 << 32)
    print(f"sr_monte_carlo: seed {seed}")
    gen = np.random.default_rng(seed)
    chunks, t_inj, rto, rtt, p, trials = 40, 2, 30, 10, 0.2, 40000
    y = gen.geometric(1 - p, size=(trials, chunks))
    t = (np.arange(chunks) * t_inj + (rto + t_inj) * (y - 1)).max(axis=1) + rtt
    assert abs(t.mean() - sr_mean_time(chunks, t_inj, rto, rtt, p)) <= 4 * t.std() / math.sqrt(trials)
    assert sr_rto(10, 2) == 30 and ec_timeout(10, 2) == 20
    for bad in ((0, 1, 1, 1, 0.1, "chunks"), (1, 1.5, 1, 1, 0.1, "t_inj"), (1, 1, 1, 1, 1.0, "p"),
                (1, 0, 0, 1, 0.1, "rto")):
        with pytest.raises(ValueError, match=bad[-1]):
            sr_mean_time(*bad[:-1])

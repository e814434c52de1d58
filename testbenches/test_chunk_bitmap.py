"""ChunkBitmap (SDR-RDMA, SPEC section 6): scapy layers, golden model rules and invariants, oracles."""
import collections
import dataclasses
import functools
import itertools
import math
import random

import cocotb
import numpy as np
import pytest
from cocotb.triggers import RisingEdge

from hdl.chunk_bitmap import ChunkBitmap
from models import wire
from models.chunk_bitmap import (
    COUNTERS,
    LATENCY,
    OP_COMPLETE,
    OP_POST,
    OUTCOMES,
    ChunkBitmapModel,
    ChunkBitmapParams,
    Slot,
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


def seeded(name):
    return runner.model_rng(name)


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


def snapshot(model):
    return ([vars(s).copy() for s in model.slots], [list(w) for w in model.pkt_mem],
            [list(w) for w in model.chunk_mem])


# --- scapy layers --------------------------------------------------------------------------------

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


# --- parameters ----------------------------------------------------------------------------------

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


# --- directed rules ------------------------------------------------------------------------------

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


# --- random traffic against an independent reference ---------------------------------------------

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


# --- EC recoverability against real decoding -----------------------------------------------------

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


# --- closed forms --------------------------------------------------------------------------------

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
    await tb.reset(dut)
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
    await tb.reset(dut)
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
    await tb.reset(dut)
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
    await tb.reset(dut)
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
    await tb.reset(dut)
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
    await tb.reset(dut)
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
    await tb.reset(dut)
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


#: One simulation per test: the bitmap memories keep their contents across a reset (as an SRAM
#: does), and every test compares both whole memories with a model that starts from zero.
SOLO = True
PARAMS = {"default": ChunkBitmapParams(),
          "small": ChunkBitmapParams(msg_slots=4, word_bits=32, max_chunk=32, generations=2, channels=2,
                                     slot_words=4, msg_bits=8, user_bits=2, data_bytes=96)}


@runner.parametrize(__name__, PARAMS)
def test_chunk_bitmap(params, testcase, record_property):
    record_property("innet", runner.run(ChunkBitmap, params, __name__, testcase))

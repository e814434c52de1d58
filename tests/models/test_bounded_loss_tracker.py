"""The bounded_loss_tracker golden model alone (``models/bounded_loss_tracker.py``): the tests that need no RTL."""
import collections
import random
import struct

import pytest
from scapy.packet import split_layers

from models import wire
from models.bounded_loss_tracker import (
    COUNTERS,
    PACKET_COUNTERS,
    BoundedLossTrackerModel,
    need_of,
    parse,
)
from models.bounded_loss_tracker_oracle import GilbertElliott, acceptance, binom_cdf, binom_pmf, p_no_nack
from models.headers import DBLP, DBLP_PORT, UDP, Ether, bind_dblp, dblp_packet, dblp_round
from models.packet import beats_of
from testbenches.test_bounded_loss_tracker import (
    TEMPLATE,
    P,
    cfg,
    check_close,
    configure,
    malformed_packets,
    round_bytes,
    visit,
)


class Bench:
    """Feeds packets (one beat per cycle when ready), plays the sinks, checks every cycle."""

    def __init__(self, params=None, ready=None, seed=0, settle=True):
        self.m = BoundedLossTrackerModel(params)
        self.p = self.m.params
        self.queue = collections.deque()
        self.ready = ready or (lambda: (True, True, True))
        self.fwd, self.closes, self.nacks = [], [], []
        self.cycle = self.accepted = 0
        self.instances = {}                  # slot -> idx forwarded in the slot's live round
        self.opens = {}                      # tag -> cycle of the edge that opened it (t_first)
        self.rng = random.Random(seed)
        if settle:                           # let the clear engine wipe every word after reset
            self.run()

    def send(self, *packets):
        for pkt in packets:
            self.queue.extend(beats_of(bytes(pkt), {}, self.p.data_bytes))

    def step(self, cfg=None):
        m = self.m
        beat = self.queue[0] if self.queue else None
        readies = self.ready()
        before = [(s.live, s.closed, s.tag(), m.bitmap[k]) for k, s in enumerate(m.slots)]
        out = m.tick(beat, cfg, *readies)
        if beat is not None and out.i_ready:
            self.queue.popleft()
            self.accepted += beat["last"]
        for taken, reg, sink in zip(readies, out[1:], (self.fwd, self.closes, self.nacks)):
            if reg is not None and taken:
                sink.append((self.cycle, reg))
        self.check(before)
        self.cycle += 1
        return out

    def run(self, cycles=None, until_idle=True, limit=100000):
        """``cycles`` cycles, or until the input queue is empty and nothing is pending."""
        for n in range(limit):
            if cycles is not None and n >= cycles:
                return
            if cycles is None and until_idle and not self.queue and self.idle():
                return
            self.step()
        raise AssertionError("did not settle")

    def idle(self):
        m = self.m
        return (m.fwd is None and m.close is None and m.nack is None and m.search is None
                and not any(s.live or s.dirty for s in m.slots))

    def check(self, before):
        """The SPEC's properties on the model's state and outputs, after every cycle."""
        m, c = self.m, self.m.counters
        assert sum(c[k] for k in PACKET_COUNTERS) == self.accepted, "packet conservation"
        live = sum(s.live for s in m.slots)
        assert c["opened"] == c["full"] + c["bounded"] + c["abort"] + live, "round conservation"
        for name, sink, reg in (("forwarded", self.fwd, m.fwd), ("nacks", self.nacks, m.nack)):
            assert c[name] == len(sink) + (reg is not None), name
        assert c["full"] + c["bounded"] + c["abort"] == len(self.closes) + (m.close is not None)
        for k, s in enumerate(m.slots):
            if s.live:
                assert s.count == bin(m.bitmap[k]).count("1"), "count == popcount(bitmap)"
                assert 1 <= s.count < s.cnt and 1 <= s.need <= s.cnt and m.bitmap[k] >> s.cnt == 0
                assert s.retries <= self.p.retry_max
                assert not s.dirty
        d = m.decision
        if d is not None and d["reason"] == "forwarded":
            was_live, was_closed, tag, bitmap = before[d["slot"]]
            if d["opened"]:
                assert not was_live and not (was_closed and tag == d["tag"]), "opened a closed round"
                self.instances[d["slot"]] = set()
                self.opens[d["tag"]] = self.cycle
            else:
                assert was_live and tag == d["tag"] and not bitmap >> d["idx"] & 1, "forward of a closed round"
            assert d["idx"] not in self.instances[d["slot"]], "(round, idx) forwarded twice"
            self.instances[d["slot"]].add(d["idx"])
        for _, e in self.closes[-1:]:
            check_close(e, self.p)

    def kinds(self):
        return [e["kind"] for _, e in self.closes]


def test_shim_round_trip_every_field():
    rng = random.Random(1)
    for _ in range(200):
        fields = dict(ver=rng.randrange(16), last=rng.randrange(2), retx=rng.randrange(2),
                      fresv=rng.randrange(4), phase=rng.randrange(16), resv=rng.randrange(16),
                      job=rng.randrange(256), round=rng.randrange(1 << 16), idx=rng.randrange(1 << 16),
                      cnt=rng.randrange(1 << 16), resv2=rng.randrange(1 << 16))
        payload = rng.randbytes(rng.randrange(40))
        raw = bytes(dblp_packet(payload=payload, rng=rng, **fields))
        parsed = Ether(raw)
        assert parsed[UDP].dport == DBLP_PORT and 49152 <= parsed[UDP].sport <= 65535
        for name, value in fields.items():
            assert parsed[DBLP].getfieldval(name) == value, name
        assert bytes(parsed[DBLP].payload) == payload
        assert bytes(parsed) == raw
        o = wire.DBLP_OFFSET
        b0, b1, job, rnd, idx, cnt, resv2 = struct.unpack_from(wire.DBLP_STRUCT, raw, o)
        assert (b0 >> 4, b0 & 0xF, b1 >> 4, b1 & 0xF, job, rnd, idx, cnt, resv2) == (
            fields["ver"], fields["last"] << 3 | fields["retx"] << 2 | fields["fresv"], fields["phase"],
            fields["resv"], fields["job"], fields["round"], fields["idx"], fields["cnt"], fields["resv2"])


def test_layout_round_trip():
    """scapy build -> bytes -> ``hdl.headers.DBLP`` fields -> bytes, and the RTL's view on a beat."""
    from amaranth.hdl import Module, Signal
    from amaranth.lib import data
    from amaranth.sim import Simulator

    from hdl import headers
    size = headers.DBLP.size // 8
    assert (size, headers.DBLP_OFFSET, headers.DBLP_HEADER_BYTES) == (
        wire.DBLP_BYTES, wire.DBLP_OFFSET, wire.DBLP_HEADER_BYTES) == (len(DBLP()), 42, 53)
    assert [name for name, _ in headers.DBLP][::-1] == [f.name for f in DBLP.fields_desc]   # wire order
    rng = random.Random(5)
    packets = []
    for _ in range(100):
        fields = {f.name: rng.randrange(1 << headers.DBLP[f.name].width) for f in DBLP.fields_desc}
        raw = bytes(dblp_packet(payload=rng.randbytes(rng.randrange(12)), rng=rng, **fields))
        shim = Ether(raw)[DBLP]
        assert {f.name: shim.getfieldval(f.name) for f in DBLP.fields_desc} == fields
        view = data.Const(headers.DBLP, int.from_bytes(raw[wire.DBLP_OFFSET:wire.DBLP_HEADER_BYTES], "big"))
        assert {name: int(view[name]) for name in fields} == fields
        assert headers.DBLP.const(fields).as_value().value.to_bytes(size, "big") == \
            raw[wire.DBLP_OFFSET:wire.DBLP_HEADER_BYTES]
        packets.append((raw, fields))
    beat = Signal(8 * 64)
    view = headers.wire_view(headers.DBLP, beat, headers.DBLP_OFFSET)
    probes = {name: Signal.like(view[name], name=f"dblp_{name}") for name, _ in headers.DBLP}
    m = Module()
    m.d.comb += [probe.eq(view[name]) for name, probe in probes.items()]
    sim = Simulator(m)

    async def bench(ctx):
        for raw, fields in packets:
            ctx.set(beat, int.from_bytes(raw[:64].ljust(64, b"\0"), "little"))
            assert {name: ctx.get(probe) for name, probe in probes.items()} == fields

    sim.add_testbench(bench)
    sim.run()


def test_shim_wire_constants():
    raw = bytes(dblp_packet(last=1, retx=1, payload=b"xyz"))
    assert len(DBLP()) == wire.DBLP_BYTES
    assert raw.index(b"xyz") == wire.DBLP_HEADER_BYTES == wire.UDP_HEADER_END + wire.DBLP_BYTES
    assert raw[wire.DBLP_OFFSET] & 0xF == wire.DBLP_LAST | wire.DBLP_RETX
    assert raw[wire.DBLP_OFFSET] >> 4 == wire.DBLP_VERSION
    assert 48620 <= DBLP_PORT <= 49150 and DBLP_PORT != wire.INA_PORT


def test_shim_on_another_port_and_builders():
    bind_dblp(50001)
    raw = bytes(dblp_packet(job=9, round=4, idx=2, cnt=3, port=50001))
    assert Ether(raw)[DBLP].job == 9
    split_layers(UDP, DBLP, dport=50001)
    assert DBLP not in Ether(raw)
    pkts = dblp_round(1, 7, 5, phase=2, rng=random.Random(3))
    assert [p[DBLP].idx for p in pkts] == list(range(5)) and [p[DBLP].last for p in pkts] == [0, 0, 0, 0, 1]
    assert len({p[UDP].sport for p in pkts}) > 1 and all(p[UDP].sport >= 49152 for p in pkts)


@pytest.mark.parametrize("kwargs,name", [
    ({"rounds": 12}, "rounds"), ({"e_max": 0}, "e_max"), ({"word_bits": 24}, "word_bits"),
    ({"phases": 17}, "phases"), ({"retry_max": -1}, "retry_max"), ({"deadline": 0}, "deadline"),
    ({"data_bytes": 52}, "data_bytes"), ({"port": 0}, "port"),
    ({"deadline": 300, "deadline_bits": 8}, "deadline"), ({"time_bits": 16}, "time_bits"),
    ({"rounds": 256, "deadline_bits": 8, "deadline": 10}, "rounds"),
])
def test_bad_params_name_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        P(**kwargs)


def test_param_types():
    with pytest.raises(TypeError, match="rounds"):
        P(rounds=4.0)
    with pytest.raises(TypeError, match="params"):
        BoundedLossTrackerModel({"rounds": 4})
    assert P().words == 2 and P(e_max=65, word_bits=8).words == 9


def test_need_of():
    assert need_of(64, 0) == 64 and need_of(64, 26) == 58 and need_of(1, 255) == 1
    assert all(1 <= need_of(e, t) <= e for e in range(1, 300) for t in range(256))


def test_new_packets_forward_and_full_close():
    b = Bench(P())
    b.send(*dblp_round(2, 10, 4, payload_bytes=20))
    b.run()
    assert [e["idx"] for _, e in b.fwd] == [0, 1, 2, 3]
    assert all(e["length"] == 20 and e["job"] == 2 and e["round"] == 10 for _, e in b.fwd)
    assert [e["handle"] for _, e in b.fwd] == [0, 1, 2, 3]
    (_, close), = b.closes
    assert close == {"job": 2, "round": 10, "kind": "FULL", "cnt": 4, "count": 4, "need": 4, "retries": 0}
    assert b.m.counters["forwarded"] == 4 and b.m.counters["full"] == 1 and b.m.counters["opened"] == 1


def test_output_latency_one_cycle():
    b = Bench(P())
    b.send(dblp_packet(job=1, round=3, idx=0, cnt=1))
    out = b.step()
    assert out.i_ready and out.fwd is None and out.close is None
    out = b.step()
    assert out.fwd["idx"] == 0 and out.close["kind"] == "FULL"          # E = 1: FULL at once


def test_multi_beat_packets():
    b = Bench(P(data_bytes=64))
    b.send(*dblp_round(0, 1, 3, payload_bytes=150))
    b.run()
    assert b.kinds() == ["FULL"] and all(e["length"] == 150 for _, e in b.fwd)
    assert b.cycle >= 3 * 4


def test_duplicate_late_and_slot_busy():
    b = Bench(P(rounds=4))
    a = dblp_round(1, 5, 3)
    b.send(a[0], a[0], dblp_packet(job=2, round=5, idx=0, cnt=3), dblp_packet(job=1, round=9, idx=0, cnt=3))
    b.send(a[1], a[2], a[1], dblp_packet(job=1, round=5, idx=0, cnt=3, last=1, retx=1))
    b.run()
    c = b.m.counters
    assert c["dup"] == 1 and c["slot_busy"] == 2 and c["late"] == 2 and c["forwarded"] == 3
    assert b.kinds() == ["FULL"]


def test_duplicate_last_flag_is_ignored():
    b = Bench(P())
    configure(b, cfg(tau=128, deadline=1000))
    b.send(dblp_packet(round=1, idx=0, cnt=4), dblp_packet(round=1, idx=0, cnt=4, last=1),
           dblp_packet(round=1, idx=1, cnt=4))
    b.run(40)
    assert b.kinds() == [] and b.m.counters["dup"] == 1          # count 2 = need, LAST not seen


@pytest.mark.parametrize("name,pkt", list(malformed_packets()), ids=[n for n, _ in malformed_packets()])
def test_malformed(name, pkt):
    b = Bench(P())
    b.send(pkt)
    b.run()
    assert b.m.counters["malformed"] == 1 and b.m.counters["opened"] == 0 and not b.fwd


def test_cnt_or_phase_mismatch_of_live_round_is_malformed():
    b = Bench(P())
    b.send(dblp_packet(round=3, idx=0, cnt=4), dblp_packet(round=3, idx=1, cnt=5),
           dblp_packet(round=3, idx=1, cnt=4, phase=1), dblp_packet(round=3, idx=1, cnt=4))
    b.run(20)
    assert b.m.counters["malformed"] == 2 and b.m.counters["forwarded"] == 2


def test_round_id_wrap():
    b = Bench(P(rounds=4))
    for r in (0xFFFE, 0xFFFF, 0, 1):
        b.send(*dblp_round(7, r, 2))
    b.run()
    assert b.kinds() == ["FULL"] * 4 and [e["round"] for _, e in b.closes] == [0xFFFE, 0xFFFF, 0, 1]
    assert b.m.slots[0xFFFF % 4].round == 0xFFFF and b.m.slots[0].round == 0


def test_bounded_on_last():
    b = Bench(P())
    configure(b, cfg(tau=64, deadline=1000))                  # need = 8 - 2 = 6
    pkts = dblp_round(0, 1, 8)
    b.send(*pkts[:5], pkts[7])                                  # 6 received, LAST among them
    b.run()
    (_, e), = b.closes
    assert e["kind"] == "BOUNDED" and e["count"] == 6 and e["need"] == 6
    assert b.m.counters["loss_accepted"] == 2 and b.m.counters["nacks"] == 0


def test_last_before_bound_does_not_close():
    b = Bench(P())
    configure(b, cfg(tau=64, deadline=1000))                   # need 6
    pkts = dblp_round(0, 1, 8)
    b.send(pkts[7], *pkts[:4])                                  # LAST first, count 5 < 6
    b.run(60)
    assert b.closes == [] and b.m.slots[1].live and b.m.slots[1].last
    b.send(pkts[5])                                             # reaches the bound: closes at once
    b.run(3)
    assert b.kinds() == ["BOUNDED"] and b.closes[0][1]["count"] == 6


@pytest.mark.parametrize("extra", [0, 1])
def test_deadline_hit_exactly(extra):
    """A round below LAST but above its bound closes BOUNDED when age == D at a visit, not a cycle before."""
    b = Bench(P(rounds=8))
    t_open = b.cycle + 1                                          # configure takes one cycle
    v = visit(b, 5, t_open + 20)
    configure(b, cfg(tau=128, deadline=v - t_open + extra))
    b.send(dblp_packet(round=5, idx=0, cnt=2))                   # need 1, no LAST
    b.run(v + 30)
    (at, e), = b.closes
    assert e["kind"] == "BOUNDED" and e["count"] == 1
    assert at == (v + 1 if extra == 0 else v + 8 + 1)            # output the cycle after the edge


def test_nack_first_missing_in_second_word_then_retransmission_completes():
    b = Bench(P(rounds=4, word_bits=8, e_max=20, retry_max=2))
    configure(b, cfg(tau=26, deadline=50))                       # need = 20 - 2 = 18
    pkts = dblp_round(3, 2, 20)
    b.send(*[p for i, p in enumerate(pkts) if i not in (9, 12, 13)])
    while not b.nacks:
        b.step()
    (at, n), = b.nacks
    assert n == {"job": 3, "round": 2, "count": 17, "need": 18, "missing": 9, "retries": 1}
    b.send(dblp_packet(job=3, round=2, idx=9, cnt=20, retx=1))
    b.run()
    assert b.kinds() == ["BOUNDED"] and b.closes[0][1]["count"] == 18 and b.m.counters["nacks"] == 1


def test_nack_search_timing_and_rearm():
    """Search: one word per cycle from word 0; re-armed at the NACK's edge; ABORT after retry_max."""
    b = Bench(P(rounds=4, word_bits=8, e_max=32, retry_max=2))
    configure(b, cfg(tau=0, deadline=40))
    t_open = b.cycle
    b.send(*[p for p in dblp_round(0, 1, 32) if p[DBLP].idx != 25])
    b.run(400)
    first = visit(b, 1, t_open + 40)
    nack_edges = [at - 1 for at, _ in b.nacks]
    assert nack_edges[0] == first + 1 + 3                         # detect, then words 0..3
    assert nack_edges[1] == visit(b, 1, nack_edges[0] + 40) + 4
    assert [n["missing"] for _, n in b.nacks] == [25, 25] and [n["retries"] for _, n in b.nacks] == [1, 2]
    (at, e), = b.closes
    assert e["kind"] == "ABORT" and e["retries"] == 2 and at == visit(b, 1, nack_edges[1] + 40) + 1
    assert b.m.counters["loss_aborted"] == 1 and b.m.counters["abort"] == 1


def test_retry_max_zero_aborts_at_first_deadline():
    b = Bench(P(retry_max=0))
    configure(b, cfg(tau=0, deadline=30))
    b.send(dblp_packet(round=0, idx=0, cnt=3))
    b.run()
    assert b.kinds() == ["ABORT"] and b.nacks == []


def test_tau_zero_is_a_reliable_tracker():
    """tau = 0: never BOUNDED; with retransmission on every NACK each round closes FULL, each packet once."""
    rng = random.Random(5)
    b = Bench(P(rounds=8, retry_max=255, deadline=60))
    sent, seen = {}, 0
    for batch in range(3):                                       # 8 rounds at a time: one per slot
        for r in range(8 * batch, 8 * batch + 8):
            sent[r] = dblp_round(1, r, rng.randrange(1, 40), rng=rng)
            b.send(*[p for p in sent[r] if p[DBLP].idx == 0 or rng.random() > 0.2])   # the round is seen
        for _ in range(5000):
            b.step()
            for _, n in b.nacks[seen:]:
                b.send(*[p for p in sent[n["round"]] if p[DBLP].idx >= n["missing"]])
            seen = len(b.nacks)
            if len(b.closes) == 8 * batch + 8:
                break
    b.run()
    assert b.kinds() == ["FULL"] * 24 and b.m.counters["nacks"] > 0
    assert b.m.counters["forwarded"] == sum(len(v) for v in sent.values())
    got = collections.Counter((e["round"], e["idx"]) for _, e in b.fwd)
    assert max(got.values()) == 1 and b.m.counters["loss_accepted"] == 0


def test_large_tau():
    b = Bench(P())
    configure(b, cfg(tau=255, deadline=1000))                   # need = 64 - 63 = 1
    b.send(dblp_packet(round=4, idx=63, cnt=64, last=1))
    b.run()
    (_, e), = b.closes
    assert e["kind"] == "BOUNDED" and e["need"] == 1 and b.m.counters["loss_accepted"] == 63


def test_phase_table_and_bad_config():
    b = Bench(P())
    configure(b, cfg(phase=2, tau=128, deadline=500), cfg(phase=4, tau=1), cfg(tau=256), cfg(deadline=0),
              cfg(deadline=1 << 16))
    assert b.m.counters["cfg_writes"] == 1 and b.m.counters["cfg_rejected"] == 4
    assert b.m.table == [(0, 256), (0, 256), (128, 500), (0, 256)]
    b.send(dblp_packet(round=1, idx=0, cnt=10, phase=2), dblp_packet(round=2, idx=0, cnt=10, phase=0))
    b.run(4)
    assert b.m.slots[1].need == 5 and b.m.slots[2].need == 10


def test_clear_engine_back_pressures_reuse():
    """A new round on a dirty slot waits (never dropped) until ceil(E/W) words are wiped."""
    b = Bench(P(rounds=2, word_bits=8, e_max=64))
    assert b.cycle == 16 and all(v == 0 for v in b.m.bitmap)
    b.send(*dblp_round(0, 0, 40), *dblp_round(0, 2, 3))
    stalls = 0
    for _ in range(80):
        out = b.step()
        stalls += bool(b.queue) and not out.i_ready
    assert b.kinds() == ["FULL", "FULL"] and b.m.counters["forwarded"] == 43
    assert stalls == 5                                           # wipe of 5 words, started at the close edge+1


def test_reset_mid_traffic_wipes_every_word():
    b = Bench(P(rounds=4, word_bits=16, e_max=64))
    b.run()
    b.send(*dblp_round(0, 1, 40)[:30], *dblp_round(0, 2, 64)[:20])
    b.run(40)
    assert any(b.m.bitmap)
    b.m.reset()
    b.accepted, b.fwd, b.closes, b.nacks, b.queue = 0, [], [], [], collections.deque()
    assert all(s.dirty and not s.live for s in b.m.slots)
    b.send(dblp_packet(round=1, idx=0, cnt=1))
    b.run()
    assert not any(b.m.bitmap) and b.kinds() == ["FULL"]
    assert b.accepted == 1


def test_output_back_pressure_stalls_last_beats_only():
    ready = [True, True, True]
    b = Bench(P(), ready=lambda: tuple(ready))
    b.send(*dblp_round(0, 1, 4))
    b.step(), b.step()
    ready[0] = False
    for _ in range(10):
        out = b.step()
    assert not out.i_ready and out.fwd is not None and len(b.queue) > 0
    ready[0] = True
    b.run()
    assert b.m.counters["forwarded"] == 4 and b.kinds() == ["FULL"]


def test_scanner_target_blocks_its_slot_and_close_stall_holds_scanner():
    ready = [True, False, True]
    b = Bench(P(rounds=4), ready=lambda: tuple(ready))
    configure(b, cfg(tau=128, deadline=20))
    b.send(dblp_packet(round=1, idx=0, cnt=2), dblp_packet(round=2, idx=0, cnt=2))
    b.run(60)
    assert b.m.close is not None and b.m.scan == 2                # round 1 closed, held on slot 2
    b.send(dblp_packet(round=2, idx=1, cnt=2))
    for _ in range(5):
        assert not b.step().i_ready                              # slot 2 is the target
    ready[1] = True
    b.run()
    assert b.kinds() == ["BOUNDED", "BOUNDED"]
    assert b.m.counters["late"] == 1                              # round 2 was closed BOUNDED first


def test_line_rate_one_packet_per_cycle():
    b = Bench(P(rounds=16))
    for r in range(16):
        b.send(*dblp_round(r % 4, r, 8))
    b.run()
    assert b.kinds() == ["FULL"] * 16
    start = b.fwd[0][0] - 1
    assert [at for at, _ in b.fwd] == list(range(start + 1, start + 129))     # no bubble, latency 1


def test_counters_saturate():
    b = Bench(P(counter_bits=2))
    pkt = dblp_packet(round=1, idx=0, cnt=2)
    b.send(pkt, *[pkt] * 5)
    for _ in range(30):
        b.m.tick(b.queue.popleft() if b.queue else None)
    assert b.m.counters["dup"] == 3 and b.m.counters["forwarded"] == 1


def random_traffic(rng, b, rounds, jobs=3, loss=0.1, dup=0.05, garbage=0.03):
    pkts = []
    for r in range(rounds):
        job, rnd = rng.randrange(jobs), rng.randrange(1 << 16) if rng.random() < 0.2 else r % 40
        cnt = rng.choice([1, 2, rng.randrange(1, b.p.e_max + 1)])
        rp = [p for p in dblp_round(job, rnd, cnt, phase=rng.randrange(b.p.phases), rng=rng, payload_bytes=8)
              if rng.random() > loss]
        rp += [rng.choice(rp) for _ in range(len(rp)) if rp and rng.random() < dup]
        rng.shuffle(rp) if rng.random() < 0.5 else None
        if rng.random() < garbage:
            rp.append(dblp_packet(cnt=0))
        pkts += rp
    return pkts


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_random_invariants(seed):
    print(f"seed {seed}")
    rng = random.Random(seed)
    params = P(rounds=rng.choice([2, 4, 8]), e_max=rng.choice([1, 16, 40]), word_bits=rng.choice([8, 16]),
               retry_max=rng.randrange(3), deadline=rng.randrange(10, 80), phases=2,
               data_bytes=rng.choice([53, 64]))
    b = Bench(params, ready=lambda: tuple(rng.random() < 0.8 for _ in range(3)), seed=seed)
    b.send(*random_traffic(rng, b, 60))
    for _ in range(6000):
        row = cfg(rng.randrange(3), rng.randrange(256), rng.randrange(1, 60)) if rng.random() < 0.01 else None
        b.step(cfg=row)
        for _, n in b.nacks[-1:]:
            assert n["count"] < n["need"] and n["retries"] <= params.retry_max
        if not b.queue and b.idle():
            break
    for _, e in b.closes:
        check_close(e, params)
    assert b.idle() and not b.queue
    assert sum(b.m.counters[k] for k in PACKET_COUNTERS) == b.accepted > 0
    assert set(b.m.counters()) == set(COUNTERS)
    print(b.m.counters())


def test_binomial_closed_form_matches_enumeration():
    from itertools import product
    for cnt, p in ((1, 0.3), (5, 0.1), (8, 0.45)):
        for need in range(1, cnt + 1):
            brute = sum(p ** sum(lost) * (1 - p) ** (cnt - sum(lost))
                        for lost in product((0, 1), repeat=cnt) if sum(lost) <= cnt - need)
            assert p_no_nack(cnt, need, p) == pytest.approx(brute, rel=1e-12, abs=1e-15)
    assert binom_cdf(700, 1000, 0.5) == pytest.approx(1.0) and binom_cdf(300, 1000, 0.5) < 1e-30
    assert sum(binom_pmf(k, 50, 0.2) for k in range(51)) == pytest.approx(1.0)
    assert p_no_nack(10, 10, 0.0) == 1.0 and p_no_nack(10, 10, 1.0) == 0.0
    with pytest.raises(ValueError, match="need"):
        p_no_nack(4, 5, 0.1)
    with pytest.raises(ValueError, match="p ="):
        p_no_nack(4, 2, 1.5)


def test_acceptance_interval():
    lo, hi = acceptance(400, 0.8, alpha=1e-3)
    assert lo < 0.8 < hi and hi - lo < 0.15
    assert binom_cdf(round(lo * 400) - 1, 400, 0.8) <= 5e-4 and 1 - binom_cdf(round(hi * 400), 400, 0.8) <= 5e-4
    assert acceptance(10, 1.0) == (1.0, 1.0) and acceptance(10, 0.0) == (0.0, 0.0)
    with pytest.raises(ValueError, match="n ="):
        acceptance(0, 0.5)


def test_gilbert_elliott():
    ge = GilbertElliott(0.01, 0.2, loss_good=0.001, loss_bad=0.8, seed=7)
    draws = [ge.lost() for _ in range(100000)]
    assert sum(draws) / len(draws) == pytest.approx(ge.mean_loss, rel=0.15)
    runs, run = [], 0
    for lost in draws:
        if lost:
            run += 1
        elif run:
            runs.append(run)
            run = 0
    assert sum(runs) / len(runs) > 2                              # bursty: runs longer than i.i.d.
    assert [GilbertElliott(0.1, 0.1, seed=3).lost() for _ in range(5)] == \
        [GilbertElliott(0.1, 0.1, seed=3).lost() for _ in range(5)]
    with pytest.raises(ValueError, match="p_bg"):
        GilbertElliott(0.1, 1.5)


def test_model_monte_carlo_inside_binomial_interval():
    """Rounds of E packets with i.i.d. loss p through the model: the fraction closing without a NACK."""
    seed = 2026
    print(f"seed {seed}")
    rng = random.Random(seed)
    cnt, tau, loss, n = 24, 32, 0.1, 400                          # need = 24 - 3 = 21
    b = Bench(P(rounds=16, e_max=32, retry_max=1, deadline=60))
    configure(b, cfg(tau=tau, deadline=60))
    for r in range(n):
        while b.m.slots[r % 16].live or b.m.slots[r % 16].dirty:
            b.step()
        b.send(*[p for p in round_bytes(0, r, cnt) if rng.random() >= loss])
        while b.queue:
            b.step()
    b.run()
    nacked = {n["round"] for _, n in b.nacks}
    assert b.m.counters["opened"] == n and b.m.counters["abort"] == len(nacked)    # no retransmission
    assert {e["round"] for _, e in b.closes if e["kind"] != "ABORT"}.isdisjoint(nacked)
    fraction = 1 - len(nacked) / n
    prob = p_no_nack(cnt, need_of(cnt, tau), loss)
    lo, hi = acceptance(n, prob, alpha=1e-3)
    print(f"no-NACK fraction {fraction:.3f}, closed form {prob:.3f}, interval [{lo:.3f}, {hi:.3f}]")
    assert lo <= fraction <= hi


def test_round_bytes_template_equals_scapy():
    sport = Ether(TEMPLATE)[UDP].sport
    scapy = [bytes(p) for p in dblp_round(3, 9, 4, phase=1, payload_bytes=4, sport=sport)]
    assert [r[:wire.DBLP_HEADER_BYTES] for r in round_bytes(3, 9, 4, phase=1)] == \
        [r[:wire.DBLP_HEADER_BYTES] for r in scapy]


@pytest.mark.parametrize("seed", [21, 22])
def test_gilbert_elliott_rounds_close_in_time_and_within_tau(seed):
    """Burst loss, NACK-driven retransmission, outputs always ready: every round closes within
    (retry_max+1) deadlines plus the scan time, and no close declares more than tau lost."""
    print(f"seed {seed}")
    rng = random.Random(seed)
    params = P(rounds=8, e_max=48, word_bits=16, retry_max=2, deadline=120)
    b = Bench(params)
    taus = [rng.randrange(0, 80) for _ in range(params.phases)]
    configure(b, *[cfg(ph, t, 120) for ph, t in enumerate(taus)])
    ge = GilbertElliott(0.03, 0.2, loss_good=0.01, loss_bad=0.9, seed=seed)
    sent, seen = {}, 0
    bound = (params.retry_max + 1) * (params.deadline + params.rounds * (params.words + 2))
    for r in range(40):
        while r >= 8 and r - 8 not in {e["round"] for _, e in b.closes} or b.m.slots[r % 8].dirty:
            b.step()
            for _, n in b.nacks[seen:]:
                b.send(*[p for p in sent[n["round"]] if p[DBLP].idx >= n["missing"] and not ge.lost()])
            seen = len(b.nacks)
        sent[r] = round_bytes(1, r, rng.randrange(1, 49), phase=rng.randrange(params.phases))
        sent[r] = [Ether(p) for p in sent[r]]
        b.send(*[p for p in sent[r] if p[DBLP].idx == 0 or not ge.lost()])
    b.run()
    for at, e in b.closes:
        assert at - 1 - b.opens[1, e["round"]] <= bound
        tau = taus[sent[e["round"]][0][DBLP].phase]
        assert e["cnt"] - e["count"] <= tau * e["cnt"] >> 8 or e["kind"] == "ABORT"
    assert len(b.closes) == 40 and b.m.counters["nacks"] > 0 and b.m.counters["slot_busy"] == 0


def test_parse_fields():
    p = P()
    raw = bytes(dblp_packet(job=5, round=300, idx=6, cnt=7, phase=3, last=1, retx=1, payload=b"abc"))
    assert parse(raw[:wire.DBLP_HEADER_BYTES], len(raw), p) == {
        "job": 5, "round": 300, "idx": 6, "cnt": 7, "phase": 3, "last": True, "retx": True, "length": 3}
    assert parse(raw[:wire.DBLP_HEADER_BYTES], wire.DBLP_HEADER_BYTES - 1, p) is None
    assert parse(raw, len(raw), p.replace(port=4791)) is None


def test_reordered_round_closes_full_in_arrival_order():
    rng = random.Random(4)
    pkts = dblp_round(2, 77, 12)
    rng.shuffle(pkts)
    b = Bench(P())
    b.send(*pkts)
    b.run()
    assert [e["idx"] for _, e in b.fwd] == [p[DBLP].idx for p in pkts] and b.kinds() == ["FULL"]


def test_nack_back_pressure_holds_search_and_its_slot():
    ready = [True, True, False]
    b = Bench(P(rounds=4, retry_max=2), ready=lambda: tuple(ready))
    configure(b, cfg(tau=0, deadline=20))
    b.send(dblp_packet(round=1, idx=0, cnt=3))
    b.run(30)                                                    # first NACK sits in the register
    assert b.m.nack["missing"] == 1 and b.m.counters["nacks"] == 1 and b.m.search is None
    b.run(40)                                                    # second deadline: search holds
    assert b.m.search == (1, 0) and b.m.counters["nacks"] == 1 and b.m.slots[1].live
    b.send(dblp_packet(round=1, idx=1, cnt=3), dblp_packet(round=1, idx=2, cnt=3))
    out = b.step()
    assert b.queue and not out.i_ready                           # round 1's packets wait meanwhile
    ready[2] = True
    b.run()
    assert [n["retries"] for _, n in b.nacks] == [1, 2] and b.kinds() == ["FULL"]

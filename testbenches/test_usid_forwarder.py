"""MRC SRv6 uSID forwarder: scapy layers, golden model rules of SPEC section 5, seeded properties; the
RTL under Verilator in lockstep with the model, result by result (verdict, egress port, queue, length,
the header bytes the deparser sends).
"""
import collections
import itertools
import os
import random
import socket

import cocotb
import pytest
from amaranth.lib import data
from cocotb.triggers import RisingEdge

from hdl import headers
from hdl.usid_forwarder import HDR_BYTES, UsidForwarder
from models import wire
from models.headers import BTH, UDP, Ether, IPv6, Raw, UsidDA, ev_of, ev_stripes, mrc_packet, usid_address, usid_parts
from models.usid_forwarder import (
    COUNTERS,
    VERDICTS,
    UsidForwarderModel,
    UsidForwarderParams,
    is_mrc_data,
    lfsr_next,
    mark_probability,
    shift_da,
)
from testbenches import runner, tb

LOC = 0xFC00_0000
MY = 0x0100
PORTS = 8
IDLE = [0] * PORTS
ETH = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")


@pytest.fixture
def rng():
    return runner.model_rng(os.environ.get("PYTEST_CURRENT_TEST", "usid_forwarder"))


def key(usid, loc=LOC):
    return loc << 16 | usid


def fwd(routes=(), **kw):
    m = UsidForwarderModel(UsidForwarderParams(**kw))
    for k, port, *decap in routes:
        m.add_route(k, port, *decap)
    return m


def pkt(usids, payload=b"p" * 64, **kw):
    return Ether(bytes(mrc_packet(da=usid_address(LOC, usids), payload=payload, **kw)))


def da_int(address):
    return int.from_bytes(socket.inet_pton(socket.AF_INET6, address), "big")


# --- scapy layers and wire constants -----------------------------------------------------------------

def test_wire_constants_match_scapy():
    p = pkt([MY, 0x200], payload=b"")
    raw = bytes(p)
    assert len(IPv6()) == wire.IPV6_BYTES and raw[12:14] == wire.ETHERTYPE_IPV6.to_bytes(2, "big")
    assert raw[wire.OUTER_OFFSET] >> 4 == 6 and raw[wire.INNER_OFFSET] >> 4 == 6
    assert raw[wire.OUTER_OFFSET + wire.IPV6_NH_AT] == wire.NH_IPV6 == 41
    assert raw[wire.INNER_OFFSET + wire.IPV6_NH_AT] == wire.NH_UDP
    assert raw[wire.OUTER_OFFSET + wire.IPV6_HLIM_AT] == p[IPv6].hlim
    assert raw[wire.OUTER_OFFSET + wire.IPV6_DST_AT:][:16] == socket.inet_pton(socket.AF_INET6, p[IPv6].dst)
    assert raw[wire.OUTER_OFFSET + wire.IPV6_SRC_AT:][:16] == socket.inet_pton(socket.AF_INET6, p[IPv6].src)
    assert int.from_bytes(raw[wire.MRC_UDP_OFFSET + 2:][:2], "big") == wire.ROCEV2_PORT
    assert raw[wire.MRC_BTH_OFFSET] == p[BTH].opcode
    assert len(raw) == wire.MRC_HEADER_BYTES + wire.ICRC_BYTES
    assert len(mrc_packet(outer=False)) == wire.MRC_INNER_HEADER_BYTES + wire.ICRC_BYTES
    assert wire.MRC_HEADER_BYTES == 114 and wire.TRIM_LEN == 118


def test_usid_da_round_trip():
    da = UsidDA(locator=0xFC00_0102, u0=1, u1=0x2345, u2=0xFFFF, u3=4, u4=5, u5=6)
    raw = bytes(da)
    assert len(raw) == 16
    back = UsidDA(raw)
    assert [back.locator] + [getattr(back, f"u{i}") for i in range(6)] == [0xFC00_0102, 1, 0x2345, 0xFFFF, 4, 5, 6]
    assert usid_address(0xFC00_0102, [1, 0x2345]) == "fc00:102:1:2345::"
    assert usid_parts("fc00:102:1:2345::") == (0xFC00_0102, [1, 0x2345, 0, 0, 0, 0])
    assert usid_parts(raw) == usid_parts(int.from_bytes(raw, "big")) == (0xFC00_0102, [1, 0x2345, 0xFFFF, 4, 5, 6])
    with pytest.raises(ValueError, match="usids"):
        usid_address(LOC, [1] * 7)


def test_mrc_packet_round_trip_every_field():
    p = mrc_packet(ev=0xABCD_E123, da=usid_address(LOC, [MY, 7]), src="fd00::a", dst="fd00::b", qp=0x1234,
                   psn=0xFEDCBA, op=0x0A, payload=b"xyz", dscp=12, ecn=wire.ECT1, hlim=9)
    q = Ether(bytes(p))
    outer, inner = q[IPv6], q[IPv6].payload
    assert q.type == wire.ETHERTYPE_IPV6 and isinstance(inner, IPv6)
    assert (outer.version, outer.tc, outer.fl, outer.nh, outer.hlim, outer.src, outer.dst, outer.plen) == (
        6, 12 << 2 | wire.ECT1, 0xABCD, 41, 9, "fd00::a", "fc00:0:100:7::", len(bytes(inner)))
    assert (inner.tc, inner.fl, inner.nh, inner.hlim, inner.src, inner.dst) == (
        12 << 2 | wire.ECT1, 0xABCD, 17, 64, "fd00::a", "fd00::b")
    assert (q[UDP].sport, q[UDP].dport, q[UDP].chksum, q[UDP].len) == (0xE123, 4791, 0, 8 + 12 + 3 + 4)
    assert (q[BTH].opcode, q[BTH].dqpn, q[BTH].psn, q[Raw].load) == (0x0A, 0x1234, 0xFEDCBA, b"xyz")
    assert bytes(q) == bytes(p)
    assert q[BTH].icrc == Ether(bytes(mrc_packet(ev=0xABCD_E123, src="fd00::a", dst="fd00::b", qp=0x1234,
                                                 psn=0xFEDCBA, op=0x0A, payload=b"xyz", dscp=12,
                                                 ecn=wire.ECT1)))[BTH].icrc   # the ICRC ignores the outer


def test_ev_striping_round_trip(rng):
    for ev in [0, 0xFFFF_FFFF, 0x0001_0000, 0x0000_FFFF] + [rng.getrandbits(32) for _ in range(50)]:
        sport, label = ev_stripes(ev)
        assert sport == ev & 0xFFFF and label == ev >> 16 and label < 1 << wire.FLOW_LABEL_BITS
        for outer in (True, False):
            assert ev_of(Ether(bytes(mrc_packet(ev=ev, outer=outer)))) == ev
    with pytest.raises(ValueError, match="ev"):
        ev_stripes(1 << 32)


def test_shift_da_is_locator_and_usids_shifted(rng):
    for _ in range(200):
        loc, us = rng.getrandbits(32), [rng.getrandbits(16) for _ in range(6)]
        shifted = shift_da(da_int(usid_address(loc, us)))
        assert usid_parts(shifted) == (loc, us[1:] + [0])


# --- forwarding -----------------------------------------------------------------------------------

def test_shift_and_lookup():
    m = fwd([(key(0x200), 3)])
    p = pkt([MY, 0x200, 0x300], ecn=wire.NOT_ECT)
    out = m.forward(p, 0, IDLE, IDLE)
    exp = p.copy()
    exp[IPv6].hlim -= 1
    exp[IPv6].dst = usid_address(LOC, [0x200, 0x300])
    assert out == {"verdict": "forwarded", "port": 3, "queue": "data", "packet": bytes(exp), "marked": False,
                   "decap": False}


def test_unshifted_lookup_and_misses():
    m = fwd([(key(0x200), 3), (key(0x700), 6)])
    p = pkt([0x700, 0x200])                           # not my uSID: the unshifted DA is looked up
    out = m.forward(p, 1, IDLE, IDLE)
    assert out["verdict"] == "forwarded" and out["port"] == 6
    assert Ether(out["packet"])[IPv6].dst == p[IPv6].dst
    assert m.forward(pkt([MY, 0x900]), 0, IDLE, IDLE)["verdict"] == "no_route"       # shifted miss
    assert m.forward(pkt([0x900, 0x200]), 0, IDLE, IDLE)["verdict"] == "no_route"    # unshifted miss
    assert m.forward(pkt([MY, 0x700]), 0, IDLE, IDLE)["port"] == 6
    other = Ether(bytes(mrc_packet(da=usid_address(LOC + 1, [MY, 0x200]))))           # another locator
    assert m.forward(other, 0, IDLE, IDLE)["verdict"] == "no_route"
    assert m.counters["forwarded"] == 2 and m.counters["no_route"] == 3


def test_local_function_decapsulates():
    m = fwd([(key(0x0F0), 5, True)])
    p = pkt([MY, 0x0F0], ev=0x1234_C001, hlim=3, psn=77)
    out = m.forward(p, 2, IDLE, IDLE)
    exp = Ether(bytes(mrc_packet(ev=0x1234_C001, psn=77, payload=b"p" * 64, outer=False)))
    assert out["verdict"] == "forwarded" and out["decap"] and out["port"] == 5
    assert out["packet"] == bytes(exp) and m.counters["decapsulated"] == 1
    # RFC 6040: an outer CE reaches an ECT inner; a Not-ECT inner stays Not-ECT.
    ce = pkt([MY, 0x0F0])
    ce[IPv6].tc = wire.DSCP_MRC_DATA << 2 | wire.ECN_CE
    assert Ether(m.forward(ce, 0, IDLE, IDLE)["packet"])[IPv6].tc == wire.DSCP_MRC_DATA << 2 | wire.ECN_CE
    ce[IPv6].payload.tc = wire.DSCP_MRC_DATA << 2 | wire.NOT_ECT
    assert Ether(m.forward(ce, 0, IDLE, IDLE)["packet"])[IPv6].tc == wire.DSCP_MRC_DATA << 2
    # A trim mark of an upstream hop reaches the inner DSCP (and the priority queue).
    trimmed = pkt([MY, 0x0F0])
    trimmed[IPv6].tc = wire.DSCP_TRIM << 2 | wire.ECT0
    out = m.forward(trimmed, 0, IDLE, IDLE)
    assert out["verdict"] == "trim_forwarded" and out["queue"] == "prio"
    assert Ether(out["packet"])[IPv6].tc == wire.DSCP_TRIM << 2 | wire.ECT0


def test_hop_limit_expiry():
    m = fwd([(key(0x200), 3)])
    for hlim, verdict in ((0, "hop_limit"), (1, "hop_limit"), (2, "forwarded"), (255, "forwarded")):
        out = m.forward(pkt([MY, 0x200], hlim=hlim), 0, IDLE, IDLE)
        assert out["verdict"] == verdict
        if out["packet"]:
            assert Ether(out["packet"])[IPv6].hlim == hlim - 1
    assert m.forward(pkt([MY, 0x900], hlim=1), 0, IDLE, IDLE)["verdict"] == "hop_limit"   # before the lookup


# --- ECN ----------------------------------------------------------------------------------------------

def test_lfsr_is_maximal():
    s, seen = 0xACE1, set()
    for _ in range(65535):
        seen.add(s)
        s = lfsr_next(s)
    assert s == 0xACE1 and len(seen) == 65535 and 0 not in seen


@pytest.mark.parametrize("span, k", [(4, 1), (4, 7), (4, 15), (2, 3), (0, 1)])
def test_ecn_ramp_matches_closed_form_over_an_lfsr_period(span, k):
    """Over one LFSR period the marks at depth kmin + k are the non-zero states whose top ``span``
    bits are below k: k * 2**(16 - span) - 1."""
    kmin = 10
    m = fwd([(key(0x200), 1)], ecn_kmin=kmin, ecn_span_log2=span, data_capacity=100)
    raw = bytes(pkt([MY, 0x200], payload=b""))
    depth = [kmin + k] * PORTS
    marks = sum(m.forward(raw, 0, depth, IDLE)["marked"] for _ in range(65535))
    assert marks == k * (1 << (16 - span)) - 1 == m.counters["ce_marked"]
    assert marks == round(mark_probability(kmin + k, m.params) * 65535)


def test_mark_probability_oracle():
    p = UsidForwarderParams(ecn_kmin=10, ecn_span_log2=4)
    assert mark_probability(0, p) == mark_probability(10, p) == 0
    assert mark_probability(11, p) == pytest.approx(1 / 16, abs=1e-4)
    assert mark_probability(18, p) == pytest.approx(0.5, abs=1e-4)
    assert mark_probability(26, p) == mark_probability(1000, p) == 1


def test_ecn_marks_only_ect_off_the_last_hop():
    m = fwd([(key(0x200), 1), (key(0x300), 2)], last_hop=1 << 2, ecn_kmin=4, ecn_span_log2=2)
    full = [4 + 4] * PORTS                             # past the ramp: probability 1
    low = [4] * PORTS                                  # at kmin: probability 0
    out = m.forward(pkt([MY, 0x200]), 0, full, IDLE)
    assert out["marked"] and Ether(out["packet"])[IPv6].tc == wire.DSCP_MRC_DATA << 2 | wire.ECN_CE
    assert Ether(out["packet"])[IPv6].payload.tc == wire.DSCP_MRC_DATA << 2 | wire.ECT0   # outer only
    assert m.forward(pkt([MY, 0x200], ecn=wire.ECT1), 0, full, IDLE)["marked"]
    assert not m.forward(pkt([MY, 0x300]), 0, full, IDLE)["marked"]                       # last hop
    assert not m.forward(pkt([MY, 0x200], ecn=wire.NOT_ECT), 0, full, IDLE)["marked"]
    out = m.forward(pkt([MY, 0x200], ecn=wire.ECN_CE), 0, full, IDLE)
    assert not out["marked"] and Ether(out["packet"])[IPv6].tc & 3 == wire.ECN_CE            # stays CE
    assert not any(m.forward(pkt([MY, 0x200]), 0, low, IDLE)["marked"] for _ in range(50))
    assert m.counters["ce_marked"] == 2


# --- trimming -----------------------------------------------------------------------------------------

def test_trim_on_a_full_data_queue():
    m = fwd([(key(0x200), 1), (key(0x300), 2)], last_hop=1 << 2, data_capacity=8, prio_capacity=2)
    full = [8] * PORTS
    p = pkt([MY, 0x200], payload=bytes(range(200)), psn=0x4242)
    out = m.forward(p, 0, full, IDLE)
    q = Ether(out["packet"])
    assert out["verdict"] == "trimmed" and out["queue"] == "prio" and out["port"] == 1 and not out["marked"]
    assert len(out["packet"]) == wire.TRIM_LEN
    assert q[IPv6].tc == wire.DSCP_TRIM << 2 | wire.ECT0 and q[IPv6].hlim == 63
    assert q[IPv6].plen == wire.TRIM_LEN - 54 and q[IPv6].payload.plen == wire.TRIM_LEN - 94
    assert q[UDP].len == wire.TRIM_LEN - 94 and q[BTH].psn == 0x4242
    assert bytes(q) == out["packet"]                  # every length consistent: scapy rebuilds the same bytes
    # On a last-hop port the other trim DSCP; a full priority queue drops.
    out = m.forward(pkt([MY, 0x300], payload=bytes(200)), 0, full, IDLE[:2] + [1] + IDLE[3:])
    assert out["port"] == 2 and out["verdict"] == "trimmed"
    assert Ether(out["packet"])[IPv6].tc >> 2 == wire.DSCP_TRIM_LAST
    assert m.forward(p, 0, full, [2] * PORTS)["verdict"] == "trim_overflow"
    # A packet already within TRIM_LEN keeps its length.
    short = pkt([MY, 0x200], payload=b"")
    out = m.forward(short, 0, full, IDLE)
    assert out["verdict"] == "trimmed" and len(out["packet"]) == len(bytes(short)) == wire.TRIM_LEN
    tiny = UsidForwarderParams(trim_len=wire.MRC_HEADER_BYTES)
    m2 = fwd([(key(0x200), 1)], trim_len=tiny.trim_len, data_capacity=8)
    assert len(m2.forward(p, 0, full, IDLE)["packet"]) == wire.MRC_HEADER_BYTES
    assert m.counters["trimmed"] == 3 and m.counters["trim_overflow"] == 1


def test_only_mrc_data_is_trimmed():
    m = fwd([(key(0x200), 1)], data_capacity=8)
    full = [8] * PORTS
    ack = pkt([MY, 0x200], op=0x11)                    # RC ACKNOWLEDGE: not data
    assert not is_mrc_data(bytes(ack)) and is_mrc_data(bytes(pkt([MY, 0x200])))
    assert m.forward(ack, 0, full, IDLE)["verdict"] == "data_overflow"
    other = pkt([MY, 0x200])
    other[UDP].dport = 4792
    assert m.forward(Ether(bytes(other)), 0, full, IDLE)["verdict"] == "data_overflow"
    assert m.forward(ack, 0, [7] * PORTS, IDLE)["verdict"] == "forwarded"
    # Already trimmed upstream: the priority queue, whatever the data queue.
    t = pkt([MY, 0x200], dscp=wire.DSCP_TRIM_LAST)
    assert m.forward(t, 0, IDLE, IDLE)["verdict"] == "trim_forwarded"
    assert m.forward(t, 0, IDLE, [16] * PORTS)["verdict"] == "trim_overflow"


def test_trim_after_decapsulation():
    m = fwd([(key(0x0F0), 4, True)], last_hop=1 << 4, data_capacity=8)
    out = m.forward(pkt([MY, 0x0F0], payload=bytes(300)), 0, [8] * PORTS, IDLE)
    q = Ether(out["packet"])
    assert out["verdict"] == "trimmed" and out["decap"] and len(out["packet"]) == wire.TRIM_LEN
    assert not isinstance(q[IPv6].payload, IPv6) and q[IPv6].tc >> 2 == wire.DSCP_TRIM_LAST
    assert q[IPv6].plen == wire.TRIM_LEN - 54 and q[UDP].len == wire.TRIM_LEN - 54
    assert bytes(q) == out["packet"]


# --- bad input ---------------------------------------------------------------------------------------

def test_malformed_and_unknown_next_header():
    m = fwd([(key(0x200), 1)])
    good = bytes(pkt([MY, 0x200]))
    cases = [
        (good[:53], "malformed"),                                      # no full outer IPv6
        (good[:-1], "malformed"),                                      # truncated: payload length too big
        (good + b"\0", "malformed"),                                   # trailing bytes
        (good[:12] + b"\x08\x00" + good[14:], "malformed"),            # EtherType IPv4
        (good[:14] + b"\x45" + good[15:], "malformed"),                # outer version 4
        (good[:54] + b"\x45" + good[55:], "malformed"),                # inner version 4
        (bytes(ETH / IPv6(nh=41, plen=10) / Raw(bytes(10))), "malformed"),  # inner header truncated
        (bytes(ETH / IPv6(dst="fc00:0:100:200::") / UDP(sport=49152, dport=4791)), "bad_next_header"),
        (good[:20] + b"\x2b" + good[21:], "bad_next_header"),          # routing header: not handled
    ]
    for raw, verdict in cases:
        assert m.forward(raw, 0, IDLE, IDLE) == {"verdict": verdict, "port": None, "queue": None, "packet": None,
                                                 "marked": False, "decap": False}, raw
    assert m.forward(good, PORTS, IDLE, IDLE)["verdict"] == "malformed"          # no such ingress port
    assert m.counters["malformed"] == 8 and m.counters["bad_next_header"] == 2
    with pytest.raises(ValueError, match="depths"):
        m.forward(good, 0, IDLE[:2], IDLE)


def test_routes_reset_and_saturation():
    m = fwd(table_entries=2, counter_bits=2)
    m.add_route(key(1), 0)
    m.add_route(key(2), 1)
    m.add_route(key(2), 7, True)                       # overwriting an entry needs no room
    for bad, match in (((key(3), 0), "table full"), ((1 << 48, 0), "48-bit"), ((key(1), 8), "port")):
        with pytest.raises(ValueError, match=match):
            m.add_route(*bad)
    for _ in range(5):
        m.forward(b"", 0, IDLE, IDLE)
    assert m.counters["malformed"] == 3
    m.reset()
    assert m.routes == {} and m.counters() == dict.fromkeys(COUNTERS, 0) and m.lfsr == m.params.lfsr_seed


@pytest.mark.parametrize("kw, field, error", [
    (dict(ports=1), "ports", ValueError), (dict(my_usid=0), "my_usid", ValueError),
    (dict(locator=1 << 32), "locator", ValueError), (dict(lfsr_seed=0), "lfsr_seed", ValueError),
    (dict(trim_len=113), "trim_len", ValueError), (dict(ecn_span_log2=17), "ecn_span_log2", ValueError),
    (dict(last_hop=1 << 8), "last_hop", ValueError), (dict(dscp_trim=48), "dscp_trim", ValueError),
    (dict(data_capacity=256, depth_bits=8), "data_capacity", ValueError), (dict(ports=2.0), "ports", TypeError)])
def test_bad_parameters_name_the_field(kw, field, error):
    with pytest.raises(error, match=f"UsidForwarderParams.*{field}"):
        UsidForwarderParams(**kw)


# --- seeded random traffic ----------------------------------------------------------------------------

def test_random_traffic_properties(rng):
    p = UsidForwarderParams(ports=PORTS, last_hop=0b1100_0000, data_capacity=20, prio_capacity=4, ecn_kmin=6,
                            ecn_span_log2=3, lfsr_seed=rng.randrange(1, 1 << 16))
    m = UsidForwarderModel(p)
    usids = [rng.randrange(1, 0xFFFF) for _ in range(12)]
    for i, u in enumerate(usids[:8]):
        m.add_route(key(u), rng.randrange(PORTS), i < 2)                 # two local functions
    n = 1000
    for _ in range(n):
        us = [rng.choice(usids + [MY] * 6) for _ in range(rng.randint(1, 6))]
        packet = pkt(us, payload=bytes(rng.randrange(0, 300)), ev=rng.getrandbits(32),
                     ecn=rng.choice((wire.NOT_ECT, wire.ECT0, wire.ECT1, wire.ECN_CE)),
                     dscp=rng.choice((wire.DSCP_MRC_DATA,) * 8 + (wire.DSCP_TRIM,)),
                     hlim=rng.choice((0, 1, 2, 64, 64, 64, 64, 255)), op=rng.choice((0x04, 0x0A, 0x11)))
        raw = bytes(packet)
        if rng.random() < 0.1:
            raw = raw[:rng.randrange(len(raw))]
        elif rng.random() < 0.05:
            raw = raw[:20] + bytes([rng.choice((0, 6, 17, 43, 44, 59))]) + raw[21:]   # not IPv6-in-IPv6
        data = [rng.randrange(25) for _ in range(PORTS)]
        prio = [rng.randrange(6) for _ in range(PORTS)]
        out = m.forward(raw, 0, data, prio)
        if out["packet"] is None:
            continue
        q = Ether(out["packet"])
        last = p.last_hop >> out["port"] & 1
        ecn_in = packet[IPv6].tc & 3
        if out["decap"] and not (ecn_in == wire.ECN_CE and packet[IPv6].payload.tc & 3 != wire.NOT_ECT):
            ecn_in = packet[IPv6].payload.tc & 3                        # RFC 6040: the outer CE propagates
        if last:
            assert q[IPv6].tc & 3 == ecn_in and not out["marked"]      # no CE mark on a last-hop port
        if out["marked"]:
            assert not last and out["queue"] == "data" and ecn_in in (wire.ECT0, wire.ECT1)
        assert q[IPv6].tc & 3 == (wire.ECN_CE if out["marked"] else ecn_in)
        if out["verdict"] == "trimmed":
            assert len(out["packet"]) == min(len(raw) - 40 * out["decap"], p.trim_len)
            assert q[IPv6].tc >> 2 == (p.dscp_trim_last if last else p.dscp_trim)
        if not out["decap"]:
            da = da_int(packet[IPv6].dst)
            want = shift_da(da) if da >> 80 == key(MY) else da
            assert da_int(q[IPv6].dst) == want and q[IPv6].hlim == packet[IPv6].hlim - 1
        assert bytes(q) == out["packet"]                   # consistent lengths
    c = m.counters()
    assert sum(c[v] for v in VERDICTS) == n
    for v in VERDICTS + ("decapsulated", "ce_marked"):
        assert c[v], v


def test_ipv6_layout_matches_scapy(rng):
    """scapy bytes of both IPv6 headers -> ``headers.IPV6`` fields, and the layout's bytes back."""
    size = headers.IPV6.size // 8
    for _ in range(50):
        p = pkt([rng.getrandbits(16) for _ in range(rng.randint(1, 6))], payload=rng.randbytes(rng.randrange(40)),
                ev=rng.getrandbits(32), dscp=rng.getrandbits(6), ecn=rng.getrandbits(2), hlim=rng.getrandbits(8))
        raw = bytes(p)
        for layer, at in ((p[IPv6], wire.OUTER_OFFSET), (p[IPv6].payload, wire.INNER_OFFSET)):
            fields = {"version": layer.version, "tc": layer.tc, "fl": layer.fl, "plen": layer.plen, "nh": layer.nh,
                      "hlim": layer.hlim, "src": da_int(layer.src), "dst": da_int(layer.dst)}
            assert set(fields) == {name for name, _ in headers.IPV6}
            view = data.Const(headers.IPV6, int.from_bytes(raw[at:at + size], "big"))
            assert {name: view[name] for name in fields} == fields
            assert headers.IPV6.const(fields).as_value().value.to_bytes(size, "big") == raw[at:at + size]


# --- RTL under Verilator ------------------------------------------------------------------------------

#: Cross bins that cannot happen, and why (the coverage report prints the reason).
EARLY = "malformed, bad next header, hop limit and no route are decided before the lookup: no egress queue"
NO_ECN = "only a fabric-bound ECT packet in the ramp is marked (SPEC 5: Not-ECT and CE are never marked)"
LAST_HOP = "no CE mark towards a last-hop port (SPEC 5)"
TRIM_IN = "a packet arriving with a trim DSCP goes to the priority queue: trim_forwarded or trim_overflow"
NOT_TRIM_IN = "trim_forwarded/trim_overflow-on-arrival need a trim DSCP; data packets are forwarded/trimmed"
QUEUE_ROOM = "forwarded needs data depth < capacity; trimmed and data_overflow need it >= capacity"
ECN = {wire.NOT_ECT: "not_ect", wire.ECT0: "ect0", wire.ECT1: "ect1", wire.ECN_CE: "ce"}


def depth_bin(d, p):
    """Where a data-queue depth sits on the ECN ramp and at the capacity (the decision's edges)."""
    top = p.ecn_kmin + (1 << p.ecn_span_log2)
    return ("=cap" if d == p.data_capacity else ">cap" if d > p.data_capacity else "=cap-1" if d == p.data_capacity - 1
            else "<kmin" if d < p.ecn_kmin else "=kmin" if d == p.ecn_kmin else "=kmin+1" if d == p.ecn_kmin + 1
            else "=ramp_top" if d == top else ">ramp_top" if d > top else "ramp")


def coverage():
    """The forwarder's functional coverage: every verdict, each at the queue, ECN and trim edges of SPEC 5."""
    cover = tb.Coverage("usid_forwarder")
    cover.point("verdict", VERDICTS)
    cover.point("lookup", ("shifted_hit", "unshifted_hit", "shifted_miss", "unshifted_miss"))
    cover.point("hlim", ("0", "1", "2", "mid", "255"))
    cover.point("decap", ("decap", "transit"))
    cover.point("egress", ("fabric", "last_hop"))
    cover.point("ecn", tuple(ECN.values()))
    cover.point("dscp", ("data", "trim", "trim_last"))
    cover.point("depth", ("<kmin", "=kmin", "=kmin+1", "ramp", "=ramp_top", ">ramp_top", "=cap-1", "=cap", ">cap"))
    cover.point("prio", ("<pcap-1", "=pcap-1", "=pcap", ">pcap"))
    cover.point("mark", ("marked", "not_marked"))
    cover.point("lfsr", ("r<d-kmin-1", "r=d-kmin-1", "r=d-kmin", "r>d-kmin"))   # mark iff r < d - kmin
    cover.point("trim_len", ("<trim_len", "=trim_len", ">trim_len"))
    cover.point("mrc", ("mrc", "not_mrc"))
    queue = ("forwarded", "trimmed", "trim_forwarded", "data_overflow", "trim_overflow")
    early = {(v, None): EARLY for v in VERDICTS if v not in queue}
    cover.cross("verdict_x_dscp", "verdict", "dscp", unreachable={
        **early, **{(v, d): TRIM_IN for v in ("forwarded", "trimmed", "data_overflow") for d in ("trim", "trim_last")},
        ("trim_forwarded", "data"): NOT_TRIM_IN})
    cover.cross("verdict_x_depth", "verdict", "depth", unreachable={
        **early, **{("forwarded", d): QUEUE_ROOM for d in ("=cap", ">cap")},
        **{(v, d): QUEUE_ROOM for v in ("trimmed", "data_overflow")
           for d in ("<kmin", "=kmin", "=kmin+1", "ramp", "=ramp_top", ">ramp_top", "=cap-1")}})
    cover.cross("verdict_x_decap", "verdict", "decap", unreachable=early)
    cover.cross("mark_x_ecn_x_egress", "mark", "ecn", "egress", unreachable={
        ("marked", "not_ect", None): NO_ECN, ("marked", "ce", None): NO_ECN, ("marked", None, "last_hop"): LAST_HOP})
    cover.cross("mark_x_depth", "mark", "depth", unreachable={
        **{("marked", d): "no mark at or below kmin (SPEC 5 ramp)" for d in ("<kmin", "=kmin")},
        **{(None, d): "the mark decision is taken for forwarded packets only: data depth < capacity"
           for d in ("=cap", ">cap")}})
    return cover


def coverage_values(raw, data_depth, prio_depth, p, routes, r, out):
    """Coverage values of one packet: the model's verdict ``out`` and the conditions it was taken under
    (``r``: the LFSR's top bits the model drew for it)."""
    verdict = out["verdict"]
    values = {"verdict": verdict}
    if verdict in ("malformed", "bad_next_header"):
        return values
    o = wire.OUTER_OFFSET
    hlim = raw[o + wire.IPV6_HLIM_AT]
    values["hlim"] = {0: "0", 1: "1", 2: "2", 255: "255"}.get(hlim, "mid")
    if verdict == "hop_limit":
        return values
    da = int.from_bytes(raw[o + wire.IPV6_DST_AT:o + wire.IPV6_DST_AT + 16], "big")
    shifted = da >> 80 == p.locator << 16 | p.my_usid
    values["lookup"] = ("shifted_" if shifted else "unshifted_") + ("miss" if verdict == "no_route" else "hit")
    if verdict == "no_route":
        return values
    egress, decap = routes[(shift_da(da) if shifted else da) >> 80]
    tc = tc_of(raw, o)
    if decap:                   # SPEC 5 decap: the inner TC, with the outer CE and trim DSCP carried in
        inner = tc_of(raw, wire.INNER_OFFSET)
        if tc & 3 == wire.ECN_CE and inner & 3 in (wire.ECT0, wire.ECT1):
            inner |= wire.ECN_CE
        tc = (tc & 0xFC) | (inner & 3) if tc >> 2 in (p.dscp_trim, p.dscp_trim_last) else inner
    d, pd, last = data_depth[egress], prio_depth[egress], p.last_hop >> egress & 1
    values.update(decap="decap" if decap else "transit", egress="last_hop" if last else "fabric", ecn=ECN[tc & 3],
                  dscp="trim" if tc >> 2 == p.dscp_trim else "trim_last" if tc >> 2 == p.dscp_trim_last else "data",
                  depth=depth_bin(d, p), prio=("=pcap" if pd == p.prio_capacity else ">pcap" if pd > p.prio_capacity
                                               else "=pcap-1" if pd == p.prio_capacity - 1 else "<pcap-1"))
    if verdict == "forwarded":
        values["mark"] = "marked" if out["marked"] else "not_marked"
        if not last and tc & 3 in (wire.ECT0, wire.ECT1) and d > p.ecn_kmin:
            edge = d - p.ecn_kmin
            values["lfsr"] = ("r<d-kmin-1" if r < edge - 1 else "r=d-kmin-1" if r == edge - 1
                              else "r=d-kmin" if r == edge else "r>d-kmin")
    if verdict in ("trimmed", "data_overflow"):
        values["mrc"] = "mrc" if is_mrc_data(raw) else "not_mrc"
    if verdict == "trimmed":
        n = len(raw) - wire.IPV6_BYTES * decap
        values["trim_len"] = "=trim_len" if n == p.trim_len else ">trim_len" if n > p.trim_len else "<trim_len"
    return values


def tc_of(raw, at):
    return (raw[at] & 0x0F) << 4 | raw[at + 1] >> 4


#: Liveness bound: cycles without a result while results are due.
PATIENCE = 200


def deparse(raw, res):
    """The packet the deparser sends for result ``res`` of input ``raw`` (see ``UsidForwarder``)."""
    hdr = res["hdr"].to_bytes(HDR_BYTES, "little")
    return (hdr[:min(len(raw), HDR_BYTES) - wire.IPV6_BYTES * res["decap"]] + raw[HDR_BYTES:])[:res["length"]]


class Observed(UsidForwarderModel):
    """The golden model with the testbench's coverage sampled for each packet it forwards."""

    def __init__(self, params, cover):
        super().__init__(params)
        self.cover = cover

    def forward(self, packet, port, data_depth, prio_depth):
        r = self.lfsr >> (16 - self.params.ecn_span_log2)
        out = super().forward(packet, port, data_depth, prio_depth)
        self.cover.sample(**coverage_values(packet, data_depth, prio_depth, self.params, self.routes, r, out))
        return out


class TB(tb.BlockTB):
    """DUT and golden model in lockstep (every result compared in order); the control plane's table
    writes, the results' tally and the packets the deparser sends."""

    name = "usid_forwarder"

    def __init__(self, dut, rng, idle=0.0, backpressure=0.0):
        self.cover = coverage()
        super().__init__(dut, Observed(tb.params(), self.cover))
        self.rng = rng
        self.source = self.stream_source("i")
        self.sink = self.stream_sink("o")
        self.cfg = self.stream_source("cfg")
        self.source.set_pause_generator(rng.random() < idle for _ in itertools.count())
        self.sink.set_pause_generator(rng.random() < backpressure for _ in itertools.count())
        self.inputs, self.outputs = [], []
        self.fresh()
        cocotb.start_soon(self._consume())

    def fresh(self):
        """The control plane's index per key and the tallies (the model is the lockstep's: a reset
        restarts it)."""
        self.index = {}
        self.sent = collections.deque()
        self.tally = collections.Counter()
        self.expected = self.received = 0

    async def route(self, key_, port, decap=False):
        """Control plane: one table entry through ``cfg`` (an index per key)."""
        index = self.index.setdefault(key_, len(self.index))
        self.cfg.send_nowait({"index": index, "valid": 1, "key": key_, "port": port, "decap": int(decap)})
        await self.cfg.wait_idle()
        await RisingEdge(self.dut.clk)

    def send(self, packet, port=0, data_depth=None, prio_depth=None):
        p = self.params
        raw = bytes(packet)
        self.source.send_nowait({"hdr": int.from_bytes(raw[:HDR_BYTES], "little"), "length": len(raw),
                                 "port": port, "data_depth": data_depth or [0] * p.ports,
                                 "prio_depth": prio_depth or [0] * p.ports})
        self.sent.append(raw)
        self.inputs.append(tb.Frame(tb.now(), raw))
        self.expected += 1

    async def _consume(self):
        while True:
            res = await self.sink.recv()
            if self.muted:
                continue
            raw = self.sent.popleft()
            verdict = VERDICTS[res["verdict"]]
            if verdict in ("forwarded", "trimmed", "trim_forwarded"):
                self.outputs.append(tb.Frame(tb.now(), deparse(raw, res)))
            self.tally[verdict] += 1
            self.received += 1

    async def drain(self):
        waited, seen = 0, self.received
        while self.source.queue or self.received < self.expected:
            await RisingEdge(self.dut.clk)
            waited = 0 if self.received != seen else waited + 1
            seen = self.received
            assert waited < PATIENCE, f"no progress: {self.expected - self.received} results missing"
        assert self.sink.empty()

    def finish(self):
        self.check_done()
        counters = self.check_counters()
        self.conserved("packets", self.expected, **{v: self.tally[v] for v in VERDICTS})
        top = (1 << self.params.counter_bits) - 1
        assert all(counters[v] == min(self.tally[v], top) for v in VERDICTS), (counters, self.tally)
        self.write_pcaps(self.inputs, self.outputs)
        self.cover.write()
        return counters


#: EV bits 15:14 set: the UDP source port (EV[15:0]) in RoCEv2's 0xC000-0xFFFF range, as a NIC draws it.
EPHEMERAL = 0xC000


def random_packet(rng, usids, params):
    """A random MRC-like packet: uSID lists mixing ``usids`` and ``my``, payloads, EVs, ECN, trim DSCPs,
    hop limits, opcodes; some truncated, some with another next header (the model test's mix)."""
    us = [rng.choice(usids + [params.my_usid] * 6) for _ in range(rng.randint(1, 6))]
    p = pkt_for(params, us, payload=bytes(rng.randrange(0, 300)), ev=rng.getrandbits(32) | EPHEMERAL,
            ecn=rng.choice((wire.NOT_ECT, wire.ECT0, wire.ECT1, wire.ECN_CE)),
            dscp=rng.choice((wire.DSCP_MRC_DATA,) * 8 + (wire.DSCP_TRIM, wire.DSCP_TRIM_LAST)),
            hlim=rng.choice((0, 1, 2, 64, 64, 64, 64, 255)), op=rng.choice((0x04, 0x0A, 0x0B, 0x0C, 0x11)))
    raw = bytes(p)
    if rng.random() < 0.1:
        raw = raw[:rng.randrange(len(raw))]
    elif rng.random() < 0.05:
        raw = raw[:20] + bytes([rng.choice((0, 6, 17, 43, 44, 59))]) + raw[21:]
    return raw


async def load_random_table(t, rng):
    """Routes for random uSIDs (two local functions), filling the table; returns the uSIDs."""
    p = t.params
    usids = rng.sample(range(1, 0xFFFF), min(p.table_entries, 8) + 4)
    for i, u in enumerate(usids[:min(p.table_entries, 8)]):
        await t.route(key(u, p.locator), rng.randrange(p.ports), i < 2)
    return usids


async def random_run(t, rng, usids, n):
    p = t.params
    for _ in range(n):
        t.send(random_packet(rng, usids, p), rng.randrange(p.ports + 1) if rng.random() < 0.05 else
               rng.randrange(p.ports), [rng.randrange(p.data_capacity + 5) for _ in range(p.ports)],
               [rng.randrange(p.prio_capacity + 2) for _ in range(p.ports)])
    await t.drain()


def pkt_for(p, usids, **kw):
    return Ether(bytes(mrc_packet(da=usid_address(p.locator, usids), **kw)))


@cocotb.test()
async def random_traffic(dut):
    """Seeded random traffic (hits, misses, decap, expiry, ECN, trims, overflow, bad input) with idle
    cycles and backpressure: every result equals the model's; counters; conservation."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, idle=0.2, backpressure=0.3)
    await t.reset()
    usids = await load_random_table(t, rng)
    await random_run(t, rng, usids, 1500)
    t.finish()
    assert all(t.tally[v] for v in VERDICTS), t.tally
    assert all(t.model.counters[e] for e in ("decapsulated", "ce_marked")), t.model.counters()


@cocotb.test()
async def directed(dut):
    """Boundaries: hop limit 0/1/2/255; table hit, miss, overwrite, invalid entry, the whole table;
    shifted vs unshifted keys and another locator; ECN at kmin, kmin + 1 and past the ramp, on last-hop
    and fabric ports, for every codepoint; the data queue at capacity - 1 / capacity, the priority queue
    at capacity - 1 / capacity; trimmed lengths at trim_len - 1, trim_len, trim_len + 1; opcodes 0x0B/0x0C,
    UDP port 4790; decap with trim and CE."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng)
    p = t.params
    await t.reset()
    P = p.ports
    last = [k for k in range(P) if p.last_hop >> k & 1]
    fabric = [k for k in range(P) if not p.last_hop >> k & 1]
    await t.route(key(0x200, p.locator), fabric[0])
    await t.route(key(0x300, p.locator), last[0] if last else fabric[-1])
    await t.route(key(0x0F0, p.locator), fabric[-1], True)
    mine = p.my_usid
    for hlim in (0, 1, 2, 255):
        t.send(pkt_for(p, [mine, 0x200], hlim=hlim))
        t.send(pkt_for(p, [mine, 0x999], hlim=hlim))
    t.send(pkt_for(p, [0x200, 0x300]))                                    # unshifted hit
    t.send(pkt_for(p, [mine, 0x200], payload=b""))
    t.send(Ether(bytes(mrc_packet(da=usid_address(p.locator ^ 1, [mine, 0x200])))))   # another locator
    # every table entry used, then one overwritten and one invalidated
    extra = [0x1000 + k for k in range(p.table_entries - 3)]
    for k, u in enumerate(extra):
        await t.route(key(u, p.locator), k % P)
    for u in extra:
        t.send(pkt_for(p, [mine, u]))
    await t.drain()
    await t.route(key(0x200, p.locator), fabric[-1])
    t.send(pkt_for(p, [mine, 0x200]))
    if extra:                                     # invalidated
        t.cfg.send_nowait({"index": t.index[key(extra[0], p.locator)], "valid": 0})
        await t.cfg.wait_idle()
        await RisingEdge(dut.clk)
        t.send(pkt_for(p, [mine, extra[0]]))
    # ECN ramp edges, every codepoint, last hop vs fabric
    kmin, span = p.ecn_kmin, 1 << p.ecn_span_log2
    for d in (kmin, kmin + 1, kmin + span, min(kmin + span + 1, p.data_capacity - 1)):
        if d >= p.data_capacity:
            continue
        for ecn in (wire.NOT_ECT, wire.ECT0, wire.ECT1, wire.ECN_CE):
            for u in (0x200, 0x300):
                t.send(pkt_for(p, [mine, u], ecn=ecn), 0, [d] * P)
    # queue boundaries and trim lengths
    cap, pcap = p.data_capacity, p.prio_capacity
    body = p.trim_len - wire.MRC_HEADER_BYTES - wire.ICRC_BYTES
    for d in (cap - 1, cap):
        for pd in (pcap - 1, pcap):
            for extra_bytes in (-1, 0, 1, 200):
                for u in (0x200, 0x300, 0x0F0):
                    t.send(pkt_for(p, [mine, u], payload=bytes(max(body + extra_bytes, 0))), 1, [d] * P, [pd] * P)
            for dscp in (wire.DSCP_TRIM, wire.DSCP_TRIM_LAST):
                t.send(pkt_for(p, [mine, 0x200], dscp=dscp), 0, [d] * P, [pd] * P)
    for op in (0x0B, 0x0C):
        t.send(pkt_for(p, [mine, 0x200], op=op, payload=bytes(100)), 0, [cap] * P)
    udp = pkt_for(p, [mine, 0x200], payload=bytes(100))
    udp[UDP].dport = 4790
    t.send(Ether(bytes(udp)), 0, [cap] * P)
    ce = pkt_for(p, [mine, 0x0F0], payload=bytes(300))
    ce[IPv6].tc = wire.DSCP_TRIM << 2 | wire.ECN_CE
    t.send(ce, 0, [cap] * P)
    t.send(ce, 0)
    await t.drain()
    t.finish()


@cocotb.test()
async def bad_input(dut):
    """Malformed and truncated IPv6 (every length up to the inner header), wrong EtherType, versions,
    payload lengths, unknown next headers, an ingress port out of range: counted, never forwarded."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, backpressure=0.3)
    p = t.params
    await t.reset()
    await t.route(key(0x200, p.locator), 1)
    good = bytes(pkt_for(p, [p.my_usid, 0x200], payload=b"abc"))
    for n in list(range(0, wire.MRC_UDP_OFFSET + 2)) + [len(good) - 1, len(good) + 1]:
        t.send((good + b"\0")[:n])
    for at, value in ((12, 0x08), (14, 0x45), (54, 0x45), (18, 0x00), (58, 0x7F), (20, 0x2B), (20, 0x11),
                      (20, 0x00), (60, 0x06)):
        t.send(good[:at] + bytes([value]) + good[at + 1:])
    t.send(bytes(ETH / IPv6(nh=41, plen=10) / Raw(bytes(10))))
    t.send(good, p.ports)
    t.send(good, 255)
    t.send(good)
    await t.drain()
    t.finish()
    assert t.tally["forwarded"] == 3 and t.tally["malformed"] > 60 and t.tally["bad_next_header"] == 3, t.tally


@cocotb.test()
async def ecn_ramp(dut):
    """Thousands of ECT packets at every depth of the ramp: the per-packet marks follow the model's LFSR
    exactly, and the mark rate follows the closed form."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng)
    p = t.params
    await t.reset()
    await t.route(key(0x200, p.locator), 0 if not p.last_hop & 1 else p.ports - 1)
    raw = bytes(pkt_for(p, [p.my_usid, 0x200]))
    depths = range(p.ecn_kmin, min(p.ecn_kmin + (1 << p.ecn_span_log2) + 1, p.data_capacity))
    n = 256
    for d in depths:
        for _ in range(n):
            t.send(raw, 0, [d] * p.ports)
    await t.drain()
    t.finish()
    marks = collections.Counter()
    for frame, d in zip(t.outputs, (d for d in depths for _ in range(n))):
        marks[d] += Ether(frame.data)[IPv6].tc & 3 == wire.ECN_CE
    for d in depths:
        expected = mark_probability(d, p)
        assert abs(marks[d] / n - expected) < 0.12, (d, marks[d], expected)


@cocotb.test()
async def line_rate(dut):
    """Without backpressure one descriptor per cycle goes in and one result per cycle comes out."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng)
    await t.reset()
    usids = await load_random_table(t, rng)
    stalls, results = 0, 0

    async def monitor():
        nonlocal stalls, results
        while True:
            await RisingEdge(dut.clk)
            stalls += bool(dut.i__valid.value) and not dut.i__ready.value
            results += bool(dut.o__valid.value)
    cocotb.start_soon(monitor())
    n = 400
    for _ in range(n):
        t.send(random_packet(rng, usids, t.params))
    busy = 0
    while t.received < n:
        await RisingEdge(dut.clk)
        busy += 1
    await t.drain()
    assert stalls == 0 and busy <= n + 3, f"{n} packets took {busy} cycles ({stalls} stalls): not one per cycle"
    t.finish()


@cocotb.test()
async def reset_mid_traffic(dut):
    """A reset lands among queued descriptors: table, LFSR and counters clear (a former route misses),
    then the next traffic matches a fresh model."""
    rng = random.Random(tb.seed())
    t = TB(dut, rng, idle=0.2, backpressure=0.5)
    await t.reset()
    usids = await load_random_table(t, rng)
    for _ in range(300):
        t.send(random_packet(rng, usids, t.params))
    landing = rng.randrange(50, 250)
    await t.reset_mid_traffic(landing)
    t.fresh()
    t.send(pkt_for(t.params, [t.params.my_usid, usids[0]]))
    await t.drain()
    assert t.tally["no_route"] == 1, "the table is cleared by reset"
    usids = await load_random_table(t, rng)
    await random_run(t, rng, usids, 300)
    t.finish()


# --- pytest ----------------------------------------------------------------------------------------

PARAMS = {
    "default": UsidForwarderParams(last_hop=0b1100_0000, data_capacity=20, prio_capacity=4, ecn_kmin=6,
                                   ecn_span_log2=3, table_entries=16),
    #: 4 ports, a 4-entry table, 3-bit saturating counters, the shortest trim, 4-bit depths, a 1-step ramp.
    "small": UsidForwarderParams(ports=4, table_entries=4, last_hop=0b1000, data_capacity=6, prio_capacity=2,
                                 depth_bits=4, ecn_kmin=2, ecn_span_log2=1, trim_len=wire.MRC_HEADER_BYTES,
                                 counter_bits=3, locator=0xFC00_0102, my_usid=0xBEEF, lfsr_seed=0x1234),
}


def runs(config, test):
    """The small configuration runs the random traffic and the boundaries."""
    return config == "default" or test in ("random_traffic", "directed", "bad_input")


@runner.parametrize(__name__, PARAMS, select=runs)
def test_usid_forwarder(params, testcase, record_property):
    record_property("innet", runner.run(UsidForwarder, params, __name__, testcase))

"""The usid_forwarder golden model alone (``models/usid_forwarder.py``): the tests that need no RTL."""
import socket

import pytest
from amaranth.lib import data

from hdl import headers
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
from testbenches.test_usid_forwarder import ETH, IDLE, LOC, MY, PORTS, key


def fwd(routes=(), **kw):
    m = UsidForwarderModel(UsidForwarderParams(**kw))
    for k, port, *decap in routes:
        m.add_route(k, port, *decap)
    return m


def pkt(usids, payload=b"p" * 64, **kw):
    return Ether(bytes(mrc_packet(da=usid_address(LOC, usids), payload=payload, **kw)))


def da_int(address):
    return int.from_bytes(socket.inet_pton(socket.AF_INET6, address), "big")


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

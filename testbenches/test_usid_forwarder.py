"""MRC SRv6 uSID forwarder: scapy layers, golden model rules of SPEC section 5, seeded properties; the
RTL under Verilator in lockstep with the model, result by result (verdict, egress port, queue, length,
the header bytes the deparser sends).
"""
import collections
import itertools
import random

import cocotb
from cocotb.triggers import RisingEdge

from hdl.usid_forwarder import HDR_BYTES, UsidForwarder
from models import wire
from models.headers import UDP, Ether, IPv6, Raw, mrc_packet, usid_address
from models.usid_forwarder import (
    VERDICTS,
    UsidForwarderModel,
    UsidForwarderParams,
    is_mrc_data,
    mark_probability,
    shift_da,
)
from testbenches import runner, tb

LOC = 0xFC00_0000
MY = 0x0100
PORTS = 8
IDLE = [0] * PORTS
ETH = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")


def key(usid, loc=LOC):
    return loc << 16 | usid


# --- scapy layers and wire constants -----------------------------------------------------------------


# --- forwarding -----------------------------------------------------------------------------------


# --- ECN ----------------------------------------------------------------------------------------------


# --- trimming -----------------------------------------------------------------------------------------


# --- bad input ---------------------------------------------------------------------------------------


# --- seeded random traffic ----------------------------------------------------------------------------


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

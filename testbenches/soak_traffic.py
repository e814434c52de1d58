"""Configured soak traffic: the blocks whose behaviour depends on a configuration or command stream.

The line-rate stimuli of tools/traffic.py leave a block's ``cfg``/``cmd`` stream idle, so the soak of
such a block would run its reset configuration only (every packet ``unknown``, ``no_route``,
``bad_ev`` or ``no_slot``). Here each of them gets a generator ``generate(count)`` of stimulus items:
the packets (beat dicts) and, between them, the commands that configure the block (``{"cmd":
payload}``, which the checked engine sends on the command stream once the beats before it went in,
and its adapter applies to the model in the same place). The traffic is built to fit the
configuration, and every outcome in ``REACHED`` is reached by construction (a fixed opening sequence,
silent ring positions, a queue depth that always marks, messages sent whole before they complete),
not by the seed; the seed varies everything else.

The Spillway switch side and spill node, and the in-switch pipeline, have no configuration either, but their
line-rate traffic is one-beat packets (and the switch side's return link idle): their traffic here has
packets of every size and kind they tell apart, and the switch side's return link driven as a spill node's.

The ESA aggregator has no configuration, but its line-rate rounds (tools/traffic.py ``ina``) all complete
in order: only 5 of its 13 counters move. Its traffic here interleaves jobs that collide and carries
every kind of contribution its counters tell apart (a mutation campaign screens on this traffic).

Each generator is a registered block's ``traffic`` (``registry.py``), which also names the counters
its soak must end with above 0 (``Block.reached``: counter -> the packets a run needs to reach it).
"""
import collections
import struct

from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from models import wire
from models.chunk_bitmap import OP_COMPLETE, OP_POST
from models.ev_expander import profile, refusal
from models.ev_selector import EVENT_KINDS, GOOD, SKIP, EvSelectorModel
from models.headers import dblp_packet, ina_packet, mrc_packet, roce_packet, sdr_packet, usid_address
from models.packet import beats_of
from models.progress_regfile import OP_INSTALL, OP_JOB, OP_REMOVE
from models.wire import ECN_CE, ECT0, ECT1, NOT_ECT, RC_SEND_FIRST, RC_SEND_LAST, RC_SEND_MIDDLE, RC_SEND_ONLY

__all__ = ["progress_regfile", "parser_edges", "usid_forwarder", "ev_expander", "chunk_bitmap", "aggregator",
           "ev_selector", "bounded_loss_tracker", "spill_switch", "spill_node", "pipeline_inswitch", "AGEING",
           "EV_PHASE"]


def _beats(component, raw, port=0):
    return beats_of(bytes(raw), {"port": port}, component.data_bytes)


def _cut(component, raw, length):
    """The beats of ``raw`` cut to ``length`` bytes, the last beat's bytes past the cut still ``raw``'s: junk
    past ``keep`` that the block must not read (the protocol byte of a packet cut before it, say)."""
    beats, width = _beats(component, raw[:length]), component.data_bytes
    start = (len(beats) - 1) * width
    beats[-1] = dict(beats[-1], data=int.from_bytes(raw[start:start + width].ljust(width, b"\0"), "little"))
    return beats


def _exact(produce):
    """``generate(count)``: the items of exactly ``count`` packets (and the commands before them) from
    ``produce()``, which gives the items of a few packets at a time."""
    pending = collections.deque()

    def generate(count):
        out = []
        while count:
            if not pending:
                pending.extend(produce())
            item = pending.popleft()
            out.append(item)
            count -= "cmd" not in item and item.get("last", True)
        return out
    return generate


# --- Symphony progress register file ------------------------------------------------------------------

#: Packets between the progress file's reconfigurations (a job cleared, a flow removed or put back).
PHASE = 4000
#: Single-beat packets of the progress file's opening between job 1's clear and its ageing probe.
AGEING = 60


def _qp(job, position):
    return 0x1000 + 4 * job + position


def parser_edges(roce):
    """(packet, the progress file's outcome) at the edges of its parser, cut from the RoCEv2 packet ``roce``
    (bytes, of an installed flow) or built here: IPv4/UDP of 37 and 38 bytes (the UDP port complete at 38)
    and RoCEv2 of 53 and 54 bytes (the BTH complete at 54), malformed below each limit and parsed at it;
    RoCEv2 cut at 23 and 24 bytes (the IPv4 protocol complete at 24: not UDP yet, unknown; then UDP
    without its port, malformed); an IPv6 frame carrying RoCEv2, whose address puts 17 where IPv4 keeps the
    protocol (not IPv4: unknown)."""
    ether = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")         # as roce_packet's
    other = bytes(ether / IP(src="10.9.9.9", dst="10.9.9.8") / UDP(sport=1, dport=53) / Raw(bytes(40)))
    v6 = bytes(ether / IPv6(src="2011::1", dst="2011::2") / UDP(sport=1, dport=4791) / Raw(bytes(40)))
    return [(roce[:37], "malformed"), (roce[:38], "malformed"), (other[:37], "malformed"), (other[:38], "unknown"),
            (roce[:53], "malformed"), (roce[:54], "tracked"), (roce[:wire.IP_PROTO_AT], "unknown"),
            (roce[:wire.IP_PROTO_AT + 1], "malformed"), (v6, "unknown")]


#: (BTH opcode, PSN) of each packet of the progress file's soak: a message's only, first, middle and last
#: packet (a message-stepping file closes a step on the last ones only), the PSN (the IPv4 id too) moving
#: the header checksum the marking updates; and one more, ``_zero_checksum_psn``'s.
REGFILE_VARIANTS = ((RC_SEND_ONLY, 0), (RC_SEND_FIRST, 0x8001), (RC_SEND_MIDDLE, 0xFFFF), (RC_SEND_LAST, 0x1234))


def ipv4_id_for_checksum(raw, target):
    """The IPv4 id that gives the packet ``raw`` (bytes, its id 0) the header checksum ``target``: the id
    makes up the ones' complement sum of the other header words to ``~target``."""
    header = bytearray(raw[wire.IP_OFFSET:wire.UDP_OFFSET])
    header[wire.IP_CHECKSUM_AT - wire.IP_OFFSET:wire.IP_CHECKSUM_AT - wire.IP_OFFSET + 2] = bytes(2)
    total = 0
    for at in range(0, len(header), 2):
        total += int.from_bytes(header[at:at + 2], "big")
        total = (total & 0xFFFF) + (total >> 16)
    wanted = ~target & 0xFFFF
    return wanted - total if wanted >= total else wanted - total + 0xFFFF


def _zero_checksum_psn(fields):
    """The PSN (the IPv4 id too) that gives the RoCEv2 packet of ``fields`` the header checksum 0x0000:
    marking it carries out of both ones' complement folds of the RFC 1624 update."""
    return ipv4_id_for_checksum(bytes(roce_packet(psn=0, **fields)), 0)


def progress_regfile(component, rng):
    """Up to four ring jobs of up to four positions, on the flows ``_qp(job, position)``: job 0 (chunk 1, delta 0)
    never hears from its last position, so every ECN-capable packet of its other positions is marked once they moved
    (Not-ECT: ``not_ect``); job 1 (chunk 2, delta 1, age_out 2) the same, its silent position ages out after 3
    epochs; job 2 (chunk 3, delta 2) has every position, position 0 twice as often (it runs ahead); job 3 (chunk 0,
    which the file takes as 1; delta 0, age_out 1) loses position 2 every other phase (it ages, then rejoins). With
    two or three jobs (a small file: its steps and counters saturate), job 0's talking positions take job 2's part
    in the opening and the removals. Every ``PHASE`` packets: one job cleared (``OP_JOB``) and a flow removed or put
    back. Around them: packets to QPs never installed, non-RoCE, malformed (IP options) and those at the parser's
    limits (``parser_edges``: ``unknown``, ``malformed``, ``tracked``); TOS Not-ECT, ECT(0), ECT(1), CE; 1- and
    2-beat packets."""
    p = component.params
    n_jobs, ring = min(p.jobs, 4), min(p.ring, 4)
    if n_jobs < 2 or ring < 3 or p.table < _qp(n_jobs - 1, ring) - _qp(0, 0):
        raise ValueError("the progress_regfile soak needs jobs >= 2, ring >= 3 and a flow per (job, position) "
                         "of min(jobs, 4) x min(ring, 4): table >= 4 * (min(jobs, 4) - 1) + min(ring, 4)")
    jobs = {0: (1, 0, 0), 1: (2, 1, 2), 2: (3, 2, 0), 3: (0, 0, 1)}       # job -> (chunk, delta, age_out)
    busy = 2 if n_jobs > 2 else 0           # the job whose flows carry the opening's filler and are removed
    tos_kinds = (NOT_ECT, ECT0, ECT1, ECN_CE)
    pool = {}                               # (job, position, tos, size) -> the packet's beats in each VARIANTS
    for job in range(n_jobs):
        for position in range(ring):
            for tos in tos_kinds:
                for size in (2, 40):                                     # 1 and 2 beats of 64 bytes
                    fields = {"src": f"10.0.{job}.{position + 1}", "dst": f"10.0.{job}.{position + 2}",
                              "qp": _qp(job, position), "tos": tos, "payload": bytes(size)}
                    variants = (*REGFILE_VARIANTS, (RC_SEND_ONLY, _zero_checksum_psn(fields)))
                    pool[job, position, tos, size] = [_beats(component, roce_packet(op=op, psn=psn, **fields))
                                                      for op, psn in variants]
    strays = [_beats(component, roce_packet(qp=0x2000 + n, tos=ECT0, payload=bytes(8))) for n in range(8)]
    raw = bytearray(bytes(roce_packet(tos=ECT0, payload=bytes(8))))
    raw[wire.UDP_DPORT_AT:wire.UDP_DPORT_AT + 2] = (4792).to_bytes(2, "big")
    strays.append(_beats(component, raw))                                 # UDP, not RoCEv2: unknown
    malformed = bytearray(bytes(roce_packet(tos=ECT0, payload=bytes(8))))
    malformed[wire.IP_VERSION_IHL_AT] = 0x46                              # IP options: malformed
    malformed = _beats(component, malformed)
    edge = bytes(roce_packet(src="10.0.2.2", dst="10.0.2.3", qp=_qp(busy, 1), tos=ECT0, payload=bytes(8)))
    edges = [malformed, *(_cut(component, edge, len(raw)) if edge.startswith(raw) else _beats(component, raw)
                          for raw, _ in parser_edges(edge))]

    def job_cmd(job):
        chunk, delta, age_out = jobs[job]
        return {"cmd": {"op": OP_JOB, "job": job, "chunk": chunk, "delta": delta, "age_out": age_out}}

    def install(job, position):
        return {"cmd": {"op": OP_INSTALL, "qp": _qp(job, position), "job": job, "position": position}}

    state = {"sent": 0, "phase": -1, "removed": None}

    def senders(job, phase):
        if job in (0, 1):
            return list(range(ring - 1))
        if job == 2:
            return [0, *range(ring)]
        return [n for n in range(ring) if n != 2 or not phase % 2]

    def opening():
        """The first items: the whole configuration, then packets that mark, by construction, two strays
        (``unknown``), a malformed packet and a job-1 packet more than ``AGEING`` single-beat packets after
        job 1 was cleared: at least that many cycles later, past its ``age_out`` of 2 epochs when an epoch
        is at most ``AGEING // 3`` cycles, so its silent last position turns stale (``aged``); then two
        packets of the busy job, in whose cycles the last ones are decided (the block's latency is 3)."""
        items = [job_cmd(job) for job in range(n_jobs)]
        items += [install(job, position) for job in range(n_jobs) for position in range(ring)]
        for tos in (ECT0, NOT_ECT, ECT1):     # job 0, position 0: step 1, 2, 3 against min 0 (its last)
            items += pool[0, 0, tos, 2][0]
        talking = sorted(set(senders(busy, 0)))
        for n in range(AGEING):
            items += pool[busy, talking[n % len(talking)], ECT0, 2][0]
        items += strays[0] + strays[-1] + malformed + pool[1, 0, ECT0, 2][0]
        return items + pool[busy, 0, ECT0, 2][0] + pool[busy, 1, ECT0, 2][0]

    def reconfigure(phase):
        job = phase % n_jobs
        items = [job_cmd(job)]
        if state["removed"] is not None:
            items.append(install(*state["removed"]))
            state["removed"] = None
        else:
            state["removed"] = (busy, rng.randrange(ring))
            items.append({"cmd": {"op": OP_REMOVE, "qp": _qp(*state["removed"])}})
        if phase % 5 == 4:
            items.append({"cmd": {"op": 0, "qp": _qp(0, 0), "job": 1, "position": 1}})   # undefined: ignored
        return items

    def produce():
        items = []
        n = state["sent"]
        phase = n // PHASE
        if phase != state["phase"]:
            state["phase"] = phase
            items += opening() if phase == 0 else reconfigure(phase)
        state["sent"] += 1
        r = rng.randrange(100)
        if n % PHASE == PHASE - 1:                   # a job-1 packet closes each phase
            items += pool[1, 0, ECT0, 2][0]
        elif r < 3:
            items += rng.choice(strays)
        elif r < 5:
            items += rng.choice(edges)
        else:
            job = rng.randrange(n_jobs)
            items += rng.choice(pool[job, rng.choice(senders(job, phase)), rng.choice(tos_kinds),
                                     rng.choice((2, 2, 40))])
        return items
    return _exact(produce)


# --- MRC uSID forwarder --------------------------------------------------------------------------------

def usid_forwarder(component, rng):
    """Routes for uSIDs 0x2000 + k (k < 3/4 of the table; every fourth a local function: decapsulate),
    installed first; every 2000 packets one entry is rewritten (a new port, decap flipped, or removed
    and later put back). Packets: uN (DA {locator, my_usid, next}: shifted lookup) and plain (DA
    {locator, uSID}) to routed and unrouted uSIDs, trimmed upstream (DSCP trim), non-MRC (UDP to
    another port), hop limit 1, wrong next header, malformed lengths and ingress ports; the queue
    depths of each descriptor from a regime (empty, inside the ECN ramp, past the ramp where every
    ECT packet is marked, data queue full, both full)."""
    p = component.params
    hdr_bytes, o = wire.MRC_HEADER_BYTES, wire.OUTER_OFFSET
    n_routes = max(2, 3 * p.table_entries // 4)
    usids = [0x2000 + k for k in range(n_routes)]
    routes = {}                                       # index -> (key, port, decap)

    def write(index, key, port, decap, valid=1):
        routes[index] = (key, port, decap) if valid else None
        return {"cmd": {"index": index, "valid": valid, "key": key, "port": port, "decap": decap}}

    def key(usid):
        return p.locator << 16 | usid

    pool = []
    for n in range(160):
        kind = n % 8
        target = usids[n % n_routes] if kind != 7 else 0x7000 + n           # kind 7: no route
        da = (usid_address(p.locator, [p.my_usid, target]) if n % 2
              else usid_address(p.locator, [target, 0x3000 + n]))
        dscp = p.dscp_trim if kind == 5 else wire.DSCP_MRC_DATA
        ecn = (ECT0, ECT1, NOT_ECT, ECN_CE)[n // 8 % 4]
        raw = bytearray(bytes(mrc_packet(ev=rng.getrandbits(32), da=da, psn=n, dscp=dscp, ecn=ecn,
                                         payload=bytes(rng.choice((0, 16, 64, 200))))))
        if kind == 6:
            udp = wire.MRC_UDP_OFFSET
            raw[udp + 2:udp + 4] = (4792).to_bytes(2, "big")                # not MRC: never trimmed
        pool.append(raw)
    odd = []
    raw = bytearray(pool[0])
    raw[o + wire.IPV6_HLIM_AT] = 1
    odd.append(raw)                                                         # hop_limit
    raw = bytearray(pool[1])
    raw[o + wire.IPV6_NH_AT] = wire.NH_UDP
    odd.append(raw)                                                         # bad_next_header
    raw = bytearray(pool[2])
    raw[o + 4:o + 6] = (int.from_bytes(raw[o + 4:o + 6], "big") + 1).to_bytes(2, "big")
    odd.append(raw)                                                         # malformed: outer length
    edges = _usid_edges(p, pool)

    def descriptor(raw, regime):
        ports = p.ports
        port = rng.randrange(ports) if rng.randrange(64) else ports + rng.randrange(256 - ports)
        ramp = p.ecn_kmin + (1 << p.ecn_span_log2)
        data, prio = [], []
        for _ in range(ports):
            if regime == 0:
                data.append(rng.randrange(p.ecn_kmin + 1))
            elif regime == 1:
                data.append(rng.randrange(p.ecn_kmin, min(ramp + 1, p.data_capacity)))
            elif regime == 2:                 # past the ramp, below capacity: every ECT packet marked
                data.append(rng.randrange(min(ramp, p.data_capacity - 1), p.data_capacity))
            else:
                data.append(p.data_capacity + rng.randrange(2))
            prio.append(p.prio_capacity if regime == 4 else rng.randrange(p.prio_capacity))
        return {"hdr": int.from_bytes(bytes(raw[:hdr_bytes]), "little"), "length": len(raw), "port": port,
                "data_depth": data, "prio_depth": prio}

    state = {"sent": 0, "removed": None}

    last_hop = [port for port in range(p.ports) if p.last_hop >> port & 1]
    fixed = {0: 0, 1: last_hop[-1] if last_hop else 1}

    def opening():
        """The routes, then one packet of each verdict and event (route 0 leaves on fabric port 0, route 1
        on a last-hop port: an ECT packet past the ramp left unmarked, a trim with ``dscp_trim_last``)."""
        items = [write(k, key(u), fixed.get(k, rng.randrange(p.ports)), int(k % 4 == 3)) for k, u in enumerate(usids)]
        for raw, regime in ((pool[0], 2), (pool[0], 3), (pool[0], 0), (pool[0], 4), (pool[6], 3), (pool[5], 0),
                            (pool[7], 0), (pool[3], 0), (pool[1], 2), (pool[1], 3), *((raw, 0) for raw in odd),
                            *edges):
            items.append({**descriptor(raw, regime), "port": 0})
        return items

    def rewrite():
        if state["removed"] is not None:
            index = state["removed"]
            state["removed"] = None
            return [write(index, key(usids[index]), rng.randrange(p.ports), int(index % 4 == 3))]
        index = rng.randrange(n_routes)
        if rng.randrange(2):
            state["removed"] = index
            return [write(index, 0, 0, 0, valid=0)]
        _, port, decap = routes[index]
        return [write(index, key(usids[index]), (port + 1) % p.ports, decap ^ 1)]

    def produce():
        n = state["sent"]
        state["sent"] += 1
        items = opening() if n == 0 else rewrite() if n % 2000 == 0 else []
        raw = rng.choice(odd) if rng.randrange(32) == 0 else rng.choice(pool)
        regime = rng.randrange(5)
        if rng.randrange(32) == 0:
            raw, regime = rng.choice(edges)
        return items + [descriptor(raw, regime)]
    return _exact(produce)


def _usid_edges(p, pool):
    """[(packet, queue regime)]: the uSID forwarder's edge cases, each one field off a routed packet of
    ``pool`` (pool[0] routed to a fabric port, pool[3] to a decapsulating route): another EtherType, outer
    IPv6 version 4, the outer header alone (payload length 0, next header 59), inner version 4, the inner
    header alone (inner payload length 0), hop limit 2; with the data queue full (regime 3): a packet cut in
    its BTH (not MRC), one of the MRC header alone, one of opcode RC_WRITE_ONLY_IMM (the last MRC one);
    decapsulated, an inner DSCP other than the outer's, the outer DSCP each trim DSCP and another."""
    o, i, udp = wire.OUTER_OFFSET, wire.INNER_OFFSET, wire.MRC_UDP_OFFSET

    def edit(raw, cut=None, **at):
        raw = bytearray(raw[:cut] if cut else raw)
        if cut:                                         # the payload lengths fit the cut
            raw[o + 4:o + 6] = (cut - i).to_bytes(2, "big")
            if cut >= udp:
                raw[i + 4:i + 6] = (cut - udp).to_bytes(2, "big")
        for offset, value in at.items():
            raw[int(offset[1:])] = value
        return raw

    def tc(raw, at, dscp):                              # an IPv6 traffic class's DSCP, its ECN kept
        value = dscp << 2 | (raw[at + 1] >> 4 & 3)
        raw[at], raw[at + 1] = (raw[at] & 0xF0) | value >> 4, (value & 0xF) << 4 | (raw[at + 1] & 0x0F)
        return raw

    routed, decap = pool[0], pool[3]
    edges = [(edit(routed, **{f"b{wire.ETHERTYPE_AT + 1}": 0x00}), 0),
             (edit(routed, **{f"b{o}": 0x40 | routed[o] & 0x0F}), 0),
             (edit(routed, cut=i, **{f"b{o + wire.IPV6_NH_AT}": 59}), 0),
             (edit(routed, **{f"b{i}": 0x40 | routed[i] & 0x0F}), 0),
             (edit(routed, cut=udp), 0),
             (edit(routed, **{f"b{o + wire.IPV6_HLIM_AT}": 2}), 0),
             (edit(routed, cut=wire.MRC_BTH_OFFSET + 4), 3),
             (edit(routed, cut=wire.MRC_HEADER_BYTES), 3),
             (edit(routed, **{f"b{wire.MRC_BTH_OFFSET}": wire.RC_WRITE_ONLY_IMM}), 3)]
    for dscp in (p.dscp_trim, p.dscp_trim_last, wire.DSCP_MRC_DATA):
        edges.append((tc(tc(bytearray(decap), o, dscp), i, 10), 0))
    return edges


# --- MRC EV expander --------------------------------------------------------------------------------

def consumed(prof):
    """EV bits a profile's masks take."""
    return sum(bin(f["mask"]).count("1") for f in prof["fields"][:prof["field_count"]])


def fit(prof, p):
    """``prof`` cut to the expander's bounds where it can be: fields past ``max_fields`` dropped, masks
    thinned to ``ev_bits`` EV bits (lowest bits first), max_val within the mask."""
    fmts, fields = prof["fmt_fields"][:p.max_fields], [dict(f) for f in prof["fields"][:p.max_fields]]
    budget = p.ev_bits
    for f in fields:
        while bin(f["mask"]).count("1") > budget:
            f["mask"] &= f["mask"] - 1
        f["max_val"] = min(f["max_val"], (1 << bin(f["mask"]).count("1")) - 1)
        budget -= bin(f["mask"]).count("1")
    return profile(prof["ev_fmt_mode"], fmts, fields)


def random_profile(rng, p, mode=None, refuse=0.0):
    """A random STEV or SRv6 (``mode``) profile within the expander's bounds: explicit, generated, fixed
    and odd masks, fields narrower than, as wide as or (one in five) wider than their slots, format
    fields without an EV field; with probability ``refuse`` refused: one of OCP's rules broken where it
    can be (init_val or mask past the width, max_val past the mask, a format too wide), else the mode."""
    mode = mode or rng.choice((wire.EV_FMT_MODE_STEV, wire.EV_FMT_MODE_SRV6))
    total = min(wire.STEV_BITS if mode == wire.EV_FMT_MODE_STEV else wire.SRV6_BITS, p.exp_bits)
    fmts = []
    while len(fmts) < p.max_fields and rng.random() < 0.85:
        w = rng.choice((4, 8, 16, 16, 32, rng.randrange(1, 40)))
        if sum(fmts) + w > total:
            break
        fmts.append(w)
    fields = []
    for slot in fmts[:rng.randint(0, len(fmts))]:
        width = min(p.field_bits, rng.choice((slot, slot, rng.randrange(0, slot + 1))))
        mask = rng.getrandbits(width) & rng.choice((0, -1, -1, 0xF0F0F0F0, 0x000F, 0x8001))
        k = bin(mask).count("1")
        fields.append((width, rng.getrandbits(width), rng.getrandbits(32), rng.getrandbits(k) if k else
                       rng.getrandbits(32), mask))
    if len(fields) >= 2 and rng.random() < 0.2 and fields[0][0] < p.field_bits:     # wider than its slot
        fields[0] = (fields[0][0] + 1,) + fields[0][1:]
        fields[1] = (max(0, fields[1][0] - 1), 0, 0, 0, 0)
    prof = fit(profile(mode, fmts, fields), p)
    if rng.random() < refuse:
        prof["fields"] = [dict(f) for f in prof["fields"]]
        rule, n = rng.randrange(4), prof["field_count"]
        if rule == 0:
            prof["ev_fmt_mode"] = rng.choice((0, 3, wire.EV_FMT_MODE_UDP, 7))
        elif rule == 1 and n and prof["fields"][0]["width"] < wire.EV_FIELD_BITS:
            f = prof["fields"][0]
            f[rng.choice(("init_val", "mask"))] |= 1 << rng.randrange(f["width"], wire.EV_FIELD_BITS)
        elif rule == 2 and n and prof["fields"][0]["mask"]:
            prof["fields"][0]["max_val"] = 1 << bin(prof["fields"][0]["mask"]).count("1")
        elif prof["fmt_field_count"] < p.max_fields:
            prof["fmt_fields"] = prof["fmt_fields"] + [min(total, 255)]
            prof["fmt_field_count"] += 1
        if refusal(prof, p) is None:
            prof["ev_fmt_mode"] = wire.EV_FMT_MODE_UDP
    return prof


def random_ev(rng, bits, taken):
    """Mostly valid EVs (the bits past the ``taken`` ones clear), some with the lowest or the highest
    of them set, some any bits."""
    ev, unused = rng.getrandbits(bits), bits - taken
    r = rng.random()
    if unused and r < 0.7:
        ev &= ~((1 << unused) - 1)
    elif unused and r < 0.85:
        ev = (ev & ~((1 << unused) - 1)) | 1 << rng.choice((0, unused - 1))
    return ev


#: Requests per expander profile.
EV_PHASE = 1000


def ev_expander(component, rng):
    """A new whole profile every ``EV_PHASE`` requests, STEV and SRv6 in turn, every fourth one (from
    the second) refused (``random_profile``: the one before stays); its requests: EVs with the
    unused bits clear (expanded) and, by turns, the lowest or the highest unused bit set or any bits
    (``bad_ev``)."""
    p = component.params
    state = {"sent": 0, "taken": 0}

    def produce():
        items, n = [], state["sent"]
        state["sent"] += 1
        if n % EV_PHASE == 0:
            k = n // EV_PHASE
            prof = random_profile(rng, p, mode=(wire.EV_FMT_MODE_STEV, wire.EV_FMT_MODE_SRV6)[k % 2],
                                  refuse=float(k % 4 == 1))
            items.append({"cmd": prof})
            if refusal(prof, p) is None:
                state["taken"] = consumed(prof)
        return items + [{"ev": random_ev(rng, p.ev_bits, state["taken"])}]
    return _exact(produce)


# --- SDR-RDMA chunk bitmap ------------------------------------------------------------------------------

def chunk_bitmap(component, rng):
    """Messages posted, their packets sent and the message completed, several at a time in different
    slots: each message (a random chunk size and length that fit a slot) gets every offset once in a
    random order, interleaved with duplicates, offsets past its length, packets of a wrong generation
    and malformed ones (a QP outside the receiver's, a truncated packet); ``complete`` follows its
    last packet, then a late packet (``no_slot``). Now and then a post to another message of a busy
    slot (the old message's packets then find no slot) and a rejected command (zero or oversized
    length, a chunk of 0 or past ``max_chunk``, a generation past ``generations``, a complete of a
    message the slot does not hold)."""
    p = component.params
    template = bytes(sdr_packet(0, 0, qp_base=p.qp_base, generations=p.generations, msg_bits=p.msg_bits,
                                user_bits=p.user_bits, payload=bytes(16)))
    short = bytes(template[:wire.SDR_MIN_LENGTH - 1])
    chunks = [c for c in (1, 2, 3, 4, 5, 8, 16, 32, 64) if c <= p.max_chunk]

    def raw_of(msg, offset, gen, channel, qp=None):
        raw = bytearray(template)
        dqpn = p.qp_base + gen + p.generations * channel if qp is None else qp
        raw[wire.BTH_DQPN_AT + 1:wire.BTH_DQPN_AT + 4] = dqpn.to_bytes(3, "big")
        imm = msg << (32 - p.msg_bits) | (offset << p.user_bits) | rng.getrandbits(p.user_bits)
        struct.pack_into("!I", raw, wire.IMMDT_OFFSET, imm & 0xFFFFFFFF)
        return raw

    def beat(raw):
        b, = beats_of(bytes(raw), {"port": 0}, p.data_bytes)
        return b

    active = {}            # slot -> [msg, gen, queue of beats]
    state = {"next": 0, "opened": False}

    def new_message(slot):
        msg = (slot + p.msg_slots * state["next"]) % (1 << p.msg_bits)
        state["next"] += 1
        chunk = rng.choice(chunks)
        most = min(1 << p.offset_bits, p.slot_words * (p.word_bits // chunk) * chunk)
        n_pkts = rng.choice((1, chunk, rng.randrange(1, most + 1), most, min(most, 3 * chunk + 1)))
        gen, channel = rng.randrange(p.generations), rng.randrange(p.channels)
        offsets = list(range(n_pkts))
        rng.shuffle(offsets)
        queue = []
        for k, offset in enumerate(offsets):
            queue.append(beat(raw_of(msg, offset, gen, rng.randrange(p.channels))))
            r = rng.randrange(16)
            if r == 0:
                queue.append(beat(raw_of(msg, offsets[rng.randrange(k + 1)], gen, channel)))
            elif r == 1 and n_pkts < 1 << p.offset_bits:         # an offset past the message's length
                queue.append(beat(raw_of(msg, rng.randrange(n_pkts, 1 << p.offset_bits), gen, channel)))
            elif r == 2 and p.generations > 1:
                queue.append(beat(raw_of(msg, offset, (gen + 1 + rng.randrange(p.generations - 1))
                                         % p.generations, channel)))
        queue.reverse()                 # popped from the end
        active[slot] = [msg, gen, queue]
        return {"cmd": {"op": OP_POST, "msg": msg, "gen": gen, "n_pkts": n_pkts, "chunk": chunk}}

    def rejected():
        r = rng.randrange(5)
        msg = rng.randrange(1 << p.msg_bits)
        if r == 0:
            return {"op": OP_POST, "msg": msg, "gen": 0, "n_pkts": 0, "chunk": 1}
        if r == 1:
            return {"op": OP_POST, "msg": msg, "gen": 0, "n_pkts": 4, "chunk": rng.choice((0, p.max_chunk + 1))}
        if r == 2:
            return {"op": OP_POST, "msg": msg, "gen": p.generations, "n_pkts": 4, "chunk": 1}
        if r == 3:
            return {"op": OP_POST, "msg": msg, "gen": 0, "chunk": 1,
                    "n_pkts": min(1 << p.offset_bits, p.slot_words * p.word_bits) + 1}
        held = {m for m, _, _ in active.values()}
        while msg in held:
            msg = (msg + 1) % (1 << p.msg_bits)
        return {"op": OP_COMPLETE, "msg": msg}

    live = min(6, p.msg_slots)
    outside = (p.qp_base + p.generations * p.channels) % (1 << 24)

    def produce():
        if not state["opened"]:               # a two-packet message of one chunk: each outcome once, its first
            state["opened"] = True            # packet of the shortest length taken (SDR_MIN_LENGTH: no payload)
            return [{"cmd": {"op": OP_POST, "msg": 0, "gen": 0, "n_pkts": 2, "chunk": 2}},
                    beat(raw_of(0, 0, 0, 0)[:wire.SDR_MIN_LENGTH]), beat(raw_of(0, 0, 0, 0)), beat(raw_of(0, 1, 0, 0)),
                    beat(raw_of(0, 2, 0, 0)), beat(raw_of(0, 0, min(1, p.generations - 1), 0)),
                    {"cmd": {"op": OP_COMPLETE, "msg": 0}},
                    beat(raw_of(0, 1, 0, 0)), beat(raw_of(0, 0, 0, 0, qp=outside)), beat(short),
                    {"cmd": rejected()}]
        items = []
        while len(active) < live:
            items.append(new_message(rng.choice([s for s in range(p.msg_slots) if s not in active])))
        slot = rng.choice(list(active))
        msg, gen, queue = active[slot]
        r = rng.randrange(400)
        if r == 0:                            # a post over a busy slot: its message's packets find no slot
            items.append(new_message(slot))
            return items + queue[-3:]
        if r == 1:
            return items + [{"cmd": rejected()}]
        if r < 4:
            return items + [beat(raw_of(msg, 0, gen, 0, qp=outside))]
        if r < 6:
            return items + [beat(short)]
        items.append(queue.pop())
        if not queue:
            del active[slot]
            items += [{"cmd": {"op": OP_COMPLETE, "msg": msg}}, beat(raw_of(msg, 0, gen, 0))]   # late: no_slot
        return items
    return _exact(produce)


# --- ESA aggregator (ATP and SwitchML baselines) ----------------------------------------------------------

#: Offset of the IPv4 header's TOS byte (DSCP and ECN) in an Ethernet frame.
IP_TOS = 15

#: Chances per contribution: lost, sent again flagged resend, sent again plain, overflow-flagged, followed by
#: a stray or early ACK, followed by a packet that is not a contribution; and a round's values near the int32
#: bounds (the clamp and ATP's bound).
AGG_LOSS, AGG_RESEND, AGG_DUP, AGG_OVERFLOW, AGG_ACK, AGG_JUNK, AGG_HUGE = 0.05, 0.1, 0.1, 0.05, 0.05, 0.03, 0.1
#: Chances per contribution: the INA ECN flag set, the IP header's ECN field CE; per round: a small job+seq (1
#: and up: the values next to 0, the free slot's), values exactly at the int32 bounds (per huge round).
AGG_ECN, AGG_CE, AGG_SMALL_JOBSEQ, AGG_EXACT = 0.1, 0.1, 0.05, 0.3
#: Values at and next to the int32 bounds (the clamp's and ATP's comparisons at their edges).
AGG_EDGES = (wire.INT32_MAX, wire.INT32_MAX - 1, -wire.INT32_MAX, wire.INT32_MIN, -1, 0, 1)
#: Episodes (jobs started together, their rounds, the ACKs) drawn once and sent round after round (scapy builds a
#: few hundred packets a second: the soak's pool, see testbenches/test_soak.py).
AGG_EPISODES = 60


#: The kinds of packet that are no valid contribution (``aggregator_junk``).
AGG_JUNK_KINDS = 9


def aggregator_junk(rng, values, kind, slots=1):
    """Not a valid contribution: other traffic, truncated, oversized, a bad fan-in or bitmap, a reserved flag,
    a pool index past the ``slots``, an INA packet's bytes as another EtherType or another IP protocol."""
    if kind == 6:
        return ina_packet(0, 1, slots + rng.randrange(2), [1] * values)
    if kind in (7, 8):
        raw = bytearray(bytes(ina_packet(0, 1, 0, [1] * values)))
        if kind == 7:
            raw[12:14] = b"\x86\xdd"          # EtherType IPv6
        else:
            raw[23] = 6                         # IP protocol TCP
        return bytes(raw)
    if kind == 0:
        return roce_packet(qp=rng.randrange(1 << 24), payload=rng.randbytes(rng.randrange(300)))
    if kind == 1:
        return bytes(ina_packet(0, 1, 0, [1] * values))[:rng.randrange(30, 55 + 4 * values)]
    if kind == 2:
        return ina_packet(0, 1, 0, [1] * (values + rng.randrange(1, 40)))
    if kind == 3:
        return ina_packet(0, 1, 0, [1] * values, fanin=rng.choice([0, 1, 33]))
    if kind == 4:
        return ina_packet(0, 1, 0, [1] * values, bitmap=rng.choice([0, 3, 1 << 31]))
    return ina_packet(0, 1, 0, [1] * values, **{rng.choice(["collision", "evict", "result", "resv"]): 1})


def aggregator(component, rng):
    """Jobs (1 to 3 at a time, fan-in 2..workers, priority 0..3: equal ones too) whose rounds share the slots and
    collide (ATP/ESA: round r of job j at slot (3j + r) mod slots; SwitchML: the job's own range of the pool,
    the set flipping each use), workers' contributions interleaved at random with every event of the
    counters by chance (see the ``AGG_*`` rates): losses, resends, plain duplicates (also of finished
    rounds), overflow-flagged contributions, stray and early ACKs, junk, ECN (the INA flag, the IP header's CE),
    small job+seqs, values near and at the int32 bounds. Each
    ATP/ESA round ends with the PS's ACK (it frees the slot), so slots never stay taken; a SwitchML wave
    ends with the lost contributions retransmitted. ``AGG_EPISODES`` episodes, drawn once, repeat; the first
    ends with one packet of each junk kind (``passed``, ``malformed``, ``bad_header`` by construction)."""
    p = component.params
    W, V, P, switchml = p.workers, p.values, p.slots, p.policy == "switchml"
    job = [0]

    def items(packet, port):
        return _beats(component, packet, port)

    def produce():
        jobs = rng.randrange(1, 4)
        first, job[0] = job[0], job[0] + jobs
        sizes = [max(P // jobs + (j < P % jobs), 1) for j in range(jobs)]
        rounds = []
        for j in range(jobs):
            fanin = rng.randrange(2, W + 1)
            base = sum(sizes[:j]) % P
            for r in range(rng.randrange(1, 5)):
                huge = rng.random() < AGG_HUGE
                bound = (1 << 31) - rng.randrange(3) if huge else 1000
                grads = [[rng.choice(AGG_EDGES) if huge and rng.random() < AGG_EXACT else rng.randrange(-bound, bound)
                          for _ in range(V)] for _ in range(fanin)]
                if switchml:
                    index = (wire.INA_SET_BIT if ((first + j) + r // sizes[j]) % 2 else 0) | (base + r % sizes[j]) % P
                else:
                    index = (3 * (first + j) + r) % P
                jobseq = r + 1 if rng.random() < AGG_SMALL_JOBSEQ else (((first + j) & 0x7FFF) + 1 << 16) | r
                rounds.append(dict(jobseq=jobseq, index=index,
                                   priority=rng.randrange(4), fanin=fanin, grads=grads))
        order = [(rnd, w) for rnd in rounds for w in rng.sample(range(rnd["fanin"]), rnd["fanin"])]
        rng.shuffle(order)
        out, sent, lost = [], [], []

        def contribution(rnd, w, **flags):
            raw = bytearray(bytes(ina_packet(w, rnd["jobseq"], rnd["index"], rnd["grads"][w], fanin=rnd["fanin"],
                                             priority=rnd["priority"], ecn=int(rng.random() < AGG_ECN), **flags)))
            if rng.random() < AGG_CE:
                raw[IP_TOS] |= wire.ECN_CE          # the IP header's ECN field (its checksum is not checked)
            return bytes(raw)
        for rnd, w in order:
            if rng.random() < AGG_LOSS:
                lost.append((rnd, w))
                continue
            out += items(contribution(rnd, w, overflow=int(rng.random() < AGG_OVERFLOW)), 1 + w)
            sent.append((rnd, w))
            if not switchml and rng.random() < AGG_RESEND:
                out += items(contribution(rnd, w, resend=1), 1 + w)
            if rng.random() < AGG_DUP:
                d, dw = rng.choice(sent)
                out += items(contribution(d, dw), 1 + dw)
            if not switchml and rng.random() < AGG_ACK:
                js = rnd["jobseq"] if rng.random() < 0.5 else 0xDEAD0000 | rng.randrange(1 << 16)
                out += items(ina_packet(0, js, rnd["index"], [0] * V, fanin=rnd["fanin"], ack=1,
                                        overflow=int(rng.random() < 0.3), resend=int(rng.random() < 0.3)), 0)
            if rng.random() < AGG_JUNK:
                out += items(aggregator_junk(rng, V, rng.randrange(AGG_JUNK_KINDS), P), rng.randrange(W + 1))
        for rnd, w in lost:
            out += items(contribution(rnd, w, **({} if switchml else {"resend": 1})), 1 + w)
        if not switchml:
            for rnd in rounds:
                out += items(ina_packet(0, rnd["jobseq"], rnd["index"], [0] * V, fanin=rnd["fanin"], ack=1,
                                        bitmap=(1 << rnd["fanin"]) - 1), 0)
        return out
    episodes, turn = [produce() for _ in range(AGG_EPISODES)], [0]
    episodes[0] += [beat for kind in range(AGG_JUNK_KINDS) for beat in items(aggregator_junk(rng, V, kind, P), 1)]

    def again():
        turn[0] += 1
        return episodes[(turn[0] - 1) % len(episodes)]
    return _exact(again)


# --- MRC EV selector --------------------------------------------------------------------------------------

#: Weights of the EV selector's requests: no event, then each kind of ``EVENT_KINDS``, then an undefined code.
EV_WEIGHTS = (20, 20, 15, 15, 15, 3, 10, 2)
#: Each ``EV_CYCLE`` requests: a drought (``EV_DROUGHT`` requests of losses and denials only: slots go vacant,
#: losses are suppressed, selections stall), then a flood (``EV_FLOOD`` backups only: the slots refill, the
#: FIFOs overflow), then the mix of ``EV_WEIGHTS``.
EV_DROUGHT, EV_FLOOD, EV_CYCLE = 150, 40, 600


def ev_selector(component, rng):
    """Requests of every kind against the selector's state: a shadow ``EvSelectorModel`` fed the same requests
    picks, most of the time, a usable slot and the EV it holds now (so ``ecn``, ``trim``, ``loss``, ``deny``
    act instead of being ``stale``) and a probe pool entry's EV (so probes succeed, fail and restore); otherwise a
    random EV of a small set. Backups fill every slot first (``ev_requests``'s opening) and come back at random, with a
    drought and a flood every ``EV_CYCLE`` requests (vacant slots, ``demote_suppressed``, ``no_ev``, the pool
    and the FIFOs full); ``want`` is random; undefined kind codes too."""
    p = component.params
    shadow = EvSelectorModel(p)
    universe = p.n_ev + p.planes * p.backup_depth + p.probe_slots
    state = {"n": 0}

    def ev_of(slot):
        return shadow.slots[slot][0] if rng.random() < 0.8 else rng.randrange(universe)

    def request():
        n, state["n"] = state["n"], state["n"] + 1
        if n < p.n_ev:
            return {"want": 0, "event": {"valid": 1, "kind": EVENT_KINDS.index("backup"), "plane": n % p.planes,
                                         "ev": n}}
        phase = (n - p.n_ev) % EV_CYCLE
        weights = [0] * len(EV_WEIGHTS) if phase < EV_DROUGHT + EV_FLOOD else list(EV_WEIGHTS)
        if phase < EV_DROUGHT:
            weights[1 + EVENT_KINDS.index("loss")], weights[1 + EVENT_KINDS.index("deny")] = 3, 2
        elif phase < EV_DROUGHT + EV_FLOOD:
            weights[1 + EVENT_KINDS.index("backup")] = 1
        code = rng.choices(range(len(weights)), weights)[0] - 1
        usable = [k for k, (_, st) in enumerate(shadow.slots) if st in (GOOD, SKIP)]
        slot = rng.choice(usable) if usable and rng.random() < 0.8 else rng.randrange(p.n_ev)
        if code < 0:
            return {"want": rng.random() < 0.7, "event": {"valid": 0}}
        if code >= len(EVENT_KINDS):
            return {"want": rng.random() < 0.7, "event": {"valid": 1, "kind": code, "slot": slot,
                                                          "ev": ev_of(slot)}}
        kind = EVENT_KINDS[code]
        event = {"valid": 1, "kind": code}
        if kind == "backup":
            event.update(plane=rng.randrange(p.planes), ev=rng.randrange(universe))
        elif kind == "probe":
            index = rng.randrange(p.probe_slots)
            entry = shadow.pool[index]
            event.update(index=index, ok=int(rng.random() < 0.8),
                         ev=entry[0] if entry is not None and rng.random() < 0.9 else rng.randrange(universe))
        else:
            event.update(slot=slot, ev=ev_of(slot), last_hop=int(rng.random() < 0.3))
        return {"want": int(rng.random() < 0.7), "event": event}

    def produce():
        item = request()
        item = {"want": int(item["want"]), "event": {"valid": 0, "kind": 0, "slot": 0, "ev": 0, "last_hop": 0,
                                                     "index": 0, "ok": 0, "plane": 0, **item["event"]}}
        shadow.tick(item["want"], shadow.decode(item["event"])[0])
        return [item]
    return _exact(produce)


# --- DBLP bounded-loss round tracker ------------------------------------------------------------------------

#: Chances per round: a packet lost (later resent with RETX, as a NACK's answer would), duplicated; the round
#: shuffled, given a random id (a slot collision, a round id wrapping), followed by a malformed packet or by a
#: late packet of an earlier round; a phase-table row written (sometimes a rejected one).
DBLP_LOSS, DBLP_DUP, DBLP_SHUFFLE, DBLP_RANDOM_ID, DBLP_MALFORMED, DBLP_LATE, DBLP_CFG = (
    0.1, 0.05, 0.5, 0.3, 0.05, 0.1, 0.05)
#: Chance that a round's lost packets are never resent (it closes BOUNDED or ABORT at its deadline).
DBLP_ABANDON = 0.3


def _dblp_malformed(p):
    """One packet of each way a shim is malformed (as testbenches/test_bounded_loss_tracker.py names them)."""
    good = dict(job=1, round=2, idx=0, cnt=4)
    return [dblp_packet(ver=2, **good), dblp_packet(fresv=1, **good), dblp_packet(resv=1, **good),
            dblp_packet(resv2=1, **good), dblp_packet(phase=p.phases, **good),
            dblp_packet(job=1, round=2, idx=0, cnt=0), dblp_packet(job=1, round=2, idx=0, cnt=p.e_max + 1),
            dblp_packet(job=1, round=2, idx=4, cnt=4), bytes(dblp_packet(**good))[:wire.DBLP_HEADER_BYTES - 1],
            dblp_packet(port=p.port + 1, **good)]


def bounded_loss_tracker(component, rng):
    """The phase table configured first (random tau and deadline per phase; phase 0 tau >= 1/2), then rounds
    of random E on random phases under loss, duplicates, reordering, slot collisions, malformed shims and late
    packets (see the ``DBLP_*`` rates), the lost packets resent (RETX) some rounds later (some rounds close FULL
    after NACKs) or never (``DBLP_ABANDON``: BOUNDED or ABORT at the deadline); phase-table writes mid-traffic. The
    opening sends, by construction: a round of one packet to the last slot but two before anything else (it waits
    for the clear engine's wipe of that slot after reset, whose order tells), one packet of each malformed kind,
    a packet of the header alone (the shortest well-formed one), a round of one packet (``full``), a whole round
    of ``e_max`` packets, and the configuration rejected rows
    (``cfg_rejected``) of each one reason (a phase past the table, tau past 255, a deadline of 0 or past its
    width) and a row of the shortest deadline, 1."""
    p = component.params
    template = bytes(dblp_packet(payload=bytes(4), rng=rng))
    malformed = [bytes(raw) for raw in _dblp_malformed(p)]
    top = (1 << p.deadline_bits) - 1

    def raw_packet(job, rnd, idx, cnt, phase, retx=False):
        raw = bytearray(template)
        flags = (wire.DBLP_LAST if idx == cnt - 1 else 0) | (wire.DBLP_RETX if retx else 0)
        struct.pack_into(wire.DBLP_STRUCT, raw, wire.DBLP_OFFSET, wire.DBLP_VERSION << 4 | flags, phase << 4,
                         job, rnd & 0xFFFF, idx, cnt, 0)
        return bytes(raw)

    def packet(*args, **kwargs):
        return _beats(component, raw_packet(*args, **kwargs))

    def rejected():
        return {"cmd": rng.choice([{"phase": p.phases, "tau": 0, "deadline": 1},
                                   {"phase": rng.randrange(p.phases), "tau": 256, "deadline": 100},
                                   {"phase": rng.randrange(p.phases), "tau": 10, "deadline": 0},
                                   {"phase": rng.randrange(p.phases), "tau": 10, "deadline": top + 1}])}

    def row():
        return {"cmd": {"phase": rng.randrange(p.phases), "tau": rng.randrange(256),
                        "deadline": rng.randrange(1, min(300, top) + 1)}}
    def deadline():
        return rng.randrange(min(30, top), min(200, top) + 1)
    opening = [{"cmd": {"phase": 0, "tau": rng.randrange(128, 256), "deadline": min(1000, top)}},
               *({"cmd": {"phase": ph, "tau": rng.randrange(128), "deadline": deadline()}}
                 for ph in range(1, p.phases)),
               {"cmd": {"phase": p.phases, "tau": 0, "deadline": 1}},
               {"cmd": {"phase": p.phases - 1, "tau": 0, "deadline": 1}}]
    opening = packet(0, p.rounds - 3, 0, 1, 0) + opening + [
        {"cmd": {"phase": 0, "tau": 256, "deadline": 100}}, {"cmd": {"phase": 0, "tau": 10, "deadline": 0}},
        {"cmd": {"phase": 0, "tau": 10, "deadline": top + 1}},
        {"cmd": {"phase": p.phases - 1, "tau": rng.randrange(128), "deadline": deadline()}}]
    opening += [beat for raw in malformed for beat in _beats(component, raw)] + packet(3, 0, 0, 1, 0)
    opening += _beats(component, raw_packet(2, p.rounds - 4, 0, 1, 0)[:wire.DBLP_HEADER_BYTES])
    opening += [beat for idx in range(p.e_max) for beat in packet(1, p.rounds - 2, idx, p.e_max, 0)]
    state = {"n": 0, "opening": opening}
    pending, earlier = collections.deque(), []

    def produce():
        out = []
        while not out:                  # a round may be all lost, and nothing else sent with it
            out = next_round()
        return out

    def next_round():
        if state["opening"]:
            out, state["opening"] = state["opening"], None
            return out
        n, state["n"] = state["n"], state["n"] + 1
        job, phase = rng.randrange(3), rng.randrange(p.phases)
        rnd = rng.randrange(1 << 16) if rng.random() < DBLP_RANDOM_ID else n % (2 * p.rounds)
        cnt = rng.choice([1, 2, rng.randrange(1, p.e_max + 1)])
        sent = [idx for idx in range(cnt) if rng.random() >= DBLP_LOSS]
        sent += [rng.randrange(cnt) for _ in range(cnt) if rng.random() < DBLP_DUP]
        if rng.random() < DBLP_SHUFFLE:
            rng.shuffle(sent)
        out = [beat for idx in sent for beat in packet(job, rnd, idx, cnt, phase)]
        lost = [idx for idx in range(cnt) if idx not in sent]
        if lost and rng.random() >= DBLP_ABANDON:
            pending.append((n + rng.randrange(1, 6), [beat for idx in lost
                                                      for beat in packet(job, rnd, idx, cnt, phase, retx=True)]))
        while pending and pending[0][0] <= n:
            out += pending.popleft()[1]
        if rng.random() < DBLP_MALFORMED:
            out += _beats(component, rng.choice(malformed))
        if earlier and rng.random() < DBLP_LATE:
            out += rng.choice(earlier)
        earlier[:] = (earlier + [packet(job, rnd, 0, cnt, phase)])[-8:]
        if rng.random() < DBLP_CFG:
            out.append(row() if rng.random() < 0.8 else rejected())
        return out
    return _exact(produce)


# --- Spillway switch side -----------------------------------------------------------------------------

#: Shares of the switch side's packets: multi-beat (at most ``mtu``), longer than ``mtu`` (a spill of one is
#: ``spill_oversize``), longer than the ingress FIFO (its tail discarded: ``malformed``), malformed, to a
#: port past ``ports``; and the RETURN frames on the return link per packet (most of them the switch refuses,
#: not having asked for them: 2 a packet keep every port's returns frequent enough that its ports drain
#: whole, and forward again).
SPILL_LONG, SPILL_OVER_MTU, SPILL_GIANT, SPILL_MALFORMED, SPILL_BAD_PORT = 0.2, 0.05, 0.01, 0.03, 0.02
SPILL_RETURNS = 2.0


def spill_switch(component, rng):
    """Packets of every egress port and size, with the return link driven as a spill node would, open loop.

    Each port's packets are one flow (its own 5-tuple: a RETURN frame of port ``q`` carries that flow, so
    every frame the switch accepts re-injects a packet of a flow it spilled); sizes from one beat to past
    ``mtu`` and past the ingress FIFO, random payload bytes, and malformed packets of each kind the parser
    tells (short, not IPv4, IP options, not UDP, a port past ``ports``). On the return link (the command
    stream): RETURN frames of random ports with each port's next ``seq`` (the switch accepts one only while
    it has asked that port for a packet: else ``return_malformed``), inner frames of one beat to past the
    return slot, and frames that are no RETURN (another EtherType or op, 22 bytes or fewer)."""
    from models.spillway.arrival import flow_of
    from models.spillway.link import H, spill_header
    p = component.params
    W, P = p.data_bytes, p.ports
    heads = []
    for q in range(P):                                      # port q's flow: q mod flows, its own 5-tuple
        sport = next(s for s in range(49152, 65536)
                     if flow_of(bytes(roce_packet(src=f"10.1.{q}.1", sport=s)), p.flows) == q % p.flows)
        heads.append(bytes(roce_packet(src=f"10.1.{q}.1", sport=sport))[:wire.UDP_HEADER_END + 12])
    seq = [0] * P

    def packet():
        q, size = rng.randrange(P), rng.randrange(wire.UDP_HEADER_END, W + 1)
        draw = rng.random()
        if draw < SPILL_LONG:
            size = rng.randrange(W + 1, p.mtu + 1)
        elif (draw := draw - SPILL_LONG) < SPILL_OVER_MTU:
            size = rng.randrange(p.mtu + 1, max(p.mtu + 2, min(p.buffer * W, 2 * p.mtu)))
        elif (draw := draw - SPILL_OVER_MTU) < SPILL_GIANT:
            size = rng.randrange(p.buffer * W + 1, (p.buffer + 4) * W)
        raw = bytearray((heads[q] + rng.randbytes(max(0, size - len(heads[q]))))[:size])
        draw -= SPILL_GIANT
        if 0 <= draw < SPILL_MALFORMED:
            kind = rng.randrange(4)
            if kind == 0:
                raw = raw[:rng.randrange(1, wire.UDP_HEADER_END)]
            else:
                at, value = ((wire.ETHERTYPE_AT, 0x86), (wire.IP_VERSION_IHL_AT, 0x46),
                             (wire.IP_PROTO_AT, 6))[kind - 1]
                raw[at] = value
        elif 0 <= draw - SPILL_MALFORMED < SPILL_BAD_PORT:
            q = rng.choice([P, 255])
        return _beats(component, raw, q)

    def returned():
        q = rng.randrange(P)
        frame = spill_header(wire.SPILL_RETURN, q, q % p.flows, seq[q])
        seq[q] = (seq[q] + 1) & 0xFFFF
        draw = rng.random()
        inner = rng.randbytes(rng.randrange(1, W - H) if draw < 0.7 else rng.randrange(1, p.mtu + 1) if draw < 0.9
                              else rng.randrange(p.mtu + 1, p.mtu + 2 * W))
        raw = bytearray(frame + inner)
        kind = rng.randrange(16)
        if kind == 0:
            raw[wire.ETHERTYPE_AT] ^= 0x40
        elif kind == 1:
            raw[wire.SPILL_OP_AT] = wire.SPILL_DATA
        elif kind == 2:
            raw = raw[:rng.randrange(1, len(frame) + 1)]
        elif kind == 3:
            raw[wire.SPILL_PORT_AT] = rng.choice([P, 255])
        return [{"cmd": beat} for beat in beats_of(bytes(raw), {}, W)]

    def produce():
        out = [item for _ in range(int(SPILL_RETURNS + rng.random())) for item in returned()]
        return out + packet()
    return _exact(produce)


# --- Spillway spill node ------------------------------------------------------------------------------

#: Frames of one phase of the spill node's traffic: it fills (DATA frames mostly: ``overflow``), empties
#: (DRAIN frames mostly, some asking for more than it holds: ``drain_empty``) or does both at once.
NODE_PHASE = 300


def spill_node(component, rng):
    """Spill-link frames from the switch in phases that fill the node's FIFOs, empty them, or both: DATA
    frames of random ports with inner frames of one beat to the slot's size and past it (``oversize``),
    DRAIN frames asking for 1 to 255 packets, and malformed frames of each kind ``models.spillway.node``
    tells (shorter than the header, the header alone, another EtherType or op, a port past ``ports``, a
    DRAIN of 0 packets)."""
    from models.headers import NODE_MAC, SWITCH_MAC
    from models.spillway.link import H, spill_header
    from models.spillway.node import slot_beats
    p = component.params
    W, P, B = p.data_bytes, p.ports, slot_beats(p)
    state = {"n": 0, "data": 1.0}
    drain_mac = bytes.fromhex(NODE_MAC.replace(":", "")) + bytes.fromhex(SWITCH_MAC.replace(":", ""))
    assert spill_header(wire.SPILL_DRAIN, 0)[:12] == drain_mac

    def frame():
        if state["n"] % NODE_PHASE == 0 and state["n"]:       # the first phase fills the node: ``overflow``
            state["data"] = rng.choice([0.2, 0.5, 0.5, 0.8, 1.0])
        state["n"] += 1
        q = rng.randrange(P)
        if rng.random() < state["data"]:
            draw = rng.random()
            size = (rng.randrange(1, W - H + 1) if draw < 0.7 else rng.randrange(1, p.mtu + 1) if draw < 0.95
                    else rng.randrange(B * W - H + 1, (B + 2) * W - H))
            raw = bytearray(spill_header(wire.SPILL_DATA, q, rng.randrange(1 << 16), rng.randrange(1 << 16))
                            + rng.randbytes(size))
        else:
            count = rng.choice([1, 1, 1, 2, 3, rng.randrange(1, 256)])
            raw = bytearray(spill_header(wire.SPILL_DRAIN, q, count=count))
        if rng.random() < 0.05:
            kind = rng.randrange(6)
            if kind == 0:
                raw = raw[:rng.randrange(1, H)]
            elif kind == 1:
                raw = bytearray(spill_header(wire.SPILL_DATA, q))
            elif kind == 2:
                raw[wire.ETHERTYPE_AT + 1] ^= 0x01
            elif kind == 3:
                raw[wire.SPILL_OP_AT] = rng.choice([0, wire.SPILL_RETURN, 7])
            elif kind == 4:
                raw[wire.SPILL_PORT_AT] = rng.choice([P, 255])
            else:
                raw = bytearray(spill_header(wire.SPILL_DRAIN, q, count=0))
        return beats_of(bytes(raw), {}, W)
    return _exact(frame)


# --- Switch pipeline, in-switch baseline ------------------------------------------------------------------

#: Share of the in-switch pipeline's packets that are long RoCEv2 ones (two beats: a whole packet-store entry,
#: or more: oversize).
PIPELINE_LONG = 0.2


def pipeline_inswitch(component, rng):
    """The pipeline's line-rate traffic (``tools.traffic.mixed_beats``: RoCEv2 packets and INA rounds in order,
    sent round after round), with long RoCEv2 packets between them: of two beats (a whole packet-store entry)
    and of three or four (past it: ``oversize``), so the packet store writes and reads every beat of an entry."""
    from tools.traffic import mixed_beats
    W, B = component.params.spill.data_bytes, component.params.beats
    pool = mixed_beats(component, 500, rng)
    long = [beats_of(bytes(roce_packet(src=f"10.2.{n % 4}.{n + 1}", sport=49152 + n, qp=n % 64 + 1, psn=n,
                                       payload=rng.randbytes(rng.randrange((B - 1) * W, (B + 2) * W - 64)))),
                     {"port": n % 4}, W) for n in range(64)]
    where = [0]

    def produce():
        beat = pool[where[0] % len(pool)]
        where[0] += 1
        return [beat, *(rng.choice(long) if rng.random() < PIPELINE_LONG else [])]
    return _exact(produce)

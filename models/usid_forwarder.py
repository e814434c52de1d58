"""Golden model of the MRC SRv6 uSID forwarder with ECN and trimming (SPEC section 5), per packet.

Input: an Ethernet / outer IPv6 (next header 41) / inner IPv6 packet, its ingress port, and the
egress queues' depths (data and priority queue of every port, in packets) sampled for this packet.
``forward(packet, port, data_depth, prio_depth)`` returns ``{"verdict", "port", "queue", "packet",
"marked", "decap"}``. The model is transaction-level (``models/contract.py``) on the RTL's streams:
``process("i", descriptor)`` gives ``{"o": [result]}`` (``forward`` of the descriptor's packet, the bytes
past ``HDR_BYTES`` zeros; of a packet that leaves, only the header bytes the deparser sends are
compared), ``process("cfg", write)`` writes one entry of the table.

*Chosen* rules, applied in this order (first that applies decides the verdict):
1. ``malformed``: shorter than Ethernet + IPv6, EtherType not IPv6, outer version not 6, ingress
   port >= ``ports``, or outer payload length != bytes after the outer header (truncated/padded).
2. ``bad_next_header``: outer next header not 41 (IPv6-in-IPv6).
3. ``malformed``: no full inner IPv6 header, inner version not 6, or inner payload length != bytes
   after it.
4. ``hop_limit``: outer hop limit <= 1 (it would expire on the decrement), whatever the lookup.
5. Lookup on the DA's first 48 bits. Equal to ``{locator, my_usid}``: the uSID part is shifted left
   by 16 (``shift_da``) and the shifted DA's first 48 bits are looked up in the exact-match table;
   otherwise the unshifted 48 bits are looked up. A miss: ``no_route``. A hit gives an egress port
   and a decap flag: a *local function uSID* is an entry with the flag set (one per host port).
   Decapsulation: the inner packet goes on (its hop limit untouched); an outer CE is copied into an
   ECT inner traffic class (RFC 6040) and an outer trim DSCP into the inner DSCP. Otherwise the
   packet leaves with outer hop limit - 1 and the (shifted) DA.
6. Queueing on the egress port. A packet whose outermost DSCP is a trim value (trimmed upstream)
   goes to the priority queue (``trim_forwarded``; full: ``trim_overflow``). Otherwise, with the data
   queue not full (``data_depth < data_capacity``), it goes to the data queue (``forwarded``).
   With the data queue full, an MRC data packet (inner next header 17, UDP dport 4791, BTH RC
   SEND/WRITE opcode 0x00-0x0B) is trimmed (``trimmed``): cut to ``trim_len`` bytes if longer
   (its IPv6 payload lengths and UDP length rewritten to match; shorter ones keep their length),
   outermost DSCP set to ``dscp_trim`` (``dscp_trim_last`` on a last-hop port, so the receiver
   tells the two apart) and put on the priority queue; priority queue full: ``trim_overflow``.
   Any other packet: ``data_overflow``.
7. ECN on the data queue only, never on a port whose bit is set in ``last_hop``: a packet whose
   outermost ECN is ECT(0)/ECT(1) is marked CE iff ``d > ecn_kmin`` and ``r < d - ecn_kmin``,
   where ``d`` is the port's data-queue depth and ``r`` the top ``ecn_span_log2`` bits of the LFSR
   (probability (d - kmin) / 2**span_log2, 1 from ``kmin + 2**span_log2`` up). The LFSR is 16-bit
   Galois, x^16 + x^14 + x^13 + x^11 + 1 (right shift, toggle mask 0xB400), seeded with
   ``lfsr_seed`` on reset, and steps once per packet processed (any verdict), after its use.
The table is ``table_entries`` entries, written by index (``cfg``; ``add_route`` is the control plane's
unique-key write), the lowest matching index wins; it is cleared and the LFSR reseeded by ``reset``.
Counters: the verdicts
(``VERDICTS``: packets in = their sum) plus events ``decapsulated`` and ``ce_marked``; all saturate
at ``2**counter_bits - 1``.
"""
from dataclasses import dataclass

from models import wire
from models.contract import Counters, Masked
from models.params import Params, check, param

__all__ = ["UsidForwarderParams", "UsidForwarderModel", "VERDICTS", "EVENTS", "COUNTERS", "shift_da",
           "lfsr_next", "is_mrc_data", "mark_probability", "LFSR_TAPS", "HDR_BYTES"]

VERDICTS = ("forwarded", "trimmed", "trim_forwarded", "malformed", "bad_next_header", "hop_limit",
            "no_route", "data_overflow", "trim_overflow")
EVENTS = ("decapsulated", "ce_marked")
COUNTERS = VERDICTS + EVENTS
#: Galois toggle mask of x^16 + x^14 + x^13 + x^11 + 1 (maximal length, period 65535).
LFSR_TAPS = 0xB400
MASK96 = (1 << 96) - 1
#: Leading packet bytes a descriptor carries: every header of an encapsulated MRC packet.
HDR_BYTES = wire.MRC_HEADER_BYTES


@dataclass(frozen=True, kw_only=True)
class UsidForwarderParams(Params):
    """Parameters of ``UsidForwarder`` and its model."""
    ports: int = param(8, lo=2, hi=64, doc="ports")
    locator: int = param(0xFC000000, lo=0, hi=(1 << 32) - 1, doc="32-bit uSID locator block")
    my_usid: int = param(0x0100, lo=1, hi=0xFFFF, doc="this switch's uN uSID")
    table_entries: int = param(32, lo=1, hi=4096, doc="exact-match table entries")
    last_hop: int = param(0, lo=0, hi=(1 << 64) - 1, doc="bitmask of last-hop ports (never ECN-marked)")
    data_capacity: int = param(64, lo=1, doc="data queue capacity, packets")
    prio_capacity: int = param(16, lo=1, doc="priority queue capacity, packets")
    depth_bits: int = param(16, lo=1, hi=32, doc="width of each queue-depth input")
    ecn_kmin: int = param(16, lo=0, doc="ECN ramp start: no mark at depth <= kmin")
    ecn_span_log2: int = param(4, lo=0, hi=16, doc="ECN ramp length 2**span packets")
    lfsr_seed: int = param(0xACE1, lo=1, hi=0xFFFF, doc="LFSR seed (non-zero)")
    trim_len: int = param(wire.TRIM_LEN, lo=wire.MRC_HEADER_BYTES, hi=9216, doc="trimmed packet length, bytes")
    dscp_trim: int = param(wire.DSCP_TRIM, lo=0, hi=63, doc="DSCP of a packet trimmed on a fabric port")
    dscp_trim_last: int = param(wire.DSCP_TRIM_LAST, lo=0, hi=63, doc="DSCP of a packet trimmed on a last-hop port")
    counter_bits: int = param(32, lo=1, hi=64, doc="counter width (counters saturate)")

    def validate(self):
        if self.last_hop >> self.ports:
            self.fail(f"last_hop = {self.last_hop:#x} flags ports beyond ports = {self.ports}")
        if self.dscp_trim == self.dscp_trim_last:
            self.fail(f"dscp_trim = dscp_trim_last = {self.dscp_trim}: they must differ")
        for name in ("data_capacity", "prio_capacity"):
            if getattr(self, name) >= 1 << self.depth_bits:
                self.fail(f"{name} = {getattr(self, name)} must fit depth_bits = {self.depth_bits}")


def shift_da(da):
    """The 128-bit DA with its 96-bit uSID part shifted left by 16 (the locator kept)."""
    return (da >> 96 << 96) | ((da << 16) & MASK96)


def lfsr_next(state):
    """One step of the 16-bit Galois LFSR (x^16 + x^14 + x^13 + x^11 + 1)."""
    return (state >> 1) ^ (LFSR_TAPS if state & 1 else 0)


def is_mrc_data(packet, inner=wire.INNER_OFFSET):
    """Whether bytes ``packet`` (IPv6 header at ``inner``) carry UDP 4791 with a BTH RC SEND/WRITE."""
    udp = inner + wire.IPV6_BYTES
    return (len(packet) >= udp + wire.UDP_BYTES + wire.BTH_BYTES
            and packet[inner + wire.IPV6_NH_AT] == wire.NH_UDP
            and int.from_bytes(packet[udp + 2:udp + 4], "big") == wire.ROCEV2_PORT
            and packet[udp + wire.UDP_BYTES] <= wire.RC_WRITE_ONLY_IMM)


def mark_probability(depth, params):
    """Oracle: the ECN mark probability of an ECT packet at data-queue ``depth`` on a fabric port,
    averaged over the LFSR's period (65535 non-zero states): the ramp (d - kmin) / 2**span, less
    the missing all-zero state."""
    k = min(max(depth - params.ecn_kmin, 0), 1 << params.ecn_span_log2)
    return max(k * (1 << (16 - params.ecn_span_log2)) - 1, 0) / 65535


def _tc(packet, at):
    return (packet[at] & 0x0F) << 4 | packet[at + 1] >> 4


def _set_tc(out, at, tc):
    out[at] = (out[at] & 0xF0) | tc >> 4
    out[at + 1] = (out[at + 1] & 0x0F) | (tc & 0x0F) << 4


class UsidForwarderModel:
    """Transaction-level model of ``UsidForwarder`` (module docstring), with its ``UsidForwarderParams``."""

    KIND = "transaction"

    def __init__(self, params=None):
        self.params = check(params, UsidForwarderParams)
        self.counters = Counters(COUNTERS, self.params.counter_bits, "saturate")
        self.reset()

    def reset(self):
        self.table = [None] * self.params.table_entries        # per index: (key, port, decap) or None
        self.lfsr = self.params.lfsr_seed
        self.counters.clear()

    @property
    def routes(self):
        """``{key: (port, decap)}`` of the valid entries, the lowest index's for a key held twice."""
        return {entry[0]: entry[1:] for entry in reversed(self.table) if entry is not None}

    def add_route(self, key, port, decap=False):
        """Table entry: a 48-bit ``{locator, uSID}`` key -> egress ``port`` (``decap``: local function),
        written where the key is, else at the lowest free index."""
        p = self.params
        if not 0 <= key < 1 << 48:
            raise ValueError(f"key = {key!r}: must be a 48-bit value")
        if not 0 <= port < p.ports:
            raise ValueError(f"port = {port!r}: must be in 0..{p.ports - 1}")
        held = [k for k, entry in enumerate(self.table) if entry is not None and entry[0] == key]
        free = [k for k, entry in enumerate(self.table) if entry is None]
        if not held and not free:
            raise ValueError(f"table full: table_entries = {p.table_entries}")
        self.table[(held or free)[0]] = (key, port, bool(decap))

    def process(self, port, item):
        """A table write (``cfg``) or a descriptor (``i``): ``{"o": [its result]}``."""
        if port == "cfg":
            self.table[item["index"]] = (item["key"], item["port"], bool(item["decap"])) if item["valid"] else None
            return {}
        length = item["length"]
        raw = item["hdr"].to_bytes(HDR_BYTES, "little")[:min(length, HDR_BYTES)]
        raw += bytes(length - len(raw))
        r = self.forward(raw, item["port"], item["data_depth"], item["prio_depth"])
        result = {"verdict": VERDICTS.index(r["verdict"]), "decap": int(r["decap"]), "marked": int(r["marked"])}
        if r["packet"] is not None:             # the deparser sends hdr[:sent], then the stored bytes
            sent = min(min(length, HDR_BYTES) - wire.IPV6_BYTES * r["decap"], len(r["packet"]))
            result.update(port=r["port"], prio=int(r["queue"] == "prio"), length=len(r["packet"]),
                          hdr=Masked(int.from_bytes(r["packet"][:sent], "little"), (1 << 8 * sent) - 1))
        return {"o": [result]}

    def _count(self, name):
        self.counters.add(name)

    def _done(self, verdict, port=None, queue=None, packet=None, marked=False, decap=False):
        self._count(verdict)
        return {"verdict": verdict, "port": port, "queue": queue, "packet": packet, "marked": marked,
                "decap": decap}

    def forward(self, packet, port, data_depth, prio_depth):
        """One whole packet: its verdict, egress port and queue, output bytes, marked, decapsulated."""
        packet = bytes(packet)
        p = self.params
        if len(data_depth) != p.ports or len(prio_depth) != p.ports:
            raise ValueError(f"data_depth/prio_depth: expected {p.ports} depths each")
        r = self.lfsr >> (16 - p.ecn_span_log2)
        self.lfsr = lfsr_next(self.lfsr)
        o, n = wire.OUTER_OFFSET, len(packet)
        if (n < o + wire.IPV6_BYTES
                or int.from_bytes(packet[wire.ETHERTYPE_AT:wire.ETHERTYPE_AT + 2], "big") != wire.ETHERTYPE_IPV6
                or packet[o] >> 4 != wire.IPV6_VERSION or not 0 <= port < p.ports
                or int.from_bytes(packet[o + 4:o + 6], "big") != n - o - wire.IPV6_BYTES):
            return self._done("malformed")
        if packet[o + wire.IPV6_NH_AT] != wire.NH_IPV6:
            return self._done("bad_next_header")
        i = wire.INNER_OFFSET
        if (n < i + wire.IPV6_BYTES or packet[i] >> 4 != wire.IPV6_VERSION
                or int.from_bytes(packet[i + 4:i + 6], "big") != n - i - wire.IPV6_BYTES):
            return self._done("malformed")
        if packet[o + wire.IPV6_HLIM_AT] <= 1:
            return self._done("hop_limit")
        da = int.from_bytes(packet[o + wire.IPV6_DST_AT:o + wire.IPV6_DST_AT + 16], "big")
        if da >> 80 == p.locator << 16 | p.my_usid:
            da = shift_da(da)
        hit = next((entry[1:] for entry in self.table if entry is not None and entry[0] == da >> 80), None)
        if hit is None:
            return self._done("no_route")
        egress, decap = hit
        mrc = is_mrc_data(packet)
        out = bytearray(packet)
        if decap:
            tc_out, tc_in = _tc(packet, o), _tc(packet, i)
            out = bytearray(packet[:o]) + out[i:]
            if tc_out & 3 == wire.ECN_CE and tc_in & 3 in (wire.ECT0, wire.ECT1):
                tc_in |= wire.ECN_CE
            if tc_out >> 2 in (p.dscp_trim, p.dscp_trim_last):
                tc_in = (tc_out & 0xFC) | (tc_in & 3)
            _set_tc(out, o, tc_in)
            self._count("decapsulated")
        else:
            out[o + wire.IPV6_HLIM_AT] -= 1
            out[o + wire.IPV6_DST_AT:o + wire.IPV6_DST_AT + 16] = da.to_bytes(16, "big")
        tc = _tc(out, o)
        last = bool(p.last_hop >> egress & 1)
        if tc >> 2 in (p.dscp_trim, p.dscp_trim_last):
            if prio_depth[egress] >= p.prio_capacity:
                return self._done("trim_overflow")
            return self._done("trim_forwarded", egress, "prio", bytes(out), decap=decap)
        d = data_depth[egress]
        if d < p.data_capacity:
            marked = (not last and tc & 3 in (wire.ECT0, wire.ECT1) and d > p.ecn_kmin and r < d - p.ecn_kmin)
            if marked:
                _set_tc(out, o, tc | wire.ECN_CE)
                self._count("ce_marked")
            return self._done("forwarded", egress, "data", bytes(out), marked=marked, decap=decap)
        if not mrc:
            return self._done("data_overflow")
        if prio_depth[egress] >= p.prio_capacity:
            return self._done("trim_overflow")
        if len(out) > p.trim_len:
            del out[p.trim_len:]
            headers = [o] if decap else [o, i]
            for at in headers:
                out[at + 4:at + 6] = (p.trim_len - at - wire.IPV6_BYTES).to_bytes(2, "big")
            udp = headers[-1] + wire.IPV6_BYTES
            out[udp + 4:udp + 6] = (p.trim_len - udp).to_bytes(2, "big")
        _set_tc(out, o, ((p.dscp_trim_last if last else p.dscp_trim) << 2) | (tc & 3))
        return self._done("trimmed", egress, "prio", bytes(out), decap=decap)

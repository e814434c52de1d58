"""scapy layers for every header innet uses, and packet builders for the testbenches.

Ethernet, IPv4 and UDP are scapy's own; the RoCEv2 Base Transport Header is
``scapy.contrib.roce.BTH`` (bound to UDP port 4791, ICRC appended as its trailer).
"""
import random
import socket

from scapy.contrib.roce import BTH, opcode
from scapy.fields import (
    BitField,
    ByteField,
    FieldListField,
    IntField,
    ShortField,
    SignedIntField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

from models import wire
from models.wire import DBLP_PORT, DBLP_VERSION, INA_PORT

__all__ = ["Ether", "IP", "UDP", "BTH", "Raw", "roce_packet", "RC_SEND_ONLY", "RC_SEND_MIDDLE",
           "RC_SEND_LAST", "RC_WRITE_ONLY"]

RC_SEND_MIDDLE = opcode("RC", "SEND_MIDDLE")[0]
RC_SEND_LAST = opcode("RC", "SEND_LAST")[0]
RC_SEND_ONLY = opcode("RC", "SEND_ONLY")[0]
RC_WRITE_ONLY = opcode("RC", "RDMA_WRITE_ONLY")[0]


def roce_packet(src="10.0.0.1", dst="10.0.0.2", sport=49152, qp=1, psn=0, op=RC_SEND_ONLY,
                payload=b"", tos=0x02):
    """A RoCEv2 packet: Ethernet / IPv4 (ECT(0) by default) / UDP 4791 / BTH / payload / ICRC."""
    return (Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
            / IP(src=src, dst=dst, tos=tos, ttl=64, id=psn & 0xFFFF)
            / UDP(sport=sport, dport=4791, chksum=0)
            / BTH(opcode=op, dqpn=qp, psn=psn & 0xFFFFFF, ackreq=1)
            / Raw(payload))


# --- INA: ATP-style in-network aggregation shim (SPEC section 3) ---------------------------------


class INA(Packet):
    """ATP-style aggregation header (+ evict/result flags and ESA priority), then int32 values.

    Under SwitchML ``index`` is the pool index: bit 15 the set, bits 14..0 the slot.
    """
    name = "INA"
    fields_desc = [
        XIntField("bitmap", 0), ByteField("fanin", 0),
        BitField("overflow", 0, 1), BitField("resend", 0, 1), BitField("collision", 0, 1),
        BitField("ack", 0, 1), BitField("evict", 0, 1), BitField("result", 0, 1),
        BitField("ecn", 0, 1), BitField("resv", 0, 1),
        XIntField("jobseq", 0), ShortField("index", 0), ByteField("priority", 0),
        FieldListField("values", [], SignedIntField("value", 0)),
    ]


bind_layers(UDP, INA, dport=INA_PORT)


def ina_packet(worker=0, jobseq=0, index=0, values=(), fanin=2, priority=0, ps="10.0.1.1", **fields):
    """A worker's contribution: Ethernet / IPv4 / UDP (checksum 0) / INA with bit ``worker`` set.

    ``fields`` sets any other INA field (flags, ``bitmap``, ``resv``) and wins over the defaults.
    """
    ina = dict(bitmap=1 << worker, fanin=fanin, jobseq=jobseq, index=index, priority=priority,
               values=list(values))
    ina.update(fields)
    return (Ether(dst="02:00:00:00:01:01", src=f"02:00:00:00:00:{worker & 0xFF:02x}")
            / IP(src=f"10.0.0.{worker & 0xFF}", dst=ps, ttl=64)
            / UDP(sport=INA_PORT, dport=INA_PORT, chksum=0)
            / INA(**ina))

__all__ += ["INA", "INA_PORT", "ina_packet"]


# --- SDR-RDMA: RETH and ImmDt after the BTH (SPEC section 6) --------------------------------------

class RETH(Packet):
    """RDMA Extended Transport Header (IBTA 9.3.3): virtual address, rkey, DMA length."""
    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dlen", 0)]

    def guess_payload_class(self, payload):
        bth = self.underlayer
        if isinstance(bth, BTH) and bth.opcode in (wire.RC_WRITE_ONLY_IMM, wire.UC_WRITE_ONLY_IMM):
            return ImmDt
        return Raw


class ImmDt(Packet):
    """Immediate Data Extended Transport Header (IBTA 9.3.5): one 32-bit word."""
    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]

    def guess_payload_class(self, payload):
        return Raw


for _op in wire.IMMDT_OPCODES:
    if _op not in wire.RETH_OPCODES:
        bind_layers(BTH, ImmDt, opcode=_op)
# Bound last, so BTH()/RETH() defaults to the SDR opcode.
for _op in sorted(wire.RETH_OPCODES, key=lambda op: op == wire.SDR_OPCODE):
    bind_layers(BTH, RETH, opcode=_op)


def sdr_imm(msg, offset, user=0, msg_bits=wire.SDR_MSG_BITS, user_bits=wire.SDR_USER_BITS):
    """The 32-bit SDR immediate: message id, packet offset and user bits, most significant first."""
    offset_bits = 32 - msg_bits - user_bits
    for name, value, bits in (("msg", msg, msg_bits), ("offset", offset, offset_bits), ("user", user, user_bits)):
        if not 0 <= value < 1 << bits:
            raise ValueError(f"sdr_imm: {name} = {value} must fit {bits} bits")
    return (msg << (32 - msg_bits)) | (offset << user_bits) | user


def sdr_packet(msg, offset, gen=0, channel=0, user=0, qp_base=0x100, generations=4, payload=b"\0" * 64,
               msg_bits=wire.SDR_MSG_BITS, user_bits=wire.SDR_USER_BITS, psn=0, va=None, rkey=0x5D2,
               op=wire.SDR_OPCODE, src="10.1.0.1", dst="10.2.0.1"):
    """One SDR data packet: Ethernet / IPv4 / UDP 4791 / BTH (UC Write Only Imm) / RETH / ImmDt /
    payload / ICRC, to dest QP ``qp_base + gen + generations * channel``.

    The UDP source port is an ephemeral one derived from the QP (RoCEv2 entropy); ``va`` defaults to
    a buffer at 0x1000_0000 with ``payload``-sized packets placed at their offset.
    """
    dqpn = qp_base + gen + generations * channel
    if va is None:
        va = 0x1000_0000 + offset * len(payload)
    return (Ether(dst="02:00:00:00:02:01", src="02:00:00:00:01:01")
            / IP(src=src, dst=dst, tos=0x02, ttl=64, id=psn & 0xFFFF)
            / UDP(sport=0xC000 | (dqpn & 0x3FFF), dport=wire.ROCEV2_PORT, chksum=0)
            / BTH(opcode=op, dqpn=dqpn, psn=psn & 0xFFFFFF)
            / RETH(va=va, rkey=rkey, dlen=len(payload))
            / ImmDt(imm=sdr_imm(msg, offset, user, msg_bits, user_bits))
            / Raw(payload))


__all__ += ["RETH", "ImmDt", "sdr_imm", "sdr_packet"]


# --- MRC: IPv6-in-IPv6 with SRv6 uSID destination addresses, EV striping (SPEC section 5) -----------

class UsidDA(Packet):
    """An SRv6 uSID destination address (16 bytes): 32-bit locator, six 16-bit uSIDs (0 = end)."""
    name = "UsidDA"
    fields_desc = [XIntField("locator", 0)] + [XShortField(f"u{i}", 0) for i in range(wire.USIDS_PER_DA)]


def usid_address(locator, usids=()):
    """The IPv6 address string of ``locator`` followed by ``usids`` (padded with 0 = end of carrier)."""
    if len(usids) > wire.USIDS_PER_DA:
        raise ValueError(f"usids: at most {wire.USIDS_PER_DA}, got {len(usids)}")
    da = UsidDA(locator=locator, **{f"u{i}": u for i, u in enumerate(usids)})
    return socket.inet_ntop(socket.AF_INET6, bytes(da))


def usid_parts(address):
    """``(locator, [u0..u5])`` of an IPv6 address string (or its 16 bytes / 128-bit integer)."""
    if isinstance(address, int):
        address = address.to_bytes(16, "big")
    elif isinstance(address, str):
        address = socket.inet_pton(socket.AF_INET6, address)
    da = UsidDA(address)
    return da.locator, [getattr(da, f"u{i}") for i in range(wire.USIDS_PER_DA)]


def ev_stripes(ev):
    """``(udp_sport, flow_label)`` carrying a 32-bit EV: sport = EV[15:0], label[15:0] = EV[31:16]."""
    if not 0 <= ev < 1 << wire.EV_BITS:
        raise ValueError(f"ev: must be a 32-bit value, got {ev!r}")
    return ev & 0xFFFF, ev >> wire.EV_SPORT_BITS


def ev_of(packet):
    """The EV of an MRC packet (scapy, either encapsulated or not): from the innermost IPv6 and UDP."""
    inner = packet[IPv6]
    while isinstance(inner.payload, IPv6):
        inner = inner.payload
    return ((inner.fl & 0xFFFF) << wire.EV_SPORT_BITS) | packet[UDP].sport


def mrc_packet(ev=0xC0DE_C000, da="fc00:0:1:2::", src="fd00::1", dst="fd00::2", qp=1, psn=0,
               op=RC_SEND_MIDDLE, payload=b"", dscp=wire.DSCP_MRC_DATA, ecn=wire.ECT0, hlim=64, outer=True):
    """An MRC data packet: Ethernet / outer IPv6 (nh 41, SRv6 uSID ``da``) / inner IPv6 / UDP 4791 / BTH.

    The EV is striped over the UDP source port and both flow labels (``ev_stripes``); both traffic
    classes carry ``dscp``/``ecn``; the UDP checksum is 0 (RoCEv2: the ICRC covers the packet).
    ``outer=False`` gives the decapsulated form (inner IPv6 straight after Ethernet).
    """
    sport, label = ev_stripes(ev)
    tc = (dscp << 2) | ecn
    inner = (IPv6(src=src, dst=dst, tc=tc, fl=label, hlim=64, nh=wire.NH_UDP)
             / UDP(sport=sport, dport=wire.ROCEV2_PORT, chksum=0)
             / BTH(opcode=op, dqpn=qp, psn=psn & 0xFFFFFF, ackreq=1)
             / Raw(payload))
    eth = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01", type=wire.ETHERTYPE_IPV6)
    if not outer:
        return eth / inner
    return eth / IPv6(src=src, dst=da, tc=tc, fl=label, hlim=hlim, nh=wire.NH_IPV6) / inner


__all__ += ["IPv6", "UsidDA", "usid_address", "usid_parts", "ev_stripes", "ev_of", "mrc_packet"]

# --- DBLP: bounded-loss round shim (SPEC section 4) ----------------------------------------------

#: Source of ephemeral ports when a builder is given no ``rng`` (fixed seed: reproducible packets).
_EPHEMERAL = random.Random(0xDB1)


class DBLP(Packet):
    """DBLP round shim: ver, flags (LAST, RETX, 2 reserved), phase, job, round, idx, cnt; then payload."""
    name = "DBLP"
    fields_desc = [
        BitField("ver", DBLP_VERSION, 4), BitField("last", 0, 1), BitField("retx", 0, 1),
        BitField("fresv", 0, 2), BitField("phase", 0, 4), BitField("resv", 0, 4),
        ByteField("job", 0), ShortField("round", 0), ShortField("idx", 0), ShortField("cnt", 1),
        ShortField("resv2", 0),
    ]


def bind_dblp(port=DBLP_PORT):
    """Decode UDP packets to ``port`` as DBLP (``DBLP_PORT`` is bound on import)."""
    bind_layers(UDP, DBLP, dport=port)


bind_dblp()


def dblp_packet(job=0, round=0, idx=0, cnt=1, phase=0, last=0, retx=0, payload=b"", sport=None,
                port=DBLP_PORT, src="10.0.2.1", dst="10.0.3.1", rng=None, **fields):
    """One chunk packet: Ethernet / IPv4 / UDP (ephemeral source port) / DBLP / payload.

    ``sport`` None draws an ephemeral port (49152-65535) from ``rng`` (a ``random.Random``; a fixed
    one when None); ``fields`` sets any other shim field (``ver``, ``fresv``, ``resv``, ``resv2``).
    """
    if sport is None:
        sport = (rng or _EPHEMERAL).randrange(49152, 65536)
    shim = dict(job=job, round=round, idx=idx, cnt=cnt, phase=phase, last=last, retx=retx)
    shim.update(fields)
    return (Ether(dst="02:00:00:00:03:01", src="02:00:00:00:02:01")
            / IP(src=src, dst=dst, ttl=64)
            / UDP(sport=sport, dport=port, chksum=0)
            / DBLP(**shim) / Raw(payload))


def dblp_round(job, round, cnt, phase=0, payload_bytes=8, rng=None, **kw):
    """The ``cnt`` packets of one round in index order, LAST on the final one, payload = idx bytes."""
    return [dblp_packet(job=job, round=round, idx=i, cnt=cnt, phase=phase, last=int(i == cnt - 1),
                        payload=bytes([i & 0xFF]) * payload_bytes, rng=rng, **kw) for i in range(cnt)]


__all__ += ["DBLP", "DBLP_PORT", "bind_dblp", "dblp_packet", "dblp_round"]


# --- Spillway: spill-link shim after an outer Ethernet header (SPEC section 1) --------------------

class Spill(Packet):
    """Spill-link shim (EtherType 0x88B5): op, origin egress port, flow index, per-port sequence
    number, drain count, reserved; DATA and RETURN frames carry the whole original frame after it."""
    name = "Spill"
    fields_desc = [ByteField("op", wire.SPILL_DATA), ByteField("port", 0), ShortField("flow", 0),
                   ShortField("seq", 0), ByteField("count", 0), ByteField("resv", 0)]

    def guess_payload_class(self, payload):
        return Ether if self.op in (wire.SPILL_DATA, wire.SPILL_RETURN) and payload else Raw


bind_layers(Ether, Spill, type=wire.ETHERTYPE_SPILL)

#: Outer Ethernet addresses of spill-link frames (*chosen*: locally administered).
SWITCH_MAC, NODE_MAC = "02:5b:00:00:00:01", "02:5b:00:00:00:02"


def spill_frame(inner, port, flow=0, seq=0, op=wire.SPILL_DATA):
    """A DATA (switch -> node) or RETURN (node -> switch) frame carrying ``inner`` (bytes or scapy)."""
    src, dst = (NODE_MAC, SWITCH_MAC) if op == wire.SPILL_RETURN else (SWITCH_MAC, NODE_MAC)
    return Ether(dst=dst, src=src, type=wire.ETHERTYPE_SPILL) / Spill(op=op, port=port, flow=flow, seq=seq) \
        / Raw(bytes(inner))


def drain_request(port, count=1):
    """A drain request (switch -> node): send back ``count`` packets of ``port``."""
    return Ether(dst=NODE_MAC, src=SWITCH_MAC, type=wire.ETHERTYPE_SPILL) / Spill(op=wire.SPILL_DRAIN, port=port,
                                                                                  count=count)


__all__ += ["Spill", "SWITCH_MAC", "NODE_MAC", "spill_frame", "drain_request"]

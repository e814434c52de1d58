"""scapy layers for every header innet uses, and packet builders for the testbenches.

Ethernet, IPv4 and UDP are scapy's own; the RoCEv2 Base Transport Header is
``scapy.contrib.roce.BTH`` (bound to UDP port 4791, ICRC appended as its trailer).
"""
from scapy.contrib.roce import BTH, opcode
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

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
from scapy.fields import BitField, ByteField, FieldListField, ShortField, SignedIntField, XIntField
from scapy.packet import Packet, bind_layers

#: UDP destination port of INA packets; must equal ``hdl.headers.INA_PORT``.
INA_PORT = 0xBEE0


class INA(Packet):
    """ATP-style aggregation header (+ evict/result flags and ESA priority), then int32 values."""
    name = "INA"
    fields_desc = [
        XIntField("bitmap", 0), ByteField("fanin", 0),
        BitField("overflow", 0, 1), BitField("resend", 0, 1), BitField("collision", 0, 1),
        BitField("ack", 0, 1), BitField("evict", 0, 1), BitField("result", 0, 1),
        BitField("resv", 0, 2),
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


# --- DBLP: bounded-loss round shim (SPEC section 4) ----------------------------------------------
import random  # noqa: E402

from models.wire import DBLP_PORT, DBLP_VERSION  # noqa: E402

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

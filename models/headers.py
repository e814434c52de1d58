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

"""Wire-format constants: offsets, ports, EtherTypes, opcodes, ECN codepoints, INA flags.

Pure Python, written from the protocols' own definitions; ``testbenches/test_headers.py`` checks
every constant against scapy's layers. The golden models use these; the RTL may import them too
(``hdl/headers.py`` checks its layouts against the offsets), so nothing here depends on ``hdl/``.
"""

# --- Layer offsets of Ethernet / IPv4 (no options) / UDP / RoCEv2 BTH -------------------------------
ETH_OFFSET = 0
ETH_BYTES = 14
IP_OFFSET = ETH_OFFSET + ETH_BYTES          # 14
IPV4_BYTES = 20
UDP_OFFSET = IP_OFFSET + IPV4_BYTES         # 34
UDP_BYTES = 8
BTH_OFFSET = UDP_OFFSET + UDP_BYTES         # 42
BTH_BYTES = 12
#: Ethernet + IPv4 + UDP + BTH: 54 bytes, inside the first beat of a 64-byte bus.
ROCE_HEADER_BYTES = BTH_OFFSET + BTH_BYTES
#: Ethernet + IPv4 + UDP: the shortest packet whose 5-tuple can be read.
UDP_HEADER_END = UDP_OFFSET + UDP_BYTES     # 42

# Field offsets used by the models (absolute, in a packet without IP options).
ETHERTYPE_AT = ETH_OFFSET + 12
IP_VERSION_IHL_AT = IP_OFFSET
IP_TOS_AT = IP_OFFSET + 1
IP_PROTO_AT = IP_OFFSET + 9
IP_CHECKSUM_AT = IP_OFFSET + 10
IP_SRC_AT = IP_OFFSET + 12
UDP_SPORT_AT = UDP_OFFSET
UDP_DPORT_AT = UDP_OFFSET + 2
UDP_CHECKSUM_AT = UDP_OFFSET + 6
BTH_OPCODE_AT = BTH_OFFSET
BTH_DQPN_AT = BTH_OFFSET + 4                # 32-bit word: reserved byte, then the 24-bit QP

ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_ARP = 0x0806
IPPROTO_UDP = 17
IPV4_VERSION_IHL5 = 0x45
#: IANA UDP port of RoCEv2.
ROCEV2_PORT = 4791

# --- ECN codepoints (RFC 3168), the low two bits of the IPv4 TOS byte -------------------------------
NOT_ECT, ECT1, ECT0, ECN_CE = 0b00, 0b01, 0b10, 0b11

# --- InfiniBand RC opcodes (IBTA vol. 1, table 38) ----------------------------------------------------
RC_SEND_FIRST, RC_SEND_MIDDLE, RC_SEND_LAST = 0x00, 0x01, 0x02
RC_SEND_LAST_IMM, RC_SEND_ONLY, RC_SEND_ONLY_IMM = 0x03, 0x04, 0x05
RC_WRITE_FIRST, RC_WRITE_MIDDLE, RC_WRITE_LAST = 0x06, 0x07, 0x08
RC_WRITE_LAST_IMM, RC_WRITE_ONLY, RC_WRITE_ONLY_IMM = 0x09, 0x0A, 0x0B
#: RC opcodes that end a message (SEND_LAST, SEND_ONLY, RDMA_WRITE_LAST, RDMA_WRITE_ONLY and
#: their _WITH_IMMEDIATE variants).
LAST_OPCODES = (RC_SEND_LAST, RC_SEND_LAST_IMM, RC_SEND_ONLY, RC_SEND_ONLY_IMM,
                RC_WRITE_LAST, RC_WRITE_LAST_IMM, RC_WRITE_ONLY, RC_WRITE_ONLY_IMM)

# --- INA: ATP-style in-network aggregation shim after UDP (SPEC section 3) ---------------------------
#: UDP destination port of INA packets (*chosen*: 48864 = 0xBEE0, the port SwitchML uses).
INA_PORT = 0xBEE0
INA_OFFSET = UDP_HEADER_END                 # 42
#: bitmap(32) fanin(8) flags(8) jobseq(32) index(16) priority(8)
INA_BYTES = 13
#: Ethernet + IPv4 + UDP + INA header: the int32 values start at this byte.
INA_HEADER_BYTES = INA_OFFSET + INA_BYTES   # 55
#: ``struct`` format of the INA header fields, in wire order.
INA_STRUCT = ">IBBIHB"
INA_INDEX_AT = INA_OFFSET + 10
#: Flag bits of the INA flags byte (byte 5 of the header), most significant first on the wire.
INA_OVERFLOW, INA_RESEND, INA_COLLISION, INA_ACK, INA_EVICT, INA_RESULT = (
    0x80, 0x40, 0x20, 0x10, 0x08, 0x04)
INA_RESV_MASK = 0x03

INT32_MAX = (1 << 31) - 1
INT32_MIN = -(1 << 31)

# --- DBLP: bounded-loss round shim after UDP (SPEC section 4) ----------------------------------------
#: UDP destination port of DBLP packets (*chosen*: 0xBEE8 = 48872, in the IANA-unassigned block
#: 48620-49150 next to INA's 0xBEE0, below the ephemeral range the senders' source ports use).
DBLP_PORT = 0xBEE8
DBLP_OFFSET = UDP_HEADER_END                # 42
#: ver:4 flags:4 | phase:4 rsvd:4 | job:8 | round:16 | idx:16 | cnt:16 | rsvd:16
DBLP_BYTES = 11
#: Ethernet + IPv4 + UDP + DBLP shim: the payload starts at this byte.
DBLP_HEADER_BYTES = DBLP_OFFSET + DBLP_BYTES    # 53
#: ``struct`` format of the shim in wire order: ver/flags, phase/rsvd, job, round, idx, cnt, rsvd.
DBLP_STRUCT = ">BBBHHHH"
DBLP_VERSION = 1
#: Flag bits of the low nibble of byte 0 (most significant first on the wire); the low two are reserved.
DBLP_LAST, DBLP_RETX = 0x8, 0x4
DBLP_FLAGS_RESV = 0x3

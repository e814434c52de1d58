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
#: ``ecn`` is ATP's p4ml.ECN: set on an aggregate when a contribution to its slot was ECN-marked.
INA_OVERFLOW, INA_RESEND, INA_COLLISION, INA_ACK, INA_EVICT, INA_RESULT, INA_ECN = (
    0x80, 0x40, 0x20, 0x10, 0x08, 0x04, 0x02)
INA_RESV_MASK = 0x01
#: SwitchML's set bit: the most significant bit of the pool index (``udp_receiver.p4``).
INA_SET_BIT = 0x8000

INT32_MAX = (1 << 31) - 1
INT32_MIN = -(1 << 31)

# --- SDR-RDMA: UC RDMA Write-with-Immediate carrying a chunk-bitmap update (SPEC section 6) ----------
#: RDMA Extended Transport Header: virtual address (64), rkey (32), DMA length (32).
RETH_OFFSET = BTH_OFFSET + BTH_BYTES        # 54
RETH_BYTES = 16
#: Immediate Data Extended Transport Header: one 32-bit word.
IMMDT_OFFSET = RETH_OFFSET + RETH_BYTES     # 70
IMMDT_BYTES = 4
#: Ethernet + IPv4 + UDP + BTH + RETH + ImmDt of an RDMA_WRITE_ONLY_WITH_IMMEDIATE.
SDR_HEADER_BYTES = IMMDT_OFFSET + IMMDT_BYTES   # 74
#: The invariant CRC trailer of every RoCEv2 packet.
ICRC_BYTES = 4
#: The shortest well-formed SDR packet: headers and ICRC, no payload.
SDR_MIN_LENGTH = SDR_HEADER_BYTES + ICRC_BYTES  # 78
#: Transport bits of the BTH opcode (IBTA vol. 1, table 38): RC 0x00, UC 0x20.
UC_BASE = 0x20
UC_SEND_LAST_IMM, UC_SEND_ONLY_IMM = UC_BASE + RC_SEND_LAST_IMM, UC_BASE + RC_SEND_ONLY_IMM
UC_WRITE_FIRST, UC_WRITE_ONLY = UC_BASE + RC_WRITE_FIRST, UC_BASE + RC_WRITE_ONLY
UC_WRITE_LAST_IMM, UC_WRITE_ONLY_IMM = UC_BASE + RC_WRITE_LAST_IMM, UC_BASE + RC_WRITE_ONLY_IMM
RC_READ_REQUEST = 0x0C
#: Opcodes whose BTH is followed by a RETH (RC and UC RDMA Write First/Only[/Imm], RC Read Request).
RETH_OPCODES = (RC_WRITE_FIRST, RC_WRITE_ONLY, RC_WRITE_ONLY_IMM, RC_READ_REQUEST,
                UC_WRITE_FIRST, UC_WRITE_ONLY, UC_WRITE_ONLY_IMM)
#: Opcodes that carry an ImmDt: right after the BTH, or after the RETH for *_WRITE_ONLY_IMM.
IMMDT_OPCODES = (RC_SEND_LAST_IMM, RC_SEND_ONLY_IMM, RC_WRITE_LAST_IMM, RC_WRITE_ONLY_IMM,
                 UC_SEND_LAST_IMM, UC_SEND_ONLY_IMM, UC_WRITE_LAST_IMM, UC_WRITE_ONLY_IMM)
#: The one opcode SDR data packets use (one UC RDMA Write-with-Immediate per packet).
SDR_OPCODE = UC_WRITE_ONLY_IMM
#: Immediate layout imm[31:22] message id, imm[21:4] packet offset, imm[3:0] user bits (8+22+2 also
#: allowed: the widths are parameters of the block).
SDR_MSG_BITS, SDR_OFFSET_BITS, SDR_USER_BITS = 10, 18, 4

# --- MRC: Ethernet / outer IPv6 (SRv6 uSID DA) / inner IPv6 / UDP / RoCEv2 BTH (SPEC section 5) ------
ETHERTYPE_IPV6 = 0x86DD
IPV6_BYTES = 40
IPV6_VERSION = 6
#: IPv6 next-header values: IPv6-in-IPv6 (outer -> inner) and UDP.
NH_IPV6 = 41
NH_UDP = IPPROTO_UDP
OUTER_OFFSET = ETH_OFFSET + ETH_BYTES       # 14
INNER_OFFSET = OUTER_OFFSET + IPV6_BYTES    # 54
MRC_UDP_OFFSET = INNER_OFFSET + IPV6_BYTES  # 94
MRC_BTH_OFFSET = MRC_UDP_OFFSET + UDP_BYTES  # 102
#: Ethernet + outer IPv6 + inner IPv6 + UDP + BTH: every header of an encapsulated MRC packet.
MRC_HEADER_BYTES = MRC_BTH_OFFSET + BTH_BYTES  # 114
#: Ethernet + IPv6 + UDP + BTH: an MRC packet after decapsulation.
MRC_INNER_HEADER_BYTES = OUTER_OFFSET + IPV6_BYTES + UDP_BYTES + BTH_BYTES  # 74
# Field offsets inside an IPv6 header.
IPV6_PLEN_AT = 4
IPV6_NH_AT = 6
IPV6_HLIM_AT = 7
IPV6_SRC_AT = 8
IPV6_DST_AT = 24
#: An SRv6 uSID destination address: a 32-bit locator, then six 16-bit uSIDs (0 = end of carrier).
USID_LOCATOR_BITS = 32
USID_BITS = 16
USIDS_PER_DA = 6
#: Bits of the EV in the UDP source port (EV[15:0]) and in the flow label (EV[31:16] in label[15:0]).
EV_BITS = 32
EV_SPORT_BITS = 16
FLOW_LABEL_BITS = 20
#: OCP MRC 1.0 ``mrc_ctl.h``: an EV value (``mrc_ctl_ev_t``) is ``MRC_CTL_EV_MAX_BYTES`` = 32 bytes, read
#: as a bit string from bit 7 of byte 0; STEV uses its first 32 bits, SRv6 its first 16 bytes (the
#: destination address) and the next 16 (the single SRH segment).
EV_T_BITS = 8 * 32
STEV_BITS = 32
SRV6_BITS = 2 * 128
#: ``enum mrc_ctl_ev_fmt_mode`` values.
EV_FMT_MODE_STEV, EV_FMT_MODE_SRV6, EV_FMT_MODE_UDP = 1 << 0, 1 << 1, 1 << 2
#: ``struct mrc_ctl_ev_field``: every member is a ``uint32_t``; a field is at most 32 bits wide.
EV_FIELD_BITS = 32
#: ``struct mrc_ctl_ev_fmt_field``: ``uint8_t width``.
EV_FMT_WIDTH_BITS = 8
#: DSCP values (the traffic class's upper six bits) of MRC traffic (*chosen*): data is AF41; a packet
#: trimmed on a fabric hop is CS5 and one trimmed on a last-hop port is CS6, so the receiver can tell
#: the two apart and the sender skips the EV only for a non-last-hop trim.
DSCP_MRC_DATA = 34
DSCP_TRIM = 40
DSCP_TRIM_LAST = 48
#: Default trimmed length: every header of an encapsulated MRC packet and 4 bytes where the ICRC sits
#: (so the BTH parses; the 4 bytes are the payload's first, not a valid ICRC: the DSCP says "trimmed").
ICRC_BYTES = 4
TRIM_LEN = MRC_HEADER_BYTES + ICRC_BYTES    # 118

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

# --- Spillway: spill link frames, Ethernet / Spill shim / inner frame (SPEC section 1) ----------------
#: EtherType of spill-link frames (*chosen*: IEEE 802 Local Experimental EtherType 1).
ETHERTYPE_SPILL = 0x88B5
SPILL_OFFSET = ETH_OFFSET + ETH_BYTES       # 14
#: op:8 port:8 flow:16 seq:16 count:8 resv:8
SPILL_BYTES = 8
#: Outer Ethernet + Spill shim: the inner frame starts at this byte.
SPILL_HEADER_BYTES = SPILL_OFFSET + SPILL_BYTES     # 22
#: ``struct`` format of the shim in wire order.
SPILL_STRUCT = ">BBHHBB"
SPILL_OP_AT = SPILL_OFFSET
SPILL_PORT_AT = SPILL_OFFSET + 1
SPILL_FLOW_AT = SPILL_OFFSET + 2
SPILL_SEQ_AT = SPILL_OFFSET + 4
SPILL_COUNT_AT = SPILL_OFFSET + 6
#: Shim opcodes: a spilled packet (switch -> node), the packet coming back (node -> switch), a drain
#: request for ``count`` packets of ``port`` (switch -> node, no inner frame).
SPILL_DATA, SPILL_RETURN, SPILL_DRAIN = 1, 2, 3
SPILL_SEQ_BITS = 16

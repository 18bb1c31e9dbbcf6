"""The compiled header decoder: one pass over a batch's records, filling every decoded column.

`decode_batch` walks each record once: its fingerprint (XXH64 of all captured
bytes), then the link layer of its link type (Ethernet with its tags and
FabricPath, 802.11 with radiotap, SLL, PPP, ...), the network layer (IPv4,
IPv6 with its extension-header chain, ARP), the transport header, ICMP error
quotes, and tunnels, which it removes (to `MAX_TUNNEL_DEPTH`) so the
network columns describe the innermost packet and the outer_* columns the
outermost one. A tunnel found by a UDP port is validated as its own
analyzer (Zeek's, Wireshark's, the RFC's receiver) would before it is
removed; a payload that fails stays a UDP datagram.

Every read is bounded by the record's captured length, and within an IP
packet also by the IP length (so Ethernet padding never parses as a header).
A header cut short or malformed sets L_TRUNCATED and ends the decode there;
the fields already decoded keep their layer bits. All of this lives in one
module on purpose: numba's cache tracks the file of the compiled function
only, so compiled callees in other files could go stale after an edit.

Speed (about 120 ns of CPU per Ethernet/IPv4/TCP packet, a quarter of it the
fingerprint): every function is compiled without numba's reference counting
(`_nrt=False`), since none allocates and the arrays belong to the caller;
with it, each call paid atomic increments and decrements for each array it
was passed, which more than doubled the time. Byte reads go through `_u8`,
`_u16`... with an unsigned offset, so LLVM merges them into single loads.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..cpu import kernel, prefetch
from ..schema import (IP_DF, IP_MF, L_AMSDU, L_ARP, L_DST_MAC, L_ETHERTYPE, L_FRAG, L_ICMP, L_ICMP6, L_IP4,
                      L_IP6, L_MSS, L_MTU, L_PAYLOAD, L_PORTS, L_QINQ, L_QUOTE, L_QUOTE_PORTS,
                      L_SACK_PERM, L_SCTP, L_SRC_MAC, L_TCP, L_TCP_TS, L_TRUNCATED, L_TUNNEL, L_UDP,
                      L_VLAN, L_WSCALE, LINKTYPE_C_HDLC, LINKTYPE_ETHERNET, LINKTYPE_IEEE802_11,
                      LINKTYPE_IEEE802_11_RADIOTAP, LINKTYPE_IPV4,
                      LINKTYPE_IPV6, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2, LINKTYPE_LOOP,
                      LINKTYPE_NULL, LINKTYPE_PPP, LINKTYPE_PPP_ETHER, LINKTYPE_PPP_HDLC, LINKTYPE_RAW,
                      PROTO_ICMP, PROTO_ICMP6, PROTO_SCTP, PROTO_TCP, PROTO_UDP, TUNNEL_AYIYA,
                      TUNNEL_ERSPAN, TUNNEL_GENEVE, TUNNEL_GRE, TUNNEL_GTP, TUNNEL_IPIP, TUNNEL_TEREDO,
                      TUNNEL_VXLAN)
from .columns import GROUP_NAMES, ROW

# ---- column rows (see columns.py) ----------------------------------------
LAYERS = ROW["layers"]
SRC_MAC, DST_MAC = ROW["src_mac"], ROW["dest_mac"]
VLAN_OUTER, VLAN_INNER, ETHERTYPE = ROW["vlan_outer"], ROW["vlan_inner"], ROW["ethertype"]
IP_VERSION, PROTO, TTL = ROW["ip_version"], ROW["proto"], ROW["ttl"]
SRC_IP_HI, SRC_IP_LO = ROW["src_ip_hi"], ROW["src_ip_lo"]
DST_IP_HI, DST_IP_LO = ROW["dest_ip_hi"], ROW["dest_ip_lo"]
IP_ID, IP_LEN, IP_FLAGS, FRAG_OFFSET = ROW["ip_id"], ROW["ip_len"], ROW["ip_flags"], ROW["frag_offset"]
SRC_PORT, DST_PORT = ROW["src_port"], ROW["dest_port"]
TCP_FLAGS, TCP_SEQ, TCP_ACK, TCP_WINDOW = ROW["tcp_flags"], ROW["tcp_seq"], ROW["tcp_ack"], ROW["tcp_window"]
TCP_MSS, TCP_WSCALE, TCP_TSVAL, TCP_TSECR = ROW["tcp_mss"], ROW["tcp_wscale"], ROW["tcp_tsval"], ROW["tcp_tsecr"]
PAYLOAD_LEN, PAYLOAD_OFF = ROW["payload_len"], ROW["payload_off"]
L3_OFF, L4_OFF = ROW["l3_off"], ROW["l4_off"]
ICMP_TYPE, ICMP_CODE, ICMP_MTU = ROW["icmp_type"], ROW["icmp_code"], ROW["icmp_mtu"]
QUOTE_SRC_HI, QUOTE_SRC_LO = ROW["quote_src_ip_hi"], ROW["quote_src_ip_lo"]
QUOTE_DST_HI, QUOTE_DST_LO = ROW["quote_dest_ip_hi"], ROW["quote_dest_ip_lo"]
QUOTE_PROTO, QUOTE_SRC_PORT, QUOTE_DST_PORT = ROW["quote_proto"], ROW["quote_src_port"], ROW["quote_dest_port"]
ARP_OP, ARP_SHA, ARP_THA, ARP_SPA, ARP_TPA = (ROW["arp_op"], ROW["arp_sha"], ROW["arp_tha"], ROW["arp_spa"],
                                              ROW["arp_tpa"])
TUNNEL = ROW["tunnel"]
MSDU_COUNT = ROW["msdu_count"]
OUTER_SRC_HI, OUTER_SRC_LO = ROW["outer_src_ip_hi"], ROW["outer_src_ip_lo"]
OUTER_DST_HI, OUTER_DST_LO = ROW["outer_dest_ip_hi"], ROW["outer_dest_ip_lo"]
OUTER_PROTO, OUTER_SRC_PORT, OUTER_DST_PORT = ROW["outer_proto"], ROW["outer_src_port"], ROW["outer_dest_port"]
FINGERPRINT = ROW["fingerprint"]

# Columns that describe the link a frame was captured on; everything else is
# network-layer and is cleared when a tunnel is removed.
_LINK_COLUMNS = {"layers", "src_mac", "dest_mac", "vlan_outer", "vlan_inner", "ethertype", "fingerprint",
                 "msdu_count", "tunnel", "outer_src_ip_hi", "outer_src_ip_lo", "outer_dest_ip_hi", "outer_dest_ip_lo",
                 "outer_proto", "outer_src_port", "outer_dest_port"}
NET_ROWS_U8, NET_ROWS_U16, NET_ROWS_U32, NET_ROWS_U64 = (
    tuple(ROW[name] for name in GROUP_NAMES[dtype] if name not in _LINK_COLUMNS)
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64))
LINK_BITS = L_SRC_MAC | L_DST_MAC | L_VLAN | L_QINQ | L_ETHERTYPE | L_AMSDU | L_TUNNEL

# ---- protocol numbers ------------------------------------------------------
ETH_HEADER = 14               # IEEE 802.3: destination, source, type
ETH_MAX_LENGTH = 1500         # IEEE 802.3: a type field at or below this is a length (LLC follows)
ETHERTYPE_IP4 = 0x0800
ETHERTYPE_ARP = 0x0806        # RFC 826
ETHERTYPE_RARP = 0x8035       # RFC 903, same layout as ARP
ETHERTYPE_IP6 = 0x86DD
ETHERTYPE_VLAN = 0x8100       # IEEE 802.1Q customer tag
ETHERTYPE_QINQ = 0x88A8       # IEEE 802.1ad service tag
ETHERTYPE_QINQ_OLD = 0x9100   # pre-standard QinQ tag, still common
ETHERTYPE_PPPOE_SESSION = 0x8864  # RFC 2516
ETHERTYPE_MPLS = 0x8847       # RFC 3032 unicast
ETHERTYPE_MPLS_MC = 0x8848    # RFC 3032 multicast (RFC 5332)
ETHERTYPE_TEB = 0x6558        # transparent Ethernet bridging (GRE, Geneve: an Ethernet frame follows)
ETHERTYPE_ERSPAN_2 = 0x88BE   # ERSPAN type I (no header) and II (8-byte header), draft-foschiano-erspan
ETHERTYPE_ERSPAN_3 = 0x22EB   # ERSPAN type III (12-byte header, optional 8-byte subheader)
ETHERTYPE_PPP = 0x880B        # PPP in enhanced GRE, RFC 2637
ETHERTYPE_PBB = 0x88E7        # IEEE 802.1ah I-TAG: 4-byte tag, then customer destination and source MAC
ETHERTYPE_VNTAG = 0x8926      # Cisco VN-Tag: 4-byte tag, then a type field as after a VLAN tag
# Cisco FabricPath (Wireshark's packet-cisco-fp-mim.c): switch-ID addresses, this type, a 2-byte
# FTAG/TTL, then the classical Ethernet frame; an 802.1ad or 802.1Q tag may come before the type
ETHERTYPE_FABRICPATH = 0x8903
FABRICPATH_FTAG_TTL = 2
PBB_HEADER = 4 + 2 * 6
VNTAG_HEADER = 4
LLC_SNAP = 0xAAAA03           # RFC 1042: DSAP/SSAP 0xAA, UI control, then OUI and type
OUI_BRIDGE_TUNNEL = 0x0000F8  # IEEE 802.1H: the other OUI whose SNAP type is an ethertype (Wireshark)
SNAP_HEADER = 8
VLAN_TAG = 4
VLAN_VID_MASK = 0x0FFF
MAX_L2_HEADERS = 8            # tags, PPPoE and MPLS stacks walked before giving up
MPLS_LABEL = 4
MPLS_BOTTOM_OF_STACK = 0x01   # S bit in the third byte of a label entry, RFC 3032
PPPOE_HEADER = 6              # RFC 2516 section 4
PPP_IP4 = 0x0021              # RFC 1332
PPP_IP6 = 0x0057              # RFC 5072
PPP_MPLS = 0x0281             # RFC 3032 section 4.3
PPP_ADDRESS_CONTROL = 0xFF03  # RFC 1662 HDLC-like framing, optional before the protocol
CHDLC_HEADER = 4              # Cisco HDLC: address, control, ethertype
SLL_HEADER = 16               # https://www.tcpdump.org/linktypes/LINKTYPE_LINUX_SLL.html
SLL2_HEADER = 20              # https://www.tcpdump.org/linktypes/LINKTYPE_LINUX_SLL2.html
ARPHRD_CAN = 280              # SLL protocol field is not an ethertype for these devices
ARPHRD_NETLINK = 824
NULL_HEADER = 4               # https://www.tcpdump.org/linktypes/LINKTYPE_NULL.html
BSD_AF_INET = 2
BSD_AF_INET6_NETBSD = 24      # also OpenBSD
BSD_AF_INET6_FREEBSD = 28
BSD_AF_INET6_DARWIN = 30
MAC_BYTES = 6
# 802.11 (IEEE 802.11-2020 clause 9): frame control, duration, three addresses, sequence control
WLAN_HEADER = 24
WLAN_VERSION_MASK = 0x03      # protocol version 0, the only one
WLAN_TYPE_DATA = 0x08         # type bits of the first byte: data frame
WLAN_TYPE_MASK = 0x0C
WLAN_SUBTYPE_NO_DATA = 0x40   # Null, CF-Ack/Poll without data, QoS Null: no frame body
WLAN_SUBTYPE_QOS = 0x80       # QoS data subtypes: a 2-byte QoS control field follows the addresses
WLAN_TO_DS = 0x01             # second byte: the DS bits say which addresses are which (Table 9-30)
WLAN_FROM_DS = 0x02
WLAN_PROTECTED = 0x40         # the body is encrypted: left undecoded
WLAN_ORDER = 0x80             # in a QoS data frame: a 4-byte HT Control field follows (+HTC)
WLAN_QOS_AMSDU = 0x80         # QoS control, first byte: the body is an A-MSDU (9.2.4.5.9)
WLAN_QOS = 2
WLAN_HT_CONTROL = 4
WLAN_FRAGMENT_MASK = 0x0F     # sequence control, first (little-endian) byte: fragment number
AMSDU_SUBHEADER = 14          # destination, source, length of the subframe's MSDU (9.3.2.2.2)
AMSDU_ALIGN = 4               # every subframe but the last is padded to a multiple of 4 bytes
# the radiotap header (https://www.radiotap.org): version 0, pad, little-endian length, present words
RADIOTAP_HEADER = 8
RADIOTAP_EXT_BYTE = 0x80      # bit 31 of a (little-endian) present word: another word follows
MAX_RADIOTAP_PRESENT = 16
RADIOTAP_TSFT = 0x01          # first present byte, field 0: 8-byte TSF timer, aligned to 8
RADIOTAP_FLAGS = 0x02         # field 1: flags byte
RADIOTAP_TSFT_LEN = 8
RADIOTAP_F_FCS = 0x10         # flags: the 802.11 frame ends with its 4-byte FCS
FCS_LEN = 4
# GRE protocol types of Aruba's access point tunnels, carrying 802.11 frames without FCS (Wireshark's
# packet-gre.h GRE_ARUBA_*, handed to its 802.11 dissector; Zeek's GRE analyzer takes a looser superset)
GRE_ARUBA_FIRST = 0x8200
GRE_ARUBA_LAST = 0x8370
GRE_ARUBA_STEP_MASK = 0x000F
GRE_ARUBA_9000 = 0x9000
# not an ethertype: an 802.11 frame follows the tunnel header
INNER_IEEE80211 = 0x10000

IP4_HEADER = 20
IP6_HEADER = 40
IP4_MORE_FRAGMENTS = 0x2000   # RFC 791 flags
IP4_DONT_FRAGMENT = 0x4000
IP4_OFFSET_MASK = 0x1FFF
IP6_OFFSET_MASK = 0xFFF8      # RFC 8200 section 4.5: offset in 8-octet units, already shifted by 3
IP6_MORE_FRAGMENTS = 0x0001
# The network header must start within this many bytes of the frame, so every
# offset column (uint16) holds even after the longest IPv6 extension chain
# (MAX_IPV6_EXT_HEADERS * 2048 bytes) and a 60-byte TCP header.
MAX_IP_OFFSET = 16384
MAX_IPV6_EXT_HEADERS = 16
MAX_TUNNEL_DEPTH = 4          # tunnels removed per frame; deeper ones stay as they are

PROTO_HOPOPTS = 0             # RFC 8200 extension headers
PROTO_IPIP = 4                # RFC 2003
PROTO_DCCP = 33               # RFC 4340
PROTO_IPV6 = 41               # RFC 2473 / RFC 4213
PROTO_ROUTING = 43
PROTO_FRAGMENT = 44
PROTO_GRE = 47                # RFC 2784, RFC 2890, RFC 2637
PROTO_AH = 51                 # RFC 4302: length in 4-octet units minus 2
PROTO_DSTOPTS = 60
PROTO_MOBILITY = 135          # RFC 6275
PROTO_UDPLITE = 136           # RFC 3828
PROTO_HIP = 139               # RFC 7401
PROTO_SHIM6 = 140             # RFC 5533

TCP_HEADER = 20               # RFC 9293
UDP_HEADER = 8                # RFC 768
SCTP_HEADER = 12              # RFC 9260
ICMP_HEADER = 8               # RFC 792, RFC 4443
TCPOPT_EOL = 0
TCPOPT_NOP = 1
TCPOPT_MSS = 2                # RFC 9293
TCPOPT_WSCALE = 3             # RFC 7323
TCPOPT_SACK_PERM = 4          # RFC 2018
TCPOPT_TIMESTAMP = 8          # RFC 7323
ICMP_UNREACH = 3              # RFC 792 error types, which quote the offending datagram
ICMP_SOURCE_QUENCH = 4
ICMP_REDIRECT = 5
ICMP_TIME_EXCEEDED = 11
ICMP_PARAM_PROBLEM = 12
ICMP_FRAG_NEEDED = 4          # code of type 3; RFC 1191 next-hop MTU in bytes 6-7
ICMP6_ERROR_MAX = 4           # RFC 4443: types 1-4 are errors quoting the offending packet
ICMP6_PACKET_TOO_BIG = 2      # RFC 4443 section 3.2: MTU in bytes 4-7

PORT_VXLAN = 4789             # RFC 7348
PORT_VXLAN_GPE = 4790         # draft-ietf-nvo3-vxlan-gpe
PORT_GENEVE = 6081            # RFC 8926
PORT_TEREDO = 3544            # RFC 4380
PORT_GTP_U = 2152             # 3GPP TS 29.281
PORT_AYIYA = 5072             # draft-massar-v6ops-ayiya
PORT_GRE_UDP = 4754           # RFC 8086 GRE-in-UDP (4755, its DTLS form, is encrypted)
VXLAN_HEADER = 8
VXLAN_I = 0x08                # RFC 7348 section 5: the VNI is valid; must be set
VXLAN_GBP_G = 0x80            # draft-smith-vxlan-group-policy: group policy ID present (bytes 2-3)
VXLAN_GBP_DA = 0x48           # its D (don't learn) and A (policy applied) bits, in the second byte
VXLAN_GPE_VERSION = 0x30      # draft-ietf-nvo3-vxlan-gpe section 3.2: version 0
VXLAN_GPE_RESERVED = 0xC0
VXLAN_GPE_P = 0x04            # next protocol field present: must be set
VXLAN_GPE_IP4 = 1
VXLAN_GPE_IP6 = 2
VXLAN_GPE_ETHERNET = 3
VXLAN_GPE_MPLS = 5
GENEVE_HEADER = 8
GENEVE_OPTION_HEADER = 4      # RFC 8926 section 3.5: class, type, 5-bit length in 4-byte words
GENEVE_OPTION_WORDS = 0x1F
GTP_HEADER = 8
GTP_OPTIONAL = 4              # sequence number, N-PDU number, next extension type
GTP_VERSION_1 = 1
GTP_PT = 0x10                 # protocol type: GTP (not GTP')
GTP_SPARE = 0x08              # TS 29.281 section 5.1: spare bit, sent as 0
GTP_FLAGS_OPTIONAL = 0x07     # E, S, PN: any set means the 4 optional bytes are present
GTP_FLAG_EXTENSION = 0x04
GTP_G_PDU = 0xFF              # message type carrying a user packet
MAX_GTP_EXTENSIONS = 8
TEREDO_AUTH = 0x0001          # RFC 4380 section 5.1.1 authentication indicator
TEREDO_AUTH_FIXED = 13        # indicator type, lengths, nonce and confirmation byte
TEREDO_ORIGIN = 0x0000        # origin indication
TEREDO_ORIGIN_LEN = 8
TEREDO_PREFIX = 0x20010000    # RFC 4380 section 2.6: 2001::/32, the Teredo service prefix
PROTO_NONE = 59               # RFC 8200 section 4.7: no next header (a Teredo bubble)
IP6OPT_PAD1 = 0               # RFC 8200 section 4.2: a single byte of padding, no length
IP6OPT_JUMBO = 0xC2           # RFC 2675 Jumbo Payload option: 4-byte length of everything after the IPv6 header
IP6OPT_JUMBO_LEN = 4
JUMBO_MIN = 65536             # RFC 2675 section 2: a jumbo length below this is an error
AYIYA_HEADER = 8
AYIYA_OP_FORWARD = 1
# second and third bytes: 5 words of signature and hash method 2 (SHA-1); shared-secret
# authentication and the forward opcode
AYIYA_SHA1_FORWARD_AUTH = 0x5211
GRE_RESERVED0 = 0x0FF8        # RFC 2890 section 2: reserved bits, zero in a GRE-in-UDP header
GRE_HEADER = 4
GRE_CHECKSUM = 0x8000         # RFC 2784 / RFC 2890 flag bits
GRE_ROUTING = 0x4000          # RFC 1701 source routing, deprecated: not decapsulated
GRE_KEY = 0x2000
GRE_SEQUENCE = 0x1000
GRE_ACK = 0x0080              # RFC 2637 enhanced GRE acknowledgement present
GRE_VERSION_MASK = 0x0007
GRE_PPTP_HEADER = 8           # flags, protocol, payload length, call id
ERSPAN_2_HEADER = 8
ERSPAN_3_HEADER = 12
ERSPAN_3_SUBHEADER = 8
ERSPAN_3_O_FLAG = 0x01        # last bit of the header: platform-specific subheader follows

IP4_MAPPED = np.uint64(0x0000FFFF00000000)  # ::ffff:0:0/96, high bits of the low half

# XXH64 primes (https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md)
P1 = np.uint64(0x9E3779B185EBCA87)
P2 = np.uint64(0xC2B2AE3D27D4EB4F)
P3 = np.uint64(0x165667B19E3779F9)
P4 = np.uint64(0x85EBCA77C2B2AE63)
P5 = np.uint64(0x27D4EB2F165667C5)
# The headers of the record this many places ahead are requested from memory
# while the current one decodes (detector.cpu): two cache lines hold the link,
# network and transport headers of nearly every frame.
PREFETCH_RECORDS = 6
HEADER_LINE = 64
# Seed 0, so a fingerprint equals `xxhsum -H64` of the frame's bytes.
FINGERPRINT_SEED = np.uint64(0)


# Constant arguments of the helpers, as numpy scalars: numba compiles a helper once per distinct
# Python literal it is called with (the VLAN/MPLS walk four times, the 802.11 parser twice), a few
# seconds of every first run for branches that cost nothing to take at run time.
OUTER, INNER = np.bool_(True), np.bool_(False)      # the frame's own link header, or one inside a tunnel
NO_LAYERS = np.int64(0)
IPV4, IPV6 = np.int64(4), np.int64(6)


# ---- byte readers ------------------------------------------------------------
# Indexing with an unsigned offset spares numba's negative-index fix-up, which
# lets LLVM merge a multi-byte read into one load (about ten times faster).
@njit(_nrt=False)
def _u8(b, p):
    return np.int64(b[np.uint64(p)])


@njit(_nrt=False)
def _u16(b, p):
    q = np.uint64(p)
    return (np.int64(b[q]) << 8) | np.int64(b[q + np.uint64(1)])


@njit(_nrt=False)
def _u32(b, p):
    q = np.uint64(p)
    return ((np.int64(b[q]) << 24) | (np.int64(b[q + np.uint64(1)]) << 16) | (np.int64(b[q + np.uint64(2)]) << 8)
            | np.int64(b[q + np.uint64(3)]))


@njit(_nrt=False)
def _be_bytes(b, p, n):
    q = np.uint64(p)
    v = np.uint64(0)
    for k in range(n):
        v = (v << np.uint64(8)) | np.uint64(b[q + np.uint64(k)])
    return v


@njit(_nrt=False)
def _be64(b, p):
    return _be_bytes(b, p, 8)


@njit(_nrt=False)
def _mac(b, p):
    return _be_bytes(b, p, MAC_BYTES)


@njit(_nrt=False)
def _le64(b, p):
    q = np.uint64(p)
    return (np.uint64(b[q]) | (np.uint64(b[q + np.uint64(1)]) << np.uint64(8))
            | (np.uint64(b[q + np.uint64(2)]) << np.uint64(16)) | (np.uint64(b[q + np.uint64(3)]) << np.uint64(24))
            | (np.uint64(b[q + np.uint64(4)]) << np.uint64(32)) | (np.uint64(b[q + np.uint64(5)]) << np.uint64(40))
            | (np.uint64(b[q + np.uint64(6)]) << np.uint64(48)) | (np.uint64(b[q + np.uint64(7)]) << np.uint64(56)))


@njit(_nrt=False)
def _le32(b, p):
    q = np.uint64(p)
    return (np.uint64(b[q]) | (np.uint64(b[q + np.uint64(1)]) << np.uint64(8))
            | (np.uint64(b[q + np.uint64(2)]) << np.uint64(16)) | (np.uint64(b[q + np.uint64(3)]) << np.uint64(24)))


# ---- fingerprint: XXH64 ------------------------------------------------------
@njit(_nrt=False)
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(_nrt=False)
def _xxh_round(acc, lane):
    return _rotl(acc + lane * P2, 31) * P1


@njit(_nrt=False)
def _xxh_merge(acc, v):
    return (acc ^ _xxh_round(np.uint64(0), v)) * P1 + P4


@njit(_nrt=False)
def xxh64(b, start, end, seed):
    """XXH64 of b[start:end]: four independent lanes over 32-byte stripes, then the tail."""
    p = start
    length = end - start
    if length >= 32:
        v1 = seed + P1 + P2
        v2 = seed + P2
        v3 = seed
        v4 = seed - P1
        last = end - 32
        while p <= last:
            v1 = _xxh_round(v1, _le64(b, p))
            v2 = _xxh_round(v2, _le64(b, p + 8))
            v3 = _xxh_round(v3, _le64(b, p + 16))
            v4 = _xxh_round(v4, _le64(b, p + 24))
            p += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        h = _xxh_merge(h, v1)
        h = _xxh_merge(h, v2)
        h = _xxh_merge(h, v3)
        h = _xxh_merge(h, v4)
    else:
        h = seed + P5
    h += np.uint64(length)
    while p + 8 <= end:
        h ^= _xxh_round(np.uint64(0), _le64(b, p))
        h = _rotl(h, 27) * P1 + P4
        p += 8
    if p + 4 <= end:
        h ^= _le32(b, p) * P1
        h = _rotl(h, 23) * P2 + P3
        p += 4
    while p < end:
        h ^= np.uint64(_u8(b, p)) * P5
        h = _rotl(h, 11) * P1
        p += 1
    h ^= h >> np.uint64(33)
    h *= P2
    h ^= h >> np.uint64(29)
    h *= P3
    h ^= h >> np.uint64(32)
    return h


@kernel("(u1[::1], i8[::1], u4[::1], u8[::1])", _nrt=False, nogil=True)
def fingerprint_rows(data, offset, caplen, out):
    """XXH64 of each record's captured bytes, for callers that hash without decoding."""
    for i in range(offset.shape[0]):
        out[i] = xxh64(data, offset[i], offset[i] + np.int64(caplen[i]), FINGERPRINT_SEED)


# ---- link layer ----------------------------------------------------------------
@njit(_nrt=False)
def _ppp_protocol(b, p, end):
    """(network ethertype or 0, offset after the PPP header); optional FF03 and 1-byte protocols."""
    if p + 2 <= end and _u16(b, p) == PPP_ADDRESS_CONTROL:
        p += 2
    if p + 1 > end:
        return -1, p
    if _u8(b, p) & 1:                 # protocol field compression, RFC 1661 section 6.5
        proto = _u8(b, p)
        p += 1
    else:
        if p + 2 > end:
            return -1, p
        proto = _u16(b, p)
        p += 2
    if proto == PPP_IP4:
        return ETHERTYPE_IP4, p
    if proto == PPP_IP6:
        return ETHERTYPE_IP6, p
    if proto == PPP_MPLS:
        return ETHERTYPE_MPLS, p
    return 0, p


@njit(_nrt=False)
def _is_snap(b, p, end):
    """Whether an LLC/SNAP header whose type field is an ethertype (RFC 1042, IEEE 802.1H) is at `p`."""
    if p + SNAP_HEADER > end or (_u32(b, p) >> 8) != LLC_SNAP:
        return False
    oui = _u32(b, p + 2) & 0xFFFFFF
    return oui == 0 or oui == OUI_BRIDGE_TUNNEL


@njit(_nrt=False)
def _l2_walk(b, p, end, etype, outer, layers, i, c16):
    """Walk VLAN tags, PPPoE, MPLS and FabricPath from `etype` at `p`: (network ethertype or 0, offset,
    layers).

    Tags are recorded only on the outer link; the ethertype column always
    ends up holding the innermost link-layer type field read. A Cisco
    FabricPath header (after the addresses and any tag, as Wireshark's
    heuristic finds it) is stepped over to the classical Ethernet frame it
    carries. The MAC columns keep the addresses the frame was captured with,
    FabricPath's switch IDs: rewriting them here would hand this function
    another array, which costs the Ethernet path about 20 ns a packet.
    """
    tags = 0
    for _ in range(MAX_L2_HEADERS):
        if etype > ETH_MAX_LENGTH:
            c16[ETHERTYPE, i] = etype
            layers |= L_ETHERTYPE
        if etype == ETHERTYPE_VLAN or etype == ETHERTYPE_QINQ or etype == ETHERTYPE_QINQ_OLD:
            if p + VLAN_TAG > end:
                return 0, p, layers | L_TRUNCATED
            tags += 1
            if outer and tags == 1:
                c16[VLAN_OUTER, i] = _u16(b, p) & VLAN_VID_MASK
                layers |= L_VLAN
            elif outer and tags == 2:
                c16[VLAN_INNER, i] = _u16(b, p) & VLAN_VID_MASK
                layers |= L_QINQ
            etype = _u16(b, p + 2)
            p += VLAN_TAG
        elif etype == ETHERTYPE_FABRICPATH:
            if p + FABRICPATH_FTAG_TTL + ETH_HEADER > end:
                return 0, p, layers | L_TRUNCATED
            etype = _u16(b, p + FABRICPATH_FTAG_TTL + 2 * MAC_BYTES)
            p += FABRICPATH_FTAG_TTL + ETH_HEADER
        elif etype == ETHERTYPE_VNTAG or etype == ETHERTYPE_PBB:
            skip = VNTAG_HEADER if etype == ETHERTYPE_VNTAG else PBB_HEADER
            if p + skip + 2 > end:
                return 0, p, layers | L_TRUNCATED
            etype = _u16(b, p + skip)
            p += skip + 2
        elif etype <= ETH_MAX_LENGTH:
            # a length, not a type: only an LLC/SNAP header carries a type on
            if not _is_snap(b, p, end):
                return 0, p, layers
            etype = _u16(b, p + 6)
            p += SNAP_HEADER
        elif etype == ETHERTYPE_PPPOE_SESSION:
            if p + PPPOE_HEADER + 2 > end:
                return 0, p, layers | L_TRUNCATED
            net, p = _ppp_protocol(b, p + PPPOE_HEADER, end)
            if net < 0:
                return 0, p, layers | L_TRUNCATED
            if net != ETHERTYPE_MPLS:
                return net, p, layers
            etype = net
        elif etype == ETHERTYPE_MPLS or etype == ETHERTYPE_MPLS_MC:
            for _label in range(MAX_L2_HEADERS):
                if p + MPLS_LABEL > end:
                    return 0, p, layers | L_TRUNCATED
                bottom = _u8(b, p + 2) & MPLS_BOTTOM_OF_STACK
                p += MPLS_LABEL
                if bottom:
                    break
            else:
                return 0, p, layers | L_TRUNCATED
            if p + 1 > end:
                return 0, p, layers | L_TRUNCATED
            version = _u8(b, p) >> 4
            if version == 4:
                return ETHERTYPE_IP4, p, layers
            if version == 6:
                return ETHERTYPE_IP6, p, layers
            return 0, p, layers
        else:
            return etype, p, layers
    return 0, p, layers | L_TRUNCATED


@njit(_nrt=False)
def _ethernet(b, p, end, outer, layers, i, c16, c64):
    """An Ethernet header at `p`: (network ethertype or 0, offset, layers).

    A Cisco FabricPath header is taken off first, as Wireshark's heuristic
    does (its type at the Ethernet type's place, or after one 802.1ad/802.1Q
    tag); its addresses are switch IDs, so the MAC columns hold those of the
    classical Ethernet frame inside.
    """
    if p + ETH_HEADER > end:
        return 0, p, layers | L_TRUNCATED
    etype = _u16(b, p + 12)
    if outer:
        c64[DST_MAC, i] = _mac(b, p)
        c64[SRC_MAC, i] = _mac(b, p + MAC_BYTES)
        layers |= L_SRC_MAC | L_DST_MAC
    return _l2_walk(b, p + ETH_HEADER, end, etype, outer, layers, i, c16)


@njit(_nrt=False)
def _ieee80211(b, p, end, wire, msdu, outer, layers, i, c16, c64):
    """An 802.11 frame at `p`, captured to `end`, `wire` on the wire (its FCS excluded): (network
    ethertype or 0, offset, layers, end, wire) of its body, or of A-MSDU subframe number `msdu`.

    Data frames only (IEEE 802.11-2020 9.3.2): the header with a fourth
    address when both DS bits are set, QoS control in QoS subtypes and HT
    Control after it when the Order bit is set there (+HTC), then LLC/SNAP.
    Frames without a body (Null, QoS Null), protected (encrypted) bodies and
    fragments after the first stop after the addresses. Source and
    destination MACs follow the DS bits (Table 9-30), as Zeek's analyzer
    takes them, or come from the A-MSDU subframe header, which holds the end
    stations' addresses where address 3 is the BSSID. An A-MSDU's subframes
    are counted in msdu_count; `end` and `wire` then bound the subframe.
    """
    if p + WLAN_HEADER > end:
        return 0, p, layers | L_TRUNCATED, end, wire
    fc = _u8(b, p)
    flags = _u8(b, p + 1)
    if fc & WLAN_VERSION_MASK or (fc & WLAN_TYPE_MASK) != WLAN_TYPE_DATA:
        return 0, p, layers, end, wire
    ds = flags & (WLAN_TO_DS | WLAN_FROM_DS)
    header = WLAN_HEADER + (MAC_BYTES if ds == WLAN_TO_DS | WLAN_FROM_DS else 0)
    amsdu = False
    if fc & WLAN_SUBTYPE_QOS:
        if p + header + WLAN_QOS > end:
            return 0, p, layers | L_TRUNCATED, end, wire
        amsdu = (_u8(b, p + header) & WLAN_QOS_AMSDU) != 0
        header += WLAN_QOS + (WLAN_HT_CONTROL if flags & WLAN_ORDER else 0)
    if p + header > end:
        return 0, p, layers | L_TRUNCATED, end, wire
    if outer and not amsdu:
        c64[DST_MAC, i] = _mac(b, p + (16 if ds & WLAN_TO_DS else 4))
        c64[SRC_MAC, i] = _mac(b, p + (24 if ds == WLAN_TO_DS | WLAN_FROM_DS else 16 if ds & WLAN_FROM_DS else 10))
        layers |= L_SRC_MAC | L_DST_MAC
    if fc & WLAN_SUBTYPE_NO_DATA or flags & WLAN_PROTECTED or _u8(b, p + 22) & WLAN_FRAGMENT_MASK:
        return 0, p, layers, end, wire
    body = p + header
    if not amsdu:
        net, q, layers = _llc(b, body, end, outer, layers, i, c16)
        return net, q, layers, end, wire
    count = 0
    target = -1
    stop = body
    a = body
    while a + AMSDU_SUBHEADER <= end:
        subframe_end = a + AMSDU_SUBHEADER + _u16(b, a + 12)
        if subframe_end > wire:
            break
        if count == msdu:
            target = a
            stop = subframe_end
        count += 1
        a += (subframe_end - a + AMSDU_ALIGN - 1) & ~(AMSDU_ALIGN - 1)
    c16[MSDU_COUNT, i] = count
    layers |= L_AMSDU
    if target < 0:
        return 0, p, layers | (L_TRUNCATED if count == 0 else 0), end, wire
    if outer:
        c64[DST_MAC, i] = _mac(b, target)
        c64[SRC_MAC, i] = _mac(b, target + MAC_BYTES)
        layers |= L_SRC_MAC | L_DST_MAC
    end = min(end, stop)
    net, q, layers = _llc(b, target + AMSDU_SUBHEADER, end, outer, layers, i, c16)
    return net, q, layers, end, stop


@njit(_nrt=False)
def _llc(b, p, end, outer, layers, i, c16):
    """An 802.2 LLC header at `p` (an 802.11 body): (network ethertype or 0, offset, layers)."""
    if p + SNAP_HEADER > end:
        return 0, p, layers | L_TRUNCATED
    if not _is_snap(b, p, end):
        return 0, p, layers
    return _l2_walk(b, p + SNAP_HEADER, end, _u16(b, p + 6), outer, layers, i, c16)


@njit(_nrt=False)
def _wlan_link(b, s, end, wire, lt, msdu, i, c16, c64):
    """An 802.11 record, with its radiotap header first for LINKTYPE_IEEE802_11_RADIOTAP: (network
    ethertype or 0, offset, layers, end, wire).

    Radiotap: version 0, its length, and the Flags field (after the present
    words and, when present, the 8-aligned TSFT) saying whether the frame
    ends with an FCS, which is then not part of the frame body. Zeek skips
    the header by its length and ignores the flag; Wireshark honours it.
    LINKTYPE_IEEE802_11 frames carry no FCS (Wireshark's default).
    """
    if lt == LINKTYPE_IEEE802_11:
        return _ieee80211(b, s, end, wire, msdu, OUTER, NO_LAYERS, i, c16, c64)
    if s + RADIOTAP_HEADER > end or _u8(b, s) != 0:
        return 0, s, L_TRUNCATED, end, wire
    length = _u8(b, s + 2) | (_u8(b, s + 3) << 8)
    if length < RADIOTAP_HEADER or s + length > end:
        return 0, s, L_TRUNCATED, end, wire
    q = s + 4
    for _ in range(MAX_RADIOTAP_PRESENT):
        if q + 4 > s + length:
            return 0, s, L_TRUNCATED, end, wire
        if not _u8(b, q + 3) & RADIOTAP_EXT_BYTE:
            break
        q += 4
    else:
        return 0, s, L_TRUNCATED, end, wire
    q += 4
    present = _u8(b, s + 4)
    if present & RADIOTAP_TSFT:
        q = s + ((q - s + RADIOTAP_TSFT_LEN - 1) & ~(RADIOTAP_TSFT_LEN - 1)) + RADIOTAP_TSFT_LEN
    if present & RADIOTAP_FLAGS and q < s + length and _u8(b, q) & RADIOTAP_F_FCS:
        wire -= FCS_LEN
        end = min(end, wire)
    return _ieee80211(b, s + length, end, wire, msdu, OUTER, NO_LAYERS, i, c16, c64)


@njit(_nrt=False)
def _ip_by_version(b, p, end):
    if p + 1 > end:
        return 0
    version = _u8(b, p) >> 4
    if version == 4:
        return ETHERTYPE_IP4
    if version == 6:
        return ETHERTYPE_IP6
    return 0


@njit(_nrt=False)
def _ip_matches(b, q, lim, etype):
    """Whether the bytes at `q` begin an IP header of the version `etype` announces."""
    if q + 1 > lim:
        return False
    version = _u8(b, q) >> 4
    return (etype == ETHERTYPE_IP4 and version == 4) or (etype == ETHERTYPE_IP6 and version == 6)


@njit(_nrt=False)
def _link(b, s, end, lt, i, c16, c64):
    """The record's link header: (network ethertype or 0, offset of the network header, layers)."""
    layers = NO_LAYERS
    if lt == LINKTYPE_ETHERNET:
        return _ethernet(b, s, end, OUTER, layers, i, c16, c64)
    if lt == LINKTYPE_RAW:
        return _ip_by_version(b, s, end), s, layers
    if lt == LINKTYPE_IPV4:
        return ETHERTYPE_IP4, s, layers
    if lt == LINKTYPE_IPV6:
        return ETHERTYPE_IP6, s, layers
    if lt == LINKTYPE_LINUX_SLL or lt == LINKTYPE_LINUX_SLL2:
        if lt == LINKTYPE_LINUX_SLL:
            header = SLL_HEADER
            if s + header > end:
                return 0, s, layers | L_TRUNCATED
            hatype = _u16(b, s + 2)
            addr_len = _u16(b, s + 4)
            addr = s + 6
            proto = _u16(b, s + 14)
        else:
            header = SLL2_HEADER
            if s + header > end:
                return 0, s, layers | L_TRUNCATED
            proto = _u16(b, s)
            hatype = _u16(b, s + 8)
            addr_len = _u8(b, s + 11)
            addr = s + 12
        if addr_len == MAC_BYTES:
            c64[SRC_MAC, i] = _mac(b, addr)
            layers |= L_SRC_MAC
        if hatype == ARPHRD_CAN or hatype == ARPHRD_NETLINK or proto <= ETH_MAX_LENGTH:
            return 0, s + header, layers
        return _l2_walk(b, s + header, end, proto, OUTER, layers, i, c16)
    if lt == LINKTYPE_NULL or lt == LINKTYPE_LOOP:
        if s + NULL_HEADER > end:
            return 0, s, layers | L_TRUNCATED
        family = _u32(b, s)
        if lt == LINKTYPE_NULL and family > 0xFFFF:
            # written in the capturing host's byte order; a little-endian writer's family
            # reads as a huge big-endian number
            family = _u8(b, s) | (_u8(b, s + 1) << 8)
        if family == BSD_AF_INET:
            return ETHERTYPE_IP4, s + NULL_HEADER, layers
        if family == BSD_AF_INET6_NETBSD or family == BSD_AF_INET6_FREEBSD or family == BSD_AF_INET6_DARWIN:
            return ETHERTYPE_IP6, s + NULL_HEADER, layers
        return 0, s + NULL_HEADER, layers
    if lt == LINKTYPE_PPP or lt == LINKTYPE_PPP_HDLC:
        net, p = _ppp_protocol(b, s, end)
        if net < 0:
            return 0, p, layers | L_TRUNCATED
        if net == ETHERTYPE_MPLS:
            return _l2_walk(b, p, end, net, OUTER, layers, i, c16)
        return net, p, layers
    if lt == LINKTYPE_PPP_ETHER:
        return _l2_walk(b, s, end, np.int64(ETHERTYPE_PPPOE_SESSION), OUTER, layers, i, c16)
    if lt == LINKTYPE_C_HDLC:
        if s + CHDLC_HEADER > end:
            return 0, s, layers | L_TRUNCATED
        return _l2_walk(b, s + CHDLC_HEADER, end, _u16(b, s + 2), OUTER, layers, i, c16)
    return 0, s, layers


# ---- network layer -------------------------------------------------------------
@njit(_nrt=False)
def _ip4_lo(b, p):
    return IP4_MAPPED | np.uint64(_u32(b, p))


@njit(_nrt=False)
def _ext_chain(b, q, lim, nh):
    """Walk IPv6 extension headers from `q`: (final next header, its offset, fragment offset,
    more-fragments, fragment id, complete)."""
    frag_off = 0
    more = 0
    frag_id = 0
    for _ in range(MAX_IPV6_EXT_HEADERS):
        if (nh == PROTO_HOPOPTS or nh == PROTO_ROUTING or nh == PROTO_DSTOPTS or nh == PROTO_MOBILITY
                or nh == PROTO_HIP or nh == PROTO_SHIM6):
            if q + 2 > lim:
                return nh, q, frag_off, more, frag_id, False
            length = (_u8(b, q + 1) + 1) * 8
        elif nh == PROTO_AH:
            if q + 2 > lim:
                return nh, q, frag_off, more, frag_id, False
            length = (_u8(b, q + 1) + 2) * 4
        elif nh == PROTO_FRAGMENT:
            if q + 8 > lim:
                return nh, q, frag_off, more, frag_id, False
            word = _u16(b, q + 2)
            frag_off = word & IP6_OFFSET_MASK
            more = word & IP6_MORE_FRAGMENTS
            frag_id = _u32(b, q + 4)
            length = 8
        else:
            return nh, q, frag_off, more, frag_id, True
        nh = _u8(b, q)
        q += length
    return nh, q, frag_off, more, frag_id, False


@njit(_nrt=False)
def _has_ports(proto):
    return (proto == PROTO_TCP or proto == PROTO_UDP or proto == PROTO_SCTP or proto == PROTO_DCCP
            or proto == PROTO_UDPLITE)


@njit(_nrt=False)
def _quote(b, q, lim, version, layers, i, c8, c16, c64):
    """The IP header (and first 4 transport bytes) an ICMP error quotes, at `q`."""
    if version == 4:
        if q + IP4_HEADER > lim or _u8(b, q) >> 4 != 4:
            return layers
        ihl = (_u8(b, q) & 15) * 4
        if ihl < IP4_HEADER:
            return layers
        c64[QUOTE_SRC_HI, i] = 0
        c64[QUOTE_SRC_LO, i] = _ip4_lo(b, q + 12)
        c64[QUOTE_DST_HI, i] = 0
        c64[QUOTE_DST_LO, i] = _ip4_lo(b, q + 16)
        proto = _u8(b, q + 9)
        first = (_u16(b, q + 6) & IP4_OFFSET_MASK) == 0
        l4 = q + ihl
    else:
        if q + IP6_HEADER > lim or _u8(b, q) >> 4 != 6:
            return layers
        c64[QUOTE_SRC_HI, i] = _be64(b, q + 8)
        c64[QUOTE_SRC_LO, i] = _be64(b, q + 16)
        c64[QUOTE_DST_HI, i] = _be64(b, q + 24)
        c64[QUOTE_DST_LO, i] = _be64(b, q + 32)
        proto, l4, frag_off, _more, _fid, complete = _ext_chain(b, q + IP6_HEADER, lim, _u8(b, q + 6))
        first = complete and frag_off == 0
    c8[QUOTE_PROTO, i] = proto
    layers |= L_QUOTE
    if first and _has_ports(proto) and l4 + 4 <= lim:
        c16[QUOTE_SRC_PORT, i] = _u16(b, l4)
        c16[QUOTE_DST_PORT, i] = _u16(b, l4 + 2)
        layers |= L_QUOTE_PORTS
    return layers


@njit(_nrt=False)
def _payload(s, p, header, l4len, layers, i, c16, c32):
    """Transport payload length and offset, from the IP-declared transport length."""
    if l4len < header:
        return layers | L_TRUNCATED
    c32[PAYLOAD_LEN, i] = l4len - header
    c16[PAYLOAD_OFF, i] = p + header - s
    return layers | L_PAYLOAD


@njit(_nrt=False)
def _inner_ip_length_is(b, p, lim, length):
    """Whether an IP header at `p` declares exactly `length` bytes (the rest of its carrier)."""
    version = _ip_by_version(b, p, lim)
    if version == ETHERTYPE_IP4:
        return p + 4 <= lim and _u16(b, p + 2) == length
    if version == ETHERTYPE_IP6:
        return p + 6 <= lim and IP6_HEADER + _u16(b, p + 4) == length
    return False


@njit(_nrt=False)
def _vxlan(b, q, lim):
    """VXLAN (RFC 7348) at `q`: (inner offset or -1).

    The I flag set and every reserved bit zero, as Linux's receive path checks
    (vxlan_rcv drops a header with bits it does not know); with the
    group-policy extension (VXLAN-GBP) its G, D and A bits and policy ID are
    allowed too. Zeek checks the I flag alone and Wireshark nothing, but a
    payload on port 4789 that fails this (and is no VXLAN-GPE header either)
    is some other protocol, and stays a UDP flow of its own.
    """
    if q + VXLAN_HEADER + ETH_HEADER > lim:
        return -1
    flags = _u8(b, q)
    if (flags & ~VXLAN_GBP_G) != VXLAN_I or _u8(b, q + 7) != 0:
        return -1
    if flags & VXLAN_GBP_G:
        if _u8(b, q + 1) & ~VXLAN_GBP_DA:
            return -1
    elif _u8(b, q + 1) or _u16(b, q + 2):
        return -1
    return q + VXLAN_HEADER


@njit(_nrt=False)
def _vxlan_gpe(b, q, lim):
    """VXLAN-GPE (draft-ietf-nvo3-vxlan-gpe) at `q`: (inner ethertype or 0, inner offset).

    Version 0, the I and P flags set (section 3.2: the next protocol field
    is always present), the reserved bits zero; the next protocol field says
    what follows, as Wireshark's vxlan-gpe dissector reads it. NSH and
    unknown protocols stay undecoded.
    """
    if q + VXLAN_HEADER > lim:
        return 0, q
    flags = _u8(b, q)
    if (flags & (VXLAN_GPE_VERSION | VXLAN_GPE_RESERVED) or not flags & VXLAN_I or not flags & VXLAN_GPE_P
            or _u16(b, q + 1) or _u8(b, q + 7)):
        return 0, q
    inner = q + VXLAN_HEADER
    proto = _u8(b, q + 3)
    if proto == VXLAN_GPE_ETHERNET:
        return (ETHERTYPE_TEB, inner) if inner + ETH_HEADER <= lim else (0, q)
    if proto == VXLAN_GPE_MPLS:
        return (ETHERTYPE_MPLS, inner) if inner + MPLS_LABEL <= lim else (0, q)
    net = ETHERTYPE_IP4 if proto == VXLAN_GPE_IP4 else ETHERTYPE_IP6 if proto == VXLAN_GPE_IP6 else 0
    return (net, inner) if _ip_matches(b, inner, lim, net) else (0, q)


@njit(_nrt=False)
def _geneve(b, q, lim):
    """Geneve (RFC 8926) at `q`: (inner ethertype or 0, inner offset).

    Version 0 (section 3.4: any other is not understood), options that tile
    the option length exactly (section 3.5; Zeek checks only that the option
    length fits, Wireshark flags a misfit), and a protocol type the decoder
    continues with: Ethernet, IPv4, IPv6 (of the matching version), ARP, MPLS.
    """
    if q + GENEVE_HEADER > lim or _u8(b, q) >> 6 != 0:
        return 0, q
    inner = q + GENEVE_HEADER + (_u8(b, q) & 0x3F) * 4
    o = q + GENEVE_HEADER
    while o < inner:
        if o + GENEVE_OPTION_HEADER > lim:
            return 0, q
        o += GENEVE_OPTION_HEADER + (_u8(b, o + 3) & GENEVE_OPTION_WORDS) * 4
    if o != inner:
        return 0, q
    proto = _u16(b, q + 2)
    if proto == ETHERTYPE_TEB:
        return (ETHERTYPE_TEB, inner) if inner + ETH_HEADER <= lim else (0, q)
    if proto == ETHERTYPE_ARP or proto == ETHERTYPE_MPLS:
        return (proto, inner) if inner + 1 <= lim else (0, q)
    return (proto, inner) if _ip_matches(b, inner, lim, proto) else (0, q)


@njit(_nrt=False)
def _gtp_u(b, q, lim, datagram):
    """A GTP-U G-PDU (3GPP TS 29.281) at `q`, `datagram` bytes long: (inner ethertype or 0, inner offset).

    Version 1, protocol type GTP, the spare bit clear, message type G-PDU (the
    others carry signalling, not a user packet), the extension header chain
    whole, and a length field that both fits the datagram and is exactly the
    inner IP packet's own length: Zeek decapsulates only a packet that parses
    as exactly the rest of the G-PDU ("GTPv1 payload length" violation
    otherwise). Lengths are the headers' (wire), so a snapshot cut changes nothing.
    """
    if q + GTP_HEADER > lim:
        return 0, q
    flags = _u8(b, q)
    if (flags >> 5 != GTP_VERSION_1 or not (flags & GTP_PT) or flags & GTP_SPARE
            or _u8(b, q + 1) != GTP_G_PDU):
        return 0, q
    length = _u16(b, q + 2)
    if GTP_HEADER + length > datagram:
        return 0, q
    inner = q + GTP_HEADER
    if flags & GTP_FLAGS_OPTIONAL:
        inner += GTP_OPTIONAL
        if inner > lim:
            return 0, q
        next_ext = _u8(b, inner - 1) if flags & GTP_FLAG_EXTENSION else 0
        for _ in range(MAX_GTP_EXTENSIONS):
            if next_ext == 0:
                break
            if inner + 1 > lim or _u8(b, inner) == 0:
                return 0, q
            ext_len = _u8(b, inner) * 4
            if inner + ext_len > lim:
                return 0, q
            next_ext = _u8(b, inner + ext_len - 1)
            inner += ext_len
        else:
            return 0, q
    if not _inner_ip_length_is(b, inner, lim, q + GTP_HEADER + length - inner):
        return 0, q
    return _ip_by_version(b, inner, lim), inner


@njit(_nrt=False)
def _teredo(b, q, lim):
    """Teredo (RFC 4380) at `q`: (inner offset or -1), as Zeek's Teredo analyzer decides.

    An optional authentication header, then an optional origin indication
    (section 5.1.1; Zeek refuses them in any other order or twice), then an
    IPv6 header whose payload length fits what is there: a longer payload is
    a violation, a shorter one too, except for a bubble (no next header,
    payload length 0), where Zeek only notes "Teredo_bubble_with_payload" and
    decapsulates. Wireshark decapsulates anything on port 3544.
    """
    p = q
    if p + 4 <= lim and _u16(b, p) == TEREDO_AUTH:
        p += TEREDO_AUTH_FIXED + _u8(b, p + 2) + _u8(b, p + 3)
    if p + 2 <= lim and _u16(b, p) == TEREDO_ORIGIN:
        p += TEREDO_ORIGIN_LEN
    if p + IP6_HEADER > lim or _u8(b, p) >> 4 != 6:
        return -1
    plen = _u16(b, p + 4)
    extra = lim - (p + IP6_HEADER + plen)
    if extra < 0 or (extra > 0 and (plen != 0 or _u8(b, p + 6) != PROTO_NONE)):
        return -1
    return p


@njit(_nrt=False)
def _looks_like_teredo(b, q, lim):
    """Zeek's Teredo protocol detection, for UDP on ports without a tunnel of their own.

    Teredo clients and relays talk from any port (RFC 4380 section 5.2), so
    Zeek (TeredoAnalyzer::DetectProtocol) takes as Teredo a payload of at
    least 40 bytes that is an IPv6 header with a Teredo (2001::/32) source or
    destination, or an origin indication (after an optional authentication
    header) followed by an IPv6 header. Wireshark's equivalent heuristic is off
    by default.
    """
    if q + IP6_HEADER > lim:
        return False
    if _u8(b, q) >> 4 == 6:
        return _u32(b, q + 8) == TEREDO_PREFIX or _u32(b, q + 24) == TEREDO_PREFIX
    p = q
    if _u16(b, p) == TEREDO_AUTH:
        p += TEREDO_AUTH_FIXED + _u8(b, p + 2) + _u8(b, p + 3)
        if p + IP6_HEADER > lim:
            return False
    if _u16(b, p) != TEREDO_ORIGIN:
        return False
    p += TEREDO_ORIGIN_LEN
    return p + IP6_HEADER <= lim and _u8(b, p) >> 4 == 6


@njit(_nrt=False)
def _ayiya(b, q, lim):
    """AYIYA (draft-massar-v6ops-ayiya) at `q`: (inner ethertype or 0, inner offset).

    As Zeek's AYIYA analyzer: the header with its identity and signature
    fits, the opcode is "forward", and the next header (IPv4 or IPv6) matches
    the version of the packet that follows.
    """
    if q + AYIYA_HEADER > lim or (_u8(b, q + 2) & 0x0F) != AYIYA_OP_FORWARD:
        return 0, q
    inner = q + AYIYA_HEADER + (1 << (_u8(b, q) >> 4)) + (_u8(b, q + 1) >> 4) * 4
    nh = _u8(b, q + 3)
    net = ETHERTYPE_IP4 if nh == PROTO_IPIP else ETHERTYPE_IP6 if nh == PROTO_IPV6 else 0
    return (net, inner) if _ip_matches(b, inner, lim, net) else (0, q)


@njit(_nrt=False)
def _udp_tunnel(b, q, lim, datagram, sport, dport):
    """A tunnel in the UDP payload at `q` (`datagram` bytes on the wire): (inner ethertype, inner offset,
    tunnel kind), kind 0 if none.

    Each tunnel is recognised by its port (either side, as Wireshark; Zeek
    looks at the responder's, which its role flip makes the same) and then
    validated as its own analyzer would; a payload that fails stays what it
    is, a UDP datagram. Teredo and AYIYA, which Zeek also finds by content on
    any other port, are looked for there the same way.
    """
    if dport == PORT_VXLAN or sport == PORT_VXLAN:
        inner = _vxlan(b, q, lim)
        if inner >= 0:
            return ETHERTYPE_TEB, inner, TUNNEL_VXLAN
        # a VXLAN-GPE header on VXLAN's port, as scapy writes one before an Ethernet layer (Zeek's
        # vxlan-triple-v2.pcap): Wireshark and Zeek decode it, and its next protocol says what follows
        net, inner = _vxlan_gpe(b, q, lim)
        return net, inner, TUNNEL_VXLAN if net else 0
    if dport == PORT_GENEVE or sport == PORT_GENEVE:
        net, inner = _geneve(b, q, lim)
        return net, inner, TUNNEL_GENEVE if net else 0
    if dport == PORT_GTP_U or sport == PORT_GTP_U:
        net, inner = _gtp_u(b, q, lim, datagram)
        return net, inner, TUNNEL_GTP if net else 0
    if dport == PORT_VXLAN_GPE or sport == PORT_VXLAN_GPE:
        net, inner = _vxlan_gpe(b, q, lim)
        return net, inner, TUNNEL_VXLAN if net else 0
    if dport == PORT_GRE_UDP or sport == PORT_GRE_UDP:
        # RFC 8086 section 3: a GRE header (RFC 2784, RFC 2890) of version 0, its reserved bits zero
        if q + GRE_HEADER > lim or _u16(b, q) & (GRE_ROUTING | GRE_RESERVED0 | GRE_VERSION_MASK):
            return 0, q, 0
        return _gre(b, q, lim)
    teredo_port = dport == PORT_TEREDO or sport == PORT_TEREDO
    ayiya_port = dport == PORT_AYIYA or sport == PORT_AYIYA
    if not (teredo_port or ayiya_port):
        # any other port: the payload's first word says whether it can be Teredo (an IPv6 header, an
        # origin indication or an authentication header) or AYIYA, so most datagrams stop at one read
        if q + 4 > lim:
            return 0, q, 0
        first = _u32(b, q)
        if not (first >> 28 == 6 or first >> 17 == 0 or (first >> 8) & 0xFFFF == AYIYA_SHA1_FORWARD_AUTH):
            return 0, q, 0
    if teredo_port or _looks_like_teredo(b, q, lim):
        inner = _teredo(b, q, lim)
        return (ETHERTYPE_IP6, inner, TUNNEL_TEREDO) if inner >= 0 else (0, q, 0)
    if ayiya_port or (_u32(b, q) >> 8) & 0xFFFF == AYIYA_SHA1_FORWARD_AUTH:
        net, inner = _ayiya(b, q, lim)
        return net, inner, TUNNEL_AYIYA if net else 0
    return 0, q, 0


@njit(_nrt=False)
def _gre(b, p, lim):
    """The payload of a GRE header at `p`: (inner ethertype, inner offset, tunnel kind), kind 0 if none."""
    if p + GRE_HEADER > lim:
        return 0, p, 0
    flags = _u16(b, p)
    ptype = _u16(b, p + 2)
    version = flags & GRE_VERSION_MASK
    if version == 1:
        if ptype != ETHERTYPE_PPP or not (flags & GRE_KEY) or p + GRE_PPTP_HEADER > lim:
            return 0, p, 0
        if _u16(b, p + 4) == 0:      # acknowledgement only, no payload
            return 0, p, 0
        q = p + GRE_PPTP_HEADER + (4 if flags & GRE_SEQUENCE else 0) + (4 if flags & GRE_ACK else 0)
        net, q = _ppp_protocol(b, q, lim)
        if _ip_matches(b, q, lim, net):
            return net, q, TUNNEL_GRE
        return 0, p, 0
    if version != 0 or flags & GRE_ROUTING:
        return 0, p, 0
    q = p + GRE_HEADER
    if flags & GRE_CHECKSUM:
        q += 4
    if flags & GRE_KEY:
        q += 4
    if flags & GRE_SEQUENCE:
        q += 4
    if _ip_matches(b, q, lim, ptype) or ((ptype == ETHERTYPE_MPLS or ptype == ETHERTYPE_ARP) and q + 1 <= lim):
        return ptype, q, TUNNEL_GRE
    if ptype == ETHERTYPE_IP4 or ptype == ETHERTYPE_IP6 or ptype == ETHERTYPE_MPLS or ptype == ETHERTYPE_ARP:
        return 0, p, 0
    if ptype == ETHERTYPE_TEB:
        if q + ETH_HEADER <= lim:
            return ETHERTYPE_TEB, q, TUNNEL_GRE
        return 0, p, 0
    if ((GRE_ARUBA_FIRST <= ptype <= GRE_ARUBA_LAST and not ptype & GRE_ARUBA_STEP_MASK)
            or ptype == GRE_ARUBA_9000):
        if q + WLAN_HEADER <= lim:
            return INNER_IEEE80211, q, TUNNEL_GRE
        return 0, p, 0
    if ptype == ETHERTYPE_ERSPAN_2:
        if flags & GRE_SEQUENCE:     # type II has a header; type I (no sequence number) has none
            q += ERSPAN_2_HEADER
    elif ptype == ETHERTYPE_ERSPAN_3:
        if q + ERSPAN_3_HEADER > lim:
            return 0, p, 0
        extra = ERSPAN_3_SUBHEADER if _u8(b, q + ERSPAN_3_HEADER - 1) & ERSPAN_3_O_FLAG else 0
        q += ERSPAN_3_HEADER + extra
    else:
        return 0, p, 0
    if q + ETH_HEADER <= lim:
        return ETHERTYPE_TEB, q, TUNNEL_ERSPAN
    return 0, p, 0


@njit(_nrt=False)
def _transport(b, s, p, lim, proto, l4len, can_decap, layers, i, c8, c16, c32, c64):
    """The transport header at `p` (bytes to `lim`): (layers, inner ethertype, inner offset, tunnel)."""
    if proto == PROTO_TCP:
        if p + 4 > lim:
            return layers | L_TRUNCATED, 0, 0, 0
        c16[SRC_PORT, i] = _u16(b, p)
        c16[DST_PORT, i] = _u16(b, p + 2)
        layers |= L_PORTS
        if p + TCP_HEADER > lim:
            return layers | L_TRUNCATED, 0, 0, 0
        doff = (_u8(b, p + 12) >> 4) * 4
        if doff < TCP_HEADER:
            return layers | L_TRUNCATED, 0, 0, 0
        c16[TCP_FLAGS, i] = ((_u8(b, p + 12) & 1) << 8) | _u8(b, p + 13)
        c32[TCP_SEQ, i] = _u32(b, p + 4)
        c32[TCP_ACK, i] = _u32(b, p + 8)
        c16[TCP_WINDOW, i] = _u16(b, p + 14)
        layers |= L_TCP
        q = p + TCP_HEADER
        opt_end = min(p + doff, lim)
        while q < opt_end:
            kind = _u8(b, q)
            if kind == TCPOPT_EOL:
                break
            if kind == TCPOPT_NOP:
                q += 1
                continue
            if q + 2 > opt_end:
                break
            olen = _u8(b, q + 1)
            if olen < 2 or q + olen > opt_end:
                break
            if kind == TCPOPT_MSS and olen == 4:
                c16[TCP_MSS, i] = _u16(b, q + 2)
                layers |= L_MSS
            elif kind == TCPOPT_WSCALE and olen == 3:
                c8[TCP_WSCALE, i] = _u8(b, q + 2)
                layers |= L_WSCALE
            elif kind == TCPOPT_SACK_PERM and olen == 2:
                layers |= L_SACK_PERM
            elif kind == TCPOPT_TIMESTAMP and olen == 10:
                c32[TCP_TSVAL, i] = _u32(b, q + 2)
                c32[TCP_TSECR, i] = _u32(b, q + 6)
                layers |= L_TCP_TS
            q += olen
        if p + doff > lim:
            layers |= L_TRUNCATED
        return _payload(s, p, doff, l4len, layers, i, c16, c32), 0, 0, 0
    if proto == PROTO_UDP or proto == PROTO_UDPLITE:
        if p + 4 > lim:
            return layers | L_TRUNCATED, 0, 0, 0
        sport = _u16(b, p)
        dport = _u16(b, p + 2)
        c16[SRC_PORT, i] = sport
        c16[DST_PORT, i] = dport
        layers |= L_PORTS
        if p + UDP_HEADER > lim:
            return layers | L_TRUNCATED, 0, 0, 0
        if proto == PROTO_UDP:
            layers |= L_UDP
        # the IP length, not the UDP length field: both describe one datagram, and
        # the IP one is what the other transports use too (a mismatch is malformed)
        layers = _payload(s, p, np.int64(UDP_HEADER), l4len, layers, i, c16, c32)
        if can_decap and proto == PROTO_UDP:
            inner, q, kind = _udp_tunnel(b, p + UDP_HEADER, lim, l4len - UDP_HEADER, sport, dport)
            return layers, inner, q, kind
        return layers, 0, 0, 0
    if proto == PROTO_ICMP or proto == PROTO_ICMP6:
        if p + 2 > lim:
            return layers | L_TRUNCATED, 0, 0, 0
        icmp_type = _u8(b, p)
        code = _u8(b, p + 1)
        c8[ICMP_TYPE, i] = icmp_type
        c8[ICMP_CODE, i] = code
        layers |= L_ICMP if proto == PROTO_ICMP else L_ICMP6
        if p + ICMP_HEADER > lim:
            return layers | L_TRUNCATED, 0, 0, 0
        layers = _payload(s, p, np.int64(ICMP_HEADER), l4len, layers, i, c16, c32)
        if proto == PROTO_ICMP:
            if icmp_type == ICMP_UNREACH and code == ICMP_FRAG_NEEDED:
                c32[ICMP_MTU, i] = _u16(b, p + 6)
                layers |= L_MTU
            if (icmp_type == ICMP_UNREACH or icmp_type == ICMP_SOURCE_QUENCH or icmp_type == ICMP_REDIRECT
                    or icmp_type == ICMP_TIME_EXCEEDED or icmp_type == ICMP_PARAM_PROBLEM):
                layers = _quote(b, p + ICMP_HEADER, lim, IPV4, layers, i, c8, c16, c64)
        else:
            if icmp_type == ICMP6_PACKET_TOO_BIG:
                c32[ICMP_MTU, i] = _u32(b, p + 4)
                layers |= L_MTU
            if 1 <= icmp_type <= ICMP6_ERROR_MAX:
                layers = _quote(b, p + ICMP_HEADER, lim, IPV6, layers, i, c8, c16, c64)
        return layers, 0, 0, 0
    if proto == PROTO_SCTP or proto == PROTO_DCCP:
        if p + 4 > lim:
            return layers | L_TRUNCATED, 0, 0, 0
        c16[SRC_PORT, i] = _u16(b, p)
        c16[DST_PORT, i] = _u16(b, p + 2)
        layers |= L_PORTS
        if proto == PROTO_SCTP:
            if p + SCTP_HEADER > lim:
                return layers | L_TRUNCATED, 0, 0, 0
            layers = _payload(s, p, np.int64(SCTP_HEADER), l4len, layers | L_SCTP, i, c16, c32)
        return layers, 0, 0, 0
    if can_decap and (proto == PROTO_IPIP or proto == PROTO_IPV6):
        inner = ETHERTYPE_IP4 if proto == PROTO_IPIP else ETHERTYPE_IP6
        if _ip_matches(b, p, lim, inner):
            return layers, inner, p, TUNNEL_IPIP
        return layers, 0, 0, 0
    if can_decap and proto == PROTO_GRE:
        inner, q, kind = _gre(b, p, lim)
        return layers, inner, q, kind
    return layers, 0, 0, 0


@njit(_nrt=False)
def _ip4(b, s, p, end, wire, can_decap, layers, i, c8, c16, c32, c64):
    """An IPv4 header at `p` (captured bytes to `end`, the frame to `wire` on the wire): (layers,
    inner ethertype, inner offset, tunnel kind, end of the packet on the wire)."""
    if p + IP4_HEADER > end or p - s > MAX_IP_OFFSET or _u8(b, p) >> 4 != 4:
        return layers | L_TRUNCATED, 0, 0, 0, 0
    ihl = (_u8(b, p) & 15) * 4
    total = _u16(b, p + 2)
    if total == 0:
        # segmentation offload and Linux BIG TCP (over 64 KiB): the stack leaves the length to
        # the NIC, the frame holds the packet; its wire length, as Wireshark takes it
        total = wire - p
    if ihl < IP4_HEADER or total < ihl:
        return layers | L_TRUNCATED, 0, 0, 0, 0
    frag = _u16(b, p + 6)
    frag_off = (frag & IP4_OFFSET_MASK) * 8
    proto = _u8(b, p + 9)
    c8[IP_VERSION, i] = 4
    c8[PROTO, i] = proto
    c8[TTL, i] = _u8(b, p + 8)
    c32[IP_ID, i] = _u16(b, p + 4)
    c32[IP_LEN, i] = total
    c8[IP_FLAGS, i] = (IP_MF if frag & IP4_MORE_FRAGMENTS else 0) | (IP_DF if frag & IP4_DONT_FRAGMENT else 0)
    c32[FRAG_OFFSET, i] = frag_off
    c64[SRC_IP_LO, i] = _ip4_lo(b, p + 12)
    c64[DST_IP_LO, i] = _ip4_lo(b, p + 16)
    c16[L3_OFF, i] = p - s
    c16[L4_OFF, i] = p + ihl - s
    layers |= L_IP4
    if frag & IP4_MORE_FRAGMENTS or frag_off:
        layers |= L_FRAG
    if p + ihl > end:
        return layers | L_TRUNCATED, 0, 0, 0, 0
    if frag_off:
        return layers, 0, 0, 0, 0
    lim = min(end, p + total)
    layers, net, q, kind = _transport(b, s, p + ihl, lim, proto, total - ihl,
                                      can_decap and not (frag & IP4_MORE_FRAGMENTS), layers, i, c8, c16, c32, c64)
    return layers, net, q, kind, p + total


@njit(_nrt=False)
def _jumbo_length(b, q, end):
    """The RFC 2675 Jumbo Payload length in the hop-by-hop options header at `q`, or -1."""
    if q + 2 > end:
        return -1
    stop = min(q + (_u8(b, q + 1) + 1) * 8, end)
    o = q + 2
    while o < stop:
        kind = _u8(b, o)
        if kind == IP6OPT_PAD1:
            o += 1
            continue
        if o + 2 > stop:
            return -1
        if kind == IP6OPT_JUMBO and _u8(b, o + 1) == IP6OPT_JUMBO_LEN and o + 2 + IP6OPT_JUMBO_LEN <= stop:
            length = _u32(b, o + 2)
            return length if length >= JUMBO_MIN else -1
        o += 2 + _u8(b, o + 1)
    return -1


@njit(_nrt=False)
def _ip6(b, s, p, end, wire, can_decap, layers, i, c8, c16, c32, c64):
    """An IPv6 header at `p` and its extension headers (captured bytes to `end`, the frame to `wire` on
    the wire): (layers, inner ethertype, inner offset, tunnel kind, end of the packet on the wire)."""
    if p + IP6_HEADER > end or p - s > MAX_IP_OFFSET or _u8(b, p) >> 4 != 6:
        return layers | L_TRUNCATED, 0, 0, 0, 0
    plen = _u16(b, p + 4)
    if plen == 0 and _u8(b, p + 6) != PROTO_NONE:
        # a jumbogram: its length is in the hop-by-hop Jumbo Payload option (RFC 2675), as Linux
        # BIG TCP wrote it before 6.3; without one (BIG TCP since, segmentation offload) the frame
        # holds the packet, as Wireshark takes it. A Teredo bubble (no next header) is a header alone.
        jumbo = _jumbo_length(b, p + IP6_HEADER, end) if _u8(b, p + 6) == PROTO_HOPOPTS else -1
        plen = jumbo if jumbo > 0 else max(wire - p - IP6_HEADER, 0)
    c8[IP_VERSION, i] = 6
    c8[TTL, i] = _u8(b, p + 7)
    c32[IP_LEN, i] = IP6_HEADER + plen
    c64[SRC_IP_HI, i] = _be64(b, p + 8)
    c64[SRC_IP_LO, i] = _be64(b, p + 16)
    c64[DST_IP_HI, i] = _be64(b, p + 24)
    c64[DST_IP_LO, i] = _be64(b, p + 32)
    c16[L3_OFF, i] = p - s
    layers |= L_IP6
    ip_end = p + IP6_HEADER + plen
    lim = min(end, ip_end)
    proto, q, frag_off, more, frag_id, complete = _ext_chain(b, p + IP6_HEADER, lim, _u8(b, p + 6))
    c8[PROTO, i] = proto
    c16[L4_OFF, i] = q - s
    c32[IP_ID, i] = frag_id
    c8[IP_FLAGS, i] = IP_MF if more else 0
    c32[FRAG_OFFSET, i] = frag_off
    if frag_off or more:
        layers |= L_FRAG
    if not complete or q > ip_end:
        return layers | L_TRUNCATED, 0, 0, 0, 0
    if frag_off:
        return layers, 0, 0, 0, 0
    layers, net, q, kind = _transport(b, s, q, lim, proto, ip_end - q, can_decap and not more, layers, i, c8, c16,
                                      c32, c64)
    return layers, net, q, kind, ip_end


@njit(_nrt=False)
def _arp(b, p, end, layers, i, c16, c32, c64):
    """An ARP (or RARP) packet for IPv4 over 6-byte hardware addresses, RFC 826."""
    if p + 8 > end:
        return layers | L_TRUNCATED
    if _u8(b, p + 4) != MAC_BYTES or _u8(b, p + 5) != 4 or _u16(b, p + 2) != ETHERTYPE_IP4:
        return layers
    if p + 28 > end:
        return layers | L_TRUNCATED
    c16[ARP_OP, i] = _u16(b, p + 6)
    c64[ARP_SHA, i] = _mac(b, p + 8)
    c32[ARP_SPA, i] = _u32(b, p + 14)
    c64[ARP_THA, i] = _mac(b, p + 18)
    c32[ARP_TPA, i] = _u32(b, p + 24)
    return layers | L_ARP


@njit(_nrt=False)
def _begin_tunnel(kind, layers, i, c8, c16, c32, c64):
    """Keep the outer header's identity (the first time only), then clear the network columns."""
    if not (layers & L_TUNNEL):
        c8[TUNNEL, i] = kind
        c64[OUTER_SRC_HI, i] = c64[SRC_IP_HI, i]
        c64[OUTER_SRC_LO, i] = c64[SRC_IP_LO, i]
        c64[OUTER_DST_HI, i] = c64[DST_IP_HI, i]
        c64[OUTER_DST_LO, i] = c64[DST_IP_LO, i]
        c8[OUTER_PROTO, i] = c8[PROTO, i]
        if layers & L_UDP:
            c16[OUTER_SRC_PORT, i] = c16[SRC_PORT, i]
            c16[OUTER_DST_PORT, i] = c16[DST_PORT, i]
    for r in NET_ROWS_U8:
        c8[r, i] = 0
    for r in NET_ROWS_U16:
        c16[r, i] = 0
    for r in NET_ROWS_U32:
        c32[r, i] = 0
    for r in NET_ROWS_U64:
        c64[r, i] = 0
    return (layers & LINK_BITS) | L_TUNNEL


@njit(_nrt=False)
def _frame(b, s, end, wire, lt, msdu, i, c8, c16, c32, c64):
    """Decode one record, captured to `end`, `wire` on the wire (A-MSDU subframe `msdu` of an 802.11
    frame); returns its layer bits."""
    if lt == LINKTYPE_IEEE802_11 or lt == LINKTYPE_IEEE802_11_RADIOTAP:
        net, p, layers, end, wire = _wlan_link(b, s, end, wire, lt, msdu, i, c16, c64)
    else:
        net, p, layers = _link(b, s, end, lt, i, c16, c64)
    depth = 0
    while True:
        if net == ETHERTYPE_IP4 or net == ETHERTYPE_IP6:
            can_decap = depth < MAX_TUNNEL_DEPTH
            if net == ETHERTYPE_IP4:
                layers, net, p, kind, ip_end = _ip4(b, s, p, end, wire, can_decap, layers, i, c8, c16, c32, c64)
            else:
                layers, net, p, kind, ip_end = _ip6(b, s, p, end, wire, can_decap, layers, i, c8, c16, c32, c64)
            if kind == 0:
                return layers
            layers = _begin_tunnel(kind, layers, i, c8, c16, c32, c64)
            depth += 1
            # the tunnel's payload ends with its carrier (not with the frame's padding or trailer)
            wire = ip_end
            end = min(end, ip_end)
            if net == ETHERTYPE_TEB:
                net, p, layers = _ethernet(b, p, end, INNER, layers, i, c16, c64)
            elif net == ETHERTYPE_MPLS:
                net, p, layers = _l2_walk(b, p, end, net, INNER, layers, i, c16)
            elif net == INNER_IEEE80211:
                net, p, layers, end, wire = _ieee80211(b, p, end, wire, msdu, INNER, layers, i, c16, c64)
        elif net == ETHERTYPE_ARP or net == ETHERTYPE_RARP:
            return _arp(b, p, end, layers, i, c16, c32, c64)
        else:
            return layers


@kernel("(u1[::1], i8[::1], u4[::1], u4[::1], u2[::1], i8, b1, u1[:, ::1], u2[:, ::1], u4[:, ::1], "
        "u8[:, ::1])", _nrt=False, nogil=True)
def decode_batch(data, offset, caplen, wirelen, linktype, msdu, with_fingerprint, c8, c16, c32, c64):
    """Decode every record of a batch into the (column, record) arrays c8, c16, c32 and c64.

    Without the GIL, so reading and decoding the next batch overlaps the
    consumers' work on this one. The fingerprint reads every captured byte,
    the rest only headers: it is skipped when no consumer asked for it.
    `msdu` says which subframe of an 802.11 A-MSDU the rows describe (0, the
    first, for records read from a capture; a constant, so the common path
    loads nothing more per record).
    """
    n = offset.shape[0]
    for i in range(n):
        if i + PREFETCH_RECORDS < n:
            ahead = offset[i + PREFETCH_RECORDS]
            prefetch(data, ahead)
            prefetch(data, ahead + HEADER_LINE)
        s = offset[i]
        end = s + np.int64(caplen[i])
        if with_fingerprint:
            c64[FINGERPRINT, i] = xxh64(data, s, end, FINGERPRINT_SEED)
        wire = s + max(np.int64(wirelen[i]), np.int64(caplen[i]))
        c32[LAYERS, i] = _frame(data, s, end, wire, np.int64(linktype[i]), msdu, i, c8, c16, c32, c64)

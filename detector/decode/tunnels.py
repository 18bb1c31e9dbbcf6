"""Tunnels of the compiled decoder: recognised, validated, and removed so the columns describe the inner packet.

VXLAN (and VXLAN-GPE, VXLAN-GBP), Geneve, GTP-U, Teredo and AYIYA in UDP, GRE
(with PPTP's enhanced GRE, ERSPAN and Aruba's 802.11 tunnels) in IP or in
UDP; the link layer's walk goes on through a Network Service Header (RFC
8300) they carry. A tunnel found by a UDP port is validated as its own
analyzer (Zeek's, Wireshark's, the RFC's receiver) would before it is
removed; a payload that fails stays a UDP datagram. Each function returns
the ethertype of the inner packet and where it starts; `begin_tunnel` keeps
the outer header's identity in the outer_* columns and clears the network
columns for the inner packet. Header fields are named by their offset from
the header's start, as the document that defines the header draws it.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..schema import (
    L_AMSDU,
    L_BAD_CHECKSUM,
    L_DST_MAC,
    L_ETHERTYPE,
    L_QINQ,
    L_SRC_MAC,
    L_TUNNEL,
    L_UDP,
    L_VLAN,
    TUNNEL_AYIYA,
    TUNNEL_ERSPAN,
    TUNNEL_GENEVE,
    TUNNEL_GRE,
    TUNNEL_GTP,
    TUNNEL_TEREDO,
    TUNNEL_VXLAN,
)
from .columns import (
    DST_IP_HI,
    DST_IP_LO,
    DST_PORT,
    NET_ROWS_U8,
    NET_ROWS_U16,
    NET_ROWS_U32,
    NET_ROWS_U64,
    OUTER_DST_HI,
    OUTER_DST_LO,
    OUTER_DST_PORT,
    OUTER_PROTO,
    OUTER_SRC_HI,
    OUTER_SRC_LO,
    OUTER_SRC_PORT,
    PROTO,
    SRC_IP_HI,
    SRC_IP_LO,
    SRC_PORT,
    TUNNEL,
)
from .ip import (
    IP4_TOTAL_LENGTH,
    IP6_DESTINATION,
    IP6_HEADER,
    IP6_NEXT_HEADER,
    IP6_PAYLOAD_LENGTH,
    IP6_SOURCE,
    PROTO_IPIP,
    PROTO_IPV6,
    PROTO_NONE,
    ip_matches,
)
from .link import (
    ETH_HEADER,
    ETHERTYPE_ARP,
    ETHERTYPE_ERSPAN_2,
    ETHERTYPE_ERSPAN_3,
    ETHERTYPE_IP4,
    ETHERTYPE_IP6,
    ETHERTYPE_MPLS,
    ETHERTYPE_NSH,
    ETHERTYPE_PPP,
    ETHERTYPE_TEB,
    INNER_IEEE80211,
    IP_VERSION_BYTE,
    IP_VERSION_SHIFT,
    MPLS_LABEL,
    WLAN_HEADER,
    ip_by_version,
    nsh,
    ppp_protocol,
)
from .read import u8, u16, u32

# Link-layer bits a removed tunnel leaves as they are: the frame was captured on that link; and the damage
# of an outer header, which stays the frame's.
LINK_BITS = L_SRC_MAC | L_DST_MAC | L_VLAN | L_QINQ | L_ETHERTYPE | L_AMSDU | L_TUNNEL | L_BAD_CHECKSUM

# ---- UDP ports (IANA) ----------------------------------------------------------------
PORT_VXLAN = 4789             # RFC 7348
PORT_VXLAN_GPE = 4790         # draft-ietf-nvo3-vxlan-gpe
PORT_GENEVE = 6081            # RFC 8926
PORT_TEREDO = 3544            # RFC 4380
PORT_GTP_U = 2152             # 3GPP TS 29.281
PORT_AYIYA = 5072             # draft-massar-v6ops-ayiya
PORT_GRE_UDP = 4754           # RFC 8086 GRE-in-UDP (4755, its DTLS form, is encrypted)
# which port a VXLAN-GPE header came on, as numpy scalars (see detector.decode.link: one compile, not two)
GPE_PORT, VXLAN_PORT = np.bool_(True), np.bool_(False)
# ---- VXLAN (RFC 7348 section 5): flags, 3 reserved bytes, VNI, a reserved byte ----------
VXLAN_FLAGS = 0
VXLAN_GBP_FLAGS = 1           # reserved in RFC 7348; VXLAN-GBP's D and A bits
VXLAN_GROUP_POLICY_ID = 2     # reserved in RFC 7348; VXLAN-GBP's policy ID (2 bytes)
VXLAN_LAST_RESERVED = 7       # after the VNI, in VXLAN-GPE too
VXLAN_HEADER = 8
VXLAN_I = 0x08                # the VNI is valid; must be set
VXLAN_GBP_G = 0x80            # draft-smith-vxlan-group-policy: group policy ID present
VXLAN_GBP_DA = 0x48           # its D (don't learn) and A (policy applied) bits
# VXLAN-GPE (draft-ietf-nvo3-vxlan-gpe section 3.2): flags, 2 reserved bytes, next protocol, VNI
VXLAN_GPE_RESERVED_BYTES = 1
VXLAN_GPE_NEXT_PROTOCOL = 3
VXLAN_GPE_VERSION = 0x30      # version 0
VXLAN_GPE_RESERVED = 0xC0
VXLAN_GPE_P = 0x04            # next protocol field present: must be set (see _vxlan_gpe)
VXLAN_GPE_IP4 = 1
VXLAN_GPE_IP6 = 2
VXLAN_GPE_ETHERNET = 3
VXLAN_GPE_NSH = 4
VXLAN_GPE_MPLS = 5
# ---- Geneve (RFC 8926 section 3.4): version and option length, flags, protocol type, VNI ----
GENEVE_VERSION_OPTIONS = 0    # version (top 2 bits), option length in 4-byte words (low 6)
GENEVE_PROTOCOL_TYPE = 2
GENEVE_HEADER = 8
GENEVE_VERSION_SHIFT = 6
GENEVE_OPTIONS_MASK = 0x3F
GENEVE_WORD = 4
GENEVE_OPTION_LENGTH = 3      # section 3.5: class (2 bytes), type, then reserved bits and the length
GENEVE_OPTION_HEADER = 4
GENEVE_OPTION_WORDS = 0x1F
# ---- GTP-U (3GPP TS 29.281 section 5.1): flags, message type, length, TEID --------------
GTP_FLAGS = 0                 # version (top 3 bits), PT, spare, E, S, PN
GTP_MESSAGE_TYPE = 1
GTP_LENGTH = 2                # of everything after the TEID
GTP_VERSION_SHIFT = 5
GTP_HEADER = 8
GTP_OPTIONAL = 4              # sequence number, N-PDU number, next extension type
GTP_VERSION_1 = 1
GTP_PT = 0x10                 # protocol type: GTP (not GTP')
GTP_SPARE = 0x08              # spare bit, sent as 0
GTP_FLAGS_OPTIONAL = 0x07     # E, S, PN: any set means the 4 optional bytes are present
GTP_FLAG_EXTENSION = 0x04
GTP_G_PDU = 0xFF              # message type carrying a user packet
GTP_EXTENSION_LENGTH = 0      # section 5.2: an extension header's length in 4-byte units, its first byte;
GTP_EXTENSION_UNIT = 4        # its last byte is the next extension header's type
MAX_GTP_EXTENSIONS = 8
# ---- Teredo (RFC 4380 section 5.1.1) --------------------------------------------------
TEREDO_AUTH = 0x0001          # authentication indicator
TEREDO_ID_LEN = 2             # its client identifier length, then its authentication value length
TEREDO_AU_LEN = 3
TEREDO_AUTH_FIXED = 13        # indicator type, lengths, nonce and confirmation byte
TEREDO_ORIGIN = 0x0000        # origin indication
TEREDO_ORIGIN_LEN = 8
TEREDO_PREFIX = 0x20010000    # RFC 4380 section 2.6: 2001::/32, the Teredo service prefix
# ---- AYIYA (draft-massar-v6ops-ayiya-02, as Zeek's ayiya-protocol.pac reads it): nibble pairs --
AYIYA_ID_LENGTH = 0           # identity length as a power of two (high nibble), identity type
AYIYA_SIGNATURE_LENGTH = 1    # signature length in 4-byte words (high nibble), hash method
AYIYA_AUTH_OPCODE = 2         # authentication method, opcode (low nibble)
AYIYA_NEXT_HEADER = 3
AYIYA_HEADER = 8              # then the epoch time
AYIYA_SIGNATURE_UNIT = 4
AYIYA_OPCODE_MASK = 0x0F
AYIYA_OP_FORWARD = 1
# second and third bytes: 5 words of signature and hash method 2 (SHA-1); shared-secret
# authentication and the forward opcode
AYIYA_SHA1_FORWARD_AUTH = 0x5211
# ---- GRE (RFC 2784 section 2, RFC 2890): flags and version, protocol type, optional fields --
GRE_FLAGS_VERSION = 0
GRE_PROTOCOL_TYPE = 2
GRE_HEADER = 4
GRE_OPTION = 4                # checksum (and reserved), key, sequence number: 4 bytes each when present
GRE_RESERVED0 = 0x0FF8        # RFC 2890 section 2: reserved bits, zero in a GRE-in-UDP header
GRE_CHECKSUM = 0x8000         # RFC 2784 / RFC 2890 flag bits
GRE_ROUTING = 0x4000          # RFC 1701 source routing, deprecated: not decapsulated
GRE_KEY = 0x2000
GRE_SEQUENCE = 0x1000
GRE_ACK = 0x0080              # RFC 2637 enhanced GRE acknowledgement present
GRE_VERSION_MASK = 0x0007
# enhanced GRE (RFC 2637 section 4.1): flags, protocol, payload length, call id, then sequence and
# acknowledgement numbers when flagged
GRE_PPTP_PAYLOAD_LENGTH = 4
GRE_PPTP_HEADER = 8
# GRE protocol types of Aruba's access point tunnels, carrying 802.11 frames without FCS (Wireshark's
# packet-gre.h GRE_ARUBA_*, handed to its 802.11 dissector; Zeek's GRE analyzer takes a looser superset)
GRE_ARUBA_FIRST = 0x8200
GRE_ARUBA_LAST = 0x8370
GRE_ARUBA_STEP_MASK = 0x000F
GRE_ARUBA_9000 = 0x9000
# ERSPAN (draft-foschiano-erspan-03): a header whose first 4 bits are its version, 1 for type II (8 bytes),
# 2 for type III (12 bytes, an 8-byte platform-specific subheader after it when its O flag is set); type I
# has no header at all
ERSPAN_VERSION = 0            # the top 4 bits of this 16-bit word
ERSPAN_VERSION_SHIFT = 12
ERSPAN_TYPE_II = 1
ERSPAN_TYPE_III = 2
ERSPAN_2_HEADER = 8
ERSPAN_3_HEADER = 12
ERSPAN_3_FLAGS = 10           # type III: P, frame type (5 bits), hardware id, D, granularity, O
ERSPAN_3_FRAME_TYPE = 0x7C00
ERSPAN_3_O_FLAG = 0x0001
ERSPAN_3_SUBHEADER = 8


@njit(_nrt=False)
def _inner_ip_length_is(b, p, lim, length):
    """Whether an IP header at `p` declares exactly `length` bytes (the rest of its carrier)."""
    version = ip_by_version(b, p, lim)
    if version == ETHERTYPE_IP4:
        return p + IP4_TOTAL_LENGTH + 2 <= lim and u16(b, p + IP4_TOTAL_LENGTH) == length
    if version == ETHERTYPE_IP6:
        return p + IP6_PAYLOAD_LENGTH + 2 <= lim and IP6_HEADER + u16(b, p + IP6_PAYLOAD_LENGTH) == length
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
    flags = u8(b, q + VXLAN_FLAGS)
    if (flags & ~VXLAN_GBP_G) != VXLAN_I or u8(b, q + VXLAN_LAST_RESERVED) != 0:
        return -1
    if flags & VXLAN_GBP_G:
        if u8(b, q + VXLAN_GBP_FLAGS) & ~VXLAN_GBP_DA:
            return -1
    elif u8(b, q + VXLAN_GBP_FLAGS) or u16(b, q + VXLAN_GROUP_POLICY_ID):
        return -1
    return q + VXLAN_HEADER


@njit(_nrt=False)
def _vxlan_gpe(b, q, lim, own_port):
    """VXLAN-GPE (draft-ietf-nvo3-vxlan-gpe) at `q`, on its own port (4790) or not: (inner ethertype or 0,
    inner offset).

    Version 0, the I flag set, the reserved bits zero; the next protocol
    field says what follows, as Wireshark's vxlan-gpe dissector reads it,
    and what follows must be that (an IP header of its version, room for an
    Ethernet header or a label). Section 3.2 has the P flag always set, as
    the next protocol field is always there; on its own port a header
    without it is read all the same, as Wireshark reads it there (Linux's
    GPE receiver drops it), while on VXLAN's port only the flag tells a GPE
    header from a VXLAN one with a stray reserved byte. A Network Service
    Header must be one the decoder follows (detector.decode.link.nsh);
    unknown protocols stay undecoded.
    """
    if q + VXLAN_HEADER > lim:
        return 0, q
    flags = u8(b, q + VXLAN_FLAGS)
    if (flags & (VXLAN_GPE_VERSION | VXLAN_GPE_RESERVED) or not flags & VXLAN_I
            or not (own_port or (flags & VXLAN_GPE_P) != 0)
            or u16(b, q + VXLAN_GPE_RESERVED_BYTES) or u8(b, q + VXLAN_LAST_RESERVED)):
        return 0, q
    inner = q + VXLAN_HEADER
    proto = u8(b, q + VXLAN_GPE_NEXT_PROTOCOL)
    if proto == VXLAN_GPE_ETHERNET:
        return (ETHERTYPE_TEB, inner) if inner + ETH_HEADER <= lim else (0, q)
    if proto == VXLAN_GPE_MPLS:
        return (ETHERTYPE_MPLS, inner) if inner + MPLS_LABEL <= lim else (0, q)
    if proto == VXLAN_GPE_NSH:
        return (ETHERTYPE_NSH, inner) if nsh(b, inner, lim)[0] > 0 else (0, q)
    net = ETHERTYPE_IP4 if proto == VXLAN_GPE_IP4 else ETHERTYPE_IP6 if proto == VXLAN_GPE_IP6 else 0
    return (net, inner) if ip_matches(b, inner, lim, net) else (0, q)


@njit(_nrt=False)
def _geneve(b, q, lim):
    """Geneve (RFC 8926) at `q`: (inner ethertype or 0, inner offset).

    Version 0 (section 3.4: any other is not understood), options that tile
    the option length exactly (section 3.5; Zeek checks only that the option
    length fits, Wireshark flags a misfit), and a protocol type the decoder
    continues with: Ethernet, IPv4, IPv6 (of the matching version), ARP, MPLS,
    a Network Service Header it follows.
    """
    if q + GENEVE_HEADER > lim or u8(b, q + GENEVE_VERSION_OPTIONS) >> GENEVE_VERSION_SHIFT != 0:
        return 0, q
    inner = q + GENEVE_HEADER + (u8(b, q + GENEVE_VERSION_OPTIONS) & GENEVE_OPTIONS_MASK) * GENEVE_WORD
    o = q + GENEVE_HEADER
    while o < inner:
        if o + GENEVE_OPTION_HEADER > lim:
            return 0, q
        o += GENEVE_OPTION_HEADER + (u8(b, o + GENEVE_OPTION_LENGTH) & GENEVE_OPTION_WORDS) * GENEVE_WORD
    if o != inner:
        return 0, q
    proto = u16(b, q + GENEVE_PROTOCOL_TYPE)
    if proto == ETHERTYPE_TEB:
        return (ETHERTYPE_TEB, inner) if inner + ETH_HEADER <= lim else (0, q)
    if proto == ETHERTYPE_ARP or proto == ETHERTYPE_MPLS:
        return (proto, inner) if inner + 1 <= lim else (0, q)
    if proto == ETHERTYPE_NSH:
        return (proto, inner) if nsh(b, inner, lim)[0] > 0 else (0, q)
    return (proto, inner) if ip_matches(b, inner, lim, proto) else (0, q)


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
    flags = u8(b, q + GTP_FLAGS)
    if (flags >> GTP_VERSION_SHIFT != GTP_VERSION_1 or not (flags & GTP_PT) or flags & GTP_SPARE
            or u8(b, q + GTP_MESSAGE_TYPE) != GTP_G_PDU):
        return 0, q
    length = u16(b, q + GTP_LENGTH)
    if GTP_HEADER + length > datagram:
        return 0, q
    inner = q + GTP_HEADER
    if flags & GTP_FLAGS_OPTIONAL:
        inner += GTP_OPTIONAL
        if inner > lim:
            return 0, q
        next_ext = u8(b, inner - 1) if flags & GTP_FLAG_EXTENSION else 0
        for _ in range(MAX_GTP_EXTENSIONS):
            if next_ext == 0:
                break
            if inner + 1 > lim or u8(b, inner + GTP_EXTENSION_LENGTH) == 0:
                return 0, q
            ext_len = u8(b, inner + GTP_EXTENSION_LENGTH) * GTP_EXTENSION_UNIT
            if inner + ext_len > lim:
                return 0, q
            next_ext = u8(b, inner + ext_len - 1)
            inner += ext_len
        else:
            return 0, q
    if not _inner_ip_length_is(b, inner, lim, q + GTP_HEADER + length - inner):
        return 0, q
    return ip_by_version(b, inner, lim), inner


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
    if p + TEREDO_AU_LEN + 1 <= lim and u16(b, p) == TEREDO_AUTH:
        p += TEREDO_AUTH_FIXED + u8(b, p + TEREDO_ID_LEN) + u8(b, p + TEREDO_AU_LEN)
    if p + 2 <= lim and u16(b, p) == TEREDO_ORIGIN:
        p += TEREDO_ORIGIN_LEN
    if p + IP6_HEADER > lim or u8(b, p + IP_VERSION_BYTE) >> IP_VERSION_SHIFT != 6:
        return -1
    plen = u16(b, p + IP6_PAYLOAD_LENGTH)
    extra = lim - (p + IP6_HEADER + plen)
    if extra < 0 or (extra > 0 and (plen != 0 or u8(b, p + IP6_NEXT_HEADER) != PROTO_NONE)):
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
    if u8(b, q + IP_VERSION_BYTE) >> IP_VERSION_SHIFT == 6:
        return u32(b, q + IP6_SOURCE) == TEREDO_PREFIX or u32(b, q + IP6_DESTINATION) == TEREDO_PREFIX
    p = q
    if u16(b, p) == TEREDO_AUTH:
        p += TEREDO_AUTH_FIXED + u8(b, p + TEREDO_ID_LEN) + u8(b, p + TEREDO_AU_LEN)
        if p + IP6_HEADER > lim:
            return False
    if u16(b, p) != TEREDO_ORIGIN:
        return False
    p += TEREDO_ORIGIN_LEN
    return p + IP6_HEADER <= lim and u8(b, p + IP_VERSION_BYTE) >> IP_VERSION_SHIFT == 6


@njit(_nrt=False)
def _ayiya(b, q, lim):
    """AYIYA (draft-massar-v6ops-ayiya) at `q`: (inner ethertype or 0, inner offset).

    As Zeek's AYIYA analyzer: the header with its identity and signature
    fits, the opcode is "forward", and the next header (IPv4 or IPv6) matches
    the version of the packet that follows.
    """
    if q + AYIYA_HEADER > lim or (u8(b, q + AYIYA_AUTH_OPCODE) & AYIYA_OPCODE_MASK) != AYIYA_OP_FORWARD:
        return 0, q
    inner = (q + AYIYA_HEADER + (1 << (u8(b, q + AYIYA_ID_LENGTH) >> 4))
             + (u8(b, q + AYIYA_SIGNATURE_LENGTH) >> 4) * AYIYA_SIGNATURE_UNIT)
    nh = u8(b, q + AYIYA_NEXT_HEADER)
    net = ETHERTYPE_IP4 if nh == PROTO_IPIP else ETHERTYPE_IP6 if nh == PROTO_IPV6 else 0
    return (net, inner) if ip_matches(b, inner, lim, net) else (0, q)


@njit(_nrt=False)
def udp_tunnel(b, q, lim, datagram, sport, dport):
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
        net, inner = _vxlan_gpe(b, q, lim, VXLAN_PORT)
        return net, inner, TUNNEL_VXLAN if net else 0
    if dport == PORT_GENEVE or sport == PORT_GENEVE:
        net, inner = _geneve(b, q, lim)
        return net, inner, TUNNEL_GENEVE if net else 0
    if dport == PORT_GTP_U or sport == PORT_GTP_U:
        net, inner = _gtp_u(b, q, lim, datagram)
        return net, inner, TUNNEL_GTP if net else 0
    if dport == PORT_VXLAN_GPE or sport == PORT_VXLAN_GPE:
        net, inner = _vxlan_gpe(b, q, lim, GPE_PORT)
        return net, inner, TUNNEL_VXLAN if net else 0
    if dport == PORT_GRE_UDP or sport == PORT_GRE_UDP:
        # RFC 8086 section 3: a GRE header (RFC 2784, RFC 2890) of version 0, its reserved bits zero
        if (q + GRE_HEADER > lim
                or u16(b, q + GRE_FLAGS_VERSION) & (GRE_ROUTING | GRE_RESERVED0 | GRE_VERSION_MASK)):
            return 0, q, 0
        return gre(b, q, lim)
    teredo_port = dport == PORT_TEREDO or sport == PORT_TEREDO
    ayiya_port = dport == PORT_AYIYA or sport == PORT_AYIYA
    if not (teredo_port or ayiya_port):
        # any other port: the payload's first word says whether it can be Teredo (an IPv6 header, an
        # origin indication or an authentication header) or AYIYA, so most datagrams stop at one read
        if q + 4 > lim:
            return 0, q, 0
        first = u32(b, q)
        if not (first >> 28 == 6 or first >> 17 == 0 or (first >> 8) & 0xFFFF == AYIYA_SHA1_FORWARD_AUTH):
            return 0, q, 0
    if teredo_port or _looks_like_teredo(b, q, lim):
        inner = _teredo(b, q, lim)
        return (ETHERTYPE_IP6, inner, TUNNEL_TEREDO) if inner >= 0 else (0, q, 0)
    if ayiya_port or (u32(b, q) >> 8) & 0xFFFF == AYIYA_SHA1_FORWARD_AUTH:
        net, inner = _ayiya(b, q, lim)
        return net, inner, TUNNEL_AYIYA if net else 0
    return 0, q, 0


@njit(_nrt=False)
def gre(b, p, lim):
    """The payload of a GRE header at `p`: (inner ethertype, inner offset, tunnel kind), kind 0 if none."""
    if p + GRE_HEADER > lim:
        return 0, p, 0
    flags = u16(b, p + GRE_FLAGS_VERSION)
    ptype = u16(b, p + GRE_PROTOCOL_TYPE)
    version = flags & GRE_VERSION_MASK
    if version == 1:
        if ptype != ETHERTYPE_PPP or not (flags & GRE_KEY) or p + GRE_PPTP_HEADER > lim:
            return 0, p, 0
        if u16(b, p + GRE_PPTP_PAYLOAD_LENGTH) == 0:      # acknowledgement only, no payload
            return 0, p, 0
        q = (p + GRE_PPTP_HEADER + (GRE_OPTION if flags & GRE_SEQUENCE else 0)
             + (GRE_OPTION if flags & GRE_ACK else 0))
        net, q = ppp_protocol(b, q, lim)
        if ip_matches(b, q, lim, net):
            return net, q, TUNNEL_GRE
        return 0, p, 0
    if version != 0 or flags & GRE_ROUTING:
        return 0, p, 0
    q = p + GRE_HEADER
    if flags & GRE_CHECKSUM:
        q += GRE_OPTION
    if flags & GRE_KEY:
        q += GRE_OPTION
    if flags & GRE_SEQUENCE:
        q += GRE_OPTION
    if ip_matches(b, q, lim, ptype) or ((ptype == ETHERTYPE_MPLS or ptype == ETHERTYPE_ARP) and q + 1 <= lim):
        return ptype, q, TUNNEL_GRE
    if ptype == ETHERTYPE_IP4 or ptype == ETHERTYPE_IP6 or ptype == ETHERTYPE_MPLS or ptype == ETHERTYPE_ARP:
        return 0, p, 0
    if ptype == ETHERTYPE_TEB:
        if q + ETH_HEADER <= lim:
            return ETHERTYPE_TEB, q, TUNNEL_GRE
        return 0, p, 0
    if ptype == ETHERTYPE_NSH:
        if nsh(b, q, lim)[0] > 0:
            return ETHERTYPE_NSH, q, TUNNEL_GRE
        return 0, p, 0
    if ((GRE_ARUBA_FIRST <= ptype <= GRE_ARUBA_LAST and not ptype & GRE_ARUBA_STEP_MASK)
            or ptype == GRE_ARUBA_9000):
        if q + WLAN_HEADER <= lim:
            return INNER_IEEE80211, q, TUNNEL_GRE
        return 0, p, 0
    if ptype != ETHERTYPE_ERSPAN_2 and ptype != ETHERTYPE_ERSPAN_3:
        return 0, p, 0
    q = _erspan(b, q, lim, ptype == ETHERTYPE_ERSPAN_3 or (flags & GRE_SEQUENCE) != 0)
    if q >= 0 and q + ETH_HEADER <= lim:
        return ETHERTYPE_TEB, q, TUNNEL_ERSPAN
    return 0, p, 0


@njit(_nrt=False)
def _erspan(b, q, lim, has_header):
    """Where the mirrored Ethernet frame starts after the ERSPAN header at `q` (-1: none follows).

    As Wireshark's packet-erspan.c: protocol type 0x88BE without a GRE
    sequence number is type I, no header; otherwise (and always under
    0x22EB) the header's version field says its type, whatever the protocol
    type announced, and a version it does not know, or a type III header
    whose frame type is not Ethernet, leaves no frame to decode. Zeek takes
    the type from the protocol type alone.
    """
    if not has_header:
        return q
    if q + ERSPAN_VERSION + 2 > lim:
        return -1
    version = u16(b, q + ERSPAN_VERSION) >> ERSPAN_VERSION_SHIFT
    if version == ERSPAN_TYPE_II:
        return q + ERSPAN_2_HEADER
    if version != ERSPAN_TYPE_III or q + ERSPAN_3_HEADER > lim:
        return -1
    flags = u16(b, q + ERSPAN_3_FLAGS)
    if flags & ERSPAN_3_FRAME_TYPE:
        return -1
    return q + ERSPAN_3_HEADER + (ERSPAN_3_SUBHEADER if flags & ERSPAN_3_O_FLAG else 0)


@njit(_nrt=False)
def begin_tunnel(kind, layers, i, c8, c16, c32, c64):
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

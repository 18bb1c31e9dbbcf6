"""The network layer of the compiled decoder: IPv4, IPv6 with its extension-header chain, IPsec AH, and ARP.

`ip4` and `ip6` fill the network columns and say where the transport header
starts and where the packet ends; the decoder's frame loop hands that to
the transport layer (detector.decode.transport). Every read is bounded by the
captured bytes, and past the IP header also by the IP length, so Ethernet
padding never parses as a header. Header fields are named by their offset
from the header's start, as the RFC that defines the header draws it.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..schema import IP_DF, IP_MF, L_ARP, L_BAD_CHECKSUM, L_FRAG, L_IP4, L_IP6, L_TRUNCATED
from .columns import (
    ARP_OP,
    ARP_SHA,
    ARP_SPA,
    ARP_THA,
    ARP_TPA,
    DST_IP_HI,
    DST_IP_LO,
    FLOW_LABEL,
    FRAG_OFFSET,
    IP_FLAGS,
    IP_ID,
    IP_LEN,
    IP_VERSION,
    L3_OFF,
    L4_OFF,
    PROTO,
    SRC_IP_HI,
    SRC_IP_LO,
    TTL,
)
from .link import ETHERTYPE_IP4, ETHERTYPE_IP6, IP_VERSION_BYTE, IP_VERSION_SHIFT
from .read import MAC_BYTES, be64, mac, u8, u16, u32

# ---- IP protocol numbers (IANA) beyond schema.py's ----------------------------------
PROTO_HOPOPTS = 0             # RFC 8200 extension headers
PROTO_IPIP = 4                # RFC 2003
PROTO_DCCP = 33               # RFC 4340
PROTO_IPV6 = 41               # RFC 2473 / RFC 4213
PROTO_ROUTING = 43
PROTO_FRAGMENT = 44
PROTO_GRE = 47                # RFC 2784, RFC 2890, RFC 2637
PROTO_AH = 51                 # RFC 4302: length in 4-octet units minus 2
PROTO_NONE = 59               # RFC 8200 section 4.7: no next header (a Teredo bubble)
PROTO_DSTOPTS = 60
PROTO_MOBILITY = 135          # RFC 6275
PROTO_UDPLITE = 136           # RFC 3828
PROTO_HIP = 139               # RFC 7401
PROTO_SHIM6 = 140             # RFC 5533

# ---- IPv4 header (RFC 791 section 3.1) -------------------------------------------------
IP4_VERSION_IHL = 0           # version (high nibble), header length in 32-bit words (low nibble)
IP4_TOTAL_LENGTH = 2
IP4_IDENTIFICATION = 4
IP4_FLAGS_FRAGMENT = 6        # flags (top 3 bits), fragment offset in 8-byte units
IP4_TTL = 8
IP4_PROTOCOL = 9
IP4_HEADER_CHECKSUM = 10      # one's complement of the one's complement sum of the header's 16-bit words
IP4_SOURCE = 12
IP4_DESTINATION = 16
IP4_HEADER = 20
IP4_IHL_MASK = 0x0F
IP4_IHL_UNIT = 4
IP4_MORE_FRAGMENTS = 0x2000
IP4_DONT_FRAGMENT = 0x4000
IP4_OFFSET_MASK = 0x1FFF
IP4_OFFSET_UNIT = 8
IP4_ADDRESS_BYTES = 4
IP4_MAPPED = np.uint64(0x0000FFFF00000000)  # ::ffff:0:0/96, high bits of the low half
# ---- IPv6 header (RFC 8200 section 3) ---------------------------------------------------
IP6_FLOW_LABEL_MASK = 0x000FFFFF   # the low 20 bits of the first word, after version and traffic class (RFC 6437)
IP6_PAYLOAD_LENGTH = 4        # after version, traffic class and flow label
IP6_NEXT_HEADER = 6
IP6_HOP_LIMIT = 7
IP6_SOURCE = 8
IP6_DESTINATION = 24
IP6_HEADER = 40
IP6_LOW_HALF = 8              # an address is read as two big-endian 64-bit halves
# extension headers (section 4): next header, then length in 8-octet units past the first 8
EXT_NEXT_HEADER = 0
EXT_LENGTH = 1
EXT_OPTIONS = 2               # the options of a hop-by-hop or destination options header (section 4.2)
EXT_UNIT = 8
# IPsec Authentication Header (RFC 4302 section 2): next header, payload length, reserved, SPI, sequence
# number, ICV; the same header after an IPv4 header (section 3.1) as in the IPv6 chain
AH_NEXT_HEADER = 0
AH_PAYLOAD_LENGTH = 1
AH_UNIT = 4                   # section 2.2: AH's length is in 4-octet units minus 2
AH_LENGTH_BIAS = 2
# fragment header (section 4.5)
IP6_FRAGMENT_OFFSET = 2       # offset in 8-octet units (high 13 bits), more-fragments (low bit)
IP6_FRAGMENT_IDENTIFICATION = 4
IP6_FRAGMENT_HEADER = 8
IP6_OFFSET_MASK = 0xFFF8      # the offset in 8-octet units, already shifted by 3
IP6_MORE_FRAGMENTS = 0x0001
# options (section 4.2): type, data length, data
IP6OPT_TYPE = 0
IP6OPT_LENGTH = 1
IP6OPT_DATA = 2
IP6OPT_PAD1 = 0               # a single byte of padding, no length
IP6OPT_JUMBO = 0xC2           # RFC 2675 Jumbo Payload option: 4-byte length of everything after the IPv6 header
IP6OPT_JUMBO_LEN = 4
JUMBO_MIN = 65536             # RFC 2675 section 2: a jumbo length below this is an error
# The network header must start within this many bytes of the frame, so every
# offset column (uint16) holds even after the longest IPv6 extension chain
# (MAX_IPV6_EXT_HEADERS * 2048 bytes) and a 60-byte TCP header.
MAX_IP_OFFSET = 16384
MAX_IPV6_EXT_HEADERS = 16
# what ip4 and ip6 return as the protocol when there is no transport header to decode
NO_TRANSPORT = -1

# ---- ARP (RFC 826, field names as there), for IPv4 over 6-byte hardware addresses --------
AR_PRO = 2                    # protocol type, after the hardware type
AR_HLN = 4
AR_PLN = 5
AR_OP = 6
AR_SHA = 8
AR_SPA = 14
AR_THA = 18
AR_TPA = 24
ARP_IP4_LENGTH = 28


@njit(_nrt=False)
def ip4_lo(b, p):
    """The IPv4 address at `p` as the low half of its IPv4-mapped IPv6 address."""
    return IP4_MAPPED | np.uint64(u32(b, p))


@njit(_nrt=False)
def ip_matches(b, q, lim, etype):
    """Whether the bytes at `q` begin an IP header of the version `etype` announces."""
    if q + 1 > lim:
        return False
    version = u8(b, q + IP_VERSION_BYTE) >> IP_VERSION_SHIFT
    return (etype == ETHERTYPE_IP4 and version == 4) or (etype == ETHERTYPE_IP6 and version == 6)


@njit(_nrt=False)
def ext_chain(b, q, lim, nh):
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
            length = (u8(b, q + EXT_LENGTH) + 1) * EXT_UNIT
        elif nh == PROTO_AH:
            if q + 2 > lim:
                return nh, q, frag_off, more, frag_id, False
            length = (u8(b, q + AH_PAYLOAD_LENGTH) + AH_LENGTH_BIAS) * AH_UNIT
        elif nh == PROTO_FRAGMENT:
            if q + IP6_FRAGMENT_HEADER > lim:
                return nh, q, frag_off, more, frag_id, False
            word = u16(b, q + IP6_FRAGMENT_OFFSET)
            frag_off = word & IP6_OFFSET_MASK
            more = word & IP6_MORE_FRAGMENTS
            frag_id = u32(b, q + IP6_FRAGMENT_IDENTIFICATION)
            length = IP6_FRAGMENT_HEADER
        else:
            return nh, q, frag_off, more, frag_id, True
        nh = u8(b, q + EXT_NEXT_HEADER)
        q += length
    return nh, q, frag_off, more, frag_id, False


@njit(_nrt=False)
def header_checksum_fails(b, p, ihl):
    """Whether the IPv4 header of `ihl` bytes at `p` (all captured) fails its checksum (RFC 791 section 3.1,
    RFC 1071): its 16-bit words, the checksum field included, must sum to 0xFFFF in one's complement. A field
    of 0 is not judged: a NIC that offloads the checksum leaves it so in the sender's own capture."""
    if u16(b, p + IP4_HEADER_CHECKSUM) == 0:
        return False
    total = 0
    for k in range(0, ihl, 2):
        total += u16(b, p + k)
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return total != 0xFFFF


@njit(_nrt=False)
def ip4(b, s, p, end, wire, layers, i, c8, c16, c32, c64):
    """An IPv4 header at `p` and an Authentication Header after it (captured bytes to `end`, the frame to
    `wire` on the wire): (layers, protocol or NO_TRANSPORT, transport offset, end of its captured bytes,
    end of the packet on the wire, whether the packet is whole: no fragment but the first and last)."""
    if (p + IP4_HEADER > end or p - s > MAX_IP_OFFSET
            or u8(b, p + IP4_VERSION_IHL) >> IP_VERSION_SHIFT != 4):
        return layers | L_TRUNCATED, NO_TRANSPORT, 0, 0, 0, False
    ihl = (u8(b, p + IP4_VERSION_IHL) & IP4_IHL_MASK) * IP4_IHL_UNIT
    total = u16(b, p + IP4_TOTAL_LENGTH)
    if total == 0:
        # segmentation offload and Linux BIG TCP (over 64 KiB): the stack leaves the length to
        # the NIC, the frame holds the packet; its wire length, as Wireshark takes it
        total = wire - p
    if ihl < IP4_HEADER or total < ihl:
        return layers | L_TRUNCATED, NO_TRANSPORT, 0, 0, 0, False
    frag = u16(b, p + IP4_FLAGS_FRAGMENT)
    frag_off = (frag & IP4_OFFSET_MASK) * IP4_OFFSET_UNIT
    proto = u8(b, p + IP4_PROTOCOL)
    c8[IP_VERSION, i] = 4
    c8[PROTO, i] = proto
    c8[TTL, i] = u8(b, p + IP4_TTL)
    c32[IP_ID, i] = u16(b, p + IP4_IDENTIFICATION)
    c32[IP_LEN, i] = total
    c8[IP_FLAGS, i] = (IP_MF if frag & IP4_MORE_FRAGMENTS else 0) | (IP_DF if frag & IP4_DONT_FRAGMENT else 0)
    c32[FRAG_OFFSET, i] = frag_off
    c64[SRC_IP_LO, i] = ip4_lo(b, p + IP4_SOURCE)
    c64[DST_IP_LO, i] = ip4_lo(b, p + IP4_DESTINATION)
    c16[L3_OFF, i] = p - s
    c16[L4_OFF, i] = p + ihl - s
    layers |= L_IP4
    if frag & IP4_MORE_FRAGMENTS or frag_off:
        layers |= L_FRAG
    if p + ihl > end:
        return layers | L_TRUNCATED, NO_TRANSPORT, 0, 0, 0, False
    if header_checksum_fails(b, p, ihl):
        layers |= L_BAD_CHECKSUM
    if frag_off:
        return layers, NO_TRANSPORT, 0, 0, 0, False
    q = p + ihl
    if proto == PROTO_AH:
        # what the Authentication Header protects follows it (RFC 4302 section 3.1: a transport header, or in
        # tunnel mode an IP packet), as the IPv6 chain steps over it; the protocol column names what follows
        if q + AH_PAYLOAD_LENGTH + 1 > min(end, p + total):
            return layers | L_TRUNCATED, NO_TRANSPORT, 0, 0, 0, False
        proto = u8(b, q + AH_NEXT_HEADER)
        q += (u8(b, q + AH_PAYLOAD_LENGTH) + AH_LENGTH_BIAS) * AH_UNIT
        if q > p + total:
            return layers | L_TRUNCATED, NO_TRANSPORT, 0, 0, 0, False
        c8[PROTO, i] = proto
        c16[L4_OFF, i] = q - s
    return layers, proto, q, min(end, p + total), p + total, not (frag & IP4_MORE_FRAGMENTS)


@njit(_nrt=False)
def _jumbo_length(b, q, end):
    """The RFC 2675 Jumbo Payload length in the hop-by-hop options header at `q`, or -1."""
    if q + 2 > end:
        return -1
    stop = min(q + (u8(b, q + EXT_LENGTH) + 1) * EXT_UNIT, end)
    o = q + EXT_OPTIONS
    while o < stop:
        kind = u8(b, o + IP6OPT_TYPE)
        if kind == IP6OPT_PAD1:
            o += 1
            continue
        if o + IP6OPT_DATA > stop:
            return -1
        if (kind == IP6OPT_JUMBO and u8(b, o + IP6OPT_LENGTH) == IP6OPT_JUMBO_LEN
                and o + IP6OPT_DATA + IP6OPT_JUMBO_LEN <= stop):
            length = u32(b, o + IP6OPT_DATA)
            return length if length >= JUMBO_MIN else -1
        o += IP6OPT_DATA + u8(b, o + IP6OPT_LENGTH)
    return -1


@njit(_nrt=False)
def ip6(b, s, p, end, wire, layers, i, c8, c16, c32, c64):
    """An IPv6 header at `p` and its extension headers (captured bytes to `end`, the frame to `wire` on
    the wire): (layers, protocol or NO_TRANSPORT, transport offset, end of its captured bytes, end of
    the packet on the wire, whether the packet is whole: no fragment but the first and last)."""
    if (p + IP6_HEADER > end or p - s > MAX_IP_OFFSET
            or u8(b, p + IP_VERSION_BYTE) >> IP_VERSION_SHIFT != 6):
        return layers | L_TRUNCATED, NO_TRANSPORT, 0, 0, 0, False
    plen = u16(b, p + IP6_PAYLOAD_LENGTH)
    if plen == 0 and u8(b, p + IP6_NEXT_HEADER) != PROTO_NONE:
        # a jumbogram: its length is in the hop-by-hop Jumbo Payload option (RFC 2675), as Linux
        # BIG TCP wrote it before 6.3; without one (BIG TCP since, segmentation offload) the frame
        # holds the packet, as Wireshark takes it. A Teredo bubble (no next header) is a header alone.
        jumbo = _jumbo_length(b, p + IP6_HEADER, end) if u8(b, p + IP6_NEXT_HEADER) == PROTO_HOPOPTS else -1
        plen = jumbo if jumbo > 0 else max(wire - p - IP6_HEADER, 0)
    c8[IP_VERSION, i] = 6
    c8[TTL, i] = u8(b, p + IP6_HOP_LIMIT)
    c32[FLOW_LABEL, i] = u32(b, p) & IP6_FLOW_LABEL_MASK
    c32[IP_LEN, i] = IP6_HEADER + plen
    c64[SRC_IP_HI, i] = be64(b, p + IP6_SOURCE)
    c64[SRC_IP_LO, i] = be64(b, p + IP6_SOURCE + IP6_LOW_HALF)
    c64[DST_IP_HI, i] = be64(b, p + IP6_DESTINATION)
    c64[DST_IP_LO, i] = be64(b, p + IP6_DESTINATION + IP6_LOW_HALF)
    c16[L3_OFF, i] = p - s
    layers |= L_IP6
    ip_end = p + IP6_HEADER + plen
    lim = min(end, ip_end)
    proto, q, frag_off, more, frag_id, complete = ext_chain(b, p + IP6_HEADER, lim, u8(b, p + IP6_NEXT_HEADER))
    c8[PROTO, i] = proto
    c16[L4_OFF, i] = q - s
    c32[IP_ID, i] = frag_id
    c8[IP_FLAGS, i] = IP_MF if more else 0
    c32[FRAG_OFFSET, i] = frag_off
    if frag_off or more:
        layers |= L_FRAG
    if not complete or q > ip_end:
        return layers | L_TRUNCATED, NO_TRANSPORT, 0, 0, 0, False
    if frag_off:
        return layers, NO_TRANSPORT, 0, 0, 0, False
    return layers, proto, q, lim, ip_end, not more


@njit(_nrt=False)
def arp(b, p, end, layers, i, c16, c32, c64):
    """An ARP (or RARP) packet for IPv4 over 6-byte hardware addresses, RFC 826."""
    if p + AR_SHA > end:
        return layers | L_TRUNCATED
    if (u8(b, p + AR_HLN) != MAC_BYTES or u8(b, p + AR_PLN) != IP4_ADDRESS_BYTES
            or u16(b, p + AR_PRO) != ETHERTYPE_IP4):
        return layers
    if p + ARP_IP4_LENGTH > end:
        return layers | L_TRUNCATED
    c16[ARP_OP, i] = u16(b, p + AR_OP)
    c64[ARP_SHA, i] = mac(b, p + AR_SHA)
    c32[ARP_SPA, i] = u32(b, p + AR_SPA)
    c64[ARP_THA, i] = mac(b, p + AR_THA)
    c32[ARP_TPA, i] = u32(b, p + AR_TPA)
    return layers | L_ARP

"""The transport layer of the compiled decoder: TCP with its options, UDP, ICMP errors and their quote,
SCTP, DCCP, and the tunnels an IP or UDP payload can be.

`transport` fills the transport columns of the header at `p`, bounded by the
IP-declared transport length, and returns where a tunnel's inner packet
starts when the payload is one (detector.decode.tunnels decides). Header
fields are named by their offset from the header's start, as the RFC that
defines the header draws it.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..schema import (
    L_ICMP,
    L_ICMP6,
    L_MSS,
    L_MTU,
    L_PAYLOAD,
    L_PORTS,
    L_QUOTE,
    L_QUOTE_PORTS,
    L_SACK_PERM,
    L_SCTP,
    L_TCP,
    L_TCP_TS,
    L_TRUNCATED,
    L_UDP,
    L_WSCALE,
    PROTO_ICMP,
    PROTO_ICMP6,
    PROTO_SCTP,
    PROTO_TCP,
    PROTO_UDP,
    TUNNEL_IPIP,
)
from .columns import (
    DST_PORT,
    ICMP_CODE,
    ICMP_MTU,
    ICMP_TYPE,
    PAYLOAD_LEN,
    PAYLOAD_OFF,
    QUOTE_DST_HI,
    QUOTE_DST_LO,
    QUOTE_DST_PORT,
    QUOTE_PROTO,
    QUOTE_SRC_HI,
    QUOTE_SRC_LO,
    QUOTE_SRC_PORT,
    SRC_PORT,
    TCP_ACK,
    TCP_FLAGS,
    TCP_MSS,
    TCP_SEQ,
    TCP_TSECR,
    TCP_TSVAL,
    TCP_WINDOW,
    TCP_WSCALE,
)
from .ip import (
    IP4_DESTINATION,
    IP4_FLAGS_FRAGMENT,
    IP4_HEADER,
    IP4_IHL_MASK,
    IP4_IHL_UNIT,
    IP4_OFFSET_MASK,
    IP4_PROTOCOL,
    IP4_SOURCE,
    IP4_VERSION_IHL,
    IP6_DESTINATION,
    IP6_HEADER,
    IP6_LOW_HALF,
    IP6_NEXT_HEADER,
    IP6_SOURCE,
    PROTO_DCCP,
    PROTO_GRE,
    PROTO_IPIP,
    PROTO_IPV6,
    PROTO_UDPLITE,
    ext_chain,
    ip4_lo,
    ip_matches,
)
from .link import ETHERTYPE_IP4, ETHERTYPE_IP6, IP_VERSION_BYTE, IP_VERSION_SHIFT
from .read import be64, u8, u16, u32
from .tunnels import gre, udp_tunnel

# ---- ports: TCP (RFC 9293), UDP (RFC 768), SCTP (RFC 9260), DCCP (RFC 4340) and UDP-Lite
# (RFC 3828) all begin with the source and the destination port ----------------------------
L4_SOURCE_PORT = 0
L4_DESTINATION_PORT = 2
L4_PORTS = 4
# ---- TCP header (RFC 9293 section 3.1) ---------------------------------------------------
TCP_SEQUENCE_NUMBER = 4
TCP_ACKNOWLEDGMENT_NUMBER = 8
TCP_DATA_OFFSET = 12          # header length in 32-bit words (high nibble); its low bit is NS (RFC 3540)
TCP_CONTROL_BITS = 13
TCP_WINDOW_SIZE = 14
TCP_HEADER = 20
TCP_OFFSET_UNIT = 4
TCP_NS = 0x01
# options: kind, length (of the whole option), data
TCPOPT_LENGTH = 1
TCPOPT_DATA = 2
TCPOPT_TSECR = 6              # RFC 7323 section 3: TSval in the first 4 data bytes, TSecr in the next 4
TCPOPT_EOL = 0
TCPOPT_NOP = 1
TCPOPT_MSS = 2                # RFC 9293
TCPOPT_WSCALE = 3             # RFC 7323
TCPOPT_SACK_PERM = 4          # RFC 2018
TCPOPT_TIMESTAMP = 8          # RFC 7323
TCPOLEN_MSS = 4
TCPOLEN_WSCALE = 3
TCPOLEN_SACK_PERM = 2
TCPOLEN_TIMESTAMP = 10
# ---- UDP (RFC 768), SCTP common header (RFC 9260 section 3.1) -------------------------
UDP_HEADER = 8
SCTP_HEADER = 12
# ---- ICMP (RFC 792) and ICMPv6 (RFC 4443 section 2.1): type, code, checksum, 4 bytes more ---
ICMP_TYPE_FIELD = 0
ICMP_CODE_FIELD = 1
ICMP_NEXT_HOP_MTU = 6         # RFC 1191 section 4: in a "fragmentation needed" message
ICMP6_MTU_FIELD = 4           # RFC 4443 section 3.2: in a Packet Too Big message
ICMP_HEADER = 8
ICMP_UNREACH = 3              # RFC 792 error types, which quote the offending datagram
ICMP_SOURCE_QUENCH = 4
ICMP_REDIRECT = 5
ICMP_TIME_EXCEEDED = 11
ICMP_PARAM_PROBLEM = 12
ICMP_FRAG_NEEDED = 4          # code of type 3
ICMP6_ERROR_MAX = 4           # RFC 4443: types 1-4 are errors quoting the offending packet
ICMP6_PACKET_TOO_BIG = 2

# the IP version of a quoted header, as numpy scalars (see detector.decode.link: one compile, not two)
IPV4, IPV6 = np.int64(4), np.int64(6)


@njit(_nrt=False)
def _has_ports(proto):
    return (proto == PROTO_TCP or proto == PROTO_UDP or proto == PROTO_SCTP or proto == PROTO_DCCP
            or proto == PROTO_UDPLITE)


@njit(_nrt=False)
def _quote(b, q, lim, version, layers, i, c8, c16, c64):
    """The IP header (and first 4 transport bytes) an ICMP error quotes, at `q`."""
    if version == 4:
        if q + IP4_HEADER > lim or u8(b, q + IP4_VERSION_IHL) >> IP_VERSION_SHIFT != 4:
            return layers
        ihl = (u8(b, q + IP4_VERSION_IHL) & IP4_IHL_MASK) * IP4_IHL_UNIT
        if ihl < IP4_HEADER:
            return layers
        c64[QUOTE_SRC_HI, i] = 0
        c64[QUOTE_SRC_LO, i] = ip4_lo(b, q + IP4_SOURCE)
        c64[QUOTE_DST_HI, i] = 0
        c64[QUOTE_DST_LO, i] = ip4_lo(b, q + IP4_DESTINATION)
        proto = u8(b, q + IP4_PROTOCOL)
        first = (u16(b, q + IP4_FLAGS_FRAGMENT) & IP4_OFFSET_MASK) == 0
        l4 = q + ihl
    else:
        if q + IP6_HEADER > lim or u8(b, q + IP_VERSION_BYTE) >> IP_VERSION_SHIFT != 6:
            return layers
        c64[QUOTE_SRC_HI, i] = be64(b, q + IP6_SOURCE)
        c64[QUOTE_SRC_LO, i] = be64(b, q + IP6_SOURCE + IP6_LOW_HALF)
        c64[QUOTE_DST_HI, i] = be64(b, q + IP6_DESTINATION)
        c64[QUOTE_DST_LO, i] = be64(b, q + IP6_DESTINATION + IP6_LOW_HALF)
        proto, l4, frag_off, _more, _fid, complete = ext_chain(b, q + IP6_HEADER, lim, u8(b, q + IP6_NEXT_HEADER))
        first = complete and frag_off == 0
    c8[QUOTE_PROTO, i] = proto
    layers |= L_QUOTE
    if first and _has_ports(proto) and l4 + L4_PORTS <= lim:
        c16[QUOTE_SRC_PORT, i] = u16(b, l4 + L4_SOURCE_PORT)
        c16[QUOTE_DST_PORT, i] = u16(b, l4 + L4_DESTINATION_PORT)
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
def transport(b, s, p, lim, proto, l4len, can_decap, layers, i, c8, c16, c32, c64):
    """The transport header at `p` (bytes to `lim`): (layers, inner ethertype, inner offset, tunnel)."""
    if proto == PROTO_TCP:
        if p + L4_PORTS > lim:
            return layers | L_TRUNCATED, 0, 0, 0
        c16[SRC_PORT, i] = u16(b, p + L4_SOURCE_PORT)
        c16[DST_PORT, i] = u16(b, p + L4_DESTINATION_PORT)
        layers |= L_PORTS
        if p + TCP_HEADER > lim:
            return layers | L_TRUNCATED, 0, 0, 0
        doff = (u8(b, p + TCP_DATA_OFFSET) >> 4) * TCP_OFFSET_UNIT
        if doff < TCP_HEADER:
            return layers | L_TRUNCATED, 0, 0, 0
        c16[TCP_FLAGS, i] = ((u8(b, p + TCP_DATA_OFFSET) & TCP_NS) << 8) | u8(b, p + TCP_CONTROL_BITS)
        c32[TCP_SEQ, i] = u32(b, p + TCP_SEQUENCE_NUMBER)
        c32[TCP_ACK, i] = u32(b, p + TCP_ACKNOWLEDGMENT_NUMBER)
        c16[TCP_WINDOW, i] = u16(b, p + TCP_WINDOW_SIZE)
        layers |= L_TCP
        q = p + TCP_HEADER
        opt_end = min(p + doff, lim)
        while q < opt_end:
            kind = u8(b, q)
            if kind == TCPOPT_EOL:
                break
            if kind == TCPOPT_NOP:
                q += 1
                continue
            if q + TCPOPT_DATA > opt_end:
                break
            olen = u8(b, q + TCPOPT_LENGTH)
            if olen < TCPOPT_DATA or q + olen > opt_end:
                break
            if kind == TCPOPT_MSS and olen == TCPOLEN_MSS:
                c16[TCP_MSS, i] = u16(b, q + TCPOPT_DATA)
                layers |= L_MSS
            elif kind == TCPOPT_WSCALE and olen == TCPOLEN_WSCALE:
                c8[TCP_WSCALE, i] = u8(b, q + TCPOPT_DATA)
                layers |= L_WSCALE
            elif kind == TCPOPT_SACK_PERM and olen == TCPOLEN_SACK_PERM:
                layers |= L_SACK_PERM
            elif kind == TCPOPT_TIMESTAMP and olen == TCPOLEN_TIMESTAMP:
                c32[TCP_TSVAL, i] = u32(b, q + TCPOPT_DATA)
                c32[TCP_TSECR, i] = u32(b, q + TCPOPT_TSECR)
                layers |= L_TCP_TS
            q += olen
        if p + doff > lim:
            layers |= L_TRUNCATED
        return _payload(s, p, doff, l4len, layers, i, c16, c32), 0, 0, 0
    if proto == PROTO_UDP or proto == PROTO_UDPLITE:
        if p + L4_PORTS > lim:
            return layers | L_TRUNCATED, 0, 0, 0
        sport = u16(b, p + L4_SOURCE_PORT)
        dport = u16(b, p + L4_DESTINATION_PORT)
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
            inner, q, kind = udp_tunnel(b, p + UDP_HEADER, lim, l4len - UDP_HEADER, sport, dport)
            return layers, inner, q, kind
        return layers, 0, 0, 0
    if proto == PROTO_ICMP or proto == PROTO_ICMP6:
        if p + ICMP_CODE_FIELD + 1 > lim:
            return layers | L_TRUNCATED, 0, 0, 0
        icmp_type = u8(b, p + ICMP_TYPE_FIELD)
        code = u8(b, p + ICMP_CODE_FIELD)
        c8[ICMP_TYPE, i] = icmp_type
        c8[ICMP_CODE, i] = code
        layers |= L_ICMP if proto == PROTO_ICMP else L_ICMP6
        if p + ICMP_HEADER > lim:
            return layers | L_TRUNCATED, 0, 0, 0
        layers = _payload(s, p, np.int64(ICMP_HEADER), l4len, layers, i, c16, c32)
        if proto == PROTO_ICMP:
            if icmp_type == ICMP_UNREACH and code == ICMP_FRAG_NEEDED:
                c32[ICMP_MTU, i] = u16(b, p + ICMP_NEXT_HOP_MTU)
                layers |= L_MTU
            if (icmp_type == ICMP_UNREACH or icmp_type == ICMP_SOURCE_QUENCH or icmp_type == ICMP_REDIRECT
                    or icmp_type == ICMP_TIME_EXCEEDED or icmp_type == ICMP_PARAM_PROBLEM):
                layers = _quote(b, p + ICMP_HEADER, lim, IPV4, layers, i, c8, c16, c64)
        else:
            if icmp_type == ICMP6_PACKET_TOO_BIG:
                c32[ICMP_MTU, i] = u32(b, p + ICMP6_MTU_FIELD)
                layers |= L_MTU
            if 1 <= icmp_type <= ICMP6_ERROR_MAX:
                layers = _quote(b, p + ICMP_HEADER, lim, IPV6, layers, i, c8, c16, c64)
        return layers, 0, 0, 0
    if proto == PROTO_SCTP or proto == PROTO_DCCP:
        if p + L4_PORTS > lim:
            return layers | L_TRUNCATED, 0, 0, 0
        c16[SRC_PORT, i] = u16(b, p + L4_SOURCE_PORT)
        c16[DST_PORT, i] = u16(b, p + L4_DESTINATION_PORT)
        layers |= L_PORTS
        if proto == PROTO_SCTP:
            if p + SCTP_HEADER > lim:
                return layers | L_TRUNCATED, 0, 0, 0
            layers = _payload(s, p, np.int64(SCTP_HEADER), l4len, layers | L_SCTP, i, c16, c32)
        return layers, 0, 0, 0
    if can_decap and (proto == PROTO_IPIP or proto == PROTO_IPV6):
        inner = ETHERTYPE_IP4 if proto == PROTO_IPIP else ETHERTYPE_IP6
        if ip_matches(b, p, lim, inner):
            return layers, inner, p, TUNNEL_IPIP
        return layers, 0, 0, 0
    if can_decap and proto == PROTO_GRE:
        inner, q, kind = gre(b, p, lim)
        return layers, inner, q, kind
    return layers, 0, 0, 0

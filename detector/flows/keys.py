"""Per-packet flow keys: direction-independent 5-tuples, their 64-bit hash, and fragment attachment.

A key is five uint64 columns: the lower endpoint `a` (address hi, lo), the
higher endpoint `b`, and proto<<32 | a_port<<16 | b_port. Endpoints are
ordered by (address, port), as Community ID and Zeek's ConnKey order them, so
both directions of a flow share one key. ICMP and ICMPv6 use the Community ID
port equivalents (type, counterpart type) — echo request and reply become one
flow — and (type, code) for one-way messages.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..cpu import kernel
from ..schema import (
    ICMP_ANY,
    IP_MF,
    L_FRAG,
    L_ICMP6,
    L_PORTS,
    L_QINQ,
    L_VLAN,
    LINKTYPE_ETHERNET,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_LOOP,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
)
from .community_id import COUNTERPART_TABLE as ICMP_COUNTERPART

KEY_WIDTH = 5

# Ports of the services Zeek registers analyzers for (its `likely_server_ports`):
# a flow first seen from such a port, without a SYN, is taken to come from the
# server (Zeek's TCP/UDP WantConnection role flip).
LIKELY_SERVER_PORTS = frozenset({
    20, 21, 22, 23, 25, 53, 67, 68, 69, 80, 81, 88, 110, 111, 123, 135, 137, 138, 139, 143, 161,
    162, 179, 389, 443, 445, 464, 465, 502, 514, 563, 585, 587, 614, 631, 636, 749, 750, 989, 990,
    992, 993, 995, 1080, 1433, 1812, 1813, 1883, 2049, 2123, 2152, 2811, 3128, 3268, 3306, 3389,
    3544, 4789, 5060, 5072, 5222, 5223, 5269, 5353, 5355, 5432, 5900, 6081, 6379, 6666, 6667,
    6668, 6669, 8000, 8080, 8883, 8888, 20000, 47808,
})
SERVER_PORT = np.zeros(65536, dtype=np.bool_)
SERVER_PORT[list(LIKELY_SERVER_PORTS)] = True

# Bytes before the outer IP header, by link type: estimates a tunnel carrier's
# IP length as inner IP length + (inner IP offset - link header).
LINK_HEADER_BYTES = {
    LINKTYPE_ETHERNET: 14, LINKTYPE_LINUX_SLL: 16, LINKTYPE_LINUX_SLL2: 20, LINKTYPE_NULL: 4,
    LINKTYPE_LOOP: 4, LINKTYPE_RAW: 0, LINKTYPE_IPV4: 0, LINKTYPE_IPV6: 0,
}
VLAN_TAG_BYTES = 4          # IEEE 802.1Q
IPV4_HEADER_BYTES = 20      # RFC 791, without options
IPV6_HEADER_BYTES = 40      # RFC 8200
UDP_HEADER_BYTES = 8        # RFC 768
V4_MAPPED_HI = np.uint64(0)
V4_MAPPED_LO_TAG = np.uint64(0xFFFF)


@njit
def _mix(x):
    """splitmix64 finaliser: a fast, well-distributed 64-bit mix."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


@kernel("(u8[:, ::1], i8)", nogil=True)
def hash_rows(K, seed):
    """64-bit hash of each row of the uint64 matrix K."""
    n, w = K.shape
    out = np.empty(n, dtype=np.uint64)
    s = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
    for i in range(n):
        h = s
        for j in range(w):
            h = _mix(h ^ K[i, j])
        out[i] = h
    return out


@kernel("(u8[::1], u8[::1], u8[::1], u8[::1], u2[::1], u2[::1], u1[::1])", nogil=True)
def canonical_keys(src_hi, src_lo, dst_hi, dst_lo, sport, dport, proto):
    """(K, from_a): the direction-independent key matrix and whether each packet was sent by `a`."""
    n = len(src_hi)
    K = np.empty((n, KEY_WIDTH), dtype=np.uint64)
    from_a = np.empty(n, dtype=np.uint8)
    for i in range(n):
        swap = src_hi[i] > dst_hi[i] or (src_hi[i] == dst_hi[i] and (
            src_lo[i] > dst_lo[i] or (src_lo[i] == dst_lo[i] and sport[i] > dport[i])))
        if swap:
            K[i, 0], K[i, 1], K[i, 2], K[i, 3] = dst_hi[i], dst_lo[i], src_hi[i], src_lo[i]
            ports = (np.uint64(dport[i]) << np.uint64(16)) | np.uint64(sport[i])
        else:
            K[i, 0], K[i, 1], K[i, 2], K[i, 3] = src_hi[i], src_lo[i], dst_hi[i], dst_lo[i]
            ports = (np.uint64(sport[i]) << np.uint64(16)) | np.uint64(dport[i])
        K[i, 4] = (np.uint64(proto[i]) << np.uint64(32)) | ports
        from_a[i] = 0 if swap else 1
    return K, from_a


def key_proto(K) -> np.ndarray:
    return (K[:, 4] >> np.uint64(32)).astype(np.uint8)


def key_ports(K) -> tuple[np.ndarray, np.ndarray]:
    return ((K[:, 4] >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.uint16), \
        (K[:, 4] & np.uint64(0xFFFF)).astype(np.uint16)


def is_v4_mapped(hi, lo) -> np.ndarray:
    return (hi == V4_MAPPED_HI) & ((lo >> np.uint64(32)) == V4_MAPPED_LO_TAG)


@kernel("(u4[::1], u2[::1], u2[::1], u1[::1], u1[::1], i2[:, ::1])", nogil=True)
def _ports(layers, src_port, dest_port, icmp_type, icmp_code, counterpart):
    n = len(layers)
    sport = np.zeros(n, dtype=np.uint16)
    dport = np.zeros(n, dtype=np.uint16)
    for i in range(n):
        lay = layers[i]
        if lay & L_PORTS:
            sport[i], dport[i] = src_port[i], dest_port[i]
        if lay & ICMP_ANY:
            kind = icmp_type[i]
            other = counterpart[1 if lay & L_ICMP6 else 0, kind]
            sport[i] = kind
            dport[i] = icmp_code[i] if other < 0 else other
    return sport, dport


def transport_ports(layers, proto, src_port, dest_port, icmp_type, icmp_code):
    """Ports per packet: transport ports; for ICMP the Community ID port equivalents (type, and the
    counterpart type of a two-way message or the code of a one-way one); else 0."""
    return _ports(layers, src_port, dest_port, icmp_type, icmp_code, ICMP_COUNTERPART)


def fragment_ids(src_hi, src_lo, dst_hi, dst_lo, proto, ip_id):
    """Hash of (addresses, proto, IP identification): what ties fragments of one datagram."""
    F = np.empty((len(src_hi), 5), dtype=np.uint64)
    F[:, 0], F[:, 1], F[:, 2], F[:, 3] = src_hi, src_lo, dst_hi, dst_lo
    F[:, 4] = (proto.astype(np.uint64) << np.uint64(32)) | ip_id.astype(np.uint64)
    return hash_rows(F, 0x46524147)


def first_fragment_mask(layers, frag_offset, ip_flags):
    return ((layers & np.uint32(L_FRAG)) != 0) & (frag_offset == 0) & ((ip_flags & IP_MF) != 0)


def later_fragment_mask(layers, frag_offset):
    return ((layers & np.uint32(L_FRAG)) != 0) & (frag_offset > 0)


def carrier_ip_len(ip_len, l3_off, wirelen, inner_ip, linktype, layers, outer_v4):
    """Estimated (IP length, UDP payload) of a tunnel's outer packet; the schema carries only
    the inner IP length: inner IP length + (inner IP offset - link header), or for a
    non-IP inner frame (e.g. ARP in Geneve) the frame length less the link header."""
    link = np.full(len(ip_len), -1, dtype=np.int64)
    for kind, size in LINK_HEADER_BYTES.items():
        link[linktype == kind] = size
    tags = ((layers & np.uint32(L_VLAN)) != 0).astype(np.int64) + ((layers & np.uint32(L_QINQ)) != 0)
    known = link >= 0
    link = np.where(known, link + tags * VLAN_TAG_BYTES, 0)
    from_inner = ip_len.astype(np.int64) + l3_off.astype(np.int64) - link
    outer = np.where(inner_ip, from_inner, wirelen.astype(np.int64) - link)
    outer = np.where(known, outer, wirelen.astype(np.int64))
    header = np.where(outer_v4, IPV4_HEADER_BYTES, IPV6_HEADER_BYTES) + UDP_HEADER_BYTES
    return outer, np.maximum(outer - header, 0)

"""Community ID v1 flow hashes (https://github.com/corelight/community-id-spec).

The identifier Zeek, Suricata and others attach to a flow, so findings can be
joined with their logs. `community_id` hashes one flow with hashlib;
`community_ids` hashes whole flow columns in compiled code (the input is at
most 40 bytes: one SHA-1 block) with the same result. The ICMP type/code
mapping (COUNTERPART_TABLE) also makes the flow key, so ICMP echo request and
reply land in one flow as in Zeek.
"""
from __future__ import annotations

import base64 as _b64
import hashlib
import ipaddress
import struct

import numpy as np
from numba import njit

from ..cpu import kernel
from ..schema import PROTO_ICMP, PROTO_ICMP6, PROTO_SCTP, PROTO_TCP, PROTO_UDP
from ..text import TextCodes

# Protocols whose ports (ICMP: type and code equivalents) enter the hash (spec, "Port numbers").
PORT_PROTOCOLS = frozenset({PROTO_ICMP, PROTO_TCP, PROTO_UDP, PROTO_ICMP6, PROTO_SCTP})

# ICMP message types and their counterpart: the pair behaves like a port pair,
# request and reply forming one bidirectional flow (spec; Zeek ICMP4_counterpart).
ICMP4_COUNTERPART = {
    8: 0, 0: 8,       # echo request / reply, RFC 792
    13: 14, 14: 13,   # timestamp request / reply, RFC 792
    15: 16, 16: 15,   # information request / reply, RFC 792
    10: 9,            # router solicitation -> advertisement, RFC 1256 (one way only, as in the spec)
    17: 18, 18: 17,   # address mask request / reply, RFC 950
}
ICMP6_COUNTERPART = {
    128: 129, 129: 128,  # echo request / reply, RFC 4443
    133: 134, 134: 133,  # router solicitation / advertisement, RFC 4861
    135: 136, 136: 135,  # neighbor solicitation / advertisement, RFC 4861
    130: 131, 131: 130,  # multicast listener query / report, RFC 2710
    139: 140, 140: 139,  # node information query / reply, RFC 4620
    144: 145, 145: 144,  # home agent address discovery request / reply, RFC 6275
}


def _counterpart_table() -> np.ndarray:
    """Per ICMP type: counterpart type, or -1 for one-way messages; row 0 ICMPv4, row 1 ICMPv6."""
    table = np.full((2, 256), -1, dtype=np.int16)
    for row, mapping in enumerate((ICMP4_COUNTERPART, ICMP6_COUNTERPART)):
        for kind, other in mapping.items():
            table[row, kind] = other
    return table


COUNTERPART_TABLE = _counterpart_table()


def _addr_bytes(addr) -> bytes:
    if isinstance(addr, (bytes, bytearray)):
        if len(addr) not in (4, 16):
            raise ValueError(f"an address is 4 or 16 bytes, not {len(addr)}")
        return bytes(addr)
    return ipaddress.ip_address(addr).packed


def community_id(src_ip, dest_ip, proto: int, src_port: int | None = None, dest_port: int | None = None,
                 seed: int = 0, base64: bool = True) -> str:
    """Community ID v1 of one flow, e.g. "1:LQU9qZlK+B5F3KDmev6m5PMibrg=".

    Addresses are strings or packed bytes (4 bytes IPv4, 16 bytes IPv6). For
    ICMP and ICMPv6 pass the type as `src_port` and the code as `dest_port`;
    they are mapped to port equivalents as the specification says.
    """
    src, dst = _addr_bytes(src_ip), _addr_bytes(dest_ip)
    if len(src) != len(dst):
        raise ValueError("source and destination addresses are of different families")
    proto = int(proto)
    with_ports = proto in PORT_PROTOCOLS and src_port is not None and dest_port is not None
    sport = dport = 0
    one_way = False
    if with_ports:
        sport, dport = int(src_port), int(dest_port)
        if proto in (PROTO_ICMP, PROTO_ICMP6):
            other = (ICMP6_COUNTERPART if proto == PROTO_ICMP6 else ICMP4_COUNTERPART).get(sport)
            one_way = other is None
            if not one_way:
                dport = other
    if not one_way and (src, sport) > (dst, dport):
        src, dst, sport, dport = dst, src, dport, sport
    data = struct.pack("!H", seed & 0xFFFF) + src + dst + struct.pack("!BB", proto, 0)
    if with_ports:
        data += struct.pack("!HH", sport, dport)
    digest = hashlib.sha1(data)
    text = _b64.b64encode(digest.digest()).decode("ascii") if base64 else digest.hexdigest()
    return "1:" + text


# ---- compiled: the same hash for whole columns -----------------------------
_PORT_PROTOCOL = np.zeros(256, dtype=np.bool_)
_PORT_PROTOCOL[list(PORT_PROTOCOLS)] = True
# FIPS 180-4, section 5.3.1 (initial hash value) and 4.2.1 (round constants)
_SHA1_INIT = np.array([0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0], dtype=np.int64)
_SHA1_K = np.array([0x5A827999, 0x6ED9EBA1, 0x8F1BBCDC, 0xCA62C1D6], dtype=np.int64)
_M32 = 0xFFFFFFFF
# RFC 4648 section 4 alphabet
# writable, as every array the kernel is called with: one compiled signature
_B64 = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", dtype=np.uint8).copy()
ID_CHARS = 30           # "1:" + base64 of the 20-byte digest (28 characters, one '=')


@njit(_nrt=False, nogil=True)
def _rotl(x, n):
    return ((x << n) | (x >> (32 - n))) & _M32


@njit(_nrt=False, nogil=True)
def _sha1_one_block(block, length, init, kconst, w, digest):
    """SHA-1 (FIPS 180-4) of block[:length], length <= 55 bytes, into digest (20 bytes).

    Pads block (64 bytes) in place; w is the 80-word message schedule, reused.
    """
    block[length] = 0x80
    block[length + 1:56] = 0
    bits = length * 8
    for j in range(8):
        block[63 - j] = (bits >> (8 * j)) & 0xFF
    for t in range(16):
        w[t] = (np.int64(block[4 * t]) << 24) | (np.int64(block[4 * t + 1]) << 16) | \
            (np.int64(block[4 * t + 2]) << 8) | np.int64(block[4 * t + 3])
    for t in range(16, 80):
        w[t] = _rotl(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1)
    a, b, c, d, e = init[0], init[1], init[2], init[3], init[4]
    for t in range(80):
        if t < 20:
            f = (b & c) | ((~b) & d)
        elif t < 40 or t >= 60:
            f = b ^ c ^ d
        else:
            f = (b & c) | (b & d) | (c & d)
        tmp = (_rotl(a, 5) + (f & _M32) + e + kconst[t // 20] + w[t]) & _M32
        e, d, c, b, a = d, c, _rotl(b, 30), a, tmp
    for j, v in enumerate(((init[0] + a) & _M32, (init[1] + b) & _M32, (init[2] + c) & _M32,
                           (init[3] + d) & _M32, (init[4] + e) & _M32)):
        for byte in range(4):
            digest[4 * j + byte] = (v >> (24 - 8 * byte)) & 0xFF


@njit(_nrt=False, nogil=True)
def _put_address(msg, at, hi, lo, v4):
    """Big-endian address bytes at msg[at:]: 4 for IPv4 (the mapped low 32 bits), else 16."""
    if v4:
        for j in range(4):
            msg[at + j] = (lo >> np.uint64(24 - 8 * j)) & np.uint64(0xFF)
        return at + 4
    for j in range(8):
        msg[at + j] = (hi >> np.uint64(56 - 8 * j)) & np.uint64(0xFF)
        msg[at + 8 + j] = (lo >> np.uint64(56 - 8 * j)) & np.uint64(0xFF)
    return at + 16


@kernel("(u8[::1], u8[::1], u8[::1], u8[::1], u1[::1], u2[::1], u2[::1], b1[::1], i8, i2[:, ::1], "
        "b1[::1], i8[::1], i8[::1], u1[::1])", nogil=True)
def _community_id_kernel(src_hi, src_lo, dst_hi, dst_lo, proto, sport, dport, v4, seed, counterpart,
                         port_protocol, init, kconst, alphabet):
    n = len(proto)
    out = np.empty((n, ID_CHARS), dtype=np.uint8)
    msg = np.zeros(64, dtype=np.uint8)
    w = np.empty(80, dtype=np.int64)
    digest = np.zeros(21, dtype=np.uint8)       # one spare zero byte: 21 = 7 base64 groups of 3
    for i in range(n):
        p = np.int64(proto[i])
        with_ports = port_protocol[p]
        sp = np.int64(sport[i]) if with_ports else 0
        dp = np.int64(dport[i]) if with_ports else 0
        one_way = False
        if with_ports and (p == 1 or p == 58):
            other = counterpart[1 if p == 58 else 0, sp] if sp < 256 else -1
            one_way = other < 0
            if not one_way:
                dp = np.int64(other)
        shi, slo, dhi, dlo = src_hi[i], src_lo[i], dst_hi[i], dst_lo[i]
        if not one_way and (shi > dhi or (shi == dhi and (slo > dlo or (slo == dlo and sp > dp)))):
            shi, slo, dhi, dlo = dhi, dlo, shi, slo
            sp, dp = dp, sp
        msg[0] = (seed >> 8) & 0xFF
        msg[1] = seed & 0xFF
        at = _put_address(msg, 2, shi, slo, v4[i])
        at = _put_address(msg, at, dhi, dlo, v4[i])
        msg[at] = p
        msg[at + 1] = 0
        at += 2
        if with_ports:
            msg[at], msg[at + 1], msg[at + 2], msg[at + 3] = sp >> 8, sp & 0xFF, dp >> 8, dp & 0xFF
            at += 4
        _sha1_one_block(msg, at, init, kconst, w, digest)
        out[i, 0] = ord("1")
        out[i, 1] = ord(":")
        for g in range(7):
            v = (np.int64(digest[3 * g]) << 16) | (np.int64(digest[3 * g + 1]) << 8) | np.int64(digest[3 * g + 2])
            for j in range(4):
                out[i, 2 + 4 * g + j] = alphabet[(v >> (18 - 6 * j)) & 63]
        out[i, ID_CHARS - 1] = ord("=")     # 20 bytes = 6 groups + 2 bytes: one pad character
    return out


def community_id_codes(src_hi, src_lo, dst_hi, dst_lo, proto, src_port, dest_port, seed: int = 0) -> TextCodes:
    """Community ID v1 (base64) of every flow given as columns, as TextCodes over the ASCII rows.

    Addresses are the schema's 128-bit halves; a flow whose both addresses are
    IPv4-mapped hashes them as IPv4. Ports are those `community_id` takes (for
    ICMP the type and code, or their port equivalents).
    """
    src_hi, src_lo = np.asarray(src_hi, np.uint64), np.asarray(src_lo, np.uint64)
    dst_hi, dst_lo = np.asarray(dst_hi, np.uint64), np.asarray(dst_lo, np.uint64)
    v4 = _v4_mapped(src_hi, src_lo) & _v4_mapped(dst_hi, dst_lo)
    raw = _community_id_kernel(src_hi, src_lo, dst_hi, dst_lo, np.asarray(proto, np.uint8),
                               np.asarray(src_port, np.uint16), np.asarray(dest_port, np.uint16), v4,
                               int(seed) & 0xFFFF, COUNTERPART_TABLE, _PORT_PROTOCOL, _SHA1_INIT, _SHA1_K, _B64)
    return TextCodes(np.arange(len(raw)), raw)


def community_ids(src_hi, src_lo, dst_hi, dst_lo, proto, src_port, dest_port, seed: int = 0) -> np.ndarray:
    """Community ID v1 (base64) of every flow given as columns: an object array of str."""
    return community_id_codes(src_hi, src_lo, dst_hi, dst_lo, proto, src_port, dest_port, seed).value_texts()


def _v4_mapped(hi, lo) -> np.ndarray:
    """::ffff:0:0/96 (RFC 4291 section 2.5.5.2)."""
    return (hi == 0) & ((lo >> np.uint64(32)) == np.uint64(0xFFFF))

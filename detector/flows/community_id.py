"""Community ID v1 flow hashes (https://github.com/corelight/community-id-spec).

The identifier Zeek, Suricata and others attach to a flow, so findings can be
joined with their logs. SHA-1 is computed per flow with hashlib (flows are far
fewer than packets); the ICMP type/code mapping is also used vectorised by the
flow key, so ICMP echo request and reply land in one flow as in Zeek.
"""
from __future__ import annotations

import base64 as _b64
import hashlib
import ipaddress
import struct

import numpy as np

from ..schema import PROTO_ICMP, PROTO_ICMP6, PROTO_SCTP, PROTO_TCP, PROTO_UDP

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


def _lookup_tables() -> tuple[np.ndarray, np.ndarray]:
    """Per ICMP type: counterpart type, or -1 for one-way messages; row 0 ICMPv4, row 1 ICMPv6."""
    table = np.full((2, 256), -1, dtype=np.int16)
    for row, mapping in enumerate((ICMP4_COUNTERPART, ICMP6_COUNTERPART)):
        for kind, other in mapping.items():
            table[row, kind] = other
    return table, table >= 0


_COUNTERPART, _TWO_WAY = _lookup_tables()


def icmp_port_equivalents(icmp_type: np.ndarray, icmp_code: np.ndarray, v6: np.ndarray):
    """Vectorised spec mapping: (source port, destination port, one_way) per ICMP message."""
    row = v6.astype(np.intp)
    kind = icmp_type.astype(np.intp)
    other = _COUNTERPART[row, kind]
    one_way = other < 0
    dport = np.where(one_way, icmp_code.astype(np.int32), other.astype(np.int32)).astype(np.uint16)
    return icmp_type.astype(np.uint16), dport, one_way


def _addr_bytes(addr) -> bytes:
    if isinstance(addr, (bytes, bytearray)):
        if len(addr) not in (4, 16):
            raise ValueError(f"an address is 4 or 16 bytes, not {len(addr)}")
        return bytes(addr)
    return ipaddress.ip_address(addr).packed


def community_id(src_ip, dst_ip, proto: int, src_port: int | None = None, dst_port: int | None = None,
                 seed: int = 0, base64: bool = True) -> str:
    """Community ID v1 of one flow, e.g. "1:LQU9qZlK+B5F3KDmev6m5PMibrg=".

    Addresses are strings or packed bytes (4 bytes IPv4, 16 bytes IPv6). For
    ICMP and ICMPv6 pass the type as `src_port` and the code as `dst_port`;
    they are mapped to port equivalents as the specification says.
    """
    src, dst = _addr_bytes(src_ip), _addr_bytes(dst_ip)
    if len(src) != len(dst):
        raise ValueError("source and destination addresses are of different families")
    proto = int(proto)
    with_ports = proto in PORT_PROTOCOLS and src_port is not None and dst_port is not None
    sport = dport = 0
    one_way = False
    if with_ports:
        sport, dport = int(src_port), int(dst_port)
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

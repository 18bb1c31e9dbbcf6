"""The `ospf` table: OSPFv2 (RFC 2328) and OSPFv3 (RFC 5340) packets, IP protocol 89.

One entry per packet: the common header (version, type, length, router id,
area id, checksum; the authentication type of OSPFv2, the instance id of
OSPFv3), and the fields of its type: a Hello's network mask (v2) or
interface id (v3), intervals, options, priority, DR and BDR; a Database
Description's interface MTU, options, I/M/MS flags and DD sequence number;
an LS Update's LSA count. Repeated elements go into two child tables: the
neighbours a Hello lists (`ospf_nbr`), and the LSAs a Database Description,
LS Request, LS Update or LS Acknowledgment names (`ospf_lsa`: the 20-byte
LSA header, or a request's type, link state id and advertising router),
at most `MAX_NEIGHBORS` and `MAX_LSAS` per packet, the rest flagged MORE.

The packet ends where its length field says, when the IP packet holds that
much: what follows (an OSPFv2 cryptographic digest, RFC 2328 section D.4.3;
an LLS data block, RFC 5613; an OSPFv3 authentication trailer, RFC 7166) is
not part of it. A length longer than the IP packet, shorter than the
header, or a body that does not divide into its elements, flags the entry
TRUNCATED; so does an LS Update whose LSA count or LSA lengths run past the
packet, whose LSAs are then listed as far as they go, never read past it.

Checksums are verified when the whole packet was captured and the sender
computed one (it leaves 0 when it does not, and OSPFv2 cryptographic
authentication replaces it): OSPFv2 over the packet without the 64-bit
authentication field (RFC 2328 section D.4.3), OSPFv3 over an IPv6
pseudo-header and the packet (RFC 5340 section A.3.1) or, when an LLS block
or authentication trailer follows the packet, over the whole IPv6 payload
with its length, as Linux computes it for FRRouting's ospf6d (which leaves
the sum to the kernel: the IPV6_CHECKSUM socket option). An LSA of an LS
Update whose body was captured has its Fletcher checksum verified too (RFC
2328 section 12.1.7: over the LSA but its age).

`fault` says why a packet is malformed by its own bytes (FAULTS, one bit
each; 0: nothing wrong in what was captured): judged against the length the
IP header gives it and its own length fields, never against the capture's
end, so a packet cut by the snapshot length is not malformed for being cut.
The TRUNCATED flag keeps its meaning (cut short, or lying about a length).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ...cpu import kernel
from ..read import u8, u16, u32
from .checksum import fold, halves_sum, sum16
from .table import MORE, TRUNCATED, Child, Field, Layout, Spec, candidate_rows, ip_endpoints, message_bounds, with_valid

PROTO_OSPF = 89                  # IANA; both versions
V2_HEADER_BYTES = 24             # RFC 2328 section A.3.1
V3_HEADER_BYTES = 16             # RFC 5340 section A.3.1
HELLO, DB_DESCRIPTION, LS_REQUEST, LS_UPDATE, LS_ACK = 1, 2, 3, 4, 5   # packet types, RFC 2328 section A.3.1
HELLO_FIXED_BYTES = 20           # both versions, before the neighbour list (A.3.2 of either RFC)
V2_DBD_FIXED_BYTES = 8           # RFC 2328 section A.3.3
V3_DBD_FIXED_BYTES = 12          # RFC 5340 section A.3.3
LSU_FIXED_BYTES = 4              # the LSA count, A.3.5 of either RFC
LSA_HEADER_BYTES = 20            # RFC 2328 section A.4.1, RFC 5340 section A.4.2
LS_REQUEST_BYTES = 12            # one requested LSA, A.3.4 of either RFC
NEIGHBOR_BYTES = 4
AUTH_CRYPTOGRAPHIC = 2           # RFC 2328 section D.3: the checksum is not computed
MAX_NEIGHBORS = 64               # per Hello; the rest is flagged MORE
MAX_LSAS = 64                    # per packet; the rest is flagged MORE

# why a packet is malformed (bits of `fault`), worded as Wireshark's expert information would
F_SHORT, F_VERSION, F_LENGTH_SHORT, F_LENGTH_LONG, F_TYPE, F_BODY, F_NEIGHBORS, F_ELEMENTS, F_LSA_COUNT, \
    F_LSA_LENGTH, F_CHECKSUM, F_LSA_CHECKSUM = (1 << k for k in range(12))
FAULTS = {
    F_SHORT: "shorter than the OSPF header",
    F_VERSION: "unknown version (neither 2 nor 3)",
    F_LENGTH_SHORT: "packet length field shorter than the OSPF header",
    F_LENGTH_LONG: "packet length field past the end of the IP packet",
    F_TYPE: "unknown packet type (not 1-5)",
    F_BODY: "too short for the fixed part of its packet type",
    F_NEIGHBORS: "Hello whose length leaves part of a neighbour's router id",
    F_ELEMENTS: "body not a whole number of LSA headers (or of LS Request entries)",
    F_LSA_COUNT: "LS Update declares more LSAs than it carries",
    F_LSA_LENGTH: "LSA with a length below its header's or past the packet",
    F_CHECKSUM: "bad checksum",
    F_LSA_CHECKSUM: "LSA with a bad Fletcher checksum",
}

# validity bits of `ospf`
B_VERSION = 1 << 0
B_LENGTH = 1 << 1
B_ROUTER = 1 << 2
B_CHECKSUM = 1 << 3
B_CHECKSUM_OK = 1 << 4
B_AUTH_TYPE = 1 << 5
B_INSTANCE = 1 << 6
B_HELLO = 1 << 7
B_MASK = 1 << 8
B_INTERFACE_ID = 1 << 9
B_OPTIONS = 1 << 10
B_DBD = 1 << 11
B_NEIGHBOR_COUNT = 1 << 12
B_LSA_COUNT = 1 << 13
# of `ospf_nbr`
B_NEIGHBOR = 1 << 0
# of `ospf_lsa`
B_LSA_ID = 1 << 0
B_LSA_HEADER = 1 << 1
B_LSA_OPTIONS = 1 << 2
B_LSA_CHECKSUM_OK = 1 << 3

FIELDS = {
    "version": Field(np.uint8, B_VERSION, "OSPF version (2 or 3)"),
    "type": Field(np.uint8, B_VERSION, "packet type (1 Hello, 2 Database Description, 3 LS Request, 4 LS Update, "
                                       "5 LS Acknowledgment)"),
    "length": Field(np.uint16, B_LENGTH, "packet length per the OSPF header, bytes"),
    "router_id": Field(np.uint32, B_ROUTER, "router id of the sender"),
    "area_id": Field(np.uint32, B_ROUTER, "area id"),
    "checksum": Field(np.uint16, B_CHECKSUM, "checksum as sent"),
    "checksum_ok": Field(np.uint8, B_CHECKSUM_OK, "1 when the checksum verifies (whole packet captured, one "
                                                  "computed)"),
    "auth_type": Field(np.uint16, B_AUTH_TYPE, "OSPFv2 authentication type (0 none, 1 simple password, "
                                               "2 cryptographic)"),
    "instance_id": Field(np.uint8, B_INSTANCE, "OSPFv3 instance id"),
    "network_mask": Field(np.uint32, B_MASK, "Hello (v2): network mask of the sending interface"),
    "interface_id": Field(np.uint32, B_INTERFACE_ID, "Hello (v3): interface id of the sending interface"),
    "hello_interval": Field(np.uint16, B_HELLO, "Hello: seconds between Hellos"),
    "dead_interval": Field(np.uint32, B_HELLO, "Hello: seconds without a Hello before a neighbour is down"),
    "priority": Field(np.uint8, B_HELLO, "Hello: router priority (0: never DR)"),
    "dr": Field(np.uint32, B_HELLO, "Hello: designated router (v2: its interface address; v3: its router id)"),
    "bdr": Field(np.uint32, B_HELLO, "Hello: backup designated router (as `dr`)"),
    "options": Field(np.uint32, B_OPTIONS, "Hello and Database Description: options (v2 8 bits, v3 24 bits)"),
    "mtu": Field(np.uint16, B_DBD, "Database Description: interface MTU, bytes (0 on virtual links)"),
    "dd_flags": Field(np.uint8, B_DBD, "Database Description: flags (4 I init, 2 M more, 1 MS master; 8 R, "
                                       "RFC 4811)"),
    "dd_seq": Field(np.uint32, B_DBD, "Database Description: DD sequence number"),
    "neighbor_count": Field(np.uint16, B_NEIGHBOR_COUNT, "Hello: neighbours its length makes room for"),
    "lsa_count": Field(np.uint32, B_LSA_COUNT, "LS Update: the number of LSAs it says it carries"),
    "fault": Field(np.uint16, 0, "why the packet is malformed by its own bytes (FAULTS bits; 0: nothing wrong in "
                                 "what was captured)"),
}
NEIGHBOR_FIELDS = {
    "router_id": Field(np.uint32, B_NEIGHBOR, "router id of a neighbour the Hello lists"),
}
LSA_FIELDS = {
    "type": Field(np.uint32, B_LSA_ID, "LS type (v2: 8 bits, 32 in a request; v3: 16 bits with U and S bits)"),
    "ls_id": Field(np.uint32, B_LSA_ID, "link state id"),
    "adv_router": Field(np.uint32, B_LSA_ID, "advertising router"),
    "age": Field(np.uint16, B_LSA_HEADER, "LS age, seconds (3600: MaxAge, being flushed; top bit: DoNotAge)"),
    "seq": Field(np.uint32, B_LSA_HEADER, "LS sequence number (signed, 0x80000001 the first)"),
    "checksum": Field(np.uint16, B_LSA_HEADER, "LS checksum (Fletcher) as sent"),
    "length": Field(np.uint16, B_LSA_HEADER, "LSA length including its header, bytes"),
    "options": Field(np.uint8, B_LSA_OPTIONS, "options of an OSPFv2 LSA"),
    "checksum_ok": Field(np.uint8, B_LSA_CHECKSUM_OK, "1 when the Fletcher checksum verifies (an LS Update's LSA "
                                                      "captured whole)"),
}
NEIGHBORS = Child("ospf_nbr", NEIGHBOR_FIELDS, MAX_NEIGHBORS, "the neighbours an OSPF Hello lists")
LSAS = Child("ospf_lsa", LSA_FIELDS, MAX_LSAS, "the LSAs an OSPF packet describes, requests, carries or acknowledges")

_ROW = Layout(with_valid(FIELDS)).row
VERSION, TYPE, LENGTH, ROUTER_ID, AREA_ID = _ROW["version"], _ROW["type"], _ROW["length"], _ROW["router_id"], \
    _ROW["area_id"]
CHECKSUM, CHECKSUM_OK, AUTH_TYPE, INSTANCE = _ROW["checksum"], _ROW["checksum_ok"], _ROW["auth_type"], \
    _ROW["instance_id"]
MASK, INTERFACE_ID, HELLO_INTERVAL, DEAD_INTERVAL = _ROW["network_mask"], _ROW["interface_id"], \
    _ROW["hello_interval"], _ROW["dead_interval"]
PRIORITY, DR, BDR, OPTIONS = _ROW["priority"], _ROW["dr"], _ROW["bdr"], _ROW["options"]
MTU, DD_FLAGS, DD_SEQ = _ROW["mtu"], _ROW["dd_flags"], _ROW["dd_seq"]
NEIGHBOR_COUNT, LSA_COUNT, VALID, FAULT = _ROW["neighbor_count"], _ROW["lsa_count"], _ROW["valid"], _ROW["fault"]
_NBR_ROW = NEIGHBORS.layout.row
NBR_ID, NBR_VALID = _NBR_ROW["router_id"], _NBR_ROW["valid"]
_LSA_ROW = LSAS.layout.row
LSA_TYPE, LSA_ID, LSA_ADV, LSA_AGE = _LSA_ROW["type"], _LSA_ROW["ls_id"], _LSA_ROW["adv_router"], _LSA_ROW["age"]
LSA_SEQ, LSA_CHECKSUM, LSA_LENGTH = _LSA_ROW["seq"], _LSA_ROW["checksum"], _LSA_ROW["length"]
LSA_OPTIONS, LSA_CHECKSUM_OK, LSA_VALID = _LSA_ROW["options"], _LSA_ROW["checksum_ok"], _LSA_ROW["valid"]

FLETCHER_MODULUS = 255           # ISO 8473 (RFC 905 Annex B), as RFC 2328 section 12.1.7 uses it
LSA_AGE_BYTES = 2                # the age is left out of the LSA checksum


@njit(_nrt=False)
def _fletcher_ok(b, p, end):
    """True when the ISO Fletcher checksum over b[p:end] (its check bytes inside) verifies: both sums 0."""
    c0 = 0
    c1 = 0
    while p < end:
        c0 = (c0 + u8(b, p)) % FLETCHER_MODULUS
        c1 = (c1 + c0) % FLETCHER_MODULUS
        p += 1
    return c0 == 0 and c1 == 0


@njit(_nrt=False)
def _lsa_header(b, p, version, slot, l8, l16, l32):
    """Record the 20-byte LSA header at b[p:]; its validity bits."""
    l16[LSA_AGE, slot] = u16(b, p)
    if version == 2:
        l8[LSA_OPTIONS, slot] = u8(b, p + 2)
        l32[LSA_TYPE, slot] = u8(b, p + 3)
    else:
        l32[LSA_TYPE, slot] = u16(b, p + 2)
    l32[LSA_ID, slot] = u32(b, p + 4)
    l32[LSA_ADV, slot] = u32(b, p + 8)
    l32[LSA_SEQ, slot] = u32(b, p + 12)
    l16[LSA_CHECKSUM, slot] = u16(b, p + 16)
    l16[LSA_LENGTH, slot] = u16(b, p + 18)
    valid = np.uint32(B_LSA_ID | B_LSA_HEADER)
    if version == 2:
        valid |= B_LSA_OPTIONS
    return valid


@njit(_nrt=False)
def _lsa_headers(b, p, stop, end, version, i, l8, l16, l32):
    """The LSA headers packed from b[p] to the packet's end `stop` (captured up to `end`): (listed, flags, fault)."""
    listed = 0
    flags = np.uint32(0)
    fault = F_ELEMENTS if (stop - p) % LSA_HEADER_BYTES else 0
    while p < stop:
        if p + LSA_HEADER_BYTES > stop or p + LSA_HEADER_BYTES > end:
            flags |= TRUNCATED       # a partial header: the length lies, or the capture ends inside it
            break
        if listed >= MAX_LSAS:
            flags |= MORE
            break
        slot = i * MAX_LSAS + listed
        l32[LSA_VALID, slot] = _lsa_header(b, p, version, slot, l8, l16, l32)
        listed += 1
        p += LSA_HEADER_BYTES
    return listed, flags, fault


@njit(_nrt=False)
def _ls_requests(b, p, stop, end, version, i, l32):
    """The requested LSAs (type, link state id, advertising router) from b[p] to `stop`: (listed, flags, fault)."""
    listed = 0
    flags = np.uint32(0)
    fault = F_ELEMENTS if (stop - p) % LS_REQUEST_BYTES else 0
    while p < stop:
        if p + LS_REQUEST_BYTES > stop or p + LS_REQUEST_BYTES > end:
            flags |= TRUNCATED
            break
        if listed >= MAX_LSAS:
            flags |= MORE
            break
        slot = i * MAX_LSAS + listed
        l32[LSA_TYPE, slot] = u32(b, p) if version == 2 else u16(b, p + 2)
        l32[LSA_ID, slot] = u32(b, p + 4)
        l32[LSA_ADV, slot] = u32(b, p + 8)
        l32[LSA_VALID, slot] = B_LSA_ID
        listed += 1
        p += LS_REQUEST_BYTES
    return listed, flags, fault


@njit(_nrt=False)
def _ls_update(b, p, stop, end, version, count, i, l8, l16, l32):
    """The `count` LSAs of an LS Update, each skipped by its own length, from b[p] to `stop`: (listed, flags,
    fault). The LSAs past the cap are walked on (not listed) for their lengths and checksums."""
    listed = 0
    flags = np.uint32(0)
    fault = 0
    for _ in range(count):
        if p + LSA_HEADER_BYTES > stop:
            flags |= TRUNCATED       # the count promised more LSAs than the packet holds
            fault |= F_LSA_COUNT
            break
        if p + LSA_HEADER_BYTES > end:
            flags |= TRUNCATED       # cut by the snapshot length
            break
        keep = listed < MAX_LSAS
        slot = i * MAX_LSAS + listed
        valid = _lsa_header(b, p, version, slot, l8, l16, l32) if keep else np.uint32(0)
        if not keep:
            flags |= MORE
        length = u16(b, p + 18)
        if keep:
            listed += 1
        if length < LSA_HEADER_BYTES or p + length > stop:
            if keep:
                l32[LSA_VALID, slot] = valid | TRUNCATED
            flags |= TRUNCATED       # a length that cannot be, or runs past the packet: the walk stops here
            fault |= F_LSA_LENGTH
            break
        if p + length > end:
            if keep:
                l32[LSA_VALID, slot] = valid | TRUNCATED
            flags |= TRUNCATED       # cut by the snapshot length
            break
        ok = _fletcher_ok(b, p + LSA_AGE_BYTES, p + length)
        if not ok:
            fault |= F_LSA_CHECKSUM
        if keep:
            l8[LSA_CHECKSUM_OK, slot] = ok
            l32[LSA_VALID, slot] = valid | B_LSA_CHECKSUM_OK
        p += length
    return listed, flags, fault


@njit(_nrt=False)
def _hello(b, p, stop, end, version, i, c8, c16, c32, n32):
    """A Hello's fields from b[p] (after the header) to `stop`: (neighbours listed, validity bits, fault)."""
    if p + HELLO_FIXED_BYTES > stop:
        return 0, TRUNCATED, F_BODY
    if p + HELLO_FIXED_BYTES > end:
        return 0, TRUNCATED, 0
    if version == 2:
        c32[MASK, i] = u32(b, p)
        c16[HELLO_INTERVAL, i] = u16(b, p + 4)
        c32[OPTIONS, i] = u8(b, p + 6)
        c8[PRIORITY, i] = u8(b, p + 7)
        c32[DEAD_INTERVAL, i] = u32(b, p + 8)
        valid = np.uint32(B_HELLO | B_OPTIONS | B_MASK)
    else:
        c32[INTERFACE_ID, i] = u32(b, p)
        c8[PRIORITY, i] = u8(b, p + 4)
        c32[OPTIONS, i] = (u8(b, p + 5) << 16) | u16(b, p + 6)
        c16[HELLO_INTERVAL, i] = u16(b, p + 8)
        c32[DEAD_INTERVAL, i] = u16(b, p + 10)
        valid = np.uint32(B_HELLO | B_OPTIONS | B_INTERFACE_ID)
    c32[DR, i] = u32(b, p + 12)
    c32[BDR, i] = u32(b, p + 16)
    p += HELLO_FIXED_BYTES
    c16[NEIGHBOR_COUNT, i] = (stop - p) // NEIGHBOR_BYTES
    valid |= B_NEIGHBOR_COUNT
    fault = 0
    if (stop - p) % NEIGHBOR_BYTES:
        valid |= TRUNCATED           # a length that leaves part of a neighbour
        fault = F_NEIGHBORS
    listed = 0
    while p + NEIGHBOR_BYTES <= stop:
        if p + NEIGHBOR_BYTES > end:
            valid |= TRUNCATED
            break
        if listed >= MAX_NEIGHBORS:
            valid |= MORE
            break
        slot = i * MAX_NEIGHBORS + listed
        n32[NBR_ID, slot] = u32(b, p)
        n32[NBR_VALID, slot] = B_NEIGHBOR
        listed += 1
        p += NEIGHBOR_BYTES
    return listed, valid, fault


@njit(_nrt=False)
def _packet(b, s, end, ip_payload, family, src_hi, src_lo, dst_hi, dst_lo, i, c8, c16, c32, n32, l8, l16, l32):
    """Parse one packet b[s:end] (`ip_payload`: bytes the IP header gives it); returns (neighbours, LSAs) listed."""
    if end - s < 2:
        c32[VALID, i] = TRUNCATED
        if ip_payload < 2:
            c16[FAULT, i] = F_SHORT
        return 0, 0
    version = u8(b, s)
    kind = u8(b, s + 1)
    c8[VERSION, i] = version
    c8[TYPE, i] = kind
    valid = np.uint32(B_VERSION)
    if version != 2 and version != 3:
        c16[FAULT, i] = F_VERSION
        c32[VALID, i] = valid
        return 0, 0
    header = V2_HEADER_BYTES if version == 2 else V3_HEADER_BYTES
    fault = F_SHORT if ip_payload < header else 0
    if kind < HELLO or kind > LS_ACK:
        fault |= F_TYPE
    if end - s < header:
        c16[FAULT, i] = fault
        c32[VALID, i] = valid | TRUNCATED
        return 0, 0
    length = u16(b, s + 2)
    c16[LENGTH, i] = length
    c32[ROUTER_ID, i] = u32(b, s + 4)
    c32[AREA_ID, i] = u32(b, s + 8)
    checksum = u16(b, s + 12)
    c16[CHECKSUM, i] = checksum
    valid |= B_LENGTH | B_ROUTER | B_CHECKSUM
    auth_type = 0
    if version == 2:
        auth_type = u16(b, s + 14)
        c16[AUTH_TYPE, i] = auth_type
        valid |= B_AUTH_TYPE
    else:
        c8[INSTANCE, i] = u8(b, s + 14)
        valid |= B_INSTANCE
    if length < header or length > ip_payload:
        c16[FAULT, i] = fault | (F_LENGTH_SHORT if length < header else F_LENGTH_LONG)
        c32[VALID, i] = valid | TRUNCATED       # the length lies (or the IP packet is a fragment's first part)
        return 0, 0
    stop = s + length
    if stop <= end and checksum != 0 and auth_type != AUTH_CRYPTOGRAPHIC:
        if version == 2:
            ok = fold(sum16(b, s, s + 16) + sum16(b, s + V2_HEADER_BYTES, stop)) == 0xFFFF
            valid |= B_CHECKSUM_OK
        else:
            pseudo = halves_sum(src_hi, src_lo, family) + halves_sum(dst_hi, dst_lo, family) + np.uint64(PROTO_OSPF)
            ok = fold(sum16(b, s, stop) + pseudo + np.uint64(length)) == 0xFFFF
            whole = s + ip_payload <= end
            if not ok and ip_payload > length and whole:
                ok = fold(sum16(b, s, s + ip_payload) + pseudo + np.uint64(ip_payload)) == 0xFFFF
            if ok or ip_payload == length or whole:
                valid |= B_CHECKSUM_OK
        c8[CHECKSUM_OK, i] = ok
        if valid & B_CHECKSUM_OK and not ok:
            fault |= F_CHECKSUM
    p = s + header
    neighbors = 0
    lsas = 0
    if kind == HELLO:
        neighbors, flags, body_fault = _hello(b, p, stop, end, version, i, c8, c16, c32, n32)
        valid |= flags
        fault |= body_fault
    elif kind == DB_DESCRIPTION:
        fixed = V2_DBD_FIXED_BYTES if version == 2 else V3_DBD_FIXED_BYTES
        if p + fixed > stop:
            valid |= TRUNCATED
            fault |= F_BODY
        elif p + fixed > end:
            valid |= TRUNCATED
        else:
            if version == 2:
                c16[MTU, i] = u16(b, p)
                c32[OPTIONS, i] = u8(b, p + 2)
                c8[DD_FLAGS, i] = u8(b, p + 3)
                c32[DD_SEQ, i] = u32(b, p + 4)
            else:
                c32[OPTIONS, i] = (u8(b, p + 1) << 16) | u16(b, p + 2)
                c16[MTU, i] = u16(b, p + 4)
                c8[DD_FLAGS, i] = u8(b, p + 7)
                c32[DD_SEQ, i] = u32(b, p + 8)
            valid |= B_DBD | B_OPTIONS
            lsas, flags, body_fault = _lsa_headers(b, p + fixed, stop, end, version, i, l8, l16, l32)
            valid |= flags
            fault |= body_fault
    elif kind == LS_REQUEST:
        lsas, flags, body_fault = _ls_requests(b, p, stop, end, version, i, l32)
        valid |= flags
        fault |= body_fault
    elif kind == LS_UPDATE:
        if p + LSU_FIXED_BYTES > stop:
            valid |= TRUNCATED
            fault |= F_BODY
        elif p + LSU_FIXED_BYTES > end:
            valid |= TRUNCATED
        else:
            count = u32(b, p)
            c32[LSA_COUNT, i] = count
            valid |= B_LSA_COUNT
            lsas, flags, body_fault = _ls_update(b, p + LSU_FIXED_BYTES, stop, end, version, count, i, l8, l16, l32)
            valid |= flags
            fault |= body_fault
    elif kind == LS_ACK:
        lsas, flags, body_fault = _lsa_headers(b, p, stop, end, version, i, l8, l16, l32)
        valid |= flags
        fault |= body_fault
    c16[FAULT, i] = fault
    c32[VALID, i] = valid
    return neighbors, lsas


@kernel("(u1[::1], i8[::1], i8[::1], i8[::1], u1[::1], u8[::1], u8[::1], u8[::1], u8[::1], "
        "u1[:, ::1], u2[:, ::1], u4[:, ::1], u8[:, ::1], u1[:, ::1], u2[:, ::1], u4[:, ::1], u8[:, ::1], "
        "u1[:, ::1], u2[:, ::1], u4[:, ::1], u8[:, ::1], u2[::1], u2[::1])",
        _nrt=False, nogil=True)
def parse_ospf(data, start, end, claimed, family, src_hi, src_lo, dst_hi, dst_lo, c8, c16, c32, c64,
               n8, n16, n32, n64, l8, l16, l32, l64, neighbor_count, lsa_count):
    """Fill the ospf table's arrays for packets data[start[i]:end[i]] (claimed[i]: their end per IP)."""
    for i in range(start.shape[0]):
        neighbor_count[i], lsa_count[i] = _packet(data, start[i], end[i], claimed[i] - start[i], family[i],
                                                  src_hi[i], src_lo[i], dst_hi[i], dst_lo[i], i, c8, c16, c32,
                                                  n32, l8, l16, l32)


def _candidates(batch) -> np.ndarray:
    return candidate_rows(batch, batch["proto"] == PROTO_OSPF)


def _parse(batch, rows, groups, child_groups, counts) -> None:
    start, end, claimed = message_bounds(batch, rows, "l4_off")
    parse_ospf(np.ascontiguousarray(batch.data, dtype=np.uint8), start, end, claimed, *ip_endpoints(batch, rows),
               *groups, *child_groups[NEIGHBORS.name], *child_groups[LSAS.name], counts[NEIGHBORS.name],
               counts[LSAS.name])


SPEC = Spec("ospf", __doc__.splitlines()[0], FIELDS, _candidates, _parse, (NEIGHBORS, LSAS))

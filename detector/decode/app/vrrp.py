"""The `vrrp` table: VRRP advertisements (v2 RFC 3768, v3 RFC 5798) and CARP, IP protocol 112.

One entry per message, its virtual addresses in the child table `vrrp_addr`
(at most `MAX_ADDRESSES` per message). CARP (OpenBSD's Common Address
Redundancy Protocol) shares the protocol number; a message is read as CARP
the way Wireshark tells them apart (epan/dissectors/packet-carp.c
`test_carp_packet`): at least 36 bytes, version 2, type 1 (advertisement),
and 7 in the byte where VRRP counts its addresses and CARP has its
authentication length (7 words: a 20-byte SHA-1 HMAC and a 64-bit counter).

The checksum is verified when the whole message was captured: over the
message for VRRPv2 and CARP, over an IPv4 or IPv6 pseudo-header and the
message for VRRPv3 (RFC 5798 section 5.2.8). VRRPv3 over IPv4 is summed the
ways senders do it, and `checksum_form` says which one verified: as the
RFC says; over the message alone, as in VRRPv2 (several vendors do; it is
Wireshark's packet-vrrp.c preference "Calculate V3 checksum as in V2 for
IPv4 packets", v3_checksum_as_in_v2); or, in a unicast advertisement, with
the group 224.0.0.18 in the pseudo-header in place of the destination
(keepalived 1.3.6 and before; its `old_unicast_checksum`).

`fault` says why a message is malformed by its own bytes (FAULTS, one bit
each; 0: nothing wrong in what was captured): judged against the length
the IP header gives it and the fields captured, never against the capture's
end, so a message cut by the snapshot length is not malformed for being cut.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ...cpu import kernel
from ..read import u8, u16
from .checksum import fold, halves_sum, sum16
from .table import (
    IPV4_MAPPED,
    MORE,
    TRUNCATED,
    Child,
    Field,
    Layout,
    Spec,
    candidate_rows,
    ip_endpoints,
    message_bounds,
    with_valid,
)

PROTO_VRRP = 112              # IANA; CARP uses it too
GROUP_V4 = 0xE0000012         # 224.0.0.18, RFC 5798 section 5.1.1.2
MAX_ADDRESSES = 16            # per message; the rest is flagged MORE
HEADER_BYTES = 8              # RFC 3768 section 5.1, RFC 5798 section 5.1
AUTH_DATA_BYTES = 8           # RFC 3768 section 5.3.10: after the addresses (v2)
CARP_BYTES = 36               # version/type .. SHA-1 HMAC (OpenBSD netinet/ip_carp.h struct carp_header)
CARP_AUTHLEN = 7              # carp_authlen: 7 32-bit words
CARP_VERSION = 2
ADVERTISEMENT = 1             # the one VRRP (and CARP) message type
CENTISECONDS = 100

# validity bits
B_VERSION = 1 << 0
B_VRID = 1 << 1
B_PRIORITY = 1 << 2
B_ADDR_COUNT = 1 << 3
B_AUTH_TYPE = 1 << 4
B_ADVER_INT = 1 << 5
B_CHECKSUM = 1 << 6
B_CHECKSUM_OK = 1 << 7
B_CARP = 1 << 8
B_ADDR = 1 << 0               # of vrrp_addr

# which sum a checksum verified as (checksum_form)
CHECKSUM_NONE, CHECKSUM_RFC, CHECKSUM_AS_V2, CHECKSUM_GROUP_PSEUDO = 0, 1, 2, 3
CHECKSUM_FORMS = {
    CHECKSUM_RFC: "as RFC 3768/5798 say (VRRPv3 over the IP pseudo-header)",
    CHECKSUM_AS_V2: "without the IPv4 pseudo-header, as in VRRPv2 (Wireshark's v3_checksum_as_in_v2)",
    CHECKSUM_GROUP_PSEUDO: "over a pseudo-header naming 224.0.0.18 in a unicast advertisement (keepalived 1.3.6 "
                           "and before)",
}

# why a message is malformed (bits of `fault`), worded as Wireshark's expert information would
F_EMPTY, F_SHORT, F_VERSION, F_TYPE, F_PAST_LENGTH, F_NO_ADDRESS, F_CHECKSUM = (1 << k for k in range(7))
FAULTS = {
    F_EMPTY: "empty: no VRRP byte after the IP header",
    F_SHORT: f"shorter than the {HEADER_BYTES}-byte VRRP header",
    F_VERSION: "unknown version (neither 2 nor 3)",
    F_TYPE: "unknown type (not 1, advertisement)",
    F_PAST_LENGTH: "declares more addresses (and VRRPv2 authentication data) than its IP length holds",
    F_NO_ADDRESS: "declares no virtual address",
    F_CHECKSUM: "bad checksum",
}

FIELDS = {
    "version": Field(np.uint8, B_VERSION, "protocol version (2 or 3; CARP: 2)"),
    "type": Field(np.uint8, B_VERSION, "message type (1: advertisement)"),
    "carp": Field(np.uint8, 0, "1 when the message is CARP, not VRRP"),
    "length": Field(np.uint16, 0, "message length per the IP header, bytes"),
    "vrid": Field(np.uint8, B_VRID, "virtual router id (CARP: vhid)"),
    "priority": Field(np.uint8, B_PRIORITY, "priority, 0-255 (255: the address owner; 0: the master resigns)"),
    "addr_count": Field(np.uint8, B_ADDR_COUNT, "number of virtual addresses the message declares"),
    "auth_type": Field(np.uint8, B_AUTH_TYPE, "VRRPv2 authentication type (0 none, 1 simple text, 2 IP AH)"),
    "adver_int": Field(np.uint16, B_ADVER_INT,
                       "advertisement interval, centiseconds (VRRPv2: whole seconds times 100; "
                       "CARP: advbase + advskew/256 s)"),
    "checksum": Field(np.uint16, B_CHECKSUM, "checksum as sent"),
    "checksum_ok": Field(np.uint8, B_CHECKSUM_OK, "1 when the checksum verifies (whole message captured)"),
    "checksum_form": Field(np.uint8, B_CHECKSUM_OK, "which sum the checksum verified as (CHECKSUM_FORMS: 1 as the "
                                                    "RFCs say, 2 VRRPv3 without the pseudo-header, 3 VRRPv3 with "
                                                    "the group in a unicast one's pseudo-header; 0 none)"),
    "fault": Field(np.uint16, 0, "why the message is malformed by its own bytes (FAULTS bits; 0: nothing wrong "
                                 "in what was captured)"),
    "carp_advskew": Field(np.uint8, B_CARP, "CARP advskew (lower is preferred), 1/256 s"),
    "carp_advbase": Field(np.uint8, B_CARP, "CARP advbase, seconds"),
    "carp_demote": Field(np.uint8, B_CARP, "CARP demotion counter"),
}
ADDR_FIELDS = {
    "ip_hi": Field(np.uint64, B_ADDR, "virtual address, high half (the schema's IPv4-mapped 128 bits)", "ip"),
    "ip_lo": Field(np.uint64, B_ADDR, "virtual address, low half", "ip"),
}
ADDRESSES = Child("vrrp_addr", ADDR_FIELDS, MAX_ADDRESSES, "the virtual addresses of a VRRP message")

_ROW = Layout(with_valid(FIELDS)).row
VERSION, TYPE, CARP, LENGTH = _ROW["version"], _ROW["type"], _ROW["carp"], _ROW["length"]
VRID, PRIORITY, ADDR_COUNT, AUTH_TYPE = _ROW["vrid"], _ROW["priority"], _ROW["addr_count"], _ROW["auth_type"]
ADVER_INT, CHECKSUM, CHECKSUM_OK, VALID = _ROW["adver_int"], _ROW["checksum"], _ROW["checksum_ok"], _ROW["valid"]
CHECKSUM_FORM, FAULT = _ROW["checksum_form"], _ROW["fault"]
ADVSKEW, ADVBASE, DEMOTE = _ROW["carp_advskew"], _ROW["carp_advbase"], _ROW["carp_demote"]
_CHILD_ROW = ADDRESSES.layout.row
ADDR_HI, ADDR_LO, ADDR_VALID = _CHILD_ROW["ip_hi"], _CHILD_ROW["ip_lo"], _CHILD_ROW["valid"]

@njit(_nrt=False)
def _checksum_form(b, s, end, length, version, family, src_hi, src_lo, dst_hi, dst_lo):
    """Which sum the whole message b[s:end] verifies as (CHECKSUM_FORMS); CHECKSUM_NONE when none does."""
    plain = sum16(b, s, end)
    if version != 3:
        return CHECKSUM_RFC if fold(plain) == 0xFFFF else CHECKSUM_NONE
    tail = np.uint64(PROTO_VRRP) + np.uint64(length & 0xFFFF) + np.uint64(length >> 16)
    source = halves_sum(src_hi, src_lo, family)
    if fold(plain + source + halves_sum(dst_hi, dst_lo, family) + tail) == 0xFFFF:
        return CHECKSUM_RFC
    if family == 4:
        if fold(plain) == 0xFFFF:
            return CHECKSUM_AS_V2
        group = halves_sum(np.uint64(0), IPV4_MAPPED | np.uint64(GROUP_V4), 4)
        if fold(plain + source + group + tail) == 0xFFFF:
            return CHECKSUM_GROUP_PSEUDO
    return CHECKSUM_NONE


@njit(_nrt=False)
def _verify(b, s, end, length, version, family, src_hi, src_lo, dst_hi, dst_lo, i, c8):
    """Verify the checksum of a whole message: its form and checksum_ok written; returns F_CHECKSUM or 0."""
    form = _checksum_form(b, s, end, length, version, family, src_hi, src_lo, dst_hi, dst_lo)
    c8[CHECKSUM_FORM, i] = form
    c8[CHECKSUM_OK, i] = form == CHECKSUM_RFC
    return F_CHECKSUM if form == CHECKSUM_NONE else 0


@njit(_nrt=False)
def _message(b, s, end, length, family, src_hi, src_lo, dst_hi, dst_lo, i, c8, c16, c32, c64, k8, k16, k32, k64):
    """Parse one message b[s:end] (`length` bytes per the IP header); returns the addresses it listed."""
    c16[LENGTH, i] = length
    if length == 0:
        c16[FAULT, i] = F_EMPTY
    if end - s < 1:
        c32[VALID, i] = TRUNCATED
        if length > 0 and length < HEADER_BYTES:
            c16[FAULT, i] = F_SHORT
        return 0
    version = u8(b, s) >> 4
    kind = u8(b, s) & 0xF
    c8[VERSION, i] = version
    c8[TYPE, i] = kind
    valid = np.uint32(B_VERSION)
    whole = end - s == length
    if (length >= CARP_BYTES and end - s >= 4 and version == CARP_VERSION and kind == ADVERTISEMENT
            and u8(b, s + 3) == CARP_AUTHLEN):
        c8[CARP, i] = 1
        if end - s < CARP_BYTES:
            c32[VALID, i] = valid | TRUNCATED
            return 0
        c8[VRID, i] = u8(b, s + 1)
        c8[ADVSKEW, i] = u8(b, s + 2)
        c8[DEMOTE, i] = u8(b, s + 4)
        c8[ADVBASE, i] = u8(b, s + 5)
        c16[ADVER_INT, i] = u8(b, s + 5) * CENTISECONDS + (u8(b, s + 2) * CENTISECONDS) // 256
        c16[CHECKSUM, i] = u16(b, s + 6)
        valid |= B_VRID | B_CARP | B_ADVER_INT | B_CHECKSUM
        if whole:
            c16[FAULT, i] = _verify(b, s, end, length, version, family, src_hi, src_lo, dst_hi, dst_lo, i, c8)
            valid |= B_CHECKSUM_OK
        c32[VALID, i] = valid
        return 0
    fault = F_SHORT if length < HEADER_BYTES else 0
    if version != 2 and version != 3:
        c16[FAULT, i] = fault | F_VERSION
        c32[VALID, i] = valid
        return 0
    if kind != ADVERTISEMENT:
        fault |= F_TYPE
    if end - s < HEADER_BYTES:
        c16[FAULT, i] = fault
        c32[VALID, i] = valid | TRUNCATED
        return 0
    c8[VRID, i] = u8(b, s + 1)
    c8[PRIORITY, i] = u8(b, s + 2)
    count = u8(b, s + 3)
    c8[ADDR_COUNT, i] = count
    c16[CHECKSUM, i] = u16(b, s + 6)
    valid |= B_VRID | B_PRIORITY | B_ADDR_COUNT | B_CHECKSUM | B_ADVER_INT
    if version == 2:
        c8[AUTH_TYPE, i] = u8(b, s + 4)
        c16[ADVER_INT, i] = u8(b, s + 5) * CENTISECONDS
        valid |= B_AUTH_TYPE
        width = 4
    else:
        c16[ADVER_INT, i] = u16(b, s + 4) & 0x0FFF
        width = 4 if family == 4 else 16
    if count == 0:
        fault |= F_NO_ADDRESS
    # RFC 3768 section 5.3.10: 8 bytes of authentication data follow a VRRPv2 message's addresses
    if HEADER_BYTES + count * width + (AUTH_DATA_BYTES if version == 2 else 0) > length:
        fault |= F_PAST_LENGTH
    # the addresses the message declares, as far as they were captured and fit its length
    listed = 0
    p = s + HEADER_BYTES
    for k in range(count):
        if p + width > end or p + width > s + length:
            valid |= TRUNCATED
            break
        if k >= MAX_ADDRESSES:
            valid |= MORE
            break
        slot = i * MAX_ADDRESSES + k
        if width == 4:
            k64[ADDR_HI, slot] = 0
            k64[ADDR_LO, slot] = IPV4_MAPPED | np.uint64(u16(b, p) << 16 | u16(b, p + 2))
        else:
            hi = np.uint64(0)
            lo = np.uint64(0)
            for j in range(8):
                hi = (hi << np.uint64(8)) | np.uint64(u8(b, p + j))
                lo = (lo << np.uint64(8)) | np.uint64(u8(b, p + 8 + j))
            k64[ADDR_HI, slot] = hi
            k64[ADDR_LO, slot] = lo
        k32[ADDR_VALID, slot] = B_ADDR
        listed += 1
        p += width
    if version == 2 and not valid & TRUNCATED and p + AUTH_DATA_BYTES > s + length:
        valid |= TRUNCATED       # RFC 3768 section 5.3.10: 8 bytes of authentication data follow
    if whole:
        fault |= _verify(b, s, end, length, version, family, src_hi, src_lo, dst_hi, dst_lo, i, c8)
        valid |= B_CHECKSUM_OK
    c16[FAULT, i] = fault
    c32[VALID, i] = valid
    return listed


@kernel("(u1[::1], i8[::1], i8[::1], i8[::1], u1[::1], u8[::1], u8[::1], u8[::1], u8[::1], "
        "u1[:, ::1], u2[:, ::1], u4[:, ::1], u8[:, ::1], u1[:, ::1], u2[:, ::1], u4[:, ::1], u8[:, ::1], u2[::1])",
        _nrt=False, nogil=True)
def parse_vrrp(data, start, end, claimed, family, src_hi, src_lo, dst_hi, dst_lo, c8, c16, c32, c64,
               k8, k16, k32, k64, count):
    """Fill the vrrp table's arrays for messages data[start[i]:end[i]] (claimed[i]: their end per IP)."""
    for i in range(start.shape[0]):
        count[i] = _message(data, start[i], end[i], claimed[i] - start[i], family[i], src_hi[i], src_lo[i],
                            dst_hi[i], dst_lo[i], i, c8, c16, c32, c64, k8, k16, k32, k64)


def _candidates(batch) -> np.ndarray:
    return candidate_rows(batch, batch["proto"] == PROTO_VRRP)


def _parse(batch, rows, groups, child_groups, counts) -> None:
    start, end, claimed = message_bounds(batch, rows, "l4_off")
    parse_vrrp(np.ascontiguousarray(batch.data, dtype=np.uint8), start, end, claimed, *ip_endpoints(batch, rows),
               *groups, *child_groups[ADDRESSES.name], counts[ADDRESSES.name])


SPEC = Spec("vrrp", __doc__.splitlines()[0], FIELDS, _candidates, _parse, (ADDRESSES,))

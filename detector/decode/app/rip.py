"""The `rip` table: RIPv1 (RFC 1058) and RIPv2 (RFC 2453) on UDP 520, RIPng (RFC 2080) on UDP 521.

One entry per UDP message to or from a RIP port, its route entries in the
child table `rip_entry` (at most `MAX_ENTRIES` per message, the rest flagged
MORE). The port says how a message is laid out: a 4-byte header (command
1 request / 2 response, version, two bytes that are zero in RIPv1 and RIPng)
and 20-byte entries. A RIP entry carries an address family (2: IP; 0 in a
whole-table request), a route tag (RIPv2), an address, a mask and a next
hop (RIPv2) and a 32-bit metric; a RIPng entry a prefix, a route tag, a
prefix length and a metric, or, with metric 0xFF, the next hop of the
entries after it (RFC 2080 section 2.1.1).

A RIPv2 message may open with an authentication entry (family 0xFFFF, RFC
2453 section 4.1), which is kept in the message's fields, not as an entry: a
password (type 2: only whether one is there is kept, never the password) or
cryptographic authentication (type 3: keyed MD5 of RFC 2082, HMAC-SHA of RFC
4822) whose "packet length" says where the entries end and a trailer begins:
4 bytes (0xFFFF, type 1) and a digest of 16, 20, 32, 48 or 64 bytes.

`verdict` is what a receiver's checks make of the message (VERDICTS), the
first failure in the order a RIP speaker meets them: the payload (empty,
zero-filled), the IP version against the port, the authentication entry and
trailer, the length (a header plus whole entries, at most 25 in RIPv1/v2),
the header (command, version, must-be-zero bytes), then each entry (address
family, RIPv1's must-be-zero bytes, RIPng's prefix length, a response's
metric 1-16). It reads only captured bytes: a message cut by the snapshot
length is judged on what is there.

`fault` (FAULTS, one bit each; 0: nothing wrong in what was captured) is
every check a receiver makes of a RIP message that failed, not only the
first: the verdict's, and those it makes of each route of a response (RFC
2453 section 3.9.2, FRRouting ripd `rip_response_process`, ripngd
`ripng_response_process`): a destination no router installs (IPv4 net 0
but the default route, net 127, class D and E; IPv6 multicast, link-local,
loopback) and, in RIPv2, address bits outside the mask; and a UDP length
field other than the IP header's (the receiver's stack trims the datagram
to the shorter length, or drops it). Each listed entry has the bits of its
own faults in `rip_entry.fault`. A RIP port over the other IP version is no
RIP message and has none.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ...cpu import kernel
from ...schema import L_IP6, L_UDP
from ..read import be64, u8, u16, u32
from .table import (
    IPV4_MAPPED,
    MORE,
    TRUNCATED,
    Child,
    Field,
    Layout,
    Spec,
    candidate_rows,
    message_bounds,
    service_port,
    udp_length_differs,
    with_valid,
)

RIP_PORT = 520                # RFC 2453
RIPNG_PORT = 521              # RFC 2080
HEADER_BYTES = 4              # RFC 2453 section 4, RFC 2080 section 2.1
ENTRY_BYTES = 20
MAX_ENTRIES = 25              # RFC 2453 section 4: a message carries 1 to 25 entries; the table's cap too
REQUEST, RESPONSE = 1, 2
AFI_UNSPECIFIED = 0           # RFC 2453 section 3.9.1: a whole-table request's one entry
AFI_IP = 2                    # RFC 1058
AFI_AUTH = 0xFFFF             # RFC 2453 section 4.1
AUTH_TRAILER = 1              # RFC 2082 section 3.2: authentication type of the trailer
AUTH_PASSWORD = 2             # RFC 2453 section 4.1
AUTH_CRYPTO = 3               # RFC 2082 section 3.2, RFC 4822 section 2
# Bytes of a cryptographic trailer: 4 (0xFFFF, type 1) + the digest of keyed
# MD5 (16, RFC 2082) or HMAC-SHA1/256/384/512 (20/32/48/64, RFC 4822 sec. 2.1)
AUTH_TRAILER_BYTES = (20, 24, 36, 52, 68)
INFINITY = 16                 # RFC 2453 section 3.6: metric 16 means unreachable
RIPNG_NEXT_HOP_METRIC = 0xFF  # RFC 2080 section 2.1.1
MAX_PREFIX_LEN_V6 = 128

# where the message's layout comes from: the port, and whether the IP version is the one RIP uses there
KIND_RIP, KIND_RIPNG, KIND_WRONG_FAMILY = 0, 1, 2

# Verdicts on a message: code -> what a receiver found wrong
VALID, EMPTY, ZERO_FILLED, BAD_LENGTH, BAD_COMMAND, BAD_VERSION, NONZERO_MBZ, BAD_AFI, \
    BAD_METRIC, BAD_PREFIX_LEN, WRONG_FAMILY, BAD_AUTH = range(12)
VERDICTS = {
    VALID: "well-formed",
    EMPTY: "empty payload",
    ZERO_FILLED: "zero-filled payload",
    BAD_LENGTH: "length is not a 4-byte header plus 20-byte entries",
    BAD_COMMAND: "command is neither request (1) nor response (2)",
    BAD_VERSION: "unknown version",
    NONZERO_MBZ: "must-be-zero field set",
    BAD_AFI: "entry with an address family other than IP",
    BAD_METRIC: "metric outside 1-16",
    BAD_PREFIX_LEN: "prefix length above 128",
    WRONG_FAMILY: "RIP port over the other IP version (RIP is IPv4 on 520, RIPng IPv6 on 521)",
    BAD_AUTH: "authentication entry or trailer that does not match RFC 2453/2082/4822",
}
UNDECIDED = 0xFF              # the kernel's verdict before a check has failed

# why a message is malformed (bits of `fault`, and of an entry's `fault` for the entry checks), worded as
# Wireshark's expert information would
F_EMPTY, F_ZERO_FILLED, F_LENGTH, F_COMMAND, F_VERSION, F_MBZ, F_AUTH, F_AFI, F_METRIC, F_PREFIX_LEN, \
    F_DESTINATION, F_HOST_BITS, F_UDP_LENGTH = (1 << k for k in range(13))
FAULTS = {
    F_EMPTY: "empty payload",
    F_ZERO_FILLED: "zero-filled payload",
    F_LENGTH: "length is not a 4-byte header plus 1 to 25 20-byte entries",
    F_COMMAND: "unknown command (neither request 1 nor response 2)",
    F_VERSION: "unknown version",
    F_MBZ: "must-be-zero field set",
    F_AUTH: "authentication entry or trailer that does not match RFC 2453/2082/4822",
    F_AFI: "entry with an address family other than IP",
    F_METRIC: "route metric outside 1-16",
    F_PREFIX_LEN: "route prefix length above 128",
    F_DESTINATION: "route to a destination no router installs (net 0 but the default, 127, multicast, class E; "
                   "IPv6 multicast, link-local, loopback)",
    F_HOST_BITS: "route address with bits outside its mask",
    F_UDP_LENGTH: "UDP length field differs from the IP length (the stack trims or drops the datagram)",
}
ENTRY_FAULTS = F_AFI | F_METRIC | F_PREFIX_LEN | F_DESTINATION | F_HOST_BITS
# faults for which a receiver drops the whole message, not only an entry (FRRouting ripd rip_read: the
# datagram's size, the version, the command, the authentication); the entry checks drop one route each
WHOLE_MESSAGE_FAULTS = F_EMPTY | F_ZERO_FILLED | F_LENGTH | F_COMMAND | F_VERSION | F_AUTH | F_UDP_LENGTH

# validity bits of rip
B_HEADER = 1 << 0
B_AUTH = 1 << 1
B_PASSWORD = 1 << 2
B_PACKET_LENGTH = 1 << 3
B_CRYPTO = 1 << 4
# of rip_entry
B_AFI = 1 << 0
B_TAG = 1 << 1
B_PREFIX = 1 << 2
B_MASK = 1 << 3
B_PREFIX_LEN = 1 << 4
B_NEXT_HOP = 1 << 5
B_METRIC = 1 << 6

FIELDS = {
    "kind": Field(np.uint8, 0, "layout: 0 RIP (IPv4, port 520), 1 RIPng (IPv6, port 521), 2 a RIP port over the "
                               "other IP version (read as the port's layout)"),
    "port": Field(np.uint16, 0, "the RIP port (520 or 521): the destination port if it is one, else the source port"),
    "length": Field(np.uint32, 0, "message length: the UDP payload per the IP header, bytes"),
    "verdict": Field(np.uint8, 0, "what a receiver's checks make of the message (VERDICTS; 0 well-formed)"),
    "fault": Field(np.uint32, 0, "every check the message fails (FAULTS bits; 0: nothing wrong in what was "
                                 "captured), its entries' included"),
    "command": Field(np.uint8, B_HEADER, "command (1 request, 2 response)"),
    "version": Field(np.uint8, B_HEADER, "version (RIP 1 or 2, RIPng 1)"),
    "mbz": Field(np.uint16, B_HEADER, "header bytes 2-3: zero in RIPv1 and RIPng, unused in RIPv2"),
    "entries": Field(np.uint16, B_HEADER, "whole 20-byte entries the message's length holds before any "
                                          "authentication trailer, the authentication entry included"),
    "auth_type": Field(np.uint16, B_AUTH, "RIPv2 authentication type (2 password, 3 cryptographic)"),
    "auth_password": Field(np.uint8, B_PASSWORD, "type 2: 1 when the password field holds a non-zero byte "
                                                 "(the password is not kept)"),
    "auth_packet_length": Field(np.uint16, B_PACKET_LENGTH, "type 3: header and entries before the trailer, bytes"),
    "auth_trailer_length": Field(np.uint32, B_PACKET_LENGTH, "type 3: bytes after the packet length (20, 24, 36, "
                                                             "52 or 68 when well-formed); 0 when the packet "
                                                             "length runs past the message"),
    "auth_key_id": Field(np.uint8, B_CRYPTO, "type 3: key id"),
    "auth_data_len": Field(np.uint8, B_CRYPTO, "type 3: authentication data length as sent, bytes"),
    "auth_seq": Field(np.uint32, B_CRYPTO, "type 3: sequence number"),
}
ENTRY_FIELDS = {
    "afi": Field(np.uint16, B_AFI, "address family (2 IP, 0 a whole-table request); RIP only"),
    "route_tag": Field(np.uint16, B_TAG, "route tag (RIPv2, RIPng)"),
    "prefix_hi": Field(np.uint64, B_PREFIX, "destination, high half (the schema's 128 bits, IPv4 as IPv4-mapped)"),
    "prefix_lo": Field(np.uint64, B_PREFIX, "destination, low half"),
    "mask": Field(np.uint32, B_MASK, "subnet mask (RIPv2)"),
    "prefix_len": Field(np.uint8, B_PREFIX_LEN, "prefix length (RIPng as sent; RIPv2 from a contiguous mask)"),
    "next_hop_hi": Field(np.uint64, B_NEXT_HOP, "next hop, high half (RIPv2; RIPng: the next-hop entry's address, "
                                                "on it and on the entries after it)"),
    "next_hop_lo": Field(np.uint64, B_NEXT_HOP, "next hop, low half"),
    "metric": Field(np.uint32, B_METRIC, "metric as sent (1-15 reachable, 16 unreachable; RIPng next hop 0xFF)"),
    "next_hop_entry": Field(np.uint8, 0, "1 for a RIPng next-hop entry (metric 0xFF), which is no route"),
    "fault": Field(np.uint16, 0, "the checks of a route entry it fails (FAULTS bits of ENTRY_FAULTS; 0 none)"),
}
ENTRIES = Child("rip_entry", ENTRY_FIELDS, MAX_ENTRIES, "the route entries of a RIP message")

_ROW = Layout(with_valid(FIELDS)).row
KIND, PORT, LENGTH, VERDICT, VALID_ROW = _ROW["kind"], _ROW["port"], _ROW["length"], _ROW["verdict"], _ROW["valid"]
FAULT = _ROW["fault"]
COMMAND, VERSION, MBZ, ENTRY_COUNT = _ROW["command"], _ROW["version"], _ROW["mbz"], _ROW["entries"]
AUTH_TYPE, PASSWORD, PACKET_LENGTH = _ROW["auth_type"], _ROW["auth_password"], _ROW["auth_packet_length"]
TRAILER_LENGTH, KEY_ID, DATA_LEN, SEQ = (_ROW["auth_trailer_length"], _ROW["auth_key_id"], _ROW["auth_data_len"],
                                         _ROW["auth_seq"])
_ENTRY_ROW = ENTRIES.layout.row
AFI, TAG, PREFIX_HI, PREFIX_LO = _ENTRY_ROW["afi"], _ENTRY_ROW["route_tag"], _ENTRY_ROW["prefix_hi"], \
    _ENTRY_ROW["prefix_lo"]
MASK, PREFIX_LEN, HOP_HI, HOP_LO = _ENTRY_ROW["mask"], _ENTRY_ROW["prefix_len"], _ENTRY_ROW["next_hop_hi"], \
    _ENTRY_ROW["next_hop_lo"]
METRIC, HOP_ENTRY, ENTRY_VALID = _ENTRY_ROW["metric"], _ENTRY_ROW["next_hop_entry"], _ENTRY_ROW["valid"]
ENTRY_FAULT = _ENTRY_ROW["fault"]


# entry offsets: RIP (RFC 2453 section 4) and RIPng (RFC 2080 section 2.1)
E_TAG, E_ADDRESS, E_MASK, E_NEXT_HOP, E_METRIC = 2, 4, 8, 12, 16
E6_TAG, E6_PREFIX_LEN, E6_METRIC = 16, 18, 19
# the authentication entry (RFC 2082 section 3.2): type, then packet length, key id, data length, sequence
A_TYPE, A_PACKET_LENGTH, A_KEY_ID, A_DATA_LEN, A_SEQ = 2, 4, 6, 7, 8
A_PASSWORD = 4                # type 2: 16 bytes of password


@njit(_nrt=False)
def _mask_length(mask):
    """The prefix length of a contiguous mask, -1 for another."""
    ones = 0
    while ones < 32 and (mask >> (31 - ones)) & 1:
        ones += 1
    rest = mask & ((1 << (32 - ones)) - 1) if ones < 32 else 0
    return ones if rest == 0 else -1


@njit(_nrt=False)
def _zero_filled(b, s, end):
    for p in range(s, end):
        if u8(b, p) != 0:
            return False
    return end > s


@njit(_nrt=False)
def _trailer_fits(b, s, end, length, body):
    """A cryptographic trailer of a known size at `body`, opening with 0xFFFF and type 1 where captured."""
    fits = False
    for size in AUTH_TRAILER_BYTES:
        if length - body == size:
            fits = True
    if fits and s + body + 4 <= end:
        fits = u16(b, s + body) == AFI_AUTH and u16(b, s + body + 2) == AUTH_TRAILER
    return fits


@njit(_nrt=False)
def _rip_entry(b, at, version, slot, k8, k16, k32, k64):
    """Fill the slot of a RIPv1/v2 entry: what its address family lays out."""
    afi = u16(b, at)
    k16[AFI, slot] = afi
    valid = np.uint32(B_AFI)
    if afi == AFI_IP or afi == AFI_UNSPECIFIED:
        k32[METRIC, slot] = u32(b, at + E_METRIC)
        valid |= B_METRIC
        if version == 2:
            k16[TAG, slot] = u16(b, at + E_TAG)
            valid |= B_TAG
    if afi == AFI_IP:
        k64[PREFIX_LO, slot] = IPV4_MAPPED | np.uint64(u32(b, at + E_ADDRESS))
        valid |= B_PREFIX
        if version == 2:
            mask = u32(b, at + E_MASK)
            k32[MASK, slot] = mask
            k64[HOP_LO, slot] = IPV4_MAPPED | np.uint64(u32(b, at + E_NEXT_HOP))
            valid |= B_MASK | B_NEXT_HOP
            plen = _mask_length(mask)
            if plen >= 0:
                k8[PREFIX_LEN, slot] = plen
                valid |= B_PREFIX_LEN
    k32[ENTRY_VALID, slot] = valid


@njit(_nrt=False)
def _unroutable_v4(address):
    """An IPv4 destination no router installs: net 0 but the default route, net 127, class D and E."""
    first = address >> 24
    return first == 127 or (first == 0 and address != 0) or first >= 224


@njit(_nrt=False)
def _unroutable_v6(hi, lo):
    """An IPv6 destination no router installs: multicast, link-local, the loopback address."""
    return ((hi >> np.uint64(56)) == np.uint64(0xFF) or (hi & np.uint64(0xFFC0 << 48)) == np.uint64(0xFE80 << 48)
            or (hi == np.uint64(0) and lo == np.uint64(1)))


@njit(_nrt=False)
def _message(b, s, end, length, kind, port, i, c8, c16, c32, c64, k8, k16, k32, k64):
    """Parse one message b[s:end] (`length` bytes per the IP header); returns the entries it listed."""
    c8[KIND, i] = kind
    c16[PORT, i] = port
    c32[LENGTH, i] = length
    avail = end - s
    valid = np.uint32(TRUNCATED) if avail < length else np.uint32(0)
    verdict = UNDECIDED
    fault = 0
    if length == 0:
        verdict = EMPTY
        fault = F_EMPTY
    elif _zero_filled(b, s, end):
        verdict = ZERO_FILLED
        fault = F_ZERO_FILLED
    elif kind == KIND_WRONG_FAMILY:
        verdict = WRONG_FAMILY
    # the checks below judge a message that is RIP at all: not empty, zero-filled or over the other IP version
    judged = verdict == UNDECIDED
    ng = port == RIPNG_PORT
    # a RIPv2 message opening with an authentication entry (RFC 2453 section 4.1)
    auth = not ng and avail >= HEADER_BYTES + A_TYPE + 2 and u8(b, s + 1) == 2 and u16(b, s + HEADER_BYTES) == AFI_AUTH
    body = length
    # where the entries end is known when the capture shows whether a cryptographic trailer follows them
    body_known = ng or avail >= length or avail >= HEADER_BYTES + A_TYPE + 2
    if auth:
        a = s + HEADER_BYTES
        auth_type = u16(b, a + A_TYPE)
        c16[AUTH_TYPE, i] = auth_type
        valid |= B_AUTH
        if auth_type == AUTH_PASSWORD:
            if a + ENTRY_BYTES <= end:
                c8[PASSWORD, i] = 0 if _zero_filled(b, a + A_PASSWORD, a + ENTRY_BYTES) else 1
                valid |= B_PASSWORD
        elif auth_type == AUTH_CRYPTO:
            if a + A_KEY_ID > end:
                body_known = False
                if verdict == UNDECIDED:
                    verdict = VALID       # cut by the snapshot length before the packet length field
            else:
                packet_length = u16(b, a + A_PACKET_LENGTH)
                c16[PACKET_LENGTH, i] = packet_length
                c32[TRAILER_LENGTH, i] = length - packet_length if packet_length <= length else 0
                valid |= B_PACKET_LENGTH
                if not _trailer_fits(b, s, end, length, packet_length):
                    if verdict == UNDECIDED:
                        verdict = BAD_AUTH
                    if judged:
                        fault |= F_AUTH
                if packet_length > length:
                    valid |= TRUNCATED    # the packet length runs past the message
                else:
                    body = packet_length
                if a + A_SEQ + 4 <= end:
                    c8[KEY_ID, i] = u8(b, a + A_KEY_ID)
                    c8[DATA_LEN, i] = u8(b, a + A_DATA_LEN)
                    c32[SEQ, i] = u32(b, a + A_SEQ)
                    valid |= B_CRYPTO
        else:
            if verdict == UNDECIDED:
                verdict = BAD_AUTH
            if judged:
                fault |= F_AUTH
    if body < HEADER_BYTES + ENTRY_BYTES or (body - HEADER_BYTES) % ENTRY_BYTES != 0:
        if verdict == UNDECIDED:
            verdict = BAD_LENGTH
        if judged and body_known:
            fault |= F_LENGTH
    if avail < HEADER_BYTES:
        c32[VALID_ROW, i] = valid
        c8[VERDICT, i] = VALID if verdict == UNDECIDED else verdict   # nothing captured left to judge
        c32[FAULT, i] = fault
        return 0
    command = u8(b, s)
    version = u8(b, s + 1)
    entries = (body - HEADER_BYTES) // ENTRY_BYTES if body >= HEADER_BYTES else 0
    c8[COMMAND, i] = command
    c8[VERSION, i] = version
    c16[MBZ, i] = u16(b, s + 2)
    c16[ENTRY_COUNT, i] = entries
    valid |= B_HEADER
    response = command == RESPONSE
    if command != REQUEST and not response:
        if verdict == UNDECIDED:
            verdict = BAD_COMMAND
        if judged:
            fault |= F_COMMAND
    if ng:
        if version != 1:
            if verdict == UNDECIDED:
                verdict = BAD_VERSION
            if judged:
                fault |= F_VERSION
        if u16(b, s + 2) != 0:
            if verdict == UNDECIDED:
                verdict = NONZERO_MBZ
            if judged:
                fault |= F_MBZ
    else:
        if version != 1 and version != 2:
            if verdict == UNDECIDED:
                verdict = BAD_VERSION
            if judged:
                fault |= F_VERSION
        if version == 1 and u16(b, s + 2) != 0:
            if verdict == UNDECIDED:
                verdict = NONZERO_MBZ
            if judged:
                fault |= F_MBZ
        if entries > MAX_ENTRIES:
            if verdict == UNDECIDED:
                verdict = BAD_LENGTH
            if judged:
                fault |= F_LENGTH
    routes = entries - 1 if auth else entries
    listed = 0
    hop_hi = np.uint64(0)
    hop_lo = np.uint64(0)
    has_hop = False
    for e in range(entries):
        at = s + HEADER_BYTES + e * ENTRY_BYTES
        if at + ENTRY_BYTES > end:
            break                         # the rest was not captured
        if e == 0 and auth:
            continue
        if listed >= MAX_ENTRIES:
            valid |= MORE
            if verdict != UNDECIDED:
                break
        slot = i * MAX_ENTRIES + listed
        keep = listed < MAX_ENTRIES
        entry_fault = 0
        if ng:
            plen = u8(b, at + E6_PREFIX_LEN)
            metric = u8(b, at + E6_METRIC)
            if metric == RIPNG_NEXT_HOP_METRIC:
                hop_hi = be64(b, at)
                hop_lo = be64(b, at + 8)
                has_hop = True
                if keep:
                    k64[HOP_HI, slot] = hop_hi
                    k64[HOP_LO, slot] = hop_lo
                    k32[METRIC, slot] = metric
                    k8[HOP_ENTRY, slot] = 1
                    k32[ENTRY_VALID, slot] = B_NEXT_HOP | B_METRIC
                    listed += 1
                continue
            prefix_hi = be64(b, at)
            prefix_lo = be64(b, at + 8)
            if plen > MAX_PREFIX_LEN_V6:
                entry_fault |= F_PREFIX_LEN
                if verdict == UNDECIDED:
                    verdict = BAD_PREFIX_LEN
            if response and (metric < 1 or metric > INFINITY):
                entry_fault |= F_METRIC
                if verdict == UNDECIDED:
                    verdict = BAD_METRIC
            if response and _unroutable_v6(prefix_hi, prefix_lo):
                entry_fault |= F_DESTINATION
            if keep:
                k64[PREFIX_HI, slot] = prefix_hi
                k64[PREFIX_LO, slot] = prefix_lo
                k16[TAG, slot] = u16(b, at + E6_TAG)
                k8[PREFIX_LEN, slot] = plen
                k32[METRIC, slot] = metric
                k16[ENTRY_FAULT, slot] = entry_fault
                entry_valid = np.uint32(B_PREFIX | B_TAG | B_PREFIX_LEN | B_METRIC)
                if has_hop:
                    k64[HOP_HI, slot] = hop_hi
                    k64[HOP_LO, slot] = hop_lo
                    entry_valid |= B_NEXT_HOP
                k32[ENTRY_VALID, slot] = entry_valid
                listed += 1
            if judged:
                fault |= entry_fault
            continue
        afi = u16(b, at)
        metric = u32(b, at + E_METRIC)
        whole_table = command == REQUEST and routes == 1 and afi == AFI_UNSPECIFIED and metric == INFINITY
        if afi != AFI_IP and not whole_table:
            entry_fault |= F_AFI
            if verdict == UNDECIDED:
                verdict = BAD_AFI
        if version == 1:
            if u16(b, at + E_TAG) != 0 or u32(b, at + E_MASK) != 0 or u32(b, at + E_NEXT_HOP) != 0:
                if verdict == UNDECIDED:
                    verdict = NONZERO_MBZ
                if judged:
                    fault |= F_MBZ
        if response and (metric < 1 or metric > INFINITY):
            entry_fault |= F_METRIC
            if verdict == UNDECIDED:
                verdict = BAD_METRIC
        if response and afi == AFI_IP:
            address = u32(b, at + E_ADDRESS)
            if _unroutable_v4(address):
                entry_fault |= F_DESTINATION
            mask = u32(b, at + E_MASK)
            if version == 2 and mask != 0 and (address & ~mask & 0xFFFFFFFF) != 0:
                entry_fault |= F_HOST_BITS
        if keep:
            _rip_entry(b, at, version, slot, k8, k16, k32, k64)
            k16[ENTRY_FAULT, slot] = entry_fault
            listed += 1
        if judged:
            fault |= entry_fault
    c8[VERDICT, i] = VALID if verdict == UNDECIDED else verdict
    c32[VALID_ROW, i] = valid
    c32[FAULT, i] = fault
    return listed


@kernel("(u1[::1], i8[::1], i8[::1], i8[::1], u1[::1], u2[::1], "
        "u1[:, ::1], u2[:, ::1], u4[:, ::1], u8[:, ::1], u1[:, ::1], u2[:, ::1], u4[:, ::1], u8[:, ::1], u2[::1])",
        _nrt=False, nogil=True)
def parse_rip(data, start, end, claimed, kind, port, c8, c16, c32, c64, k8, k16, k32, k64, count):
    """Fill the rip table's arrays for messages data[start[i]:end[i]] (claimed[i]: their end per IP)."""
    for i in range(start.shape[0]):
        count[i] = _message(data, start[i], end[i], claimed[i] - start[i], kind[i], port[i], i,
                            c8, c16, c32, c64, k8, k16, k32, k64)


def _candidates(batch) -> np.ndarray:
    # every UDP datagram whose header was captured, an empty or lying one too: what is wrong with it is the verdict
    udp = (batch["layers"] & np.uint32(L_UDP)) != 0
    return candidate_rows(batch, udp & (service_port(batch, (RIP_PORT, RIPNG_PORT)) != 0))


def _parse(batch, rows, groups, child_groups, counts) -> None:
    start, end, claimed = message_bounds(batch, rows, "payload_off")
    port = service_port(batch, (RIP_PORT, RIPNG_PORT), rows)
    v6 = (batch["layers"][rows] & np.uint32(L_IP6)) != 0
    kind = np.where(v6 & (port == RIPNG_PORT), KIND_RIPNG,
                    np.where(~v6 & (port == RIP_PORT), KIND_RIP, KIND_WRONG_FAMILY)).astype(np.uint8)
    parse_rip(np.ascontiguousarray(batch.data, dtype=np.uint8), start, end, claimed, kind, port,
              *groups, *child_groups[ENTRIES.name], counts[ENTRIES.name])
    fault = Layout(with_valid(FIELDS)).columns(groups)["fault"]
    fault |= np.where(udp_length_differs(batch, rows) & (kind != KIND_WRONG_FAMILY), F_UDP_LENGTH, 0).astype(np.uint32)


SPEC = Spec("rip", __doc__.splitlines()[0], FIELDS, _candidates, _parse, (ENTRIES,))

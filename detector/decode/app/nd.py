"""The `nd` table: ICMPv6 Neighbor Discovery (RFC 4861), types 133-137, over IPv6.

One entry per message: Router Solicitation (133), Router Advertisement
(134), Neighbor Solicitation (135), Neighbor Advertisement (136), Redirect
(137). The ICMPv6 header (type, code, checksum as sent and whether it
verifies over the IPv6 pseudo-header, RFC 4443 section 2.3, when the whole
message was captured), the carrying IPv6 header's hop limit (a receiver
discards ND with another hop limit than 255: RFC 4861 sections 6.1, 7.1,
8.1), and the fields of the message's type: a Router Advertisement's current
hop limit, M and O flags, default router preference (RFC 4191 section 2.2),
router lifetime, reachable time and retransmission timer; the target address
of a solicitation, advertisement or redirect, a Neighbor Advertisement's
router, solicited and override flags, a Redirect's destination.

Options (RFC 4861 section 4.6) follow the fixed part, each a type, a length
in units of 8 bytes, and its body. The first source and target link-layer
address options that hold a 6-byte (IEEE 802) address, the first MTU option
and the counts of prefix information and RDNSS options (RFC 8106) are kept
with the message; every option is listed in the child table `nd_opt`, at
most `MAX_OPTIONS` per message (the rest counted, and flagged MORE), with
the fields of prefix information, MTU, route information (RFC 4191 section
2.3) and RDNSS options. An option of length 0 ends the list and flags the
message TRUNCATED: a receiver must discard such a message (RFC 4861 section
4.6); so does an option or a fixed part that runs past the message's length.
Nothing past the captured bytes or the message's length is read.

`fault` says why a message is malformed by its own bytes (FAULTS, one bit
each; 0: nothing wrong in what was captured), the reasons of RFC 4861
sections 4.6, 6.1 and 7.1 that are the message's own (a code other than 0,
a fixed part longer than the message, an option of length 0 or past the
message, a bad checksum): judged against the IPv6 length, never against
the capture's end. The hop limit and the source address a receiver checks
too are facts about the path and the sender, not about the message.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ...cpu import kernel
from ...schema import L_ICMP6, PROTO_ICMP6
from ..read import be64, mac, u8, u16, u32
from .checksum import fold, halves_sum, sum16
from .table import MORE, TRUNCATED, Child, Field, Layout, Spec, candidate_rows, ip_endpoints, message_bounds, with_valid

ROUTER_SOLICITATION, ROUTER_ADVERTISEMENT, NEIGHBOR_SOLICITATION, NEIGHBOR_ADVERTISEMENT, REDIRECT = range(133, 138)
# bytes before the options (RFC 4861 sections 4.1-4.5): RS, RA, NS and NA, Redirect
RS_BYTES, RA_BYTES, NS_NA_BYTES, REDIRECT_BYTES = 8, 16, 24, 40
ICMP6_HEADER_BYTES = 4           # type, code, checksum
ND_HOP_LIMIT = 255               # RFC 4861: a receiver discards ND messages with another hop limit
OPTION_UNIT = 8                  # an option's length counts 8-byte units (RFC 4861 section 4.6)
MAX_OPTIONS = 32                 # per message; the rest is counted and flagged MORE

# why a message is malformed (bits of `fault`), worded as Wireshark's expert information would
F_CODE, F_SHORT, F_OPTION_ZERO, F_OPTION_PAST, F_TRAILING, F_CHECKSUM = (1 << k for k in range(6))
FAULTS = {
    F_CODE: "ICMPv6 code other than 0",
    F_SHORT: "shorter than the fixed part of its message type",
    F_OPTION_ZERO: "option with length 0",
    F_OPTION_PAST: "option running past the end of the message",
    F_TRAILING: "a stray byte after the options",
    F_CHECKSUM: "bad checksum",
}

# option types
OPT_SOURCE_LLADDR = 1            # RFC 4861 section 4.6.1
OPT_TARGET_LLADDR = 2
OPT_PREFIX_INFORMATION = 3       # RFC 4861 section 4.6.2
OPT_REDIRECTED_HEADER = 4        # RFC 4861 section 4.6.3
OPT_MTU = 5                      # RFC 4861 section 4.6.4
OPT_ROUTE_INFORMATION = 24       # RFC 4191 section 2.3
OPT_RDNSS = 25                   # RFC 8106 section 5.1
OPTION_NAMES = {OPT_SOURCE_LLADDR: "source link-layer address", OPT_TARGET_LLADDR: "target link-layer address",
                OPT_PREFIX_INFORMATION: "prefix information", OPT_REDIRECTED_HEADER: "redirected header",
                OPT_MTU: "MTU", OPT_ROUTE_INFORMATION: "route information", OPT_RDNSS: "RDNSS"}

# flag bits: a Router Advertisement's (RFC 4861 section 4.2; RFC 4191 section 2.2: Prf in bits 3-4), a Neighbor
# Advertisement's (section 4.4), a prefix information option's (section 4.6.2)
RA_MANAGED, RA_OTHER = 0x80, 0x40
RA_PREFERENCE_SHIFT, RA_PREFERENCE_MASK = 3, 0x3
NA_ROUTER, NA_SOLICITED, NA_OVERRIDE = 0x80, 0x40, 0x20
PIO_ON_LINK, PIO_AUTONOMOUS = 0x80, 0x40
# RFC 4191 section 2.1: preference as sent -> its meaning (10 is reserved; a receiver takes it as medium)
PREFERENCES = {0: "medium", 1: "high", 2: "reserved", 3: "low"}

# validity bits of `nd`
B_CHECKSUM = 1 << 0
B_CHECKSUM_OK = 1 << 1
B_RA = 1 << 2
B_TARGET = 1 << 3
B_NA_FLAGS = 1 << 4
B_DESTINATION = 1 << 5
B_OPTIONS = 1 << 6
B_SRC_LLADDR = 1 << 7
B_TGT_LLADDR = 1 << 8
B_MTU = 1 << 9
# of `nd_opt`
B_LLADDR = 1 << 0
B_PREFIX = 1 << 1
B_PIO = 1 << 2
B_ROUTE = 1 << 3
B_LIFETIME = 1 << 4
B_DNS = 1 << 5
B_OPT_MTU = 1 << 6

FIELDS = {
    "type": Field(np.uint8, 0, "ICMPv6 type (133 RS, 134 RA, 135 NS, 136 NA, 137 Redirect)"),
    "code": Field(np.uint8, 0, "ICMPv6 code (0; a receiver discards another)"),
    "length": Field(np.uint32, 0, "message length per the IPv6 header, bytes"),
    "hop_limit": Field(np.uint8, 0, "hop limit of the carrying IPv6 header (255 unless forwarded or forged "
                                    "off-link)"),
    "checksum": Field(np.uint16, B_CHECKSUM, "checksum as sent"),
    "checksum_ok": Field(np.uint8, B_CHECKSUM_OK, "1 when the checksum verifies over the IPv6 pseudo-header "
                                                  "(whole message captured)"),
    "cur_hop_limit": Field(np.uint8, B_RA, "RA: hop limit hosts should use, 0 unspecified"),
    "ra_flags": Field(np.uint8, B_RA, "RA: the flags byte as sent (M 0x80, O 0x40, H 0x20, Prf 0x18, P 0x04)"),
    "managed": Field(np.uint8, B_RA, "RA: M flag, addresses from DHCPv6"),
    "other": Field(np.uint8, B_RA, "RA: O flag, other configuration from DHCPv6"),
    "preference": Field(np.uint8, B_RA, "RA: default router preference as sent (RFC 4191: 1 high, 0 medium, "
                                        "3 low, 2 reserved)"),
    "router_lifetime": Field(np.uint16, B_RA, "RA: router lifetime, s (0: not a default router)"),
    "reachable_time": Field(np.uint32, B_RA, "RA: reachable time, ms (0 unspecified)"),
    "retrans_timer": Field(np.uint32, B_RA, "RA: retransmission timer, ms (0 unspecified)"),
    "target_hi": Field(np.uint64, B_TARGET, "NS, NA, Redirect: target address, high half", "ip"),
    "target_lo": Field(np.uint64, B_TARGET, "NS, NA, Redirect: target address, low half", "ip"),
    "na_router": Field(np.uint8, B_NA_FLAGS, "NA: R flag, the sender is a router"),
    "na_solicited": Field(np.uint8, B_NA_FLAGS, "NA: S flag, an answer to a solicitation"),
    "na_override": Field(np.uint8, B_NA_FLAGS, "NA: O flag, overrides a cached link-layer address"),
    "destination_hi": Field(np.uint64, B_DESTINATION, "Redirect: destination address, high half", "ip"),
    "destination_lo": Field(np.uint64, B_DESTINATION, "Redirect: destination address, low half", "ip"),
    "option_count": Field(np.uint16, B_OPTIONS, "options read, up to the first malformed one (nd_opt lists "
                                                "up to MAX_OPTIONS)"),
    "prefix_count": Field(np.uint16, B_OPTIONS, "prefix information options read"),
    "rdnss_count": Field(np.uint16, B_OPTIONS, "RDNSS options read"),
    "src_lladdr": Field(np.uint64, B_SRC_LLADDR, "first source link-layer address option's 6-byte address",
                        "mac"),
    "tgt_lladdr": Field(np.uint64, B_TGT_LLADDR, "first target link-layer address option's 6-byte address",
                        "mac"),
    "mtu": Field(np.uint32, B_MTU, "first MTU option's value, bytes"),
    "fault": Field(np.uint8, 0, "why the message is malformed by its own bytes (FAULTS bits; 0: nothing wrong in "
                                "what was captured)"),
}
OPTION_FIELDS = {
    "type": Field(np.uint8, 0, "option type (1 source, 2 target link-layer address, 3 prefix information, "
                               "4 redirected header, 5 MTU, 24 route information, 25 RDNSS, ...)"),
    "length": Field(np.uint8, 0, "option length as sent, units of 8 bytes (0: malformed, ends the list)"),
    "lladdr": Field(np.uint64, B_LLADDR, "link-layer address options: the 6-byte address (length 1)", "mac"),
    "prefix_hi": Field(np.uint64, B_PREFIX, "prefix information, route information: prefix, high half", "ip"),
    "prefix_lo": Field(np.uint64, B_PREFIX, "prefix, low half", "ip"),
    "prefix_len": Field(np.uint8, B_PREFIX, "prefix length, bits"),
    "on_link": Field(np.uint8, B_PIO, "prefix information: L flag"),
    "autonomous": Field(np.uint8, B_PIO, "prefix information: A flag, hosts form addresses in it (SLAAC)"),
    "valid_lifetime": Field(np.uint32, B_PIO, "prefix information: valid lifetime, s (0xFFFFFFFF infinite)"),
    "preferred_lifetime": Field(np.uint32, B_PIO, "prefix information: preferred lifetime, s"),
    "route_preference": Field(np.uint8, B_ROUTE, "route information: preference as sent (RFC 4191)"),
    "lifetime": Field(np.uint32, B_LIFETIME, "route information: route lifetime; RDNSS: lifetime, s"),
    "dns_hi": Field(np.uint64, B_DNS, "RDNSS: first server address, high half", "ip"),
    "dns_lo": Field(np.uint64, B_DNS, "RDNSS: first server address, low half", "ip"),
    "dns_count": Field(np.uint8, B_DNS, "RDNSS: server addresses the option's length holds"),
    "mtu": Field(np.uint32, B_OPT_MTU, "MTU option: the link MTU, bytes"),
}
OPTIONS = Child("nd_opt", OPTION_FIELDS, MAX_OPTIONS, "the options of a Neighbor Discovery message")

_ROW = Layout(with_valid(FIELDS)).row
TYPE, CODE, LENGTH, HOP_LIMIT, CHECKSUM, CHECKSUM_OK = (_ROW[n] for n in (
    "type", "code", "length", "hop_limit", "checksum", "checksum_ok"))
CUR_HOP_LIMIT, RA_FLAGS, MANAGED, OTHER, PREFERENCE = (_ROW[n] for n in (
    "cur_hop_limit", "ra_flags", "managed", "other", "preference"))
ROUTER_LIFETIME, REACHABLE, RETRANS = _ROW["router_lifetime"], _ROW["reachable_time"], _ROW["retrans_timer"]
TARGET_HI, TARGET_LO, DEST_HI, DEST_LO = _ROW["target_hi"], _ROW["target_lo"], _ROW["destination_hi"], \
    _ROW["destination_lo"]
NA_R, NA_S, NA_O = _ROW["na_router"], _ROW["na_solicited"], _ROW["na_override"]
OPTION_COUNT, PREFIX_COUNT, RDNSS_COUNT = _ROW["option_count"], _ROW["prefix_count"], _ROW["rdnss_count"]
SRC_LLADDR, TGT_LLADDR, MTU, VALID = _ROW["src_lladdr"], _ROW["tgt_lladdr"], _ROW["mtu"], _ROW["valid"]
FAULT = _ROW["fault"]
_OPT_ROW = OPTIONS.layout.row
O_TYPE, O_LENGTH, O_LLADDR, O_PREFIX_HI, O_PREFIX_LO, O_PREFIX_LEN = (_OPT_ROW[n] for n in (
    "type", "length", "lladdr", "prefix_hi", "prefix_lo", "prefix_len"))
O_ON_LINK, O_AUTONOMOUS, O_VALID_LIFETIME, O_PREFERRED_LIFETIME = (_OPT_ROW[n] for n in (
    "on_link", "autonomous", "valid_lifetime", "preferred_lifetime"))
O_ROUTE_PREFERENCE, O_LIFETIME, O_DNS_HI, O_DNS_LO, O_DNS_COUNT, O_MTU, O_VALID = (_OPT_ROW[n] for n in (
    "route_preference", "lifetime", "dns_hi", "dns_lo", "dns_count", "mtu", "valid"))

# offsets in the message (RFC 4861 sections 4.2-4.5) and in an option (4.6; RFC 4191 2.3; RFC 8106 5.1)
M_CHECKSUM = 2
M_CUR_HOP_LIMIT, M_RA_FLAGS, M_ROUTER_LIFETIME, M_REACHABLE, M_RETRANS = 4, 5, 6, 8, 12
M_NA_FLAGS, M_TARGET, M_DESTINATION = 4, 8, 24
O_BODY = 2
PIO_PREFIX_LEN, PIO_FLAGS, PIO_VALID, PIO_PREFERRED, PIO_PREFIX = 2, 3, 4, 8, 16
RIO_PREFIX_LEN, RIO_FLAGS, RIO_LIFETIME, RIO_PREFIX = 2, 3, 4, 8
RDNSS_LIFETIME, RDNSS_ADDRESSES = 4, 8
MTU_VALUE = 4
IPV6_ADDRESS_BYTES = 16
LLADDR_BYTES = 6


@njit(_nrt=False)
def _partial_address(b, p, n):
    """(hi, lo) of an address whose first `n` bytes (0-16) are at p, the rest zero (RFC 4191 section 2.3)."""
    hi = np.uint64(0)
    lo = np.uint64(0)
    for k in range(IPV6_ADDRESS_BYTES):
        byte = np.uint64(u8(b, p + k)) if k < n else np.uint64(0)
        if k < 8:
            hi = (hi << np.uint64(8)) | byte
        else:
            lo = (lo << np.uint64(8)) | byte
    return hi, lo


@njit(_nrt=False)
def _option(b, o, lim, slot, keep, k8, k16, k32, k64):
    """Read the option at b[o:...] whose body ends at `lim` (its length or the capture, whichever is first).

    Writes its slot when `keep`; returns (option type, its 6-byte address or 0, whether it holds one,
    its MTU, whether it holds one)."""
    kind = u8(b, o)
    size = u8(b, o + 1) * OPTION_UNIT
    valid = np.uint32(0)
    address = np.uint64(0)
    has_address = False
    mtu = np.int64(0)
    has_mtu = False
    if (kind == OPT_SOURCE_LLADDR or kind == OPT_TARGET_LLADDR) and size == OPTION_UNIT and o + 2 + LLADDR_BYTES <= lim:
        address = mac(b, o + O_BODY)
        has_address = True
        valid |= B_LLADDR
        if keep:
            k64[O_LLADDR, slot] = address
    elif kind == OPT_PREFIX_INFORMATION and o + PIO_PREFIX + IPV6_ADDRESS_BYTES <= lim:
        if keep:
            flags = u8(b, o + PIO_FLAGS)
            k8[O_PREFIX_LEN, slot] = u8(b, o + PIO_PREFIX_LEN)
            k8[O_ON_LINK, slot] = 1 if flags & PIO_ON_LINK else 0
            k8[O_AUTONOMOUS, slot] = 1 if flags & PIO_AUTONOMOUS else 0
            k32[O_VALID_LIFETIME, slot] = u32(b, o + PIO_VALID)
            k32[O_PREFERRED_LIFETIME, slot] = u32(b, o + PIO_PREFERRED)
            k64[O_PREFIX_HI, slot] = be64(b, o + PIO_PREFIX)
            k64[O_PREFIX_LO, slot] = be64(b, o + PIO_PREFIX + 8)
        valid |= B_PREFIX | B_PIO
    elif kind == OPT_MTU and o + MTU_VALUE + 4 <= lim:
        mtu = u32(b, o + MTU_VALUE)
        has_mtu = True
        valid |= B_OPT_MTU
        if keep:
            k32[O_MTU, slot] = mtu
    elif kind == OPT_ROUTE_INFORMATION and o + RIO_PREFIX <= lim:
        if keep:
            k8[O_PREFIX_LEN, slot] = u8(b, o + RIO_PREFIX_LEN)
            k8[O_ROUTE_PREFERENCE, slot] = (u8(b, o + RIO_FLAGS) >> RA_PREFERENCE_SHIFT) & RA_PREFERENCE_MASK
            k32[O_LIFETIME, slot] = u32(b, o + RIO_LIFETIME)
            hi, lo = _partial_address(b, o + RIO_PREFIX, min(lim - (o + RIO_PREFIX), IPV6_ADDRESS_BYTES))
            k64[O_PREFIX_HI, slot] = hi
            k64[O_PREFIX_LO, slot] = lo
        valid |= B_ROUTE | B_LIFETIME | B_PREFIX
    elif kind == OPT_RDNSS and o + RDNSS_ADDRESSES <= lim:
        if keep:
            k32[O_LIFETIME, slot] = u32(b, o + RDNSS_LIFETIME)
        valid |= B_LIFETIME
        if o + RDNSS_ADDRESSES + IPV6_ADDRESS_BYTES <= lim:
            if keep:
                k64[O_DNS_HI, slot] = be64(b, o + RDNSS_ADDRESSES)
                k64[O_DNS_LO, slot] = be64(b, o + RDNSS_ADDRESSES + 8)
                k8[O_DNS_COUNT, slot] = min((size - RDNSS_ADDRESSES) // IPV6_ADDRESS_BYTES, 255)
            valid |= B_DNS
    if keep:
        k8[O_TYPE, slot] = kind
        k8[O_LENGTH, slot] = u8(b, o + 1)
        k32[O_VALID, slot] = valid
    return kind, address, has_address, mtu, has_mtu


@njit(_nrt=False)
def _message(b, s, end, length, hop_limit, src_hi, src_lo, dst_hi, dst_lo, i, c8, c16, c32, c64,
             k8, k16, k32, k64):
    """Parse one message b[s:end] (`length` bytes per the IPv6 header); returns the options it listed."""
    c32[LENGTH, i] = length
    c8[HOP_LIMIT, i] = hop_limit
    # what may be read: the captured bytes of the message, never past its length
    lim = min(end, s + length)
    valid = np.uint32(TRUNCATED) if end - s < length else np.uint32(0)
    kind = u8(b, s)
    c8[TYPE, i] = kind
    c8[CODE, i] = u8(b, s + 1)        # the decoder read both (L_ICMP6)
    fault = F_CODE if u8(b, s + 1) != 0 else 0
    if s + ICMP6_HEADER_BYTES <= lim:
        c16[CHECKSUM, i] = u16(b, s + M_CHECKSUM)
        valid |= B_CHECKSUM
    if end - s == length and length >= ICMP6_HEADER_BYTES:
        total = sum16(b, s, end) + halves_sum(src_hi, src_lo, 6) + halves_sum(dst_hi, dst_lo, 6)
        total += np.uint64(PROTO_ICMP6) + np.uint64(length & 0xFFFF) + np.uint64(length >> 16)
        c8[CHECKSUM_OK, i] = fold(total) == 0xFFFF
        valid |= B_CHECKSUM_OK
        if fold(total) != 0xFFFF:
            fault |= F_CHECKSUM
    fixed = RS_BYTES
    if kind == ROUTER_ADVERTISEMENT:
        fixed = RA_BYTES
    elif kind == NEIGHBOR_SOLICITATION or kind == NEIGHBOR_ADVERTISEMENT:
        fixed = NS_NA_BYTES
    elif kind == REDIRECT:
        fixed = REDIRECT_BYTES
    if length < fixed:
        valid |= TRUNCATED            # the IPv6 length leaves no room for the fixed part: a receiver drops it
        fault |= F_SHORT
    if kind == ROUTER_ADVERTISEMENT and s + fixed <= lim:
        flags = u8(b, s + M_RA_FLAGS)
        c8[CUR_HOP_LIMIT, i] = u8(b, s + M_CUR_HOP_LIMIT)
        c8[RA_FLAGS, i] = flags
        c8[MANAGED, i] = 1 if flags & RA_MANAGED else 0
        c8[OTHER, i] = 1 if flags & RA_OTHER else 0
        c8[PREFERENCE, i] = (flags >> RA_PREFERENCE_SHIFT) & RA_PREFERENCE_MASK
        c16[ROUTER_LIFETIME, i] = u16(b, s + M_ROUTER_LIFETIME)
        c32[REACHABLE, i] = u32(b, s + M_REACHABLE)
        c32[RETRANS, i] = u32(b, s + M_RETRANS)
        valid |= B_RA
    if kind != ROUTER_SOLICITATION and kind != ROUTER_ADVERTISEMENT and s + M_TARGET + IPV6_ADDRESS_BYTES <= lim:
        c64[TARGET_HI, i] = be64(b, s + M_TARGET)
        c64[TARGET_LO, i] = be64(b, s + M_TARGET + 8)
        valid |= B_TARGET
    if kind == NEIGHBOR_ADVERTISEMENT and s + M_NA_FLAGS + 1 <= lim:
        flags = u8(b, s + M_NA_FLAGS)
        c8[NA_R, i] = 1 if flags & NA_ROUTER else 0
        c8[NA_S, i] = 1 if flags & NA_SOLICITED else 0
        c8[NA_O, i] = 1 if flags & NA_OVERRIDE else 0
        valid |= B_NA_FLAGS
    if kind == REDIRECT and s + M_DESTINATION + IPV6_ADDRESS_BYTES <= lim:
        c64[DEST_HI, i] = be64(b, s + M_DESTINATION)
        c64[DEST_LO, i] = be64(b, s + M_DESTINATION + 8)
        valid |= B_DESTINATION
    if s + fixed > lim:
        c8[FAULT, i] = fault
        c32[VALID, i] = valid
        return 0
    # the options, as far as the capture and the message's length go
    valid |= B_OPTIONS
    count = 0
    prefixes = 0
    rdnss = 0
    listed = 0
    o = s + fixed
    broken = False
    while o + 2 <= lim:
        size = u8(b, o + 1) * OPTION_UNIT
        keep = listed < MAX_OPTIONS
        slot = i * MAX_OPTIONS + listed
        option_end = o + size
        if size == 0 or option_end > s + length:
            valid |= TRUNCATED        # RFC 4861 section 4.6: a zero length, or one past the message, is malformed
            fault |= F_OPTION_ZERO if size == 0 else F_OPTION_PAST
        option, address, has_address, mtu, has_mtu = _option(b, o, min(lim, option_end), slot, keep,
                                                            k8, k16, k32, k64)
        if keep:
            if option_end > lim:
                k32[O_VALID, slot] |= TRUNCATED
            listed += 1
        else:
            valid |= MORE
        count += 1
        if size == 0 or option_end > s + length:
            broken = True
            break
        if option == OPT_PREFIX_INFORMATION:
            prefixes += 1
        elif option == OPT_RDNSS:
            rdnss += 1
        if has_address and option == OPT_SOURCE_LLADDR and not valid & B_SRC_LLADDR:
            c64[SRC_LLADDR, i] = address
            valid |= B_SRC_LLADDR
        if has_address and option == OPT_TARGET_LLADDR and not valid & B_TGT_LLADDR:
            c64[TGT_LLADDR, i] = address
            valid |= B_TGT_LLADDR
        if has_mtu and not valid & B_MTU:
            c32[MTU, i] = mtu
            valid |= B_MTU
        o = option_end
    if o < lim:
        valid |= TRUNCATED            # a single byte where an option's type and length should be
        if lim == s + length and not broken:
            fault |= F_TRAILING       # the message's last byte, not the capture's
    c16[OPTION_COUNT, i] = min(count, 0xFFFF)
    c16[PREFIX_COUNT, i] = min(prefixes, 0xFFFF)
    c16[RDNSS_COUNT, i] = min(rdnss, 0xFFFF)
    c8[FAULT, i] = fault
    c32[VALID, i] = valid
    return listed


@kernel("(u1[::1], i8[::1], i8[::1], i8[::1], u1[::1], u8[::1], u8[::1], u8[::1], u8[::1], "
        "u1[:, ::1], u2[:, ::1], u4[:, ::1], u8[:, ::1], u1[:, ::1], u2[:, ::1], u4[:, ::1], u8[:, ::1], u2[::1])",
        _nrt=False, nogil=True)
def parse_nd(data, start, end, claimed, hop_limit, src_hi, src_lo, dst_hi, dst_lo, c8, c16, c32, c64,
             k8, k16, k32, k64, count):
    """Fill the nd table's arrays for messages data[start[i]:end[i]] (claimed[i]: their end per IPv6)."""
    for i in range(start.shape[0]):
        count[i] = _message(data, start[i], end[i], claimed[i] - start[i], hop_limit[i], src_hi[i], src_lo[i],
                            dst_hi[i], dst_lo[i], i, c8, c16, c32, c64, k8, k16, k32, k64)


def _candidates(batch) -> np.ndarray:
    icmp6 = ((batch["layers"] & np.uint32(L_ICMP6)) != 0) & (batch["ip_version"] == 6)
    kind = batch["icmp_type"]
    return candidate_rows(batch, icmp6 & (kind >= ROUTER_SOLICITATION) & (kind <= REDIRECT))


def _parse(batch, rows, groups, child_groups, counts) -> None:
    start, end, claimed = message_bounds(batch, rows, "l4_off")
    _family, *addresses = ip_endpoints(batch, rows)
    parse_nd(np.ascontiguousarray(batch.data, dtype=np.uint8), start, end, claimed,
             np.ascontiguousarray(batch["ttl"][rows]), *addresses, *groups, *child_groups[OPTIONS.name],
             counts[OPTIONS.name])


SPEC = Spec("nd", __doc__.splitlines()[0], FIELDS, _candidates, _parse, (OPTIONS,))

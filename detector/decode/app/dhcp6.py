"""The `dhcp6` table: DHCPv6 (RFC 8415) on UDP 546 and 547.

One entry per UDP datagram to or from port 546 or 547. A client or server
message is a type, a 24-bit transaction id and options (2-byte code, 2-byte
length); a relay message (RELAY-FORW 12, RELAY-REPL 13) is a type, a hop
count, a link and a peer address and options, one of which (Relay Message,
9) holds the message relayed, possibly another relay's. The relays are
descended to the message inside, at most `MAX_RELAYS` deep (RFC 8415
HOP_COUNT_LIMIT), never by recursion: the table keeps the outermost relay's
hop count and addresses, and the inner message's type, transaction id and
options.

From the inner message's options: the client and server DUIDs (1, 2: type,
length, a 64-bit FNV-1a hash of the DUID's bytes for grouping, and the MAC
of a DUID-LLT or DUID-LL of hardware type 1), the first DNS server (23) and
their count, the status code (13) and the server preference (7). The
addresses and prefixes of IA_NA (3), IA_TA (4) and IA_PD (25) are the child
table `dhcp6_ia`, one entry per IA address (5) or IA prefix (26), at most
`MAX_ADDRESSES` per message. An option is read only when it was captured
whole and fits the message (or the option around it); a length that runs
past either flags the message TRUNCATED.

`fault` says why a message is malformed by its own bytes (FAULTS, one bit
each; 0: nothing wrong in what was captured): a message or relay header
longer than the message, an option (or an IA's sub-option) running past the
message or the option around it, an IA shorter than its fixed fields, a
relay message without the message it relays, relays nested deeper than
HOP_COUNT_LIMIT, a UDP length field other than the IP header's; judged
against the message's length and its options' lengths, never against the
capture's end.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ...cpu import kernel
from ..read import be64, mac, u8, u16, u32
from .dhcp4 import fnv1a
from .table import (
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
    udp_port_mask,
    with_valid,
)

CLIENT_PORT, SERVER_PORT = 546, 547        # RFC 8415 section 7.2
MAX_RELAYS = 8                             # RFC 8415 section 7.6 HOP_COUNT_LIMIT: relays nested at most this deep
MAX_ADDRESSES = 16                         # IA addresses and prefixes per message; the rest is flagged MORE
HEADER_BYTES = 4                           # type and transaction id
RELAY_HEADER_BYTES = 34                    # type, hop count, link address, peer address
OPTION_HEADER = 4

# why a message is malformed (bits of `fault`), worded as Wireshark's expert information would
F_SHORT, F_OPTION_PAST, F_OPTION_SHORT, F_NO_RELAY_MSG, F_RELAY_DEPTH, F_UDP_LENGTH = (1 << k for k in range(6))
FAULTS = {
    F_SHORT: "shorter than its message or relay header",
    F_OPTION_PAST: "option running past the end of the message (or of the option around it)",
    F_OPTION_SHORT: "IA option shorter than its fixed fields",
    F_NO_RELAY_MSG: "relay message without a Relay Message option",
    F_RELAY_DEPTH: f"relays nested deeper than {MAX_RELAYS} (HOP_COUNT_LIMIT)",
    F_UDP_LENGTH: "UDP length field differs from the IP length (the stack trims or drops the datagram)",
}

# message types (RFC 8415 section 7.3)
SOLICIT, ADVERTISE, REQUEST, CONFIRM, RENEW, REBIND, REPLY, RELEASE, DECLINE, RECONFIGURE, INFORMATION_REQUEST, \
    RELAY_FORW, RELAY_REPL = range(1, 14)
MESSAGE_TYPES = {SOLICIT: "SOLICIT", ADVERTISE: "ADVERTISE", REQUEST: "REQUEST", CONFIRM: "CONFIRM", RENEW: "RENEW",
                 REBIND: "REBIND", REPLY: "REPLY", RELEASE: "RELEASE", DECLINE: "DECLINE",
                 RECONFIGURE: "RECONFIGURE", INFORMATION_REQUEST: "INFORMATION-REQUEST", RELAY_FORW: "RELAY-FORW",
                 RELAY_REPL: "RELAY-REPL"}

# option codes (RFC 8415 section 21, RFC 3646 for DNS)
OPT_CLIENTID, OPT_SERVERID, OPT_IA_NA, OPT_IA_TA, OPT_IAADDR = 1, 2, 3, 4, 5
OPT_PREFERENCE, OPT_RELAY_MSG, OPT_STATUS_CODE = 7, 9, 13
OPT_DNS_SERVERS = 23
OPT_IA_PD, OPT_IAPREFIX = 25, 26
# DUID types (RFC 8415 section 11) whose identifier starts with a hardware type and carries a link-layer address
DUID_LLT, DUID_LL = 1, 3
HW_ETHERNET = 1

# validity bits of dhcp6
B_HEADER = 1 << 0
B_XID = 1 << 1
B_RELAY = 1 << 2
B_INNER = 1 << 3
B_CLIENT_DUID = 1 << 4
B_CLIENT_MAC = 1 << 5
B_SERVER_DUID = 1 << 6
B_SERVER_MAC = 1 << 7
B_DNS = 1 << 8
B_STATUS = 1 << 9
B_PREFERENCE = 1 << 10
# of dhcp6_ia
B_IA = 1 << 0
B_TIMERS = 1 << 1          # T1 and T2 (IA_NA, IA_PD)
B_ADDRESS = 1 << 2
B_PREFIX_LEN = 1 << 3

FIELDS = {
    "port": Field(np.uint16, 0, "the DHCPv6 port: the destination port if it is 546 or 547, else the source port"),
    "length": Field(np.uint32, 0, "message length: the UDP payload per the IP header, bytes"),
    "msg_type": Field(np.uint8, B_HEADER, "message type (MESSAGE_TYPES; 12, 13 relay)"),
    "relays": Field(np.uint8, B_HEADER, "relay headers around the inner message (0 for a client or server "
                                        f"message; past {MAX_RELAYS} the inner message is not read)"),
    "hop_count": Field(np.uint8, B_RELAY, "the outermost relay's hop count"),
    "link_hi": Field(np.uint64, B_RELAY, "the outermost relay's link address, high half", "ip"),
    "link_lo": Field(np.uint64, B_RELAY, "the outermost relay's link address, low half", "ip"),
    "peer_hi": Field(np.uint64, B_RELAY, "the outermost relay's peer address, high half", "ip"),
    "peer_lo": Field(np.uint64, B_RELAY, "the outermost relay's peer address, low half", "ip"),
    "inner_type": Field(np.uint8, B_INNER, "message type inside the relays (a relay message only)"),
    "xid": Field(np.uint32, B_XID, "transaction id of the (inner) client or server message, 24 bits"),
    "client_duid_type": Field(np.uint16, B_CLIENT_DUID, "client DUID (option 1) type"),
    "client_duid_len": Field(np.uint16, B_CLIENT_DUID, "client DUID length, bytes"),
    "client_duid_hash": Field(np.uint64, B_CLIENT_DUID, "64-bit FNV-1a hash of the client DUID's bytes"),
    "client_mac": Field(np.uint64, B_CLIENT_MAC, "MAC of a client DUID-LLT or DUID-LL of hardware type 1", "mac"),
    "server_duid_type": Field(np.uint16, B_SERVER_DUID, "server DUID (option 2) type"),
    "server_duid_len": Field(np.uint16, B_SERVER_DUID, "server DUID length, bytes"),
    "server_duid_hash": Field(np.uint64, B_SERVER_DUID, "64-bit FNV-1a hash of the server DUID's bytes"),
    "server_mac": Field(np.uint64, B_SERVER_MAC, "MAC of a server DUID-LLT or DUID-LL of hardware type 1", "mac"),
    "dns_hi": Field(np.uint64, B_DNS, "first DNS server (option 23), high half", "ip"),
    "dns_lo": Field(np.uint64, B_DNS, "first DNS server, low half", "ip"),
    "dns_count": Field(np.uint8, B_DNS, "DNS servers option 23 lists"),
    "status": Field(np.uint16, B_STATUS, "status code (option 13) of the message (0 success)"),
    "preference": Field(np.uint8, B_PREFERENCE, "server preference (option 7), 0-255"),
    "fault": Field(np.uint8, 0, "why the message is malformed by its own bytes (FAULTS bits; 0: nothing wrong in "
                                "what was captured)"),
}
IA_FIELDS = {
    "ia_type": Field(np.uint16, B_IA, "the IA's option: 3 IA_NA, 4 IA_TA, 25 IA_PD"),
    "iaid": Field(np.uint32, B_IA, "IA identifier"),
    "t1_s": Field(np.uint32, B_TIMERS, "T1 (renew after), s"),
    "t2_s": Field(np.uint32, B_TIMERS, "T2 (rebind after), s"),
    "addr_hi": Field(np.uint64, B_ADDRESS, "address (IA_NA, IA_TA) or prefix (IA_PD), high half", "ip"),
    "addr_lo": Field(np.uint64, B_ADDRESS, "address or prefix, low half", "ip"),
    "prefix_len": Field(np.uint8, B_PREFIX_LEN, "prefix length (IA_PD)"),
    "preferred_s": Field(np.uint32, B_ADDRESS, "preferred lifetime, s"),
    "valid_s": Field(np.uint32, B_ADDRESS, "valid lifetime, s"),
}
ADDRESSES = Child("dhcp6_ia", IA_FIELDS, MAX_ADDRESSES, "the IA addresses and prefixes of a DHCPv6 message")

_ROW = Layout(with_valid(FIELDS)).row
PORT, LENGTH, VALID, MSG_TYPE, RELAYS, HOP_COUNT = (_ROW[n] for n in ("port", "length", "valid", "msg_type",
                                                                     "relays", "hop_count"))
LINK_HI, LINK_LO, PEER_HI, PEER_LO, INNER_TYPE, XID = (_ROW[n] for n in ("link_hi", "link_lo", "peer_hi", "peer_lo",
                                                                        "inner_type", "xid"))
DNS_HI, DNS_LO, DNS_COUNT, STATUS, PREFERENCE, FAULT = (_ROW[n] for n in ("dns_hi", "dns_lo", "dns_count",
                                                                         "status", "preference", "fault"))
# the rows of the client's (index 0) and the server's (index 1) DUID fields
DUID_TYPE = (_ROW["client_duid_type"], _ROW["server_duid_type"])
DUID_LEN = (_ROW["client_duid_len"], _ROW["server_duid_len"])
DUID_HASH = (_ROW["client_duid_hash"], _ROW["server_duid_hash"])
DUID_MAC = (_ROW["client_mac"], _ROW["server_mac"])
DUID_BITS = ((B_CLIENT_DUID, B_CLIENT_MAC), (B_SERVER_DUID, B_SERVER_MAC))
_IA_ROW = ADDRESSES.layout.row
IA_TYPE, IAID, T1, T2, ADDR_HI, ADDR_LO, PREFIX_LEN, PREFERRED, VALID_LIFE, IA_VALID = (
    _IA_ROW[n] for n in ("ia_type", "iaid", "t1_s", "t2_s", "addr_hi", "addr_lo", "prefix_len", "preferred_s",
                         "valid_s", "valid"))
CLIENT_DUID_ROWS = (DUID_TYPE[0], DUID_LEN[0], DUID_HASH[0], DUID_MAC[0])
SERVER_DUID_ROWS = (DUID_TYPE[1], DUID_LEN[1], DUID_HASH[1], DUID_MAC[1])


@njit(_nrt=False)
def _duid(b, p, n, i, rows, bits, c16, c64):
    """A DUID of `n` bytes at b[p] (captured): type, length, hash and an Ethernet MAC; returns validity bits."""
    type_row, len_row, hash_row, mac_row = rows
    duid_bit, mac_bit = bits
    c16[len_row, i] = n
    c64[hash_row, i] = fnv1a(b, p, p + n)
    valid = np.uint32(duid_bit)
    if n < 2:
        return valid
    kind = u16(b, p)
    c16[type_row, i] = kind
    # DUID-LLT: type, hardware type, time, address; DUID-LL: type, hardware type, address
    at = p + 8 if kind == DUID_LLT else p + 4
    if (kind == DUID_LLT or kind == DUID_LL) and n >= 4 and u16(b, p + 2) == HW_ETHERNET and p + n - at == 6:
        c64[mac_row, i] = mac(b, at)
        valid |= mac_bit
    return valid


@njit(_nrt=False)
def _ia(b, code, p, end, i, listed, k8, k16, k32, k64):
    """The addresses (or prefixes) of one IA option b[p:end] (captured whole); returns (listed, more, fault)."""
    head = 4 if code == OPT_IA_TA else 12
    if end - p < head:
        return listed, False, F_OPTION_SHORT
    iaid = u32(b, p)
    q = p + head
    more = False
    fault = 0
    while q < end:
        if q + OPTION_HEADER > end:
            fault = F_OPTION_PAST
            break
        sub = u16(b, q)
        n = u16(b, q + 2)
        v = q + OPTION_HEADER
        if v + n > end:
            fault = F_OPTION_PAST
            break
        if (sub == OPT_IAADDR and n >= 24) or (sub == OPT_IAPREFIX and n >= 25):
            if listed >= MAX_ADDRESSES:
                more = True
                break
            slot = i * MAX_ADDRESSES + listed
            k16[IA_TYPE, slot] = code
            k32[IAID, slot] = iaid
            valid = np.uint32(B_IA | B_ADDRESS)
            if code != OPT_IA_TA:
                k32[T1, slot] = u32(b, p + 4)
                k32[T2, slot] = u32(b, p + 8)
                valid |= B_TIMERS
            if sub == OPT_IAADDR:
                k64[ADDR_HI, slot] = be64(b, v)
                k64[ADDR_LO, slot] = be64(b, v + 8)
                k32[PREFERRED, slot] = u32(b, v + 16)
                k32[VALID_LIFE, slot] = u32(b, v + 20)
            else:
                k32[PREFERRED, slot] = u32(b, v)
                k32[VALID_LIFE, slot] = u32(b, v + 4)
                k8[PREFIX_LEN, slot] = u8(b, v + 8)
                k64[ADDR_HI, slot] = be64(b, v + 9)
                k64[ADDR_LO, slot] = be64(b, v + 17)
                valid |= B_PREFIX_LEN
            k32[IA_VALID, slot] = valid
            listed += 1
        q = v + n
    return listed, more, fault


@njit(_nrt=False)
def _message(b, s, end, length, port, i, c8, c16, c32, c64, k8, k16, k32, k64):
    """Parse one message b[s:end] (`length` bytes per the IP header); returns the IA addresses it listed."""
    c16[PORT, i] = port
    c32[LENGTH, i] = length
    valid = np.uint32(TRUNCATED) if end - s < length else np.uint32(0)
    fault = 0
    if end - s < 1 or length < 1:
        c8[FAULT, i] = F_SHORT if length < HEADER_BYTES else 0
        c32[VALID, i] = valid
        return 0
    kind = u8(b, s)
    c8[MSG_TYPE, i] = kind
    valid |= B_HEADER
    # descend the relays: each Relay Message option (9) holds the next message, at most MAX_RELAYS deep
    p = s
    limit = s + length          # the end of the current message per its carrier (or its option)
    relays = 0
    while kind == RELAY_FORW or kind == RELAY_REPL:
        if p + RELAY_HEADER_BYTES > limit:
            valid |= TRUNCATED
            fault |= F_SHORT
            break
        if p + RELAY_HEADER_BYTES > end:
            break
        if relays == 0:
            c8[HOP_COUNT, i] = u8(b, p + 1)
            c64[LINK_HI, i] = be64(b, p + 2)
            c64[LINK_LO, i] = be64(b, p + 10)
            c64[PEER_HI, i] = be64(b, p + 18)
            c64[PEER_LO, i] = be64(b, p + 26)
            valid |= B_RELAY
        relays += 1
        if relays > MAX_RELAYS:
            fault |= F_RELAY_DEPTH
            break
        q = p + RELAY_HEADER_BYTES
        inner = -1
        inner_end = 0
        while q + OPTION_HEADER <= limit and q + OPTION_HEADER <= end:
            n = u16(b, q + 2)
            if q + OPTION_HEADER + n > limit:
                valid |= TRUNCATED
                fault |= F_OPTION_PAST
                break
            if u16(b, q) == OPT_RELAY_MSG:
                inner = q + OPTION_HEADER
                inner_end = inner + n
                break
            q += OPTION_HEADER + n
        if inner < 0 and not fault & F_OPTION_PAST:
            if q < limit and q + OPTION_HEADER > limit:
                fault |= F_OPTION_PAST        # an option header past the message's end
            elif q >= limit:
                fault |= F_NO_RELAY_MSG       # every option read, none the relayed message
        if inner >= 0 and inner >= inner_end:
            fault |= F_SHORT                  # a Relay Message option of length 0: no message inside
        if inner < 0 or inner >= end or inner >= inner_end:
            break
        p = inner
        limit = inner_end
        kind = u8(b, p)
        c8[INNER_TYPE, i] = kind
        valid |= B_INNER
    c8[RELAYS, i] = min(relays, 255)
    if kind == RELAY_FORW or kind == RELAY_REPL or relays > MAX_RELAYS:
        c8[FAULT, i] = fault
        c32[VALID, i] = valid
        return 0
    if p + HEADER_BYTES > limit or p + HEADER_BYTES > end:
        if p + HEADER_BYTES > limit:
            valid |= TRUNCATED
            fault |= F_SHORT
        c8[FAULT, i] = fault
        c32[VALID, i] = valid
        return 0
    c32[XID, i] = u32(b, p) & 0xFFFFFF
    valid |= B_XID
    q = p + HEADER_BYTES
    listed = 0
    while q < limit:
        if q + OPTION_HEADER > limit:
            valid |= TRUNCATED
            fault |= F_OPTION_PAST
            break
        if q + OPTION_HEADER > end:
            valid |= TRUNCATED
            break
        code = u16(b, q)
        n = u16(b, q + 2)
        v = q + OPTION_HEADER
        if v + n > limit or v + n > end:
            valid |= TRUNCATED
            if v + n > limit:
                fault |= F_OPTION_PAST
            break
        if code == OPT_CLIENTID and not valid & B_CLIENT_DUID:
            valid |= _duid(b, v, n, i, CLIENT_DUID_ROWS, DUID_BITS[0], c16, c64)
        elif code == OPT_SERVERID and not valid & B_SERVER_DUID:
            valid |= _duid(b, v, n, i, SERVER_DUID_ROWS, DUID_BITS[1], c16, c64)
        elif code == OPT_DNS_SERVERS and n >= 16 and not valid & B_DNS:
            c64[DNS_HI, i] = be64(b, v)
            c64[DNS_LO, i] = be64(b, v + 8)
            c8[DNS_COUNT, i] = min(n // 16, 255)
            valid |= B_DNS
        elif code == OPT_STATUS_CODE and n >= 2 and not valid & B_STATUS:
            c16[STATUS, i] = u16(b, v)
            valid |= B_STATUS
        elif code == OPT_PREFERENCE and n >= 1 and not valid & B_PREFERENCE:
            c8[PREFERENCE, i] = u8(b, v)
            valid |= B_PREFERENCE
        elif code == OPT_IA_NA or code == OPT_IA_TA or code == OPT_IA_PD:
            listed, more, ia_fault = _ia(b, code, v, v + n, i, listed, k8, k16, k32, k64)
            fault |= ia_fault
            if more:
                valid |= MORE
        q = v + n
    c8[FAULT, i] = fault
    c32[VALID, i] = valid
    return listed


@kernel("(u1[::1], i8[::1], i8[::1], i8[::1], u2[::1], "
        "u1[:, ::1], u2[:, ::1], u4[:, ::1], u8[:, ::1], u1[:, ::1], u2[:, ::1], u4[:, ::1], u8[:, ::1], u2[::1])",
        _nrt=False, nogil=True)
def parse_dhcp6(data, start, end, claimed, port, c8, c16, c32, c64, k8, k16, k32, k64, count):
    """Fill the dhcp6 table's arrays for messages data[start[i]:end[i]] (claimed[i]: their end per IP)."""
    for i in range(start.shape[0]):
        count[i] = _message(data, start[i], end[i], claimed[i] - start[i], port[i], i,
                            c8, c16, c32, c64, k8, k16, k32, k64)


def _candidates(batch) -> np.ndarray:
    return candidate_rows(batch, udp_port_mask(batch, [CLIENT_PORT, SERVER_PORT]))


def _parse(batch, rows, groups, child_groups, counts) -> None:
    start, end, claimed = message_bounds(batch, rows, "payload_off")
    port = service_port(batch, (SERVER_PORT, CLIENT_PORT), rows)
    parse_dhcp6(np.ascontiguousarray(batch.data, dtype=np.uint8), start, end, claimed, port,
                *groups, *child_groups[ADDRESSES.name], counts[ADDRESSES.name])
    fault = Layout(with_valid(FIELDS)).columns(groups)["fault"]
    fault |= np.where(udp_length_differs(batch, rows), F_UDP_LENGTH, 0).astype(np.uint8)


SPEC = Spec("dhcp6", __doc__.splitlines()[0], FIELDS, _candidates, _parse, (ADDRESSES,))

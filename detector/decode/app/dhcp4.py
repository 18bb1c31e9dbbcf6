"""The `dhcp4` table: BOOTP (RFC 951) and DHCPv4 (RFC 2131, options RFC 2132) on UDP 67 and 68.

One entry per UDP datagram to or from port 67 or 68, its options listed in
the child table `dhcp_opt` (code, length, where: at most `MAX_OPTIONS` per
message, the rest flagged MORE). A message is the fixed BOOTP header (236
bytes: op, hardware type and length, hops, transaction id, seconds, flags,
the client, your, next-server and relay-agent addresses, the client
hardware address, `sname` and `file`), then the magic cookie 99.130.83.99
and the options (a run of pad bytes listed as one option 0). Option 52 (overload, RFC 2132 section 9.3) continues the
options in `file` (bit 1), then in `sname` (bit 2); the option is honoured
only where it appears in the options field itself.

The options a rule reads are kept as fields: the message type (53), the
server identifier (54), the requested address (50), the lease (51), the
first router (3) and the first DNS server (6) with their counts, the relay
agent information (82: circuit-id and remote-id lengths and a 64-bit hash of
their bytes, for grouping) and whether a client identifier (61) is there.
An option repeated (RFC 3396 concatenation) is read from its first
instance. IPv4 addresses are the schema's halves (IPv4-mapped, as the rip
and vrrp tables hold them). An option's value is read only when the whole
option was captured and fits its field; a length that runs past either
flags the message TRUNCATED.

`fault` says why a message is malformed by its own bytes (FAULTS, one bit
each; 0: nothing wrong in what was captured): shorter than the BOOTP
header, an op that is neither request nor reply, an option running past
its field or the message, options that never close with an end option, a
UDP length field other than the IP header's; judged against the message's
length, never against the capture's end.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ...cpu import kernel
from ..read import mac, u8, u16, u32
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
    udp_port_mask,
    with_valid,
)

SERVER_PORT, CLIENT_PORT = 67, 68          # RFC 2131 section 4.1
BOOTREQUEST, BOOTREPLY = 1, 2              # RFC 951 op
HTYPE_ETHERNET, MAC_LEN = 1, 6             # RFC 1700 hardware type 1 (10 Mb Ethernet), 6-byte address
FIXED_BYTES = 236                          # RFC 2131 section 2: op .. file
ADDRESS_BYTES = 28                         # op .. giaddr
CHADDR, SNAME, FILE, COOKIE = 28, 44, 108, 236
SNAME_BYTES, FILE_BYTES = 64, 128
MAGIC_COOKIE = 0x63825363                  # RFC 2131 section 3: 99.130.83.99
OPTIONS = COOKIE + 4
BROADCAST_FLAG = 0x8000                    # RFC 2131 section 2, figure 2
MAX_OPTIONS = 64                           # per message; the rest is flagged MORE

# why a message is malformed (bits of `fault`), worded as Wireshark's expert information would
F_SHORT, F_OP, F_OPTION_PAST, F_NO_END, F_UDP_LENGTH = (1 << k for k in range(5))
FAULTS = {
    F_SHORT: f"shorter than the {FIXED_BYTES}-byte BOOTP header",
    F_OP: "unknown op (neither BOOTREQUEST 1 nor BOOTREPLY 2)",
    F_OPTION_PAST: "option running past the end of its field or of the message",
    F_NO_END: "End option missing",
    F_UDP_LENGTH: "UDP length field differs from the IP length (the stack trims or drops the datagram)",
}

# option codes (RFC 2132)
PAD, END = 0, 255
OPT_ROUTER, OPT_DNS = 3, 6
OPT_REQUESTED_IP, OPT_LEASE, OPT_OVERLOAD, OPT_MSG_TYPE, OPT_SERVER_ID = 50, 51, 52, 53, 54
OPT_CLIENT_ID = 61
OPT_AGENT = 82                             # RFC 3046 relay agent information
SUB_CIRCUIT_ID, SUB_REMOTE_ID = 1, 2       # RFC 3046 section 3
OVERLOAD_FILE, OVERLOAD_SNAME = 1, 2       # RFC 2132 section 9.3

# DHCP message types (RFC 2132 section 9.6)
DISCOVER, OFFER, REQUEST, DECLINE, ACK, NAK, RELEASE, INFORM = range(1, 9)
MESSAGE_TYPES = {DISCOVER: "DISCOVER", OFFER: "OFFER", REQUEST: "REQUEST", DECLINE: "DECLINE", ACK: "ACK",
                 NAK: "NAK", RELEASE: "RELEASE", INFORM: "INFORM"}

# where an option was found (dhcp_opt.where)
IN_OPTIONS, IN_FILE, IN_SNAME = 0, 1, 2

# validity bits of dhcp4
B_HEADER = 1 << 0          # op .. flags
B_ADDRESSES = 1 << 1       # ciaddr .. giaddr
B_CHADDR = 1 << 2          # a 6-byte Ethernet client address
B_COOKIE = 1 << 3          # the magic cookie: the options are DHCP's
B_MSG_TYPE = 1 << 4
B_SERVER_ID = 1 << 5
B_REQUESTED_IP = 1 << 6
B_LEASE = 1 << 7
B_OVERLOAD = 1 << 8
B_ROUTER = 1 << 9
B_DNS = 1 << 10
B_AGENT = 1 << 11
B_CIRCUIT_ID = 1 << 12
B_REMOTE_ID = 1 << 13
B_CLIENT_ID = 1 << 14
B_END = 1 << 15
# of dhcp_opt
B_OPTION = 1 << 0


def _ip(bit: int, what: str) -> tuple[Field, Field]:
    return (Field(np.uint64, bit, f"{what}, high half (the schema's 128 bits: IPv4-mapped, so 0)", "ip"),
            Field(np.uint64, bit, f"{what}, low half", "ip"))


FIELDS = {
    "port": Field(np.uint16, 0, "the DHCP port: the destination port if it is 67 or 68, else the source port"),
    "length": Field(np.uint32, 0, "message length: the UDP payload per the IP header, bytes"),
    "op": Field(np.uint8, B_HEADER, "BOOTP op (1 request, 2 reply)"),
    "htype": Field(np.uint8, B_HEADER, "hardware type (1 Ethernet)"),
    "hlen": Field(np.uint8, B_HEADER, "hardware address length, bytes"),
    "hops": Field(np.uint8, B_HEADER, "relay hops"),
    "xid": Field(np.uint32, B_HEADER, "transaction id"),
    "secs": Field(np.uint16, B_HEADER, "seconds since the client began, s"),
    "flags": Field(np.uint16, B_HEADER, "flags as sent"),
    "broadcast": Field(np.uint8, B_HEADER, "1 when the broadcast flag is set"),
    **dict(zip(("ciaddr_hi", "ciaddr_lo"), _ip(B_ADDRESSES, "client address (ciaddr)"))),
    **dict(zip(("yiaddr_hi", "yiaddr_lo"), _ip(B_ADDRESSES, "address offered to the client (yiaddr)"))),
    **dict(zip(("siaddr_hi", "siaddr_lo"), _ip(B_ADDRESSES, "next server address (siaddr)"))),
    **dict(zip(("giaddr_hi", "giaddr_lo"), _ip(B_ADDRESSES, "relay agent address (giaddr)"))),
    "chaddr": Field(np.uint64, B_CHADDR, "client MAC (hardware type 1, length 6)", "mac"),
    "msg_type": Field(np.uint8, B_MSG_TYPE, "DHCP message type, option 53 (MESSAGE_TYPES)"),
    **dict(zip(("server_id_hi", "server_id_lo"), _ip(B_SERVER_ID, "server identifier, option 54"))),
    **dict(zip(("requested_ip_hi", "requested_ip_lo"), _ip(B_REQUESTED_IP, "requested address, option 50"))),
    "lease_s": Field(np.uint32, B_LEASE, "lease time, option 51, s (0xFFFFFFFF: infinite)"),
    "overload": Field(np.uint8, B_OVERLOAD, "option overload, option 52 (1 file, 2 sname, 3 both)"),
    **dict(zip(("router_hi", "router_lo"), _ip(B_ROUTER, "first router, option 3"))),
    "router_count": Field(np.uint8, B_ROUTER, "routers option 3 lists"),
    **dict(zip(("dns_hi", "dns_lo"), _ip(B_DNS, "first DNS server, option 6"))),
    "dns_count": Field(np.uint8, B_DNS, "DNS servers option 6 lists"),
    "agent_len": Field(np.uint8, B_AGENT, "relay agent information, option 82: its length, bytes"),
    "circuit_id_len": Field(np.uint8, B_CIRCUIT_ID, "option 82 agent circuit id (sub-option 1) length, bytes"),
    "circuit_id_hash": Field(np.uint64, B_CIRCUIT_ID, "64-bit FNV-1a hash of the circuit id's bytes"),
    "remote_id_len": Field(np.uint8, B_REMOTE_ID, "option 82 agent remote id (sub-option 2) length, bytes"),
    "remote_id_hash": Field(np.uint64, B_REMOTE_ID, "64-bit FNV-1a hash of the remote id's bytes"),
    "client_id_len": Field(np.uint8, B_CLIENT_ID, "client identifier, option 61: its length, bytes"),
    "options": Field(np.uint16, B_COOKIE, "options the message holds (a run of pads counts one, end counts), listed "
                                         "or not"),
    "end": Field(np.uint8, B_END, "1 when the options close with an end option (255)"),
    "fault": Field(np.uint8, 0, "why the message is malformed by its own bytes (FAULTS bits; 0: nothing wrong in "
                                "what was captured)"),
}
OPTION_FIELDS = {
    "code": Field(np.uint8, B_OPTION, "option code (RFC 2132; 0 a run of pad bytes, 255 end)"),
    "length": Field(np.uint8, B_OPTION, "option length as sent, bytes (0 for end)"),
    "offset": Field(np.uint16, B_OPTION, "offset of the option's code in the message, bytes"),
    "where": Field(np.uint8, B_OPTION, "the field that holds it: 0 options, 1 file, 2 sname (overload)"),
}
OPTION_LIST = Child("dhcp_opt", OPTION_FIELDS, MAX_OPTIONS, "the options of a DHCPv4 message, in order")

_ROW = Layout(with_valid(FIELDS)).row
PORT, LENGTH, VALID = _ROW["port"], _ROW["length"], _ROW["valid"]
OP, HTYPE, HLEN, HOPS, XID, SECS, FLAGS, BROADCAST = (_ROW[n] for n in ("op", "htype", "hlen", "hops", "xid", "secs",
                                                                       "flags", "broadcast"))
CIADDR, YIADDR, SIADDR, GIADDR = (_ROW[n] for n in ("ciaddr_lo", "yiaddr_lo", "siaddr_lo", "giaddr_lo"))
CHADDR_ROW, MSG_TYPE, SERVER_ID, REQUESTED_IP = (_ROW[n] for n in ("chaddr", "msg_type", "server_id_lo",
                                                                  "requested_ip_lo"))
LEASE, OVERLOAD, ROUTER, ROUTER_COUNT, DNS, DNS_COUNT = (_ROW[n] for n in ("lease_s", "overload", "router_lo",
                                                                          "router_count", "dns_lo", "dns_count"))
AGENT_LEN, CIRCUIT_LEN, CIRCUIT_HASH, REMOTE_LEN, REMOTE_HASH = (
    _ROW[n] for n in ("agent_len", "circuit_id_len", "circuit_id_hash", "remote_id_len", "remote_id_hash"))
CLIENT_ID_LEN, OPTION_COUNT, END_ROW, FAULT = _ROW["client_id_len"], _ROW["options"], _ROW["end"], _ROW["fault"]
_OPT_ROW = OPTION_LIST.layout.row
O_CODE, O_LENGTH, O_OFFSET, O_WHERE, O_VALID = (_OPT_ROW[n] for n in ("code", "length", "offset", "where", "valid"))

STATE_SLOTS = 5                            # the option walk's scratch: validity, seen, listed, overload, fault
FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)


@njit(_nrt=False)
def fnv1a(b, p, end):
    """64-bit FNV-1a of b[p:end]."""
    h = FNV_OFFSET
    for q in range(p, end):
        h = (h ^ np.uint64(u8(b, q))) * FNV_PRIME
    return h


@njit(_nrt=False)
def _v4(b, p):
    return IPV4_MAPPED | np.uint64(u32(b, p))


@njit(_nrt=False)
def _agent(b, p, end, i, c8, c64):
    """Option 82's sub-options b[p:end] (all captured): the circuit and remote ids; returns validity bits."""
    valid = np.uint32(0)
    while p + 2 <= end:
        sub = u8(b, p)
        n = u8(b, p + 1)
        if p + 2 + n > end:
            break
        if sub == SUB_CIRCUIT_ID and not valid & B_CIRCUIT_ID:
            c8[CIRCUIT_LEN, i] = n
            c64[CIRCUIT_HASH, i] = fnv1a(b, p + 2, p + 2 + n)
            valid |= B_CIRCUIT_ID
        elif sub == SUB_REMOTE_ID and not valid & B_REMOTE_ID:
            c8[REMOTE_LEN, i] = n
            c64[REMOTE_HASH, i] = fnv1a(b, p + 2, p + 2 + n)
            valid |= B_REMOTE_ID
        p += 2 + n
    return valid


@njit(_nrt=False)
def _options(b, s, p, limit, cap_end, where, i, state, c8, c32, c64, k8, k16, k32):
    """Walk the options of b[p:limit] (the field's end per the message; `cap_end` the captured end).

    `state` holds [validity bits, options seen, options listed, overload, fault]; returns state updated in place.
    """
    valid = state[0]
    closed = False
    while p < limit:
        if p >= cap_end:
            valid |= TRUNCATED
            break
        code = u8(b, p)
        run = 1
        if code == PAD:      # a run of pad bytes is listed once (code 0, length 0)
            while p + run < limit and p + run < cap_end and u8(b, p + run) == PAD:
                run += 1
        seen = state[1]
        state[1] = seen + 1
        n = 0
        whole = True
        if code != END and code != PAD:
            if p + 2 > limit or p + 2 > cap_end:
                valid |= TRUNCATED
                whole = False
                if p + 2 > limit:
                    state[4] |= F_OPTION_PAST
            else:
                n = u8(b, p + 1)
                if p + 2 + n > limit or p + 2 + n > cap_end:
                    valid |= TRUNCATED
                    whole = False
                    if p + 2 + n > limit:
                        state[4] |= F_OPTION_PAST
        listed = state[2]
        if listed < MAX_OPTIONS:
            slot = i * MAX_OPTIONS + listed
            k8[O_CODE, slot] = code
            k8[O_LENGTH, slot] = n
            k16[O_OFFSET, slot] = p - s
            k8[O_WHERE, slot] = where
            k32[O_VALID, slot] = B_OPTION
            state[2] = listed + 1
        else:
            valid |= MORE
        if code == PAD:
            p += run
            continue
        if code == END:
            if where == IN_OPTIONS:
                c8[END_ROW, i] = 1
                valid |= B_END
            closed = True
            break
        if not whole:
            closed = True
            break
        v = p + 2
        if code == OPT_MSG_TYPE and n >= 1 and not valid & B_MSG_TYPE:
            c8[MSG_TYPE, i] = u8(b, v)
            valid |= B_MSG_TYPE
        elif code == OPT_SERVER_ID and n >= 4 and not valid & B_SERVER_ID:
            c64[SERVER_ID, i] = _v4(b, v)
            valid |= B_SERVER_ID
        elif code == OPT_REQUESTED_IP and n >= 4 and not valid & B_REQUESTED_IP:
            c64[REQUESTED_IP, i] = _v4(b, v)
            valid |= B_REQUESTED_IP
        elif code == OPT_LEASE and n >= 4 and not valid & B_LEASE:
            c32[LEASE, i] = u32(b, v)
            valid |= B_LEASE
        elif code == OPT_OVERLOAD and n >= 1 and where == IN_OPTIONS and not valid & B_OVERLOAD:
            c8[OVERLOAD, i] = u8(b, v)
            state[3] = u8(b, v)
            valid |= B_OVERLOAD
        elif code == OPT_ROUTER and n >= 4 and not valid & B_ROUTER:
            c64[ROUTER, i] = _v4(b, v)
            c8[ROUTER_COUNT, i] = n // 4
            valid |= B_ROUTER
        elif code == OPT_DNS and n >= 4 and not valid & B_DNS:
            c64[DNS, i] = _v4(b, v)
            c8[DNS_COUNT, i] = n // 4
            valid |= B_DNS
        elif code == OPT_AGENT and not valid & B_AGENT:
            c8[AGENT_LEN, i] = n
            valid |= B_AGENT | _agent(b, v, v + n, i, c8, c64)
        elif code == OPT_CLIENT_ID and not valid & B_CLIENT_ID:
            c8[CLIENT_ID_LEN, i] = n
            valid |= B_CLIENT_ID
        p = v + n
    if where == IN_OPTIONS and not closed and p >= limit and limit <= cap_end:
        state[4] |= F_NO_END          # the whole options field read, and no end option closed it
    state[0] = valid


@njit(_nrt=False)
def _message(b, s, end, length, port, i, state, c8, c16, c32, c64, k8, k16, k32):
    """Parse one message b[s:end] (`length` bytes per the IP header); returns the options it listed."""
    c16[PORT, i] = port
    c32[LENGTH, i] = length
    valid = np.uint32(TRUNCATED) if end - s < length else np.uint32(0)
    fault = F_SHORT if length < FIXED_BYTES else 0
    if end - s >= 1 and u8(b, s) != BOOTREQUEST and u8(b, s) != BOOTREPLY:
        fault |= F_OP
    c8[FAULT, i] = fault
    if end - s < 12:
        c32[VALID, i] = valid
        return 0
    c8[OP, i] = u8(b, s)
    c8[HTYPE, i] = u8(b, s + 1)
    c8[HLEN, i] = u8(b, s + 2)
    c8[HOPS, i] = u8(b, s + 3)
    c32[XID, i] = u32(b, s + 4)
    c16[SECS, i] = u16(b, s + 8)
    flags = u16(b, s + 10)
    c16[FLAGS, i] = flags
    c8[BROADCAST, i] = 1 if flags & BROADCAST_FLAG else 0
    valid |= B_HEADER
    if end - s < ADDRESS_BYTES:
        c32[VALID, i] = valid
        return 0
    c64[CIADDR, i] = _v4(b, s + 12)
    c64[YIADDR, i] = _v4(b, s + 16)
    c64[SIADDR, i] = _v4(b, s + 20)
    c64[GIADDR, i] = _v4(b, s + 24)
    valid |= B_ADDRESSES
    if u8(b, s + 1) == HTYPE_ETHERNET and u8(b, s + 2) == MAC_LEN and end - s >= CHADDR + MAC_LEN:
        c64[CHADDR_ROW, i] = mac(b, s + CHADDR)
        valid |= B_CHADDR
    if length < OPTIONS or end - s < OPTIONS or u32(b, s + COOKIE) != MAGIC_COOKIE:
        c32[VALID, i] = valid        # BOOTP, or cut before the cookie: no DHCP options
        return 0
    valid |= B_COOKIE
    state[0] = valid
    state[1] = 0
    state[2] = 0
    state[3] = 0
    state[4] = fault
    _options(b, s, s + OPTIONS, s + length, end, IN_OPTIONS, i, state, c8, c32, c64, k8, k16, k32)
    overload = state[3]
    # RFC 2132 section 9.3: with option 52, `file` is read next, then `sname`
    if overload & OVERLOAD_FILE:
        _options(b, s, s + FILE, s + FILE + FILE_BYTES, end, IN_FILE, i, state, c8, c32, c64, k8, k16, k32)
    if overload & OVERLOAD_SNAME:
        _options(b, s, s + SNAME, s + SNAME + SNAME_BYTES, end, IN_SNAME, i, state, c8, c32, c64, k8, k16, k32)
    c16[OPTION_COUNT, i] = state[1]
    c8[FAULT, i] = state[4]
    c32[VALID, i] = state[0]
    return state[2]


@kernel("(u1[::1], i8[::1], i8[::1], i8[::1], u2[::1], i8[::1], "
        "u1[:, ::1], u2[:, ::1], u4[:, ::1], u8[:, ::1], u1[:, ::1], u2[:, ::1], u4[:, ::1], u8[:, ::1], u2[::1])",
        _nrt=False, nogil=True)
def parse_dhcp4(data, start, end, claimed, port, state, c8, c16, c32, c64, k8, k16, k32, k64, count):
    """Fill the dhcp4 table's arrays for messages data[start[i]:end[i]] (claimed[i]: their end per IP);
    `state` is the option walk's scratch (STATE_SLOTS int64), so the kernel allocates nothing."""
    for i in range(start.shape[0]):
        count[i] = _message(data, start[i], end[i], claimed[i] - start[i], port[i], i, state,
                            c8, c16, c32, c64, k8, k16, k32)


def _candidates(batch) -> np.ndarray:
    return candidate_rows(batch, udp_port_mask(batch, [SERVER_PORT, CLIENT_PORT]))


def _parse(batch, rows, groups, child_groups, counts) -> None:
    start, end, claimed = message_bounds(batch, rows, "payload_off")
    port = service_port(batch, (SERVER_PORT, CLIENT_PORT), rows)
    parse_dhcp4(np.ascontiguousarray(batch.data, dtype=np.uint8), start, end, claimed, port,
                np.zeros(STATE_SLOTS, dtype=np.int64),
                *groups, *child_groups[OPTION_LIST.name], counts[OPTION_LIST.name])
    fault = Layout(with_valid(FIELDS)).columns(groups)["fault"]
    fault |= np.where(udp_length_differs(batch, rows), F_UDP_LENGTH, 0).astype(np.uint8)


SPEC = Spec("dhcp4", __doc__.splitlines()[0], FIELDS, _candidates, _parse, (OPTION_LIST,))

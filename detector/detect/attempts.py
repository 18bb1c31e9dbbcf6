"""Flow attempts: each flow of the flow table as one source's attempt to reach a (host, port) target.

What the rules reading connection attempts share (failed attempts, session
storms, repeated logins): the flow table's columns as numbers (FlowTable.columns,
read without pandas, or its DataFrame view), one row per flow whose
originator sent something, asked for an answer (ICMP errors are answers) and
went to a unicast address, with whether it failed, the probe it was, and
whether the capture saw it begin. A failed attempt:

- TCP whose originator sent only SYNs (Zeek history S, SW, Sr, SWr, as
  ncsa/bro-simple-scan counts them), or only bare ACKs, FINs or no flags
  at all in at most PROBE_PACKETS_MAX packets (ACK sweeps, FIN/NULL/Xmas
  probes: ntopng's "incomplete" flows), with no payload either way and no
  answer but resets;
- UDP, ICMP requests (echo, timestamp, address mask) and other IP
  protocols sent to a unicast address without any reply.

Beside the model, what those rules count with alike: the busiest window of
each group's times (busiest_window), the most flows open at one instant
(most_open), and a span as a message says it (duration_text).

The carrier flows of UDP tunnels (VXLAN, Geneve, GTP-U) are no attempts:
one per inner flow, they mirror the inner flows, which are flows of the
table themselves. Backscatter (SYN-ACKs and resets arriving unsolicited) is
none either: the flow table makes their receiver the originator, and it
sent nothing.
"""
from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

import numpy as np

from ..decode.tunnels import PORT_GENEVE, PORT_GRE_UDP, PORT_GTP_U, PORT_VXLAN, PORT_VXLAN_GPE
from ..errors import RuleError
from ..flows.view import FLOW_PROTO_NAMES
from ..schema import PROTO_ICMP, PROTO_ICMP6, PROTO_SCTP, PROTO_TCP, PROTO_UDP, TH_ACK, TH_RST, TH_SYN
from .columns import flow_time_ns, ip_halves, ip_text

if TYPE_CHECKING:
    from .detector import AnalysisContext

# A bare ACK, FIN or NULL probe is one or two packets (nmap sends one and retries once); a flow of more
# such packets is an idle connection picked up mid-stream (keepalives), not a probe.
PROBE_PACKETS_MAX = 2
# ICMP messages that ask for an answer: echo, timestamp, information and address-mask requests (RFC 792,
# RFC 950), ICMPv6 echo request (RFC 4443). Errors are answers to other traffic, never attempts.
ICMP_REQUESTS = (8, 13, 15, 17)
ICMP6_REQUESTS = (128,)
# UDP ports of the tunnels whose carrier flows the flow table keeps beside their inner flows: VXLAN,
# VXLAN-GPE, Geneve, GTP-U, GRE-in-UDP
TUNNEL_PORTS = (PORT_VXLAN, PORT_VXLAN_GPE, PORT_GENEVE, PORT_GTP_U, PORT_GRE_UDP)
# what a probe was, for the evidence
PROBE_SYN, PROBE_ACK, PROBE_BARE, PROBE_UDP, PROBE_ICMP, PROBE_OTHER = range(6)
PROBE_NAMES = ("TCP SYN", "TCP ACK", "TCP FIN/NULL/Xmas", "UDP", "ICMP request", "other IP protocol")


def flow_numbers(flows) -> dict[str, np.ndarray]:
    """The columns the rule reads, as numbers: from FlowTable.coded_columns() (AnalysisContext.flow_columns, no
    pandas) or from the DataFrame view (a test's, the API's, a report figure's)."""
    if isinstance(flows, dict):
        cols = {name: flows[name] for name in NUMERIC_COLUMNS}
        history = flows["history"]
        begins = np.array([text.startswith("S") for text in history.value_texts()], dtype=bool)
        cols["syn_first"] = begins[np.asarray(history.codes, dtype=np.intp)] if len(begins) else np.zeros(0, bool)
        return cols
    cols = {name: flows[name].to_numpy() for name in NUMERIC_COLUMNS if name in flows and name not in TEXT_VIEW}
    for side, column in (("src", "src_ip"), ("dest", "dest_ip")):
        cols[f"{side}_ip_hi"], cols[f"{side}_ip_lo"] = _address_halves(flows[column])
    cols["proto"] = flows["ip_proto"].to_numpy(np.int64) if "ip_proto" in flows else _proto_numbers(flows["proto"])
    cols["first_seen"], cols["last_seen"] = flow_time_ns(flows["first_seen"]), flow_time_ns(flows["last_seen"])
    cols["syn_first"] = flows["history"].astype(str).str.startswith("S").to_numpy(bool)
    return cols


# FlowTable.coded_columns() names the rule reads; the DataFrame view has the addresses as text and times as datetimes
NUMERIC_COLUMNS = ("src_ip_hi", "src_ip_lo", "dest_ip_hi", "dest_ip_lo", "src_port", "dest_port", "proto",
                   "src2dst_packets", "dst2src_packets", "src2dst_payload_bytes", "dst2src_payload_bytes",
                   "src2dst_tcp_flags", "dst2src_tcp_flags", "first_seen", "last_seen", "first_frame")
TEXT_VIEW = ("src_ip_hi", "src_ip_lo", "dest_ip_hi", "dest_ip_lo", "proto", "first_seen", "last_seen")


def attempts_of(ctx: AnalysisContext) -> dict:
    """attempts() of the context's flow table, read without pandas when the context holds the table."""
    columns = ctx.flow_columns()
    return attempts(flow_numbers(columns if columns is not None else ctx.flows))


class Addresses:
    """Distinct addresses (uint64 halves) by code; a code's text is built only when asked for."""

    def __init__(self, hi: np.ndarray, lo: np.ndarray):
        self.hi, self.lo = hi, lo

    def __getitem__(self, code) -> str:
        return ip_text(self.hi[code], self.lo[code])

    def code_of(self, text: str) -> int:
        """The code of an address text; -1 when it is not among them."""
        halves = ip_halves(text)
        if halves is None:
            return -1
        at = np.flatnonzero((self.hi == np.uint64(halves[0])) & (self.lo == np.uint64(halves[1])))
        return int(at[0]) if len(at) else -1


def attempts(cols: dict) -> dict:
    """The flows (flow_numbers) as attempts: source, host, service and time, whether each failed, its
    probe type and the packets its originator sent, one row per flow whose originator sent anything
    (backscatter's receiver sent nothing) and that asked for an answer (not ICMP errors), to a unicast
    address."""
    if len(cols.get("proto", ())) == 0:
        return _empty()
    as_int = {name: np.asarray(cols[name]).astype(np.int64) for name in
              ("proto", "src_port", "dest_port", "src2dst_packets", "dst2src_packets", "src2dst_payload_bytes",
               "dst2src_payload_bytes", "src2dst_tcp_flags", "dst2src_tcp_flags", "first_frame")}
    proto, sport, dport = as_int["proto"], as_int["src_port"], as_int["dest_port"]
    sent, back = as_int["src2dst_packets"], as_int["dst2src_packets"]
    icmp = (proto == PROTO_ICMP) | (proto == PROTO_ICMP6)
    request = ((proto == PROTO_ICMP) & np.isin(sport, ICMP_REQUESTS)) | (
        (proto == PROTO_ICMP6) & np.isin(sport, ICMP6_REQUESTS))
    src_codes, src_hi, src_lo = _codes(cols["src_ip_hi"], cols["src_ip_lo"])
    dst_codes, dst_hi, dst_lo = _codes(cols["dest_ip_hi"], cols["dest_ip_lo"])
    unicast = ~group_addresses(dst_hi, dst_lo)[dst_codes]
    # a UDP tunnel's carrier flows mirror its inner flows (one outer source port per inner flow, RFC 7348
    # section 5), which are flows of the table themselves
    carrier = (proto == PROTO_UDP) & np.isin(dport, TUNNEL_PORTS)
    keep = (sent > 0) & unicast & (~icmp | request) & ~carrier

    tcp = proto == PROTO_TCP
    o_flags, r_flags = as_int["src2dst_tcp_flags"], as_int["dst2src_tcp_flags"]
    silent = (as_int["src2dst_payload_bytes"] == 0) & (as_int["dst2src_payload_bytes"] == 0)
    core = o_flags & (TH_SYN | TH_ACK | TH_RST)
    syn_probe = core == TH_SYN
    ack_probe = (core == TH_ACK) & (sent <= PROBE_PACKETS_MAX)
    bare_probe = (core == 0) & (sent <= PROBE_PACKETS_MAX)
    # no answer, or only resets: a closed port (REJ) or a host that knows no such connection (ACK sweep)
    refused = (back == 0) | (((r_flags & ~(TH_RST | TH_ACK)) == 0) & ((r_flags & TH_RST) != 0))
    tcp_failed = tcp & silent & refused & (syn_probe | ack_probe | bare_probe)
    failed = np.where(tcp, tcp_failed, back == 0)

    probe = np.select([tcp & syn_probe, tcp & ack_probe, tcp, proto == PROTO_UDP, icmp],
                      [PROBE_SYN, PROBE_ACK, PROBE_BARE, PROBE_UDP, PROBE_ICMP], PROBE_OTHER)
    # ICMP's service is the request type; other protocols have no ports
    port = np.where(icmp, sport, np.where(tcp | (proto == PROTO_UDP) | (proto == PROTO_SCTP), dport, 0))
    # a flow the capture saw begin: TCP from the originator's SYN (not picked up mid-stream) or a probe
    opened = np.where(tcp, np.asarray(cols["syn_first"], dtype=bool) | tcp_failed, True)
    return {
        "src": src_codes[keep], "dst": dst_codes[keep], "proto": proto[keep], "port": port[keep],
        "first_ns": np.asarray(cols["first_seen"], dtype=np.int64)[keep],
        "last_ns": np.asarray(cols["last_seen"], dtype=np.int64)[keep],
        "frame": as_int["first_frame"][keep], "failed": failed[keep], "opened": opened[keep],
        "answered": (back > 0)[keep], "probe": probe[keep].astype(np.int64), "sent": sent[keep],
        "src_names": Addresses(src_hi, src_lo), "dst_names": Addresses(dst_hi, dst_lo),
    }


def _empty() -> dict:
    none = np.zeros(0, dtype=np.int64)
    out = dict.fromkeys(("src", "dst", "proto", "port", "first_ns", "last_ns", "frame", "probe", "sent"), none)
    out.update({name: none.astype(bool) for name in ("failed", "opened", "answered")})
    nowhere = Addresses(none.astype(np.uint64), none.astype(np.uint64))
    out.update(src_names=nowhere, dst_names=nowhere)
    return out


_PROTO_BY_NAME = {name: number for number, name in FLOW_PROTO_NAMES.items()}


def _proto_numbers(column) -> np.ndarray:
    """Protocol numbers of the DataFrame view's proto column (names as the table writes them, or numbers)."""
    import pandas as pd
    if pd.api.types.is_numeric_dtype(column):
        return column.to_numpy(np.int64)
    codes, names = pd.factorize(column)
    numbers = np.array([_PROTO_BY_NAME.get(str(name).lower(), int(name) if str(name).isdigit() else -1)
                        for name in names], dtype=np.int64)
    return numbers[codes] if len(names) else np.zeros(len(column), dtype=np.int64)


def _address_halves(column) -> tuple[np.ndarray, np.ndarray]:
    """The schema's uint64 halves of an address text column, parsed once per distinct address."""
    import pandas as pd
    codes, names = pd.factorize(column)
    halves = np.array([ip_halves(str(name)) or (0, 0) for name in names], dtype=np.uint64).reshape(-1, 2)
    return halves[codes, 0], halves[codes, 1]


def _codes(hi, lo) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A code per address (hi, lo) and the distinct addresses by code."""
    hi, lo = np.asarray(hi, dtype=np.uint64), np.asarray(lo, dtype=np.uint64)
    order = np.lexsort((lo, hi))
    new = np.concatenate(([True], (hi[order][1:] != hi[order][:-1]) | (lo[order][1:] != lo[order][:-1])))
    codes = np.empty(len(hi), dtype=np.int64)
    codes[order] = np.cumsum(new) - 1
    return codes, hi[order][new], lo[order][new]


def group_addresses(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Which addresses are multicast (224/4, ff00::/8) or the limited broadcast (no host answers those)."""
    v4 = (hi == 0) & ((lo >> np.uint64(32)) == np.uint64(0xFFFF))
    v4_address = lo & np.uint64(0xFFFFFFFF)
    return ((v4 & ((v4_address >> np.uint64(28)) == np.uint64(0xE))) | (v4 & (v4_address == np.uint64(0xFFFFFFFF)))
            | (~v4 & ((hi >> np.uint64(56)) == np.uint64(0xFF))))


def busiest_window(groups: np.ndarray, times: np.ndarray, window_ns: int) -> tuple[np.ndarray, np.ndarray,
                                                                                     np.ndarray]:
    """Per group (sorted unique values of `groups`): the most rows whose times fall within one window of
    `window_ns` starting at one of them, and that window's start. Returns (group values, counts, starts)."""
    if len(groups) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    order = np.lexsort((times, groups))
    g, t = groups[order], times[order]
    # (group, time) as complex numbers sort lexicographically: one searchsorted finds each window's end
    # within its own group (float times lose nanoseconds only, nothing a 15-minute window notices)
    base = t.min()
    keys = g.astype(np.float64) + 1j * (t - base).astype(np.float64)
    ends = np.searchsorted(keys, g.astype(np.float64) + 1j * ((t - base).astype(np.float64) + window_ns))
    inside = ends - np.arange(len(g))
    starts = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))
    best = np.maximum.reduceat(inside, starts)
    # the first row of each group reaching its best count opens the window
    at = np.flatnonzero(inside == np.repeat(best, np.diff(np.append(starts, len(g)))))
    first = at[np.concatenate(([True], g[at][1:] != g[at][:-1]))]
    return g[starts], best, t[first]


def by_source(src: np.ndarray, rows: np.ndarray):
    """A function giving the `rows` whose source is a given one, from one sort of them by source."""
    ordered = rows[np.argsort(src[rows], kind="stable")]
    keys = src[ordered]
    return lambda value: ordered[np.searchsorted(keys, value):np.searchsorted(keys, value, side="right")]


def most_open(first_ns: np.ndarray, last_ns: np.ndarray) -> int:
    """The most flows open at one instant, each from its first to its last packet (both included)."""
    if len(first_ns) == 0:
        return 0
    times = np.concatenate([first_ns, last_ns])
    # at equal times an opening counts before a closing: a flow of one packet is open at that instant
    steps = np.concatenate([np.ones(len(first_ns), np.int64), -np.ones(len(last_ns), np.int64)])
    order = np.lexsort((-steps, times))
    return int(np.cumsum(steps[order]).max())


def duration_text(seconds: float) -> str:
    """A span as a message says it: "2.8 s" under a minute, "1m10s" above."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def parse_networks(rule, key: str, values) -> tuple:
    nets = []
    for text in values:
        try:
            nets.append(ipaddress.ip_network(str(text), strict=False))
        except ValueError:      # its message repeats the value: an error says what is wrong, never the text
            raise RuleError(rule.path, f"params.{key}", "not a network in CIDR notation (10.0.0.0/8, 2001:db8::/32)"
                            ) from None
    return tuple(nets)


def in_networks(address: str, nets: tuple) -> bool:
    if not nets:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip.version == net.version and ip in net for net in nets)


def service_text(svc: int) -> str:
    proto, port = int(svc) >> 16, int(svc) & 0xFFFF
    name = FLOW_PROTO_NAMES.get(proto, str(proto))
    if proto in (PROTO_ICMP, PROTO_ICMP6):
        return f"{name} type {port}"
    if proto in (PROTO_TCP, PROTO_UDP, PROTO_SCTP):
        return f"{port}/{name}"
    return f"IP protocol {proto}"

"""scan: one source failing to reach many (host, port) targets within 15 minutes.

Infected subscribers "iterate over IP addresses" (seed 003): each probe is
a connection attempt nobody answers, or answers with a reset. A failed
attempt is a flow of the flow table, judged on its final state:

- TCP whose originator sent only SYNs (Zeek history S, SW, Sr, SWr, as
  ncsa/bro-simple-scan counts them), or only bare ACKs, FINs or no flags
  at all in at most PROBE_PACKETS_MAX packets (ACK sweeps, FIN/NULL/Xmas
  scans: ntopng's "incomplete" flows), with no payload either way and no
  answer but resets;
- UDP, ICMP requests (echo, timestamp, address mask) and other IP
  protocols sent to a unicast address without any reply; the carrier flows
  of UDP tunnels (VXLAN, Geneve, GTP-U) are not attempts, their inner flows
  are judged instead.

A target is (host, protocol, port); ICMP's "port" is the request type. A
target that answered the same source at any time is no scan target (a
resolver's lost query, a NAT gateway's one dead server). Per source, the
most targets first tried within any SCAN_WINDOW_S decide, as in
bro-simple-scan (scan_timeout 15 min) and Zeek's scripts/policy/misc/scan.zeek:
`remote_targets` 25 unique targets for a remote source, `local_targets` 250
for a local one; `knock_hosts` 20 hosts on one port (remote sources only,
as "knock-knock"); `port_scan_ports` 15 ports of one host (Zeek's
port_scan_threshold, any source). Remote scanners are low (the Internet's
background), local ones medium (an infected or misused host of ours).

Near-misses are kept at info with the reason: a source whose targets in
the scan's scope mostly answered (`min_failed_ratio`: a resolver, a NAT
gateway, a proxy), and UDP to many hosts on many high ports (P2P peers,
DHT pings that go unanswered). Backscatter (SYN-ACKs and resets arriving
unsolicited) never counts: the flow table makes their receiver the
originator, and it sent nothing. Sources in `allowlist` are not judged.

Local sources are those of the site file's `local_networks` when it gives
them (`--site`), else those of the rule's `local_networks` parameter
(Zeek's Site::private_address_space, which Zeek counts as local by default).

State: none of its own. The rule reads the flow table in findings(), which
already merges files and cluster partitions; a watch sees only its window.
"""
from __future__ import annotations

import ipaddress

import numpy as np

from ..decode.tunnels import PORT_GENEVE, PORT_GRE_UDP, PORT_GTP_U, PORT_VXLAN, PORT_VXLAN_GPE
from ..errors import RuleError
from ..findings import Finding, iso_time
from ..flows.view import FLOW_PROTO_NAMES
from ..schema import PROTO_ICMP, PROTO_ICMP6, PROTO_SCTP, PROTO_TCP, PROTO_UDP, TH_ACK, TH_RST, TH_SYN
from ..units import NS
from .base import (
    ALERT_SECONDS,
    COUNT,
    MIN_RATE_WINDOW_S,
    RATIO,
    AnalysisContext,
    Detector,
    Param,
    Range,
    ReportFigure,
    TimeBins,
    check_merge,
    evidence_frames,
    flow_time_ns,
    ip_halves,
    ip_text,
    mix64,
    register,
)

# Flows a scan is counted over: bro-simple-scan forgets a scanner after 15 minutes without attempts; the
# busiest 15-minute stretch is what the thresholds are held against.
SCAN_WINDOW_S = 900.0
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
# Sources judged per run: the most prolific ones; a capture of a million one-probe sources costs nothing.
CANDIDATES_MAX = 1024
# Samples named in a finding's evidence.
SAMPLES = 10
# UDP destination ports from here up are ephemeral or P2P ports: many hosts on many of them is P2P traffic.
HIGH_PORT = 1024
# Zeek's scan.zeek classifies a scanner's targets: one port (or a few) is an address scan, one host (or a
# few) a port scan; this is its "few" (analyze_unique_hostports).
FEW = 5

# what a probe was, for the evidence and the kind of scan
PROBE_SYN, PROBE_ACK, PROBE_BARE, PROBE_UDP, PROBE_ICMP, PROBE_OTHER = range(6)
PROBE_NAMES = ("TCP SYN", "TCP ACK", "TCP FIN/NULL/Xmas", "UDP", "ICMP request", "other IP protocol")


def flow_numbers(flows) -> dict[str, np.ndarray]:
    """The columns the rule reads, as numbers: from FlowTable.columns() (AnalysisContext.flow_columns, no
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
    cols["proto"] = _proto_numbers(flows["proto"])
    cols["first_seen"], cols["last_seen"] = flow_time_ns(flows["first_seen"]), flow_time_ns(flows["last_seen"])
    cols["syn_first"] = flows["history"].astype(str).str.startswith("S").to_numpy(bool)
    return cols


# FlowTable.columns() names the rule reads; the DataFrame view has the addresses as text and times as datetimes
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
    """The flows (flow_numbers) as attempts: source, host, service and time, whether each failed and its
    probe type, one row per flow whose originator sent anything (backscatter's receiver sent nothing) and
    that asked for an answer (not ICMP errors), to a unicast address."""
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
    unicast = ~_multicast(dst_hi, dst_lo)[dst_codes]
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
        "answered": (back > 0)[keep], "probe": probe[keep].astype(np.int64),
        "src_names": Addresses(src_hi, src_lo), "dst_names": Addresses(dst_hi, dst_lo),
    }


def _empty() -> dict:
    none = np.zeros(0, dtype=np.int64)
    out = dict.fromkeys(("src", "dst", "proto", "port", "first_ns", "last_ns", "frame", "probe"), none)
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


# IPv4 addresses sit in the schema's IPv4-mapped IPv6 space (::ffff:a.b.c.d)
V4_MAPPED = np.uint64(0xFFFF << 32)


def _multicast(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Which addresses are multicast (224/4, ff00::/8) or the limited broadcast (no host answers those)."""
    v4 = (hi == 0) & ((lo >> np.uint64(32)) == np.uint64(0xFFFF))
    v4_address = lo & np.uint64(0xFFFFFFFF)
    return ((v4 & ((v4_address >> np.uint64(28)) == np.uint64(0xE))) | (v4 & (v4_address == np.uint64(0xFFFFFFFF)))
            | (~v4 & ((hi >> np.uint64(56)) == np.uint64(0xFF))))


def target_keys(a: dict) -> np.ndarray:
    """One 64-bit key per (source, host, protocol, port) of the attempts."""
    return mix64(a["src"], a["dst"], (a["proto"] << 16) | a["port"])


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


@register
class Scan(Detector):
    rule_id = "scan"
    PARAMS = {
        "remote_targets": Param(int, 25, "unique (host, port) targets a remote source fails to reach within 15 "
                                         "minutes (bro-simple-scan scan_threshold)", COUNT,
                                "Lower catches slower, narrower scanners but also remote clients retrying a few "
                                "dead servers."),
        "local_targets": Param(int, 250, "unique (host, port) targets a local source fails to reach within 15 "
                                         "minutes (bro-simple-scan local_scan_threshold)", COUNT,
                               "Local hosts talk to many servers of their own network; lower catches an infected "
                               "host sooner but reports busy servers and monitoring probes that fail."),
        "knock_hosts": Param(int, 20, "hosts a remote source fails to reach on one port within 15 minutes "
                                      "(bro-simple-scan knockknock_threshold)", COUNT,
                             "Lower catches a scanner looking for one service sooner, and a remote client whose "
                             "few servers of one service are down."),
        "port_scan_ports": Param(int, 15, "ports of one host a source fails to reach within 15 minutes (Zeek "
                                          "scan.zeek port_scan_threshold)", COUNT,
                                 "Lower catches a shorter port scan but also a client trying the few ports of one "
                                 "service (RPC, passive FTP) against a host that is down."),
        "min_failed_ratio": Param(float, 0.5, "share of a source's targets (in the scan's scope: its host, its port "
                                              "or all) that never answered, from which the scan is judged; below "
                                              "it the finding is info (a resolver, a NAT gateway, a proxy)", RATIO,
                                  "Higher keeps busy clients quiet but lets a scanner that also works normally hide; "
                                  "0 judges every source by its failures alone, as Zeek does."),
        "local_networks": Param(list, ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                                       "127.0.0.0/8", "fe80::/10", "fc00::/7", "::1/128"],
                                "source networks counted as local (CIDR) unless the site file gives local_networks, "
                                "which then take precedence (Zeek's private_address_space, local by default)",
                                Range(0, 4096),
                                "Local scanners need 10x the targets but are medium; add your public networks so "
                                "that your own hosts' scans are reported as such."),
        "allowlist": Param(list, [], "sources never judged (CIDR): resolvers, NAT gateways, monitoring and "
                                     "vulnerability scanners of your own", Range(0, 4096),
                           "Each entry silences everything its sources do, a real infection behind a NAT gateway "
                           "included."),
    }
    ALERTS = {
        "suppress_s": Param(float, 300.0, "least seconds between two events about one scanner", ALERT_SECONDS,
                            "Scans go on for hours; longer keeps one scanner from raising an update every few "
                            "minutes, shorter shows its progress."),
        "resolve_s": Param(float, 120.0, "seconds without the scanner in the window before it is resolved",
                           ALERT_SECONDS,
                           "Scanners pause between sweeps; shorter resolves and raises one scan again."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.local_nets = parse_networks(rule, "local_networks", self.params["local_networks"])
        self.allowed = parse_networks(rule, "allowlist", self.params["allowlist"])

    # ---- state: the flow table is the state ----------------------------------------------------
    def update(self, batch) -> None:
        return None

    def merge(self, other: Scan) -> Scan:
        check_merge(self, other)
        return self

    # ---- findings -------------------------------------------------------------------------------
    def is_local(self, address: str) -> bool:
        if self.site.given("local_networks"):
            return self.site.is_local(address)
        return in_networks(address, self.local_nets)

    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        a = attempts_of(ctx)
        if not a["failed"].any():
            return []
        keys = target_keys(a)
        answered = np.unique(keys[~a["failed"]])
        fail = np.flatnonzero(a["failed"])
        fail = fail[~np.isin(keys[fail], answered)]
        if len(fail) == 0:
            return []
        # one row per failed target: its first attempt (the flow rows are in first-packet order)
        order = fail[np.lexsort((a["first_ns"][fail], keys[fail]))]
        first = np.concatenate(([True], keys[order][1:] != keys[order][:-1]))
        targets = order[first]
        floor = min(self.params["remote_targets"], self.params["knock_hosts"], self.params["port_scan_ports"])
        sources, counts = np.unique(a["src"][targets], return_counts=True)
        ranked = sources[np.argsort(-counts, kind="stable")][:CANDIDATES_MAX]
        ranked = ranked[np.isin(ranked, sources[counts >= floor])]
        # each source's attempts, failed targets and failed flows as slices of arrays sorted by source
        slices = {name: by_source(a["src"], rows) for name, rows in
                  (("all", np.arange(len(a["src"]))), ("targets", targets), ("tries", fail))}
        out = []
        for src in ranked.tolist():
            name = str(a["src_names"][src])
            if in_networks(name, self.allowed):
                continue
            mine, tries, rows = (slices[part](src) for part in ("targets", "tries", "all"))
            finding = self._judge(a, keys, mine, tries, rows, name)
            if finding is not None:
                out.append(finding)
        return out

    def _judge(self, a: dict, keys: np.ndarray, mine: np.ndarray, tries: np.ndarray, rows: np.ndarray,
               name: str) -> Finding | None:
        """The finding of one source: `mine` its failed targets (first attempt each), `tries` its failed flows,
        `rows` all its attempts; None below every threshold."""
        p = self.params
        window_ns = int(SCAN_WINDOW_S * NS)
        local = self.is_local(name)
        times = a["first_ns"][mine]
        one = np.zeros(len(mine), dtype=np.int64)
        _, (total,), (total_at,) = busiest_window(one, times, window_ns)
        service = (a["proto"][mine] << 16) | a["port"][mine]
        svc, per_svc, svc_at = busiest_window(service, times, window_ns)
        host, per_host, host_at = busiest_window(a["dst"][mine], times, window_ns)
        by_svc, by_host = int(np.argmax(per_svc)), int(np.argmax(per_host))
        crossed = []
        if total >= (p["local_targets"] if local else p["remote_targets"]):
            crossed.append("targets")
        if not local and per_svc[by_svc] >= p["knock_hosts"]:
            crossed.append("knock")
        if per_host[by_host] >= p["port_scan_ports"]:
            crossed.append("ports")
        if not crossed:
            return None
        kind, scope = self._kind(a, mine, crossed, svc[by_svc], host[by_host], per_svc[by_svc], per_host[by_host])
        # the share of the scope's targets that never answered this source
        in_scope = {"host": lambda: a["dst"][rows] == host[by_host],
                    "service": lambda: ((a["proto"][rows] << 16) | a["port"][rows]) == svc[by_svc],
                    "all": lambda: np.ones(len(rows), dtype=bool)}[scope]()
        scope_keys = np.unique(keys[rows][in_scope])
        scope_failed = int(np.isin(keys[mine], scope_keys).sum())
        ratio = scope_failed / max(len(scope_keys), 1)
        hosts, ports = len(np.unique(a["dst"][mine])), len(np.unique(service))
        probes = np.bincount(a["probe"][mine], minlength=len(PROBE_NAMES))
        p2p = (kind == "random" and probes[PROBE_UDP] * 2 > len(mine)
               and np.mean(a["port"][mine][a["proto"][mine] == PROTO_UDP] >= HIGH_PORT) > 0.5)
        side = self._side(local)
        if ratio < p["min_failed_ratio"]:
            severity, note = "info", (f"; {len(scope_keys) - scope_failed:,} of its {len(scope_keys):,} targets there "
                                      f"answered: a busy client (resolver, NAT gateway, proxy), not a scanner")
        elif p2p:
            severity, note = "info", "; UDP to many hosts on many high ports: unanswered P2P (DHT) peers look alike"
        else:
            severity, note = ("medium" if local else "low"), ""
        window_at = {"targets": total_at, "knock": svc_at[by_svc], "ports": host_at[by_host]}[crossed[0]]
        hosts_text = _named(a, host[by_host], svc[by_svc])
        if scope == "host":
            what = f"{per_host[by_host]:,} unique ports of host {hosts_text['host']}"
        elif scope == "service" or ports == 1:
            what = f"{per_svc[by_svc]:,} unique hosts on {hosts_text['service']}"
        else:
            what = f"{total:,} unique targets ({hosts:,} hosts, {ports:,} ports)"
        span = (times.max() - times.min()) / NS
        msg = (f"{name} ({side}) scanned at least {what} in {_duration(span)}: {kind}, "
               f"{len(mine):,} targets that never answered{note}")
        tried = np.sort(a["frame"][tries])
        first_ns, last_ns = int(a["first_ns"][tries].min()), int(a["first_ns"][tries].max())
        evidence = {
            "scanner": name, "local": local, "local_by": side, "kind": kind, "crossed": crossed,
            "unique_targets": len(mine), "busiest_15min_targets": int(total),
            "window_start": _iso(window_at), "hosts": hosts, "ports": ports,
            "top_hosts": _top(a["dst"][mine], a["dst_names"], str),
            "top_ports": _top(service, None, service_text),
            "probes": {PROBE_NAMES[k]: int(v) for k, v in enumerate(probes) if v},
            "failed_ratio": round(ratio, 3), "attempts": len(tries),
            "attempts_per_second": round(float(len(tries) / max(span, MIN_RATE_WINDOW_S)), 1),
            "evidence_frames": evidence_frames(tried),
        }
        fields = {"src_ip": name}
        if kind == "vertical":
            fields["dest_ip"] = hosts_text["host"]
        elif kind in ("horizontal", "knock-knock") and (svc[by_svc] & 0xFFFF):
            fields["dest_port"] = int(svc[by_svc] & 0xFFFF)
        return self.finding(severity, msg, identifier=name, first_seen=first_ns, last_seen=last_ns, n=len(tries),
                            evidence=evidence, **fields)

    def _kind(self, a, mine, crossed, svc, host, per_svc, per_host) -> tuple[str, str]:
        """The kind of scan and the scope its failure share is taken over (Zeek's analyze_unique_hostports)."""
        probes = np.bincount(a["probe"][mine], minlength=len(PROBE_NAMES))
        hosts, ports = len(np.unique(a["dst"][mine])), len(np.unique((a["proto"][mine] << 16) | a["port"][mine]))
        if probes[PROBE_ICMP] * 2 > len(mine):
            return "ICMP sweep", "all"
        if probes[PROBE_ACK] * 2 > len(mine):
            return "ACK sweep", "all"
        if "ports" in crossed and (hosts <= FEW or crossed == ["ports"]):
            return "vertical", "host"
        if ports <= FEW or "knock" in crossed:
            return ("knock-knock" if crossed == ["knock"] else "horizontal"), "service"
        return "random", "all"

    def _side(self, local: bool) -> str:
        if self.site.given("local_networks"):
            return "local: site local_networks" if local else "remote: outside the site's local_networks"
        return "local: private address space" if local else "remote: outside the local_networks parameter"

    # ---- report ---------------------------------------------------------------------------------
    def figures(self, findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
        return [AttemptsFigure(f.identifier, bins) for f in findings[:FIGURES_MAX] if f.severity != "info"]


# Figures drawn per run: the first scanners of the report.
FIGURES_MAX = 4


class AttemptsFigure(ReportFigure):
    """A scanner's failed attempts per second and the distinct targets it has tried so far."""

    def __init__(self, scanner: str, bins: TimeBins):
        self.title = f"Scanner {scanner}: failed attempts per second and distinct targets"
        self.scanner = scanner
        self.bins = bins

    def add(self, batch) -> None:
        return None     # drawn from the flow table

    def draw(self, ax, flows) -> None:
        a = attempts(flow_numbers(flows))
        mine = a["failed"] & (a["src"] == a["src_names"].code_of(self.scanner))
        keys = target_keys(a)[mine]
        ts = a["first_ns"][mine]
        ax.plot(self.bins.starts_s, self.bins.counts(ts) / self.bins.width_s, drawstyle="steps-post", lw=1,
                color="#d33", label="failed attempts/s")
        order = np.argsort(ts, kind="stable")
        _, first = np.unique(keys[order], return_index=True)
        new = np.zeros(len(ts), dtype=bool)
        new[first] = True
        distinct = np.cumsum(self.bins.counts(ts[order][new]))
        twin = ax.twinx()
        twin.plot(self.bins.starts_s, distinct, drawstyle="steps-post", lw=1, color="#36c", label="distinct targets")
        ax.set_xlabel(self.bins.axis_label)
        ax.set_ylabel("failed attempts/s")
        twin.set_ylabel("distinct targets so far")


def by_source(src: np.ndarray, rows: np.ndarray):
    """A function giving the `rows` whose source is a given one, from one sort of them by source."""
    ordered = rows[np.argsort(src[rows], kind="stable")]
    keys = src[ordered]
    return lambda value: ordered[np.searchsorted(keys, value):np.searchsorted(keys, value, side="right")]


def parse_networks(rule, key: str, values) -> tuple:
    nets = []
    for text in values:
        try:
            nets.append(ipaddress.ip_network(str(text), strict=False))
        except ValueError as exc:
            raise RuleError(rule.path, f"params.{key}", str(exc)) from None
    return tuple(nets)


def in_networks(address: str, nets: tuple) -> bool:
    if not nets:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip.version == net.version and ip in net for net in nets)


def _named(a: dict, host: int, svc: int) -> dict[str, str]:
    return {"host": str(a["dst_names"][host]), "service": service_text(svc)}


def service_text(svc: int) -> str:
    proto, port = int(svc) >> 16, int(svc) & 0xFFFF
    name = FLOW_PROTO_NAMES.get(proto, str(proto))
    if proto in (PROTO_ICMP, PROTO_ICMP6):
        return f"{name} type {port}"
    if proto in (PROTO_TCP, PROTO_UDP, PROTO_SCTP):
        return f"{port}/{name}"
    return f"IP protocol {proto}"


def _top(values: np.ndarray, names, text) -> list[dict]:
    found, counts = np.unique(values, return_counts=True)
    order = np.lexsort((found, -counts))[:SAMPLES]
    return [{"value": text(names[found[i]] if names is not None else found[i]), "targets": int(counts[i])}
            for i in order]


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def _iso(ns) -> str:
    return iso_time(int(ns))


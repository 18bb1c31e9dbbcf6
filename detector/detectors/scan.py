"""scan: one source failing to reach many (host, port) targets within 15 minutes, or sweeping its link by ARP.

Infected subscribers "iterate over IP addresses" (seed 003): each probe is
a connection attempt nobody answers, or answers with a reset. A failed
attempt is a flow of the flow table judged on its final state
(detector.detect.attempts): SYNs unanswered or reset (Zeek history S,
SW, Sr, SWr), bare ACK/FIN/NULL probes answered at most by a reset (ACK
sweeps), UDP, ICMP requests and other protocols to a unicast address
without a reply (ntopng's "incomplete" flows).

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

Traceroute is no scan (issue 27: a UDP traceroute was called a vertical
scan at medium). Traceroute, tracert, mtr and tcptraceroute send probes
whose TTL climbs by one from 1; from any capture point the probes that
reach it arrive with TTLs climbing from 1 (the one that expires at the
next router), and they stop at 30 hops. A scanner sends at its stack's
TTL (64, 128, 255) or, as nmap does, at one drawn from 37-59 per probe. So
the rule keeps, per (source, host, protocol), the packets that arrived with
a TTL of at most LADDER_TTL_MAX, by TTL, and the routers that answered them
with time-exceeded: a source's probes to a host form a ladder when their
TTLs climb from at most LADDER_FIRST_TTL_MAX by one for LADDER_STEPS_MIN
steps, and the ladder holds at least TRACE_SHARE_MIN of what the source
sent that host in that protocol (nmap's --traceroute after a port scan
adds a few ladder probes to a thousand scan probes: still a scan). The
attempts of a ladder are path probes, not targets. A source that crosses a
threshold only with them is reported at info, as traceroute. Residual: a
scanner that climbs TTLs itself, each probe one step higher, passes as a
path trace; its probes below the target's distance die at the routers.

An ARP sweep is a scan too (issue 27: nmap's host discovery on a LAN, 500
ARP requests for 245 addresses in 2 s, was nothing): one sender (MAC and
address) asking by ARP request for at least `arp_sweep_targets` distinct
addresses within ARP_SWEEP_WINDOW_S. RFC 5227 probes (sender 0.0.0.0: a
DHCP server's or client's conflict check) and gratuitous ARP (sender
address equal to the target) ask for nobody else and are not read. Where
the capture shows ARP replies to the sender, the addresses that answered
are not counted (a router resolving its live hosts, a rebooted router
resolving all of them); where it shows none (a mirror port sees broadcast
requests but not the unicast replies) every address counts, and the
finding says so. The sender is on the link, a local host: low, as Slips
(modules/arp) rates an ARP scan; a router of the site file's `routers` is
info (a router asks for every address of its subnet when a scan from
outside sweeps it). An ARP sweep and a scan of one source are one finding.

Near-misses are kept at info with the reason: a source whose targets in
the scan's scope mostly answered (`min_failed_ratio`: a resolver, a NAT
gateway, a proxy), UDP to many hosts on many high ports (P2P peers, DHT
pings that go unanswered), and path traces. Backscatter and tunnel
carriers are no attempts at all. Sources in `allowlist` are not judged.

Local sources are those of the site file's `local_networks` when it gives
them (`--site`), else those of the rule's `local_networks` parameter
(Zeek's Site::private_address_space, which Zeek counts as local by default).

State: the flow table is read in findings(), which already merges files and
cluster partitions; a watch sees only its window. Of the packets, the rule
keeps four tables of counts (TTL ladders, time-exceeded answers, ARP
requests and replies), each one row per key, summed on merge and bounded by
ROWS_MAX rows (beyond it the rows of the largest keys, a hash, go: the same
rows in one pass and in any merge of partitions).
"""
from __future__ import annotations

import ipaddress

import numpy as np

from ..decode.addr import mac_to_str
from ..detect.attempts import (
    ICMP6_REQUESTS,
    ICMP_REQUESTS,
    PROBE_ACK,
    PROBE_ICMP,
    PROBE_NAMES,
    PROBE_UDP,
    attempts,
    attempts_of,
    busiest_window,
    by_source,
    duration_text,
    flow_numbers,
    group_addresses,
    in_networks,
    parse_networks,
    service_text,
)
from ..detect.detector import MIN_RATE_WINDOW_S, AnalysisContext, Detector, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.figure import ReportFigure, TimeBins
from ..detect.hashing import mix64
from ..detect.state import fold_rows
from ..findings import SEVERITY_RANK, Finding, iso_time
from ..flows.view import FLOW_PROTO_NAMES
from ..rules import ALERT_SECONDS, COUNT, RATIO, Param, Range
from ..schema import (
    ICMP_ANY,
    IP,
    L_ARP,
    L_QUOTE,
    PROTO_ICMP,
    PROTO_ICMP6,
    PROTO_TCP,
    PROTO_UDP,
    PacketBatch,
)
from ..units import NS, plural

# Flows a scan is counted over: bro-simple-scan forgets a scanner after 15 minutes without attempts; the
# busiest 15-minute stretch is what the thresholds are held against.
SCAN_WINDOW_S = 900.0
# Sources judged per run: the most prolific ones; a capture of a million one-probe sources costs nothing.
CANDIDATES_MAX = 1024
# Samples named in a finding's evidence.
SAMPLES = 10
# UDP destination ports from here up are ephemeral or P2P ports: many hosts on many of them is P2P traffic.
HIGH_PORT = 1024
# Zeek's scan.zeek classifies a scanner's targets: one port (or a few) is an address scan, one host (or a
# few) a port scan; this is its "few" (analyze_unique_hostports).
FEW = 5

# ---- path traces ------------------------------------------------------------------------------------
# The highest TTL a path trace's probe arrives with: the tools stop at 30 hops (traceroute -m, tracert -h, mtr
# -m), and a probe arrives with no more TTL than it left with. Higher keeps more rows for nothing; lower
# misses the far end of a trace taken next to the tracer.
LADDER_TTL_MAX = 32
# The lowest TTL a ladder may start at: 1 wherever the capture point is (the probe that expires at the next
# router), 2 or 3 for `traceroute -f` or a first probe the capture missed. Higher lets a far scanner's random
# TTLs (nmap: 37-59, minus the hops) pass as a ladder.
LADDER_FIRST_TTL_MAX = 3
# Consecutive TTLs a ladder climbs from its lowest: a trace that fails 15 ports of a host with three probes a
# hop climbs five. Fewer lets a retry at another TTL pass as a trace; more reports a trace to a host two or
# three hops away that sends many probes a hop (traceroute -q 10).
LADDER_STEPS_MIN = 3
# The share of a source's packets to one host (one protocol) that must have climbed the ladder for its probes
# there to be a path trace: nmap --traceroute adds a handful of ladder probes to a thousand scan probes of
# the same host and stays a scan. Lower hides a scan behind a trace of the same host.
TRACE_SHARE_MIN = 0.5

# ---- ARP sweeps --------------------------------------------------------------------------------------
# Addresses one sender asks for are counted within this window (Slips' ARP scan window, modules/arp). nmap
# sweeps a /24 in 2 s; a router resolves its live hosts over minutes as they talk. Longer catches slower
# sweeps (nmap -T2 asks one address every 0.4 s) but adds up a busy router's on-demand resolution.
ARP_SWEEP_WINDOW_S = 30.0
ARP_REQUEST, ARP_REPLY = 1, 2            # RFC 826 opcodes

# ---- state bounds ------------------------------------------------------------------------------------
# Rows per state table: a forged flood of random ARP or low-TTL packets must not grow it; the rows of the
# smallest keys (hashes) are kept, the same in one pass and in any merge.
ROWS_MAX = 1 << 17
# Rows of new batches gathered before they are folded into a table (a sort of the table each time).
FOLD_ROWS = 1 << 15

LADDER_COLUMNS = {"key": np.uint64, "pair": np.uint64, "ttl": np.int64, "packets": np.int64, "first_ns": np.int64}
ANSWER_COLUMNS = {"key": np.uint64, "pair": np.uint64, "router": np.uint64, "messages": np.int64,
                  "first_ns": np.int64}
REQUEST_COLUMNS = {"key": np.uint64, "sender": np.uint64, "sha": np.uint64, "spa": np.uint32, "tpa": np.uint32,
                   "requests": np.int64, "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64}
REPLY_COLUMNS = {"key": np.uint64, "requester": np.uint64, "replies": np.int64, "first_ns": np.int64}
COUNTS = {"packets": np.add, "messages": np.add, "requests": np.add, "replies": np.add, "last_ns": np.maximum,
          "first_frame": np.minimum}


class Rows:
    """A state table: columns of equal length, one row per `key` once folded; new rows wait in `pending` until
    FOLD_ROWS of them gather or the table is read. Folding sums the counts of a key's rows (COUNTS); past
    ROWS_MAX rows those of the largest keys are dropped and counted in `dropped`."""

    def __init__(self, columns: dict):
        self.columns = columns
        self.rows = {name: np.zeros(0, dtype=dtype) for name, dtype in columns.items()}
        self.pending: list[dict] = []
        self.waiting = 0
        self.dropped = 0

    def add(self, rows: dict) -> None:
        if len(rows["key"]) == 0:
            return
        self.pending.append({name: np.asarray(rows[name]).astype(dtype) for name, dtype in self.columns.items()})
        self.waiting += len(rows["key"])
        if self.waiting >= FOLD_ROWS:
            self.fold()

    def fold(self, other: Rows | None = None) -> dict:
        """The table with every pending row (and `other`'s table) folded in."""
        parts = self.pending + ([] if other is None else [other.fold()])
        if parts:
            joined = {name: np.concatenate([part[name] for part in parts]) for name in self.columns}
            folded = fold_rows(self.rows, joined, "key", {k: v for k, v in COUNTS.items() if k in self.columns})
            extra = len(folded["key"]) - ROWS_MAX
            if extra > 0:
                keep = np.sort(np.argsort(folded["key"], kind="stable")[:ROWS_MAX])
                folded = {name: col[keep] for name, col in folded.items()}
                self.dropped += extra
            self.rows = folded
            self.pending, self.waiting = [], 0
        if other is not None:
            self.dropped += other.dropped
        return self.rows


def target_keys(a: dict) -> np.ndarray:
    """One 64-bit key per (source, host, protocol, port) of the attempts."""
    return mix64(a["src"], a["dst"], (a["proto"] << 16) | a["port"])


def ladders(rows: dict) -> dict[str, np.ndarray]:
    """The path-trace ladders of the TTL table's rows: per (source, host, protocol) pair whose lowest TTL is at
    most LADDER_FIRST_TTL_MAX and climbs by one for at least LADDER_STEPS_MIN steps, its packets of low TTL and
    the highest TTL of that climb. Pairs sorted."""
    if len(rows["key"]) == 0:
        return {"pair": np.zeros(0, np.uint64), "packets": np.zeros(0, np.int64), "top": np.zeros(0, np.int64)}
    order = np.lexsort((rows["ttl"], rows["pair"]))
    pair, ttl = rows["pair"][order], rows["ttl"][order]
    starts = np.flatnonzero(np.concatenate(([True], pair[1:] != pair[:-1])))
    # a row continues the climb when it is one TTL above the row before it in its pair
    climbs = np.concatenate(([False], (pair[1:] == pair[:-1]) & (ttl[1:] - ttl[:-1] == 1)))
    run = np.cumsum(~climbs)
    first_run = run == np.repeat(run[starts], np.diff(np.append(starts, len(pair))))
    steps = np.add.reduceat(first_run.astype(np.int64), starts)
    top = np.maximum.reduceat(np.where(first_run, ttl, 0), starts)
    packets = np.add.reduceat(rows["packets"][order], starts)
    ok = (ttl[starts] <= LADDER_FIRST_TTL_MAX) & (steps >= LADDER_STEPS_MIN)
    return {"pair": pair[starts][ok], "packets": packets[ok], "top": top[ok]}


def pair_keys(src_hi, src_lo, dst_hi, dst_lo, proto) -> np.ndarray:
    """One 64-bit key per (source, destination, protocol)."""
    return mix64(np.asarray(src_hi, np.uint64), np.asarray(src_lo, np.uint64), np.asarray(dst_hi, np.uint64),
                 np.asarray(dst_lo, np.uint64), np.asarray(proto, np.uint64))


@register
class Scan(Detector):
    rule_id = "scan"
    EVE_SIGNATURE = (19, "Detection of a Network Scan")
    # what its findings rest on beyond what it saw (detect.confidence): probes nobody answered, at a rate
    QUALITY_NEEDS = frozenset({"absence", "timing"})
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
        "arp_sweep_targets": Param(int, 64, "(ours) addresses one sender asks for by ARP within 30 s, those that "
                                            "answered left out where replies are seen, from which it is an ARP "
                                            "sweep", COUNT,
                                   "nmap sweeps a /24 (254 addresses) in seconds; a router resolves a few dozen "
                                   "hosts as they talk. Lower catches sweeps of a /26 and smaller but reports a "
                                   "router resolving a busy subnet on a mirror port that misses the replies."),
        "min_failed_ratio": Param(float, 0.5, "(ours) share of a source's targets (in the scan's scope: its host, its "
                                              "port or all) that never answered, from which the scan is judged; "
                                              "below it the finding is info (a resolver, a NAT gateway, a proxy)",
                                  RATIO,
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
        self.ttls = Rows(LADDER_COLUMNS)            # packets of low TTL per (source, host, protocol) and TTL
        self.expired = Rows(ANSWER_COLUMNS)         # time-exceeded per quoted (source, host, protocol) and router
        self.requests = Rows(REQUEST_COLUMNS)       # ARP requests per (sender MAC, sender address, target)
        self.replies = Rows(REPLY_COLUMNS)          # ARP replies per (requester MAC, its address, answering address)

    # ---- state ------------------------------------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        layers = batch["layers"]
        self._path_probes(batch, layers)
        arp = np.flatnonzero((layers & np.uint32(L_ARP)) != 0)
        if len(arp):
            self._arp(batch, arp)

    def _path_probes(self, batch: PacketBatch, layers: np.ndarray) -> None:
        """Packets of low TTL that may climb a ladder (TCP, UDP, ICMP requests to a unicast address), and the
        time-exceeded messages that answer such probes."""
        ip = (layers & np.uint32(IP)) != 0
        proto, ttl = batch["proto"], batch["ttl"]
        icmp = ip & ((layers & np.uint32(ICMP_ANY)) != 0)
        kind = batch["icmp_type"]
        request = icmp & (((proto == PROTO_ICMP) & np.isin(kind, ICMP_REQUESTS))
                          | ((proto == PROTO_ICMP6) & np.isin(kind, ICMP6_REQUESTS)))
        low = np.flatnonzero(ip & (ttl <= LADDER_TTL_MAX) & (((proto == PROTO_TCP) | (proto == PROTO_UDP)) | request))
        if len(low):
            dst_hi, dst_lo = batch["dest_ip_hi"][low], batch["dest_ip_lo"][low]
            low = low[~group_addresses(dst_hi, dst_lo)]
        if len(low):
            pair = pair_keys(batch["src_ip_hi"][low], batch["src_ip_lo"][low], batch["dest_ip_hi"][low],
                             batch["dest_ip_lo"][low], proto[low])
            hop = ttl[low].astype(np.int64)
            self.ttls.add({"key": mix64(pair, hop), "pair": pair, "ttl": hop, "packets": np.ones(len(low), np.int64),
                           "first_ns": batch["ts_ns"][low]})
        # time-exceeded in transit (ICMP type 11, ICMPv6 type 3, code 0) quoting the probe it answers
        expired = np.flatnonzero(icmp & ((layers & np.uint32(L_QUOTE)) != 0) & (batch["icmp_code"] == 0)
                                 & (((proto == PROTO_ICMP) & (kind == 11)) | ((proto == PROTO_ICMP6) & (kind == 3))))
        if len(expired):
            pair = pair_keys(batch["quote_src_ip_hi"][expired], batch["quote_src_ip_lo"][expired],
                             batch["quote_dest_ip_hi"][expired], batch["quote_dest_ip_lo"][expired],
                             batch["quote_proto"][expired])
            router = mix64(batch["src_ip_hi"][expired], batch["src_ip_lo"][expired])
            self.expired.add({"key": mix64(pair, router), "pair": pair, "router": router,
                              "messages": np.ones(len(expired), np.int64), "first_ns": batch["ts_ns"][expired]})

    def _arp(self, batch: PacketBatch, arp: np.ndarray) -> None:
        """ARP requests that ask for another address (not RFC 5227 probes from 0.0.0.0, not gratuitous) from a
        unicast MAC, and the replies that answer such requests."""
        op, spa, tpa = batch["arp_op"][arp], batch["arp_spa"][arp], batch["arp_tpa"][arp]
        sha, tha = batch["arp_sha"][arp], batch["arp_tha"][arp]
        unicast = (sha != 0) & (((sha >> np.uint64(40)) & np.uint64(1)) == 0)
        asks = (spa != 0) & (spa != tpa) & unicast
        ts, frame = batch["ts_ns"][arp], batch["frame"][arp]
        req = asks & (op == ARP_REQUEST)
        if req.any():
            sender = mix64(sha[req], spa[req])
            self.requests.add({"key": mix64(sender, tpa[req]), "sender": sender, "sha": sha[req], "spa": spa[req],
                               "tpa": tpa[req], "requests": np.ones(int(req.sum()), np.int64), "first_ns": ts[req],
                               "last_ns": ts[req], "first_frame": frame[req]})
        rep = asks & (op == ARP_REPLY)
        if rep.any():
            requester = mix64(tha[rep], tpa[rep])
            self.replies.add({"key": mix64(requester, spa[rep]), "requester": requester,
                              "replies": np.ones(int(rep.sum()), np.int64), "first_ns": ts[rep]})

    def merge(self, other: Scan) -> Scan:
        check_merge(self, other)
        for name in ("ttls", "expired", "requests", "replies"):
            getattr(self, name).fold(getattr(other, name))
        return self

    # ---- findings -------------------------------------------------------------------------------
    def is_local(self, address: str) -> bool:
        if self.site.given("local_networks"):
            return self.site.is_local(address)
        return in_networks(address, self.local_nets)

    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        found = self._flow_findings(attempts_of(ctx))
        for name, sweep in self._arp_sweeps().items():
            found[name] = _joined(found[name], sweep) if name in found else sweep
        return list(found.values())

    def _flow_findings(self, a: dict) -> dict[str, Finding]:
        """The findings read from the flow table's attempts, by source."""
        if not a["failed"].any():
            return {}
        keys = target_keys(a)
        found = ladders(self.ttls.fold())
        traced = _traced(a, found)
        # every source's failed targets with the path probes, and without
        every = _failed_targets(a, keys, a["failed"])
        plain = _failed_targets(a, keys, a["failed"] & ~traced)
        targets, fail = every
        if len(fail) == 0:
            return {}
        floor = min(self.params["remote_targets"], self.params["knock_hosts"], self.params["port_scan_ports"])
        sources, counts = np.unique(a["src"][targets], return_counts=True)
        ranked = sources[np.argsort(-counts, kind="stable")][:CANDIDATES_MAX]
        ranked = ranked[np.isin(ranked, sources[counts >= floor])]
        # each source's attempts, failed targets and failed flows as slices of arrays sorted by source
        everything = by_source(a["src"], np.arange(len(a["src"])))
        slices = {name: (by_source(a["src"], rows[0]), by_source(a["src"], rows[1]))
                  for name, rows in (("every", every), ("plain", plain))}
        out = {}
        for src in ranked.tolist():
            name = str(a["src_names"][src])
            if in_networks(name, self.allowed):
                continue
            rows = everything(src)
            path = rows[traced[rows]]
            mine, tries = (part(src) for part in slices["plain"])
            finding = self._judge(a, keys, mine, tries, rows[~traced[rows]], name) if len(mine) else None
            if finding is None and len(path):
                mine, tries = (part(src) for part in slices["every"])
                if self._judge(a, keys, mine, tries, rows, name) is not None:
                    finding = self._traces(a, path, found, name)
            elif finding is not None and len(path):
                finding.evidence["path_traces_left_out"] = self._trace_summary(a, path, found)
            if finding is not None:
                out[name] = finding
        return out

    def _trace_summary(self, a: dict, path: np.ndarray, found: dict) -> dict:
        """What a source's path traces were: hosts, probes by protocol, the highest TTL climbed, the routers that
        answered with time-exceeded."""
        pairs = np.unique(_pairs(a, path))
        top = found["top"][np.searchsorted(found["pair"], pairs)]
        answers = self.expired.fold()
        routers = len(np.unique(answers["router"][np.isin(answers["pair"], pairs)]))
        protocols = [FLOW_PROTO_NAMES.get(p, str(p)) for p in np.unique(a["proto"][path]).tolist()]
        climbed = int(found["packets"][np.searchsorted(found["pair"], pairs)].sum())
        return {"hosts": len(np.unique(a["dst"][path])), "probes": climbed, "protocols": protocols,
                "highest_ttl": int(top.max()), "time_exceeded_from": routers,
                "top_hosts": _top(a["dst"][path], a["dst_names"], str)}

    def _traces(self, a: dict, path: np.ndarray, found: dict, name: str) -> Finding:
        """The info finding of a source whose failed targets cross a threshold only with its path traces."""
        summary = self._trace_summary(a, path, found)
        routers = summary["time_exceeded_from"]
        answered = f", time-exceeded from {plural(routers, 'router')}" if routers else ""
        hosts, protocols = summary["hosts"], "/".join(summary["protocols"])
        msg = (f"{name} traced the path to {plural(hosts, 'host')} ({protocols}, "
               f"{summary['probes']:,} probes with TTLs climbing to {summary['highest_ttl']}{answered}): "
               f"traceroute, not a scan")
        local = self.is_local(name)
        evidence = {"scanner": name, "kind": "traceroute", "local": local, "local_by": self._side(local),
                    "traces": summary, "evidence_frames": evidence_frames(np.sort(a["frame"][path]))}
        return self.finding("info", msg, identifier=name, first_seen=int(a["first_ns"][path].min()),
                            last_seen=int(a["last_ns"][path].max()), n=len(path), src_ip=name, evidence=evidence)

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
        msg = (f"{name} ({side}) scanned at least {what} in {duration_text(span)}: {kind}, "
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

    # ---- ARP sweeps -------------------------------------------------------------------------------
    def _arp_sweeps(self) -> dict[str, Finding]:
        """One finding per sender that asked for at least `arp_sweep_targets` addresses within
        ARP_SWEEP_WINDOW_S (those that answered left out where the capture shows replies to it)."""
        req, rep = self.requests.fold(), self.replies.fold()
        if len(req["key"]) < self.params["arp_sweep_targets"]:
            return {}
        answered = np.isin(req["key"], rep["key"])
        heard = np.isin(req["sender"], rep["requester"])      # the capture shows replies to this sender
        counted = ~(answered & heard)
        code = np.unique(req["sender"], return_inverse=True)[1]
        codes, per_sender, at = busiest_window(code[counted], req["first_ns"][counted], int(ARP_SWEEP_WINDOW_S * NS))
        out = {}
        for k in np.flatnonzero(per_sender >= self.params["arp_sweep_targets"]).tolist():
            rows = np.flatnonzero(code == codes[k])
            finding = self._arp_sweep(req, rows, answered[rows], bool(heard[rows[0]]), int(per_sender[k]),
                                      int(at[k]))
            if finding is not None:
                out[finding.identifier] = finding
        return out

    def _arp_sweep(self, req: dict, rows: np.ndarray, answered: np.ndarray, heard: bool, busiest: int,
                   window_at: int) -> Finding | None:
        spa = int(req["spa"][rows[0]])
        name = str(ipaddress.IPv4Address(spa))
        if in_networks(name, self.allowed):
            return None
        mac = mac_to_str(int(req["sha"][rows[0]]))
        targets = np.sort(req["tpa"][rows].astype(np.int64))
        lowest, highest = (str(ipaddress.IPv4Address(int(v))) for v in (targets[0], targets[-1]))
        span_ns = int(req["last_ns"][rows].max() - req["first_ns"][rows].min())
        requests = int(req["requests"][rows].sum())
        router = self.site.is_router(ip=name) or self.site.is_router(mac=mac)
        if heard:
            replies = (f"{int(answered.sum()):,} answered, {int((~answered).sum()):,} never did "
                       f"({busiest:,} of those within {ARP_SWEEP_WINDOW_S:.0f} s)")
        else:
            replies = (f"{busiest:,} within {ARP_SWEEP_WINDOW_S:.0f} s, no ARP reply to it in the capture (a mirror "
                       f"port may not see the unicast replies)")
        if router:
            severity, note = "info", ("; a router of the site file: it asks for every address of its subnet that "
                                      "traffic from elsewhere is sent to (a scan from outside sweeps it so)")
        else:
            severity, note = "low", ""
        msg = (f"{name} ({mac}) swept {len(targets):,} addresses of {lowest}-{highest} by ARP in "
               f"{duration_text(span_ns / NS)}: {requests:,} requests, {replies}{note}")
        frames = np.sort(req["first_frame"][rows])
        evidence = {"scanner": name, "kind": "ARP sweep", "local": True, "local_by": "on the capture's link",
                    "sender_mac": mac, "addresses": len(targets), "requests": requests,
                    "first_address": lowest, "last_address": highest,
                    "consecutive_ratio": round(len(targets) / (int(targets[-1] - targets[0]) + 1), 3),
                    "answered": int(answered.sum()) if heard else None, "replies_seen": heard,
                    f"busiest_{ARP_SWEEP_WINDOW_S:.0f}s_addresses": busiest, "window_start": _iso(window_at),
                    "evidence_frames": evidence_frames(frames)}
        if self.requests.dropped:
            evidence["state_rows_dropped"] = self.requests.dropped
        return self.finding(severity, msg, identifier=name, first_seen=int(req["first_ns"][rows].min()),
                            last_seen=int(req["last_ns"][rows].max()), n=requests, src_ip=name, src_mac=mac,
                            evidence=evidence)

    # ---- report ---------------------------------------------------------------------------------
    def figures(self, findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
        drawn = [f for f in findings if f.severity != "info" and f.evidence.get("kind") != "ARP sweep"]
        return [AttemptsFigure(f.identifier, bins) for f in drawn[:FIGURES_MAX]]


# Figures drawn per run: the first scanners of the report.
FIGURES_MAX = 4


def _pairs(a: dict, rows: np.ndarray) -> np.ndarray:
    """The (source, host, protocol) key of each of the attempts `rows`."""
    src, dst = a["src_names"], a["dst_names"]
    return pair_keys(src.hi[a["src"][rows]], src.lo[a["src"][rows]], dst.hi[a["dst"][rows]], dst.lo[a["dst"][rows]],
                     a["proto"][rows])


def _traced(a: dict, found: dict) -> np.ndarray:
    """Which attempts are probes of a path trace: their (source, host, protocol) climbs one of the ladders
    `found`, which holds at least TRACE_SHARE_MIN of the packets the source sent that host in that protocol."""
    if len(found["pair"]) == 0 or len(a["src"]) == 0:
        return np.zeros(len(a["src"]), dtype=bool)
    pairs, inverse = np.unique(_pairs(a, np.arange(len(a["src"]))), return_inverse=True)
    sent = np.bincount(inverse, weights=a["sent"], minlength=len(pairs))
    at = np.searchsorted(found["pair"], pairs).clip(0, len(found["pair"]) - 1)
    share = np.where(found["pair"][at] == pairs, found["packets"][at] / np.maximum(sent, 1), 0.0)
    return (share >= TRACE_SHARE_MIN)[inverse]


def _failed_targets(a: dict, keys: np.ndarray, failed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The failed targets (one row per target: its first attempt; flow rows are in first-packet order) of the
    attempts whose `failed` is set, targets that ever answered the source left out; and those failed flows."""
    answered = np.unique(keys[~a["failed"]])
    fail = np.flatnonzero(failed)
    fail = fail[~np.isin(keys[fail], answered)]
    order = fail[np.lexsort((a["first_ns"][fail], keys[fail]))]
    first = np.concatenate(([True], keys[order][1:] != keys[order][:-1])) if len(order) else np.zeros(0, bool)
    return order[first], fail


def _joined(scan: Finding, sweep: Finding) -> Finding:
    """One finding of a source that scanned and swept its link by ARP: the more severe one, the other's message
    and evidence added to it."""
    first, second = (scan, sweep) if SEVERITY_RANK[scan.severity] >= SEVERITY_RANK[sweep.severity] else (sweep, scan)
    first.msg = f"{first.msg}. Also: {second.msg}"
    frames = np.union1d(first.evidence["evidence_frames"], second.evidence["evidence_frames"])
    first.evidence["also"] = {k: v for k, v in second.evidence.items() if k != "evidence_frames"}
    first.evidence["evidence_frames"] = evidence_frames(frames)
    first.first_seen, first.last_seen = min(first.first_seen, second.first_seen), max(first.last_seen,
                                                                                      second.last_seen)
    first.n += second.n
    first.src_mac = first.src_mac or second.src_mac
    return first


class AttemptsFigure(ReportFigure):
    """A scanner's failed attempts per second and the distinct targets it has tried so far."""

    needs_batches = False

    def __init__(self, scanner: str, bins: TimeBins):
        self.title = f"Scanner {scanner}: failed attempts per second and distinct targets"
        self.scanner = scanner
        self.bins = bins

    def add(self, batch) -> None:
        return None     # drawn from the flow table

    def merge(self, other: AttemptsFigure) -> AttemptsFigure:
        """Nothing to take: drawn from the flow table."""
        return self

    def draw(self, ax, flows) -> None:
        a = attempts(flow_numbers(flows))
        mine = a["failed"] & (a["src"] == a["src_names"].code_of(self.scanner))
        keys = target_keys(a)[mine]
        ts = a["first_ns"][mine]
        # per whole second, as the rule counts (the report's bins may be milliseconds)
        ax.plot(*self.bins.per_second(ts), drawstyle="steps-post", lw=1, color="#d33", label="failed attempts/s")
        order = np.argsort(ts, kind="stable")
        _, first = np.unique(keys[order], return_index=True)
        new = np.zeros(len(ts), dtype=bool)
        new[first] = True
        distinct = np.cumsum(self.bins.counts(ts[order][new]))
        twin = ax.twinx()
        twin.plot(self.bins.starts_s, distinct, drawstyle="steps-post", lw=1, color="#36c", label="distinct targets")
        self.bins.time_axis(ax)
        ax.set_ylabel("failed attempts/s")
        twin.set_ylabel("distinct targets so far")


def _named(a: dict, host: int, svc: int) -> dict[str, str]:
    return {"host": str(a["dst_names"][host]), "service": service_text(svc)}


def _top(values: np.ndarray, names, text) -> list[dict]:
    found, counts = np.unique(values, return_counts=True)
    order = np.lexsort((found, -counts))[:SAMPLES]
    return [{"value": text(names[found[i]] if names is not None else found[i]), "targets": int(counts[i])}
            for i in order]


def _iso(ns) -> str:
    return iso_time(int(ns))

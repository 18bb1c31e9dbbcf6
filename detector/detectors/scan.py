"""scan: one source failing to reach many (host, port) targets within 15 minutes.

Infected subscribers "iterate over IP addresses" (seed 003): each probe is
a connection attempt nobody answers, or answers with a reset. A failed
attempt is a flow of the flow table judged on its final state
(detector.detectors.attempts): SYNs unanswered or reset (Zeek history S,
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

Near-misses are kept at info with the reason: a source whose targets in
the scan's scope mostly answered (`min_failed_ratio`: a resolver, a NAT
gateway, a proxy), and UDP to many hosts on many high ports (P2P peers,
DHT pings that go unanswered). Backscatter and tunnel carriers are no
attempts at all. Sources in `allowlist` are not judged.

Local sources are those of the site file's `local_networks` when it gives
them (`--site`), else those of the rule's `local_networks` parameter
(Zeek's Site::private_address_space, which Zeek counts as local by default).

State: none of its own. The rule reads the flow table in findings(), which
already merges files and cluster partitions; a watch sees only its window.
"""
from __future__ import annotations

import numpy as np

from ..findings import Finding, iso_time
from ..schema import PROTO_UDP
from ..units import NS
from .attempts import (
    PROBE_ACK,
    PROBE_ICMP,
    PROBE_NAMES,
    PROBE_UDP,
    attempts,
    attempts_of,
    by_source,
    flow_numbers,
    in_networks,
    parse_networks,
    service_text,
)
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
    mix64,
    register,
)

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

    def merge(self, other: AttemptsFigure) -> AttemptsFigure:
        """Nothing to take: drawn from the flow table."""
        return self

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


def _named(a: dict, host: int, svc: int) -> dict[str, str]:
    return {"host": str(a["dst_names"][host]), "service": service_text(svc)}


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


"""handshake-rtt: TCP handshakes taking far longer than they usually do here, and on which side of the capture point.

Seed 000: users saw RTT "over 300ms" where the switches "induce at most
~200ms". Every TCP handshake the capture holds whole is a free RTT sample:
SYN -> SYN-ACK is the time on the server's side of the capture point,
SYN-ACK -> ACK the time on the client's side (flows.view.handshake_columns).
This rule measures from the last SYN (the one the SYN-ACK answers), so a lost
and retransmitted SYN does not pass for delay; retransmitted SYNs are counted
apart. Per 10 s bin and class (internal: both ends in the site's
`local_networks`, else external), the median (p50) and p90 over at least 20
handshakes; the baseline is the median of the bins' p50s. A run of at least
3 bins whose p50 reaches max(3 x baseline, baseline + 100 ms) is a finding:
medium; high when p50 reaches 300 ms, critical at 1 s (Linux's initial
retransmission timeout, TCP_TIMEOUT_INIT) or when more than 10 % of the
handshakes needed a SYN retransmission. The leg that grew names the side of
the capture point where packets queued.

Servers far away answer slowly all the time: a server seen through at least
half of its class's bins whose own baseline already meets the growth test
against its class is judged against its own baseline (a series of its own),
so that a shift of the traffic mix toward it is no growth. The rule reads
the flow table, whose handshake columns merge exactly across files; in
`detector watch` it sees the window's flows only.

Lost first SYNs: a handshake whose client had to send its SYN again (the
first one, or its SYN-ACK, went unanswered) costs that client a whole
retransmission timeout, 1 s (Linux) or 3 s (Windows) and doubling, however
fast the path is otherwise. A quiet capture never fills the 10 s bins, so
over the whole capture, per class: at least RETRIED_MIN such handshakes and
RETRIED_MIN_RATIO of the class's are a finding at low, naming them; one
unlucky client among hundreds is not. The flow table counts a SYN as sent
again only when it comes later than every packet of its flow before it, and
200 ms at least after the SYN before it: the copies of a capture holding its
packets twice (a trace appended to itself, or merged with itself), and those
relayed by a host in the middle or mirrored twice, are no retransmissions
(flows.kernel.add_packet, SYN_RESEND_MIN_NS).
"""
from __future__ import annotations

import numpy as np

from ..decode.addr import ip_to_str
from ..detect.columns import flow_time_ns, ip_halves
from ..detect.confidence import Basis
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.figure import ReportFigure, TimeBins
from ..findings import Finding, iso_time
from ..rules import ALERT_SECONDS, COUNT, Param, Range
from ..units import NS

BIN_S = 10
# ours: what "far longer than usual" means; a queue adds its delay to every handshake through it
GROWTH_FACTOR = 3
GROWTH_MIN_MS = 100.0
HIGH_MS = 300.0                  # seed 000: "over 300ms"
CRITICAL_MS = 1000.0             # Linux TCP_TIMEOUT_INIT (include/net/tcp.h): the first SYN retransmission
SYN_RETX_CRITICAL_RATIO = 0.1
# Without a site file: RFC 1918 and RFC 4193 (ULA) addresses are internal
PRIVATE_PREFIXES = ("10.", "192.168.", *(f"172.{n}." for n in range(16, 32)), "fc", "fd")
SLOW_FLOWS_IN_EVIDENCE = 16
# Ours: handshakes of a class that needed their SYN sent again, over the whole capture, from which that is a finding
# (low). Fewer than 3 is a SYN or two lost to ordinary loss, a burst or one busy server; more needs a capture busy
# enough to hold them. A ratio of 5 % is several times what an ordinary path loses (about 1 % of packets, and a
# handshake is lost with either of its two first packets); lower reports healthy but lossy paths.
RETRIED_MIN = 3
RETRIED_MIN_RATIO = 0.05
RETRIED_IN_EVIDENCE = 16
# Retried handshakes from which their pattern is sure (confidence medium, high): three could be one lossy
# moment; a few dozen over the capture are a server or path that drops first SYNs.
RETRIED_MEDIUM = 5
RETRIED_HIGH = 20
# distant servers judged each against its own baseline (the busiest); the others are only left out of their class
MAX_DISTANT_SERVERS = 64
SERVERS_IN_EVIDENCE = 8
BINS_IN_EVIDENCE = 60
BINS_BEFORE = 12
LEGS = {"handshake_syn_synack_ms": "SYN -> SYN-ACK: the server's side of the capture point (the path beyond it, or "
                                   "the server itself)",
        "handshake_synack_ack_ms": "SYN-ACK -> ACK: the client's side of the capture point (the path toward the "
                                   "clients, or the clients themselves)"}


@register
class HandshakeRtt(Detector):
    rule_id = "handshake-rtt"
    EVE_SIGNATURE = (7, "Misc activity")
    # what its findings rest on beyond what it saw (detect.confidence): missing SYN-ACKs, and how long they took
    QUALITY_NEEDS = frozenset({"absence", "timing"})
    PARAMS = {
        "min_flows": Param(int, 20, "completed handshakes a 10 s bin of a class needs to have a median", COUNT,
                           "Fewer makes the median of a quiet bin one or two handshakes, which a single slow "
                           "server decides; more leaves small sites without a measurement."),
        "min_bins": Param(int, 3, "bins in a row whose median has grown before it is reported", Range(1, 10_000),
                          "Three bins are 30 s: a burst of slow handshakes shorter than that is a hiccup; longer "
                          "delays the report of a lasting problem."),
    }
    ALERTS = {
        "suppress_s": Param(float, 120.0, "least seconds between two events about one class or server",
                            ALERT_SECONDS, "A slow path stays slow for minutes; shorter repeats the event at every "
                                           "bin the median wavers in."),
        "resolve_s": Param(float, 60.0, "seconds without slow bins before the event is resolved", ALERT_SECONDS,
                           "Six bins: shorter resolves a problem that is only between two busy bins."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        # the per-bin tables of the last findings() (RttFigure draws them: the numbers its findings were judged on)
        self.tables: dict[str, dict] | None = None

    # the rule reads the flow table in findings(): it keeps no packet state
    def update(self, batch) -> None:
        return None

    def merge(self, other: Detector) -> Detector:
        check_merge(self, other)
        return self

    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        columns = ctx.flow_columns()
        hs = handshakes(columns if columns is not None else ctx.flows, self.site)
        self.tables = figure_tables(hs)
        if hs is None:
            return []
        out = []
        for internal in (False, True):
            cls = hs["internal"] == internal
            if not cls.any():
                continue
            name = "internal" if internal else "external"
            judged, distant = self._distant_servers(hs, cls)
            rest = cls & ~np.isin(hs["server"], distant)
            series = self._series(hs, rest, name, f"{name} handshakes", server=None)
            for server in judged:
                series += self._series(hs, cls & (hs["server"] == server), name, f"handshakes with {server}",
                                       server=server)
            out += series
            # bins whose retransmitted SYNs were reported already say it
            if not any(f.evidence["syn_retransmit_ratio"] > SYN_RETX_CRITICAL_RATIO for f in series):
                out += self._retried(hs, cls, name)
        return out

    def _retried(self, hs: dict, cls: np.ndarray, cls_name: str) -> list[Finding]:
        """The class's handshakes whose client sent its SYN again (module docstring), over the whole capture."""
        retried = cls & (hs["syn_retx"] > 0)
        n, total = int(np.count_nonzero(retried)), int(np.count_nonzero(cls))
        if n < RETRIED_MIN or n < RETRIED_MIN_RATIO * total:
            return []
        rows = np.flatnonzero(retried)
        rows = rows[np.argsort(hs["frame"][rows], kind="stable")]
        took = hs["rtt_first"][rows]
        sent = hs["syn_retx"][rows] + 1
        typical = float(np.median(hs["rtt_first"][cls & (hs["syn_retx"] == 0)])) if n < total else float("nan")
        t0, t1 = int(hs["time"][rows].min()), int(hs["time"][rows].max())
        servers, counts = np.unique(hs["server"][rows].astype(str), return_counts=True)
        order = np.argsort(-counts, kind="stable")[:SERVERS_IN_EVIDENCE]
        named = [f"{hs['client'][k]}:{hs['client_port'][k]} -> {hs['server'][k]}:{hs['port'][k]} "
                 f"({hs['syn_retx'][k] + 1} SYNs, {hs['rtt_first'][k] / 1000:,.1f} s)" for k in rows[:3]]
        more = f" and {n - len(named):,} more" if n > len(named) else ""
        usual = f"where the others took a median of {typical:,.0f} ms" if n < total else "as all of them did"
        msg = (f"{n:,} of {total:,} {cls_name} handshakes ({n / total:.0%}) needed their SYN sent again (the first "
               f"went unanswered, or its SYN-ACK was lost) between {iso_time(t0)} and {iso_time(t1)}: they took "
               f"{took.min() / 1000:,.1f} to {took.max() / 1000:,.1f} s from the first SYN, {usual}; "
               + ", ".join(named) + more)
        evidence = {
            "class": cls_name, "classes_from": hs["classes_from"], "handshakes": total, "retried_handshakes": n,
            "retried_ratio": round(n / total, 4), "median_handshake_ms": round(typical, 1) if n < total else None,
            "retried_ms": {"min": round(float(took.min()), 1), "median": round(float(np.median(took)), 1),
                           "max": round(float(took.max()), 1)},
            "servers": [{"server": str(s), "retried_handshakes": int(c)} for s, c in zip(servers[order],
                                                                                          counts[order])],
            "retried": [{"src_ip": str(hs["client"][k]), "src_port": int(hs["client_port"][k]),
                         "dest_ip": str(hs["server"][k]), "dest_port": int(hs["port"][k]),
                         "syns_sent": int(sent[i]), "handshake_ms": round(float(took[i]), 1),
                         "first_seen": iso_time(int(hs["time"][k])), "community_id": hs["community_id"][k]}
                        for i, k in enumerate(rows[:RETRIED_IN_EVIDENCE])],
            "retried_left_out": max(n - RETRIED_IN_EVIDENCE, 0),
            "evidence_frames": evidence_frames(hs["frame"][rows]),
        }
        fields = {"dest_ip": str(servers[0])} if len(servers) == 1 else {"place": _paths(cls_name)}
        basis = [Basis.sample(n, RETRIED_MEDIUM, RETRIED_HIGH, "handshakes whose first SYN went unanswered")]
        return [self.finding("low", msg, identifier=f"{cls_name} handshakes retried", first_seen=t0, last_seen=t1,
                             n=n, proto="TCP", evidence={k: v for k, v in evidence.items() if v is not None},
                             basis=basis, **fields)]

    def _distant_servers(self, hs: dict, cls: np.ndarray) -> tuple[list[str], list[str]]:
        """Servers of the class slow all along: seen in at least half its bins (and 3), with min_flows
        handshakes, whose own baseline (the median of their bins' medians) already meets the growth test
        against the class's typical server (the median of the own baselines of the servers seen in 3 bins)."""
        server_text, bin_, rtt = hs["server"][cls], hs["bin"][cls], hs["rtt"][cls]
        names, server = np.unique(server_text.astype(str), return_inverse=True)
        server = server.reshape(-1)
        # the median RTT and the handshakes of each (server, bin)
        groups, per_bin, size = _medians(np.stack([server, bin_]), rtt)
        # each server's own baseline (the median of its bins' medians), its bins and handshakes
        owners, baseline, bins = _medians(groups[:1], per_bin)
        flows = np.bincount(groups[0], weights=size, minlength=len(names))[owners[0]]
        seen = bins >= 3
        if seen.sum() < 2:
            return [], []
        typical = float(np.median(baseline[seen]))
        bins_total = len(np.unique(bin_))
        distant = seen & (bins >= bins_total / 2) & (flows >= self.params["min_flows"]) \
            & (baseline >= max(GROWTH_FACTOR * typical, typical + GROWTH_MIN_MS))
        # each is a series of its own: the busiest MAX_DISTANT_SERVERS; the others are only kept apart
        ranked = np.flatnonzero(distant)[np.argsort(-flows[distant], kind="stable")]
        judged = names[owners[0][ranked[:MAX_DISTANT_SERVERS]]]
        return sorted(str(server) for server in judged), sorted(str(server) for server in names[owners[0][distant]])

    def _series(self, hs: dict, rows: np.ndarray, cls_name: str, what: str, server: str | None) -> list[Finding]:
        table = _bin_table(hs, rows, self.params["min_flows"])
        if table is None:
            return []
        base = float(np.median(table["p50"]))
        grown = np.array([_grown(p, base) or r > SYN_RETX_CRITICAL_RATIO
                          for p, r in zip(table["p50"], table["retx_ratio"])])
        out = []
        for first, last in _runs(grown):
            if last - first + 1 < self.params["min_bins"]:
                continue
            out.append(self._finding(hs, rows, table, base, first, last, cls_name, what, server))
        return out

    def _finding(self, hs, rows, table, base, first, last, cls_name, what, server) -> Finding:
        run_bins = table["bin"][first:last + 1]
        p50, p90 = table["p50"][first:last + 1], table["p90"][first:last + 1]
        peak = float(p50.max())
        in_run = rows & np.isin(hs["bin"], run_bins)
        calm_bins = table["bin"][~np.array([_grown(p, base) for p in table["p50"]])]
        calm = rows & np.isin(hs["bin"], calm_bins)
        retx_ratio = float(np.count_nonzero(hs["syn_retx"][in_run] > 0) / max(np.count_nonzero(in_run), 1))
        if peak >= CRITICAL_MS or retx_ratio > SYN_RETX_CRITICAL_RATIO:
            severity = "critical"
        elif peak >= HIGH_MS:
            severity = "high"
        else:
            severity = "medium"
        growth = {leg: float(np.median(hs[leg][in_run]) - (np.median(hs[leg][calm]) if calm.any() else 0.0))
                  for leg in LEGS}
        leg = max(growth, key=growth.get)
        t0, t1 = int(hs["time"][in_run].min()), int(hs["time"][in_run].max())
        slow = np.flatnonzero(in_run)[np.argsort(-hs["rtt"][in_run], kind="stable")]
        servers, counts = np.unique(hs["server"][in_run], return_counts=True)
        order = np.argsort(-counts, kind="stable")[:SERVERS_IN_EVIDENCE]
        median_of = {s: float(np.median(hs["rtt"][in_run & (hs["server"] == s)])) for s in servers[order]}
        seconds = (int(run_bins[-1]) - int(run_bins[0]) + 1) * BIN_S
        handshakes_text = f"{int(np.count_nonzero(in_run)):,} handshakes"
        slowed = _grown(peak, base)
        if slowed:
            retx_text = (f"; {retx_ratio:.0%} of them needed a SYN retransmission"
                         if retx_ratio > SYN_RETX_CRITICAL_RATIO else "")
            side, where = LEGS[leg].split(": ", 1)
            msg = (f"{what.capitalize()} slowed from a median of {base:,.0f} ms to {peak:,.0f} ms (p90 "
                   f"{float(p90.max()):,.0f} ms) over {len(run_bins)} bins of {BIN_S} s from {iso_time(t0)} "
                   f"({handshakes_text}){retx_text}; the time grew on {side}, {where}, by {growth[leg]:,.0f} ms")
        else:
            msg = (f"{retx_ratio:.0%} of {what} needed a SYN retransmission (a lost SYN or SYN-ACK costs the client "
                   f"1 s) over {len(run_bins)} bins of {BIN_S} s from {iso_time(t0)} ({handshakes_text}); from the "
                   f"last SYN the median stayed {peak:,.0f} ms (baseline {base:,.0f} ms)")
        if server is None and median_of:
            msg += "; most handshakes with " + ", ".join(f"{s} ({m:,.0f} ms)" for s, m in
                                                         list(median_of.items())[:3])
        # the bins of the run and those just before it (the baseline it grew from), BINS_IN_EVIDENCE at most
        start = max(0, first - BINS_BEFORE)
        around = slice(start, start + BINS_IN_EVIDENCE)
        series = [{"bin": iso_time(int(b) * BIN_S * NS), "flows": int(n), "p50_ms": round(float(a), 1),
                   "p90_ms": round(float(c), 1), "syn_retransmit_ratio": round(float(r), 4)}
                  for b, n, a, c, r in zip(*(table[name][around] for name in ("bin", "flows", "p50", "p90",
                                                                               "retx_ratio")))]
        evidence = {
            "class": cls_name, "server": server, "baseline_p50_ms": round(base, 1), "peak_p50_ms": round(peak, 1),
            "peak_p90_ms": round(float(p90.max()), 1), "slow_bins": len(run_bins), "slow_seconds": seconds,
            "bin_s": BIN_S, "handshakes": int(np.count_nonzero(in_run)), "syn_retransmit_ratio": round(retx_ratio, 4),
            "leg_grown": ("syn_synack" if leg == "handshake_syn_synack_ms" else "synack_ack") if slowed else None,
            "leg_growth_ms": {("syn_synack" if k == "handshake_syn_synack_ms" else "synack_ack"): round(v, 1) + 0.0
                              for k, v in growth.items()},
            "side": LEGS[leg] if slowed else None, "classes_from": hs["classes_from"],
            "servers": [{"server": s, "handshakes": int(c), "p50_ms": round(median_of[s], 1)}
                        for s, c in zip(servers[order], counts[order])],
            "slowest": [{"src_ip": str(hs["client"][k]), "src_port": int(hs["client_port"][k]),
                         "dest_ip": str(hs["server"][k]),
                         "dest_port": int(hs["port"][k]), "rtt_ms": round(float(hs["rtt"][k]), 1),
                         "community_id": hs["community_id"][k]} for k in slow[:SLOW_FLOWS_IN_EVIDENCE]],
            "per_bin": series,
            "evidence_frames": evidence_frames(np.sort(hs["frame"][slow[:64]])),
        }
        identifier = f"server {server}" if server is not None else f"{cls_name} handshakes"
        fields = {"dest_ip": server} if server is not None else {"place": _paths(cls_name)}
        return self.finding(severity, msg, identifier=identifier, first_seen=t0, last_seen=t1,
                            n=int(np.count_nonzero(in_run)), proto="TCP",
                            evidence={k: v for k, v in evidence.items() if v is not None}, **fields)

    def figures(self, findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
        return [RttFigure(bins, self.site, self.tables)] if findings else []


def _grown(p50: float, base: float) -> bool:
    return p50 >= max(GROWTH_FACTOR * base, base + GROWTH_MIN_MS)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for k in np.flatnonzero(mask).tolist():
        if out and out[-1][1] == k - 1:
            out[-1] = (out[-1][0], k)
        else:
            out.append((k, k))
    return out


FLOW_COLUMNS_READ = ("first_seen", "handshake_rtt_ms", "handshake_syn_synack_ms", "handshake_synack_ack_ms",
                     "syn_retransmits", "src_ip", "dest_ip", "src_port", "dest_port", "first_frame", "community_id")


def handshakes(flows, site) -> dict | None:
    """The flow table's whole handshakes as columns: time (first packet, ns), 10 s bin, RTT from the last
    SYN and its legs (ms), RTT from the first SYN (ms), SYN retransmissions, client, server, port, frame, community
    id, and the class.

    `flows` is FlowTable.coded_columns() (AnalysisContext.flow_columns: numbers, no pandas) or its DataFrame
    view."""
    if flows is None or "handshake_synack_ack_ms" not in flows or len(flows["first_seen"]) == 0:
        return None
    if isinstance(flows, dict):
        synack_ack = np.asarray(flows["handshake_synack_ack_ms"], np.float64)
        syn_synack = np.asarray(flows["handshake_syn_synack_ms"], np.float64)
        rows = np.flatnonzero(~np.isnan(synack_ack) & ~np.isnan(syn_synack))
        if len(rows) == 0:
            return None
        out = {"time": np.asarray(flows["first_seen"], np.int64)[rows],
               "handshake_syn_synack_ms": syn_synack[rows], "handshake_synack_ack_ms": synack_ack[rows],
               "rtt_first": np.asarray(flows["handshake_rtt_ms"], np.float64)[rows],
               "syn_retx": np.asarray(flows["syn_retransmits"], np.int64)[rows],
               "client": ip_to_str(flows["src_ip_hi"][rows], flows["src_ip_lo"][rows]),
               "server": ip_to_str(flows["dest_ip_hi"][rows], flows["dest_ip_lo"][rows]),
               "port": np.asarray(flows["dest_port"], np.int64)[rows],
               "client_port": np.asarray(flows["src_port"], np.int64)[rows],
               "frame": np.asarray(flows["first_frame"], np.int64)[rows],
               "community_id": _texts(flows["community_id"], rows)}
    else:
        whole = flows["handshake_synack_ack_ms"].notna() & flows["handshake_syn_synack_ms"].notna()
        f = flows.loc[whole, list(FLOW_COLUMNS_READ)]      # the columns read: taking every column costs most
        if len(f) == 0:
            return None
        out = {"time": flow_time_ns(f["first_seen"]),
               "handshake_syn_synack_ms": f["handshake_syn_synack_ms"].to_numpy(np.float64),
               "handshake_synack_ack_ms": f["handshake_synack_ack_ms"].to_numpy(np.float64),
               "rtt_first": f["handshake_rtt_ms"].to_numpy(np.float64),
               "syn_retx": f["syn_retransmits"].to_numpy(np.int64),
               "client": f["src_ip"].to_numpy(object), "server": f["dest_ip"].to_numpy(object),
               "port": f["dest_port"].to_numpy(np.int64), "client_port": f["src_port"].to_numpy(np.int64),
               "frame": f["first_frame"].to_numpy(np.int64),
               "community_id": f["community_id"].to_numpy(object)}
    out["rtt"] = out["handshake_syn_synack_ms"] + out["handshake_synack_ack_ms"]
    out["bin"] = out["time"] // (BIN_S * NS)
    addresses = np.unique(np.concatenate([out["client"], out["server"]]).astype(str))
    if site.given("local_networks"):
        halves = np.array([ip_halves(a) or (0, 0) for a in addresses], dtype=np.uint64).reshape(-1, 2)
        local = addresses[site.local_mask(halves[:, 0], halves[:, 1])]
        out["classes_from"] = "the site's local_networks"
    else:
        local = addresses[_private(addresses)]
        out["classes_from"] = "RFC 1918 and ULA addresses as internal (no local_networks in a site file)"
    out["internal"] = np.isin(out["client"].astype(str), local) & np.isin(out["server"].astype(str), local)
    return out


def _texts(column, rows: np.ndarray) -> np.ndarray:
    """The text of `rows` of a flow table text column (TextCodes, or already text)."""
    if hasattr(column, "codes"):
        return column.value_texts()[np.asarray(column.codes, dtype=np.intp)[rows]]
    return np.asarray(column, dtype=object)[rows]


def _medians(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group `values` by the rows of `keys` (a 2-D int array, one key column per value): (the distinct keys as
    columns, each group's median, each group's size), groups in key order."""
    order = np.lexsort((values, *keys[::-1]))
    k, v = keys[:, order], values[order]
    new = np.ones(len(v), dtype=bool)
    new[1:] = (k[:, 1:] != k[:, :-1]).any(axis=0)
    starts = np.flatnonzero(new)
    size = np.diff(np.append(starts, len(v)))
    median = (v[starts + (size - 1) // 2] + v[starts + size // 2]) / 2
    return k[:, starts], median, size


def _private(addresses: np.ndarray) -> np.ndarray:
    """Which address texts (as the flow table writes them: IPv4 dotted, IPv6 compressed lower case) are RFC 1918
    or ULA (fc00::/7) addresses; their text prefixes say it, without parsing each address."""
    out = np.zeros(len(addresses), dtype=bool)
    for prefix in PRIVATE_PREFIXES:
        out |= np.char.startswith(addresses, prefix)
    # "fc"/"fd" must be the whole first group of an IPv6 address: fc00::/7 is fc00-fdff
    v6 = np.char.find(addresses, ":") >= 0
    first = np.array([a.split(":", 1)[0] for a in addresses[v6]], dtype=str)
    out[v6] = (np.char.str_len(first) == 4) & (np.char.startswith(first, "fc") | np.char.startswith(first, "fd"))
    return out


def _bin_table(hs: dict, rows: np.ndarray, min_flows: int) -> dict | None:
    """Per 10 s bin of `rows` with at least min_flows handshakes: flows, p50, p90, SYN retransmission ratio."""
    b = hs["bin"][rows]
    if len(b) == 0:
        return None
    rtt, retx = hs["rtt"][rows], hs["syn_retx"][rows]
    order = np.argsort(b, kind="stable")
    b, rtt, retx = b[order], rtt[order], retx[order]
    starts = np.flatnonzero(np.concatenate(([True], b[1:] != b[:-1])))
    ends = np.append(starts[1:], len(b))
    keep = [(s, e) for s, e in zip(starts, ends) if e - s >= min_flows]
    if not keep:
        return None
    return {"bin": np.array([b[s] for s, _ in keep]), "flows": np.array([e - s for s, e in keep]),
            "p50": np.array([np.median(rtt[s:e]) for s, e in keep]),
            "p90": np.array([np.percentile(rtt[s:e], 90) for s, e in keep]),
            "retx_ratio": np.array([np.count_nonzero(retx[s:e] > 0) / (e - s) for s, e in keep])}


def _baseline(hs: dict, rows: np.ndarray, min_flows: int) -> float | None:
    table = _bin_table(hs, rows, min_flows)
    return None if table is None else float(np.median(table["p50"]))


def figure_tables(hs: dict | None) -> dict[str, dict]:
    """Each class's per-bin table of every handshake (_bin_table), as the figure draws it: "external",
    "internal"."""
    tables = {}
    for internal, name in ((False, "external"), (True, "internal")):
        table = None if hs is None else _bin_table(hs, hs["internal"] == internal, 1)
        if table is not None:
            tables[name] = table
    return tables


class RttFigure(ReportFigure):
    """Handshake RTT (from the last SYN) per 10 s: p50 and p90 of each class, from the flow table.

    `tables`: the rule's own (HandshakeRtt.tables, from the flow table its
    findings were judged on: one source for both, and the report reads no
    flow table again); None draws from the `flows` given to draw().
    """

    needs_batches = False

    title = "TCP handshake RTT p50 / p90 per 10 s"

    def __init__(self, bins: TimeBins, site, tables: dict[str, dict] | None = None):
        self.bins = bins
        self.site = site
        self.tables = tables

    def add(self, batch) -> None:
        return None

    def merge(self, other: RttFigure) -> RttFigure:
        """Nothing to take: drawn from the flow table."""
        return self

    def draw(self, ax, flows) -> None:
        tables = self.tables if self.tables is not None else figure_tables(handshakes(flows, self.site))
        for name, table in tables.items():
            x = table["bin"] * BIN_S - self.bins.start_ns / NS
            line, = ax.plot(x, table["p50"], drawstyle="steps-post", lw=1.2, label=f"{name} p50")
            ax.plot(x, table["p90"], drawstyle="steps-post", lw=0.8, ls="--", color=line.get_color(),
                    label=f"{name} p90")
        ax.axhline(HIGH_MS, color="#d33", lw=0.8, ls=":", label=f"{HIGH_MS:.0f} ms")
        self.bins.time_axis(ax)
        ax.set_ylabel("handshake RTT (ms)")
        ax.legend(loc="upper left", fontsize="small")


def _paths(cls_name: str) -> str:
    """The place of a finding about a class of handshakes rather than one server (incidents.where)."""
    return f"the {cls_name} servers and the paths to them"

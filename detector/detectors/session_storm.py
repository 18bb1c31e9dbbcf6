"""session-storm: one source opening new flows faster than a connection-tracking box should take.

Seed 003: an infected subscriber's flows make the NAT server's conntrack
table "rise sharply", and "one such subscriber can put the server down".
ntopng's flow_flood check (check_definitions/host/flow_flood.lua) fires on
a host opening more than 256 flows a second, answered or not; so does this
rule, per source and per one-second bin of the flows' first packets.

A new flow is one the capture saw begin, to a unicast address: TCP from
the originator's SYN (a connection picked up mid-stream is not new) or a
bare ACK/FIN/NULL probe (detector.detect.attempts), every UDP flow and other IP
protocol, ICMP requests (errors belong to the flows they answer). The
carrier flows of a UDP tunnel (VXLAN, Geneve, GTP-U) are not counted: one
per inner flow, they mirror the inner flows, which are. The rate
is exact, from the flow table in findings(), merged across files; in a
watch it is the rate within the live window.

Severity follows how long and how far above the rate the storm is (issue
27: a peer-to-peer client's one second of 275 new flows, 19 % answered, was
medium): one second just over `storm_flows_per_s` is low (a P2P client
connecting to a fresh peer list, a page that names many hosts); medium
needs the storm held, `medium_seconds` seconds above the rate within one
minute (SUSTAIN_WINDOW_S; ntopng's flow_flood scripts of 2019-2021 ran in
its minute-by-minute check),
or far above it, a peak of `medium_ratio` times the rate; high at
`high_flows_per_s`, or when the source holds at least `table_share` of a
`table_size`-entry conntrack table: the entries the connection-table model
(detect.conntrack.occupancy, with `profile`'s timeouts after each flow's
last packet) gives it at the table's peak, and never fewer than the most of
its flows open at one instant as captured (first to last packet).

Near-misses: a busy resolver, proxy or NAT gateway opens flows as fast as
its clients ask, answered ones; put it in `allowlist`. Backscatter (SYN-ACKs
and resets arriving unsolicited) opens nothing: its receiver sent nothing.

State: none of its own; the flow table is the state.
"""
from __future__ import annotations

import numpy as np

from ..detect.attempts import (
    attempts,
    attempts_of,
    by_source,
    flow_numbers,
    in_networks,
    most_open,
    parse_networks,
    service_text,
)
from ..detect.conntrack import PROFILES, occupancy
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.figure import ReportFigure, TimeBins
from ..errors import RuleError
from ..findings import Finding, iso_time
from ..rules import ALERT_SECONDS, RATE_PPS, RATIO, Param, Range, did_you_mean
from ..units import NS, plural

# Sources reported per run, the fastest first.
FINDINGS_MAX = 256
# Samples named in a finding's evidence.
SAMPLES = 10
# A source's share of the conntrack table is named in the message from here (always in the evidence).
TABLE_SHARE_NAMED = 0.01
# Figures drawn per run: the first sources of the report.
FIGURES_MAX = 4
# The seconds above the rate that make a storm held are counted within one minute, the period ntopng's
# flow_flood scripts of 2019-2021 ran in ("min" granularity). Longer adds up a P2P client's bursts minutes
# apart; shorter needs the storm back to back.
SUSTAIN_WINDOW_S = 60


@register
class SessionStorm(Detector):
    rule_id = "session-storm"
    EVE_SIGNATURE = (20, "Potentially Bad Traffic")
    # what its findings rest on beyond what it saw (detect.confidence): new flows a second, and how few were answered
    QUALITY_NEEDS = frozenset({"absence", "timing"})
    PARAMS = {
        "storm_flows_per_s": Param(int, 256, "new flows one source opens within one second, above which it is a "
                                             "storm (ntopng flow_flood)", RATE_PPS,
                                   "Lower catches smaller storms but also busy clients (a proxy, a crawler); higher "
                                   "lets one subscriber fill a conntrack table for longer before it is reported."),
        "medium_seconds": Param(int, 5, "(ours) seconds above storm_flows_per_s within one minute from which the "
                                        "storm is held, and medium", Range(1, 60),
                                "One second over the rate is a burst a P2P client or a browser makes; five in a minute "
                                "add 1,300 entries to a conntrack table at least. Lower reports bursts at medium, "
                                "higher keeps a held storm at low for longer."),
        "medium_ratio": Param(float, 2.0, "(ours) peak new flows per second, as a multiple of storm_flows_per_s, from "
                                          "which a storm of any length is medium", Range(1, 1000),
                              "Twice the rate (512 flows in one second) is no burst of a client's; lower reports "
                              "a P2P client's busiest second at medium, higher waits for the storm to be held."),
        "high_flows_per_s": Param(int, 2560, "new flows per second of one source from which the storm is high",
                                  RATE_PPS,
                                  "Ten times the storm rate: at 2,560 flows a second one source adds 150,000 "
                                  "entries a minute, more than half of the default conntrack table."),
        "table_size": Param(int, 262144, "entries of the conntrack table the storm is held against "
                                         "(nf_conntrack_max; 262,144 is the kernel's default on hosts with more than "
                                         "4 GiB)", Range(1, 2**32),
                            "Set it to the real nf_conntrack_max of the box behind the capture point (seed 003: "
                            "3,145,728)."),
        "table_share": Param(float, 0.1, "share of the modelled conntrack table one source must hold for the storm "
                                         "to be high", RATIO,
                             "Lower escalates sooner. The model holds each flow for its end state's timeout "
                             "(`profile`); a table that forgets faster holds less of a storm."),
        "profile": Param(str, "linux", "timeouts of the modelled conntrack table, as the connection-table rule's "
                                       "profiles: 'linux', 'seed-003', 'suricata'", Range(1, 16),
                         "Pick the box's own behind the capture point."),
        "allowlist": Param(list, [], "sources never judged (CIDR): resolvers, proxies, NAT gateways, monitoring "
                                     "hosts", Range(0, 4096),
                           "Each entry silences everything its sources open, a storm from behind a NAT gateway "
                           "included."),
    }
    ALERTS = {
        "suppress_s": Param(float, 60.0, "least seconds between two events about one source", ALERT_SECONDS,
                            "A storm lasts minutes; shorter shows its rate change, longer keeps the feed quiet."),
        "resolve_s": Param(float, 30.0, "seconds without the storm in the window before the source is resolved",
                           ALERT_SECONDS,
                           "Storms pulse; shorter resolves and raises one storm again between pulses."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.allowed = parse_networks(rule, "allowlist", self.params["allowlist"])
        if self.params["profile"] not in PROFILES:
            raise RuleError(rule.path, "params.profile", f"not one of {', '.join(PROFILES)}"
                                                         f"{did_you_mean(self.params['profile'], PROFILES)}")

    def update(self, batch) -> None:
        return None     # the flow table is the state

    def merge(self, other: SessionStorm) -> SessionStorm:
        check_merge(self, other)
        return self

    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        a = attempts_of(ctx)
        rows = np.flatnonzero(a["opened"])
        if len(rows) == 0:
            return []
        src, second = a["src"][rows], a["first_ns"][rows] // NS
        order = np.lexsort((second, src))
        src, second = src[order], second[order]
        starts = np.flatnonzero(np.concatenate(([True], (src[1:] != src[:-1]) | (second[1:] != second[:-1]))))
        counts = np.diff(np.append(starts, len(src)))
        storming = counts > self.params["storm_flows_per_s"]
        if not storming.any():
            return []
        # the storming seconds, grouped by source (cells are sorted by source, then second)
        cell_src, cell_second, cell_count = src[starts][storming], second[starts][storming], counts[storming]
        first = np.flatnonzero(np.concatenate(([True], cell_src[1:] != cell_src[:-1])))
        sources, peaks = cell_src[first], np.maximum.reduceat(cell_count, first)
        ends = np.append(first[1:], len(cell_src))
        flows_of = by_source(a["src"], rows)
        modelled = self._modelled_entries(ctx)
        out = []
        for k in np.argsort(-peaks, kind="stable")[:FINDINGS_MAX].tolist():
            name = str(a["src_names"][sources[k]])
            if in_networks(name, self.allowed):
                continue
            cells = slice(first[k], ends[k])
            out.append(self._finding(a, flows_of(sources[k]), cell_second[cells], cell_count[cells], name,
                                     modelled.get(name, 0)))
        return out

    def _modelled_entries(self, ctx: AnalysisContext) -> dict[str, int]:
        """Entries of the modelled connection table held by its busiest sources at its peak (address text ->
        entries); run only once a storm is found."""
        columns = ctx.flow_columns()
        occ = occupancy(columns if columns is not None else ctx.flows, self.params["profile"])
        return {top["source"]: int(top["entries"]) for top in occ.top_sources}

    def _finding(self, a: dict, mine: np.ndarray, seconds: np.ndarray, per_second: np.ndarray, name: str,
                 modelled: int) -> Finding:
        p = self.params
        peak = int(per_second.max())
        peak_at = int(seconds[np.argmax(per_second)])
        in_storm = mine[np.isin(a["first_ns"][mine] // NS, seconds)]
        captured = most_open(a["first_ns"][mine], a["last_ns"][mine])
        entries = max(captured, modelled)
        share = entries / p["table_size"]
        held = _most_within(seconds, SUSTAIN_WINDOW_S)
        ratio = peak / p["storm_flows_per_s"]
        if peak >= p["high_flows_per_s"]:
            severity, why = "high", f"; far above the rate: {ratio:.1f} times it"
        elif share >= p["table_share"]:
            severity, why = "high", "" if share >= TABLE_SHARE_NAMED else f"; holding {share:.2%} of the table"
        elif held >= p["medium_seconds"]:
            severity, why = "medium", f"; held: {held} seconds above the rate within {SUSTAIN_WINDOW_S} s"
        elif ratio >= p["medium_ratio"]:
            severity, why = "medium", f"; far above the rate: {ratio:.1f} times it"
        else:
            severity, why = "low", (f"; a burst, not held: {plural(held, 'second')} above the rate within "
                                    f"{SUSTAIN_WINDOW_S} s, at most {ratio:.2f} times it")
        answered = float(a["answered"][in_storm].mean()) if len(in_storm) else 0.0
        service = (a["proto"][in_storm] << 16) | a["port"][in_storm]
        values, counts = np.unique(service, return_counts=True)
        top = np.lexsort((values, -counts))[:SAMPLES]
        first_ns, last_ns = int(a["first_ns"][in_storm].min()), int(a["first_ns"][in_storm].max())
        msg = (f"{name} opened {peak:,} new flows in one second (at {iso_time(peak_at * NS)}), "
               f"{plural(len(seconds), 'second')} above {p['storm_flows_per_s']:,}/s with {len(in_storm):,} new flows, "
               f"{answered:.0%} of them answered")
        if share >= TABLE_SHARE_NAMED:
            msg += (f"; {entries:,} of its flows in a modelled {p['table_size']:,}-entry conntrack table at once "
                    f"({share:.0%}, {p['profile']} timeouts)")
        msg += why
        evidence = {
            "source": name, "peak_flows_per_s": peak, "peak_at": iso_time(peak_at * NS),
            "storm_seconds": len(seconds), "storm_flows": len(in_storm),
            f"busiest_{SUSTAIN_WINDOW_S}s_storm_seconds": held, "peak_ratio": round(ratio, 2),
            "new_flows_total": len(mine), "answered_ratio": round(answered, 3),
            "destinations": len(np.unique(a["dst"][in_storm])),
            "top_services": [{"value": service_text(values[i]), "flows": int(counts[i])} for i in top],
            "open_at_once_captured": captured, "conntrack_entries_modelled": modelled,
            "table_size": p["table_size"], "table_share": round(share, 4), "profile": p["profile"],
            "evidence_frames": evidence_frames(np.sort(a["frame"][in_storm])),
        }
        return self.finding(severity, msg, identifier=name, first_seen=first_ns, last_seen=last_ns, n=len(in_storm),
                            src_ip=name, evidence=evidence)

    def figures(self, findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
        return [NewFlowsFigure(f.identifier, bins, self.params["storm_flows_per_s"]) for f in findings[:FIGURES_MAX]]


def _most_within(seconds: np.ndarray, window: int) -> int:
    """The most of the (sorted, distinct) `seconds` within any `window` seconds starting at one of them."""
    return int((np.searchsorted(seconds, seconds + window) - np.arange(len(seconds))).max())


class NewFlowsFigure(ReportFigure):
    """New flows per second one source opened, against the storm threshold."""

    needs_batches = False

    def __init__(self, source: str, bins: TimeBins, threshold: int):
        self.title = f"Source {source}: new flows per second"
        self.source = source
        self.bins = bins
        self.threshold = threshold

    def add(self, batch) -> None:
        return None     # drawn from the flow table

    def merge(self, other: NewFlowsFigure) -> NewFlowsFigure:
        """Nothing to take: drawn from the flow table."""
        return self

    def draw(self, ax, flows) -> None:
        a = attempts(flow_numbers(flows))
        mine = a["opened"] & (a["src"] == a["src_names"].code_of(self.source))
        # per whole second, as the rule counts its peak (the report's bins may be milliseconds)
        ax.plot(*self.bins.per_second(a["first_ns"][mine]), drawstyle="steps-post", lw=1, color="#d33",
                label="new flows/s")
        ax.axhline(self.threshold, color="#999", lw=0.8, ls="--", label=f"storm above {self.threshold:,}/s")
        self.bins.time_axis(ax)
        ax.set_ylabel("new flows/s")
        ax.legend(loc="upper left", fontsize="small")

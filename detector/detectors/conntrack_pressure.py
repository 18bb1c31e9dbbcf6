"""conntrack-pressure: how full a stateful box's connection table would be with the captured flows.

A Linux router, NAT or firewall (nf_conntrack), or an IDS (Suricata's flow
table) keeps one entry per connection until the entry's timeout after its
last packet, a timeout that depends on the state the connection ended in:
an unanswered SYN stays 2 minutes in Linux, a closed connection 2 minutes
in TIME_WAIT, an established one 5 days. When the table is full, Linux
drops new connections ("nf_conntrack: table full, dropping packet"). Seed
003: an infected subscriber sweeping addresses made the CGNAT's conntrack
"rise sharply", and one such subscriber could take the server down.

The model (`occupancy`, detector.detect.conntrack, which other rules share): each flow
of the flow table occupies [first_seen, last_seen + the timeout of its end
state] (end states from Zeek's conn_state, `END_STATE_OF`), rows of one
5-tuple (either orientation) joined when the gap between them is shorter
than that timeout, as the kernel's entry would have lived on. Counting the
entries alive at each insert gives the concurrency; the report names the
peak, when it happened, the busiest second of inserts, the state mix and
the sources holding the most entries at the peak with the share of their
entries nobody answered. Flows to listeners the box does not track
(`untracked`: NOTRACK rules in the raw table, as seed 002's load balancers
had) are left out.

The model counts what the capture shows: connections older than the
capture, or through paths it does not see, are missing, so the concurrency
is a lower bound; entries still alive at the capture's end are counted up
to it (censored). The rule needs every flow's final state, so it works on
the whole flow table in findings(); in `detector watch` it sees only the
window's flows, and its concurrency is a lower bound of the box's.

State: none per batch (update() returns at once); the flow table, which
merges across files and partitions, is the state.
"""
from __future__ import annotations

import numpy as np

from ..detect.columns import endpoint
from ..detect.conntrack import (
    PROFILES,
    SERIES_POINTS,
    TARGET_SHARE,
    TARGET_SOURCES,
    Occupancy,
    occupancy,
    parse_untracked,
)
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.figure import ReportFigure, TimeBins
from ..errors import RuleError
from ..findings import Finding, iso_time
from ..rules import ALERT_SECONDS, COUNT, RATIO, Param, Range, did_you_mean
from ..schema import PacketBatch
from ..units import NS


@register
class ConntrackPressure(Detector):
    rule_id = "conntrack-pressure"
    EVE_SIGNATURE = (4, "Misc activity")
    # what its findings rest on beyond what it saw (detect.confidence): each entry's life by its state's timeout
    QUALITY_NEEDS = frozenset({"timing"})
    needs_fingerprint = False       # it reads no packet, only the flow table
    PARAMS = {
        # 262,144: what Linux sets on a 64-bit host with more than 4 GiB (nf_conntrack_core.c, "sanitize table
        # size default settings", 2021); seed 003's CGNAT ran 3,145,728
        "table_size": Param(int, 262144, "entries the box's table holds (net.netfilter.nf_conntrack_max, or "
                                         "Suricata's flows within flow.memcap)", COUNT,
                            "Set it to the box's real limit: a larger value hides pressure, a smaller one "
                            "reports a healthy box."),
        "hashsize": Param(int, 262144, "buckets of the table's hash (the nf_conntrack module's hashsize; "
                                       "Suricata's flow.hash-size)", COUNT,
                          "Only the reported average chain length (entries per bucket) depends on it."),
        "profile": Param(str, "linux", "timeouts per end state: 'linux' (kernel defaults), 'seed-003' (a CGNAT "
                                       "tuned per state), 'suricata' (flow-timeouts defaults)", Range(1, 16),
                         "Pick the box's own: Linux keeps established connections 5 days, so a capture of long "
                         "sessions fills its table far more than Suricata's 10 minutes."),
        "untracked": Param(list, [], "listeners the box does not track (NOTRACK in the raw table): ADDRESS[/PREFIX]"
                                     "[:PORT], [IPv6]:PORT or *:PORT, matched against each flow's responder",
                           Range(0, 1024),
                           "Each listener named removes its flows from the model; naming one the box does track "
                           "hides real pressure."),
        # Suricata enters its emergency mode when the flow memcap is reached and leaves it once
        # flow.emergency-recovery (30 %) of the flows are pruned: at 70 % of its table
        "warn_fill_ratio": Param(float, 0.7, "share of the table filled at the peak from which the finding is "
                                             "medium (at 1, high: Linux drops new connections)", RATIO,
                                 "Lower warns earlier, on boxes that may still cope; higher leaves less room "
                                 "between the warning and dropped connections."),
        # 1 %: 2,621 entries of the default table, 31,457 of seed 003's
        "report_fill_ratio": Param(float, 0.01, "share of the table filled at the peak from which the capacity "
                                                "report (info, with its figure) is written; medium and high always "
                                                "are", RATIO,
                                   "At 0 every capture with a flow gets a report; higher keeps the report for "
                                   "tables that carry real load. An idle table's report says nothing."),
        "source_ratio": Param(float, 0.1, "share of the table one source's entries fill at the peak from which "
                                          "the finding is high", RATIO,
                              "One subscriber holding a tenth of a shared table starves the others; lower "
                              "values flag busy resolvers and NAT gateways, which the `untracked` list is for."),
    }
    ALERTS = {
        "suppress_s": Param(float, 300.0, "least seconds between two events about the table", ALERT_SECONDS,
                            "A filling table is news when it crosses a threshold; shorter repeats the same "
                            "capacity report every window."),
        "resolve_s": Param(float, 120.0, "seconds without a new packet in the window before the table's alert is "
                                         "resolved (while traffic flows, the alert follows the report's severity "
                                         "down to info)", ALERT_SECONDS,
                           "Entries expire over minutes (SYN_SENT 2 min in Linux), so a table stays full that long "
                           "after a sweep stops; shorter resolves a link that merely paused."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        if self.params["profile"] not in PROFILES:
            raise RuleError(rule.path, "params.profile", f"not one of {', '.join(PROFILES)}"
                                                         f"{did_you_mean(self.params['profile'], PROFILES)}")
        try:
            self.untracked = parse_untracked(self.params["untracked"])
        except ValueError as exc:
            raise RuleError(rule.path, "params.untracked", str(exc)) from None

    def update(self, batch: PacketBatch) -> None:
        """Nothing per batch: the model reads the flow table, which holds every flow's final state."""

    def merge(self, other: ConntrackPressure) -> ConntrackPressure:
        check_merge(self, other)
        return self

    def model(self, flows) -> Occupancy:
        return occupancy(flows, self.params["profile"], self.untracked)

    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        columns = ctx.flow_columns()
        occ = self.model(columns if columns is not None else ctx.flows)
        if occ.entries == 0:
            return []
        finding = self._finding(occ)
        if finding.severity == "info" and occ.peak < self.params["report_fill_ratio"] * self.params["table_size"]:
            return []
        return [finding]

    def _finding(self, occ: Occupancy) -> Finding:
        p = self.params
        size = p["table_size"]
        fill = occ.peak / size
        top = occ.top_sources[0]
        source_fill = top["entries"] / size
        if fill >= 1:
            severity, verdict = "high", "the table is full: Linux drops new connections (\"table full\")"
        elif source_fill >= p["source_ratio"]:
            severity, verdict = "high", (f"one source, {top['source']}, holds {source_fill:.1%} of the table "
                                         f"({top['unreplied_ratio']:.0%} of its entries unanswered)")
        elif fill >= p["warn_fill_ratio"]:
            severity, verdict = "medium", f"above {p['warn_fill_ratio']:.0%} of the table"
        else:
            severity, verdict = "info", "capacity report"
        msg = (f"conntrack model ({occ.profile} timeouts): at most {occ.peak:,} entries at once of a "
               f"{size:,}-entry table ({fill:.1%}) at {iso_time(occ.peak_ns)}, up to {occ.peak_insert_rate:,} "
               f"new entries in one second; {verdict}")
        target = _target(occ)
        if target is not None:
            msg += (f"; {target['entries']:,} of the entries ({target['entries'] / occ.peak:.0%}) toward "
                    f"{endpoint(target['destination'], target['port'])} from {target['sources']:,} sources "
                    f"({target['unreplied_ratio']:.0%} unanswered)")
        span_s = max((occ.last_ns - occ.first_ns) / NS, 0.0)
        bin_ns = NS * max(1, -(-(occ.last_ns - occ.first_ns + 1) // (SERIES_POINTS * NS)))     # whole seconds
        count = int(-(-(occ.last_ns - occ.first_ns + 1) // bin_ns))
        peaks, inserts = occ.series(occ.first_ns, bin_ns, count)
        evidence = {
            "profile": occ.profile, "table_size": size, "hashsize": p["hashsize"],
            "peak_entries": occ.peak, "peak_time": iso_time(occ.peak_ns), "peak_fill_ratio": round(fill, 6),
            "peak_insert_rate_per_s": occ.peak_insert_rate, "peak_insert_time": iso_time(occ.peak_insert_ns),
            "average_chain_length": round(occ.peak / p["hashsize"], 6),
            "state_mix_at_peak": occ.state_mix, "top_sources_at_peak": occ.top_sources,
            "sources_at_peak": occ.sources_at_peak,
            **_left_out("top_sources_at_peak", occ.sources_at_peak - len(occ.top_sources)),
            "top_destinations_at_peak": occ.top_destinations, "destinations_at_peak": occ.destinations_at_peak,
            **_left_out("top_destinations_at_peak", occ.destinations_at_peak - len(occ.top_destinations)),
            "entries": occ.entries, "flows": occ.flows, "untracked_flows": occ.untracked_flows,
            "censored_entries": occ.censored, "capture_s": round(span_s, 3),
            "series_bin_s": bin_ns / NS, "concurrency_series": peaks.tolist(), "insert_series": inserts.tolist(),
            "lower_bound": "connections older than the capture, or on paths it does not see, are not counted",
            "evidence_frames": evidence_frames(np.asarray(occ.top_destination_frames if target is not None
                                                          else occ.top_source_frames, np.int64)),
        }
        # what the table's load is about: the listener that draws it (its sources as counts), else the source
        # holding most entries
        about = ({"dest_ip": target["destination"], "dest_port": target["port"]} if target is not None
                 else {"src_ip": top["source"]})
        return self.finding(severity, msg, identifier=f"conntrack table ({occ.profile})", first_seen=occ.first_ns,
                            last_seen=occ.last_ns, n=occ.peak, evidence=evidence, **about)

    def figures(self, findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
        return [ConcurrencyFigure(self, bins)] if findings else []


def _left_out(name: str, count: int) -> dict:
    """`<name>_left_out`: how many a capped evidence list left out, when it left any (detector.findings's
    convention)."""
    return {f"{name}_left_out": int(count)} if count > 0 else {}


def _target(occ: Occupancy) -> dict | None:
    """The listener the table's load is about (TARGET_SHARE of the entries at the peak, from TARGET_SOURCES
    sources or more, more than the busiest source holds), or None."""
    if not occ.top_destinations:
        return None
    top = occ.top_destinations[0]
    busiest_source = occ.top_sources[0]["entries"] if occ.top_sources else 0
    if (top["entries"] >= TARGET_SHARE * occ.peak and top["sources"] >= TARGET_SOURCES
            and top["entries"] > busiest_source):
        return top
    return None


class ConcurrencyFigure(ReportFigure):
    """The modelled table's entries over the capture against its size, with the rate of new entries."""

    needs_batches = False

    title = "Modelled conntrack entries vs table size, with new entries per second"

    def __init__(self, detector: ConntrackPressure, bins: TimeBins):
        self.detector = detector
        self.bins = bins

    def add(self, batch: PacketBatch) -> None:
        """Nothing: the figure redraws the model from the flow table."""

    def merge(self, other: ConcurrencyFigure) -> ConcurrencyFigure:
        """Nothing to take: drawn from the flow table."""
        return self

    def draw(self, ax, flows) -> None:
        occ = self.detector.model(flows)
        peaks, _inserts = occ.series(self.bins.start_ns, self.bins.bin_ns, self.bins.count)
        x = self.bins.starts_s
        size = self.detector.params["table_size"]
        ax.step(x, peaks, where="post", color="tab:blue", label="entries (model)")
        ax.axhline(size, color="tab:red", linestyle="--", label=f"table size {size:,}")
        ax.axhline(size * self.detector.params["warn_fill_ratio"], color="tab:orange", linestyle=":",
                   label="warning")
        ax.set_ylim(0, max(size, int(peaks.max(initial=0))) * 1.05)
        self.bins.time_axis(ax)
        ax.set_ylabel("entries")
        rate = ax.twinx()
        # per whole second from the first entry, as the model counts the message's "up to N new entries in one
        # second" (the report's bins may be milliseconds)
        origin = int(occ.starts[0]) if len(occ.starts) else 0
        seconds_x, per_second = self.bins.per_second(occ.starts, origin)
        rate.step(seconds_x, per_second, where="post", color="tab:gray", linewidth=0.6, alpha=0.6,
                  label="new entries per second")
        rate.set_ylim(0, max(float(per_second.max(initial=0)), 1.0) * 1.1)
        rate.set_ylabel("new entries per second (grey)")
        ax.legend(loc="upper left", fontsize="small")

"""The analysis service: captures and rules in, an `Analysis` out.

`detector analyze`, the notebook API, `detector watch` (at every evaluation
of its window) and the tests get their findings here, so they cannot
disagree: the same consumers of the decoded batches (capture statistics,
the flow table, the enabled detectors isolated from each other's bugs), the
flow table handed to the detectors as a frame that is built only if one of
them asks (pandas and the frame cost half a second), and one order of
findings (findings.canonical_order).

`AnalysisState` is what one pass folds batches into; `conclude` asks
detectors for their findings over a flow table and statistics, which is how
a watch concludes the state it merged from the slices of its window.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from . import engine
from .detect.confidence import assess
from .detect.detector import CaptureDrops
from .detect.quality import CaptureQuality, one_direction
from .detectors import AnalysisContext, Detector, DetectorFailure, DetectorSet, active_detectors
from .findings import Finding, bound_evidence, canonical_order
from .flows import FlowTable
from .incidents import Incident, correlate
from .ingest.reader import interface_totals
from .stats import CaptureStats


@dataclass
class Analysis:
    findings: list[Finding]             # canonical order
    failures: list[DetectorFailure]     # the rules whose detector failed, in the detectors' order
    detectors: list[Detector]           # those that ran to the end: their hooks serve the evidence pass and report
    stats: CaptureStats
    context: AnalysisContext            # what the detectors consulted: the flow frame, built once if asked for
    flow_table: object                  # a FlowTable, or anything with its flow_count and to_frame()
    captures: list[dict] = field(default_factory=list)   # per file: path, format, packets, warnings
    warnings: list[str] = field(default_factory=list)
    # the findings grouped by the rules' relations, shared entities and time (detector.incidents), in order of
    # first_seen; each finding's incident_id names its incident
    incidents: list[Incident] = field(default_factory=list)
    # what is wrong with the capture itself (detect.quality.CaptureQuality.to_json: duplicates, time going
    # backwards, corrupted frames, truncation, one direction), with its `notes` for the reader; None: not measured
    quality: dict | None = None

    @property
    def flows(self):
        """The flow table as a pandas DataFrame (FlowTable.to_frame()), the one the detectors saw."""
        return self.context.flows

    @property
    def flow_count(self) -> int:
        return self.flow_table.flow_count


class AnalysisState:
    """What one pass folds decoded batches into: capture statistics, the flow table, the enabled detectors.

    `stopped` lists rules that failed before (a watch's earlier slices): they stay stopped here. `site` is
    the site file (detector.site.Site) every detector is given; None: no site file.
    """

    def __init__(self, rules, stopped: dict[str, DetectorFailure] | None = None, site=None):
        self.stats = CaptureStats()
        self.quality = CaptureQuality()
        self.flows = FlowTable()
        self.detectors = DetectorSet(active_detectors(rules, site), site)
        self.detectors.failures.update(stopped or {})
        # the engine hashes frames only for a consumer that reads the fingerprints (the duplicate test does)
        self.needs_fingerprint = True
        self.app_tables = self.detectors.app_tables

    def update(self, batch) -> None:
        self.stats.update(batch)
        self.quality.update(batch)
        self.flows.update(batch)
        self.detectors.update(batch)

    def merge(self, other: AnalysisState) -> AnalysisState:
        """Absorb `other`, the state of the packets that follow this one's (a cluster partition). Returns self."""
        self.stats.merge(other.stats)
        self.quality.merge(other.quality)
        joins = self.flows.absorb(other.flows)
        self.detectors.merge(other.detectors)
        self.detectors.joined(joins)
        return self


def capture_drops(captures: list[dict], stats: CaptureStats) -> list[CaptureDrops]:
    """What the captures' pcapng interface statistics say was dropped, one entry per interface that gave a drop
    counter (engine.RunResult.captures; `stats`: the packets read, for a file of one interface without
    isb_ifrecv and isb_usrdeliv).

    Received packets are isb_ifrecv when it covers the drops (Linux's libpcap counts dropped packets in it, as
    dumpcap writes it), else the delivered ones (isb_usrdeliv, else the file's packets) plus the drops.
    """
    out = []
    for capture in captures:
        interfaces = capture.get("interfaces", [])
        for totals in interface_totals(interfaces, capture.get("interface_stats", [])):
            counters = [totals.get(name) for name in ("ifdrop", "osdrop")]
            if all(value is None for value in counters):
                continue
            dropped = sum(value for value in counters if value is not None)
            received = totals.get("ifrecv")
            if received is None or received < dropped:
                delivered = totals.get("usrdeliv")
                if delivered is None and len(interfaces) == 1:
                    delivered = capture.get("packets")
                received = None if delivered is None else delivered + dropped
            first = totals.get("start_ns")
            last = totals.get("end_ns") or totals.get("time_ns")
            if first is None and len(captures) == 1:
                first = stats.first_ns
            name = totals.get("name") or str(totals["interface"])
            # the file's name: a finding reads the same wherever the capture lies (findings.json's captures list
            # has the path)
            out.append(CaptureDrops(source=os.path.basename(str(capture.get("file"))), interface=name, dropped=dropped,
                                    received=received, first_ns=first, last_ns=last,
                                    counter="pcapng interface statistics: isb_ifdrop + isb_osdrop"))
    return out


def conclude(detectors: DetectorSet, flow_table, stats: CaptureStats, run: engine.RunResult | None = None,
             drops: list[CaptureDrops] | None = None, quality: CaptureQuality | None = None) -> Analysis:
    """The findings of `detectors` over `flow_table` (a FlowTable, or anything with its flow_count and a
    to_frame() called only if a detector consults the flows) and `stats`, in canonical order, each with its
    confidence (detect.confidence, from `quality`, the capture's CaptureQuality, where it was measured), grouped
    into incidents (detector.incidents); the context carries the site file the detectors were built with, and
    the capture's drop counters: `drops`, else those of the run's pcapng interface statistics."""
    if drops is None:
        drops = capture_drops(run.captures, stats) if run is not None else []
    context = AnalysisContext(flows=flow_table, stats=stats, site=detectors.site, drops=drops)
    findings = canonical_order(detectors.findings(context))
    for f in findings:      # every rule's evidence bounded, saying what it left out (findings.bound_evidence)
        f.evidence = bound_evidence(f.evidence)
    rules = {det.rule_id: det.rule for det in detectors.detectors}
    direction = one_direction(context.flow_columns()) if quality is not None and flow_table is not None else None
    # confidence reads a first grouping (corroboration), and may lower severities, which the final grouping reads
    assess(findings, quality, direction, {det.rule_id: det.QUALITY_NEEDS for det in detectors.detectors},
           correlate(findings, rules), {det.rule_id for det in detectors.detectors if det.CONTEXT_ONLY})
    findings = canonical_order(findings)
    incidents = correlate(findings, rules)
    analysis = Analysis(findings=findings, failures=detectors.failure_list(), detectors=detectors.running(),
                        stats=stats, context=context, flow_table=flow_table, incidents=incidents,
                        quality=None if quality is None else quality.to_json(direction))
    if run is not None:
        analysis.captures, analysis.warnings = run.captures, run.warnings
    return analysis


def analyze(sources, rules=None, label: str = "analyze", site=None) -> Analysis:
    """Read `sources` (paths, binary streams or ingest.StreamCapture; one continuous capture) once and run
    every enabled rule of `rules` (detector.rules.load_rules' mapping; None: the defaults) over them, with
    the site file `site` (detector.site.load_site's Site; None: none).

    A damaged capture raises its CaptureError; a detector that fails is recorded in `failures`, not
    raised (detectors.DetectorSet).
    """
    if rules is None:
        from .rules import load_rules
        rules = load_rules()
    from .ordering import FileSpans, overlap_warnings
    state = AnalysisState(rules, site=site)
    spans = FileSpans()
    run = engine.run(sources, [state, spans], label=label)
    run.warnings.extend(overlap_warnings(spans.extents(run.captures)))
    return conclude(state.detectors, state.flows, state.stats, run, quality=state.quality)

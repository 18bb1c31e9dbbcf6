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

from dataclasses import dataclass, field

from . import engine
from .detectors import AnalysisContext, Detector, DetectorFailure, DetectorSet, active_detectors
from .findings import Finding, canonical_order
from .flows import FlowTable
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
        self.flows = FlowTable()
        self.detectors = DetectorSet(active_detectors(rules, site), site)
        self.detectors.failures.update(stopped or {})
        # the engine hashes frames only for a consumer that reads the fingerprints
        self.needs_fingerprint = self.detectors.needs_fingerprint
        self.app_tables = self.detectors.app_tables

    def update(self, batch) -> None:
        self.stats.update(batch)
        self.flows.update(batch)
        self.detectors.update(batch)


def conclude(detectors: DetectorSet, flow_table, stats: CaptureStats, run: engine.RunResult | None = None) -> Analysis:
    """The findings of `detectors` over `flow_table` (a FlowTable, or anything with its flow_count and a
    to_frame() called only if a detector consults the flows) and `stats`, in canonical order; the context
    carries the site file the detectors were built with."""
    context = AnalysisContext(flows=flow_table, stats=stats, site=detectors.site)
    findings = canonical_order(detectors.findings(context))
    analysis = Analysis(findings=findings, failures=detectors.failure_list(), detectors=detectors.running(),
                        stats=stats, context=context, flow_table=flow_table)
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
    state = AnalysisState(rules, site=site)
    run = engine.run(sources, [state], label=label)
    return conclude(state.detectors, state.flows, state.stats, run)

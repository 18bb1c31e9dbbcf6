"""Everything a run writes: findings.json, findings.jsonl, evidence pcaps, report.md and report.html."""
from __future__ import annotations

from ..output import OutputDir
from .document import findings_document, write_findings
from .eve import eve_lines
from .evidence import EvidenceResult, write_evidence

__all__ = ["EarlyFigures", "eve_lines", "findings_document", "write_findings", "write_evidence", "write_reports",
           "EvidenceResult"]


class EarlyFigures:
    """The report's figures that need nothing of the evidence pass, drawn in a thread while that pass reads the
    captures again: the findings' time axis (timeline.py) and the figures rules draw from their own state
    (ReportFigure.needs_batches False). The thread is the only one that draws: write_reports hands it the
    rest of the figures too, so matplotlib is never used from two threads at once."""

    def __init__(self, findings, incidents, start_ns: int | None, figures, flows):
        """`start_ns`: the report's time axis' zero (the capture's first packet; None: no axis, then no figure
        of a rule is drawn); `figures`: the detectors' figures on that axis (evidence.rule_figures)."""
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="report-figures")
        self.timeline = self.pool.submit(_timeline, findings, incidents, start_ns)
        ready = [figure for figure in figures if not figure.needs_batches] if start_ns is not None else []
        self.drawn = self.pool.submit(_draw_each, ready, flows)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def _timeline(findings, incidents, start_ns):
    from .timeline import timeline_figure
    return timeline_figure(findings, incidents, start_ns)


def _draw_each(figures, flows) -> dict[int, object]:
    from .render import rule_figure
    return {id(figure): rule_figure(figure, flows) for figure in figures}


def write_reports(out: OutputDir, document: dict, findings, rules, evidence: EvidenceResult, flows,
                  incidents=(), early: EarlyFigures | None = None) -> list[str]:
    """Write report.md and report.html into `out`, opening with the incidents; returns their names. Wireshark's
    view of the cited frames (dissect.py) is read from the evidence pcaps `out` holds, by one sharkd process
    (or tshark runs) while the figures are drawn on the thread that draws them (`early`: the one that drew some
    during the evidence pass; None: one started here)."""
    from .dissect import dissect_evidence
    from .render import figures, html_report, markdown
    from .timeline import TIMELINE_PNG

    listed = document.get("incidents")
    if early is None:
        early = EarlyFigures(findings, listed, evidence.series.start_ns if evidence.series else None, (), flows)
    try:
        drawn = early.drawn.result()
        figs = early.pool.submit(figures, findings, evidence, flows, drawn)
        views = dissect_evidence(out, findings, evidence, listed)
        timeline = early.timeline.result()
        figs = figs.result()
    finally:
        early.close()
    if timeline is not None:
        out.write(TIMELINE_PNG, timeline.png)
    md = out.write("report.md", markdown(document, findings, rules, evidence, incidents, views,
                                         timeline=TIMELINE_PNG if timeline is not None else None))
    page = out.write("report.html", html_report(document, findings, rules, evidence, figs, incidents, views,
                                                timeline=timeline))
    return [md, page]

"""Everything a run writes: findings.json, findings.jsonl, evidence pcaps, report.md and report.html."""
from __future__ import annotations

from ..output import OutputDir
from .document import findings_document, write_findings
from .eve import eve_lines
from .evidence import EvidenceResult, write_evidence

__all__ = ["eve_lines", "findings_document", "write_findings", "write_evidence", "write_reports", "EvidenceResult"]


def write_reports(out: OutputDir, document: dict, findings, rules, evidence: EvidenceResult, flows,
                  incidents=()) -> list[str]:
    """Write report.md and report.html into `out`, opening with the incidents; returns their names. Wireshark's
    view of the cited frames (dissect.py) is read from the evidence pcaps `out` holds, by tshark processes that
    run while the figures are drawn (on another core: tshark's start-up is most of their cost)."""
    from concurrent.futures import ThreadPoolExecutor
    from dataclasses import replace

    from .dissect import dissect_evidence
    from .render import figures, html_report, markdown
    from .timeline import TIMELINE_PNG, timeline_figure

    listed = document.get("incidents")
    # the info findings are an appendix table, with no section to show frames in: none is dissected for them
    sections = [f if f.severity != "info" else replace(f, evidence_pcap=None) for f in findings]
    with ThreadPoolExecutor(max_workers=1) as background:
        dissecting = background.submit(dissect_evidence, out, sections, evidence, listed)
        timeline = timeline_figure(findings, listed, evidence.series.start_ns if evidence.series else None)
        figs = figures(findings, evidence, flows)
        views = dissecting.result()
    if timeline is not None:
        out.write(TIMELINE_PNG, timeline.png)
    md = out.write("report.md", markdown(document, findings, rules, evidence, incidents, views,
                                         timeline=TIMELINE_PNG if timeline is not None else None))
    page = out.write("report.html", html_report(document, findings, rules, evidence, figs, incidents, views,
                                                timeline=timeline))
    return [md, page]

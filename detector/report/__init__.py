"""Everything a run writes: findings.json, findings.jsonl, evidence pcaps, report.md and report.html."""
from __future__ import annotations

from ..output import OutputDir
from .document import findings_document, write_findings
from .eve import eve_lines
from .evidence import EvidenceResult, write_evidence

__all__ = ["eve_lines", "findings_document", "write_findings", "write_evidence", "write_reports", "EvidenceResult"]


def write_reports(out: OutputDir, document: dict, findings, rules, evidence: EvidenceResult, flows) -> list[str]:
    """Write report.md and report.html into `out`; returns their names. Wireshark's view of the cited frames
    (dissect.py) is read from the evidence pcaps `out` holds."""
    from .dissect import dissect_evidence
    from .render import figures, html_report, markdown

    views = dissect_evidence(out, findings, evidence, document.get("incidents"))
    md = out.write("report.md", markdown(document, findings, rules, evidence, views))
    page = out.write("report.html", html_report(document, findings, rules, evidence,
                                                figures(findings, evidence, flows), views))
    return [md, page]

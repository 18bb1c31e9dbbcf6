"""Everything `analyze` writes beside findings.json: evidence pcaps, findings.jsonl, report.md and report.html."""
from __future__ import annotations

from pathlib import Path

from .eve import eve_lines
from .evidence import EvidenceResult, write_evidence

__all__ = ["eve_lines", "write_evidence", "write_reports", "EvidenceResult"]


def write_reports(out_dir: Path, document: dict, findings, rules, evidence: EvidenceResult, flows) -> list[Path]:
    """Write report.md and report.html into `out_dir`; returns their paths."""
    from .render import figures, html_report, markdown

    md = out_dir / "report.md"
    md.write_text(markdown(document, findings, rules, evidence), encoding="utf-8")
    page = out_dir / "report.html"
    page.write_text(html_report(document, findings, rules, evidence, figures(findings, evidence, flows)),
                    encoding="utf-8")
    return [md, page]

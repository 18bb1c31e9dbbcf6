"""Everything `analyze` writes beside findings.json: evidence pcaps, findings.jsonl, report.md and report.html."""
from __future__ import annotations

from .eve import eve_lines
from .evidence import EvidenceResult, write_evidence

__all__ = ["eve_lines", "write_evidence", "EvidenceResult"]

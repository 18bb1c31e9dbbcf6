"""findings.json and findings.jsonl: the document every run writes, `analyze` for its captures and `watch` for
the period it watched."""
from __future__ import annotations

import json
from pathlib import Path

from ..output import OutputDir
from .eve import eve_lines

FINDINGS_VERSION = 1


def findings_document(captures: list[dict], stats: dict, findings, failures=(), incidents=(),
                      quality: dict | None = None) -> dict:
    """The findings.json document: what was read, what is wrong with it (`capture_quality`, detect.quality:
    its `notes` are what a reader learns first), its statistics, the incidents (detector.incidents: each names
    its findings by rule and identifier, and each finding its incident_id), the findings, each with its
    confidence, and the rules that failed."""
    return {"version": FINDINGS_VERSION, "captures": captures, "capture_quality": quality, "stats": stats,
            "incidents": [incident.to_json() for incident in incidents],
            "findings": [f.to_json() for f in findings], "failures": [f.to_json() for f in failures]}


def write_findings(out: OutputDir, document: dict, findings, default_pcap: str | None, incidents=()) -> Path:
    """Write findings.json and findings.jsonl (EVE lines) into `out`; returns findings.json's path."""
    out.write("findings.json", json.dumps(document, indent=2) + "\n")
    out.write("findings.jsonl", eve_lines(findings, default_pcap, document.get("failures", ()), incidents))
    return out.path / "findings.json"

"""Every bundled capture yields what captures/MANIFEST.json says, and nothing it rules out.

Each capture runs through `detector analyze` in process (all default rules);
the manifest lists per file the findings it must yield (rule and lowest
severity) and must not yield (rule or "*" and the severity they must stay at
or below), and the site file a capture is read with, if any: NAME.site.yaml
beside NAME.pcap(ng), as `make demo` finds it. Where a manifest entry lists
`incidents`, findings.json's incidents must be exactly those: each one's
root cause and the rules of its findings, root cause first (detector.incidents).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from detector.commands import analyze
from detector.findings import SEVERITY_RANK

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
MANIFEST = json.loads((CAPTURES / "MANIFEST.json").read_text())["captures"]
# Bundled files stay small so the repository does too.
MAX_CAPTURE_BYTES = 2 * 1024 * 1024


def site_file(entry: dict) -> Path | None:
    """The site file a bundled capture is read with (its manifest's `site`), None without one."""
    return CAPTURES / entry["site"] if "site" in entry else None


def test_site_files_lie_where_make_demo_finds_them():
    named = {entry["site"] for entry in MANIFEST if "site" in entry}
    assert named == {p.name for p in CAPTURES.glob("*.site.yaml")}
    for entry in MANIFEST:
        if "site" in entry:
            assert entry["site"] == entry["file"].split(".")[0] + ".site.yaml"


def test_manifest_lists_exactly_the_bundled_captures():
    on_disk = {p.name for p in CAPTURES.iterdir() if p.suffix in (".pcap", ".pcapng")}
    assert on_disk == {entry["file"] for entry in MANIFEST}
    for name in on_disk:
        assert (CAPTURES / name).stat().st_size < MAX_CAPTURE_BYTES, name


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"] for e in MANIFEST])
def test_capture_meets_its_manifest(entry, tmp_path):
    findings, _, out = analyze([CAPTURES / entry["file"]], tmp_path, site_file=site_file(entry))
    document = json.loads(out.read_text())
    assert document["stats"]["packets"] == entry["packets"]
    seen = [(f.rule, f.severity) for f in findings]
    for want in entry["must_yield"]:
        floor = SEVERITY_RANK[want["severity_at_least"]]
        assert any(rule == want["rule"] and SEVERITY_RANK[sev] >= floor for rule, sev in seen), \
            f"{entry['file']}: no {want['rule']} finding at {want['severity_at_least']} or above in {seen}"
    for ban in entry["must_not_yield"]:
        ceiling = SEVERITY_RANK[ban["severity_above"]]
        loud = [(rule, sev) for rule, sev in seen
                if ban["rule"] in ("*", rule) and SEVERITY_RANK[sev] > ceiling]
        assert not loud, f"{entry['file']}: {loud} above {ban['severity_above']}"
    if "incidents" in entry:
        assert _incidents(document) == sorted(_shape(want) for want in entry["incidents"]), entry["file"]


def _shape(incident: dict) -> tuple:
    """An incident as the manifest states it: its root cause's rule, then its findings' rules, root first."""
    first, *rest = incident["findings"]
    return incident["root_cause"], first, tuple(sorted(rest))


def _incidents(document: dict) -> list[tuple]:
    """findings.json's incidents in the manifest's shape; every finding of low or above in exactly one, named by
    incident_id, and every other (info) in one only as context of a real incident: info findings alone make none."""
    records = {(f["rule"], f["identifier"]): f for f in document["findings"]}
    shapes, members = [], []
    for incident in document["incidents"]:
        refs = [(ref["rule"], ref["identifier"]) for ref in incident["findings"]]
        assert all(records[ref]["incident_id"] == incident["id"] for ref in refs)
        assert refs[0] == (incident["root_cause"]["rule"], incident["root_cause"]["identifier"])
        shapes.append(_shape({"root_cause": refs[0][0], "findings": [rule for rule, _ in refs]}))
        members += refs
        assert any(records[ref]["severity"] != "info" for ref in refs), incident["id"]
    assert len(members) == len(set(members))
    loud = [ref for ref, record in records.items() if record["severity"] != "info"]
    assert set(loud) <= set(members) <= set(records)
    assert all(("incident_id" in record) == (ref in members) for ref, record in records.items())
    return sorted(shapes)

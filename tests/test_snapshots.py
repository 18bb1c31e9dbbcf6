"""The findings.json of every bundled capture, byte for byte, against a stored snapshot.

The restructuring of issue 10 moves the code of every rule; what a user gets
must not move with it. Each bundled capture runs through `detector analyze`
in process with the default rules, its site file if it has one, and the report; its findings.json (capture
paths reduced to file names, the only thing that depends on where the run
happens) and the list of files the run wrote must equal
tests/snapshots/<capture>.json.

A deliberate change of output is recorded by running this file with
DETECTOR_UPDATE_SNAPSHOTS=1, which writes the snapshots and skips (a skip is
a failure in CI); the diff of tests/snapshots/ then shows the change for review.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from detector.commands import analyze
from tests.test_eve import alert_problems
from tests.test_manifest import site_file

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
MANIFEST = json.loads((CAPTURES / "MANIFEST.json").read_text())["captures"]
UPDATE = os.environ.get("DETECTOR_UPDATE_SNAPSHOTS") == "1"


def _normalised(document: dict) -> dict:
    for capture in document["captures"]:
        capture["file"] = Path(capture["file"]).name
    for finding in document["findings"]:
        evidence = finding.get("evidence", {})
        if "pcap_filename" in evidence:
            evidence["pcap_filename"] = Path(evidence["pcap_filename"]).name
    return document


def _snapshot(out_dir: Path) -> dict:
    document = json.loads((out_dir / "findings.json").read_text())
    files = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file())
    return {"files": files, "findings.json": _normalised(document)}


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"] for e in MANIFEST])
def test_findings_equal_the_snapshot(entry, tmp_path):
    analyze([CAPTURES / entry["file"]], tmp_path, site_file=site_file(entry))
    # findings.jsonl as written: every alert line valid under Suricata's schema, one per finding (test_eve.py)
    assert alert_problems(tmp_path / "findings.jsonl") == []
    got = _snapshot(tmp_path)
    path = SNAPSHOTS / f"{entry['file']}.json"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"snapshot written: {path.name}")
    assert path.exists(), f"no snapshot for {entry['file']}: run with DETECTOR_UPDATE_SNAPSHOTS=1"
    assert got == json.loads(path.read_text())


def test_every_snapshot_has_its_capture():
    stale = {p.name for p in SNAPSHOTS.glob("*.json")} - {f"{e['file']}.json" for e in MANIFEST}
    assert not stale, f"snapshots of captures no longer bundled: {sorted(stale)}"

"""Capture quality (detect.quality) and the confidence it gives findings (detect.confidence), on real bytes.

The facts are checked against tshark on the bundled quality captures (one office trace with a port scan,
appended to itself, fuzzed, anonymised without fixing checksums, mirrored one way) and on real captures
that have the faults: chrissanders' blaster.pcap is a trace appended to itself, a Zeek trace holds every
frame twice, another one frame captured on two interfaces. Then what the model makes of them: the same
scan is medium and high confidence clean or anonymised, low (capped, the rule's medium kept) appended or
fuzzed.
"""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from detector import engine
from detector.analysis import AnalysisState, analyze
from detector.commands import info_one
from detector.detect import quality as q
from detector.detect.confidence import Basis, capture_bases
from detector.engine import decoded_batches
from detector.findings import Finding
from detector.incidents import correlate
from detector.rules import load_rules

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
QUALITY = ["quality-baseline.pcap", "quality-appended.pcap", "quality-fuzzed.pcap", "quality-rewritten.pcap",
           "quality-one-way.pcap", "loss-snaplen-96.pcap"]
REAL = ["chrissanders-packets/ppa1e/blaster.pcap", "zeek/testing/btest/Traces/tcp/ctu-64702-888.pcap",
        "zeek/testing/btest/Traces/snap-arp.pcapng", "arkime/http-500-head.pcap",
        "zeek/testing/btest/Traces/modbus/fuzz-72.pcap", "ndpi/tests/cfgs/default/pcap/agora-sd-rtn.pcap"]


def tshark_facts(tshark, path) -> dict:
    """What tshark says of the faults detect.quality counts: frames repeating an earlier frame's bytes and time
    (by MD5), records earlier than the one before (and by more than 1 ms), IPv4 checksums that fail, group source
    MACs, frames cut short."""
    rows = tshark.fields(path, "frame.time_epoch", "frame.md5_hash", "frame.time_delta", "ip.checksum.status",
                         "eth.src.ig", "frame.cap_len", "frame.len",
                         options=("-o", "frame.generate_md5_hash:TRUE", "-o", "ip.check_checksum:TRUE"))
    seen, duplicates = set(), 0
    for row in rows:
        key = (row[0], row[1])
        duplicates += key in seen
        seen.add(key)
    deltas = [float(row[2]) for row in rows]
    return {"duplicates": duplicates, "backwards": sum(d < 0 for d in deltas),
            "out_of_order": sum(d < -q.BACKWARDS_SLACK_NS / 1e9 for d in deltas),
            "bad_checksum": sum("0" in row[3].split(",") for row in rows),
            "group_source": sum(row[4] in ("1", "True") for row in rows),
            "truncated": sum(int(row[5]) < int(row[6]) for row in rows)}


def quality_of(path) -> dict:
    record, _ = info_one(str(path))
    assert record["error"] is None
    return record["capture_quality"]


@pytest.mark.parametrize("name", QUALITY)
def test_bundled_faults_are_those_tshark_sees(name, tshark):
    _check_against_tshark(CAPTURES / name, tshark)


@pytest.mark.parametrize("name", REAL)
def test_real_faults_are_those_tshark_sees(name, tshark, captures_real):
    _check_against_tshark(captures_real / name, tshark)


def _check_against_tshark(path, tshark):
    facts, oracle = quality_of(path), tshark_facts(tshark, path)
    assert facts["duplicate_frames"]["count"] == oracle["duplicates"]
    assert facts["time_backwards"]["count"] == oracle["backwards"]
    assert facts["time_backwards"]["out_of_order"] == oracle["out_of_order"]
    reasons = facts["corrupted_frames"]["reasons"]
    edited = facts["checksums_rewritten"]
    assert (edited["failed"] if edited else reasons.get(q.CORRUPTION[q.C_CHECKSUM], 0)) == oracle["bad_checksum"]
    assert reasons.get(q.CORRUPTION[q.C_GROUP_SOURCE], 0) == oracle["group_source"]
    assert facts["truncated_frames"]["count"] == oracle["truncated"]


def test_a_trace_appended_to_itself_is_named_and_holds_its_scan_at_low():
    facts = quality_of(CAPTURES / "quality-appended.pcap")
    assert facts["duplicate_frames"] == {"count": 131, "exact": True, "first_frame": 132, "appended_at_frame": 132}
    assert facts["time_backwards"]["out_of_order"] == 1 and facts["time_backwards"]["first_frame"] == 132
    assert "the trace is appended to itself from frame 132" in facts["notes"][0]
    clean = analyze([CAPTURES / "quality-baseline.pcap"]).findings
    twice = analyze([CAPTURES / "quality-appended.pcap"]).findings
    assert [(f.rule, f.severity, f.confidence) for f in clean] == [("scan", "medium", "high")]
    [scan] = twice
    assert (scan.rule, scan.severity, scan.confidence, scan.rule_severity) == ("scan", "low", "low", "medium")
    [why] = [b for b in scan.confidence_basis if b.level == "low"]
    assert why.factor == "capture" and why.why.startswith("60 of the 120 frames of its span repeat an earlier")


def test_fuzzed_frames_hold_what_they_show_at_low():
    facts = quality_of(CAPTURES / "quality-fuzzed.pcap")
    assert facts["corrupted_frames"]["count"] >= 29 and facts["checksums_rewritten"] is None
    [scan] = [f for f in analyze([CAPTURES / "quality-fuzzed.pcap"]).findings if f.rule == "scan"]
    assert (scan.severity, scan.confidence, scan.rule_severity) == ("low", "low", "medium")
    assert any("of its 29 evidence frames look corrupted" in b.why for b in scan.confidence_basis)


def test_an_anonymised_capture_is_edited_not_damaged():
    facts = quality_of(CAPTURES / "quality-rewritten.pcap")
    assert facts["checksums_rewritten"] == {"ipv4_frames": 131, "failed": 131}
    assert facts["corrupted_frames"]["count"] == 0
    assert any("the capture was edited" in note for note in facts["notes"])
    [scan] = analyze([CAPTURES / "quality-rewritten.pcap"]).findings
    assert (scan.severity, scan.confidence) == ("medium", "high")


def test_a_mirror_of_one_direction_lowers_what_rests_on_absence():
    analysis = analyze([CAPTURES / "quality-one-way.pcap"])
    direction = analysis.quality["one_direction"]
    assert direction == {"tcp_connections": 10, "one_way": 10, "ratio": 1.0, "one_direction": True}
    assert not analyze([CAPTURES / "quality-baseline.pcap"]).quality["one_direction"]["one_direction"]
    state = AnalysisState(load_rules())
    engine.run([CAPTURES / "quality-one-way.pcap"], [state], show_progress=False)
    [scan] = analysis.findings
    assert (scan.severity, scan.confidence) == ("medium", "medium")     # scan rests on probes nobody answered
    assert any("captured one way only" in b.why for b in scan.confidence_basis)
    probe = Finding(rule="scan", severity="medium", title="t", msg="m", first_seen=scan.first_seen,
                    last_seen=scan.last_seen, evidence={"evidence_frames": scan.evidence["evidence_frames"]})
    absent = capture_bases(probe, state.quality, direction, frozenset({"absence"}))
    assert [(b.level, b.factor) for b in absent] == [("medium", "capture")]
    assert "captured one way only" in absent[0].why
    assert [b.level for b in capture_bases(probe, state.quality, direction, frozenset())] == ["high"]


def test_info_and_both_reports_show_the_faults_first(tmp_path):
    out = subprocess.run([sys.executable, "-m", "detector", "info", str(CAPTURES / "quality-appended.pcap")],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[2].startswith("Capture:       131 of 262 frames (50%) repeat an earlier frame's bytes")
    clean = subprocess.run([sys.executable, "-m", "detector", "info", str(CAPTURES / "quality-baseline.pcap")],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert clean[2] == "Capture:       clean: no duplicate, out-of-order, corrupted or cut frames"
    subprocess.run([sys.executable, "-m", "detector", "analyze", str(CAPTURES / "quality-appended.pcap"), "-o",
                    str(tmp_path)], capture_output=True, check=True)
    document = json.loads((tmp_path / "findings.json").read_text())
    assert list(document)[:3] == ["version", "captures", "capture_quality"]
    assert document["findings"][0]["confidence"] == "low" and document["findings"][0]["rule_severity"] == "medium"
    markdown = (tmp_path / "report.md").read_text()
    assert markdown.index("## What is wrong with the capture") < markdown.index("## Capture summary")
    assert "| 1 | low | low | scan |" in markdown
    html = (tmp_path / "report.html").read_text()
    assert html.index("What is wrong with the capture") < html.index("Capture summary")
    assert "confidence: low (the rule said medium; low confidence keeps it at low)" in html
    eve = [json.loads(line) for line in (tmp_path / "findings.jsonl").read_text().splitlines()]
    assert eve[1]["finding"]["confidence"] == "low" and "confidence:low" in eve[0]["alert"]["metadata"]["tag"]


@pytest.mark.parametrize("name", ["quality-appended.pcap", "quality-fuzzed.pcap", "loss-snaplen-96.pcap"])
@pytest.mark.parametrize("batch", [1, 7, 40])
def test_parts_merged_in_order_equal_one_pass(name, batch):
    whole = q.CaptureQuality()
    engine.run([CAPTURES / name], [whole], show_progress=False)
    parts = []
    for _reader, decoded in decoded_batches([CAPTURES / name], batch_packets=batch):
        part = q.CaptureQuality()
        part.update(decoded)
        parts.append(part)
    merged = parts[0]
    for part in parts[1:]:
        merged.merge(part)
    assert merged.to_json() == whole.to_json()
    for first, last in ((0, 2**62), (whole.bins[0] * q.BIN_NS, whole.bins[0] * q.BIN_NS + 1)):
        assert merged.over(first, last) == whole.over(first, last)


def test_the_duplicate_test_samples_past_its_bound(monkeypatch):
    """Past EXACT_KEYS distinct frames the set keeps a hashed sample: bounded, and its count an estimate."""
    monkeypatch.setattr(q, "EXACT_KEYS", 1 << 12)
    rng = np.random.default_rng(27)
    keys = rng.integers(1, 2**63, size=40_000, dtype=np.int64).astype(np.uint64)
    seen = q.SeenSet.empty()
    found = 0
    for chunk in np.split(np.concatenate([keys, keys[:10_000]]), 25):
        found += int(np.count_nonzero(seen.seen(chunk, np.arange(len(chunk)), np.zeros(len(chunk))))) * seen.scale
    assert len(seen.table) <= 2 * q.EXACT_KEYS and seen.level >= 3
    assert 8_000 <= found <= 12_000          # 10,000 repeats, estimated from a sample of 1 in 2**level


def test_a_context_only_rule_joins_an_incident_but_makes_none(monkeypatch):
    """A finding of a CONTEXT_ONLY rule alone is no incident; beside a related finding it is never the root."""
    import detector.incidents as incidents
    rules = load_rules()
    monkeypatch.setattr(incidents, "_context_only", lambda rule_id: rule_id == "garp-war")

    def finding(rule, severity, start):
        return Finding(rule=rule, severity=severity, title=rule, msg=rule, first_seen=start, last_seen=start + 10,
                       src_ip="192.0.2.7", src_mac="02:00:00:00:00:07")
    alone = finding("garp-war", "low", 0)
    assert correlate([alone], rules) == [] and alone.incident_id is None
    context, spoof = finding("garp-war", "low", 0), finding("arp-spoof", "low", 5)
    [incident] = correlate([context, spoof], rules)
    assert incident.root_cause is spoof and context.incident_id == incident.id


def test_low_confidence_caps_severity_and_corroboration_lifts_a_sample():
    from detector.detect.confidence import assess
    rules = load_rules()
    small = Finding(rule="arp-spoof", severity="high", title="t", msg="m", first_seen=0, last_seen=10,
                    src_mac="02:00:00:00:00:07", src_ip="192.0.2.7",
                    confidence_basis=[Basis.sample(2, medium_from=5, high_from=20, what="unsolicited replies")])
    assess([small])
    assert (small.severity, small.confidence, small.rule_severity) == ("low", "low", "high")
    small = Finding(rule="arp-spoof", severity="high", title="t", msg="m", first_seen=0, last_seen=10,
                    src_mac="02:00:00:00:00:07", src_ip="192.0.2.7",
                    confidence_basis=[Basis.sample(2, medium_from=5, high_from=20, what="unsolicited replies")])
    other = Finding(rule="garp-war", severity="medium", title="t", msg="m", first_seen=2, last_seen=8,
                    src_mac="02:00:00:00:00:07", src_ip="192.0.2.7")
    assess([small, other], incidents=correlate([small, other], rules))
    assert (small.severity, small.confidence) == ("high", "medium")
    assert Counter(b.factor for b in small.confidence_basis)["corroboration"] == 1


def test_explain_prints_the_model_and_what_a_rule_rests_on():
    out = subprocess.run([sys.executable, "-m", "detector", "explain", "pmtud-blackhole"], capture_output=True,
                         text=True, check=True).stdout
    section = " ".join(out[out.index("Confidence (how sure its findings are)"):out.index("Live alerts")].split())
    assert "something not seen" in section and "time running backwards undermines them" in section
    assert "Low confidence caps the severity at low" in section and "25%, or any of its own evidence" in section


def test_a_notebook_reads_the_confidence_beside_the_severity():
    import detector
    frame = detector.open(str(CAPTURES / "quality-appended.pcap")).findings
    row = frame.iloc[0]
    assert (row["rule"], row["severity"], row["confidence"], row["rule_severity"]) == ("scan", "low", "low", "medium")
    assert {basis["factor"] for basis in row["confidence_basis"]} == {"capture"}
    assert list(frame.columns[:4]) == ["rule", "severity", "confidence", "rule_severity"]


def test_every_evidence_list_is_bounded_and_says_what_it_left_out():
    from detector.findings import EVIDENCE_ITEMS_MAX, NESTED_ITEMS_MAX, bound_evidence
    servers = [{"server": f"192.0.2.{k % 250}", "others": list(range(1000))} for k in range(1000)]
    bounded = bound_evidence({"servers": servers, "series": {"second": list(range(300))}, "n": 1000,
                              "rows": [list(range(40))], "frames_left_out": 5, "frames": list(range(300))})
    assert len(bounded["servers"]) == EVIDENCE_ITEMS_MAX and bounded["servers_left_out"] == 1000 - EVIDENCE_ITEMS_MAX
    inner = bounded["servers"][0]
    assert len(inner["others"]) == NESTED_ITEMS_MAX and inner["others_left_out"] == 1000 - NESTED_ITEMS_MAX
    assert len(bounded["series"]["second"]) == EVIDENCE_ITEMS_MAX and bounded["series"]["second_left_out"] == 44
    assert bounded["rows"][0][-1] == "... 8 more left out" and len(bounded["rows"][0]) == NESTED_ITEMS_MAX + 1
    assert bounded["frames_left_out"] == 5 + 300 - EVIDENCE_ITEMS_MAX and bounded["n"] == 1000
    assert len(json.dumps(bounded)) < 200_000


def test_a_sampled_duplicate_test_still_finds_where_the_trace_starts_over(monkeypatch):
    monkeypatch.setattr(q, "EXACT_KEYS", 16)
    monkeypatch.setattr(q, "FIRST_TABLE_SLOTS", 8)
    state = q.CaptureQuality()
    engine.run([CAPTURES / "quality-appended.pcap"], [state], show_progress=False, batch_packets=20)
    facts = state.to_json()
    assert state.seen.level >= 2 and not facts["duplicate_frames"]["exact"]
    assert facts["duplicate_frames"]["appended_at_frame"] == 132
    assert 60 <= facts["duplicate_frames"]["count"] <= 260         # 131, estimated from 1 in 2**level
    assert facts["notes"][0].startswith("about ")

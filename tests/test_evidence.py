"""Evidence written beside findings.json: one pcap per finding that tshark reads with the stated count and the
original timestamps, findings.jsonl in EVE shape, and the rip-trigger reproduction script."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from detector.capfile import Segment, capture_format, write_capture
from detector.commands import analyze

CAPTURES = Path(__file__).resolve().parents[1] / "captures"


@pytest.fixture(scope="module", params=["echo-loop-rip-ipv4.pcapng", "echo-loop-rip-ipv6-vlan.pcap"])
def analyzed(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("evidence")
    capture = CAPTURES / request.param
    findings, _result, _path = analyze([str(capture)], out)
    return capture, out, findings


def test_every_finding_with_frames_has_a_pcap(analyzed):
    _capture, out, findings = analyzed
    assert {f.rule for f in findings} >= {"echo-loop", "rip-trigger"}
    for f in findings:
        frames = f.evidence.get("evidence_frames")
        if not frames:
            continue
        assert f.evidence_pcap is not None
        assert (out / f.evidence_pcap).is_file()
        assert f.evidence["evidence_packets"] == len(set(frames))
    document = json.loads((out / "findings.json").read_text())
    for record in document["findings"]:
        if record["evidence"].get("evidence_frames"):
            assert record["evidence_pcap"].startswith("evidence/")
            assert record["evidence"]["evidence_packets"] >= 1


def test_tshark_reads_the_stated_count_with_original_timestamps(analyzed, tshark):
    capture, out, findings = analyzed
    for f in findings:
        if not f.evidence_pcap:
            continue
        rows = tshark.fields(out / f.evidence_pcap, "frame.time_epoch", "frame.len")
        assert len(rows) == f.evidence["evidence_packets"]
        frames = sorted(set(f.evidence["evidence_frames"]))
        wanted = " || ".join(f"frame.number == {n}" for n in frames[:8])
        original = tshark.fields(capture, "frame.time_epoch", "frame.len", display_filter=wanted)
        assert rows[:len(original)] == original


def test_findings_jsonl_is_eve_shaped(analyzed):
    capture, out, findings = analyzed
    lines = (out / "findings.jsonl").read_text().splitlines()
    # each finding's alert and finding lines, then their incident: the probe that starts the loop, in the
    # probe's EVE header; times as Suricata writes them (+0000 where findings.json says Z)
    assert len(lines) == 2 * len(findings) + 1
    incident = json.loads(lines[-1])
    (probe,) = [f for f in findings if f.rule == "rip-trigger"]
    assert incident["event_type"] == "incident" and incident["incident"]["id"] == "incident-1"
    assert incident["incident"]["root_cause"] == {"rule": "rip-trigger", "identifier": probe.identifier}
    assert incident["src_ip"] == probe.src_ip and incident["dest_port"] == 520
    assert incident["timestamp"] == probe.to_json()["first_seen"].replace("Z", "+0000")
    assert incident["pcap_filename"] == str(capture)
    for alert_line, line, f in zip(lines[0::2], lines[1::2], findings):
        alert, event = json.loads(alert_line), json.loads(line)
        assert alert["event_type"] == "alert" and alert["alert"]["signature"] == f.title
        assert alert["timestamp"] == event["timestamp"] and alert["src_ip"] == f.src_ip
        assert event["event_type"] == "finding"
        assert event["timestamp"] == f.to_json()["first_seen"].replace("Z", "+0000")
        assert event["src_ip"] == f.src_ip and event["dest_ip"] == f.dest_ip
        assert event["proto"] == f.proto and event["community_id"] == f.community_id
        assert event["pcap_filename"] == str(capture)
        assert event["finding"]["rule"] == f.rule and event["finding"]["incident_id"] == "incident-1"


def test_reproducer_prints_and_does_not_send(analyzed):
    _capture, out, findings = analyzed
    (probe,) = [f for f in findings if f.rule == "rip-trigger"]
    script = out / "evidence" / "rip-trigger-1-reproduce.py"
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "not sent" in proc.stdout
    assert probe.src_ip in proc.stdout and "RIP" in proc.stdout
    target = "2001:db8:77::1" if ":" in probe.dest_ip else "10.77.0.1"
    proc = subprocess.run([sys.executable, str(script), "--dst", target], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert target in proc.stdout and probe.dest_ip not in proc.stdout


def test_frames_of_two_link_types_go_to_pcapng(tmp_path, tshark):
    from scapy.all import IP, UDP, Ether

    ether = bytes(Ether() / IP(src="192.0.2.1", dst="192.0.2.2") / UDP(dport=520))
    raw = bytes(IP(src="192.0.2.3", dst="192.0.2.4") / UDP(dport=521))
    rows = [(1_767_225_600_123_456_789, len(ether), 1, ether, "a"),
            (1_767_225_601_000_000_001, len(raw), 101, raw, "a")]
    segment = Segment.of_records([1, 2], rows)
    assert capture_format([segment]) == "pcapng"
    path = tmp_path / "mixed.pcapng"
    write_capture(path, [segment])
    got = tshark.fields(path, "frame.time_epoch", "ip.dst")
    assert got == [["1767225600.123456789", "192.0.2.2"], ["1767225601.000000001", "192.0.2.4"]]

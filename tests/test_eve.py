"""findings.jsonl as Suricata's tools read it: every `alert` line valid under Suricata's own EVE schema.

The oracle is tests/data/suricata-eve-schema.json, the parts of OISF/suricata's etc/schema.json an alert line of
ours uses, copied as they stand (tests/data/README.md names the commit), checked with the `jsonschema` package
the test extra already brings (nbformat's). The alert lines of every bundled capture are built from its stored
findings.json (tests/snapshots/, the findings `analyze` writes, held byte for byte by test_snapshots.py) by the
function that writes them into findings.jsonl; one capture runs through `analyze` to show the file holds
exactly those lines, each beside its finding line, every timestamp in Suricata's `+0000` form.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from detector.commands import analyze
from detector.detectors import REGISTRY
from detector.report.eve import SID_BASE, alert_event, signature
from detector.rules import load_rules

HERE = Path(__file__).resolve().parent
CAPTURES = HERE.parent / "captures"
SCHEMA = json.loads((HERE / "data" / "suricata-eve-schema.json").read_text())
SNAPSHOTS = sorted((HERE / "snapshots").glob("*.json"))
SURICATA_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+0000")


jsonschema.Draft202012Validator.check_schema(SCHEMA)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def _problems(event: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path)) or '(line)'}: {e.message}" for e in VALIDATOR.iter_errors(event)]


def alert_problems(findings_jsonl: Path) -> list[str]:
    """What Suricata's schema finds wrong with the alert lines of a findings.jsonl, each with its line number;
    test_snapshots.py asks it of every bundled capture's file as `analyze` wrote it."""
    events = [json.loads(line) for line in findings_jsonl.read_text().splitlines()]
    alerts = [(n, event) for n, event in enumerate(events, 1) if event["event_type"] == "alert"]
    problems = [f"line {n}: {p}" for n, event in alerts for p in _problems(event)]
    findings = sum(event["event_type"] == "finding" for event in events)
    return problems + ([] if len(alerts) == findings else [f"{len(alerts)} alert lines for {findings} findings"])


def _alerts(snapshot: Path) -> list[tuple[dict, dict]]:
    """(findings.json record, alert line) for every finding of one bundled capture's stored findings.json."""
    document = json.loads(snapshot.read_text())["findings.json"]
    pcap = document["captures"][0]["file"]
    return [(record, alert_event(record, pcap)) for record in document["findings"]]


def test_the_schema_extract_is_a_schema_and_refuses_what_we_wrote_before():
    # the line shape of findings.jsonl before issue 29: a Z timestamp and a `finding` key
    before = {"timestamp": "2026-01-01T00:00:01.500000Z", "event_type": "finding", "src_ip": "192.0.2.1",
              "finding": {"rule": "scan"}}
    problems = _problems(before)
    assert any(p.startswith("timestamp:") for p in problems)
    assert any("'finding' was unexpected" in p for p in problems)
    assert _problems({"timestamp": "2026-01-01T00:00:01.500000+0000", "event_type": "alert"}) == []
    # metadata takes only the keys Suricata's schema lists
    assert _problems({"timestamp": "2026-01-01T00:00:01.500000+0000", "event_type": "alert",
                      "alert": {"metadata": {"rule": ["scan"]}}})


def test_alert_problems_names_the_line_and_a_finding_without_its_alert(tmp_path):
    path = tmp_path / "findings.jsonl"
    path.write_text('{"timestamp":"2026-01-01T00:00:01.500000Z","event_type":"alert"}\n'
                    '{"timestamp":"2026-01-01T00:00:01.500000+0000","event_type":"finding","finding":{}}\n'
                    '{"timestamp":"2026-01-01T00:00:02.500000+0000","event_type":"finding","finding":{}}\n')
    (timestamp, count) = alert_problems(path)
    assert timestamp.startswith("line 1: timestamp: ") and count == "1 alert lines for 2 findings"


def test_the_snapshots_cover_every_rule():
    rules = {record["rule"] for snapshot in SNAPSHOTS for record, _ in _alerts(snapshot)}
    assert len(SNAPSHOTS) > 100 and rules == set(REGISTRY)


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=[p.name.removesuffix(".json") for p in SNAPSHOTS])
def test_every_alert_line_is_valid_under_suricatas_schema(snapshot):
    for record, event in _alerts(snapshot):
        assert _problems(event) == [], (record["rule"], event)
        assert SURICATA_TIME.fullmatch(event["timestamp"])
        assert event["timestamp"] == record["first_seen"].removesuffix("Z") + "+0000"
        alert = event["alert"]
        assert alert["signature"] == record["title"] and alert["action"] == "allowed" and alert["gid"] == 1
        tags = alert["metadata"]["tag"]
        assert tags[:2] == ["detector", f"rule:{record['rule']}"]
        assert f"confidence:{record['confidence']}" in tags
        # an info finding alone is no incident (detector.incidents): no incident_id, no incident tag
        incident = [tag for tag in tags if tag.startswith("incident:")]
        assert incident == ([f"incident:{record['incident_id']}"] if "incident_id" in record else [])
        assert alert["metadata"]["signature_severity"] == [record["severity"]]
        assert event.get("src_ip") == record.get("src_ip") and event.get("dest_port") == record.get("dest_port")
        assert event.get("ether", {}).get("src_mac") == record.get("src_mac")
        json.dumps(event)


def test_severity_is_suricatas_one_to_three_one_the_worst():
    seen = {}
    for snapshot in SNAPSHOTS:
        for record, event in _alerts(snapshot):
            seen.setdefault(record["severity"], set()).add(event["alert"]["severity"])
    assert seen == {"critical": {1}, "high": {1}, "medium": {2}, "low": {3}, "info": {3}}


def test_a_rule_keeps_its_signature_id_across_captures():
    ids: dict[str, set[int]] = {}
    for snapshot in SNAPSHOTS:
        for record, event in _alerts(snapshot):
            ids.setdefault(record["rule"], set()).add(event["alert"]["signature_id"])
    assert all(len(found) == 1 for found in ids.values()), ids
    by_rule = {rule: found.pop() for rule, found in ids.items()}
    assert len(set(by_rule.values())) == len(by_rule)
    # fixed for good: SIEMs keep these numbers in saved searches and suppressions
    assert by_rule["arp-spoof"] == 1_990_001 and by_rule["scan"] == 1_990_019
    assert by_rule["syn-flood"] == 1_990_021 and by_rule["vrrp-dual-master"] == 1_990_023


def test_every_rule_has_a_signature_number_of_its_own():
    # each rule states its number in its own module (Detector.EVE_SIGNATURE): no table elsewhere names rules
    assert set(load_rules()) <= set(REGISTRY)
    numbers = [cls.EVE_SIGNATURE[0] for cls in REGISTRY.values()]
    assert len(set(numbers)) == len(numbers) and min(numbers) >= 1
    assert SID_BASE + max(numbers) <= 1_999_999        # inside the range Snort and Suricata keep for local rules


def test_proto_is_written_as_suricata_names_it():
    record = {"rule": "scan", "severity": "medium", "title": "t", "first_seen": "2026-01-01T00:00:01.500000Z"}
    for ours, suricata in (("tcp", "TCP"), ("UDP", "UDP"), ("ICMPv6", "IPv6-ICMP"), ("ICMPV6", "IPv6-ICMP"),
                           ("IPv6-ICMP", "IPv6-ICMP"), ("CARP", "VRRP"), ("OSPF", "OSPF")):
        assert alert_event(record | {"proto": ours}, None)["proto"] == suricata
    arp = alert_event(record | {"proto": "ARP", "src_mac": "02:00:00:00:00:01"}, None)
    assert "proto" not in arp and "pcap_filename" not in arp and arp["ether"] == {"src_mac": "02:00:00:00:00:01"}
    assert _problems(arp) == []


def test_findings_jsonl_holds_each_alert_beside_its_finding(tmp_path):
    capture = CAPTURES / "echo-loop-rip-ipv4.pcapng"
    findings, _result, _path = analyze([str(capture)], tmp_path)
    document = json.loads((tmp_path / "findings.json").read_text())
    events = [json.loads(line) for line in (tmp_path / "findings.jsonl").read_text().splitlines()]
    assert all(SURICATA_TIME.fullmatch(e["timestamp"]) for e in events)
    pairs = events[:2 * len(findings)]
    assert [e["event_type"] for e in pairs] == ["alert", "finding"] * len(findings)
    assert {e["event_type"] for e in events[2 * len(findings):]} == {"incident"}
    assert alert_problems(tmp_path / "findings.jsonl") == []
    for record, alert, finding in zip(document["findings"], pairs[::2], pairs[1::2]):
        assert alert == alert_event(record, str(capture)) and _problems(alert) == []
        assert finding["finding"] == record and finding["timestamp"] == alert["timestamp"]
    (probe,) = [a for a in pairs[::2] if a["alert"]["signature_id"] == signature("rip-trigger")[0]]
    assert probe["timestamp"] == "2026-01-01T00:00:01.500000+0000" and probe["proto"] == "UDP"
    assert probe["dest_port"] == 520 and "incident:incident-1" in probe["alert"]["metadata"]["tag"]


def test_the_manuals_example_is_the_line_we_write():
    page = (HERE.parent / "docs" / "manual" / "outputs.md").read_text()
    section = page[page.index("## findings.jsonl: EVE for Suricata's tools"):]
    start = section.index("```json\n") + len("```json\n")
    example = json.loads(section[start:section.index("\n```", start)])
    (snapshot,) = [p for p in SNAPSHOTS if p.name == "echo-loop-rip-ipv4.pcapng.json"]
    (written,) = [event for record, event in _alerts(snapshot) if record["rule"] == "rip-trigger"]
    assert example == written and _problems(example) == []

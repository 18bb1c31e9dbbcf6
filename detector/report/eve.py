"""findings.jsonl: the findings as Suricata EVE JSON lines, for the tools that already ingest EVE (EveBox,
Kibana's Suricata dashboards, Wazuh), with no parser of their own.

Each finding gives two lines, in this order:

- an `alert` line in Suricata's own shape, valid under Suricata's etc/schema.json (tests/data/ holds the
  extract tests/test_eve.py checks it against): EVE's header (timestamp, event_type "alert", src_ip,
  src_port, dest_ip, dest_port, proto as Suricata names it, community_id, pcap_filename, `ether` with the
  MACs) and an `alert` object: action "allowed" (we watch, we never block), gid 1, the rule's fixed
  signature_id and rev (Detector.EVE_SIGNATURE), the rule's title as signature, a category of Suricata's
  classification.config, severity 1-3 (Suricata's: 1 is the worst), and metadata. Suricata's schema allows
  only its listed metadata keys, so the rule, the confidence and the incident travel as `tag` values
  ("rule:" and the rule id, "confidence:high", "incident:incident-1") beside the tag "detector", and the finding's
  own severity word as `signature_severity`;
- a `finding` line: the same header and the whole finding under "finding" (richer than an alert: the
  message, the evidence, the confidence's reasons; not a key of Suricata's schema).

Each incident (detector.incidents) follows as one line of event_type "incident", its header taken from its
root cause and the incident under "incident"; its findings carry its id as finding.incident_id. A rule that
failed during the run adds one line of event_type "failure" with the record under "failure" (what
findings.json lists under "failures"), so a SIEM that reads only this file still learns that findings may be
missing. Every line's timestamp is written as Suricata writes it, `2026-01-01T00:00:01.500000+0000`.

No flow_id: Suricata's joins an alert to Suricata's own flow events, which we do not write; community_id
is the key that joins our lines with Suricata's and Zeek's.
"""
from __future__ import annotations

import json
import time

from ..detectors import REGISTRY
from ..findings import Finding, iso_time

EVE_KEYS = ("src_ip", "dest_ip", "src_port", "dest_port", "proto", "community_id")


# signature_id = SID_BASE + the rule's number (Detector.EVE_SIGNATURE, in the rule's own module). Snort and
# Suricata keep 1,000,000-1,999,999 for local rules (the public rule sets, Emerging Threats from 2,000,000, stay
# clear of it); a site's own local rules commonly count up from 1,000,001, so ours sit at the top of the range.
# Numbers are fixed for good: a new rule takes the next free number, a removed rule's number is never reused,
# and nothing is renumbered, so an alert keeps its signature_id across captures, runs and releases
# (tests/test_eve.py holds the rules to that).
SID_BASE = 1_990_000
# raised when the rules' judgement changes enough that old alerts read differently
REV = 1

# Suricata's alert severity is its classification's priority, 1 the most urgent and 3 the least
ALERT_SEVERITY = {"critical": 1, "high": 1, "medium": 2, "low": 3, "info": 3}

# proto as Suricata writes it (src/util-proto-name.c, IANA's keywords): the IP protocol of the packet. A
# finding's proto that names no IP protocol (ARP) is left out of the alert line, as Suricata has no proto
# for it; CARP shares VRRP's protocol number 112, which Suricata names VRRP.
SURICATA_PROTO = {name.upper(): name for name in
                  ("ICMP", "IGMP", "TCP", "UDP", "GRE", "ESP", "AH", "IPv6-ICMP", "OSPF", "PIM", "VRRP", "SCTP")}
SURICATA_PROTO |= {"ICMPV6": "IPv6-ICMP", "CARP": "VRRP"}


def eve_time(iso: str | None) -> str | None:
    """An ISO time of findings.json (UTC, `Z`) as Suricata writes it: `+0000` for `Z`."""
    if iso is None or not iso.endswith("Z"):
        return iso
    return iso[:-1] + "+0000"


def signature(rule: str) -> tuple[int, str]:
    """The rule's fixed signature_id and its category (Detector.EVE_SIGNATURE)."""
    number, category = REGISTRY[rule].EVE_SIGNATURE
    return SID_BASE + number, category


def alert_event(record: dict, default_pcap: str | None) -> dict:
    """The EVE alert line of a finding, from its findings.json record (Finding.to_json())."""
    sid, category = signature(record["rule"])
    tags = ["detector", f"rule:{record['rule']}"]
    tags += [f"{key}:{record[name]}" for key, name in (("confidence", "confidence"), ("incident", "incident_id"))
             if record.get(name)]
    event = {"timestamp": eve_time(record.get("first_seen")), "event_type": "alert"}
    event.update({k: record[k] for k in ("src_ip", "src_port", "dest_ip", "dest_port") if k in record})
    proto = SURICATA_PROTO.get(str(record.get("proto")).upper())
    if proto is not None:
        event["proto"] = proto
    if "community_id" in record:
        event["community_id"] = record["community_id"]
    pcap = record.get("evidence", {}).get("pcap_filename", default_pcap)
    if pcap is not None:
        event["pcap_filename"] = pcap
    macs = {k: record[k] for k in ("src_mac", "dest_mac") if k in record}
    if macs:
        event["ether"] = macs
    event["alert"] = {"action": "allowed", "gid": 1, "signature_id": sid,
                      "rev": REV, "signature": record["title"], "category": category,
                      "severity": ALERT_SEVERITY[record["severity"]],
                      "metadata": {"signature_severity": [record["severity"]], "tag": tags}}
    return event


def _header(record: dict, event_type: str, default_pcap: str | None) -> dict:
    """The header of a finding or incident line, from a finding's findings.json record."""
    event = {"timestamp": eve_time(record.get("first_seen")), "event_type": event_type}
    event.update({k: record[k] for k in EVE_KEYS if k in record})
    event["pcap_filename"] = record.get("evidence", {}).get("pcap_filename", default_pcap)
    return event


def _line(event: dict) -> str:
    return json.dumps(event, separators=(",", ":")) + "\n"


def eve_lines(findings: list[Finding], default_pcap: str | None, failures=(), incidents=()) -> str:
    """Each finding's alert line and finding line, then one line per incident, then one per failure
    (findings.json's record of it)."""
    lines = []
    for f in findings:
        record = f.to_json()
        lines.append(_line(alert_event(record, default_pcap)))
        lines.append(_line(_header(record, "finding", default_pcap) | {"finding": record}))
    for incident in incidents:
        event = _header(incident.root_cause.to_json(), "incident", default_pcap)
        event["timestamp"] = eve_time(iso_time(incident.first_seen))
        event["incident"] = incident.to_json()
        lines.append(_line(event))
    for failure in failures:
        event = {"timestamp": eve_time(iso_time(time.time_ns())), "event_type": "failure", "failure": failure}
        lines.append(_line(event))
    return "".join(lines)

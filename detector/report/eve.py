"""findings.jsonl: one line per finding in the shape of Suricata's EVE JSON, for SIEMs that already ingest EVE.

Each line carries EVE's top-level keys (timestamp, event_type, src_ip,
dest_ip, src_port, dest_port, proto, community_id, pcap_filename) and the
whole finding under "finding", as an EVE "alert" carries its alert object.
Each incident (detector.incidents) follows as one line of event_type
"incident", its header taken from its root cause and the incident under
"incident"; its findings' lines carry its id as finding.incident_id.
A rule that failed during the run adds one line of event_type "failure"
with the record under "failure" (what findings.json lists under "failures"),
so a SIEM that reads only this file still learns that findings may be missing.
"""
from __future__ import annotations

import json
import time

from ..findings import Finding, iso_time

EVE_KEYS = ("src_ip", "dest_ip", "src_port", "dest_port", "proto", "community_id")


def _header(f: Finding, event_type: str, default_pcap: str | None) -> dict:
    record = f.to_json()
    event = {"timestamp": record.get("first_seen"), "event_type": event_type}
    event.update({k: record[k] for k in EVE_KEYS if k in record})
    event["pcap_filename"] = f.evidence.get("pcap_filename", default_pcap)
    return event


def eve_lines(findings: list[Finding], default_pcap: str | None, failures=(), incidents=()) -> str:
    """The findings as EVE lines, then one line per incident, then one per failure (findings.json's record
    of it)."""
    lines = []
    for f in findings:
        event = _header(f, "finding", default_pcap)
        event["finding"] = f.to_json()
        lines.append(json.dumps(event, separators=(",", ":")))
    for incident in incidents:
        event = _header(incident.root_cause, "incident", default_pcap)
        event["timestamp"] = iso_time(incident.first_seen)
        event["incident"] = incident.to_json()
        lines.append(json.dumps(event, separators=(",", ":")))
    for failure in failures:
        event = {"timestamp": iso_time(time.time_ns()), "event_type": "failure", "failure": failure}
        lines.append(json.dumps(event, separators=(",", ":")))
    return "".join(line + "\n" for line in lines)

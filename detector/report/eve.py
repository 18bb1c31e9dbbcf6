"""findings.jsonl: one line per finding in the shape of Suricata's EVE JSON, for SIEMs that already ingest EVE.

Each line carries EVE's top-level keys (timestamp, event_type, src_ip,
dest_ip, src_port, dest_port, proto, community_id, pcap_filename) and the
whole finding under "finding", as an EVE "alert" carries its alert object.
A rule that failed during the run adds one line of event_type "failure"
with the record under "failure" (what findings.json lists under "failures"),
so a SIEM that reads only this file still learns that findings may be missing.
"""
from __future__ import annotations

import json
import time

from ..findings import Finding, iso_time

EVE_KEYS = ("src_ip", "dest_ip", "src_port", "dest_port", "proto", "community_id")


def eve_lines(findings: list[Finding], default_pcap: str | None, failures=()) -> str:
    """The findings as EVE lines, then one line per failure (findings.json's record of it)."""
    lines = []
    for f in findings:
        record = f.to_json()
        event = {"timestamp": record.get("first_seen"), "event_type": "finding"}
        event.update({k: record[k] for k in EVE_KEYS if k in record})
        event["pcap_filename"] = f.evidence.get("pcap_filename", default_pcap)
        event["finding"] = record
        lines.append(json.dumps(event, separators=(",", ":")))
    for failure in failures:
        event = {"timestamp": iso_time(time.time_ns()), "event_type": "failure", "failure": failure}
        lines.append(json.dumps(event, separators=(",", ":")))
    return "".join(line + "\n" for line in lines)

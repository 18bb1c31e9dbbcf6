"""findings.jsonl: one line per finding in the shape of Suricata's EVE JSON, for SIEMs that already ingest EVE.

Each line carries EVE's top-level keys (timestamp, event_type, src_ip,
dest_ip, src_port, dest_port, proto, community_id, pcap_filename) and the
whole finding under "finding", as an EVE "alert" carries its alert object.
"""
from __future__ import annotations

import json

from ..findings import Finding

EVE_KEYS = ("src_ip", "dest_ip", "src_port", "dest_port", "proto", "community_id")


def eve_lines(findings: list[Finding], default_pcap: str | None) -> str:
    lines = []
    for f in findings:
        record = f.to_json()
        event = {"timestamp": record.get("first_seen"), "event_type": "finding"}
        event.update({k: record[k] for k in EVE_KEYS if k in record})
        event["pcap_filename"] = f.evidence.get("pcap_filename", default_pcap)
        event["finding"] = record
        lines.append(json.dumps(event, separators=(",", ":")))
    return "".join(line + "\n" for line in lines)

"""A capture whose packets carry markup, to prove that reports show packet-derived text as text.

A DNS query whose name holds `<script>` and an attribute-breaking
`"><img onerror=...>` loops between two devices, so it becomes an echo-loop
finding whose evidence frame is decoded into the report; the background's
HTTP requests carry the same strings in their payloads and Host names.
"""
from __future__ import annotations

import random
from pathlib import Path

from build_loops import _benign, _loop_copies
from common import write_capture
from scapy.all import DNS, DNSQR, IP, UDP, Ether

HOSTILE_NAME = '<script>alert(1)</script>"><img src=x onerror=alert(2)>.example'
LOOP_MACS = ("02:00:5e:66:00:01", "02:00:5e:66:00:02")


def hostile_markup(out_dir: Path) -> dict:
    path = out_dir / "hostile-markup.pcapng"
    rng = random.Random(666)
    query = (Ether(src=LOOP_MACS[1], dst=LOOP_MACS[0]) /
             IP(src="198.18.66.6", dst="192.0.2.66", ttl=64, id=666) /
             UDP(sport=5353, dport=53) / DNS(id=666, rd=1, qd=DNSQR(qname=HOSTILE_NAME)))
    packets = _benign(0.0, 1.0, rng) + _loop_copies(query, 0.4, 1500, 5000.0)
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "echo loop of a DNS query whose name is HTML markup (<script>, \"><img onerror>): "
                    "report escaping",
            "must_yield": [{"rule": "echo-loop", "severity_at_least": "medium"}],
            "must_not_yield": [{"rule": "routing-loop", "severity_above": "info"}]}


CAPTURES = [hostile_markup]

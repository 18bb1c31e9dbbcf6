"""Two unrelated incidents at once: what the correlator (detector.incidents) must keep apart.

At the same seconds, on one capture: an Internet scanner's zero-filled
UDP/520 probe starts an echo loop between a core router and the transparent
NAT beside it (incident 1 of INCIDENTS.md), fast enough to put one receive
queue over its share; and elsewhere a server behind another router ignores
ICMP "fragmentation needed" while it sends a client more than the MSS the
client announced (incident 3). Each is a chain of findings of its own
(rip-trigger -> echo-loop -> rss-saturation; mss-violation + pmtud-blackhole):
two incidents, although their spans overlap.
"""
from __future__ import annotations

import random
from pathlib import Path

from build_loops import CORE_MAC, CORE_V4, NAT_MAC, SCANNER_V4, TRIGGER_ID, TRIGGER_TTL, _benign, _loop_copies
from build_pmtud import ROUTER_MAC, SERVER_MAC, _blackhole_transfer
from common import write_capture
from scapy.all import IP, UDP, Ether, Raw

# fast enough for one receive queue to pass rss-saturation's 50,000 packets/s in its 100 ms bins
LOOP_RATE_PPS = 60000.0
LOOP_COPIES = 15000        # 0.25 s of loop: the file stays small


def echo_loop_beside_pmtud_blackhole(out_dir: Path) -> dict:
    path = out_dir / "two-incidents-at-once.pcapng"
    rng = random.Random(1313)
    trigger = (Ether(src=NAT_MAC, dst=CORE_MAC) /
               IP(src=SCANNER_V4, dst=CORE_V4, ttl=TRIGGER_TTL, id=TRIGGER_ID) /
               UDP(sport=44124, dport=520) / Raw(bytes(24)))
    eth, eth_r = Ether(src=ROUTER_MAC, dst=SERVER_MAC), Ether(src=SERVER_MAC, dst=ROUTER_MAC)
    transfer, _end = _blackhole_transfer(eth, eth_r, IP(src="198.51.100.23", dst="203.0.113.80"),
                                         IP(src="203.0.113.80", dst="198.51.100.23", flags="DF"),
                                         "192.0.2.254", 51700, 0.9, 3, rng)
    packets = (_benign(0.0, 2.5, rng) + _loop_copies(trigger, 1.0, LOOP_COPIES, LOOP_RATE_PPS) + transfer)
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "an echo loop of a UDP/520 probe (60,000 copies/s) and, at the same seconds, a PMTUD black hole "
                    "between other hosts: two incidents",
            "must_yield": [{"rule": "rip-trigger", "severity_at_least": "high"},
                           {"rule": "echo-loop", "severity_at_least": "high"},
                           {"rule": "rss-saturation", "severity_at_least": "medium"},
                           {"rule": "pmtud-blackhole", "severity_at_least": "high"},
                           {"rule": "mss-violation", "severity_at_least": "medium"}],
            "must_not_yield": [{"rule": "routing-loop", "severity_above": "info"}],
            "incidents": [{"root_cause": "rip-trigger", "findings": ["rip-trigger", "echo-loop", "rss-saturation"]},
                          {"root_cause": "mss-violation", "findings": ["mss-violation", "pmtud-blackhole"]}]}


CAPTURES = [echo_loop_beside_pmtud_blackhole]

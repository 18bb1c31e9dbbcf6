"""RIP announcement captures (seed 004): route injection and poisoning on a RIP link, and their near-misses.

One office link, 10.40.0.0/24, where two routers speak RIPv2 to 224.0.0.9
every 30 s (RFC 2453 section 3.8): R1, the exit, announces the default
route (metric 2, learned from the provider's router behind it) and
10.41.0.0/16; R2 announces 10.42.0.0/16 and 10.43.0.0/16 (metric 2, behind
a third router). Hosts on the link run RIP listeners, as seed 004's campus
would have, and believe whatever they hear.

- injection: from 65 s a host (10.40.0.66) announces 0.0.0.0/0 metric 1,
  unauthenticated: every listener sends its Internet traffic to the host;
- poisoning: from 70 s a host (10.40.0.77) announces metric 16 for R2's
  10.42.0.0/16 while R2 keeps announcing it, and a second host sends metric 16
  for R1's 10.41.0.0/16 with R1's own address from its own MAC;
- near-misses: the two routers alone, and R2 losing 10.42.0.0/16: it
  withdraws the route (metric 16, a triggered update and the garbage-collection
  updates, RFC 2453 section 3.10.1) and R1 passes the withdrawal on.
"""
from __future__ import annotations

from pathlib import Path

from common import write_capture
from scapy.all import IP, UDP, Ether
from scapy.layers.rip import RIP, RIPEntry

R1 = ("02:00:5e:40:00:01", "10.40.0.1")
R2 = ("02:00:5e:40:00:02", "10.40.0.2")
INJECTOR = ("02:00:5e:40:00:66", "10.40.0.66")
POISONER = ("02:00:5e:40:00:77", "10.40.0.77")
SPOOFER_MAC = "02:00:5e:40:00:88"
R1_ROUTES = [("0.0.0.0", "0.0.0.0", 2), ("10.41.0.0", "255.255.0.0", 1)]
R2_ROUTES = [("10.42.0.0", "255.255.0.0", 1), ("10.43.0.0", "255.255.0.0", 2)]
UPDATES = 6                    # 0-150 s: five update intervals
QUIET = ["echo-loop", "routing-loop", "rip-trigger"]


def _response(speaker, routes, mac=None):
    """A RIPv2 response of `speaker` (MAC, IP) to the RIP group: (prefix, mask, metric) routes."""
    source_mac, address = speaker
    entries = [RIPEntry(addr=prefix, mask=mask, metric=metric) for prefix, mask, metric in routes]
    message = RIP(cmd=2, version=2)
    for entry in entries:
        message = message / entry
    return (Ether(src=mac or source_mac, dst="01:00:5e:00:00:09") / IP(src=address, dst="224.0.0.9", ttl=1)
            / UDP(sport=520, dport=520) / message)


def _routers(r2_routes=lambda update: R2_ROUTES) -> list:
    """The two routers' periodic updates, R2 half a second after R1."""
    packets = []
    for update in range(UPDATES):
        packets.append((update * 30.0, _response(R1, R1_ROUTES)))
        packets.append((update * 30.0 + 0.5, _response(R2, r2_routes(update))))
    return packets


def _quiet(rules) -> list[dict]:
    return [{"rule": rule, "severity_above": "info"} for rule in rules]


def rip_injection(out_dir: Path) -> dict:
    path = out_dir / "rip-injection.pcapng"
    packets = _routers()
    for k in range(4):           # a RIP tool repeating its announcement every 30 s, as a router would
        packets.append((65.0 + k * 30.0, _response(INJECTOR, [("0.0.0.0", "0.0.0.0", 1)])))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "RIP route injection: a host joins two routers' RIPv2 exchange and announces 0.0.0.0/0 metric 1, "
                    "undercutting the exit router's default route (metric 2)",
            "must_yield": [{"rule": "rip-announce", "severity_at_least": "medium"}],
            "must_not_yield": _quiet(QUIET)}


def rip_poisoning(out_dir: Path) -> dict:
    path = out_dir / "rip-poisoning.pcapng"
    packets = _routers()
    for k in range(3):
        packets.append((70.0 + k * 30.0, _response(POISONER, [("10.42.0.0", "255.255.0.0", 16)])))
        packets.append((72.0 + k * 30.0, _response(R1, [("10.41.0.0", "255.255.0.0", 16)], mac=SPOOFER_MAC)))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "RIP metric-16 poisoning: a host withdraws a router's live prefix, and another withdraws the "
                    "other router's with that router's address from its own MAC",
            "must_yield": [{"rule": "rip-announce", "severity_at_least": "high"}],
            "must_not_yield": _quiet(QUIET)}


def rip_two_routers(out_dir: Path) -> dict:
    path = out_dir / "rip-two-routers.pcapng"
    count = write_capture(path, _routers())
    return {"file": path.name, "packets": count,
            "what": "near-miss: two routers' normal RIPv2 updates, one announcing the default route",
            "must_yield": [{"rule": "rip-announce", "severity_at_least": "info"}],
            "must_not_yield": _quiet(["rip-announce", *QUIET])}


def rip_withdrawal(out_dir: Path) -> dict:
    path = out_dir / "rip-withdrawal.pcapng"
    down = [("10.42.0.0", "255.255.0.0", 16), ("10.43.0.0", "255.255.0.0", 2)]
    # R2's 10.42.0.0/16 goes down at 70 s: it says so at once (a triggered update), R1 passes it on, and both
    # keep announcing it unreachable until the garbage-collection timer removes it
    packets = _routers(lambda update: R2_ROUTES if update < 3 else down)
    packets.append((70.0, _response(R2, down[:1])))
    packets.append((71.5, _response(R1, down[:1])))
    for update in range(3, UPDATES):
        packets.append((update * 30.0 + 0.2, _response(R1, down[:1])))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-miss: a router withdraws its own prefix (metric 16) and the other router passes it on",
            "must_yield": [{"rule": "rip-announce", "severity_at_least": "info"}],
            "must_not_yield": _quiet(["rip-announce", *QUIET])}


CAPTURES = [rip_injection, rip_poisoning, rip_two_routers, rip_withdrawal]

"""IPv6 router advertisement captures (seed 004): a rogue router, a spoofed "kill router", and their near-misses.

One office link, 2001:db8:60:1::/64, whose router R (fe80::1, MAC
02:00:5e:60:00:01) sends a Router Advertisement to all nodes every 20 s: a
default router for 1800 s, the prefix for SLAAC, its DNS server (RDNSS,
RFC 8106) and the MTU. A host (fe80::a) solicits a router when it comes up,
resolves the router's address (NS/NA) and answers a solicitation for its
own.

- rogue router: from 65 s a host (fe80::66, 02:00:5e:60:00:66) sends RAs
  every 5 s, as THC fake_router6 does, with another prefix, its own DNS
  server and high preference: hosts take addresses in its prefix, its DNS
  server and (preferring it) its default route;
- kill router: from 60 s a host (02:00:5e:60:00:77) sends RAs of router
  lifetime 0 and high preference with R's link-local every 3 s, as THC
  kill_router6 does: hosts drop R as their default router;
- near-misses: R alone, and R restarting (three final RAs of lifetime 0,
  RFC 4861 section 6.2.5, then, 20 s later, RAs again).
"""
from __future__ import annotations

from pathlib import Path

from common import write_capture
from scapy.layers.inet6 import (
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6ND_RA,
    ICMPv6ND_RS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptMTU,
    ICMPv6NDOptPrefixInfo,
    ICMPv6NDOptRDNSS,
    ICMPv6NDOptSrcLLAddr,
    IPv6,
)
from scapy.layers.l2 import Ether

ROUTER = ("02:00:5e:60:00:01", "fe80::1")
HOST = ("02:00:5e:60:00:0a", "fe80::a")
ROGUE = ("02:00:5e:60:00:66", "fe80::66")
KILLER_MAC = "02:00:5e:60:00:77"
PREFIX = "2001:db8:60:1::"
DNS = "2001:db8:60:1::53"
ROGUE_PREFIX = "2001:db8:bad:1::"
ROGUE_DNS = "2001:db8:bad:1::53"
INTERVAL_S = 20              # R's RA interval (radvd MaxRtrAdvInterval set low, as on a busy office link)
DURATION_S = 180
QUIET = ["echo-loop", "routing-loop"]
PRF_HIGH, PRF_MEDIUM = 1, 0  # RFC 4191 section 2.2


def _ra(source, prefix=PREFIX, dns=DNS, lifetime=1800, prf=PRF_MEDIUM, mac=None, options=True):
    """An RA of `source` (MAC, link-local) to all nodes, with its prefix, DNS server, MTU and address."""
    source_mac, address = source
    message = ICMPv6ND_RA(chlim=64, M=0, O=0, prf=prf, routerlifetime=lifetime)
    if options:
        message = (message / ICMPv6NDOptSrcLLAddr(lladdr=source_mac) / ICMPv6NDOptMTU(mtu=1500)
                   / ICMPv6NDOptPrefixInfo(prefix=prefix, prefixlen=64, L=1, A=1, validlifetime=86400,
                                           preferredlifetime=14400)
                   / ICMPv6NDOptRDNSS(lifetime=1800, dns=[dns]))
    return Ether(src=mac or source_mac, dst="33:33:00:00:00:01") / IPv6(src=address, dst="ff02::1", hlim=255) / message


def _host() -> list:
    """The host coming up: a router solicitation, then resolving R's address and answering R's solicitation."""
    host_mac, host = HOST
    router_mac, router = ROUTER
    return [
        (1.0, Ether(src=host_mac, dst="33:33:00:00:00:02") / IPv6(src=host, dst="ff02::2", hlim=255) / ICMPv6ND_RS()
         / ICMPv6NDOptSrcLLAddr(lladdr=host_mac)),
        (1.2, _ra(ROUTER)),
        (2.0, Ether(src=host_mac, dst="33:33:ff:00:00:01") / IPv6(src=host, dst="ff02::1:ff00:1", hlim=255)
         / ICMPv6ND_NS(tgt=router) / ICMPv6NDOptSrcLLAddr(lladdr=host_mac)),
        (2.001, Ether(src=router_mac, dst=host_mac) / IPv6(src=router, dst=host, hlim=255)
         / ICMPv6ND_NA(R=1, S=1, O=1, tgt=router) / ICMPv6NDOptDstLLAddr(lladdr=router_mac)),
        (30.0, Ether(src=router_mac, dst="33:33:ff:00:00:0a") / IPv6(src=router, dst="ff02::1:ff00:a", hlim=255)
         / ICMPv6ND_NS(tgt=host) / ICMPv6NDOptSrcLLAddr(lladdr=router_mac)),
        (30.001, Ether(src=host_mac, dst=router_mac) / IPv6(src=host, dst=router, hlim=255)
         / ICMPv6ND_NA(R=0, S=1, O=1, tgt=host) / ICMPv6NDOptDstLLAddr(lladdr=host_mac)),
    ]


def _router(until=DURATION_S, skip=()) -> list:
    """R's periodic RAs (the times in `skip` left out)."""
    return [(float(t), _ra(ROUTER)) for t in range(0, until + 1, INTERVAL_S) if t not in skip]


def _quiet(rules) -> list[dict]:
    return [{"rule": rule, "severity_above": "info"} for rule in rules]


def nd_rogue_router(out_dir: Path) -> dict:
    path = out_dir / "nd-rogue-router.pcapng"
    packets = _router() + _host()
    packets += [(65.0 + 5 * k, _ra(ROGUE, ROGUE_PREFIX, ROGUE_DNS, prf=PRF_HIGH)) for k in range(20)]
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "rogue IPv6 router: a host sends RAs beside the link's router, with another prefix, its own DNS "
                    "server and high preference",
            "must_yield": [{"rule": "rogue-ra", "severity_at_least": "medium"}],
            "must_not_yield": _quiet(QUIET)}


def nd_kill_router(out_dir: Path) -> dict:
    path = out_dir / "nd-kill-router.pcapng"
    packets = _router() + _host()
    packets += [(60.0 + 3 * k, _ra(ROUTER, lifetime=0, prf=PRF_HIGH, mac=KILLER_MAC, options=False))
                for k in range(30)]
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "spoofed 'kill router': RAs of router lifetime 0 with the router's link-local from another MAC",
            "must_yield": [{"rule": "rogue-ra", "severity_at_least": "high"}],
            "must_not_yield": _quiet(QUIET)}


def nd_router(out_dir: Path) -> dict:
    path = out_dir / "nd-router.pcapng"
    count = write_capture(path, _router() + _host())
    return {"file": path.name, "packets": count,
            "what": "near-miss: the link's router advertising every 20 s, a host soliciting and resolving it",
            "must_yield": [{"rule": "rogue-ra", "severity_at_least": "info"}],
            "must_not_yield": _quiet(["*"])}


def nd_router_restart(out_dir: Path) -> dict:
    path = out_dir / "nd-router-restart.pcapng"
    # R goes down at 80 s: three final RAs of lifetime 0, 3 s apart, then nothing until it is back at 120 s
    packets = _router(skip=(80, 100)) + _host()
    packets += [(80.0 + 3 * k, _ra(ROUTER, lifetime=0)) for k in range(3)]
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-miss: the link's router restarting, lifetime 0 from its own MAC, then advertising again",
            "must_yield": [{"rule": "rogue-ra", "severity_at_least": "info"}],
            "must_not_yield": _quiet(["*"])}


CAPTURES = [nd_rogue_router, nd_kill_router, nd_router, nd_router_restart]

"""Real captures from other projects' test suites raise nothing above "low" unless they hold a signature.

All default rules run in process over every file of ../shared/captures-real
(files that cannot be read are the ingest tests' business and are passed
over here). A file that really contains what a rule looks for is listed in
ALLOWED with the rule, the highest severity it may reach and why; the list
is reviewed like code.
"""
from __future__ import annotations

from detector.analysis import analyze
from detector.errors import DetectorError
from detector.findings import SEVERITY_RANK
from detector.rules import load_rules
from tests._real import manifest_rows

QUIET_UP_TO = "low"
# Malformed control-plane messages are low (malformed-message), not incidents: packetlife's VRRP_Malformed_DoS.cap
# (an empty VRRP packet), tcpdump's icmp-icmp_print-oobr-1.pcap (a fuzzed VRRPv3) and ripv2-invalid-length.pcap (a
# RIP update of UDP length 168 in an IP length of 192, one route of metric 268,435,457) left this list with issue
# 27, as did arkime's ospf.pcap (two quick resets of a standing OSPF adjacency: low).

# path -> {rule: (highest severity allowed, why the file really contains the signature)}
ALLOWED: dict[str, dict[str, tuple[str, str]]] = {
    "lucaderi-sgr/2022/Favilli/tests/na-arpSpoofing.pcap": {
        "arp-spoof": ("high", "00:e0:4d:3c:25:7b sends 36 unsolicited ARP replies in 134 s telling dc:f5:05:75:0b:cd "
                              "that 10.0.0.157 and b0:7f:b9:4e:f0:9c that 10.0.0.153 is at its MAC, while the replies' "
                              "target pairs name the real owners (tshark: arp.duplicate-address-detected in 18 "
                              "frames): a man in the middle"),
    },
    "packetlife/pcaps/ipv6_neighbor_spoofing.cap": {
        "arp-spoof": ("high", "fe80::1 answers fe80::2 from 00:00:00:00:00:0a (frames 2, 15); from frame 33 "
                              "00:00:00:00:00:0c sends fe80::2 Neighbor Advertisements for fe80::1 with the override "
                              "flag, the solicited flag clear and its own target link-layer address, every 5 s "
                              "(frames 33, 39, 45; tshark icmpv6.nd.na.flag.s 0, o 1), and fe80::2's pings go to "
                              ":0c from then on: Neighbor Discovery spoofing"),
    },
    "suricata-verify/tests/ipv6-evasion/ipv6-kill-router-gateway/kill_router6.pcap": {
        "rogue-ra": ("high", "THC kill_router6: 00:50:b6:19:e6:50 sends RAs of router lifetime 0 and high preference "
                             "with fe80::6600:6aff:fe5b:8eb3, the link-local (EUI-64) of 64:00:6a:5b:8e:b3, whose own "
                             "RA (frame 6) advertises lifetime 30 s (tshark icmpv6.nd.ra.router_lifetime agrees)"),
    },
    "chrissanders-packets/ppa1e/portscan.pcap": {
        "scan": ("medium", "10.100.25.14 sends one SYN each to 29 TCP ports of 10.100.18.12 in 2.8 s, nothing answers "
                           "(tshark: 29 frames, all tcp.flags == 0x002, no packet back): a port scan from the private "
                           "address space, local without a site file"),
    },
    "lucaderi-sgr/2022/Favilli/tests/hs-icmpScan.pcap": {
        "scan": ("medium", "10.0.0.128 sends echo requests to all 256 addresses of 10.0.0.0/24 in 2.1 s, none "
                           "answered (tshark: 256 icmp.type == 8 destinations, no icmp.type == 0): a local ping sweep"),
    },
    "lucaderi-sgr/2022/Favilli/tests/hs-icmpScan.pcapng": {
        "scan": ("medium", "the same ping sweep of 10.0.0.0/24 by 10.0.0.128 on a live network: of 256 addresses "
                           "only 10.0.0.1 and 10.0.0.3 answer (icmp.type == 0), 10.0.0.3 reports host unreachable for "
                           "the others (icmp.type == 3, code 1): 254 targets never answered"),
    },
    "lucaderi-sgr/2022/Favilli/tests/hs-tcp_ackPingSweepRand.pcapng": {
        "scan": ("medium", "10.0.0.128 sends one bare ACK (tcp.flags == 0x010, no payload) from port 62528 to port "
                           "80 of each of 256 addresses of 10.0.0.0/24 within 7 ms, nothing comes back: an nmap ACK "
                           "ping sweep from a local host"),
    },
}


def test_real_captures_stay_quiet(captures_real):
    rules = load_rules()
    loud, used = [], set()
    rows = manifest_rows()
    assert len(rows) > 1000
    for row in rows:
        try:
            findings = analyze([captures_real / row["path"]], rules, label="quiet").findings
        except DetectorError:
            continue
        allowed = ALLOWED.get(row["path"], {})
        for f in findings:
            if f.rule in allowed and f.rank <= SEVERITY_RANK[allowed[f.rule][0]]:
                used.add((row["path"], f.rule))
                continue
            if f.rank > SEVERITY_RANK[QUIET_UP_TO]:
                loud.append(f"{row['path']}: {f.rule} {f.severity}: {f.msg}")
    assert not loud, "\n".join(loud)
    # an allowance nothing needs any more is stale: drop it
    assert used == {(path, rule) for path, rules_ in ALLOWED.items() for rule in rules_}

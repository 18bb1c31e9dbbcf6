"""PMTUD black hole captures (incident 3) and their near-misses: PMTUD that works, a TSO host-side capture.

The black hole: a server (the "host") behind a 1500-byte link sends a bulk
download to a client behind a 1420-byte tunnel whose SYN announced MSS 1320.
Every new segment leaves the server as a 1500-byte packet; the tunnel router
answers with ICMP "fragmentation needed" (MTU 1420) or ICMPv6 Packet Too
Big; the server retransmits the same sequence 40 bytes smaller after a
timeout, gets another message, and shrinks again until 1420 bytes fit. The
capture point is the server's uplink, so it sees the server's packets, the
router's messages and the client's ACKs.
"""
from __future__ import annotations

import random
from pathlib import Path

from common import tcp_session, write_capture
from scapy.all import DNS, DNSQR, ICMP, IP, TCP, UDP, Dot1Q, Ether, ICMPv6PacketTooBig, IPOption_Router_Alert, IPv6, Raw
from scapy.contrib.mpls import MPLS

SERVER_MAC, ROUTER_MAC = "02:00:5e:10:00:80", "02:00:5e:10:00:01"
TUNNEL_MTU = 1420          # WireGuard-style tunnel on the client's path (the incident's figure)
SHRINK_STEP = 40           # the incident's retransmissions shrank by 40 bytes each
CLIENT_MSS = 1320          # the MSS the client's router clamps to (the incident's figure)
RTO_S = 0.3                # first retransmission timeout; doubled for each further try
OTHERS = ["echo-loop", "rip-trigger", "rss-saturation"]


def _quiet(*rules: str) -> list[dict]:
    return [{"rule": rule, "severity_above": "info"} for rule in rules]


def _frag_needed(router: str, original, mtu: int):
    """ICMP 3/4 quoting the IP header and first 8 bytes of the dropped packet (RFC 792)."""
    quoted = bytes(original[IP])[:28]
    return IP(src=router, dst=original[IP].src) / ICMP(type=3, code=4, nexthopmtu=mtu) / Raw(quoted)


def _packet_too_big(router: str, original, mtu: int):
    """ICMPv6 Packet Too Big quoting as much of the packet as fits in 1280 bytes (RFC 4443 3.2)."""
    quoted = bytes(original[IPv6])[:1280 - 48]
    return IPv6(src=router, dst=original[IPv6].src) / ICMPv6PacketTooBig(mtu=mtu) / Raw(quoted)


def _blackhole_transfer(eth, eth_r, ip, ip_r, router, sport, t, segments, rng, v6=False, adapt=False,
                        client_mss=CLIENT_MSS):
    """Handshake, request, then `segments` server segments through the too-small tunnel.

    The server (ip_r side) ignores the messages: each new segment starts at a
    full 1500-byte packet and shrinks on retransmission. With `adapt` it
    heeds the first messages and sends every later packet at the tunnel MTU.
    """
    header = (40 if v6 else 20) + 20
    too_big = _packet_too_big if v6 else _frag_needed
    out = []
    cseq, sseq = rng.randrange(1 << 31), rng.randrange(1 << 31)
    out.append((t, eth / ip / TCP(sport=sport, dport=443, flags="S", seq=cseq,
                                  options=[("MSS", client_mss), ("SAckOK", b""), ("WScale", 7)])))
    out.append((t + 0.030, eth_r / ip_r / TCP(sport=443, dport=sport, flags="SA", seq=sseq, ack=cseq + 1,
                                              options=[("MSS", 1460), ("SAckOK", b""), ("WScale", 7)])))
    cseq, sseq = cseq + 1, sseq + 1
    out.append((t + 0.060, eth / ip / TCP(sport=sport, dport=443, flags="A", seq=cseq, ack=sseq)))
    request = b"GET /media/archive.tar HTTP/1.1\r\nHost: social.example\r\n\r\n"
    out.append((t + 0.061, eth / ip / TCP(sport=sport, dport=443, flags="PA", seq=cseq, ack=sseq) / Raw(request)))
    cseq += len(request)
    now = t + 0.100
    if adapt:
        # a window of four full-size segments in flight: four messages, then the host adapts
        fits = TUNNEL_MTU - header
        burst = []
        for k in range(4):
            seg = eth_r / ip_r / TCP(sport=443, dport=sport, flags="A", seq=sseq + k * (1500 - header),
                                     ack=cseq) / Raw(bytes(rng.randrange(256) for _ in range(1500 - header)))
            burst.append(seg)
            out.append((now + k * 0.0002, seg))
            out.append((now + 0.001 + k * 0.0002, Ether(src=ROUTER_MAC, dst=SERVER_MAC) / too_big(router, seg,
                                                                                                 TUNNEL_MTU)))
        now += 0.010
        for _ in range(segments):
            out.append((now, eth_r / ip_r / TCP(sport=443, dport=sport, flags="A", seq=sseq, ack=cseq) /
                        Raw(bytes(rng.randrange(256) for _ in range(fits)))))
            sseq += fits
            out.append((now + 0.030, eth / ip / TCP(sport=sport, dport=443, flags="A", seq=cseq, ack=sseq)))
            now += 0.002
        return out, now
    for _ in range(segments):
        size, rto, sent_at = 1500, RTO_S, now
        while True:
            payload = size - header
            seg = eth_r / ip_r / TCP(sport=443, dport=sport, flags="PA", seq=sseq, ack=cseq) / \
                Raw(bytes(rng.randrange(256) for _ in range(payload)))
            out.append((sent_at, seg))
            if size <= TUNNEL_MTU:
                sseq += payload
                out.append((sent_at + 0.030, eth / ip / TCP(sport=sport, dport=443, flags="A", seq=cseq, ack=sseq)))
                now = sent_at + 0.031
                break
            out.append((sent_at + 0.002, Ether(src=ROUTER_MAC, dst=SERVER_MAC) / too_big(router, seg, TUNNEL_MTU)))
            sent_at += rto
            rto *= 2
            size -= SHRINK_STEP
    return out, now


def pmtud_blackhole_ipv4(out_dir: Path) -> dict:
    """The incident as captured on the server's uplink: ICMP 3/4 MTU 1420, 1500 -> 1460 -> 1420 retransmissions."""
    path = out_dir / "pmtud-blackhole-ipv4.pcapng"
    rng = random.Random(3001)
    eth, eth_r = Ether(src=ROUTER_MAC, dst=SERVER_MAC), Ether(src=SERVER_MAC, dst=ROUTER_MAC)
    packets, _ = _blackhole_transfer(eth, eth_r, IP(src="198.51.100.23", dst="203.0.113.80"),
                                     IP(src="203.0.113.80", dst="198.51.100.23", flags="DF"),
                                     "192.0.2.254", 51514, 0.0, 6, rng)
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "PMTUD black hole, IPv4: server ignores ICMP frag-needed (MTU 1420) and exceeds the client's "
                    "MSS 1320; retransmissions shrink by 40 bytes",
            "must_yield": [{"rule": "pmtud-blackhole", "severity_at_least": "high"},
                           {"rule": "mss-violation", "severity_at_least": "medium"}],
            "incidents": [{"root_cause": "mss-violation", "findings": ["mss-violation", "pmtud-blackhole"]}],
            "must_not_yield": _quiet(*OTHERS)}


def pmtud_blackhole_ipv6_vlan(out_dir: Path) -> dict:
    """The same black hole over IPv6 on VLAN 30: ICMPv6 Packet Too Big, MTU 1420."""
    path = out_dir / "pmtud-blackhole-ipv6-vlan.pcapng"
    rng = random.Random(3002)
    eth = Ether(src=ROUTER_MAC, dst=SERVER_MAC) / Dot1Q(vlan=30)
    eth_r = Ether(src=SERVER_MAC, dst=ROUTER_MAC) / Dot1Q(vlan=30)
    packets, _ = _blackhole_transfer(eth, eth_r, IPv6(src="2001:db8:77::23", dst="2001:db8:10::80"),
                                     IPv6(src="2001:db8:10::80", dst="2001:db8:77::23"),
                                     "2001:db8:10::1", 52020, 0.0, 5, rng, v6=True, client_mss=1300)
    # the router's messages travel on the same VLAN
    packets = [(t, p if p.haslayer(Dot1Q) else _tag(p, 30)) for t, p in packets]
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "PMTUD black hole, IPv6 on VLAN 30: ICMPv6 Packet Too Big (MTU 1420) ignored",
            "must_yield": [{"rule": "pmtud-blackhole", "severity_at_least": "high"},
                           {"rule": "mss-violation", "severity_at_least": "medium"}],
            "incidents": [{"root_cause": "mss-violation", "findings": ["mss-violation", "pmtud-blackhole"]}],
            "must_not_yield": _quiet(*OTHERS)}


def _tag(packet, vlan: int):
    return Ether(src=packet[Ether].src, dst=packet[Ether].dst) / Dot1Q(vlan=vlan) / packet[Ether].payload


def pmtud_blackhole_busy(out_dir: Path) -> dict:
    """The black-holed download buried in ordinary traffic of other clients that fits the path."""
    path = out_dir / "pmtud-blackhole-busy.pcapng"
    rng = random.Random(3003)
    eth, eth_r = Ether(src=ROUTER_MAC, dst=SERVER_MAC), Ether(src=SERVER_MAC, dst=ROUTER_MAC)
    packets, _end = _blackhole_transfer(eth, eth_r, IP(src="198.51.100.23", dst="203.0.113.80"),
                                       IP(src="203.0.113.80", dst="198.51.100.23", flags="DF"),
                                       "192.0.2.254", 51600, 0.5, 4, rng)
    for i in range(24):
        client = f"198.51.100.{100 + i}"
        t = 0.2 * i
        page = bytes(rng.randrange(32, 127) for _ in range(1200))
        packets += tcp_session(eth, eth_r, IP(src=client, dst="203.0.113.80"), IP(src="203.0.113.80", dst=client),
                               40000 + i, 443, t, [(b"GET /api/v1/timelines/home HTTP/1.1\r\n\r\n", page)], rng)
        qid = rng.randrange(65536)
        packets.append((t + 0.05, eth_r / IP(src="203.0.113.80", dst="192.0.2.53") / UDP(sport=30000 + i, dport=53) /
                        DNS(id=qid, rd=1, qd=DNSQR(qname=f"cdn{i}.example"))))
        packets.append((t + 0.052, eth / IP(src="192.0.2.53", dst="203.0.113.80") / UDP(sport=53, dport=30000 + i) /
                        DNS(id=qid, qr=1, qd=DNSQR(qname=f"cdn{i}.example"))))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "PMTUD black hole, IPv4, one download among 24 ordinary HTTPS sessions and DNS",
            "must_yield": [{"rule": "pmtud-blackhole", "severity_at_least": "medium"},
                           {"rule": "mss-violation", "severity_at_least": "medium"}],
            "incidents": [{"root_cause": "mss-violation", "findings": ["mss-violation", "pmtud-blackhole"]}],
            "must_not_yield": _quiet(*OTHERS)}


def pmtud_works(out_dir: Path) -> dict:
    """Near-miss: a window of four packets draws four messages, then the host sends at the path MTU."""
    path = out_dir / "pmtud-works.pcapng"
    rng = random.Random(3004)
    eth, eth_r = Ether(src=ROUTER_MAC, dst=SERVER_MAC), Ether(src=SERVER_MAC, dst=ROUTER_MAC)
    packets, _ = _blackhole_transfer(eth, eth_r, IP(src="198.51.100.23", dst="203.0.113.80"),
                                     IP(src="203.0.113.80", dst="198.51.100.23", flags="DF"),
                                     "192.0.2.254", 51700, 0.0, 40, rng, adapt=True, client_mss=1460)
    more, _ = _blackhole_transfer(eth, eth_r, IPv6(src="2001:db8:77::23", dst="2001:db8:10::80"),
                                  IPv6(src="2001:db8:10::80", dst="2001:db8:77::23"),
                                  "2001:db8:10::1", 51800, 1.0, 40, rng, v6=True, adapt=True, client_mss=1440)
    count = write_capture(path, packets + more)
    return {"file": path.name, "packets": count,
            "what": "PMTUD that works (IPv4 and IPv6): messages for the first window, then packets fit the MTU",
            "must_yield": [],
            "must_not_yield": [{"rule": "*", "severity_above": "info"}]}


def _probes(eth, template, sizes, router, mtu, t0, header, reply_eth):
    """Don't-Fragment probes of the given IP sizes a second apart; a router answers each one above `mtu`."""
    out = []
    for k, size in enumerate(sizes):
        probe = eth / template.copy() / Raw(bytes(size - header))
        if ICMP in probe:
            probe[ICMP].seq = k + 1
        out.append((t0 + k, probe))
        if size > mtu:
            out.append((t0 + k + 0.003, reply_eth / _frag_needed(router, probe, mtu)))
    return out


def pmtud_diagnostic_probes(out_dir: Path) -> dict:
    """Near-miss: diagnostics that send Don't-Fragment probes of fixed sizes and never adapt, by design.

    `ping -M do -s 1472` (1500-byte echo requests into the 1420-byte tunnel),
    an MPLS LSP ping (RFC 8029: UDP 3503 to 127.0.0.1 with the router alert
    option, labelled) of 1500 bytes and then a size sweep, and a UDP probe
    tool sending 1500-byte datagrams with DF set to a real host. Every probe
    above the path MTU draws a frag-needed.
    """
    path = out_dir / "pmtud-diagnostic-probes.pcapng"
    to_router, from_router = Ether(src=SERVER_MAC, dst=ROUTER_MAC), Ether(src=ROUTER_MAC, dst=SERVER_MAC)
    ping = IP(src="203.0.113.80", dst="198.51.100.23", flags="DF", id=0) / ICMP(type=8, id=0x4d44, seq=1)
    packets = _probes(to_router, ping, [1500] * 5, "192.0.2.254", TUNNEL_MTU, 0.0, 28, from_router)
    # the LSP ping's path has room for 1500 bytes minus two MPLS labels
    lsr_a, lsr_b = Ether(src="02:00:5e:10:00:09", dst="02:00:5e:10:00:0a"), Ether(src="02:00:5e:10:00:0a",
                                                                                  dst="02:00:5e:10:00:09")
    lsp = MPLS(label=16001, s=1, ttl=255) / IP(src="192.0.2.9", dst="127.0.0.1", flags="DF", ttl=1,
                                               options=[IPOption_Router_Alert()]) / UDP(sport=3503, dport=3503)
    packets += _probes(lsr_a, lsp, [1500, 1500, 1500, 1400, 1450, 1500], "192.0.2.10", 1492, 10.0, 32, lsr_b)
    nping = IP(src="203.0.113.81", dst="198.51.100.24", flags="DF") / UDP(sport=53001, dport=40125)
    packets += _probes(to_router, nping, [1500] * 5, "192.0.2.254", TUNNEL_MTU, 20.0, 28, from_router)
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-miss: fixed-size Don't-Fragment probes (ping -M do -s 1472, MPLS LSP ping to 127.0.0.1, "
                    "a UDP probe tool), each answered by frag-needed",
            "must_yield": [{"rule": "pmtud-blackhole", "severity_at_least": "info"}],
            "must_not_yield": [{"rule": "*", "severity_above": "info"}]}


def tso_host_capture(out_dir: Path) -> dict:
    """Near-miss: captured on the sending host with TSO, so segments of 10 x MSS appear; no ICMP, no drop."""
    path = out_dir / "tso-host-capture.pcapng"
    rng = random.Random(3005)
    eth = Ether(src=ROUTER_MAC, dst=SERVER_MAC)
    eth_r = Ether(src=SERVER_MAC, dst=ROUTER_MAC)
    ip, ip_r = IP(src="198.51.100.40", dst="203.0.113.80"), IP(src="203.0.113.80", dst="198.51.100.40", flags="DF")
    cseq, sseq = rng.randrange(1 << 31), rng.randrange(1 << 31)
    packets = [(0.0, eth / ip / TCP(sport=53000, dport=443, flags="S", seq=cseq, options=[("MSS", 1460)])),
               (0.010, eth_r / ip_r / TCP(sport=443, dport=53000, flags="SA", seq=sseq, ack=cseq + 1,
                                          options=[("MSS", 1460)])),
               (0.020, eth / ip / TCP(sport=53000, dport=443, flags="A", seq=cseq + 1, ack=sseq + 1))]
    cseq, sseq = cseq + 1, sseq + 1
    now = 0.021
    for k in range(12):
        # the stack hands the NIC 2..10 MSS at once; the NIC cuts them after the capture point
        payload = 1460 * (2 + (k * 7) % 9)
        packets.append((now, eth_r / ip_r / TCP(sport=443, dport=53000, flags="A", seq=sseq, ack=cseq) /
                        Raw(bytes(rng.randrange(256) for _ in range(payload)))))
        sseq += payload
        packets.append((now + 0.010, eth / ip / TCP(sport=53000, dport=443, flags="A", seq=cseq, ack=sseq)))
        now += 0.012
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "TSO host-side capture: TCP super-segments of 2-10 x MSS (up to 14,640 bytes), no ICMP",
            "must_yield": [{"rule": "mss-violation", "severity_at_least": "info"}],
            "must_not_yield": [{"rule": "*", "severity_above": "info"}]}


CAPTURES = [pmtud_blackhole_ipv4, pmtud_blackhole_ipv6_vlan, pmtud_blackhole_busy, pmtud_diagnostic_probes, pmtud_works,
            tso_host_capture]

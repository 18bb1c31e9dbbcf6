"""Benign captures: ordinary traffic on which no detector may raise anything."""
from __future__ import annotations

import random
from pathlib import Path

from common import tcp_session, write_capture
from scapy.all import ARP, DNS, DNSQR, ICMP, IP, UDP, Dot1Q, Ether, ICMPv6EchoReply, ICMPv6EchoRequest, IPv6, Raw


def benign_office(out_dir: Path) -> dict:
    """A quiet office link: web, DNS, ping, ARP, some IPv6 and a tagged VLAN."""
    path = out_dir / "benign-office.pcapng"
    rng = random.Random(2026)
    client_mac, router_mac = "02:00:5e:00:00:11", "02:00:5e:00:00:01"
    eth, eth_r = Ether(src=client_mac, dst=router_mac), Ether(src=router_mac, dst=client_mac)
    packets = []
    packets.append((0.0, Ether(src=client_mac, dst="ff:ff:ff:ff:ff:ff") /
                    ARP(op=1, hwsrc=client_mac, psrc="192.168.10.20", pdst="192.168.10.1")))
    packets.append((0.001, Ether(src=router_mac, dst=client_mac) /
                    ARP(op=2, hwsrc=router_mac, psrc="192.168.10.1", hwdst=client_mac, pdst="192.168.10.20")))
    for i in range(6):
        t = 0.1 + i * 0.7
        server = f"198.51.100.{10 + i}"
        qid = rng.randrange(65536)
        packets.append((t, eth / IP(src="192.168.10.20", dst="192.168.10.1") /
                        UDP(sport=50000 + i, dport=53) / DNS(id=qid, rd=1, qd=DNSQR(qname=f"site{i}.example"))))
        packets.append((t + 0.004, eth_r / IP(src="192.168.10.1", dst="192.168.10.20") /
                        UDP(sport=53, dport=50000 + i) / DNS(id=qid, qr=1, qd=DNSQR(qname=f"site{i}.example"))))
        page = b"HTTP/1.1 200 OK\r\nContent-Length: 600\r\n\r\n" + bytes(rng.randrange(32, 127) for _ in range(600))
        packets += tcp_session(eth, eth_r, IP(src="192.168.10.20", dst=server), IP(src=server, dst="192.168.10.20"),
                                40000 + i, 80, t + 0.01,
                                [(b"GET / HTTP/1.1\r\nHost: site%d.example\r\n\r\n" % i, page)], rng)
    for seq in range(4):
        t = 5.0 + seq
        packets.append((t, eth / IP(src="192.168.10.20", dst="192.0.2.1") / ICMP(type=8, id=1, seq=seq)))
        packets.append((t + 0.012, eth_r / IP(src="192.0.2.1", dst="192.168.10.20") / ICMP(type=0, id=1, seq=seq)))
        packets.append((t + 0.1, eth / IPv6(src="2001:db8:10::20", dst="2001:db8:99::1") /
                        ICMPv6EchoRequest(id=2, seq=seq)))
        packets.append((t + 0.115, eth_r / IPv6(src="2001:db8:99::1", dst="2001:db8:10::20") /
                        ICMPv6EchoReply(id=2, seq=seq)))
    voice = Ether(src="02:00:5e:00:00:21", dst=router_mac) / Dot1Q(vlan=20)
    for k in range(20):
        packets.append((6.0 + k * 0.02, voice / IP(src="192.168.20.5", dst="203.0.113.7", ttl=63) /
                        UDP(sport=16384, dport=16384) / Raw(bytes(160))))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count, "flows": 6 * 2 + 2 + 1,
            "must_yield": [], "must_not_yield": [{"rule": "*", "severity_above": "info"}],
            "what": "benign office traffic: DNS, HTTP, ping (v4 and v6), ARP, VLAN-tagged RTP"}


CAPTURES = [benign_office]

"""Regenerate the bundled captures deterministically with scapy.

Run `python captures/generate.py` from the repository root; every file it
writes is byte-for-byte the same on every run (fixed times, addresses, seeds).
Each capture's expectations are listed in captures/MANIFEST.json.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from scapy.all import (ARP, DNS, DNSQR, ICMP, IP, TCP, UDP, Dot1Q, Ether, ICMPv6EchoReply,
                       ICMPv6EchoRequest, IPv6, Raw, wrpcap)
from scapy.utils import PcapNgWriter

HERE = Path(__file__).resolve().parent
T0 = 1_767_225_600  # 2026-01-01T00:00:00Z


def _tcp_session(eth, eth_r, ip, ip_r, sport, dport, t, payloads, rng):
    """A full TCP connection: handshake, request/response segments, FIN close."""
    out = []
    cseq, sseq = rng.randrange(1 << 31), rng.randrange(1 << 31)
    out.append((t, eth / ip / TCP(sport=sport, dport=dport, flags="S", seq=cseq,
                                  options=[("MSS", 1460), ("SAckOK", b""), ("WScale", 7)])))
    out.append((t + 0.020, eth_r / ip_r / TCP(sport=dport, dport=sport, flags="SA", seq=sseq, ack=cseq + 1,
                                              options=[("MSS", 1400), ("SAckOK", b""), ("WScale", 7)])))
    cseq += 1
    sseq += 1
    out.append((t + 0.021, eth / ip / TCP(sport=sport, dport=dport, flags="A", seq=cseq, ack=sseq)))
    now = t + 0.03
    for request, response in payloads:
        out.append((now, eth / ip / TCP(sport=sport, dport=dport, flags="PA", seq=cseq, ack=sseq) / Raw(request)))
        cseq += len(request)
        now += 0.02
        out.append((now, eth_r / ip_r / TCP(sport=dport, dport=sport, flags="PA", seq=sseq, ack=cseq) / Raw(response)))
        sseq += len(response)
        now += 0.001
        out.append((now, eth / ip / TCP(sport=sport, dport=dport, flags="A", seq=cseq, ack=sseq)))
        now += 0.05
    out.append((now, eth / ip / TCP(sport=sport, dport=dport, flags="FA", seq=cseq, ack=sseq)))
    out.append((now + 0.02, eth_r / ip_r / TCP(sport=dport, dport=sport, flags="FA", seq=sseq, ack=cseq + 1)))
    out.append((now + 0.021, eth / ip / TCP(sport=sport, dport=dport, flags="A", seq=cseq + 1, ack=sseq + 1)))
    return out


def benign_office(path: Path) -> dict:
    """A quiet office link: web, DNS, ping, ARP, some IPv6 and a tagged VLAN."""
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
        packets += _tcp_session(eth, eth_r, IP(src="192.168.10.20", dst=server), IP(src=server, dst="192.168.10.20"),
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
    packets.sort(key=lambda item: item[0])
    frames = []
    for t, pkt in packets:
        pkt.time = T0 + round(t, 6)
        frames.append(pkt)
    writer = PcapNgWriter(str(path))
    for pkt in frames:
        writer.write(pkt)
    writer.close()
    return {"file": path.name, "packets": len(frames), "flows": 6 * 2 + 2 + 1,
            "must_yield": [], "must_not_yield": ["*"],
            "what": "benign office traffic: DNS, HTTP, ping (v4 and v6), ARP, VLAN-tagged RTP"}


def main() -> None:
    manifest = [benign_office(HERE / "benign-office.pcapng")]
    (HERE / "MANIFEST.json").write_text(json.dumps({"captures": manifest}, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""Loop captures (incident 1 and routing loops) and their near-misses.

The echo loop: an Internet scanner sends a UDP datagram to port 520 of a
core router; the router sends the very same frame back, and the transparent
NAT beside it bridges it back to the router unchanged, forever. The capture
point is the core-NAT link, so every copy shows up, byte for byte the same.
A routing loop: two routers each route a prefix to the other; each packet
toward it crosses their link until its TTL runs out. Near-misses: mirror
duplicates, byte-identical retransmissions, an elephant flow, periodic
identical frames, legitimate RIP between routers, a scanner that triggers
nothing, traceroute and a mirror that sees one packet on several hops, and
flood tools that blast one crafted frame as fast as a loop would repeat it.
"""
from __future__ import annotations

import hashlib
import hmac
import random
import struct
from pathlib import Path

from common import tcp_session, write_capture
from scapy.all import DNS, DNSQR, ICMP, IP, TCP, UDP, Dot1Q, Ether, ICMPv6EchoRequest, IPv6, Raw
from scapy.contrib.ripng import RIPng, RIPngEntry
from scapy.layers.rip import RIP, RIPAuth, RIPEntry
from scapy.layers.vrrp import VRRP

CORE_MAC, NAT_MAC = "00:1b:54:c2:00:01", "00:1b:54:c2:00:02"   # the looping pair
R1_MAC, R2_MAC = "02:00:5e:20:00:01", "02:00:5e:20:00:02"     # two routers in a routing loop
HOST_MAC, GW_MAC = "02:00:5e:00:00:31", "02:00:5e:00:00:01"
SCANNER_V4, SCANNER_V6 = "198.18.44.201", "2001:db8:5ca::201"
CORE_V4, CORE_V6 = "192.0.2.61", "2001:db8:c0::61"
TRIGGER_TTL, TRIGGER_ID = 242, 54321        # the incident's figures
LOOP_RULES = ["echo-loop", "rip-trigger", "routing-loop"]


def _quiet(rules, above="info") -> list[dict]:
    return [{"rule": rule, "severity_above": above} for rule in rules]


def _benign(t0: float, seconds: float, rng: random.Random, rate_pps: float = 200.0):
    """Background: DNS lookups and short web sessions from a few hosts, about `rate_pps` packets/s."""
    out = []
    eth, eth_r = Ether(src=HOST_MAC, dst=GW_MAC), Ether(src=GW_MAC, dst=HOST_MAC)
    t = t0
    k = 0
    while t < t0 + seconds:
        host, server = f"192.168.40.{10 + k % 20}", f"198.51.100.{1 + k % 50}"
        qid = rng.randrange(65536)
        name = f"host{k}.example"
        out.append((t, eth / IP(src=host, dst="192.168.40.1", id=rng.randrange(65536)) /
                    UDP(sport=30000 + k % 30000, dport=53) / DNS(id=qid, rd=1, qd=DNSQR(qname=name))))
        out.append((t + 0.003, eth_r / IP(src="192.168.40.1", dst=host, id=rng.randrange(65536)) /
                    UDP(sport=53, dport=30000 + k % 30000) / DNS(id=qid, qr=1, qd=DNSQR(qname=name))))
        session = tcp_session(eth, eth_r, IP(src=host, dst=server, id=rng.randrange(65536)),
                              IP(src=server, dst=host, id=rng.randrange(65536)), 40000 + k % 20000, 443,
                              t + 0.005, [(b"x" * 80, b"y" * 300), (b"x" * 60, b"y" * 200)], rng)
        # scapy keeps one IP id per template; give every segment its own, as a host does
        for _, pkt in session:
            pkt[IP].id = rng.randrange(65536)
        out += session
        k += 1
        t += 16 / rate_pps      # a lookup and a session are 16 packets
    return out


def _loop_copies(frame, t0: float, copies: int, rate_pps: float):
    """The same frame `copies` times, at `rate_pps`, starting at `t0` (the trigger itself is copy 0)."""
    return [(t0 + i / rate_pps, frame.copy()) for i in range(copies)]


def echo_loop_ipv4(out_dir: Path) -> dict:
    """The incident: 24 zero bytes to UDP 520, echoed between core and NAT, dominating the link."""
    path = out_dir / "echo-loop-rip-ipv4.pcapng"
    rng = random.Random(520)
    trigger = (Ether(src=NAT_MAC, dst=CORE_MAC) /
               IP(src=SCANNER_V4, dst=CORE_V4, ttl=TRIGGER_TTL, id=TRIGGER_ID) /
               UDP(sport=44123, dport=520) / Raw(bytes(24)))
    packets = _benign(0.0, 3.0, rng) + _loop_copies(trigger, 1.5, 6000, 25000.0)
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "echo loop of a zero-filled UDP/520 probe from the Internet, IPv4, 25,000 copies/s",
            "must_yield": [{"rule": "echo-loop", "severity_at_least": "high"},
                           {"rule": "rip-trigger", "severity_at_least": "high"}],
            "incidents": [{"root_cause": "rip-trigger", "findings": ["rip-trigger", "echo-loop"]}],
            "must_not_yield": _quiet(["routing-loop"])}


def echo_loop_ipv6_vlan(out_dir: Path) -> dict:
    """IPv6 UDP to port 520 (no RIP speaks there) on VLAN 100: it triggered the loop too."""
    path = out_dir / "echo-loop-rip-ipv6-vlan.pcap"
    trigger = (Ether(src=NAT_MAC, dst=CORE_MAC) / Dot1Q(vlan=100) /
               IPv6(src=SCANNER_V6, dst=CORE_V6, hlim=TRIGGER_TTL) /
               UDP(sport=51234, dport=520) / Raw(bytes(24)))
    packets = _loop_copies(trigger, 0.25, 4000, 20000.0)
    eth = Ether(src=HOST_MAC, dst=GW_MAC) / Dot1Q(vlan=100)
    for i in range(40):   # a little other traffic on the VLAN
        packets.append((i * 0.02, eth / IPv6(src="2001:db8:40::10", dst="2001:db8:99::1") /
                        UDP(sport=40000 + i, dport=53) / Raw(b"\x12\x34" + bytes(10))))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "echo loop of a zero-filled IPv6 UDP/520 probe, VLAN 100, 20,000 copies/s",
            "must_yield": [{"rule": "echo-loop", "severity_at_least": "high"},
                           {"rule": "rip-trigger", "severity_at_least": "high"}],
            "incidents": [{"root_cause": "rip-trigger", "findings": ["rip-trigger", "echo-loop"]}],
            "must_not_yield": _quiet(["routing-loop"])}


def echo_loop_buried(out_dir: Path) -> dict:
    """A slower loop of a RIPng-port probe buried in busy benign traffic."""
    path = out_dir / "echo-loop-buried.pcapng"
    rng = random.Random(521)
    trigger = (Ether(src=NAT_MAC, dst=CORE_MAC) /
               IPv6(src=SCANNER_V6, dst=CORE_V6, hlim=TRIGGER_TTL) /
               UDP(sport=40521, dport=521) / Raw(bytes(24)))
    packets = _benign(0.0, 4.0, rng, rate_pps=2000.0) + _loop_copies(trigger, 1.0, 1500, 1000.0)
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "echo loop at 1,000 copies/s of an IPv6 UDP/521 probe among 2,000 packets/s of web and DNS",
            "must_yield": [{"rule": "echo-loop", "severity_at_least": "medium"},
                           {"rule": "rip-trigger", "severity_at_least": "high"}],
            "incidents": [{"root_cause": "rip-trigger", "findings": ["rip-trigger", "echo-loop"]}],
            "must_not_yield": _quiet(["routing-loop"])}


def identical_frame_floods(out_dir: Path) -> dict:
    """Near-miss: three floods of one crafted frame each, at loop rates, that lack the loop evidence.

    An IPv6 echo request to all nodes (multicast destination MAC and
    address); zero-filled UDP to port 520 from the invalid source ff02::1 (an
    attack tool's spoofed address, to a unicast MAC); and a crafted TCP SYN
    repeated at 16,000/s while its target answers every copy with a reset of
    its own. Rates stay below rss-saturation's, so only echo-loop and
    rip-trigger have something to say.
    """
    path = out_dir / "identical-frame-floods.pcapng"
    rng = random.Random(16)
    target_mac, target_v4, target_v6 = "02:00:5e:70:00:10", "192.0.2.80", "2001:db8:70::10"
    tool_mac = "02:00:5e:70:00:66"
    packets = _benign(0.0, 2.0, rng)
    smurf = (Ether(src=tool_mac, dst="33:33:00:00:00:01") / IPv6(src="2001:db8:70::66", dst="ff02::1", hlim=255) /
             ICMPv6EchoRequest(id=0x6666, seq=1, data=bytes(56)))
    packets += _loop_copies(smurf, 0.2, 3000, 60000.0)
    spoofed = (Ether(src=tool_mac, dst=target_mac) / IPv6(src="ff02::1", dst=target_v6, hlim=64) /
               UDP(sport=521, dport=520) / Raw(bytes(24)))
    packets += _loop_copies(spoofed, 0.6, 3000, 120000.0)
    syn = (Ether(src=tool_mac, dst=target_mac) / IP(src="198.51.100.99", dst=target_v4, ttl=64, id=31337) /
           TCP(sport=6666, dport=80, flags="S", seq=123456789))
    rate = 16000.0
    for i, (t, copy) in enumerate(_loop_copies(syn, 1.0, 4000, rate)):
        packets.append((t, copy))
        reset = (Ether(src=target_mac, dst=tool_mac) / IP(src=target_v4, dst="198.51.100.99", ttl=64, id=i) /
                 TCP(sport=80, dport=6666, flags="RA", seq=0, ack=123456790))
        packets.append((t + 0.00002, reset))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-miss: floods of one crafted frame at 16,000-120,000/s (multicast destination, "
                    "source ff02::1, a target that answers): identical-frame floods, not loops",
            "must_yield": [{"rule": "echo-loop", "severity_at_least": "low"}],
            "must_not_yield": [{"rule": "echo-loop", "severity_above": "low"},
                               {"rule": "rip-trigger", "severity_above": "medium"},
                               {"rule": "routing-loop", "severity_above": "info"},
                               {"rule": "rss-saturation", "severity_above": "info"}]}


def repeats_not_loops(out_dir: Path) -> dict:
    """Mirror duplicates, byte-identical retransmissions, an elephant flow, periodic identical frames."""
    path = out_dir / "repeats-not-loops.pcapng"
    rng = random.Random(2)
    packets = []
    # a SPAN port copying rx and tx: every frame twice, 5 microseconds apart
    for t, pkt in _benign(0.0, 2.0, rng, rate_pps=1000.0):
        packets += [(t, pkt), (t + 0.000005, pkt.copy())]
    # one data segment retransmitted byte for byte six times (exponential backoff)
    eth = Ether(src=HOST_MAC, dst=GW_MAC)
    segment = eth / IP(src="192.168.40.50", dst="198.51.100.80", id=4242) / \
        TCP(sport=45000, dport=443, flags="PA", seq=1000, ack=2000) / Raw(b"z" * 500)
    packets += [(2.0 + 0.2 * (2 ** k - 1), segment.copy()) for k in range(6)]
    # an elephant flow: 4,000 back-to-back segments of one connection, each one different
    for i in range(4000):
        packets.append((3.0 + i * 0.0001, eth / IP(src="192.168.40.60", dst="198.51.100.90", id=i) /
                        TCP(sport=46000, dport=443, flags="A", seq=10 + i * 1400, ack=1) / Raw(bytes(64))))
    # a keepalive frame that never changes, twice a second for a minute: a lone VRRP master's advertisement
    # (VRRPv2, VRID 40, one virtual address, interval 1 s; sent from the virtual MAC as RFC 3768 7.3 says)
    keepalive = Ether(src="00:00:5e:00:01:28", dst="01:00:5e:00:00:12") / IP(
        src="192.168.40.1", dst="224.0.0.18", ttl=255, id=0) / VRRP(vrid=40, priority=100, adv=1,
                                                                     addrlist=["192.168.40.254"])
    packets += [(i * 0.5, keepalive.copy()) for i in range(120)]
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-misses: mirror duplicates, identical retransmissions, an elephant flow, keepalives",
            "must_yield": [], "must_not_yield": _quiet(LOOP_RULES)}


def rip_between_routers(out_dir: Path) -> dict:
    """Legitimate RIP: v2 multicast updates (one with authentication), v1 broadcast, RIPng, a table request."""
    path = out_dir / "rip-routers.pcapng"
    packets = []
    routers = [("02:00:5e:30:00:01", "10.20.0.1", "fe80::1"), ("02:00:5e:30:00:02", "10.20.0.2", "fe80::2")]
    for update in range(4):
        for r, (mac, v4, v6) in enumerate(routers):
            t = update * 30.0 + r * 0.4
            entries = RIPEntry(addr=f"10.{30 + r}.0.0", mask="255.255.0.0", metric=1) / \
                RIPEntry(addr=f"10.{40 + r}.0.0", mask="255.255.0.0", nextHop="0.0.0.0", metric=2)
            packets.append((t, Ether(src=mac, dst="01:00:5e:00:00:09") / IP(src=v4, dst="224.0.0.9", ttl=1) /
                            UDP(sport=520, dport=520) / RIP(cmd=2, version=2) / entries))
            packets.append((t + 0.1, Ether(src=mac, dst="33:33:00:00:00:09") / IPv6(src=v6, dst="ff02::9", hlim=255) /
                            UDP(sport=521, dport=521) / RIPng(cmd=2) /
                            RIPngEntry(prefix_or_nh=f"2001:db8:{30 + r}::", prefixlen=48, metric=1)))
        mac, v4, _ = routers[0]
        packets.append((update * 30.0 + 5, Ether(src=mac, dst="01:00:5e:00:00:09") /
                        IP(src=v4, dst="224.0.0.9", ttl=1) / UDP(sport=520, dport=520) / RIP(cmd=2, version=2) /
                        RIPAuth(authtype=2, password=b"campus-rip") /
                        RIPEntry(addr="10.50.0.0", mask="255.255.0.0", metric=3)))
        packets.append((update * 30.0 + 6, Ether(src="02:00:5e:30:00:03", dst="ff:ff:ff:ff:ff:ff") /
                        IP(src="10.20.0.3", dst="10.20.255.255", ttl=1) / UDP(sport=520, dport=520) /
                        RIP(cmd=2, version=1) / RIPEntry(addr="10.60.0.0", mask="0.0.0.0", metric=4)))
    # a router that just booted asks for the whole table (RFC 2453 sec. 3.9.1)
    packets.append((0.05, Ether(src="02:00:5e:30:00:02", dst="01:00:5e:00:00:09") /
                    IP(src="10.20.0.2", dst="224.0.0.9", ttl=1) / UDP(sport=520, dport=520) /
                    RIP(cmd=1, version=2) / RIPEntry(AF=0, addr="0.0.0.0", mask="0.0.0.0", metric=16)))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "legitimate RIPv2 (multicast, with authentication), RIPv1 broadcast, RIPng on ff02::9",
            "must_yield": [{"rule": "rip-trigger", "severity_at_least": "info"}],
            "must_not_yield": _quiet(LOOP_RULES)}


def _rip_entry(afi: int, addr: str, mask: str, metric: int) -> bytes:
    return struct.pack("!HH4s4s4sI", afi, 0, bytes(map(int, addr.split("."))), bytes(map(int, mask.split("."))),
                       bytes(4), metric)


def _rip_crypto(command: int, routes: bytes, digest: str, key: bytes, key_id: int, seq: int) -> bytes:
    """A RIPv2 message with cryptographic authentication: keyed MD5 (RFC 2082) or HMAC-SHA (RFC 4822).

    The authentication entry says where the trailer starts; the trailer is
    0xFFFF, type 1 and the digest over the message (RFC 4822 sec. 2.1 computes
    HMAC over it with the digest field preset; keyed MD5 appends the key).
    """
    size = hashlib.new(digest).digest_size
    header = struct.pack("!BBH", command, 2, 0)
    body_len = len(header) + 20 + len(routes)
    auth = struct.pack("!HHHBBI8x", 0xFFFF, 3, body_len, key_id, size, seq)
    message = header + auth + routes + struct.pack("!HH", 0xFFFF, 1)
    if digest == "md5":
        mac = hashlib.md5(message + key.ljust(16, b"\0")).digest()
    else:
        mac = hmac.new(key, message + bytes(size), digest).digest()
    return message + mac


def rip_authenticated(out_dir: Path) -> dict:
    """Near-miss: routers speaking RIPv2 with keyed MD5 and HMAC-SHA authentication, and asking for tables."""
    path = out_dir / "rip-authenticated.pcapng"
    packets = []
    routers = [("02:00:5e:31:00:01", "10.21.0.1", "md5"), ("02:00:5e:31:00:02", "10.21.0.2", "sha1"),
               ("02:00:5e:31:00:03", "10.21.0.3", "sha256"), ("02:00:5e:31:00:04", "10.21.0.4", "sha384"),
               ("02:00:5e:31:00:05", "10.21.0.5", "sha512")]
    whole_table = _rip_entry(0, "0.0.0.0", "0.0.0.0", 16)
    password = struct.pack("!HH16s", 0xFFFF, 2, b"campus-rip")
    for r, (mac, address, digest) in enumerate(routers):
        eth, net = Ether(src=mac, dst="01:00:5e:00:00:09"), IP(src=address, dst="224.0.0.9", ttl=1)
        # after booting, each router asks its neighbours for their whole tables (RFC 2453 sec. 3.9.1)
        request = _rip_crypto(1, whole_table, digest, b"k3y-%d" % r, 1, 1000)
        packets.append((r * 0.5, eth / net / UDP(sport=520, dport=520) / Raw(request)))
        for update in range(3):
            routes = b"".join(_rip_entry(2, f"10.{60 + r}.{k}.0", "255.255.255.0", 1 + k) for k in range(r + 1))
            message = _rip_crypto(2, routes, digest, b"k3y-%d" % r, 1, 1001 + update)
            packets.append((1 + update * 30.0 + r * 0.2, eth / net / UDP(sport=520, dport=520) / Raw(message)))
    # a router with a plain password asking for the table: the authentication entry plus the one request
    packets.append((3.0, Ether(src="02:00:5e:31:00:06", dst="01:00:5e:00:00:09") /
                    IP(src="10.21.0.6", dst="224.0.0.9", ttl=1) / UDP(sport=520, dport=520) /
                    Raw(struct.pack("!BBH", 1, 2, 0) + password + whole_table)))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-miss: RIPv2 routers with keyed MD5 and HMAC-SHA1/256/384/512 authentication, "
                    "whole-table requests with authentication",
            "must_yield": [{"rule": "rip-trigger", "severity_at_least": "info"}],
            "must_not_yield": _quiet(LOOP_RULES)}


def rip_scan(out_dir: Path) -> dict:
    """An Internet scanner probing UDP 520 of twenty addresses; nothing echoes."""
    path = out_dir / "rip-scan.pcap"
    packets = []
    for i in range(20):
        packets.append((i * 0.05, Ether(src=GW_MAC, dst=f"02:00:5e:50:00:{i:02x}") /
                        IP(src="198.51.100.77", dst=f"203.0.113.{i + 1}", ttl=TRIGGER_TTL, id=TRIGGER_ID) /
                        UDP(sport=44123, dport=520) / Raw(bytes(24))))
    packets.append((1.5, Ether(src=GW_MAC, dst="02:00:5e:50:00:99") /
                    IPv6(src="2001:db8:77::77", dst="2001:db8:c0::1") / UDP(sport=44123, dport=521) /
                    RIPng(cmd=1) / RIPngEntry(prefix_or_nh="::", prefixlen=0, metric=16)))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "UDP/520 scan of 20 hosts with zero-filled payloads and a RIPng request from outside",
            "must_yield": [{"rule": "rip-trigger", "severity_at_least": "medium"}],
            "must_not_yield": [*_quiet(["echo-loop", "routing-loop"]),
                               {"rule": "rip-trigger", "severity_above": "medium"}]}


def _looping(packet, t0: float, vlan: int | None = None, hop_s: float = 0.0004):
    """Every sighting of `packet` on the R1-R2 link until its TTL expires, MACs alternating."""
    out = []
    net = packet[IP] if IP in packet else packet[IPv6]
    ttl = net.ttl if IP in packet else net.hlim
    hop = 0
    while ttl - hop >= 1:
        src, dst = (R1_MAC, R2_MAC) if hop % 2 == 0 else (R2_MAC, R1_MAC)
        eth = Ether(src=src, dst=dst) / Dot1Q(vlan=vlan) if vlan else Ether(src=src, dst=dst)
        copy = net.copy()
        if IP in packet:
            copy.ttl = ttl - hop
            copy.chksum = None
        else:
            copy.hlim = ttl - hop
        out.append((t0 + hop * hop_s, eth / copy))
        hop += 1
    return out


def routing_loop_ipv4(out_dir: Path) -> dict:
    """Traffic to 203.0.113.0/24 bouncing between two routers, among ordinary traffic."""
    path = out_dir / "routing-loop-ipv4.pcapng"
    rng = random.Random(24)
    packets = _benign(0.0, 3.0, rng)
    for k in range(30):
        src = f"192.168.40.{10 + k % 5}"
        if k % 3 == 0:
            pkt = IP(src=src, dst=f"203.0.113.{k % 7 + 1}", id=2000 + k, ttl=64) / ICMP(id=9, seq=k)
        elif k % 3 == 1:
            pkt = IP(src=src, dst=f"203.0.113.{k % 7 + 1}", id=2000 + k, ttl=64) / UDP(sport=5000 + k, dport=53) / \
                DNS(id=k, rd=1, qd=DNSQR(qname="lost.example"))
        else:
            pkt = IP(src=src, dst=f"203.0.113.{k % 7 + 1}", id=2000 + k, ttl=128) / \
                TCP(sport=42000 + k, dport=443, flags="S", seq=rng.randrange(1 << 31))
        packets += _looping(pkt, 0.5 + k * 0.07)
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "IPv4 routing loop for 203.0.113.0/24 between two routers: 30 packets until TTL expiry",
            "must_yield": [{"rule": "routing-loop", "severity_at_least": "medium"}],
            "must_not_yield": _quiet(["echo-loop", "rip-trigger"])}


def routing_loop_ipv6_vlan(out_dir: Path) -> dict:
    """An IPv6 routing loop on VLAN 30: 120 packets to 2001:db8:dead::/64 bounce until the hop limit expires."""
    path = out_dir / "routing-loop-ipv6-vlan.pcap"
    packets = []
    for k in range(120):
        pkt = IPv6(src=f"2001:db8:40::{k % 9 + 1:x}", dst=f"2001:db8:dead::{k % 4 + 1:x}", hlim=64) / \
            UDP(sport=50000 + k, dport=443) / Raw(b"quic" + bytes([k]) * 8)
        packets += _looping(pkt, k * 0.01, vlan=30, hop_s=0.0002)
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "IPv6 routing loop on VLAN 30: 120 packets, hop limit 64 to 1, two routers",
            "must_yield": [{"rule": "routing-loop", "severity_at_least": "high"}],
            "must_not_yield": _quiet(["echo-loop", "rip-trigger"])}


def traceroute_and_paths(out_dir: Path) -> dict:
    """Traceroute (TTL rising) and a mirror of three routers' ports (one packet seen per hop, falling)."""
    path = out_dir / "traceroute-paths.pcapng"
    packets = []
    eth = Ether(src=HOST_MAC, dst=GW_MAC)
    for hop in range(1, 16):   # paris-traceroute keeps the flow identity and IP ID constant per probe set
        for probe in range(3):
            packets.append((hop * 0.3 + probe * 0.05, eth / IP(src="192.168.40.5", dst="198.51.100.200", ttl=hop,
                                                               id=7000 + probe) /
                            UDP(sport=33434, dport=33434) / Raw(b"paris")))
    macs = [GW_MAC, "02:00:5e:60:00:02", "02:00:5e:60:00:03", "02:00:5e:60:00:04"]
    for k in range(200):       # each packet seen on three hops of a path, TTL one lower each time
        pkt = IP(src="192.168.40.6", dst=f"198.51.100.{k % 50 + 1}", id=k, ttl=64) / \
            TCP(sport=43000, dport=443, flags="A", seq=k * 100, ack=1)
        for hop in range(3):
            copy = pkt.copy()
            copy.ttl = 64 - hop
            packets.append((6.0 + k * 0.005 + hop * 0.0003, Ether(src=macs[hop], dst=macs[hop + 1]) / copy))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-misses: paris-traceroute probes and a packet mirrored on three hops of one path",
            "must_yield": [], "must_not_yield": _quiet(LOOP_RULES)}


CAPTURES = [echo_loop_ipv4, echo_loop_ipv6_vlan, echo_loop_buried, identical_frame_floods, repeats_not_loops,
            rip_authenticated, rip_between_routers, rip_scan, routing_loop_ipv4, routing_loop_ipv6_vlan,
            traceroute_and_paths]

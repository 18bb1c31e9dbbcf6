"""Calibration captures of issue 27 for scan, session-storm and brute-force: what was wrong, what was missed, and
the near-misses beside each.

- Traceroute is no scan: a Linux UDP traceroute (ports from 33434, TTL rising, time-exceeded from the routers,
  port-unreachable from the target), a management station tracing a dozen hosts in a row, remote path monitors
  tracing our hosts with ICMP echo (Windows tracert) and TCP SYNs (tcptraceroute); and beside them a real UDP
  port scan (nmap -sU: constant TTLs of 37 to 59 as nmap draws them, port-unreachables from the target)
  followed by nmap's own traceroute, which must not hide it.
- A peer-to-peer client's one second just over the session-storm rate (BitTorrent/DHT: 275 new flows in one
  second, a fifth answered) is low; a storm held for seconds is medium.
- nmap host discovery on a LAN (500 ARP requests for 245 consecutive addresses in 2 s) is an ARP sweep; a
  router resolving a few dozen hosts, a DHCP server's conflict probes from 0.0.0.0, gratuitous ARPs after a
  power cut and a rebooted router resolving its answered hosts are ordinary ARP.
- A password brute force (704 FTP logins refused in 44 s, 16 at a time) is found from the flow table; a page
  load of many short HTTP connections, a poller connecting every second and an SMTP relay delivering mail are
  not.

Addresses: 10.40/16 and 10.41-10.42/16 are the site, 198.51.100/24, 203.0.113/24 and 192.0.2/24 the Internet
(RFC 5737), 198.18/15 remote peers (RFC 2544); every time, port and sequence number comes from a fixed seed.
"""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
from build_scan import SYN, SYN_ACK, TCP_PROTO, UDP_PROTO, Capture, frames, ip, remote_hosts, sessions
from common import tcp_session, write_capture
from scapy.all import ARP, ICMP, IP, TCP, UDP, Ether, Raw

TRACER_MAC, GATEWAY_MAC = "02:00:5e:40:00:15", "02:00:5e:40:00:01"
EDGE_MAC, CORE_MAC = "02:00:5e:40:00:fe", "02:00:5e:40:00:fd"
BROADCAST = "ff:ff:ff:ff:ff:ff"
FTP_CLIENT_MAC, FTP_SERVER_MAC = "02:00:5e:00:23:99", "02:00:5e:00:22:21"
TRACE_PORT = 33434           # Linux traceroute's first UDP port (traceroute(8) -p)
MAX_HOPS = 30                # traceroute, tracert, mtr and tcptraceroute give up after 30 hops
PER_HOP = 3                  # traceroute -q, tracert: three probes per hop


def _mac(n: int) -> str:
    return f"02:00:5e:{(n >> 16) & 0xFF:02x}:{(n >> 8) & 0xFF:02x}:{n & 0xFF:02x}"


def _quoted(probe) -> bytes:
    """What an ICMP error quotes of `probe` (RFC 792): its IP header and the first 8 bytes after it."""
    return bytes(probe[IP])[:28]


def _icmp_error(src: str, dst: str, kind: int, code: int, probe, ttl: int, rng: random.Random, eth) -> object:
    return eth / IP(src=src, dst=dst, ttl=ttl, id=rng.randrange(65536)) / ICMP(type=kind, code=code) / \
        Raw(_quoted(probe))


def _trace(rng: random.Random, t: float, tracer: str, target: str, routers: list[str | None], *,
           method: str, reachable: bool = True, per_hop: int = PER_HOP, out_eth=None, back_eth=None,
           first_port: int = TRACE_PORT, tcp_port: int = 443, ttl_offset: int = 0) -> tuple[list, float, int]:
    """One traceroute from `tracer` to `target`, as the capture point sees it: probes per hop with rising TTL,
    time-exceeded from each router of `routers` (None: a silent hop), the target's answer once the TTL reaches
    it (port unreachable for UDP, echo reply for ICMP, SYN-ACK for TCP) when `reachable`, else probes up to
    MAX_HOPS that nobody answers. `ttl_offset` hops lie before the capture point (a remote tracer): those
    probes never reach it. Returns the packets, the time after the last, and the next UDP port."""
    out_eth = out_eth or Ether(src=TRACER_MAC, dst=GATEWAY_MAC)
    back_eth = back_eth or Ether(src=GATEWAY_MAC, dst=TRACER_MAC)
    packets, port = [], first_port
    sport = rng.randrange(33000, 61000)
    ident = rng.randrange(1, 65536)
    seq = 1
    hops = len(routers) + 1                     # the target is the hop after the last router
    last = hops if reachable else MAX_HOPS
    for ttl in range(1, last + 1):
        for _ in range(per_hop):
            seen_ttl = ttl - ttl_offset
            if method == "udp":
                probe = IP(src=tracer, dst=target, ttl=max(seen_ttl, 1), id=rng.randrange(65536)) / \
                    UDP(sport=rng.randrange(33000, 61000), dport=port) / Raw(bytes(range(0x40, 0x60)))
                port += 1
            elif method == "icmp":
                probe = IP(src=tracer, dst=target, ttl=max(seen_ttl, 1), id=rng.randrange(65536)) / \
                    ICMP(type=8, id=ident, seq=seq) / Raw(b"\x00" * 64)
                seq += 1
            else:
                probe = IP(src=tracer, dst=target, ttl=max(seen_ttl, 1), id=rng.randrange(65536)) / \
                    TCP(sport=sport, dport=tcp_port, flags="S", seq=rng.randrange(1 << 32), window=5840)
            if seen_ttl >= 1:
                packets.append((t, out_eth / probe))
            rtt = 0.002 + 0.004 * ttl
            if ttl < hops and ttl <= len(routers) and routers[ttl - 1] is not None and seen_ttl >= 1:
                packets.append((t + rtt, _icmp_error(routers[ttl - 1], tracer, 11, 0, probe, 255 - ttl, rng,
                                                     back_eth)))
            elif ttl >= hops and reachable and seen_ttl >= 1:
                answer = IP(src=target, dst=tracer, ttl=64 - ttl, id=rng.randrange(65536))
                if method == "udp":
                    packets.append((t + rtt, _icmp_error(target, tracer, 3, 3, probe, 64 - ttl, rng, back_eth)))
                elif method == "icmp":
                    packets.append((t + rtt, back_eth / answer / ICMP(type=0, id=ident, seq=seq - 1) /
                                    Raw(b"\x00" * 64)))
                else:
                    packets.append((t + rtt, back_eth / answer / TCP(sport=tcp_port, dport=sport, flags="SA",
                                                                      seq=rng.randrange(1 << 32),
                                                                      ack=probe[TCP].seq + 1, window=29200)))
                    packets.append((t + rtt + 0.0002, out_eth / IP(src=tracer, dst=target, ttl=64) /
                                    TCP(sport=sport, dport=tcp_port, flags="R", seq=probe[TCP].seq + 1)))
            t += 0.001 if ttl < hops or reachable else 0.05
        t += 0.005
    return packets, t, port


def _browsing(rng: random.Random, t: float, client: str, servers: list[str], client_mac=TRACER_MAC) -> list:
    """Ordinary HTTPS sessions of one client, one server after another."""
    out = []
    for k, server in enumerate(servers):
        out += tcp_session(Ether(src=client_mac, dst=GATEWAY_MAC), Ether(src=GATEWAY_MAC, dst=client_mac),
                           IP(src=client, dst=server), IP(src=server, dst=client), 40000 + k, 443, t + 0.7 * k,
                           [(b"\x16\x03\x01" + b"c" * 200, b"\x16\x03\x03" + b"s" * 1200)], rng)
    return out


def _resolver_lookups(rng: random.Random, t: float, client: str, names: int) -> list:
    """The reverse lookups traceroute makes of its hops (without -n)."""
    out = []
    for k in range(names):
        sport = rng.randrange(30000, 60000)
        out.append((t + 0.01 * k, Ether(src=TRACER_MAC, dst=GATEWAY_MAC) / IP(src=client, dst="10.40.0.53") /
                    UDP(sport=sport, dport=53) / Raw(b"\x12\x34\x01\x00" + b"q" * 30)))
        out.append((t + 0.01 * k + 0.002, Ether(src=GATEWAY_MAC, dst=TRACER_MAC) / IP(src="10.40.0.53", dst=client) /
                    UDP(sport=53, dport=sport) / Raw(b"\x12\x34\x81\x80" + b"a" * 60)))
    return out


# ---- traceroute -------------------------------------------------------------------------------------------

def traceroute_udp(out_dir: Path) -> dict:
    """A local host's Linux traceroute (UDP) to a server 10 hops away, hop 6 silent."""
    path = out_dir / "scan-traceroute-udp.pcap"
    rng = random.Random(2701)
    routers = ["10.40.0.1", "100.64.0.1", "192.0.2.9", "192.0.2.33", "203.0.113.129", None, "203.0.113.1",
               "198.51.100.254", "198.51.100.1"]
    packets, t, _ = _trace(rng, 1.0, "10.40.0.15", "198.51.100.77", routers, method="udp")
    packets += _resolver_lookups(rng, t, "10.40.0.15", 9)
    packets += _browsing(rng, 0.0, "10.40.0.15", ["198.18.3.10", "198.18.3.11", "198.18.3.12"])
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "10.40.0.15 runs traceroute to 198.51.100.77 (UDP to 33434-33463, three probes per TTL 1-10, "
                    "time-exceeded from eight routers, hop 6 silent, port unreachable from the target): a path, "
                    "not a vertical scan",
            "must_yield": [],
            "must_not_yield": [{"rule": "scan", "severity_above": "info"},
                               {"rule": "routing-loop", "severity_above": "info"}]}


def traceroute_many(out_dir: Path) -> dict:
    """Path tracing to many hosts in a row: a local management station (UDP), remote monitors (ICMP and TCP)."""
    path = out_dir / "scan-traceroute-many.pcap"
    rng = random.Random(2702)
    packets, t = [], 0.5
    # the management station traces a dozen hosts of the branch offices, two of them down
    for k in range(12):
        hops = 3 + k % 5
        routers = ["10.40.0.1"] + [f"10.41.{k}.{h}" for h in range(1, hops - 1)]
        part, t, _ = _trace(rng, t, "10.40.0.5", f"10.42.{k}.10", routers, method="udp", reachable=k not in (4, 9))
        packets += part
        t += 0.2
    # a remote monitor's tracert (ICMP echo) to 40 hosts behind our edge, 11 hops away: 30 filtered, silent; the
    # capture point inside the edge sees the probes from the TTL that expires at our first router on
    inward, outward = Ether(src=EDGE_MAC, dst=CORE_MAC), Ether(src=CORE_MAC, dst=EDGE_MAC)
    t = 0.5
    for k in range(40):
        routers = [None] * 11 + ["10.40.255.1", "10.40.255.2"]
        part, t, _ = _trace(rng, t, "203.0.113.40", f"10.40.20.{k + 10}", routers, method="icmp",
                            reachable=k % 4 == 0, out_eth=inward, back_eth=outward, ttl_offset=11)
        packets += part
    # a remote monitor's tcptraceroute to port 443 of 30 hosts, 9 hops away: 24 filtered
    t = 0.5
    for k in range(30):
        routers = [None] * 9 + ["10.40.255.1", "10.40.255.3"]
        part, t, _ = _trace(rng, t, "203.0.113.41", f"10.40.30.{k + 10}", routers, method="tcp",
                            reachable=k % 5 == 0, out_eth=inward, back_eth=outward, ttl_offset=9)
        packets += part
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "10.40.0.5 traces 12 branch hosts with UDP traceroute (two down), 203.0.113.40 traces 40 of our "
                    "hosts with ICMP echo (tracert, 30 filtered), 203.0.113.41 traces 30 with TCP SYNs to 443 "
                    "(tcptraceroute, 24 filtered): paths, not sweeps",
            "must_yield": [],
            "must_not_yield": [{"rule": "scan", "severity_above": "info"},
                               {"rule": "routing-loop", "severity_above": "info"}]}


def udp_port_scan(out_dir: Path) -> dict:
    """nmap -sU against a local server: 1,000 ports at TTLs of 37-59, then nmap's traceroute to it."""
    path = out_dir / "scan-udp-ports.pcap"
    rng = random.Random(2703)
    scanner, server = "10.40.0.66", "10.40.3.10"
    out_eth = Ether(src=_mac(0x4066), dst=_mac(0x4310))
    back_eth = Ether(src=_mac(0x4310), dst=_mac(0x4066))
    ports = rng.sample(range(1, 65536), 1000)
    for open_port in (53, 123, 161):
        if open_port not in ports:
            ports[rng.randrange(1000)] = open_port
    sport = rng.randrange(40000, 65000)
    packets, t = [], 1.0
    for k, port in enumerate(ports):
        probe = IP(src=scanner, dst=server, ttl=rng.randrange(37, 60), id=rng.randrange(65536)) / \
            UDP(sport=sport, dport=port)
        packets.append((t, out_eth / probe))
        if port in (53, 123, 161):
            packets.append((t + 0.0004, back_eth / IP(src=server, dst=scanner, ttl=64) /
                            UDP(sport=port, dport=sport) / Raw(b"\x00" * 48)))
        elif k % 5 == 0:     # Linux sends at most one port unreachable a second per peer burst: a fifth here
            packets.append((t + 0.0004, _icmp_error(server, scanner, 3, 3, probe, 64, rng, back_eth)))
        t += 0.004
    # nmap --traceroute: probes to the closed port it found, TTL rising until the target answers
    part, t, _ = _trace(rng, t + 0.5, scanner, server, ["10.40.0.1", "10.40.250.1", "10.40.250.2", "10.40.3.1"],
                        method="udp", per_hop=1,
                        out_eth=out_eth, back_eth=back_eth, first_port=ports[5])
    packets += part
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "local 10.40.0.66 scanning 1,000 UDP ports of 10.40.3.10 (nmap -sU: TTLs drawn from 37-59, "
                    "port unreachable for a fifth, three open ports answer), then tracing the path to it",
            "must_yield": [{"rule": "scan", "severity_at_least": "medium"}],
            "must_not_yield": [{"rule": "scan", "severity_above": "medium"}]}


# ---- session storms -----------------------------------------------------------------------------------------

def session_storm_p2p(out_dir: Path) -> dict:
    """A BitTorrent client: DHT and peer connections at a few a second, one second of 275 new flows."""
    path = out_dir / "session-storm-p2p.pcap"
    rng = np.random.default_rng(2704)
    cap = Capture()
    client = ip("10.40.0.50")
    # (start s, seconds, new flows a second): the burst is the second after a new torrent's peer list arrives
    phases = [(0.0, 30.0, 6), (30.0, 1.0, 275), (31.0, 30.0, 8)]
    peers = remote_hosts(rng, 1200)
    used = 0
    for start, seconds, rate in phases:
        n = int(seconds * rate)
        t = start + np.sort(rng.uniform(0.0, seconds, n))
        dst = peers[used:used + n]
        used += n
        udp = rng.random(n) < 0.7                 # DHT queries (UDP) and uTP beside TCP peer connections
        answered = rng.permutation(n) < round(0.19 * n)
        dport = rng.integers(1025, 65535, n)
        sport = np.full(n, 51413)                 # the client's listening port, the DHT's too
        u, a = np.flatnonzero(udp), np.flatnonzero(udp & answered)
        cap.add(t[u], frames(np.full(len(u), client), dst[u], UDP_PROTO, sport[u], dport[u], payload=96))
        cap.add(t[a] + 0.06, frames(dst[a], np.full(len(a), client), UDP_PROTO, dport[a], sport[a], payload=320,
                                    outbound=False))
        # TCP peers: most never answer the SYN, those that do get a short session (sessions() spaces them evenly)
        tcp = np.flatnonzero(~udp & ~answered)
        tsport = 40000 + rng.permutation(20000)[:len(tcp)]
        seq = rng.integers(1, 1 << 31, len(tcp))
        cap.add(t[tcp], frames(np.full(len(tcp), client), dst[tcp], TCP_PROTO, tsport, dport[tcp], SYN, seq))
        up = np.flatnonzero(~udp & answered)
        if len(up):
            sessions(cap, rng, client, dst[up], dport[up], start, len(up) / seconds)
    count = cap.write(path)
    return {"file": path.name, "packets": count,
            "what": "BitTorrent client 10.40.0.50: DHT queries and peer connections at 6-8 new flows a second for a "
                    "minute, and one second of 275 new flows (70 % UDP, 19 % answered) when a peer list arrives",
            "must_yield": [{"rule": "session-storm", "severity_at_least": "low"}],
            "must_not_yield": [{"rule": "session-storm", "severity_above": "low"},
                               {"rule": "scan", "severity_above": "info"}]}


def session_storm_sustained(out_dir: Path) -> dict:
    """A subscriber just above the storm rate, but for eight seconds: a worm sweeping 445/tcp at 300/s."""
    path = out_dir / "session-storm-sustained.pcap"
    rng = np.random.default_rng(2705)
    cap = Capture()
    n = 2400
    targets = remote_hosts(rng, n)
    t = 1.0 + np.arange(n) / 300.0
    sport = 1024 + rng.integers(0, 60000, n)
    worm = ip("100.64.20.7")
    cap.add(t, frames(np.full(n, worm), targets, TCP_PROTO, sport, 445, SYN, rng.integers(1, 1 << 31, n)))
    few = np.arange(3, n, 50)
    cap.add(t[few] + 0.03, frames(targets[few], np.full(len(few), worm), TCP_PROTO, 445, sport[few], SYN_ACK,
                                  rng.integers(1, 1 << 31, len(few)), 1, outbound=False))
    sessions(cap, rng, ip("100.64.20.8"), remote_hosts(rng, 30, "198.20.0.0"), 443, 0.0, 3.0)
    count = cap.write(path)
    return {"file": path.name, "packets": count,
            "what": "subscriber 100.64.20.7 sending SYNs to 445/tcp of random hosts at 300 a second for 8 s (2 % "
                    "answered): just above the storm rate, but held",
            "must_yield": [{"rule": "session-storm", "severity_at_least": "medium"},
                           {"rule": "scan", "severity_at_least": "medium"}],
            "must_not_yield": [{"rule": "session-storm", "severity_above": "medium"}]}


# ---- ARP --------------------------------------------------------------------------------------------------

def _arp(t: float, op: int, sha: str, spa: str, tpa: str, tha: str = "00:00:00:00:00:00", dst: str = BROADCAST):
    return t, Ether(src=sha, dst=dst) / ARP(op=op, hwsrc=sha, psrc=spa, hwdst=tha, pdst=tpa)


def arp_sweep(out_dir: Path) -> dict:
    """nmap -sn on a LAN: 500 ARP requests for 245 consecutive addresses in 2 s, 30 hosts answer."""
    path = out_dir / "scan-arp-sweep.pcap"
    rng = random.Random(2706)
    sweeper, mac = "10.40.1.66", _mac(0x4166)
    addresses = [last for last in range(9, 255) if last != 66]          # nmap does not ask for its own address
    live = set(rng.sample(addresses, 30))
    packets = []
    # nmap asks each silent address again, the first 40 of them a third time
    silent = [last for last in addresses if last not in live]
    tries = dict.fromkeys(live, 1) | {last: 2 + (k < 40) for k, last in enumerate(silent)}
    for attempt in range(3):
        asked = [last for last in addresses if tries[last] > attempt]
        for k, last in enumerate(asked):
            t = 0.5 + 0.65 * attempt + k * (0.6 / len(asked))
            packets.append(_arp(t, 1, mac, sweeper, f"10.40.1.{last}"))
            if attempt == 0 and last in live:
                packets.append(_arp(t + 0.0003, 2, _mac(0x410000 + last), f"10.40.1.{last}", sweeper, mac, mac))
    # the LAN's ordinary chatter: hosts resolving the gateway
    for k in range(20):
        host = f"10.40.1.{rng.choice(sorted(live))}"
        packets.append(_arp(0.1 * k, 1, _mac(0x410000 + int(host.rsplit(".", 1)[1])), host, "10.40.1.1"))
    count = write_capture(path, packets)
    assert sum(1 for _, p in packets if p[ARP].psrc == sweeper) == 500
    return {"file": path.name, "packets": count,
            "what": "10.40.1.66 sweeping 10.40.1.9-254 by ARP (nmap -sn): 500 requests for 245 addresses in 2 s, "
                    "the 215 silent ones asked again, 30 hosts answer",
            "must_yield": [{"rule": "scan", "severity_at_least": "low"}],
            "must_not_yield": [{"rule": "scan", "severity_above": "low"}]}


def arp_ordinary(out_dir: Path) -> dict:
    """Near-misses: a router resolving 40 hosts, a rebooted router resolving 150 that answer, a DHCP server's
    conflict probes from 0.0.0.0, gratuitous ARPs of 60 hosts after a power cut."""
    path = out_dir / "scan-arp-ordinary.pcap"
    rng = random.Random(2707)
    packets = []
    router, router_mac = "10.40.6.1", _mac(0x4601)
    for k, last in enumerate(rng.sample(range(2, 250), 40)):
        t = 0.2 + 0.12 * k
        packets.append(_arp(t, 1, router_mac, router, f"10.40.6.{last}"))
        packets.append(_arp(t + 0.0004, 2, _mac(0x460000 + last), f"10.40.6.{last}", router, router_mac,
                            router_mac))
    # a rebooted router on a /22 resolving 150 hosts in 20 s, each answering
    core, core_mac = "10.40.8.1", _mac(0x4801)
    for k in range(150):
        host = f"10.40.{8 + k // 200}.{k % 200 + 20}"
        t = 1.0 + 0.13 * k
        packets.append(_arp(t, 1, core_mac, core, host))
        packets.append(_arp(t + 0.0005, 2, _mac(0x480000 + k), host, core, core_mac, core_mac))
    # a DHCP server probing 120 addresses of its pool before it offers them (RFC 5227 probes, sender 0.0.0.0)
    dhcp_mac = _mac(0x4653)
    for k in range(120):
        packets.append(_arp(2.0 + 0.05 * k, 1, dhcp_mac, "0.0.0.0", f"10.40.7.{k + 100}"))
    # 60 hosts coming back after a power cut, each announcing its address twice (RFC 5227 announcements)
    for k in range(60):
        host, mac = f"10.40.6.{k + 100}", _mac(0x460000 + 100 + k)
        for again in (0.0, 2.0):
            packets.append(_arp(5.0 + 0.08 * k + again, 1, mac, host, host))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "ordinary ARP: a router resolving 40 hosts in 5 s, a rebooted router resolving 150 answering "
                    "hosts in 20 s, a DHCP server probing 120 pool addresses from 0.0.0.0, 60 hosts announcing "
                    "themselves after a power cut",
            "must_yield": [],
            "must_not_yield": [{"rule": "scan", "severity_above": "info"}]}


# ---- brute force ------------------------------------------------------------------------------------------

def _exchange(t: float, client: str, server: str, sport: int, dport: int, steps, rng: random.Random,
              client_mac=FTP_CLIENT_MAC, server_mac=FTP_SERVER_MAC, closer="client") -> list:
    """A TCP connection carrying `steps` (who, bytes, seconds after the previous step), then closed by
    `closer` with FINs: handshake, data with ACKs, close."""
    c, s = Ether(src=client_mac, dst=server_mac) / IP(src=client, dst=server), \
        Ether(src=server_mac, dst=client_mac) / IP(src=server, dst=client)
    cseq, sseq = rng.randrange(1 << 31), rng.randrange(1 << 31)
    out = [(t, c / TCP(sport=sport, dport=dport, flags="S", seq=cseq)),
           (t + 0.001, s / TCP(sport=dport, dport=sport, flags="SA", seq=sseq, ack=cseq + 1)),
           (t + 0.0012, c / TCP(sport=sport, dport=dport, flags="A", seq=cseq + 1, ack=sseq + 1))]
    cseq, sseq, t = cseq + 1, sseq + 1, t + 0.0012
    for who, data, after in steps:
        t += after
        if who == "client":
            out.append((t, c / TCP(sport=sport, dport=dport, flags="PA", seq=cseq, ack=sseq) / Raw(data)))
            cseq += len(data)
            out.append((t + 0.0003, s / TCP(sport=dport, dport=sport, flags="A", seq=sseq, ack=cseq)))
        else:
            out.append((t, s / TCP(sport=dport, dport=sport, flags="PA", seq=sseq, ack=cseq) / Raw(data)))
            sseq += len(data)
            out.append((t + 0.0003, c / TCP(sport=sport, dport=dport, flags="A", seq=cseq, ack=sseq)))
        t += 0.0003
    first, second = (c, s) if closer == "client" else (s, c)
    a_seq, b_seq = (cseq, sseq) if closer == "client" else (sseq, cseq)
    a_ports, b_ports = ((sport, dport), (dport, sport)) if closer == "client" else ((dport, sport), (sport, dport))
    out += [(t + 0.0005, first / TCP(sport=a_ports[0], dport=a_ports[1], flags="FA", seq=a_seq, ack=b_seq)),
            (t + 0.0010, second / TCP(sport=b_ports[0], dport=b_ports[1], flags="FA", seq=b_seq, ack=a_seq + 1)),
            (t + 0.0012, first / TCP(sport=a_ports[0], dport=a_ports[1], flags="A", seq=a_seq + 1, ack=b_seq + 1))]
    return out


WORDS = ("123456", "password", "admin", "qwerty", "letmein", "dragon", "monkey", "master", "shadow", "sunshine",
         "football", "iloveyou", "welcome", "trustno1", "princess", "starwars", "passw0rd", "baseball", "superman")


def brute_force_ftp(out_dir: Path) -> dict:
    """Hydra against an FTP server: 704 logins refused in 44 s, 16 connections at a time."""
    path = out_dir / "brute-force-ftp.pcap"
    rng = random.Random(2708)
    client, server = "198.51.100.23", "10.40.2.21"
    packets = []
    tasks, sessions_n = 16, 704
    for k in range(sessions_n):
        task, round_ = k % tasks, k // tasks
        t = 1.0 + round_ * 1.0 + task * 0.061 + rng.uniform(0.0, 0.02)
        word = WORDS[k % len(WORDS)] + str(k // len(WORDS))
        steps = [("server", b"220 (vsFTPd 3.0.5)\r\n", 0.002), ("client", b"USER admin\r\n", 0.001),
                 ("server", b"331 Please specify the password.\r\n", 0.001),
                 ("client", f"PASS {word}\r\n".encode(), 0.001),
                 # vsftpd answers a failed login only after its delay_failed_login (1 s by default; 0.8 here)
                 ("server", b"530 Login incorrect.\r\n", 0.8)]
        packets += _exchange(t, client, server, 40000 + k, 21, steps, rng)
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "198.51.100.23 trying 704 passwords for admin on the FTP server 10.40.2.21 in 44 s, 16 "
                    "connections at a time, each refused (530) and closed",
            "must_yield": [{"rule": "brute-force", "severity_at_least": "low"}],
            "must_not_yield": [{"rule": "brute-force", "severity_above": "low"},
                               {"rule": "session-storm", "severity_above": "info"},
                               {"rule": "scan", "severity_above": "info"}]}


def brute_force_near_misses(out_dir: Path) -> dict:
    """Many short sessions that are no password guessing: page loads, a poller, an SMTP relay."""
    path = out_dir / "brute-force-near-misses.pcap"
    rng = random.Random(2709)
    packets = []
    # a browser without keep-alive: four page loads of 45 objects, 15 s apart (180 connections in a minute)
    for load in range(4):
        for k in range(45):
            size = [320, 1100, 520, 940, 1380, 260, 760, 1120, 410][k % 9] - 3 * k
            steps = [("client", b"GET /static/%d HTTP/1.0\r\nHost: intranet\r\n\r\n" % k, 0.001),
                     ("server", b"HTTP/1.0 200 OK\r\n\r\n" + b"o" * size, 0.004)]
            packets += _exchange(0.5 + 15.0 * load + 0.04 * k, "10.40.5.10", "10.40.5.80", 41000 + load * 50 + k,
                                 80, steps, rng, _mac(0x4510), _mac(0x4580), closer="server")
    # a health poller connecting every second for three minutes
    for k in range(180):
        steps = [("client", b"GET /health HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n", 0.001),
                 ("server", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK", 0.003)]
        packets += _exchange(0.25 + 1.0 * k, "10.40.5.11", "10.40.5.81", 42000 + k, 8080, steps, rng,
                             _mac(0x4511), _mac(0x4581), closer="server")
    # an SMTP relay flushing its queue to one mail exchanger: 150 messages in 90 s
    for k in range(150):
        body = b"m" * (300 + (k * 7919) % 1100)
        steps = [("server", b"220 mx.example.net ESMTP\r\n", 0.01), ("client", b"EHLO relay.example.org\r\n", 0.001),
                 ("server", b"250-mx.example.net\r\n250-SIZE 52428800\r\n250 8BITMIME\r\n", 0.002),
                 ("client", b"MAIL FROM:<noreply@example.org>\r\n", 0.001), ("server", b"250 2.1.0 Ok\r\n", 0.002),
                 ("client", b"RCPT TO:<user%d@example.net>\r\n" % (k % 40), 0.001),
                 ("server", b"250 2.1.5 Ok\r\n", 0.002), ("client", b"DATA\r\n", 0.001),
                 ("server", b"354 End data with <CR><LF>.<CR><LF>\r\n", 0.002),
                 ("client", body + b"\r\n.\r\n", 0.001), ("server", b"250 2.0.0 Ok: queued as 4F2A%05d\r\n" % k, 0.02),
                 ("client", b"QUIT\r\n", 0.001), ("server", b"221 2.0.0 Bye\r\n", 0.001)]
        packets += _exchange(0.3 + 0.6 * k, "10.40.5.25", "203.0.113.25", 43000 + k, 25, steps, rng,
                             _mac(0x4525), GATEWAY_MAC)
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-misses: 10.40.5.10 loading four pages of 45 objects without keep-alive, 10.40.5.11 polling "
                    "/health every second for 3 minutes, relay 10.40.5.25 delivering 150 messages to one mail "
                    "exchanger in 90 s",
            "must_yield": [],
            "must_not_yield": [{"rule": "brute-force", "severity_above": "info"}]}


CAPTURES = [traceroute_udp, traceroute_many, udp_port_scan, session_storm_p2p, session_storm_sustained, arp_sweep,
            arp_ordinary, brute_force_ftp, brute_force_near_misses]

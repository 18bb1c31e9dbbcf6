"""Scan and session-storm captures (seed 003: subscribers that "iterate over IP addresses"), and near-misses.

Thousands of probes are built as numpy arrays of header bytes (Ethernet,
IPv4, TCP or UDP, checksums computed), not one scapy packet at a time. The
sweeps and storms last seconds; background sessions of ordinary clients
run beside them.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from common import T0
from scapy.data import DLT_EN10MB
from scapy.utils import PcapWriter

CLIENT_MAC = bytes.fromhex("02005e300010")
GATEWAY_MAC = bytes.fromhex("02005e300001")
SYN, RST, ACK, SYN_ACK, RST_ACK = 0x02, 0x04, 0x10, 0x12, 0x14
TCP_PROTO, UDP_PROTO = 6, 17


def ip(text: str) -> int:
    a, b, c, d = (int(x) for x in text.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


def _checksum(words: np.ndarray) -> np.ndarray:
    """The Internet checksum (RFC 1071) of each row of 16-bit words."""
    total = words.astype(np.uint64).sum(axis=1)
    while np.any(total >> 16):
        total = (total & 0xFFFF) + (total >> 16)
    return (~total & 0xFFFF).astype(np.uint16)


def frames(src, dst, proto: int, sport, dport, flags=0, seq=0, ack=0, payload: int = 0, outbound=True) -> np.ndarray:
    """IPv4 frames, one row each: Ethernet, IPv4 (TTL 64), TCP (20 bytes) or UDP (8 bytes), zero payload bytes."""
    n = len(src)
    col = lambda v, dtype=np.uint32: np.broadcast_to(np.asarray(v, dtype=np.uint64), (n,)).astype(dtype)  # noqa: E731
    l4 = 20 if proto == TCP_PROTO else 8
    total = 20 + l4 + payload
    out = np.zeros((n, 14 + total), dtype=np.uint8)
    out[:, 0:6] = np.frombuffer(GATEWAY_MAC if outbound else CLIENT_MAC, np.uint8)
    out[:, 6:12] = np.frombuffer(CLIENT_MAC if outbound else GATEWAY_MAC, np.uint8)
    out[:, 12:14] = (0x08, 0x00)
    hdr = np.zeros((n, 20), dtype=np.uint8)
    hdr[:, 0], hdr[:, 2], hdr[:, 3] = 0x45, total >> 8, total & 0xFF
    ident = (np.arange(n) & 0xFFFF).astype(np.uint16)
    hdr[:, 4], hdr[:, 5] = ident >> 8, ident & 0xFF
    hdr[:, 6], hdr[:, 8], hdr[:, 9] = 0x40, 64, proto
    src, dst = col(src), col(dst)
    for k in range(4):
        hdr[:, 12 + k] = (src >> (24 - 8 * k)) & 0xFF
        hdr[:, 16 + k] = (dst >> (24 - 8 * k)) & 0xFF
    csum = _checksum(hdr.view(">u2"))
    hdr[:, 10], hdr[:, 11] = csum >> 8, csum & 0xFF
    out[:, 14:34] = hdr
    seg = np.zeros((n, l4 + payload), dtype=np.uint8)
    sport, dport = col(sport, np.uint16), col(dport, np.uint16)
    seg[:, 0], seg[:, 1], seg[:, 2], seg[:, 3] = sport >> 8, sport & 0xFF, dport >> 8, dport & 0xFF
    if proto == TCP_PROTO:
        seq, ack = col(seq), col(ack)
        for k in range(4):
            seg[:, 4 + k] = (seq >> (24 - 8 * k)) & 0xFF
            seg[:, 8 + k] = (ack >> (24 - 8 * k)) & 0xFF
        seg[:, 12], seg[:, 13] = 0x50, col(flags, np.uint8)
        seg[:, 14], seg[:, 15] = 0x40, 0x00          # window 16,384
        at = 16
    else:
        seg[:, 4], seg[:, 5] = (l4 + payload) >> 8, (l4 + payload) & 0xFF
        at = 6
    pseudo = np.zeros((n, 12), dtype=np.uint8)
    pseudo[:, 0:8] = hdr[:, 12:20]
    pseudo[:, 9], pseudo[:, 10], pseudo[:, 11] = proto, (l4 + payload) >> 8, (l4 + payload) & 0xFF
    body = np.concatenate([pseudo, seg] + ([np.zeros((n, 1), np.uint8)] if (l4 + payload) % 2 else []), axis=1)
    csum = _checksum(body.view(">u2"))
    seg[:, at], seg[:, at + 1] = csum >> 8, csum & 0xFF
    out[:, 34:] = seg
    return out


class Capture:
    """Frames gathered with their times, written in time order (ties keep the order they were added in)."""

    def __init__(self):
        self.times: list[np.ndarray] = []
        self.rows: list[list[bytes]] = []

    def add(self, times, rows: np.ndarray) -> None:
        self.times.append(np.broadcast_to(np.asarray(times, dtype=np.float64), (len(rows),)))
        self.rows.append([row.tobytes() for row in rows])

    def write(self, path: Path) -> int:
        times = np.concatenate(self.times)
        data = [row for part in self.rows for row in part]
        order = np.argsort(np.round(times, 6), kind="stable")
        writer = PcapWriter(str(path), linktype=DLT_EN10MB, sync=False)
        writer.write_header(None)
        for i in order.tolist():
            stamp = round(T0 + times[i], 6)
            sec = int(stamp)
            writer.write_packet(data[i], sec=sec, usec=round((stamp - sec) * 1e6), caplen=len(data[i]),
                                wirelen=len(data[i]))
        writer.close()
        return len(order)


def sessions(cap: Capture, rng, client: int, servers: np.ndarray, dport, start: float, rate: float,
             outbound=True) -> None:
    """Short answered TCP connections of `client`: SYN, SYN-ACK, ACK, one request and answer, RST from the client."""
    n = len(servers)
    t = start + np.arange(n) / rate
    sport = 20000 + rng.permutation(40000)[:n]
    cseq, sseq = rng.integers(1, 1 << 31, n), rng.integers(1, 1 << 31, n)
    c = np.full(n, client)
    cap.add(t, frames(c, servers, TCP_PROTO, sport, dport, SYN, cseq, 0, outbound=outbound))
    cap.add(t + 0.02, frames(servers, c, TCP_PROTO, dport, sport, SYN_ACK, sseq, cseq + 1, outbound=not outbound))
    cap.add(t + 0.0201, frames(c, servers, TCP_PROTO, sport, dport, ACK, cseq + 1, sseq + 1, outbound=outbound))
    cap.add(t + 0.021, frames(c, servers, TCP_PROTO, sport, dport, ACK | 0x08, cseq + 1, sseq + 1, payload=40,
                              outbound=outbound))
    cap.add(t + 0.04, frames(servers, c, TCP_PROTO, dport, sport, ACK | 0x08, sseq + 1, cseq + 41, payload=200,
                             outbound=not outbound))
    cap.add(t + 0.041, frames(c, servers, TCP_PROTO, sport, dport, RST_ACK, cseq + 41, sseq + 201, outbound=outbound))


def remote_hosts(rng, n: int, base: str = "198.18.0.0") -> np.ndarray:
    """`n` distinct addresses of a /15 (benchmarking space, RFC 2544) in random order."""
    return ip(base) + 1 + rng.permutation(1 << 17)[:n]


def scan_local_sweep(out_dir: Path) -> dict:
    """An infected local host sweeping 10.31.0.0/16 for SMB (445/tcp) at 200 probes/s for 30 s."""
    path = out_dir / "scan-local-sweep.pcap"
    rng = np.random.default_rng(3001)
    cap = Capture()
    sessions(cap, rng, ip("10.30.0.21"), remote_hosts(rng, 40), 443, 0.0, 2.0)
    scanner = ip("10.30.0.66")
    targets = ip("10.31.0.0") + 1 + rng.permutation(65534)[:6000]
    t = 1.0 + np.arange(len(targets)) / 200.0
    sport = 1024 + rng.integers(0, 60000, len(targets))
    cap.add(t, frames(np.full(len(targets), scanner), targets, TCP_PROTO, sport, 445, SYN, rng.integers(1, 1 << 31,
                                                                                                       len(targets))))
    # one in fifty is a host with 445 closed (reset), one in two hundred has it open and answers
    closed, open_ = np.arange(0, len(targets), 50), np.arange(7, len(targets), 200)
    cap.add(t[closed] + 0.001, frames(targets[closed], np.full(len(closed), scanner), TCP_PROTO, 445, sport[closed],
                                      RST_ACK, 0, 1, outbound=False))
    cap.add(t[open_] + 0.001, frames(targets[open_], np.full(len(open_), scanner), TCP_PROTO, 445, sport[open_],
                                     SYN_ACK, 77, 1, outbound=False))
    count = cap.write(path)
    return {"file": path.name, "packets": count,
            "what": "local host 10.30.0.66 sweeping 6,000 addresses of 10.31.0.0/16 on 445/tcp at 200 SYN/s (2 % "
                    "reset, 0.5 % open), beside 40 ordinary HTTPS sessions",
            "must_yield": [{"rule": "scan", "severity_at_least": "medium"}],
            "must_not_yield": [{"rule": "scan", "severity_above": "medium"},
                               {"rule": "session-storm", "severity_above": "info"}]}


def scan_port_scan(out_dir: Path) -> dict:
    """A remote host scanning 1,000 TCP ports of one local server: closed ports reset, three answer."""
    path = out_dir / "scan-port-scan.pcap"
    rng = np.random.default_rng(3002)
    cap = Capture()
    scanner, server = ip("203.0.113.50"), ip("10.30.0.10")
    ports = 1 + rng.permutation(10000)[:1000]
    n = len(ports)
    t = 0.5 + np.arange(n) / 150.0
    seq = rng.integers(1, 1 << 31, n)
    cap.add(t, frames(np.full(n, scanner), np.full(n, server), TCP_PROTO, 47000, ports, SYN, seq, outbound=False))
    answered = np.isin(ports, ports[:3])
    closed = np.flatnonzero(~answered)
    cap.add(t[closed] + 0.0005, frames(np.full(len(closed), server), np.full(len(closed), scanner), TCP_PROTO,
                                       ports[closed], 47000, RST_ACK, 0, seq[closed] + 1))
    opened = np.flatnonzero(answered)
    cap.add(t[opened] + 0.0005, frames(np.full(len(opened), server), np.full(len(opened), scanner), TCP_PROTO,
                                       ports[opened], 47000, SYN_ACK, 99, seq[opened] + 1))
    cap.add(t[opened] + 0.001, frames(np.full(len(opened), scanner), np.full(len(opened), server), TCP_PROTO, 47000,
                                      ports[opened], RST, seq[opened] + 1, 0, outbound=False))
    sessions(cap, rng, ip("10.30.0.22"), remote_hosts(rng, 30), 443, 0.0, 4.0)
    count = cap.write(path)
    return {"file": path.name, "packets": count,
            "what": "remote 203.0.113.50 scanning 1,000 TCP ports of 10.30.0.10 at 150/s (closed ports reset, "
                    "three open ones answer and get a reset)",
            "must_yield": [{"rule": "scan", "severity_at_least": "low"}],
            "must_not_yield": [{"rule": "scan", "severity_above": "low"},
                               {"rule": "session-storm", "severity_above": "info"}]}


def session_storm_subscriber(out_dir: Path) -> dict:
    """A subscriber (CGNAT 100.64/10) opening 800 TCP connections a second for 2 s, all answered."""
    path = out_dir / "session-storm-subscriber.pcap"
    rng = np.random.default_rng(3003)
    cap = Capture()
    sessions(cap, rng, ip("100.64.12.34"), remote_hosts(rng, 1600), 443, 1.0, 800.0)
    sessions(cap, rng, ip("100.64.12.40"), remote_hosts(rng, 60, "198.20.0.0"), 443, 0.0, 12.0)
    count = cap.write(path)
    return {"file": path.name, "packets": count,
            "what": "subscriber 100.64.12.34 opening 1,600 answered HTTPS connections in 2 s (800/s), another "
                    "subscriber browsing beside it",
            "must_yield": [{"rule": "session-storm", "severity_at_least": "medium"}],
            "must_not_yield": [{"rule": "session-storm", "severity_above": "medium"},
                               {"rule": "scan", "severity_above": "info"}]}


def session_storm_flood(out_dir: Path) -> dict:
    """A subscriber firing 3,000 SYNs in one second at random hosts on 80/tcp: a storm and a scan at once."""
    path = out_dir / "session-storm-flood.pcap"
    rng = np.random.default_rng(3004)
    cap = Capture()
    n = 3000
    targets = remote_hosts(rng, n)
    cap.add(1.0 + np.arange(n) / 3000.0, frames(np.full(n, ip("100.64.12.99")), targets, TCP_PROTO,
                                                1024 + rng.integers(0, 60000, n), 80, SYN, rng.integers(1, 1 << 31, n)))
    count = cap.write(path)
    return {"file": path.name, "packets": count,
            "what": "subscriber 100.64.12.99 sending 3,000 SYNs within one second to 3,000 hosts on 80/tcp, "
                    "none answered (seed 003's infected subscriber)",
            "must_yield": [{"rule": "session-storm", "severity_at_least": "high"},
                           {"rule": "scan", "severity_at_least": "medium"}],
            "must_not_yield": [{"rule": "session-storm", "severity_above": "high"},
                               {"rule": "scan", "severity_above": "medium"}]}


def scan_near_misses(out_dir: Path) -> dict:
    """A busy public resolver losing some queries, a NAT gateway with a few dead servers, and backscatter."""
    path = out_dir / "scan-near-misses.pcap"
    rng = np.random.default_rng(3005)
    cap = Capture()
    # the resolver: 1,500 queries to 600 name servers at 150/s, 60 of the servers never answer
    resolver = ip("198.51.100.53")
    servers = remote_hosts(rng, 600)
    asked = servers[rng.integers(0, 600, 1500)]
    asked[:600] = servers
    t = np.arange(1500) / 150.0
    sport = 1024 + rng.permutation(60000)[:1500]
    cap.add(t, frames(np.full(1500, resolver), asked, UDP_PROTO, sport, 53, payload=32))
    answers = np.flatnonzero(~np.isin(asked, servers[:60]))
    cap.add(t[answers] + 0.03, frames(asked[answers], np.full(len(answers), resolver), UDP_PROTO, 53, sport[answers],
                                      payload=120, outbound=False))
    # the NAT gateway: 1,200 completed sessions to 1,000 web servers, 40 attempts at dead ones
    gateway = ip("198.51.100.1")
    sessions(cap, rng, gateway, remote_hosts(rng, 1200, "198.20.0.0"), 443, 0.0, 100.0)
    dead = ip("203.0.113.0") + 1 + np.arange(40)
    cap.add(2.0 + np.arange(40) / 4.0, frames(np.full(40, gateway), dead, TCP_PROTO, 30000 + np.arange(40), 443, SYN,
                                              rng.integers(1, 1 << 31, 40)))
    # backscatter: 2,000 SYN-ACKs and resets from 2,000 hosts to one local address that sent nothing
    victim = ip("10.30.0.80")
    n = 2000
    sources = remote_hosts(rng, n, "198.22.0.0")
    flags = np.where(np.arange(n) % 2 == 0, SYN_ACK, RST_ACK)
    ports = 1024 + rng.integers(0, 60000, n)
    cap.add(1.0 + np.arange(n) / 500.0, frames(sources, np.full(n, victim), TCP_PROTO, 80, ports, flags,
                                               rng.integers(1, 1 << 31, n), rng.integers(1, 1 << 31, n),
                                               outbound=False))
    count = cap.write(path)
    return {"file": path.name, "packets": count,
            "what": "near-misses: a public resolver (1,500 queries to 600 servers, 60 never answer), a NAT gateway "
                    "(1,200 sessions, 40 dead servers), 2,000 backscatter SYN-ACKs and resets to one local host",
            "must_yield": [],
            "must_not_yield": [{"rule": "scan", "severity_above": "info"},
                               {"rule": "session-storm", "severity_above": "info"}]}


CAPTURES = [scan_local_sweep, scan_port_scan, session_storm_subscriber, session_storm_flood, scan_near_misses]

"""conntrack-pressure captures (seed 003): a sweep filling a NAT's table, and busy hosts whose entries expire.

Captured inside a CGNAT on the subscribers' side, as `tcpdump -i tun0` records a routed
tunnel: raw IPv4 (link type 101), no link header. Built with numpy (tens of thousands of
packets; scapy would take minutes), checksums correct, every field deterministic.

- conntrack-sweep.pcap: an infected subscriber sweeps 198.18.0.0/15 on TCP 445 at 13,200
  SYNs a second for two seconds, and nobody answers; under Linux's defaults each SYN holds
  an entry 2 minutes, so the one source holds a tenth of a default 262,144-entry table
  (the rule's high). A few other subscribers browse normally beside it.
- conntrack-busy-resolver.pcap: a resolver sends 10 queries a second for 200 s, each from
  its own port and each answered: thousands of flows in all, but the entries expire (UDP
  replied: 120 s) and the table never holds more than ~1,200.
- conntrack-nat-gateway.pcap: a NAT gateway's public address opens 5 web connections a
  second for 200 s, each completed and closed (TIME_WAIT: 120 s); the peak stays small.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from common import T0

LINKTYPE_RAW = 101
PROTO_TCP, PROTO_UDP = 6, 17
SYN, ACK, FIN, PSH = 0x02, 0x10, 0x01, 0x08
RULE = "conntrack-pressure"


def _ip(text: str) -> int:
    a, b, c, d = (int(x) for x in text.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


def _be(values: np.ndarray, width: int) -> np.ndarray:
    """Big-endian bytes of unsigned integers: (n, width) uint8."""
    values = np.asarray(values, dtype=np.uint64)
    shifts = np.arange(width - 1, -1, -1, dtype=np.uint64) * np.uint64(8)
    return ((values[:, None] >> shifts) & np.uint64(0xFF)).astype(np.uint8)


def _checksum(rows: np.ndarray) -> np.ndarray:
    """The Internet checksum (RFC 1071) of each row of bytes (an odd length padded with a zero byte)."""
    if rows.shape[1] % 2:
        rows = np.concatenate([rows, np.zeros((len(rows), 1), np.uint8)], axis=1)
    words = rows.astype(np.uint32).reshape(len(rows), -1, 2)
    total = (words[:, :, 0] << 8 | words[:, :, 1]).sum(axis=1, dtype=np.uint64)
    while (total >> np.uint64(16)).any():
        total = (total & np.uint64(0xFFFF)) + (total >> np.uint64(16))
    return (~total & np.uint64(0xFFFF)).astype(np.uint64)


def _ipv4(src, dst, proto: int, payload: np.ndarray, ident) -> np.ndarray:
    """IPv4 headers (TTL 64, DF) in front of each row of `payload`."""
    n, length = payload.shape
    header = np.zeros((n, 20), np.uint8)
    header[:, 0], header[:, 6], header[:, 8], header[:, 9] = 0x45, 0x40, 64, proto
    header[:, 2:4] = _be(np.full(n, 20 + length), 2)
    header[:, 4:6] = _be(ident, 2)
    header[:, 12:16], header[:, 16:20] = _be(src, 4), _be(dst, 4)
    header[:, 10:12] = _be(_checksum(header), 2)
    return np.concatenate([header, payload], axis=1)


def _pseudo(src, dst, proto: int, length: int) -> np.ndarray:
    n = len(src)
    return np.concatenate([_be(src, 4), _be(dst, 4), _be(np.full(n, proto), 2), _be(np.full(n, length), 2)], axis=1)


def tcp_packets(src, dst, sport, dport, seq, ack, flags, window=64240, ident=0) -> np.ndarray:
    """IPv4/TCP packets without payload or options: (n, 40) bytes."""
    n = len(src)
    src, dst = np.broadcast_to(src, (n,)), np.broadcast_to(dst, (n,))
    tcp = np.zeros((n, 20), np.uint8)
    tcp[:, 0:2], tcp[:, 2:4] = _be(np.broadcast_to(sport, (n,)), 2), _be(np.broadcast_to(dport, (n,)), 2)
    tcp[:, 4:8], tcp[:, 8:12] = _be(np.broadcast_to(seq, (n,)), 4), _be(np.broadcast_to(ack, (n,)), 4)
    tcp[:, 12], tcp[:, 13] = 0x50, np.broadcast_to(flags, (n,))
    tcp[:, 14:16] = _be(np.broadcast_to(window, (n,)), 2)
    tcp[:, 16:18] = _be(_checksum(np.concatenate([_pseudo(src, dst, PROTO_TCP, 20), tcp], axis=1)), 2)
    return _ipv4(src, dst, PROTO_TCP, tcp, np.broadcast_to(ident, (n,)))


def udp_packets(src, dst, sport, dport, payload: np.ndarray, ident=0) -> np.ndarray:
    """IPv4/UDP packets around each row of `payload`, checksums computed."""
    n, length = payload.shape
    src, dst = np.broadcast_to(src, (n,)), np.broadcast_to(dst, (n,))
    udp = np.zeros((n, 8), np.uint8)
    udp[:, 0:2], udp[:, 2:4] = _be(np.broadcast_to(sport, (n,)), 2), _be(np.broadcast_to(dport, (n,)), 2)
    udp[:, 4:6] = _be(np.full(n, 8 + length), 2)
    body = np.concatenate([udp, payload], axis=1)
    checksum = _checksum(np.concatenate([_pseudo(src, dst, PROTO_UDP, 8 + length), body], axis=1))
    udp[:, 6:8] = _be(np.where(checksum == 0, 0xFFFF, checksum), 2)      # 0 means "none" (RFC 768)
    return _ipv4(src, dst, PROTO_UDP, np.concatenate([udp, payload], axis=1), np.broadcast_to(ident, (n,)))


def write_pcap(path: Path, parts: list[tuple[np.ndarray, np.ndarray]]) -> int:
    """Write (times in µs after T0, packets) parts as one raw-IPv4 pcap in time order; returns the packet count."""
    records = []
    for times, packets in parts:
        n, length = packets.shape
        stamp = T0 * 1_000_000 + np.asarray(times, np.int64)
        header = np.zeros((n, 4), "<u4")
        header[:, 0], header[:, 1] = stamp // 1_000_000, stamp % 1_000_000
        header[:, 2] = header[:, 3] = length
        records.append((stamp, np.concatenate([header.view(np.uint8).reshape(n, 16), packets], axis=1)))
    stamps = np.concatenate([s for s, _ in records])
    rows = [row for _, block in records for row in block]
    with path.open("wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, LINKTYPE_RAW))
        for i in np.argsort(stamps, kind="stable"):
            out.write(rows[i].tobytes())
    return len(rows)


def _sessions(rng, clients, servers, dport: int, t0_us) -> list[tuple[np.ndarray, np.ndarray]]:
    """Complete TCP connections starting at t0_us: the handshake, then FINs from both sides, 20 ms RTT."""
    n = len(t0_us)
    sport = 32768 + (np.arange(n) * 7919) % 28000
    isn = {True: rng.integers(0, 1 << 31, n), False: rng.integers(0, 1 << 31, n)}
    rtt = 20_000
    # (µs after the start, sent by the client, flags, own sequence offset, peer sequence offset acknowledged)
    steps = [(0, True, SYN, 0, None), (rtt, False, SYN | ACK, 0, 1), (rtt + 500, True, ACK, 1, 1),
             (3 * rtt, True, FIN | ACK, 1, 1), (4 * rtt, False, FIN | ACK, 1, 2), (4 * rtt + 500, True, ACK, 2, 2)]
    parts = []
    for delay, client, flags, own, peer in steps:
        ack = 0 if peer is None else isn[not client] + peer
        ends = (clients, servers, sport, dport) if client else (servers, clients, dport, sport)
        parts.append((t0_us + delay, tcp_packets(*ends, isn[client] + own, ack, flags)))
    return parts


def conntrack_sweep(out_dir: Path) -> dict:
    """One subscriber's unanswered SYN sweep holds a tenth of a default Linux table; neighbours browse."""
    path = out_dir / "conntrack-sweep.pcap"
    rng = np.random.default_rng(3003)
    sweep = 26_400                       # > 10 % of 262,144
    rate = 13_200                        # SYNs per second
    times = (np.arange(sweep) * 1_000_000) // rate
    targets = _ip("198.18.0.0") + 1 + np.arange(sweep)         # sequential through 198.18.0.0/15
    syns = tcp_packets(np.full(sweep, _ip("100.64.7.7")), targets, 32768 + np.arange(sweep) % 28232, 445,
                       rng.integers(0, 1 << 32, sweep), 0, SYN, window=1024, ident=np.arange(sweep) & 0xFFFF)
    neighbours = 40
    clients = _ip("100.64.0.10") + np.arange(neighbours)
    servers = _ip("203.0.113.10") + np.arange(neighbours) % 8
    browse = _sessions(rng, clients, servers, 443, np.sort(rng.integers(0, 1_900_000, neighbours)))
    count = write_pcap(path, [(times, syns), *browse])
    return {"file": path.name, "packets": count,
            "what": "an infected CGNAT subscriber (100.64.7.7) sweeps 198.18.0.0/15 on TCP 445 at 13,200 SYN/s, "
                    "unanswered: 26,400 SYN_SENT entries, a tenth of a default Linux table, beside 40 browsing "
                    "neighbours",
            "must_yield": [{"rule": RULE, "severity_at_least": "high"}],
            # the sweep is a scan and a session storm of one source, and fills the table: one incident
            "incidents": [{"root_cause": "session-storm", "findings": ["session-storm", "scan", RULE]}],
            "must_not_yield": []}


def conntrack_busy_resolver(out_dir: Path) -> dict:
    """Near-miss: a resolver's 2,000 answered queries over 200 s; entries expire, the table stays small."""
    path = out_dir / "conntrack-busy-resolver.pcap"
    rng = np.random.default_rng(3004)
    n = 2000
    times = np.sort(rng.integers(0, 200_000_000, n))
    resolver = np.full(n, _ip("192.0.2.53"))
    servers = _ip("198.51.100.1") + rng.integers(0, 200, n)
    sport = 1024 + rng.permutation(60000)[:n]
    ident = rng.integers(0, 1 << 16, n)
    # DNS: id, flags (RD / QR RD RA), one question "www.example.com A IN"; the answer adds one A record
    question = np.frombuffer(b"\x03www\x07example\x03com\x00\x00\x01\x00\x01", np.uint8)
    query = np.zeros((n, 12 + len(question)), np.uint8)
    query[:, 0:2], query[:, 2], query[:, 5] = _be(ident, 2), 0x01, 1
    query[:, 12:] = question
    record = np.frombuffer(b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x0e\x10\x00\x04\xc0\x00\x02\x50", np.uint8)
    answer = np.concatenate([query, np.tile(record, (n, 1))], axis=1)
    answer[:, 2], answer[:, 3], answer[:, 7] = 0x81, 0x80, 1
    parts = [(times, udp_packets(resolver, servers, sport, 53, query)),
             (times + 15_000 + rng.integers(0, 30_000, n), udp_packets(servers, resolver, 53, sport, answer))]
    count = write_pcap(path, parts)
    return {"file": path.name, "packets": count,
            "what": "near-miss: a resolver sends 2,000 queries over 200 s, each from its own port and answered; "
                    "the entries expire and the modelled table never holds more than ~1,200 (under 1 %: no report)",
            "must_yield": [],
            "must_not_yield": [{"rule": RULE, "severity_above": "info"}]}


def conntrack_nat_gateway(out_dir: Path) -> dict:
    """Near-miss: a NAT gateway's 1,000 completed web connections over 200 s; TIME_WAIT entries expire."""
    path = out_dir / "conntrack-nat-gateway.pcap"
    rng = np.random.default_rng(3005)
    n = 1000
    starts = np.sort(rng.integers(0, 200_000_000, n))
    gateway = np.full(n, _ip("203.0.113.1"))
    servers = _ip("198.51.100.1") + rng.integers(0, 250, n)
    count = write_pcap(path, _sessions(rng, gateway, servers, 443, starts))
    return {"file": path.name, "packets": count,
            "what": "near-miss: a NAT gateway's public address opens 5 web connections a second for 200 s, each "
                    "completed and closed; their TIME_WAIT entries expire and the table stays small (no report)",
            "must_yield": [],
            "must_not_yield": [{"rule": RULE, "severity_above": "info"}]}


CAPTURES = [conntrack_sweep, conntrack_busy_resolver, conntrack_nat_gateway]

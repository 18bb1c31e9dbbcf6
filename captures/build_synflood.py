"""SYN flood and handshake RTT captures (seed 002's flood, seed 000's slow handshakes), built as raw bytes with numpy.

A flood is thousands of packets a second: the frames are Ethernet + IPv4 +
TCP headers only (54 bytes, no options), laid out as rows of a numpy byte
array with their checksums computed column-wise, and written as a classic
pcap (microsecond stamps). scapy would take minutes for the same.

- syn-flood-spoofed: 3,000 SYN/s for 3 s from spoofed sources against a
  web server that answers one in twenty, among its ordinary clients: high.
- syn-flash-crowd: 600 new clients a second for 3 s, each completing its
  handshake: the near-miss, silent.
- syn-flood-ingress-only: 600 SYN/s for 3 s from 40 sources, the capture
  holding only the direction toward the server: low, completion unknown.
- handshake-rtt-jump: 3 handshakes a second with internet servers over
  2 minutes; after 80 s the server side's leg grows from 20 ms to 350 ms:
  high.
- handshake-rtt-distant: near servers at 20 ms and three distant ones at
  300 ms all along, the distant ones taking most of the handshakes for the
  last 40 s: the near-miss (per-server baselines), silent.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from common import T0

ETH_IP4 = 0x0800
SYN, RST, ACK = 0x02, 0x04, 0x10
CLIENT_MAC, SERVER_MAC = bytes.fromhex("02005e300010"), bytes.fromhex("02005e300001")
FRAME_BYTES = 54
WEB_SERVER = "10.30.0.80"


def _ip4(text: str) -> int:
    a, b, c, d = (int(x) for x in text.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


def _fold(total: np.ndarray) -> np.ndarray:
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return (~total & 0xFFFF).astype(np.uint16)


def frames(src, dst, sport, dport, seq, ack, flags, from_server) -> np.ndarray:
    """Rows of 54 bytes: Ethernet, IPv4 (TTL 64, DF) and TCP headers with valid checksums."""
    n = len(src)
    src, dst = np.asarray(src, np.uint32), np.asarray(dst, np.uint32)
    out = np.zeros((n, FRAME_BYTES), dtype=np.uint8)
    macs = np.where(np.asarray(from_server)[:, None], np.frombuffer(SERVER_MAC + CLIENT_MAC, np.uint8),
                    np.frombuffer(CLIENT_MAC + SERVER_MAC, np.uint8))
    out[:, 0:12] = macs
    out[:, 12:14] = np.frombuffer(struct.pack(">H", ETH_IP4), np.uint8)

    def put16(col, values):
        v = np.asarray(values, np.uint32)
        out[:, col], out[:, col + 1] = (v >> 8) & 0xFF, v & 0xFF

    def put32(col, values):
        v = np.asarray(values, np.uint64)
        for k in range(4):
            out[:, col + k] = (v >> np.uint64(24 - 8 * k)) & np.uint64(0xFF)

    out[:, 14] = 0x45
    put16(16, np.full(n, 40))                       # total length
    put16(18, np.arange(n) & 0xFFFF)                # identification
    out[:, 20] = 0x40                               # don't fragment
    out[:, 22], out[:, 23] = 64, 6                  # TTL, TCP
    put32(26, src)
    put32(30, dst)
    words = out[:, 14:34].reshape(n, 10, 2).astype(np.uint32)
    put16(24, _fold((words[:, :, 0] << 8 | words[:, :, 1]).sum(axis=1)))
    put16(34, sport)
    put16(36, dport)
    put32(38, np.asarray(seq, np.uint64) & np.uint64(0xFFFFFFFF))
    put32(42, np.asarray(ack, np.uint64) & np.uint64(0xFFFFFFFF))
    out[:, 46] = 5 << 4                             # data offset
    out[:, 47] = flags
    put16(48, np.full(n, 64240))                    # window
    tcp = out[:, 34:54].reshape(n, 10, 2).astype(np.uint32)
    pseudo = (src >> 16) + (src & 0xFFFF) + (dst >> 16) + (dst & 0xFFFF) + 6 + 20
    put16(50, _fold((tcp[:, :, 0] << 8 | tcp[:, :, 1]).sum(axis=1) + pseudo))
    return out


def write_pcap(path: Path, times: np.ndarray, rows: np.ndarray) -> int:
    """Classic pcap (microseconds, Ethernet) of the frame rows at `times` (seconds after T0), in time order."""
    order = np.argsort(times, kind="stable")
    usec = np.round(np.asarray(times)[order] * 1e6).astype(np.int64) + T0 * 1_000_000
    records = np.zeros(len(order), dtype=[("sec", "<u4"), ("usec", "<u4"), ("caplen", "<u4"), ("len", "<u4"),
                                          ("data", "u1", FRAME_BYTES)])
    records["sec"], records["usec"] = usec // 1_000_000, usec % 1_000_000
    records["caplen"] = records["len"] = FRAME_BYTES
    records["data"] = rows[order]
    with path.open("wb") as handle:
        handle.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        handle.write(records.tobytes())
    return len(order)


class _Packets:
    """Frames gathered column by column, then built and written at once."""

    def __init__(self):
        self.parts = []

    def add(self, t, src, dst, sport, dport, seq, ack, flags, from_server):
        n = len(t)
        self.parts.append((np.asarray(t, float), np.broadcast_to(src, n), np.broadcast_to(dst, n),
                           np.broadcast_to(sport, n), np.broadcast_to(dport, n), np.broadcast_to(seq, n),
                           np.broadcast_to(ack, n), np.broadcast_to(flags, n), np.broadcast_to(from_server, n)))

    def handshakes(self, t, clients, servers, sports, dport, server_leg_s, client_leg_s, rng):
        """SYN, SYN-ACK after `server_leg_s`, ACK after `client_leg_s` more, for each of len(t) clients."""
        n = len(t)
        cseq, sseq = rng.integers(0, 1 << 31, n), rng.integers(0, 1 << 31, n)
        self.add(t, clients, servers, sports, dport, cseq, 0, SYN, False)
        self.add(t + server_leg_s, servers, clients, dport, sports, sseq, cseq + 1, SYN | ACK, True)
        self.add(t + server_leg_s + client_leg_s, clients, servers, sports, dport, cseq + 1, sseq + 1, ACK, False)

    def write(self, path: Path) -> int:
        cols = [np.concatenate(col) for col in zip(*self.parts)]
        t = cols[0]
        return write_pcap(path, t, frames(*cols[1:]))


def _web_clients(rng, n):
    return (_ip4("10.31.0.0") + rng.integers(1, 60000, n)).astype(np.uint32)


def syn_flood_spoofed(out_dir: Path) -> dict:
    path = out_dir / "syn-flood-spoofed.pcap"
    rng = np.random.default_rng(1202)
    p = _Packets()
    server = _ip4(WEB_SERVER)
    # ordinary clients all along: 15 handshakes a second over 5 s
    t = np.sort(rng.uniform(0.0, 5.0, 75))
    p.handshakes(t, _web_clients(rng, 75), server, rng.integers(32768, 61000, 75), 443, 0.0004, 0.012, rng)
    # the flood: 3,000 SYN/s from 1 s to 4 s, random sources anywhere (spoofed), random ports and sequence numbers
    n = 9000
    t = 1.0 + np.sort(rng.uniform(0.0, 3.0, n))
    sources = rng.integers(_ip4("1.0.0.0"), _ip4("223.255.255.255"), n).astype(np.uint32)
    sports = rng.integers(1024, 65535, n)
    seq = rng.integers(0, 1 << 32, n)
    p.add(t, sources, server, sports, 443, seq, 0, SYN, False)
    # the server, overwhelmed, answers one SYN in twenty
    answered = np.flatnonzero(rng.random(n) < 0.05)
    p.add(t[answered] + 0.0004, server, sources[answered], 443, sports[answered],
          rng.integers(0, 1 << 31, len(answered)), seq[answered] + 1, SYN | ACK, True)
    count = p.write(path)
    return {"file": path.name, "packets": count,
            "what": "spoofed-source SYN flood, 3,000 SYN/s for 3 s at 10.30.0.80:443, which answers 1 in 20, "
                    "among 15 genuine handshakes a second",
            "must_yield": [{"rule": "syn-flood", "severity_at_least": "high"}],
            "must_not_yield": [{"rule": "syn-flood", "severity_above": "high"},
                               {"rule": "handshake-rtt", "severity_above": "info"}],
            # the modelled conntrack table the flood fills names its victim: one incident, the flood its root cause
            "incidents": [{"root_cause": "syn-flood", "findings": ["syn-flood", "conntrack-pressure"]}]}


def syn_flash_crowd(out_dir: Path) -> dict:
    path = out_dir / "syn-flash-crowd.pcap"
    rng = np.random.default_rng(1203)
    p = _Packets()
    n = 1800
    t = np.sort(rng.uniform(0.0, 3.0, n))
    p.handshakes(t, _web_clients(rng, n), _ip4(WEB_SERVER), rng.integers(32768, 61000, n), 443, 0.0006,
                 rng.uniform(0.005, 0.080, n), rng)
    count = p.write(path)
    return {"file": path.name, "packets": count,
            "what": "near-miss: a flash crowd, 600 new clients a second for 3 s at 10.30.0.80:443, every "
                    "handshake completed",
            "must_yield": [],
            "must_not_yield": [{"rule": "*", "severity_above": "info"}]}


def syn_flood_ingress_only(out_dir: Path) -> dict:
    path = out_dir / "syn-flood-ingress-only.pcap"
    rng = np.random.default_rng(1204)
    p = _Packets()
    n = 1800
    t = np.sort(rng.uniform(0.0, 3.0, n))
    sources = (_ip4("192.0.2.0") + rng.integers(1, 41, n)).astype(np.uint32)
    p.add(t, sources, _ip4(WEB_SERVER), rng.integers(1024, 65535, n), 443, rng.integers(0, 1 << 32, n), 0, SYN,
          False)
    count = p.write(path)
    return {"file": path.name, "packets": count,
            "what": "600 SYN/s for 3 s from 40 sources to 10.30.0.80:443 on a mirror of the ingress direction "
                    "only: the server is never seen sending",
            "must_yield": [{"rule": "syn-flood", "severity_at_least": "low"}],
            "must_not_yield": [{"rule": "syn-flood", "severity_above": "low"}]}


def _rtt_traffic(rng, p, seconds, per_second, servers, leg_of):
    """`per_second` handshakes a second with the given servers for `seconds`; leg_of(t, server) is the SYN ->
    SYN-ACK time of each."""
    n = seconds * per_second
    t = np.sort(rng.uniform(0.0, seconds, n))
    server = servers(t)
    clients = (_ip4("10.40.0.0") + rng.integers(1, 250, n)).astype(np.uint32)
    leg = leg_of(t, server) * rng.uniform(0.95, 1.05, n)
    p.handshakes(t, clients, server, rng.integers(32768, 61000, n), 443, leg, rng.uniform(0.0001, 0.0003, n), rng)


def handshake_rtt_jump(out_dir: Path) -> dict:
    path = out_dir / "handshake-rtt-jump.pcap"
    rng = np.random.default_rng(1205)
    p = _Packets()
    pool = np.array([_ip4(f"198.51.100.{k}") for k in range(10, 30)], np.uint32)
    _rtt_traffic(rng, p, 120, 3, lambda t: pool[rng.integers(0, len(pool), len(t))],
                 lambda t, s: np.where(t >= 80.0, 0.350, 0.020))
    count = p.write(path)
    return {"file": path.name, "packets": count,
            "what": "3 handshakes a second with 20 internet servers for 2 minutes; from 80 s on, SYN -> SYN-ACK "
                    "grows from 20 ms to 350 ms",
            "must_yield": [{"rule": "handshake-rtt", "severity_at_least": "high"}],
            "must_not_yield": [{"rule": "handshake-rtt", "severity_above": "high"},
                               {"rule": "syn-flood", "severity_above": "info"}]}


def handshake_rtt_distant(out_dir: Path) -> dict:
    path = out_dir / "handshake-rtt-distant.pcap"
    rng = np.random.default_rng(1206)
    p = _Packets()
    near = np.array([_ip4(f"198.51.100.{k}") for k in range(10, 30)], np.uint32)
    distant = np.array([_ip4(f"203.0.113.{k}") for k in (7, 8, 9)], np.uint32)

    def servers(t):
        # the distant servers' share grows from 20 % to 70 % of the handshakes for the last 40 s
        share = np.where(t >= 80.0, 0.7, 0.2)
        far = rng.random(len(t)) < share
        return np.where(far, distant[rng.integers(0, 3, len(t))], near[rng.integers(0, len(near), len(t))])

    _rtt_traffic(rng, p, 120, 4, servers, lambda t, s: np.where(np.isin(s, distant), 0.300, 0.020))
    count = p.write(path)
    return {"file": path.name, "packets": count,
            "what": "near-miss: handshakes with near servers at 20 ms and three distant ones at 300 ms all along, "
                    "the distant ones rising from 20 % to 70 % of the handshakes after 80 s",
            "must_yield": [],
            "must_not_yield": [{"rule": "*", "severity_above": "info"}]}


CAPTURES = [syn_flood_spoofed, syn_flash_crowd, syn_flood_ingress_only, handshake_rtt_jump, handshake_rtt_distant]

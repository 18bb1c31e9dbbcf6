"""Captures whose faults are the capture's own: a trace appended to itself, fuzzed frames, rewritten addresses,
one direction mirrored (issue 27).

Each is built from one office trace that holds a real incident, a local
host's port scan (29 closed ports of a server, none answered: scan at
medium), beside ordinary sessions and name lookups. Read clean it is that
incident; the same trace appended to itself, or fuzzed where the scan's
frames are, is a damaged capture whose findings the confidence model holds
at low; with its addresses rewritten (an anonymised capture whose checksums
were not fixed) it is the same incident; mirrored one way, the model says
that what looks unanswered may be unseen.
"""
from __future__ import annotations

import random
import struct
from pathlib import Path

from common import T0, tcp_session
from scapy.all import DNS, DNSQR, IP, TCP, UDP, Ether

CLIENT_MAC, SERVER_MAC, GATEWAY_MAC = "00:16:3e:10:00:01", "00:16:3e:10:00:02", "00:16:3e:10:00:fe"
CLIENT, SERVER, RESOLVER = "10.20.0.15", "10.20.0.80", "10.20.0.53"
SCANNER_MAC, SCANNER = "00:16:3e:10:00:66", "10.20.0.66"
SCANNED_PORTS = 29
# the fuzzed copy: each frame is hit with this probability (the scan's SYNs always), 1 to 3 bits a frame
FUZZ_SHARE = 0.25
# rewritten addresses: what an anonymiser maps 10.20.0.0/24 to, leaving every IPv4 checksum as it was
REWRITTEN_PREFIX = bytes([172, 31, 7])


def office_trace(seed: int = 27) -> list[tuple[float, bytes, bool]]:
    """(seconds after T0, frame bytes, whether the frame goes from a client toward a server) of the office
    trace: ten web sessions, name lookups, and the port scan at 4 s."""
    rng = random.Random(seed)
    c, s = Ether(src=CLIENT_MAC, dst=SERVER_MAC), Ether(src=SERVER_MAC, dst=CLIENT_MAC)
    out = []
    for k in range(10):
        start = 0.5 + k * 0.7
        session = tcp_session(c, s, IP(src=CLIENT, dst=SERVER, id=100 + k), IP(src=SERVER, dst=CLIENT, id=900 + k),
                              40000 + k, 443, start, [(b"GET / HTTP/1.1\r\n\r\n", b"HTTP/1.1 200 OK\r\n\r\n" * 20)],
                              rng)
        out += [(t, bytes(pkt), pkt[Ether].src == CLIENT_MAC) for t, pkt in session]
    for k in range(6):
        query = (Ether(src=CLIENT_MAC, dst=GATEWAY_MAC) / IP(src=CLIENT, dst=RESOLVER, id=300 + k)
                 / UDP(sport=53000 + k, dport=53) / DNS(id=k, rd=1, qd=DNSQR(qname=f"host{k}.example.")))
        answer = (Ether(src=GATEWAY_MAC, dst=CLIENT_MAC) / IP(src=RESOLVER, dst=CLIENT, id=700 + k)
                  / UDP(sport=53, dport=53000 + k) / DNS(id=k, qr=1, rd=1, ra=1, qd=DNSQR(qname=f"host{k}.example.")))
        out += [(1.0 + k, bytes(query), True), (1.004 + k, bytes(answer), False)]
    for k in range(SCANNED_PORTS):
        probe = (Ether(src=SCANNER_MAC, dst=SERVER_MAC) / IP(src=SCANNER, dst=SERVER, id=5000 + k)
                 / TCP(sport=61000, dport=1000 + 37 * k, flags="S", seq=rng.randrange(1 << 32)))
        out.append((4.0 + k * 0.05, bytes(probe), True))
    return sorted(out, key=lambda item: item[0])


def _write(path: Path, frames) -> int:
    """Write (seconds after T0, bytes) in the order given (not sorted: a capture's faults are its order)."""
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))     # pcap, µs, Ethernet
        for offset, data in frames:
            usec = round(offset * 1e6)
            out.write(struct.pack("<IIII", T0 + usec // 1_000_000, usec % 1_000_000, len(data), len(data)) + data)
    return len(frames)


# where a scan probe is hit: its IPv4 identification and TTL (the probe still reads as one, its checksum fails)
PROBE_FLIP_BYTES = (18, 19, 22)


def _flip(data: bytes, rng: random.Random, scan_probe: bool) -> bytes:
    """1 to 3 bits flipped: in a scan probe's IPv4 identification or TTL (its header checksum then fails),
    anywhere in another frame (an Ethernet address, a header, a payload)."""
    frame = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        at = rng.choice(PROBE_FLIP_BYTES) if scan_probe else rng.randrange(len(frame))
        frame[at] ^= 1 << rng.randrange(8)
    return bytes(frame)


def _entry(name: str, packets: int, what: str, must_yield: list, must_not_yield: list) -> dict:
    return {"file": name, "packets": packets, "what": what, "must_yield": must_yield,
            "must_not_yield": must_not_yield}


def quality_baseline(out_dir: Path) -> dict:
    frames = [(t, data) for t, data, _ in office_trace()]
    name = "quality-baseline.pcap"
    return _entry(name, _write(out_dir / name, frames),
                  "the office trace the quality captures are made of, clean: a local host scans 29 closed ports",
                  [{"rule": "scan", "severity_at_least": "medium"}], [{"rule": "*", "severity_above": "medium"}])


def quality_appended(out_dir: Path) -> dict:
    frames = [(t, data) for t, data, _ in office_trace()]
    name = "quality-appended.pcap"
    return _entry(name, _write(out_dir / name, frames + frames),
                  "near-miss: the office trace appended to itself (time jumps back, every frame again with its "
                  "bytes and timestamp): a duplicated capture, its scan held at low confidence",
                  [{"rule": "scan", "severity_at_least": "low"}], [{"rule": "*", "severity_above": "low"}])


def quality_fuzzed(out_dir: Path) -> dict:
    rng = random.Random(2707)
    frames = []
    for t, data, _ in office_trace():
        probe = data[12:14] == b"\x08\x00" and data[23] == 6 and data[47] == 0x02
        frames.append((t, _flip(data, rng, probe) if probe or rng.random() < FUZZ_SHARE else data))
    name = "quality-fuzzed.pcap"
    return _entry(name, _write(out_dir / name, frames),
                  "near-miss: the office trace fuzzed, 1 to 3 bits flipped in a quarter of its frames and in every "
                  "scan probe's IPv4 header: what the damaged frames show is held at low",
                  [{"rule": "scan", "severity_at_least": "low"}], [{"rule": "*", "severity_above": "low"}])


def quality_rewritten(out_dir: Path) -> dict:
    frames = []
    for t, data, _ in office_trace():
        frame = bytearray(data)
        if frame[12:14] == b"\x08\x00":
            for at in (26, 30):             # the IPv4 source and destination, checksums left as they were
                frame[at:at + 3] = REWRITTEN_PREFIX
        frames.append((t, bytes(frame)))
    name = "quality-rewritten.pcap"
    return _entry(name, _write(out_dir / name, frames),
                  "the office trace anonymised: 10.20.0.0/24 rewritten to 172.31.7.0/24 without fixing a checksum; "
                  "an edited capture, not a damaged one: the scan stays what it is",
                  [{"rule": "scan", "severity_at_least": "medium"}], [{"rule": "*", "severity_above": "medium"}])


def quality_one_way(out_dir: Path) -> dict:
    frames = [(t, data) for t, data, toward in office_trace() if toward]
    name = "quality-one-way.pcap"
    return _entry(name, _write(out_dir / name, frames),
                  "the office trace as a mirror of one direction sees it: only the clients' side of every "
                  "connection; the scan's probes went unanswered here as on the wire",
                  [{"rule": "scan", "severity_at_least": "medium"}], [{"rule": "*", "severity_above": "medium"}])


CAPTURES = [quality_baseline, quality_appended, quality_fuzzed, quality_rewritten, quality_one_way]

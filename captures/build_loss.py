"""Capture-loss captures (incident 2: "our mirror port couldn't keep up"): TCP transfers the capture lost
segments of, a pcapng whose interface statistics count drops, and the near-misses.

Frames are built with struct, not scapy: a few thousand small segments in
a second. Each transfer is a client fetching data from a server over one
TCP connection: handshake, data segments of SEGMENT bytes, the client
acking every second segment (delayed ACK, RFC 9293 3.8.6.3), FIN both
ways. A segment "missing" is one the receiver got and acked but the
capture never held.
"""
from __future__ import annotations

import random
import struct
from pathlib import Path

from common import T0

SEGMENT = 200                 # payload bytes per data segment: small frames keep the files small
CLIENT_MAC, SERVER_MAC = bytes.fromhex("02005e300010"), bytes.fromhex("02005e300001")
SNAPLEN = 65535
SHORT_SNAPLEN = 96            # tcpdump -s 96: headers only

# pcapng block types and interface statistics options (draft-ietf-opsawg-pcapng section 4.6)
SHB, IDB, EPB, ISB = 0x0A0D0D0A, 1, 6, 5
ISB_STARTTIME, ISB_ENDTIME, ISB_IFRECV, ISB_IFDROP, ISB_USRDELIV = 2, 3, 4, 5, 8


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _ip4(text: str) -> bytes:
    return bytes(int(part) for part in text.split("."))


def tcp_frame(src, dst, sport, dport, flags, seq, ack, payload=0, ip_id=0, total_length=None) -> bytes:
    """An Ethernet/IPv4/TCP frame with `payload` zero bytes and valid checksums (flags: 'S', 'SA', 'A', 'PA',
    'FA'); `total_length` overrides the IP header's (0 for a segmentation-offload frame)."""
    bits = {"S": 0x02, "A": 0x10, "P": 0x08, "F": 0x01, "R": 0x04}
    flag_bits = sum(bits[c] for c in flags)
    body = bytes(payload)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq % 2**32, ack % 2**32 if "A" in flags else 0, 5 << 4,
                      flag_bits, 65535, 0, 0)
    s, d = _ip4(src), _ip4(dst)
    pseudo = s + d + struct.pack("!BBH", 0, 6, len(tcp) + len(body))
    tcp = tcp[:16] + struct.pack("!H", _checksum(pseudo + tcp + body)) + tcp[18:]
    length = 20 + len(tcp) + len(body) if total_length is None else total_length
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, length, ip_id & 0xFFFF, 0x4000, 64, 6, 0, s, d)
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    to_server = dst.startswith("198.")
    eth = (SERVER_MAC + CLIENT_MAC) if to_server else (CLIENT_MAC + SERVER_MAC)
    return eth + b"\x08\x00" + ip + tcp + body


def transfer(t, client, server, cport, segments, missing=lambda i: False, gap_s=0.0004, rng=None,
             handshake=True, directions=("c2s", "s2c")):
    """(time, frame) of one download of `segments` data segments; `missing(i)` drops data segment i from the
    capture; without `handshake` the capture starts after it (picked up mid-stream); `directions` keeps
    only the client's ('c2s') or the server's ('s2c') packets."""
    rng = rng or random.Random(0)
    cseq, sseq = rng.randrange(1 << 31), rng.randrange(1 << 31)
    out = []

    def add(when, frame, direction):
        if direction in directions:
            out.append((when, frame))

    if handshake:
        add(t, tcp_frame(client, server, cport, 80, "S", cseq, 0), "c2s")
        add(t + 0.001, tcp_frame(server, client, 80, cport, "SA", sseq, cseq + 1), "s2c")
        add(t + 0.002, tcp_frame(client, server, cport, 80, "A", cseq + 1, sseq + 1), "c2s")
    cseq, sseq = cseq + 1, sseq + 1
    add(t + 0.003, tcp_frame(client, server, cport, 80, "PA", cseq, sseq, payload=100), "c2s")
    cseq += 100
    now = t + 0.004
    for i in range(segments):
        if not missing(i):
            add(now, tcp_frame(server, client, 80, cport, "A", sseq + i * SEGMENT, cseq, payload=SEGMENT), "s2c")
        now += gap_s
        if i % 2:
            add(now, tcp_frame(client, server, cport, 80, "A", cseq, sseq + (i + 1) * SEGMENT), "c2s")
            now += gap_s
    end = sseq + segments * SEGMENT
    add(now, tcp_frame(server, client, 80, cport, "FA", end, cseq), "s2c")
    add(now + 0.001, tcp_frame(client, server, cport, 80, "FA", cseq, end + 1), "c2s")
    add(now + 0.002, tcp_frame(server, client, 80, cport, "A", end + 1, cseq + 1), "s2c")
    return out


def _stamp(offset: float) -> tuple[int, int]:
    us = round((T0 + offset) * 1e6)
    return us // 1_000_000, us % 1_000_000


def write_pcap(path: Path, timed_frames, snaplen: int = SNAPLEN) -> int:
    """A pcap (microseconds, Ethernet) of (seconds after T0, frame) pairs in time order, cut at `snaplen`."""
    ordered = sorted(timed_frames, key=lambda item: item[0])
    with path.open("wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1))
        for offset, frame in ordered:
            sec, usec = _stamp(offset)
            kept = frame[:snaplen]
            out.write(struct.pack("<IIII", sec, usec, len(kept), len(frame)) + kept)
    return len(ordered)


def _block(kind: int, body: bytes) -> bytes:
    body += bytes(-len(body) % 4)
    length = len(body) + 12
    return struct.pack("<II", kind, length) + body + struct.pack("<I", length)


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + bytes(-len(value) % 4)


def write_pcapng_with_drops(path: Path, timed_frames, received: int, dropped: int) -> int:
    """A pcapng of one Ethernet interface ("eth1", microseconds) ending in an interface statistics block
    that counts `received` packets (isb_ifrecv, drops included, as Linux's libpcap counts them) and
    `dropped` (isb_ifdrop), as dumpcap writes it when the capture stops."""
    ordered = sorted(timed_frames, key=lambda item: item[0])
    blocks = [_block(SHB, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)),
              _block(IDB, struct.pack("<HHI", 1, 0, SNAPLEN) + _option(2, b"eth1") + _option(0, b""))]
    for offset, frame in ordered:
        us = round((T0 + offset) * 1e6)
        blocks.append(_block(EPB, struct.pack("<IIIII", 0, us >> 32, us & 0xFFFFFFFF, len(frame), len(frame))
                             + frame))

    def stamp(offset):
        us = round((T0 + offset) * 1e6)
        return struct.pack("<II", us >> 32, us & 0xFFFFFFFF)

    first, last = ordered[0][0], ordered[-1][0]
    options = (_option(ISB_STARTTIME, stamp(first)) + _option(ISB_ENDTIME, stamp(last))
               + _option(ISB_IFRECV, struct.pack("<Q", received)) + _option(ISB_IFDROP, struct.pack("<Q", dropped))
               + _option(ISB_USRDELIV, struct.pack("<Q", len(ordered))) + _option(0, b""))
    blocks.append(_block(ISB, struct.pack("<I", 0) + stamp(last) + options))
    path.write_bytes(b"".join(blocks))
    return len(ordered)


def _clients(n: int):
    return [(f"10.30.0.{10 + i}", 40000 + i) for i in range(n)]


SERVER = "198.51.100.80"


def loss_every_nth_segment(out_dir: Path) -> dict:
    name = "loss-every-nth-segment.pcap"
    rng = random.Random(51)
    frames = []
    for k, (client, port) in enumerate(_clients(4)):
        # every second data segment missing: each of the client's acks (after every second segment) passes one
        frames += transfer(0.5 + k * 0.7, client, SERVER, port, 120, missing=lambda i: i % 2 == 1, rng=rng)
    packets = write_pcap(out_dir / name, frames)
    return {"file": name, "packets": packets,
            "what": "four downloads whose every second data segment the capture never held (the client's acks "
                    "pass over each): a mirror port losing half the traffic",
            "must_yield": [{"rule": "capture-loss", "severity_at_least": "high"}],
            "must_not_yield": [{"rule": "*", "severity_above": "high"}]}


def loss_mirror_peak(out_dir: Path) -> dict:
    name = "loss-mirror-peak.pcap"
    rng = random.Random(52)
    frames = []
    clients = _clients(40)
    # minute 0 and minute 2: a few downloads, nothing lost; minute 1: the peak, many downloads at once, the
    # mirror port dropping one data segment in eight of those that arrive while it is saturated
    for k, (client, port) in enumerate(clients[:3]):
        frames += transfer(5 + k * 15, client, SERVER, port, 80, rng=rng)
    for k, (client, port) in enumerate(clients[3:15]):
        frames += transfer(62 + k * 0.2, client, SERVER, port, 80, missing=lambda i: i % 8 == 2,
                           gap_s=0.002, rng=rng)
    for k, (client, port) in enumerate(clients[15:18]):
        frames += transfer(125 + k * 15, client, SERVER, port, 80, rng=rng)
    packets = write_pcap(out_dir / name, frames)
    return {"file": name, "packets": packets,
            "what": "an oversubscribed SPAN port: quiet minutes lose nothing, the minute of peak traffic loses a "
                    "data segment in eight of the downloads' segments",
            "must_yield": [{"rule": "capture-loss", "severity_at_least": "medium"}],
            "must_not_yield": [{"rule": "capture-loss", "severity_above": "medium"},
                               {"rule": "*", "severity_above": "medium"}]}


def loss_interface_drops(out_dir: Path) -> dict:
    name = "loss-interface-drops.pcapng"
    rng = random.Random(53)
    frames = []
    for k, (client, port) in enumerate(_clients(3)):
        frames += transfer(1 + k * 5, client, SERVER, port, 60, rng=rng)
    received = round(len(frames) * 1.25)
    packets = write_pcapng_with_drops(out_dir / name, frames, received=received, dropped=received - len(frames))
    return {"file": name, "packets": packets,
            "what": "dumpcap's interface statistics at the end of the capture: a fifth of the packets the "
                    "interface received were dropped (isb_ifdrop), although the TCP in the file shows no gap",
            "must_yield": [{"rule": "capture-loss", "severity_at_least": "medium"}],
            "must_not_yield": [{"rule": "*", "severity_above": "medium"}]}


def loss_near_misses(out_dir: Path) -> dict:
    name = "loss-near-misses.pcap"
    rng = random.Random(54)
    frames = []
    clients = _clients(12)
    # picked up mid-stream: the capture starts inside four downloads, after segments it never held
    for k, (client, port) in enumerate(clients[:4]):
        frames += [(t, f) for t, f in transfer(0.2 + k * 0.3, client, SERVER, port, 100, handshake=False,
                                               missing=lambda i: i < 10 or i % 3 == 0, rng=rng)]
    # one direction only (asymmetric routing, a one-way mirror session): the client's acks of data never
    # mirrored, and the server's data without the client's acks
    for k, (client, port) in enumerate(clients[4:8]):
        frames += transfer(2 + k * 0.3, client, SERVER, port, 100, rng=rng,
                           directions=("c2s",) if k % 2 == 0 else ("s2c",))
    packets = write_pcap(out_dir / name, frames)
    return {"file": name, "packets": packets,
            "what": "near-misses: downloads picked up mid-stream (their first segments never captured) and "
                    "downloads mirrored in one direction only (a one-sided capture): no capture loss",
            "must_yield": [],
            "must_not_yield": [{"rule": "capture-loss", "severity_above": "info"},
                               {"rule": "*", "severity_above": "low"}]}


def loss_snaplen(out_dir: Path) -> dict:
    name = "loss-snaplen-96.pcap"
    rng = random.Random(55)
    frames = []
    for k, (client, port) in enumerate(_clients(4)):
        frames += transfer(0.5 + k * 0.5, client, SERVER, port, 100, rng=rng)
    packets = write_pcap(out_dir / name, frames, snaplen=SHORT_SNAPLEN)
    return {"file": name, "packets": packets,
            "what": "near-miss: tcpdump -s 96 of four downloads: every data segment cut after its headers "
                    "(caplen below the wire length), bytes not captured by design, not lost",
            "must_yield": [],
            "must_not_yield": [{"rule": "capture-loss", "severity_above": "info"},
                               {"rule": "*", "severity_above": "low"}]}


CAPTURES = [loss_every_nth_segment, loss_mirror_peak, loss_interface_drops, loss_near_misses, loss_snaplen]

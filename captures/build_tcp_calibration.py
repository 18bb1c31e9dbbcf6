"""Calibration captures of handshake-rtt and capture-loss (issue 27): what other projects' captures showed them,
re-created, each beside the near-miss that must stay quiet.

Frames are built with struct (Ethernet, IPv4 with DF and a per-host IP ID,
TCP with an MSS option on SYNs, zero payload bytes), written as classic
pcap with microsecond stamps in the order given: the duplicated captures
need records out of time order.

- handshake-rtt-appended.pcap: 40 s of short web connections, then the same
  records appended (editcap/mergecap -a of a trace with itself): time jumps
  back to the start and every frame reappears with its bytes, IP ID and
  timestamp. Exact copies, not retransmissions: quiet.
- handshake-rtt-merged-twice.pcap: the same trace merged with itself
  (mergecap of two copies): every frame twice in a row, same timestamp: quiet.
- handshake-rtt-lost-syns.pcap: 67 handshakes over 10 minutes at a median
  of 18 ms; in 9 of them the first SYN went unanswered and the client sent
  it again (Linux after 1, 3, 7 s; Windows after 3, 9 s), so they took
  3-13 s: low, naming them.
- handshake-rtt-one-retried.pcap: 240 handshakes, one of which needed its
  SYN twice: the near-miss, quiet.
- loss-storage-writes.pcap: an iSCSI session picked up mid-stream (open for
  hours before the capture started) writing 64 KB bursts; the capture holds
  only the last segment of each burst, which the target acknowledges: high.
- loss-http-few-acks.pcap: one short HTTP download of 44 packets, 5 of whose
  client acks pass over segments the capture never held: low (too few acks
  to say how much).
- loss-pickup-near-misses.pcap: long-lived connections picked up mid-stream
  with a window of bytes in flight when the capture started (acked later,
  never captured: "common at capture start"), a long-lived session mirrored
  in one direction only, and a short download with a single lost segment:
  quiet (info at most).
"""
from __future__ import annotations

import random
import struct
from pathlib import Path

from common import T0

MAC = {"client": bytes.fromhex("02005e310010"), "server": bytes.fromhex("02005e310001")}
FLAGS = {"F": 0x01, "S": 0x02, "R": 0x04, "P": 0x08, "A": 0x10}
MSS = 1460
SEGMENT = 1448                # a full segment with timestamps off, as the storage and web transfers send
WRITE_BYTES = 65536           # an iSCSI initiator's Data-Out burst (MaxBurstLength 64 KB)
BHS = 48                      # iSCSI basic header segment (RFC 7143 11.2): command, R2T and response PDUs
HTTP_REQUEST = 180
ISCSI_PORT = 3260


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _ip4(text: str) -> bytes:
    return bytes(int(part) for part in text.split("."))


class Host:
    """An IPv4 host numbering its datagrams (the IP ID a copy of a frame repeats)."""

    def __init__(self, address: str, mac: bytes, first_id: int):
        self.address, self.mac, self.ip_id = address, mac, first_id

    def frame(self, peer: Host, sport: int, dport: int, flags: str, seq: int, ack: int = 0, payload: int = 0,
              window: int = 64240) -> bytes:
        """An Ethernet/IPv4/TCP frame to `peer` carrying `payload` zero bytes, checksums valid; a SYN carries an
        MSS option."""
        options = struct.pack("!BBH", 2, 4, MSS) if "S" in flags else b""
        bits = sum(FLAGS[c] for c in flags)
        tcp = struct.pack("!HHIIBBHHH", sport, dport, seq % 2**32, ack % 2**32 if "A" in flags else 0,
                          (5 + len(options) // 4) << 4, bits, window, 0, 0) + options
        body = bytes(payload)
        s, d = _ip4(self.address), _ip4(peer.address)
        pseudo = s + d + struct.pack("!BBH", 0, 6, len(tcp) + len(body))
        tcp = tcp[:16] + struct.pack("!H", _checksum(pseudo + tcp + body)) + tcp[18:]
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + len(body), self.ip_id & 0xFFFF, 0x4000, 64, 6,
                         0, s, d)
        self.ip_id += 1
        ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
        return peer.mac + self.mac + b"\x08\x00" + ip + tcp + body


def _record(offset: float, frame: bytes, caplen: int | None = None) -> bytes:
    us = round((T0 + offset) * 1e6)
    kept = frame if caplen is None else frame[:caplen]
    return struct.pack("<IIII", us // 1_000_000, us % 1_000_000, len(kept), len(frame)) + kept


def write_records(path: Path, records: list[bytes]) -> int:
    """A classic pcap (microseconds, Ethernet) of the records as given, in that order."""
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) + b"".join(records))
    return len(records)


def in_time_order(timed_frames) -> list[bytes]:
    return [_record(t, f) for t, f in sorted(timed_frames, key=lambda item: item[0])]


# ---- handshake-rtt ---------------------------------------------------------------------------------------------
def web_connection(t, client: Host, server: Host, cport: int, rng: random.Random, server_leg=0.018,
                   client_leg=0.0003, syn_retries=(), response_segments=2, answered=True):
    """(time, frame) of one short HTTPS-like connection from `client`: SYN (sent again after each delay of
    `syn_retries`, the earlier ones unanswered), SYN-ACK `server_leg` after the last SYN, ACK, a request, a response
    of `response_segments` segments, the client's ack, FIN both ways. Without `answered` only the SYNs."""
    out = []
    cseq, sseq = rng.randrange(1 << 31), rng.randrange(1 << 31)
    out.append((t, client.frame(server, cport, 443, "S", cseq)))
    for delay in syn_retries:
        t += delay
        out.append((t, client.frame(server, cport, 443, "S", cseq)))
    if not answered:
        return out
    t += server_leg
    out.append((t, server.frame(client, 443, cport, "SA", sseq, cseq + 1)))
    t += client_leg
    cseq, sseq = cseq + 1, sseq + 1
    out.append((t, client.frame(server, cport, 443, "A", cseq, sseq)))
    out.append((t + 0.0001, client.frame(server, cport, 443, "PA", cseq, sseq, payload=HTTP_REQUEST)))
    cseq += HTTP_REQUEST
    t += server_leg + 0.004
    for _ in range(response_segments):
        out.append((t, server.frame(client, 443, cport, "A", sseq, cseq, payload=SEGMENT)))
        sseq += SEGMENT
        t += 0.0002
    out.append((t + client_leg, client.frame(server, cport, 443, "A", cseq, sseq)))
    t += 0.05
    out.append((t, client.frame(server, cport, 443, "FA", cseq, sseq)))
    out.append((t + server_leg, server.frame(client, 443, cport, "FA", sseq, cseq + 1)))
    out.append((t + server_leg + client_leg, client.frame(server, cport, 443, "A", cseq + 1, sseq + 1)))
    return out


def _web_hosts(rng: random.Random, clients: int, servers: int):
    return ([Host(f"10.41.0.{10 + k}", MAC["client"], rng.randrange(1 << 16)) for k in range(clients)],
            [Host(f"198.51.100.{20 + k}", MAC["server"], rng.randrange(1 << 16)) for k in range(servers)])


def _web_trace(seed: int) -> list[bytes]:
    """40 s of short connections, 3 a second, from 30 clients to 6 web servers (18 ms away), ending with a
    SYN whose answer the trace stopped before: the trace a duplicated capture repeats."""
    rng = random.Random(seed)
    clients, servers = _web_hosts(rng, 30, 6)
    frames = []
    for k in range(120):
        frames += web_connection(k / 3 + rng.uniform(0, 0.2), rng.choice(clients), rng.choice(servers),
                                 40000 + k, rng, server_leg=0.018 * rng.uniform(0.9, 1.1))
    frames += web_connection(40.5, clients[0], servers[0], 40999, rng, answered=False)
    return in_time_order(frames)


def handshake_rtt_appended(out_dir: Path) -> dict:
    name = "handshake-rtt-appended.pcap"
    trace = _web_trace(2701)
    packets = write_records(out_dir / name, trace + trace)
    return {"file": name, "packets": packets,
            "what": "near-miss: 40 s of short web connections (120 handshakes at 18 ms) and the same records "
                    "appended (a trace appended to itself): time jumps back and every frame reappears with its "
                    "bytes, IP ID and timestamp; copies, not SYN retransmissions",
            "must_yield": [],
            "must_not_yield": [{"rule": "handshake-rtt", "severity_above": "info"},
                               {"rule": "capture-loss", "severity_above": "info"}]}


def handshake_rtt_merged_twice(out_dir: Path) -> dict:
    name = "handshake-rtt-merged-twice.pcap"
    trace = _web_trace(2701)
    packets = write_records(out_dir / name, [record for record in trace for _ in range(2)])
    return {"file": name, "packets": packets,
            "what": "near-miss: the same web trace merged with itself (every frame twice in a row, same "
                    "timestamp); copies, not SYN retransmissions",
            "must_yield": [],
            "must_not_yield": [{"rule": "handshake-rtt", "severity_above": "info"},
                               {"rule": "capture-loss", "severity_above": "info"}]}


# Retry schedules of the first SYN (seconds after the SYN before): Linux doubles from TCP_TIMEOUT_INIT (1 s),
# Windows from its initial RTO of 3 s
LINUX_RETRIES = (1.0, 2.0, 4.0)
WINDOWS_RETRIES = (3.0, 6.0)


def handshake_rtt_lost_syns(out_dir: Path) -> dict:
    name = "handshake-rtt-lost-syns.pcap"
    rng = random.Random(2702)
    clients, servers = _web_hosts(rng, 12, 5)
    # which of the 67 handshakes lost their first SYN(s), and how the client retried
    retried = {4: WINDOWS_RETRIES[:1], 11: LINUX_RETRIES[:2], 19: WINDOWS_RETRIES, 26: LINUX_RETRIES[:2],
               33: WINDOWS_RETRIES[:1], 41: LINUX_RETRIES, 48: WINDOWS_RETRIES[:1], 55: LINUX_RETRIES[:2],
               62: (3.0, 6.0, 4.0)}
    frames = []
    for k in range(67):
        frames += web_connection(k * 9 + rng.uniform(0, 3), rng.choice(clients), rng.choice(servers), 41000 + k,
                                 rng, server_leg=0.018 * rng.uniform(0.8, 1.2), syn_retries=retried.get(k, ()))
    packets = write_records(out_dir / name, in_time_order(frames))
    return {"file": name, "packets": packets,
            "what": "67 web handshakes over 10 minutes at a median of 18 ms; in 9 of them the first SYN went "
                    "unanswered and the client sent it again after 1-3 s and more, so they took 3-13 s",
            "must_yield": [{"rule": "handshake-rtt", "severity_at_least": "low"}],
            "must_not_yield": [{"rule": "handshake-rtt", "severity_above": "low"},
                               {"rule": "*", "severity_above": "low"}]}


def handshake_rtt_one_retried(out_dir: Path) -> dict:
    name = "handshake-rtt-one-retried.pcap"
    rng = random.Random(2703)
    clients, servers = _web_hosts(rng, 40, 8)
    frames = []
    for k in range(240):
        frames += web_connection(k + rng.uniform(0, 0.5), rng.choice(clients), rng.choice(servers), 42000 + k, rng,
                                 server_leg=0.018 * rng.uniform(0.8, 1.2),
                                 syn_retries=LINUX_RETRIES[:1] if k == 117 else ())
    packets = write_records(out_dir / name, in_time_order(frames))
    return {"file": name, "packets": packets,
            "what": "near-miss: 240 web handshakes over 4 minutes at 18 ms, one of which needed its SYN twice",
            "must_yield": [],
            "must_not_yield": [{"rule": "handshake-rtt", "severity_above": "info"},
                               {"rule": "*", "severity_above": "info"}]}


# ---- capture-loss ----------------------------------------------------------------------------------------------
def iscsi_writes(t, initiator: Host, target: Host, iport: int, writes: int, every_s: float, rng: random.Random,
                 kept=lambda segment, last: True, pickup=True):
    """(time, frame) of an iSCSI session writing `writes` bursts of WRITE_BYTES, one every `every_s`: the SCSI
    command, the target's R2T, the Data-Out burst in SEGMENT-byte segments (kept(i, last) says which the capture
    holds), the target's ack of the burst, its SCSI response and the initiator's ack. With `pickup` the session
    opened long before: the capture holds no handshake."""
    iseq, tseq = rng.randrange(1 << 31), rng.randrange(1 << 31)
    out = []
    if not pickup:
        out.append((t - 0.002, initiator.frame(target, iport, ISCSI_PORT, "S", iseq - 1)))
        out.append((t - 0.0015, target.frame(initiator, ISCSI_PORT, iport, "SA", tseq - 1, iseq)))
        out.append((t - 0.001, initiator.frame(target, iport, ISCSI_PORT, "A", iseq, tseq)))
    for w in range(writes):
        now = t + w * every_s
        out.append((now, initiator.frame(target, iport, ISCSI_PORT, "PA", iseq, tseq, payload=BHS)))
        iseq += BHS
        now += 0.0002
        out.append((now, target.frame(initiator, ISCSI_PORT, iport, "PA", tseq, iseq, payload=BHS)))
        tseq += BHS
        now += 0.0001
        sizes = [SEGMENT] * (WRITE_BYTES // SEGMENT) + [WRITE_BYTES % SEGMENT]
        for i, size in enumerate(sizes):
            last = i == len(sizes) - 1
            frame = initiator.frame(target, iport, ISCSI_PORT, "PA" if last else "A", iseq, tseq, payload=size)
            if kept(i, last):
                out.append((now, frame))
            iseq += size
            now += 0.00001
        out.append((now + 0.0001, target.frame(initiator, ISCSI_PORT, iport, "A", tseq, iseq)))
        now += 0.0004
        out.append((now, target.frame(initiator, ISCSI_PORT, iport, "PA", tseq, iseq, payload=BHS)))
        tseq += BHS
        out.append((now + 0.0002, initiator.frame(target, iport, ISCSI_PORT, "A", iseq, tseq)))
    return out


def loss_storage_writes(out_dir: Path) -> dict:
    name = "loss-storage-writes.pcap"
    rng = random.Random(2704)
    target = Host("10.42.0.50", MAC["server"], rng.randrange(1 << 16))
    frames = []
    for k in range(2):
        initiator = Host(f"10.42.0.{11 + k}", MAC["client"], rng.randrange(1 << 16))
        frames += iscsi_writes(0.01 + k * 0.003, initiator, target, 51000 + k, 350, 0.2, rng,
                               kept=lambda i, last: last)
    packets = write_records(out_dir / name, in_time_order(frames))
    return {"file": name, "packets": packets,
            "what": "two iSCSI sessions picked up mid-stream writing 64 KB bursts; the capture holds only the last "
                    "segment of each burst, which the target acknowledges (700 acks over bytes never captured)",
            "must_yield": [{"rule": "capture-loss", "severity_at_least": "high"}],
            "must_not_yield": [{"rule": "*", "severity_above": "high"}]}


def http_download(t, client: Host, server: Host, cport: int, segments: int, rng: random.Random, lost=()):
    """(time, frame) of one HTTP download: handshake, GET, `segments` data segments of SEGMENT bytes (those in
    `lost` never captured), the client acking every second one (and the last), FIN both ways."""
    cseq, sseq = rng.randrange(1 << 31), rng.randrange(1 << 31)
    out = [(t, client.frame(server, cport, 80, "S", cseq)),
           (t + 0.030, server.frame(client, 80, cport, "SA", sseq, cseq + 1))]
    cseq, sseq = cseq + 1, sseq + 1
    out.append((t + 0.0302, client.frame(server, cport, 80, "A", cseq, sseq)))
    out.append((t + 0.0303, client.frame(server, cport, 80, "PA", cseq, sseq, payload=HTTP_REQUEST)))
    cseq += HTTP_REQUEST
    now = t + 0.061
    for i in range(segments):
        if i not in lost:
            out.append((now, server.frame(client, 80, cport, "A" if i < segments - 1 else "PA", sseq, cseq,
                                          payload=SEGMENT)))
        sseq += SEGMENT
        now += 0.0012
        if i % 2 == 1 or i == segments - 1:
            out.append((now, client.frame(server, cport, 80, "A", cseq, sseq)))
    now += 0.01
    out.append((now, client.frame(server, cport, 80, "FA", cseq, sseq)))
    out.append((now + 0.030, server.frame(client, 80, cport, "FA", sseq, cseq + 1)))
    out.append((now + 0.0302, client.frame(server, cport, 80, "A", cseq + 1, sseq + 1)))
    return out


def loss_http_few_acks(out_dir: Path) -> dict:
    name = "loss-http-few-acks.pcap"
    rng = random.Random(2705)
    client = Host("10.43.0.20", MAC["client"], rng.randrange(1 << 16))
    server = Host("198.51.100.80", MAC["server"], rng.randrange(1 << 16))
    frames = http_download(0.1, client, server, 50123, 28, rng, lost={4, 9, 14, 19, 24})
    packets = write_records(out_dir / name, in_time_order(frames))
    return {"file": name, "packets": packets,
            "what": "one short HTTP download of 44 packets: 5 of the client's 14 acks pass over a segment the "
                    "capture never held; too few acks to say how much the capture lost",
            "must_yield": [{"rule": "capture-loss", "severity_at_least": "low"}],
            "must_not_yield": [{"rule": "capture-loss", "severity_above": "low"},
                               {"rule": "*", "severity_above": "low"}]}


SMALL_SEGMENT = 536           # RFC 9293's default MSS: the long transfers of the near-misses stay small files


def bulk_pickup(t, sender: Host, receiver: Host, sport: int, dport: int, segments: int, rng: random.Random,
                in_flight: int = 20, every_s: float = 0.0003, directions=("data", "acks")):
    """(time, frame) of a long-lived bulk transfer picked up mid-stream: when the capture starts, `in_flight`
    segments (of SMALL_SEGMENT bytes) have already passed the capture point (the receiver acks them in the capture,
    their bytes never in it); then `segments` segments `every_s` apart, the receiver acking every second one, none
    lost. `directions` keeps the sender's data and/or the receiver's acks."""
    seq, peer = rng.randrange(1 << 31), rng.randrange(1 << 31)
    out = []
    now = t
    acked = seq
    seq += in_flight * SMALL_SEGMENT
    if "acks" in directions:
        # the first packet of the connection the capture holds: an ack of bytes sent before it started
        acked += 2 * SMALL_SEGMENT
        out.append((now, receiver.frame(sender, dport, sport, "A", peer, acked)))
        now += 0.0002
    for i in range(segments):
        if "data" in directions:
            out.append((now, sender.frame(receiver, sport, dport, "A", seq, peer, payload=SMALL_SEGMENT)))
        seq += SMALL_SEGMENT
        now += every_s / 2
        if i % 2 == 1 and "acks" in directions:
            # the receiver acks what arrived, one round trip behind: first the bytes in flight at the start
            acked = min(acked + 4 * SMALL_SEGMENT, seq)
            out.append((now, receiver.frame(sender, dport, sport, "A", peer, acked)))
        now += every_s / 2
    while "acks" in directions and acked < seq:
        acked = min(acked + 4 * SMALL_SEGMENT, seq)
        out.append((now, receiver.frame(sender, dport, sport, "A", peer, acked)))
        now += 0.001
    return out


def loss_pickup_near_misses(out_dir: Path) -> dict:
    name = "loss-pickup-near-misses.pcap"
    rng = random.Random(2706)
    server = Host("10.44.0.5", MAC["server"], rng.randrange(1 << 16))
    frames = []
    # three replication streams and a backup stream, open before the capture started, a window in flight each, for
    # 20 s (past the capture's first seconds, in which connections picked up mid-stream are left out)
    for k in range(4):
        client = Host(f"10.44.0.{20 + k}", MAC["client"], rng.randrange(1 << 16))
        frames += bulk_pickup(0.001 + k * 0.0007, server, client, 5432, 52000 + k, 400, rng, every_s=0.05)
    # a long-lived session mirrored in one direction only: the receiver's acks of bytes the capture never held
    lone = Host("10.44.0.30", MAC["client"], rng.randrange(1 << 16))
    frames += bulk_pickup(0.002, server, lone, 873, 53000, 400, rng, every_s=0.05, directions=("acks",))
    # a short download with one lost segment: a fact (info), not a capture point losing traffic
    web = Host("198.51.100.81", MAC["server"], rng.randrange(1 << 16))
    frames += http_download(0.5, Host("10.44.0.40", MAC["client"], rng.randrange(1 << 16)), web, 50200, 29, rng,
                            lost={12})
    packets = write_records(out_dir / name, in_time_order(frames))
    return {"file": name, "packets": packets,
            "what": "near-misses: bulk transfers picked up mid-stream with a window of bytes in flight when the "
                    "capture started (acked, never captured), a long-lived session mirrored in one direction, "
                    "and a short download with a single lost segment",
            "must_yield": [],
            "must_not_yield": [{"rule": "capture-loss", "severity_above": "info"},
                               {"rule": "*", "severity_above": "info"}]}


CAPTURES = [handshake_rtt_appended, handshake_rtt_merged_twice, handshake_rtt_lost_syns, handshake_rtt_one_retried,
            loss_storage_writes, loss_http_few_acks, loss_pickup_near_misses]

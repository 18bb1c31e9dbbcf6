"""RSS saturation captures (incident 2): a single-flow flood on a busy link, and an elephant flow.

Each is a short slice of a busy link as `tcpdump -s 96` would record it:
frames are cut at 96 bytes (headers only), the wire length is kept. The
rates are those of the incident's order (tens of thousands of packets per
second); the slices last a few hundred milliseconds, enough for the
rule's 100 ms bins. The busy balanced link, the near-miss, is in the
benign background of both and on its own in rss-balanced-busy.pcap.
A VXLAN tunnel carrying many flows fills one queue of a NIC that hashes
outer headers; a capture with one timestamp per second has no rate at all.
"""
from __future__ import annotations

import random
from pathlib import Path

from common import T0
from scapy.all import IP, TCP, UDP, Dot1Q, Ether, IPv6, Raw
from scapy.data import DLT_EN10MB
from scapy.layers.vxlan import VXLAN
from scapy.utils import PcapWriter

SNAPLEN = 96                # bytes kept per frame: every header, no payload
TUNNEL_SNAPLEN = 128        # the same for VXLAN: outer and inner headers
CLIENT_MAC, GATEWAY_MAC = "02:00:5e:20:00:10", "02:00:5e:20:00:01"


def _write(path: Path, timed_packets, snaplen: int = SNAPLEN) -> int:
    """Write (seconds after T0, packet or frame bytes) pairs in time order, cut at `snaplen`, wire length kept."""
    ordered = sorted(timed_packets, key=lambda item: item[0])
    writer = PcapWriter(str(path), linktype=DLT_EN10MB, snaplen=snaplen, sync=False)
    writer.write_header(None)
    for offset, packet in ordered:
        raw = bytes(packet)
        stamp = T0 + round(offset, 6)
        writer.write_packet(raw[:snaplen], sec=int(stamp), usec=round((stamp - int(stamp)) * 1e6),
                            caplen=min(len(raw), snaplen), wirelen=len(raw))
    writer.close()
    return len(ordered)


class _Background:
    """Many small flows between many hosts, IPv4 and IPv6, some on a VLAN: traffic that spreads."""

    def __init__(self, rng: random.Random, flows: int):
        self.rng = rng
        self.templates = []
        for i in range(flows):
            kind = i % 5
            client_port = 20000 + rng.randrange(40000)
            if kind == 3:
                eth = Ether(src=CLIENT_MAC, dst=GATEWAY_MAC)
                net = IPv6(src=f"2001:db8:20::{rng.randrange(1, 0xffff):x}", dst=f"2001:db8:99::{i + 1:x}")
            else:
                eth = Ether(src=CLIENT_MAC, dst=GATEWAY_MAC)
                if kind == 4:
                    eth = eth / Dot1Q(vlan=40)
                net = IP(src=f"10.20.{rng.randrange(1, 250)}.{rng.randrange(1, 250)}",
                         dst=f"198.51.100.{rng.randrange(1, 250)}")
            if kind in (0, 1, 3):
                l4 = TCP(sport=client_port, dport=rng.choice([443, 80, 22, 993]), flags="A",
                         seq=rng.randrange(1 << 32), ack=rng.randrange(1 << 32))
            else:
                l4 = UDP(sport=client_port, dport=rng.choice([53, 123, 443, 4500]))
            self.templates.append(eth / net / l4)

    def packets(self, start: float, end: float, rate_pps: float):
        """Frames at random times; each flow's frames of one size are built once (scapy is slow)."""
        out, built = [], {}
        for _ in range(int((end - start) * rate_pps)):
            pick = (self.rng.randrange(len(self.templates)), self.rng.choice([0, 40, 200, 1200, 1400]))
            if pick not in built:
                built[pick] = bytes(self.templates[pick[0]] / Raw(bytes(pick[1])))
            out.append((start + self.rng.random() * (end - start), built[pick]))
        return out


def rss_single_flow_flood(out_dir: Path) -> dict:
    """A UDP flood from one source (varying payload, not a loop) takes one queue for 100 ms of a busy link."""
    path = out_dir / "rss-single-flow-flood.pcap"
    rng = random.Random(2001)
    background = _Background(rng, 300)
    packets = background.packets(0.0, 0.3, 15000)
    eth = Ether(src=GATEWAY_MAC, dst=CLIENT_MAC)
    rate = 70000
    for k in range(int(0.1 * rate)):
        packets.append((0.1 + k / rate, eth / IP(src="198.18.7.7", dst="10.20.0.5", ttl=52, id=k & 0xFFFF) /
                        UDP(sport=40000, dport=27015) / Raw(k.to_bytes(4, "big") * 4)))
    count = _write(path, packets)
    return {"file": path.name, "packets": count,
            "what": "UDP flood from one source at 70,000 packets/s for 100 ms over 300 balanced background flows",
            "must_yield": [{"rule": "rss-saturation", "severity_at_least": "medium"}],
            "must_not_yield": [{"rule": "echo-loop", "severity_above": "info"},
                               {"rule": "pmtud-blackhole", "severity_above": "info"},
                               {"rule": "mss-violation", "severity_above": "info"}]}


def rss_balanced_busy(out_dir: Path) -> dict:
    """Near-miss: a busy link of 400 flows at 80,000 packets/s; every queue gets its fair share."""
    path = out_dir / "rss-balanced-busy.pcap"
    rng = random.Random(2002)
    packets = _Background(rng, 400).packets(0.0, 0.1, 80000)
    count = _write(path, packets)
    return {"file": path.name, "packets": count,
            "what": "busy balanced link: 400 TCP/UDP flows (IPv4, IPv6, VLAN) at 80,000 packets/s",
            "must_yield": [],
            "must_not_yield": [{"rule": "*", "severity_above": "info"}]}


def rss_elephant_flow(out_dir: Path) -> dict:
    """One IPv6 TCP bulk transfer at 70,000 segments/s: a real single-core load, not a loop."""
    path = out_dir / "rss-elephant-flow.pcap"
    rng = random.Random(2003)
    packets = _Background(rng, 200).packets(0.0, 0.3, 8000)
    eth = Ether(src=GATEWAY_MAC, dst=CLIENT_MAC)
    eth_r = Ether(src=CLIENT_MAC, dst=GATEWAY_MAC)
    server, client = "2001:db8:500::10", "2001:db8:20::77"
    seq, ack = 1_000_000, 5_000
    rate = 70000
    for k in range(int(0.1 * rate)):
        t = 0.1 + k / rate
        packets.append((t, eth / IPv6(src=server, dst=client) /
                        TCP(sport=443, dport=50123, flags="A", seq=seq, ack=ack) / Raw(bytes(1440))))
        seq += 1440
        if k % 2:
            packets.append((t + 0.000005, eth_r / IPv6(src=client, dst=server) /
                            TCP(sport=50123, dport=443, flags="A", seq=ack, ack=seq)))
    count = _write(path, packets)
    return {"file": path.name, "packets": count,
            "what": "IPv6 TCP elephant flow at 70,000 segments/s (sequence advancing, not a loop) with background",
            "must_yield": [{"rule": "rss-saturation", "severity_at_least": "medium"}],
            "must_not_yield": [{"rule": "rss-saturation", "severity_above": "medium"},
                               {"rule": "echo-loop", "severity_above": "info"},
                               {"rule": "mss-violation", "severity_above": "info"},
                               {"rule": "pmtud-blackhole", "severity_above": "info"}]}


def rss_vxlan_tunnel(out_dir: Path) -> dict:
    """300 flows inside one VXLAN tunnel at 70,000 packets/s: the NIC hashes the two tunnel endpoints only.

    The outer UDP source port carries each inner flow's entropy (RFC 7348
    section 5), which a NIC hashing UDP addresses only ignores; with
    inner-header RSS the same traffic spreads over every queue.
    """
    path = out_dir / "rss-vxlan-tunnel.pcap"
    rng = random.Random(2004)
    packets = _Background(rng, 200).packets(0.0, 0.3, 8000)
    vtep = Ether(src="02:00:5e:20:00:41", dst="02:00:5e:20:00:42") / IP(src="192.0.2.41", dst="192.0.2.42", ttl=64)
    frames = []
    for i in range(300):
        inner = (Ether(src="02:00:5e:21:00:01", dst="02:00:5e:21:00:02") /
                 IP(src=f"10.41.{i // 200}.{i % 200 + 1}", dst=f"10.42.0.{i % 40 + 1}") /
                 TCP(sport=30000 + i, dport=rng.choice([443, 5432, 6379]), flags="A", seq=rng.randrange(1 << 32),
                     ack=rng.randrange(1 << 32)) / Raw(bytes(200)))
        frames.append(bytes(vtep / UDP(sport=49152 + rng.randrange(16384), dport=4789) / VXLAN(vni=4100) / inner))
    rate = 70000
    for k in range(int(0.1 * rate)):
        packets.append((0.1 + k / rate, frames[rng.randrange(len(frames))]))
    count = _write(path, packets, TUNNEL_SNAPLEN)
    return {"file": path.name, "packets": count,
            "what": "VXLAN tunnel of 300 TCP flows at 70,000 packets/s for 100 ms between two endpoints, over 200 "
                    "balanced flows: one queue when the NIC hashes outer headers",
            "must_yield": [{"rule": "rss-saturation", "severity_at_least": "medium"}],
            "must_not_yield": [{"rule": "rss-saturation", "severity_above": "medium"},
                               {"rule": "echo-loop", "severity_above": "info"},
                               {"rule": "mss-violation", "severity_above": "info"},
                               {"rule": "pmtud-blackhole", "severity_above": "info"}]}


def rss_coarse_timestamps(out_dir: Path) -> dict:
    """Near-miss: a synthetic capture with one timestamp per second: 10,000 packets of one flow at each."""
    path = out_dir / "rss-coarse-timestamps.pcap"
    eth = Ether(src=GATEWAY_MAC, dst=CLIENT_MAC)
    packets = []
    for second in range(2):
        for k in range(10000):
            packets.append((float(second), eth / IP(src="198.18.9.9", dst="10.20.0.9", id=k) /
                            UDP(sport=41000, dport=5201) / Raw(k.to_bytes(4, "big") * 4)))
    count = _write(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-miss: 2 x 10,000 packets of one UDP flow, each 10,000 stamped with one time (no rate)",
            "must_yield": [],
            "must_not_yield": [{"rule": "*", "severity_above": "info"}]}


CAPTURES = [rss_single_flow_flood, rss_balanced_busy, rss_elephant_flow, rss_vxlan_tunnel, rss_coarse_timestamps]

"""echo-loop on real bytes: the bundled incident captures, crafted frames at the thresholds, and merging."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scapy.all import IP, TCP, UDP, Dot1Q, Ether, IPv6, Raw, wrpcap

from detector.commands import analyze
from detector.decode import decode
from detector.detectors import AnalysisContext, active_detectors
from detector.detectors.base import EVIDENCE_FRAMES_MAX, frame_summary
from detector.ingest import read_captures
from detector.rules import load_rules
from detector.schema import PacketBatch
from detector.stats import CaptureStats

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
T0 = 1_767_225_600


def rule_findings(findings, rule="echo-loop"):
    return [f for f in findings if f.rule == rule]


def write_frames(path: Path, frame, copies: int, rate_pps: float, extra=()):
    packets = []
    for i in range(copies):
        copy = frame.copy()
        copy.time = T0 + i / rate_pps
        packets.append(copy)
    packets += list(extra)
    packets.sort(key=lambda p: float(p.time))
    wrpcap(str(path), packets)
    return path


def test_incident_ipv4_loop_is_critical_and_fully_described(tmp_path):
    path = CAPTURES / "echo-loop-rip-ipv4.pcapng"
    (f,) = rule_findings(analyze([path], tmp_path)[0])
    assert f.severity == "critical"
    assert (f.src_ip, f.src_port, f.dest_ip, f.dest_port, f.proto) == ("198.18.44.201", 44123, "192.0.2.61", 520, "UDP")
    assert (f.src_mac, f.dest_mac) == ("00:1b:54:c2:00:02", "00:1b:54:c2:00:01")
    assert f.n == 6000
    ev = f.evidence
    assert (ev["ttl"], ev["ip_id"], ev["copies"]) == (242, 54321, 6000)
    assert 24_000 < ev["rate_pps"] < 26_000            # 6,000 copies 40 us apart
    assert ev["share_ratio"] > 0.9
    assert "UDP 198.18.44.201:44123 > 192.0.2.61" in ev["frame"]
    assert "TTL 242 never decremented" in f.msg and "6,000 times" in f.msg
    assert f.community_id and f.community_id.startswith("1:")
    frames = ev["evidence_frames"]
    assert len(frames) == EVIDENCE_FRAMES_MAX and frames == sorted(frames)
    assert frames[0] == ev["first_frame"] == 258


def test_incident_ipv4_loop_figures_are_tsharks(tshark):
    """tshark, reading the same file, finds as many UDP/520 frames and the first at the same number."""
    rows = tshark.fields(CAPTURES / "echo-loop-rip-ipv4.pcapng", "frame.number", "ip.ttl", "ip.id",
                         display_filter="udp.dstport == 520")
    assert len(rows) == 6000 and rows[0] == ["258", "242", "0xd431"]


def test_ipv6_vlan_loop(tmp_path):
    (f,) = rule_findings(analyze([CAPTURES / "echo-loop-rip-ipv6-vlan.pcap"], tmp_path)[0])
    assert f.severity == "critical"
    assert (f.src_ip, f.dest_ip, f.dest_port) == ("2001:db8:5ca::201", "2001:db8:c0::61", 520)
    assert f.evidence["vlan"] == 100 and f.evidence["ttl"] == 242 and f.n == 4000


def test_buried_loop_is_found_with_its_share(tmp_path):
    (f,) = rule_findings(analyze([CAPTURES / "echo-loop-buried.pcapng"], tmp_path)[0])
    assert f.n == 1500
    assert 0.2 < f.evidence["share_ratio"] < 0.5       # 1,000/s among ~2,000/s of other traffic
    assert f.severity == "high"


def test_mirror_duplicates_retransmissions_elephant_and_keepalives_are_not_loops(tmp_path):
    findings, _, _ = analyze([CAPTURES / "repeats-not-loops.pcapng"], tmp_path)
    assert rule_findings(findings) == []


LOOP_FRAME = (Ether(src="00:00:5e:00:01:01", dst="00:00:5e:00:01:02") /
              IP(src="203.0.113.9", dst="192.0.2.1", ttl=50, id=7) / UDP(sport=1234, dport=521) / Raw(bytes(24)))


@pytest.mark.parametrize("copies, rate_pps, expected", [
    (999, 10_000.0, 0),      # one copy short of min_copies
    (1000, 10_000.0, 1),     # exactly min_copies at a high rate
    (1000, 100.0, 0),        # enough copies, but 100/s is below min_rate_pps
])
def test_thresholds(tmp_path, copies, rate_pps, expected):
    path = write_frames(tmp_path / "loop.pcap", LOOP_FRAME, copies, rate_pps)
    found = rule_findings(analyze([path], tmp_path / "out")[0])
    assert len(found) == expected
    if expected:
        # the only traffic (share 1) at 10,000/s, above high_rate_pps: it dominates the link
        assert found[0].n == copies and found[0].severity == "critical"


def test_identical_retransmission_burst_and_span_copies_of_a_tcp_flow_stay_quiet(tmp_path):
    segment = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.1.1.1", dst="10.2.2.2", id=99) /
               TCP(sport=5000, dport=80, flags="PA", seq=1, ack=1) / Raw(b"a" * 100))
    extra = []
    for i in range(3000):      # a mirrored bulk flow: every segment twice
        pkt = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.1.1.1", dst="10.2.2.3", id=i) /
               TCP(sport=5001, dport=80, flags="A", seq=1 + i * 100, ack=1) / Raw(bytes(100)))
        for k in range(2):
            copy = pkt.copy()
            copy.time = T0 + 1 + i * 0.0001 + k * 0.000002
            extra.append(copy)
    path = write_frames(tmp_path / "retrans.pcap", segment, 8, 50.0, extra)
    assert rule_findings(analyze([path], tmp_path / "out")[0]) == []


def _batches(path: Path) -> list[PacketBatch]:
    return [decode(raw) for _, raw in read_captures([str(path)])]


def _split(batch: PacketBatch, cut: int) -> tuple[PacketBatch, PacketBatch]:
    head = PacketBatch(data=batch.data, cols={k: v[:cut] for k, v in batch.cols.items()})
    tail = PacketBatch(data=batch.data, cols={k: v[cut:] for k, v in batch.cols.items()})
    return head, tail


def test_merged_partitions_equal_one_pass():
    """Two states over two halves of the input, merged, report what one state over all of it reports."""
    rules = load_rules()
    (batch,) = _batches(CAPTURES / "echo-loop-rip-ipv4.pcapng")
    head, tail = _split(batch, len(batch) // 2)        # the cut falls inside the loop
    ctx = AnalysisContext(flows=None, stats=CaptureStats())
    whole = [d for d in active_detectors(rules) if d.rule_id == "echo-loop"][0]
    whole.update(batch)
    left, right = ([d for d in active_detectors(rules) if d.rule_id == "echo-loop"][0] for _ in range(2))
    left.update(head)
    right.update(tail)
    merged = left.merge(right)
    (a,), (b,) = whole.findings(ctx), merged.findings(ctx)
    assert a.to_json() == b.to_json()
    # the same holds batch by batch through one state (live capture feeds small batches)
    stream = [d for d in active_detectors(rules) if d.rule_id == "echo-loop"][0]
    for start in range(0, len(batch), 500):
        stream.update(PacketBatch(data=batch.data, cols={k: v[start:start + 500] for k, v in batch.cols.items()}))
    (c,) = stream.findings(ctx)
    assert c.n == a.n and c.first_seen == a.first_seen and c.evidence["copies"] == 6000


def test_frame_summary_of_hostile_bytes_is_one_bounded_line():
    assert frame_summary(b"\xff" * 3, 1).count("\n") == 0
    assert "link type 4242" in frame_summary(b"abc", 4242)
    hostile = bytes(Ether() / IPv6() / UDP(dport=520) / Raw(b"\n\r" * 500))
    text = frame_summary(hostile, 1)
    assert "\n" not in text and len(text) <= 300
    assert np.all([frame_summary(bytes(range(n)), 1) for n in range(0, 60, 7)])


def test_vlan_tagged_copy_keeps_vlan_in_evidence(tmp_path):
    frame = (Ether(src="00:00:5e:00:01:01", dst="00:00:5e:00:01:02") / Dot1Q(vlan=7) /
             IP(src="203.0.113.9", dst="192.0.2.1", ttl=9, id=8) / UDP(sport=9, dport=520) / Raw(bytes(24)))
    path = write_frames(tmp_path / "vlan.pcap", frame, 1200, 60_000.0)
    (f,) = rule_findings(analyze([path], tmp_path / "out")[0])
    assert f.evidence["vlan"] == 7 and f.severity == "critical"

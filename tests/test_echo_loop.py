"""echo-loop on real bytes: the bundled incident captures, crafted frames at the thresholds, and merging."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from scapy.all import IP, TCP, UDP, Dot1Q, Ether, IPv6, Raw, rdpcap, wrpcap
from scapy.utils import PcapWriter

from detector import engine
from detector.analysis import AnalysisState, conclude
from detector.commands import analyze
from detector.decode import decode
from detector.detect.display import frame_summary
from detector.detect.evidence import EVIDENCE_FRAMES_MAX
from detector.detectors import AnalysisContext, active_detectors
from detector.ingest import read_captures
from detector.rules import load_rules
from detector.schema import PacketBatch
from detector.stats import CaptureStats
from tests._cuts import cut, findings, one_and_merged

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
    assert (f.src_ip, f.src_port, f.dest_ip, f.dest_port, f.proto) == ("198.18.44.201", 44123, "192.0.2.61", 520, "udp")
    assert (f.src_mac, f.dest_mac) == ("00:1b:54:c2:00:02", "00:1b:54:c2:00:01")
    assert f.n == 6000
    ev = f.evidence
    assert (ev["ttl"], ev["ip_id"], ev["copies"]) == (242, 54321, 6000)
    assert 24_000 < ev["rate_pps"] < 26_000            # 6,000 copies 40 us apart
    assert ev["share_ratio"] > 0.9
    assert "UDP 198.18.44.201:44123 > 192.0.2.61" in ev["frame"]
    assert "TTL 242 never decremented" in f.msg and "6,000 times" in f.msg
    assert "UDP 198.18.44.201:44123 -> 192.0.2.61:520" in f.msg
    assert f.community_id and f.community_id.startswith("1:")
    frames = ev["evidence_frames"]
    assert len(frames) == EVIDENCE_FRAMES_MAX and frames == sorted(frames)
    assert frames[0] == ev["first_frame"] == 258


def test_incident_loops_state_their_loop_evidence(tmp_path):
    for name in ("echo-loop-rip-ipv4.pcapng", "echo-loop-rip-ipv6-vlan.pcap", "echo-loop-buried.pcapng"):
        (f,) = rule_findings(analyze([CAPTURES / name], tmp_path / name)[0])
        assert f.evidence["loop"] is True and "missing_loop_evidence" not in f.evidence
        assert f.evidence["loop_evidence"] == {"unicast_destination": True, "unicast_source": True,
                                               "no_replies": True, "replies_from_target": 0}
        assert f.msg.endswith("loop evidence: unicast destination, valid unicast source, no packet from the "
                              "target back to the source meanwhile")


FLOODS = CAPTURES / "identical-frame-floods.pcapng"


def test_floods_of_one_crafted_frame_are_floods_not_loops(tmp_path):
    found = rule_findings(analyze([FLOODS], tmp_path)[0])
    assert sorted(f.n for f in found) == [3000, 3000, 4000]
    for f in found:
        # each would be critical as a loop (16,000-120,000 copies/s, most of the link)
        assert f.severity == "low" and f.evidence["loop"] is False
        assert f.msg.startswith("identical-frame flood, not a loop: ")
        assert f.evidence["rate_pps"] >= 16_000
    by_source = {f.src_ip: f for f in found}
    smurf, spoofed, syn = by_source["2001:db8:70::66"], by_source["ff02::1"], by_source["198.51.100.99"]
    assert smurf.evidence["missing_loop_evidence"] == ["the destination is a multicast or broadcast address"]
    assert smurf.evidence["loop_evidence"]["unicast_destination"] is False and "broadcast storm" in smurf.msg
    assert spoofed.evidence["missing_loop_evidence"] == ["the source is not a valid unicast address"]
    assert spoofed.dest_port == 520 and spoofed.evidence["rate_pps"] > 100_000
    assert syn.evidence["loop_evidence"]["replies_from_target"] == 4000
    assert syn.evidence["missing_loop_evidence"] == ["the target sent 4,000 packets of its own back to the "
                                                     "source meanwhile"]


def test_the_floods_are_tsharks(tshark):
    """What tells each flood from a loop, counted by tshark in the same bytes."""
    assert tshark.count(FLOODS, "eth.dst == 33:33:00:00:00:01 && icmpv6.type == 128") == 3000
    assert tshark.count(FLOODS, "ipv6.src == ff02::1 && udp.dstport == 520") == 3000
    assert tshark.count(FLOODS, "ip.src == 198.51.100.99 && tcp.flags.syn == 1") == 4000
    assert tshark.count(FLOODS, "ip.src == 192.0.2.80 && ip.dst == 198.51.100.99 && tcp.flags.reset == 1") == 4000


@pytest.mark.parametrize("src_mac, dest_mac, src, dst, loop", [
    ("00:00:5e:00:01:01", "00:00:5e:00:01:02", "203.0.113.9", "192.0.2.1", True),
    ("00:00:5e:00:01:01", "ff:ff:ff:ff:ff:ff", "203.0.113.9", "192.0.2.1", False),   # broadcast destination
    ("01:00:5e:00:01:01", "00:00:5e:00:01:02", "203.0.113.9", "192.0.2.1", False),   # group bit in the source
    ("00:00:5e:00:01:01", "00:00:5e:00:01:02", "0.0.0.0", "192.0.2.1", False),
    ("00:00:5e:00:01:01", "00:00:5e:00:01:02", "0.1.2.3", "192.0.2.1", False),      # "this network", RFC 1122
    ("00:00:5e:00:01:01", "00:00:5e:00:01:02", "127.0.0.1", "192.0.2.1", False),
    ("00:00:5e:00:01:01", "00:00:5e:00:01:02", "240.0.0.9", "192.0.2.1", False),
    ("00:00:5e:00:01:01", "00:00:5e:00:01:02", "203.0.113.9", "255.255.255.255", False),
    ("00:00:5e:00:01:01", "00:00:5e:00:01:02", "203.0.113.9", "224.0.0.9", False),
])
def test_each_piece_of_loop_evidence(tmp_path, src_mac, dest_mac, src, dst, loop):
    frame = Ether(src=src_mac, dst=dest_mac) / IP(src=src, dst=dst, ttl=50, id=7) / UDP(sport=1234, dport=521) / \
        Raw(bytes(24))
    path = write_frames(tmp_path / "loop.pcap", frame, 1200, 60_000.0)
    (f,) = rule_findings(analyze([path], tmp_path / "out")[0])
    assert f.evidence["loop"] is loop and f.severity == ("critical" if loop else "low")


def test_a_loop_on_a_link_without_macs_is_judged_by_its_addresses(tmp_path):
    # raw IP (linktype 101) carries no MAC: that cannot contradict a loop, the addresses still can
    for src, loop in (("203.0.113.9", True), ("ff02::1", False)):
        net = IPv6(src=src, dst="2001:db8::1") if ":" in src else IP(src=src, dst="192.0.2.1", ttl=50)
        packets = []
        for i in range(1200):
            copy = (net / UDP(sport=1234, dport=521) / Raw(bytes(24))).copy()
            copy.time = T0 + i / 60_000.0
            packets.append(copy)
        path = tmp_path / f"raw-{loop}.pcap"
        wrpcap(str(path), packets, linktype=101)
        (f,) = rule_findings(analyze([path], tmp_path / f"out-{loop}")[0])
        assert f.evidence["loop"] is loop and f.src_mac is None
        assert f.evidence["loop_evidence"]["unicast_destination"] is True


def test_a_frame_without_macs_or_addresses_has_no_loop_evidence_either_way(tmp_path, tshark):
    # a serial line looped back (Cisco HDLC, linktype 104) returns the router's SLARP keepalive: the frame
    # has no MAC and no IP address, so nothing speaks for or against a loop, and nothing is claimed
    keepalive = struct.pack(">BBHIIIH2x", 0x0F, 0x00, 0x8035, 2, 1234, 1233, 0xFFFF)
    path = tmp_path / "serial.pcap"
    writer = PcapWriter(str(path), linktype=104, sync=False)
    writer.write_header(None)
    for k in range(1200):
        writer.write_packet(keepalive, sec=T0, usec=k * 16)
    writer.close()
    assert tshark.count(path, "slarp.ptype == 2 && slarp.mysequence == 1234") == 1200
    (f,) = rule_findings(analyze([path], tmp_path / "out")[0])
    assert f.evidence["loop_evidence"] == {"unicast_destination": None, "unicast_source": None, "no_replies": None,
                                           "replies_from_target": None}
    assert f.src_mac is None and f.dest_mac is None and "ethertype 0x8035" in f.msg and "loop evidence" not in f.msg


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


def _loop_among_others(path: Path, span_us: int, others: int, copies: int = 1000, extra=()) -> Path:
    """`copies` copies of LOOP_FRAME, the first at T0 and the last `span_us` later (the loop's rate: copies
    over that span, exactly), and between them `others` distinct datagrams between two third hosts (its
    share: copies over copies + others, exactly); `extra` frames at their (microsecond offset, bytes),
    after the copy of the same time. Times in whole microseconds, as pcap holds them."""
    loop = bytes(LOOP_FRAME)
    timed = [(k * span_us // (copies - 1), 0, loop) for k in range(copies)]
    timed += [(offset_us, 2, data) for offset_us, data in extra]
    for k in range(others):
        other = (Ether(src="00:00:5e:00:01:03", dst="00:00:5e:00:01:04") /
                 IP(src="198.51.100.7", dst="198.51.100.8", id=k & 0xFFFF) / UDP(sport=4000, dport=53) /
                 Raw(k.to_bytes(4, "big")))
        timed.append((1 + k * (span_us - 2) // max(others - 1, 1), 1, bytes(other)))
    writer = PcapWriter(str(path), linktype=1, sync=False)
    writer.write_header(None)
    for offset_us, _, data in sorted(timed, key=lambda item: item[:2]):
        seconds, usec = divmod(offset_us, 1_000_000)
        writer.write_packet(data, sec=T0 + seconds, usec=usec)
    writer.close()
    return path


@pytest.mark.parametrize("span_us, others, severity", [
    (20_000, 1200, "critical"),     # 50,000/s (critical_rate_pps), share 0.45: critical by its rate alone
    (20_020, 1200, "high"),         # 49,950/s, share 0.45
    (200_000, 1000, "critical"),    # 5,000/s (high_rate_pps) with share 0.5 (critical_share_ratio)
    (200_000, 1002, "high"),        # 5,000/s, share 0.4995
    (200_200, 1000, "high"),        # 4,995/s, share 0.5
    (200_000, 4500, "high"),        # 5,000/s, share 0.18: high by its rate alone
    (200_200, 4500, "medium"),      # 4,995/s, share 0.18: the rule's severity
    (500_000, 4000, "high"),        # 2,000/s, share 0.2 (high_share_ratio): high by its share alone
    (500_000, 4002, "medium"),      # 2,000/s, share 0.1999
])
def test_severity_at_each_threshold_and_just_below(tmp_path, span_us, others, severity):
    path = _loop_among_others(tmp_path / "loop.pcap", span_us, others)
    (f,) = rule_findings(analyze([path], tmp_path / "out")[0])
    assert f.evidence["loop"] is True and f.n == 1000
    assert f.evidence["share_ratio"] == round(1000 / (1000 + others), 4)
    assert f.evidence["rate_pps"] == round(1000 / (span_us / 1e6), 1)
    assert f.severity == severity


@pytest.mark.parametrize("reply_at_us, replies", [
    (0, 1),             # with the first copy: while the loop runs
    (20_000, 1),        # with the last copy
    (-1, 0),            # a microsecond before the first copy
    (20_001, 0),        # a microsecond after the last copy
])
def test_a_reply_of_the_target_counts_from_the_first_copy_to_the_last(tmp_path, reply_at_us, replies):
    reply = bytes(Ether(src="00:00:5e:00:01:02", dst="00:00:5e:00:01:01") / IP(src="192.0.2.1", dst="203.0.113.9") /
                  UDP(sport=5000, dport=1234) / Raw(b"answer"))
    path = _loop_among_others(tmp_path / "loop.pcap", 20_000, 0, extra=[(reply_at_us, reply)])
    (f,) = rule_findings(analyze([path], tmp_path / "out")[0])
    assert f.evidence["loop_evidence"]["replies_from_target"] == replies
    assert f.evidence["loop"] is (replies == 0)


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
    whole = next(d for d in active_detectors(rules) if d.rule_id == "echo-loop")
    whole.update(batch)
    left, right = (next(d for d in active_detectors(rules) if d.rule_id == "echo-loop") for _ in range(2))
    left.update(head)
    right.update(tail)
    merged = left.merge(right)
    (a,), (b,) = whole.findings(ctx), merged.findings(ctx)
    assert a.to_json() == b.to_json()
    # the same holds batch by batch through one state (live capture feeds small batches)
    stream = next(d for d in active_detectors(rules) if d.rule_id == "echo-loop")
    for start in range(0, len(batch), 500):
        stream.update(PacketBatch(data=batch.data, cols={k: v[start:start + 500] for k, v in batch.cols.items()}))
    (c,) = stream.findings(ctx)
    assert c.n == a.n and c.first_seen == a.first_seen and c.evidence["copies"] == 6000


def _one_pass(path: Path, batch_packets: int) -> list[dict]:
    """echo-loop's findings (as findings.json has them) of one pass over `path` read in batches of at most
    `batch_packets` packets."""
    state = AnalysisState(load_rules())
    run = engine.run([str(path)], [state], batch_packets=batch_packets, show_progress=False)
    return findings(conclude(state.detectors, state.flows, state.stats, run, quality=state.quality), "echo-loop")


@pytest.mark.parametrize("capture", ["echo-loop-buried.pcapng", "identical-frame-floods.pcapng"])
def test_one_pass_names_the_same_evidence_frames_at_any_batch_size(capture):
    """The evidence frames are the looping frame's first and last copies in capture order, wherever the
    engine's batches begin (a loop reaches min_copies in a different batch at each size)."""
    path = CAPTURES / capture
    whole = _one_pass(path, 1 << 18)
    assert whole and all(f["n"] > EVIDENCE_FRAMES_MAX for f in whole)
    for size in (1000, 333):
        assert _one_pass(path, size) == whole, size
    # scapy, not the fingerprint, says which frames are copies: those byte for byte equal to the first
    raw = [bytes(p) for p in rdpcap(str(path))]
    for f in whole:
        copies = [n for n, data in enumerate(raw, 1) if data == raw[f["evidence"]["first_frame"] - 1]]
        assert len(copies) == f["n"]
        half = EVIDENCE_FRAMES_MAX // 2
        assert f["evidence"]["evidence_frames"] == copies[:half] + copies[-half:]


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


def test_only_packets_from_the_target_back_to_the_source_count_as_replies(tmp_path):
    """The looping host goes on talking to others (a third host, and others to the source): still a loop.
    Packets of the target back to the source while it runs are what contradicts one."""
    frame = Ether(src="00:00:5e:00:01:01", dst="00:00:5e:00:01:02") / IP(src="203.0.113.9", dst="192.0.2.1", ttl=50) \
        / UDP(sport=1234, dport=521) / Raw(bytes(24))

    def talk(src, dst, count=20):
        packets = []
        for i in range(count):
            p = Ether(src="00:00:5e:00:01:03", dst="00:00:5e:00:01:04") / IP(src=src, dst=dst) / UDP(sport=4000 + i,
                                                                                                      dport=53)
            p.time = T0 + 0.001 + i / 2000
            packets.append(p)
        return packets

    others = talk("192.0.2.1", "198.51.100.7") + talk("198.51.100.8", "203.0.113.9")
    path = write_frames(tmp_path / "loop.pcap", frame, 1200, 60_000.0, extra=others)
    (f,) = rule_findings(analyze([path], tmp_path / "out")[0])
    assert f.evidence["loop_evidence"]["replies_from_target"] == 0 and f.evidence["loop"] is True
    answered = write_frames(tmp_path / "answered.pcap", frame, 1200, 60_000.0,
                            extra=others + talk("192.0.2.1", "203.0.113.9"))
    (f,) = rule_findings(analyze([answered], tmp_path / "out-answered")[0])
    assert f.evidence["loop_evidence"]["replies_from_target"] == 20 and f.evidence["loop"] is False


# ---- a cluster's cuts inside the loop --------------------------------------------------------------------------
@pytest.mark.parametrize("capture,starts", [
    ("echo-loop-rip-ipv4.pcapng", [259]),                      # between the RIP probe and its first echo
    ("echo-loop-rip-ipv4.pcapng", [259, 1000, 2500, 4000, 6200]),   # and through the burst
    ("echo-loop-rip-ipv4.pcapng", [6299]),          # the last copy alone in the part after the cut
    ("echo-loop-rip-ipv6-vlan.pcap", [15, 600, 2000]),
    ("echo-loop-buried.pcapng", [1616, 2400, 3300]),           # the loop among other traffic
    ("identical-frame-floods.pcapng", [31, 1000, 4102, 6200]),  # floods, not loops: the same counts either way
])
def test_a_cut_inside_the_loop_merges_to_the_findings_of_one_pass(tmp_path, capture, starts):
    paths = cut(CAPTURES / capture, tmp_path, starts)
    for rule in ("echo-loop", "rip-trigger"):
        one, many = one_and_merged(paths, rule)
        assert many == one, rule
    assert one_and_merged(paths, "echo-loop")[0]


def paused_loop(path: Path, before: int, after: int) -> Path:
    """`before` copies at 1 kHz, a pause of 100 ms (twice the forget horizon at min_rate_pps 200) with four other
    packets in it, `after` more copies, then a second of other traffic."""
    frame = Ether(src="00:1b:54:c2:00:02", dst="00:1b:54:c2:00:01") / IP(src="198.18.4.2", dst="192.0.2.61") \
        / UDP(sport=40000, dport=520) / Raw(b"\x00" * 24)
    packets = []
    for i in range(before + after):
        copy = frame.copy()
        copy.time = T0 + i / 1000 + (0.1 if i >= before else 0)
        packets.append(copy)
    pause, end = before / 1000, (before + after) / 1000 + 0.1
    for i, at in enumerate([pause + 0.02, pause + 0.04, pause + 0.06, pause + 0.08] + [end + 0.1 + i / 100
                                                                                       for i in range(100)]):
        other = Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1000 + i, dport=53)
        other.time = T0 + at
        packets.append(other)
    packets.sort(key=lambda p: float(p.time))
    wrpcap(str(path), packets)
    return path


@pytest.mark.parametrize("before, after, expected", [
    (600, 600, []),                 # two bursts below min_copies, a pause between: no loop
    (1100, 600, [(1700, 1)]),       # a loop that has reached min_copies is never forgotten
    (600, 1100, [(1100, 605)]),     # the loop begins after the pause (and the four packets in it)
])
def test_a_pause_beyond_the_horizon_forgets_a_candidate_below_min_copies_wherever_batches_end(
        tmp_path, before, after, expected):
    # one pass forgot the copies before the pause only when a batch ended in it; now a pause forgets them
    # wherever batches end: a batch ending in the pause (before + 4 packets), and others
    path = paused_loop(tmp_path / "paused.pcap", before, after)
    for size in (1 << 18, before + 4, 300, 100):
        assert [(f["n"], f["evidence"]["first_frame"]) for f in _one_pass(path, size)] == expected, size
    # cut in the pause and inside both bursts: the merge forgets as one pass does
    paths = cut(path, tmp_path / "parts", [before // 2, before + 1, before + 5 + after // 2])
    one, many = one_and_merged(paths, "echo-loop")
    assert many == one and [(f["n"], f["evidence"]["first_frame"]) for f in one] == expected


def test_a_part_does_not_forget_at_a_pause_a_candidate_that_began_in_its_head(tmp_path):
    # 1,100 copies, a pause, 900 more; cut after copy 900: the part after the cut sees 200 copies, the pause and
    # 900, fewer than min_copies each, but they continue the 900 before the cut, a loop before the pause
    path = paused_loop(tmp_path / "paused.pcap", 1100, 900)
    paths = cut(path, tmp_path / "parts", [901])
    one, many = one_and_merged(paths, "echo-loop")
    assert many == one and [(f["n"], f["evidence"]["first_frame"]) for f in one] == [(2000, 1)]


def test_a_tree_merge_names_the_evidence_frames_of_one_pass(tmp_path):
    # a part merged with its successor before its predecessor (a tree reduction) still names a loop's first and
    # last copies: those of one pass, as the merge in capture order does
    paths = cut(CAPTURES / "echo-loop-buried.pcapng", tmp_path, [2000, 2500, 3000, 3500, 4000, 5000])
    [one], [in_order] = one_and_merged(paths, "echo-loop")
    _, [tree] = one_and_merged(paths, "echo-loop", tree=True)
    assert tree == in_order == one


def test_the_copies_figure_counts_the_messages_copies(tshark):
    """One number, one source: the figure's copies per bin, times the bin, are the copies the message counts
    ("seen 6,000 times"), tshark's count of that frame; the line names its bin width."""
    from tests._figures import drawn

    d = drawn("echo-loop-rip-ipv4.pcapng", "echo-loop")
    loop, bins = d.finding, d.bins
    [line] = d.ax.lines
    copies = round(float(np.sum(line.get_ydata())) * bins.width_s)
    assert copies == loop.n and f"seen {copies:,} times" in loop.msg
    assert copies == tshark.count(CAPTURES / "echo-loop-rip-ipv4.pcapng", "udp.port == 520 && ip.src == 198.18.44.201")
    assert line.get_label() == d.ax.get_ylabel() == f"copies/s ({bins.width_s:g} s bins)"
    d.close()

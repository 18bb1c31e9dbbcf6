"""routing-loop on real bytes: bundled loops (IPv4, IPv6 on a VLAN), traceroute and mirrored paths, crafted edges."""
from __future__ import annotations

from pathlib import Path

import pytest
from scapy.all import ICMP, IP, UDP, Ether, Raw, wrpcap

from detector.commands import analyze
from detector.decode import decode
from detector.detectors import AnalysisContext, active_detectors
from detector.ingest import read_captures
from detector.rules import load_rules
from detector.schema import PacketBatch
from detector.stats import CaptureStats
from tests._cuts import cut, one_and_merged

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
T0 = 1_767_225_600
R1, R2, R3 = "02:00:5e:20:00:01", "02:00:5e:20:00:02", "02:00:5e:20:00:03"


def loops(findings):
    return [f for f in findings if f.rule == "routing-loop"]


def test_ipv4_loop_names_prefix_routers_and_counts(tmp_path):
    path = CAPTURES / "routing-loop-ipv4.pcapng"
    (f,) = loops(analyze([path], tmp_path)[0])
    assert f.severity == "medium"                      # 30 packets: below high_packets
    ev = f.evidence
    assert ev["prefix"] == "203.0.113.0/24" and ev["destination_count"] == 7
    assert ev["router_macs"] == [R1, R2] and (f.src_mac, f.dest_mac) == (R1, R2)
    assert f.n == ev["looping_packets"] == 30
    # every packet circles until its TTL runs out: 64 sightings (TTL 64) or 128 (TTL 128, the SYNs)
    assert ev["sightings"] == 20 * 64 + 10 * 128
    assert (ev["ttl_first"], ev["ttl_last"]) == (64, 1)
    assert "203.0.113.0/24 looped between 02:00:5e:20:00:01 and 02:00:5e:20:00:02" in f.msg


def test_ipv4_loop_sightings_are_tsharks(tshark, tmp_path):
    path = CAPTURES / "routing-loop-ipv4.pcapng"
    (f,) = loops(analyze([path], tmp_path)[0])
    seen = [int(n) for n, in tshark.fields(path, "frame.number", display_filter="ip.dst == 203.0.113.0/24")]
    assert len(seen) == f.evidence["sightings"] == 20 * 64 + 10 * 128
    assert set(f.evidence["evidence_frames"]) <= set(seen)


def test_ipv6_vlan_loop_is_high(tmp_path):
    (f,) = loops(analyze([CAPTURES / "routing-loop-ipv6-vlan.pcap"], tmp_path)[0])
    assert f.severity == "high" and f.n == 120
    assert f.evidence["prefix"] == "2001:db8:dead::/64"
    assert f.evidence["sightings"] == 120 * 64


@pytest.mark.parametrize("name", ["traceroute-paths.pcapng", "repeats-not-loops.pcapng", "echo-loop-rip-ipv4.pcapng"])
def test_near_misses_stay_quiet(tmp_path, name):
    assert loops(analyze([CAPTURES / name], tmp_path)[0]) == []


def sightings(ttls, macs, dst="198.51.100.7", ident=31):
    """One packet seen once per entry of `ttls`, with source MACs cycling through `macs`."""
    out = []
    for i, ttl in enumerate(ttls):
        src, dest_mac = macs[i % len(macs)], macs[(i + 1) % len(macs)]
        pkt = Ether(src=src, dst=dest_mac) / IP(src="10.9.9.9", dst=dst, id=ident, ttl=ttl) / ICMP(id=1, seq=ident)
        pkt.time = T0 + i * 0.001
        out.append(pkt)
    return out


@pytest.mark.parametrize("ttls, macs, expected", [
    ([64, 63, 62], [R1, R2], 0),            # two falls: a mirror of two hops, not yet a loop
    ([64, 63, 62, 61], [R1, R2], 1),        # three falls between two routers: min_ttl_drops
    ([61, 62, 63, 64, 65], [R1, R2], 0),    # TTL rising: traceroute-like, never a loop
    ([64, 63, 62, 61, 60], [R1], 0),        # one MAC: one router retransmitting with falling TTL
    ([64, 60, 56, 52], [R1, R2], 1),        # falls of 4: max_ttl_step
    ([64, 59, 54, 49], [R1, R2], 0),        # falls of 5: just above it
    ([64, 58, 52, 46, 40], [R1, R2], 0),    # falls of 6: above max_ttl_step
    ([64, 62, 60, 58, 56], [R1, R2, R3], 1),  # a loop of three routers seen with falls of 2
])
def test_ttl_patterns(tmp_path, ttls, macs, expected):
    path = tmp_path / "loop.pcap"
    wrpcap(str(path), sightings(ttls, macs))
    assert len(loops(analyze([path], tmp_path / "out")[0])) == expected


def test_a_loop_on_a_link_without_macs_is_judged_by_its_ttls(tmp_path):
    # raw IP (linktype 101, a tunnel or PPP interface) shows no routers' MACs: the falling TTL alone tells
    for ttls, expected in (([64, 63, 62, 61], 1), ([64, 63, 62], 0)):
        packets = [IP(bytes(frame[IP])) for frame in sightings(ttls, [R1, R2])]
        for k, packet in enumerate(packets):
            packet.time = T0 + k * 0.001
        path = tmp_path / f"raw-{len(ttls)}.pcap"
        wrpcap(str(path), packets, linktype=101)
        found = loops(analyze([path], tmp_path / f"out-{len(ttls)}")[0])
        assert len(found) == expected
        if found:
            assert found[0].n == 1 and found[0].evidence["router_macs"] == [] and found[0].src_mac is None


@pytest.mark.parametrize("packets, severity", [(100, "high"), (99, "medium")])
def test_high_from_high_packets_looping_packets(tmp_path, packets, severity):
    frames = []
    for ident in range(packets):
        for frame in sightings([64, 63, 62, 61], [R1, R2], ident=ident):
            frame.time += ident * 0.01
            frames.append(frame)
    path = tmp_path / "loop.pcap"
    wrpcap(str(path), frames)
    [found] = loops(analyze([path], tmp_path / "out")[0])
    assert found.n == packets and found.severity == severity


def test_unrelated_packets_sharing_addresses_do_not_make_a_loop(tmp_path):
    """Different datagrams (payload differs) from one source with falling TTLs are no packet seen again."""
    packets = []
    for i, ttl in enumerate([64, 63, 62, 61, 60, 59]):
        pkt = (Ether(src=[R1, R2][i % 2], dst=[R2, R1][i % 2]) / IP(src="10.9.9.9", dst="198.51.100.7", id=5, ttl=ttl) /
               UDP(sport=4000, dport=53) / Raw(bytes([i]) * 12))
        pkt.time = T0 + i * 0.001
        packets.append(pkt)
    path = tmp_path / "distinct.pcap"
    wrpcap(str(path), packets)
    assert loops(analyze([path], tmp_path / "out")[0]) == []


def test_small_batches_and_merge_agree_with_one_pass():
    rules = load_rules()

    def fresh():
        return next(d for d in active_detectors(rules) if d.rule_id == "routing-loop")

    (batch,) = [decode(raw) for _, raw in read_captures([str(CAPTURES / "routing-loop-ipv6-vlan.pcap")])]
    ctx = AnalysisContext(flows=None, stats=CaptureStats())
    whole = fresh()
    whole.update(batch)
    (a,) = whole.findings(ctx)
    stream = fresh()
    for start in range(0, len(batch), 300):         # cuts fall inside packets' loops
        stream.update(PacketBatch(data=batch.data, cols={k: v[start:start + 300] for k, v in batch.cols.items()}))
        if start == 3000:    # a live capture asks for findings while loops are in flight
            (mid,) = stream.findings(ctx)
            assert 0 < mid.n < 120
    (b,) = stream.findings(ctx)
    assert (b.n, b.evidence["sightings"]) == (a.n, a.evidence["sightings"]) == (120, 120 * 64)
    assert [f.to_json() for f in stream.findings(ctx)] == [b.to_json()]
    # two partitions cut inside the loops of packets 59 and 60 (each circles for 12.8 ms, one starts every 10 ms)
    cut = int(((batch["ts_ns"] - batch["ts_ns"][0]) < 600_000_000).sum())
    left, right = fresh(), fresh()
    left.update(PacketBatch(data=batch.data, cols={k: v[:cut] for k, v in batch.cols.items()}))
    right.update(PacketBatch(data=batch.data, cols={k: v[cut:] for k, v in batch.cols.items()}))
    (c,) = left.merge(right).findings(ctx)
    assert (c.n, c.evidence["sightings"]) == (120, 120 * 64)


@pytest.mark.parametrize("starts", [[77], [141, 206], [76, 140, 205]], ids=["last-copy", "two-last-copies",
                                                                               "before-the-last-two"])
def test_a_cut_just_before_a_packets_last_copies_merges_to_one_pass(tmp_path, starts):
    # the part after the cut sees a looping packet's last copy (hop limit 1) once: alone it cannot tell it
    # from any other packet; one pass picks it because it tracks the identity, and the merge must too
    paths = cut(CAPTURES / "routing-loop-ipv6-vlan.pcap", tmp_path, starts)
    one, many = one_and_merged(paths, "routing-loop")
    assert one and one[0]["evidence"]["sightings"] == 7680
    assert many == one

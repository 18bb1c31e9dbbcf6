"""rss-saturation on the bundled RSS captures, with thresholds and model settings overridden by rule files."""
from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

import numpy as np
import pytest

from detector import engine
from detector.commands import analyze
from detector.detectors import REGISTRY
from detector.errors import RuleError
from detector.rss import MICROSOFT_KEY, toeplitz_hash
from detector.rules import load_rules

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
RULE = "rss-saturation"
FLOOD = CAPTURES / "rss-single-flow-flood.pcap"
BALANCED = CAPTURES / "rss-balanced-busy.pcap"
ELEPHANT = CAPTURES / "rss-elephant-flow.pcap"


def run(paths, tmp_path, rules_dir=None):
    findings, _, _ = analyze([str(p) for p in paths], tmp_path / "out", rules_dir)
    return [f for f in findings if f.rule == RULE]


def override(tmp_path, **params) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir(exist_ok=True)
    lines = ["id: rss-saturation", "params:"] + [f"  {k}: {v}" for k, v in params.items()]
    (folder / "rss.yaml").write_text("\n".join(lines) + "\n")
    return folder


def expected_queue(src, dst, ports=None, queues=8) -> int:
    """The queue by the reference hash over the bytes the NIC hashes, through a 128-entry table."""
    data = ipaddress.ip_address(src).packed + ipaddress.ip_address(dst).packed
    if ports:
        data += struct.pack(">HH", *ports)
    return (toeplitz_hash(MICROSOFT_KEY, data) & 127) % queues


def test_single_flow_flood_fills_its_queue(tmp_path):
    [finding] = run([FLOOD], tmp_path)
    ev = finding.evidence
    assert finding.severity == "medium"
    assert ev["queue"] == expected_queue("198.18.7.7", "10.20.0.5")      # UDP: addresses only
    # 7,000 flood packets in the 100 ms bin, plus background flows that share the queue
    assert 7000 <= ev["queue_packets"] == finding.n < 7000 + 1500 / 8 * 3
    assert ev["share_ratio"] > 0.8 and ev["bins"] == 1
    top = ev["flows"][0]
    assert (top["src_ip"], top["dest_ip"], top["dest_port"], top["proto"]) == ("198.18.7.7", "10.20.0.5", 27015,
                                                                             "UDP")
    assert top["packets_in_window"] == 7000 and top["community_id"].startswith("1:")
    assert (finding.src_ip, finding.dest_ip) == ("198.18.7.7", "10.20.0.5")
    assert "198.18.7.7:40000 -> 10.20.0.5:27015" in finding.msg
    assert 0 < len(ev["evidence_frames"]) <= 64


def test_elephant_flow_names_the_tcp_flow(tmp_path):
    [finding] = run([ELEPHANT], tmp_path)
    ev = finding.evidence
    assert finding.severity == "medium"
    assert ev["queue"] == expected_queue("2001:db8:500::10", "2001:db8:20::77", (443, 50123))
    assert ev["flows"][0]["src_port"] == 443 and ev["flows"][0]["proto"] == "TCP"
    assert 0.5 <= ev["share_ratio"] < 0.8


def test_busy_balanced_link_is_quiet_even_where_the_rate_would_matter(tmp_path):
    assert run([BALANCED], tmp_path) == []
    # with the rate threshold far lower, only the share criterion keeps it quiet ...
    rules = override(tmp_path, min_queue_rate_pps=5000)
    assert run([BALANCED], tmp_path, rules) == []
    # ... while the flood still fires under the same rules
    assert len(run([FLOOD], tmp_path, rules)) == 1


def test_hashing_udp_ports_moves_nothing_for_a_single_flow(tmp_path):
    [finding] = run([FLOOD], tmp_path, override(tmp_path, hash_udp_ports="true"))
    assert finding.evidence["queue"] == expected_queue("198.18.7.7", "10.20.0.5", (40000, 27015))


def test_symmetric_key_puts_the_acks_on_the_same_queue(tmp_path):
    [default] = run([ELEPHANT], tmp_path)
    [symmetric] = run([ELEPHANT], tmp_path, override(tmp_path, key="symmetric"))
    # data and ACKs of the elephant share one queue now: its share grows by the ACKs
    assert symmetric.evidence["queue_packets"] - default.evidence["queue_packets"] >= 3000


def test_more_queues_than_flows_cannot_hide_a_flood(tmp_path):
    [finding] = run([FLOOD], tmp_path, override(tmp_path, queues=16))
    assert finding.evidence["queue"] == expected_queue("198.18.7.7", "10.20.0.5", queues=16)
    assert finding.evidence["fair_share_ratio"] == 0.0625


@pytest.mark.parametrize("value, reason", [("nothex", "not 'microsoft'"), ("6d5a", "needs 40")])
def test_bad_keys_are_rule_errors(tmp_path, value, reason):
    rules = load_rules(override(tmp_path, key=value))
    with pytest.raises(RuleError, match=reason) as caught:
        REGISTRY[RULE](rules[RULE])
    assert caught.value.key == "params.key" and caught.value.path.endswith("rss.yaml")


def test_merged_partitions_give_the_single_pass_histogram():
    rule = load_rules()[RULE]
    first, second = REGISTRY[RULE](rule), REGISTRY[RULE](rule)
    engine.run([str(FLOOD)], [first])
    engine.run([str(BALANCED)], [second])
    combined = REGISTRY[RULE](rule)
    engine.run([str(FLOOD), str(BALANCED)], [combined])
    bins, counts = first.merge(second).histogram()
    expected_bins, expected_counts = combined.histogram()
    assert np.array_equal(bins, expected_bins) and np.array_equal(counts, expected_counts)
    assert counts.sum() == 11500 + 8000


def test_timestamps_years_apart_use_the_sparse_histogram(tmp_path):
    from scapy.all import IP, UDP, Ether, wrpcap

    frames = []
    for k, when in enumerate((0.0, 0.01, 3.2e8, 3.2e8 + 0.02, 1.7e9)):
        frame = Ether() / IP(src="10.0.0.1", dst="10.0.0.2", id=k) / UDP(sport=1, dport=2)
        frame.time = when
        frames.append(frame)
    path = tmp_path / "years.pcap"
    wrpcap(str(path), frames)
    detector = REGISTRY[RULE](load_rules()[RULE])
    engine.run([str(path)], [detector])
    bins, counts = detector.histogram()
    assert bins.tolist() == [0, 3_200_000_000, 17_000_000_000] and counts.sum(axis=1).tolist() == [2, 2, 1]


def test_an_echo_loop_filling_the_queue_makes_it_high_and_is_named(tmp_path):
    from scapy.all import IP, UDP, Ether, Raw
    from scapy.utils import PcapWriter

    frame = bytes(Ether(src="02:00:00:00:0a:01", dst="02:00:00:00:0a:02") /
                  IP(src="198.18.44.201", dst="192.0.2.61", ttl=242, id=54321) /
                  UDP(sport=44123, dport=520) / Raw(bytes(24)))
    path = tmp_path / "loop.pcap"
    writer = PcapWriter(str(path), linktype=1, sync=False)
    writer.write_header(None)
    for k in range(6000):      # one frame 6,000 times in 100 ms
        writer.write_packet(frame, sec=1_767_225_600, usec=100_000 + k * 16)
    writer.close()
    findings, _, _ = analyze([str(path)], tmp_path / "out")
    [loop] = [f for f in findings if f.rule == "echo-loop"]
    [finding] = [f for f in findings if f.rule == RULE]
    assert finding.severity == "high" and finding.n == 6000
    assert finding.evidence["echo_loop"] == loop.msg and "echo loop" in finding.msg
    assert (finding.src_ip, finding.dest_port) == ("198.18.44.201", 520)

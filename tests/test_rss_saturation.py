"""rss-saturation on the bundled RSS captures, with thresholds and model settings overridden by rule files."""
from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

import numpy as np
import pytest

from detector import analysis, engine, ingest
from detector.commands import analyze
from detector.detectors import REGISTRY, rss_saturation
from detector.errors import RuleError
from detector.rss import MICROSOFT_KEY, toeplitz_hash
from detector.rules import load_rules
from tests._cuts import cut, findings, one_and_merged

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
                                                                             "udp")
    assert top["packets_in_window"] == 7000 and top["community_id"].startswith("1:")
    assert (finding.src_ip, finding.dest_ip) == ("198.18.7.7", "10.20.0.5")
    assert "198.18.7.7:40000 -> 10.20.0.5:27015" in finding.msg
    assert 0 < len(ev["evidence_frames"]) <= 64


def test_elephant_flow_names_the_tcp_flow(tmp_path):
    [finding] = run([ELEPHANT], tmp_path)
    ev = finding.evidence
    assert finding.severity == "medium"
    assert ev["queue"] == expected_queue("2001:db8:500::10", "2001:db8:20::77", (443, 50123))
    assert ev["flows"][0]["src_port"] == 443 and ev["flows"][0]["proto"] == "tcp"
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


def _numbered(template: bytes, k: int) -> bytes:
    """The k-th datagram of the flow of `template` (Ethernet, a 20-byte IPv4 header, UDP, a 4-byte payload):
    IP identification k (mod 2^16) and payload k, both checksums redone. What scapy builds field by field, at
    a hundredth of its cost (test_numbered_frames_are_scapys); the checksums are scapy's own (RFC 1071)."""
    from scapy.utils import checksum

    frame = bytearray(template)
    ip, udp = 14, 34
    struct.pack_into("!H", frame, ip + 4, k & 0xFFFF)
    frame[-4:] = k.to_bytes(4, "big")
    struct.pack_into("!H", frame, ip + 10, 0)
    struct.pack_into("!H", frame, ip + 10, checksum(bytes(frame[ip:udp])))
    struct.pack_into("!H", frame, udp + 6, 0)
    pseudo = bytes(frame[ip + 12:ip + 20]) + struct.pack("!BBH", 0, 17, len(frame) - udp)
    struct.pack_into("!H", frame, udp + 6, checksum(pseudo + bytes(frame[udp:])) or 0xFFFF)
    return bytes(frame)


def _datagram(src_mac: str, dst_mac: str, src: str, dst: str, sport: int, dport: int, k: int = 0):
    from scapy.all import IP, UDP, Ether, Raw
    return Ether(src=src_mac, dst=dst_mac) / IP(src=src, dst=dst, id=k & 0xFFFF) / UDP(sport=sport, dport=dport) / \
        Raw(k.to_bytes(4, "big"))


def test_numbered_frames_are_scapys():
    # 43,048: a UDP checksum that computes to 0, sent as 0xFFFF (RFC 768); 65,536: the identification wraps
    template = bytes(_datagram("02:00:00:00:0b:01", "02:00:00:00:0b:02", "198.18.45.7", "192.0.2.99", 41000, 520))
    for k in (0, 1, 255, 9_999, 43_048, 65_535, 65_536):
        want = _datagram("02:00:00:00:0b:01", "02:00:00:00:0b:02", "198.18.45.7", "192.0.2.99", 41000, 520, k)
        assert _numbered(template, k) == bytes(want), k


def _one_frame_6000_times(path, dest_mac: str, transport=None, other_flow=None):
    """One UDP frame from 198.18.44.201:44123 to 192.0.2.61:520 (or over `transport`), 6,000 times in
    100 ms: a loop (unicast MAC) or a flood (multicast); with `other_flow` (source, destination, ports,
    packets), as many datagrams of another UDP flow in the same 100 ms (payload varies: not a loop)."""
    from scapy.all import IP, UDP, Ether, Raw
    from scapy.utils import PcapWriter

    frame = bytes(Ether(src="02:00:00:00:0a:01", dst=dest_mac) /
                  IP(src="198.18.44.201", dst="192.0.2.61", ttl=242, id=54321) /
                  (transport or UDP(sport=44123, dport=520)) / Raw(bytes(24)))
    timed = [(100_000 + k * 16, frame) for k in range(6000)]
    src, dst, (sport, dport), packets = other_flow or (None, None, (0, 0), 0)
    if packets:
        template = bytes(_datagram("02:00:00:00:0b:01", "02:00:00:00:0b:02", src, dst, sport, dport))
    for k in range(packets):
        timed.append((100_000 + k * 96_000 // packets, _numbered(template, k)))
    writer = PcapWriter(str(path), linktype=1, sync=False)
    writer.write_header(None)
    for usec, data in sorted(timed, key=lambda item: item[0]):
        writer.write_packet(data, sec=1_767_225_600, usec=usec)
    writer.close()
    return path


def test_an_echo_loop_filling_the_queue_makes_it_high_and_is_named(tmp_path):
    path = _one_frame_6000_times(tmp_path / "loop.pcap", "02:00:00:00:0a:02")
    findings, _, _ = analyze([str(path)], tmp_path / "out")
    [loop] = [f for f in findings if f.rule == "echo-loop"]
    [finding] = [f for f in findings if f.rule == RULE]
    assert finding.severity == "high" and finding.n == 6000
    assert finding.evidence["echo_loop"] == loop.msg and "echo loop" in finding.msg
    assert (finding.src_ip, finding.dest_port) == ("198.18.44.201", 520)


def test_an_icmp_echo_loop_filling_the_queue_is_named_though_it_has_no_ports(tmp_path):
    from scapy.all import ICMP

    path = _one_frame_6000_times(tmp_path / "loop.pcap", "02:00:00:00:0a:02", ICMP(id=7, seq=1))
    findings, _, _ = analyze([str(path)], tmp_path / "out")
    [loop] = [f for f in findings if f.rule == "echo-loop"]
    [finding] = [f for f in findings if f.rule == RULE]
    assert (loop.proto, loop.src_port, loop.dest_port) == ("icmp", None, None)
    assert finding.severity == "high" and finding.evidence["echo_loop"] == loop.msg and "echo loop" in finding.msg


@pytest.mark.parametrize("other_flow", [
    # between the loop's two hosts, hashed to its queue (UDP: addresses only), on other ports
    ("198.18.44.201", "192.0.2.61", (41000, 5201), 8000),
    # between two other hosts, to the loop's port
    ("198.18.45.7", "192.0.2.99", (41000, 520), 8000),
])
def test_a_queue_filled_by_another_flow_than_the_loops_is_not_the_loops(tmp_path, other_flow):
    path = _one_frame_6000_times(tmp_path / "beside.pcap", "02:00:00:00:0a:02", other_flow=other_flow)
    findings, _, _ = analyze([str(path)], tmp_path / "out")
    [loop] = [f for f in findings if f.rule == "echo-loop"]
    assert loop.evidence["loop"] is True and (loop.src_port, loop.dest_port) == (44123, 520)
    src, dst, (sport, dport), packets = other_flow
    [finding] = [f for f in findings if f.rule == RULE and f.src_ip == src]
    top = finding.evidence["flows"][0]
    assert (top["dest_ip"], top["src_port"], top["dest_port"], top["packets_in_window"]) == (dst, sport, dport, packets)
    # below the high rate, and the loop neither named nor raising it
    assert finding.evidence["peak_queue_rate_pps"] < 500_000
    assert finding.severity == "medium" and "echo_loop" not in finding.evidence and "echo loop" not in finding.msg


VXLAN = CAPTURES / "rss-vxlan-tunnel.pcap"


def test_a_vxlan_tunnel_fills_the_queue_of_its_endpoints(tmp_path):
    [finding] = run([VXLAN], tmp_path)
    ev = finding.evidence
    # UDP is hashed by addresses only: every packet between the two endpoints shares one queue
    assert ev["queue"] == expected_queue("192.0.2.41", "192.0.2.42")
    assert finding.severity == "medium" and ev["share_ratio"] > 0.85 and ev["tunnelled_ratio"] > 0.95
    assert "tunnelled (vxlan), hashed by their outer headers" in finding.msg
    # the flows named are those the NIC hashed: the tunnel's, never the TCP flows inside it
    assert len(ev["flows"]) == 5
    for flow in ev["flows"]:
        assert (flow["proto"], flow["src_ip"], flow["dest_ip"], flow["dest_port"], flow["tunnel"]) == \
            ("udp", "192.0.2.41", "192.0.2.42", 4789, "vxlan")
    assert ev["flows"][0]["src_port"] == 49417 and ev["flows"][0]["packets_in_window"] == 47
    assert ev["flow_counts_exact"] is False      # 300 flows on the queue, 16 counted per bin


def test_the_vxlan_figures_are_tsharks(tshark):
    assert tshark.count(VXLAN, "vxlan && ip.src == 192.0.2.41 && ip.dst == 192.0.2.42") == 7000
    assert tshark.count(VXLAN, "vxlan && udp.srcport == 49417") == 47


def test_inner_header_rss_spreads_the_tunnel(tmp_path):
    rules = override(tmp_path, hash_inner_headers="true")
    assert run([VXLAN], tmp_path, rules) == []
    # a flood without a tunnel fills its queue all the same
    assert len(run([FLOOD], tmp_path, rules)) == 1


def _tunnelled_flow(path: Path, inner_src: str, inner_dst: str, ports: tuple[int, int]):
    """One TCP flow inside VXLAN at 70,000 packets/s for 100 ms, nothing else: one frame built, its TCP
    sequence number then set per packet (scapy would take a minute to build 7,000 tunnelled frames)."""
    from scapy.all import IP, TCP, UDP, Ether, Raw
    from scapy.layers.vxlan import VXLAN as VXLANHeader
    from scapy.utils import PcapWriter

    template = bytearray(bytes(
        Ether() / IP(src="192.0.2.41", dst="192.0.2.42") / UDP(sport=50001, dport=4789) / VXLANHeader(vni=9) /
        Ether() / IP(src=inner_src, dst=inner_dst) / TCP(sport=ports[0], dport=ports[1]) / Raw(bytes(8))))
    seq_at = 14 + 20 + 8 + 8 + 14 + 20 + 4     # outer Ethernet, IPv4, UDP, VXLAN, inner Ethernet, IPv4; TCP seq
    writer = PcapWriter(str(path), linktype=1, sync=False)
    writer.write_header(None)
    for k in range(7000):
        struct.pack_into(">I", template, seq_at, k * 100)
        writer.write_packet(bytes(template), sec=1_767_225_600, usec=100_000 + round(k / 0.07))
    writer.close()


def test_the_queue_and_the_flow_named_follow_the_header_the_nic_hashes(tmp_path):
    path = tmp_path / "tunnel.pcap"
    inner = ("10.41.0.7", "10.42.0.9", (30007, 443))
    _tunnelled_flow(path, *inner)
    outer_queue = expected_queue("192.0.2.41", "192.0.2.42")
    inner_queue = expected_queue(inner[0], inner[1], inner[2])
    assert outer_queue != inner_queue
    [outer] = run([path], tmp_path / "outer")
    assert outer.evidence["queue"] == outer_queue
    assert [(f["proto"], f["src_port"], f["dest_port"]) for f in outer.evidence["flows"]] == [("udp", 50001, 4789)]
    [by_inner] = run([path], tmp_path / "inner", override(tmp_path, hash_inner_headers="true"))
    assert by_inner.evidence["queue"] == inner_queue and by_inner.evidence["hash_inner_headers"] is True
    assert [(f["proto"], f["src_ip"], f["src_port"], f["dest_port"], f["packets_in_window"], f["tunnel"])
            for f in by_inner.evidence["flows"]] == [("tcp", "10.41.0.7", 30007, 443, 7000, "vxlan")]
    assert "10.41.0.7:30007 -> 10.42.0.9:443 (7,000 packets)" in by_inner.msg


def _flood_at(path: Path, offsets_us):
    """One UDP flow (payload varies: not a loop), a packet at each microsecond offset."""
    from scapy.utils import PcapWriter

    template = bytes(_datagram("02:00:00:00:0c:01", "02:00:00:00:0c:02", "198.18.9.9", "10.20.0.9", 41000, 5201))
    writer = PcapWriter(str(path), linktype=1, sync=False)
    writer.write_header(None)
    for k, offset in enumerate(offsets_us):
        writer.write_packet(_numbered(template, k), sec=1_767_225_600, usec=100_000 + offset)
    writer.close()


@pytest.mark.parametrize("span_us, fires", [(0, False), (999, False), (1000, True), (50_000, True)])
def test_a_rate_needs_packets_that_span_real_time(tmp_path, span_us, fires):
    # 10,000 packets in one 100 ms bin: "100,000 packets/s" only if their times say so
    path = tmp_path / "flood.pcap"
    _flood_at(path, np.linspace(0, span_us, 10_000).round().astype(int).tolist())
    found = run([path], tmp_path)
    assert len(found) == (1 if fires else 0)
    if fires:
        assert found[0].evidence["peak_queue_rate_pps"] == 100_000


@pytest.mark.parametrize("packets, severity", [(10_000, "high"), (9_999, "medium")])
def test_a_queue_at_the_high_rate_is_high_and_just_below_it_is_not(tmp_path, packets, severity):
    # one flow (not a loop) in one 100 ms bin: 10,000 packets are 100,000 packets/s, the high rate set here
    path = tmp_path / "flood.pcap"
    _flood_at(path, np.linspace(0, 50_000, packets).round().astype(int).tolist())
    [finding] = run([path], tmp_path, override(tmp_path, high_queue_rate_pps=100000))
    assert finding.evidence["peak_queue_rate_pps"] == packets * 10 and "echo_loop" not in finding.evidence
    assert finding.severity == severity


def test_a_capture_with_one_timestamp_per_second_has_no_rate(tmp_path, tshark):
    path = CAPTURES / "rss-coarse-timestamps.pcap"
    assert run([path], tmp_path) == []
    stamps = tshark.fields(path, "frame.time_epoch")
    assert len(stamps) == 20_000 and len({row[0] for row in stamps}) == 2


def test_an_identical_frame_flood_filling_the_queue_does_not_make_it_high(tmp_path):
    # the loop frame of the test above, but to a multicast MAC: a flood, not a loop
    path = _one_frame_6000_times(tmp_path / "flood.pcap", "01:00:5e:00:00:09")
    findings, _, _ = analyze([str(path)], tmp_path / "out")
    [flood] = [f for f in findings if f.rule == "echo-loop"]
    [finding] = [f for f in findings if f.rule == RULE]
    assert flood.severity == "low" and finding.severity == "medium"
    assert "identical-frame flood" in finding.msg and finding.evidence["echo_loop"] == flood.msg


def test_microsecond_bins_over_a_thousand_queues_keep_only_the_cells_that_received_packets(tmp_path):
    # 11,500 packets: a bins x queues matrix would hold ~100 million counts; the state holds one per packet at most
    rule = load_rules(override(tmp_path, queues=1024, indirection_table_size=4096, bin_ms=0.001))[RULE]
    detector = REGISTRY[RULE](rule)
    engine.run([str(FLOOD)], [detector])
    cell_bins, cell_queues, cell_counts, bins, _, _ = detector._folded()
    assert len(cell_bins) <= 11_500 and cell_counts.sum() == 11_500 and cell_queues.max() < 1024
    hist_bins, counts = detector.histogram()
    assert np.array_equal(hist_bins, bins) and counts.sum() == 11_500


# ---- a bin cut by a partition or a batch ---------------------------------------------------------------------
# the flooding 100 ms bin is frames 1,438-9,941 of FLOOD and 828-8,650 of VXLAN (300 flows on its queue)
@pytest.mark.parametrize(("capture", "starts"), [
    (FLOOD, [1_438]),                        # the cut just before the bin's first packet
    (FLOOD, [1_439, 5_000, 9_941]),          # after its first, inside it (a part within the bin), before its last
    (VXLAN, [829, 4_000, 4_001, 8_650]),     # a part of one packet
])
@pytest.mark.parametrize("tree", [False, True], ids=["in-order", "tree"])
def test_a_bin_cut_by_partitions_merges_to_the_finding_of_one_pass(tmp_path, capture, starts, tree):
    # one pass over the parts (its batches end where each file does) and the parts merged: the whole file's finding
    whole = findings(analysis.analyze([str(capture)], load_rules()), RULE)
    one, many = one_and_merged(cut(capture, tmp_path, starts), RULE, tree=tree)
    assert len(whole) == 1 and one == whole and many == whole


@pytest.mark.parametrize("capture", [FLOOD, VXLAN])
def test_one_pass_does_not_depend_on_where_batches_begin(monkeypatch, capture):
    rules = load_rules()
    whole = findings(analysis.analyze([str(capture)], rules), RULE)
    assert whole
    for size in (700, 3_001):
        monkeypatch.setattr(engine, "read_captures", lambda paths, size=size, **kw: ingest.read_captures(
            paths, **{**kw, "batch_packets": size}))
        assert findings(analysis.analyze([str(capture)], rules), RULE) == whole


def test_a_cut_bin_with_more_flows_than_are_kept_names_lower_bounds(tmp_path, monkeypatch):
    monkeypatch.setattr(rss_saturation, "OPEN_FLOWS_MAX", 2)
    [whole] = findings(analysis.analyze([str(VXLAN)], load_rules()), RULE)
    _, [many] = one_and_merged(cut(VXLAN, tmp_path, [4_000]), RULE)
    # each part of the cut bin keeps its 2 largest flows (of 300 on the queue): the others count less than in the
    # whole file's pass, whose bin is whole; said to be lower bounds
    assert whole["evidence"]["flow_counts_exact"] is many["evidence"]["flow_counts_exact"] is False
    counts = {f["src_port"]: f["packets_in_window"] for f in whole["evidence"]["flows"]}
    assert all(f["packets_in_window"] <= counts.get(f["src_port"], 47) for f in many["evidence"]["flows"])
    assert many["evidence"]["flows"] != whole["evidence"]["flows"]
    assert many["evidence"]["queue_packets"] == whole["evidence"]["queue_packets"]


def test_the_queue_share_figure_is_the_rules_bins(tshark):
    """One number, one source: the heat map's cells are the rule's own bins (100 ms), so the saturated bin's
    cell is the message's share ('took 62% of 11,295 packets') and its queue's packets the message's peak rate
    times the bin; tshark counts the bin's IP packets. The report's axis here has 1 ms bins: the figure drew
    shares per millisecond before, a different number."""
    from detector.findings import iso_time
    from tests._figures import drawn

    path = CAPTURES / "rss-elephant-flow.pcap"
    d = drawn(path.name, "rss-saturation")
    sat, figure, axis = d.finding, d.figure, d.bins
    assert axis.width_s < sat.evidence["bin_ms"] / 1e3
    [image] = d.ax.images
    share = np.asarray(image.get_array()).T                       # [column, queue]
    x0, x1, _, _ = image.get_extent()
    width = (x1 - x0) / len(share)
    assert width == pytest.approx(sat.evidence["bin_ms"] / 1e3)
    start = np.datetime64(sat.evidence["bin_starts"][0].rstrip("Z"), "ns").astype(np.int64)
    column = round(((start - axis.start_ns) / 1e9 - x0) / width)
    queue = sat.evidence["queue"]
    assert round(share[column, queue], 4) == sat.evidence["share_ratio"] and "took 62% of 11,295 packets" in sat.msg
    assert figure.packets[column, queue] == sat.evidence["queue_packets"]
    assert figure.packets[column, queue] / width == pytest.approx(sat.evidence["peak_queue_rate_pps"])
    window = f"frame.time_epoch >= {start / 1e9} && frame.time_epoch < {start / 1e9 + width} && (ip || ipv6)"
    assert figure.packets[column].sum() == sat.evidence["window_packets"] == tshark.count(path, window)
    assert iso_time(int(start)) == sat.evidence["bin_starts"][0]
    d.close()


def test_a_long_capture_sums_neighbouring_bins_and_says_so():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from detector.detect.figure import TimeBins

    own = np.array([10, 11, 5_000], dtype=np.int64)                  # 100 ms bins over ~8 minutes
    counts = np.array([[3, 1], [0, 4], [2, 2]], dtype=np.int64)
    figure = rss_saturation.QueueShareFigure(own, counts, 100_000_000, TimeBins(10**9, 10**9, 600))
    assert figure.merged == 5 and len(figure.packets) == 999 and figure.packets.sum() == counts.sum()
    assert figure.packets[0].tolist() == [3, 5] and figure.packets[-1].tolist() == [2, 2]
    fig, ax = plt.subplots()
    figure.draw(ax, None)
    assert ax.get_xlabel().endswith("(columns of 500 ms: 5 of the rule's bins summed)")
    plt.close(fig)

"""pmtud-blackhole on the bundled captures (the figures also counted by tshark) and on crafted frames."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scapy.all import ICMP, IP, TCP, UDP, Ether, Raw, wrpcap

from detector import engine
from detector.commands import analyze
from detector.detectors import REGISTRY, AnalysisContext
from detector.flows import FlowTable
from detector.rules import load_rules
from detector.schema import PacketBatch
from detector.stats import CaptureStats
from tests._cuts import cut, one_and_merged

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
RULE = "pmtud-blackhole"


def run(paths, tmp_path, rule=RULE):
    findings, _, _ = analyze([str(p) for p in paths], tmp_path / "out")
    return [f for f in findings if f.rule == rule]


def test_ipv4_blackhole_figures(tmp_path):
    path = CAPTURES / "pmtud-blackhole-ipv4.pcapng"
    [finding] = run([path], tmp_path)
    ev = finding.evidence
    assert ev["icmp_count"] == 12 and ev["reported_mtu"] == 1420
    assert ev["oversized_after_icmp"] == finding.n == 11
    assert finding.severity == "high"
    assert (finding.src_ip, finding.dest_ip, finding.src_port, finding.dest_port) == \
        ("203.0.113.80", "198.51.100.23", 443, 51514)
    assert ev["shrinking_retransmissions"] == 6 and ev["shrinking_example_bytes"] == [1500, 1460, 1420]
    assert ev["routers"] == ["192.0.2.254"]
    assert "1420" in finding.msg and "192.0.2.254" in finding.msg
    # goodput: 6 segments of 1380 bytes over the ~5 s the transfer crawled
    [flow] = ev["affected_flows"]
    assert 10_000 < flow["goodput_bps"] < 20_000
    assert flow["community_id"] == finding.community_id and finding.community_id.startswith("1:")
    assert {6, 8, 12, 14, 18, 20, 24, 26, 30, 32, 36, 38} <= set(ev["evidence_frames"])   # the ICMP messages


def test_ipv4_blackhole_figures_are_tsharks(tshark, tmp_path):
    """The figures asserted above, counted by tshark in the same bytes."""
    path = CAPTURES / "pmtud-blackhole-ipv4.pcapng"
    icmp = tshark.fields(path, "frame.number", "frame.time_epoch", "icmp.mtu",
                         display_filter="icmp.type == 3 && icmp.code == 4")
    assert len(icmp) == 12 and {row[2] for row in icmp} == {"1420"}
    # the server's packets above the MTU, later than the first message plus the 200 ms grace
    first = float(icmp[0][1])
    sent = tshark.fields(path, "frame.time_epoch", "ip.len", display_filter="ip.src == 203.0.113.80 && !icmp")
    assert len([row for row in sent if float(row[0]) > first + 0.2 and int(row[1]) > 1420]) == 11
    [finding] = run([path], tmp_path)
    assert {int(row[0]) for row in icmp} <= set(finding.evidence["evidence_frames"])
    ptb = tshark.fields(CAPTURES / "pmtud-blackhole-ipv6-vlan.pcapng", "icmpv6.mtu",
                        display_filter="icmpv6.type == 2 && vlan.id == 30")
    assert len(ptb) == 10 and {row[0] for row in ptb} == {"1420"}
    works = CAPTURES / "pmtud-works.pcapng"
    assert tshark.count(works, "icmp.type == 3 || icmpv6.type == 2") == 8


def test_ipv6_blackhole_on_vlan(tmp_path):
    path = CAPTURES / "pmtud-blackhole-ipv6-vlan.pcapng"
    [finding] = run([path], tmp_path)
    assert finding.evidence["icmp_count"] == 10
    assert finding.evidence["reported_mtu"] == 1420
    assert (finding.src_ip, finding.dest_ip) == ("2001:db8:10::80", "2001:db8:77::23")
    assert finding.severity == "high" and finding.evidence["shrinking_retransmissions"] == 5


def test_blackhole_buried_in_traffic_names_only_the_stuck_flow(tmp_path):
    [finding] = run([CAPTURES / "pmtud-blackhole-busy.pcapng"], tmp_path)
    assert [f["dest_port"] for f in finding.evidence["affected_flows"]] == [51600]
    assert finding.dest_ip == "198.51.100.23"


def test_pmtud_that_works_is_not_reported(tmp_path):
    path = CAPTURES / "pmtud-works.pcapng"
    # the near-miss does carry several messages per pair (8, as tshark counts them above): only
    # adaptation keeps it quiet
    assert run([path], tmp_path) == []


PROBES = CAPTURES / "pmtud-diagnostic-probes.pcapng"


def test_diagnostic_probes_are_info_with_the_mtu_they_found(tmp_path):
    found = {f.src_ip: f for f in run([PROBES], tmp_path)}
    assert sorted(found) == ["192.0.2.9", "203.0.113.80", "203.0.113.81"]
    assert all(f.severity == "info" and "not a black hole" in f.msg for f in found.values())
    ping, lsp, udp = found["203.0.113.80"], found["192.0.2.9"], found["203.0.113.81"]
    assert ping.evidence["probe_flows"] == [{"proto": "icmp", "src_port": 0, "dest_port": 0, "packets": 4,
                                             "ip_len_bytes": 1500, "echo": True}]
    assert (ping.evidence["icmp_count"], ping.evidence["reported_mtu"]) == (5, 1420)
    # the LSP ping sweeps its sizes, but toward 127.0.0.0/8 no host sends data
    assert lsp.dest_ip == "127.0.0.1" and lsp.evidence["to_loopback"] is True
    assert lsp.evidence["probe_flows"][0]["dest_port"] == 3503 and "ip_len_bytes" not in lsp.evidence["probe_flows"][0]
    assert (lsp.evidence["icmp_count"], lsp.evidence["reported_mtu"]) == (4, 1492)
    assert udp.evidence["probe_flows"][0]["ip_len_bytes"] == 1500 and udp.evidence["to_loopback"] is False


def test_diagnostic_probe_figures_are_tsharks(tshark):
    assert tshark.count(PROBES, "icmp.type == 3 && icmp.code == 4") == 14
    # (the frag-needed messages quote the probes' headers: only the 1514-byte frames are probes)
    assert tshark.count(PROBES, "icmp.type == 8 && ip.flags.df == 1 && frame.len == 1514") == 5
    assert tshark.count(PROBES, "mpls && ip.dst == 127.0.0.1 && udp.dstport == 3503 && ip.opt.type == 148") == 6


def _udp_sender(sizes, t_step=0.05):
    """A UDP sender with DF set that ignores the frag-needed each datagram above 1400 bytes draws."""
    packets = []
    for k, size in enumerate(sizes):
        datagram = Ether() / IP(src="203.0.113.9", dst="198.51.100.7", flags="DF", id=k) / \
            UDP(sport=4433, dport=50000) / Raw(bytes(size - 28))
        packets.append(_frame(k * t_step, datagram))
        if size > 1400:
            packets.append(_frame(k * t_step + 0.001, Ether() / IP(src="192.0.2.1", dst="203.0.113.9") /
                                  ICMP(type=3, code=4, nexthopmtu=1400) / Raw(bytes(datagram[IP])[:28])))
    return packets


def test_a_datagram_sender_is_judged_only_when_its_sizes_vary(tmp_path):
    path = tmp_path / "udp.pcap"
    wrpcap(str(path), _udp_sender([1500] * 12))
    [finding] = run([path], tmp_path / "fixed")
    assert finding.severity == "info" and finding.evidence["probe_flows"][0]["ip_len_bytes"] == 1500
    # an application choosing its sizes (QUIC-like) could shrink them, and does not: a black hole
    wrpcap(str(path), _udp_sender([1500, 1252, 1500, 1480, 1500, 1300, 1500, 1490, 1500, 1500, 1200, 1500]))
    [finding] = run([path], tmp_path / "varying")
    assert finding.severity == "medium" and finding.proto == "udp" and finding.dest_port == 50000
    # above 1400 bytes and later than the first message plus the 200 ms grace: datagrams 6-9 and 11
    assert finding.evidence["oversized_after_icmp"] == finding.n == 5
    assert finding.evidence["icmp_count"] == 9


def _frame(t, pkt):
    pkt.time = 1_767_225_600 + t
    return pkt


def _too_big(mtu, quoted):
    return Ether() / IP(src="192.0.2.1", dst="203.0.113.9") / ICMP(type=3, code=4, nexthopmtu=mtu) / \
        Raw(bytes(quoted[IP])[:28])


def _big_segment(seq):
    return Ether() / IP(src="203.0.113.9", dst="198.51.100.7", flags="DF") / \
        TCP(sport=443, dport=40000, flags="A", seq=seq) / Raw(bytes(1460))


def test_messages_without_the_hosts_packets_are_low(tmp_path):
    path = tmp_path / "icmp-only.pcap"
    wrpcap(str(path), [_frame(i * 0.5, _too_big(1400, _big_segment(1000))) for i in range(3)])
    [finding] = run([path], tmp_path)
    assert finding.severity == "low" and finding.evidence["icmp_count"] == 3
    assert finding.evidence["host_packets_after_icmp"] == 0
    assert "cannot be judged" in finding.msg


def test_an_mtu_no_host_may_adopt_is_ignored(tmp_path):
    path = tmp_path / "mtu-zero.pcap"
    packets = []
    for i in range(4):
        packets.append(_frame(i * 0.5, _big_segment(1000 + i * 1460)))
        packets.append(_frame(i * 0.5 + 0.001, _too_big(0, _big_segment(1000 + i * 1460))))
    wrpcap(str(path), packets)
    assert run([path], tmp_path) == []
    packets = [_frame(t, p.copy()) for t, p in ((float(p.time) - 1_767_225_600, p) for p in packets)]
    for p in packets:
        if p.haslayer(ICMP):
            p[ICMP].nexthopmtu = 1400
    wrpcap(str(path), packets)
    [finding] = run([path], tmp_path)      # the same frames with a real MTU: a black hole
    assert finding.evidence["reported_mtu"] == 1400


@pytest.mark.parametrize("retransmissions, found", [(2, True), (1, False)])
def test_two_oversized_packets_after_the_messages_make_a_black_hole_and_one_does_not(tmp_path, retransmissions,
                                                                                       found):
    # the sender is told twice (min_icmp_count), then retransmits its 1,500-byte segment unchanged once the
    # 200 ms grace is over: min_oversized_packets (2) such packets are a black hole, one is not yet
    stuck = _big_segment(1000)
    packets = [_frame(0, stuck), _frame(0.001, _too_big(1400, stuck)), _frame(0.002, _too_big(1400, stuck))]
    packets += [_frame(0.5 * (k + 1), stuck.copy()) for k in range(retransmissions)]
    path = tmp_path / "stuck.pcap"
    wrpcap(str(path), packets)
    findings = run([path], tmp_path)
    if not found:
        assert findings == []
        return
    [finding] = findings
    assert finding.severity == "medium" and finding.evidence["oversized_after_icmp"] == finding.n == 2
    assert finding.evidence["icmp_count"] == 2


def _batches(paths):
    """Decoded batches of the captures, kept in memory."""
    kept = []

    class Keep:
        def update(self, batch):
            kept.append(batch)

    engine.run([str(p) for p in paths], [Keep()])
    return kept


def _slice(batch: PacketBatch, rows) -> PacketBatch:
    return PacketBatch(batch.data, {name: col[rows] for name, col in batch.cols.items()}, batch.source)


def test_merged_halves_give_the_single_pass_finding():
    """Two partitions merged: the same finding; the second half's packets before its first message are
    not checked (the module's documented limit), so at most one oversized packet fewer."""
    path = CAPTURES / "pmtud-blackhole-ipv4.pcapng"
    rule = load_rules()[RULE]
    [batch] = _batches([path])
    flows, stats = FlowTable(), CaptureStats()
    flows.update(batch)
    stats.update(batch)
    ctx = AnalysisContext(flows=flows.to_frame(), stats=stats)
    whole = REGISTRY[RULE](rule)
    whole.update(batch)
    half = len(batch) // 2
    first, second = REGISTRY[RULE](rule), REGISTRY[RULE](rule)
    first.update(_slice(batch, np.arange(half)))
    second.update(_slice(batch, np.arange(half, len(batch))))
    [merged] = first.merge(second).findings(ctx)
    [single] = whole.findings(ctx)
    for key in ("icmp_count", "reported_mtu", "shrinking_retransmissions", "routers"):
        assert merged.evidence[key] == single.evidence[key], key
    assert merged.severity == single.severity == "high"
    assert single.evidence["oversized_after_icmp"] - 1 <= merged.evidence["oversized_after_icmp"] \
        <= single.evidence["oversized_after_icmp"]


def test_real_capture_where_pmtud_works_is_quiet(captures_real, tshark):
    """suricata-verify's bug-3616 capture: four frag-needed messages (MTU 1492) for a window of
    1500-byte segments, after which the sender uses 1492-byte packets: PMTUD working on real bytes."""
    path = captures_real / "suricata-verify" / "tests" / "bug-3616-smtp" / "input.pcap"
    [batch] = _batches([path])
    detector = REGISTRY[RULE](load_rules()[RULE])
    detector.update(batch)
    [pair] = detector.pairs.values()
    assert pair.icmp_count == tshark.count(path, "icmp.type == 3 && icmp.code == 4") == 4
    assert pair.mtu == 1492 and pair.packets_after > 0 and pair.oversized_after == 0
    flows, stats = FlowTable(), CaptureStats()
    flows.update(batch)
    assert detector.findings(AnalysisContext(flows=flows.to_frame(), stats=stats)) == []


def test_forged_messages_for_many_pairs_keep_the_state_bounded(tmp_path, monkeypatch):
    from detector.detectors import pmtud_blackhole

    monkeypatch.setattr(pmtud_blackhole, "MAX_PAIRS", 8)
    packets = []
    for i in range(20):
        quoted = Ether() / IP(src=f"203.0.113.{i + 1}", dst="198.51.100.7") / TCP(sport=443, dport=40000 + i)
        for k in range(3):
            packets.append(_frame(i + k * 0.1, _too_big(1400, quoted)))
    path = tmp_path / "forged.pcap"
    wrpcap(str(path), packets)
    [batch] = _batches([path])
    detector = REGISTRY[RULE](load_rules()[RULE])
    detector.update(batch)
    assert len(detector.pairs) == 8
    assert detector.unwatched_icmp == 12 * 3
    assert sum(pair.icmp_count for pair in detector.pairs.values()) == 8 * 3


@pytest.mark.parametrize("high_icmp_count,severity", [(9, "high"), (10, "medium")])
def test_the_message_count_that_makes_a_black_hole_high(tmp_path, high_icmp_count, severity):
    # the varying datagram sender draws 9 messages and shrinks no retransmission: only the count decides
    path = tmp_path / "udp.pcap"
    wrpcap(str(path), _udp_sender([1500, 1252, 1500, 1480, 1500, 1300, 1500, 1490, 1500, 1500, 1200, 1500]))
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "pmtud.yaml").write_text(f"id: pmtud-blackhole\nparams:\n  high_icmp_count: {high_icmp_count}\n")
    findings, _, _ = analyze([str(path)], tmp_path / "out", rules_dir=rules)
    [finding] = [f for f in findings if f.rule == RULE]
    assert finding.evidence["icmp_count"] == 9 and finding.severity == severity


# ---- a cluster's cuts between the oversized packets and the routers' messages ----------------------------------
# pmtud-blackhole-ipv4: frame 5 the first 1500-byte segment, 6 the router's message, 7 the retransmission at
# 1460, 8 its message, 9 the one at 1420, then the same again every second
CUTS = [
    ("pmtud-blackhole-ipv4.pcapng", [6]),                   # between the oversized segment and its message
    ("pmtud-blackhole-ipv4.pcapng", [7]),                   # every host packet after the part that named the pair
    ("pmtud-blackhole-ipv4.pcapng", [7, 8]),                # a part of one retransmission and no message at all
    ("pmtud-blackhole-ipv4.pcapng", [7, 9, 11, 13, 15, 30]),
    ("pmtud-blackhole-ipv6-vlan.pcapng", [6, 9, 14]),
    ("pmtud-blackhole-busy.pcapng", [41, 60, 100, 175, 211]),   # among other hosts' traffic
    ("two-incidents-at-once.pcapng", [297, 15228, 15343, 15398, 15467]),   # messages at 296, 15227, ...
]


@pytest.mark.parametrize("capture,starts", CUTS)
@pytest.mark.parametrize("tree", [False, True], ids=["in-order", "tree"])
def test_a_cut_after_the_message_merges_to_the_findings_of_one_pass(tmp_path, capture, starts, tree):
    paths = cut(CAPTURES / capture, tmp_path, starts)
    one, many = one_and_merged(paths, RULE, tree=tree)
    assert one and one[0]["evidence"]["oversized_after_icmp"] >= 2
    assert many == one


def test_host_packets_past_the_rows_kept_are_counted_by_size_across_a_cut(tmp_path, monkeypatch):
    from detector.detectors import pmtud_blackhole
    monkeypatch.setattr(pmtud_blackhole, "MAX_ROWS_PER_PAIR", 3)    # one pass keeps as few rows
    paths = cut(CAPTURES / "pmtud-blackhole-ipv4.pcapng", tmp_path, [7, 9, 20])
    for tree in (False, True):
        one, many = one_and_merged(paths, RULE, tree=tree)
        assert one[0]["evidence"]["oversized_after_icmp"] == 11 and many == one


def test_residual_past_max_pending_rows_the_counts_hold_but_not_the_ladder(tmp_path, monkeypatch):
    # documented in pmtud_blackhole.py: a part keeps MAX_PENDING_ROWS header rows in all; the pair's packets
    # past them are counted by flow and size, so counts stay those of one pass, the size ladder does not
    from detector.detectors import pmtud_blackhole
    monkeypatch.setattr(pmtud_blackhole, "MAX_PENDING_ROWS", 20)
    paths = cut(CAPTURES / "two-incidents-at-once.pcapng", tmp_path, [297])
    [one], [many] = one_and_merged(paths, RULE)
    assert many["n"] == one["n"] == 5
    assert many["evidence"]["oversized_after_icmp"] == one["evidence"]["oversized_after_icmp"]
    assert one["evidence"]["shrinking_retransmissions"] > many["evidence"]["shrinking_retransmissions"] == 0

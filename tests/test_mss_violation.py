"""mss-violation on the bundled captures (counts checked with tshark) and on crafted connections."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from scapy.all import IP, TCP, Ether, IPv6, Raw, wrpcap
from scapy.utils import PcapWriter

import detector
from detector.commands import analyze
from tests._cuts import cut, one_and_merged

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
RULE = "mss-violation"


def run(paths, tmp_path, rules_dir=None):
    findings, _, _ = analyze([str(p) for p in paths], tmp_path / "out", rules_dir)
    return [f for f in findings if f.rule == RULE]


# The segment counts the findings below assert, as tshark counts them in the same bytes.
TSHARK_COUNTS = [
    ("pmtud-blackhole-ipv4.pcapng", "ip.src == 203.0.113.80 && tcp.len > 1320", 18),
    ("pmtud-blackhole-ipv6-vlan.pcapng", "ipv6.src == 2001:db8:10::80 && tcp.len > 1300", 15),
    ("tso-host-capture.pcapng", "tcp.len > 1460", 12),
    # BIG TCP: tshark reads IPv4 total length 0 and IPv6 jumbograms, also inside tunnels over IPv6 (over
    # IPv4 it stops at the tunnel's UDP length 0, so those two files are checked against the plain one)
    ("big-tcp-ipv4-total-length-0.pcap", "tcp.len > 65535", 2),
    ("big-tcp-ipv6-jumbo.pcap", "tcp.len > 65535", 2),
    ("big-tcp-ipv6-jumbo-vxlan.pcap", "vxlan && tcp.len > 65535", 2),
    ("big-tcp-ipv6-jumbo-geneve.pcap", "geneve && tcp.len > 65535", 2),
]
BIG_TCP = sorted(p.name for p in CAPTURES.glob("big-tcp-*.pcap"))


@pytest.mark.parametrize("capture,display_filter,count", TSHARK_COUNTS)
def test_the_counts_asserted_are_tsharks(tshark, capture, display_filter, count):
    assert tshark.count(CAPTURES / capture, display_filter) == count


def test_blackhole_sender_exceeds_the_clients_mss(tmp_path):
    path = CAPTURES / "pmtud-blackhole-ipv4.pcapng"
    [finding] = run([path], tmp_path)
    assert finding.evidence["on_wire_segments"] == finding.n == 18
    assert finding.evidence["peer_mss"] == 1320 and finding.evidence["super_segments"] == 0
    assert finding.evidence["largest_payload_bytes"] == 1460
    assert finding.severity == "medium"
    assert (finding.src_ip, finding.src_port, finding.dest_ip, finding.dest_port) == \
        ("203.0.113.80", 443, "198.51.100.23", 51514)
    # cross-linked with the black hole the same host causes
    assert finding.evidence["pmtud_blackhole"] is True and "pmtud-blackhole" in finding.msg
    assert finding.community_id and finding.community_id.startswith("1:")


def test_ipv6_violation_names_endpoints_in_brackets(tmp_path):
    path = CAPTURES / "pmtud-blackhole-ipv6-vlan.pcapng"
    [finding] = run([path], tmp_path)
    assert finding.n == 15
    assert "[2001:db8:10::80]:443 -> [2001:db8:77::23]:52020" in finding.msg


def test_tso_host_capture_is_info_only(tmp_path):
    path = CAPTURES / "tso-host-capture.pcapng"
    [finding] = run([path], tmp_path)
    assert finding.severity == "info"
    assert finding.evidence["super_segments"] == 12
    assert finding.evidence["on_wire_segments"] == 0
    assert "TSO" in finding.msg and finding.evidence["largest_payload_bytes"] == 14600


def test_on_a_jumbo_link_the_same_segments_are_violations(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "jumbo.yaml").write_text("id: mss-violation\nparams:\n  link_mtu_bytes: 16000\n")
    [finding] = run([CAPTURES / "tso-host-capture.pcapng"], tmp_path, rules)
    assert finding.severity == "medium" and finding.evidence["on_wire_segments"] == 12


def test_near_misses_are_quiet(tmp_path):
    assert run([CAPTURES / "pmtud-works.pcapng", CAPTURES / "benign-office.pcapng"], tmp_path) == []


def _connection(mss, payloads, with_syn=True, v6=False):
    """A client announcing `mss`, then server segments of the given payload sizes."""
    net, back = ((IPv6(src="2001:db8::1", dst="2001:db8::2"), IPv6(src="2001:db8::2", dst="2001:db8::1")) if v6
                 else (IP(src="10.0.0.1", dst="10.0.0.2"), IP(src="10.0.0.2", dst="10.0.0.1")))
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    frames = []
    if with_syn:
        frames.append(eth / net / TCP(sport=40000, dport=80, flags="S", seq=1, options=[("MSS", mss)]))
        frames.append(eth / back / TCP(sport=80, dport=40000, flags="SA", seq=100, ack=2, options=[("MSS", 1460)]))
    seq = 101
    for size in payloads:
        frames.append(eth / back / TCP(sport=80, dport=40000, flags="A", seq=seq, ack=2) / Raw(bytes(size)))
        seq += size
    for i, frame in enumerate(frames):
        frame.time = 1_767_225_600 + i * 0.01
    return frames


@pytest.mark.parametrize("v6", [False, True])
def test_segments_at_the_mss_pass_and_one_byte_more_is_low(tmp_path, v6):
    path = tmp_path / "conn.pcap"
    wrpcap(str(path), _connection(1000, [1000, 1000, 999], v6=v6))
    assert run([path], tmp_path) == []
    wrpcap(str(path), _connection(1000, [1000, 1001, 1000], v6=v6))
    [finding] = run([path], tmp_path)
    assert finding.severity == "low" and finding.n == 1 and finding.evidence["largest_payload_bytes"] == 1001
    wrpcap(str(path), _connection(1000, [1001, 1000, 1200], v6=v6))
    [finding] = run([path], tmp_path)
    assert finding.severity == "low" and finding.n == 2       # under min_segments (3)
    wrpcap(str(path), _connection(1000, [1001, 1200, 1001], v6=v6))
    [finding] = run([path], tmp_path)
    assert finding.severity == "medium" and finding.n == 3


def test_without_the_syn_the_mss_is_unknown_and_nothing_is_judged(tmp_path):
    path = tmp_path / "midstream.pcap"
    wrpcap(str(path), _connection(1000, [1400, 1400, 1400], with_syn=False))
    assert run([path], tmp_path) == []


@pytest.mark.parametrize("capture", BIG_TCP)
def test_big_tcp_segments_before_any_syn_are_not_judged(capture, tmp_path):
    # payloads above 65,535 bytes with no MSS known once indexed an empty table (IndexError, no findings.json)
    assert len(BIG_TCP) == 6
    payloads = detector.open(CAPTURES / capture).packets["payload_len"]
    assert sorted(payloads[payloads > 0xFFFF].tolist()) == [66_000, 70_000]
    findings, _, out = analyze([CAPTURES / capture], tmp_path / "out")
    assert [f for f in findings if f.rule == RULE] == []
    assert json.loads(out.read_text())["stats"]["packets"] == 4


def _big_tcp_frame(payload: int, syn_first: bool) -> list[bytes]:
    """A BIG TCP download as a host captures it: IPv4 total length 0, the real length the captured one."""
    eth = Ether(src="02:00:00:00:00:02", dst="02:00:00:00:00:01")
    server, client = IP(src="10.0.0.2", dst="10.0.0.1", flags="DF"), IP(src="10.0.0.1", dst="10.0.0.2")
    frames = []
    if syn_first:
        frames.append(bytes(eth / client / TCP(sport=40000, dport=80, flags="S", seq=1, options=[("MSS", 1460)])))
    big = bytearray(bytes(eth / server / TCP(sport=80, dport=40000, flags="A", seq=101, ack=2)) + bytes(payload))
    big[16:18] = b"\x00\x00"     # IPv4 total length: left to the NIC
    frames.append(bytes(big))
    return frames


@pytest.mark.parametrize("syn_first", [False, True])
def test_a_big_tcp_super_segment_is_judged_against_its_peers_mss(tmp_path, syn_first):
    path = tmp_path / "big.pcap"
    writer = PcapWriter(str(path), linktype=1, snaplen=262144, sync=False)
    writer.write_header(None)
    for i, frame in enumerate(_big_tcp_frame(100_000, syn_first)):
        writer.write_packet(frame, sec=1_767_225_600, usec=i, caplen=len(frame), wirelen=len(frame))
    writer.close()
    found = run([path], tmp_path)
    if not syn_first:
        assert found == []
        return
    [finding] = found
    assert finding.severity == "info" and finding.evidence["largest_payload_bytes"] == 100_000
    assert finding.evidence["super_segments"] == 1 and finding.evidence["peer_mss"] == 1460


def _mtu_rules(tmp_path, mtu: int) -> Path:
    rules = tmp_path / f"mtu-{mtu}"
    rules.mkdir()
    (rules / "mtu.yaml").write_text(f"id: mss-violation\nparams:\n  link_mtu_bytes: {mtu}\n")
    return rules


def test_a_link_of_mtu_65536_carries_its_full_packets_and_no_link_carries_more(tmp_path):
    # Linux loopback's MTU, 65,536: IPv6 packets of that size (65,496 bytes of payload length) are on its
    # wire, so segments in them above the peer's MSS are violations; IPv4 cannot reach 65,536 bytes
    path = tmp_path / "loopback.pcap"
    frames = _connection(1000, [65_536 - 40 - 20] * 3, v6=True)
    assert [len(frame[IPv6]) for frame in frames[2:]] == [65_536] * 3
    wrpcap(str(path), frames, snaplen=262_144)
    [offload] = run([path], tmp_path / "default")
    assert offload.severity == "info" and offload.evidence["super_segments"] == 3
    [finding] = run([path], tmp_path / "loopback", _mtu_rules(tmp_path, 65_536))
    assert finding.severity == "medium" and finding.evidence["on_wire_segments"] == finding.n == 3
    assert finding.evidence["largest_payload_bytes"] == 65_476
    # a larger link MTU exists on no link (IPv6 jumbograms, RFC 2675, travel on none): refused
    with pytest.raises(detector.RuleError, match=r"link_mtu_bytes.*65537 is outside the allowed range 68\.\.65,536"):
        run([path], tmp_path / "jumbogram", _mtu_rules(tmp_path, 65_537))


@pytest.mark.parametrize("payload, severity", [(1460, "medium"), (1461, "info")])
def test_at_the_default_link_mtu_a_1500_byte_packet_is_on_the_wire_and_1501_is_not(tmp_path, payload, severity):
    path = tmp_path / "conn.pcap"
    frames = _connection(1000, [payload] * 3)
    assert [len(frame[IP]) for frame in frames[2:]] == [payload + 40] * 3
    wrpcap(str(path), frames)
    [finding] = run([path], tmp_path)
    assert finding.severity == severity and finding.evidence["largest_payload_bytes"] == payload
    assert finding.evidence["on_wire_segments"] == (3 if severity == "medium" else 0)


# ---- a cluster's cut between the SYN and the segments it limits ------------------------------------------------
@pytest.mark.parametrize("capture,starts", [
    ("pmtud-blackhole-ipv4.pcapng", [5]),                  # the first violating segment opens the second part
    ("pmtud-blackhole-ipv4.pcapng", [4, 6, 9, 20, 33]),    # and cuts between many of them
    ("pmtud-blackhole-ipv6-vlan.pcapng", [5, 12]),
    ("tso-host-capture.pcapng", [4, 5, 17]),               # super-segments: info either way, the same counts
])
@pytest.mark.parametrize("tree", [False, True], ids=["in-order", "tree"])
def test_a_cut_after_the_syn_merges_to_the_findings_of_one_pass(tmp_path, capture, starts, tree):
    paths = cut(CAPTURES / capture, tmp_path, starts)
    one, many = one_and_merged(paths, RULE, tree=tree)
    assert len(one) == 1 and one[0]["n"] >= 12
    assert many == one


def mss_below_the_floor(path, payload: int) -> Path:
    """A SYN announcing MSS 400 (below PENDING_FLOOR_BYTES), then three segments of `payload` bytes back."""
    client, server = IP(src="10.9.0.2", dst="10.9.0.1"), IP(src="10.9.0.1", dst="10.9.0.2")
    frames = [Ether() / client / TCP(sport=40000, dport=80, flags="S", seq=1, options=[("MSS", 400)]),
              Ether() / server / TCP(sport=80, dport=40000, flags="SA", seq=7, ack=2, options=[("MSS", 1460)])]
    frames += [Ether() / server / TCP(sport=80, dport=40000, flags="A", seq=8 + i * payload, ack=2)
               / Raw(b"x" * payload) for i in range(3)]
    for i, frame in enumerate(frames):
        frame.time = 1_700_000_000 + i * 0.01
    wrpcap(str(path), frames)
    return path


def test_segments_above_the_floor_are_judged_after_a_cut(tmp_path):
    paths = cut(mss_below_the_floor(tmp_path / "above.pcap", 600), tmp_path / "parts", [3])
    one, many = one_and_merged(paths, RULE)
    assert [f["n"] for f in one] == [3] and many == one


def test_residual_segments_at_most_the_floor_after_a_cut_are_not_judged(tmp_path):
    # documented in mss_violation.py: a later part keeps no segment of PENDING_FLOOR_BYTES or less, so an MSS
    # announced below it before the cut goes unjudged there (one pass: 3 violations, the parts: none)
    from detector.detectors.mss_violation import PENDING_FLOOR_BYTES
    assert 500 <= PENDING_FLOOR_BYTES
    paths = cut(mss_below_the_floor(tmp_path / "below.pcap", 500), tmp_path / "parts", [3])
    one, many = one_and_merged(paths, RULE)
    assert [f["n"] for f in one] == [3] and many == []


def test_a_real_host_capture_cut_just_before_its_super_segment(captures_real, tmp_path):
    # a Windows host's capture: one GRO super-segment of 2,904 bytes (frame 942) long after its connection's SYN
    path = captures_real / "lucaderi-sgr/2021/Esercitazioni/2/Gruppo9/DNS/dgapcap.pcapng"
    paths = cut(path, tmp_path, [300, 942, 943])
    one, many = one_and_merged(paths, RULE)
    assert [(f["severity"], f["evidence"]["evidence_frames"]) for f in one] == [("info", [942])]
    assert many == one

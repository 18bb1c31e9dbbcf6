"""rip-trigger on real bytes: the payload judge on RFC layouts, bundled RIP captures, and the echo-loop link."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest
from scapy.all import IP, UDP, Ether, IPv6, Raw, raw, wrpcap
from scapy.layers.rip import RIP, RIPEntry

from detector.commands import analyze
from detector.decode.app.rip import (
    BAD_AFI,
    BAD_AUTH,
    BAD_COMMAND,
    BAD_LENGTH,
    BAD_METRIC,
    BAD_PREFIX_LEN,
    BAD_VERSION,
    EMPTY,
    KIND_RIP,
    KIND_RIPNG,
    KIND_WRONG_FAMILY,
    NONZERO_MBZ,
    VALID,
    VERDICTS,
    WRONG_FAMILY,
    ZERO_FILLED,
)
from detector.findings import SEVERITY_RANK
from tests._app import app_table

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
T0 = 1_767_225_600


def rip_entry(afi=2, tag=0, addr=b"\x0a\x01\x00\x00", mask=b"\xff\xff\x00\x00", hop=bytes(4), metric=1):
    return struct.pack("!HH4s4s4sI", afi, tag, addr, mask, hop, metric)


def ripng_entry(prefix=bytes(16), tag=0, plen=48, metric=1):
    return struct.pack("!16sHBB", prefix, tag, plen, metric)


V1_ENTRY = rip_entry(mask=bytes(4))
AUTH_ENTRY = struct.pack("!HH16s", 0xFFFF, 2, b"secret".ljust(16, b"\0"))
WHOLE_TABLE = rip_entry(afi=0, addr=bytes(4), mask=bytes(4), metric=16)


def crypto(command, entries, digest_bytes=16, packet_len=None, trailer_type=1, auth_type=3):
    """A RIPv2 message with cryptographic authentication (RFC 2082 keyed MD5, RFC 4822 HMAC-SHA):
    the authentication entry names where the trailer (0xFFFF, type 1, digest) starts."""
    body = 4 + 20 + len(entries)
    auth = struct.pack("!HHHBBI8x", 0xFFFF, auth_type, body if packet_len is None else packet_len, 1,
                       digest_bytes, 7)
    trailer = struct.pack("!HH", 0xFFFF, trailer_type) + bytes(range(digest_bytes))
    return struct.pack("!BBH", command, 2, 0) + auth + entries + trailer

CASES = [
    ("v2 response", KIND_RIP, b"\x02\x02\x00\x00" + rip_entry() + rip_entry(metric=16), VALID),
    ("v1 response", KIND_RIP, b"\x02\x01\x00\x00" + V1_ENTRY, VALID),
    ("v2 with authentication", KIND_RIP, b"\x02\x02\x00\x00" + AUTH_ENTRY + rip_entry(), VALID),
    ("whole-table request", KIND_RIP, b"\x01\x02\x00\x00" + rip_entry(afi=0, addr=bytes(4), mask=bytes(4),
                                                                      metric=16), VALID),
    ("v2 whole-table request with a password", KIND_RIP, b"\x01\x02\x00\x00" + AUTH_ENTRY + WHOLE_TABLE, VALID),
    ("v2 keyed MD5 (RFC 2082)", KIND_RIP, crypto(2, rip_entry() + rip_entry(metric=3)), VALID),
    ("v2 whole-table request, keyed MD5", KIND_RIP, crypto(1, WHOLE_TABLE), VALID),
    ("v2 whole-table request, HMAC-SHA-1", KIND_RIP, crypto(1, WHOLE_TABLE, 20), VALID),
    ("v2 HMAC-SHA-256 (RFC 4822)", KIND_RIP, crypto(2, rip_entry(), 32), VALID),
    ("v2 HMAC-SHA-384", KIND_RIP, crypto(2, rip_entry(), 48), VALID),
    ("v2 HMAC-SHA-512", KIND_RIP, crypto(2, rip_entry() * 24, 64), VALID),
    ("ripng response", KIND_RIPNG, b"\x02\x01\x00\x00" + ripng_entry() + ripng_entry(plen=0, metric=0xFF), VALID),
    ("ripng whole-table request", KIND_RIPNG, b"\x01\x01\x00\x00" + ripng_entry(plen=0, metric=16), VALID),
    ("empty", KIND_RIP, b"", EMPTY),
    ("24 zero bytes (the incident)", KIND_RIP, bytes(24), ZERO_FILLED),
    ("zeros to the RIP port over IPv6", KIND_WRONG_FAMILY, bytes(24), ZERO_FILLED),
    ("a RIP message over the other family", KIND_WRONG_FAMILY, b"\x02\x02\x00\x00" + rip_entry(), WRONG_FAMILY),
    ("header only", KIND_RIP, b"\x02\x02\x00\x00", BAD_LENGTH),
    ("entry cut short", KIND_RIP, b"\x02\x02\x00\x00" + rip_entry()[:12], BAD_LENGTH),
    ("26 entries", KIND_RIP, b"\x02\x02\x00\x00" + rip_entry() * 26, BAD_LENGTH),
    ("command 9", KIND_RIP, b"\x09\x02\x00\x00" + rip_entry(), BAD_COMMAND),
    ("version 3", KIND_RIP, b"\x02\x03\x00\x00" + rip_entry(), BAD_VERSION),
    ("v1 header must-be-zero", KIND_RIP, b"\x02\x01\x12\x34" + V1_ENTRY, NONZERO_MBZ),
    ("v1 entry with a mask", KIND_RIP, b"\x02\x01\x00\x00" + rip_entry(), NONZERO_MBZ),
    ("address family 7", KIND_RIP, b"\x02\x02\x00\x00" + rip_entry(afi=7), BAD_AFI),
    ("auth entry in v1", KIND_RIP, b"\x02\x01\x00\x00" + AUTH_ENTRY, BAD_AFI),
    ("metric 17", KIND_RIP, b"\x02\x02\x00\x00" + rip_entry(metric=17), BAD_METRIC),
    ("metric 0", KIND_RIP, b"\x02\x02\x00\x00" + rip_entry(metric=0), BAD_METRIC),
    ("a 12-byte digest", KIND_RIP, crypto(2, rip_entry(), 12), BAD_AUTH),
    ("packet length past the entries", KIND_RIP, crypto(2, rip_entry(), 16, packet_len=64), BAD_AUTH),
    ("trailer of another type", KIND_RIP, crypto(2, rip_entry(), 32, trailer_type=2), BAD_AUTH),
    ("authentication type 9", KIND_RIP, b"\x02\x02\x00\x00" + AUTH_ENTRY[:2] + b"\x00\x09" + AUTH_ENTRY[4:] +
     rip_entry(), BAD_AUTH),
    ("authentication entry after a route", KIND_RIP, b"\x02\x02\x00\x00" + rip_entry() + AUTH_ENTRY, BAD_AFI),
    ("25 routes after a password", KIND_RIP, b"\x02\x02\x00\x00" + AUTH_ENTRY + rip_entry() * 25, BAD_LENGTH),
    ("a whole-table entry among routes", KIND_RIP, b"\x01\x02\x00\x00" + AUTH_ENTRY + WHOLE_TABLE + rip_entry(),
     BAD_AFI),
    ("ripng version 2", KIND_RIPNG, b"\x02\x02\x00\x00" + ripng_entry(), BAD_VERSION),
    ("ripng prefix /200", KIND_RIPNG, b"\x02\x01\x00\x00" + ripng_entry(plen=200), BAD_PREFIX_LEN),
    ("ripng metric 20", KIND_RIPNG, b"\x02\x01\x00\x00" + ripng_entry(metric=20), BAD_METRIC),
]


# how each kind of message is carried: RIP over IPv4 to 520, RIPng over IPv6 to 521, and RIP's port over IPv6
CARRIERS = {KIND_RIP: (IP, "192.0.2.1", "224.0.0.9", 520), KIND_RIPNG: (IPv6, "fe80::1", "ff02::9", 521),
            KIND_WRONG_FAMILY: (IPv6, "fe80::1", "ff02::9", 520)}


def carried(payload, kind, length=None) -> bytes:
    """A frame carrying `payload` to the RIP port of `kind`; its IP and UDP headers claim `length` bytes of
    payload (default: the payload's), of which the frame holds `payload` only."""
    ip, src, dst, port = CARRIERS[kind]
    length = len(payload) if length is None else length
    lengths = {"len": 20 + 8 + length} if ip is IP else {"plen": 8 + length}
    return raw(Ether() / ip(src=src, dst=dst, **lengths) / UDP(sport=port, dport=port, len=8 + length)) + payload


def judge(payloads, kinds, lengths=None, caplens=None):
    """The rip table's verdict on each payload, carried in one batch as a capture holds frames: `lengths`
    claimed by the headers, `caplens` the payload bytes the capture kept."""
    lengths = lengths if lengths is not None else [len(p) for p in payloads]
    caplens = caplens if caplens is not None else [len(p) for p in payloads]
    frames = [(1, carried(p[:cap], kind, length)) for p, kind, length, cap in zip(payloads, kinds, lengths, caplens)]
    return app_table(frames, "rip")["verdict"].tolist()


@pytest.mark.parametrize("name, kind, payload, verdict", CASES, ids=[c[0] for c in CASES])
def test_payload_verdicts(name, kind, payload, verdict):
    assert judge([payload], [kind]) == [verdict]


def test_judge_reads_only_captured_bytes():
    # a 504-byte message of which 30 bytes were captured: the judge stops at the capture's end
    payload = b"\x02\x02\x00\x00" + rip_entry() + b"\xff" * 6
    assert judge([payload], [KIND_RIP], lengths=[504], caplens=[len(payload)]) == [VALID]
    # a header that claims more than the frame holds, in a batch of several
    assert judge([b"\x02", bytes(24)], [KIND_RIP, KIND_RIP], lengths=[65_000, 24], caplens=[1, 24]) == \
        [BAD_LENGTH, ZERO_FILLED]
    # a frame that ends with its UDP header leaves nothing to read, so nothing to fault
    assert judge([bytes(24)], [KIND_RIP], caplens=[0]) == [VALID]


def rip_findings(findings):
    return [f for f in findings if f.rule == "rip-trigger"]


def test_routers_speaking_rip_are_info_only(tmp_path):
    found = rip_findings(analyze([CAPTURES / "rip-routers.pcapng"], tmp_path)[0])
    assert {f.src_ip for f in found} == {"10.20.0.1", "10.20.0.2", "10.20.0.3", "fe80::1", "fe80::2"}
    assert all(f.severity == "info" for f in found)
    by_source = {f.src_ip: f for f in found}
    # four multicast updates and four authenticated ones, all well-formed
    assert by_source["10.20.0.1"].evidence["verdicts"] == {"well-formed": 8}
    assert by_source["10.20.0.3"].evidence["target_ips"] == ["10.20.255.255"]   # RIPv1 broadcast
    assert by_source["fe80::1"].msg.startswith("RIPng speaker fe80::1")


def test_authenticated_routers_are_info_only(tmp_path):
    # keyed MD5 and HMAC-SHA trailers, and whole-table requests behind an authentication entry, were probes
    found = rip_findings(analyze([CAPTURES / "rip-authenticated.pcapng"], tmp_path)[0])
    assert len(found) == 6
    for f in found:
        assert f.severity == "info" and list(f.evidence["verdicts"]) == ["well-formed"], f.msg
    assert sum(f.n for f in found) == 21


def test_judge_reads_only_the_captured_part_of_an_authenticated_message():
    message = crypto(2, rip_entry() * 3, 32)
    # cut inside the entries, inside the authentication entry, before the packet length field
    for cut in (60, 30, 9):
        assert judge([message[:cut]], [KIND_RIP], lengths=[len(message)], caplens=[cut]) == [VALID]
    assert judge([message[:9]], [KIND_RIP], lengths=[len(message) + 4], caplens=[9]) == [VALID]
    assert judge([message[:60]], [KIND_RIP], lengths=[len(message) + 4], caplens=[60]) == [BAD_AUTH]


def _rip_packet(src, dst, payload, dest_mac="01:00:5e:00:00:09"):
    return (Ether(src="02:00:00:00:00:01", dst=dest_mac) / IP(src=src, dst=dst, ttl=1) /
            UDP(sport=520, dport=520) / Raw(payload))


def test_a_local_router_with_broken_entries_is_a_faulty_speaker_not_a_probe(tmp_path):
    broken = b"\x02\x02\x00\x00" + rip_entry() + rip_entry(metric=17)
    packets = [_rip_packet("10.7.0.1", "224.0.0.9", broken),
               _rip_packet("10.7.0.1", "224.0.0.9", crypto(2, rip_entry())),
               # the same bytes unicast from the Internet, and a zero-filled payload to the group: probes
               _rip_packet("198.51.100.7", "10.7.0.1", broken, dest_mac="02:00:00:00:00:02"),
               _rip_packet("10.7.0.2", "224.0.0.9", bytes(24))]
    for i, pkt in enumerate(packets):
        pkt.time = T0 + i
    path = tmp_path / "speakers.pcap"
    wrpcap(str(path), packets)
    found = {f.src_ip: f for f in rip_findings(analyze([path], tmp_path / "out")[0])}
    speaker = found["10.7.0.1"]
    assert speaker.severity == "low" and speaker.n == 2
    assert speaker.evidence["verdicts"] == {VERDICTS[BAD_METRIC]: 1, VERDICTS[VALID]: 1}
    assert "faulty or misconfigured router" in speaker.msg and "1 of 2 messages" in speaker.msg
    assert found["198.51.100.7"].severity == "medium" and VERDICTS[BAD_METRIC] in found["198.51.100.7"].msg
    assert found["10.7.0.2"].severity == "medium" and "zero-filled payload" in found["10.7.0.2"].msg


def test_tcpdumps_corrupted_ripv2_update_is_a_faulty_speaker(captures_real, tmp_path):
    # a router's multicast update from tcpdump's tests whose sixth route carries metric 268,435,457
    path = captures_real / "tcpdump/tests/ripv2-invalid-length.pcap"
    (f,) = rip_findings(analyze([path], tmp_path)[0])
    assert (f.src_ip, f.severity, f.n) == ("10.7.56.254", "low", 1)
    assert f.evidence["verdicts"] == {VERDICTS[BAD_METRIC]: 1} and f.evidence["to_rip_group"] is True


def test_the_corrupted_metric_is_tsharks(captures_real, tshark):
    path = captures_real / "tcpdump/tests/ripv2-invalid-length.pcap"
    rows = tshark.fields(path, "ip.src", "ip.dst", "rip.metric")
    assert rows[0][:2] == ["10.7.56.254", "224.0.0.9"] and "268435457" in rows[0][2].split(",")


def test_scan_from_outside_is_a_medium_probe(tmp_path):
    found = {f.src_ip: f for f in rip_findings(analyze([CAPTURES / "rip-scan.pcap"], tmp_path)[0])}
    scan = found["198.51.100.77"]
    assert scan.severity == "medium" and scan.n == 20
    assert scan.evidence["targets"] == 20
    assert scan.evidence["target_ips"][:3] == ["203.0.113.1", "203.0.113.2", "203.0.113.3"]
    assert scan.evidence["verdicts"] == {"zero-filled payload": 20}
    assert "20 targets" in scan.msg and "zero-filled payload" in scan.msg
    # a well-formed RIPng request, but unicast from outside the local networks
    request = found["2001:db8:77::77"]
    assert request.severity == "medium" and request.evidence["verdicts"] == {"well-formed": 1}
    assert "unicast from outside the local networks" in request.msg


@pytest.mark.parametrize("name, port", [("echo-loop-rip-ipv4.pcapng", 520), ("echo-loop-rip-ipv6-vlan.pcap", 520),
                                        ("echo-loop-buried.pcapng", 521)])
def test_trigger_and_loop_name_each_other(tmp_path, name, port):
    findings = analyze([CAPTURES / name], tmp_path)[0]
    (loop,) = [f for f in findings if f.rule == "echo-loop"]
    (trigger,) = rip_findings(findings)
    fingerprint = loop.evidence["fingerprint"]
    assert trigger.severity == ("critical" if loop.severity in ("high", "critical") else "high")
    assert loop.evidence["loop"] is True
    assert trigger.evidence["related"] == [{"rule": "echo-loop", "fingerprint": fingerprint,
                                            "severity": loop.severity, "copies": loop.n, "loop": True}]
    (back,) = loop.evidence["related"]
    assert back["rule"] == "rip-trigger" and back["fingerprint"] == fingerprint
    assert back["src_ip"] == trigger.src_ip == loop.src_ip
    # the trigger is the loop's first copy; its thousands of copies count as one probe
    assert back["first_frame"] == loop.evidence["first_frame"] == trigger.evidence["evidence_frames"][0]
    assert trigger.n == 1 and trigger.dest_port == port
    assert trigger.first_seen == trigger.last_seen == loop.first_seen
    assert "zero-filled payload" in trigger.msg and "the one looping" in trigger.msg


def test_local_networks_parameter(tmp_path):
    request = (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="198.18.7.7", dst="192.0.2.1") /
               UDP(sport=520, dport=520) / RIP(cmd=1, version=2) /
               RIPEntry(AF=0, addr="0.0.0.0", mask="0.0.0.0", metric=16))
    request.time = T0
    path = tmp_path / "request.pcap"
    wrpcap(str(path), [request])
    (f,) = rip_findings(analyze([path], tmp_path / "a")[0])
    assert f.severity == "medium" and f.evidence["source_local"] is False
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "rip.yaml").write_text("id: rip-trigger\nparams:\n  local_networks: [198.18.0.0/15]\n")
    (f,) = rip_findings(analyze([path], tmp_path / "b", rules_dir=rules)[0])
    assert f.severity == "info" and f.evidence["source_local"] is True


def test_ipv6_to_port_520_and_non_rip_ports(tmp_path):
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    packets = [eth / IPv6(src="fe80::5", dst="ff02::9") / UDP(sport=520, dport=520) / Raw(b"\x02\x02\x00\x00" +
                                                                                         rip_entry()),
               eth / IP(src="10.0.0.5", dst="10.0.0.6") / UDP(sport=520, dport=5520) / Raw(bytes(24))]
    for i, pkt in enumerate(packets):
        pkt.time = T0 + i
    path = tmp_path / "mixed.pcap"
    wrpcap(str(path), packets)
    (f,) = rip_findings(analyze([path], tmp_path / "out")[0])
    # RIPv2 bytes over IPv6 to port 520: no RIP speaks there, even from a link-local source to ff02::9
    assert f.src_ip == "fe80::5" and f.severity == "medium"
    assert list(f.evidence["verdicts"]) == [VERDICTS[WRONG_FAMILY]]


def test_state_folds_under_a_probe_flood_but_keeps_counts_and_the_loop(tmp_path, monkeypatch):
    import detector.detectors.rip_trigger as rip
    monkeypatch.setattr(rip, "MAX_ROWS", 20)
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    packets = []
    for i in range(300):       # 300 probes to 150 targets, two different frames each
        pkt = eth / IP(src="198.51.100.66", dst=f"10.{i % 150 // 100}.{i % 150 % 100}.1", id=i) / \
            UDP(sport=7, dport=520) / Raw(bytes(24))
        pkt.time = T0 + i * 0.001
        packets.append(pkt)
    loop = eth / IP(src="198.51.100.66", dst="192.0.2.1", id=1) / UDP(sport=7, dport=520) / Raw(bytes(24))
    for k in range(1500):
        copy = loop.copy()
        copy.time = T0 + 0.4 + k * 0.0001
        packets.append(copy)
    path = tmp_path / "flood.pcap"
    wrpcap(str(path), packets)
    findings = analyze([path], tmp_path / "out")[0]
    (trigger,) = rip_findings(findings)
    assert trigger.n == 301                      # every probe, the looping frame once
    assert trigger.evidence["targets"] == 151    # 150 counted after folding, plus the looped one
    assert trigger.severity == "critical" and trigger.evidence["related"][0]["copies"] == 1500


def test_only_a_loop_escalates_the_probe_a_flood_repeats(tmp_path):
    findings = analyze([CAPTURES / "identical-frame-floods.pcapng"], tmp_path)[0]
    (probe,) = rip_findings(findings)
    assert probe.src_ip == "ff02::1" and probe.severity == "medium"
    # every copy of a flooded frame was sent by the source: all are probes
    assert probe.n == 3000
    assert probe.evidence["related"][0]["loop"] is False and "not a loop" in probe.msg


def test_findings_come_most_severe_first_then_in_time(tmp_path):
    findings, _, _ = analyze([CAPTURES / "rip-routers.pcapng", CAPTURES / "rip-scan.pcap"], tmp_path / "out",
                             report=False)
    order = [(f.severity, f.first_seen) for f in findings if f.rule == "rip-trigger"]
    assert {severity for severity, _ in order} == {"medium", "info"}
    assert order == sorted(order, key=lambda item: (-SEVERITY_RANK[item[0]], item[1]))

"""rip-trigger on real bytes: the payload judge on RFC layouts, bundled RIP captures, and the echo-loop link."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from scapy.all import IP, UDP, Ether, IPv6, Raw, wrpcap
from scapy.layers.rip import RIP, RIPEntry

from detector.commands import analyze
from detector.detectors.rip_trigger import (BAD_AFI, BAD_COMMAND, BAD_LENGTH, BAD_METRIC, BAD_PREFIX_LEN,
                                            BAD_VERSION, EMPTY, KIND_RIP, KIND_RIPNG, KIND_WRONG_FAMILY,
                                            NONZERO_MBZ, VALID, VERDICTS, WRONG_FAMILY, ZERO_FILLED,
                                            judge_payloads)

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
T0 = 1_767_225_600


def rip_entry(afi=2, tag=0, addr=b"\x0a\x01\x00\x00", mask=b"\xff\xff\x00\x00", hop=bytes(4), metric=1):
    return struct.pack("!HH4s4s4sI", afi, tag, addr, mask, hop, metric)


def ripng_entry(prefix=bytes(16), tag=0, plen=48, metric=1):
    return struct.pack("!16sHBB", prefix, tag, plen, metric)


V1_ENTRY = rip_entry(mask=bytes(4))
AUTH_ENTRY = struct.pack("!HH16s", 0xFFFF, 2, b"secret".ljust(16, b"\0"))

CASES = [
    ("v2 response", KIND_RIP, b"\x02\x02\x00\x00" + rip_entry() + rip_entry(metric=16), VALID),
    ("v1 response", KIND_RIP, b"\x02\x01\x00\x00" + V1_ENTRY, VALID),
    ("v2 with authentication", KIND_RIP, b"\x02\x02\x00\x00" + AUTH_ENTRY + rip_entry(), VALID),
    ("whole-table request", KIND_RIP, b"\x01\x02\x00\x00" + rip_entry(afi=0, addr=bytes(4), mask=bytes(4),
                                                                      metric=16), VALID),
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
    ("ripng version 2", KIND_RIPNG, b"\x02\x02\x00\x00" + ripng_entry(), BAD_VERSION),
    ("ripng prefix /200", KIND_RIPNG, b"\x02\x01\x00\x00" + ripng_entry(plen=200), BAD_PREFIX_LEN),
    ("ripng metric 20", KIND_RIPNG, b"\x02\x01\x00\x00" + ripng_entry(metric=20), BAD_METRIC),
]


def judge(payloads, kinds, lengths=None, caplens=None):
    """Judge payloads laid one after another in one buffer, as the decoder's batches hold frames."""
    data = np.frombuffer(b"".join(payloads) + bytes(8), dtype=np.uint8)
    offsets = np.cumsum([0] + [len(p) for p in payloads[:-1]]).astype(np.int64)
    lengths = np.array(lengths if lengths is not None else [len(p) for p in payloads], dtype=np.uint32)
    caplens = np.array(caplens if caplens is not None else [len(p) for p in payloads], dtype=np.uint32)
    return judge_payloads(data, offsets, caplens, np.zeros(len(payloads), dtype=np.uint16), lengths,
                          np.array(kinds, dtype=np.int64)).tolist()


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
    # a payload offset past the captured bytes leaves nothing to read, so nothing to fault
    data = np.zeros(4, dtype=np.uint8)
    out = judge_payloads(data, np.zeros(1, dtype=np.int64), np.array([4], dtype=np.uint32),
                         np.array([60], dtype=np.uint16), np.array([24], dtype=np.uint32),
                         np.array([KIND_RIP], dtype=np.int64))
    assert out.tolist() == [VALID]


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
    assert trigger.evidence["related"] == [{"rule": "echo-loop", "fingerprint": fingerprint,
                                            "severity": loop.severity, "copies": loop.n}]
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

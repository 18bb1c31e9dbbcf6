"""malformed-message on real bytes: one low finding per sender and protocol, never a cut, a fragment or a probe."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from scapy.all import IP, UDP, Ether, IPv6, Raw, raw, wrpcap
from scapy.layers.inet6 import ICMPv6ND_RA, ICMPv6NDOptSrcLLAddr

from detector.analysis import analyze
from detector.decode import decode
from detector.detect.detector import AnalysisContext
from detector.detect.evidence import EVIDENCE_FRAMES_MAX
from detector.findings import SEVERITY_RANK
from detector.rules import load_rules
from detector.stats import CaptureStats
from tests._rules import detector, one_pass_and_halves
from tests.test_decode import make_batch

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
RULE = "malformed-message"
T0 = 1_767_225_600


def malformed(findings) -> dict:
    """This rule's findings by identifier."""
    return {f.identifier: f for f in findings if f.rule == RULE}


def reasons(finding) -> dict:
    return {r["reason"]: r["count"] for r in finding.evidence["reasons"]}


def run(path, rules=None) -> list:
    return analyze([path], rules, label="test").findings


def _detector():
    return detector(RULE)


def test_one_finding_per_sender_and_protocol_each_reason_counted():
    found = run(CAPTURES / "malformed-control-plane.pcap")
    mine = malformed(found)
    assert sorted(mine) == [
        "DHCPv4 10.70.0.1 02:00:5e:70:00:01", "DHCPv6 fe80::1 02:00:5e:70:00:01",
        "Neighbor Discovery fe80::1 02:00:5e:70:00:01", "OSPFv2 10.70.0.1 02:00:5e:70:00:01",
        "RIP 10.70.0.1 02:00:5e:70:00:01", "VRRP 10.70.0.66 02:00:5e:70:00:66"]
    assert {f.severity for f in mine.values()} == {"low"}
    vrrp = mine["VRRP 10.70.0.66 02:00:5e:70:00:66"]
    assert reasons(vrrp) == {"empty: no VRRP byte after the IP header": 1,
                             "declares more addresses (and VRRPv2 authentication data) than its IP length holds": 1,
                             "bad checksum": 1}
    assert vrrp.evidence["ttl"] == [5, 64] and "where VRRP requires 255: not from the link" in vrrp.msg
    assert vrrp.dest_ip == "10.70.0.2" and vrrp.dest_mac == "00:00:5e:00:01:46" and vrrp.n == 2
    rip = mine["RIP 10.70.0.1 02:00:5e:70:00:01"]
    assert reasons(rip) == {"route metric outside 1-16": 1, "UDP length field differs from the IP length (the stack "
                                                            "trims or drops the datagram)": 1}
    assert "2 of 6 messages malformed" in rip.msg
    ospf = mine["OSPFv2 10.70.0.1 02:00:5e:70:00:01"]
    assert reasons(ospf) == {"LSA with a length below its header's or past the packet": 1, "bad checksum": 1}
    assert reasons(mine["Neighbor Discovery fe80::1 02:00:5e:70:00:01"]) == {"option with length 0": 1}
    # no rule of a protocol calls its malformed messages an incident: the VRRP master is the only virtual router
    assert max(SEVERITY_RANK[f.severity] for f in found) <= SEVERITY_RANK["low"]
    assert [f.identifier for f in found if f.rule == "vrrp-dual-master"] == ["VRRP VRID 70 IPv4"]


def test_the_evidence_frames_are_the_malformed_ones(tshark):
    path = CAPTURES / "malformed-control-plane.pcap"
    vrrp = malformed(run(path))["VRRP 10.70.0.66 02:00:5e:70:00:66"]
    frames = vrrp.evidence["evidence_frames"]
    rows = tshark.fields(path, "frame.number", "ip.src", "ip.proto", "ip.len")
    by_frame = {int(r[0]): r[1:] for r in rows}
    assert [by_frame[f] for f in frames] == [["10.70.0.66", "112", "20"], ["10.70.0.66", "112", "31"]]
    assert vrrp.evidence["frames_not_listed"] == 0


def test_cut_fragmented_probing_and_interop_messages_are_not_malformed():
    found = run(CAPTURES / "malformed-near-misses.pcap")
    assert malformed(found) == {}
    # the pair summing VRRPv3 as VRRPv2 is a virtual router like any other
    assert any(f.identifier == "VRRP VRID 71 IPv4" and f.severity == "info" for f in found)


def test_a_malformed_message_cut_by_the_snapshot_length_says_so():
    """Judged on its own lengths, a message cut short still shows what is wrong with it; its finding says it was cut
    and judged on what was captured."""
    empty = raw(Ether(src="02:00:5e:70:00:66") / IP(src="10.70.0.66", dst="10.70.0.2", ttl=5, proto=112))
    lying = raw(Ether(src="02:00:5e:70:00:66") / IP(src="10.70.0.66", dst="10.70.0.2", ttl=5, proto=112)
                / Raw(bytes([0x21, 70, 100, 20, 0, 1, 0, 0]) + bytes(44)))
    det = _detector()
    det.update(decode(make_batch([(1, empty), (1, lying)], caplens=[len(empty), 14 + 20 + 10])))
    (f,) = det.findings(AnalysisContext(flows=None, stats=CaptureStats()))
    assert f.evidence["cut_by_snaplen"] == 1 and "cut by the snapshot length" in f.msg
    assert set(reasons(f)) == {"empty: no VRRP byte after the IP header",
                               "declares more addresses (and VRRPv2 authentication data) than its IP length holds"}


def test_two_halves_merged_give_one_pass():
    one, merged = one_pass_and_halves(CAPTURES / "malformed-control-plane.pcap", _detector)
    assert merged == one and len(one) == 6
    one, merged = one_pass_and_halves(CAPTURES / "malformed-control-plane.pcap", _detector, later_first=False)
    assert merged == one


def test_forged_senders_stay_bounded(tmp_path, monkeypatch):
    """A fuzzer on the link: 300 senders of one RA with an option of length 0 each, and one of 200."""
    import detector.detectors.malformed_message as rule
    monkeypatch.setattr(rule, "MAX_FINDINGS", 5)
    monkeypatch.setattr(rule, "FRAMES_AT_EACH_END", 3)

    def ra(k):
        pkt = (Ether(src=f"02:00:5e:71:{k >> 8:02x}:{k & 255:02x}", dst="33:33:00:00:00:01")
               / IPv6(src=f"fe80::{k + 1:x}", dst="ff02::1", hlim=255)
               / ICMPv6ND_RA() / ICMPv6NDOptSrcLLAddr(lladdr="02:00:5e:71:00:00") / Raw(bytes([3, 0]) + bytes(6)))
        pkt.time = T0 + k * 0.001
        return pkt

    path = tmp_path / "flood.pcap"
    wrpcap(str(path), [ra(0) for _ in range(200)] + [ra(k) for k in range(1, 301)])
    found = malformed(run(path))
    assert len(found) == 5
    first = found["Neighbor Discovery fe80::1 02:00:5e:71:00:00"]
    assert first.n == 200 and len(first.evidence["evidence_frames"]) <= 2 * 3 + 1
    assert first.evidence["frames_not_listed"] == 200 - len(first.evidence["evidence_frames"])
    last = list(found.values())[-1]
    assert last.evidence["senders_not_reported"] == 301 - 5 and "296 more senders" in last.msg
    assert all(len(f.evidence["evidence_frames"]) <= EVIDENCE_FRAMES_MAX for f in found.values())


def test_a_rule_that_never_forms_an_incident_alone():
    cls = type(_detector())
    assert cls.CONTEXT_ONLY is True and cls.QUALITY_NEEDS == frozenset({"payload"})


def test_probes_to_a_control_plane_port_are_left_to_the_probe_rules(tmp_path):
    probes = [Ether() / IP(src="192.0.2.9", dst="10.70.0.1") / UDP(sport=40000 + k, dport=port) / Raw(bytes(24))
              for k, port in enumerate((520, 67, 547))]
    speaker = Ether() / IP(src="10.70.0.1", dst="224.0.0.9", ttl=1) / UDP(sport=520, dport=520) / Raw(bytes(24))
    for k, pkt in enumerate([*probes, speaker]):
        pkt.time = T0 + k
    path = tmp_path / "probes.pcap"
    wrpcap(str(path), [*probes, speaker])
    (f,) = malformed(run(path, {k: v for k, v in load_rules().items() if k == RULE})).values()
    assert f.src_ip == "10.70.0.1" and reasons(f) == {"zero-filled payload": 1}


def test_the_finding_never_exceeds_low_on_any_fault():
    """Every reason of every table, one message each, in one batch: low, whatever the protocol."""
    frames = [raw(Ether() / IP(src="10.0.0.1", dst="224.0.0.5", proto=89) / Raw(bytes([2, 9]) + bytes(30))),
              raw(Ether() / IP(src="10.0.0.2", dst="224.0.0.18", proto=112, ttl=255) / Raw(b"\x41\x01")),
              raw(Ether() / IPv6(src="fe80::1", dst="ff02::1", hlim=255) / ICMPv6ND_RA(code=7))]
    det = _detector()
    det.update(decode(make_batch([(1, f) for f in frames])))
    found = det.findings(AnalysisContext(flows=None, stats=CaptureStats()))
    assert len(found) == 3 and {f.severity for f in found} == {"low"}
    assert np.all([f.evidence["malformed"] == 1 for f in found])

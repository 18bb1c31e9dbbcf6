"""vrrp-dual-master on real bytes: two masters and the seed 002 chain, elections and handovers, CARP, checksum forms.

Malformed VRRP is no advertisement: it is left to the malformed-message rule (tests/test_malformed_message.py)."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.all import ARP, IP, Dot1Q, Ether, IPv6, Raw, raw, wrpcap
from scapy.layers.vrrp import VRRP, VRRPv3
from scapy.utils import checksum

from detector.analysis import analyze
from detector.decode import decode
from detector.detect.detector import AnalysisContext
from detector.detect.figure import TimeBins
from detector.findings import SEVERITY_RANK
from detector.rules import load_rules
from detector.stats import CaptureStats
from tests._rules import detector, one_pass_and_halves
from tests.test_decode import make_batch

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
T0 = 1_767_225_600
VMAC = "00:00:5e:00:01:3c"
VIPS = ["10.60.0.100", "10.60.0.101"]
RULES = ("vrrp-dual-master", "garp-war")


def run(path, rules=None) -> list:
    rules = rules or {k: v for k, v in load_rules().items() if k in RULES}
    return analyze([path], rules, label="test").findings


def masters(findings) -> list:
    return [f for f in findings if f.rule == "vrrp-dual-master"]


def advert(source, priority, *, vrid=60, vips=VIPS, adv=1, ttl=255, dst="224.0.0.18", vlan=None, authtype=0):
    eth = Ether(src=f"00:00:5e:00:01:{vrid:02x}", dst="01:00:5e:00:00:12")
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    return eth / IP(src=source, dst=dst, ttl=ttl, proto=112) / VRRP(vrid=vrid, priority=priority, addrlist=vips,
                                                                  adv=adv, authtype=authtype)


def carp(source, vhid, advskew, advbase=1, ttl=255):
    header = struct.pack("!BBBBBBH", 0x21, vhid, advskew, 7, 0, advbase, 0) + bytes(28)
    message = header[:6] + struct.pack("!H", checksum(header)) + header[8:]
    return Ether(src=f"00:00:5e:00:01:{vhid:02x}", dst="01:00:5e:00:00:12") / IP(src=source, dst="224.0.0.18",
                                                                              ttl=ttl, proto=112) / Raw(message)


def garp(address, mac=VMAC):
    return Ether(src=mac, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=mac, psrc=address, pdst=address)


def every(make, start, stop, step=1.0) -> list:
    return [(start + k * step, make()) for k in range(round((stop - start) / step))]


def capture(tmp_path, timed, name="vrrp.pcap") -> Path:
    packets = []
    for t, pkt in sorted(timed, key=lambda item: item[0]):
        pkt.time = T0 + t
        packets.append(pkt)
    path = tmp_path / name
    wrpcap(str(path), packets)
    return path


# ---- the synthetic incident and near-misses ------------------------------------------------------

def test_seed_002_two_masters_with_their_garp_burst_are_critical():
    found = run(CAPTURES / "vrrp-dual-master-garp.pcapng")
    (vrid,) = masters(found)
    assert vrid.severity == "critical" and vrid.identifier == "VRRP VRID 60 IPv4"
    assert "two masters at once: 10.60.0.11 (00:00:5e:00:01:3c) and 10.60.0.12 (00:00:5e:00:01:3c)" in vrid.msg
    assert vrid.evidence["ips"] == VIPS and vrid.evidence["virtual_mac"] == VMAC
    # the chain names the ARP rule's findings about the virtual addresses
    bursts = {f.identifier for f in found if f.rule == "garp-war"}
    assert bursts == {"10.60.0.100", "10.60.0.101"}
    assert {c["identifier"] for c in vrid.evidence["chained"]} == bursts
    assert "the seed 002 chain" in vrid.msg
    (pair,) = vrid.evidence["two_masters"]
    assert pair["together_s"] == pytest.approx(115.0) and pair["master_down_interval_s"] == pytest.approx(3.609375)
    assert [t["speaker"] for t in vrid.evidence["timeline"]] == ["10.60.0.11 (00:00:5e:00:01:3c)",
                                                                 "10.60.0.12 (00:00:5e:00:01:3c)"]


def test_without_the_garp_rule_two_masters_are_high():
    rules = {k: v for k, v in load_rules().items() if k == "vrrp-dual-master"}
    (vrid,) = run(CAPTURES / "vrrp-dual-master-garp.pcapng", rules)
    assert vrid.severity == "high" and "chained" not in vrid.evidence


@pytest.mark.parametrize("name, note", [
    ("vrrp-failover.pcapng", "10.60.0.11 (00:00:5e:00:01:3c) resigned (priority 0) at 2026-01-01T00:00:40"),
    ("vrrp-election.pcapng", "overlapped 1.60 s at 2026-01-01T00:00:30.400000Z, less than the Master_Down_Interval"),
    ("carp-failover.pcap", "CARP vhid 5 (IPv4)"),
])
def test_failover_election_and_carp_are_info(name, note):
    found = run(CAPTURES / name)
    assert {f.severity for f in found} == {"info"}
    (vrid,) = masters(found)
    assert note in vrid.msg and len(vrid.evidence["speakers"]) == 2


def test_one_vrid_on_two_vlans_is_two_virtual_routers():
    found = masters(run(CAPTURES / "vrrp-same-vrid-two-vlans.pcap"))
    assert sorted(f.identifier for f in found) == ["VRRP VRID 60 IPv4 VLAN 10", "VRRP VRID 60 IPv4 VLAN 20"]
    assert {f.severity for f in found} == {"info"}


# ---- the real captures the specification names ---------------------------------------------------

def test_libpcaps_carp_is_carp_and_quiet(captures_real):
    (f,) = run(captures_real / "libpcap/tests/filter/carp.pcap")
    assert f.severity == "info" and f.evidence["carp"] is True and f.identifier == "CARP vhid 1 IPv4"
    assert f.proto == "carp" and f.evidence["ips"] == []     # CARP lists no addresses, VRRP's reading would


def test_zeeks_vrrp_inside_pbb_is_quiet(captures_real):
    (f,) = run(captures_real / "zeek/testing/btest/Traces/pbb.pcap")
    assert f.severity == "info" and f.identifier == "VRRP VRID 51 IPv4 VLAN 4051"
    assert f.evidence["ips"] == ["10.199.245.1"] and f.evidence["speakers"][0]["priority"] == [200]


def test_packetlifes_empty_vrrp_is_no_master_and_low_apart(captures_real):
    rules = {k: v for k, v in load_rules().items() if k in (*RULES, "malformed-message")}
    (f,) = run(captures_real / "packetlife/pcaps/VRRP_Malformed_DoS.cap", rules)
    assert f.rule == "malformed-message" and f.severity == "low"
    assert f.identifier == "VRRP 192.1.2.9 c2:80:17:71:d3:1e"
    assert [r["reason"] for r in f.evidence["reasons"]] == ["empty: no VRRP byte after the IP header"]
    assert f.evidence["ttl"] == [5] and f.dest_mac == "00:00:5e:00:01:01" and "Sent with TTL 5" in f.msg


@pytest.mark.parametrize("name", ["tcpdump/tests/vrrp-vrrp_print-oobr.pcap",
                                  "tcpdump/tests/icmp-icmp_print-oobr-1.pcap",
                                  "tcpdump/tests/icmp-icmp_print-oobr-2.pcap"])
def test_tcpdumps_fuzzed_vrrp_is_no_master(captures_real, name):
    assert all(f.severity == "info" for f in masters(run(captures_real / name)))


# ---- two masters: the Master_Down_Interval is the line -------------------------------------------

@pytest.mark.parametrize("lb2_from, severity", [(30.0 - 3.6, "info"), (30.0 - 3.7, "high")])
def test_an_overlap_of_one_master_down_interval_is_two_masters(tmp_path, lb2_from, severity):
    # lb1 (priority 200) advertises 0-30 s; lb2 (priority 100: MDI 3 + 156/256 = 3.61 s) from lb2_from on
    packets = every(lambda: advert("10.60.0.11", 200), 0, 31) + every(lambda: advert("10.60.0.12", 100), lb2_from, 60)
    (f,) = masters(run(capture(tmp_path, packets)))
    assert f.severity == severity


def test_a_speaker_silent_longer_than_its_interval_is_two_runs(tmp_path):
    # lb1 stops for 10 s: its activity is two runs, and lb2 master in the gap is a failover and a failback
    packets = (every(lambda: advert("10.60.0.11", 200), 0, 20) + every(lambda: advert("10.60.0.11", 200), 30, 50)
               + every(lambda: advert("10.60.0.12", 100), 23.6, 31))
    (f,) = masters(run(capture(tmp_path, packets)))
    assert f.severity == "info"
    assert [(t["speaker"][:10], t["adverts"]) for t in f.evidence["timeline"]] == [
        ("10.60.0.11", 20), ("10.60.0.12", 7), ("10.60.0.11", 20)]


def test_a_garp_burst_for_another_address_does_not_chain(tmp_path):
    packets = every(lambda: advert("10.60.0.11", 200), 0, 60) + every(lambda: advert("10.60.0.12", 100), 10, 60)
    packets += every(lambda: garp("10.60.0.200", "02:00:5e:60:00:99"), 20, 21, 0.05)
    found = run(capture(tmp_path, packets))
    assert [f.severity for f in found if f.rule == "garp-war"] == ["medium"]
    (f,) = masters(found)
    assert f.severity == "high" and "chained" not in f.evidence


def test_a_burst_of_the_virtual_mac_chains_without_naming_an_address(tmp_path):
    # the GARPs name another address but come from the virtual MAC: the fight over the MAC is the chain
    packets = every(lambda: advert("10.60.0.11", 200), 0, 60) + every(lambda: advert("10.60.0.12", 100), 10, 60)
    packets += every(lambda: garp("10.60.0.200", VMAC), 20, 21, 0.05)
    (f,) = masters(run(capture(tmp_path, packets)))
    assert f.severity == "critical" and f.evidence["chained"][0]["identifier"] == "10.60.0.200"


# ---- what breaks an election: medium ----------------------------------------------------------------

@pytest.mark.parametrize("second, text", [
    (lambda t: advert("10.60.0.12", 255), "2 speakers advertise priority 255"),
    (lambda t: advert("10.60.0.12", 100, adv=3), "advertisement intervals differ"),
    (lambda t: advert("10.60.0.12", 100, vips=["10.60.0.100"]), "the speakers list different virtual addresses"),
    (lambda t: advert("10.60.0.12", 100, ttl=64), "TTL/hop limit other than 255"),
    (lambda t: advert("10.60.0.12", 100, authtype=1), "VRRPv2 authentication types differ"),
])
def test_election_faults_are_medium(tmp_path, second, text):
    first = every(lambda: advert("10.60.0.11", 255 if "255" in text else 200), 0, 10)
    packets = first + [(40.0 + k, second(k)) for k in range(3)]
    (f,) = masters(run(capture(tmp_path, packets)))
    assert f.severity == "medium" and text in f.msg, f.msg


def test_unicast_vrrp_is_not_held_to_ttl_255(tmp_path):
    packets = every(lambda: advert("10.60.0.11", 200, ttl=62, dst="10.60.9.12"), 0, 10)
    (f,) = masters(run(capture(tmp_path, packets)))
    assert f.severity == "info" and "by unicast" in f.msg


def test_vrrp_v3_over_ipv6_uses_the_ipv6_virtual_mac(tmp_path):
    six = (Ether(src="00:00:5e:00:02:07", dst="33:33:00:00:00:12") / IPv6(src="fe80::2", dst="ff02::12", hlim=255)
           / VRRPv3(vrid=7, priority=100, ipcount=1, addrlist=["2001:db8::1"], adv=100))
    (f,) = masters(run(capture(tmp_path, [(k, six.copy()) for k in range(5)])))
    assert f.evidence["virtual_mac"] == "00:00:5e:00:02:07" and f.evidence["ips"] == ["2001:db8::1"]
    assert f.identifier == "VRRP VRID 7 IPv6" and f.severity == "info"


def test_carp_pair_both_master_is_high_and_never_mixed_with_vrrp(tmp_path):
    packets = every(lambda: carp("10.63.0.2", 60, 0), 0, 30) + every(lambda: carp("10.63.0.3", 60, 100), 5, 30)
    packets += every(lambda: advert("10.63.0.9", 100), 0, 30)           # VRRP VRID 60 beside CARP vhid 60
    found = {f.identifier: f for f in masters(run(capture(tmp_path, packets)))}
    assert found["CARP vhid 60 IPv4"].severity == "high" and found["VRRP VRID 60 IPv4"].severity == "info"


@pytest.mark.parametrize("message, reason", [
    (VRRP(vrid=1, priority=100, addrlist=["10.0.0.1", "10.0.0.2"], ipcount=4), "declares more addresses"),
    (VRRP(vrid=1, priority=100, addrlist=[], ipcount=0), "declares no virtual address"),
    (VRRP(vrid=1, priority=100, addrlist=["10.0.0.1"], chksum=0x1234), "bad checksum"),
    (VRRP(vrid=1, priority=100, addrlist=["10.0.0.1"], type=2), "unknown type"),
    (Raw(b"\x41\x01\x64"), "shorter than the 8-byte VRRP header"),
])
def test_malformed_vrrp_is_no_master_and_low_apart(tmp_path, message, reason):
    pkt = Ether(src="02:00:5e:00:00:66") / IP(src="10.0.0.66", dst="224.0.0.18", ttl=255, proto=112) / message
    rules = {k: v for k, v in load_rules().items() if k in (*RULES, "malformed-message")}
    found = run(capture(tmp_path, [(0.0, pkt)]), rules)
    assert masters(found) == []
    (f,) = found
    assert f.rule == "malformed-message" and f.severity == "low"
    assert any(reason in r["reason"] for r in f.evidence["reasons"]), f.msg


def v3_summed(source, priority, form, *, vrid=61, dst="224.0.0.18", vips=("10.60.1.100",)):
    """A VRRPv3 advertisement over IPv4 whose checksum is summed as `form` says: "rfc" (RFC 5798's pseudo-header),
    "as_v2" (the message alone, as VRRPv2), "group" (224.0.0.18 in the pseudo-header of a unicast one)."""
    from scapy.layers.inet import in4_chksum
    ip = IP(src=source, dst=dst, ttl=255, proto=112)
    message = raw(ip / VRRPv3(vrid=vrid, priority=priority, ipcount=len(vips), addrlist=list(vips), adv=100,
                              chksum=0))[20:]
    value = {"rfc": lambda: in4_chksum(112, ip, message), "as_v2": lambda: checksum(message),
             "group": lambda: in4_chksum(112, IP(src=source, dst="224.0.0.18"), message)}[form]()
    return Ether(src=f"00:00:5e:00:01:{vrid:02x}", dst="01:00:5e:00:00:12") / ip / Raw(
        message[:6] + struct.pack("!H", value) + message[8:])


def test_a_vrrpv3_pair_summing_without_the_pseudo_header_is_quiet_and_named():
    """Pattern 3 of issue 27: VRRPv3 over IPv4 summed as VRRPv2 (several vendors; Wireshark's v3_checksum_as_in_v2)
    was "a wrong checksum" at medium. A failover of such a pair is the normal one; the timeline says the form."""
    rules = {k: v for k, v in load_rules().items() if k in (*RULES, "malformed-message")}
    found = run(CAPTURES / "vrrpv3-checksum-as-v2.pcapng", rules)
    assert {f.severity for f in found} == {"info"}
    (vrid,) = masters(found)
    assert vrid.identifier == "VRRP VRID 61 IPv4" and vrid.msg.count("without the IPv4 pseudo-header") == 2
    assert [s["checksum"] for s in vrid.evidence["speakers"]] == [[
        "without the IPv4 pseudo-header (as VRRPv2; Wireshark's v3_checksum_as_in_v2)"]] * 2


def test_keepalived_unicast_checksums_are_good_and_named(tmp_path):
    packets = every(lambda: v3_summed("10.60.0.11", 200, "group", dst="10.60.0.12"), 0, 20)
    (vrid,) = masters(run(capture(tmp_path, packets)))
    assert vrid.severity == "info" and "with 224.0.0.18 in a unicast advertisement's pseudo-header" in vrid.msg


def test_speakers_summing_differently_are_low(tmp_path):
    packets = every(lambda: v3_summed("10.60.0.11", 200, "rfc"), 0, 30)
    packets += [(30.0, v3_summed("10.60.0.11", 0, "rfc"))]
    packets += every(lambda: v3_summed("10.60.0.12", 100, "as_v2"), 30.7, 60)
    (vrid,) = masters(run(capture(tmp_path, packets)))
    assert vrid.severity == "low" and "sum their checksums differently" in vrid.msg, vrid.msg
    assert [s["checksum"] for s in vrid.evidence["speakers"]] == [
        ["as the RFC says"], ["without the IPv4 pseudo-header (as VRRPv2; Wireshark's v3_checksum_as_in_v2)"]]


def test_a_message_cut_by_the_snapshot_length_is_not_malformed(tmp_path):
    whole = raw(advert("10.60.0.11", 200))
    path = tmp_path / "cut.pcap"
    wrpcap(str(path), [Ether(whole[:14 + 20 + 10])])
    (f,) = masters(run(path))
    assert f.severity == "info" and f.identifier == "VRRP VRID 60 IPv4"


# ---- state: merging partitions, hostile bytes, the report's figure -------------------------------

def _detector():
    return detector("vrrp-dual-master")


def test_two_halves_merged_give_one_pass():
    one, merged = one_pass_and_halves(CAPTURES / "vrrp-election.pcapng", _detector)
    assert merged == one
    assert len(one) == 1 and one[0]["evidence"]["timeline"][1]["adverts"] == 89


def test_the_master_timeline_is_drawn():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    found = masters(run(CAPTURES / "vrrp-dual-master-garp.pcapng"))
    bins = TimeBins(start_ns=T0 * 10**9, bin_ns=10**9, count=150)
    (figure,) = _detector().figures(found, bins)
    fig, ax = plt.subplots()
    figure.draw(ax, None)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["VRRP VRID 60 IPv4: 10.60.0.11 (00:00:5e:00:01:3c)",
                                                            "VRRP VRID 60 IPv4: 10.60.0.12 (00:00:5e:00:01:3c)"]
    plt.close(fig)


SHAPES = [raw(advert("10.60.0.11", 200)), raw(carp("10.63.0.2", 5, 0)),
          raw(Ether() / IPv6(src="fe80::2", dst="ff02::12", hlim=255) / VRRPv3(vrid=7, priority=100, ipcount=2,
                                                                                 addrlist=["2001:db8::1", "::1"]))]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(range(len(SHAPES))), st.integers(0, 120), st.integers(0, 255)),
                min_size=1, max_size=12), st.integers(0, 2))
def test_damaged_vrrp_is_judged_never_crashes_never_high(edits, cut):
    frames = [bytearray(shape) for shape in SHAPES]
    for which, where, value in edits:
        frames[which][14 + where % (len(frames[which]) - 14)] = value
    detector = _detector()
    detector.update(decode(make_batch([(1, bytes(frame[:len(frame) - 7 * cut])) for frame in frames])))
    for finding in detector.findings(AnalysisContext(flows=None, stats=CaptureStats())):
        assert finding.severity in ("info", "medium") and len(finding.evidence["evidence_frames"]) <= 64


def test_a_watch_sees_one_virtual_router_escalate_under_one_identifier():
    """Live: the window is asked again and again while the fight goes on; the virtual router keeps its
    identifier and its severity only climbs, up to the chain's critical."""
    from detector.ingest import open_capture
    from detector.live.alerts import entity_key
    from detector.live.window import SlidingWindow

    rules = {k: v for k, v in load_rules().items() if k in RULES}
    window = SlidingWindow(rules, now=0.0, slice_s=1.0, slices=1000)
    severities = []
    with open_capture(CAPTURES / "vrrp-dual-master-garp.pcapng", batch_packets=20) as reader:
        for k, raw in enumerate(reader):
            window.update(decode(raw), now=float(k))
            (vrid,) = masters(window.analysis().findings)
            assert entity_key(vrid) == ("vrrp-dual-master", "VRRP VRID 60 IPv4")
            severities.append(vrid.severity)
    ranks = [SEVERITY_RANK[s] for s in severities]
    assert severities[0] == "info" and severities[-1] == "critical" and ranks == sorted(ranks)


def test_forged_speakers_and_virtual_routers_stay_bounded(tmp_path, monkeypatch):
    import detector.detectors.vrrp_dual_master as rule
    monkeypatch.setattr(rule, "MAX_FINDINGS", 3)
    # 100 forged masters of VRID 60, and 5 more virtual routers
    packets = [(k * 0.001, advert(f"10.60.{k // 200}.{k % 200 + 1}", 100)) for k in range(100)]
    packets += [(0.5, advert("10.60.0.11", 100, vrid=vrid)) for vrid in range(1, 6)]
    found = masters(run(capture(tmp_path, packets)))
    assert len(found) == 3 and found[0].identifier == "VRRP VRID 60 IPv4"
    assert found[0].evidence["speakers_not_compared"] == 100 - rule.COMPARED_SPEAKERS
    assert found[0].evidence["virtual_routers_not_reported"] == 3
    assert len(found[0].evidence["speakers"]) == 64 and found[0].severity == "info"

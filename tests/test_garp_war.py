"""garp-war on real bytes: flip-flops, GARP bursts, one MAC on two links, ARP storms, and their near-misses."""
from __future__ import annotations

from pathlib import Path

import pytest
from scapy.all import ARP, Dot1Q, Ether, wrpcap
from scapy.utils import PcapNgWriter

from detector.analysis import analyze
from detector.decode import decode
from detector.ingest import read_captures
from detector.rules import load_rules
from tests._rules import detector, one_pass_and_halves

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
T0 = 1_767_225_600
A, B, C = "02:00:5e:61:00:0a", "02:00:5e:61:00:0b", "02:00:5e:61:00:0c"
IP = "10.61.0.50"


def run(path, rules=None) -> list:
    rules = rules or {k: v for k, v in load_rules().items() if k == "garp-war"}
    return analyze([path], rules, label="test").findings


def reply(mac, address=IP, vlan=None):
    eth = Ether(src=mac, dst="02:00:5e:61:00:01")
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    return eth / ARP(op=2, hwsrc=mac, psrc=address, hwdst="02:00:5e:61:00:01", pdst="10.61.0.1")


def request(mac, address, target, vlan=None):
    eth = Ether(src=mac, dst="ff:ff:ff:ff:ff:ff")
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    return eth / ARP(op=1, hwsrc=mac, psrc=address, pdst=target)


def garp(mac, address=IP):
    return Ether(src=mac, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=mac, psrc=address, pdst=address)


def capture(tmp_path, timed, name="arp.pcap") -> Path:
    packets = []
    for t, pkt in sorted(timed, key=lambda item: item[0]):
        pkt.time = T0 + t
        packets.append(pkt)
    path = tmp_path / name
    wrpcap(str(path), packets)
    return path


# ---- the synthetic captures --------------------------------------------------------------------

def test_two_devices_trading_one_address_flip_flop():
    (f,) = run(CAPTURES / "arp-flip-flop.pcapng")
    assert f.severity == "medium" and f.identifier == IP and f.src_ip == IP
    assert f.evidence["flip_flops"] == 5 and f.evidence["claim_changes"] == 6
    assert "02:00:5e:61:00:0a -> 02:00:5e:61:00:0b -> 02:00:5e:61:00:0a at 2026-01-01T00:01:00" in f.msg
    assert f.evidence["macs"] == [A, B]


def test_a_replaced_nic_is_one_change_and_silent():
    assert run(CAPTURES / "arp-nic-change.pcapng") == []


def test_seed_002_garps_from_one_mac_are_a_burst():
    found = {f.identifier: f for f in run(CAPTURES / "vrrp-dual-master-garp.pcapng")}
    assert set(found) == {"10.60.0.100", "10.60.0.101"}
    burst = found["10.60.0.100"]
    assert burst.severity == "medium" and burst.evidence["garps_in_60s"] == 60
    assert burst.evidence["garp_senders"] == ["00:00:5e:00:01:3c"] and "byte-identical" in burst.msg


@pytest.mark.parametrize("name", ["vrrp-failover.pcapng", "vrrp-election.pcapng"])
def test_one_vrrp_transitions_5_plus_5_garps_are_not_a_burst(name):
    assert run(CAPTURES / name) == []


# ---- issue 27: corrupted copies, VRRP and CARP transitions announcing themselves ----------------------

def test_corrupted_copies_are_low_and_named():
    found = {f.identifier: f for f in run(CAPTURES / "arp-corrupted-many.pcapng")}
    assert set(found) == {"10.71.0.1", "10.71.0.11", "10.71.0.12", "10.71.0.13"}
    assert {f.severity for f in found.values()} == {"low"}
    gateway = found["10.71.0.1"]
    # as they are, the copies make a fight: 15 changes of claimant within a minute, 30 "MACs"
    assert gateway.evidence["max_changes_per_minute"] == 15 and len(gateway.evidence["macs"]) == 30
    assert gateway.evidence["corrupted_copies_total"] == 29
    assert "likely corrupted copies of 00:0c:29:20:a8:7f, not other hosts" in gateway.msg


def test_one_corrupted_copy_is_low():
    (f,) = run(CAPTURES / "arp-corrupted-one-copy.pcapng")
    assert f.severity == "low" and f.identifier == "10.71.0.11" and f.evidence["flip_flops"] == 1
    assert [c["mac"] for c in f.evidence["corrupted_copies"]] == ["00:0c:09:4b:30:0b"]


def test_a_second_mac_one_bit_away_sending_clean_frames_keeps_its_flip_flop():
    (f,) = run(CAPTURES / "arp-near-mac-conflict.pcapng")
    assert f.severity == "medium" and f.evidence["flip_flops"] == 2 and "corrupted" not in f.msg


@pytest.mark.parametrize("name, flip_flops", [("vrrp-keepalived-vmac.pcapng", 0),
                                              ("vrrp-keepalived-own-macs.pcapng", 1)])
def test_keepalived_start_up_failover_and_preemption_announce_themselves(name, flip_flops):
    found = {f.identifier: f for f in run(CAPTURES / name)}
    assert set(found) == {"10.72.0.100", "10.72.0.101"} and {f.severity for f in found.values()} == {"info"}
    f = found["10.72.0.100"]
    assert f.evidence["garps_in_60s"] == 40 and f.evidence["flip_flops"] == flip_flops
    assert [(t["master"], t["from"]) for t in f.evidence["transitions_announced"]] == [
        ("10.72.0.2", "2026-01-01T00:00:03.414062Z"), ("10.72.0.3", "2026-01-01T00:00:33.019375Z"),
        ("10.72.0.2", "2026-01-01T00:00:53.414062Z")]
    assert "transitions announcing themselves, not a fight" in f.msg and "byte-identical" not in f.msg


def test_garps_without_a_transition_stay_a_burst():
    found = run(CAPTURES / "vrrp-garp-without-transition.pcapng")
    assert [f.severity for f in found] == ["medium", "medium"]
    assert found[0].evidence["garps_in_60s"] == 15
    assert "10 GARPs announcing VRRP/CARP transitions (VRRP VRID 72: 10.72.0.2" in found[0].msg


def _vrrp(source, priority, vrid=7):
    from scapy.layers.inet import IP as IPv4
    from scapy.layers.vrrp import VRRP
    return (Ether(src=f"00:00:5e:00:01:{vrid:02x}", dst="01:00:5e:00:00:12")
            / IPv4(src=source, dst="224.0.0.18", ttl=255, proto=112)
            / VRRP(vrid=vrid, priority=priority, addrlist=[IP], adv=1))


@pytest.mark.parametrize("sender, first_s, severity", [
    ("00:00:5e:00:01:07", 0.5, "info"),         # the virtual MAC, right after the master's first advertisement
    (A, 0.5, "medium"),                         # another MAC: not the transition's
    ("00:00:5e:00:01:07", 20.0, "medium"),      # the virtual MAC, but long after the transition
    ("00:00:5e:00:01:08", 0.5, "medium"),       # another virtual router's MAC
])
def test_garps_announce_a_transition_from_its_macs_within_its_window(tmp_path, sender, first_s, severity):
    packets = [(float(k), _vrrp("10.61.0.2", 200)) for k in range(60)]
    packets += [(first_s + 0.01 * k, garp(sender)) for k in range(11)]
    (f,) = run(capture(tmp_path, packets))
    assert f.severity == severity


def test_two_speakers_at_once_announce_nothing(tmp_path):
    # a second master from 10 s on, both advertising: its GARPs are a fight's
    packets = [(float(k), _vrrp("10.61.0.2", 200)) for k in range(60)]
    packets += [(10.0 + k, _vrrp("10.61.0.3", 100)) for k in range(50)]
    packets += [(10.5 + 0.01 * k, garp("00:00:5e:00:01:07")) for k in range(11)]
    (f,) = run(capture(tmp_path, packets))
    assert f.severity == "medium" and "transitions_announced" not in f.evidence


# ---- thresholds, each with its neighbour -------------------------------------------------------------

@pytest.mark.parametrize("garps, severity", [(10, None), (11, "medium")])
def test_more_than_ten_garps_in_60_s(tmp_path, garps, severity):
    packets = [(k * 5.9, garp(A)) for k in range(garps)]          # 11 GARPs span 59 s
    found = run(capture(tmp_path, packets))
    assert [f.severity for f in found] == ([severity] if severity else [])


def test_garps_spread_over_more_than_60_s_are_no_burst(tmp_path):
    assert run(capture(tmp_path, [(k * 6.1, garp(A)) for k in range(11)])) == []


@pytest.mark.parametrize("every_s, severity", [(6.0, "high"), (6.7, "medium")])
def test_ten_changes_of_claimant_within_a_minute_are_high(tmp_path, every_s, severity):
    # A and B alternate: a change every `every_s` seconds, 10 changes within 60 s at 6.0 s, 9 at 6.7 s
    packets = [(k * every_s, reply(A if k % 2 == 0 else B)) for k in range(14)]
    (f,) = run(capture(tmp_path, packets))
    assert f.severity == severity


@pytest.mark.parametrize("back_after_s, found", [(590.0, True), (610.0, False)])
def test_a_flip_flop_returns_within_the_window(tmp_path, back_after_s, found):
    packets = [(0.0, reply(A)), (5.0, reply(B)), (5.0 + back_after_s - 5.0, reply(A))]
    assert bool(run(capture(tmp_path, packets))) is found


def test_three_macs_in_turn_are_no_flip_flop(tmp_path):
    # A -> B -> C: changes, never back: the IP-MAC rules' business
    assert run(capture(tmp_path, [(0.0, reply(A)), (10.0, reply(B)), (20.0, reply(C))])) == []


def test_probes_and_broadcast_senders_claim_nothing(tmp_path):
    probe = Ether(src=B, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=B, psrc="0.0.0.0", pdst=IP)
    packets = [(0.0, reply(A)), (1.0, probe), (2.0, reply(A)), (3.0, probe), (4.0, reply(A))]
    assert run(capture(tmp_path, packets)) == []


@pytest.mark.parametrize("gap_s, severity", [(0.5, "medium"), (1.5, None)])
def test_one_mac_on_two_vlans_within_a_second(tmp_path, gap_s, severity):
    packets = [(0.0, request(A, IP, "10.61.0.1", vlan=10)), (gap_s, request(A, IP, "10.61.0.2", vlan=20))]
    found = run(capture(tmp_path, packets))
    assert [f.severity for f in found] == ([severity] if severity else [])
    if found:
        assert found[0].evidence["links"] == ["VLAN 10", "VLAN 20"] and found[0].src_mac == A


def test_one_frame_captured_on_two_interfaces_is_a_copy(tmp_path):
    path = tmp_path / "two.pcapng"
    writer = PcapNgWriter(str(path))
    frame = request(A, IP, "10.61.0.1")
    for k, iface in enumerate([0, 1]):
        copy = frame.copy()
        copy.time = T0 + 0.000001 * k
        copy.sniffed_on = f"eth{iface}"
        writer.write(copy)
    writer.close()
    assert run(path) == []


def test_a_router_with_one_mac_on_its_vlans_claims_other_addresses(tmp_path):
    packets = [(0.0, request(A, "10.10.0.1", "10.10.0.9", vlan=10)),
               (0.1, request(A, "10.20.0.1", "10.20.0.9", vlan=20))]
    assert run(capture(tmp_path, packets)) == []


@pytest.mark.parametrize("requests, severity", [(30, None), (31, "low")])
def test_more_than_30_requests_in_100_ms_are_an_arp_storm(tmp_path, requests, severity):
    packets = [(0.01 + k * 0.002, request(A, "10.61.0.1", f"10.61.1.{k}")) for k in range(requests)]
    found = run(capture(tmp_path, packets))  # 31 requests within 62 ms of one 100 ms bin
    assert [f.severity for f in found] == ([severity] if severity else [])
    if found:
        assert found[0].evidence["requests"] == 31 and found[0].identifier == "arp storm"


# ---- the real captures the specification names -----------------------------------------------------

def test_an_arp_scan_is_a_storm_only(captures_real):
    (f,) = run(captures_real / "lucaderi-sgr/2022/Favilli/tests/hs-arpScan.pcap")
    assert f.severity == "low" and f.evidence["first_requesters"] == ["00:0c:29:20:a8:7f"]
    assert f.evidence["requests"] >= 490 and f.evidence["bins"] == 10


SILENT = [f"arp-scan/testdata/pkt-{name}.pcap" for name in (
    "diff-frame-addr", "llc-response", "local-admin", "padding-response", "simple-response", "too-short",
    "vlan-llc-response", "vlan-response")] + ["chrissanders-packets/ppa2e/arp_gratuitous.pcap",
                                              "zeek/testing/btest/Traces/snap-arp.pcapng",
                                              "suricata-verify/tests/arp/detect-arp-03-vlan/input.pcap"]


@pytest.mark.parametrize("name", SILENT)
def test_single_garps_and_copies_are_silent(captures_real, name):
    assert run(captures_real / name) == []


# ---- state -----------------------------------------------------------------------------------------

def _detector():
    return detector("garp-war")


def _storm(tmp_path) -> Path:
    return capture(tmp_path, [(0.01 + k * 0.002, request(A, "10.61.0.1", f"10.61.1.{k}")) for k in range(31)])


@pytest.mark.parametrize("name", ["arp-flip-flop.pcapng", "vrrp-dual-master-garp.pcapng", "storm",
                                  "arp-corrupted-many.pcapng", "vrrp-keepalived-own-macs.pcapng"])
def test_two_halves_merged_give_one_pass(tmp_path, name):
    one, merged = one_pass_and_halves(_storm(tmp_path) if name == "storm" else CAPTURES / name, _detector)
    assert one and merged == one


def test_forged_claims_by_the_million_stay_bounded(tmp_path, monkeypatch):
    import detector.detectors.garp_war as rule
    monkeypatch.setattr(rule, "MAX_ROWS", 20)
    packets = [(k * 0.001, reply(f"02:00:5e:00:{k // 256:02x}:{k % 256:02x}", f"10.9.{k // 256}.{k % 256}"))
               for k in range(100)]
    detector = _detector()
    for _, raw in read_captures([str(capture(tmp_path, packets))]):
        detector.update(decode(raw))
    assert len(detector.claims["key"]) == 20 and detector.dropped >= 80

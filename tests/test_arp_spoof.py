"""arp-spoof on real bytes: the man in the middle, a repeated conflict, one change, and what is no conflict."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.all import (
    ARP,
    Dot1Q,
    Ether,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptSrcLLAddr,
    IPv6,
    raw,
    wrpcap,
)

from detector.analysis import analyze
from detector.decode import decode
from detector.detect import neighbors as nb
from detector.detect.detector import AnalysisContext
from detector.ingest import read_captures
from detector.rules import load_rules
from detector.schema import PacketBatch
from detector.site import Site
from detector.stats import CaptureStats
from tests._cuts import cut as cut_at
from tests._cuts import one_and_merged
from tests._rules import batch_of, detector, one_pass_and_halves
from tests.test_decode import make_batch

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
T0 = 1_767_225_600
A = ("02:00:00:00:00:0a", "10.9.0.10")
B = ("02:00:00:00:00:0b", "10.9.0.11")
C = ("02:00:00:00:00:0c", "10.9.0.12")
SPOOFER = "02:00:00:00:00:66"
VMAC = "00:00:5e:00:01:07"
BROADCAST = "ff:ff:ff:ff:ff:ff"


def spoofs(findings) -> list:
    return [f for f in findings if f.rule == "arp-spoof"]


def run(path, site=None, rules=None) -> list:
    return spoofs(analyze([path], rules, label="test", site=site).findings)


def request(asker, ip, vlan=None, src=None):
    eth = Ether(src=src or asker[0], dst=BROADCAST)
    eth = eth / Dot1Q(vlan=vlan) if vlan else eth
    return eth / ARP(op=1, hwsrc=asker[0], psrc=asker[1], hwdst="00:00:00:00:00:00", pdst=ip)


def reply(sender, target, vlan=None, src=None):
    eth = Ether(src=src or sender[0], dst=target[0])
    eth = eth / Dot1Q(vlan=vlan) if vlan else eth
    return eth / ARP(op=2, hwsrc=sender[0], psrc=sender[1], hwdst=target[0], pdst=target[1])


def capture(tmp_path, timed, name="arp.pcap") -> Path:
    packets = []
    for t, pkt in sorted(timed, key=lambda item: item[0]):
        pkt.time = T0 + t
        packets.append(pkt)
    path = tmp_path / name
    wrpcap(str(path), packets)
    return path


def fight(times_a, times_b, ip=C[1]) -> list:
    """A and B each telling the other, unasked, that `ip` is at its own MAC: A at times_a, B at times_b."""
    return [(t, reply((A[0], ip), B)) for t in times_a] + [(t, reply((B[0], ip), A)) for t in times_b]


# ---- the real captures the specification names ---------------------------------------------------

def test_lucaderis_man_in_the_middle_is_high(captures_real):
    (f,) = run(captures_real / "lucaderi-sgr/2022/Favilli/tests/na-arpSpoofing.pcap")
    assert f.severity == "high" and f.identifier == f.src_mac == "00:e0:4d:3c:25:7b"
    assert f.evidence["man_in_the_middle"] is True and f.evidence["unsolicited_replies"] == 36
    # only the replies' target pairs name the real owners
    owners = {c["ip"]: [claim["mac"] for claim in c["claims"]] for c in f.evidence["conflicts"]}
    assert owners == {"10.0.0.153": ["00:e0:4d:3c:25:7b", "dc:f5:05:75:0b:cd"],
                      "10.0.0.157": ["00:e0:4d:3c:25:7b", "b0:7f:b9:4e:f0:9c"]}
    assert all(c["claims"][1]["ARP reply target"] == 18 and c["claims"][0]["unsolicited"] == 18
               for c in f.evidence["conflicts"])
    assert "a man in the middle between their owners" in f.msg and "36 of its 36 ARP replies unsolicited" in f.msg


def test_packetlifes_neighbor_spoofing_is_high(captures_real):
    # fe80::1 answers fe80::2 from :0a (frames 2, 15); from frame 33 :0c tells fe80::2 every 5 s, unasked and with
    # the override flag, that fe80::1 is at its MAC (frames 33, 39, 45): one change, then poisoning
    (f,) = run(captures_real / "packetlife/pcaps/ipv6_neighbor_spoofing.cap")
    assert f.severity == "high" and f.src_mac == "00:00:00:00:00:0c" and f.n == 1
    assert f.evidence["poisoned"] == ["fe80::1"] and f.evidence["unsolicited_replies"] == 3
    (conflict,) = f.evidence["conflicts"]
    assert [c["mac"] for c in conflict["claims"]] == ["00:00:00:00:00:0c", "00:00:00:00:00:0a"]
    assert f.evidence["evidence_frames"] == [2, 15, 33, 45]
    assert "with targeted Neighbor Advertisements nobody asked for" in f.msg and "(S flag clear" in f.msg


@pytest.mark.parametrize("path", ["packetlife/pcaps/arp_pcap.pcapng.cap", "zeek/testing/btest/Traces/arp-who-has.pcap",
                                  "lucaderi-sgr/2022/Favilli/tests/hs-arpScan.pcap"])
def test_ordinary_arp_and_a_scan_are_no_conflict(captures_real, path):
    assert run(captures_real / path) == []


# ---- the synthetic incident and its near-misses ---------------------------------------------------

def test_the_campus_man_in_the_middle_claims_the_gateway():
    (f,) = run(CAPTURES / "arp-spoof-mitm.pcapng")
    assert f.severity == "high" and f.src_mac == "02:a0:00:01:00:42"
    assert f.evidence["gateway_addresses"] == ["10.160.0.254"] and f.evidence["unsolicited_replies"] == 80
    assert "the gateway's address claimed (10.160.0.254)" in f.msg and "about one every 2.0 s" in f.msg
    assert sorted(c["ip"] for c in f.evidence["conflicts"]) == ["10.160.0.254", "10.160.1.10"]
    assert 0 < len(f.evidence["evidence_frames"]) <= 64


def test_a_replaced_nic_is_one_change():
    (f,) = run(CAPTURES / "arp-campus-nic-change.pcapng")
    assert f.severity == "low" and f.src_mac == "02:a0:00:01:00:c2" and f.n == 1
    assert "took over 10.160.1.12 from 02:a0:00:01:00:0c (1 change)" in f.msg


@pytest.mark.parametrize("name", ["arp-vrrp-failover.pcapng", "arp-proxy-router.pcapng", "arp-dynamic-pool.pcapng",
                                  "arp-nd-near-misses.pcapng", "arp-dhcp-registered-ack.pcapng"])
def test_failover_proxy_arp_and_the_pool_are_no_conflict(name):
    assert run(CAPTURES / name) == []


def test_the_campus_neighbor_spoofer_takes_the_gateways_link_local():
    (f,) = run(CAPTURES / "arp-nd-spoof.pcapng")
    assert f.severity == "high" and f.src_mac == "02:a0:00:01:00:42" and f.evidence["poisoned"] == ["fe80::1"]
    assert f.evidence["unsolicited_replies"] == 30 and "about one every 2.0 s" in f.msg


def test_a_replaced_nic_announcing_its_ipv6_address_is_one_change():
    (f,) = run(CAPTURES / "arp-nd-nic-change.pcapng")
    assert f.severity == "low" and f.src_mac == "02:a0:00:01:00:c2" and f.n == 1
    assert f.evidence["gratuitous"] == 2 and "2 unsolicited multicast advertisements" in f.msg


# ---- IPv6: Neighbor Discovery -------------------------------------------------------------------------

A6, B6 = (A[0], "fe80::a"), (B[0], "fe80::b")
GW6 = (C[0], "fe80::1")


def na(sender_mac, target, to, solicited=False, override=True, hlim=255, lladdr=None, dst_ip=None, cksum=None):
    icmp = ICMPv6ND_NA(R=0, S=int(solicited), O=int(override), tgt=target)
    if cksum is not None:
        icmp.cksum = cksum
    return (Ether(src=sender_mac, dst=to[0]) / IPv6(src=target, dst=dst_ip or to[1], hlim=hlim) / icmp
            / ICMPv6NDOptDstLLAddr(lladdr=lladdr or sender_mac))


def ns(asker, target, source=None):
    return (Ether(src=asker[0], dst="33:33:ff:00:00:01") / IPv6(src=source or asker[1], dst="ff02::1:ff00:1", hlim=255)
            / ICMPv6ND_NS(tgt=target) / ICMPv6NDOptSrcLLAddr(lladdr=asker[0]))


TRUTH6 = [(0.0, ns(A6, GW6[1])), (0.0004, na(GW6[0], GW6[1], A6, solicited=True))]


def test_unasked_override_advertisements_to_one_host_are_poisoning(tmp_path):
    lies = [(10.0 + 2 * k, na(SPOOFER, GW6[1], A6)) for k in range(3)]
    (f,) = run(capture(tmp_path, TRUTH6 + lies))
    assert f.severity == "high" and f.evidence["poisoned"] == [GW6[1]] and f.n == 1
    # solicited ones answer a question: a change, not poisoning
    (f,) = run(capture(tmp_path, TRUTH6 + [(t, na(SPOOFER, GW6[1], A6, solicited=True)) for t, _ in lies],
                       name="solicited.pcap"))
    assert f.severity == "low" and f.evidence["unsolicited_replies"] == 0
    # the same to all nodes: an announcement (a host's own after a NIC change), one change
    (f,) = run(capture(tmp_path, TRUTH6 + [(t, na(SPOOFER, GW6[1], ("33:33:00:00:00:01", "ff02::1")))
                                           for t, _ in lies], name="all-nodes.pcap"))
    assert f.severity == "low" and f.evidence["gratuitous"] == 3


@pytest.mark.parametrize("what", ["hop limit", "checksum", "no override", "solicited to all nodes", "dad"])
def test_neighbor_discovery_hosts_ignore_is_no_claim(tmp_path, what):
    # what a host discards (RFC 4861 7.1.2) or does not let override its cache (7.2.5): no change
    if what == "dad":
        # two hosts probing from ::, each in turn: the unspecified address is nobody's
        lies = [(10.0 + 2 * k, ns((SPOOFER if k % 2 else B[0], "::"), GW6[1], source="::")) for k in range(3)]
    else:
        kind = {"hop limit": {"hlim": 64}, "checksum": {"cksum": 0x1234}, "no override": {"override": False},
                "solicited to all nodes": {"solicited": True, "dst_ip": "ff02::1"}}[what]
        lies = [(10.0 + 2 * k, na(SPOOFER, GW6[1], A6, **kind)) for k in range(3)]
    assert run(capture(tmp_path, TRUTH6 + lies)) == []


def test_an_advertisement_without_override_is_no_claim_a_later_one_changes(tmp_path):
    # a proxy answers (O clear) between the owner's answers: the owner's next answer is no change
    timed = [*TRUTH6, (5.0, na(SPOOFER, GW6[1], A6, solicited=True, override=False)),
             (10.0, na(GW6[0], GW6[1], A6, solicited=True))]
    assert run(capture(tmp_path, timed)) == []


def test_an_advertisement_from_another_ethernet_source_is_a_sign_on_its_vlan(tmp_path):
    # the lie sent from another Ethernet source than its target link-layer address, on VLAN 20
    lies = [(10.0 + 2 * k, na(SPOOFER, GW6[1], A6, lladdr="02:00:00:00:00:99")) for k in range(3)]
    timed = [(t, Ether(src=p.src, dst=p.dst) / Dot1Q(vlan=20) / p.payload) for t, p in TRUTH6 + lies]
    (f,) = run(capture(tmp_path, timed))
    assert f.src_mac == "02:00:00:00:00:99" and f.evidence["vlan"] == 20 and f.evidence["ethernet_mismatches"] == 3
    assert "3 ND packets whose Ethernet source is not their link-layer address option" in f.msg


def test_a_solicitation_speaks_for_its_source(tmp_path):
    # B solicits from A's address with its own MAC in the option: A's address changes hands
    timed = [(0.0, ns(A6, GW6[1])), (5.0, ns((B[0], A6[1]), GW6[1]))]
    (f,) = run(capture(tmp_path, timed))
    assert f.src_mac == B[0] and f.evidence["conflicts"][0]["ip"] == A6[1] and f.n == 1


# ---- thresholds, each with its neighbour ------------------------------------------------------------

@pytest.mark.parametrize("a_times, b_times, changes, severity", [
    ([0.0], [10.0], 1, "low"),                   # A, then B: one handover
    ([0.0, 20.0], [10.0], 2, "low"),             # A, B, back to A: a failover and its failback
    ([0.0, 20.0], [10.0, 30.0], 3, "medium"),    # A, B, A, B: a conflict repeated
])
def test_a_conflict_repeated_three_times_is_medium(tmp_path, a_times, b_times, changes, severity):
    (f,) = run(capture(tmp_path, fight(a_times, b_times)))
    assert (f.n, f.severity) == (changes, severity), f.msg


@pytest.mark.parametrize("gap_s, found", [(599.0, True), (601.0, False)])
def test_two_macs_conflict_within_the_window(tmp_path, gap_s, found):
    assert bool(run(capture(tmp_path, fight([0.0], [gap_s])))) is found


def test_the_window_is_a_parameter(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "arp.yaml").write_text("id: arp-spoof\nparams:\n  conflict_window_s: 30\n")
    assert run(capture(tmp_path, fight([0.0], [31.0])), rules=load_rules(tmp_path / "rules")) == []


@pytest.mark.parametrize("delay_s, unsolicited", [(0.9, 0), (1.1, 1)])
def test_a_reply_after_the_request_within_a_second_is_an_answer(tmp_path, delay_s, unsolicited):
    # B asks who has C's address; A answers after delay_s (for C's address, which C also claims)
    timed = [(0.0, request(B, C[1])), (delay_s, reply((A[0], C[1]), B)), (5.0, request(C, B[1]))]
    (f,) = run(capture(tmp_path, timed))
    assert f.evidence["unsolicited_replies"] == unsolicited


def test_the_answer_may_come_in_the_next_batch(tmp_path, monkeypatch):
    import detector.schema
    monkeypatch.setattr(detector.schema, "BATCH_PACKETS", 1)
    timed = [(0.0, request(B, C[1])), (0.5, reply((A[0], C[1]), B)), (5.0, request(C, B[1]))]
    (f,) = run(capture(tmp_path, timed))
    assert f.evidence["unsolicited_replies"] == 0


def test_a_man_in_the_middle_needs_two_owners(tmp_path):
    # the spoofer claims A's and B's addresses against both, unasked, back and forth: high
    lies = [(t, reply((SPOOFER, A[1]), B)) for t in (1.0, 11.0)] + [(t, reply((SPOOFER, B[1]), A)) for t in (1.0, 11.0)]
    truth = [(t, request(A, C[1])) for t in (5.0, 15.0)] + [(t, request(B, C[1])) for t in (5.0, 15.0)]
    (f,) = run(capture(tmp_path, lies + truth))
    assert f.severity == "high" and f.src_mac == SPOOFER
    # one host with two addresses replaced by another NIC claiming both: one owner, one change each: low
    new = "02:00:00:00:00:77"
    timed = [(0.0, request((A[0], "10.9.0.20"), C[1])), (0.1, request((A[0], "10.9.0.21"), C[1])),
             (9.0, reply((new, "10.9.0.20"), C)), (9.1, reply((new, "10.9.0.21"), C))]
    (f,) = run(capture(tmp_path, timed, name="two-addresses.pcap"))
    assert f.severity == "low" and f.src_mac == new
    # both addresses of one owner, fought over back and forth: an impersonation, not a middle: low (2 changes each)
    timed = [(t, request((A[0], ip), C[1])) for t in (0.0, 20.0) for ip in ("10.9.0.20", "10.9.0.21")]
    timed += [(t, reply((SPOOFER, ip), C)) for t in (10.0,) for ip in ("10.9.0.20", "10.9.0.21")]
    (f,) = run(capture(tmp_path, timed, name="one-owner.pcap"))
    assert f.severity == "low" and not f.evidence["man_in_the_middle"]
    # two owners' addresses taken over once each, never fought back: low
    timed = [(0.0, request(A, C[1])), (0.1, request(B, C[1])), (10.0, reply((SPOOFER, A[1]), C)),
             (10.1, reply((SPOOFER, B[1]), C))]
    (f,) = run(capture(tmp_path, timed, name="taken-once.pcap"))
    assert f.severity == "low" and not f.evidence["man_in_the_middle"]


def test_repeated_unasked_replies_for_a_taken_address_are_poisoning(tmp_path):
    # the gateway (C) answers A once; from 10 s the spoofer tells A every 2 s that C's address is at its MAC
    truth = [(0.0, request(A, C[1])), (0.0004, reply(C, A))]
    lies = [(10.0 + 2 * k, reply((SPOOFER, C[1]), A)) for k in range(3)]
    (f,) = run(capture(tmp_path, truth + lies))
    assert f.severity == "high" and f.evidence["poisoned"] == [C[1]] and f.n == 1
    assert "with targeted ARP replies nobody asked for, repeated" in f.msg
    (f,) = run(capture(tmp_path, truth + lies[:2], name="twice.pcap"))
    assert f.severity == "low"
    # a router taking the address over broadcasts gratuitous ARP, as often as it likes: one change, low
    garps = [(10.0 + 2 * k, Ether(src=SPOOFER, dst=BROADCAST) / ARP(op=2, hwsrc=SPOOFER, psrc=C[1], hwdst=BROADCAST,
                                                                     pdst=C[1])) for k in range(5)]
    (f,) = run(capture(tmp_path, truth + garps, name="failover.pcap"))
    assert f.severity == "low" and f.evidence["gratuitous"] == 5


def test_what_wireshark_skips_is_no_claim(tmp_path):
    timed = [(0.0, request(A, C[1])),
             # a probe from 0.0.0.0, a multicast and a zero sender MAC, a request's target pair
             (1.0, request((B[0], "0.0.0.0"), A[1])), (2.0, reply(("01:00:5e:00:00:01", A[1]), B)),
             (3.0, reply(("00:00:00:00:00:00", A[1]), B)),
             (4.0, Ether(src=B[0], dst=BROADCAST) / ARP(op=1, hwsrc=B[0], psrc=B[1], hwdst=C[0], pdst=A[1]))]
    assert run(capture(tmp_path, timed)) == []


def test_claims_on_two_vlans_are_two_links(tmp_path):
    timed = [(0.0, reply((A[0], C[1]), B, vlan=10)), (5.0, reply((B[0], C[1]), A, vlan=20))]
    assert run(capture(tmp_path, timed)) == []
    timed = [(0.0, reply((A[0], C[1]), B, vlan=10)), (5.0, reply((B[0], C[1]), A, vlan=10))]
    (f,) = run(capture(tmp_path, timed, name="one-vlan.pcap"))
    assert f.evidence["vlan"] == 10 and "on VLAN 10" in f.msg


def test_an_ethernet_source_other_than_the_sender_is_a_sign_except_for_a_virtual_router(tmp_path):
    timed = [*fight([0.0], [10.0]), (11.0, reply((B[0], C[1]), A, src="02:00:00:00:00:99"))]
    (f,) = run(capture(tmp_path, timed))
    assert f.evidence["ethernet_mismatches"] == 1 and "Ethernet source is not their ARP sender MAC" in f.msg
    timed = [*fight([0.0], []), (10.0, reply((VMAC, C[1]), A, src=B[0]))]
    (f,) = run(capture(tmp_path, timed, name="vmac.pcap"))
    assert f.evidence["ethernet_mismatches"] == 0


def test_the_gateway_is_a_site_router(tmp_path):
    path = capture(tmp_path, fight([0.0], [10.0]))
    assert run(path)[0].evidence["gateway_addresses"] == []
    site = Site(path="site.yaml", routers=frozenset({C[1]}))
    (f,) = run(path, site=site)
    assert f.evidence["gateway_addresses"] == [C[1]] and "the gateway's address claimed" in f.msg


# ---- issue 27: corrupted copies of a host, one spoofed ARP for the gateway ---------------------------------

def test_corrupted_copies_of_the_gateway_are_low_and_named():
    # 30 of the gateway's frames lost 1-3 bits of their sender MAC: "MACs" that claimed 10.71.0.1 at medium
    found = run(CAPTURES / "arp-corrupted-many.pcapng")
    assert {f.severity for f in found} == {"low"} and len(found) == 4
    assert all(f.identifier.endswith(" corrupted copies") for f in found)
    (gateway,) = [f for f in found if f.src_mac == "00:0c:29:20:a8:7f"]
    assert gateway.src_ip == "10.71.0.1" and gateway.evidence["corrupted_copies_total"] == 29
    assert all(1 <= c["bits"] <= 3 and c["frames"] <= 3 and c["copy_of"] == "00:0c:29:20:a8:7f" and c["damage"]
               for c in gateway.evidence["corrupted_copies"])
    assert "likely corrupted copies of 00:0c:29:20:a8:7f, not other hosts" in gateway.msg


def test_one_corrupted_copy_is_named():
    (f,) = run(CAPTURES / "arp-corrupted-one-copy.pcapng")
    assert f.severity == "low" and f.src_mac == "00:0c:29:4b:10:0b" and f.n == 1
    (copy,) = f.evidence["corrupted_copies"]
    assert copy == {"mac": "00:0c:09:4b:30:0b", "copy_of": "00:0c:29:4b:10:0b", "bits": 2, "frames": 1,
                    "damage": "Ethernet source a few bits from the ARP sender MAC, an unknown ARP hardware type"}


def test_a_second_mac_one_bit_away_sending_clean_frames_is_a_host():
    (f,) = run(CAPTURES / "arp-near-mac-conflict.pcapng")
    assert f.severity == "medium" and f.src_mac == "00:1b:a9:33:02:15" and "corrupted" not in f.msg


def _answers_with(copies) -> list:
    """A answers C every 5 s for a minute; `copies` (time, sender MAC, Ethernet source) answer for A's address."""
    return [(5.0 * k, reply(A, C)) for k in range(13)] + [(t, reply((mac, A[1]), C, src=src)) for t, mac, src in copies]


@pytest.mark.parametrize("copies, corrupted", [
    # one bit from A, from A's own Ethernet source: a damaged frame
    ([(12.5, "02:00:00:00:00:1a", A[0])], True),
    # the same MAC from a clean frame (its own source): a host, however close
    ([(12.5, "02:00:00:00:00:1a", "02:00:00:00:00:1a")], False),
    # three bits, three damaged frames; four bits or four frames make a host
    ([(t, "02:00:00:00:00:7a", "03:00:00:00:00:0a") for t in (12.5, 22.5, 32.5)], True),
    ([(12.5, "02:00:00:00:00:fa", "03:00:00:00:00:0a")], False),
    ([(t, "02:00:00:00:00:7a", "03:00:00:00:00:0a") for t in (12.5, 22.5, 32.5, 42.5)], False),
])
def test_a_copy_is_a_few_bits_a_few_frames_all_damaged(tmp_path, copies, corrupted):
    (f,) = run(capture(tmp_path, _answers_with(copies)))
    assert ("likely corrupted copies of 02:00:00:00:00:0a" in f.msg) is corrupted
    assert f.identifier.endswith(" corrupted copies") is corrupted
    if not corrupted:
        assert f.src_mac == copies[0][1] and "corrupted" not in f.msg


def test_one_spoofed_arp_claiming_the_gateway_is_low():
    # Cain & Abel once: a reply and a request claiming 10.71.0.1 from a MAC that ARPs with 10.71.0.66 elsewhere,
    # 15 minutes after the gateway's own ARP, while the hosts' traffic reaches 10.71.0.1 at the gateway's MAC
    (f,) = run(CAPTURES / "arp-cain-gateway.pcapng")
    assert f.severity == "low" and f.src_mac == "00:13:ce:5a:71:66" and f.src_ip == "10.71.0.1" and f.n == 1
    assert f.evidence["gateway_addresses"] == ["10.71.0.1"] and f.evidence["unsolicited_replies"] == 1
    assert "held by 00:0c:29:20:a8:7f (16 packets to 10.71.0.1 sent there; the link's traffic through it" in f.msg
    assert "it claims 2 addresses (10.71.0.1, 10.71.0.66)" in f.msg


@pytest.mark.parametrize("servers, to_the_address, found", [(8, True, True), (7, True, False), (8, False, True)])
def test_an_address_claimed_against_the_traffic_only_counts_for_the_gateway(tmp_path, servers, to_the_address, found):
    # A's address, claimed by the spoofer 15 minutes after A's last ARP, while B's traffic reaches `servers` off-net
    # addresses through A (from 8 on, A is the gateway) until 990 s, and A's address itself (or not: then A's old ARP
    # claim binds it)
    from scapy.all import IP, UDP
    packets = [(0.0, request(A, B[1])), (0.0004, reply(B, A))]
    if to_the_address:
        packets += [(10.0 * k, Ether(src=B[0], dst=A[0]) / IP(src=B[1], dst=A[1]) / UDP(sport=5353, dport=53))
                    for k in range(100)]
    packets += [(5.0 + 110 * k, Ether(src=B[0], dst=A[0]) / IP(src=B[1], dst=f"198.51.100.{k + 1}") / UDP(dport=443))
                for k in range(servers)]
    packets += [(900.0, reply((SPOOFER, A[1]), B))]
    found_ = run(capture(tmp_path, packets))
    assert bool(found_) is found
    if found:
        assert found_[0].severity == "low" and found_[0].evidence["gateway_addresses"] == [A[1]]


# ---- state: merging partitions, bounds, damaged input --------------------------------------------------

def _detector():
    return detector("arp-spoof")


def test_two_halves_merged_give_one_pass():
    one, merged = one_pass_and_halves(CAPTURES / "arp-spoof-mitm.pcapng", _detector, later_first=False)
    # partitions in time order: the same conflicts, the change at the border counted once
    assert [f["severity"] for f in merged] == [f["severity"] for f in one] == ["high"]
    assert merged[0]["evidence"]["conflicts"] == one[0]["evidence"]["conflicts"]


@pytest.mark.parametrize("name", ["arp-corrupted-many.pcapng", "arp-cain-gateway.pcapng"])
def test_copies_and_the_gateways_traffic_merged_give_one_pass(name):
    one, merged = one_pass_and_halves(CAPTURES / name, _detector, later_first=False)
    assert one and merged == one


def test_two_halves_of_neighbor_discovery_merged_give_one_pass(tmp_path):
    lies = [(10.0 + 2 * k, na(SPOOFER, GW6[1], A6)) for k in range(4)]
    path = capture(tmp_path, [*TRUTH6, (5.0, ns(A6, GW6[1])), *lies])
    for cut in range(1, len(batch_of(path))):
        one, merged = one_pass_and_halves(path, _detector, cut=cut, later_first=False)
        assert [f["severity"] for f in merged] == [f["severity"] for f in one] == ["high"]
        assert merged[0]["evidence"] == one[0]["evidence"] and merged[0]["n"] == one[0]["n"] == 1


@pytest.mark.parametrize("every", [1, 3, 1000])
def test_batches_folded_together_give_the_table_of_one_batch(monkeypatch, every):
    # the observations of many batches wait and fold together: the table is the one a single batch gives
    (batch,) = [decode(raw) for _, raw in read_captures([str(CAPTURES / "arp-spoof-mitm.pcapng")])]
    whole = nb.Neighbors(ip_destinations=True, nd=True)
    whole.update(batch)
    monkeypatch.setattr(nb, "FOLD_EVERY_BATCHES", every)
    parts = nb.Neighbors(ip_destinations=True, nd=True)
    for k in range(len(batch)):
        parts.update(PacketBatch(data=batch.data, cols={name: v[k:k + 1] for name, v in batch.cols.items()}))
        assert len(parts._pending) < every
    order = np.argsort(whole.rows["key"])
    assert len(whole.rows["key"]) > 10
    for name, column in parts.rows.items():
        assert np.array_equal(column[np.argsort(parts.rows["key"])], whole.rows[name][order]), name


def test_states_that_saw_no_arp_merge():
    # a watch window merges the state of slices without ARP
    empty = _detector().merge(_detector())
    assert empty.findings(AnalysisContext(flows=None, stats=CaptureStats())) == []


def test_a_flood_of_forged_pairs_keeps_the_first_and_counts_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(nb, "MAX_ROWS", 10)
    timed = [(k * 0.01, reply((f"02:00:00:00:01:{k:02x}", f"10.9.1.{k}"), A)) for k in range(20)]
    timed += [(0.005, reply((SPOOFER, "10.9.1.0"), A))]
    (f,) = run(capture(tmp_path, timed))
    assert f.evidence["observations_not_kept"] > 0 and f.evidence["conflicts"][0]["ip"] == "10.9.1.0"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from([1, 2, 3, 4]), st.sampled_from([A[0], B[0], SPOOFER, BROADCAST, VMAC]),
                          st.sampled_from(["0.0.0.0", A[1], B[1], C[1], "255.255.255.255", "224.0.0.1"]),
                          st.sampled_from([A[0], "00:00:00:00:00:00", BROADCAST]),
                          st.sampled_from([A[1], B[1], C[1], "0.0.0.0"]), st.integers(0, 700)),
                min_size=1, max_size=30))
def test_any_mix_of_arp_packets_is_judged_never_crashes(packets):
    frames = [(t, raw(Ether(src=sha, dst=BROADCAST) / ARP(op=op, hwsrc=sha, psrc=spa, hwdst=tha, pdst=tpa)))
              for op, sha, spa, tha, tpa, t in sorted(packets, key=lambda p: p[-1])]
    detector = _detector()
    records = make_batch([(1, frame) for _, frame in frames])
    records.cols["ts_ns"][:] = [(T0 + t) * 10**9 for t, _ in frames]
    detector.update(decode(records))
    for f in detector.findings(AnalysisContext(flows=None, stats=CaptureStats())):
        assert f.severity in ("low", "medium", "high") and len(f.evidence["evidence_frames"]) <= 64


@pytest.mark.parametrize("starts", [[2], [5, 8], [2, 5, 8, 11]], ids=["first", "two", "every"])
def test_a_cut_between_a_request_and_its_reply_merges_to_one_pass(tmp_path, starts):
    # each reply of arp-flip-flop answers the request a millisecond before it: cut between them, the later part
    # alone calls it unsolicited (a sign of spoofing); the merge asks the earlier part's requests, as one pass
    paths = cut_at(CAPTURES / "arp-flip-flop.pcapng", tmp_path, starts)
    one, many = one_and_merged(paths, "arp-spoof")
    assert one and all(claim["unsolicited"] == 0 for conflict in one[0]["evidence"]["conflicts"]
                       for claim in conflict["claims"])
    assert many == one
    # as a tree too: a part merged with its successor first keeps its own doubts for its predecessor
    assert one_and_merged(paths, "arp-spoof", tree=True)[1] == one

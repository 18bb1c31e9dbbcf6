"""rogue-dhcp on real bytes: rogue DHCPv4 and DHCPv6 servers, their near-misses, the site file, storms."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.all import IP, UDP, Ether, raw, wrpcap
from scapy.layers.dhcp import BOOTP, DHCP
from scapy.layers.dhcp6 import (
    DUID_LL,
    DHCP6_Advertise,
    DHCP6_RelayForward,
    DHCP6_RelayReply,
    DHCP6_Solicit,
    DHCP6OptClientId,
    DHCP6OptRelayMsg,
    DHCP6OptServerId,
)
from scapy.layers.inet6 import IPv6

from detector.analysis import analyze
from detector.commands import analyze as analyze_to
from detector.decode import decode
from detector.detect.detector import AnalysisContext
from detector.detectors.rogue_dhcp import FORGED_SERVERS as FORGED
from detector.detectors.rogue_dhcp import SAMPLE_SERVERS as SAMPLE
from detector.site import Site
from detector.stats import CaptureStats
from tests._rules import detector, one_pass_and_halves
from tests.test_decode import make_batch

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
sys.path.insert(0, str(CAPTURES))
import build_flood_calibration  # noqa: E402 - the capture builders, for storms too big to bundle

T0 = 1_767_225_600
REAL = "10.50.0.1 no VLAN"
ROGUE = "10.50.0.66 no VLAN"


def found(paths, site=None, rules=None) -> dict:
    """rogue-dhcp's findings by identifier."""
    paths = paths if isinstance(paths, list) else [paths]
    return {f.identifier: f for f in analyze(paths, rules, label="test", site=site).findings if f.rule == "rogue-dhcp"}


def site(*servers) -> Site:
    return Site(path="site.yaml", dhcp_servers=frozenset(servers))


def test_a_rogue_offering_another_router_and_dns_is_high_without_the_site_file():
    f = found(CAPTURES / "dhcp-rogue-server.pcapng")
    assert {k: v.severity for k, v in f.items()} == {REAL: "high", ROGUE: "high"}
    rogue = f[ROGUE]
    assert "with other routers and DNS servers than 10.50.0.1" in rogue.msg
    assert "router 192.168.1.1; DNS 192.168.1.1 against router 10.50.0.1; DNS 10.50.0.53" in rogue.msg
    assert "the site file names no dhcp_servers" in rogue.msg
    ev = rogue.evidence
    assert ev["routers"] == ["192.168.1.1"] and ev["dns"] == ["192.168.1.1"] and ev["lease_s"] == [3600, 3600]
    assert [c["address"] for c in ev["clients"]] == [f"192.168.1.{100 + k}" for k in range(4, 8)]
    assert ev["clients"][0]["mac"] == "02:00:5e:51:00:04" and ev["macs"] == ["02:00:5e:50:00:66"]
    assert ev["differs_from"] == {"10.50.0.1": ["routers", "DNS servers"]} and ev["offers"] == 4
    assert rogue.src_ip == "10.50.0.66" and rogue.src_mac == "02:00:5e:50:00:66" and rogue.src_port == 67
    assert 0 < len(ev["evidence_frames"]) <= 64


def test_with_the_real_server_in_the_site_file_only_the_rogue_is_high():
    for listed in ("10.50.0.1", "02:00:5e:50:00:01"):
        f = found(CAPTURES / "dhcp-rogue-server.pcapng", site=site(listed))
        assert (f[REAL].severity, f[ROGUE].severity) == ("info", "high")
        assert "not among the site's DHCP servers" in f[ROGUE].msg and "Not judged" not in f[ROGUE].msg
        assert f[ROGUE].evidence["allowed_server"] is False and f[REAL].evidence["allowed_server"] is True


def test_a_dhcpv6_rogue_with_another_dns_server_is_high():
    f = found(CAPTURES / "dhcp6-rogue-server.pcapng")
    real, rogue = f["DUID-LL 02:00:5e:50:00:01 no VLAN"], f["DUID-LL 02:00:5e:50:00:66 no VLAN"]
    assert (real.severity, rogue.severity) == ("high", "high")
    assert "other DNS servers" in rogue.msg and rogue.evidence["dns"] == ["2001:db8:66::1"]
    assert rogue.evidence["duid"] == "DUID-LL 02:00:5e:50:00:66" and rogue.evidence["offers"] == 4
    assert rogue.evidence["clients"][0]["address"] == "2001:db8:66::66"
    # the site lists the real server by its DUID (DUID-LL, hardware type 1, its MAC)
    listed = found(CAPTURES / "dhcp6-rogue-server.pcapng", site=site("0003000102005e500001"))
    assert listed["DUID-LL 02:00:5e:50:00:01 no VLAN"].severity == "info"
    assert listed["DUID-LL 02:00:5e:50:00:66 no VLAN"].severity == "high"


def test_one_server_is_info():
    f = found(CAPTURES / "dhcp-single-server.pcapng")
    (only,) = f.values()
    assert only.severity == "info" and "the only DHCP server answering on this VLAN" in only.msg
    assert only.evidence["acks"] == 9 and only.evidence["clients_total"] == 8


def test_a_relayed_server_is_one_server_on_each_vlan():
    f = found(CAPTURES / "dhcp-relay.pcapng")
    assert {k: v.severity for k, v in f.items()} == {"10.70.0.5 VLAN 10": "info", "10.70.0.5 VLAN 70": "info"}
    client_side = f["10.70.0.5 VLAN 10"]
    assert client_side.src_ip == "10.60.10.1" and "10.70.0.5 (from 10.60.10.1 02:00:5e:60:0a:01)" in client_side.msg
    assert client_side.evidence["relayed"] == 8 and client_side.evidence["macs"] == ["02:00:5e:60:0a:01"]
    # the site file names the server, not the relay: the relay's replies are the server's
    listed = found(CAPTURES / "dhcp-relay.pcapng", site=site("10.70.0.5"))
    assert {v.severity for v in listed.values()} == {"info"}


def test_a_failover_pair_is_medium_without_the_site_file_and_info_with_it():
    path = CAPTURES / "dhcp-failover.pcapng"
    f = found(path)
    assert {v.severity for v in f.values()} == {"medium"} and len(f) == 2
    assert "within 60 s of each other (also 10.50.0.2)" in f[REAL].msg
    listed = found(path, site=site("10.50.0.1", "10.50.0.2"))
    assert {v.severity for v in listed.values()} == {"info"}
    half = found(path, site=site("10.50.0.1"))
    assert listed[REAL].severity == "info" and half["10.50.0.2 no VLAN"].severity == "high"


def test_two_real_servers_read_as_one_input_are_medium(captures_real):
    # suricata's offer from 192.168.0.1 (2004) and packetlife's relayed offer from 172.22.178.234 (2006): two
    # servers of one untagged link, never within 60 s of each other, one offering no router to compare
    f = found([captures_real / "suricata/rust/src/dhcp/offer.pcap", captures_real / "packetlife/pcaps/dhcp-auth.cap"])
    assert {k: v.severity for k, v in f.items()} == {"192.168.0.1 no VLAN": "medium",
                                                     "172.22.178.234 no VLAN": "medium"}
    relayed = f["172.22.178.234 no VLAN"]
    assert relayed.evidence["routers"] == ["10.10.8.254"] and relayed.evidence["relayed"] == 1
    assert "DNS 143.209.4.1 (first of 2)" in relayed.msg and "never within 60 s" in relayed.msg


def test_the_specs_negatives_stay_quiet(captures_real):
    for path in ("suricata-verify/tests/dhcp-option-52-overload/input.pcap",
                 "suricata-verify/tests/dhcp-option-52-overload-both/input.pcap", "tcpdump/tests/dhcpv6-ia-na.pcap",
                 "tcpdump/tests/dhcpv6-ia-pd.pcap", "tcpdump/tests/dhcpv6-ia-ta.pcap", "tcpdump/tests/bootp_asan.pcap",
                 "tcpdump/tests/bootp_asan-2.pcap"):
        assert {v.severity for v in found(captures_real / path).values()} <= {"info"}, path
    # the overloaded ACK names its router and DNS in sname: read there, one server
    (server,) = found(captures_real / "suricata-verify/tests/dhcp-option-52-overload/input.pcap").values()
    assert server.evidence["routers"] == ["10.100.0.1", "10.100.0.2"]


def _offer(t, server, xid, router="10.50.0.1"):
    mac, address = server
    return (t, Ether(src=mac, dst="ff:ff:ff:ff:ff:ff") / IP(src=address, dst="255.255.255.255")
            / UDP(sport=67, dport=68) / BOOTP(op=2, xid=xid, yiaddr="10.50.0.200", chaddr=b"\x02" * 6)
            / DHCP(options=[("message-type", "offer"), ("server_id", address), ("router", router), "end"]))


def capture(tmp_path, timed) -> Path:
    packets = []
    for t, packet in timed:
        packet.time = T0 + t
        packets.append(packet)
    path = tmp_path / "dhcp.pcap"
    wrpcap(str(path), packets)
    return path


def test_a_second_server_far_apart_in_time_is_medium_and_close_with_another_router_high(tmp_path):
    a, b = ("02:00:5e:50:00:01", "10.50.0.1"), ("02:00:5e:50:00:66", "10.50.0.66")
    apart = capture(tmp_path, [_offer(0, a, 1), _offer(61.5, b, 2, router="10.50.0.66")])
    assert {v.severity for v in found(apart).values()} == {"medium"}
    close = capture(tmp_path, [_offer(0, a, 1), _offer(59.5, b, 2, router="10.50.0.66")])
    assert {v.severity for v in found(close).values()} == {"high"}


def test_a_client_message_from_port_67_or_a_server_message_from_elsewhere_is_no_server(tmp_path):
    a = ("02:00:5e:50:00:01", "10.50.0.1")
    request = Ether(src=a[0]) / IP(src=a[1], dst="10.50.0.9") / UDP(sport=67, dport=67) \
        / BOOTP(op=1, xid=3) / DHCP(options=[("message-type", "request"), "end"])
    spoofed_port = Ether(src=a[0]) / IP(src=a[1], dst="10.50.0.9") / UDP(sport=6767, dport=68) \
        / BOOTP(op=2, xid=3) / DHCP(options=[("message-type", "offer"), "end"])
    assert found(capture(tmp_path, [(0, request), (1, spoofed_port)])) == {}


def test_more_than_2048_dhcp_messages_in_a_second_are_a_storm(tmp_path):
    discover = Ether(src="02:00:5e:51:00:01", dst="ff:ff:ff:ff:ff:ff") / IP(src="0.0.0.0", dst="255.255.255.255") \
        / UDP(sport=68, dport=67) / BOOTP(op=1, chaddr=b"\x02" * 6) / DHCP(options=[("message-type", "discover"),
                                                                                "end"])
    frame = raw(discover)
    for count, storm in ((2049, True), (2048, False)):
        path = tmp_path / f"storm-{count}.pcap"
        packets = [Ether(frame) for _ in range(count)]
        for k, packet in enumerate(packets):
            packet.time = T0 + 10 + k / (count + 1)
        wrpcap(str(path), packets)
        f = found(path)
        assert ("dhcp-storm" in f) == storm
        if storm:
            storm = f["dhcp-storm"]
            assert storm.severity == "medium" and storm.evidence["peak_per_second"] == 2049
            assert len(storm.evidence["evidence_frames"]) <= 64
            # one client sent them all: the finding names it, and its advice is to find that MAC
            assert storm.src_mac == "02:00:5e:51:00:01" and storm.evidence["client_messages"] == 2049
            assert "the busiest client sender, 02:00:5e:51:00:01 (0.0.0.0), sent at least 2,049" in storm.msg
            assert storm.remediation.startswith("Find 02:00:5e:51:00:01, the busiest sender of the storm's DHCP "
                                                "client messages, by its MAC address on the switch")


def _detector():
    return detector("rogue-dhcp")


def test_two_halves_merged_give_one_pass():
    one, merged = one_pass_and_halves(CAPTURES / "dhcp-rogue-server.pcapng", _detector)
    assert merged == one
    assert {f["severity"] for f in one} == {"high"}


def test_a_flood_of_server_identities_keeps_the_first_and_counts_the_rest(tmp_path, monkeypatch):
    import detector.detectors.rogue_dhcp as rule
    monkeypatch.setattr(rule, "MAX_SERVERS", 3)
    packets = [_offer(k * 0.01, ("02:00:5e:50:00:01", f"10.50.0.{k + 1}"), k) for k in range(5)]
    f = found(capture(tmp_path, packets))
    assert sorted(f) == [f"10.50.0.{k} no VLAN" for k in (1, 2, 3)]
    assert f["10.50.0.1 no VLAN"].evidence["not_kept"]["servers"] == 2


SHAPES = [raw(_offer(0, ("02:00:5e:50:00:01", "10.50.0.1"), 1)[1]),
          raw(_offer(0, ("02:00:5e:50:00:66", "10.50.0.66"), 2, router="10.0.0.9")[1])]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(range(len(SHAPES))), st.integers(0, 320), st.integers(0, 255)),
                min_size=1, max_size=12))
def test_damaged_messages_are_judged_never_crash(edits):
    frames = [bytearray(shape) for shape in SHAPES]
    for which, where, value in edits:
        frames[which][14 + where % (len(frames[which]) - 14)] = value
    det = _detector()
    det.update(decode(make_batch([(1, bytes(frame)) for frame in frames])))
    for f in det.findings(AnalysisContext(flows=None, stats=CaptureStats())):
        assert f.severity in ("info", "medium", "high")


def test_a_relay_reply_carries_its_servers_advertise(tmp_path):
    client, server = DUID_LL(lladdr="02:00:5e:51:00:01"), DUID_LL(lladdr="02:00:5e:70:00:05")
    solicit = DHCP6_Solicit(trid=1) / DHCP6OptClientId(duid=client)
    advertise = DHCP6_Advertise(trid=1) / DHCP6OptClientId(duid=client) / DHCP6OptServerId(duid=server)
    relay = ("02:00:5e:60:46:01", "2001:db8:70::1")
    forward = (Ether(src=relay[0]) / IPv6(src=relay[1], dst="2001:db8:70::5") / UDP(sport=547, dport=547)
               / DHCP6_RelayForward(linkaddr="2001:db8:10::1", peeraddr="fe80::1") / DHCP6OptRelayMsg(message=solicit))
    back = (Ether(src="02:00:5e:70:00:05") / IPv6(src="2001:db8:70::5", dst=relay[1]) / UDP(sport=547, dport=547)
            / DHCP6_RelayReply(linkaddr="2001:db8:10::1", peeraddr="fe80::1") / DHCP6OptRelayMsg(message=advertise))
    (f,) = found(capture(tmp_path, [(0, forward), (0.01, back)])).values()
    assert f.identifier == "DUID-LL 02:00:5e:70:00:05 no VLAN" and f.severity == "info"
    assert f.evidence["relayed"] == 1 and f.evidence["offers"] == 1 and f.src_ip == "2001:db8:70::5"


# ---- storms: of client messages, of forged servers ------------------------------------------------------------

def test_a_starvation_storm_names_what_it_knows_and_advises_on_that(tmp_path):
    # 3,000 DISCOVERs in one second from 3,000 forged MACs: the finding names no server, and its advice (the
    # incident's first step) is to find the port the forged MACs come from, not "the server named in the finding"
    _, _, out = analyze_to([CAPTURES / "dhcp-starvation-storm.pcap"], tmp_path)
    document = json.loads(out.read_text())
    storm = next(f for f in document["findings"] if f["identifier"] == "dhcp-storm")
    ev = storm["evidence"]
    assert (ev["client_messages"], ev["server_messages"], ev["sender_role"]) == (3000, 100, "client")
    assert abs(ev["senders_estimate"] - 3000) < 0.05 * 3000 and ev["busiest_senders"] == []
    assert ev["busiest_senders_left_out"] == ev["senders_estimate"] and "src_mac" not in storm
    assert "none with a tenth of the storm's: forged addresses" in storm["msg"]
    assert "server named" not in storm["remediation"] and "DHCP starvation" in storm["remediation"]
    incident = next(i for i in document["incidents"] if i["root_cause"]["identifier"] == "dhcp-storm")
    first = incident["summary"].splitlines()[2]
    assert first.startswith("First: The storm's client messages come from about") and "MAC addresses" in first
    # the office's server, which answered the first 100, is a finding of its own, and the only server
    server = next(f for f in document["findings"] if f["identifier"] == "10.50.0.1 no VLAN")
    assert server["severity"] == "info" and server["evidence"]["offers"] == 100


@pytest.mark.parametrize("count", [1_000, 4_000])
@pytest.mark.parametrize("family", [4, 6])
def test_a_storm_of_forged_servers_is_one_finding_with_counts_and_a_capped_sample(tmp_path, count, family):
    path = tmp_path / "forged.pcap"
    assert build_flood_calibration.forged_dhcp_servers(path, count, family) == count
    _, _, out = analyze_to([path], tmp_path / "out", report=False)
    # the output is bounded by the sample: each server's finding used to name every other (99 MB at 1,000)
    assert out.stat().st_size < 64 * 1024
    [storm] = [f for f in json.loads(out.read_text())["findings"] if f["rule"] == "rogue-dhcp"]
    version = f"DHCPv{family}"
    assert storm["identifier"] == f"{version} server storm no VLAN" and storm["severity"] == "high"
    ev = storm["evidence"]
    assert (ev["servers"], ev["messages"], ev["acks"], ev["addresses_given"]) == (count, count, count, count)
    assert len(ev["sample"]) == SAMPLE and ev["sample_left_out"] == count - SAMPLE
    first = ev["sample"][0]
    if family == 4:
        assert first == {"server": "10.64.0.1", "source_ip": "10.64.0.1", "mac": "02:00:5e:64:00:00",
                         "messages": 1, "first_seen": "2026-01-01T00:00:00.000000Z"}
        assert ev["distinct_routers"] == ev["distinct_dns"] == count
    else:
        assert first["server"] == "DUID-LL 02:00:5e:64:00:00" and first["source_ip"] == "fe80::7f00:0"
        assert ev["distinct_dns"] == count
    assert f"a storm of {count:,} forged {version} servers, untagged" in storm["msg"]
    assert "server named" not in storm["remediation"] and "MAC address table" in storm["remediation"]


def test_a_site_server_among_forged_ones_keeps_its_own_finding(tmp_path):
    path = tmp_path / "forged.pcap"
    build_flood_calibration.forged_dhcp_servers(path, 1_000)
    f = found(path, site=site("10.64.0.7"))
    assert set(f) == {"10.64.0.7 no VLAN", "DHCPv4 server storm no VLAN"}
    assert f["10.64.0.7 no VLAN"].severity == "info"
    storm = f["DHCPv4 server storm no VLAN"]
    assert storm.severity == "high" and storm.evidence["servers"] == 999 and "not among the site's" not in storm.msg
    assert "none of them among the site's DHCP servers" in storm.msg and storm.evidence["site_servers_beside"] == 1


@pytest.mark.parametrize("count, storm", [(FORGED, False), (FORGED + 1, True)])
def test_more_servers_on_one_vlan_than_a_network_runs_are_a_storm(tmp_path, count, storm):
    path = tmp_path / "forged.pcap"
    build_flood_calibration.forged_dhcp_servers(path, count)
    f = found(path)
    assert len(f) == (1 if storm else count)
    if not storm:
        # each of the few names the others, capped, and says how many it left out
        one = f["10.64.0.1 no VLAN"]
        assert "other_servers_left_out" not in one.evidence and len(one.evidence["other_servers"]) == count - 1
        assert f"one of {count} DHCP servers answering on this VLAN" in one.msg


def test_per_server_lists_are_capped_and_say_what_they_left_out(tmp_path, monkeypatch):
    import detector.detectors.rogue_dhcp as rule
    monkeypatch.setattr(rule, "IN_EVIDENCE", 2)
    path = tmp_path / "forged.pcap"
    build_flood_calibration.forged_dhcp_servers(path, 5)
    ev = found(path)["10.64.0.1 no VLAN"].evidence
    assert ev["other_servers"] == ["10.64.0.2", "10.64.0.3"] and ev["other_servers_left_out"] == 2
    assert len(ev["competing"]) == 2 and ev["competing_left_out"] == 2
    assert len(ev["differs_from"]) == 2 and ev["differs_from_left_out"] == 2


def test_storm_states_merged_give_one_pass():
    for name in ("dhcp-starvation-storm.pcap", "dhcp-forged-servers.pcap"):
        one, merged = one_pass_and_halves(CAPTURES / name, _detector)
        assert merged == one and one

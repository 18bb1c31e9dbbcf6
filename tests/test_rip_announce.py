"""rip-announce on real bytes: route injection and poisoning, their near-misses, the receiver's checks, the site."""
from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.all import IP, UDP, Dot1Q, Ether, IPv6, Raw, raw, wrpcap
from scapy.layers.rip import RIP, RIPEntry

from detector.analysis import analyze
from detector.decode import decode
from detector.detect.detector import AnalysisContext
from detector.rules import load_rules
from detector.site import Site
from detector.stats import CaptureStats
from tests._rules import detector, one_pass_and_halves
from tests.test_decode import make_batch

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
T0 = 1_767_225_600
R1, R2 = ("02:00:5e:40:00:01", "10.40.0.1"), ("02:00:5e:40:00:02", "10.40.0.2")
HOST = ("02:00:5e:40:00:66", "10.40.0.66")
ROUTERS = Site(path="site.yaml", routers=frozenset({"10.40.0.1", "10.40.0.2"}))


def announced(findings) -> dict:
    """rip-announce's findings by speaker identifier."""
    return {f.identifier: f for f in findings if f.rule == "rip-announce"}


def run(path, site=None, rules=None) -> dict:
    return announced(analyze([path], rules, label="test", site=site).findings)


def response(speaker, routes, *, version=2, sport=520, dst="224.0.0.9", vlan=None, mac=None):
    """A RIP response of `speaker` (MAC, IP): (prefix, mask, metric) routes."""
    source_mac, address = speaker
    message = RIP(cmd=2, version=version)
    for prefix, mask, metric in routes:
        message = message / RIPEntry(addr=prefix, mask=mask if version == 2 else "0.0.0.0", metric=metric)
    eth = Ether(src=mac or source_mac, dst="01:00:5e:00:00:09")
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    return eth / IP(src=address, dst=dst, ttl=1) / UDP(sport=sport, dport=520) / message


def ripng(source, entries: bytes, hlim=255, mac="02:00:5e:40:00:06"):
    return (Ether(src=mac, dst="33:33:00:00:00:09") / IPv6(src=source, dst="ff02::9", hlim=hlim)
            / UDP(sport=521, dport=521) / Raw(struct.pack("!BBH", 2, 1, 0) + entries))


def ripng_entry(prefix, plen, metric) -> bytes:
    return struct.pack("!16sHBB", ipaddress.IPv6Address(prefix).packed, 0, plen, metric)


def capture(tmp_path, timed, name="rip.pcap") -> Path:
    packets = []
    for t, pkt in sorted(timed, key=lambda item: item[0]):
        pkt.time = T0 + t
        packets.append(pkt)
    path = tmp_path / name
    wrpcap(str(path), packets)
    return path


def routers(updates=4, r1=(("10.41.0.0", "255.255.0.0", 1),), r2=(("10.42.0.0", "255.255.0.0", 1),)) -> list:
    out = []
    for k in range(updates):
        out += [(k * 30.0, response(R1, r1)), (k * 30.0 + 0.5, response(R2, r2))]
    return out


# ---- the synthetic incidents and near-misses -------------------------------------------------

def test_a_host_announcing_a_default_route_is_route_injection():
    found = run(CAPTURES / "rip-injection.pcapng")
    host = found["10.40.0.66 02:00:5e:40:00:66"]
    assert host.severity == "medium" and host.src_ip == "10.40.0.66" and host.src_mac == "02:00:5e:40:00:66"
    assert "0.0.0.0/0 metric 1 against metric 2 from 10.40.0.1 (02:00:5e:40:00:01)" in host.msg
    assert "joined the RIP exchange 65 s after" in host.msg and "the site file names no routers" in host.msg
    assert host.evidence["undercut"] == [{"prefix": "0.0.0.0/0", "metric": 1, "router": "10.40.0.1 (02:00:5e:40:00:01)",
                                          "router_metric": 2}]
    assert host.n == 4 and host.evidence["authenticated"] == 0 and host.evidence["allowed_router"] is None
    assert {f.severity for key, f in found.items() if key != "10.40.0.66 02:00:5e:40:00:66"} == {"info"}
    # with the routers named in the site file the host is no router: high, and the finding says why
    host = run(CAPTURES / "rip-injection.pcapng", site=ROUTERS)["10.40.0.66 02:00:5e:40:00:66"]
    assert host.severity == "high" and host.evidence["allowed_router"] is False
    assert "not among the site's routers" in host.msg and "announces a default route (0.0.0.0/0 metric 1)" in host.msg
    assert "undercuts allowed routers' metrics" in host.msg and "Not judged" not in host.msg
    frames = host.evidence["evidence_frames"]
    assert frames and all(f > 0 for f in frames) and len(frames) <= 64


def test_metric_16_for_a_live_route_is_poisoning():
    found = run(CAPTURES / "rip-poisoning.pcapng")
    host = found["10.40.0.77 02:00:5e:40:00:77"]
    assert host.severity == "high"
    assert "metric 16 for 10.42.0.0/16, which 10.40.0.2 (02:00:5e:40:00:02) keeps announcing at metric 1" in host.msg
    assert host.evidence["poisoned"] == [{"prefix": "10.42.0.0/16", "metric": 16,
                                          "announced_by": ["10.40.0.2 (02:00:5e:40:00:02)"], "their_metric": 1}]
    spoofer = found["10.40.0.1 02:00:5e:40:00:88"]
    assert spoofer.severity == "high" and "own address from another MAC" in spoofer.msg
    assert "uses the address of 10.40.0.1 (02:00:5e:40:00:01)" in spoofer.msg
    router = found["10.40.0.1 02:00:5e:40:00:01"]
    assert router.severity == "info" and "also used by 02:00:5e:40:00:88 from 72 s on" in router.msg


@pytest.mark.parametrize("name", ["rip-two-routers.pcapng", "rip-withdrawal.pcapng", "rip-routers.pcapng",
                                  "rip-authenticated.pcapng"])
def test_routers_updates_and_withdrawals_are_info(name):
    found = run(CAPTURES / name)
    assert found and {f.severity for f in found.values()} == {"info"}
    assert all("the site file names no routers" in f.msg for f in found.values())


def test_a_routers_withdrawal_and_its_neighbour_passing_it_on():
    found = run(CAPTURES / "rip-withdrawal.pcapng", site=ROUTERS)
    r1, r2 = found["10.40.0.1 02:00:5e:40:00:01"], found["10.40.0.2 02:00:5e:40:00:02"]
    assert r2.severity == r1.severity == "info" and r2.evidence["allowed_router"] is True
    assert r2.evidence["withdrew"] == ["10.42.0.0/16"] and "withdrew 1 route of its own" in r2.msg
    assert r1.evidence["passed_on"] == ["10.42.0.0/16"] and "withdrew" not in r1.evidence


# ---- the real captures the specification names -------------------------------------------------

def test_packetlifes_two_routers_are_info_without_and_medium_with_require_auth(captures_real, tmp_path):
    path = captures_real / "packetlife/pcaps/RIPv2.cap"
    found = run(path)
    assert set(found) == {"10.0.0.1 c2:00:17:23:00:00", "10.0.0.2 c2:01:17:23:00:00"}
    assert {f.severity for f in found.values()} == {"info"}
    assert found["10.0.0.1 c2:00:17:23:00:00"].evidence["reachable_routes"] == 4
    (tmp_path / "rip.yaml").write_text("id: rip-announce\nparams:\n  require_auth: true\n")
    strict = run(path, rules=load_rules(tmp_path))
    assert {f.severity for f in strict.values()} == {"medium"}
    assert all("6 unauthenticated responses where authentication is required" in f.msg for f in strict.values())
    # authenticated routers satisfy it
    assert {f.severity for f in run(CAPTURES / "rip-authenticated.pcapng", rules=load_rules(tmp_path)).values()} == \
        {"info"}


def test_packetlifes_subnet_down_is_a_withdrawal(captures_real):
    found = run(captures_real / "packetlife/pcaps/RIPv1_subnet_down.cap")
    down, other = found["10.0.1.2 c2:01:24:b5:00:00"], found["10.0.1.1 c2:00:24:b5:00:00"]
    assert down.severity == other.severity == "info"
    assert down.evidence["withdrew"] == ["192.168.2.0"]         # RIPv1: no mask on the wire
    assert other.evidence["passed_on"] == ["192.168.2.0"] and "poisoned" not in other.evidence


def test_tcpdumps_rip_captures(captures_real):
    (speaker,) = run(captures_real / "tcpdump/tests/ripv1v2.pcap").values()
    assert speaker.severity == "info" and speaker.evidence["versions"] == ["RIPv1", "RIPv2"]
    assert [r["prefix"] for r in speaker.evidence["routes"]] == ["10.70.178.0", "10.70.178.0/24"]
    # the UDP length leaves 156 bytes of RIP in a 160-byte IP payload: Linux trims the datagram to its UDP
    # length and FRR's rip_read drops a size that is no header plus whole entries; the sixth route's metric is
    # 268,435,457 besides. Malformed: reported apart, context here, no route of it counted
    (faulty,) = run(captures_real / "tcpdump/tests/ripv2-invalid-length.pcap").values()
    assert faulty.severity == "info" and "rejected_because" not in faulty.evidence
    assert faulty.evidence["malformed"]["dropped_whole"] == 1
    assert faulty.evidence["vlan"] == 1080 and faulty.evidence["reachable_routes"] == 0


# ---- the receiver's checks (FRR rip_response_process, ripng_response_process) ----------------------

@pytest.mark.parametrize("packet, reason", [
    (response(HOST, [("10.9.0.0", "255.255.0.0", 1)], sport=5520), "source port not the RIP port"),
    (ripng("2001:db8::6", ripng_entry("2001:db8:9::", 48, 1)), "RIPng source not link-local"),
    (ripng("fe80::6", ripng_entry("2001:db8:9::", 48, 1), hlim=64), "RIPng hop limit not 255"),
])
def test_a_response_from_where_a_receiver_rejects_it_is_medium(tmp_path, packet, reason):
    (f,) = run(capture(tmp_path, [(0.0, packet)])).values()
    assert f.severity == "medium" and any(reason in text for text in f.evidence["rejected_because"]), f.msg
    assert f.evidence["rejected"] == 1


@pytest.mark.parametrize("packet, reason, whole", [
    (response(HOST, [("127.0.0.0", "255.0.0.0", 1)]), "destination no router installs", 0),
    (response(HOST, [("0.1.0.0", "255.255.0.0", 1)]), "destination no router installs", 0),
    (response(HOST, [("224.1.0.0", "255.255.0.0", 1)]), "destination no router installs", 0),
    (response(HOST, [("10.9.1.0", "255.255.0.0", 1)]), "bits outside its mask", 0),
    (response(HOST, [("10.9.0.0", "255.255.0.0", 0)]), "metric outside 1-16", 0),
    (response(HOST, [("10.9.0.0", "255.255.0.0", 17)]), "metric outside 1-16", 0),
    (ripng("fe80::6", ripng_entry("fe80::", 64, 1)), "destination no router installs", 0),
    (ripng("fe80::6", ripng_entry("2001:db8:9::", 129, 1)), "prefix length above 128", 0),
    (Ether(src=HOST[0]) / IP(src=HOST[1], dst="224.0.0.9") / UDP(sport=520, dport=520)
     / Raw(struct.pack("!BBH", 2, 2, 0) + bytes(10)), "length is not a 4-byte header", 1),
])
def test_a_malformed_response_is_context_here_and_low_apart(tmp_path, packet, reason, whole):
    """A route every receiver ignores, or a response it drops whole, changes no routing table: no route of it is
    counted, the speaker's finding mentions it (info), and the malformed message is reported apart at low."""
    findings = analyze([capture(tmp_path, [(0.0, packet)])], None, label="test").findings
    (f,) = announced(findings).values()
    assert f.severity == "info" and f.evidence["reachable_routes"] == 0, f.msg
    assert any(reason in text for text in f.evidence["malformed"]["faults"]), f.msg
    assert f.evidence["malformed"]["dropped_whole"] == whole
    (malformed,) = [g for g in findings if g.rule == "malformed-message"]
    assert malformed.severity == "low" and any(reason in r["reason"] for r in malformed.evidence["reasons"])


def test_what_a_receiver_accepts_is_info(tmp_path):
    packets = [(0.0, response(HOST, [("10.9.0.0", "255.255.0.0", 1), ("0.0.0.0", "255.255.0.0", 3)])),
               (1.0, response(HOST, [("10.9.0.0", "0.0.0.0", 16)], version=1, dst="10.40.0.255")),
               (2.0, ripng("fe80::6", ripng_entry("2001:db8:9::", 48, 1) + ripng_entry("::", 0, 16)))]
    assert {f.severity for f in run(capture(tmp_path, packets)).values()} == {"info"}


def test_a_source_outside_the_sites_local_networks(tmp_path):
    path = capture(tmp_path, [(0.0, response(HOST, [("10.9.0.0", "255.255.0.0", 1)]))])
    local = Site(path="site.yaml", local_networks=(ipaddress.ip_network("10.40.0.0/24"),))
    assert [f.severity for f in run(path, site=local).values()] == ["info"]
    elsewhere = Site(path="site.yaml", local_networks=(ipaddress.ip_network("10.50.0.0/24"),))
    (f,) = run(path, site=elsewhere).values()
    assert f.severity == "medium" and "source not on a local network of the site" in f.evidence["rejected_because"]


# ---- thresholds, each with its neighbour ---------------------------------------------------------

@pytest.mark.parametrize("joins_at, severity", [(29.9, "info"), (30.0, "medium")])
def test_a_speaker_joins_late_after_one_update_interval(tmp_path, joins_at, severity):
    packets = [*routers(r1=(("0.0.0.0", "0.0.0.0", 2),)), (joins_at, response(HOST, [("0.0.0.0", "0.0.0.0", 1)]))]
    assert run(capture(tmp_path, packets))["10.40.0.66 02:00:5e:40:00:66"].severity == severity


@pytest.mark.parametrize("metric, extra, severity", [
    (1, (), "medium"),                                     # undercuts 10.41.0.0/16 metric 2
    (2, (), "info"),                                       # the same metric takes nothing over
    (1, (("10.77.0.0", "255.255.0.0", 1),), "info"),       # a router that joins with routes of its own
])
def test_a_late_speaker_takes_over_only_with_better_metrics_alone(tmp_path, metric, extra, severity):
    packets = routers(r1=(("10.41.0.0", "255.255.0.0", 2),))
    packets += [(45.0, response(HOST, [("10.41.0.0", "255.255.0.0", metric), *extra]))]
    assert run(capture(tmp_path, packets))["10.40.0.66 02:00:5e:40:00:66"].severity == severity


@pytest.mark.parametrize("last_update_s, severity", [(0.0, "info"), (1.0, "high"), (182.0, "high")])
def test_poisoning_needs_a_route_still_alive_within_the_route_timeout(tmp_path, last_update_s, severity):
    # R2 announces 10.42.0.0/16 once, at `last_update_s`; the host sends metric 16 for it at 181 s: 181 s after
    # the announcement the route has timed out (RFC 2453: 180 s), 180 s after it has not, and an announcement
    # after the poison contradicts it
    packets = [(last_update_s, response(R2, [("10.42.0.0", "255.255.0.0", 1)])),
               (181.0, response(HOST, [("10.42.0.0", "255.255.0.0", 16)]))]
    assert run(capture(tmp_path, packets))["10.40.0.66 02:00:5e:40:00:66"].severity == severity


def test_poisoned_reverse_between_routers_is_low_without_the_site_and_info_with_it(tmp_path):
    # R2 sends metric 16 for R1's route back to it (split horizon with poisoned reverse) beside its own route
    packets = routers(r2=(("10.42.0.0", "255.255.0.0", 1), ("10.41.0.0", "255.255.0.0", 16)))
    path = capture(tmp_path, packets)
    r2 = run(path)["10.40.0.2 02:00:5e:40:00:02"]
    assert r2.severity == "low" and "poisoned reverse or poisoning" in r2.msg
    assert run(path, site=ROUTERS)["10.40.0.2 02:00:5e:40:00:02"].severity == "info"
    only_r1 = Site(path="site.yaml", routers=frozenset({"10.40.0.1"}))
    found = run(path, site=only_r1)["10.40.0.2 02:00:5e:40:00:02"]
    assert found.severity == "high" and "not among the site's routers" in found.msg


def test_routers_named_by_mac_and_speakers_on_another_vlan(tmp_path):
    by_mac = Site(path="site.yaml", routers=frozenset({R1[0], R2[0]}))
    packets = [*routers(), (40.0, response(HOST, [("10.41.0.0", "255.255.0.0", 16)], vlan=30))]
    found = run(capture(tmp_path, packets), site=by_mac)
    assert found["10.40.0.1 02:00:5e:40:00:01"].severity == "info"
    host = found["10.40.0.66 02:00:5e:40:00:66"]
    # on VLAN 30 nobody announces 10.41.0.0/16: no poisoning, only a speaker that is no router
    assert host.severity == "medium" and host.evidence["vlan"] == 30 and "poisoned" not in host.evidence


# ---- state: merging partitions, bounds -------------------------------------------------------------

def _detector():
    return detector("rip-announce", ROUTERS)


def test_two_halves_merged_give_one_pass():
    one, merged = one_pass_and_halves(CAPTURES / "rip-poisoning.pcapng", _detector)
    assert merged == one
    assert {f["severity"] for f in one} == {"high", "info"}


def test_a_flood_of_prefixes_keeps_the_first_routes_and_counts_the_rest(tmp_path, monkeypatch):
    import detector.detectors.rip_announce as rule
    monkeypatch.setattr(rule, "MAX_ROUTES", 10)
    packets = [(k * 0.01, response(HOST, [(f"10.{k}.{j}.0", "255.255.255.0", 1) for j in range(5)]))
               for k in range(6)]
    (f,) = run(capture(tmp_path, packets)).values()
    assert f.evidence["routes_total"] == 10 and f.evidence["not_kept"] == {"routes": 20, "speakers": 0}
    assert [r["prefix"] for r in f.evidence["routes"]][:5] == [f"10.0.{j}.0/24" for j in range(5)]


SHAPES = [raw(response(HOST, [("0.0.0.0", "0.0.0.0", 1), ("10.41.0.0", "255.255.0.0", 16)], vlan=30)),
          raw(response(R1, [("10.41.0.0", "0.0.0.0", 2)], version=1)),
          raw(ripng("fe80::6", ripng_entry("2001:db8:9::", 48, 1) + ripng_entry("fe80::9", 0, 0xFF)))]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(range(len(SHAPES))), st.integers(0, 120), st.integers(0, 255)),
                min_size=1, max_size=12))
def test_damaged_responses_are_judged_never_crash(edits):
    # bytes of several responses overwritten (lengths, counts, families, metrics, addresses), then one batch
    frames = [bytearray(shape) for shape in SHAPES]
    for which, where, value in edits:
        frames[which][14 + where % (len(frames[which]) - 14)] = value
    detector = _detector()
    detector.update(decode(make_batch([(1, bytes(frame)) for frame in frames])))
    for finding in detector.findings(AnalysisContext(flows=None, stats=CaptureStats())):
        assert finding.severity in ("info", "low", "medium", "high") and len(finding.evidence["evidence_frames"]) <= 64

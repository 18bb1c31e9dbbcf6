"""rogue-ra on real bytes: rogue routers and spoofed "kill router" RAs, their near-misses, the site's routers."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.all import Dot1Q, Ether, IPv6, raw, wrpcap
from scapy.layers.inet6 import (
    ICMPv6ND_RA,
    ICMPv6NDOptMTU,
    ICMPv6NDOptPrefixInfo,
    ICMPv6NDOptRDNSS,
    ICMPv6NDOptSrcLLAddr,
)

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
ROUTER = ("02:00:5e:60:00:01", "fe80::1")
OTHER = ("02:00:5e:60:00:02", "fe80::2")
ROGUE = ("02:00:5e:60:00:66", "fe80::66")
KILLER = "02:00:5e:60:00:77"
PREFIX, DNS = "2001:db8:60:1::", "2001:db8:60:1::53"
R_ID, ROGUE_ID, KILLER_ID = "fe80::1 02:00:5e:60:00:01", "fe80::66 02:00:5e:60:00:66", "fe80::1 02:00:5e:60:00:77"


def site(*routers) -> Site:
    return Site(path="site.yaml", routers=frozenset(routers))


def found(path, site=None) -> dict:
    """rogue-ra's findings by router identifier."""
    return {f.identifier: f for f in analyze([path], load_rules(), label="test", site=site).findings
            if f.rule == "rogue-ra"}


def ra(source=ROUTER, prefixes=(PREFIX,), dns=(DNS,), lifetime=1800, managed=0, other=0, prf=0, mtu=1500,
       hlim=255, mac=None, lladdr=None, vlan=None, chlim=64):
    source_mac, address = source
    message = ICMPv6ND_RA(chlim=chlim, M=managed, O=other, prf=prf, routerlifetime=lifetime)
    message = message / ICMPv6NDOptSrcLLAddr(lladdr=lladdr or source_mac)
    if mtu:
        message = message / ICMPv6NDOptMTU(mtu=mtu)
    for prefix in prefixes:
        message = message / ICMPv6NDOptPrefixInfo(prefix=prefix, prefixlen=64, validlifetime=86400,
                                                  preferredlifetime=14400)
    if dns:
        message = message / ICMPv6NDOptRDNSS(lifetime=1800, dns=list(dns))
    eth = Ether(src=mac or source_mac, dst="33:33:00:00:00:01")
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    return eth / IPv6(src=address, dst="ff02::1", hlim=hlim) / message


def capture(tmp_path, timed, name="ra.pcap") -> Path:
    packets = []
    for t, pkt in sorted(timed, key=lambda item: item[0]):
        pkt.time = T0 + t
        packets.append(pkt)
    path = tmp_path / name
    wrpcap(str(path), packets)
    return path


def periodic(every=20.0, until=180.0, **kwargs) -> list:
    return [(k * every, ra(**kwargs)) for k in range(int(until // every) + 1)]


# ---- the synthetic incidents and near-misses -------------------------------------------------

def test_a_rogue_router_beside_the_links_router():
    routers = found(CAPTURES / "nd-rogue-router.pcapng")
    rogue = routers[ROGUE_ID]
    assert rogue.severity == "medium" and rogue.src_ip == "fe80::66" and rogue.src_mac == "02:00:5e:60:00:66"
    assert "appeared 65.0 s after fe80::1 (02:00:5e:60:00:01)" in rogue.msg
    assert "(2001:db8:bad:1::/64, 2001:db8:bad:1::53)" in rogue.msg
    assert "the site file names no routers" in rogue.msg
    assert rogue.evidence["prefixes"][0]["prefix"] == "2001:db8:bad:1::/64"
    assert rogue.evidence["dns"] == ["2001:db8:bad:1::53"] and rogue.evidence["allowed_router"] is None
    assert rogue.n == 20 and 0 < len(rogue.evidence["evidence_frames"]) <= 64
    assert routers[R_ID].severity == "info"
    # the site's routers name R: the rogue is high, R info, and nothing is left unjudged
    listed = found(CAPTURES / "nd-rogue-router.pcapng", site=site("fe80::1", "02:00:5e:60:00:01"))
    assert listed[ROGUE_ID].severity == "high" and listed[ROGUE_ID].evidence["allowed_router"] is False
    assert "not among the site's routers (its link-local fe80::66 and its MAC 02:00:5e:60:00:66 not listed)" in \
        listed[ROGUE_ID].msg
    assert listed[R_ID].severity == "info" and "Not judged" not in listed[R_ID].msg


def test_a_spoofed_kill_router():
    routers = found(CAPTURES / "nd-kill-router.pcapng")
    killer = routers[KILLER_ID]
    assert killer.severity == "high" and killer.src_mac == KILLER
    assert "30 RAs of router lifetime 0 for fe80::1, which 02:00:5e:60:00:01 advertises with lifetime 1,800 s" \
        in killer.msg and "kill router" in killer.msg
    router = routers[R_ID]
    assert router.severity == "info" and "used by 02:00:5e:60:00:77 in RAs of router lifetime 0" in router.msg
    # the spoofed link-local is listed, not the killer's MAC: still high, for both reasons
    killer = found(CAPTURES / "nd-kill-router.pcapng", site=site("fe80::1", "02:00:5e:60:00:01"))[KILLER_ID]
    assert killer.severity == "high" and "its MAC 02:00:5e:60:00:77 not listed" in killer.msg
    assert "kill router" in killer.msg


@pytest.mark.parametrize("listed", [(), ("fe80::1",), ("02:00:5e:60:00:01",), ("fe80::1", "02:00:5e:60:00:01")])
def test_the_links_router_alone_is_info_with_and_without_the_site(listed):
    routers = found(CAPTURES / "nd-router.pcapng", site=site(*listed) if listed else None)
    assert list(routers) == [R_ID] and routers[R_ID].severity == "info"
    assert routers[R_ID].n == 11 and ("the site file names no routers" in routers[R_ID].msg) == (not listed)


@pytest.mark.parametrize("listed", [("fe80::2",), ("02:00:5e:60:00:02",), ("10.40.0.1",)])
def test_a_router_the_site_does_not_list_is_high(listed):
    (router,) = found(CAPTURES / "nd-router.pcapng", site=site(*listed)).values()
    assert router.severity == "high" and "not among the site's routers" in router.msg


def test_a_restarting_router_is_info():
    (router,) = found(CAPTURES / "nd-router-restart.pcapng").values()
    assert router.severity == "info" and router.evidence["lifetime_zero"] == 3
    assert "stopped being a default router (lifetime 0) at 2026-01-01T00:01:20" in router.msg
    assert "then advertised again (a restart)" in router.msg


# ---- the real captures the specification names -------------------------------------------------

def test_suricatas_kill_router_capture_is_high(captures_real):
    path = captures_real / "suricata-verify/tests/ipv6-evasion/ipv6-kill-router-gateway/kill_router6.pcap"
    routers = found(path)
    killer = routers["fe80::6600:6aff:fe5b:8eb3 00:50:b6:19:e6:50"]
    assert killer.severity == "high" and killer.evidence["lifetime_zero"] == 4
    assert "which 64:00:6a:5b:8e:b3 advertises with lifetime 30 s" in killer.msg
    assert killer.evidence["evidence_frames"] == [5, 6, 17, 20, 21]       # its RAs and the router's
    assert routers["fe80::6600:6aff:fe5b:8eb3 64:00:6a:5b:8e:b3"].severity == "info"


def test_zeeks_router_advert_with_m_and_not_o_is_low(captures_real):
    (router,) = found(captures_real / "zeek/testing/btest/Traces/icmp/icmp6-router-advert.pcap").values()
    assert router.severity == "low" and "M=1 and O=0" in router.msg


def test_networklessons_router_leaving_is_info(captures_real):
    path = captures_real / "networklessons/packet-captures/ipv6-router-advertisement-leaving.pcapng"
    (router,) = found(path).values()
    assert router.severity == "info" and "stopped being a default router (lifetime 0)" in router.msg
    assert "a restart" not in router.msg and router.evidence["prefixes"][0]["prefix"] == "2001:db8:123:123::/64"


def test_an_ra_from_off_the_link_is_discarded_by_hosts(captures_real):
    # packetlife's 6in4 capture: an RA tunnelled with hop limit below 255
    (router,) = found(captures_real / "packetlife/pcaps/6in4-linklocal-hlimit-less255.pcapng.cap").values()
    assert router.severity == "info" and "hosts discard its RA (hop limit not 255" in router.msg


# ---- what makes a finding low, and what keeps it below medium ------------------------------------------

def test_m_without_o_parameter_changes_and_a_foreign_link_layer_address_are_low(tmp_path):
    packets = [(0.0, ra(managed=1)), (20.0, ra(lifetime=600)), (40.0, ra(lifetime=600, prefixes=(PREFIX,
                                                                                                   "2001:db8:61::"))),
               (60.0, ra(lifetime=600, mtu=1400, lladdr="02:00:5e:60:00:99"))]
    (router,) = found(capture(tmp_path, packets)).values()
    assert router.severity == "low"
    assert "1 RA with M=1 and O=0" in router.msg
    assert "router lifetime 1,800 s -> 600 s" in router.msg and "MTU 1,500 -> 1,400" in router.msg
    assert "flags M=1 O=0 preference medium -> M=0 O=0 preference medium" in router.msg
    assert "announced added 2001:db8:61::/64" in router.msg
    assert "names 02:00:5e:60:00:99, not the Ethernet source 02:00:5e:60:00:01" in router.msg
    assert len(router.evidence["parameter_sets"]) == 4


def test_the_same_router_repeating_itself_is_no_change(tmp_path):
    (router,) = found(capture(tmp_path, periodic(every=1.0, until=99.0))).values()
    assert router.severity == "info" and len(router.evidence["parameter_sets"]) == 1 and router.n == 100
    # its evidence: the first and last of its RAs
    assert router.evidence["evidence_frames"] == [*range(1, 17), *range(85, 101)]


def test_a_second_router_announcing_the_same_is_info(tmp_path):
    packets = periodic() + [(50.0 + 20 * k, ra(OTHER)) for k in range(5)]
    routers = found(capture(tmp_path, packets))
    assert {f.severity for f in routers.values()} == {"info"}


@pytest.mark.parametrize("second, severity", [
    ({"prefixes": ("2001:db8:bad::",)}, "medium"),      # another prefix
    ({"dns": ("2001:db8:bad::53",)}, "medium"),         # another DNS server
    ({"prefixes": (), "dns": ()}, "info"),              # no prefix, no DNS server: nothing of its own
    ({"prefixes": ("2001:db8:bad::",), "hlim": 64}, "info"),   # hosts discard it
    ({"prefixes": ("2001:db8:bad::",), "vlan": 30}, "info"),   # another link
])
def test_a_second_router_is_medium_only_with_prefixes_or_dns_of_its_own_on_the_same_link(tmp_path, second, severity):
    packets = periodic() + [(50.0 + 20 * k, ra(OTHER, **second)) for k in range(5)]
    routers = found(capture(tmp_path, packets))
    other = next(f for key, f in routers.items() if key.startswith("fe80::2"))
    assert other.severity == severity and routers[R_ID].severity == "info"


def test_a_router_replacing_one_that_withdrew_is_no_second_router(tmp_path):
    packets = periodic(until=60.0) + [(61.0, ra(lifetime=0))] + [(80.0 + 20 * k, ra(OTHER, prefixes=(
        "2001:db8:62::",))) for k in range(5)]
    routers = found(capture(tmp_path, packets))
    assert {f.severity for f in routers.values()} == {"info"}


def test_lifetime_zero_alone_is_info_and_from_another_mac_high(tmp_path):
    alone = found(capture(tmp_path, [(0.0, ra(lifetime=0, prefixes=(), dns=())), (3.0, ra(lifetime=0))]))
    assert [f.severity for f in alone.values()] == ["info"]
    assert "hosts do not take it as a default router" in next(iter(alone.values())).msg
    # the spoofed RAs come first: the router's own RA a minute later still gives them away
    spoofed = found(capture(tmp_path, [(0.0, ra(lifetime=0, mac=KILLER, lladdr=KILLER)), (60.0, ra())], "k.pcap"))
    assert spoofed[KILLER_ID].severity == "high" and spoofed[R_ID].severity == "info"


def test_a_site_of_macs_and_addresses_needs_both(tmp_path):
    path = capture(tmp_path, periodic(until=40.0))
    both = site("fe80::1", "02:00:5e:60:00:02")       # R's address with another router's MAC
    (router,) = found(path, site=both).values()
    assert router.severity == "high" and "its MAC 02:00:5e:60:00:01 not listed" in router.msg
    assert "link-local" not in router.msg.split("not among")[1].split(")")[0]


# ---- state: merging partitions, bounds, damage ---------------------------------------------------------

def _detector(site_=None):
    return detector("rogue-ra", site_)


def test_two_halves_merged_give_one_pass():
    one, merged = one_pass_and_halves(CAPTURES / "nd-kill-router.pcapng", _detector)
    assert merged == one
    assert {f["severity"] for f in one} == {"high", "info"}


def test_a_flood_of_routers_keeps_the_first_and_counts_the_rest(tmp_path, monkeypatch):
    import detector.detectors.rogue_ra as rule
    monkeypatch.setattr(rule, "MAX_ROUTERS", 3)
    packets = [(k * 0.01, ra((f"02:00:5e:61:00:{k:02x}", f"fe80::61:{k:x}"), prefixes=(f"2001:db8:{k:x}::",)))
               for k in range(8)]
    routers = found(capture(tmp_path, packets))
    assert len(routers) == 3 and all(f.evidence["not_kept"]["routers"] == 5 for f in routers.values())
    assert sorted(f.src_ip for f in routers.values()) == ["fe80::61:0", "fe80::61:1", "fe80::61:2"]


SHAPES = [raw(ra()), raw(ra(ROGUE, prefixes=("2001:db8:bad::", "2001:db8:bad:1::"), lifetime=0, vlan=30)),
          raw(ra(managed=1, mtu=0, dns=("2001:db8::1", "2001:db8::2")))]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(range(len(SHAPES))), st.integers(0, 200), st.integers(0, 255)),
                min_size=1, max_size=12))
def test_damaged_advertisements_are_judged_never_crash(edits):
    # bytes of several RAs overwritten (lengths, option types and lengths, flags, addresses), then one batch
    frames = [bytearray(shape) for shape in SHAPES]
    for which, where, value in edits:
        frames[which][14 + where % (len(frames[which]) - 14)] = value
    detector = _detector(site("fe80::1"))
    detector.update(decode(make_batch([(1, bytes(frame)) for frame in frames])))
    for f in detector.findings(AnalysisContext(flows=None, stats=CaptureStats())):
        assert f.severity in ("info", "low", "medium", "high") and len(f.evidence["evidence_frames"]) <= 64


def test_what_a_discarded_ra_announces_is_not_the_routers(tmp_path):
    packets = [*periodic(until=60.0), (30.0, ra(prefixes=("2001:db8:bad::",), hlim=64))]
    (router,) = found(capture(tmp_path, packets)).values()
    assert router.severity == "info" and router.n == 5 and router.evidence["discarded"] == 1
    assert [p["prefix"] for p in router.evidence["prefixes"]] == ["2001:db8:60:1::/64"]
    assert "1 more RA that hosts discard (hop limit not 255" in router.msg


def test_a_router_replaced_by_another_box_with_its_link_local_is_no_kill(tmp_path):
    # the old box withdraws (lifetime 0 from its own MAC), the new one takes over fe80::1 with another MAC
    packets = [*periodic(until=60.0), *[(61.0 + k, ra(lifetime=0)) for k in range(3)],
               *[(90.0 + 20 * k, ra(mac="02:00:5e:60:00:11", lladdr="02:00:5e:60:00:11")) for k in range(4)]]
    routers = found(capture(tmp_path, packets))
    assert {f.severity for f in routers.values()} == {"info"}
    assert "then advertised again" not in routers[R_ID].msg and "stopped being a default router" in routers[R_ID].msg


def test_explain_and_the_live_alert_interval():
    from detector.rules import explain_text

    rule = load_rules()["rogue-ra"]
    text = explain_text(rule)
    assert "\nParameters\n  None: what it judges by is fixed by the protocol and the site file.\n" in text
    assert rule.suppress_s == 60.0       # seed 004: illegal_server_log_suppress_duration 1min

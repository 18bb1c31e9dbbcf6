"""ip-mac-binding on real bytes: pairs against the site's registry, its pools and routers, and its near-misses."""
from __future__ import annotations

import ipaddress
from pathlib import Path

import numpy as np
import pytest
from scapy.all import (
    ARP,
    BOOTP,
    DHCP,
    IP,
    UDP,
    Dot1Q,
    Ether,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptSrcLLAddr,
    IPv6,
    wrpcap,
)

from detector.analysis import analyze
from detector.decode import decode
from detector.detect.detector import AnalysisContext
from detector.ingest import read_captures
from detector.rules import explain_text, load_rules
from detector.schema import PacketBatch
from detector.site import Binding, Site, load_site, parse_mac
from detector.stats import CaptureStats
from tests._rules import detector, one_pass_and_halves

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
T0 = 1_767_225_600
A = ("02:00:00:00:00:0a", "10.9.0.10")
B = ("02:00:00:00:00:0b", "10.9.0.11")
C = ("02:00:00:00:00:0c", "10.9.0.12")
STRANGER = "02:00:00:00:00:66"
BROADCAST = "ff:ff:ff:ff:ff:ff"


def registry(*pairs, pools=(), routers=(), vlan=None, local=()) -> Site:
    bindings = tuple(Binding(parse_mac(mac), ip, vlan, f"site.yaml:{k}") for k, (mac, ip) in enumerate(pairs, 1))
    pools = tuple((ipaddress.IPv4Address(a), ipaddress.IPv4Address(b)) for a, b in pools)
    given = {"bindings", "dynamic_pools", *(["routers"] if routers else []), *(["local_networks"] if local else [])}
    return Site(path="site.yaml", bindings=bindings, dynamic_pools=pools, routers=frozenset(routers),
                local_networks=tuple(ipaddress.ip_network(net) for net in local), keys_given=frozenset(given))


SITE = registry(A, B, C, pools=[("10.9.0.100", "10.9.0.199")])


def bindings(findings) -> dict:
    return {f.identifier: f for f in findings if f.rule == "ip-mac-binding"}


def run(path, site=SITE) -> dict:
    return bindings(analyze([path], None, label="test", site=site).findings)


def request(asker, ip, vlan=None):
    eth = Ether(src=asker[0], dst=BROADCAST)
    eth = eth / Dot1Q(vlan=vlan) if vlan else eth
    return eth / ARP(op=1, hwsrc=asker[0], psrc=asker[1], hwdst="00:00:00:00:00:00", pdst=ip)


def reply(sender, target):
    return Ether(src=sender[0], dst=target[0]) / ARP(op=2, hwsrc=sender[0], psrc=sender[1], hwdst=target[0],
                                                     pdst=target[1])


def datagram(source, dest_ip, dest_mac=C[0], vlan=None):
    eth = Ether(src=source[0], dst=dest_mac)
    eth = eth / Dot1Q(vlan=vlan) if vlan else eth
    return eth / IP(src=source[1], dst=dest_ip) / UDP(sport=5000, dport=53)


def capture(tmp_path, timed, name="pairs.pcap") -> Path:
    packets = []
    for t, pkt in sorted(timed, key=lambda item: item[0]):
        pkt.time = T0 + t
        packets.append(pkt)
    path = tmp_path / name
    wrpcap(str(path), packets)
    return path


# ---- the real capture the specification names ------------------------------------------------------

def test_lucaderis_spoofer_against_the_registry_is_two_highs(captures_real, tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text('bindings:\n  - {mac: "dc:f5:05:75:0b:cd", ip: 10.0.0.153}\n'
                    '  - {mac: "b0:7f:b9:4e:f0:9c", ip: 10.0.0.157}\n')
    path = captures_real / "lucaderi-sgr/2022/Favilli/tests/na-arpSpoofing.pcap"
    found = run(path, site=load_site(site))
    assert set(found) == {"10.0.0.153 00:e0:4d:3c:25:7b", "10.0.0.157 00:e0:4d:3c:25:7b"}
    assert {f.severity for f in found.values()} == {"high"}
    f = found["10.0.0.153 00:e0:4d:3c:25:7b"]
    assert f.evidence["registered_macs"] == ["dc:f5:05:75:0b:cd"] and f.evidence["unsolicited_replies"] == 18
    assert f.evidence["binding_sources"] == ["site.yaml:2"]
    assert "claims 10.0.0.153, registered to dc:f5:05:75:0b:cd, in ARP (18x ARP reply) while the registered MAC is " \
           "active" in f.msg
    # without bindings the rule is silent, and explain says why
    assert run(path, site=None) == {}
    explained = " ".join(explain_text(load_rules()["ip-mac-binding"]).split())
    assert "without them the rule keeps no state and reports" in explained


# ---- the campus captures, read with their site file ----------------------------------------------------

def campus(name: str) -> dict:
    return run(CAPTURES / name, site=load_site(CAPTURES / f"{name.split('.')[0]}.site.yaml"))


def test_the_campus_man_in_the_middle():
    found = campus("arp-spoof-mitm.pcapng")
    assert set(found) == {"10.160.0.254 02:a0:00:01:00:42", "10.160.1.10 02:a0:00:01:00:42"}
    assert {f.severity for f in found.values()} == {"high"}
    alice = found["10.160.1.10 02:a0:00:01:00:42"]
    # the relayed traffic counts as use of Alice's address; the relayed off-net sources do not
    assert alice.evidence["observations"] == {"ARP reply": 40, "IPv4 source": 24}
    assert "The registry binds 02:a0:00:01:00:42 to 10.160.1.66." in alice.msg
    assert alice.evidence["binding_sources"] == ["campus.ethers:3", "campus.ethers:7"]


def test_a_replaced_nic_announcing_a_registered_address_is_high():
    # issue 27: an unregistered MAC probing, announcing and using a registered address whose owner is gone is
    # what the registry is for (its switches would drop the frames); the message names the stale registry
    (f,) = campus("arp-campus-nic-change.pcapng").values()
    assert f.severity == "high" and f.identifier == "10.160.1.12 02:a0:00:01:00:c2"
    assert "after the registered MAC was last seen (2026-01-01T00:01:50.000400Z): a replaced NIC or a stale " \
           "registry if it is the same host" in f.msg


def test_the_campus_dhcp_server_leasing_a_registered_address_to_a_stranger_is_high():
    # the pool host's lease (frame 5) is as it should be; Bob's address leased to a stranger (frame 6) is not
    (f,) = campus("arp-dhcp-registered-ack.pcapng").values()
    assert f.severity == "high" and f.identifier == "10.160.1.11 02:b0:00:00:00:99"
    assert f.evidence["observations"] == {"DHCP ACK": 1} and f.evidence["evidence_frames"] == [6]
    assert "was leased 10.160.1.11, registered to 02:a0:00:01:00:0b, by a DHCP server (1 ACK)" in f.msg


@pytest.mark.parametrize("name", ["arp-vrrp-failover.pcapng", "arp-proxy-router.pcapng", "arp-dynamic-pool.pcapng",
                                  "arp-nd-spoof.pcapng", "arp-nd-nic-change.pcapng", "arp-nd-near-misses.pcapng"])
def test_a_virtual_router_proxy_arp_and_the_pool_are_no_finding(name):
    assert campus(name) == {}


# ---- the judgements, each with its neighbour ------------------------------------------------------------

def test_a_registered_address_used_by_another_mac(tmp_path):
    # the stranger uses B's address in traffic while B is active: medium; claims it in a reply: high
    traffic = [(0.0, request(B, A[1])), (1.0, datagram((STRANGER, B[1]), A[1])), (2.0, request(B, C[1]))]
    (f,) = run(capture(tmp_path, traffic)).values()
    assert f.severity == "medium" and f.identifier == f"{B[1]} {STRANGER}"
    assert "while the registered MAC is active" in f.msg
    claim = [*traffic, (1.5, reply((STRANGER, B[1]), A))]
    (f,) = run(capture(tmp_path, claim, name="claim.pcap")).values()
    assert f.severity == "high"


def test_an_absent_owners_address_claimed_is_high_used_is_medium(tmp_path):
    asked = [(0.9, request(A, B[1])), (1.0, reply((STRANGER, B[1]), A))]
    (f,) = run(capture(tmp_path, asked)).values()
    assert f.severity == "high" and "while the registered MAC never appears in the capture" in f.msg
    unasked = [(1.0, reply((STRANGER, B[1]), A))]
    (f,) = run(capture(tmp_path, unasked, name="unasked.pcap")).values()
    assert f.severity == "high" and "1 replies unsolicited" in f.msg
    used = [(1.0, request((STRANGER, B[1]), A[1])), (2.0, datagram((STRANGER, B[1]), A[1]))]
    (f,) = run(capture(tmp_path, used, name="used.pcap")).values()
    assert f.severity == "medium" and "uses 10.9.0.11, registered to 02:00:00:00:00:0b" in f.msg


@pytest.mark.parametrize("source, severity", [(A[0], "low"), ("02:00:00:00:00:1a", "high")])
def test_a_corrupted_copy_of_the_owner_is_no_other_host(tmp_path, source, severity):
    # A answers every 5 s; one reply names 02:00:00:00:00:1a (one bit from A): from A's own Ethernet source it is
    # A's frame with a bit error, from its own source another host
    packets = [(5.0 * k, reply(A, C)) for k in range(12)] + [(12.5, Ether(src=source, dst=C[0]) / ARP(
        op=2, hwsrc="02:00:00:00:00:1a", psrc=A[1], hwdst=C[0], pdst=C[1]))]
    (f,) = run(capture(tmp_path, packets)).values()
    assert f.severity == severity and f.identifier == f"{A[1]} 02:00:00:00:00:1a"
    assert ("likely corrupted copies of 02:00:00:00:00:0a, not other hosts" in f.msg) is (severity == "low")


@pytest.mark.parametrize("address, severity", [("10.9.0.50", "medium"), ("10.9.0.150", "low")])
def test_a_registered_mac_using_another_address(tmp_path, address, severity):
    (f,) = run(capture(tmp_path, [(0.0, request((A[0], address), C[1]))])).values()
    assert f.severity == severity and f"while the registry binds it to {A[1]}" in f.msg


def test_unregistered_hosts_outside_the_pool_are_one_low_finding(tmp_path):
    timed = [(0.0, request(("02:00:00:00:01:01", "10.9.0.60"), C[1])),
             (1.0, request(("02:00:00:00:01:02", "10.9.0.61"), C[1])),
             (2.0, request(("02:00:00:00:01:03", "10.9.0.160"), C[1]))]        # in the pool
    (f,) = run(capture(tmp_path, timed)).values()
    assert f.severity == "low" and f.evidence["pairs_total"] == 2
    assert [p["ip"] for p in f.evidence["pairs"]] == ["10.9.0.60", "10.9.0.61"]


def test_link_local_and_zero_addresses_are_not_judged(tmp_path):
    timed = [(0.0, request((STRANGER, "169.254.7.7"), C[1])), (1.0, request((STRANGER, "0.0.0.0"), C[1]))]
    assert run(capture(tmp_path, timed)) == {}


@pytest.mark.parametrize("sources, judged", [(15, True), (16, False)])
def test_a_mac_sourcing_sixteen_addresses_is_a_router(tmp_path, sources, judged):
    # a router forwards traffic of other local hosts, A's among them, with its own MAC
    router = "02:00:00:00:00:fe"
    timed = [(0.0, request(A, C[1]))]
    timed += [(1.0 + k, datagram((router, f"10.9.0.{10 + k}"), C[1])) for k in range(sources)]
    site = registry(A, B, C, local=["10.9.0.0/24"])
    assert (f"{A[1]} {router}" in run(capture(tmp_path, timed), site=site)) is judged


def test_a_mac_sourcing_an_off_net_address_is_a_router(tmp_path):
    router = "02:00:00:00:00:fe"
    timed = [(0.0, request(A, C[1])), (1.0, datagram((router, A[1]), C[1]))]
    assert f"{A[1]} {router}" in run(capture(tmp_path, timed))
    timed.append((2.0, datagram((router, "192.0.2.7"), C[1])))
    assert run(capture(tmp_path, timed, name="off-net.pcap")) == {}


def test_site_routers_by_address_through_the_registry(tmp_path):
    router = ("02:00:00:00:00:fe", "10.9.0.1")
    timed = [(0.0, request(A, C[1])), (1.0, datagram((router[0], A[1]), C[1]))]
    path = capture(tmp_path, timed)
    site = registry(A, B, C, router, routers={"10.9.0.1"})
    assert run(path, site=site) == {}
    assert f"{A[1]} {router[0]}" in run(path, site=registry(A, B, C, router))


def test_a_binding_holds_in_its_vlan(tmp_path):
    site = registry(A, vlan=20)
    timed = [(0.0, request((STRANGER, A[1]), C[1], vlan=30)), (1.0, request((STRANGER, A[1]), C[1], vlan=20))]
    found = run(capture(tmp_path, timed), site=site)
    # on VLAN 30 A's address is nobody's (an unregistered pair); on VLAN 20 it is A's, used by another MAC
    assert len(found) == 2 and found["unregistered on VLAN 30"].severity == "low"
    assert found[f"{A[1]} {STRANGER}"].evidence["vlan"] == 20 and found[f"{A[1]} {STRANGER}"].severity == "medium"


# ---- state ---------------------------------------------------------------------------------------------------

# ---- DHCP ACKs -----------------------------------------------------------------------------------------

SERVER = ("02:00:00:00:00:fe", "10.9.0.254")


def ack(client_mac, yiaddr, giaddr="0.0.0.0", vlan=None, msg="ack"):
    eth = Ether(src=SERVER[0], dst=BROADCAST)
    eth = eth / Dot1Q(vlan=vlan) if vlan else eth
    return (eth / IP(src=SERVER[1], dst="255.255.255.255") / UDP(sport=67, dport=68)
            / BOOTP(op=2, xid=7, yiaddr=yiaddr, giaddr=giaddr,
                    chaddr=bytes.fromhex(client_mac.replace(":", "")) + bytes(10))
            / DHCP(options=[("message-type", msg), ("server_id", SERVER[1]), "end"]))


@pytest.mark.parametrize("msg, severity", [("ack", "high"), ("offer", None)])
def test_a_dhcp_ack_of_a_registered_address_to_another_mac_is_high(tmp_path, msg, severity):
    found = run(capture(tmp_path, [(0.0, ack(STRANGER, B[1], msg=msg))]))
    assert {f.severity for f in found.values()} == ({severity} if severity else set())


@pytest.mark.parametrize("address, severity", [("10.9.0.50", "high"), ("10.9.0.150", "low"), (A[1], None)])
def test_a_dhcp_ack_to_a_registered_mac_of_another_address(tmp_path, address, severity):
    # outside the pools: the host block says otherwise (high); a pool address: low; its own: nothing
    found = run(capture(tmp_path, [(0.0, ack(A[0], address))]))
    assert {f.severity for f in found.values()} == ({severity} if severity else set())


def test_a_relayed_ack_is_held_against_every_vlan(tmp_path):
    # B is bound on VLAN 10; the relayed ACK is captured on the server's VLAN 99: its link is unknown
    site = registry(B, vlan=10)
    (f,) = run(capture(tmp_path, [(0.0, ack(STRANGER, B[1], giaddr="10.9.0.1", vlan=99))]), site=site).values()
    assert f.severity == "high" and "vlan" not in f.evidence
    # the same ACK sent directly on VLAN 99 is the client's own link, where B is not bound
    assert run(capture(tmp_path, [(0.0, ack(STRANGER, B[1], vlan=99))], name="direct.pcap"), site=site) == {}


# ---- IPv6: Neighbor Discovery --------------------------------------------------------------------------

def na(sender_mac, target, to_mac="33:33:00:00:00:01", to_ip="ff02::1", solicited=False):
    return (Ether(src=sender_mac, dst=to_mac) / IPv6(src=target, dst=to_ip, hlim=255)
            / ICMPv6ND_NA(S=int(solicited), O=1, tgt=target) / ICMPv6NDOptDstLLAddr(lladdr=sender_mac))


def ns(sender_mac, source, target="2001:db8::1"):
    return (Ether(src=sender_mac, dst="33:33:ff:00:00:01") / IPv6(src=source, dst="ff02::1:ff00:1", hlim=255)
            / ICMPv6ND_NS(tgt=target) / ICMPv6NDOptSrcLLAddr(lladdr=sender_mac))


SITE6 = registry(A, B, (B[0], "2001:db8::b"), pools=[("10.9.0.100", "10.9.0.199")])


def test_a_registered_ipv6_address_claimed_by_another_mac_is_high(tmp_path):
    timed = [(0.0, ns(B[0], "2001:db8::b")), (1.0, na(STRANGER, "2001:db8::b", B[0], "2001:db8::b"))]
    (f,) = run(capture(tmp_path, timed), site=SITE6).values()
    assert f.severity == "high" and f.identifier == f"2001:db8::b {STRANGER}"
    assert "in Neighbor Discovery (1x Neighbor Advertisement)" in f.msg


def test_ipv6_is_judged_where_the_registry_speaks_ipv6(tmp_path):
    # A (IPv4 binding only) and an unregistered host with global addresses: no finding against an IPv4 registry
    timed = [(0.0, ns(A[0], "2001:db8::a")), (1.0, ns(STRANGER, "2001:db8::66"))]
    path = capture(tmp_path, timed)
    assert run(path) == {}
    # with an IPv6 binding in the registry: the unregistered pair is listed; A's address is its own business
    # until A has an IPv6 binding
    (f,) = run(path, site=SITE6).values()
    assert f.severity == "low" and [p["ip"] for p in f.evidence["pairs"]] == ["2001:db8::66"]
    found = run(path, site=registry(A, (A[0], "2001:db8::aa"), B))
    assert found[f"2001:db8::a {A[0]}"].severity == "medium"


def test_ipv6_link_local_is_not_judged(tmp_path):
    timed = [(0.0, ns(B[0], "fe80::b")), (1.0, na(STRANGER, "fe80::b", B[0], "fe80::b"))]
    assert run(capture(tmp_path, timed), site=registry(A, (B[0], "fe80::b"))) == {}


def _detector(site):
    return detector("ip-mac-binding", site)


def test_ip_pairs_are_grouped_with_their_packets_and_bounded_per_mac():
    from scapy.all import raw

    from detector.detect import neighbors as nb
    from tests.test_decode import make_batch
    router = "02:00:00:00:00:fe"
    frames = [raw(datagram((router, f"10.9.1.{k}"), C[1])) for k in range(40)]
    frames += [raw(datagram(A, C[1]))] * 3 + [raw(datagram(A, C[1], vlan=20))]
    state = nb.Neighbors(ip_sources=True)
    state.update(decode(make_batch([(1, frame) for frame in frames])))
    rows = state.rows
    mine = rows["mac"] == parse_mac(router)
    assert mine.sum() == nb.IP_ROWS_PER_MAC
    assert sorted(rows["ip_lo"][mine] & 0xFF) == list(range(nb.IP_ROWS_PER_MAC))   # the first ones
    host = np.flatnonzero(rows["mac"] == parse_mac(A[0]))
    assert sorted(rows["count"][host].tolist()) == [1, 3] and sorted(rows["link"][host].tolist()) == [0, 20 << 16]
    three = host[rows["count"][host] == 3][0]
    assert (rows["first_frame"][three], rows["last_frame"][three]) == (41, 43)


def test_without_bindings_nothing_is_kept():
    assert _detector(None).neighbors is None


def test_two_halves_merged_give_one_pass():
    site = load_site(CAPTURES / "arp-spoof-mitm.site.yaml")
    one, merged = one_pass_and_halves(CAPTURES / "arp-spoof-mitm.pcapng", lambda: _detector(site))
    assert merged == one
    assert {f["severity"] for f in one} == {"high"}


@pytest.mark.parametrize("name, severities", [("arp-dhcp-registered-ack", ["high", "low"]),      # + unregistered pairs
                                              ("arp-nd-nic-change", ["high", "low"])])   # announced by NA
def test_halves_with_dhcp_and_neighbor_discovery_merged_give_one_pass(name, severities):
    site = registry(("02:a0:00:01:00:0b", "10.160.1.11"), ("02:a0:00:01:00:0c", "2001:db8:a0:1::12"))
    (batch,) = [decode(raw) for _, raw in read_captures([str(CAPTURES / f"{name}.pcapng")])]
    ctx = AnalysisContext(flows=None, stats=CaptureStats())
    whole = _detector(site)
    whole.update(batch)
    one = [f.to_json() for f in whole.findings(ctx)]
    for cut in range(1, len(batch)):
        left, right = _detector(site), _detector(site)
        left.update(PacketBatch(data=batch.data, cols={k: v[:cut] for k, v in batch.cols.items()}))
        right.update(PacketBatch(data=batch.data, cols={k: v[cut:] for k, v in batch.cols.items()}))
        assert [f.to_json() for f in left.merge(right).findings(ctx)] == one
    assert [f["severity"] for f in one] == severities

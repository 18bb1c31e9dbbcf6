"""The `nd` application table on crafted frames and real captures: ICMPv6 Neighbor Discovery, types 133-137."""
from __future__ import annotations

import ipaddress
import struct

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP
from scapy.layers.inet6 import (
    ICMPv6EchoRequest,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6ND_RA,
    ICMPv6ND_Redirect,
    ICMPv6ND_RS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptMTU,
    ICMPv6NDOptPrefixInfo,
    ICMPv6NDOptRDNSS,
    ICMPv6NDOptRedirectedHdr,
    ICMPv6NDOptRouteInfo,
    ICMPv6NDOptSrcLLAddr,
    IPv6,
    IPv6ExtHdrFragment,
    in6_chksum,
)
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw, raw
from scapy.utils import wrpcap

import detector
from detector.decode import app, decode
from detector.decode.app.nd import (
    F_CHECKSUM,
    F_CODE,
    F_OPTION_PAST,
    F_OPTION_ZERO,
    F_SHORT,
    F_TRAILING,
    MAX_OPTIONS,
    OPT_PREFIX_INFORMATION,
    OPT_RDNSS,
)
from detector.ingest import open_capture
from tests._app import (
    app_table,
    assert_app_reads_stop_at_the_capture,
    assert_masks_consistent,
    assert_snapshot_cuts_are_no_fault,
)
from tests._real import CAPTURES_REAL, manifest_rows

ROUTER_MAC = "02:00:5e:10:00:01"
ROUTER_LL = "fe80::1"
ETH = Ether(src=ROUTER_MAC, dst="33:33:00:00:00:01")
ALL_NODES = IPv6(src=ROUTER_LL, dst="ff02::1", hlim=255)


def ra(*options, lifetime=1800, managed=0, other=1, prf=1, chlim=64, hlim=255):
    message = ICMPv6ND_RA(chlim=chlim, M=managed, O=other, prf=prf, routerlifetime=lifetime, reachabletime=30000,
                          retranstimer=1000)
    for option in options:
        message = message / option
    return ETH / IPv6(src=ROUTER_LL, dst="ff02::1", hlim=hlim) / message


def address(hi, lo) -> str:
    return str(ipaddress.IPv6Address((int(hi) << 64) | int(lo)))


def options(tab, message=0) -> list[int]:
    child = tab.children["nd_opt"]
    return child["type"][child["parent"] == message].tolist()


def test_router_advertisement_fields_and_options():
    frame = ra(ICMPv6NDOptSrcLLAddr(lladdr=ROUTER_MAC), ICMPv6NDOptMTU(mtu=1480),
               ICMPv6NDOptPrefixInfo(prefix="2001:db8:1::", prefixlen=64, L=1, A=1, validlifetime=86400,
                                     preferredlifetime=14400),
               ICMPv6NDOptRDNSS(lifetime=600, dns=["2001:db8:1::53", "2001:db8:1::54"]),
               ICMPv6NDOptRouteInfo(plen=48, prf=3, rtlifetime=900, prefix="2001:db8:7::"))
    tab = app_table([(1, frame)], "nd")
    assert len(tab) == 1 and int(tab["type"][0]) == 134 and int(tab["code"][0]) == 0
    assert int(tab["hop_limit"][0]) == 255 and int(tab["checksum_ok"][0]) == 1
    assert (int(tab["cur_hop_limit"][0]), int(tab["managed"][0]), int(tab["other"][0]), int(tab["preference"][0]),
            int(tab["router_lifetime"][0]), int(tab["reachable_time"][0]), int(tab["retrans_timer"][0])) == \
        (64, 0, 1, 1, 1800, 30000, 1000)
    assert int(tab["ra_flags"][0]) == 0x48
    assert tab.to_frame()["src_lladdr"][0] == ROUTER_MAC and not tab.valid("tgt_lladdr")[0]
    assert int(tab["mtu"][0]) == 1480
    assert (int(tab["option_count"][0]), int(tab["prefix_count"][0]), int(tab["rdnss_count"][0])) == (5, 1, 1)
    assert not tab.valid("target_hi")[0] and not tab.truncated[0] and not tab.more[0]
    child = tab.children["nd_opt"]
    assert child["type"].tolist() == [1, 5, 3, 25, 24] and child["length"].tolist() == [1, 1, 4, 5, 3]
    pio, rdnss, route = 2, 3, 4
    assert address(child["prefix_hi"][pio], child["prefix_lo"][pio]) == "2001:db8:1::"
    assert (int(child["prefix_len"][pio]), int(child["on_link"][pio]), int(child["autonomous"][pio]),
            int(child["valid_lifetime"][pio]), int(child["preferred_lifetime"][pio])) == (64, 1, 1, 86400, 14400)
    assert int(child["lifetime"][rdnss]) == 600 and int(child["dns_count"][rdnss]) == 2
    assert address(child["dns_hi"][rdnss], child["dns_lo"][rdnss]) == "2001:db8:1::53"
    assert address(child["prefix_hi"][route], child["prefix_lo"][route]) == "2001:db8:7::"
    assert (int(child["prefix_len"][route]), int(child["route_preference"][route]), int(child["lifetime"][route])) \
        == (48, 3, 900)
    assert not child.valid("on_link")[route] and not child.valid("dns_hi")[pio]
    assert int(child["mtu"][1]) == 1480 and child.to_frame()["lladdr"][0] == ROUTER_MAC
    assert_masks_consistent(tab)


def test_neighbor_solicitation_advertisement_and_their_link_layer_addresses():
    ns = (Ether(src="02:00:00:00:00:0a") / IPv6(src="fe80::a", dst="ff02::1:ff00:1", hlim=255)
          / ICMPv6ND_NS(tgt="fe80::1") / ICMPv6NDOptSrcLLAddr(lladdr="02:00:00:00:00:0a"))
    na = (Ether(src=ROUTER_MAC) / IPv6(src=ROUTER_LL, dst="fe80::a", hlim=255)
          / ICMPv6ND_NA(R=1, S=1, O=0, tgt=ROUTER_LL) / ICMPv6NDOptDstLLAddr(lladdr=ROUTER_MAC))
    unsolicited = (Ether(src="02:00:00:00:00:0c") / IPv6(src="fe80::c", dst="ff02::1", hlim=64)
                   / ICMPv6ND_NA(R=0, S=0, O=1, tgt=ROUTER_LL) / ICMPv6NDOptDstLLAddr(lladdr="02:00:00:00:00:0c"))
    tab = app_table([(1, ns), (1, na), (1, unsolicited)], "nd")
    frame = tab.to_frame()
    assert tab["type"].tolist() == [135, 136, 136]
    assert frame["target"].tolist() == ["fe80::1"] * 3
    assert frame["src_lladdr"][0] == "02:00:00:00:00:0a" and frame["src_lladdr"].isna().tolist() == [False, True, True]
    assert frame["tgt_lladdr"].tolist()[1:] == [ROUTER_MAC, "02:00:00:00:00:0c"]
    assert frame["na_router"].isna().tolist() == [True, False, False]
    assert tab["na_router"].tolist()[1:] == [1, 0] and tab["na_solicited"].tolist()[1:] == [1, 0]
    assert tab["na_override"].tolist()[1:] == [0, 1] and not tab.valid("na_router")[0]
    assert tab["hop_limit"].tolist() == [255, 255, 64] and tab["checksum_ok"].tolist() == [1, 1, 1]
    assert not tab.valid("cur_hop_limit").any() and not tab.valid("destination_hi").any()


def test_redirect_destination_and_redirected_header():
    quoted = IPv6(src="2001:db8::a", dst="2001:db8:9::1") / ICMPv6EchoRequest()
    redirect = (Ether(src=ROUTER_MAC) / IPv6(src=ROUTER_LL, dst="fe80::a", hlim=255)
                / ICMPv6ND_Redirect(tgt="fe80::2", dst="2001:db8:9::1")
                / ICMPv6NDOptDstLLAddr(lladdr="02:00:00:00:00:02")
                / ICMPv6NDOptRedirectedHdr(pkt=quoted))
    tab = app_table([(1, redirect)], "nd")
    frame = tab.to_frame()
    assert frame["target"][0] == "fe80::2" and frame["destination"][0] == "2001:db8:9::1"
    assert options(tab) == [2, 4] and int(tab["checksum_ok"][0]) == 1 and not tab.truncated[0]
    assert frame["tgt_lladdr"][0] == "02:00:00:00:00:02"


def test_router_solicitation():
    rs = (Ether(src="02:00:00:00:00:0a") / IPv6(src="fe80::a", dst="ff02::2", hlim=255) / ICMPv6ND_RS()
          / ICMPv6NDOptSrcLLAddr(lladdr="02:00:00:00:00:0a"))
    tab = app_table([(1, rs)], "nd")
    assert int(tab["type"][0]) == 133 and options(tab) == [1] and int(tab["length"][0]) == 16
    assert not tab.valid("target_hi")[0] and not tab.valid("router_lifetime")[0]


def test_a_wrong_checksum_is_reported_not_hidden():
    frame = bytearray(raw(ra()))
    frame[14 + 40 + 2] ^= 0x55
    tab = app_table([(1, bytes(frame))], "nd")
    assert tab.valid("checksum_ok")[0] and int(tab["checksum_ok"][0]) == 0


def test_a_zero_length_option_ends_the_list_and_truncates():
    # RFC 4861 section 4.6: nodes must silently discard a message with an option of length 0; what follows it
    # (here a source link-layer address) is not read
    zero = Raw(bytes([OPT_PREFIX_INFORMATION, 0]) + bytes(6))
    tab = app_table([(1, ra(ICMPv6NDOptMTU(mtu=1400), zero, ICMPv6NDOptSrcLLAddr(lladdr=ROUTER_MAC)))], "nd")
    assert tab.truncated[0] and options(tab) == [5, 3]
    assert tab.children["nd_opt"]["length"].tolist() == [1, 0]
    assert int(tab["option_count"][0]) == 2 and int(tab["prefix_count"][0]) == 0
    assert int(tab["mtu"][0]) == 1400 and not tab.valid("src_lladdr")[0]


def test_an_option_past_the_message_truncates_and_is_read_no_further():
    # a prefix information option that says 4 units (32 bytes) with 8 bytes left in the message
    lying = Raw(bytes([OPT_PREFIX_INFORMATION, 4, 64, 0xC0]) + struct.pack("!I", 86400))
    tab = app_table([(1, ra(ICMPv6NDOptSrcLLAddr(lladdr=ROUTER_MAC), lying))], "nd")
    assert tab.truncated[0] and options(tab) == [1, 3]
    child = tab.children["nd_opt"]
    assert not child.valid("prefix_hi")[1] and child.truncated.tolist() == [False, True]
    assert tab.valid("src_lladdr")[0] and int(tab["prefix_count"][0]) == 0


def test_a_link_layer_address_of_another_size_is_listed_not_taken():
    # an 8-byte address (IEEE 802.15.4 EUI-64, RFC 4944): length 2
    eui64 = Raw(bytes([1, 2]) + bytes(range(1, 9)) + bytes(6))
    tab = app_table([(1, ra(eui64))], "nd")
    assert options(tab) == [1] and not tab.children["nd_opt"].valid("lladdr")[0]
    assert not tab.valid("src_lladdr")[0] and not tab.truncated[0]


def test_more_options_than_the_cap_are_counted_and_flagged_more():
    for extra in (0, 1, 3):
        count = MAX_OPTIONS + extra
        prefixes = [ICMPv6NDOptPrefixInfo(prefix=f"2001:db8:{k:x}::", prefixlen=64) for k in range(count)]
        tab = app_table([(1, ra(*prefixes, ICMPv6NDOptSrcLLAddr(lladdr=ROUTER_MAC)))], "nd")
        assert int(tab["option_count"][0]) == count + 1 and int(tab["prefix_count"][0]) == count
        assert tab.more[0] and not tab.truncated[0]        # the address option is always one too many
        assert len(options(tab)) == MAX_OPTIONS
        assert tab.valid("src_lladdr")[0]       # the options past the cap still give the message's fields


def test_a_length_short_of_the_fixed_part_masks_what_it_lacks():
    frame = raw(ra())
    header = bytearray(frame[:14 + 40 + 8])            # an RA of 8 bytes: no lifetime, no timers
    header[14 + 4:14 + 6] = (8).to_bytes(2, "big")
    tab = app_table([(1, bytes(header))], "nd")
    assert tab.truncated[0] and int(tab["length"][0]) == 8 and int(tab["type"][0]) == 134
    assert not tab.valid("router_lifetime")[0] and not tab.valid("option_count")[0]
    assert tab.valid("checksum")[0]


def _icmp6(message: bytes, source=ROUTER_LL, code: int | None = None) -> bytes:
    """An ICMPv6 message of these bytes to ff02::1, hop limit 255, its checksum computed over them (and `code`
    put in first)."""
    body = bytearray(message)
    if code is not None:
        body[1] = code
    body[2:4] = b"\x00\x00"
    ipv6 = IPv6(src=source, dst="ff02::1", hlim=255, nh=58)
    body[2:4] = struct.pack("!H", in6_chksum(58, ipv6, bytes(body)))
    return raw(ETH / ipv6 / Raw(bytes(body)))


def test_faults_are_the_message_own_and_never_its_path():
    wrong_sum = bytearray(raw(ra()))
    wrong_sum[14 + 40 + 2] ^= 0x55
    frames = [
        (_icmp6(raw(ICMPv6ND_RA()), code=3), F_CODE),
        (_icmp6(raw(ICMPv6ND_RA())[:8]), F_SHORT),
        (ra(Raw(bytes([OPT_PREFIX_INFORMATION, 0]) + bytes(6))), F_OPTION_ZERO),
        (ra(Raw(bytes([OPT_PREFIX_INFORMATION, 4, 64, 0xC0]) + struct.pack("!I", 86400))), F_OPTION_PAST),
        (_icmp6(raw(ICMPv6ND_RA()) + b"\x01"), F_TRAILING),
        (bytes(wrong_sum), F_CHECKSUM),
        (ra(hlim=64), 0),                  # forwarded or sent from off the link: dropped, but well-formed
        (_icmp6(raw(ICMPv6ND_RA()), source="2001:db8::1"), 0),
    ]
    tab = app_table([(1, frame) for frame, _ in frames], "nd")
    assert tab["fault"].tolist() == [fault for _, fault in frames]
    assert_masks_consistent(tab)


def test_a_message_cut_by_the_snapshot_length_is_not_malformed():
    assert_snapshot_cuts_are_no_fault(
        [(1, ra(ICMPv6NDOptSrcLLAddr(lladdr=ROUTER_MAC), ICMPv6NDOptPrefixInfo(prefix="2001:db8:1::"),
                ICMPv6NDOptRDNSS(dns=["2001:db8::53"]), ICMPv6NDOptRouteInfo(plen=64, prefix="2001:db8:7::"))),
         (1, ETH / ALL_NODES / ICMPv6ND_NA(tgt=ROUTER_LL) / ICMPv6NDOptDstLLAddr(lladdr=ROUTER_MAC)),
         (1, ETH / ALL_NODES / ICMPv6ND_NS(tgt=ROUTER_LL) / ICMPv6NDOptSrcLLAddr(lladdr=ROUTER_MAC))], "nd")


def test_which_packets_are_candidates():
    echo = ETH / ALL_NODES / ICMPv6EchoRequest()
    over_ipv4 = Ether() / IP(src="192.0.2.1", dst="192.0.2.2", proto=58) / raw(ICMPv6ND_RA())
    fragment = ETH / ALL_NODES / IPv6ExtHdrFragment(offset=8, m=0) / Raw(bytes([134, 0, 0, 0]) + bytes(12))
    tagged = Ether(src=ROUTER_MAC) / Dot1Q(vlan=30) / ALL_NODES / ICMPv6ND_RA(routerlifetime=0)
    tab = app_table([(1, echo), (1, over_ipv4), (1, fragment), (1, tagged), (1, ra())], "nd")
    assert tab["row"].tolist() == [3, 4] and tab["router_lifetime"].tolist() == [0, 1800]


def test_a_snapshot_length_cut_keeps_what_was_read():
    message = raw(ra(ICMPv6NDOptSrcLLAddr(lladdr=ROUTER_MAC), ICMPv6NDOptPrefixInfo(prefix="2001:db8:1::")))
    cut = 14 + 40 + 16 + 8 + 20           # the fixed part, the address option and 20 bytes of the prefix option
    tab = app_table([(1, message)], "nd", caplens=[cut])
    assert tab.truncated[0] and not tab.valid("checksum_ok")[0] and tab.valid("src_lladdr")[0]
    child = tab.children["nd_opt"]
    assert options(tab) == [1, 3] and child.truncated.tolist() == [False, True] and not child.valid("prefix_hi")[1]


def test_every_cut_reads_only_captured_bytes():
    assert_app_reads_stop_at_the_capture(
        [(1, ra(ICMPv6NDOptSrcLLAddr(lladdr=ROUTER_MAC), ICMPv6NDOptPrefixInfo(prefix="2001:db8:1::"),
                ICMPv6NDOptRDNSS(dns=["2001:db8::53"]), ICMPv6NDOptRouteInfo(plen=64, prefix="2001:db8:7::"))),
         (1, ETH / ALL_NODES / ICMPv6ND_NA(tgt=ROUTER_LL) / ICMPv6NDOptDstLLAddr(lladdr=ROUTER_MAC)),
         (1, ETH / ALL_NODES / ICMPv6ND_Redirect(tgt="fe80::2", dst="2001:db8::9"))], "nd")


# ND messages of every shape the table reads, for the property test
SHAPES = [raw(ra(ICMPv6NDOptSrcLLAddr(lladdr=ROUTER_MAC), ICMPv6NDOptMTU(mtu=1500),
                 ICMPv6NDOptPrefixInfo(prefix="2001:db8:1::"), ICMPv6NDOptRDNSS(dns=["2001:db8::53", "2001:db8::54"]),
                 ICMPv6NDOptRouteInfo(plen=64, prefix="2001:db8:7::"))),
          raw(ETH / ALL_NODES / ICMPv6ND_NS(tgt=ROUTER_LL) / ICMPv6NDOptSrcLLAddr(lladdr=ROUTER_MAC)),
          raw(ETH / ALL_NODES / ICMPv6ND_Redirect(tgt="fe80::2", dst="2001:db8::9")
              / ICMPv6NDOptRedirectedHdr(pkt=IPv6() / ICMPv6EchoRequest()))]
# option lengths (units of 8 bytes), types, and 16-bit values that make the IPv6 payload length lie
HOSTILE8 = [0, 1, 2, 3, 4, 5, 0x7F, 0xFF]
HOSTILE16 = [0, 1, 7, 8, 16, 24, 40, 0xFF, 0xFFFF]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SHAPES), st.lists(st.tuples(st.integers(0, 200), st.sampled_from(HOSTILE8)), min_size=1,
                                         max_size=4), st.sampled_from([None, *HOSTILE16]))
def test_lying_option_lengths_stay_inside_the_capture(frame, edits, payload_length):
    # bytes of the ND message overwritten (option types and lengths among them), and the IPv6 payload length
    data = bytearray(frame)
    start = 14 + 40
    for where, value in edits:
        data[start + where % (len(data) - start)] = value
    if payload_length is not None:
        data[14 + 4:14 + 6] = payload_length.to_bytes(2, "big")
    assert_app_reads_stop_at_the_capture([(1, bytes(data))], "nd")


def test_to_frame_and_the_notebook_api(tmp_path):
    path = tmp_path / "nd.pcap"
    wrpcap(str(path), [ra(ICMPv6NDOptSrcLLAddr(lladdr=ROUTER_MAC), ICMPv6NDOptPrefixInfo(prefix="2001:db8:1::")),
                       ETH / ALL_NODES / ICMPv6ND_NA(tgt=ROUTER_LL)])
    capture = detector.open(path)
    messages = capture.app("nd")
    assert messages["frame"].tolist() == [1, 2] and messages["src_mac"].tolist() == [ROUTER_MAC] * 2
    assert messages["router_lifetime"].tolist()[0] == 1800 and messages["router_lifetime"].isna().tolist()[1]
    assert str(messages["router_lifetime"].dtype) == "UInt16" and messages["target"].tolist()[1] == ROUTER_LL
    assert messages["src_lladdr"].tolist()[0] == ROUTER_MAC
    opts = capture.app("nd_opt")
    assert opts["frame"].tolist() == [1, 1] and opts["prefix"].isna().tolist() == [True, False]
    assert opts["prefix"][1] == "2001:db8:1::"
    assert opts["type"].tolist() == [1, OPT_PREFIX_INFORMATION]


# ---- real captures -------------------------------------------------------------------------------

def _real_tables():
    """(path, nd table) of every real capture that carries ND."""
    for row in manifest_rows():
        try:
            with open_capture(CAPTURES_REAL / row["path"]) as reader:
                for raw_batch in reader:
                    tab = app.table(decode(raw_batch, fingerprint=False), "nd")
                    if len(tab):
                        yield row["path"], tab
        except Exception:      # a capture the reader refuses carries no table
            continue


def test_addresses_are_tsharks_on_every_real_capture(captures_real, tshark):
    # the targets, Redirect destinations and RDNSS servers, compared as text (tests/test_oracle_app.py compares
    # the other fields, which are one column each)
    seen = 0
    for path, tab in _real_tables():
        if path == "tcpdump/tests/icmpv6-length-zero.pcapng":
            continue            # tshark dissects no ND there (tests/test_oracle_app.py says why)
        child = tab.children["nd_opt"]
        theirs = {int(r[0]): r[1:] for r in tshark.fields(
            captures_real / path, "frame.number", "icmpv6.nd.ns.target_address", "icmpv6.nd.na.target_address",
            "icmpv6.nd.rd.target_address", "icmpv6.rd.na.destination_address", "icmpv6.opt.rdnss",
            display_filter="icmpv6.type >= 133 and icmpv6.type <= 137", options=("-E", "occurrence=f"))}
        for k in range(len(tab)):
            ns, na, rd, destination, rdnss = theirs[int(tab["frame"][k])]
            if tab.valid("target_hi")[k]:
                assert address(tab["target_hi"][k], tab["target_lo"][k]) == (ns or na or rd), (path, k)
            if tab.valid("destination_hi")[k]:
                assert address(tab["destination_hi"][k], tab["destination_lo"][k]) == destination, (path, k)
            servers = np.flatnonzero((child["parent"] == k) & (child["type"] == OPT_RDNSS) & child.valid("dns_hi"))
            if len(servers):
                assert address(child["dns_hi"][servers[0]], child["dns_lo"][servers[0]]) == rdnss, (path, k)
        seen += len(tab)
    assert seen >= 30


def test_the_kill_router_capture(captures_real):
    # suricata-verify's ipv6-kill-router-gateway: THC kill_router6 sends RAs of lifetime 0 with high preference for
    # the router's link-local from its own MAC, without options; the router's RA says lifetime 30 with its address
    path = captures_real / "suricata-verify/tests/ipv6-evasion/ipv6-kill-router-gateway/kill_router6.pcap"
    with open_capture(path) as reader:
        batch = decode(next(iter(reader)), fingerprint=False)
    tab = app.table(batch, "nd")
    ras = np.flatnonzero(tab["type"] == 134)
    assert tab["frame"][ras].tolist() == [5, 6, 17, 20, 21]
    assert tab["router_lifetime"][ras].tolist() == [0, 30, 0, 0, 0]
    assert tab["preference"][ras].tolist() == [1, 3, 1, 1, 1]
    assert tab.to_frame()["src_lladdr"][ras].tolist()[1] == "64:00:6a:5b:8e:b3"
    assert tab["option_count"][ras].tolist() == [0, 2, 0, 0, 0] and tab["checksum_ok"].all()


def test_tcpdumps_icmpv6_of_payload_length_zero(captures_real):
    # IPv6 payload length 0 and no jumbo option: the decoder takes the frame's tail as the message (as for
    # segmentation offload); the table shows a message no receiver would accept
    with open_capture(captures_real / "tcpdump/tests/icmpv6-length-zero.pcapng") as reader:
        tab = app.table(decode(next(iter(reader)), fingerprint=False), "nd")
    assert len(tab) == 1 and tab.truncated[0] and int(tab["checksum_ok"][0]) == 0

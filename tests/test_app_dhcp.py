"""The `dhcp4` and `dhcp6` application tables on crafted frames and real captures."""
from __future__ import annotations

import ipaddress
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.dhcp import BOOTP, DHCP
from scapy.layers.dhcp6 import (
    DUID_EN,
    DUID_LL,
    DUID_LLT,
    DHCP6_RelayForward,
    DHCP6_Reply,
    DHCP6_Solicit,
    DHCP6OptClientId,
    DHCP6OptDNSServers,
    DHCP6OptIA_NA,
    DHCP6OptIA_PD,
    DHCP6OptIA_TA,
    DHCP6OptIAAddress,
    DHCP6OptIAPrefix,
    DHCP6OptRelayMsg,
    DHCP6OptServerId,
    DHCP6OptStatusCode,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw, raw

import detector
from detector.decode import app, decode
from detector.decode.app import dhcp4, dhcp6
from detector.decode.app.dhcp4 import ACK, IN_FILE, IN_OPTIONS, IN_SNAME, MAX_OPTIONS, OFFER
from detector.decode.app.dhcp6 import MAX_ADDRESSES, MAX_RELAYS, RELAY_FORW, SOLICIT
from detector.detectors.rogue_dhcp import fnv1a
from detector.ingest import open_capture
from tests._app import (
    app_table,
    assert_app_reads_stop_at_the_capture,
    assert_masks_consistent,
    assert_snapshot_cuts_are_no_fault,
)

ETH = Ether(src="02:00:5e:50:00:01", dst="ff:ff:ff:ff:ff:ff")
CLIENT = "02:00:5e:51:00:07"
CHADDR = bytes.fromhex(CLIENT.replace(":", "")) + bytes(10)


def v4(payload, sport=67, dport=68):
    return ETH / IP(src="10.50.0.1", dst="255.255.255.255") / UDP(sport=sport, dport=dport) / payload


def raw_offer(options: bytes, **bootp):
    """An OFFER-shaped BOOTP reply whose options are the bytes given (after the magic cookie)."""
    fields = {"op": 2, "chaddr": CHADDR, "xid": 0x1234, "options": b"\x63\x82\x53\x63", **bootp}
    return v4(BOOTP(**fields) / Raw(options))


def offer(options, **bootp):
    fields = {"op": 2, "chaddr": CHADDR, "xid": 0x1234, "yiaddr": "10.50.0.107", "siaddr": "10.50.0.1",
              "giaddr": "10.60.10.1", "flags": 0x8000, "secs": 3, "hops": 1, **bootp}
    return v4(BOOTP(**fields) / DHCP(options=options))


OFFER_OPTIONS = [("message-type", "offer"), ("server_id", "10.50.0.1"), ("lease_time", 3600),
                 ("router", "10.50.0.1", "10.50.0.2"), ("name_server", "10.50.0.53", "10.50.0.54", "8.8.8.8"),
                 ("client_id", b"\x01" + bytes.fromhex(CLIENT.replace(":", ""))), "end"]


def ip4(lo) -> str:
    return str(ipaddress.IPv4Address(int(lo) & 0xFFFF_FFFF))


def ip6(hi, lo) -> str:
    return str(ipaddress.IPv6Address((int(hi) << 64) | int(lo)))


def test_an_offers_header_and_options():
    tab = app_table([(1, offer(OFFER_OPTIONS))], "dhcp4")
    assert len(tab) == 1 and not tab.truncated[0] and not tab.more[0]
    assert (int(tab["op"][0]), int(tab["htype"][0]), int(tab["hlen"][0]), int(tab["hops"][0])) == (2, 1, 6, 1)
    assert (int(tab["xid"][0]), int(tab["secs"][0]), int(tab["broadcast"][0]), int(tab["port"][0])) == \
        (0x1234, 3, 1, 68)
    assert [ip4(tab[f][0]) for f in ("ciaddr_lo", "yiaddr_lo", "siaddr_lo", "giaddr_lo")] == \
        ["0.0.0.0", "10.50.0.107", "10.50.0.1", "10.60.10.1"]
    assert int(tab["chaddr"][0]) == int(CLIENT.replace(":", ""), 16)
    assert int(tab["msg_type"][0]) == OFFER and ip4(tab["server_id_lo"][0]) == "10.50.0.1"
    assert int(tab["lease_s"][0]) == 3600
    assert (ip4(tab["router_lo"][0]), int(tab["router_count"][0])) == ("10.50.0.1", 2)
    assert (ip4(tab["dns_lo"][0]), int(tab["dns_count"][0])) == ("10.50.0.53", 3)
    assert int(tab["client_id_len"][0]) == 7 and int(tab["end"][0]) == 1
    assert not tab.valid("requested_ip_lo")[0] and not tab.valid("overload")[0] and not tab.valid("agent_len")[0]
    assert tab["server_id_hi"][0] == 0 and tab["server_id_lo"][0] >> 32 == 0xFFFF     # IPv4-mapped
    opt = tab.children["dhcp_opt"]
    assert opt["code"].tolist() == [53, 54, 51, 3, 6, 61, 255]
    assert opt["length"].tolist() == [1, 4, 4, 8, 12, 7, 0]
    assert opt["offset"].tolist()[0] == 240 and set(opt["where"].tolist()) == {IN_OPTIONS}
    assert int(tab["options"][0]) == 7
    assert_masks_consistent(tab)


def test_option_overload_continues_in_file_then_sname():
    # RFC 2132 section 9.3: options, then file (bit 1), then sname (bit 2); option 52 in file is not honoured
    file = bytes([3, 4, 10, 9, 9, 1, 52, 1, 2, 255]).ljust(128, b"\0")
    sname = bytes([54, 4, 10, 9, 9, 9, 6, 4, 10, 9, 9, 53, 255]).ljust(64, b"\0")
    tab = app_table([(1, raw_offer(bytes([53, 1, 5, 52, 1, 3, 255]), file=file, sname=sname))],
                    "dhcp4")
    assert int(tab["msg_type"][0]) == ACK and int(tab["overload"][0]) == 3
    assert ip4(tab["router_lo"][0]) == "10.9.9.1" and ip4(tab["server_id_lo"][0]) == "10.9.9.9"
    assert ip4(tab["dns_lo"][0]) == "10.9.9.53"
    opt = tab.children["dhcp_opt"]
    assert list(zip(opt["code"].tolist(), opt["where"].tolist())) == [
        (53, IN_OPTIONS), (52, IN_OPTIONS), (255, IN_OPTIONS), (3, IN_FILE), (52, IN_FILE), (255, IN_FILE),
        (54, IN_SNAME), (6, IN_SNAME), (255, IN_SNAME)]
    assert opt["offset"].tolist()[3] == 108 and opt["offset"].tolist()[6] == 44
    # without option 52 the same fields are names, not options
    plain = app_table([(1, offer([("message-type", "ack"), "end"], file=file, sname=sname))], "dhcp4")
    assert not plain.valid("router_lo")[0] and len(plain.children["dhcp_opt"]) == 2


def test_relay_agent_information_ids_are_lengths_and_hashes():
    circuit, remote = b"\x00\x04\x00\x0a\x01\x07", b"switch-3.campus"
    agent = bytes([1, len(circuit)]) + circuit + bytes([2, len(remote)]) + remote
    tab = app_table([(1, raw_offer(bytes([53, 1, 2, 82, len(agent)]) + agent + b"\xff"))], "dhcp4")
    assert int(tab["agent_len"][0]) == len(agent)
    assert (int(tab["circuit_id_len"][0]), int(tab["remote_id_len"][0])) == (6, 15)
    assert int(tab["circuit_id_hash"][0]) == fnv1a(circuit) and int(tab["remote_id_hash"][0]) == fnv1a(remote)


def test_pad_runs_are_one_option_and_options_over_the_cap_are_more():
    padded = offer([("message-type", "offer"), "pad", "pad", "pad", ("lease_time", 60), "end"])
    tab = app_table([(1, padded)], "dhcp4")
    assert tab.children["dhcp_opt"]["code"].tolist() == [53, 0, 51, 255]
    many = offer([("message-type", "offer"), *[("hostname", b"h")] * (MAX_OPTIONS + 5), "end"])
    tab = app_table([(1, many)], "dhcp4")
    assert tab.more[0] and int(tab["options"][0]) == MAX_OPTIONS + 7
    assert len(tab.children["dhcp_opt"]) == MAX_OPTIONS and int(tab["end"][0]) == 1


def test_bootp_without_a_cookie_and_a_chaddr_of_another_type():
    bootp = v4(BOOTP(op=2, chaddr=CHADDR, xid=7, options=b""))
    token = v4(BOOTP(op=1, htype=6, hlen=6, chaddr=CHADDR, xid=8) / DHCP(options=[("message-type", "discover"),
                                                                                 "end"]), 68, 67)
    tab = app_table([(1, bootp), (1, token)], "dhcp4")
    assert not tab.valid("options")[0] and not tab.valid("msg_type")[0] and tab.valid("chaddr")[0]
    assert not tab.valid("chaddr")[1] and int(tab["msg_type"][1]) == 1 and int(tab["port"][1]) == 67


def test_an_option_length_past_the_message_is_truncated_and_what_came_before_is_kept():
    message = raw(BOOTP(op=2, chaddr=CHADDR, xid=9) / DHCP(options=[("message-type", "offer"), "end"]))
    lying = message[:240 + 3] + bytes([3, 200, 10, 0, 0, 1])     # a router option claiming 200 bytes
    tab = app_table([(1, v4(Raw(lying)))], "dhcp4")
    assert tab.truncated[0] and int(tab["msg_type"][0]) == OFFER and not tab.valid("router_lo")[0]
    assert tab.children["dhcp_opt"]["code"].tolist() == [53, 3]


def test_dhcp4_in_a_vlan_and_every_cut_reads_only_captured_bytes():
    tagged = Ether() / Dot1Q(vlan=10) / IP(src="10.60.10.1", dst="255.255.255.255") / UDP(sport=67, dport=68) \
        / BOOTP(op=2, chaddr=CHADDR) / DHCP(options=OFFER_OPTIONS)
    assert ip4(app_table([(1, tagged)], "dhcp4")["router_lo"][0]) == "10.50.0.1"
    file = bytes([3, 4, 10, 9, 9, 1, 255]).ljust(128, b"\0")
    assert_app_reads_stop_at_the_capture([(1, offer(OFFER_OPTIONS)), (1, raw_offer(bytes([52, 1, 1, 255]), file=file))],
                                         "dhcp4")


def test_dhcp4_faults_are_the_message_own():
    message = raw(BOOTP(op=2, chaddr=CHADDR, xid=9) / DHCP(options=[("message-type", "offer"), "end"]))
    frames = [
        (v4(Raw(message[:200])), dhcp4.F_SHORT),
        (v4(Raw(bytes([7]) + message[1:])), dhcp4.F_OP),
        (v4(Raw(message[:240 + 3] + bytes([3, 200, 10, 0, 0, 1]))), dhcp4.F_OPTION_PAST),
        (v4(Raw(message[:240 + 3])), dhcp4.F_NO_END),
        (raw_offer(bytes([53, 1, 5, 52, 1, 1, 255]), file=bytes(122) + bytes([3, 9, 10, 9, 9, 1])),
         dhcp4.F_OPTION_PAST),
        (ETH / IP(src="10.50.0.1", dst="255.255.255.255") / UDP(sport=67, dport=68, len=8 + 300)
         / Raw(raw(offer(OFFER_OPTIONS))[14 + 20 + 8:]), dhcp4.F_UDP_LENGTH),
        (v4(BOOTP(op=2, chaddr=CHADDR, xid=7, options=b"")), 0),         # BOOTP: no cookie, no options
        (offer(OFFER_OPTIONS), 0),
    ]
    tab = app_table([(1, frame) for frame, _ in frames], "dhcp4")
    assert tab["fault"].tolist() == [fault for _, fault in frames]
    assert_masks_consistent(tab)


def test_a_dhcp4_message_cut_by_the_snapshot_length_is_not_malformed():
    file = bytes([3, 4, 10, 9, 9, 1, 255]).ljust(128, b"\0")
    assert_snapshot_cuts_are_no_fault([(1, offer(OFFER_OPTIONS)), (1, raw_offer(bytes([52, 1, 1, 255]), file=file))],
                                      "dhcp4")


def v6(message, sport=547, dport=546):
    return Ether(src="02:00:5e:50:00:01") / IPv6(src="fe80::1", dst="fe80::2") / UDP(sport=sport, dport=dport) \
        / message


SERVER_DUID = DUID_LLT(lladdr="02:00:5e:50:00:01", timeval=1000)
CLIENT_DUID = DUID_LL(lladdr=CLIENT)


def reply(extra=()):
    message = DHCP6_Reply(trid=0xABCDEF) / DHCP6OptClientId(duid=CLIENT_DUID) / DHCP6OptServerId(duid=SERVER_DUID)
    for option in extra:
        message = message / option
    return message


def test_a_reply_with_duids_addresses_dns_and_status():
    ia_na = DHCP6OptIA_NA(iaid=7, T1=100, T2=200, ianaopts=[
        DHCP6OptIAAddress(addr="2001:db8::10", preflft=300, validlft=600),
        DHCP6OptIAAddress(addr="2001:db8::11", preflft=30, validlft=60)])
    ia_pd = DHCP6OptIA_PD(iaid=8, T1=1, T2=2, iapdopt=[DHCP6OptIAPrefix(prefix="2001:db8:100::", plen=56,
                                                                         preflft=40, validlft=80)])
    ia_ta = DHCP6OptIA_TA(iaid=9, iataopts=[DHCP6OptIAAddress(addr="2001:db8::99", preflft=5, validlft=6)])
    extra = [DHCP6OptStatusCode(statuscode=0), ia_na, ia_pd, ia_ta,
             DHCP6OptDNSServers(dnsservers=["2001:db8::53", "2001:db8::54"])]
    tab = app_table([(1, v6(reply(extra)))], "dhcp6")
    assert (int(tab["msg_type"][0]), int(tab["xid"][0]), int(tab["relays"][0])) == (7, 0xABCDEF, 0)
    assert not tab.valid("hop_count")[0] and not tab.valid("inner_type")[0]
    assert int(tab["server_duid_type"][0]) == 1 and int(tab["server_duid_len"][0]) == 14
    assert int(tab["server_duid_hash"][0]) == fnv1a(raw(SERVER_DUID))
    assert int(tab["server_mac"][0]) == 0x02005e500001 and int(tab["client_mac"][0]) == int(CLIENT.replace(":", ""), 16)
    assert int(tab["client_duid_type"][0]) == 3 and int(tab["status"][0]) == 0
    assert (ip6(tab["dns_hi"][0], tab["dns_lo"][0]), int(tab["dns_count"][0])) == ("2001:db8::53", 2)
    ia = tab.children["dhcp6_ia"]
    assert [ip6(h, lo) for h, lo in zip(ia["addr_hi"], ia["addr_lo"])] == \
        ["2001:db8::10", "2001:db8::11", "2001:db8:100::", "2001:db8::99"]
    assert ia["ia_type"].tolist() == [3, 3, 25, 4] and ia["iaid"].tolist() == [7, 7, 8, 9]
    assert ia["valid_s"].tolist() == [600, 60, 80, 6] and ia["preferred_s"].tolist() == [300, 30, 40, 5]
    assert ia.valid("prefix_len").tolist() == [False, False, True, False] and int(ia["prefix_len"][2]) == 56
    assert ia.valid("t1_s").tolist() == [True, True, True, False] and ia["t2_s"].tolist()[:3] == [200, 200, 2]
    assert_masks_consistent(tab)


def test_a_duid_without_a_mac_has_a_hash_only():
    message = DHCP6_Reply(trid=1) / DHCP6OptServerId(duid=DUID_EN(enterprisenum=9, id=b"router-1"))
    tab = app_table([(1, v6(message))], "dhcp6")
    assert int(tab["server_duid_type"][0]) == 2 and not tab.valid("server_mac")[0]
    assert int(tab["server_duid_hash"][0]) == fnv1a(raw(DUID_EN(enterprisenum=9, id=b"router-1")))


def relayed(message, depth):
    for hop in range(depth):
        message = DHCP6_RelayForward(hopcount=hop, linkaddr=f"2001:db8:{hop}::1", peeraddr="fe80::2") \
            / DHCP6OptRelayMsg(message=message)
    return message


def test_relays_are_descended_to_the_message_inside():
    solicit = DHCP6_Solicit(trid=0x42) / DHCP6OptClientId(duid=CLIENT_DUID)
    tab = app_table([(1, v6(relayed(solicit, 2), 547, 547))], "dhcp6")
    assert (int(tab["msg_type"][0]), int(tab["relays"][0]), int(tab["inner_type"][0])) == (RELAY_FORW, 2, SOLICIT)
    assert int(tab["hop_count"][0]) == 1 and ip6(tab["link_hi"][0], tab["link_lo"][0]) == "2001:db8:1::1"
    assert ip6(tab["peer_hi"][0], tab["peer_lo"][0]) == "fe80::2"
    assert int(tab["xid"][0]) == 0x42 and int(tab["client_duid_type"][0]) == 3


def test_relays_nested_past_the_hop_limit_are_not_descended():
    solicit = DHCP6_Solicit(trid=0x42) / DHCP6OptClientId(duid=CLIENT_DUID)
    deep = app_table([(1, v6(relayed(solicit, MAX_RELAYS + 1), 547, 547))], "dhcp6")
    assert int(deep["relays"][0]) == MAX_RELAYS + 1 and not deep.valid("xid")[0]
    assert not deep.valid("client_duid_type")[0] and not deep.truncated[0]
    at_limit = app_table([(1, v6(relayed(solicit, MAX_RELAYS), 547, 547))], "dhcp6")
    assert int(at_limit["xid"][0]) == 0x42


def test_ia_addresses_over_the_cap_are_more():
    addresses = [DHCP6OptIAAddress(addr=f"2001:db8::{k:x}", preflft=1, validlft=2) for k in range(MAX_ADDRESSES + 3)]
    tab = app_table([(1, v6(reply([DHCP6OptIA_NA(iaid=1, ianaopts=addresses)])))], "dhcp6")
    assert tab.more[0] and len(tab.children["dhcp6_ia"]) == MAX_ADDRESSES


def test_a_lying_option_length_in_dhcp6_is_truncated():
    message = raw(reply()) + struct.pack("!HH", 23, 400) + bytes(16)
    tab = app_table([(1, v6(Raw(message)))], "dhcp6")
    assert tab.truncated[0] and tab.valid("server_duid_hash")[0] and not tab.valid("dns_lo")[0]


def test_dhcp6_faults_are_the_message_own():
    solicit = DHCP6_Solicit(trid=0x42) / DHCP6OptClientId(duid=CLIENT_DUID)
    ia = raw(DHCP6OptIA_NA(iaid=1, ianaopts=[DHCP6OptIAAddress(addr="2001:db8::1")]))
    frames = [
        (v6(Raw(b"\x07\x00")), dhcp6.F_SHORT),
        (v6(Raw(raw(reply()) + struct.pack("!HH", 23, 400) + bytes(16))), dhcp6.F_OPTION_PAST),
        (v6(Raw(raw(reply()) + b"\x00\x17")), dhcp6.F_OPTION_PAST),
        (v6(Raw(raw(reply()) + ia[:4] + struct.pack("!H", len(ia) - 4) + ia[6:-2])), dhcp6.F_OPTION_PAST),
        (v6(Raw(raw(reply()) + struct.pack("!HHI", 3, 4, 1))), dhcp6.F_OPTION_SHORT),
        (v6(Raw(raw(DHCP6_RelayForward(hopcount=0, linkaddr="2001:db8::1", peeraddr="fe80::2")))),
         dhcp6.F_NO_RELAY_MSG),
        (v6(Raw(raw(DHCP6_RelayForward(hopcount=0, linkaddr="2001:db8::1", peeraddr="fe80::2"))[:20]), 547, 547),
         dhcp6.F_SHORT),
        (v6(relayed(solicit, MAX_RELAYS + 1), 547, 547), dhcp6.F_RELAY_DEPTH),
        (v6(relayed(solicit, 2), 547, 547), 0),
        (v6(reply()), 0),
    ]
    tab = app_table([(1, frame) for frame, _ in frames], "dhcp6")
    assert tab["fault"].tolist() == [fault for _, fault in frames]
    assert_masks_consistent(tab)


def test_a_dhcp6_message_cut_by_the_snapshot_length_is_not_malformed():
    ia = DHCP6OptIA_PD(iaid=8, iapdopt=[DHCP6OptIAPrefix(prefix="2001:db8:100::", plen=56)])
    assert_snapshot_cuts_are_no_fault(
        [(1, v6(reply([ia, DHCP6OptDNSServers(dnsservers=["2001:db8::53"])]))),
         (1, v6(relayed(DHCP6_Solicit(trid=5) / DHCP6OptClientId(duid=CLIENT_DUID), 2), 547, 547))], "dhcp6")


def test_dhcp6_every_cut_reads_only_captured_bytes():
    ia = DHCP6OptIA_PD(iaid=8, iapdopt=[DHCP6OptIAPrefix(prefix="2001:db8:100::", plen=56)])
    assert_app_reads_stop_at_the_capture(
        [(1, v6(reply([ia, DHCP6OptDNSServers(dnsservers=["2001:db8::53"])]))),
         (1, v6(relayed(DHCP6_Solicit(trid=5) / DHCP6OptClientId(duid=CLIENT_DUID), 2), 547, 547))], "dhcp6")


SHAPES4 = [raw(offer(OFFER_OPTIONS)),
           raw(raw_offer(bytes([53, 1, 5, 52, 1, 3, 255]),
                         file=bytes([3, 4, 10, 9, 9, 1, 255]).ljust(128, b"\0"),
                         sname=bytes([6, 4, 1, 1, 1, 1, 255]).ljust(64, b"\0"))),
           raw(raw_offer(b"\x35\x01\x05\x52\x09\x01\x03abc\x02\x02xy\xff"))]
SHAPES6 = [raw(v6(reply([DHCP6OptIA_NA(iaid=1, ianaopts=[DHCP6OptIAAddress(addr="2001:db8::1")]),
                         DHCP6OptDNSServers(dnsservers=["2001:db8::53"])]))),
           raw(v6(relayed(DHCP6_Solicit(trid=5) / DHCP6OptClientId(duid=CLIENT_DUID), 3), 547, 547))]
# values that make a length, a count, a type or an overload lie
HOSTILE = [0, 1, 2, 3, 4, 5, 6, 12, 13, 16, 52, 0x7F, 0xFE, 0xFF]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([(f, "dhcp4") for f in SHAPES4] + [(f, "dhcp6") for f in SHAPES6]),
       st.lists(st.tuples(st.integers(0, 400), st.sampled_from(HOSTILE)), min_size=1, max_size=6))
def test_lying_lengths_counts_and_fields_stay_inside_the_capture(shape, edits):
    # bytes overwritten anywhere past the Ethernet header: IP and UDP lengths, option codes and lengths, the
    # overload, DUID and IA lengths, relay message types
    frame, name = shape
    data = bytearray(frame)
    for where, value in edits:
        data[14 + where % (len(data) - 14)] = value
    assert_app_reads_stop_at_the_capture([(1, bytes(data))], name)


def _table(path, name):
    with open_capture(path) as reader:
        return [app.table(decode(batch, fingerprint=False), name) for batch in reader]


def test_the_overloaded_captures_region_by_region_against_tshark(captures_real, tshark):
    # tshark lists the options of sname and file where option 52 stands (sname first); compared here as
    # sets per message, and the fields rogue-dhcp reads one by one
    for name in ("dhcp-option-52-overload", "dhcp-option-52-overload-both"):
        path = captures_real / f"suricata-verify/tests/{name}/input.pcap"
        rows = tshark.fields(path, "dhcp.option.type", "dhcp.option.dhcp_server_id",
                             "dhcp.option.router", "dhcp.option.domain_name_server",
                             options=("-E", "occurrence=a", "-E", "aggregator=;"))
        (tab,) = _table(path, "dhcp4")
        opt = tab.children["dhcp_opt"]
        assert len(tab) == len(rows) and not tab.truncated.any()
        for k, (types, server_id, router, dns) in enumerate(rows):
            codes = opt["code"][opt["parent"] == k].tolist()
            # tshark's End shows as type 0 (its 255 is in dhcp.option.end), as a pad run does
            assert sorted(0 if c == 255 else c for c in codes) == sorted(int(t) for t in types.split(";"))
            for field, text in (("server_id_lo", server_id), ("router_lo", router), ("dns_lo", dns)):
                assert (ip4(tab[field][k]) if tab.valid(field)[k] else "") == text.split(";")[0]


def test_fuzzed_bootp_captures_are_read_within_their_bytes(captures_real):
    # 90 (bootp_asan-2: 53) bytes captured of a 65,570-byte frame: the fixed header read as far as captured
    # (bootp_asan-2 holds 11 bytes of it, short of op..flags), no options
    for name, header in (("bootp_asan.pcap", True), ("bootp_asan-2.pcap", False)):
        (tab,) = _table(captures_real / "tcpdump/tests" / name, "dhcp4")
        assert len(tab) == 1 and tab.truncated[0] and int(tab["length"][0]) == 60_923
        assert bool(tab.valid("op")[0]) == header and not tab.valid("options")[0]
        assert_masks_consistent(tab)


def test_dhcpv6_duids_are_tsharks(captures_real, tshark):
    for name in ("dhcpv6-ia-na.pcap", "dhcpv6-ia-pd.pcap", "dhcpv6-ia-ta.pcap", "dhcpv6-rfc6355-duid-uuid.pcap"):
        path = captures_real / "tcpdump/tests" / name
        rows = tshark.fields(path, "dhcpv6.option.type", "dhcpv6.duid.bytes",
                             options=("-E", "occurrence=a", "-E", "aggregator=;"))
        (tab,) = _table(path, "dhcp6")
        for k, (types, duids) in enumerate(rows):
            order = [int(t) for t in types.split(";") if int(t) in (1, 2)]
            by_option = dict(zip(order, (bytes.fromhex(d.replace(":", "")) for d in duids.split(";"))))
            for code, who in ((1, "client"), (2, "server")):
                if code in by_option:
                    assert int(tab[f"{who}_duid_hash"][k]) == fnv1a(by_option[code])
                    assert int(tab[f"{who}_duid_len"][k]) == len(by_option[code])
                else:
                    assert not tab.valid(f"{who}_duid_hash")[k]


def test_the_notebook_api_serves_both_tables_and_their_children(captures_real):
    capture = detector.open(captures_real / "packetlife/pcaps/dhcp-auth.cap")
    messages = capture.app("dhcp4")
    assert messages["server_id"].tolist() == ["172.22.178.234"] and messages["giaddr"].tolist() == ["10.10.8.240"]
    assert capture.app("dhcp_opt")["code"].tolist()[:3] == [53, 1, 54]
    v6cap = detector.open(captures_real / "tcpdump/tests/dhcpv6-ia-pd.pcap")
    assert v6cap.app("dhcp6")["server_mac"].tolist()[1] == "00:11:22:33:44:55"
    assert v6cap.app("dhcp6_ia")["addr"].tolist() == ["2a00:1:1:100::"] * 3

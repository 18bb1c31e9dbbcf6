"""The `vrrp` application table on crafted frames: VRRPv2, VRRPv3 over IPv4 and IPv6, CARP, damage."""
from __future__ import annotations

import ipaddress
import struct

import numpy as np
from scapy.layers.inet import IP, in4_chksum
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.layers.vrrp import VRRP, VRRPv3
from scapy.packet import Raw, raw
from scapy.utils import checksum

from detector.decode.app import AppTable, table
from detector.decode.app.table import MORE, TRUNCATED
from detector.decode.app.vrrp import (
    CHECKSUM_AS_V2,
    CHECKSUM_GROUP_PSEUDO,
    CHECKSUM_NONE,
    CHECKSUM_RFC,
    F_CHECKSUM,
    F_EMPTY,
    F_NO_ADDRESS,
    F_PAST_LENGTH,
    F_SHORT,
    F_TYPE,
    F_VERSION,
    MAX_ADDRESSES,
)
from tests._app import (
    app_table,
    assert_app_reads_stop_at_the_capture,
    assert_masks_consistent,
    assert_snapshot_cuts_are_no_fault,
)

ETH = Ether(src="00:00:5e:00:01:33", dst="01:00:5e:00:00:12")
V4 = IP(src="192.0.2.2", dst="224.0.0.18", ttl=255, proto=112)
V6 = IPv6(src="fe80::2", dst="ff02::12", hlim=255, nh=112)


def carp(vhid=1, advskew=0, advbase=1, demotion=0) -> Raw:
    """An OpenBSD CARP advertisement (netinet/ip_carp.h), checksummed: scapy's contrib layer would rebind
    IP protocol 112 for every test of the session."""
    header = struct.pack("!BBBBBBH", 0x21, vhid, advskew, 7, demotion, advbase, 0) + bytes(28)
    return Raw(header[:6] + struct.pack("!H", checksum(header)) + header[8:])


def v2(vrid=51, priority=200, addrs=("192.0.2.1",), adv=1, auth_type=0):
    return ETH / V4 / VRRP(vrid=vrid, priority=priority, addrlist=list(addrs), adv=adv, authtype=auth_type)


def addresses(tab: AppTable, message: int) -> list[str]:
    child = tab.children["vrrp_addr"]
    rows = np.flatnonzero(child["parent"] == message)
    out = []
    for k in rows:
        value = ipaddress.IPv6Address((int(child["ip_hi"][k]) << 64) | int(child["ip_lo"][k]))
        out.append(str(value.ipv4_mapped or value))
    return out


def test_vrrp_v2_fields_addresses_and_checksum():
    tab = app_table([(1, v2(addrs=("192.0.2.1", "192.0.2.9"), adv=3, auth_type=1))], "vrrp")
    assert len(tab) == 1
    assert int(tab["version"][0]) == 2 and int(tab["type"][0]) == 1 and int(tab["carp"][0]) == 0
    assert (int(tab["vrid"][0]), int(tab["priority"][0]), int(tab["addr_count"][0])) == (51, 200, 2)
    assert int(tab["auth_type"][0]) == 1 and int(tab["adver_int"][0]) == 300
    assert int(tab["checksum_ok"][0]) == 1 and tab.valid("checksum_ok")[0]
    assert not tab.truncated[0] and not tab.more[0]
    assert addresses(tab, 0) == ["192.0.2.1", "192.0.2.9"]
    assert int(tab["frame"][0]) == 1 and int(tab["row"][0]) == 0
    assert_masks_consistent(tab)


def test_vrrp_v3_ipv4_and_ipv6_verify_the_pseudo_header_checksum():
    four = ETH / V4 / VRRPv3(vrid=7, priority=100, ipcount=1, addrlist=["198.51.100.1"], adv=150)
    six = (Ether(src="00:00:5e:00:02:07", dst="33:33:00:00:00:12") / V6
           / VRRPv3(vrid=7, priority=255, ipcount=2, addrlist=["2001:db8::1", "fe80::1"], adv=100))
    tab = app_table([(1, four), (1, six)], "vrrp")
    assert tab["version"].tolist() == [3, 3]
    assert tab["adver_int"].tolist() == [150, 100]        # centiseconds, as VRRPv3 sends them
    assert tab["priority"].tolist() == [100, 255]
    assert tab["checksum_ok"].tolist() == [1, 1]
    assert not tab.valid("auth_type").any()               # VRRPv3 has none
    assert addresses(tab, 0) == ["198.51.100.1"]
    assert addresses(tab, 1) == ["2001:db8::1", "fe80::1"]


def test_a_wrong_checksum_is_reported_not_hidden():
    frame = bytearray(raw(v2()))
    frame[14 + 20 + 6] ^= 0x55              # the VRRP checksum's first byte
    tab = app_table([(1, bytes(frame))], "vrrp")
    assert tab.valid("checksum_ok")[0] and int(tab["checksum_ok"][0]) == 0


def test_vrrp_inside_a_vlan_tag_is_found_from_the_decoded_offsets():
    tagged = Ether(src="00:00:5e:00:01:33", dst="01:00:5e:00:00:12") / Dot1Q(vlan=20) / V4 / VRRP(vrid=9, addrlist=[
        "192.0.2.1"])
    tab = app_table([(1, tagged)], "vrrp")
    assert int(tab["vrid"][0]) == 9 and addresses(tab, 0) == ["192.0.2.1"]


def test_carp_is_told_apart_as_wireshark_does():
    # OpenBSD CARP: version 2, type 1, authlen 7 in the byte VRRP counts its addresses in, 36 bytes
    message = ETH / V4 / carp(vhid=5, advskew=64, advbase=2, demotion=3)
    tab = app_table([(1, message)], "vrrp")
    assert int(tab["carp"][0]) == 1
    assert (int(tab["vrid"][0]), int(tab["carp_advskew"][0]), int(tab["carp_advbase"][0]),
            int(tab["carp_demote"][0])) == (5, 64, 2, 3)
    assert int(tab["adver_int"][0]) == 225              # advbase 2 s + advskew 64/256 s
    assert not tab.valid("priority")[0] and len(tab.children["vrrp_addr"]) == 0
    assert int(tab["checksum_ok"][0]) == 1
    # a VRRPv2 message of seven addresses has the same byte 3 but is 44 bytes: still CARP by that test,
    # while six addresses (40 bytes) stay VRRP
    six = app_table([(1, v2(addrs=[f"192.0.2.{k}" for k in range(1, 7)]))], "vrrp")
    assert int(six["carp"][0]) == 0 and int(six["addr_count"][0]) == 6


def test_more_addresses_than_the_cap_are_flagged_more():
    for extra in (0, 1, 4):
        many = [f"192.0.2.{k}" for k in range(1, MAX_ADDRESSES + extra + 1)]
        tab = app_table([(1, v2(addrs=many))], "vrrp")
        assert int(tab["addr_count"][0]) == MAX_ADDRESSES + extra
        assert bool(tab.more[0]) == (extra > 0) and not tab.truncated[0]
        assert addresses(tab, 0) == many[:MAX_ADDRESSES]


def test_an_address_count_larger_than_the_message_masks_nothing_it_did_not_read():
    header = struct.pack("!BBBBBBH", 0x21, 51, 100, 9, 0, 1, 0)     # declares 9 addresses
    frame = ETH / V4 / Raw(header + bytes([192, 0, 2, 1]))
    tab = app_table([(1, frame)], "vrrp")
    assert tab.truncated[0]
    assert int(tab["addr_count"][0]) == 9
    assert addresses(tab, 0) == ["192.0.2.1"]
    assert int(tab["valid"][0]) & int(TRUNCATED) and not int(tab["valid"][0]) & int(MORE)


def test_an_empty_vrrp_packet_is_one_truncated_entry():
    # packetlife's VRRP_Malformed_DoS.cap: protocol 112 and no byte of VRRP
    frame = ETH / IP(src="192.0.2.2", dst="224.0.0.18", ttl=5, proto=112)
    tab = app_table([(1, frame)], "vrrp")
    assert len(tab) == 1 and tab.truncated[0] and int(tab["length"][0]) == 0
    assert not tab.valid("version")[0]


def test_every_cut_reads_only_captured_bytes():
    assert_app_reads_stop_at_the_capture(
        [(1, v2(addrs=("192.0.2.1", "192.0.2.9"))), (1, ETH / V4 / carp(vhid=5)),
         (1, ETH / V6 / VRRPv3(vrid=7, ipcount=1, addrlist=["2001:db8::1"]))], "vrrp")


def test_tables_are_built_once_per_batch_and_only_when_asked():
    from detector.decode import decode
    from tests.test_decode import make_batch

    batch = decode(make_batch([(1, raw(v2()))]), fingerprint=False)
    assert batch.app == {}
    first = table(batch, "vrrp")
    assert table(batch, "vrrp") is first and set(batch.app) == {"vrrp"}
    built = decode(make_batch([(1, raw(v2()))]), fingerprint=False, tables=("vrrp",))
    assert set(built.app) == {"vrrp"} and len(built.app["vrrp"]) == 1


def test_to_frame_masks_absent_fields():
    frame = app_table([(1, ETH / V4 / carp(vhid=5)), (1, v2())], "vrrp").to_frame()
    assert frame["priority"].isna().tolist() == [True, False]
    assert str(frame["priority"].dtype) == "UInt8"
    assert frame["truncated"].tolist() == [False, False]


def _v3_summed(ip_layer, form: str, **fields):
    """A VRRPv3 advertisement over `ip_layer` whose checksum is summed as `form` says: "rfc" (the pseudo-header
    of its own addresses), "as_v2" (the message alone), "group" (a pseudo-header naming 224.0.0.18)."""
    message = raw(IP(src=ip_layer.src, dst=ip_layer.dst, proto=112) / VRRPv3(chksum=0, **fields))[20:]
    if form == "rfc":
        value = in4_chksum(112, ip_layer, message)
    elif form == "as_v2":
        value = checksum(message)
    else:
        value = in4_chksum(112, IP(src=ip_layer.src, dst="224.0.0.18"), message)
    return ETH / ip_layer / Raw(message[:6] + struct.pack("!H", value) + message[8:])


def test_vrrpv3_over_ipv4_verifies_in_every_form_senders_use_and_says_which():
    unicast = IP(src="192.0.2.2", dst="192.0.2.3", ttl=255, proto=112)
    fields = {"vrid": 7, "priority": 100, "ipcount": 1, "addrlist": ["198.51.100.1"], "adv": 100}
    frames = [_v3_summed(V4, "rfc", **fields), _v3_summed(V4, "as_v2", **fields),
              _v3_summed(unicast, "group", **fields), _v3_summed(unicast, "rfc", **fields)]
    tab = app_table([(1, frame) for frame in frames], "vrrp")
    assert tab["checksum_form"].tolist() == [CHECKSUM_RFC, CHECKSUM_AS_V2, CHECKSUM_GROUP_PSEUDO, CHECKSUM_RFC]
    assert tab["checksum_ok"].tolist() == [1, 0, 0, 1]       # checksum_ok stays the RFC's verdict
    assert tab["fault"].tolist() == [0, 0, 0, 0]


def test_vrrpv3_over_ipv6_has_only_the_pseudo_header_form():
    message = raw(V6 / VRRPv3(chksum=0, vrid=7, ipcount=1, addrlist=["2001:db8::1"]))[40:]
    frame = (Ether(src="00:00:5e:00:02:07", dst="33:33:00:00:00:12") / V6
             / Raw(message[:6] + struct.pack("!H", checksum(message)) + message[8:]))
    tab = app_table([(1, frame)], "vrrp")
    assert int(tab["checksum_form"][0]) == CHECKSUM_NONE and int(tab["fault"][0]) == F_CHECKSUM


def test_faults_name_what_is_wrong_by_the_message_own_bytes():
    def message(first=0x21, count=1, addrs=(b"\xc0\x00\x02\x01",), auth=True) -> bytes:
        body = struct.pack("!BBBBBBH", first, 51, 100, count, 0, 1, 0) + b"".join(addrs) + (bytes(8) if auth else b"")
        return body[:6] + struct.pack("!H", checksum(body)) + body[8:]

    bad_sum = bytearray(message())
    bad_sum[7] ^= 0x01
    cases = [
        (ETH / V4, F_EMPTY),
        (ETH / V4 / Raw(b"\x21\x33\x64\x01\x00"), F_SHORT),
        (ETH / V4 / Raw(message(first=0x41)), F_VERSION),
        (ETH / V4 / Raw(message(first=0x22)), F_TYPE),
        (ETH / V4 / Raw(message(count=9)), F_PAST_LENGTH),
        (ETH / V4 / Raw(message(auth=False)), F_PAST_LENGTH),             # VRRPv2's 8 bytes of authentication
        (ETH / V4 / Raw(message(count=0, addrs=())), F_NO_ADDRESS),
        (ETH / V4 / Raw(bytes(bad_sum)), F_CHECKSUM),
        (ETH / V4 / Raw(message()), 0),
        (ETH / V4 / carp(vhid=5), 0),
    ]
    tab = app_table([(1, frame) for frame, _ in cases], "vrrp")
    assert tab["fault"].tolist() == [fault for _, fault in cases]
    assert_masks_consistent(tab)


def test_a_message_cut_by_the_snapshot_length_is_not_malformed():
    assert_snapshot_cuts_are_no_fault(
        [(1, v2(addrs=("192.0.2.1", "192.0.2.9"))), (1, ETH / V4 / carp(vhid=5)),
         (1, ETH / V6 / VRRPv3(vrid=7, ipcount=1, addrlist=["2001:db8::1"])),
         (1, _v3_summed(V4, "as_v2", vrid=7, ipcount=1, addrlist=["198.51.100.1"]))], "vrrp")

"""The `ospf` application table on crafted frames: OSPFv2 and OSPFv3, every packet type, carriage, damage."""
from __future__ import annotations

import ipaddress
import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.contrib.ospf import (
    OSPF_DBDesc,
    OSPF_Hdr,
    OSPF_Hello,
    OSPF_Link,
    OSPF_LLS_Hdr,
    OSPF_LSA_Hdr,
    OSPF_LSAck,
    OSPF_LSReq,
    OSPF_LSReq_Item,
    OSPF_LSUpd,
    OSPF_Network_LSA,
    OSPF_Router_LSA,
    OSPFv3_DBDesc,
    OSPFv3_Hdr,
    OSPFv3_Hello,
    OSPFv3_LSA_Hdr,
    OSPFv3_LSReq,
    OSPFv3_LSReq_Item,
    OSPFv3_LSUpd,
    OSPFv3_Router_LSA,
)
from scapy.layers.inet import GRE, IP
from scapy.layers.inet6 import IPv6, in6_chksum
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw, raw

from detector.decode import app, decode
from detector.decode.app.ospf import (
    F_BODY,
    F_CHECKSUM,
    F_ELEMENTS,
    F_LENGTH_LONG,
    F_LENGTH_SHORT,
    F_LSA_CHECKSUM,
    F_LSA_COUNT,
    F_LSA_LENGTH,
    F_NEIGHBORS,
    F_SHORT,
    F_TYPE,
    F_VERSION,
    MAX_LSAS,
    MAX_NEIGHBORS,
)
from detector.ingest import open_capture
from tests._app import (
    app_table,
    assert_app_reads_stop_at_the_capture,
    assert_masks_consistent,
    assert_snapshot_cuts_are_no_fault,
)
from tests.test_oracle_app import NAMED

ETH = Ether(src="02:00:00:0f:00:01", dst="01:00:5e:00:00:05")
ETH6 = Ether(src="02:00:00:0f:00:01", dst="33:33:00:00:00:05")
ALL_SPF = IP(src="10.0.0.1", dst="224.0.0.5", ttl=1)
TO_NEIGHBOR = IP(src="10.0.0.1", dst="10.0.0.2", ttl=1)
ALL_SPF6 = IPv6(src="fe80::1", dst="ff02::5", hlim=1)
HEADER = 14 + 20                     # Ethernet and IPv4 before the OSPF header


def ip(value: int) -> str:
    return str(ipaddress.IPv4Address(int(value)))


def one(frames):
    return app_table([(1, frame) for frame in frames], "ospf")


def children(tab, name: str, message: int, field: str) -> list[int]:
    child = tab.children[name]
    return child[field][child["parent"] == message].tolist()


def hello(neighbors=("2.2.2.2", "3.3.3.3"), hello_interval=10, dead_interval=40, **header):
    return ETH / ALL_SPF / OSPF_Hdr(src="1.1.1.1", area="0.0.0.1", **header) / OSPF_Hello(
        mask="255.255.255.0", hellointerval=hello_interval, options=0x02, prio=7, deadinterval=dead_interval,
        router="10.0.0.1", backup="10.0.0.2", neighbors=list(neighbors))


def router_lsa(seq=0x80000005, adv="1.1.1.1"):
    return OSPF_Router_LSA(id=adv, adrouter=adv, seq=seq, linklist=[
        OSPF_Link(id="10.0.0.0", data="255.255.255.0", type=3, metric=10)])


def lsa_headers(count: int, cls=OSPF_LSA_Hdr):
    return [cls(type=1, id=f"10.{k >> 8}.{k & 255}.1", adrouter="1.1.1.1", seq=0x80000001 + k) for k in range(count)]


def test_v2_hello_header_fields_neighbours_and_checksum():
    tab = one([hello()])
    assert len(tab) == 1 and tab["frame"].tolist() == [1]
    assert (int(tab["version"][0]), int(tab["type"][0]), int(tab["length"][0])) == (2, 1, 52)
    assert ip(tab["router_id"][0]) == "1.1.1.1" and ip(tab["area_id"][0]) == "0.0.0.1"
    assert int(tab["auth_type"][0]) == 0 and not tab.valid("instance_id")[0]
    assert ip(tab["network_mask"][0]) == "255.255.255.0" and not tab.valid("interface_id")[0]
    assert (int(tab["hello_interval"][0]), int(tab["dead_interval"][0]), int(tab["priority"][0])) == (10, 40, 7)
    assert (ip(tab["dr"][0]), ip(tab["bdr"][0]), int(tab["options"][0])) == ("10.0.0.1", "10.0.0.2", 2)
    assert int(tab["neighbor_count"][0]) == 2
    assert [ip(n) for n in children(tab, "ospf_nbr", 0, "router_id")] == ["2.2.2.2", "3.3.3.3"]
    assert tab.valid("checksum_ok")[0] and int(tab["checksum_ok"][0]) == 1
    assert not tab.valid("mtu")[0] and not tab.valid("lsa_count")[0]
    assert not tab.truncated[0] and not tab.more[0]
    assert_masks_consistent(tab)


def test_v2_database_description_flags_mtu_and_lsa_headers():
    frame = ETH / TO_NEIGHBOR / OSPF_Hdr(src="1.1.1.1") / OSPF_DBDesc(
        mtu=1500, options=0x42, dbdescr=0x07, ddseq=0x1234ABCD, lsaheaders=lsa_headers(2))
    tab = one([frame])
    assert (int(tab["mtu"][0]), int(tab["dd_flags"][0]), int(tab["dd_seq"][0]), int(tab["options"][0])) == (
        1500, 7, 0x1234ABCD, 0x42)
    assert children(tab, "ospf_lsa", 0, "seq") == [0x80000001, 0x80000002]
    assert [ip(v) for v in children(tab, "ospf_lsa", 0, "ls_id")] == ["10.0.0.1", "10.0.1.1"]
    assert children(tab, "ospf_lsa", 0, "type") == [1, 1]
    assert not tab.valid("hello_interval")[0]
    lsa = tab.children["ospf_lsa"]
    assert lsa.valid("age").all() and not lsa.valid("checksum_ok").any()   # a header only: nothing to verify


def test_ls_request_lists_what_it_asks_for_without_header_fields():
    v2 = ETH / TO_NEIGHBOR / OSPF_Hdr(src="1.1.1.1") / OSPF_LSReq(requests=[
        OSPF_LSReq_Item(type=1, id="2.2.2.2", adrouter="2.2.2.2"),
        OSPF_LSReq_Item(type=5, id="192.0.2.0", adrouter="3.3.3.3")])
    v3 = ETH6 / ALL_SPF6 / OSPFv3_Hdr(src="1.1.1.1") / OSPFv3_LSReq(requests=[
        OSPFv3_LSReq_Item(type=0x2001, id="0.0.0.0", adrouter="2.2.2.2")])
    tab = one([v2, v3])
    assert children(tab, "ospf_lsa", 0, "type") == [1, 5]
    assert [ip(v) for v in children(tab, "ospf_lsa", 0, "adv_router")] == ["2.2.2.2", "3.3.3.3"]
    assert children(tab, "ospf_lsa", 1, "type") == [0x2001]
    lsa = tab.children["ospf_lsa"]
    assert lsa.valid("ls_id").all() and not lsa.valid("seq").any() and not lsa.valid("age").any()
    assert_masks_consistent(tab)


def test_ls_update_walks_each_lsa_by_its_length_and_verifies_its_fletcher_checksum():
    network = OSPF_Network_LSA(id="10.0.0.1", adrouter="1.1.1.1", seq=0x80000009, mask="255.255.255.0",
                               routerlist=["1.1.1.1", "2.2.2.2"])
    frame = ETH / ALL_SPF / OSPF_Hdr(src="1.1.1.1") / OSPF_LSUpd(lsalist=[router_lsa(), network])
    tab = one([frame])
    assert int(tab["lsa_count"][0]) == 2 and not tab.truncated[0]
    assert children(tab, "ospf_lsa", 0, "type") == [1, 2]
    assert children(tab, "ospf_lsa", 0, "seq") == [0x80000005, 0x80000009]
    assert children(tab, "ospf_lsa", 0, "length") == [36, 32]
    assert children(tab, "ospf_lsa", 0, "checksum_ok") == [1, 1]
    damaged = bytearray(raw(frame))
    damaged[HEADER + 24 + 4 + 30] ^= 0x01            # a byte in the first LSA's body (its link's data)
    tab = one([bytes(damaged)])
    assert children(tab, "ospf_lsa", 0, "checksum_ok") == [0, 1]
    assert int(tab["checksum_ok"][0]) == 0          # the packet's own checksum catches it too


def test_ls_acknowledgment_lists_lsa_headers():
    frame = ETH / ALL_SPF / OSPF_Hdr(src="1.1.1.1") / OSPF_LSAck(lsaheaders=lsa_headers(3))
    tab = one([frame])
    assert int(tab["type"][0]) == 5
    assert children(tab, "ospf_lsa", 0, "seq") == [0x80000001, 0x80000002, 0x80000003]


def test_v3_hello_dbd_and_update_over_ipv6_verify_the_pseudo_header_checksum():
    hello6 = ETH6 / ALL_SPF6 / OSPFv3_Hdr(src="1.1.1.1", area="0.0.0.0", instance=3) / OSPFv3_Hello(
        intid=5, prio=1, options=0x000113, hellointerval=10, deadinterval=40, router="1.1.1.1",
        neighbors=["2.2.2.2"])
    dbd6 = ETH6 / ALL_SPF6 / OSPFv3_Hdr(src="1.1.1.1") / OSPFv3_DBDesc(
        options=0x13, mtu=9000, dbdescr=0x03, ddseq=77, lsaheaders=lsa_headers(1, OSPFv3_LSA_Hdr))
    update6 = ETH6 / ALL_SPF6 / OSPFv3_Hdr(src="1.1.1.1") / OSPFv3_LSUpd(lsalist=[
        OSPFv3_Router_LSA(id="0.0.0.0", adrouter="1.1.1.1", seq=0x80000002)])
    tab = one([hello6, dbd6, update6])
    assert tab["version"].tolist() == [3, 3, 3] and tab["checksum_ok"].tolist() == [1, 1, 1]
    assert int(tab["instance_id"][0]) == 3 and not tab.valid("auth_type").any()
    assert (int(tab["interface_id"][0]), int(tab["options"][0]), int(tab["dead_interval"][0])) == (5, 0x113, 40)
    assert not tab.valid("network_mask")[0]
    assert [ip(n) for n in children(tab, "ospf_nbr", 0, "router_id")] == ["2.2.2.2"]
    assert (int(tab["mtu"][1]), int(tab["dd_flags"][1]), int(tab["dd_seq"][1])) == (9000, 3, 77)
    assert children(tab, "ospf_lsa", 2, "type") == [0x2001]
    assert children(tab, "ospf_lsa", 2, "checksum_ok") == [1]
    lsa = tab.children["ospf_lsa"]
    assert not lsa.valid("options").any()           # OSPFv3 LSA headers carry none


def test_a_wrong_checksum_is_reported_and_an_absent_one_is_not_judged():
    frame = bytearray(raw(hello()))
    frame[HEADER + 12] ^= 0x40
    unset = hello(chksum=0)
    crypto = ETH / ALL_SPF / OSPF_Hdr(src="1.1.1.1", len=44, authtype=2, keyid=1,
                                              authdatalen=16, seq=9) / OSPF_Hello(
        hellointerval=10, deadinterval=40) / Raw(bytes(16))      # the 16-byte keyed-MD5 digest follows the packet
    tab = one([bytes(frame), unset, crypto])
    assert tab.valid("checksum_ok").tolist() == [True, False, False]
    assert int(tab["checksum_ok"][0]) == 0
    assert int(tab["auth_type"][2]) == 2 and not tab.truncated[2]
    assert int(tab["neighbor_count"][2]) == 0       # the digest is no neighbour: the packet ends at its length


def test_v3_checksum_over_the_whole_payload_when_a_trailer_follows():
    """An authentication trailer (RFC 7166) after the packet: FRRouting's kernel sums the whole IPv6 payload."""
    packet = raw(OSPFv3_Hdr(src="1.1.1.1", chksum=0) / OSPFv3_Hello(hellointerval=10, deadinterval=40))
    trailer = struct.pack("!HHHHQ", 1, 48, 0, 1, 9) + bytes(32)
    payload = bytearray(packet + trailer)
    ipv6 = IPv6(src="fe80::1", dst="ff02::5", hlim=1, nh=89)
    payload[12:14] = struct.pack("!H", in6_chksum(89, ipv6 / Raw(bytes(payload)), bytes(payload)))
    kernel = ETH6 / ipv6 / Raw(bytes(payload))
    rfc5340 = bytearray(packet + trailer)
    rfc5340[12:14] = struct.pack("!H", in6_chksum(89, ipv6 / Raw(packet), packet))
    tab = one([kernel, ETH6 / ipv6 / Raw(bytes(rfc5340))])
    assert tab["checksum_ok"].tolist() == [1, 1] and tab.valid("checksum_ok").all()
    assert tab["length"].tolist() == [36, 36] and not tab.truncated.any()


def test_lls_block_after_a_hello_is_not_read_as_neighbours():
    frame = ETH / ALL_SPF / OSPF_Hdr(src="1.1.1.1") / OSPF_Hello(options=0x12, neighbors=["2.2.2.2"]) / OSPF_LLS_Hdr()
    tab = one([frame])
    assert int(tab["neighbor_count"][0]) == 1 and int(tab["checksum_ok"][0]) == 1
    assert [ip(n) for n in children(tab, "ospf_nbr", 0, "router_id")] == ["2.2.2.2"]


def test_ospf_in_a_vlan_and_in_gre_is_found_from_the_decoded_offsets():
    tagged = Ether(src="02:00:00:0f:00:01", dst="01:00:5e:00:00:05") / Dot1Q(vlan=30) / ALL_SPF / OSPF_Hdr(
        src="7.7.7.7") / OSPF_Hello(neighbors=["8.8.8.8"])
    tunnel = (Ether() / IP(src="192.0.2.1", dst="192.0.2.2") / GRE() / IP(src="172.16.0.1", dst="224.0.0.5", ttl=1)
              / OSPF_Hdr(src="9.9.9.9") / OSPF_Hello())
    tab = one([tagged, tunnel])
    assert [ip(r) for r in tab["router_id"]] == ["7.7.7.7", "9.9.9.9"]
    assert tab["checksum_ok"].tolist() == [1, 1]


@pytest.mark.parametrize("extra", [0, 1, 6])
def test_more_neighbours_and_lsas_than_the_caps_are_flagged_more(extra):
    many = [f"10.1.{k >> 8}.{k & 255}" for k in range(MAX_NEIGHBORS + extra)]
    lsas = [router_lsa(seq=0x80000001 + k, adv=f"10.2.{k >> 8}.{k & 255}") for k in range(MAX_LSAS + extra)]
    frames = [hello(neighbors=many),
              ETH / ALL_SPF / OSPF_Hdr(src="1.1.1.1") / OSPF_LSUpd(lsalist=lsas),
              ETH / ALL_SPF / OSPF_Hdr(src="1.1.1.1") / OSPF_LSAck(lsaheaders=lsa_headers(MAX_LSAS + extra))]
    tab = one(frames)
    assert tab.more.tolist() == [extra > 0] * 3 and not tab.truncated.any()
    assert int(tab["neighbor_count"][0]) == MAX_NEIGHBORS + extra
    assert [ip(n) for n in children(tab, "ospf_nbr", 0, "router_id")] == many[:MAX_NEIGHBORS]
    assert int(tab["lsa_count"][1]) == MAX_LSAS + extra
    assert children(tab, "ospf_lsa", 1, "seq") == [0x80000001 + k for k in range(MAX_LSAS)]
    assert len(children(tab, "ospf_lsa", 2, "seq")) == MAX_LSAS


def test_an_lsa_count_larger_than_the_packet_lists_what_is_there_and_reads_no_further():
    two = raw(router_lsa(seq=0x80000001)) + raw(router_lsa(seq=0x80000002))
    frame = ETH / ALL_SPF / OSPF_Hdr(src="1.1.1.1", type=4) / Raw(struct.pack("!I", 1000) + two)
    tab = one([frame])
    assert int(tab["lsa_count"][0]) == 1000 and tab.truncated[0] and not tab.more[0]
    assert children(tab, "ospf_lsa", 0, "seq") == [0x80000001, 0x80000002]
    assert children(tab, "ospf_lsa", 0, "checksum_ok") == [1, 1]
    assert int(tab["checksum_ok"][0]) == 1          # a well-summed packet that lies about its count
    # with cryptographic authentication a digest follows the packet (HMAC-SHA1, RFC 5709: 20 bytes, the size of
    # an LSA header): the walk stops at the packet's length, not at the IP packet's
    signed = ETH / ALL_SPF / OSPF_Hdr(src="1.1.1.1", type=4, len=24 + 4 + len(two), authtype=2, keyid=1,
                                      authdatalen=20, seq=5) / Raw(struct.pack("!I", 3) + two + bytes(range(20)))
    tab = one([signed])
    assert tab.truncated[0] and children(tab, "ospf_lsa", 0, "seq") == [0x80000001, 0x80000002]


@pytest.mark.parametrize("length, listed_seqs", [(12, [0x80000001]), (200, [0x80000001])])
def test_an_lsa_length_that_cannot_be_or_runs_past_the_packet_stops_the_walk(length, listed_seqs):
    first = bytearray(raw(router_lsa(seq=0x80000001)))
    first[18:20] = struct.pack("!H", length)
    frame = ETH / ALL_SPF / OSPF_Hdr(src="1.1.1.1", type=4) / Raw(
        struct.pack("!I", 2) + bytes(first) + raw(router_lsa(seq=0x80000002)))
    tab = one([frame])
    assert tab.truncated[0]
    assert children(tab, "ospf_lsa", 0, "seq") == listed_seqs
    lsa = tab.children["ospf_lsa"]
    assert lsa.truncated.tolist() == [True] and not lsa.valid("checksum_ok").any()


def test_lengths_that_lie_flag_truncated_and_read_no_body():
    longer = bytearray(raw(hello()))
    longer[HEADER + 2:HEADER + 4] = struct.pack("!H", 400)         # past the IP packet
    shorter = bytearray(raw(hello()))
    shorter[HEADER + 2:HEADER + 4] = struct.pack("!H", 20)         # shorter than the header
    ragged = bytearray(raw(hello()))
    ragged[HEADER + 2:HEADER + 4] = struct.pack("!H", 50)          # half a neighbour
    tab = one([bytes(longer), bytes(shorter), bytes(ragged)])
    assert tab.truncated.tolist() == [True, True, True]
    assert tab.valid("router_id").all()                            # the header was there to read
    assert tab.valid("hello_interval").tolist() == [False, False, True]
    assert [ip(n) for n in children(tab, "ospf_nbr", 2, "router_id")] == ["2.2.2.2"]
    assert int(tab["neighbor_count"][2]) == 1
    assert not tab.valid("checksum_ok")[0]


def test_an_empty_packet_an_unknown_version_and_a_short_header():
    empty = ETH / IP(src="10.0.0.1", dst="224.0.0.5", proto=89)
    version4 = ETH / IP(src="10.0.0.1", dst="224.0.0.5", proto=89) / Raw(b"\x04\x01" + bytes(30))
    short = ETH / IP(src="10.0.0.1", dst="224.0.0.5", proto=89) / Raw(b"\x02\x01\x00\x2c" + bytes(10))
    tab = one([empty, version4, short])
    assert tab.truncated.tolist() == [True, False, True]
    assert tab.valid("version").tolist() == [False, True, True]
    assert int(tab["version"][1]) == 4 and not tab.valid("router_id")[1]
    assert not tab.valid("length")[2]
    assert_masks_consistent(tab)


def _packet(kind: int, body: bytes, length: int | None = None, version: int = 2) -> bytes:
    """An OSPF packet of type `kind` over IPv4 with `body` after the header, its length field `length` (default:
    the truth) and no checksum (0: not computed, so not verified)."""
    head = struct.pack("!BBH4s4sHHQ", version, kind, 24 + len(body) if length is None else length,
                       bytes([1, 1, 1, 1]), bytes(4), 0, 0, 0)
    return raw(ETH / IP(src="10.0.0.1", dst="224.0.0.5", ttl=1, proto=89) / Raw(head + body))


def test_faults_name_what_is_wrong_by_the_packet_own_lengths_and_sums():
    body = raw(OSPF_Hello(neighbors=["2.2.2.2"]))
    lsa = raw(router_lsa(seq=0x80000001))
    bad_lsa = lsa[:-1] + bytes([lsa[-1] ^ 0x01])
    bad_sum = bytearray(raw(hello()))
    bad_sum[HEADER + 12] ^= 0x01
    cases = [
        (raw(ETH / IP(src="10.0.0.1", dst="224.0.0.5", proto=89)), F_SHORT),
        (_packet(1, body, version=4), F_VERSION),
        (raw(ETH / IP(src="10.0.0.1", dst="224.0.0.5", proto=89) / Raw(b"\x02\x01\x00\x2c" + bytes(10))), F_SHORT),
        (_packet(1, body, length=20), F_LENGTH_SHORT),
        (_packet(1, body, length=400), F_LENGTH_LONG),
        (_packet(1, body + bytes(2)), F_NEIGHBORS),
        (_packet(9, bytes(8)), F_TYPE),
        (_packet(1, bytes(8)), F_BODY),
        (_packet(2, bytes(8) + bytes(30)), F_ELEMENTS),
        (_packet(3, bytes(18)), F_ELEMENTS),
        (_packet(4, struct.pack("!I", 3) + lsa + raw(router_lsa(seq=0x80000002))), F_LSA_COUNT),
        (_packet(4, struct.pack("!I", 1) + lsa[:18] + struct.pack("!H", 12)), F_LSA_LENGTH),
        (_packet(4, struct.pack("!I", 1) + bad_lsa), F_LSA_CHECKSUM),
        (bytes(bad_sum), F_CHECKSUM),
        (raw(hello()), 0),
    ]
    tab = one([frame for frame, _ in cases])
    assert tab["fault"].tolist() == [fault for _, fault in cases]
    assert_masks_consistent(tab)


def test_a_packet_cut_by_the_snapshot_length_is_not_malformed():
    assert_snapshot_cuts_are_no_fault(
        [(1, hello()),
         (1, ETH / TO_NEIGHBOR / OSPF_Hdr(src="1.1.1.1") / OSPF_DBDesc(mtu=1500, lsaheaders=lsa_headers(2))),
         (1, ETH / ALL_SPF / OSPF_Hdr(src="1.1.1.1") / OSPF_LSUpd(lsalist=[router_lsa(), router_lsa(seq=9)])),
         (1, ETH / TO_NEIGHBOR / OSPF_Hdr(src="1.1.1.1") / OSPF_LSReq(requests=[OSPF_LSReq_Item()] * 2)),
         (1, ETH6 / ALL_SPF6 / OSPFv3_Hdr(src="1.1.1.1") / OSPFv3_Hello(neighbors=["2.2.2.2"]))], "ospf")


def test_every_cut_reads_only_captured_bytes():
    assert_app_reads_stop_at_the_capture(
        [(1, hello()),
         (1, ETH / TO_NEIGHBOR / OSPF_Hdr(src="1.1.1.1") / OSPF_DBDesc(mtu=1500, lsaheaders=lsa_headers(1))),
         (1, ETH / ALL_SPF / OSPF_Hdr(src="1.1.1.1") / OSPF_LSUpd(lsalist=[router_lsa()])),
         (1, ETH / TO_NEIGHBOR / OSPF_Hdr(src="1.1.1.1") / OSPF_LSReq(requests=[OSPF_LSReq_Item()])),
         (1, ETH6 / ALL_SPF6 / OSPFv3_Hdr(src="1.1.1.1") / OSPFv3_Hello(neighbors=["2.2.2.2"]))], "ospf")


MUTATED_SHAPES = [
    raw(hello()),
    raw(ETH / TO_NEIGHBOR / OSPF_Hdr(src="1.1.1.1") / OSPF_DBDesc(mtu=1500, lsaheaders=lsa_headers(3))),
    raw(ETH / ALL_SPF / OSPF_Hdr(src="1.1.1.1") / OSPF_LSUpd(lsalist=[router_lsa(), router_lsa(seq=0x80000009)])),
    raw(ETH / TO_NEIGHBOR / OSPF_Hdr(src="1.1.1.1") / OSPF_LSReq(requests=[OSPF_LSReq_Item()] * 3)),
    raw(ETH6 / ALL_SPF6 / OSPFv3_Hdr(src="1.1.1.1") / OSPFv3_LSUpd(lsalist=[OSPFv3_Router_LSA()])),
]


@settings(max_examples=150, deadline=None)
@given(shape=st.integers(0, len(MUTATED_SHAPES) - 1),
       writes=st.lists(st.tuples(st.integers(0, 1 << 10), st.sampled_from([0, 1, 2, 3, 4, 5, 19, 20, 21, 0x7F, 0xFF])),
                       min_size=1, max_size=6))
def test_hostile_lengths_and_counts_never_read_past_the_capture(shape, writes):
    """Any OSPF byte set to a hostile value (lengths, counts, types, versions): every cut still reads only what
    was captured, with every masked field at 0."""
    frame = bytearray(MUTATED_SHAPES[shape])
    start = HEADER if frame[12:14] == b"\x08\x00" else 14 + 40
    for at, value in writes:
        frame[start + at % (len(frame) - start)] = value
    assert_app_reads_stop_at_the_capture([(1, bytes(frame))], "ospf")


def test_to_frame_masks_absent_fields():
    frame = one([hello(), ETH / ALL_SPF / OSPF_Hdr(src="1.1.1.1") / OSPF_LSAck(lsaheaders=lsa_headers(1))]).to_frame()
    assert frame["hello_interval"].isna().tolist() == [False, True]
    assert str(frame["dead_interval"].dtype) == "UInt32"
    assert frame["more"].tolist() == [False, False]


# Wireshark sums an OSPFv3 packet's trailer but puts the packet's length in the pseudo-header (packet-ospf.c
# dissect_ospf), a mix no sender computes; the sender of this one summed the whole payload with its length.
CHECKSUM_EXCLUSIONS = {"tcpdump/tests/ospf3_auth.pcapng": "Wireshark's OSPFv3 checksum mixes two lengths"}


def test_checksum_verdicts_agree_with_tsharks_on_the_real_captures(tshark, captures_real):
    compared = 0
    for path in NAMED["ospf"]:
        if path in CHECKSUM_EXCLUSIONS:
            continue
        pdml = tshark.run(captures_real / path, "-Y", "ospf", "-T", "pdml")
        theirs = {}
        for packet in pdml.split("<packet>")[1:]:
            number = int(re.search(r'name="frame.number"[^>]*show="(\d+)"', packet).group(1))
            verdict = re.search(r'name="ospf.checksum" showname="[^"]*\[(correct|incorrect)', packet)
            if verdict:
                theirs[number] = int(verdict.group(1) == "correct")
        ours = {}
        with open_capture(captures_real / path) as reader:
            for batch in reader:
                tab = app.table(decode(batch, fingerprint=False), "ospf")
                for frame, ok, valid in zip(tab["frame"], tab["checksum_ok"], tab.valid("checksum_ok")):
                    if valid:
                        ours[int(frame)] = int(ok)
        assert ours == theirs, path
        compared += len(ours)
    assert compared >= 20

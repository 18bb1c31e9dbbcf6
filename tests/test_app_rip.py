"""The `rip` application table on crafted frames and real captures: RIPv1, RIPv2 with its authentication, RIPng."""
from __future__ import annotations

import ipaddress
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.layers.rip import RIP, RIPEntry
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw, raw

from detector.decode import app, decode
from detector.decode.app import table
from detector.decode.app.rip import (
    BAD_AFI,
    BAD_AUTH,
    BAD_LENGTH,
    BAD_METRIC,
    BAD_VERSION,
    ENTRY_FAULTS,
    F_AFI,
    F_AUTH,
    F_COMMAND,
    F_DESTINATION,
    F_EMPTY,
    F_HOST_BITS,
    F_LENGTH,
    F_MBZ,
    F_METRIC,
    F_PREFIX_LEN,
    F_UDP_LENGTH,
    F_VERSION,
    F_ZERO_FILLED,
    KIND_RIP,
    KIND_RIPNG,
    KIND_WRONG_FAMILY,
    MAX_ENTRIES,
    VALID,
    WHOLE_MESSAGE_FAULTS,
    WRONG_FAMILY,
    ZERO_FILLED,
)
from detector.ingest import open_capture
from tests._app import (
    app_table,
    assert_app_reads_stop_at_the_capture,
    assert_masks_consistent,
    assert_snapshot_cuts_are_no_fault,
)
from tests.test_decode import make_batch

ETH = Ether(src="00:00:0c:00:00:01", dst="01:00:5e:00:00:09")
V4 = IP(src="10.0.0.1", dst="224.0.0.9", ttl=1)
V6 = IPv6(src="fe80::1", dst="ff02::9", hlim=255)
RIP_UDP = UDP(sport=520, dport=520)
RIPNG_UDP = UDP(sport=521, dport=521)


def entry(afi=2, tag=0, addr="10.1.0.0", mask="255.255.0.0", hop="0.0.0.0", metric=1) -> bytes:
    return struct.pack("!HH4s4s4sI", afi, tag, ipaddress.IPv4Address(addr).packed,
                       ipaddress.IPv4Address(mask).packed, ipaddress.IPv4Address(hop).packed, metric)


def ripng_entry(prefix="2001:db8:1::", tag=0, plen=48, metric=1) -> bytes:
    return struct.pack("!16sHBB", ipaddress.IPv6Address(prefix).packed, tag, plen, metric)


def ripng_hop(address) -> bytes:
    return ripng_entry(address, 0, 0, 0xFF)


def header(command=2, version=2) -> bytes:
    return struct.pack("!BBH", command, version, 0)


def password(text=b"secret") -> bytes:
    return struct.pack("!HH16s", 0xFFFF, 2, text.ljust(16, b"\0"))


def crypto(entries: bytes, digest=16, packet_len=None, key_id=5, seq=4242, data_len=None) -> bytes:
    """A RIPv2 response with cryptographic authentication (RFC 2082 keyed MD5, RFC 4822 HMAC-SHA)."""
    body = 4 + 20 + len(entries)
    auth = struct.pack("!HHHBBI8x", 0xFFFF, 3, body if packet_len is None else packet_len, key_id,
                       digest if data_len is None else data_len, seq)
    return header() + auth + entries + struct.pack("!HH", 0xFFFF, 1) + bytes(range(digest))


def v4(payload: bytes, sport=520, dport=520):
    return ETH / V4 / UDP(sport=sport, dport=dport) / Raw(payload)


def v6(payload: bytes, port=521):
    return Ether(src="00:00:0c:00:00:01", dst="33:33:00:00:00:09") / V6 / UDP(sport=port, dport=port) / Raw(payload)


def address(hi, lo) -> str:
    value = ipaddress.IPv6Address((int(hi) << 64) | int(lo))
    return str(value.ipv4_mapped or value)


def routes(tab, message=0) -> list[tuple]:
    """(prefix/len or None, metric, next hop or None) of each entry of `message`, in order."""
    child = tab.children["rip_entry"]
    out = []
    for k in np.flatnonzero(child["parent"] == message):
        prefix = address(child["prefix_hi"][k], child["prefix_lo"][k]) if child.valid("prefix_hi")[k] else None
        if prefix is not None and child.valid("prefix_len")[k]:
            prefix += f"/{int(child['prefix_len'][k])}"
        hop = address(child["next_hop_hi"][k], child["next_hop_lo"][k]) if child.valid("next_hop_hi")[k] else None
        out.append((prefix, int(child["metric"][k]) if child.valid("metric")[k] else None, hop))
    return out


def test_ripv2_response_fields_and_entries():
    update = ETH / V4 / RIP_UDP / RIP(cmd=2, version=2) / RIPEntry(addr="192.168.1.0", mask="255.255.255.0",
                                                                    nextHop="10.0.0.9", metric=1, RouteTag=7) \
        / RIPEntry(addr="10.0.0.12", mask="255.255.255.252", metric=2)
    tab = app_table([(1, update)], "rip")
    assert len(tab) == 1 and int(tab["frame"][0]) == 1
    assert (int(tab["kind"][0]), int(tab["port"][0]), int(tab["verdict"][0])) == (KIND_RIP, 520, VALID)
    assert (int(tab["command"][0]), int(tab["version"][0]), int(tab["entries"][0]), int(tab["length"][0])) == \
        (2, 2, 2, 44)
    assert not tab.valid("auth_type")[0] and not tab.truncated[0] and not tab.more[0]
    assert routes(tab) == [("192.168.1.0/24", 1, "10.0.0.9"), ("10.0.0.12/30", 2, "0.0.0.0")]
    child = tab.children["rip_entry"]
    assert child["afi"].tolist() == [2, 2] and child["route_tag"].tolist() == [7, 0]
    assert child["mask"].tolist() == [0xFFFFFF00, 0xFFFFFFFC]
    assert_masks_consistent(tab)


def test_ripv1_has_no_mask_next_hop_or_tag():
    update = ETH / V4 / RIP_UDP / Raw(header(version=1) + entry(mask="0.0.0.0", addr="10.0.3.0", metric=2))
    tab = app_table([(1, update)], "rip")
    assert int(tab["version"][0]) == 1 and int(tab["verdict"][0]) == VALID
    assert routes(tab) == [("10.0.3.0", 2, None)]        # the prefix length is the receiver's guess, not ours
    child = tab.children["rip_entry"]
    assert not child.valid("mask")[0] and not child.valid("route_tag")[0]


def test_a_whole_table_request_carries_a_metric_and_no_prefix():
    request = ETH / V4 / RIP_UDP / Raw(header(command=1) + entry(afi=0, addr="0.0.0.0", mask="0.0.0.0", metric=16))
    tab = app_table([(1, request)], "rip")
    assert int(tab["command"][0]) == 1 and int(tab["verdict"][0]) == VALID
    assert routes(tab) == [(None, 16, None)] and tab.children["rip_entry"]["afi"].tolist() == [0]


def test_a_non_contiguous_mask_has_no_prefix_length():
    tab = app_table([(1, v4(header() + entry(mask="255.0.255.0")))], "rip")
    child = tab.children["rip_entry"]
    assert child.valid("mask")[0] and not child.valid("prefix_len")[0]


def test_ripng_next_hop_entries_are_marked_and_apply_to_the_routes_after_them():
    payload = (header(version=1) + ripng_entry("2001:db8:1::", plen=48, metric=1, tag=9)
               + ripng_hop("fe80::99") + ripng_entry("2001:db8:2::", plen=64, metric=3) + ripng_hop("::")
               + ripng_entry("::", plen=0, metric=16))
    tab = app_table([(1, v6(payload))], "rip")
    assert (int(tab["kind"][0]), int(tab["port"][0]), int(tab["verdict"][0])) == (KIND_RIPNG, 521, VALID)
    assert routes(tab) == [("2001:db8:1::/48", 1, None), (None, 0xFF, "fe80::99"), ("2001:db8:2::/64", 3, "fe80::99"),
                           (None, 0xFF, "::"), ("::/0", 16, "::")]
    child = tab.children["rip_entry"]
    assert child["next_hop_entry"].tolist() == [0, 1, 0, 1, 0]
    assert child["route_tag"][0] == 9 and not child.valid("afi").any()
    assert_masks_consistent(tab)


def test_a_password_is_noted_never_kept():
    tab = app_table([(1, v4(header() + password(b"hunter2") + entry())), (1, v4(header() + password(b"") + entry()))],
                    "rip")
    assert tab["auth_type"].tolist() == [2, 2] and tab["auth_password"].tolist() == [1, 0]
    assert tab["verdict"].tolist() == [VALID, VALID]
    assert routes(tab, 0) == [("10.1.0.0/16", 1, "0.0.0.0")]    # the authentication entry is no route
    assert not tab.valid("auth_key_id").any()
    secret = int.from_bytes(b"hunter2\0")
    for group in (tab.cols, tab.children["rip_entry"].cols):
        assert not any(np.any(col == secret) for col in group.values())


@pytest.mark.parametrize("digest", [16, 20, 32, 48, 64])
def test_cryptographic_authentication_fields_and_trailer(digest):
    message = crypto(entry() + entry(addr="10.2.0.0", metric=3), digest=digest, key_id=7, seq=123456)
    tab = app_table([(1, v4(message))], "rip")
    assert int(tab["verdict"][0]) == VALID and not tab.truncated[0]
    assert (int(tab["auth_type"][0]), int(tab["auth_packet_length"][0]), int(tab["auth_key_id"][0]),
            int(tab["auth_data_len"][0]), int(tab["auth_seq"][0])) == (3, 64, 7, digest, 123456)
    assert int(tab["auth_trailer_length"][0]) == digest + 4
    assert int(tab["entries"][0]) == 3                       # the authentication entry and two routes
    assert [r[:2] for r in routes(tab)] == [("10.1.0.0/16", 1), ("10.2.0.0/16", 3)]


def test_a_packet_length_past_the_message_is_truncated_and_bad():
    tab = app_table([(1, v4(crypto(entry(), packet_len=200)))], "rip")
    assert tab.truncated[0] and int(tab["verdict"][0]) == BAD_AUTH
    assert int(tab["auth_packet_length"][0]) == 200 and int(tab["auth_trailer_length"][0]) == 0


def test_a_trailer_of_another_size_is_bad_auth_and_its_bytes_are_no_route():
    tab = app_table([(1, v4(crypto(entry(), digest=12)))], "rip")
    assert int(tab["verdict"][0]) == BAD_AUTH and int(tab["auth_trailer_length"][0]) == 16
    assert [r[0] for r in routes(tab)] == ["10.1.0.0/16"]


@pytest.mark.parametrize("extra", [0, 1, 5])
def test_ripng_entries_over_the_cap_are_flagged_more(extra):
    count = MAX_ENTRIES + extra
    payload = header(version=1) + b"".join(ripng_entry(f"2001:db8:{k:x}::") for k in range(count))
    tab = app_table([(1, v6(payload))], "rip")
    assert int(tab["entries"][0]) == count and int(tab["verdict"][0]) == VALID
    assert bool(tab.more[0]) == (extra > 0) and not tab.truncated[0]
    assert len(routes(tab)) == MAX_ENTRIES


def test_an_entry_count_past_25_is_a_bad_length_listed_up_to_the_cap():
    tab = app_table([(1, v4(header() + entry() * 26)), (1, v4(header() + entry() * 25))], "rip")
    assert tab["verdict"].tolist() == [BAD_LENGTH, VALID]
    assert tab.more.tolist() == [True, False]
    assert np.bincount(tab.children["rip_entry"]["parent"]).tolist() == [MAX_ENTRIES, MAX_ENTRIES]


def test_the_malformations_a_receiver_checks():
    frames = [v4(bytes(24)), v4(header() + entry()[:12]), v4(header() + entry(metric=17)),
              v4(header() + entry(afi=7)), ETH / IPv6(src="fe80::1", dst="ff02::9") / RIP_UDP / Raw(header() + entry())]
    tab = app_table([(1, f) for f in frames], "rip")
    assert tab["verdict"].tolist()[:3] == [ZERO_FILLED, BAD_LENGTH, BAD_METRIC]
    assert tab["kind"].tolist()[4] == KIND_WRONG_FAMILY and tab["verdict"].tolist()[4] == WRONG_FAMILY
    # a RIP message over IPv6 is still read in the port's layout
    assert routes(tab, 4) == [("10.1.0.0/16", 1, "0.0.0.0")]


def test_faults_are_every_check_a_message_fails_and_each_entry_has_its_own():
    frames = [v4(b""), v4(bytes(24)), v4(header() + entry()[:12]), v4(header()), v4(header(command=9) + entry()),
              v4(header(version=5) + entry()), v4(header(version=1) + entry()),        # RIPv1 with a mask
              v4(header() + struct.pack("!HH16s", 0xFFFF, 7, bytes(16)) + entry()),      # unknown authentication
              v4(header() + entry(afi=7) + entry(metric=0x10000001) + entry(addr="127.0.0.0", mask="255.0.0.0")
                 + entry(addr="10.1.2.0", mask="255.255.0.0") + entry(addr="0.0.0.0", mask="0.0.0.0")),
              v6(header() + ripng_entry(plen=129) + ripng_entry("ff02::", plen=16) + ripng_entry(metric=17)),
              v4(header() + entry() + entry(metric=16)),
              ETH / IPv6(src="fe80::1", dst="ff02::9") / RIP_UDP / Raw(header() + entry(metric=99))]
    tab = app_table([(1, f) for f in frames], "rip")
    assert tab["fault"].tolist() == [
        F_EMPTY, F_ZERO_FILLED, F_LENGTH, F_LENGTH, F_COMMAND, F_VERSION, F_MBZ, F_AUTH,
        F_AFI | F_METRIC | F_DESTINATION | F_HOST_BITS,
        F_VERSION | F_PREFIX_LEN | F_DESTINATION | F_METRIC,        # RIPng is version 1
        0,
        0]                                                          # the RIP port over IPv6: no RIP to judge
    child = tab.children["rip_entry"]
    assert child["fault"][child["parent"] == 8].tolist() == [F_AFI, F_METRIC, F_DESTINATION, F_HOST_BITS, 0]
    assert child["fault"][child["parent"] == 9].tolist() == [F_PREFIX_LEN, F_DESTINATION, F_METRIC]
    assert tab["verdict"].tolist()[8:10] == [BAD_AFI, BAD_VERSION]      # the verdict stays the first failure
    assert_masks_consistent(tab)


def test_a_udp_length_other_than_the_ip_length_is_a_fault_of_the_whole_message():
    # tcpdump's ripv2-invalid-length.pcap: the UDP length leaves 156 bytes of RIP, the IP length 160
    frame = raw(ETH / V4 / UDP(sport=520, dport=520, len=8 + 4 + 20 * 7 + 16) / Raw(header() + entry() * 8))
    tab = app_table([(1, frame), (1, v4(header() + entry()))], "rip")
    assert tab["fault"].tolist() == [F_UDP_LENGTH, 0]
    assert F_UDP_LENGTH & WHOLE_MESSAGE_FAULTS and not ENTRY_FAULTS & WHOLE_MESSAGE_FAULTS


def test_a_message_cut_by_the_snapshot_length_is_not_malformed():
    assert_snapshot_cuts_are_no_fault(
        [(1, v4(crypto(entry() + entry(metric=16), digest=20))), (1, v4(header() + password() + entry())),
         (1, v4(header(version=1) + entry(mask="0.0.0.0"))),
         (1, v6(header(version=1) + ripng_entry() + ripng_hop("fe80::9") + ripng_entry("2001:db8:7::")))], "rip")


def test_which_datagrams_are_candidates():
    frames = [v4(header() + entry(), sport=520, dport=40000),     # a response to a unicast request
              v4(header(command=1) + entry(afi=0, metric=16), sport=40000, dport=520),
              v4(header() + entry(), sport=53, dport=40000),      # not RIP
              raw(v4(header() + entry()))[:14 + 20 + 6]]          # the UDP header cut short
    tab = app_table([(1, f) for f in frames], "rip")
    assert tab["row"].tolist() == [0, 1] and tab["port"].tolist() == [520, 520]


def test_rip_inside_a_vlan_and_a_vxlan_tunnel_is_found_from_the_decoded_offsets():
    inner = ETH / V4 / RIP_UDP / Raw(header() + entry(addr="172.16.0.0", mask="255.240.0.0", metric=4))
    frames = [Ether() / Dot1Q(vlan=1080) / V4 / RIP_UDP / Raw(header() + entry(addr="172.16.0.0",
                                                                             mask="255.240.0.0", metric=4)),
              Ether() / IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=4789, dport=4789) / VXLAN(vni=5) / inner]
    tab = app_table([(1, f) for f in frames], "rip")
    assert len(tab) == 2
    assert routes(tab, 0) == routes(tab, 1) == [("172.16.0.0/12", 4, "0.0.0.0")]


def test_a_snapshot_length_cut_keeps_what_was_read():
    message = raw(v4(crypto(entry() * 3, digest=32)))
    cut = message[:14 + 20 + 8 + 4 + 20 + 30]          # the authentication entry and one and a half routes
    tab = app_table([(1, message)], "rip", caplens=[len(cut)])
    assert tab.truncated[0] and int(tab["verdict"][0]) == VALID
    assert int(tab["auth_seq"][0]) == 4242 and len(routes(tab)) == 1


def test_a_trailer_past_the_capture_is_not_read():
    # the bytes after the cut are a valid trailer in one frame and a damaged one in the other: the tails of the
    # every-cut test (all zeros, all ones) would read the same either way
    message = raw(v4(crypto(entry(), digest=16)))
    trailer = 14 + 20 + 8 + 4 + 20 + 20
    damaged = message[:trailer + 2] + b"\x00\x02" + message[trailer + 4:]
    for cut in (trailer, trailer + 2):
        good, bad = (app_table([(1, frame)], "rip", caplens=[cut]) for frame in (message, damaged))
        assert good["verdict"].tolist() == bad["verdict"].tolist() == [VALID]


def test_every_cut_reads_only_captured_bytes():
    assert_app_reads_stop_at_the_capture(
        [(1, v4(crypto(entry() + entry(metric=16), digest=20))), (1, v4(header() + password() + entry())),
         (1, v4(header(version=1) + entry(mask="0.0.0.0"))),
         (1, v6(header(version=1) + ripng_entry() + ripng_hop("fe80::9") + ripng_entry("2001:db8:7::")))], "rip")


# RIP messages of every shape the table reads, for the mutation test
SHAPES = [raw(v4(crypto(entry() + entry(metric=16), digest=20))), raw(v4(header() + password() + entry() * 3)),
          raw(v4(header(version=1) + entry(mask="0.0.0.0"))), raw(v4(header(command=1) + entry(afi=0, metric=16))),
          raw(v6(header(version=1) + ripng_entry() + ripng_hop("fe80::9") + ripng_entry("2001:db8:7::")))]
# values that make a length, a count, a family or a metric lie
HOSTILE16 = [0, 1, 3, 4, 19, 20, 23, 24, 25, 44, 0xFF, 0x100, 0xFFFE, 0xFFFF]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SHAPES), st.lists(st.tuples(st.integers(0, 200), st.sampled_from(HOSTILE16)), min_size=1,
                                         max_size=4))
def test_lying_lengths_counts_and_fields_stay_inside_the_capture(frame, edits):
    # 16-bit fields overwritten anywhere past the Ethernet header: IP and UDP lengths, the packet length of the
    # authentication entry, families, metrics
    data = bytearray(frame)
    for where, value in edits:
        at = 14 + where % (len(data) - 15)
        data[at:at + 2] = value.to_bytes(2, "big")
    assert_app_reads_stop_at_the_capture([(1, bytes(data))], "rip")


def test_tables_are_built_once_per_batch():
    batch = decode(make_batch([(1, raw(v4(header() + entry())))]), fingerprint=False)
    first = table(batch, "rip")
    assert table(batch, "rip") is first and len(first) == 1


def test_to_frame_masks_absent_fields():
    frame = app_table([(1, v4(header() + entry())), (1, v4(crypto(entry())))], "rip").to_frame()
    assert frame["auth_type"].isna().tolist() == [True, False]
    assert str(frame["auth_seq"].dtype) == "UInt32"


def test_ripv2_entries_are_tsharks(captures_real, tshark):
    path = captures_real / "packetlife/pcaps/RIPv2.cap"
    theirs = tshark.fields(path, "rip.ip", "rip.netmask", "rip.next_hop", "rip.metric",
                           options=("-E", "occurrence=a", "-E", "aggregator=;"))
    mine = []
    with open_capture(path) as reader:
        for raw_batch in reader:
            tab = app.table(decode(raw_batch, fingerprint=False), "rip")
            child = tab.children["rip_entry"]
            for k in range(len(tab)):
                rows = np.flatnonzero(child["parent"] == k)
                mine.append([";".join(address(child["prefix_hi"][j], child["prefix_lo"][j]) for j in rows),
                             ";".join(str(ipaddress.IPv4Address(int(child["mask"][j]))) for j in rows),
                             ";".join(address(child["next_hop_hi"][j], child["next_hop_lo"][j]) for j in rows),
                             ";".join(str(int(child["metric"][j])) for j in rows)])
    assert len(mine) == 12 and mine == theirs


def test_tcpdumps_invalid_length_update(captures_real, tshark):
    # the UDP length says 160 bytes of RIP, the IP length 164: tshark reads the first, we (as the decoder
    # does for every transport) the second, which holds an eighth entry of family 37
    path = captures_real / "tcpdump/tests/ripv2-invalid-length.pcap"
    (udp_length,) = tshark.fields(path, "udp.length")[0]
    assert int(udp_length) == 8 + 160
    with open_capture(path) as reader:
        tab = app.table(decode(next(iter(reader)), fingerprint=False), "rip")
    assert int(tab["length"][0]) == 164 and int(tab["verdict"][0]) == BAD_METRIC
    child = tab.children["rip_entry"]
    assert child["afi"].tolist() == [2] * 7 + [37]
    assert child["metric"].tolist()[:7] == [1, 1, 1, 1, 1, 268_435_457, 1]
    assert not child.valid("metric")[7] and not child.valid("prefix_hi")[7]

"""802.11 (link types 105 and 127, and Aruba's GRE tunnels), A-MSDU subframes, Cisco FabricPath, GRE in
UDP, Network Service Headers and Cisco MetaData, built byte for byte from the specifications and dissected
by tshark the same way.

802.11: IEEE 802.11-2020 clause 9 (frame control, the DS bits and Table 9-30's address roles, QoS control,
+HTC, A-MSDU subframes of 9.3.2.2.2); radiotap: https://www.radiotap.org (length, present words, TSFT
alignment, the FCS flag); FabricPath: Wireshark's packet-cisco-fp-mim.c; GRE-in-UDP: RFC 8086; NSH: RFC
8300; Cisco MetaData: Wireshark's packet-cisco-metadata.c.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest
from scapy.layers.dot11 import Dot11
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import GRE, LLC, SNAP, Dot1Q, Ether
from scapy.packet import raw

from detector.decode import decode, expand_msdus
from detector.decode.addr import ip_to_str, mac_to_str
from detector.flows import FlowTable
from detector.schema import (
    L_AMSDU,
    L_ARP,
    L_DST_MAC,
    L_ETHERTYPE,
    L_IP4,
    L_IP6,
    L_PAYLOAD,
    L_PORTS,
    L_SRC_MAC,
    L_TCP,
    L_TRUNCATED,
    L_TUNNEL,
    L_UDP,
    L_VLAN,
    TUNNEL_GRE,
)
from detector.schema import LINKTYPE_IEEE802_11 as WLAN
from detector.schema import LINKTYPE_IEEE802_11_RADIOTAP as RADIOTAP
from tests.test_decode import _truncated_cuts, assert_reads_stop_at_the_capture, cut_everywhere, make_batch

A1, A2, A3, A4 = "02:00:00:00:00:01", "02:00:00:00:00:02", "02:00:00:00:00:03", "02:00:00:00:00:04"
INNER4 = IP(src="10.1.0.1", dst="10.1.0.2") / UDP(sport=1000, dport=2000) / b"hello"
INNER6 = IPv6(src="2001:db8::a", dst="2001:db8::b") / TCP(sport=3000, dport=4000, flags="S")
ETH = L_SRC_MAC | L_DST_MAC | L_ETHERTYPE
UDP4 = ETH | L_IP4 | L_UDP | L_PORTS | L_PAYLOAD
TCP6 = ETH | L_IP6 | L_TCP | L_PORTS | L_PAYLOAD
FCS = b"\xaa\xbb\xcc\xdd"


def snap(ethertype: int, payload, oui: int = 0) -> bytes:
    return raw(LLC(dsap=0xAA, ssap=0xAA, ctrl=3) / SNAP(OUI=oui, code=ethertype) / payload)


SNAP4, SNAP6 = snap(0x0800, INNER4), snap(0x86DD, INNER6)


def mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def data_header(flags: int, subtype: int = 0, qos: int | None = None, htc: bool = False,
                fragment: int = 0) -> bytes:
    """A data frame's header: frame control, duration, addresses 1-3, sequence control, [4], [QoS], [HT]."""
    header = raw(Dot11(type=2, subtype=subtype, FCfield=flags, addr1=A1, addr2=A2, addr3=A3, SC=fragment))[:24]
    if flags & 0x03 == 0x03:
        header += mac(A4)
    if qos is not None:
        header += struct.pack("<H", qos)
    if htc:
        header += b"\x00" * 4
    return header


def amsdu(*subframes: tuple[str, str, bytes]) -> bytes:
    """Subframes (DA, SA, MSDU), each but the last padded to a multiple of 4 bytes."""
    out = b""
    for k, (da, sa, msdu) in enumerate(subframes):
        subframe = mac(da) + mac(sa) + struct.pack(">H", len(msdu)) + msdu
        out += subframe + (b"\x00" * (-len(subframe) % 4) if k < len(subframes) - 1 else b"")
    return out


def radiotap(frame: bytes, fcs: bool = False, tsft: bool = False, extended: bool = False) -> bytes:
    """A radiotap header with the Flags field, TSFT before it (aligned to 8 bytes from the header's start),
    and a second present word where `extended` (bit 31 of the first)."""
    present = struct.pack("<I", 0x02 | (0x01 if tsft else 0) | (0x80000000 if extended else 0))
    present += struct.pack("<I", 0) if extended else b""
    fields = b""
    if tsft:
        fields += b"\x00" * (-(4 + len(present)) % 8) + struct.pack("<Q", 123)
    fields += bytes([0x10 if fcs else 0])
    header = struct.pack("<BBH", 0, 0, 4 + len(present) + len(fields)) + present + fields
    return header + frame + (FCS if fcs else b"")


def nsh(next_protocol: int, md_type: int = 1, context: bytes = bytes(16), version: int = 0,
        words: int | None = None) -> bytes:
    """A Network Service Header (RFC 8300 section 2): the base header (version, TTL 63, length in 4-byte words,
    MD type, next protocol), the service path header (SPI 1, service index 255), then the context headers."""
    words = 2 + len(context) // 4 if words is None else words
    return (struct.pack(">HBB", version << 14 | 63 << 6 | words, md_type, next_protocol)
            + struct.pack(">I", 1 << 8 | 255) + context)


def eth_type(ethertype: int) -> bytes:
    return mac(A2) + mac(A1) + struct.pack(">H", ethertype)


# an MD type 2 context header (RFC 8300 section 2.5.1): class 0x0200 (BBF), type 1 (MAC), 6 bytes, padded to 8
NSH_TLV = struct.pack(">HBB", 0x0200, 1, 6) + mac(A4) + bytes(2)
# Cisco MetaData: version 1, length 1, option type 1 (SGT), SGT 16, then the ethertype
CMD_SGT_16 = bytes.fromhex("0101000100100800")
FP_DST, FP_SRC = "02:00:0c:00:00:01", "02:00:0d:00:00:02"
ARUBA_OUTER = IP(src="10.226.22.9", dst="10.102.16.187")
# name -> (link type, frame, layers, src MAC, dst MAC, inner source, inner source port, msdu_count)
CASES = {
    "to-ds": (WLAN, data_header(0x01) + SNAP4, UDP4, A2, A3, "10.1.0.1", 1000, 0),
    "from-ds": (WLAN, data_header(0x02) + SNAP4, UDP4, A3, A1, "10.1.0.1", 1000, 0),
    "four-address": (WLAN, data_header(0x03) + SNAP6, TCP6, A4, A3, "2001:db8::a", 3000, 0),
    "ad-hoc": (WLAN, data_header(0x00) + SNAP4, UDP4, A2, A1, "10.1.0.1", 1000, 0),
    "qos": (WLAN, data_header(0x01, 8, qos=0) + SNAP4, UDP4, A2, A3, "10.1.0.1", 1000, 0),
    "qos-ht-control": (WLAN, data_header(0x81, 8, qos=0, htc=True) + SNAP6, TCP6, A2, A3, "2001:db8::a", 3000, 0),
    "qos-null": (WLAN, data_header(0x01, 12, qos=0), L_SRC_MAC | L_DST_MAC, A2, A3, None, None, 0),
    "protected": (WLAN, data_header(0x41) + b"\x01" * 8 + SNAP4, L_SRC_MAC | L_DST_MAC, A2, A3, None, None, 0),
    "second-fragment": (WLAN, data_header(0x01, fragment=1) + SNAP4, L_SRC_MAC | L_DST_MAC, A2, A3, None, None, 0),
    "vlan-in-snap": (WLAN, data_header(0x01) + snap(0x8100, Dot1Q(vlan=12, type=0x0800) / INNER4), UDP4 | L_VLAN,
                     A2, A3, "10.1.0.1", 1000, 0),
    "bridge-tunnel-oui": (WLAN, data_header(0x01) + snap(0x0800, INNER4, oui=0xF8), UDP4, A2, A3, "10.1.0.1", 1000,
                          0),
    "a-msdu": (WLAN, data_header(0x02, 8, qos=0x80) + amsdu((A1, A4, SNAP4), (A1, A4, SNAP6), (A1, A3, SNAP4)),
               UDP4 | L_AMSDU, A4, A1, "10.1.0.1", 1000, 3),
    "management": (WLAN, raw(Dot11(type=0, subtype=8, addr1=A1, addr2=A2, addr3=A3)) + b"\x00" * 12, 0, None, None,
                   None, None, 0),
    "cut-in-the-header": (WLAN, data_header(0x01)[:20], L_TRUNCATED, None, None, None, None, 0),
    "radiotap": (RADIOTAP, radiotap(data_header(0x01) + SNAP4), UDP4, A2, A3, "10.1.0.1", 1000, 0),
    "radiotap-fcs": (RADIOTAP, radiotap(data_header(0x01) + SNAP4, fcs=True), UDP4, A2, A3, "10.1.0.1", 1000, 0),
    "radiotap-tsft-fcs": (RADIOTAP, radiotap(data_header(0x02, 8, qos=0) + SNAP6, fcs=True, tsft=True), TCP6,
                          A3, A1, "2001:db8::a", 3000, 0),
    "radiotap-two-present-words-tsft-fcs": (RADIOTAP, radiotap(data_header(0x01) + SNAP4, fcs=True, tsft=True,
                                                               extended=True), UDP4, A2, A3, "10.1.0.1", 1000, 0),
    "radiotap-a-msdu-fcs": (RADIOTAP, radiotap(data_header(0x02, 8, qos=0x80) + amsdu((A1, A4, SNAP4),
                                                                                       (A1, A4, SNAP6)), fcs=True),
                            UDP4 | L_AMSDU, A4, A1, "10.1.0.1", 1000, 2),
    "radiotap-arp": (RADIOTAP, radiotap(data_header(0x01) + snap(0x0806, b"\x00\x01\x08\x00\x06\x04\x00\x01"
                                                                 + b"\x02" * 6 + b"\x0a\x00\x00\x01" + b"\x00" * 6
                                                                 + b"\x0a\x00\x00\x02")), ETH | L_ARP, A2, A3, None,
                     None, 0),
    "aruba-gre-a-msdu": (1, raw(Ether(src=A1, dst=A2) / ARUBA_OUTER / GRE(proto=0x8240)
                                / (data_header(0x02, 8, qos=0x80) + amsdu((A1, A4, SNAP4), (A1, A4, SNAP6)))),
                         UDP4 | L_AMSDU | L_TUNNEL, A1, A2, "10.1.0.1", 1000, 2),
    # the MAC columns keep FabricPath's switch-ID addresses; a tag before its type is a VLAN tag here
    "fabricpath": (1, mac(FP_DST) + mac(FP_SRC) + b"\x89\x03\x00\x3f"
                   + raw(Ether(src=A2, dst=A1) / Dot1Q(vlan=30) / INNER4), UDP4 | L_VLAN, FP_SRC, FP_DST, "10.1.0.1",
                   1000, 0),
    "fabricpath-after-802.1ad": (1, mac(FP_DST) + mac(FP_SRC) + b"\x88\xa8\x00\x05" + b"\x89\x03\x00\x3f"
                                 + raw(Ether(src=A2, dst=A1) / INNER6), TCP6 | L_VLAN, FP_SRC, FP_DST,
                                 "2001:db8::a", 3000, 0),
    "gre-in-udp-ethernet": (1, raw(Ether(src=A1, dst=A2) / ARUBA_OUTER / UDP(sport=1234, dport=4754)
                                   / GRE(proto=0x6558) / Ether() / INNER4), UDP4 | L_TUNNEL, A1, A2, "10.1.0.1",
                            1000, 0),
    # Network Service Headers (RFC 8300): the packet or frame after them is the row's; the MAC columns keep
    # the frame's own addresses (those of the service function forwarders)
    "nsh-ipv4": (1, eth_type(0x894F) + nsh(1) + raw(INNER4), UDP4, A1, A2, "10.1.0.1", 1000, 0),
    "nsh-md-type-2-ethernet": (1, eth_type(0x894F) + nsh(3, 2, NSH_TLV) + raw(Ether(src=A3, dst=A4) / INNER6),
                               TCP6, A1, A2, "2001:db8::a", 3000, 0),
    "nsh-in-nsh-mpls": (1, eth_type(0x894F) + nsh(4, 2, b"") + nsh(5) + bytes.fromhex("00064140") + raw(INNER4),
                        UDP4, A1, A2, "10.1.0.1", 1000, 0),
    "nsh-version-1": (1, eth_type(0x894F) + nsh(1, version=1) + raw(INNER4), ETH, A1, A2, None, None, 0),
    "nsh-md-type-1-of-5-words": (1, eth_type(0x894F) + nsh(1, words=5) + raw(INNER4), ETH, A1, A2, None, None, 0),
    # Cisco MetaData (TrustSec's SGT in the frame), alone and after an 802.1Q tag
    "cisco-metadata": (1, eth_type(0x8909) + CMD_SGT_16 + raw(INNER4), UDP4, A1, A2, "10.1.0.1", 1000, 0),
    "cisco-metadata-after-a-vlan-tag": (1, eth_type(0x8100) + b"\x00\x07\x89\x09" + CMD_SGT_16 + raw(INNER4),
                                        UDP4 | L_VLAN, A1, A2, "10.1.0.1", 1000, 0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_link_layers(name):
    linktype, frame, layers, src_mac, dest_mac, src, sport, msdus = CASES[name]
    batch = decode(make_batch([(linktype, frame)]))
    row = {column: int(batch[column][0]) for column in batch.cols if column in ("layers", "src_mac", "dest_mac",
                                                                                 "src_ip_hi", "src_ip_lo",
                                                                                 "src_port", "msdu_count")}
    assert row["layers"] == layers, (name, hex(row["layers"]), hex(layers))
    if src_mac:
        assert (mac_to_str(row["src_mac"]), mac_to_str(row["dest_mac"])) == (src_mac, dest_mac)
    if src:
        assert (ip_to_str(row["src_ip_hi"], row["src_ip_lo"]), row["src_port"]) == (src, sport)
    assert row["msdu_count"] == msdus


@pytest.mark.parametrize("name", ["radiotap-fcs", "radiotap-tsft-fcs", "radiotap-two-present-words-tsft-fcs"])
def test_an_fcs_is_not_part_of_the_packet(name):
    """With its length field zeroed, a packet is the rest of the frame: without the FCS the flag announces."""
    frame = bytearray(CASES[name][1])
    inner = raw(INNER6 if CASES[name][2] == TCP6 else INNER4)
    ip_at = len(frame) - len(FCS) - len(inner)
    length_at = ip_at + (4 if inner[0] >> 4 == 6 else 2)
    frame[length_at:length_at + 2] = b"\x00\x00"
    row = decode(make_batch([(RADIOTAP, bytes(frame))]))
    assert (int(row["l3_off"][0]), int(row["ip_len"][0])) == (ip_at, len(inner))


def test_a_msdu_subframes_get_rows_of_their_own():
    frames = [(WLAN, CASES["to-ds"][1]), (WLAN, CASES["a-msdu"][1]), (1, CASES["aruba-gre-a-msdu"][1])]
    batch = expand_msdus(decode(make_batch(frames)))
    assert list(batch["frame"]) == [1, 2, 2, 2, 3, 3]
    assert [ip_to_str(hi, lo) for hi, lo in zip(batch["src_ip_hi"], batch["src_ip_lo"])] == [
        "10.1.0.1", "10.1.0.1", "2001:db8::a", "10.1.0.1", "10.1.0.1", "2001:db8::a"]
    assert list(batch["src_mac"][1:4]) == [int(mac(A4).hex(), 16)] * 2 + [int(mac(A3).hex(), 16)]
    assert list(batch["tunnel"]) == [0, 0, 0, 0, TUNNEL_GRE, TUNNEL_GRE]
    assert np.array_equal(batch["msdu_count"], [0, 3, 3, 3, 2, 2])
    plain = decode(make_batch([frames[0]]))
    assert expand_msdus(plain) is plain


def test_a_subframe_longer_than_the_frame_ends_the_count():
    frame = bytearray(CASES["a-msdu"][1])
    third = len(frame) - len(SNAP4) - 14
    frame[third + 12:third + 14] = struct.pack(">H", len(SNAP4) + 1)
    row = decode(make_batch([(WLAN, bytes(frame))]))
    assert int(row["msdu_count"][0]) == 2


def test_every_subframe_counts_in_the_flow_table():
    table = FlowTable()
    table.update(decode(make_batch([(1, CASES["aruba-gre-a-msdu"][1]), (WLAN, CASES["a-msdu"][1])])))
    flows = table.to_frame()
    packets = {(row.proto, row.src_ip): row.src2dst_packets + row.dst2src_packets for row in flows.itertuples()}
    assert packets == {("udp", "10.1.0.1"): 3, ("tcp", "2001:db8::a"): 2}
    assert table.packets == 2


# frames tshark 4.0 dissects otherwise, and why
TSHARK_DIFFERS = {
    "second-fragment": "tshark reads a later fragment's body, with no first fragment to reassemble it with, "
                       "as if it began with an LLC header; only a first fragment's does (IEEE 802.11-2020 10.5)",
    "nsh-version-1": "Wireshark reads any NSH version; RFC 8300 section 2.2 defines version 0 alone, and "
                     "Suricata's decoder stops at another",
    "nsh-md-type-1-of-5-words": "Wireshark takes MD type 1's 6 words whatever the length says; RFC 8300 section "
                                "2.2 requires 6, and Suricata's decoder stops at another length",
}


def _tshark_inner(fields: list[str], tunnelled: bool) -> tuple[str | None, int | None, bool]:
    """(source address, source port, ARP?) of the packet a row describes, from tshark's fields: the
    first IP layer (the second under a tunnel: a subframe or tunnel payload follows its carrier), and
    the first TCP/UDP layer after it."""
    protocols, ip4, ip6, udp_port, tcp_port, arp = fields
    values = {"ip": iter(ip4.split(",")), "ipv6": iter(ip6.split(",")), "udp": iter(udp_port.split(",")),
              "tcp": iter(tcp_port.split(","))}
    layers = [(name, next(values[name])) for name in protocols.split(":") if name in values]
    ips = [k for k, (name, _) in enumerate(layers) if name in ("ip", "ipv6")]
    if len(ips) <= tunnelled:
        return None, None, bool(arp)
    at = ips[int(tunnelled)]
    ports = [int(value) for name, value in layers[at:] if name in ("udp", "tcp")]
    return layers[at][1], ports[0] if ports else None, bool(arp)


def test_tshark_dissects_the_same(tshark, tmp_path):
    for linktype in (WLAN, RADIOTAP, 1):
        names = [name for name, case in CASES.items() if case[0] == linktype]
        path = tmp_path / f"links-{linktype}.pcap"
        with open(path, "wb") as handle:
            handle.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, linktype))
            for i, name in enumerate(names):
                frame = CASES[name][1]
                handle.write(struct.pack("<IIII", 1_700_000_000, i, len(frame), len(frame)) + frame)
        rows = tshark.fields(path, "frame.protocols", "ip.src", "ipv6.src", "udp.srcport", "tcp.srcport",
                             "arp.opcode")
        for name, fields in zip(names, rows):
            _, _, layers, _, _, src, sport, _ = CASES[name]
            fields += [""] * (6 - len(fields))
            agrees = _tshark_inner(fields, bool(layers & L_TUNNEL)) == (src, sport, bool(layers & L_ARP))
            assert agrees == (name not in TSHARK_DIFFERS), (name, fields)


def test_every_cut_reads_nothing_past_the_capture():
    assert_reads_stop_at_the_capture(cut_everywhere([(case[0], case[1]) for case in CASES.values()]))


def _radiotap_layers(frame: bytes) -> int:
    return int(decode(make_batch([(RADIOTAP, frame)], tail=b"\x00" * 64))["layers"][0])


def test_a_radiotap_header_longer_than_the_frame_or_its_present_words_is_truncated():
    whole = radiotap(data_header(0x01) + SNAP4)
    assert _radiotap_layers(whole) == UDP4
    # its length field says more bytes than the record holds
    longer = whole[:2] + struct.pack("<H", len(whole) + 1) + whole[4:]
    assert _radiotap_layers(longer) == L_TRUNCATED
    # the present word announces a second one (bit 31) that the header's length leaves no room for
    extended = whole[:7] + bytes([whole[7] | 0x80]) + whole[8:]
    short = extended[:2] + struct.pack("<H", 8) + extended[4:]
    assert _radiotap_layers(short) == L_TRUNCATED



def test_the_shortest_radiotap_header_is_whole():
    # version, pad, length 8, one present word with no field: nothing but the 802.11 frame follows
    frame = struct.pack("<BBHI", 0, 0, 8, 0) + data_header(0x01) + SNAP4
    assert _radiotap_layers(frame) == UDP4


@pytest.mark.parametrize("name,fcs", [("radiotap", 0), ("radiotap-tsft-fcs", len(FCS)),
                                      ("radiotap-two-present-words-tsft-fcs", len(FCS)), ("qos", 0),
                                      ("nsh-ipv4", 0), ("nsh-md-type-2-ethernet", 0), ("nsh-in-nsh-mpls", 0),
                                      ("cisco-metadata-after-a-vlan-tag", 0)])
def test_a_cut_before_the_payload_is_truncated_and_one_after_it_is_not(name, fcs):
    linktype, frame = CASES[name][0], CASES[name][1]
    whole = decode(make_batch([(linktype, frame)], tail=b"\x00" * 64))
    assert not whole["layers"][0] & L_TRUNCATED
    # where the Flags field announces an FCS, a record's last 4 bytes are one, whatever its length
    assert _truncated_cuts(linktype, frame) == list(range(int(whole["payload_off"][0]) + fcs))


# ---- boundaries the mutation run found untested (tests/mutation) -------------------------------------

ETHERNET_MACS = bytes.fromhex("020000000001020000000002")
MPLS_BOTTOM_LABEL = struct.pack("!I", (100 << 12) | (1 << 8) | 64)    # label 100, bottom of stack, TTL 64


@pytest.mark.parametrize("after,layers", [
    (b"", ETH | L_TRUNCATED),               # no byte under the bottom label: cut
    (b"\x00", ETH),                         # one byte, version 0: a payload that is no IP, whole
    (b"\x45", ETH | L_TRUNCATED),           # an IPv4 header begins and is cut
])
def test_an_mpls_stack_needs_one_byte_after_its_bottom_label(after, layers):
    frame = ETHERNET_MACS + b"\x88\x47" + MPLS_BOTTOM_LABEL + after
    # what follows the record in the buffer is no IP: a read past the capture would not look cut
    assert int(decode(make_batch([(1, frame)], tail=b"\x00" * 64))["layers"][0]) == layers


@pytest.mark.parametrize("after,layers", [
    (b"", L_TRUNCATED), (b"\x00", L_TRUNCATED),           # no (whole) PPP protocol field
    (b"\x21", L_TRUNCATED),                                # a compressed protocol field: IPv4, then nothing
    (b"\xc0\x21", 0),                                      # LCP: no network layer, nothing cut
])
def test_a_pppoe_session_payload_is_bounded_by_its_ppp_protocol_field(after, layers):
    frame = ETHERNET_MACS + b"\x88\x64" + bytes.fromhex("110000010000") + after
    assert int(decode(make_batch([(1, frame)], tail=b"\x00\x21" * 32))["layers"][0]) == ETH | layers


@pytest.mark.parametrize("frame,layers", [
    (b"\xff\x03", L_TRUNCATED),             # address and control, then no protocol field
    (b"\xff\x03\xc0\x21\x01\x01\x00\x04", 0),   # LCP configure-request: no network layer, nothing cut
])
def test_ppp_without_a_network_protocol_is_not_an_error_and_a_cut_one_is(frame, layers):
    assert int(decode(make_batch([(9, frame)], tail=b"\x21" * 64))["layers"][0]) == layers


def _radiotap_of_length(length: int) -> bytes:
    """A radiotap header of `length` bytes with no fields: version, pad, length, one empty present word."""
    return struct.pack("<BBHI", 0, 0, length, 0) + bytes(length - 8)


@pytest.mark.parametrize("payload,whole", [(SNAP4, UDP4), (SNAP6, TCP6)], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize("extra", [0, 1])
def test_the_ip_header_may_start_at_the_last_offset_the_columns_hold(payload, whole, extra):
    from detector.decode.ip import MAX_IP_OFFSET

    frame = _radiotap_of_length(MAX_IP_OFFSET - len(data_header(0x01)) - 8 + extra) + data_header(0x01) + payload
    batch = decode(make_batch([(RADIOTAP, frame)]))
    assert int(batch["layers"][0]) == (ETH | L_TRUNCATED if extra else whole)
    if not extra:
        assert int(batch["l3_off"][0]) == MAX_IP_OFFSET


@pytest.mark.parametrize("tag", [b"\x89\x26" + bytes(4), b"\x88\xe7" + bytes(4) + bytes(12),
                                 b"\x89\x03" + bytes(2) + bytes(12), b"\x89\x09" + bytes(6)],
                         ids=["vntag", "pbb", "fabricpath", "cisco-metadata"])
def test_a_tag_whose_inner_ethertype_ends_the_frame_is_whole(tag):
    # an inner type nothing decodes (IEEE local experimental 0x88B5): nothing is cut, nothing follows
    frame = ETHERNET_MACS + tag + b"\x88\xb5"
    assert int(decode(make_batch([(1, frame)], tail=b"\x00" * 64))["layers"][0]) == ETH
    assert int(decode(make_batch([(1, frame[:-1])], tail=b"\x00" * 64))["layers"][0]) == ETH | L_TRUNCATED


def test_a_network_service_header_is_skipped_by_its_length_and_one_cut_short_is_truncated():
    # MD type 2 with one context header, then a next protocol the decoder does not follow (0xFE, experiment 1)
    frame = eth_type(0x894F) + nsh(0xFE, 2, NSH_TLV)
    assert int(decode(make_batch([(1, frame)], tail=b"\x00" * 64))["layers"][0]) == ETH
    assert int(decode(make_batch([(1, frame[:-1])], tail=b"\x00" * 64))["layers"][0]) == ETH | L_TRUNCATED


def test_an_a_msdu_without_one_whole_subframe_is_truncated():
    frame = bytearray(CASES["a-msdu"][1])
    first = len(data_header(0x02, 8, qos=0x80))
    frame[first + 12:first + 14] = struct.pack(">H", len(frame))   # the first subframe runs past the frame
    row = decode(make_batch([(WLAN, bytes(frame))]))
    assert int(row["msdu_count"][0]) == 0
    assert int(row["layers"][0]) == L_AMSDU | L_TRUNCATED        # no subframe, so no addresses either
    whole = decode(make_batch([(WLAN, bytes(CASES["a-msdu"][1]))]))
    assert not int(whole["layers"][0]) & L_TRUNCATED


def test_a_radiotap_header_of_another_version_is_not_read():
    frame = bytearray(radiotap(data_header(0x01) + SNAP4))
    frame[0] = 1
    assert _radiotap_layers(bytes(frame)) == L_TRUNCATED


def test_only_the_flags_field_says_a_frame_ends_with_an_fcs():
    # TSFT and Rate, no Flags field: the rate byte (0x10, 8 Mb/s) has the bit that would mean "FCS at the end";
    # the UDP header ends the frame, so taking 4 bytes off as an FCS would cut it
    header = struct.pack("<BBHI", 0, 0, 17, 0x01 | 0x04) + struct.pack("<Q", 123) + b"\x10"
    bare = snap(0x0800, IP(src="10.1.0.1", dst="10.1.0.2") / UDP(sport=1000, dport=2000))
    assert _radiotap_layers(header + data_header(0x01) + bare) == UDP4


def test_a_tunnel_inside_an_a_msdu_keeps_the_a_msdu_bit():
    from scapy.layers.vxlan import VXLAN

    tunnel = snap(0x0800, IP(src="198.51.100.1", dst="198.51.100.2") / UDP(sport=50000, dport=4789) / VXLAN(vni=7)
                  / Ether(src="02:00:00:00:00:0a", dst="02:00:00:00:00:0b") / INNER4)
    frame = data_header(0x02, 8, qos=0x80) + amsdu((A1, A4, tunnel))
    layers = int(decode(make_batch([(WLAN, frame)]))["layers"][0])
    assert layers & (L_AMSDU | L_TUNNEL | L_IP4 | L_UDP) == L_AMSDU | L_TUNNEL | L_IP4 | L_UDP


def test_an_ethernet_header_alone_is_whole_and_one_byte_less_is_cut():
    frame = ETHERNET_MACS + b"\x88\xb5"          # IEEE local experimental: nothing to decode after it
    assert int(decode(make_batch([(1, frame)], tail=b"\x00" * 64))["layers"][0]) == ETH
    assert int(decode(make_batch([(1, frame[:-1])], tail=b"\x00" * 64))["layers"][0]) == L_TRUNCATED


def test_an_mpls_stack_without_a_bottom_label_is_cut_where_the_walk_gives_up():
    from detector.decode.link import MAX_L2_HEADERS

    label = struct.pack("!I", (100 << 12) | 64)             # never the bottom of the stack
    frame = ETHERNET_MACS + b"\x88\x47" + label * (MAX_L2_HEADERS + 1) + raw(INNER4)
    assert int(decode(make_batch([(1, frame)]))["layers"][0]) == ETH | L_TRUNCATED


def test_an_llc_snap_header_that_ends_the_body_is_whole():
    frame = data_header(0x01) + snap(0x88B5, b"")
    assert int(decode(make_batch([(WLAN, frame)], tail=b"\x00" * 64))["layers"][0]) == ETH
    assert int(decode(make_batch([(WLAN, frame[:-1])], tail=b"\x00" * 64))["layers"][0]) & L_TRUNCATED


def test_a_subframe_past_the_a_msdus_count_is_not_there_and_nothing_is_cut():
    # the frame has three subframes; asking for the sixth describes no subframe and flags no damage
    batch = decode(make_batch([(WLAN, CASES["a-msdu"][1])]), msdu=5)
    assert (int(batch["layers"][0]), int(batch["msdu_count"][0])) == (L_AMSDU, 3)

"""UDP-port tunnels are validated before they are removed: the valid ones decapsulate, each near miss stays
the UDP datagram it is (its own flow), and tshark dissects the same way wherever it has an opinion.

Frames are built byte for byte from the specifications: RFC 7348 VXLAN (and its group-policy extension),
draft-ietf-nvo3-vxlan-gpe (with RFC 8300 NSH), RFC 8926 Geneve, 3GPP TS 29.281 GTP-U, RFC 4380 Teredo, AYIYA
(draft-massar-v6ops-ayiya) and RFC 8086 GRE-in-UDP. Where the decoder's rule is Zeek's or the RFC's and
tshark decodes regardless, the case says so (TSHARK_DECODES_ANYWAY), and the test holds tshark to it too.
"""
from __future__ import annotations

import struct

import pytest
from scapy.contrib.geneve import GENEVE
from scapy.contrib.gtp import GTP_U_Header
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import GRE, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw, raw
from scapy.utils import wrpcap

from detector.decode import decode
from detector.decode.addr import ip_to_str
from detector.flows import FlowTable
from detector.schema import (
    L_DST_MAC,
    L_ETHERTYPE,
    L_IP4,
    L_IP6,
    L_PAYLOAD,
    L_PORTS,
    L_SRC_MAC,
    L_TCP,
    L_TUNNEL,
    L_UDP,
    PROTO_UDP,
    TUNNEL_AYIYA,
    TUNNEL_GENEVE,
    TUNNEL_GRE,
    TUNNEL_GTP,
    TUNNEL_TEREDO,
    TUNNEL_VXLAN,
)
from tests.test_decode import assert_reads_stop_at_the_capture, cut_everywhere, make_batch, one

OUTER = IP(src="198.51.100.1", dst="198.51.100.2")
INNER4 = IP(src="172.16.0.1", dst="172.16.0.2", ttl=33) / TCP(sport=1111, dport=2222, flags="A")
INNER6 = IPv6(src="2001:db8:1::1", dst="2001:db8:1::2") / TCP(sport=3333, dport=4444, flags="A")
TEREDO_CLIENT = "2001:0:4136:e378:8000:63bf:3fff:fdd2"    # RFC 4380 section 4: a Teredo address
UDP_ONLY = L_SRC_MAC | L_DST_MAC | L_ETHERTYPE | L_IP4 | L_UDP | L_PORTS | L_PAYLOAD


def udp(dport: int, payload: bytes, sport: int = 50000) -> bytes:
    return raw(Ether() / OUTER / UDP(sport=sport, dport=dport) / Raw(payload))


def vxlan(flags: int, second: int = 0, policy: int = 0, reserved: int = 0) -> bytes:
    """An 8-byte VXLAN header with VNI 7 (RFC 7348 section 5; draft-smith-vxlan-group-policy)."""
    return bytes([flags, second]) + struct.pack(">HI", policy, 7 << 8 | reserved)


def gpe(flags: int, next_protocol: int) -> bytes:
    return bytes([flags, 0, 0, next_protocol, 0, 0, 7, 0])


def geneve(first: int, proto: int, options: bytes = b"") -> bytes:
    return bytes([first, 0]) + struct.pack(">H", proto) + b"\x00\x00\x07\x00" + options


def gtp(flags: int, message: int, payload: bytes, length: int | None = None) -> bytes:
    return bytes([flags, message]) + struct.pack(">HI", len(payload) if length is None else length, 1) + payload


def ayiya(opcode_byte: int) -> bytes:
    # identity 2^4 = 16 bytes, signature 5 words, SHA-1; next header 41 (IPv6)
    return bytes([0x41, 0x52, opcode_byte, 41]) + b"\x00" * 4 + b"i" * 16 + b"s" * 20 + raw(INNER6)


def bubble(trailing: bytes = b"") -> bytes:
    """A Teredo bubble (RFC 4380 section 2.8): an IPv6 header, no next header, payload length 0."""
    return raw(IPv6(src=TEREDO_CLIENT, dst="2001:db8::9", nh=59, plen=0)) + trailing


ETH_INNER4 = raw(Ether() / INNER4)
# a Network Service Header (RFC 8300): version 0, TTL 63, 6 words, MD type 1, next protocol IPv4; SPI 1,
# service index 255; four zero context headers
NSH_IPV4 = bytes.fromhex("0fc60101000001ff") + bytes(16)
# name -> (frame, tunnel kind or 0 for "stays UDP", inner source address)
CASES = {
    "vxlan": (udp(4789, vxlan(0x08) + ETH_INNER4), TUNNEL_VXLAN, "172.16.0.1"),
    "vxlan-group-policy": (udp(4789, vxlan(0x88, 0x48, 0x1234) + ETH_INNER4), TUNNEL_VXLAN, "172.16.0.1"),
    "vxlan-i-flag-clear": (udp(4789, vxlan(0x00) + ETH_INNER4), 0, None),
    "vxlan-reserved-byte": (udp(4789, vxlan(0x08, reserved=1) + ETH_INNER4), 0, None),
    "vxlan-unknown-flag": (udp(4789, vxlan(0x09) + ETH_INNER4), 0, None),
    # scapy's VXLAN() before an Ether layer writes a VXLAN-GPE header (P flag, next protocol 3)
    "vxlan-gpe-header-on-4789": (udp(4789, raw(VXLAN(vni=7) / Ether() / INNER4)), TUNNEL_VXLAN, "172.16.0.1"),
    "vxlan-gpe-nsh-on-4789": (udp(4789, gpe(0x0C, 4) + raw(INNER4)), 0, None),
    "vxlan-gpe-ipv4": (udp(4790, gpe(0x0C, 1) + raw(INNER4)), TUNNEL_VXLAN, "172.16.0.1"),
    "vxlan-gpe-ethernet": (udp(4790, gpe(0x0C, 3) + ETH_INNER4), TUNNEL_VXLAN, "172.16.0.1"),
    "vxlan-gpe-nsh": (udp(4790, gpe(0x0C, 4) + raw(INNER4)), 0, None),
    "vxlan-gpe-version-1": (udp(4790, gpe(0x1C, 1) + raw(INNER4)), 0, None),
    # the P flag clear: on GPE's port the next protocol field is read all the same (arkime_synthetic.pcap
    # frames 618-619); on VXLAN's port the header is VXLAN's with a stray reserved byte
    "vxlan-gpe-p-flag-clear": (udp(4790, gpe(0x08, 1) + raw(INNER4)), TUNNEL_VXLAN, "172.16.0.1"),
    "vxlan-gpe-p-flag-clear-on-4789": (udp(4789, gpe(0x08, 1) + raw(INNER4)), 0, None),
    "vxlan-gpe-nsh-ipv4": (udp(4790, gpe(0x0C, 4) + NSH_IPV4 + raw(INNER4)), TUNNEL_VXLAN, "172.16.0.1"),
    "geneve": (udp(6081, raw(GENEVE(proto=0x6558) / Ether() / INNER4)), TUNNEL_GENEVE, "172.16.0.1"),
    "geneve-option": (udp(6081, geneve(0x02, 0x6558, b"\x01\x02\x03\x01" + b"\x00" * 4) + ETH_INNER4),
                      TUNNEL_GENEVE, "172.16.0.1"),
    "geneve-version-1": (udp(6081, geneve(0x40, 0x6558) + ETH_INNER4), 0, None),
    "geneve-option-overruns": (udp(6081, geneve(0x02, 0x6558, b"\x01\x02\x03\x02" + b"\x00" * 4) + ETH_INNER4),
                               0, None),
    "geneve-nsh": (udp(6081, geneve(0x00, 0x894F) + raw(INNER4)), 0, None),
    "geneve-nsh-ipv4": (udp(6081, geneve(0x00, 0x894F) + NSH_IPV4 + raw(INNER4)), TUNNEL_GENEVE, "172.16.0.1"),
    "gtp": (udp(2152, raw(GTP_U_Header(teid=1, gtp_type=255) / INNER4), 2152), TUNNEL_GTP, "172.16.0.1"),
    # a sequence number and no extension header: the optional fields are there, no extension follows
    "gtp-sequence-number": (udp(2152, raw(GTP_U_Header(teid=1, gtp_type=255, S=1, seq=7) / INNER4), 2152),
                            TUNNEL_GTP, "172.16.0.1"),
    # the same, with a next-extension type in its field: without the E flag it is to be ignored (TS 29.281 5.1)
    "gtp-next-extension-type-without-e-flag": (udp(2152, raw(GTP_U_Header(teid=1, gtp_type=255, S=1, seq=7,
                                                                        next_ex=0x85) / INNER4), 2152),
                                               TUNNEL_GTP, "172.16.0.1"),
    # the E flag with next-extension type 0: the optional fields are there, no extension follows them
    "gtp-e-flag-without-extension": (udp(2152, gtp(0x34, 0xFF, b"\x00" * 4 + raw(INNER4)), 2152), TUNNEL_GTP,
                                     "172.16.0.1"),
    "gtp-version-2": (udp(2152, gtp(0x50, 0xFF, raw(INNER4)), 2152), 0, None),
    "gtp-echo-request": (udp(2152, gtp(0x30, 0x01, raw(INNER4)), 2152), 0, None),
    "gtp-length-not-the-packet": (udp(2152, gtp(0x30, 0xFF, raw(INNER4) + b"\x00" * 4), 2152), 0, None),
    "teredo": (udp(3544, raw(INNER6), 3544), TUNNEL_TEREDO, "2001:db8:1::1"),
    "teredo-origin-indication": (udp(3544, b"\x00\x00\xf0\x0f\x3f\xff\xfd\xd2" + raw(INNER6), 3544),
                                 TUNNEL_TEREDO, "2001:db8:1::1"),
    "teredo-ipv4-payload": (udp(3544, b"\x00\x00\xf0\x0f\x3f\xff\xfd\xd2" + raw(INNER4), 3544), 0, None),
    "teredo-payload-length-too-long": (udp(3544, raw(INNER6)[:-4], 3544), 0, None),
    "teredo-bytes-past-the-packet": (udp(3544, raw(INNER6) + b"\x00" * 4, 3544), 0, None),
    "teredo-bubble-with-payload": (udp(3544, bubble(b"\x00" * 8), 3544), TUNNEL_TEREDO, TEREDO_CLIENT),
    "teredo-on-a-relay-port": (udp(40000, raw(IPv6(src=TEREDO_CLIENT, dst="2001:db8::9") / TCP(sport=5, dport=6)),
                                   50001), TUNNEL_TEREDO, TEREDO_CLIENT),
    "teredo-origin-indication-on-a-relay-port": (udp(40000, b"\x00\x00\xf0\x0f\x3f\xff\xfd\xd2" + raw(INNER6),
                                                     50001), TUNNEL_TEREDO, "2001:db8:1::1"),
    "ipv6-on-a-relay-port-without-teredo-address": (udp(40000, raw(INNER6), 50001), 0, None),
    "ayiya": (udp(5072, ayiya(0x11), 5072), TUNNEL_AYIYA, "2001:db8:1::1"),
    "ayiya-on-another-port": (udp(40000, ayiya(0x11), 50001), TUNNEL_AYIYA, "2001:db8:1::1"),
    "ayiya-not-forward": (udp(5072, ayiya(0x12), 5072), 0, None),
    "gre-in-udp": (udp(4754, raw(GRE(proto=0x0800) / INNER4)), TUNNEL_GRE, "172.16.0.1"),
    "gre-in-udp-key-ipv6": (udp(4754, raw(GRE(key_present=1, key=5, proto=0x86DD) / INNER6)), TUNNEL_GRE,
                            "2001:db8:1::1"),
    "gre-in-udp-reserved-bit": (udp(4754, b"\x01\x00\x08\x00" + raw(INNER4)), 0, None),
    "gre-in-udp-version-1": (udp(4754, b"\x00\x01\x08\x00" + raw(INNER4)), 0, None),
}
# near misses tshark 4.0 dissects all the same, and why the decoder does not
TSHARK_DECODES_ANYWAY = {
    "vxlan-i-flag-clear": "Wireshark's VXLAN dissector checks no flag; RFC 7348 and Zeek require I",
    "vxlan-reserved-byte": "Wireshark checks no reserved bit; Linux's vxlan_rcv drops the packet",
    "vxlan-unknown-flag": "Wireshark checks no flag; Linux's vxlan_rcv drops the packet",
    "vxlan-gpe-version-1": "Wireshark ignores the GPE version; the draft defines version 0 only",
    "geneve-version-1": "Wireshark ignores the version; RFC 8926 section 3.4 and Zeek reject it",
    "geneve-option-overruns": "Wireshark flags the misfit option and goes on",
    "gtp-length-not-the-packet": "Wireshark decodes the inner packet; Zeek rejects it (GTPv1 payload length)",
    "teredo-payload-length-too-long": "Wireshark decodes a cut IPv6 packet; Zeek rejects it (truncated Teredo)",
    "teredo-bytes-past-the-packet": "Wireshark decodes it; Zeek rejects it (Teredo payload length)",
    "gre-in-udp-reserved-bit": "Wireshark ignores reserved GRE bits; RFC 2784 section 2.3 discards them",
    "gre-in-udp-version-1": "Wireshark decodes version 1; RFC 8086 carries version 0 only",
}
# tunnels Zeek finds by content on any port; Wireshark's heuristics for them are off by default
TSHARK_MISSES = {
    "teredo-on-a-relay-port": "Zeek's Teredo protocol detection; Wireshark's teredo heuristic is off",
    "teredo-origin-indication-on-a-relay-port": "Zeek's Teredo protocol detection; Wireshark's teredo "
                                                "heuristic is off",
    "ayiya-on-another-port": "Zeek's AYIYA protocol detection; Wireshark has none",
}


@pytest.mark.parametrize("name", list(CASES))
def test_udp_tunnels_are_validated_before_removal(name):
    frame, kind, inner_src = CASES[name]
    row = one(frame)
    if kind == 0:
        assert row["layers"] == UDP_ONLY, name
        assert (ip_to_str(row["src_ip_hi"], row["src_ip_lo"]), row["proto"]) == ("198.51.100.1", PROTO_UDP)
        return
    inner_ip = L_IP6 if ":" in inner_src else L_IP4
    assert row["tunnel"] == kind and row["outer_proto"] == PROTO_UDP
    assert ip_to_str(row["src_ip_hi"], row["src_ip_lo"]) == inner_src
    assert ip_to_str(row["outer_src_ip_hi"], row["outer_src_ip_lo"]) == "198.51.100.1"
    transport = L_TCP | L_PORTS | L_PAYLOAD if name != "teredo-bubble-with-payload" else 0
    assert row["layers"] == L_SRC_MAC | L_DST_MAC | L_ETHERTYPE | L_TUNNEL | inner_ip | transport, name


def test_a_bubble_with_payload_is_a_header_alone():
    row = one(udp(3544, bubble(b"\x00" * 8), 3544))
    assert (row["proto"], row["ip_len"]) == (59, 40)


def test_a_near_miss_is_its_own_udp_flow_and_a_tunnel_is_two():
    table = FlowTable()
    near_misses = [name for name, (_, kind, _) in CASES.items() if kind == 0]
    table.update(decode(make_batch([(1, CASES[name][0]) for name in near_misses])))
    flows = table.to_frame()
    assert set(flows.proto) == {"udp"} and set(flows.src_ip) == {"198.51.100.1"}
    assert int(flows.src2dst_packets.sum()) == len(near_misses)
    table = FlowTable()
    table.update(decode(make_batch([(1, CASES["vxlan"][0])])))
    flows = table.to_frame()
    assert sorted(zip(flows.proto, flows.src_ip)) == [("tcp", "172.16.0.1"), ("udp", "198.51.100.1")]


def _tshark_last_ip_source(tshark, tmp_path) -> dict[str, str]:
    path = tmp_path / "udp-tunnels.pcap"
    wrpcap(str(path), [Ether(frame) for frame, _, _ in CASES.values()])
    rows = tshark.fields(path, "ip.src", "ipv6.src")
    sources = {}
    for name, (ip4, ip6) in zip(CASES, rows):
        # the innermost IP layer tshark reached: an inner IPv6 header follows the outer IPv4 one
        sources[name] = ip6.split(",")[-1] if ip6 else ip4.split(",")[-1]
    return sources


def test_tshark_dissects_as_the_decoder_does(tshark, tmp_path):
    sources = _tshark_last_ip_source(tshark, tmp_path)
    for name, (_, kind, inner_src) in CASES.items():
        ours = inner_src if kind else "198.51.100.1"
        if name in TSHARK_DECODES_ANYWAY:
            assert kind == 0 and sources[name] != ours, (name, sources[name])
        elif name in TSHARK_MISSES:
            assert kind and sources[name] == "198.51.100.1", (name, sources[name])
        else:
            assert sources[name] == ours, (name, sources[name], ours)


def test_every_cut_reads_nothing_past_the_capture():
    assert_reads_stop_at_the_capture(cut_everywhere([(1, frame) for frame, _, _ in CASES.values()]))

"""detector.decode on crafted frames: every link type, tag stack, IP and transport feature, tunnel,
ICMP quote and kind of damage, plus the fingerprint and the address helpers."""
from __future__ import annotations

import ipaddress
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.contrib.erspan import ERSPAN_II, ERSPAN_III
from scapy.contrib.geneve import GENEVE
from scapy.contrib.gtp import GTP_U_Header, GTPPDUSessionContainer
from scapy.contrib.mpls import MPLS
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPOption_RR
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6PacketTooBig,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.l2 import ARP, GRE, CookedLinux, CookedLinuxV2, Dot1AD, Dot1Q, Ether
from scapy.layers.ppp import GRE_PPTP, PPP, PPPoE
from scapy.layers.sctp import SCTP
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw, raw
from scapy.utils import wrpcap

from detector.decode import decode, fingerprint, fingerprints
from detector.decode.addr import ip_to_str, mac_to_str, str_to_ip
from detector.errors import UsageError
from detector.schema import (
    IP_DF,
    IP_MF,
    L_ARP,
    L_DST_MAC,
    L_ETHERTYPE,
    L_FRAG,
    L_ICMP,
    L_ICMP6,
    L_IP4,
    L_IP6,
    L_MSS,
    L_MTU,
    L_PAYLOAD,
    L_PKT_TYPE,
    L_PORTS,
    L_QINQ,
    L_QUOTE,
    L_QUOTE_PORTS,
    L_SACK_PERM,
    L_SCTP,
    L_SRC_MAC,
    L_TCP,
    L_TCP_TS,
    L_TRUNCATED,
    L_TUNNEL,
    L_UDP,
    L_VLAN,
    L_WSCALE,
    PACKET_COLUMNS,
    RAW_COLUMNS,
    TH_SYN,
    TUNNEL_AYIYA,
    TUNNEL_ERSPAN,
    TUNNEL_GENEVE,
    TUNNEL_GRE,
    TUNNEL_GTP,
    TUNNEL_IPIP,
    TUNNEL_TEREDO,
    TUNNEL_VXLAN,
    RawBatch,
)

MAC_A, MAC_B = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
TCP_SYN = TCP(sport=40000, dport=443, flags="S", seq=1000, window=64240,
              options=[("MSS", 1460), ("NOP", None), ("WScale", 7), ("SAckOK", b""), ("Timestamp", (11, 22))])
INNER_TCP = IP(src="172.16.0.1", dst="172.16.0.2", ttl=33) / TCP(sport=1111, dport=2222, flags="A")
# exact layer masks: a stray or missing bit is a decoder bug
ETH = L_SRC_MAC | L_DST_MAC | L_ETHERTYPE
UDP_LAYERS = L_UDP | L_PORTS | L_PAYLOAD
TCP_LAYERS = L_TCP | L_PORTS | L_PAYLOAD
UDP4 = ETH | L_IP4 | UDP_LAYERS
LINKTYPES = [0, 1, 9, 50, 51, 101, 104, 105, 108, 113, 127, 228, 229, 276, 147]


def make_batch(frames, tail: bytes = b"", caplens=None) -> RawBatch:
    """A RawBatch of (linktype, bytes) records; `tail` follows every record in the buffer, unseen."""
    chunks, offsets, pos = [], [], 0
    for _, frame in frames:
        offsets.append(pos)
        chunks.append(frame + tail)
        pos += len(frame) + len(tail)
    lens = [len(f) for _, f in frames] if caplens is None else caplens
    n = len(frames)
    cols = {"frame": np.arange(1, n + 1, dtype=np.int64), "offset": np.array(offsets, dtype=np.int64),
            "caplen": np.array(lens, dtype=np.uint32), "wirelen": np.array([len(f) for _, f in frames], np.uint32),
            "ts_ns": np.arange(n, dtype=np.int64) * 1000, "iface": np.zeros(n, np.uint16),
            "linktype": np.array([lt for lt, _ in frames], dtype=np.uint16), "epb_flags": np.zeros(n, np.uint32)}
    return RawBatch(np.frombuffer(b"".join(chunks), dtype=np.uint8).copy(), cols, "crafted")


def one(frame, linktype=1, caplen=None) -> dict:
    """Decode one frame; -> column name -> value, valid columns only (plus layers)."""
    frame = raw(frame) if not isinstance(frame, bytes) else frame
    batch = decode(make_batch([(linktype, frame)], caplens=None if caplen is None else [caplen]))
    assert_masks_consistent(batch)
    return {name: int(batch[name][0]) for name in PACKET_COLUMNS if batch.valid(name)[0]}


def assert_masks_consistent(batch):
    for name in PACKET_COLUMNS:
        assert not np.any(batch[name][~batch.valid(name)]), f"{name} holds a value where it is masked"


def ip(text: str) -> tuple[int, int]:
    return str_to_ip(text)


def addrs(row: dict, prefix: str = "") -> tuple[str, str]:
    return (ip_to_str(row[f"{prefix}src_ip_hi"], row[f"{prefix}src_ip_lo"]),
            ip_to_str(row[f"{prefix}dest_ip_hi"], row[f"{prefix}dest_ip_lo"]))


# ---- Ethernet, IPv4, TCP ------------------------------------------------------------------
def test_ethernet_ipv4_tcp_syn_with_options():
    frame = Ether(src=MAC_A, dst=MAC_B) / IP(src="10.0.0.1", dst="10.0.0.2", ttl=61, id=777, flags="DF") / TCP_SYN
    row = one(frame)
    assert row["layers"] == ETH | L_IP4 | TCP_LAYERS | L_MSS | L_WSCALE | L_SACK_PERM | L_TCP_TS
    assert mac_to_str(row["src_mac"]) == MAC_A and mac_to_str(row["dest_mac"]) == MAC_B
    assert row["ethertype"] == 0x0800 and row["ip_version"] == 4
    assert addrs(row) == ("10.0.0.1", "10.0.0.2")
    assert (row["ttl"], row["ip_id"], row["ip_flags"], row["proto"]) == (61, 777, IP_DF, 6)
    assert (row["src_port"], row["dest_port"], row["tcp_flags"], row["tcp_seq"]) == (40000, 443, TH_SYN, 1000)
    assert (row["tcp_window"], row["tcp_mss"], row["tcp_wscale"]) == (64240, 1460, 7)
    assert (row["tcp_tsval"], row["tcp_tsecr"]) == (11, 22)
    assert (row["l3_off"], row["l4_off"], row["payload_off"], row["payload_len"]) == (14, 34, 34 + 40, 0)
    assert "tcp_ack" in row and "arp_op" not in row and "tunnel" not in row


def test_ethernet_padding_does_not_count_as_payload_or_options():
    frame = raw(Ether() / IP(src="1.1.1.1", dst="2.2.2.2") / TCP(flags="A") / b"xy") + b"\x02\x04\x05\xb4" * 3
    row = one(frame)
    assert row["payload_len"] == 2 and row["ip_len"] == 42 and row["layers"] == ETH | L_IP4 | TCP_LAYERS


def test_tcp_flags_include_ns_and_ecn_bits():
    frame = bytearray(raw(Ether() / IP() / TCP(flags="SEC")))
    frame[14 + 20 + 12] |= 1                        # NS, the low bit of the data offset byte
    assert one(bytes(frame))["tcp_flags"] == 0x1C2


def test_bad_tcp_data_offset_keeps_ports_only():
    frame = bytearray(raw(Ether() / IP() / TCP(sport=5, dport=6)))
    frame[14 + 20 + 12] = 0x40                      # data offset 4 words < 5
    row = one(bytes(frame))
    assert row["layers"] == ETH | L_IP4 | L_PORTS | L_TRUNCATED
    assert (row["src_port"], row["dest_port"]) == (5, 6)


def test_bad_ihl_and_bad_total_length_stop_before_addresses():
    for patch in ((14, 0x44), (16, 0), (17, 10)):   # IHL 16 bytes; total length 10 < IHL
        frame = bytearray(raw(Ether() / IP() / UDP()))
        frame[patch[0]] = patch[1]
        if patch == (16, 0):
            frame[17] = 10
        row = one(bytes(frame))
        assert row["layers"] == ETH | L_TRUNCATED, patch


def test_zero_ip_total_length_is_segmentation_offload():
    frame = bytearray(raw(Ether() / IP() / TCP(flags="A") / (b"z" * 3000)))
    frame[16:18] = b"\x00\x00"
    row = one(bytes(frame))
    assert row["ip_len"] == len(frame) - 14 and row["payload_len"] == 3000


def test_udp_sctp_and_payload_length_from_ip_header():
    row = one(Ether() / IP() / UDP(sport=53, dport=5353) / b"abcd")
    assert row["layers"] == UDP4 and row["payload_len"] == 4 and row["payload_off"] == 42
    row = one(Ether() / IP() / SCTP(sport=2905, dport=2906))
    assert row["layers"] == ETH | L_IP4 | L_SCTP | L_PORTS | L_PAYLOAD
    assert (row["src_port"], row["dest_port"]) == (2905, 2906)


def test_a_transport_length_shorter_than_its_header_is_damage():
    # the IPv4 total length leaves 8 bytes for a 20-byte TCP header the frame does hold: the ports are read,
    # the header is not believed
    row = one(Ether() / IP(src="1.1.1.1", dst="2.2.2.2", len=28) / TCP(sport=1, dport=2))
    assert row["layers"] == ETH | L_IP4 | L_PORTS | L_TRUNCATED
    assert (row["src_port"], row["dest_port"]) == (1, 2) and "payload_len" not in row
    # 20 bytes for a header of 24 (an MSS option): the fixed header is read, no payload is claimed
    row = one(Ether() / IP(src="1.1.1.1", dst="2.2.2.2", len=40) / TCP(sport=1, dport=2, options=[("MSS", 1460)]))
    assert row["layers"] == ETH | L_IP4 | L_PORTS | L_TCP | L_TRUNCATED
    assert "payload_len" not in row


# ---- link layers --------------------------------------------------------------------------
def test_vlan_stacks():
    row = one(Ether() / Dot1Q(vlan=100) / IP() / UDP())
    assert row["vlan_outer"] == 100 and row["layers"] == UDP4 | L_VLAN
    row = one(Ether() / Dot1AD(vlan=200) / Dot1Q(vlan=300) / IPv6() / UDP())
    assert (row["vlan_outer"], row["vlan_inner"], row["ethertype"]) == (200, 300, 0x86DD)
    assert row["layers"] == ETH | L_IP6 | UDP_LAYERS | L_VLAN | L_QINQ
    triple = Ether(type=0x9100) / Dot1Q(vlan=7, type=0x8100) / Dot1Q(vlan=8) / Dot1Q(vlan=9) / IP() / UDP()
    row = one(triple)
    assert (row["vlan_outer"], row["vlan_inner"]) == (7, 8) and row["layers"] == UDP4 | L_VLAN | L_QINQ


def test_llc_snap_and_plain_llc():
    snap = Ether(dst=MAC_B, type=8 + 20 + 8) / b"\xaa\xaa\x03\x00\x00\x00\x08\x00" / IP() / UDP()
    assert one(snap)["layers"] == UDP4
    row = one(raw(Ether(type=3)) + b"\x42\x42\x03" + b"\x00" * 40)
    assert row["layers"] == L_SRC_MAC | L_DST_MAC


def test_pppoe_session_and_mpls():
    row = one(Ether() / PPPoE(sessionid=1) / PPP(proto=0x0021) / IP(src="9.9.9.9") / UDP())
    assert row["ethertype"] == 0x8864 and addrs(row)[0] == "9.9.9.9" and row["layers"] == UDP4
    row = one(Ether() / MPLS(label=16, s=0) / MPLS(label=17, s=1) / IPv6(src="2001:db8::5") / TCP())
    assert row["ethertype"] == 0x8847 and addrs(row)[0] == "2001:db8::5"
    assert row["layers"] == ETH | L_IP6 | TCP_LAYERS


# link-layer bits by link type: SLL carries the packet type, the sender's MAC and a protocol type; C-HDLC and PPPoE a
# type field
LINK_BITS = {113: L_PKT_TYPE | L_SRC_MAC | L_ETHERTYPE, 276: L_PKT_TYPE | L_SRC_MAC | L_ETHERTYPE, 104: L_ETHERTYPE,
             51: L_ETHERTYPE}


@pytest.mark.parametrize("linktype,frame,src", [
    (113, raw(CookedLinux(src=b"\x02\x00\x00\x00\x00\x0a\x00\x00", lladdrlen=6, proto=0x0800)
              / IP(src="3.3.3.3") / UDP()), "3.3.3.3"),
    (276, raw(CookedLinuxV2(proto=0x86DD, src=b"\x02\x00\x00\x00\x00\x0a\x00\x00", lladdrlen=6)
              / IPv6(src="2001:db8::3") / UDP()), "2001:db8::3"),
    (0, struct.pack("<I", 2) + raw(IP(src="4.4.4.1") / UDP()), "4.4.4.1"),
    (0, struct.pack(">I", 2) + raw(IP(src="4.4.4.2") / UDP()), "4.4.4.2"),
    (0, struct.pack("<I", 24) + raw(IPv6(src="2001:db8::18") / UDP()), "2001:db8::18"),
    (0, struct.pack("<I", 28) + raw(IPv6(src="2001:db8::1c") / UDP()), "2001:db8::1c"),
    (0, struct.pack(">I", 30) + raw(IPv6(src="2001:db8::1e") / UDP()), "2001:db8::1e"),
    (108, struct.pack(">I", 2) + raw(IP(src="4.4.4.3") / UDP()), "4.4.4.3"),
    (101, raw(IP(src="5.5.5.1") / UDP()), "5.5.5.1"),
    (101, raw(IPv6(src="2001:db8::51") / UDP()), "2001:db8::51"),
    (228, raw(IP(src="5.5.5.2") / UDP()), "5.5.5.2"),
    (229, raw(IPv6(src="2001:db8::52") / UDP()), "2001:db8::52"),
    (9, b"\xff\x03\x00\x21" + raw(IP(src="6.6.6.1") / UDP()), "6.6.6.1"),
    (9, b"\x00\x57" + raw(IPv6(src="2001:db8::61") / UDP()), "2001:db8::61"),
    (9, b"\x21" + raw(IP(src="6.6.6.2") / UDP()), "6.6.6.2"),      # protocol field compression
    (50, b"\xff\x03\x00\x21" + raw(IP(src="6.6.6.3") / UDP()), "6.6.6.3"),
    (104, b"\x0f\x00\x08\x00" + raw(IP(src="7.7.7.1") / UDP()), "7.7.7.1"),
    (51, raw(PPPoE(sessionid=3) / PPP(proto=0x0057) / IPv6(src="2001:db8::33") / UDP()), "2001:db8::33"),
])
def test_link_types(linktype, frame, src):
    row = one(frame, linktype)
    assert addrs(row)[0] == src
    assert row["layers"] == LINK_BITS.get(linktype, 0) | (L_IP4 if "." in src else L_IP6) | UDP_LAYERS
    if linktype in (113, 276):
        assert mac_to_str(row["src_mac"]) == MAC_A
        assert row["pkt_type"] == 0        # scapy's default: PKT_HOST


def test_unknown_link_type_keeps_raw_columns_only():
    frame = raw(Ether() / IP() / UDP())
    batch = decode(make_batch([(147, frame), (1, frame)]))
    assert int(batch["layers"][0]) == 0 and int(batch["layers"][1]) & L_UDP
    for name in RAW_COLUMNS:
        assert name in batch.cols
    assert int(batch["caplen"][0]) == len(frame) and int(batch["linktype"][0]) == 147
    assert batch["fingerprint"][0] == batch["fingerprint"][1] == fingerprint(frame)


def test_null_with_unknown_family_decodes_nothing():
    assert one(struct.pack("<I", 7) + raw(IP() / UDP()), 0)["layers"] == 0


# ---- IPv6 and fragments --------------------------------------------------------------------
def test_ipv6_extension_chain_and_first_fragment():
    pkt = (Ether() / IPv6(src="2001:db8::1", dst="2001:db8::2", hlim=9) / IPv6ExtHdrHopByHop()
           / IPv6ExtHdrRouting() / IPv6ExtHdrDestOpt() / IPv6ExtHdrFragment(id=0xABCDEF, m=1, offset=0)
           / UDP(sport=7, dport=8) / (b"q" * 16))
    row = one(pkt)
    assert row["layers"] == ETH | L_IP6 | L_FRAG | UDP_LAYERS and row["proto"] == 17 and row["ttl"] == 9
    assert (row["ip_id"], row["ip_flags"], row["frag_offset"]) == (0xABCDEF, IP_MF, 0)
    assert (row["src_port"], row["dest_port"]) == (7, 8)
    assert row["l4_off"] == 14 + 40 + 8 + 8 + 8 + 8 and row["payload_len"] == 16


def test_non_first_fragments_carry_no_ports():
    row = one(Ether() / IPv6() / IPv6ExtHdrFragment(id=5, m=0, offset=100, nh=6) / (b"\x00" * 40))
    assert row["layers"] == ETH | L_IP6 | L_FRAG
    assert (row["proto"], row["frag_offset"], row["ip_id"], row["ip_flags"]) == (6, 800, 5, 0)   # the last one
    row = one(Ether() / IP(flags="MF", frag=0, proto=17) / UDP(sport=1, dport=2) / (b"x" * 8))
    assert row["layers"] == UDP4 | L_FRAG and row["ip_flags"] == IP_MF
    row = one(Ether() / IP(frag=185, proto=17) / (b"x" * 16))
    assert row["layers"] == ETH | L_IP4 | L_FRAG and row["frag_offset"] == 1480


def test_ipv6_chain_past_the_capture_is_truncated():
    frame = raw(Ether() / IPv6() / IPv6ExtHdrDestOpt(options=[]) / UDP())
    row = one(frame[:14 + 40 + 1])
    assert row["layers"] == ETH | L_IP6 | L_TRUNCATED


# ---- IPsec Authentication Header in IPv4 -----------------------------------------------------
def ah(next_header: int, icv: bytes = bytes(12)) -> bytes:
    """An Authentication Header (RFC 4302 section 2): next header, length in 4-byte words minus 2, reserved,
    SPI, sequence number, integrity check value."""
    return bytes([next_header, (12 + len(icv)) // 4 - 2, 0, 0]) + struct.pack(">II", 0x1000, 1) + icv


AH_TRANSPORT = Ether() / IP(src="10.0.0.1", dst="10.0.0.2", proto=51) / Raw(ah(6) + raw(TCP_SYN))


def test_an_ipv4_authentication_header_is_stepped_over_to_the_transport_it_protects():
    row = one(AH_TRANSPORT)
    assert row["layers"] == ETH | L_IP4 | TCP_LAYERS | L_MSS | L_WSCALE | L_SACK_PERM | L_TCP_TS
    assert (row["proto"], row["l4_off"], row["src_port"], row["dest_port"]) == (6, 14 + 20 + 24, 40000, 443)


def test_an_ipv4_authentication_header_longer_than_its_packet_is_truncated():
    frame = bytearray(raw(AH_TRANSPORT))
    frame[14 + 20 + 1] = 60                                  # 248 bytes, past the 64 the IP header leaves it
    assert one(bytes(frame))["layers"] == ETH | L_IP4 | L_TRUNCATED
    # ESP (RFC 4303) encrypts what follows it: nothing to step over to
    assert one(Ether() / IP(proto=50) / Raw(b"\x00" * 40))["layers"] == ETH | L_IP4


# ---- ICMP -----------------------------------------------------------------------------------
def test_icmp_frag_needed_quotes_the_original_packet():
    quoted = raw(IP(src="10.1.1.1", dst="192.0.2.9", flags="DF") / TCP(sport=51000, dport=443))[:20 + 8]
    row = one(Ether() / IP(src="10.9.9.9", dst="10.1.1.1") / ICMP(type=3, code=4, nexthopmtu=1400) / quoted)
    assert row["layers"] == ETH | L_IP4 | L_ICMP | L_PAYLOAD | L_MTU | L_QUOTE | L_QUOTE_PORTS
    assert (row["icmp_type"], row["icmp_code"], row["icmp_mtu"]) == (3, 4, 1400)
    assert addrs(row, "quote_") == ("10.1.1.1", "192.0.2.9") and row["quote_proto"] == 6
    assert (row["quote_src_port"], row["quote_dest_port"]) == (51000, 443)


def test_icmp_quote_without_transport_bytes_has_no_ports():
    quoted = raw(IP(src="10.1.1.1", dst="192.0.2.9") / UDP())[:22]
    row = one(Ether() / IP() / ICMP(type=11, code=0) / quoted)
    assert row["layers"] == ETH | L_IP4 | L_ICMP | L_PAYLOAD | L_QUOTE


def test_icmpv6_packet_too_big_quotes_through_extension_headers():
    quoted = raw(IPv6(src="2001:db8::a", dst="2001:db8::b") / IPv6ExtHdrDestOpt() / UDP(sport=9, dport=10))
    row = one(Ether() / IPv6(src="2001:db8::1", dst="2001:db8::a") / ICMPv6PacketTooBig(mtu=1280) / quoted)
    assert row["layers"] == ETH | L_IP6 | L_ICMP6 | L_PAYLOAD | L_MTU | L_QUOTE | L_QUOTE_PORTS
    assert (row["icmp_type"], row["icmp_mtu"], row["quote_proto"]) == (2, 1280, 17)
    assert addrs(row, "quote_") == ("2001:db8::a", "2001:db8::b")
    assert (row["quote_src_port"], row["quote_dest_port"]) == (9, 10)


def test_icmp_echo_has_no_quote_or_mtu():
    row = one(Ether() / IP() / ICMP(type=8) / b"ping")
    assert row["layers"] == ETH | L_IP4 | L_ICMP | L_PAYLOAD and row["payload_len"] == 4


# ---- ARP ------------------------------------------------------------------------------------
def test_arp_reply():
    row = one(Ether(src=MAC_A, dst=MAC_B) / ARP(op=2, hwsrc=MAC_A, psrc="192.168.1.1", hwdst=MAC_B,
                                                pdst="192.168.1.2"))
    assert row["layers"] == ETH | L_ARP and row["arp_op"] == 2
    assert (mac_to_str(row["arp_sha"]), mac_to_str(row["arp_tha"])) == (MAC_A, MAC_B)
    assert (row["arp_spa"], row["arp_tpa"]) == (0xC0A80101, 0xC0A80102)


# ---- tunnels --------------------------------------------------------------------------------
OUTER4 = IP(src="198.51.100.1", dst="198.51.100.2")


def teredo(payload) -> bytes:
    auth = b"\x00\x01\x02\x01" + b"id" + b"a" + b"\x00" * 8 + b"\x00"   # id length 2, auth length 1
    origin = b"\x00\x00" + b"\xff\xff" + b"\x00" * 4
    return auth + origin + raw(payload)


def ayiya(payload, next_header) -> bytes:
    # identity 2^4 = 16 bytes, signature 5*4 = 20 bytes, forward opcode 1
    return bytes([0x41, 0x52, 0x11, next_header]) + b"\x00" * 4 + b"i" * 16 + b"s" * 20 + raw(payload)


INNER6 = IPv6(src="2001:db8:1::1", dst="2001:db8:1::2") / TCP(sport=3333, dport=4444)
TUNNELS = [
    ("4in4", Ether() / OUTER4 / INNER_TCP, TUNNEL_IPIP, 4, 0),
    ("6in4", Ether() / OUTER4 / INNER6, TUNNEL_IPIP, 41, 0),
    ("4in6", Ether() / IPv6(src="2001:db8::1", dst="2001:db8::2") / INNER_TCP, TUNNEL_IPIP, 4, 0),
    ("gre", Ether() / OUTER4 / GRE(proto=0x0800) / INNER_TCP, TUNNEL_GRE, 47, 0),
    ("gre-key-seq-csum", Ether() / OUTER4 / GRE(chksum_present=1, key_present=1, key=9, seqnum_present=1,
                                                   proto=0x86DD) / INNER6, TUNNEL_GRE, 47, 0),
    ("gre-teb", Ether() / OUTER4 / GRE(proto=0x6558) / Ether() / Dot1Q(vlan=42) / INNER_TCP, TUNNEL_GRE, 47, 0),
    ("erspan-1", Ether() / OUTER4 / GRE(proto=0x88BE) / Ether() / INNER_TCP, TUNNEL_ERSPAN, 47, 0),
    ("erspan-2", Ether() / OUTER4 / GRE(seqnum_present=1, proto=0x88BE) / ERSPAN_II() / Ether() / INNER_TCP,
     TUNNEL_ERSPAN, 47, 0),
    ("erspan-3", Ether() / OUTER4 / GRE(seqnum_present=1, proto=0x22EB) / ERSPAN_III() / Ether() / INNER_TCP,
     TUNNEL_ERSPAN, 47, 0),
    ("pptp", Ether() / OUTER4 / GRE_PPTP(seqnum_present=1, sequence_number=1, call_id=5, payload_len=44)
     / b"\xff\x03\x00\x21" / INNER_TCP, TUNNEL_GRE, 47, 0),
    ("vxlan", Ether() / OUTER4 / UDP(sport=50000, dport=4789) / VXLAN(flags=0x08, vni=7) / Ether() / INNER_TCP,
     TUNNEL_VXLAN, 17, 4789),
    ("geneve", Ether() / OUTER4 / UDP(sport=50001, dport=6081) / GENEVE(proto=0x6558, optionlen=2,
                                                                        options=b"\x00" * 8) / Ether() / INNER_TCP,
     TUNNEL_GENEVE, 17, 6081),
    ("geneve-ip", Ether() / OUTER4 / UDP(sport=50001, dport=6081) / GENEVE(proto=0x0800) / INNER_TCP,
     TUNNEL_GENEVE, 17, 6081),
    ("teredo", Ether() / OUTER4 / UDP(sport=3544, dport=50002) / Raw(teredo(INNER6)), TUNNEL_TEREDO, 17, 50002),
    ("gtp", Ether() / OUTER4 / UDP(sport=2152, dport=2152) / GTP_U_Header(E=1, S=1, next_ex=0x85, teid=1)
     / GTPPDUSessionContainer(type=0, QFI=5) / INNER_TCP, TUNNEL_GTP, 17, 2152),
    ("ayiya", Ether() / OUTER4 / UDP(sport=5072, dport=5072) / Raw(ayiya(INNER6, 41)), TUNNEL_AYIYA, 17, 5072),
    # the header's version says ERSPAN's type, whatever GRE's protocol type announced (Wireshark's
    # packet-erspan.c)
    ("erspan-2-under-0x22eb", Ether() / OUTER4 / GRE(seqnum_present=1, proto=0x22EB) / Raw(raw(ERSPAN_II()))
     / Ether() / INNER_TCP, TUNNEL_ERSPAN, 47, 0),
    ("erspan-3-under-0x88be", Ether() / OUTER4 / GRE(seqnum_present=1, proto=0x88BE) / Raw(raw(ERSPAN_III()))
     / Ether() / INNER_TCP, TUNNEL_ERSPAN, 47, 0),
    # a Network Service Header (RFC 8300) in GRE: MD type 1, next protocol IPv4
    ("gre-nsh", Ether() / OUTER4 / GRE(proto=0x894F) / Raw(bytes.fromhex("0fc60101000001ff") + bytes(16))
     / INNER_TCP, TUNNEL_GRE, 47, 0),
    # AH in tunnel mode (RFC 4302 section 3.1): the protected packet is IP in IP behind the header
    ("ah-tunnel-mode", Ether() / IP(src="198.51.100.1", dst="198.51.100.2", proto=51) / Raw(ah(4) + raw(INNER_TCP)),
     TUNNEL_IPIP, 4, 0),
]


@pytest.mark.parametrize("name,frame,kind,outer_proto,outer_dport", TUNNELS, ids=[t[0] for t in TUNNELS])
def test_tunnels_describe_the_inner_packet(name, frame, kind, outer_proto, outer_dport):
    row = one(frame)
    assert row["tunnel"] == kind and row["outer_proto"] == outer_proto
    assert row["outer_dest_port"] == outer_dport
    inner6 = name in ("6in4", "gre-key-seq-csum", "teredo", "ayiya")
    assert row["layers"] == ETH | L_TUNNEL | (L_IP6 if inner6 else L_IP4) | TCP_LAYERS
    if inner6:
        assert addrs(row) == ("2001:db8:1::1", "2001:db8:1::2") and (row["src_port"], row["dest_port"]) == (3333, 4444)
    else:
        assert addrs(row) == ("172.16.0.1", "172.16.0.2") and (row["src_port"], row["dest_port"]) == (1111, 2222)
        assert row["ttl"] == 33
    if name != "4in6":
        assert addrs(row, "outer_") == ("198.51.100.1", "198.51.100.2")
    assert mac_to_str(row["src_mac"]) == mac_to_str(int.from_bytes(raw(frame)[6:12], "big"))
    assert row["l3_off"] >= 14 + 20


def test_gre_vlan_of_the_inner_frame_does_not_replace_the_outer_tag():
    row = one(Ether() / Dot1Q(vlan=5) / OUTER4 / GRE(proto=0x6558) / Ether() / Dot1Q(vlan=42) / INNER_TCP)
    assert row["vlan_outer"] == 5 and row["layers"] == ETH | L_VLAN | L_TUNNEL | L_IP4 | TCP_LAYERS


def test_udp_on_tunnel_ports_without_a_tunnel_stays_udp():
    for payload in (b"\x60" + b"\x00" * 10, b"not gtp at all"):
        for port in (3544, 2152, 5072):
            row = one(Ether() / OUTER4 / UDP(sport=port, dport=port) / payload)
            assert row["layers"] == UDP4, (port, payload)


def test_inner_ip_of_the_wrong_version_is_not_decapsulated():
    row = one(Ether() / IP(proto=41) / raw(INNER_TCP))     # says IPv6, carries IPv4
    assert row["layers"] == ETH | L_IP4 and row["proto"] == 41


def test_tunnel_nesting_is_bounded():
    pkt = INNER_TCP
    for k in range(6):
        pkt = IP(src=f"10.0.0.{k + 1}", dst="10.0.0.99") / pkt
    row = one(Ether() / pkt)
    assert row["tunnel"] == TUNNEL_IPIP and addrs(row, "outer_") == ("10.0.0.6", "10.0.0.99")
    assert addrs(row) == ("10.0.0.2", "10.0.0.99") and row["proto"] == 4   # four removed, two remain


ERSPAN_NEAR_MISSES = {
    # a header of a version Wireshark knows no type of (0, then 3): no frame to decode
    "erspan-version-0": GRE(seqnum_present=1, proto=0x88BE) / Raw(b"\x00\x00\x00\x64" + bytes(4)),
    "erspan-version-3": GRE(seqnum_present=1, proto=0x22EB) / Raw(b"\x30\x00\x00\x64" + bytes(8)),
    # type III with frame type 2 (an IP packet, no Ethernet header): Wireshark hands it to its data dissector
    "erspan-3-frame-type-ip": GRE(seqnum_present=1, proto=0x22EB) / Raw(raw(ERSPAN_III(ft=2))),
}


@pytest.mark.parametrize("name", list(ERSPAN_NEAR_MISSES))
def test_an_erspan_header_without_an_ethernet_frame_after_it_leaves_the_gre_packet(name):
    row = one(Ether() / OUTER4 / ERSPAN_NEAR_MISSES[name] / Ether() / INNER_TCP)
    assert (row["layers"], row["proto"]) == (ETH | L_IP4, 47)
    assert addrs(row) == ("198.51.100.1", "198.51.100.2")


def test_erspan_is_decoded_as_tshark_decodes_it(tshark, tmp_path):
    frames = {name: Ether() / OUTER4 / gre / Ether() / INNER_TCP for name, gre in ERSPAN_NEAR_MISSES.items()}
    frames |= {name: frame for name, frame, *_ in TUNNELS if name.startswith("erspan")}
    path = tmp_path / "erspan.pcap"
    wrpcap(str(path), list(frames.values()))
    for name, (sources,) in zip(frames, tshark.fields(path, "ip.src")):
        ours = addrs(one(frames[name]))[0]
        assert sources.split(",")[-1] == ours, (name, sources, ours)


def test_arp_in_gre():
    row = one(Ether() / OUTER4 / GRE(proto=0x0806) / ARP(op=1, psrc="10.0.0.1", pdst="10.0.0.2"))
    assert row["layers"] == ETH | L_TUNNEL | L_ARP and row["arp_op"] == 1
    assert addrs(row, "outer_") == ("198.51.100.1", "198.51.100.2")


# ---- damage ---------------------------------------------------------------------------------
EVERYTHING = [f for _, f, *_ in TUNNELS] + [
    Ether() / Dot1AD(vlan=1) / Dot1Q(vlan=2) / IP() / TCP_SYN,
    Ether() / IPv6() / IPv6ExtHdrHopByHop() / IPv6ExtHdrFragment(m=1) / UDP(),
    Ether() / IP() / ICMP(type=3, code=4) / raw(IP() / TCP())[:24],
    Ether() / IPv6() / ICMPv6PacketTooBig() / raw(IPv6() / UDP()),
    Ether() / ARP(), Ether() / MPLS(s=1) / IP() / UDP(), Ether() / PPPoE() / PPP(proto=0x21) / IP() / SCTP(),
    AH_TRANSPORT,
]


def cut_everywhere(frames) -> list[tuple[int, bytes]]:
    return [(linktype, frame[:cut]) for linktype, frame in frames for cut in range(len(frame) + 1)]


def assert_reads_stop_at_the_capture(frames):
    """Every cut of every frame decodes the same whatever bytes follow it in the buffer."""
    zeros = decode(make_batch(frames, tail=b"\x00" * 64))
    ones = decode(make_batch(frames, tail=b"\xff" * 64))
    assert_masks_consistent(zeros)
    for name in PACKET_COLUMNS:
        assert np.array_equal(zeros[name], ones[name]), name


def _rows(batch) -> dict:
    return {name: batch[name] for name in PACKET_COLUMNS}


def test_every_truncation_point_decodes_what_is_present_and_nothing_past_caplen():
    frames = []
    for pkt in EVERYTHING:
        data = raw(pkt)
        frames += [(1, data[:cut]) for cut in range(len(data) + 1)]
    zeros, ones = decode(make_batch(frames, tail=b"\x00" * 64)), decode(make_batch(frames, tail=b"\xff" * 64))
    assert_masks_consistent(zeros)
    for name, column in _rows(zeros).items():
        assert np.array_equal(column, ones[name]), name
    cut_short = zeros["layers"] & L_TRUNCATED
    assert np.count_nonzero(cut_short) > len(EVERYTHING)


def test_snaplen_cut_keeps_the_headers_lengths():
    frame = raw(Ether() / IP() / TCP(flags="PA") / (b"p" * 1000))
    row = one(frame, caplen=54)
    assert row["layers"] == ETH | L_IP4 | TCP_LAYERS and row["payload_len"] == 1000


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(LINKTYPES), st.binary(min_size=0, max_size=160), st.binary(min_size=8, max_size=8))
def test_random_bytes_under_every_link_type(linktype, body, tail):
    frames = [(linktype, body)]
    a = decode(make_batch(frames, tail=tail))
    b = decode(make_batch(frames, tail=bytes(255 - x for x in tail)))
    assert_masks_consistent(a)
    for name, column in _rows(a).items():
        assert np.array_equal(column, b[name]), name


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(EVERYTHING), st.integers(0, 200), st.integers(0, 255))
def test_single_byte_corruptions(pkt, position, value):
    data = bytearray(raw(pkt))
    data[position % len(data)] = value
    batch = decode(make_batch([(1, bytes(data))], tail=b"\xee" * 8))
    assert_masks_consistent(batch)


def test_records_outside_the_buffer_are_refused():
    batch = make_batch([(1, raw(Ether() / IP()))])
    batch.cols["caplen"] = batch.cols["caplen"] + 1
    with pytest.raises(UsageError):
        decode(batch)


def test_empty_batch():
    batch = decode(make_batch([]))
    assert len(batch) == 0 and set(PACKET_COLUMNS) <= set(batch.cols)


# ---- fingerprint ----------------------------------------------------------------------------
def xxh64_reference(data: bytes, seed: int = 0) -> int:
    """XXH64 written from the specification with Python integers."""
    p1, p2, p3, p4, p5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                          0x27D4EB2F165667C5)
    m = (1 << 64) - 1
    rotl = lambda x, r: ((x << r) | (x >> (64 - r))) & m  # noqa: E731
    rnd = lambda acc, lane: rotl((acc + lane * p2) & m, 31) * p1 & m  # noqa: E731
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + p1 + p2) & m, (seed + p2) & m, seed, (seed - p1) & m]
        while i + 32 <= n:
            v = [rnd(v[k], int.from_bytes(data[i + 8 * k:i + 8 * k + 8], "little")) for k in range(4)]
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & m
        for x in v:
            h = ((h ^ rnd(0, x)) * p1 + p4) & m
    else:
        h = (seed + p5) & m
    h = (h + n) & m
    while i + 8 <= n:
        h = (rotl(h ^ rnd(0, int.from_bytes(data[i:i + 8], "little")), 27) * p1 + p4) & m
        i += 8
    if i + 4 <= n:
        h = (rotl(h ^ (int.from_bytes(data[i:i + 4], "little") * p1 & m), 23) * p2 + p3) & m
        i += 4
    while i < n:
        h = rotl(h ^ (data[i] * p5 & m), 11) * p1 & m
        i += 1
    h = ((h ^ (h >> 33)) * p2) & m
    h = ((h ^ (h >> 29)) * p3) & m
    return h ^ (h >> 32)


def test_fingerprint_is_xxh64_seed_0():
    # published XXH64 values (xxHash's sanity tests; `echo -n abc | xxhsum -H64`)
    assert fingerprint(b"") == 0xEF46DB3751D8E999
    assert fingerprint(b"a") == 0xD24EC4F1A98C6E5B
    assert fingerprint(b"abc") == 0x44BC2CF5AD770999
    rng = np.random.default_rng(7)
    for size in (1, 3, 4, 7, 8, 31, 32, 33, 63, 64, 100, 1514, 9000):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert fingerprint(data) == xxh64_reference(data), size


def test_fingerprint_column_identical_for_identical_bytes_only():
    base = raw(Ether() / IP(ttl=64) / UDP() / b"payload")
    flipped = bytearray(base)
    flipped[-1] ^= 1
    frames = [(1, base), (1, base), (1, bytes(flipped)), (1, base[:-1]), (113, base)]
    batch = decode(make_batch(frames, tail=b"\x99"))
    fp = batch["fingerprint"]
    assert fp[0] == fp[1] == fp[4] == fingerprint(base)
    assert len({int(fp[0]), int(fp[2]), int(fp[3])}) == 3
    assert np.array_equal(fingerprints(make_batch(frames)), fp)


# ---- address helpers ------------------------------------------------------------------------
def test_address_text_round_trips_like_ipaddress():
    texts = ["0.0.0.0", "255.255.255.255", "10.1.2.3", "::", "::1", "2001:db8::1", "fe80::1:2:3:4",
             "2001:db8:0:0:1::1", "1:2:3:4:5:6:7:8", "::ffff:0:1"]
    pairs = [str_to_ip(t) for t in texts]
    hi = np.array([p[0] for p in pairs], dtype=np.uint64)
    lo = np.array([p[1] for p in pairs], dtype=np.uint64)
    got = list(ip_to_str(hi, lo))
    want = [t if "." in t else ipaddress.IPv6Address(t).compressed for t in texts]
    want[-1] = "0.0.0.1"                           # ::ffff:0:1 is the IPv4-mapped 0.0.0.1
    assert got == want
    assert ip_to_str(*str_to_ip("192.0.2.1")) == "192.0.2.1"
    assert str_to_ip("::ffff:192.0.2.1") == str_to_ip("192.0.2.1")
    with pytest.raises(ValueError):
        str_to_ip("300.1.1.1")


def test_address_columns_agree_with_ipaddress_on_every_zero_run_shape():
    """The compiled formatter against Python's ipaddress (RFC 5952) on addresses built to hit every
    placement and length of zero runs, ties included, and the IPv4-mapped range around its edges."""
    rng = np.random.default_rng(5952)
    choices = np.array([0, 0, 0, 1, 0xFFFF, 0x0DB8], dtype=np.uint64)
    groups = choices[rng.integers(0, len(choices), size=(5000, 8))]
    groups[::7] = rng.integers(0, 1 << 16, size=(len(groups[::7]), 8), dtype=np.uint64)
    shifts = np.arange(48, -16, -16, dtype=np.uint64)
    hi = np.bitwise_or.reduce(groups[:, :4] << shifts, axis=1)
    lo = np.bitwise_or.reduce(groups[:, 4:] << shifts, axis=1)
    edges = [(0, 0xFFFF << 32), (0, (0xFFFF << 32) | 0xFFFFFFFF), (0, 0xFFFE << 32), (0, 0x1FFFF << 32),
             (1, 0xFFFF << 32), (0, 0), (0, 1), ((1 << 64) - 1, (1 << 64) - 1)]
    hi = np.concatenate([hi, np.array([e[0] for e in edges], dtype=np.uint64)])
    lo = np.concatenate([lo, np.array([e[1] for e in edges], dtype=np.uint64)])
    want = []
    for high, low in zip(hi.tolist(), lo.tolist()):
        address = ipaddress.IPv6Address((high << 64) | low)
        want.append(str(address.ipv4_mapped) if address.ipv4_mapped is not None else address.compressed)
    assert list(ip_to_str(hi, lo)) == want
    assert ip_to_str(hi.reshape(-1, 2), lo.reshape(-1, 2)).tolist() == np.array(want).reshape(-1, 2).tolist()


def test_mac_text():
    values = np.array([0x0200000000AB, 0xFFFFFFFFFFFF, 0], dtype=np.uint64)
    assert list(mac_to_str(values)) == ["02:00:00:00:00:ab", "ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00"]
    assert mac_to_str(np.array([[1, 1]], dtype=np.uint64)).shape == (1, 2)



# Frames without a tunnel (a cut inside a tunnel's header leaves the carrier whole: a UDP datagram
# or an IP packet of its own) on every link type that has a header of its own: any cut before the
# transport payload must say so, any cut in the payload must not. (PPP is left out: with protocol
# field compression, a frame cut after its first byte is a whole one-byte protocol number.)
HEADER_FRAMES = [(1, raw(pkt)) for pkt in EVERYTHING[len(TUNNELS):] if ARP not in pkt] + [
    (113, raw(CookedLinux(src=b"\x02\x00\x00\x00\x00\x0a\x00\x00", lladdrlen=6, proto=0x0800) / IP() / UDP())),
    (276, raw(CookedLinuxV2(proto=0x86DD, src=b"\x02\x00\x00\x00\x00\x0a\x00\x00", lladdrlen=6) / IPv6() / UDP())),
    (0, struct.pack("<I", 2) + raw(IP() / UDP())),
    (104, b"\x0f\x00\x08\x00" + raw(IP() / UDP())),
    (51, raw(PPPoE(sessionid=3) / PPP(proto=0x0057) / IPv6() / UDP())),
    # VN-Tag (0x8926: 4 bytes, then the type) and 802.1ah PBB (0x88E7: I-tag and inner MACs, 16 bytes)
    (1, raw(Ether(type=0x8926)) + bytes(4) + b"\x08\x00" + raw(IP() / TCP_SYN)),
    (1, raw(Ether(type=0x88E7)) + bytes(16) + b"\x08\x00" + raw(IP() / UDP())),
    (1, raw(Ether() / PPPoE() / PPP(proto=0x21) / IP() / UDP())),
    (1, raw(Ether() / IP(options=[IPOption_RR(routers=["192.0.2.1"])]) / UDP())),
]


def _truncated_cuts(linktype: int, frame: bytes) -> list[int]:
    layers = decode(make_batch(cut_everywhere([(linktype, frame)]), tail=b"\x00" * 64))["layers"]
    return [cut for cut, value in enumerate(layers.tolist()) if value & L_TRUNCATED]


@pytest.mark.parametrize("linktype,frame", HEADER_FRAMES)
def test_a_cut_inside_the_headers_is_truncated_and_a_cut_after_them_is_not(linktype, frame):
    whole = one(frame, linktype)
    assert whole["layers"] & L_PAYLOAD and not whole["layers"] & L_TRUNCATED
    assert _truncated_cuts(linktype, frame) == list(range(int(whole["payload_off"])))


def test_an_arp_packet_cut_anywhere_is_truncated():
    frame = raw(Ether() / ARP())
    assert one(frame)["layers"] & L_ARP and len(frame) == 42
    assert _truncated_cuts(1, frame) == list(range(42))


@pytest.mark.parametrize("bit,option,length", [(L_MSS, 2, 4), (L_WSCALE, 3, 3), (L_SACK_PERM, 4, 2),
                                                (L_TCP_TS, 8, 10)])
def test_only_a_well_formed_option_sets_its_bit(bit, option, length):
    def layers(kind: int, size: int) -> int:
        return one(raw(Ether() / IP() / TCP(flags="S", options=[(kind, bytes(size - 2))])))["layers"]

    assert layers(option, length) & bit
    # an experimental option of the same length (RFC 4727), and the option with a stray byte
    assert not layers(254, length) & bit
    assert not layers(option, length + 1) & bit


@pytest.mark.parametrize("linktype,frame", [
    # a link header whose type the decoder does not follow (LLDP, CDP) is the whole frame
    (113, raw(CookedLinux(src=b"\x02\x00\x00\x00\x00\x0a\x00\x00", lladdrlen=6, proto=0x88CC))),
    (276, raw(CookedLinuxV2(proto=0x88CC, src=b"\x02\x00\x00\x00\x00\x0a\x00\x00", lladdrlen=6))),
    (104, b"\x0f\x00\x20\x00"),
    (1, raw(Ether() / PPPoE() / PPP(proto=0xC021)) + bytes(4)),     # LCP: a PPP protocol, not a network one
])
def test_a_whole_link_header_with_nothing_after_it_is_not_truncated(linktype, frame):
    assert not one(frame, linktype)["layers"] & L_TRUNCATED


@pytest.mark.parametrize("sequence,ack", [(1, 0), (0, 1), (1, 1)])
def test_pptp_gre_finds_its_ppp_payload_after_the_optional_numbers(sequence, ack):
    inner = IP(src="10.9.9.1", dst="10.9.9.2") / UDP(sport=53, dport=53)
    gre = GRE_PPTP(seqnum_present=sequence, acknum_present=ack, sequence_number=7, ack_number=6, call_id=5,
                   payload_len=4 + len(raw(inner)))
    # with the HDLC address and control bytes, as PPTP sends them: a payload looked for one byte off
    # reads 0x03 as a compressed protocol number instead of finding IPv4
    row = one(raw(Ether() / OUTER4 / gre / Raw(b"\xff\x03\x00\x21" + raw(inner))))
    assert row["layers"] & L_TUNNEL and ip_to_str(row["src_ip_hi"], row["src_ip_lo"]) == "10.9.9.1"



def test_more_link_headers_than_the_walk_takes_are_not_decoded_past():
    frame = Ether(type=0x8100)
    for vlan in range(9):      # one more than the eight tags and labels walked
        frame = frame / Dot1Q(vlan=vlan + 1)
    row = one(raw(frame / IP() / UDP()))
    assert row["layers"] & L_TRUNCATED and not row["layers"] & L_IP4


def test_an_ip_length_too_short_for_the_tcp_header_is_truncated():
    packet = IP(raw(IP(src="192.0.2.1", dst="192.0.2.2") / TCP()))
    packet.len = 20 + 12          # room for 12 of the TCP header's 20 bytes
    row = one(raw(Ether() / packet))
    assert row["layers"] & L_TRUNCATED and not row["layers"] & L_PAYLOAD


# ---- boundaries the mutation run found untested (tests/mutation) -------------------------------------

@pytest.mark.parametrize("transport", [UDP(sport=5000, dport=53), TCP(sport=5000, dport=53),
                                       SCTP(sport=5000, dport=53)], ids=["udp", "tcp", "sctp"])
def test_a_transport_header_cut_right_after_its_ports_still_has_them(transport):
    frame = raw(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2")
                / transport / b"abcd")
    ports = 14 + 20 + 4
    cut = one(frame, caplen=ports)
    assert cut["layers"] & (L_PORTS | L_TRUNCATED) == L_PORTS | L_TRUNCATED
    assert (cut["src_port"], cut["dest_port"]) == (5000, 53)
    short = one(frame, caplen=ports - 1)
    assert not short["layers"] & L_PORTS and short["layers"] & L_TRUNCATED


@pytest.mark.parametrize("ethertype,first_byte", [(0x0800, 0x65), (0x0800, 0x55), (0x86DD, 0x45)])
def test_an_ip_header_of_another_version_than_its_ethertype_is_not_decoded(ethertype, first_byte):
    # a header length that would pass (5 words), so only the version says it is no IPv4 / IPv6
    packet = IP(src="10.0.0.1", dst="10.0.0.2") if ethertype == 0x0800 else IPv6(src="::1", dst="::2")
    # 40 bytes or more: enough for either header, so only the version can refuse it
    header = bytearray(raw(packet / UDP() / bytes(32)))
    header[0] = first_byte if ethertype == 0x0800 else (first_byte & 0xF0) | (header[0] & 0x0F)
    frame = raw(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", type=ethertype)) + bytes(header)
    decoded = one(frame)
    assert decoded["layers"] & (L_IP4 | L_IP6 | L_TRUNCATED) == L_TRUNCATED


def test_an_ipv4_header_with_nothing_after_it_is_whole():
    # total length 20 = the header: a protocol without payload (253: RFC 3692 experimentation)
    frame = raw(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2",
                                                                            proto=253))
    assert len(frame) == 14 + 20
    assert one(frame)["layers"] == ETH | L_IP4


@pytest.mark.parametrize("packet,bit", [(IP(src="10.0.0.1", dst="10.0.0.2") / ICMP(type=3, code=4), L_ICMP),
                                        (IPv6(src="::1", dst="::2") / ICMPv6DestUnreach(code=4), L_ICMP6)])
def test_an_icmp_header_cut_right_after_its_code_keeps_type_and_code(packet, bit):
    frame = raw(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / packet / bytes(8))
    header = 14 + (20 if bit == L_ICMP else 40)
    cut = one(frame, caplen=header + 2)
    assert cut["layers"] & (bit | L_TRUNCATED) == bit | L_TRUNCATED
    assert (cut["icmp_type"], cut["icmp_code"]) == ((3, 4) if bit == L_ICMP else (1, 4))
    assert not one(frame, caplen=header + 1)["layers"] & bit


def test_an_ipv6_header_with_nothing_after_it_is_whole():
    frame = raw(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IPv6(src="::1", dst="::2", nh=59))
    assert len(frame) == 14 + 40
    assert one(frame)["layers"] == ETH | L_IP6


@pytest.mark.parametrize("field,layers", [(1500, ETH & ~L_ETHERTYPE), (1536, ETH)])
def test_a_type_field_of_1500_is_an_802_3_length_and_1536_a_type(field, layers):
    # IEEE 802.3 clause 3.2.6: up to 1500 a length (then LLC, here not SNAP); from 1536 (0x0600) a type
    frame = bytes.fromhex("020000000002020000000001") + struct.pack("!H", field) + b"\x42\x42\x03" + bytes(43)
    assert one(frame)["layers"] == layers


def test_an_icmp_quote_with_exactly_the_ports_has_them():
    quoted = raw(IP(src="10.1.1.1", dst="192.0.2.9") / UDP(sport=5353, dport=53))[:20 + 4]
    row = one(Ether() / IP() / ICMP(type=11, code=0) / quoted)
    assert row["layers"] == ETH | L_IP4 | L_ICMP | L_PAYLOAD | L_QUOTE | L_QUOTE_PORTS
    assert (row["quote_src_port"], row["quote_dest_port"]) == (5353, 53)


def test_ipv4_flags_are_those_set_and_no_other():
    assert one(Ether() / IP(flags=0) / UDP())["ip_flags"] == 0
    assert one(Ether() / IP(flags="DF") / UDP())["ip_flags"] == IP_DF


@pytest.mark.parametrize("proto", [17, 253])
def test_ipv4_options_cut_by_the_capture_are_truncated_without_a_transport(proto):
    # 253 (RFC 3692): a protocol nothing decodes, so only the IP layer can say the header was cut
    frame = raw(Ether() / IP(options=[IPOption_RR(routers=["10.0.0.1", "10.0.0.2"])], proto=proto) / bytes(8))
    row = one(frame, caplen=14 + 20 + 4)        # inside the 12 bytes of options
    assert row["layers"] & (L_IP4 | L_TRUNCATED | L_UDP | L_PORTS) == L_IP4 | L_TRUNCATED


@pytest.mark.parametrize("tag", [Dot1Q(vlan=5, type=0x88B5)], ids=["vlan"])
def test_a_vlan_tag_whose_type_ends_the_frame_is_whole(tag):
    frame = raw(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / tag)
    assert one(frame)["layers"] == ETH | L_VLAN
    assert one(frame[:-1])["layers"] & L_TRUNCATED


def test_an_802_11_management_header_alone_is_whole_and_a_cut_one_is_not():
    from scapy.layers.dot11 import Dot11

    header = raw(Dot11(type=0, subtype=8, addr1="ff:ff:ff:ff:ff:ff", addr2="02:00:00:00:00:01",
                       addr3="02:00:00:00:00:01"))
    assert len(header) == 24
    assert not one(header, linktype=105)["layers"] & L_TRUNCATED
    assert one(header[:-1], linktype=105)["layers"] & L_TRUNCATED


def test_a_null_header_of_an_unknown_family_with_nothing_after_it_is_whole():
    assert one(struct.pack("<I", 99), linktype=0)["layers"] == 0
    assert one(struct.pack("<I", 99)[:3], linktype=0)["layers"] == L_TRUNCATED


@pytest.mark.parametrize("code,mtu", [(4, True), (3, False), (1, False)])
def test_only_fragmentation_needed_carries_a_next_hop_mtu(code, mtu):
    quoted = raw(IP(src="10.1.1.1", dst="192.0.2.9") / UDP(sport=5353, dport=53))[:28]
    row = one(Ether() / IP() / ICMP(type=3, code=code, nexthopmtu=1400) / quoted)
    assert bool(row["layers"] & L_MTU) == mtu


def test_an_arp_fixed_header_alone_of_another_protocol_is_whole():
    # hardware Ethernet, protocol 0x86DD (not IPv4): the decoder reads IPv4-over-Ethernet ARP only
    fixed = struct.pack("!HHBBH", 1, 0x86DD, 6, 16, 1)
    frame = bytes.fromhex("ffffffffffff020000000001") + b"\x08\x06" + fixed
    assert one(frame)["layers"] == ETH
    assert one(frame[:-1])["layers"] == ETH | L_TRUNCATED

"""TCP segments of more than 65,535 bytes (Linux BIG TCP, RFC 2675 jumbograms), plain and inside VXLAN and
Geneve, captured whole and cut by a 200-byte snapshot length: lengths, offsets, ports and flags exact.

IPv4 BIG TCP leaves the total length 0 (the packet is the rest of the frame on the wire); IPv6 leaves the
payload length 0 and carries the length in a hop-by-hop Jumbo Payload option, or nothing at all. RFC 2675
section 4 sets a jumbo UDP datagram's length field to 0, so the outer UDP headers here say 0 too.
"""
from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import raw

from detector.decode import decode
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
    TH_ACK,
    TH_PSH,
    TUNNEL_GENEVE,
    TUNNEL_VXLAN,
)
from tests.test_decode import make_batch

PAYLOAD = bytes(range(256)) * 274 + b"x" * 16        # 70,160 bytes
SEGMENT = raw(IP() / TCP(sport=40000, dport=443, flags="PA", seq=7, ack=9))[20:]
SNAPLEN = 200
ETH_TYPE = {4: b"\x08\x00", 6: b"\x86\xdd"}
# an Ethernet trailer (an FCS) after the jumbograms: only the option tells where the packet ends
TRAILER = b"\xde\xad\xbe\xef"
LAYERS = L_SRC_MAC | L_DST_MAC | L_ETHERTYPE | L_TCP | L_PORTS | L_PAYLOAD


def ethernet(packet: bytes, version: int) -> bytes:
    return b"\x02\x00\x00\x00\x00\x0b\x02\x00\x00\x00\x00\x0a" + ETH_TYPE[version] + packet


def ipv4_big() -> bytes:
    # total length 0, left to the NIC, and the header checksum computed over it so, as the stack sends it
    return raw(IP(src="10.0.0.1", dst="10.0.0.2", proto=6, len=0))[:20] + SEGMENT + PAYLOAD


def ipv6_header(next_header: int) -> bytes:
    header = bytearray(raw(IPv6(src="2001:db8::1", dst="2001:db8::2", nh=next_header)))
    header[4:6] = b"\x00\x00"
    return bytes(header)


def ipv6_jumbo(padded: bool = False) -> bytes:
    """RFC 2675: a hop-by-hop header whose Jumbo Payload option holds everything after the IPv6 header."""
    hop_by_hop_len = 16 if padded else 8
    jumbo = struct.pack(">BBI", 0xC2, 4, hop_by_hop_len + len(SEGMENT) + len(PAYLOAD))
    options = (b"\x01\x00" + jumbo + b"\x01\x04\x00\x00\x00\x00") if padded else jumbo   # PadN around it
    return ipv6_header(0) + bytes([6, hop_by_hop_len // 8 - 1]) + options + SEGMENT + PAYLOAD + TRAILER


def ipv6_no_option() -> bytes:
    return ipv6_header(6) + SEGMENT + PAYLOAD


def udp_carrier(port: int, payload: bytes) -> bytes:
    # IPv4 total length and UDP length 0, the header checksum computed with them
    header = raw(IP(src="198.51.100.1", dst="198.51.100.2", len=0) / UDP(sport=50000, dport=port, len=0))[:28]
    return ethernet(header + payload, 4)


def vxlan(inner: bytes) -> bytes:
    return udp_carrier(4789, b"\x08\x00\x00\x00\x00\x00\x07\x00" + inner)


def geneve(inner: bytes) -> bytes:
    return udp_carrier(6081, b"\x00\x00\x65\x58\x00\x00\x07\x00" + inner)


# name -> (frame, tunnel, IP version, ip_len, l4_off)
CASES = {
    "ipv4": (ethernet(ipv4_big(), 4), 0, 4, 70200, 34),
    "ipv6-jumbo-option": (ethernet(ipv6_jumbo(), 6), 0, 6, 40 + 8 + 20 + 70160, 62),
    "ipv6-jumbo-option-padded": (ethernet(ipv6_jumbo(padded=True), 6), 0, 6, 40 + 16 + 20 + 70160, 70),
    "ipv6-no-option": (ethernet(ipv6_no_option(), 6), 0, 6, 40 + 20 + 70160, 54),
    "vxlan-ipv4": (vxlan(ethernet(ipv4_big(), 4)), TUNNEL_VXLAN, 4, 70200, 84),
    "vxlan-ipv6-jumbo-option": (vxlan(ethernet(ipv6_jumbo(), 6)), TUNNEL_VXLAN, 6, 70228, 112),
    "geneve-ipv4": (geneve(ethernet(ipv4_big(), 4)), TUNNEL_GENEVE, 4, 70200, 84),
    "geneve-ipv6-jumbo-option": (geneve(ethernet(ipv6_jumbo(), 6)), TUNNEL_GENEVE, 6, 70228, 112),
}


@pytest.mark.parametrize("snapped", [False, True], ids=["whole", "snaplen-200"])
@pytest.mark.parametrize("name", list(CASES))
def test_segments_over_64k(name, snapped):
    frame, tunnel, version, ip_len, l4_off = CASES[name]
    batch = decode(make_batch([(1, frame)], caplens=[SNAPLEN] if snapped else None))
    row = {column: int(batch[column][0]) for column in ("layers", "tunnel", "ip_len", "payload_len", "l4_off",
                                                        "payload_off", "src_port", "dest_port", "tcp_flags")}
    assert row == {"layers": LAYERS | (L_IP4 if version == 4 else L_IP6) | (L_TUNNEL if tunnel else 0),
                   "tunnel": tunnel, "ip_len": ip_len, "payload_len": 70160, "l4_off": l4_off,
                   "payload_off": l4_off + 20, "src_port": 40000, "dest_port": 443, "tcp_flags": TH_PSH | TH_ACK}


def test_a_jumbo_option_below_64k_is_not_a_length():
    frame = bytearray(ethernet(ipv6_jumbo(), 6))
    frame[14 + 40 + 4:14 + 40 + 8] = struct.pack(">I", 1000)     # RFC 2675 section 3: an error
    batch = decode(make_batch([(1, bytes(frame))]))
    assert int(batch["payload_len"][0]) == 70160 + len(TRAILER) and int(batch["ip_len"][0]) == len(frame) - 14


def write_pcap(path, frames, snaplen):
    with open(path, "wb") as handle:
        handle.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1))
        for i, frame in enumerate(frames):
            handle.write(struct.pack("<IIII", 1_700_000_000, i, min(len(frame), snaplen), len(frame)))
            handle.write(frame[:snaplen])


# tshark 4.0 neither follows a UDP datagram whose length field is 0 (RFC 2675 section 4) nor takes an IPv6
# payload length of 0 without a jumbo option as the rest of the frame: it has an opinion on the rest
TSHARK_CASES = ["ipv4", "ipv6-jumbo-option", "ipv6-jumbo-option-padded"]


@pytest.mark.parametrize("snaplen", [262144, SNAPLEN])
def test_lengths_agree_with_tshark(tshark, tmp_path, snaplen):
    path = tmp_path / "big-tcp.pcap"
    write_pcap(path, [CASES[name][0] for name in TSHARK_CASES], snaplen)
    rows = tshark.fields(path, "ip.len", "ipv6.opt.jumbo", "tcp.len", "tcp.srcport", "tcp.flags")
    for name, (ip4_len, jumbo, tcp_len, sport, flags) in zip(TSHARK_CASES, rows):
        _, _, version, ip_len, _ = CASES[name]
        assert (int(ip4_len) if version == 4 else 40 + int(jumbo)) == ip_len, name
        assert (int(tcp_len), int(sport), int(flags, 16)) == (70160, 40000, TH_PSH | TH_ACK), name

"""The Toeplitz RSS model against Microsoft's published verification vectors, and its queue mapping."""
from __future__ import annotations

import ipaddress
import struct

import numpy as np
import pytest

from detector.errors import UsageError
from detector.rss import MICROSOFT_KEY, SYMMETRIC_KEY, RssModel, toeplitz_hash

# "Verifying the RSS Hash Calculation" (Microsoft, Windows driver docs; the
# same table is in Intel's 82599 datasheet, 7.1.2.8.3):
# source address, source port, destination address, destination port,
# hash over addresses only, hash over addresses and ports.
IPV4_VECTORS = [
    ("66.9.149.187", 2794, "161.142.100.80", 1766, 0x323E8FC2, 0x51CCC178),
    ("199.92.111.2", 14230, "65.69.140.83", 4739, 0xD718262A, 0xC626B0EA),
    ("24.19.198.95", 12898, "12.22.207.184", 38024, 0xD2D0A5DE, 0x5C2B394A),
    ("38.27.205.30", 48228, "209.142.163.6", 2217, 0x82989176, 0xAFC7327F),
    ("153.39.163.191", 44251, "202.188.127.2", 1303, 0x5D1809C5, 0x10E828A2),
]
IPV6_VECTORS = [
    ("3ffe:2501:200:1fff::7", 2794, "3ffe:2501:200:3::1", 1766, 0x2CC18CD5, 0x40207D3D),
    ("3ffe:501:8::260:97ff:fe40:efab", 14230, "ff02::1", 4739, 0x0F0C461C, 0xDDE51BBF),
    ("3ffe:1900:4545:3:200:f8ff:fe21:67cf", 44251, "fe80::200:f8ff:fe21:67cf", 38024, 0x4B61E985, 0x02D1FEEF),
]
ALL_VECTORS = IPV4_VECTORS + IPV6_VECTORS


def halves(text: str) -> tuple[int, int]:
    """The schema's representation: 128 bits big-endian in two uint64 halves, IPv4 mapped."""
    address = ipaddress.ip_address(text)
    if address.version == 4:
        address = ipaddress.IPv6Address(f"::ffff:{text}")
    value = int(address)
    return value >> 64, value & (2**64 - 1)


def columns(vectors, hash_ports: bool):
    src = [halves(v[0]) for v in vectors]
    dst = [halves(v[2]) for v in vectors]
    u64 = lambda values: np.array(values, dtype=np.uint64)  # noqa: E731
    return (u64([h for h, _ in src]), u64([lo for _, lo in src]), u64([h for h, _ in dst]),
            u64([lo for _, lo in dst]), np.array([v[1] for v in vectors], dtype=np.uint16),
            np.array([v[3] for v in vectors], dtype=np.uint16),
            np.array([":" in v[0] for v in vectors]), np.full(len(vectors), hash_ports))


@pytest.mark.parametrize("src, sport, dst, dport, without_ports, with_ports", ALL_VECTORS)
def test_reference_hash_matches_published_vector(src, sport, dst, dport, without_ports, with_ports):
    addresses = ipaddress.ip_address(src).packed + ipaddress.ip_address(dst).packed
    assert toeplitz_hash(MICROSOFT_KEY, addresses) == without_ports
    assert toeplitz_hash(MICROSOFT_KEY, addresses + struct.pack(">HH", sport, dport)) == with_ports


@pytest.mark.parametrize("hash_ports, expected_index", [(False, 4), (True, 5)])
def test_column_hash_matches_published_vectors(hash_ports, expected_index):
    hashes = RssModel().hash_tuples(*columns(ALL_VECTORS, hash_ports))
    assert hashes.tolist() == [v[expected_index] for v in ALL_VECTORS]


def test_rows_mix_families_and_port_choices():
    vectors = [IPV4_VECTORS[0], IPV6_VECTORS[0], IPV4_VECTORS[1], IPV6_VECTORS[2]]
    cols = list(columns(vectors, True))
    cols[7] = np.array([True, False, False, True])
    hashes = RssModel().hash_tuples(*cols)
    assert hashes.tolist() == [0x51CCC178, 0x2CC18CD5, 0xD718262A, 0x02D1FEEF]


def test_symmetric_key_gives_both_directions_one_hash_and_default_key_does_not():
    forward = columns(ALL_VECTORS, True)
    src_hi, src_lo, dst_hi, dst_lo, sport, dport, v6, ports = forward
    backward = (dst_hi, dst_lo, src_hi, src_lo, dport, sport, v6, ports)
    symmetric = RssModel(key=SYMMETRIC_KEY)
    assert symmetric.hash_tuples(*forward).tolist() == symmetric.hash_tuples(*backward).tolist()
    default = RssModel()
    assert (default.hash_tuples(*forward) != default.hash_tuples(*backward)).all()


def test_queue_is_indirection_table_of_low_hash_bits():
    model = RssModel(queues=6, table_size=128)
    hashes = np.array([0x51CCC178, 0x0000007F, 0xFFFFFF80, 0x00000005, 0x00000086], dtype=np.uint32)
    # table entry i holds queue i % 6; the entry is the hash's low 7 bits
    assert model.queue_of(hashes).tolist() == [(0x78 % 6), 127 % 6, 0, 5, 6 % 6]
    assert RssModel(queues=8).queue_of(np.array([0x51CCC178], dtype=np.uint32)).tolist() == [0]


def test_bad_configurations_are_usage_errors():
    with pytest.raises(UsageError, match="RSS key of 16 bytes"):
        RssModel(key=bytes(16))
    with pytest.raises(UsageError, match="power of two"):
        RssModel(table_size=100)
    with pytest.raises(UsageError, match="at least one queue"):
        RssModel(queues=0)


# ---- the model over decoded frames -------------------------------------------

def decoded(tmp_path, packets):
    """Frames written with scapy, read back through the project's reader and decoder (one batch)."""
    from scapy.all import wrpcap

    from detector.decode import decode
    from detector.ingest import open_capture

    path = tmp_path / "frames.pcap"
    wrpcap(str(path), packets)
    batches = [decode(raw) for raw in open_capture(str(path))]
    assert len(batches) == 1
    return batches[0]


def test_batch_hash_follows_the_fields_the_nic_hashes(tmp_path):
    from scapy.all import ARP, ICMP, IP, TCP, UDP, Dot1Q, Ether, IPv6, Raw

    src, sport, dst, dport, two, four = IPV4_VECTORS[0]
    src6, sport6, dst6, dport6, _, four6 = IPV6_VECTORS[0]
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    frames = [
        eth / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport),                  # 4-tuple
        eth / IP(src=src, dst=dst) / UDP(sport=sport, dport=dport) / Raw(b"x"),      # UDP: 2-tuple by default
        eth / Dot1Q(vlan=7) / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport),  # the tag is not hashed
        eth / IPv6(src=src6, dst=dst6) / TCP(sport=sport6, dport=dport6),
        eth / IP(src=src, dst=dst, flags="MF", frag=0) / UDP(sport=sport, dport=dport) / Raw(bytes(64)),
        eth / IP(src=src, dst=dst) / ICMP(),                                         # no ports: 2-tuple
        eth / ARP(psrc="10.0.0.1", pdst="10.0.0.2"),                                 # not IP: hash 0
    ]
    batch = decoded(tmp_path, frames)
    hashes = RssModel().hash(batch).tolist()
    assert hashes == [four, two, four, four6, two, two, 0]
    with_udp_ports = RssModel(udp_ports=True).hash(batch).tolist()
    assert with_udp_ports[1] == four and with_udp_ports[4] == two   # a fragment never hashes ports
    queues = RssModel(queues=8).queue(batch).tolist()
    assert queues == [h % 8 for h in hashes] and queues[-1] == 0


def test_a_tunnelled_packet_hashes_its_outer_header_unless_the_nic_hashes_inner_ones(tmp_path):
    from scapy.all import GRE, IP, TCP, UDP, Ether
    from scapy.layers.vxlan import VXLAN

    src, sport, dst, dport, _, four = IPV4_VECTORS[0]
    vtep_a, _, vtep_b, _, vteps_two, _ = IPV4_VECTORS[1]
    outer_sport, outer_dport = IPV4_VECTORS[2][1], 4789
    inner = Ether() / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport)
    frames = [Ether() / IP(src=vtep_a, dst=vtep_b) / UDP(sport=outer_sport, dport=outer_dport) / VXLAN(vni=1) / inner,
              Ether() / IP(src=vtep_a, dst=vtep_b) / GRE() / inner[IP]]
    batch = decoded(tmp_path, frames)
    # the NIC parses the outer header: UDP addresses only by default, GRE carries no ports
    assert RssModel().hash(batch).tolist() == [vteps_two, vteps_two]
    outer_with_ports = toeplitz_hash(MICROSOFT_KEY, ipaddress.ip_address(vtep_a).packed +
                                     ipaddress.ip_address(vtep_b).packed + struct.pack(">HH", outer_sport, outer_dport))
    assert RssModel(udp_ports=True).hash(batch).tolist() == [outer_with_ports, vteps_two]
    # inner-header RSS hashes the decapsulated TCP 4-tuple of both
    assert RssModel(inner_headers=True).hash(batch).tolist() == [four, four]
    # the header named for a flow is the one hashed, ports included where they are not hashed
    rows = np.arange(2)
    outer = RssModel().hashed_headers(batch, rows)
    assert outer["src_port"].tolist() == [outer_sport, 0] and outer["proto"].tolist() == [17, 47]
    assert outer["dest_ip_lo"].tolist() == [halves(vtep_b)[1]] * 2
    inner_headers = RssModel(inner_headers=True).hashed_headers(batch, rows)
    assert inner_headers["src_port"].tolist() == [sport, sport] and inner_headers["proto"].tolist() == [6, 6]
    assert inner_headers["src_ip_lo"].tolist() == [halves(src)[1]] * 2

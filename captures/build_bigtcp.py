"""BIG TCP captures: TCP segments with more than 65,535 bytes of payload, taken on a host, with no SYN.

Linux's BIG TCP (gso_max_size / gro_max_size above 64 KiB) hands the capture
point of a host super-segments larger than an IP length field can describe:
IPv4 packets with total length 0 (the real length is the captured one) and
IPv6 jumbograms, whose payload length is 0 and whose hop-by-hop header
carries the jumbo payload option with the 32-bit length (RFC 2675). Inside a
VXLAN or Geneve tunnel the outer headers are as large, so their lengths are 0
too: the outer IP length as above, and the UDP length (RFC 2675 section 4
says so for IPv6; over IPv4 the 16-bit field cannot hold the length either,
and tshark then stops at the UDP header).

Each capture is a download already running when the capture started: the
server's super-segments come before any SYN, the client's ACKs between
them. That is the shape that once crashed mss-violation (no MSS known, a
payload above any 16-bit MSS). Nothing here is an incident.

scapy cannot build a packet longer than 65,535 bytes (its length fields
overflow), so the frames are put together with struct.
"""
from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

from common import T0
from scapy.utils import PcapWriter

ETH_IP4, ETH_IP6, ETH_TEB = 0x0800, 0x86DD, 0x6558     # IEEE ethertypes; TEB: transparent Ethernet bridging
PROTO_HOPOPT, PROTO_TCP, PROTO_UDP = 0, 6, 17
JUMBO_OPTION = 0xC2          # RFC 2675 section 2: jumbo payload option type
VXLAN_PORT, GENEVE_PORT = 4789, 6081       # RFC 7348, RFC 8926
VXLAN_VNI_VALID = 0x08                     # RFC 7348 section 5: the I flag
TCP_ACK, TCP_PSH = 0x10, 0x08
MAX_RECORD_BYTES = 262_144   # the largest record Wireshark's readers accept
SERVER_MAC, CLIENT_MAC = "02:00:5e:b1:00:10", "02:00:5e:b1:00:20"
VTEP_MACS = ("02:00:5e:b1:f0:01", "02:00:5e:b1:f0:02")
ADDRESSES = {4: ("192.0.2.10", "198.51.100.20", "203.0.113.1", "203.0.113.2"),
             6: ("2001:db8:b1::10", "2001:db8:b2::20", "2001:db8:ffff::1", "2001:db8:ffff::2")}
SERVER_PORT, CLIENT_PORT = 443, 52311
# GRO/TSO super-segments of a BIG TCP host (gso_max_size 185,000 in the kernel docs' example)
SEGMENTS = (66_000, 70_000)


def _checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of `data`."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def _ethernet(src: str, dst: str, ethertype: int, payload: bytes) -> bytes:
    return _mac(dst) + _mac(src) + struct.pack("!H", ethertype) + payload


def _transport(version: int, src: str, dst: str, proto: int, header: bytes, payload: bytes) -> bytes:
    """`header` + `payload` with the checksum at its place (TCP 16, UDP 6) over the pseudo-header."""
    length = len(header) + len(payload)
    # the pseudo-header's length is 32 bits for IPv6 (RFC 8200 8.1) and as good as 32 for the sum over IPv4
    pseudo = (ipaddress.ip_address(src).packed + ipaddress.ip_address(dst).packed +
              struct.pack("!IxxxB", length, proto))
    at = 16 if proto == PROTO_TCP else 6
    value = _checksum(pseudo + header + payload) or 0xFFFF
    return header[:at] + struct.pack("!H", value) + header[at + 2:] + payload


def _network(version: int, src: str, dst: str, proto: int, body: bytes, ident: int) -> tuple[int, bytes]:
    """(ethertype, IP packet) around `body`, with the lengths BIG TCP writes when they overflow 16 bits."""
    if version == 4:
        total = 20 + len(body)
        header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total if total <= 0xFFFF else 0, ident, 0x4000, 64, proto,
                             0, ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed)
        header = header[:10] + struct.pack("!H", _checksum(header)) + header[12:]
        return ETH_IP4, header + body
    if len(body) <= 0xFFFF:
        return ETH_IP6, (struct.pack("!IHBB", 6 << 28, len(body), proto, 64) + ipaddress.ip_address(src).packed +
                         ipaddress.ip_address(dst).packed + body)
    # a jumbogram: payload length 0, hop-by-hop header with the jumbo payload option (RFC 2675 section 2)
    hop_by_hop = struct.pack("!BBBBI", proto, 0, JUMBO_OPTION, 4, 8 + len(body))
    return ETH_IP6, (struct.pack("!IHBB", 6 << 28, 0, PROTO_HOPOPT, 64) + ipaddress.ip_address(src).packed +
                     ipaddress.ip_address(dst).packed + hop_by_hop + body)


def _tcp(version: int, src: str, dst: str, sport: int, dport: int, seq: int, ack: int, flags: int,
         payload: bytes) -> bytes:
    header = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 4096, 0, 0)
    return _transport(version, src, dst, PROTO_TCP, header, payload)


def _encapsulate(tunnel: str, version: int, inner_frame: bytes, flow_port: int, ident: int) -> bytes:
    """`inner_frame` (Ethernet) inside VXLAN or Geneve between two VTEPs of the same IP version."""
    _, _, vtep_a, vtep_b = ADDRESSES[version]
    if tunnel == "vxlan":
        port = VXLAN_PORT
        shim = struct.pack("!B3xI", VXLAN_VNI_VALID, 5001 << 8)
    else:
        port = GENEVE_PORT
        shim = struct.pack("!BBHI", 0, 0, ETH_TEB, 5001 << 8)    # version 0, no options
    body = shim + inner_frame
    length = 8 + len(body)
    # the UDP source port carries the inner flow's entropy (RFC 7348 section 5)
    udp = struct.pack("!HHHH", flow_port, port, length if length <= 0xFFFF else 0, 0)
    datagram = _transport(version, vtep_a, vtep_b, PROTO_UDP, udp, body)
    ethertype, packet = _network(version, vtep_a, vtep_b, PROTO_UDP, datagram, ident)
    return _ethernet(VTEP_MACS[0], VTEP_MACS[1], ethertype, packet)


def _frames(version: int, tunnel: str | None) -> list[bytes]:
    """The server's super-segments and the client's ACKs, mid-transfer (no handshake captured)."""
    server, client, _, _ = ADDRESSES[version]
    seq, ack = 3_000_000_001, 17_000_001
    out = []
    for k, size in enumerate(SEGMENTS):
        pairs = [(server, client, SERVER_PORT, CLIENT_PORT, seq, ack, TCP_ACK | TCP_PSH, bytes(size)),
                 (client, server, CLIENT_PORT, SERVER_PORT, ack, seq + size, TCP_ACK, b"")]
        seq += size
        for j, (src, dst, sport, dport, s, a, flags, payload) in enumerate(pairs):
            segment = _tcp(version, src, dst, sport, dport, s, a, flags, payload)
            ethertype, packet = _network(version, src, dst, PROTO_TCP, segment, 0x2000 + 2 * k + j)
            macs = (SERVER_MAC, CLIENT_MAC) if src == server else (CLIENT_MAC, SERVER_MAC)
            frame = _ethernet(*macs, ethertype, packet)
            if tunnel:
                frame = _encapsulate(tunnel, version, frame, 49152 + sport % 1024, 0x3000 + 2 * k + j)
            out.append(frame)
    return out


def _write(path: Path, frames: list[bytes]) -> int:
    writer = PcapWriter(str(path), linktype=1, snaplen=MAX_RECORD_BYTES, sync=False)
    writer.write_header(None)
    for i, frame in enumerate(frames):
        usec = 1000 * i       # a millisecond apart
        writer.write_packet(frame, sec=T0, usec=usec, caplen=len(frame), wirelen=len(frame))
    writer.close()
    return len(frames)


def _builder(version: int, tunnel: str | None):
    family = "ipv4-total-length-0" if version == 4 else "ipv6-jumbo"
    name = f"big-tcp-{family}" + (f"-{tunnel}" if tunnel else "") + ".pcap"
    shape = ("IPv4 with total length 0" if version == 4 else "IPv6 jumbograms (hop-by-hop jumbo payload option)")

    def build(out_dir: Path) -> dict:
        path = out_dir / name
        count = _write(path, _frames(version, tunnel))
        where = f" inside {'VXLAN' if tunnel == 'vxlan' else 'Geneve'}" if tunnel else ""
        return {"file": name, "packets": count,
                "what": f"host-side BIG TCP download, {shape}{where}: super-segments of "
                        f"{SEGMENTS[0]:,} and {SEGMENTS[1]:,} bytes of payload before any SYN",
                "must_yield": [],
                "must_not_yield": [{"rule": "*", "severity_above": "info"}]}

    build.__name__ = name.removesuffix(".pcap").replace("-", "_")
    return build


CAPTURES = [_builder(version, tunnel) for version in (4, 6) for tunnel in (None, "vxlan", "geneve")]

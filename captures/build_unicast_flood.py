"""Unicast flooding captures (seed 002): a mirror port that suddenly receives other hosts' unicast, and near-misses.

One server VLAN, 10.70.0.0/24: twelve hosts (02:00:5e:70:00:xx) talking
TCP with each other in both directions, about 50 frames a second, the
background of every capture. Frames are built with struct from templates
(headers only, 60 bytes), times with numpy, written as pcap, pcapng (with
`epb_flags`) or Linux cooked capture (SLL):

- a flood: after 70 s of background, 1,000 frames a second for 4 s to
  sixteen MACs of other ports that this port never heard as sources (TCP
  from the gateway, one-sided): high;
- a partial flood: 25 frames a second for 48 s to four such MACs beside the
  background, a third of the frames: medium;
- the seed 002 chain: two VRRP masters of VRID 60 fighting from 70 s, both
  sending gratuitous ARP from the virtual MAC (build_vrrp's helpers), and
  from 75 s the clients' frames to the virtual MAC flooded to this port, a
  Linux host capturing in promiscuous mode that marks them in `epb_flags`
  as received promiscuously: critical;
- a Linux host's own capture (SLL) whose frames turn PACKET_OTHERHOST at
  70 s: high, by direct proof;
- near-misses: asymmetric routing from the start (a third of the frames go
  to a router MAC that never sends here, all along): info; an ingress-only
  SPAN (clients to the gateway, nothing back): nothing; a silent printer
  that receives a few frames now and then and a large job at 80 s: info.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from build_vrrp import LB1, LB2, _adverts, _garps
from common import T0

LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL = 1, 113
ETH_IPV4 = 0x0800
PACKET_HOST, PACKET_OTHERHOST, PACKET_OUTGOING = 0, 3, 4     # linux/if_packet.h
EPB_RX_UNICAST, EPB_RX_PROMISCUOUS = 1, 4                    # pcapng epb_flags bits 2-4
HOSTS = 12
GATEWAY = 0                                                  # host 0 is the gateway, 10.70.0.1
FLOOD_RULE = "unicast-flood"
OTHERS = ["echo-loop", "routing-loop", "rss-saturation", "arp-spoof", "rip-trigger"]


def _mac(value: int) -> bytes:
    return value.to_bytes(6, "big")


def _host_mac(k: int) -> bytes:
    return _mac(0x02005E700001 + k)


def _host_ip(k: int) -> bytes:
    return bytes([10, 70, 0, 1 + k])


def _other_mac(k: int) -> bytes:
    """A host on another port of the switch: never a source here."""
    return _mac(0x02005E710001 + k)


def _other_ip(k: int) -> bytes:
    return bytes([10, 70, 1, 1 + k])


def _ip_checksum(header: bytes) -> int:
    total = sum(struct.unpack("!10H", header))
    total = (total & 0xFFFF) + (total >> 16)
    total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _ipv4_tcp(src_ip: bytes, dst_ip: bytes, sport: int, dport: int, seq: int) -> bytes:
    """An IPv4 header and a 20-byte TCP ACK without payload (checksum 0: nothing here reads it)."""
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40, 0, 0x4000, 64, 6, 0, src_ip, dst_ip)
    header = header[:10] + struct.pack("!H", _ip_checksum(header)) + header[12:]
    return header + struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, 1, 0x50, 0x10, 502, 0, 0)


def _ether(dst: bytes, src: bytes, payload: bytes) -> bytes:
    frame = dst + src + struct.pack("!H", ETH_IPV4) + payload
    return frame + bytes(max(0, 60 - len(frame)))


def _tcp_frame(src: int, dst: int, seq: int, dst_mac: bytes | None = None, dst_ip: bytes | None = None,
               src_mac: bytes | None = None, src_ip: bytes | None = None) -> bytes:
    return _ether(dst_mac or _host_mac(dst), src_mac or _host_mac(src),
                  _ipv4_tcp(src_ip or _host_ip(src), dst_ip or _host_ip(dst), 40000 + src, 443 + dst, seq))


def _background(rng: np.random.Generator, start: float, stop: float, rate: float = 50.0) -> list:
    """Hosts talking with each other: each frame answered 1 ms later, both MACs sources here."""
    out = []
    count = int((stop - start) * rate / 2)
    times = np.sort(rng.uniform(start, stop, count))
    pairs = rng.integers(0, HOSTS, size=(count, 2))
    for k, (t, (a, b)) in enumerate(zip(times.tolist(), pairs.tolist())):
        b = b if a != b else (a + 1) % HOSTS
        out.append((t, _tcp_frame(a, b, k)))
        out.append((t + 0.001, _tcp_frame(b, a, k)))
    return out


def _flood(rng: np.random.Generator, start: float, stop: float, rate: float, targets: int) -> list:
    """The gateway's frames to hosts on other ports, flooded to this one."""
    count = int((stop - start) * rate)
    times = np.sort(rng.uniform(start, stop, count))
    who = rng.integers(0, targets, size=count)
    return [(t, _tcp_frame(GATEWAY, 0, k, dst_mac=_other_mac(w), dst_ip=_other_ip(w)))
            for k, (t, w) in enumerate(zip(times.tolist(), who.tolist()))]


# ---- writers ------------------------------------------------------------------------------------

def _write_pcap(path: Path, timed: list, linktype: int = LINKTYPE_ETHERNET) -> int:
    timed = sorted(timed, key=lambda item: item[0])
    with path.open("wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype))
        for t, frame in timed:
            micros = round(t * 1e6)
            out.write(struct.pack("<IIII", T0 + micros // 1_000_000, micros % 1_000_000, len(frame), len(frame)))
            out.write(frame)
    return len(timed)


def _block(kind: int, body: bytes) -> bytes:
    body += bytes(-len(body) % 4)
    return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def _write_pcapng(path: Path, timed: list) -> int:
    """(seconds, frame, epb_flags or None) in time order, one Ethernet interface, microsecond times."""
    timed = sorted(timed, key=lambda item: item[0])
    with path.open("wb") as out:
        out.write(_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)))
        out.write(_block(1, struct.pack("<HHI", LINKTYPE_ETHERNET, 0, 65535)))
        for t, frame, flags in timed:
            micros = (T0 * 1_000_000) + round(t * 1e6)
            body = struct.pack("<IIIII", 0, micros >> 32, micros & 0xFFFFFFFF, len(frame), len(frame))
            body += frame + bytes(-len(frame) % 4)
            if flags is not None:
                body += struct.pack("<HHI", 2, 4, flags) + struct.pack("<HH", 0, 0)
            out.write(_block(6, body))
    return len(timed)


def _sll(pkt_type: int, src_mac: bytes, frame: bytes) -> bytes:
    """A Linux cooked header (16 bytes: packet type, ARPHRD_ETHER, address length, address, protocol) for the
    IP packet of an Ethernet `frame`."""
    return struct.pack("!HHH8sH", pkt_type, 1, 6, src_mac + bytes(2), ETH_IPV4) + frame[14:54]


def _entry(path: Path, count: int, what: str, yield_at_least: str | None, quiet_above: str) -> dict:
    entry = {"file": path.name, "packets": count, "what": what}
    entry["must_yield"] = [{"rule": FLOOD_RULE, "severity_at_least": yield_at_least}] if yield_at_least else []
    entry["must_not_yield"] = [{"rule": FLOOD_RULE, "severity_above": quiet_above}] + [
        {"rule": rule, "severity_above": "info"} for rule in OTHERS]
    return entry


# ---- captures -----------------------------------------------------------------------------------

def mirror_flood(out_dir: Path) -> dict:
    path = out_dir / "unicast-flood-mirror.pcap"
    rng = np.random.default_rng(70)
    count = _write_pcap(path, _background(rng, 0, 80) + _flood(rng, 70, 74, 1000, 16))
    return _entry(path, count, "a mirror port that at 70 s receives 1,000 frames a second for 4 s to sixteen MACs "
                               "it never heard as sources (the gateway's TCP, one-sided), after a quiet minute",
                  "high", "high")


def partial_flood(out_dir: Path) -> dict:
    path = out_dir / "unicast-flood-partial.pcap"
    rng = np.random.default_rng(71)
    count = _write_pcap(path, _background(rng, 0, 125) + _flood(rng, 72, 120, 25, 4))
    return _entry(path, count, "a third of a mirror port's frames go to four MACs never heard as sources for 48 s, "
                               "after a quiet minute: a partial flood", "medium", "medium")


def vrrp_chain(out_dir: Path) -> dict:
    """build_vrrp's dual master and GARP fight on the same virtual MAC, and the flood it causes."""
    from build_vrrp import VMAC
    path = out_dir / "unicast-flood-vrrp-chain.pcapng"
    rng = np.random.default_rng(72)
    vmac = bytes.fromhex(VMAC.replace(":", ""))
    timed = [(t, frame, None) for t, frame in _background(rng, 0, 110)]
    scapy_packets = _adverts(LB1, 200, 0, 110) + _adverts(LB2, 100, 70, 110)
    for t in range(70, 110, 10):                # each master re-sends its GARPs every 10 s, from the same MAC
        scapy_packets += _garps(t, rounds=(0.0,)) + _garps(t + 0.2, rounds=(0.0,))
    timed += [(t, bytes(pkt), None) for t, pkt in scapy_packets]
    # from 75 s the clients' frames to the virtual MAC reach this host, which receives them promiscuously
    times = np.sort(rng.uniform(75, 85, 3000))
    for k, t in enumerate(times.tolist()):
        client = k % 8
        frame = _tcp_frame(0, 0, k, dst_mac=vmac, dst_ip=bytes([10, 60, 0, 100]), src_mac=_other_mac(32 + client),
                           src_ip=_other_ip(32 + client))
        timed.append((t, frame, EPB_RX_PROMISCUOUS << 2 | 1))
    count = _write_pcapng(path, timed)
    entry = _entry(path, count, "seed 002: two VRRP masters of VRID 60 sending gratuitous ARP from the same virtual "
                                "MAC, and from 75 s the frames to that MAC flooded to this host (pcapng epb_flags: "
                                "received promiscuously)", "critical", "critical")
    entry["must_yield"] += [{"rule": "vrrp-dual-master", "severity_at_least": "high"},
                            {"rule": "garp-war", "severity_at_least": "medium"}]
    entry["must_not_yield"] = [q for q in entry["must_not_yield"] if q["rule"] != "arp-spoof"]
    # the chain of seed 002 is one incident, rooted in the two masters
    entry["incidents"] = [{"root_cause": "vrrp-dual-master",
                           "findings": ["vrrp-dual-master", "garp-war", "garp-war", "unicast-flood"]}]
    return entry


def sll_otherhost(out_dir: Path) -> dict:
    path = out_dir / "unicast-flood-sll-otherhost.pcap"
    rng = np.random.default_rng(73)
    me = 3
    timed = []
    for t, frame in _background(rng, 0, 80):
        src = frame[6:12]
        mine_out = src == _host_mac(me)
        timed.append((t, _sll(PACKET_OUTGOING if mine_out else PACKET_HOST, src, frame)))
    for t, frame in _flood(rng, 70, 75, 400, 8):
        timed.append((t, _sll(PACKET_OTHERHOST, frame[6:12], frame)))
    count = _write_pcap(path, timed, LINKTYPE_LINUX_SLL)
    return _entry(path, count, "a Linux host's own capture (SLL) that at 70 s receives 400 frames a second for other "
                               "hosts (packet type PACKET_OTHERHOST): direct proof", "high", "high")


def asymmetric_routing(out_dir: Path) -> dict:
    path = out_dir / "unicast-flood-asymmetric.pcap"
    rng = np.random.default_rng(74)
    router = _mac(0x02005E7000FE)                # the router whose replies take another path
    timed = _background(rng, 0, 120)
    times = np.sort(rng.uniform(0, 120, 120 * 25))
    for k, t in enumerate(times.tolist()):
        timed.append((t, _tcp_frame(k % HOSTS, 0, k, dst_mac=router, dst_ip=bytes([198, 51, 100, 7]))))
    count = _write_pcap(path, timed)
    return _entry(path, count, "near-miss: a third of the frames go to a router MAC that never sends here, from the "
                               "first second to the last (asymmetric routing, no onset): info", "info", "info")


def ingress_only_span(out_dir: Path) -> dict:
    path = out_dir / "unicast-flood-ingress-span.pcap"
    rng = np.random.default_rng(75)
    times = np.sort(rng.uniform(0, 100, 4000))
    timed = [(t, _tcp_frame(1 + k % (HOSTS - 1), GATEWAY, k)) for k, t in enumerate(times.tolist())]
    count = _write_pcap(path, timed)
    return {"file": path.name, "packets": count,
            "what": "near-miss: an ingress-only SPAN session, the hosts' frames to the gateway and nothing back: "
                    "every frame foreign from the start, nothing reported",
            "must_yield": [], "must_not_yield": [{"rule": "*", "severity_above": "low"}]}


def silent_printer(out_dir: Path) -> dict:
    path = out_dir / "unicast-flood-silent-printer.pcap"
    rng = np.random.default_rng(76)
    printer, printer_ip = _mac(0x02005E700099), bytes([10, 70, 0, 99])
    timed = _background(rng, 0, 100)
    # a few status polls every 10 s, never answered here, then a large print job at 80 s
    polls = [t + 0.01 * j for t in range(2, 80, 10) for j in range(3)]
    job = np.sort(rng.uniform(80, 95, 1500)).tolist()
    for k, t in enumerate(polls + job):
        timed.append((t, _tcp_frame(5, 0, k, dst_mac=printer, dst_ip=printer_ip)))
    count = _write_pcap(path, timed)
    return _entry(path, count, "near-miss: a printer that only receives (its frames never cross this port) gets a "
                               "few polls, then a 1,500-frame job at 80 s: a silent receiver, info", "info", "info")


CAPTURES = [mirror_flood, partial_flood, vrrp_chain, sll_otherhost, asymmetric_routing, ingress_only_span,
            silent_printer]

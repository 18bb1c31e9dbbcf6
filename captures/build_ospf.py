"""OSPF captures (seed 000): a storm with flapping adjacencies, an LSA war, mismatches, and a healthy adjacency.

Seed 000's routing kept using a path whose forwarding had broken "as OSPF
packets get through", with "a storm of OSPF packets because of link flaps
or duplicate packets". ospf-storm-flapping.pcap re-creates that on one
VLAN: the adjacency between two routers flaps four times in five minutes
(one side's Hellos vanish for longer than the dead interval, the other
drops it from its Hellos, then both start over from ExStart with new DD
sequence numbers and re-originate their LSAs), and then one router floods
its database again and again, more than 300 LS Updates a second for 15
seconds, each LSA instance within a fraction of a second of its last copy.

ospf-quick-resets.pcap is that flapping capture's near-miss, the shape of
arkime's ospf.pcap: a point-to-point adjacency that stands from the start
(both routers list each other), then one router drops its neighbour from
its Hellos twice, ten seconds apart, while the neighbour's Hellos keep
coming every 10 s (no dead interval expires), and each time the adjacency
starts over and is back through its database exchange within 20 ms of the
neighbour's next Hello: two quick resets (an operator's clear ip ospf, a
process restart), low, not a flapping link.

The near-misses are what healthy OSPF looks like: an adjacency forming
(one ExStart per side, one retransmitted with its sequence number, the
Exchange and a Loading burst of 1,500 LSAs seen twice by the mirror), Hellos
every 10 s for five minutes, and one router-LSA re-originated once. Two
routers with the same router id fighting over "their" LSA (OSPFv3) and a
link whose routers disagree on Hello/dead intervals and MTU complete the set.

Frames are built with scapy's OSPF layers (checksums and LSA Fletcher sums
computed) once per distinct packet; repeated packets differ only in their
IP identification, patched in place with the header checksum.
"""
from __future__ import annotations

import struct
from pathlib import Path

from common import T0
from scapy.contrib.ospf import (
    OSPF_DBDesc,
    OSPF_Hdr,
    OSPF_Hello,
    OSPF_Link,
    OSPF_LSA_Hdr,
    OSPF_LSAck,
    OSPF_LSReq,
    OSPF_LSReq_Item,
    OSPF_LSUpd,
    OSPF_Network_LSA,
    OSPF_Router_LSA,
    OSPF_SummaryIP_LSA,
    OSPFv3_Hdr,
    OSPFv3_Hello,
    OSPFv3_LSUpd,
    OSPFv3_Router_LSA,
)
from scapy.data import DLT_EN10MB
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.utils import PcapNgWriter, PcapWriter, checksum

ALL_SPF = "224.0.0.5"                 # RFC 2328 section A.1
ALL_SPF_MAC = "01:00:5e:00:00:05"
ALL_SPF6, ALL_SPF6_MAC = "ff02::5", "33:33:00:00:00:05"
HELLO_S, DEAD_S = 10, 40              # FRRouting lib/libospf.h defaults
I_M_MS, M_MS, M_ONLY, MS_ONLY, NONE = 0x7, 0x3, 0x2, 0x1, 0x0


class Router:
    """An OSPFv2 router on one Ethernet segment: its frames, with an IP identification that counts up."""

    def __init__(self, router_id: str, address: str, mac: str, vlan: int | None = None, mask: str = "255.255.255.0",
                 hello: int = HELLO_S, dead: int = DEAD_S, mtu: int = 1500):
        self.router_id, self.address, self.mac, self.vlan = router_id, address, mac, vlan
        self.mask, self.hello_s, self.dead_s, self.mtu = mask, hello, dead, mtu
        self.ident = 0

    def frame(self, ospf, dst: str = ALL_SPF, dst_mac: str = ALL_SPF_MAC) -> bytes:
        self.ident = (self.ident + 1) & 0xFFFF
        eth = Ether(src=self.mac, dst=dst_mac)
        if self.vlan is not None:
            eth = eth / Dot1Q(vlan=self.vlan)
        return bytes(eth / IP(src=self.address, dst=dst, ttl=1, tos=0xC0, id=self.ident) /
                     OSPF_Hdr(src=self.router_id, area="0.0.0.0") / ospf)

    def hello(self, neighbors=(), dr: str = "0.0.0.0") -> bytes:
        return self.frame(OSPF_Hello(mask=self.mask, hellointerval=self.hello_s, options=0x02, prio=1,
                                     deadinterval=self.dead_s, router=dr, neighbors=list(neighbors)))

    def dbd(self, peer: Router, flags: int, seq: int, headers=()) -> bytes:
        return self.frame(OSPF_DBDesc(mtu=self.mtu, options=0x42, dbdescr=flags, ddseq=seq,
                                      lsaheaders=list(headers)), peer.address, peer.mac)

    def update(self, lsas, dst: str = ALL_SPF, dst_mac: str = ALL_SPF_MAC) -> bytes:
        return self.frame(OSPF_LSUpd(lsalist=list(lsas)), dst, dst_mac)

    def ack(self, lsas) -> bytes:
        return self.frame(OSPF_LSAck(lsaheaders=[_header_of(lsa) for lsa in lsas]))

    def router_lsa(self, seq: int, peers=()) -> OSPF_Router_LSA:
        links = [OSPF_Link(id=peer.router_id, data=self.address, type=1, metric=10) for peer in peers]
        links.append(OSPF_Link(id=self.address.rsplit(".", 1)[0] + ".0", data=self.mask, type=3, metric=10))
        return OSPF_Router_LSA(id=self.router_id, adrouter=self.router_id, seq=seq, linklist=links)


def _header_of(lsa) -> OSPF_LSA_Hdr:
    """The 20-byte header of an LSA as a Database Description or LS Acknowledgment lists it."""
    return OSPF_LSA_Hdr(bytes(lsa)[:20])


def _with_ident(frame: bytes, ident: int, ip_at: int) -> bytes:
    """`frame` with IPv4 identification `ident` and the header checksum recomputed."""
    head = bytearray(frame[ip_at:ip_at + 20])
    head[4:6] = struct.pack("!H", ident & 0xFFFF)
    head[10:12] = b"\x00\x00"
    head[10:12] = struct.pack("!H", checksum(bytes(head)))
    return frame[:ip_at] + bytes(head) + frame[ip_at + 20:]


def _write(path: Path, timed_frames) -> int:
    """(seconds after T0, frame bytes) in time order, as pcap or pcapng by the file's suffix."""
    ordered = sorted(timed_frames, key=lambda item: item[0])
    if path.suffix == ".pcapng":
        writer = PcapNgWriter(str(path))
        for offset, frame in ordered:
            packet = Ether(frame)
            packet.time = T0 + round(offset, 6)
            writer.write(packet)
    else:
        writer = PcapWriter(str(path), linktype=DLT_EN10MB, sync=False)
        writer.write_header(None)
        for offset, frame in ordered:
            stamp = T0 + round(offset, 6)
            writer.write_packet(frame, sec=int(stamp), usec=round((stamp - int(stamp)) * 1e6), caplen=len(frame),
                                wirelen=len(frame))
    writer.close()
    return len(ordered)


def _hellos(router: Router, start: float, end: float, neighbors_at) -> list:
    """Hellos of `router` every hello interval in [start, end); `neighbors_at(t)` lists who it has heard."""
    out, t = [], start
    while t < end:
        out.append((t, router.hello(neighbors_at(t))))
        t += router.hello_s
    return out


def _adjacency(a: Router, b: Router, t: float, a_seq: int, b_seq: int, a_lsas, b_lsas, retransmit: bool = False):
    """Two routers forming an adjacency from ExStart at `t`: the higher router id becomes master (RFC 2328
    section 10.6), they exchange LSA headers, request and send what they lack, and acknowledge it."""
    master, slave = (a, b) if a.router_id > b.router_id else (b, a)
    seqs = {a.router_id: a_seq, b.router_id: b_seq}
    lsas = {a.router_id: list(a_lsas), b.router_id: list(b_lsas)}
    out = [(t, a.dbd(b, I_M_MS, a_seq)), (t + 0.002, b.dbd(a, I_M_MS, b_seq))]
    now = t + 0.004
    if retransmit:      # the first went unanswered: the same packet again after RxmtInterval (5 s)
        out.append((t + 5.0, a.dbd(b, I_M_MS, a_seq)))
        now = t + 5.004
    seq = seqs[master.router_id]
    slave_headers = [_header_of(lsa) for lsa in lsas[slave.router_id]]
    master_headers = [_header_of(lsa) for lsa in lsas[master.router_id]]
    out.append((now, slave.dbd(master, NONE, seq, slave_headers[:60])))
    chunks = [master_headers[k:k + 60] for k in range(0, len(master_headers), 60)] or [[]]
    for k, chunk in enumerate(chunks):
        seq += 1
        more = k < len(chunks) - 1
        now += 0.003
        out.append((now, master.dbd(slave, M_MS if more else MS_ONLY, seq, chunk)))
        now += 0.002
        out.append((now, slave.dbd(master, M_ONLY if more else NONE, seq)))
    # the slave asks for what the master has, the master sends it, 10 LSAs to an Update, and is acknowledged
    wanted = lsas[master.router_id]
    for k in range(0, len(wanted), 50):
        now += 0.004
        out.append((now, slave.frame(OSPF_LSReq(requests=[OSPF_LSReq_Item(type=lsa.type, id=lsa.id,
                                                                          adrouter=lsa.adrouter)
                                                          for lsa in wanted[k:k + 50]]),
                                     master.address, master.mac)))
        for j in range(k, min(k + 50, len(wanted)), 10):
            now += 0.002
            out.append((now, master.update(wanted[j:j + 10], slave.address, slave.mac)))
        now += 0.003
        out.append((now, slave.ack(wanted[k:k + 50])))
    return out, now


def ospf_storm_flapping(out_dir: Path) -> dict:
    """Seed 000: an adjacency flapping four times in five minutes, then a storm of LS Updates from one router."""
    path = out_dir / "ospf-storm-flapping.pcap"
    r1 = Router("10.255.0.1", "10.0.12.1", "02:00:5e:0f:00:01", vlan=100)
    r2 = Router("10.255.0.2", "10.0.12.2", "02:00:5e:0f:00:02", vlan=100)
    # r2's Hellos are missing from down[k] to up[k]: r1 stops listing it a dead interval after its last one
    down = [30.0, 105.0, 180.0, 255.0]
    up = [d + 60.0 for d in down]
    end = 370.0

    def r2_heard(t: float) -> bool:
        return not any(d + DEAD_S - HELLO_S < t < u + 1 for d, u in zip(down, up))

    frames = _hellos(r1, 0.5, end, lambda t: [r2.router_id] if r2_heard(t) else [])
    r2_times = [t for t in range(1, int(end), HELLO_S) if not any(d <= t < u for d, u in zip(down, up))]
    frames += [(t, r2.hello([r1.router_id] if not any(u <= t < u + 2 for u in up) else [])) for t in r2_times]
    summaries = [OSPF_SummaryIP_LSA(id=f"172.16.{k}.0", adrouter=r1.router_id, seq=0x80000010, mask="255.255.255.0",
                                    metric=20) for k in range(40)]
    for k, t in enumerate(up):
        r1_lsas = [r1.router_lsa(0x80000020 + k, [r2]), *summaries]
        r2_lsas = [r2.router_lsa(0x80000040 + k, [r1])]
        exchange, now = _adjacency(r1, r2, t + 11.5, 0x1000 + 97 * k, 0x7000 + 13 * k, r1_lsas, r2_lsas)
        frames += exchange
        network = OSPF_Network_LSA(id=r1.address, adrouter=r1.router_id, seq=0x80000060 + k, mask=r1.mask,
                                   routerlist=[r1.router_id, r2.router_id])
        frames.append((now + 0.5, r1.update([network])))
        frames.append((now + 0.6, r2.ack([network])))
    # the storm: r1 floods its database again and again, 320 LS Updates a second for 15 s (a flooding loop
    # through the broken forwarding path hands every Update straight back to it)
    database = [r1.router_lsa(0x80000024, [r2]), *summaries]
    updates = [r1.update(database[k:k + 4]) for k in range(0, len(database), 4)]
    ip_at = 14 + 4
    for n in range(320 * 15):
        t = 335.0 + n / 320
        frames.append((t, _with_ident(updates[n % len(updates)], 0x4000 + n, ip_at)))
    count = _write(path, frames)
    return {"file": path.name, "packets": count,
            "what": "seed 000: OSPF adjacency on VLAN 100 flapping 4 times in 5 minutes (Hellos lost past the "
                    "dead interval, ExStart again), then 320 LS Updates/s for 15 s re-flooding one database",
            "must_yield": [{"rule": "ospf-instability", "severity_at_least": "high"}],
            "must_not_yield": [{"rule": "echo-loop", "severity_above": "info"},
                               {"rule": "routing-loop", "severity_above": "info"},
                               {"rule": "rss-saturation", "severity_above": "info"}]}


def ospf_quick_resets(out_dir: Path) -> dict:
    """Near-miss of the flapping adjacency: a standing adjacency reset twice, straight back each time."""
    path = out_dir / "ospf-quick-resets.pcap"
    r1 = Router("172.16.0.1", "10.0.0.1", "02:00:5e:0f:00:11", mask="255.255.255.252")
    r2 = Router("172.16.0.2", "10.0.0.2", "02:00:5e:0f:00:12", mask="255.255.255.252")
    end = 104.0
    # r2 lists r1 in every Hello but the two sent just before its resets (70.55 s and 80.55 s)
    frames = _hellos(r2, 0.55, end, lambda t: [] if 70 < t < 81 else [r1.router_id])
    frames += _hellos(r1, 0.95, end, lambda t: [r2.router_id])
    for k, reset in enumerate((70.959, 80.959)):
        # each start follows r1's next Hello, and the exchange is done within milliseconds
        exchange, _ = _adjacency(r2, r1, reset, 0x0DC4E2 + 10_000 * k, 0x0DC4E2 + 10_000 * k + 1,
                                 [r2.router_lsa(0x8000007D + k, [r1])], [r1.router_lsa(0x8000007E + k, [r2])])
        frames += exchange
    count = _write(path, frames)
    return {"file": path.name, "packets": count,
            "what": "near-miss: a standing OSPF adjacency reset twice in 10 s (one router drops its neighbour from "
                    "two Hellos while the neighbour's Hellos keep coming), each time back through its exchange "
                    "within 20 ms: quick resets, low (arkime's ospf.pcap)",
            "must_yield": [{"rule": "ospf-instability", "severity_at_least": "low"}],
            "must_not_yield": [{"rule": "*", "severity_above": "low"}]}


def ospf_duplicate_router_id(out_dir: Path) -> dict:
    """Two OSPFv3 routers configured with one router id flush each other's router-LSA every 1.5 s."""
    path = out_dir / "ospf-duplicate-router-id.pcapng"
    eth_dr = Ether(src="02:00:5e:0f:00:44", dst=ALL_SPF6_MAC)
    eth_bdr = Ether(src="02:00:5e:0f:00:55", dst=ALL_SPF6_MAC)
    dr = IPv6(src="fe80::44", dst=ALL_SPF6, hlim=1)
    bdr = IPv6(src="fe80::55", dst=ALL_SPF6, hlim=1)
    frames = []
    for t in range(0, 90, HELLO_S):
        frames.append((t + 0.1, bytes(eth_dr / dr / OSPFv3_Hdr(src="4.4.4.4") / OSPFv3_Hello(
            intid=4, prio=10, options=0x13, hellointerval=HELLO_S, deadinterval=DEAD_S, router="4.4.4.4",
            backup="5.5.5.5", neighbors=["5.5.5.5"]))))
        frames.append((t + 0.2, bytes(eth_bdr / bdr / OSPFv3_Hdr(src="5.5.5.5") / OSPFv3_Hello(
            intid=5, prio=5, options=0x13, hellointerval=HELLO_S, deadinterval=DEAD_S, router="4.4.4.4",
            backup="5.5.5.5", neighbors=["4.4.4.4"]))))
    # the two 9.9.9.9 routers sit behind the DR: each sees "its" LSA with a higher sequence number and
    # originates a newer one at once (RFC 5340 section 4.6.2, RFC 2328 section 13.4)
    for k in range(40):
        lsa = OSPFv3_Router_LSA(id="0.0.0.0", adrouter="9.9.9.9", seq=0x80000100 + k)
        frames.append((20.0 + 1.5 * k, bytes(eth_dr / dr / OSPFv3_Hdr(src="4.4.4.4") / OSPFv3_LSUpd(lsalist=[lsa]))))
    count = _write(path, frames)
    return {"file": path.name, "packets": count,
            "what": "OSPFv3: the router-LSA of router id 9.9.9.9 re-originated every 1.5 s for a minute (two "
                    "routers sharing the id), flooded by the DR among steady Hellos",
            "must_yield": [{"rule": "ospf-instability", "severity_at_least": "medium"}],
            "must_not_yield": [{"rule": "*", "severity_above": "medium"}]}


def ospf_adjacency_forming(out_dir: Path) -> dict:
    """Near-miss: healthy OSPF: an adjacency forming with its Loading burst, steady Hellos, one re-origination."""
    path = out_dir / "ospf-adjacency-forming.pcapng"
    r5 = Router("5.5.5.5", "10.0.56.5", "02:00:5e:0f:00:05")
    r6 = Router("6.6.6.6", "10.0.56.6", "02:00:5e:0f:00:06")
    frames = _hellos(r5, 0.3, 300.0, lambda t: [r6.router_id] if t > 20 else [])
    frames += _hellos(r6, 20.0, 300.0, lambda t: [r5.router_id] if t > 20 else [])
    # r6 knows the rest of the area: 1,500 LSAs flooded to r5 in a burst of some 150 Updates
    area = [OSPF_SummaryIP_LSA(id=f"172.{16 + k // 250}.{k % 250}.0", adrouter="6.6.6.6", seq=0x80000003,
                               mask="255.255.255.0", metric=10 + k % 7) for k in range(1500)]
    exchange, now = _adjacency(r5, r6, 21.0, 0x5005, 0x6006, [r5.router_lsa(0x80000001)],
                               [r6.router_lsa(0x80000007), *area], retransmit=True)
    # the mirror sees each Update of the burst twice (on its way in and out of the switch)
    frames += exchange + [(t + 0.00002, f) for t, f in exchange if f[14 + 20 + 1] == 4]
    # each router re-originates its router-LSA once with the new link (RFC 2328 section 12.4)
    frames.append((now + 0.2, r5.update([r5.router_lsa(0x80000002, [r6])])))
    frames.append((now + 0.3, r6.ack([r5.router_lsa(0x80000002, [r6])])))
    frames.append((now + 0.4, r6.update([r6.router_lsa(0x80000008, [r5])])))
    frames.append((now + 0.5, r5.ack([r6.router_lsa(0x80000008, [r5])])))
    # an Update r6 never acknowledged, retransmitted after RxmtInterval (5 s)
    refreshed = r5.router_lsa(0x80000003, [r6])
    frames += [(200.0, r5.update([refreshed])), (205.0, r5.update([refreshed])), (205.1, r6.ack([refreshed]))]
    count = _write(path, frames)
    return {"file": path.name, "packets": count,
            "what": "near-miss: an OSPF adjacency forming (ExStart retransmitted once, Exchange, Loading burst of "
                    "1,500 LSAs seen twice by the mirror), Hellos every 10 s for 5 minutes, one re-origination",
            "must_yield": [],
            "must_not_yield": [{"rule": "*", "severity_above": "info"}]}


def ospf_mismatches(out_dir: Path) -> dict:
    """Routers that never become neighbours: Hello/dead intervals differ on one link, MTUs on another."""
    path = out_dir / "ospf-mismatches.pcap"
    r7 = Router("7.7.7.7", "10.0.20.7", "02:00:5e:0f:00:07", vlan=20)
    r8 = Router("8.8.8.8", "10.0.20.8", "02:00:5e:0f:00:08", vlan=20, hello=30, dead=120)
    frames = _hellos(r7, 0.5, 120.0, lambda t: []) + _hellos(r8, 1.5, 120.0, lambda t: [])
    # on a /30 toward r9, r7 (MTU 1500) keeps retransmitting its ExStart: r9 (MTU 9000) is too big for it
    r7b = Router("7.7.7.7", "10.0.79.1", "02:00:5e:0f:00:17", mask="255.255.255.252")
    r9 = Router("9.9.9.9", "10.0.79.2", "02:00:5e:0f:00:09", mask="255.255.255.252", mtu=9000)
    frames += _hellos(r7b, 0.7, 120.0, lambda t: [r9.router_id] if t > 2 else [])
    frames += _hellos(r9, 1.7, 120.0, lambda t: [r7b.router_id])
    for k in range(12):
        frames.append((3.0 + 5.0 * k, r9.dbd(r7b, I_M_MS, 0x9009)))
        frames.append((3.1 + 5.0 * k, r7b.dbd(r9, I_M_MS, 0x7007)))
    count = _write(path, frames)
    return {"file": path.name, "packets": count,
            "what": "OSPF Hello 10/40 s against 30/120 s on VLAN 20, and an adjacency stuck in ExStart between "
                    "MTUs 1500 and 9000",
            "must_yield": [{"rule": "ospf-instability", "severity_at_least": "low"}],
            "must_not_yield": [{"rule": "*", "severity_above": "low"}]}


CAPTURES = [ospf_storm_flapping, ospf_quick_resets, ospf_duplicate_router_id, ospf_adjacency_forming, ospf_mismatches]

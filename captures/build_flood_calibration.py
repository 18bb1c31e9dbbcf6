"""Floods and storms calibrated against their near-misses (issue 27): spoofed SYN floods on an ingress-only mirror,
busy servers and flash crowds seen the same way, a DHCP starvation storm, and storms of forged DHCP servers.

The SYN captures are raw Ethernet/IPv4/TCP headers built with numpy (build_synflood's writer): a mirror of the
ingress direction only, so the server is never seen sending and no SYN-ACK is in the file at all.

- syn-flood-spoofed-ingress: hping3 --rand-source / Mirai style, 1,500 SYN/s for 10 s at 10.30.0.80:443, each
  SYN from its own random address, port and sequence number, never retried, never followed by an ACK; genuine
  clients complete their handshakes beside it (their ACKs reach the mirror): high without any completion data.
- syn-busy-server-ingress: 40 client addresses (a NAT pool) open 320 connections a second for 10 s to an
  overloaded server that answers a fifth of the first SYNs; the clients' stacks retry after 1 s (Linux,
  RFC 6298) or 3 s (Windows, TcpInitialRTT) and again, and fewer than half complete: a busy server whose
  completion the mirror cannot show (low), not a spoofed flood.
- syn-flash-crowd-ingress: 600 new clients a second for 6 s, one connection each (one SYN per source, as a
  spoofed flood), every one followed by the client's ACK, a tenth after a retried SYN: quiet.

The DHCP captures are built from one scapy template per message, its varying bytes (addresses, MACs, DUIDs,
checksums) written column-wise with numpy: thousands of messages in a blink, byte-for-byte the same every run.

- dhcp-starvation-storm: a starvation tool (Yersinia, dhcpstarv) sends 3,000 DISCOVERs in one second, each
  from its own forged client MAC, out of one access port; the office's server answers the first 100 with
  OFFERs until its pool is empty: a DHCP storm (medium) whose finding names the senders it counted.
- dhcp-forged-servers: 1,000 DHCPv4 ACKs in 10 s, each from its own forged server (address, MAC, server
  identifier, router and DNS), as a fuzz campaign or a rogue-server tool sends them: one finding for the storm
  of forged servers, with counts and a capped sample, not a thousand findings naming each other.
  `forged_dhcp_servers` writes the same with any count, DHCPv4 or DHCPv6, for the tests (4,000 stay out of
  the bundle).
"""
from __future__ import annotations

import ipaddress
import re
import struct
from pathlib import Path

import numpy as np
from build_conntrack import _checksum
from build_synflood import ACK, SYN, WEB_SERVER, _ip4, _Packets
from common import T0
from scapy.all import IP, UDP, Ether, IPv6, raw
from scapy.layers.dhcp import BOOTP, DHCP
from scapy.layers.dhcp6 import (
    DUID_LL,
    DHCP6_Reply,
    DHCP6OptClientId,
    DHCP6OptDNSServers,
    DHCP6OptIA_NA,
    DHCP6OptIAAddress,
    DHCP6OptServerId,
)

SYN_RULE = "syn-flood"
FIN = 0x01


def _genuine(p: _Packets, rng, t, server, port=443, clients=None, retries=(), answered=None):
    """Genuine clients as an ingress mirror shows them: each one's SYN, sent again (same port and sequence number)
    after each of `retries` (arrays of seconds after the first SYN, NaN: not sent) until one is answered, then
    the ACK of the SYN-ACK the mirror does not see and a FIN-ACK, all toward the server. `answered` (default
    all) are the clients whose last SYN was answered; the others give up."""
    n = len(t)
    clients = (_ip4("10.31.0.0") + rng.integers(1, 60000, n)).astype(np.uint32) if clients is None else clients
    answered = np.ones(n, bool) if answered is None else answered
    sports = rng.integers(32768, 61000, n)
    seq = rng.integers(0, 1 << 31, n)
    p.add(t, clients, server, sports, port, seq, 0, SYN, False)
    last = t.copy()
    for retry_s in retries:
        again = ~np.isnan(retry_s)
        p.add(t[again] + retry_s[again], clients[again], server, sports[again], port, seq[again], 0, SYN, False)
        last = np.where(again, t + np.nan_to_num(retry_s), last)
    done = np.flatnonzero(answered)
    rtt = rng.uniform(0.010, 0.060, len(done))
    server_seq = rng.integers(0, 1 << 31, len(done))
    p.add(last[done] + rtt, clients[done], server, sports[done], port, seq[done] + 1, server_seq + 1, ACK, False)
    p.add(last[done] + rtt + 0.2, clients[done], server, sports[done], port, seq[done] + 1, server_seq + 1, FIN | ACK,
          False)


def _stack_retries(rng, n, lost: np.ndarray, times: int) -> list[np.ndarray]:
    """Retransmission times of `times` retries for the clients whose first SYN was `lost`: 70 % Linux stacks (1 s,
    then 3 s, 7 s: TCP_TIMEOUT_INIT doubling), 30 % Windows (3 s, then 9 s: TcpInitialRTT doubling)."""
    linux = rng.random(n) < 0.7
    schedule = [np.where(linux, 2.0 ** (k + 1) - 1, 3.0 * (2.0 ** (k + 1) - 1)) for k in range(times)]
    return [np.where(lost, at, np.nan) for at in schedule]


def syn_flood_spoofed_ingress(out_dir: Path) -> dict:
    path = out_dir / "syn-flood-spoofed-ingress.pcap"
    rng = np.random.default_rng(2701)
    p = _Packets()
    server = _ip4(WEB_SERVER)
    # genuine clients all along, 15 a second for 16 s, each completing (the mirror sees their ACKs)
    _genuine(p, rng, np.sort(rng.uniform(0.0, 16.0, 240)), server)
    # the flood: 1,500 SYN/s from 2 s to 12 s, every SYN from a random address anywhere, a random port and a
    # random sequence number; none is ever sent again, none is followed by an ACK
    n = 15_000
    t = 2.0 + np.sort(rng.uniform(0.0, 10.0, n))
    sources = rng.integers(_ip4("1.0.0.0"), _ip4("223.255.255.255"), n).astype(np.uint32)
    p.add(t, sources, server, rng.integers(1024, 65535, n), 443, rng.integers(0, 1 << 32, n), 0, SYN, False)
    count = p.write(path)
    return {"file": path.name, "packets": count,
            "what": "spoofed-source SYN flood on an ingress-only mirror: 1,500 SYN/s for 10 s at 10.30.0.80:443, "
                    "each from its own random address, port and sequence number, never retried nor followed by "
                    "an ACK, beside 15 genuine clients a second whose ACKs the mirror sees; no SYN-ACK at all",
            "must_yield": [{"rule": SYN_RULE, "severity_at_least": "high"}],
            "must_not_yield": [{"rule": SYN_RULE, "severity_above": "high"}],
            # the flood fills the modelled conntrack table: one incident, the flood its root cause
            "incidents": [{"root_cause": SYN_RULE, "findings": [SYN_RULE, "conntrack-pressure"]}]}


def syn_busy_server_ingress(out_dir: Path) -> dict:
    path = out_dir / "syn-busy-server-ingress.pcap"
    rng = np.random.default_rng(2702)
    p = _Packets()
    n = 3_200
    t = np.sort(rng.uniform(0.0, 10.0, n))
    # 40 addresses of a NAT pool; the overloaded server answers a fifth of the first SYNs and a quarter of the
    # first retransmissions; the other clients' stacks retry once more, unanswered, and give up
    pool = (_ip4("198.51.100.0") + rng.integers(1, 41, n)).astype(np.uint32)
    lost = rng.random(n) >= 0.2
    second_try = rng.random(n) < 0.25
    first, again = _stack_retries(rng, n, lost, 2)
    again = np.where(second_try, np.nan, again)
    _genuine(p, rng, t, _ip4(WEB_SERVER), clients=pool, retries=[first, again], answered=~lost | second_try)
    count = p.write(path)
    return {"file": path.name, "packets": count,
            "what": "near-miss: an overloaded server on an ingress-only mirror, 320 connections a second for 10 s "
                    "from 40 NAT addresses; it answers a fifth of the first SYNs, the clients' stacks retry after "
                    "1 s or 3 s and again, and fewer than half complete: a busy server (completion unknown, low), "
                    "no spoofed flood",
            "must_yield": [{"rule": SYN_RULE, "severity_at_least": "low"}],
            "must_not_yield": [{"rule": "*", "severity_above": "low"}]}


def syn_flash_crowd_ingress(out_dir: Path) -> dict:
    path = out_dir / "syn-flash-crowd-ingress.pcap"
    rng = np.random.default_rng(2703)
    p = _Packets()
    n = 3_600
    t = np.sort(rng.uniform(0.0, 6.0, n))
    # one connection per client, as a spoofed flood has one SYN per source; a tenth lose their first SYN
    clients = (_ip4("100.70.0.0") + rng.permutation(1 << 16)[:n] + 1).astype(np.uint32)
    _genuine(p, rng, t, _ip4(WEB_SERVER), clients=clients, retries=_stack_retries(rng, n, rng.random(n) < 0.1, 1))
    count = p.write(path)
    return {"file": path.name, "packets": count,
            "what": "near-miss: a flash crowd on an ingress-only mirror, 600 new clients a second for 6 s, one "
                    "connection each, every one followed by the client's ACK (a tenth after a retried SYN)",
            "must_yield": [],
            "must_not_yield": [{"rule": "*", "severity_above": "info"}]}


# ---- DHCP ------------------------------------------------------------------------------------------------------

DHCP_RULE = "rogue-dhcp"
OFFICE_SERVER = ("02:00:5e:50:00:01", "10.50.0.1")
# marker values in the templates, replaced per message (each occurs exactly once in its template)
MARK_MAC = "02:00:5e:7f:7f:7f"
MARK_MAC2 = "02:00:5e:6e:6e:6e"
MARK_IP = "10.127.127.127"
MARK_IP2 = "10.126.126.126"
MARK_IP3 = "10.125.125.125"
MARK_YIADDR = "10.124.124.124"
MARK_IP6 = "2001:db8:7f7f::7f7f"
MARK_DNS6 = "2001:db8:7e7e::53"
MARK_LL6 = "fe80::7f7f:7f7f"
PCAP_HEADER = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)     # classic pcap, Ethernet
XID_AT = 14 + 20 + 8 + 4        # Ethernet, IPv4, UDP; BOOTP op, htype, hlen, hops (RFC 2131 section 2)


def _mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def _v4(text: str) -> bytes:
    return bytes(map(int, text.split(".")))


def _v6(text: str) -> bytes:
    return ipaddress.IPv6Address(text).packed


def _at(template: bytes, marker: bytes) -> list[int]:
    """Every place `marker` occurs in `template` (at least one)."""
    places = [m.start() for m in re.finditer(re.escape(marker), template)]
    if not places:
        raise ValueError(f"marker {marker.hex()} not in the template")
    return places


def _put_all(rows: np.ndarray, template: bytes, marker: bytes, values: np.ndarray) -> None:
    for at in _at(template, marker):
        _put(rows, at, values, len(marker))


def _put(rows: np.ndarray, at: int, values: np.ndarray, width: int) -> None:
    """Big-endian `values` (uint64, or (n, width) bytes) into each row at byte `at`."""
    if values.ndim == 2:
        rows[:, at:at + width] = values
        return
    shifts = np.arange(width - 1, -1, -1, dtype=np.uint64) * np.uint64(8)
    rows[:, at:at + width] = ((values.astype(np.uint64)[:, None] >> shifts) & np.uint64(0xFF)).astype(np.uint8)


def _mac_bytes(prefix: int, k: np.ndarray) -> np.ndarray:
    """Locally administered unicast MACs 02:00:5e:PP:hi:lo, one per k (k < 65,536)."""
    return (np.uint64(0x02005E000000) | np.uint64(prefix << 16) | k.astype(np.uint64)).astype(np.uint64)


def _ipv4_fix(rows: np.ndarray) -> None:
    """IPv4 header checksum of Ethernet frames (header at 14), UDP checksum 0: none (RFC 768)."""
    rows[:, 24:26] = 0
    _put(rows, 24, _checksum(rows[:, 14:34]), 2)
    rows[:, 40:42] = 0


def _ipv6_udp_fix(rows: np.ndarray) -> None:
    """UDP checksum of Ethernet/IPv6/UDP frames (mandatory over IPv6, RFC 8200 section 8.1)."""
    n, length = rows.shape
    udp_length = length - 54
    rows[:, 60:62] = 0
    pseudo = np.concatenate([rows[:, 22:54], np.tile(np.frombuffer(udp_length.to_bytes(4, "big") + b"\0\0\0\x11",
                                                                   np.uint8), (n, 1))], axis=1)
    checksum = _checksum(np.concatenate([pseudo, rows[:, 54:]], axis=1))
    _put(rows, 60, np.where(checksum == 0, np.uint64(0xFFFF), checksum), 2)


def _write(path: Path, times: np.ndarray, rows: np.ndarray) -> int:
    """Classic pcap of equal-length frame rows at `times` (seconds after T0)."""
    usec = np.round(np.asarray(times) * 1e6).astype(np.int64) + T0 * 1_000_000
    order = np.argsort(usec, kind="stable")
    n, length = rows.shape
    records = np.zeros(n, dtype=[("sec", "<u4"), ("usec", "<u4"), ("caplen", "<u4"), ("len", "<u4"),
                                 ("data", "u1", length)])
    records["sec"], records["usec"] = usec[order] // 1_000_000, usec[order] % 1_000_000
    records["caplen"] = records["len"] = length
    records["data"] = rows[order]
    path.write_bytes(PCAP_HEADER)
    with path.open("ab") as handle:
        handle.write(records.tobytes())
    return n


def _v4_template(kind: str, client_mac: str = MARK_MAC2) -> bytes:
    options = [("message-type", kind)]
    if kind != "discover":
        options += [("server_id", MARK_IP), ("lease_time", 3600), ("subnet_mask", "255.255.255.0"),
                    ("router", MARK_IP2), ("name_server", MARK_IP3)]
    sport, dport, op = (68, 67, 1) if kind == "discover" else (67, 68, 2)
    src = "0.0.0.0" if kind == "discover" else MARK_IP
    ether_src = MARK_MAC2 if kind == "discover" else MARK_MAC
    chaddr = bytes.fromhex(client_mac.replace(":", "")) + bytes(10)
    return raw(Ether(src=ether_src, dst="ff:ff:ff:ff:ff:ff") / IP(src=src, dst="255.255.255.255", id=0)
               / UDP(sport=sport, dport=dport) / BOOTP(op=op, xid=0x7F7F7F7F, chaddr=chaddr, flags=0x8000,
                                                      yiaddr="0.0.0.0" if op == 1 else MARK_YIADDR)
               / DHCP(options=[*options, "end"]))


def _v4_messages(kind: str, k: np.ndarray, server_mac: np.ndarray, server_ip: np.ndarray, client_mac: np.ndarray,
                 yiaddr: np.ndarray | None = None, router=None, dns=None) -> np.ndarray:
    """DHCPv4 messages of `kind` ("discover", "offer", "ack") as frame rows, the k-th one's fields given."""
    template = _v4_template(kind)
    rows = np.tile(np.frombuffer(template, np.uint8), (len(k), 1))
    _put(rows, XID_AT, (0x27000000 + k).astype(np.uint64), 4)
    _put_all(rows, template, _mac(MARK_MAC2), client_mac)           # chaddr (and a DISCOVER's source)
    if kind != "discover":
        _put_all(rows, template, _mac(MARK_MAC), server_mac)
        _put_all(rows, template, _v4(MARK_IP), server_ip)           # the source address and server identifier
        _put_all(rows, template, _v4(MARK_IP2), server_ip if router is None else router)
        _put_all(rows, template, _v4(MARK_IP3), server_ip if dns is None else dns)
        _put_all(rows, template, _v4(MARK_YIADDR), yiaddr)
    _ipv4_fix(rows)
    return rows


def dhcp_starvation_storm(out_dir: Path) -> dict:
    path = out_dir / "dhcp-starvation-storm.pcap"
    n, answered = 3_000, 100
    k = np.arange(n)
    rng = np.random.default_rng(2704)
    t = 5.0 + np.sort(rng.uniform(0.0, 0.999, n))
    # every DISCOVER from its own forged MAC 02:00:5e:52:hi:lo
    clients = _mac_bytes(0x52, k)
    discovers = _v4_messages("discover", k, clients, np.zeros(n, np.uint64), clients)
    office_mac = np.full(answered, int(OFFICE_SERVER[0].replace(":", ""), 16), np.uint64)
    office_ip = np.full(answered, _ip4(OFFICE_SERVER[1]), np.uint64)
    offers = _v4_messages("offer", k[:answered], office_mac, office_ip, clients[:answered],
                          yiaddr=(_ip4("10.50.0.100") + k[:answered]).astype(np.uint64),
                          router=office_ip, dns=np.full(answered, _ip4("10.50.0.53"), np.uint64))
    width = max(discovers.shape[1], offers.shape[1])
    rows = np.zeros((n + answered, width), np.uint8)
    rows[:n, :discovers.shape[1]] = discovers
    rows[n:, :offers.shape[1]] = offers
    count = _write_padded(path, np.concatenate([t, t[:answered] + 0.004]), rows,
                          np.array([discovers.shape[1]] * n + [offers.shape[1]] * answered))
    return {"file": path.name, "packets": count,
            "what": "DHCP starvation: 3,000 DISCOVERs in one second, each from its own forged client MAC; the "
                    "office's server 10.50.0.1 answers the first 100 with OFFERs: a DHCP storm",
            "must_yield": [{"rule": DHCP_RULE, "severity_at_least": "medium"}],
            "must_not_yield": [{"rule": DHCP_RULE, "severity_above": "medium"}],
            # the storm is the incident; the one server, an info finding that describes the network, is none
            "incidents": [{"root_cause": DHCP_RULE, "findings": [DHCP_RULE]}]}


def _write_padded(path: Path, times: np.ndarray, rows: np.ndarray, lengths: np.ndarray) -> int:
    """Classic pcap of frame rows of differing `lengths` (each row's first bytes) at `times`."""
    usec = np.round(np.asarray(times) * 1e6).astype(np.int64) + T0 * 1_000_000
    path.write_bytes(PCAP_HEADER)
    order = np.argsort(usec, kind="stable")
    header = np.zeros((len(order), 4), "<u4")
    header[:, 0], header[:, 1] = usec[order] // 1_000_000, usec[order] % 1_000_000
    header[:, 2] = header[:, 3] = lengths[order]
    with path.open("ab") as handle:
        for i, row in zip(order.tolist(), header.view(np.uint8).reshape(len(order), 16)):
            handle.write(row.tobytes() + rows[i, :lengths[i]].tobytes())
    return len(order)


def _v6_template() -> bytes:
    duid = DUID_LL(lladdr=MARK_MAC)
    message = (DHCP6_Reply(trid=0x7F7F7F) / DHCP6OptClientId(duid=DUID_LL(lladdr=MARK_MAC2))
               / DHCP6OptServerId(duid=duid)
               / DHCP6OptIA_NA(iaid=1, T1=1800, T2=2880,
                               ianaopts=[DHCP6OptIAAddress(addr=MARK_IP6, preflft=3600, validlft=7200)])
               / DHCP6OptDNSServers(dnsservers=[MARK_DNS6]))
    return raw(Ether(src=MARK_MAC, dst=MARK_MAC2) / IPv6(src=MARK_LL6, dst="fe80::5e:52ff:fe00:1")
               / UDP(sport=547, dport=546) / message)


def forged_dhcp_servers(path: Path, count: int, family: int = 4, seconds: float = 10.0) -> int:
    """`count` DHCPv4 ACKs (or DHCPv6 REPLYs) over `seconds`, each from its own forged server: its own MAC, address
    (and server identifier, router and DNS server; or DUID-LL of its MAC and DNS server), each leasing one address
    to its own client. Returns the packets written."""
    k = np.arange(count)
    t = np.arange(count) * (seconds / max(count, 1))
    server_mac = _mac_bytes(0x64 + k // 65536 % 16, k % 65536)
    client_mac = _mac_bytes(0x53, k % 65536)
    if family == 4:
        server_ip = (_ip4("10.64.0.0") + 1 + k).astype(np.uint64)
        rows = _v4_messages("ack", k, server_mac, server_ip, client_mac,
                            yiaddr=(_ip4("10.80.0.0") + 1 + k).astype(np.uint64))
        return _write(path, t, rows)
    template = _v6_template()
    rows = np.tile(np.frombuffer(template, np.uint8), (count, 1))
    _put_all(rows, template, _mac(MARK_MAC), server_mac)        # the frame's source and the server DUID
    _put_all(rows, template, _mac(MARK_MAC2), client_mac)       # the frame's destination and the client DUID
    low = np.uint64(0xFFFF_FFFF)
    for marker, values in ((MARK_LL6, 0x7F000000 + k), (MARK_IP6, 0x10000 + k), (MARK_DNS6, 0x20000 + k)):
        # the last 4 bytes of the source address, the leased address and the DNS server
        (at,) = _at(template, _v6(marker))
        _put(rows, at + 12, values.astype(np.uint64) & low, 4)
    _ipv6_udp_fix(rows)
    return _write(path, t, rows)


def dhcp_forged_servers(out_dir: Path) -> dict:
    path = out_dir / "dhcp-forged-servers.pcap"
    count = forged_dhcp_servers(path, 1_000)
    return {"file": path.name, "packets": count,
            "what": "1,000 DHCPv4 ACKs in 10 s, each from its own forged server (address, MAC, router, DNS) to its "
                    "own client: one finding for the storm of forged servers, its lists capped",
            "must_yield": [{"rule": DHCP_RULE, "severity_at_least": "high"}],
            "must_not_yield": []}


CAPTURES = [syn_flood_spoofed_ingress, syn_busy_server_ingress, syn_flash_crowd_ingress, dhcp_starvation_storm,
            dhcp_forged_servers]

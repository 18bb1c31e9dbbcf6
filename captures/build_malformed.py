"""Malformed control-plane messages: one capture of them among healthy traffic, and the near-misses that are not.

malformed-control-plane.pcap is one office link, 10.70.0.0/24, whose
routers speak every control-plane protocol the decoder reads, well formed,
for two minutes: a VRRPv2 master (10.70.0.2, VRID 70), a RIPv2 router and an
OSPF router (10.70.0.1), a DHCP server (10.70.0.1) answering a client, a
DHCPv6 server and an IPv6 router sending RAs (fe80::1). Among them, the
malformed messages that the protocols' own rules used to report as
incidents:

- a host (10.70.0.66) sending the packet of packetlife's VRRP_Malformed_DoS:
  protocol 112 with no VRRP byte, TTL 5, to 10.70.0.2 at the VRID 70 virtual
  MAC; then a VRRPv3 advertisement declaring four addresses in 11 bytes (as
  tcpdump's fuzzed icmp-icmp_print-oobr-1.pcap carries);
- the RIP router's update once with a route of metric 268,435,457 (tcpdump's
  ripv2-invalid-length.pcap) and once with a UDP length 4 bytes short of its
  IP length;
- the OSPF router's LS Update once with an LSA whose length runs past the
  packet, and one Hello with a bad checksum among its good ones;
- the DHCP server's OFFER once with a router option longer than the message;
- the DHCPv6 server's REPLY once with an option longer than the message;
- the IPv6 router's RA once with an option of length 0.

Each is a fact about its sender, reported once per sender and protocol at
low; none is a dual master, a rogue announcement or an incident.

malformed-near-misses.pcap holds what is not malformed: the same healthy
messages cut by a snapshot length of 96 bytes (the capture cut them, their
senders did not), a DHCP OFFER sent as two IP fragments (its lengths are
the fragment's: not judged), a zero-filled datagram to UDP 520 and one to
UDP 67 from high ports (probes, judged by the probe rules), and a VRRPv3
pair whose checksums leave out the IPv4 pseudo-header (interop, not damage).
"""
from __future__ import annotations

import struct
from pathlib import Path

from common import T0
from scapy.all import IP, UDP, Ether, IPv6, Raw, fragment
from scapy.contrib.ospf import OSPF_Hdr, OSPF_Hello, OSPF_Link, OSPF_LSUpd, OSPF_Router_LSA
from scapy.layers.dhcp import BOOTP, DHCP
from scapy.layers.dhcp6 import DUID_LL, DHCP6_Reply, DHCP6OptClientId, DHCP6OptDNSServers, DHCP6OptServerId
from scapy.layers.inet6 import ICMPv6ND_RA, ICMPv6NDOptPrefixInfo, ICMPv6NDOptSrcLLAddr
from scapy.layers.rip import RIP, RIPEntry
from scapy.layers.vrrp import VRRP, VRRPv3
from scapy.utils import checksum

ROUTER = ("02:00:5e:70:00:01", "10.70.0.1")          # RIP, OSPF and DHCP
MASTER = ("02:00:5e:70:00:02", "10.70.0.2")          # the VRRP master of VRID 70
ATTACKER = ("02:00:5e:70:00:66", "10.70.0.66")
CLIENT = ("02:00:5e:70:00:10", "10.70.0.110")
ROUTER6 = ("02:00:5e:70:00:01", "fe80::1")
VRID, VMAC, VIP = 70, "00:00:5e:00:01:46", "10.70.0.254"
SNAPLEN = 96
FULL_SNAPLEN = 65_535
DURATION = 120


def _vrrp(priority=200):
    return (Ether(src=VMAC, dst="01:00:5e:00:00:12") / IP(src=MASTER[1], dst="224.0.0.18", ttl=255, proto=112)
            / VRRP(vrid=VRID, priority=priority, addrlist=[VIP], adv=1))


def _rip(routes, udp_len=None):
    message = RIP(cmd=2, version=2)
    for prefix, metric in routes:
        message = message / RIPEntry(addr=prefix, mask="255.255.255.0", metric=metric)
    udp = UDP(sport=520, dport=520) if udp_len is None else UDP(sport=520, dport=520, len=udp_len)
    return Ether(src=ROUTER[0], dst="01:00:5e:00:00:09") / IP(src=ROUTER[1], dst="224.0.0.9", ttl=1) / udp / message


ROUTES = [("10.71.0.0", 1), ("10.72.0.0", 2), ("10.73.0.0", 1)]


def _ospf(payload):
    return (Ether(src=ROUTER[0], dst="01:00:5e:00:00:05") / IP(src=ROUTER[1], dst="224.0.0.5", ttl=1, tos=0xC0)
            / OSPF_Hdr(src="10.255.70.1", area="0.0.0.0") / payload)


def _hello():
    return _ospf(OSPF_Hello(mask="255.255.255.0", hellointerval=10, deadinterval=40, prio=1, options=0x02))


def _router_lsa(seq):
    return OSPF_Router_LSA(id="10.255.70.1", adrouter="10.255.70.1", seq=seq, linklist=[
        OSPF_Link(id="10.70.0.0", data="255.255.255.0", type=3, metric=10)])


def _offer(xid, options=None):
    opts = options or [("message-type", "offer"), ("server_id", ROUTER[1]), ("lease_time", 3600),
                       ("router", ROUTER[1]), ("name_server", ROUTER[1]), "end"]
    return (Ether(src=ROUTER[0], dst="ff:ff:ff:ff:ff:ff") / IP(src=ROUTER[1], dst="255.255.255.255")
            / UDP(sport=67, dport=68) / BOOTP(op=2, chaddr=bytes.fromhex(CLIENT[0].replace(":", "")) + bytes(10),
                                              xid=xid, yiaddr=CLIENT[1], flags=0x8000) / DHCP(options=opts))


def _reply6(xid):
    return (Ether(src=ROUTER6[0], dst="02:00:5e:70:00:10") / IPv6(src=ROUTER6[1], dst="fe80::10")
            / UDP(sport=547, dport=546) / DHCP6_Reply(trid=xid) / DHCP6OptClientId(duid=DUID_LL(lladdr=CLIENT[0]))
            / DHCP6OptServerId(duid=DUID_LL(lladdr=ROUTER6[0])) / DHCP6OptDNSServers(dnsservers=["2001:db8:70::53"]))


def _ra(*options):
    message = ICMPv6ND_RA(routerlifetime=1800)
    for option in options:
        message = message / option
    return Ether(src=ROUTER6[0], dst="33:33:00:00:00:01") / IPv6(src=ROUTER6[1], dst="ff02::1", hlim=255) / message


RA_OPTIONS = (ICMPv6NDOptSrcLLAddr(lladdr=ROUTER6[0]), ICMPv6NDOptPrefixInfo(prefix="2001:db8:70::", prefixlen=64))


def _healthy() -> list:
    """Two minutes of the link's well-formed control plane."""
    out = [(float(t), _vrrp()) for t in range(DURATION)]
    out += [(5.0 + t, _rip(ROUTES)) for t in range(0, DURATION, 30)]
    out += [(1.0 + t, _hello()) for t in range(0, DURATION, 10)]
    out += [(2.0 + t, _ospf(OSPF_LSUpd(lsalist=[_router_lsa(0x80000010 + t)]))) for t in range(0, DURATION, 30)]
    out += [(3.0 + t, _offer(0x7000 + t)) for t in range(0, DURATION, 20)]
    out += [(4.0 + t, _reply6(0x700000 + t)) for t in range(0, DURATION, 20)]
    out += [(6.0 + t, _ra(*RA_OPTIONS)) for t in range(0, DURATION, 15)]
    return out


def _frame(packet) -> bytes:
    return bytes(packet)


def _damaged() -> list:
    """The malformed messages, each as raw bytes patched from a healthy one (lengths and sums as sent)."""
    out = []
    # packetlife's VRRP DoS: protocol 112, no VRRP byte, TTL 5, unicast to the master at the virtual MAC
    out.append((20.5, Ether(src=ATTACKER[0], dst=VMAC) / IP(src=ATTACKER[1], dst=MASTER[1], ttl=5, proto=112)))
    # a VRRPv3 advertisement declaring four addresses in 11 bytes (the fuzzed one of tcpdump's tests)
    ip = IP(src=ATTACKER[1], dst=MASTER[1], ttl=64, proto=112)
    v3 = bytes(ip / VRRPv3(vrid=VRID, priority=69, ipcount=4, addrlist=[VIP], adv=32, chksum=0x0E00))[20:31]
    out.append((21.5, Ether(src=ATTACKER[0], dst=VMAC) / ip / Raw(v3)))
    # the RIP router's update with a route of metric 268,435,457, then one whose UDP length is 4 bytes short
    out.append((65.0, _rip([*ROUTES, ("10.74.0.0", 268_435_457)])))
    update = _rip(ROUTES)
    out.append((95.0, _rip(ROUTES, udp_len=len(update[UDP]) - 4)))
    # the OSPF router's LS Update with an LSA length past the packet, and a Hello with a bad checksum
    lsu = bytearray(_frame(_ospf(OSPF_LSUpd(lsalist=[_router_lsa(0x80000020)]))))
    ospf_at = 14 + 20
    lsa_length = ospf_at + 24 + 4 + 18
    lsu[lsa_length:lsa_length + 2] = struct.pack("!H", 200)
    # summed again as its sender would: RFC 2328 section D.4.3, the 64-bit authentication field left out
    lsu[ospf_at + 12:ospf_at + 14] = b"\x00\x00"
    lsu[ospf_at + 12:ospf_at + 14] = struct.pack("!H", checksum(bytes(lsu[ospf_at:ospf_at + 16] + lsu[ospf_at + 24:])))
    out.append((47.0, bytes(lsu)))
    hello = bytearray(_frame(_hello()))
    hello[ospf_at + 12] ^= 0x5A
    out.append((51.0, bytes(hello)))
    # the DHCP server's OFFER with a router option claiming 200 bytes at the end of the message
    offer = _frame(_offer(0x7777, [("message-type", "offer"), ("server_id", ROUTER[1])]))
    body = offer[14 + 20 + 8:] + bytes([3, 200, 10, 70, 0, 1])
    out.append((33.0, Ether(src=ROUTER[0], dst="ff:ff:ff:ff:ff:ff") / IP(src=ROUTER[1], dst="255.255.255.255")
                / UDP(sport=67, dport=68) / Raw(body)))
    # the DHCPv6 server's REPLY with a DNS option claiming 400 bytes
    reply = _frame(_reply6(0x777777))[14 + 40 + 8:] + struct.pack("!HH", 23, 400) + bytes(16)
    out.append((34.0, Ether(src=ROUTER6[0], dst="02:00:5e:70:00:10") / IPv6(src=ROUTER6[1], dst="fe80::10")
                / UDP(sport=547, dport=546) / Raw(reply)))
    # the IPv6 router's RA with a prefix information option of length 0
    out.append((36.0, _ra(RA_OPTIONS[0], Raw(bytes([3, 0]) + bytes(6)))))
    return [(t, p if isinstance(p, bytes) else _frame(p)) for t, p in out]


def _write_pcap(path: Path, timed, snaplen: int) -> int:
    """A pcap (microseconds, Ethernet) of (seconds after T0, frame bytes) in time order, each cut at `snaplen`."""
    ordered = sorted(timed, key=lambda item: item[0])
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1))
        for offset, frame in ordered:
            micros = round(offset * 1e6)
            kept = frame[:snaplen]
            out.write(struct.pack("<IIII", T0 + micros // 1_000_000, micros % 1_000_000, len(kept), len(frame)))
            out.write(kept)
    return len(ordered)


def malformed_control_plane(out_dir: Path) -> dict:
    path = out_dir / "malformed-control-plane.pcap"
    count = _write_pcap(path, [(t, _frame(p)) for t, p in _healthy()] + _damaged(), FULL_SNAPLEN)
    return {"file": path.name, "packets": count,
            "what": "malformed VRRP (an empty DoS packet, a VRRPv3 short of its addresses), RIP (metric 268,435,457, "
                    "a short UDP length), OSPF (an LSA length past the packet, a bad checksum), DHCPv4, DHCPv6 and "
                    "RA options past the message or of length 0, among two minutes of healthy control plane",
            "must_yield": [{"rule": "malformed-message", "severity_at_least": "low"}],
            "must_not_yield": [{"rule": "*", "severity_above": "low"}]}


def malformed_near_misses(out_dir: Path) -> dict:
    path = out_dir / "malformed-near-misses.pcap"
    frames = [(t, _frame(p)) for t, p in _healthy()]
    # a DHCP OFFER in two IP fragments: the first fragment's lengths are not the message's
    big = _offer(0x7100, [("message-type", "offer"), ("server_id", ROUTER[1]), ("vendor_class_id", b"x" * 80),
                          "end"])
    frames += [(40.0 + k * 0.001, _frame(Ether(src=ROUTER[0], dst="ff:ff:ff:ff:ff:ff") / part))
               for k, part in enumerate(fragment(big[IP], fragsize=200))]
    # probes from high ports: a zero-filled RIP request, a DHCP datagram that is no BOOTP
    frames.append((41.0, _frame(Ether(src=ATTACKER[0], dst=ROUTER[0]) / IP(src=ATTACKER[1], dst=ROUTER[1])
                                / UDP(sport=40520, dport=520) / Raw(bytes(24)))))
    frames.append((42.0, _frame(Ether(src=ATTACKER[0], dst=ROUTER[0]) / IP(src=ATTACKER[1], dst=ROUTER[1])
                                / UDP(sport=40067, dport=67) / Raw(b"\x07" + bytes(15)))))
    # a VRRPv3 pair on VRID 71 summing its checksums as VRRPv2 does
    ip = IP(src="10.70.0.3", dst="224.0.0.18", ttl=255, proto=112)
    message = bytes(ip / VRRPv3(vrid=71, priority=150, ipcount=1, addrlist=["10.70.0.253"], adv=100, chksum=0))[20:]
    message = message[:6] + struct.pack("!H", checksum(message)) + message[8:]
    frames += [(k + 0.5, _frame(Ether(src="00:00:5e:00:01:47", dst="01:00:5e:00:00:12") / ip / Raw(message)))
               for k in range(DURATION)]
    count = _write_pcap(path, frames, SNAPLEN)
    return {"file": path.name, "packets": count,
            "what": f"near-miss: healthy VRRP, RIP, OSPF, DHCPv4/v6 and RAs cut by a snapshot length of {SNAPLEN} "
                    "bytes, a fragmented DHCP OFFER, probes to UDP 520 and 67 from high ports, a VRRPv3 pair summing "
                    "its checksums without the pseudo-header: nothing malformed",
            "must_yield": [],
            "must_not_yield": [{"rule": "malformed-message", "severity_above": "info"},
                               {"rule": "vrrp-dual-master", "severity_above": "info"}]}


CAPTURES = [malformed_control_plane, malformed_near_misses]

"""VRRP and ARP captures (seed 002): two masters fighting over the virtual addresses, an ARP flip-flop, and near-misses.

One server link, 10.60.0.0/24, where two load balancers (lb1 10.60.0.11,
priority 200; lb2 10.60.0.12, priority 100) run keepalived for virtual router
60 with the service addresses 10.60.0.100 and 10.60.0.101: VRRPv2
advertisements every second from the virtual MAC 00:00:5e:00:01:3c to
224.0.0.18 with TTL 255 (RFC 3768), gratuitous ARP for both addresses after
each transition, 5 at once and 5 more 5 s later (keepalived VRRP_GARP_REP,
VRRP_GARP_DELAY).

- seed 002's dual master: lb1 is master; at 30 s the pair stops hearing each
  other (lb1's VRRP starved by a flood), lb2 takes over after its
  Master_Down_Interval and both advertise until 150 s, each re-sending
  its gratuitous ARP every 10 s from the same virtual MAC (byte-identical
  frames from two devices);
- an ARP flip-flop: a printer and a PC configured with one static address,
  10.61.0.50, each answering for it, so the address moves between their MACs;
- near-misses: a normal failover (lb1 resigns with priority 0, lb2 takes
  over and sends its 5 + 5 GARPs), an election (lb1 boots with the higher
  priority and preempts lb2, which advertises twice more and yields), VRID 60
  used on two VLANs by two separate pairs, a CARP pair failing over, a
  VRRPv3 pair failing over whose checksums leave out the IPv4 pseudo-header
  (as several vendors send them; Wireshark's v3_checksum_as_in_v2), and a
  host whose NIC is replaced (its address moves to a new MAC once).
"""
from __future__ import annotations

import struct
from pathlib import Path

from common import write_capture
from scapy.all import ARP, IP, Dot1Q, Ether, Raw
from scapy.layers.vrrp import VRRP, VRRPv3
from scapy.utils import checksum

VRID = 60
VMAC = "00:00:5e:00:01:3c"
VIPS = ["10.60.0.100", "10.60.0.101"]
LB1, LB2 = "10.60.0.11", "10.60.0.12"
GROUP_MAC, GROUP = "01:00:5e:00:00:12", "224.0.0.18"
CLIENT = ("02:00:5e:60:00:50", "10.60.0.50")
QUIET = ["echo-loop", "routing-loop", "rip-trigger", "rip-announce", "ospf-instability"]


def _advert(source, priority, vrid=VRID, vips=VIPS, vlan=None):
    """A VRRPv2 advertisement of `source` as master of `vrid`, from the virtual MAC (RFC 3768 section 7.3)."""
    eth = Ether(src=f"00:00:5e:00:01:{vrid:02x}", dst=GROUP_MAC)
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    return eth / IP(src=source, dst=GROUP, ttl=255, proto=112) / VRRP(vrid=vrid, priority=priority, addrlist=vips,
                                                                      adv=1)


def _garp(address, mac=VMAC, vlan=None):
    """A gratuitous ARP request for `address` (sender = target address), as keepalived sends it."""
    eth = Ether(src=mac, dst="ff:ff:ff:ff:ff:ff")
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    return eth / ARP(op=1, hwsrc=mac, psrc=address, hwdst="00:00:00:00:00:00", pdst=address)


def _garps(t, vips=VIPS, mac=VMAC, vlan=None, rounds=(0.0, 5.0)) -> list:
    """One transition's gratuitous ARP: 5 per address at once and 5 more 5 s later."""
    out = []
    for delay in rounds:
        for k in range(5):
            out += [(t + delay + k * 0.01, _garp(address, mac, vlan)) for address in vips]
    return out


def _adverts(source, priority, start, stop, **kw) -> list:
    """Advertisements every second from `start` up to `stop` (excluded)."""
    return [(start + k * 1.0, _advert(source, priority, **kw)) for k in range(int(stop - start))]


def _clients(start, stop, vip=VIPS[0]) -> list:
    """A client resolving the service address now and then (the master answers with the virtual MAC)."""
    out = []
    for t in range(int(start), int(stop), 20):
        out.append((t + 0.3, Ether(src=CLIENT[0], dst="ff:ff:ff:ff:ff:ff")
                    / ARP(op=1, hwsrc=CLIENT[0], psrc=CLIENT[1], pdst=vip)))
        out.append((t + 0.301, Ether(src=VMAC, dst=CLIENT[0])
                    / ARP(op=2, hwsrc=VMAC, psrc=vip, hwdst=CLIENT[0], pdst=CLIENT[1])))
    return out


def _quiet(rules, above="info") -> list[dict]:
    return [{"rule": rule, "severity_above": above} for rule in rules]


def vrrp_dual_master(out_dir: Path) -> dict:
    path = out_dir / "vrrp-dual-master-garp.pcapng"
    packets = _adverts(LB1, 200, 0, 150) + _clients(0, 150) + _garps(0.5)
    # lb2 hears nothing from 30 s: master after 3 x 1 s + (256 - 100)/256 s, and both stay master to 150 s
    packets += _adverts(LB2, 100, 33.61, 150)
    for t in range(34, 150, 10):                       # each re-sends its GARPs every 10 s, from the same MAC
        packets += _garps(t, rounds=(0.0,)) + _garps(t + 0.2, rounds=(0.0,))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "seed 002: two load balancers both VRRP master of VRID 60 for two minutes, both sending "
                    "gratuitous ARP for the virtual addresses from the same virtual MAC",
            "must_yield": [{"rule": "vrrp-dual-master", "severity_at_least": "critical"},
                           {"rule": "garp-war", "severity_at_least": "medium"}],
            "incidents": [{"root_cause": "vrrp-dual-master", "findings": ["vrrp-dual-master", "garp-war", "garp-war"]}],
            "must_not_yield": _quiet(QUIET)}


def arp_flip_flop(out_dir: Path) -> dict:
    path = out_dir / "arp-flip-flop.pcapng"
    printer, pc = ("02:00:5e:61:00:0a", "10.61.0.50"), ("02:00:5e:61:00:0b", "10.61.0.50")
    asker = ("02:00:5e:61:00:01", "10.61.0.1")
    packets = []
    # the gateway asks for 10.61.0.50 every 40 s; the device that answers first wins the cache, in turn
    for k, t in enumerate(range(0, 240, 40)):
        first, second = (printer, pc) if k % 2 == 0 else (pc, printer)
        packets.append((t, Ether(src=asker[0], dst="ff:ff:ff:ff:ff:ff")
                        / ARP(op=1, hwsrc=asker[0], psrc=asker[1], pdst=first[1])))
        packets.append((t + 0.001, Ether(src=first[0], dst=asker[0])
                        / ARP(op=2, hwsrc=first[0], psrc=first[1], hwdst=asker[0], pdst=asker[1])))
        packets.append((t + 20, Ether(src=second[0], dst="ff:ff:ff:ff:ff:ff")
                        / ARP(op=1, hwsrc=second[0], psrc=second[1], pdst=asker[1])))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "ARP flip-flop: a printer and a PC with one static address take 10.61.0.50 from each other "
                    "every 40 s",
            "must_yield": [{"rule": "garp-war", "severity_at_least": "medium"}],
            "must_not_yield": _quiet(["vrrp-dual-master", *QUIET])}


def vrrp_failover(out_dir: Path) -> dict:
    path = out_dir / "vrrp-failover.pcapng"
    packets = [*_adverts(LB1, 200, 0, 40), (40.0, _advert(LB1, 0)), *_clients(0, 120)]
    # priority 0: lb2 takes over after its skew time, (256 - 100)/256 s
    packets += _adverts(LB2, 100, 40.61, 120) + _garps(40.62)
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-miss: a VRRP failover, the master resigning with priority 0 and the backup taking over "
                    "with its 5 + 5 gratuitous ARPs",
            "must_yield": [{"rule": "vrrp-dual-master", "severity_at_least": "info"}],
            "must_not_yield": [{"rule": "*", "severity_above": "info"}]}


def vrrp_election(out_dir: Path) -> dict:
    path = out_dir / "vrrp-election.pcapng"
    # lb2 is master; lb1 boots at 30.4 s with the higher priority and preempts: lb2, slow to process lb1's
    # advertisements, sends two more before it yields
    packets = _adverts(LB2, 100, 0, 33) + _adverts(LB1, 200, 30.4, 120) + _garps(30.41)
    packets += _clients(0, 120)
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-miss: a VRRP election, the higher priority preempting the master, which advertises "
                    "twice more before it yields",
            "must_yield": [{"rule": "vrrp-dual-master", "severity_at_least": "info"}],
            "must_not_yield": [{"rule": "*", "severity_above": "info"}]}


def vrrp_two_vlans(out_dir: Path) -> dict:
    path = out_dir / "vrrp-same-vrid-two-vlans.pcap"
    packets = _adverts("10.62.10.2", 150, 0, 60, vips=["10.62.10.1"], vlan=10)
    packets += _adverts("10.62.20.2", 150, 0.5, 60, vips=["10.62.20.1"], vlan=20)
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-miss: VRID 60 on VLANs 10 and 20, one master each (two virtual routers)",
            "must_yield": [{"rule": "vrrp-dual-master", "severity_at_least": "info"}],
            "must_not_yield": [{"rule": "*", "severity_above": "info"}]}


def _carp(source, mac, vhid, advskew, advbase=1):
    """An OpenBSD CARP advertisement (netinet/ip_carp.h), checksummed; scapy's contrib CARP layer would rebind IP
    protocol 112 for every other capture."""
    header = struct.pack("!BBBBBBH", 0x21, vhid, advskew, 7, 0, advbase, 0) + bytes(28)
    message = header[:6] + struct.pack("!H", checksum(header)) + header[8:]
    return Ether(src=mac, dst=GROUP_MAC) / IP(src=source, dst=GROUP, ttl=255, proto=112) / Raw(message)


def carp_pair(out_dir: Path) -> dict:
    path = out_dir / "carp-failover.pcap"
    # the master (advskew 0) advertises every advbase + advskew/256 s until it dies at 60 s; the backup
    # (advskew 100) takes over after 3 x (1 + 100/256) s and advertises every 1.39 s
    packets = [(k * 1.0, _carp("10.63.0.2", "00:00:5e:00:01:05", 5, 0)) for k in range(60)]
    packets += [(63.2 + k * (1 + 100 / 256), _carp("10.63.0.3", "00:00:5e:00:01:05", 5, 100)) for k in range(40)]
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-miss: a CARP pair (vhid 5) failing over from its master to its backup",
            "must_yield": [{"rule": "vrrp-dual-master", "severity_at_least": "info"}],
            "must_not_yield": [{"rule": "*", "severity_above": "info"}]}


def _advert_v3_as_v2(source, priority, vrid, vips):
    """A VRRPv3 advertisement (interval 1 s) whose checksum is summed over the message alone, as VRRPv2 sums it:
    no IPv4 pseudo-header (RFC 5798 section 5.2.8 asks for one; several vendors leave it out)."""
    ip = IP(src=source, dst=GROUP, ttl=255, proto=112)
    message = bytes(ip / VRRPv3(vrid=vrid, priority=priority, ipcount=len(vips), addrlist=vips, adv=100, chksum=0))[20:]
    message = message[:6] + struct.pack("!H", checksum(message)) + message[8:]
    return Ether(src=f"00:00:5e:00:01:{vrid:02x}", dst=GROUP_MAC) / ip / Raw(message)


def vrrpv3_checksum_interop(out_dir: Path) -> dict:
    path = out_dir / "vrrpv3-checksum-as-v2.pcapng"
    vrid, vips, vmac = 61, ["10.60.1.100"], "00:00:5e:00:01:3d"
    packets = [(k * 1.0, _advert_v3_as_v2(LB1, 200, vrid, vips)) for k in range(40)]
    packets.append((40.0, _advert_v3_as_v2(LB1, 0, vrid, vips)))
    # priority 0: lb2 takes over after its skew time, (256 - 100) / 256 of the 1 s interval (RFC 5798 6.1)
    packets += [(40.61 + k * 1.0, _advert_v3_as_v2(LB2, 100, vrid, vips)) for k in range(80)]
    packets += _garps(40.62, vips=vips, mac=vmac)
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-miss: a VRRPv3 pair over IPv4 failing over, every checksum summed without the IPv4 "
                    "pseudo-header (as VRRPv2; Wireshark's v3_checksum_as_in_v2 preference): interop, not damage",
            "must_yield": [{"rule": "vrrp-dual-master", "severity_at_least": "info"}],
            "must_not_yield": [{"rule": "*", "severity_above": "info"}]}


def arp_nic_change(out_dir: Path) -> dict:
    path = out_dir / "arp-nic-change.pcapng"
    old, new, gateway = "02:00:5e:64:00:0a", "02:00:5e:64:00:0b", ("02:00:5e:64:00:01", "10.64.0.1")
    host = "10.64.0.20"
    packets = []
    for t in range(0, 60, 15):
        packets.append((t, Ether(src=old, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=old, psrc=host, pdst=gateway[1])))
        packets.append((t + 0.001, Ether(src=gateway[0], dst=old)
                        / ARP(op=2, hwsrc=gateway[0], psrc=gateway[1], hwdst=old, pdst=host)))
    # the new NIC probes (RFC 5227: sender 0.0.0.0), announces twice and goes on as before
    packets += [(90.0 + k, Ether(src=new, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=new, psrc="0.0.0.0", pdst=host))
                for k in range(3)]
    packets += [(94.0 + 2 * k, _garp(host, new)) for k in range(2)]
    for t in range(100, 180, 15):
        packets.append((t, Ether(src=new, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=new, psrc=host, pdst=gateway[1])))
        packets.append((t + 0.001, Ether(src=gateway[0], dst=new)
                        / ARP(op=2, hwsrc=gateway[0], psrc=gateway[1], hwdst=new, pdst=host)))
    count = write_capture(path, packets)
    return {"file": path.name, "packets": count,
            "what": "near-miss: a host's NIC replaced, its address moving to a new MAC once (RFC 5227 probes and "
                    "announcements)",
            "must_yield": [],
            "must_not_yield": _quiet(["garp-war", "vrrp-dual-master", *QUIET])}


CAPTURES = [vrrp_dual_master, arp_flip_flop, vrrp_failover, vrrp_election, vrrp_two_vlans, carp_pair,
            vrrpv3_checksum_interop, arp_nic_change]

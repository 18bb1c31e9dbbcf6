"""ARP and IP-MAC binding captures (seed 004): a man in the middle on the campus, and its near-misses.

Seed 004's campus let hosts in by their IP-MAC pair (/etc/ethers, dhcpd host
blocks, the switches' IP-MAC-port binding with DHCP snooping) and gave hosts
without one an address from the pool 10.160.0.1-100. Its access segment
here is 10.160.0.0/16 behind the gateway 10.160.0.254; the registry is
campus.ethers, and each capture comes with the campus site file
(<capture>.site.yaml: local networks, routers, pool, bindings), which
`make demo` and the tests pass with it.

- arp-spoof-mitm: Mallory (10.160.1.66, registered) poisons Alice and the
  gateway from 60 s on, telling each every 2 s, unasked, that the other's
  address is at her MAC, and relays their traffic (TTL one lower); Alice
  and the gateway keep telling the truth in their own ARP requests;
- Carol's NIC replaced (arp-campus-nic-change: her address at a new MAC
  from 180 s, the old one gone: one change among the hosts, but a pair
  the registry does not hold, which its switches would drop);
- near-misses: a VRRP failover on
  VLAN 30 (the virtual MAC moves from one router to the other, the address
  stays with it); a proxy-ARP gateway answering for another building's hosts
  with its own MAC (seed 004's own server ended up doing that: "enabled
  arp_proxy");
  unregistered hosts in the dynamic pool, one pool address handed to a
  second host 700 s after the first left.
- arp-nd-spoof: the same man in the middle over IPv6 (parasite6, THC's
  fake_advertise6): Mallory tells Alice every 2 s, in Neighbor
  Advertisements with the override flag and no solicited flag, unicast to
  her, that the gateway's fe80::1 is at Mallory's MAC, while the gateway
  answers Alice's solicitations for it with its own;
- arp-dhcp-registered-ack: the campus DHCP server ACKs Bob's registered
  address to another MAC (a host block edited apart from /etc/ethers);
- near-misses over IPv6: Carol's new NIC announcing her addresses with
  unsolicited Neighbor Advertisements to all nodes (one change: low);
  Duplicate Address Detection (solicitations from ::), the gateway's
  solicited advertisements with the router flag, and a proxy's
  advertisements without the override flag for another host's address.
"""
from __future__ import annotations

import ipaddress
import random
from pathlib import Path

from common import tcp_session, write_capture
from scapy.all import (
    ARP,
    BOOTP,
    DHCP,
    IP,
    UDP,
    Dot1Q,
    Ether,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6NDOptDstLLAddr,
    ICMPv6NDOptSrcLLAddr,
    IPv6,
)
from scapy.layers.vrrp import VRRP

GATEWAY = ("02:a0:00:00:00:fe", "10.160.0.254")
ALICE = ("02:a0:00:01:00:0a", "10.160.1.10")
BOB = ("02:a0:00:01:00:0b", "10.160.1.11")
CAROL = ("02:a0:00:01:00:0c", "10.160.1.12")
CAROL_NEW_MAC = "02:a0:00:01:00:c2"
PRINTER = ("02:a0:00:01:00:14", "10.160.1.20")
MALLORY = ("02:a0:00:01:00:42", "10.160.1.66")
R1 = ("02:a0:00:1e:00:02", "10.160.30.2")
R2 = ("02:a0:00:1e:00:03", "10.160.30.3")
VIP = ("00:00:5e:00:01:1e", "10.160.30.1")       # VRRP VRID 30 (RFC 5798 section 7.3)
VLAN30_HOST = ("02:a0:00:1e:00:0a", "10.160.30.10")
ELSEWHERE = [(f"02:a0:00:05:00:{k:02x}", f"10.160.5.{k}") for k in (10, 11, 12)]   # another building
POOL_HOSTS = [("02:b0:00:00:00:17", "10.160.0.23"), ("02:b0:00:00:00:39", "10.160.0.57"),
              ("02:b0:00:00:00:18", "10.160.0.23")]                             # the last reuses .23
WEB = [f"198.51.100.{k}" for k in range(1, 13)]
BROADCAST = "ff:ff:ff:ff:ff:ff"
SITE_FILE = """\
# The campus of seed 004 (captures/build_arp.py): hosts are let in by their IP-MAC pair, unknown hosts
# get an address from the pool. Use as: detector analyze CAPTURE -o DIR --site THIS_FILE
local_networks:
  - 10.160.0.0/16
routers:            # their MACs come from the bindings
  - 10.160.0.254
  - 10.160.30.2
  - 10.160.30.3
dynamic_pools:
  - 10.160.0.1-10.160.0.100
bindings:
  - {file: campus.ethers}
"""
ETHERS = "".join(f"{mac}  {ip}  # {name}\n" for name, (mac, ip) in [
    ("gateway", GATEWAY), ("alice", ALICE), ("bob", BOB), ("carol", CAROL), ("printer", PRINTER),
    ("mallory", MALLORY), ("vlan 30 router 1", R1), ("vlan 30 router 2", R2),
    ("vlan 30 gateway: the VRRP virtual MAC", VIP), ("vlan 30 host", VLAN30_HOST),
    *[(f"building 5 host {k}", host) for k, host in enumerate(ELSEWHERE, 1)]])
QUIET = {"rule": "*", "severity_above": "info"}


def _request(asker, ip, vlan=None):
    """asker (MAC, IP) asks who has `ip`, to broadcast."""
    eth = Ether(src=asker[0], dst=BROADCAST)
    eth = eth / Dot1Q(vlan=vlan) if vlan else eth
    return eth / ARP(op=1, hwsrc=asker[0], psrc=asker[1], hwdst="00:00:00:00:00:00", pdst=ip)


def _reply(sender, target, vlan=None):
    """sender (MAC, IP) tells target (MAC, IP) where the sender's address is."""
    eth = Ether(src=sender[0], dst=target[0])
    eth = eth / Dot1Q(vlan=vlan) if vlan else eth
    return eth / ARP(op=2, hwsrc=sender[0], psrc=sender[1], hwdst=target[0], pdst=target[1])


def _gratuitous(sender, vlan=None):
    """An ARP announcement (RFC 5227): a request for the sender's own address."""
    eth = Ether(src=sender[0], dst=BROADCAST)
    eth = eth / Dot1Q(vlan=vlan) if vlan else eth
    return eth / ARP(op=1, hwsrc=sender[0], psrc=sender[1], hwdst="00:00:00:00:00:00", pdst=sender[1])


def _probe(mac, ip):
    """An ARP probe (RFC 5227): who has `ip`, from 0.0.0.0."""
    return Ether(src=mac, dst=BROADCAST) / ARP(op=1, hwsrc=mac, psrc="0.0.0.0", hwdst="00:00:00:00:00:00", pdst=ip)


def _resolve(asker, answerer, t, vlan=None):
    return [(t, _request(asker, answerer[1], vlan)), (t + 0.0004, _reply(answerer, asker, vlan))]


def _browse(host, via_mac, server, t, rng, sport):
    """A short web exchange of `host` with an off-net server through the router at `via_mac`."""
    eth, eth_r = Ether(src=host[0], dst=via_mac), Ether(src=via_mac, dst=host[0])
    return tcp_session(eth, eth_r, IP(src=host[1], dst=server), IP(src=server, dst=host[1]), sport, 443, t,
                       [(b"GET / HTTP/1.1\r\n\r\n", b"HTTP/1.1 200 OK\r\n\r\n" + bytes(200))], rng)


def _site(out_dir: Path, name: str) -> str:
    (out_dir / "campus.ethers").write_text("# seed 004's registry: MAC IP, as /etc/ethers\n" + ETHERS)
    site = f"{name}.site.yaml"
    (out_dir / site).write_text(SITE_FILE)
    return site


def _entry(path: Path, count: int, what: str, must_yield: list, must_not_yield: list) -> dict:
    name = path.name.split(".")[0]
    return {"file": path.name, "packets": count, "what": what, "site": _site(path.parent, name),
            "must_yield": must_yield, "must_not_yield": must_not_yield}


def arp_spoof_mitm(out_dir: Path) -> dict:
    path = out_dir / "arp-spoof-mitm.pcapng"
    rng = random.Random(4)
    packets = _resolve(ALICE, GATEWAY, 0.0) + _resolve(BOB, GATEWAY, 0.5) + _resolve(MALLORY, GATEWAY, 1.0)
    for k, server in enumerate(WEB[:8]):
        packets += _browse(ALICE, GATEWAY[0], server, 2.0 + 5 * k, rng, 40000 + k)
    packets += _browse(BOB, GATEWAY[0], WEB[8], 3.0, rng, 41000)
    # the truth, every 20 s: Alice asks for the printer, the gateway for Bob
    for k in range(8):
        packets += _resolve(ALICE, PRINTER, 10.0 + 20 * k) + _resolve(GATEWAY, BOB, 15.0 + 20 * k)
    # the lie, every 2 s from 60 s (arpspoof -t alice gateway and -t gateway alice)
    for k in range(40):
        t = 60.0 + 2 * k
        packets += [(t, _reply((MALLORY[0], GATEWAY[1]), ALICE)), (t + 0.0001, _reply((MALLORY[0], ALICE[1]), GATEWAY))]
    # Alice's traffic now reaches Mallory, who relays it to the gateway and back (TTL one lower)
    for k, server in enumerate(WEB[8:]):
        for t, pkt in _browse(ALICE, MALLORY[0], server, 70.0 + 15 * k, rng, 42000 + k):
            ip = pkt[IP].copy()
            outbound = ip.src == ALICE[1]
            first = pkt if outbound else Ether(src=GATEWAY[0], dst=MALLORY[0]) / ip
            relayed = ip.copy()
            relayed.ttl -= 1
            packets += [(t, first), (t + 0.0002, Ether(src=MALLORY[0], dst=GATEWAY[0] if outbound else ALICE[0])
                                                 / relayed)]
    count = write_capture(path, packets)
    return _entry(path, count,
                  "ARP man in the middle on seed 004's campus: a registered host tells Alice and the gateway, every "
                  "2 s and unasked, that the other's address is at its MAC, and relays their traffic",
                  [{"rule": "arp-spoof", "severity_at_least": "high"},
                   {"rule": "ip-mac-binding", "severity_at_least": "high"}],
                  [{"rule": "routing-loop", "severity_above": "info"}, {"rule": "echo-loop", "severity_above": "info"}])


def arp_campus_nic_change(out_dir: Path) -> dict:
    path = out_dir / "arp-campus-nic-change.pcapng"
    rng = random.Random(5)
    packets = _resolve(CAROL, GATEWAY, 0.0) + _resolve(GATEWAY, CAROL, 1.0)
    for k in range(4):
        packets += _browse(CAROL, GATEWAY[0], WEB[k], 5.0 + 30 * k, rng, 43000 + k)
        packets += _resolve(CAROL, PRINTER, 20.0 + 30 * k)
    # the new NIC from 180 s: RFC 5227 probes and announcement, then the same work
    new = (CAROL_NEW_MAC, CAROL[1])
    packets += [(180.0 + k, _probe(CAROL_NEW_MAC, CAROL[1])) for k in range(3)]
    packets += [(183.0 + 2 * k, _gratuitous(new)) for k in range(2)]
    packets += _resolve(new, GATEWAY, 186.0)
    for k in range(4):
        packets += _browse(new, GATEWAY[0], WEB[4 + k], 190.0 + 30 * k, rng, 44000 + k)
        packets += _resolve(GATEWAY, new, 200.0 + 30 * k) + _resolve(new, PRINTER, 205.0 + 30 * k)
    count = write_capture(path, packets)
    return _entry(path, count,
                  "a registered host's NIC replaced: an unregistered MAC probes for, announces and uses a registered "
                  "address after its owner went quiet: one change among the hosts (arp-spoof low), and what the "
                  "registry's switches would drop (ip-mac-binding high, the stale registry named)",
                  [{"rule": "arp-spoof", "severity_at_least": "low"},
                   {"rule": "ip-mac-binding", "severity_at_least": "high"}],
                  [{"rule": "arp-spoof", "severity_above": "low"}, {"rule": "garp-war", "severity_above": "info"}])


def _advert(router, priority, t):
    """A VRRPv2 advertisement of VRID 30 from the virtual MAC (RFC 5798 section 7.3), on VLAN 30."""
    return (t, Ether(src=VIP[0], dst="01:00:5e:00:00:12") / Dot1Q(vlan=30)
            / IP(src=router[1], dst="224.0.0.18", ttl=255, proto=112)
            / VRRP(version=2, vrid=30, priority=priority, ipcount=1, addrlist=[VIP[1]], adv=1))


def arp_vrrp_failover(out_dir: Path) -> dict:
    path = out_dir / "arp-vrrp-failover.pcapng"
    packets = []
    # R1 master (priority 200) until 40 s, then silent; R2 (100) takes over after the master-down interval
    packets += [_advert(R1, 200, float(t)) for t in range(40)]
    takeover = 40.0 + 3 + (256 - 100) / 256
    packets += [_advert(R2, 100, takeover + t) for t in range(40)]
    for k in range(5):               # the new master's gratuitous ARPs for the virtual address
        packets.append((takeover + 0.01 * k, _gratuitous(VIP, vlan=30)))
    packets += [(0.5, _gratuitous(VIP, vlan=30))]
    for k in range(4):               # a host keeps using its gateway; the routers resolve each other
        packets += _resolve(VLAN30_HOST, VIP, 5.0 + 20 * k, vlan=30)
        packets += _resolve(R1 if k < 2 else R2, VLAN30_HOST, 10.0 + 20 * k, vlan=30)
        packets.append((11.0 + 20 * k, Ether(src=VLAN30_HOST[0], dst=VIP[0]) / Dot1Q(vlan=30)
                        / IP(src=VLAN30_HOST[1], dst=WEB[k]) / UDP(sport=5353 + k, dport=53)))
    count = write_capture(path, packets)
    return _entry(path, count,
                  "near-miss: a VRRP failover on VLAN 30: the virtual MAC moves to the other router, the gateway "
                  "address stays at the virtual MAC",
                  [], [QUIET])


def arp_proxy_router(out_dir: Path) -> dict:
    path = out_dir / "arp-proxy-router.pcapng"
    rng = random.Random(6)
    packets = []
    # hosts with a /16 netmask ask for another building's hosts; the gateway answers with its own MAC
    for k, (host, far) in enumerate([(ALICE, ELSEWHERE[0]), (BOB, ELSEWHERE[1]), (ALICE, ELSEWHERE[2]),
                                     (BOB, ELSEWHERE[0])]):
        t = 2.0 + 25 * k
        packets += [(t, _request(host, far[1])), (t + 0.0004, _reply((GATEWAY[0], far[1]), host))]
        packets += _browse(host, GATEWAY[0], far[1], t + 0.01, rng, 45000 + k)
    packets += _resolve(GATEWAY, ALICE, 1.0) + _resolve(GATEWAY, BOB, 1.5)
    count = write_capture(path, packets)
    return _entry(path, count,
                  "near-miss: a proxy-ARP gateway answers for another building's registered hosts with its own MAC "
                  "and forwards their traffic",
                  [], [QUIET])


def arp_dynamic_pool(out_dir: Path) -> dict:
    path = out_dir / "arp-dynamic-pool.pcapng"
    rng = random.Random(7)
    packets = []
    starts = (0.0, 30.0, 800.0)      # the third host takes .23 700 s after the first left
    for k, (host, t0) in enumerate(zip(POOL_HOSTS, starts)):
        packets += [(t0, _probe(host[0], host[1])), (t0 + 1.0, _gratuitous(host))]
        packets += _resolve(host, GATEWAY, t0 + 2.0)
        packets += _browse(host, GATEWAY[0], WEB[k], t0 + 3.0, rng, 46000 + k)
        packets += _resolve(GATEWAY, host, t0 + 60.0)
    count = write_capture(path, packets)
    return _entry(path, count,
                  "near-miss: unregistered hosts in the dynamic pool, one pool address handed to another host after "
                  "the first left",
                  [], [QUIET])


GATEWAY6 = (GATEWAY[0], "fe80::1")
ALICE6 = (ALICE[0], "fe80::a0:ff:fe01:a")
CAROL6 = (CAROL[0], "2001:db8:a0:1::12")
ALL_NODES = ("33:33:00:00:00:01", "ff02::1")
STRANGER = "02:b0:00:00:00:99"                  # a MAC the registry does not know


def _solicited_node(ip: str) -> tuple[str, str]:
    """The solicited-node multicast group of `ip` and its MAC (RFC 4291 2.7.1, RFC 2464 7)."""
    low = int(ipaddress.ip_address(ip)) & 0xFFFFFF
    group = ipaddress.ip_address(int(ipaddress.ip_address("ff02::1:ff00:0")) | low)
    return f"33:33:ff:{low >> 16:02x}:{(low >> 8) & 0xFF:02x}:{low & 0xFF:02x}", str(group)


def _ns(asker, target, source=None, dst=None):
    """asker (MAC, IP) solicits target's address: to its solicited-node group, or `dst` (MAC, IP) when unicast
    (reachability confirmation); from `source` (:: for Duplicate Address Detection, without the option)."""
    dst_mac, dst_ip = dst or _solicited_node(target)
    source = source or asker[1]
    pkt = (Ether(src=asker[0], dst=dst_mac) / IPv6(src=source, dst=dst_ip, hlim=255) / ICMPv6ND_NS(tgt=target))
    return pkt if source == "::" else pkt / ICMPv6NDOptSrcLLAddr(lladdr=asker[0])


def _na(sender_mac, target, to, solicited=True, override=True, router=False, lladdr=None):
    """sender_mac says `target` is at `lladdr` (its own MAC by default), to `to` (MAC, IP)."""
    return (Ether(src=sender_mac, dst=to[0]) / IPv6(src=target, dst=to[1], hlim=255)
            / ICMPv6ND_NA(R=int(router), S=int(solicited), O=int(override), tgt=target)
            / ICMPv6NDOptDstLLAddr(lladdr=lladdr or sender_mac))


def _resolve6(asker, answerer, t, router=False):
    return [(t, _ns(asker, answerer[1])), (t + 0.0004, _na(answerer[0], answerer[1], asker, router=router))]


def arp_nd_spoof(out_dir: Path) -> dict:
    path = out_dir / "arp-nd-spoof.pcapng"
    packets = []
    # the truth: Alice resolves the gateway's link-local every 20 s, the gateway answers (router flag)
    for k in range(8):
        packets += _resolve6(ALICE6, GATEWAY6, 5.0 + 20 * k, router=True)
    # the lie, every 2 s from 60 s: unsolicited, override, unicast to Alice
    for k in range(30):
        packets.append((60.0 + 2 * k, _na(MALLORY[0], GATEWAY6[1], ALICE6, solicited=False)))
    count = write_capture(path, packets)
    return _entry(path, count,
                  "Neighbor Discovery spoofing on seed 004's campus: a registered host tells Alice every 2 s, "
                  "unasked and with the override flag, that the gateway's fe80::1 is at its MAC",
                  [{"rule": "arp-spoof", "severity_at_least": "high"}],
                  [{"rule": "ip-mac-binding", "severity_above": "info"}])


def _dhcp_ack(server, client_mac, yiaddr, t, xid):
    """The server's DHCPACK of `yiaddr` to `client_mac`, broadcast (the client has no address yet)."""
    return (t, Ether(src=server[0], dst=BROADCAST) / IP(src=server[1], dst="255.255.255.255")
            / UDP(sport=67, dport=68)
            / BOOTP(op=2, xid=xid, yiaddr=yiaddr, siaddr=server[1],
                    chaddr=bytes.fromhex(client_mac.replace(":", "")) + bytes(10))
            / DHCP(options=[("message-type", "ack"), ("server_id", server[1]), ("lease_time", 3600),
                            ("subnet_mask", "255.255.0.0"), ("router", GATEWAY[1]), "end"]))


def arp_dhcp_registered_ack(out_dir: Path) -> dict:
    path = out_dir / "arp-dhcp-registered-ack.pcapng"
    packets = _resolve(BOB, GATEWAY, 0.0) + _resolve(GATEWAY, BOB, 1.0)
    # a pool host's lease (as it should be), then Bob's address leased to a MAC the registry does not know
    packets.append(_dhcp_ack(GATEWAY, POOL_HOSTS[0][0], POOL_HOSTS[0][1], 10.0, 0x4101))
    packets.append(_dhcp_ack(GATEWAY, STRANGER, BOB[1], 40.0, 0x4102))
    count = write_capture(path, packets)
    return _entry(path, count,
                  "the campus DHCP server ACKs Bob's registered address to a MAC the registry does not know",
                  [{"rule": "ip-mac-binding", "severity_at_least": "high"}],
                  [{"rule": "arp-spoof", "severity_above": "info"}])


def arp_nd_nic_change(out_dir: Path) -> dict:
    path = out_dir / "arp-nd-nic-change.pcapng"
    packets = []
    for k in range(4):
        packets += _resolve6(CAROL6, (GATEWAY[0], "2001:db8:a0:1::1"), 5.0 + 30 * k, router=True)
    # the new NIC from 180 s: DAD for the address, then two unsolicited advertisements to all nodes (RFC 4861
    # 7.2.6: MAX_NEIGHBOR_ADVERTISEMENT is 3)
    new = (CAROL_NEW_MAC, CAROL6[1])
    packets += [(180.0 + k, _ns(new, CAROL6[1], source="::")) for k in range(2)]
    packets += [(183.0 + k, _na(CAROL_NEW_MAC, CAROL6[1], ALL_NODES, solicited=False)) for k in range(2)]
    for k in range(4):
        packets += _resolve6(new, (GATEWAY[0], "2001:db8:a0:1::1"), 190.0 + 30 * k, router=True)
    count = write_capture(path, packets)
    return _entry(path, count,
                  "near-miss: a host's NIC replaced: its IPv6 address announced from the new MAC to all nodes after "
                  "the old one went quiet (one change)",
                  [{"rule": "arp-spoof", "severity_at_least": "low"}],
                  [{"rule": "*", "severity_above": "low"}])


def arp_nd_near_misses(out_dir: Path) -> dict:
    path = out_dir / "arp-nd-near-misses.pcapng"
    far = "2001:db8:a0:5::10"                   # a host of another building, behind the gateway (RFC 4389 proxy)
    packets = []
    for k in range(6):
        t = 5.0 + 20 * k
        # Duplicate Address Detection of a new address: from ::, claims nothing
        packets.append((t, _ns((BOB[0], "::"), f"2001:db8:a0:1::b{k}", source="::")))
        # the gateway answers for itself with the router flag, Alice confirms it by unicast
        packets += _resolve6(ALICE6, GATEWAY6, t + 1.0, router=True)
        packets += [(t + 2.0, _ns(ALICE6, GATEWAY6[1], dst=GATEWAY6)),
                    (t + 2.0004, _na(GATEWAY[0], GATEWAY6[1], ALICE6, router=True))]
        # a proxy (the gateway, override clear) and the far host itself (once, moved here) answer for `far`
        packets += [(t + 3.0, _ns(ALICE6, far)),
                    (t + 3.0004, _na(GATEWAY[0], far, ALICE6, router=True, override=False))]
        if k == 3:
            packets.append((t + 3.0008, _na(ELSEWHERE[0][0], far, ALICE6)))
    count = write_capture(path, packets)
    return _entry(path, count,
                  "near-miss: Duplicate Address Detection, a router's solicited advertisements, and a proxy's "
                  "advertisements without the override flag for a host that also answers",
                  [], [QUIET])


CAPTURES = [arp_spoof_mitm, arp_campus_nic_change, arp_vrrp_failover, arp_proxy_router, arp_dynamic_pool,
            arp_nd_spoof, arp_dhcp_registered_ack, arp_nd_nic_change, arp_nd_near_misses]

"""ARP captures of issue 27's calibration: what other people's captures showed the ARP rules, and the near-misses.

- Corrupted frames read as other hosts: in a damaged or fuzzed capture,
  ARP frames whose sender MAC lost a bit or three "claim" the real host's
  address. A small office LAN, 10.71.0.0/24 behind the gateway 10.71.0.1
  (00:0c:29:20:a8:7f), resolving each other as hosts do; then the same LAN
  with some frames bit-flipped (deterministic flips: 1 to 3 bits of the ARP
  sender MAC, and in some frames a bit of the ARP hardware type or the
  group bit of the Ethernet source too). arp-corrupted-many: 30 of the
  gateway's frames and a few of the hosts', dozens of "MACs" for
  10.71.0.1; arp-corrupted-one-copy: one damaged reply of a host, two
  "MACs" for its address. Real networks drop such frames at the FCS.
- Near-miss: arp-near-mac-conflict: a second device whose MAC is one bit
  from the host's (the next port of one dual-port NIC, cloned with the
  host's static address) answering for 10.71.0.20 again and again, from
  clean frames: a real conflict that keeps its severity, however close the
  MACs.
- One spoofed ARP claiming the gateway (arp-cain-gateway): Cain & Abel's
  ARP poisoning as one operator tried it once: a reply telling a host
  that 10.71.0.1 is at the attacker's MAC, and a request claiming
  10.71.0.1 from it, while the attacker ARPs with its own address
  elsewhere. The gateway answered ARP 15 minutes earlier and carries the
  hosts' web traffic (and their DNS queries to 10.71.0.1) all along.
- A normal keepalived start-up, failover and preemption (pattern 4 of the
  issue): two routers, VRRP VRID 72 for 10.72.0.100 and .101. Each new
  master sends keepalived's gratuitous ARPs for both addresses:
  vrrp_garp_master_repeat (5) at the transition and as many
  vrrp_garp_master_delay (5 s) later; after the preemption the old master,
  slow to yield, advertises once more and the new one answers that
  lower-priority advertisement with another 5 + 5
  (vrrp_garp_lower_prio_repeat and _delay default to the master's
  values). 40 GARPs per address within 60 s, every set tied to a
  transition. vrrp-keepalived-vmac: with use_vmac, advertisements and GARPs
  from the virtual MAC 00:00:5e:00:01:48; vrrp-keepalived-own-macs: as
  keepalived runs by default, each router advertising and announcing from
  its own MAC, so the addresses move from one MAC to the other and back.
- Near-miss: vrrp-garp-without-transition: the same pair, one master all
  along, and 15 GARPs per address from the virtual MAC 40 s after the
  master's start, with no transition to announce.
"""
from __future__ import annotations

import random
from pathlib import Path

from common import tcp_session, write_capture
from scapy.all import ARP, DNS, DNSQR, IP, UDP, Ether
from scapy.layers.vrrp import VRRP

NET = "10.71.0"
GATEWAY = ("00:0c:29:20:a8:7f", f"{NET}.1")
HOSTS = [(f"00:0c:29:4b:10:{k:02x}", f"{NET}.{k}") for k in (10, 11, 12, 13)]
PRINTER = ("00:1b:a9:33:02:14", f"{NET}.20")
PRINTER_TWIN = ("00:1b:a9:33:02:15", f"{NET}.20")     # one bit away: the next port of the same card
ATTACKER = ("00:13:ce:5a:71:66", f"{NET}.66")
WEB = [f"203.0.113.{k}" for k in range(1, 17)]
BROADCAST = "ff:ff:ff:ff:ff:ff"
ZERO = "00:00:00:00:00:00"
QUIET = [{"rule": "*", "severity_above": "low"}]

# where the fields sit in an untagged Ethernet ARP frame (RFC 826 after the 14-byte Ethernet header)
ETHER_SOURCE_AT, ARP_HARDWARE_AT, ARP_SENDER_MAC_AT = 6, 14, 22


def _request(asker, ip):
    return Ether(src=asker[0], dst=BROADCAST) / ARP(op=1, hwsrc=asker[0], psrc=asker[1], hwdst=ZERO, pdst=ip)


def _reply(sender, target):
    return Ether(src=sender[0], dst=target[0]) / ARP(op=2, hwsrc=sender[0], psrc=sender[1], hwdst=target[0],
                                                     pdst=target[1])


def _gratuitous(sender):
    return Ether(src=sender[0], dst=BROADCAST) / ARP(op=1, hwsrc=sender[0], psrc=sender[1], hwdst=ZERO,
                                                     pdst=sender[1])


def _resolve(asker, answerer, t):
    return [(t, _request(asker, answerer[1])), (t + 0.0004, _reply(answerer, asker))]


def _office(duration: float) -> list:
    """A quiet office LAN's ARP: the gateway announces itself, every host resolves the gateway every 30 s and the
    printer every 60 s, the gateway resolves each host every 40 s."""
    packets = [(0.2, _gratuitous(GATEWAY))]
    for k, host in enumerate(HOSTS):
        for t in range(0, int(duration), 30):
            packets += _resolve(host, GATEWAY, t + 1.0 + 0.7 * k)
        for t in range(0, int(duration), 60):
            packets += _resolve(host, PRINTER, t + 11.0 + 0.9 * k)
        for t in range(0, int(duration), 40):
            packets += _resolve(GATEWAY, host, t + 21.0 + 1.1 * k)
    return packets


def _flip(pkt, at_bits: list[int]):
    """The frame with the given bits flipped (bit 0 = the first byte's top bit), re-read as Ethernet."""
    raw = bytearray(bytes(pkt))
    for bit in at_bits:
        raw[bit // 8] ^= 0x80 >> (bit % 8)
    damaged = Ether(bytes(raw))
    assert bytes(damaged) == bytes(raw)
    return damaged


def _sender_mac_bits(rng: random.Random, count: int) -> list[int]:
    """`count` distinct bits of the ARP sender MAC, never its first byte's group or local bit (a copy with the
    group bit set is no claim; one with the local bit flipped is a copy all the same, but keep them alike)."""
    first = ARP_SENDER_MAC_AT * 8
    return [first + bit for bit in rng.sample(range(8, 48), count)]


def _damage(pkt, rng: random.Random, extra: str):
    """A copy of an ARP frame hit by 1 to 3 bit errors in its sender MAC, and by one more elsewhere: in the ARP
    hardware type ("hardware"), the Ethernet source's group bit ("group"), or nowhere else ("")."""
    bits = _sender_mac_bits(rng, rng.randint(1, 3))
    if extra == "hardware":
        bits.append(ARP_HARDWARE_AT * 8 + 14)            # hardware type 1 -> 3
    elif extra == "group":
        bits.append(ETHER_SOURCE_AT * 8 + 7)             # the I/G bit of the source address
    return _flip(pkt, bits)


def _entry(path: Path, count: int, what: str, must_yield: list, must_not_yield: list) -> dict:
    return {"file": path.name, "packets": count, "what": what, "must_yield": must_yield,
            "must_not_yield": must_not_yield}


def arp_corrupted_many(out_dir: Path) -> dict:
    path = out_dir / "arp-corrupted-many.pcapng"
    rng = random.Random(2701)
    packets = _office(240.0)
    # the damaged frames: 30 of the gateway's claims of its address, 6 of the hosts'
    gateway = [k for k, (_, pkt) in enumerate(packets) if pkt[ARP].psrc == GATEWAY[1]]
    hosts = [k for k, (_, pkt) in enumerate(packets) if pkt[ARP].psrc in {h[1] for h in HOSTS}]
    for n, k in enumerate(sorted(rng.sample(gateway, 30) + rng.sample(hosts, 6))):
        t, pkt = packets[k]
        packets[k] = (t, _damage(pkt, rng, ("hardware", "", "group")[n % 3]))
    count = write_capture(path, packets)
    return _entry(path, count,
                  "corrupted frames read as other hosts: an office LAN's ARP in which 36 frames lost 1 to 3 bits of "
                  "their sender MAC (and some a bit of the hardware type or the source's group bit): 30 'MACs' "
                  "claim the gateway's address, none of them a host",
                  [{"rule": "arp-spoof", "severity_at_least": "low"}, {"rule": "garp-war", "severity_at_least": "low"}],
                  QUIET)


def arp_corrupted_one_copy(out_dir: Path) -> dict:
    path = out_dir / "arp-corrupted-one-copy.pcapng"
    rng = random.Random(2702)
    packets = _office(240.0)
    # one of the second host's replies to the gateway, two bits of its sender MAC and one of its hardware type lost
    host = HOSTS[1]
    replies = [k for k, (_, pkt) in enumerate(packets) if pkt[ARP].op == 2 and pkt[ARP].hwsrc == host[0]]
    k = replies[len(replies) // 2]
    t, pkt = packets[k]
    packets[k] = (t, _flip(pkt, [*_sender_mac_bits(rng, 2), ARP_HARDWARE_AT * 8 + 14]))
    count = write_capture(path, packets)
    return _entry(path, count,
                  "corrupted frames read as other hosts: one reply of a host lost two bits of its sender MAC and one "
                  "of its hardware type: a second 'MAC' for the host's address in one frame",
                  [{"rule": "arp-spoof", "severity_at_least": "low"}, {"rule": "garp-war", "severity_at_least": "low"}],
                  QUIET)


def arp_near_mac_conflict(out_dir: Path) -> dict:
    path = out_dir / "arp-near-mac-conflict.pcapng"
    packets = _office(240.0)
    # the printer's twin, the card's second port configured with the same static address, answers too: each
    # answers the hosts' requests in turn, from clean frames
    for n, k in enumerate([k for k, (_, pkt) in enumerate(packets)
                           if pkt[ARP].op == 2 and pkt[ARP].hwsrc == PRINTER[0]]):
        if n % 2:
            t, pkt = packets[k]
            packets[k] = (t, _reply(PRINTER_TWIN, (pkt[ARP].hwdst, pkt[ARP].pdst)))
    packets += [(100.0 + 40 * k, _gratuitous(PRINTER_TWIN)) for k in range(3)]
    count = write_capture(path, packets)
    return _entry(path, count,
                  "near-miss of the corrupted copies: two devices with MACs one bit apart (two ports of one card) "
                  "answer for one static address in turn, from clean frames: a real conflict",
                  [{"rule": "arp-spoof", "severity_at_least": "medium"},
                   {"rule": "garp-war", "severity_at_least": "medium"}],
                  [{"rule": "arp-spoof", "severity_above": "medium"}])


def arp_cain_gateway(out_dir: Path) -> dict:
    path = out_dir / "arp-cain-gateway.pcapng"
    rng = random.Random(2704)
    packets = [(0.5, _request(HOSTS[0], GATEWAY[1])), (0.5004, _reply(GATEWAY, HOSTS[0]))]
    # the hosts browse through the gateway and ask it for names, for 20 minutes
    for k, t in enumerate(range(5, 1200, 75)):
        host = HOSTS[k % len(HOSTS)]
        packets += _web(host, WEB[k % len(WEB)], t, rng, 40000 + k)
        packets.append((t + 0.5, Ether(src=host[0], dst=GATEWAY[0]) / IP(src=host[1], dst=GATEWAY[1])
                        / UDP(sport=53000 + k, dport=53) / DNS(rd=1, qd=DNSQR(qname=f"www{k}.example.org"))))
    # the attacker's machine resolves the hosts with its own address, now and then
    packets += _resolve(ATTACKER, HOSTS[2], 300.0) + _resolve(ATTACKER, HOSTS[3], 700.0)
    # 15 minutes after the gateway's last ARP: one reply and one request claiming the gateway's address
    packets += [(930.0, _reply((ATTACKER[0], GATEWAY[1]), HOSTS[1])),
                (930.2, _request((ATTACKER[0], GATEWAY[1]), HOSTS[1][1])),
                (930.2004, _reply(HOSTS[1], (ATTACKER[0], GATEWAY[1])))]
    count = write_capture(path, packets)
    return _entry(path, count,
                  "one spoofed ARP claiming the gateway (Cain & Abel): a reply and a request from a MAC that ARPs "
                  "with its own address elsewhere tell a host that the gateway's address is at its MAC, while the "
                  "hosts' traffic reaches the gateway at another",
                  [{"rule": "arp-spoof", "severity_at_least": "low"}], QUIET)


def _web(host, server, t, rng, sport):
    eth, eth_r = Ether(src=host[0], dst=GATEWAY[0]), Ether(src=GATEWAY[0], dst=host[0])
    return tcp_session(eth, eth_r, IP(src=host[1], dst=server), IP(src=server, dst=host[1]), sport, 443, t,
                       [(b"GET / HTTP/1.1\r\n\r\n", b"HTTP/1.1 200 OK\r\n\r\n" + bytes(300))], rng)


VRID = 72
VMAC = f"00:00:5e:00:01:{VRID:02x}"             # RFC 5798 section 7.3
VIPS = ["10.72.0.100", "10.72.0.101"]
R1 = ("52:54:00:72:00:02", "10.72.0.2", 150)     # MAC, address, priority
R2 = ("52:54:00:72:00:03", "10.72.0.3", 100)
VRRP_CLIENT = ("52:54:00:72:00:32", "10.72.0.50")
GARP_REPEAT, GARP_DELAY_S = 5, 5.0               # keepalived vrrp_garp_master_repeat, vrrp_garp_master_delay


def _master_down_s(priority: int) -> float:
    """RFC 3768 section 6.1 with a 1 s advertisement interval: 3 x 1 s + (256 - priority)/256 s."""
    return 3 + (256 - priority) / 256


def _keepalived_advert(router, vmac: bool):
    """A VRRPv2 advertisement of VRID 72 by `router`, from the virtual MAC (use_vmac) or its own."""
    return (Ether(src=VMAC if vmac else router[0], dst="01:00:5e:00:00:12")
            / IP(src=router[1], dst="224.0.0.18", ttl=255, proto=112)
            / VRRP(version=2, vrid=VRID, priority=router[2], addrlist=VIPS, adv=1))


def _keepalived_garp(mac: str, address: str):
    """keepalived's gratuitous ARP (vrrp/vrrp_arp.c): a request from `mac` for `address`, target MAC all ones."""
    return Ether(src=mac, dst=BROADCAST) / ARP(op=1, hwsrc=mac, psrc=address, hwdst=BROADCAST, pdst=address)


def _garp_sets(mac: str, t: float) -> list:
    """One set of GARP_REPEAT gratuitous ARPs per virtual address at `t` and another GARP_DELAY_S later."""
    return [(t + delay + 0.002 * k, _keepalived_garp(mac, address))
            for delay in (0.0, GARP_DELAY_S) for k in range(GARP_REPEAT) for address in VIPS]


def _keepalived(vmac: bool) -> list:
    """Start-up, failover and preemption of the pair: who advertises when, and the GARPs of each transition."""
    packets = []
    up = _master_down_s(R1[2])                       # both start as backup; R1 times out first
    crash = 29.41                                    # R1's last advertisement: it dies silently
    takeover = crash + _master_down_s(R2[2])         # R2 hears nothing for its Master_Down_Interval
    back = 50.0                                      # R1 restarts as backup and, preempting, ignores R2
    preempt = back + _master_down_s(R1[2])
    packets += [(up + k, _keepalived_advert(R1, vmac)) for k in range(int(crash - up) + 1)]
    # R2 is slow to yield: one more advertisement after R1's first, which R1 answers with lower-priority GARPs
    packets += [(takeover + k, _keepalived_advert(R2, vmac)) for k in range(int(preempt - takeover) + 2)]
    packets += [(preempt + k, _keepalived_advert(R1, vmac)) for k in range(int(90 - preempt))]
    last_r2 = takeover + int(preempt - takeover) + 1
    for router, t in ((R1, up), (R2, takeover), (R1, preempt), (R1, last_r2 + 0.01)):
        packets += _garp_sets(VMAC if vmac else router[0], t)
    # a client resolves the first address every 10 s; whoever is master answers
    for t in range(5, 90, 10):
        master = R1 if t < crash or t > preempt else (R2 if t > takeover else None)
        packets.append((t + 0.3, _request(VRRP_CLIENT, VIPS[0])))
        if master is not None:
            packets.append((t + 0.3004, _reply((VMAC if vmac else master[0], VIPS[0]), VRRP_CLIENT)))
    return packets


def vrrp_keepalived_vmac(out_dir: Path) -> dict:
    path = out_dir / "vrrp-keepalived-vmac.pcapng"
    count = write_capture(path, _keepalived(vmac=True))
    return _entry(path, count,
                  "near-miss: keepalived start-up, failover and preemption with use_vmac: 40 gratuitous ARPs per "
                  "virtual address within 60 s from the virtual MAC, each set following a master change",
                  [{"rule": "vrrp-dual-master", "severity_at_least": "info"}],
                  [{"rule": "*", "severity_above": "info"}])


def vrrp_keepalived_own_macs(out_dir: Path) -> dict:
    path = out_dir / "vrrp-keepalived-own-macs.pcapng"
    count = write_capture(path, _keepalived(vmac=False))
    return _entry(path, count,
                  "near-miss: keepalived start-up, failover and preemption as it runs by default, each master "
                  "advertising and announcing the virtual addresses from its own MAC: the addresses move to the "
                  "backup and back with each set of GARPs (a failover and a failback: arp-spoof's low)",
                  [{"rule": "vrrp-dual-master", "severity_at_least": "info"}],
                  [{"rule": "garp-war", "severity_above": "info"}, {"rule": "*", "severity_above": "low"}])


def vrrp_garp_without_transition(out_dir: Path) -> dict:
    path = out_dir / "vrrp-garp-without-transition.pcapng"
    up = _master_down_s(R1[2])
    packets = [(up + k, _keepalived_advert(R1, True)) for k in range(87)] + _garp_sets(VMAC, up)
    packets += [(up + 40 + 0.002 * k, _keepalived_garp(VMAC, address)) for k in range(15) for address in VIPS]
    count = write_capture(path, packets)
    return _entry(path, count,
                  "near-miss of the keepalived transitions: one master all along, and 15 gratuitous ARPs per virtual "
                  "address from the virtual MAC 40 s after its start, with no transition to announce",
                  [{"rule": "garp-war", "severity_at_least": "medium"}],
                  [{"rule": "garp-war", "severity_above": "medium"}])


CAPTURES = [arp_corrupted_many, arp_corrupted_one_copy, arp_near_mac_conflict, arp_cain_gateway, vrrp_keepalived_vmac,
            vrrp_keepalived_own_macs, vrrp_garp_without_transition]

"""Rogue DHCP server captures (seed 004): a second server handing out its own router and DNS, and near-misses.

An office VLAN, 10.50.0.0/24, whose DHCP server 10.50.0.1 (also the
router) hands out 10.50.0.100-199 with router 10.50.0.1 and DNS 10.50.0.53
for 3,600 s. Clients come and go every few seconds and run the DORA
exchange (RFC 2131 section 3.1: DISCOVER, OFFER, REQUEST, ACK).

- rogue server: from 20 s a host (10.50.0.66, a home router plugged in by
  its LAN port) answers the same DISCOVERs, offering 192.168.1.x with itself
  as router and DNS; some clients take its offer;
- DHCPv6 rogue: the same on IPv6, a second server (its own DUID) advertising
  another DNS server next to the real one;
- near-misses: one server's normal exchanges; a relay agent (the VLAN's
  router) forwarding a remote server's offers, its own address in giaddr,
  both legs captured on their VLANs; a failover pair (two servers with the
  same router and DNS) that the site file lists (medium without it).
"""
from __future__ import annotations

from pathlib import Path

from common import write_capture
from scapy.all import IP, UDP, Dot1Q, Ether, IPv6
from scapy.layers.dhcp import BOOTP, DHCP
from scapy.layers.dhcp6 import (
    DUID_LL,
    DHCP6_Advertise,
    DHCP6_Reply,
    DHCP6_Request,
    DHCP6_Solicit,
    DHCP6OptClientId,
    DHCP6OptDNSServers,
    DHCP6OptIA_NA,
    DHCP6OptIAAddress,
    DHCP6OptServerId,
)

SERVER = ("02:00:5e:50:00:01", "10.50.0.1")
ROGUE = ("02:00:5e:50:00:66", "10.50.0.66")
PEER = ("02:00:5e:50:00:02", "10.50.0.2")            # the failover partner
OFFICE = {"router": "10.50.0.1", "name_server": "10.50.0.53"}
HOME = {"router": "192.168.1.1", "name_server": "192.168.1.1"}
CLIENTS = 8
QUIET = ["echo-loop", "routing-loop", "rip-trigger", "rip-announce"]


def _client(k: int) -> str:
    return f"02:00:5e:51:00:{k:02x}"


def _bootp(op, mac, xid, yiaddr="0.0.0.0", giaddr="0.0.0.0", hops=0):
    return BOOTP(op=op, chaddr=bytes.fromhex(mac.replace(":", "")) + bytes(10), xid=xid, yiaddr=yiaddr,
                 giaddr=giaddr, hops=hops, flags=0x8000)


def _request(mac, xid, kind, extra=(), vlan=None):
    """A client's broadcast DISCOVER or REQUEST."""
    eth = Ether(src=mac, dst="ff:ff:ff:ff:ff:ff")
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    return (eth / IP(src="0.0.0.0", dst="255.255.255.255") / UDP(sport=68, dport=67) / _bootp(1, mac, xid)
            / DHCP(options=[("message-type", kind), *extra, "end"]))


def _reply(server, client_mac, xid, kind, yiaddr, offer, server_id=None, giaddr="0.0.0.0", dst=None, vlan=None,
           dport=68):
    """A server's (or a relay's) OFFER or ACK, broadcast to the client unless `dst` says otherwise."""
    mac, address = server
    eth = Ether(src=mac, dst="ff:ff:ff:ff:ff:ff" if dst is None else dst[0])
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    options = [("message-type", kind), ("server_id", server_id or address), ("lease_time", 3600),
               ("subnet_mask", "255.255.255.0"), ("router", offer["router"]),
               ("name_server", offer["name_server"]), "end"]
    return (eth / IP(src=address, dst="255.255.255.255" if dst is None else dst[1]) / UDP(sport=67, dport=dport)
            / _bootp(2, client_mac, xid, yiaddr=yiaddr, giaddr=giaddr, hops=1 if giaddr != "0.0.0.0" else 0)
            / DHCP(options=options))


def _dora(t, k, server, offer, pool="10.50.0", answers=()):
    """Client k's DORA with `server`; `answers` are other servers (server, offer, pool, delay) offering too."""
    mac, xid = _client(k), 0x5000 + k
    yiaddr = f"{pool}.{100 + k}"
    packets = [(t, _request(mac, xid, "discover")), (t + 0.010, _reply(server, mac, xid, "offer", yiaddr, offer))]
    for other, other_offer, other_pool, delay in answers:
        packets.append((t + delay, _reply(other, mac, xid, "offer", f"{other_pool}.{100 + k}", other_offer)))
    packets.append((t + 0.050, _request(mac, xid, "request", [("requested_addr", yiaddr),
                                                             ("server_id", server[1])])))
    packets.append((t + 0.060, _reply(server, mac, xid, "ack", yiaddr, offer)))
    return packets


def _manifest(path, count, what, yields, quiet) -> dict:
    return {"file": path.name, "packets": count, "what": what, "must_yield": yields,
            "must_not_yield": [{"rule": rule, "severity_above": "info"} for rule in quiet]}


def dhcp_rogue_server(out_dir: Path) -> dict:
    path = out_dir / "dhcp-rogue-server.pcapng"
    packets = []
    for k in range(CLIENTS):
        t = k * 5.0
        # from 20 s the rogue answers too, 2 ms faster than the real server: some clients take its offer
        rogue = [(ROGUE, HOME, "192.168.1", 0.008)] if t >= 20 else []
        packets += _dora(t, k, SERVER, OFFICE, answers=rogue)
    count = write_capture(path, packets)
    return _manifest(path, count, "rogue DHCPv4 server: a host answers the office's DISCOVERs next to the real "
                                  "server, offering itself as router and DNS (high without the site file)",
                     [{"rule": "rogue-dhcp", "severity_at_least": "high"}], QUIET)


def dhcp_single_server(out_dir: Path) -> dict:
    path = out_dir / "dhcp-single-server.pcapng"
    packets = []
    for k in range(CLIENTS):
        packets += _dora(k * 5.0, k, SERVER, OFFICE)
    # a renewal at T1 (RFC 2131 section 4.4.5): unicast REQUEST, unicast ACK
    mac, address = _client(0), "10.50.0.100"
    packets.append((60.0, Ether(src=mac, dst=SERVER[0]) / IP(src=address, dst=SERVER[1]) / UDP(sport=68, dport=67)
                    / BOOTP(op=1, chaddr=bytes.fromhex(mac.replace(":", "")) + bytes(10), xid=0x5100,
                            ciaddr=address) / DHCP(options=[("message-type", "request"), "end"])))
    packets.append((60.01, _reply(SERVER, mac, 0x5100, "ack", address, OFFICE, dst=(mac, address))))
    count = write_capture(path, packets)
    return _manifest(path, count, "near-miss: one DHCPv4 server's exchanges with eight clients and a renewal",
                     [{"rule": "rogue-dhcp", "severity_at_least": "info"}], ["rogue-dhcp", *QUIET])


RELAY = ("02:00:5e:60:0a:01", "10.60.10.1")         # the router, relay agent on VLAN 10
RELAY_UPLINK = ("02:00:5e:60:46:01", "10.70.0.1")   # the same router on the servers' VLAN 70
REMOTE = ("02:00:5e:70:00:05", "10.70.0.5")         # the DHCP server on VLAN 70
CAMPUS = {"router": "10.60.10.1", "name_server": "10.70.0.53"}


def dhcp_relay(out_dir: Path) -> dict:
    path = out_dir / "dhcp-relay.pcapng"
    packets = []
    for k in range(4):
        t, mac, xid = k * 5.0, _client(k), 0x6000 + k
        yiaddr = f"10.60.10.{100 + k}"
        # the client's broadcast on VLAN 10; the relay unicasts it to the server from VLAN 70 (RFC 1542)
        packets.append((t, _request(mac, xid, "discover", vlan=10)))
        forward = (Ether(src=RELAY_UPLINK[0], dst=REMOTE[0]) / Dot1Q(vlan=70)
                   / IP(src=RELAY_UPLINK[1], dst=REMOTE[1]) / UDP(sport=67, dport=67)
                   / _bootp(1, mac, xid, giaddr=RELAY[1], hops=1) / DHCP(options=[("message-type", "discover"),
                                                                               "end"]))
        packets.append((t + 0.002, forward))
        for kind, dt in (("offer", 0.010), ("ack", 0.060)):
            # the server answers the relay's giaddr; the relay broadcasts the answer on VLAN 10 from its own address
            packets.append((t + dt, _reply(REMOTE, mac, xid, kind, yiaddr, CAMPUS, giaddr=RELAY[1],
                                           dst=(RELAY_UPLINK[0], RELAY[1]), vlan=70, dport=67)))
            packets.append((t + dt + 0.002, _reply(RELAY, mac, xid, kind, yiaddr, CAMPUS, server_id=REMOTE[1],
                                                   giaddr=RELAY[1], vlan=10)))
    count = write_capture(path, packets)
    return _manifest(path, count, "near-miss: a relay agent forwards a remote server's offers on VLAN 10 from its "
                                  "own address (giaddr), the server's leg captured on VLAN 70: one server",
                     [{"rule": "rogue-dhcp", "severity_at_least": "info"}], ["rogue-dhcp", *QUIET])


def dhcp_failover(out_dir: Path) -> dict:
    path = out_dir / "dhcp-failover.pcapng"
    packets = []
    for k in range(CLIENTS):
        # ISC dhcpd failover: both peers answer (load balancing splits by client hash, RFC 3074); each client
        # continues with the first offer, from either peer
        first, second = (SERVER, PEER) if k % 2 == 0 else (PEER, SERVER)
        packets += _dora(k * 5.0, k, first, OFFICE, answers=[(second, OFFICE, "10.50.0", 0.015)])
    count = write_capture(path, packets)
    return _manifest(path, count, "near-miss with the site file: a failover pair offering the same router and DNS; "
                                  "medium without dhcp_servers, info when the site file lists both",
                     [{"rule": "rogue-dhcp", "severity_at_least": "medium"}], QUIET)


V6_SERVER = ("02:00:5e:50:00:01", "fe80::1")
V6_ROGUE = ("02:00:5e:50:00:66", "fe80::66")


def _v6(kind, source, dst_mac, dst, xid, client_duid, server=None, address=None, dns=None):
    mac, ip = source
    sport, dport = (546, 547) if server is None else (547, 546)
    message = kind(trid=xid) / DHCP6OptClientId(duid=client_duid)
    if server is not None:
        message = message / DHCP6OptServerId(duid=DUID_LL(lladdr=server[0]))
    message = message / DHCP6OptIA_NA(iaid=1, T1=1800, T2=2880,
                                      ianaopts=[DHCP6OptIAAddress(addr=address, preflft=3600, validlft=7200)]
                                      if address else [])
    if dns is not None:
        message = message / DHCP6OptDNSServers(dnsservers=[dns])
    return Ether(src=mac, dst=dst_mac) / IPv6(src=ip, dst=dst) / UDP(sport=sport, dport=dport) / message


def dhcp6_rogue_server(out_dir: Path) -> dict:
    path = out_dir / "dhcp6-rogue-server.pcapng"
    packets = []
    for k in range(6):
        t, mac, xid = k * 5.0, _client(k), 0x600000 + k
        client = (mac, f"fe80::5e:51ff:fe00:{k:x}")
        duid = DUID_LL(lladdr=mac)
        address = f"2001:db8:50::{100 + k:x}"
        packets.append((t, _v6(DHCP6_Solicit, client, "33:33:00:01:00:02", "ff02::1:2", xid, duid)))
        packets.append((t + 0.010, _v6(DHCP6_Advertise, V6_SERVER, mac, client[1], xid, duid, V6_SERVER, address,
                                       "2001:db8:50::53")))
        if t >= 10:
            packets.append((t + 0.008, _v6(DHCP6_Advertise, V6_ROGUE, mac, client[1], xid, duid, V6_ROGUE,
                                           f"2001:db8:66::{100 + k:x}", "2001:db8:66::1")))
        packets.append((t + 0.050, _v6(DHCP6_Request, client, "33:33:00:01:00:02", "ff02::1:2", xid + 0x100, duid)
                        ))
        packets.append((t + 0.060, _v6(DHCP6_Reply, V6_SERVER, mac, client[1], xid + 0x100, duid, V6_SERVER,
                                       address, "2001:db8:50::53")))
    count = write_capture(path, packets)
    return _manifest(path, count, "rogue DHCPv6 server: a second server (its own DUID) advertises addresses and "
                                  "another DNS server next to the real one (high without the site file)",
                     [{"rule": "rogue-dhcp", "severity_at_least": "high"}], QUIET)


CAPTURES = [dhcp_rogue_server, dhcp_single_server, dhcp_relay, dhcp_failover, dhcp6_rogue_server]

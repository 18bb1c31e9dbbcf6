"""Who says which IP address is at which MAC: the observations the IP-MAC rules share.

An observation is one (link, IP, MAC, how) seen on the capture, summed over
its packets: how many, when first and last, in which frames. `how` says
what the packet showed:

- an ARP reply's sender pair (RFC 826), flagged unsolicited when no request
  from the reply's target asked for the sender's address within
  `UNSOLICITED_WINDOW_S` before it;
- a gratuitous ARP's sender pair (sender and target protocol address equal,
  request or reply: RFC 5227 announcements too);
- an ARP request's sender pair (its target pair asks, it claims nothing);
- an ARP reply's target pair: the requester as the replier knows it;
- an IPv4 packet's source pair (src_ip, src_mac) and, for finding the
  gateway, its destination pair (dest_ip, dest_mac);
- on request (`nd`), IPv6 Neighbor Discovery (RFC 4861), the IPv6 side of
  the same: a Neighbor Advertisement's target and its target link-layer
  address option (else the Ethernet source), an answer when sent to one
  host, unsolicited when its S flag is clear, an announcement when sent
  unsolicited to a multicast group (RFC 4861 section 7.2.6); a Neighbor
  Solicitation's source and its source link-layer address option (else
  the Ethernet source), not the unspecified source of Duplicate Address
  Detection. Only what hosts accept counts (hop limit 255, code 0, a
  checksum that verifies where the whole message was captured, options
  well formed: RFC 4861 sections 7.1.1, 7.1.2), and an advertisement with
  the O flag clear (a proxy's, an anycast address's: RFC 4861 section
  7.2.8) does not change a cached address, so it counts no change and
  is no claim that a later one changes. Link-local addresses (fe80::/10)
  are judged like the others, on their link: Neighbor Discovery spoofing
  takes the router's fe80:: address first;
- on request (`dhcp`), a DHCPv4 ACK's pair (yiaddr, chaddr): the server
  gave the address to the MAC. A relayed ACK (giaddr set) is captured on
  the server's link, not the client's, so its link is left unknown (0,
  the untagged link) rather than the server's VLAN; ACKs count no change.

The ARP observations skip what Wireshark's `check_for_duplicate_addresses`
(epan/dissectors/packet-arp.c) skips: group (multicast, broadcast) and zero
MACs, the address 0.0.0.0 of RFC 5227 probes, and the target pair of a
request. Each observation of an ARP kind also counts its `changes`: the
claims of that IP that followed, within `CONFLICT_WINDOW_S`, a claim of the
same IP by another MAC (arpwatch's "changed ethernet address", Wireshark's
"duplicate IP address"). A sender whose Ethernet source differs from its
ARP sender MAC is counted as `mismatched` (arpwatch's "ethernet mismatch"),
unless the ARP sender MAC is a virtual router's (VRRP, HSRP, GLBP), which
routers may announce from their own MAC. Each ARP observation also counts
its `damaged` frames and ORs their `damage` (DAMAGE_* bits): what a frame
shows that no station sends on purpose (an Ethernet address a bit or two
from the ARP one, a group source, an unknown hardware type, a link-layer
error the capture recorded). A frame that lost bits on its way to the
capture keeps the shape of the frame it was, so its ARP sender MAC may be a
real host's with a bit or two flipped, "claiming" that host's address: the
rules read these columns to tell such copies from other hosts
(`corrupted_copies`).

Addresses are the packet schema's 128-bit (hi, lo) halves, IPv4 mapped,
and `how` is a small code that the rules read through the tuples of what
each code tells (ANSWERS, ANNOUNCEMENTS, QUESTIONS, ECHOES, TRAFFIC), so
another input (an IPv6 Neighbor Advertisement's target and link-layer
address, a DHCP ACK's chaddr and yiaddr) adds rows of codes of its own to
the same table and those codes to the tuples.

State (mergeable): the observation rows, folded like the other detectors'
tables and bounded (the IP rows to `IP_ROWS_PER_MAC` addresses per MAC and
role, all rows to `MAX_ROWS`, the rows first seen kept); the ARP requests
of the last `UNSOLICITED_WINDOW_S`, which a reply in the next batch may
answer; and the latest and earliest claim of each IP: the next batch's
first claim of it follows the latest, and when two partitions in time order
merge, the later one's earliest follows the earlier one's latest. A
partition that does not begin the capture keeps aside the replies of its
first UNSOLICITED_WINDOW_S that it found unsolicited (at most
MAX_CARRIED_REQUESTS): merge() asks the earlier partition's last requests
whether they answered them, as one pass does. Partitions that overlap in
time miss the change at their border.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cpu import kernel
from ..decode import app
from ..decode.addr import mac_to_str
from ..decode.app.nd import ND_HOP_LIMIT, NEIGHBOR_ADVERTISEMENT, NEIGHBOR_SOLICITATION
from ..schema import (
    EPB_ERRORS_SHIFT,
    L_ARP,
    L_DST_MAC,
    L_ETHERTYPE,
    L_IP4,
    L_QINQ,
    L_SRC_MAC,
    L_TUNNEL,
    L_VLAN,
    PacketBatch,
)
from ..units import NS, plural
from .hashing import mix64
from .state import empty_table, fold_rows, take_rows

ARP_REQUEST, ARP_REPLY = 1, 2                  # RFC 826 opcodes (RARP's 3 and 4 are another protocol)
ETHERTYPE_ARP = 0x0806
DHCP_ACK_TYPE, BOOTP_REPLY = 5, 2              # RFC 2132 section 9.6 message type; RFC 951 op
IPV4_MAPPED = np.uint64(0xFFFF << 32)          # ::ffff:0:0/96, how the schema holds IPv4

# what an observation saw (the `how` column)
REPLY, GRATUITOUS, REQUEST, REPLY_TARGET, IP_SOURCE, IP_DESTINATION = 1, 2, 3, 4, 5, 6
ADVERTISEMENT, MULTICAST_ADVERTISEMENT, SOLICITATION, DHCP_ACK = 7, 8, 9, 10
HOW_NAMES = {REPLY: "ARP reply", GRATUITOUS: "gratuitous ARP", REQUEST: "ARP request sender",
             REPLY_TARGET: "ARP reply target", IP_SOURCE: "IPv4 source", IP_DESTINATION: "IPv4 destination",
             ADVERTISEMENT: "Neighbor Advertisement",
             MULTICAST_ADVERTISEMENT: "unsolicited multicast Neighbor Advertisement",
             SOLICITATION: "Neighbor Solicitation sender", DHCP_ACK: "DHCP ACK"}
# What each kind tells the rules, which read these tuples, never the codes.
ANSWERS = (REPLY, ADVERTISEMENT)                # "the address is at my MAC", said to one host (maybe unasked)
ANNOUNCEMENTS = (GRATUITOUS, MULTICAST_ADVERTISEMENT)   # the same, said to everyone
QUESTIONS = (REQUEST, SOLICITATION)             # the sender uses the address while asking for another
ECHOES = (REPLY_TARGET,)                # the asker's pair, as the answer repeats it
SENDERS = (*ANSWERS, *ANNOUNCEMENTS, *QUESTIONS)       # pairs a MAC speaks for itself
NEIGHBOR_KINDS = (*SENDERS, *ECHOES)    # what Wireshark compares for duplicate addresses
TRAFFIC = (IP_SOURCE, IP_DESTINATION)   # pairs of IP packets, bounded per MAC
LEASES = (DHCP_ACK,)                    # a DHCP server giving the address to the MAC: no claim on the wire
ND_KINDS = (ADVERTISEMENT, MULTICAST_ADVERTISEMENT, SOLICITATION)     # IPv6's (the rules' messages name them)

# A reply is an answer when a request from its target asked for its sender address this long before it:
# a host answers within milliseconds, and a spoofer sends without being asked.
UNSOLICITED_WINDOW_S = 1.0
# Two MACs claiming one IP this close in time contradict each other (ours): longer than the ARP cache
# lifetimes of common hosts (Linux reachable time 15-45 s, Windows 15-45 s, Cisco 4 h aside), shorter
# than a DHCP lease handed to another host after the first left.
CONFLICT_WINDOW_S = 600.0
# IP addresses kept per MAC and role (source, destination): a host has a few; a router forwards for
# thousands, and these are enough to see that (16 distinct sources make a router).
IP_ROWS_PER_MAC = 32
# All observation rows: a large L2 domain has tens of thousands of hosts; floods of forged pairs keep the
# rows first seen and count the rest (`dropped`).
MAX_ROWS = 262_144
# Batches' rows are folded into the table together, once this many rows or batches wait (a bound on the
# memory they hold: each batch adds at most a row per distinct pair it carries).
FOLD_EVERY_ROWS = 65_536
FOLD_EVERY_BATCHES = 16
# Requests carried into the next batch (the newest): an ARP storm must not grow them without bound.
MAX_CARRIED_REQUESTS = 65_536

# virtual router MACs, as (value, mask) of the 48-bit MAC: VRRP for IPv4 and IPv6 (RFC 5798 section
# 7.3), HSRP version 1 and 2 (RFC 2281; Cisco), GLBP (Cisco)
VIRTUAL_ROUTER_MACS = ((0x00005E000100, 0xFFFFFFFFFF00), (0x00005E000200, 0xFFFFFFFFFF00),
                       (0x00000C07AC00, 0xFFFFFFFFFF00), (0x00000C9FF000, 0xFFFFFFFFF000),
                       (0x0007B4000000, 0xFFFFFF000000))

COLUMNS = {"key": np.uint64, "link": np.uint32, "ip_hi": np.uint64, "ip_lo": np.uint64, "mac": np.uint64,
           "how": np.uint8, "count": np.int64, "unsolicited": np.int64, "mismatched": np.int64,
           "changes": np.int64, "damaged": np.int64, "damage": np.uint8, "first_ns": np.int64, "last_ns": np.int64,
           "first_frame": np.int64, "last_frame": np.int64}
REDUCE = {"count": np.add, "unsolicited": np.add, "mismatched": np.add, "changes": np.add, "damaged": np.add,
          "damage": np.bitwise_or, "last_ns": np.maximum, "first_frame": np.minimum, "last_frame": np.maximum}
REQUEST_COLUMNS = {"key": np.uint64, "ts": np.int64}
# a later partition's reply it found unsolicited in its first window: the request it answers, when, its row
DOUBT_COLUMNS = {"key": np.uint64, "ts": np.int64, "row": np.uint64}
# an IP's latest (and earliest) claim: the IP's key, the claiming MAC, when, and the observation row it is in
CLAIM_COLUMNS = {"key": np.uint64, "mac": np.uint64, "ts": np.int64, "row": np.uint64}


def virtual_router_mac(mac: np.ndarray) -> np.ndarray:
    """Which MACs of the column are a virtual router's (VRRP, HSRP, GLBP), shared by the routers of a group."""
    mac = np.asarray(mac, dtype=np.uint64)
    out = np.zeros(len(mac), dtype=bool)
    for value, mask in VIRTUAL_ROUTER_MACS:
        out |= (mac & np.uint64(mask)) == np.uint64(value)
    return out


def unicast_mac(mac: np.ndarray) -> np.ndarray:
    """MACs that name one station: not zero, group bit (multicast, broadcast) clear."""
    return (mac != 0) & ((mac >> np.uint64(40)) & np.uint64(1) == 0)


def unicast_ipv4(address: np.ndarray) -> np.ndarray:
    """IPv4 addresses (uint32) a host may hold: not 0.0.0.0, not multicast, class E or broadcast."""
    return (address != 0) & (address < np.uint32(0xE000_0000))


def unicast_ipv6(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """IPv6 addresses a host may hold on a link: not multicast (ff00::/8), the unspecified address (the source
    of Duplicate Address Detection), loopback, or IPv4-mapped (the schema's IPv4 rows). Link-local fe80::/10
    addresses are kept: they are the ones Neighbor Discovery spoofing takes first (the router's)."""
    hi, lo = np.asarray(hi, dtype=np.uint64), np.asarray(lo, dtype=np.uint64)
    multicast = (hi >> np.uint64(56)) == np.uint64(0xFF)
    low = (hi == 0) & ((lo <= np.uint64(1)) | ((lo >> np.uint64(32)) == np.uint64(0xFFFF)))
    return ~multicast & ~low


def links(batch: PacketBatch, rows: np.ndarray) -> np.ndarray:
    """The L2 domain of each row: outer VLAN << 16 | inner VLAN, the top bit set inside a tunnel (its
    inner Ethernet is another domain than the capture's own)."""
    layers = batch["layers"][rows]
    outer = np.where((layers & np.uint32(L_VLAN)) != 0, batch["vlan_outer"][rows], 0).astype(np.uint32)
    inner = np.where((layers & np.uint32(L_QINQ)) != 0, batch["vlan_inner"][rows], 0).astype(np.uint32)
    tunnel = np.where((layers & np.uint32(L_TUNNEL)) != 0, np.uint32(1 << 31), np.uint32(0))
    return (outer << np.uint32(16)) | inner | tunnel


def link_vlan(link: int) -> int | None:
    """The VLAN a host of the link is in (the innermost tag), None untagged."""
    link = int(link) & 0x7FFF_FFFF
    vlan = link & 0xFFFF or link >> 16
    return vlan or None


def link_text(link: int) -> str:
    """' on VLAN 20', ' on VLAN 20.30', ' in a tunnel', or '' untagged."""
    value = int(link)
    outer, inner = (value >> 16) & 0x7FFF, value & 0xFFFF
    text = "" if not outer else f" on VLAN {outer}" + (f".{inner}" if inner else "")
    return text + (" in a tunnel" if value & (1 << 31) else "")


# ---- damaged frames: what a frame shows that no station sends on purpose (the DAMAGE_* bits of `damage`)
DAMAGE_SOURCE = 1 << 0          # the Ethernet source: the ARP sender MAC with 1 to MAX_FLIPPED_BITS bits flipped
DAMAGE_DESTINATION = 1 << 1     # a reply's Ethernet destination: its ARP target MAC with 1 to MAX_FLIPPED_BITS flipped
DAMAGE_GROUP_SOURCE = 1 << 2    # an Ethernet source with the group bit set (IEEE 802: a source names one station)
DAMAGE_HARDWARE = 1 << 3        # an ARP hardware type other than Ethernet (1) and IEEE 802 (6) over 6-byte addresses
DAMAGE_LINK_ERROR = 1 << 4      # the capture marked the frame with a link-layer error (pcapng epb_flags: CRC, ...)
DAMAGE_NAMES = {DAMAGE_SOURCE: "Ethernet source a few bits from the ARP sender MAC",
                DAMAGE_DESTINATION: "Ethernet destination a few bits from the ARP target MAC",
                DAMAGE_GROUP_SOURCE: "a group (multicast) Ethernet source",
                DAMAGE_HARDWARE: "an unknown ARP hardware type",
                DAMAGE_LINK_ERROR: "a link-layer error recorded by the capture"}
# A bit error the FCS would have caught flips a bit or a few; two hosts' MACs differ in a dozen bits or more,
# but two ports of one NIC (consecutive addresses) may differ in one: hence the damage a copy must show besides.
# More bits take a host's neighbour for a copy; fewer miss frames hit twice.
MAX_FLIPPED_BITS = 3
# Each damaged frame makes a "MAC" of its own, seen once or twice; a host, even a silent one, sends more. More
# frames take a host that said little for a copy; fewer miss a damaged frame repeated (a retransmitted GARP).
MAX_COPY_FRAMES = 3
HARDWARE_TYPES = (1, 6)         # IANA ARP hardware types that carry 6-byte MACs on the links we decode
# where an ARP message starts in a frame (checked against its decoded sender MAC): Ethernet, one or two 802.1Q
# tags, Linux cooked capture (SLL), SLL2; elsewhere (tunnels, 802.11) its hardware type is not read
ARP_AT = (14, 18, 22, 16, 20)
AR_SHA, AR_PRO, AR_HLN, AR_PLN = 8, 2, 4, 5      # RFC 826 field offsets
ETHERTYPE_IPV4 = 0x0800


def popcount(values: np.ndarray) -> np.ndarray:
    """The set bits of each uint64."""
    x = np.asarray(values, dtype=np.uint64)
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return ((x * np.uint64(0x0101010101010101)) >> np.uint64(56)).astype(np.int64)


def _gather(batch: PacketBatch, at: np.ndarray, width: int) -> np.ndarray:
    """`width` bytes (at most 8) from offset `at` of the batch's buffer, big-endian, as uint64."""
    value = np.zeros(len(at), dtype=np.uint64)
    for k in range(width):
        value = (value << np.uint64(8)) | batch.data[at + k].astype(np.uint64)
    return value


def arp_hardware_type(batch: PacketBatch, rows: np.ndarray) -> np.ndarray:
    """The ARP hardware type of each row, -1 where the message is not found at one of ARP_AT (its sender MAC,
    protocol type and lengths where the decoder read them)."""
    out = np.full(len(rows), -1, dtype=np.int64)
    offset = batch["offset"][rows].astype(np.int64)
    caplen = batch["caplen"][rows].astype(np.int64)
    sha = batch["arp_sha"][rows]
    for at in ARP_AT:
        look = np.flatnonzero((out < 0) & (caplen >= at + AR_SHA + 6))
        if len(look) == 0:
            break
        start = offset[look] + at
        found = ((_gather(batch, start + AR_SHA, 6) == sha[look])
                 & (_gather(batch, start + AR_PRO, 2) == ETHERTYPE_IPV4)
                 & (_gather(batch, start + AR_HLN, 2) == 0x0604))
        out[look[found]] = _gather(batch, start[found], 2).astype(np.int64)
    return out


def arp_damage(batch: PacketBatch, rows: np.ndarray) -> np.ndarray:
    """The DAMAGE_* bits of each ARP row (0: nothing wrong to see)."""
    layers = batch["layers"][rows]
    sha, tha = batch["arp_sha"][rows], batch["arp_tha"][rows]
    plain = (layers & np.uint32(L_TUNNEL)) == 0
    has_src = plain & ((layers & np.uint32(L_SRC_MAC)) != 0)
    has_dst = plain & ((layers & np.uint32(L_DST_MAC)) != 0)
    src = np.where(has_src, batch["src_mac"][rows], sha)
    dst = np.where(has_dst, batch["dest_mac"][rows], tha)
    off_src, off_dst = popcount(src ^ sha), popcount(dst ^ tha)
    reply = batch["arp_op"][rows] == ARP_REPLY
    damage = np.where((off_src >= 1) & (off_src <= MAX_FLIPPED_BITS), DAMAGE_SOURCE, 0)
    damage |= np.where(reply & unicast_mac(tha) & (off_dst >= 1) & (off_dst <= MAX_FLIPPED_BITS),
                       DAMAGE_DESTINATION, 0)
    damage |= np.where(has_src & ((src >> np.uint64(40)) & np.uint64(1) == 1), DAMAGE_GROUP_SOURCE, 0)
    hardware = arp_hardware_type(batch, rows)
    damage |= np.where((hardware >= 0) & ~np.isin(hardware, HARDWARE_TYPES), DAMAGE_HARDWARE, 0)
    damage |= np.where((batch["epb_flags"][rows] >> np.uint32(EPB_ERRORS_SHIFT)) != 0, DAMAGE_LINK_ERROR, 0)
    return damage.astype(np.uint8)


def damage_text(bits: int) -> str:
    """The DAMAGE_* bits in words."""
    return ", ".join(text for bit, text in DAMAGE_NAMES.items() if int(bits) & bit)


@dataclass(frozen=True)
class Copy:
    """A claimant of an address judged a corrupted copy of another claimant: the evidence of that judgement."""

    mac: int            # the claimant
    original: int       # the claimant it copies: the nearest with clean frames
    bits: int           # how many bits the two MACs differ in
    frames: int         # the copy's frames, every one damaged
    damage: int         # DAMAGE_* bits of its frames


@dataclass(frozen=True)
class Claimant:
    """What the corruption judgement reads of one claimant of an address: its frames and their damage."""

    frames: int
    damaged: int
    damage: int


def corrupted_copies(claimants: dict[int, Claimant]) -> dict[int, Copy]:
    """The claimants of one address that are corrupted copies of another: seen in MAX_COPY_FRAMES frames or fewer,
    every one damaged, and at most MAX_FLIPPED_BITS bits from a claimant with clean frames (its original; the
    nearest, then the one with more frames). A claimant with a clean frame is a host, however close its MAC."""
    hosts = [(mac, c) for mac, c in claimants.items() if c.damaged < c.frames]
    if not hosts:
        return {}
    host_macs = np.array([mac for mac, _ in hosts], dtype=np.uint64)
    host_frames = np.array([c.frames for _, c in hosts], dtype=np.int64)
    out = {}
    for mac, c in claimants.items():
        if c.damaged < c.frames or c.frames > MAX_COPY_FRAMES:
            continue
        bits = popcount(host_macs ^ np.uint64(mac))
        best = int(np.lexsort((-host_frames, bits))[0])
        if 1 <= bits[best] <= MAX_FLIPPED_BITS:
            out[mac] = Copy(mac, int(host_macs[best]), int(bits[best]), c.frames, c.damage)
    return out


def copies_text(copies: list[Copy], listed: int = 4) -> str:
    """What a list of copies of one original says, in words: how many, how far, how often seen, which damage."""
    original = copies[0].original
    frames = sum(c.frames for c in copies)
    bits = sorted({c.bits for c in copies})
    damage = 0
    for c in copies:
        damage |= c.damage
    names = ", ".join(mac_to_str(c.mac) for c in copies[:listed]) + (f", +{len(copies) - listed} more"
                                                                       if len(copies) > listed else "")
    span = f"{bits[0]}" if len(bits) == 1 else f"{bits[0]}-{bits[-1]}"
    bit = "bit" if span == "1" else "bits"
    return (f"{plural(len(copies), 'MAC')} ({names}) {span} {bit} from {mac_to_str(original)}, seen in "
            f"{plural(frames, 'frame')}, every one damaged ({damage_text(damage)}): likely corrupted copies of "
            f"{mac_to_str(original)}, not other hosts")


class Neighbors:
    """The observation table of one rule, its inputs chosen: ARP always, IPv4 sources and destinations,
    Neighbor Discovery and DHCPv4 ACKs on request (`ip_sources`, `ip_destinations`, `nd`, `dhcp`), and the
    window within which a claim changes another's."""

    def __init__(self, ip_sources: bool = False, ip_destinations: bool = False, nd: bool = False,
                 dhcp: bool = False, conflict_window_ns: int = int(CONFLICT_WINDOW_S * NS)):
        self.ip_sources = ip_sources
        self.nd = nd
        self.dhcp = dhcp
        self.conflict_window_ns = conflict_window_ns
        self.ip_destinations = ip_destinations
        self._rows = empty_table(COLUMNS)
        self._pending: list[dict] = []      # batches' rows not yet folded into _rows (see FOLD_EVERY_ROWS)
        self._pending_rows = 0
        self.requests = empty_table(REQUEST_COLUMNS)
        self.latest = empty_table(CLAIM_COLUMNS)
        self.earliest = empty_table(CLAIM_COLUMNS)
        self.dropped = 0
        # a partition after the first: the end of its first window, and the replies in it no request of its own
        # answered (None: nothing read yet, or the state begins the capture)
        self.begins_capture: bool | None = None
        self.head_end_ns: int | None = None
        self.doubts = empty_table(DOUBT_COLUMNS)

    # ---- one batch
    def update(self, batch: PacketBatch) -> None:
        if self.begins_capture is None and len(batch):
            self.begins_capture = int(batch["frame"][0]) == 1
            if not self.begins_capture:
                self.head_end_ns = int(batch["ts_ns"].min()) + int(UNSOLICITED_WINDOW_S * NS)
        parts = [self._arp(batch)]
        if self.ip_sources:
            parts.append(self._ip(batch, IP_SOURCE, "src"))
        if self.ip_destinations:
            parts.append(self._ip(batch, IP_DESTINATION, "dest"))
        if self.nd:
            parts.append(self._nd(batch))
        if self.dhcp:
            parts.append(self._dhcp(batch))
        parts = [part for part in parts if part is not None]
        if parts:
            self._fold({name: np.concatenate([part[name] for part in parts]) for name in COLUMNS})

    def _arp(self, batch: PacketBatch) -> dict | None:
        layers = batch["layers"]
        arp = np.flatnonzero(((layers & np.uint32(L_ARP | L_ETHERTYPE)) == np.uint32(L_ARP | L_ETHERTYPE))
                             & (batch["ethertype"] == ETHERTYPE_ARP)
                             & ((batch["arp_op"] == ARP_REQUEST) | (batch["arp_op"] == ARP_REPLY)))
        if len(arp) == 0:
            return None
        op, sha, tha = batch["arp_op"][arp], batch["arp_sha"][arp], batch["arp_tha"][arp]
        spa, tpa = batch["arp_spa"][arp], batch["arp_tpa"][arp]
        ts, frame, link = batch["ts_ns"][arp], batch["frame"][arp], links(batch, arp)
        gratuitous = spa == tpa
        reply = op == ARP_REPLY
        unsolicited = reply & ~gratuitous & ~self._answered(link, spa, tpa, ts, op)
        own = layers[arp]
        ether_src = np.where((own & np.uint32(L_SRC_MAC)) != 0, batch["src_mac"][arp], sha)
        mismatched = ((own & np.uint32(L_TUNNEL)) == 0) & (ether_src != sha) & ~virtual_router_mac(sha)

        damage = arp_damage(batch, arp)
        sender = unicast_mac(sha) & unicast_ipv4(spa)
        target = reply & ~gratuitous & unicast_mac(tha) & unicast_ipv4(tpa)
        how = np.where(gratuitous, GRATUITOUS, np.where(reply, REPLY, REQUEST)).astype(np.uint8)
        s, t = np.flatnonzero(sender), np.flatnonzero(target)
        if self.head_end_ns is not None:
            self._doubt(link, spa, tpa, sha, ts, np.flatnonzero(sender & unsolicited & (ts < self.head_end_ns)))
        rows = {
            "link": np.concatenate([link[s], link[t]]),
            "ip_hi": np.zeros(len(s) + len(t), dtype=np.uint64),
            "ip_lo": IPV4_MAPPED | np.concatenate([spa[s], tpa[t]]).astype(np.uint64),
            "mac": np.concatenate([sha[s], tha[t]]),
            "how": np.concatenate([how[s], np.full(len(t), REPLY_TARGET, dtype=np.uint8)]),
            "ts": np.concatenate([ts[s], ts[t]]),
            "frame": np.concatenate([frame[s], frame[t]]),
            "unsolicited": np.concatenate([unsolicited[s], np.zeros(len(t), dtype=bool)]),
            "mismatched": np.concatenate([mismatched[s], np.zeros(len(t), dtype=bool)]),
            "damage": np.concatenate([damage[s], damage[t]]),
        }
        if len(rows["ts"]) == 0:
            return None
        rows["changes"] = self._changes(rows)
        return _aggregate(rows)

    def _nd(self, batch: PacketBatch) -> dict | None:
        """The pairs of the Neighbor Advertisements and Solicitations hosts accept (see the module's text)."""
        tab = app.table(batch, "nd")
        kind = tab["type"]
        whole = tab.valid("checksum_ok")
        accepted = ((tab["hop_limit"] == ND_HOP_LIMIT) & (tab["code"] == 0) & tab.valid("target_hi")
                    & ~(whole & ((tab["checksum_ok"] == 0) | tab.truncated)))
        messages = np.flatnonzero(accepted & ((kind == NEIGHBOR_ADVERTISEMENT) | (kind == NEIGHBOR_SOLICITATION)))
        if len(messages) == 0:
            return None
        m = messages
        rows, advert = tab["row"][m], kind[m] == NEIGHBOR_ADVERTISEMENT
        has_mac = (batch["layers"][rows] & np.uint32(L_SRC_MAC)) != 0
        ether_src = np.where(has_mac, batch["src_mac"][rows], np.uint64(0))
        has_lladdr = np.where(advert, tab.valid("tgt_lladdr")[m], tab.valid("src_lladdr")[m])
        lladdr = np.where(advert, tab["tgt_lladdr"][m], tab["src_lladdr"][m])
        mac = np.where(has_lladdr, lladdr, ether_src)
        # an advertisement speaks for its target, a solicitation for its source
        hi = np.where(advert, tab["target_hi"][m], batch["src_ip_hi"][rows])
        lo = np.where(advert, tab["target_lo"][m], batch["src_ip_lo"][rows])
        to_group = (batch["dest_ip_hi"][rows] >> np.uint64(56)) == np.uint64(0xFF)
        unasked = advert & (tab["na_solicited"][m] == 0)
        override = tab["na_override"][m] != 0
        # RFC 4861 7.1.2: a multicast advertisement with the S flag set is discarded
        keep = unicast_mac(mac) & unicast_ipv6(hi, lo) & ~(advert & to_group & ~unasked)
        mismatched = has_mac & has_lladdr & (ether_src != lladdr) & ~virtual_router_mac(lladdr)
        mismatched &= (batch["layers"][rows] & np.uint32(L_TUNNEL)) == 0
        how = np.where(advert, np.where(unasked & to_group, MULTICAST_ADVERTISEMENT, ADVERTISEMENT),
                       SOLICITATION).astype(np.uint8)
        k = np.flatnonzero(keep)
        if len(k) == 0:
            return None
        out = {"link": links(batch, rows[k]), "ip_hi": hi[k], "ip_lo": lo[k], "mac": mac[k], "how": how[k],
               "ts": batch["ts_ns"][rows[k]], "frame": batch["frame"][rows[k]],
               "unsolicited": (unasked & ~to_group)[k], "mismatched": mismatched[k],
               "damage": np.zeros(len(k), dtype=np.uint8)}
        # an advertisement without the O flag updates no cached address (RFC 4861 7.2.5, 7.2.8): it neither
        # changes a claim nor is one that a later claim changes
        overrides = ~advert[k] | override[k]
        out["changes"] = np.zeros(len(k), dtype=np.int64)
        if overrides.any():
            out["changes"][overrides] = self._changes(take_rows(out, np.flatnonzero(overrides)))
        return _aggregate(out)

    def _dhcp(self, batch: PacketBatch) -> dict | None:
        """The (yiaddr, chaddr) pairs of the batch's DHCPv4 ACKs (see the module's text)."""
        tab = app.table(batch, "dhcp4")
        ack = np.flatnonzero((tab["msg_type"] == DHCP_ACK_TYPE) & tab.valid("msg_type") & (tab["op"] == BOOTP_REPLY)
                             & tab.valid("op") & tab.valid("chaddr") & tab.valid("yiaddr_lo"))
        if len(ack) == 0:
            return None
        rows, mac = tab["row"][ack], tab["chaddr"][ack]
        address = (tab["yiaddr_lo"][ack] & np.uint64(0xFFFF_FFFF)).astype(np.uint32)
        keep = np.flatnonzero(unicast_mac(mac) & unicast_ipv4(address) & (address != np.uint32(0xFFFF_FFFF)))
        if len(keep) == 0:
            return None
        rows, mac, address = rows[keep], mac[keep], address[keep]
        relayed = (tab["giaddr_lo"][ack][keep] & np.uint64(0xFFFF_FFFF)) != 0
        n = len(rows)
        return _aggregate({"link": np.where(relayed, np.uint32(0), links(batch, rows)).astype(np.uint32),
                           "ip_hi": np.zeros(n, dtype=np.uint64), "ip_lo": IPV4_MAPPED | address.astype(np.uint64),
                           "mac": mac, "how": np.full(n, DHCP_ACK, dtype=np.uint8), "ts": batch["ts_ns"][rows],
                           "frame": batch["frame"][rows], "unsolicited": np.zeros(n, dtype=bool),
                           "mismatched": np.zeros(n, dtype=bool), "changes": np.zeros(n, dtype=np.int64),
                           "damage": np.zeros(n, dtype=np.uint8)})

    def _answered(self, link, spa, tpa, ts, op) -> np.ndarray:
        """Which rows (replies) follow, within UNSOLICITED_WINDOW_S, a request from their target for their
        sender address; this batch's requests from the last window are kept for the next."""
        asked = op == ARP_REQUEST
        request_keys = mix64(link[asked], tpa[asked], spa[asked])
        keys = np.concatenate([self.requests["key"], request_keys, mix64(link, spa, tpa)])
        times = np.concatenate([self.requests["ts"], ts[asked], ts])
        is_request = np.concatenate([np.ones(len(self.requests["key"]) + len(request_keys), dtype=bool),
                                     np.zeros(len(ts), dtype=bool)])
        # requests before replies at equal times: a host answers after the question
        order = np.lexsort((~is_request, times, keys))
        k, t, r = keys[order], times[order], is_request[order]
        starts = np.concatenate(([True], k[1:] != k[:-1]))
        group_start = np.maximum.accumulate(np.where(starts, np.arange(len(k)), 0))
        last_request = np.maximum.accumulate(np.where(r, np.arange(len(k)), -1))
        found = (last_request >= group_start) & ~r
        found[found] = t[found] - t[last_request[found]] <= int(UNSOLICITED_WINDOW_S * NS)
        answered = np.zeros(len(keys), dtype=bool)
        answered[order] = found
        # carry the requests of the last window (the newest, bounded) to the next batch
        carried = {"key": keys[is_request], "ts": times[is_request]}
        recent = np.flatnonzero(carried["ts"] >= times.max() - int(UNSOLICITED_WINDOW_S * NS))
        recent = recent[np.argsort(carried["ts"][recent], kind="stable")][-MAX_CARRIED_REQUESTS:]
        self.requests = take_rows(carried, recent)
        return answered[len(keys) - len(ts):]

    def _doubt(self, link, spa, tpa, sha, ts, rows: np.ndarray) -> None:
        """Keep the unsolicited replies `rows` of a later partition's first window for merge() (bounded)."""
        room = MAX_CARRIED_REQUESTS - len(self.doubts["key"])
        rows = rows[:max(room, 0)]
        if len(rows) == 0:
            return
        address = IPV4_MAPPED | spa[rows].astype(np.uint64)
        new = {"key": mix64(link[rows], spa[rows], tpa[rows]), "ts": ts[rows],
               "row": mix64(link[rows], np.zeros(len(rows), dtype=np.uint64), address, sha[rows],
                            np.full(len(rows), REPLY, dtype=np.uint8))}
        self.doubts = {name: np.concatenate([self.doubts[name], new[name]]) for name in DOUBT_COLUMNS}

    def _answered_before(self, requests: dict, doubts: dict) -> np.ndarray:
        """Which `doubts` (a later partition's unsolicited replies) a request of `requests` (the earlier one's
        last window) answered, by the rule of _answered."""
        answered = np.zeros(len(doubts["key"]), dtype=bool)
        if len(requests["key"]) == 0 or len(doubts["key"]) == 0:
            return answered
        order = np.lexsort((requests["ts"], requests["key"]))
        keys, times = requests["key"][order], requests["ts"][order]
        # the latest request of the reply's key at or before it
        at = np.searchsorted(keys, doubts["key"], side="right") - 1
        ok = at >= 0
        ok[ok] = keys[at[ok]] == doubts["key"][ok]
        for i in np.flatnonzero(ok):
            lo = int(np.searchsorted(keys, doubts["key"][i], side="left"))
            before = np.searchsorted(times[lo:at[i] + 1], doubts["ts"][i], side="right") - 1
            if before >= 0:
                answered[i] = doubts["ts"][i] - times[lo + before] <= int(UNSOLICITED_WINDOW_S * NS)
        return answered

    def _changes(self, rows: dict) -> np.ndarray:
        """1 for each claim that follows, within CONFLICT_WINDOW_S, a claim of the same IP by another MAC."""
        ip_key = mix64(rows["link"], rows["ip_hi"], rows["ip_lo"])
        order = np.lexsort((rows["frame"], rows["ts"], ip_key))
        key, mac, ts = ip_key[order], rows["mac"][order], rows["ts"][order]
        first = np.concatenate(([True], key[1:] != key[:-1]))
        previous_mac = np.concatenate(([np.uint64(0)], mac[:-1]))
        previous_ts = np.concatenate(([np.int64(0)], ts[:-1]))
        known = ~first
        # a batch's first claim of an IP follows the latest claim of it before the batch
        at = np.searchsorted(self.latest["key"], key[first])
        hit = at < len(self.latest["key"])
        hit[hit] = self.latest["key"][at[hit]] == key[first][hit]
        heads = np.flatnonzero(first)
        previous_mac[heads[hit]] = self.latest["mac"][at[hit]]
        previous_ts[heads[hit]] = self.latest["ts"][at[hit]]
        known[heads[hit]] = True
        change = known & (previous_mac != mac) & (ts - previous_ts <= self.conflict_window_ns)
        out = np.zeros(len(key), dtype=np.int64)
        out[order] = change
        last = np.concatenate((key[1:] != key[:-1], [True]))
        row = mix64(rows["link"], rows["ip_hi"], rows["ip_lo"], rows["mac"], rows["how"])[order]
        self.latest = _kept(self.latest, {"key": key[last], "mac": mac[last], "ts": ts[last], "row": row[last]})
        self.earliest = _kept(self.earliest, {"key": key[first], "mac": mac[first], "ts": ts[first],
                                              "row": row[first]}, latest=False)
        return out

    def _ip(self, batch: PacketBatch, how: int, side: str) -> dict | None:
        """The (address, MAC) pairs of one side of the batch's IPv4 packets, each once with its packets counted:
        picked and grouped in one compiled pass over the batch's columns (most packets of a batch repeat a pair
        seen a moment before)."""
        bit = L_SRC_MAC if side == "src" else L_DST_MAC
        n = len(batch)
        size = 1 << max(1, int(2 * n - 1).bit_length())
        first, last, count = (np.empty(n, dtype=np.int64) for _ in range(3))
        low, high = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        link = np.empty(n, dtype=np.uint32)
        columns = [np.ascontiguousarray(batch[name]) for name in
                   ("layers", "vlan_outer", "vlan_inner", f"{side}_mac", f"{side}_ip_hi", f"{side}_ip_lo", "ts_ns")]
        groups = ipv4_pairs(*columns, np.uint32(bit), np.full(size, -1, dtype=np.int64),
                            np.full(size, -1, dtype=np.int64), IP_ROWS_PER_MAC, link, first, last, count, low, high)
        if groups == 0:
            return None
        g = first[:groups]
        link = link[:groups]
        hi, lo, mac = columns[4][g], columns[5][g], columns[3][g]
        zero = np.zeros(groups, dtype=np.int64)
        return {"key": mix64(link, hi, lo, mac, np.full(groups, how, dtype=np.uint8)),
                "link": link, "ip_hi": hi, "ip_lo": lo, "mac": mac,
                "how": np.full(groups, how, dtype=np.uint8), "count": count[:groups].copy(), "unsolicited": zero,
                "mismatched": zero, "changes": zero, "damaged": zero, "damage": np.zeros(groups, dtype=np.uint8),
                "first_ns": low[:groups].copy(), "last_ns": high[:groups].copy(),
                "first_frame": batch["frame"][g], "last_frame": batch["frame"][last[:groups]]}

    # ---- the table
    @property
    def rows(self) -> dict:
        """The observation table (COLUMNS), every batch so far folded in."""
        self._flush()
        return self._rows

    def _fold(self, new: dict) -> None:
        # Folding (a sort of the whole table) and bounding it once per batch cost more than every other
        # part of the update on busy links, where each batch only repeats the pairs already known: the
        # batches' rows wait and fold together. The sums, minima and maxima of a fold do not depend on how
        # the rows are grouped, and the bound keeps the rows first seen either way.
        self._pending.append(new)
        self._pending_rows += len(new["key"])
        if self._pending_rows >= FOLD_EVERY_ROWS or len(self._pending) >= FOLD_EVERY_BATCHES:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        new = {name: np.concatenate([part[name] for part in self._pending]) for name in COLUMNS}
        self._pending, self._pending_rows = [], 0
        self._rows = self._bounded(fold_rows(self._rows, new, "key", REDUCE))

    def _bounded(self, rows: dict) -> dict:
        """At most IP_ROWS_PER_MAC addresses per MAC and IP role, MAX_ROWS in all: the rows first seen."""
        ip_rows = np.isin(rows["how"], TRAFFIC)
        if ip_rows.any():
            group = mix64(rows["link"], rows["mac"], rows["how"])
            order = np.lexsort((rows["first_ns"], group))
            g = group[order]
            starts = np.concatenate(([True], g[1:] != g[:-1]))
            rank = np.arange(len(g)) - np.maximum.accumulate(np.where(starts, np.arange(len(g)), 0))
            over = np.zeros(len(g), dtype=bool)
            over[order] = rank >= IP_ROWS_PER_MAC
            over &= ip_rows
            if over.any():
                rows = take_rows(rows, np.flatnonzero(~over))
        extra = len(rows["key"]) - MAX_ROWS
        if extra > 0:
            self.dropped += extra
            keep = np.sort(np.argsort(rows["first_ns"], kind="stable")[:MAX_ROWS])
            rows = take_rows(rows, keep)
        return rows

    def merge(self, other: Neighbors) -> None:
        if other.begins_capture is None:
            return
        if self.begins_capture is None:
            self.__dict__.update(other.__dict__)
            return
        self._flush()
        theirs = dict(other.rows, changes=other.rows["changes"].copy())
        # the later part's first replies that a request before it answered were not unsolicited
        answered = self._answered_before(self.requests, other.doubts)
        if answered.any():
            rows, counts = np.unique(other.doubts["row"][answered], return_counts=True)
            at = np.searchsorted(rows, theirs["key"])
            hit = at < len(rows)
            hit[hit] = rows[at[hit]] == theirs["key"][hit]
            fix = np.zeros(len(theirs["key"]), dtype=np.int64)
            fix[hit] = counts[at[hit]]
            theirs["unsolicited"] = theirs["unsolicited"] - fix
        # the change at the border of two partitions in time order: the later one's first claim of an IP
        # follows the earlier one's last
        self._border(self.latest, other.earliest, theirs)
        self._border(other.latest, self.earliest, self._rows)
        self._fold(theirs)
        self._flush()
        self.dropped += other.dropped
        both = {name: np.concatenate([self.requests[name], other.requests[name]]) for name in REQUEST_COLUMNS}
        if len(both["ts"]):
            recent = np.flatnonzero(both["ts"] >= both["ts"].max() - int(UNSOLICITED_WINDOW_S * NS))
            recent = recent[np.argsort(both["ts"][recent], kind="stable")][-MAX_CARRIED_REQUESTS:]
            self.requests = take_rows(both, recent)
        self.latest = _kept(self.latest, other.latest)
        self.earliest = _kept(self.earliest, other.earliest, latest=False)

    def _border(self, before: dict, after: dict, rows: dict) -> None:
        """Count, in `rows`, the changes between the claims `before` (latest of the earlier partition) and
        `after` (earliest of the later)."""
        at = np.searchsorted(before["key"], after["key"])
        hit = at < len(before["key"])
        hit[hit] = before["key"][at[hit]] == after["key"][hit]
        k, b = np.flatnonzero(hit), at[hit]
        gap = after["ts"][k] - before["ts"][b]
        change = (before["mac"][b] != after["mac"][k]) & (gap >= 0) & (gap <= self.conflict_window_ns)
        target = np.isin(rows["key"], after["row"][k][change])
        rows["changes"] = rows["changes"] + target

@kernel("(u4[::1], u2[::1], u2[::1], u8[::1], u8[::1], u8[::1], i8[::1], u4, i8[::1], i8[::1], i8, u4[::1], "
        "i8[::1], i8[::1], i8[::1], i8[::1], i8[::1])")
def ipv4_pairs(layers, vlan_outer, vlan_inner, mac, hi, lo, ts, mac_bit, table, stations, per_station, link, first,
               last, count, low, high):
    """Group by (link, hi, lo, mac), in one pass, the rows of a batch that pair an IPv4 address with a MAC on
    one side (`mac_bit`: the side's MAC layer bit; the columns are that side's): not tunnelled, a unicast MAC
    (not zero, group bit clear) and an address a host may hold (unicast_ipv4, not 255.255.255.255). Group g,
    numbered in order of first appearance, has its link (links()), its first and last row of the batch, its row
    count and its lowest and highest time in link[g], first[g], last[g], count[g], low[g], high[g]. A station
    (link, mac) keeps its first `per_station` addresses; rows of its others are left out. `table` and
    `stations` are open-addressing tables of a power of two at least twice the rows, all -1. Returns the
    number of groups. Picking and grouping in one pass reads each column once, where numpy steps would read
    them a dozen times."""
    mask = np.uint64(len(table) - 1)
    want = np.uint32(L_IP4) | mac_bit
    groups = 0
    for i in range(len(layers)):
        lay = layers[i]
        if (lay & (want | np.uint32(L_TUNNEL))) != want:
            continue
        m = mac[i]
        if m == 0 or ((m >> np.uint64(40)) & np.uint64(1)) != 0:
            continue
        address = lo[i] & np.uint64(0xFFFF_FFFF)
        if address == 0 or address >= np.uint64(0xE000_0000):
            continue
        ln = np.uint32(0)
        if (lay & np.uint32(L_VLAN)) != 0:
            ln = np.uint32(vlan_outer[i]) << np.uint32(16)
        if (lay & np.uint32(L_QINQ)) != 0:
            ln |= np.uint32(vlan_inner[i])
        station = (m * np.uint64(0xBF58476D1CE4E5B9)) ^ (np.uint64(ln) * np.uint64(0x94D049BB133111EB))
        h = hi[i] ^ (lo[i] * np.uint64(0x9E3779B97F4A7C15)) ^ station
        h ^= h >> np.uint64(31)
        h *= np.uint64(0xD6E8FEB86659FD93)
        h ^= h >> np.uint64(32)
        slot = h & mask
        while True:
            g = table[slot]
            if g < 0:
                break
            j = first[g]
            if link[g] == ln and lo[j] == lo[i] and mac[j] == m and hi[j] == hi[i]:
                break
            slot = (slot + np.uint64(1)) & mask
        if g >= 0:
            last[g] = i
            count[g] += 1
            low[g] = min(low[g], ts[i])
            high[g] = max(high[g], ts[i])
            continue
        # a new address of this station: counted in `stations` (slot holds its first group << 16 | addresses)
        station ^= station >> np.uint64(29)
        s = station & mask
        while stations[s] >= 0:
            k = stations[s] >> 16
            if link[k] == ln and mac[first[k]] == m:
                break
            s = (s + np.uint64(1)) & mask
        if (stations[s] & 0xFFFF) >= per_station and stations[s] >= 0:
            continue
        if stations[s] < 0:
            stations[s] = np.int64(groups) << 16
        stations[s] += 1
        table[slot] = groups
        link[groups] = ln
        first[groups] = i
        last[groups] = i
        count[groups] = 1
        low[groups] = ts[i]
        high[groups] = ts[i]
        groups += 1
    return groups


def _kept(known: dict, new: dict, latest: bool = True) -> dict:
    """Each IP's latest (or earliest) claim of the two tables, sorted by IP key."""
    both = {name: np.concatenate([known[name], new[name]]) for name in CLAIM_COLUMNS}
    if len(both["key"]) == 0:
        return both
    order = np.lexsort((both["ts"] if latest else -both["ts"], both["key"]))
    both = take_rows(both, order)
    last = np.concatenate((both["key"][1:] != both["key"][:-1], [True]))
    return take_rows(both, np.flatnonzero(last))


def _aggregate(rows: dict) -> dict:
    """Per-packet observations (ts, frame, flags) summed per (link, IP, MAC, how): one row of COLUMNS each."""
    key = mix64(rows["link"], rows["ip_hi"], rows["ip_lo"], rows["mac"], rows["how"])
    order = np.lexsort((rows["frame"], rows["ts"], key))
    key = key[order]
    starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    pick = order[starts]
    ts, frame = rows["ts"][order], rows["frame"][order]
    return {
        "key": key[starts], "link": rows["link"][pick].astype(np.uint32), "ip_hi": rows["ip_hi"][pick],
        "ip_lo": rows["ip_lo"][pick], "mac": rows["mac"][pick], "how": rows["how"][pick],
        "count": np.diff(np.append(starts, len(key))).astype(np.int64),
        "unsolicited": np.add.reduceat(rows["unsolicited"][order].astype(np.int64), starts),
        "mismatched": np.add.reduceat(rows["mismatched"][order].astype(np.int64), starts),
        "changes": np.add.reduceat(rows["changes"][order].astype(np.int64), starts),
        "damaged": np.add.reduceat((rows["damage"][order] != 0).astype(np.int64), starts),
        "damage": np.bitwise_or.reduceat(rows["damage"][order], starts),
        "first_ns": ts[starts], "last_ns": np.maximum.reduceat(ts, starts),
        "first_frame": np.minimum.reduceat(frame, starts), "last_frame": np.maximum.reduceat(frame, starts),
    }

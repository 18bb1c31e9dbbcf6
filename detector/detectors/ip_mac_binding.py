"""ip-mac-binding: IP-MAC pairs on the wire that the site's registry does not hold.

Seed 004's campus let hosts in by their IP-MAC pair: the pairs lived in
/etc/ethers and in ISC dhcpd host blocks, the switches enforced them
(IP-MAC-port binding with DHCP snooping), and unknown hosts got an address
from a pool (10.160.0.1-100). This rule holds what a capture shows against that
registry (the site file's `bindings`, `dynamic_pools`, `routers`): the
observations of detect/neighbors.py, as ntopng learns pairs
(src/NetworkInterface.cpp `checkMacIPAssociation`): ARP sender pairs and
reply target pairs, the (source IP, source MAC) of IPv4 packets from
local sources and MACs that are no router's, the pairs of IPv6 Neighbor
Advertisements (target, target link-layer address) and Solicitations
(source, source link-layer address), and DHCPv4 ACKs (yiaddr, chaddr).

Per (address, MAC) that breaks the registry, one finding:

- a DHCP ACK contradicting the registry: high, whether it leases a
  registered address to another MAC or a registered MAC an address outside
  the pools that is not bound to it (the dhcpd host blocks say otherwise:
  a server configured apart from the registry, or a rogue one). A relayed
  ACK is captured on the server's link: its pair is held against the
  bindings of every VLAN;
- a registered address used by another MAC: high when that MAC claims it
  in ARP replies, gratuitous ARPs or Neighbor Advertisements, medium when
  it only uses it (ARP requests, IP traffic), whether the registered MAC
  is active too (seen after the other's first use: two hosts on one
  address), left before the other came, or never appears (a replaced NIC,
  a stale registry, or a host that took an absent owner's address: the
  message names them). The registry is the point of the rule, as it was
  the point of seed 004's switches, which drop such frames whatever the
  owner does (issue 27: the owner's absence made it low, and an
  unregistered MAC probing, announcing and using a registered address
  went by as low);
- a registered MAC using an address not bound to it: medium (low for an
  address of a dynamic pool);
- a claimant that is a corrupted copy of another claimant of the address
  (neighbors.corrupted_copies: a MAC 1 to 3 bits from it, in a handful of
  frames, each damaged besides): low, named as a damaged frame, not a host
  (issue 27: a damaged capture's copies of the owner's MAC are no breach
  of the registry; its switches never saw them);
- pairs of unregistered MACs with unregistered addresses outside the
  dynamic pools: one low finding per link, listing them.

Near-misses left alone: a router's proxy-ARP replies for registered
addresses whose MACs never appear on the link, traffic a router forwards
(its source addresses are other hosts'), a virtual router MAC (VRRP, HSRP,
GLBP) that the routers share, hosts in the dynamic pools, link-local
(169.254.0.0/16, fe80::/10: the host's own choice, never registered) and
0.0.0.0 addresses. Each family is held against its own bindings: a MAC's
address is foreign to it only when the MAC has a binding of that family
(an IPv4 registry says nothing of the SLAAC addresses of its hosts), and
unregistered IPv6 pairs are listed only when the registry holds IPv6. Routers are the site's `routers`
(by MAC, or by IP through the registry); without that key, a MAC that is
the source of `router_min_sources` addresses or more, or of an off-net
address, is taken for one. Off-net: outside the site's `local_networks`,
or without them, neither registered, in a pool, nor seen in ARP.

Without `bindings` the rule keeps no state and says nothing: there is
nothing to hold the pairs against (pairs that contradict each other are the
conflict rule's business, which needs no registry).
"""
from __future__ import annotations

import ipaddress
from pathlib import Path

import numpy as np

from ..decode.addr import mac_to_str
from ..detect import neighbors as nb
from ..detect.columns import ip_text
from ..detect.confidence import Basis
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.grouping import member
from ..detect.hashing import mix64
from ..findings import Finding, iso_time
from ..rules import ALERT_SECONDS, Param, Range
from ..site import NO_VLAN
from ..units import NS, plural

LINK_LOCAL = ipaddress.ip_network("169.254.0.0/16")     # RFC 3927: configured by the host itself
LINK_LOCAL6 = int(ipaddress.ip_network("fe80::/10").network_address) >> 64     # RFC 4291 2.5.6: the same, IPv6
IPV4_MAPPED = 0xFFFF << 32
CLAIMS = (*nb.ANSWERS, *nb.ANNOUNCEMENTS)   # a host telling others the address is at its MAC (the rest: using it)
UNKNOWN_LISTED = 64                                     # unregistered pairs listed in a finding's evidence
LISTED = 6


def _keys(hi, lo, mac=None, vlan=None) -> np.ndarray:
    columns = [np.asarray(hi, dtype=np.uint64), np.asarray(lo, dtype=np.uint64)]
    if mac is not None:
        columns.append(np.asarray(mac, dtype=np.uint64))
    if vlan is not None:
        columns.append(np.asarray(vlan, dtype=np.int64).astype(np.uint64))
    return mix64(*columns)


class _Registry:
    """The bindings as hashed key sets, looked up for whole columns: an address, a MAC or a pair is
    registered for a row when a binding holds it in the row's VLAN, in every VLAN, or (an untagged row,
    whose VLAN the capture does not say) in any."""

    def __init__(self, site):
        b = site.binding_columns()
        vlan = b["vlan"].astype(np.int64)
        mac_cols = (np.zeros(len(vlan), dtype=np.uint64), b["mac"])
        v6 = ~((b["ip_hi"] == 0) & ((b["ip_lo"] >> np.uint64(32)) == np.uint64(0xFFFF)))
        self.v6 = bool(v6.any())
        self.sets = {}
        for name, cols, which in (("ip", (b["ip_hi"], b["ip_lo"]), None), ("mac", mac_cols, None),
                                  ("pair", (b["ip_hi"], b["ip_lo"], b["mac"]), None), ("mac4", mac_cols, ~v6),
                                  ("mac6", mac_cols, v6)):
            if which is not None:
                cols, v = tuple(c[which] for c in cols), vlan[which]
            else:
                v = vlan
            anywhere = np.unique(_keys(*cols))
            in_vlan = np.unique(_keys(*cols, vlan=v))          # NO_VLAN for a binding valid in every VLAN
            self.sets[name] = (anywhere, in_vlan)

    def has(self, name: str, cols: tuple, vlan: np.ndarray) -> np.ndarray:
        anywhere, in_vlan = self.sets[name]
        untagged = vlan < 0
        out = np.zeros(len(vlan), dtype=bool)
        out[untagged] = member(_keys(*(c[untagged] for c in cols)), anywhere)
        tagged = ~untagged
        cols_t = tuple(c[tagged] for c in cols)
        out[tagged] = (member(_keys(*cols_t, vlan=np.full(tagged.sum(), NO_VLAN)), in_vlan)
                       | member(_keys(*cols_t, vlan=vlan[tagged]), in_vlan))
        return out


@register
class IpMacBinding(Detector):
    rule_id = "ip-mac-binding"
    EVE_SIGNATURE = (8, "Potentially Bad Traffic")
    # what its findings rest on beyond what it saw (detect.confidence): what each frame claims, against the registry
    QUALITY_NEEDS = frozenset()
    APP_TABLES = ("nd", "dhcp4")
    PARAMS = {
        "router_min_sources": Param(int, 16, "distinct source addresses of one MAC from which it is taken for a "
                                             "router (without routers in the site file)",
                                    Range(2, 32),
                                    "Fewer takes a host with a few aliases for a router and stops judging its "
                                    "traffic; more judges a small router's forwarded traffic as its own."),
    }
    ALERTS = {
        "suppress_s": Param(float, 600.0, "least seconds between two events about one address and MAC",
                            ALERT_SECONDS, "A host using a foreign address keeps using it; one event per ARP cache "
                                           "lifetime is enough."),
        "resolve_s": Param(float, 1800.0, "seconds without the pair before its alert is resolved", ALERT_SECONDS,
                           "A host that is off for half an hour has probably gone."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        # without a registry nothing is judged, so nothing is kept
        self.neighbors = nb.Neighbors(ip_sources=True, nd=True, dhcp=True) if self._registered() else None

    def _registered(self) -> bool:
        return self.site.given("bindings") and bool(self.site.bindings)

    def update(self, batch) -> None:
        if self.neighbors is not None:
            self.neighbors.update(batch)

    def merge(self, other: IpMacBinding) -> IpMacBinding:
        check_merge(self, other)
        if self.neighbors is not None:
            self.neighbors.merge(other.neighbors)
        return self

    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        if self.neighbors is None or len(self.neighbors.rows["key"]) == 0:
            return []
        return _Judgement(self).findings()


class _Judgement:
    """The observations of one state held against the registry."""

    def __init__(self, detector: IpMacBinding):
        self.detector = detector
        self.site = site = detector.site
        rows = detector.neighbors.rows
        keep = np.isin(rows["how"], (*nb.NEIGHBOR_KINDS, nb.IP_SOURCE, *nb.LEASES))
        # link-local addresses (169.254.0.0/16, fe80::/10) are the host's own choice, outside any registry
        v4 = (rows["ip_hi"] == 0) & ((rows["ip_lo"] >> np.uint64(32)) == np.uint64(0xFFFF))
        address = (rows["ip_lo"] & np.uint64(0xFFFF_FFFF)).astype(np.int64)
        keep &= ~(v4 & ((address >> 16) == (int(LINK_LOCAL.network_address) >> 16)))
        keep &= ~(~v4 & ((rows["ip_hi"] >> np.uint64(54)) == np.uint64(LINK_LOCAL6 >> 54)))
        self.rows = r = {name: col[keep] for name, col in rows.items()}
        self.v6 = ~v4[keep]
        self.vlan = np.array([v if v is not None else -1 for v in map(nb.link_vlan, r["link"].tolist())],
                             dtype=np.int64)
        registry = _Registry(site)
        self.ip_registered = registry.has("ip", (r["ip_hi"], r["ip_lo"]), self.vlan)
        self.mac_registered = registry.has("mac", (np.zeros(len(self.vlan), dtype=np.uint64), r["mac"]), self.vlan)
        self.pair_registered = registry.has("pair", (r["ip_hi"], r["ip_lo"], r["mac"]), self.vlan)
        # an address is foreign to a registered MAC only when the MAC has a binding of its family (an IPv4
        # binding says nothing of the host's SLAAC addresses, an IPv6 one nothing of its IPv4 address), and an
        # IPv6 pair is unregistered only where the registry holds IPv6 at all
        no_mac = np.zeros(len(self.vlan), dtype=np.uint64)
        self.mac_registered_family = np.where(self.v6, registry.has("mac6", (no_mac, r["mac"]), self.vlan),
                                              registry.has("mac4", (no_mac, r["mac"]), self.vlan))
        self.registry_v6 = registry.v6
        self.in_pool = site.pool_mask(r["ip_hi"], r["ip_lo"])
        arp = np.isin(r["how"], nb.NEIGHBOR_KINDS)
        if site.given("local_networks"):
            self.local = site.local_mask(r["ip_hi"], r["ip_lo"])
        else:
            in_arp = np.isin(mix64(r["link"], r["ip_hi"], r["ip_lo"]),
                             mix64(r["link"][arp], r["ip_hi"][arp], r["ip_lo"][arp]))
            self.local = self.ip_registered | self.in_pool | in_arp
        self.virtual = nb.virtual_router_mac(r["mac"])
        self.router = self._routers()
        self.copies = self._copies()
        # when each MAC was last seen on its link, whatever it did
        self.last_seen: dict[tuple[int, int], int] = {}
        for link, mac, last in zip(r["link"].tolist(), r["mac"].tolist(), r["last_ns"].tolist()):
            self.last_seen[(link, mac)] = max(self.last_seen.get((link, mac), last), last)

    def _routers(self) -> np.ndarray:
        """Which rows' MACs are a router's: the site's routers (by MAC, or by IP through the registry);
        without them, the MACs that source router_min_sources addresses or an off-net one."""
        r, site = self.rows, self.site
        if site.given("routers"):
            macs = {mac for text in site.routers if _is_ip(text) for mac in site.macs_for_ip(text)}
            router = site.router_mac_mask(r["mac"])
            if macs:
                router |= np.isin(r["mac"], np.array(sorted(macs), dtype=np.uint64))
            return router
        source = r["how"] == nb.IP_SOURCE
        group = mix64(r["link"], r["mac"])
        counts: dict[int, int] = {}
        offnet: set[int] = set()
        for g, local in zip(group[source].tolist(), self.local[source].tolist()):
            counts[g] = counts.get(g, 0) + 1
            if not local:
                offnet.add(g)
        routers = {g for g, n in counts.items() if n >= self.detector.params["router_min_sources"]} | offnet
        return np.isin(group, np.array(sorted(routers), dtype=np.uint64))

    def _copies(self) -> dict[tuple[int, int, int, int], nb.Copy]:
        """(link, address halves, MAC) of the ARP claimants that are corrupted copies of another claimant of the
        address (neighbors.corrupted_copies): frames with bit errors, which no switch enforcing the registry
        ever saw."""
        r = self.rows
        arp = np.flatnonzero(np.isin(r["how"], nb.NEIGHBOR_KINDS))
        if len(arp) == 0:
            return {}
        address = mix64(r["link"][arp], r["ip_hi"][arp], r["ip_lo"][arp])
        pairs = np.unique(np.stack([address, r["mac"][arp]]), axis=1)
        keys, macs = np.unique(pairs[0], return_counts=True)
        contested = np.isin(address, keys[macs >= 2])
        claimants: dict[int, dict[int, list[int]]] = {}
        for key, i in zip(address[contested].tolist(), arp[contested].tolist()):
            claimants.setdefault(key, {}).setdefault(int(r["mac"][i]), []).append(i)
        out = {}
        for macs_of in claimants.values():
            copies = nb.corrupted_copies({mac: nb.Claimant(int(r["count"][i].sum()), int(r["damaged"][i].sum()),
                                                           int(np.bitwise_or.reduce(r["damage"][i])))
                                          for mac, i in macs_of.items()})
            for mac, copy in copies.items():
                i = macs_of[mac][0]
                out[(int(r["link"][i]), int(r["ip_hi"][i]), int(r["ip_lo"][i]), mac)] = copy
        return out

    def findings(self) -> list[Finding]:
        r = self.rows
        source = r["how"] == nb.IP_SOURCE
        # what is judged: ARP pairs, and the traffic of local sources from MACs that are no router's
        judged = ~source | (self.local & ~self.router & ~self.virtual)
        foreign_ip = judged & self.ip_registered & ~self.pair_registered
        foreign_mac = (judged & ~self.ip_registered & self.mac_registered & ~self.pair_registered
                       & self.mac_registered_family)
        unknown = (judged & ~self.ip_registered & ~self.mac_registered & ~self.in_pool & self.local
                   & ~self.router & ~self.virtual & (~self.v6 | self.registry_v6))
        out = []
        pairs: dict[tuple[int, int, int, int], list[int]] = {}
        for i in np.flatnonzero(foreign_ip | foreign_mac).tolist():
            pairs.setdefault((int(r["link"][i]), int(r["ip_hi"][i]), int(r["ip_lo"][i]), int(r["mac"][i])),
                             []).append(i)
        for (link, hi, lo, mac), index in pairs.items():
            finding = self._pair_finding(link, hi, lo, mac, np.array(index))
            if finding is not None:
                out.append(finding)
        by_link: dict[int, list[int]] = {}
        for i in np.flatnonzero(unknown).tolist():
            by_link.setdefault(int(r["link"][i]), []).append(i)
        out += [self._unknown_finding(link, np.array(index)) for link, index in by_link.items()]
        return out

    def _pair_finding(self, link, hi, lo, mac, index) -> Finding | None:
        r, site = self.rows, self.site
        ip = ip_text(hi, lo)
        vlan = nb.link_vlan(link)
        who = mac_to_str(mac)
        hows = {int(r["how"][i]): int(r["count"][i]) for i in index}
        claims = sum(hows.get(h, 0) for h in CLAIMS)
        leases = sum(hows.get(h, 0) for h in nb.LEASES)
        uses = any(h not in nb.LEASES for h in hows)     # on the wire, not only leased
        protocol = "Neighbor Discovery" if any(h in nb.ND_KINDS for h in hows) else "ARP"
        unsolicited = int(r["unsolicited"][index].sum())
        first, last = int(r["first_ns"][index].min()), int(r["last_ns"][index].max())
        owners = sorted(site.macs_for_ip(ip, vlan))
        problems: list[tuple[str, str]] = []
        notes: list[str] = []
        basis: list[Basis] = []
        copy = self.copies.get((link, hi, lo, mac))
        if copy is not None:
            # low, and of low confidence (a rule basis): a damaged frame, not a host on the address
            problems.append(("low", f"claims {ip} only in {nb.copies_text([copy])}"))
            basis = [Basis("low", f"the claimant is {nb.copies_text([copy])}: a damaged frame, not a host")]
        elif owners:
            owner_text = ", ".join(mac_to_str(o) for o in owners)
            seen = [self.last_seen[(link, o)] for o in owners if (link, o) in self.last_seen]
            active = any(t >= first for t in seen)
            if bool(self.router[index].any()) and not active:
                return None       # a router answering for a host elsewhere: proxy ARP
            how_text = ", ".join(f"{n:,}x {nb.HOW_NAMES[h]}" for h, n in sorted(hows.items()))
            if leases:
                problems.append(("high", f"was leased {ip}, registered to {owner_text}, by a DHCP server "
                                         f"({plural(leases, 'ACK')}): the server's configuration contradicts the "
                                         f"registry, or a rogue server answers"))
            # the registry is the point of the rule: a registered address claimed (ARP reply, gratuitous ARP,
            # Neighbor Advertisement) by a MAC it does not bind is high, used (requests, traffic) medium, whether
            # the owner is seen or not; what the owner did only changes the likely explanation
            if active:
                why = "while the registered MAC is active"
            elif seen:
                why = (f"after the registered MAC was last seen ({iso_time(max(seen))}): a replaced NIC or a "
                       f"stale registry if it is the same host, a host that took an absent owner's address if not")
            else:
                why = ("while the registered MAC never appears in the capture: a stale registry, or a host that "
                       "took an absent owner's address")
            if claims:
                unasked = f"{',' if active else ';'} {unsolicited:,} replies unsolicited" if unsolicited else ""
                problems.append(("high", f"claims {ip}, registered to {owner_text}, in {protocol} ({how_text}) "
                                         f"{why}{unasked}"))
            elif uses:
                problems.append(("medium", f"uses {ip}, registered to {owner_text} ({how_text}), {why}"))
        own = sorted(site.ips_for_mac(mac, vlan))
        if own and copy is None:
            pool = bool(site.in_pool(ip))
            if not owners and leases and not pool:
                problems.append(("high", f"was leased {ip} by a DHCP server ({plural(leases, 'ACK')}), while the "
                                         f"registry binds it to {', '.join(own[:LISTED])}: the server's "
                                         f"configuration contradicts the registry, or a rogue server answers"))
            elif not owners:
                problems.append(("low" if pool else "medium",
                                 f"uses {ip}{' (a dynamic pool address)' if pool else ''}, while the registry "
                                 f"binds it to {', '.join(own[:LISTED])}"))
            else:
                notes.append(f"the registry binds {who} to {', '.join(own[:LISTED])}")
        if not problems:
            return None
        severity = max((sev for sev, _ in problems), key=["info", "low", "medium", "high"].index)
        where = nb.link_text(link)
        msg = f"{who}{where} " + "; ".join(text for _, text in sorted(problems, key=lambda p: p[0] != severity))
        msg += f", over {(last - first) / NS:,.1f} s." + "".join(f" {note[0].upper()}{note[1:]}." for note in notes)
        if claims and owners and severity == "high":
            msg += " A switch enforcing IP-MAC-port binding would drop these frames."
        frames = [f for i in index.tolist() for f in (r["first_frame"][i], r["last_frame"][i])]
        evidence = {
            "ip": ip, "mac": who, "registered_macs": [mac_to_str(o) for o in owners],
            "registered_ips": own, "observations": {nb.HOW_NAMES[h]: n for h, n in sorted(hows.items())},
            "unsolicited_replies": unsolicited, "binding_sources": self._sources(ip, vlan, mac),
            "evidence_frames": evidence_frames(np.unique(np.array(frames, dtype=np.int64))),
        }
        if vlan is not None:
            evidence["vlan"] = vlan
        return self.detector.finding(severity, msg, identifier=f"{ip} {who}", first_seen=first, last_seen=last,
                                     n=int(r["count"][index].sum()), src_ip=ip, src_mac=who, evidence=evidence,
                                     basis=basis)

    def _sources(self, ip: str, vlan, mac: int) -> list[str]:
        """Where the bindings of the address and of the MAC were declared (file name:line)."""
        # the file's name, not its path: where the site file lies is the user's business, not the finding's
        return sorted({Path(b.source).name for b in self.site.bindings
                       if (b.ip == ip or b.mac == mac) and (vlan is None or b.vlan is None or b.vlan == vlan)})[:LISTED]

    def _unknown_finding(self, link: int, index: np.ndarray) -> Finding:
        r = self.rows
        seen: dict[tuple[str, str], list[int]] = {}
        for i in index.tolist():
            seen.setdefault((ip_text(r["ip_hi"][i], r["ip_lo"][i]), mac_to_str(r["mac"][i])), []).append(i)
        pairs = sorted(seen, key=lambda p: min(r["first_ns"][i] for i in seen[p]))
        first, last = int(r["first_ns"][index].min()), int(r["last_ns"][index].max())
        listing = ", ".join(f"{ip} at {mac}" for ip, mac in pairs[:LISTED])
        pools = "outside the dynamic pools" if self.site.given("dynamic_pools") else "(the site file names no pools)"
        msg = (f"{plural(len(pairs), 'unregistered address-MAC pair')}{nb.link_text(link)} {pools}: {listing}"
               + (f", +{len(pairs) - LISTED:,} more" if len(pairs) > LISTED else "")
               + ": hosts the registry does not know")
        frames = [r["first_frame"][seen[p][0]] for p in pairs]
        evidence = {"pairs": [{"ip": ip, "mac": mac, "packets": int(r["count"][seen[(ip, mac)]].sum())}
                              for ip, mac in pairs[:UNKNOWN_LISTED]],
                    "pairs_total": len(pairs),
                    "evidence_frames": evidence_frames(np.array(frames, dtype=np.int64))}
        vlan = nb.link_vlan(link)
        if vlan is not None:
            evidence["vlan"] = vlan
        return self.detector.finding("low", msg, identifier=f"unregistered{nb.link_text(link)}", first_seen=first,
                                     last_seen=last, n=len(pairs), evidence=evidence)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True

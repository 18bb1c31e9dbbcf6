"""arp-spoof: one IP address answered for by two MACs, and the MAC that answers for other hosts' addresses.

ARP (RFC 826) believes whoever speaks last: a host that sends "10.0.0.1 is
at my MAC" to another host, unasked, takes the traffic the other host sends
to 10.0.0.1. A spoofer that tells each of two hosts the other's address is
at its own MAC sits in the middle of their conversation and repeats the lie
every few seconds, before the caches expire. No registry is needed to see
it: the real owners keep telling the truth in their own ARP packets.

This rule reads the IP-MAC observations of detectors/neighbors.py (ARP
sender pairs always, reply target pairs, as Wireshark's
`check_for_duplicate_addresses` compares them) and finds each IP claimed
by two MACs within `conflict_window_s` of each other (each claim that
follows another MAC's is a change). The MAC that contradicts the others is
the suspect: the one that sends the claims (not only appears as a reply's
target), unsolicited replies and gratuitous ARPs first, then the one that
contradicts more addresses, then the one with a mismatching Ethernet
source, then the newcomer. Per suspect MAC one finding:

- high: it claims two or more addresses, each contradicted back and forth
  (two changes or more) by another MAC, different MACs for different
  addresses, with unsolicited replies or gratuitous ARPs: a man in the
  middle; or it took an address from another MAC with `repeated_changes`
  unsolicited replies or more, each sent to a host (not broadcast): the
  poisoning of one direction, which announcing hosts and failing-over
  routers do not do (they broadcast gratuitous ARP, RFC 5227 twice);
- medium: the claims of one address changed hands `repeated_changes` times
  or more (arpwatch's "flip flop", repeated);
- low: one or two changes: a replaced NIC, a failover, an address handed to
  another host.

The finding names the signs that make spoofing likelier: unsolicited
replies (no request for the address from their target in the second
before), their period, the number of addresses the MAC claims, the
gateway's address among them (a site router, or the address of a MAC that
carries traffic to `gateway_min_destinations` off-net addresses or more),
an Ethernet source other than the ARP sender (arpwatch's "ethernet
mismatch").

IPv6 is judged alike over Neighbor Discovery (RFC 4861), which believes
the latest advertisement with the O (override) flag as ARP believes the
latest reply: a Neighbor Advertisement's target and target link-layer
address option are its claim (an answer; unsolicited when its S flag is
clear and it is sent to one host; an announcement when sent unsolicited to
all nodes), a Neighbor Solicitation's source and source link-layer
address its sender pair. Link-local addresses are judged too: the
router's fe80:: address is the one a spoofer takes. Advertisements without
the O flag (proxies, anycast) change no cached address and no claim.

An IP claimed by a virtual router MAC (VRRP, HSRP, GLBP) stays with that
MAC when the routers fail over, and a proxy-ARP router claims many
addresses that nobody else claims on the link: neither is a conflict.
"""
from __future__ import annotations

import numpy as np

from ..decode.addr import mac_to_str
from ..findings import Finding, iso_time
from ..units import NS
from . import neighbors as nb
from .base import (
    ALERT_SECONDS,
    COUNT,
    AnalysisContext,
    Detector,
    Param,
    Range,
    check_merge,
    evidence_frames,
    ip_text,
    mix64,
    register,
)

LISTED = 6                 # addresses or MACs named in a message
IPS_IN_EVIDENCE = 64


@register
class ArpSpoof(Detector):
    rule_id = "arp-spoof"
    APP_TABLES = ("nd",)
    PARAMS = {
        "conflict_window_s": Param(float, 600.0, "seconds within which two MACs claiming one IP "
                                                                "contradict each other", Range(1, 86400),
                                   "Longer catches slow re-poisoning but counts an address handed to another "
                                   "host after a short DHCP lease as a change; shorter misses a spoofer that "
                                   "repeats its lie less often than the window."),
        "repeated_changes": Param(int, 3, "changes of one address's MAC from which the conflict is repeated "
                                          "(medium), and unsolicited replies for a taken address from which it is "
                                          "poisoning (high)", COUNT,
                                  "A failover and its failback make two; a spoofer fighting the owner makes one "
                                  "per lie. Lower reports failbacks, higher waits for more lies."),
        "gateway_min_destinations": Param(int, 8, "off-net addresses a MAC must carry traffic to for it to be "
                                                  "the gateway", Range(1, 32),
                                          "Fewer takes a host that talks to a few NATed addresses for a "
                                          "router; more needs a longer capture to see the gateway."),
    }
    ALERTS = {
        "suppress_s": Param(float, 300.0, "least seconds between two events about one suspect MAC", ALERT_SECONDS,
                            "A spoofer repeats its replies every few seconds; a shorter interval raises an event "
                            "per lie."),
        "resolve_s": Param(float, 600.0, "seconds without a conflicting claim before the alert is resolved",
                           ALERT_SECONDS, "The conflict window: a poisoned cache entry lives about as long."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        # the window is the observations' own (each change is counted as the claims arrive)
        self.neighbors = nb.Neighbors(ip_destinations=True, nd=True,
                                      conflict_window_ns=int(self.params["conflict_window_s"] * NS))

    def update(self, batch) -> None:
        self.neighbors.update(batch)

    def merge(self, other: ArpSpoof) -> ArpSpoof:
        check_merge(self, other)
        self.neighbors.merge(other.neighbors)
        return self

    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        return _Conflicts(self).findings()


class _Conflicts:
    """The conflicted addresses of one state and the findings about their suspects."""

    def __init__(self, detector: ArpSpoof):
        self.detector = detector
        self.params = detector.params
        rows = detector.neighbors.rows
        arp = np.isin(rows["how"], nb.NEIGHBOR_KINDS)
        self.rows = {name: col[arp] for name, col in rows.items()}
        self.destinations = {name: col[~arp & (rows["how"] == nb.IP_DESTINATION)] for name, col in rows.items()}

    def findings(self) -> list[Finding]:
        r = self.rows
        if len(r["key"]) == 0:
            return []
        ip_key = mix64(r["link"], r["ip_hi"], r["ip_lo"])
        changes: dict[int, int] = {}
        for key, count in zip(ip_key.tolist(), r["changes"].tolist()):
            changes[key] = changes.get(key, 0) + count
        conflicted = {key for key, count in changes.items() if count}
        if not conflicted:
            return []
        # per conflicted address, its claimants: MAC -> row indices
        claimants: dict[int, dict[int, list[int]]] = {}
        for i in np.flatnonzero(np.isin(ip_key, np.array(sorted(conflicted), dtype=np.uint64))).tolist():
            claimants.setdefault(int(ip_key[i]), {}).setdefault(int(r["mac"][i]), []).append(i)
        sender = np.isin(r["how"], nb.SENDERS)
        # how many conflicted addresses each MAC (on its link) sends claims for
        contradicts: dict[tuple[int, int], int] = {}
        for macs in claimants.values():
            for mac, index in macs.items():
                if sender[index].any():
                    link = int(r["link"][index[0]])
                    contradicts[(link, mac)] = contradicts.get((link, mac), 0) + 1
        suspects: dict[tuple[int, int], list[int]] = {}
        for key, macs in claimants.items():
            link = int(r["link"][next(iter(macs.values()))[0]])

            def rank(mac, macs=macs, link=link):
                index = macs[mac]
                loud = int(r["unsolicited"][index].sum()) + int(
                    r["count"][index][np.isin(r["how"][index], nb.ANNOUNCEMENTS)].sum())
                return (bool(sender[index].any()), loud > 0, contradicts.get((link, mac), 0),
                        int(r["mismatched"][index].sum()) > 0, int(r["first_ns"][index].min()))

            suspect = max(macs, key=rank)
            suspects.setdefault((link, suspect), []).append(key)
        self.claimants, self.changes, self.sender = claimants, changes, sender
        self.gateway_macs = self._gateway_macs()
        return [self._finding(link, mac, keys) for (link, mac), keys in suspects.items()]

    def _gateway_macs(self) -> set[tuple[int, int]]:
        """(link, MAC) of the MACs that carry traffic to gateway_min_destinations off-net addresses or more.
        Off-net: outside the site's local networks, or without them, never claimed in ARP on the link."""
        d = self.destinations
        if len(d["key"]) == 0:
            return set()
        site = self.detector.site
        if site.given("local_networks"):
            off = ~site.local_mask(d["ip_hi"], d["ip_lo"])
        else:
            seen = np.unique(mix64(self.rows["link"], self.rows["ip_hi"], self.rows["ip_lo"]))
            off = ~np.isin(mix64(d["link"], d["ip_hi"], d["ip_lo"]), seen)
        count: dict[tuple[int, int], int] = {}
        for link, mac in zip(d["link"][off].tolist(), d["mac"][off].tolist()):
            count[(link, mac)] = count.get((link, mac), 0) + 1
        return {pair for pair, n in count.items() if n >= self.params["gateway_min_destinations"]}

    def _finding(self, link: int, mac: int, keys: list[int]) -> Finding:
        r, sender = self.rows, self.sender
        site = self.detector.site
        mine = np.flatnonzero((r["link"] == link) & (r["mac"] == mac))
        own_sender = mine[sender[mine]]
        addresses = []
        for key in sorted(keys, key=lambda k: int(min(r["first_ns"][i] for i in self.claimants[k][mac]))):
            macs = self.claimants[key]
            first = macs[mac][0]
            ip = ip_text(r["ip_hi"][first], r["ip_lo"][first])
            others = {other: index for other, index in macs.items() if other != mac}
            gateway = (site.given("routers") and site.is_router(ip)) or any(
                (link, other) in self.gateway_macs for other in others)
            addresses.append({"key": key, "ip": ip, "changes": self.changes[key], "others": others,
                              "mine": macs[mac], "all": [i for index in macs.values() for i in index],
                              "gateway": bool(gateway),
                              "claims": bool(sender[macs[mac]].any())})
        # the man in the middle: two or more addresses it claims, each contradicted back and forth, by
        # different owners, with claims nobody asked for
        fought = [a for a in addresses if a["claims"] and a["changes"] >= 2]
        owners = {other for a in fought for other in a["others"]}
        index = np.concatenate([a["mine"] for a in addresses])
        unsolicited = int(r["unsolicited"][index].sum())
        gratuitous = int(r["count"][index][np.isin(r["how"][index], nb.ANNOUNCEMENTS)].sum())
        replies = int(r["count"][index][np.isin(r["how"][index], nb.ANSWERS)].sum())
        mitm = len(fought) >= 2 and len(owners) >= 2 and unsolicited + gratuitous > 0
        # poisoning of one direction: an address taken from its owner with targeted replies nobody asked for,
        # repeated to keep the victims' caches (announcing hosts and failing-over routers broadcast gratuitous
        # ARP instead: RFC 5227 ANNOUNCE_NUM is 2)
        poisoned = [a for a in addresses if a["claims"] and int(r["unsolicited"][a["mine"]].sum())
                    >= self.params["repeated_changes"]]
        most = max(a["changes"] for a in addresses)
        total = sum(a["changes"] for a in addresses)
        if mitm or poisoned:
            severity = "high"
        elif most >= self.params["repeated_changes"]:
            severity = "medium"
        else:
            severity = "low"

        who = mac_to_str(mac)
        where = nb.link_text(link)
        # IPv6 rows (Neighbor Discovery) say advertisements, IPv4 rows (ARP) replies
        v6 = bool(np.isin(r["how"][index], nb.ND_KINDS).any())
        v4 = bool((~np.isin(r["how"][index], nb.ND_KINDS)).any())
        answers = " and ".join((["ARP replies"] if v4 else []) + (["Neighbor Advertisements"] if v6 else []))
        unasked = " and ".join((["no request from their target in the second before"] if v4 else [])
                               + (["S flag clear, sent to one host"] if v6 else []))
        claimed = sorted({ip_text(r["ip_hi"][i], r["ip_lo"][i]) for i in own_sender.tolist()})
        listing = "; ".join(f"{a['ip']} also by {', '.join(mac_to_str(o) for o in list(a['others'])[:LISTED])}"
                            for a in addresses[:LISTED])
        handed = ", ".join(f"{a['ip']} from {', '.join(mac_to_str(o) for o in list(a['others'])[:LISTED])}"
                           for a in addresses[:LISTED])
        if len(addresses) > LISTED:
            listing += f"; +{len(addresses) - LISTED} more"
            handed += f", +{len(addresses) - LISTED} more"
        every = np.array([i for a in addresses for i in a["all"]])
        t0, t1 = int(r["first_ns"][every].min()), int(r["last_ns"][every].max())
        span = (t1 - t0) / NS
        if mitm:
            lead = (f"{who}{where} claims {len(fought)} addresses that other MACs hold, each back and forth "
                    f"({listing}): a man in the middle between their owners")
        elif poisoned:
            lead = (f"{who}{where} took over {handed} with targeted {answers} nobody asked for, repeated: "
                    f"poisoning the caches of the hosts it sends them to")
        elif severity == "medium":
            lead = (f"{who}{where} and another MAC claim the same address, the claims changing hands {most:,} "
                    f"times ({listing}): a repeated conflict, spoofing or two hosts configured with one address")
        else:
            lead = (f"{who}{where} took over {handed} ({total} change(s)): a replaced NIC, a failover or an "
                    f"address handed to another host, unless it repeats")
        signs = []
        if unsolicited:
            signs.append(f"{unsolicited:,} of its {replies:,} {answers} unsolicited ({unasked})"
                         f"{self._period(addresses)}")
        if gratuitous:
            signs.append(f"{gratuitous:,} {'unsolicited multicast advertisement(s)' if v6 else 'gratuitous ARP(s)'}")
        if len(claimed) >= 2:
            signs.append(f"it claims {len(claimed)} addresses ({', '.join(claimed[:LISTED])}"
                         + (", ..." if len(claimed) > LISTED else "") + ")")
        gateways = [a["ip"] for a in addresses if a["gateway"]]
        if gateways:
            signs.append(f"the gateway's address claimed ({', '.join(gateways)})")
        mismatched = int(r["mismatched"][mine].sum())
        if mismatched:
            signs.append(f"{mismatched:,} {'ND' if v6 else 'ARP'} packet(s) whose Ethernet source is not their "
                         f"{'link-layer address option' if v6 else 'ARP sender MAC'}")
        if not any(a["claims"] for a in addresses):
            signs.append(f"it sent no {'' if v6 else 'ARP '}claim itself: only replies to it name it")
        msg = lead + f"; claims seen over {span:,.1f} s." + (f" Signs: {'; '.join(signs)}." if signs else "")

        frames = np.concatenate([r["first_frame"][every], r["last_frame"][every]])
        evidence = {
            "mac": who, "addresses_claimed": claimed,
            "conflicts": [self._conflict_evidence(a) for a in addresses[:IPS_IN_EVIDENCE]],
            "changes": total, "unsolicited_replies": unsolicited, "replies": replies, "gratuitous": gratuitous,
            "ethernet_mismatches": mismatched, "gateway_addresses": gateways, "man_in_the_middle": mitm,
            "poisoned": [a["ip"] for a in poisoned],
            "evidence_frames": evidence_frames(np.unique(frames)),
        }
        vlan = nb.link_vlan(link)
        if vlan is not None:
            evidence["vlan"] = vlan
        if self.detector.neighbors.dropped:
            evidence["observations_not_kept"] = self.detector.neighbors.dropped
        identifier = who if not link else f"{who}{where}"
        return self.detector.finding(severity, msg, identifier=identifier, first_seen=t0, last_seen=t1, n=total,
                                     src_mac=who, src_ip=addresses[0]["ip"], evidence=evidence)

    def _period(self, addresses: list[dict]) -> str:
        """How often the suspect repeats its unasked claims of one address (the address it repeats most)."""
        r = self.rows
        best = (0, 0.0)
        for a in addresses:
            index = np.array(a["mine"])
            loud = (r["unsolicited"][index]
                    + np.where(np.isin(r["how"][index], nb.ANNOUNCEMENTS), r["count"][index], 0)).sum()
            if loud >= 3 and loud > best[0]:
                best = (int(loud), (r["last_ns"][index].max() - r["first_ns"][index].min()) / NS / (loud - 1))
        return f", about one every {best[1]:.1f} s for one address" if best[0] else ""

    def _conflict_evidence(self, a: dict) -> dict:
        return {"ip": a["ip"], "changes": a["changes"], "gateway": a["gateway"],
                "claims": [self._claim(mac, index) for mac, index in [(None, a["mine"]), *a["others"].items()]]}

    def _claim(self, mac, index: list[int]) -> dict:
        r = self.rows
        out = {"mac": mac_to_str(r["mac"][index[0]])}
        out.update({nb.HOW_NAMES[int(r["how"][i])]: int(r["count"][i]) for i in index})
        out["unsolicited"] = int(r["unsolicited"][index].sum())
        out["first_seen"] = iso_time(int(r["first_ns"][index].min()))
        out["last_seen"] = iso_time(int(r["last_ns"][index].max()))
        return out

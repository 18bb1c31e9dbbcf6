"""arp-spoof: one IP address answered for by two MACs, and the MAC that answers for other hosts' addresses.

ARP (RFC 826) believes whoever speaks last: a host that sends "10.0.0.1 is
at my MAC" to another host, unasked, takes the traffic the other host sends
to 10.0.0.1. A spoofer that tells each of two hosts the other's address is
at its own MAC sits in the middle of their conversation and repeats the lie
every few seconds, before the caches expire. No registry is needed to see
it: the real owners keep telling the truth in their own ARP packets.

This rule reads the IP-MAC observations of detect/neighbors.py (ARP
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

Two more readings (issue 27):

- the gateway's address is bound by the link's traffic too: a MAC that
  carries traffic to gateway_min_destinations off-net addresses and to
  which packets for an address of the link are sent (or which claims that
  address in ARP, at any time of the capture) holds it. An ARP claim of
  that address by another MAC, within conflict_window_s of those packets,
  is a change even when the gateway last spoke ARP long before: one
  spoofed reply and request claiming the gateway (Cain & Abel's way),
  which ARP alone saw as no conflict, is low;
- corrupted copies are no claimants (neighbors.corrupted_copies): a
  "MAC" a bit or three from another claimant of the address, in a handful
  of frames, each damaged in another way besides, is that claimant's frame
  with bit errors, which a real network drops at the FCS check. An address
  only copies contradict is one low finding per original MAC, saying so
  (a judgement of confidence: the confidence model's rule basis once it
  lands); where two hosts remain, they are judged without the copies (the
  changes the copies made, one each and one for the return after it,
  taken off).
"""
from __future__ import annotations

import numpy as np

from ..decode.addr import mac_to_str
from ..detect import neighbors as nb
from ..detect.columns import ip_text
from ..detect.confidence import Basis
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.hashing import mix64
from ..findings import Finding, iso_time
from ..rules import ALERT_SECONDS, COUNT, Param, Range
from ..units import NS, plural

LISTED = 6                 # addresses or MACs named in a message
IPS_IN_EVIDENCE = 64


@register
class ArpSpoof(Detector):
    rule_id = "arp-spoof"
    EVE_SIGNATURE = (1, "Potentially Bad Traffic")
    # what its findings rest on beyond what it saw (detect.confidence): claims over time, and unasked replies
    QUALITY_NEEDS = frozenset({"timing"})
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
        if len(self.rows["key"]) == 0:
            return []
        self.gateway_macs = self._gateway_macs()
        self.bound = self._gateway_bindings()
        r = self.rows
        ip_key = mix64(r["link"], r["ip_hi"], r["ip_lo"])
        changes: dict[int, int] = {}
        for key, count in zip(ip_key.tolist(), r["changes"].tolist()):
            changes[key] = changes.get(key, 0) + count
        # the gateway's address claimed in ARP by a MAC other than the one the link's traffic reaches it at is a
        # change too, however long ago the gateway last spoke ARP
        for key in self.bound:
            changes[key] = max(changes.get(key, 0), 1)
        conflicted = {key for key, count in changes.items() if count}
        if not conflicted:
            return []
        # per conflicted address, its claimants: MAC -> row indices
        claimants: dict[int, dict[int, list[int]]] = {}
        for i in np.flatnonzero(np.isin(ip_key, np.array(sorted(conflicted), dtype=np.uint64))).tolist():
            claimants.setdefault(int(ip_key[i]), {}).setdefault(int(r["mac"][i]), []).append(i)
        # corrupted copies of a claimant are no claimants: an address they alone contradict is reported as what it
        # is (per original MAC), the others are judged without them
        self.copies: dict[int, list[nb.Copy]] = {}
        self.corrupted: dict[int, dict[int, list[int]]] = {}
        corrupted: dict[tuple[int, int], list[int]] = {}
        for key, macs in list(claimants.items()):
            copies = nb.corrupted_copies({mac: nb.Claimant(int(r["count"][index].sum()), int(r["damaged"][index].sum()),
                                                           int(np.bitwise_or.reduce(r["damage"][index])))
                                          for mac, index in macs.items()})
            if not copies:
                continue
            self.copies[key] = sorted(copies.values(), key=lambda c: int(r["first_ns"][macs[c.mac]].min()))
            hosts = {mac: index for mac, index in macs.items() if mac not in copies}
            if len(hosts) >= 2:
                claimants[key] = hosts
                # each copy's claim was a change, and so was the return to the host after it
                copy_frames = sum(c.frames for c in copies.values())
                changes[key] = max(1, int(r["changes"][[i for index in hosts.values() for i in index]].sum())
                                   - copy_frames)
            else:
                self.corrupted[key] = claimants.pop(key)
                link = int(r["link"][next(iter(macs.values()))[0]])
                corrupted.setdefault((link, next(iter(hosts))), []).append(key)
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
        return ([self._finding(link, mac, keys) for (link, mac), keys in suspects.items()]
                + [self._corrupted_finding(link, mac, keys) for (link, mac), keys in corrupted.items()])

    def _gateway_bindings(self) -> dict[int, dict]:
        """The gateway's addresses claimed in ARP by a MAC the link's traffic does not reach them at: address key ->
        {"macs": the gateway's MACs for it, "rows": the rows of packets sent to it at them (added to self.rows),
        "active": (first, last) time of the gateway's traffic}.

        A gateway MAC (see _gateway_macs) holds an address of the link (one claimed in ARP there) when packets
        are sent to that address at it, or when it claims the address in ARP, at any time of the capture; a claim
        of the address by another unicast MAC that is no virtual router's, while the gateway carries traffic (within
        conflict_window_s of its packets), contradicts it."""
        r, d = self.rows, self.destinations
        if not self.gateway_macs or len(d["key"]) == 0:
            return {}
        window = int(self.params["conflict_window_s"] * NS)
        pairs = sorted(self.gateway_macs)
        gateway = mix64(np.array([link for link, _ in pairs], dtype=np.uint32),
                        np.array([mac for _, mac in pairs], dtype=np.uint64))
        through = np.isin(mix64(d["link"], d["mac"]), gateway)
        on_link = np.unique(mix64(r["link"], r["ip_hi"], r["ip_lo"]))
        d_key = mix64(d["link"], d["ip_hi"], d["ip_lo"])
        ip_key = mix64(r["link"], r["ip_hi"], r["ip_lo"])
        to_gateway = through & np.isin(d_key, on_link) & ~nb.virtual_router_mac(d["mac"])
        held = np.isin(mix64(r["link"], r["mac"]), gateway) & ~nb.virtual_router_mac(r["mac"])
        claims = np.isin(r["how"], nb.SENDERS) & ~nb.virtual_router_mac(r["mac"])
        out: dict[int, dict] = {}
        extra: list[int] = []
        for key in np.unique(np.concatenate([d_key[to_gateway], ip_key[held]])).tolist():
            mine = np.flatnonzero(to_gateway & (d_key == key))
            macs = sorted(set(d["mac"][mine].tolist()) | set(r["mac"][held & (ip_key == key)].tolist()))
            active = through & np.isin(d["mac"], np.array(macs, dtype=np.uint64))
            first, last = int(d["first_ns"][active].min()) - window, int(d["last_ns"][active].max()) + window
            foreign = (claims & (ip_key == key) & ~np.isin(r["mac"], np.array(macs, dtype=np.uint64))
                       & (r["last_ns"] >= first) & (r["first_ns"] <= last))
            if foreign.any():
                start = len(r["key"]) + len(extra)
                extra += mine.tolist()
                out[key] = {"macs": macs, "rows": list(range(start, start + len(mine))),
                            "active": (first + window, last - window)}
        if extra:
            self.rows = {name: np.concatenate([col, d[name][extra]]) for name, col in r.items()}
        return out

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
                              "gateway": bool(gateway), "bound": self.bound.get(key),
                              "copies": self.copies.get(key, []), "claims": bool(sender[macs[mac]].any())})
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
        # the finding's time is its claims'; the packets that bind the gateway's address are evidence too
        claims = every[r["how"][every] != nb.IP_DESTINATION]
        t0, t1 = int(r["first_ns"][claims].min()), int(r["last_ns"][claims].max())
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
        elif any(a["bound"] for a in addresses):
            a = next(a for a in addresses if a["bound"])
            lead = (f"{who}{where} claims {a['ip']} in ARP, the gateway's address, held by {self._bound_text(a)}: a "
                    f"poisoning attempt (one, as Cain & Abel starts) unless the gateway was replaced or failed over "
                    f"to this MAC")
        else:
            lead = (f"{who}{where} took over {handed} ({plural(total, 'change')}): a replaced NIC, a failover or an "
                    f"address handed to another host, unless it repeats")
        signs = []
        if unsolicited:
            signs.append(f"{unsolicited:,} of its {replies:,} {answers} unsolicited ({unasked})"
                         f"{self._period(addresses)}")
        if gratuitous:
            signs.append(plural(gratuitous, "unsolicited multicast advertisement" if v6 else "gratuitous ARP"))
        if len(claimed) >= 2:
            signs.append(f"it claims {len(claimed)} addresses ({', '.join(claimed[:LISTED])}"
                         + (", ..." if len(claimed) > LISTED else "") + ")")
        gateways = [a["ip"] for a in addresses if a["gateway"]]
        if gateways:
            signs.append(f"the gateway's address claimed ({', '.join(gateways)})")
        mismatched = int(r["mismatched"][mine].sum())
        if mismatched:
            signs.append(f"{plural(mismatched, ('ND' if v6 else 'ARP') + ' packet')} whose Ethernet source is not "
                         f"their {'link-layer address option' if v6 else 'ARP sender MAC'}")
        if not any(a["claims"] for a in addresses):
            signs.append(f"it sent no {'' if v6 else 'ARP '}claim itself: only replies to it name it")
        copies = [c for a in addresses for c in a["copies"]]
        if copies:
            signs.append(f"{len(copies):,} corrupted copies of the claimants set aside ("
                         + "; ".join(nb.copies_text([c for c in copies if c.original == o])
                                     for o in dict.fromkeys(c.original for c in copies)) + ")")
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
        if copies:
            evidence["corrupted_copies"] = [_copy_evidence(c) for c in copies[:IPS_IN_EVIDENCE]]
            evidence["corrupted_copies_total"] = len(copies)
        vlan = nb.link_vlan(link)
        if vlan is not None:
            evidence["vlan"] = vlan
        if self.detector.neighbors.dropped:
            evidence["observations_not_kept"] = self.detector.neighbors.dropped
        identifier = who if not link else f"{who}{where}"
        return self.detector.finding(severity, msg, identifier=identifier, first_seen=t0, last_seen=t1, n=total,
                                     src_mac=who, src_ip=addresses[0]["ip"], evidence=evidence)

    def _bound_text(self, a: dict) -> str:
        """Which MAC holds a gateway's address `a` by the link's traffic, and when it last claimed it in ARP."""
        r, bound = self.rows, a["bound"]
        rows = np.array(bound["rows"], dtype=np.int64)
        own = np.array([i for mac in bound["macs"] for i in a["others"].get(mac, []) if r["how"][i] in nb.SENDERS],
                       dtype=np.int64)
        packets = int(r["count"][rows].sum()) if len(rows) else 0
        facts = ([f"{plural(packets, 'packet')} to {a['ip']} sent there"] if packets else []) + [
            f"the link's traffic through it from {iso_time(bound['active'][0])} to "
            f"{iso_time(bound['active'][1])}",
            f"its last ARP claim of it at {iso_time(int(r['last_ns'][own].max()))}" if len(own)
            else "no ARP claim of it from there"]
        return f"{', '.join(mac_to_str(m) for m in bound['macs'][:LISTED])} ({'; '.join(facts)})"

    def _corrupted_finding(self, link: int, original: int, keys: list[int]) -> Finding:
        """Addresses contradicted only by corrupted copies of their one host's MAC: a damaged capture, not a
        conflict. Low, and of low confidence (a rule basis): nothing about these claims makes another host
        likely."""
        r = self.rows
        copies = [c for key in keys for c in self.copies[key]]
        rows = np.array([i for key in keys for index in self.corrupted[key].values() for i in index])
        copy_rows = np.array([i for key in keys for c in self.copies[key] for i in self.corrupted[key][c.mac]])
        ips = [ip_text(r["ip_hi"][self.corrupted[k][original][0]], r["ip_lo"][self.corrupted[k][original][0]])
               for k in keys]
        changes = sum(self.changes[k] for k in keys)
        who, where = mac_to_str(original), nb.link_text(link)
        t0, t1 = int(r["first_ns"][copy_rows].min()), int(r["last_ns"][copy_rows].max())
        more = f" (+{len(ips) - LISTED} more)" if len(ips) > LISTED else ""
        msg = (f"ARP for {', '.join(ips[:LISTED])}{more}{where}: {nb.copies_text(copies)}. They alone make the "
               f"{plural(changes, 'change')} of the address's MAC; a switch or NIC drops such frames at the FCS check: "
               f"no conflict between hosts, a damaged capture or link")
        frames = np.concatenate([r["first_frame"][copy_rows], r["last_frame"][copy_rows]])
        evidence = {"mac": who, "ips": ips[:IPS_IN_EVIDENCE], "changes": changes,
                    "corrupted_copies": [_copy_evidence(c) for c in copies[:IPS_IN_EVIDENCE]],
                    "corrupted_copies_total": len(copies), "frames_of_the_host": int(r["count"][rows].sum())
                    - sum(c.frames for c in copies),
                    "evidence_frames": evidence_frames(np.unique(frames))}
        vlan = nb.link_vlan(link)
        if vlan is not None:
            evidence["vlan"] = vlan
        basis = [Basis("low", f"the other claimants are {nb.copies_text(copies)}: damaged frames, not hosts")]
        return self.detector.finding("low", msg, identifier=f"{who}{where} corrupted copies", first_seen=t0,
                                     last_seen=t1, n=sum(c.frames for c in copies), src_mac=who, src_ip=ips[0],
                                     evidence=evidence, basis=basis)

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


def _copy_evidence(copy: nb.Copy) -> dict:
    return {"mac": mac_to_str(copy.mac), "copy_of": mac_to_str(copy.original), "bits": copy.bits,
            "frames": copy.frames, "damage": nb.damage_text(copy.damage)}

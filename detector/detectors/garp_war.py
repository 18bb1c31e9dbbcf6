"""garp-war: one IPv4 address claimed back and forth by two MACs, bursts of gratuitous ARP, a MAC in two places.

Seed 002: VRRP between two load balancers fell apart, "they started
fighting over the IP addresses", and after "a few minutes of both yelling
gratuitous ARP with the same MAC" the switches flooded unicast traffic. An
ARP packet's sender pair (sha, spa) tells every host and switch on the
link "this address is at this MAC"; this rule reads those claims in the
core ARP columns (requests and replies, op 1 and 2, sender address not
0.0.0.0) and finds the shapes of such a fight:

- a flip-flop (arpwatch db.c "flip flop"): the address claimed by MAC A,
  then B, then A again, the return within `flip_flop_window_s` of A's
  previous claim: medium; `high_alternations` changes of claimant within
  one minute: high (two devices answering for one address, each
  overwriting the other in every cache);
- a gratuitous-ARP burst: more than `max_garps` gratuitous ARPs (sender
  address equal to target address, RFC 5227's announcements among them)
  for one address within 60 s: medium. One VRRP transition sends at most
  5 + 5 (keepalived `VRRP_GARP_REP` 5, then `VRRP_GARP_DELAY` 5 s later
  as many again); more is a fight or a misbehaving stack. In seed 002 both
  masters sent their GARPs from the same virtual MAC, byte-identical
  frames: no flip-flop, only the burst;
- one source MAC claiming one address on two links (interfaces or VLANs)
  within 1 s: medium (a MAC the switches learn on two ports at once); one
  ARP message seen on two links within COPY_S is one frame captured twice
  (two capture interfaces on one segment), not counted;
- an ARP storm, more than `storm_requests` requests on one link within
  100 ms (Wireshark packet-arp.c's storm defaults, counted in aligned
  100 ms bins): low.

Escalation with VRRP runs the other way: the dual-master rule reads this
rule's findings (its AFTER) and raises a dual master to critical when a
burst or flip-flop here is about its virtual addresses or virtual MAC.
That rule can weigh both sides (two masters and the ARP they cause); this
one stays a judgement of ARP alone and says "medium" for the burst, and the
dual-master finding names the burst it chained.

A link is (interface, outer VLAN, inner VLAN): the same address on two
unrelated links is two addresses. One change of claimant (a replaced NIC, a
DHCP lease handed to a new host) is not this rule's business: the IP-MAC
rules judge bindings.

State (mergeable; partitions in time order merge to one pass): the claims of
each address as runs of one MAC (count, GARPs, first/last), GARPs per address
and second, ARP per (source MAC, address, link, second) kept only while
another link may pair with it, and requests per link and 100 ms bin kept
only while they may make a storm; each table bounded by MAX_ROWS.
"""
from __future__ import annotations

import ipaddress

import numpy as np

from ..decode.addr import mac_to_str
from ..findings import SEVERITY_RANK, Finding, iso_time
from ..schema import L_ARP, L_QINQ, L_SRC_MAC, L_VLAN, PacketBatch
from ..units import NS
from .base import (
    ALERT_SECONDS,
    COUNT,
    AnalysisContext,
    Detector,
    Param,
    Range,
    check_merge,
    evidence_frames,
    fold_rows,
    mix64,
    register,
)

ARP_REQUEST, ARP_REPLY = 1, 2            # RFC 826 opcodes
GARP_WINDOW_S = 60                       # the burst window of the specification
FLAP_WINDOW_S = 1.0                      # one MAC on two links this close in time
# One ARP message seen on two links this close in time is one frame captured twice (two capture interfaces
# on one segment, a frame carried with two tags), not a MAC in two places
COPY_S = 0.010
STORM_BIN_NS = 100_000_000               # Wireshark's storm period, 100 ms
ALTERNATION_WINDOW_S = 60                # high_alternations are counted within one minute
MAX_ROWS = 100_000                       # per state table: forged claims by the million must not grow it
LISTED = 8                               # MACs, links or runs named in one message

CLAIM_COLUMNS = {"key": np.uint64, "link": np.uint64, "spa": np.uint32, "mac": np.uint64, "count": np.int64,
                 "garps": np.int64, "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64,
                 "last_frame": np.int64}
CLAIM_REDUCE = {"count": np.add, "garps": np.add, "last_ns": np.maximum, "first_frame": np.minimum,
                "last_frame": np.maximum}
GARP_COLUMNS = {"key": np.uint64, "link": np.uint64, "spa": np.uint32, "second": np.int64, "count": np.int64,
                "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64, "last_frame": np.int64}
SPAN_REDUCE = {"count": np.add, "last_ns": np.maximum, "first_frame": np.minimum, "last_frame": np.maximum}
PLACE_COLUMNS = {"key": np.uint64, "pair": np.uint64, "mac": np.uint64, "spa": np.uint32, "link": np.uint64,
                 "content": np.uint64, "second": np.int64, "count": np.int64, "first_ns": np.int64, "last_ns": np.int64,
                 "first_frame": np.int64, "last_frame": np.int64}
STORM_COLUMNS = {"key": np.uint64, "link": np.uint64, "bin": np.int64, "count": np.int64, "requester": np.uint64,
                 "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64, "last_frame": np.int64}


def _empty(columns: dict) -> dict:
    return {name: np.zeros(0, dtype=dtype) for name, dtype in columns.items()}


def _take(rows: dict, index) -> dict:
    return {name: col[index] for name, col in rows.items()}


def _cap(rows: dict) -> tuple[dict, int]:
    """At most MAX_ROWS rows, the most recent kept; and how many were dropped."""
    extra = len(rows["key"]) - MAX_ROWS
    if extra <= 0:
        return rows, 0
    return _take(rows, np.sort(np.argsort(-rows["last_ns"], kind="stable")[:MAX_ROWS])), extra


def link_text(link: int) -> str:
    """A link as an engineer names it: "VLAN 10", "VLAN 10.20 on interface 1", "" for untagged interface 0."""
    iface, outer, inner = link >> 32, (link >> 16) & 0xFFFF, link & 0xFFFF
    parts = []
    if outer:
        parts.append(f"VLAN {outer}" + (f".{inner}" if inner else ""))
    if iface:
        parts.append(f"interface {iface}")
    return " on ".join(parts)


def links_of(batch: PacketBatch, rows: np.ndarray) -> np.ndarray:
    """Each row's link: interface << 32 | outer VLAN << 16 | inner VLAN (0 where untagged)."""
    layers = batch["layers"][rows]
    outer = np.where((layers & np.uint32(L_VLAN)) != 0, batch["vlan_outer"][rows], 0).astype(np.uint64)
    inner = np.where((layers & np.uint32(L_QINQ)) != 0, batch["vlan_inner"][rows], 0).astype(np.uint64)
    return (batch["iface"][rows].astype(np.uint64) << np.uint64(32)) | (outer << np.uint64(16)) | inner


def _v4(value) -> str:
    return str(ipaddress.IPv4Address(int(value)))


def join_claims(rows: dict) -> dict:
    """Claims of one address in time order, consecutive ones of the same MAC joined into one run."""
    if len(rows["key"]) == 0:
        return rows
    rows = _take(rows, np.lexsort((rows["first_ns"], rows["key"])))
    starts = np.flatnonzero(np.concatenate(([True], (rows["key"][1:] != rows["key"][:-1])
                                            | (rows["mac"][1:] != rows["mac"][:-1]))))
    out = _take(rows, starts)
    for name, ufunc in CLAIM_REDUCE.items():
        out[name] = ufunc.reduceat(rows[name], starts)
    return out


def _windowed_max(times: np.ndarray, weights: np.ndarray, window_ns: int) -> tuple[int, int]:
    """The largest sum of `weights` at sorted `times` within any window of `window_ns` (starting at one of
    them), and the index where that window starts."""
    cumulative = np.concatenate(([0], np.cumsum(weights)))
    ends = np.searchsorted(times, times + window_ns, side="left")
    sums = cumulative[ends] - cumulative[np.arange(len(times))]
    best = int(np.argmax(sums))
    return int(sums[best]), best


@register
class GarpWar(Detector):
    rule_id = "garp-war"
    PARAMS = {
        "flip_flop_window_s": Param(float, 600.0, "seconds within which a MAC's claim coming back after another "
                                                  "MAC's makes a flip-flop", Range(1, 86400),
                                    "Two MACs trading one address within minutes are fighting over it; a laptop "
                                    "that moves between its wired and wireless NIC with one static address does "
                                    "it over hours. Longer windows catch slower fights and such laptops."),
        "high_alternations": Param(int, 10, "changes of claimant of one address within a minute that make the "
                                            "flip-flop high", COUNT,
                                   "Each change rewrites every ARP cache and switch table on the link; ten a "
                                   "minute is a sustained fight, not a failover."),
        "max_garps": Param(int, 10, "gratuitous ARPs for one address within 60 s above which it is a burst "
                                    "(medium)", COUNT,
                           "One VRRP transition sends up to 5 + 5 (keepalived VRRP_GARP_REP, VRRP_GARP_DELAY); "
                           "lower values report every failover, higher ones miss a short fight."),
        "storm_requests": Param(int, 30, "ARP requests on one link within 100 ms above which it is a storm (low)",
                                COUNT,
                                "Wireshark's default (packet-arp.c); an ARP sweep of a /24 exceeds it, a busy "
                                "subnet's normal resolution does not."),
    }
    ALERTS = {
        "suppress_s": Param(float, 60.0, "least seconds between two events about one address, MAC or link",
                            ALERT_SECONDS,
                            "A fight goes on for minutes; shorter intervals repeat it in alerts.jsonl."),
        "resolve_s": Param(float, 120.0, "seconds without new evidence before a GARP war is resolved", ALERT_SECONDS,
                           "Two GARP rounds of a flapping pair are a minute or two apart; shorter values resolve "
                           "and raise it again at each round."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.claims = _empty(CLAIM_COLUMNS)
        self.garps = _empty(GARP_COLUMNS)
        self.places = _empty(PLACE_COLUMNS)
        self.storms = _empty(STORM_COLUMNS)
        self.dropped = 0

    # ---- update -----------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        layers = batch["layers"]
        op = batch["arp_op"]
        arp = np.flatnonzero(((layers & np.uint32(L_ARP)) != 0) & ((op == ARP_REQUEST) | (op == ARP_REPLY)))
        if len(arp) == 0:
            return
        ts, frame = batch["ts_ns"][arp], batch["frame"][arp]
        link = links_of(batch, arp)
        spa, tpa = batch["arp_spa"][arp], batch["arp_tpa"][arp]
        sha = batch["arp_sha"][arp]
        requests = op[arp] == ARP_REQUEST
        self._storms(link[requests], ts[requests], frame[requests], sha[requests])
        # a claim: a sender address other than 0.0.0.0 (RFC 5227 probes) from a unicast MAC
        claim = (spa != 0) & (sha != 0) & ((sha >> np.uint64(40)) & np.uint64(1) == 0)
        if not claim.any():
            return
        ts, frame, link, spa, tpa, sha = ts[claim], frame[claim], link[claim], spa[claim], tpa[claim], sha[claim]
        garp = spa == tpa
        rows = arp[claim]
        has_mac = (batch["layers"][rows] & np.uint32(L_SRC_MAC)) != 0
        source = np.where(has_mac, batch["src_mac"][rows], sha)
        ones = np.ones(len(ts), dtype=np.int64)
        key = mix64(link, spa)
        claims = {"key": key, "link": link, "spa": spa, "mac": sha, "count": ones, "garps": garp.astype(np.int64),
                  "first_ns": ts, "last_ns": ts, "first_frame": frame, "last_frame": frame}
        merged, dropped = _cap(join_claims(_concat(self.claims, _typed(claims, CLAIM_COLUMNS))))
        self.claims = merged
        self.dropped += dropped
        if garp.any():
            second = ts[garp] // NS
            garps = {"key": mix64(link[garp], spa[garp], second), "link": link[garp], "spa": spa[garp],
                     "second": second, "count": ones[garp], "first_ns": ts[garp], "last_ns": ts[garp],
                     "first_frame": frame[garp], "last_frame": frame[garp]}
            self.garps, dropped = _cap(fold_rows(self.garps, _typed(garps, GARP_COLUMNS), "key", SPAN_REDUCE))
            self.dropped += dropped
        second = ts // NS
        content = mix64(op[rows], sha, spa, batch["arp_tha"][rows], tpa)
        places = {"key": mix64(source, spa, link, second), "pair": mix64(source, spa), "mac": source, "spa": spa,
                  "link": link, "content": content, "second": second, "count": ones, "first_ns": ts, "last_ns": ts,
                  "first_frame": frame, "last_frame": frame}
        self.places = self._settle_places(fold_rows(self.places, _typed(places, PLACE_COLUMNS), "key", SPAN_REDUCE))

    def _storms(self, link, ts, frame, sha) -> None:
        if len(ts) == 0:
            return
        bins = ts // STORM_BIN_NS
        rows = {"key": mix64(link, bins), "link": link, "bin": bins, "count": np.ones(len(ts), dtype=np.int64),
                "requester": sha, "first_ns": ts, "last_ns": ts, "first_frame": frame, "last_frame": frame}
        self.storms = self._settle_storms(fold_rows(self.storms, _typed(rows, STORM_COLUMNS), "key", SPAN_REDUCE))

    def _settle_storms(self, rows: dict) -> dict:
        """Drop the 100 ms bins that can no longer make a storm: complete (not at either end of the state's
        time, where a neighbouring batch or partition may add to them) and at most storm_requests."""
        if len(rows["key"]) == 0:
            return rows
        complete = (rows["bin"] > rows["bin"].min()) & (rows["bin"] < rows["bin"].max())
        keep = ~complete | (rows["count"] > self.params["storm_requests"])
        rows, dropped = _cap(_take(rows, keep))
        self.dropped += dropped
        return rows

    def _settle_places(self, rows: dict) -> dict:
        """Drop the seconds of a (MAC, address) seen on one link only that no later or earlier second can pair
        with any more (two seconds from either end of the state's time)."""
        if len(rows["key"]) == 0:
            return rows
        pair = rows["pair"]
        pairs_by_link = pair[np.unique(mix64(pair, rows["link"]), return_index=True)[1]]
        values, links = np.unique(pairs_by_link, return_counts=True)
        lone = ~np.isin(pair, values[links >= 2])
        settled = (rows["second"] > rows["second"].min() + 2) & (rows["second"] < rows["second"].max() - 2)
        rows, dropped = _cap(_take(rows, ~(lone & settled)))
        self.dropped += dropped
        return rows

    def merge(self, other: GarpWar) -> GarpWar:
        check_merge(self, other)
        self.claims, dropped = _cap(join_claims(_concat(self.claims, other.claims)))
        self.dropped += dropped + other.dropped
        self.garps, dropped = _cap(fold_rows(self.garps, other.garps, "key", SPAN_REDUCE))
        self.dropped += dropped
        self.places = self._settle_places(fold_rows(self.places, other.places, "key", SPAN_REDUCE))
        self.storms = self._settle_storms(fold_rows(self.storms, other.storms, "key", SPAN_REDUCE))
        return self

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        return self._address_findings() + self._place_findings() + self._storm_findings()

    def _address_findings(self) -> list[Finding]:
        """One finding per address whose claims flip-flop or whose GARPs burst."""
        claims, garps = self.claims, self.garps
        out = []
        burst_keys = {}
        if len(garps["key"]):
            address = mix64(garps["link"], garps["spa"])
            order = np.lexsort((garps["second"], address))
            starts = np.flatnonzero(np.concatenate(([True], address[order][1:] != address[order][:-1])))
            for a, b in zip(starts.tolist(), np.append(starts[1:], len(order)).tolist()):
                rows = order[a:b]
                peak, at = _windowed_max(garps["second"][rows], garps["count"][rows], GARP_WINDOW_S)
                if peak > self.params["max_garps"]:
                    burst_keys[int(address[rows[0]])] = (rows, peak, at)
        keys, starts = np.unique(claims["key"], return_index=True) if len(claims["key"]) else ([], [])
        counts = np.diff(np.append(starts, len(claims["key"]))) if len(claims["key"]) else []
        for key, start, count in zip(list(keys), list(starts), list(counts)):
            if count < 2 and int(key) not in burst_keys:
                continue
            finding = self._address_finding(np.arange(start, start + count), burst_keys.get(int(key)))
            if finding is not None:
                out.append(finding)
        return out

    def _address_finding(self, runs: np.ndarray, burst) -> Finding | None:
        c, p = self.claims, self.params
        macs, first, last = c["mac"][runs], c["first_ns"][runs], c["last_ns"][runs]
        # a flip-flop: a run whose MAC is that of the run before the previous one, back within the window
        returns = [k for k in range(2, len(runs)) if macs[k] == macs[k - 2] and macs[k] != macs[k - 1]
                   and first[k] - last[k - 2] <= p["flip_flop_window_s"] * NS]
        changes = first[1:]
        alternations, at = (_windowed_max(changes, np.ones(len(changes), dtype=np.int64), ALTERNATION_WINDOW_S * NS)
                            if len(changes) else (0, 0))
        problems: list[tuple[str, str]] = []
        ip, link = _v4(c["spa"][runs[0]]), int(c["link"][runs[0]])
        names = list(dict.fromkeys(mac_to_str(int(m)) for m in macs))
        frames = [c["first_frame"][runs[0]], c["last_frame"][runs[-1]]]
        if returns:
            k = returns[0]
            flips = (f"{len(returns):,} flip-flop(s) between {len(names)} MACs "
                     f"({', '.join(names[:LISTED])}{', ...' if len(names) > LISTED else ''}): first "
                     f"{mac_to_str(int(macs[k - 2]))} -> {mac_to_str(int(macs[k - 1]))} -> "
                     f"{mac_to_str(int(macs[k]))} at {iso_time(int(first[k]))}")
            if alternations >= p["high_alternations"]:
                problems.append(("high", flips + f"; {alternations:,} changes of claimant within one minute from "
                                                 f"{iso_time(int(changes[at]))}"))
            else:
                problems.append(("medium", flips))
            frames += [c["first_frame"][runs[k - 2]], c["first_frame"][runs[k - 1]], c["first_frame"][runs[k]]]
            for k in range(1, len(runs)):
                frames.append(c["first_frame"][runs[k]])
        evidence = {"ip": ip, "ips": [ip], "macs": names[:64], "claim_changes": len(runs) - 1,
                    "flip_flops": len(returns), "max_changes_per_minute": alternations,
                    "claims": [{"mac": mac_to_str(int(c["mac"][r])), "from": iso_time(int(c["first_ns"][r])),
                                "to": iso_time(int(c["last_ns"][r])), "arp": int(c["count"][r]),
                                "garps": int(c["garps"][r])} for r in runs[:64].tolist()]}
        t0, t1 = int(first.min()), int(last.max())
        if burst is not None:
            rows, peak, at = burst
            g = self.garps
            window = rows[at:][g["second"][rows[at:]] < g["second"][rows[at]] + GARP_WINDOW_S]
            senders = [mac_to_str(int(m)) for m in macs[c["garps"][runs] > 0]]
            senders = list(dict.fromkeys(senders))
            since = iso_time(int(g["first_ns"][window].min()))
            problems.append(("medium", f"{peak:,} gratuitous ARPs within 60 s from {since} "
                                       f"(more than {p['max_garps']}: one VRRP failover sends at most 5 + 5), sent "
                                       f"by {', '.join(senders[:LISTED]) or 'no unicast MAC'}"
                                       + (" (one MAC: two devices sending byte-identical GARPs look the same)"
                                          if len(senders) == 1 else "")))
            frames += g["first_frame"][window].tolist() + g["last_frame"][window].tolist()
            evidence["garps_in_60s"] = peak
            evidence["garps"] = int(g["count"][rows].sum())
            evidence["garp_senders"] = senders[:64]
            t0, t1 = min(t0, int(g["first_ns"][rows].min())), max(t1, int(g["last_ns"][rows].max()))
        if not problems:
            return None
        severity = max((sev for sev, _ in problems), key=SEVERITY_RANK.get)
        where = link_text(link)
        if where:
            evidence["link"] = where
        evidence["evidence_frames"] = evidence_frames(np.unique(np.array(frames, dtype=np.int64)))
        if self.dropped:
            evidence["rows_not_kept"] = self.dropped
        msg = (f"ARP for {ip}{' on ' + where if where else ''}: "
               + "; ".join(text for _, text in sorted(problems, key=lambda x: -SEVERITY_RANK[x[0]]))
               + f". {int(c['count'][runs].sum()):,} ARP claim(s) by {len(names)} MAC(s) over "
                 f"{(t1 - t0) / NS:,.1f} s")
        return self.finding(severity, msg, identifier=f"{ip} {where}".strip(), first_seen=t0, last_seen=t1,
                            n=int(c["count"][runs].sum()), src_ip=ip, src_mac=names[0], proto="ARP",
                            evidence=evidence)

    def _place_findings(self) -> list[Finding]:
        """One source MAC claiming one address on two links within FLAP_WINDOW_S."""
        pl = self.places
        if len(pl["key"]) == 0:
            return []
        out = []
        order = np.lexsort((pl["first_ns"], pl["pair"]))
        pair = pl["pair"][order]
        starts = np.flatnonzero(np.concatenate(([True], pair[1:] != pair[:-1])))
        for a, b in zip(starts.tolist(), np.append(starts[1:], len(order)).tolist()):
            rows = order[a:b]
            if len(np.unique(pl["link"][rows])) < 2:
                continue
            link, first, last = pl["link"][rows], pl["first_ns"][rows], pl["last_ns"][rows]
            content = pl["content"][rows]
            close = [k for k in range(1, len(rows)) if link[k] != link[k - 1]
                     and first[k] - last[k - 1] <= FLAP_WINDOW_S * NS
                     and not (content[k] == content[k - 1] and first[k] - first[k - 1] <= COPY_S * NS)]
            if not close:
                continue
            k = close[0]
            mac, ip = mac_to_str(int(pl["mac"][rows[0]])), _v4(pl["spa"][rows[0]])
            places = [link_text(int(x)) or "untagged" for x in dict.fromkeys(link.tolist())]
            msg = (f"MAC {mac} claimed {ip} on {len(places)} links ({', '.join(places[:LISTED])}) within "
                   f"{FLAP_WINDOW_S:g} s, {len(close):,} time(s), first at {iso_time(int(first[k]))}: the switches "
                   f"learn it on two ports at once (a duplicated MAC, a loop between VLANs, or two devices "
                   f"sharing one virtual MAC)")
            frames = np.concatenate([pl["first_frame"][rows], pl["last_frame"][rows]])
            out.append(self.finding(
                "medium", msg, identifier=f"{mac} {ip} on several links", first_seen=int(first.min()),
                last_seen=int(last.max()), n=int(pl["count"][rows].sum()), src_ip=ip, src_mac=mac, proto="ARP",
                evidence={"mac": mac, "ip": ip, "ips": [ip], "macs": [mac], "links": places[:64],
                          "times_within_1s": len(close), "evidence_frames": evidence_frames(np.unique(frames))}))
        return out

    def _storm_findings(self) -> list[Finding]:
        """More than storm_requests ARP requests on one link in a 100 ms bin; bins less than 1 s apart are one
        storm."""
        st = self.storms
        storm = np.flatnonzero(st["count"] > self.params["storm_requests"])
        if len(storm) == 0:
            return []
        rows = storm[np.lexsort((st["bin"][storm], st["link"][storm]))]
        link, bins = st["link"][rows], st["bin"][rows]
        starts = np.flatnonzero(np.concatenate(([True], (link[1:] != link[:-1]) | (bins[1:] - bins[:-1] > 10))))
        out = []
        for a, b in zip(starts.tolist(), np.append(starts[1:], len(rows)).tolist()):
            episode = rows[a:b]
            where = link_text(int(st["link"][episode[0]]))
            requests, peak = int(st["count"][episode].sum()), int(st["count"][episode].max())
            t0, t1 = int(st["first_ns"][episode].min()), int(st["last_ns"][episode].max())
            requesters = list(dict.fromkeys(mac_to_str(st["requester"][episode]).tolist()))
            msg = (f"ARP storm{' on ' + where if where else ''}: {requests:,} requests in "
                   f"{len(episode)} bin(s) of 100 ms with more than {self.params['storm_requests']} each (peak "
                   f"{peak:,} per 100 ms) over {(t1 - t0) / NS:,.2f} s, first from {', '.join(requesters[:LISTED])}:"
                   f" an ARP sweep or a host resolving a whole subnet")
            frames = np.concatenate([st["first_frame"][episode], st["last_frame"][episode]])
            out.append(self.finding(
                "low", msg, identifier=f"arp storm {where}".strip(), first_seen=t0, last_seen=t1, n=requests,
                proto="ARP", src_mac=requesters[0],
                evidence={"requests": requests, "peak_per_100ms": peak, "bins": len(episode),
                          "first_requesters": requesters[:64], "link": where,
                          "evidence_frames": evidence_frames(np.unique(frames))}))
        return out


def _concat(a: dict, b: dict) -> dict:
    return {name: np.concatenate([a[name], b[name]]) for name in a}


def _typed(rows: dict, columns: dict) -> dict:
    return {name: np.asarray(rows[name]).astype(dtype) for name, dtype in columns.items()}

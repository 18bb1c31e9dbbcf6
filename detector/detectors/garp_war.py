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

Two kinds of claim are no fight, and each finding says which it set aside:

- a VRRP or CARP transition announcing itself (the `vrrp` application
  table: each speaker's advertisements as runs of mastership). A master
  that takes over alone (no other speaker advertising from one
  Master_Down_Interval after its first advertisement to `announce_s`
  after it) sends the gratuitous ARPs of the transition, from the virtual
  MAC (00:00:5e:00:01:VRID, keepalived's use_vmac, CARP) or from its own
  (keepalived's default). Those within `announce_s` of the transition,
  for the group's virtual addresses (any address for CARP, which lists
  none), are not counted in a burst, and a change of claimant they make
  is no flip-flop when the change back is one too (a failover and its
  preemption). keepalived sends more than "5 + 5" at a normal start-up,
  failover and preemption (issue 27: 40 per address within 60 s): 5 at
  the transition and 5 vrrp_garp_master_delay (5 s) later, and after a
  preemption 5 + 5 more for the old master's last advertisement
  (vrrp_garp_lower_prio_repeat and _delay default to the same values;
  keepalived vrrp/vrrp.c `vrrp_state_master_rx`). What only such
  announcements make is info. Two speakers advertising at once announce
  nothing: their GARPs are seed 002's fight;
- corrupted copies of a claimant (neighbors.corrupted_copies): a "MAC" a
  bit or three from another claimant, seen in a handful of frames, every
  one damaged in another way as well. A damaged or fuzzed capture keeps
  frames a real network drops at the FCS check; the copies of one host's
  MAC would otherwise make flip-flops and bursts (issue 27: up to 126
  "MACs" for one address, medium and high). What only copies make is low
  (a judgement of confidence: the confidence model's rule basis once it
  lands), and the message names them as likely copies, not hosts.

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
each address as runs of one MAC (count, GARPs, damaged frames, first/last),
GARPs per address, MAC and second, the VRRP/CARP masters' runs and their
groups' virtual addresses, ARP per (source MAC, address, link, second) kept only while
another link may pair with it, and requests per link and 100 ms bin kept
only while they may make a storm; each table bounded by MAX_ROWS.
"""
from __future__ import annotations

import ipaddress

import numpy as np

from ..decode import app
from ..decode.addr import mac_to_str
from ..decode.app.vrrp import ADVERTISEMENT, AUTH_DATA_BYTES, CENTISECONDS, HEADER_BYTES
from ..detect import neighbors as nb
from ..detect.confidence import Basis
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.grouping import group_by
from ..detect.hashing import mix64
from ..detect.links import link_text, links_of
from ..detect.state import concat_tables, empty_table, fold_rows, join_adjacent, take_rows
from ..findings import SEVERITY_RANK, Finding, iso_time
from ..rules import ALERT_SECONDS, COUNT, Param, Range
from ..schema import L_ARP, L_SRC_MAC, PacketBatch
from ..units import NS, plural

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
VRRP_MAC = 0x00005E000100                # RFC 5798 section 7.3: 00-00-5E-00-01-{VRID}; CARP uses it for its vhid
# A master's gratuitous ARPs may be stamped just before its first advertisement reaches the capture (CARP sends
# them together with it; two capture points' clocks differ)
ANNOUNCE_LEAD_S = 1.0
MAX_WINDOWS = 4096                       # transitions x addresses x MACs compared with the claims and GARPs

CLAIM_COLUMNS = {"key": np.uint64, "link": np.uint64, "spa": np.uint32, "mac": np.uint64, "count": np.int64,
                 "garps": np.int64, "damaged": np.int64, "damage": np.uint8, "first_ns": np.int64,
                 "last_ns": np.int64, "first_frame": np.int64, "last_frame": np.int64}
CLAIM_REDUCE = {"count": np.add, "garps": np.add, "damaged": np.add, "damage": np.bitwise_or, "last_ns": np.maximum,
                "first_frame": np.minimum, "last_frame": np.maximum}
GARP_COLUMNS = {"key": np.uint64, "link": np.uint64, "spa": np.uint32, "mac": np.uint64, "second": np.int64,
                "count": np.int64, "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64,
                "last_frame": np.int64}
# VRRP and CARP masters (the `vrrp` application table): each speaker's advertisements as runs of mastership
# (advertisements at most one Master_Down_Interval apart joined), and the virtual IPv4 addresses of each group
MASTER_COLUMNS = {"key": np.uint64, "group": np.uint64, "link": np.uint64, "carp": np.uint8, "vrid": np.uint8,
                  "ip": np.uint32, "mac": np.uint64, "count": np.int64, "gap_ns": np.int64, "first_ns": np.int64,
                  "last_ns": np.int64, "first_frame": np.int64, "last_frame": np.int64}
MASTER_REDUCE = {"count": np.add, "gap_ns": np.maximum, "last_ns": np.maximum, "first_frame": np.minimum,
                 "last_frame": np.maximum}
VIP_COLUMNS = {"key": np.uint64, "group": np.uint64, "vip": np.uint32, "first_ns": np.int64, "last_ns": np.int64}
VIP_REDUCE = {"last_ns": np.maximum}
SPAN_REDUCE = {"count": np.add, "last_ns": np.maximum, "first_frame": np.minimum, "last_frame": np.maximum}
PLACE_COLUMNS = {"key": np.uint64, "pair": np.uint64, "mac": np.uint64, "spa": np.uint32, "link": np.uint64,
                 "content": np.uint64, "second": np.int64, "count": np.int64, "first_ns": np.int64, "last_ns": np.int64,
                 "first_frame": np.int64, "last_frame": np.int64}
STORM_COLUMNS = {"key": np.uint64, "link": np.uint64, "bin": np.int64, "count": np.int64, "requester": np.uint64,
                 "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64, "last_frame": np.int64}


def _cap(rows: dict) -> tuple[dict, int]:
    """At most MAX_ROWS rows, the most recent kept; and how many were dropped."""
    extra = len(rows["key"]) - MAX_ROWS
    if extra <= 0:
        return rows, 0
    return take_rows(rows, np.sort(np.argsort(-rows["last_ns"], kind="stable")[:MAX_ROWS])), extra


def _v4(value) -> str:
    return str(ipaddress.IPv4Address(int(value)))


def join_claims(rows: dict) -> dict:
    """Claims of one address in time order, consecutive ones of the same MAC joined into one run."""
    if len(rows["key"]) == 0:
        return rows
    rows = take_rows(rows, np.lexsort((rows["first_ns"], rows["key"])))
    starts = np.flatnonzero(np.concatenate(([True], (rows["key"][1:] != rows["key"][:-1])
                                            | (rows["mac"][1:] != rows["mac"][:-1]))))
    out = take_rows(rows, starts)
    for name, ufunc in CLAIM_REDUCE.items():
        out[name] = ufunc.reduceat(rows[name], starts)
    return out


def join_masters(rows: dict) -> dict:
    """Advertisements of one speaker in time order joined into runs of mastership: one joins the run before it
    when it starts at most one Master_Down_Interval (the larger of the two) after that run's end."""
    return join_adjacent(rows, MASTER_REDUCE)


def _master_down_ns(version, adver_cs, priority, carp) -> np.ndarray:
    """Master_Down_Interval in ns, after which a backup takes over (RFC 3768 section 6.1, RFC 5798 section 6.1):
    3 x the interval + Skew, VRRPv2's skew (256 - priority)/256 s, VRRPv3's that fraction of the interval; CARP 3 x
    (advbase + advskew/256), the table's interval."""
    interval = adver_cs.astype(np.int64) * (NS // CENTISECONDS)
    fraction = 256 - priority.astype(np.int64)
    skew = np.where(version == 3, fraction * interval // 256, fraction * NS // 256)
    return np.where(carp, 3 * interval, 3 * interval + skew)


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
    EVE_SIGNATURE = (6, "Potentially Bad Traffic")
    # what its findings rest on beyond what it saw (detect.confidence): changes of claimant within a window
    QUALITY_NEEDS = frozenset({"timing"})
    APP_TABLES = ("vrrp",)
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
        "announce_s": Param(float, 12.0, "seconds after a VRRP or CARP master takes over (or the capture begins "
                                         "with it) within which its gratuitous ARPs for the virtual addresses, from "
                                         "the virtual MAC or its own, announce the transition", Range(1, 300),
                            "keepalived sends its first set at the transition, the second vrrp_garp_master_delay "
                            "(5 s) later, and after a preemption a set for the old master's last advertisement "
                            "and again 5 s later (vrrp_garp_lower_prio_delay): 12 s covers them. Longer explains "
                            "a fight's GARPs that happen to follow a transition; shorter reports a slow second set."),
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
        self.claims = empty_table(CLAIM_COLUMNS)
        self.garps = empty_table(GARP_COLUMNS)
        self.masters = empty_table(MASTER_COLUMNS)
        self.vips = empty_table(VIP_COLUMNS)
        self.places = empty_table(PLACE_COLUMNS)
        self.storms = empty_table(STORM_COLUMNS)
        self.dropped = 0

    # ---- update -----------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        self._masters(batch)
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
        damage = nb.arp_damage(batch, rows)
        claims = {"key": key, "link": link, "spa": spa, "mac": sha, "count": ones, "garps": garp.astype(np.int64),
                  "damaged": (damage != 0).astype(np.int64), "damage": damage, "first_ns": ts, "last_ns": ts,
                  "first_frame": frame, "last_frame": frame}
        merged, dropped = _cap(join_claims(concat_tables(self.claims, _typed(claims, CLAIM_COLUMNS))))
        self.claims = merged
        self.dropped += dropped
        if garp.any():
            second = ts[garp] // NS
            garps = {"key": mix64(link[garp], spa[garp], sha[garp], second), "link": link[garp], "spa": spa[garp],
                     "mac": sha[garp], "second": second, "count": ones[garp], "first_ns": ts[garp],
                     "last_ns": ts[garp], "first_frame": frame[garp], "last_frame": frame[garp]}
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

    def _masters(self, batch: PacketBatch) -> None:
        """Fold the batch's VRRP and CARP advertisements over IPv4 into the masters' runs and the groups' virtual
        addresses. An advertisement is a master's (RFC 3768, RFC 5798: only the master advertises), except a
        resignation (priority 0); one too short for its header, its addresses or of an unknown version or type
        is nobody's (the VRRP rule reports those)."""
        tab = app.table(batch, "vrrp")
        if len(tab) == 0:
            return
        rows = tab["row"]
        carp = tab["carp"] == 1
        version, count = tab["version"], tab["addr_count"].astype(np.int64)
        need = HEADER_BYTES + 4 * count + np.where(version == 2, AUTH_DATA_BYTES, 0)
        vrrp = (~carp & ((version == 2) | (version == 3)) & (tab["type"] == ADVERTISEMENT) & (count > 0)
                & tab.valid("priority") & (tab["priority"] > 0) & (tab["length"].astype(np.int64) >= need))
        ok = np.flatnonzero(tab.valid("vrid") & (batch["ip_version"][rows] == 4) & ~tab.truncated
                            & (vrrp | (carp & tab.valid("carp_advbase"))))
        if len(ok) == 0:
            return
        r = rows[ok]
        link, vrid, is_carp = links_of(batch, r), tab["vrid"][ok], carp[ok].astype(np.uint8)
        has_mac = (batch["layers"][r] & np.uint32(L_SRC_MAC)) != 0
        mac = np.where(has_mac, batch["src_mac"][r], np.uint64(0))
        ip = (batch["src_ip_lo"][r] & np.uint64(0xFFFF_FFFF)).astype(np.uint32)
        group = mix64(link, is_carp, vrid)
        ts, frame = batch["ts_ns"][r], tab["frame"][ok]
        gap = _master_down_ns(version[ok], tab["adver_int"][ok], tab["priority"][ok], is_carp == 1)
        new = {"key": mix64(group, ip, mac), "group": group, "link": link, "carp": is_carp, "vrid": vrid, "ip": ip,
               "mac": mac, "count": np.ones(len(ok), dtype=np.int64), "gap_ns": gap, "first_ns": ts, "last_ns": ts,
               "first_frame": frame, "last_frame": frame}
        self.masters, dropped = _cap(join_masters(concat_tables(self.masters, _typed(new, MASTER_COLUMNS))))
        self.dropped += dropped
        child = tab.children["vrrp_addr"]
        if len(child) == 0:
            return
        position = np.full(len(tab), -1, dtype=np.int64)
        position[ok] = np.arange(len(ok))
        owner = position[child["parent"]]
        mine = np.flatnonzero((owner >= 0) & child.valid("ip_lo"))
        owner = owner[mine]
        vip = (child["ip_lo"][mine] & np.uint64(0xFFFF_FFFF)).astype(np.uint32)
        vips = {"key": mix64(group[owner], vip), "group": group[owner], "vip": vip, "first_ns": ts[owner],
                "last_ns": ts[owner]}
        self.vips, dropped = _cap(fold_rows(self.vips, _typed(vips, VIP_COLUMNS), "key", VIP_REDUCE))
        self.dropped += dropped

    def _settle_storms(self, rows: dict) -> dict:
        """Drop the 100 ms bins that can no longer make a storm: complete (not at either end of the state's
        time, where a neighbouring batch or partition may add to them) and at most storm_requests."""
        if len(rows["key"]) == 0:
            return rows
        complete = (rows["bin"] > rows["bin"].min()) & (rows["bin"] < rows["bin"].max())
        keep = ~complete | (rows["count"] > self.params["storm_requests"])
        rows, dropped = _cap(take_rows(rows, keep))
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
        rows, dropped = _cap(take_rows(rows, ~(lone & settled)))
        self.dropped += dropped
        return rows

    def merge(self, other: GarpWar) -> GarpWar:
        check_merge(self, other)
        self.claims, dropped = _cap(join_claims(concat_tables(self.claims, other.claims)))
        self.dropped += dropped + other.dropped
        self.garps, dropped = _cap(fold_rows(self.garps, other.garps, "key", SPAN_REDUCE))
        self.dropped += dropped
        self.places = self._settle_places(fold_rows(self.places, other.places, "key", SPAN_REDUCE))
        self.storms = self._settle_storms(fold_rows(self.storms, other.storms, "key", SPAN_REDUCE))
        self.masters, dropped = _cap(join_masters(concat_tables(self.masters, other.masters)))
        self.dropped += dropped
        self.vips, dropped = _cap(fold_rows(self.vips, other.vips, "key", VIP_REDUCE))
        self.dropped += dropped
        return self

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        return self._address_findings() + self._place_findings() + self._storm_findings()

    def _address_findings(self) -> list[Finding]:
        """One finding per address whose claims flip-flop or whose GARPs burst."""
        claims, garps = self.claims, self.garps
        if len(claims["key"]) == 0:
            return []
        announced = _Announcements(self)
        garps_of: dict[int, np.ndarray] = {}
        if len(garps["key"]):
            address = mix64(garps["link"], garps["spa"])
            order, starts, counts = group_by(address)
            totals = np.add.reduceat(garps["count"][order], starts) if len(order) else np.zeros(0, dtype=np.int64)
            for start, count, total in zip(starts.tolist(), counts.tolist(), totals.tolist()):
                if total > self.params["max_garps"]:
                    rows = order[start:start + count]
                    garps_of[int(address[rows[0]])] = rows[np.argsort(garps["first_ns"][rows], kind="stable")]
        keys, starts = np.unique(claims["key"], return_index=True)
        counts = np.diff(np.append(starts, len(claims["key"])))
        out = []
        for key, start, count in zip(keys.tolist(), starts.tolist(), counts.tolist()):
            if count < 2 and key not in garps_of:
                continue
            finding = self._address_finding(np.arange(start, start + count), garps_of.get(key), announced)
            if finding is not None:
                out.append(finding)
        return out

    def _address_finding(self, runs: np.ndarray, garp_rows, announced: _Announcements) -> Finding | None:
        """The shapes of one address's claims (runs of one MAC, in time order) and GARPs, judged three times: as
        they are; without the claimants that are corrupted copies of another (neighbors.corrupted_copies); and
        without, besides, the claims and GARPs that announce a VRRP or CARP transition (_Announcements). The last
        judgement sets the severity; what only the others see is info (transitions announced) or low (copies)."""
        c = self.claims
        ip, link = _v4(c["spa"][runs[0]]), int(c["link"][runs[0]])
        spa = int(c["spa"][runs[0]])
        garp_rows = np.zeros(0, dtype=np.int64) if garp_rows is None else garp_rows
        claimants: dict[int, list[int]] = {}
        for r in runs.tolist():
            claimants.setdefault(int(c["mac"][r]), []).append(r)
        copies = nb.corrupted_copies({mac: nb.Claimant(int(c["count"][i].sum()), int(c["damaged"][i].sum()),
                                                       int(np.bitwise_or.reduce(c["damage"][i])))
                                      for mac, i in claimants.items()}) if len(claimants) >= 2 else {}
        copy_macs = np.array(sorted(copies), dtype=np.uint64)
        hosts = runs[~np.isin(c["mac"][runs], copy_macs)]
        host_garps = garp_rows[~np.isin(self.garps["mac"][garp_rows], copy_macs)]
        seq = _sequence(c, hosts)
        g = self.garps
        garp_told = announced.covers(link, spa, g["mac"][host_garps], g["first_ns"][host_garps],
                                     g["last_ns"][host_garps])
        change_told = announced.covers(link, spa, seq["mac"], seq["first_ns"], seq["first_ns"])
        change_told[:1] = -1                 # the first claim changes nothing
        as_is = self._shapes(_sequence(c, runs), np.zeros(len(runs), dtype=bool), garp_rows)
        judged = self._shapes(seq, np.zeros(len(seq["mac"]), dtype=bool), host_garps)
        clean = self._shapes(seq, change_told >= 0, host_garps[garp_told < 0])
        if not as_is["problems"]:
            return None
        names = list(dict.fromkeys(mac_to_str(int(m)) for m in c["mac"][runs]))
        notes = []
        told = sorted(set(garp_told[garp_told >= 0].tolist()) | set(change_told[change_told >= 0].tolist()),
                      key=lambda run: int(self.masters["first_ns"][run]))
        if clean["problems"]:
            shapes = clean
            severity = max((sev for sev, _ in shapes["problems"]), key=SEVERITY_RANK.get)
            if told:
                counted = [plural(n, what) + of for n, what, of in
                           ((int(g["count"][host_garps[garp_told >= 0]].sum()), "GARP", ""),
                            (int((change_told >= 0).sum()), "change", " of claimant")) if n]
                notes.append(f"{' and '.join(counted)} announcing VRRP/CARP transitions ({announced.text(told)}) "
                             f"not counted")
        elif judged["problems"]:
            shapes, severity = self._shapes(seq, np.zeros(len(seq["mac"]), dtype=bool), host_garps,
                                            fight=False), "info"
            notes.append(f"each follows a VRRP/CARP master change within {self.params['announce_s']:g} s, from "
                         f"the new master's or the virtual router's MAC ({announced.text(told)}): transitions "
                         f"announcing themselves, not a fight")
        else:
            # low, and of low confidence (a rule basis below): no other host is seen, only damaged frames
            shapes, severity = self._shapes(_sequence(c, runs), np.zeros(len(runs), dtype=bool), garp_rows,
                                            fight=False), "low"
        if copies:
            by_original: dict[int, list[nb.Copy]] = {}
            for copy in sorted(copies.values(), key=lambda x: int(c["first_ns"][claimants[x.mac]].min())):
                by_original.setdefault(copy.original, []).append(copy)
            text = "; ".join(nb.copies_text(group) for group in by_original.values())
            notes.append(f"{'they come from' if severity == 'low' else 'set aside:'} {text}"
                         + (": real networks drop such frames at the FCS check" if severity == "low" else ""))
        problems = shapes["problems"]
        evidence = {"ip": ip, "ips": [ip], "macs": names[:64], "claim_changes": len(runs) - 1,
                    "flip_flops": shapes["flip_flops"], "max_changes_per_minute": shapes["alternations"],
                    "claims": [{"mac": mac_to_str(int(c["mac"][r])), "from": iso_time(int(c["first_ns"][r])),
                                "to": iso_time(int(c["last_ns"][r])), "arp": int(c["count"][r]),
                                "garps": int(c["garps"][r])} for r in runs[:64].tolist()]}
        evidence.update(shapes["evidence"])
        if "garps" in evidence:
            evidence["garps"] = int(g["count"][garp_rows].sum())      # all of the address's, counted or not
        if copies:
            evidence["corrupted_copies"] = [{"mac": mac_to_str(x.mac), "copy_of": mac_to_str(x.original),
                                             "bits": x.bits, "frames": x.frames, "damage": nb.damage_text(x.damage)}
                                            for x in list(copies.values())[:64]]
            evidence["corrupted_copies_total"] = len(copies)
        if told:
            evidence["transitions_announced"] = announced.evidence(told)
        first, last = c["first_ns"][runs], c["last_ns"][runs]
        t0, t1 = int(first.min()), int(last.max())
        if len(garp_rows):
            t0, t1 = min(t0, int(g["first_ns"][garp_rows].min())), max(t1, int(g["last_ns"][garp_rows].max()))
        frames = [c["first_frame"][runs[0]], c["last_frame"][runs[-1]], *shapes["frames"]]
        where = link_text(link)
        if where:
            evidence["link"] = where
        evidence["evidence_frames"] = evidence_frames(np.unique(np.array(frames, dtype=np.int64)))
        if self.dropped:
            evidence["rows_not_kept"] = self.dropped
        msg = (f"ARP for {ip}{' on ' + where if where else ''}: "
               + "; ".join(text for _, text in sorted(problems, key=lambda x: -SEVERITY_RANK[x[0]]))
               + "".join(f"; {note}" for note in notes)
               + f". {plural(int(c['count'][runs].sum()), 'ARP claim')} by {plural(len(names), 'MAC')} over "
                 f"{(t1 - t0) / NS:,.1f} s")
        basis = [Basis("low", f"only corrupted copies claim it: {text}")] if copies and severity == "low" else []
        return self.finding(severity, msg, identifier=f"{ip} {where}".strip(), first_seen=t0, last_seen=t1,
                            n=int(c["count"][runs].sum()), src_ip=ip, src_mac=names[0], proto="ARP",
                            evidence=evidence, basis=basis)

    def _shapes(self, seq: dict, told: np.ndarray, garp_rows: np.ndarray, fight: bool = True) -> dict:
        """What one address's claims (`seq`: runs of one MAC in time order) and GARPs (rows of self.garps) show:
        flip-flops and changes of claimant per minute, not counting the changes marked `told`; a burst. `fight`:
        the text may say what a fight of two devices looks like."""
        p, g = self.params, self.garps
        macs, first, last = seq["mac"], seq["first_ns"], seq["last_ns"]
        # a flip-flop: a run whose MAC is that of the run before the previous one, back within the window; a
        # return told by a transition, after a change told by one, is a failover and a failback
        returns = [k for k in range(2, len(macs)) if macs[k] == macs[k - 2] and macs[k] != macs[k - 1]
                   and first[k] - last[k - 2] <= p["flip_flop_window_s"] * NS and not (told[k] and told[k - 1])]
        changes = first[1:][~told[1:]]
        alternations, at = (_windowed_max(changes, np.ones(len(changes), dtype=np.int64), ALTERNATION_WINDOW_S * NS)
                            if len(changes) else (0, 0))
        problems: list[tuple[str, str]] = []
        frames: list[int] = []
        evidence: dict = {}
        if returns:
            k = returns[0]
            names = list(dict.fromkeys(mac_to_str(int(m)) for m in macs))
            flips = (f"{plural(len(returns), 'flip-flop')} between {len(names)} MACs "
                     f"({', '.join(names[:LISTED])}{', ...' if len(names) > LISTED else ''}): first "
                     f"{mac_to_str(int(macs[k - 2]))} -> {mac_to_str(int(macs[k - 1]))} -> "
                     f"{mac_to_str(int(macs[k]))} at {iso_time(int(first[k]))}")
            if alternations >= p["high_alternations"]:
                problems.append(("high", flips + f"; {alternations:,} changes of claimant within one minute from "
                                                 f"{iso_time(int(changes[at]))}"))
            else:
                problems.append(("medium", flips))
            frames += [int(f) for f in seq["first_frame"][[k - 2, k - 1, k]]] + seq["first_frame"][1:].tolist()
        if len(garp_rows):
            rows = garp_rows[np.lexsort((g["first_ns"][garp_rows], g["second"][garp_rows]))]
            peak, at = _windowed_max(g["second"][rows], g["count"][rows], GARP_WINDOW_S)
            if peak > p["max_garps"]:
                window = rows[at:][g["second"][rows[at:]] < g["second"][rows[at]] + GARP_WINDOW_S]
                senders = list(dict.fromkeys(mac_to_str(g["mac"][window]).tolist()))
                since = iso_time(int(g["first_ns"][window].min()))
                problems.append(("medium", f"{peak:,} gratuitous ARPs within 60 s from {since} "
                                           f"(more than {p['max_garps']}: one VRRP failover sends at most 5 + 5), "
                                           f"sent by {', '.join(senders[:LISTED])}"
                                           + (" (one MAC: two devices sending byte-identical GARPs look the same)"
                                              if len(senders) == 1 and fight else "")))
                frames += g["first_frame"][window].tolist() + g["last_frame"][window].tolist()
                evidence.update({"garps_in_60s": peak, "garps": int(g["count"][rows].sum()),
                                 "garp_senders": senders[:64]})
        return {"problems": problems, "flip_flops": len(returns), "alternations": alternations, "frames": frames,
                "evidence": evidence}

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
                   f"{FLAP_WINDOW_S:g} s, {plural(len(close), 'time')}, first at {iso_time(int(first[k]))}: the "
                   f"switches learn it on two ports at once (a duplicated MAC, a loop between VLANs, or two devices "
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
                   f"{plural(len(episode), 'bin')} of 100 ms with more than {self.params['storm_requests']} each (peak "
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


class _Announcements:
    """Where a VRRP or CARP master's claims of its virtual addresses announce its transition.

    Every run of mastership (GarpWar.masters) begins with a transition, or with the capture. A transition is
    clean when no other speaker of the group advertises from one Master_Down_Interval after it (the old master
    of a preemption yields after an advertisement or two) to `announce_s` after it: then the new master alone
    sends the gratuitous ARPs of the transition. Within [transition - ANNOUNCE_LEAD_S, transition + announce_s],
    claims of the group's virtual addresses (any address for CARP, which does not list them) from the new
    master's MAC or the group's virtual MAC (00:00:5e:00:01:VRID) are the transition announcing itself. A group
    with more than MAX_WINDOWS runs changes master all the time: none of its transitions announces anything."""

    def __init__(self, detector: GarpWar):
        m, v = detector.masters, detector.vips
        announce, lead = int(detector.params["announce_s"] * NS), int(ANNOUNCE_LEAD_S * NS)
        self.masters = m
        self.windows: dict[int, list[tuple[int, int, int]]] = {}     # key -> (from, to, run)
        count = 0
        if len(m["key"]) == 0:
            return
        order, starts, counts = group_by(m["group"])
        for start, n in zip(starts.tolist(), counts.tolist()):
            runs = order[start:start + n]
            if n > MAX_WINDOWS:
                continue
            runs = runs[np.argsort(m["first_ns"][runs], kind="stable")]
            first, last, speaker = m["first_ns"][runs], m["last_ns"][runs], m["key"][runs]
            group = int(m["group"][runs[0]])
            addresses = [0] if m["carp"][runs[0]] else v["vip"][v["group"] == np.uint64(group)].tolist()
            for j, run in enumerate(runs.tolist()):
                t = int(first[j])
                busy = (speaker != speaker[j]) & (first <= t + announce) & (last >= t + int(m["gap_ns"][run]))
                if busy.any():
                    continue
                macs = {int(m["mac"][run]), VRRP_MAC | int(m["vrid"][run])} - {0}
                for address in addresses:
                    for mac in macs:
                        key = _window_key(int(m["link"][run]), address, mac)
                        self.windows.setdefault(key, []).append((t - lead, t + announce, run))
                        count += 1
                if count >= MAX_WINDOWS:
                    return

    def covers(self, link: int, spa: int, macs: np.ndarray, t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
        """For claims of address `spa` on `link` by `macs` from t0 to t1: the run (row of the masters) whose
        transition they announce, -1 for none."""
        out = np.full(len(macs), -1, dtype=np.int64)
        if not self.windows or len(macs) == 0:
            return out
        for mac in np.unique(macs).tolist():
            rows = np.flatnonzero(macs == mac)
            for address in (spa, 0):
                key = _window_key(link, address, mac)
                for low, high, run in self.windows.get(key, []):
                    inside = (out[rows] < 0) & (t0[rows] >= low) & (t1[rows] <= high)
                    out[rows[inside]] = run
        return out

    def text(self, runs: list[int], listed: int = 3) -> str:
        """The transitions of master runs `runs`, in words."""
        m = self.masters
        parts = [f"{'CARP vhid' if m['carp'][r] else 'VRRP VRID'} {int(m['vrid'][r])}: {_v4(m['ip'][r])} "
                 f"({mac_to_str(int(m['mac'][r]))}) master from {iso_time(int(m['first_ns'][r]))}"
                 for r in runs[:listed]]
        return "; ".join(parts) + (f"; +{len(runs) - listed} more" if len(runs) > listed else "")

    def evidence(self, runs: list[int]) -> list[dict]:
        m = self.masters
        return [{"protocol": "CARP" if m["carp"][r] else "VRRP", "vrid": int(m["vrid"][r]), "master": _v4(m["ip"][r]),
                 "mac": mac_to_str(int(m["mac"][r])), "from": iso_time(int(m["first_ns"][r])),
                 "to": iso_time(int(m["last_ns"][r])), "advertisements": int(m["count"][r])} for r in runs[:64]]


def _window_key(link: int, address: int, mac: int) -> int:
    """The key of a claim's (link, IPv4 address, MAC); address 0 stands for any (CARP lists none)."""
    return int(mix64(np.array([link], dtype=np.uint64), np.array([address], dtype=np.uint32),
                     np.array([mac], dtype=np.uint64))[0])


def _sequence(claims: dict, runs: np.ndarray) -> dict:
    """The runs `runs` of one address (in time order) with consecutive runs of one MAC joined: MAC, first and last
    time, first frame of each."""
    macs = claims["mac"][runs]
    if len(runs) == 0:
        return {"mac": macs, "first_ns": claims["first_ns"][runs], "last_ns": claims["last_ns"][runs],
                "first_frame": claims["first_frame"][runs]}
    starts = np.flatnonzero(np.concatenate(([True], macs[1:] != macs[:-1])))
    return {"mac": macs[starts], "first_ns": claims["first_ns"][runs][starts],
            "last_ns": np.maximum.reduceat(claims["last_ns"][runs], starts),
            "first_frame": claims["first_frame"][runs][starts]}


def _typed(rows: dict, columns: dict) -> dict:
    return {name: np.asarray(rows[name]).astype(dtype) for name, dtype in columns.items()}

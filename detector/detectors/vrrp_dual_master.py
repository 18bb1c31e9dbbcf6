"""vrrp-dual-master: two VRRP (or CARP) masters of one virtual router at once, and what breaks an election.

Seed 002: under a SYN flood "VRRP between the load balancers fell apart and
they started fighting over the IP addresses", both sending gratuitous ARP
for the virtual MAC until the switches flooded. In VRRP (RFC 3768, RFC
5798) only the master of a virtual router advertises; a backup that hears
nothing for Master_Down_Interval (MDI = 3 x Advertisement_Interval + Skew,
Skew = (256 - priority)/256 s in VRRPv2 and that fraction of the interval in
VRRPv3: keepalived keepalived/include/vrrp.h) takes over. So every speaker
of a virtual router is a master while it speaks, and two speakers at once
is a split brain, except for the moment of an election: a master that hears
a better one yields after one advertisement (keepalived vrrp/vrrp.c
`vrrp_state_master_rx`).

This rule reads the `vrrp` application table. Per virtual router (link:
interface and VLANs; IP version; VRRP or CARP; VRID) it keeps each
speaker's (source IP, source MAC) advertisements, per VIP set: count,
first/last, priorities, intervals, TTLs, authentication; and each speaker's
activity as intervals (advertisements at most one MDI apart joined). Per
virtual router one finding:

- two speakers whose activity overlaps by at least one MDI (the larger of
  theirs): high, "two masters"; an overlap of an advertisement or two (an
  election, a preemption) is named and not counted;
- critical when a rule in AFTER (the GARP rule; the unicast flooding rule reads
  this one instead, in the chain's order) has a finding of medium
  or more that names one of the virtual addresses or the virtual MAC
  (00:00:5e:00:01:VRID for IPv4, 00:00:5e:00:02:VRID for IPv6; CARP uses the
  IPv4 one) in its src_ip, dest_ip, src_mac, dest_mac or its evidence's
  "ips" or "macs", within CHAIN_SLACK_S of the two masters: the seed 002
  chain, naming that finding;
- medium: two speakers both at priority 255 (both claim to own the
  addresses), advertisement intervals or VIP sets that differ between the
  speakers of one VRID (receivers drop or misjudge them, RFC 3768 section
  7.1), a multicast advertisement with TTL or hop limit other than 255
  (dropped: it did not come from the link), VRRPv2 authentication types that
  differ;
- info: the master timeline (who advertised when, priority-0 resignations).

CARP (OpenBSD, same IP protocol, told apart by the table) is judged the
same way by vhid, with MDI = 3 x (advbase + advskew/256) and no VIP list; a
CARP group is never mixed with a VRRP one.

Only well-formed advertisements are judged (the table's `fault` is 0): a
malformed message (empty or shorter than its header, addresses past its IP
length, no address, an unknown version or type, a bad checksum) is no
claim to be master, so receivers drop it, and it is reported apart with the
other protocols' malformed messages, at low at most. A VRRPv3 checksum over
IPv4 is good in each form senders use (`checksum_form`: RFC 5798's
pseudo-header; none, as VRRPv2, which several vendors send and Wireshark
has its v3_checksum_as_in_v2 preference for; keepalived 1.3.6's group
address in a unicast advertisement's pseudo-header): the master timeline
says which form each speaker uses, and speakers of one virtual router that
use different forms are low (a receiver that accepts one form only drops
the other's advertisements and may become master as well).

State (mergeable; partitions in time order merge to one pass): speaker rows
and activity runs, each bounded by MAX_ROWS; VIP sets by their hash,
bounded by MAX_VIPSETS.
"""
from __future__ import annotations

import numpy as np

from ..decode import app
from ..decode.addr import mac_to_str
from ..decode.app.vrrp import CENTISECONDS, CHECKSUM_AS_V2, CHECKSUM_GROUP_PSEUDO, CHECKSUM_RFC
from ..detect.columns import ip_text
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.figure import ReportFigure, TimeBins
from ..detect.grouping import group_by
from ..detect.hashing import mix64
from ..detect.links import link_text, links_of
from ..detect.state import concat_tables, empty_table, fold_rows, join_adjacent, take_rows
from ..findings import SEVERITY_RANK, Finding, iso_time
from ..rules import ALERT_SECONDS, Param
from ..schema import L_SRC_MAC, PacketBatch
from ..units import NS, plural

# the rules whose findings this one reads, by id (detect.detector.Detector.AFTER): no rule imports another
GARP_WAR = "garp-war"

VRRP_TTL = 255                       # RFC 3768 section 7.1, RFC 5798 section 7.1; OpenBSD CARP_DFLTTL
# how a speaker's checksums verified (bits of `sums`: 1 << checksum_form), as the timeline says it
SUM_NAMES = {CHECKSUM_RFC: "as the RFC says", CHECKSUM_AS_V2: "without the IPv4 pseudo-header (as VRRPv2; "
                                                              "Wireshark's v3_checksum_as_in_v2)",
             CHECKSUM_GROUP_PSEUDO: "with 224.0.0.18 in a unicast advertisement's pseudo-header (keepalived "
                                    "1.3.6 and before)"}
GROUP_V4 = 0xFFFF_E000_0012          # 224.0.0.18 as the low half of the schema's IPv4-mapped address
GROUP_V6 = (0xFF02 << 48, 0x12)      # ff02::12
VIRTUAL_MAC = {4: 0x00005E000100, 6: 0x00005E000200}   # RFC 5798 section 7.3: 00-00-5E-00-01-{VRID}, -02- for IPv6
# A finding of a rule in AFTER chains with two masters when it falls within this many seconds of their
# overlap: the GARP of a failover follows the transition by up to VRRP_GARP_DELAY (5 s), and a switch
# reacts to a MAC fight within minutes (seed 002: "after a few minutes")
CHAIN_SLACK_S = 300
MAX_ROWS = 100_000
MAX_VIPSETS = 4096
COMPARED_SPEAKERS = 64            # per virtual router: a real one has two or three
MAX_FINDINGS = 4096               # virtual routers reported one by one
INTERVALS_COMPARED = 4096          # per speaker, the first ones: a fight of thousands of rounds is clear by then
TIMELINE = 64                      # intervals listed in a finding's evidence
LISTED = 6                         # speakers or addresses named in a message
FIGURE_GROUPS = 6

SPEAKER_COLUMNS = {
    "key": np.uint64, "group": np.uint64, "speaker": np.uint64, "link": np.uint64, "family": np.uint8,
    "carp": np.uint8, "vrid": np.uint8, "versions": np.uint8, "ip_hi": np.uint64, "ip_lo": np.uint64,
    "mac": np.uint64, "vipset": np.uint64, "count": np.int64, "first_ns": np.int64, "last_ns": np.int64,
    "first_frame": np.int64, "last_frame": np.int64, "prio_min": np.uint8, "prio_max": np.uint8,
    "at_255": np.int64, "resigned": np.int64, "last_resign_ns": np.int64, "resign_frame": np.int64,
    "adv_min": np.uint16, "adv_max": np.uint16, "ttl_min": np.uint8, "ttl_max": np.uint8, "bad_ttl": np.int64,
    "bad_ttl_frame": np.int64, "unicast": np.int64, "auth": np.uint8, "more": np.uint8, "sums": np.uint8,
}
SPEAKER_REDUCE = {
    "versions": np.bitwise_or, "count": np.add, "last_ns": np.maximum, "first_frame": np.minimum,
    "last_frame": np.maximum, "prio_min": np.minimum, "prio_max": np.maximum, "at_255": np.add,
    "resigned": np.add, "last_resign_ns": np.maximum, "resign_frame": np.maximum, "adv_min": np.minimum,
    "adv_max": np.maximum, "ttl_min": np.minimum, "ttl_max": np.maximum, "bad_ttl": np.add,
    "bad_ttl_frame": np.minimum, "unicast": np.add, "auth": np.bitwise_or, "more": np.maximum, "sums": np.bitwise_or,
}
RUN_COLUMNS = {"key": np.uint64, "group": np.uint64, "first_ns": np.int64, "last_ns": np.int64, "count": np.int64,
               "gap_ns": np.int64, "prio": np.uint8, "first_frame": np.int64, "last_frame": np.int64}
RUN_REDUCE = {"last_ns": np.maximum, "count": np.add, "gap_ns": np.maximum, "prio": np.maximum,
              "first_frame": np.minimum, "last_frame": np.maximum}
NEVER, NEVER_LAST = np.iinfo(np.int64).max, -1


def _typed(rows: dict, columns: dict) -> dict:
    return {name: np.asarray(rows[name]).astype(dtype) for name, dtype in columns.items()}


def _cap(rows: dict) -> tuple[dict, int]:
    """At most MAX_ROWS rows, the most recent kept; and how many were dropped."""
    extra = len(rows["key"]) - MAX_ROWS
    if extra <= 0:
        return rows, 0
    return take_rows(rows, np.sort(np.argsort(-rows["last_ns"], kind="stable")[:MAX_ROWS])), extra


def join_runs(rows: dict) -> dict:
    """Advertisement spans of one speaker in time order joined into activity runs: a span joins the run
    before it when it starts at most its gap (one MDI) after that run's end."""
    return join_adjacent(rows, RUN_REDUCE)


def master_down_ns(version, adver_cs, priority, carp) -> np.ndarray:
    """Master_Down_Interval in ns (keepalived vrrp.h): 3 x interval + skew; VRRPv2's skew (256 - priority)/256
    s, VRRPv3's that fraction of the interval; CARP 3 x (advbase + advskew/256), the table's interval."""
    interval = adver_cs.astype(np.int64) * (NS // CENTISECONDS)
    fraction = (256 - priority.astype(np.int64))
    skew = np.where(version == 3, fraction * interval // 256, fraction * NS // 256)
    return np.where(carp, 3 * interval, 3 * interval + skew)


def _mac(value: int) -> str:
    return mac_to_str(int(value))


@register
class VrrpDualMaster(Detector):
    rule_id = "vrrp-dual-master"
    EVE_SIGNATURE = (23, "Misc activity")
    # what its findings rest on beyond what it saw (detect.confidence): advertisements, and when masters overlap
    QUALITY_NEEDS = frozenset({"payload", "timing"})
    APP_TABLES = ("vrrp",)
    # the rules whose findings about the same virtual addresses or MAC make two masters critical
    AFTER = (GARP_WAR,)
    ALERTS = {
        "suppress_s": Param(float, 60.0, "least seconds between two events about one virtual router",
                            ALERT_SECONDS,
                            "Two masters fight for minutes; shorter intervals repeat it in alerts.jsonl."),
        "resolve_s": Param(float, 30.0, "seconds without an advertisement of the virtual router before it is "
                                        "resolved", ALERT_SECONDS,
                           "A master advertises every second by default and backups take over after about "
                           "3 s; a fight that pauses longer than this is raised again."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.speakers = empty_table(SPEAKER_COLUMNS)
        self.runs = empty_table(RUN_COLUMNS)
        self.vipsets: dict[int, tuple[str, ...]] = {}
        self.dropped = 0
        self.runs_of: dict[int, np.ndarray] = {}     # findings(): each speaker's activity runs
        self.unreported = 0

    # ---- update -----------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        tab = app.table(batch, "vrrp")
        if len(tab) == 0:
            return
        rows = tab["row"]
        family = np.where(batch["ip_version"][rows] == 6, 6, 4).astype(np.uint8)
        # a malformed message claims nothing (receivers drop it): judged apart with the other malformed ones
        advert = tab.valid("vrid") & (tab["fault"] == 0)
        if advert.any():
            self._add_adverts(batch, tab, np.flatnonzero(advert), family)

    def _vipsets(self, tab, messages) -> np.ndarray:
        """Each message's VIP-set hash (order-free: a sum of the addresses' hashes), its addresses remembered."""
        child = tab.children["vrrp_addr"]
        position = np.full(len(tab), -1, dtype=np.int64)
        position[messages] = np.arange(len(messages))
        owner = position[child["parent"]] if len(child) else np.zeros(0, dtype=np.int64)
        mine = np.flatnonzero(owner >= 0)
        vipset = tab["addr_count"][messages].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        hashes = mix64(child["ip_hi"][mine], child["ip_lo"][mine])
        np.add.at(vipset, owner[mine], hashes)
        for value in np.unique(vipset).tolist():
            if value in self.vipsets or len(self.vipsets) >= MAX_VIPSETS:
                continue
            first = int(np.flatnonzero(vipset == value)[0])
            addresses = mine[owner[mine] == first]
            self.vipsets[value] = tuple(sorted(ip_text(h, lo) for h, lo in zip(child["ip_hi"][addresses].tolist(),
                                                                                child["ip_lo"][addresses].tolist())))
        return vipset

    def _add_adverts(self, batch, tab, messages, family) -> None:
        rows = tab["row"][messages]
        family = family[messages]
        carp = (tab["carp"][messages] == 1).astype(np.uint8)
        vrid, version = tab["vrid"][messages], tab["version"][messages]
        # CARP's preference is its advskew (lower wins); VRRP's its priority (higher wins)
        priority = np.where(carp == 1, tab["carp_advskew"][messages], tab["priority"][messages]).astype(np.uint8)
        adver = tab["adver_int"][messages]
        # the interval speakers must agree on: VRRP's, CARP's advbase (advskew differs between them by design)
        agreed = np.where(carp == 1, tab["carp_advbase"][messages].astype(np.uint16) * CENTISECONDS, adver)
        link = links_of(batch, rows)
        layers = batch["layers"][rows]
        mac = np.where((layers & np.uint32(L_SRC_MAC)) != 0, batch["src_mac"][rows], 0).astype(np.uint64)
        ip_hi, ip_lo = batch["src_ip_hi"][rows], batch["src_ip_lo"][rows]
        dst_hi, dst_lo = batch["dest_ip_hi"][rows], batch["dest_ip_lo"][rows]
        multicast = np.where(family == 6, (dst_hi == np.uint64(GROUP_V6[0])) & (dst_lo == np.uint64(GROUP_V6[1])),
                             (dst_hi == 0) & (dst_lo == np.uint64(GROUP_V4)))
        ttl = batch["ttl"][rows]
        bad_ttl = multicast & (ttl != VRRP_TTL)
        ts, frame = batch["ts_ns"][rows], tab["frame"][messages]
        group = mix64(link, family, carp, vrid)
        speaker = mix64(group, ip_hi, ip_lo, mac)
        vipset = np.where(carp == 1, np.uint64(0), self._vipsets(tab, messages))
        resign = (carp == 0) & (priority == 0)
        auth = np.where(tab.valid("auth_type")[messages],
                        np.left_shift(1, np.minimum(tab["auth_type"][messages], 7)), 0)
        ones = np.ones(len(messages), dtype=np.int64)
        new = {"key": mix64(speaker, vipset), "group": group, "speaker": speaker, "link": link, "family": family,
               "carp": carp, "vrid": vrid, "versions": np.left_shift(1, np.minimum(version, 7)), "ip_hi": ip_hi,
               "ip_lo": ip_lo, "mac": mac, "vipset": vipset, "count": ones, "first_ns": ts, "last_ns": ts,
               "first_frame": frame, "last_frame": frame,
               "prio_min": np.where(resign, 255, priority), "prio_max": np.where(resign, 0, priority),
               "at_255": ((carp == 0) & (priority == 255)).astype(np.int64), "resigned": resign.astype(np.int64),
               "last_resign_ns": np.where(resign, ts, NEVER_LAST), "resign_frame": np.where(resign, frame, NEVER_LAST),
               "adv_min": agreed, "adv_max": agreed, "ttl_min": ttl, "ttl_max": ttl,
               "bad_ttl": bad_ttl.astype(np.int64),
               "bad_ttl_frame": np.where(bad_ttl, frame, NEVER), "unicast": (~multicast).astype(np.int64),
               "auth": auth, "more": tab.more[messages].astype(np.uint8),
               "sums": np.where(tab.valid("checksum_form")[messages],
                                np.left_shift(1, tab["checksum_form"][messages].astype(np.int64)), 0)}
        self.speakers, dropped = _cap(fold_rows(self.speakers, _typed(new, SPEAKER_COLUMNS), "key", SPEAKER_REDUCE))
        self.dropped += dropped
        # activity: the advertisements of a master (a resignation, priority 0, is its last word, not a claim)
        claim = ~resign
        if claim.any():
            gap = master_down_ns(version, adver, priority, carp == 1)
            spans = {"key": speaker[claim], "group": group[claim], "first_ns": ts[claim], "last_ns": ts[claim],
                     "count": ones[claim], "gap_ns": gap[claim], "prio": priority[claim],
                     "first_frame": frame[claim], "last_frame": frame[claim]}
            self.runs, dropped = _cap(join_runs(concat_tables(self.runs, _typed(spans, RUN_COLUMNS))))
            self.dropped += dropped

    def merge(self, other: VrrpDualMaster) -> VrrpDualMaster:
        check_merge(self, other)
        self.speakers, dropped = _cap(fold_rows(self.speakers, other.speakers, "key", SPEAKER_REDUCE))
        self.dropped += dropped
        self.runs, dropped = _cap(join_runs(concat_tables(self.runs, other.runs)))
        self.dropped += dropped
        self.dropped += other.dropped
        for value, addresses in other.vipsets.items():
            if len(self.vipsets) < MAX_VIPSETS:
                self.vipsets.setdefault(value, addresses)
        return self

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        sp, runs = self.speakers, self.runs
        order, starts, counts = group_by(runs["key"])
        self.runs_of = {int(runs["key"][order[a]]): order[a:a + c] for a, c in zip(starts.tolist(), counts.tolist())}
        order, starts, counts = group_by(sp["group"])
        groups = sorted((order[a:a + c] for a, c in zip(starts.tolist(), counts.tolist())),
                        key=lambda rows: int(sp["first_ns"][rows].min()))
        # a flood of forged virtual routers or senders: the first heard are reported, the others counted
        self.unreported = max(0, len(groups) - MAX_FINDINGS)
        return [self._group_finding(rows[np.argsort(sp["first_ns"][rows], kind="stable")], ctx)
                for rows in groups[:MAX_FINDINGS]]

    def _group_finding(self, rows: np.ndarray, ctx: AnalysisContext) -> Finding:
        sp, runs = self.speakers, self.runs
        first = rows[0]
        carp, vrid, family = bool(sp["carp"][first]), int(sp["vrid"][first]), int(sp["family"][first])
        link = int(sp["link"][first])
        where = link_text(link)
        vmac = _mac(VIRTUAL_MAC[4 if carp else family] | vrid)
        versions = sorted({v for r in rows for v in (2, 3) if int(sp["versions"][r]) & (1 << v)})
        name = (f"CARP vhid {vrid}" if carp else f"VRRPv{'/v'.join(map(str, versions))} VRID {vrid}") + \
            f" (IPv{family}{', ' + where if where else ''})"
        # the speakers (source IP and MAC), each over all its VIP sets
        speakers: dict[int, dict] = {}
        for r in rows.tolist():
            s = speakers.setdefault(int(sp["speaker"][r]), {
                "ip": ip_text(sp["ip_hi"][r], sp["ip_lo"][r]), "mac": _mac(sp["mac"][r]), "count": 0,
                "first": int(sp["first_ns"][r]), "last": int(sp["last_ns"][r]), "prio": set(), "adv": set(),
                "ttl": set(), "vipsets": set(), "auth": 0, "bad_ttl": 0, "bad_ttl_frame": NEVER, "unicast": 0,
                "at_255": 0, "resigned": 0, "last_resign": NEVER_LAST, "frames": [], "more": 0, "sums": 0})
            s["count"] += int(sp["count"][r])
            s["first"], s["last"] = min(s["first"], int(sp["first_ns"][r])), max(s["last"], int(sp["last_ns"][r]))
            if sp["prio_min"][r] <= sp["prio_max"][r]:
                s["prio"] |= {int(sp["prio_min"][r]), int(sp["prio_max"][r])}
            s["adv"] |= {int(sp["adv_min"][r]), int(sp["adv_max"][r])}
            s["ttl"] |= {int(sp["ttl_min"][r]), int(sp["ttl_max"][r])}
            if not carp:
                s["vipsets"].add(int(sp["vipset"][r]))
            s["auth"] |= int(sp["auth"][r])
            s["bad_ttl"] += int(sp["bad_ttl"][r])
            s["bad_ttl_frame"] = min(s["bad_ttl_frame"], int(sp["bad_ttl_frame"][r]))
            s["unicast"] += int(sp["unicast"][r])
            s["at_255"] += int(sp["at_255"][r])
            s["resigned"] += int(sp["resigned"][r])
            s["last_resign"] = max(s["last_resign"], int(sp["last_resign_ns"][r]))
            s["more"] |= int(sp["more"][r])
            s["sums"] |= int(sp["sums"][r])
            s["frames"] += [int(sp["first_frame"][r]), int(sp["last_frame"][r])]
            if sp["resign_frame"][r] != NEVER_LAST:
                s["frames"].append(int(sp["resign_frame"][r]))
        for key, s in speakers.items():
            mine = self.runs_of.get(key, np.zeros(0, dtype=np.int64))
            mine = mine[np.argsort(runs["first_ns"][mine], kind="stable")]
            s["runs"] = mine
            s["mdi"] = int(runs["gap_ns"][mine].max()) if len(mine) else 0
            s["who"] = f"{s['ip']} ({s['mac']})"
        # each speaker is compared with the first ones heard: forged speakers by the thousand cost no more
        keys = sorted(speakers, key=lambda k: speakers[k]["first"])[:COMPARED_SPEAKERS]
        problems: list[tuple[str, str]] = []
        frames: list[int] = [f for s in speakers.values() for f in s["frames"]]

        # ---- two masters at once
        pairs, elections = [], []
        for i, a in enumerate(keys):
            for b in keys[i + 1:]:
                pair = self._overlap(speakers[a], speakers[b])
                if pair is None:
                    continue
                # at least one MDI, and some time at all: crafted adverts with interval 0 have an MDI of 0
                two = pair["longest_ns"] > 0 and pair["longest_ns"] >= pair["mdi_ns"]
                (pairs if two else elections).append(pair)
        window = None
        if pairs:
            window = (min(p["from_ns"] for p in pairs), max(p["to_ns"] for p in pairs))
            text = "; ".join(
                f"{p['a']} and {p['b']} advertised together for {p['total_ns'] / NS:,.1f} s (longest "
                f"{p['longest_ns'] / NS:,.1f} s from {iso_time(p['from_ns'])}, Master_Down_Interval "
                f"{p['mdi_ns'] / NS:,.2f} s)" for p in pairs[:LISTED])
            problems.append(("high", f"two masters at once: {text}"))
            frames += [f for p in pairs for f in p["frames"]]
        vips = sorted({ip for s in speakers.values() for v in s["vipsets"] for ip in self.vipsets.get(v, ())})
        chained = self._chained(ctx, window, set(vips), vmac) if window else []
        if chained:
            problems.append(("critical", "the masters fight over the addresses (the seed 002 chain): " + ", ".join(
                f"{c['rule']} {c['severity']} '{c['identifier']}'" for c in chained[:LISTED])
                + (f", +{len(chained) - LISTED} more" if len(chained) > LISTED else "")))

        # ---- what breaks an election
        owners = [s["who"] for s in speakers.values() if s["at_255"]]
        if not carp and len(owners) >= 2:
            problems.append(("medium", f"{len(owners)} speakers advertise priority 255, each the address owner: "
                                       f"{', '.join(owners[:LISTED])}"))
        intervals = sorted({a for s in speakers.values() for a in s["adv"]})
        if len(speakers) >= 2 and len(intervals) >= 2:
            listing = ", ".join(f"{s['who']} {'/'.join(f'{a / CENTISECONDS:g}' for a in sorted(s['adv']))} s"
                                for s in list(speakers.values())[:LISTED])
            problems.append(("medium", f"{'advbase' if carp else 'advertisement intervals'} differ ({listing})"))
        sets = sorted({v for s in speakers.values() for v in s["vipsets"]})
        if len(sets) >= 2:
            listing = "; ".join(f"{s['who']}: {', '.join(self._vip_text(v) for v in sorted(s['vipsets']))}"
                                for s in list(speakers.values())[:LISTED])
            problems.append(("medium", f"the speakers list different virtual addresses ({listing})"))
        low_ttl = [s for s in speakers.values() if s["bad_ttl"]]
        if low_ttl:
            problems.append(("medium", "multicast advertisements with a TTL/hop limit other than 255, which "
                                       "receivers drop: " + ", ".join(
                                           f"{s['who']} {s['bad_ttl']:,} (TTL {'/'.join(map(str, sorted(s['ttl'])))})"
                                           for s in low_ttl[:LISTED])))
            frames += [s["bad_ttl_frame"] for s in low_ttl]
        auths = {bit for s in speakers.values() for bit in range(8) if s["auth"] & (1 << bit)}
        if len(auths) >= 2:
            problems.append(("medium", "VRRPv2 authentication types differ: " + ", ".join(
                f"{s['who']} type {'/'.join(str(b) for b in range(8) if s['auth'] & (1 << b))}"
                for s in list(speakers.values())[:LISTED])))
        # VRRPv3 checksum forms: each is accepted; which one each speaker uses is said, and a mix is a hazard
        forms = {k: [form for form in SUM_NAMES if s["sums"] & (1 << form)] for k, s in speakers.items()}
        if len({tuple(f) for f in forms.values() if f}) >= 2:
            problems.append(("low", "the speakers sum their checksums differently (" + "; ".join(
                f"{speakers[k]['who']} {' and '.join(SUM_NAMES[form] for form in f)}"
                for k, f in list(forms.items())[:LISTED] if f) + "): a receiver that accepts one form only drops "
                "the other's advertisements, and may become master too"))
        notes = []
        for k, f in forms.items():
            if any(form != CHECKSUM_RFC for form in f):
                notes.append(f"{speakers[k]['who']} sums its VRRPv3 checksum "
                             f"{' and '.join(SUM_NAMES[form] for form in f)}")
        for p in elections[:LISTED]:
            notes.append(f"{p['a']} and {p['b']} overlapped {p['longest_ns'] / NS:,.2f} s at "
                         f"{iso_time(p['from_ns'])}, less than the Master_Down_Interval: an election")
        for s in speakers.values():
            if s["resigned"]:
                notes.append(f"{s['who']} resigned (priority 0) at {iso_time(s['last_resign'])}")
            if s["unicast"]:
                notes.append(f"{s['who']} sent {plural(s['unicast'], 'advertisement')} by unicast")
        return self._write_group(name, carp, vrid, family, link, where, vmac, speakers, vips, problems, notes,
                                 chained, frames, pairs)

    def _overlap(self, a: dict, b: dict) -> dict | None:
        """How the activity runs of two speakers overlap: total, longest and when; None if they never do."""
        runs = self.runs
        ra, rb = a["runs"][:INTERVALS_COMPARED], b["runs"][:INTERVALS_COMPARED]
        if len(ra) == 0 or len(rb) == 0:
            return None
        start = np.maximum(runs["first_ns"][ra][:, None], runs["first_ns"][rb][None, :])
        end = np.minimum(runs["last_ns"][ra][:, None], runs["last_ns"][rb][None, :])
        length = end - start
        hit = length >= 0
        if not hit.any():
            return None
        i, j = np.unravel_index(np.argmax(np.where(hit, length, -1)), length.shape)
        together = np.argwhere(hit)
        return {"a": a["who"], "b": b["who"], "mdi_ns": max(a["mdi"], b["mdi"]), "total_ns": int(length[hit].sum()),
                "longest_ns": int(length[i, j]), "from_ns": int(start[hit].min()), "to_ns": int(end[hit].max()),
                "frames": [int(runs["first_frame"][ra][i]), int(runs["first_frame"][rb][j]),
                           int(runs["last_frame"][ra][i]), int(runs["last_frame"][rb][j])],
                "runs_together": len(together)}

    def _chained(self, ctx: AnalysisContext, window, vips: set, vmac: str) -> list[dict]:
        """The findings (medium or more) of the rules in AFTER about these virtual addresses or this virtual
        MAC, within CHAIN_SLACK_S of the two masters."""
        out = []
        lo, hi = window[0] - CHAIN_SLACK_S * NS, window[1] + CHAIN_SLACK_S * NS
        for rule in self.AFTER:
            for f in ctx.findings.get(rule, []):
                if f.rank < SEVERITY_RANK["medium"] or f.last_seen < lo or f.first_seen > hi:
                    continue
                ips = {f.src_ip, f.dest_ip, *f.evidence.get("ips", [])}
                macs = {f.src_mac, f.dest_mac, *f.evidence.get("macs", [])}
                if ips & vips or vmac in macs:
                    out.append({"rule": f.rule, "identifier": f.identifier, "severity": f.severity,
                                "msg": f.msg if len(f.msg) <= 300 else f.msg[:297] + "..."})
        return out

    def _vip_text(self, vipset: int) -> str:
        addresses = self.vipsets.get(vipset)
        if addresses is None:
            return "(addresses not kept)"
        return "/".join(addresses[:LISTED]) + (" ..." if len(addresses) > LISTED else "") if addresses else "none"

    def _write_group(self, name, carp, vrid, family, link, where, vmac, speakers, vips, problems, notes, chained,
                     frames, pairs) -> Finding:
        runs = self.runs
        timeline = []
        for s in speakers.values():
            for r in s["runs"].tolist():
                timeline.append({"speaker": s["who"], "from": int(runs["first_ns"][r]), "to": int(runs["last_ns"][r]),
                                 "adverts": int(runs["count"][r]), "priority": int(runs["prio"][r])})
        timeline.sort(key=lambda t: t["from"])
        severity = max((sev for sev, _ in problems), key=SEVERITY_RANK.get, default="info")
        t0 = min(s["first"] for s in speakers.values())
        t1 = max(s["last"] for s in speakers.values())
        preference = "advskew" if carp else "priority"
        listing = ", ".join(
            f"{s['who']} {preference} {'/'.join(map(str, sorted(s['prio']))) or '0'}, {plural(s['count'], 'advert')}"
            for s in list(speakers.values())[:LISTED])
        steps = " -> ".join(f"{t['speaker'].split(' ')[0]} {iso_time(t['from'])[11:19]}" for t in timeline[:LISTED])
        ordered = [text for _, text in sorted(problems, key=lambda p: -SEVERITY_RANK[p[0]])]
        msg = (f"{name}, virtual MAC {vmac}" + (f", addresses {', '.join(vips[:LISTED])}" if vips else "") + ": "
               + ("; ".join(ordered) + ". " if ordered else "")
               + f"Speakers: {listing}. Master timeline: {steps}" + (" ..." if len(timeline) > LISTED else "")
               + (". " + "; ".join(notes[:LISTED]) if notes else "")
               + (f" (+{len(notes) - LISTED:,} more)" if len(notes) > LISTED else ""))
        evidence = {
            "vrid": vrid, "carp": carp, "ip_version": family, "virtual_mac": vmac, "ips": vips[:64], "macs": [vmac],
            "speakers": [{"ip": s["ip"], "mac": s["mac"], "adverts": s["count"], preference: sorted(s["prio"]),
                          "adver_int_s": [a / CENTISECONDS for a in sorted(s["adv"])], "ttl": sorted(s["ttl"]),
                          "first_seen": iso_time(s["first"]), "last_seen": iso_time(s["last"]),
                          "master_down_interval_s": s["mdi"] / NS, "resignations": s["resigned"],
                          "checksum": [SUM_NAMES[form] for form in SUM_NAMES if s["sums"] & (1 << form)],
                          "virtual_addresses": [self._vip_text(v) for v in sorted(s["vipsets"])]}
                         for s in list(speakers.values())[:TIMELINE]],
            "timeline": [{**t, "from": iso_time(t["from"]), "to": iso_time(t["to"])} for t in timeline[:TIMELINE]],
            "evidence_frames": evidence_frames(np.unique(np.array(frames, dtype=np.int64))),
        }
        if where:
            evidence["link"] = where
        if pairs:
            evidence["two_masters"] = [{"speakers": [p["a"], p["b"]], "together_s": p["total_ns"] / NS,
                                        "longest_s": p["longest_ns"] / NS, "master_down_interval_s": p["mdi_ns"] / NS,
                                        "from": iso_time(p["from_ns"]), "to": iso_time(p["to_ns"])}
                                       for p in pairs[:64]]
        if chained:
            evidence["chained"] = chained
        if any(s["more"] for s in speakers.values()):
            evidence["more_addresses"] = True
        if self.dropped:
            evidence["rows_not_kept"] = self.dropped
        if self.unreported:
            evidence["virtual_routers_not_reported"] = self.unreported
        if len(speakers) > COMPARED_SPEAKERS:
            evidence["speakers_not_compared"] = len(speakers) - COMPARED_SPEAKERS
        first = min(speakers.values(), key=lambda s: s["first"])
        identifier = (f"{'CARP vhid' if carp else 'VRRP VRID'} {vrid} IPv{family}" + (f" {where}" if where else ""))
        return self.finding(severity, msg, identifier=identifier, first_seen=t0, last_seen=t1,
                            n=sum(s["count"] for s in speakers.values()), src_ip=first["ip"], src_mac=vmac,
                            proto="CARP" if carp else "VRRP", evidence=evidence)

    # ---- report -----------------------------------------------------------
    def figures(self, findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
        groups = [f for f in findings if f.evidence.get("timeline")]
        return [TimelineFigure(groups[:FIGURE_GROUPS], bins)] if groups else []


class TimelineFigure(ReportFigure):
    """Who was master of each virtual router when: one row per speaker, a bar per activity run."""

    needs_batches = False

    title = "VRRP/CARP master timeline"

    def __init__(self, findings: list[Finding], bins: TimeBins):
        self.bins = bins
        self.rows: list[tuple[str, list[tuple[float, float]]]] = []
        for f in findings:
            label = f.identifier
            spans: dict[str, list[tuple[float, float]]] = {}
            for t in f.evidence["timeline"]:
                start = _seconds(t["from"], bins)
                width = max(_seconds(t["to"], bins) - start, bins.width_s / 4)
                spans.setdefault(t["speaker"], []).append((start, width))
            for speaker, bars in spans.items():
                self.rows.append((f"{label}: {speaker}", bars))
        self.size = (8.0, 1.0 + 0.4 * len(self.rows))

    def add(self, batch: PacketBatch) -> None:
        """Nothing: the runs are in the findings' evidence."""

    def merge(self, other: TimelineFigure) -> TimelineFigure:
        """Nothing to take: the runs are in the findings' evidence."""
        return self

    def draw(self, ax, flows) -> None:
        for k, (_, bars) in enumerate(self.rows):
            ax.broken_barh(bars, (k - 0.35, 0.7), color=f"C{k % 10}")
        ax.set_yticks(range(len(self.rows)))
        ax.set_yticklabels([label for label, _ in self.rows], fontsize="small")
        self.bins.time_axis(ax)
        ax.set_xlim(0, self.bins.count * self.bins.width_s)


def _seconds(text: str, bins: TimeBins) -> float:
    """An ISO time of the evidence as seconds after the report's axis origin."""
    import datetime as dt
    stamp = dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
    return (int(stamp.timestamp() * 1_000_000) * 1000 - bins.start_ns) / NS



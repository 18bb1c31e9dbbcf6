"""rip-announce: who announces routes over RIP, and which announcements a router must not believe.

A RIP response (RFC 1058, RFC 2453; RIPng RFC 2080) tells every router and
RIP listener on the link which prefixes the sender reaches and at what
metric; without authentication anyone on the link can send one (seed 004:
"without additional configuration, anyone could send routes"). This rule
reads the responses in the `rip` application table (the one RIP parser,
which the probe rule reads too) and keeps, per speaker (address, MAC, VLAN),
what it sent and, per route it announced, when it was reachable (metric
1-15) and when unreachable (16), so that speakers can be compared prefix by
prefix on one link. Requests are the probe rule's business (rip_trigger.py).

A speaker's finding says, most severe first (FRRouting ripd/ripd.c
`rip_response_process` and ripngd/ripngd.c `ripng_response_process` are the
receivers' checks):

- not among the site file's `routers`: medium; it announces a default route
  or undercuts an allowed router's metric for a prefix: high (route
  injection). Without `routers` this cannot be judged; a speaker that joins
  a capture's RIP exchange one update interval (30 s) after the others and
  announces only routes that take traffic over (a default route, or a
  better metric than a speaker already there) is medium all the same;
- metric 16 for a prefix another speaker keeps announcing reachable, when
  the speaker had never announced it itself: high (poisoning) from a
  speaker outside `routers`, from a speaker with no reachable route of its
  own, or from another MAC with the announcing router's address (spoofed);
  from an allowed router it is split horizon with poisoned reverse; without
  `routers`, from a speaker that has routes of its own, low: poisoned
  reverse or poisoning could not be told apart;
- responses a receiver rejects for where they come from: a source port
  other than 520 (521), a RIPng source that is not link-local or a hop limit
  other than 255, and a source outside the site's `local_networks` when the
  site file gives them: medium (a response from off the link is someone
  trying to inject routes from afar);
- malformed responses (the `rip` table's faults: a message a receiver drops
  whole for its length, version, command, authentication or UDP length, and
  routes it ignores: a metric outside 1-16, a destination no router
  installs, bits outside the mask, a RIPng prefix length above 128) are no
  announcement: their routes are not counted, and the finding mentions them
  as context (info). They are reported apart, with the other protocols'
  malformed messages, at low at most: a route every receiver rejects
  changes no routing table;
- unauthenticated RIPv1/RIPv2 responses with `require_auth`: medium;
- a router withdrawing its own routes (metric 16 for a prefix it announced),
  or passing on another's withdrawal: info, as is a speaker with nothing to
  report.

State: one row per speaker and one per (speaker, prefix), merged like the
other detectors' tables (counts summed, earliest first, latest last),
bounded by MAX_SPEAKERS and MAX_ROUTES (the rows first seen are kept, the
others counted).
"""
from __future__ import annotations

import numpy as np

from ..decode import app
from ..decode.addr import mac_to_str
from ..decode.app.rip import (
    AFI_IP,
    BAD_AUTH,
    FAULTS,
    INFINITY,
    KIND_RIPNG,
    KIND_WRONG_FAMILY,
    RESPONSE,
    RIP_PORT,
    RIPNG_PORT,
    WHOLE_MESSAGE_FAULTS,
)
from ..detect.columns import ip_text
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.grouping import group_by
from ..detect.hashing import mix64
from ..detect.state import empty_table, fold_rows
from ..findings import SEVERITY_RANK, Finding, iso_time
from ..rules import ALERT_SECONDS, Param
from ..schema import L_QINQ, L_SRC_MAC, L_VLAN, PacketBatch
from ..units import NS, plural

# RFC 2453 section 3.8: a router sends its whole table every 30 s and drops a route not heard for 180 s
UPDATE_INTERVAL_S = 30
ROUTE_TIMEOUT_S = 180
AUTH_PASSWORD, AUTH_CRYPTO = 2, 3      # RFC 2453 section 4.1; RFC 2082, RFC 4822
HOP_LIMIT = 255                        # RFC 2080 section 2.4.2: RIPng updates are sent with hop limit 255
NO_MASK = 0xFF                         # prefix length of a RIPv1 route (or RIPv2 with mask 0): the receiver's
                                       # classful guess, not said on the wire
NEVER, NEVER_LAST = np.iinfo(np.int64).max, -1

# why a receiver rejects a well-formed response for where it comes from (bits of a speaker's `reasons`)
R_SOURCE_PORT, R_NOT_LINK_LOCAL, R_HOP_LIMIT = (1 << k for k in range(3))
REASONS = {
    R_SOURCE_PORT: "source port not the RIP port",
    R_NOT_LINK_LOCAL: "RIPng source not link-local",
    R_HOP_LIMIT: f"RIPng hop limit not {HOP_LIMIT}",
}
# versions a speaker used (bits of `versions`) and authentication it carried (bits of `auth`)
V_RIP1, V_RIP2, V_RIPNG = 1, 2, 4
VERSION_NAMES = {V_RIP1: "RIPv1", V_RIP2: "RIPv2", V_RIPNG: "RIPng"}
A_PASSWORD, A_CRYPTO = 1, 2
AUTH_NAMES = {A_PASSWORD: "password (RFC 2453)", A_CRYPTO: "cryptographic (RFC 2082/4822)"}

# address tests on the schema's 128-bit values
LINK_LOCAL_V6 = (0xFE80 << 48, 0xFFC0 << 48)           # fe80::/10 as (value, mask) of the high half

# Rows kept: a RIP link has a handful of speakers and a RIP domain at most a few thousand routes; a flood of
# spoofed speakers or prefixes keeps the rows first seen and counts the rest (each speaker kept is a finding)
MAX_SPEAKERS = 4096
MAX_ROUTES = 262_144
# Speakers of one prefix each speaker is compared with (the first heard): a LAN has a handful of routers
COMPARED_SPEAKERS = 64
# Routes named in a finding's message; its evidence lists up to ROUTES_IN_EVIDENCE
ROUTES_LISTED = 6
ROUTES_IN_EVIDENCE = 64

SPEAKER_COLUMNS = {
    "key": np.uint64, "src_ip_hi": np.uint64, "src_ip_lo": np.uint64, "src_mac": np.uint64, "has_mac": np.bool_,
    "link": np.uint32, "ripng": np.bool_, "src_port": np.uint16, "ttl": np.uint8, "responses": np.int64,
    "authenticated": np.int64, "auth": np.uint8, "versions": np.uint8, "reasons": np.uint32, "rejected": np.int64,
    "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64, "last_frame": np.int64,
    "reject_first_frame": np.int64, "reject_last_frame": np.int64,
    # malformed responses (the rip table's faults): how many, dropped whole, routes ignored, the first one's frame
    "faults": np.uint32, "malformed": np.int64, "dropped_whole": np.int64, "ignored_routes": np.int64,
    "malformed_frame": np.int64,
}
ROUTE_COLUMNS = {
    "key": np.uint64, "speaker": np.uint64, "src_ip_hi": np.uint64, "src_ip_lo": np.uint64, "src_mac": np.uint64,
    "link": np.uint32, "prefix_hi": np.uint64, "prefix_lo": np.uint64, "plen": np.uint8, "count": np.int64,
    "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64, "last_frame": np.int64,
    "reachable": np.int64, "best_metric": np.uint32, "first_reachable_ns": np.int64, "last_reachable_ns": np.int64,
    "unreachable": np.int64, "first_unreachable_ns": np.int64, "last_unreachable_ns": np.int64,
    "first_unreachable_frame": np.int64, "last_reachable_frame": np.int64,
}
SPEAKER_REDUCE = {"responses": np.add, "authenticated": np.add, "auth": np.bitwise_or, "versions": np.bitwise_or,
                  "reasons": np.bitwise_or, "rejected": np.add, "last_ns": np.maximum, "first_frame": np.minimum,
                  "last_frame": np.maximum, "reject_first_frame": np.minimum, "reject_last_frame": np.maximum,
                  "faults": np.bitwise_or, "malformed": np.add, "dropped_whole": np.add, "ignored_routes": np.add,
                  "malformed_frame": np.minimum}
ROUTE_REDUCE = {"count": np.add, "last_ns": np.maximum, "first_frame": np.minimum, "last_frame": np.maximum,
                "reachable": np.add, "best_metric": np.minimum, "first_reachable_ns": np.minimum,
                "last_reachable_ns": np.maximum, "unreachable": np.add, "first_unreachable_ns": np.minimum,
                "last_unreachable_ns": np.maximum, "first_unreachable_frame": np.minimum,
                "last_reachable_frame": np.maximum}


def _bounded(rows: dict, limit: int) -> tuple[dict, int]:
    """The `limit` rows first seen, and how many were dropped."""
    extra = len(rows["key"]) - limit
    if extra <= 0:
        return rows, 0
    keep = np.sort(np.argsort(rows["first_ns"], kind="stable")[:limit])
    return {name: col[keep] for name, col in rows.items()}, extra


def prefix_text(hi: int, lo: int, plen: int) -> str:
    """A route as an engineer writes it: 10.1.0.0/16, 2001:db8::/32; a RIPv1 route without its length."""
    text = ip_text(hi, lo)
    return text if plen == NO_MASK else f"{text}/{plen}"


@register
class RipAnnounce(Detector):
    rule_id = "rip-announce"
    EVE_SIGNATURE = (13, "Potentially Bad Traffic")
    # what its findings rest on beyond what it saw (detect.confidence): the routes its responses carry
    QUALITY_NEEDS = frozenset({"payload"})
    APP_TABLES = ("rip",)
    PARAMS = {
        "require_auth": Param(bool, False, "RIPv1 and RIPv2 responses must carry authentication (an RFC 2453 "
                                           "password or an RFC 2082/4822 digest)", None,
                              "On, as a router configured for authentication, every unauthenticated response is "
                              "medium (RIPv1 can never comply); off, authentication is reported, not required. "
                              "RIPng has none of its own (RFC 2080 relies on IPsec) and is never held to it."),
    }
    ALERTS = {
        "suppress_s": Param(float, 300.0, "least seconds between two events about one speaker", ALERT_SECONDS,
                            "A speaker repeats its table every 30 s; a shorter interval raises an event per update, "
                            "a longer one may hide a second round of injection."),
        "resolve_s": Param(float, 200.0, "seconds without a response from the speaker before it is resolved",
                           ALERT_SECONDS,
                           "Routers drop a route not heard for 180 s (RFC 2453); shorter would resolve a speaker "
                           "whose routes are still installed."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.speakers = empty_table(SPEAKER_COLUMNS)
        self.routes = empty_table(ROUTE_COLUMNS)
        self.dropped_speakers = 0
        self.dropped_routes = 0

    def update(self, batch: PacketBatch) -> None:
        tab = app.table(batch, "rip")
        messages = np.flatnonzero(tab.valid("command") & (tab["command"] == RESPONSE)
                                  & (tab["kind"] != KIND_WRONG_FAMILY))
        if len(messages) == 0:
            return
        rows = tab["row"][messages]
        ripng = tab["kind"][messages] == KIND_RIPNG
        layers = batch["layers"][rows]
        src_hi, src_lo = batch["src_ip_hi"][rows], batch["src_ip_lo"][rows]
        has_mac = (layers & np.uint32(L_SRC_MAC)) != 0
        mac = np.where(has_mac, batch["src_mac"][rows], np.uint64(0))
        # the link a response was heard on: speakers are compared within one (VLAN, inner VLAN) only
        outer = np.where((layers & np.uint32(L_VLAN)) != 0, batch["vlan_outer"][rows], 0).astype(np.uint32)
        inner = np.where((layers & np.uint32(L_QINQ)) != 0, batch["vlan_inner"][rows], 0).astype(np.uint32)
        link = (outer << np.uint32(16)) | inner
        speaker = mix64(src_hi, src_lo, mac, link)
        ttl, sport = batch["ttl"][rows], batch["src_port"][rows]
        verdict, version = tab["verdict"][messages], tab["version"][messages]

        reasons = np.where(sport != np.where(ripng, RIPNG_PORT, RIP_PORT), R_SOURCE_PORT, 0).astype(np.uint32)
        link_local = (src_hi & np.uint64(LINK_LOCAL_V6[1])) == np.uint64(LINK_LOCAL_V6[0])
        reasons |= np.where(ripng & ~link_local, R_NOT_LINK_LOCAL, 0).astype(np.uint32)
        reasons |= np.where(ripng & (ttl != HOP_LIMIT), R_HOP_LIMIT, 0).astype(np.uint32)
        # malformed: dropped whole by a receiver, or holding routes it ignores (the table's faults)
        fault = tab["fault"][messages]
        dropped = (fault & np.uint32(WHOLE_MESSAGE_FAULTS)) != 0

        # the route entries of these messages: RIP family 2, RIPng entries other than next hops
        child = tab.children["rip_entry"]
        position = np.full(len(tab), -1, dtype=np.int64)
        position[messages] = np.arange(len(messages))
        owner = position[child["parent"]]
        is_route = (owner >= 0) & (child["next_hop_entry"] == 0) & (
            (tab["kind"][child["parent"]] == KIND_RIPNG) | (child.valid("afi") & (child["afi"] == AFI_IP)))
        entries = np.flatnonzero(is_route)
        m = owner[entries]
        hi, lo = child["prefix_hi"][entries], child["prefix_lo"][entries]
        metric = child["metric"][entries]
        entry_ng = ripng[m]
        ignored = child["fault"][entries] != 0
        ignored_routes = np.bincount(m[ignored & ~dropped[m]], minlength=len(messages))

        self._add_speakers(speaker, src_hi, src_lo, mac, has_mac, link, ripng, sport, ttl, verdict, version,
                           reasons, fault, dropped, ignored_routes, tab, messages, batch, rows)
        good = ~ignored & ~dropped[m]
        # the prefix length a receiver installs: 0 for the default route, none said for RIPv1 or a zero mask
        plen = child["prefix_len"][entries].astype(np.int64)
        mask = child["mask"][entries].astype(np.uint64)
        address = lo & np.uint64(0xFFFF_FFFF)
        default = np.where(entry_ng, (hi == 0) & (lo == 0) & (plen == 0), address == 0)
        said = child.valid("prefix_len")[entries] & (entry_ng | (mask != 0))
        plen = np.where(default, 0, np.where(said, plen, NO_MASK)).astype(np.uint8)
        self._add_routes(speaker[m][good], src_hi[m][good], src_lo[m][good], mac[m][good], link[m][good],
                         hi[good], lo[good], plen[good], metric[good], batch["ts_ns"][rows][m][good],
                         batch["frame"][rows][m][good])

    def _add_speakers(self, speaker, src_hi, src_lo, mac, has_mac, link, ripng, sport, ttl, verdict, version,
                      reasons, fault, dropped, ignored_routes, tab, messages, batch, rows) -> None:
        auth_type = tab["auth_type"][messages]
        signed = tab.valid("auth_type")[messages] & (verdict != BAD_AUTH)
        auth = np.where(signed & (auth_type == AUTH_PASSWORD), A_PASSWORD,
                        np.where(signed & (auth_type == AUTH_CRYPTO), A_CRYPTO, 0)).astype(np.uint8)
        versions = np.where(ripng, V_RIPNG, np.where(version == 1, V_RIP1, V_RIP2)).astype(np.uint8)
        rejected = reasons != 0
        ts, frame = batch["ts_ns"][rows], batch["frame"][rows]
        new = {"key": speaker, "src_ip_hi": src_hi, "src_ip_lo": src_lo, "src_mac": mac, "has_mac": has_mac,
               "link": link, "ripng": ripng, "src_port": sport, "ttl": ttl,
               "responses": np.ones(len(speaker), dtype=np.int64), "authenticated": (auth != 0).astype(np.int64),
               "auth": auth, "versions": versions, "reasons": reasons, "rejected": rejected.astype(np.int64),
               "first_ns": ts, "last_ns": ts, "first_frame": frame, "last_frame": frame,
               "reject_first_frame": np.where(rejected, frame, NEVER), "reject_last_frame": np.where(rejected, frame,
                                                                                                     NEVER_LAST),
               "faults": fault, "malformed": (fault != 0).astype(np.int64), "dropped_whole": dropped.astype(np.int64),
               "ignored_routes": ignored_routes, "malformed_frame": np.where(fault != 0, frame, NEVER)}
        new = {name: np.asarray(col).astype(SPEAKER_COLUMNS[name]) for name, col in new.items()}
        self.speakers, dropped = _bounded(fold_rows(self.speakers, new, "key", SPEAKER_REDUCE), MAX_SPEAKERS)
        self.dropped_speakers += dropped

    def _add_routes(self, speaker, src_hi, src_lo, mac, link, hi, lo, plen, metric, ts, frame) -> None:
        reachable = metric < INFINITY
        new = {"key": mix64(speaker, hi, lo, plen), "speaker": speaker, "src_ip_hi": src_hi, "src_ip_lo": src_lo,
               "src_mac": mac, "link": link, "prefix_hi": hi, "prefix_lo": lo, "plen": plen,
               "count": np.ones(len(speaker), dtype=np.int64), "first_ns": ts, "last_ns": ts, "first_frame": frame,
               "last_frame": frame, "reachable": reachable.astype(np.int64),
               "best_metric": np.where(reachable, metric, INFINITY),
               "first_reachable_ns": np.where(reachable, ts, NEVER),
               "last_reachable_ns": np.where(reachable, ts, NEVER_LAST),
               "unreachable": (~reachable).astype(np.int64),
               "first_unreachable_ns": np.where(reachable, NEVER, ts),
               "last_unreachable_ns": np.where(reachable, NEVER_LAST, ts),
               "first_unreachable_frame": np.where(reachable, NEVER, frame),
               "last_reachable_frame": np.where(reachable, frame, NEVER_LAST)}
        new = {name: np.asarray(col).astype(ROUTE_COLUMNS[name]) for name, col in new.items()}
        self.routes, dropped = _bounded(fold_rows(self.routes, new, "key", ROUTE_REDUCE), MAX_ROUTES)
        self.dropped_routes += dropped

    def merge(self, other: RipAnnounce) -> RipAnnounce:
        check_merge(self, other)
        self.speakers, dropped_speakers = _bounded(fold_rows(self.speakers, other.speakers, "key", SPEAKER_REDUCE),
                                                   MAX_SPEAKERS)
        self.routes, dropped_routes = _bounded(fold_rows(self.routes, other.routes, "key", ROUTE_REDUCE), MAX_ROUTES)
        self.dropped_speakers += other.dropped_speakers + dropped_speakers
        self.dropped_routes += other.dropped_routes + dropped_routes
        return self

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        speakers = self.speakers
        if len(speakers["key"]) == 0:
            return []
        judge = _Judgement(self, speakers, self.routes)
        return [judge.finding(s) for s in range(len(speakers["key"]))]


class _Judgement:
    """What the speakers' routes say about each other, computed once for all findings."""

    def __init__(self, detector: RipAnnounce, speakers: dict, routes: dict):
        self.detector = detector
        self.site = detector.site
        self.speakers, self.routes = speakers, routes
        self.routers_given = self.site.given("routers")
        n = len(speakers["key"])
        self.ip = [ip_text(h, lo) for h, lo in zip(speakers["src_ip_hi"].tolist(), speakers["src_ip_lo"].tolist())]
        self.mac = [mac_to_str(m) if has else None for m, has in zip(speakers["src_mac"].tolist(),
                                                                       speakers["has_mac"].tolist())]
        self.allowed = [self.routers_given and self.site.is_router(ip=self.ip[s], mac=self.mac[s]) for s in range(n)]
        index = {int(k): s for s, k in enumerate(speakers["key"].tolist())}
        # which speaker each route row belongs to (rows of a speaker dropped by the bound have none), and each
        # speaker's route rows
        self.owner = np.array([index.get(int(k), -1) for k in routes["speaker"].tolist()], dtype=np.int64)
        order, starts, counts = group_by(self.owner)
        self.rows_of = {int(self.owner[order[a]]): order[a:a + c] for a, c in zip(starts.tolist(), counts.tolist())}
        # each link's two first speakers (a speaker an update interval after the first other one joined late), and
        # the speakers of each address on each link
        self.first_heard: dict[int, list[tuple[int, int]]] = {}
        self.by_address: dict[tuple[int, str], list[int]] = {}
        for s, (link, first) in enumerate(zip(speakers["link"].tolist(), speakers["first_ns"].tolist())):
            self.first_heard[link] = sorted([*self.first_heard.get(link, []), (first, s)])[:2]
            self.by_address.setdefault((link, self.ip[s]), []).append(s)
        self.undercuts: dict[int, list] = {}
        self.poisons: dict[int, list] = {}
        self._compare()

    def _compare(self) -> None:
        """Route rows of one prefix on one link from two or more speakers: who undercuts, who poisons whom."""
        r = self.routes
        prefix = mix64(r["link"], r["prefix_hi"], r["prefix_lo"], r["plen"])
        order, starts, counts = group_by(prefix)
        for start, count in zip(starts.tolist(), counts.tolist()):
            if count < 2:
                continue
            rows = order[start:start + count]
            rows = rows[np.argsort(r["first_ns"][rows], kind="stable")]
            # each row against the prefix's first speakers only: a flood of spoofed speakers costs no more
            head = rows[:COMPARED_SPEAKERS + 1]
            other = (r["speaker"][rows][:, None] != r["speaker"][head][None, :]) & (self.owner[head] >= 0)[None, :]
            beaten = other & (r["reachable"][rows] > 0)[:, None] & (r["reachable"][head] > 0)[None, :] & (
                r["best_metric"][rows][:, None] < r["best_metric"][head][None, :])
            # metric 16 from a speaker that had not announced the prefix itself, while another keeps it alive
            when = r["first_unreachable_ns"][rows][:, None]
            own = r["first_reachable_ns"][rows] < r["first_unreachable_ns"][rows]
            poisoning = (r["unreachable"][rows] > 0) & ~own
            alive = other & poisoning[:, None] & (r["reachable"][head] > 0)[None, :] & (
                (r["last_reachable_ns"][head][None, :] > when)
                | ((r["first_reachable_ns"][head][None, :] <= when)
                   & (when - r["last_reachable_ns"][head][None, :] <= ROUTE_TIMEOUT_S * NS)
                   & (r["first_unreachable_ns"][head][None, :] > when)))
            for k in np.flatnonzero(beaten.any(axis=1)).tolist():
                self.undercuts[int(rows[k])] = head[beaten[k]].tolist()
            for k in np.flatnonzero(alive.any(axis=1)).tolist():
                self.poisons[int(rows[k])] = head[alive[k]].tolist()

    def _route(self, row: int) -> str:
        r = self.routes
        return prefix_text(r["prefix_hi"][row], r["prefix_lo"][row], int(r["plen"][row]))

    def _who(self, s: int) -> str:
        return self.ip[s] if self.mac[s] is None else f"{self.ip[s]} ({self.mac[s]})"

    def finding(self, s: int) -> Finding:
        sp, r = self.speakers, self.routes
        params = self.detector.params
        mine = self.rows_of.get(s, np.zeros(0, dtype=np.int64))
        # in the order announced; one message's routes by prefix
        mine = mine[np.lexsort((r["plen"][mine], r["prefix_lo"][mine], r["prefix_hi"][mine], r["first_ns"][mine]))]
        reachable = [int(row) for row in mine if r["reachable"][row]]
        is_default = [row for row in reachable if r["plen"][row] == 0]
        own_withdrawals = [int(row) for row in mine if r["unreachable"][row]
                           and r["first_reachable_ns"][row] < r["first_unreachable_ns"][row]]
        passed_on = [int(row) for row in mine if r["unreachable"][row] and row not in self.poisons
                     and not r["first_reachable_ns"][row] < r["first_unreachable_ns"][row]]
        link = int(sp["link"][s])
        others = [first for first, other in self.first_heard[link] if other != s][:1]
        joined_late = bool(others) and int(sp["first_ns"][s]) - others[0] >= UPDATE_INTERVAL_S * NS
        problems: list[tuple[str, str]] = []      # (severity, what)
        not_judged: list[str] = []
        flagged: list[int] = []
        undercut_evidence, poison_evidence = [], []

        # ---- who may announce
        if self.routers_given and not self.allowed[s]:
            problems.append(("medium", "not among the site's routers"))
            if is_default:
                problems.append(("high", f"announces a default route ({self._listing(is_default)}): route "
                                         f"injection"))
                flagged += is_default
            beaten = {row: [o for o in self.undercuts.get(row, []) if self.allowed[self.owner[o]]] for row in reachable}
            beaten = {row: others for row, others in beaten.items() if others}
            if beaten:
                problems.append(("high", f"undercuts allowed routers' metrics ({self._contested(beaten)}): route "
                                         f"injection"))
                flagged += list(beaten)
                undercut_evidence = self._undercut_evidence(beaten)
        elif not self.routers_given:
            not_judged.append("whether it may announce routes: the site file names no routers")
            before = sp["first_ns"][s]
            takeover = {row: [o for o in self.undercuts.get(row, []) if sp["first_ns"][self.owner[o]] < before]
                        for row in reachable}
            takes_all = reachable and all(takeover[row] or row in is_default for row in reachable)
            if joined_late and takes_all:
                beaten = {row: others for row, others in takeover.items() if others}
                problems.append(("medium", f"joined the RIP exchange {(int(sp['first_ns'][s]) - others[0]) / NS:,.0f}"
                                           f" s after the first speaker and announces only routes that take traffic "
                                           f"over ({self._contested(beaten, reachable)}): route injection unless it "
                                           f"is a router you added"))
                flagged += reachable
                undercut_evidence = self._undercut_evidence(beaten)
        # one address from two MACs at once: the one heard later borrows the address of the one already there
        notes: list[str] = []
        for other in self._same_address(s):
            if sp["first_ns"][other] < sp["first_ns"][s]:
                problems.append(("medium", f"uses the address of {self._who(other)}, heard before it and still "
                                           f"speaking: a spoofed source"))
            else:
                notes.append(f"its address is also used by {self.mac[other] or 'a frame without MAC'} from "
                             f"{(int(sp['first_ns'][other]) - int(sp['first_ns'][s])) / NS:,.0f} s on")

        # ---- metric 16 for another speaker's live route
        poisoned = [int(row) for row in mine if row in self.poisons]
        if poisoned:
            spoofed = any(self.ip[self.owner[o]] == self.ip[s] for row in poisoned for o in self.poisons[row])
            what = f"announces metric 16 for {self._poisoned(poisoned)}"
            if spoofed:
                problems.append(("high", what + ", with that router's own address from another MAC: poisoning"))
            elif self.routers_given and self.allowed[s]:
                passed_on += poisoned          # an allowed router: split horizon with poisoned reverse
                poisoned = []
            elif self.routers_given:
                problems.append(("high", what + ": poisoning"))
            elif not reachable:
                problems.append(("high", what + ", and no reachable route of its own: poisoning"))
            else:
                problems.append(("low", what + ": split horizon with poisoned reverse, or poisoning"))
                not_judged.append("poisoned reverse or poisoning: the site file names no routers")
            flagged += poisoned
            poison_evidence = [{"prefix": self._route(row), "metric": INFINITY,
                                "announced_by": [self._who(self.owner[o]) for o in self.poisons[row]],
                                "their_metric": int(min(r["best_metric"][o] for o in self.poisons[row]))}
                               for row in poisoned[:ROUTES_IN_EVIDENCE]]

        # ---- what a receiver rejects
        reasons = [text for bit, text in REASONS.items() if int(sp["reasons"][s]) & bit]
        rejected = int(sp["rejected"][s])
        not_local = (not sp["ripng"][s] and self.site.given("local_networks")
                     and not self.site.is_local(self.ip[s]))
        if not_local:
            reasons.append("source not on a local network of the site")
            rejected = int(sp["responses"][s])
        if rejected:
            problems.append(("medium", f"{rejected:,} of {plural(int(sp['responses'][s]), 'response')} come from where "
                                       f"a receiver rejects them ({'; '.join(reasons)})"))
        # malformed responses are context here: no route of theirs was counted, and they are reported apart
        if sp["malformed"][s]:
            faults = [text for bit, text in FAULTS.items() if int(sp["faults"][s]) & bit]
            effect = [f"receivers drop {int(sp['dropped_whole'][s]):,} of them whole"] if sp["dropped_whole"][s] else []
            if sp["ignored_routes"][s]:
                effect.append(f"{'' if effect else 'receivers '}ignore {plural(int(sp['ignored_routes'][s]), 'route')} "
                              f"in {'the others' if effect else 'them'}")
            notes.append(f"{plural(int(sp['malformed'][s]), 'malformed response')}, reported apart with the other "
                         f"malformed messages ({'; '.join(faults)}): {' and '.join(effect)}; no such route is "
                         f"counted here")

        # ---- authentication
        responses, signed = int(sp["responses"][s]), int(sp["authenticated"][s])
        if params["require_auth"] and not sp["ripng"][s] and signed < responses:
            problems.append(("medium", f"{plural(responses - signed, 'unauthenticated response')} where authentication "
                                       f"is required"))
        severity = max((sev for sev, _ in problems), key=SEVERITY_RANK.get, default="info")
        return self._finding(s, severity, problems + [("info", note) for note in notes], not_judged, mine,
                             reachable, own_withdrawals, passed_on, flagged, undercut_evidence, poison_evidence,
                             reasons, rejected)

    def _listing(self, rows) -> str:
        r = self.routes
        text = ", ".join(f"{self._route(row)} metric {int(r['best_metric'][row])}" for row in rows[:ROUTES_LISTED])
        return text + (f", +{len(rows) - ROUTES_LISTED:,} more" if len(rows) > ROUTES_LISTED else "")

    def _contested(self, beaten: dict, rows=None) -> str:
        """Each route with the metric it beats: 0.0.0.0/0 metric 1 against metric 2 from 10.40.0.1."""
        r = self.routes
        rows = list(beaten) if rows is None else rows
        parts = []
        for row in rows[:ROUTES_LISTED]:
            text = f"{self._route(row)} metric {int(r['best_metric'][row])}"
            if beaten.get(row):
                best = min(beaten[row], key=lambda o: r["best_metric"][o])
                text += f" against metric {int(r['best_metric'][best])} from {self._who(self.owner[best])}"
            parts.append(text)
        return ", ".join(parts) + (f", +{len(rows) - ROUTES_LISTED:,} more" if len(rows) > ROUTES_LISTED else "")

    def _poisoned(self, rows) -> str:
        """Each poisoned route and who keeps announcing it: 10.42.0.0/16, which 10.40.0.2 keeps announcing at
        metric 1."""
        r = self.routes
        parts = []
        for row in rows[:ROUTES_LISTED]:
            best = min(self.poisons[row], key=lambda o: r["best_metric"][o])
            parts.append(f"{self._route(row)}, which {self._who(self.owner[best])} keeps announcing at metric "
                         f"{int(r['best_metric'][best])}")
        return "; ".join(parts) + (f"; +{len(rows) - ROUTES_LISTED:,} more" if len(rows) > ROUTES_LISTED else "")

    def _same_address(self, s: int) -> list[int]:
        """Other speakers with this speaker's address on its link (another MAC) while it speaks too."""
        sp = self.speakers
        return [other for other in self.by_address[(int(sp["link"][s]), self.ip[s])]
                if other != s and sp["first_ns"][other] <= sp["last_ns"][s]
                and sp["first_ns"][s] <= sp["last_ns"][other]]

    def _undercut_evidence(self, beaten: dict) -> list[dict]:
        r = self.routes
        out = []
        for row, others in list(beaten.items())[:ROUTES_IN_EVIDENCE]:
            best = min(others, key=lambda o: r["best_metric"][o])
            out.append({"prefix": self._route(row), "metric": int(r["best_metric"][row]),
                        "router": self._who(self.owner[best]), "router_metric": int(r["best_metric"][best])})
        return out

    def _finding(self, s, severity, problems, not_judged, mine, reachable, own_withdrawals, passed_on, flagged,
                 undercut_evidence, poison_evidence, reasons, rejected) -> Finding:
        sp, r = self.speakers, self.routes
        who = self._who(s)
        link = int(sp["link"][s])
        where = "" if link == 0 else f" on VLAN {link >> 16}" + (f".{link & 0xFFFF}" if link & 0xFFFF else "")
        versions = [name for bit, name in VERSION_NAMES.items() if int(sp["versions"][s]) & bit]
        auth = [name for bit, name in AUTH_NAMES.items() if int(sp["auth"][s]) & bit]
        responses, signed = int(sp["responses"][s]), int(sp["authenticated"][s])
        t0, t1 = int(sp["first_ns"][s]), int(sp["last_ns"][s])
        listed = self._listing(reachable)
        ordered = sorted(problems, key=lambda p: -SEVERITY_RANK[p[0]])
        parts = [what for _, what in ordered]
        if own_withdrawals:
            parts.append(f"withdrew {plural(len(own_withdrawals), 'route')} of its own (metric 16: "
                         f"{', '.join(self._route(row) for row in own_withdrawals[:ROUTES_LISTED])})")
        if passed_on:
            parts.append(f"passed on metric 16 for {plural(len(passed_on), 'route')} of other speakers "
                         f"({', '.join(self._route(row) for row in passed_on[:ROUTES_LISTED])})")
        if sp["ripng"][s]:
            authentication = "RIPng carries no authentication of its own"
        elif signed == responses:
            authentication = f"{signed:,} authenticated ({', '.join(auth)})"
        else:
            authentication = f"{responses - signed:,} unauthenticated" + (f", {signed:,} authenticated ("
                                                                           f"{', '.join(auth)})" if signed else "")
        version_text = "/".join(versions)
        msg = (f"{version_text} speaker {who}{where}: " + ("; ".join(parts) + ". " if parts else "")
               + (f"Announced {plural(len(reachable), 'reachable route')}: {listed}. " if reachable
                  else "Announced no reachable route. ")
               + f"{plural(responses, 'response')}, {authentication}, {(t1 - t0) / NS:.1f} s")
        if not_judged:
            msg += f". Not judged: {'; '.join(not_judged)}"
        frames = [sp["first_frame"][s], sp["last_frame"][s]]
        if rejected and sp["reject_first_frame"][s] != NEVER:
            frames += [sp["reject_first_frame"][s], sp["reject_last_frame"][s]]
        if sp["malformed_frame"][s] != NEVER:
            frames.append(sp["malformed_frame"][s])
        for row in flagged:
            frames += [r["first_frame"][row], r["last_frame"][row]]
        for row in own_withdrawals + [int(row) for row in mine if row in self.poisons]:
            frames.append(r["first_unreachable_frame"][row])
        routes = [{"prefix": self._route(row), "metric": int(r["best_metric"][row]),
                   "withdrawn": bool(r["unreachable"][row]), "first_seen": iso_time(int(r["first_ns"][row])),
                   "last_seen": iso_time(int(r["last_ns"][row]))} for row in mine[:ROUTES_IN_EVIDENCE]]
        evidence = {
            "speaker": self.ip[s], "versions": versions, "responses": responses, "authenticated": signed,
            "authentication": auth, "routes": routes, "routes_total": len(mine),
            "reachable_routes": len(reachable), "allowed_router": self.allowed[s] if self.routers_given else None,
            "joined_after_s": round((int(sp["first_ns"][s]) - self.first_heard[link][0][0]) / NS, 3),
            "evidence_frames": evidence_frames(np.unique(np.array(frames, dtype=np.int64))),
        }
        if link:
            evidence["vlan"] = link >> 16
        if undercut_evidence:
            evidence["undercut"] = undercut_evidence
        if poison_evidence:
            evidence["poisoned"] = poison_evidence
        if own_withdrawals:
            evidence["withdrew"] = [self._route(row) for row in own_withdrawals[:ROUTES_IN_EVIDENCE]]
        if passed_on:
            evidence["passed_on"] = [self._route(row) for row in passed_on[:ROUTES_IN_EVIDENCE]]
        if rejected:
            evidence["rejected"] = rejected
            evidence["rejected_because"] = reasons
        if sp["malformed"][s]:
            evidence["malformed"] = {"responses": int(sp["malformed"][s]), "dropped_whole": int(sp["dropped_whole"][s]),
                                     "ignored_routes": int(sp["ignored_routes"][s]),
                                     "faults": [text for bit, text in FAULTS.items() if int(sp["faults"][s]) & bit]}
        if not_judged:
            evidence["not_judged"] = not_judged
        if self.detector.dropped_routes or self.detector.dropped_speakers:
            evidence["not_kept"] = {"routes": self.detector.dropped_routes, "speakers": self.detector.dropped_speakers}
        fields = {"src_ip": self.ip[s], "src_port": int(sp["src_port"][s]), "proto": "UDP"}
        if self.mac[s] is not None:
            fields["src_mac"] = self.mac[s]
        identifier = self.ip[s] if self.mac[s] is None else f"{self.ip[s]} {self.mac[s]}"
        return self.detector.finding(severity, msg, identifier=identifier, first_seen=t0, last_seen=t1, n=responses,
                                     evidence=evidence, **fields)


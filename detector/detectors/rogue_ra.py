"""rogue-ra: IPv6 router advertisements from a router hosts must not follow, or that tell them to drop theirs.

Every host on an IPv6 link takes a default route, prefixes for its addresses
(SLAAC) and DNS servers from whoever sends a Router Advertisement (RFC 4861
section 6.3.4, RFC 4862, RFC 8106): a host that sends one (THC
fake_router6, a laptop sharing its connection, a misconfigured router) can
take the link's traffic, and one RA of router lifetime 0 with a router's
link-local address (THC kill_router6) makes hosts drop that router. Seed 004
kept its hosts honest with DHCP snooping; this rule is the RA half of it.

It reads the RAs of the `nd` application table and keeps one row per router
as NDPMon does (mherrb/ndpmon src/watchers/monitoring_ra.c): the source
link-local address, the Ethernet source MAC and the source link-layer
address option, per VLAN; per router its parameter sets (current hop limit,
flags, non-zero router lifetime, reachable time, retransmission timer, MTU,
the prefixes, routes and DNS servers it announces) and per prefix, route
and DNS server when it was announced. RAs a host discards (hop limit other
than 255, a source that is not link-local: RFC 4861 section 6.1.2; or
malformed, the `nd` table's faults: a code other than 0, a bad checksum, a
fixed part or an option the message does not hold) are counted apart and
never judged: they change nothing on the link. The malformed ones are
reported apart with the other protocols' malformed messages; a router's
finding mentions them as context.

A router's finding says, most severe first:

- its link-local or its MAC is not among the site file's `routers`: high
  (NDPMon's "wrong ipv6 router", "wrong router mac", "wrong router ip");
- RAs of router lifetime 0 for a link-local that another MAC advertises
  with a non-zero lifetime, before, after or meanwhile, from a MAC that
  never advertises it itself: high (a spoofed "kill router"); with or
  without the site file (a router replaced by another box with the same
  link-local withdrew its own address first: info);
- without `routers`, which routers are legitimate cannot be judged and the
  finding says so; a router heard while another one was already advertising
  on the link, announcing prefixes, routes or DNS servers the other does
  not: medium (ours: hosts take both routers' prefixes and DNS servers, so
  the second one steers their addresses and names; two routers of one
  network announce the same prefixes). A lone router, or a second one
  announcing what the first does, is info;
- the source link-layer address option naming another MAC than the
  Ethernet source: low (hosts send the router's traffic to the option's
  MAC);
- M=1 with O=0: low (NDPMon's "wrong RA flags"); a change of its parameters
  between RAs (prefixes, routes, DNS servers, lifetime, flags, MTU, hop
  limit, timers): low (NDPMon's "wrong RA params", "wrong prefix");
- lifetime 0 from the router's own MAC (it stops being a default router,
  RFC 4861 section 6.2.5, and may come back): info.

State: rows per router, per (router, parameter set) and per (router,
prefix, route or DNS server), merged like the other detectors' tables,
bounded (the rows first seen are kept, the others counted).
"""
from __future__ import annotations

import numpy as np

from ..decode import app
from ..decode.addr import mac_to_str
from ..decode.app.nd import (
    FAULTS,
    ND_HOP_LIMIT,
    OPT_PREFIX_INFORMATION,
    OPT_RDNSS,
    OPT_ROUTE_INFORMATION,
    PREFERENCES,
    RA_MANAGED,
    RA_OTHER,
    RA_PREFERENCE_MASK,
    RA_PREFERENCE_SHIFT,
    ROUTER_ADVERTISEMENT,
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
from ..site import parse_mac
from ..units import NS, plural

LINK_LOCAL = (np.uint64(0xFE80 << 48), np.uint64(0xFFC0 << 48))     # fe80::/10: (value, mask) of the high half
NEVER, NEVER_LAST = np.iinfo(np.int64).max, -1

# why hosts discard an RA (RFC 4861 section 6.1.2), bits of a router's `discarded_because`; a malformed one's
# reasons are the nd table's faults (the router's `faults`)
D_HOP_LIMIT, D_NOT_LINK_LOCAL, D_MALFORMED = (1 << k for k in range(3))
DISCARDED = {
    D_HOP_LIMIT: f"hop limit not {ND_HOP_LIMIT} (sent from off the link, or forwarded)",
    D_NOT_LINK_LOCAL: "source not a link-local address",
    D_MALFORMED: "malformed, reported apart with the other malformed messages",
}
# what a router's RAs announce, besides itself (the `kind` of a prefix row): option types
ANNOUNCED = {OPT_PREFIX_INFORMATION: "prefix", OPT_ROUTE_INFORMATION: "route", OPT_RDNSS: "DNS server"}

# Rows kept: a link has a router or two and a handful of prefixes; a flood of forged RAs (THC flood_router26
# sends thousands of routers a second, each with its own prefixes) keeps the rows first seen and counts the rest
MAX_ROUTERS = 4096
MAX_PARAMETER_SETS = 16_384
MAX_PREFIXES = 65_536
# Routers compared with each other on one link (the first heard): a flood costs no more than this many
COMPARED_ROUTERS = 64
# RA frames kept per router for its evidence: the first and last this many (the rest of a finding's 64 evidence
# frames are those its problems point at: another router's RA, the first of a parameter set or a prefix)
RA_FRAMES_AT_EACH_END = 16
# What a finding's message lists; its evidence lists up to ITEMS_IN_EVIDENCE of each
ITEMS_LISTED = 6
ITEMS_IN_EVIDENCE = 64

ROUTER_COLUMNS = {
    "key": np.uint64, "link": np.uint32, "src_ip_hi": np.uint64, "src_ip_lo": np.uint64, "src_mac": np.uint64,
    "has_mac": np.bool_, "lladdr": np.uint64, "has_lladdr": np.bool_,
    "ras": np.int64, "first_ns": np.int64, "last_ns": np.int64,
    "discarded": np.int64, "discarded_because": np.uint32, "discarded_frame": np.int64, "faults": np.uint8,
    "zero": np.int64, "first_zero_ns": np.int64, "last_zero_ns": np.int64, "first_zero_frame": np.int64,
    "last_zero_frame": np.int64,
    "nonzero": np.int64, "first_nonzero_ns": np.int64, "last_nonzero_ns": np.int64, "last_nonzero_frame": np.int64,
    "max_lifetime": np.uint16, "m_without_o": np.int64, "m_without_o_frame": np.int64,
    "lladdr_differs": np.int64, "lladdr_differs_frame": np.int64,
}
ROUTER_REDUCE = {
    "lladdr": np.maximum, "has_lladdr": np.maximum, "ras": np.add, "last_ns": np.maximum,
    "discarded": np.add, "discarded_because": np.bitwise_or, "discarded_frame": np.minimum, "faults": np.bitwise_or,
    "zero": np.add, "first_zero_ns": np.minimum, "last_zero_ns": np.maximum, "first_zero_frame": np.minimum,
    "last_zero_frame": np.maximum, "nonzero": np.add, "first_nonzero_ns": np.minimum,
    "last_nonzero_ns": np.maximum, "last_nonzero_frame": np.maximum, "max_lifetime": np.maximum,
    "m_without_o": np.add, "m_without_o_frame": np.minimum, "lladdr_differs": np.add,
    "lladdr_differs_frame": np.minimum,
}
# one row per (router, parameter set) of its RAs of non-zero lifetime: the values and when they were sent
PARAMETER_COLUMNS = {
    "key": np.uint64, "router": np.uint64, "cur_hop_limit": np.uint8, "ra_flags": np.uint8, "lifetime": np.uint16,
    "reachable": np.uint32, "retrans": np.uint32, "mtu": np.uint32, "has_mtu": np.bool_, "announced": np.uint64,
    "count": np.int64, "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64,
}
PARAMETER_REDUCE = {"count": np.add, "last_ns": np.maximum, "first_frame": np.minimum}
# one row per (router, prefix, route or DNS server) it announced
PREFIX_COLUMNS = {
    "key": np.uint64, "router": np.uint64, "kind": np.uint8, "hi": np.uint64, "lo": np.uint64, "plen": np.uint8,
    "count": np.int64, "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64,
    "flags": np.uint8, "lifetime": np.uint32, "preferred": np.uint32, "inverted": np.int64,
}
PREFIX_REDUCE = {"count": np.add, "last_ns": np.maximum, "first_frame": np.minimum, "flags": np.bitwise_or,
                 "lifetime": np.maximum, "preferred": np.maximum, "inverted": np.add}
F_ON_LINK, F_AUTONOMOUS = 1, 2       # a prefix row's flags: what its options said, OR-ed


def _typed(rows: dict, columns: dict) -> dict:
    return {name: np.asarray(col).astype(columns[name]) for name, col in rows.items()}


def _bounded(rows: dict, limit: int) -> tuple[dict, int]:
    """The `limit` rows first seen, and how many were dropped."""
    extra = len(rows["key"]) - limit
    if extra <= 0:
        return rows, 0
    keep = np.sort(np.argsort(rows["first_ns"], kind="stable")[:limit])
    return {name: col[keep] for name, col in rows.items()}, extra


def _frame_ends(keys: np.ndarray, frames: np.ndarray, routers: np.ndarray) -> dict:
    """The first and last RA_FRAMES_AT_EACH_END frames of each key among `routers` (the routers kept), as a table
    of (key, frame) rows."""
    kept = np.isin(keys, routers)
    keys, frames = keys[kept], frames[kept]
    order = np.lexsort((frames, keys))
    keys, frames = keys[order], frames[order]
    _, starts, counts = group_by(keys)
    group = np.repeat(np.arange(len(starts)), counts)
    rank = np.arange(len(keys)) - starts[group]
    keep = (rank < RA_FRAMES_AT_EACH_END) | (rank >= counts[group] - RA_FRAMES_AT_EACH_END)
    return {"key": keys[keep], "frame": frames[keep]}


def _where(link: int) -> str:
    return "" if link == 0 else f" on VLAN {link >> 16}" + (f".{link & 0xFFFF}" if link & 0xFFFF else "")


def _flags_text(flags: int) -> str:
    """M=1 O=0 preference high, from an RA's flags byte."""
    preference = PREFERENCES[(flags >> RA_PREFERENCE_SHIFT) & RA_PREFERENCE_MASK]
    return f"M={int(bool(flags & RA_MANAGED))} O={int(bool(flags & RA_OTHER))} preference {preference}"


@register
class RogueRa(Detector):
    rule_id = "rogue-ra"
    EVE_SIGNATURE = (16, "Potentially Bad Traffic")
    # what its findings rest on beyond what it saw (detect.confidence): what the advertisements say
    QUALITY_NEEDS = frozenset({"payload"})
    APP_TABLES = ("nd",)
    ALERTS = {
        "suppress_s": Param(float, 60.0, "least seconds between two events about one router", ALERT_SECONDS,
                            "Seed 004's switches logged an illegal DHCP server at most once a minute "
                            "(illegal_server_log_suppress_duration 1min); a router repeats its RAs every 3 to 600 s "
                            "(RFC 4861 6.2.1) and THC's tools every second or faster."),
        "resolve_s": Param(float, 1800.0, "seconds without an RA from the router before it is resolved", ALERT_SECONDS,
                           "Three default MaxRtrAdvInterval (600 s, RFC 4861 6.2.1): a router that quiet has stopped "
                           "advertising; a shorter value resolves one that only advertises slowly."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.routers = empty_table(ROUTER_COLUMNS)
        self.parameters = empty_table(PARAMETER_COLUMNS)
        self.prefixes = empty_table(PREFIX_COLUMNS)
        self.dropped = {"routers": 0, "parameter_sets": 0, "prefixes": 0}
        self.frames = {"key": np.zeros(0, dtype=np.uint64), "frame": np.zeros(0, dtype=np.int64)}

    def update(self, batch: PacketBatch) -> None:
        tab = app.table(batch, "nd")
        messages = np.flatnonzero(tab["type"] == ROUTER_ADVERTISEMENT)
        if len(messages) == 0:
            return
        rows = tab["row"][messages]
        layers = batch["layers"][rows]
        src_hi, src_lo = batch["src_ip_hi"][rows], batch["src_ip_lo"][rows]
        has_mac = (layers & np.uint32(L_SRC_MAC)) != 0
        mac = np.where(has_mac, batch["src_mac"][rows], np.uint64(0))
        has_lladdr = tab.valid("src_lladdr")[messages]
        lladdr = tab["src_lladdr"][messages]
        outer = np.where((layers & np.uint32(L_VLAN)) != 0, batch["vlan_outer"][rows], 0).astype(np.uint32)
        inner = np.where((layers & np.uint32(L_QINQ)) != 0, batch["vlan_inner"][rows], 0).astype(np.uint32)
        link = (outer << np.uint32(16)) | inner
        # a router is its link-local and its MAC (the Ethernet source, else its link-layer address option) per VLAN
        router = mix64(link, src_hi, src_lo, np.where(has_mac, mac, lladdr))
        ts, frame = batch["ts_ns"][rows], batch["frame"][rows]

        # what makes hosts discard an RA (RFC 4861 section 6.1.2); a message cut by the snapshot length is judged
        # on what was captured (the table's faults never come from the capture's end)
        faults = tab["fault"][messages]
        because = np.where(tab["hop_limit"][messages] != ND_HOP_LIMIT, D_HOP_LIMIT, 0)
        because |= np.where((src_hi & LINK_LOCAL[1]) != LINK_LOCAL[0], D_NOT_LINK_LOCAL, 0)
        because |= np.where(faults != 0, D_MALFORMED, 0)
        because = because.astype(np.uint32)
        read = tab.valid("router_lifetime")[messages]
        accepted = (because == 0) & read
        lifetime = tab["router_lifetime"][messages]
        flags = tab["ra_flags"][messages]
        zero = accepted & (lifetime == 0)
        nonzero = accepted & (lifetime != 0)
        m_without_o = accepted & ((flags & RA_MANAGED) != 0) & ((flags & RA_OTHER) == 0)
        differs = accepted & has_mac & has_lladdr & (lladdr != mac)
        new = {
            "key": router, "link": link, "src_ip_hi": src_hi, "src_ip_lo": src_lo, "src_mac": mac, "has_mac": has_mac,
            "lladdr": lladdr, "has_lladdr": has_lladdr, "ras": accepted, "first_ns": ts, "last_ns": ts,
            "discarded": because != 0, "discarded_because": because,
            "discarded_frame": np.where(because != 0, frame, NEVER), "faults": faults,
            "zero": zero, "first_zero_ns": np.where(zero, ts, NEVER), "last_zero_ns": np.where(zero, ts, NEVER_LAST),
            "first_zero_frame": np.where(zero, frame, NEVER), "last_zero_frame": np.where(zero, frame, NEVER_LAST),
            "nonzero": nonzero, "first_nonzero_ns": np.where(nonzero, ts, NEVER),
            "last_nonzero_ns": np.where(nonzero, ts, NEVER_LAST),
            "last_nonzero_frame": np.where(nonzero, frame, NEVER_LAST),
            "max_lifetime": np.where(accepted, lifetime, 0), "m_without_o": m_without_o,
            "m_without_o_frame": np.where(m_without_o, frame, NEVER), "lladdr_differs": differs,
            "lladdr_differs_frame": np.where(differs, frame, NEVER),
        }
        self.routers, dropped = _bounded(fold_rows(self.routers, _typed(new, ROUTER_COLUMNS), "key", ROUTER_REDUCE),
                                         MAX_ROUTERS)
        self.dropped["routers"] += dropped
        self.frames = _frame_ends(np.concatenate([self.frames["key"], router]),
                                  np.concatenate([self.frames["frame"], frame.astype(np.int64)]), self.routers["key"])

        # the prefixes, routes and DNS servers of the accepted RAs, and each RA's set of them (a sum of their hashes)
        child = tab.children["nd_opt"]
        position = np.full(len(tab), -1, dtype=np.int64)
        position[messages] = np.arange(len(messages))
        owner = position[child["parent"]]
        kind = child["type"]
        said = (((kind == OPT_PREFIX_INFORMATION) | (kind == OPT_ROUTE_INFORMATION)) & child.valid("prefix_hi")) | (
            (kind == OPT_RDNSS) & child.valid("dns_hi"))
        options = np.flatnonzero((owner >= 0) & said)
        options = options[accepted[owner[options]]]
        m = owner[options]
        is_dns = kind[options] == OPT_RDNSS
        hi = np.where(is_dns, child["dns_hi"][options], child["prefix_hi"][options])
        lo = np.where(is_dns, child["dns_lo"][options], child["prefix_lo"][options])
        plen = np.where(is_dns, 128, child["prefix_len"][options]).astype(np.uint8)
        item = mix64(kind[options], hi, lo, plen)
        announced = np.zeros(len(messages), dtype=np.uint64)
        with np.errstate(over="ignore"):
            np.add.at(announced, m, item)
        option_flags = (np.where(child["on_link"][options] != 0, F_ON_LINK, 0)
                        | np.where(child["autonomous"][options] != 0, F_AUTONOMOUS, 0))
        pio = kind[options] == OPT_PREFIX_INFORMATION
        valid_lifetime = np.where(pio, child["valid_lifetime"][options], child["lifetime"][options])
        preferred = np.where(pio, child["preferred_lifetime"][options], 0)
        new = {"key": mix64(router[m], item), "router": router[m], "kind": kind[options], "hi": hi, "lo": lo,
               "plen": plen, "count": np.ones(len(options), dtype=np.int64), "first_ns": ts[m], "last_ns": ts[m],
               "first_frame": frame[m], "flags": option_flags, "lifetime": valid_lifetime, "preferred": preferred,
               "inverted": pio & (preferred > valid_lifetime)}
        self.prefixes, dropped = _bounded(fold_rows(self.prefixes, _typed(new, PREFIX_COLUMNS), "key", PREFIX_REDUCE),
                                          MAX_PREFIXES)
        self.dropped["prefixes"] += dropped

        # the parameter sets of the RAs that keep the router a default router (lifetime 0 is a withdrawal)
        sets = np.flatnonzero(nonzero)
        has_mtu = tab.valid("mtu")[messages][sets]
        mtu = np.where(has_mtu, tab["mtu"][messages][sets], 0)
        values = {"cur_hop_limit": tab["cur_hop_limit"][messages][sets], "ra_flags": flags[sets],
                  "lifetime": lifetime[sets], "reachable": tab["reachable_time"][messages][sets],
                  "retrans": tab["retrans_timer"][messages][sets], "mtu": mtu, "has_mtu": has_mtu,
                  "announced": announced[sets]}
        new = {"key": mix64(router[sets], *(np.asarray(v).astype(np.uint64) for v in values.values())),
               "router": router[sets], **values, "count": np.ones(len(sets), dtype=np.int64), "first_ns": ts[sets],
               "last_ns": ts[sets], "first_frame": frame[sets]}
        self.parameters, dropped = _bounded(fold_rows(self.parameters, _typed(new, PARAMETER_COLUMNS), "key",
                                                      PARAMETER_REDUCE), MAX_PARAMETER_SETS)
        self.dropped["parameter_sets"] += dropped

    def merge(self, other: RogueRa) -> RogueRa:
        check_merge(self, other)
        for name, reduce, limit, count in (("routers", ROUTER_REDUCE, MAX_ROUTERS, "routers"),
                                           ("parameters", PARAMETER_REDUCE, MAX_PARAMETER_SETS, "parameter_sets"),
                                           ("prefixes", PREFIX_REDUCE, MAX_PREFIXES, "prefixes")):
            rows, dropped = _bounded(fold_rows(getattr(self, name), getattr(other, name), "key", reduce), limit)
            setattr(self, name, rows)
            self.dropped[count] += other.dropped[count] + dropped
        self.frames = _frame_ends(np.concatenate([self.frames["key"], other.frames["key"]]),
                                  np.concatenate([self.frames["frame"], other.frames["frame"]]), self.routers["key"])
        return self

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        if len(self.routers["key"]) == 0:
            return []
        judge = _Judgement(self)
        return [judge.finding(r) for r in range(len(self.routers["key"]))]


class _Judgement:
    """What the routers' RAs say about each other, computed once for all findings."""

    def __init__(self, detector: RogueRa):
        self.detector = detector
        self.site = detector.site
        ro = self.routers = detector.routers
        self.ip = [ip_text(h, lo) for h, lo in zip(ro["src_ip_hi"].tolist(), ro["src_ip_lo"].tolist())]
        self.mac = [mac_to_str(m) if has else None for m, has in zip(ro["src_mac"].tolist(), ro["has_mac"].tolist())]
        self.lladdr = [mac_to_str(m) if has else None for m, has in zip(ro["lladdr"].tolist(),
                                                                          ro["has_lladdr"].tolist())]
        # the MAC a router is known by: the Ethernet source, else its link-layer address option
        self.identity = [mac or ll for mac, ll in zip(self.mac, self.lladdr)]
        self.routers_given = self.site.given("routers")
        # what the site's routers list: MACs, IPv6 addresses (IPv4 ones name routing speakers, not RA senders)
        self.site_lists_macs = any(parse_mac(entry) is not None for entry in self.site.routers)
        self.site_lists_ipv6 = any(":" in entry and parse_mac(entry) is None for entry in self.site.routers)
        index = {int(k): r for r, k in enumerate(ro["key"].tolist())}
        self.parameter_rows = self._rows_of(detector.parameters, index)
        self.prefix_rows = self._rows_of(detector.prefixes, index)
        self.by_link: dict[int, list[int]] = {}
        for r in np.argsort(ro["first_ns"], kind="stable").tolist():
            self.by_link.setdefault(int(ro["link"][r]), []).append(r)

    @staticmethod
    def _rows_of(table: dict, index: dict) -> dict[int, np.ndarray]:
        """Router -> its rows of `table`, earliest first (rows of a router the bound dropped belong to none)."""
        owner = np.array([index.get(int(k), -1) for k in table["router"].tolist()], dtype=np.int64)
        order, starts, counts = group_by(owner)
        out = {}
        for a, c in zip(starts.tolist(), counts.tolist()):
            rows = order[a:a + c]
            # earliest first; one RA's prefixes before its routes and DNS servers
            tie = table["kind"][rows] if "kind" in table else np.zeros(len(rows), dtype=np.uint8)
            out[int(owner[rows[0]])] = rows[np.lexsort((tie, table["first_ns"][rows]))]
        return {r: rows for r, rows in out.items() if r >= 0}

    def _who(self, r: int) -> str:
        return self.ip[r] if self.identity[r] is None else f"{self.ip[r]} ({self.identity[r]})"

    def _items(self, r: int, kinds=tuple(ANNOUNCED)) -> list[int]:
        p = self.detector.prefixes
        return [int(row) for row in self.prefix_rows.get(r, []) if int(p["kind"][row]) in kinds]

    def _item_text(self, row: int) -> str:
        p = self.detector.prefixes
        address = ip_text(p["hi"][row], p["lo"][row])
        return address if int(p["kind"][row]) == OPT_RDNSS else f"{address}/{int(p['plen'][row])}"

    def _listing(self, rows: list[int]) -> str:
        text = ", ".join(self._item_text(row) for row in rows[:ITEMS_LISTED])
        return text + (f", +{len(rows) - ITEMS_LISTED:,} more" if len(rows) > ITEMS_LISTED else "")

    def _item_keys(self, r: int) -> set[tuple]:
        p = self.detector.prefixes
        return {(int(p["kind"][row]), int(p["hi"][row]), int(p["lo"][row]), int(p["plen"][row]))
                for row in self._items(r)}

    def _advertising_at(self, r: int, when: int) -> bool:
        """Whether router r was a default router for the link's hosts at `when`: heard before it with a non-zero
        lifetime that had not run out, and no withdrawal (lifetime 0) in between."""
        ro = self.routers
        if ro["first_nonzero_ns"][r] >= when:
            return False
        last = int(ro["last_nonzero_ns"][r])
        if last >= when:
            return True
        withdrew = ro["last_zero_ns"][r] > last and ro["first_zero_ns"][r] <= when
        return not withdrew and when - last <= int(ro["max_lifetime"][r]) * NS

    def _allowed(self, r: int) -> tuple[bool, str]:
        """Whether the site's routers admit router r, and if not, what of it they lack. Where the file lists
        both MACs and IPv6 addresses, an RA must match both (NDPMon's IP/MAC couple)."""
        if not self.site_lists_macs and not self.site_lists_ipv6:
            return False, "they name no IPv6 address and no MAC"
        missing = []
        if self.site_lists_ipv6 and not self.site.is_router(ip=self.ip[r]):
            missing.append(f"its link-local {self.ip[r]}")
        macs = [m for m in (self.mac[r], self.lladdr[r]) if m is not None]
        if self.site_lists_macs and not any(self.site.is_router(mac=m) for m in macs):
            missing.append(f"its MAC {self.identity[r] or '(none: no link-layer address)'}")
        return not missing, " and ".join(missing) + " not listed"

    def finding(self, r: int) -> Finding:
        ro = self.routers
        ras = int(ro["ras"][r])
        problems: list[tuple[str, str]] = []
        notes: list[str] = []
        not_judged: list[str] = []
        frames = self.detector.frames["frame"][self.detector.frames["key"] == ro["key"][r]].tolist()
        if ras == 0:
            discarded = int(ro["discarded"][r])
            every = "its RA" if discarded == 1 else f"all {discarded:,} of its RAs"
            notes.append(f"hosts discard {every} ({self._discarded(r)}): "
                         f"they change nothing on the link")
            return self._finding(r, "info", problems, notes, not_judged, frames)

        # ---- who may advertise
        if self.routers_given:
            allowed, lacking = self._allowed(r)
            if not allowed:
                problems.append(("high", f"not among the site's routers ({lacking}): hosts take it as a default "
                                         f"router"))
        else:
            not_judged.append("which routers are legitimate: the site file names no routers")
            self._second_router(r, problems, frames)

        # ---- router lifetime 0
        if ro["zero"][r]:
            frames += [int(ro["first_zero_frame"][r]), int(ro["last_zero_frame"][r])]
            # a MAC that never advertised the address itself: its lifetime 0 is no withdrawal of its own
            owners = [] if ro["nonzero"][r] else self._owners_of_address(r)
            if owners:
                owner = owners[0]
                problems.append(("high", f"{plural(int(ro['zero'][r]), 'RA')} of router lifetime 0 for {self.ip[r]}, "
                                         f"which {self.identity[owner]} advertises with lifetime "
                                         f"{int(ro['max_lifetime'][owner]):,} s: a spoofed 'kill router' (THC "
                                         f"kill_router6) that makes hosts drop that default router"))
                frames.append(int(ro["last_nonzero_frame"][owner]))
            elif ro["nonzero"][r] and ro["last_zero_ns"][r] > ro["first_nonzero_ns"][r]:
                back = ro["last_nonzero_ns"][r] > ro["first_zero_ns"][r] and ro["last_nonzero_ns"][r] > \
                    ro["last_zero_ns"][r]
                notes.append(f"stopped being a default router (lifetime 0) at {iso_time(int(ro['first_zero_ns'][r]))}"
                             + (", then advertised again (a restart)" if back else ""))
            else:
                notes.append("advertised router lifetime 0: hosts do not take it as a default router")
        spoofed_by = self._spoofers_of(r)
        if spoofed_by:
            notes.append(f"its link-local was used by {', '.join(self.identity[s] for s in spoofed_by)} in RAs of "
                         f"router lifetime 0")

        # ---- what it says about itself
        if ro["lladdr_differs"][r]:
            problems.append(("low", f"{plural(int(ro['lladdr_differs'][r]), 'RA')} whose source link-layer "
                                    f"address option names {self.lladdr[r]}, not the Ethernet source {self.mac[r]}: "
                                    f"hosts send its traffic to the option's MAC"))
            frames.append(int(ro["lladdr_differs_frame"][r]))
        if ro["m_without_o"][r]:
            problems.append(("low", f"{plural(int(ro['m_without_o'][r]), 'RA')} with M=1 and O=0 (NDPMon 'wrong "
                                    f"RA flags'): addresses from DHCPv6 but no other configuration"))
            frames.append(int(ro["m_without_o_frame"][r]))
        changes = self._changes(r)
        if changes:
            problems.append(("low", f"changed its parameters between RAs ({'; '.join(changes)})"))
            q = self.detector.parameters
            frames += [int(q["first_frame"][row]) for row in self.parameter_rows.get(r, [])[:ITEMS_IN_EVIDENCE]]
        inverted = [row for row in self._items(r, (OPT_PREFIX_INFORMATION,)) if self.detector.prefixes["inverted"][row]]
        if inverted:
            notes.append(f"{'a prefix' if len(inverted) == 1 else 'prefixes'} with a preferred lifetime above the "
                         f"valid one, which hosts ignore (RFC 4862 5.5.3): {self._listing(inverted)}")
        if ro["discarded"][r]:
            notes.append(f"{plural(int(ro['discarded'][r]), 'more RA')} that hosts discard ({self._discarded(r)})")
            frames.append(int(ro["discarded_frame"][r]))
        severity = max((sev for sev, _ in problems), key=SEVERITY_RANK.get, default="info")
        return self._finding(r, severity, problems, notes, not_judged, frames)

    def _discarded(self, r: int) -> str:
        """Why hosts discard router r's discarded RAs, the malformed ones' faults named."""
        ro = self.routers
        parts = []
        for bit, text in DISCARDED.items():
            if int(ro["discarded_because"][r]) & bit:
                faults = [name for fault, name in FAULTS.items() if int(ro["faults"][r]) & fault]
                parts.append(text + (f": {', '.join(faults)}" if bit == D_MALFORMED and faults else ""))
        return "; ".join(parts)

    def _second_router(self, r: int, problems: list, frames: list) -> None:
        """Without the site's routers: a router heard while another advertised, announcing what it does not."""
        ro = self.routers
        start = int(ro["first_ns"][r])
        earlier = [o for o in self.by_link[int(ro["link"][r])][:COMPARED_ROUTERS]
                   if o != r and ro["first_ns"][o] < start and self.identity[o] != self.identity[r]
                   and self._advertising_at(o, start)]
        if not earlier:
            return
        theirs = set().union(*(self._item_keys(o) for o in earlier))
        own = [row for row in self._items(r) if self._key(row) not in theirs]
        if not own:
            return
        first = earlier[0]
        problems.append(("medium", f"appeared {(start - int(ro['first_ns'][first])) / NS:,.1f} s after "
                                   f"{self._who(first)}, which was advertising on the link, and announces what that "
                                   f"router does not ({self._listing(own)}): hosts take both routers' prefixes and DNS "
                                   f"servers, so a second router steers their addresses and names; a rogue router "
                                   f"unless the site runs two with different prefixes"))
        frames += [int(self.detector.prefixes["first_frame"][row]) for row in own[:ITEMS_IN_EVIDENCE]]

    def _key(self, row: int) -> tuple:
        p = self.detector.prefixes
        return int(p["kind"][row]), int(p["hi"][row]), int(p["lo"][row]), int(p["plen"][row])

    def _owners_of_address(self, r: int) -> list[int]:
        """Other routers on r's link with r's link-local and another MAC that advertise it with a non-zero
        lifetime: whose router r's lifetime-0 RAs would kill."""
        ro = self.routers
        if self.identity[r] is None:
            return []
        return [o for o in self.by_link[int(ro["link"][r])] if o != r and self.ip[o] == self.ip[r]
                and self.identity[o] is not None and self.identity[o] != self.identity[r] and ro["nonzero"][o]]

    def _spoofers_of(self, r: int) -> list[int]:
        """Routers whose lifetime-0 RAs use r's link-local from another MAC that never advertises it itself, while r
        advertises it."""
        ro = self.routers
        if not ro["nonzero"][r] or self.identity[r] is None:
            return []
        return [o for o in self.by_link[int(ro["link"][r])] if o != r and self.ip[o] == self.ip[r]
                and self.identity[o] is not None and self.identity[o] != self.identity[r] and ro["zero"][o]
                and not ro["nonzero"][o]]

    def _changes(self, r: int) -> list[str]:
        """How the parameter sets of router r differ from its first one, each way once."""
        q = self.detector.parameters
        rows = self.parameter_rows.get(r, np.zeros(0, dtype=np.int64))
        if len(rows) < 2:
            return []
        out: list[str] = []
        for name, label, unit in (("lifetime", "router lifetime", " s"), ("ra_flags", "flags", ""),
                                  ("cur_hop_limit", "hop limit", ""), ("reachable", "reachable time", " ms"),
                                  ("retrans", "retransmission timer", " ms")):
            values = list(dict.fromkeys(int(q[name][row]) for row in rows))
            if len(values) > 1:
                shown = [_flags_text(v) if name == "ra_flags" else f"{v:,}{unit}" for v in values[:ITEMS_LISTED]]
                out.append(f"{label} {' -> '.join(shown)}")
        mtus = list(dict.fromkeys(int(q["mtu"][row]) if q["has_mtu"][row] else None for row in rows))
        if len(mtus) > 1:
            out.append("MTU " + " -> ".join("none" if m is None else f"{m:,}" for m in mtus[:ITEMS_LISTED]))
        if len({int(q["announced"][row]) for row in rows}) > 1:
            # each RA repeats what the router announces: one first heard after its first RA was added, one last
            # heard before its last RA dropped
            p, ro = self.detector.prefixes, self.routers
            added = [row for row in self._items(r) if p["first_ns"][row] > ro["first_nonzero_ns"][r]]
            dropped = [row for row in self._items(r) if p["last_ns"][row] < ro["last_nonzero_ns"][r]]
            parts = []
            if added:
                parts.append(f"added {self._listing(added)}")
            if dropped:
                parts.append(f"dropped {self._listing(dropped)}")
            out.append("announced " + (", ".join(parts) if parts else "other prefixes, routes or DNS servers"))
        return out

    def _prefix_evidence(self, row: int) -> dict:
        p = self.detector.prefixes
        return {"prefix": self._item_text(row), "on_link": bool(p["flags"][row] & F_ON_LINK),
                "autonomous": bool(p["flags"][row] & F_AUTONOMOUS), "valid_lifetime_s": int(p["lifetime"][row]),
                "preferred_lifetime_s": int(p["preferred"][row]), "first_seen": iso_time(int(p["first_ns"][row])),
                "last_seen": iso_time(int(p["last_ns"][row]))}

    def _parameter_evidence(self, row: int) -> dict:
        q = self.detector.parameters
        return {"lifetime_s": int(q["lifetime"][row]), "flags": _flags_text(int(q["ra_flags"][row])),
                "cur_hop_limit": int(q["cur_hop_limit"][row]), "reachable_ms": int(q["reachable"][row]),
                "retrans_ms": int(q["retrans"][row]), "mtu": int(q["mtu"][row]) if q["has_mtu"][row] else None,
                "ras": int(q["count"][row]), "first_seen": iso_time(int(q["first_ns"][row])),
                "last_seen": iso_time(int(q["last_ns"][row]))}

    def _finding(self, r: int, severity: str, problems, notes, not_judged, frames) -> Finding:
        ro = self.routers
        link = int(ro["link"][r])
        t0, t1 = int(ro["first_ns"][r]), int(ro["last_ns"][r])
        ras = int(ro["ras"][r])
        parts = [what for _, what in sorted(problems, key=lambda item: -SEVERITY_RANK[item[0]])] + notes
        prefixes = self._items(r, (OPT_PREFIX_INFORMATION,))
        routes = self._items(r, (OPT_ROUTE_INFORMATION,))
        servers = self._items(r, (OPT_RDNSS,))
        q = self.detector.parameters
        sets = self.parameter_rows.get(r, np.zeros(0, dtype=np.int64))
        described = ""
        if len(sets):
            s = int(sets[0])
            described = (f"lifetime {int(q['lifetime'][s]):,} s, {_flags_text(int(q['ra_flags'][s]))}, hop limit "
                         f"{int(q['cur_hop_limit'][s])}" + (f", MTU {int(q['mtu'][s]):,}" if q["has_mtu"][s] else ""))
        announced = [f"{label} {self._listing(rows)}" for label, rows in (("prefixes", prefixes), ("routes", routes),
                                                                          ("DNS", servers)) if rows]
        msg = f"Router {self._who(r)}{_where(link)}: " + ("; ".join(parts) + ". " if parts else "")
        if ras:
            msg += (f"{plural(ras, 'RA')} in {(t1 - t0) / NS:.1f} s" + (f" ({described})" if described else "")
                    + (f"; {'; '.join(announced)}" if announced else "; no prefix or DNS server"))
        msg = msg.rstrip(". ")
        if not_judged:
            msg += f". Not judged: {'; '.join(not_judged)}"
        evidence = {
            "router": self.ip[r], "mac": self.mac[r], "lladdr": self.lladdr[r], "ras": ras,
            "discarded": int(ro["discarded"][r]), "lifetime_zero": int(ro["zero"][r]),
            "max_lifetime_s": int(ro["max_lifetime"][r]),
            "prefixes": [self._prefix_evidence(row) for row in prefixes[:ITEMS_IN_EVIDENCE]],
            "routes": [self._item_text(row) for row in routes[:ITEMS_IN_EVIDENCE]],
            "dns": [self._item_text(row) for row in servers[:ITEMS_IN_EVIDENCE]],
            "parameter_sets": [self._parameter_evidence(s) for s in sets[:ITEMS_IN_EVIDENCE].tolist()],
            "allowed_router": self._allowed(r)[0] if self.routers_given else None,
            "evidence_frames": evidence_frames(np.unique(np.array([f for f in frames if 0 <= f < NEVER],
                                                                  dtype=np.int64))),
        }
        if link:
            evidence["vlan"] = link >> 16
        if not_judged:
            evidence["not_judged"] = not_judged
        if any(self.detector.dropped.values()):
            evidence["not_kept"] = dict(self.detector.dropped)
        fields = {"src_ip": self.ip[r], "proto": "ICMPv6"}
        if self.mac[r] is not None:
            fields["src_mac"] = self.mac[r]
        identifier = " ".join(x for x in (self.ip[r], self.identity[r], f"vlan {link >> 16}" if link else None) if x)
        return self.detector.finding(severity, msg, identifier=identifier, first_seen=t0, last_seen=t1,
                                     n=ras + int(ro["discarded"][r]), evidence=evidence, **fields)

"""ospf-instability: OSPF storms, flapping adjacencies, LSAs re-originated or re-flooded too fast, mismatches.

Seed 000: forwarding through two firewalls broke while "routing still uses
this path, as OSPF packets get through", and the core switches logged DDoS
protection violations, "a storm of OSPF packets because of link flaps or
duplicate packets". A capture shows each part of that story in the OSPF
packets (the `ospf` application table):

- a storm: one router (the header's router id) sending more than
  `storm_pps` packets a second for `storm_seconds` in a row (1 s bins),
  some thousand times its Hello rate (FRRouting lib/libospf.h: Hello every
  10 s, dead after 40): high;
- a flapping adjacency: a router starting the adjacency over again and
  again, each start a Database Description with I and MS set (ExStart, RFC
  2328 section 10.8) and a new DD sequence number (its retransmissions
  repeat the number), `min_exstarts` starts from one side within
  `exstart_window_s`; or the Hellos showing it down and up again: a router
  dropping a neighbour from its Hellos (its dead interval passed without
  a Hello from it, RFC 2328 section 10.3) and listing it again, or a router
  silent for longer than its dead interval and back, each while the other
  router's Hellos went on without one missing (so the capture saw the link
  all along). Medium, high at `high_flaps` flaps; restarts slower than that
  are low. The evidence an engineer weighs sets the severity of a flapping
  adjacency: a dead interval expiring (a router silent past it, or the
  dropped neighbour's Hellos missing meanwhile) or a start that never gets
  its database exchange (within EXCHANGE_GAP_S) points at a failing link or
  router and keeps medium and high; restarts that each come straight back,
  both routers' Hellos going on throughout, are resets (an operator's clear
  ip ospf, a process restart): a couple is low, `min_exstarts` medium, high
  only at `high_flaps` spread over SUSTAINED_S. arkime's ospf.pcap is two such
  resets in a 100 s lab capture (medium before, low now); a first ExStart
  that restarts an adjacency standing for a dead interval counts as a
  restart too;
- one LSA re-originated (a new sequence number from its advertising router)
  sooner than MinLSInterval after the previous one (RFC 2328 appendix B,
  FRRouting `OSPF_MIN_LS_INTERVAL` 5 s), `min_fast_reoriginations` times:
  medium. Two routers sharing a router id fight this way, each flushing
  the other's LSA with a higher sequence number;
- one LSA instance (type, id, advertising router, sequence, checksum) sent
  again by one router on one link within MinLSArrival (1 s, FRRouting
  `OSPF_MIN_LS_ARRIVAL`) of its previous copy, `min_refloods` times:
  medium. Neighbours discard such copies (RFC 2328 section 13 step 5a);
  they are duplicated packets or a flooding loop. Counting per sender and
  link keeps a mirror of many links, where every router floods an LSA
  once, out of it;
- Hello and dead intervals that differ between two routers on one link
  (RFC 2328 section 10.5: the Hellos are dropped), or Database Description
  MTUs that differ between two neighbours (section 10.6: the larger is
  rejected and the adjacency sticks in ExStart): low.

State (mergeable; partitions in time order merge to the counts of one
pass): packets per router and second (seconds that cannot reach the storm
rate are dropped once complete), Hello runs (per router and address: the
spans its Hellos covered without one missing; per router, address and
neighbour: the spans it listed that neighbour in every Hello), Database
Description counts per sender, receiver, MTU and ExStart sequence, a
summary per LSA of its originations, and per LSA instance, sender and link
the copies sent within MinLSArrival of the previous one.
"""
from __future__ import annotations

import ipaddress

import numpy as np

from ..cpu import kernel
from ..decode import app
from ..decode.addr import mac_to_str
from ..decode.app.ospf import DB_DESCRIPTION, HELLO, LS_ACK, LS_REQUEST, LS_UPDATE
from ..detect.columns import ip_text
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.evidence import evidence_frames, keep_ends
from ..detect.figure import ReportFigure, TimeBins
from ..detect.grouping import group_by
from ..detect.hashing import mix64
from ..detect.state import concat_tables, empty_table, fold_rows, take_rows
from ..findings import Finding, iso_time
from ..rules import ALERT_SECONDS, COUNT, RATE_PPS, Param, Range
from ..schema import L_SRC_MAC, PacketBatch
from ..units import NS, plural

DD_INIT, DD_MASTER = 0x4, 0x1                  # Database Description flags I and MS, RFC 2328 section A.3.3
MAX_AGE_S = 3600                               # RFC 2328 appendix B: an LSA of this age is being flushed
DO_NOT_AGE = 0x8000                            # RFC 1793: the age's top bit
AS_SCOPE_V2 = (5, 11)                          # AS-external and AS-scope opaque LSAs (RFC 2328, RFC 5250)
V3_SCOPE_MASK, V3_SCOPE_AS = 0x6000, 0x4000    # OSPFv3 LS type S2 S1 bits: 10 is AS scope (RFC 5340 A.4.2.1)
TYPE_NAMES = {HELLO: "Hello", DB_DESCRIPTION: "Database Description", LS_REQUEST: "LS Request",
              LS_UPDATE: "LS Update", LS_ACK: "LS Acknowledgment"}
V2_LSA_NAMES = {1: "router", 2: "network", 3: "summary", 4: "ASBR-summary", 5: "AS-external", 7: "NSSA",
                9: "link-local opaque", 10: "area opaque", 11: "AS opaque"}
V3_LSA_NAMES = {0x2001: "router", 0x2002: "network", 0x2003: "inter-area-prefix", 0x2004: "inter-area-router",
                0x4005: "AS-external", 0x2007: "NSSA", 0x0008: "link", 0x2009: "intra-area-prefix"}
ALL_SPF_ROUTERS = ((0, 0x0000FFFF_E0000005), (0xFF02_0000_0000_0000, 0x5))   # 224.0.0.5, ff02::5
# Seconds behind the newest (or after the earliest) time of a state beyond which a second, a run or a
# flooding count is complete: batches of one capture arrive in time order, a partition's first and
# last seconds may continue in its neighbour.
SETTLE_S = 2
# A Hello stream goes on while each Hello comes within this many hello intervals of the one before
# (a busy router's Hello may come a little late); one Hello missing, lost or not sent, breaks it.
STREAM_SLACK = 1.5
# Database Descriptions of one exchange come at most RxmtInterval apart (RFC 2328 appendix C.3, FRRouting's
# default 5 s): a longer silence ends the exchange; a restart that starts one within this many seconds came back.
EXCHANGE_GAP_S = 5
# Quick resets (each straight back, no Hello missing) repeated `min_exstarts` times are medium; spread over this
# many seconds or more as well, and `high_flaps` of them, they are sustained flapping (high): a maintenance
# window's clears come within a minute or two, a process or script that keeps resetting the adjacency goes on.
# Shorter values call a busy maintenance sustained, longer ones keep a reset loop at medium for longer.
SUSTAINED_S = 120
# How the Hellos showed an adjacency down (OspfInstability._hello_flaps)
HOW_TEXT = {"dropped": "a router dropped its neighbour from its Hellos, then listed it again",
            "silent": "a router fell silent for longer than its dead interval, then spoke again"}
# Rows a state table may hold before its least telling rows are dropped (forged router ids or LSAs by
# the million must not grow it without bound)
MAX_ROWS = 100_000
# LSAs whose fast originations keep their frames for evidence
EVIDENCE_KEYS = 256
LISTED = 10          # items named in a message or listed in evidence
FIGURE_ROUTERS = 6   # routers drawn one by one; the others are summed


@kernel("(u8[::1], i8[::1], i8[::1], i8[::1])")
def join_runs(key, first, last, gap):
    """Run numbers of time spans sorted by (key, first): a span joins the run before it when it has the same
    key and starts at most `gap` (its own) after the latest end so far; runs are numbered from 0."""
    out = np.empty(len(key), dtype=np.int64)
    run = -1
    end = np.int64(0)
    for i in range(len(key)):
        if i == 0 or key[i] != key[i - 1] or first[i] - end > gap[i]:
            run += 1
            end = last[i]
        elif last[i] > end:
            end = last[i]
        out[i] = run
    return out


def _cap(rows: dict, priority: np.ndarray) -> dict:
    """At most MAX_ROWS rows: those of the highest priority (a count, or True for a telling row) first, then
    the most recent."""
    if len(rows["last_ns"]) <= MAX_ROWS:
        return rows
    order = np.lexsort((-rows["last_ns"], -priority.astype(np.int64)))[:MAX_ROWS]
    return take_rows(rows, np.sort(order))


def _runs(rows: dict, reductions: dict) -> dict:
    """Spans of one key joined into runs (join_runs): the first span describes a run, `reductions` combine."""
    if len(rows["key"]) == 0:
        return rows
    order = np.lexsort((rows["first_ns"], rows["key"]))
    rows = take_rows(rows, order)
    run = join_runs(rows["key"], rows["first_ns"], rows["last_ns"], rows["gap_ns"])
    starts = np.flatnonzero(np.concatenate(([True], run[1:] != run[:-1])))
    out = take_rows(rows, starts)
    for name, ufunc in reductions.items():
        out[name] = ufunc.reduceat(rows[name], starts)
    return out


def _v4(value) -> str:
    return str(ipaddress.IPv4Address(int(value)))


def _lsa_name(version: int, kind: int) -> str:
    """An LS type as an engineer reads it: "type 1 (router)" (OSPFv2), "router (0x2001)" (OSPFv3)."""
    if version == 2:
        return f"type {kind} ({V2_LSA_NAMES.get(kind, 'unknown')})"
    return f"{V3_LSA_NAMES[kind]} ({kind:#06x})" if kind in V3_LSA_NAMES else f"type {kind:#06x}"


def _signed(seq: np.ndarray) -> np.ndarray:
    """LS sequence numbers as the signed 32-bit values they are (RFC 2328 section 12.1.6)."""
    return seq.astype(np.uint32).view(np.int32).astype(np.int64)


def _multicast(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    out = np.zeros(len(hi), dtype=bool)
    for group_hi, group_lo in ALL_SPF_ROUTERS:
        out |= (hi == np.uint64(group_hi)) & (lo == np.uint64(group_lo))
    return out


RATE_COLUMNS = {"key": np.uint64, "router_id": np.uint32, "second": np.int64, "count": np.int64,
                "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64, "last_frame": np.int64}
ROUTER_COLUMNS = {"router_id": np.uint32, "packets": np.int64, **{f"type_{t}": np.int64 for t in TYPE_NAMES},
                  "first_ns": np.int64, "last_ns": np.int64, "src_ip_hi": np.uint64, "src_ip_lo": np.uint64,
                  "src_mac": np.uint64, "layers": np.uint32}
ADDRESS_COLUMNS = {"key": np.uint64, "src_ip_hi": np.uint64, "src_ip_lo": np.uint64, "router_id": np.uint32,
                   "first_ns": np.int64, "last_ns": np.int64}
SPEAKER_COLUMNS = {"key": np.uint64, "version": np.uint8, "link": np.uint64, "vlan": np.uint16, "area": np.uint32,
                   "network": np.uint64, "mask": np.uint32, "router_id": np.uint32,
                   "src_ip_hi": np.uint64, "src_ip_lo": np.uint64, "hello": np.int64, "dead": np.int64,
                   "count": np.int64, "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64}
RUN_COLUMNS = {"key": np.uint64, "router_id": np.uint32, "src_ip_hi": np.uint64, "src_ip_lo": np.uint64,
               "neighbor": np.uint32, "first_ns": np.int64, "last_ns": np.int64, "gap_ns": np.int64,
               "dead_ns": np.int64,
               "count": np.int64, "first_frame": np.int64, "last_frame": np.int64}
DBD_COLUMNS = {"key": np.uint64, "router_id": np.uint32, "src_ip_hi": np.uint64, "src_ip_lo": np.uint64,
               "dest_ip_hi": np.uint64, "dest_ip_lo": np.uint64, "link": np.uint64, "mtu": np.int64,
               "exstart": np.bool_, "seq": np.int64, "count": np.int64, "first_ns": np.int64, "last_ns": np.int64,
               "first_frame": np.int64, "last_frame": np.int64}
LSA_KEY_COLUMNS = {"lsa": np.uint64, "version": np.uint8, "area": np.uint32, "type": np.uint32,
                   "ls_id": np.uint32, "adv_router": np.uint32}
EXCHANGE_COLUMNS = {"key": np.uint64, "router_id": np.uint32, "src_ip_hi": np.uint64, "src_ip_lo": np.uint64,
                    "dest_ip_hi": np.uint64, "dest_ip_lo": np.uint64, "link": np.uint64, "first_ns": np.int64,
                    "last_ns": np.int64, "gap_ns": np.int64, "count": np.int64, "first_frame": np.int64,
                    "last_frame": np.int64}
EXCHANGE_REDUCE = {"last_ns": np.maximum, "count": np.add, "first_frame": np.minimum, "last_frame": np.maximum}
ORIGIN_COLUMNS = {**LSA_KEY_COLUMNS, "first_seq": np.int64, "first_ns": np.int64, "last_seq": np.int64,
                  "last_ns": np.int64, "originations": np.int64, "fast": np.int64, "min_interval_ns": np.int64,
                  "first_frame": np.int64, "last_frame": np.int64}
FLOOD_COLUMNS = {"key": np.uint64, **LSA_KEY_COLUMNS, "seq": np.int64, "router_id": np.uint32,
                 "src_ip_hi": np.uint64, "src_ip_lo": np.uint64, "link": np.uint64, "count": np.int64,
                 "quick": np.int64, "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64,
                 "last_frame": np.int64}
NO_INTERVAL = np.iinfo(np.int64).max


@register
class OspfInstability(Detector):
    rule_id = "ospf-instability"
    EVE_SIGNATURE = (11, "Misc activity")
    # what its findings rest on beyond what it saw (detect.confidence): Hellos that stopped, what they list, when
    QUALITY_NEEDS = frozenset({"absence", "payload", "timing"})
    APP_TABLES = ("ospf",)
    PARAMS = {
        "storm_pps": Param(int, 100, "OSPF packets per second from one router above which a second is part of a "
                                     "storm", RATE_PPS,
                           "A router sends a Hello every 10 s per interface and floods in bursts when the topology "
                           "changes; lower values call a large database exchange a storm, higher ones let a storm "
                           "that already overloads a control plane through."),
        "storm_seconds": Param(int, 5, "consecutive seconds above storm_pps that make a storm (high)", Range(1, 86400),
                               "A new adjacency's database exchange fills a few seconds; shorter values take it for "
                               "a storm, longer ones report a storm late."),
        "exstart_window_s": Param(float, 300.0, "window in which repeated adjacency starts count as a flap",
                                  Range(1, 86400),
                                  "Longer windows catch slow flapping (a dead interval of 40 s and a retry every "
                                  "few minutes), shorter ones only fast flapping."),
        "min_exstarts": Param(int, 3, "adjacency starts (ExStart, new DD sequence) from one side within "
                                      "exstart_window_s that make a flapping adjacency (medium)", Range(2, 10**6),
                              "An adjacency forms once with one start per side and restarts after a reboot; 2 "
                              "would call every restart a flap, higher values wait for more of them."),
        "high_flaps": Param(int, 3, "flaps of one adjacency from which the finding is high", COUNT,
                            "Each flap recomputes routes in the whole area; lower values escalate a single "
                            "bounce."),
        "min_ls_interval_s": Param(float, 5.0, "MinLSInterval: least seconds between two originations of one LSA",
                                   Range(0.001, 3600),
                                   "RFC 2328's 5 s; routers with LSA throttling may originate sooner after a "
                                   "quiet period (lower it to their initial delay)."),
        "min_fast_reoriginations": Param(int, 3, "originations of one LSA sooner than min_ls_interval_s after the "
                                                 "previous one that make it unstable (medium)", COUNT,
                                         "A router that restarts re-originates its LSAs at once, one fast "
                                         "origination; 1 would report every restart."),
        "min_ls_arrival_s": Param(float, 1.0, "MinLSArrival: copies of one LSA instance closer than this are "
                                              "re-floods", Range(0.001, 3600),
                                  "RFC 2328's 1 s: neighbours discard copies closer than this."),
        "min_refloods": Param(int, 10, "copies of one LSA instance one router sends on one link within "
                                       "min_ls_arrival_s of the previous that make it a re-flood (medium)", COUNT,
                              "A mirror that sees a frame on the way in and out counts one extra copy per flood; "
                              "lower values report such duplicates."),
    }
    ALERTS = {
        "suppress_s": Param(float, 60.0, "least seconds between two events about one router, adjacency or LSA",
                            ALERT_SECONDS,
                            "An unstable adjacency or storm goes on for minutes; shorter intervals repeat it in "
                            "alerts.jsonl."),
        "resolve_s": Param(float, 120.0, "seconds without new evidence before an OSPF instability is resolved",
                           ALERT_SECONDS,
                           "A flapping adjacency is quiet for a dead interval (40 s) between flaps; shorter "
                           "values resolve and raise it again at each flap."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.rates = empty_table(RATE_COLUMNS)
        self.routers = empty_table(ROUTER_COLUMNS)
        self.addresses = empty_table(ADDRESS_COLUMNS)
        self.speakers = empty_table(SPEAKER_COLUMNS)
        self.stream = empty_table(RUN_COLUMNS)     # a router's Hellos from one address, none missing (neighbor 0)
        self.listed = empty_table(RUN_COLUMNS)     # a router listing one neighbour in its Hellos from one address
        self.dbds = empty_table(DBD_COLUMNS)
        self.exchanges = empty_table(EXCHANGE_COLUMNS)   # Database Descriptions past ExStart, joined per exchange
        self.origins = empty_table(ORIGIN_COLUMNS)
        self.floods = empty_table(FLOOD_COLUMNS)
        self.fast_frames: dict[int, np.ndarray] = {}    # LSA key -> frames of its fast originations
        self.start_ns: int | None = None
        self.end_ns: int | None = None

    # ---- update -----------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        tab = app.table(batch, "ospf")
        header = np.flatnonzero(tab.valid("router_id"))
        if len(header) == 0:
            return
        rows = tab["row"][header]
        ts = batch["ts_ns"][rows]
        self.start_ns = int(ts.min()) if self.start_ns is None else min(self.start_ns, int(ts.min()))
        self.end_ns = int(ts.max()) if self.end_ns is None else max(self.end_ns, int(ts.max()))
        packets = {
            "index": header, "row": rows, "ts": ts, "frame": tab["frame"][header],
            "router_id": tab["router_id"][header], "type": tab["type"][header], "version": tab["version"][header],
            "area": tab["area_id"][header], "src_ip_hi": batch["src_ip_hi"][rows],
            "src_ip_lo": batch["src_ip_lo"][rows], "dest_ip_hi": batch["dest_ip_hi"][rows],
            "dest_ip_lo": batch["dest_ip_lo"][rows],
            "link": mix64(batch["iface"][rows], batch["vlan_outer"][rows], batch["vlan_inner"][rows]),
            "vlan": batch["vlan_outer"][rows],
        }
        self._count(batch, packets)
        self._hellos(tab, packets)
        self._dbds(tab, packets)
        self._updates(tab, packets)

    def _count(self, batch: PacketBatch, p: dict) -> None:
        n = len(p["ts"])
        ones = np.ones(n, dtype=np.int64)
        second = p["ts"] // NS
        rates = {"key": (p["router_id"].astype(np.uint64) << np.uint64(32)) | (second.astype(np.uint64)
                                                                              & np.uint64(0xFFFFFFFF)),
                 "router_id": p["router_id"], "second": second, "count": ones, "first_ns": p["ts"],
                 "last_ns": p["ts"], "first_frame": p["frame"], "last_frame": p["frame"]}
        self.rates = self._settle_rates(fold_rows(self.rates, rates, "key", {
            "count": np.add, "last_ns": np.maximum, "first_frame": np.minimum, "last_frame": np.maximum}))
        routers = {"router_id": p["router_id"], "packets": ones,
                   **{f"type_{t}": (p["type"] == t).astype(np.int64) for t in TYPE_NAMES},
                   "first_ns": p["ts"], "last_ns": p["ts"], "src_ip_hi": p["src_ip_hi"], "src_ip_lo": p["src_ip_lo"],
                   "src_mac": batch["src_mac"][p["row"]], "layers": batch["layers"][p["row"]]}
        self.routers = self._fold_routers(routers)
        addresses = {"key": mix64(p["src_ip_hi"], p["src_ip_lo"], p["router_id"]), "src_ip_hi": p["src_ip_hi"],
                     "src_ip_lo": p["src_ip_lo"], "router_id": p["router_id"], "first_ns": p["ts"],
                     "last_ns": p["ts"]}
        merged = fold_rows(self.addresses, addresses, "key", {"last_ns": np.maximum})
        self.addresses = _cap(merged, np.zeros(len(merged["key"]), dtype=bool))

    def _fold_routers(self, routers: dict) -> dict:
        merged = fold_rows(self.routers, routers, "router_id", {
            "packets": np.add, "last_ns": np.maximum, **{f"type_{t}": np.add for t in TYPE_NAMES}})
        return _cap(merged, merged["packets"])

    def _settle_rates(self, rates: dict) -> dict:
        """Drop the complete seconds that stayed at or below the storm rate: they can make no storm."""
        first, last = self.start_ns // NS + SETTLE_S, self.end_ns // NS - SETTLE_S
        keep = (rates["count"] > self.params["storm_pps"]) | (rates["second"] <= first) | (rates["second"] >= last)
        return _cap(take_rows(rates, keep), rates["count"][keep] > self.params["storm_pps"])

    def _hellos(self, tab, p: dict) -> None:
        sel = np.flatnonzero((p["type"] == HELLO) & tab.valid("dead_interval")[p["index"]])
        if len(sel) == 0:
            return
        index = p["index"][sel]
        version = p["version"][sel]
        # the link a Hello speaks on: the segment, the area and (OSPFv2) the network or (OSPFv3) the instance
        network = np.where(version == 2, (p["src_ip_lo"][sel] & np.uint64(0xFFFFFFFF))
                           & tab["network_mask"][index].astype(np.uint64), tab["instance_id"][index])
        link = mix64(p["link"][sel], p["area"][sel], version, network)
        hello = tab["hello_interval"][index].astype(np.int64)
        dead = tab["dead_interval"][index].astype(np.int64)
        rid, src_hi, src_lo, ts, frame = (p[name][sel] for name in ("router_id", "src_ip_hi", "src_ip_lo", "ts",
                                                                   "frame"))
        ones = np.ones(len(sel), dtype=np.int64)
        speakers = {"key": mix64(link, rid, src_hi, src_lo, hello, dead), "version": version, "link": link,
                    "vlan": p["vlan"][sel], "area": p["area"][sel], "network": network,
                    "mask": tab["network_mask"][index], "router_id": rid, "src_ip_hi": src_hi, "src_ip_lo": src_lo,
                    "hello": hello, "dead": dead, "count": ones, "first_ns": ts, "last_ns": ts, "first_frame": frame}
        merged = fold_rows(self.speakers, speakers, "key", {"count": np.add, "last_ns": np.maximum})
        self.speakers = _cap(merged, merged["count"])
        # Hellos a hello interval apart are one stream; one missing (lost, or not sent) breaks it
        gap = np.maximum(hello, 1) * int(NS * STREAM_SLACK)
        dead_ns = np.maximum(dead, 1) * NS
        # a Hello whose neighbour list was cut short (snapshot, cap) does not show who is missing from it
        whole = ~(tab.truncated[index] | tab.more[index])
        stream = {"key": mix64(rid, src_hi, src_lo), "router_id": rid, "src_ip_hi": src_hi, "src_ip_lo": src_lo,
                  "neighbor": np.zeros(len(sel), dtype=np.uint32), "first_ns": ts, "last_ns": ts, "gap_ns": gap,
                  "dead_ns": dead_ns, "count": ones, "first_frame": frame, "last_frame": frame}
        self.stream = self._join(self.stream, take_rows(stream, whole))
        nbr = tab.children["ospf_nbr"]
        position = np.full(len(tab), -1, dtype=np.int64)
        position[index] = np.arange(len(sel))
        mine = np.flatnonzero(position[nbr["parent"]] >= 0)
        at = position[nbr["parent"][mine]]
        neighbor = nbr["router_id"][mine]
        listed = {"key": mix64(rid[at], src_hi[at], src_lo[at], neighbor), "router_id": rid[at],
                  "src_ip_hi": src_hi[at], "src_ip_lo": src_lo[at], "neighbor": neighbor, "first_ns": ts[at],
                  "last_ns": ts[at], "gap_ns": gap[at], "dead_ns": dead_ns[at], "count": ones[at],
                  "first_frame": frame[at],
                  "last_frame": frame[at]}
        self.listed = self._join(self.listed, listed)

    @staticmethod
    def _join(runs: dict, new: dict) -> dict:
        joined = _runs(concat_tables(runs, new), {"last_ns": np.maximum, "count": np.add, "first_frame": np.minimum,
                                            "last_frame": np.maximum})
        # a key with one run of one Hello (a forged router's) tells least: those go first when the table is full
        _, inverse, counts = np.unique(joined["key"], return_inverse=True, return_counts=True)
        return _cap(joined, (counts[inverse] > 1) | (joined["count"] > 1))

    def _dbds(self, tab, p: dict) -> None:
        sel = np.flatnonzero((p["type"] == DB_DESCRIPTION) & tab.valid("mtu")[p["index"]])
        if len(sel) == 0:
            return
        index = p["index"][sel]
        flags = tab["dd_flags"][index]
        exstart = (flags & (DD_INIT | DD_MASTER)) == (DD_INIT | DD_MASTER)
        seq = np.where(exstart, tab["dd_seq"][index].astype(np.int64), 0)
        mtu = tab["mtu"][index].astype(np.int64)
        cols = {name: p[name][sel] for name in ("router_id", "src_ip_hi", "src_ip_lo", "dest_ip_hi", "dest_ip_lo",
                                                "link")}
        dbds = {"key": mix64(*cols.values(), mtu, exstart, seq), **cols, "mtu": mtu, "exstart": exstart, "seq": seq,
                "count": np.ones(len(sel), dtype=np.int64), "first_ns": p["ts"][sel], "last_ns": p["ts"][sel],
                "first_frame": p["frame"][sel], "last_frame": p["frame"][sel]}
        merged = fold_rows(self.dbds, dbds, "key", {"count": np.add, "last_ns": np.maximum,
                                                    "first_frame": np.minimum, "last_frame": np.maximum})
        self.dbds = _cap(merged, ~merged["exstart"])
        # the exchange after a start (I clear): when a restarted adjacency came back
        going = (flags & DD_INIT) == 0
        if going.any():
            exchanges = {"key": mix64(*(col[going] for col in cols.values())),
                         **{name: col[going] for name, col in cols.items()},
                         "first_ns": p["ts"][sel][going], "last_ns": p["ts"][sel][going],
                         "gap_ns": np.full(int(going.sum()), EXCHANGE_GAP_S * NS, dtype=np.int64),
                         "count": np.ones(int(going.sum()), dtype=np.int64), "first_frame": p["frame"][sel][going],
                         "last_frame": p["frame"][sel][going]}
            self.exchanges = self._join_exchanges(self.exchanges, exchanges)

    @staticmethod
    def _join_exchanges(runs: dict, new: dict) -> dict:
        joined = _runs(concat_tables(runs, {name: np.asarray(new[name]).astype(dtype)
                                      for name, dtype in EXCHANGE_COLUMNS.items()}), EXCHANGE_REDUCE)
        return _cap(joined, joined["count"])

    def _updates(self, tab, p: dict) -> None:
        lsa = tab.children["ospf_lsa"]
        position = np.full(len(tab), -1, dtype=np.int64)
        updates = np.flatnonzero(p["type"] == LS_UPDATE)
        position[p["index"][updates]] = updates
        mine = np.flatnonzero((position[lsa["parent"]] >= 0) & lsa.valid("seq"))
        if len(mine) == 0:
            return
        at = position[lsa["parent"][mine]]
        version = p["version"][at]
        kind = lsa["type"][mine]
        as_scope = np.where(version == 2, np.isin(kind, AS_SCOPE_V2), (kind & V3_SCOPE_MASK) == V3_SCOPE_AS)
        area = np.where(as_scope, np.uint32(0), p["area"][at])
        key_cols = {"version": version, "area": area, "type": kind, "ls_id": lsa["ls_id"][mine],
                    "adv_router": lsa["adv_router"][mine]}
        key = mix64(*key_cols.values())
        seq = _signed(lsa["seq"][mine])
        ts, frame = p["ts"][at], p["frame"][at]
        self._originations(key, key_cols, seq, ts, frame)
        flushed = (lsa["age"][mine] & ~np.uint16(DO_NOT_AGE)) >= MAX_AGE_S
        sender = {name: p[name][at] for name in ("router_id", "src_ip_hi", "src_ip_lo", "link")}
        flood_key = mix64(key, seq, lsa["checksum"][mine], flushed, *sender.values())
        self._floods({"key": flood_key, "lsa": key, **key_cols, "seq": seq, **sender,
                      "count": np.ones(len(mine), dtype=np.int64), "quick": np.zeros(len(mine), dtype=np.int64),
                      "first_ns": ts, "last_ns": ts, "first_frame": frame, "last_frame": frame})

    def _originations(self, key, key_cols, seq, ts, frame) -> None:
        """Fold the LSAs' sightings into one summary per LSA: its originations (a sequence number above every
        one seen before), how many came sooner than MinLSInterval after the previous."""
        n = len(key)
        rows = {"lsa": key, **key_cols, "first_seq": seq, "first_ns": ts, "last_seq": seq, "last_ns": ts,
                "originations": np.ones(n, dtype=np.int64), "fast": np.zeros(n, dtype=np.int64),
                "min_interval_ns": np.full(n, NO_INTERVAL, dtype=np.int64), "first_frame": frame, "last_frame": frame}
        self.origins = self._chain_origins(concat_tables(self.origins, rows))

    def _chain_origins(self, rows: dict) -> dict:
        """Summaries of one LSA (a sighting is one too) joined in time order. A later one's first sequence
        number is an origination when it is above every one before; it is fast when it came sooner than
        MinLSInterval after the origination of the highest before it. An older copy flooded back
        (RFC 2328 section 13 step 8) is neither."""
        if len(rows["lsa"]) == 0:
            return rows
        rows = take_rows(rows, np.lexsort((rows["first_ns"], rows["lsa"])))
        n = len(rows["lsa"])
        start = np.concatenate(([True], rows["lsa"][1:] != rows["lsa"][:-1]))
        joint = ~start[1:]
        group = np.cumsum(start) - 1
        # the highest sequence number so far per LSA, and the summary that brought it (each LSA lifted above
        # the one before, so one running maximum serves them all)
        lift = (1 << 31) + group * (1 << 33)
        best = np.maximum.accumulate(rows["last_seq"] + lift)
        raised = np.concatenate(([True], rows["last_seq"][1:] + lift[1:] > best[:-1]))
        holder = np.maximum.accumulate(np.where(raised, np.arange(n), 0))
        newer = joint & (rows["first_seq"][1:] + lift[1:] > best[:-1])
        interval = rows["first_ns"][1:] - rows["last_ns"][holder[:-1]]
        fast = newer & (interval < int(self.params["min_ls_interval_s"] * NS))
        for i in np.flatnonzero(fast):
            lsa = int(rows["lsa"][i + 1])
            kept = self.fast_frames.get(lsa, np.zeros(0, dtype=np.int64))
            pair = np.array([rows["last_frame"][holder[i]], rows["first_frame"][i + 1]])
            self.fast_frames[lsa] = keep_ends(kept, pair, limit=16)
        starts = np.flatnonzero(start)
        out = take_rows(rows, starts)
        out["originations"] = np.add.reduceat(rows["originations"], starts) - np.bincount(
            group[1:][joint & ~newer], minlength=len(starts))
        out["fast"] = np.add.reduceat(rows["fast"], starts) + np.bincount(group[1:][fast], minlength=len(starts))
        out["min_interval_ns"] = np.minimum.reduceat(rows["min_interval_ns"], starts)
        np.minimum.at(out["min_interval_ns"], group[1:], np.where(newer, interval, NO_INTERVAL))
        last = holder[np.append(starts[1:], n) - 1]
        out["last_seq"] = rows["last_seq"][last]
        out["last_ns"] = rows["last_ns"][last]
        out["last_frame"] = rows["last_frame"][last]
        if len(self.fast_frames) > EVIDENCE_KEYS:
            worst = sorted(self.fast_frames, key=lambda k: -len(self.fast_frames[k]))[:EVIDENCE_KEYS]
            self.fast_frames = {k: self.fast_frames[k] for k in worst}
        return _cap(out, out["fast"] > 0)

    def _floods(self, new: dict) -> None:
        self.floods = self._chain_floods(concat_tables(self.floods, new))

    def _chain_floods(self, rows: dict) -> dict:
        """Copies of one instance from one sender and link in time order: each within MinLSArrival of the one
        before is quick. Complete rows without a quick copy are dropped: they can add none."""
        if len(rows["key"]) == 0:
            return rows
        rows = take_rows(rows, np.lexsort((rows["first_ns"], rows["key"])))
        start = np.concatenate(([True], rows["key"][1:] != rows["key"][:-1]))
        quick = ~start[1:] & (rows["first_ns"][1:] - rows["last_ns"][:-1] < int(self.params["min_ls_arrival_s"] * NS))
        starts = np.flatnonzero(start)
        group = np.cumsum(start) - 1
        out = take_rows(rows, starts)
        out["quick"] = np.add.reduceat(rows["quick"], starts) + np.bincount(group[1:][quick], minlength=len(starts))
        out["count"] = np.add.reduceat(rows["count"], starts)
        for name in ("last_ns", "last_frame"):
            out[name] = np.maximum.reduceat(rows[name], starts)
        settle = SETTLE_S * NS
        settled = (out["last_ns"] < self.end_ns - settle) & (out["first_ns"] > self.start_ns + settle)
        keep = (out["quick"] > 0) | ~settled
        out = take_rows(out, keep)
        return _cap(out, out["quick"] > 0)

    # ---- merge ------------------------------------------------------------
    def merge(self, other: OspfInstability) -> OspfInstability:
        check_merge(self, other)
        if other.start_ns is None:
            return self
        self.start_ns = other.start_ns if self.start_ns is None else min(self.start_ns, other.start_ns)
        self.end_ns = other.end_ns if self.end_ns is None else max(self.end_ns, other.end_ns)
        self.rates = self._settle_rates(fold_rows(self.rates, other.rates, "key", {
            "count": np.add, "last_ns": np.maximum, "first_frame": np.minimum, "last_frame": np.maximum}))
        self.routers = self._fold_routers(other.routers)
        addresses = fold_rows(self.addresses, other.addresses, "key", {"last_ns": np.maximum})
        self.addresses = _cap(addresses, np.zeros(len(addresses["key"]), dtype=bool))
        speakers = fold_rows(self.speakers, other.speakers, "key", {"count": np.add, "last_ns": np.maximum})
        self.speakers = _cap(speakers, speakers["count"])
        self.stream = self._join(self.stream, other.stream)
        self.listed = self._join(self.listed, other.listed)
        dbds = fold_rows(self.dbds, other.dbds, "key", {"count": np.add, "last_ns": np.maximum,
                                                        "first_frame": np.minimum, "last_frame": np.maximum})
        self.dbds = _cap(dbds, ~dbds["exstart"])
        self.exchanges = self._join_exchanges(self.exchanges, other.exchanges)
        for lsa, frames in other.fast_frames.items():
            self.fast_frames[lsa] = keep_ends(self.fast_frames.get(lsa, np.zeros(0, dtype=np.int64)), frames,
                                              limit=16)
        self.origins = self._chain_origins(concat_tables(self.origins, other.origins))
        self.floods = self._chain_floods(concat_tables(self.floods, other.floods))
        return self

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        if self.start_ns is None:
            return []
        return [*self._storms(), *self._adjacencies(), *self._reoriginations(), *self._refloods(),
                *self._hello_mismatches(), *self._mtu_mismatches()]

    def _router_fields(self, router_id: int) -> dict:
        """src_ip and src_mac of a router (its first packet's), for a finding about it."""
        at = np.flatnonzero(self.routers["router_id"] == router_id)
        if len(at) == 0:
            return {}
        k = at[0]
        fields = {"src_ip": ip_text(self.routers["src_ip_hi"][k], self.routers["src_ip_lo"][k])}
        if self.routers["layers"][k] & L_SRC_MAC:
            fields["src_mac"] = mac_to_str(self.routers["src_mac"][k])
        return fields

    def _mix_text(self, router_id: int) -> str:
        at = np.flatnonzero(self.routers["router_id"] == router_id)
        counts = {name: int(self.routers[f"type_{t}"][at].sum()) for t, name in TYPE_NAMES.items()}
        total = max(sum(counts.values()), 1)
        shown = [f"{100 * c / total:.0f} % {name}s" for name, c in sorted(counts.items(), key=lambda kv: -kv[1])
                 if 100 * c >= total]
        return ", ".join(shown[:3])

    def _storms(self) -> list[Finding]:
        rates = self.rates
        hot = np.flatnonzero(rates["count"] > self.params["storm_pps"])
        if len(hot) == 0:
            return []
        hot = hot[np.lexsort((rates["second"][hot], rates["router_id"][hot]))]
        router, second = rates["router_id"][hot], rates["second"][hot]
        new_run = np.concatenate(([True], (router[1:] != router[:-1]) | (second[1:] != second[:-1] + 1)))
        run = np.cumsum(new_run) - 1
        length = np.bincount(run)
        stormy = length[run] >= self.params["storm_seconds"]
        out = []
        for rid in np.unique(router[stormy]).tolist():
            mine = hot[stormy & (router == rid)]
            runs = run[stormy & (router == rid)]
            spans = []
            for r in np.unique(runs).tolist():
                part = mine[runs == r]
                spans.append({"start": int(rates["first_ns"][part].min()), "end": int(rates["last_ns"][part].max()),
                              "seconds": len(part), "peak_pps": int(rates["count"][part].max()),
                              "packets": int(rates["count"][part].sum())})
            packets = sum(s["packets"] for s in spans)
            seconds = sum(s["seconds"] for s in spans)
            peak = max(s["peak_pps"] for s in spans)
            t0, t1 = spans[0]["start"], spans[-1]["end"]
            frames = np.unique(np.concatenate([rates["first_frame"][mine], rates["last_frame"][mine]]))
            longest = max(s["seconds"] for s in spans)
            msg = (f"OSPF storm from router {_v4(rid)}: {packets:,} packets over {seconds:,} s above "
                   f"{self.params['storm_pps']:,}/s (peak {peak:,}/s, longest {longest:,} s in a row; "
                   f"{self._mix_text(rid)}), where a Hello every 10 s per interface is normal: link flaps, "
                   f"duplicated packets or a flooding loop are overloading the routers' control planes")
            out.append(self.finding(
                "high", msg, identifier=f"storm {_v4(rid)}", first_seen=t0, last_seen=t1, n=packets,
                proto="OSPF", **self._router_fields(rid),
                evidence={"kind": "storm", "router_id": _v4(rid), "storm_seconds": seconds, "peak_pps": peak,
                          "packets": packets, "episodes": [{**s, "start": iso_time(s["start"]),
                                                            "end": iso_time(s["end"])} for s in spans[:LISTED]],
                          "evidence_frames": evidence_frames(frames)}))
        return out

    def _router_of(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """The router id each address spoke OSPF from (its first), 0 where none did."""
        addresses = self.addresses
        out = np.zeros(len(hi), dtype=np.uint32)
        if len(addresses["key"]) == 0:
            return out
        first = np.lexsort((addresses["first_ns"], addresses["src_ip_lo"], addresses["src_ip_hi"]))
        table = mix64(addresses["src_ip_hi"][first], addresses["src_ip_lo"][first])
        order = np.argsort(table, kind="stable")
        table = table[order]
        wanted = mix64(hi, lo)
        at = np.searchsorted(table, wanted)
        found = at < len(table)
        found[found] = table[at[found]] == wanted[found]
        out[found] = addresses["router_id"][first][order][at[found]]
        return out

    def _single_neighbor(self, rid: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """The one neighbour each (router, address) lists in its Hellos (a point-to-point link), 0 otherwise."""
        listed = self.listed
        out = np.zeros(len(rid), dtype=np.uint32)
        if len(listed["key"]) == 0:
            return out
        speaker = mix64(listed["router_id"], listed["src_ip_hi"], listed["src_ip_lo"])
        pairs = np.unique(np.stack([speaker, listed["neighbor"].astype(np.uint64)], axis=1), axis=0)
        values, index, counts = np.unique(pairs[:, 0], return_index=True, return_counts=True)
        wanted = mix64(rid, hi, lo)
        at = np.searchsorted(values, wanted)
        found = at < len(values)
        found[found] = (values[at[found]] == wanted[found]) & (counts[at[found]] == 1)
        out[found] = pairs[index[at[found]], 1].astype(np.uint32)
        return out

    def _hello_flaps(self) -> list[dict]:
        """The times an adjacency went down as the Hellos show it, each with the routers, the span and the frames:

        - `dropped`: a router stopped listing a neighbour in its Hellos, its
          Hellos going on without a gap meanwhile, and listed it again (it
          declared the neighbour dead: RFC 2328 section 10.3, InactivityTimer);
        - `silent`: a router sent no Hello for longer than its dead interval
          and came back, while a neighbour that listed it before and after kept
          sending Hellos without a gap (so the capture saw the link meanwhile).
        """
        listed, stream = self.listed, self.stream
        if len(listed["key"]) == 0 or len(stream["key"]) == 0:
            return []
        spans: dict[int, list[tuple[int, int]]] = {}
        for key, first, last in zip(stream["key"].tolist(), stream["first_ns"].tolist(), stream["last_ns"].tolist()):
            spans.setdefault(key, []).append((first, last))

        def covered(router_id, hi, lo, start: int, end: int) -> bool:
            key = int(mix64(np.array([router_id]), np.array([hi]), np.array([lo]))[0])
            return any(first <= start and last >= end for first, last in spans.get(key, ()))

        flaps = []
        runs = take_rows(listed, np.lexsort((listed["first_ns"], listed["key"])))
        for i in np.flatnonzero(runs["key"][1:] == runs["key"][:-1]).tolist():
            gone, back = int(runs["last_ns"][i]), int(runs["first_ns"][i + 1])
            if covered(runs["router_id"][i], runs["src_ip_hi"][i], runs["src_ip_lo"][i], gone, back):
                flaps.append({"how": "dropped", "router_id": int(runs["router_id"][i]),
                              "neighbor": int(runs["neighbor"][i]), "src_ip_hi": runs["src_ip_hi"][i],
                              "src_ip_lo": runs["src_ip_lo"][i], "gone": gone, "back": back,
                              "frames": [int(runs["last_frame"][i]), int(runs["first_frame"][i + 1])]})
        # a router's Hellos with gaps up to its dead interval: the spans its neighbours kept it alive
        alive = _runs(dict(stream, gap_ns=stream["dead_ns"]), {"last_ns": np.maximum, "last_frame": np.maximum})
        listing: dict[int, list[int]] = {}
        for k, neighbor in enumerate(listed["neighbor"].tolist()):
            listing.setdefault(neighbor, []).append(k)
        for j in np.flatnonzero(alive["key"][1:] == alive["key"][:-1]).tolist():
            silent = int(alive["router_id"][j])
            gone, back = int(alive["last_ns"][j]), int(alive["first_ns"][j + 1])
            witnesses = {}
            for k in listing.get(silent, ()):
                witness = (int(listed["router_id"][k]), int(listed["src_ip_hi"][k]), int(listed["src_ip_lo"][k]))
                before, after = witnesses.get(witness, (False, False))
                witnesses[witness] = (before or int(listed["first_ns"][k]) <= gone,
                                      after or int(listed["last_ns"][k]) >= back)
            for (router_id, hi, lo), (before, after) in witnesses.items():
                if before and after and router_id != silent and covered(router_id, hi, lo, gone, back):
                    flaps.append({"how": "silent", "router_id": router_id, "neighbor": silent,
                                  "src_ip_hi": alive["src_ip_hi"][j], "src_ip_lo": alive["src_ip_lo"][j],
                                  "speaker": silent, "gone": gone, "back": back,
                                  "frames": [int(alive["last_frame"][j]), int(alive["first_frame"][j + 1])]})
        return flaps

    def _receivers(self, rows: dict) -> np.ndarray:
        """The router id each Database Description of `rows` went to: by its destination address, or, sent to the
        group, the one neighbour its sender lists (a point-to-point link); 0 where neither tells."""
        receiver = self._router_of(rows["dest_ip_hi"], rows["dest_ip_lo"])
        group = _multicast(rows["dest_ip_hi"], rows["dest_ip_lo"])
        return np.where(group & (receiver == 0), self._single_neighbor(
            rows["router_id"], rows["src_ip_hi"], rows["src_ip_lo"]), receiver)

    def _adjacencies(self) -> list[Finding]:
        """One finding per pair of routers whose adjacency restarted: ExStart starts and Hello drops."""
        dbds = take_rows(self.dbds, self.dbds["exstart"])
        pairs: dict[tuple, dict] = {}
        if len(dbds["key"]):
            receiver = self._receivers(dbds)
            for k in range(len(dbds["key"])):
                sender = int(dbds["router_id"][k])
                other = int(receiver[k]) if receiver[k] else ip_text(dbds["dest_ip_hi"][k], dbds["dest_ip_lo"][k])
                entry = pairs.setdefault(self._pair(sender, other), self._new_pair())
                entry["ids"] |= {sender} | ({other} if isinstance(other, int) else set())
                starts = entry["starts"].setdefault(sender, {})
                seq = int(dbds["seq"][k])
                starts[seq] = min(starts.get(seq, int(dbds["first_ns"][k])), int(dbds["first_ns"][k]))
                entry["frames"].append(int(dbds["first_frame"][k]))
                self._note_address(entry, sender, dbds["src_ip_hi"][k], dbds["src_ip_lo"][k], dbds["first_ns"][k])
                entry["times"] += [int(dbds["first_ns"][k]), int(dbds["last_ns"][k])]
        for flap in self._hello_flaps():
            entry = pairs.setdefault(self._pair(flap["router_id"], flap["neighbor"]), self._new_pair())
            entry["ids"] |= {flap["router_id"], flap["neighbor"]}
            entry["drops"].setdefault((flap["how"], flap["router_id"]), []).append(flap)
            entry["frames"] += flap["frames"]
            self._note_address(entry, flap.get("speaker", flap["router_id"]), flap["src_ip_hi"], flap["src_ip_lo"],
                               flap["gone"])
            entry["times"] += [flap["gone"], flap["back"]]
        exchanges = self._exchanges_of_pairs() if pairs else {}
        out = []
        window = int(self.params["exstart_window_s"] * NS)
        for pair, entry in pairs.items():
            in_window, total = 0, 0
            for starts in entry["starts"].values():
                times = np.sort(np.array(list(starts.values()), dtype=np.int64))
                total = max(total, len(times))
                in_window = max(in_window, int((np.searchsorted(times, times + window) - np.arange(len(times))).max()))
            drops = max((len(d) for d in entry["drops"].values()), default=0)
            judged = self._restarts(entry, exchanges.get(pair, []))
            restarts = total - 1 + judged["pre_existing"] if total else 0
            flaps = max(restarts, drops)
            quick = flaps > 0 and judged["quick"]
            sustained = judged["span_ns"] >= SUSTAINED_S * NS
            if in_window >= self.params["min_exstarts"] or drops:
                if quick and flaps < self.params["min_exstarts"]:
                    severity = "low"       # a couple of resets, each straight back, no Hello missing
                elif quick:                # resets again and again: high only when they go on for minutes
                    severity = "high" if flaps >= self.params["high_flaps"] and sustained else "medium"
                else:                      # Hellos lost, a start that did not come back, or not known
                    severity = "high" if flaps >= self.params["high_flaps"] else "medium"
            elif restarts >= 1:
                severity = "low"
            else:
                continue
            out.append(self._adjacency_finding(pair, entry, severity, in_window, total, drops, flaps, quick,
                                               judged))
        return out

    def _exchanges_of_pairs(self) -> dict[tuple, list[tuple[int, int]]]:
        """The database exchanges (first, last ns) of each pair of routers, from the Database Descriptions past
        ExStart."""
        ex = self.exchanges
        out: dict[tuple, list[tuple[int, int]]] = {}
        if len(ex["key"]) == 0:
            return out
        receiver = self._receivers(ex)
        for k in np.flatnonzero(receiver != 0).tolist():
            pair = self._pair(int(ex["router_id"][k]), int(receiver[k]))
            out.setdefault(pair, []).append((int(ex["first_ns"][k]), int(ex["last_ns"][k])))
        return out

    def _hellos_throughout(self, router_id: int, start: int, end: int) -> bool:
        """Whether the Hellos of `router_id` (any of its addresses) went on without one missing from `start` to
        `end`."""
        stream = self.stream
        mine = stream["router_id"] == np.uint32(router_id)
        return bool(np.any(mine & (stream["first_ns"] <= start) & (stream["last_ns"] >= end)))

    def _restarts(self, entry: dict, exchanges: list[tuple[int, int]]) -> dict:
        """What the packets say of a pair's restarts besides their count: whether the first ExStart restarted an
        adjacency that stood (a Hello had listed the other for a dead interval and more), whether a Hello was
        missing (a router silent past its dead interval, or the dropped one's Hellos broken meanwhile), whether
        each start came back (its database exchange followed within EXCHANGE_GAP_S), and over how long.
        `quick`: every one came straight back with both routers' Hellos going on throughout."""
        starts = sorted(t for starts in entry["starts"].values() for t in starts.values())
        events: list[int] = []
        for t in starts:                       # both sides' starts of one restart are one event
            if not events or t - events[-1] > EXCHANGE_GAP_S * NS:
                events.append(t)
        ids = sorted(entry["ids"])
        known = len(ids) == 2
        pre_existing = 0
        if starts and known:
            listed = self.listed
            t0 = starts[0]
            both = (((listed["router_id"] == ids[0]) & (listed["neighbor"] == ids[1]))
                    | ((listed["router_id"] == ids[1]) & (listed["neighbor"] == ids[0])))
            stood = both & (listed["first_ns"] <= t0 - listed["dead_ns"]) & (listed["last_ns"] >= t0 - listed["gap_ns"])
            pre_existing = int(stood.any())
        drops = [f for d in entry["drops"].values() for f in d]
        lost = any(f["how"] == "silent" for f in drops) or any(
            not self._hellos_throughout(f["neighbor"], f["gone"], f["back"]) for f in drops)
        unbroken = known and all(self._hellos_throughout(rid, t, t) for rid in ids for t in events)
        recovery = []
        for t in events:
            after = [last - t for first, last in exchanges if t <= first <= t + EXCHANGE_GAP_S * NS]
            recovery.append(min(after) if after else None)
        back = all(r is not None for r in recovery)
        moments = events + [f["gone"] for f in drops]
        return {"pre_existing": pre_existing, "hellos_lost": lost, "hellos_seen": unbroken, "came_back": back,
                "recovery_ns": recovery, "quick": known and not lost and unbroken and back,
                "span_ns": (max(moments) - min(moments)) if moments else 0}

    def _pair(self, a, b) -> tuple:
        texts = sorted([_v4(v) if isinstance(v, int) else v for v in (a, b)])
        return tuple(texts)

    @staticmethod
    def _note_address(entry: dict, router_id: int, hi, lo, when) -> None:
        """The address a router of the pair spoke from, its earliest sighting kept."""
        known = entry["addresses"].get(router_id)
        if known is None or int(when) < known[2]:
            entry["addresses"][router_id] = (hi, lo, int(when))

    @staticmethod
    def _new_pair() -> dict:
        return {"starts": {}, "drops": {}, "frames": [], "addresses": {}, "times": [], "ids": set()}

    def _adjacency_finding(self, pair, entry, severity, in_window, total, drops, flaps, quick, judged) -> Finding:
        a, b = pair
        parts = []
        if total:
            parts.append(f"{total:,} adjacency starts (ExStart) from one side, {in_window:,} within "
                         f"{self.params['exstart_window_s']:g} s"
                         + (", the first restarting an adjacency that stood" if judged["pre_existing"] else ""))
        if drops:
            hows = {how for how, _ in entry["drops"]}
            seen = "; ".join(HOW_TEXT[how] for how in sorted(hows))
            parts.append(f"{plural(drops, 'time')} the Hellos showed it down ({seen})")
        recovered = [r for r in judged["recovery_ns"] if r is not None]
        came_back = (f"each start's database exchange done within {max(recovered) / NS:,.2f} s" if recovered
                     else "listed again in the Hellos")
        span = judged["span_ns"] / NS
        if quick and severity == "low":
            msg = (f"OSPF adjacency {a} - {b} was reset {plural(flaps, 'time')} within {span:,.1f} s: "
                   f"{'; '.join(parts)}. Each time it came straight back ({came_back}) and no Hello of either router "
                   f"was missing: quick resets (an operator's clear ip ospf, a process restart), not a failing link; "
                   f"each still recomputes routes")
        elif quick:
            msg = (f"OSPF adjacency {a} - {b} is reset again and again ({plural(flaps, 'time')} in {span:,.1f} s): "
                   f"{'; '.join(parts)}. Each time it came straight back ({came_back}) with no Hello missing: "
                   f"something keeps resetting it (a router process restarting, a script, a software fault), not "
                   f"a failing link; each reset floods new LSAs and recomputes routes in the area")
        elif severity == "low":
            msg = (f"OSPF adjacency {a} - {b} restarted {plural(flaps, 'time')}: {'; '.join(parts)}; slower than a "
                   f"flap, but each restart recomputes routes")
        else:

            msg = (f"OSPF adjacency {a} - {b} is flapping ({plural(flaps, 'flap')}): {'; '.join(parts)}. Each flap "
                   f"floods new LSAs and recomputes routes in the area: look for a flapping link, errors or "
                   f"drops on it, or an overloaded router missing Hellos")
        drops_ev = [{"how": f["how"], "router_id": _v4(f["router_id"]), "neighbor": _v4(f["neighbor"]),
                     "down_after": iso_time(f["gone"]), "back_at": iso_time(f["back"])}
                    for d in entry["drops"].values() for f in d][:LISTED]
        # the router heard first is the source, as a flow's opener is
        speakers = sorted(entry["addresses"].values(), key=lambda address: address[2])
        fields = {"src_ip": ip_text(*speakers[0][:2])}
        if len(speakers) > 1:
            fields["dest_ip"] = ip_text(*speakers[1][:2])
        evidence = {"kind": "adjacency", "routers": list(pair), "flaps": flaps, "exstarts": total,
                    "exstarts_in_window": in_window, "hello_drops": drops, "drops": drops_ev,
                    "restarted_a_standing_adjacency": bool(judged["pre_existing"]),
                    "hellos_lost": judged["hellos_lost"], "hellos_throughout": judged["hellos_seen"],
                    "came_back": judged["came_back"], "quick_resets": quick, "span_s": round(span, 3),
                    "exchange_done_after_s": [None if r is None else round(r / NS, 3)
                                              for r in judged["recovery_ns"][:LISTED]],
                    "evidence_frames": evidence_frames(np.unique(np.array(entry["frames"], dtype=np.int64)))}
        return self.finding(severity, msg, identifier=f"adjacency {a} - {b}", first_seen=min(entry["times"]),
                            last_seen=max(entry["times"]), n=flaps, proto="OSPF", evidence=evidence, **fields)

    def _reoriginations(self) -> list[Finding]:
        origins = self.origins
        out = []
        for k in np.flatnonzero(origins["fast"] >= self.params["min_fast_reoriginations"]).tolist():
            version, kind = int(origins["version"][k]), int(origins["type"][k])
            adv, ls_id = _v4(origins["adv_router"][k]), _v4(origins["ls_id"][k])
            fast, total = int(origins["fast"][k]), int(origins["originations"][k])
            shortest = origins["min_interval_ns"][k] / NS
            name = _lsa_name(version, kind)
            msg = (f"OSPF LSA {name} {ls_id} of router {adv} re-originated {total:,} times, {fast:,} of them sooner "
                   f"than MinLSInterval ({self.params['min_ls_interval_s']:g} s) after the previous (shortest "
                   f"{shortest:.3f} s): its router is flapping a link or prefix, or two routers use router id {adv} "
                   f"and keep flushing each other's LSA")
            frames = self.fast_frames.get(int(origins["lsa"][k]), np.zeros(0, dtype=np.int64))
            frames = np.unique(np.concatenate([frames, [origins["first_frame"][k], origins["last_frame"][k]]]))
            out.append(self.finding(
                "medium", msg, identifier=f"lsa v{version} area {_v4(origins['area'][k])} {kind:#x} {ls_id} {adv}",
                first_seen=int(origins["first_ns"][k]), last_seen=int(origins["last_ns"][k]), n=total, proto="OSPF",
                place=f"OSPF router ID {adv}, area {_v4(origins['area'][k])}",
                evidence={"kind": "reorigination", "lsa_type": kind, "ls_id": ls_id, "adv_router": adv,
                          "area": _v4(origins["area"][k]), "originations": total, "fast_originations": fast,
                          "shortest_interval_s": round(float(shortest), 6),
                          "last_seq": f"{int(origins['last_seq'][k]) & 0xFFFFFFFF:#010x}",
                          "evidence_frames": evidence_frames(frames)}))
        return out

    def _refloods(self) -> list[Finding]:
        floods = self.floods
        loud = np.flatnonzero(floods["quick"] >= self.params["min_refloods"])
        if len(loud) == 0:
            return []
        sender = mix64(floods["src_ip_hi"][loud], floods["src_ip_lo"][loud], floods["link"][loud])
        order, starts, counts = group_by(sender)
        out = []
        for start, count in zip(starts.tolist(), counts.tolist()):
            mine = loud[order[start:start + count]]
            worst = mine[np.argmax(floods["quick"][mine])]
            src = ip_text(floods["src_ip_hi"][worst], floods["src_ip_lo"][worst])
            rid = _v4(floods["router_id"][worst])
            quick = int(floods["quick"][mine].sum())
            name = _lsa_name(int(floods["version"][worst]), int(floods["type"][worst]))
            seq = int(floods["seq"][worst]) & 0xFFFFFFFF
            msg = (f"OSPF router {rid} ({src}) sent {plural(count, 'LSA instance')} again and again within "
                   f"MinLSArrival ({self.params['min_ls_arrival_s']:g} s), {quick:,} copies its neighbours discard; "
                   f"worst {name} {_v4(floods['ls_id'][worst])} of {_v4(floods['adv_router'][worst])} sequence "
                   f"{seq:#010x}, {int(floods['count'][worst]):,} copies: duplicated packets or a flooding loop")
            frames = np.unique(np.concatenate([floods["first_frame"][mine], floods["last_frame"][mine]]))
            fields = {"src_ip": src}
            fields.update({k: v for k, v in self._router_fields(int(floods["router_id"][worst])).items()
                           if k == "src_mac"})
            out.append(self.finding(
                "medium", msg, identifier=f"reflood {src}", first_seen=int(floods["first_ns"][mine].min()),
                last_seen=int(floods["last_ns"][mine].max()), n=quick, proto="OSPF", **fields,
                evidence={"kind": "reflood", "router_id": rid, "instances": count, "quick_copies": quick,
                          "worst": {"lsa_type": int(floods["type"][worst]), "ls_id": _v4(floods["ls_id"][worst]),
                                    "adv_router": _v4(floods["adv_router"][worst]), "seq": f"{seq:#010x}",
                                    "copies": int(floods["count"][worst]),
                                    "quick_copies": int(floods["quick"][worst])},
                          "evidence_frames": evidence_frames(frames)}))
        return out

    def _hello_mismatches(self) -> list[Finding]:
        speakers = self.speakers
        out = []
        order, starts, counts = group_by(speakers["link"])
        for start, count in zip(starts.tolist(), counts.tolist()):
            mine = order[start:start + count]
            timers = {}
            for k in mine.tolist():
                timers.setdefault((int(speakers["hello"][k]), int(speakers["dead"][k])), {}).setdefault(
                    int(speakers["router_id"][k]), k)
            routers = {rid for by_router in timers.values() for rid in by_router}
            if len(timers) < 2:
                continue
            if all(len(by_router) == len(routers) for by_router in timers.values()):
                continue    # every router changed its timers the same way: no two disagree
            listing = [f"{', '.join(_v4(r) for r in sorted(by_router))} Hello {hello} s / dead {dead} s"
                       for (hello, dead), by_router in sorted(timers.items())]
            first = min(mine.tolist(), key=lambda k: speakers["first_ns"][k])
            link = self._link_text(first)
            msg = (f"OSPF Hello and dead intervals differ on {link}: {'; '.join(listing[:LISTED])}. Routers drop "
                   f"each other's Hellos (RFC 2328 section 10.5) and form no adjacency; configure the same "
                   f"intervals on every router of the link")
            frames = np.unique(speakers["first_frame"][mine])
            out.append(self.finding(
                "low", msg, identifier=f"hello-mismatch {link}",
                first_seen=int(speakers["first_ns"][mine].min()), last_seen=int(speakers["last_ns"][mine].max()),
                n=int(speakers["count"][mine].sum()), proto="OSPF",
                src_ip=ip_text(speakers["src_ip_hi"][first], speakers["src_ip_lo"][first]),
                evidence={"kind": "hello-mismatch", "timers": listing[:LISTED],
                          "evidence_frames": evidence_frames(frames)}))
        return out

    def _link_text(self, k: int) -> str:
        """The link of speaker row k: OSPFv2 network and area, OSPFv3 instance and area, and its VLAN."""
        speakers = self.speakers
        if speakers["version"][k] == 2:
            mask = ipaddress.IPv4Address(int(speakers["mask"][k]))
            network = ipaddress.IPv4Network(f"{_v4(speakers['network'][k])}/{mask}", strict=False)
            text = f"network {network} area {_v4(speakers['area'][k])}"
        else:
            text = f"OSPFv3 instance {int(speakers['network'][k])} area {_v4(speakers['area'][k])}"
        return text + (f" VLAN {int(speakers['vlan'][k])}" if speakers["vlan"][k] else "")

    def _mtu_mismatches(self) -> list[Finding]:
        dbds = self.dbds
        if len(dbds["key"]) == 0:
            return []
        receiver = self._router_of(dbds["dest_ip_hi"], dbds["dest_ip_lo"])
        group = _multicast(dbds["dest_ip_hi"], dbds["dest_ip_lo"])
        receiver = np.where(group & (receiver == 0), self._single_neighbor(
            dbds["router_id"], dbds["src_ip_hi"], dbds["src_ip_lo"]), receiver)
        sides: dict[tuple, dict[int, set]] = {}
        rows: dict[tuple, list[int]] = {}
        for k in np.flatnonzero((receiver != 0) & (dbds["mtu"] > 0)).tolist():
            sender = int(dbds["router_id"][k])
            pair = self._pair(sender, int(receiver[k]))
            sides.setdefault(pair, {}).setdefault(sender, set()).add(int(dbds["mtu"][k]))
            rows.setdefault(pair, []).append(k)
        out = []
        for pair, by_router in sides.items():
            if len(by_router) < 2 or len({mtu for mtus in by_router.values() for mtu in mtus}) < 2:
                continue
            mine = np.array(rows[pair])
            listing = [f"{_v4(rid)} {'/'.join(str(m) for m in sorted(mtus))}"
                       for rid, mtus in sorted(by_router.items())]
            msg = (f"OSPF neighbours {pair[0]} and {pair[1]} announce different interface MTUs in their Database "
                   f"Descriptions ({', '.join(listing)}): the router with the smaller MTU rejects the other's "
                   f"(RFC 2328 section 10.6) and the adjacency sticks in ExStart/Exchange; set the same MTU on "
                   f"both interfaces")
            first = mine[np.argmin(dbds["first_ns"][mine])]
            out.append(self.finding(
                "low", msg, identifier=f"mtu-mismatch {pair[0]} - {pair[1]}",
                first_seen=int(dbds["first_ns"][mine].min()), last_seen=int(dbds["last_ns"][mine].max()),
                n=int(dbds["count"][mine].sum()), proto="OSPF",
                src_ip=ip_text(dbds["src_ip_hi"][first], dbds["src_ip_lo"][first]),
                dest_ip=ip_text(dbds["dest_ip_hi"][first], dbds["dest_ip_lo"][first]),
                evidence={"kind": "mtu-mismatch", "mtus": listing,
                          "evidence_frames": evidence_frames(np.unique(dbds["first_frame"][mine]))}))
        return out

    # ---- report -----------------------------------------------------------
    def figures(self, findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
        if not findings:
            return []
        named = []
        for f in findings:
            for rid in [f.evidence.get("router_id"), f.evidence.get("adv_router"), *f.evidence.get("routers", [])]:
                if rid and rid not in named and _is_router_id(rid):
                    named.append(rid)
        routers = named[:FIGURE_ROUTERS]
        rates = self.rates
        stormy = rates["count"] > self.params["storm_pps"]
        storms = {}
        for rid in routers:
            mine = np.flatnonzero(stormy & (rates["router_id"] == int(ipaddress.IPv4Address(rid))))
            mine = mine[np.argsort(rates["second"][mine], kind="stable")]
            if len(mine):
                storms[rid] = (rates["second"][mine].copy(), rates["count"][mine].copy())
        return [RateFigure(routers, bins, self.params["storm_pps"], storms)]


def _is_router_id(text: str) -> bool:
    """A router id as findings write it (dotted quad), not a neighbour known only by a group address."""
    try:
        return not ipaddress.IPv4Address(text).is_multicast
    except ValueError:
        return False


class RateFigure(ReportFigure):
    """OSPF packets per second of each router the findings name (the others summed) over the capture, per bin of
    the report's axis; and, as points, the rule's own count of each second a router stormed in (the storm
    finding's peak is the highest of them, its packets their sum): one number, one source, whatever the bins."""

    title = "OSPF packets per second per router"

    def __init__(self, routers: list[str], bins: TimeBins, storm_pps: int,
                 storms: dict[str, tuple[np.ndarray, np.ndarray]] | None = None):
        self.routers = routers
        self.storm_pps = storm_pps
        self.storms = storms or {}
        self.ids = np.array([int(ipaddress.IPv4Address(r)) for r in routers], dtype=np.uint32)
        self.bins = bins
        self.packets = np.zeros((len(routers) + 1, bins.count), dtype=np.int64)

    def add(self, batch: PacketBatch) -> None:
        tab = app.table(batch, "ospf")
        ok = tab.valid("router_id")
        ts = batch["ts_ns"][tab["row"][ok]]
        rid = tab["router_id"][ok]
        named = np.zeros(len(rid), dtype=bool)
        for k, value in enumerate(self.ids):
            mine = rid == value
            self.packets[k] += self.bins.counts(ts[mine])
            named |= mine
        self.packets[-1] += self.bins.counts(ts[~named])

    def merge(self, other: RateFigure) -> RateFigure:
        """Counts per bin add up: the same bins in every copy."""
        self.packets += other.packets
        return self

    def draw(self, ax, flows) -> None:
        rates = self.packets / self.bins.width_s
        zero = self.bins.start_ns / NS
        for k, router in enumerate(self.routers):
            line, = ax.plot(self.bins.starts_s, rates[k], drawstyle="steps-post", lw=1,
                            label=f"{router} ({self.bins.width_s:g} s bins)")
            if router in self.storms:
                seconds, counts = self.storms[router]
                ax.plot(seconds + 0.5 - zero, counts, ls="none", marker=".", color=line.get_color(),
                        label=f"{router}: packets in each storm second")
        if rates[-1].any():
            ax.plot(self.bins.starts_s, rates[-1], drawstyle="steps-post", lw=1, color="#999", label="other routers")
        ax.axhline(self.storm_pps, color="#d33", lw=0.8, ls="--", label=f"storm above {self.storm_pps:,}/s")
        self.bins.time_axis(ax)
        ax.set_ylabel("OSPF packets/s")
        ax.legend(loc="upper left", fontsize="small")

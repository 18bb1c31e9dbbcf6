"""unicast-flood: a capture point that suddenly receives unicast frames meant for other hosts.

Seed 002: the core switches "got sick of it after a few minutes of both
yelling gratuitous ARP with the same MAC and started doing unicast flooding
of all those packets, which started causing havoc with other systems on
that network". A switch forwards a unicast frame to the one port where it
learnt the destination MAC as a source; a destination it has not heard from
within its ageing time (300 s: Linux net/bridge/br_private.h
`BR_DEFAULT_AGEING_TIME`, and most switches) is flooded to every port of
the VLAN. No peer detects this from packets (ntopng reads the switches'
forwarding tables over SNMP instead).

What the capture point shows: per (interface, VLAN, MAC) the last second
the MAC was seen as a source. A unicast frame whose destination was not a
source on its VLAN within the ageing time is *foreign*: this port would
not get it from a switch that knew where the destination is. Linux cooked
captures say so directly: packet type PACKET_OTHERHOST (3,
linux/if_packet.h) is a frame to another host received in promiscuous
mode; so does a pcapng record whose `epb_flags` reception type is
"promiscuous" (EPB_RX_PROMISCUOUS). Where either is present it replaces the
inference.

Per 1 s bin: frames, unicast frames received, foreign ones, and per (bin,
destination) the foreign frames with the first frame number, an address
and the TCP segments among them. An episode is a run of seconds whose
foreign share is at least min_share_ratio. It is a flood when it follows an
onset: a foreign share below onset_share_ratio over the baseline_s seconds
before it (a capture point that has always seen foreign frames is an
asymmetric route or a one-sided mirror, not a switch that lost its table):

- medium: at least min_foreign_frames foreign frames and min_duration_s
  seconds at the share;
- high: a foreign share of the episode of at least high_share_ratio, or a
  second of at least high_rate_fps foreign frames;
- critical: a finding (medium or more) of a rule in AFTER (two VRRP
  masters, a GARP fight) about a MAC among the episode's foreign
  destinations within CHAIN_SLACK_S: the seed 002 chain;
- near-misses: an episode without onset is info ("asymmetric routing or a
  one-sided capture point"), or nothing at all when more than
  ingress_only_ratio of the whole capture's frames are foreign (an
  ingress-only SPAN, where every frame is someone else's); destinations that
  were already foreign before the onset (silent receivers: printers, syslog
  or NetFlow collectors that never send) are not counted in the flood, and
  an episode that is only theirs is info.

State (mergeable: a capture cut in two and merged gives the one pass): an
open-addressing table (vlan, MAC) -> last second seen as a source, frames
sent and frames received, filled by a compiled kernel (`_classify`) with
no allocation per packet, bounded by MAX_MACS; the per-second counts; the
(second, destination) cells of foreign frames, bounded by MAX_CELLS. A
state does not know what was seen before its first frame: frames within
the ageing time of its start to destinations not yet seen as sources are
*pending*. Merging an earlier state A with a later state B resolves B's
pending cells with A's table: known when A saw the destination as a source
within the ageing time, foreign when A saw it earlier, still pending when A
never saw it and the cell is within the ageing time of A's start. Pending
frames left at the end are foreign (nothing came before the input), which
makes the first seconds of every capture foreign until both sides of the
conversations have spoken: the onset's baseline absorbs that.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..cpu import kernel
from ..decode.addr import mac_to_str
from ..detect.columns import ip_text
from ..detect.detector import AnalysisContext, Detector, LiveCounter, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.figure import ReportFigure, TimeBins
from ..detect.state import concat_tables, empty_table, take_rows
from ..findings import SEVERITY_RANK, Finding, iso_time
from ..rules import ALERT_SECONDS, COUNT, RATE_PPS, RATIO, Param, Range
from ..schema import (
    EPB_RX_MASK,
    EPB_RX_PROMISCUOUS,
    EPB_RX_SHIFT,
    L_DST_MAC,
    L_PKT_TYPE,
    L_SRC_MAC,
    L_TCP,
    L_VLAN,
    PacketBatch,
)
from ..units import NS

# the rules whose findings this one reads, by id (detect.detector.Detector.AFTER): no rule imports another
GARP_WAR = "garp-war"
VRRP_DUAL_MASTER = "vrrp-dual-master"

BIN_NS = NS                      # the spec's 1 s bins
AGEING_BINS = 300                # Linux net/bridge/br_private.h BR_DEFAULT_AGEING_TIME (300 * HZ), in bins
PACKET_OTHERHOST = 3             # linux/if_packet.h: to another host, received in promiscuous mode
PACKET_HOST, PACKET_OUTGOING = 0, 4
MAC_BITS = 48
VLAN_MASK = 0xFFF
# The interface is part of a MAC's key (a MAC learnt on one capture interface says nothing of another);
# interfaces from 15 on share the last slot of these 4 bits.
IFACE_SLOTS = 15
# The table of MACs: at most this many (vlan, MAC) keys. Beyond it new MACs are not learnt, and frames
# to them count as foreign, as a switch whose table is full floods them (the macof attack); how many
# were refused is in the evidence.
MAX_MACS = 1 << 20
# (second, destination) cells of foreign frames: at most this many, the smallest dropped beyond (the
# per-second counts stay exact; the destinations named lose the dropped frames).
MAX_CELLS = 1 << 18
# Seconds kept: a capture of three days at one second per bin; beyond, the latest seconds are dropped.
MAX_BINS = 1 << 18
# A batch spanning fewer seconds than this is counted per second by the kernel into a dense grid.
DENSE_SECONDS = 1 << 16
PARTS_MAX = 32                   # per-batch partial tables kept before they are folded into one
# A destination that sends at most this share of the frames it receives "rarely sends" (a silent receiver).
RARELY_SENDS_RATIO = 0.01
# Seconds below min_share_ratio that do not end an episode: a flood whose share dips for a second goes on.
BRIDGED_S = 2
MIN_BASELINE_FRAMES = 60         # frames the baseline must hold for a share below onset_share_ratio to mean anything
# A finding of a rule in AFTER chains with a flood within this many seconds of it: a switch reacts to a MAC
# fight within minutes (seed 002: "after a few minutes").
CHAIN_SLACK_S = 300
TOP_DESTINATIONS = 8             # destination MACs named per finding
LISTED = 4                       # of which named in the message
SERIES_AFTER_S = 30              # seconds of the per-second series kept after an episode (before: baseline_s)
SERIES_MAX = 600                 # points of that series

# what the kernel says of each frame
S_NONE, S_FRAME, S_KNOWN, S_PENDING, S_FOREIGN, S_PROVEN = range(6)
STATES = 6
# the columns of the MAC table: one row of 32 bytes per (vlan, MAC), the key's bits first
KEY, LAST_BIN, SENT, RECEIVED = range(4)
TABLE_COLUMNS = 4
NEVER = np.iinfo(np.int64).min // 2
GOLDEN = 0x9E3779B97F4A7C15

BIN_COLUMNS = {"bin": np.int64, "frames": np.int64, "unicast": np.int64, "foreign": np.int64, "pending": np.int64,
               "proven": np.int64}
CELL_COLUMNS = {"bin": np.int64, "key": np.uint64, "foreign": np.int64, "pending": np.int64, "tcp": np.int64,
                "tcp_pending": np.int64, "first_frame": np.int64, "ip_hi": np.uint64, "ip_lo": np.uint64,
                "has_ip": np.bool_}
CELL_SUMS = ("foreign", "pending", "tcp", "tcp_pending")


@njit
def _slot(table, key, mask):
    """The row of `key` (an int64 bit pattern), or the empty row where it would go (linear probing; key 0 marks
    an empty row)."""
    slot = ((np.uint64(key) * np.uint64(GOLDEN)) >> np.uint64(29)) & mask
    while table[slot, KEY] != 0 and table[slot, KEY] != key:
        slot = (slot + np.uint64(1)) & mask
    return slot


@njit
def _learn(table, key, mask, used, limit):
    """The row of `key`, inserted (last seen NEVER, no frames) if new and the table has room; -1 at the cap."""
    slot = _slot(table, key, mask)
    if table[slot, KEY] == key:
        return np.int64(slot), used
    if used >= limit:
        return np.int64(-1), used
    table[slot, KEY] = key
    table[slot, LAST_BIN] = NEVER
    table[slot, SENT] = 0
    table[slot, RECEIVED] = 0
    return np.int64(slot), used + 1


@kernel("(i8[::1], u4[::1], u8[::1], u8[::1], u2[::1], u2[::1], u2[::1], u4[::1], i8, "
        "i8[:, ::1], i8, i8, i8, u1[::1], i8[:, ::1], i8)")
def _classify(ts, layers, src, dst, vlan, iface, pkt_type, epb, start, table, used, limit, first_bin, status, grid,
              low):
    """Classify frames from `start` on (status S_*), count them per second and state in `grid` (row = second -
    `low`; an empty grid counts nothing) and learn their source MACs, in frame order, until the table is half
    full; returns (next frame, rows used, keys refused at the cap)."""
    size = len(table)
    mask = np.uint64(size - 1)
    refused = 0
    i = start
    n = len(ts)
    while i < n:
        if 2 * (used + 2) > size and used + 2 <= limit:
            break                      # Python grows the table and calls again from frame i
        lay = layers[i]
        b = ts[i] // 1_000_000_000
        link = np.uint64(0)
        if lay & L_VLAN:
            link = np.uint64(vlan[i] & VLAN_MASK) << np.uint64(MAC_BITS)
        link |= np.uint64(min(iface[i], IFACE_SLOTS)) << np.uint64(60)
        state = S_NONE
        direct = True
        rx = (epb[i] >> EPB_RX_SHIFT) & EPB_RX_MASK
        has_dst = (lay & L_DST_MAC) != 0 and dst[i] != 0 and ((dst[i] >> np.uint64(40)) & np.uint64(1)) == 0
        if lay & L_PKT_TYPE:
            kind = pkt_type[i]
            state = S_PROVEN if kind == PACKET_OTHERHOST else (S_KNOWN if kind == PACKET_HOST else S_FRAME)
        elif rx != 0:
            state = S_PROVEN if rx == EPB_RX_PROMISCUOUS else (S_KNOWN if rx == 1 else S_FRAME)
        elif has_dst:
            state, direct = S_KNOWN, False
        elif lay & (L_SRC_MAC | L_DST_MAC):
            state = S_FRAME
        if has_dst and state >= S_KNOWN:
            slot, used = _learn(table, np.int64(dst[i] | link), mask, used, limit)
            last = NEVER
            if slot >= 0:
                table[slot, RECEIVED] += 1
                last = table[slot, LAST_BIN]
            else:
                refused += 1
            if not direct:
                if last != NEVER:
                    if b - last > AGEING_BINS:
                        state = S_FOREIGN
                elif b <= first_bin + AGEING_BINS:
                    state = S_PENDING
                else:
                    state = S_FOREIGN
        status[i] = state
        if len(grid):
            grid[b - low, state] += 1
        if (lay & L_SRC_MAC) and src[i] != 0 and ((src[i] >> np.uint64(40)) & np.uint64(1)) == 0 \
                and not (lay & L_PKT_TYPE and pkt_type[i] == PACKET_OUTGOING):
            slot, used = _learn(table, np.int64(src[i] | link), mask, used, limit)
            if slot >= 0:
                table[slot, LAST_BIN] = max(table[slot, LAST_BIN], b)
                table[slot, SENT] += 1
            else:
                refused += 1
        i += 1
    return i, used, refused


@kernel("(i8[:, ::1], i8[:, ::1])")
def _insert_rows(table, rows):
    """Put rows (key first) into an empty table large enough for them (growth and merges)."""
    mask = np.uint64(len(table) - 1)
    for r in range(len(rows)):
        slot = _slot(table, rows[r, KEY], mask)
        for c in range(rows.shape[1]):
            table[slot, c] = rows[r, c]
    return 0


@kernel("(i8[:, ::1], i8[::1])")
def _last_seen(table, queries):
    """The last bin each queried key (int64 bit pattern) was seen as a source (NEVER if it was not)."""
    mask = np.uint64(len(table) - 1)
    out = np.full(len(queries), NEVER, dtype=np.int64)
    for r in range(len(queries)):
        slot = _slot(table, queries[r], mask)
        if table[slot, KEY] == queries[r] and queries[r] != 0:
            out[r] = table[slot, LAST_BIN]
    return out


def _fold_bins(parts: list[dict]) -> dict:
    """Per-second counts of several parts as one table, one row per second, in order."""
    rows = concat_tables(*parts)
    if len(rows["bin"]) == 0:
        return rows
    order = np.argsort(rows["bin"], kind="stable")
    rows = take_rows(rows, order)
    starts = np.flatnonzero(np.concatenate(([True], rows["bin"][1:] != rows["bin"][:-1])))
    out = {"bin": rows["bin"][starts]}
    for name in BIN_COLUMNS:
        if name != "bin":
            out[name] = np.add.reduceat(rows[name], starts)
    return out


def _fold_cells(parts: list[dict]) -> dict:
    """Cells of several parts as one table, one row per (second, destination); the earliest frame describes it."""
    rows = concat_tables(*parts)
    if len(rows["bin"]) == 0:
        return rows
    rows = take_rows(rows, np.lexsort((rows["first_frame"], rows["key"], rows["bin"])))
    starts = np.flatnonzero(np.concatenate(([True], (rows["bin"][1:] != rows["bin"][:-1])
                                            | (rows["key"][1:] != rows["key"][:-1]))))
    out = take_rows(rows, starts)
    for name in CELL_SUMS:
        out[name] = np.add.reduceat(rows[name], starts)
    return out


def _mac_of(key: int) -> str:
    return mac_to_str(int(key) & ((1 << MAC_BITS) - 1))


def _vlan_of(key: int) -> int:
    return (int(key) >> MAC_BITS) & VLAN_MASK


@register
class UnicastFlood(Detector):
    rule_id = "unicast-flood"
    EVE_SIGNATURE = (22, "Misc activity")
    # what its findings rest on beyond what it saw (detect.confidence): the MAC table's ageing, over time
    QUALITY_NEEDS = frozenset({"timing"})
    # the rules whose findings about a MAC among the flooded destinations make the flood critical
    AFTER = (GARP_WAR, VRRP_DUAL_MASTER)
    PARAMS = {
        "min_share_ratio": Param(float, 0.2, "share of a second's frames that are foreign for it to count", RATIO,
                                 "Lower catches floods diluted by a busy link, and also the ordinary trickle of "
                                 "frames to hosts that have been quiet for five minutes."),
        "min_foreign_frames": Param(int, 1000, "foreign frames of an episode for a medium finding", COUNT,
                                    "A few hundred frames to quiet hosts are what any switch floods after ageing; "
                                    "lower reports those."),
        "min_duration_s": Param(int, 3, "consecutive seconds at min_share_ratio for a medium finding", Range(1, 3600),
                                "A MAC table relearns within a second or two after a topology change; shorter "
                                "reports those relearning bursts."),
        "baseline_s": Param(int, 60, "seconds before an episode over which the foreign share must have been low",
                            Range(1, 3600),
                            "Longer proves the onset better but needs longer captures; shorter mistakes the first "
                            "seconds of a capture (when nobody has spoken yet) for a baseline."),
        "onset_share_ratio": Param(float, 0.05, "foreign share of the baseline below which an episode is an onset",
                                   RATIO, "Higher accepts a noisier baseline as quiet, and with it asymmetric "
                                          "routes that were there from the start."),
        "high_share_ratio": Param(float, 0.5, "foreign share of the episode from which it is high", RATIO,
                                  "At 0.5 most of what the port receives is someone else's traffic."),
        "high_rate_fps": Param(float, 10000.0, "foreign frames in one second from which the episode is high",
                               RATE_PPS, "Ten thousand frames a second flooded to every port of a VLAN load every "
                                         "host's NIC and CPU; lower calls smaller floods high."),
        "ingress_only_ratio": Param(float, 0.9, "foreign share of the whole capture from which it is taken for an "
                                                "ingress-only mirror and nothing is reported", RATIO,
                                    "A SPAN session of one direction shows every frame as foreign; lower hides more "
                                    "one-sided captures, higher reports them as info."),
    }
    ALERTS = {
        "suppress_s": Param(float, 60.0, "least seconds between two events about the flooding", ALERT_SECONDS,
                            "A flood lasts as long as its cause; shorter repeats it in alerts.jsonl."),
        "resolve_s": Param(float, 30.0, "seconds without a flooded second before the flooding is resolved",
                           ALERT_SECONDS, "A switch relearns within seconds once the cause stops; a short hold "
                                          "flaps with a flood that pauses."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.table = np.zeros((1024, TABLE_COLUMNS), dtype=np.int64)
        self.used = 0
        self.refused = 0                    # (vlan, MAC) keys not learnt at MAX_MACS
        self.first_bin: int | None = None   # the second of the first frame this state saw
        self.first: tuple[int, int] = (0, 0)  # that frame's time and number: which of two states came first
        self.bin_parts: list[dict] = []
        self.cell_parts: list[dict] = []
        self.cells_dropped = 0              # foreign frames whose cells were dropped at MAX_CELLS
        self.bins_dropped = 0

    # ---- update -----------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        n = len(batch)
        if n == 0:
            return
        layers = batch["layers"]
        if not (layers & np.uint32(L_SRC_MAC | L_DST_MAC | L_PKT_TYPE)).any():
            return                        # no link-layer addresses: raw IP links, nothing to judge
        ts = batch["ts_ns"]
        if self.first_bin is None:
            self.first_bin = int(ts.min() // BIN_NS)
            self.first = (int(ts.min()), int(batch["frame"].min()))
        status = np.empty(n, dtype=np.uint8)
        low, high = int(ts.min()) // BIN_NS, int(ts.max()) // BIN_NS
        # per second and state, counted by the kernel; wild timestamps are counted afterwards, sparsely
        dense = high - low < DENSE_SECONDS
        grid = np.zeros((high - low + 1 if dense else 0, STATES), dtype=np.int64)
        args = (ts, layers, batch["src_mac"], batch["dest_mac"], batch["vlan_outer"], batch["iface"],
                batch["pkt_type"], batch["epb_flags"])
        done = 0
        while done < n:
            done, self.used, refused = _classify(*args, done, self.table, self.used, MAX_MACS, self.first_bin,
                                                 status, grid, low)
            self.refused += refused
            if done < n:
                self._grow()
        self._count(batch, status, grid, low)

    def _grow(self) -> None:
        self.table = self._table(self.table[self.table[:, KEY] != 0], 2 * len(self.table))

    @staticmethod
    def _table(rows: np.ndarray, size: int) -> np.ndarray:
        table = np.zeros((size, TABLE_COLUMNS), dtype=np.int64)
        _insert_rows(table, np.ascontiguousarray(rows))
        return table

    def _count(self, batch: PacketBatch, status: np.ndarray, grid: np.ndarray, low: int) -> None:
        if len(grid):
            present = np.flatnonzero(grid[:, S_FRAME:].sum(axis=1))
            grid, present_bins = grid[present], present + low
        else:
            counted = status != S_NONE
            present_bins, inverse = np.unique(batch["ts_ns"][counted] // BIN_NS, return_inverse=True)
            grid = np.zeros((len(present_bins), STATES), dtype=np.int64)
            np.add.at(grid, (inverse, status[counted]), 1)
        if len(present_bins) == 0:
            return
        self.bin_parts.append({
            "bin": present_bins.astype(np.int64), "frames": grid[:, S_FRAME:].sum(axis=1).astype(np.int64),
            "unicast": grid[:, S_KNOWN:].sum(axis=1).astype(np.int64),
            "foreign": (grid[:, S_FOREIGN] + grid[:, S_PROVEN]).astype(np.int64),
            "pending": grid[:, S_PENDING].astype(np.int64), "proven": grid[:, S_PROVEN].astype(np.int64)})
        if grid[:, S_PENDING:].any():
            rows = np.flatnonzero(status >= S_PENDING)
            self.cell_parts.append(self._cells(batch, status, batch["ts_ns"][rows] // BIN_NS, rows))
        if len(self.bin_parts) > PARTS_MAX or len(self.cell_parts) > PARTS_MAX:
            self._fold()

    def _cells(self, batch: PacketBatch, status, bins, rows) -> dict:
        """One batch's foreign and pending frames as (second, destination) cells."""
        layers = batch["layers"][rows]
        has_dst = (layers & np.uint32(L_DST_MAC)) != 0
        vlan = np.where((layers & np.uint32(L_VLAN)) != 0, batch["vlan_outer"][rows] & VLAN_MASK, 0)
        link = (vlan.astype(np.uint64) << np.uint64(MAC_BITS)) | (
            np.minimum(batch["iface"][rows], IFACE_SLOTS).astype(np.uint64) << np.uint64(60))
        # SLL records have no destination address: their cells have key 0, "destination not recorded"
        key = np.where(has_dst, batch["dest_mac"][rows] | link, np.uint64(0)).astype(np.uint64)
        has_ip = batch["ip_version"][rows] != 0
        state = status[rows]
        tcp = (layers & np.uint32(L_TCP)) != 0
        part = {"bin": bins.astype(np.int64), "key": key,
                "foreign": ((state == S_FOREIGN) | (state == S_PROVEN)).astype(np.int64),
                "pending": (state == S_PENDING).astype(np.int64),
                "tcp": (tcp & (state != S_PENDING)).astype(np.int64),
                "tcp_pending": (tcp & (state == S_PENDING)).astype(np.int64),
                "first_frame": batch["frame"][rows].astype(np.int64),
                "ip_hi": np.where(has_ip, batch["dest_ip_hi"][rows], 0).astype(np.uint64),
                "ip_lo": np.where(has_ip, batch["dest_ip_lo"][rows], 0).astype(np.uint64), "has_ip": has_ip}
        return _fold_cells([part])

    def _fold(self) -> None:
        if self.bin_parts:
            bins = _fold_bins(self.bin_parts)
            extra = len(bins["bin"]) - MAX_BINS
            if extra > 0:
                self.bins_dropped += int(bins["frames"][MAX_BINS:].sum())
                bins = take_rows(bins, slice(0, MAX_BINS))
            self.bin_parts = [bins]
        if self.cell_parts:
            cells = _fold_cells(self.cell_parts)
            extra = len(cells["bin"]) - MAX_CELLS
            if extra > 0:
                weight = cells["foreign"] + cells["pending"]
                keep = np.sort(np.argsort(-weight, kind="stable")[:MAX_CELLS])
                dropped = np.ones(len(weight), dtype=bool)
                dropped[keep] = False
                self.cells_dropped += int(weight[dropped].sum())
                cells = take_rows(cells, keep)
            self.cell_parts = [cells]

    def _bins(self) -> dict:
        self._fold()
        return self.bin_parts[0] if self.bin_parts else empty_table(BIN_COLUMNS)

    def _cells_table(self) -> dict:
        self._fold()
        return self.cell_parts[0] if self.cell_parts else empty_table(CELL_COLUMNS)

    def _rows(self) -> tuple[np.ndarray, np.ndarray]:
        rows = self.table[self.table[:, KEY] != 0]
        return rows[:, KEY].view(np.uint64), rows

    # ---- merge ------------------------------------------------------------
    def merge(self, other: Detector) -> Detector:
        check_merge(self, other)
        if other.first_bin is None:
            return self
        if self.first_bin is None:
            self.__dict__.update({k: v for k, v in other.__dict__.items() if k not in ("rule", "site", "params")})
            return self
        early, late = (self, other) if self.first <= other.first else (other, self)
        bins, cells = early._bins(), early._cells_table()
        late_bins, late_cells = dict(late._bins()), dict(late._cells_table())
        late_cells = self._resolve(early, late_cells, late_bins)
        keys, values = np.concatenate([early._rows()[0], late._rows()[0]]), np.concatenate(
            [early._rows()[1], late._rows()[1]])
        refused = early.refused + late.refused
        if len(keys):
            order = np.argsort(keys, kind="stable")
            keys, values = keys[order], values[order]
            starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
            merged = np.empty((len(starts), TABLE_COLUMNS), dtype=np.int64)
            merged[:, KEY] = keys[starts].view(np.int64)
            merged[:, LAST_BIN] = np.maximum.reduceat(values[:, LAST_BIN], starts)
            merged[:, SENT] = np.add.reduceat(values[:, SENT], starts)
            merged[:, RECEIVED] = np.add.reduceat(values[:, RECEIVED], starts)
            keys = keys[starts]
            if len(keys) > MAX_MACS:
                keep = np.sort(np.argsort(-merged[:, LAST_BIN], kind="stable")[:MAX_MACS])
                refused += len(keys) - MAX_MACS
                keys, merged = keys[keep], merged[keep]
            values = merged
        size = 1024
        while size < 2 * (len(keys) + 2):
            size <<= 1
        self.table = self._table(values, size)
        self.used, self.refused = len(keys), refused
        self.first_bin, self.first = early.first_bin, early.first
        self.cells_dropped = early.cells_dropped + late.cells_dropped
        self.bins_dropped = early.bins_dropped + late.bins_dropped
        self.bin_parts = [b for b in (bins, late_bins) if len(b["bin"])]
        self.cell_parts = [c for c in (cells, late_cells) if len(c["bin"])]
        self._fold()
        return self

    @staticmethod
    def _resolve(early: UnicastFlood, cells: dict, bins: dict) -> dict:
        """The later state's pending cells judged by what the earlier one saw: known (dropped), foreign, or still
        pending; its per-second counts moved along."""
        pending = np.flatnonzero(cells["pending"] > 0)
        if len(pending) == 0:
            return cells
        cells = {name: col.copy() for name, col in cells.items()}
        bins.update({name: bins[name].copy() for name in ("foreign", "pending")})
        last = _last_seen(early.table, np.ascontiguousarray(cells["key"][pending]).view(np.int64))
        cell_bin = cells["bin"][pending]
        seen = last != NEVER
        known = seen & (cell_bin - last <= AGEING_BINS)
        foreign = (seen & ~known) | (~seen & (cell_bin > early.first_bin + AGEING_BINS))
        count = cells["pending"][pending]
        at = np.searchsorted(bins["bin"], cell_bin)
        np.subtract.at(bins["pending"], at, np.where(known | foreign, count, 0))
        np.add.at(bins["foreign"], at, np.where(foreign, count, 0))
        cells["foreign"][pending] += np.where(foreign, count, 0)
        cells["pending"][pending] = np.where(known | foreign, 0, count)
        cells["tcp"][pending] += np.where(foreign, cells["tcp_pending"][pending], 0)
        cells["tcp_pending"][pending] = np.where(known | foreign, 0, cells["tcp_pending"][pending])
        # frames to a known destination leave the cells: a cell of those only goes
        gone = np.zeros(len(cells["bin"]), dtype=bool)
        gone[pending] = (cells["foreign"][pending] == 0) & (cells["pending"][pending] == 0)
        return take_rows(cells, ~gone)

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        bins = self._bins()
        if len(bins["bin"]) == 0:
            return []
        p = self.params
        frames = bins["frames"]
        # nothing came before the input: what is still pending is foreign
        foreign = bins["foreign"] + bins["pending"]
        total = int(frames.sum())
        if total == 0 or foreign.sum() > p["ingress_only_ratio"] * total:
            return []       # an ingress-only mirror or a one-sided capture: every frame is someone else's
        cells = self._cells_table()
        out, quiet = [], []
        for start, end in self._episodes(bins["bin"], frames, foreign):
            judged = self._judge(ctx, bins, foreign, cells, start, end)
            if judged is None:
                continue
            (out if judged.severity != "info" else quiet).append(judged)
        # one info finding about the flooding without onset is enough: the largest
        quiet.sort(key=lambda f: -f.n)
        return out + quiet[:1]

    def _episodes(self, seconds, frames, foreign) -> list[tuple[int, int]]:
        """Runs (first, last index) of seconds whose foreign share is at least min_share_ratio, a gap of up to
        BRIDGED_S seconds below it joined (a flood that dips for a second is one flood)."""
        hot = np.flatnonzero((frames > 0) & (foreign >= self.params["min_share_ratio"] * frames))
        if len(hot) == 0:
            return []
        breaks = np.flatnonzero(seconds[hot[1:]] - seconds[hot[:-1]] > BRIDGED_S + 1)
        firsts = np.concatenate(([0], breaks + 1))
        lasts = np.concatenate((breaks, [len(hot) - 1]))
        return list(zip(hot[firsts].tolist(), hot[lasts].tolist()))

    def _judge(self, ctx, bins, foreign, cells, start, end) -> Finding | None:
        p = self.params
        seconds, frames = bins["bin"], bins["frames"]
        onset_bin = int(seconds[start])
        base = slice(int(np.searchsorted(seconds, onset_bin - p["baseline_s"])), start)
        base_frames, base_foreign = int(frames[base].sum()), int(foreign[base].sum())
        covered = self.first_bin is not None and self.first_bin <= onset_bin - p["baseline_s"]
        onset = covered and base_frames >= MIN_BASELINE_FRAMES and base_foreign < p["onset_share_ratio"] * base_frames
        in_run = (cells["bin"] >= onset_bin) & (cells["bin"] <= int(seconds[end]))
        run_frames = frames[start:end + 1]
        raw = foreign[start:end + 1]
        run_seconds = seconds[start:end + 1]
        hot_raw = _longest(raw >= p["min_share_ratio"] * run_frames, run_seconds)
        if hot_raw < p["min_duration_s"] or int(raw.sum()) < p["min_foreign_frames"]:
            return None                        # too short or too small to be anything
        # after an onset, destinations that were foreign before it and rarely send are silent receivers
        before = self._silent(cells, onset_bin) if onset else np.zeros(0, dtype=np.uint64)
        silent_cell = in_run & np.isin(cells["key"], before)
        silent = np.zeros(end - start + 1, dtype=np.int64)
        np.add.at(silent, np.searchsorted(run_seconds, cells["bin"][silent_cell]),
                  cells["foreign"][silent_cell] + cells["pending"][silent_cell])
        flood = raw - silent
        longest = _longest(flood >= p["min_share_ratio"] * run_frames, run_seconds)
        count = int(flood.sum())
        share = count / max(int(run_frames.sum()), 1)
        peak = int(flood.max())
        severity, why = "info", "no onset"
        if onset and longest >= p["min_duration_s"] and count >= p["min_foreign_frames"]:
            severity = "high" if share >= p["high_share_ratio"] or peak >= p["high_rate_fps"] else "medium"
            why = ""
        elif onset:
            why = "silent"
        tops = self._destinations(cells, in_run, before)
        chained = self._chained(ctx, cells, in_run, onset_bin, int(seconds[end])) if severity != "info" else []
        if chained:
            severity = "critical"
        counted = flood
        if why == "silent":
            count, counted = int(raw.sum()), raw
        return self._write(severity, why, bins, foreign, start, end, count, share, peak, longest,
                           (base_frames, base_foreign, covered), tops, chained, cells, in_run, before, counted)

    def _silent(self, cells, onset_bin: int) -> np.ndarray:
        """Destinations that received foreign frames before `onset_bin` and send at most RARELY_SENDS_RATIO of
        what they receive (sorted keys): a printer or a collector, flooded all along."""
        keys = np.unique(cells["key"][(cells["bin"] < onset_bin) & (cells["key"] != 0)])
        if len(keys) == 0:
            return keys
        table_keys, table_values = self._rows()
        if len(table_keys) == 0:
            return keys
        order = np.argsort(table_keys)
        at = np.minimum(np.searchsorted(table_keys[order], keys), len(order) - 1)
        found = table_keys[order][at] == keys
        sent = np.where(found, table_values[order][at, SENT], 0)
        received = np.where(found, table_values[order][at, RECEIVED], 0)
        return keys[sent <= RARELY_SENDS_RATIO * received]

    def _destinations(self, cells, in_run, before) -> list[dict]:
        """The destinations with the most foreign frames in the episode, with what the MAC table knows of them."""
        rows = np.flatnonzero(in_run)
        if len(rows) == 0:
            return []
        keys = cells["key"][rows]
        weight = cells["foreign"][rows] + cells["pending"][rows]
        order = np.lexsort((cells["first_frame"][rows], keys))
        keys, rows, weight = keys[order], rows[order], weight[order]
        starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
        frames = np.add.reduceat(weight, starts)
        tcp = np.add.reduceat(cells["tcp"][rows] + cells["tcp_pending"][rows], starts)
        top = np.argsort(-frames, kind="stable")[:TOP_DESTINATIONS]
        table_keys, table_values = self._rows()
        local = self.site.given("local_networks")
        out = []
        for g in top.tolist():
            key, first = int(keys[starts[g]]), rows[starts[g]]
            item = {"frames": int(frames[g]), "tcp_segments": int(tcp[g])}
            if key == 0:
                item["mac"] = None
                item["note"] = "destination not recorded (Linux cooked capture: packet type PACKET_OTHERHOST)"
            else:
                item["mac"], item["vlan"] = _mac_of(key), _vlan_of(key)
                at = np.flatnonzero(table_keys == np.uint64(key))
                sent = int(table_values[at[0], SENT]) if len(at) else 0
                item["frames_sent_by_it"] = sent
                item["frames_received_by_it"] = int(table_values[at[0], RECEIVED]) if len(at) else 0
                item["one_sided_tcp"] = bool(tcp[g] > 0 and sent == 0)
                item["silent_receiver"] = bool(np.isin(key, before))
            if cells["has_ip"][first]:
                address = ip_text(cells["ip_hi"][first], cells["ip_lo"][first])
                item["ip"] = address
                if local:
                    item["local"] = bool(self.site.is_local(address))
            out.append(item)
        return out

    def _chained(self, ctx, cells, in_run, first_bin, last_bin) -> list[dict]:
        """Findings (medium or more) of the rules in AFTER naming a MAC among the flooded destinations, within
        CHAIN_SLACK_S of the episode."""
        flooded = {_mac_of(k) for k in np.unique(cells["key"][in_run]).tolist() if k}
        lo, hi = (first_bin - CHAIN_SLACK_S) * BIN_NS, (last_bin + 1 + CHAIN_SLACK_S) * BIN_NS
        out = []
        for rule in self.AFTER:
            for f in ctx.findings.get(rule, []):
                if f.rank < SEVERITY_RANK["medium"] or f.last_seen < lo or f.first_seen > hi:
                    continue
                macs = {f.src_mac, f.dest_mac, *f.evidence.get("macs", [])} & flooded
                if macs:
                    out.append({"rule": f.rule, "identifier": f.identifier, "severity": f.severity,
                                "macs": sorted(macs), "msg": f.msg if len(f.msg) <= 300 else f.msg[:297] + "..."})
        return out

    def _write(self, severity, why, bins, foreign, start, end, count, share, peak, longest, base, tops, chained,
               cells, in_run, before, counted) -> Finding:
        p = self.params
        seconds, frames = bins["bin"], bins["frames"]
        base_frames, base_foreign, covered = base
        t0, t1 = int(seconds[start]) * BIN_NS, (int(seconds[end]) + 1) * BIN_NS - 1
        duration = int(seconds[end] - seconds[start]) + 1
        base_share = base_foreign / base_frames if base_frames else None
        proven = int(bins["proven"][start:end + 1].sum())
        named = [t for t in tops if t.get("mac") and not t.get("silent_receiver")][:LISTED]
        dest_text = ", ".join(f"{t['mac']}" + (f" ({t['ip']})" if "ip" in t else "") + f" {t['frames']:,}"
                              for t in named)
        proof = (f"; {proven:,} of them marked as received for another host by the capture itself (Linux "
                 f"PACKET_OTHERHOST or pcapng promiscuous reception)" if proven else "")
        if not covered:
            before_text = f"a capture that began {(t0 - (self.first_bin or 0) * BIN_NS) // BIN_NS:,} s before"
        elif base_frames < MIN_BASELINE_FRAMES:
            before_text = f"only {base_frames:,} frames in the {p['baseline_s']} s before"
        else:
            before_text = f"a foreign share of {base_share:.1%} in the {p['baseline_s']} s before"
        if severity == "info":
            if why == "silent":
                silent = [t for t in tops if t.get("silent_receiver")][:LISTED]
                msg = (f"{count:,} frames of the {duration} s from {iso_time(t0)} go to MACs this capture point "
                       f"does not hear from, after {before_text}; but these destinations received such frames "
                       f"before and send next to nothing themselves (silent receivers: "
                       + ", ".join(t["mac"] for t in silent) + "): a switch floods the traffic of a host that "
                       "never sends, which is no switch losing its MAC table")
            else:
                offnet = [t for t in tops if t.get("local") is False]
                offnet_frames = sum(t["frames"] for t in offnet)
                routed = (" Their destination addresses are off-net (site local_networks): frames to a router whose "
                          "own frames take another path." if offnet_frames * 2 >= sum(t["frames"] for t in tops)
                          and offnet else "")
                msg = (f"{share:.0%} of the frames of the {duration} s from {iso_time(t0)} go to MACs this capture "
                       f"point has not seen as sources ({dest_text or 'destination not recorded'}), after "
                       f"{before_text}: no quiet baseline, no onset, so asymmetric routing (return traffic on "
                       "another path) or a mirror of "
                       "one direction, not a switch that started flooding." + routed)
        else:
            msg = (f"Unicast flooding from {iso_time(t0)} for {duration} s ({longest} s in a row at "
                   f"{p['min_share_ratio']:.0%} or more): {count:,} frames to MACs this capture point had not "
                   f"seen as sources on their VLAN within {AGEING_BINS} s (the switch ageing time), {share:.0%} of "
                   f"the frames, up to {peak:,}/s, after {before_text}{proof}. Top destinations: "
                   f"{dest_text or 'not recorded'}. A switch floods a frame it cannot place to every port of the "
                   f"VLAN: its MAC table lost these hosts (table overflow, a MAC moving between ports, a topology "
                   f"change) or their traffic stopped coming back through it")
            one_sided = [t["mac"] for t in tops if t.get("one_sided_tcp")]
            if one_sided:
                msg += f". TCP toward {', '.join(one_sided[:LISTED])} is one-sided: nothing from them crosses this port"
            if chained:
                msg += ". Chained with " + ", ".join(f"{c['rule']} {c['severity']} '{c['identifier']}' on "
                                                     f"{'/'.join(c['macs'])}" for c in chained[:LISTED]) + \
                    " (the seed 002 chain: two devices claiming one MAC until the switches flood)"
        in_frames = np.sort(cells["first_frame"][in_run])
        lo = int(np.searchsorted(seconds, int(seconds[start]) - p["baseline_s"]))
        hi = int(np.searchsorted(seconds, int(seconds[end]) + SERIES_AFTER_S, side="right"))
        hi = min(hi, lo + SERIES_MAX)
        # the frames per second the message's count and peak are of (`counted`: silent receivers' left out
        # unless they are what it is about)
        flooded = np.zeros(hi - lo, dtype=np.int64)
        inside = np.arange(max(start, lo), min(end + 1, hi))
        flooded[inside - lo] = counted[inside - start]
        evidence = {
            "onset": iso_time(t0), "duration_s": duration, "longest_run_s": longest, "foreign_frames": count,
            "foreign_share_ratio": round(share, 4), "peak_foreign_fps": peak,
            "baseline_foreign_share_ratio": None if base_share is None else round(base_share, 4),
            "baseline_frames": base_frames, "proven_foreign_frames": proven,
            "destinations": tops, "macs": [t["mac"] for t in tops if t.get("mac")],
            "series": {"second": (seconds[lo:hi] - seconds[start]).tolist(), "frames": frames[lo:hi].tolist(),
                       "foreign": foreign[lo:hi].tolist(), "flooded": flooded.tolist()},
            "evidence_frames": evidence_frames(in_frames),
        }
        if chained:
            evidence["chained"] = chained
        if self.refused:
            evidence["macs_not_learnt"] = self.refused
        if self.cells_dropped:
            evidence["foreign_frames_not_attributed"] = self.cells_dropped
        fields = {"place": "the switched segment the capture point sees"}
        if named:
            fields = {"dest_mac": named[0]["mac"]}
            if "ip" in named[0]:
                fields["dest_ip"] = named[0]["ip"]
        return self.finding(severity, msg, identifier="unicast flooding", first_seen=t0, last_seen=t1, n=count,
                            evidence=evidence, **fields)

    # ---- report and live --------------------------------------------------
    def figures(self, findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
        shown = [f for f in findings if f.evidence.get("series")]
        return [FloodFigure(shown[0])] if shown else []

    def live_counters(self) -> list[LiveCounter]:
        return [LiveCounter("frames_for_other_hosts", "Frames the capture itself marks as received for another host "
                            "(Linux PACKET_OTHERHOST, pcapng promiscuous reception): 1, and the others with a "
                            "link-layer address: 0", "other_host", 2, _other_host)]


def _other_host(batch: PacketBatch) -> np.ndarray:
    layers = batch["layers"]
    linked = (layers & np.uint32(L_SRC_MAC | L_DST_MAC | L_PKT_TYPE)) != 0
    proven = (((layers & np.uint32(L_PKT_TYPE)) != 0) & (batch["pkt_type"] == PACKET_OTHERHOST)) | (
        ((batch["epb_flags"] >> np.uint32(EPB_RX_SHIFT)) & np.uint32(EPB_RX_MASK)) == EPB_RX_PROMISCUOUS)
    proven &= linked
    return np.array([int(linked.sum() - proven.sum()), int(proven.sum())], dtype=np.int64)


def _longest(mask: np.ndarray, seconds: np.ndarray) -> int:
    """The most consecutive seconds where `mask` holds."""
    best = run = 0
    previous = None
    for value, second in zip(mask.tolist(), seconds.tolist()):
        run = (run + 1 if previous is not None and second == previous + 1 else 1) if value else 0
        previous = second
        best = max(best, run)
    return best


class FloodFigure(ReportFigure):
    """Foreign share and frame rate per second around the flooding episode."""

    needs_batches = False

    title = "Unicast flooding: foreign share and frames per second"

    def __init__(self, finding: Finding):
        series = finding.evidence["series"]
        self.seconds = np.asarray(series["second"], dtype=np.int64)
        self.frames = np.asarray(series["frames"], dtype=np.int64)
        self.foreign = np.asarray(series["foreign"], dtype=np.int64)
        self.flooded = np.asarray(series.get("flooded", ()), dtype=np.int64)
        self.label = f"seconds after the onset, {finding.evidence['onset']}"

    def add(self, batch: PacketBatch) -> None:
        """Nothing: the series is in the finding's evidence."""

    def merge(self, other: FloodFigure) -> FloodFigure:
        """Nothing to take: the series is in the finding's evidence."""
        return self

    def draw(self, ax, flows) -> None:
        share = self.foreign / np.maximum(self.frames, 1)
        ax.step(self.seconds, share, where="post", color="C3", label="foreign share")
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("foreign share")
        ax.set_xlabel(self.label)
        rate = ax.twinx()
        rate.step(self.seconds, self.frames, where="post", color="C0", alpha=0.6, label="frames/s")
        if len(self.flooded) == len(self.seconds):
            rate.step(self.seconds, self.flooded, where="post", color="C1", label="flooded frames/s")
        rate.set_ylabel("frames per second")
        ax.legend(loc="upper left", fontsize="small")
        rate.legend(loc="upper right", fontsize="small")

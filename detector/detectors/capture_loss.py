"""capture-loss: the capture point itself lost packets (a mirror port that could not keep up).

Two signs, as Zeek and ntopng read them:

- ACK gaps (Zeek scripts/policy/misc/capture-loss.zeek): a TCP receiver's
  acknowledgement that advances over bytes the capture never held means the
  bytes crossed the wire but not the capture. The flow table's TCP pass
  (flows/kernel.py, Zeek's reassembler `AckReceived`) marks every packet's
  ack event and gap event (PacketBatch.flow_events); this rule counts them
  per time bin. A bin's gaps over acks at or above Zeek's `too_much_loss`
  (0.1) is lost traffic (medium), when the bin holds enough acks to say so;
  high at high_loss_ratio, of the events or of the bytes (the bytes the
  acks passed over that the capture never held, over those and the bytes
  captured: each ack counts alike in the events, and a storage initiator's
  64 KB burst acked at once is one of them among the acks of small
  commands). Gaps in too few acks to judge are low when there are at least
  FEW_ACKS_MIN_GAPS of them at the loss ratio (a short download missing
  several of its segments), else info, as are gaps below that ratio (once
  a gap is counted the finding stays, however many acks follow: a watch's
  alert does not come and go with the traffic).

  Connections picked up mid-stream (their opening SYN not in the capture)
  count from the capture's first MID_STREAM_SETTLE_S seconds on: what their
  first acks pass over may have been sent before the capture started. Zeek
  counts no gap in a partial connection (report_gaps_for_partial is off),
  which leaves long-lived sessions out, storage above all, open long before
  any capture; the flow pass marks their acks all the same (kernel
  EV_MID_STREAM) where the capture holds payload of the end acknowledged.
  Left out: connections seen in one direction only (no acks of the bytes
  seen, or acks of bytes none of which the capture holds: a one-sided
  capture, not loss; the TCP pass counts no events there), and bytes on the
  wire whose segments the capture cut at its snapshot length (caplen below
  the wire length: not captured by design). Segmentation offload (TSO/GSO,
  IPv4 total length 0) is read as the stack wrote it (the decoder takes the
  frame's length), so the large segments are captured bytes.
- Drop counters: what the capture point says it dropped, drops over
  drops + received packets (ntopng check_definitions/interface/too_many_drops.lua):
  a pcapng file's interface statistics (isb_ifdrop, isb_osdrop) and, in
  `detector watch`, the capture socket's counters (detector_capture_drops_total).

Other findings of the run whose packets passed during lossy bins (or in a
capture whose counters say it dropped too much) get the loss ratio in their
`capture_loss_ratio` field: their counts are lower bounds (annotate()).

A partition of a capture that does not begin it (a cluster's) picks up the
connections open at its start mid-stream: its flow pass counts no events
for them, where one pass, which saw them open, counts their acks and gaps.
So such a partition keeps the events of connections it picked up without
their SYN aside (its head: per connection, kernel slot and bin, as the
pass marked them, PacketBatch.flow_cuts), and the merge settles them: where
the flow table's merge joined a connection exactly across the cut, what it
redid says what one pass makes of their events (joined(), flows.merge.CutJoins);
the others count as the partition saw them once the state merged into one
that begins the capture. At most ASIDE_ROWS_MAX rows are kept aside; the
connections beyond count as the partition saw them, and `unsettled`
counts them with those the merge could not settle (its residual, beside
the flow table's inexact_joins): after the log's overflow in roles the two
runs read differently, and a connection whose later part opened with a SYN
retransmitted across the cut (not set aside: such a part counts a
connection it saw open at once).

In `watch` the window's flow tables are cut into slices, whose merges join
no flows: a connection counts in the slice where it opened and is
mid-stream (left out) in the later ones, so live ACK gaps are measured on
the connections opened within each slice.

Which seconds are the capture's first is known once the partitions are
merged: each partition keeps the events of connections picked up
mid-stream in its own first MID_STREAM_SETTLE_S seconds per second (and
so do its events set aside), and table() leaves out those of the capture's
first seconds. Events a partition counts as it saw them (past
ASIDE_ROWS_MAX, or a watch's slices, each of which picks up the connections
open at its start) leave out its own first seconds.

State: sparse per-bin counts (packets, ack events, gap events, gaps over
snapped bytes, events of mid-stream connections judged and left out), the
per-second counts of the first seconds, and the frames of the first gap
events: all merge by addition and union; and the events set aside, above.
"""
from __future__ import annotations

import numpy as np

from ..detect.columns import endpoint, flow_time_ns, ip_text
from ..detect.confidence import Basis
from ..detect.detector import (
    MIN_RATE_WINDOW_S,
    AnalysisContext,
    CaptureDrops,
    Detector,
    LiveCounter,
    check_merge,
    register,
)
from ..detect.figure import ReportFigure, TimeBins
from ..detect.grouping import member
from ..detect.state import concat_tables, empty_table, take_rows
from ..findings import Finding, iso_time
from ..flows.kernel import EV_ACK, EV_GAP, EV_MID_STREAM, EV_NONE, EV_SNAPPED, SLOT_OVER, SLOT_SEGMENT
from ..flows.merge import UNDECIDED, CutJoins
from ..flows.view import FLOW_PROTO_NAMES
from ..rules import ALERT_SECONDS, COUNT, RATE_PPS, RATIO, Param, Range
from ..schema import PROTO_TCP, PacketBatch
from ..units import NS, plural

# per-bin counters, the columns of the state: packets; ack events, gap events and snapped gap events of connections
# whose opening the capture holds, and those of connections picked up mid-stream (judged alike, said apart); ack
# events of connections picked up mid-stream in the capture's first seconds (left out)
C_PACKETS, C_ACKS, C_GAPS, C_SNAPPED, C_MID_STREAM, C_MID_ACKS, C_MID_GAPS = range(7)
COUNTERS = 7
# Ours: connections picked up mid-stream count from the capture's first whole seconds on. When a capture starts, the
# first acks of the connections already open may cover bytes that passed before it started (bytes in flight, data
# the receiver held out of order and acknowledges at once when a retransmission fills the hole it waited for), and
# losses from before it are recovered over a few retransmission timeouts (RFC 6298: 1 s, doubling). Long-lived
# sessions (storage, replication, database links), which open long before any capture starts and may carry most of
# its bytes, are judged after that; connections short enough to live inside it are not. Longer leaves short
# captures of long-lived sessions unjudged; shorter counts the artifacts of the start as loss.
MID_STREAM_SETTLE_S = 5
# the early mid-stream counters, per second: ack events, gap events, snapped gap events
E_ACKS, E_GAPS, E_SNAPPED = range(3)
EARLY_COUNTERS = 3
# Ack events, in multiples of min_acks, from which a loss ratio is a firm figure (high confidence); from min_acks
# it is judged at medium, below it at low. Fewer multiples would call a ratio of a few hundred acks certain.
SURE_ACKS = 10
# Ours: a capture with too few acks to judge (min_acks) whose gaps are at least these many, at the loss ratio or
# above, lost traffic all the same: low (a short HTTP download missing five of its segments). One or two gaps are
# a segment or two the capture missed: a fact (info). They must pass over bytes of ends whose payload the capture
# holds: an ack of an end it holds no payload of says nothing of loss in so few (the end's segments are ones the
# decoder cannot read as TCP, IPComp-compressed while the acks are not, or the ack is forged or fuzzed); with
# min_acks acks the ratio says it, as Zeek counts them.
FEW_ACKS_MIN_GAPS = 3
# Per-batch partial tables kept before they are folded into one (bounded work per batch, few folds).
PARTS_MAX = 32
# Frames of the first gap events kept for the evidence pcap (the acks that passed over lost bytes).
GAP_FRAMES_MAX = 64
# Bins listed in a finding's evidence (the lossiest first), and flows named.
BINS_LISTED = 32
FLOWS_NAMED = 5
# Decimal places of ratios in findings.
ROUND = 4
# where the loss happened: in the capturing, not on the network (the Where of its incidents)
CAPTURE_POINT = "the capture point"
# Rows of events set aside by a partition that does not begin the capture (module docstring; some 30 bytes each):
# one per head packet of a connection picked up mid-stream (kernel.HEAD_MAX) and per bin and segment after it, and
# one per frame of an event that may settle as a gap (at most GAP_FRAMES_MAX per connection and segment). Past it,
# the connections that started last count as the partition saw them. (A partition of a million packets of the
# bench capture sets aside some 15,000.)
ASIDE_ROWS_MAX = 1 << 16
# events set aside, summed per row of these keys, and the frames of the events that may settle as gaps
# (`sec`: the packet's second when it lies in the first MID_STREAM_SETTLE_S seconds of its partition, else -1: the
# capture's own first seconds are known only once the partitions are merged)
ASIDE_KEYS = ("flow", "slot", "bin", "sec", "own", "kind")
ASIDE_COLUMNS = {"flow": np.int64, "slot": np.int8, "bin": np.int64, "sec": np.int64, "own": np.int8, "kind": np.int8,
                 "count": np.int64}
FRAME_COLUMNS = {"flow": np.int64, "slot": np.int8, "frame": np.int64, "sec": np.int64, "own": np.int8,
                 "kind": np.int8}


def _fold_aside(parts: list[dict]) -> dict[str, np.ndarray]:
    """Rows of events set aside as one table, summed per ASIDE_KEYS, ordered by them."""
    rows = concat_tables(*parts, columns=ASIDE_COLUMNS)
    if not len(rows["flow"]):
        return rows
    order = np.lexsort([rows[key] for key in reversed(ASIDE_KEYS)])
    rows = take_rows(rows, order)
    new = np.zeros(len(order), dtype=bool)
    new[0] = True
    for key in ASIDE_KEYS:
        new[1:] |= rows[key][1:] != rows[key][:-1]
    starts = np.flatnonzero(new)
    out = {key: rows[key][starts] for key in ASIDE_KEYS}
    out["count"] = np.add.reduceat(rows["count"], starts)
    return out


def _fold_frames(parts: list[dict]) -> dict[str, np.ndarray]:
    """Frames of events set aside that may settle as gaps: the first GAP_FRAMES_MAX of each connection's slot
    (whose events settle alike), enough for the first GAP_FRAMES_MAX gap frames of the run."""
    rows = concat_tables(*parts, columns=FRAME_COLUMNS)
    order = np.lexsort((rows["frame"], rows["slot"], rows["flow"]))
    rows = take_rows(rows, order)
    if not len(order):
        return rows
    group = np.concatenate(([True], (rows["flow"][1:] != rows["flow"][:-1]) | (rows["slot"][1:] != rows["slot"][:-1])))
    starts = np.flatnonzero(group)
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.append(starts, len(order))))
    return take_rows(rows, rank < GAP_FRAMES_MAX)


def _settled(slot: np.ndarray, own: np.ndarray, kind: np.ndarray, verdict: np.ndarray) -> np.ndarray:
    """The events one pass gives packets set aside (their slot, own event and kind as their partition's pass marked
    them), by the merge's verdict on their slot (flows.merge.CutJoins)."""
    own, kind, verdict = own.astype(np.int64), kind.astype(np.int64), verdict.astype(np.int64)
    segment = (slot >= SLOT_SEGMENT) & (slot < SLOT_OVER)
    counted = np.where((verdict >= 0) & (kind != EV_NONE), kind + verdict, np.where(verdict == UNDECIDED, own,
                                                                                       EV_NONE))
    unmarked = np.where(own >= EV_MID_STREAM, own - EV_MID_STREAM, own)
    after = np.where(verdict == 1, unmarked, own)
    return np.where(slot < SLOT_SEGMENT, verdict, np.where(segment, counted, after)).astype(np.int8)


def _event_columns(codes: np.ndarray, left_out: np.ndarray | None = None) -> list[tuple[int, np.ndarray]]:
    """Which events (EV_*) each counter of the per-bin table counts: (column, rows); `left_out` marks events of
    connections picked up mid-stream that count as left out (C_MID_STREAM) rather than judged."""
    mid = codes >= EV_MID_STREAM
    judged_mid = mid if left_out is None else mid & ~left_out
    plain = np.where(mid, codes - EV_MID_STREAM, codes)
    return [(C_ACKS, (codes != EV_NONE) & ~mid), (C_GAPS, codes == EV_GAP), (C_SNAPPED, plain == EV_SNAPPED),
            (C_MID_ACKS, judged_mid), (C_MID_GAPS, judged_mid & (plain == EV_GAP)),
            (C_MID_STREAM, mid & ~judged_mid)]


def _event_part(bins: np.ndarray, codes: np.ndarray, counts: np.ndarray,
                left_out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A partial (bins, counts[bin, COUNTERS]) table of events (EV_*, `counts` of each) without their packets."""
    distinct, at = np.unique(bins, return_inverse=True)
    table = np.zeros((len(distinct), COUNTERS), dtype=np.int64)
    for column, rows in _event_columns(codes, left_out):
        table[:, column] = np.bincount(at[rows], weights=counts[rows], minlength=len(distinct)).astype(np.int64)
    return distinct.astype(np.int64), table


def _early_part(secs: np.ndarray, codes: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A partial (seconds, counts[second, EARLY_COUNTERS]) table of events of connections picked up mid-stream."""
    distinct, at = np.unique(secs, return_inverse=True)
    table = np.zeros((len(distinct), EARLY_COUNTERS), dtype=np.int64)
    plain = codes - EV_MID_STREAM
    for column, rows in ((E_ACKS, plain >= EV_ACK), (E_GAPS, plain == EV_GAP), (E_SNAPPED, plain == EV_SNAPPED)):
        table[:, column] = np.bincount(at[rows], weights=counts[rows], minlength=len(distinct)).astype(np.int64)
    return distinct.astype(np.int64), table


def _first_frames(kept: np.ndarray, new: np.ndarray) -> np.ndarray:
    """The first GAP_FRAMES_MAX distinct frames of `kept` and `new`, sorted."""
    return np.unique(np.concatenate([kept, np.asarray(new, dtype=np.int64)]))[:GAP_FRAMES_MAX]


def _fold(parts: list[tuple[np.ndarray, np.ndarray]], width: int = COUNTERS) -> tuple[np.ndarray, np.ndarray]:
    """Partial (bins, counts[bin, width]) tables as one, bins sorted and distinct."""
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros((0, width), dtype=np.int64)
    bins = np.concatenate([p[0] for p in parts])
    counts = np.concatenate([p[1] for p in parts])
    distinct, at = np.unique(bins, return_inverse=True)
    folded = np.zeros((len(distinct), width), dtype=np.int64)
    np.add.at(folded, at, counts)
    return distinct, folded


@register
class CaptureLoss(Detector):
    rule_id = "capture-loss"
    EVE_SIGNATURE = (3, "Misc activity")
    # what its findings rest on beyond what it saw (detect.confidence): its loss per bin of time
    QUALITY_NEEDS = frozenset({"timing"})
    PARAMS = {
        "bin_s": Param(float, 60.0, "time bin over which ack gaps are counted", Range(1.0, 86400.0),
                       "Shorter bins catch a short burst of loss at a traffic peak but hold fewer acks each (see "
                       "min_acks); longer ones average a peak's loss away."),
        "min_acks": Param(int, 100, "ack events a bin (or the whole capture) needs before its loss is judged "
                                    "(with fewer, several gaps at the loss ratio are low)", COUNT,
                          "Ours: with fewer, one lost segment in a short capture reads as a large ratio. Lower "
                          "judges small captures; higher needs busier bins."),
        "loss_ratio": Param(float, 0.1, "gap events over ack events from which the loss is reported (medium)",
                            RATIO,
                            "Zeek's CaptureLoss::too_much_loss (0.1). Lower reports the loss a busy but healthy "
                            "capture point has; higher waits for heavy loss."),
        "high_loss_ratio": Param(float, 0.5, "gap events over ack events, or bytes never captured over bytes acked "
                                             "or captured, from which the finding is high", RATIO,
                                 "Ours: half the acked data missing means the capture shows a fraction of the "
                                 "traffic; every count of the run is then far below the truth."),
        "drop_ratio": Param(float, 0.05, "dropped over received packets of the capture point from which its drop "
                                         "counters are reported (medium)", RATIO,
                            "ntopng's too_many_drops default (5 %). Lower reports any drop burst."),
        "min_drop_rate_ppm": Param(float, 100.0, "packets per minute the capture point must receive for its drops "
                                                 "to count", RATE_PPS,
                                   "ntopng's: an idle interface that drops 2 of 10 packets is not overloaded."),
    }
    ALERTS = {
        "suppress_s": Param(float, 300.0, "least seconds between two events about the capture's loss",
                            ALERT_SECONDS, "Loss at traffic peaks comes and goes; shorter repeats itself."),
        "resolve_s": Param(float, 120.0, "seconds without loss before the alert is resolved", ALERT_SECONDS,
                           "Two bins: a single quiet bin between peaks should not resolve it."),
    }
    needs_fingerprint = False     # reads no frame hashes: the engine may skip them

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.bin_ns = int(self.params["bin_s"] * NS)
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []
        # the first GAP_FRAMES_MAX gap events' frames: of connections whose opening the capture holds, and of those
        # picked up mid-stream after their partition's first seconds
        self.gap_frames = np.zeros(0, dtype=np.int64)
        self.mid_gap_frames = np.zeros(0, dtype=np.int64)
        # the events of connections picked up mid-stream in the first MID_STREAM_SETTLE_S seconds of the partition,
        # per second, and their first gap frames per second (second, frame): which of them lie in the capture's own
        # first seconds (left out) is known once the partitions are merged (table())
        self.early_parts: list[tuple[np.ndarray, np.ndarray]] = []
        self.early_frames = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        self.first_ns: int | None = None        # the earliest packet folded in (merged: the capture's)
        self.early_end_s: int | None = None     # the second the partition's own first seconds end at
        # set by findings() for annotate(): the spans (start, end ns) of lossy bins with their gaps and acks,
        # and the drop ratio of counters that fired
        self._lossy = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
        self._drop_ratio = 0.0
        # set by findings() for figures(): the capture's first and last packet, which bound its bins' rates
        self._covered_by: tuple[int | None, int | None] = (None, None)
        # a partition that does not begin the capture (its first frame is not 1): the events of connections it
        # picked up without their SYN, set aside until the merge settles them (module docstring)
        self.begins_capture: bool | None = None
        self.aside: list[dict] = []
        self.aside_frames: list[dict] = []
        self.released = np.zeros(0, dtype=np.int64)     # connections past ASIDE_ROWS_MAX, counted at once (sorted)
        self.unsettled = 0      # connections whose events count as their partition saw them, not as one pass

    # ---- state ------------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        n = len(batch)
        if n == 0:
            return
        ts = batch["ts_ns"]
        first = int(ts.min())
        lo, hi = first // self.bin_ns, int(ts.max()) // self.bin_ns
        self.first_ns = first if self.first_ns is None else min(self.first_ns, first)
        if self.early_end_s is None:
            self.early_end_s = first // NS + MID_STREAM_SETTLE_S
        events = batch.flow_events     # None where no flow table saw the batch: packets are counted, no acks
        if self.begins_capture is None:
            self.begins_capture = int(batch["frame"][0]) == 1
        if events is not None and batch.flow_cuts is not None and not self.begins_capture:
            events = self._set_aside(batch, events)
        if events is not None and first < self.early_end_s * NS:
            events = self._keep_early(batch, events)
        if lo == hi:        # the common case, a batch inside one bin: counts without a pass per packet in Python
            row = np.zeros((1, COUNTERS), dtype=np.int64)
            row[0, C_PACKETS] = n
            if events is not None:
                codes = events[events != EV_NONE]
                for column, rows in _event_columns(codes):
                    row[0, column] = np.count_nonzero(rows)
            part = (np.array([lo], dtype=np.int64), row)
        else:
            part_bins, at = np.unique(ts // self.bin_ns, return_inverse=True)
            width = len(part_bins)
            table = np.zeros((width, COUNTERS), dtype=np.int64)
            table[:, C_PACKETS] = np.bincount(at, minlength=width)
            if events is not None:
                rows = np.flatnonzero(events)
                codes, where = events[rows], at[rows]
                for column, chosen in _event_columns(codes):
                    table[:, column] = np.bincount(where[chosen], minlength=width)
            part = (part_bins.astype(np.int64), table)
        self.parts.append(part)
        if len(self.parts) > PARTS_MAX:
            self.parts = [_fold(self.parts)]
        if part[1][:, C_GAPS].any() and len(self.gap_frames) < GAP_FRAMES_MAX:
            gaps = np.flatnonzero(events == EV_GAP)[:GAP_FRAMES_MAX]
            self.gap_frames = _first_frames(self.gap_frames, batch["frame"][gaps])
        if part[1][:, C_MID_GAPS].any() and len(self.mid_gap_frames) < GAP_FRAMES_MAX:
            gaps = np.flatnonzero(events == EV_GAP + EV_MID_STREAM)[:GAP_FRAMES_MAX]
            self.mid_gap_frames = _first_frames(self.mid_gap_frames, batch["frame"][gaps])

    def _keep_early(self, batch: PacketBatch, events: np.ndarray) -> np.ndarray:
        """Keep apart, per second, the events of connections picked up mid-stream in the partition's first
        seconds; returns the batch's events without them."""
        ts = batch["ts_ns"]
        rows = np.flatnonzero((events >= EV_MID_STREAM) & (ts < self.early_end_s * NS))
        if not len(rows):
            return events
        secs, codes = ts[rows] // NS, events[rows].astype(np.int64)
        self._count_early(secs, codes, np.ones(len(rows), np.int64), batch["frame"][rows])
        events = events.copy()
        events[rows] = EV_NONE
        return events

    def _count_early(self, secs: np.ndarray, codes: np.ndarray, counts: np.ndarray, frames: np.ndarray) -> None:
        """Count events of connections picked up mid-stream in their partition's first seconds, per second; keep the
        frames of their gaps (`frames`, one per event, or of the gap events alone), the first GAP_FRAMES_MAX per
        second."""
        self.early_parts.append(_early_part(secs, codes, counts))
        if len(self.early_parts) > PARTS_MAX:
            self.early_parts = [_fold(self.early_parts, EARLY_COUNTERS)]
        gaps = codes == EV_GAP + EV_MID_STREAM
        if len(frames) == len(codes) and gaps.any():
            self._keep_early_frames(secs[gaps], frames[gaps])

    def _keep_early_frames(self, secs: np.ndarray, frames: np.ndarray) -> None:
        secs = np.concatenate([self.early_frames[0], secs.astype(np.int64)])
        frames = np.concatenate([self.early_frames[1], frames.astype(np.int64)])
        order = np.lexsort((frames, secs))
        secs, frames = secs[order], frames[order]
        keep = np.ones(len(order), bool)
        keep[1:] = (secs[1:] != secs[:-1]) | (frames[1:] != frames[:-1])
        secs, frames = secs[keep], frames[keep]
        starts = np.flatnonzero(np.concatenate(([True], secs[1:] != secs[:-1]))) if len(secs) else np.zeros(0, int)
        rank = np.arange(len(secs)) - np.repeat(starts, np.diff(np.append(starts, len(secs))))
        self.early_frames = (secs[rank < GAP_FRAMES_MAX], frames[rank < GAP_FRAMES_MAX])

    def _set_aside(self, batch: PacketBatch, events: np.ndarray) -> np.ndarray:
        """Set aside the events of the batch's packets of connections picked up without their SYN; returns the
        batch's events without them."""
        flows, slots, kinds = batch.flow_cuts
        rows = np.flatnonzero(slots >= 0)
        if len(self.released) and len(rows):
            rows = rows[~member(flows[rows], self.released)]
        if not len(rows):
            return events
        own = events[rows]
        events = events.copy()
        events[rows] = EV_NONE
        flow, slot, kind = flows[rows], slots[rows], kinds[rows]
        ts = batch["ts_ns"][rows]
        sec = np.where(ts < self.early_end_s * NS, ts // NS, -1)
        self.aside.append({"flow": flow, "slot": slot, "bin": ts // self.bin_ns, "sec": sec, "own": own,
                           "kind": kind, "count": np.ones(len(rows), np.int64)})
        # the events that may settle as gaps: any head packet's, a segment's gaps, the own gaps after the overflow
        maybe = (slot < SLOT_SEGMENT) | ((slot < SLOT_OVER) & (kind == EV_GAP)) | \
            ((slot == SLOT_OVER) & ((own == EV_GAP) | (own == EV_GAP + EV_MID_STREAM)))
        if maybe.any():
            self.aside_frames.append({"flow": flow[maybe], "slot": slot[maybe], "frame": batch["frame"][rows][maybe],
                                      "sec": sec[maybe], "own": own[maybe], "kind": kind[maybe]})
        if len(self.aside) > PARTS_MAX:
            self._fold_aside()
        return events

    def _fold_aside(self) -> None:
        """The events set aside folded, within ASIDE_ROWS_MAX rows (of counts and of frames): past it, the
        connections that started last count as their partition saw them."""
        rows = _fold_aside(self.aside)
        frames = _fold_frames(self.aside_frames)
        if len(rows["flow"]) + len(frames["flow"]) > ASIDE_ROWS_MAX:
            flows = np.union1d(rows["flow"], frames["flow"])        # by connection, its first frame
            held = np.bincount(np.searchsorted(flows, rows["flow"]), minlength=len(flows)) + \
                np.bincount(np.searchsorted(flows, frames["flow"]), minlength=len(flows))
            gone = flows[np.cumsum(held) > ASIDE_ROWS_MAX]
            over = np.isin(rows["flow"], gone)
            self.unsettled += len(gone)
            self.released = np.union1d(self.released, gone)
            over_frames = np.isin(frames["flow"], gone)
            self._count_settled(take_rows(rows, over), rows["own"][over], take_rows(frames, over_frames),
                                frames["own"][over_frames], own_view=True)
            rows, frames = take_rows(rows, ~over), take_rows(frames, ~over_frames)
        self.aside, self.aside_frames = [rows], [frames]

    def _count_settled(self, rows: dict, codes: np.ndarray, frames: dict, frame_codes: np.ndarray,
                       own_view: bool = False) -> None:
        """Count the events set aside `rows` as `codes`, and the `frames` that are gaps as `frame_codes`. Events of
        connections picked up mid-stream in their partition's first seconds wait for the capture's first second
        (table()); as the partition saw them (`own_view`: its own pickup) they are left out."""
        codes, frame_codes = codes.astype(np.int64), frame_codes.astype(np.int64)
        early = (rows["sec"] >= 0) & (codes >= EV_MID_STREAM)
        if len(codes):
            if early.any() and not own_view:
                self._count_early(rows["sec"][early], codes[early], rows["count"][early], np.zeros(0, np.int64))
            late = ~early if not own_view else np.ones(len(codes), bool)
            if late.any():
                self.parts.append(_event_part(rows["bin"][late], codes[late], rows["count"][late],
                                              left_out=early[late]))
                if len(self.parts) > PARTS_MAX:
                    self.parts = [_fold(self.parts)]
        self.gap_frames = _first_frames(self.gap_frames, frames["frame"][frame_codes == EV_GAP])
        mid_gaps = frame_codes == EV_GAP + EV_MID_STREAM
        early_gaps = mid_gaps & (frames["sec"] >= 0)
        if early_gaps.any() and not own_view:
            self._keep_early_frames(frames["sec"][early_gaps], frames["frame"][early_gaps])
        self.mid_gap_frames = _first_frames(self.mid_gap_frames, frames["frame"][mid_gaps & ~early_gaps])

    def merge(self, other: CaptureLoss) -> CaptureLoss:
        check_merge(self, other)
        self.parts.extend(other.parts)
        if len(self.parts) > PARTS_MAX:
            self.parts = [_fold(self.parts)]
        self.early_parts.extend(other.early_parts)
        if len(self.early_parts) > PARTS_MAX:
            self.early_parts = [_fold(self.early_parts, EARLY_COUNTERS)]
        self.gap_frames = _first_frames(self.gap_frames, other.gap_frames)
        self.mid_gap_frames = _first_frames(self.mid_gap_frames, other.mid_gap_frames)
        self._keep_early_frames(*other.early_frames)
        if other.first_ns is not None:
            self.first_ns = other.first_ns if self.first_ns is None else min(self.first_ns, other.first_ns)
        if self.early_end_s is None:
            self.early_end_s = other.early_end_s
        if self.begins_capture is None:
            self.begins_capture = other.begins_capture
        if other.aside:
            self.aside.extend(other.aside)
            self.aside_frames.extend(other.aside_frames)
            self._fold_aside()
        self.released = np.union1d(self.released, other.released)
        self.unsettled += other.unsettled
        return self

    def joined(self, joins: CutJoins) -> None:
        """Settle the events set aside of the connections the flow table's merge joined across the cut; in a state
        that begins the capture, count the others as their partition saw them (nothing comes before)."""
        if self.aside:
            self._fold_aside()
        rows, frames = (self.aside[0], self.aside_frames[0]) if self.aside else \
            (empty_table(ASIDE_COLUMNS), empty_table(FRAME_COLUMNS))
        # joined connections whose later part opened with a SYN (one retransmitted across the cut), counted at once
        self.unsettled += int(np.count_nonzero(~np.isin(joins.frames, np.union1d(rows["flow"], self.released))))
        if len(joins.frames) and len(rows["flow"]):
            for table in (rows, frames):
                at = np.minimum(np.searchsorted(joins.frames, table["flow"]), len(joins.frames) - 1)
                table["join"] = np.where(joins.frames[at] == table["flow"], at, -1)
            hit, frame_hit = rows["join"] >= 0, frames["join"] >= 0
            verdicts = joins.verdicts[rows["join"][hit], rows["slot"][hit]]
            codes = _settled(rows["slot"][hit], rows["own"][hit], rows["kind"][hit], verdicts)
            frame_codes = _settled(frames["slot"][frame_hit], frames["own"][frame_hit], frames["kind"][frame_hit],
                                   joins.verdicts[frames["join"][frame_hit], frames["slot"][frame_hit]])
            # what the merge could not say: after the log's overflow, or a segment of acks it cannot tell apart
            slot = rows["slot"][hit]
            undecided = ((slot == SLOT_OVER) & (verdicts < 0)) | \
                ((slot >= SLOT_SEGMENT) & (slot < SLOT_OVER) & (verdicts == UNDECIDED))
            self.unsettled += len(np.unique(rows["flow"][hit][undecided]))
            self._count_settled(take_rows(rows, hit), codes, take_rows(frames, frame_hit), frame_codes)
            rows, frames = take_rows(rows, ~hit), take_rows(frames, ~frame_hit)
            del rows["join"], frames["join"]
        self.aside, self.aside_frames = ([rows], [frames]) if len(rows["flow"]) or len(frames["flow"]) else ([], [])
        if self.begins_capture:
            self._count_aside()

    def _count_aside(self) -> None:
        """Count every event set aside as its partition saw it."""
        if self.aside:
            rows, frames = _fold_aside(self.aside), _fold_frames(self.aside_frames)
            self._count_settled(rows, rows["own"], frames, frames["own"], own_view=True)
        self.aside, self.aside_frames = [], []

    def table(self) -> tuple[np.ndarray, np.ndarray]:
        """(bins, counts[bin, C_*]) of everything folded in: bin b starts at b * bin_s. Events still set aside
        (no merge settled them) count as their partition saw them; those of connections picked up mid-stream in
        the capture's first MID_STREAM_SETTLE_S seconds are left out (C_MID_STREAM)."""
        self._count_aside()
        self.parts = [_fold(self.parts)]
        return _fold([self.parts[0], self._early_table()])

    def _early_table(self) -> tuple[np.ndarray, np.ndarray]:
        """The events kept per second (the partitions' first seconds) as per-bin counts: left out in the capture's
        own first seconds, judged after them."""
        secs, counts = _fold(self.early_parts, EARLY_COUNTERS)
        self.early_parts = [(secs, counts)] if len(secs) else []
        table = np.zeros((len(secs), COUNTERS), dtype=np.int64)
        if len(secs):
            settled = secs >= self._settled_from_s()
            table[:, C_MID_STREAM] = np.where(settled, 0, counts[:, E_ACKS])
            table[:, C_MID_ACKS] = np.where(settled, counts[:, E_ACKS], 0)
            table[:, C_MID_GAPS] = np.where(settled, counts[:, E_GAPS], 0)
            table[:, C_SNAPPED] = np.where(settled, counts[:, E_SNAPPED], 0)
        return (secs * NS) // self.bin_ns, table

    def _settled_from_s(self) -> int:
        """The second from which connections picked up mid-stream are judged: the capture's first second plus
        MID_STREAM_SETTLE_S."""
        return (self.first_ns // NS if self.first_ns is not None else 0) + MID_STREAM_SETTLE_S

    def evidence_gap_frames(self) -> list[int]:
        """The frames of the first GAP_FRAMES_MAX gap events judged: of connections whose opening the capture holds,
        and of those picked up mid-stream after the capture's first seconds."""
        secs, frames = self.early_frames
        settled = frames[secs >= self._settled_from_s()]
        frames = _first_frames(_first_frames(self.gap_frames, self.mid_gap_frames), settled)
        return frames.tolist()
    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        self._lossy = (np.zeros(0, np.int64),) * 4
        self._drop_ratio = 0.0
        out = []
        gap_finding = self._ack_gaps(ctx)
        if gap_finding is not None:
            out.append(gap_finding)
        for drops in ctx.drops:
            finding = self._drops(drops, ctx)
            if finding is not None:
                out.append(finding)
        return out

    def _ack_gaps(self, ctx: AnalysisContext) -> Finding | None:
        p = self.params
        bins, counts = self.table()
        acks, gaps = _acks_and_gaps(counts)
        total_acks, total_gaps = int(acks.sum()), int(gaps.sum())
        if total_acks == 0:
            return None
        ratio = gaps / np.maximum(acks, 1)
        judged = acks >= p["min_acks"]
        lossy = judged & (ratio >= p["loss_ratio"])
        overall = total_gaps / total_acks
        overall_judged = total_acks >= p["min_acks"]
        first_ns, last_ns = ctx.stats.first_ns, ctx.stats.last_ns
        starts, ends = _covered(bins, self.bin_ns, first_ns, last_ns)
        self._covered_by = (first_ns, last_ns)
        if lossy.any():
            picked = np.flatnonzero(lossy)
        elif overall_judged and overall >= p["loss_ratio"]:
            picked = np.arange(len(bins))      # spread thin over bins each too small to judge
        else:
            picked = None
        byte_ratio = None
        if picked is None:
            if total_gaps == 0:
                return None
            # too few acks anywhere to judge, yet several gaps at the loss ratio over bytes of ends the capture holds
            # payload of: lost traffic, how much unknown
            few = not overall_judged and total_gaps >= FEW_ACKS_MIN_GAPS and overall >= p["loss_ratio"] and \
                _gaps_over_seen_ends(ctx) + int(counts[:, C_MID_GAPS].sum()) >= FEW_ACKS_MIN_GAPS
            severity = "low" if few else "info"
            span = np.arange(len(bins))
        else:
            worst = max(float(ratio[picked][acks[picked] >= p["min_acks"]].max(initial=0.0)),
                        overall if overall_judged else 0.0, float(gaps[picked].sum() / max(acks[picked].sum(), 1)))
            # bytes cut by the snapshot length are gaps in the flow table's bytes (Zeek's): no byte measure there
            if not counts[picked, C_SNAPPED].any():
                byte_ratio = _byte_loss(ctx, int(starts[picked[0]]), int(ends[picked[-1]]))
            severity = "high" if max(worst, byte_ratio or 0.0) >= p["high_loss_ratio"] else "medium"
            span = picked
            self._lossy = (starts[picked], ends[picked], gaps[picked], acks[picked])
        return self._gap_finding(severity, span, bins, counts, starts, ends, judged, byte_ratio, ctx)

    def _gap_finding(self, severity, span, bins, counts, starts, ends, judged, byte_ratio, ctx) -> Finding:
        p = self.params
        acks, gaps = _acks_and_gaps(counts)
        packets = counts[:, C_PACKETS]
        total_acks, total_gaps = int(acks.sum()), int(gaps.sum())
        span_acks, span_gaps = int(acks[span].sum()), int(gaps[span].sum())
        mid_acks, mid_gaps = int(counts[span, C_MID_ACKS].sum()), int(counts[span, C_MID_GAPS].sum())
        ratio = gaps / np.maximum(acks, 1)
        bin_s = p["bin_s"]
        rates = _rates(packets, starts, ends)
        snapped, mid = int(counts[:, C_SNAPPED].sum()), int(counts[:, C_MID_STREAM].sum())
        lossy = severity not in ("info", "low")
        if severity == "low":
            msg = (f"the capture lost traffic: {total_gaps:,} of {total_acks:,} TCP ack events "
                   f"({total_gaps / total_acks:.1%}) acknowledged bytes it never held, from "
                   f"{iso_time(int(starts[span[0]]))} to {iso_time(int(ends[span[-1]]))}; too few acks to say how "
                   f"much (min_acks {p['min_acks']:,})")
        elif severity == "info":
            if total_acks < p["min_acks"] and not judged.any():
                msg = (f"{total_gaps:,} of {total_acks:,} TCP ack events advanced over bytes the capture never "
                       f"held: too few acks to judge the capture's loss (min_acks {p['min_acks']:,})")
            else:
                msg = (f"{total_gaps:,} of {total_acks:,} TCP ack events ({total_gaps / total_acks:.1%}) advanced "
                       f"over bytes the capture never held: below the {p['loss_ratio']:.0%} from which the capture "
                       f"is taken to lose traffic")
        else:
            worst = span[np.argmax(np.where(judged[span], ratio[span], -1.0))]
            rate = rates[worst]
            msg = (f"the capture lost traffic: {span_gaps:,} of {span_acks:,} TCP ack events "
                   f"({span_gaps / max(span_acks, 1):.1%}) acknowledged bytes it never held, in {len(span)} of "
                   f"{plural(len(bins), 'bin')} of {bin_s:g} s from {iso_time(int(starts[span[0]]))} to "
                   f"{iso_time(int(ends[span[-1]]))}; worst bin {iso_time(int(starts[worst]))}: "
                   f"{ratio[worst]:.1%} at {rate:,.0f} packets/s (all bins: median {np.median(rates):,.0f}, peak "
                   f"{rates.max():,.0f} packets/s)")
            if byte_ratio is not None:
                msg += f"; {byte_ratio:.1%} of the bytes acknowledged or captured over that time were never captured"
            msg += "; every other finding's counts over that time are lower bounds"
        if mid_acks and severity != "info":
            msg += (f"; {mid_gaps:,} of the gaps in {mid_acks:,} ack events of connections picked up mid-stream "
                    f"(after the capture's first {MID_STREAM_SETTLE_S} s)")
        if snapped:
            msg += (f"; {plural(snapped, 'more gap')} over bytes cut by the snapshot length are not counted as loss")
        if mid:
            msg += (f"; {plural(mid, 'ack event')} of connections picked up mid-stream in the capture's first "
                    f"{MID_STREAM_SETTLE_S} s left out")
        order = span[np.argsort(-np.where(judged[span], ratio[span], -1.0), kind="stable")][:BINS_LISTED]
        order = np.sort(order)
        evidence = {
            "loss_ratio": round(span_gaps / max(span_acks, 1), ROUND),
            "overall_loss_ratio": round(total_gaps / total_acks, ROUND),
            "byte_loss_ratio": round(byte_ratio, ROUND) if byte_ratio is not None else None,
            "ack_events": total_acks, "gap_events": total_gaps, "snapped_gap_events": snapped,
            "mid_stream_ack_events": mid, "mid_stream_judged_ack_events": int(counts[:, C_MID_ACKS].sum()),
            "mid_stream_judged_gap_events": int(counts[:, C_MID_GAPS].sum()), "bin_s": bin_s,
            "min_acks": p["min_acks"], "lossy_bins": len(span) if lossy else 0, "bins": len(bins),
            "first_lossy": iso_time(int(starts[span[0]])) if lossy else None,
            "last_lossy": iso_time(int(ends[span[-1]])) if lossy else None,
            "per_bin": [{"start": iso_time(int(starts[i])), "packets": int(packets[i]),
                         "packet_rate_pps": round(float(rates[i]), 1), "ack_events": int(acks[i]),
                         "gap_events": int(gaps[i]), "loss_ratio": round(float(ratio[i]), ROUND)}
                        for i in order.tolist()],
            "evidence_frames": self.evidence_gap_frames(),
        }
        if total_gaps:
            evidence["worst_flows"] = _worst_flows(ctx)
        first, last = int(starts[span[0]]), int(ends[span[-1]])
        # how much the ratio rests on: min_acks is where Zeek starts to judge, ten times that a firm figure
        basis = [Basis.sample(total_acks, p["min_acks"], SURE_ACKS * p["min_acks"], "TCP ack events judged")]
        return self.finding(severity, msg, identifier="tcp ack gaps", first_seen=first, last_seen=last,
                            n=span_gaps if lossy else total_gaps, place=CAPTURE_POINT,
                            evidence={k: v for k, v in evidence.items() if v is not None}, basis=basis)

    def _drops(self, drops: CaptureDrops, ctx: AnalysisContext) -> Finding | None:
        p = self.params
        if drops.dropped <= 0:
            return None
        received = drops.received
        first = drops.first_ns if drops.first_ns is not None else ctx.stats.first_ns
        last = drops.last_ns if drops.last_ns is not None else ctx.stats.last_ns
        if first is None or last is None:
            first = last = 0
        minutes = max((last - first) / NS / 60.0, 1.0)
        where = f"{drops.interface} of {drops.source}" if drops.source else drops.interface
        if received is None or received <= 0:
            ratio, rate = None, None
            severity = "info"
            msg = (f"the capture point dropped {plural(drops.dropped, 'packet')} on {where} (by its {drops.counter}); "
                   f"how many it received is not recorded, so the share is unknown")
        else:
            ratio = drops.dropped / received
            rate = received / minutes       # over a minute at least: a short capture needs that many packets
            severity = "medium" if ratio > p["drop_ratio"] and rate > p["min_drop_rate_ppm"] else "info"
            msg = (f"the capture point dropped {drops.dropped:,} of {received:,} packets ({ratio:.1%}) on {where}, "
                   f"at {rate:,.0f} packets/min (by its {drops.counter})")
            if severity == "medium":
                self._drop_ratio = max(self._drop_ratio, ratio)
                msg += "; every finding's counts are lower bounds"
        evidence = {"dropped": drops.dropped, "received": received, "drop_ratio": round(ratio, ROUND)
                    if ratio is not None else None, "packets_per_min": round(rate, 1) if rate is not None else None,
                    "interface": drops.interface, "source": drops.source, "counter": drops.counter}
        return self.finding(severity, msg, identifier=f"drops on {where}", first_seen=first,
                            last_seen=last, n=drops.dropped, place=f"{CAPTURE_POINT}, interface {where}",
                            evidence={k: v for k, v in evidence.items() if v is not None})

    # ---- the other findings, report and watch ------------------------------------
    def annotate(self, findings: list[Finding], ctx: AnalysisContext) -> None:
        """Each other finding whose time span overlaps lossy bins gets their loss ratio (gaps over acks of
        those bins), or the drop ratio of counters that fired if higher: its counts are lower bounds."""
        starts, ends, gaps, acks = self._lossy
        if not len(starts) and not self._drop_ratio:
            return
        for f in findings:
            if f.rule == self.rule_id or f.first_seen is None:
                continue
            last = f.last_seen if f.last_seen is not None else f.first_seen
            over = (starts <= last) & (ends >= f.first_seen)
            ratio = float(gaps[over].sum() / acks[over].sum()) if over.any() else 0.0
            ratio = max(ratio, self._drop_ratio)
            if ratio > 0:
                f.capture_loss_ratio = round(ratio, ROUND)

    def figures(self, findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
        """Loss ratio and packet rate per bin, when the capture lost traffic (an oversubscribed SPAN port loses
        at its peaks)."""
        if not any(f.severity != "info" and f.evidence.get("lossy_bins") for f in findings):
            return []
        own_bins, counts = self.table()
        first_ns, last_ns = self._covered_by
        return [LossFigure(own_bins, counts, self.bin_ns, bins, *_covered(own_bins, self.bin_ns, first_ns, last_ns))]

    def live_counters(self) -> list[LiveCounter]:
        return [LiveCounter("tcp_ack_events", "TCP ack events (0) and those over bytes never captured (1)",
                            "gap", 2, _event_counts)]


def _event_counts(batch: PacketBatch) -> np.ndarray:
    events = batch.flow_events
    if events is None:
        return np.zeros(2, dtype=np.int64)
    counts = np.bincount(events, minlength=8)
    return np.array([counts[EV_ACK] + counts[EV_GAP] + counts[EV_SNAPPED], counts[EV_GAP]], dtype=np.int64)


def _acks_and_gaps(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per bin, the ack events judged and the gap events among them: of connections whose opening the capture holds
    and of those picked up mid-stream after the capture's first seconds."""
    return counts[:, C_ACKS] + counts[:, C_MID_ACKS], counts[:, C_GAPS] + counts[:, C_MID_GAPS]


class _FlowColumns:
    """The flow table's columns the rule reads, as numpy arrays: AnalysisContext.flow_columns() where the context
    holds the table (no pandas, no text of every flow), else its DataFrame view (a test's, the API's)."""

    def __init__(self, ctx: AnalysisContext):
        self.coded = ctx.flow_columns()
        self.frame = ctx.flows if self.coded is None else None

    def __len__(self) -> int:
        if self.coded is not None:
            return len(self.coded["proto"])
        return 0 if self.frame is None else len(self.frame)

    def has(self, name: str) -> bool:
        return name in self.coded if self.coded is not None else self.frame is not None and name in self.frame

    def __getitem__(self, name: str) -> np.ndarray:
        return self.coded[name] if self.coded is not None else self.frame[name].to_numpy()

    def tcp(self) -> np.ndarray:
        if self.coded is not None:
            return self.coded["proto"] == PROTO_TCP
        return (self.frame["proto"].astype(str) == "tcp").to_numpy()

    def seen_ns(self) -> tuple[np.ndarray, np.ndarray]:
        if self.coded is not None:
            return self.coded["first_seen"], self.coded["last_seen"]
        return flow_time_ns(self.frame["first_seen"]), flow_time_ns(self.frame["last_seen"])

    def described(self, i: int) -> dict:
        """Flow `i`'s endpoints, protocol name, Community ID and history, as the DataFrame view writes them."""
        if self.coded is None:
            row = self.frame.iloc[i]
            return {"src": endpoint(row["src_ip"], int(row["src_port"])),
                    "dest": endpoint(row["dest_ip"], int(row["dest_port"])), "proto": str(row["proto"]),
                    "community_id": row.get("community_id"), "history": str(row["history"])}
        c = self.coded

        def text(name: str) -> str:
            column = c[name]
            return str(column.value_texts()[int(column.codes[i])])
        return {"src": endpoint(ip_text(c["src_ip_hi"][i], c["src_ip_lo"][i]), int(c["src_port"][i])),
                "dest": endpoint(ip_text(c["dest_ip_hi"][i], c["dest_ip_lo"][i]), int(c["dest_port"][i])),
                "proto": FLOW_PROTO_NAMES.get(int(c["proto"][i]), ""), "community_id": text("community_id"),
                "history": text("history")}


def _gaps_over_seen_ends(ctx: AnalysisContext) -> int:
    """The gap events of the flow table (Zeek's, of connections whose ends are established) over the bytes of ends
    whose payload the capture holds."""
    table = _FlowColumns(ctx)
    if len(table) == 0 or not table.has("src2dst_gap_events"):
        return 0
    return int(sum(table[f"{way}_gap_events"][table[f"{way}_payload_bytes"] > 0].sum()
                   for way in ("src2dst", "dst2src")))


def _byte_loss(ctx: AnalysisContext, first: int, last: int) -> float | None:
    """The bytes never captured over the bytes acknowledged or captured, of the TCP connections seen both ways
    between `first` and `last` (ns): per end, the bytes its peer's acks passed over that the capture never held
    (Zeek's missed_bytes) or, where no ack of its bytes counts (a connection picked up mid-stream), the bytes of the
    holes its captured segments opened; over those and its captured payload. None without a flow table.

    Gap events count each ack alike: a storage initiator's 64 KB burst acked at once (a stretch ack, LRO/GRO on the
    receiver) is one event among the acks of small commands and responses, and the bytes say what it weighs."""
    table = _FlowColumns(ctx)
    if len(table) == 0 or not table.has("src2dst_gap_bytes"):
        return None
    seen = table.seen_ns()
    rows = (table.tcp() & (seen[0] <= last) & (seen[1] >= first)
            & (table["src2dst_packets"] > 0) & (table["dst2src_packets"] > 0))
    missing = captured = 0
    for way in ("src2dst", "dst2src"):
        zeek = table[f"{way}_ack_events"][rows] > 0
        gone = np.where(zeek, table[f"{way}_gap_bytes"][rows], table[f"{way}_seq_hole_bytes"][rows])
        missing += int(gone.sum())
        captured += int(table[f"{way}_payload_bytes"][rows].sum())
    return missing / (missing + captured) if missing + captured else None


def _worst_flows(ctx: AnalysisContext) -> list[dict]:
    """The TCP flows that missed the most bytes (Zeek's missed_bytes), with their counters."""
    table = _FlowColumns(ctx)
    if len(table) == 0 or not table.has("src2dst_gap_bytes"):
        return []
    missed = table["src2dst_gap_bytes"] + table["dst2src_gap_bytes"]
    gaps = table["src2dst_gap_events"] + table["dst2src_gap_events"]
    acks = table["src2dst_ack_events"] + table["dst2src_ack_events"]
    top = np.argsort(-missed, kind="stable")[:FLOWS_NAMED]
    out = []
    for i in top.tolist():
        if missed[i] <= 0:
            break
        flow = table.described(i)
        out.append({"src": flow["src"], "dest": flow["dest"], "proto": flow["proto"],
                    "community_id": flow["community_id"], "gap_bytes": int(missed[i]), "gap_events": int(gaps[i]),
                    "ack_events": int(acks[i]), "history": flow["history"]})
    return out


def _covered(bins: np.ndarray, bin_ns: int, first_ns: int | None, last_ns: int | None) -> tuple[np.ndarray,
                                                                                                np.ndarray]:
    """(start, end) ns of the part of each of the rule's bins the capture covers (its first and last bin may be
    partial: a capture shorter than a bin)."""
    starts = np.maximum(bins * bin_ns, first_ns if first_ns is not None else 0)
    ends = (bins + 1) * bin_ns - 1
    if last_ns is not None:
        ends = np.minimum(ends, last_ns)
    return starts, ends


def _rates(packets: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The packet rate of each bin over the part of it the capture covers (_covered): the message's and the
    figure's."""
    return packets / np.maximum((ends - starts + 1) / NS, MIN_RATE_WINDOW_S)


class LossFigure(ReportFigure):
    """Per bin of the rule: the share of ack events over lost bytes, beside the packet rate over the part of the
    bin the capture covers, the rate the message gives (one number, one source: the rule's bins)."""

    needs_batches = False

    title = "Capture loss (TCP ack gaps) and packet rate per bin"

    def __init__(self, own_bins: np.ndarray, counts: np.ndarray, bin_ns: int, axis: TimeBins,
                 starts: np.ndarray | None = None, ends: np.ndarray | None = None):
        if starts is None or ends is None:
            starts, ends = _covered(own_bins, bin_ns, None, None)
        self.x = (own_bins * bin_ns - axis.start_ns) / NS
        acks, gaps = _acks_and_gaps(counts)
        self.ratio = gaps / np.maximum(acks, 1)
        self.rate = _rates(counts[:, C_PACKETS], starts, ends)
        self.rate_from = (starts - axis.start_ns) / NS
        self.rate_to = (ends + 1 - axis.start_ns) / NS
        self.width_s = bin_ns / NS
        self.axis = axis

    def add(self, batch: PacketBatch) -> None:
        """Drawn from the rule's own bins: nothing to keep from the evidence pass."""

    def merge(self, other: LossFigure) -> LossFigure:
        """Nothing to take: drawn from the rule's own bins."""
        return self

    def draw(self, ax, flows) -> None:
        ax.bar(self.x, self.ratio, width=self.width_s, align="edge", color="tab:red", alpha=0.6,
               label="gap events / ack events")
        ax.set_ylim(0, 1)
        ax.set_ylabel("loss ratio (red)")
        rate_ax = ax.twinx()
        # each bin's rate over the part of it the capture covers (bins may be sparse, the first and last partial)
        for x0, x1, rate in zip(self.rate_from, self.rate_to, self.rate):
            rate_ax.hlines(rate, x0, x1, color="tab:blue")
        rate_ax.set_ylim(0, max(float(self.rate.max(initial=0.0)) * 1.1, 1.0))
        rate_ax.set_ylabel("packets/s (blue)")
        self.axis.time_axis(ax)

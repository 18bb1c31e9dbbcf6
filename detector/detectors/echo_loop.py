"""echo-loop: one frame, byte for byte identical, seen many times at a high rate.

Two devices that bounce a frame back and forth unchanged (a router that
echoes UDP 520/521 and a transparent NAT that bridges it back without
touching TTL or MACs) fill a link with copies of a single frame. A capture
shows one fingerprint (hash of the frame's bytes) thousands of times per
second. Mirror ports (each frame twice), byte-identical TCP retransmissions
and periodic identical frames (keepalives, BPDUs) repeat too, but few times
or slowly: the thresholds on copies and rate keep them out.

A flood tool blasting one crafted frame looks the same on the wire, so a
repeated frame is called a loop only with loop evidence: a unicast
destination (a loop runs between two devices; a multicast or broadcast
frame is delivered, not bounced), a valid unicast source (nothing answers
ff02::1 or 0.0.0.0, and no router forwards from them), and no packets from
the target back to the source while it repeats (a device that answers with
packets of its own is being flooded, not echoing). Without all of them the
finding is an identical-frame flood at low severity, naming the evidence
that was missing; the RIP probe rule (rip_trigger.py) escalates only for
a loop.

State: for each fingerprint that repeats, its count, first/last time and
frame, and the header fields of its first copy, kept in arrays sorted by
fingerprint; and the frame numbers of its first and last copies (half of
EVIDENCE_FRAMES_MAX each), the finding's evidence frames: the trigger and
the loop's start, and how it ended. A candidate below `min_copies` that
pauses longer than the horizon (FORGET_AFTER_COPIES copy intervals at
`min_rate_pps`) is forgotten, whether the pause falls inside a batch or
between two, so the state stays near the number of live candidates. Counts,
times and evidence frames are thus those of the copies in capture order,
not of where batches begin or end: one pass gives the same findings at any
batch size, and a merge of partitions those of one pass. One pass's limit:
a copy alone in its batch and more than CARRY_OVER_S before the batch's end
is not tracked (that bounds the state to the repeats and 10 ms of traffic),
so a candidate's copies spaced wider than that count only where they share
a batch; a loop, whose copies come far closer, is not touched. Replies from
the target are counted from the flow table when findings are asked for.

A cluster partition that does not begin the capture cannot know the
candidates alive at its start. For its first `horizon` it also keeps the
copies no rule of its own picks (`head`), with their frame numbers, and it
neither forgets nor cuts at a pause the candidates that began there (they may
continue one that is hot before the cut). `merge` forgets the earlier
state's candidates whose next copy comes after a pause, joins the head
copies of the others, then forgets what one pass would have: the counts,
times, frames and evidence of one pass. Left inexact, by design: a
candidate alive at the cut whose next copy comes later than the horizon
after it, or whose copies in a later batch of the part are each alone in
their batch (one pass still counts them); a candidate that began in a
part's head and pauses there before reaching min_copies (one pass forgets
its copies before the pause unless they continue a loop from before the
cut, which the part cannot know); head copies past MAX_HEAD_CANDIDATES; and
the bytes of a candidate's copies picked only by the head (a loop hot only
with them is shown by its header fields, not decoded).
"""
from __future__ import annotations

import ipaddress

import numpy as np

from ..decode.addr import mac_to_str
from ..detect.columns import endpoint, flow_time_ns, ip_text
from ..detect.detector import MIN_RATE_WINDOW_S, AnalysisContext, Detector, check_merge, register
from ..detect.display import frame_summary
from ..detect.evidence import CARRY_OVER_S, EVIDENCE_FRAMES_MAX, batch_tail
from ..detect.figure import ReportFigure, TimeBins
from ..detect.grouping import group_by, member, repeated_rows
from ..detect.state import empty_table, fold_rows
from ..findings import Finding
from ..flows.community_id import community_id
from ..rules import ALERT_SECONDS, RATE_PPS, RATIO, Param, Range
from ..schema import IP, L_DST_MAC, L_ETHERTYPE, L_PORTS, L_SRC_MAC, L_VLAN, PROTO_NAMES, PacketBatch
from ..units import NS

# Bytes of a looping frame kept to show it decoded in the finding: every
# header the summary shows fits; the rest of a large payload adds nothing.
FRAME_BYTES_KEPT = 512
# A candidate that has not reached `min_copies` is forgotten once it has not
# been seen for this many copy intervals at `min_rate_pps`: a loop at the
# minimum rate would have shown up again long before.
FORGET_AFTER_COPIES = 10
# What is known of a repeated frame that lacks loop evidence: it was sent
# again and again, by whom and why is open (a flood tool, a replay, a switching
# loop of a broadcast frame). Never an incident of this rule on its own.
FLOOD_SEVERITY = "low"
# The group bit of a MAC address (IEEE 802: least significant bit of the first octet)
MAC_GROUP_BIT = 1 << 40

# A candidate's evidence frames: the frame numbers of its first copies (the loop's start, its trigger first) and
# of its last (how it ended, or that it still ran when the capture stopped), EVIDENCE_FRAMES_MAX in all.
FIRST_COPIES_KEPT = EVIDENCE_FRAMES_MAX // 2
LAST_COPIES_KEPT = EVIDENCE_FRAMES_MAX - FIRST_COPIES_KEPT

# Candidates a partition after the first keeps from the copies in its head that no rule of its own picks
# (some 110 bytes each): at a million packets per second the head of 50 ms holds about 50,000, the first kept.
MAX_HEAD_CANDIDATES = 16_384

# the header fields of the first copy, kept per candidate (name -> dtype)
DESCRIPTOR_COLUMNS = {
    "layers": np.uint32, "linktype": np.uint16, "src_mac": np.uint64, "dest_mac": np.uint64,
    "vlan_outer": np.uint16, "ethertype": np.uint16, "ip_version": np.uint8,
    "src_ip_hi": np.uint64, "src_ip_lo": np.uint64, "dest_ip_hi": np.uint64, "dest_ip_lo": np.uint64,
    "proto": np.uint8, "ttl": np.uint8, "ip_id": np.uint32, "src_port": np.uint16,
    "dest_port": np.uint16, "caplen": np.uint32,
}
STATE_COLUMNS = {"fp": np.uint64, "count": np.int64, "first_ns": np.int64, "last_ns": np.int64,
                 "first_frame": np.int64, "last_frame": np.int64, **DESCRIPTOR_COLUMNS}


def _combine(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Two candidate tables as one, one row per fingerprint; the earliest copy describes it."""
    return fold_rows(a, b, "fp", {"count": np.add, "last_ns": np.maximum,
                                  "first_frame": np.minimum, "last_frame": np.maximum})


def _no_copies() -> dict[str, np.ndarray]:
    """A table of copies' frame numbers, sorted by fingerprint then frame: `fp` and `frame`, row by row."""
    return {"fp": np.zeros(0, dtype=np.uint64), "frame": np.zeros(0, dtype=np.int64)}


def _ends(starts: np.ndarray, counts: np.ndarray, rows: int) -> np.ndarray | None:
    """Of `rows` rows in groups (`starts`, `counts`; each group in capture order), the mask of those among their
    group's FIRST_COPIES_KEPT first or LAST_COPIES_KEPT last; None when that is every row."""
    if rows == 0 or counts.max() <= EVIDENCE_FRAMES_MAX:
        return None
    rank = np.arange(rows) - np.repeat(starts, counts)
    return (rank < FIRST_COPIES_KEPT) | (rank >= np.repeat(counts - LAST_COPIES_KEPT, counts))


def _trimmed(copies: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A copies table with each fingerprint's first and last copies only (_ends)."""
    fp = copies["fp"]
    if len(fp) <= EVIDENCE_FRAMES_MAX:
        return copies
    starts = np.flatnonzero(np.concatenate(([True], fp[1:] != fp[:-1])))
    keep = _ends(starts, np.diff(np.append(starts, len(fp))), len(fp))
    return copies if keep is None else {name: col[keep] for name, col in copies.items()}


def _appended(copies: dict[str, np.ndarray], fp: np.ndarray, frame: np.ndarray) -> dict[str, np.ndarray]:
    """`copies` with later copies added (`fp` sorted, each fingerprint's frames in order and after those kept):
    each inserted after its fingerprint's kept rows, in one pass over the table, then trimmed."""
    at = np.searchsorted(copies["fp"], fp, side="right")
    return _trimmed({"fp": np.insert(copies["fp"], at, fp), "frame": np.insert(copies["frame"], at, frame)})


def _joined(*tables: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Copies tables of disjoint frames (partitions, a head) as one, trimmed."""
    both = {name: np.concatenate([table[name] for table in tables]) for name in ("fp", "frame")}
    order = np.lexsort((both["frame"], both["fp"]))
    return _trimmed({name: col[order] for name, col in both.items()})


def _of(copies: dict[str, np.ndarray], fps: np.ndarray) -> dict[str, np.ndarray]:
    """The rows of `copies` whose fingerprint is in `fps` (sorted, unique)."""
    keep = member(copies["fp"], fps)
    return copies if keep.all() else {name: col[keep] for name, col in copies.items()}


@register
class EchoLoop(Detector):
    rule_id = "echo-loop"
    EVE_SIGNATURE = (5, "Misc activity")
    # what its findings rest on beyond what it saw (detect.confidence): a loop's rate and duration
    QUALITY_NEEDS = frozenset({"timing"})
    PARAMS = {
        # two copies are the least a repeat can be
        "min_copies": Param(int, 1000, "identical copies of one frame before it counts as a loop", Range(2, 10**9),
                            "Fewer copies catch a short loop sooner, but let bursts of byte-identical "
                            "retransmissions or replayed frames through; a real echo loop reaches thousands "
                            "within a second."),
        "min_rate_pps": Param(float, 200.0, "copies per second (count over first-to-last time) a loop reaches",
                              RATE_PPS,
                              "Lower finds slow loops but also long-lived periodic identical frames (keepalives at "
                              "1/s never get near it); the incident ran at tens of thousands per second."),
        "high_rate_pps": Param(float, 5000.0, "rate from which the finding is high", RATE_PPS,
                               "A link of 1 Gbit/s carries about 80,000 frames/s of 1500 bytes: lower values call a "
                               "loop high that takes a small part of it, higher ones wait until it takes a large "
                               "part."),
        "critical_rate_pps": Param(float, 50000.0, "rate from which the finding is critical", RATE_PPS,
                                   "50,000 copies/s of a small frame already take a large part of a router's "
                                   "forwarding budget; lower values call a loop critical before it threatens the "
                                   "router."),
        "high_share_ratio": Param(float, 0.2, "share of all packets from first to last copy from which it is high",
                                  RATIO,
                                  "From 0.2 the loop is a large part of the traffic; lower values call a loop high "
                                  "on a busy link where it is a small part of it."),
        "critical_share_ratio": Param(float, 0.5, "share of all packets from which it is critical (with "
                                                  "high_rate_pps reached)", RATIO,
                                      "From 0.5 the loop dominates the link; lower values call a loop critical that "
                                      "still leaves most of the link to other traffic."),
    }
    ALERTS = {
        "suppress_s": Param(float, 60.0, "least seconds between two events about one looping frame (its alert, "
                                         "then updates while it goes on)", ALERT_SECONDS,
                            "Shorter shows the loop's growth sooner but floods alerts.jsonl during a long outage; a "
                            "loop is an emergency, so a minute keeps responders informed without drowning them."),
        "resolve_s": Param(float, 5.0, "seconds without a new copy before the loop is resolved", ALERT_SECONDS,
                           "A loop copies thousands of times a second, so a few seconds of silence mean it broke; "
                           "longer only delays the all-clear."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.state = empty_table(STATE_COLUMNS)
        self.copies = _no_copies()      # every candidate's first and last copies: its evidence frames
        self.frame_bytes: dict[int, tuple[bytes, int]] = {}   # fingerprint -> (first bytes, linktype)
        # a partition after the first: copies in its first horizon picked by no rule of its own, and the end of
        # that head (None: nothing read yet, or the state begins the capture and has no head)
        self.begins_capture: bool | None = None
        self.head_end_ns: int | None = None
        self.head = empty_table(STATE_COLUMNS)
        self.head_copies = _no_copies()
        self.last_ns = 0

    # ---- state ------------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        if len(batch) == 0:
            return
        ts = batch["ts_ns"]
        fp = batch["fingerprint"]
        if self.begins_capture is None:
            self.begins_capture = int(batch["frame"][0]) == 1
            if not self.begins_capture:
                self.head_end_ns = int(ts.min()) + self._horizon_ns()
        picked = repeated_rows(fp) | member(fp, self.state["fp"]) | batch_tail(ts)
        if self.head_end_ns is not None and int(ts.min()) < self.head_end_ns:
            self._keep_head(batch, np.flatnonzero((ts < self.head_end_ns) & ~picked))
        rows = np.flatnonzero(picked)
        if len(rows):
            order, starts, counts = group_by(fp[rows])
            rows = rows[order]
            rows, starts, counts = self._chains(fp[rows[starts]], ts, rows, starts, counts)
            first, last = rows[starts], rows[starts + counts - 1]
            part = {name: batch[name][first].astype(dtype) for name, dtype in DESCRIPTOR_COLUMNS.items()}
            part.update(fp=fp[first], count=counts.astype(np.int64),
                        first_ns=np.minimum.reduceat(ts[rows], starts),
                        last_ns=np.maximum.reduceat(ts[rows], starts),
                        first_frame=batch["frame"][first], last_frame=batch["frame"][last])
            self.state = _combine(self.state, part)
        self.last_ns = max(self.last_ns, int(ts.max()))
        self._forget(int(ts.max()))
        if len(rows):
            # the copies of the candidates left after forgetting (most of a batch's repeats are gone by its end)
            kept = np.repeat(member(part["fp"], self.state["fp"]), counts)
            ends = _ends(starts, counts, len(rows))
            kept = rows[kept if ends is None else kept & ends]
            self.copies = _appended(self.copies, fp[kept], batch["frame"][kept])
            self._keep_bytes(batch, first)

    def _chains(self, keys: np.ndarray, ts: np.ndarray, rows: np.ndarray, starts: np.ndarray,
                counts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each candidate's copies in this batch (`rows` grouped by fingerprint `keys`, in capture order) from its
        last pause longer than the horizon that came before it reached min_copies, and the candidates such a
        pause ends dropped from the state: a pause inside a batch forgets a candidate as `_forget` does one
        unseen that long when a batch ends, so the count does not depend on where batches end. A pinned
        candidate (a part's head) pauses without being forgotten: its copies before may continue a loop."""
        horizon, state = self._horizon_ns(), self.state
        if horizon <= 0:
            return rows, starts, counts
        t = ts[rows]
        pause = np.zeros(len(rows), dtype=bool)
        pause[1:] = (t[1:] - t[:-1]) > horizon
        at = np.minimum(np.searchsorted(state["fp"], keys), max(len(state["fp"]) - 1, 0))
        known = state["fp"][at] == keys if len(state["fp"]) else np.zeros(len(keys), dtype=bool)
        before, last_ns, first_ns = np.zeros(len(keys), dtype=np.int64), t[starts], t[starts]
        if known.any():
            before, last_ns, first_ns = (np.where(known, state[name][at], default) for name, default in
                                         (("count", before), ("last_ns", last_ns), ("first_ns", first_ns)))
        # a candidate that has reached min_copies is never forgotten
        pause[starts] = (t[starts] - last_ns > horizon) & (before < self.params["min_copies"])
        if self.head_end_ns is not None:        # pinned: no pause forgets it
            pause[np.repeat(first_ns < self.head_end_ns, counts)] = False
        if not pause.any():
            return rows, starts, counts
        # segments: a group's copies between two pauses; the first to reach min_copies (with the copies before
        # this batch, if no pause comes first) begins the chain, or else the group's last one does
        segment_start = pause.copy()
        segment_start[starts] = True
        seg = np.flatnonzero(segment_start)
        sizes = np.diff(np.append(seg, len(rows)))
        first_seg = np.searchsorted(seg, starts)
        base = np.zeros(len(seg), dtype=np.int64)
        base[first_seg] = np.where(pause[starts], 0, before)
        reaching = np.where(base + sizes >= self.params["min_copies"], np.arange(len(seg)), len(seg))
        chosen = np.minimum.reduceat(reaching, first_seg)
        chosen = np.where(chosen < len(seg), chosen, np.append(first_seg[1:], len(seg)) - 1)
        chain_start = seg[chosen]
        reset = known & ((chosen != first_seg) | pause[starts])
        if reset.any():
            gone = np.sort(keys[reset])
            keep = ~member(state["fp"], gone)
            self.state = {name: col[keep] for name, col in state.items()}
            self.copies = _of(self.copies, self.state["fp"])
        kept = np.arange(len(rows)) >= np.repeat(chain_start, counts)
        counts = counts - (chain_start - starts)
        return rows[kept], np.concatenate(([0], np.cumsum(counts)[:-1])), counts

    def _horizon_ns(self) -> int:
        """How long an unseen candidate below min_copies is kept (0: never forgotten)."""
        rate = self.params["min_rate_pps"]
        return max(int(FORGET_AFTER_COPIES / rate * NS), int(CARRY_OVER_S * NS)) if rate > 0 else 0

    def _pinned(self, state: dict) -> np.ndarray:
        """Candidates a partition after the first keeps whatever their count: those that began in its head."""
        if self.head_end_ns is None:
            return np.zeros(len(state["fp"]), dtype=bool)
        return state["first_ns"] < self.head_end_ns

    def _keep_head(self, batch: PacketBatch, rows: np.ndarray) -> None:
        """Copies in the head no rule picked: candidates of their own (MAX_HEAD_CANDIDATES at most), until the
        merge says whose they are. Their frame numbers are kept as evidence, their bytes are not."""
        room = MAX_HEAD_CANDIDATES - len(self.head["fp"])
        if len(rows) == 0 or room <= 0:
            return
        fp, ts = batch["fingerprint"], batch["ts_ns"]
        order, starts, counts = group_by(fp[rows])
        rows = rows[order]
        first, last = rows[starts], rows[starts + counts - 1]
        part = {name: batch[name][first].astype(dtype) for name, dtype in DESCRIPTOR_COLUMNS.items()}
        part.update(fp=fp[first], count=counts.astype(np.int64), first_ns=np.minimum.reduceat(ts[rows], starts),
                    last_ns=np.maximum.reduceat(ts[rows], starts),
                    first_frame=batch["frame"][first], last_frame=batch["frame"][last])
        known = member(part["fp"], self.head["fp"])
        fresh = np.flatnonzero(~known)[room:]       # the candidates past the bound
        if len(fresh):
            keep = np.ones(len(known), dtype=bool)
            keep[fresh] = False
            part = {name: col[keep] for name, col in part.items()}
        self.head = _combine(self.head, part)
        # a copy the head keeps is alone in its batch (no rule picked it): its frame is the group's first
        self.head_copies = _appended(self.head_copies, part["fp"], part["first_frame"])

    def _keep_bytes(self, batch: PacketBatch, first: np.ndarray) -> None:
        """The bytes of candidates that have reached min_copies (or are pinned), from a copy in this batch
        (`first`: a row of each candidate in it): every copy has the same bytes."""
        state = self.state
        hot = state["fp"][(state["count"] >= self.params["min_copies"]) | self._pinned(state)]
        fp = batch["fingerprint"]
        for row in first[member(fp[first], hot)].tolist():
            key = int(fp[row])
            if key not in self.frame_bytes:
                self.frame_bytes[key] = (batch.frame_bytes(row)[:FRAME_BYTES_KEPT], int(batch["linktype"][row]))

    def _forget(self, now_ns: int) -> None:
        horizon = self._horizon_ns()
        if horizon <= 0:
            return
        state = self.state
        keep = ((state["count"] >= self.params["min_copies"]) | (state["last_ns"] >= now_ns - horizon)
                | self._pinned(state))
        if not keep.all():
            self.state = {name: col[keep] for name, col in state.items()}
            self.copies = _of(self.copies, self.state["fp"])

    def merge(self, other: EchoLoop) -> EchoLoop:
        """Absorb `other`, the state of the packets that follow this one's: its head copies of this state's
        candidates count as one pass counted them, the rest of its head goes, and what one pass would have
        forgotten by the end of `other` is forgotten."""
        check_merge(self, other)
        if other.begins_capture is None:
            return self
        if self.begins_capture is None:
            self.__dict__.update(other.__dict__)
            return self
        self._forget_paused(other)
        theirs, copies = other.state, [self.copies, other.copies]
        if len(other.head["fp"]):
            alive = np.flatnonzero(member(other.head["fp"], self.state["fp"]))
            theirs = _combine(theirs, {name: col[alive] for name, col in other.head.items()})
            copies.append(_of(other.head_copies, self.state["fp"]))
        self.state = _combine(self.state, theirs)
        self.copies = _joined(*copies)
        for key, value in other.frame_bytes.items():
            self.frame_bytes.setdefault(key, value)
        self.last_ns = max(self.last_ns, other.last_ns)
        self._forget(self.last_ns)
        state = self.state
        hot = (state["count"] >= self.params["min_copies"]) | self._pinned(state)
        keys = set(state["fp"][hot].tolist())
        self.frame_bytes = {k: v for k, v in self.frame_bytes.items() if k in keys}
        return self

    def _forget_paused(self, other: EchoLoop) -> None:
        """Forget what one pass forgot at a pause across the cut: a candidate below min_copies (and not pinned)
        whose next copy, in `other` (its state or head), comes more than the horizon after its last."""
        horizon, mine = self._horizon_ns(), self.state
        if horizon <= 0 or len(mine["fp"]) == 0:
            return
        never = np.iinfo(np.int64).max
        next_ns = np.full(len(mine["fp"]), never)
        for table in (other.state, other.head):
            if len(table["fp"]):
                at = np.minimum(np.searchsorted(table["fp"], mine["fp"]), len(table["fp"]) - 1)
                later = table["fp"][at] == mine["fp"]
                next_ns = np.where(later, np.minimum(next_ns, table["first_ns"][at]), next_ns)
        paused = ((next_ns != never) & (next_ns - mine["last_ns"] > horizon)
                  & (mine["count"] < self.params["min_copies"]) & ~self._pinned(mine))
        if paused.any():
            self.state = {name: col[~paused] for name, col in mine.items()}
            self.copies = _of(self.copies, self.state["fp"])

    # ---- findings ---------------------------------------------------------
    def _severity(self, rate: float, share: float) -> str:
        p = self.params
        if rate >= p["critical_rate_pps"] or (share >= p["critical_share_ratio"] and rate >= p["high_rate_pps"]):
            return "critical"
        if rate >= p["high_rate_pps"] or share >= p["high_share_ratio"]:
            return "high"
        return self.rule.severity

    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        state, p = self.state, self.params
        duration_s = (state["last_ns"] - state["first_ns"]) / NS
        rate = state["count"] / np.maximum(duration_s, MIN_RATE_WINDOW_S)
        loops = np.flatnonzero((state["count"] >= p["min_copies"]) & (rate >= p["min_rate_pps"]))
        out = []
        for i in loops[np.argsort(-state["count"][loops], kind="stable")]:
            out.append(self._finding(i, float(duration_s[i]), float(rate[i]), ctx))
        return out

    def _finding(self, i: int, duration_s: float, rate: float, ctx: AnalysisContext) -> Finding:
        row = {name: col[i] for name, col in self.state.items()}
        key, count, layers = int(row["fp"]), int(row["count"]), int(row["layers"])
        # frame numbers run across the whole input: the span from the first copy
        # to the last counts every packet captured meanwhile, the copies included
        share = count / max(int(row["last_frame"]) - int(row["first_frame"]) + 1, count)
        fields: dict = {}
        if layers & L_SRC_MAC:
            fields["src_mac"] = mac_to_str(row["src_mac"])
        if layers & L_DST_MAC:
            fields["dest_mac"] = mac_to_str(row["dest_mac"])
        what = f"ethertype 0x{int(row['ethertype']):04x}" if layers & L_ETHERTYPE else "non-IP frame"
        ttl_text = ""
        if layers & IP:
            proto = PROTO_NAMES.get(int(row["proto"]), str(int(row["proto"])))
            fields.update(src_ip=ip_text(row["src_ip_hi"], row["src_ip_lo"]),
                          dest_ip=ip_text(row["dest_ip_hi"], row["dest_ip_lo"]), proto=proto)
            src, dst = fields["src_ip"], fields["dest_ip"]
            if layers & L_PORTS:
                fields.update(src_port=int(row["src_port"]), dest_port=int(row["dest_port"]))
                src, dst = endpoint(src, fields["src_port"]), endpoint(dst, fields["dest_port"])
            fields["community_id"] = community_id(fields["src_ip"], fields["dest_ip"], int(row["proto"]),
                                                  fields.get("src_port"), fields.get("dest_port"))
            what = f"{proto.upper()} {src} -> {dst}"
            ttl_text = f", TTL {int(row['ttl'])} never decremented"
        macs = (f" between {fields['src_mac']} and {fields['dest_mac']}"
                if "src_mac" in fields and "dest_mac" in fields else "")
        found = _loop_evidence(row, fields, ctx)
        missing = [text.format(**found) for name, text in MISSING_TEXT.items() if found[name] is False]
        raw, linktype = self.frame_bytes.get(key, (b"", int(row["linktype"])))
        copies = self.copies["fp"]
        frames = self.copies["frame"][np.searchsorted(copies, row["fp"]):np.searchsorted(copies, row["fp"], "right")]
        if len(frames) == 0:
            frames = np.array([row["first_frame"], row["last_frame"]])
        evidence = {
            "fingerprint": f"{key:016x}",
            "copies": count,
            "duration_s": round(duration_s, 6),
            "rate_pps": round(rate, 1),
            "share_ratio": round(share, 4),
            "loop": not missing,
            "loop_evidence": found,
            "missing_loop_evidence": missing or None,
            "ttl": int(row["ttl"]) if layers & IP else None,
            "ip_id": int(row["ip_id"]) if layers & IP else None,
            "vlan": int(row["vlan_outer"]) if layers & L_VLAN else None,
            "frame_bytes": int(row["caplen"]),
            "frame": frame_summary(raw, linktype) if raw else what,
            "first_frame": int(row["first_frame"]),
            "evidence_frames": np.unique(frames).tolist(),
        }
        seen = (f"one frame seen {count:,} times in {duration_s:.3f} s ({rate:,.0f}/s, {share:.0%} of all packets "
                f"meanwhile)")
        if missing:
            severity = FLOOD_SEVERITY
            # a frame to a group address may also circle in a switching loop, which this rule cannot see
            origin = ("a flood tool, a replay or a switching loop (broadcast storm)" if found["unicast_destination"]
                      is False else "a flood tool or a replay")
            msg = (f"identical-frame flood, not a loop: {seen}{macs}: {what}; no loop evidence, as "
                   f"{', '.join(missing)}: {origin} sent it, not two devices bouncing it")
        else:
            severity = self._severity(rate, share)
            known = ", ".join(text for name, text in PRESENT_TEXT.items() if found[name])
            msg = f"{seen}{macs}: {what}{ttl_text}" + (f"; loop evidence: {known}" if known else "")
        return self.finding(severity, msg, identifier=evidence["fingerprint"], first_seen=int(row["first_ns"]),
                            last_seen=int(row["last_ns"]), n=count,
                            evidence={k: v for k, v in evidence.items() if v is not None}, **fields)

    # ---- report -------------------------------------------------------------
    def figures(self, findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
        return [CopiesFigure(finding, bins) for finding in findings]


class CopiesFigure(ReportFigure):
    """Copies per second of one looping frame over the capture: when the loop started, how fast, how long."""

    needs_fingerprint = True

    def __init__(self, finding: Finding, bins: TimeBins):
        self.title = f"Looping frame {finding.identifier}: copies per second"
        self.fingerprint = np.uint64(int(finding.identifier, 16))
        self.bins = bins
        self.copies = np.zeros(bins.count, dtype=np.int64)

    def add(self, batch: PacketBatch) -> None:
        self.copies += self.bins.counts(batch["ts_ns"][batch["fingerprint"] == self.fingerprint])

    def merge(self, other: CopiesFigure) -> CopiesFigure:
        """Counts per bin add up: the same bins in every copy."""
        self.copies += other.copies
        return self

    def draw(self, ax, flows) -> None:
        ax.plot(self.bins.starts_s, self.copies / self.bins.width_s, drawstyle="steps-post", lw=1, color="#d33",
                label=f"copies/s ({self.bins.width_s:g} s bins)")
        self.bins.time_axis(ax)
        ax.set_ylabel(f"copies/s ({self.bins.width_s:g} s bins)")


# What each piece of loop evidence says when it holds, and when it fails.
PRESENT_TEXT = {"unicast_destination": "unicast destination",
                "unicast_source": "valid unicast source",
                "no_replies": "no packet from the target back to the source meanwhile"}
MISSING_TEXT = {"unicast_destination": "the destination is a multicast or broadcast address",
                "unicast_source": "the source is not a valid unicast address",
                "no_replies": "the target sent {replies_from_target:,} packets of its own back to the source meanwhile"}
# IPv4 "this network" (RFC 1122 sec. 3.2.1.3): a source only while a host learns its address
THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")


def _unicast(text: str) -> bool:
    """An address a device can have and send from: not multicast, broadcast, unspecified, loopback or reserved."""
    address = ipaddress.ip_address(text)
    return not (address.is_multicast or address.is_unspecified or address.is_loopback or address.is_reserved
                or (address.version == 4 and address in THIS_NETWORK))


def _loop_evidence(row: dict, fields: dict, ctx: AnalysisContext) -> dict:
    """Each piece of loop evidence: True (holds), False (contradicted) or None (the capture cannot tell).

    `no_replies` is the count check reversed, so that True always speaks for a loop; the count itself
    is in `replies_from_target`.
    """
    layers = int(row["layers"])
    destination = source = None
    if layers & L_DST_MAC:
        destination = not int(row["dest_mac"]) & MAC_GROUP_BIT
    if layers & L_SRC_MAC:
        source = not int(row["src_mac"]) & MAC_GROUP_BIT
    replies = None
    if "src_ip" in fields:
        destination = destination is not False and _unicast(fields["dest_ip"])
        source = source is not False and _unicast(fields["src_ip"])
        replies = _replies(ctx, fields["src_ip"], fields["dest_ip"], int(row["first_ns"]), int(row["last_ns"]))
    return {"unicast_destination": destination, "unicast_source": source,
            "no_replies": None if replies is None else replies == 0, "replies_from_target": replies}


def _replies(ctx: AnalysisContext, src: str, dst: str, first_ns: int, last_ns: int) -> int | None:
    """Packets `dst` sent to `src` in flows that overlap [first_ns, last_ns], from the flow table (None
    without one)."""
    flows = ctx.flows
    if flows is None:
        return None
    forward = (flows["src_ip"] == src) & (flows["dest_ip"] == dst)
    backward = (flows["src_ip"] == dst) & (flows["dest_ip"] == src)
    pair = flows[forward | backward]
    overlap = (flow_time_ns(pair["first_seen"]) <= last_ns) & (flow_time_ns(pair["last_seen"]) >= first_ns)
    back = np.where((pair["src_ip"] == src).to_numpy(), pair["dst2src_packets"].to_numpy(np.int64),
                    pair["src2dst_packets"].to_numpy(np.int64))
    return int(back[overlap].sum())

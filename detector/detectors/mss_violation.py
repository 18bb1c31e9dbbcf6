"""mss-violation: TCP segments carrying more payload than the peer said it can receive.

Each side of a TCP connection announces in its SYN the largest segment it
accepts (the MSS option, RFC 9293 section 3.7.1; RFC 6691). A sender that
exceeds it builds packets the path or the receiver may drop: in the PMTUD
black hole of the incidents, a virtual NIC segmented at a fixed 1500 bytes
although the client had announced 1320, and every such packet died behind a
1420-byte tunnel.

A capture taken on the sending (or receiving) host itself shows TSO/GSO
(or GRO/LRO) super-segments: tens of kilobytes in one "packet" that the NIC
cuts to size after the capture point. Such a segment is larger than any
frame the link carries, so it never was on the wire; those are reported at
info severity, as a property of the capture, not as a violation.

State: the MSS each SYN announced, by the direction it constrains, in a
sorted array; per violating direction of a flow, counters and bounded
evidence frames. Segments of a flow whose SYN was not captured are not
judged (the MSS is unknown).

A cluster partition that does not begin the capture cannot know the SYNs
before it: it keeps what it needs to judge its unannounced segments once
merged after them (`pending`: per direction, payload size and whether the
packet fits the link, the count, first and last time and the first and last
evidence frames), and `merge` judges those against the earlier part's
announcements, which gives the counts, sizes, times and frames of one pass.
Left inexact, by design: segments of at most PENDING_FLOOR_BYTES (judged
only against a smaller MSS, which nobody announces), more than
MAX_PENDING_GROUPS groups in one part (the first kept), and a direction
announced on both sides of a cut with different MSS values (one pass judges
the later part's segments against the larger, the part against its own).
"""
from __future__ import annotations

import numpy as np

from ..cpu import kernel
from ..detect.columns import endpoint, ip_text
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.display import flow_community_id
from ..detect.evidence import append_ends, evidence_frames, keep_ends
from ..detect.grouping import find_sorted, group_by, member
from ..detect.hashing import mix64
from ..detect.state import fold_rows
from ..findings import Finding
from ..rules import ALERT_SECONDS, COUNT, Param, Range
from ..schema import L_IP6, L_MSS, L_PAYLOAD, L_TCP, PROTO_TCP, TH_SYN, PacketBatch
from ..units import NS, plural

# the rules whose findings this one reads, by id (detect.detector.Detector.AFTER): no rule imports another
PMTUD_BLACKHOLE = "pmtud-blackhole"

# Announcements kept: a SYN flood with MSS options must not grow the state
# without bound; past this, new announcements are counted and not kept.
MAX_ANNOUNCED = 1 << 21
# "Nothing announced yet": above any payload length (a uint32 column), so
# that a family without a SYN passes no segment on, not even the BIG TCP
# (RFC 2675 jumbogram, IPv4 total length 0) super-segments of a host-side
# capture, whose payload exceeds any MSS the 16-bit option can carry.
UNANNOUNCED = 1 << 32
# Violating flow directions tracked with their own counters.
MAX_FLOWS = 4096
# A partition after the first keeps its segments of directions whose SYN it has not seen above this payload,
# grouped by direction and size, to be judged at the merge: 536 is the MSS a host assumes without the option
# (RFC 9293 section 3.7.1); announcing less is unheard of, and smaller segments are most of a busy link's.
PENDING_FLOOR_BYTES = 536
# Groups (direction, payload size, fits the link) kept pending in one partition: a few per connection; past
# this, further groups are counted in dropped_pending and not judged.
MAX_PENDING_GROUPS = 65_536
PENDING_COLUMNS = {"key": np.uint64, "payload": np.uint32, "wire": np.bool_, "count": np.int64,
                   "first_ns": np.int64, "last_ns": np.int64,
                   "src_hi": np.uint64, "src_lo": np.uint64, "dst_hi": np.uint64, "dst_lo": np.uint64,
                   "sport": np.uint16, "dport": np.uint16}

FLOW_FIELDS = ("src_hi", "src_lo", "dst_hi", "dst_lo", "sport", "dport")


@kernel("(u4[::1], u2[::1], u4[::1], u2[::1], i8, i8)")
def _scan(layers, flags, payload, mss, min_mss_v4, min_mss_v6):
    """Rows of SYNs with an MSS option, and rows of segments above the smallest MSS of their family.

    No segment at or below the smallest MSS announced in its address family
    (this batch's SYNs included) can violate, so nearly every row stops at
    that comparison.
    """
    syn = np.empty(len(layers), dtype=np.int64)
    n_syn = 0
    for i in range(len(layers)):
        if layers[i] & np.uint32(L_MSS) and flags[i] & TH_SYN:
            syn[n_syn] = i
            n_syn += 1
            if layers[i] & np.uint32(L_IP6):
                min_mss_v6 = min(min_mss_v6, np.int64(mss[i]))
            else:
                min_mss_v4 = min(min_mss_v4, np.int64(mss[i]))
    segments = np.empty(len(layers), dtype=np.int64)
    n_seg = 0
    need = np.uint32(L_TCP | L_PAYLOAD)
    for i in range(len(layers)):
        bits = layers[i]
        if bits & need == need:
            floor = min_mss_v6 if bits & np.uint32(L_IP6) else min_mss_v4
            if payload[i] > floor:
                segments[n_seg] = i
                n_seg += 1
    return syn[:n_syn], segments[:n_seg]


def _direction_key(src_hi, src_lo, dst_hi, dst_lo, sport, dport) -> np.ndarray:
    ports = (sport.astype(np.uint64) << np.uint64(16)) | dport.astype(np.uint64)
    return mix64(src_hi, src_lo, dst_hi, dst_lo, ports)


def _group_key(keys: np.ndarray, payload: np.ndarray, wire: np.ndarray) -> np.ndarray:
    """One key per pending group: direction, payload size and whether the packet fits the link."""
    return mix64(keys, payload.astype(np.uint64), wire.astype(np.uint64))


def _fold_pending(a: dict, b: dict) -> dict:
    """Two pending tables as one, one row per group (counts summed, earliest first and latest last time)."""
    return fold_rows(a, b, lambda t: _group_key(t["key"], t["payload"], t["wire"]),
                     {"count": np.add, "last_ns": np.maximum})


@register
class MssViolation(Detector):
    rule_id = "mss-violation"
    EVE_SIGNATURE = (10, "Generic Protocol Command Decode")
    AFTER = (PMTUD_BLACKHOLE,)
    PARAMS = {
        "min_segments": Param(int, 3, "violating segments on the wire from which the finding takes the rule's "
                                      "severity (fewer: low)", COUNT,
                              "One or two can be a stack's corner case (a retransmission that coalesced segments), "
                              "which lower values report at the rule's severity; a broken offload produces them for "
                              "every full-size segment."),
        # 68: the least MTU of an IPv4 link (RFC 791); 65,536: Linux's loopback, the largest a
        # captured interface commonly has (IPv6 jumbograms, RFC 2675, need links that no NIC offers)
        "link_mtu_bytes": Param(int, 1500, "largest IP packet the captured link carries; a segment in a larger "
                                           "packet never was on the wire (TSO/GSO/GRO capture)", Range(68, 65536),
                                "Set it to the link's real MTU (9000 on jumbo-frame links): below it, violations in "
                                "larger packets read as offload; above it, the super-segments of a host-side "
                                "capture read as violations."),
    }
    ALERTS = {
        "suppress_s": Param(float, 600.0, "least seconds between two events about one TCP flow", ALERT_SECONDS,
                            "Oversized segments repeat for the flow's whole life; longer keeps a bulk transfer "
                            "from raising an update every few seconds."),
        "resolve_s": Param(float, 60.0, "seconds without a new violating segment before the flow is resolved",
                           ALERT_SECONDS,
                           "Retransmissions back off for seconds to minutes, so a short hold would resolve a flow "
                           "that is still stuck."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.limit_keys = np.zeros(0, dtype=np.uint64)   # direction that must obey, sorted
        self.limit_mss = np.zeros(0, dtype=np.uint32)
        # smallest MSS announced per address family: the cheap first filter of segments
        self.min_mss_v4 = self.min_mss_v6 = UNANNOUNCED
        self.dropped_announcements = 0
        self.flows: dict[int, dict] = {}
        # None until the first packet: whether this state begins the capture (frame 1), so nothing came before
        self.begins_capture: bool | None = None
        # segments of directions not announced here, grouped: (key, payload, wire) -> frames in `pending_frames`
        self.pending = {name: np.zeros(0, dtype=dtype) for name, dtype in PENDING_COLUMNS.items()}
        self.pending_frames: dict[tuple[int, int, bool], np.ndarray] = {}
        self.dropped_pending = 0

    # ---- state ------------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        if len(batch) == 0:
            return
        layers = batch["layers"]
        if self.begins_capture is None:
            self.begins_capture = int(batch["frame"][0]) == 1
        floor_v4, floor_v6 = self.min_mss_v4, self.min_mss_v6
        if not self.begins_capture:     # a later part also keeps what SYNs before it may make violations
            floor_v4, floor_v6 = min(floor_v4, PENDING_FLOOR_BYTES), min(floor_v6, PENDING_FLOOR_BYTES)
        syn, segments = _scan(layers, batch["tcp_flags"], batch["payload_len"], batch["tcp_mss"],
                              floor_v4, floor_v6)
        if len(syn):
            # the SYN's sender limits what its peer may send: key the reverse direction
            keys = _direction_key(batch["dest_ip_hi"][syn], batch["dest_ip_lo"][syn], batch["src_ip_hi"][syn],
                                  batch["src_ip_lo"][syn], batch["dest_port"][syn], batch["src_port"][syn])
            v6 = (layers[syn] & np.uint32(L_IP6)) != 0
            self._announce(keys, batch["tcp_mss"][syn].astype(np.uint32), v6)
        if len(segments):
            self._check_segments(batch, segments)

    def _announce(self, keys: np.ndarray, mss: np.ndarray, v6: np.ndarray) -> None:
        for family, smallest in ((v6, "min_mss_v6"), (~v6, "min_mss_v4")):
            if family.any():
                setattr(self, smallest, min(getattr(self, smallest), int(mss[family].min())))
        self._insert(keys, mss)

    def _insert(self, keys: np.ndarray, mss: np.ndarray) -> None:
        """Add announcements to the sorted table; a key seen again keeps its largest MSS."""
        room = max(MAX_ANNOUNCED - len(self.limit_keys), 0)
        if len(keys) > room:
            self.dropped_announcements += len(keys) - room
            keys, mss = keys[:room], mss[:room]
        if len(keys) == 0:
            return
        # judge against the most lenient announcement of a repeated SYN
        order = np.lexsort((-mss.astype(np.int64), keys))
        keys, mss = keys[order], mss[order]
        first = np.concatenate(([True], keys[1:] != keys[:-1]))
        keys, mss = keys[first], mss[first]
        at, known = find_sorted(self.limit_keys, keys)
        self.limit_mss[at[known]] = np.maximum(self.limit_mss[at[known]], mss[known])
        # new keys go in at their sorted places: a copy of the table, not a sort of it
        self.limit_keys = np.insert(self.limit_keys, at[~known], keys[~known])
        self.limit_mss = np.insert(self.limit_mss, at[~known], mss[~known])

    def _check_segments(self, batch: PacketBatch, rows: np.ndarray) -> None:
        payload = batch["payload_len"]
        cols = {"src_hi": batch["src_ip_hi"][rows], "src_lo": batch["src_ip_lo"][rows],
                "dst_hi": batch["dest_ip_hi"][rows], "dst_lo": batch["dest_ip_lo"][rows],
                "sport": batch["src_port"][rows], "dport": batch["dest_port"][rows]}
        keys = _direction_key(*(cols[name] for name in FLOW_FIELDS))
        at, announced = find_sorted(self.limit_keys, keys)
        if not self.begins_capture and not announced.all():
            unknown = np.flatnonzero(~announced)
            self._keep_pending(batch, rows[unknown], keys[unknown], {k: v[unknown] for k, v in cols.items()})
        sel = np.flatnonzero(announced)
        sel = sel[payload[rows[sel]] > self.limit_mss[at[sel]]]
        if len(sel) == 0:
            return
        rows, keys, mss = rows[sel], keys[sel], self.limit_mss[at[sel]]
        cols = {name: col[sel] for name, col in cols.items()}
        ts, frames = batch["ts_ns"][rows], batch["frame"][rows]
        size, ip_len = payload[rows], batch["ip_len"][rows]
        on_wire = ip_len <= self.params["link_mtu_bytes"]
        known = np.array(sorted(self.flows), dtype=np.uint64)
        fresh = np.unique(keys[~member(keys, known)])[:max(MAX_FLOWS - len(self.flows), 0)]
        order, starts, counts = group_by(keys)
        tracked = member(keys[order[starts]], known) | member(keys[order[starts]], fresh)
        for start, count in zip(starts[tracked].tolist(), counts[tracked].tolist()):
            mine = order[start:start + count]
            key = int(keys[mine[0]])
            flow = self.flows.get(key)
            if flow is None:
                i = mine[0]
                flow = {name: int(cols[name][i]) for name in FLOW_FIELDS}
                flow.update(mss=int(mss[i]), count=0, on_wire=0, largest=0, largest_on_wire=0,
                            first_ns=int(ts[i]), last_ns=int(ts[i]), frames=np.zeros(0, dtype=np.int64))
                self.flows[key] = flow
            wire = mine[on_wire[mine]]
            flow["count"] += len(mine)
            flow["on_wire"] += len(wire)
            flow["largest"] = max(flow["largest"], int(size[mine].max()))
            if len(wire):
                flow["largest_on_wire"] = max(flow["largest_on_wire"], int(size[wire].max()))
            flow["first_ns"] = min(flow["first_ns"], int(ts[mine].min()))
            flow["last_ns"] = max(flow["last_ns"], int(ts[mine].max()))
            flow["frames"] = keep_ends(flow["frames"], frames[mine])

    def _keep_pending(self, batch: PacketBatch, rows: np.ndarray, keys: np.ndarray, cols: dict) -> None:
        """Group segments of unannounced directions by direction, payload size and fit, into `pending`."""
        payload = batch["payload_len"][rows].astype(np.uint32)
        wire = batch["ip_len"][rows] <= self.params["link_mtu_bytes"]
        ts, frames = batch["ts_ns"][rows], batch["frame"][rows].astype(np.int64)
        order, starts, counts = group_by(_group_key(keys, payload, wire))
        first = order[starts]
        part = {"key": keys[first], "payload": payload[first], "wire": wire[first], "count": counts.astype(np.int64),
                "first_ns": np.minimum.reduceat(ts[order], starts), "last_ns": np.maximum.reduceat(ts[order], starts),
                **{name: cols[name][first].astype(PENDING_COLUMNS[name]) for name in FLOW_FIELDS}}
        kept = np.ones(len(starts), dtype=bool)
        for g, (start, count) in enumerate(zip(starts.tolist(), counts.tolist())):
            name = (int(part["key"][g]), int(part["payload"][g]), bool(part["wire"][g]))
            before = self.pending_frames.get(name)
            if before is None and len(self.pending_frames) >= MAX_PENDING_GROUPS:
                kept[g] = False
                self.dropped_pending += count
                continue
            self.pending_frames[name] = append_ends(frames[:0] if before is None else before,
                                                    frames[order[start:start + count]])
        self.pending = _fold_pending(self.pending, {name: col[kept] for name, col in part.items()})

    def _judge_pending(self, other: MssViolation) -> None:
        """`other`'s pending segments (a later part) judged against this state's announcements, which precede them;
        those of directions this state has not announced either stay pending, unless it begins the capture."""
        pending = other.pending
        at, known = find_sorted(self.limit_keys, pending["key"])
        mss = np.zeros(len(at), dtype=np.int64)
        mss[known] = self.limit_mss[at[known]]
        violating = np.flatnonzero(known & (pending["payload"] > mss))
        for i in violating[np.lexsort((pending["payload"][violating], pending["key"][violating]))].tolist():
            key, size, wire = int(pending["key"][i]), int(pending["payload"][i]), bool(pending["wire"][i])
            flow = self.flows.get(key)
            if flow is None:
                if len(self.flows) >= MAX_FLOWS:
                    continue
                flow = {name: int(pending[name][i]) for name in FLOW_FIELDS}
                flow.update(mss=int(mss[i]), count=0, on_wire=0, largest=0, largest_on_wire=0,
                            first_ns=int(pending["first_ns"][i]), last_ns=int(pending["last_ns"][i]),
                            frames=np.zeros(0, dtype=np.int64))
                self.flows[key] = flow
            count = int(pending["count"][i])
            flow["count"] += count
            flow["largest"] = max(flow["largest"], size)
            if wire:
                flow["on_wire"] += count
                flow["largest_on_wire"] = max(flow["largest_on_wire"], size)
            flow["first_ns"] = min(flow["first_ns"], int(pending["first_ns"][i]))
            flow["last_ns"] = max(flow["last_ns"], int(pending["last_ns"][i]))
            flow["frames"] = keep_ends(flow["frames"], other.pending_frames[(key, size, wire)])
        if self.begins_capture:
            return      # nothing came before this state: what it has not announced never will be
        later = np.flatnonzero(~known)
        kept = np.ones(len(later), dtype=bool)
        for j, i in enumerate(later.tolist()):
            name = (int(pending["key"][i]), int(pending["payload"][i]), bool(pending["wire"][i]))
            before = self.pending_frames.get(name)
            if before is None and len(self.pending_frames) >= MAX_PENDING_GROUPS:
                kept[j] = False
                self.dropped_pending += int(pending["count"][i])
                continue
            theirs = other.pending_frames[name]
            self.pending_frames[name] = theirs if before is None else keep_ends(before, theirs)
        self.pending = _fold_pending(self.pending, {name: col[later[kept]] for name, col in pending.items()})

    def merge(self, other: MssViolation) -> MssViolation:
        """Absorb `other`, the state of the packets that follow this one's: its pending segments are judged
        against this state's announcements first, as one pass would have judged them."""
        check_merge(self, other)
        self._judge_pending(other)
        if self.begins_capture is None:
            self.begins_capture = other.begins_capture
        self.dropped_pending += other.dropped_pending
        self._insert(other.limit_keys, other.limit_mss)
        self.min_mss_v4 = min(self.min_mss_v4, other.min_mss_v4)
        self.min_mss_v6 = min(self.min_mss_v6, other.min_mss_v6)
        self.dropped_announcements += other.dropped_announcements
        for key, theirs in other.flows.items():
            mine = self.flows.get(key)
            if mine is None:
                if len(self.flows) < MAX_FLOWS:
                    self.flows[key] = dict(theirs)
                continue
            for name in ("count", "on_wire"):
                mine[name] += theirs[name]
            for name in ("largest", "largest_on_wire", "last_ns"):
                mine[name] = max(mine[name], theirs[name])
            mine["first_ns"] = min(mine["first_ns"], theirs["first_ns"])
            mine["frames"] = keep_ends(mine["frames"], theirs["frames"])
        return self

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        blackholed = {(f.src_ip, f.dest_ip) for f in ctx.findings.get(PMTUD_BLACKHOLE, [])}
        out = []
        for flow in sorted(self.flows.values(), key=lambda f: (f["first_ns"], f["sport"], f["dport"])):
            out.append(self._finding(flow, ctx, blackholed))
        return out

    def _finding(self, flow: dict, ctx: AnalysisContext, blackholed: set) -> Finding:
        src, dst = ip_text(flow["src_hi"], flow["src_lo"]), ip_text(flow["dst_hi"], flow["dst_lo"])
        sport, dport, mss = flow["sport"], flow["dport"], flow["mss"]
        super_segments = flow["count"] - flow["on_wire"]
        window = (flow["last_ns"] - flow["first_ns"]) / NS
        where = f"{endpoint(src, sport)} -> {endpoint(dst, dport)}"
        if flow["on_wire"] == 0:
            severity = "info"
            msg = (f"{where} sent {plural(flow['count'], 'segment')} of up to {flow['largest']:,} bytes of payload "
                   f"above the MSS {mss} its peer announced, all in packets larger than the "
                   f"{self.params['link_mtu_bytes']}-byte link MTU: TSO/GSO (or GRO) super-segments of a capture "
                   f"taken on a host, not a violation on the wire")
        else:
            severity = self.rule.severity if flow["on_wire"] >= self.params["min_segments"] else "low"
            msg = (f"{where} sent {plural(flow['on_wire'], 'segment')} with up to {flow['largest_on_wire']} bytes of "
                   f"payload over {window:.1f} s although {dst} announced an MSS of {mss} in its SYN")
            if super_segments:
                msg += f" (and {plural(super_segments, 'host-side super-segment')})"
            if (src, dst) in blackholed:
                msg += f"; routers report a smaller path MTU for this host (see {PMTUD_BLACKHOLE})"
        evidence = {
            "peer_mss": mss, "violating_segments": flow["count"], "on_wire_segments": flow["on_wire"],
            "super_segments": super_segments, "largest_payload_bytes": flow["largest"],
            "largest_on_wire_payload_bytes": flow["largest_on_wire"] or None,
            "link_mtu_bytes": self.params["link_mtu_bytes"],
            "pmtud_blackhole": (src, dst) in blackholed,
            "evidence_frames": evidence_frames(flow["frames"]),
        }
        return self.finding(severity, msg, identifier=where, first_seen=flow["first_ns"], last_seen=flow["last_ns"],
                            n=flow["count"], src_ip=src, dest_ip=dst, src_port=sport, dest_port=dport,
                            proto="TCP", community_id=_community_id(ctx, src, sport, dst, dport),
                            evidence={k: v for k, v in evidence.items() if v is not None})


def _community_id(ctx: AnalysisContext, src: str, sport: int, dst: str, dport: int) -> str | None:
    """The flow table's Community ID of this TCP connection, if it has one."""
    return flow_community_id(ctx, src, sport, dst, dport, PROTO_TCP)

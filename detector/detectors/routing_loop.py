"""routing-loop: one packet seen again and again with its TTL falling step by step.

When two routers each send a destination's traffic to the other, every
packet to it circles between them until its TTL (hop limit) runs out. A
capture on the link between them shows the same packet (addresses, IP ID,
length, ports, transport header) many times, its TTL a little lower each
time, its source MAC alternating between the two routers. Traceroute (TTL
rising), a mirror that sees a packet on the way in and out of one router
(two copies, one step) and TCP retransmissions (new IP ID or same TTL) do
not look like that.

State: one summary per packet identity seen more than once (count, first and
last TTL, number of drops, largest step, whether the TTL ever rose, two
source MACs), kept in arrays; identities that qualify as looping are folded
into a per-destination summary once they stop, others are forgotten. Those
seen in the first second of the input wait until merge() or the end, so
partitions cut through a loop merge to the counts of one pass.

A partition that does not begin the capture cannot tell, in its first
second (FINISHED_AFTER_S), which packets continue an identity the partition
before it tracks: one pass picks such a packet although it is seen once in
its batch (the last copy of a looping packet, right after the cut). Those
sightings no rule of its own picks are kept aside as its head (at most
MAX_HEAD_PIECES summaries, the earliest) and merge() adds those of the
identities the earlier state still tracks, as one pass counts them.
Residual: a sparse identity whose copies stay more than a batch apart for
longer than that first second, and a head past its bound, count as the
partition alone sees them.
"""
from __future__ import annotations

import ipaddress

import numpy as np
from numba import njit

from ..cpu import kernel
from ..decode.addr import mac_to_str
from ..detect.columns import ip_text
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.evidence import CARRY_OVER_S, batch_tail, evidence_frames
from ..detect.grouping import group_by, member, repeated_rows
from ..detect.hashing import mix64
from ..detect.state import empty_table, fold_rows
from ..findings import Finding
from ..rules import ALERT_SECONDS, COUNT, Param, Range
from ..schema import IP, L_IP4, L_SRC_MAC, PROTO_NAMES, PacketBatch
from ..units import NS, plural

# A packet identity not seen for this long is finished: a looping packet
# crosses the link again within milliseconds, and it dies within 255 hops.
FINISHED_AFTER_S = 1.0
# Transport header bytes that enter the identity: ports, sequence or ICMP
# id/sequence, and (TCP) the checksum at bytes 16-17, which covers the payload.
L4_SAMPLE = (0, 1, 2, 3, 4, 5, 6, 7, 16, 17)
# The columns a router leaves alone; those of absent layers hold 0, so one
# list serves every protocol.
IDENTITY_COLUMNS = ("src_ip_hi", "src_ip_lo", "dest_ip_hi", "dest_ip_lo", "proto", "ip_id", "ip_len",
                    "frag_offset", "src_port", "dest_port", "tcp_seq", "tcp_ack", "icmp_type", "icmp_code")
# Looping packets whose frames are kept for evidence, per destination.
EVIDENCE_PACKETS = 16
# A later partition's head: at most this many identity summaries (module docstring).
MAX_HEAD_PIECES = 1 << 14
# The prefix a finding names: the routes that loop are usually for a prefix.
PREFIX_V4, PREFIX_V6 = 24, 64

CANDIDATE_COLUMNS = {
    "key": np.uint64, "coarse": np.uint64, "count": np.int64, "first_ns": np.int64, "last_ns": np.int64,
    "first_frame": np.int64, "last_frame": np.int64, "ttl_first": np.int64, "ttl_last": np.int64,
    "drops": np.int64, "rises": np.int64, "max_step": np.int64, "mac_a": np.uint64, "mac_b": np.uint64,
    "layers": np.uint32, "src_ip_hi": np.uint64, "src_ip_lo": np.uint64, "dest_ip_hi": np.uint64,
    "dest_ip_lo": np.uint64, "proto": np.uint8,
}
DEST_COLUMNS = {
    "dest_ip_hi": np.uint64, "dest_ip_lo": np.uint64, "mac_a": np.uint64, "mac_b": np.uint64,
    "packets": np.int64, "copies": np.int64, "first_ns": np.int64, "last_ns": np.int64,
    "ttl_first": np.int64, "ttl_last": np.int64, "src_ip_hi": np.uint64, "src_ip_lo": np.uint64,
    "proto": np.uint8, "layers": np.uint32,
}


def _l4_sample(batch: PacketBatch, rows: np.ndarray) -> np.ndarray:
    """A hash of a few transport header bytes of `rows` (bytes past the capture count as 0)."""
    base = batch["offset"][rows] + batch["l4_off"][rows].astype(np.int64)
    end = batch["offset"][rows] + batch["caplen"][rows].astype(np.int64)
    pos = base[:, None] + np.array(L4_SAMPLE, dtype=np.int64)[None, :]
    inside = pos < end[:, None]
    sample = np.where(inside, batch.data[np.where(inside, pos, 0)], 0).astype(np.uint64)
    weights = np.uint64(1) << (np.arange(len(L4_SAMPLE), dtype=np.uint64) * np.uint64(6))
    return (sample * weights[None, :]).sum(axis=1, dtype=np.uint64)


def _identity(batch: PacketBatch) -> np.ndarray:
    """A hash of the header fields a router leaves alone (all but TTL, checksum, MACs), per row."""
    return _identity_kernel(*(batch[name] for name in IDENTITY_COLUMNS))


@njit
def _mix(acc, value):
    # splitmix64's finaliser over a running xor, as base.mix64 does column by column
    acc = (acc ^ value) * np.uint64(0x9E3779B97F4A7C15)
    acc ^= acc >> np.uint64(31)
    acc *= np.uint64(0xBF58476D1CE4E5B9)
    return acc ^ (acc >> np.uint64(29))


@kernel("(u8[::1], u8[::1], u8[::1], u8[::1], u1[::1], u4[::1], u4[::1], u4[::1], u2[::1], u2[::1], "
        "u4[::1], u4[::1], u1[::1], u1[::1])")
def _identity_kernel(src_hi, src_lo, dst_hi, dst_lo, proto, ip_id, ip_len, frag_offset, src_port, dest_port,
                     tcp_seq, tcp_ack, icmp_type, icmp_code):
    # one pass over the columns instead of a numpy temporary per column and step
    out = np.empty(len(src_hi), dtype=np.uint64)
    for i in range(len(src_hi)):
        acc = _mix(np.uint64(0), src_hi[i])
        acc = _mix(acc, src_lo[i])
        acc = _mix(acc, dst_hi[i])
        acc = _mix(acc, dst_lo[i])
        acc = _mix(acc, np.uint64(ip_id[i]) | (np.uint64(ip_len[i]) << np.uint64(32)))
        acc = _mix(acc, np.uint64(src_port[i]) | (np.uint64(dest_port[i]) << np.uint64(16))
                   | (np.uint64(proto[i]) << np.uint64(32)) | (np.uint64(icmp_type[i]) << np.uint64(40))
                   | (np.uint64(icmp_code[i]) << np.uint64(48)))
        acc = _mix(acc, np.uint64(tcp_seq[i]) | (np.uint64(tcp_ack[i]) << np.uint64(32)))
        out[i] = _mix(acc, np.uint64(frag_offset[i]))
    return out


def _combine(a: dict, b: dict) -> dict:
    """Candidate summaries of the same packet identity joined in time order."""
    both = {name: np.concatenate([a[name], b[name]]) for name in CANDIDATE_COLUMNS}
    if len(both["key"]) == 0:
        return both
    order = np.lexsort((both["first_ns"], both["key"]))
    both = {name: col[order] for name, col in both.items()}
    key = both["key"]
    new_group = np.concatenate(([True], key[1:] != key[:-1]))
    starts = np.flatnonzero(new_group)
    ends = np.append(starts[1:], len(key)) - 1
    # the join between consecutive pieces of one identity: the TTL fell, stayed or rose
    joint = ~new_group[1:]
    step = np.where(joint, both["ttl_last"][:-1] - both["ttl_first"][1:], 0)
    gid = np.cumsum(new_group) - 1
    out = {name: both[name][starts] for name in CANDIDATE_COLUMNS}
    for name in ("count", "drops", "rises"):
        out[name] = np.add.reduceat(both[name], starts)
    out["drops"] += np.bincount(gid[1:], weights=(step > 0), minlength=len(starts)).astype(np.int64)
    out["rises"] += np.bincount(gid[1:], weights=(step < 0), minlength=len(starts)).astype(np.int64)
    out["max_step"] = np.maximum(np.maximum.reduceat(both["max_step"], starts),
                                 _group_max(gid[1:], step, len(starts)))
    out["last_ns"] = np.maximum.reduceat(both["last_ns"], starts)
    out["last_frame"] = np.maximum.reduceat(both["last_frame"], starts)
    out["ttl_last"] = both["ttl_last"][ends]
    first_mac = np.repeat(out["mac_a"], np.diff(np.append(starts, len(key))))
    other = np.where(both["mac_a"] != first_mac, both["mac_a"], both["mac_b"])
    out["mac_b"] = np.where(out["mac_b"] != 0, out["mac_b"], np.maximum.reduceat(other, starts))
    return out


def _group_max(gid: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    out = np.zeros(groups, dtype=np.int64)
    np.maximum.at(out, gid, values.astype(np.int64))
    return out


@register
class RoutingLoop(Detector):
    rule_id = "routing-loop"
    EVE_SIGNATURE = (17, "Misc activity")
    PARAMS = {
        # a TTL or hop limit is one byte (RFC 791, RFC 8200): it cannot fall more than 255 times or by more
        "min_ttl_drops": Param(int, 3, "times one packet's TTL must fall while it is seen again", Range(1, 255),
                               "A mirror of a router's ingress and egress sees one fall; a path of mirrored routers "
                               "one per hop. Higher values need longer loops (a loop usually runs until the TTL "
                               "expires, tens of times); lower ones confuse mirrored paths with loops."),
        "max_ttl_step": Param(int, 4, "largest TTL fall between two sightings (the routers in the loop)",
                              Range(1, 255),
                              "1 on the link between two routers seeing both directions, 2 when only one direction "
                              "is captured, more for a loop through more routers. Larger values accept bigger loops "
                              "but also unrelated packets that happen to share an identity."),
        "high_packets": Param(int, 100, "looping packets toward one prefix from which the finding is high", COUNT,
                              "One stray packet is a symptom, hundreds are an outage for that prefix; lower values "
                              "call a brief loop while routing converges high."),
    }
    ALERTS = {
        "suppress_s": Param(float, 60.0, "least seconds between two events about one looping destination",
                            ALERT_SECONDS,
                            "Shorter follows the loop closely but floods alerts.jsonl while routing converges."),
        "resolve_s": Param(float, 10.0, "seconds without a looping packet before the loop is resolved",
                           ALERT_SECONDS,
                           "Routing loops come and go as routes flap, so a short hold may resolve too early; a "
                           "longer one delays the all-clear."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.cand = empty_table(CANDIDATE_COLUMNS)
        self.dest = empty_table(DEST_COLUMNS)
        self.start_ns: int | None = None      # the earliest time this state has seen
        # destination -> (first time, first frame, last frame) of its EVIDENCE_PACKETS earliest looping packets:
        # chosen by time, not by when each was seen to finish, so a partitioned run keeps the same ones
        self.evidence: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
        # a partition after the first: its first second's sightings picked by no rule of its own, and the end
        # of that head (None: nothing read yet, or the state begins the capture and has no head)
        self.begins_capture: bool | None = None
        self.head_end_ns: int | None = None
        self.head = empty_table(CANDIDATE_COLUMNS)

    def update(self, batch: PacketBatch) -> None:
        if len(batch) == 0:
            return
        first = int(batch["ts_ns"].min())
        self.start_ns = first if self.start_ns is None else min(self.start_ns, first)
        if self.begins_capture is None:
            self.begins_capture = int(batch["frame"][0]) == 1
            if not self.begins_capture:
                self.head_end_ns = first + int(FINISHED_AFTER_S * NS)
        # the identity from header columns first (absent layers hold 0, non-IP
        # rows are dropped below); the transport bytes only for repeats
        coarse = _identity(batch)
        tracked = np.unique(self.cand["coarse"])
        tail = batch_tail(batch["ts_ns"])
        ip = (batch["layers"] & np.uint32(IP)) != 0
        picked = (repeated_rows(coarse) | member(coarse, tracked) | tail) & ip
        rows = np.flatnonzero(picked)
        if len(rows):
            # a packet whose TTL never changed in this batch is a repeat, not a loop
            order, starts, counts = group_by(coarse[rows])
            rows = rows[order]
            ttl = batch["ttl"][rows]
            varies = np.minimum.reduceat(ttl, starts) != np.maximum.reduceat(ttl, starts)
            varies |= member(coarse[rows[starts]], tracked) | tail[rows[starts + counts - 1]]
            rows = rows[np.repeat(varies, counts)]
            if len(rows):
                self.cand = _combine(self.cand, self._pieces(batch, rows, coarse[rows]))
        if self.head_end_ns is not None and first < self.head_end_ns:
            aside = ip & (batch["ts_ns"] < self.head_end_ns)
            aside[rows] = False
            self._keep_head(batch, np.flatnonzero(aside), coarse)
        self._finish(int(batch["ts_ns"].max()))

    def _keep_head(self, batch: PacketBatch, rows: np.ndarray, coarse: np.ndarray) -> None:
        """Keep the sightings `rows` of a later partition's first second aside (module docstring), bounded."""
        if len(rows) == 0 or len(self.head["key"]) >= MAX_HEAD_PIECES:
            return
        head = _combine(self.head, self._pieces(batch, rows, coarse[rows]))
        if len(head["key"]) > MAX_HEAD_PIECES:
            keep = np.sort(np.argsort(head["first_ns"], kind="stable")[:MAX_HEAD_PIECES])
            head = {name: col[keep] for name, col in head.items()}
        self.head = head

    def _pieces(self, batch: PacketBatch, rows: np.ndarray, coarse: np.ndarray) -> dict:
        """The candidate summaries (CANDIDATE_COLUMNS) of the sightings `rows`, one per packet identity."""
        key = mix64(coarse, _l4_sample(batch, rows))
        order, starts, counts = group_by(key)
        rows, coarse, key = rows[order], coarse[order], key[order]
        ends = starts + counts - 1
        ttl = batch["ttl"][rows].astype(np.int64)
        gid = np.repeat(np.arange(len(starts)), counts)
        joint = gid[1:] == gid[:-1]
        step = np.where(joint, ttl[:-1] - ttl[1:], 0)
        mac = np.where((batch["layers"][rows] & np.uint32(L_SRC_MAC)) != 0, batch["src_mac"][rows], 0)
        mac = mac.astype(np.uint64)
        first_mac = np.repeat(mac[starts], counts)
        part = {
            "key": key[starts], "coarse": coarse[starts], "count": counts.astype(np.int64),
            "first_ns": np.minimum.reduceat(batch["ts_ns"][rows], starts),
            "last_ns": np.maximum.reduceat(batch["ts_ns"][rows], starts),
            "first_frame": batch["frame"][rows[starts]], "last_frame": batch["frame"][rows[ends]],
            "ttl_first": ttl[starts], "ttl_last": ttl[ends],
            "drops": np.bincount(gid[1:], weights=step > 0, minlength=len(starts)).astype(np.int64),
            "rises": np.bincount(gid[1:], weights=step < 0, minlength=len(starts)).astype(np.int64),
            "max_step": _group_max(gid[1:], step, len(starts)),
            "mac_a": mac[starts],
            "mac_b": np.maximum.reduceat(np.where(mac != first_mac, mac, np.uint64(0)), starts),
        }
        for name in ("layers", "src_ip_hi", "src_ip_lo", "dest_ip_hi", "dest_ip_lo", "proto"):
            part[name] = batch[name][rows[starts]].astype(CANDIDATE_COLUMNS[name])
        return part

    def _looping(self, cand: dict) -> np.ndarray:
        p = self.params
        two_macs = ((cand["layers"] & np.uint32(L_SRC_MAC)) == 0) | (cand["mac_b"] != 0)
        return ((cand["drops"] >= p["min_ttl_drops"]) & (cand["rises"] == 0)
                & (cand["max_step"] <= p["max_ttl_step"]) & two_macs)

    def _finish(self, now_ns: int) -> None:
        """Fold finished looping identities into per-destination summaries; forget finished others."""
        cand = self.cand
        if len(cand["key"]) == 0:
            return
        horizon = int(FINISHED_AFTER_S * NS)
        # a single sighting carried over from a batch's tail is forgotten sooner;
        # identities seen near the start of this input may continue a loop that
        # began in an earlier partition: they wait for merge() or the end
        idle = np.where(cand["count"] > 1, horizon, int(CARRY_OVER_S * NS))
        done = (cand["last_ns"] < now_ns - idle) & (cand["first_ns"] >= self.start_ns + horizon)
        if not done.any():
            return
        loop = done & self._looping(cand)
        if loop.any():
            self.dest = _add_destinations({name: col[loop] for name, col in cand.items()}, self.dest, self.evidence)
        self.cand = {name: col[~done] for name, col in cand.items()}

    def merge(self, other: RoutingLoop) -> RoutingLoop:
        check_merge(self, other)
        if other.begins_capture is None:
            return self
        if self.begins_capture is None:
            self.__dict__.update(other.__dict__)
            return self
        starts = [t for t in (self.start_ns, other.start_ns) if t is not None]
        self.start_ns = min(starts) if starts else None
        theirs = other.cand
        if len(other.head["key"]):
            # the later part's head sightings of identities this state still tracks: one pass picked them
            alive = member(other.head["coarse"], np.unique(self.cand["coarse"]))
            theirs = _combine(theirs, {name: col[alive] for name, col in other.head.items()})
        self.cand = _combine(self.cand, theirs)
        self.dest = _combine_dest(self.dest, other.dest)
        for dst, packets in other.evidence.items():
            self.evidence[dst] = _earliest(self.evidence.get(dst, []) + packets)
        return self

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        # identities still in flight count as they stand, without ending them:
        # findings() may be asked for in the middle of a live capture
        evidence = {dst: list(frames) for dst, frames in self.evidence.items()}
        loop = self._looping(self.cand)
        dest = self.dest
        if loop.any():
            dest = _add_destinations({name: col[loop] for name, col in self.cand.items()}, dest, evidence)
        if len(dest["packets"]) == 0:
            return []
        v4 = (dest["layers"] & np.uint32(L_IP4)) != 0
        prefix_lo = np.where(v4, dest["dest_ip_lo"] & np.uint64(~((1 << (32 - PREFIX_V4)) - 1) & (2**64 - 1)),
                             np.uint64(0))
        prefix_hi = dest["dest_ip_hi"]
        order, starts, counts = group_by(mix64(prefix_hi, prefix_lo, dest["mac_a"], dest["mac_b"]))
        out = []
        for start, count in zip(starts.tolist(), counts.tolist()):
            idx = order[start:start + count]
            head = order[start]         # the members share the prefix and its family: any one names them
            out.append(self._finding({name: col[idx] for name, col in dest.items()}, evidence,
                                     int(prefix_hi[head]), int(prefix_lo[head]), bool(v4[head])))
        out.sort(key=lambda f: (-f.n, f.first_seen))
        return out

    def _finding(self, d: dict, evidence_by_dst: dict, prefix_hi: int, prefix_lo: int, v4: bool) -> Finding:
        packets, copies = int(d["packets"].sum()), int(d["copies"].sum())
        t0, t1 = int(d["first_ns"].min()), int(d["last_ns"].max())
        first = int(np.argmin(d["first_ns"]))
        net = ipaddress.ip_network(f"{ip_text(prefix_hi, prefix_lo)}/{PREFIX_V4 if v4 else PREFIX_V6}")
        destinations = sorted({ip_text(hi, lo) for hi, lo in zip(d["dest_ip_hi"].tolist(), d["dest_ip_lo"].tolist())})
        sources = set(zip(d["src_ip_hi"].tolist(), d["src_ip_lo"].tolist()))
        routers = [mac_to_str(m) for m in (d["mac_a"][first], d["mac_b"][first]) if int(m)]
        frames = []
        for hi, lo in zip(d["dest_ip_hi"].tolist(), d["dest_ip_lo"].tolist()):
            for _, first_frame, last_frame in evidence_by_dst.get((hi, lo), []):
                frames += [first_frame, last_frame]
        ttl_from, ttl_to = int(d["ttl_first"][first]), int(d["ttl_last"][first])
        severity = "high" if packets >= self.params["high_packets"] else self.rule.severity
        where = f" between {routers[0]} and {routers[1]}" if len(routers) == 2 else ""
        proto = PROTO_NAMES.get(int(d["proto"][first]), str(int(d["proto"][first])))
        msg = (f"{plural(packets, 'packet')} to {net} looped{where} in {(t1 - t0) / 1e9:.3f} s: {copies:,} sightings, "
               f"{copies / packets:.1f} per packet, TTL falling (e.g. {ttl_from} to {ttl_to})")
        fields = {"dest_ip": destinations[0] if len(destinations) == 1 else None, "proto": proto,
                  "src_ip": ip_text(d["src_ip_hi"][first], d["src_ip_lo"][first]) if len(sources) == 1 else None}
        if len(routers) == 2:
            fields.update(src_mac=routers[0], dest_mac=routers[1])
        evidence = {
            "prefix": str(net), "destinations": destinations[:10], "destination_count": len(destinations),
            "sources": len(sources), "looping_packets": packets, "sightings": copies,
            "router_macs": routers, "ttl_first": ttl_from, "ttl_last": ttl_to,
            "evidence_frames": evidence_frames(np.unique(np.array(frames, dtype=np.int64))),
        }
        # one finding per destination prefix and pair of routers: what the loop is
        identifier = " ".join((str(net), *routers))
        return self.finding(severity, msg, identifier=identifier, first_seen=t0, last_seen=t1, n=packets,
                            evidence=evidence,
                            **{k: v for k, v in fields.items() if v is not None})


def _add_destinations(c: dict, dest: dict, evidence: dict) -> dict:
    """`dest` with the looping identities `c` added; frames of their first packets go into `evidence`."""
    part = {name: c[name] for name in ("dest_ip_hi", "dest_ip_lo", "mac_a", "mac_b", "first_ns", "last_ns",
                                       "ttl_first", "ttl_last", "src_ip_hi", "src_ip_lo", "proto", "layers")}
    part["packets"] = np.ones(len(c["key"]), dtype=np.int64)
    part["copies"] = c["count"]
    # one pair of routers, whichever of the two was seen first
    part["mac_a"], part["mac_b"] = np.minimum(c["mac_a"], c["mac_b"]), np.maximum(c["mac_a"], c["mac_b"])
    # per destination its earliest EVIDENCE_PACKETS identities (by first sighting, then frame)
    order = np.lexsort((c["first_frame"], c["first_ns"], c["dest_ip_lo"], c["dest_ip_hi"]))
    hi, lo = c["dest_ip_hi"][order], c["dest_ip_lo"][order]
    new = np.concatenate(([True], (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1]))) if len(order) else np.zeros(0, bool)
    starts = np.flatnonzero(new)
    rank = np.arange(len(order)) - np.repeat(starts, np.diff(np.append(starts, len(order))))
    added: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for i in order[rank < EVIDENCE_PACKETS].tolist():
        added.setdefault((int(c["dest_ip_hi"][i]), int(c["dest_ip_lo"][i])), []).append(
            (int(c["first_ns"][i]), int(c["first_frame"][i]), int(c["last_frame"][i])))
    for dst, packets in added.items():
        evidence[dst] = _earliest(evidence.get(dst, []) + packets)
    return _combine_dest(dest, part)


def _earliest(packets: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The EVIDENCE_PACKETS earliest of one destination's (first time, first frame, last frame), in time order."""
    return sorted(set(packets))[:EVIDENCE_PACKETS]


def _combine_dest(a: dict, b: dict) -> dict:
    def destination(rows):
        return mix64(rows["dest_ip_hi"], rows["dest_ip_lo"], rows["mac_a"], rows["mac_b"])
    return fold_rows(a, b, destination, {"packets": np.add, "copies": np.add, "last_ns": np.maximum})

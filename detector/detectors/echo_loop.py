"""echo-loop: one frame, byte for byte identical, seen many times at a high rate.

Two devices that bounce a frame back and forth unchanged (a router that
echoes UDP 520/521 and a transparent NAT that bridges it back without
touching TTL or MACs) fill a link with copies of a single frame. A capture
shows one fingerprint (hash of the frame's bytes) thousands of times per
second. Mirror ports (each frame twice), byte-identical TCP retransmissions
and periodic identical frames (keepalives, BPDUs) repeat too, but few times
or slowly: the thresholds on copies and rate keep them out.

State: for each fingerprint that repeats, its count, first/last time and
frame, and the header fields of its first copy, kept in arrays sorted by
fingerprint. Fingerprints that stop repeating before reaching `min_copies`
are dropped, so the state stays near the number of live candidates.
"""
from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..flows.community_id import community_id
from ..schema import (IP, L_DST_MAC, L_ETHERTYPE, L_PORTS, L_SRC_MAC, L_VLAN, PROTO_NAMES,
                      PacketBatch)
from .base import (CARRY_OVER_S, AnalysisContext, Detector, batch_tail, check_merge, frame_summary,
                   fold_rows, group_by, ip_text, keep_ends, mac_text, member, register, repeated_keys)

NS = 1_000_000_000
# Bytes of a looping frame kept to show it decoded in the finding: every
# header the summary shows fits; the rest of a large payload adds nothing.
FRAME_BYTES_KEPT = 512
# A rate measured over less than this is no rate: copies stamped within the
# same clock tick (second-resolution pcaps) would give an infinite one.
MIN_RATE_WINDOW_S = 0.001
# A candidate that has not reached `min_copies` is forgotten once it has not
# been seen for this many copy intervals at `min_rate_pps`: a loop at the
# minimum rate would have shown up again long before.
FORGET_AFTER_COPIES = 10

# the header fields of the first copy, kept per candidate (name -> dtype)
DESCRIPTOR_COLUMNS = {
    "layers": np.uint32, "linktype": np.uint16, "src_mac": np.uint64, "dst_mac": np.uint64,
    "vlan_outer": np.uint16, "ethertype": np.uint16, "ip_version": np.uint8,
    "src_ip_hi": np.uint64, "src_ip_lo": np.uint64, "dst_ip_hi": np.uint64, "dst_ip_lo": np.uint64,
    "proto": np.uint8, "ttl": np.uint8, "ip_id": np.uint32, "src_port": np.uint16,
    "dst_port": np.uint16, "caplen": np.uint32,
}
STATE_COLUMNS = {"fp": np.uint64, "count": np.int64, "first_ns": np.int64, "last_ns": np.int64,
                 "first_frame": np.int64, "last_frame": np.int64, **DESCRIPTOR_COLUMNS}


def _empty_state() -> dict[str, np.ndarray]:
    return {name: np.zeros(0, dtype=dtype) for name, dtype in STATE_COLUMNS.items()}


def _combine(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Two candidate tables as one, one row per fingerprint; the earliest copy describes it."""
    return fold_rows(a, b, "fp", {"count": np.add, "last_ns": np.maximum,
                                  "first_frame": np.minimum, "last_frame": np.maximum})


@register
class EchoLoop(Detector):
    rule_id = "echo-loop"
    PARAMS = {
        "min_copies": (int, 1000, "identical copies of one frame before it counts as a loop"),
        "min_rate_pps": (float, 200.0, "copies per second (count over first-to-last time) a loop reaches"),
        "high_rate_pps": (float, 5000.0, "rate from which the finding is high"),
        "critical_rate_pps": (float, 50000.0, "rate from which the finding is critical"),
        "high_share_ratio": (float, 0.2, "share of all packets from first to last copy from which it is high"),
        "critical_share_ratio": (float, 0.5,
                                 "share of all packets from which it is critical (with high_rate_pps reached)"),
    }

    def __init__(self, rule):
        super().__init__(rule)
        self.state = _empty_state()
        self.evidence: dict[int, np.ndarray] = {}     # fingerprint -> kept frame numbers (hot candidates)
        self.frame_bytes: dict[int, tuple[bytes, int]] = {}   # fingerprint -> (first bytes, linktype)

    # ---- state ------------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        if len(batch) == 0:
            return
        ts = batch["ts_ns"]
        fp = batch["fingerprint"]
        picked = member(fp, repeated_keys(fp)) | member(fp, self.state["fp"]) | batch_tail(ts)
        rows = np.flatnonzero(picked)
        if len(rows):
            order, starts, counts = group_by(fp[rows])
            rows = rows[order]
            first, last = rows[starts], rows[starts + counts - 1]
            part = {name: batch[name][first].astype(dtype) for name, dtype in DESCRIPTOR_COLUMNS.items()}
            part.update(fp=fp[first], count=counts.astype(np.int64),
                        first_ns=np.minimum.reduceat(ts[rows], starts),
                        last_ns=np.maximum.reduceat(ts[rows], starts),
                        first_frame=batch["frame"][first], last_frame=batch["frame"][last])
            self.state = _combine(self.state, part)
            self._keep_evidence(batch, rows, starts, counts)
        self._forget(int(ts.max()))

    def _keep_evidence(self, batch, rows, starts, counts) -> None:
        """Frame numbers (bounded) and the bytes of candidates that have reached min_copies."""
        state = self.state
        hot = np.sort(state["fp"][state["count"] >= self.params["min_copies"]])
        fp, frames = batch["fingerprint"], batch["frame"]
        for g in np.flatnonzero(member(fp[rows[starts]], hot)):
            span = rows[starts[g]:starts[g] + counts[g]]
            key = int(fp[span[0]])
            if key not in self.evidence:
                at = int(np.searchsorted(state["fp"], fp[span[0]]))
                self.evidence[key] = np.array([state["first_frame"][at]], dtype=np.int64)
                self.frame_bytes[key] = (batch.frame_bytes(int(span[0]))[:FRAME_BYTES_KEPT],
                                         int(batch["linktype"][span[0]]))
            self.evidence[key] = keep_ends(self.evidence[key], frames[span])

    def _forget(self, now_ns: int) -> None:
        rate = self.params["min_rate_pps"]
        if rate <= 0:
            return
        horizon = max(int(FORGET_AFTER_COPIES / rate * NS), int(CARRY_OVER_S * NS))
        state = self.state
        keep = (state["count"] >= self.params["min_copies"]) | (state["last_ns"] >= now_ns - horizon)
        if not keep.all():
            self.state = {name: col[keep] for name, col in state.items()}

    def merge(self, other: "EchoLoop") -> "EchoLoop":
        check_merge(self, other)
        self.state = _combine(self.state, other.state)
        for key, frames in other.evidence.items():
            self.evidence[key] = keep_ends(self.evidence.get(key, frames[:0]), frames)
        for key, value in other.frame_bytes.items():
            self.frame_bytes.setdefault(key, value)
        return self

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
            out.append(self._finding(i, float(duration_s[i]), float(rate[i])))
        return out

    def _finding(self, i: int, duration_s: float, rate: float) -> Finding:
        row = {name: col[i] for name, col in self.state.items()}
        key, count, layers = int(row["fp"]), int(row["count"]), int(row["layers"])
        # frame numbers run across the whole input: the span from the first copy
        # to the last counts every packet captured meanwhile, the copies included
        share = count / max(int(row["last_frame"]) - int(row["first_frame"]) + 1, count)
        fields: dict = {}
        if layers & L_SRC_MAC:
            fields["src_mac"] = mac_text(row["src_mac"])
        if layers & L_DST_MAC:
            fields["dest_mac"] = mac_text(row["dst_mac"])
        what = f"ethertype 0x{int(row['ethertype']):04x}" if layers & L_ETHERTYPE else "non-IP frame"
        ttl_text = ""
        if layers & IP:
            proto = PROTO_NAMES.get(int(row["proto"]), str(int(row["proto"])))
            fields.update(src_ip=ip_text(row["src_ip_hi"], row["src_ip_lo"]),
                          dest_ip=ip_text(row["dst_ip_hi"], row["dst_ip_lo"]), proto=proto.upper())
            src, dst = fields["src_ip"], fields["dest_ip"]
            if layers & L_PORTS:
                fields.update(src_port=int(row["src_port"]), dest_port=int(row["dst_port"]))
                src, dst = f"{src}:{fields['src_port']}", f"{dst}:{fields['dest_port']}"
            fields["community_id"] = community_id(fields["src_ip"], fields["dest_ip"], int(row["proto"]),
                                                  fields.get("src_port"), fields.get("dest_port"))
            what = f"{proto.upper()} {src} -> {dst}"
            ttl_text = f", TTL {int(row['ttl'])} never decremented"
        macs = (f" between {fields['src_mac']} and {fields['dest_mac']}"
                if "src_mac" in fields and "dest_mac" in fields else "")
        raw, linktype = self.frame_bytes.get(key, (b"", int(row["linktype"])))
        frames = self.evidence.get(key, np.array([row["first_frame"], row["last_frame"]]))
        evidence = {
            "fingerprint": f"{key:016x}",
            "copies": count,
            "duration_s": round(duration_s, 6),
            "rate_pps": round(rate, 1),
            "share_ratio": round(share, 4),
            "ttl": int(row["ttl"]) if layers & IP else None,
            "ip_id": int(row["ip_id"]) if layers & IP else None,
            "vlan": int(row["vlan_outer"]) if layers & L_VLAN else None,
            "frame_bytes": int(row["caplen"]),
            "frame": frame_summary(raw, linktype) if raw else what,
            "first_frame": int(row["first_frame"]),
            "evidence_frames": np.unique(frames).tolist(),
        }
        msg = (f"one frame seen {count:,} times in {duration_s:.3f} s ({rate:,.0f}/s, "
               f"{share:.0%} of all packets meanwhile){macs}: {what}{ttl_text}")
        return self.finding(self._severity(rate, share), msg, first_seen=int(row["first_ns"]),
                            last_seen=int(row["last_ns"]), n=count,
                            evidence={k: v for k, v in evidence.items() if v is not None}, **fields)

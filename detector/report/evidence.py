"""The evidence pass: one more read of the captures that copies each finding's frames into a pcap of its own
and computes the time series the report draws.

Frames are picked by number (np.isin on the batch's frame column), never by
re-matching packets, so the evidence is exactly what the detector saw. The
records are copied byte for byte with their original timestamps.
"""
from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field

import numpy as np

from ..capfile import Segment, capture_format, write_records
from ..detectors.base import frame_summary
from ..engine import decoded_batches
from ..findings import Finding
from ..output import EVIDENCE, OutputDir
from ..schema import IP, L_PAYLOAD, L_TCP
from .reproduce import write_reproducer

# Packets drawn per PMTUD flow: the pattern (full-size segments never shrinking)
# shows in the first few thousand; the bound holds for a flow of any length.
SEGMENT_POINTS_MAX = 20000
# Points of the packets/s and loop-rate series: enough to see the shape of an
# incident, bounded whatever the capture's duration or its timestamps claim.
SERIES_BINS_MAX = 600


@dataclass
class Series:
    """Per-bin counts over the capture's time span (bin `i` starts at `start_ns + i * bin_ns`)."""

    start_ns: int
    bin_ns: int
    packets: np.ndarray
    loops: dict[int, np.ndarray] = field(default_factory=dict)    # finding index -> copies per bin
    rss: np.ndarray | None = None                                 # packets per [bin, receive queue]
    # finding index -> (seconds after start_ns, TCP payload bytes, True when sent by the finding's src_ip)
    segments: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)


@dataclass
class EvidenceResult:
    series: Series | None
    files: list[str] = field(default_factory=list)             # written, relative to the output folder
    summaries: dict[int, str] = field(default_factory=dict)      # finding index -> first evidence frame decoded
    reproducers: dict[int, str] = field(default_factory=dict)    # finding index -> script path in the output


def _wanted(findings: list[Finding]) -> np.ndarray:
    frames = [np.asarray(f.evidence.get("evidence_frames", []), dtype=np.int64) for f in findings]
    return np.unique(np.concatenate(frames)) if frames else np.zeros(0, dtype=np.int64)


def _loop_fingerprints(findings: list[Finding]) -> dict[int, int]:
    """Finding index -> fingerprint (uint64) of the looping frame, for the echo-loop findings."""
    out = {}
    for i, f in enumerate(findings):
        text = f.evidence.get("fingerprint") if f.rule == "echo-loop" else None
        if isinstance(text, str):
            try:
                out[i] = int(text, 16)
            except ValueError:
                continue
    return out


def _address(text) -> tuple[int, int] | None:
    """The schema's (hi, lo) halves of an address text; IPv4 as IPv4-mapped IPv6."""
    try:
        value = ipaddress.ip_address(text)
    except ValueError:
        return None
    number = int(value) | (0xFFFF << 32) if value.version == 4 else int(value)
    return number >> 64, number & 0xFFFFFFFFFFFFFFFF


def _segment_flows(findings: list[Finding]) -> dict[int, tuple]:
    """Finding index -> (src hi, src lo, dst hi, dst lo, src port, dst port) of the pmtud-blackhole TCP flows."""
    out = {}
    for i, f in enumerate(findings):
        if f.rule != "pmtud-blackhole" or f.src_port is None or f.dest_port is None:
            continue
        src, dst = _address(f.src_ip), _address(f.dest_ip)
        if src and dst:
            out[i] = (*src, *dst, f.src_port, f.dest_port)
    return out


def _flow_rows(batch, key) -> tuple[np.ndarray, np.ndarray]:
    """Rows of one TCP flow in the batch (either direction) and whether each goes src -> dst."""
    shi, slo, dhi, dlo, sport, dport = key
    c = batch.cols
    tcp = (c["layers"] & np.uint32(L_TCP | L_PAYLOAD)) == np.uint32(L_TCP | L_PAYLOAD)

    def side(a_hi, a_lo, b_hi, b_lo, a_port, b_port):
        return ((c["src_ip_hi"] == np.uint64(a_hi)) & (c["src_ip_lo"] == np.uint64(a_lo))
                & (c["dst_ip_hi"] == np.uint64(b_hi)) & (c["dst_ip_lo"] == np.uint64(b_lo))
                & (c["src_port"] == a_port) & (c["dst_port"] == b_port))
    forward = tcp & side(shi, slo, dhi, dlo, sport, dport)
    backward = tcp & side(dhi, dlo, shi, slo, dport, sport)
    rows = np.flatnonzero(forward | backward)
    return rows, forward[rows]


def _time_bins(first_ns: int | None, last_ns: int | None) -> tuple[int, int, int]:
    if first_ns is None or last_ns is None:
        return 0, 1, 0
    span = max(last_ns - first_ns, 1)
    # whole milliseconds, at least 1 ms per bin
    bin_ns = max(1_000_000, math.ceil(span / SERIES_BINS_MAX / 1_000_000) * 1_000_000)
    return first_ns, bin_ns, min(SERIES_BINS_MAX, span // bin_ns + 1)


def _bin_counts(ts: np.ndarray, start_ns: int, bin_ns: int, bins: int) -> np.ndarray:
    idx = (ts - start_ns) // bin_ns
    idx = idx[(idx >= 0) & (idx < bins)]
    return np.bincount(idx, minlength=bins).astype(np.int64)


def collect(paths, findings: list[Finding], first_ns: int | None, last_ns: int | None, rss_model=None):
    """One pass over `paths`: the evidence records by frame number, and the report's series.

    `rss_model` (the rss-saturation detector's RssModel) adds the packets per
    receive queue and time bin, when an rss-saturation finding is there.

    Returns (records, series): records maps frame number -> (ts_ns, wirelen,
    linktype, bytes, source file).
    """
    wanted = _wanted(findings)
    loops = _loop_fingerprints(findings)
    start_ns, bin_ns, bins = _time_bins(first_ns, last_ns)
    series = Series(start_ns, bin_ns, np.zeros(bins, dtype=np.int64),
                    {i: np.zeros(bins, dtype=np.int64) for i in loops})
    if rss_model is not None and any(f.rule == "rss-saturation" for f in findings) and bins:
        series.rss = np.zeros((bins, rss_model.queues), dtype=np.int64)
    flows = _segment_flows(findings)
    points: dict[int, list] = {i: [] for i in flows}
    kept = dict.fromkeys(flows, 0)
    records: dict[int, tuple[int, int, int, bytes, str]] = {}
    for _reader, batch in decoded_batches(paths, fingerprint=bool(loops)):
        ts = batch["ts_ns"]
        if bins:
            series.packets += _bin_counts(ts, start_ns, bin_ns, bins)
            for i, fp in loops.items():
                series.loops[i] += _bin_counts(ts[batch["fingerprint"] == np.uint64(fp)], start_ns, bin_ns, bins)
            if series.rss is not None:
                ip = (batch["layers"] & np.uint32(IP)) != 0
                idx = (ts[ip] - start_ns) // bin_ns
                queue = rss_model.queue(batch)[ip].astype(np.int64)
                inside = (idx >= 0) & (idx < bins)
                series.rss += np.bincount(idx[inside] * rss_model.queues + queue[inside],
                                          minlength=bins * rss_model.queues).reshape(bins, rss_model.queues)
        for i, key in flows.items():
            rows, forward = _flow_rows(batch, key)
            room = SEGMENT_POINTS_MAX - kept[i]
            rows, forward = rows[:room], forward[:room]
            kept[i] += len(rows)
            points[i].append(((ts[rows] - start_ns) / 1e9, batch["payload_len"][rows].astype(np.int64), forward))
        if len(wanted) == 0:
            continue
        for row in np.flatnonzero(np.isin(batch["frame"], wanted)):
            records[int(batch["frame"][row])] = (int(ts[row]), int(batch["wirelen"][row]),
                                                 int(batch["linktype"][row]), batch.frame_bytes(int(row)),
                                                 batch.source)
    for i, parts in points.items():
        if parts:
            series.segments[i] = tuple(np.concatenate(column) for column in zip(*parts))
    return records, series


def write_evidence(paths, findings: list[Finding], out: OutputDir, first_ns=None, last_ns=None,
                   rss_model=None) -> EvidenceResult:
    """Write evidence/<rule>-<n>.pcap per finding that lists frames, and fill in evidence_pcap and the count.

    A finding's frames normally share one link type and go to classic pcap;
    if they span several, the file is pcapng (<rule>-<n>.pcapng), one
    interface per link type, so no frame is dropped or relabelled.
    """
    records, series = collect(paths, findings, first_ns, last_ns, rss_model)
    result = EvidenceResult(series)
    per_rule: dict[str, int] = {}
    for index, f in enumerate(findings):
        n = per_rule[f.rule] = per_rule.get(f.rule, 0) + 1
        frames = f.evidence.get("evidence_frames") or []
        numbers = [fr for fr in sorted({int(x) for x in frames}) if fr in records]
        rows = [records[fr] for fr in numbers]
        if not rows:
            continue
        segment = Segment.of_records(numbers, rows)
        name = f"{EVIDENCE}/{f.rule}-{n}.{capture_format([segment])}"
        with out.open(name) as handle:
            write_records(handle, [segment])
        f.evidence_pcap = name
        f.evidence["evidence_packets"] = len(rows)
        f.evidence["pcap_filename"] = rows[0][4]
        result.files.append(name)
        result.summaries[index] = frame_summary(rows[0][3], rows[0][2])
        if f.rule == "rip-trigger":
            script = write_reproducer(out, f"{EVIDENCE}/{f.rule}-{n}-reproduce.py", numbers[0], rows[0])
            result.files.append(script)
            result.reproducers[index] = script
    return result

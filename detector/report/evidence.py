"""The evidence pass: one more read of the captures that copies each finding's frames into a pcap of its own
and gathers what the report draws.

Frames are picked by number (np.isin on the batch's frame column), never by
re-matching packets, so the evidence is exactly what the detector saw. The
records are copied byte for byte with their original timestamps. What a
rule needs beyond that, its detector says (detect.detector): its figures,
fed every batch of this pass, and a replay script for a finding's frame.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..capfile import Segment, capture_format, write_records
from ..detect.detector import Detector
from ..detect.display import frame_summary
from ..detect.figure import ReportFigure, TimeBins
from ..engine import decoded_batches
from ..findings import Finding
from ..output import EVIDENCE, OutputDir
from .reproduce import write_reproducer

# Bins of the report's time axis (packets/s, the rules' series): enough to see the shape of an
# incident, bounded whatever the capture's duration or its timestamps claim.
SERIES_BINS_MAX = 600


@dataclass
class Series:
    """Packets per bin over the capture's time span (bin `i` starts at `start_ns + i * bin_ns`)."""

    start_ns: int
    bin_ns: int
    packets: np.ndarray

    @property
    def bins(self) -> TimeBins:
        return TimeBins(self.start_ns, self.bin_ns, len(self.packets))


@dataclass
class EvidenceResult:
    series: Series | None
    files: list[str] = field(default_factory=list)             # written, relative to the output folder
    summaries: dict[int, str] = field(default_factory=dict)      # finding index -> first evidence frame decoded
    # finding index -> (script path in the output, what it replays: the rule's REPRODUCES)
    reproducers: dict[int, tuple[str, str]] = field(default_factory=dict)
    figures: list[ReportFigure] = field(default_factory=list)   # the rules' figures, gathered in this pass
    # finding index -> the capture's frame numbers in its evidence pcap, in file order (pcap frame k is [k - 1])
    frames: dict[int, list[int]] = field(default_factory=dict)


def _wanted(findings: list[Finding]) -> np.ndarray:
    frames = [np.asarray(f.evidence.get("evidence_frames", []), dtype=np.int64) for f in findings]
    return np.unique(np.concatenate(frames)) if frames else np.zeros(0, dtype=np.int64)


def time_bins(first_ns: int | None, last_ns: int | None) -> TimeBins:
    """The report's time axis from the first to the last packet: at most SERIES_BINS_MAX bins of whole
    milliseconds; no bins without packets."""
    if first_ns is None or last_ns is None:
        return TimeBins(0, 1, 0)
    span = max(last_ns - first_ns, 1)
    bin_ns = max(1_000_000, math.ceil(span / SERIES_BINS_MAX / 1_000_000) * 1_000_000)
    return TimeBins(first_ns, bin_ns, min(SERIES_BINS_MAX, span // bin_ns + 1))


def rule_figures(detectors: list[Detector], findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
    """Each detector's figures of its own findings, in the detectors' order; none without a time axis."""
    if not bins.count:
        return []
    return [figure for det in detectors
            for figure in det.figures([f for f in findings if f.rule == det.rule_id], bins)]


def collect(paths, findings: list[Finding], bins: TimeBins, figures: list[ReportFigure] = ()):
    """One pass over `paths`: the evidence records by frame number and the packets per bin of `bins`;
    every batch also goes to each of `figures`.

    Returns (records, series): records maps frame number -> (ts_ns, wirelen,
    linktype, bytes, source file).
    """
    records, counts = gather(paths, _wanted(findings), bins, figures)
    return records, Series(bins.start_ns, bins.bin_ns, counts)


def gather(paths, wanted: np.ndarray, bins: TimeBins, figures=(), first_frame: int = 1, name: str | None = None,
           decode_threads: int | None = None):
    """What the evidence pass keeps of `paths` (one capture, or one partition of it whose first record is frame
    `first_frame`): the records of frames `wanted` by number, the packets per bin of `bins` (int64), and every
    batch handed to each of `figures`. `name`: the source file the records say (None: the reader's path).

    Partitions of one capture gathered apart and joined in capture order (join) are the one pass: records
    unite, counts add up, each figure merges the next one's (ReportFigure.merge)."""
    counts = np.zeros(bins.count, dtype=np.int64)
    records: dict[int, tuple[int, int, int, bytes, str]] = {}
    figures = [figure for figure in figures if figure.needs_batches]
    fingerprint = any(figure.needs_fingerprint for figure in figures)
    options = {} if decode_threads is None else {"decode_threads": decode_threads}
    for _reader, batch in decoded_batches(paths, fingerprint=fingerprint, first_frame=first_frame, **options):
        ts = batch["ts_ns"]
        counts += bins.counts(ts)
        for figure in figures:
            figure.add(batch)
        if len(wanted) == 0:
            continue
        source = batch.source if name is None else name
        for row in np.flatnonzero(np.isin(batch["frame"], wanted)):
            records[int(batch["frame"][row])] = (int(ts[row]), int(batch["wirelen"][row]),
                                                 int(batch["linktype"][row]), batch.frame_bytes(int(row)), source)
    return records, counts


def mergeable(figures) -> bool:
    """Whether every one of `figures` merges the state of a partition's copy (ReportFigure.merge), so the
    evidence pass can run on partitions apart."""
    return all(type(figure).merge is not ReportFigure.merge for figure in figures)


def join(parts, bins: TimeBins, figures: list[ReportFigure]):
    """(records, series) of the partitions' gather answers `parts` (records, counts, their figures' copies), in
    capture order; each of `figures` (fresh, as shipped) merges its copies in that order."""
    records: dict[int, tuple[int, int, int, bytes, str]] = {}
    counts = np.zeros(bins.count, dtype=np.int64)
    for part_records, part_counts, part_figures in parts:
        records.update(part_records)
        counts += part_counts
        for figure, copy in zip(figures, part_figures, strict=True):
            merged = figure.merge(copy)
            if merged is not figure:
                raise TypeError(f"{type(figure).__name__}.merge must return itself")
    return records, Series(bins.start_ns, bins.bin_ns, counts)


def write_evidence(paths, findings: list[Finding], out: OutputDir, first_ns=None, last_ns=None,
                   detectors: list[Detector] = (), collector=None) -> EvidenceResult:
    """Write evidence/<rule>-<n>.pcap per finding that lists frames, and fill in evidence_pcap and the count;
    gather the figures of `detectors` (those that found them) and write the replay scripts they ask for.

    A finding's frames normally share one link type and go to classic pcap;
    if they span several, the file is pcapng (<rule>-<n>.pcapng), one
    interface per link type, so no frame is dropped or relabelled.

    `collector(wanted, bins, figures)`: what gathers the records and the series elsewhere, returning
    (records, series) as collect does and having merged into `figures` what its partitions' copies saw
    (cluster.evidence_collector: on the workers); None, or a figure that cannot merge: one pass here.
    """
    bins = time_bins(first_ns, last_ns)
    figures = rule_figures(detectors, findings, bins)
    if collector is not None and mergeable(figures):
        records, series = collector(_wanted(findings), bins, figures)
    else:
        records, series = collect(paths, findings, bins, figures)
    result = EvidenceResult(series, figures=figures)
    replays = {det.rule_id: det.REPRODUCES for det in detectors if det.REPRODUCES}
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
        result.frames[index] = numbers
        result.summaries[index] = frame_summary(rows[0][3], rows[0][2])
        if f.rule in replays:
            script = write_reproducer(out, f"{EVIDENCE}/{f.rule}-{n}-reproduce.py", numbers[0], rows[0],
                                      replays[f.rule], f.rule)
            result.files.append(script)
            result.reproducers[index] = (script, replays[f.rule])
    return result

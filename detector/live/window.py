"""The sliding analysis window: detector states in time slices, merged to ask for findings.

A days-long watch cannot fold every packet into one state: the flow table
keeps every finished flow, and some detectors keep per-time-bin counts. So
the window is cut into slices of `slice_s` seconds (monotonic clock): each
slice has fresh detectors, a flow table and capture statistics, and takes
the batches of its time. When the newest slice is full a new one starts and
the oldest beyond `slices` is dropped, with everything it held: memory is
bounded by the traffic of one window, whatever the run's length.

Findings are those of the whole window: the closed slices are merged once
per rotation (detectors' `merge`, the same that joins cluster partitions),
and each evaluation merges a copy of that with a copy of the open slice
(merge may share objects between the two states, so both sides are copies).
The flow table of the window is merged only if a detector asks for
`ctx.flows`. A finding stays in the window until the slices holding its
packets are dropped; whether it is still *going on* is the alert book's
question (its last_seen), not the window's.

The findings come from the analysis service (analysis.conclude), as those
of `detector analyze` do: same context, same order.

A detector that raises (in any slice's update, a merge, or findings) stops
for the rest of the watch: every slice, the current and the later ones,
leaves its rule out (detectors.DetectorSet), and the failure waits in
`new_failures` for the watch to report once.
"""
from __future__ import annotations

import copy
from collections import deque

from ..analysis import Analysis, AnalysisState, conclude
from ..detect.detector import CaptureDrops
from ..detect.quality import CaptureQuality
from ..detectors import DetectorFailure, DetectorSet
from ..flows import FlowTable
from ..stats import CaptureStats

# Slice length and count: a window of 60 s. A longer window lets slow
# patterns add up (a scanner probing one host a minute, a slow loop) at the
# cost of memory and of merging time per evaluation; 10 s slices let the
# window slide in steps small against it.
DEFAULT_SLICE_S = 10.0
DEFAULT_SLICES = 6


class _Slice(AnalysisState):
    def __init__(self, rules, started: float, failures: dict[str, DetectorFailure], site):
        super().__init__(rules, stopped=failures, site=site)      # a rule that failed before stays stopped
        self.started = started
        self.drops = 0          # packets the capture dropped while this slice was open (note_drops)


class _WindowFlows:
    """The window's flow table, merged from the slices' tables when first asked for."""

    def __init__(self, tables: list[FlowTable]):
        self._tables = tables
        self._merged: FlowTable | None = None

    def table(self) -> FlowTable:
        if self._merged is None:
            merged = copy.deepcopy(self._tables[0])
            for table in self._tables[1:]:
                merged.merge(table)
            self._merged = merged
        return self._merged

    @property
    def flow_count(self) -> int:
        return self.table().flow_count

    def to_frame(self):
        return self.table().to_frame()


class SlidingWindow:
    def __init__(self, rules, now: float, slice_s: float = DEFAULT_SLICE_S, slices: int = DEFAULT_SLICES,
                 site=None):
        self.rules = rules
        self.site = site            # the site file's detector.site.Site, shared by every slice; None: none
        self.slice_s = slice_s
        self.slices = slices
        self.failures: dict[str, DetectorFailure] = {}
        self.new_failures: list[DetectorFailure] = []    # not yet reported by the watch
        self._closed: deque[_Slice] = deque()
        self._merged_closed: DetectorSet | None = None
        self._closed_quality: CaptureQuality | None = None     # the closed slices' capture quality, merged once
        self._open = _Slice(rules, now, self.failures, site)
        self._drops_total = 0
        self._drops_interface = ""

    @property
    def span_s(self) -> float:
        return self.slice_s * self.slices

    def update(self, batch, now: float) -> None:
        self.rotate(now)
        self._open.update(batch)
        self._note(self._open.detectors)

    def note_drops(self, total: int, interface: str) -> None:
        """The capture's drop counter (cumulative, as detector_capture_drops_total) on `interface`: what it grew
        by since the last call counts in the open slice, so the window's drops are those of its time."""
        if total > self._drops_total:
            self._open.drops += total - self._drops_total
            self._drops_total = total
        self._drops_interface = interface

    def _drops(self, stats: CaptureStats) -> list[CaptureDrops]:
        dropped = sum(piece.drops for piece in (*self._closed, self._open))
        if not dropped:
            return []
        return [CaptureDrops(source="", interface=self._drops_interface, dropped=dropped,
                             received=stats.packets + dropped, first_ns=stats.first_ns, last_ns=stats.last_ns,
                             counter="capture socket's drop counter (detector_capture_drops_total)")]

    def _note(self, detectors: DetectorSet) -> None:
        """Take up the failures a detector set recorded: each new one once into new_failures, and its rule
        stopped in every slice (a merged state that is built again must not bring it back)."""
        fresh = {rule_id: failure for rule_id, failure in detectors.failures.items() if rule_id not in self.failures}
        if not fresh:
            return
        self.failures.update(fresh)
        self.new_failures.extend(fresh.values())
        sets = [piece.detectors for piece in (*self._closed, self._open)]
        if self._merged_closed is not None:
            sets.append(self._merged_closed)
        for held in sets:
            for rule_id, failure in fresh.items():
                held.failures.setdefault(rule_id, failure)

    def rotate(self, now: float) -> None:
        """Start a new slice when the open one is full; drop the slices that left the window."""
        if now - self._open.started < self.slice_s:
            return
        self._closed.append(self._open)
        while len(self._closed) > self.slices - 1:
            self._closed.popleft()
        self._merged_closed = None
        self._closed_quality = None
        self._open = _Slice(self.rules, now, self.failures, self.site)

    def _closed_detectors(self) -> DetectorSet | None:
        if self._merged_closed is None and self._closed:
            merged = copy.deepcopy(self._closed[0].detectors)
            for piece in list(self._closed)[1:]:
                merged.merge(piece.detectors)
            self._merged_closed = merged
        return self._merged_closed

    def analysis(self) -> Analysis:
        """The analysis of the whole window: its findings in canonical order, its (lazily merged) flows."""
        base = self._closed_detectors()
        current = copy.deepcopy(self._open.detectors)
        if base is not None:
            detectors = copy.deepcopy(base).merge(current)
        else:
            detectors = current
        flows = _WindowFlows([piece.flows for piece in (*self._closed, self._open)])
        stats = CaptureStats()
        for piece in (*self._closed, self._open):
            stats.merge(piece.stats)
        if self._closed_quality is None:
            self._closed_quality = CaptureQuality()
            for piece in self._closed:
                self._closed_quality.merge(piece.quality)
        quality = copy.deepcopy(self._closed_quality).merge(self._open.quality)
        result = conclude(detectors, flows, stats, drops=self._drops(stats), quality=quality)
        self._note(detectors)
        return result

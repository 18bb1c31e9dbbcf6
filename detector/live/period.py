"""The watched period as a whole: its traffic series, and the documents written when the watch ends.

At the end `detector watch` writes what `detector analyze` writes for a
file - findings.json (same schema), findings.jsonl, report.md and
report.html - for the period it watched. Its findings are the latest state
of every entity that raised an alert (resolved ones included, with their
evidence pcap), plus the findings of the last window that stayed below the
alert severity. The statistics count every packet of the period; the flow
count and the report's top talkers are those of the last window, the only
flows still held (see window.py).

The "traffic over time" figure needs packets per time bin over a period of
unknown length: `TrafficSeries` starts with 1 s bins and doubles their width
whenever the period outgrows the report's bin budget, so it stays at most
SERIES_BINS_MAX bins for a minute or a month.
"""
from __future__ import annotations

import numpy as np

from ..findings import canonical_order
from ..incidents import correlate
from ..output import OutputDir
from ..report import findings_document, write_findings, write_reports
from ..report.evidence import SERIES_BINS_MAX, EvidenceResult, Series
from ..units import NS

FIRST_BIN_NS = NS


class TrafficSeries:
    def __init__(self):
        self.start_ns: int | None = None
        self.bin_ns = FIRST_BIN_NS
        self.packets = np.zeros(0, dtype=np.int64)

    def add(self, ts_ns: np.ndarray) -> None:
        if not len(ts_ns):
            return
        if self.start_ns is None:
            self.start_ns = int(ts_ns.min()) // FIRST_BIN_NS * FIRST_BIN_NS
        idx = (ts_ns - self.start_ns) // self.bin_ns
        idx = idx[idx >= 0]          # a packet stamped before the first one (clock step back) is not drawn
        if not len(idx):
            return
        while int(idx.max()) >= SERIES_BINS_MAX:
            self._widen()
            idx //= 2
        counts = np.bincount(idx, minlength=len(self.packets))
        counts[:len(self.packets)] += self.packets
        self.packets = counts

    def _widen(self) -> None:
        """Bins twice as wide: pairs of bins added up."""
        padded = np.append(self.packets, 0) if len(self.packets) % 2 else self.packets
        self.packets = padded.reshape(-1, 2).sum(axis=1)
        self.bin_ns *= 2

    def series(self) -> Series | None:
        if self.start_ns is None:
            return None
        return Series(self.start_ns, self.bin_ns, self.packets.copy())


def write_period(out: OutputDir, capture: dict, stats: dict, findings: list, rules, series: TrafficSeries,
                 evidence_files: list[str], flows_frame, failures=(), quality: dict | None = None):
    """findings.json, findings.jsonl, report.md and report.html of the watched period, with the rules that
    failed while it ran, the period's findings grouped into incidents, and `quality`, the capture quality of the
    last window watched (analysis.Analysis.quality); returns findings.json's path."""
    findings = canonical_order(findings)
    incidents = correlate(findings, rules)
    document = findings_document([capture], stats, findings, failures, incidents, quality)
    path = write_findings(out, document, findings, None, incidents)
    write_reports(out, document, findings, rules, EvidenceResult(series.series(), files=evidence_files),
                  flows_frame, incidents)
    return path

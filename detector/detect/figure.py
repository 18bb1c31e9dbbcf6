"""A rule's figures in report.html (ReportFigure) and the report's time axis they share (TimeBins)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from ..findings import iso_time
from ..schema import PacketBatch


@dataclass(frozen=True)
class TimeBins:
    """The report's time axis: `count` bins of `bin_ns`, bin i starting at start_ns + i * bin_ns."""

    start_ns: int
    bin_ns: int
    count: int

    @property
    def width_s(self) -> float:
        return self.bin_ns / 1e9

    @property
    def starts_s(self) -> np.ndarray:
        """Each bin's start in seconds after start_ns (the x values of a plot)."""
        return np.arange(self.count) * self.width_s

    @property
    def axis_label(self) -> str:
        return f"seconds after {iso_time(self.start_ns)}"

    def index(self, ts: np.ndarray) -> np.ndarray:
        """The bin of each time (ns); outside 0..count-1 for a time off the axis."""
        return (ts - self.start_ns) // self.bin_ns

    def counts(self, ts: np.ndarray) -> np.ndarray:
        """How many of the times fall in each bin; times off the axis are not counted."""
        idx = self.index(ts)
        idx = idx[(idx >= 0) & (idx < self.count)]
        return np.bincount(idx, minlength=self.count).astype(np.int64)

    def per_second(self, ts: np.ndarray, origin_ns: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """A step line (x, y) on this axis of how many of the times (ns) fall in each whole second counted from
        `origin_ns` (the epoch; or where a rule starts its seconds): the unit the rules count their rates in,
        whatever this axis' bins, so a figure's peak is the message's."""
        seconds, counts = np.unique((np.asarray(ts, dtype=np.int64) - origin_ns) // 1_000_000_000,
                                    return_counts=True)
        return self.second_steps(seconds, counts, origin_ns)

    def second_steps(self, seconds: np.ndarray, values: np.ndarray,
                     origin_ns: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """A step line (x, y; drawn with drawstyle="steps-post") on this axis of per-second `values` at whole
        `seconds` from `origin_ns` (the epoch by default; ascending, only the seconds that have one): a second
        without one is 0 (each run of seconds ends with a point at 0)."""
        seconds = np.asarray(seconds, dtype=np.int64)
        ends = np.flatnonzero(np.diff(seconds, append=seconds[-1] + 2 if len(seconds) else 0) != 1)
        x = np.concatenate([seconds, seconds[ends] + 1]) + (origin_ns - self.start_ns) / 1e9
        y = np.concatenate([np.asarray(values), np.zeros(len(ends), dtype=np.asarray(values).dtype)])
        order = np.argsort(x, kind="stable")
        return x[order], y[order]


class ReportFigure(ABC):
    """A figure of report.html for some of a rule's findings (Detector.figures).

    The evidence pass (the second read of the captures, which copies the
    evidence frames) hands it every decoded batch; it keeps what it draws,
    bounded whatever the capture's size. It is drawn only when the capture
    has packets on the time axis.
    """

    title: str
    size: tuple[float, float] = (8.0, 3.0)      # inches
    needs_fingerprint: bool = False             # whether add() reads batch["fingerprint"]
    # whether add() keeps anything: False for a figure drawn from its rule's own state (or the flow table), which
    # the evidence pass does not feed
    needs_batches: bool = True

    @abstractmethod
    def add(self, batch: PacketBatch) -> None:
        """Keep what the figure needs of one batch."""

    def merge(self, other: ReportFigure) -> ReportFigure:
        """Take in `other`, a copy of this figure (as built, then fed the batches of the partition after the ones
        this one saw), and return self: merged in capture order, the state of one pass over them all. The
        evidence pass of a cluster feeds each partition's copy on a worker (detector.cluster); a figure
        without a merge keeps that pass in one process."""
        raise NotImplementedError(f"{type(self).__name__} cannot merge a partition's copy")

    @abstractmethod
    def draw(self, ax, flows) -> None:
        """Draw on the matplotlib Axes `ax`; `flows` is the flow table (FlowTable.to_frame())."""

"""A rule's figures in report.html (ReportFigure) and the report's time axis they share (TimeBins)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from ..findings import iso_time
from ..schema import PacketBatch

# An axis of seconds after a start reads well up to some days (matplotlib writes 1e6 and above as 1e6 times a
# number); past a day it shows UTC dates and times instead (time_axis): a capture of years read "1e8".
DATE_AXIS_FROM_S = 86_400.0
# (numpy unit, multiple, tick label) from the finest: the first that puts at most DATE_TICKS_MAX ticks on the axis
DATE_STEPS = (("h", 1, "%m-%d %H:%M"), ("h", 3, "%m-%d %H:%M"), ("h", 6, "%m-%d %H:%M"), ("h", 12, "%m-%d %H:%M"),
              ("D", 1, "%Y-%m-%d"), ("D", 2, "%Y-%m-%d"), ("D", 7, "%Y-%m-%d"), ("M", 1, "%Y-%m"), ("M", 3, "%Y-%m"),
              ("M", 6, "%Y-%m"), ("Y", 1, "%Y"), ("Y", 2, "%Y"), ("Y", 5, "%Y"), ("Y", 10, "%Y"), ("Y", 100, "%Y"))
DATE_TICKS_MAX = 8
# a unit's length in seconds, a month's and a year's on average: how many ticks a step would make
UNIT_SECONDS = {"h": 3600, "D": 86_400, "M": 2_629_746, "Y": 31_556_952}


def _date_ticks(first: np.datetime64, last: np.datetime64) -> tuple[np.ndarray, str]:
    """Whole UTC hours, days, months or years from `first` to `last` (datetime64[ns]), DATE_TICKS_MAX at most,
    the finest step that allows; and how to write them."""
    span_s = (last - first) / np.timedelta64(1, "s")
    for k, (unit, step, _fmt) in enumerate(DATE_STEPS):
        if span_s / (step * UNIT_SECONDS[unit]) > DATE_TICKS_MAX + 1 and k < len(DATE_STEPS) - 1:
            continue            # far too many: not even built
        # from a whole multiple of the step (00:00 and 12:00, January and July, 2025 and 2030)
        base = first.astype(f"datetime64[{unit}]").astype(np.int64) // step * step
        ticks = np.arange(base, last.astype(f"datetime64[{unit}]").astype(np.int64) + 1, step)
        ticks = ticks.astype(f"datetime64[{unit}]").astype("datetime64[ns]")
        ticks = ticks[(ticks >= first) & (ticks <= last)]
        if len(ticks) <= DATE_TICKS_MAX:
            break
    return ticks, DATE_STEPS[k][2]


def time_axis(ax, start_ns: int, note: str = "") -> None:
    """Label the x axis of `ax`, drawn in seconds after `start_ns`: "seconds after <start>", or, where it spans
    more than DATE_AXIS_FROM_S, ticks at whole UTC hours, days, months or years written as dates, labelled
    "time (UTC)"; `note` follows the label. Call it once the data are drawn (it reads the axis' limits)."""
    import datetime

    from matplotlib.ticker import FixedFormatter, FixedLocator

    low, high = ax.get_xlim()
    if high - low <= DATE_AXIS_FROM_S:
        ax.set_xlabel(f"seconds after {iso_time(start_ns)}{note}")
        return
    first = np.datetime64(int(start_ns + low * 1e9), "ns")
    last = np.datetime64(int(start_ns + high * 1e9), "ns")
    ticks, fmt = _date_ticks(first, last)
    offsets = (ticks.astype(np.int64) - start_ns) / 1e9
    moments = [datetime.datetime.fromtimestamp(int(t) / 1e9, datetime.timezone.utc) for t in ticks.astype(np.int64)]
    ax.xaxis.set_major_locator(FixedLocator(offsets))
    ax.xaxis.set_major_formatter(FixedFormatter([moment.strftime(fmt) for moment in moments]))
    ax.set_xlim(low, high)
    # ticks that do not write the year: the axis label does
    year = f", {moments[0].year}" if moments and "%Y" not in fmt else ""
    ax.set_xlabel(f"time (UTC{year}){note}")


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

    def time_axis(self, ax, note: str = "") -> None:
        """Label the x axis of a plot on this axis: seconds after its start, dates past a day (time_axis)."""
        time_axis(ax, self.start_ns, note)

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

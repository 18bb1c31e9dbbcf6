"""Flow tables to files: CSV without pandas (start-up time counts), Parquet with pyarrow."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from ..errors import UsageError

TIME_COLUMNS = ("first_seen", "last_seen")


def _iso_times(ns: np.ndarray) -> np.ndarray:
    """int64 ns since the epoch as ISO 8601 UTC text with nanoseconds, e.g. 2026-01-01T00:00:00.100000000Z."""
    return np.char.add(np.datetime_as_string(ns.astype("datetime64[ns]"), unit="ns"), "Z")


def write_csv(view: dict[str, np.ndarray], path: Path) -> None:
    """One row per flow; NaN is written as an empty field, as pandas does."""
    names = list(view)
    columns = []
    for name in names:
        values = view[name]
        if name in TIME_COLUMNS:
            values = _iso_times(values)
        elif values.dtype.kind == "f":
            values = np.where(np.isnan(values), "", np.round(values, 6).astype(str))
        columns.append(values.tolist())
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(names)
        writer.writerows(zip(*columns))


def write_parquet(frame, path: Path) -> None:
    try:
        import pyarrow  # noqa: F401  (pandas needs it for Parquet)
    except ImportError:
        raise UsageError("parquet output needs pyarrow: pip install 'detector[parquet]'") from None
    frame.to_parquet(path, index=False)

"""Flow tables to files: CSV without pandas (start-up time counts), Parquet with pyarrow."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import UsageError

TIME_COLUMNS = ("first_seen", "last_seen")


def _iso_times(ns: np.ndarray) -> np.ndarray:
    """int64 ns since the epoch as ISO 8601 UTC text with nanoseconds, e.g. 2026-01-01T00:00:00.100000000Z."""
    return np.char.add(np.datetime_as_string(ns.astype("datetime64[ns]"), unit="ns"), "Z")


def _quoted(values: list) -> list:
    """RFC 4180 quoting for the text fields that need it (none do in practice: addresses, names).

    One scan of the whole column first, in C, so the common case costs no per-field work.
    """
    special = (",", '"', "\n", "\r")
    joined = "\0".join(map(str, values))
    if not any(c in joined for c in special):
        return values
    return [f'"{v.replace(chr(34), chr(34) * 2)}"' if isinstance(v, str) and any(c in v for c in special) else v
            for v in values]


def write_csv(view: dict[str, np.ndarray], path: Path) -> None:
    """One row per flow; NaN is written as an empty field, as pandas does.

    Each column becomes a Python list in one C call and each row one %-format:
    about three times faster than the csv module, which checks every field.
    """
    names = list(view)
    columns = []
    for name in names:
        values = view[name]
        if name in TIME_COLUMNS:
            values = _iso_times(values)
        elif values.dtype.kind == "f":
            values = np.where(np.isnan(values), "", np.round(values, 6).astype(str))
        listed = values.tolist()
        columns.append(_quoted(listed) if values.dtype.kind in "OUS" else listed)
    row = ",".join(["%s"] * len(names)) + "\n"
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(",".join(names) + "\n")
        handle.write("".join([row % fields for fields in zip(*columns)]))


def write_parquet(frame, path: Path) -> None:
    try:
        import pyarrow  # noqa: F401  (pandas needs it for Parquet)
    except ImportError:
        raise UsageError("parquet output needs pyarrow: pip install 'detector[parquet]'") from None
    frame.to_parquet(path, index=False)

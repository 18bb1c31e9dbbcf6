"""Where each decoded column lives while the compiled decoder fills it.

The decoder writes into four 2-D arrays, one per dtype, each row one column of
PACKET_COLUMNS (C order, so every column is a contiguous row). Passing four
arrays instead of fifty-odd keeps the compiled signature small and the
compile fast; the rows are handed out as the batch's columns without a copy.
"""
from __future__ import annotations

import numpy as np

from ..schema import PACKET_COLUMNS

GROUP_DTYPES = (np.uint8, np.uint16, np.uint32, np.uint64)
GROUP_NAMES: dict[type, tuple[str, ...]] = {
    dtype: tuple(name for name, (dt, _) in PACKET_COLUMNS.items() if dt is dtype) for dtype in GROUP_DTYPES
}
# column name -> its row in the array of its dtype
ROW: dict[str, int] = {name: names.index(name) for names in GROUP_NAMES.values() for name in names}


def allocate(n: int) -> dict[type, np.ndarray]:
    """Zeroed (columns, n) arrays, one per dtype: a column nobody writes stays masked at 0."""
    return {dtype: np.zeros((len(GROUP_NAMES[dtype]), n), dtype=dtype) for dtype in GROUP_DTYPES}


def columns(groups: dict[type, np.ndarray]) -> dict[str, np.ndarray]:
    """Name -> column view of the arrays `allocate` returned."""
    return {name: groups[dtype][ROW[name]] for dtype, names in GROUP_NAMES.items() for name in names}

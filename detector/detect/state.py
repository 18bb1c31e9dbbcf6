"""Columnar state: the tables (dicts of equal-length numpy columns) the rules and shared models fold batches into.

A state table holds one row per key; `fold_rows` joins two of them (two batches, two partitions, two files) as
one pass over both would have built it, each column reduced by its own ufunc.
"""
from __future__ import annotations

import numpy as np


def fold_rows(a: dict, b: dict, key, reductions: dict) -> dict:
    """Two state tables (dicts of equal-length columns) as one, one row per key.

    `key` names a column, or is a function of the joined table returning one
    value per row. The earliest row of a key (by `first_ns`) describes it; each
    column in `reductions` is combined over the key's rows with its ufunc
    (np.add, np.maximum, np.minimum). This is how partial states merge.
    """
    both = {name: np.concatenate([a[name], b[name]]) for name in a}
    keys = both[key] if isinstance(key, str) else key(both)
    if len(keys) == 0:
        return both
    order = np.lexsort((both["first_ns"], keys))
    keys = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    both = {name: col[order] for name, col in both.items()}
    out = {name: col[starts] for name, col in both.items()}
    for name, ufunc in reductions.items():
        out[name] = ufunc.reduceat(both[name], starts)
    return out

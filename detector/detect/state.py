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


def empty_table(columns: dict) -> dict[str, np.ndarray]:
    """A state table of no rows: each column of `columns` (name -> dtype) empty, of its dtype."""
    return {name: np.zeros(0, dtype=dtype) for name, dtype in columns.items()}


def take_rows(table: dict, rows) -> dict[str, np.ndarray]:
    """The rows `rows` (indexes, a mask or a slice) of every column of `table`."""
    return {name: col[rows] for name, col in table.items()}


def concat_tables(*tables: dict, columns: dict | None = None) -> dict[str, np.ndarray]:
    """The tables' rows one after the other, in their order. With `columns` (name -> dtype): those columns, each
    of its dtype, and an empty table of them when there is no table; without, the first table's columns."""
    if columns is None:
        return {name: np.concatenate([t[name] for t in tables]) for name in tables[0]}
    if not tables:
        return empty_table(columns)
    return {name: np.concatenate([t[name] for t in tables]).astype(dtype, copy=False)
            for name, dtype in columns.items()}


def join_adjacent(rows: dict, reductions: dict) -> dict:
    """Spans of one key (columns key, first_ns, last_ns, gap_ns) in time order joined into runs: a span joins the
    run before it when it starts at most the larger of their two gaps after that run's end. The first span
    describes a run; each column of `reductions` is combined over the run with its ufunc."""
    if len(rows["key"]) == 0:
        return rows
    rows = take_rows(rows, np.lexsort((rows["first_ns"], rows["key"])))
    reach = rows["last_ns"][:-1] + np.maximum(rows["gap_ns"][:-1], rows["gap_ns"][1:])
    breaks = (rows["key"][1:] != rows["key"][:-1]) | (rows["first_ns"][1:] > reach)
    starts = np.flatnonzero(np.concatenate(([True], breaks)))
    out = take_rows(rows, starts)
    for name, ufunc in reductions.items():
        out[name] = ufunc.reduceat(rows[name], starts)
    return out

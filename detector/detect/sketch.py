"""Mergeable summaries of who sends: a sparse HyperLogLog of distinct items and a space-saving top-k, per group.

Both are tables of numpy columns, one row per (group, cell) or (group, item),
so a detector keeps them beside its other state tables and merges two partial
states row-wise: a HyperLogLog register is merged by maximum (so the merge of
two halves equals one pass, whatever the split), a top-k by the
mergeable-summaries rule of Agarwal et al. (2012, "Mergeable summaries"),
which bounds every count's error by what was dropped. Each group's summary
keeps its floor, the most an item it does not hold may have counted (0
until it drops one): a merge adds error only where an item may have been
dropped, so summaries that never dropped one merge to exact counts, whatever
the split.

The HyperLogLog is the one of Flajolet et al. (2007) with p = 12 (4,096
registers, a standard error of 1.04/sqrt(4096) = 1.6 %) and linear counting
below 2.5 x 4,096, so that a few dozen sources are counted about exactly.
It is kept sparse: a group only holds the registers its items set, so the
many groups with a handful of sources cost a handful of rows.
"""
from __future__ import annotations

import numpy as np

HLL_P = 12
HLL_REGISTERS = 1 << HLL_P
_HLL_ALPHA = 0.7213 / (1 + 1.079 / HLL_REGISTERS)
_RANK_MAX = 64 - HLL_P + 1

CELL_COLUMNS = {"group": np.uint64, "register": np.uint16, "rank": np.uint8}
TOP_COLUMNS = {"group": np.uint64, "item": np.uint64, "count": np.int64, "error": np.int64,
               "floor": np.int64}   # + payload


def empty(columns: dict) -> dict:
    return {name: np.zeros(0, dtype=dtype) for name, dtype in columns.items()}


def _leading_zeros(x: np.ndarray) -> np.ndarray:
    """Leading zero bits of each uint64 (64 for zero), by a binary search of six steps."""
    x = x.astype(np.uint64, copy=True)
    n = np.zeros(len(x), dtype=np.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        low = x < np.uint64(1 << (64 - shift))
        n += np.where(low, shift, 0)
        x = np.where(low, x << np.uint64(shift), x)
    return n + (x == 0)


def hll_cells(groups: np.ndarray, hashes: np.ndarray) -> dict:
    """The registers that items with 64-bit `hashes` set in their `groups`' sketches, one row per (group,
    register) at its highest rank."""
    hashes = hashes.astype(np.uint64, copy=False)
    register = (hashes >> np.uint64(64 - HLL_P)).astype(np.uint16)
    rest = hashes << np.uint64(HLL_P)
    rank = np.minimum(_leading_zeros(rest) + 1, _RANK_MAX).astype(np.uint8)
    return hll_fold({"group": groups.astype(np.uint64), "register": register, "rank": rank})


def hll_fold(cells: dict) -> dict:
    """Cells with one row per (group, register), the highest rank of each: the HyperLogLog merge."""
    if len(cells["group"]) == 0:
        return cells
    order = np.lexsort((cells["register"], cells["group"]))
    group, register, rank = cells["group"][order], cells["register"][order], cells["rank"][order]
    starts = np.flatnonzero(np.concatenate(([True], (group[1:] != group[:-1]) | (register[1:] != register[:-1]))))
    return {"group": group[starts], "register": register[starts], "rank": np.maximum.reduceat(rank, starts)}


def hll_merge(a: dict, b: dict) -> dict:
    return hll_fold({name: np.concatenate([a[name], b[name]]) for name in CELL_COLUMNS})


def hll_estimate(cells: dict, groups: np.ndarray) -> np.ndarray:
    """Distinct items of each of `groups` (0 for a group without cells)."""
    out = np.zeros(len(groups), dtype=np.float64)
    if len(cells["group"]) == 0 or len(groups) == 0:
        return out
    group = cells["group"]
    starts = np.flatnonzero(np.concatenate(([True], group[1:] != group[:-1])))
    keys = group[starts]
    used = np.diff(np.append(starts, len(group)))
    inverse_sum = np.add.reduceat(np.exp2(-cells["rank"].astype(np.float64)), starts) + (HLL_REGISTERS - used)
    raw = _HLL_ALPHA * HLL_REGISTERS ** 2 / inverse_sum
    zeros = HLL_REGISTERS - used
    linear = HLL_REGISTERS * np.log(HLL_REGISTERS / np.maximum(zeros, 1))
    estimate = np.where((raw <= 2.5 * HLL_REGISTERS) & (zeros > 0), linear, raw)
    at = np.searchsorted(keys, groups)
    found = at < len(keys)
    found[found] = keys[at[found]] == groups[found]
    out[found] = estimate[at[found]]
    return out


def top_counts(groups: np.ndarray, items: np.ndarray, k: int, **payload: np.ndarray) -> dict:
    """The exact top-k summary of one batch: each group's k most frequent items with their counts (error 0);
    each row's `floor` is its group's count of the first item left out (what an item not kept may have sent
    at most), 0 when none was. `payload` columns (what the item stands for, e.g. the address it is a hash of)
    ride along."""
    table = {"group": groups.astype(np.uint64), "item": items.astype(np.uint64),
             "count": np.ones(len(groups), dtype=np.int64), "error": np.zeros(len(groups), dtype=np.int64),
             "floor": np.zeros(len(groups), dtype=np.int64), **payload}
    summed = _sum_pairs(table)
    return _keep_top(summed, k, _sum_by_key(summed["group"], summed["floor"]))


def top_merge(summaries: list[dict], k: int) -> dict:
    """Several top-k summaries of the same groups as one: an item a summary lacks is counted there as that
    summary's floor for its group (an item it dropped may have sent that many; 0 when it never dropped one, so
    a summary that kept every item adds nothing), added to the item's error too, so that count - error <= true
    count <= count still holds, and an item kept nowhere sent at most the sum of the floors."""
    given = summaries
    summaries = [t for t in given if len(t["group"])]
    if len(summaries) <= 1:
        return summaries[0] if summaries else given[0]
    both = {name: np.concatenate([t[name] for t in summaries]) for name in summaries[0]}
    # each group's floor summed over the summaries (a summary's rows of one group all carry its floor)
    firsts = [_group_starts(t["group"]) for t in summaries]
    total = _sum_by_key(np.concatenate([t["group"][at] for t, at in zip(summaries, firsts)]),
                        np.concatenate([t["floor"][at] for t, at in zip(summaries, firsts)]))
    # summed per item, "floor" is the sum of the floors of the summaries that hold it
    summed = _sum_pairs(both, extra_sums=("floor",))
    extra = _lookup(total, summed["group"]) - summed["floor"]
    summed["count"] = summed["count"] + extra
    summed["error"] = summed["error"] + extra
    return _keep_top(summed, k, total)


def _group_starts(groups: np.ndarray) -> np.ndarray:
    """The first row of each run of equal groups (a summary's rows are sorted by group)."""
    if len(groups) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(([True], groups[1:] != groups[:-1])))


def _sum_by_key(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, the sum of values of each)."""
    if len(keys) == 0:
        return keys, values
    distinct, inverse = np.unique(keys, return_inverse=True)
    return distinct, np.bincount(inverse.reshape(-1), weights=values, minlength=len(distinct)).astype(np.int64)


def _sum_pairs(table: dict, extra_sums: tuple[str, ...] = ()) -> dict:
    """One row per (group, item): counts, errors and the `extra_sums` columns summed; the other columns are
    those of the item's first row."""
    order = np.lexsort((table["item"], table["group"]))
    t = {name: col[order] for name, col in table.items()}
    if len(t["group"]) == 0:
        return t
    starts = np.flatnonzero(np.concatenate(([True], (t["group"][1:] != t["group"][:-1])
                                            | (t["item"][1:] != t["item"][:-1]))))
    out = {name: col[starts] for name, col in t.items()}
    for name in ("count", "error", *extra_sums):
        out[name] = np.add.reduceat(t[name], starts)
    return out


def _keep_top(t: dict, k: int, floors: tuple[np.ndarray, np.ndarray]) -> dict:
    """Each group's k largest counts (ties by item), every row carrying its group's new floor: the count of the
    first item left out when one was (counts are at least the old floors), else the group's old one in
    `floors` (sorted groups, floor of each)."""
    if len(t["group"]) == 0:
        return t
    order = np.lexsort((t["item"], -t["count"], t["group"]))
    t = {name: col[order] for name, col in t.items()}
    starts = _group_starts(t["group"])
    rank = np.arange(len(t["group"])) - np.repeat(starts, np.diff(np.append(starts, len(t["group"]))))
    keep = rank < k
    dropped = rank == k
    left_out = _lookup((t["group"][dropped], t["count"][dropped]), t["group"])
    t["floor"] = np.where(np.isin(t["group"], t["group"][dropped]), left_out, _lookup(floors, t["group"]))
    return {name: col[keep] for name, col in t.items()}


def _lookup(table: tuple[np.ndarray, np.ndarray], groups: np.ndarray) -> np.ndarray:
    """The value of each of `groups` in (sorted keys, values); 0 for a group not in it."""
    keys, values = table
    if len(keys) == 0:
        return np.zeros(len(groups), dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    keys, values = keys[order], values[order]
    at = np.searchsorted(keys, groups)
    found = at < len(keys)
    found[found] = keys[at[found]] == groups[found]
    return np.where(found, values[np.minimum(at, len(keys) - 1)], 0)

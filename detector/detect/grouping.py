"""Grouping a batch's rows by a key without per-packet Python: sorted groups, hashed repeats, ranks, membership."""
from __future__ import annotations

import numpy as np

from ..cpu import kernel
from .hashing import half_full_size, home_slot


def group_by(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows grouped by equal key: (order, starts, counts).

    `keys[order]` is sorted, stable (rows of one group stay in batch order);
    group g covers `order[starts[g]:starts[g] + counts[g]]`.
    """
    n = len(keys)
    order = np.argsort(keys, kind="stable")
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return order, empty, empty
    ordered = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    counts = np.diff(np.append(starts, n))
    return order, starts, counts


def repeated_rows(keys: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows whose key (uint64) occurs more than once in `keys`.

    One hashed pass: in a batch where nearly every key is unique, cheaper than sorting the batch (a fifth of
    the loop rules' update did only that); the few repeated rows are then grouped with `group_by`."""
    if len(keys) < 2:
        return np.zeros(len(keys), dtype=bool)
    return _repeated_hashed(np.ascontiguousarray(keys, dtype=np.uint64))


@kernel("(u8[::1],)")
def _repeated_hashed(keys):
    # open addressing over a power-of-two table at most half full, each slot holding a row of its key
    # (-1 free) and whether the key was seen again
    size = half_full_size(len(keys))
    mask = np.uint64(size - 1)
    first = np.full(size, -1, dtype=np.int64)
    again = np.zeros(size, dtype=np.bool_)
    slots = np.empty(len(keys), dtype=np.int64)
    for i in range(len(keys)):
        k = keys[i]
        slot = home_slot(k, mask)
        while first[slot] >= 0 and keys[first[slot]] != k:
            slot = (slot + np.uint64(1)) & mask
        if first[slot] < 0:
            first[slot] = i
        else:
            again[slot] = True
        slots[i] = slot
    out = np.empty(len(keys), dtype=np.bool_)
    for i in range(len(keys)):
        out[i] = again[slots[i]]
    return out


def rank_by_key(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows numbered by equal key without sorting: (group of each row, numbered by first appearance; its rank
    among its key's rows, in row order; the first row of each group). One hashed pass."""
    return _rank_hashed(np.ascontiguousarray(keys, dtype=np.uint64))


@kernel("(u8[::1],)")
def _rank_hashed(keys):
    # open addressing over a power-of-two table at most half full, each slot holding its key's group (-1 free)
    size = half_full_size(len(keys))
    mask = np.uint64(size - 1)
    slot_group = np.full(size, -1, dtype=np.int64)
    group = np.empty(len(keys), dtype=np.int64)
    rank = np.empty(len(keys), dtype=np.int64)
    seen = np.zeros(len(keys), dtype=np.int64)
    firsts = np.empty(len(keys), dtype=np.int64)
    groups = 0
    for i in range(len(keys)):
        k = keys[i]
        slot = home_slot(k, mask)
        while slot_group[slot] >= 0 and keys[firsts[slot_group[slot]]] != k:
            slot = (slot + np.uint64(1)) & mask
        if slot_group[slot] < 0:
            slot_group[slot] = groups
            firsts[groups] = i
            groups += 1
        g = slot_group[slot]
        group[i] = g
        rank[i] = seen[g]
        seen[g] += 1
    return group, rank, firsts[:groups]


def find_sorted(table: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of `keys` sits in the sorted `table`: (insertion index, found mask).

    `table[at[found]]` are the matches; an empty table finds nothing, and a key
    above every entry gets the index one past the end, never a clamped one that
    would read another key's row.
    """
    at = np.searchsorted(table, keys)
    found = at < len(table)
    found[found] = table[at[found]] == keys[found]
    return at, found


def member(keys: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Boolean mask: which `keys` (uint64) are in `sorted_set` (sorted, unique)."""
    if len(sorted_set) == 0:
        return np.zeros(len(keys), dtype=bool)
    if len(sorted_set) <= SMALL_SET:
        mask = keys == sorted_set[0]
        for value in sorted_set[1:]:
            mask |= keys == value
        return mask
    return _member_hashed(keys.astype(np.uint64), sorted_set.astype(np.uint64))


# Up to this many values, comparing against each is cheaper than a hash table.
SMALL_SET = 4


@kernel("(u8[::1], u8[::1])")
def _member_hashed(keys, values):
    # open addressing over a power-of-two table at most half full; slot 0 of
    # `used` marks free entries, so the key 0 needs no sentinel
    size = half_full_size(len(values))
    mask = np.uint64(size - 1)
    table = np.zeros(size, dtype=np.uint64)
    used = np.zeros(size, dtype=np.bool_)
    for v in values:
        slot = home_slot(v, mask)
        while used[slot] and table[slot] != v:
            slot = (slot + np.uint64(1)) & mask
        table[slot] = v
        used[slot] = True
    out = np.zeros(len(keys), dtype=np.bool_)
    for i in range(len(keys)):
        k = keys[i]
        slot = home_slot(k, mask)
        while used[slot]:
            if table[slot] == k:
                out[i] = True
                break
            slot = (slot + np.uint64(1)) & mask
    return out

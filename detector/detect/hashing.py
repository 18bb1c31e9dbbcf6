"""Open-addressing hash tables over uint64 keys, the pieces compiled kernels share.

Tables are powers of two at most half full, probed linearly from a key's home slot (Fibonacci hashing), so a
lookup stays a couple of cache lines however full the table is allowed to get. `mix64` hashes several integer
columns into the uint64 keys such tables (and the rules' states) are keyed by.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit
def half_full_size(n):
    """The smallest power of two at least twice `n`: an open-addressing table of `n` keys at most half full."""
    size = 1
    while size < 2 * n:
        size <<= 1
    return size


@njit
def home_slot(k, mask):
    """Key `k`'s first slot in a power-of-two table (`mask` = size - 1), by Fibonacci hashing."""
    return ((k * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & mask


def mix64(*columns: np.ndarray) -> np.ndarray:
    """A 64-bit hash of several integer columns, row by row (splitmix64 finaliser over a running xor)."""
    acc = np.zeros(len(columns[0]), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for col in columns:
            acc = (acc ^ col.astype(np.uint64)) * np.uint64(0x9E3779B97F4A7C15)
            acc ^= acc >> np.uint64(31)
            acc *= np.uint64(0xBF58476D1CE4E5B9)
            acc ^= acc >> np.uint64(29)
    return acc

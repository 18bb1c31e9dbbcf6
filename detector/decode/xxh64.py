"""XXH64, the records' fingerprint: 64-bit xxHash of a byte range, compiled into the decoder's kernels.

As the reference specifies it (https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md),
so a fingerprint with seed 0 equals `xxhsum -H64` of the same bytes.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .read import le32, le64, u8

# XXH64 primes (xxhash_spec.md, section "XXH64 algorithm description")
P1 = np.uint64(0x9E3779B185EBCA87)
P2 = np.uint64(0xC2B2AE3D27D4EB4F)
P3 = np.uint64(0x165667B19E3779F9)
P4 = np.uint64(0x85EBCA77C2B2AE63)
P5 = np.uint64(0x27D4EB2F165667C5)


@njit(_nrt=False)
def _rotl(x, r):
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(_nrt=False)
def _xxh_round(acc, lane):
    return _rotl(acc + lane * P2, 31) * P1


@njit(_nrt=False)
def _xxh_merge(acc, v):
    return (acc ^ _xxh_round(np.uint64(0), v)) * P1 + P4


@njit(_nrt=False)
def xxh64(b, start, end, seed):
    """XXH64 of b[start:end]: four independent lanes over 32-byte stripes, then the tail."""
    p = start
    length = end - start
    if length >= 32:
        v1 = seed + P1 + P2
        v2 = seed + P2
        v3 = seed
        v4 = seed - P1
        last = end - 32
        while p <= last:
            v1 = _xxh_round(v1, le64(b, p))
            v2 = _xxh_round(v2, le64(b, p + 8))
            v3 = _xxh_round(v3, le64(b, p + 16))
            v4 = _xxh_round(v4, le64(b, p + 24))
            p += 32
        h = _rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)
        h = _xxh_merge(h, v1)
        h = _xxh_merge(h, v2)
        h = _xxh_merge(h, v3)
        h = _xxh_merge(h, v4)
    else:
        h = seed + P5
    h += np.uint64(length)
    while p + 8 <= end:
        h ^= _xxh_round(np.uint64(0), le64(b, p))
        h = _rotl(h, 27) * P1 + P4
        p += 8
    if p + 4 <= end:
        h ^= le32(b, p) * P1
        h = _rotl(h, 23) * P2 + P3
        p += 4
    while p < end:
        h ^= np.uint64(u8(b, p)) * P5
        h = _rotl(h, 11) * P1
        p += 1
    h ^= h >> np.uint64(33)
    h *= P2
    h ^= h >> np.uint64(29)
    h *= P3
    h ^= h >> np.uint64(32)
    return h


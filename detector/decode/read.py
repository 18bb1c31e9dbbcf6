"""Byte readers of the compiled decoder: big-endian fields, MAC addresses, little-endian words.

Indexing with an unsigned offset spares numba's negative-index fix-up, which
lets LLVM merge a multi-byte read into one load (about ten times faster).
None checks bounds: every caller has checked the header against the end of
the captured bytes first.
"""
from __future__ import annotations

import numpy as np
from numba import njit

MAC_BYTES = 6                 # an IEEE 802 MAC address (IEEE 802-2014 section 8)


@njit(_nrt=False)
def u8(b, p):
    return np.int64(b[np.uint64(p)])


@njit(_nrt=False)
def u16(b, p):
    q = np.uint64(p)
    return (np.int64(b[q]) << 8) | np.int64(b[q + np.uint64(1)])


@njit(_nrt=False)
def u32(b, p):
    q = np.uint64(p)
    return ((np.int64(b[q]) << 24) | (np.int64(b[q + np.uint64(1)]) << 16) | (np.int64(b[q + np.uint64(2)]) << 8)
            | np.int64(b[q + np.uint64(3)]))


@njit(_nrt=False)
def _be_bytes(b, p, n):
    q = np.uint64(p)
    v = np.uint64(0)
    for k in range(n):
        v = (v << np.uint64(8)) | np.uint64(b[q + np.uint64(k)])
    return v


@njit(_nrt=False)
def be64(b, p):
    return _be_bytes(b, p, 8)


@njit(_nrt=False)
def mac(b, p):
    return _be_bytes(b, p, MAC_BYTES)


@njit(_nrt=False)
def le64(b, p):
    q = np.uint64(p)
    return (np.uint64(b[q]) | (np.uint64(b[q + np.uint64(1)]) << np.uint64(8))
            | (np.uint64(b[q + np.uint64(2)]) << np.uint64(16)) | (np.uint64(b[q + np.uint64(3)]) << np.uint64(24))
            | (np.uint64(b[q + np.uint64(4)]) << np.uint64(32)) | (np.uint64(b[q + np.uint64(5)]) << np.uint64(40))
            | (np.uint64(b[q + np.uint64(6)]) << np.uint64(48)) | (np.uint64(b[q + np.uint64(7)]) << np.uint64(56)))


@njit(_nrt=False)
def le32(b, p):
    q = np.uint64(p)
    return (np.uint64(b[q]) | (np.uint64(b[q + np.uint64(1)]) << np.uint64(8))
            | (np.uint64(b[q + np.uint64(2)]) << np.uint64(16)) | (np.uint64(b[q + np.uint64(3)]) << np.uint64(24)))

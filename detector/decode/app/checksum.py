"""Internet checksums (RFC 1071) for the application tables' compiled passes.

`sum16` adds a byte range's 16-bit words without folding, so a message
checksummed in pieces (OSPFv2 skips its authentication field) sums each
piece and folds once; `halves_sum` adds one address of an IPv4 or IPv6
pseudo-header from the schema's two 64-bit halves; `fold` folds the carries
back in: a message verifies when the folded sum is 0xFFFF.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..read import u8, u16


@njit(_nrt=False)
def sum16(b, p, end):
    """One's-complement sum (not folded) of the 16-bit words of b[p:end], an odd last byte padded."""
    total = np.uint64(0)
    while p + 1 < end:
        total += np.uint64(u16(b, p))
        p += 2
    if p < end:
        total += np.uint64(u8(b, p) << 8)
    return total


@njit(_nrt=False)
def halves_sum(hi, lo, family):
    """The pseudo-header words of one address: its 4 (IPv4) or 16 bytes as 16-bit words."""
    total = np.uint64(0)
    if family == 4:
        total += (lo >> np.uint64(16)) & np.uint64(0xFFFF)
        total += lo & np.uint64(0xFFFF)
        return total
    for half in (hi, lo):
        for shift in (48, 32, 16, 0):
            total += (half >> np.uint64(shift)) & np.uint64(0xFFFF)
    return total


@njit(_nrt=False)
def fold(total):
    """`total` with its carries folded into 16 bits."""
    while total > np.uint64(0xFFFF):
        total = (total & np.uint64(0xFFFF)) + (total >> np.uint64(16))
    return total

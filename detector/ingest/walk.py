"""Compiled record walks: find every record in a chunk of capture bytes.

Each walk starts at a record boundary, reads record headers only (never the
packet bytes), and fills preallocated column arrays until the chunk holds no
further complete record, the arrays are full, a block needs Python's attention
(pcapng section and interface blocks), or the bytes are damaged. It returns
where it stopped and why, so the caller can read more, flush a batch, handle
the block, or report the damage at an exact byte offset.

Packet times are int64 nanoseconds since 1970, which hold the years 1677 to
2262. A classic pcap time (32-bit seconds and fraction) always fits. A pcapng
time (64-bit units of the interface's if_tsresol plus its if_tsoffset
seconds) may not: such a record keeps its place with its time saturated at
+/-(2^63 - 1) ns (2262-04-11T23:47:16.854775807Z, or its mirror before
1970), never wrapped, and the walk returns where the first one was so the
reader can warn. -(2^63) is never produced: pandas reads it as NaT.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..capfile import (
    BT_EPB,
    BT_IDB,
    BT_ISB,
    BT_OPB,
    BT_SHB,
    BT_SPB,
    MIN_BLOCK,
    MIN_EPB,
    MIN_OPB,
    MIN_SPB,
    OPT_ENDOFOPT,
    OPT_PACKET_FLAGS,
    PCAP_RECORD_HEADER,
)
from ..cpu import kernel, prefetch
from ..schema import MAX_CAPLEN
from ..units import NS

# Why a walk stopped.
NEED_MORE = 0   # the record at `pos` is not yet complete in the chunk
FULL = 1        # the output arrays are full
SPECIAL = 2     # pcapng: a section header or interface description block at `pos`
DAMAGED = 3     # the record at `pos` is damaged; the code says how

# Damage codes, explained to the user by DAMAGE_REASONS.
BAD_CAPLEN = 1          # caplen above MAX_CAPLEN
BLOCK_TOO_SMALL = 2     # pcapng block total length below its type's minimum
BLOCK_NOT_ALIGNED = 3   # pcapng block total length not a multiple of 4
BLOCK_LEN_MISMATCH = 4  # leading and trailing block total length differ
UNKNOWN_IFACE = 5       # packet block names an interface the section never described
CAPLEN_PAST_BLOCK = 6   # captured bytes run past the end of their block
BLOCK_TOO_LARGE = 7     # block total length above MAX_BLOCK_BYTES

DAMAGE_REASONS = {
    BAD_CAPLEN: f"record has a {{value}}-byte packet, bigger than maximum of {MAX_CAPLEN}",
    BLOCK_TOO_SMALL: "block total length {value} is too small for its block type",
    BLOCK_NOT_ALIGNED: "block total length {value} is not a multiple of 4",
    BLOCK_LEN_MISMATCH: "block total length {value} differs from the trailing copy",
    UNKNOWN_IFACE: "packet block names interface {value}, not described in this section",
    CAPLEN_PAST_BLOCK: "captured length {value} runs past the end of its block",
    BLOCK_TOO_LARGE: "block total length {value} is larger than any block this reader accepts",
}

# A pcapng block larger than this is damage, not data (Wireshark's own limit
# is of the same order); it also bounds how much a chunk must hold at once.
MAX_BLOCK_BYTES = 8 << 20

# How an interface's timestamp units become nanoseconds (see ts_to_ns).
TS_MULTIPLY = 0     # units of 10^-k s, k <= 9: multiply by 10^(9-k)
TS_DIVIDE = 1       # units of 10^-k s, k > 9: divide by 10^(k-9)
TS_BINARY = 2       # units of 2^-k s: exact integer scaling by 10^9 / 2^k

INT64_MAX = (1 << 63) - 1
# The int64 nanosecond range in whole seconds and nanoseconds: a time fits when
# (TS_MIN_S, TS_MIN_FRAC) < (seconds, nanoseconds) <= (TS_MAX_S, TS_MAX_FRAC).
TS_MAX_S, TS_MAX_FRAC = divmod(INT64_MAX, NS)
TS_MIN_S, TS_MIN_FRAC = divmod(-INT64_MAX - 1, NS)
# Sums of seconds beyond this cannot fit; below it, float64 rounding (a few
# thousand seconds at 2^64) cannot hide one that does not.
FAR_S = 1e10

# The columns of the interface table walk_pcapng reads (one row per interface
# of the section): an int64 table and a uint64 one.
IF_GID = 0          # interface number across the file
IF_LINKTYPE = 1
IF_SNAPLEN = 2
IF_KIND = 3         # TS_MULTIPLY / TS_DIVIDE / TS_BINARY
IF_SHIFT = 4        # TS_BINARY: units are 2^-shift s
IF_OFFSET_NS = 5    # if_tsoffset in ns (0 when it does not fit: FAST_LIMIT is then 0)
IF_OFFSET_S = 6     # if_tsoffset in seconds
IF_INT_COLUMNS = 7
IF_FACTOR = 0       # TS_MULTIPLY / TS_DIVIDE: the power of ten
IF_FAST_LIMIT = 1   # units below this take ts_to_ns + IF_OFFSET_NS without leaving int64
IF_U64_COLUMNS = 2

# The walks ask for the bytes this far ahead of the record they read, one
# cache line at a time: the next record's place is known only once this one's
# length arrives, so without the hint every record header of a mapped file is
# a wait on main memory (0.3 s instead of 0.08 s for 2 M records).
PREFETCH_BYTES = 4096
CACHE_LINE = 64


@njit
def _u32(buf, i, big):
    if big:
        return (np.uint32(buf[i]) << 24) | (np.uint32(buf[i + 1]) << 16) \
            | (np.uint32(buf[i + 2]) << 8) | np.uint32(buf[i + 3])
    return (np.uint32(buf[i + 3]) << 24) | (np.uint32(buf[i + 2]) << 16) \
        | (np.uint32(buf[i + 1]) << 8) | np.uint32(buf[i])


@njit
def _u16(buf, i, big):
    if big:
        return (np.uint32(buf[i]) << 8) | np.uint32(buf[i + 1])
    return (np.uint32(buf[i + 1]) << 8) | np.uint32(buf[i])


@njit
def _prefetch_ahead(buf, ahead, pos, end):
    """Prefetch the lines from `ahead` up to PREFETCH_BYTES past `pos`; returns the new `ahead`."""
    limit = min(pos + PREFETCH_BYTES, end)
    while ahead < limit:
        prefetch(buf, ahead)
        ahead += CACHE_LINE
    return ahead


@kernel("(u1[::1], i8, i8, b1, i8, i8[::1], u4[::1], u4[::1], i8[::1], i8, i8)", nogil=True)
def walk_pcap(buf, pos, end, big, frac_ns, out_off, out_cap, out_wire, out_ts, n, limit):
    """Walk classic pcap records in buf[pos:end] into out_*[n:limit].

    frac_ns: nanoseconds per unit of the fractional timestamp (1000 or 1).
    Returns (records in out_* now, stop position, NEED_MORE/FULL/DAMAGED, damage code, value).
    """
    ahead = pos
    while True:
        if n >= limit:
            return n, pos, FULL, 0, np.int64(0)
        ahead = _prefetch_ahead(buf, ahead, pos, end)
        if end - pos < PCAP_RECORD_HEADER:
            return n, pos, NEED_MORE, 0, np.int64(0)
        caplen = _u32(buf, pos + 8, big)
        if caplen > MAX_CAPLEN:
            return n, pos, DAMAGED, BAD_CAPLEN, np.int64(caplen)
        stop = pos + PCAP_RECORD_HEADER + np.int64(caplen)
        if stop > end:
            return n, pos, NEED_MORE, 0, np.int64(0)
        sec = np.int64(_u32(buf, pos, big))
        frac = np.int64(_u32(buf, pos + 4, big))
        out_ts[n] = sec * NS + frac * frac_ns
        out_off[n] = pos + PCAP_RECORD_HEADER
        out_cap[n] = caplen
        out_wire[n] = _u32(buf, pos + 12, big)
        n += 1
        pos = stop


@njit
def _binary_parts(units, shift):
    """Whole seconds and nanoseconds of `units` of 2^-shift s, flooring within 64 bits."""
    if shift >= 64:
        secs = np.uint64(0)
        frac = units
    else:
        secs = units >> np.uint64(shift)
        frac = units & ((np.uint64(1) << np.uint64(shift)) - np.uint64(1))
    # frac < 2^shift, and 2^34 * 10^9 < 2^64: drop low fraction bits beyond 34
    if shift > 34:
        drop = shift - 34
        frac = np.uint64(0) if drop >= 64 else frac >> np.uint64(drop)
        return secs, (frac * np.uint64(NS)) >> np.uint64(34)
    return secs, (frac * np.uint64(NS)) >> np.uint64(shift)


@njit
def ts_to_ns(units, kind, factor, shift):
    """Interface timestamp units (uint64) to ns, exactly, without floats.

    Only for units below the interface's IF_FAST_LIMIT, where the result
    fits int64; ts_exact takes the others.
    """
    if kind == TS_MULTIPLY:
        return np.int64(units * factor)
    if kind == TS_DIVIDE:
        return np.int64(units // factor)
    secs, fine = _binary_parts(units, shift)
    return np.int64(secs * np.uint64(NS) + fine)


@njit
def ts_exact(units, kind, factor, shift, offset_s):
    """(ns, False) for units plus offset_s seconds, floored as ts_to_ns does; (+/-INT64_MAX, True) when it does
    not fit."""
    if kind == TS_MULTIPLY:
        per_sec = np.uint64(NS) // factor
        secs = units // per_sec
        frac = np.int64((units - secs * per_sec) * factor)
    elif kind == TS_DIVIDE:
        ns = units // factor
        secs = ns // np.uint64(NS)
        frac = np.int64(ns % np.uint64(NS))
    else:
        secs, fine = _binary_parts(units, shift)
        frac = np.int64(fine)
    near = np.float64(secs) + np.float64(offset_s)
    if near > FAR_S:
        return np.int64(INT64_MAX), True
    if near < -FAR_S:
        return np.int64(-INT64_MAX), True
    # the true sum is small, so the sum modulo 2^64 is exact
    s = np.int64(secs + np.uint64(offset_s))
    if s > TS_MAX_S or (s == TS_MAX_S and frac > TS_MAX_FRAC):
        return np.int64(INT64_MAX), True
    if s < TS_MIN_S or (s == TS_MIN_S and frac <= TS_MIN_FRAC):
        return np.int64(-INT64_MAX), True
    if s >= 0:
        return s * NS + frac, False
    return (s + 1) * NS + (frac - NS), False


@njit(_nrt=False)
def _packet_flags(buf, p, end, big):
    """The flags option (code 2, 32 bits: epb_flags, or the obsolete block's pack_flags) among the options
    in buf[p:end]; 0 without one. An option that runs past its block ends the search: the packet stands."""
    while p + 4 <= end:
        code = _u16(buf, p, big)
        length = np.int64(_u16(buf, p + 2, big))
        if code == OPT_ENDOFOPT or p + 4 + length > end:
            return np.uint32(0)
        if code == OPT_PACKET_FLAGS and length == 4:
            return _u32(buf, p + 4, big)
        p += 4 + ((length + 3) & ~np.int64(3))
    return np.uint32(0)


@kernel("(u1[::1], i8, i8, b1, i8[:, ::1], u8[:, ::1], i8, i8, i8[::1], u4[::1], u4[::1], i8[::1], "
        "u2[::1], u2[::1], u4[::1], i8, i8)", nogil=True)
def walk_pcapng(buf, pos, end, big, if_int, if_u64, n_if, last_ts, out_off, out_cap, out_wire, out_ts,
                out_if, out_lt, out_flags, n, limit):
    """Walk pcapng blocks in buf[pos:end] of one section (byte order `big`) into out_*[n:limit].

    Packet blocks (EPB, SPB, OPB) become records; blocks other than SHB, IDB
    and ISB are skipped by length; those three stop the walk (SPECIAL) for
    Python to parse. The first n_if rows of if_int and if_u64 (columns IF_*)
    describe the section's interfaces. last_ts is the time given to a simple
    packet block, which carries none.
    Returns (records in out_* now, stop position, reason, damage code, value,
    last_ts, position of the first record whose time did not fit int64 ns or -1).
    """
    ahead = pos
    overflow_at = np.int64(-1)
    while True:
        if n >= limit:
            return n, pos, FULL, 0, np.int64(0), last_ts, overflow_at
        ahead = _prefetch_ahead(buf, ahead, pos, end)
        if end - pos < 8:
            return n, pos, NEED_MORE, 0, np.int64(0), last_ts, overflow_at
        btype = _u32(buf, pos, big)
        if btype == BT_SHB:
            return n, pos, SPECIAL, 0, np.int64(0), last_ts, overflow_at
        blen = np.int64(_u32(buf, pos + 4, big))
        if blen > MAX_BLOCK_BYTES:
            return n, pos, DAMAGED, BLOCK_TOO_LARGE, np.int64(blen), last_ts, overflow_at
        if blen & 3:
            return n, pos, DAMAGED, BLOCK_NOT_ALIGNED, np.int64(blen), last_ts, overflow_at
        minimum = MIN_BLOCK
        if btype == BT_EPB:
            minimum = MIN_EPB
        elif btype == BT_OPB:
            minimum = MIN_OPB
        elif btype == BT_SPB:
            minimum = MIN_SPB
        if blen < minimum:
            return n, pos, DAMAGED, BLOCK_TOO_SMALL, np.int64(blen), last_ts, overflow_at
        if end - pos < blen:
            return n, pos, NEED_MORE, 0, np.int64(0), last_ts, overflow_at
        if np.int64(_u32(buf, pos + blen - 4, big)) != blen:
            return n, pos, DAMAGED, BLOCK_LEN_MISMATCH, np.int64(blen), last_ts, overflow_at
        if btype == BT_IDB or btype == BT_ISB:
            return n, pos, SPECIAL, 0, np.int64(0), last_ts, overflow_at
        if btype == BT_EPB or btype == BT_OPB:
            if btype == BT_EPB:
                iface = np.int64(_u32(buf, pos + 8, big))
            else:
                iface = np.int64(_u16(buf, pos + 8, big))
            if iface >= n_if:
                return n, pos, DAMAGED, UNKNOWN_IFACE, np.int64(iface), last_ts, overflow_at
            caplen = _u32(buf, pos + 20, big)
            if caplen > MAX_CAPLEN:
                return n, pos, DAMAGED, BAD_CAPLEN, np.int64(caplen), last_ts, overflow_at
            if np.int64(caplen) > blen - MIN_EPB:
                return n, pos, DAMAGED, CAPLEN_PAST_BLOCK, np.int64(caplen), last_ts, overflow_at
            units = (np.uint64(_u32(buf, pos + 12, big)) << np.uint64(32)) \
                | np.uint64(_u32(buf, pos + 16, big))
            if units < if_u64[iface, IF_FAST_LIMIT]:
                last_ts = ts_to_ns(units, if_int[iface, IF_KIND], if_u64[iface, IF_FACTOR],
                                   if_int[iface, IF_SHIFT]) + if_int[iface, IF_OFFSET_NS]
            else:
                last_ts, overflowed = ts_exact(units, if_int[iface, IF_KIND], if_u64[iface, IF_FACTOR],
                                               if_int[iface, IF_SHIFT], if_int[iface, IF_OFFSET_S])
                if overflowed and overflow_at < 0:
                    overflow_at = pos
            out_off[n] = pos + 28
            out_cap[n] = caplen
            out_wire[n] = _u32(buf, pos + 24, big)
            out_ts[n] = last_ts
            out_if[n] = if_int[iface, IF_GID]
            out_lt[n] = if_int[iface, IF_LINKTYPE]
            out_flags[n] = _packet_flags(buf, pos + 28 + ((np.int64(caplen) + 3) & ~np.int64(3)), pos + blen - 4, big)
            n += 1
        elif btype == BT_SPB:
            if n_if == 0:
                return n, pos, DAMAGED, UNKNOWN_IFACE, np.int64(0), last_ts, overflow_at
            wire = _u32(buf, pos + 8, big)
            spb_cap = np.int64(wire)
            snaplen = if_int[0, IF_SNAPLEN]
            if snaplen != 0 and spb_cap > snaplen:
                spb_cap = snaplen
            if spb_cap > blen - MIN_SPB:
                spb_cap = blen - MIN_SPB
            if spb_cap > MAX_CAPLEN:
                return n, pos, DAMAGED, BAD_CAPLEN, np.int64(spb_cap), last_ts, overflow_at
            out_off[n] = pos + 12
            out_cap[n] = spb_cap
            out_wire[n] = wire
            out_ts[n] = last_ts
            out_if[n] = if_int[0, IF_GID]
            out_lt[n] = if_int[0, IF_LINKTYPE]
            out_flags[n] = 0
            n += 1
        pos += blen

"""Flow tables to files: CSV formatted by a compiled kernel, Parquet with pyarrow.

The CSV writer takes any table of columns (name -> 1-D array): integers,
floats (rounded to 6 decimals, NaN as an empty field, as pandas writes it),
the time columns `first_seen`/`last_seen` (int64 ns since the epoch, written
as ISO 8601 UTC with nanoseconds), and text (an object array of str, or
TextCodes, whose value bytes are copied without a Python string per row;
quoted as RFC 4180 asks only where a field holds a comma, quote or line
break).
Every row is formatted by one compiled pass into a byte buffer, a block of
rows at a time: formatting 40,000 flows this way takes milliseconds, where
Python's %-formatting of each field took a quarter of a second, as long as
reading a million packets.

Both writers write beside the file and rename (output.atomic_file): a full
disk or an interruption leaves the previous file, never part of a new one.
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from numba import njit

from ..cpu import kernel
from ..errors import UsageError
from ..output import atomic_file
from ..text import TextCodes, utf8_fields
from ..units import NS

TIME_COLUMNS = ("first_seen", "last_seen")

# How the kernel writes each column.
K_INT, K_UINT, K_FLOAT, K_TIME, K_TEXT = range(5)
# Widest text of a number kind: 20 digits and a sign; "-" + 12 digits + "." + 6 decimals;
# "2262-04-11T23:47:16.854775807Z".
FIELD_WIDTH = {K_INT: 21, K_UINT: 20, K_FLOAT: 20, K_TIME: 30}
# Floats at or beyond this magnitude are written by Python (repr of the rounded
# value): below it, the value in millionths fits an int64 exactly.
FLOAT_FAST_LIMIT = 1e12
# Rows formatted into one buffer; FORMAT_THREADS blocks are formatted at
# once (the kernel runs without the GIL) and written in order.
ROWS_PER_BLOCK = 1 << 14
FORMAT_THREADS = 2

SECONDS_PER_DAY = 86_400
COMMA, QUOTE, NEWLINE, RETURN = ord(","), ord('"'), ord("\n"), ord("\r")


@njit
def _width(value):
    """Decimal digits of a non-negative int64 (comparisons, not divisions: most values are small)."""
    width = 1
    bound = 10
    while width < 19 and value >= bound:
        width += 1
        bound *= 10
    return width


@njit
def _padded(out, p, value, width):
    """`value` (non-negative) as exactly `width` digits, with leading zeros."""
    for q in range(p + width - 1, p - 1, -1):
        out[q] = 48 + value % 10
        value //= 10
    return p + width


@njit
def _digits(out, p, value):
    """Decimal digits of a non-negative int64 at out[p:]; returns the position after them."""
    return _padded(out, p, value, _width(value))


@njit
def _uint(out, p, value):
    """Decimal digits of a uint64."""
    ten = np.uint64(10)
    width = 1
    v = value
    while v >= ten:
        v //= ten
        width += 1
    for q in range(p + width - 1, p - 1, -1):
        out[q] = 48 + np.int64(value % ten)
        value //= ten
    return p + width


@njit
def _float6(out, p, x):
    """x rounded to 6 decimals, trailing zeros dropped (one decimal kept): 12.5, 0.000123, -3.0."""
    millionths = np.int64(round(abs(x) * 1e6))
    if x < 0 and millionths > 0:
        out[p] = 45
        p += 1
    p = _digits(out, p, millionths // 1_000_000)
    out[p] = 46
    p += 1
    fraction = millionths % 1_000_000
    if fraction == 0:
        out[p] = 48
        return p + 1
    width = 6
    while fraction % 10 == 0:
        fraction //= 10
        width -= 1
    return _padded(out, p, fraction, width)


@njit
def _iso_time(out, p, ns):
    """int64 ns since the epoch as 2024-01-01T00:00:00.000117000Z (proleptic Gregorian, UTC)."""
    seconds = ns // NS
    fraction = ns - seconds * NS
    days = seconds // SECONDS_PER_DAY
    clock = seconds - days * SECONDS_PER_DAY
    # civil_from_days, H. Hinnant, "chrono-Compatible Low-Level Date Algorithms"
    z = days + 719468
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    p = _padded(out, p, year, 4)
    out[p] = 45
    p = _padded(out, p + 1, month, 2)
    out[p] = 45
    p = _padded(out, p + 1, day, 2)
    out[p] = 84
    p = _padded(out, p + 1, clock // 3600, 2)
    out[p] = 58
    p = _padded(out, p + 1, clock // 60 % 60, 2)
    out[p] = 58
    p = _padded(out, p + 1, clock % 60, 2)
    out[p] = 46
    p = _padded(out, p + 1, fraction, 9)
    out[p] = 90
    return p + 1


@njit
def _text(out, p, blob, start, length):
    """A text field, in quotes (inner quotes doubled) when it holds a comma, quote or line break."""
    special = False
    for q in range(start, start + length):
        c = blob[q]
        if c == COMMA or c == QUOTE or c == NEWLINE or c == RETURN:
            special = True
            break
    if not special:
        for q in range(length):
            out[p + q] = blob[start + q]
        return p + length
    out[p] = QUOTE
    p += 1
    for q in range(start, start + length):
        if blob[q] == QUOTE:
            out[p] = QUOTE
            p += 1
        out[p] = blob[q]
        p += 1
    out[p] = QUOTE
    return p + 1


@kernel("(i8[::1], i8[::1], i8[:, ::1], f8[:, ::1], u1[::1], i8[:, ::1], i8[:, ::1], i8, i8, u1[::1])", nogil=True)
def format_rows(kinds, slots, ints, floats, blob, text_start, text_len, first, last, out):
    """Rows first..last-1 as CSV lines in `out`; returns the bytes written.

    Column c has kind kinds[c] and is row slots[c] of `ints` (K_INT, K_UINT
    as the same 64 bits, K_TIME), of `floats` (K_FLOAT), or of text_start /
    text_len, which locate each field in `blob` (K_TEXT).
    """
    p = 0
    for i in range(first, last):
        for c in range(kinds.shape[0]):
            if c:
                out[p] = COMMA
                p += 1
            kind = kinds[c]
            s = slots[c]
            if kind == K_INT:
                v = ints[s, i]
                if v < 0:
                    out[p] = 45
                    p += 1
                    if v == -v:      # the most negative int64 has no positive counterpart
                        p = _uint(out, p, np.uint64(1) << np.uint64(63))
                        continue
                    v = -v
                p = _digits(out, p, v)
            elif kind == K_UINT:
                p = _uint(out, p, np.uint64(ints[s, i]))
            elif kind == K_TIME:
                p = _iso_time(out, p, ints[s, i])
            elif kind == K_FLOAT:
                x = floats[s, i]
                if not np.isnan(x):
                    p = _float6(out, p, x)
            else:
                p = _text(out, p, blob, text_start[s, i], text_len[s, i])
        out[p] = NEWLINE
        p += 1
    return p


def _text_fields(column) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes, start of each row's field, its byte length) of a text column."""
    if isinstance(column, TextCodes):
        blob, starts, lengths = column.value_bytes()
        codes = np.asarray(column.codes, dtype=np.intp)
        return blob, starts[codes], lengths[codes]
    return utf8_fields(np.asarray(column).tolist())


def _rounded_reprs(values: np.ndarray) -> np.ndarray:
    """Floats too large for the kernel's fixed-point path, as Python writes them."""
    return np.array(["" if np.isnan(v) else repr(round(float(v), 6)) for v in values], dtype=object)


def write_csv(view: dict, path: Path) -> None:
    """One line per row of `view` (name -> 1-D array or TextCodes; a header line first), written to `path`."""
    with atomic_file(path) as handle:
        write_csv_to(view, handle)


def write_csv_to(view: dict, handle) -> None:
    """write_csv's lines to the binary `handle` as they are formatted (standard output: `flows -o -`)."""
    names = list(view)
    n = len(view[names[0]]) if names else 0
    kinds, slots = [], []
    ints, floats, texts = [], [], []
    for name in names:
        if isinstance(view[name], TextCodes):
            kinds.append(K_TEXT)
            slots.append(len(texts))
            texts.append(_text_fields(view[name]))
            continue
        values = np.asarray(view[name])
        if values.dtype.kind == "f" and np.any(np.abs(values[np.isfinite(values)]) >= FLOAT_FAST_LIMIT):
            values = _rounded_reprs(values)
        if values.dtype.kind == "f" and np.all(np.isfinite(values) | np.isnan(values)):
            kinds.append(K_FLOAT)
            slots.append(len(floats))
            floats.append(values.astype(np.float64))
        elif name in TIME_COLUMNS or values.dtype.kind in "iu":
            kinds.append(K_TIME if name in TIME_COLUMNS else K_UINT if values.dtype.kind == "u" else K_INT)
            slots.append(len(ints))
            ints.append(values.astype(np.uint64).view(np.int64) if values.dtype.kind == "u"
                        else values.astype(np.int64))
        else:
            if values.dtype.kind == "f":        # infinities: as Python spells them
                values = _rounded_reprs(values)
            kinds.append(K_TEXT)
            slots.append(len(texts))
            texts.append(_text_fields(values))
    ints_m = np.array(ints, dtype=np.int64).reshape(len(ints), n)
    floats_m = np.array(floats, dtype=np.float64).reshape(len(floats), n)
    blob = np.concatenate([t[0] for t in texts]) if texts else np.zeros(0, dtype=np.uint8)
    offsets = np.cumsum([0] + [len(t[0]) for t in texts[:-1]]).astype(np.int64)
    text_start = (np.array([t[1] for t in texts], dtype=np.int64).reshape(len(texts), n)
                  + offsets[:len(texts), None])
    text_len = np.array([t[2] for t in texts], dtype=np.int64).reshape(len(texts), n)
    kinds_a, slots_a = np.array(kinds, dtype=np.int64), np.array(slots, dtype=np.int64)
    width = sum(FIELD_WIDTH[k] for k in kinds if k != K_TEXT) + len(kinds)

    def block(first: int) -> np.ndarray:
        last = min(n, first + ROWS_PER_BLOCK)
        # a text field at most doubles (quotes) plus its two enclosing quotes
        width_text = int((2 * text_len[:, first:last] + 2).sum()) if len(texts) else 0
        out = np.empty(width * (last - first) + width_text, dtype=np.uint8)
        return out[:format_rows(kinds_a, slots_a, ints_m, floats_m, blob, text_start, text_len, first, last, out)]

    with ThreadPoolExecutor(FORMAT_THREADS) as pool:
        handle.write((",".join(names) + "\n").encode("utf-8"))
        pending: deque = deque()
        for first in range(0, n, ROWS_PER_BLOCK):
            pending.append(pool.submit(block, first))
            if len(pending) > FORMAT_THREADS:
                handle.write(pending.popleft().result().data)
        while pending:
            handle.write(pending.popleft().result().data)


def write_parquet(frame, path: Path) -> None:
    try:
        import pyarrow  # noqa: F401  (pandas needs it for Parquet)
    except ImportError:
        raise UsageError("parquet output needs pyarrow: pip install 'detector[parquet]'") from None
    with atomic_file(path) as handle:
        frame.to_parquet(handle, index=False)

"""Text columns without a Python string per row: the distinct values and each row's index into them.

Flow tables and packet views carry text that repeats (protocol names, TCP
flag strings, Zeek states and histories, the few thousand addresses of a
capture) or that compiled code writes as bytes (Community IDs). `TextCodes`
keeps such a column as its distinct values plus one integer per row: the CSV
writer copies the bytes of a value straight from there, and `text()` makes
the Python strings only for those who ask (pandas, tests).

Values are given either as Python strings or as the rows of an ASCII uint8
matrix with their lengths, as compiled formatters produce them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def ascii_rows(raw: np.ndarray, lengths=None) -> np.ndarray:
    """Rows of an ASCII uint8 matrix (each cut to its length, if given) as an object array of str."""
    n, width = raw.shape
    text = np.ascontiguousarray(raw).tobytes().decode("ascii")
    out = np.empty(n, dtype=object)
    if lengths is None:
        out[:] = [text[at:at + width] for at in range(0, n * width, width)]
    else:
        out[:] = [text[at:at + size] for at, size in zip(range(0, n * width, width), lengths.tolist())]
    return out


@dataclass(frozen=True)
class TextCodes:
    """A text column: row i holds value codes[i] of `values`.

    `values` is a sequence of str, or an ASCII uint8 matrix whose row j is
    value j, cut to lengths[j] (the whole row when `lengths` is None).
    """

    codes: np.ndarray
    values: object
    lengths: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.codes)

    def value_texts(self) -> np.ndarray:
        """The distinct values as an object array of str."""
        if isinstance(self.values, np.ndarray) and self.values.dtype == np.uint8:
            return ascii_rows(self.values, self.lengths)
        return np.asarray(self.values, dtype=object)

    def text(self) -> np.ndarray:
        """One str per row (an object array)."""
        return self.value_texts()[np.asarray(self.codes, dtype=np.intp)]

    def value_bytes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(bytes of all values, start of each, byte length of each): UTF-8 of the values, without rows."""
        if isinstance(self.values, np.ndarray) and self.values.dtype == np.uint8:
            m, width = self.values.shape
            lengths = (np.full(m, width, dtype=np.int64) if self.lengths is None
                       else np.asarray(self.lengths, dtype=np.int64))
            return (np.ascontiguousarray(self.values).reshape(-1), np.arange(m, dtype=np.int64) * width,
                    lengths)
        return utf8_fields(list(self.values))


def utf8_fields(texts: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(UTF-8 bytes of all fields, start of each, byte length of each) of a list of str (others: str())."""
    try:
        joined = "".join(texts)
    except TypeError:                       # not all str: numbers, None
        texts = [v if isinstance(v, str) else str(v) for v in texts]
        joined = "".join(texts)
    blob = joined.encode("utf-8")
    if len(blob) == len(joined):            # all ASCII: byte lengths are character lengths
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    else:
        lengths = np.fromiter((len(t.encode("utf-8")) for t in texts), dtype=np.int64, count=len(texts))
    starts = np.zeros(len(texts), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return np.frombuffer(blob, dtype=np.uint8), starts, lengths

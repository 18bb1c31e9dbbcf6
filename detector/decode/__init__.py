"""Header decode: a RawBatch of captured records becomes a PacketBatch of decoded columns.

`decode` runs one compiled pass over the batch (detector.decode.kernel) that
fills every column of PACKET_COLUMNS, masked by layer bits where a record
lacks the field, plus each record's fingerprint: XXH64 (seed 0) of all its
captured bytes. Address helpers for reports live in detector.decode.addr.

One row per record: an 802.11 A-MSDU, which carries several packets in one
frame, is described by its first subframe, with msdu_count saying how many
there are. `expand_msdus` gives the others rows of their own (same frame
number and time), for the consumers that count packets as Zeek does.
"""
from __future__ import annotations

import numpy as np

from ..errors import UsageError
from ..schema import RAW_COLUMNS, PacketBatch, RawBatch
from . import app, columns
from .kernel import decode_batch, fingerprint_rows

__all__ = ["decode", "expand_msdus", "fingerprint", "fingerprints"]


def _records(raw: RawBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batch's buffer, offsets and captured lengths, checked to lie inside the buffer.

    The compiled code does not bounds-check, so a record that ran past the
    buffer would read foreign memory; the check is two vector operations.
    """
    data = np.ascontiguousarray(raw.data, dtype=np.uint8)
    offset = np.ascontiguousarray(raw.cols["offset"], dtype=np.int64)
    caplen = np.ascontiguousarray(raw.cols["caplen"], dtype=np.uint32)
    if len(offset) and (offset.min() < 0 or (offset + caplen).max() > len(data)):
        raise UsageError(f"{raw.source or 'batch'}: a record runs outside the batch's byte buffer")
    return data, offset, caplen


def decode(raw: RawBatch, fingerprint: bool = True, msdu: int = 0, tables: tuple[str, ...] = ()) -> PacketBatch:
    """Decode every record of `raw`; the result carries the raw columns too, and the application
    side-tables named in `tables` (detector.decode.app).

    With `fingerprint=False` the batch has no "fingerprint" column (hashing
    every captured byte is the costliest part of the pass, and the flow table
    does not need it); a consumer that reads it anyway fails loudly. `msdu`
    picks the A-MSDU subframe the rows of 802.11 A-MSDUs describe (0, the
    first, unless expand_msdus asks for another).
    """
    data, offset, caplen = _records(raw)
    wirelen = np.ascontiguousarray(raw.cols["wirelen"], dtype=np.uint32)
    linktype = np.ascontiguousarray(raw.cols["linktype"], dtype=np.uint16)
    groups = columns.allocate(len(offset))
    decode_batch(data, offset, caplen, wirelen, linktype, msdu, fingerprint,
                 groups[np.uint8], groups[np.uint16], groups[np.uint32], groups[np.uint64])
    cols = dict(raw.cols)
    cols.update(columns.columns(groups))
    if not fingerprint:
        del cols["fingerprint"]
    return app.build(PacketBatch(data=raw.data, cols=cols, source=raw.source), tables)


def expand_msdus(batch: PacketBatch) -> PacketBatch:
    """`batch` with a row for every A-MSDU subframe after the first, right after its frame's row.

    The batch itself where no frame is an A-MSDU of more than one subframe.
    The added rows share their frame's raw columns (frame number, time,
    lengths) and fingerprint, and describe their own subframe.
    """
    # a masked column holds 0, so the count alone says whether there is anything to do
    if len(batch) == 0 or int(batch["msdu_count"].max()) <= 1:
        return batch
    count = batch["msdu_count"]
    parents, indices, parts = [], [], []
    # one pass per subframe number, over the frames that have that many (a loop over subframe
    # numbers, not packets: the compiled pass takes the number as a constant, which keeps it fast)
    for k in range(1, int(count.max())):
        rows = np.flatnonzero(count > k)
        raw = RawBatch(batch.data, {name: batch[name][rows] for name in RAW_COLUMNS}, batch.source)
        parts.append(decode(raw, fingerprint=False, msdu=k))
        parents.append(rows)
        indices.append(np.full(len(rows), k))
    parent = np.concatenate(parents)
    # each frame's rows in subframe order, frames in capture order
    order = np.lexsort((np.concatenate([np.zeros(len(batch), np.int64), *indices]),
                        np.concatenate([np.arange(len(batch)), parent])))
    cols = {}
    for name, column in batch.cols.items():
        extra = np.concatenate([part[name] for part in parts]) if name in parts[0].cols else column[parent]
        cols[name] = np.concatenate([column, extra])[order]
    return PacketBatch(data=batch.data, cols=cols, source=batch.source, warnings=batch.warnings)


def fingerprints(raw: RawBatch) -> np.ndarray:
    """The fingerprint column alone (uint64 per record), without decoding headers."""
    data, offset, caplen = _records(raw)
    out = np.empty(len(offset), dtype=np.uint64)
    fingerprint_rows(data, offset, caplen, out)
    return out


def fingerprint(frame: bytes) -> int:
    """The fingerprint of one frame's bytes: equal to the decoded column for that frame."""
    data = np.frombuffer(bytearray(frame), dtype=np.uint8)     # writable, as the kernel's one signature
    out = np.empty(1, dtype=np.uint64)
    fingerprint_rows(data, np.zeros(1, np.int64), np.array([len(data)], np.uint32), out)
    return int(out[0])

"""Captured frames kept for evidence: a Segment per batch, and writing segments out as a capture file.

A Segment is a compact, owned copy of one decoded batch's records: their
bytes and the columns a capture file needs (time, lengths, link type, frame
number). The copy lets the reader's chunk buffers go (a batch is a view of
one) and makes the memory a ring holds exact.

`write_capture` writes segments as classic pcap with nanosecond timestamps,
or as pcapng with one interface per link type when they span several, in a
compiled pass per segment that runs without the GIL (a 30 s ring of a busy
link is millions of records; the capture loop keeps running meanwhile).
`write_records` writes to an open handle; `write_capture` makes the file
appear under its name only when complete (written aside, then renamed:
output.atomic_file), so a reader never sees half of it.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

from ..cpu import kernel
from ..output import atomic_file
from ..report.evidence import (PCAP_MAGIC_NS, PCAP_VERSION, PCAPNG_BOM, PCAPNG_EPB, PCAPNG_IDB, PCAPNG_SHB,
                               PCAPNG_TSRESOL_NS)
from ..schema import MAX_CAPLEN, PacketBatch

NS = 1_000_000_000
PCAP_RECORD_HEADER = 16
PCAPNG_EPB_OVERHEAD = 32


@dataclass
class Segment:
    data: np.ndarray        # uint8, the records' bytes (offsets index into it)
    offset: np.ndarray      # int64
    caplen: np.ndarray      # uint32
    wirelen: np.ndarray     # uint32
    ts_ns: np.ndarray       # int64
    linktype: np.ndarray    # uint16
    frame: np.ndarray       # int64

    @classmethod
    def of(cls, batch: PacketBatch) -> "Segment":
        return cls(data=np.array(batch.data, dtype=np.uint8, copy=True),
                   offset=batch["offset"].astype(np.int64), caplen=batch["caplen"].astype(np.uint32),
                   wirelen=batch["wirelen"].astype(np.uint32), ts_ns=batch["ts_ns"].astype(np.int64),
                   linktype=batch["linktype"].astype(np.uint16), frame=batch["frame"].astype(np.int64))

    def __len__(self) -> int:
        return len(self.frame)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes) + 34 * len(self)

    @property
    def last_ns(self) -> int:
        return int(self.ts_ns.max()) if len(self) else 0

    def frame_bytes(self, i: int) -> bytes:
        return self.data[self.offset[i]:self.offset[i] + self.caplen[i]].tobytes()


@njit(nogil=True)
def _put_u32(out, at, value):
    for k in range(4):
        out[at + k] = (value >> (8 * k)) & 0xFF


@kernel("(u1[::1], i8[::1], u4[::1], u4[::1], i8[::1], i8[::1], b1[::1], b1, u1[::1])", nogil=True)
def _pack_records(data, offset, caplen, wirelen, ts_ns, iface, keep, pcapng, out):
    """Records of the kept rows into `out` (pcap records, or pcapng EPBs); returns the bytes written."""
    pos = 0
    for i in range(len(offset)):
        if not keep[i]:
            continue
        n = np.int64(caplen[i])
        ts = max(ts_ns[i], np.int64(0))
        if pcapng:
            padded = (n + 3) & ~np.int64(3)
            total = 32 + padded
            _put_u32(out, pos, PCAPNG_EPB)
            _put_u32(out, pos + 4, total)
            _put_u32(out, pos + 8, iface[i])
            _put_u32(out, pos + 12, ts >> 32)
            _put_u32(out, pos + 16, ts & 0xFFFFFFFF)
            _put_u32(out, pos + 20, n)
            _put_u32(out, pos + 24, max(np.int64(wirelen[i]), n))
            out[pos + 28:pos + 28 + n] = data[offset[i]:offset[i] + n]
            out[pos + 28 + n:pos + 28 + padded] = 0
            _put_u32(out, pos + 28 + padded, total)
            pos += total
        else:
            _put_u32(out, pos, min(ts // 1_000_000_000, np.int64(0xFFFFFFFF)))
            _put_u32(out, pos + 4, ts % 1_000_000_000)
            _put_u32(out, pos + 8, n)
            _put_u32(out, pos + 12, max(np.int64(wirelen[i]), n))
            out[pos + 16:pos + 16 + n] = data[offset[i]:offset[i] + n]
            pos += 16 + n
    return pos


def _block(kind: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack("<II", kind, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))


def write_capture(path: Path, segments: list[Segment], since_ns: int | None = None) -> int:
    """Write the records of `segments` (those from `since_ns` on) as the file `path`; returns how many."""
    with atomic_file(path) as handle:
        return write_records(handle, segments, since_ns)


def write_records(handle, segments: list[Segment], since_ns: int | None = None) -> int:
    """Write the records of `segments` (those from `since_ns` on) as a capture to the binary `handle`;
    returns how many were written."""
    keeps = [seg.ts_ns >= since_ns if since_ns is not None else np.ones(len(seg), dtype=bool) for seg in segments]
    linktypes = sorted({int(lt) for seg, keep in zip(segments, keeps) for lt in np.unique(seg.linktype[keep])})
    pcapng = len(linktypes) > 1
    if pcapng:
        head = _block(PCAPNG_SHB, struct.pack("<IHHq", PCAPNG_BOM, 1, 0, -1))
        head += b"".join(_block(PCAPNG_IDB, struct.pack("<HHI", lt, 0, MAX_CAPLEN) + PCAPNG_TSRESOL_NS)
                         for lt in linktypes)
    else:
        head = struct.pack("<IHHiIII", PCAP_MAGIC_NS, *PCAP_VERSION, 0, 0, MAX_CAPLEN,
                           linktypes[0] if linktypes else 1)
    index = np.zeros(65536, dtype=np.int64)
    index[linktypes] = np.arange(len(linktypes))
    written = 0
    handle.write(head)
    for seg, keep in zip(segments, keeps):
        if not keep.any():
            continue
        caplen = seg.caplen[keep].astype(np.int64)
        per_record = PCAPNG_EPB_OVERHEAD + ((caplen + 3) & ~3) if pcapng else PCAP_RECORD_HEADER + caplen
        out = np.empty(int(per_record.sum()), dtype=np.uint8)
        size = _pack_records(seg.data, seg.offset, seg.caplen, seg.wirelen, seg.ts_ns,
                             index[seg.linktype], keep, pcapng, out)
        handle.write(out[:size].data)
        written += int(keep.sum())
    return written

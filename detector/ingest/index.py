"""Record index: where every record of a capture begins, so one frame can be read alone, by its offset.

    index = build_index("trace.pcapng")          # one cheap walk: record headers only, never decoded
    index.read([0, 41])                           # records 1 and 42: (ts_ns, wirelen, linktype, iface, bytes)
    for part in index.byte_ranges(4):             # the capture cut at record boundaries (issue 14)
        reader = part.reader()                    # a CaptureReader of the range alone

The walk is the reader's own (CaptureReader with keep_offsets, the compiled
record walks of `walk`): the index is built from the same records `analyze`
reads, never by a second parser, and it stops where the reader stops (damage
keeps the records before it, with the reader's warning).

An entry is 10 bytes: the offset of the record in the file (int64: the pcap
record header, or the pcapng block) and, for pcapng, its interface (uint16, the
file-wide number). The interface table holds what a block needs to be read
alone: its section's byte order, link type, snaplen, if_tsresol and
if_tsoffset; a pcap file has one "interface", its file header (byte order,
micro- or nanoseconds, link type). A simple packet block carries no time: the
reader gives it the time of the record before it, and the index keeps those
times (sparse: frame -> ns), so it too reads alone. A 2 M-record capture costs
20 MB of index.

Compressed captures (gzip, xz, zstd) cannot be read at an offset without
decompressing everything before it. `build_index` decompresses such a file
once into an unnamed temporary file in TMPDIR (it takes as much disk as the
capture decompressed, and disappears with the index or the process), indexes
that copy and reads records from it; offsets are then offsets of the copy.

Byte ranges (for partitioned reading, issue 14): `byte_ranges(n)` cuts the
records into n runs of about equal bytes; each ByteRange is a capture of its
own once its `header` is put in front of its bytes (`open()` does it): the
pcap file header, or the section header block of its first record's section
and the interface description blocks that section declared before the range
began (copied from the file, options and byte order as written, so
if_tsresol and if_tsoffset time its records as in the whole file). The last
range runs to the end of the file: the blocks after the last record
(interface statistics, damage) are read by it, as the whole file's reader
reads them. `reader()` reads a range as the whole file's reader reads those
records: frames numbered from `first_frame` (as in the whole file, or as a
cluster numbers several files: dataclasses.replace sets it), a
leading simple packet block given the time of the record before the range
(`last_ts_ns`), interfaces numbered file-wide (its header's first interface
is `interface_base`), and warnings naming offsets of the file. Ranges read in
parallel and concatenated in order give the whole file's records. A range of
an uncompressed file holds no index: it pickles small (a cluster ships it to
the worker that reads it) and reads the file at `path` itself.
"""
from __future__ import annotations

import io
import itertools
import os
import struct
import tempfile
from dataclasses import dataclass, field

import numpy as np

from ..capfile import BT_EPB, BT_OPB, BT_SPB, MIN_SPB, PCAP_RECORD_HEADER
from ..errors import CaptureError, UsageError
from ..schema import MAX_CAPLEN
from .reader import EPB_DATA, SPB_DATA, CaptureReader, interface_ns
from .source import ByteSource
from .walk import INT64_MAX

# Decompressing into the temporary copy: bytes per read
COPY_CHUNK_BYTES = 4 << 20


@dataclass(frozen=True)
class ByteRange:
    """A run of whole records of an indexed capture that reads as a capture of its own (module docstring)."""

    path: str
    start: int              # offset of the first record
    stop: int               # offset just past the range (the next range's start; the file's end for the last)
    first_frame: int        # frame number of its first record
    frames: int             # records in it
    header: bytes           # what makes start:stop a capture alone
    interface_base: int     # pcapng: file-wide number of the first interface its header describes
    last_ts_ns: int         # time of the record before the range (a leading simple packet block's)
    # a compressed capture's index, whose decompressed copy the range reads; None: the file at `path`
    index: RecordIndex | None = field(default=None, repr=False, compare=False)

    def open(self):
        """The range as a binary stream: header, then the file's bytes start:stop (read as the stream is)."""
        return _RangeStream(self)

    def reader(self, **options) -> CaptureReader:
        """A CaptureReader of the range that reads its records as the whole file's reader does (module
        docstring), from frame `first_frame`; `options` go to CaptureReader (batch_packets)."""
        return _RangeReader(self, first_frame=self.first_frame, **options)


class _RangeStream(io.RawIOBase):
    def __init__(self, part: ByteRange):
        self._header = part.header
        self._at = part.start
        self._stop = part.stop
        self.name = part.path
        self._index = part.index
        self._file = None
        if part.index is None:
            try:
                self._file = open(part.path, "rb", buffering=0)
            except OSError as exc:
                raise CaptureError(part.path, exc.strerror or str(exc)) from None

    def readable(self) -> bool:
        return True

    def readinto(self, view) -> int:
        view = memoryview(view).cast("B")
        if self._header:
            take = min(len(view), len(self._header))
            view[:take] = self._header[:take]
            self._header = self._header[take:]
            return take
        take = min(len(view), self._stop - self._at)
        if take <= 0:
            return 0
        if self._file is not None:
            got = os.preadv(self._file.fileno(), [view[:take]], self._at)
        else:
            data = self._index._pread(take, self._at)
            got = len(data)
            view[:got] = data
        self._at += got
        return got

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()


class _RangeReader(CaptureReader):
    """A CaptureReader of a ByteRange that speaks of the whole file: its interfaces numbered file-wide in the
    records and interface statistics, its warnings at offsets of the file, not of the range's stream."""

    def __init__(self, part: ByteRange, **options):
        # a stream offset past the header is the file offset start + (offset - len(header))
        self._shift = part.start - len(part.header)
        self._interface_base = part.interface_base
        super().__init__(part.open(), last_ts_ns=part.last_ts_ns, **options)

    def _offset(self, pos: int | None = None) -> int:
        return super()._offset(pos) + self._shift

    def _batch(self, *args):
        batch = super()._batch(*args)
        if self._interface_base:
            batch.cols["iface"] += np.uint16(self._interface_base)
        return batch

    def _read_isb(self, blen: int) -> None:
        kept = len(self.interface_stats)
        super()._read_isb(blen)
        for record in self.interface_stats[kept:]:
            record["interface"] += self._interface_base


@dataclass
class RecordIndex:
    """Where each record of one capture file begins (row i: frame first_frame + i); see the module docstring."""

    path: str
    format: str                     # "pcap" or "pcapng"
    compression: str                # "" or gzip, xz, zstd (then offsets address the decompressed copy)
    first_frame: int
    offsets: np.ndarray             # int64, per record
    iface: np.ndarray | None        # uint16 per record (pcapng), None for pcap (all 0)
    interfaces: list[dict]          # the reader's: linktype, snaplen, tsresol, tsoffset_s, section, offset, length
    sections: list[dict]            # the reader's: offset, length, big, first_interface (pcap: nano too)
    spb_times: dict[int, int] = field(default_factory=dict)     # frame -> ns, for simple packet blocks
    first_ns: int | None = None     # time of the first record
    last_ns: int | None = None      # the newest record's time (records need not be in time order)
    warnings: list[str] = field(default_factory=list)
    stamp: tuple | None = None      # (size, mtime_ns) of the file when indexed
    _copy: object = None            # the decompressed copy (a temporary file), or None

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def last_frame(self) -> int:
        return self.first_frame + len(self.offsets) - 1

    def close(self) -> None:
        if self._copy is not None:
            self._copy.close()
            self._copy = None

    def current(self) -> bool:
        """Whether the file is still the one indexed (same size and modification time; for a compressed one,
        the compressed file's)."""
        return self.stamp is not None and self.stamp == _stamp(self.path)

    # ---- reading -----------------------------------------------------------
    def _pread(self, size: int, offset: int) -> bytes:
        if self._copy is not None:
            return os.pread(self._copy.fileno(), size, offset)
        with open(self.path, "rb", buffering=0) as handle:
            return os.pread(handle.fileno(), size, offset)

    def _interface(self, row: int) -> dict:
        return self.interfaces[0 if self.iface is None else int(self.iface[row])]

    def read(self, rows) -> list[tuple[int, int, int, int, bytes]]:
        """Records at the index rows `rows` (0-based), each read alone at its offset: (ts_ns, wirelen,
        linktype, interface, bytes). A record that is not what the index says (the file changed) raises
        CaptureError."""
        if self._copy is not None:
            return [self._read_one(int(row), self._copy.fileno()) for row in rows]
        with open(self.path, "rb", buffering=0) as handle:
            return [self._read_one(int(row), handle.fileno()) for row in rows]

    def _read_one(self, row: int, fd: int) -> tuple[int, int, int, int, bytes]:
        offset = int(self.offsets[row])
        interface = self._interface(row)
        gid = 0 if self.iface is None else int(self.iface[row])
        section = self.sections[interface["section"]]
        order = ">" if section["big"] else "<"
        if self.format == "pcap":
            head = os.pread(fd, PCAP_RECORD_HEADER, offset)
            if len(head) < PCAP_RECORD_HEADER:
                raise self._changed(offset, "the record header is missing")
            sec, frac, caplen, wirelen = struct.unpack(order + "IIII", head)
            ts = sec * 1_000_000_000 + frac * (1 if section["nano"] else 1000)
            data_at = offset + PCAP_RECORD_HEADER
        else:
            head = os.pread(fd, EPB_DATA, offset)
            if len(head) < SPB_DATA:
                raise self._changed(offset, "the block header is missing")
            btype, blen = struct.unpack_from(order + "II", head)
            if btype in (BT_EPB, BT_OPB) and len(head) == EPB_DATA:
                high, low, caplen, wirelen = struct.unpack_from(order + "IIII", head, 12)
                ts = _saturated(interface_ns(interface, (high << 32) | low))
                data_at = offset + EPB_DATA
            elif btype == BT_SPB:
                wirelen = struct.unpack_from(order + "I", head, 8)[0]
                caplen = min(wirelen, blen - MIN_SPB)
                if interface["snaplen"]:
                    caplen = min(caplen, interface["snaplen"])
                ts = self.spb_times.get(self.first_frame + row, 0)
                data_at = offset + SPB_DATA
            else:
                raise self._changed(offset, f"block type 0x{btype:08x} is no packet block")
        if caplen > MAX_CAPLEN:
            raise self._changed(offset, f"record has a {caplen}-byte packet")
        data = os.pread(fd, caplen, data_at)
        if len(data) < caplen:
            raise self._changed(offset, "the record is cut short")
        return ts, wirelen, interface["linktype"], gid, data

    def _changed(self, offset: int, what: str) -> CaptureError:
        return CaptureError(self.path, f"{what}: the file changed since it was indexed; open it again", offset)

    # ---- partitions --------------------------------------------------------
    def byte_ranges(self, parts: int) -> list[ByteRange]:
        """The records cut into at most `parts` runs of about equal bytes, each readable alone (ByteRange)."""
        if int(parts) < 1:
            raise UsageError(f"byte_ranges: parts must be at least 1, not {parts}")
        n = len(self.offsets)
        if n == 0:
            return []
        end = self._end_offset()
        first, last = int(self.offsets[0]), end
        targets = first + (last - first) * np.arange(1, int(parts)) // int(parts)
        cuts = np.unique(np.concatenate([[0], np.searchsorted(self.offsets, targets), [n]]))
        size = self._size()
        out = []
        for lo, hi in itertools.pairwise(cuts.tolist()):
            start = int(self.offsets[lo])
            stop = int(self.offsets[hi]) if hi < n else max(end, size)
            interface = self._interface(lo)
            section = self.sections[interface["section"]]
            header = self._pread(section["length"], section["offset"])
            if self.format == "pcapng":
                before = [i for i in self.interfaces[section["first_interface"]:]
                          if i["section"] == interface["section"] and i["offset"] < start]
                header += b"".join(self._pread(i["length"], i["offset"]) for i in before)
            last_ts = 0
            if lo > 0:
                last_ts = self.read([lo - 1])[0][0]
            out.append(ByteRange(self.path, start, stop, self.first_frame + lo, hi - lo, header,
                                 section["first_interface"], last_ts, self if self._copy is not None else None))
        return out

    def _size(self) -> int:
        """Bytes of the file read (the decompressed copy's for a compressed capture)."""
        if self._copy is not None:
            return os.fstat(self._copy.fileno()).st_size
        return os.path.getsize(self.path)

    def _end_offset(self) -> int:
        """Just past the last record's bytes."""
        row = len(self.offsets) - 1
        offset = int(self.offsets[row])
        section = self.sections[self._interface(row)["section"]]
        order = ">" if section["big"] else "<"
        if self.format == "pcap":
            caplen = struct.unpack(order + "I", self._pread(4, offset + 8))[0]
            return offset + PCAP_RECORD_HEADER + caplen
        return offset + struct.unpack(order + "I", self._pread(4, offset + 4))[0]


def _saturated(ns: int) -> int:
    """As the walk gives a time int64 ns cannot hold: saturated at the nearest end."""
    return max(-INT64_MAX, min(INT64_MAX, ns))


def _stamp(path) -> tuple | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns


class _Named(io.RawIOBase):
    """A binary file read under another name (the capture's, for the reader's warnings)."""

    def __init__(self, raw, name: str):
        self._raw = raw
        self.name = name

    def readable(self) -> bool:
        return True

    def readinto(self, view) -> int:
        return self._raw.readinto(view)

    def close(self) -> None:
        self._raw.close()
        super().close()


def _decompressed_copy(path: str):
    """(the decompressed bytes of a compressed capture in an unnamed temporary file, the compression, the
    error that ended the decompression or None); see the module docstring."""
    source = ByteSource(path)
    copy = tempfile.TemporaryFile(prefix="detector-index-")
    buffer = bytearray(COPY_CHUNK_BYTES)
    damage = None
    try:
        while True:
            try:
                got = source.readinto(buffer)
            except CaptureError as exc:     # what the reader of the original warns about, at the same offset
                damage = str(exc)
                break
            if not got:
                break
            copy.write(memoryview(buffer)[:got])
        copy.flush()
    except OSError as exc:
        copy.close()
        raise CaptureError(path, f"cannot decompress a copy to read frames by offset into "
                                 f"{tempfile.gettempdir()}: {exc.strerror or exc} (set TMPDIR to a folder "
                                 "with room, or decompress the capture yourself)") from None
    finally:
        source.close()
    return copy, source.compression, damage


def build_index(path, first_frame: int = 1) -> RecordIndex:
    """Index the capture file `path` (see the module docstring); frames numbered from `first_frame`.

    Header problems raise CaptureError as opening it for reading would;
    damage later ends the index there, with the reader's warning.
    """
    path = os.fsdecode(path)
    stamp = _stamp(path)
    copy, compression, damage = None, "", None
    source = path
    with open(path, "rb", buffering=0) as probe:
        compressed = bool(ByteSource(probe).compression)
    if compressed:
        copy, compression, damage = _decompressed_copy(path)
        fd = os.dup(copy.fileno())
        os.lseek(fd, 0, os.SEEK_SET)
        source = _Named(open(fd, "rb", buffering=0), path)
    try:
        reader = CaptureReader(source, first_frame=first_frame, keep_offsets=True)
        ifaces = []
        first_ns = last_ns = None
        with reader:
            for raw in reader:
                if reader.format == "pcapng":
                    ifaces.append(raw["iface"].copy())
                if first_ns is None:
                    first_ns = int(raw["ts_ns"][0])
                newest = int(raw["ts_ns"].max())
                last_ns = newest if last_ns is None else max(last_ns, newest)
    except BaseException:
        if copy is not None:
            copy.close()
        raise
    finally:
        if compressed:
            source.close()
    warnings = list(reader.warnings)
    if damage is not None:
        # the copy ends where the decompression failed; the original's reader says why, not that a record
        # was cut there
        warnings = [w for w in warnings if "capture cut short" not in w] + [damage]
    offsets = np.concatenate(reader.record_offsets) if reader.record_offsets else np.zeros(0, np.int64)
    iface = None
    if reader.format == "pcapng":
        iface = np.concatenate(ifaces) if ifaces else np.zeros(0, np.uint16)
    spb = {}
    if reader.spb_frames:
        spb = dict(zip(np.concatenate(reader.spb_frames).tolist(), np.concatenate(reader.spb_times).tolist()))
    return RecordIndex(path=path, format=reader.format, compression=compression, first_frame=first_frame,
                       offsets=offsets, iface=iface, interfaces=reader.interfaces, sections=reader.sections,
                       spb_times=spb, first_ns=first_ns, last_ns=last_ns, warnings=warnings, stamp=stamp,
                       _copy=copy)

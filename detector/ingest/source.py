"""Byte sources: a capture path or binary stream, decompressed when its magic says so.

Compression is recognised by the first bytes, never by the file name, and the
stream is never seeked, so a pipe works as well as a file. The source counts
the bytes it consumed from the underlying file for progress reporting.

An uncompressed regular file is better mapped than read (`ByteSource.map`):
its pages come straight from the page cache, where `read` would copy every
byte into fresh memory that the kernel must first zero — together two thirds
of the CPU time of reading a large capture.

A stream that must be read more than once (standard input under `analyze`,
whose report pass reads the capture again) is a `StreamCapture`: the first
reader reads the stream and writes what it reads to a temporary file, later
readers read that file.
"""
from __future__ import annotations

import gzip
import io
import lzma
import mmap
import os
import tempfile
import zlib

import zstandard

from ..errors import CaptureError, DetectorError, UsageError

# Magic numbers of the compressed formats (RFC 1952, xz file format 1.0.4 section 2.1.1.1,
# RFC 8878 section 3.1.1).
GZIP_MAGIC = b"\x1f\x8b"
XZ_MAGIC = b"\xfd7zXZ\x00"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SNIFF_BYTES = 6
# What Python's gzip and lzma raise for a stream cut before its end marker; zstd says the same.
CUT_STREAM = "Compressed file ended before the end-of-stream marker was reached"

# zstd frames (RFC 8878 section 3.1): skippable frames' magics, the frame header's
# field sizes by the descriptor's flags, block header fields.
ZSTD_MAGIC_U32 = 0xFD2FB528
ZSTD_SKIPPABLE_MASK = 0xFFFFFFF0
ZSTD_SKIPPABLE_MAGIC = 0x184D2A50
ZSTD_DICT_ID_BYTES = (0, 1, 2, 4)
ZSTD_CONTENT_SIZE_BYTES = (0, 2, 4, 8)
ZSTD_BLOCK_HEADER = 3
ZSTD_BLOCK_RLE = 1
ZSTD_CHECKSUM = 4


class _ZstdFrames:
    """Follows the frame and block headers of a zstd stream as it passes, to tell a cut one.

    zstandard's stream_reader ends quietly when its input stops inside a
    frame, so a cut capture read as a shorter, clean one. Only headers are
    read (a few per 128 KiB block); the data in between is skipped by length.
    """

    def __init__(self):
        self._state = "magic"
        self._head = bytearray()
        self._want = 4
        self._skip = 0
        self._checksum = 0

    @property
    def inside_frame(self) -> bool:
        return bool(self._skip or self._head) or self._state != "magic"

    def feed(self, data) -> None:
        i, n = 0, len(data)
        while i < n and self._state != "unknown":
            if self._skip:
                take = min(self._skip, n - i)
                self._skip -= take
                i += take
                continue
            take = min(self._want - len(self._head), n - i)
            self._head += data[i:i + take]
            i += take
            if len(self._head) == self._want:
                head, self._head = bytes(self._head), bytearray()
                self._advance(head)

    def _advance(self, head: bytes) -> None:
        if self._state == "magic":
            magic = int.from_bytes(head, "little")
            if magic == ZSTD_MAGIC_U32:
                self._state, self._want = "descriptor", 1
            elif magic & ZSTD_SKIPPABLE_MASK == ZSTD_SKIPPABLE_MAGIC:
                self._state, self._want = "skippable", 4
            else:
                self._state = "unknown"     # not zstd: the decompressor says so
        elif self._state == "skippable":
            self._skip = int.from_bytes(head, "little")
            self._state, self._want = "magic", 4
        elif self._state == "descriptor":
            descriptor = head[0]
            single_segment = (descriptor >> 5) & 1
            content_size = ZSTD_CONTENT_SIZE_BYTES[descriptor >> 6] or single_segment
            self._checksum = ZSTD_CHECKSUM if descriptor & 0x04 else 0
            self._skip = (1 - single_segment) + ZSTD_DICT_ID_BYTES[descriptor & 3] + content_size
            self._state, self._want = "block", ZSTD_BLOCK_HEADER
        else:
            header = int.from_bytes(head, "little")
            self._skip = 1 if (header >> 1) & 3 == ZSTD_BLOCK_RLE else header >> 3
            if header & 1:      # the frame's last block
                self._skip += self._checksum
                self._state, self._want = "magic", 4


class _Counting(io.RawIOBase):
    """Reads from `raw`, counting the bytes, after replaying the sniffed prefix; `observe` sees every byte."""

    def __init__(self, raw, prefix: bytes):
        self._raw = raw
        self._prefix = prefix
        self.consumed = len(prefix)
        self.observe = None

    def readable(self) -> bool:
        return True

    def readinto(self, view) -> int:
        view = memoryview(view).cast("B")
        if self._prefix:
            take = min(len(view), len(self._prefix))
            view[:take] = self._prefix[:take]
            self._prefix = self._prefix[take:]
        elif hasattr(self._raw, "readinto"):
            take = self._raw.readinto(view) or 0
            self.consumed += take
        else:
            data = self._raw.read(len(view)) or b""
            take = len(data)
            view[:take] = data
            self.consumed += take
        if self.observe is not None:
            self.observe(view[:take])
        return take


def _read_some(raw, size: int) -> bytes:
    """Up to `size` bytes, fewer only at the end of the stream."""
    parts = []
    while size > 0:
        data = raw.read(size)
        if not data:
            break
        parts.append(data)
        size -= len(data)
    return b"".join(parts)


class _Copying(io.RawIOBase):
    """Reads from `raw` and writes every byte read to `copy`."""

    def __init__(self, raw, copy, name: str):
        self._raw = raw
        self._copy = copy
        self._name = name

    def readable(self) -> bool:
        return True

    def readinto(self, view) -> int:
        got = self._raw.readinto(view) or 0
        try:
            self._copy.write(memoryview(view)[:got])
        except OSError as exc:
            # a copy cut short would make the second pass disagree with the first: stop the run
            raise DetectorError(f"{self._name}: cannot keep a copy of the capture for the report pass in "
                                f"{tempfile.gettempdir()}: {exc.strerror or exc} (set TMPDIR to a folder "
                                f"with room, or use --no-report)") from None
        return got


class StreamCapture:
    """A capture arriving on a stream that cannot be rewound: standard input, a pipe, a FIFO.

    The first reader reads the stream itself. With `keep`, every byte it
    reads also goes to an unnamed temporary file in TMPDIR (no name in any
    folder: it disappears when closed or when the process ends, however it
    ends), and every later reader reads that file, memory-mapped like any
    capture file, after the first has finished. Readers name the capture
    `name` either way. The copy is as large as the (compressed) input that
    was read: it is bounded by the disk, not by memory.
    """

    def __init__(self, stream, name: str = "<stdin>", keep: bool = False):
        self.name = name
        self._stream = stream
        self._copy = tempfile.TemporaryFile(prefix="detector-stream-") if keep else None
        self._opened = 0

    def __str__(self) -> str:
        return self.name

    def open(self):
        """(binary file object, whether it is the copy), for one reader."""
        self._opened += 1
        if self._opened == 1:
            if self._copy is None:
                return self._stream, False
            return _Copying(self._stream, self._copy, self.name), False
        if self._copy is None:
            raise UsageError(f"{self.name}: a stream can be read only once")
        self._copy.flush()
        # a descriptor of its own for each later reader, read from the start
        fd = os.dup(self._copy.fileno())
        os.lseek(fd, 0, os.SEEK_SET)
        return open(fd, "rb", buffering=0), True

    def close(self) -> None:
        if self._copy is not None:
            self._copy.close()


class ByteSource:
    """The decompressed bytes of one capture, read into caller-owned buffers."""

    def __init__(self, source):
        self._owned = None
        if isinstance(source, StreamCapture):
            self.path = source.name
            raw, is_copy = source.open()
            self.size = None
            if is_copy:
                self._owned = raw
                self.size = os.fstat(raw.fileno()).st_size
        elif isinstance(source, (str, os.PathLike)):
            self.path = os.fsdecode(source)
            try:
                raw = open(self.path, "rb", buffering=0)
            except OSError as exc:
                raise CaptureError(self.path, exc.strerror or str(exc)) from None
            self._owned = raw
            try:
                self.size = os.fstat(raw.fileno()).st_size
            except OSError:
                self.size = None
            if self.size is not None and not os.path.isfile(self.path):
                self.size = None
        else:
            raw = source
            self.path = str(getattr(source, "name", "<stream>"))
            self.size = None
        try:
            prefix = _read_some(raw, SNIFF_BYTES)
        except OSError as exc:
            self.close()
            raise CaptureError(self.path, exc.strerror or str(exc), 0) from None
        self._counter = _Counting(raw, prefix)
        self._zstd_frames = None
        self.compression = ""
        if prefix.startswith(GZIP_MAGIC):
            self.compression = "gzip"
            stream = gzip.GzipFile(fileobj=self._counter, mode="rb")
        elif prefix.startswith(XZ_MAGIC):
            self.compression = "xz"
            stream = lzma.LZMAFile(self._counter, mode="rb")
        elif prefix.startswith(ZSTD_MAGIC):
            self.compression = "zstd"
            self._zstd_frames = _ZstdFrames()
            self._counter.observe = self._zstd_frames.feed
            stream = zstandard.ZstdDecompressor().stream_reader(self._counter, read_across_frames=True)
        else:
            stream = self._counter
        self._stream = stream

    def map(self):
        """The whole file as a memory map (copy-on-write, never written), or None where reading is the only way.

        Only an uncompressed regular file that this source opened itself is
        mapped: a pipe or a caller's stream cannot be, and a compressed file
        must pass through its decompressor. Mapping can also fail (a file
        system without mmap support); the caller then reads as usual.
        """
        if self._owned is None or self.compression or not self.size:
            return None
        try:
            # copy-on-write, so the arrays over it are writable like a read buffer and the
            # compiled kernels need one specialisation, not a second one for read-only input;
            # nothing writes to it, so no page is ever copied
            mapped = mmap.mmap(self._owned.fileno(), 0, access=mmap.ACCESS_COPY)
        except (OSError, ValueError):
            return None
        if hasattr(mapped, "madvise"):
            mapped.madvise(mmap.MADV_SEQUENTIAL)
        return mapped

    @property
    def position(self) -> int:
        """Bytes of the underlying (compressed) file consumed so far."""
        return self._counter.consumed

    def readinto(self, view) -> int:
        """Fill part of `view`; 0 only at the end of the stream.

        One underlying read per call, so on a pipe this returns what is
        available instead of waiting for the whole buffer.
        """
        stream = self._stream
        try:
            if stream is self._counter:
                return stream.readinto(view)
            got = stream.readinto1(view) if hasattr(stream, "readinto1") else stream.readinto(view)
            if not got and self._zstd_frames is not None and self._zstd_frames.inside_frame:
                raise EOFError(CUT_STREAM)
            return got
        except (OSError, EOFError, zlib.error, lzma.LZMAError, zstandard.ZstdError) as exc:
            # gzip raises BadGzipFile (an OSError), zlib.error and EOFError on damaged or cut streams
            raise CaptureError(self.path, f"{self.compression or 'read'} error: {exc}",
                               self.position) from None

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()
            self._owned = None

"""Capture readers: pcap and pcapng files or streams cut into bounded RawBatches.

    reader = open_capture("trace.pcapng.zst")     # path, binary file object or StreamCapture
    for raw in reader:                             # RawBatch (detector.schema)
        ...
    for reader, raw in read_captures(paths):       # several files, one capture
        ...

Formats: classic pcap in both byte orders with microsecond or nanosecond
timestamps (the FCS bits above the link type are masked off as libpcap does);
pcapng with any number of sections (either byte order) and interfaces, per
interface link type, if_tsresol (decimal or power-of-two) and if_tsoffset,
with enhanced, simple and obsolete packet blocks; other block types are
skipped by their length. gzip, xz and zstd are decompressed transparently,
recognised by their magic bytes. Nothing is ever seeked, so a pipe (such as
`dumpcap -w -`) reads like a file: a record not yet complete is awaited. A
StreamCapture wraps a stream that must be read twice (`analyze -`): the first
reader's bytes are kept in a temporary file that later readers read.

A simple packet block carries no time and no interface number: its record
takes interface 0 of its section and the time of the packet before it in the
file (0 when it is the first), and its captured length is the smallest of its
original length, the interface's snaplen and the block's body.

Bad input, following tshark:
- Problems with the file as a whole raise CaptureError (file, byte offset,
  reason) when the reader is opened: an empty file, an unknown magic, an
  unsupported version, a damaged first section header block. Its `format`
  says what the magic number was, when it was one.
- Problems with a record after a valid header stop the reading there: every
  intact record before it is delivered and `reader.warnings` gains one line,
  "PATH at byte N: reason". These are a truncated last record, a record
  larger than MAX_CAPLEN (tshark: "File has N-byte packet, bigger than maximum
  of 262144"), a pcapng block whose length is too small, not a multiple of 4,
  larger than MAX_BLOCK_BYTES or different from its trailing copy, a packet
  block naming an undescribed interface, an interface block whose options
  overrun it, a damaged later section header, and damaged compressed data
  or a compressed stream that ends before its end marker.
  Damage before the first packet is no different: 0 records and a warning.
  Byte offsets count the decompressed stream.
- A pcapng packet time that int64 nanoseconds cannot hold is saturated (see
  `walk`) and warned about once, at the first such record; reading goes on.
- A record longer than its interface's snaplen but within MAX_CAPLEN is
  accepted, as tshark and libpcap accept it.
No length read from the input is ever allocated: chunks have a fixed size and
lengths are checked against the bytes present before they are used.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..schema import BATCH_PACKETS, RawBatch
from .reader import CaptureReader
from .source import StreamCapture

__all__ = ["CaptureReader", "StreamCapture", "open_capture", "read_captures"]


def open_capture(source, batch_packets: int = BATCH_PACKETS, first_frame: int = 1) -> CaptureReader:
    """Open a capture path, binary file object, StreamCapture or ingest.index.ByteRange (a cluster partition:
    part of a file, read as the whole file's reader reads it, its frames numbered from its own first_frame);
    header problems raise CaptureError here."""
    from .index import ByteRange
    if isinstance(source, ByteRange):
        return source.reader(batch_packets=batch_packets)
    return CaptureReader(source, batch_packets=batch_packets, first_frame=first_frame)


def read_captures(paths: Iterable, batch_packets: int = BATCH_PACKETS, opened: list | None = None,
                  first_frame: int = 1) -> Iterator[tuple[CaptureReader, RawBatch]]:
    """Read several captures as one: frame numbers continue from file to file, from `first_frame` (a
    cluster partition's first global frame number; 1 for a whole capture).

    Each reader is appended to `opened` as soon as it is open, so a capture
    that yields no batch (no packet, or damage before the first) still tells
    its format and warnings.
    """
    frame = int(first_frame)
    for path in paths:
        with open_capture(path, batch_packets=batch_packets, first_frame=frame) as reader:
            if opened is not None:
                opened.append(reader)
            for raw in reader:
                yield reader, raw
            frame += reader.packets

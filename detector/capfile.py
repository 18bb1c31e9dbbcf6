"""Capture files: the pcap and pcapng format facts, what a file's first bytes say, and the one writer.

The reader (detector.ingest) parses with these constants and `file_magic`;
everything the tree writes as a capture goes through `write_records`: the
evidence pcaps of `analyze`, the ring's evidence and segments of `watch`.

A Segment is a compact, owned copy of records: their bytes and the columns a
capture file needs (time, lengths, link type, frame number). `Segment.of`
copies one decoded batch (the copy lets the reader's chunk buffers go, a
batch being a view of one, and makes the memory a ring holds exact);
`Segment.of_records` gathers frames picked one by one.

`write_records` writes segments as classic pcap with nanosecond timestamps,
or as pcapng with one interface per link type when they span several
(`capture_format` says which) -- per interface and link type when the
segments say which interface each record came from (`Segment.iface`, as
frames picked from a pcapng of several interfaces do), in a compiled pass per segment that runs
without the GIL (a 30 s ring of a busy link is millions of records; the
capture loop keeps running meanwhile). `write_capture` makes the file appear
under its name only when complete (written aside, then renamed:
output.atomic_file), so a reader never sees half of it. A time before 1970
does not fit either format and is written as the epoch; in classic pcap, one
past 2106 keeps its nanoseconds with the largest seconds the format holds.
The bytes of such a record are kept all the same.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from numba import njit

from .cpu import kernel
from .output import atomic_file
from .schema import MAX_CAPLEN, PacketBatch
from .units import NS

# ---- classic pcap (draft-ietf-opsawg-pcap; pcap-savefile(5)) ----------------
# File header magics as read little-endian: microsecond or nanosecond times.
PCAP_MAGIC_US = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D
# Version 2.4, the only one in use (draft-ietf-opsawg-pcap, section 4).
PCAP_VERSION = (2, 4)
PCAP_FILE_HEADER = 24
PCAP_RECORD = struct.Struct("<IIII")    # ts_sec, ts_frac, incl_len, orig_len
PCAP_RECORD_HEADER = PCAP_RECORD.size
# The link-type field's upper six bits carry FCS information (pcap-savefile(5));
# libpcap's LT_LINKTYPE() keeps the low 26 bits, and so does tshark.
LINKTYPE_MASK = 0x03FFFFFF

# ---- pcapng (draft-ietf-opsawg-pcapng) ----------------------------------------
# Block types (sections 4 and 10.1); the SHB's type reads the same in both byte orders.
BT_SHB = 0x0A0D0D0A
BT_IDB = 0x00000001
BT_OPB = 0x00000002     # obsolete packet block (appendix A)
BT_SPB = 0x00000003
BT_ISB = 0x00000005     # interface statistics block (section 4.6)
BT_EPB = 0x00000006
# The SHB's byte-order magic; versions read by Wireshark and libpcap (1.2 is 1.0 written by some tools).
PCAPNG_BOM = 0x1A2B3C4D
PCAPNG_VERSIONS = {(1, 0), (1, 2)}
# Smallest total length of each block: header, fixed fields, trailer.
SHB_MIN = 28            # header, BOM, version, section length, trailer
IDB_MIN = 20            # header, link type, reserved, snaplen, trailer
ISB_MIN = 24            # header, interface id, timestamp (high, low), trailer
MIN_EPB = 32
MIN_OPB = 32
MIN_SPB = 16
MIN_BLOCK = 12
# Option codes (section 3.5 and 4.2).
OPT_ENDOFOPT = 0
OPT_IF_NAME = 2
OPT_PACKET_FLAGS = 2    # epb_flags (section 4.3.1), pack_flags of the obsolete packet block: 32 bits
OPT_IF_TSRESOL = 9
OPT_IF_TSOFFSET = 14
# Interface statistics options (section 4.6): counters since the capture started, each 64 bits
ISB_COUNTERS = {4: "ifrecv", 5: "ifdrop", 6: "filteraccept", 7: "osdrop", 8: "usrdeliv"}
OPT_ISB_STARTTIME = 2
OPT_ISB_ENDTIME = 3
DEFAULT_TSRESOL = 6     # microseconds when if_tsresol is absent
# The IDB option the writer gives every interface: if_tsresol = 9 (nanoseconds), then opt_endofopt.
PCAPNG_TSRESOL_NS = struct.pack("<HHB3x", OPT_IF_TSRESOL, 1, 9) + struct.pack("<HH", OPT_ENDOFOPT, 0)


class Magic(NamedTuple):
    """What a capture's first four bytes say."""

    format: str     # "pcap" or "pcapng"
    big: bool       # pcap: big-endian (a pcapng section says its byte order in its header block)
    nano: bool      # pcap: nanosecond timestamps


def file_magic(head: bytes) -> Magic | None:
    """The format of a capture from its first four bytes; None when it is neither pcap nor pcapng."""
    magic_le = struct.unpack("<I", head)[0]
    magic_be = struct.unpack(">I", head)[0]
    if magic_le == BT_SHB:
        return Magic("pcapng", False, False)
    if PCAP_MAGIC_US in (magic_le, magic_be) or PCAP_MAGIC_NS in (magic_le, magic_be):
        return Magic("pcap", magic_be in (PCAP_MAGIC_US, PCAP_MAGIC_NS), PCAP_MAGIC_NS in (magic_le, magic_be))
    return None


def pcap_file_header(linktype: int, snaplen: int = MAX_CAPLEN) -> bytes:
    """The header of a little-endian classic pcap with nanosecond timestamps: the decoded ts_ns is
    written without rounding."""
    return struct.pack("<IHHiIII", PCAP_MAGIC_NS, *PCAP_VERSION, 0, 0, snaplen, linktype)


def _block(kind: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack("<II", kind, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))


def pcapng_header(linktypes: list[int]) -> bytes:
    """A little-endian section header and one interface (nanosecond times) per entry of `linktypes` (its link
    type), in that order."""
    head = _block(BT_SHB, struct.pack("<IHHq", PCAPNG_BOM, 1, 0, -1))
    return head + b"".join(_block(BT_IDB, struct.pack("<HHI", lt, 0, MAX_CAPLEN) + PCAPNG_TSRESOL_NS)
                           for lt in linktypes)


@dataclass
class Segment:
    data: np.ndarray        # uint8, the records' bytes (offsets index into it)
    offset: np.ndarray      # int64
    caplen: np.ndarray      # uint32
    wirelen: np.ndarray     # uint32
    ts_ns: np.ndarray       # int64
    linktype: np.ndarray    # uint16
    frame: np.ndarray       # int64
    iface: np.ndarray | None = None     # uint16: the interface each record came from; None: one per link type

    @classmethod
    def of(cls, batch: PacketBatch) -> Segment:
        return cls(data=np.array(batch.data, dtype=np.uint8, copy=True),
                   offset=batch["offset"].astype(np.int64), caplen=batch["caplen"].astype(np.uint32),
                   wirelen=batch["wirelen"].astype(np.uint32), ts_ns=batch["ts_ns"].astype(np.int64),
                   linktype=batch["linktype"].astype(np.uint16), frame=batch["frame"].astype(np.int64))

    @classmethod
    def of_records(cls, frames: list[int], records: list[tuple], iface=None) -> Segment:
        """The frames numbered `frames` from their records, whose first fields are (ts_ns, wirelen, linktype,
        bytes), in that order; `iface`: the interface of each, or None."""
        caplen = np.array([len(r[3]) for r in records], dtype=np.uint32)
        offset = np.zeros(len(records), dtype=np.int64)
        np.cumsum(caplen[:-1], out=offset[1:])
        # a writable buffer: the writer kernel is compiled for writable arrays only
        return cls(data=np.frombuffer(bytearray(b"".join(r[3] for r in records)), dtype=np.uint8), offset=offset,
                   caplen=caplen, wirelen=np.array([r[1] for r in records], dtype=np.uint32),
                   ts_ns=np.array([r[0] for r in records], dtype=np.int64),
                   linktype=np.array([r[2] for r in records], dtype=np.uint16),
                   frame=np.array(frames, dtype=np.int64),
                   iface=None if iface is None else np.asarray(iface, dtype=np.uint16))

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
            total = MIN_EPB + padded
            _put_u32(out, pos, BT_EPB)
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
            _put_u32(out, pos, min(ts // NS, np.int64(0xFFFFFFFF)))
            _put_u32(out, pos + 4, ts % NS)
            _put_u32(out, pos + 8, n)
            _put_u32(out, pos + 12, max(np.int64(wirelen[i]), n))
            out[pos + PCAP_RECORD_HEADER:pos + PCAP_RECORD_HEADER + n] = data[offset[i]:offset[i] + n]
            pos += PCAP_RECORD_HEADER + n
    return pos


def _kept(segments: list[Segment], since_ns: int | None) -> list[np.ndarray]:
    return [seg.ts_ns >= since_ns if since_ns is not None else np.ones(len(seg), dtype=bool) for seg in segments]


def _interface_keys(seg: Segment) -> np.ndarray:
    """Each record's interface of the written file, as interface * 2^16 + link type (interface 0 without
    Segment.iface): one written interface per distinct key."""
    key = seg.linktype.astype(np.int64)
    if seg.iface is not None:
        key = key + (seg.iface.astype(np.int64) << 16)
    return key


def _interfaces(segments: list[Segment], keeps: list[np.ndarray]) -> np.ndarray:
    """The sorted distinct interface keys of the kept records."""
    keys = [np.unique(_interface_keys(seg)[keep]) for seg, keep in zip(segments, keeps)]
    return np.unique(np.concatenate(keys)) if keys else np.zeros(0, dtype=np.int64)


def capture_format(segments: list[Segment], since_ns: int | None = None) -> str:
    """"pcap" when the records `write_records` would write share one link type and interface (or there are
    none), else "pcapng": one interface per link type (and source interface), so no frame is dropped or
    relabelled."""
    return "pcapng" if len(_interfaces(segments, _kept(segments, since_ns))) > 1 else "pcap"


def write_capture(path: Path, segments: list[Segment], since_ns: int | None = None) -> int:
    """Write the records of `segments` (those from `since_ns` on) as the file `path`; returns how many."""
    with atomic_file(path) as handle:
        return write_records(handle, segments, since_ns)


def write_records(handle, segments: list[Segment], since_ns: int | None = None) -> int:
    """Write the records of `segments` (those from `since_ns` on) as a capture to the binary `handle`;
    returns how many were written."""
    keeps = _kept(segments, since_ns)
    keys = _interfaces(segments, keeps)
    linktypes = [int(key) & 0xFFFF for key in keys]
    pcapng = len(keys) > 1
    head = pcapng_header(linktypes) if pcapng else pcap_file_header(linktypes[0] if linktypes else 1)
    written = 0
    handle.write(head)
    for seg, keep in zip(segments, keeps):
        if not keep.any():
            continue
        caplen = seg.caplen[keep].astype(np.int64)
        per_record = MIN_EPB + ((caplen + 3) & ~3) if pcapng else PCAP_RECORD_HEADER + caplen
        out = np.empty(int(per_record.sum()), dtype=np.uint8)
        size = _pack_records(seg.data, seg.offset, seg.caplen, seg.wirelen, seg.ts_ns,
                             np.searchsorted(keys, _interface_keys(seg)), keep, pcapng, out)
        handle.write(out[:size].data)
        written += int(keep.sum())
    return written

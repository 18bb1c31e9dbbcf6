"""CaptureReader: one pcap or pcapng capture cut into RawBatches of bounded size.

The reader owns a chunk buffer that it fills with large reads and never
rewrites: a batch's `data` is a view of the chunk, so packet bytes are copied
once (from the file) and stay valid as long as a consumer keeps the batch.
When a record straddles the end of a full chunk, the unwalked tail moves to a
fresh chunk. Header blocks are parsed here in Python; records are found by the
compiled walks in `walk`.

An uncompressed regular file is memory-mapped instead (ByteSource.map): the
whole file is then the "chunk", nothing is copied, and a batch's `data` is a
view of the page cache. Each walk covers at most MAP_WINDOW_BYTES, which keeps
a batch's bytes as bounded as with reads, and the pages far behind the walk
are dropped from this process's mapping (they stay in the page cache, and a
late reader simply faults them in again), so resident memory does not grow
with the file. A mapped file that another process truncates while it is read
would fault; captures being read are not rewritten in place.
"""
from __future__ import annotations

import mmap
import struct
from collections import deque

import numpy as np

from ..capfile import (
    BT_IDB,
    BT_SHB,
    DEFAULT_TSRESOL,
    IDB_MIN,
    ISB_COUNTERS,
    ISB_MIN,
    LINKTYPE_MASK,
    MIN_EPB,
    MIN_SPB,
    OPT_ENDOFOPT,
    OPT_IF_NAME,
    OPT_IF_TSOFFSET,
    OPT_IF_TSRESOL,
    OPT_ISB_ENDTIME,
    OPT_ISB_STARTTIME,
    PCAP_FILE_HEADER,
    PCAP_RECORD_HEADER,
    PCAP_VERSION,
    PCAPNG_BOM,
    PCAPNG_VERSIONS,
    SHB_MIN,
    file_magic,
)
from ..errors import CaptureError, UsageError
from ..schema import BATCH_BYTES, BATCH_PACKETS, RawBatch
from ..units import NS, plural
from . import walk as W
from .source import ByteSource

# Large reads amortise the per-call cost; 16 MiB holds any record or block
# (MAX_CAPLEN, MAX_BLOCK_BYTES) and keeps a batch's data below BATCH_BYTES.
CHUNK_BYTES = min(16 << 20, BATCH_BYTES)
# Each read fills at most this much of the chunk, and the walk follows at once,
# while the bytes are still in the CPU cache: walking a whole 16 MiB chunk after
# one read missed the cache on every record header (a third of the read time).
READ_SLICE_BYTES = 2 << 20
# Mapped files: bytes walked into one batch at most (the bound reads get from
# CHUNK_BYTES); which pages stay in the mapping behind the walk: those of the
# batches still decoding or waiting for the consumers (detector.engine holds at
# most six: the one just walked, two decoding, two waiting, one being consumed),
# so they are not faulted in twice, and never more than MAP_KEEP_BEHIND_BYTES;
# pages leave about a batch at a time, at most MAP_RELEASE_STEP_BYTES. Counting
# batches, not only bytes, is what lets a caller of small batches
# (batch_packets) hold a small window: the notebook's packets_frame.
MAP_WINDOW_BYTES = CHUNK_BYTES
MAP_KEEP_BATCHES = 6
MAP_KEEP_BEHIND_BYTES = 96 << 20
MAP_RELEASE_STEP_BYTES = 32 << 20
# The warning said once per file for every packet time int64 nanoseconds cannot hold (_warn_time_overflow); a file
# read in byte ranges (detector.cluster) says it once too.
TIME_OVERFLOW = ("packet time outside the years 1677-2262 that 64-bit nanoseconds hold; this and any other such "
                 "packet keep their place with the time saturated at the nearest end")
# The smallest record either format can hold (pcap record header; pcapng SPB),
# which bounds how many records a chunk's bytes can yield.
MIN_RECORD = 16

MAX_LINKTYPE = 0xFFFF       # RAW_COLUMNS stores link types as uint16
# iface numbers are uint16 across all sections of a file
MAX_INTERFACES = 1 << 16
# Interface statistics blocks kept per file (dumpcap writes one per interface at the end, some writers one
# every few seconds); the rest are counted and said in a warning: each is a few hundred bytes of Python
MAX_INTERFACE_STATS = 1 << 16
# A section's interface table starts with room for this many and doubles when full.
INTERFACE_ROWS = 8
UINT64_MAX = (1 << 64) - 1
# Where a pcapng packet's data begins in its block: after the enhanced (or obsolete) packet block's 28 bytes of
# header and fixed fields, after the simple packet block's 12 (each block ends with a 4-byte trailer)
EPB_DATA = MIN_EPB - 4
SPB_DATA = MIN_SPB - 4


def _ts_params(tsresol: int) -> tuple[int, int, int]:
    """(kind, factor, shift) for walk.ts_to_ns from an if_tsresol byte."""
    if tsresol & 0x80:
        return W.TS_BINARY, 1, tsresol & 0x7F
    if tsresol <= 9:
        return W.TS_MULTIPLY, 10 ** (9 - tsresol), 0
    # resolutions finer than 10^-28 s are clamped: every count is below 1 ns anyway
    return W.TS_DIVIDE, 10 ** min(tsresol - 9, 19), 0


def _fast_limit(kind: int, factor: int, shift: int, offset_ns: int) -> int:
    """The units below which walk.ts_to_ns(units) + offset_ns stays within int64 (exact integers).

    ts_to_ns floors units * 10^9 / (units per second), so its result is at
    most `room` for every units below the limit; larger ones go to the
    slower walk.ts_exact, which also handles the ones that do not fit.
    """
    room = W.INT64_MAX - max(offset_ns, 0)
    if kind == W.TS_MULTIPLY:
        limit = room // factor + 1
    elif kind == W.TS_DIVIDE:
        limit = (room + 1) * factor
    else:
        limit = ((room + 1) << shift) // NS
    return min(limit, UINT64_MAX)


class _SectionInterfaces:
    """One section's interfaces as the tables walk_pcapng reads; adding one costs O(1) (the tables double)."""

    def __init__(self):
        self.gids: list[int] = []
        self.ints = np.zeros((INTERFACE_ROWS, W.IF_INT_COLUMNS), dtype=np.int64)
        self.u64s = np.zeros((INTERFACE_ROWS, W.IF_U64_COLUMNS), dtype=np.uint64)

    def __len__(self) -> int:
        return len(self.gids)

    def add(self, gid: int, linktype: int, snaplen: int, tsresol: int, tsoffset_s: int) -> None:
        row = len(self.gids)
        if row == len(self.ints):
            self.ints = np.concatenate([self.ints, np.zeros_like(self.ints)])
            self.u64s = np.concatenate([self.u64s, np.zeros_like(self.u64s)])
        kind, factor, shift = _ts_params(tsresol)
        offset_ns = tsoffset_s * NS
        if abs(offset_ns) > W.INT64_MAX:
            # every time of this interface takes walk.ts_exact, which works in seconds
            offset_ns, limit = 0, 0
        else:
            limit = _fast_limit(kind, factor, shift, offset_ns)
        self.ints[row] = (gid, linktype, snaplen, kind, shift, offset_ns, tsoffset_s)
        self.u64s[row] = (factor, limit)
        self.gids.append(gid)


def _options(body, order: str):
    """Yield (code, value) for the options in `body` (bytes or a memoryview); raise ValueError on overrun."""
    i = 0
    while i + 4 <= len(body):
        code, length = struct.unpack_from(order + "HH", body, i)
        if code == OPT_ENDOFOPT:
            return
        if i + 4 + length > len(body):
            raise ValueError(f"option {code} of length {length} runs past the end of its block")
        yield code, body[i + 4:i + 4 + length]
        i += 4 + ((length + 3) & ~3)


def interface_totals(interfaces: list[dict], stats: list[dict]) -> list[dict]:
    """Each interface's last statistics (its counters are totals since the capture began), in interface order.

    One entry per interface that has statistics: its number, name, and the
    counters as of its last block (None where no block gave one), as
    Wireshark's capture file properties show them.
    """
    last: dict[int, dict] = {}
    for record in stats:
        merged = last.setdefault(record["interface"], dict(record))
        merged.update({key: value for key, value in record.items() if value is not None})
    return [{"interface": gid, "name": interfaces[gid]["name"], **{k: v for k, v in record.items() if k != "interface"}}
            for gid, record in sorted(last.items())]


def interface_ns(interface: dict, units: int) -> int:
    """A time in an interface's units (its if_tsresol and if_tsoffset) as ns since the epoch, exactly."""
    resolution = interface["tsresol"]
    if resolution & 0x80:
        ns = (units * NS) >> (resolution & 0x7F)
    else:
        ns = units * NS // 10 ** resolution if resolution <= 9 else units // 10 ** (resolution - 9)
    return ns + interface["tsoffset_s"] * NS


class CaptureReader:
    """Iterate over a capture as RawBatches; see the package docstring for the error policy."""

    def __init__(self, source, batch_packets: int = BATCH_PACKETS, first_frame: int = 1,
                 keep_offsets: bool = False, last_ts_ns: int = 0):
        if int(batch_packets) < 1:
            raise UsageError(f"batch_packets must be at least 1, not {batch_packets}")
        self._batch_packets = int(batch_packets)
        self._next_frame = int(first_frame)
        self._src = ByteSource(source)
        self.path = self._src.path
        self.compression = self._src.compression
        self.size = self._src.size
        self.format: str | None = None      # "pcap" or "pcapng" once the magic is known
        self.interfaces: list[dict] = []
        # where each section header (pcapng) or the file header (pcap) lies: offset, length, byte order
        # (`big`), the file-wide number of its first interface; an interface's dict has its block's
        # offset and length too (detector.ingest.index reads a record alone from these)
        self.sections: list[dict] = []
        # keep_offsets: each batch's records' start offsets in the (decompressed) stream, the record
        # header or pcapng block, and the frames of simple packet blocks with the times they were given
        self._keep_offsets = bool(keep_offsets)
        self.record_offsets: list[np.ndarray] = []
        self.spb_frames: list[np.ndarray] = []
        self.spb_times: list[np.ndarray] = []
        self._starts = None
        # the pcapng interface statistics blocks, in file order (see _read_isb)
        self.interface_stats: list[dict] = []
        self._stats_dropped = 0
        self.warnings: list[str] = []
        self.packets = 0
        self.bytes = 0
        self._buf = np.empty(CHUNK_BYTES, dtype=np.uint8)
        self._base = 0          # stream offset of _buf[0]
        self._pos = 0           # first byte not yet walked
        self._end = 0           # end of the bytes read so far
        self._eof = False
        self._read_full = False
        self._read_error = None
        self._done = False
        self._started = False
        # pcapng: time of the previous packet, for SPBs (last_ts_ns: a stream cut from a capture after its start)
        self._last_ts = int(last_ts_ns)
        self._scratch = None    # the walk's output arrays (see _walk_arrays)
        self._time_overflow_warned = False
        self._map = self._src.map()
        self._released = 0      # mapped files: pages before this offset have left the mapping
        self._kept_batches: deque[int] = deque(maxlen=MAP_KEEP_BATCHES)    # where the last batches begin
        if self._map is not None:
            self._buf = np.frombuffer(self._map, dtype=np.uint8)
            self._end = len(self._buf)
            self._eof = True
        try:
            self._read_file_header()
        except CaptureError as exc:
            self._src.close()
            exc.format, exc.compression = self.format, self.compression
            raise
        except BaseException:
            self._src.close()
            raise

    # ---- public ----------------------------------------------------------
    @property
    def position(self) -> int:
        """Bytes of the underlying file consumed so far (compressed bytes if compressed)."""
        if self._map is not None:
            return self._pos
        return self._src.position

    def close(self) -> None:
        self._done = True
        self._src.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __iter__(self):
        if self._started:
            raise UsageError(f"{self.path}: a CaptureReader can be iterated only once")
        self._started = True
        try:
            while True:
                batch = self._next_batch()
                if batch is None:
                    return
                yield batch
        finally:
            self.close()

    # ---- buffer ----------------------------------------------------------
    def _offset(self, pos: int | None = None) -> int:
        return self._base + (self._pos if pos is None else pos)

    def _move_tail(self) -> None:
        """Continue in a fresh chunk; the old one stays intact for the batches that view it."""
        tail = self._end - self._pos
        fresh = np.empty(CHUNK_BYTES, dtype=np.uint8)
        fresh[:tail] = self._buf[self._pos:self._end]
        self._base += self._pos
        self._buf, self._pos, self._end = fresh, 0, tail

    def _read_more(self) -> None:
        """Read once into the chunk, moving to a fresh chunk when this one is full."""
        if self._end == len(self._buf):
            self._move_tail()
        want = min(len(self._buf) - self._end, READ_SLICE_BYTES)
        try:
            got = self._src.readinto(self._buf[self._end:self._end + want])
        except CaptureError as exc:
            if not self._started:
                raise
            # damaged compression after a valid header: keep what came before
            self._read_error = exc.reason
            got = 0
        if got:
            self._end += got
        else:
            self._eof = True
        # a full read means more is waiting (a file); a short one, that the
        # source has no more for now (a pipe): then a batch goes out at once
        self._read_full = got == want

    def _ensure(self, need: int) -> bool:
        """Have `need` bytes at _pos (need <= CHUNK_BYTES); False at the end of the stream."""
        while self._end - self._pos < need:
            if self._eof:
                return False
            if len(self._buf) - self._pos < need and self._end < len(self._buf):
                self._move_tail()       # the request cannot fit behind _pos
            self._read_more()
        return True

    def _bytes(self, n: int) -> bytes:
        return self._buf[self._pos:self._pos + n].tobytes()

    def _view(self, n: int) -> memoryview:
        """The n bytes at _pos, uncopied: valid until the next read."""
        return memoryview(self._buf)[self._pos:self._pos + n]

    def _u32_at(self, delta: int, order: str) -> int:
        return struct.unpack_from(order + "I", self._buf, self._pos + delta)[0]

    def _damage(self, reason: str, pos: int | None = None) -> None:
        """Record-level damage: warn once and stop reading."""
        self.warnings.append(str(CaptureError(self.path, reason, self._offset(pos))))
        self._done = True

    # ---- headers ---------------------------------------------------------
    def _read_file_header(self) -> None:
        if not self._ensure(4):
            if self._end == 0:
                raise CaptureError(self.path, "empty file", 0)
            raise CaptureError(self.path, f"too short to be a capture ({self._end} bytes)", 0)
        head = self._bytes(4)
        magic = file_magic(head)
        if magic is None:
            raise CaptureError(self.path, f"not a pcap or pcapng capture (magic 0x{head.hex()})", 0)
        self.format = magic.format
        if magic.format == "pcapng":
            self._section = -1
            self._read_shb(first=True)
        else:
            self._read_pcap_header(big=magic.big, nano=magic.nano)

    def _read_pcap_header(self, big: bool, nano: bool) -> None:
        if not self._ensure(PCAP_FILE_HEADER):
            raise CaptureError(self.path, "file ends inside the pcap file header", 0)
        order = ">" if big else "<"
        major, minor, _zone, _sigfigs, snaplen, field = struct.unpack(
            order + "HHiIII", self._bytes(PCAP_FILE_HEADER)[4:])
        if major != PCAP_VERSION[0]:
            raise CaptureError(self.path, f"unsupported pcap version {major}.{minor}", 4)
        linktype = field & LINKTYPE_MASK
        if linktype > MAX_LINKTYPE:
            raise CaptureError(self.path, f"unsupported link type {linktype}", 20)
        self._big = big
        self._frac_ns = 1 if nano else 1000
        self._linktype = linktype
        self.interfaces.append({"linktype": linktype, "snaplen": snaplen, "name": None,
                                "tsresol": 9 if nano else 6, "tsoffset_s": 0, "section": 0,
                                "offset": 0, "length": PCAP_FILE_HEADER})
        self.sections.append({"offset": 0, "length": PCAP_FILE_HEADER, "big": big, "nano": nano,
                              "first_interface": 0})
        self._pos += PCAP_FILE_HEADER

    def _read_shb(self, first: bool) -> bool:
        """Parse the section header block at _pos; False (after a warning) if damaged."""
        def bad(reason: str, pos: int | None = None) -> bool:
            if first:
                raise CaptureError(self.path, reason, self._offset(pos))
            self._damage(reason, pos)
            return False

        if not self._ensure(12):
            return bad("file ends inside a section header block")
        if self._u32_at(8, "<") == PCAPNG_BOM:
            order = "<"
        elif self._u32_at(8, ">") == PCAPNG_BOM:
            order = ">"
        else:
            return bad("section header block has no valid byte-order magic", self._pos + 8)
        blen = self._u32_at(4, order)
        if blen < SHB_MIN or blen % 4 or blen > W.MAX_BLOCK_BYTES:
            return bad(f"section header block has a bad total length {blen}")
        if not self._ensure(blen):
            return bad("file ends inside a section header block")
        block = self._view(blen)
        if struct.unpack_from(order + "I", block, blen - 4)[0] != blen:
            return bad(f"block total length {blen} differs from the trailing copy")
        major, minor = struct.unpack_from(order + "HH", block, 12)
        if (major, minor) not in PCAPNG_VERSIONS:
            return bad(f"unsupported pcapng version {major}.{minor}", self._pos + 12)
        try:
            for _ in _options(block[24:blen - 4], order):
                pass
        except ValueError as exc:
            return bad(f"section header block damaged: {exc}")
        self._big = order == ">"
        self._section += 1
        self.sections.append({"offset": self._offset(), "length": blen, "big": self._big,
                              "first_interface": len(self.interfaces)})
        self._section_ifs = _SectionInterfaces()
        self._pos += blen
        return True

    def _read_idb(self, blen: int) -> bool:
        """Parse the interface description block at _pos (complete, lengths checked)."""
        order = ">" if self._big else "<"
        if blen < IDB_MIN:
            self._damage(W.DAMAGE_REASONS[W.BLOCK_TOO_SMALL].format(value=blen))
            return False
        if len(self.interfaces) >= MAX_INTERFACES:
            self._damage(f"more than {MAX_INTERFACES} interfaces")
            return False
        block = self._view(blen)
        linktype, _reserved, snaplen = struct.unpack_from(order + "HHI", block, 8)
        tsresol, tsoffset, name = DEFAULT_TSRESOL, 0, None
        try:
            for code, value in _options(block[16:blen - 4], order):
                if code == OPT_IF_TSRESOL and len(value) == 1:
                    tsresol = value[0]
                elif code == OPT_IF_TSOFFSET and len(value) == 8:
                    tsoffset = struct.unpack(order + "q", value)[0]
                elif code == OPT_IF_NAME:
                    name = bytes(value).decode("utf-8", "replace")
        except ValueError as exc:
            self._damage(f"interface description block damaged: {exc}")
            return False
        self._section_ifs.add(len(self.interfaces), linktype, snaplen, tsresol, tsoffset)
        self.interfaces.append({"linktype": linktype, "snaplen": snaplen, "name": name,
                                "tsresol": tsresol, "tsoffset_s": tsoffset,
                                "section": self._section, "offset": self._offset(), "length": blen})
        self._pos += blen
        return True

    def _read_isb(self, blen: int) -> None:
        """Parse the interface statistics block at _pos (complete, lengths checked) into interface_stats.

        Its counters (isb_ifrecv, isb_ifdrop, isb_filteraccept, isb_osdrop,
        isb_usrdeliv) count from the start of the capture on that interface,
        as of the block's time, and a counter the writer did not know is
        absent (None), never 0. A damaged block costs its statistics, with a
        warning naming its offset, not the packets after it: its length was
        checked, so the walk goes on past it.
        """
        order = ">" if self._big else "<"
        start = self._pos
        block = self._view(blen)
        self._pos += blen
        if blen < ISB_MIN:
            self._warn(f"interface statistics block of {blen} bytes, shorter than its fixed fields "
                       f"({ISB_MIN}); passed over", start)
            return
        local, high, low = struct.unpack_from(order + "III", block, 8)
        ifs = self._section_ifs
        if local >= len(ifs):
            described = plural(len(ifs), "interface")
            self._warn(f"interface statistics for interface {local}, but this section describes {described}; "
                       "passed over", start)
            return
        gid = ifs.gids[local]
        record = {"interface": gid, "time_ns": self._interface_ns(gid, (high << 32) | low),
                  "start_ns": None, "end_ns": None, **dict.fromkeys(ISB_COUNTERS.values())}
        try:
            for code, value in _options(block[ISB_MIN - 4:blen - 4], order):
                if code in ISB_COUNTERS and len(value) == 8:
                    record[ISB_COUNTERS[code]] = struct.unpack(order + "Q", value)[0]
                elif code in (OPT_ISB_STARTTIME, OPT_ISB_ENDTIME) and len(value) == 8:
                    high, low = struct.unpack(order + "II", value)
                    record["start_ns" if code == OPT_ISB_STARTTIME else "end_ns"] = \
                        self._interface_ns(gid, (high << 32) | low)
        except ValueError as exc:
            self._warn(f"interface statistics block damaged: {exc}; passed over", start)
            return
        if len(self.interface_stats) < MAX_INTERFACE_STATS:
            self.interface_stats.append(record)
        else:
            if not self._stats_dropped:
                self._warn(f"more than {MAX_INTERFACE_STATS:,} interface statistics blocks; the rest are not "
                           "kept", start)
            self._stats_dropped += 1

    def _interface_ns(self, gid: int, units: int) -> int:
        return interface_ns(self.interfaces[gid], units)

    def _warn(self, reason: str, pos: int) -> None:
        """Damage that costs no packet: a warning naming the offset; reading goes on."""
        self.warnings.append(str(CaptureError(self.path, reason, self._offset(pos))))

    # ---- records ---------------------------------------------------------
    def _walk_arrays(self, limit: int):
        """Output arrays for a walk of up to `limit` records, reused from batch to batch.

        The walk fills them and `_batch` copies out the records found, so the
        batch columns are as long as the batch and these arrays, sized for the
        largest possible batch, are allocated once (fresh memory costs the
        kernel a zeroed page on first touch, a whole huge page where THP is on).
        """
        if self._scratch is None or len(self._scratch[0]) < limit:
            self._scratch = (np.empty(limit, dtype=np.int64), np.empty(limit, dtype=np.uint32),
                             np.empty(limit, dtype=np.uint32), np.empty(limit, dtype=np.int64),
                             np.empty(limit, dtype=np.uint16), np.empty(limit, dtype=np.uint16),
                             np.empty(limit, dtype=np.uint32))
        return self._scratch

    def _next_batch(self) -> RawBatch | None:
        while not self._done:
            # room for as many records as the rest of the chunk could hold
            limit = min(self._batch_packets, (len(self._buf) - self._pos) // MIN_RECORD + 1)
            arrays = self._walk_arrays(limit)
            first = self._pos       # where this batch's bytes begin
            n = 0
            while True:
                found, why, code, value = self._walk(arrays, n, limit, first)
                n += found
                if why == W.SPECIAL and (n == 0 or self._block_in_chunk()):
                    # header blocks between records do not end the batch: a file of many small
                    # sections or interfaces must not become as many one-record batches
                    self._special()
                    if n == 0:
                        first = self._pos
                    if not self._done:
                        continue
                # keep filling this batch while the chunk has room and the source more to give
                elif (n and why == W.NEED_MORE and n < limit and self._read_full
                      and not self._eof and self._end < len(self._buf)):
                    self._read_more()
                    continue
                break
            if n:
                return self._batch(n, *arrays)
            if why == W.NEED_MORE:
                if self._eof:
                    self._finish()
                else:
                    self._read_more()
            elif why == W.DAMAGED:
                self._damage(W.DAMAGE_REASONS[code].format(value=int(value)))
        return None

    def _walk(self, arrays, n, limit, first):
        """Walk the records at _pos into arrays[*][n:limit]; advances _pos. -> (found, why, code, value).

        A mapped file's batch spans at most MAP_WINDOW_BYTES from `first`,
        unless its first record alone is larger.
        """
        off, cap, wire, ts, iface, linktype, flags = arrays
        end = self._end
        if self._map is not None:
            end = min(end, first + MAP_WINDOW_BYTES)
        while True:
            if self.format == "pcap":
                total, stop, why, code, value = W.walk_pcap(
                    self._buf, self._pos, end, self._big, self._frac_ns, off, cap, wire, ts, n, limit)
            else:
                ifs = self._section_ifs
                total, stop, why, code, value, self._last_ts, overflow_at = W.walk_pcapng(
                    self._buf, self._pos, end, self._big, ifs.ints, ifs.u64s, len(ifs), self._last_ts,
                    off, cap, wire, ts, iface, linktype, flags, n, limit)
                if overflow_at >= 0:
                    self._warn_time_overflow(overflow_at)
            if total or why != W.NEED_MORE or end == self._end:
                break
            end = self._end
        if self._keep_offsets and total > n:
            self._mark_starts(off, cap, ts, n, total)
        self._pos = stop
        return total - n, why, code, value

    def _mark_starts(self, off, cap, ts, lo: int, hi: int) -> None:
        """keep_offsets: where the records [lo:hi] of this walk begin in the stream (their byte order is the
        section's now), and which of them are simple packet blocks, whose time is not in their block."""
        if self._starts is None or len(self._starts) < len(off):
            self._starts = np.empty(len(off), dtype=np.int64)
        data = off[lo:hi]
        if self.format == "pcap":
            self._starts[lo:hi] = data - PCAP_RECORD_HEADER + self._base
            return
        # an enhanced or obsolete packet block keeps the captured length in the 4 bytes before the length on
        # the wire, just before the data; a simple packet block has its block length there, which exceeds the
        # captured length by at least the block's 16 bytes of header and trailer
        at = data - 8
        b = [self._buf[at + k].astype(np.uint32) for k in range(4)]
        if not self._big:
            b.reverse()
        field = b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3]
        simple = field != cap[lo:hi]
        self._starts[lo:hi] = data - np.where(simple, SPB_DATA, EPB_DATA) + self._base
        if simple.any():
            rows = np.flatnonzero(simple)
            self.spb_frames.append(self._next_frame + lo + rows)
            self.spb_times.append(ts[lo:hi][rows].copy())

    def _warn_time_overflow(self, pos: int) -> None:
        """Once per file: a packet time that int64 nanoseconds cannot hold (see walk's docstring)."""
        if self._time_overflow_warned:
            return
        self._time_overflow_warned = True
        self.warnings.append(str(CaptureError(self.path, TIME_OVERFLOW, self._offset(pos))))

    def _release_behind(self, start: int) -> None:
        """Mapped files, after walking a batch that begins at `start`: drop the pages before the last
        MAP_KEEP_BATCHES batches (and MAP_KEEP_BEHIND_BYTES) from this process, not from the page cache."""
        self._kept_batches.append(start)
        oldest = self._kept_batches[0] if len(self._kept_batches) == MAP_KEEP_BATCHES else 0
        keep_from = max(oldest, self._pos - MAP_KEEP_BEHIND_BYTES) // mmap.PAGESIZE * mmap.PAGESIZE
        # in steps of about a batch (the kept span's share), at most MAP_RELEASE_STEP_BYTES
        step = min(MAP_RELEASE_STEP_BYTES, (self._pos - keep_from) // MAP_KEEP_BATCHES)
        if keep_from > self._released and keep_from - self._released >= step:
            self._map.madvise(mmap.MADV_DONTNEED, self._released, keep_from - self._released)
            self._released = keep_from

    def _block_in_chunk(self) -> bool:
        """Whether the header block at _pos can be parsed from the bytes already read.

        The batch being filled views this chunk, so the block must not make
        the reader move to a fresh one. The walk stops at an IDB only once it
        is complete; an SHB, as soon as its type is seen.
        """
        if self._u32_at(0, "<") != BT_SHB:     # the SHB type reads the same in both orders
            return True
        left = self._end - self._pos
        if left < 12:
            return False
        for order in "<>":
            if self._u32_at(8, order) == PCAPNG_BOM:
                return self._u32_at(4, order) <= left
        return True     # no byte-order magic: damage, told without reading further

    def _special(self) -> None:
        """An SHB, or a complete, length-checked IDB or ISB at _pos."""
        if self._u32_at(0, "<") == BT_SHB:
            self._read_shb(first=False)
            return
        order = ">" if self._big else "<"
        if self._u32_at(0, order) == BT_IDB:
            self._read_idb(self._u32_at(4, order))
        else:
            self._read_isb(self._u32_at(4, order))

    def _finish(self) -> None:
        left = self._end - self._pos
        if self._read_error is not None:
            self._damage(self._read_error)
        elif left:
            unit = "record" if self.format == "pcap" else "block"
            self._damage(f"capture cut short: {left} bytes of an incomplete last {unit}")
        self._done = True

    def _batch(self, n, off, cap, wire, ts, iface, linktype, flags) -> RawBatch:
        lo = int(off[0])
        hi = int(off[n - 1]) + int(cap[n - 1])
        pcap = self.format == "pcap"      # one interface, one link type: the walk leaves those to us
        cols = {
            "frame": np.arange(self._next_frame, self._next_frame + n, dtype=np.int64),
            "offset": off[:n] - lo,
            "caplen": cap[:n].copy(),
            "wirelen": wire[:n].copy(),
            "ts_ns": ts[:n].copy(),
            "iface": np.zeros(n, dtype=np.uint16) if pcap else iface[:n].copy(),
            "linktype": np.full(n, self._linktype, dtype=np.uint16) if pcap else linktype[:n].copy(),
            "epb_flags": np.zeros(n, dtype=np.uint32) if pcap else flags[:n].copy(),
        }
        if self._keep_offsets:
            self.record_offsets.append(self._starts[:n].copy())
        self._next_frame += n
        self.packets += n
        self.bytes += int(cols["caplen"].sum(dtype=np.int64))
        if self._map is not None and hasattr(self._map, "madvise"):
            self._release_behind(lo)
        return RawBatch(data=self._buf[lo:hi], cols=cols, source=self.path)

"""Capture readers on crafted bytes: every format feature, streaming, and every kind of damage."""
from __future__ import annotations

import gzip
import io
import lzma
import os
import struct
import threading

import numpy as np
import pytest
import zstandard

from detector.errors import CaptureError, UsageError
from detector.ingest import StreamCapture, open_capture, read_captures
from detector.ingest import reader as reader_module
from detector.schema import MAX_CAPLEN, RAW_COLUMNS

# ---- crafted captures -----------------------------------------------------
T0 = 1_700_000_000      # a fixed second, 2023-11-14


def payload(i: int, n: int) -> bytes:
    return bytes((i * 7 + j) & 0xFF for j in range(n))


def pcap_header(big=False, nano=False, snaplen=65535, linkfield=1, version=(2, 4)) -> bytes:
    o = ">" if big else "<"
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    return struct.pack(o + "IHHiIII", magic, version[0], version[1], 0, 0, snaplen, linkfield)


def pcap_record(sec, frac, data, wirelen=None, big=False, caplen=None) -> bytes:
    o = ">" if big else "<"
    caplen = len(data) if caplen is None else caplen
    wirelen = len(data) if wirelen is None else wirelen
    return struct.pack(o + "IIII", sec, frac, caplen, wirelen) + data


def pcap_file(n=5, big=False, nano=False, **kw) -> bytes:
    parts = [pcap_header(big=big, nano=nano, **kw)]
    for i in range(n):
        parts.append(pcap_record(T0 + i, 1000 * i + 7, payload(i, 40 + i), 1500 + i, big=big))
    return b"".join(parts)


def block(btype: int, body: bytes, big=False) -> bytes:
    o = ">" if big else "<"
    body += b"\0" * (-len(body) % 4)
    total = len(body) + 12
    return struct.pack(o + "II", btype, total) + body + struct.pack(o + "I", total)


def option(code: int, value: bytes, big=False) -> bytes:
    o = ">" if big else "<"
    return struct.pack(o + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def end_of_options(big=False) -> bytes:
    return struct.pack((">" if big else "<") + "HH", 0, 0)


def shb(big=False, version=(1, 0)) -> bytes:
    o = ">" if big else "<"
    body = struct.pack(o + "IHHq", 0x1A2B3C4D, version[0], version[1], -1)
    return block(0x0A0D0D0A, body, big)


def idb(linktype=1, snaplen=0, tsresol=None, tsoffset=None, name=None, big=False) -> bytes:
    o = ">" if big else "<"
    opts = b""
    if name is not None:
        opts += option(2, name.encode(), big)
    if tsresol is not None:
        opts += option(9, bytes([tsresol]), big)
    if tsoffset is not None:
        opts += option(14, struct.pack(o + "q", tsoffset), big)
    if opts:
        opts += end_of_options(big)
    return block(1, struct.pack(o + "HHI", linktype, 0, snaplen) + opts, big)


def epb(iface, units, data, wirelen=None, big=False, caplen=None) -> bytes:
    o = ">" if big else "<"
    caplen = len(data) if caplen is None else caplen
    wirelen = len(data) if wirelen is None else wirelen
    body = struct.pack(o + "IIIII", iface, units >> 32, units & 0xFFFFFFFF, caplen, wirelen) + data
    return block(6, body, big)


def opb(iface, units, data, wirelen=None, big=False) -> bytes:
    o = ">" if big else "<"
    wirelen = len(data) if wirelen is None else wirelen
    body = struct.pack(o + "HHIIII", iface, 0, units >> 32, units & 0xFFFFFFFF, len(data), wirelen)
    return block(2, body + data, big)


def spb(data, wirelen, big=False) -> bytes:
    return block(3, struct.pack((">" if big else "<") + "I", wirelen) + data, big)


def write(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def read_all(source, **kw):
    """(reader, concatenated columns, list of record bytes)."""
    reader = open_capture(source, **kw)
    batches = list(reader)
    cols = {name: np.concatenate([b[name] for b in batches]) if batches
            else np.zeros(0, dtype=dtype) for name, dtype in RAW_COLUMNS.items()}
    frames = [b.data[int(o):int(o) + int(c)].tobytes()
              for b in batches for o, c in zip(b["offset"], b["caplen"])]
    for b in batches:
        assert set(b.cols) == set(RAW_COLUMNS)
        assert all(b.cols[k].dtype == v for k, v in RAW_COLUMNS.items())
    return reader, cols, frames


# ---- classic pcap -----------------------------------------------------------
@pytest.mark.parametrize("big", [False, True])
@pytest.mark.parametrize("nano", [False, True])
def test_pcap_byte_orders_and_resolutions(tmp_path, big, nano):
    path = write(tmp_path, "t.pcap", pcap_file(5, big=big, nano=nano))
    reader, cols, frames = read_all(path)
    assert reader.format == "pcap" and reader.compression == ""
    assert reader.packets == 5 and reader.warnings == []
    assert reader.bytes == sum(40 + i for i in range(5))
    assert frames == [payload(i, 40 + i) for i in range(5)]
    assert cols["frame"].tolist() == [1, 2, 3, 4, 5]
    assert cols["wirelen"].tolist() == [1500 + i for i in range(5)]
    unit = 1 if nano else 1000
    assert cols["ts_ns"].tolist() == [(T0 + i) * 10**9 + (1000 * i + 7) * unit for i in range(5)]
    assert cols["iface"].tolist() == [0] * 5 and cols["linktype"].tolist() == [1] * 5
    assert reader.interfaces[0]["linktype"] == 1 and reader.interfaces[0]["snaplen"] == 65535
    assert reader.position == reader.size == os.path.getsize(path)


def test_pcap_linktype_fcs_bits_masked(tmp_path):
    # bits 26..31 describe the FCS (pcap-savefile(5)); 0x30000084 is Juniper ATM1 (132)
    path = write(tmp_path, "fcs.pcap", pcap_file(2, linkfield=0x30000084))
    _reader, cols, _ = read_all(path)
    assert cols["linktype"].tolist() == [132, 132]
    path = write(tmp_path, "fcs2.pcap", pcap_file(1, linkfield=0x04000001))
    assert read_all(path)[1]["linktype"].tolist() == [1]


def test_pcap_record_over_snaplen_within_max_is_accepted(tmp_path):
    data = pcap_header(snaplen=64) + pcap_record(T0, 0, payload(1, 100)) + pcap_record(T0, 1, payload(2, 10))
    reader, cols, _frames = read_all(write(tmp_path, "s.pcap", data))
    assert cols["caplen"].tolist() == [100, 10] and reader.warnings == []


def test_pcap_caplen_above_max_stops_with_warning(tmp_path):
    good = pcap_record(T0, 0, payload(1, 60))
    bad = struct.pack("<IIII", T0, 1, MAX_CAPLEN + 1, 100) + b"\0" * 64
    path = write(tmp_path, "big.pcap", pcap_header() + good + good + bad + good)
    reader, _cols, _ = read_all(path)
    assert reader.packets == 2
    assert reader.warnings == [f"{path} at byte {24 + 2 * 76}: record has a {MAX_CAPLEN + 1}-byte "
                               f"packet, bigger than maximum of {MAX_CAPLEN}"]


def test_pcap_truncated_last_record(tmp_path):
    full = pcap_file(3)
    path = write(tmp_path, "cut.pcap", full[:-5])
    reader, _cols, _ = read_all(path)
    assert reader.packets == 2
    assert len(reader.warnings) == 1
    assert reader.warnings[0].startswith(f"{path} at byte {24 + 56 + 57}: capture cut short")
    # cut inside the record header as well
    path = write(tmp_path, "cut2.pcap", full[:24 + 56 + 10])
    reader, _, _ = read_all(path)
    assert reader.packets == 1 and f"at byte {24 + 56}:" in reader.warnings[0]


HEADER_CASES = [
    (b"", "empty file", 0),
    (b"\xd4\xc3", "too short to be a capture (2 bytes)", 0),
    (b"GET / HTTP/1.1\r\n" * 3, "not a pcap or pcapng capture (magic 0x47455420)", 0),
    (pcap_header()[:20], "file ends inside the pcap file header", 0),
    (pcap_header(version=(1, 4)) + pcap_record(T0, 0, b"x"), "unsupported pcap version 1.4", 4),
    (pcap_header(linkfield=0x00FF0000), "unsupported link type 16711680", 20),
    (shb(version=(2, 0)), "unsupported pcapng version 2.0", 12),
    (shb()[:8] + b"\x11\x22\x33\x44" + shb()[12:], "section header block has no valid byte-order magic", 8),
    (shb()[:20], "file ends inside a section header block", 0),
    (shb()[:-4] + b"\x10\0\0\0", "block total length 28 differs from the trailing copy", 0),
    (block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + option(2, b"x" * 8)[:4] + b"ab"),
     "section header block damaged: option 2 of length 8 runs past the end of its block", 0),
]


@pytest.mark.parametrize("data, reason, offset", HEADER_CASES, ids=[r for _, r, _ in HEADER_CASES])
def test_header_problems_raise(tmp_path, data, reason, offset):
    path = write(tmp_path, "bad.cap", data)
    with pytest.raises(CaptureError) as info:
        open_capture(path)
    assert str(info.value) == f"{path} at byte {offset}: {reason}"


def test_missing_file_raises(tmp_path):
    with pytest.raises(CaptureError, match="No such file"):
        open_capture(tmp_path / "absent.pcap")


# ---- pcapng -----------------------------------------------------------------
def multi_section_capture() -> tuple[bytes, list[tuple[int, int, int, bytes]]]:
    """LE section (ns + µs interfaces, Ethernet and raw IP) then a BE section
    (2^-20 resolution with a tsoffset, Linux SLL). Returns bytes and the
    expected (iface, linktype, ts_ns, data) per record."""
    ns_units = T0 * 10**9 + 123_456_789
    us_units = T0 * 10**6 + 654_321
    bin_units = ((T0 + 5) << 20) + (1 << 19) + 1      # + 0.5 s + 2^-20 s
    offset_s = -3600
    parts = [
        shb(),
        idb(1, 0, tsresol=9, name="eth0"),
        idb(101, 0, tsresol=6),
        block(0x0BAD, b"custom block, skipped"),
        epb(0, ns_units, payload(1, 60)),
        epb(1, us_units, payload(2, 33)),
        block(5, struct.pack("<IIIHH", 0, 0, 0, 0, 0)),    # interface statistics: skipped
        shb(big=True),
        idb(113, 0, tsresol=0x94, tsoffset=offset_s, big=True),
        epb(0, bin_units, payload(3, 17), big=True),
    ]
    # 2^-20 s = 953.674316... ns: the integer conversion floors it
    bin_ns = (T0 + 5 + offset_s) * 10**9 + 500_000_000 + 953
    expect = [(0, 1, ns_units, payload(1, 60)), (1, 101, us_units * 1000, payload(2, 33)),
              (2, 113, bin_ns, payload(3, 17))]
    return b"".join(parts), expect


def test_pcapng_sections_interfaces_resolutions(tmp_path):
    data, expect = multi_section_capture()
    reader, cols, frames = read_all(write(tmp_path, "m.pcapng", data))
    assert reader.format == "pcapng" and reader.warnings == []
    assert cols["iface"].tolist() == [e[0] for e in expect]
    assert cols["linktype"].tolist() == [e[1] for e in expect]
    assert cols["ts_ns"].tolist() == [e[2] for e in expect]
    assert frames == [e[3] for e in expect]
    assert [i["section"] for i in reader.interfaces] == [0, 0, 1]
    assert [i["name"] for i in reader.interfaces] == ["eth0", None, None]
    assert reader.interfaces[2]["tsoffset_s"] == -3600 and reader.interfaces[2]["tsresol"] == 0x94


def test_pcapng_default_resolution_is_microseconds(tmp_path):
    data = shb() + idb(1) + epb(0, 1_500_000, b"abc")
    assert read_all(write(tmp_path, "d.pcapng", data))[1]["ts_ns"].tolist() == [1_500_000_000]


def test_pcapng_simple_and_obsolete_packet_blocks(tmp_path):
    data = b"".join([
        shb(), idb(1, snaplen=50, tsresol=6),
        spb(payload(0, 20), wirelen=20),           # before any timed packet: time 0
        opb(0, 2_000_000, payload(1, 30), wirelen=90),
        spb(payload(2, 64), wirelen=1000),         # snaplen 50 bounds it
        spb(payload(3, 12), wirelen=40),           # the block body (12) bounds it
    ])
    reader, cols, frames = read_all(write(tmp_path, "s.pcapng", data))
    assert reader.warnings == []
    assert cols["caplen"].tolist() == [20, 30, 50, 12]
    assert cols["wirelen"].tolist() == [20, 90, 1000, 40]
    assert cols["ts_ns"].tolist() == [0, 2_000_000_000, 2_000_000_000, 2_000_000_000]
    assert frames == [payload(0, 20), payload(1, 30), payload(2, 64)[:50], payload(3, 12)]


def test_pcapng_epb_over_snaplen_within_max_is_accepted(tmp_path):
    data = shb() + idb(1, snaplen=16) + epb(0, 1, payload(0, 200))
    reader, cols, _ = read_all(write(tmp_path, "o.pcapng", data))
    assert cols["caplen"].tolist() == [200] and reader.warnings == []


def _damaged(head: bytes, bad: bytes) -> bytes:
    return head + bad + epb(0, 9, b"never read")


PNG_HEAD = shb() + idb(1) + epb(0, 1, payload(0, 40)) + epb(0, 2, payload(1, 40))


DAMAGE_CASES = [
    (epb(0, 3, b"x" * 8)[:-4] + b"\x99\0\0\0", "block total length 40 differs from the trailing copy"),
    (struct.pack("<II", 6, 42) + b"\0" * 40, "block total length 42 is not a multiple of 4"),
    (struct.pack("<III", 6, 28, 0) + b"\0" * 12 + struct.pack("<I", 28),
     "block total length 28 is too small for its block type"),
    (struct.pack("<II", 7, 8), "block total length 8 is too small for its block type"),
    (epb(3, 3, b"x" * 8), "packet block names interface 3, not described in this section"),
    (epb(0, 3, b"x" * 8, caplen=9), "captured length 9 runs past the end of its block"),
    (epb(0, 3, b"x" * 8, caplen=MAX_CAPLEN + 1),
     f"record has a {MAX_CAPLEN + 1}-byte packet, bigger than maximum of {MAX_CAPLEN}"),
    (struct.pack("<II", 6, 64 << 20), "block total length 67108864 is larger than any block this reader accepts"),
    (shb()[:8] + b"junk" + shb()[12:], "section header block has no valid byte-order magic"),
    (block(1, b"\0" * 4), "block total length 16 is too small for its block type"),
    (block(1, struct.pack("<HHI", 1, 0, 0) + struct.pack("<HH", 9, 200)),
     "interface description block damaged: option 9 of length 200 runs past the end of its block"),
]


@pytest.mark.parametrize("bad, reason", DAMAGE_CASES, ids=[r for _, r in DAMAGE_CASES])
def test_pcapng_damage_keeps_packets_before_it(tmp_path, bad, reason):
    path = write(tmp_path, "d.pcapng", _damaged(PNG_HEAD, bad))
    reader, _cols, frames = read_all(path)
    assert reader.packets == 2 and frames == [payload(0, 40), payload(1, 40)]
    offset = len(PNG_HEAD) + (8 if "byte-order" in reason else 0)
    assert reader.warnings == [f"{path} at byte {offset}: {reason}"]


def test_pcapng_truncated_block(tmp_path):
    path = write(tmp_path, "t.pcapng", PNG_HEAD + epb(0, 3, b"y" * 30)[:-6])
    reader, _, _ = read_all(path)
    assert reader.packets == 2
    assert reader.warnings[0].startswith(f"{path} at byte {len(PNG_HEAD)}: capture cut short")


def test_spb_without_interface_is_damage(tmp_path):
    path = write(tmp_path, "n.pcapng", shb() + spb(b"abcd", 4))
    reader, _, _ = read_all(path)
    assert reader.packets == 0
    assert reader.warnings == [f"{path} at byte 28: packet block names interface 0, not described in this section"]


# ---- compression, streams, batching -----------------------------------------
@pytest.mark.parametrize("name, compress", [
    ("gzip", gzip.compress),
    ("xz", lzma.compress),
    ("zstd", lambda b: zstandard.ZstdCompressor().compress(b)),
])
def test_decompression_by_magic(tmp_path, name, compress):
    data, expect = multi_section_capture()
    packed = compress(data)
    path = write(tmp_path, "no-extension-hint.bin", packed)
    reader, cols, frames = read_all(path)
    assert reader.compression == name and reader.format == "pcapng"
    assert frames == [e[3] for e in expect] and cols["ts_ns"].tolist() == [e[2] for e in expect]
    assert reader.size == len(packed) and reader.position == len(packed)


def test_damaged_compressed_stream_keeps_earlier_packets(tmp_path):
    data = pcap_file(2000)
    packed = gzip.compress(data)
    path = write(tmp_path, "cut.pcap.gz", packed[:len(packed) // 2])
    reader, _cols, _ = read_all(path)
    assert 0 < reader.packets < 2000
    assert len(reader.warnings) == 1 and reader.warnings[0].startswith(f"{path} at byte ")
    assert "gzip error" in reader.warnings[0]


def _pipe_reader(data: bytes, piece: int):
    """A read end fed by a thread in `piece`-byte writes, as a capture tool would."""
    rfd, wfd = os.pipe()

    def feed():
        with os.fdopen(wfd, "wb", buffering=0) as out:
            for i in range(0, len(data), piece):
                out.write(data[i:i + piece])

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return os.fdopen(rfd, "rb", buffering=0), thread


@pytest.mark.parametrize("fmt", ["pcap", "pcapng", "pcap.gz"])
def test_streaming_through_a_pipe(fmt):
    if fmt == "pcapng":
        data = shb() + idb(1, tsresol=9) + b"".join(epb(0, i, payload(i, 20 + i % 50)) for i in range(300))
        expect = [payload(i, 20 + i % 50) for i in range(300)]
    else:
        data = pcap_file(300)
        expect = [payload(i, 40 + i) for i in range(300)]
        if fmt == "pcap.gz":
            data = gzip.compress(data)
    stream, thread = _pipe_reader(data, 7)
    with stream:
        reader, cols, frames = read_all(stream)
    thread.join()
    assert frames == expect and reader.warnings == []
    assert cols["frame"].tolist() == list(range(1, 301))
    assert reader.size is None and reader.position == len(data)


@pytest.mark.parametrize("compression", ["", "gzip"])
def test_stream_capture_is_read_again_from_its_copy(tmp_path, monkeypatch, compression):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    data = gzip.compress(pcap_file(300)) if compression else pcap_file(300)
    stream, thread = _pipe_reader(data, 1000)
    capture = StreamCapture(stream, name="<stdin>", keep=True)
    with stream:
        first, cols, frames = read_all(capture)
    thread.join()
    # the second reader reads the copy (maps it, unless compressed): the same records, the same name
    again, cols_again, frames_again = read_all(capture)
    assert first.path == again.path == "<stdin>" and first.compression == again.compression == compression
    assert frames_again == frames == [payload(i, 40 + i) for i in range(300)]
    assert cols_again["ts_ns"].tolist() == cols["ts_ns"].tolist()
    assert first.size is None and again.size == len(data) and (again._map is None) == bool(compression)
    assert [p.name for p in tmp_path.iterdir()] == []       # the copy has no name in the folder
    capture.close()


def test_stream_capture_without_a_copy_reads_once():
    capture = StreamCapture(io.BytesIO(pcap_file(2)), name="<stdin>")
    assert read_all(capture)[0].packets == 2
    with pytest.raises(UsageError, match="<stdin>: a stream can be read only once"):
        open_capture(capture)


def test_file_object_without_name(tmp_path):
    reader, _cols, _ = read_all(io.BytesIO(pcap_file(3)))
    assert reader.path == "<stream>" and reader.packets == 3


def test_batches_are_bounded_and_frames_continue(tmp_path):
    path = write(tmp_path, "b.pcap", pcap_file(10))
    reader = open_capture(path, batch_packets=3, first_frame=101)
    batches = list(reader)
    assert [len(b) for b in batches] == [3, 3, 3, 1]
    assert np.concatenate([b["frame"] for b in batches]).tolist() == list(range(101, 111))
    assert all(b.source == str(path) for b in batches)
    i = 0
    for b in batches:
        for off, cap in zip(b["offset"], b["caplen"]):
            assert b.data[off:off + cap].tobytes() == payload(i, 40 + i)
            i += 1


def test_records_straddling_chunks_and_map_windows(tmp_path, monkeypatch):
    # read from a stream, a small chunk forces many tails to move into fresh chunks; mapped from a
    # file, a window smaller than a record makes the walk widen it. Sizes up to MAX_CAPLEN.
    monkeypatch.setattr(reader_module, "CHUNK_BYTES", MAX_CAPLEN + 4096)
    monkeypatch.setattr(reader_module, "MAP_WINDOW_BYTES", 100_000)
    sizes = [1, MAX_CAPLEN, 5000, 0, 77_777, 200_001, 3, MAX_CAPLEN - 1, 65_536] * 3
    rng = np.random.default_rng(7)
    bodies = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]
    pcap = pcap_header() + b"".join(pcap_record(T0, i, b) for i, b in enumerate(bodies))
    png = shb() + idb(1) + b"".join(epb(0, i, b) for i, b in enumerate(bodies))
    for name, data in (("c.pcap", pcap), ("c.pcapng", png)):
        path = write(tmp_path, name, data)
        with open(path, "rb") as stream:
            streamed, _, from_stream = read_all(stream)
        mapped, _, from_map = read_all(path)
        assert streamed._map is None and mapped._map is not None, name
        assert from_stream == bodies and streamed.warnings == [], name
        assert from_map == bodies and mapped.warnings == [], name


def test_mapped_pages_released_behind_the_walk_read_back_intact(tmp_path, monkeypatch):
    # the pages far behind the walk leave the mapping; batches that still view them see the same
    # bytes (they fault back in from the file), so every record reads as written
    monkeypatch.setattr(reader_module, "MAP_WINDOW_BYTES", 1 << 16)
    monkeypatch.setattr(reader_module, "MAP_KEEP_BEHIND_BYTES", 1 << 16)
    monkeypatch.setattr(reader_module, "MAP_RELEASE_STEP_BYTES", 1 << 16)
    bodies = [payload(i, 600 + i % 900) for i in range(3000)]
    path = write(tmp_path, "big.pcap", pcap_header() + b"".join(pcap_record(T0, i, b) for i, b in enumerate(bodies)))
    reader, cols, frames = read_all(path)
    assert reader._released > 3 * (1 << 16)
    assert frames == bodies and cols["frame"].tolist() == list(range(1, 3001))


def _mapped_rss(reader) -> int:
    """Bytes of the reader's mapped file resident in this process (its mapping's Rss in /proc/self/smaps)."""
    start = f"{reader._buf.ctypes.data:x}-"
    with open("/proc/self/smaps") as smaps:
        lines = iter(smaps)
        for line in lines:
            if line.startswith(start):
                for field in lines:
                    if field.startswith("Rss:"):
                        return int(field.split()[1]) * 1024
    raise AssertionError("the capture is not mapped")


def test_small_batches_keep_only_the_last_batches_of_a_mapped_file(tmp_path):
    # analyze's batches keep up to MAP_KEEP_BEHIND_BYTES (96 MiB) mapped behind the walk; small batches (the
    # notebook's packets_frame) keep those of the last MAP_KEEP_BATCHES only, so the process holds a few
    # batches of a 40 MB file, not all of it; every record still reads as written
    bodies = [struct.pack("<I", i) * 1000 for i in range(10_000)]
    path = write(tmp_path, "big.pcap", pcap_header() + b"".join(pcap_record(T0, i, b) for i, b in enumerate(bodies)))
    batch_bytes = 256 * (4000 + 16)
    # the page cache may map a file in folios of up to 2 MiB: one at each end of the window
    bound = (reader_module.MAP_KEEP_BATCHES + 2) * batch_bytes + 2 * (2 << 20)
    reader = open_capture(path, batch_packets=256)
    resident, frames = [], []
    for raw in reader:
        frames += [raw.data[o:o + c].tobytes() for o, c in zip(raw["offset"].tolist(), raw["caplen"].tolist())]
        resident.append(_mapped_rss(reader))
    assert frames == bodies and len(resident) == 40
    assert max(resident) <= bound < len(bodies) * 4000 // 3
    assert reader._released > 25 * batch_bytes


def test_read_captures_continues_frames(tmp_path):
    a = write(tmp_path, "a.pcap", pcap_file(4))
    b = write(tmp_path, "b.pcapng", shb() + idb(1) + epb(0, 5, b"abc") + epb(0, 6, b"de"))
    seen = [(reader.path, raw["frame"].tolist()) for reader, raw in read_captures([a, b], batch_packets=3)]
    assert seen == [(str(a), [1, 2, 3]), (str(a), [4]), (str(b), [5, 6])]


def test_live_pipe_yields_before_the_writer_finishes():
    # the writer holds the pipe open until the reader has its first batch:
    # a reader that waited for the end of the stream would see `closed` set
    head = shb() + idb(1, tsresol=9) + b"".join(epb(0, i, payload(i, 30)) for i in range(3))
    rest = b"".join(epb(0, i, payload(i, 30)) for i in range(3, 6))
    got_first = threading.Event()
    closed = threading.Event()
    rfd, wfd = os.pipe()

    def feed():
        with os.fdopen(wfd, "wb", buffering=0) as out:
            out.write(head)
            got_first.wait(timeout=30)
            out.write(rest)
        closed.set()

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    with os.fdopen(rfd, "rb", buffering=0) as stream:
        batches = iter(open_capture(stream))
        first = next(batches)
        assert not closed.is_set()
        got_first.set()
        frames = [len(first)] + [len(b) for b in batches]
    thread.join()
    assert frames[0] == 3 and sum(frames) == 6


@pytest.mark.parametrize("tsresol, units, ns", [
    (0, T0, T0 * 10**9),                                        # whole seconds
    (3, T0 * 1000 + 5, T0 * 10**9 + 5_000_000),                 # milliseconds
    (12, 10**18 + 123_456_789_012, 10**15 + 123_456_789),     # picoseconds, floored
    (0x80, T0, T0 * 10**9),                                     # 2^0 s
    (0x80 | 10, (T0 << 10) + 512, T0 * 10**9 + 500_000_000),    # 2^-10 s
    (0x80 | 40, (7 << 40) + (1 << 39) + (1 << 20), 7 * 10**9 + 500_000_000 + 953),  # beyond 2^-34
])
def test_pcapng_timestamp_resolutions(tmp_path, tsresol, units, ns):
    data = shb() + idb(1, tsresol=tsresol) + epb(0, units, b"x")
    assert read_all(write(tmp_path, "r.pcapng", data))[1]["ts_ns"].tolist() == [ns]


# ---- times beyond int64 nanoseconds -------------------------------------------
INT64_MAX = (1 << 63) - 1


def exact_ns(units: int, tsresol: int, offset_s: int) -> int:
    """The true time in ns (Python integers), floored like the reader; 2^-k beyond 2^-34 as walk.ts_to_ns drops bits."""
    if tsresol & 0x80:
        k = tsresol & 0x7F
        secs, frac = units >> k, units & ((1 << k) - 1)
        fine = ((frac >> (k - 34)) * 10**9) >> 34 if k > 34 else (frac * 10**9) >> k
        return (secs + offset_s) * 10**9 + fine
    return units * 10**9 // 10**tsresol + offset_s * 10**9


TIME_CASES = [
    # (tsresol, tsoffset s, units, fits)
    (9, None, INT64_MAX, True),                                  # the last nanosecond int64 holds
    (9, None, 1 << 63, False),
    (9, None, (1 << 64) - 1, False),
    (6, None, INT64_MAX // 1000, True),                          # microseconds up to 2262-04-11
    (6, None, INT64_MAX // 1000 + 1, False),
    (12, None, (1 << 64) - 1, True),                             # picoseconds never overflow
    (0x80 | 30, None, (9_223_372_036 << 30) + (1 << 29), True),  # 2^-30 s: .5 s past the last whole second
    (0x80 | 30, None, (9_223_372_036 << 30) + (918 << 20), False),  # .896 s: past .854775807
    (0x80 | 40, None, (1 << 64) - 1, True),                      # 2^24 s
    (0, None, 9_223_372_037, False),                             # whole seconds
    (9, 3600, INT64_MAX - 3600 * 10**9, True),                   # the offset brings it exactly to the end
    (9, 3600, INT64_MAX - 3600 * 10**9 + 1, False),
    (6, -10**10, 0, False),                                      # before 1677
    (0, -(1 << 62), (1 << 62) + 1000, True),                     # offset beyond int64 ns, sum fits: exact
    (9, -9_223_372_037, 145_224_193, True),                      # -(2^63) + 1 ns
    (9, -9_223_372_037, 145_224_192, False),                     # -(2^63) itself: pandas' NaT, refused
    (9, (1 << 63) - 1, 0, False),                                # the largest if_tsoffset
    (0, -(1 << 63), (1 << 63) + 5, True),                        # the smallest, with units past 2^63: 5 s
]


@pytest.mark.parametrize("tsresol, offset, units, fits", TIME_CASES)
def test_pcapng_times_beyond_int64_saturate_with_one_warning(tmp_path, tsresol, offset, units, fits):
    assert (abs(exact_ns(units, tsresol, offset or 0)) <= INT64_MAX) == fits
    # the case's time twice (one warning for both), then the interface's time zero
    blocks = [epb(0, u, bytes([65 + i])) for i, u in enumerate((units, units, 0))]
    head = shb() + idb(1, tsresol=tsresol, tsoffset=offset)
    path = write(tmp_path, "t.pcapng", head + b"".join(blocks))
    reader, cols, frames = read_all(path)
    expect, first_bad = [], None
    for i, u in enumerate((units, units, 0)):
        true = exact_ns(u, tsresol, offset or 0)
        if abs(true) > INT64_MAX:
            true = INT64_MAX if true > 0 else -INT64_MAX
            first_bad = i if first_bad is None else first_bad
        expect.append(true)
    assert frames == [b"A", b"B", b"C"] and cols["ts_ns"].tolist() == expect
    if first_bad is None:
        assert reader.warnings == []
    else:
        at = len(head) + sum(len(b) for b in blocks[:first_bad])
        assert reader.warnings == [f"{path} at byte {at}: packet time outside the years 1677-2262 that "
                                   "64-bit nanoseconds hold; this and any other such packet keep their "
                                   "place with the time saturated at the nearest end"]


def test_pcap_times_always_fit(tmp_path):
    # 32-bit seconds and fraction: the largest of each is 2106 plus 71 minutes, far inside int64 ns
    data = pcap_header() + pcap_record(0xFFFFFFFF, 0xFFFFFFFF, b"x")
    nano = pcap_header(nano=True) + pcap_record(0xFFFFFFFF, 0xFFFFFFFF, b"y")
    for name, blob, unit in (("us.pcap", data, 1000), ("ns.pcap", nano, 1)):
        reader, cols, _ = read_all(write(tmp_path, name, blob))
        assert cols["ts_ns"].tolist() == [0xFFFFFFFF * 10**9 + 0xFFFFFFFF * unit]
        assert reader.warnings == []

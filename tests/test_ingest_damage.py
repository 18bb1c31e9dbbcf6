"""No damage is silent: what `info` (through the engine, as a user runs it) says of cut and broken captures.

A capture damaged before its first packet once read as a clean empty one
(packets 0, warnings [], error null, format null, exit 0). Every cut of
small real captures, at every byte, and each named kind of damage built
with struct must give a warning naming the byte offset or an error, with
the format set once the magic is known.
"""
from __future__ import annotations

import lzma
import struct
import zlib

import pytest
import zstandard

from detector.commands import info_one
from detector.schema import MAX_CAPLEN
from tests.test_ingest import T0, block, epb, idb, option, pcap_header, pcap_record, shb

# Small real captures: classic pcap in micro- and nanoseconds, pcapng with one or several interfaces.
SWEPT = [
    "arp-scan/testdata/pkt-diff-frame-addr.pcap",
    "tcpdump/tests/tcp-handshake-nano.pcap",
    "zeek/testing/btest/Traces/snap-arp.pcapng",
    "networklessons/packet-captures/vxlan-spine-two-leafs-multicast-data-plane.pcapng",
    "ndpi/tests/cfgs/default/pcap/nano.pcapng",
]
PCAPNG_PACKET_BLOCKS = {2, 3, 6}
SHB_TYPE = 0x0A0D0D0A


def _layout(data: bytes) -> tuple[int, list[tuple[int, int, bool]]]:
    """(end of the file header, [(start, end, is a packet)] of every record or block after it).

    Walked here by the lengths alone, independently of the reader, on an undamaged file.
    """
    if data[:4] == struct.pack("<I", SHB_TYPE):
        order = "<" if struct.unpack_from("<I", data, 8)[0] == 0x1A2B3C4D else ">"
        header = struct.unpack_from(order + "I", data, 4)[0]
        pos, blocks = header, []
        while pos < len(data):
            btype = struct.unpack_from(order + "I", data, pos)[0]
            if btype == SHB_TYPE:
                order = "<" if struct.unpack_from("<I", data, pos + 8)[0] == 0x1A2B3C4D else ">"
            length = struct.unpack_from(order + "I", data, pos + 4)[0]
            blocks.append((pos, pos + length, btype in PCAPNG_PACKET_BLOCKS))
            pos += length
        return header, blocks
    order = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    pos, records = 24, []
    while pos < len(data):
        end = pos + 16 + struct.unpack_from(order + "I", data, pos + 8)[0]
        records.append((pos, end, True))
        pos = end
    return 24, records


@pytest.mark.parametrize("name", SWEPT)
def test_every_cut_of_a_real_capture_is_told(captures_real, tmp_path, name):
    data = (captures_real / name).read_bytes()
    fmt = "pcapng" if name.endswith(".pcapng") else "pcap"
    header, blocks = _layout(data)
    assert blocks and blocks[-1][1] == len(data)
    full, _ = info_one(captures_real / name)
    assert (full["format"], full["warnings"], full["error"]) == (fmt, [], None)
    assert full["packets"] == sum(is_packet for _, _, is_packet in blocks) > 0
    path = tmp_path / "cut"
    for cut in range(1, len(data)):
        path.write_bytes(data[:cut])
        record, _ = info_one(path)
        where = f"cut at byte {cut} of {len(data)}"
        if cut < header:
            assert record["error"] and record["packets"] == 0, where
            assert record["format"] == (fmt if cut >= 4 else None), where
            continue
        assert (record["format"], record["error"]) == (fmt, None), where
        complete = [b for b in blocks if b[1] <= cut]
        assert record["packets"] == sum(is_packet for _, _, is_packet in complete), where
        if cut == header or any(end == cut for _, end, _ in complete):
            # a cut between records is a shorter capture, indistinguishable from one written so
            assert record["warnings"] == [], where
        else:
            start = complete[-1][1] if complete else header
            assert len(record["warnings"]) == 1, where
            assert record["warnings"][0].startswith(f"{path} at byte {start}: "), where


def _compressed_in_pieces(compression: str, pieces: list[bytes]) -> tuple[bytes, list[int]]:
    """One compressed stream of `pieces`, and the compressed offsets where each piece ends whole.

    gzip and zstd flush a compressed block after every piece, so a cut there
    decompresses to whole records and only the missing end marker tells that
    it is cut; xz (no such flush in lzma) is compressed in one go.
    """
    if compression == "xz":
        return lzma.compress(b"".join(pieces)), []
    if compression == "gzip":
        packer = zlib.compressobj(wbits=31)      # 16 + 15: a gzip header and trailer (zlib manual)
        flush, finish = zlib.Z_FULL_FLUSH, zlib.Z_FINISH
    else:
        packer = zstandard.ZstdCompressor().compressobj()
        flush, finish = zstandard.COMPRESSOBJ_FLUSH_BLOCK, zstandard.COMPRESSOBJ_FLUSH_FINISH
    out, ends = b"", []
    for piece in pieces:
        out += packer.compress(piece) + packer.flush(flush)
        ends.append(len(out))
    return out + packer.flush(finish), ends


@pytest.mark.parametrize("compression", ["gzip", "xz", "zstd"])
def test_every_cut_of_a_compressed_capture_is_told(captures_real, tmp_path, compression):
    """A compressed stream cut anywhere lacks its end marker: damage even where the packets end whole."""
    raw = (captures_real / SWEPT[2]).read_bytes()
    header, blocks = _layout(raw)
    data, ends = _compressed_in_pieces(compression, [raw[:header]] + [raw[a:b] for a, b, _ in blocks])
    full, _ = info_one(_write(tmp_path / "full", data))
    assert (full["compression"], full["packets"], full["warnings"]) == (compression, 4, [])
    path = tmp_path / "cut"
    for cut in range(1, len(data)):
        record, _ = info_one(_write(path, data[:cut]))
        where = f"cut at byte {cut} of {len(data)}"
        told = record["error"] or "".join(record["warnings"][:1])
        assert told.startswith(f"{path} at byte "), where
        if cut in ends:
            # whole records, then the end of the stream where more was announced
            complete = ends.index(cut)
            assert record["packets"] == sum(p for _, _, p in blocks[:complete]), where
            assert record["format"] == "pcapng" and record["compression"] == compression, where
            assert record["warnings"] == [f"{path} at byte {header + sum(b - a for a, b, _ in blocks[:complete])}: "
                                          f"{compression} error: Compressed file ended before the "
                                          f"end-of-stream marker was reached"], where


def _write(path, data: bytes):
    path.write_bytes(data)
    return path



# ---- each kind of damage before the first packet, built with struct --------------------
def _pcap(nano: bool, first: bytes) -> bytes:
    return pcap_header(nano=nano) + first


PNG = shb()                               # 28 bytes
IDB = idb(1, 0, tsresol=9, name="eth0")   # 40 bytes, at byte 28
EPB = epb(0, T0 * 10**9, b"p" * 60)       # at byte 68

DAMAGED_BEFORE_THE_FIRST_PACKET = [
    ("pcap: cut inside the first record's header",
     _pcap(False, pcap_record(T0, 0, b"x" * 60)[:10]), "pcap",
     "at byte 24: capture cut short: 10 bytes of an incomplete last record"),
    ("pcap: cut inside the first record's packet",
     _pcap(False, pcap_record(T0, 0, b"x" * 60)[:40]), "pcap",
     "at byte 24: capture cut short: 40 bytes of an incomplete last record"),
    # caplen 100 > len 80 > the 30 bytes that follow the record header
    ("nanosecond pcap: first record with caplen > len > the bytes left",
     _pcap(True, struct.pack("<IIII", T0, 999_999_999, 100, 80) + b"y" * 30), "pcap",
     "at byte 24: capture cut short: 46 bytes of an incomplete last record"),
    ("pcapng: cut inside the first interface block",
     PNG + IDB[:20], "pcapng", "at byte 28: capture cut short: 20 bytes of an incomplete last block"),
    ("pcapng: cut inside the first interface block's header",
     PNG + IDB[:6], "pcapng", "at byte 28: capture cut short: 6 bytes of an incomplete last block"),
    ("pcapng: cut inside the first packet block",
     PNG + IDB + EPB[:50], "pcapng", "at byte 68: capture cut short: 50 bytes of an incomplete last block"),
    ("pcapng: a packet block naming an interface that does not exist",
     PNG + IDB + epb(1, T0 * 10**9, b"p" * 60), "pcapng",
     "at byte 68: packet block names interface 1, not described in this section"),
    ("pcapng: a packet block before any interface block",
     PNG + EPB, "pcapng", "at byte 28: packet block names interface 0, not described in this section"),
    ("pcapng: an interface option whose length runs past its block",
     PNG + block(1, struct.pack("<HHI", 1, 0, 0) + option(2, b"eth0") + struct.pack("<HH", 9, 64)) + EPB,
     "pcapng",
     "at byte 28: interface description block damaged: option 9 of length 64 runs past the end of its block"),
]


@pytest.mark.parametrize("data, fmt, warning", [case[1:] for case in DAMAGED_BEFORE_THE_FIRST_PACKET],
                         ids=[case[0] for case in DAMAGED_BEFORE_THE_FIRST_PACKET])
def test_damage_before_the_first_packet_is_told(tmp_path, data, fmt, warning):
    path = tmp_path / "damaged"
    path.write_bytes(data)
    record, text = info_one(path)
    assert (record["format"], record["packets"], record["error"]) == (fmt, 0, None)
    assert record["warnings"] == [f"{path} {warning}"]
    assert f"Warning:       {path} {warning}\n" in text


def test_zstd_frames_skippable_frames_and_checksums_read_clean(tmp_path):
    """The frame follower must not call a whole stream cut: several frames, with and without a
    content size or checksum (as the zstd tool writes them), and a skippable frame between."""
    records = [pcap_record(T0 + i, i, bytes([i]) * (50 + i)) for i in range(5)]
    records.append(pcap_record(T0 + 5, 0, bytes(MAX_CAPLEN)))     # holds a 128 KiB block of one byte: RLE
    with_size = zstandard.ZstdCompressor(write_checksum=True).compress(pcap_header() + b"".join(records[:3]))
    streamed = zstandard.ZstdCompressor(write_content_size=False, level=19).compressobj()
    streamed = streamed.compress(b"".join(records[3:])) + streamed.flush()
    skippable = struct.pack("<II", 0x184D2A5E, 5) + b"notes"
    data = with_size + skippable + streamed
    record, _ = info_one(_write(tmp_path / "frames.pcap.zst", data))
    assert (record["compression"], record["packets"], record["warnings"]) == ("zstd", 6, [])
    # a cut inside the skippable frame or at the start of the next: 3 whole records, and the cut is told
    for cut in (len(with_size) + 6, len(with_size) + len(skippable) + 2):
        record, _ = info_one(_write(tmp_path / "cut.pcap.zst", data[:cut]))
        assert record["packets"] == 3
        assert record["warnings"] == [f"{tmp_path / 'cut.pcap.zst'} at byte {24 + sum(map(len, records[:3]))}: "
                                      f"zstd error: Compressed file ended before the end-of-stream marker was reached"]

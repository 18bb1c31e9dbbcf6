"""Frames on demand (detector.frames, detector.ingest.index): frames read alone at their offsets agree with tshark,
byte for byte, in time and length, on real captures of several formats and link types; write_pcap writes them so
tshark reads them back the same; the record index reads every record as the reader does and cuts a capture into
byte ranges that read as captures of their own."""
from __future__ import annotations

import gzip
import itertools
import json
import os
import struct

import numpy as np
import pytest

import detector
from detector.errors import CaptureError, UsageError
from detector.ingest import CaptureReader
from detector.ingest import index as index_module
from detector.ingest.index import build_index
from detector.units import NS
from tests._real import manifest_rows
from tests.test_ingest import block, epb, idb, multi_section_capture, payload, shb, spb

CAPTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "captures")
# real captures of each kind the index must read alone: pcapng of many interfaces and link types (ns), of two
# interfaces (us); classic pcap big-endian, in nanoseconds, and of the link types the decoder reads; gzip
REAL = [
    "zeek/testing/btest/Traces/ldap/gap-data-missing.pcapng",          # 126 interfaces: ether, sll, mpacket
    "ndpi/tests/cfgs/default/pcap/stun_dtls_rtp_unidir.pcapng",        # 2 interfaces
    "tcpdump/tests/pptp.pcap",                                         # big-endian
    "tcpdump/tests/tcp-handshake-nano.pcap",                           # nanoseconds, Linux SLL
    "suricata-verify/tests/decode-sll2-01/input.pcap",                 # SLL2
    "libpcap/tests/filter/wpa-Induction.pcap",                         # radiotap
    "ndpi/tests/cfgs/default/pcap/nats.pcap",                          # BSD null
    "packetlife/pcaps/PPP.cap",                                        # PPP
    "suricata-verify/tests/detect-ipopts/input.pcap",                  # raw IP
    "scapy/test/pcaps/tls_tcp_frag_withnss.pcap.gz",                   # gzip
]
BUNDLED = ["echo-loop-rip-ipv6-vlan.pcap", "benign-office.pcapng", "loss-interface-drops.pcapng"]


def _tshark_frames(tshark, path, numbers) -> dict[int, dict]:
    """tshark's view of the frames `numbers` of `path`: bytes, lengths, time, interface, protocols."""
    wanted = ",".join(str(n) for n in sorted(set(numbers)))
    out = json.loads(tshark.run(path, "-Y", f"frame.number in {{{wanted}}}", "-T", "json", "-x", "-j", "frame"))
    frames = {}
    for packet in out:
        layers = packet["_source"]["layers"]
        frame = layers["frame"]
        frames[int(frame["frame.number"])] = {
            "data": bytes.fromhex(layers["frame_raw"][0]), "len": int(frame["frame.len"]),
            "time": frame["frame.time_epoch"], "interface": frame.get("frame.interface_id"),
            "protocols": frame["frame.protocols"]}
    return frames


def _epoch(ts_ns: int) -> str:
    seconds, ns = divmod(ts_ns, NS)
    return f"{seconds}.{ns:09d}"


def _sample(count: int) -> list[int]:
    """Frames to ask for: all of a small capture, else both ends and the middle, out of order, one twice."""
    if count <= 40:
        return list(range(count, 0, -1))
    return [count // 2, 1, count, 2, count // 3, count - 1, count // 2]


def _check_against_tshark(tshark, path, tmp_path):
    capture = detector.open(path)
    count = capture._frames.count
    asked = _sample(count)
    frames = capture.frames(asked)
    assert frames.numbers == asked
    expected = _tshark_frames(tshark, path, asked)
    assert sorted(expected) == sorted(set(asked))
    pcapng = open(path, "rb").read(4) == b"\x0a\x0d\x0d\x0a"
    for frame in frames:
        seen = expected[frame.number]
        assert frame.data == seen["data"], frame.number
        assert (frame.wirelen, _epoch(frame.ts_ns)) == (seen["len"], seen["time"]), frame.number
        if pcapng:
            assert str(frame.interface) == seen["interface"], frame.number
    # written for Wireshark: tshark reads back the same bytes, lengths, times and link layer (the link type kept)
    out = tmp_path / "frames.pcap"
    written = capture.write_pcap(frames, out)
    interfaces = {(f.interface, f.linktype) for f in frames}
    assert written == ("pcapng" if len(interfaces) > 1 else "pcap")
    back = _tshark_frames(tshark, out, range(1, len(frames) + 1))
    for i, frame in enumerate(frames, 1):
        seen = expected[frame.number]
        assert back[i]["data"] == frame.data and back[i]["len"] == seen["len"] and back[i]["time"] == seen["time"]
        # the same link layer (what a later layer dissects to can depend on the frames around it: TCP reassembly)
        link = back[i]["protocols"].split(":")[0]
        assert link == seen["protocols"].split(":")[0], (frame.number, back[i]["protocols"], seen["protocols"])
    if written == "pcapng":
        # frames of different interfaces stay on different interfaces
        pairs = {(frames[i - 1].interface, frames[i - 1].linktype): back[i]["interface"] for i in back}
        assert len(set(pairs.values())) == len(interfaces)
    return frames


@pytest.mark.parametrize("name", REAL)
def test_frames_agree_with_tshark_on_real_captures(tshark, captures_real, tmp_path, name):
    _check_against_tshark(tshark, captures_real / name, tmp_path)


@pytest.mark.parametrize("name", BUNDLED)
def test_frames_agree_with_tshark_on_bundled_captures(tshark, tmp_path, name):
    frames = _check_against_tshark(tshark, os.path.join(CAPTURES, name), tmp_path)
    # scapy's packet is the same bytes, at the frame's time, with its length on the wire
    packet = frames[0].packet
    assert bytes(packet) == frames[0].data
    assert int(packet.time * NS) == frames[0].ts_ns and packet.wirelen == frames[0].wirelen
    assert packet.haslayer("Ether")
    assert len(frames.packets) == len(frames)
    table = frames.to_frame()
    assert table["frame"].tolist() == frames.numbers and (table["caplen"] > 0).all()


def test_frames_of_several_files_continue_the_numbering(tshark):
    first, second = (os.path.join(CAPTURES, name) for name in BUNDLED[:2])
    count = len(build_index(first))
    capture = detector.open(first, second)
    frames = capture.frames([count, count + 1])
    assert frames[0].source == first and frames[1].source == second
    assert frames[1].data == _tshark_frames(tshark, second, [1])[1]["data"]


@pytest.mark.parametrize("bad", [0, -1, 10 ** 9, "3", 2.5, [1, "x"]])
def test_a_bad_frame_number_is_a_clear_error(bad):
    capture = detector.open(os.path.join(CAPTURES, "benign-office.pcapng"))
    with pytest.raises(UsageError, match=r"frame|frames"):
        capture.frames(bad if isinstance(bad, list) else [bad])
    if isinstance(bad, int):
        with pytest.raises(UsageError, match=r"numbered 1 to 104"):
            capture.frames([1, bad])
    with pytest.raises(UsageError, match="no frames"):
        capture.write_pcap([], "never.pcap")


def test_frames_are_read_at_their_offsets_not_by_reading_the_file_again(monkeypatch, tmp_path):
    path = tmp_path / "c.pcapng"
    path.write_bytes(open(os.path.join(CAPTURES, "benign-office.pcapng"), "rb").read())
    capture = detector.open(path)
    first = capture.frames([50])
    # once indexed, no reader walks the file: only the record at its offset is read
    monkeypatch.setattr(index_module, "CaptureReader", None)
    assert capture.frames([50]) == first
    monkeypatch.undo()
    # a file rewritten since is indexed again, never read at stale offsets
    os.utime(path, ns=(1, 1))
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) - 200)
    assert capture._frames.count == len(_records(str(path))) < 104


def _records(source) -> list[tuple]:
    """(frame, ts_ns, wirelen, linktype, iface, bytes) of every record, as CaptureReader reads them."""
    with CaptureReader(source) as reader:
        return _read(reader)


def _read(reader) -> list[tuple]:
    """The records of an open reader as _records lists them."""
    out = []
    for raw in reader:
        for i in range(len(raw)):
            at = int(raw["offset"][i])
            out.append((int(raw["frame"][i]), int(raw["ts_ns"][i]), int(raw["wirelen"][i]),
                        int(raw["linktype"][i]), int(raw["iface"][i]),
                        raw.data[at:at + int(raw["caplen"][i])].tobytes()))
    return out


def _indexed(index) -> list[tuple]:
    return [(index.first_frame + row, *record) for row, record in enumerate(index.read(range(len(index))))]


def _ranges(index, parts) -> list[tuple]:
    out = []
    for part in index.byte_ranges(parts):
        with part.reader() as reader:
            out += _read(reader)
    return out


def _spb_capture(big: bool) -> bytes:
    """Two sections, the second in the other byte order, with simple packet blocks between timed ones."""
    first = shb() + idb(linktype=1, tsresol=9) + epb(0, 5 * NS, payload(0, 60)) + spb(payload(1, 42), 42) \
        + idb(linktype=101) + epb(1, 7_000_000, payload(2, 30))
    second = shb(big=not big) + idb(linktype=113, snaplen=20, big=not big) + spb(payload(3, 50), 50, big=not big) \
        + epb(0, 9_000_000, payload(4, 44), big=not big) + spb(payload(5, 24), 24, big=not big)
    return first + second


@pytest.mark.parametrize("kind", ["sections", "simple-packet-blocks", "gzip"])
def test_the_index_reads_each_record_alone_as_the_reader_reads_it(tmp_path, kind):
    if kind == "sections":
        data = multi_section_capture()[0]
    else:
        data = _spb_capture(big=False)
    path = tmp_path / "c.pcapng"
    path.write_bytes(gzip.compress(data) if kind == "gzip" else data)
    index = build_index(path)
    expected = _records(str(path))
    assert len(expected) >= 3
    assert _indexed(index) == expected
    if kind == "simple-packet-blocks":
        # a simple packet block's time is the record's before it: kept by the index, read without that record
        assert sorted(index.spb_times) == [2, 4, 6]
        assert index.read([3])[0][0] == expected[2][1] and index.read([5])[0][0] == expected[4][1]
    if kind == "gzip":
        assert index.compression == "gzip" and index.offsets[0] > 0
    for parts in (2, 3, len(expected)):
        assert _ranges(index, parts) == expected


def test_the_index_stops_where_the_reader_stops_with_its_warning(tmp_path):
    data = shb() + idb() + b"".join(epb(0, i, payload(i, 40)) for i in range(4))
    damaged = data + block(6, struct.pack("<IIIII", 7, 0, 0, 4, 4) + b"abcd")     # an undescribed interface
    path = tmp_path / "d.pcapng"
    path.write_bytes(damaged)
    index = build_index(path)
    with CaptureReader(str(path)) as reader:
        count = sum(len(raw) for raw in reader)
    assert len(index) == count == 4
    assert index.warnings == reader.warnings and "names interface 7" in index.warnings[0]


@pytest.mark.parametrize("name", ["benign-office.pcapng", "echo-loop-rip-ipv6-vlan.pcap"])
def test_byte_ranges_of_a_capture_read_as_the_whole(name):
    path = os.path.join(CAPTURES, name)
    index = build_index(path)
    ranges = index.byte_ranges(4)
    assert len(ranges) == 4 and ranges[0].start == index.offsets[0]
    assert [r.first_frame for r in ranges] == sorted(r.first_frame for r in ranges)
    assert sum(r.frames for r in ranges) == len(index)
    sizes = np.array([r.stop - r.start for r in ranges])
    assert sizes.max() < 2 * sizes.min()     # about equal bytes
    assert all(a.stop == b.start for a, b in itertools.pairwise(ranges))
    assert _ranges(index, 4) == _records(path)


def test_every_real_capture_is_indexed_as_the_reader_reads_it(captures_real):
    # every file of ../shared/captures-real (pcap, pcapng, compressed, damaged): each record read alone at its
    # offset is the reader's record, the index warns as the reader does, and 3 byte ranges re-read as the whole
    checked = 0
    for row in manifest_rows():
        path = captures_real / row["path"]
        try:
            index = build_index(path)
        except CaptureError:
            continue        # a header the reader refuses too (tests/test_ingest*)
        expected = _records(str(path))
        with CaptureReader(str(path)) as reader:
            for _ in reader:
                pass
        assert index.warnings == reader.warnings, path
        assert _indexed(index) == expected, path
        assert _ranges(index, 3) == expected, path
        checked += 1
    assert checked > 1500

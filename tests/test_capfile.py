"""The capture-file module: the magic the reader goes by, and the one writer that analyze's evidence and watch's
ring both write through (the same frames give the same bytes, read back by tshark and by our reader)."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from detector import capfile
from detector.capfile import Magic, Segment, capture_format, file_magic, write_capture
from detector.decode import decode
from detector.findings import Finding
from detector.ingest import open_capture
from detector.live.evidence import EvidenceRecorder
from detector.live.ring import PacketRing
from detector.output import OutputDir
from detector.report.evidence import write_evidence
from detector.schema import LINKTYPE_LINUX_SLL

CAPTURES = Path(__file__).resolve().parents[1] / "captures"


@pytest.mark.parametrize("head,magic", [
    (b"\xd4\xc3\xb2\xa1", Magic("pcap", False, False)),
    (b"\xa1\xb2\xc3\xd4", Magic("pcap", True, False)),
    (b"\x4d\x3c\xb2\xa1", Magic("pcap", False, True)),
    (b"\xa1\xb2\x3c\x4d", Magic("pcap", True, True)),
    (b"\x0a\x0d\x0d\x0a", Magic("pcapng", False, False)),
    (b"\xa1\xb2\xc3\xd5", None),           # one bit off the microsecond magic
    (b"\x1f\x8b\x08\x00", None),           # gzip: ByteSource's business, not a capture format
])
def test_file_magic(head, magic):
    assert file_magic(head) == magic


def _segments(path: Path) -> list[Segment]:
    with open_capture(path, batch_packets=500) as reader:
        return [Segment.of(decode(raw)) for raw in reader]


def _every_frame_as_evidence(capture: Path, folder: Path) -> Path:
    """analyze's evidence writer, given one finding that lists every frame of `capture`: the file it wrote."""
    frames = [int(f) for seg in _segments(capture) for f in seg.frame]
    finding = Finding("echo-loop", "high", "every frame", "every frame", evidence={"evidence_frames": frames})
    with OutputDir(folder, rule_ids=["echo-loop"]) as out:
        write_evidence([str(capture)], [finding], out)
    assert finding.evidence["evidence_packets"] == len(frames)
    return folder / finding.evidence_pcap


def _every_frame_from_the_ring(capture: Path, folder: Path) -> tuple[Path, int]:
    """watch's evidence writer, for an alert while the ring holds every frame of `capture`: (its file, packets)."""
    ring = PacketRing(seconds=1e9)
    for segment in _segments(capture):
        ring.add(segment)
    recorder = EvidenceRecorder(OutputDir(folder, rule_ids=["echo-loop"], staged=False), ring)
    recorder.start("echo-loop-1", "evidence/echo-loop-1.pcap")
    recorder.close()
    return folder / "evidence" / "echo-loop-1.pcap", recorder.written["echo-loop-1"]


@pytest.fixture()
def packs(monkeypatch) -> list[int]:
    """Records packed by capfile's compiled writer, one entry per call."""
    calls = []
    pack = capfile._pack_records

    def counted(*args):
        calls.append(int(args[6].sum()))
        return pack(*args)
    monkeypatch.setattr(capfile, "_pack_records", counted)
    return calls


@pytest.mark.parametrize("name", ["echo-loop-rip-ipv6-vlan.pcap", "pmtud-blackhole-ipv4.pcapng"])
def test_evidence_and_ring_write_the_same_bytes(tmp_path, tshark, packs, name):
    capture = CAPTURES / name
    evidence = _every_frame_as_evidence(capture, tmp_path / "analyze")
    packed_by_analyze = sum(packs)
    ring, written = _every_frame_from_the_ring(capture, tmp_path / "watch")
    assert packed_by_analyze == written == sum(packs) - packed_by_analyze
    assert evidence.suffix == ".pcap"
    assert evidence.read_bytes() == ring.read_bytes()
    rows = tshark.fields(evidence, "frame.time_epoch", "frame.len")
    assert len(rows) == written and rows == tshark.fields(capture, "frame.time_epoch", "frame.len")


def test_frames_of_several_link_types_give_the_same_pcapng(tmp_path, tshark):
    segments = _segments(CAPTURES / "echo-loop-rip-ipv4.pcapng")
    for seg in segments:
        seg.linktype = seg.linktype.copy()
        seg.linktype[::2] = LINKTYPE_LINUX_SLL      # as if every other frame came from a Linux cooked capture
    mixed = tmp_path / "mixed.pcapng"
    write_capture(mixed, segments)
    assert capture_format(segments) == "pcapng"
    evidence = _every_frame_as_evidence(mixed, tmp_path / "analyze")
    ring, _written = _every_frame_from_the_ring(mixed, tmp_path / "watch")
    assert evidence.suffix == ".pcapng"
    assert evidence.read_bytes() == ring.read_bytes() == mixed.read_bytes()
    # one interface per link type, in link-type order: Ethernet (1) is interface 0, Linux SLL (113) interface 1
    interfaces = [row[0] for row in tshark.fields(evidence, "frame.interface_id")]
    assert interfaces == ["1" if i % 2 == 0 else "0" for i in range(sum(len(seg) for seg in segments))]


def test_a_time_outside_classic_pcap_is_clamped_and_the_bytes_kept(tmp_path):
    frame = bytes(range(60))
    segment = Segment.of_records([1, 2], [(-1, 60, 1, frame), ((1 << 32) * 1_000_000_000 + 7, 60, 1, frame)])
    path = tmp_path / "clamped.pcap"
    write_capture(path, [segment])
    data = path.read_bytes()
    first, second = data[24:24 + 16 + 60], data[24 + 16 + 60:]
    assert struct.unpack("<IIII", first[:16]) == (0, 0, 60, 60) and first[16:] == frame
    assert struct.unpack("<IIII", second[:16]) == (0xFFFFFFFF, 7, 60, 60) and second[16:] == frame

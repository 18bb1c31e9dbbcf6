"""The packet ring, evidence files and the period's traffic series, on real decoded batches."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from detector.capfile import Segment, write_capture
from detector.decode import decode
from detector.ingest import open_capture
from detector.live.evidence import EvidenceRecorder
from detector.live.period import TrafficSeries
from detector.live.ring import PacketRing
from detector.output import OutputDir
from detector.report.evidence import SERIES_BINS_MAX

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
LOOP = CAPTURES / "echo-loop-rip-ipv4.pcapng"      # 6,532 frames over 3.2 s


def batches(path: Path, size: int = 500) -> list:
    with open_capture(path, batch_packets=size) as reader:
        return [decode(raw) for raw in reader]


def records(path: Path) -> list[tuple[int, bytes, int, int]]:
    """(time ns, bytes, wire length, link type) of every record, read back with the project's reader."""
    out = []
    for batch in batches(path):
        for i in range(len(batch)):
            out.append((int(batch["ts_ns"][i]), batch.frame_bytes(i), int(batch["wirelen"][i]),
                        int(batch["linktype"][i])))
    return out


def test_segment_owns_its_bytes():
    batch = batches(LOOP)[0]
    segment = Segment.of(batch)
    assert not np.shares_memory(segment.data, batch.data)
    assert [segment.frame_bytes(i) for i in range(len(segment))] == [batch.frame_bytes(i) for i in range(len(batch))]


def test_ring_keeps_the_last_seconds():
    ring = PacketRing(seconds=1.0)
    parts = batches(LOOP)
    for batch in parts:
        ring.add(Segment.of(batch))
    kept = ring.snapshot()
    newest = max(int(b["ts_ns"].max()) for b in parts)
    assert ring.newest_ns == newest
    # every segment but the oldest lies wholly within the span; the oldest reaches into it
    assert all(int(s.ts_ns.min()) >= newest - 1_000_000_000 for s in kept[1:])
    assert kept[0].last_ns >= newest - 1_000_000_000
    assert ring.packets == sum(len(s) for s in kept) < sum(len(b) for b in parts)
    assert ring.bytes == sum(s.nbytes for s in kept)


def test_ring_byte_cap_shortens_the_span():
    parts = [Segment.of(b) for b in batches(LOOP)]
    cap = sum(s.nbytes for s in parts[-3:])
    ring = PacketRing(seconds=3600.0, max_bytes=cap)
    for segment in parts:
        ring.add(segment)
    assert ring.bytes <= cap
    assert [id(s) for s in ring.snapshot()] == [id(s) for s in parts[-3:]]


def test_written_capture_holds_the_frames_byte_for_byte(tmp_path):
    parts = [Segment.of(b) for b in batches(LOOP)]
    path = tmp_path / "ring.pcap"
    assert write_capture(path, parts) == 6532
    assert records(path) == records(LOOP)
    assert not list(tmp_path.glob(".*"))     # nothing left aside


def test_tshark_reads_the_written_capture(tshark, tmp_path):
    path = tmp_path / "ring.pcap"
    write_capture(path, [Segment.of(b) for b in batches(LOOP)])
    assert len(tshark.fields(path, "frame.len")) == 6532


def test_written_capture_from_a_time_on(tmp_path):
    parts = [Segment.of(b) for b in batches(LOOP)]
    since = int(np.median(np.concatenate([s.ts_ns for s in parts])))
    path = tmp_path / "tail.pcap"
    written = write_capture(path, parts, since_ns=since)
    expected = [r for r in records(LOOP) if r[0] >= since]
    assert written == len(expected) and records(path) == expected


def test_mixed_link_types_are_written_as_pcapng(tmp_path):
    segment = Segment.of(batches(LOOP)[0])
    segment.linktype = segment.linktype.copy()
    segment.linktype[::2] = 113        # as if half came from a Linux cooked capture
    path = tmp_path / "mixed.pcap"
    write_capture(path, [segment])
    assert path.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"
    back = records(path)
    assert [r[3] for r in back] == segment.linktype.tolist()
    assert [r[1] for r in back] == [segment.frame_bytes(i) for i in range(len(segment))]


def test_evidence_joins_alerts_and_includes_what_follows(tmp_path):
    parts = [Segment.of(b) for b in batches(LOOP)]
    ring = PacketRing(seconds=30.0)
    for segment in parts[:5]:
        ring.add(segment)
    recorder = EvidenceRecorder(OutputDir(tmp_path, ["echo-loop", "rip-trigger"], staged=False), ring, after_s=10.0)
    first, second = tmp_path / "evidence" / "echo-loop-1-x.pcap", tmp_path / "evidence" / "rip-trigger-1-x.pcap"
    recorder.start("echo-loop-1", "evidence/echo-loop-1-x.pcap", now=100.0)
    recorder.start("rip-trigger-1", "evidence/rip-trigger-1-x.pcap", now=100.5)
    for segment in parts[5:8]:
        ring.add(segment)
        recorder.feed(segment, now=101.0)
    assert not first.exists()              # still collecting
    recorder.tick(now=110.0)
    recorder.close()
    expected = sum(len(s) for s in parts[:8])
    assert recorder.written == {"echo-loop-1": expected, "rip-trigger-1": expected}
    assert first.read_bytes() == second.read_bytes()
    assert os.stat(first).st_ino == os.stat(second).st_ino      # one file, two names
    assert len(records(first)) == expected
    for segment in parts[8:]:
        recorder.feed(segment, now=120.0)  # nothing is being collected: ignored


def test_evidence_is_written_at_close_without_waiting(tmp_path):
    parts = [Segment.of(b) for b in batches(LOOP)]
    ring = PacketRing(seconds=30.0)
    ring.add(parts[0])
    recorder = EvidenceRecorder(OutputDir(tmp_path, ["echo-loop"], staged=False), ring, after_s=3600.0)
    recorder.start("echo-loop-1", "evidence/a.pcap")
    started = time.monotonic()
    recorder.close()
    assert time.monotonic() - started < 30
    assert recorder.written == {"echo-loop-1": len(parts[0])}


def test_traffic_series_widens_its_bins_and_keeps_every_packet():
    series = TrafficSeries()
    rng = np.random.default_rng(7)
    start = 1_700_000_000 * 10**9
    total = 0
    for hour in range(48):         # two days, one batch an hour
        ts = start + hour * 3600 * 10**9 + rng.integers(0, 3600 * 10**9, size=1000)
        series.add(ts)
        total += 1000
        assert len(series.packets) <= SERIES_BINS_MAX
    assert int(series.packets.sum()) == total
    result = series.series()
    assert result.bin_ns * SERIES_BINS_MAX >= 47 * 3600 * 10**9
    assert TrafficSeries().series() is None


@pytest.mark.parametrize("seconds, cap", [(0, 1), (1, 0)])
def test_ring_refuses_empty_bounds(seconds, cap):
    with pytest.raises(ValueError):
        PacketRing(seconds, cap)

"""The in-process pipeline: every consumer sees each decoded batch once, in order, errors surface."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from detector import engine
from detector.errors import CaptureError
from detector.flows import FlowTable
from detector.stats import CaptureStats

BUNDLED = Path(__file__).resolve().parents[1] / "captures" / "benign-office.pcapng"


class Recorder:
    """A consumer that keeps what it was given."""

    def __init__(self, needs_fingerprint=True):
        self.needs_fingerprint = needs_fingerprint
        self.frames = []
        self.columns = set()

    def update(self, batch):
        self.frames.extend(batch["frame"].tolist())
        self.columns |= set(batch.cols)


def _pcap(path: Path, frames: list[bytes]) -> Path:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i, frame in enumerate(frames):
        out.append(struct.pack("<IIII", 1_700_000_000 + i, 0, len(frame), len(frame)) + frame)
    path.write_bytes(b"".join(out))
    return path


def test_consumers_see_every_frame_in_order_across_files(tmp_path):
    frame = bytes(range(60))
    first = _pcap(tmp_path / "a.pcap", [frame] * 3)
    second = _pcap(tmp_path / "b.pcap", [frame] * 4)
    rec = Recorder()
    result = engine.run([first, second, BUNDLED], [rec])
    assert rec.frames == list(range(1, 3 + 4 + 104 + 1))
    assert [c["packets"] for c in result.captures] == [3, 4, 104]
    assert "fingerprint" in rec.columns


def test_fingerprint_only_when_a_consumer_reads_it():
    rec = Recorder(needs_fingerprint=False)
    engine.run([BUNDLED], [rec, FlowTable(), CaptureStats()])
    assert "fingerprint" not in rec.columns
    assert "src_ip_hi" in rec.columns
    rec_fp = Recorder()
    engine.run([BUNDLED], [rec_fp, FlowTable()])
    assert "fingerprint" in rec_fp.columns


def test_error_in_a_later_file_comes_after_the_earlier_batches(tmp_path):
    good = _pcap(tmp_path / "good.pcap", [bytes(60)] * 5)
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"NOT A CAPTURE" * 3)
    rec = Recorder()
    with pytest.raises(CaptureError, match=r"bad\.pcap"):
        engine.run([good, bad], [rec])
    assert rec.frames == [1, 2, 3, 4, 5]


def test_leaving_early_stops_the_reading_thread(tmp_path):
    path = _pcap(tmp_path / "many.pcap", [bytes(60)] * 2000)
    import detector.ingest as ingest
    batches = engine.decoded_batches([path])
    first_reader, first = next(iter(batches))
    assert len(first) > 0 and isinstance(first_reader, ingest.CaptureReader)
    batches.close()                      # joins the thread; a hang here fails the run's timeout
    assert not any(t.name == "detector-read" and t.is_alive() for t in __import__("threading").enumerate())


def test_small_batches_give_identical_stats():
    whole = CaptureStats()
    engine.run([BUNDLED], [whole])
    sizes = []

    class Sizes:
        def update(self, batch):
            sizes.append(len(batch))

    pieces = CaptureStats()
    engine.run([BUNDLED], [pieces, Sizes()], batch_packets=7)
    assert sizes == [7] * 14 + [6]
    assert pieces.to_json() == whole.to_json()
    assert whole.packets == 104 and np.isclose(whole.duration_s, 8.115)

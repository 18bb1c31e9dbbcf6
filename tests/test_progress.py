"""The progress line: drawn only on a terminal, only for inputs that take more than a moment."""
from __future__ import annotations

import io
import struct
from pathlib import Path
from types import SimpleNamespace

from detector import engine
from detector import progress as progress_mod
from detector.progress import Progress

CAPTURES = Path(__file__).resolve().parents[1] / "captures"


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_silent_when_not_a_terminal(monkeypatch):
    clock = iter([0.0, 10.0, 20.0])
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: next(clock))
    stream = io.StringIO()
    bar = Progress(1000, "flows", stream=stream)
    bar.update(500, 10)
    bar.close()
    assert stream.getvalue() == ""


def test_quick_inputs_draw_nothing_slow_ones_draw_and_keep_their_last_line(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    stream = FakeTerminal()
    bar = Progress(1000, "flows", stream=stream)
    now[0] = progress_mod.SHOW_AFTER_S / 2
    bar.update(100, 5)
    assert stream.getvalue() == ""
    now[0] = progress_mod.SHOW_AFTER_S + 1
    bar.update(500, 2_000)
    drawn = stream.getvalue()
    assert "flows" in drawn and "50.0%" in drawn and "2,000 packets" in drawn
    now[0] += progress_mod.REDRAW_EVERY_S / 10
    bar.update(600, 2_100)
    assert stream.getvalue() == drawn          # too soon to redraw
    bar.close()
    # the last update, too soon to be drawn then, is the line the bar ends with, kept
    assert stream.getvalue()[len(drawn):].startswith("\rflows [##################")
    assert "60.0% 2,100 packets" in stream.getvalue()[len(drawn):] and stream.getvalue().endswith("/s\033[K\n")


def test_unknown_size_shows_packets_only(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    stream = FakeTerminal()
    bar = Progress(None, "watch", stream=stream)
    now[0] = 5.0
    bar.update(0, 123)
    assert "123 packets" in stream.getvalue() and "%" not in stream.getvalue()


def test_quick_inputs_leave_nothing_behind(monkeypatch):
    monkeypatch.setattr(progress_mod, "time", SimpleNamespace(monotonic=lambda: 0.0))
    stream = FakeTerminal()
    bar = Progress(1000, "flows", stream=stream)
    bar.update(1000, 7)
    bar.close()
    assert stream.getvalue() == ""


def _record_ends(path: Path) -> list[int]:
    """Where each record of a little-endian classic pcap ends: the bytes read once it is read."""
    data, at, ends = path.read_bytes(), 24, []
    while at < len(data):
        at += 16 + struct.unpack_from("<I", data, at + 8)[0]
        ends.append(at)
    return ends


def test_the_bar_ends_at_the_packets_the_run_read(monkeypatch):
    """A 492,834-packet file ended at `100.0% 433,078 packets`: the bytes came from the reader, batches ahead of
    the packets counted, and the last updates came too soon after a drawing to be drawn. Every update now pairs
    the packets consumed with the bytes that hold them, and the line ends at the run's own count."""
    capture = CAPTURES / "conntrack-sweep.pcap"
    ends = _record_ends(capture)
    assert len(ends) > 20_000 and ends[-1] == capture.stat().st_size
    clock = iter(range(10**7, 10**8))      # a second per reading of the clock: a slow run
    monkeypatch.setattr(progress_mod, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    monkeypatch.setattr(progress_mod, "REDRAW_EVERY_S", 5)     # most updates come too soon to be drawn
    updates = []
    update = Progress.update

    def spy(self, done_bytes, packets):
        updates.append((done_bytes, packets))
        update(self, done_bytes, packets)
    monkeypatch.setattr(Progress, "update", spy)
    terminal = FakeTerminal()
    monkeypatch.setattr(progress_mod.sys, "stderr", terminal)
    result = engine.run([capture], [], label="flows", batch_packets=1000)
    packets = result.captures[0]["packets"]
    assert packets == len(ends) and len(updates) > 20
    for done_bytes, counted in updates:
        assert done_bytes == ends[counted - 1]
    frames = terminal.getvalue().split("\r")
    assert len(frames) < len(updates) and terminal.getvalue().endswith("\n")
    assert frames[-1].startswith(f"flows [{'#' * 30}] 100.0% {packets:,} packets ")

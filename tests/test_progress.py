"""The progress line: drawn only on a terminal, only for inputs that take more than a moment."""
from __future__ import annotations

import io

from detector import progress as progress_mod
from detector.progress import Progress


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


def test_quick_inputs_draw_nothing_slow_ones_draw_and_clear(monkeypatch):
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
    assert stream.getvalue().endswith("\r\033[K")


def test_unknown_size_shows_packets_only(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    stream = FakeTerminal()
    bar = Progress(None, "watch", stream=stream)
    now[0] = 5.0
    bar.update(0, 123)
    assert "123 packets" in stream.getvalue() and "%" not in stream.getvalue()

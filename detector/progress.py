"""A progress line on stderr for inputs that take more than a moment (terminals only)."""
from __future__ import annotations

import sys
import time

# Show nothing for inputs that finish sooner than this: a bar that flashes is noise.
SHOW_AFTER_S = 0.75
# Redraw at most this often: drawing is cheap, but a terminal flooded with updates is not.
REDRAW_EVERY_S = 0.2


class Progress:
    """Bytes-of-input progress; silent unless `stream` is a terminal.

    Updates that come sooner than REDRAW_EVERY_S after a drawing are not drawn, so the last ones of a run
    usually are not: `close` draws the last one given, whenever a line was drawn at all, and keeps it (ending
    the line), so the bar ends at the packets the run read, not at those of its last drawing.
    """

    def __init__(self, total_bytes: int | None, label: str = "", stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total = total_bytes or None
        self.label = label
        self.start = time.monotonic()
        self.last_draw = 0.0
        self.drawn = False
        self.done_bytes = 0
        self.packets = 0

    def update(self, done_bytes: int, packets: int) -> None:
        if not self.enabled:
            return
        self.done_bytes, self.packets = done_bytes, packets
        now = time.monotonic()
        if now - self.start < SHOW_AFTER_S or now - self.last_draw < REDRAW_EVERY_S:
            return
        self.last_draw = now
        self._draw(now)

    def _draw(self, now: float) -> None:
        rate = self.packets / max(now - self.start, 1e-9)
        if self.total:
            share = min(self.done_bytes / self.total, 1.0)
            bar = "#" * int(share * 30)
            text = f"\r{self.label} [{bar:<30}] {share:6.1%} {self.packets:,} packets {rate:,.0f}/s"
        else:
            text = f"\r{self.label} {self.packets:,} packets {rate:,.0f}/s"
        self.stream.write(text[:200] + "\033[K")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False

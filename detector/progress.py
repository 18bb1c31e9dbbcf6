"""A progress line on stderr for inputs that take more than a moment (terminals only)."""
from __future__ import annotations

import sys
import time

# Show nothing for inputs that finish sooner than this: a bar that flashes is noise.
SHOW_AFTER_S = 0.75
# Redraw at most this often: drawing is cheap, but a terminal flooded with updates is not.
REDRAW_EVERY_S = 0.2


class Progress:
    """Bytes-of-input progress; silent unless `stream` is a terminal."""

    def __init__(self, total_bytes: int | None, label: str = "", stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total = total_bytes or None
        self.label = label
        self.start = time.monotonic()
        self.last_draw = 0.0
        self.drawn = False

    def update(self, done_bytes: int, packets: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.start < SHOW_AFTER_S or now - self.last_draw < REDRAW_EVERY_S:
            return
        self.last_draw = now
        rate = packets / max(now - self.start, 1e-9)
        if self.total:
            share = min(done_bytes / self.total, 1.0)
            bar = "#" * int(share * 30)
            text = f"\r{self.label} [{bar:<30}] {share:6.1%} {packets:,} packets {rate:,.0f}/s"
        else:
            text = f"\r{self.label} {packets:,} packets {rate:,.0f}/s"
        self.stream.write(text[:200])
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()

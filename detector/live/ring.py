"""The packet ring: the last N seconds of captured frames, held in memory for the evidence of the next alert.

Segments (one per batch) enter at the front and leave at the back once all
their frames are older than the ring's span, measured on the capture clock
(the newest frame's time), or when the bytes held pass the cap, whichever
comes first: a burst that would need more memory than the cap shortens the
ring instead of growing the process. Eviction is per segment; a writer
trims the oldest one to the span by time (`since_ns`).
"""
from __future__ import annotations

from collections import deque

from ..capfile import Segment
from ..units import NS

# Memory the ring may hold, in bytes. 30 s of a link at 1 Gbit/s is about
# 3.75 GB; the cap keeps a long span affordable on quiet links and bounds a
# busy one, whose ring then covers less than --ring-seconds.
DEFAULT_MAX_BYTES = 512 << 20


class PacketRing:
    def __init__(self, seconds: float, max_bytes: int = DEFAULT_MAX_BYTES):
        if seconds <= 0 or max_bytes <= 0:
            raise ValueError("a packet ring needs a positive span and byte cap")
        self.span_ns = int(seconds * NS)
        self.max_bytes = int(max_bytes)
        self._segments: deque[Segment] = deque()
        self.bytes = 0
        self.packets = 0
        self.newest_ns: int | None = None

    def add(self, segment: Segment) -> None:
        if not len(segment):
            return
        self._segments.append(segment)
        self.bytes += segment.nbytes
        self.packets += len(segment)
        last = segment.last_ns
        self.newest_ns = last if self.newest_ns is None else max(self.newest_ns, last)
        self._evict()

    def _evict(self) -> None:
        cutoff = self.cutoff_ns
        while len(self._segments) > 1 and (self._segments[0].last_ns < cutoff or self.bytes > self.max_bytes):
            old = self._segments.popleft()
            self.bytes -= old.nbytes
            self.packets -= len(old)

    @property
    def cutoff_ns(self) -> int:
        """The oldest time the ring covers: frames before it belong to no evidence."""
        return (self.newest_ns or 0) - self.span_ns

    def snapshot(self) -> list[Segment]:
        """The segments held now (segments are never changed, so the list is a stable view)."""
        return list(self._segments)

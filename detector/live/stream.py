"""The capture pipe as the reader sees it: reads that gather what arrives within a short window.

CaptureReader ends a batch at the first short read, so that a pipe's
packets go out at once. A pipe, though, gives at most what it buffers
(64 KiB), and a capture tool writes as packets come: read as they come, a
busy link turns into hundreds of batches of a few dozen packets a second,
and the fixed cost of each batch (decode set-up, six detectors, the flow
table) then outweighs the packets. This stream's reads wait up to
`window_s` after their first byte for more to arrive, or until the
caller's buffer is full: batches of at most about that long on a quiet link
(bounded latency), of whole buffers on a busy one (bounded overhead).
"""
from __future__ import annotations

import io
import select
import time

# How long a read gathers after its first byte: the most a packet waits here
# before the detectors see it, and the least a batch covers on a busy link.
DEFAULT_WINDOW_S = 0.1


class GatheringStream(io.RawIOBase):
    def __init__(self, raw, name: str, window_s: float = DEFAULT_WINDOW_S):
        self._raw = raw
        self.name = name
        self._window_s = window_s
        self._poll = select.poll()
        self._poll.register(raw.fileno(), select.POLLIN)

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._raw.fileno()

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        got = self._raw.readinto(view) or 0      # blocks until something arrives, or the end
        deadline = time.monotonic() + self._window_s
        while 0 < got < len(view):
            left = deadline - time.monotonic()
            if left <= 0 or not self._poll.poll(left * 1000):
                break
            more = self._raw.readinto(view[got:]) or 0
            if not more:             # the end: hand over what came, the next read returns 0
                break
            got += more
        return got

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()

"""Evidence per alert: the packet ring at the moment an alert fires plus the seconds that follow, as a pcap.

When an alert fires, the ring's segments are taken (a list of immutable
segments: no copy) and the segments of the next `after_s` seconds are added
as they arrive; then a writer thread writes the file, so the capture loop
never waits on the disk. The file is named after the alert
(`evidence/<rule>-<n>-<UTC time to the millisecond>.pcap`) and appears complete or not at all, written
through the watch's output folder (output.OutputDir: aside, then renamed; no link followed).

Alerts that fire while another alert's evidence is still being collected
(an echo loop and the RIP probe that started it, or a storm of them) join that
collection: their files hold the same packets, so the first is written and
the others are hard links to it (copies where the file system has none).
This also bounds the work: at most one evidence capture is collected at a
time, each at most the ring plus `after_s` seconds, and what follows an
alert is capped at the ring's byte cap too.
"""
from __future__ import annotations

import queue
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from ..capfile import Segment, write_records
from ..output import OutputDir
from .alerts import MAX_ENTITIES
from .ring import PacketRing

# Seconds of traffic after an alert that go into its evidence: long enough to
# show the incident going on (a loop's copies, the scanner's next probes),
# short enough that the file is there while the responder reads the alert.
DEFAULT_AFTER_S = 5.0
# Written files remembered (for findings.json's evidence_packets): as many as the alert book keeps entities.
WRITTEN_KEPT = MAX_ENTITIES


@dataclass
class _Collection:
    names: list[str]           # output names, relative to the output folder
    segments: list[Segment]
    since_ns: int
    deadline: float            # time.monotonic() at which collecting ends
    after_bytes: int = 0
    alert_ids: list[str] = field(default_factory=list)


class EvidenceRecorder:
    def __init__(self, out: OutputDir, ring: PacketRing, after_s: float = DEFAULT_AFTER_S):
        self.out = out
        self.ring = ring
        self.after_s = after_s
        self._pending: _Collection | None = None
        self._jobs: queue.Queue = queue.Queue()
        self.written: OrderedDict[str, int] = OrderedDict()   # alert id -> packets in its file, the latest
        self._lock = threading.Lock()
        self._writer = threading.Thread(target=self._write_loop, name="detector-evidence", daemon=True)
        self._writer.start()

    def start(self, alert_id: str, name: str, now: float | None = None) -> None:
        """Begin (or join) the evidence capture for an alert that fired now, to be written as output `name`."""
        now = time.monotonic() if now is None else now
        if self._pending is None:
            self._pending = _Collection(names=[], segments=self.ring.snapshot(), since_ns=self.ring.cutoff_ns,
                                        deadline=now + self.after_s)
        self._pending.names.append(name)
        self._pending.alert_ids.append(alert_id)

    def feed(self, segment: Segment, now: float | None = None) -> None:
        """A segment that just entered the ring: part of the evidence being collected, if any."""
        pending = self._pending
        if pending is not None and pending.after_bytes < self.ring.max_bytes:
            pending.segments.append(segment)
            pending.after_bytes += segment.nbytes
        self.tick(now)

    def tick(self, now: float | None = None) -> None:
        """Hand the collection to the writer once its seconds are over."""
        now = time.monotonic() if now is None else now
        if self._pending is not None and now >= self._pending.deadline:
            self._jobs.put(self._pending)
            self._pending = None

    def close(self) -> None:
        """Write what is being collected at once and wait for every file."""
        if self._pending is not None:
            self._jobs.put(self._pending)
            self._pending = None
        self._jobs.put(None)
        self._writer.join()

    def _write_loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                first = job.names[0]
                with self.out.open(first) as handle:
                    packets = write_records(handle, job.segments, job.since_ns)
                for other in job.names[1:]:
                    self.out.link(first, other)
            except OSError as exc:
                print(f"detector: warning: evidence {exc.filename or first} not written: {exc.strerror or exc}",
                      file=sys.stderr, flush=True)
                continue
            with self._lock:
                for alert_id in job.alert_ids:
                    self.written[alert_id] = packets
                while len(self.written) > WRITTEN_KEPT:
                    self.written.popitem(last=False)

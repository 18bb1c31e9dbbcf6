"""Several capture files as one capture: their order by first packet, and the warning when they overlap.

A ring buffer's files (`dumpcap -b`) or the pieces of a split capture are one capture. Their names need not sort
by time (a renamed file, a counter that wrapped), so they are read in the order of their first packet; files
whose times overlap are still read as one, with a warning, as their packets are then out of time order.
Used by the single-process commands and by the cluster (detector.cluster), so both order alike.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass
class Extent:
    """What counting the records of one file learnt: its records and the times of its first and last."""

    path: str
    packets: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    error: str | None = None


def first_packet_ns(path) -> int | None:
    """The time of the first record of capture `path` (None: it has none); reads only that record."""
    from .ingest import open_capture
    with open_capture(path, batch_packets=1) as reader:
        for raw in reader:
            return int(raw["ts_ns"][0])
    return None


def _is_path(source) -> bool:
    return isinstance(source, (str, os.PathLike))


def capture_order(paths) -> list:
    """`paths` (one continuous capture) in the order of their first packet's time, not of their names; files
    without a packet go last, ties keep the command line's order. Streams (standard input) are never reordered:
    with one among them, the command line's order stands."""
    paths = list(paths)
    if len(paths) < 2 or not all(_is_path(p) for p in paths):
        return paths
    return [paths[i] for i in order_by_first([first_packet_ns(p) for p in paths])]


def order_by_first(firsts: list[int | None]) -> list[int]:
    """The places of files whose first packets are at `firsts` (ns, None: no packet) in capture order: by first
    packet, files without one last, ties in the order given."""
    return sorted(range(len(firsts)), key=lambda i: (firsts[i] is None, firsts[i] or 0, i))


def overlap_warnings(extents: list[Extent]) -> list[str]:
    """One warning per file (in capture order) whose first packet is older than the last packet of a file
    before it: the files are read as one capture, but its packets are then not in time order."""
    from .findings import iso_time as iso_ns
    warnings = []
    latest: Extent | None = None
    for extent in extents:
        if extent.first_ns is None:
            continue
        if latest is not None and extent.first_ns < latest.last_ns:
            warnings.append(f"{extent.path}: overlaps {latest.path} in time (its first packet, "
                            f"{iso_ns(extent.first_ns)}, is older than the last one of {latest.path}, "
                            f"{iso_ns(latest.last_ns)}); read as one capture ordered by first packet")
        if extent.last_ns is not None and (latest is None or extent.last_ns > latest.last_ns):
            latest = extent
    return warnings


class FileSpans:
    """A consumer that notes each batch's frames and times: the extents of the files of a single-process run
    (engine.run's captures say how many records each file had)."""

    needs_fingerprint = False
    app_tables = ()

    def __init__(self):
        self._batches: list[tuple[int, int, int]] = []     # (first frame, oldest, newest time)

    def update(self, batch) -> None:
        if len(batch):
            ts = batch["ts_ns"]
            self._batches.append((int(batch["frame"][0]), int(ts.min()), int(ts.max())))

    def extents(self, captures: list[dict]) -> list[Extent]:
        out, frame = [], 1
        for capture in captures:
            packets = int(capture.get("packets") or 0)
            times = [b for b in self._batches if frame <= b[0] < frame + packets]
            out.append(Extent(str(capture.get("file")), packets, min((b[1] for b in times), default=None),
                              max((b[2] for b in times), default=None)))
            frame += packets
        return out

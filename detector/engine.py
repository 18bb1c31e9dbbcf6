"""Runs the pipeline in process: captures -> raw batches -> decoded columns -> consumers.

A consumer is anything with `update(batch)`: the flow table, capture stats,
detectors. Every consumer sees the same decoded batch; nothing parses twice.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from .decode import decode
from .ingest import read_captures
from .progress import Progress


@dataclass
class RunResult:
    captures: list[dict] = field(default_factory=list)   # per file: path, format, packets, warnings
    warnings: list[str] = field(default_factory=list)


def _file_size(path) -> int:
    try:
        return os.path.getsize(path)
    except (OSError, TypeError):
        return 0


def run(paths, consumers, label: str = "reading") -> RunResult:
    """Stream every capture in `paths` (one continuous capture) through `consumers`."""
    paths = [str(p) for p in paths]
    progress = Progress(sum(_file_size(p) for p in paths), label)
    result = RunResult()
    readers = []
    done_before = 0          # bytes of the files already finished
    packets = 0
    try:
        for reader, raw in read_captures(paths):
            if not readers or readers[-1] is not reader:
                if readers:
                    done_before += _file_size(readers[-1].path)
                readers.append(reader)
            batch = decode(raw)
            for consumer in consumers:
                consumer.update(batch)
            packets += len(batch)
            progress.update(done_before + reader.position, packets)
    finally:
        progress.close()
    seen = {r.path for r in readers}
    for reader in readers:
        result.captures.append({
            "file": reader.path, "format": reader.format, "compression": reader.compression,
            "packets": reader.packets, "warnings": list(reader.warnings),
        })
        result.warnings.extend(reader.warnings)
    for path in paths:
        if path not in seen:    # a valid capture that holds no packet at all
            result.captures.append({"file": path, "packets": 0, "warnings": []})
    return result

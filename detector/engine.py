"""Runs the pipeline in process: captures -> raw batches -> decoded columns -> consumers.

A consumer is anything with `update(batch)`: the flow table, capture stats,
detectors. Every consumer sees the same decoded batch; nothing parses twice.

Reading and decoding run ahead of the consumers in other threads: the
compiled record walk, decoder and flow table release the GIL, so on two cores
one batch is read while the one before it decodes and the consumers work on
an earlier one. At most `DECODE_THREADS` batches decode and
`PREFETCH_BATCHES` decoded ones wait, which bounds the memory this adds.
"""
from __future__ import annotations

import os
import queue
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .decode import decode
from .ingest import read_captures
from .progress import Progress
from .schema import BATCH_PACKETS


@dataclass
class RunResult:
    captures: list[dict] = field(default_factory=list)   # per file: path, format, packets, warnings
    warnings: list[str] = field(default_factory=list)
    # per file: every interface its reader described, in order (name, linktype, snaplen), for `info`
    interfaces: list[list[dict]] = field(default_factory=list)


def _file_size(path) -> int:
    try:
        return os.path.getsize(path)
    except (OSError, TypeError):
        return 0


class _Silent:
    """A stream that is no terminal: Progress stays quiet."""

    def isatty(self) -> bool:
        return False


# Decoded batches allowed to wait for the consumers: one is enough to keep both
# cores busy; more only holds memory (each batch is up to BATCH_BYTES of frames).
PREFETCH_BATCHES = 2
# Batches decoded at once, each in its own thread: reading alone takes about
# as long as decoding, so two decoders keep the reader from waiting.
DECODE_THREADS = 2
_DONE = object()


def decoded_batches(paths, fingerprint: bool = True, opened: list | None = None, tables: tuple[str, ...] = (),
                    first_frame: int = 1, decode_threads: int = DECODE_THREADS,
                    batch_packets: int = BATCH_PACKETS, positions: bool = False):
    """(reader, PacketBatch) pairs of `paths` as one capture, read and decoded in a second thread (and
    `decode_threads` decoding ones), with the application side-tables `tables` built (detector.decode.app),
    at most `batch_packets` packets a batch. `positions`: (reader, position, PacketBatch) triples instead, the
    position being the reader's (CaptureReader.position) just after it read the batch -- the reader itself
    is batches ahead of the caller by then, so a progress line that took its position would say a share
    of the file its packet count has not reached.

    Errors in the reading thread (a CaptureError for a damaged file) are
    raised here, in the caller's thread, after the batches read before them.
    Closing the generator early stops the reading thread. Every reader is
    appended to `opened` when it opens, batches or not (read_captures).
    """
    pending: queue.Queue = queue.Queue(maxsize=PREFETCH_BATCHES)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                pending.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            with ThreadPoolExecutor(max_workers=decode_threads, thread_name_prefix="detector-decode") as pool:
                decoding = deque()      # (reader, future) in capture order
                failure = None
                try:
                    for reader, raw in read_captures(paths, opened=opened, first_frame=first_frame,
                                                           batch_packets=batch_packets):
                        decoding.append((reader, reader.position,
                                         pool.submit(decode, raw, fingerprint, tables=tables)))
                        if len(decoding) > decode_threads:
                            done_reader, position, future = decoding.popleft()
                            if not put((done_reader, position, future.result())):
                                return
                except BaseException as exc:   # a damaged later file: first deliver what came before
                    failure = exc
                while decoding:
                    done_reader, position, future = decoding.popleft()
                    if not put((done_reader, position, future.result())):
                        return
                if failure is not None:
                    raise failure
            put(_DONE)
        except BaseException as exc:  # handed to the consumer thread, which raises it
            put(exc)

    worker = threading.Thread(target=produce, name="detector-read", daemon=True)
    worker.start()
    try:
        while True:
            item = pending.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item if positions else (item[0], item[2])
    finally:
        stop.set()
        worker.join()


def run(paths, consumers, label: str = "reading", first_frame: int = 1, show_progress: bool = True,
        decode_threads: int = DECODE_THREADS, batch_packets: int = BATCH_PACKETS) -> RunResult:
    """Stream every capture in `paths` (one continuous capture) through `consumers`.

    A path may also be a binary stream, an ingest.StreamCapture or an ingest.index.ByteRange (part of a file,
    read as the whole file's reader reads it). `first_frame`: the frame number of the first record (a cluster
    partition's place in the whole capture, detector.cluster). `show_progress`: draw the byte progress line on
    a terminal (off on a cluster worker). `decode_threads`: batches decoded at once (fewer on a cluster worker
    that shares its cores). `batch_packets`: the most packets a batch holds; fewer hold less memory in flight
    (the batches and a mapped file's pages), at a cost per batch.
    """
    paths = list(paths)
    progress = Progress(sum(_file_size(p) for p in paths) if show_progress else 0, label,
                        stream=None if show_progress else _Silent())
    result = RunResult()
    opened: list = []       # every reader, in order, including those that yield no batch
    current = None
    done_before = 0         # bytes of the files before the current one
    packets = 0
    try:
        # the fingerprint hashes every captured byte: only when a consumer reads it
        fingerprint = any(getattr(c, "needs_fingerprint", True) for c in consumers)
        tables = tuple(sorted({name for c in consumers for name in getattr(c, "app_tables", ())}))
        for reader, position, batch in decoded_batches(paths, fingerprint=fingerprint, opened=opened,
                                                       tables=tables, first_frame=first_frame,
                                                       decode_threads=decode_threads, batch_packets=batch_packets,
                                                       positions=True):
            if reader is not current:
                current = reader
                done_before = sum(r.size or 0 for r in opened[:opened.index(reader)])
            for consumer in consumers:
                consumer.update(batch)
            packets += len(batch)
            progress.update(done_before + position, packets)
        # every file read to its end (or to the damage that ends it): the last drawing says so
        progress.update(sum(r.size or 0 for r in opened), packets)
    finally:
        progress.close()
    for reader in opened:
        result.captures.append({
            "file": reader.path, "format": reader.format, "compression": reader.compression,
            "packets": reader.packets, "warnings": list(reader.warnings),
            "interfaces": [{"name": i["name"], "linktype": i["linktype"]} for i in reader.interfaces],
            "interface_stats": list(reader.interface_stats),
        })
        result.warnings.extend(reader.warnings)
        result.interfaces.append([{key: i[key] for key in ("name", "linktype", "snaplen")} for i in reader.interfaces])
    return result

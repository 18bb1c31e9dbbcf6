"""One analysis over many captures on a Dask cluster, with the answer of one process.

`detector analyze|flows CAPTURES... --workers N` (an embedded `distributed.LocalCluster` of N worker
processes) or `--scheduler tcp://HOST:8786` (a cluster started with Dask's own `dask scheduler` and
`dask worker`) cut the work into partitions, one per file:

1. A counting task per file reads its records (no decoding) for their count and first and last times. The
   files are then put in the order of their first packet (a ring buffer's names need not sort by time),
   an overlap in time is warned about, and each partition learns its first global frame number, so frame
   numbers, evidence frames and Community IDs are those of a single-process run. Counting first, rather
   than renumbering at the merge, keeps the detectors unaware of the cluster: every one of them holds frame
   numbers in its state, and none would have to learn to shift them.
2. A fold task per partition decodes it and folds it into the flow table, capture statistics and every
   detector (analysis.AnalysisState). Only these states travel back, never packets.
3. The client merges the states in capture order as they arrive (the merges `detector watch` uses for its
   slices; the flow table joins flows cut by a partition boundary) and asks for findings once.

The evidence pass (evidence pcaps, figures) then reads the captures again in the client, in capture
order: it is one sequential pass, as in a single-process run.

A partition is a whole file. Cutting a large file into byte ranges at record boundaries is left to
detector.ingest.index (RecordIndex.byte_ranges, ByteRange.reader: each range readable alone); a partition
will carry such a range when the fold reads one.

Captures must lie at the same path on every worker (a shared filesystem): a worker that cannot open one
says so, naming the path and the worker.
"""
from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass, field

from . import engine
from .errors import DetectorError, UsageError
from .ordering import Extent, overlap_warnings
from .progress import Progress

DASK_EXTRA = "pip install 'detector[dask]'"
SCHEDULER_ENV = "DETECTOR_SCHEDULER"


@dataclass(frozen=True)
class Partition:
    """The records one task reads: one whole file."""

    path: str                   # absolute: the workers' working folders are not the client's
    name: str                   # as the command line gave it: what findings.json and warnings say
    index: int                  # place in capture order
    first_frame: int            # global frame number of its first record


@dataclass
class Folded:
    """A fold task's answer: the partition's state and what its reader said, or the one-line error."""

    index: int
    state: object = None
    captures: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    error: str | None = None

    @property
    def packets(self) -> int:
        return sum(int(capture.get("packets") or 0) for capture in self.captures)


# ---- the tasks (run on the workers) -------------------------------------------------------------------------
def _worker() -> str | None:
    """The address of the Dask worker running this task; None outside one."""
    try:
        from distributed import get_worker
        return get_worker().address
    except (ImportError, ValueError):
        return None


def unopenable(path, exc: OSError) -> str:
    """The one line for a capture that cannot be opened; on a worker it names the worker and the cause."""
    worker = _worker()
    if worker is None:
        return f"{path}: {exc.strerror or exc}"
    return (f"{path}: cannot be opened on worker {worker} ({exc.strerror or exc}): every worker must see the "
            f"captures at the same path (a shared filesystem)")


def _check_open(path) -> str | None:
    """The error of a capture this worker cannot open (missing here, no permission), else None."""
    try:
        with open(path, "rb"):
            return None
    except OSError as exc:
        return unopenable(path, exc)


def count_records(path) -> Extent:
    """Count the records of capture `path` and note its first and last times (records only, nothing decoded)."""
    from .ingest import open_capture
    extent = Extent(str(path))
    extent.error = _check_open(path)
    if extent.error:
        return extent
    try:
        with open_capture(path) as reader:
            for raw in reader:
                ts = raw["ts_ns"]
                if extent.first_ns is None:
                    extent.first_ns = int(ts[0])
                newest = int(ts.max())
                extent.last_ns = newest if extent.last_ns is None else max(extent.last_ns, newest)
            extent.packets = reader.packets
    except DetectorError as exc:
        extent.error = str(exc)
    except OSError as exc:
        extent.error = unopenable(path, exc)
    return extent


def fold(partition: Partition, kind: str, rules=None, site=None) -> Folded:
    """Decode `partition` and fold it into a fresh state: `kind` "analyze" (analysis.AnalysisState of `rules`
    and `site`) or "flows" (the flow table alone)."""
    error = _check_open(partition.path)
    if error:
        return Folded(partition.index, error=error.replace(partition.path, partition.name))
    if kind == "analyze":
        from .analysis import AnalysisState
        state = AnalysisState(rules, site=site)
    else:
        from .flows import FlowTable
        state = FlowTable()
    try:
        result = engine.run([partition.path], [state], label=kind, first_frame=partition.first_frame,
                            show_progress=False)
    except DetectorError as exc:
        return Folded(partition.index, error=str(exc).replace(partition.path, partition.name))
    except OSError as exc:
        return Folded(partition.index, error=unopenable(partition.name, exc))
    for capture in result.captures:
        capture["file"] = partition.name
        capture["warnings"] = [w.replace(partition.path, partition.name) for w in capture["warnings"]]
    warnings = [w.replace(partition.path, partition.name) for w in result.warnings]
    return Folded(partition.index, state, result.captures, warnings)


# ---- the client ---------------------------------------------------------------------------------------------
def workers_count(value: str) -> int:
    """--workers N or auto (the machine's cores)."""
    if value == "auto":
        return os.cpu_count() or 1
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise UsageError(f"--workers: '{value}' is not a number of workers (1 or more, or auto)")
    return count


def wanted(workers: str | None, scheduler: str | None) -> tuple[int | None, str | None]:
    """The cluster the command line asks for: (worker processes, None), (None, scheduler address) or
    (None, None) for no cluster. DETECTOR_SCHEDULER stands in for --scheduler when neither flag is given."""
    if workers is not None and scheduler is not None:
        raise UsageError("--workers and --scheduler: give one (an embedded cluster, or an existing one)")
    if workers is not None:
        return workers_count(workers), None
    scheduler = scheduler or os.environ.get(SCHEDULER_ENV) or None
    return None, scheduler


@contextmanager
def connect(workers: int | None, scheduler: str | None):
    """A distributed.Client of an embedded LocalCluster of `workers` processes, or of the cluster at
    `scheduler`; closed (and the embedded cluster stopped) on leaving."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        flag = "--scheduler" if scheduler else "--workers"
        raise UsageError(f"{flag} needs Dask: {DASK_EXTRA}") from None
    if scheduler is not None:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise UsageError(f"--scheduler {scheduler}: cannot reach the Dask scheduler ({exc})") from None
        try:
            yield client
        finally:
            client.close()
        return
    # one thread a worker: the engine reads and decodes in threads of its own
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as local, Client(local) as client:
        yield client


class _Bar:
    """Partitions done, on stderr when it is a terminal (progress.Progress counts them as its 'bytes')."""

    def __init__(self, total: int, label: str):
        self.progress = Progress(total, label)
        self.total = total
        self.done = 0
        self.packets = 0

    def step(self, packets: int = 0) -> None:
        self.done += 1
        self.packets += packets
        self.progress.update(self.done, self.packets)

    def close(self) -> None:
        self.progress.close()


def _gather_in_order(client, futures, label: str):
    """Yield the results of `futures` in their order as they complete, drawing the progress bar; on any error
    or Ctrl-C the cluster's remaining work is cancelled."""
    from distributed import as_completed
    bar = _Bar(len(futures), label)
    waiting: dict[int, object] = {}
    position = {f.key: i for i, f in enumerate(futures)}
    following = 0
    try:
        for future in as_completed(futures):
            result = future.result()
            waiting[position[future.key]] = result
            bar.step(getattr(result, "packets", 0))
            while following in waiting:
                yield waiting.pop(following)
                following += 1
    except BaseException:
        client.cancel(futures)
        raise
    finally:
        bar.close()


def partitions(client, paths) -> tuple[list[Partition], list[Extent], list[str]]:
    """Count the records of `paths` on the cluster: their partitions in capture order, their extents, the
    overlap warnings. A file that cannot be read raises its one-line error."""
    names = [os.fspath(p) for p in paths]
    futures = [client.submit(count_records, os.path.abspath(name), pure=False) for name in names]
    extents = list(_gather_in_order(client, futures, "counting"))
    for name, extent in zip(names, extents):
        absolute, extent.path = extent.path, name
        if extent.error:
            raise UsageError(extent.error.replace(absolute, name))
    extents.sort(key=lambda e: (e.first_ns is None, e.first_ns or 0))     # stable: ties keep the given order
    parts, frame = [], 1
    for index, extent in enumerate(extents):
        parts.append(Partition(os.path.abspath(extent.path), extent.path, index, frame))
        frame += extent.packets
    return parts, extents, overlap_warnings(extents)


def fold_all(client, parts: list[Partition], kind: str, rules=None, site=None):
    """Fold every partition on the cluster and merge the states in capture order: (state, RunResult)."""
    if rules is not None:
        rules = client.scatter(rules, broadcast=True)
    if site is not None:
        site = client.scatter(site, broadcast=True)
    futures = [client.submit(fold, part, kind, rules, site, pure=False) for part in parts]
    run = engine.RunResult()
    merged = None
    for folded in _gather_in_order(client, futures, kind):
        if folded.error:
            client.cancel(futures)
            raise UsageError(folded.error)
        run.captures.extend(folded.captures)
        run.warnings.extend(folded.warnings)
        merged = folded.state if merged is None else merged.merge(folded.state)
    return merged, run


def analyze(client, paths, rules, site):
    """analysis.analyze over the cluster: (analysis.Analysis, the paths in capture order)."""
    from .analysis import conclude
    parts, _extents, warnings = partitions(client, paths)
    state, run = fold_all(client, parts, "analyze", rules, site)
    run.warnings.extend(warnings)
    result = conclude(state.detectors, state.flows, state.stats, run)
    return result, [p.name for p in parts]


def flow_table(client, paths):
    """The flow table of `paths` (one capture) over the cluster: (FlowTable, RunResult, partitions)."""
    parts, _extents, warnings = partitions(client, paths)
    table, run = fold_all(client, parts, "flows")
    run.warnings.extend(warnings)
    return table, run, parts


def each_entries(client, task, jobs: list[tuple[str, str]], rules_dir, report: bool, site_file) -> list[dict]:
    """analyze --each on the cluster: `task` (commands.analyze_one) per (capture, output folder), their index
    entries in order."""
    def absolute(path):
        return None if path is None else os.path.abspath(path)
    futures = [client.submit(task, absolute(path), absolute(folder), absolute(rules_dir), report,
                             absolute(site_file), pure=False) for path, folder in jobs]
    entries = list(_gather_in_order(client, futures, "analyze --each"))
    for (path, _), entry in zip(jobs, entries):
        full, entry["capture"] = entry["capture"], path
        if entry["error"]:
            entry["error"] = entry["error"].replace(full, path)
    return entries


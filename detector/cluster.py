"""One analysis over many captures on a Dask cluster, with the answer of one process.

`detector analyze|flows CAPTURES... --workers N` (an embedded `distributed.LocalCluster` of N worker
processes) or `--scheduler tcp://HOST:8786` (a cluster started with Dask's own `dask scheduler` and
`dask worker`) cut the work into partitions:

1. The files are put in the order of their first packet (a ring buffer's names need not sort by time): a
   probe reads each one's first record. Then each is surveyed, in that order: its records walked (no
   decoding: the record index walk of detector.ingest.index) for their count, first and last times and,
   where the file is cut, the byte offsets of its partitions. A large uncompressed pcap or pcapng file is
   cut into byte ranges at record boundaries, each carrying the header that makes it readable alone
   (ingest.index.ByteRange: the pcap file header, or the section header and interface descriptions declared
   before it, with their time resolution and offset); a compressed or small file is one partition. How many
   partitions a file makes: `partitions_per_file` (the command line's --partitions-per-file, or
   DETECTOR_PARTITIONS_PER_FILE), else `auto_partitions` from its size, all the files' sizes and the
   cluster's workers. The probes and surveys run on the workers, or, for an embedded cluster, whose files
   are this machine's, here in a thread while the cluster starts and folds (Layout).
2. Each partition learns its first global frame number from the surveys of the files before it, so frame
   numbers, evidence frames and Community IDs are those of a single-process run; a file in one piece is
   folded as soon as those are done, without waiting for its own survey or the later ones'. An overlap in
   time is warned about. Counting first, rather than renumbering at the merge, keeps the detectors unaware
   of the cluster: every one of them holds frame numbers in its state, and none would have to learn to shift
   them.
3. A fold task per partition decodes it and folds it into the flow table, capture statistics and every
   detector (analysis.AnalysisState). Only these states travel back, never packets.
4. The client merges the states in capture order as they arrive (the merges `detector watch` uses for its
   slices; the flow table joins flows cut by a partition boundary), joins the partitions of one file into
   that file's entry (packets, warnings, interfaces) and asks for findings once.

The evidence pass (evidence pcaps, figures) runs on the workers too: a task per partition reads its records
again (gather_evidence) for the evidence frames it holds, its packets per bin of the report's time axis and
its copies of the rules' figures (shipped to it as built), and the client joins them in capture order
(report.evidence.join: records united, counts added, each figure merging its copies) before it writes the
evidence files as one process does. The client reads no capture. A figure that cannot merge
(ReportFigure.merge) keeps that run's evidence pass in the client, one sequential pass.

Captures must lie at the same path on every worker (a shared filesystem): a worker on another machine that
cannot open one says so, naming the path and the worker; one on this machine (an embedded cluster's) says
why, as this process would. A worker that dies mid-run is Dask's to replace: its partitions
run again elsewhere, and the answer is the same (tests/test_cluster.py kills one).

The embedded cluster (--workers) forks its worker processes from a fork server that has imported detector
and loaded its compiled kernels once (detector.forkserver), started as the command begins and importing while
the command loads its rules and surveys the files (Embedded: the cluster itself starts on first use); each
fold decodes with its machine's cores shared among the workers on it.
"""
from __future__ import annotations

import ipaddress
import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from . import engine
from .errors import DetectorError, UsageError, open_reason
from .forkserver import FORKSERVER_PRELOAD
from .forkserver import start as _start_forkserver
from .ingest.reader import TIME_OVERFLOW
from .ordering import Extent, order_by_first, overlap_warnings
from .progress import Progress

if TYPE_CHECKING:
    from .ingest.index import ByteRange

DASK_EXTRA = "pip install 'detector[dask]'"
SCHEDULER_ENV = "DETECTOR_SCHEDULER"
PARTITIONS_ENV = "DETECTOR_PARTITIONS_PER_FILE"

# auto_partitions: partitions a worker gets of the whole capture. More balance the load better (a worker
# that finishes early takes another) but each ships a state back and costs a merge.
PARTITIONS_PER_WORKER = 2
# auto_partitions: no file is cut into partitions smaller than this. A partition's fixed costs (a task, its
# state shipped and merged, a header read) stay small beside reading and decoding this many bytes.
MIN_PARTITION_BYTES = 64 << 20
# the most partitions one file is cut into, asked for or not
MAX_PARTITIONS_PER_FILE = 1024


@dataclass(frozen=True)
class Partition:
    """The records one fold task reads: a whole file, or a byte range of one (`part`)."""

    path: str                   # absolute: the workers' working folders are not the client's
    name: str                   # as the command line gave it: what findings.json and warnings say
    index: int                  # place in capture order
    first_frame: int            # global frame number of its first record
    file: int = 0               # place of its file in capture order
    part: ByteRange | None = None   # None: the whole file

    @property
    def source(self):
        """What engine.run reads: the file's path, or the range."""
        return self.path if self.part is None else self.part


@dataclass
class Survey:
    """A survey task's answer: the file's extent and, when it was cut, its byte ranges (frames from 1)."""

    extent: Extent
    ranges: list = field(default_factory=list)


@dataclass
class Folded:
    """A fold task's answer: the partition's state and what its reader said, or the one-line error."""

    index: int
    state: object = None
    captures: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    error: str | None = None
    file: int = 0
    interface_base: int = 0

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


def _on_this_machine(address: str) -> bool:
    """Whether the worker at `address` runs on the client's machine: one listening on a loopback address can be
    reached only from it (the client fetches every result from the worker itself); an embedded cluster's are."""
    from urllib.parse import urlsplit
    try:
        host = urlsplit(address).hostname
        return host is not None and (host == "localhost" or ipaddress.ip_address(host).is_loopback)
    except ValueError:
        return False


def unopenable(path, exc: OSError) -> str:
    """The one line for a capture that cannot be opened: the reason, as on this machine; a worker on another
    machine is named with what every worker needs (the captures at the same path)."""
    worker = _worker()
    if worker is None or _on_this_machine(worker):
        return f"{path}: {open_reason(exc, path)}"
    return (f"{path}: {open_reason(exc, path)} on worker {worker}: every worker must see the captures at the same path "
            f"(a shared filesystem)")


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


def probe(path) -> Extent:
    """The time of the first record of capture `path` (reading that record only): what puts the files in capture
    order before any is surveyed; or the one-line error of a file that cannot be read."""
    from .ordering import first_packet_ns
    extent = Extent(str(path))
    extent.error = _check_open(path)
    if extent.error:
        return extent
    try:
        extent.first_ns = first_packet_ns(path)
    except DetectorError as exc:
        extent.error = str(exc)
    except OSError as exc:
        extent.error = unopenable(path, exc)
    return extent


def survey(path, parts: int = 1) -> Survey:
    """Walk the records of capture `path` (nothing decoded): its extent and, for `parts` > 1 on an uncompressed
    file, its byte ranges (ingest.index). A compressed file is one partition: reading it at an offset would
    mean decompressing everything before it."""
    if parts <= 1 or _compressed(path):
        return Survey(count_records(path))
    from .ingest.index import build_index
    extent = Extent(str(path))
    extent.error = _check_open(path)
    if extent.error:
        return Survey(extent)
    try:
        index = build_index(path)
    except DetectorError as exc:
        extent.error = str(exc)
        return Survey(extent)
    except OSError as exc:
        extent.error = unopenable(path, exc)
        return Survey(extent)
    try:
        extent.packets, extent.first_ns, extent.last_ns = len(index), index.first_ns, index.last_ns
        return Survey(extent, index.byte_ranges(parts))
    finally:
        index.close()


def _compressed(path) -> bool:
    from .ingest.source import ByteSource
    try:
        with open(path, "rb", buffering=0) as probe:
            return bool(ByteSource(probe).compression)
    except (OSError, DetectorError):
        return False        # the walk says what is wrong with it


def decode_threads(hosts: dict[str, int]) -> int:
    """Decoding threads for a fold on this worker: the cores of its machine shared among the workers on it
    (`hosts`: workers per host), at most engine.DECODE_THREADS; a worker's own threads must not crowd out
    its neighbours'."""
    address = _worker() or ""
    host = address.split("://")[-1].rsplit(":", 1)[0]
    siblings = max(1, hosts.get(host, 1))
    return max(1, min(engine.DECODE_THREADS, (os.cpu_count() or 1) // siblings))


def fold(partition: Partition, kind: str, rules=None, site=None, hosts: dict[str, int] | None = None) -> Folded:
    """Decode `partition` and fold it into a fresh state: `kind` "analyze" (analysis.AnalysisState of `rules`
    and `site`) or "flows" (the flow table alone). `hosts`: workers per host of the cluster (decode_threads)."""
    error = _check_open(partition.path)
    if error:
        return Folded(partition.index, error=error.replace(partition.path, partition.name))
    if kind == "analyze":
        from .analysis import AnalysisState
        state = AnalysisState(rules, site=site)
    else:
        from .flows import FlowTable
        state = FlowTable()
    threads = decode_threads(hosts) if hosts else engine.DECODE_THREADS
    try:
        result = engine.run([partition.source], [state], label=kind, first_frame=partition.first_frame,
                            show_progress=False, decode_threads=threads)
    except DetectorError as exc:
        return Folded(partition.index, error=str(exc).replace(partition.path, partition.name))
    except OSError as exc:
        return Folded(partition.index, error=unopenable(partition.name, exc))
    for capture in result.captures:
        capture["file"] = partition.name
        capture["warnings"] = [w.replace(partition.path, partition.name) for w in capture["warnings"]]
    warnings = [w.replace(partition.path, partition.name) for w in result.warnings]
    base = 0 if partition.part is None else partition.part.interface_base
    return Folded(partition.index, state, result.captures, warnings, file=partition.file, interface_base=base)


@dataclass
class Gathered:
    """An evidence task's answer (report.evidence.gather over one partition), or its one-line error."""

    index: int
    records: dict = field(default_factory=dict)
    counts: object = None
    figures: list = field(default_factory=list)
    error: str | None = None


def gather_evidence(partition: Partition, wanted, bins, figures: bytes, hosts: dict[str, int] | None = None
                    ) -> Gathered:
    """The evidence pass over `partition`: the records of frames `wanted`, its packets per bin of `bins`, and
    `figures` (the rules' figures as built, pickled: each task unpickles copies of its own to feed)."""
    import pickle

    from .report.evidence import gather
    error = _check_open(partition.path)
    if error:
        return Gathered(partition.index, error=error.replace(partition.path, partition.name))
    copies = pickle.loads(figures)
    threads = decode_threads(hosts) if hosts else engine.DECODE_THREADS
    try:
        records, counts = gather([partition.source], wanted, bins, copies, first_frame=partition.first_frame,
                                 name=partition.name, decode_threads=threads)
    except DetectorError as exc:
        return Gathered(partition.index, error=str(exc).replace(partition.path, partition.name))
    except OSError as exc:
        return Gathered(partition.index, error=unopenable(partition.name, exc))
    return Gathered(partition.index, records, counts, copies)


def _same(value):
    return value


def _shared(client, value):
    """`value` on the cluster for every task to take, as the result of a task rather than scattered: Dask computes a
    lost result again (a worker that died held it) but cannot bring back scattered data, and its memory manager
    drops a broadcast's extra copies within seconds, so a scattered value was lost with the worker holding it."""
    return client.submit(_same, value, pure=False)


def evidence_collector(client, parts: list[Partition]):
    """The evidence pass of `parts` on the cluster, as report.evidence.write_evidence's `collector`: a task per
    partition (gather_evidence), joined in capture order as they complete; the first error raises its line."""
    def collect(wanted, bins, figures):
        import pickle

        from .report.evidence import join
        shipped = _shared(client, pickle.dumps(list(figures)))
        wanted = _shared(client, wanted)
        hosts = _workers(client)[1]
        futures = [client.submit(gather_evidence, part, wanted, bins, shipped, hosts, pure=False) for part in parts]

        def answers():
            for gathered in _gather_in_order(client, futures, "evidence"):
                if gathered.error:
                    raise UsageError(gathered.error)
                yield gathered.records, gathered.counts, gathered.figures
        try:
            return join(answers(), bins, figures)
        except UsageError:
            client.cancel(futures)
            raise
    return collect


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
    """A distributed.Client of an embedded LocalCluster of `workers` processes (an Embedded, started on first
    use), or of the cluster at `scheduler`; closed (and the embedded cluster stopped) on leaving."""
    from importlib.util import find_spec
    if find_spec("distributed") is None:
        flag = "--scheduler" if scheduler else "--workers"
        raise UsageError(f"{flag} needs Dask: {DASK_EXTRA}")
    if scheduler is None:
        _start_forkserver()         # first: it imports while this process imports Dask and the rest
    try:
        from distributed import Client
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
    import dask
    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        _preload_forkserver()
        embedded = Embedded(workers)
        try:
            yield embedded
        finally:
            embedded.close()


class Embedded:
    """The distributed.Client of an embedded LocalCluster of `workers` processes of one thread each (the engine
    reads and decodes in threads of its own), started on first use (any attribute of a Client).

    The fork server its workers come from is started at once and imports FORKSERVER_PRELOAD while this
    process goes on: loading the rules, putting the captures in order and surveying them (Layout: the files of
    an embedded cluster are this machine's, surveyed here) until the first task needs the cluster. The
    scheduler's HTTP server (health checks) takes any free port: on Dask's 8787, a second run at once would
    warn on stderr."""

    def __init__(self, workers: int):
        self.workers = workers
        self._local = self._client = None
        _start_forkserver()

    def _started(self):
        if self._client is None:
            from distributed import Client, LocalCluster
            self._local = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=logging.ERROR)
            self._client = Client(self._local)
        return self._client

    def __getattr__(self, name):
        return getattr(self._started(), name)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._local is not None:
            self._local.close()


def _preload_forkserver() -> None:
    """Start the embedded cluster's workers from a fork server that has imported FORKSERVER_PRELOAD once
    (multiprocessing's forkserver: a clean single-threaded process, so forking it is safe): Dask's context with
    our list, which a fork server started again (one that died) imports too."""
    from distributed.utils import get_mp_context
    get_mp_context().set_forkserver_preload(list(FORKSERVER_PRELOAD))


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


def partitions_per_file(value=None) -> int | None:
    """--partitions-per-file N (`value`; None: DETECTOR_PARTITIONS_PER_FILE): every uncompressed file cut into
    N partitions; None (neither given) or auto: auto_partitions decides."""
    said = "--partitions-per-file"
    if value is None:
        value = os.environ.get(PARTITIONS_ENV) or None
        said = f"{said} (${PARTITIONS_ENV})"
    if value is None or value == "auto":
        return None
    try:
        count = int(value)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_PARTITIONS_PER_FILE:
        raise UsageError(f"{said}: '{value}' is not a number of partitions (1 to {MAX_PARTITIONS_PER_FILE}, "
                         "or auto)")
    return count


def auto_partitions(sizes: list[int], workers: int) -> list[int]:
    """Partitions for files of `sizes` bytes on `workers` workers: about PARTITIONS_PER_WORKER partitions a
    worker over the whole capture, none smaller than MIN_PARTITION_BYTES. Many files need no cutting (8 ring
    files on 2 workers: one each); one large file is cut to keep every worker busy."""
    target = max(MIN_PARTITION_BYTES, sum(sizes) // max(1, workers * PARTITIONS_PER_WORKER))
    return [max(1, min(MAX_PARTITIONS_PER_FILE, round(size / target))) for size in sizes]


def _workers(client) -> tuple[int, dict[str, int]]:
    """The cluster's worker threads, and its workers per host."""
    info = client.scheduler_info().get("workers", {})
    hosts: dict[str, int] = {}
    for address in info:
        host = address.split("://")[-1].rsplit(":", 1)[0]
        hosts[host] = hosts.get(host, 0) + 1
    return max(1, sum(int(w.get("nthreads") or 1) for w in info.values())), hosts


def _threads(client) -> int:
    """The cluster's worker threads; an embedded cluster's without starting it (one a worker)."""
    return client.workers if isinstance(client, Embedded) else _workers(client)[0]


def _size(path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0        # the survey on a worker says what is wrong


class Layout:
    """The partitions of capture files `paths` (as given; one capture) in capture order, each given as soon as its
    first global frame is known: iterate it. Each file is cut into `per_file` partitions (partitions_per_file's
    value, None: auto_partitions).

    The files are put in the order of their first packet (probe: one record each), then surveyed in that order
    (survey): on the workers, or for an embedded cluster here in a thread of its own, while the workers fold.
    A whole file's fold needs only the records of the files before it, so the first file is folded at once and
    each survey runs ahead of the folds rather than before all of them. A file cut into byte ranges is given
    once its own survey has cut it. The surveys begin as it is made (an embedded cluster's while the cluster
    starts); close() cancels those not begun. After the iteration, `parts`, `extents` (in capture order) and
    `warnings` (overlaps in time) are complete. A file that cannot be read raises its one-line error."""

    def __init__(self, client, paths, per_file=None):
        self.client = client
        self.names = [os.fspath(p) for p in paths]
        self.absolute = [os.path.abspath(name) for name in self.names]
        per_file = partitions_per_file(per_file)
        if per_file is None:
            self.counts = auto_partitions([_size(p) for p in self.absolute], _threads(client))
        else:
            self.counts = [per_file] * len(self.names)
        self._pool = None
        if isinstance(client, Embedded):
            from concurrent.futures import ThreadPoolExecutor
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="detector-survey")
        firsts = self._run(probe, [(path,) for path in self.absolute])
        self._surveys: list = []
        for name, path, extent in zip(self.names, self.absolute, (f.result() for f in firsts)):
            if extent.error:
                self.close()
                raise UsageError(extent.error.replace(path, name))
        self.order = order_by_first([f.result().first_ns for f in firsts])
        # surveyed from now on: on an embedded cluster while it starts
        self._surveys = self._run(survey, [(self.absolute[i], self.counts[i]) for i in self.order])
        self.parts: list[Partition] = []
        self.extents: list[Extent] = []
        self.warnings: list[str] = []

    def _run(self, task, calls: list[tuple]) -> list:
        """`task` over `calls`: here in one thread (embedded) or on the cluster; their futures, in order."""
        if self._pool is not None:
            return [self._pool.submit(task, *call) for call in calls]
        return [self.client.submit(task, *call, pure=False) for call in calls]

    def __iter__(self):
        surveys = self._surveys
        bar = _Bar(len(surveys), "surveying")
        try:
            frame = 1
            for place, (i, future) in enumerate(zip(self.order, surveys)):
                whole = self.counts[i] <= 1         # one partition whatever the survey finds
                if whole:
                    yield self._add(Partition(self.absolute[i], self.names[i], len(self.parts), frame, place))
                found = future.result()
                found.extent.path = self.names[i]
                if found.extent.error:
                    raise UsageError(found.extent.error.replace(self.absolute[i], self.names[i]))
                if not whole:
                    yield from (self._add(part) for part in file_parts(self.absolute[i], self.names[i], found,
                                                                       len(self.parts), frame, place))
                frame += found.extent.packets
                self.extents.append(found.extent)
                bar.step(found.extent.packets)
            self.warnings = overlap_warnings(self.extents)
        finally:
            bar.close()
            self.close()

    def close(self) -> None:
        """Cancel the surveys not begun (a run that stops early: no survey keeps the process from exiting)."""
        for future in self._surveys:
            future.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _add(self, part: Partition) -> Partition:
        self.parts.append(part)
        return part


def file_parts(path: str, name: str, found: Survey, index: int, frame: int, place: int) -> list[Partition]:
    """The partitions of file `path` (`name` as given) from its survey `found`: the file itself when it was not
    cut (its reader of the whole file, its own warnings), else its byte ranges; numbered from `index`, its first
    record at global frame `frame`, the file at `place` in capture order."""
    ranges = found.ranges
    if len(ranges) < 2:
        return [Partition(path, name, index, frame, place)]
    return [Partition(path, name, index + k, frame + part.first_frame - 1, place,
                      replace(part, first_frame=frame + part.first_frame - 1)) for k, part in enumerate(ranges)]


def lay_out(names: list[str], surveys: list[Survey]) -> tuple[list[Partition], list[Extent], list[str]]:
    """The partitions of files `names` (as given) from their `surveys`, in capture order with their global
    first frames; their extents; the overlap warnings (Layout's, with the surveys at hand: in one process). A
    file that cannot be read raises its one-line error."""
    absolute = [os.path.abspath(name) for name in names]
    for name, path, found in zip(names, absolute, surveys):
        found.extent.path = name
        if found.extent.error:
            raise UsageError(found.extent.error.replace(path, name))
    order = order_by_first([found.extent.first_ns for found in surveys])
    parts, frame = [], 1
    for place, i in enumerate(order):
        parts += file_parts(absolute[i], names[i], surveys[i], len(parts), frame, place)
        frame += surveys[i].extent.packets
    extents = [surveys[i].extent for i in order]
    return parts, extents, overlap_warnings(extents)


# What a reader says once per file whatever it meets again: a later byte range of a file that said it already
# does not say it again (the warning of its first occurrence is the one of one pass).
ONCE_PER_FILE = (TIME_OVERFLOW,)


def _not_said_again(warnings: list[str], said: list[str]) -> list[str]:
    """`warnings` of a later byte range of a file without those ONCE_PER_FILE ones the file has `said`."""
    once = [reason for reason in ONCE_PER_FILE if any(w.endswith(f": {reason}") for w in said)]
    return [w for w in warnings if not any(w.endswith(f": {reason}") for reason in once)]


def _join(captures: list[dict], folded: Folded, last_file: int | None) -> None:
    """Add a partition's capture entry to `captures`: a new file's as it is, a later range of the file before
    it joined into that file's entry (packets, warnings, interface statistics; interfaces by file-wide
    number)."""
    if folded.file != last_file or not captures:
        captures.extend(folded.captures)
        return
    entry = captures[-1]
    for more in folded.captures:
        entry["packets"] = int(entry.get("packets") or 0) + int(more.get("packets") or 0)
        entry["warnings"] = entry["warnings"] + _not_said_again(more["warnings"], entry["warnings"])
        entry["interface_stats"] = entry["interface_stats"] + more["interface_stats"]
        for number, interface in enumerate(more["interfaces"], start=folded.interface_base):
            if number >= len(entry["interfaces"]):
                entry["interfaces"].append(interface)


def fold_all(client, parts, kind: str, rules=None, site=None):
    """Fold every partition of `parts` (in capture order: a Layout gives each as soon as it is known) on the
    cluster and merge the states in capture order: (state, RunResult)."""
    if rules is not None:
        rules = _shared(client, rules)
    if site is not None:
        site = _shared(client, site)
    hosts = _workers(client)[1]
    futures = []
    try:
        for part in parts:
            futures.append(client.submit(fold, part, kind, rules, site, hosts, pure=False))
        return merge_in_order(_gather_in_order(client, futures, kind))
    except BaseException:
        client.cancel(futures)
        raise


def merge_in_order(folds) -> tuple[object, engine.RunResult]:
    """Merge the Folded answers `folds` (in capture order) into one state and the RunResult of one pass; the
    first error raises its one line."""
    run = engine.RunResult()
    merged, last_file = None, None
    for folded in folds:
        if folded.error:
            raise UsageError(folded.error)
        warnings = folded.warnings
        if folded.file == last_file and run.captures:      # a later range of the file before
            warnings = _not_said_again(warnings, run.captures[-1]["warnings"])
        _join(run.captures, folded, last_file)
        last_file = folded.file
        run.warnings.extend(warnings)
        merged = folded.state if merged is None else merged.merge(folded.state)
    return merged, run


def analyze(client, paths, rules, site, per_file=None):
    """analysis.analyze over the cluster, each file cut into `per_file` partitions (partitions_per_file):
    (analysis.Analysis, the paths in capture order)."""
    result, names, _parts = analyze_partitions(client, paths, rules, site, per_file)
    return result, names


def analyze_partitions(client, paths, rules, site, per_file=None):
    """analyze, and the partitions it cut (for the evidence pass: evidence_collector):
    (analysis.Analysis, the paths in capture order, partitions)."""
    from .analysis import conclude
    layout = Layout(client, paths, per_file)
    try:
        state, run = fold_all(client, layout, "analyze", rules, site)
    finally:
        layout.close()
    run.warnings.extend(layout.warnings)
    result = conclude(state.detectors, state.flows, state.stats, run, quality=state.quality)
    return result, list(dict.fromkeys(p.name for p in layout.parts)), layout.parts


def flow_table(client, paths, per_file=None):
    """The flow table of `paths` (one capture) over the cluster, each file cut into `per_file` partitions
    (partitions_per_file): (FlowTable, RunResult, partitions)."""
    layout = Layout(client, paths, per_file)
    try:
        table, run = fold_all(client, layout, "flows")
    finally:
        layout.close()
    run.warnings.extend(layout.warnings)
    return table, run, layout.parts


def each_entries(client, task, jobs: list[tuple[str, str]], rules_dir, report: bool, site_file) -> list[dict]:
    """analyze --each on the cluster: `task` (commands.analyze_one) per (capture, output folder), their index
    entries in order."""
    def absolute(path):
        return None if path is None else os.path.abspath(path)
    futures = [client.submit(task, absolute(path), absolute(folder), absolute(rules_dir), report,
                             absolute(site_file), pure=False) for path, folder in jobs]
    entries = list(_gather_in_order(client, futures, "analyze --each"))
    for (path, _), entry in zip(jobs, entries):      # said of the path as the command line gave it
        full, entry["capture"] = entry["capture"], path
        if entry["error"]:
            entry["error"] = entry["error"].replace(full, path)
        for warning in entry["warnings"]:
            warning["message"] = warning["message"].replace(full, path)
    return entries


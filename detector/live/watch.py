"""The watch loop: capture -> batches -> window, ring and metrics; findings -> alerts -> evidence; a clean end.

Threads and why:
- the capture's reader thread blocks in read() on the capture pipe, cuts
  what arrives into batches with the offline CaptureReader and decodes them
  (the compiled decoder runs without the GIL). A read gathers what arrives
  within 0.1 s (stream.py) and a short read ends a batch, so a batch covers
  at most about 0.1 s of a quiet link; on a busy one it holds at most
  LIVE_BATCH_PACKETS, a fraction of a second. Decoded batches wait in
  a bounded queue: if the loop falls behind, the reader stops reading, the
  pipe and then the kernel's ring fill, and the kernel's drop counter - which
  the metrics show - says so. Nothing is dropped silently in this process.
- the main thread folds batches into the window, the ring and the metrics,
  and every EVALUATE_EVERY_S asks the window for findings and incidents and
  the alert book for events, one per incident (alerts.IncidentBook),
  whether packets arrive or not (a loop that stops must resolve; a capture
  that stalls must still show its alerts).
- the evidence writer and the metrics HTTP server run in their own threads.

Failures: when the capture ends without being asked to (dumpcap died, the
interface went away), one line goes to stderr and the capture is started
again after a delay that doubles from RESTART_FIRST_S up to RESTART_MAX_S,
resetting once a run delivers packets; another line says when it runs
again. An interface that goes down without going away (no carrier) does not
end dumpcap's capture, so its operational state is watched too (sysfs,
every second): going down and coming back are each one line on stderr and
the detector_interface_up metric. The window, the alerts and the ring
live on in this process, so nothing raised before is lost.

SIGINT and SIGTERM stop the capture in order: dumpcap is asked to finish,
what it wrote is read to the end, a last evaluation flushes the alerts, the
evidence being collected is written, and findings.json with the reports of
the watched period follow. Then the exit status is 0.
"""
from __future__ import annotations

import io
import os
import queue
import signal
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..capfile import PCAP_RECORD, Segment, pcap_file_header, write_capture
from ..decode import decode
from ..errors import EXIT_OK, EXIT_RULE_FAILED, CaptureError, DetectorError, UsageError
from ..findings import SEVERITY_RANK, iso_time
from ..ingest import open_capture
from ..output import EVIDENCE, OutputDir
from ..schema import LINKTYPE_ETHERNET
from ..stats import CaptureStats
from ..units import NS, plural
from ..warmup import prepare_kernels
from .alerts import AlertLog, IncidentBook, entity_key
from .dumpcap import DumpcapCapture, find_dumpcap
from .evidence import DEFAULT_AFTER_S, EvidenceRecorder
from .metrics import Metrics
from .netdev import check_interface, is_up, rx_dropped
from .packet_socket import PacketSocketCapture
from .period import TrafficSeries, write_period
from .ring import PacketRing
from .stream import GatheringStream
from .window import SlidingWindow

# Records per batch at most: about 0.1 s of decoding, and of a link at 600,000 packets/s.
LIVE_BATCH_PACKETS = 1 << 16
# Decoded batches that may wait for the loop (bounded memory; beyond it the kernel ring absorbs bursts).
QUEUE_BATCHES = 8
# How often the window is asked for findings, and metrics refreshed: an
# alert needs at most this long after its packets were read.
EVALUATE_EVERY_S = 0.5
# Most of the main thread's time that evaluations may take; beyond it they are spaced out.
EVALUATE_SHARE_MAX = 0.25
METRICS_EVERY_S = 1.0
# Restart delays after a capture failure: first, and the cap of the doubling.
RESTART_FIRST_S = 1.0
RESTART_MAX_S = 30.0
# How long a capture may take to deliver its file header (open the interface).
START_TIMEOUT_S = 15.0
# How long the capture may take to drain after being asked to stop.
DRAIN_TIMEOUT_S = 15.0
# Capture failures and reader warnings kept for findings.json: the latest ones.
KEPT_MESSAGES = 20


@dataclass
class WatchOptions:
    iface: str
    out_dir: str | Path
    bpf: str | None = None
    rules_dir: str | None = None
    site: str | None = None         # the site file (--site), None: none
    metrics: str | None = None
    ring_seconds: float = 30.0
    min_severity: str = "low"
    evidence_after_s: float = DEFAULT_AFTER_S


def _say(text: str) -> None:
    print(f"detector: {text}", file=sys.stderr, flush=True)


def choose_capture(iface: str, bpf: str | None):
    """dumpcap when installed, else the AF_PACKET socket of this process."""
    path = find_dumpcap()
    if path is not None:
        return DumpcapCapture(iface, bpf, path)
    return PacketSocketCapture(iface, bpf)


def _warm_up(rules, site) -> None:
    """Compile and import, on one crafted packet, everything the first alert needs.

    The decoder, the detectors' kernels, scapy's dissectors (a finding's
    frame summary) and the evidence writer would otherwise load or compile
    on the first real packets, delaying the first alert by seconds.
    """
    from ..detect.display import frame_summary

    # Ethernet, IPv4 10.0.0.1 -> 10.0.0.2, UDP 520 -> 520 with 16 zero bytes: a RIP probe, which wakes
    # the RIP and loop detectors' paths too
    frame = (bytes.fromhex("02000000000102000000000208004500002c00004000401100000a0000010a000002")
             + bytes.fromhex("0208020800180000") + bytes(16))
    record = PCAP_RECORD.pack(1, 0, len(frame), len(frame)) + frame
    with open_capture(io.BytesIO(pcap_file_header(LINKTYPE_ETHERNET, 65535) + record)) as reader:
        for raw in reader:
            batch = decode(raw)
            window = SlidingWindow(rules, 0.0, site=site)
            window.update(batch, 0.0)
            window.analysis()
            with tempfile.TemporaryDirectory() as folder:
                write_capture(Path(folder) / "warm.pcap", [Segment.of(batch)])
    frame_summary(frame, 1)


class Watch:
    def __init__(self, options: WatchOptions, rules, capture, out: OutputDir, site=None):
        self.options = options
        self.rules = rules
        self.capture = capture
        self.out = out
        now = time.monotonic()
        self.window = SlidingWindow(rules, now, site=site)
        self.ring = PacketRing(options.ring_seconds)
        self.recorder = EvidenceRecorder(out, self.ring, options.evidence_after_s)
        self.book = IncidentBook(rules, options.min_severity)
        self.log = AlertLog(out.path / "alerts.jsonl")
        from ..detectors import active_detectors
        # what the rules count in every batch for the metrics (their detectors' live_counters hook)
        self.counters = [counter for det in active_detectors(rules, site) for counter in det.live_counters()]
        self.metrics = Metrics(self.counters, sorted(rules))
        self.counted = {counter.name: np.zeros(counter.values, dtype=np.int64) for counter in self.counters}
        self._counted_told = {name: counts.copy() for name, counts in self.counted.items()}
        self.stats = CaptureStats()
        self.series = TrafficSeries()
        self.batches: queue.Queue = queue.Queue(maxsize=QUEUE_BATCHES)
        self.stopping = threading.Event()
        self.started_ns = time.time_ns()
        self.restarts = 0
        # the latest failures and reader warnings, for findings.json (a capture retried for days fails often)
        self.failures: deque[str] = deque(maxlen=KEPT_MESSAGES)
        self.warnings: deque[str] = deque(maxlen=KEPT_MESSAGES)
        self.last_analysis = None       # the window's at the latest evaluation
        self._ready = threading.Event()
        self._run_packets = 0
        self._attached = False
        self._start_error: str | None = None
        self._iface_up = True

    # ---- capture runs ------------------------------------------------------
    def _start_run(self) -> None:
        self._ready.clear()
        self._run_packets = 0
        self._attached = False
        self._start_error = None
        try:
            stream = GatheringStream(self.capture.start(), self.options.iface)
        except (DetectorError, OSError) as exc:     # e.g. the interface is gone: a failed run, retried
            self._start_error = str(exc)
            self.batches.put(("end", self._start_error))
            return
        first_frame = self.stats.packets + 1
        threading.Thread(target=self._read, args=(stream, first_frame), name="detector-capture-read",
                         daemon=True).start()
        self.metrics.up.set(1)

    def _read(self, stream, first_frame: int) -> None:
        """Reader thread: the capture stream cut into decoded batches; ("end", error) when it ends."""
        error = None
        try:
            with open_capture(stream, batch_packets=LIVE_BATCH_PACKETS, first_frame=first_frame) as reader:
                self._ready.set()
                for raw in reader:
                    self.batches.put(("batch", decode(raw)))
                self.warnings.extend(reader.warnings)
        except CaptureError as exc:
            error = exc.reason
        finally:
            stream.close()
            self.batches.put(("end", error))

    def _wait_ready(self) -> None:
        """The first run must open the interface; if it cannot, that is the user's error (exit 2)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._ready.wait(0.05):
            if time.monotonic() > deadline or not self.batches.empty():
                self.capture.stop()
                self.capture.wait()
                raise UsageError(self._start_error or self.capture.failure())
        self._attached = True
        self.capture.attach_stats()

    # ---- per batch -----------------------------------------------------------
    def _fold(self, batch) -> None:
        now = time.monotonic()
        n = len(batch)
        self._run_packets += n
        self.stats.update(batch)
        self.window.update(batch, now)
        segment = Segment.of(batch)
        self.ring.add(segment)
        self.recorder.feed(segment, now)
        self.series.add(batch["ts_ns"])
        self.metrics.packets.inc(n)
        self.metrics.bytes.inc(int(batch["caplen"].sum(dtype=np.int64)))
        for counter in self.counters:
            self.counted[counter.name] += counter.count(batch)
        self.metrics.lag.set(max(0.0, time.time() - int(batch["ts_ns"].max()) / 1e9))

    # ---- periodic ------------------------------------------------------------
    def evaluate(self) -> None:
        now = time.monotonic()
        self.window.rotate(now)
        self.last_analysis = self.window.analysis()
        analysis = self.last_analysis
        for event in self.book.observe(analysis.findings, analysis.incidents, now, time.time_ns()):
            live = event.live
            if event.kind == "alert":
                seconds, ns = divmod(event.wall_ns, NS)
                stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds)) + f"{ns // 1_000_000:03d}Z"
                name = f"{EVIDENCE}/{live.alert_id}-{stamp}.pcap"
                self.book.set_evidence(live, name)
                self.recorder.start(live.alert_id, name, now)
            self.log.write(event)
            self.metrics.events.labels(rule=event.finding.rule, event_type=event.kind).inc()
        for rule, count in self.book.entities.open_counts().items():
            self.metrics.open_findings.labels(rule=rule).set(count)
        self._report_failures()

    def _report_failures(self) -> None:
        """Once per rule that failed: a line on stderr, an error event, the metric. The watch goes on."""
        while self.window.new_failures:
            failure = self.window.new_failures.pop(0)
            _say(f"error: {failure.bug_line(self.out.path / 'alerts.jsonl')}; the watch goes on without it")
            self.log.write_failure(failure)
            self.metrics.rule_failures.labels(rule=failure.rule, stage=failure.stage).inc()

    def _refresh_metrics(self, elapsed: float) -> None:
        up = is_up(self.options.iface)
        if up != self._iface_up:
            self._iface_up = up
            _say(f"{self.options.iface} is up" if up else
                 f"warning: {self.options.iface} is down or gone: no packets until it is back")
        self.metrics.iface_up.set(int(up))
        drops = self.capture.poll_drops()
        self.metrics.set_drops(drops)
        self.window.note_drops(drops, self.options.iface)
        dropped = rx_dropped(self.options.iface)
        if dropped is not None:
            self.metrics.rx_dropped.set(dropped)
        self.metrics.ring_bytes.set(self.ring.bytes)
        for name, counts in self.counted.items():
            total, rate = self.metrics.counted[name]
            fresh = counts - self._counted_told[name]
            for value, count in enumerate(fresh.tolist()):
                total.labels(str(value)).inc(count)
                if elapsed > 0:
                    rate.labels(str(value)).set(round(count / elapsed, 1))
            self._counted_told[name] = counts.copy()

    # ---- the loop ------------------------------------------------------------
    def run(self, announce) -> int:
        """Capture until SIGINT/SIGTERM, then write the period's documents; a repeated signal during
        that final write is ignored (the first one already asked for it)."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            try:
                self._start_run()
                self._wait_ready()
                announce()
                self._loop()
            except BaseException:
                self.capture.stop()
                self.capture.wait()
                raise
            return self._finish()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum, _frame) -> None:
        self.stopping.set()

    def _loop(self) -> None:
        next_eval = next_metrics = last_metrics = time.monotonic()
        restart_at: float | None = None
        delay = RESTART_FIRST_S
        stop_asked = drain_until = None
        while True:
            now = time.monotonic()
            if self.stopping.is_set() and stop_asked is None:
                stop_asked, drain_until = now, now + DRAIN_TIMEOUT_S
                if restart_at is not None:
                    return          # between runs: nothing left to drain
                self.capture.stop()
            if drain_until is not None and now > drain_until:
                _say("warning: the capture did not finish in time; stopping without its last packets")
                self.capture.wait()
                return
            if restart_at is not None and now >= restart_at:
                restart_at = None
                self.restarts += 1
                self.metrics.restarts.inc()
                self._start_run()
            timeout = max(0.0, min(next_eval, next_metrics) - now)
            try:
                kind, payload = self.batches.get(timeout=min(timeout, 0.25))
            except queue.Empty:
                kind = None
            if kind == "batch":
                self._fold(payload)
            elif kind == "end":
                self.capture.wait()
                self.metrics.up.set(0)
                if stop_asked is not None:
                    return
                # the capture's own words beat the reader's "empty file"
                why = self._start_error or self.capture.failure()
                self.failures.append(why)
                if self._run_packets:
                    delay = RESTART_FIRST_S
                _say(f"warning: capture on {self.options.iface} stopped ({why}); restarting in {delay:g} s")
                restart_at = time.monotonic() + delay
                delay = min(delay * 2, RESTART_MAX_S)
            if self._ready.is_set() and not self._attached:
                self._attached = True
                self.capture.attach_stats()
                _say(f"capture on {self.options.iface} running again")
            now = time.monotonic()
            self.recorder.tick(now)
            if now >= next_eval:
                self.evaluate()
                took = time.monotonic() - now
                self.metrics.evaluation.set(took)
                # a window whose findings take long to compute (a huge flow table to merge) is asked
                # less often, so the capture keeps being read: alerts come later, packets are not lost
                next_eval = now + max(EVALUATE_EVERY_S, took / EVALUATE_SHARE_MAX)
            if now >= next_metrics:
                self._refresh_metrics(now - last_metrics)
                last_metrics, next_metrics = now, now + METRICS_EVERY_S

    # ---- the end ---------------------------------------------------------------
    def _finish(self) -> int:
        self.evaluate()
        self.recorder.close()
        self._refresh_metrics(0.0)
        self.log.close()
        findings = self.book.entities.findings()
        tracked = {entity_key(f) for f in findings}
        findings += [f for f in self.last_analysis.findings if entity_key(f) not in tracked]
        files = []
        # an entity's evidence file is the one of the incident it was raised in, which may since have merged
        # into another: its packets are that file's
        recorded = {live.evidence_pcap: live.alert_id for live in self.book.incidents.values()}
        for entity in self.book.entities.entities.values():
            alert_id = recorded.get(entity.evidence_pcap)
            packets = self.recorder.written.get(alert_id) if alert_id is not None else None
            if packets is not None and entity.evidence_pcap:
                entity.finding.evidence["evidence_packets"] = packets
                entity.finding.evidence["pcap_filename"] = entity.evidence_pcap
                if entity.evidence_pcap not in files:
                    files.append(entity.evidence_pcap)
        capture = {
            "file": f"{self.options.iface} (live)", "interface": self.options.iface,
            "capture": self.capture.method, "bpf": self.options.bpf,
            "started": iso_time(self.started_ns), "stopped": iso_time(time.time_ns()),
            "packets": self.stats.packets, "drops": self.capture.drops, "restarts": self.restarts,
            "failures": list(self.failures), "warnings": list(self.warnings),
        }
        stats = {**self.stats.to_json(), "flows": self.last_analysis.flow_count, "flows_window_s": self.window.span_s}
        failures = list(self.window.failures.values())
        path = write_period(self.out, capture, stats, findings, self.rules, self.series, files,
                            self.last_analysis.flows, failures, self.last_analysis.quality)
        self.metrics.close()
        alerts = sum(count for (_rule, kind), count in self.log.counts.items() if kind == "alert")
        worst = max((f.severity for f in findings), key=SEVERITY_RANK.__getitem__, default=None)
        _say(f"stopped: {plural(self.stats.packets, 'packet')}, {self.capture.drops:,} dropped by the kernel, "
             f"{plural(alerts, 'alert')}{f' (worst: {worst})' if worst else ''}; findings written to {path}")
        if failures:
            _say(f"error: {plural(len(failures), 'rule')} failed while watching "
                 f"({', '.join(f.rule for f in failures)}): a bug in detector; their tracebacks are in {path}")
            return EXIT_RULE_FAILED
        return EXIT_OK


def watch(options: WatchOptions) -> int:
    """`detector watch`: check everything a user can get wrong, then run until SIGINT/SIGTERM."""
    from ..rules import load_rules
    from ..site import load_site

    if options.ring_seconds <= 0:
        raise UsageError(f"--ring-seconds must be positive, got {options.ring_seconds:g}")
    if options.min_severity not in SEVERITY_RANK:
        raise UsageError(f"--alert-severity: unknown severity '{options.min_severity}' "
                         f"(one of {', '.join(SEVERITY_RANK)})")
    rules = load_rules(options.rules_dir)
    site = load_site(options.site)
    check_interface(options.iface)
    capture = choose_capture(options.iface, options.bpf)
    capture.preflight()
    if options.metrics is not None:
        from .metrics import parse_address
        parse_address(options.metrics)
    out = OutputDir(options.out_dir, rule_ids=rules, staged=False)
    try:
        if not os.access(out.path, os.W_OK):
            raise UsageError(f"{out.path}: not writable")
        prepare_kernels(sys.stderr)
        _warm_up(rules, site)
        out.clear()
        out.evidence_folder()
        watcher = Watch(options, rules, capture, out, site)
        url = watcher.metrics.serve(options.metrics) if options.metrics is not None else None

        def announce() -> None:
            how = "dumpcap" if capture.method == "dumpcap" else "an AF_PACKET socket (dumpcap not found)"
            where = f"; metrics at {url}" if url else ""
            _say(f"watching {options.iface} through {how}; alerts to {out.path / 'alerts.jsonl'}{where}")
            if capture.live_drops is False:
                _say(f"warning: capture drops are known only when the capture stops ({capture.live_drops_reason})")

        try:
            return watcher.run(announce)
        except BaseException:
            watcher.metrics.close()
            raise
    finally:
        out.close()

"""The evidence pass on a Dask cluster's workers (cluster.evidence_collector): the evidence pcaps, the series and
the rules' figures of one process, with the client reading no capture.

Each partition gathers what it holds (report.evidence.gather: its evidence frames, its packets per bin, copies of
the figures fed its batches); the client joins them in capture order (report.evidence.join), each figure merging
its copies (ReportFigure.merge). First every figure class's merge against one pass, in process, over the byte
ranges of a bundled capture that draws it; then end to end on a LocalCluster of two worker processes.
"""
from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np
import pytest

import detector.detectors  # noqa: F401  (registers every detector, so every figure class is defined)
from detector import cluster, commands
from detector import report as report_package
from detector.analysis import analyze
from detector.detect.figure import ReportFigure
from detector.detectors import pmtud_blackhole
from detector.errors import UsageError
from detector.report import evidence
from detector.rules import load_rules
from detector.site import load_site

pytest.importorskip("distributed")

CAPTURES = Path(__file__).resolve().parents[1] / "captures"

# a bundled capture whose findings draw each figure class (report.evidence.rule_figures)
DRAWN_BY = {
    "LossFigure": "loss-every-nth-segment.pcap",
    "ConcurrencyFigure": "session-storm-flood.pcap",
    "AttemptsFigure": "session-storm-flood.pcap",
    "NewFlowsFigure": "session-storm-flood.pcap",
    "CopiesFigure": "echo-loop-rip-ipv4.pcapng",
    "RttFigure": "handshake-rtt-jump.pcap",
    "RateFigure": "ospf-storm-flapping.pcap",
    "SegmentsFigure": "pmtud-blackhole-busy.pcapng",
    "QueueShareFigure": "rss-elephant-flow.pcap",
    "SynRateFigure": "syn-flood-spoofed.pcap",
    "FloodFigure": "unicast-flood-mirror.pcap",
    "TimelineFigure": "vrrp-failover.pcapng",
}


def figure_classes() -> set[str]:
    def below(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from below(sub)
    return {cls.__name__ for cls in below(ReportFigure) if cls.__module__.startswith("detector.")}


def state(figure) -> dict:
    """What a figure keeps for its drawing, comparable: its arrays and plain values, the points of a bounded
    sample (SegmentsFigure: however its batches fell), not the objects it was built with (detector, finding)."""
    kept = {}
    for name, value in vars(figure).items():
        if name == "parts":
            kept[name] = [(column.dtype.str, column.tolist()) for column in figure.points()]
        elif isinstance(value, np.ndarray):
            kept[name] = (value.dtype.str, value.shape, value.tolist())
        elif isinstance(value, (int, float, str, tuple, list, np.generic)):
            kept[name] = _plain(value)
    return kept


def _plain(value):
    """`value` with its arrays (inside lists, tuples and dicts too) as lists: comparable with ==."""
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tolist())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def one_capture(name: str):
    """(path, analysis, time bins, the figures as built and pickled) of bundled capture `name`."""
    path = str(CAPTURES / name)
    site = CAPTURES / (name.split(".")[0] + ".site.yaml")
    result = analyze([path], load_rules(), label="test", site=load_site(site if site.exists() else None))
    bins = evidence.time_bins(result.stats.first_ns, result.stats.last_ns)
    built = pickle.dumps(evidence.rule_figures(result.detectors, result.findings, bins))
    return path, result, bins, built


def test_every_figure_class_has_a_capture_here():
    assert figure_classes() == set(DRAWN_BY)


@pytest.mark.parametrize("cls", sorted(DRAWN_BY))
@pytest.mark.parametrize("parts", [2, 5])
def test_a_figure_merged_over_partitions_is_its_one_pass(cls, parts, monkeypatch):
    if cls == "SegmentsFigure":     # a bound that falls inside a partition, and partitions past it
        monkeypatch.setattr(pmtud_blackhole, "SEGMENT_POINTS_MAX", 12)
    path, result, bins, built = one_capture(DRAWN_BY[cls])
    one = pickle.loads(built)
    evidence.collect([path], result.findings, bins, one)
    ranges, _, _ = cluster.lay_out([path], [cluster.survey(path, parts)])
    assert len(ranges) == parts
    merged = pickle.loads(built)
    for part in ranges:
        copies = pickle.loads(built)        # as a worker gets them: the figures as built
        evidence.gather([part.source], evidence._wanted(result.findings), bins, copies,
                        first_frame=part.first_frame)
        copies = pickle.loads(pickle.dumps(copies))         # and ships them back
        for figure, copy in zip(merged, copies):
            assert figure.merge(copy) is figure
    drawn = [(type(a).__name__, state(a)) for a in one]
    assert cls in [name for name, _ in drawn]
    assert [(type(b).__name__, state(b)) for b in merged] == drawn
    if cls == "SegmentsFigure":
        segments = next(f for f in one if type(f).__name__ == cls)
        assert segments.kept == 12 == len(segments.points()[0])


@pytest.mark.parametrize("cls", sorted(DRAWN_BY))
def test_a_figure_that_needs_no_batches_keeps_nothing_of_them(cls):
    """A figure the evidence pass does not feed (needs_batches False) must keep nothing of that pass's batches,
    or it would lose it; one that needs them must keep something of its capture's."""
    from detector.engine import decoded_batches

    path, _result, _bins, built = one_capture(DRAWN_BY[cls])
    [figure] = [f for f in pickle.loads(built) if type(f).__name__ == cls][:1]
    before = state(figure)
    for _reader, batch in decoded_batches([path], fingerprint=figure.needs_fingerprint):
        figure.add(batch)
    assert (state(figure) == before) == (not figure.needs_batches)


def test_a_figure_without_a_merge_keeps_the_pass_in_the_client(tmp_path):
    class Unmergeable(ReportFigure):
        title = "no merge"

        def __init__(self):
            self.batches = 0

        def add(self, batch):
            self.batches += 1

        def draw(self, ax, flows):
            pass

    class Detector:
        rule_id = "test-only"
        REPRODUCES = None

        def figures(self, findings, bins):
            return [Unmergeable()]

    def collector(*_):
        raise AssertionError("a figure that cannot merge went to the workers")

    path, result, _, _ = one_capture("vrrp-failover.pcapng")
    from detector.output import OutputDir
    with OutputDir(tmp_path / "out", load_rules()) as out:
        written = evidence.write_evidence([path], result.findings, out, result.stats.first_ns, result.stats.last_ns,
                                          [Detector()], collector=collector)
    assert not evidence.mergeable(written.figures)
    assert written.figures[0].batches >= 1
    with pytest.raises(NotImplementedError, match="Unmergeable cannot merge"):
        Unmergeable().merge(Unmergeable())


# ---- on a cluster ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as local, \
            Client(local) as dask_client:
        yield dask_client


def run(paths, out: Path, monkeypatch, **options):
    """commands.analyze into `out`: (findings.json text, report.md text, evidence files' bytes by name, the
    EvidenceResult the reports were drawn from)."""
    seen = []
    write_reports = report_package.write_reports

    def keep(out_dir, document, findings, rules, result, *more):
        seen.append(result)
        return write_reports(out_dir, document, findings, rules, result, *more)
    with monkeypatch.context() as patch:
        patch.setattr(report_package, "write_reports", keep)
        *_, path = commands.analyze(paths, out, **options)
    files = {p.name: p.read_bytes() for p in sorted((out / "evidence").iterdir())} \
        if (out / "evidence").exists() else {}
    return path.read_text(), (out / "report.md").read_text(), files, seen[0]


def no_capture_read_here(monkeypatch):
    """The client's evidence pass, made to fail: it reads captures through report.evidence.decoded_batches."""
    def refuse(*_, **__):
        raise AssertionError("the client read a capture in the evidence pass")
    monkeypatch.setattr(evidence, "decoded_batches", refuse)


def same_evidence(a, b) -> None:
    findings_a, md_a, files_a, result_a = a
    findings_b, md_b, files_b, result_b = b
    assert findings_b == findings_a
    assert md_b == md_a
    assert files_a and list(files_b) == list(files_a)
    for name in files_a:
        assert files_b[name] == files_a[name], name
    assert np.array_equal(result_b.series.packets, result_a.series.packets)
    assert (result_b.series.start_ns, result_b.series.bin_ns) == (result_a.series.start_ns, result_a.series.bin_ns)
    assert result_b.frames == result_a.frames and result_b.summaries == result_a.summaries
    assert [(type(f).__name__, state(f)) for f in result_b.figures] == \
        [(type(f).__name__, state(f)) for f in result_a.figures]
    assert result_a.figures


# Captures whose partitioned findings differ from one pass (tests/test_cluster.py INEXACT): the workers' evidence
# pass is compared with the client's over the same cluster findings.
@pytest.mark.parametrize("name", ["syn-flood-spoofed.pcap", "pmtud-blackhole-busy.pcapng", "echo-loop-rip-ipv4.pcapng",
                                  "rss-elephant-flow.pcap", "two-incidents-at-once.pcapng"])
def test_the_workers_evidence_pass_is_the_clients(client, tmp_path, monkeypatch, name):
    paths = [str(CAPTURES / name)]
    with monkeypatch.context() as patch:
        patch.setattr(cluster, "evidence_collector", lambda *_: None)       # the client's one pass
        in_client = run(paths, tmp_path / "client", monkeypatch, client=client, partitions_per_file=3)
    no_capture_read_here(monkeypatch)
    on_workers = run(paths, tmp_path / "workers", monkeypatch, client=client, partitions_per_file=3)
    same_evidence(in_client, on_workers)


# Captures the cluster analyses exactly as one process (not in tests/test_cluster.py INEXACT or INEXACT_IN_RANGES)
@pytest.mark.parametrize("name", ["ospf-storm-flapping.pcap", "session-storm-flood.pcap", "vrrp-failover.pcapng",
                                  "unicast-flood-mirror.pcap", "scan-port-scan.pcap"])
def test_the_cluster_writes_the_evidence_of_one_process(client, tmp_path, monkeypatch, name):
    paths = [str(CAPTURES / name)]
    one = run(paths, tmp_path / "one", monkeypatch)
    no_capture_read_here(monkeypatch)
    many = run(paths, tmp_path / "many", monkeypatch, client=client, partitions_per_file=3)
    same_evidence(one, many)


def test_a_capture_that_breaks_between_the_passes_is_one_line(client, tmp_path):
    # the evidence tasks' error, as a fold's: one line naming the file as given, and why on this machine (the
    # embedded cluster's workers are this machine's)
    capture = tmp_path / "gone.pcap"
    capture.write_bytes((CAPTURES / "ospf-storm-flapping.pcap").read_bytes())
    result, _, parts = cluster.analyze_partitions(client, [str(capture)], load_rules(), None, 3)
    capture.unlink()
    bins = evidence.time_bins(result.stats.first_ns, result.stats.last_ns)
    figures = evidence.rule_figures(result.detectors, result.findings, bins)
    with pytest.raises(UsageError, match=rf"^{re.escape(str(capture))}: no such file$"):
        cluster.evidence_collector(client, parts)(evidence._wanted(result.findings), bins, figures)

"""A bug in one detector costs its own rule only: real detectors made to fail on real capture bytes.

Each test replaces one detector's method by a wrapper that raises on a given
frame (or stage) and runs the real pipeline: `detector analyze` (exit 4,
findings.json/jsonl and the reports written with the failure recorded), the
notebook API (a warning and `Capture.failures`), the watch's sliding window,
and `detector watch` live (the rule stops, an error event, a metric, the watch
goes on). The suite runs with DETECTOR_RAISE_FAILURES=1 (conftest.py); these
tests switch it off to see the isolation, and one checks that it is on.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import detector
from detector.commands import analyze
from detector.detectors import RAISE_ENV, REGISTRY
from detector.rules import load_rules
from tests import test_watch as live
from tests.test_watch import netns, watchers  # noqa: F401  (the live test's fixtures: a namespace, its watches)

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "captures"
LOOP = CAPTURES / "echo-loop-rip-ipv4.pcapng"
# The frame the tests make rip-trigger's update fail on, and the batch size that puts it in batch 3.
FAILING_FRAME = 2500
BATCH_PACKETS = 1000

# Python run as `detector analyze` with rip-trigger's update failing on FAILING_FRAME and small batches
# (argv: the command line's arguments).
FAILING_CLI = f"""
import sys
import detector.engine as engine
import detector.ingest as ingest
from detector.cli import main
from detector.detectors import REGISTRY

cls = REGISTRY["rip-trigger"]
original = cls.update

def update(self, batch):
    if ({FAILING_FRAME} == batch["frame"]).any():
        raise IndexError("index 70000 is out of bounds for axis 0 with size 1500")
    original(self, batch)

cls.update = update
engine.read_captures = lambda paths, **kw: ingest.read_captures(paths, **{{**kw, "batch_packets": {BATCH_PACKETS}}})
sys.exit(main(sys.argv[1:]))
"""


def _env_without_switch() -> dict:
    env = dict(os.environ)
    env.pop(RAISE_ENV, None)
    return env


def _fail_on_frame(monkeypatch, rule: str, frame: int) -> None:
    cls = REGISTRY[rule]
    original = cls.update

    def update(self, batch):
        if (batch["frame"] == frame).any():
            raise IndexError(f"frame {frame}: index 70000 is out of bounds")
        original(self, batch)
    monkeypatch.setattr(cls, "update", update)


def test_the_suite_raises_on_any_detector_failure(monkeypatch, tmp_path):
    """conftest.py sets the switch for this process and every command it starts: a recorded failure
    cannot pass a test unnoticed."""
    assert os.environ.get(RAISE_ENV) == "1"
    _fail_on_frame(monkeypatch, "rip-trigger", 1)
    with pytest.raises(IndexError, match="frame 1"):
        analyze([str(LOOP)], tmp_path / "out")
    proc = subprocess.run([sys.executable, "-c", FAILING_CLI, "analyze", str(LOOP), "-o", str(tmp_path / "cli")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "IndexError" in proc.stderr


def test_analyze_writes_the_other_rules_findings_and_exits_4(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", FAILING_CLI, "analyze", str(LOOP), "-o", str(out),
                           "--fail-on", "info"], capture_output=True, text=True, timeout=300,
                          env=_env_without_switch())
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("detector: error:")]
    assert len(errors) == 1
    assert "rule rip-trigger failed in update() at frames 2001-3000 (batch 3 of" in errors[0]
    assert "a bug in detector" in errors[0] and str(out / "findings.json") in errors[0]

    document = json.loads((out / "findings.json").read_text())
    (failure,) = document["failures"]
    assert {k: failure[k] for k in ("rule", "stage", "error", "batch", "frames", "capture")} == {
        "rule": "rip-trigger", "stage": "update", "error": "IndexError", "batch": 3, "frames": [2001, 3000],
        "capture": str(LOOP)}
    assert "out of bounds" in failure["message"]
    assert "IndexError" in failure["traceback"] and "in update" in failure["traceback"]
    assert len(failure["traceback"]) < 10_000
    # the other rules saw every batch, before and after the failure: the loop is whole, with its evidence
    (loop,) = [f for f in document["findings"] if f["rule"] == "echo-loop"]
    assert loop["n"] == 6000 and loop["severity"] == "critical"
    assert (out / loop["evidence_pcap"]).is_file()
    assert [f["rule"] for f in document["findings"]] == ["echo-loop"]
    assert document["stats"]["packets"] == 6532

    events = [json.loads(line) for line in (out / "findings.jsonl").read_text().splitlines()]
    # the loop without its probe is an incident of its own
    assert [e["event_type"] for e in events] == ["alert", "finding", "incident", "failure"]
    assert events[2]["incident"]["root_cause"]["rule"] == "echo-loop"
    assert events[3]["failure"] == failure and events[3]["timestamp"].endswith("+0000")
    markdown = (out / "report.md").read_text()
    assert "## Rules that did not run to the end" in markdown
    assert "rip-trigger failed: its findings may be missing" in markdown
    assert markdown.index("did not run to the end") < markdown.index("## Findings by severity")
    page = (out / "report.html").read_text()
    assert "rip-trigger failed: its findings may be missing" in page and "IndexError" in page


def test_a_failure_in_findings_leaves_the_rules_after_it_running(monkeypatch, tmp_path):
    """echo-loop fails when asked for findings; rip-trigger, which reads its findings, still reports the
    probe (without the loop it cannot see)."""
    monkeypatch.delenv(RAISE_ENV)

    def findings(self, ctx):
        raise ZeroDivisionError("division by zero")
    monkeypatch.setattr(REGISTRY["echo-loop"], "findings", findings)
    found, result, path = analyze([str(LOOP)], tmp_path / "out")
    assert [f.rule for f in found] == ["rip-trigger"]
    assert found[0].severity == "medium"          # critical only with the loop counted
    (failure,) = result.failures
    assert (failure.rule, failure.stage, failure.error, failure.frames) == ("echo-loop", "findings",
                                                                           "ZeroDivisionError", None)
    assert json.loads(path.read_text())["failures"][0]["stage"] == "findings"


def test_notebook_api_warns_and_lists_the_failure(monkeypatch):
    monkeypatch.delenv(RAISE_ENV)
    _fail_on_frame(monkeypatch, "rip-trigger", 3000)
    capture = detector.open(LOOP)
    with pytest.warns(RuntimeWarning, match="rule rip-trigger failed in update.*a bug in detector"):
        findings = capture.findings
    assert findings["rule"].tolist() == ["echo-loop"]
    (failure,) = capture.failures
    assert failure["rule"] == "rip-trigger" and failure["frames"] == [1, 6532]


def _batches(path, size):
    from detector.decode import decode
    from detector.ingest import open_capture

    with open_capture(path, batch_packets=size) as reader:
        return [decode(raw) for raw in reader]


def test_the_watch_window_stops_a_rule_that_fails_to_merge(monkeypatch):
    """The window merges its slices' states; rip-trigger's merge fails: it stops in every slice, once
    reported, and echo-loop's findings still come."""
    from detector.live.window import SlidingWindow

    monkeypatch.delenv(RAISE_ENV)
    cls = REGISTRY["rip-trigger"]
    updates = []
    original_update = cls.update

    def update(self, batch):
        updates.append(len(batch))
        original_update(self, batch)

    def merge(self, other):
        raise ValueError("cannot merge")
    monkeypatch.setattr(cls, "update", update)
    monkeypatch.setattr(cls, "merge", merge)
    window = SlidingWindow(load_rules(), now=0.0, slice_s=1.0, slices=6)
    batches = _batches(LOOP, 1000)
    for k, batch in enumerate(batches):
        window.update(batch, now=float(k))          # one slice per batch
    found = window.analysis().findings
    assert "echo-loop" in {f.rule for f in found} and "rip-trigger" not in {f.rule for f in found}
    (failure,) = window.new_failures
    assert (failure.rule, failure.stage, failure.error) == ("rip-trigger", "merge", "ValueError")
    window.new_failures.clear()
    seen = len(updates)
    window.update(batches[0], now=float(len(batches)))      # a new slice: the rule stays stopped
    window.analysis()
    assert len(updates) == seen and window.new_failures == []
    assert list(window.failures) == ["rip-trigger"]


# sitecustomize for the live watch below: the real `detector` command, with rip-trigger's update failing on
# the first batch that holds a RIP packet (UDP to port 520)
LIVE_FAILURE = """
from detector.detectors import REGISTRY

cls = REGISTRY["rip-trigger"]
original = cls.update

def update(self, batch):
    if (batch["dest_port"] == 520).any():
        raise IndexError("index 70000 is out of bounds for axis 0 with size 1500")
    original(self, batch)

cls.update = update
"""


@pytest.mark.skipif(live._why_not() is not None, reason=live._why_not() or "")
def test_live_watch_goes_on_when_a_rule_fails(netns, watchers, tmp_path):  # noqa: F811 - fixtures
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(LIVE_FAILURE)
    env = _env_without_switch()
    env["PYTHONPATH"] = str(site)
    out = tmp_path / "watch"
    watcher = live.Watcher(netns, out, env=env)
    watchers.append(watcher)
    live.replay(netns, LOOP)
    watcher.wait_for("echo-loop")
    _at, error = watcher.wait_for("rip-trigger", kind="error")
    assert (error["failure"]["stage"], error["failure"]["error"]) == ("update", "IndexError")
    assert error["msg"].startswith("rule rip-trigger failed in update()")
    # the failure is counted once, and the capture went on to the capture's last packet
    deadline = time.monotonic() + 20
    metrics = watcher.metrics()
    while (metrics.get('detector_rule_failures_total{rule="rip-trigger",stage="update"}') != 1
           or metrics["detector_packets_total"] < 6532):
        assert time.monotonic() < deadline, metrics
        time.sleep(0.5)
        metrics = watcher.metrics()
    assert watcher.terminate() == 4
    assert len(watcher.events("error")) == 1
    stderr = watcher.stderr()
    assert "Traceback" not in stderr
    assert sum("rule rip-trigger failed in update()" in line for line in stderr.splitlines()) == 1
    document = json.loads((out / "findings.json").read_text())
    assert [f["rule"] for f in document["failures"]] == ["rip-trigger"]
    assert "echo-loop" in {f["rule"] for f in document["findings"]}


def test_set_records_at_most_one_failure_per_rule(monkeypatch):
    """A rule that failed is asked nothing more: its first failure is the one kept."""
    from detector.detectors import DetectorSet, active_detectors

    monkeypatch.delenv(RAISE_ENV)
    calls = []

    def update(self, batch):
        calls.append(int(batch["frame"][0]))
        raise KeyError("x")
    monkeypatch.setattr(REGISTRY["routing-loop"], "update", update)
    detectors = DetectorSet(active_detectors(load_rules()))
    for batch in _batches(LOOP, 1000):
        detectors.update(batch)
    assert calls == [1]
    assert detectors.failure_list()[0].frames == [1, 1000]
    assert [d.rule_id for d in detectors.running()] == [r for r in detectors.rule_ids if r != "routing-loop"]

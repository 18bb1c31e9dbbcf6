"""The rules in a thread of their own behind the flow table (analysis._RulesThread): the same findings as one
thread gives, and a failure outside any rule raised in the caller, with no thread left behind."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from detector import analysis
from detector.detect.runner import DetectorSet
from detector.rules import load_rules

CAPTURES = Path(__file__).resolve().parent.parent / "captures"
# rules that read the flow table's per-batch events (capture-loss), frames' bytes (routing-loop, echo-loop),
# handshakes (syn-flood, scan) and the edges of batches
CASES = ["loss-every-nth-segment.pcap", "echo-loop-rip-ipv4.pcapng", "syn-flood-ingress-only.pcap",
         "scan-port-scan.pcap", "loss-interface-drops.pcapng"]


def _findings(path: Path, pipelined: bool, batch_packets: int) -> list[dict]:
    state = analysis.AnalysisState(load_rules(), pipelined=pipelined)
    try:
        run = analysis.engine.run([str(path)], [state], show_progress=False, batch_packets=batch_packets)
    finally:
        state.finish()
    found = analysis.conclude(state.detectors, state.flows, state.stats, run, quality=state.quality)
    assert not found.failures
    return [f.to_json() for f in found.findings]


@pytest.mark.parametrize("name", CASES)
def test_the_rules_thread_finds_what_one_thread_finds(name):
    # small batches: many hand-overs, each batch's flow events set before the rules read them
    one = _findings(CAPTURES / name, pipelined=False, batch_packets=512)
    assert one, f"{name} should draw findings"
    assert _findings(CAPTURES / name, pipelined=True, batch_packets=512) == one


def test_a_failure_outside_the_rules_is_raised_in_the_caller(monkeypatch):
    def broken(self, batch):
        raise MemoryError("the rules' thread ran out")
    monkeypatch.setattr(DetectorSet, "update", broken)
    with pytest.raises(MemoryError, match="ran out"):
        analysis.analyze([str(CAPTURES / "scan-port-scan.pcap")])
    assert not [t for t in threading.enumerate() if t.name == "detector-rules"]

"""What the rules' tests share: one rule's detector, and a capture's findings in one pass and in two halves."""
from __future__ import annotations

from pathlib import Path

from detector.decode import decode
from detector.detect.detector import AnalysisContext
from detector.detectors import active_detectors
from detector.ingest import read_captures
from detector.rules import load_rules
from detector.schema import PacketBatch
from detector.stats import CaptureStats


def detector(rule_id: str, site=None, rules=None):
    """A fresh detector of `rule_id`, from the rule files (or `rules`), with the site file `site`."""
    return next(d for d in active_detectors(rules or load_rules(), site) if d.rule_id == rule_id)


def batch_of(path) -> PacketBatch:
    """The one decoded batch of a small capture."""
    (batch,) = [decode(raw) for _, raw in read_captures([str(Path(path))])]
    return batch


def rows(batch: PacketBatch, start: int, stop: int | None = None) -> PacketBatch:
    """Rows [start, stop) of `batch`, over the same frame bytes."""
    return PacketBatch(data=batch.data, cols={name: col[start:stop] for name, col in batch.cols.items()})


def one_pass_and_halves(path, make, cut: int | None = None, later_first: bool = True) -> tuple[list, list]:
    """The findings (JSON) of `path` folded by one detector from `make()`, and by two folding its halves (cut at
    row `cut`, default the middle) then merged: the later half into the earlier one, or the earlier into the
    later (`later_first`) — merge must not depend on the order it is called in."""
    batch = batch_of(path)
    ctx = AnalysisContext(flows=None, stats=CaptureStats())
    whole = make()
    whole.update(batch)
    cut = len(batch) // 2 if cut is None else cut
    left, right = make(), make()
    left.update(rows(batch, 0, cut))
    right.update(rows(batch, cut))
    merged = right.merge(left) if later_first else left.merge(right)
    return [f.to_json() for f in whole.findings(ctx)], [f.to_json() for f in merged.findings(ctx)]

"""A capture cut into files at chosen frames, and its findings from one pass and from its parts merged.

What a cluster computes (detector.cluster: each part folded into a fresh state from its first global frame,
shipped as a pickle, merged in capture order) without starting one, to put a cut at the worst place for a
detector: between a SYN and the segments it limits, inside a loop's burst, between a probe and its answer.
"""
from __future__ import annotations

import json
import pickle
import subprocess
from itertools import pairwise
from pathlib import Path

from detector import cluster
from detector.analysis import analyze, conclude
from detector.engine import RunResult
from detector.report import findings_document
from detector.rules import load_rules


def cut(capture: Path, folder: Path, starts: list[int]) -> list[str]:
    """`capture` as files of consecutive packets (editcap), a new one beginning at each frame of `starts`."""
    folder.mkdir(parents=True, exist_ok=True)
    total = cluster.count_records(str(capture)).packets
    bounds = [1, *sorted(starts), total + 1]
    suffix = capture.name.rsplit(".", 1)[1]
    paths = []
    for index, (first, end) in enumerate(pairwise(bounds)):
        path = folder / f"part{index:02d}.{suffix}"
        subprocess.run(["editcap", "-r", str(capture), str(path), f"{first}-{end - 1}"], check=True)
        paths.append(str(path))
    return paths


def merged(paths, rules, site=None, tree: bool = False):
    """The Analysis of the parts folded one by one, pickled and merged in capture order: one after the other,
    or (`tree`) neighbours in pairs, then those in pairs, as a tree reduction does."""
    run, states, frame = RunResult(), [], 1
    for index, path in enumerate(paths):
        extent = cluster.count_records(path)
        folded = pickle.loads(pickle.dumps(
            cluster.fold(cluster.Partition(path, path, index, frame), "analyze", rules, site)))
        frame += extent.packets
        run.captures += folded.captures
        states.append(folded.state)
    while len(states) > 1:
        if tree:
            states = [states[i].merge(states[i + 1]) if i + 1 < len(states) else states[i]
                      for i in range(0, len(states), 2)]
        else:
            states = [states[0].merge(states[1]), *states[2:]]
    state = states[0]
    return conclude(state.detectors, state.flows, state.stats, run, quality=state.quality)


def findings(result, rule: str | None = None) -> list[dict]:
    """The findings as findings.json writes them (incident ids left out), of `rule` or all."""
    document = findings_document(result.captures, {**result.stats.to_json(), "flows": result.flow_count},
                                 result.findings, result.failures)
    out = json.loads(json.dumps(document["findings"], default=str))
    for finding in out:
        finding.pop("incident_id", None)
    return [f for f in out if rule is None or f["rule"] == rule]


def one_and_merged(paths, rule: str | None = None, rules=None, site=None,
                   tree: bool = False) -> tuple[list[dict], list[dict]]:
    """The findings (of `rule`, or all) of one pass over `paths` and of the parts merged (`tree`: see merged)."""
    rules = load_rules() if rules is None else rules
    return findings(analyze(paths, rules, site=site), rule), findings(merged(paths, rules, site, tree), rule)

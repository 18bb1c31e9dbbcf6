"""Live alerts: findings of the sliding window become de-duplicated events, per rule and entity.

The detectors report what the current window holds, again and again as it
slides; this module turns that into news. Each finding names an *entity*,
its `identifier` (what it is about: a looping frame, a probing source, a
flow, a receive queue; its detector knows which), and each (rule, entity)
moves through:

    unseen --finding--> open --unseen for resolve_s--> resolved --seen again--> open

emitting one event per move, in the finding's own JSON plus:
- `alert`: first crossing. Also when a resolved entity comes back, unless
  its previous `alert` is less than the rule's `suppress_s` ago: then the
  comeback is an `update` (Zeek's notice suppression: one alert per entity
  per interval, and nothing is lost - the event still goes out).
- `update`: still going on and changed, at most every `suppress_s`; at once
  when its severity rises (an escalation is never held back).
- `resolved`: no new activity (the finding's last_seen did not advance, or
  the finding left the window) for the rule's `resolve_s`.
Every event carries `alert_id` (one per entity: its rule and a number,
"<rule>-1"), the wall-clock `timestamp` of the event, and the
`evidence_pcap` of the entity's latest alert. A rule whose detector failed
(a bug: it stops, the watch goes on) is one event of its own, `error`, with
the failure's record under "failure". Only findings at or above the alert severity open an entity;
an open one follows its finding whatever the severity does next.

The timing uses the monotonic clock of this process, not packet times, so
a capture whose timestamps jump cannot hold an alert back or resolve it.
Noise control lives here, beside the detectors, not inside them.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass

from ..findings import SEVERITY_RANK, Finding, iso_time
from ..rules import ALERT_KEYS

# Entities remembered at most; beyond it the longest-resolved are forgotten
# (their events are in alerts.jsonl already). Bounds memory under a flood of
# distinct probes, each its own entity.
MAX_ENTITIES = 10_000


def entity_key(finding: Finding) -> tuple[str, str | None]:
    """The entity a finding is about: its rule and the identifier its detector gave it."""
    return finding.rule, finding.identifier


@dataclass
class Tracked:
    alert_id: str
    finding: Finding
    open: bool
    last_event: float          # monotonic seconds of the last alert/update
    last_alert: float
    last_activity: float       # when its last_seen last advanced
    last_seen_ns: int
    rank_told: int             # severity rank of the last event
    evidence_pcap: str | None = None
    resolved_at: float = 0.0


@dataclass
class Event:
    kind: str                  # alert, update, resolved
    tracked: Tracked
    wall_ns: int

    def to_json(self) -> dict:
        finding = self.tracked.finding
        finding.evidence_pcap = self.tracked.evidence_pcap
        return {"event_type": self.kind, "timestamp": iso_time(self.wall_ns), "alert_id": self.tracked.alert_id,
                **finding.to_json()}


class AlertBook:
    """The state of every entity seen; observe() turns each window's findings into events."""

    def __init__(self, rules: dict, min_severity: str = "low"):
        self.rules = rules
        self.min_rank = SEVERITY_RANK[min_severity]
        self.entities: dict[tuple, Tracked] = {}
        self._counters: dict[str, int] = {}

    def _interval(self, rule: str, name: str) -> float:
        return getattr(self.rules[rule], name) if rule in self.rules else ALERT_KEYS[name]

    def observe(self, findings: list[Finding], now: float, wall_ns: int) -> list[Event]:
        """Events for this evaluation of the window (`now`: monotonic seconds)."""
        events: list[Event] = []
        for finding in findings:
            key = entity_key(finding)
            tracked = self.entities.get(key)
            seen_ns = finding.last_seen or finding.first_seen or 0
            if tracked is None:
                if finding.rank < self.min_rank:
                    continue
                rule = finding.rule
                self._counters[rule] = self._counters.get(rule, 0) + 1
                tracked = Tracked(alert_id=f"{rule}-{self._counters[rule]}", finding=finding, open=True,
                                  last_event=now, last_alert=now, last_activity=now, last_seen_ns=seen_ns,
                                  rank_told=finding.rank)
                self.entities[key] = tracked
                events.append(Event("alert", tracked, wall_ns))
                continue
            advanced = seen_ns > tracked.last_seen_ns
            tracked.finding = finding
            suppress = self._interval(finding.rule, "suppress_s")
            if advanced:
                tracked.last_seen_ns = seen_ns
                tracked.last_activity = now
            if tracked.open and finding.rank > tracked.rank_told:
                kind = "update"          # an escalation goes out at once, news or not
            elif not advanced:
                continue
            elif not tracked.open:
                tracked.open = True
                kind = "alert" if now - tracked.last_alert >= suppress else "update"
            elif now - tracked.last_event >= suppress:
                kind = "update"
            else:
                continue
            tracked.last_event = now
            tracked.rank_told = finding.rank
            if kind == "alert":
                tracked.last_alert = now
            events.append(Event(kind, tracked, wall_ns))
        for tracked in self.entities.values():
            if tracked.open and now - tracked.last_activity >= self._interval(tracked.finding.rule, "resolve_s"):
                tracked.open = False
                tracked.resolved_at = now
                events.append(Event("resolved", tracked, wall_ns))
        self._bound()
        return events

    def _bound(self) -> None:
        if len(self.entities) <= MAX_ENTITIES:
            return
        closed = sorted((t.resolved_at, key) for key, t in self.entities.items() if not t.open)
        for _when, key in closed[:len(self.entities) - MAX_ENTITIES]:
            del self.entities[key]

    def open_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(self.rules, 0)
        for tracked in self.entities.values():
            if tracked.open:
                counts[tracked.finding.rule] = counts.get(tracked.finding.rule, 0) + 1
        return counts

    def findings(self) -> list[Finding]:
        """The latest finding of every entity, with its evidence file (for findings.json at the end)."""
        out = []
        for tracked in self.entities.values():
            tracked.finding.evidence_pcap = tracked.evidence_pcap
            out.append(tracked.finding)
        return out


def _no_follow(path, flags: int) -> int:
    """open()'s opener that refuses a symbolic link where the log should be (ELOOP) instead of following it."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)


class AlertLog:
    """Events as JSON lines to stdout and appended to alerts.jsonl, each flushed at once."""

    def __init__(self, path, stdout=None):
        self.path = path
        self._file = open(path, "a", encoding="utf-8", opener=_no_follow)
        self._stdout = sys.stdout if stdout is None else stdout
        self.counts: dict[tuple[str, str], int] = {}

    def write(self, event: Event) -> dict:
        record = event.to_json()
        self._emit(json.dumps(record, separators=(",", ":")) + "\n")
        key = (record["rule"], event.kind)
        self.counts[key] = self.counts.get(key, 0) + 1
        return record

    def write_failure(self, failure) -> dict:
        """An `error` event for a rule whose detector failed (a detectors.DetectorFailure)."""
        record = {"event_type": "error", "timestamp": iso_time(time.time_ns()), "rule": failure.rule,
                  "msg": failure.summary(), "failure": failure.to_json()}
        self._emit(json.dumps(record, separators=(",", ":")) + "\n")
        key = (failure.rule, "error")
        self.counts[key] = self.counts.get(key, 0) + 1
        return record

    def _emit(self, line: str) -> None:
        self._file.write(line)
        self._file.flush()
        if self._stdout is not None:
            try:
                self._stdout.write(line)
                self._stdout.flush()
            except (BrokenPipeError, ValueError):     # nobody reads stdout any more: the file still has it
                self._stdout = None

    def close(self) -> None:
        self._file.close()

"""Live alerts: findings of the sliding window become de-duplicated events, per incident.

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
Every entity's event (AlertBook) carries `alert_id` (one per entity: its
rule and a number, "<rule>-1"), the wall-clock `timestamp` of the event,
and the `evidence_pcap` of the entity's latest alert. A rule whose detector
failed (a bug: it stops, the watch goes on) is one event of its own,
`error`, with the failure's record under "failure". Only findings at or
above the alert severity open an entity; an open one follows its finding
whatever the severity does next.

The timing uses the monotonic clock of this process, not packet times, so
a capture whose timestamps jump cannot hold an alert back or resolve it.
Noise control lives here, beside the detectors, not inside them.

What the watch writes is told per incident (detector.incidents), not per
entity:
`IncidentBook` keeps the entities' state machine above (AlertBook) and
groups their moves by the incidents the window's findings form. An
incident is raised once (`alert`, with its id "incident-N", its root
cause's record and the incident); an entity of another rule that joins a
running incident - the receive queue a running loop saturates - is an
`update` naming what `joined`, at once; its members' escalations and news
are `update`s (each member's at most every `suppress_s`, one event per
incident per evaluation); it is `resolved` when every member is. The
evidence pcap recorded from the alert is the incident's, shared by its
members.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass

from ..findings import SEVERITY_RANK, Finding, iso_time
from ..incidents import Incident
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


@dataclass
class LiveIncident:
    alert_id: str               # "incident-1", ... in the order the watch raised them
    members: set                # the entity keys (rule, identifier) that joined it
    open: bool
    last_alert: float           # monotonic seconds of its last alert
    incident: Incident | None   # its latest correlation in the window
    root: Finding               # its root cause as last correlated (the record of its alert and resolution)
    evidence_pcap: str | None = None
    resolved_at: float = 0.0
    merged_into: str | None = None   # the incident that absorbed it, once the window found them one


# Which event an evaluation tells about one incident when several of its members moved: the strongest. An
# incident merged into another says so last: it has no other news.
_KIND_RANK = {"resolved": 0, "update": 1, "alert": 2, "merged": 3}


@dataclass
class IncidentEvent:
    kind: str                   # alert, update, resolved, merged
    live: LiveIncident
    finding: Finding            # the root cause (alert, resolved, merged), what changed or joined (update)
    joined: list[Finding]       # the members that joined the incident with this event
    wall_ns: int

    def to_json(self) -> dict:
        record = {"event_type": self.kind, "timestamp": iso_time(self.wall_ns), "alert_id": self.live.alert_id,
                  **self.finding.to_json()}
        record["incident_id"] = self.live.alert_id
        record["evidence_pcap"] = self.live.evidence_pcap
        if self.live.merged_into is not None:
            record["merged_into"] = self.live.merged_into
        if self.live.incident is not None:
            record["incident"] = self.live.incident.to_json() | {"id": self.live.merged_into or self.live.alert_id}
        if self.joined:
            record["joined"] = [{"rule": f.rule, "identifier": f.identifier, "severity": f.severity,
                                 "confidence": f.confidence} for f in self.joined]
        return {k: v for k, v in record.items() if v is not None}


class IncidentBook:
    """The entities' alert book (AlertBook), told per incident: observe() turns each window's findings and
    incidents (analysis.Analysis) into incident events."""

    def __init__(self, rules: dict, min_severity: str = "low"):
        self.entities = AlertBook(rules, min_severity)
        self.incidents: dict[str, LiveIncident] = {}
        self.owner: dict[tuple, LiveIncident] = {}      # entity key -> the incident it joined
        self._count = 0

    def observe(self, findings: list[Finding], incidents: list[Incident], now: float,
                wall_ns: int) -> list[IncidentEvent]:
        window: dict[tuple, Incident] = {entity_key(f): inc for inc in incidents for f in inc.findings}
        out: dict[str, IncidentEvent] = {}
        for event in self.entities.observe(findings, now, wall_ns):
            key = entity_key(event.tracked.finding)
            if event.kind == "resolved":
                live = self.owner.get(key)
                if live is not None and live.open and not any(self._open(member) for member in live.members):
                    live.open, live.resolved_at = False, now
                    self._tell(out, IncidentEvent("resolved", live, live.root, [], wall_ns))
                continue
            self._activity(out, key, event.tracked, window.get(key), now, wall_ns)
        for incident in incidents:
            self._merge_running(out, incident, now, wall_ns)
        self._bound()
        return list(out.values())

    def _merge_running(self, out: dict, incident: Incident, now: float, wall_ns: int) -> None:
        """Two or more live incidents whose members the window now finds in one `incident` (a relation whose
        shared entity showed up later, a cause found after its effects had been raised apart): the earliest
        raised absorbs the others. It tells an update naming the members that joined it; each absorbed one
        tells `merged` with the incident it went into, and says nothing more."""
        lives = {id(live): live for live in (self.owner.get(entity_key(f)) for f in incident.findings)
                 if live is not None and live.merged_into is None}
        if len(lives) < 2:
            return
        survivor, *absorbed = sorted(lives.values(), key=lambda live: int(live.alert_id.rsplit("-", 1)[1]))
        joined = []
        for live in absorbed:
            for key in sorted(live.members):
                self.owner[key] = survivor
                tracked = self.entities.entities.get(key)
                if tracked is not None and key not in survivor.members:
                    joined.append(tracked.finding)
            survivor.members |= live.members
            survivor.open = survivor.open or live.open
            live.open, live.resolved_at, live.merged_into = False, now, survivor.alert_id
            live.incident = incident
            self._tell(out, IncidentEvent("merged", live, live.root, [], wall_ns))
        survivor.incident, survivor.root = incident, incident.root_cause
        if joined:
            self._tell(out, IncidentEvent("update", survivor, joined[0], joined, wall_ns))

    def _open(self, key: tuple) -> bool:
        tracked = self.entities.entities.get(key)
        return tracked is not None and tracked.open

    def _activity(self, out: dict, key: tuple, tracked: Tracked, current: Incident | None, now: float,
                  wall_ns: int) -> None:
        """An entity opened, came back or changed: raise its incident, or update the one it belongs or joins."""
        finding = tracked.finding
        live = self.owner.get(key) or self._running(current)
        root = current.root_cause if current is not None else finding
        if live is None:
            self._count += 1
            live = LiveIncident(alert_id=f"incident-{self._count}", members=set(), open=True, last_alert=now,
                                incident=current, root=root)
            self.incidents[live.alert_id] = live
            kind = "alert"
        elif not live.open:
            suppress = self.entities._interval(live.root.rule, "suppress_s")
            kind = "alert" if now - live.last_alert >= suppress else "update"
        else:
            kind = "update"
        joined = key not in live.members
        live.members.add(key)
        self.owner[key] = live
        live.open = True
        if current is not None:
            live.incident, live.root = current, current.root_cause
        tracked.evidence_pcap = live.evidence_pcap
        if kind == "alert":
            live.last_alert = now
        about = live.root if kind == "alert" else finding
        self._tell(out, IncidentEvent(kind, live, about, [finding] if joined and kind == "update" else [], wall_ns))

    def _running(self, current: Incident | None) -> LiveIncident | None:
        """The live incident one of `current`'s findings already joined (the earliest raised), if any."""
        if current is None:
            return None
        known = [self.owner[k] for k in (entity_key(f) for f in current.findings) if k in self.owner]
        return min(known, key=lambda live: int(live.alert_id.rsplit("-", 1)[1]), default=None)

    @staticmethod
    def _tell(out: dict, event: IncidentEvent) -> None:
        held = out.get(event.live.alert_id)
        if held is None:
            out[event.live.alert_id] = event
            return
        if _KIND_RANK[event.kind] > _KIND_RANK[held.kind]:
            held.kind, held.finding = event.kind, event.finding
        # an alert tells the whole incident: what joined it in the same evaluation is part of it, not news
        held.joined = [] if held.kind == "alert" else held.joined + event.joined

    def set_evidence(self, live: LiveIncident, name: str) -> None:
        """The incident's evidence pcap, for it and each of its members' findings."""
        live.evidence_pcap = name
        for key in live.members:
            if key in self.entities.entities:
                self.entities.entities[key].evidence_pcap = name

    def incident_of(self, key: tuple) -> LiveIncident | None:
        return self.owner.get(key)

    def _bound(self) -> None:
        if len(self.incidents) <= MAX_ENTITIES:
            return
        closed = sorted((live.resolved_at, name) for name, live in self.incidents.items() if not live.open)
        for _when, name in closed[:len(self.incidents) - MAX_ENTITIES]:
            live = self.incidents.pop(name)
            for key in live.members:
                if self.owner.get(key) is live:
                    del self.owner[key]


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

    def write(self, event: Event | IncidentEvent) -> dict:
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

"""The alert book's state machine on real findings: alert, suppression, update, escalation, resolution."""
from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pytest

from detector.analysis import analyze
from detector.decode import decode
from detector.findings import SEVERITY_RANK
from detector.ingest import open_capture
from detector.live.alerts import AlertBook, AlertLog, IncidentBook, entity_key
from detector.live.window import SlidingWindow
from detector.rules import load_rules

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
WALL = 1_800_000_000_000_000_000


def findings_of(name: str) -> list:
    return analyze([CAPTURES / name], load_rules()).findings


@pytest.fixture(scope="module")
def loop_findings():
    return findings_of("echo-loop-rip-ipv4.pcapng")


@pytest.fixture
def book():
    return AlertBook(load_rules())


def later(finding, seconds: float):
    """The same finding, seen `seconds` later (its last_seen advanced)."""
    moved = copy.deepcopy(finding)
    moved.last_seen += int(seconds * 1e9)
    return moved


def kinds(events):
    return [(e.kind, e.tracked.finding.rule) for e in events]


def test_first_crossing_alerts_once_per_entity(book, loop_findings):
    rules = {f.rule for f in loop_findings}
    assert {"echo-loop", "rip-trigger"} <= rules
    events = book.observe(loop_findings, 0.0, WALL)
    assert sorted(kinds(events)) == sorted(("alert", f.rule) for f in loop_findings if f.severity != "info")
    assert {e.tracked.alert_id for e in events} >= {"echo-loop-1", "rip-trigger-1"}
    # the same window again, and again later without news: nothing to say
    assert book.observe(loop_findings, 0.5, WALL) == []
    assert book.observe(loop_findings, 1.0, WALL) == []


def test_updates_are_held_back_for_the_suppression_interval(book, loop_findings):
    loop = next(f for f in loop_findings if f.rule == "echo-loop")
    suppress = load_rules()["echo-loop"].suppress_s
    resolve = load_rules()["echo-loop"].resolve_s
    book.observe([loop], 0.0, WALL)
    step = resolve / 2           # news often enough never to resolve
    now, seen = 0.0, loop
    updates = []
    while now < suppress * 2.5:
        now += step
        seen = later(seen, step)
        updates += [(now, e.kind) for e in book.observe([seen], now, WALL)]
    assert [kind for _, kind in updates] == ["update", "update"]
    assert updates[0][0] >= suppress and updates[1][0] - updates[0][0] >= suppress


def test_escalation_is_told_at_once(book, loop_findings):
    probe = copy.deepcopy(next(f for f in loop_findings if f.rule == "rip-trigger"))
    probe.severity = "medium"
    assert kinds(book.observe([probe], 0.0, WALL)) == [("alert", "rip-trigger")]
    worse = copy.deepcopy(probe)
    worse.severity = "critical"     # the loop was counted: the probe is its trigger (same last_seen)
    events = book.observe([worse], 0.5, WALL)
    assert kinds(events) == [("update", "rip-trigger")]
    assert events[0].to_json()["severity"] == "critical"
    assert book.observe([worse], 1.0, WALL) == []


def test_resolution_then_comeback_within_and_after_suppression(book, loop_findings):
    loop = next(f for f in loop_findings if f.rule == "echo-loop")
    rule = load_rules()["echo-loop"]
    book.observe([loop], 0.0, WALL)
    # still in the window but no new copy: resolved after resolve_s, once
    assert book.observe([loop], rule.resolve_s - 0.1, WALL) == []
    assert kinds(book.observe([loop], rule.resolve_s, WALL)) == [("resolved", "echo-loop")]
    assert book.open_counts()["echo-loop"] == 0
    assert book.observe([], rule.resolve_s + 1, WALL) == []
    # back before the suppression interval ran out: news, but no second alert
    back = later(loop, 20)
    assert kinds(book.observe([back], rule.resolve_s + 2, WALL)) == [("update", "echo-loop")]
    assert book.open_counts()["echo-loop"] == 1
    assert kinds(book.observe([], rule.resolve_s * 2 + 2, WALL)) == [("resolved", "echo-loop")]
    # back after it: a new alert for the same entity
    again = later(back, 200)
    events = book.observe([again], rule.suppress_s + 1, WALL)
    assert kinds(events) == [("alert", "echo-loop")]
    assert events[0].tracked.alert_id == "echo-loop-1"


def test_below_alert_severity_opens_nothing(loop_findings):
    book = AlertBook(load_rules(), min_severity="critical")
    events = book.observe(loop_findings, 0.0, WALL)
    assert all(SEVERITY_RANK[e.tracked.finding.severity] == SEVERITY_RANK["critical"] for e in events)
    quiet = AlertBook(load_rules())
    info = [f for f in findings_of("rip-routers.pcapng") if f.severity == "info"]
    assert info, "the RIP routers capture yields info findings"
    assert quiet.observe(info, 0.0, WALL) == []


def test_entities_are_distinct_per_rule_and_subject(loop_findings):
    keys = [entity_key(f) for f in loop_findings]
    assert len(set(keys)) == len(keys)
    loop = next(f for f in loop_findings if f.rule == "echo-loop")
    assert loop.identifier == loop.evidence["fingerprint"]
    # the same frame looping on, with other numbers and words: one entity
    grown = later(loop, 5)
    grown.n, grown.severity, grown.msg = grown.n * 2, "critical", "more copies"
    assert entity_key(grown) == entity_key(loop)
    other = copy.deepcopy(loop)
    other.identifier = "0123456789abcdef"
    assert entity_key(other) != entity_key(loop)
    probe = next(f for f in loop_findings if f.rule == "rip-trigger")
    renamed = copy.deepcopy(probe)
    renamed.rule = loop.rule
    renamed.identifier = loop.identifier
    assert entity_key(renamed) == entity_key(loop) != entity_key(probe)


@pytest.mark.parametrize("name, batch", [("echo-loop-rip-ipv4.pcapng", 1500), ("pmtud-blackhole-ipv4.pcapng", 8),
                                         ("routing-loop-ipv4.pcapng", 500), ("rss-elephant-flow.pcap", 1500)])
def test_each_incident_keeps_its_identifier_as_the_window_grows(name, batch):
    """A watch asks the window for findings again and again while an incident goes on: each finding keeps
    the identifier it was first given, so the alert book sees one entity whose numbers grow."""
    rules = load_rules()
    window = SlidingWindow(rules, now=0.0, slice_s=1.0, slices=1000)     # nothing leaves the window
    looks = []
    with open_capture(CAPTURES / name, batch_packets=batch) as reader:
        for k, raw in enumerate(reader):
            window.update(decode(raw), now=float(k))
            looks.append({entity_key(f) for f in window.analysis().findings})
    assert len(looks) >= 4
    final = looks[-1]
    assert {rule for rule, _ in final} >= {f.rule for f in analyze([CAPTURES / name], rules).findings}
    for look in looks:
        assert look <= final


def test_alert_log_writes_each_event_at_once(tmp_path, book, loop_findings):
    stdout = io.StringIO()
    log = AlertLog(tmp_path / "alerts.jsonl", stdout=stdout)
    events = book.observe(loop_findings, 0.0, WALL)
    for event in events:
        log.write(event)
        # flushed per line: readable before the log is closed
        assert (tmp_path / "alerts.jsonl").read_text().count("\n") == events.index(event) + 1
    lines = [json.loads(line) for line in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    assert lines == [json.loads(line) for line in stdout.getvalue().splitlines()]
    for line in lines:
        assert line["event_type"] == "alert" and line["timestamp"].endswith("Z")
        assert {"rule", "severity", "msg", "first_seen", "alert_id"} <= set(line)
    log.close()
    # appended, never truncated
    log = AlertLog(tmp_path / "alerts.jsonl", stdout=io.StringIO())
    log.write(events[0])
    log.close()
    assert len((tmp_path / "alerts.jsonl").read_text().splitlines()) == len(events) + 1


def _watch_two_incidents(book, step_s: float = 0.1) -> list:
    """The events of `book` while a sliding window reads two-incidents-at-once in batches, one evaluation per
    batch `step_s` apart: (evaluation, event record)."""
    window = SlidingWindow(load_rules(), now=0.0, slice_s=1.0, slices=1000)
    told = []
    with open_capture(CAPTURES / "two-incidents-at-once.pcapng", batch_packets=1500) as reader:
        for k, raw in enumerate(reader):
            window.update(decode(raw), now=k * step_s)
            analysis = window.analysis()
            told += [(k, event.to_json()) for event in book.observe(analysis.findings, analysis.incidents,
                                                                     k * step_s, WALL)]
    return told


def test_one_alert_per_incident_and_an_update_when_an_effect_joins():
    book = IncidentBook(load_rules())
    told = _watch_two_incidents(book)
    alerts = [record for _, record in told if record["event_type"] == "alert"]
    # the loop and the black hole: two alerts, each raised by its root cause, not one per finding
    assert [(a["alert_id"], a["rule"]) for a in alerts] == [("incident-1", "rip-trigger"),
                                                             ("incident-2", "mss-violation")]
    assert [f["rule"] for f in alerts[0]["incident"]["findings"]] == ["rip-trigger", "echo-loop"]
    # the saturated receive queue appears under the running loop: an update of its incident, naming it
    joined = [(k, r["alert_id"], [j["rule"] for j in r["joined"]]) for k, r in told if r.get("joined")]
    assert [(alert_id, rules) for _, alert_id, rules in joined] == [("incident-1", ["rss-saturation"]),
                                                                    ("incident-2", ["pmtud-blackhole"])]
    (update,) = [r for k, r in told if k == joined[0][0]]
    assert update["event_type"] == "update" and update["rule"] == "rss-saturation"
    assert [f["rule"] for f in update["incident"]["findings"]] == ["rip-trigger", "echo-loop", "rss-saturation"]
    assert all(r["incident_id"] == r["alert_id"] for _, r in told)
    # the watch's evidence file of an incident is its members' too
    live = book.incident_of(("rss-saturation", "queue 4"))
    book.set_evidence(live, "evidence/incident-1-x.pcap")
    assert {book.entities.entities[key].evidence_pcap for key in live.members} == {"evidence/incident-1-x.pcap"}


def test_an_incident_resolves_when_all_its_members_have():
    book = IncidentBook(load_rules())
    told = _watch_two_incidents(book)
    last = len(told) * 0.1
    resolve = max(rule.resolve_s for rule in load_rules().values())
    # the loop goes on (its copies and its queue's bins advance), the probe and the black hole do not: the
    # black hole's incident resolves, the loop's stays open although its probe resolved
    going = [later(book.entities.entities[key].finding, resolve + 1) for key in book.incident_of(
        ("rss-saturation", "queue 4")).members if key[0] != "rip-trigger"]
    events = book.observe(going, [], last + resolve + 1, WALL)
    assert sorted((e.kind, e.live.alert_id) for e in events) in ([("resolved", "incident-2")],
                                                                 [("resolved", "incident-2"), ("update", "incident-1")])
    assert not book.entities.entities[("rip-trigger", "198.18.44.201")].open
    events = book.observe([], [], last + 3 * resolve + 3, WALL)
    assert [(e.kind, e.live.alert_id) for e in events] == [("resolved", "incident-1")]
    assert events[0].to_json()["rule"] == "rip-trigger"
    assert book.observe([], [], last + 3 * resolve + 4, WALL) == []


def test_alert_log_writes_incident_events(tmp_path):
    book = IncidentBook(load_rules())
    told = _watch_two_incidents(book)
    log = AlertLog(tmp_path / "alerts.jsonl", stdout=io.StringIO())
    window = SlidingWindow(load_rules(), now=0.0, slice_s=1.0, slices=1000)
    fresh = IncidentBook(load_rules())
    with open_capture(CAPTURES / "two-incidents-at-once.pcapng", batch_packets=20000) as reader:
        for raw in reader:
            window.update(decode(raw), now=0.0)
    analysis = window.analysis()
    for event in fresh.observe(analysis.findings, analysis.incidents, 0.0, WALL):
        log.write(event)
    log.close()
    lines = [json.loads(line) for line in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    # everything at once: one alert per incident, nothing else
    assert [(r["event_type"], r["alert_id"], len(r["incident"]["findings"])) for r in lines] == [
        ("alert", "incident-1", 3), ("alert", "incident-2", 2)]
    assert log.counts == {("rip-trigger", "alert"): 1, ("mss-violation", "alert"): 1}
    assert len(told) > len(lines)


def test_running_incidents_the_window_later_finds_one_merge_into_the_earliest(tmp_path):
    """The loop's probe, copies and drowned queue first correlated apart (each its own incident, as when the
    entity that links them has not been seen yet), then found one: the earliest raised absorbs the others,
    which say `merged` and where they went; it resolves only when all its members have."""
    from detector.incidents import correlate
    rules = load_rules()
    analysis = analyze([CAPTURES / "two-incidents-at-once.pcapng"], rules)
    book = IncidentBook(rules)
    apart = [correlate([finding], rules)[0] for finding in analysis.findings]
    raised = book.observe(analysis.findings, apart, 0.0, WALL)
    assert [e.kind for e in raised] == ["alert"] * len(analysis.findings)
    loop = next(i for i in analysis.incidents if i.root_cause.rule == "rip-trigger")
    owners = [book.incident_of(entity_key(f)).alert_id for f in loop.findings]
    assert len(set(owners)) == len(loop.findings)
    survivor = min(owners, key=lambda name: int(name.rsplit("-", 1)[1]))

    log = AlertLog(tmp_path / "alerts.jsonl", stdout=io.StringIO())
    for event in book.observe(analysis.findings, analysis.incidents, 1.0, WALL):
        log.write(event)
    log.close()
    told = [json.loads(line) for line in (tmp_path / "alerts.jsonl").read_text().splitlines()]
    merged = [r for r in told if r["event_type"] == "merged"]
    # each of the black hole's and the loop's later-raised incidents went into its earliest one
    assert {r["alert_id"] for r in merged} >= set(owners) - {survivor}
    assert all(r["merged_into"] != r["alert_id"] for r in merged)
    into_loop = [r for r in merged if r["merged_into"] == survivor]
    assert sorted(r["alert_id"] for r in into_loop) == sorted(set(owners) - {survivor})
    assert all(r["incident"]["id"] == survivor for r in into_loop)
    (update,) = [r for r in told if r["event_type"] == "update" and r["alert_id"] == survivor]
    first = loop.findings[owners.index(survivor)]
    assert sorted(j["rule"] for j in update["joined"]) == sorted(f.rule for f in loop.findings if f is not first)
    assert update["incident"]["root_cause"]["rule"] == "rip-trigger"
    assert {book.incident_of(entity_key(f)).alert_id for f in loop.findings} == {survivor}
    # told once: the next evaluation has nothing to say about it
    assert [e for e in book.observe(analysis.findings, analysis.incidents, 2.0, WALL)
            if survivor in (e.live.alert_id, e.live.merged_into)] == []
    # the merged incident resolves as one, when its last member does
    resolve = max(rule.resolve_s for rule in rules.values())
    events = book.observe([], [], 3.0 + 3 * resolve, WALL)
    assert [e.live.alert_id for e in events if e.kind == "resolved"].count(survivor) == 1
    assert not [e for e in events if e.live.merged_into is not None]

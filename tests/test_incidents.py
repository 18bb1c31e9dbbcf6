"""Incidents (detector.incidents) on real bytes: the bundled captures' findings grouped by the rules' relations,
shared entities and time, the root cause named, the same on merged states, and each guard needed.

The captures are the bundled ones; the near-misses are what a careless correlator would merge: two
incidents at the same seconds (two-incidents-at-once), two scanners listed in one conntrack report
(scan-near-misses), a capture-loss finding beside an incident.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from detector import engine
from detector.analysis import AnalysisState, analyze, conclude
from detector.findings import Finding
from detector.incidents import ADJACENT_NS, correlate, entities
from detector.report.eve import eve_lines
from detector.rules import load_rules
from detector.units import NS
from tests._rules import rows

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
TWO = CAPTURES / "two-incidents-at-once.pcapng"


@pytest.fixture(scope="module")
def rules():
    return load_rules()


@pytest.fixture(scope="module")
def two(rules):
    return analyze([TWO], rules)


def _shape(incidents) -> list[tuple]:
    return [(inc.root_cause.rule, [f.rule for f in inc.findings], inc.roles) for inc in incidents]


def test_a_loop_and_a_black_hole_at_the_same_seconds_are_two_incidents(two):
    loop, hole = two.incidents
    assert _shape(two.incidents) == [
        ("rip-trigger", ["rip-trigger", "echo-loop", "rss-saturation"], ["root cause", "effect", "effect"]),
        ("mss-violation", ["mss-violation", "pmtud-blackhole"], ["root cause", "peer"])]
    # their spans overlap: time alone would have merged them
    assert loop.first_seen <= hole.last_seen and hole.first_seen <= loop.last_seen
    assert (loop.id, hole.id) == ("incident-1", "incident-2") and loop.first_seen <= hole.first_seen
    assert (loop.severity, hole.severity) == ("critical", "high")
    assert loop.title == "Probe to the RIP ports -> echo-loop -> rss-saturation"
    for incident in two.incidents:
        assert all(f.incident_id == incident.id for f in incident.findings)
    assert sorted(f.incident_id for f in two.findings) == ["incident-1"] * 3 + ["incident-2"] * 2


def test_the_summary_says_what_where_since_when_and_what_first(two):
    what, where, first = two.incidents[0].summary.splitlines()
    assert what.startswith("What: rip-trigger (critical): 198.18.44.201 sent 1 probe to UDP 520")
    assert what.endswith("; then echo-loop, rss-saturation")
    # the addresses, and the two boxes bouncing the frame
    assert where == ("Where: 198.18.44.201 -> 192.0.2.61 (00:1b:54:c2:00:02 -> 00:1b:54:c2:00:01), "
                     "from 2026-01-01T00:00:01.000000Z for 0.25 s")
    assert first.startswith("First: Drop UDP 520 and 521 from outside toward routers' control planes")


@pytest.mark.parametrize("name, place", [
    # the two: a DHCP storm said "Where: dhcp-storm", capture loss "Where: tcp ack gaps" (what they count)
    ("dhcp-starvation-storm.pcap", "the links the capture point sees"),
    ("loss-every-nth-segment.pcap", "the capture point"),
    ("loss-interface-drops.pcapng", "the capture point, interface eth1 of loss-interface-drops.pcapng"),
    ("dhcp-forged-servers.pcap", "the untagged link"),
    ("ospf-duplicate-router-id.pcapng", "OSPF router ID 9.9.9.9, area 0.0.0.0"),
    ("handshake-rtt-jump.pcap", "the external servers and the paths to them"),
    ("unicast-flood-sll-otherhost.pcap", "the switched segment the capture point sees"),
])
def test_where_names_a_place_never_what_the_rule_counted(rules, name, place):
    result = analyze([CAPTURES / name], rules)
    incident = next(i for i in result.incidents if not (i.root_cause.src_ip or i.root_cause.dest_ip))
    where = incident.summary.splitlines()[1]
    assert where.startswith(f"Where: {place}, from ")
    assert incident.root_cause.identifier not in where and incident.root_cause.rule not in where


def test_to_json_names_findings_by_rule_and_identifier(two):
    record = two.incidents[1].to_json()
    assert record["root_cause"] == {"rule": "mss-violation", "identifier": "203.0.113.80:443 -> 198.51.100.23:51700"}
    assert [ref["rule"] for ref in record["findings"]] == ["mss-violation", "pmtud-blackhole"]
    assert record["first_seen"].startswith("2026-01-01T00:00:01.") and record["id"] == "incident-2"
    json.dumps(record)


def test_eve_has_one_incident_line_beside_the_findings(two):
    events = [json.loads(line) for line in eve_lines(two.findings, str(TWO), (), two.incidents).splitlines()]
    assert [e["event_type"] for e in events] == ["alert", "finding"] * 5 + ["incident"] * 2
    incident = events[10]
    assert incident["incident"]["id"] == "incident-1" and incident["src_ip"] == "198.18.44.201"
    assert incident["dest_port"] == 520 and incident["pcap_filename"] == str(TWO)
    assert all(e["finding"]["incident_id"] in ("incident-1", "incident-2") for e in events[1:10:2])
    # each alert names its finding's incident among its tags, as Suricata's schema allows
    for alert, finding in zip(events[0:10:2], events[1:10:2]):
        assert f"incident:{finding['finding']['incident_id']}" in alert["alert"]["metadata"]["tag"]


class _Halves:
    """A consumer that folds the packets before `cut` into one analysis state and the rest into another."""

    def __init__(self, first: AnalysisState, second: AnalysisState, cut: int):
        self.first, self.second, self.cut, self.seen = first, second, cut, 0
        self.needs_fingerprint = True
        self.app_tables = first.app_tables

    def update(self, batch) -> None:
        start, end = self.seen, self.seen + len(batch)
        self.seen = end
        if end <= self.cut:
            self.first.update(batch)
        elif start >= self.cut:
            self.second.update(batch)
        else:
            self.first.update(rows(batch, 0, self.cut - start))
            self.second.update(rows(batch, self.cut - start))


def test_merged_states_give_the_same_incidents(rules, two):
    # the loop starts at packet ~160; the cut falls inside it, and inside the black-holed transfer
    first, second = AnalysisState(rules), AnalysisState(rules)
    engine.run([TWO], [_Halves(first, second, 5000)])
    merged = conclude(first.detectors.merge(second.detectors), first.flows.merge(second.flows),
                      first.stats.merge(second.stats), quality=first.quality.merge(second.quality))
    assert _shape(merged.incidents) == _shape(two.incidents)
    # (mss-violation's merge counts fewer segments when the cut falls inside the connection: its figures in the
    # summary differ, a finding of that rule's own, not of the correlator)
    assert [(inc.id, inc.title) for inc in merged.incidents] == [(inc.id, inc.title) for inc in two.incidents]


def test_the_correlator_reads_findings_and_rules_only(rules, two):
    # a watch's window hands over copies of the findings: the same incidents, ids and order
    copies = [dataclasses.replace(f, incident_id=None) for f in two.findings]
    assert _shape(correlate(copies, rules)) == _shape(two.incidents)
    assert correlate([], rules) == []


def test_a_relation_is_needed_and_so_is_a_shared_entity(rules, two):
    # without the rule files' relations every finding is an incident of its own
    bare = {rule_id: dataclasses.replace(rule, relations={}) for rule_id, rule in rules.items()}
    assert len(correlate(list(two.findings), bare)) == 5
    # a relation between the two incidents' rules joins nothing: they share no address, MAC, flow or frame
    related = dict(rules)
    related["echo-loop"] = dataclasses.replace(rules["echo-loop"], relations={
        "causes": (*rules["echo-loop"].relations["causes"], "pmtud-blackhole")})
    assert _shape(correlate(list(two.findings), related)) == _shape(two.incidents)
    loop = next(f for f in two.findings if f.rule == "echo-loop")
    hole = next(f for f in two.findings if f.rule == "pmtud-blackhole")
    assert not entities(loop)[0] & entities(hole)[0]


def test_time_keeps_one_entitys_events_minutes_apart_apart(rules, two):
    # the same probe and loop, the loop ten minutes later: two incidents
    probe, loop, queue = (next(f for f in two.findings if f.rule == rule)
                          for rule in ("rip-trigger", "echo-loop", "rss-saturation"))
    later = 600 * NS
    moved = [dataclasses.replace(f, first_seen=f.first_seen + later, last_seen=f.last_seen + later)
             for f in (loop, queue)]
    incidents = correlate([probe, *moved], rules)
    assert [[f.rule for f in inc.findings] for inc in incidents] == [["rip-trigger"], ["echo-loop", "rss-saturation"]]
    # within ADJACENT_NS after the probe's span they still join
    near = ADJACENT_NS - (loop.first_seen - probe.last_seen) - 1
    close = [dataclasses.replace(f, first_seen=f.first_seen + near, last_seen=f.last_seen + near)
             for f in (loop, queue)]
    assert len(correlate([probe, *close], rules)) == 1


def test_info_findings_alone_make_no_incident(rules):
    # the near-misses are all info: descriptions of the network, no incident, no incident_id (findings.json and
    # the reports' appendix keep them)
    result = analyze([CAPTURES / "scan-near-misses.pcap"], rules)
    assert result.findings and {f.severity for f in result.findings} == {"info"}
    assert result.incidents == [] and {f.incident_id for f in result.findings} == {None}


def test_an_info_finding_joins_one_incident_but_never_links_two(rules):
    # two unrelated scanners both appear among the conntrack report's top sources: raised to low, two incidents
    findings = analyze([CAPTURES / "scan-near-misses.pcap"], rules).findings
    raised = [dataclasses.replace(f, severity="low" if f.rule == "scan" else f.severity, incident_id=None)
              for f in findings]
    incidents = correlate(raised, rules)
    assert len(incidents) == 2, _shape(incidents)
    assert [inc.root_cause.rule for inc in incidents] == ["scan", "scan"]
    assert any("conntrack-pressure" in [f.rule for f in inc.findings] for inc in incidents), _shape(incidents)
    assert all(inc.severity == "low" for inc in incidents)


def test_an_info_finding_between_two_groups_joins_the_same_one_in_every_run(rules, monkeypatch):
    # a VRRP group's info finding names both virtual addresses, each with a GARP burst of its own: which burst it
    # joins must not follow the order a set of strings happens to iterate in (it changes with the hash seed)
    from detector import incidents as module
    findings = analyze([CAPTURES / "vrrp-garp-without-transition.pcapng"], rules).findings
    real = module.entities
    joined = []
    for turn in range(4):     # every entity of the info finding first once (it names four)
        def rotated(values, turn=turn):
            ordered = sorted(values)
            turn %= max(1, len(ordered))
            return tuple(ordered[turn:] + ordered[:turn])
        monkeypatch.setattr(module, "entities", lambda f, order=rotated: tuple(map(order, real(f))))
        copies = [dataclasses.replace(f, incident_id=None) for f in findings]
        groups = correlate(copies, rules)
        joined.append(sorted((inc.root_cause.identifier, sorted(f.rule for f in inc.findings)) for inc in groups))
    assert all(result == joined[0] for result in joined)
    assert any("vrrp-dual-master" in rules_in for _, rules_in in joined[0])


def test_the_root_cause_is_the_earliest_cause_with_no_cause_of_its_own(rules):
    # the probe is the first copy of the loop it causes; the registry breach, not the info DHCP report, is the
    # root of its incident (an info finding describes: it causes nothing)
    loop = analyze([CAPTURES / "echo-loop-buried.pcapng"], rules).incidents
    assert _shape(loop) == [("rip-trigger", ["rip-trigger", "echo-loop"], ["root cause", "effect"])]
    from detector.site import load_site
    site = load_site(CAPTURES / "arp-dhcp-registered-ack.site.yaml")
    dhcp = analyze([CAPTURES / "arp-dhcp-registered-ack.pcapng"], rules, site=site).incidents
    assert _shape(dhcp) == [("ip-mac-binding", ["ip-mac-binding", "rogue-dhcp"], ["root cause", "context"])]


def _loss(first_ns: int, last_ns: int) -> Finding:
    return Finding(rule="capture-loss", severity="medium", title="The capture point lost packets", msg="loss",
                   identifier="tcp ack gaps", first_seen=first_ns, last_seen=last_ns)


def test_capture_loss_weakens_the_incident_it_overlaps_and_is_never_its_root(rules, two):
    loop = next(inc for inc in two.incidents if inc.root_cause.rule == "rip-trigger")
    findings = [dataclasses.replace(f, incident_id=None) for f in two.findings]
    # a loss spanning both incidents joins one of them (the one it overlaps most), and bridges nothing
    loss = _loss(loop.first_seen - NS, loop.last_seen + 5 * NS)
    incidents = correlate([*findings, loss], rules)
    assert len(incidents) == 2
    (weakened,) = [inc for inc in incidents if loss in inc.findings]
    assert weakened.root_cause.rule == "mss-violation"      # the longer overlap: the transfer runs 2.8 s
    assert weakened.findings[-1] is loss and weakened.roles[-1] == "weakens"
    # alone it is its own incident; far from the others too
    assert [inc.root_cause for inc in correlate([loss], rules)] == [loss]
    far = _loss(loop.last_seen + 3600 * NS, loop.last_seen + 3700 * NS)
    assert len(correlate([*findings, far], rules)) == 3


def test_correlation_is_linear_in_findings(rules, two):
    # 20,000 findings of one probe-and-loop pair repeated an hour apart: each pair one incident; an accidental
    # quadratic pass would take minutes here (the bound is a benchmark's business, the shape a test's)
    probe, loop = (next(f for f in two.findings if f.rule == rule) for rule in ("rip-trigger", "echo-loop"))
    many = []
    for k in range(10_000):
        shift = k * 3600 * NS
        many += [dataclasses.replace(f, first_seen=f.first_seen + shift, last_seen=f.last_seen + shift)
                 for f in (probe, loop)]
    incidents = correlate(many, rules)
    assert len(incidents) == 10_000
    assert all(len(inc.findings) == 2 and inc.root_cause.rule == "rip-trigger" for inc in incidents)

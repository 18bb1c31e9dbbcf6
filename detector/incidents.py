"""Incidents: the findings of one event grouped, with its root cause and the chain of its effects.

Detectors report what they see one rule at a time: a probe to UDP 520, a
frame looping, a receive queue saturated, are three findings of one outage.
`correlate` groups them, the way an operator would, by three things at once:

- a relation between the rules, declared in the rule files (`relations:`,
  detector.rules.RELATION_KINDS): one rule's finding `causes` another's, or
  two rules report the `same_flow` or the `same_host` from two angles;
- an entity the two findings share: an address, a MAC, a flow
  (community_id), a frame (the fingerprint of its bytes), found in the
  finding's fields and anywhere in its evidence (a VRRP virtual MAC carries
  the VRID; a loop's evidence names the probe's fingerprint);
- time: their spans overlap, or lie at most ADJACENT_NS apart.

Findings that share nothing stay incidents of their own: two findings that
merely overlap in time are never joined. An incident holds at least one
finding of low or above: info findings describe the network (a RIP speaker,
a capacity report) and join the incident of what they describe, but alone
they make none and keep no incident_id (the reports list them in an
appendix). A rule that `weakens` others (the
capture lost packets: every count of its span is a lower bound) joins the
incident its span overlaps most, but never links two incidents and is never
a root cause.

The root cause is the earliest finding with no cause of its own in the
incident (no finding of a rule that `causes` its rule, started before it
ended) of low or above: an info finding describes normal state (a RIP
speaker, a master timeline, a capacity report) and causes nothing. The other findings
follow in causal order (a cause before its effects), then by time.

A rule whose findings describe a sender or the capture rather than an event
(its detector's CONTEXT_ONLY: malformed messages) joins an incident it shares
an entity with, as context, but is never its root cause, and its findings
alone make no incident: they keep no incident_id.

Only the findings and the rules are read, so a file, merged states and a
live window correlate alike. The work is linear in the findings (after one
sort by time) and in the entities each names, bounded by ENTITY_VALUES_MAX.
"""
from __future__ import annotations

import ipaddress
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .findings import SEVERITY_RANK, Finding, iso_time
from .rules import declarations
from .units import NS

# Two findings whose spans are at most this far apart count as one time: an effect shows within seconds
# of its cause (a switch floods once its MAC table flips, a queue fills within a bin, a loop starts with
# its probe), and the detectors' bins (1 s to 10 s) blur the edges of a span. Longer would join the same
# host's unrelated events minutes apart; shorter would split a cause from an effect a bin later.
ADJACENT_NS = 10 * NS
# Values of one finding's evidence read for entities, at most: its evidence may list thousands of clients,
# flows or frames; the first ones name the heaviest (detectors sort them), and the bound keeps correlation
# linear.
ENTITY_VALUES_MAX = 2_000
# Where a finding is that names no address or MAC (a count over the whole capture, a storm of many clients).
NO_PLACE = "no single host"
# A summary line quotes at most this much of a finding's message.
SUMMARY_MSG_CHARS = 240

# A finding's part in its incident: the root cause; an effect of it (a rule it `causes`, or an effect's
# effect); a peer (same flow or host as the root cause or a peer); context (joined by an entity, but
# neither: an info finding that would be a cause); or the capture loss that weakens its counts.
ROLES = ("root cause", "effect", "peer", "context", "weakens")

_MAC = re.compile(r"[0-9a-fA-F]{2}(?:[:-][0-9a-fA-F]{2}){5}")
_IP_CHARS = re.compile(r"[0-9a-fA-F:.]{2,45}")


@dataclass
class Incident:
    id: str                 # "incident-1", "incident-2", ... numbered in order of first_seen
    title: str
    severity: str           # the highest of its findings
    root_cause: Finding     # the earliest cause with no cause of its own
    findings: list[Finding]  # root cause first, then the effects in causal then time order
    first_seen: int         # ns since epoch
    last_seen: int
    summary: str            # three lines: what, where and since when, what to do first
    # beside each of `findings`, its part: ROLES
    roles: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        refs = [_ref(f) | ({"role": role} if role else {}) for f, role in zip(self.findings, self.roles or
                                                                              [None] * len(self.findings))]
        return {"id": self.id, "title": self.title, "severity": self.severity,
                "root_cause": _ref(self.root_cause), "findings": refs,
                "first_seen": iso_time(self.first_seen), "last_seen": iso_time(self.last_seen),
                "summary": self.summary}


def _ref(finding: Finding) -> dict[str, Any]:
    """A finding named as findings.json lists it: rule and identifier (one entity of one rule)."""
    return {"rule": finding.rule, "identifier": finding.identifier}


def _address(text: str) -> str | None:
    """`text` as an entity if it is one host's address or MAC; None for group addresses, which name no
    one (multicast, broadcast, unspecified, loopback), and for anything else."""
    if _MAC.fullmatch(text):
        mac = text.lower().replace("-", ":")
        first = int(mac[:2], 16)
        return None if first & 1 or mac == "00:00:00:00:00:00" else f"mac {mac}"
    if not _IP_CHARS.fullmatch(text):
        return None
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if ip.is_multicast or ip.is_unspecified or ip.is_loopback or ip == ipaddress.IPv4Address("255.255.255.255"):
        return None
    return f"ip {ip.compressed}"


def entities(finding: Finding) -> tuple[set[str], set[str]]:
    """What `finding` is about: (every entity: addresses, MACs, flows, frames; its flows only).

    Its fields (src_ip, dest_ip, src_mac, dest_mac, community_id) and its
    evidence, walked breadth first up to ENTITY_VALUES_MAX values: a
    `community_id` is a flow, a `fingerprint` a frame, any other string
    that is a host's address or MAC that host.
    """
    found: set[str] = set()
    flows: set[str] = set()
    for value in (finding.src_ip, finding.dest_ip, finding.src_mac, finding.dest_mac):
        if isinstance(value, str) and (entity := _address(value)):
            found.add(entity)
    if finding.community_id:
        flows.add(f"flow {finding.community_id}")
    queue: deque = deque([finding.evidence])
    budget = ENTITY_VALUES_MAX
    while queue and budget > 0:
        value = queue.popleft()
        budget -= 1
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "community_id" and isinstance(item, str):
                    flows.add(f"flow {item}")
                elif key == "fingerprint" and isinstance(item, str):
                    found.add(f"frame {item}")
                elif isinstance(item, (dict, list, str)):
                    queue.append(item)
        elif isinstance(value, list):
            queue.extend(item for item in value[:budget] if isinstance(item, (dict, list, str)))
        elif isinstance(value, str) and (entity := _address(value)):
            found.add(entity)
    return found | flows, flows


class _Relations:
    """The rules' relations as the correlator asks them (from detector.rules.Rule.relations)."""

    def __init__(self, rules: dict):
        self.partners: dict[tuple[str, bool], set[str]] = {}   # (rule, by flow only) -> rules it joins
        self.causers: dict[str, set[str]] = {}                   # rule -> the rules that cause it
        self.effects: dict[str, set[str]] = {}                   # rule -> the rules it causes
        self.peers: dict[str, set[str]] = {}                     # rule -> same_flow and same_host rules
        self.weakens: dict[str, set[str] | None] = {}            # rule -> the rules it weakens (None: all)
        for rule_id, rule in rules.items():
            for kind, targets in getattr(rule, "relations", {}).items():
                if kind == "weakens":
                    self.weakens[rule_id] = None if isinstance(targets, str) else set(targets)
                    continue
                for target in targets:
                    self._join(rule_id, target, by_flow=kind == "same_flow")
                    if kind == "causes":
                        self.causers.setdefault(target, set()).add(rule_id)
                        self.effects.setdefault(rule_id, set()).add(target)
                    else:
                        self.peers.setdefault(rule_id, set()).add(target)
                        self.peers.setdefault(target, set()).add(rule_id)
        # the rules whose findings are context only (Detector.CONTEXT_ONLY, read from the detectors' sources)
        self.context_only = {rule_id for rule_id in rules if _context_only(rule_id)}

    def _join(self, a: str, b: str, by_flow: bool) -> None:
        # a flow is an entity for every relation; an address or frame not for same_flow
        for one, other in ((a, b), (b, a)):
            self.partners.setdefault((one, True), set()).add(other)
            if not by_flow:
                self.partners.setdefault((one, False), set()).add(other)

    def weakened(self, weakener: str, rule: str) -> bool:
        targets = self.weakens.get(weakener, set())
        return targets is None or rule in targets


class _Groups:
    """Union-find over finding indices, where a finding at info links at most one group of more than itself.

    An info finding describes (a RIP speaker, a capacity report naming the
    busiest sources): it may join the group of what it describes, but two
    groups that meet only through it are two incidents (two unrelated scans
    both listed among a conntrack report's top sources).
    """

    def __init__(self, findings: list[Finding]):
        self.parent = list(range(len(findings)))
        self.size = [1] * len(findings)
        self.info = [f.severity == "info" for f in findings]

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def link(self, a: int, b: int) -> bool:
        """Join the groups of a and b unless that makes an info finding a bridge; whether they are one."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        if (self.info[a] and self.size[ra] > 1) or (self.info[b] and self.size[rb] > 1):
            return False
        keep, drop = min(ra, rb), max(ra, rb)
        self.parent[drop] = keep
        self.size[keep] += self.size[drop]
        return True


def _context_only(rule_id: str) -> bool:
    try:
        return declarations(rule_id).context_only
    except (LookupError, OSError):      # a rule without a detector of ours
        return False


def _span(finding: Finding) -> tuple[int, int]:
    first = int(finding.first_seen or 0)
    last = int(finding.last_seen) if finding.last_seen is not None else first
    return first, max(first, last)


def correlate(findings: list[Finding], rules: dict) -> list[Incident]:
    """Group `findings` (canonical order) into incidents by the relations of `rules` (rule id -> Rule), shared
    entities and time; set each finding's incident_id. Returns the incidents in order of first_seen."""
    relations = _Relations(rules)
    spans = [_span(f) for f in findings]
    weakeners = [i for i, f in enumerate(findings) if f.rule in relations.weakens]
    linked = [i for i, f in enumerate(findings) if f.rule not in relations.weakens]
    groups = _Groups(findings)
    # One sweep in time order per entity: `active[(entity, rule)]` holds the findings of a rule naming the
    # entity whose spans may still meet a later one. A finding joins every active one of a related rule it
    # meets; those are then one group, and only the one reaching furthest is kept for later findings (one
    # that meets any of them meets it). Each finding enters each of its entities' lists once and leaves it
    # once (but for the few an info finding could not link): linear after the sort.
    active: dict[tuple[str, str], list[int]] = {}
    for i in sorted(linked, key=lambda k: (spans[k][0], k)):
        rule = findings[i].rule
        start = spans[i][0]
        everything, flows = entities(findings[i])
        # in a fixed order: an info finding joins the first group it meets (_Groups.link), and set order
        # changes with the interpreter's string hashing from one run to the next
        for entity in sorted(everything):
            partners = relations.partners.get((rule, entity in flows), ())
            for other in sorted(partners):
                waiting = active.get((entity, other))
                if not waiting:
                    continue
                meeting = [j for j in waiting if spans[j][1] + ADJACENT_NS >= start]
                joined = [j for j in meeting if groups.link(i, j)]
                apart = [j for j in meeting if groups.find(j) != groups.find(i)]
                waiting[:] = ([max(joined, key=lambda j: spans[j][1])] if joined else []) + apart
            active.setdefault((entity, rule), []).append(i)
    members: dict[int, list[int]] = {}
    for i in linked:
        members.setdefault(groups.find(i), []).append(i)
    # A weakening finding joins the group its span overlaps most (then the most severe): it annotates, and
    # must not bridge two groups. Weakening findings are few (one per capture point, or per lossy stretch of
    # acks), so each is held against every group once.
    groups_seen = {root: (min(spans[i][0] for i in idx), max(spans[i][1] for i in idx),
                          max(findings[i].rank for i in idx), {findings[i].rule for i in idx})
                   for root, idx in members.items()}
    # a group of context-only findings is no incident, nor one of info findings (they describe the network:
    # the report lists them apart): they keep no incident_id
    for root, idx in list(members.items()):
        if all(findings[i].rule in relations.context_only or findings[i].severity == "info" for i in idx):
            del members[root], groups_seen[root]
            for i in idx:
                findings[i].incident_id = None
    alone = []
    for w in weakeners:
        best, best_key = None, None
        w_first, w_last = spans[w]
        for root, (first, last, rank, rules_in) in groups_seen.items():
            if first > w_last + ADJACENT_NS or last + ADJACENT_NS < w_first:
                continue
            if not any(relations.weakened(findings[w].rule, rule) for rule in rules_in):
                continue
            key = (min(last, w_last) - max(first, w_first), rank, -root)
            if best_key is None or key > best_key:
                best, best_key = root, key
        if best is None and findings[w].severity != "info":
            alone.append(w)
        elif best is None:
            findings[w].incident_id = None
        else:
            members[best].append(w)
    built = [_incident(findings, spans, idx, relations) for idx in members.values()]
    built += [_incident(findings, spans, [w], relations) for w in alone]
    built.sort(key=lambda pair: (pair[0].first_seen, pair[1]))
    for number, (incident, _root) in enumerate(built, 1):
        incident.id = f"incident-{number}"
        for finding in incident.findings:
            finding.incident_id = incident.id
    return [incident for incident, _root in built]


def worst_first(incidents) -> list[Incident]:
    """`incidents` in the order a responder reads them: the most severe first, then the earliest."""
    return sorted(incidents, key=lambda incident: (-SEVERITY_RANK[incident.severity], incident.first_seen,
                                                   int(incident.id.rpartition("-")[2] or 0)))


def _incident(findings: list[Finding], spans, idx: list[int], relations: _Relations) -> tuple[Incident, int]:
    """One group of finding indices as an Incident (id set by the caller), and its root cause's index."""
    weak = [i for i in idx if findings[i].rule in relations.weakens]
    linked = [i for i in idx if findings[i].rule not in relations.weakens] or weak
    # a cause starts before its effect (up to ADJACENT_NS later: the detectors date their spans by bins);
    # an info finding causes nothing unless the whole incident is info
    alerting = [i for i in linked if findings[i].severity != "info"] or linked
    earliest: dict[str, int] = {}
    for i in alerting:
        rule = findings[i].rule
        earliest[rule] = min(earliest.get(rule, spans[i][0]), spans[i][0])

    def has_cause(i: int) -> bool:
        rule, start = findings[i].rule, spans[i][0]
        return any(earliest.get(c, start + ADJACENT_NS + 1) <= start + ADJACENT_NS
                   for c in relations.causers.get(rule, ()) if c != rule)

    uncaused = [i for i in linked if not has_cause(i)] or linked
    uncaused = [i for i in uncaused if findings[i].rule not in relations.context_only] or uncaused
    candidates = [i for i in uncaused if findings[i].severity != "info"] or uncaused
    root = min(candidates, key=lambda i: (spans[i][0], -findings[i].rank, i))
    level = _levels(findings[root].rule, {findings[i].rule for i in linked}, relations)
    deepest = max(level.values(), default=0) + 1
    chain = sorted((i for i in linked if i != root),
                   key=lambda i: (level.get(findings[i].rule, deepest), spans[i][0], i))
    if linked is not weak:
        chain += sorted(weak, key=lambda i: (spans[i][0], i))
    ordered = [findings[root]] + [findings[i] for i in chain]
    levels = [0] + [level.get(findings[i].rule) for i in chain]
    weakening = set(weak) if linked is not weak else set()
    roles = ["root cause"] + ["weakens" if i in weakening else
                              "context" if level.get(findings[i].rule) is None else
                              "peer" if level[findings[i].rule] == 0 else "effect" for i in chain]
    first = min(spans[i][0] for i in linked)
    last = max(spans[i][1] for i in linked)
    severity = max((f.severity for f in ordered), key=SEVERITY_RANK.__getitem__)
    incident = Incident(id="", title=_title(ordered, levels), severity=severity, root_cause=findings[root],
                        findings=ordered, first_seen=first, last_seen=last, summary=_summary(ordered, first, last),
                        roles=roles)
    return incident, root


def _levels(root_rule: str, present: set[str], relations: _Relations) -> dict[str, int]:
    """Each rule of the incident's distance from the root cause's rule: one step per `causes`, none between
    peers (same_flow, same_host), over the rules present only (0-1 breadth-first search)."""
    level = {root_rule: 0}
    queue = deque([root_rule])
    while queue:
        rule = queue.popleft()
        for peer in relations.peers.get(rule, ()):
            if peer in present and level.get(peer, level[rule] + 1) > level[rule]:
                level[peer] = level[rule]
                queue.appendleft(peer)
        for effect in relations.effects.get(rule, ()):
            if effect in present and effect not in level:
                level[effect] = level[rule] + 1
                queue.append(effect)
    return level


def _title(ordered: list[Finding], levels: list[int | None]) -> str:
    """The root cause's title, the rules beside it (`+`: a peer, same flow or host, or a finding that joined
    by an entity but is no effect of it) and its effects (`->`), by causal level:
    "Probe to the RIP ports + <peer> -> <effect> -> <effect of the effect>"."""
    named = {ordered[0].rule}

    def rules_at(at) -> list[str]:
        out = []
        for finding, level in zip(ordered, levels):
            if level == at and finding.rule not in named:
                out.append(finding.rule)
                named.add(finding.rule)
        return out

    title = ordered[0].title
    title += "".join(f" + {rule}" for rule in rules_at(0))
    for at in sorted({level for level in levels if level}):
        title += " -> " + ", ".join(rules_at(at))
    title += "".join(f" + {rule}" for rule in rules_at(None))
    return title


def where(finding: Finding) -> str:
    """A finding's place: its addresses, and its MACs (the devices on the link: a loop's two boxes); a finding
    that names neither says its place in words (a link, the capture point), else it is about no single host;
    never its identifier, which names what it counted ("tcp ack gaps", "dhcp-storm"), not a place."""
    def pair(src, dst) -> str | None:
        if src and dst:
            return f"{src} -> {dst}"
        return src or dst

    ips, macs = pair(finding.src_ip, finding.dest_ip), pair(finding.src_mac, finding.dest_mac)
    if ips and macs:
        return f"{ips} ({macs})"
    return ips or macs or finding.place or NO_PLACE


def _duration(ns: int) -> str:
    seconds = ns / NS
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def _first_step(text: str | None) -> str:
    """The first sentence of a remediation (where a responder starts)."""
    words = " ".join((text or "").split())
    if not words:
        return "read the findings below"
    cut = re.search(r"(?<=[a-z0-9)])\. (?=[A-Z])", words)
    return words[:cut.start() + 1] if cut else words


def _summary(ordered: list[Finding], first: int, last: int) -> str:
    """Three lines: what (the root cause, then its effects), where and since when, what to do first."""
    root = ordered[0]
    msg = " ".join(root.msg.split())
    if len(msg) > SUMMARY_MSG_CHARS:
        msg = msg[:SUMMARY_MSG_CHARS - 3] + "..."
    counts: dict[str, int] = {}
    for finding in ordered[1:]:
        counts[finding.rule] = counts.get(finding.rule, 0) + 1
    then = "; then " + ", ".join(f"{rule}" + (f" x{n}" if n > 1 else "") for rule, n in counts.items()) \
        if counts else ""
    what = f"What: {root.rule} ({root.severity}): {msg}{then}"
    place = f"Where: {where(root)}, from {iso_time(first)} for {_duration(last - first)}"
    return "\n".join([what, place, f"First: {_first_step(root.remediation)}"])


__all__ = ["Incident", "correlate", "entities", "where", "worst_first", "ADJACENT_NS", "NO_PLACE", "ROLES"]

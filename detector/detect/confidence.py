"""Confidence: how sure a finding is, from evidence stated in one place.

Severity says how bad a finding would be; confidence says how sure the
capture lets us be of it. A damaged, fuzzed or duplicated capture is not an
incident, and a rule that saw three packets has less to go on than one that
saw three thousand. Every finding carries `confidence` (low, medium, high)
and the `confidence_basis` it rests on: records of evidence, each with the
most confidence it allows (its level), what kind of evidence it is (its
factor) and why, in a sentence a reader can check.

The model (`detector explain` prints MODEL):

1. The rule states its own evidence (factor `rule`, or `sample` for the size
   of what it counted: `Basis.sample`), e.g. "3 unanswered SYNs" or "the
   claimant differs from another MAC by one bit".
2. The capture's quality over the finding's time (factor `capture`,
   detect.quality) adds evidence against it, by what the rule's findings rest
   on (`Detector.QUALITY_NEEDS`):
   - every finding: exact duplicate frames in its span (DUPLICATES_MEDIUM of
     its frames: medium; DUPLICATES_LOW, or any of its own evidence frames:
     low); corrupted-looking frames (half or more of its evidence frames: low;
     any of them, or CORRUPTED_MEDIUM of the span: medium);
   - `timing` (rates, intervals, durations): time running backwards in its
     span: medium;
   - `payload` (message contents): TRUNCATED_MEDIUM of its span's frames cut
     by the snapshot length: medium;
   - `absence` (it rests on what was not seen: an unanswered probe, data never
     acknowledged): a one-direction capture, or capture loss of LOSS_MEDIUM
     or more meanwhile: medium.
   A clean span says so, at high. A finding may rest on less than its rule
   does (a spoofed flood's lone SYNs need no answer, its rule's unanswered
   SYNs do): it says so, and the model reads its own.
3. Corroboration (factor `corroboration`): a finding of another rule, at low
   or above, in the same incident (joined by the rules' relations and a
   shared entity, detector.incidents) and not merely weakening it, lifts each
   `sample` basis one level: a small sample that an independent signal
   agrees with. It lifts nothing else: two findings drawn from the same
   damaged frames do not make them less damaged.

A finding's confidence is the lowest level of its evidence (high where
nothing stands against it). Low confidence caps the severity at low; the
severity the rule gave is kept as `rule_severity`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..units import plural

CONFIDENCES = ("low", "medium", "high")
CONFIDENCE_RANK = {name: rank for rank, name in enumerate(CONFIDENCES)}
FACTORS = ("rule", "sample", "capture", "corroboration")
# what a rule's findings may rest on (Detector.QUALITY_NEEDS), and what undermines each
NEEDS = {
    "timing": "rates, intervals or durations: time running backwards undermines them",
    "payload": "the contents of messages: frames cut by the snapshot length undermine them",
    "absence": "something not seen (an unanswered probe, unacknowledged data, a missing reply): a one-direction "
               "capture or capture loss undermines them",
}

# Exact duplicates among the frames of a finding's span: from this share its counts are noticeably inflated
# (medium), from DUPLICATES_LOW they are mostly copies (low; a trace appended to itself is half).
DUPLICATES_MEDIUM = 0.01
DUPLICATES_LOW = 0.25
# Corrupted-looking frames among the frames of its span that lower a finding's confidence even when its own
# evidence frames are clean: a capture this damaged may hide damage in what the finding counted.
CORRUPTED_MEDIUM = 0.05
# Of its evidence frames, from this share corrupted the finding rests on damage (low).
EVIDENCE_CORRUPTED_LOW = 0.5
# Frames of its span cut by the snapshot length, for a rule that reads message contents.
TRUNCATED_MEDIUM = 0.5
# The share of traffic the capture lost while the finding's packets passed (Finding.capture_loss_ratio), for
# a rule whose findings rest on what was not seen.
LOSS_MEDIUM = 0.01

# the model as `detector explain` prints it: this module's account, with the thresholds' values
MODEL = __doc__[__doc__.index("The model"):].split("\n\n", 1)[1]
for _name, _value in (("DUPLICATES_MEDIUM", DUPLICATES_MEDIUM), ("DUPLICATES_LOW", DUPLICATES_LOW),
                      ("CORRUPTED_MEDIUM", CORRUPTED_MEDIUM), ("TRUNCATED_MEDIUM", TRUNCATED_MEDIUM),
                      ("LOSS_MEDIUM", LOSS_MEDIUM)):
    MODEL = MODEL.replace(_name, f"{_value:.0%}")


@dataclass(frozen=True)
class Basis:
    """One piece of evidence about how sure a finding is: the most confidence it allows, its factor, and why."""

    level: str
    why: str
    factor: str = "rule"

    def __post_init__(self):
        if self.level not in CONFIDENCE_RANK:
            raise ValueError(f"unknown confidence {self.level!r}")
        if self.factor not in FACTORS:
            raise ValueError(f"unknown confidence factor {self.factor!r}")

    @classmethod
    def sample(cls, n: int, medium_from: int, high_from: int, what: str) -> Basis:
        """The size of what the rule counted as evidence: low below `medium_from`, medium below `high_from`."""
        level = "low" if n < medium_from else "medium" if n < high_from else "high"
        return cls(level, f"{n:,} {what} (medium from {medium_from:,}, high from {high_from:,})", "sample")

    def lifted(self) -> Basis:
        """This basis one level higher (corroboration of a sample)."""
        level = CONFIDENCES[min(CONFIDENCE_RANK[self.level] + 1, len(CONFIDENCES) - 1)]
        return Basis(level, f"{self.why}; corroborated, so {level}", self.factor)

    def to_json(self) -> dict:
        return asdict(self)


def capture_bases(finding, quality, direction: dict | None, needs: frozenset) -> list[Basis]:
    """What the capture's quality (detect.quality.CaptureQuality) says about `finding`, by the rule's `needs`."""
    if quality is None or finding.first_seen is None:
        return []
    span = quality.over(finding.first_seen, finding.last_seen)
    packets = max(span["packets"], 1)
    out = []
    frames = finding.evidence.get("evidence_frames") or []
    corrupt, copies, checked = quality.damage_of(frames) if len(frames) else (0, 0, 0)
    share = span["duplicates"] / packets
    if copies or share >= DUPLICATES_LOW:
        out.append(Basis("low", f"{span['duplicates']:,} of the {span['packets']:,} frames of its span repeat an "
                                f"earlier frame's bytes and timestamp" + (f", {copies:,} of its evidence frames "
                                                                          "among them" if copies else "")
                         + ": the capture holds those packets twice, and they are no traffic", "capture"))
    elif share >= DUPLICATES_MEDIUM:
        out.append(Basis("medium", f"{span['duplicates']:,} of the {span['packets']:,} frames of its span "
                                   f"({share:.0%}) repeat an earlier frame's bytes and timestamp: its counts may "
                                   "include copies", "capture"))
    share = span["corrupted"] / packets
    if checked and corrupt >= EVIDENCE_CORRUPTED_LOW * checked:
        out.append(Basis("low", f"{corrupt:,} of its {checked:,} evidence frames look corrupted (see the capture's "
                                "quality): damaged frames are no host's doing", "capture"))
    elif corrupt or share >= CORRUPTED_MEDIUM:
        what = f"{corrupt:,} of its {checked:,} evidence frames" if corrupt else \
            f"{span['corrupted']:,} of the {span['packets']:,} frames of its span ({share:.0%})"
        out.append(Basis("medium", f"{what} look corrupted: the capture is damaged where it saw this", "capture"))
    if "timing" in needs and span["backwards"]:
        out.append(Basis("medium", f"time runs backwards {plural(span['backwards'], 'time')} in its span: its rates "
                                   "and intervals are unreliable", "capture"))
    share = span["truncated"] / packets
    if "payload" in needs and share >= TRUNCATED_MEDIUM:
        out.append(Basis("medium", f"{span['truncated']:,} of the {span['packets']:,} frames of its span were cut at "
                                   f"a snapshot length of {quality.snaplen:,} bytes: message fields past it were not "
                                   "seen", "capture"))
    if "absence" in needs:
        if direction and direction.get("one_direction"):
            out.append(Basis("medium", f"{direction['one_way']:,} of {direction['tcp_connections']:,} TCP connections "
                                       "were captured one way only: what looks unanswered may be unseen", "capture"))
        loss = finding.capture_loss_ratio
        if loss is not None and loss >= LOSS_MEDIUM:
            out.append(Basis("medium", f"the capture lost {loss:.1%} of the traffic meanwhile: what looks missing may "
                                       "have been lost by the capture", "capture"))
    if not out:
        kinds = ["duplicate", "corrupted"] + (["out-of-order"] if "timing" in needs else []) + (
            ["cut"] if "payload" in needs else [])
        out.append(Basis("high", f"the capture is clean over its span: no {', '.join(kinds[:-1])} or {kinds[-1]} "
                                 "frames", "capture"))
    return out


def corroborating(finding, incidents, context_only: set[str]) -> list:
    """The findings of other rules, at low or above, that share `finding`'s incident other than by weakening it
    (incidents: detector.incidents.correlate's, which set each finding's incident_id and role)."""
    for incident in incidents:
        if incident.id != finding.incident_id:
            continue
        roles = dict(zip(map(id, incident.findings), incident.roles))
        if roles.get(id(finding)) == "weakens":
            return []
        return [f for f in incident.findings if f.rule != finding.rule and f.severity != "info"
                and roles.get(id(f)) != "weakens" and f.rule not in context_only]
    return []


def assess(findings, quality=None, direction: dict | None = None, needs: dict | None = None, incidents=(),
           context_only: set[str] = frozenset()) -> None:
    """Give every finding its confidence and basis (the model above), in place, and cap the severity of those of
    low confidence at low. `quality`: the capture's CaptureQuality (None: not measured); `direction`: its
    one_direction(); `needs`: each rule's QUALITY_NEEDS; `incidents`: a first correlation of these findings, for
    corroboration; `context_only`: rules whose findings corroborate nothing (Detector.CONTEXT_ONLY)."""
    needs = needs or {}
    for f in findings:
        stated = list(f.confidence_basis)
        rests_on = f.quality_needs if f.quality_needs is not None else needs.get(f.rule, frozenset())
        bases = stated + capture_bases(f, quality, direction, rests_on)
        others = corroborating(f, incidents, set(context_only))
        if others:
            bases = [b.lifted() if b.factor == "sample" else b for b in bases]
            named = ", ".join(sorted({other.rule for other in others}))
            bases.append(Basis("high", f"corroborated by {plural(len(others), 'finding')} of {named} in its incident",
                               "corroboration"))
        f.confidence_basis = bases
        f.confidence = min((b.level for b in bases), key=CONFIDENCE_RANK.__getitem__, default="high")
        if f.confidence == "low" and f.severity not in ("info", "low"):
            f.rule_severity, f.severity = f.severity, "low"


def needs_text(needs) -> str:
    """What a rule's findings rest on (its QUALITY_NEEDS), in words, for `detector explain`."""
    return " ".join(f"Its findings rest on {NEEDS[need]}." for need in sorted(needs)) or (
        "Its findings rest on what it saw, not on timing, message contents or absence; duplicate and corrupted "
        "frames undermine them.")

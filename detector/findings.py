"""The Finding record: what a detector reports, in the JSON shape of findings.json (docs/manual/outputs.md).

Field names follow Suricata's EVE where one exists (src_ip, dest_ip, src_port,
dest_port, proto, community_id) and Zeek's notice where one exists (n, msg,
identifier). As in Zeek, `identifier` names what the finding is about (the
looping frame, the probing source, the flow, the receive queue), set by its
detector: two findings of one rule with the same identifier are the same
incident seen at two times, which is what `detector watch` de-duplicates on.

Each finding also says how sure it is: `confidence` (low, medium, high) and the
evidence it rests on (`confidence_basis`), from the model of
detector.detect.confidence; a low confidence caps the severity at low and
keeps the rule's own as `rule_severity`.

Findings are listed in one order wherever they appear (findings.json, the
reports, the notebook, a watch's period): `canonical_order`.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import asdict, dataclass, field
from typing import Any

from .units import NS

SEVERITIES = ("info", "low", "medium", "high", "critical")
SEVERITY_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}


def iso_time(ts_ns: int | None) -> str | None:
    """Nanoseconds since the epoch as an ISO 8601 UTC string with microseconds."""
    if ts_ns is None:
        return None
    seconds, ns = divmod(int(ts_ns), NS)
    stamp = _dt.datetime.fromtimestamp(seconds, tz=_dt.timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S") + f".{ns // 1000:06d}Z"


# One vocabulary for protocol names across packets, flows and findings (the packets table's, schema.PROTO_NAMES:
# tcp, udp, icmp, icmpv6; lower case as Zeek writes them): a rule may name a protocol in any case, the finding
# keeps it so. EVE alone writes Suricata's own names (report/eve.py).
PROTO_ALIASES = {"ipv6-icmp": "icmpv6"}


def proto_name(text: str) -> str:
    """A protocol name as findings, packets and flows write it: lower case, one name per protocol."""
    name = str(text).lower()
    return PROTO_ALIASES.get(name, name)


@dataclass
class Finding:
    rule: str
    severity: str
    title: str
    msg: str
    identifier: str | None = None      # the entity it is about, unique per rule (Zeek's notice identifier)
    first_seen: int | None = None      # ns since the epoch; ISO text in to_json()
    last_seen: int | None = None
    n: int = 0
    src_ip: str | None = None
    dest_ip: str | None = None
    src_port: int | None = None
    dest_port: int | None = None
    proto: str | None = None
    community_id: str | None = None
    src_mac: str | None = None
    dest_mac: str | None = None
    # where a finding that names no address happened, in words (incidents.where): a link ("the untagged
    # link", "VLAN 70"), the capture point, an OSPF area; None where its addresses say it
    place: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    # the share of the traffic the capture lost while this finding's packets passed (a rule that measures
    # capture loss sets it on the other rules' findings: Detector.annotate): its counts are lower bounds
    capture_loss_ratio: float | None = None
    # the incident it belongs to (detector.incidents.correlate): "incident-1", ...
    incident_id: str | None = None
    # how sure it is (detect.confidence.CONFIDENCES) and why: detect.confidence.Basis records, those the rule
    # stated first; set by detect.confidence.assess once every rule has spoken (None before)
    confidence: str | None = None
    confidence_basis: list = field(default_factory=list)
    # the severity the rule gave, where low confidence capped it at low
    rule_severity: str | None = None
    # what this finding rests on, where it differs from its rule's QUALITY_NEEDS (a spoofed flood's lone SYNs
    # need no answer, its rule's unanswered SYNs do); None: the rule's. Read by the confidence model only
    quality_needs: frozenset | None = field(default=None, repr=False)
    evidence_pcap: str | None = None
    remediation: str | None = None
    references: list[str] = field(default_factory=list)

    def __post_init__(self):
        if self.severity not in SEVERITY_RANK:
            raise ValueError(f"unknown severity {self.severity!r}")
        if self.proto is not None:
            self.proto = proto_name(self.proto)

    @property
    def rank(self) -> int:
        return SEVERITY_RANK[self.severity]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["quality_needs"]
        out["first_seen"] = iso_time(self.first_seen)
        out["last_seen"] = iso_time(self.last_seen)
        # how sure it is, read beside how bad it is
        head = {name: out.pop(name) for name in ("rule", "severity", "confidence", "rule_severity")}
        return {k: v for k, v in (head | out).items() if v is not None}


# Items an evidence list keeps (the first ones: rules list the heaviest first), and a list inside another
# evidence item: a finding reads on one page, and a capture of forged senders must not make findings.json grow
# with the square of their number. What a list leaves out is said beside it, as `<name>_left_out`.
EVIDENCE_ITEMS_MAX = 256
NESTED_ITEMS_MAX = 32


def bound_evidence(evidence: dict, limit: int = EVIDENCE_ITEMS_MAX) -> dict:
    """`evidence` with every list cut to `limit` items (NESTED_ITEMS_MAX inside a list's item), each cut saying how
    many it left out: `<name>_left_out` beside a list a dict holds (added to one the rule gave), a last item
    "... N more left out" in a list of lists. Returns a new dict; `evidence` is left as it is."""
    out: dict = {}
    for key, value in evidence.items():
        if key in out:                  # a rule's own `<name>_left_out`, already added to
            continue
        if isinstance(value, list):
            if len(value) > limit:
                out[f"{key}_left_out"] = len(value) - limit + evidence.get(f"{key}_left_out", 0)
                value = value[:limit]
            value = [_bounded_item(item) for item in value]
        elif isinstance(value, dict):
            value = bound_evidence(value, limit)
        out[key] = value
    return out


def _bounded_item(value):
    """An item of an evidence list, bounded as bound_evidence bounds what lies inside an item."""
    if isinstance(value, dict):
        return bound_evidence(value, NESTED_ITEMS_MAX)
    if isinstance(value, list):
        kept = [_bounded_item(item) for item in value[:NESTED_ITEMS_MAX]]
        if len(value) > NESTED_ITEMS_MAX:
            kept.append(f"... {len(value) - NESTED_ITEMS_MAX:,} more left out")
        return kept
    return value


def canonical_order(findings) -> list[Finding]:
    """The findings most severe first, then the earliest first, then by rule; ties keep the order given
    (the detectors' order, each detector's own). Every detector's finding has a first_seen
    (Detector.finding requires it)."""
    return sorted(findings, key=lambda f: (-f.rank, f.first_seen, f.rule))

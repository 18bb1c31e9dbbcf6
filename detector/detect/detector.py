"""The Detector interface, its registry and the analysis context: what every rule (detector/detectors/) is.

A detector is a compact, mergeable state over decoded batches:
`update(batch)` folds one batch in (vectorised, no per-packet Python),
`merge(other)` combines two partial states of the same rule (two files, two
cluster partitions, two live intervals), and `findings(ctx)` turns the state
into findings once the input is read, with the whole flow table, the capture
statistics and the findings of the detectors that ran before it at hand.
What the site file says about the network (`--site`: local networks,
routers, DHCP servers, the IP-MAC registry) is `self.site` (detector.site).

A detector owns everything its rule needs beyond that, as hooks the rest
of the package calls without knowing the rule: each finding's
`identifier` (what live alerts de-duplicate on), the report's figures of
its findings (`figures`, gathered in the evidence pass), a script that
replays a finding's frame (`REPRODUCES`), and what a watch counts for it
(`live_counters`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..findings import Finding

# the shared ranges, Param and Range: what the detectors' declarations are built of
from ..rules import Param, Rule
from ..schema import PacketBatch
from ..site import EMPTY, Site
from ..stats import CaptureStats
from .figure import ReportFigure, TimeBins

if TYPE_CHECKING:
    from ..flows.merge import CutJoins

REGISTRY: dict[str, type[Detector]] = {}

# A rate measured over less than this is no rate: packets stamped within the
# same clock tick (second-resolution pcaps, synthetic captures with one
# timestamp) would give an infinite or arbitrary one.
MIN_RATE_WINDOW_S = 0.001


class AnalysisContext:
    """What findings() may consult: the flow table of the whole input, capture statistics, the findings
    of the detectors that ran before (by rule id), the site file (detector.site; EMPTY without one), and
    what the capture itself counted as dropped (`drops`: one CaptureDrops per interface that said).

    `flows` is given as a pandas DataFrame (FlowTable.to_frame()), or as the
    FlowTable itself, whose frame is then built on first use: most analyses
    never need it, and pandas plus the frame cost half a second.
    """

    def __init__(self, flows, stats: CaptureStats, findings: dict[str, list[Finding]] | None = None,
                 site: Site | None = None, drops: list[CaptureDrops] | None = None):
        self._flows = flows
        # the flow table itself (a live window's merged on first use), for flow_columns
        self._table = flows if hasattr(flows, "to_frame") else None
        self._columns = None
        self.stats = stats
        self.findings = {} if findings is None else findings
        self.site = EMPTY if site is None else site
        self.drops = [] if drops is None else drops

    @property
    def flows(self):
        if hasattr(self._flows, "to_frame"):
            self._flows = self._flows.to_frame()
        return self._flows

    def flow_columns(self) -> dict | None:
        """The flow table as numbers (FlowTable.coded_columns(): addresses as uint64 halves, protocol numbers, ns
        times, text columns as TextCodes), built once and without pandas, for a rule that reads every flow;
        None when the context was given a DataFrame (then `flows` is all there is)."""
        if self._columns is None and self._table is not None:
            table = self._table.table() if hasattr(self._table, "table") else self._table
            self._columns = table.coded_columns()
        return self._columns


@dataclass(frozen=True)
class CaptureDrops:
    """Packets a capture point says it dropped on one interface: a pcapng interface statistics block's totals
    (isb_ifdrop + isb_osdrop, with isb_ifrecv or isb_usrdeliv) or a watch's capture socket counters."""

    source: str                     # the file's name, or "" for the interface watched
    interface: str                  # the interface's name, else its number
    dropped: int
    received: int | None            # packets that reached the capture point, dropped ones included; None: unknown
    first_ns: int | None            # the span the counters cover (ns since the epoch); None: unknown
    last_ns: int | None
    counter: str                    # where the numbers come from, in words


@dataclass(frozen=True)
class LiveCounter:
    """Packets a watch counts for a rule in every batch, per value of one label, and serves as the metrics
    detector_<name>_total and detector_<name>_per_second{<label>="0" .. "<values - 1>"}."""

    name: str
    help: str
    label: str
    values: int
    count: Callable[[PacketBatch], np.ndarray]     # a batch's packets per label value (int64, `values` long)


class Detector(ABC):
    rule_id: ClassVar[str]
    # Tunables, each a Param (type, default, meaning, range, trade-off) and data only: detector.rules reads
    # them from the detector module's source without importing it (rules.DECLARATION_NAMES: what they may
    # be built of).
    PARAMS: ClassVar[dict[str, Param]] = {}                   # thresholds and model settings
    ALERTS: ClassVar[dict[str, Param]] = {}                   # live alerts: suppress_s, resolve_s
    AFTER: ClassVar[tuple[str, ...]] = ()                      # rule ids whose findings this one reads
    # Application side-tables (detector.decode.app) update() reads with `app.table(batch, name)`: the
    # engine builds them in its decode threads; a table no detector names is never built.
    APP_TABLES: ClassVar[tuple[str, ...]] = ()
    # What a scapy script rebuilt from a finding's first evidence frame replays ("the probe"), for a rule
    # whose findings turn on one frame worth sending again in a lab; None: no script.
    REPRODUCES: ClassVar[str | None] = None
    # What its findings rest on beyond what it saw (detect.confidence.NEEDS): "timing", "payload", "absence";
    # the capture-quality facts that undermine those lower their confidence. Read from the source as data
    # (detector.rules.declarations), so `explain` prints it without importing the detector.
    QUALITY_NEEDS: ClassVar[frozenset[str]] = frozenset()
    # Its findings as Suricata alerts (report/eve.py): (number, category). signature_id is eve.SID_BASE + number,
    # fixed for good (a new rule takes the next free number, a removed rule's is never reused); category is a
    # description of Suricata's etc/classification.config.
    EVE_SIGNATURE: ClassVar[tuple[int, str]]
    # Its findings describe a sender or the capture (a malformed message), never an incident of their own: they
    # join an incident they share an entity with, and corroborate nothing (detector.incidents, detect.confidence).
    CONTEXT_ONLY: ClassVar[bool] = False

    def __init__(self, rule: Rule, site: Site | None = None):
        if rule.id != self.rule_id:
            raise ValueError(f"{type(self).__name__} serves rule '{self.rule_id}', not '{rule.id}'")
        self.rule = rule
        # what the site file says (detector.site), EMPTY without one; Site.given(key) tells what it set
        self.site = EMPTY if site is None else site
        self.params = {name: spec.default for name, spec in self.PARAMS.items()}
        self.params.update(rule.param_values)

    @abstractmethod
    def update(self, batch: PacketBatch) -> None:
        """Fold one decoded batch into the state."""

    @abstractmethod
    def merge(self, other: Detector) -> Detector:
        """Combine `other`'s partial state (same rule) into this one and return self."""

    @abstractmethod
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        """The findings of everything folded in so far."""

    def finding(self, severity: str, msg: str, *, identifier: str, first_seen: int, last_seen: int,
                basis=(), needs: frozenset | None = None, **fields) -> Finding:
        """A Finding carrying this rule's id, title, remediation and references.

        `basis`: the evidence the rule states about how sure the finding is (detect.confidence.Basis: its sample
        size, a doubt such as frames that look like corrupted copies); the confidence model adds the capture's
        quality and corroboration once every rule has spoken. `needs`: what this finding rests on where it differs
        from the rule's QUALITY_NEEDS (None: the rule's).

        `identifier` names what the finding is about, the same at every look at it (a frame's fingerprint,
        a source address, a flow, a receive queue): live alerts are de-duplicated on rule and identifier.
        `first_seen` and `last_seen` (ns since the epoch) are the times of the packets it rests on: every
        finding has them, as every EVE event has a timestamp, and findings are ordered by them.
        """
        return Finding(rule=self.rule_id, severity=severity, title=self.rule.title, msg=msg, identifier=identifier,
                       first_seen=int(first_seen), last_seen=int(last_seen), remediation=self.rule.remediation,
                       references=list(self.rule.references), confidence_basis=list(basis),
                       quality_needs=needs, **fields)

    # ---- hooks (nothing by default) -------------------------------------------
    def figures(self, findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
        """The report's figures of this rule's `findings` (in report order), over the time axis `bins`."""
        return []

    def live_counters(self) -> list[LiveCounter]:
        """What a watch counts for this rule in every batch and serves as metrics."""
        return []

    def joined(self, joins: CutJoins) -> None:
        """After merge(other) of the state of the packets that follow, when their flow tables merged too (a
        cluster's partitions; a watch's slices merge no flow tables): what the flow table's merge said about the
        capture-gap events of the TCP connections it joined across the cut (flows.merge.CutJoins), for a rule
        that binned them as the later part saw them."""
        return None

    def annotate(self, findings: list[Finding], ctx: AnalysisContext) -> None:
        """After every rule's findings of the run: add to `findings` (all rules', this one's included) what this
        rule knows about them, e.g. that the capture lost packets while they happened."""
        return None


def register(cls: type[Detector]) -> type[Detector]:
    """Class decorator: make a detector known to `detector analyze` under its rule id."""
    module = cls.__module__.rsplit(".", 1)[-1]
    if module != cls.rule_id.replace("-", "_"):
        raise ValueError(f"rule '{cls.rule_id}' must live in module {cls.rule_id.replace('-', '_')}.py")
    if cls.rule_id in REGISTRY and REGISTRY[cls.rule_id] is not cls:
        raise ValueError(f"two detectors claim rule '{cls.rule_id}'")
    REGISTRY[cls.rule_id] = cls
    return cls


def check_merge(mine: Detector, other: Detector) -> None:
    """Refuse to merge states of different rules, different thresholds or different site files."""
    if type(other) is not type(mine) or other.params != mine.params:
        raise ValueError(f"cannot merge {type(other).__name__} state into {type(mine).__name__}")
    if other.site != mine.site:
        raise ValueError(f"cannot merge {type(mine).__name__} states built with different site files "
                         f"({other.site.path} and {mine.site.path})")

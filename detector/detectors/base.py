"""What every detector shares: the Detector interface, its registry, the analysis context, small formatters.

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

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..cpu import kernel
from ..detect.columns import endpoint, flow_time_ns, ip_halves, ip_text  # noqa: F401 - re-exported for the rules
from ..detect.confidence import Basis  # noqa: F401 - re-exported: what a rule states its evidence with
from ..detect.hashing import half_full_size, home_slot, mix64  # noqa: F401 - mix64 re-exported for the rules
from ..detect.state import fold_rows  # noqa: F401 - re-exported for the rules
from ..findings import Finding, iso_time

# the shared ranges, Param and Range: what the detectors' declarations are built of, imported from here
from ..rules import ALERT_SECONDS, COUNT, RATE_PPS, RATIO, Param, Range, Rule  # noqa: F401 - re-exported
from ..schema import PROTO_NAMES, PacketBatch
from ..site import EMPTY, Site
from ..stats import CaptureStats

if TYPE_CHECKING:
    from ..flows.merge import CutJoins

REGISTRY: dict[str, type[Detector]] = {}

# Frame numbers kept per finding for the evidence pcap: enough to show the
# pattern, bounded so a loop of millions of frames does not bloat findings.json.
EVIDENCE_FRAMES_MAX = 64
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
class TimeBins:
    """The report's time axis: `count` bins of `bin_ns`, bin i starting at start_ns + i * bin_ns."""

    start_ns: int
    bin_ns: int
    count: int

    @property
    def width_s(self) -> float:
        return self.bin_ns / 1e9

    @property
    def starts_s(self) -> np.ndarray:
        """Each bin's start in seconds after start_ns (the x values of a plot)."""
        return np.arange(self.count) * self.width_s

    @property
    def axis_label(self) -> str:
        return f"seconds after {iso_time(self.start_ns)}"

    def index(self, ts: np.ndarray) -> np.ndarray:
        """The bin of each time (ns); outside 0..count-1 for a time off the axis."""
        return (ts - self.start_ns) // self.bin_ns

    def counts(self, ts: np.ndarray) -> np.ndarray:
        """How many of the times fall in each bin; times off the axis are not counted."""
        idx = self.index(ts)
        idx = idx[(idx >= 0) & (idx < self.count)]
        return np.bincount(idx, minlength=self.count).astype(np.int64)

    def per_second(self, ts: np.ndarray, origin_ns: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """A step line (x, y) on this axis of how many of the times (ns) fall in each whole second counted from
        `origin_ns` (the epoch; or where a rule starts its seconds): the unit the rules count their rates in,
        whatever this axis' bins, so a figure's peak is the message's."""
        seconds, counts = np.unique((np.asarray(ts, dtype=np.int64) - origin_ns) // 1_000_000_000,
                                    return_counts=True)
        return self.second_steps(seconds, counts, origin_ns)

    def second_steps(self, seconds: np.ndarray, values: np.ndarray,
                     origin_ns: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """A step line (x, y; drawn with drawstyle="steps-post") on this axis of per-second `values` at whole
        `seconds` from `origin_ns` (the epoch by default; ascending, only the seconds that have one): a second
        without one is 0 (each run of seconds ends with a point at 0)."""
        seconds = np.asarray(seconds, dtype=np.int64)
        ends = np.flatnonzero(np.diff(seconds, append=seconds[-1] + 2 if len(seconds) else 0) != 1)
        x = np.concatenate([seconds, seconds[ends] + 1]) + (origin_ns - self.start_ns) / 1e9
        y = np.concatenate([np.asarray(values), np.zeros(len(ends), dtype=np.asarray(values).dtype)])
        order = np.argsort(x, kind="stable")
        return x[order], y[order]


class ReportFigure(ABC):
    """A figure of report.html for some of a rule's findings (Detector.figures).

    The evidence pass (the second read of the captures, which copies the
    evidence frames) hands it every decoded batch; it keeps what it draws,
    bounded whatever the capture's size. It is drawn only when the capture
    has packets on the time axis.
    """

    title: str
    size: tuple[float, float] = (8.0, 3.0)      # inches
    needs_fingerprint: bool = False             # whether add() reads batch["fingerprint"]
    # whether add() keeps anything: False for a figure drawn from its rule's own state (or the flow table), which
    # the evidence pass does not feed
    needs_batches: bool = True

    @abstractmethod
    def add(self, batch: PacketBatch) -> None:
        """Keep what the figure needs of one batch."""

    def merge(self, other: ReportFigure) -> ReportFigure:
        """Take in `other`, a copy of this figure (as built, then fed the batches of the partition after the ones
        this one saw), and return self: merged in capture order, the state of one pass over them all. The
        evidence pass of a cluster feeds each partition's copy on a worker (detector.cluster); a figure
        without a merge keeps that pass in one process."""
        raise NotImplementedError(f"{type(self).__name__} cannot merge a partition's copy")

    @abstractmethod
    def draw(self, ax, flows) -> None:
        """Draw on the matplotlib Axes `ax`; `flows` is the flow table (FlowTable.to_frame())."""


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


# ---- formatting helpers for findings -------------------------------------

def evidence_frames(frames: np.ndarray, limit: int = EVIDENCE_FRAMES_MAX) -> list[int]:
    """Frame numbers for the evidence pcap: all of them, or the first and last halves of `limit`."""
    frames = np.asarray(frames, dtype=np.int64)
    if len(frames) <= limit:
        return frames.tolist()
    head = limit // 2
    return frames[:head].tolist() + frames[len(frames) - (limit - head):].tolist()


def keep_ends(kept: np.ndarray, new: np.ndarray, limit: int = EVIDENCE_FRAMES_MAX) -> np.ndarray:
    """Bounded evidence: the first `limit//2` and last `limit - limit//2` of kept+new frames (sorted)."""
    both = np.unique(np.concatenate([kept, new]).astype(np.int64))
    if len(both) <= limit:
        return both
    head = limit // 2
    return np.concatenate([both[:head], both[len(both) - (limit - head):]])


def append_ends(kept: np.ndarray, later: np.ndarray, limit: int = EVIDENCE_FRAMES_MAX) -> np.ndarray:
    """keep_ends of frames that all follow the kept ones, in order (a part's batches as they come): no sort."""
    both = np.concatenate([kept, later]).astype(np.int64)
    if len(both) <= limit:
        return both
    head = limit // 2
    return np.concatenate([both[:head], both[len(both) - (limit - head):]])


# scapy dissectors loaded for frame summaries: every link type the decoder reads (they fill
# conf.l2types), the tunnels it removes and the protocols the rules name. scapy.layers.all would load
# some 80 more (TLS, X.509, Kerberos, SMB...), 0.7 s of every run that writes a finding.
SUMMARY_LAYERS = ("l2", "inet", "inet6", "ppp", "dot11", "vxlan", "l2tp", "sctp", "rip", "dns", "dhcp", "dhcp6",
                  "ntp", "snmp", "hsrp", "vrrp", "llmnr", "netbios", "isakmp", "eap")


def load_dissectors():
    """scapy's configuration, with the dissectors of SUMMARY_LAYERS registered; loaded once."""
    from scapy.config import conf

    for name in SUMMARY_LAYERS:
        importlib.import_module(f"scapy.layers.{name}")
    return conf


def frame_summary(frame: bytes, linktype: int) -> str:
    """A one-line decode of hostile frame bytes (scapy's summary), for a human reading the finding."""
    cls = load_dissectors().l2types.get(int(linktype))
    if cls is None:
        return f"{len(frame)} bytes of link type {int(linktype)}"
    try:
        text = cls(frame).summary()
    except Exception:   # scapy's dissectors raise all kinds of errors on crafted bytes; the finding stands
        return f"{len(frame)} bytes (scapy could not decode them)"
    # one line, bounded: the text comes from packet bytes
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def match_flow(table, src: str, sport: int, dst: str, dport: int, proto: int) -> dict | None:
    """The row of the flow table (FlowTable.to_frame()) of src:sport -> dst:dport over `proto`, in either
    orientation, as a dict; None when it has none."""
    if table is None or len(table) == 0 or "src_ip" not in table:
        return None
    forward = ((table["src_ip"] == src) & (table["src_port"] == sport) &
               (table["dest_ip"] == dst) & (table["dest_port"] == dport))
    backward = ((table["src_ip"] == dst) & (table["src_port"] == dport) &
                (table["dest_ip"] == src) & (table["dest_port"] == sport))
    hit = table[forward | backward]
    if "proto" in hit and len(hit):
        name = PROTO_NAMES.get(proto, "")
        hit = hit[hit["proto"].isin([proto, name, name.upper()])]
    return hit.iloc[0].to_dict() if len(hit) else None


# ---- grouping helpers for batch columns -----------------------------------

def group_by(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows grouped by equal key: (order, starts, counts).

    `keys[order]` is sorted, stable (rows of one group stay in batch order);
    group g covers `order[starts[g]:starts[g] + counts[g]]`.
    """
    n = len(keys)
    order = np.argsort(keys, kind="stable")
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return order, empty, empty
    ordered = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    counts = np.diff(np.append(starts, n))
    return order, starts, counts


def repeated_rows(keys: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows whose key (uint64) occurs more than once in `keys`.

    One hashed pass: in a batch where nearly every key is unique, cheaper than sorting the batch (a fifth of
    the loop rules' update did only that); the few repeated rows are then grouped with `group_by`."""
    if len(keys) < 2:
        return np.zeros(len(keys), dtype=bool)
    return _repeated_hashed(np.ascontiguousarray(keys, dtype=np.uint64))


@kernel("(u8[::1],)")
def _repeated_hashed(keys):
    # open addressing over a power-of-two table at most half full, each slot holding a row of its key
    # (-1 free) and whether the key was seen again
    size = half_full_size(len(keys))
    mask = np.uint64(size - 1)
    first = np.full(size, -1, dtype=np.int64)
    again = np.zeros(size, dtype=np.bool_)
    slots = np.empty(len(keys), dtype=np.int64)
    for i in range(len(keys)):
        k = keys[i]
        slot = home_slot(k, mask)
        while first[slot] >= 0 and keys[first[slot]] != k:
            slot = (slot + np.uint64(1)) & mask
        if first[slot] < 0:
            first[slot] = i
        else:
            again[slot] = True
        slots[i] = slot
    out = np.empty(len(keys), dtype=np.bool_)
    for i in range(len(keys)):
        out[i] = again[slots[i]]
    return out


def rank_by_key(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows numbered by equal key without sorting: (group of each row, numbered by first appearance; its rank
    among its key's rows, in row order; the first row of each group). One hashed pass."""
    return _rank_hashed(np.ascontiguousarray(keys, dtype=np.uint64))


@kernel("(u8[::1],)")
def _rank_hashed(keys):
    # open addressing over a power-of-two table at most half full, each slot holding its key's group (-1 free)
    size = half_full_size(len(keys))
    mask = np.uint64(size - 1)
    slot_group = np.full(size, -1, dtype=np.int64)
    group = np.empty(len(keys), dtype=np.int64)
    rank = np.empty(len(keys), dtype=np.int64)
    seen = np.zeros(len(keys), dtype=np.int64)
    firsts = np.empty(len(keys), dtype=np.int64)
    groups = 0
    for i in range(len(keys)):
        k = keys[i]
        slot = home_slot(k, mask)
        while slot_group[slot] >= 0 and keys[firsts[slot_group[slot]]] != k:
            slot = (slot + np.uint64(1)) & mask
        if slot_group[slot] < 0:
            slot_group[slot] = groups
            firsts[groups] = i
            groups += 1
        g = slot_group[slot]
        group[i] = g
        rank[i] = seen[g]
        seen[g] += 1
    return group, rank, firsts[:groups]


def find_sorted(table: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of `keys` sits in the sorted `table`: (insertion index, found mask).

    `table[at[found]]` are the matches; an empty table finds nothing, and a key
    above every entry gets the index one past the end, never a clamped one that
    would read another key's row.
    """
    at = np.searchsorted(table, keys)
    found = at < len(table)
    found[found] = table[at[found]] == keys[found]
    return at, found


def member(keys: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Boolean mask: which `keys` (uint64) are in `sorted_set` (sorted, unique)."""
    if len(sorted_set) == 0:
        return np.zeros(len(keys), dtype=bool)
    if len(sorted_set) <= SMALL_SET:
        mask = keys == sorted_set[0]
        for value in sorted_set[1:]:
            mask |= keys == value
        return mask
    return _member_hashed(keys.astype(np.uint64), sorted_set.astype(np.uint64))


# Up to this many values, comparing against each is cheaper than a hash table.
SMALL_SET = 4


@kernel("(u8[::1], u8[::1])")
def _member_hashed(keys, values):
    # open addressing over a power-of-two table at most half full; slot 0 of
    # `used` marks free entries, so the key 0 needs no sentinel
    size = half_full_size(len(values))
    mask = np.uint64(size - 1)
    table = np.zeros(size, dtype=np.uint64)
    used = np.zeros(size, dtype=np.bool_)
    for v in values:
        slot = home_slot(v, mask)
        while used[slot] and table[slot] != v:
            slot = (slot + np.uint64(1)) & mask
        table[slot] = v
        used[slot] = True
    out = np.zeros(len(keys), dtype=np.bool_)
    for i in range(len(keys)):
        k = keys[i]
        slot = home_slot(k, mask)
        while used[slot]:
            if table[slot] == k:
                out[i] = True
                break
            slot = (slot + np.uint64(1)) & mask
    return out


# A repeat split across two batches shows up once at the end of the first:
# rows this close to a batch's last time are tracked even when they do not
# repeat inside it. A loop repeats far faster than this; the window bounds
# the extra state to 10 ms of traffic.
CARRY_OVER_S = 0.010


def batch_tail(ts: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows within CARRY_OVER_S of the batch's last time."""
    return ts >= ts.max() - int(CARRY_OVER_S * 1e9)

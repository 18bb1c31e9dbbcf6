"""rss-saturation: one NIC receive queue (one CPU core) taking most packets of a busy link.

A NIC with receive-side scaling hashes each packet's addresses (and ports)
to pick a queue, and each queue is served by one core. Traffic made of many
flows spreads evenly; a looping frame or one elephant flow shares a single
hash, so one core runs at 100 % softirq while the others idle and the box
fails at a total load that looks moderate. The echo loop of the incidents
did exactly that to a NAT box.

The detector replays the NIC's choice with `detector.rss.RssModel` (Toeplitz
key, queue count, hashed fields from the rule) and counts packets per queue
per time bin. A NIC hashes what it receives: a tunnelled packet (VXLAN,
Geneve, GRE...) by its outer header, so all traffic between two tunnel
endpoints may share one queue, unless the NIC is set up for inner-header
RSS (`hash_inner_headers`). A bin fires when one queue's share is far above
the fair 1/N and that queue's packet rate matters, measured only where the
bin's packets span real time (a capture whose packets share one timestamp
has no rate). Consecutive firing bins of one queue form one finding, which
names the flows the NIC put on that queue, as it hashed them (outer or
inner header), counted from the packets themselves, and cross-links the
echo loop finding (echo_loop.py) that fills it.

State: per time bin the packet count of every queue and the bin's first and
last packet time (sparse over bins); for the dominant queue of busy bins a
few frame numbers for the evidence pcap and its largest flows. The first and
last bins of what a state has seen may continue in the batch or partition
beside it: they stay open (every flow of every queue, OPEN_FLOWS_MAX at
most) and are judged once the bin is whole, so the answer does not depend on
where batches or partitions begin.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..detect.columns import endpoint, ip_text
from ..detect.detector import MIN_RATE_WINDOW_S, AnalysisContext, Detector, LiveCounter, check_merge, register
from ..detect.evidence import evidence_frames, keep_ends
from ..detect.figure import ReportFigure, TimeBins
from ..detect.grouping import group_by, rank_by_key
from ..detect.hashing import mix64
from ..errors import RuleError
from ..findings import Finding, iso_time
from ..flows.community_id import community_id
from ..rss import MICROSOFT_KEY, SYMMETRIC_KEY, RssModel
from ..rules import ALERT_SECONDS, RATE_PPS, RATIO, Param, Range
from ..schema import L_TUNNEL, PROTO_NAMES, TUNNEL_NAMES, PacketBatch
from ..units import NS, plural

# the rules whose findings this one reads, by id (detect.detector.Detector.AFTER): no rule imports another
ECHO_LOOP = "echo-loop"

NAMED_KEYS = {"microsoft": MICROSOFT_KEY, "symmetric": SYMMETRIC_KEY}
# Cells (bins spanned by one batch times queues) beyond which a batch's
# counts are gathered with a sort instead of a dense bincount (wild
# timestamps, microsecond bins, a thousand queues): the state holds only the
# (bin, queue) cells that received packets, never a bins x queues matrix.
DENSE_CELLS_MAX = 1 << 19
# Per-batch partial histograms kept before they are folded into one.
PARTS_MAX = 32
# Frames are kept from a queue that dominates a bin within one batch at this
# share of the firing rate: a bin split over two batches still gets evidence,
# and quiet bins cost nothing.
EVIDENCE_RATE_RATIO = 0.25
# Frames kept per busy bin as evidence, and flows named per finding.
FRAMES_PER_BIN = 16
FLOWS_NAMED = 5
# Flows counted per busy bin: the largest ones, so that those named are
# counted exactly unless many flows of the same size share the queue.
FLOWS_PER_BIN = 16
# Flows (of every queue) kept from each part of a bin that a batch or a partition may cut: its first and last
# bins stay open until the parts beside them arrive, keeping every flow, every queue's packets and its first and
# last frames, and are judged once whole, as one pass judges an uncut bin; whatever the cuts, the joined bin's
# busiest queue then names the same flows with the same counts. Past this many flows in a part, its largest
# are kept and the queues that lost some count theirs as lower bounds (flows_counts_exact false, as for a
# queue with more than FLOWS_PER_BIN flows). 56 bytes each: two open bins cost at most about half a megabyte.
OPEN_FLOWS_MAX = 4_096
# A flow is named in the message (not only in the evidence) when it fills at
# least this share of the queue's packets: the rest are bystanders.
MSG_FLOW_SHARE_RATIO = 0.1
# Share of the queue's packets in tunnels from which the message says that
# the NIC hashed their outer header.
MSG_TUNNEL_SHARE_RATIO = 0.5

# one counted flow of a busy bin's queue: the header the NIC hashed
FLOW_DTYPE = np.dtype([("key", np.uint64), ("packets", np.int64), ("src_ip_hi", np.uint64),
                       ("src_ip_lo", np.uint64), ("dest_ip_hi", np.uint64), ("dest_ip_lo", np.uint64),
                       ("src_port", np.uint16), ("dest_port", np.uint16), ("proto", np.uint8), ("tunnel", np.uint8)])
# a flow of an open bin, on its queue
OPEN_FLOW_DTYPE = np.dtype([*FLOW_DTYPE.descr, ("queue", np.uint16)])


@dataclass
class _Cell:
    """The dominant queue of one busy bin: evidence frames, its largest flows, its tunnelled packets."""

    frames: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    flows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=FLOW_DTYPE))
    flows_cut: bool = False     # smaller flows were dropped: the counts kept are lower bounds
    packets: int = 0
    tunnelled: int = 0

    def absorb(self, other: _Cell) -> None:
        self.frames = keep_ends(self.frames, other.frames, FRAMES_PER_BIN)
        self.flows, cut = _largest_flows(np.concatenate([self.flows, other.flows]), FLOWS_PER_BIN)
        self.flows_cut = self.flows_cut or other.flows_cut or cut
        self.packets += other.packets
        self.tunnelled += other.tunnelled


@dataclass
class _OpenBin:
    """A bin at the edge of what a state has seen, which a batch or partition boundary may have cut: each queue's
    packets, tunnelled packets, first and last frames, and every flow (OPEN_FLOWS_MAX at most)."""

    packets: np.ndarray                 # per queue
    tunnelled: np.ndarray               # per queue
    frame_queues: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    frames: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    flows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=OPEN_FLOW_DTYPE))
    lost: np.ndarray | None = None      # per queue: flows dropped past OPEN_FLOWS_MAX

    def join(self, other: _OpenBin) -> None:
        self.packets = self.packets + other.packets
        self.tunnelled = self.tunnelled + other.tunnelled
        self.frame_queues, self.frames = _queue_ends(np.concatenate([self.frame_queues, other.frame_queues]),
                                                     np.concatenate([self.frames, other.frames]))
        self.flows, lost = _open_flows(np.concatenate([self.flows, other.flows]), len(self.packets))
        for more in (other.lost, lost):
            if more is not None:
                self.lost = more if self.lost is None else self.lost | more

    def cell(self, min_share: float, floor: float) -> tuple[int, _Cell] | None:
        """The busiest queue (the lowest of equals) and its cell, as one pass keeps it from a whole bin: only
        where it dominates the bin."""
        queue = int(np.argmax(self.packets))
        top = int(self.packets[queue])
        if top < min_share * int(self.packets.sum()) or top < floor:
            return None
        mine = self.flows[self.flows["queue"] == queue]
        flows = np.zeros(len(mine), dtype=FLOW_DTYPE)
        for name in FLOW_DTYPE.names:
            flows[name] = mine[name]
        flows, cut = _largest_flows(flows, FLOWS_PER_BIN)
        lost = self.lost is not None and bool(self.lost[queue])
        frames = keep_ends(np.zeros(0, dtype=np.int64), self.frames[self.frame_queues == queue], FRAMES_PER_BIN)
        return queue, _Cell(frames=frames, flows=flows, flows_cut=cut or lost, packets=top,
                            tunnelled=int(self.tunnelled[queue]))


def _queue_ends(queues: np.ndarray, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each queue's first and last FRAMES_PER_BIN // 2 frames (queues, frames)."""
    if len(frames) == 0:
        return queues, frames
    # a part's frames come in order; a stable sort by queue (16 bits: a radix sort) keeps them so
    order = np.lexsort((frames, queues)) if np.any(np.diff(frames) < 0) else \
        np.argsort(queues.astype(np.uint16), kind="stable")
    queues, frames = queues[order], frames[order]
    starts = np.flatnonzero(np.concatenate(([True], queues[1:] != queues[:-1])))
    sizes = np.diff(np.append(starts, len(queues)))
    rank = np.arange(len(queues)) - np.repeat(starts, sizes)
    half = FRAMES_PER_BIN // 2
    keep = (rank < half) | (rank >= np.repeat(sizes, sizes) - half)
    return queues[keep], frames[keep]


def _open_flows(flows: np.ndarray, queues: int) -> tuple[np.ndarray, np.ndarray | None]:
    """One row per flow key (a key hashes to one queue) with packets summed, the OPEN_FLOWS_MAX largest; and per
    queue whether any of its flows were dropped (None when none was)."""
    if len(flows) == 0:
        return flows, None
    group, _rank, firsts = rank_by_key(flows["key"])
    out = flows[firsts]
    out["packets"] = np.bincount(group, weights=flows["packets"], minlength=len(firsts))
    if len(out) <= OPEN_FLOWS_MAX:
        return out, None
    order = np.argsort(-out["packets"], kind="stable")
    lost = np.zeros(queues, dtype=bool)
    lost[out["queue"][order[OPEN_FLOWS_MAX:]]] = True
    return out[np.sort(order[:OPEN_FLOWS_MAX])], lost


def _largest_flows(flows: np.ndarray, limit: int) -> tuple[np.ndarray, bool]:
    """One row per flow key with packets summed, the `limit` largest first; and whether any were cut."""
    if len(flows) == 0:
        return flows, False
    order, starts, _counts = group_by(flows["key"])
    out = flows[order[starts]].copy()
    out["packets"] = np.add.reduceat(flows["packets"][order], starts)
    return out[np.argsort(-out["packets"], kind="stable")[:limit]], len(out) > limit


def _key_bytes(rule, text: str) -> bytes:
    key = NAMED_KEYS.get(text.lower())
    if key is not None:
        return key
    try:
        key = bytes.fromhex(text.replace(":", "").replace(" ", ""))
    except ValueError:
        raise RuleError(rule.path, "params.key", "not 'microsoft', 'symmetric' or a hex string") from None
    if len(key) < 40:
        raise RuleError(rule.path, "params.key", f"{len(key)} bytes: an RSS key for IPv6 4-tuples needs 40")
    return key


def _cells(bins: np.ndarray, queues: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, ...]:
    """(bin, queue, count) cells, one per distinct (bin, queue) with counts summed, sorted by bin then queue."""
    order = np.lexsort((queues, bins))
    bins, queues, counts = bins[order], queues[order], counts[order]
    if len(bins) == 0:
        return bins, queues, counts
    starts = np.flatnonzero(np.concatenate(([True], (bins[1:] != bins[:-1]) | (queues[1:] != queues[:-1]))))
    return bins[starts], queues[starts], np.add.reduceat(counts, starts)


def _fold(parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """Partial states as one: (bin, queue, count) cells summed; per bin, first/last packet times widened."""
    cells = _cells(*(np.concatenate([part[i] for part in parts]) for i in range(3)))
    bins = np.concatenate([part[3] for part in parts])
    keys, inverse = np.unique(bins, return_inverse=True)
    first = np.full(len(keys), np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(len(keys), np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, inverse, np.concatenate([part[4] for part in parts]))
    np.maximum.at(last, inverse, np.concatenate([part[5] for part in parts]))
    return (*cells, keys, first, last)


@register
class RssSaturation(Detector):
    rule_id = "rss-saturation"
    EVE_SIGNATURE = (18, "Misc activity")
    # what its findings rest on beyond what it saw (detect.confidence): each window's queue shares
    QUALITY_NEEDS = frozenset({"timing"})
    AFTER = (ECHO_LOOP,)
    PARAMS = {
        # a name, or a key of 40 to 52 bytes in hex with separators (ethtool -x prints 52 for i40e/ice)
        "key": Param(str, "microsoft", "Toeplitz key: 'microsoft' (the verification-suite key most drivers use), "
                                      "'symmetric' (0x6d5a repeated: both directions on one queue) or the NIC's "
                                      "key in hex (ethtool -x)", Range(1, 256),
                     "A key other than the NIC's puts flows on other queues than the NIC does, and the shares "
                     "are those of another NIC."),
        # Current NICs spread over at most a few hundred RSS queues (ice/E810: 256 per function,
        # ICE_MAX_LG_RSS_QS); 1,024 leaves room for the largest hosts. Each queue is a column of the
        # per-bin histogram: a count beyond any NIC's would only cost memory.
        "queues": Param(int, 8, "receive queues the NIC spreads packets over (usually one per core)",
                        Range(1, 1024),
                        "Set it to the NIC's (ethtool -l): fewer queues than the NIC's make flows collide that the "
                        "NIC spreads, more spread flows that share a queue on the NIC."),
        # Hardware tables are powers of two: 128 (ixgbe), 512 (i40e), 2,048 (the ice PF table,
        # devlink resource rss/lut_2048); the kernel's RSS selftest expects at least 4 entries per
        # queue, so 4,096 serves 1,024 queues.
        "indirection_table_size": Param(int, 128, "entries of the NIC's indirection table (filled round robin)",
                                        Range(1, 4096, power_of_two=True),
                                        "128 on ixgbe and most Linux drivers (ethtool -x lists the table); another "
                                        "size sends hashes to other queues than the NIC does."),
        "hash_tcp_ports": Param(bool, True, "TCP packets hash ports as well as addresses", None,
                                "The TCP 4-tuple is what NICs hash; false models one that hashes addresses only, "
                                "which puts every connection between two hosts on one queue."),
        "hash_udp_ports": Param(bool, False, "UDP packets hash ports (ixgbe and many drivers hash UDP addresses "
                                             "only)", None,
                                "Match the NIC (ethtool -n IFACE rx-flow-hash udp4): true spreads the UDP flows "
                                "between two hosts over the queues, as a NIC set to sdfn does."),
        "hash_inner_headers": Param(bool, False, "tunnelled packets (VXLAN, Geneve, GRE, IP-in-IP) hash their inner "
                                                 "header: NICs set up for inner-header RSS; others hash the outer one",
                                    None,
                                    "Match the NIC: hashing the outer header, it puts every flow between two "
                                    "tunnel endpoints on one queue, which false models."),
        # from a microsecond (pcap's finest common resolution) to an hour
        "bin_ms": Param(float, 100.0, "time bin over which queue shares are measured", Range(0.001, 3_600_000),
                        "Shorter bins catch short floods but also TCP bursts; longer ones average a burst away but "
                        "dilute a short flood."),
        "min_share_ratio": Param(float, 0.5, "share of a bin's packets one queue must reach", RATIO,
                                 "0.5 is four times the fair share of 8 queues. Lower catches milder imbalance, and "
                                 "with few flows on the link ordinary hash collisions."),
        "min_queue_rate_pps": Param(float, 50000.0, "packet rate of that queue in the bin for it to matter",
                                    RATE_PPS,
                                    "A core handles some hundreds of thousands of packets per second through "
                                    "conntrack and firewall rules; below 50,000 an imbalance is harmless, and lower "
                                    "values report it all the same."),
        "high_queue_rate_pps": Param(float, 500000.0, "queue packet rate from which the finding is high", RATE_PPS,
                                     "Near what one core can forward with a firewall and NAT in the path; lower "
                                     "values call a queue high that still keeps up."),
    }
    ALERTS = {
        "suppress_s": Param(float, 60.0, "least seconds between two events about one saturated receive queue",
                            ALERT_SECONDS, "Shorter tracks the load closely but repeats itself during a long flood."),
        "resolve_s": Param(float, 10.0, "seconds without a saturated time bin before the queue is resolved",
                           ALERT_SECONDS, "Bursty elephant flows pause between bursts; a short hold flaps."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        p = self.params
        table = p["indirection_table_size"]
        self.model = RssModel(key=_key_bytes(rule, p["key"]), queues=p["queues"], tcp_ports=p["hash_tcp_ports"],
                              udp_ports=p["hash_udp_ports"], table_size=table, inner_headers=p["hash_inner_headers"])
        self.bin_ns = max(1, int(p["bin_ms"] * 1e6))
        # per batch: (bin, queue, count) of the cells that received packets; per bin its first and last time
        self.parts: list[tuple[np.ndarray, ...]] = []
        self.cells: dict[tuple[int, int], _Cell] = {}             # (bin, queue) -> its busy queue's details
        # the first and last bins seen, which the batches or partitions beside them may continue
        self.open: dict[int, _OpenBin] = {}
        self.edges: tuple[int, int] | None = None

    # ---- state ------------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        if len(batch) == 0:
            return
        queues = self.params["queues"]
        queue = self.model.queue(batch).astype(np.int64)
        ts = batch["ts_ns"]
        bins = ts // self.bin_ns
        first = int(bins.min())
        if (int(bins.max()) - first + 1) * queues <= DENSE_CELLS_MAX:
            flat = np.bincount((bins - first) * queues + queue)
            present = np.flatnonzero(flat)
            cells = (present // queues + first, present % queues, flat[present].astype(np.int64))
        else:
            cells = _cells(bins, queue, np.ones(len(bins), dtype=np.int64))
        part_bins = np.unique(cells[0])
        at = np.searchsorted(part_bins, bins)
        first_ns = np.full(len(part_bins), np.iinfo(np.int64).max, dtype=np.int64)
        last_ns = np.full(len(part_bins), np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(first_ns, at, ts)
        np.maximum.at(last_ns, at, ts)
        self.parts.append((*cells, part_bins, first_ns, last_ns))
        if len(self.parts) > PARTS_MAX:
            self.parts = [_fold(self.parts)]
        self._keep_cells(batch, queue, bins, at, part_bins, cells)

    def _floor(self) -> float:
        """Packets of a bin's busiest queue below which its frames and flows are not kept."""
        p = self.params
        return p["min_queue_rate_pps"] * p["bin_ms"] / 1000.0 * EVIDENCE_RATE_RATIO

    def _keep_cells(self, batch, queue, bins, at, part_bins, cells) -> None:
        """Frames and flows of the dominant queue of the bins where it dominates, whole within this batch; every
        flow of the batch's first and last bins, which the batches beside it may continue (open bins)."""
        p = self.params
        total, top, top_count = _per_bin(*cells)
        busy = (top_count >= p["min_share_ratio"] * total) & (top_count >= self._floor())
        edge = np.zeros(len(part_bins), dtype=bool)
        edge[[0, -1]] = True
        busy &= ~edge
        hot_queue = np.full(len(part_bins), -1, dtype=np.int64)
        hot_queue[busy] = top[busy]
        rows = np.flatnonzero((hot_queue[at] == queue) | edge[at])
        # the flow of each row as the NIC hashed it; its key counts it per bin
        hashed = self.model.hashed_headers(batch, rows)
        tunnel = np.where((batch["layers"][rows] & np.uint32(L_TUNNEL)) != 0, batch["tunnel"][rows], 0)
        flow_key = mix64(hashed["src_ip_hi"], hashed["src_ip_lo"], hashed["dest_ip_hi"], hashed["dest_ip_lo"],
                         (hashed["src_port"].astype(np.uint64) << np.uint64(16)) | hashed["dest_port"],
                         hashed["proto"], tunnel)
        order, starts, sizes = group_by(at[rows])
        frames = batch["frame"]
        for start, size in zip(starts.tolist(), sizes.tolist()):
            mine = order[start:start + size]
            span = rows[mine]
            if edge[at[span[0]]]:
                self._open_part(int(bins[span[0]]), mine, span, queue, flow_key, hashed, tunnel, frames)
                continue
            cell = (int(bins[span[0]]), int(queue[span[0]]))
            picked = np.concatenate([frames[span[:FRAMES_PER_BIN // 2]], frames[span[-(FRAMES_PER_BIN // 2):]]])
            part = _Cell(frames=picked, packets=len(span), tunnelled=int(np.count_nonzero(tunnel[mine])))
            flows = np.zeros(len(mine), dtype=FLOW_DTYPE)
            flows["key"], flows["packets"], flows["tunnel"] = flow_key[mine], 1, tunnel[mine]
            for name, column in hashed.items():
                flows[name] = column[mine]
            part.flows, part.flows_cut = _largest_flows(flows, FLOWS_PER_BIN)
            self.cells.setdefault(cell, _Cell()).absorb(part)
        self._close_inner(int(part_bins[0]), int(part_bins[-1]))

    def _open_part(self, bin_, mine, span, queue, flow_key, hashed, tunnel, frames) -> None:
        """Every flow, queue count and queue's end frames of one edge bin's rows here, joined to its open bin."""
        queues = self.params["queues"]
        on = queue[span]
        part = _OpenBin(packets=np.bincount(on, minlength=queues).astype(np.int64),
                        tunnelled=np.bincount(on, weights=tunnel[mine] != 0, minlength=queues).astype(np.int64))
        part.frame_queues, part.frames = _queue_ends(on, frames[span].astype(np.int64))
        # one row per flow (any of its packets: they share the header its key hashes), built after grouping: far
        # fewer than the packets of a flood
        group, _rank, at_first = rank_by_key(flow_key[mine])
        counts = np.bincount(group, minlength=len(at_first))
        first = mine[at_first]
        flows = np.zeros(len(first), dtype=OPEN_FLOW_DTYPE)
        flows["key"], flows["packets"], flows["tunnel"] = flow_key[first], counts, tunnel[first]
        flows["queue"] = on[at_first]
        for name, column in hashed.items():
            flows[name] = column[first]
        part.flows, part.lost = _open_flows(flows, queues)
        self._open_bin(bin_).join(part)

    def _open_bin(self, bin_: int) -> _OpenBin:
        """The open bin `bin_`, a new empty one if none (never another state's: merge leaves `other` as it was)."""
        if bin_ not in self.open:
            queues = self.params["queues"]
            self.open[bin_] = _OpenBin(packets=np.zeros(queues, dtype=np.int64),
                                       tunnelled=np.zeros(queues, dtype=np.int64))
        return self.open[bin_]

    def _close_inner(self, first: int, last: int) -> None:
        """Widen the edges to [first, last] and judge the open bins no longer at an edge, which nothing later
        can continue: as one pass judges a bin whole."""
        self.edges = (first, last) if self.edges is None else (min(self.edges[0], first), max(self.edges[1], last))
        p = self.params
        for bin_ in [b for b in self.open if b not in self.edges]:
            kept = self.open.pop(bin_).cell(p["min_share_ratio"], self._floor())
            if kept is not None:
                self.cells.setdefault((bin_, kept[0]), _Cell()).absorb(kept[1])

    def merge(self, other: RssSaturation) -> RssSaturation:
        check_merge(self, other)
        self.parts.extend(other.parts)
        for cell, theirs in other.cells.items():
            self.cells.setdefault(cell, _Cell()).absorb(theirs)
        for bin_, theirs in other.open.items():
            self._open_bin(bin_).join(theirs)
        if other.edges is not None:
            self._close_inner(*other.edges)
        return self

    def _all_cells(self) -> dict[tuple[int, int], _Cell]:
        """The cells, and those of the open bins judged as they stand (the state is left open)."""
        p = self.params
        out = dict(self.cells)
        for bin_, open_bin in self.open.items():
            kept = open_bin.cell(p["min_share_ratio"], self._floor())
            if kept is not None:
                cell = _Cell()
                for part in (out.get((bin_, kept[0])), kept[1]):
                    if part is not None:
                        cell.absorb(part)
                out[(bin_, kept[0])] = cell
        return out

    def _folded(self) -> tuple[np.ndarray, ...]:
        """(bin, queue, count) cells, then distinct bins with their first and last packet times, of everything
        folded in."""
        if not self.parts:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty, empty, empty, empty
        self.parts = [_fold(self.parts)]
        return self.parts[0]

    def histogram(self) -> tuple[np.ndarray, np.ndarray]:
        """(bins, counts[bin, queue]) of everything folded in, dense over the bins that hold packets (for
        plots and tests: a bins x queues matrix): bin i starts at bins[i] * bin_ms."""
        cell_bins, cell_queues, cell_counts, bins, _, _ = self._folded()
        counts = np.zeros((len(bins), self.params["queues"]), dtype=np.int64)
        counts[np.searchsorted(bins, cell_bins), cell_queues] = cell_counts
        return bins, counts

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        p = self.params
        *cells, bins, first_ns, last_ns = self._folded()
        if len(bins) == 0:
            return []
        bin_s = self.bin_ns / NS
        total, top, top_count = _per_bin(*cells)
        # a bin whose packets all carry (nearly) one timestamp tells nothing of a rate
        timed = (last_ns - first_ns) >= int(MIN_RATE_WINDOW_S * NS)
        fire = timed & (top_count >= p["min_share_ratio"] * total) & (top_count / bin_s >= p["min_queue_rate_pps"])
        hot = np.flatnonzero(fire)
        if len(hot) == 0:
            return []
        # an episode: firing bins of one queue, each at most one bin after the previous
        breaks = (np.diff(bins[hot]) > 2) | (np.diff(top[hot]) != 0)
        starts = np.flatnonzero(np.concatenate(([True], breaks)))
        ends = np.append(starts[1:], len(hot))
        loops = ctx.findings.get(ECHO_LOOP, [])
        all_cells = self._all_cells()
        return [self._finding(hot[s:e], bins, total, top, top_count, loops, all_cells) for s, e in zip(starts, ends)]

    def _finding(self, idx, bins, total, top, top_count, loops, all_cells) -> Finding:
        p = self.params
        bin_s = self.bin_ns / NS
        queue = int(top[idx[0]])
        packets = int(top_count[idx].sum())
        window = int(total[idx].sum())
        share = packets / window
        rates = top_count[idx] / bin_s
        peak = float(rates.max())
        first_ns, last_ns = int(bins[idx[0]]) * self.bin_ns, (int(bins[idx[-1]]) + 1) * self.bin_ns
        cells = [all_cells[key] for key in ((int(bins[i]), queue) for i in idx) if key in all_cells]
        named = _named_flows(cells)
        loop = _loop_filling(named, loops)
        looping = loop is not None and bool(loop.evidence.get("loop"))
        severity = "high" if peak >= p["high_queue_rate_pps"] or looping else self.rule.severity
        fair = 1 / p["queues"]
        exact = not any(cell.flows_cut for cell in cells)
        flow_text = "; ".join(
            f"{f['proto'].upper()} {endpoint(f['src_ip'], f['src_port'])} -> {endpoint(f['dest_ip'], f['dest_port'])} "
            f"({'' if exact else 'at least '}{f['packets_in_window']:,} packets)"
            for f in named[:3] if f["packets_in_window"] >= MSG_FLOW_SHARE_RATIO * packets)
        msg = (f"receive queue {queue} of {p['queues']} took {share:.0%} of {window:,} packets "
               f"(fair share {fair:.1%}) in {plural(len(idx), 'bin')} of {p['bin_ms']:g} ms, peak {peak:,.0f} "
               f"packets/s on that queue" + (f"; filled by {flow_text}" if flow_text else ""))
        counted = sum(cell.packets for cell in cells)
        tunnelled = sum(cell.tunnelled for cell in cells) / counted if counted else 0.0
        kinds = sorted({f["tunnel"] for f in named if "tunnel" in f})
        if tunnelled >= MSG_TUNNEL_SHARE_RATIO:
            hashed = ("their inner headers (inner-header RSS)" if p["hash_inner_headers"] else
                      "their outer headers: every flow between two tunnel endpoints shares one hash unless the "
                      "NIC hashes UDP ports or inner headers")
            msg += f"; {tunnelled:.0%} of them tunnelled ({', '.join(kinds) or 'tunnel'}), hashed by {hashed}"
        if loop is not None:
            what = "an echo loop" if looping else "an identical-frame flood"
            msg += f"; the flow is {what} ({loop.msg[:120]})"
        frames = np.concatenate([cell.frames for cell in cells]) if cells else np.zeros(0, dtype=np.int64)
        main = named[0] if named else {}
        evidence = {
            "queue": queue, "queues": p["queues"], "key": p["key"], "hash_udp_ports": p["hash_udp_ports"],
            "hash_inner_headers": p["hash_inner_headers"],
            "bin_ms": p["bin_ms"], "bins": len(idx), "share_ratio": round(share, 4), "fair_share_ratio": round(fair, 4),
            "queue_packets": packets, "window_packets": window, "peak_queue_rate_pps": round(peak, 1),
            "tunnelled_ratio": round(tunnelled, 4),
            # with more flows on the queue than are counted per bin, those named are lower bounds
            "flow_counts_exact": exact,
            "bin_starts": [iso_time(int(bins[i]) * self.bin_ns) for i in idx[:16]],
            "bin_queue_packets": top_count[idx[:16]].astype(int).tolist(),
            "flows": named, "echo_loop": loop.msg if loop is not None else None,
            "evidence_frames": evidence_frames(np.unique(frames)),
        }
        return self.finding(severity, msg, identifier=f"queue {queue}", first_seen=first_ns, last_seen=last_ns,
                            n=packets,
                            src_ip=main.get("src_ip"), dest_ip=main.get("dest_ip"), src_port=main.get("src_port"),
                            dest_port=main.get("dest_port"), proto=main.get("proto"),
                            community_id=main.get("community_id"),
                            evidence={k: v for k, v in evidence.items() if v is not None})

    # ---- report and watch -----------------------------------------------------
    def figures(self, findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
        """One heat map of every queue's share over the capture, when a queue saturated."""
        if not findings:
            return []
        own_bins, counts = self.histogram()
        return [QueueShareFigure(own_bins, counts, self.bin_ns, bins)]

    def live_counters(self) -> list[LiveCounter]:
        return [LiveCounter("rss_queue_packets", "Packets per receive queue of the modelled NIC", "queue",
                            self.params["queues"], self._queue_packets)]

    def _queue_packets(self, batch: PacketBatch) -> np.ndarray:
        queues = self.params["queues"]
        return np.bincount(self.model.queue(batch).astype(np.int64), minlength=queues)[:queues]


# Columns of the queue-share heat map: past this many of the rule's bins, neighbouring bins are summed.
FIGURE_COLUMNS_MAX = 1_200


class QueueShareFigure(ReportFigure):
    """Each receive queue's share of the IP packets per bin of the rule (bin_ms), from the rule's own counts: the
    share its message gives for a saturated bin is that bin's cell (one number, one source). A capture of more
    than FIGURE_COLUMNS_MAX bins is drawn with neighbouring bins summed, and the axis says so."""

    needs_batches = False

    title = "Share of packets per receive queue (RSS model of the rule)"

    def __init__(self, own_bins: np.ndarray, counts: np.ndarray, bin_ns: int, axis: TimeBins):
        self.axis = axis
        first = int(own_bins[0]) if len(own_bins) else 0
        span = int(own_bins[-1]) - first + 1 if len(own_bins) else 0
        self.merged = max(1, -(-span // FIGURE_COLUMNS_MAX))            # rule bins per column
        columns = -(-span // self.merged) if span else 0
        self.packets = np.zeros((columns, counts.shape[1] if counts.ndim == 2 else 0), dtype=np.int64)
        if len(own_bins):
            np.add.at(self.packets, (own_bins - first) // self.merged, counts)
        self.width_ns = bin_ns * self.merged
        self.first_ns = first * bin_ns                  # where the first column starts, ns since the epoch
        self.x0 = (self.first_ns - axis.start_ns) / NS

    def add(self, batch: PacketBatch) -> None:
        """Nothing: drawn from the rule's own counts."""

    def merge(self, other: QueueShareFigure) -> QueueShareFigure:
        """Nothing to take: the rule's counts are merged already."""
        return self

    def shares(self) -> np.ndarray:
        """[column, queue] share of the column's packets."""
        return self.packets / np.maximum(self.packets.sum(axis=1, keepdims=True), 1)

    def draw(self, ax, flows) -> None:
        share = self.shares()
        width_s = self.width_ns / NS
        image = ax.imshow(share.T, aspect="auto", origin="lower", vmin=0, vmax=1, interpolation="nearest",
                          cmap="magma", extent=(self.x0, self.x0 + len(share) * width_s, -0.5, share.shape[1] - 0.5))
        ax.figure.colorbar(image, ax=ax, label="share of packets")
        each = f"{width_s * 1e3:g} ms" if width_s < 1 else f"{width_s:g} s"
        summed = f": {self.merged} of the rule's bins summed)" if self.merged > 1 else ", the rule's bins)"
        self.axis.time_axis(ax, f" (columns of {each}{summed}")
        ax.set_ylabel("receive queue")


def _per_bin(bins: np.ndarray, queues: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, ...]:
    """From (bin, queue, count) cells sorted by bin then queue: per distinct bin its packets, its busiest
    queue (the lowest of equals) and that queue's packets."""
    if len(bins) == 0:
        return counts, queues, counts
    starts = np.flatnonzero(np.concatenate(([True], bins[1:] != bins[:-1])))
    # sorted by bin first, each bin's cells keep their places: the first of each is its busiest
    best = np.lexsort((queues, -counts, bins))[starts]
    return np.add.reduceat(counts, starts), queues[best], counts[best]


def _named_flows(cells: list[_Cell]) -> list[dict]:
    """The largest flows the NIC put on the queue over the cells, with the packets counted there."""
    if not cells:
        return []
    flows, _ = _largest_flows(np.concatenate([cell.flows for cell in cells]), FLOWS_NAMED)
    out = []
    for row in flows:
        src, dst = ip_text(row["src_ip_hi"], row["src_ip_lo"]), ip_text(row["dest_ip_hi"], row["dest_ip_lo"])
        proto, sport, dport = int(row["proto"]), int(row["src_port"]), int(row["dest_port"])
        item = {"proto": PROTO_NAMES.get(proto, str(proto)), "src_ip": src, "src_port": sport,
                "dest_ip": dst, "dest_port": dport, "packets_in_window": int(row["packets"]),
                "community_id": community_id(src, dst, proto, sport, dport) if sport or dport else None}
        if row["tunnel"]:
            item["tunnel"] = TUNNEL_NAMES.get(int(row["tunnel"]), str(int(row["tunnel"])))
        out.append({k: v for k, v in item.items() if v is not None})
    return out


def _loop_filling(named: list[dict], loops: list[Finding]) -> Finding | None:
    """The echo loop finding whose frame belongs to the flow that fills the queue most, if any."""
    if not named:
        return None
    top = named[0]
    for loop in loops:
        if (loop.src_ip, loop.dest_ip) == (top["src_ip"], top["dest_ip"]) and \
                loop.src_port in (None, top["src_port"]) and loop.dest_port in (None, top["dest_port"]):
            return loop
    return None

"""pmtud-blackhole: a host that keeps sending packets larger than the path MTU routers report to it.

Path MTU discovery (RFC 1191 for IPv4, RFC 8201 for IPv6) works when a
router that cannot forward a packet tells the sender so (ICMP type 3 code 4
"fragmentation needed", ICMPv6 Packet Too Big) and the sender shrinks its
packets. When the sender ignores or never receives those messages (a
firewall that drops ICMP, a virtual NIC that segments at a fixed 1500 bytes),
its large packets die on the path: the routers report again and again, the
sender retransmits, and a bulk transfer crawls.

A capture shows routers' ICMP messages quoting a flow of the host, and the
host's packets to the same peer that stay larger than the reported MTU
after the first message. Retransmissions of one sequence number in
shrinking sizes are the sign of a sender probing downwards blindly. A host
whose packets fit the MTU soon after the first message has adapted: PMTUD
works there and nothing is reported.

Only senders that can adapt are judged: TCP, and other flows whose packet
sizes vary (an application choosing its datagram sizes, QUIC). A diagnostic
that sends fixed-size Don't-Fragment probes (`ping -M do -s 1472`, an MPLS
LSP ping to 127.0.0.0/8 as RFC 8029 sec. 4.3 addresses it, any flow of
packets of one size) draws a message for every probe and never adapts, by
design: it measures the path MTU. Such probes are reported at info severity
with the MTU they found.

State: per (host, peer) pair that an ICMP message named, the smallest MTU
reported, the messages' count and times, the routers, per flow (protocol
and ports) of the host to that peer after the first message its first size,
whether sizes varied and counters of oversized packets, and a bounded buffer
of those packets' header fields for the size ladder, the retransmissions
and the goodput. Packets sent before a pair is first named are not kept:
they are the ones that triggered the message. Two partial states merge by
pair.

A cluster partition that does not begin the capture cannot know the pairs
named before it, so it also keeps every host packet (`pending`: per (host,
peer) pair the header rows of its first MAX_ROWS_PER_PAIR packets, then
per flow and size a count with its times and frames); `merge` replays those
of the pairs the earlier state named after that state's messages, as one
pass checked them, and a pair named only in the later part keeps what that
part checked itself. Left inexact, by design: the host packets of pairs
beyond the first MAX_PAIRS a part sees (not kept: a busy link's later parts
lose the pairs they meet late), and those past MAX_PENDING_ROWS header rows
in one part (counted by flow and size, which keeps the counts but not the
size ladder and goodput of their rows); a smaller MTU reported in a later batch
of the same part (one pass judged that part's earlier batches against the
larger one); and packets counted by size that fall within the grace time
of the first message (judged as after it).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..detect.columns import ip_halves, ip_text
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.display import match_flow
from ..detect.evidence import append_ends, evidence_frames, keep_ends
from ..detect.figure import ReportFigure, TimeBins
from ..detect.grouping import find_sorted, group_by, member, rank_by_key
from ..detect.hashing import mix64
from ..detect.state import fold_rows
from ..findings import Finding, iso_time
from ..rules import ALERT_SECONDS, COUNT, Param, Range
from ..schema import (
    IP,
    L_ICMP,
    L_ICMP6,
    L_MTU,
    L_PAYLOAD,
    L_PORTS,
    L_QUOTE,
    L_QUOTE_PORTS,
    L_TCP,
    PROTO_NAMES,
    PROTO_TCP,
    PacketBatch,
)
from ..units import NS

if TYPE_CHECKING:   # pandas loads only where a frame is built: it takes a third of a second to import
    import pandas as pd

ICMP_UNREACH = 3            # destination unreachable, RFC 792
ICMP_UNREACH_NEEDFRAG = 4   # fragmentation needed and DF set, RFC 792 / RFC 1191
ICMP6_PACKET_TOO_BIG = 2    # RFC 4443 section 3.2
ICMP_ECHO = 8               # echo request, RFC 792
ICMP6_ECHO = 128            # echo request, RFC 4443 section 4.1
# MPLS LSP ping sends its echo requests to 127.0.0.0/8 (RFC 8029 sec. 4.3),
# IPv6 ones to ::ffff:127.0.0.0/104, which the schema holds alike: no host
# there ever sends bulk data, so a pair toward it is a diagnostic.
LOOPBACK_V4_MAPPED = (0x0000FFFF_7F000000, 0xFFFFFFFF_FF000000)   # (value, mask) of the low half
# A reported MTU below these is not a path MTU a host may adopt: 68 is the
# smallest IPv4 MTU (RFC 791), 1280 the smallest IPv6 link MTU (RFC 8200).
# Such messages are forged or broken (RFC 1191 routers send 0 for "unknown").
MIN_MTU_IPV4 = 68
MIN_MTU_IPV6 = 1280
# (host, peer) pairs watched at once: every pair costs a few hundred bytes
# plus its buffer, and a capture of forged ICMP must not grow the state
# without bound. Pairs beyond this are counted, not watched.
MAX_PAIRS = 4096
# Header rows of the host's packets kept per pair after the first message:
# enough for the ladder of a black-holed transfer (whose goodput is low by
# definition); an adapted bulk transfer fills it quickly and is cut there.
MAX_ROWS_PER_PAIR = 4096
# Routers, flows and sizes named per finding.
MAX_LISTED = 16
# Flows of the host to one peer tracked with their own sizes and counters;
# packets of further flows share one entry per protocol (ports 0).
MAX_FLOWS_PER_PAIR = 256

# Packets drawn per flow in the report's segment-size figure: the pattern (full-size
# segments never shrinking) shows in the first few thousand; the bound holds for a
# flow of any length.
SEGMENT_POINTS_MAX = 20000
# TCP payload a packet of a given IP MTU carries: the MTU less the IPv4 or IPv6
# header and the TCP header, options not counted (RFC 879, RFC 8200 section 5).
TCP_OVERHEAD = {4: 20 + 20, 6: 40 + 20}

ROW_COLUMNS = {"ts": np.int64, "frame": np.int64, "proto": np.uint8, "sport": np.uint16,
               "dport": np.uint16, "seq": np.uint32, "payload": np.uint32, "ip_len": np.uint32}
# A partition after the first keeps the header rows of every pair's first MAX_ROWS_PER_PAIR host packets
# for the merge, up to this many in all (some 40 bytes each); further packets are counted by flow and size.
MAX_PENDING_ROWS = 1 << 18
PENDING_ROW_COLUMNS = {"key": np.uint64, "echo": np.bool_, **ROW_COLUMNS}
# per (pair, flow, IP length, echo): the packets beyond the rows kept
PENDING_SIZE_COLUMNS = {"hkey": np.uint64, "key": np.uint64, "proto": np.uint8, "sport": np.uint16,
                        "dport": np.uint16, "ip_len": np.uint32, "echo": np.bool_, "count": np.int64,
                        "first_ns": np.int64, "last_ns": np.int64}


@dataclass
class _Flow:
    """The host's packets of one flow (protocol and ports) to the peer since the first message."""

    echo: bool                          # ICMP/ICMPv6 echo requests: a probe by design
    size: int                           # IP length of its first packet
    varies: bool = False                # a later packet had another length
    packets: int = 0
    oversized: int = 0                  # larger than the MTU, after the grace time
    last_oversized_ns: int = 0
    oversized_frames: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def absorb(self, other: _Flow) -> None:
        self.varies = self.varies or other.varies or other.size != self.size
        self.packets += other.packets
        self.oversized += other.oversized
        self.last_oversized_ns = max(self.last_oversized_ns, other.last_oversized_ns)
        self.oversized_frames = keep_ends(self.oversized_frames, other.oversized_frames)


@dataclass
class _Pair:
    """What is known about one (host, peer) pair since a router first reported a smaller MTU."""

    host: tuple[int, int]
    peer: tuple[int, int]
    mtu: int
    first_icmp_ns: int
    last_icmp_ns: int
    icmp_count: int = 0
    routers: dict = field(default_factory=dict)     # router address halves -> messages
    quoted: dict = field(default_factory=dict)      # (proto, sport, dport) quoted -> messages
    icmp_frames: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    packets_after: int = 0              # host -> peer packets after the first message
    largest_after: int = 0
    flows: dict = field(default_factory=dict)       # (proto, sport, dport) -> _Flow
    rows: dict = field(default_factory=lambda: {k: np.zeros(0, dtype=t) for k, t in ROW_COLUMNS.items()})

    @property
    def identifier(self) -> str:
        """The findings' identifier: the host told to shrink its packets, and the peer it sends them to."""
        return f"{ip_text(*self.host)} -> {ip_text(*self.peer)}"

    @property
    def to_loopback(self) -> bool:
        value, mask = LOOPBACK_V4_MAPPED
        return self.peer[0] == 0 and self.peer[1] & mask == value

    def flow_of(self, key: tuple[int, int, int]) -> _Flow | None:
        """The entry that counts the flow's packets (its own, or its protocol's shared one), if any."""
        return self.flows.get(key) or self.flows.get((key[0], 0, 0))

    def adapts(self, key: tuple[int, int, int]) -> bool:
        """Whether the flow's sender can adapt to the MTU: TCP, or sizes that vary; never a probe."""
        flow = self.flow_of(key)
        return not (self.to_loopback or flow.echo) and (key[0] == PROTO_TCP or flow.varies)

    def judged(self) -> list[_Flow]:
        return [flow for key, flow in self.flows.items() if self.adapts(key)]

    @property
    def oversized_after(self) -> int:
        """Packets above the MTU after the grace time, from senders that can adapt."""
        return sum(flow.oversized for flow in self.judged())

    @property
    def last_oversized_ns(self) -> int:
        return max((flow.last_oversized_ns for flow in self.judged()), default=0)

    @property
    def oversized_frames(self) -> np.ndarray:
        frames = np.zeros(0, dtype=np.int64)
        for flow in self.judged():
            frames = keep_ends(frames, flow.oversized_frames)
        return frames

    def flow_entry(self, key: tuple[int, int, int], echo: bool, size: int) -> _Flow:
        """The flow's entry, made on first sight; past MAX_FLOWS_PER_PAIR, its protocol's shared one."""
        if key not in self.flows and len(self.flows) >= MAX_FLOWS_PER_PAIR:
            key = (key[0], 0, 0)
        if key not in self.flows:
            self.flows[key] = _Flow(echo=echo, size=size)
        return self.flows[key]

    def absorb(self, other: _Pair) -> None:
        self.absorb_messages(other)
        self.packets_after += other.packets_after
        self.largest_after = max(self.largest_after, other.largest_after)
        for key, theirs in other.flows.items():
            self.flow_entry(key, theirs.echo, theirs.size).absorb(theirs)
        self.add_rows(other.rows)

    def absorb_messages(self, other: _Pair) -> None:
        """The routers' messages of `other`, not the host packets it checked."""
        self.mtu = min(self.mtu, other.mtu)
        self.first_icmp_ns = min(self.first_icmp_ns, other.first_icmp_ns)
        self.last_icmp_ns = max(self.last_icmp_ns, other.last_icmp_ns)
        self.icmp_count += other.icmp_count
        for mine, theirs in ((self.routers, other.routers), (self.quoted, other.quoted)):
            for key, count in theirs.items():
                if key in mine or len(mine) < MAX_LISTED:
                    mine[key] = mine.get(key, 0) + count
        self.icmp_frames = keep_ends(self.icmp_frames, other.icmp_frames)

    def add_rows(self, rows: dict) -> None:
        room = MAX_ROWS_PER_PAIR - len(self.rows["ts"])
        if room > 0 and len(rows["ts"]):
            self.rows = {k: np.concatenate([self.rows[k], rows[k][:room]]) for k in ROW_COLUMNS}


def _pair_key(src_hi, src_lo, dst_hi, dst_lo) -> np.ndarray:
    return mix64(src_hi, src_lo, dst_hi, dst_lo)


def _carriers(batch: PacketBatch) -> tuple[np.ndarray, np.ndarray]:
    """Masks of a host's own packets (anything IP but ICMP, whose errors and replies carry no data; echo
    requests kept to tell a diagnostic's probes from a host whose packets the capture lacks) and of echo
    requests."""
    layers = batch["layers"]
    icmp = (layers & np.uint32(L_ICMP | L_ICMP6)) != 0
    kind = batch["icmp_type"]
    echo = icmp & (((layers & np.uint32(L_ICMP)) != 0) & (kind == ICMP_ECHO) |
                   ((layers & np.uint32(L_ICMP6)) != 0) & (kind == ICMP6_ECHO))
    return ((layers & np.uint32(IP)) != 0) & (~icmp | echo), echo


def _host_rows(batch: PacketBatch, rows: np.ndarray, echo: np.ndarray) -> dict:
    """The header fields of host packets `rows` the checks read (ROW_COLUMNS and echo)."""
    layers = batch["layers"][rows]
    ports = (layers & np.uint32(L_PORTS)) != 0
    tcp = (layers & np.uint32(L_TCP)) != 0
    return {"ts": batch["ts_ns"][rows].astype(np.int64), "frame": batch["frame"][rows].astype(np.int64),
            "proto": batch["proto"][rows].astype(np.uint8),
            "sport": np.where(ports, batch["src_port"][rows], 0).astype(np.uint16),
            "dport": np.where(ports, batch["dest_port"][rows], 0).astype(np.uint16),
            "seq": np.where(tcp, batch["tcp_seq"][rows], 0).astype(np.uint32),
            "payload": np.where((layers & np.uint32(L_PAYLOAD)) != 0, batch["payload_len"][rows], 0).astype(np.uint32),
            "ip_len": batch["ip_len"][rows].astype(np.uint32), "echo": echo[rows]}


@register
class PmtudBlackhole(Detector):
    rule_id = "pmtud-blackhole"
    EVE_SIGNATURE = (12, "Misc activity")
    # what its findings rest on beyond what it saw (detect.confidence): what a host never sent, over time
    QUALITY_NEEDS = frozenset({"absence", "timing"})
    PARAMS = {
        "min_icmp_count": Param(int, 2, "ICMP too-big messages for one host/peer pair before it is judged", COUNT,
                                "One message is the normal start of PMTUD; a second one means the first changed "
                                "nothing. Higher values wait for more proof but miss short transfers."),
        "min_oversized_packets": Param(int, 2, "packets above the reported MTU the host sends after the grace time",
                                       COUNT,
                                       "One could be a late retransmission of data queued before the message; a "
                                       "black-holed transfer sends them for every segment."),
        # up to an hour: far beyond any round trip; a sender still in flight after it never adapted
        "grace_ms": Param(float, 200.0, "time after the first message during which large packets still count "
                                        "as already in flight", Range(0, 3_600_000),
                          "Longer suits capture points far from the host (large RTT) but hides hosts that adapt "
                          "slowly."),
        "high_icmp_count": Param(int, 10, "messages from which the finding is high", COUNT,
                                 "A router complaining this often means the transfer is stuck, even without "
                                 "shrinking retransmissions; lower values call a short episode high."),
    }
    ALERTS = {
        "suppress_s": Param(float, 600.0, "least seconds between two events about one host/peer pair",
                            ALERT_SECONDS,
                            "A black hole lasts as long as the misconfiguration; updates every ten minutes say it "
                            "persists without repeating the same news. Shorter suits a fix being tested."),
        "resolve_s": Param(float, 60.0, "seconds without a new ICMP message or oversized packet for the pair "
                                        "before it is resolved", ALERT_SECONDS,
                           "Stalled downloads retry slowly (exponential backoff), so a short hold would resolve "
                           "between retries."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.pairs: dict[int, _Pair] = {}
        self.unwatched_icmp = 0      # messages for pairs beyond MAX_PAIRS
        self.ignored_icmp = 0        # messages reporting an MTU no host may adopt
        # None until the first packet: whether this state begins the capture (frame 1), so nothing came before
        self.begins_capture: bool | None = None
        # a partition after the first: its host packets for the merge (rows in chunks, sizes, the rows per pair)
        self.pending_chunks: list[dict] = []
        self.pending_keys = np.zeros(0, dtype=np.uint64)       # pairs with rows kept, sorted
        self.pending_counts = np.zeros(0, dtype=np.int64)      # rows kept per pair
        self.pending_sizes = {name: np.zeros(0, dtype=t) for name, t in PENDING_SIZE_COLUMNS.items()}
        self.pending_size_frames: dict[int, np.ndarray] = {}
        self.dropped_pending = 0     # host packets of pairs beyond MAX_PAIRS in one part

    # ---- state ------------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        if len(batch) == 0:
            return
        layers = batch["layers"]
        if self.begins_capture is None:
            self.begins_capture = int(batch["frame"][0]) == 1
        need = np.uint32(L_MTU | L_QUOTE)
        icmp_rows = np.flatnonzero((layers & need) == need)
        if len(icmp_rows):
            self._add_messages(batch, icmp_rows)
        if self.pairs or not self.begins_capture:
            carrier, echo = _carriers(batch)
            if self.pairs:
                self._add_host_packets(batch, carrier, echo)
            if not self.begins_capture:
                self._keep_pending(batch, carrier, echo)

    def _add_messages(self, batch: PacketBatch, rows: np.ndarray) -> None:
        import pandas as pd
        layers, kind, code = batch["layers"][rows], batch["icmp_type"][rows], batch["icmp_code"][rows]
        v4 = ((layers & np.uint32(L_ICMP)) != 0) & (kind == ICMP_UNREACH) & (code == ICMP_UNREACH_NEEDFRAG)
        v6 = ((layers & np.uint32(L_ICMP6)) != 0) & (kind == ICMP6_PACKET_TOO_BIG)
        mtu = batch["icmp_mtu"][rows]
        plausible = np.where(v6, mtu >= MIN_MTU_IPV6, mtu >= MIN_MTU_IPV4)
        self.ignored_icmp += int(np.count_nonzero((v4 | v6) & ~plausible))
        rows = rows[(v4 | v6) & plausible]
        if len(rows) == 0:
            return
        cols = {name: batch[name][rows] for name in (
            "quote_src_ip_hi", "quote_src_ip_lo", "quote_dest_ip_hi", "quote_dest_ip_lo", "quote_proto",
            "quote_src_port", "quote_dest_port", "src_ip_hi", "src_ip_lo", "icmp_mtu", "ts_ns", "frame")}
        has_ports = (batch["layers"][rows] & np.uint32(L_QUOTE_PORTS)) != 0
        cols["quote_src_port"] = np.where(has_ports, cols["quote_src_port"], 0)
        cols["quote_dest_port"] = np.where(has_ports, cols["quote_dest_port"], 0)
        keys = _pair_key(cols["quote_src_ip_hi"], cols["quote_src_ip_lo"], cols["quote_dest_ip_hi"],
                         cols["quote_dest_ip_lo"])
        # pairs beyond MAX_PAIRS are counted and dropped before any per-pair work
        watched = np.array(sorted(self.pairs), dtype=np.uint64)
        fresh = np.unique(keys[~member(keys, watched)])[:max(MAX_PAIRS - len(self.pairs), 0)]
        keep = member(keys, watched) | member(keys, fresh)
        self.unwatched_icmp += int(np.count_nonzero(~keep))
        frame = pd.DataFrame({name: col[keep] for name, col in cols.items()})
        frame["key"] = keys[keep]
        # one vectorised aggregation per batch; the loops below run once per pair, router and quoted flow
        per_pair = frame.groupby("key", sort=False).agg(
            mtu=("icmp_mtu", "min"), first_ns=("ts_ns", "min"), last_ns=("ts_ns", "max"), count=("ts_ns", "size"),
            host_hi=("quote_src_ip_hi", "first"), host_lo=("quote_src_ip_lo", "first"),
            peer_hi=("quote_dest_ip_hi", "first"), peer_lo=("quote_dest_ip_lo", "first"))
        parts: dict[int, _Pair] = {}
        for key, row in zip(per_pair.index.tolist(), per_pair.itertuples(index=False)):
            host, peer = (int(row.host_hi), int(row.host_lo)), (int(row.peer_hi), int(row.peer_lo))
            span = {"mtu": int(row.mtu), "first_icmp_ns": int(row.first_ns), "last_icmp_ns": int(row.last_ns)}
            self.pairs.setdefault(key, _Pair(host=host, peer=peer, **span))
            parts[key] = _Pair(host=host, peer=peer, icmp_count=int(row.count), **span)
        for (key, hi, lo), count in frame.groupby(["key", "src_ip_hi", "src_ip_lo"]).size().items():
            routers = parts[key].routers
            if len(routers) < MAX_LISTED:
                routers[(int(hi), int(lo))] = int(count)
        quoted = frame.groupby(["key", "quote_proto", "quote_src_port", "quote_dest_port"]).size()
        for (key, proto, sport, dport), count in quoted.items():
            if len(parts[key].quoted) < MAX_LISTED:
                parts[key].quoted[(int(proto), int(sport), int(dport))] = int(count)
        order, starts, counts = group_by(frame["key"].to_numpy())
        frames = frame["frame"].to_numpy(np.int64)[order]
        for start, count in zip(starts.tolist(), counts.tolist()):
            key = int(frame["key"].iat[order[start]])
            parts[key].icmp_frames = keep_ends(parts[key].icmp_frames, frames[start:start + count])
        for key, part in parts.items():
            self.pairs[key].absorb(part)

    def _add_host_packets(self, batch: PacketBatch, carrier: np.ndarray, echo: np.ndarray) -> None:
        hosts = np.unique(np.array([p.host[1] for p in self.pairs.values()], dtype=np.uint64))
        rows = np.flatnonzero(carrier & member(batch["src_ip_lo"], hosts))
        if len(rows) == 0:
            return
        keys = _pair_key(batch["src_ip_hi"][rows], batch["src_ip_lo"][rows],
                         batch["dest_ip_hi"][rows], batch["dest_ip_lo"][rows])
        watched = np.array(sorted(self.pairs), dtype=np.uint64)
        hit = member(keys, watched)
        rows, keys = rows[hit], keys[hit]
        if len(rows) == 0:
            return
        grace_ns = int(self.params["grace_ms"] * 1e6)
        cols = _host_rows(batch, rows, echo)
        order, starts, counts = group_by(keys)
        for start, count in zip(starts.tolist(), counts.tolist()):
            self._check_host_rows(self.pairs[int(keys[order[start]])], order[start:start + count], cols, grace_ns)

    def _check_host_rows(self, pair: _Pair, group: np.ndarray, cols: dict, grace_ns: int) -> None:
        """Fold the host's packets `group` (rows of `cols`, in time order) into the pair named before them."""
        ts, ip_len = cols["ts"], cols["ip_len"]
        sel = group[ts[group] >= pair.first_icmp_ns]
        if len(sel) == 0:
            return
        pair.packets_after += len(sel)
        pair.largest_after = max(pair.largest_after, int(ip_len[sel].max()))
        self._add_flows(pair, sel, cols["proto"], cols["sport"], cols["dport"], cols["echo"], ts, ip_len,
                        cols["frame"], grace_ns)
        pair.add_rows({name: cols[name][sel] for name in ROW_COLUMNS})

    def _keep_pending(self, batch: PacketBatch, carrier: np.ndarray, echo: np.ndarray) -> None:
        """Every host packet of this part, for pairs an earlier part may have named: header rows of each pair's
        first MAX_ROWS_PER_PAIR packets (MAX_PENDING_ROWS in all), further ones counted by flow and size."""
        rows = np.flatnonzero(carrier)
        if len(rows) == 0:
            return
        keys = _pair_key(batch["src_ip_hi"][rows], batch["src_ip_lo"][rows],
                         batch["dest_ip_hi"][rows], batch["dest_ip_lo"][rows])
        if len(self.pending_keys) >= MAX_PAIRS:     # full: only the pairs kept go on
            inside = member(keys, self.pending_keys)
            self.dropped_pending += int(np.count_nonzero(~inside))
            rows, keys = rows[inside], keys[inside]
            if len(rows) == 0:
                return
        group, rank, firsts = rank_by_key(keys)
        pairs = keys[firsts]
        at, known = find_sorted(self.pending_keys, pairs)
        fresh = ~known
        admitted = known | (fresh & (np.cumsum(fresh) <= max(MAX_PAIRS - len(self.pending_keys), 0)))
        before = np.zeros(len(pairs), dtype=np.int64)
        before[known] = self.pending_counts[at[known]]
        inside = admitted[group]
        self.dropped_pending += int(np.count_nonzero(~inside))
        as_row = inside & (rank + before[group] < MAX_ROWS_PER_PAIR)
        as_row &= np.cumsum(as_row) <= MAX_PENDING_ROWS - int(self.pending_counts.sum())
        kept = np.bincount(group[as_row], minlength=len(pairs)).astype(np.int64)
        self.pending_counts[at[known]] += kept[known]
        new = fresh & admitted
        self.pending_keys = np.insert(self.pending_keys, at[new], pairs[new])
        self.pending_counts = np.insert(self.pending_counts, at[new], kept[new])
        mine = np.flatnonzero(as_row)
        if len(mine):
            self.pending_chunks.append({"key": keys[mine], **_host_rows(batch, rows[mine], echo)})
        bulk = np.flatnonzero(inside & ~as_row)
        if len(bulk):
            self._count_sizes(keys[bulk], _host_rows(batch, rows[bulk], echo))

    def _count_sizes(self, keys: np.ndarray, cols: dict) -> None:
        """Host packets beyond the rows kept, by pair, flow, IP length and echo: counts, times, frames."""
        hkey = mix64(keys, (cols["proto"].astype(np.uint64) << np.uint64(32)) | (cols["sport"].astype(np.uint64)
                     << np.uint64(16)) | cols["dport"].astype(np.uint64), cols["ip_len"], cols["echo"])
        order, starts, counts = group_by(hkey)
        first = order[starts]
        part = {"hkey": hkey[first], "key": keys[first], "count": counts.astype(np.int64),
                "first_ns": np.minimum.reduceat(cols["ts"][order], starts),
                "last_ns": np.maximum.reduceat(cols["ts"][order], starts),
                **{name: cols[name][first].astype(PENDING_SIZE_COLUMNS[name])
                   for name in ("proto", "sport", "dport", "ip_len", "echo")}}
        for g, (start, count) in enumerate(zip(starts.tolist(), counts.tolist())):
            h = int(part["hkey"][g])
            frames = cols["frame"][order[start:start + count]]
            self.pending_size_frames[h] = append_ends(self.pending_size_frames.get(h, frames[:0]), frames)
        self.pending_sizes = fold_rows(self.pending_sizes, part, "hkey", {"count": np.add, "last_ns": np.maximum})

    def _pending_rows(self) -> dict:
        """The kept header rows as one table, in capture order."""
        chunks = self.pending_chunks or [{name: np.zeros(0, dtype=t) for name, t in PENDING_ROW_COLUMNS.items()}]
        table = {name: np.concatenate([c[name] for c in chunks]) for name in PENDING_ROW_COLUMNS}
        self.pending_chunks = [table]
        return table

    def _replay(self, other: PmtudBlackhole, named: list[int]) -> None:
        """`other`'s host packets of the pairs `named` here (and before it), checked as one pass checked them."""
        grace_ns = int(self.params["grace_ms"] * 1e6)
        table = other._pending_rows()
        order, starts, counts = group_by(table["key"])
        known = member(table["key"][order[starts]], np.array(sorted(named), dtype=np.uint64))
        for g in np.flatnonzero(known).tolist():
            group = order[starts[g]:starts[g] + counts[g]]
            self._check_host_rows(self.pairs[int(table["key"][group[0]])], group, table, grace_ns)
        sizes = other.pending_sizes
        for i in np.lexsort((sizes["first_ns"], sizes["key"])).tolist():
            pair = self.pairs.get(int(sizes["key"][i]))
            if pair is None or int(sizes["key"][i]) not in named:
                continue
            count, ip_len = int(sizes["count"][i]), int(sizes["ip_len"][i])
            pair.packets_after += count
            pair.largest_after = max(pair.largest_after, ip_len)
            key = (int(sizes["proto"][i]), int(sizes["sport"][i]), int(sizes["dport"][i]))
            flow = pair.flow_entry(key, bool(sizes["echo"][i]), ip_len)
            flow.varies = flow.varies or ip_len != flow.size
            flow.packets += count
            if ip_len > pair.mtu:
                flow.oversized += count
                flow.last_oversized_ns = max(flow.last_oversized_ns, int(sizes["last_ns"][i]))
                flow.oversized_frames = keep_ends(flow.oversized_frames,
                                                  other.pending_size_frames[int(sizes["hkey"][i])])

    def _absorb_pending(self, other: PmtudBlackhole) -> None:
        """Keep `other`'s pending host packets after this state's (both parts after the first)."""
        mine, theirs = self._pending_rows(), other._pending_rows()
        both = {name: np.concatenate([mine[name], theirs[name]]) for name in PENDING_ROW_COLUMNS}
        order, starts, counts = group_by(both["key"])
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order)) - np.repeat(starts, counts)
        as_row = (rank < MAX_ROWS_PER_PAIR) & (np.cumsum(rank < MAX_ROWS_PER_PAIR) <= MAX_PENDING_ROWS)
        self.pending_chunks = [{name: col[as_row] for name, col in both.items()}]
        pairs = both["key"][order[starts]]
        kept = np.add.reduceat(as_row[order], starts) if len(starts) else np.zeros(0, dtype=np.int64)
        self.pending_keys, self.pending_counts = pairs, kept.astype(np.int64)
        for h, frames in other.pending_size_frames.items():
            self.pending_size_frames[h] = keep_ends(self.pending_size_frames.get(h, frames[:0]), frames)
        self.pending_sizes = fold_rows(self.pending_sizes, other.pending_sizes, "hkey",
                                       {"count": np.add, "last_ns": np.maximum})
        if not as_row.all():
            spill = np.flatnonzero(~as_row)
            self._count_sizes(both["key"][spill], {name: both[name][spill] for name in PENDING_ROW_COLUMNS
                                                   if name != "key"})
        self.dropped_pending += other.dropped_pending

    @staticmethod
    def _add_flows(pair: _Pair, sel, proto, sport, dport, echo, ts, ip_len, frames, grace_ns) -> None:
        """Fold the pair's packets `sel` into its flows: sizes, and packets above the MTU after the grace."""
        flow_id = (proto[sel].astype(np.int64) << 32) | (sport[sel].astype(np.int64) << 16) | dport[sel]
        order, starts, counts = group_by(flow_id)
        for start, count in zip(starts.tolist(), counts.tolist()):
            mine = sel[order[start:start + count]]
            first = mine[0]
            key = (int(proto[first]), int(sport[first]), int(dport[first]))
            flow = pair.flow_entry(key, bool(echo[first]), int(ip_len[first]))
            sizes = ip_len[mine]
            flow.varies = flow.varies or bool((sizes != flow.size).any())
            flow.packets += len(mine)
            over = mine[(sizes > pair.mtu) & (ts[mine] > pair.first_icmp_ns + grace_ns)]
            if len(over):
                flow.oversized += len(over)
                flow.last_oversized_ns = max(flow.last_oversized_ns, int(ts[over].max()))
                flow.oversized_frames = keep_ends(flow.oversized_frames, frames[over])

    def merge(self, other: PmtudBlackhole) -> PmtudBlackhole:
        """Absorb `other`, the state of the packets that follow this one's. A pair named here takes `other`'s
        messages, then its host packets as one pass checked them (its pending ones, when `other` does not begin
        the capture); a pair named only in `other` keeps what `other` checked."""
        check_merge(self, other)
        if other.begins_capture is None:
            return self
        if self.begins_capture is None:
            self.__dict__.update(other.__dict__)
            return self
        named = set(self.pairs)
        for key, theirs in other.pairs.items():
            mine = self.pairs.get(key)
            if mine is None:
                if len(self.pairs) >= MAX_PAIRS:
                    self.unwatched_icmp += theirs.icmp_count
                    continue
                self.pairs[key] = theirs
            elif other.begins_capture:
                mine.absorb(theirs)
            else:
                mine.absorb_messages(theirs)
        if not other.begins_capture:
            self._replay(other, named)
            if not self.begins_capture:
                self._absorb_pending(other)
            else:
                self._drop_pending()
        self.unwatched_icmp += other.unwatched_icmp
        self.ignored_icmp += other.ignored_icmp
        return self

    def _drop_pending(self) -> None:
        self.pending_chunks, self.pending_size_frames = [], {}
        self.pending_keys, self.pending_counts = self.pending_keys[:0], self.pending_counts[:0]
        self.pending_sizes = {name: col[:0] for name, col in self.pending_sizes.items()}

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        p = self.params
        out = []
        for pair in sorted(self.pairs.values(), key=lambda q: (q.first_icmp_ns, q.host, q.peer)):
            if pair.icmp_count < p["min_icmp_count"]:
                continue
            if pair.packets_after == 0:
                out.append(self._unseen_host_finding(pair, ctx))
            elif pair.oversized_after >= p["min_oversized_packets"]:
                out.append(self._blackhole_finding(pair, ctx))
            elif len(pair.judged()) < len(pair.flows):
                out.append(self._probe_finding(pair))
        return out

    def _flow_rows(self, pair: _Pair, ctx: AnalysisContext) -> pd.DataFrame:
        """The flow-table rows between host and peer (either direction)."""
        import pandas as pd
        flows = ctx.flows
        if flows is None or len(flows) == 0 or "src_ip" not in flows:
            return pd.DataFrame()
        host, peer = ip_text(*pair.host), ip_text(*pair.peer)
        mask = (((flows["src_ip"] == host) & (flows["dest_ip"] == peer)) |
                ((flows["src_ip"] == peer) & (flows["dest_ip"] == host)))
        return flows[mask]

    def _router_text(self, pair: _Pair) -> tuple[list[str], str]:
        routers = [ip_text(*r) for r, _ in sorted(pair.routers.items(), key=lambda kv: -kv[1])]
        return routers, ", ".join(routers[:3]) + (" ..." if len(routers) > 3 else "")

    def _unseen_host_finding(self, pair: _Pair, ctx: AnalysisContext) -> Finding:
        host, peer = ip_text(*pair.host), ip_text(*pair.peer)
        routers, router_text = self._router_text(pair)
        window = (pair.last_icmp_ns - pair.first_icmp_ns) / NS
        msg = (f"{pair.icmp_count} ICMP too-big messages (MTU {pair.mtu}) from {router_text} in {window:.1f} s "
               f"told {host} to shrink its packets to {peer}; the host's own packets are not in the capture, "
               f"so whether it adapted cannot be judged")
        frames = evidence_frames(pair.icmp_frames)
        return self.finding("low", msg, identifier=pair.identifier, first_seen=pair.first_icmp_ns,
                            last_seen=pair.last_icmp_ns,
                            n=pair.icmp_count, src_ip=host, dest_ip=peer,
                            evidence={"host": host, "peer": peer, "reported_mtu": pair.mtu,
                                      "icmp_count": pair.icmp_count, "routers": routers,
                                      "host_packets_after_icmp": 0, "evidence_frames": frames})

    def _probe_finding(self, pair: _Pair) -> Finding:
        """Info: the messages answered a diagnostic's fixed-size Don't-Fragment probes, which never adapt."""
        host, peer = ip_text(*pair.host), ip_text(*pair.peer)
        routers, router_text = self._router_text(pair)
        probes = []
        for (proto, sport, dport), flow in sorted(pair.flows.items()):
            if pair.adapts((proto, sport, dport)):
                continue
            what = ("ICMP echo requests" if flow.echo else
                    f"{PROTO_NAMES.get(proto, str(proto)).upper()}" + (f" to port {dport}" if dport else ""))
            sizes = "of varying sizes" if flow.varies else f"of {flow.size} bytes"
            probes.append({"proto": PROTO_NAMES.get(proto, str(proto)), "src_port": sport, "dest_port": dport,
                           "packets": flow.packets, "ip_len_bytes": None if flow.varies else flow.size,
                           "echo": flow.echo, "text": f"{flow.packets} {what} {sizes}"})
        where = " (the loopback range MPLS LSP ping addresses)" if pair.to_loopback else ""
        msg = (f"{host} kept sending Don't-Fragment probes to {peer}{where} after {pair.icmp_count} ICMP too-big "
               f"messages (MTU {pair.mtu}) from {router_text}: "
               f"{'; '.join(p.pop('text') for p in probes[:MAX_LISTED])}. A diagnostic measuring the path MTU "
               f"(ping -M do, MPLS LSP ping, fixed-size probes) never adapts, by design: not a black hole")
        return self.finding("info", msg, identifier=pair.identifier, first_seen=pair.first_icmp_ns,
                            last_seen=pair.last_icmp_ns,
                            n=pair.icmp_count, src_ip=host, dest_ip=peer,
                            evidence={"host": host, "peer": peer, "reported_mtu": pair.mtu,
                                      "icmp_count": pair.icmp_count, "routers": routers,
                                      "probe_flows": [{k: v for k, v in p.items() if v is not None}
                                                      for p in probes[:MAX_LISTED]],
                                      "to_loopback": pair.to_loopback,
                                      "evidence_frames": evidence_frames(pair.icmp_frames)})

    def _blackhole_finding(self, pair: _Pair, ctx: AnalysisContext) -> Finding:
        import pandas as pd
        p = self.params
        host, peer = ip_text(*pair.host), ip_text(*pair.peer)
        routers, router_text = self._router_text(pair)
        rows = pd.DataFrame(pair.rows)
        judged = [pair.adapts(key) for key in zip(rows.proto.tolist(), rows.sport.tolist(), rows.dport.tolist())]
        rows = rows[np.array(judged, dtype=bool)]
        over = rows[rows.ip_len > pair.mtu]
        sizes = over.ip_len.drop_duplicates().head(MAX_LISTED).astype(int).tolist()
        ladders = _shrinking_retransmissions(rows[(rows.proto == PROTO_TCP) & (rows.payload > 0)])
        flows = self._affected_flows(pair, rows, ctx)
        severity = self.rule.severity
        if pair.icmp_count >= p["high_icmp_count"] or ladders["count"]:
            severity = "high"
        last = max(pair.last_icmp_ns, pair.last_oversized_ns)
        span = (last - pair.first_icmp_ns) / NS
        goodputs = [f["goodput_bps"] for f in flows if f.get("goodput_bps") is not None]
        goodput_text = f", goodput {_rate_text(min(goodputs))}" if goodputs else ""
        ladder_text = (f"; {ladders['count']} segments retransmitted in shrinking sizes "
                       f"(e.g. {' -> '.join(str(s) for s in ladders['example'])} bytes)" if ladders["count"] else "")
        msg = (f"{host} kept sending {pair.oversized_after} packets larger than the path MTU {pair.mtu} to {peer} "
               f"(up to {pair.largest_after} bytes) over {span:.1f} s after {pair.icmp_count} ICMP too-big "
               f"messages from {router_text}{ladder_text}{goodput_text}")
        main = flows[0] if flows else {}
        frames = evidence_frames(np.union1d(pair.icmp_frames, pair.oversized_frames))
        evidence = {
            "host": host, "peer": peer, "reported_mtu": pair.mtu, "icmp_count": pair.icmp_count,
            "routers": routers, "first_icmp": iso_time(pair.first_icmp_ns),
            "host_packets_after_icmp": pair.packets_after,
            "oversized_after_icmp": pair.oversized_after, "largest_after_icmp_bytes": pair.largest_after,
            "sizes_after_icmp_bytes": sizes, "shrinking_retransmissions": ladders["count"],
            "shrinking_example_bytes": ladders["example"], "affected_flows": flows,
            "evidence_frames": frames,
        }
        return self.finding(severity, msg, identifier=pair.identifier, first_seen=pair.first_icmp_ns, last_seen=last,
                            n=pair.oversized_after, src_ip=host, dest_ip=peer,
                            src_port=main.get("src_port"), dest_port=main.get("dest_port"),
                            proto=main.get("proto"), community_id=main.get("community_id"), evidence=evidence)

    def _affected_flows(self, pair: _Pair, rows: pd.DataFrame, ctx: AnalysisContext) -> list[dict]:
        """Each flow of the host to the peer that the messages quoted or that sent oversized packets."""
        # the quoted flows of senders that can adapt, and those whose own packets the capture lacks
        quoted = {key for key in pair.quoted if pair.flow_of(key) is None or pair.adapts(key)}
        oversized = rows[rows.ip_len > pair.mtu]
        quoted |= {tuple(int(v) for v in k) for k in oversized[["proto", "sport", "dport"]].drop_duplicates()
                   .itertuples(index=False)}
        table = self._flow_rows(pair, ctx)
        host, peer = ip_text(*pair.host), ip_text(*pair.peer)
        out = []
        for proto, sport, dport in sorted(quoted)[:MAX_LISTED]:
            flow = {"proto": PROTO_NAMES.get(proto, str(proto)), "src_port": sport, "dest_port": dport,
                    "icmp_count": pair.quoted.get((proto, sport, dport), 0)}
            mine = rows[(rows.proto == proto) & (rows.sport == sport) & (rows.dport == dport)]
            flow["oversized_after_icmp"] = int((mine.ip_len > pair.mtu).sum())
            goodput = _goodput_bps(mine) if proto == PROTO_TCP else None
            if goodput is not None:
                flow["goodput_bps"] = goodput
            match = match_flow(table, host, sport, peer, dport, proto)
            if match is not None:
                flow["community_id"] = match.get("community_id")
            out.append({k: v for k, v in flow.items() if v is not None})
        out.sort(key=lambda f: -f["oversized_after_icmp"])
        return out

    # ---- report -------------------------------------------------------------
    def figures(self, findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
        """A segment-size figure per finding that names one flow (its ports)."""
        out = []
        for f in findings:
            src, dst = ip_halves(f.src_ip), ip_halves(f.dest_ip)
            if f.src_port is not None and f.dest_port is not None and src and dst:
                out.append(SegmentsFigure(f, (*src, *dst, f.src_port, f.dest_port), bins))
        return out


class SegmentsFigure(ReportFigure):
    """The flow's TCP payload sizes over time against each side's MSS and the MTU the routers reported: a
    sender that adapted drops below the MTU line, a black-holed one keeps sending full-size segments."""

    title = "Segment sizes of the PMTUD flow vs MSS and MTU"
    size = (8.0, 3.4)

    def __init__(self, finding: Finding, key: tuple, bins: TimeBins):
        self.finding = finding
        self.key = key              # src hi, src lo, dst hi, dst lo, src port, dst port
        self.bins = bins
        self.kept = 0
        self.parts = [(np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool))]

    def add(self, batch: PacketBatch) -> None:
        rows, forward = _flow_rows(batch, self.key)
        room = SEGMENT_POINTS_MAX - self.kept
        rows, forward = rows[:room], forward[:room]
        self.kept += len(rows)
        self.parts.append(((batch["ts_ns"][rows] - self.bins.start_ns) / 1e9,
                           batch["payload_len"][rows].astype(np.int64), forward))

    def merge(self, other: SegmentsFigure) -> SegmentsFigure:
        """The points `other` kept, up to what room is left: its first SEGMENT_POINTS_MAX points are the flow's
        first in its partition, so the bound falls where one pass puts it."""
        room = SEGMENT_POINTS_MAX - self.kept
        t, size, forward = (column[:room] for column in other.points())
        self.kept += len(t)
        self.parts.append((t, size, forward))
        return self

    def points(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(seconds after the axis start, TCP payload bytes, True when sent by the finding's src_ip) per packet."""
        return tuple(np.concatenate(column) for column in zip(*self.parts))

    def draw(self, ax, flows) -> None:
        f = self.finding
        t, size, forward = self.points()
        mss = {}
        row = _flow_of(flows, f.community_id) if f.community_id else None
        if row is not None:
            forward_is_src = row["src_ip"] == f.src_ip
            mss = {f"{f.src_ip} MSS": int(row["src_mss"] if forward_is_src else row["dest_mss"]),
                   f"{f.dest_ip} MSS": int(row["dest_mss"] if forward_is_src else row["src_mss"])}
        mtu = f.evidence.get("reported_mtu")
        ax.plot(t[forward], size[forward], ".", ms=4, color="#245", label=f"from {f.src_ip}")
        ax.plot(t[~forward], size[~forward], ".", ms=4, color="#999", label=f"from {f.dest_ip}")
        for (label, value), style in zip(mss.items(), ("--", "-.")):
            if value:
                ax.axhline(value, ls=style, lw=1, color="#2a2", label=f"{label} {value}")
        if isinstance(mtu, int):
            payload = mtu - TCP_OVERHEAD[6 if ":" in (f.src_ip or "") else 4]
            ax.axhline(payload, ls=":", lw=1.5, color="#d33", label=f"reported MTU {mtu}: {payload} B payload")
        self.bins.time_axis(ax)
        ax.set_ylabel("TCP payload bytes")
        ax.legend(fontsize=7, loc="lower right")


def _flow_rows(batch: PacketBatch, key: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Rows of one TCP flow in the batch (either direction) and whether each goes src -> dst."""
    shi, slo, dhi, dlo, sport, dport = key
    c = batch.cols
    tcp = (c["layers"] & np.uint32(L_TCP | L_PAYLOAD)) == np.uint32(L_TCP | L_PAYLOAD)

    def side(a_hi, a_lo, b_hi, b_lo, a_port, b_port):
        return ((c["src_ip_hi"] == np.uint64(a_hi)) & (c["src_ip_lo"] == np.uint64(a_lo))
                & (c["dest_ip_hi"] == np.uint64(b_hi)) & (c["dest_ip_lo"] == np.uint64(b_lo))
                & (c["src_port"] == a_port) & (c["dest_port"] == b_port))
    forward = tcp & side(shi, slo, dhi, dlo, sport, dport)
    backward = tcp & side(dhi, dlo, shi, slo, dport, sport)
    rows = np.flatnonzero(forward | backward)
    return rows, forward[rows]


def _goodput_bps(rows: pd.DataFrame) -> float | None:
    """Bits per second of new sequence space the host's TCP segments covered (retransmissions add nothing)."""
    data = rows[rows.payload > 0]
    if len(data) < 2:
        return None
    span_s = (int(data.ts.max()) - int(data.ts.min())) / NS
    if span_s <= 0:
        return None
    seq = data.seq.to_numpy(np.int64)
    # sequence numbers wrap at 2**32: measure against the first one
    start = (seq - seq[0]) % (1 << 32)
    end = start + data.payload.to_numpy(np.int64)
    covered = int(end.max() - start.min())
    return round(8 * covered / span_s, 1)


def _shrinking_retransmissions(rows: pd.DataFrame) -> dict:
    """Segments (flow and sequence number) sent several times, each copy smaller than the one before."""
    if len(rows) < 2:
        return {"count": 0, "example": []}
    order = np.lexsort((rows.ts.to_numpy(), rows.seq.to_numpy(), rows.dport.to_numpy(), rows.sport.to_numpy()))
    sport, dport = rows.sport.to_numpy()[order], rows.dport.to_numpy()[order]
    seq, size = rows.seq.to_numpy()[order], rows.ip_len.to_numpy(np.int64)[order]
    same = (sport[1:] == sport[:-1]) & (dport[1:] == dport[:-1]) & (seq[1:] == seq[:-1])
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    lengths = np.diff(np.append(starts, len(seq)))
    # a copy that is not smaller than the one before spoils its segment's ladder
    spoiled = np.concatenate(([0], (same & (size[1:] >= size[:-1])).astype(np.int64)))
    ladders = np.flatnonzero((lengths >= 2) & (np.add.reduceat(spoiled, starts) == 0))
    if len(ladders) == 0:
        return {"count": 0, "example": []}
    longest = ladders[np.argmax(lengths[ladders])]
    example = size[starts[longest]:starts[longest] + lengths[longest]][:MAX_LISTED]
    return {"count": len(ladders), "example": example.astype(int).tolist()}


def _rate_text(bps: float) -> str:
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.1f} {unit}"
    return f"{bps:.0f} bit/s"


def _flow_of(flows, community_id: str) -> dict | None:
    """The first flow of `community_id` (its source address as text, both MSS values): from the flow table's
    numbers (AnalysisContext.flow_columns) or its DataFrame view; None when there is none."""
    if isinstance(flows, dict):
        column = flows["community_id"]
        code = np.flatnonzero(column.value_texts() == community_id)
        rows = np.flatnonzero(np.isin(column.codes, code)) if len(code) else code
        if len(rows) == 0:
            return None
        i = int(rows[0])
        return {"src_ip": ip_text(flows["src_ip_hi"][i], flows["src_ip_lo"][i]), "src_mss": int(flows["src_mss"][i]),
                "dest_mss": int(flows["dest_mss"][i])}
    if not len(flows):
        return None
    match = flows[flows["community_id"] == community_id]
    return match.iloc[0].to_dict() if len(match) else None

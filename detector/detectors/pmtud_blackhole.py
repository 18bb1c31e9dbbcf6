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

State: per (host, peer) pair that an ICMP message named, the smallest MTU
reported, the messages' count and times, the routers, counters of the
host's packets to that peer after the first message, and a bounded buffer
of those packets' header fields for the size ladder, the retransmissions
and the goodput. Packets sent before a pair is first named are not kept:
they are the ones that triggered the message. Two partial states merge by
pair; a partition that never saw a message for a pair does not check that
pair's packets (a stream split by time loses only what precedes the first
message of each part).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..findings import Finding, iso_time
from ..schema import (IP, L_ICMP, L_ICMP6, L_MTU, L_PAYLOAD, L_PORTS, L_QUOTE, L_QUOTE_PORTS, L_TCP,
                      PROTO_NAMES, PROTO_TCP, PacketBatch)
from .base import (AnalysisContext, Detector, check_merge, evidence_frames, group_by, ip_text, keep_ends,
                   member, mix64, register)

if TYPE_CHECKING:   # pandas loads only where a frame is built: it takes a third of a second to import
    import pandas as pd

NS = 1_000_000_000
ICMP_UNREACH = 3            # destination unreachable, RFC 792
ICMP_UNREACH_NEEDFRAG = 4   # fragmentation needed and DF set, RFC 792 / RFC 1191
ICMP6_PACKET_TOO_BIG = 2    # RFC 4443 section 3.2
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

ROW_COLUMNS = {"ts": np.int64, "frame": np.int64, "proto": np.uint8, "sport": np.uint16,
               "dport": np.uint16, "seq": np.uint32, "payload": np.uint32, "ip_len": np.uint32}


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
    oversized_after: int = 0            # ... larger than the MTU, after the grace time
    last_oversized_ns: int = 0
    largest_after: int = 0
    oversized_frames: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    rows: dict = field(default_factory=lambda: {k: np.zeros(0, dtype=t) for k, t in ROW_COLUMNS.items()})

    def absorb(self, other: "_Pair") -> None:
        self.mtu = min(self.mtu, other.mtu)
        self.first_icmp_ns = min(self.first_icmp_ns, other.first_icmp_ns)
        self.last_icmp_ns = max(self.last_icmp_ns, other.last_icmp_ns)
        self.icmp_count += other.icmp_count
        for mine, theirs in ((self.routers, other.routers), (self.quoted, other.quoted)):
            for key, count in theirs.items():
                if key in mine or len(mine) < MAX_LISTED:
                    mine[key] = mine.get(key, 0) + count
        self.icmp_frames = keep_ends(self.icmp_frames, other.icmp_frames)
        self.packets_after += other.packets_after
        self.oversized_after += other.oversized_after
        self.last_oversized_ns = max(self.last_oversized_ns, other.last_oversized_ns)
        self.largest_after = max(self.largest_after, other.largest_after)
        self.oversized_frames = keep_ends(self.oversized_frames, other.oversized_frames)
        self.add_rows(other.rows)

    def add_rows(self, rows: dict) -> None:
        room = MAX_ROWS_PER_PAIR - len(self.rows["ts"])
        if room > 0 and len(rows["ts"]):
            self.rows = {k: np.concatenate([self.rows[k], rows[k][:room]]) for k in ROW_COLUMNS}


def _pair_key(src_hi, src_lo, dst_hi, dst_lo) -> np.ndarray:
    return mix64(src_hi, src_lo, dst_hi, dst_lo)


@register
class PmtudBlackhole(Detector):
    rule_id = "pmtud-blackhole"
    PARAMS = {
        "min_icmp_count": (int, 2, "ICMP too-big messages for one host/peer pair before it is judged"),
        "min_oversized_packets": (int, 2,
                                  "packets above the reported MTU the host sends after the grace time"),
        "grace_ms": (float, 200.0, "time after the first message during which large packets still count "
                                   "as already in flight"),
        "high_icmp_count": (int, 10, "messages from which the finding is high"),
    }

    def __init__(self, rule):
        super().__init__(rule)
        self.pairs: dict[int, _Pair] = {}
        self.unwatched_icmp = 0      # messages for pairs beyond MAX_PAIRS
        self.ignored_icmp = 0        # messages reporting an MTU no host may adopt

    # ---- state ------------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        if len(batch) == 0:
            return
        layers = batch["layers"]
        need = np.uint32(L_MTU | L_QUOTE)
        icmp_rows = np.flatnonzero((layers & need) == need)
        if len(icmp_rows):
            self._add_messages(batch, icmp_rows)
        if self.pairs:
            self._add_host_packets(batch)

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
            "quote_src_ip_hi", "quote_src_ip_lo", "quote_dst_ip_hi", "quote_dst_ip_lo", "quote_proto",
            "quote_src_port", "quote_dst_port", "src_ip_hi", "src_ip_lo", "icmp_mtu", "ts_ns", "frame")}
        has_ports = (batch["layers"][rows] & np.uint32(L_QUOTE_PORTS)) != 0
        cols["quote_src_port"] = np.where(has_ports, cols["quote_src_port"], 0)
        cols["quote_dst_port"] = np.where(has_ports, cols["quote_dst_port"], 0)
        keys = _pair_key(cols["quote_src_ip_hi"], cols["quote_src_ip_lo"], cols["quote_dst_ip_hi"],
                         cols["quote_dst_ip_lo"])
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
            peer_hi=("quote_dst_ip_hi", "first"), peer_lo=("quote_dst_ip_lo", "first"))
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
        quoted = frame.groupby(["key", "quote_proto", "quote_src_port", "quote_dst_port"]).size()
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

    def _add_host_packets(self, batch: PacketBatch) -> None:
        layers = batch["layers"]
        carrier = ((layers & np.uint32(IP)) != 0) & ((layers & np.uint32(L_ICMP | L_ICMP6)) == 0)
        hosts = np.unique(np.array([p.host[1] for p in self.pairs.values()], dtype=np.uint64))
        rows = np.flatnonzero(carrier & member(batch["src_ip_lo"], hosts))
        if len(rows) == 0:
            return
        keys = _pair_key(batch["src_ip_hi"][rows], batch["src_ip_lo"][rows],
                         batch["dst_ip_hi"][rows], batch["dst_ip_lo"][rows])
        watched = np.array(sorted(self.pairs), dtype=np.uint64)
        hit = member(keys, watched)
        rows, keys = rows[hit], keys[hit]
        if len(rows) == 0:
            return
        grace_ns = int(self.params["grace_ms"] * 1e6)
        ts, ip_len, frames = batch["ts_ns"][rows], batch["ip_len"][rows], batch["frame"][rows]
        ports = (batch["layers"][rows] & np.uint32(L_PORTS)) != 0
        tcp = (batch["layers"][rows] & np.uint32(L_TCP)) != 0
        payload = np.where((batch["layers"][rows] & np.uint32(L_PAYLOAD)) != 0, batch["payload_len"][rows], 0)
        order, starts, counts = group_by(keys)
        for start, count in zip(starts.tolist(), counts.tolist()):
            group = order[start:start + count]
            pair = self.pairs[int(keys[group[0]])]
            sel = group[ts[group] >= pair.first_icmp_ns]
            if len(sel) == 0:
                continue
            pair.packets_after += len(sel)
            pair.largest_after = max(pair.largest_after, int(ip_len[sel].max()))
            over = sel[(ip_len[sel] > pair.mtu) & (ts[sel] > pair.first_icmp_ns + grace_ns)]
            if len(over):
                pair.oversized_after += len(over)
                pair.last_oversized_ns = max(pair.last_oversized_ns, int(ts[over].max()))
                pair.oversized_frames = keep_ends(pair.oversized_frames, frames[over])
            r = rows[sel]
            pair.add_rows({
                "ts": ts[sel], "frame": frames[sel], "proto": batch["proto"][r],
                "sport": np.where(ports[sel], batch["src_port"][r], 0).astype(np.uint16),
                "dport": np.where(ports[sel], batch["dst_port"][r], 0).astype(np.uint16),
                "seq": np.where(tcp[sel], batch["tcp_seq"][r], 0).astype(np.uint32),
                "payload": payload[sel].astype(np.uint32), "ip_len": ip_len[sel].astype(np.uint32)})

    def merge(self, other: "PmtudBlackhole") -> "PmtudBlackhole":
        check_merge(self, other)
        for key, theirs in other.pairs.items():
            mine = self.pairs.get(key)
            if mine is None:
                if len(self.pairs) >= MAX_PAIRS:
                    self.unwatched_icmp += theirs.icmp_count
                    continue
                self.pairs[key] = theirs
            else:
                mine.absorb(theirs)
        self.unwatched_icmp += other.unwatched_icmp
        self.ignored_icmp += other.ignored_icmp
        return self

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
        return self.finding("low", msg, first_seen=pair.first_icmp_ns, last_seen=pair.last_icmp_ns,
                            n=pair.icmp_count, src_ip=host, dest_ip=peer,
                            evidence={"host": host, "peer": peer, "reported_mtu": pair.mtu,
                                      "icmp_count": pair.icmp_count, "routers": routers,
                                      "host_packets_after_icmp": 0, "evidence_frames": frames})

    def _blackhole_finding(self, pair: _Pair, ctx: AnalysisContext) -> Finding:
        import pandas as pd
        p = self.params
        host, peer = ip_text(*pair.host), ip_text(*pair.peer)
        routers, router_text = self._router_text(pair)
        rows = pd.DataFrame(pair.rows)
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
        return self.finding(severity, msg, first_seen=pair.first_icmp_ns, last_seen=last,
                            n=pair.oversized_after, src_ip=host, dest_ip=peer,
                            src_port=main.get("src_port"), dest_port=main.get("dest_port"),
                            proto=main.get("proto"), community_id=main.get("community_id"), evidence=evidence)

    def _affected_flows(self, pair: _Pair, rows: pd.DataFrame, ctx: AnalysisContext) -> list[dict]:
        """Each flow of the host to the peer that the messages quoted or that sent oversized packets."""
        quoted = set(pair.quoted)
        oversized = rows[rows.ip_len > pair.mtu]
        quoted |= {tuple(int(v) for v in k) for k in oversized[["proto", "sport", "dport"]].drop_duplicates()
                   .itertuples(index=False)}
        table = self._flow_rows(pair, ctx)
        host, peer = ip_text(*pair.host), ip_text(*pair.peer)
        out = []
        for proto, sport, dport in sorted(quoted)[:MAX_LISTED]:
            flow = {"proto": PROTO_NAMES.get(proto, str(proto)).upper(), "src_port": sport, "dest_port": dport,
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


def match_flow(table: pd.DataFrame, src: str, sport: int, dst: str, dport: int, proto: int) -> dict | None:
    """The flow-table row of src:sport -> dst:dport over `proto` (in either orientation), as a dict."""
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
    return {"count": int(len(ladders)), "example": example.astype(int).tolist()}


def _rate_text(bps: float) -> str:
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.1f} {unit}"
    return f"{bps:.0f} bit/s"

"""rss-saturation: one NIC receive queue (one CPU core) taking most packets of a busy link.

A NIC with receive-side scaling hashes each packet's addresses (and ports)
to pick a queue, and each queue is served by one core. Traffic made of many
flows spreads evenly; a looping frame or one elephant flow shares a single
hash, so one core runs at 100 % softirq while the others idle and the box
fails at a total load that looks moderate. The echo loop of the incidents
did exactly that to a NAT box.

The detector replays the NIC's choice with `detector.rss.RssModel` (Toeplitz
key, queue count, hashed fields from the rule) and counts packets per queue
per time bin. A bin fires when one queue's share is far above the fair
1/N and that queue's packet rate matters; consecutive firing bins of one
queue form one finding, which names the flows hashed to that queue (from the
flow table) and cross-links an echo-loop finding that fills it.

State: per time bin the packet count of every queue (sparse over bins), and
a few frame numbers of the dominant queue of busy bins for the evidence pcap.
"""
from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

import numpy as np

from ..errors import RuleError
from ..findings import Finding, iso_time
from ..rss import MICROSOFT_KEY, SYMMETRIC_KEY, RssModel
from ..schema import PROTO_NAMES, PROTO_TCP, PROTO_UDP, PacketBatch
from .base import AnalysisContext, Detector, check_merge, endpoint, evidence_frames, group_by, keep_ends, register

if TYPE_CHECKING:   # pandas loads only where a frame is built: it takes a third of a second to import
    import pandas as pd

NS = 1_000_000_000
NAMED_KEYS = {"microsoft": MICROSOFT_KEY, "symmetric": SYMMETRIC_KEY}
# Bins spanned by one batch beyond which the per-bin histogram is built with
# a sort instead of a dense bincount (a batch with wild timestamps).
DENSE_BINS_MAX = 1 << 16
# Per-batch partial histograms kept before they are folded into one.
PARTS_MAX = 32
# Frames are kept from a queue that dominates a bin within one batch at this
# share of the firing rate: a bin split over two batches still gets evidence,
# and quiet bins cost nothing.
EVIDENCE_RATE_RATIO = 0.25
# Frames kept per busy bin as evidence, and flows named per finding.
FRAMES_PER_BIN = 16
FLOWS_NAMED = 5
# A flow is named in the message (not only in the evidence) when it fills at
# least this share of the queue's packets: the rest are bystanders.
MSG_FLOW_SHARE_RATIO = 0.1


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


def _fold(bins: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One row per distinct bin, counts summed."""
    keys, inverse = np.unique(bins, return_inverse=True)
    out = np.zeros((len(keys), counts.shape[1]), dtype=np.int64)
    np.add.at(out, inverse, counts)
    return keys, out


@register
class RssSaturation(Detector):
    rule_id = "rss-saturation"
    AFTER = ("echo-loop",)
    PARAMS = {
        "key": (str, "microsoft", "Toeplitz key: 'microsoft' (the verification-suite key most drivers use), "
                                  "'symmetric' (0x6d5a repeated) or the NIC's key in hex (ethtool -x)"),
        "queues": (int, 8, "receive queues the NIC spreads packets over"),
        "indirection_table_size": (int, 128, "entries of the NIC's indirection table (filled round robin)"),
        "hash_tcp_ports": (bool, True, "TCP packets hash ports as well as addresses"),
        "hash_udp_ports": (bool, False, "UDP packets hash ports (ixgbe and many drivers hash UDP addresses only)"),
        "bin_ms": (float, 100.0, "time bin over which queue shares are measured"),
        "min_share_ratio": (float, 0.5, "share of a bin's packets one queue must reach"),
        "min_queue_rate_pps": (float, 50000.0, "packet rate of that queue in the bin for it to matter"),
        "high_queue_rate_pps": (float, 500000.0, "queue packet rate from which the finding is high"),
    }

    def __init__(self, rule):
        super().__init__(rule)
        p = self.params
        if p["queues"] < 1 or p["indirection_table_size"] < 1 or p["bin_ms"] <= 0:
            raise RuleError(rule.path, "params", "queues, indirection_table_size and bin_ms must be positive")
        table = p["indirection_table_size"]
        if table & (table - 1):
            raise RuleError(rule.path, "params.indirection_table_size", f"{table} is not a power of two")
        self.model = RssModel(key=_key_bytes(rule, p["key"]), queues=p["queues"], tcp_ports=p["hash_tcp_ports"],
                              udp_ports=p["hash_udp_ports"], table_size=table)
        self.bin_ns = max(1, int(p["bin_ms"] * 1e6))
        self.parts: list[tuple[np.ndarray, np.ndarray]] = []     # (bins, counts[bins, queues])
        self.frames: dict[tuple[int, int], np.ndarray] = {}       # (bin, queue) -> evidence frames

    # ---- state ------------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        if len(batch) == 0:
            return
        queues = self.params["queues"]
        queue = self.model.queue(batch).astype(np.int64)
        bins = batch["ts_ns"] // self.bin_ns
        first = int(bins.min())
        if int(bins.max()) - first < DENSE_BINS_MAX:
            local = bins - first
            hist = np.bincount(local * queues + queue, minlength=(int(local.max()) + 1) * queues)
            hist = hist.reshape(-1, queues)
            present = np.flatnonzero(hist.sum(axis=1))
            part_bins, counts = present.astype(np.int64) + first, hist[present]
        else:
            part_bins, inverse = np.unique(bins, return_inverse=True)
            counts = np.zeros((len(part_bins), queues), dtype=np.int64)
            np.add.at(counts, (inverse, queue), 1)
        self.parts.append((part_bins, counts.astype(np.int64)))
        if len(self.parts) > PARTS_MAX:
            self.parts = [_fold(np.concatenate([b for b, _ in self.parts]),
                                np.concatenate([c for _, c in self.parts]))]
        self._keep_frames(batch, queue, bins, part_bins, counts)

    def _keep_frames(self, batch, queue, bins, part_bins, counts) -> None:
        """Frame numbers of the dominant queue of bins where it already dominates within this batch."""
        p = self.params
        floor = p["min_queue_rate_pps"] * p["bin_ms"] / 1000.0 * EVIDENCE_RATE_RATIO
        top = counts.argmax(axis=1)
        top_count = counts[np.arange(len(counts)), top]
        busy = np.flatnonzero((top_count >= p["min_share_ratio"] * counts.sum(axis=1)) & (top_count >= floor))
        if len(busy) == 0:
            return
        hot_queue = np.full(len(part_bins), -1, dtype=np.int64)
        hot_queue[busy] = top[busy]
        at = np.searchsorted(part_bins, bins)
        rows = np.flatnonzero(hot_queue[at] == queue)
        order, starts, sizes = group_by(at[rows])
        rows = rows[order]
        frames = batch["frame"]
        for start, size in zip(starts.tolist(), sizes.tolist()):
            span = rows[start:start + size]
            cell = (int(bins[span[0]]), int(queue[span[0]]))
            picked = np.concatenate([frames[span[:FRAMES_PER_BIN // 2]], frames[span[-(FRAMES_PER_BIN // 2):]]])
            self.frames[cell] = keep_ends(self.frames.get(cell, picked[:0]), picked, FRAMES_PER_BIN)

    def merge(self, other: "RssSaturation") -> "RssSaturation":
        check_merge(self, other)
        self.parts.extend(other.parts)
        for cell, frames in other.frames.items():
            self.frames[cell] = keep_ends(self.frames.get(cell, frames[:0]), frames, FRAMES_PER_BIN)
        return self

    def histogram(self) -> tuple[np.ndarray, np.ndarray]:
        """(bins, counts[bin, queue]) of everything folded in: bin i starts at bins[i] * bin_ms."""
        if not self.parts:
            return np.zeros(0, dtype=np.int64), np.zeros((0, self.params["queues"]), dtype=np.int64)
        self.parts = [_fold(np.concatenate([b for b, _ in self.parts]), np.concatenate([c for _, c in self.parts]))]
        return self.parts[0]

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        p = self.params
        bins, counts = self.histogram()
        if len(bins) == 0:
            return []
        bin_s = self.bin_ns / NS
        total = counts.sum(axis=1)
        top = counts.argmax(axis=1)
        top_count = counts[np.arange(len(bins)), top]
        fire = (top_count >= p["min_share_ratio"] * total) & (top_count / bin_s >= p["min_queue_rate_pps"])
        hot = np.flatnonzero(fire)
        if len(hot) == 0:
            return []
        # an episode: firing bins of one queue, each at most one bin after the previous
        breaks = (np.diff(bins[hot]) > 2) | (np.diff(top[hot]) != 0)
        starts = np.flatnonzero(np.concatenate(([True], breaks)))
        ends = np.append(starts[1:], len(hot))
        flows = _flow_directions(ctx.flows, self.model)
        loops = ctx.findings.get("echo-loop", [])
        return [self._finding(hot[s:e], bins, counts, top, flows, loops) for s, e in zip(starts, ends)]

    def _finding(self, idx, bins, counts, top, flows, loops) -> Finding:
        p = self.params
        bin_s = self.bin_ns / NS
        queue = int(top[idx[0]])
        packets = int(counts[idx, queue].sum())
        total = int(counts[idx].sum())
        share = packets / total
        rates = counts[idx, queue] / bin_s
        peak = float(rates.max())
        first_ns, last_ns = int(bins[idx[0]]) * self.bin_ns, (int(bins[idx[-1]]) + 1) * self.bin_ns
        named = _flows_in_queue(flows, queue, first_ns, last_ns)
        loop = _loop_filling(named, loops)
        severity = "high" if peak >= p["high_queue_rate_pps"] or loop is not None else self.rule.severity
        fair = 1 / p["queues"]
        flow_text = "; ".join(
            f"{f['proto']} {endpoint(f['src_ip'], f['src_port'])} -> {endpoint(f['dest_ip'], f['dest_port'])} "
            f"(~{f['packets_in_window']:,} packets)"
            for f in named[:3] if f["packets_in_window"] >= MSG_FLOW_SHARE_RATIO * packets)
        msg = (f"receive queue {queue} of {p['queues']} took {share:.0%} of {total:,} packets "
               f"(fair share {fair:.1%}) in {len(idx)} bin(s) of {p['bin_ms']:g} ms, peak {peak:,.0f} packets/s "
               f"on that queue" + (f"; filled by {flow_text}" if flow_text else ""))
        if loop is not None:
            msg += f"; the flow is an echo loop ({loop.msg[:120]})"
        frames = np.concatenate([self.frames.get((int(bins[i]), queue), np.zeros(0, dtype=np.int64)) for i in idx])
        main = named[0] if named else {}
        evidence = {
            "queue": queue, "queues": p["queues"], "key": p["key"], "hash_udp_ports": p["hash_udp_ports"],
            "bin_ms": p["bin_ms"], "bins": len(idx), "share_ratio": round(share, 4), "fair_share_ratio": round(fair, 4),
            "queue_packets": packets, "window_packets": total, "peak_queue_rate_pps": round(peak, 1),
            "bin_starts": [iso_time(int(bins[i]) * self.bin_ns) for i in idx[:16]],
            "bin_queue_packets": counts[idx[:16], queue].astype(int).tolist(),
            "flows": named, "echo_loop": loop.msg if loop is not None else None,
            "evidence_frames": evidence_frames(np.unique(frames)),
        }
        return self.finding(severity, msg, first_seen=first_ns, last_seen=last_ns, n=packets,
                            src_ip=main.get("src_ip"), dest_ip=main.get("dest_ip"), src_port=main.get("src_port"),
                            dest_port=main.get("dest_port"), proto=main.get("proto"),
                            community_id=main.get("community_id"),
                            evidence={k: v for k, v in evidence.items() if v is not None})


def _address_halves(texts: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """The schema's (hi, lo) halves of address strings (IPv4 mapped into IPv6)."""
    values = {}
    for text in texts.unique():
        address = ipaddress.ip_address(text)
        if address.version == 4:
            address = ipaddress.IPv6Address(f"::ffff:{address}")
        values[text] = int(address)
    ints = texts.map(values)
    hi = np.array([v >> 64 for v in ints], dtype=np.uint64)
    lo = np.array([v & 0xFFFFFFFFFFFFFFFF for v in ints], dtype=np.uint64)
    return hi, lo


def _proto_numbers(column: pd.Series) -> np.ndarray:
    """IANA numbers of the flow table's protocol names; only TCP and UDP matter here, others become 0."""
    known = {name: number for number, name in PROTO_NAMES.items()}
    known.update({name.upper(): number for name, number in list(known.items())})
    known.update({number: number for number in PROTO_NAMES})
    return column.map(lambda value: known.get(value, 0)).to_numpy(np.int64)


def _time_ns(column: pd.Series) -> np.ndarray:
    """Flow-table times (datetimes, aware or naive UTC, or integer nanoseconds) as ns since the epoch."""
    import pandas as pd
    if pd.api.types.is_numeric_dtype(column):
        return column.to_numpy(np.int64)
    stamps = pd.to_datetime(column, utc=True)
    return ((stamps - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(1, "ns")).to_numpy(np.int64)


def _flow_directions(flows: pd.DataFrame, model: RssModel) -> pd.DataFrame:
    """One row per direction of each flow with packets: addresses, ports, packets, times and its queue."""
    import pandas as pd
    need = {"src_ip", "dest_ip", "src_port", "dest_port", "proto", "first_seen", "last_seen",
            "src2dst_packets", "dst2src_packets"}
    if flows is None or len(flows) == 0 or not need <= set(flows.columns):
        return pd.DataFrame()
    proto = _proto_numbers(flows["proto"])
    src_hi, src_lo = _address_halves(flows["src_ip"].astype(str))
    dst_hi, dst_lo = _address_halves(flows["dest_ip"].astype(str))
    sport = flows["src_port"].fillna(0).astype(np.uint16).to_numpy()
    dport = flows["dest_port"].fillna(0).astype(np.uint16).to_numpy()
    is_v6 = ~((src_hi == 0) & ((src_lo >> np.uint64(32)) == np.uint64(0xFFFF)))
    ports = (((proto == PROTO_TCP) & model.tcp_ports) | ((proto == PROTO_UDP) & model.udp_ports)) & \
        ((sport != 0) | (dport != 0))
    base = {"proto": [PROTO_NAMES.get(int(v), str(int(v))).upper() for v in proto],
            "first_ns": _time_ns(flows["first_seen"]), "last_ns": _time_ns(flows["last_seen"]),
            "community_id": flows["community_id"].to_numpy() if "community_id" in flows else None}
    forward = pd.DataFrame({**base, "src_ip": flows["src_ip"].to_numpy(), "dest_ip": flows["dest_ip"].to_numpy(),
                            "src_port": sport, "dest_port": dport,
                            "packets": flows["src2dst_packets"].to_numpy(np.int64),
                            "queue": model.queue_of(model.hash_tuples(src_hi, src_lo, dst_hi, dst_lo, sport, dport,
                                                                      is_v6, ports))})
    backward = pd.DataFrame({**base, "src_ip": flows["dest_ip"].to_numpy(), "dest_ip": flows["src_ip"].to_numpy(),
                             "src_port": dport, "dest_port": sport,
                             "packets": flows["dst2src_packets"].to_numpy(np.int64),
                             "queue": model.queue_of(model.hash_tuples(dst_hi, dst_lo, src_hi, src_lo, dport, sport,
                                                                       is_v6, ports))})
    both = pd.concat([forward, backward], ignore_index=True)
    return both[both["packets"] > 0]


def _flows_in_queue(directions: pd.DataFrame, queue: int, first_ns: int, last_ns: int) -> list[dict]:
    """The flow directions hashed to `queue` that overlap the window, by estimated packets in it."""
    import pandas as pd
    if len(directions) == 0:
        return []
    d = directions[(directions["queue"] == queue) & (directions["first_ns"] < last_ns) &
                   (directions["last_ns"] >= first_ns)]
    if len(d) == 0:
        return []
    # packets spread evenly over a flow's life: the part that falls in the window
    span = np.maximum(d["last_ns"].to_numpy() - d["first_ns"].to_numpy(), 1)
    overlap = np.minimum(d["last_ns"].to_numpy(), last_ns) - np.maximum(d["first_ns"].to_numpy(), first_ns)
    share = np.clip(np.where(d["last_ns"].to_numpy() == d["first_ns"].to_numpy(), 1.0, overlap / span), 0, 1)
    estimate = np.ceil(d["packets"].to_numpy() * share).astype(np.int64)
    d = d.assign(packets_in_window=estimate).sort_values("packets_in_window", ascending=False, kind="stable")
    out = []
    for row in d.head(FLOWS_NAMED).itertuples(index=False):
        item = {"proto": row.proto, "src_ip": row.src_ip, "src_port": int(row.src_port), "dest_ip": row.dest_ip,
                "dest_port": int(row.dest_port), "packets": int(row.packets),
                "packets_in_window": int(row.packets_in_window)}
        if row.community_id is not None and not pd.isna(row.community_id):
            item["community_id"] = str(row.community_id)
        out.append(item)
    return out


def _loop_filling(named: list[dict], loops: list[Finding]) -> Finding | None:
    """The echo-loop finding whose frame belongs to the flow that fills the queue most, if any."""
    if not named:
        return None
    top = named[0]
    for loop in loops:
        if (loop.src_ip, loop.dest_ip) == (top["src_ip"], top["dest_ip"]) and \
                loop.src_port in (None, top["src_port"]) and loop.dest_port in (None, top["dest_port"]):
            return loop
    return None

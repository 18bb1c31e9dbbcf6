"""syn-flood: a server port receiving SYNs far faster than it completes handshakes.

Seed 002: "mostly SYN flood, but our mirror port couldn't keep up". A SYN
flood fills the victim's queue of half-open connections (SYN_RECV) with
handshakes that never complete, from spoofed or many real sources, until
genuine clients are refused. Per (victim address, port, 1 s bin) this rule
counts the SYNs it receives, the SYN-ACKs and RSTs it sends back, and keeps
a HyperLogLog of the distinct sources and the SYNs of up to 1,024 of them
(space-saving, detector/detect/sketch.py), naming the top 32. A bin fires at `min_syn_pps` new SYNs whose
handshakes complete less than half the time; consecutive bins are one
episode. The new SYNs and the completed handshakes of each bin come from
the flow table, which keeps each attempt as one flow (a SYN retransmitted
with the same sequence number is the same attempt) and merges exactly
across files; so in `watch` they are those of the window.

A victim never seen sending (an ingress-only mirror; seed 002's mirror
could not keep up) shows no handshake whole; its clients' ACKs, the third
packet of each handshake, travel toward it and say which completed. Forged
sources have a signature that needs no answer at all (`_Attempts.signature`):
a stack whose SYN goes unanswered sends it again with the same port and
sequence number (Linux after 1 s, Windows after 3 s), one whose SYN is
answered sends its ACK; a flood tool forging a new address, port and
sequence number for every SYN (hping3 --rand-source, Mirai with a random
source) does neither. Of the attempts of the flooding seconds that had
RETRY_WAIT_S to show either before the capture ended, most stayed one lone
SYN, from DISTRIBUTED_SOURCES addresses or more, about one each: spoofed.

Severity: medium; high at 2,560 SYN/s, when the victim answers fewer than
one SYN in ten with a SYN-ACK, or when the flood carries the spoofed
signature, whether or not the victim is seen; critical at 25,600 SYN/s
(`with_capture_loss` raises a finding to critical when the capture itself
lost packets, as the seed's mirror port did). A victim never seen sending,
without the signature: low, "completion unknown" (a busy server whose real
clients retry is one). A flash crowd completes its handshakes, its ACKs
seen on either mirror, and stays quiet; one source on many ports is a sweep
of ports (many keys, each below the rate).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..detect import sketch
from ..detect.columns import endpoint, flow_time_ns, ip_text
from ..detect.confidence import Basis
from ..detect.detector import AnalysisContext, Detector, LiveCounter, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.figure import ReportFigure, TimeBins
from ..detect.grouping import find_sorted
from ..detect.hashing import mix64
from ..detect.state import fold_rows
from ..findings import SEVERITY_RANK, Finding, iso_time
from ..rules import ALERT_SECONDS, RATE_PPS, RATIO, Param
from ..schema import L_TCP, TH_ACK, TH_RST, TH_SYN, PacketBatch
from ..units import NS, plural

# the rules whose findings this one reads, by id (detect.detector.Detector.AFTER): no rule imports another
CAPTURE_LOSS = "capture-loss"

# ntopng's former syn_flood default (ntop/ntopng scripts/lua/modules/check_definitions/host/syn_flood.lua, removed
# in 1117e71d); high and critical are ten and a hundred times it
HIGH_SYN_PPS = 2_560
CRITICAL_SYN_PPS = 25_600
# the victim answering fewer SYNs than this with a SYN-ACK has stopped answering: high
SYNACK_RATIO_HIGH = 0.1
# Linux keeps a half-open connection while it retries its SYN-ACK 5 times from 1 s, doubling
# (include/net/tcp.h TCP_SYNACK_RETRIES, TCP_TIMEOUT_INIT): 1+2+4+8+16+32 = 63 s
HALF_OPEN_WINDOW_S = 63
# sources from which a flood is "distributed"
DISTRIBUTED_SOURCES = 100
# The spoofed-source signature (it needs no answer from the victim). A stack whose SYN goes unanswered sends it
# again, same port and sequence number: Linux after 1 s, then 3 s and 7 s (TCP_TIMEOUT_INIT, RFC 6298), Windows
# after 3 s, then 9 s (TcpInitialRTT, TcpMaxConnectRetransmissions); one whose SYN is answered sends its ACK. An
# attempt that stays one SYN for RETRY_WAIT_S (the longest first retry, 3 s, and a second of slack) while the
# capture goes on was made by no stack waiting for an answer: its source address was forged (hping3
# --rand-source; Mirai's SYN flood with a random source), the answer went elsewhere. Longer leaves fewer
# attempts to judge at a capture's end; shorter takes a Windows client's first wait for silence.
RETRY_WAIT_S = 4
# Lone SYNs among the judged attempts from which the flood is forged: most of them, as the completion test's
# 0.5. Lower calls a server spoofed whose real clients are mostly refused by a closed port (their RSTs unseen on an
# ingress mirror); higher misses a forged flood mixed with as much genuine traffic.
LONE_SHARE = 0.5
# Lone SYNs per distinct source at most: about one SYN per address is what random forged sources give (37,841
# SYNs from 37,623 sources in one real flood); a handful of hosts firing a flood tool from their own addresses
# (Mirai's default) send thousands each, and the same lone SYNs then name them as top sources instead.
LONE_PER_SOURCE = 2.0
# evidence lists: episodes named at most (the flooding seconds are listed up to BINS_IN_EVIDENCE)
EPISODES_IN_EVIDENCE = 32
# sources named per victim and port
TOP_SOURCES = 32
# Sources counted per victim and port: a flood from up to this many is counted exactly, whatever the batches
# and partitions that cut it (a count merged from parts that each kept every source is exact); beyond, the
# counts are space-saving bounds. A group's rows (56 bytes each) are about as many as the registers its sources
# set in its HyperLogLog, up to a quarter of its 4,096: the counts cost about what that sketch does, which
# MAX_CELLS bounds (a group dropped there drops its counts too).
SOURCES_COUNTED = 1_024
TOP_SOURCE_SHARE = 0.1
# the capture loss rule's medium threshold (gaps per ack, Zeek's too_much_loss): counts below it are lower bounds
CAPTURE_LOSS_CRITICAL_RATIO = 0.1
# Bins rows kept: one per (victim, port, second) with SYNs. Past this many, the rows of the quietest
# keys are dropped (and counted): a capture of millions of ordinary connections then loses rows that
# could never fire.
MAX_BIN_ROWS = 2_000_000
# Registers of the source sketches kept (4,096 at most per victim and port; 9 bytes each): past this many,
# those of the victims with fewest SYNs are dropped (and counted)
MAX_CELLS = 4_000_000
# pending per-batch rows folded into the state at once: folding each batch into a large state would cost
# the whole state per batch
FOLD_EVERY_ROWS = 1 << 16
BINS_IN_EVIDENCE = 120

BIN_COLUMNS = {
    "key": np.uint64, "group": np.uint64, "victim_hi": np.uint64, "victim_lo": np.uint64, "dport": np.uint16,
    "bin": np.int64, "syn": np.int64, "synack": np.int64, "rst": np.int64,
    "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64, "last_frame": np.int64,
}
BIN_REDUCE = {"syn": np.add, "synack": np.add, "rst": np.add, "last_ns": np.maximum,
              "first_frame": np.minimum, "last_frame": np.maximum}
NEVER_FRAME = np.iinfo(np.int64).max
SYN_OR_RST = np.uint16(TH_SYN | TH_RST)


def _fold(tables: list[dict]) -> dict:
    """The bin tables as one, one row per key (one sort, whatever their number)."""
    both = {name: np.concatenate([t[name] for t in tables]) for name in BIN_COLUMNS}
    return fold_rows(both, sketch.empty(BIN_COLUMNS), "key", BIN_REDUCE)


@register
class SynFlood(Detector):
    rule_id = "syn-flood"
    EVE_SIGNATURE = (21, "Attempted Denial of Service")
    # what its findings rest on beyond what it saw (detect.confidence): unanswered SYNs a second
    QUALITY_NEEDS = frozenset({"absence", "timing"})
    # a flood the capture could not keep up with is critical (seed 002): CaptureLoss's findings are read
    AFTER = (CAPTURE_LOSS,)
    PARAMS = {
        "min_syn_pps": Param(int, 256, "new SYNs per second to one address and port from which a bin counts",
                             RATE_PPS,
                             "256 is ntopng's former syn_flood default; a busy web server takes thousands of "
                             "connections a second, so raise it there (the completion test keeps flash crowds "
                             "quiet); lower catches small floods against small servers."),
        "max_completion_ratio": Param(float, 0.5, "completed handshakes per new SYN below which a bin fires",
                                      RATIO,
                                      "A flooded server completes few of its handshakes; lower ignores a flood "
                                      "mixed with much genuine traffic, higher reports busy servers whose clients "
                                      "give up."),
    }
    ALERTS = {
        "suppress_s": Param(float, 60.0, "least seconds between two events about one victim", ALERT_SECONDS,
                            "A flood goes on for minutes; shorter repeats the event while its rate wavers."),
        "resolve_s": Param(float, 65.0, "seconds without a flooding bin before the victim is resolved", ALERT_SECONDS,
                           "The half-open connections of a flood expire within 63 s of its last SYN; shorter "
                           "resolves a victim whose queue is still full."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.bins = sketch.empty(BIN_COLUMNS)
        self.pending: list[dict] = []
        self.pending_rows = 0
        self.cells = sketch.empty(sketch.CELL_COLUMNS)
        self.top = {**sketch.empty(sketch.TOP_COLUMNS), "src_hi": np.zeros(0, np.uint64),
                    "src_lo": np.zeros(0, np.uint64)}
        self.dropped_rows = 0
        self.dropped_cells = 0
        # per finding (victim endpoint) the per-second values its message is computed from, which its figure draws
        self.series: dict[str, dict[str, np.ndarray]] = {}

    # ---- state ----------------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        rows = np.flatnonzero(batch["tcp_flags"] & SYN_OR_RST)
        if len(rows) == 0:
            return
        rows = rows[(batch["layers"][rows] & np.uint32(L_TCP)) != 0]
        flags = batch["tcp_flags"][rows]
        syn = (flags & TH_SYN) != 0
        if not syn.any():
            return
        ack = (flags & TH_ACK) != 0
        rst = ((flags & TH_RST) != 0) & ~syn
        to_victim = syn & ~ack & ~rst
        from_victim = (syn & ack) | rst
        rows, to_victim, from_victim, rst = (rows[to_victim | from_victim], to_victim[to_victim | from_victim],
                                             from_victim[to_victim | from_victim], rst[to_victim | from_victim])
        src_hi, src_lo = batch["src_ip_hi"][rows], batch["src_ip_lo"][rows]
        dst_hi, dst_lo = batch["dest_ip_hi"][rows], batch["dest_ip_lo"][rows]
        victim_hi, victim_lo = np.where(to_victim, dst_hi, src_hi), np.where(to_victim, dst_lo, src_lo)
        dport = np.where(to_victim, batch["dest_port"][rows], batch["src_port"][rows]).astype(np.uint16)
        ts, frame = batch["ts_ns"][rows], batch["frame"][rows]
        second = ts // NS
        group = mix64(victim_hi, victim_lo, dport)
        key = mix64(group, second)
        table = {"key": key, "group": group, "victim_hi": victim_hi, "victim_lo": victim_lo, "dport": dport,
                 "bin": second, "syn": to_victim.astype(np.int64),
                 "synack": (from_victim & ~rst).astype(np.int64), "rst": rst.astype(np.int64),
                 "first_ns": ts, "last_ns": ts,
                 "first_frame": np.where(to_victim, frame, NEVER_FRAME), "last_frame": np.where(to_victim, frame, -1)}
        s_hi, s_lo = src_hi[to_victim], src_lo[to_victim]
        source = mix64(s_hi, s_lo)
        self._add(fold_rows(table, sketch.empty(BIN_COLUMNS), "key", BIN_REDUCE),
                  sketch.hll_cells(group[to_victim], source),
                  sketch.top_counts(group[to_victim], source, SOURCES_COUNTED, src_hi=s_hi, src_lo=s_lo))

    def _add(self, bins: dict, cells: dict, top: dict) -> None:
        """Keep a batch's (or another state's) tables aside; fold them in when they add up (each fold costs
        the whole state)."""
        self.pending.append((bins, cells, top))
        self.pending_rows += len(bins["key"]) + len(cells["group"])
        if self.pending_rows >= max(FOLD_EVERY_ROWS, len(self.bins["key"]) + len(self.cells["group"])):
            self._compact()

    def _compact(self) -> None:
        if self.pending:
            self.bins = _fold([self.bins, *(bins for bins, _, _ in self.pending)])
            self.cells = sketch.hll_fold({name: np.concatenate([self.cells[name], *(c[name] for _, c, _ in
                                                                                   self.pending)])
                                          for name in sketch.CELL_COLUMNS})
            self.top = sketch.top_merge([self.top, *(top for _, _, top in self.pending)], SOURCES_COUNTED)
            self.pending, self.pending_rows = [], 0
        extra = len(self.bins["key"]) - MAX_BIN_ROWS
        if extra > 0:
            keep = np.sort(np.argsort(-self.bins["syn"], kind="stable")[:MAX_BIN_ROWS])
            self.bins = {name: col[keep] for name, col in self.bins.items()}
            self.dropped_rows += extra
        if len(self.cells["group"]) > MAX_CELLS:
            self._drop_quiet_sketches()

    def _drop_quiet_sketches(self) -> None:
        """Keep the source sketches of the groups with most SYNs, MAX_CELLS registers at most (a group has up to
        4,096; millions of ports each with a few sources would otherwise fill memory)."""
        b = self.bins
        groups, inverse = np.unique(b["group"], return_inverse=True)
        syns = np.bincount(inverse.reshape(-1), weights=b["syn"], minlength=len(groups))
        cell_groups, cells_of = np.unique(self.cells["group"], return_counts=True)
        at, found = find_sorted(groups, cell_groups)
        weight = np.zeros(len(cell_groups))
        weight[found] = syns[at[found]]
        order = np.argsort(-weight, kind="stable")
        kept = cell_groups[order][np.cumsum(cells_of[order]) <= MAX_CELLS]
        keep = np.isin(self.cells["group"], kept)
        self.dropped_cells += int(np.count_nonzero(~keep))
        self.cells = {name: col[keep] for name, col in self.cells.items()}
        top = np.isin(self.top["group"], kept)
        self.top = {name: col[top] for name, col in self.top.items()}

    def merge(self, other: Detector) -> Detector:
        check_merge(self, other)
        other._compact()
        self._add(other.bins, other.cells, other.top)
        self.dropped_rows += other.dropped_rows
        self.dropped_cells += other.dropped_cells
        return self

    # ---- findings ---------------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        self._compact()
        b = self.bins
        hot = b["syn"] >= self.params["min_syn_pps"]
        if not hot.any():
            return []
        out = []
        for group in np.unique(b["group"][hot]):
            mine = np.flatnonzero(b["group"] == group)
            mine = mine[np.argsort(b["bin"][mine], kind="stable")]
            finding = self._victim_finding(ctx, group, {name: col[mine] for name, col in b.items()})
            if finding is not None:
                loss = _loss_during(ctx, finding)
                out.append(finding if loss is None else self.with_capture_loss(finding, loss))
        return out

    def _victim_finding(self, ctx: AnalysisContext, group, rows: dict) -> Finding | None:
        victim = ip_text(rows["victim_hi"][0], rows["victim_lo"][0])
        port = int(rows["dport"][0])
        seen = _Attempts.of(ctx, victim, port, rows["bin"])
        syn = rows["syn"]
        # without a flow table the packets are the attempts; a retransmitted SYN is then counted again
        new = seen.per_second["attempts"] if seen.have_flows else syn
        sent = seen.victim_sent or bool(rows["synack"].sum() or rows["rst"].sum())
        # a victim never seen sending shows no handshake whole: its clients' ACKs (the third packet, toward it) say
        # which completed
        completions = seen.per_second["completed" if sent else "client_acked"]
        ratio = completions / np.maximum(new, 1)
        fires = new >= self.params["min_syn_pps"]
        if sent or seen.have_flows:
            fires &= ratio < self.params["max_completion_ratio"]
        if not fires.any():
            return None
        episodes = _episodes(rows["bin"], fires)
        flooded = np.zeros(len(fires), dtype=bool)
        for first, last in episodes:
            flooded[first:last + 1] = True
        peak = int(new[flooded].max())
        self.series[endpoint(victim, port)] = {
            "second": rows["bin"].astype(np.int64), "new_syn": np.asarray(new, np.int64),
            "synack": rows["synack"].astype(np.int64), "completed": np.asarray(completions, np.int64),
            "flooded": flooded, "completion": np.array("completed" if sent else "client_acked")}
        syn_total, new_total = int(syn[flooded].sum()), int(new[flooded].sum())
        synacks, completed = int(rows["synack"][flooded].sum()), int(completions[flooded].sum())
        synack_ratio = synacks / max(syn_total, 1)
        # an estimate never above the exact count it estimates from: no more sources than SYNs sent to the victim
        syn_all = int(syn.sum())
        sources = min(round(float(sketch.hll_estimate(self.cells, np.array([group], np.uint64))[0])), syn_all)
        distributed = sources >= DISTRIBUTED_SOURCES
        signature = seen.signature(rows["bin"][flooded], ctx)
        spoofed = bool(signature and signature["spoofed"])
        # uncompleted attempts of the last 63 s of the last episode: what still holds the victim's queue
        end = int(rows["bin"][episodes[-1][1]])
        recent = (rows["bin"] > end - HALF_OPEN_WINDOW_S) & (rows["bin"] <= end)
        half_open = int(np.maximum(new[recent] - completions[recent], 0).sum())

        if peak >= CRITICAL_SYN_PPS and (sent or spoofed):
            severity = "critical"
        elif spoofed:
            # forged sources complete nothing, whatever the victim answers: as a victim answering fewer than one
            # SYN in ten, and needing no answer to be seen
            severity = "high"
        elif not sent:
            severity = "low"
        elif peak >= HIGH_SYN_PPS or synack_ratio < SYNACK_RATIO_HIGH:
            severity = "high"
        else:
            severity = "medium"
        seconds = int(flooded.sum())
        t0, t1 = int(rows["first_ns"][flooded].min()), int(rows["last_ns"][flooded].max())
        where = endpoint(victim, port)
        spread = (f"from about {sources:,} sources (distributed)" if distributed
                  else f"from {plural(sources, 'source')}")
        if sources > new_total:         # the sources are counted over all the SYNs to it, the flood's are fewer
            spread += f" over its {syn_all:,} SYNs in the capture"
        msg = (f"{where} received {new_total:,} new SYNs in {plural(seconds, 'flooding second')} "
               f"({plural(len(episodes), 'episode')}, peak {peak:,}/s, threshold "
               f"{self.params['min_syn_pps']:,}/s) {spread}")
        if sent:
            msg += (f"; it answered {synack_ratio:.0%} with a SYN-ACK and {plural(completed, 'handshake')} completed "
                    f"({completed / max(new_total, 1):.0%}); about {plural(half_open, 'half-open connection')} in the "
                    f"last {HALF_OPEN_WINDOW_S} s")
        else:
            msg += ("; " + ("" if spoofed else "completion unknown: ") + "the victim is never seen sending (an "
                    "ingress-only mirror, or a capture point on one direction only)")
            if seen.have_flows:
                msg += f"; {completed:,} of its clients ({completed / max(new_total, 1):.0%}) went on to ACK"
        if spoofed:
            msg += (f"; spoofed sources: {signature['lone_syn']:,} of the {signature['judged_attempts']:,} attempts "
                    f"seen for {RETRY_WAIT_S} s or more ({signature['lone_ratio']:.0%}) stayed one SYN, never sent "
                    f"again nor followed by an ACK as a real stack's would be, from {signature['lone_sources']:,} "
                    f"addresses ({signature['syn_per_lone_source']:.2f} per address)")
        top = self._top_sources(group)
        # a source named in the message sent at least a tenth of the SYNs for sure (space-saving counts are
        # upper bounds; count - error is a lower one)
        if top and top[0]["syn"] - top[0]["syn_error"] >= TOP_SOURCE_SHARE * new_total:
            msg += f"; top source {top[0]['src_ip']} (at least {top[0]['syn'] - top[0]['syn_error']:,} SYNs)"
        flooded_rows = np.flatnonzero(flooded)
        series = [{"second": iso_time(int(rows["bin"][k]) * NS), "syn": int(syn[k]), "new_syn": int(new[k]),
                   "synack": int(rows["synack"][k]), "rst": int(rows["rst"][k]),
                   "completed": int(completions[k])} for k in flooded_rows[:BINS_IN_EVIDENCE]]
        frames = np.concatenate([rows["first_frame"][flooded], rows["last_frame"][flooded]])
        frames = np.unique(frames[(frames >= 0) & (frames != NEVER_FRAME)])
        evidence = {
            "victim": victim, "port": port, "flooding_seconds": seconds, "peak_syn_per_s": peak,
            "syn_packets": syn_total, "new_syn": new_total, "synack": synacks,
            "synack_per_syn_ratio": round(synack_ratio, 4) if sent else None,
            "completed_handshakes": completed if sent else None,
            "completion_ratio": round(completed / max(new_total, 1), 4) if sent else None,
            "completion_known": sent,
            "client_acked": completed if not sent and seen.have_flows else None,
            "rst_from_victim": int(rows["rst"][flooded].sum()),
            "half_open_estimate": half_open if sent else None, "half_open_window_s": HALF_OPEN_WINDOW_S,
            "sources_estimate": sources, "distributed": distributed, "spoofing": signature,
            "top_sources": top, **_left_out("top_sources", sources - len(top)),
            "episodes": [{"first_seen": iso_time(int(rows["first_ns"][a])),
                          "last_seen": iso_time(int(rows["last_ns"][z])), "seconds": int(z - a + 1)}
                         for a, z in episodes[:EPISODES_IN_EVIDENCE]],
            **_left_out("episodes", len(episodes) - EPISODES_IN_EVIDENCE),
            "per_second": series, **_left_out("per_second", len(flooded_rows) - BINS_IN_EVIDENCE),
            "first_syn_frame": int(frames[0]) if len(frames) else None,
            "last_syn_frame": int(frames[-1]) if len(frames) else None,
            "evidence_frames": evidence_frames(frames),
        }
        if not seen.have_flows:
            evidence["new_syn_from"] = "SYN packets (no flow table: retransmissions counted again)"
        if self.dropped_rows:
            evidence["bin_rows_not_kept"] = self.dropped_rows
        if self.dropped_cells:
            evidence["sketch_registers_not_kept"] = self.dropped_cells
        # the spoofing signature rests on what the mirror's own direction shows (SYNs never sent again, never
        # ACKed), not on the victim's answers: a one-direction capture takes nothing from it, loss does
        basis, needs = [], None
        if spoofed:
            basis = [Basis("high", f"{signature['lone_syn']:,} of {signature['judged_attempts']:,} attempts stayed "
                                   f"one SYN from {signature['lone_sources']:,} addresses: forged sources, whatever "
                                   "the victim answered")]
            needs = frozenset({"timing"})
        return self.finding(severity, msg, identifier=where, first_seen=t0, last_seen=t1, n=new_total,
                            dest_ip=victim, dest_port=port, proto="TCP",
                            src_ip=top[0]["src_ip"] if sources == 1 and top else None,
                            evidence={k: v for k, v in evidence.items() if v is not None}, basis=basis, needs=needs)

    def _top_sources(self, group) -> list[dict]:
        t = self.top
        mine = np.flatnonzero(t["group"] == group)
        mine = mine[np.lexsort((t["item"][mine], -t["count"][mine]))]
        # a source is named when the SYNs it surely sent exceed what any source not counted may have sent (the
        # group's floor): none of a spoofed flood's, each seen once among more than SOURCES_COUNTED
        mine = mine[t["count"][mine] - t["error"][mine] > t["floor"][mine]][:TOP_SOURCES]
        return [{"src_ip": ip_text(t["src_hi"][k], t["src_lo"][k]), "syn": int(t["count"][k]),
                 "syn_error": int(t["error"][k])} for k in mine]

    @staticmethod
    def with_capture_loss(finding: Finding, loss_ratio: float) -> Finding:
        """The finding with what CaptureLoss measured: a flood seen through a capture that lost at least
        CAPTURE_LOSS_CRITICAL_RATIO of its packets is critical (seed 002: the mirror port could not keep
        up; every count above is then a lower bound). findings() calls it with the worst ratio of
        CaptureLoss's findings over the flood."""
        evidence = {**finding.evidence, "capture_loss_ratio": round(float(loss_ratio), 4)}
        severity = finding.severity
        if loss_ratio >= CAPTURE_LOSS_CRITICAL_RATIO and SEVERITY_RANK[severity] >= SEVERITY_RANK["medium"]:
            severity = "critical"
        return dataclasses.replace(finding, severity=severity, evidence=evidence)

    # ---- report and watch -------------------------------------------------------
    def figures(self, findings: list[Finding], bins: TimeBins) -> list[ReportFigure]:
        victims = [(f.dest_ip, f.dest_port) for f in findings
                   if f.dest_ip is not None and f.identifier in self.series][:FIGURE_VICTIMS]
        return [SynRateFigure(victims, bins, [self.series[endpoint(*v)] for v in victims])] if victims else []

    def live_counters(self) -> list[LiveCounter]:
        return [LiveCounter("tcp_handshake_packets", "TCP SYNs (kind 0) and SYN-ACKs (kind 1) seen", "kind", 2,
                            _syn_counts)]


def _loss_during(ctx: AnalysisContext, finding: Finding) -> float | None:
    """The worst loss ratio of CaptureLoss's findings (medium or above) that overlap the flood in time: ACK
    gaps over its lossy bins, or the capture point's drop counters; None when the capture kept up."""
    ratios = [f.evidence.get("loss_ratio", f.evidence.get("drop_ratio"))
              for f in ctx.findings.get(CAPTURE_LOSS, [])
              if SEVERITY_RANK[f.severity] >= SEVERITY_RANK["medium"]
              and f.first_seen <= finding.last_seen and finding.first_seen <= f.last_seen]
    ratios = [float(r) for r in ratios if r is not None]
    return max(ratios) if ratios else None


def _syn_counts(batch: PacketBatch) -> np.ndarray:
    rows = np.flatnonzero(batch["tcp_flags"] & np.uint16(TH_SYN))
    rows = rows[(batch["layers"][rows] & np.uint32(L_TCP)) != 0]
    synack = int(np.count_nonzero(batch["tcp_flags"][rows] & np.uint16(TH_ACK)))
    return np.array([len(rows) - synack, synack], dtype=np.int64)


def _episodes(seconds: np.ndarray, fires: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) row of each run of firing rows whose seconds follow each other."""
    out: list[tuple[int, int]] = []
    for k in np.flatnonzero(fires).tolist():
        if out and out[-1][1] == k - 1 and seconds[k] == seconds[k - 1] + 1:
            out[-1] = (out[-1][0], k)
        else:
            out.append((k, k))
    return out


class _Attempts:
    """The connection attempts to one victim and port, from the flow table (one flow per attempt: a SYN sent again
    with the same sequence number stays one), counted per second of `seconds` by their first SYN: "attempts",
    "completed" (the handshake seen whole), "client_acked" (the originator went on to send an ACK, the third
    packet of a handshake, seen on a mirror of the victim's ingress too); whether the victim sent anything at all,
    whether there was a flow table to ask. `signature` judges the attempts of a flood's seconds."""

    def __init__(self, seconds: np.ndarray, have_flows: bool, victim_sent: bool = False, attempts=None):
        self.seconds = seconds
        self.have_flows = have_flows
        self.victim_sent = victim_sent
        # per attempt: its second's row in `seconds` (-1 outside them), first SYN (ns), source, flags
        self.attempts = attempts
        self.per_second = {name: np.zeros(len(seconds), dtype=np.int64)
                           for name in ("attempts", "completed", "client_acked")}
        if attempts is not None:
            inside = attempts["at"] >= 0
            for name, mask in (("attempts", inside), ("completed", inside & attempts["done"]),
                               ("client_acked", inside & attempts["acked"])):
                np.add.at(self.per_second[name], attempts["at"][mask], 1)

    @classmethod
    def of(cls, ctx: AnalysisContext, victim: str, port: int, seconds: np.ndarray) -> _Attempts:
        flows = ctx.flows
        if flows is None or len(flows) == 0 or "dest_ip" not in flows:
            return cls(seconds, have_flows=False)
        to_victim = (flows["dest_ip"] == victim) & (flows["dest_port"] == port) & (flows["proto"] == "tcp")
        mine = flows[to_victim]
        sent = bool((mine["dst2src_packets"] > 0).any()) or bool(((flows["src_ip"] == victim) &
                                                                  (flows["src2dst_packets"] > 0)).any())
        flags = mine["src2dst_tcp_flags"].to_numpy(np.int64)
        syn = (flags & TH_SYN) != 0
        first = flow_time_ns(mine["first_seen"])[syn]
        second = first // NS
        at = np.searchsorted(seconds, second)
        inside = at < len(seconds)
        inside[inside] = seconds[at[inside]] == second[inside]
        attempts = {"at": np.where(inside, at, -1), "first_ns": first,
                    "done": mine["handshake_synack_ack_ms"].notna().to_numpy()[syn],
                    "acked": (flags[syn] & TH_ACK) != 0,
                    "retried": mine["syn_retransmits"].to_numpy(np.int64)[syn] > 0,
                    "source": mine["src_ip"].to_numpy()[syn]}
        return cls(seconds, have_flows=True, victim_sent=sent, attempts=attempts)

    def signature(self, flooded: np.ndarray, ctx: AnalysisContext) -> dict | None:
        """The spoofed-source signature of the attempts in the `flooded` seconds that had RETRY_WAIT_S to show a
        retransmitted SYN or an ACK before the capture ended: how many stayed one lone SYN, from how many
        addresses; None without a flow table."""
        if self.attempts is None:
            return None
        a = self.attempts
        inside = a["at"] >= 0
        inside[inside] = np.isin(self.seconds[a["at"][inside]], flooded)
        end = ctx.stats.last_ns if ctx.stats is not None and ctx.stats.last_ns is not None else \
            int(a["first_ns"].max(initial=0))
        judged = inside & (a["first_ns"] <= end - RETRY_WAIT_S * NS)
        lone = judged & ~a["acked"] & ~a["retried"]
        n_judged, n_lone = int(judged.sum()), int(lone.sum())
        sources = _distinct(a["source"][lone])
        per_source = n_lone / max(sources, 1)
        spoofed = (n_lone >= LONE_SHARE * n_judged and sources >= DISTRIBUTED_SOURCES and n_judged > 0
                   and per_source <= LONE_PER_SOURCE)
        return {"judged_attempts": n_judged, "lone_syn": n_lone, "lone_ratio": round(n_lone / max(n_judged, 1), 4),
                "lone_sources": sources, "syn_per_lone_source": round(per_source, 4),
                "retried_attempts": int((judged & a["retried"]).sum()),
                "client_acked_attempts": int((judged & a["acked"]).sum()),
                "retry_wait_s": RETRY_WAIT_S, "spoofed": spoofed}


def _left_out(name: str, count: int) -> dict:
    """`<name>_left_out`: how many a capped evidence list left out, when it left any (detector.findings's
    convention)."""
    return {f"{name}_left_out": int(count)} if count > 0 else {}


def _distinct(values: np.ndarray) -> int:
    """How many distinct values a column (addresses as text) holds, by hashing."""
    import pandas as pd
    return int(pd.Series(values).nunique())


FIGURE_VICTIMS = 4


class SynRateFigure(ReportFigure):
    """Per second, for each flooded victim, what its finding counts: new SYNs (the message's peak is this line's
    highest point in the flood), the victim's SYN-ACKs, and the handshakes that completed (or, the victim never
    seen sending, its clients' ACKs); the flooding seconds shaded. Drawn from the rule's own values
    (SynFlood.series), so the figure and the message are one number from one source; the evidence pass adds
    nothing."""

    needs_batches = False

    title = "New SYNs, SYN-ACKs and completed handshakes per second"

    def __init__(self, victims: list[tuple[str, int]], bins: TimeBins, series: list[dict[str, np.ndarray]]):
        self.victims = victims
        self.bins = bins
        self.series = series

    def add(self, batch: PacketBatch) -> None:
        return None

    def merge(self, other: SynRateFigure) -> SynRateFigure:
        """Nothing to merge: the values are the rule's, already merged over the partitions."""
        return self

    def draw(self, ax, flows) -> None:
        steps = self.bins.second_steps
        zero = self.bins.start_ns / NS
        for (ip, port), values in zip(self.victims, self.series):
            x, new = steps(values["second"], values["new_syn"])
            line, = ax.plot(x, new, drawstyle="steps-post", lw=1.2, label=f"new SYNs to {endpoint(ip, port)}")
            colour = line.get_color()
            ax.plot(*steps(values["second"], values["synack"]), drawstyle="steps-post", lw=0.8, ls=":",
                    color=colour, label="its SYN-ACKs")
            done = "completed handshakes" if str(values["completion"]) == "completed" else "its clients' ACKs"
            ax.plot(*steps(values["second"], values["completed"]), drawstyle="steps-post", lw=0.8, ls="--",
                    color=colour, label=done)
            for first, last in _episodes(values["second"], values["flooded"]):
                ax.axvspan(values["second"][first] - zero, values["second"][last] + 1 - zero, color=colour,
                           alpha=0.12, lw=0)
        self.bins.time_axis(ax)
        ax.set_ylabel("per second")
        ax.legend(loc="upper right", fontsize="small")

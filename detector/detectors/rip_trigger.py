"""rip-trigger: UDP to the RIP ports (520, 521) judged by payload, source and targets.

Routers on one link speak RIP to the multicast groups (224.0.0.9, ff02::9)
with well-formed messages; that is normal. A packet to port 520 or 521 that
is zero-filled or malformed, sent unicast from outside the local networks,
or one source reaching many targets, is a probe: scanners send exactly
that. A probe whose frame is the one an echo loop repeats (echo_loop.py)
is the trigger of an outage, and both findings name each other.

The payload is judged by the `rip` application table (detector.decode.app.rip,
the one RIP parser, which the announcement rule reads too): its verdict is what a
receiver's checks make of the message (RFC 1058, RFC 2453, RFC 2080, and the
authentication of RFC 2082 and RFC 4822, whose trailer is no entry), so an
authenticated RIPv2 router is never a probe.

A malformed message is a probe when a scanner's bytes could explain it
(zero-filled, not a RIP header, wrong IP version, unicast from outside, many
targets). A local router multicasting a RIP header with a broken entry to
the RIP group is a faulty speaker instead: reported at low severity.

Local sources are those of the site file's `local_networks` when it gives
them (`--site`), else those of the rule's `local_networks` parameter.

State: one row per (source, target, port, verdict, frame fingerprint) with
counts and times; repeats of one frame (a loop) collapse into one row.
"""
from __future__ import annotations

import ipaddress

import numpy as np

from ..decode import app
from ..decode.addr import mac_to_str
from ..decode.app.rip import (
    BAD_AFI,
    BAD_AUTH,
    BAD_LENGTH,
    BAD_METRIC,
    BAD_PREFIX_LEN,
    NONZERO_MBZ,
    RIP_PORT,
    RIPNG_PORT,
    VALID,
    VERDICTS,
)
from ..detect.columns import ip_text
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.grouping import group_by
from ..detect.hashing import mix64
from ..detect.state import fold_rows
from ..errors import RuleError
from ..findings import SEVERITY_RANK, Finding
from ..flows.community_id import community_id
from ..rules import ALERT_SECONDS, COUNT, Param, Range
from ..schema import L_DST_MAC, L_SRC_MAC, PacketBatch
from ..units import plural

# the rules whose findings this one reads, by id (detect.detector.Detector.AFTER): no rule imports another
ECHO_LOOP = "echo-loop"

# the RIP multicast groups as the schema's 128-bit (hi, lo) values
RIP2_GROUP = (0, 0x0000FFFF_E0000009)            # 224.0.0.9, RFC 2453 sec. 4.4
RIPNG_GROUP = (0xFF02_0000_0000_0000, 0x9)       # ff02::9, RFC 2080 sec. 2.5.2
IPV4_BROADCAST = (0, 0x0000FFFF_FFFFFFFF)        # RIPv1 sends to the broadcast address
ETHER_BROADCAST = 0xFFFF_FFFF_FFFF

# Faults inside the entries of a message whose header is RIP: from a local router
# to the RIP group, a broken speaker rather than a scanner
SPEAKER_FAULTS = (BAD_LENGTH, NONZERO_MBZ, BAD_AFI, BAD_METRIC, BAD_PREFIX_LEN, BAD_AUTH)

# Targets listed by address in a finding; the count covers all of them.
TARGETS_LISTED = 10
# Rows kept before the state is folded to bound it under a probe flood: first
# single probes of one (source, target, verdict) lose their frame identity,
# then, if still too many, probes that never repeated lose their target
# address (counted, no longer listed). Repeated frames (a loop) stay distinct.
MAX_ROWS = 100_000


ROW_COLUMNS = {
    "key": np.uint64, "src_ip_hi": np.uint64, "src_ip_lo": np.uint64, "dest_ip_hi": np.uint64,
    "dest_ip_lo": np.uint64, "dest_port": np.uint16, "src_port": np.uint16, "verdict": np.uint8,
    "group": np.bool_, "local": np.bool_, "fp": np.uint64, "count": np.int64, "first_ns": np.int64,
    "last_ns": np.int64, "first_frame": np.int64, "last_frame": np.int64, "ttl": np.uint8,
    "layers": np.uint32, "src_mac": np.uint64, "dest_mac": np.uint64, "payload_len": np.uint32,
    # a folded row stands for `targets` rows whose target address was dropped to bound the state
    "folded": np.bool_, "targets": np.int64,
}


def _combine(a: dict, b: dict) -> dict:
    return fold_rows(a, b, "key", {"count": np.add, "targets": np.add, "last_ns": np.maximum,
                                   "first_frame": np.minimum, "last_frame": np.maximum})


def _row_key(rows: dict) -> np.ndarray:
    return mix64(rows["src_ip_hi"], rows["src_ip_lo"], rows["dest_ip_hi"], rows["dest_ip_lo"],
                 rows["dest_port"], rows["verdict"], rows["fp"], rows["folded"])


def _networks(rule, values) -> list[tuple[int, int, int]]:
    """`local_networks` as (hi, lo, prefix length) in the schema's IPv4-mapped 128-bit space."""
    out = []
    for text in values:
        try:
            net = ipaddress.ip_network(str(text), strict=False)
        except ValueError:      # its message repeats the value: an error says what is wrong, never the text
            raise RuleError(rule.path, "params.local_networks", "not a network in CIDR notation "
                                                                "(10.0.0.0/8, 2001:db8::/32)") from None
        if net.version == 4:
            value = int(ipaddress.IPv6Address(f"::ffff:{net.network_address}"))
            plen = 96 + net.prefixlen
        else:
            value, plen = int(net.network_address), net.prefixlen
        out.append((value >> 64, value & 0xFFFF_FFFF_FFFF_FFFF, plen))
    return out


def _in_networks(hi: np.ndarray, lo: np.ndarray, networks) -> np.ndarray:
    inside = np.zeros(len(hi), dtype=bool)
    for net_hi, net_lo, plen in networks:
        hi_bits, lo_bits = min(plen, 64), max(plen - 64, 0)
        hi_mask = np.uint64(((1 << hi_bits) - 1) << (64 - hi_bits)) if hi_bits else np.uint64(0)
        lo_mask = np.uint64(((1 << lo_bits) - 1) << (64 - lo_bits)) if lo_bits else np.uint64(0)
        inside |= ((hi & hi_mask) == (np.uint64(net_hi) & hi_mask)) & ((lo & lo_mask) == (np.uint64(net_lo) & lo_mask))
    return inside


@register
class RipTrigger(Detector):
    rule_id = "rip-trigger"
    EVE_SIGNATURE = (14, "Attempted Information Leak")
    # what its findings rest on beyond what it saw (detect.confidence): the RIP message the probe holds
    QUALITY_NEEDS = frozenset({"payload"})
    AFTER = (ECHO_LOOP,)
    APP_TABLES = ("rip",)
    REPRODUCES = "the probe"
    PARAMS = {
        "many_targets_count": Param(int, 5, "distinct targets on the RIP ports from one source that make it a "
                                            "sweep", COUNT,
                                    "A router speaks to one group address or a few neighbours; lower values flag "
                                    "routers with several unicast neighbours, higher ones let small sweeps "
                                    "through."),
        # a list of prefixes, not a routing table: up to 4,096 of them
        "local_networks": Param(list, ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16",
                                       "100.64.0.0/10", "fe80::/10", "fc00::/7"],
                                "source networks counted as local (CIDR, IPv4 or IPv6) unless the site file gives "
                                "local_networks, which then take precedence: unicast RIP from elsewhere is a probe",
                                Range(0, 4096),
                                "The defaults are the private, shared and link-local ranges; add your routers' "
                                "public networks if they speak RIP by unicast, or their updates read as probes."),
    }
    ALERTS = {
        "suppress_s": Param(float, 300.0, "least seconds between two events about one probing source",
                            ALERT_SECONDS,
                            "Scanners come back in waves; a longer interval keeps a slow sweep from raising an "
                            "event per probe, a shorter one shows each wave."),
        "resolve_s": Param(float, 30.0, "seconds without a new probe from the source before it is resolved",
                           ALERT_SECONDS,
                           "Probes are single packets seconds apart; shorter would resolve and re-raise one sweep "
                           "many times."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.networks = _networks(rule, self.params["local_networks"])
        self.rows = {name: np.zeros(0, dtype=dtype) for name, dtype in ROW_COLUMNS.items()}

    def update(self, batch: PacketBatch) -> None:
        tab = app.table(batch, "rip")
        dport = batch["dest_port"][tab["row"]]
        # packets to a RIP port: what is sent from one (a response to a request) is no probe
        picked = np.flatnonzero((dport == RIP_PORT) | (dport == RIPNG_PORT))
        if len(picked) == 0:
            return
        sel = tab["row"][picked]
        verdict = tab["verdict"][picked]
        rows = {name: batch[name][sel].astype(dtype) for name, dtype in ROW_COLUMNS.items() if name in batch.cols}
        dhi, dlo = rows["dest_ip_hi"], rows["dest_ip_lo"]
        group = ((dhi == RIP2_GROUP[0]) & (dlo == RIP2_GROUP[1])) | ((dhi == RIPNG_GROUP[0]) & (dlo == RIPNG_GROUP[1]))
        group |= (dhi == IPV4_BROADCAST[0]) & (dlo == IPV4_BROADCAST[1])
        group |= ((rows["layers"] & np.uint32(L_DST_MAC)) != 0) & (rows["dest_mac"] == ETHER_BROADCAST)
        if self.site.given("local_networks"):
            local = self.site.local_mask(rows["src_ip_hi"], rows["src_ip_lo"])
        else:
            local = _in_networks(rows["src_ip_hi"], rows["src_ip_lo"], self.networks)
        rows.update(verdict=verdict, group=group, local=local,
                    fp=batch["fingerprint"][sel], count=np.ones(len(sel), dtype=np.int64),
                    folded=np.zeros(len(sel), dtype=bool), targets=np.zeros(len(sel), dtype=np.int64),
                    first_ns=batch["ts_ns"][sel], last_ns=batch["ts_ns"][sel],
                    first_frame=batch["frame"][sel], last_frame=batch["frame"][sel])
        rows["key"] = _row_key(rows)
        self.rows = _combine(self.rows, rows)
        self._bound()

    def _bound(self) -> None:
        if len(self.rows["key"]) <= MAX_ROWS:
            return
        rows = self.rows
        rows["fp"] = np.where(rows["count"] == 1, np.uint64(0), rows["fp"])
        self.rows = self._rekey(rows)
        if len(self.rows["key"]) <= MAX_ROWS:
            return
        rows = self.rows
        fold = (rows["fp"] == 0) & ~rows["folded"]
        rows["targets"] = np.where(fold, 1, rows["targets"])
        rows["folded"] = rows["folded"] | fold
        for name in ("dest_ip_hi", "dest_ip_lo", "dest_mac"):
            rows[name] = np.where(fold, np.uint64(0), rows[name])
        self.rows = self._rekey(rows)

    @staticmethod
    def _rekey(rows: dict) -> dict:
        rows["key"] = _row_key(rows)
        return _combine(rows, {name: col[:0] for name, col in rows.items()})

    def merge(self, other: RipTrigger) -> RipTrigger:
        check_merge(self, other)
        self.rows = _combine(self.rows, other.rows)
        self._bound()
        return self

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        rows = self.rows
        if len(rows["key"]) == 0:
            return []
        loops = {f.evidence.get("fingerprint"): f for f in ctx.findings.get(ECHO_LOOP, [])}
        order, starts, counts = group_by(mix64(rows["src_ip_hi"], rows["src_ip_lo"]))
        out = []
        for start, count in zip(starts.tolist(), counts.tolist()):
            out.append(self._source_finding(order[start:start + count], loops))
        return out

    def _source_finding(self, idx: np.ndarray, loops: dict) -> Finding:
        rows = {name: col[idx] for name, col in self.rows.items()}
        first = int(np.argmin(rows["first_ns"]))
        src = ip_text(rows["src_ip_hi"][first], rows["src_ip_lo"][first])
        fps = [f"{int(v):016x}" for v in rows["fp"]]
        linked = [i for i, fp in enumerate(fps) if fp in loops]
        # only a loop repeats the probe; an identical-frame flood is the source sending it again and again
        looping = [i for i in linked if loops[fps[i]].evidence.get("loop")]
        # a looping frame is one probe, however many copies the loop made of it
        probes = rows["count"].copy()
        probes[looping] = 1
        last_ns = rows["last_ns"].copy()
        last_ns[looping] = rows["first_ns"][looping]
        n = int(probes.sum())
        # targets in the order the source reached them; folded rows only count theirs
        by_time = np.argsort(rows["first_ns"], kind="stable")
        by_time = by_time[~rows["folded"][by_time]]
        targets = np.unique(mix64(rows["dest_ip_hi"], rows["dest_ip_lo"])[by_time], return_index=True)[1]
        target_list = [ip_text(rows["dest_ip_hi"][t], rows["dest_ip_lo"][t]) for t in by_time[np.sort(targets)]]
        target_count = len(target_list) + int(rows["targets"].sum())
        ports = sorted(set(rows["dest_port"].tolist()))
        verdicts: dict[str, int] = {}
        for code, c in zip(rows["verdict"].tolist(), probes.tolist()):
            verdicts[VERDICTS[code]] = verdicts.get(VERDICTS[code], 0) + c
        malformed = rows["verdict"] != VALID
        # a local router's broken entries to the RIP group: a faulty speaker, not a scanner
        faulty = malformed & rows["group"] & rows["local"] & np.isin(rows["verdict"], SPEAKER_FAULTS)
        outside = ~rows["group"] & ~rows["local"]
        sweep = target_count >= self.params["many_targets_count"]
        problems = []
        if (malformed & ~faulty).any():
            problems.append(", ".join(sorted({VERDICTS[c] for c in rows["verdict"][malformed & ~faulty].tolist()})))
        if outside.any():
            problems.append("unicast from outside the local networks")
        if sweep:
            problems.append(f"{target_count:,} targets")
        related = []
        for i in linked:
            loop = loops[fps[i]]
            related.append({"rule": loop.rule, "fingerprint": fps[i], "severity": loop.severity,
                            "copies": loop.n, "loop": bool(loop.evidence.get("loop"))})
            back = {"rule": self.rule_id, "fingerprint": fps[i], "src_ip": src,
                    "first_frame": int(rows["first_frame"][i])}
            if back not in loop.evidence.setdefault("related", []):
                loop.evidence["related"].append(back)
        if looping:
            worst = max(SEVERITY_RANK[loops[fps[i]].severity] for i in looping)
            severity = "critical" if worst >= SEVERITY_RANK["high"] else "high"
        elif problems:
            severity = self.rule.severity
        elif faulty.any():
            severity = "low"
        else:
            severity = "info"
        t0, t1 = int(rows["first_ns"].min()), int(last_ns.max())
        port_text = "/".join(str(p) for p in ports)
        shown = ", ".join(target_list[:3]) + (", ..." if target_count > 3 else "")
        version = "RIPng" if RIPNG_PORT in ports else "RIP"
        if severity == "info":
            msg = (f"{version} speaker {src}: {n:,} well-formed messages to UDP {port_text} of "
                   f"{plural(target_count, 'destination')} ({shown})")
        elif severity == "low":
            bad = int(probes[faulty].sum())
            faults = ", ".join(sorted({VERDICTS[c] for c in rows["verdict"][faulty].tolist()}))
            msg = (f"{version} speaker {src} (a local address sending to the routers' group or broadcast "
                   f"address): {bad:,} of {n:,} messages to UDP {port_text} malformed ({faults}); a faulty or "
                   f"misconfigured router rather than a probe")
        else:
            msg = (f"{src} sent {plural(n, 'probe')} to UDP {port_text} of {plural(target_count, 'host')} ({shown}) "
                   f"in {(t1 - t0) / 1e9:.3f} s: {'; '.join(problems) or 'well-formed'}")
            if looping:
                copies = sum(loops[fps[i]].n for i in looping)
                msg += f"; the probe's frame is the one looping ({copies:,} copies, {ECHO_LOOP})"
            elif linked:
                msg += f"; the probe's frame is repeated as an identical-frame flood, not a loop ({ECHO_LOOP})"
        fields = {"src_ip": src, "proto": "UDP"}
        if target_count == 1 and target_list:
            fields.update(dest_ip=target_list[0], dest_port=ports[0] if len(ports) == 1 else None,
                          src_port=int(rows["src_port"][first]))
            if len(ports) == 1:
                fields["community_id"] = community_id(src, target_list[0], 17, fields["src_port"], ports[0])
        if rows["layers"][first] & L_SRC_MAC:
            fields["src_mac"] = mac_to_str(rows["src_mac"][first])
        if target_count == 1 and target_list and rows["layers"][first] & L_DST_MAC:
            fields["dest_mac"] = mac_to_str(rows["dest_mac"][first])
        frames = np.unique(np.concatenate([rows["first_frame"], rows["last_frame"]]))
        evidence = {
            "probes": n, "targets": target_count, "target_ips": target_list[:TARGETS_LISTED],
            "dest_ports": ports, "verdicts": verdicts,
            "to_rip_group": bool(rows["group"].any()), "source_local": bool(rows["local"][first]),
            "ttl": int(rows["ttl"][first]), "payload_bytes": int(rows["payload_len"][first]),
            "fingerprint": fps[first], "evidence_frames": evidence_frames(frames),
        }
        if related:
            evidence["related"] = related
        return self.finding(severity, msg, identifier=src, first_seen=t0, last_seen=t1, n=n, evidence=evidence,
                            **{k: v for k, v in fields.items() if v is not None})

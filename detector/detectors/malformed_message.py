"""malformed-message: control-plane messages that break their own protocol, one finding per sender and protocol.

A VRRP advertisement shorter than its header, an OSPF packet whose length
field runs past its IP packet, a RIP route of metric 268,435,457, a DHCP
option longer than the message, a Neighbor Discovery option of length 0:
every receiver drops such a message, or the part of it at fault (RFC 3768
section 7.1, RFC 5798 section 7.1, RFC 2328 section 8.2, RFC 2453 section
3.9.2, RFC 4861 sections 4.6 and 6.1.2, RFC 2131, RFC 8415), so it changes
nothing on the link. It is a fact about its sender (a broken implementation,
a fuzzer, a crafted denial-of-service packet) or about the path and the
capture (bit errors, a damaged trace), never an incident of its own: at most
low, and CONTEXT_ONLY: it joins an incident it shares an entity with and
forms none alone. The rules of each protocol judge the well-formed messages
and leave the malformed ones to this one place.

What is wrong comes from the application tables (detector.decode.app):
each table's `fault` column holds one bit per reason, worded as Wireshark's
expert information words it ("Bad checksum", "End option missing", ...),
judged against the message's own length fields and the length its IP
header gives it, never against the end of the captured bytes. A message the
snapshot length cut short is therefore not malformed for being cut; its
sender's finding counts such messages apart ("cut by the snapshot length,
judged on what was captured"), and a sender whose messages were only cut
gets no finding. Not judged at all:

- an IP fragment (no reassembly here: its lengths are the fragment's);
- RIP and RIPng, DHCPv4 and DHCPv6 datagrams that do not come from the
  protocol's own port (520, 521, 67/68, 546/547): a speaker sends from it,
  while a datagram from elsewhere to the port is a probe, judged by the
  probe rules (seed 001's trigger was a zero-filled one);
- a RIP port over the other IP version (not RIP at all).

Per sender (protocol; link: interface and VLANs; source address and MAC)
one finding: how many of its messages were malformed out of how many,
each reason with its count and first frame, the time span, the TTL or hop
limit where the protocol demands 255 (VRRP, CARP, RIPng, Neighbor
Discovery: another one says the message came from off the link), and the
first and last malformed frames as evidence.

State (mergeable; counts add up): one row per sender of every judged
message (messages, snapshot cuts), one per sender of malformed ones, one
per (sender, reason), and each sender's first and last malformed frames;
each bounded (the senders of malformed messages are kept first, then the
earliest), what is left out counted.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..decode import app
from ..decode.addr import mac_to_str
from ..decode.app import dhcp4, dhcp6, nd, ospf, rip, vrrp
from ..detect.columns import ip_text
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.grouping import group_by
from ..detect.hashing import mix64
from ..detect.links import link_text, links_of
from ..detect.state import empty_table, fold_rows, take_rows
from ..findings import Finding, iso_time
from ..rules import ALERT_SECONDS, Param
from ..schema import L_DST_MAC, L_FRAG, L_SRC_MAC, PacketBatch
from ..units import NS, plural

# the protocols judged (`proto` of a row): name, the table's reasons, whether the protocol demands TTL 255
P_VRRP, P_CARP, P_RIP, P_RIPNG, P_OSPF, P_OSPFV2, P_OSPFV3, P_DHCP4, P_DHCP6, P_ND = range(1, 11)
PROTOCOLS = {
    P_VRRP: ("VRRP", vrrp.FAULTS, True),          # RFC 3768 section 7.1, RFC 5798 section 7.1
    P_CARP: ("CARP", vrrp.FAULTS, True),          # OpenBSD CARP_DFLTTL
    P_RIP: ("RIP", rip.FAULTS, False),
    P_RIPNG: ("RIPng", rip.FAULTS, True),         # RFC 2080 section 2.4.2
    P_OSPF: ("OSPF", ospf.FAULTS, False),         # a version neither 2 nor 3
    P_OSPFV2: ("OSPFv2", ospf.FAULTS, False),
    P_OSPFV3: ("OSPFv3", ospf.FAULTS, False),
    P_DHCP4: ("DHCPv4", dhcp4.FAULTS, False),
    P_DHCP6: ("DHCPv6", dhcp6.FAULTS, False),
    P_ND: ("Neighbor Discovery", nd.FAULTS, True),  # RFC 4861 sections 6.1, 7.1
}
# EVE's proto of a finding, per protocol
EVE_PROTO = {P_VRRP: "VRRP", P_CARP: "CARP", P_RIP: "UDP", P_RIPNG: "UDP", P_OSPF: "OSPF", P_OSPFV2: "OSPF",
             P_OSPFV3: "OSPF", P_DHCP4: "UDP", P_DHCP6: "UDP", P_ND: "IPv6-ICMP"}
LINK_TTL = 255
FAULT_BITS = 16                     # the tables' fault columns use at most this many bits

# A malformed message changes nothing on the link: its finding describes a sender or the capture, at most low.
SEVERITY = "low"
# Senders kept: a link has a few speakers of each protocol, a DHCP network some thousand clients; a flood of
# forged senders keeps the senders of malformed messages first, then the earliest, and counts the others.
MAX_SENDERS = 65_536
MAX_BAD_SENDERS = 16_384
# Findings one by one: the senders of malformed messages first heard; a fuzzed capture's thousands of random
# senders end in one count on the last finding.
MAX_FINDINGS = 1024
# Malformed frames kept per sender for its evidence: the first and last this many (the first frame of each
# reason is added)
FRAMES_AT_EACH_END = 16
REASONS_LISTED = 6

NEVER, NEVER_LAST = np.iinfo(np.int64).max, -1

TOTAL_COLUMNS = {"key": np.uint64, "messages": np.int64, "cut": np.int64, "first_ns": np.int64}
TOTAL_REDUCE = {"messages": np.add, "cut": np.add}
BAD_COLUMNS = {
    "key": np.uint64, "proto": np.uint8, "link": np.uint64, "src_ip_hi": np.uint64, "src_ip_lo": np.uint64,
    "src_mac": np.uint64, "has_mac": np.bool_, "dst_ip_hi": np.uint64, "dst_ip_lo": np.uint64,
    "dst_mac": np.uint64, "has_dst_mac": np.bool_, "faults": np.uint32, "count": np.int64, "cut": np.int64,
    "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64, "last_frame": np.int64,
    "ttl_min": np.uint8, "ttl_max": np.uint8,
}
BAD_REDUCE = {"faults": np.bitwise_or, "count": np.add, "cut": np.add, "last_ns": np.maximum,
              "first_frame": np.minimum, "last_frame": np.maximum, "ttl_min": np.minimum, "ttl_max": np.maximum}
REASON_COLUMNS = {"key": np.uint64, "sender": np.uint64, "bit": np.uint8, "count": np.int64, "first_ns": np.int64,
                  "first_frame": np.int64}
REASON_REDUCE = {"count": np.add, "first_frame": np.minimum}


def _typed(rows: dict, columns: dict) -> dict:
    return {name: np.asarray(rows[name]).astype(dtype) for name, dtype in columns.items()}


def _bounded(rows: dict, limit: int, keep_first: np.ndarray | None = None) -> tuple[dict, int]:
    """At most `limit` rows: those of `keep_first` (a mask) first, then the earliest; and how many were dropped."""
    extra = len(rows["key"]) - limit
    if extra <= 0:
        return rows, 0
    first = np.zeros(len(rows["key"]), dtype=bool) if keep_first is None else keep_first
    keep = np.sort(np.lexsort((rows["first_ns"], ~first))[:limit])
    return take_rows(rows, keep), extra


def _frame_ends(keys: np.ndarray, frames: np.ndarray) -> dict:
    """The first and last FRAMES_AT_EACH_END frames of each key, as a table of (key, frame) rows."""
    order = np.lexsort((frames, keys))
    keys, frames = keys[order], frames[order]
    _, starts, counts = group_by(keys)
    group = np.repeat(np.arange(len(starts)), counts)
    rank = np.arange(len(keys)) - starts[group]
    keep = (rank < FRAMES_AT_EACH_END) | (rank >= counts[group] - FRAMES_AT_EACH_END)
    return {"key": keys[keep], "frame": frames[keep]}


def _from_port(batch: PacketBatch, rows: np.ndarray, ports) -> np.ndarray:
    """Which rows were sent from one of the protocol's own `ports`."""
    return np.isin(batch["src_port"][rows], ports)


@register
class MalformedMessage(Detector):
    rule_id = "malformed-message"
    EVE_SIGNATURE = (9, "Generic Protocol Command Decode")
    APP_TABLES = ("vrrp", "rip", "ospf", "dhcp4", "dhcp6", "nd")
    # a malformed message describes its sender or the capture: it joins an incident about the same entity
    CONTEXT_ONLY: ClassVar[bool] = True
    # it reads message bodies: a capture cut by its snapshot length shows less of them
    QUALITY_NEEDS: ClassVar[frozenset[str]] = frozenset({"payload"})
    ALERTS = {
        "suppress_s": Param(float, 300.0, "least seconds between two events about one sender", ALERT_SECONDS,
                            "A broken sender repeats its malformed message with every advertisement; shorter "
                            "intervals repeat the same fact in alerts.jsonl."),
        "resolve_s": Param(float, 600.0, "seconds without a malformed message from the sender before it is "
                                         "resolved", ALERT_SECONDS,
                           "Routers advertise every 1 to 30 s; a sender quiet this long has stopped or been "
                           "fixed."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.totals = empty_table(TOTAL_COLUMNS)
        self.bad = empty_table(BAD_COLUMNS)
        self.reasons = empty_table(REASON_COLUMNS)
        self.frames = {"key": np.zeros(0, dtype=np.uint64), "frame": np.zeros(0, dtype=np.int64)}
        self.dropped = {"senders": 0, "malformed_senders": 0}

    # ---- update -----------------------------------------------------------
    def _messages(self, batch: PacketBatch):
        """(rows, protocol, fault) of the messages judged in `batch`, every table's."""
        parts = []
        tab = app.table(batch, "vrrp")
        parts.append((tab["row"], np.where(tab["carp"] == 1, P_CARP, P_VRRP), tab["fault"]))
        tab = app.table(batch, "rip")
        ng = tab["kind"] == rip.KIND_RIPNG
        own = np.where(ng, _from_port(batch, tab["row"], (rip.RIPNG_PORT,)),
                       _from_port(batch, tab["row"], (rip.RIP_PORT,)))
        keep = own & (tab["kind"] != rip.KIND_WRONG_FAMILY)
        parts.append((tab["row"][keep], np.where(ng, P_RIPNG, P_RIP)[keep], tab["fault"][keep]))
        tab = app.table(batch, "ospf")
        version = np.where(tab.valid("version"), tab["version"], 0)
        parts.append((tab["row"], np.where(version == 2, P_OSPFV2, np.where(version == 3, P_OSPFV3, P_OSPF)),
                      tab["fault"]))
        tab = app.table(batch, "dhcp4")
        keep = _from_port(batch, tab["row"], (dhcp4.SERVER_PORT, dhcp4.CLIENT_PORT))
        parts.append((tab["row"][keep], np.full(int(keep.sum()), P_DHCP4), tab["fault"][keep]))
        tab = app.table(batch, "dhcp6")
        keep = _from_port(batch, tab["row"], (dhcp6.SERVER_PORT, dhcp6.CLIENT_PORT))
        parts.append((tab["row"][keep], np.full(int(keep.sum()), P_DHCP6), tab["fault"][keep]))
        tab = app.table(batch, "nd")
        parts.append((tab["row"], np.full(len(tab), P_ND), tab["fault"]))
        rows = np.concatenate([p[0] for p in parts]).astype(np.int64)
        proto = np.concatenate([p[1] for p in parts]).astype(np.uint8)
        fault = np.concatenate([p[2] for p in parts]).astype(np.uint32)
        # a fragment's lengths are the fragment's: no reassembly here, so no judgement
        whole = (batch["layers"][rows] & np.uint32(L_FRAG)) == 0
        return rows[whole], proto[whole], fault[whole]

    def update(self, batch: PacketBatch) -> None:
        rows, proto, fault = self._messages(batch)
        if len(rows) == 0:
            return
        layers = batch["layers"][rows]
        has_mac = (layers & np.uint32(L_SRC_MAC)) != 0
        mac = np.where(has_mac, batch["src_mac"][rows], 0).astype(np.uint64)
        link = links_of(batch, rows)
        src_hi, src_lo = batch["src_ip_hi"][rows], batch["src_ip_lo"][rows]
        key = mix64(proto, link, src_hi, src_lo, mac)
        ts, frame = batch["ts_ns"][rows], batch["frame"][rows]
        # cut by the snapshot length: the frame was, and its IP packet (which holds the message) with it
        caplen = batch["caplen"][rows].astype(np.int64)
        ip_end = batch["l3_off"][rows].astype(np.int64) + batch["ip_len"][rows].astype(np.int64)
        cut = (caplen < batch["wirelen"][rows]) & (caplen < ip_end)
        totals = {"key": key, "messages": np.ones(len(rows), dtype=np.int64), "cut": cut, "first_ns": ts}
        self.totals = fold_rows(self.totals, _typed(totals, TOTAL_COLUMNS), "key", TOTAL_REDUCE)
        bad = np.flatnonzero(fault != 0)
        if len(bad):
            r = rows[bad]
            has_dst = (layers[bad] & np.uint32(L_DST_MAC)) != 0
            new = {"key": key[bad], "proto": proto[bad], "link": link[bad], "src_ip_hi": src_hi[bad],
                   "src_ip_lo": src_lo[bad], "src_mac": mac[bad], "has_mac": has_mac[bad],
                   "dst_ip_hi": batch["dest_ip_hi"][r], "dst_ip_lo": batch["dest_ip_lo"][r],
                   "dst_mac": np.where(has_dst, batch["dest_mac"][r], 0), "has_dst_mac": has_dst,
                   "faults": fault[bad], "count": np.ones(len(bad), dtype=np.int64), "cut": cut[bad],
                   "first_ns": ts[bad], "last_ns": ts[bad], "first_frame": frame[bad], "last_frame": frame[bad],
                   "ttl_min": batch["ttl"][r], "ttl_max": batch["ttl"][r]}
            self.bad = fold_rows(self.bad, _typed(new, BAD_COLUMNS), "key", BAD_REDUCE)
            for bit in range(FAULT_BITS):
                mine = bad[(fault[bad] & np.uint32(1 << bit)) != 0]
                if len(mine) == 0:
                    continue
                reasons = {"key": mix64(key[mine], np.full(len(mine), bit)), "sender": key[mine],
                           "bit": np.full(len(mine), bit), "count": np.ones(len(mine), dtype=np.int64),
                           "first_ns": ts[mine], "first_frame": frame[mine]}
                self.reasons = fold_rows(self.reasons, _typed(reasons, REASON_COLUMNS), "key", REASON_REDUCE)
            self.frames = _frame_ends(np.concatenate([self.frames["key"], key[bad]]),
                                      np.concatenate([self.frames["frame"], frame[bad].astype(np.int64)]))
        self._bound()

    def _bound(self) -> None:
        """Keep every table within its bound, the senders of malformed messages first."""
        self.bad, dropped = _bounded(self.bad, MAX_BAD_SENDERS)
        self.dropped["malformed_senders"] += dropped
        if dropped:
            self.reasons = take_rows(self.reasons, np.isin(self.reasons["sender"], self.bad["key"]))
            self.frames = take_rows(self.frames, np.isin(self.frames["key"], self.bad["key"]))
        if len(self.totals["key"]) > MAX_SENDERS:
            self.totals, dropped = _bounded(self.totals, MAX_SENDERS, np.isin(self.totals["key"], self.bad["key"]))
            self.dropped["senders"] += dropped

    def merge(self, other: MalformedMessage) -> MalformedMessage:
        check_merge(self, other)
        self.totals = fold_rows(self.totals, other.totals, "key", TOTAL_REDUCE)
        self.bad = fold_rows(self.bad, other.bad, "key", BAD_REDUCE)
        self.reasons = fold_rows(self.reasons, other.reasons, "key", REASON_REDUCE)
        self.frames = _frame_ends(np.concatenate([self.frames["key"], other.frames["key"]]),
                                  np.concatenate([self.frames["frame"], other.frames["frame"]]))
        for name, count in other.dropped.items():
            self.dropped[name] += count
        self._bound()
        return self

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        bad = self.bad
        if len(bad["key"]) == 0:
            return []
        totals = dict(zip(self.totals["key"].tolist(), zip(self.totals["messages"].tolist(),
                                                            self.totals["cut"].tolist())))
        order, starts, counts = group_by(self.reasons["sender"])
        reasons_of = {int(self.reasons["sender"][order[a]]): order[a:a + c]
                      for a, c in zip(starts.tolist(), counts.tolist())}
        order, starts, counts = group_by(self.frames["key"])
        frames_of = {int(self.frames["key"][order[a]]): self.frames["frame"][order[a:a + c]]
                     for a, c in zip(starts.tolist(), counts.tolist())}
        senders = np.argsort(bad["first_ns"], kind="stable")
        out = [self._finding(int(k), totals, reasons_of, frames_of) for k in senders[:MAX_FINDINGS]]
        unreported = max(0, len(senders) - MAX_FINDINGS) + self.dropped["malformed_senders"]
        if unreported > 0:
            out[-1].msg += f". {unreported:,} more senders of malformed messages are not reported one by one"
            out[-1].evidence["senders_not_reported"] = unreported
        return out

    def _finding(self, k: int, totals: dict, reasons_of: dict, frames_of: dict) -> Finding:
        b = self.bad
        key = int(b["key"][k])
        proto = int(b["proto"][k])
        name, texts, link_only = PROTOCOLS[proto]
        ip, dst = ip_text(b["src_ip_hi"][k], b["src_ip_lo"][k]), ip_text(b["dst_ip_hi"][k], b["dst_ip_lo"][k])
        mac = mac_to_str(int(b["src_mac"][k])) if b["has_mac"][k] else None
        dst_mac = mac_to_str(int(b["dst_mac"][k])) if b["has_dst_mac"][k] else None
        where = link_text(int(b["link"][k]))
        count, first, last = int(b["count"][k]), int(b["first_ns"][k]), int(b["last_ns"][k])
        messages, cut = totals.get(key, (count, int(b["cut"][k])))
        messages = max(messages, count)
        rows = reasons_of.get(key, np.zeros(0, dtype=np.int64))
        rows = rows[np.lexsort((self.reasons["bit"][rows], -self.reasons["count"][rows]))]
        reasons = [{"reason": texts[1 << int(self.reasons["bit"][r])], "count": int(self.reasons["count"][r]),
                    "first_frame": int(self.reasons["first_frame"][r])} for r in rows.tolist()]
        listing = "; ".join(f"{r['reason']} ({r['count']:,})" for r in reasons[:REASONS_LISTED])
        if len(reasons) > REASONS_LISTED:
            listing += f"; +{len(reasons) - REASONS_LISTED} more reasons"
        who = ip + (f" ({mac})" if mac else "")
        target = dst + (f" ({dst_mac})" if dst_mac else "")
        span = f"at {iso_time(first)}" if last == first else f"over {(last - first) / NS:,.1f} s from {iso_time(first)}"
        ttl = sorted({int(b["ttl_min"][k]), int(b["ttl_max"][k])})
        msg = (f"{name} from {who} to {target}{' on ' + where if where else ''}: {count:,} of "
               f"{plural(messages, 'message')} malformed {span}: {listing}. Receivers drop such a message (or the part "
               f"of it at fault): it changes nothing on the link, and comes from a broken or crafted sender, or from "
               f"damage on the way")
        if link_only and ttl != [LINK_TTL]:
            msg += (f". Sent with {'hop limit' if proto in (P_RIPNG, P_ND) else 'TTL'} "
                    f"{'/'.join(map(str, ttl))} where {name} requires {LINK_TTL}: not from the link")
        if cut:
            msg += f". {cut:,} of its messages were cut by the snapshot length and judged on what was captured"
        kept = frames_of.get(key, np.zeros(0, dtype=np.int64))
        frames = np.unique(np.concatenate([kept, [r["first_frame"] for r in reasons]]).astype(np.int64))
        listed = evidence_frames(frames)
        evidence = {"protocol": name, "sender": ip, "messages": messages, "malformed": count,
                    "reasons": reasons, "ttl": ttl, "destination": dst, "evidence_frames": listed,
                    "frames_not_listed": max(0, count - len(listed))}
        if cut:
            evidence["cut_by_snaplen"] = cut
        if where:
            evidence["link"] = where
        if self.dropped["senders"]:
            evidence["senders_not_counted"] = self.dropped["senders"]
        fields = {"src_ip": ip, "dest_ip": dst, "proto": EVE_PROTO[proto]}
        if mac:
            fields["src_mac"] = mac
        if dst_mac:
            fields["dest_mac"] = dst_mac
        return self.finding(SEVERITY, msg, identifier=f"{name} {ip}" + (f" {mac}" if mac else "")
                            + (f" {where}" if where else ""), first_seen=first, last_seen=last, n=count,
                            evidence=evidence, **fields)

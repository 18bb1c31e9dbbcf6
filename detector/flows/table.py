"""FlowTable: decoded packet batches in, Zeek-like connection records out (mergeable state).

Per batch, with no Python loop over packets:
 1. every IP packet gets a direction-independent key (keys.py) and its 64-bit hash;
 2. one compiled pass (kernel.update_flows) takes the packets in capture
    order, finds each key's open flow in an open-addressing hash table (full
    key verified), and aggregates the packet into it, first finishing it and
    starting a new one on an idle gap longer than the timeout or on a new
    connection's SYN.
Open flows stay in place between batches (no per-batch sort or reallocation);
finished ones are appended to a second arena. The compiled parts release the
GIL, so decoding can run in another thread.
Open flows idle past their timeout are finished after every batch, so memory
is O(open flows) plus the finished flow records, never O(packets).

Hash collisions are checked, not assumed away: where two different keys share
a hash (or keys crowd one probe run), the table is rehashed with another seed
and the pass resumes at that packet.

Timeouts (`IDLE_TIMEOUT_S`) follow Zeek's inactivity timeouts: TCP 5 min,
UDP 1 min, ICMP 1 min, other IP protocols 1 min. A longer gap splits a flow.
There is no active (maximum-duration) timeout: like Zeek, a connection that
keeps talking stays one flow however long it lasts.

TCP port reuse: a SYN without ACK starts a new flow when the flow already has
a SYN from that side with another sequence number (Zeek's connection reuse),
or when the flow has ended (a RST, or FINs from both sides) and that side sent
no SYN yet. A SYN retransmission — same sequence number — never splits.

Fragments: non-first IP fragments carry no ports. They join the flow of their
first fragment, matched by (addresses, protocol, IP identification), when that
first fragment came in the same batch or within FRAGMENT_TIMEOUT_S before
(at most MAX_RECENT_FRAGMENTS remembered); otherwise they form a port-0 flow.
Each fragment counts as one packet (Zeek, which reassembles, counts one per
datagram). Packets without an IP header are not flows; `non_ip_packets`
counts them.

802.11 A-MSDUs: each subframe is a packet of its own flow (decode.expand_msdus), as
Zeek counts them; `packets` still counts records.

Tunnels: a decapsulated packet counts in its inner flow. When the outermost
carrier is UDP (VXLAN, Geneve, Teredo, GTP, AYIYA), the packet also counts in
the carrier's UDP flow, as Zeek logs both; the carrier's IP length is
estimated from the inner one and the link header (the schema keeps no outer
IP length).
"""
from __future__ import annotations

import re

import numpy as np

from ..schema import (IP, L_FRAG, L_IP4, L_PAYLOAD, L_TUNNEL, L_VLAN, PROTO_NAMES, PROTO_SCTP,
                      PROTO_TCP, PROTO_UDP, TH_ACK, TH_CWR, TH_ECE, TH_FIN, TH_NS,
                      TH_PSH, TH_RST, TH_SYN, TH_URG, PacketBatch)
from . import keys as K_
from . import kernel as k
from ..decode import expand_msdus
from ..decode.addr import ip_text_codes
from ..text import TextCodes
from ..units import NS
from .community_id import community_id_codes

# Idle timeouts in seconds, per protocol name; "other" covers every other IP protocol.
IDLE_TIMEOUT_S = {"tcp": 300.0, "udp": 60.0, "icmp": 60.0, "icmpv6": 60.0, "other": 60.0}
# Open flows are finished once idle for their timeout plus this slack, measured
# from the newest packet seen: the slack tolerates capture-order disorder (e.g.
# merged captures) of up to this much without splitting a flow.
EXPIRY_SLACK_S = 60.0
# Linux keeps fragments for reassembly 30 s (ipfrag_time); RFC 791 suggests 15 s.
FRAGMENT_TIMEOUT_S = 30.0
MAX_RECENT_FRAGMENTS = 1 << 16
# How often (capture time) idle flows are looked for: memory, not results, depends on it.
EXPIRY_INTERVAL_S = 10.0
# Hash table slots of an empty table (a power of two; the table doubles to stay at most half full).
MIN_TABLE_SLOTS = 1 << 10

# Column contract of finish(): name -> dtype (object = Python strings).
FLOW_COLUMNS: dict[str, type] = {
    "src_ip_hi": np.uint64, "src_ip_lo": np.uint64, "src_port": np.uint16,
    "dest_ip_hi": np.uint64, "dest_ip_lo": np.uint64, "dest_port": np.uint16,
    "proto": np.uint8, "ip_version": np.uint8, "community_id": object,
    "first_seen": np.int64, "last_seen": np.int64, "duration_s": np.float64,
    "src2dst_packets": np.int64, "dst2src_packets": np.int64,
    "src2dst_bytes": np.int64, "dst2src_bytes": np.int64,
    "src2dst_payload_bytes": np.int64, "dst2src_payload_bytes": np.int64,
    "src2dst_tcp_flags": np.uint16, "dst2src_tcp_flags": np.uint16,
    "src_mss": np.uint16, "dest_mss": np.uint16,
    "src2dst_max_payload_bytes": np.int64, "dst2src_max_payload_bytes": np.int64,
    "src2dst_retransmits": np.int64, "dst2src_retransmits": np.int64,
    "handshake_rtt_ms": np.float64, "state": object, "history": object,
    "vlan": np.uint16, "first_frame": np.int64,
}

# Letters of the TCP flag strings in the DataFrame view, "SAF" style.
FLAG_LETTERS = ((TH_SYN, "S"), (TH_ACK, "A"), (TH_FIN, "F"), (TH_RST, "R"), (TH_PSH, "P"),
                (TH_URG, "U"), (TH_ECE, "E"), (TH_CWR, "C"), (TH_NS, "N"))
# Zeek's RSTOS0 test on the history: originator SYN, then its RST, nothing in between
RSTOS0_HISTORY = re.compile(r"\^?S[^HAFGIQ]*R.*")


def _timeouts_ns(idle_timeout_s) -> np.ndarray:
    spec = dict(IDLE_TIMEOUT_S)
    if isinstance(idle_timeout_s, (int, float)):
        spec = {name: float(idle_timeout_s) for name in spec}
    elif idle_timeout_s is not None:
        unknown = set(idle_timeout_s) - set(spec)
        if unknown:
            raise ValueError(f"unknown protocol in idle_timeout_s: {sorted(unknown)}")
        spec.update({name: float(v) for name, v in idle_timeout_s.items()})
    if min(spec.values()) <= 0:
        raise ValueError("idle timeouts must be positive")
    table = np.full(256, int(spec["other"] * NS), dtype=np.int64)
    for number, name in PROTO_NAMES.items():
        table[number] = int(spec[name] * NS)
    return table


def _empty(rows: int = 0):
    return (np.zeros((rows, k.NF), np.int64), np.zeros((rows, k.HIST_MAX), np.uint8),
            np.zeros((rows, K_.KEY_WIDTH), np.uint64))


def _grown(arrays, rows: int, capacity: int):
    """The arrays with room for `capacity` rows, their first `rows` rows kept."""
    out = []
    for a in arrays:
        b = np.empty((capacity,) + a.shape[1:], a.dtype)
        b[:rows] = a[:rows]
        out.append(b)
    return tuple(out)


class FlowTable:
    """Streaming, mergeable flow table. update(batch) per PacketBatch; finish() or to_frame() at the end."""

    needs_fingerprint = False   # the engine skips hashing frames when no consumer needs it

    def __init__(self, idle_timeout_s=None):
        self.idle_timeout_s = idle_timeout_s
        self._timeout_ns = _timeouts_ns(idle_timeout_s)
        self._seed = 0
        # open flows: rows [0, counts[C_OPEN]) of the open arena, found through the hash table
        self._OF, self._OH, self._OK = _empty()
        self._tab_row, self._tab_h = np.full(MIN_TABLE_SLOTS, -1, np.int64), np.zeros(MIN_TABLE_SLOTS, np.uint64)
        # finished flows: rows [0, counts[C_DONE]) of the done arena
        self._DF, self._DH, self._DK = _empty()
        self._counts = np.zeros(3, np.int64)
        self._frag = (np.zeros(0, np.uint64), np.zeros(0, np.uint16), np.zeros(0, np.uint16),
                      np.zeros(0, np.int64))
        self._newest_ns: int | None = None
        self._expired_ns = 0
        self.packets = 0
        self.non_ip_packets = 0

    # ---- batches ---------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        """Add one decoded batch (batches in capture order)."""
        n = len(batch)
        if n == 0:
            return
        self.packets += n
        self.non_ip_packets += n - int(np.count_nonzero(batch["layers"] & np.uint32(IP)))
        batch = expand_msdus(batch)
        layers = batch["layers"]
        n_ip = int(np.count_nonzero(layers & np.uint32(IP)))
        carrier = self._carrier_packets(batch)
        n_flow = n_ip + (len(carrier[0]) if carrier is not None else 0)
        if n_flow == 0:
            return
        self._reserve(n_flow)
        self._counts[k.C_NEWEST] = k.NO_TIME
        if n_ip:
            sport, dport = K_.transport_ports(layers, batch["proto"], batch["src_port"], batch["dest_port"],
                                              batch["icmp_type"], batch["icmp_code"])
            self._attach_fragments(batch, sport, dport)
            self._run(batch["src_ip_hi"], batch["src_ip_lo"], batch["dest_ip_hi"], batch["dest_ip_lo"], sport, dport,
                      batch["proto"], layers, batch["ts_ns"], batch["frame"], batch["tcp_flags"], batch["tcp_seq"],
                      batch["tcp_mss"], batch["payload_len"], batch["ip_len"], batch["vlan_outer"],
                      batch["ip_version"])
        if carrier is not None:
            self._run(*carrier)
        newest = int(self._counts[k.C_NEWEST])
        self._newest_ns = newest if self._newest_ns is None else max(self._newest_ns, newest)
        self._expire()

    def _run(self, src_hi, src_lo, dst_hi, dst_lo, sport, dport, proto, layers, ts_ns, frame, tcp_flags, tcp_seq,
             tcp_mss, payload_len, ip_len, vlan, ip_version) -> None:
        """One compiled pass over the packets, resumed after a rehash."""
        K, from_a = K_.canonical_keys(src_hi, src_lo, dst_hi, dst_lo, sport, dport, proto)
        at = 0
        while True:
            h = K_.hash_rows(K, self._seed)
            at = k.update_flows(at, K, h, from_a, layers, ts_ns, frame, tcp_flags, tcp_seq, tcp_mss, payload_len,
                                ip_len, vlan, ip_version, self._timeout_ns, K_.SERVER_PORT, self._tab_row,
                                self._tab_h, self._OF, self._OH, self._OK, self._DF, self._DH, self._DK,
                                self._counts)
            if at == len(K):
                return
            self._rehash()

    def _reserve(self, packets: int) -> None:
        """Room for each packet to start one open flow and finish one, and a table at most half full."""
        n_open, n_done = int(self._counts[k.C_OPEN]), int(self._counts[k.C_DONE])
        if n_open + packets > len(self._OF):
            cap = max(n_open + packets, 2 * len(self._OF))
            self._OF, self._OH, self._OK = _grown((self._OF, self._OH, self._OK), n_open, cap)
        if n_done + packets > len(self._DF):
            cap = max(n_done + packets, 2 * len(self._DF))
            self._DF, self._DH, self._DK = _grown((self._DF, self._DH, self._DK), n_done, cap)
        if 2 * (n_open + packets) > len(self._tab_row):
            slots = 1 << (2 * (n_open + packets) - 1).bit_length()
            self._tab_row, self._tab_h = np.empty(slots, np.int64), np.empty(slots, np.uint64)
            self._index()

    def _index(self) -> None:
        """(Re)build the hash table over the open rows, changing the seed until no two share a hash."""
        K = self._OK[:self._counts[k.C_OPEN]]
        while not k.build_table(K_.hash_rows(K, self._seed), self._tab_row, self._tab_h):
            self._seed += 1

    def _rehash(self) -> None:
        self._seed += 1
        self._index()

    def _set_flows(self, done: list, open_F, open_H, open_K) -> None:
        """Append `done` (F, H, K) parts to the finished flows and make (open_F, open_H, open_K) the open ones."""
        for F, H, K in done:
            self._reserve(len(F))
            at = int(self._counts[k.C_DONE])
            self._DF[at:at + len(F)], self._DH[at:at + len(F)], self._DK[at:at + len(F)] = F, H, K
            self._counts[k.C_DONE] = at + len(F)
        self._counts[k.C_OPEN] = 0
        self._reserve(len(open_F))
        n = len(open_F)
        self._OF[:n], self._OH[:n], self._OK[:n] = open_F, open_H, open_K
        self._counts[k.C_OPEN] = n
        self._index()

    def _open(self):
        n = int(self._counts[k.C_OPEN])
        return self._OF[:n], self._OH[:n], self._OK[:n]

    def _finished(self):
        n = int(self._counts[k.C_DONE])
        return self._DF[:n], self._DH[:n], self._DK[:n]

    def _expire(self) -> None:
        """Finish open flows idle past their timeout (+ slack); run every EXPIRY_INTERVAL_S of capture time."""
        if self._newest_ns - self._expired_ns < int(EXPIRY_INTERVAL_S * NS) or not self._counts[k.C_OPEN]:
            return
        self._expired_ns = self._newest_ns
        F, H, K = self._open()
        limit = self._timeout_ns[K_.key_proto(K)] + int(EXPIRY_SLACK_S * NS)
        idle = F[:, k.F_LAST_NS] < self._newest_ns - limit
        if idle.any():
            live = ~idle
            self._set_flows([(F[idle], H[idle], K[idle])], F[live], H[live], K[live])

    # ---- packets -> flow packets ----------------------------------------
    def _attach_fragments(self, c, sport, dport) -> None:
        """Ports of a non-first fragment from its first fragment (c: the batch; rows without IP carry no L_FRAG)."""
        lay = c["layers"]
        if not (lay & np.uint32(L_FRAG)).any():
            return
        first = K_.first_fragment_mask(lay, c["frag_offset"], c["ip_flags"])
        later = K_.later_fragment_mask(lay, c["frag_offset"])
        fid = K_.fragment_ids(c["src_ip_hi"], c["src_ip_lo"], c["dest_ip_hi"], c["dest_ip_lo"],
                              c["proto"], c["ip_id"])
        old_id, old_sp, old_dp, old_ts = self._frag
        ids = np.concatenate([old_id, fid[first]])
        sps = np.concatenate([old_sp, sport[first]])
        dps = np.concatenate([old_dp, dport[first]])
        tss = np.concatenate([old_ts, c["ts_ns"][first]])
        if later.any() and len(ids):
            order = np.argsort(ids, kind="stable")
            ids_s = ids[order]
            want = fid[later]
            # the latest first fragment with that id wins (a reused IP id)
            pos = np.searchsorted(ids_s, want, side="right") - 1
            ok = (pos >= 0) & (ids_s[np.maximum(pos, 0)] == want)
            rows = np.flatnonzero(later)[ok]
            src = order[pos[ok]]
            sport[rows] = sps[src]
            dport[rows] = dps[src]
        if len(ids):
            ip_ts = c["ts_ns"][(lay & np.uint32(IP)) != 0]
            newest = int(ip_ts.max()) if len(ip_ts) else 0
            keep = tss >= newest - int(FRAGMENT_TIMEOUT_S * NS)
            ids, sps, dps, tss = ids[keep], sps[keep], dps[keep], tss[keep]
            if len(ids) > MAX_RECENT_FRAGMENTS:
                last = np.argsort(tss, kind="stable")[-MAX_RECENT_FRAGMENTS:]
                ids, sps, dps, tss = ids[last], sps[last], dps[last], tss[last]
        self._frag = (ids, sps, dps, tss)

    @staticmethod
    def _carrier_packets(batch):
        """The outer UDP packets of UDP tunnels (any inner frame, IP or not), as the arguments of _run."""
        layers = batch["layers"]
        rows = np.flatnonzero(((layers & np.uint32(L_TUNNEL)) != 0) & (batch["outer_proto"] == PROTO_UDP)
                              & ((batch["outer_src_port"] | batch["outer_dest_port"]) != 0))
        if not len(rows):
            return None
        lay = layers[rows]
        shi, slo = batch["outer_src_ip_hi"][rows], batch["outer_src_ip_lo"][rows]
        v4 = K_.is_v4_mapped(shi, slo)
        ip_len, pay = K_.carrier_ip_len(batch["ip_len"][rows], batch["l3_off"][rows], batch["wirelen"][rows],
                                        (lay & np.uint32(IP)) != 0, batch["linktype"][rows], lay, v4)
        # as the decoder's own length columns (uint32): one compiled signature of the pass, not two
        ip_len, pay = np.maximum(ip_len, 0).astype(np.uint32), pay.astype(np.uint32)
        zero = np.zeros(len(rows), np.uint32)
        # layer bits as the pass reads them: an IP packet with a payload length and no TCP header
        carrier_layers = np.uint32(L_IP4 | L_PAYLOAD) | (lay & np.uint32(L_VLAN))
        return (shi, slo, batch["outer_dest_ip_hi"][rows], batch["outer_dest_ip_lo"][rows],
                batch["outer_src_port"][rows], batch["outer_dest_port"][rows], np.full(len(rows), PROTO_UDP, np.uint8),
                carrier_layers, batch["ts_ns"][rows], batch["frame"][rows], zero.astype(np.uint16), zero, zero.astype(np.uint16),
                pay, ip_len, batch["vlan_outer"][rows], np.where(v4, 4, 6).astype(np.uint8))

    # ---- results ---------------------------------------------------------
    def _all(self):
        """Finished flows, then the open ones."""
        parts = (self._finished(), self._open())
        return tuple(np.concatenate([p[j] for p in parts]) for j in range(3))

    @property
    def flow_count(self) -> int:
        return int(self._counts[k.C_DONE] + self._counts[k.C_OPEN])

    def finish(self) -> dict[str, np.ndarray]:
        """All flows so far (finished and open) as FLOW_COLUMNS arrays, ordered by first packet."""
        return {name: _materialised(col) for name, col in self._columns().items()}

    def _columns(self) -> dict:
        """finish() with its text columns (community_id, state, history) left as TextCodes."""
        F, H, K = self._all()
        F, H, K = _first_packet_order(F, H, K)
        orig_a = F[:, k.F_ORIG_IS_A] == 1
        proto = K_.key_proto(K)
        aport, bport = K_.key_ports(K)
        out: dict[str, np.ndarray] = {
            "src_ip_hi": np.where(orig_a, K[:, 0], K[:, 2]), "src_ip_lo": np.where(orig_a, K[:, 1], K[:, 3]),
            "src_port": np.where(orig_a, aport, bport),
            "dest_ip_hi": np.where(orig_a, K[:, 2], K[:, 0]), "dest_ip_lo": np.where(orig_a, K[:, 3], K[:, 1]),
            "dest_port": np.where(orig_a, bport, aport),
            "proto": proto, "ip_version": F[:, k.F_IPVER].astype(np.uint8),
            "first_seen": F[:, k.F_FIRST_NS], "last_seen": F[:, k.F_LAST_NS],
            "duration_s": (F[:, k.F_LAST_NS] - F[:, k.F_FIRST_NS]) / NS,
        }
        for prefix, side in (("src2dst", 0), ("dst2src", 1)):
            out[f"{prefix}_packets"] = F[:, k.F_PKTS + side]
            out[f"{prefix}_bytes"] = F[:, k.F_BYTES + side]
            out[f"{prefix}_payload_bytes"] = F[:, k.F_PAY + side]
            out[f"{prefix}_tcp_flags"] = F[:, k.F_FLAGS + side]
            out[f"{prefix}_max_payload_bytes"] = F[:, k.F_MAXPAY + side]
            out[f"{prefix}_retransmits"] = F[:, k.F_RETX + side]
        out["src_mss"], out["dest_mss"] = F[:, k.F_MSS], F[:, k.F_MSS + 1]
        rtt = F[:, k.F_RTT_NS]
        out["handshake_rtt_ms"] = np.where(rtt >= 0, rtt / 1e6, np.nan)
        out["history"] = _history_codes(H, F[:, k.F_HLEN])
        out["state"] = _conn_states(F, proto, out["history"])
        out["vlan"] = F[:, k.F_VLAN]
        out["first_frame"] = F[:, k.F_FIRST_FRAME]
        out["community_id"] = community_id_codes(out["src_ip_hi"], out["src_ip_lo"], out["dest_ip_hi"],
                                                 out["dest_ip_lo"], proto, out["src_port"], out["dest_port"])
        return {name: out[name] if isinstance(out[name], TextCodes) else np.asarray(out[name]).astype(dtype, copy=False)
                for name, dtype in FLOW_COLUMNS.items()}

    def text_columns(self, coded: bool = False) -> dict:
        """The user-facing view of finish(): addresses as text, proto names, flag strings.

        Times stay int64 nanoseconds here; to_frame() and the CSV writer render them.
        With `coded`, text columns stay TextCodes (distinct values and a code
        per row), which the CSV writer copies as bytes without a Python
        string per row; otherwise they are object arrays of str.
        """
        cols = self._columns()
        view = {"src_ip": ip_text_codes(cols["src_ip_hi"], cols["src_ip_lo"]), "src_port": cols["src_port"],
                "dest_ip": ip_text_codes(cols["dest_ip_hi"], cols["dest_ip_lo"]), "dest_port": cols["dest_port"],
                "proto": TextCodes(cols["proto"], _PROTO_TEXT)}
        view.update((name, cols[name]) for name in FLOW_COLUMNS
                    if name not in view and name not in ("src_ip_hi", "src_ip_lo", "dest_ip_hi", "dest_ip_lo"))
        for column in ("src2dst_tcp_flags", "dst2src_tcp_flags"):
            view[column + "_str"] = flag_codes(cols[column])
        return view if coded else {name: _materialised(col) for name, col in view.items()}

    def to_frame(self):
        """pandas view: addresses as strings, proto names, UTC times, flag strings."""
        import pandas as pd
        view = self.text_columns()
        frame = pd.DataFrame(view)
        for column in ("first_seen", "last_seen"):
            frame[column] = pd.to_datetime(view[column], unit="ns", utc=True)
        return frame

    # ---- merging -----------------------------------------------------------
    def merge(self, other: "FlowTable") -> "FlowTable":
        """Absorb `other`, the table of the packets that follow this one's. Returns self.

        Counters, times, flags, MSS and payload maxima combine exactly. A TCP
        connection cut by the partition boundary keeps this table's direction;
        its endpoint states are composed (exact when the later part continues
        an established connection), and the later part's first segments
        cannot be recognised as retransmissions of earlier ones.
        """
        self.packets += other.packets
        self.non_ip_packets += other.non_ip_packets
        oF, oH, oK = other._all()
        if len(oF) == 0:
            return self
        n_open_other = int(other._counts[k.C_OPEN])
        o_is_open = np.zeros(len(oF), bool)
        o_is_open[len(oF) - n_open_other:] = True
        mF, mH, mK = self._open()
        mh = K_.hash_rows(mK, self._seed)
        by_hash = np.argsort(mh, kind="stable")
        mF, mH, mK, mh = mF[by_hash], mH[by_hash], mK[by_hash], mh[by_hash]
        oh = K_.hash_rows(oK, self._seed)
        order = np.lexsort((oF[:, k.F_FIRST_NS], oh))
        first = np.ones(len(order), bool)
        first[1:] = oh[order][1:] != oh[order][:-1]
        heads = order[first]                       # each key's earliest flow in `other`
        pos = np.searchsorted(mh, oh[heads])
        posc = np.minimum(pos, max(len(mh) - 1, 0))
        hit = (pos < len(mh)) & (mh[posc] == oh[heads]) if len(mh) else np.zeros(len(heads), bool)
        hit &= np.all(mK[posc] == oK[heads], axis=1) if len(mh) else hit
        mine_rows, theirs = posc[hit], heads[hit]
        joined = _continues(mF[mine_rows], oF[theirs], self._timeout_ns[K_.key_proto(oK[theirs])])
        combined_F, combined_H = _combine(mF[mine_rows[joined]], mH[mine_rows[joined]],
                                          oF[theirs[joined]], oH[theirs[joined]])
        oF, oH = oF.copy(), oH.copy()
        oF[theirs[joined]] = combined_F
        oH[theirs[joined]] = combined_H
        superseded = np.zeros(len(mF), bool)
        superseded[mine_rows] = True               # a later flow of the same key exists
        ended_mine = superseded.copy()
        ended_mine[mine_rows[joined]] = False      # those continue inside oF instead
        done = ~o_is_open
        keep = ~superseded
        self._set_flows([(mF[ended_mine], mH[ended_mine], mK[ended_mine]), (oF[done], oH[done], oK[done])],
                        np.concatenate([mF[keep], oF[o_is_open]]), np.concatenate([mH[keep], oH[o_is_open]]),
                        np.concatenate([mK[keep], oK[o_is_open]]))
        self._merge_fragments(other)
        if other._newest_ns is not None:
            self._newest_ns = other._newest_ns if self._newest_ns is None else max(self._newest_ns, other._newest_ns)
        return self

    def _merge_fragments(self, other) -> None:
        parts = list(zip(self._frag, other._frag))
        ids, sps, dps, tss = (np.concatenate(p) for p in parts)
        if len(ids) > MAX_RECENT_FRAGMENTS:
            last = np.argsort(tss, kind="stable")[-MAX_RECENT_FRAGMENTS:]
            ids, sps, dps, tss = ids[last], sps[last], dps[last], tss[last]
        self._frag = (ids, sps, dps, tss)


# ---- merge helpers (vectorised over the flows cut by a partition boundary) --
def _continues(mine, theirs, timeout_ns) -> np.ndarray:
    """Whether each later partial flow continues the earlier open one (else it is a new flow)."""
    gap_ok = theirs[:, k.F_FIRST_NS] - mine[:, k.F_LAST_NS] <= timeout_ns
    first_flags = theirs[:, k.F_FIRST_FLAGS]
    syn_only = ((first_flags & k.FIRST_TCP) != 0) & ((first_flags & TH_SYN) != 0) & ((first_flags & TH_ACK) == 0)
    side = np.where(theirs[:, k.F_FIRST_FROM_A] == mine[:, k.F_ORIG_IS_A], 0, 1)
    syn_seq = np.where(side == 0, mine[:, k.F_SYNSEQ], mine[:, k.F_SYNSEQ + 1])
    reuse = syn_only & np.where(syn_seq >= 0, syn_seq != theirs[:, k.F_FIRST_SEQ], mine[:, k.F_ENDED] == 1)
    return gap_ok & ~reuse


def _compose_state(mine, mine_peer_closed, theirs):
    """Endpoint state after `mine` then the later part that on its own reached `theirs`."""
    later_silent = (theirs == k.TCP_INACTIVE) | ((theirs == k.TCP_PARTIAL) & (mine != k.TCP_INACTIVE))
    rst_after_close = (theirs == k.TCP_RESET) & (mine == k.TCP_CLOSED) & mine_peer_closed
    return np.where(later_silent | rst_after_close, mine, theirs)


def _combine(mF, mH, tF, tH):
    """Earlier open flows + their continuation in the later table, with the earlier one's direction."""
    out = mF.copy()
    H = mH.copy()
    same = tF[:, k.F_ORIG_IS_A] == mF[:, k.F_ORIG_IS_A]

    def theirs(base, side):
        return np.where(same, tF[:, base + side], tF[:, base + 1 - side])

    for side in (0, 1):
        for base in (k.F_PKTS, k.F_BYTES, k.F_PAY, k.F_RETX):
            out[:, base + side] += theirs(base, side)
        out[:, k.F_FLAGS + side] |= theirs(k.F_FLAGS, side)
        out[:, k.F_MAXPAY + side] = np.maximum(out[:, k.F_MAXPAY + side], theirs(k.F_MAXPAY, side))
        out[:, k.F_MSS + side] = np.where(out[:, k.F_MSS + side] > 0, out[:, k.F_MSS + side], theirs(k.F_MSS, side))
        later_end = theirs(k.F_SEQEND, side)
        out[:, k.F_SEQEND + side] = np.where(later_end >= 0, later_end, out[:, k.F_SEQEND + side])
        out[:, k.F_SYNSEQ + side] = np.where(out[:, k.F_SYNSEQ + side] >= 0, out[:, k.F_SYNSEQ + side],
                                             theirs(k.F_SYNSEQ, side))
    for side in (0, 1):
        peer_closed = mF[:, k.F_STATE + 1 - side] == k.TCP_CLOSED
        out[:, k.F_STATE + side] = _compose_state(mF[:, k.F_STATE + side], peer_closed, theirs(k.F_STATE, side))
    out[:, k.F_FIRST_NS] = np.minimum(mF[:, k.F_FIRST_NS], tF[:, k.F_FIRST_NS])
    out[:, k.F_LAST_NS] = np.maximum(mF[:, k.F_LAST_NS], tF[:, k.F_LAST_NS])
    no_rtt = out[:, k.F_RTT_NS] < 0
    later_rtt = (tF[:, k.F_RTT_NS] >= 0) & (mF[:, k.F_SYN_NS] < 0)
    out[:, k.F_RTT_NS] = np.where(no_rtt & later_rtt, tF[:, k.F_RTT_NS], out[:, k.F_RTT_NS])
    s0, s1 = out[:, k.F_STATE], out[:, k.F_STATE + 1]
    out[:, k.F_ENDED] = ((s0 == k.TCP_RESET) | (s1 == k.TCP_RESET) |
                         ((s0 == k.TCP_CLOSED) & (s1 == k.TCP_CLOSED)) | (mF[:, k.F_ENDED] == 1)).astype(np.int64)
    # history: the later part's letters that this side had not recorded yet
    for i in range(len(out)):
        n = int(out[i, k.F_HLEN])
        for j in range(int(tF[i, k.F_HLEN])):
            c = int(tH[i, j])
            if c == k.FLIP_MARK:
                continue
            later_side = 0 if c < ord("a") else 1
            side = later_side if same[i] else 1 - later_side
            bit = 1 << k._H_CHARS.index(c if c < ord("a") else c - 32)
            if out[i, k.F_HSEEN + side] & bit or n >= k.HIST_MAX:
                continue
            out[i, k.F_HSEEN + side] |= bit
            H[i, n] = (c if c < ord("a") else c - 32) + (32 if side else 0)
            n += 1
        out[i, k.F_HLEN] = n
    return out, H


# ---- output helpers ------------------------------------------------------
def _first_packet_order(F, H, K):
    """Flows sorted by first packet (time, frame), ties (a tunnel packet and its carrier) by key."""
    first_ns, first_frame = F[:, k.F_FIRST_NS], F[:, k.F_FIRST_FRAME]
    order = np.lexsort((first_frame, first_ns))
    ns, frame = first_ns[order], first_frame[order]
    if np.any((ns[1:] == ns[:-1]) & (frame[1:] == frame[:-1])):
        order = np.lexsort((K[:, 4], K[:, 3], K[:, 2], K[:, 1], K[:, 0], first_frame, first_ns))
    return F[order], H[order], K[order]


_HISTORY_SEED = 0x48495354   # any seed: the hash only groups equal history rows, each group is verified


def _history_codes(H, lengths) -> TextCodes:
    """History letters as text, one value per distinct history (flows share a few hundred)."""
    rows = np.where(np.arange(k.HIST_MAX) < lengths[:, None], H, 0).astype(np.uint8)
    every_row = TextCodes(np.arange(len(rows)), rows, lengths)
    if not len(rows):
        return every_row
    h = K_.hash_rows(rows.view(np.uint64), _HISTORY_SEED)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not np.array_equal(rows[first[inverse]], rows):      # two histories share a hash
        return every_row
    return TextCodes(inverse, rows[first], lengths[first])


# Zeek's conn_state names, indexed by the codes _conn_states computes
_STATE_NAMES = np.array(["OTH", "REJ", "RSTRH", "RSTR", "RSTOS0", "RSTO", "SF", "SH", "S2", "SHR", "S3",
                         "S0", "S1"], dtype=object)
_OTH, _RSTOS0 = 0, 4


def _conn_states(F, proto, history: TextCodes) -> TextCodes:
    """Zeek's conn_state (base/protocols/conn/main.zeek) from the endpoint states."""
    os_, rs = F[:, k.F_STATE], F[:, k.F_STATE + 1]
    o_inactive = (os_ == k.TCP_INACTIVE) | (os_ == k.TCP_PARTIAL)
    r_inactive = (rs == k.TCP_INACTIVE) | (rs == k.TCP_PARTIAL)
    no_bytes = (F[:, k.F_PAY] == 0) & (F[:, k.F_PAY + 1] == 0)
    o_syn = (os_ == k.TCP_SYN_SENT) | (os_ == k.TCP_SYN_ACK_SENT)
    # the first condition that holds picks the code (index into _STATE_NAMES)
    tcp = np.select([
        (rs == k.TCP_RESET) & (o_syn | ((os_ == k.TCP_RESET) & no_bytes)),
        (rs == k.TCP_RESET) & o_inactive,
        rs == k.TCP_RESET,
        (os_ == k.TCP_RESET) & r_inactive,     # RSTOS0 if the history agrees, else OTH
        os_ == k.TCP_RESET,
        (rs == k.TCP_CLOSED) & (os_ == k.TCP_CLOSED),
        (os_ == k.TCP_CLOSED) & r_inactive,
        os_ == k.TCP_CLOSED,
        (rs == k.TCP_CLOSED) & o_inactive,
        rs == k.TCP_CLOSED,
        (os_ == k.TCP_SYN_SENT) & (rs == k.TCP_INACTIVE),
        (os_ == k.TCP_ESTABLISHED) & (rs == k.TCP_ESTABLISHED),
    ], np.arange(1, len(_STATE_NAMES)), default=_OTH)
    maybe = np.flatnonzero((tcp == _RSTOS0) & (proto == PROTO_TCP))
    histories = history.value_texts()
    tcp[maybe] = [_RSTOS0 if RSTOS0_HISTORY.fullmatch(histories[history.codes[i]]) else _OTH for i in maybe]
    o_active, r_active = F[:, k.F_PKTS] > 0, F[:, k.F_PKTS + 1] > 0
    udp = np.where(o_active, np.where(r_active, 6, 11), np.where(r_active, 9, _OTH))    # SF, S0, SHR, OTH
    code = np.where(proto == PROTO_TCP, tcp, np.where(proto == PROTO_UDP, udp, _OTH))
    return TextCodes(code, _STATE_NAMES)


# Protocol names in the DataFrame view; others appear as their IANA number.
FLOW_PROTO_NAMES = {**PROTO_NAMES, PROTO_SCTP: "sctp"}
_PROTO_TEXT = np.array([FLOW_PROTO_NAMES.get(p, str(p)) for p in range(256)], dtype=object)


def flag_codes(flags: np.ndarray) -> TextCodes:
    """"SAF"-style text of TCP flag unions, built once per distinct value."""
    values, inverse = np.unique(flags, return_inverse=True)
    texts = np.full(len(values), "", dtype=object)
    for bit, letter in FLAG_LETTERS:
        texts = np.where(values & bit, texts + letter, texts)
    return TextCodes(inverse.reshape(-1), texts)


def _materialised(column):
    """A column with TextCodes turned into an object array of str; others as they are."""
    return column.text() if isinstance(column, TextCodes) else column

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

This module holds the state and its updates; the flow records' Zeek view
(finish, to_frame: history, conn_state) is view.py, and the merge of the
tables of consecutive partitions is merge.py.
"""
from __future__ import annotations

import numpy as np

from ..decode import expand_msdus
from ..schema import IP, L_FRAG, L_IP4, L_PAYLOAD, L_TUNNEL, L_VLAN, PROTO_NAMES, PROTO_UDP, PacketBatch
from ..units import NS
from . import kernel as k
from . import keys as K_
from .merge import CutJoins, merge_flows
from .view import flow_columns, materialised, text_columns

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
        b = np.empty((capacity, *a.shape[1:]), a.dtype)
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
        # the cut log of the flows that may continue one of an earlier partition: rows [0, counts[C_LOG])
        self._CL = np.zeros((0, k.LOG_W), np.int64)
        self._counts = np.zeros(4, np.int64)
        self.inexact_joins = 0      # merges of a connection cut by a partition boundary that are not exact
        # whether its first packet is the capture's (frame 1): such a table is never the later side of a merge,
        # so no merge reads its cut log; it ships none and drops the one it merges in (None: no packet yet)
        self.begins_capture: bool | None = None
        self._frag = (np.zeros(0, np.uint64), np.zeros(0, np.uint16), np.zeros(0, np.uint16),
                      np.zeros(0, np.int64))
        self._newest_ns: int | None = None
        self._expired_ns = 0
        self.packets = 0
        self.non_ip_packets = 0

    # ---- batches ---------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        """Add one decoded batch (batches in capture order), and set its `flow_events`: what each packet did to
        the capture gaps (kernel.EV_*), for the consumers after this one (the rule that measures capture loss
        bins them), and its `flow_cuts` (PacketBatch.flow_cuts: where a merge may settle those events again)."""
        n = len(batch)
        given = batch
        given.flow_events = events = np.zeros(n, np.int8)
        given.flow_cuts = None
        if n == 0:
            return
        if self.begins_capture is None:
            self.begins_capture = int(batch["frame"][0]) == 1
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
            cuts = None
            if batch is not given:
                events = np.zeros(len(batch), np.int8)
            else:
                # (an A-MSDU's subframes share their frame's row, as they may not share a flow: its rows get none)
                given.flow_cuts = cuts = (np.empty(n, np.int64), np.full(n, -1, np.int8), np.empty(n, np.int8))
            self._run(batch["src_ip_hi"], batch["src_ip_lo"], batch["dest_ip_hi"], batch["dest_ip_lo"], sport, dport,
                      batch["proto"], layers, batch["ts_ns"], batch["frame"], batch["tcp_flags"], batch["tcp_seq"],
                      batch["tcp_ack"], batch["tcp_mss"], batch["payload_len"], batch["payload_off"], batch["caplen"],
                      batch["ip_len"], batch["vlan_outer"], batch["ip_version"], events=events, cuts=cuts)
            if batch is not given:
                # an A-MSDU's subframes share their frame's row: its event is the strongest of theirs
                np.maximum.at(given.flow_events, np.searchsorted(given["frame"], batch["frame"]), events)
        if carrier is not None:
            self._run(*carrier)
        newest = int(self._counts[k.C_NEWEST])
        self._newest_ns = newest if self._newest_ns is None else max(self._newest_ns, newest)
        self._expire()

    def _run(self, src_hi, src_lo, dst_hi, dst_lo, sport, dport, proto, layers, ts_ns, frame, tcp_flags, tcp_seq,
             tcp_ack, tcp_mss, payload_len, payload_off, caplen, ip_len, vlan, ip_version, events=None,
             cuts=None) -> None:
        """One compiled pass over the packets, resumed after a rehash; `events` receives each packet's capture-gap
        event (kernel.EV_*) and `cuts` the (flow, slot, kind) of packets of flows with a cut log
        (kernel.update_flows), scratch arrays when None (tunnel carriers: UDP, never one)."""
        K, from_a = K_.canonical_keys(src_hi, src_lo, dst_hi, dst_lo, sport, dport, proto)
        if events is None:
            events = np.zeros(len(K), np.int8)
        if cuts is None:
            cuts = (np.empty(len(K), np.int64), np.empty(len(K), np.int8), np.empty(len(K), np.int8))
        at = 0
        while True:
            h = K_.hash_rows(K, self._seed)
            at = k.update_flows(at, K, h, from_a, layers, ts_ns, frame, tcp_flags, tcp_seq, tcp_ack, tcp_mss,
                                payload_len, payload_off, caplen, ip_len, vlan, ip_version, self._timeout_ns,
                                K_.SERVER_PORT, self._tab_row,
                                self._tab_h, self._OF, self._OH, self._OK, self._DF, self._DH, self._DK, self._CL,
                                self._counts, events, *cuts)
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
        n_log = int(self._counts[k.C_LOG])
        if n_log + packets > len(self._CL):
            self._CL, = _grown((self._CL,), n_log, max(n_log + packets, 2 * len(self._CL)))
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

    def __getstate__(self) -> dict:
        """Pickled (a cluster worker ships its partition's table; a watch copies its slices) with only the rows in
        use: the arenas' spare capacity (up to twice the rows) and the hash table, rebuilt on loading, stay out."""
        state = dict(self.__dict__)
        n_open, n_done = int(self._counts[k.C_OPEN]), int(self._counts[k.C_DONE])
        for names, n in ((("_OF", "_OH", "_OK"), n_open), (("_DF", "_DH", "_DK"), n_done),
                         (("_CL",), int(self._counts[k.C_LOG]))):
            for name in names:
                state[name] = state[name][:n].copy()
        if self.begins_capture:         # no merge reads its cut log (begins_capture)
            state["_CL"] = state["_CL"][:0]
            state["_counts"] = state["_counts"].copy()
            state["_counts"][k.C_LOG] = 0
            state["_DF"][:, k.F_CUT] = -1
            state["_OF"][:, k.F_CUT] = -1
        del state["_tab_row"], state["_tab_h"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("begins_capture", None)
        n_open = int(self._counts[k.C_OPEN])
        slots = max(MIN_TABLE_SLOTS, 1 << max(2 * n_open - 1, 1).bit_length())
        self._tab_row, self._tab_h = np.empty(slots, np.int64), np.empty(slots, np.uint64)
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
                carrier_layers, batch["ts_ns"][rows], batch["frame"][rows], zero.astype(np.uint16), zero, zero,
                zero.astype(np.uint16), pay, zero.astype(np.uint16), batch["caplen"][rows], ip_len,
                batch["vlan_outer"][rows], np.where(v4, 4, 6).astype(np.uint8))

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
        return {name: materialised(col) for name, col in self.coded_columns().items()}

    def coded_columns(self) -> dict:
        """finish() with its text columns (community_id, state, history) left as TextCodes."""
        return flow_columns(*self._all())

    def text_columns(self, coded: bool = False) -> dict:
        """The user-facing view of finish(): addresses as text, proto names, flag strings; with `coded`,
        text columns stay TextCodes (view.text_columns)."""
        return text_columns(self.coded_columns(), coded)

    def to_frame(self):
        """pandas view: addresses as strings, proto names (missing where a protocol has none; its number is in
        ip_proto), UTC times, flag strings."""
        import pandas as pd
        view = self.text_columns()
        frame = pd.DataFrame(view)
        frame["proto"] = frame["proto"].mask(frame["proto"] == "")     # no name: missing, the number in ip_proto
        for column in ("first_seen", "last_seen"):
            frame[column] = pd.to_datetime(view[column], unit="ns", utc=True)
        return frame

    # ---- merging -----------------------------------------------------------
    def merge(self, other: FlowTable) -> FlowTable:
        """Absorb `other`, the table of the packets that follow this one's. Returns self.

        A TCP connection cut by the partition boundary keeps this table's
        direction; what combines exactly and what cannot, merge.py says.
        """
        self.absorb(other)
        return self

    def absorb(self, other: FlowTable) -> CutJoins:
        """merge(), returning what it says about the capture-gap events of the connections it joined across the
        cut (merge.CutJoins), for the rules that binned them as `other`'s part saw them."""
        self.packets += other.packets
        self.non_ip_packets += other.non_ip_packets
        self.inexact_joins += other.inexact_joins
        if self.begins_capture is None:
            self.begins_capture = other.begins_capture
        later = other._all()
        if len(later[0]) == 0:
            return CutJoins.none()
        # one cut log: the later rows' after this table's
        n_log = int(self._counts[k.C_LOG])
        later[0][:, k.F_CUT] = np.where(later[0][:, k.F_CUT] >= 0, later[0][:, k.F_CUT] + n_log, -1)
        cut_log = np.concatenate([self._CL[:n_log], other._CL[:int(other._counts[k.C_LOG])]])
        done, open_flows, inexact, joins = merge_flows(self._open(), later, int(other._counts[k.C_OPEN]), self._seed,
                                                       self._timeout_ns, cut_log)
        self.inexact_joins += inexact
        self._CL, self._counts[k.C_LOG] = cut_log, len(cut_log)
        self._set_flows(done, *open_flows)
        self._compact_log(keep=not self.begins_capture)
        self._merge_fragments(other)
        if other._newest_ns is not None:
            self._newest_ns = other._newest_ns if self._newest_ns is None else max(self._newest_ns, other._newest_ns)
        return joins

    def _compact_log(self, keep: bool = True) -> None:
        """Keep the cut log rows flows still point to (a joined flow's is dropped); none unless `keep` (a table
        that begins the capture: no merge reads its log, and keeping it would copy it again at every merge)."""
        n_open, n_done = int(self._counts[k.C_OPEN]), int(self._counts[k.C_DONE])
        rows = [self._DF[:n_done, k.F_CUT], self._OF[:n_open, k.F_CUT]]
        used = np.concatenate(rows)
        used = np.sort(used[used >= 0]) if keep else used[:0]
        renumber = np.full(int(self._counts[k.C_LOG]) + 1, -1, np.int64)      # [-1]: none
        renumber[used] = np.arange(len(used))
        for F, n in ((self._DF, n_done), (self._OF, n_open)):
            cut = F[:n, k.F_CUT]
            F[:n, k.F_CUT] = renumber[cut]
        self._CL = self._CL[used]
        self._counts[k.C_LOG] = len(used)

    def _merge_fragments(self, other) -> None:
        parts = list(zip(self._frag, other._frag))
        ids, sps, dps, tss = (np.concatenate(p) for p in parts)
        if len(ids) > MAX_RECENT_FRAGMENTS:
            last = np.argsort(tss, kind="stable")[-MAX_RECENT_FRAGMENTS:]
            ids, sps, dps, tss = ids[last], sps[last], dps[last], tss[last]
        self._frag = (ids, sps, dps, tss)

"""The Zeek view of the flow records: conn.log-style columns, history letters and conn_state.

`flow_columns` turns the flow table's records (the int64 field matrix F, the
history letters H, the keys K; detector.flows.kernel) into FLOW_COLUMNS, one
row per flow in first-packet order: originator and responder by the roles
the endpoints took, Zeek's `history` string and `conn_state` (as
base/protocols/conn/main.zeek derives it from the endpoint states), the
Community ID. `text_columns` is the user-facing view of those: addresses as
text, protocol names, TCP flag strings. Text columns are built once per
distinct value (TextCodes), never once per flow.
"""
from __future__ import annotations

import re

import numpy as np

from ..decode.addr import ip_text_codes
from ..schema import (
    PROTO_NAMES,
    PROTO_SCTP,
    PROTO_TCP,
    PROTO_UDP,
    TH_ACK,
    TH_CWR,
    TH_ECE,
    TH_FIN,
    TH_NS,
    TH_PSH,
    TH_RST,
    TH_SYN,
    TH_URG,
)
from ..text import TextCodes
from ..units import NS
from . import kernel as k
from . import keys as K_
from .community_id import community_id_codes

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
    "src2dst_ack_events": np.int64, "dst2src_ack_events": np.int64,
    "src2dst_gap_events": np.int64, "dst2src_gap_events": np.int64,
    "src2dst_gap_bytes": np.int64, "dst2src_gap_bytes": np.int64,
    "src2dst_seq_holes": np.int64, "dst2src_seq_holes": np.int64,
    "src2dst_seq_hole_bytes": np.int64, "dst2src_seq_hole_bytes": np.int64,
    "handshake_rtt_ms": np.float64, "handshake_syn_synack_ms": np.float64, "handshake_synack_ack_ms": np.float64,
    "syn_retransmits": np.int64, "state": object, "history": object,
    "vlan": np.uint16, "first_frame": np.int64,
}

# Letters of the TCP flag strings in the DataFrame view, "SAF" style.
FLAG_LETTERS = ((TH_SYN, "S"), (TH_ACK, "A"), (TH_FIN, "F"), (TH_RST, "R"), (TH_PSH, "P"),
                (TH_URG, "U"), (TH_ECE, "E"), (TH_CWR, "C"), (TH_NS, "N"))
# Zeek's RSTOS0 test on the history: originator SYN, then its RST, nothing in between
RSTOS0_HISTORY = re.compile(r"\^?S[^HAFGIQ]*R.*")


def flow_columns(F, H, K) -> dict:
    """FLOW_COLUMNS of the flow records (F, H, K), ordered by first packet; text columns as TextCodes."""
    F, H, K = first_packet_order(F, H, K)
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
        out[f"{prefix}_ack_events"] = F[:, k.F_ACK_EVENTS + side]
        out[f"{prefix}_gap_events"] = F[:, k.F_GAP_EVENTS + side]
        out[f"{prefix}_gap_bytes"] = F[:, k.F_GAP_BYTES + side]
        out[f"{prefix}_seq_holes"] = F[:, k.F_SEQ_HOLES + side]
        out[f"{prefix}_seq_hole_bytes"] = F[:, k.F_HOLE_BYTES + side]
    out["src_mss"], out["dest_mss"] = F[:, k.F_MSS], F[:, k.F_MSS + 1]
    out.update(handshake_columns(F))
    out["history"] = _history_codes(H, F[:, k.F_HLEN])
    out["state"] = _conn_states(F, proto, out["history"])
    out["vlan"] = F[:, k.F_VLAN]
    out["first_frame"] = F[:, k.F_FIRST_FRAME]
    out["community_id"] = community_id_codes(out["src_ip_hi"], out["src_ip_lo"], out["dest_ip_hi"],
                                             out["dest_ip_lo"], proto, out["src_port"], out["dest_port"])
    return {name: out[name] if isinstance(out[name], TextCodes) else np.asarray(out[name]).astype(dtype, copy=False)
            for name, dtype in FLOW_COLUMNS.items()}


def handshake_columns(F) -> dict[str, np.ndarray]:
    """Wireshark's initial RTT (tcp.analysis.initial_rtt: first SYN -> the originator's ACK of the SYN-ACK) and
    its two legs as seen from the capture point, in ms (NaN where the handshake was not seen whole, in order);
    the SYNs the originator sent again.

    SYN -> SYN-ACK runs from the SYN the SYN-ACK answers (the last one before
    it) and is the server's side of the capture point; SYN-ACK -> ACK is the
    client's. A capture near the client shows a slow server as a long first
    leg, one near the server a slow client (or path) as a long second leg.
    """
    syn, last_syn, synack, ack = F[:, k.F_SYN_NS], F[:, k.F_LASTSYN_NS], F[:, k.F_SYNACK_NS], F[:, k.F_ACK_NS]
    whole = (syn >= 0) & (synack >= syn) & (ack >= synack)
    answered = (last_syn >= 0) & (synack >= last_syn)
    return {"handshake_rtt_ms": np.where(whole, (ack - syn) / 1e6, np.nan),
            "handshake_syn_synack_ms": np.where(answered, (synack - last_syn) / 1e6, np.nan),
            "handshake_synack_ack_ms": np.where(whole, (ack - synack) / 1e6, np.nan),
            "syn_retransmits": F[:, k.F_SYN_RETX]}


def text_columns(cols: dict, coded: bool = False) -> dict:
    """The user-facing view of flow_columns' `cols`: addresses as text, proto names, flag strings.

    `proto` is the protocol's lower-case name as the packets table spells it (FLOW_PROTO_NAMES), empty for a
    protocol without one; `ip_proto` its IANA number, always, so a name and a number never share a column.

    Times stay int64 nanoseconds here; FlowTable.to_frame() and the CSV writer render them.
    With `coded`, text columns stay TextCodes (distinct values and a code
    per row), which the CSV writer copies as bytes without a Python
    string per row; otherwise they are object arrays of str.
    """
    view = {"src_ip": ip_text_codes(cols["src_ip_hi"], cols["src_ip_lo"]), "src_port": cols["src_port"],
            "dest_ip": ip_text_codes(cols["dest_ip_hi"], cols["dest_ip_lo"]), "dest_port": cols["dest_port"],
            "proto": TextCodes(cols["proto"], _PROTO_TEXT), "ip_proto": cols["proto"]}
    view.update((name, cols[name]) for name in FLOW_COLUMNS
                if name not in view and name not in ("src_ip_hi", "src_ip_lo", "dest_ip_hi", "dest_ip_lo"))
    for column in ("src2dst_tcp_flags", "dst2src_tcp_flags"):
        view[column + "_str"] = flag_codes(cols[column])
    return view if coded else {name: materialised(col) for name, col in view.items()}


def first_packet_order(F, H, K):
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


# Protocol names of the `proto` column; the others have none there (empty), only their number in `ip_proto`.
FLOW_PROTO_NAMES = {**PROTO_NAMES, PROTO_SCTP: "sctp"}
_PROTO_TEXT = np.array([FLOW_PROTO_NAMES.get(p, "") for p in range(256)], dtype=object)


def flag_codes(flags: np.ndarray) -> TextCodes:
    """"SAF"-style text of TCP flag unions, built once per distinct value."""
    values, inverse = np.unique(flags, return_inverse=True)
    texts = np.full(len(values), "", dtype=object)
    for bit, letter in FLAG_LETTERS:
        texts = np.where(values & bit, texts + letter, texts)
    return TextCodes(inverse.reshape(-1), texts)


def materialised(column):
    """A column with TextCodes turned into an object array of str; others as they are."""
    return column.text() if isinstance(column, TextCodes) else column

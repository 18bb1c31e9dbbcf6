"""The per-flow scan: packets sorted by flow key, aggregated into flow records in compiled code.

A flow record is one row of an int64 matrix (`NF` fields, indices below) plus
a row of history letters. Per-direction fields come in pairs: `F_PKTS + side`,
where side 0 is the originator (the flow's `src`) and side 1 the responder.
The TCP state machine is Zeek's endpoint state machine
(src/packet_analysis/protocol/tcp/TCPSessionAdapter.cc), run per packet in
capture order, so `state` reads like Zeek's conn_state.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..schema import TH_ACK, TH_FIN, TH_RST, TH_SYN

# ---- flow record fields ---------------------------------------------------
F_FIRST_NS = 0
F_LAST_NS = 1
F_FIRST_FRAME = 2
F_VLAN = 3
F_IPVER = 4
F_ORIG_IS_A = 5      # 1 when the originator is the key's `a` endpoint
F_PKTS = 6           # +side
F_BYTES = 8          # +side: IP bytes (ip_len), as Zeek's orig_ip_bytes
F_PAY = 10           # +side: transport payload bytes
F_FLAGS = 12         # +side: union of TCP flags
F_MSS = 14           # +side: MSS option of the side's first SYN carrying one
F_MAXPAY = 16        # +side
F_RETX = 18          # +side
F_SEQEND = 20        # +side: highest sequence number reached (seq + payload), -1 unknown
F_SYNSEQ = 22        # +side: sequence number of the side's first SYN without ACK, -1 none
F_SYN_NS = 24        # time of the originator's first SYN, -1 none
F_SYNACK = 25        # 1 once the responder's SYN-ACK followed that SYN
F_RTT_NS = 26        # first SYN -> originator's ACK of the SYN-ACK, -1 none
F_STATE = 27         # +side: Zeek endpoint state (TCP_* below)
F_PREV = 29          # +side: the state before the last change (Zeek's prev_state)
F_ENDED = 31         # 1 after a RST, or a FIN from both sides
F_HSEEN = 32         # +side: history letters already recorded (bit per letter)
F_HLEN = 34
F_FIRST_FLAGS = 35   # TCP flags of the first packet | FIRST_TCP when it had a TCP header
F_FIRST_SEQ = 36
F_FIRST_FROM_A = 37  # 1 when the first packet was sent by endpoint `a`
NF = 38

FIRST_TCP = 0x10000
HIST_MAX = 24        # history letters kept per flow (Zeek records each kind once per side)

# Zeek's TCP endpoint states (TCP_Endpoint.h, EndpointState)
TCP_INACTIVE = 0
TCP_SYN_SENT = 1
TCP_SYN_ACK_SENT = 2
TCP_PARTIAL = 3
TCP_ESTABLISHED = 4
TCP_CLOSED = 5
TCP_RESET = 6

# History letters (Zeek conn.log `history`): bit in F_HSEEN, upper-case ASCII
_H_BITS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_H_CHARS = (ord("S"), ord("H"), ord("A"), ord("D"), ord("F"), ord("R"), ord("Q"), ord("I"), ord("T"))
H_SYN, H_SYNACK, H_ACK, H_DATA, H_FIN, H_RST, H_MULTI, H_FINRST, H_RETX = range(9)
FLIP_MARK = ord("^")

# Zeek checks for a SYN-ACK/data reversal and for SYN "reuse" on sequence
# numbers; a 32-bit wrap-safe difference does the same here.
_SEQ_MOD = 1 << 32


@njit(cache=True)
def _seq_delta(a, b):
    """a - b in 32-bit sequence space, as a signed number (RFC 9293 modular compare)."""
    d = (a - b) % _SEQ_MOD
    if d >= (1 << 31):
        d -= _SEQ_MOD
    return d


@njit(cache=True)
def _history(F, H, row, side, kind):
    bit = _H_BITS[kind]
    if F[row, F_HSEEN + side] & bit:
        return
    F[row, F_HSEEN + side] |= bit
    n = F[row, F_HLEN]
    if n < HIST_MAX:
        c = _H_CHARS[kind]
        H[row, n] = c if side == 0 else c + 32
        F[row, F_HLEN] = n + 1


@njit(cache=True)
def _mark_flip(F, H, row):
    n = F[row, F_HLEN]
    if n < HIST_MAX:
        H[row, n] = FLIP_MARK
        F[row, F_HLEN] = n + 1


@njit(cache=True)
def _set_state(F, row, side, state):
    F[row, F_PREV + side] = F[row, F_STATE + side]
    F[row, F_STATE + side] = state


@njit(cache=True)
def _flip_roles(F, H, row):
    """Swap originator and responder (Zeek's FlipRoles)."""
    for base in (F_PKTS, F_BYTES, F_PAY, F_FLAGS, F_MSS, F_MAXPAY, F_RETX, F_SEQEND, F_SYNSEQ,
                 F_STATE, F_PREV, F_HSEEN):
        t = F[row, base]
        F[row, base] = F[row, base + 1]
        F[row, base + 1] = t
    F[row, F_ORIG_IS_A] = 1 - F[row, F_ORIG_IS_A]
    _mark_flip(F, H, row)


@njit(cache=True)
def _tcp_state_machine(F, H, row, side, flags, length):
    """One packet through Zeek's UpdateStateMachine for the endpoint `side`."""
    peer = 1 - side
    syn = (flags & TH_SYN) != 0
    ack = (flags & TH_ACK) != 0
    fin = (flags & TH_FIN) != 0
    rst = (flags & TH_RST) != 0
    state = F[row, F_STATE + side]
    if state == TCP_INACTIVE:
        if syn:
            if side == 0:
                _set_state(F, row, side, TCP_SYN_ACK_SENT if ack else TCP_SYN_SENT)
            else:
                if not ack and F[row, F_STATE + peer] == TCP_SYN_ACK_SENT:
                    # SYN/SYN-ACK reversal: the "originator" sent the SYN-ACK.
                    _flip_roles(F, H, row)
                    side, peer = peer, side
                    _set_state(F, row, peer, TCP_ESTABLISHED)
                if F[row, F_STATE + peer] == TCP_SYN_SENT:
                    _set_state(F, row, peer, TCP_ESTABLISHED)
                _set_state(F, row, side, TCP_ESTABLISHED)
        if fin:
            _set_state(F, row, side, TCP_CLOSED)
        if rst:
            _set_state(F, row, side, TCP_RESET)
        if F[row, F_STATE + side] == TCP_INACTIVE:
            if side == 1 and length == 0 and F[row, F_STATE + 0] == TCP_SYN_SENT:
                pass    # an ACK of the SYN before the SYN-ACK is not a partial connection
            elif ack and F[row, F_STATE + peer] == TCP_ESTABLISHED:
                _set_state(F, row, side, TCP_ESTABLISHED)
            else:
                _set_state(F, row, side, TCP_PARTIAL)
    elif state == TCP_SYN_SENT or state == TCP_SYN_ACK_SENT:
        if fin:
            _set_state(F, row, side, TCP_CLOSED)
        if rst:
            _set_state(F, row, side, TCP_RESET)
    elif state == TCP_ESTABLISHED or state == TCP_PARTIAL:
        if syn and state == TCP_PARTIAL and F[row, F_STATE + peer] == TCP_INACTIVE and not ack:
            _set_state(F, row, side, TCP_SYN_SENT)
        if fin and not rst:
            _set_state(F, row, side, TCP_CLOSED)
            if F[row, F_STATE + peer] == TCP_RESET and F[row, F_PREV + peer] == TCP_CLOSED:
                _set_state(F, row, peer, TCP_CLOSED)    # FIN then RST was a normal close
        if rst:
            _set_state(F, row, side, TCP_RESET)
    elif state == TCP_CLOSED:
        if rst and F[row, F_STATE + peer] != TCP_CLOSED:
            _set_state(F, row, side, TCP_RESET)
    s0 = F[row, F_STATE]
    s1 = F[row, F_STATE + 1]
    if s0 == TCP_RESET or s1 == TCP_RESET or (s0 == TCP_CLOSED and s1 == TCP_CLOSED):
        F[row, F_ENDED] = 1


@njit(cache=True)
def _tcp_history(F, H, row, side, flags, length):
    """Zeek's update_history: each kind of packet recorded once per side."""
    syn = (flags & TH_SYN) != 0
    fin = (flags & TH_FIN) != 0
    rst = (flags & TH_RST) != 0
    bits = int(syn) + int(fin) + int(rst)
    if bits > 1:
        _history(F, H, row, side, H_FINRST if (fin and rst) else H_MULTI)
    elif syn:
        _history(F, H, row, side, H_SYNACK if (flags & TH_ACK) else H_SYN)
    elif fin:
        _history(F, H, row, side, H_FIN)
    elif rst:
        _history(F, H, row, side, H_RST)
    elif length > 0:
        _history(F, H, row, side, H_DATA)
    elif flags & TH_ACK:
        _history(F, H, row, side, H_ACK)


@njit(cache=True)
def _start_flow(F, H, row, ts, frame, from_a, flags, tcp_ok, seq, vlan, ipver, is_tcp, is_udp,
                sender_server, receiver_server, sender_port, receiver_port):
    for j in range(NF):
        F[row, j] = 0
    for j in range(HIST_MAX):
        H[row, j] = 0
    F[row, F_FIRST_NS] = ts
    F[row, F_LAST_NS] = ts
    F[row, F_FIRST_FRAME] = frame
    F[row, F_VLAN] = vlan
    F[row, F_IPVER] = ipver
    F[row, F_SEQEND] = -1
    F[row, F_SEQEND + 1] = -1
    F[row, F_SYNSEQ] = -1
    F[row, F_SYNSEQ + 1] = -1
    F[row, F_SYN_NS] = -1
    F[row, F_RTT_NS] = -1
    F[row, F_FIRST_FLAGS] = (flags | FIRST_TCP) if tcp_ok else 0
    F[row, F_FIRST_SEQ] = seq
    F[row, F_FIRST_FROM_A] = from_a
    # Who opened the flow: the SYN sender; the receiver of a SYN-ACK; else the
    # sender, unless Zeek's likely-server-port heuristic says the sender is the
    # server (TCPAnalyzer/UDPAnalyzer::WantConnection).
    flip = False
    if is_tcp and tcp_ok:
        syn = (flags & TH_SYN) != 0
        ack = (flags & TH_ACK) != 0
        if syn and ack:
            flip = True
        elif not syn and sender_server:
            flip = (not receiver_server) or sender_port < receiver_port
    elif is_udp and sender_server and not receiver_server:
        flip = True
    F[row, F_ORIG_IS_A] = (1 - from_a) if flip else from_a
    if flip:
        _mark_flip(F, H, row)


@njit(cache=True)
def _must_split(F, row, ts, timeout_ns, side, flags, tcp_ok, seq, is_tcp):
    """A packet that cannot belong to the current flow: idle too long, or a new connection's SYN."""
    if ts - F[row, F_LAST_NS] > timeout_ns:
        return True
    if is_tcp and tcp_ok and (flags & TH_SYN) and not (flags & TH_ACK):
        syn_seq = F[row, F_SYNSEQ + side]
        if syn_seq >= 0:
            return syn_seq != seq          # same sequence number: a retransmitted SYN
        return F[row, F_ENDED] == 1
    return False


@njit(cache=True)
def _add_packet(F, H, row, ts, from_a, flags, tcp_ok, ip_len, pay, seq, mss, is_tcp, is_udp):
    side = 0 if from_a == F[row, F_ORIG_IS_A] else 1
    F[row, F_PKTS + side] += 1
    F[row, F_BYTES + side] += ip_len
    F[row, F_PAY + side] += pay
    if pay > F[row, F_MAXPAY + side]:
        F[row, F_MAXPAY + side] = pay
    if ts > F[row, F_LAST_NS]:
        F[row, F_LAST_NS] = ts
    if ts < F[row, F_FIRST_NS]:
        F[row, F_FIRST_NS] = ts
    if is_udp:
        _history(F, H, row, side, H_DATA)     # Zeek's UDP analyzer marks every datagram 'D'/'d'
    if not (is_tcp and tcp_ok):
        return
    syn = (flags & TH_SYN) != 0
    has_ack = (flags & TH_ACK) != 0
    F[row, F_FLAGS + side] |= flags
    if syn and mss > 0 and F[row, F_MSS + side] == 0:
        F[row, F_MSS + side] = mss
    if syn and not has_ack and F[row, F_SYNSEQ + side] < 0:
        F[row, F_SYNSEQ + side] = seq
    # handshake RTT as Wireshark's tcp.analysis.initial_rtt: first SYN -> ACK of the SYN-ACK
    if syn and not has_ack and side == 0 and F[row, F_SYN_NS] < 0:
        F[row, F_SYN_NS] = ts
    elif syn and has_ack and side == 1 and F[row, F_SYN_NS] >= 0:
        F[row, F_SYNACK] = 1
    elif not syn and has_ack and side == 0 and F[row, F_SYNACK] == 1 and F[row, F_RTT_NS] < 0:
        F[row, F_RTT_NS] = ts - F[row, F_SYN_NS]
    # Retransmission: a segment carrying payload that ends at or below the highest
    # sequence number the side already reached. A 1-byte segment ending exactly
    # there is a keep-alive (RFC 9293 3.8.4) or a repeated zero-window probe
    # (3.8.6.1), not a retransmission.
    end = (seq + pay + (1 if syn else 0)) % _SEQ_MOD
    retx = False
    if F[row, F_SEQEND + side] < 0:
        F[row, F_SEQEND + side] = end
    else:
        d = _seq_delta(end, F[row, F_SEQEND + side])
        if d > 0:
            F[row, F_SEQEND + side] = end
        elif pay > 0 and not syn and not (flags & TH_RST) and not (pay == 1 and d == 0):
            retx = True
            F[row, F_RETX + side] += 1
    _tcp_history(F, H, row, side, flags, pay)
    if retx:
        _history(F, H, row, side, H_RETX)
    _tcp_state_machine(F, H, row, side, flags, pay)


# ---- packet rows: what the scan reads per packet, one int64 row each --------
P_TS, P_FRAME, P_FROM_A, P_FLAGS, P_TCP_OK, P_IP_LEN, P_PAY, P_SEQ, P_MSS, P_VLAN, P_IPVER = range(11)
NP = 11


@njit(cache=True)
def pack_packets(ts, frame, from_a, flags, tcp_ok, ip_len, pay, seq, mss, vlan, ipver):
    """Per-packet fields as rows, so that reordering them by flow moves one row per packet."""
    n = len(ts)
    P = np.empty((n, NP), dtype=np.int64)
    for i in range(n):
        P[i, P_TS] = ts[i]
        P[i, P_FRAME] = frame[i]
        P[i, P_FROM_A] = from_a[i]
        P[i, P_FLAGS] = flags[i]
        P[i, P_TCP_OK] = tcp_ok[i]
        P[i, P_IP_LEN] = ip_len[i]
        P[i, P_PAY] = pay[i]
        P[i, P_SEQ] = seq[i]
        P[i, P_MSS] = mss[i]
        P[i, P_VLAN] = vlan[i]
        P[i, P_IPVER] = ipver[i]
    return P


@njit(cache=True)
def scan(s0, n0, seg_start, seg_row, seg_timeout, seg_proto, seg_a_server, seg_b_server, seg_a_port,
         seg_b_port, P, state_F, state_H, out_F, out_H, out_seg, seg_last):
    """Aggregate packet rows P (grouped by flow key, capture order within a key) into flow rows.

    Segment s holds rows seg_start[s]:seg_start[s+1]; seg_row[s] is the open
    flow carried over from earlier batches (-1: none), read but never written.
    Flow rows go to out_*, and seg_last[s] is the row of segment s's last flow
    (still open). Starts at segment s0 / row n0 and stops before a segment
    that might not fit in out_F; returns (rows written, next segment) so the
    caller can grow the output and resume.
    """
    n = n0
    cap = out_F.shape[0]
    nseg = len(seg_start) - 1
    for s in range(s0, nseg):
        if n + (seg_start[s + 1] - seg_start[s]) + 1 > cap:
            return n, s
        is_tcp = seg_proto[s] == 6
        is_udp = seg_proto[s] == 17
        cur = -1
        if seg_row[s] >= 0:
            cur = n
            n += 1
            out_F[cur, :] = state_F[seg_row[s], :]
            out_H[cur, :] = state_H[seg_row[s], :]
            out_seg[cur] = s
        for i in range(seg_start[s], seg_start[s + 1]):
            ts, from_a, flags, tcp_ok, seq = P[i, P_TS], P[i, P_FROM_A], P[i, P_FLAGS], P[i, P_TCP_OK], P[i, P_SEQ]
            if cur >= 0:
                side = 0 if from_a == out_F[cur, F_ORIG_IS_A] else 1
                if _must_split(out_F, cur, ts, seg_timeout[s], side, flags, tcp_ok, seq, is_tcp):
                    cur = -1
            if cur < 0:
                cur = n
                n += 1
                if from_a:
                    sender_server, receiver_server = seg_a_server[s], seg_b_server[s]
                    sender_port, receiver_port = seg_a_port[s], seg_b_port[s]
                else:
                    sender_server, receiver_server = seg_b_server[s], seg_a_server[s]
                    sender_port, receiver_port = seg_b_port[s], seg_a_port[s]
                _start_flow(out_F, out_H, cur, ts, P[i, P_FRAME], from_a, flags, tcp_ok, seq,
                            P[i, P_VLAN], P[i, P_IPVER], is_tcp, is_udp, sender_server, receiver_server,
                            sender_port, receiver_port)
                out_seg[cur] = s
            _add_packet(out_F, out_H, cur, ts, from_a, flags, tcp_ok, P[i, P_IP_LEN], P[i, P_PAY],
                        seq, P[i, P_MSS], is_tcp, is_udp)
        seg_last[s] = cur
    return n, nseg

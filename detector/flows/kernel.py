"""The per-flow update: packets, in capture order, aggregated into open flow records in compiled code.

A flow record is one row of an int64 matrix (`NF` fields, indices below) plus
a row of history letters. Per-direction fields come in pairs: `F_PKTS + side`,
where side 0 is the originator (the flow's `src`) and side 1 the responder.
The TCP state machine is Zeek's endpoint state machine
(src/packet_analysis/protocol/tcp/TCPSessionAdapter.cc), run per packet in
capture order, so `state` reads like Zeek's conn_state.

Open flows live in an open-addressing hash table (linear probing) keyed by
the 64-bit key hash, each hit verified on the full key; `update_flows` walks
a batch once, in capture order, and releases the GIL.

Speed: every function is compiled without numba's reference counting
(`_nrt=False`; none allocates, the arrays belong to the caller) and the
per-packet helpers are inlined into the pass: otherwise each call paid atomic
reference-count updates for each array it was passed and a call frame of
unpacked array structs (together about half the time of the pass).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..cpu import kernel
from ..schema import IP, L_MSS, L_PAYLOAD, L_TCP, L_VLAN, TH_ACK, TH_FIN, TH_RST, TH_SYN

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
# The handshake's times (-1: not seen), from which view.py derives Wireshark's initial RTT (first SYN -> the
# originator's ACK of the SYN-ACK) and its two legs as seen from the capture point: SYN -> SYN-ACK (the server's
# side of the capture point) and SYN-ACK -> ACK (the client's). Each is recorded whatever came before it, so
# merge.py can join a handshake cut across partitions.
F_SYN_NS = 24        # the originator's first SYN (without ACK)
F_SYNACK_NS = 25     # the responder's first SYN-ACK
F_LASTSYN_NS = 26    # the originator's last SYN before that SYN-ACK (the one it answers; later than the first when
                     # the SYN was retransmitted)
F_STATE = 27         # +side: Zeek endpoint state (TCP_* below)
F_PREV = 29          # +side: the state before the last change (Zeek's prev_state)
F_ENDED = 31         # 1 after a RST, or a FIN from both sides
F_HSEEN = 32         # +side: history letters already recorded (bit per letter)
F_HLEN = 34
F_FIRST_FLAGS = 35   # TCP flags of the first packet | FIRST_TCP when it had a TCP header
F_FIRST_SEQ = 36
F_FIRST_FROM_A = 37  # 1 when the first packet was sent by endpoint `a`
F_ACK_NS = 38        # the originator's first ACK without SYN after the first SYN-ACK
F_ACK1_NS = 39       # the originator's first ACK without SYN at all (merge.py: the ACK of an earlier part's SYN-ACK)
F_SYN_RETX = 40      # the originator's SYNs after its first (same sequence number: a new one starts a new flow), each
                     # later than every packet of the flow before it and SYN_RESEND_MIN_NS after the SYN before it
                     # (add_packet: a copy is no retransmission)
# Capture gaps, per side's byte stream, as Zeek's TCP reassembler finds them (_ack_received, _data_captured).
# Positions are 32-bit sequence numbers, -1 unknown.
F_ACKED = 41         # +side: the peer's highest acknowledgement of the side's bytes (Zeek's trim_seq)
F_REACH = 43         # +side: highest sequence number the side's captured bytes, or the peer's acks, reached
F_HOLE_LO = 45       # +side: the open holes (never-captured bytes below F_REACH) lie in [F_HOLE_LO, F_HOLE_HI)
F_HOLE_HI = 47       # +side
F_HOLE_OPEN = 49     # +side: bytes of those holes not yet captured nor acknowledged (0: no open hole)
F_ACK_EVENTS = 51    # +side: acks that advanced over the side's bytes while both ends were established
F_GAP_EVENTS = 53    # +side: those of them that advanced over bytes never captured
F_GAP_BYTES = 55     # +side: the bytes never captured they advanced over (Zeek's content gaps, missed_bytes)
F_SEQ_HOLES = 57     # +side: segments that started above F_REACH (a hole opened in the sequence space)
F_HOLE_BYTES = 59    # +side: the bytes of those holes
F_FIN_AT = 61        # +side: sequence number of the side's last FIN (Zeek's FIN_seq - 1), -1 none
F_SNAP_OPEN = 63     # +side: payload bytes of the side's segments cut by the snapshot length, not yet acked over
F_CUT = 65           # the flow's row in the cut log (below), -1 none
NF = 66

# ---- the cut log ------------------------------------------------------------
# A TCP flow that starts in a table without an open flow of its key may continue a flow of the partition before
# (merge.py): what its tracking did depends on the state that flow left, which this table does not have. Its row
# of the cut log (int64, LOG_W words) holds what merge.py needs to redo the tracking from that state, bounded:
# the flow's first HEAD_MAX packets (replayed), then its packets that may change an endpoint state (entries,
# at most ENTRIES_MAX), each with the ack events that followed it counted whatever the states (the state they
# are counted in is decided at the merge). Endpoints are the key's `a` (0) and `b` (1): the log knows no roles.
HEAD_MAX = 32        # packets replayed: the tracking of a continuation meets the later part's own within them
ENTRIES_MAX = 6      # state-changing packets after the head (a SYN, FIN or RST, an endpoint's first segments)
LG_HEAD_N = 0        # head packets recorded
LG_SENT = 1          # bit e: endpoint e sent a segment no endpoint state stays inactive after (payload, SYN, FIN,
                     # RST)
LG_LAST = 2          # 1 + e when the latest entry is a pure ack of endpoint e not yet `sent` (its repeats change
                     # nothing); -1 when a SYN came after the overflow
LG_ENTRIES = 3       # entries used; ENTRIES_MAX + 1 once more came (overflow)
LG_SPLIT = 4         # the packet that split the flow in its table: ts (-1 none), seq, flags | from_a << 16
LG_OVER = 7          # at the overflow, before its packet: by endpoint state (2), prev state (2), ended, the counted
                     # ack events (2), gap events (2), gap bytes (2) of each endpoint's bytes, and SYN seq (2)
LG_CHAINED = 20      # 1: the log of a flow its key's first flow split off on a SYN (merge.py may need it)
LG_SEG = 21          # per segment (0: after the head; k: after entry k) a word (entry k's packet: flags |
                     # from_a << 16 | has payload << 17 | seq << 18), and the ack events, gap events, gap bytes
SEG_W = 7            # over the bytes of endpoint a, b (in pairs), counted whatever the endpoint states
LG_PKT = LG_SEG + SEG_W * (ENTRIES_MAX + 1)
PKT_W = 4            # a head packet: ts, seq | ack << 32, payload | ip_len << 32, flags | from_a << 16 |
                     # captured << 17 | tcp header << 18 | mss << 19
LOG_W = LG_PKT + PKT_W * HEAD_MAX

# What each packet did to the capture gaps (update_flows' `events`, one code per packet of the batch): the
# per-packet view of F_ACK_EVENTS/F_GAP_EVENTS that lets a rule bin them in time. A gap over bytes that were on
# the wire but cut by the snapshot length (caplen < wire length) is no loss: it has its own code.
EV_NONE = 0
EV_ACK = 1           # an ack event without a gap
EV_GAP = 2           # an ack event over bytes never captured: capture loss
EV_SNAPPED = 3       # an ack event over bytes whose segments were captured but cut by the snapshot length
EV_MID_STREAM = 4    # added to the above in a connection whose opening SYN the capture does not hold (picked up
                     # mid-stream or mid-handshake): what came before is unknown, so a rule may leave it out. In a
                     # connection picked up mid-stream (no SYN of either end seen: partial, whose acks Zeek's
                     # reassembler does not count), an ack of an end whose payload the capture holds (none held: a
                     # capture of the other direction only) gets its event all the same, marked so (_partial_event)

# What a packet of a flow with a cut log row is to the merge (update_flows' `cut_slot`): the index of its head packet
# (redone at the merge), SLOT_SEGMENT + the segment its ack event is counted in, or SLOT_OVER after the log overflowed
# (the later part's own run goes on). merge.py says, per slot of a connection it joined, what the packets' events
# are in one pass (merge.CutJoins), so the rule that bins the events (capture loss) can settle them.
SLOT_SEGMENT = HEAD_MAX
SLOT_OVER = HEAD_MAX + ENTRIES_MAX + 1
SLOTS = SLOT_OVER + 1

FIRST_TCP = 0x10000
# The least time a stack waits before it sends its SYN again: Linux's TCP_RTO_MIN, 200 ms (its SYN's own first timeout
# is TCP_TIMEOUT_INIT, 1 s; Windows', FreeBSD's and macOS' are 1 to 3 s, and none goes below 200 ms). The same SYN
# sooner is a copy the capture holds twice: relayed by a host in the middle (an ARP spoofer forwarding the frame it
# drew), or mirrored from two ports of a SPAN session. Longer would take a stack tuned below it for copies.
SYN_RESEND_MIN_NS = 200_000_000
HIST_MAX = 24        # history letters kept per flow (Zeek records each kind once per side);
                     # a multiple of 8: finish() reads the rows as uint64 words

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
RESPONDER_CASE = 32          # a responder's letter is its originator letter's lower case

# Zeek checks for a SYN-ACK/data reversal and for SYN "reuse" on sequence
# numbers; a 32-bit wrap-safe difference does the same here.
_SEQ_MOD = 1 << 32


@njit(_nrt=False, inline="always")
def _seq_delta(a, b):
    """a - b in 32-bit sequence space, as a signed number (RFC 9293 modular compare)."""
    d = (a - b) % _SEQ_MOD
    if d >= (1 << 31):
        d -= _SEQ_MOD
    return d


@njit(_nrt=False, inline="always")
def record_history(F, H, row, side, kind):
    """Zeek's history rule: the letter of `kind` once per side, upper case for the originator and lower
    case for the responder, up to HIST_MAX letters (merge.py records a later partition's letters by it)."""
    bit = _H_BITS[kind]
    if F[row, F_HSEEN + side] & bit:
        return
    F[row, F_HSEEN + side] |= bit
    n = F[row, F_HLEN]
    if n < HIST_MAX:
        c = _H_CHARS[kind]
        H[row, n] = c if side == 0 else c + RESPONDER_CASE
        F[row, F_HLEN] = n + 1


@njit(_nrt=False, inline="always")
def history_kind(letter):
    """The kind (H_*) of an originator's history letter."""
    for kind in range(len(_H_CHARS)):
        if _H_CHARS[kind] == letter:
            return kind
    return -1


@njit(_nrt=False, inline="always")
def _mark_flip(F, H, row):
    n = F[row, F_HLEN]
    if n < HIST_MAX:
        H[row, n] = FLIP_MARK
        F[row, F_HLEN] = n + 1


@njit(_nrt=False, inline="always")
def _set_state(F, row, side, state):
    F[row, F_PREV + side] = F[row, F_STATE + side]
    F[row, F_STATE + side] = state


@njit(_nrt=False, inline="always")
def _flip_roles(F, H, row):
    """Swap originator and responder (Zeek's FlipRoles)."""
    for base in (F_PKTS, F_BYTES, F_PAY, F_FLAGS, F_MSS, F_MAXPAY, F_RETX, F_SEQEND, F_SYNSEQ,
                 F_STATE, F_PREV, F_HSEEN, F_ACKED, F_REACH, F_HOLE_LO, F_HOLE_HI, F_HOLE_OPEN,
                 F_ACK_EVENTS, F_GAP_EVENTS, F_GAP_BYTES, F_SEQ_HOLES, F_HOLE_BYTES, F_FIN_AT, F_SNAP_OPEN):
        t = F[row, base]
        F[row, base] = F[row, base + 1]
        F[row, base + 1] = t
    F[row, F_ORIG_IS_A] = 1 - F[row, F_ORIG_IS_A]
    _mark_flip(F, H, row)


@njit(_nrt=False, inline="always")
def tcp_state_machine(F, H, row, side, flags, length):
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


@njit(_nrt=False, inline="always")
def _tcp_history(F, H, row, side, flags, length):
    """Zeek's update_history: each kind of packet recorded once per side."""
    syn = (flags & TH_SYN) != 0
    fin = (flags & TH_FIN) != 0
    rst = (flags & TH_RST) != 0
    bits = int(syn) + int(fin) + int(rst)
    if bits > 1:
        record_history(F, H, row, side, H_FINRST if (fin and rst) else H_MULTI)
    elif syn:
        record_history(F, H, row, side, H_SYNACK if (flags & TH_ACK) else H_SYN)
    elif fin:
        record_history(F, H, row, side, H_FIN)
    elif rst:
        record_history(F, H, row, side, H_RST)
    elif length > 0:
        record_history(F, H, row, side, H_DATA)
    elif flags & TH_ACK:
        record_history(F, H, row, side, H_ACK)


@njit(_nrt=False, inline="always")
def start_flow(F, H, row, ts, frame, from_a, flags, tcp_ok, seq, vlan, ipver, is_tcp, is_udp,
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
    F[row, F_CUT] = -1
    for j in (F_SYN_NS, F_SYNACK_NS, F_LASTSYN_NS, F_ACK_NS, F_ACK1_NS, F_ACKED, F_ACKED + 1, F_REACH, F_REACH + 1,
              F_FIN_AT, F_FIN_AT + 1):
        F[row, j] = -1
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


@njit(_nrt=False, inline="always")
def must_split(F, row, ts, timeout_ns, side, flags, tcp_ok, seq, is_tcp):
    """A packet that cannot belong to the current flow: idle too long, or a new connection's SYN (the
    rule merge.py applies to a later partition's first packet too)."""
    if ts - F[row, F_LAST_NS] > timeout_ns:
        return True
    if is_tcp and tcp_ok and (flags & TH_SYN) and not (flags & TH_ACK):
        syn_seq = F[row, F_SYNSEQ + side]
        if syn_seq >= 0:
            return syn_seq != seq          # same sequence number: a retransmitted SYN
        return F[row, F_ENDED] == 1
    return False


@njit(_nrt=False, inline="always")
def add_packet(F, H, row, ts, from_a, flags, tcp_ok, ip_len, pay, seq, ack, captured, mss, is_tcp, is_udp):
    """Fold one packet into flow `row`; returns what it did to the capture gaps (EV_*), the bytes never
    captured its ack advanced over, whatever the endpoint states (-1: it advanced nothing), and its event had both
    endpoints been clean (EV_NONE, EV_ACK, EV_GAP or EV_SNAPPED)."""
    side = 0 if from_a == F[row, F_ORIG_IS_A] else 1
    F[row, F_PKTS + side] += 1
    F[row, F_BYTES + side] += ip_len
    F[row, F_PAY + side] += pay
    if pay > F[row, F_MAXPAY + side]:
        F[row, F_MAXPAY + side] = pay
    # later than every packet of the flow before it: a SYN sent again that is not is a copy (below)
    latest = ts > F[row, F_LAST_NS]
    if latest:
        F[row, F_LAST_NS] = ts
    if ts < F[row, F_FIRST_NS]:
        F[row, F_FIRST_NS] = ts
    if is_udp:
        record_history(F, H, row, side, H_DATA)     # Zeek's UDP analyzer marks every datagram 'D'/'d'
    if not (is_tcp and tcp_ok):
        return EV_NONE, -1, EV_NONE
    syn = (flags & TH_SYN) != 0
    has_ack = (flags & TH_ACK) != 0
    F[row, F_FLAGS + side] |= flags
    if syn and mss > 0 and F[row, F_MSS + side] == 0:
        F[row, F_MSS + side] = mss
    if syn and not has_ack and F[row, F_SYNSEQ + side] < 0:
        F[row, F_SYNSEQ + side] = seq
    # the handshake's times (F_SYN_NS .. F_SYN_RETX above). A SYN the originator sends again waits for its
    # retransmission timer (RFC 6298 2.1: an initial RTO of 1 s; Linux TCP_TIMEOUT_INIT), so it comes later
    # than every packet of the flow before it, and SYN_RESEND_MIN_NS at least after the SYN before it; one that does
    # not is the capture's copy of an earlier one: at the same instant (a trace merged with itself, a frame seen on
    # two interfaces), earlier (a trace appended to itself, time gone back) or just after it (relayed, mirrored
    # twice). A copy is no retransmission, and does not move the SYN the SYN-ACK answers back in time.
    if side == 0:
        if syn and not has_ack:
            if F[row, F_SYN_NS] < 0:
                F[row, F_SYN_NS] = ts
            elif latest and ts - F[row, F_LASTSYN_NS] >= SYN_RESEND_MIN_NS:
                F[row, F_SYN_RETX] += 1
            if F[row, F_SYNACK_NS] < 0 and ts >= F[row, F_LASTSYN_NS]:
                F[row, F_LASTSYN_NS] = ts
        elif not syn and has_ack:
            if F[row, F_ACK1_NS] < 0:
                F[row, F_ACK1_NS] = ts
            if F[row, F_ACK_NS] < 0 and F[row, F_SYNACK_NS] >= 0:
                F[row, F_ACK_NS] = ts
    elif syn and has_ack and F[row, F_SYNACK_NS] < 0:
        F[row, F_SYNACK_NS] = ts
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
        record_history(F, H, row, side, H_RETX)
    tcp_state_machine(F, H, row, side, flags, pay)
    side = 0 if from_a == F[row, F_ORIG_IS_A] else 1      # the state machine may have flipped the roles
    # Zeek's order: the state machine, then the ack (of the peer's bytes), then this side's bytes
    missing = -1
    event = EV_NONE
    kind = EV_NONE
    if has_ack:
        missing, snapped = _ack_received(F, row, 1 - side, ack)
        kind = _event_kind(missing, snapped)
        event = _ack_event(F, row, 1 - side, missing, kind)
        if event == EV_NONE and _partial_event(F, row, 1 - side):
            event = kind
    _data_captured(F, row, side, flags, seq, pay, captured)
    return event, missing, kind


# ---- capture gaps -------------------------------------------------------------
# Zeek's reassembler (src/analyzer/protocol/tcp/TCP_Reassembler.cc) keeps each side's bytes until the
# peer acknowledges them; an ack that advances over bytes it never received is a content gap
# (`AckReceived` -> `TrimToSeq` -> `Undelivered` -> `Gap`), summed into conn.log's missed_bytes and, as
# ack and gap events, into the ratio of Zeek's capture loss script. Here no bytes are kept: each side keeps
# how far its captured bytes reached and the span of the holes below that point, which is exact while one hole
# is open at a time (holes that overlap in time are joined into one span: their bytes stay exact once
# an ack passes the span, the events may be fewer). Not modelled: Zeek stops reassembling a side that
# sent more than 16 KB above a hole before any of its bytes was acknowledged, or 10 MB without a further
# ack (tcp_max_above_hole_without_any_acks, tcp_excessive_data_without_further_acks), and so reports no
# gap after that; it drops segments with a bad checksum, which are captured bytes here.


@njit(_nrt=False, inline="always")
def clean(F, row, side):
    """Zeek's is_clean: the endpoint is established, or closed after being established."""
    state = F[row, F_STATE + side]
    return state == TCP_ESTABLISHED or (state == TCP_CLOSED and F[row, F_PREV + side] == TCP_ESTABLISHED)


@njit(_nrt=False, inline="always")
def _ack_received(F, row, side, ack):
    """The peer acknowledged the bytes of `side` up to `ack` (Zeek's TCP_Reassembler::AckReceived).

    An ack at or below the highest one before does nothing. Otherwise the
    open holes below it and the bytes between the side's reach and it were
    never captured: a gap. Returns those bytes (-1: the ack advanced
    nothing) and how many of them the side's segments cut by the snapshot
    length held; _ack_event counts them.
    """
    fin_at = F[row, F_FIN_AT + side]
    if fin_at >= 0 and _seq_delta(ack, fin_at) > 0:
        ack = fin_at               # the side's FIN takes a sequence number but is no byte
    acked = F[row, F_ACKED + side]
    if acked < 0:                  # nothing of the side seen yet: its bytes start here (Zeek's init_peer)
        F[row, F_ACKED + side] = ack
        F[row, F_REACH + side] = ack
        return -1, 0
    if _seq_delta(ack, acked) <= 0:
        return -1, 0
    F[row, F_ACKED + side] = ack
    missing = 0
    open_bytes = F[row, F_HOLE_OPEN + side]
    if open_bytes > 0:
        into = _seq_delta(ack, F[row, F_HOLE_LO + side])
        if into > 0:
            if _seq_delta(ack, F[row, F_HOLE_HI + side]) >= 0:
                missing = open_bytes
            else:
                missing = min(open_bytes, into)
                F[row, F_HOLE_LO + side] = ack
            F[row, F_HOLE_OPEN + side] = open_bytes - missing
    beyond = _seq_delta(ack, F[row, F_REACH + side])
    if beyond > 0:
        missing += beyond
        F[row, F_REACH + side] = ack
    snapped = min(missing, F[row, F_SNAP_OPEN + side])
    F[row, F_SNAP_OPEN + side] -= snapped
    return missing, snapped


@njit(_nrt=False, inline="always")
def _event_kind(missing, snapped):
    """The event of an ack that advanced over `missing` bytes never captured (-1: it advanced nothing), `snapped` of
    them held by segments cut by the snapshot length, whatever the endpoint states: a gap over no more bytes than
    those is EV_SNAPPED, not loss."""
    if missing < 0:
        return EV_NONE
    if missing == 0:
        return EV_ACK
    return EV_SNAPPED if missing == snapped else EV_GAP


@njit(_nrt=False, inline="always")
def _partial_event(F, row, side):
    """Whether an ack of `side`'s bytes that Zeek's reassembler does not count has an event all the same (update_flows
    marks it EV_MID_STREAM): the connection was picked up mid-stream (no SYN of either end seen, so neither end is
    clean) and the side's payload is in the capture, which its bytes are then measured against. A side none of whose
    payload the capture holds is one the capture does not see (a one-direction capture): its acks say nothing of
    loss. Its flow record counts no event (F_ACK_EVENTS: Zeek's, whose report_gaps_for_partial is off)."""
    return ((F[row, F_FLAGS] | F[row, F_FLAGS + 1]) & TH_SYN) == 0 and F[row, F_PAY + side] > 0


@njit(_nrt=False, inline="always")
def _ack_event(F, row, side, missing, kind):
    """Count an ack of `side`'s bytes of event `kind` (_event_kind) that advanced over `missing` bytes never
    captured, as Zeek reports content gaps: only while both ends are established or cleanly closing (a partial
    connection, picked up mid-stream, advances uncounted). Returns the event (EV_*)."""
    if kind == EV_NONE or not (clean(F, row, side) and clean(F, row, 1 - side)):
        return EV_NONE
    F[row, F_ACK_EVENTS + side] += 1
    if kind == EV_ACK:
        return EV_ACK
    F[row, F_GAP_EVENTS + side] += 1
    F[row, F_GAP_BYTES + side] += missing
    return kind


@njit(_nrt=False, inline="always")
def _data_captured(F, row, side, flags, seq, pay, captured):
    """The bytes of one segment of `side` (Zeek's DataSent): a hole when they start above the side's reach,
    filling the open holes they overlap when below it. A SYN's sequence number is no byte, a RST's
    payload is not part of the stream, and a segment cut by the snapshot length was not captured."""
    start = (seq + 1) % _SEQ_MOD if flags & TH_SYN else seq
    if F[row, F_ACKED + side] < 0:
        F[row, F_ACKED + side] = start
        F[row, F_REACH + side] = start
    if flags & TH_FIN:
        F[row, F_FIN_AT + side] = (start + pay) % _SEQ_MOD
    if pay <= 0 or (flags & TH_RST):
        return
    if not captured:
        # on the wire, not in the capture: Zeek's gap all the same, but not loss (the ack's EV_SNAPPED)
        F[row, F_SNAP_OPEN + side] += pay
        return
    end = (start + pay) % _SEQ_MOD
    reach = F[row, F_REACH + side]
    ahead = _seq_delta(start, reach)
    if ahead > 0:
        F[row, F_SEQ_HOLES + side] += 1
        F[row, F_HOLE_BYTES + side] += ahead
        if F[row, F_HOLE_OPEN + side] == 0:
            F[row, F_HOLE_LO + side] = reach
        F[row, F_HOLE_HI + side] = start
        F[row, F_HOLE_OPEN + side] += ahead
        F[row, F_REACH + side] = end
        return
    if _seq_delta(end, reach) > 0:
        F[row, F_REACH + side] = end
    open_bytes = F[row, F_HOLE_OPEN + side]
    if open_bytes > 0:
        lo = F[row, F_HOLE_LO + side]
        span = _seq_delta(F[row, F_HOLE_HI + side], lo)
        from_lo = _seq_delta(start, lo)
        to_hi = min(_seq_delta(end, lo), span)
        filled = to_hi - max(from_lo, 0)
        if filled > 0:
            open_bytes = max(open_bytes - filled, 0)
            if from_lo <= 0:
                F[row, F_HOLE_LO + side] = (lo + to_hi) % _SEQ_MOD
            elif to_hi == span:
                F[row, F_HOLE_HI + side] = start
            F[row, F_HOLE_OPEN + side] = min(open_bytes, _seq_delta(F[row, F_HOLE_HI + side],
                                                                   F[row, F_HOLE_LO + side]))


# ---- the cut log (its layout above) ------------------------------------------------


@njit(_nrt=False, inline="always")
def server_hints(word, from_a, server_port):
    """Zeek's likely-server-port hints for _start_flow, from a key's last word (proto << 32 | a port << 16 |
    b port) and the sender: (sender is a server port, receiver is, sender's port, receiver's port)."""
    proto = np.int64(word >> np.uint64(32))
    a_port = np.int64((word >> np.uint64(16)) & np.uint64(0xFFFF))
    b_port = np.int64(word & np.uint64(0xFFFF))
    ported = proto == 6 or proto == 17
    a_server = ported and server_port[a_port]
    b_server = ported and server_port[b_port]
    if from_a:
        return a_server, b_server, a_port, b_port
    return b_server, a_server, b_port, a_port


@njit(_nrt=False, inline="always")
def _log_packet(CL, c, F, row, ts, a, flags, tcp_ok, seq, ack, pay, ip_len, captured, mss):
    """Record a packet of a flow with cut log row `c`, before the pass folds it in. Returns the segment its
    ack event is counted in (-1: none, the packet is in the head or the log overflowed)."""
    e = 1 - a                          # the sender's endpoint
    special = (flags & (TH_SYN | TH_FIN | TH_RST)) != 0
    takes_out = tcp_ok and (pay > 0 or special)
    n = CL[c, LG_HEAD_N]
    if n < HEAD_MAX:
        at = LG_PKT + PKT_W * n
        CL[c, at] = ts
        CL[c, at + 1] = seq | (ack << 32)
        CL[c, at + 2] = pay | (ip_len << 32)
        CL[c, at + 3] = flags | (a << 16) | (np.int64(captured) << 17) | (np.int64(tcp_ok) << 18) | (mss << 19)
        CL[c, LG_HEAD_N] = n + 1
        if takes_out:
            CL[c, LG_SENT] |= 1 << e
        return -1
    used = CL[c, LG_ENTRIES]
    if used > ENTRIES_MAX:
        if tcp_ok and (flags & TH_SYN) and not (flags & TH_ACK):
            CL[c, LG_LAST] = -1        # a SYN after the overflow: the split rule's SYN numbers must agree
        return -1
    if not tcp_ok:
        return used
    sent = (CL[c, LG_SENT] >> e) & 1
    significant = special or (sent == 0 and CL[c, LG_LAST] != 1 + e)
    if takes_out:
        CL[c, LG_SENT] |= 1 << e
    if not significant:
        return used
    if used == ENTRIES_MAX:
        for end in range(2):
            side = end if F[row, F_ORIG_IS_A] else 1 - end
            CL[c, LG_OVER + end] = F[row, F_STATE + side]
            CL[c, LG_OVER + 2 + end] = F[row, F_PREV + side]
            CL[c, LG_OVER + 5 + end] = F[row, F_ACK_EVENTS + side]
            CL[c, LG_OVER + 7 + end] = F[row, F_GAP_EVENTS + side]
            CL[c, LG_OVER + 9 + end] = F[row, F_GAP_BYTES + side]
            CL[c, LG_OVER + 11 + end] = F[row, F_SYNSEQ + side]
        CL[c, LG_OVER + 4] = F[row, F_ENDED]
        CL[c, LG_ENTRIES] = ENTRIES_MAX + 1
        return -1
    used += 1
    CL[c, LG_SEG + SEG_W * used] = flags | (a << 16) | (np.int64(pay > 0) << 17) | (seq << 18)
    CL[c, LG_ENTRIES] = used
    CL[c, LG_LAST] = 1 + e if not special and pay == 0 and sent == 0 else 0
    return used


@njit(_nrt=False, inline="always")
def _log_ack(CL, c, segment, a, missing):
    """Count in `segment` an ack of the sender's peer's bytes that advanced over `missing` bytes never captured."""
    at = LG_SEG + SEG_W * segment + 1 + a     # a sender `a` (from_a 1) acks the bytes of endpoint b (1)
    CL[c, at] += 1
    if missing > 0:
        CL[c, at + 2] += 1
        CL[c, at + 4] += missing


# ---- the open-flow hash table and the per-batch pass ------------------------
# Longest probe run tolerated before the table is rehashed with another seed:
# at the load factor kept (at most 1/2) runs average 1.5 probes and one of
# 128 does not occur by chance; it means keys crafted to collide.
MAX_PROBES = 128
# counts[]: rows in use of the open and done arenas, newest packet time of the pass
C_OPEN, C_DONE, C_NEWEST, C_LOG = 0, 1, 2, 3
NO_TIME = np.iinfo(np.int64).min


@kernel("(u8[::1], i8[::1], u8[::1])", _nrt=False, nogil=True)
def build_table(h, tab_row, tab_h):
    """Index open rows 0..len(h)-1 by hash; False when two share a hash or a run is too long."""
    for slot in range(len(tab_row)):
        tab_row[slot] = -1
    mask = np.uint64(len(tab_row) - 1)
    for r in range(len(h)):
        slot = np.int64(h[r] & mask)
        probes = 0
        while tab_row[slot] >= 0:
            if tab_h[slot] == h[r]:
                return False
            slot = np.int64((np.uint64(slot) + np.uint64(1)) & mask)
            probes += 1
            if probes > MAX_PROBES:
                return False
        tab_row[slot] = r
        tab_h[slot] = h[r]
    return True


@kernel("(i8, u8[:, ::1], u8[::1], u1[::1], u4[::1], i8[::1], i8[::1], u2[::1], u4[::1], u4[::1], u2[::1], "
        "u4[::1], u2[::1], u4[::1], u4[::1], u2[::1], u1[::1], i8[::1], b1[::1], i8[::1], u8[::1], i8[:, ::1], "
        "u1[:, ::1], u8[:, ::1], i8[:, ::1], u1[:, ::1], u8[:, ::1], i8[:, ::1], i8[::1], i1[::1], i8[::1], i1[::1], "
        "i1[::1])", _nrt=False, nogil=True)
def update_flows(i0, K, h, from_a, layers, ts_ns, frame, tcp_flags, tcp_seq, tcp_ack, tcp_mss, payload_len,
                 payload_off, caplen, ip_len, vlan, ip_version, timeout_ns, server_port, tab_row, tab_h, OF, OH, OK,
                 DF, DH, DK, CL, counts, events, cut_flow, cut_slot, cut_kind):
    """Add packets i0.. (rows whose `layers` have an IP bit; others are skipped) to the open flows.

    Packet i has key row K[i] and hash h[i]; its other fields are valid under
    the schema's layer bits. A packet without an open flow of its key starts
    one at the end of the open arena (OF, OH, OK) and in the table; a packet
    that must start a new flow of an open key moves the old one to the done
    arena (DF, DH, DK) first. A TCP flow started without an open flow of its
    key gets a row of the cut log CL. The caller reserves room for one new
    open, one new done and one new cut log row per packet. events[i] is set to what packet i did to
    the capture gaps (EV_*; rows skipped are left alone). A packet of a flow with a cut log row that did not
    open with a SYN (it may have opened in an earlier partition), or that is chained (LG_CHAINED), also gets
    the flow's first frame in
    cut_flow[i], its slot (SLOT_* above) in cut_slot[i] and, in cut_kind[i], its event had both endpoints been
    clean (add_packet); other rows are left alone. Returns len(K), or the packet
    at which two keys share a hash or a probe run grew too long: rehash, then resume there.
    """
    mask = np.uint64(len(tab_row) - 1)
    n_open, n_done, newest, n_log = counts[C_OPEN], counts[C_DONE], counts[C_NEWEST], counts[C_LOG]
    stop = len(K)
    for i in range(i0, len(K)):
        lay = layers[i]
        if (lay & IP) == 0:
            continue
        hv = h[i]
        slot = np.int64(hv & mask)
        probes = 0
        row = -1
        collided = False
        while tab_row[slot] >= 0:
            r = tab_row[slot]
            if tab_h[slot] == hv:
                if OK[r, 0] == K[i, 0] and OK[r, 1] == K[i, 1] and OK[r, 2] == K[i, 2] and \
                        OK[r, 3] == K[i, 3] and OK[r, 4] == K[i, 4]:
                    row = r
                else:
                    collided = True
                break
            slot = np.int64((np.uint64(slot) + np.uint64(1)) & mask)
            probes += 1
            if probes > MAX_PROBES:
                collided = True
                break
        if collided:
            stop = i
            break
        ts = np.int64(ts_ns[i])
        a = np.int64(from_a[i])
        tcp_ok = (lay & L_TCP) != 0
        flags = np.int64(tcp_flags[i]) if tcp_ok else np.int64(0)
        seq = np.int64(tcp_seq[i]) if tcp_ok else np.int64(0)
        pay = np.int64(0)
        captured = False
        if (lay & L_PAYLOAD) != 0:
            pay = np.int64(payload_len[i])
            captured = np.int64(payload_off[i]) + pay <= np.int64(caplen[i])
        ack = np.int64(tcp_ack[i]) if tcp_ok else np.int64(0)
        mss = np.int64(tcp_mss[i]) if (lay & L_MSS) != 0 else np.int64(0)
        word = K[i, 4]
        proto = np.int64(word >> np.uint64(32))
        is_tcp = proto == 6
        is_udp = proto == 17
        start = row < 0
        first_of_key = start           # no open flow of the key: it may continue one of an earlier partition
        chain = False
        if start:
            row = n_open
            n_open += 1
            tab_row[slot] = row
            tab_h[slot] = hv
            for j in range(5):
                OK[row, j] = K[i, j]
        else:
            side = 0 if a == OF[row, F_ORIG_IS_A] else 1
            if must_split(OF, row, ts, timeout_ns[proto], side, flags, tcp_ok, seq, is_tcp):
                c = OF[row, F_CUT]
                if c >= 0:
                    # a split on a SYN that one pass, knowing the flow's earlier part, may not make: the next flow
                    # gets a log too (once), for merge.py to continue the connection through it
                    chain = CL[c, LG_CHAINED] == 0 and ts - OF[row, F_LAST_NS] <= timeout_ns[proto]
                    CL[c, LG_SPLIT] = ts
                    CL[c, LG_SPLIT + 1] = seq
                    CL[c, LG_SPLIT + 2] = flags | (a << 16)
                for j in range(NF):
                    DF[n_done, j] = OF[row, j]
                for j in range(HIST_MAX):
                    DH[n_done, j] = OH[row, j]
                for j in range(5):
                    DK[n_done, j] = OK[row, j]
                n_done += 1
                start = True
        if start:
            sender_server, receiver_server, sender_port, receiver_port = server_hints(word, a, server_port)
            vl = np.int64(vlan[i]) if (lay & L_VLAN) != 0 else np.int64(0)
            start_flow(OF, OH, row, ts, np.int64(frame[i]), a, flags, tcp_ok, seq, vl, np.int64(ip_version[i]),
                        is_tcp, is_udp, sender_server, receiver_server, sender_port, receiver_port)
            if is_tcp and (first_of_key or chain):
                for j in range(LOG_W):
                    CL[n_log, j] = 0
                CL[n_log, LG_SPLIT] = -1
                CL[n_log, LG_CHAINED] = np.int64(chain)
                OF[row, F_CUT] = n_log
                n_log += 1
        c = OF[row, F_CUT]
        ip_bytes = np.int64(ip_len[i])
        segment = -1
        # a flow that did not open here with a SYN may continue one whose start an earlier partition holds, and so
        # may one its key's flow split off on a SYN (LG_CHAINED: merge.py may continue the connection through it)
        picked_up = c >= 0 and ((OF[row, F_FIRST_FLAGS] & (TH_SYN | TH_ACK)) != TH_SYN or CL[c, LG_CHAINED] == 1)
        if c >= 0:
            head = CL[c, LG_HEAD_N]
            segment = _log_packet(CL, c, OF, row, ts, a, flags, tcp_ok, seq, ack, pay, ip_bytes, captured, mss)
            if picked_up:
                cut_flow[i] = OF[row, F_FIRST_FRAME]
                cut_slot[i] = head if head < HEAD_MAX else (SLOT_SEGMENT + segment if segment >= 0 else SLOT_OVER)
        event, missing, kind = add_packet(OF, OH, row, ts, a, flags, tcp_ok, ip_bytes, pay, seq, ack, captured, mss,
                                           is_tcp, is_udp)
        if picked_up:
            cut_kind[i] = kind
        if segment >= 0 and missing >= 0:
            _log_ack(CL, c, segment, a, missing)
        if event != EV_NONE and OF[row, F_SYN_NS] < 0:
            event += EV_MID_STREAM
        events[i] = event
        if ts > newest:
            newest = ts
    counts[C_OPEN], counts[C_DONE], counts[C_NEWEST], counts[C_LOG] = n_open, n_done, newest, n_log
    return stop

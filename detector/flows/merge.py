"""The partition merge: a flow table absorbs the table of the packets that follow its own.

A flow cut by the partition boundary is open in the earlier table and is the
earliest flow of its key in the later one. Whether the later part continues
it is the flow pass's own rule (kernel.must_split, applied to the later
part's first packet). Counters, times, flags, MSS and payload maxima combine
exactly field by field, as do a UDP or ICMP flow's records.

A TCP connection's tracking (endpoint states, retransmissions, capture gaps,
history, handshake times) depends on the state the earlier part left, which
the later part's own run did not have: it saw the connection mid-stream. So
the later part keeps, for each TCP flow it started without an open flow of
its key, a row of the cut log (kernel.py, bounded: kernel.LOG_W words): its
first kernel.HEAD_MAX packets, then its packets that may change an endpoint
state (SYN, FIN, RST, an endpoint's first segments; at most
kernel.ENTRIES_MAX), each with the ack events after it counted whatever the
states. The merge redoes the head from the earlier part's state with the
pass's own functions (kernel.add_packet), and its own run from a fresh start
beside it; where the two runs' tracking meets at the end of the head, the
later part's counts after it are the continuation's, except the ack events,
which the entries count in the endpoint states redone over them. No packet
travels. What the redone tracking makes of each later packet's capture-gap
event (kernel.EV_*) the merge returns as CutJoins (FlowTable.absorb), for
the rule that bins those events (capture loss), which the later part's own
run marked as it saw them.

Exact but for these residual cases, where the merge falls back to adding
the parts' counters (the table's `inexact_joins` counts them; each has a
strict test in tests/test_flows_cut.py):
- the tracking has not met by the end of the head: capture gaps still open
  HEAD_MAX packets after the cut (no ack over a hole open at the cut) and
  acked later, or a retransmission burst reaching back over the cut longer
  than the head. (A side whose bytes nobody acks after the head, as in a
  capture of one direction, needs only its reach to meet: its holes after
  the head are followed from the later part's while they only open.)
- the later part's own run splits the connection where one pass does not
  (a retransmitted SYN after a RST, whose number only the earlier part saw)
  twice: the flow split off the first time has a log of its own
  (kernel.LG_CHAINED) and the continuation goes on through it, not further;
  or the continuation splits inside the head;
- more than ENTRIES_MAX state changes after the head, when the endpoint
  states (or previous states) of the two runs differ at the overflow;
- the roles flip after the head, or handshake packets come after it that
  the two runs, having seen different ones in the head, read differently;
- a later part that is itself a merge of tables (a joined flow's log would
  describe its earlier part alone: it is dropped), as in a tree reduction;
  the cluster merges partitions one after the other.
Timestamps out of capture order across the cut by more than a flow's idle
timeout are outside the model, as in the pass.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..cpu import kernel
from ..schema import PROTO_TCP, TH_ACK, TH_SYN
from . import kernel as k
from . import keys as K_
from .kernel import (
    F_FIRST_FLAGS,
    F_FIRST_FROM_A,
    F_FIRST_NS,
    F_FIRST_SEQ,
    F_HLEN,
    F_ORIG_IS_A,
    FIRST_TCP,
    FLIP_MARK,
    RESPONDER_CASE,
    history_kind,
    must_split,
    record_history,
)

LOWER_CASE_FIRST = ord("a")   # history letters from here on are the responder's


@kernel("(i8[:, ::1], i8[:, ::1], u1[::1], i8[::1], b1[::1])", _nrt=False, nogil=True)
def continuations(earlier, later, proto, timeout_ns, out):
    """Whether each later partial flow continues the earlier open one of its key (row by row), by the
    rule that splits a flow in the pass: the gap before the later part's first packet, or a new
    connection's SYN. `timeout_ns` is indexed by IP protocol, as in the pass."""
    for r in range(out.shape[0]):
        first_flags = later[r, F_FIRST_FLAGS]
        side = 0 if later[r, F_FIRST_FROM_A] == earlier[r, F_ORIG_IS_A] else 1
        out[r] = not must_split(earlier, r, later[r, F_FIRST_NS], timeout_ns[proto[r]], side, first_flags,
                                (first_flags & FIRST_TCP) != 0, later[r, F_FIRST_SEQ], proto[r] == PROTO_TCP)


@kernel("(i8[:, ::1], u1[:, ::1], i8[:, ::1], u1[:, ::1], b1[::1])", _nrt=False, nogil=True)
def add_later_history(F, H, later_F, later_H, same_direction):
    """Record in each flow (F, H) the history letters of its later part (later_F, later_H, row by row).

    Each letter counts for the side that sent it: the same side when the
    later part took the same originator (`same_direction`), the other one
    otherwise. The later part's flip marks are its own, not carried over.
    """
    for r in range(F.shape[0]):
        for j in range(later_F[r, F_HLEN]):
            letter = np.int64(later_H[r, j])
            if letter == FLIP_MARK:
                continue
            later_side = 1 if letter >= LOWER_CASE_FIRST else 0
            side = later_side if same_direction[r] else 1 - later_side
            record_history(F, H, r, side, history_kind(letter - RESPONDER_CASE * later_side))


# What redoing a continuation came to (replay_continuations)
REDONE, NOT_EXACT, GOES_ON, THROUGH_NEXT = 0, 1, 2, 3
# The tracking fields the later part's own run must share with the continuation after the head for the rest of
# its run to be the continuation's (the endpoint states are not among them: the entries redo them).
_TRACKED = (k.F_SEQEND, k.F_ACKED, k.F_REACH, k.F_HOLE_OPEN, k.F_FIN_AT, k.F_SNAP_OPEN)
_HOLE_SPAN = (k.F_HOLE_LO, k.F_HOLE_HI)
_TRACKED_ALL = _TRACKED + _HOLE_SPAN
# The handshake's times that are set once (kernel.F_SYN_NS ..)
_HANDSHAKE_ONCE = (k.F_SYN_NS, k.F_SYNACK_NS, k.F_ACK_NS, k.F_ACK1_NS)
# Counters the later part's run adds to the continuation's after the head, whatever the endpoint states
_ADDED_AFTER_HEAD = (k.F_PKTS, k.F_BYTES, k.F_PAY, k.F_RETX, k.F_SEQ_HOLES, k.F_HOLE_BYTES)


@njit(_nrt=False, inline="always")
def _head_packet(CL, c, i):
    """The i-th head packet of cut log row c: (ts, from_a, flags, tcp header, seq, ack, payload, ip_len,
    captured, mss)."""
    at = k.LG_PKT + k.PKT_W * i
    w1, w2, w3 = CL[c, at + 1], CL[c, at + 2], CL[c, at + 3]
    return (CL[c, at], (w3 >> 16) & 1, w3 & 0xFFFF, ((w3 >> 18) & 1) == 1, w1 & 0xFFFFFFFF, (w1 >> 32) & 0xFFFFFFFF,
            w2 & 0xFFFFFFFF, w2 >> 32, ((w3 >> 17) & 1) == 1, w3 >> 19)


@njit(_nrt=False, inline="always")
def _side(F, row, from_a):
    return 0 if from_a == F[row, F_ORIG_IS_A] else 1


@njit(_nrt=False, inline="always")
def _count_segment(C, CL, c, segment):
    """Add the ack events of a segment of the later part's run that its endpoint states count (both clean);
    whether they do."""
    if not (k.clean(C, 1, 0) and k.clean(C, 1, 1)):
        return False
    at = k.LG_SEG + k.SEG_W * segment
    for side in range(2):
        end = side if C[1, F_ORIG_IS_A] else 1 - side
        C[1, k.F_ACK_EVENTS + side] += CL[c, at + 1 + end]
        C[1, k.F_GAP_EVENTS + side] += CL[c, at + 3 + end]
        C[1, k.F_GAP_BYTES + side] += CL[c, at + 5 + end]
    return True


# CutJoins' verdict on a segment whose packets' events the merge cannot tell apart: they count as the later part saw
# them (and the connection is said not settled)
UNDECIDED = -2


@njit(_nrt=False, inline="always")
def _segment_verdict(counted, syn_seen):
    """CutJoins' verdict on a segment's ack events: counted (mid-stream or not) or not."""
    if not counted:
        return -1
    return 0 if syn_seen else k.EV_MID_STREAM


@njit(_nrt=False, inline="always")
def _partial_verdict(C, CL, c, segment, partial, paid0, paid1):
    """CutJoins' verdict on the ack events of a segment the continuation C[1] does not count (not both ends clean):
    in a connection picked up mid-stream (`partial`: no SYN of either end), those over the bytes of an end whose
    payload the capture holds (`paid0`, `paid1` by role) get their event marked mid-stream (kernel._partial_event),
    the others none; a segment with acks of both kinds cannot be told apart."""
    if not partial:
        return -1
    at = k.LG_SEG + k.SEG_W * segment
    paid_acks, unpaid_acks = False, False
    for end in range(2):
        side = end if C[1, F_ORIG_IS_A] else 1 - end
        if CL[c, at + 1 + end] > 0:
            if (paid0 if side == 0 else paid1):
                paid_acks = True
            else:
                unpaid_acks = True
    if paid_acks and unpaid_acks:
        return UNDECIDED
    return k.EV_MID_STREAM if paid_acks else -1


@njit(_nrt=False)
def _replay(EF, EH, er, LF, LH, r, CL, word, timeout_ns, server_port, S, SH, C, CH, V):
    """Redo the later part L (cut log CL[L's F_CUT]) from the earlier part E: the continuation in C[1], CH[1],
    and in V[r] the verdicts (CutJoins) on the events of L's packets. S, SH (row 0) hold the later part's own
    run over its head, redone to compare. Returns REDONE, NOT_EXACT where the log does not make the
    continuation exact (merge.py's residual cases), or GOES_ON when the later part's run split the flow where
    the continuation does not (C[1] then holds it up to there)."""
    c = LF[r, k.F_CUT]
    n = CL[c, k.LG_HEAD_N] if c >= 0 else 0
    if n == 0:
        return NOT_EXACT
    for j in range(k.NF):
        C[1, j] = EF[er, j]
    for j in range(k.HIST_MAX):
        CH[1, j] = EH[er, j]
    C[1, k.F_CUT] = -1
    ts, a, flags, tcp_ok, seq, ack, pay, ip_len, captured, mss = _head_packet(CL, c, 0)
    sender_server, receiver_server, sender_port, receiver_port = k.server_hints(word, a, server_port)
    k.start_flow(S, SH, 0, ts, LF[r, k.F_FIRST_FRAME], a, flags, tcp_ok, seq, LF[r, k.F_VLAN], LF[r, k.F_IPVER],
                 True, False, sender_server, receiver_server, sender_port, receiver_port)
    for i in range(n):
        ts, a, flags, tcp_ok, seq, ack, pay, ip_len, captured, mss = _head_packet(CL, c, i)
        if i > 0 and must_split(C, 1, ts, timeout_ns, _side(C, 1, a), flags, tcp_ok, seq, True):
            return NOT_EXACT   # the continuation ends inside the later part's head, which its run did not
        k.add_packet(S, SH, 0, ts, a, flags, tcp_ok, ip_len, pay, seq, ack, captured, mss, True, False)
        event, _missing, _kind = k.add_packet(C, CH, 1, ts, a, flags, tcp_ok, ip_len, pay, seq, ack, captured, mss,
                                              True, False)
        if event != k.EV_NONE and C[1, k.F_SYN_NS] < 0:
            event += k.EV_MID_STREAM
        V[r, i] = event
    if LF[r, k.F_PKTS] + LF[r, k.F_PKTS + 1] > n:
        if not _after_head(LF, LH, r, CL, c, S, SH, C, CH, V):
            return NOT_EXACT
    if CL[c, k.LG_SPLIT] >= 0:         # the later part's run split the flow: does the continuation split there?
        w = CL[c, k.LG_SPLIT + 2]
        if not must_split(C, 1, CL[c, k.LG_SPLIT], timeout_ns, _side(C, 1, (w >> 16) & 1), w & 0xFFFF, True,
                          CL[c, k.LG_SPLIT + 1], True):
            return GOES_ON
    return REDONE


@njit(_nrt=False, inline="always")
def _unacked_after_head(LF, r, S, side):
    """No ack of `side`'s bytes after the head: its peer sent nothing more (a capture of one direction)."""
    return LF[r, k.F_PKTS + 1 - side] == S[0, k.F_PKTS + 1 - side]


@njit(_nrt=False, inline="always")
def _holes_only_opened(LF, r, S, C, side, cs):
    """A side with no ack of its bytes after the head: its reach (which alone decides the holes counted) must meet
    the continuation's at the end of the head, and its holes after it only open (none filled): then the open
    bytes and span of the continuation's follow from the later part's."""
    for base in (k.F_SEQEND, k.F_REACH, k.F_FIN_AT):
        if S[0, base + side] != C[1, base + cs]:
            return False
    opened = LF[r, k.F_HOLE_OPEN + side] - S[0, k.F_HOLE_OPEN + side]
    if opened != LF[r, k.F_HOLE_BYTES + side] - S[0, k.F_HOLE_BYTES + side]:
        return False
    # a hole the later part's run had open keeps its low end there; the continuation's, without one, starts anew
    return opened == 0 or C[1, k.F_HOLE_OPEN + cs] > 0 or S[0, k.F_HOLE_OPEN + side] == 0


@njit(_nrt=False, inline="always")
def _continue_unacked(LF, r, S, C, side, cs):
    """The tracking of a side with no ack of its bytes after the head (_holes_only_opened held)."""
    opened = LF[r, k.F_HOLE_OPEN + side] - S[0, k.F_HOLE_OPEN + side]
    if opened > 0:
        if C[1, k.F_HOLE_OPEN + cs] == 0:
            C[1, k.F_HOLE_LO + cs] = LF[r, k.F_HOLE_LO + side]
        C[1, k.F_HOLE_HI + cs] = LF[r, k.F_HOLE_HI + side]
        C[1, k.F_HOLE_OPEN + cs] += opened
    C[1, k.F_SNAP_OPEN + cs] += LF[r, k.F_SNAP_OPEN + side] - S[0, k.F_SNAP_OPEN + side]
    for base in (k.F_SEQEND, k.F_REACH, k.F_FIN_AT):
        C[1, base + cs] = LF[r, base + side]


@njit(_nrt=False, inline="always")
def _handshake_after_head(LF, r, S, C, same):
    """The handshake's fields of the continuation C[1] after the head, from the later part's run (final LF[r], at
    the end of its head S[0]). Exact when that run changed none after its head, or when it has the same roles as
    the continuation and both had seen the same handshake packets (by kind) by the end of the head."""
    changed = LF[r, k.F_LASTSYN_NS] != S[0, k.F_LASTSYN_NS] or LF[r, k.F_SYN_RETX] != S[0, k.F_SYN_RETX]
    for base in _HANDSHAKE_ONCE:
        changed = changed or LF[r, base] != S[0, base]
    if not changed:
        return True
    if not same:
        return False
    for base in _HANDSHAKE_ONCE:
        if (S[0, base] >= 0) != (C[1, base] >= 0):
            return False
    for base in _HANDSHAKE_ONCE:
        if S[0, base] < 0:
            C[1, base] = LF[r, base]
    if S[0, k.F_SYNACK_NS] < 0 and LF[r, k.F_LASTSYN_NS] != S[0, k.F_LASTSYN_NS]:
        C[1, k.F_LASTSYN_NS] = LF[r, k.F_LASTSYN_NS]
    C[1, k.F_SYN_RETX] += LF[r, k.F_SYN_RETX] - S[0, k.F_SYN_RETX]
    return True


@njit(_nrt=False, inline="always")
def _after_head(LF, LH, r, CL, c, S, SH, C, CH, V):
    """The continuation C[1] after the head: where its tracking meets the later part's own run S[0] at the end of
    the head, that run's counters after it, its endpoint states redone over the log's entries, and the verdicts
    V[r] on its segments and after the log's overflow. False: not exact."""
    if LF[r, F_ORIG_IS_A] != S[0, F_ORIG_IS_A]:
        return False                   # the later part's roles flipped after its head
    same = S[0, F_ORIG_IS_A] == C[1, F_ORIG_IS_A]
    syn_seen = C[1, k.F_SYN_NS] >= 0   # one pass's mid-stream mark (kernel.update_flows), set by an originator's SYN
    for side in range(2):
        cs = side if same else 1 - side
        if _unacked_after_head(LF, r, S, side):
            if not _holes_only_opened(LF, r, S, C, side, cs):
                return False
        else:
            for base in _TRACKED:
                if S[0, base + side] != C[1, base + cs]:
                    return False
            if S[0, k.F_HOLE_OPEN + side] > 0:
                for base in _HOLE_SPAN:
                    if S[0, base + side] != C[1, base + cs]:
                        return False
        if S[0, k.F_HSEEN + side] & ~C[1, k.F_HSEEN + cs]:
            return False               # a letter the later part recorded in its head but the continuation not
    if not _handshake_after_head(LF, r, S, C, same):
        return False
    # picked up mid-stream at the end of the head (no SYN of either end) and whose payload the capture holds by then,
    # by role: what decides the events of the acks the continuation's states do not count (kernel._partial_event)
    partial = ((C[1, k.F_FLAGS] | C[1, k.F_FLAGS + 1]) & TH_SYN) == 0
    paid0, paid1 = C[1, k.F_PAY] > 0, C[1, k.F_PAY + 1] > 0
    for j in range(S[0, F_HLEN], LF[r, F_HLEN]):
        letter = np.int64(LH[r, j])
        if letter == FLIP_MARK:
            return False
        later_side = 1 if letter >= LOWER_CASE_FIRST else 0
        record_history(C, CH, 1, later_side if same else 1 - later_side,
                       history_kind(letter - RESPONDER_CASE * later_side))
    for side in range(2):
        cs = side if same else 1 - side
        for base in _ADDED_AFTER_HEAD:
            C[1, base + cs] += LF[r, base + side] - S[0, base + side]
        if _unacked_after_head(LF, r, S, side):
            _continue_unacked(LF, r, S, C, side, cs)
        else:
            for base in _TRACKED_ALL:
                C[1, base + cs] = LF[r, base + side]
        C[1, k.F_FLAGS + cs] |= LF[r, k.F_FLAGS + side]
        C[1, k.F_MAXPAY + cs] = max(C[1, k.F_MAXPAY + cs], LF[r, k.F_MAXPAY + side])
        if C[1, k.F_MSS + cs] == 0:
            C[1, k.F_MSS + cs] = LF[r, k.F_MSS + side]
    C[1, k.F_LAST_NS] = max(C[1, k.F_LAST_NS], LF[r, k.F_LAST_NS])
    # the endpoint states over the entries, each segment's ack events counted in the states it was in
    V[r, k.SLOT_SEGMENT] = _segment_verdict(_count_segment(C, CL, c, 0), syn_seen) if k.clean(C, 1, 0) and \
        k.clean(C, 1, 1) else _partial_verdict(C, CL, c, 0, partial, paid0, paid1)
    used = CL[c, k.LG_ENTRIES]
    for entry in range(1, min(used, k.ENTRIES_MAX) + 1):
        w = CL[c, k.LG_SEG + k.SEG_W * entry]
        flags, a, length, seq = w & 0xFFFF, (w >> 16) & 1, (w >> 17) & 1, w >> 18
        side = _side(C, 1, a)
        if (flags & TH_SYN) and not (flags & TH_ACK):
            if must_split(C, 1, C[1, k.F_LAST_NS], 0, side, flags, True, seq, True):
                return False           # a new connection the later part's run took for the same one
            if C[1, k.F_SYNSEQ + side] < 0:
                C[1, k.F_SYNSEQ + side] = seq
            syn_seen = syn_seen or side == 0
        if flags & TH_SYN:
            partial = False
        if length:
            paid0, paid1 = paid0 or side == 0, paid1 or side == 1
        orig = C[1, F_ORIG_IS_A]
        k.tcp_state_machine(C, CH, 1, side, flags, length)
        if C[1, F_ORIG_IS_A] != orig:
            return False
        V[r, k.SLOT_SEGMENT + entry] = _segment_verdict(_count_segment(C, CL, c, entry), syn_seen) if \
            k.clean(C, 1, 0) and k.clean(C, 1, 1) else _partial_verdict(C, CL, c, entry, partial, paid0, paid1)
    # after the overflow the later part's own run goes on in the continuation's states: its events are one pass's,
    # but for the mid-stream mark where the continuation had the originator's SYN (the run may not have), or where
    # the two runs' roles differ (not settled)
    V[r, k.SLOT_OVER] = 1 if syn_seen else (0 if same else -1)
    if not (k.clean(C, 1, 0) and k.clean(C, 1, 1)) and (partial or ((LF[r, k.F_FLAGS] | LF[r, k.F_FLAGS + 1]) &
                                                                     TH_SYN) == 0):
        # acks neither run's states count: the events a run picked up mid-stream gives them depend on what payload
        # of each end it holds, which the log does not say after its overflow
        V[r, k.SLOT_OVER] = -1
    for side in range(2):
        cs = side if same else 1 - side
        if C[1, k.F_SYNSEQ + cs] < 0:
            C[1, k.F_SYNSEQ + cs] = LF[r, k.F_SYNSEQ + side]
    if used > k.ENTRIES_MAX:
        # the log overflowed: exact when the continuation's states met the later part's own there
        for side in range(2):
            cs = side if same else 1 - side
            end = side if LF[r, F_ORIG_IS_A] else 1 - side
            if C[1, k.F_STATE + cs] != CL[c, k.LG_OVER + end] or C[1, k.F_PREV + cs] != CL[c, k.LG_OVER + 2 + end]:
                return False
            if CL[c, k.LG_LAST] < 0 and C[1, k.F_SYNSEQ + cs] != CL[c, k.LG_OVER + 11 + end]:
                return False           # a later SYN the two would split on differently
        if C[1, k.F_ENDED] != CL[c, k.LG_OVER + 4]:
            return False
        for side in range(2):
            cs = side if same else 1 - side
            end = side if LF[r, F_ORIG_IS_A] else 1 - side
            C[1, k.F_ACK_EVENTS + cs] += LF[r, k.F_ACK_EVENTS + side] - CL[c, k.LG_OVER + 5 + end]
            C[1, k.F_GAP_EVENTS + cs] += LF[r, k.F_GAP_EVENTS + side] - CL[c, k.LG_OVER + 7 + end]
            C[1, k.F_GAP_BYTES + cs] += LF[r, k.F_GAP_BYTES + side] - CL[c, k.LG_OVER + 9 + end]
            C[1, k.F_STATE + cs] = LF[r, k.F_STATE + side]
            C[1, k.F_PREV + cs] = LF[r, k.F_PREV + side]
        C[1, k.F_ENDED] = LF[r, k.F_ENDED]
    return True


@kernel("(i8[:, ::1], u1[:, ::1], i8[:, ::1], u1[:, ::1], i8[::1], i8[::1], i8[:, ::1], u8[::1], i8[::1], "
        "b1[::1], i8[:, ::1], u1[:, ::1], i8[:, ::1], u1[:, ::1], i8[:, ::1], u1[:, ::1], i1[::1], i1[:, ::1])",
        _nrt=False, nogil=True)
def replay_continuations(EF, EH, LF, LH, later, after, CL, words, timeout_ns, server_port, S, SH, C, CH, out_F,
                          out_H, outcome, V):
    """Each earlier open TCP flow EF[r] continued by the later flow LF[later[r]] (with its cut log in CL), redone
    into out_F[r], out_H[r]; outcome[r] is REDONE, NOT_EXACT, or THROUGH_NEXT when the continuation also takes
    in the next later flow of its key, LF[after[r]] (-1 none), which the later part's run split off on a SYN
    one pass takes for the same connection. V[row] gets the verdicts on the events of later flow LF[row]'s packets
    (CutJoins; valid where the outcome is not NOT_EXACT). S, SH (one row) and C, CH (two rows) are scratch."""
    timeout = timeout_ns[PROTO_TCP]
    for r in range(EF.shape[0]):
        done = _replay(EF, EH, r, LF, LH, later[r], CL, words[r], timeout, server_port, S, SH, C, CH, V)
        if done == GOES_ON and after[r] >= 0:
            for j in range(k.NF):
                C[0, j] = C[1, j]
            for j in range(k.HIST_MAX):
                CH[0, j] = CH[1, j]
            done = _replay(C, CH, 0, LF, LH, after[r], CL, words[r], timeout, server_port, S, SH, C, CH, V)
            done = THROUGH_NEXT if done == REDONE else NOT_EXACT
        outcome[r] = done if done != GOES_ON else NOT_EXACT
        if done == REDONE or done == THROUGH_NEXT:
            for j in range(k.NF):
                out_F[r, j] = C[1, j]
            for j in range(k.HIST_MAX):
                out_H[r, j] = CH[1, j]


@dataclass
class CutJoins:
    """What a merge says about the events (kernel.EV_*) of the packets of the TCP connections it joined exactly
    across the cut, for a rule that binned them as the later part saw them (PacketBatch.flow_events, flow_cuts).

    Per later flow that continued one of the earlier part (its first frame in `frames`, ascending), per slot
    of its packets (kernel.SLOT_*), `verdicts[j, slot]`: a head packet's event in one pass; for a segment, -1
    when one pass counts no ack event of its packets, else what it adds to their event had both endpoints been
    clean (0, or EV_MID_STREAM in a connection whose opening SYN the capture does not hold), or UNDECIDED when the
    merge cannot tell its packets apart (their events stay as the later part saw them); after the log's
    overflow, 0 when the later part's own events are one pass's, 1 when they are but for their mid-stream mark,
    -1 when the merge cannot say (its events stay as the later part saw them). A connection the merge could
    not join exactly (FlowTable.inexact_joins) is not listed.
    """

    frames: np.ndarray
    verdicts: np.ndarray

    @classmethod
    def none(cls) -> CutJoins:
        return cls(np.zeros(0, np.int64), np.zeros((0, k.SLOTS), np.int8))


def merge_flows(open_flows, later_flows, later_open: int, seed: int, timeout_ns: np.ndarray, cut_log: np.ndarray):
    """The open flows (F, H, K) of a table with `later_flows` (F, H, K), all the flows of the table of the
    packets that follow, whose last `later_open` rows are still open: (finished parts, open flows, joins that
    are not exact, CutJoins).

    Each key's earliest later flow that continues an open one becomes it,
    with the earlier flow's direction; an open flow with a later flow of its
    key that does not continue it is finished. `seed` is the earlier table's
    key hash seed, `timeout_ns` its idle timeouts by IP protocol, `cut_log`
    the cut log rows the flows' kernel.F_CUT point to.
    """
    mF, mH, mK = open_flows
    oF, oH, oK = later_flows
    o_is_open = np.zeros(len(oF), bool)
    o_is_open[len(oF) - later_open:] = True
    mh = K_.hash_rows(mK, seed)
    by_hash = np.argsort(mh, kind="stable")
    mF, mH, mK, mh = mF[by_hash], mH[by_hash], mK[by_hash], mh[by_hash]
    oh = K_.hash_rows(oK, seed)
    order = np.lexsort((oF[:, k.F_FIRST_NS], oh))
    first = np.ones(len(order), bool)
    first[1:] = oh[order][1:] != oh[order][:-1]
    heads = order[first]                       # each key's earliest flow in the later table
    pos = np.searchsorted(mh, oh[heads])
    posc = np.minimum(pos, max(len(mh) - 1, 0))
    hit = (pos < len(mh)) & (mh[posc] == oh[heads]) if len(mh) else np.zeros(len(heads), bool)
    hit &= np.all(mK[posc] == oK[heads], axis=1) if len(mh) else hit
    mine_rows, theirs = posc[hit], heads[hit]
    # each head's next flow of the same key in the later table, -1 none
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    nxt = np.minimum(rank[theirs] + 1, len(order) - 1) if len(order) else rank[theirs]
    after = order[nxt] if len(order) else nxt
    after = np.where((rank[theirs] + 1 < len(order)) & (oh[after] == oh[theirs]) &
                     np.all(oK[after] == oK[theirs], axis=1), after, -1)
    joined = np.empty(len(theirs), bool)
    continuations(mF[mine_rows], oF[theirs], K_.key_proto(oK[theirs]), timeout_ns, joined)
    mine_rows, theirs, after = mine_rows[joined], theirs[joined], after[joined]
    combined_F, combined_H, inexact, through, joins = _join(mF[mine_rows], mH[mine_rows], oF, oH, oK, theirs, after,
                                                            timeout_ns, cut_log)
    oF, oH = oF.copy(), oH.copy()
    # a continuation that took in the next later flow of its key replaces that one; the head it went through goes
    target = np.where(through, after, theirs)
    oF[target] = combined_F
    oH[target] = combined_H
    kept = np.ones(len(oF), bool)
    kept[theirs[through]] = False
    superseded = np.zeros(len(mF), bool)
    superseded[posc[hit]] = True               # a later flow of the same key exists
    ended_mine = superseded.copy()
    ended_mine[mine_rows] = False              # those continue inside oF instead
    done = ~o_is_open & kept
    live = o_is_open & kept
    keep = ~superseded
    return ([(mF[ended_mine], mH[ended_mine], mK[ended_mine]), (oF[done], oH[done], oK[done])],
            (np.concatenate([mF[keep], oF[live]]), np.concatenate([mH[keep], oH[live]]),
             np.concatenate([mK[keep], oK[live]])), inexact, joins)


def _join(mF, mH, oF, oH, oK, theirs, after, timeout_ns, cut_log):
    """Earlier open flows with their continuations oF[theirs]: a TCP continuation redone from its cut log where
    that is exact (through the next later flow of its key, oF[after], where one pass takes that in too), else
    (and for other protocols, whose records combine exactly) combined field by field. Returns the flows, how
    many TCP joins are not exact, which went through the next flow, and the CutJoins of the exact ones."""
    tF, tH, tK = oF[theirs], oH[theirs], oK[theirs]
    out_F, out_H = _combine(mF, mH, tF, tH)
    tcp = np.flatnonzero(K_.key_proto(tK) == PROTO_TCP)
    outcome = np.full(len(tcp), NOT_EXACT, np.int8)
    joins = CutJoins.none()
    if len(tcp):
        redone_F, redone_H = out_F[tcp], out_H[tcp]
        scratch = (np.zeros((1, k.NF), np.int64), np.zeros((1, k.HIST_MAX), np.uint8),
                   np.zeros((2, k.NF), np.int64), np.zeros((2, k.HIST_MAX), np.uint8))
        later, after_tcp = theirs[tcp].astype(np.int64), after[tcp].astype(np.int64)
        verdicts = np.full((len(oF), k.SLOTS), -1, np.int8)
        replay_continuations(mF[tcp], mH[tcp], oF, oH, later, after_tcp, cut_log, np.ascontiguousarray(tK[tcp, 4]),
                             timeout_ns, K_.SERVER_PORT, *scratch, redone_F, redone_H, outcome, verdicts)
        exact = outcome != NOT_EXACT
        out_F[tcp[exact]], out_H[tcp[exact]] = redone_F[exact], redone_H[exact]
        rows = np.concatenate([later[exact], after_tcp[outcome == THROUGH_NEXT]])
        frames = oF[rows, k.F_FIRST_FRAME]
        order = np.argsort(frames, kind="stable")
        joins = CutJoins(frames[order], verdicts[rows[order]])
    out_F[:, k.F_CUT] = -1       # a joined flow's log would describe its earlier part alone
    through = np.zeros(len(theirs), bool)
    through[tcp] = outcome == THROUGH_NEXT
    return out_F, out_H, int(np.count_nonzero(outcome == NOT_EXACT)), through, joins


def _compose_state(mine, mine_peer_closed, theirs):
    """Endpoint state after `mine` then the later part that on its own reached `theirs`."""
    later_silent = (theirs == k.TCP_INACTIVE) | ((theirs == k.TCP_PARTIAL) & (mine != k.TCP_INACTIVE))
    rst_after_close = (theirs == k.TCP_RESET) & (mine == k.TCP_CLOSED) & mine_peer_closed
    return np.where(later_silent | rst_after_close, mine, theirs)


def _combine_handshake(out, mF, tF, same):
    """The handshake times (kernel.F_SYN_NS ..) of a flow whose earlier part is mF and later part tF.

    Each time is the earlier part's when it has one, else the later part's;
    the later part's ACK after "the first SYN-ACK" is its first ACK at all
    when the SYN-ACK was in the earlier part; the last SYN before the SYN-ACK
    comes from the later part while the earlier one had no SYN-ACK.
    A later part's SYN is a retransmission of an earlier one's, unless a copy of it (kernel.add_packet).
    """
    if not len(out):
        return
    # a flipped later part saw the roles reversed; its handshake times then describe the other side's
    # packets, which a handshake never has: nothing to take from it
    t = np.where(same[:, None], tF, -1)

    def first(field):
        return np.where(mF[:, field] >= 0, mF[:, field], t[:, field])

    out[:, k.F_SYN_NS] = first(k.F_SYN_NS)
    out[:, k.F_SYNACK_NS] = first(k.F_SYNACK_NS)
    out[:, k.F_ACK1_NS] = first(k.F_ACK1_NS)
    earlier_synack = mF[:, k.F_SYNACK_NS] >= 0
    out[:, k.F_ACK_NS] = np.where(mF[:, k.F_ACK_NS] >= 0, mF[:, k.F_ACK_NS],
                                  np.where(earlier_synack, t[:, k.F_ACK1_NS], t[:, k.F_ACK_NS]))
    later_syn = np.where(t[:, k.F_LASTSYN_NS] >= 0, t[:, k.F_LASTSYN_NS], mF[:, k.F_LASTSYN_NS])
    out[:, k.F_LASTSYN_NS] = np.where(earlier_synack, mF[:, k.F_LASTSYN_NS], later_syn)
    # (later than the earlier part's every packet, and long enough after its last SYN: kernel.add_packet's test of a
    # copy)
    resent = (mF[:, k.F_SYN_NS] >= 0) & (t[:, k.F_SYN_NS] > mF[:, k.F_LAST_NS]) & \
        (t[:, k.F_SYN_NS] - mF[:, k.F_LASTSYN_NS] >= k.SYN_RESEND_MIN_NS)
    out[:, k.F_SYN_RETX] = mF[:, k.F_SYN_RETX] + np.where(same, tF[:, k.F_SYN_RETX], 0) + resent


def _continue_gap_tracking(out, side, theirs):
    """The capture-gap state of `side` (kernel.F_ACKED ..) after the cut: the later part's, which started
    from its own first packets; the earlier part's only where the later part never saw the side's bytes
    nor an ack of them."""
    later_known = theirs(k.F_ACKED, side) >= 0
    for base in (k.F_ACKED, k.F_REACH, k.F_HOLE_LO, k.F_HOLE_HI, k.F_HOLE_OPEN, k.F_SNAP_OPEN):
        out[:, base + side] = np.where(later_known, theirs(base, side), out[:, base + side])
    later_fin = theirs(k.F_FIN_AT, side)
    out[:, k.F_FIN_AT + side] = np.where(later_fin >= 0, later_fin, out[:, k.F_FIN_AT + side])


def _combine(mF, mH, tF, tH):
    """Earlier open flows + their continuation in the later table, with the earlier one's direction."""
    out = mF.copy()
    H = mH.copy()
    same = tF[:, k.F_ORIG_IS_A] == mF[:, k.F_ORIG_IS_A]

    def theirs(base, side):
        return np.where(same, tF[:, base + side], tF[:, base + 1 - side])

    for side in (0, 1):
        for base in (k.F_PKTS, k.F_BYTES, k.F_PAY, k.F_RETX, k.F_ACK_EVENTS, k.F_GAP_EVENTS, k.F_GAP_BYTES,
                     k.F_SEQ_HOLES, k.F_HOLE_BYTES):
            out[:, base + side] += theirs(base, side)
        _continue_gap_tracking(out, side, theirs)
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
    _combine_handshake(out, mF, tF, same)
    s0, s1 = out[:, k.F_STATE], out[:, k.F_STATE + 1]
    out[:, k.F_ENDED] = ((s0 == k.TCP_RESET) | (s1 == k.TCP_RESET) |
                         ((s0 == k.TCP_CLOSED) & (s1 == k.TCP_CLOSED)) | (mF[:, k.F_ENDED] == 1)).astype(np.int64)
    add_later_history(out, H, tF, tH, same)
    return out, H

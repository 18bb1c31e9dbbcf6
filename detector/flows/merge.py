"""The partition merge: a flow table absorbs the table of the packets that follow its own.

A flow cut by the partition boundary is open in the earlier table and is the
earliest flow of its key in the later one. Whether the later part continues
it is the flow pass's own rule (kernel.must_split, applied to the later
part's first packet), and the history letters the later part adds are
recorded by the pass's own history rule (kernel.record_history): one rule,
one place, whichever side of a boundary a packet fell on. Counters, times,
flags, MSS and payload maxima combine exactly; the endpoint states are
composed (exact when the later part continues an established connection);
a segment after the boundary cannot be recognised as a retransmission of
one before it, nor the handshake RTT measured when the boundary falls
between the SYN-ACK and the originator's ACK of it, as the merge keeps no
packets.

Capture gaps (kernel.F_ACK_EVENTS ..) are summed, each part counting what
it saw on its own, so a cut inside a connection makes them lower bounds:
the later part sees the connection mid-stream, a partial connection in
which Zeek's rule counts no ack or gap events (its holes still count); a
hole open at the cut is not found by an ack after it, and bytes missing
right at the cut are no hole to either part. The tracking state continues
from the later part's own.
"""
from __future__ import annotations

import numpy as np

from ..cpu import kernel
from ..schema import PROTO_TCP
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


def merge_flows(open_flows, later_flows, later_open: int, seed: int, timeout_ns: np.ndarray):
    """The open flows (F, H, K) of a table with `later_flows` (F, H, K), all the flows of the table of the
    packets that follow, whose last `later_open` rows are still open: (finished parts, open flows).

    Each key's earliest later flow that continues an open one becomes it,
    with the earlier flow's direction; an open flow with a later flow of its
    key that does not continue it is finished. `seed` is the earlier table's
    key hash seed, `timeout_ns` its idle timeouts by IP protocol.
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
    joined = np.empty(len(theirs), bool)
    continuations(mF[mine_rows], oF[theirs], K_.key_proto(oK[theirs]), timeout_ns, joined)
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
    return ([(mF[ended_mine], mH[ended_mine], mK[ended_mine]), (oF[done], oH[done], oK[done])],
            (np.concatenate([mF[keep], oF[o_is_open]]), np.concatenate([mH[keep], oH[o_is_open]]),
             np.concatenate([mK[keep], oK[o_is_open]])))


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
    A later part's SYN is a retransmission of an earlier one's.
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
    resent = (mF[:, k.F_SYN_NS] >= 0) & (t[:, k.F_SYN_NS] >= 0)
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

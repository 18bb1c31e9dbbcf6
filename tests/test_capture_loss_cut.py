"""capture-loss across partition cuts: the events of connections a later partition picks up mid-stream are set
aside and settled by the flow table's merge, so the parts merged bin the ack and gap events of one pass.

Each crafted scenario is cut at many places (2, 3 and 7 parts), each part folded into its own state (flow table
and rule) from its first global frame, shipped as a pickle and merged in capture order as a cluster does: the
rule's per-bin table and evidence frames equal one pass's. The bundled captures are cut at the worst places
(right after a SYN, in the middle of a bin) through editcap (tests/_cuts.py).
"""
from __future__ import annotations

import pickle
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from detector.analysis import AnalysisState
from detector.detectors import capture_loss
from detector.flows.kernel import ENTRIES_MAX, EV_MID_STREAM, HEAD_MAX
from detector.live.window import SlidingWindow
from detector.rules import load_rules
from tests._cuts import cut, one_and_merged
from tests.test_flows import A, B, make_batch, tcp, transfer
from tests.test_flows_cut import every_cut

RULE = "capture-loss"
CAPTURES = Path(__file__).resolve().parents[1] / "captures"
EVERY_NTH = CAPTURES / "loss-every-nth-segment.pcap"
MIRROR_PEAK = CAPTURES / "loss-mirror-peak.pcap"


def rules(bin_s: float = 1.0) -> dict:
    rule = load_rules()[RULE]
    return {RULE: replace(rule, param_values={**rule.param_values, "bin_s": bin_s})}


def rule_of(state: AnalysisState) -> capture_loss.CaptureLoss:
    (det,) = [d for d in state.detectors.detectors if d.rule_id == RULE]
    return det


def folded(packets, first_frame: int = 1) -> AnalysisState:
    state = AnalysisState(rules())
    if packets:
        state.update(make_batch(packets, first_frame=first_frame))
    return pickle.loads(pickle.dumps(state))        # as a cluster ships it


def parts_merged(packets, cuts) -> AnalysisState:
    """States over the packets between consecutive `cuts`, merged in capture order."""
    merged = None
    for lo, hi in pairwise([0, *cuts, len(packets)]):
        state = folded(packets[lo:hi], first_frame=lo + 1)
        merged = state if merged is None else merged.merge(state)
    return merged


def loss_table(state: AnalysisState):
    det = rule_of(state)
    bins, counts = det.table()
    return bins.tolist(), counts.tolist(), det.evidence_gap_frames()


def cut_everywhere(packets, parts=(2, 3, 7), step=1):
    """The rule's table and gap frames of the parts merged equal one pass's, for each number of parts and each
    offset of the cuts; returns one pass's table."""
    whole = loss_table(folded(packets))
    tried = list(every_cut(len(packets), parts, step))
    assert tried
    for cuts in tried:
        merged = parts_merged(packets, cuts)
        assert merged.flows.inexact_joins == 0 and rule_of(merged).unsettled == 0, cuts
        assert loss_table(merged) == whole, cuts
    return whole


def spread(packets, every_s: float = 0.02):
    """The packets `every_s` apart: a transfer of a few hundred packets over several bins of 1 s."""
    return [dict(p, t=round(0.5 + every_s * i, 6)) for i, p in enumerate(packets)]


def acks_gaps_mid(table) -> tuple[int, int, int]:
    counts = np.array(table[1]).reshape(-1, capture_loss.COUNTERS)
    return (int(counts[:, capture_loss.C_ACKS].sum()), int(counts[:, capture_loss.C_GAPS].sum()),
            int(counts[:, capture_loss.C_MID_STREAM].sum()))


def test_a_lossy_transfer_cut_anywhere_bins_the_events_of_one_pass():
    # segments missing before, inside and after the head of every later part; bins of 1 s cut by the parts
    pkts = spread(transfer(4 * HEAD_MAX, missing=(3, 20, 41, 90, 121)))
    whole = cut_everywhere(pkts, step=3)
    acks, gaps, mid = acks_gaps_mid(whole)
    assert len(whole[0]) >= 4 and gaps == 5 and acks == 2 * HEAD_MAX and mid == 0
    assert whole[2] == [f for f in whole[2] if f > 0] and len(whole[2]) == 5


def test_a_cut_right_after_the_syn_leaves_the_later_part_no_connection_start():
    # the later part starts at the SYN-ACK: its own run marks every ack event mid-stream, one pass counts them
    pkts = spread(transfer(3 * HEAD_MAX, missing=(7, 60)))
    later = folded(pkts[1:], first_frame=2)
    assert acks_gaps_mid(loss_table(later))[:2] == (0, 0)       # its own view: no ack counted, all mid-stream
    merged = parts_merged(pkts, [1])
    assert loss_table(merged) == loss_table(folded(pkts))
    assert acks_gaps_mid(loss_table(merged))[1:] == (2, 0)


def test_a_connection_without_its_syn_stays_mid_stream_across_the_cut():
    # the capture begins at the SYN-ACK: one pass marks the events mid-stream (left out), and so does the merge
    pkts = spread(transfer(3 * HEAD_MAX, missing=(9, 50)))[1:]
    whole = cut_everywhere(pkts, parts=(2, 3), step=5)
    acks, gaps, mid = acks_gaps_mid(whole)
    assert acks == gaps == 0 and mid >= 3 * HEAD_MAX // 2


def mid_stream_counts(table) -> tuple[int, int, int]:
    """Judged ack events and gap events of connections picked up mid-stream, and those left out."""
    counts = np.array(table[1]).reshape(-1, capture_loss.COUNTERS)
    return (int(counts[:, capture_loss.C_MID_ACKS].sum()), int(counts[:, capture_loss.C_MID_GAPS].sum()),
            int(counts[:, capture_loss.C_MID_STREAM].sum()))


def test_a_connection_picked_up_mid_stream_cut_anywhere_bins_the_events_of_one_pass():
    # no handshake in the capture at all (partial): its acks are marked mid-stream, left out in the capture's first
    # 5 s and judged after them, in one pass and in the parts merged, whose later parts redo them from the earlier
    pkts = spread(transfer(3 * HEAD_MAX, missing=(9, 40, 70, 81), handshake=False), every_s=0.08)
    assert pkts[-1]["t"] - pkts[0]["t"] > 2 * capture_loss.MID_STREAM_SETTLE_S
    whole = cut_everywhere(pkts, parts=(2, 3), step=4)
    judged, gaps, left_out = mid_stream_counts(whole)
    # B's 48 acks: 19 in the first 5 s, 29 after them, 3 of which pass over a segment lost (9 is in the first 5 s)
    assert acks_gaps_mid(whole)[:2] == (0, 0) and (judged, gaps, left_out) == (29, 3, 19) and len(whole[2]) == 3
    # the acks alone (a capture of the receiver's direction): no payload of the end acknowledged, no event
    acks = [p for p in pkts if p["src"] == B]
    assert mid_stream_counts(cut_everywhere(acks, parts=(2,), step=7)) == (0, 0, 0)


def half_close_after_repeated_fins():
    """A transfer whose client repeats its FIN more times than the log holds entries after the head, then takes
    100-byte segments of the server's (two missing) and acks each (a half-close: both ends still clean)."""
    pkts = transfer(2 * HEAD_MAX, missing=(5,))[:-3]
    t, end = pkts[-1]["t"], pkts[-1]["ack"]
    served = 5001
    for i in range(ENTRIES_MAX + 2):
        pkts.append(tcp(t + 0.001 * (i + 1), A, B, 40000, 80, "FA", end, served))
    for j in range(20):
        if j not in (3, 11):
            pkts.append(tcp(0, B, A, 80, 40000, "PA", served + 100 * j, end + 1, payload=100))
        pkts.append(tcp(0, A, B, 40000, 80, "A", end + 1, served + 100 * (j + 1)))
    pkts += [tcp(0, B, A, 80, 40000, "FA", served + 2000, end + 1),
             tcp(0, A, B, 40000, 80, "A", end + 1, served + 2001)]
    return spread(pkts)


def test_acks_after_the_log_overflowed_settle_without_their_mid_stream_mark():
    # more state changes after the head than the log holds: after the overflow the later part's own events are
    # one pass's but for their mid-stream mark (the later part, cut right after the SYN, never saw it)
    pkts = half_close_after_repeated_fins()
    later = rule_of(folded(pkts[1:], first_frame=2))
    over = later.aside[0]["slot"] == capture_loss.SLOT_OVER
    assert np.any(over & (later.aside[0]["own"] >= EV_MID_STREAM))
    merged = parts_merged(pkts, [1])
    assert merged.flows.inexact_joins == 0 and rule_of(merged).unsettled == 0
    whole = loss_table(folded(pkts))
    assert loss_table(merged) == whole
    acks, gaps, mid = acks_gaps_mid(whole)
    assert gaps == 3 and mid == 0 and acks == HEAD_MAX + 20


def test_a_connection_continued_through_a_flow_the_later_part_split_off():
    # A's SYN, then (after the cut) B's RST and A's SYN again with the same number, a handshake and a lossy
    # transfer: the later part's own run splits on that SYN and counts the new flow's acks; one pass knows the
    # number (a retransmission), keeps one connection, reset, and counts none. The merge goes on through the flow
    # split off, and so do the events set aside
    pkts = transfer(2 * HEAD_MAX, missing=(6, 40), isn_a=7)
    pkts = spread([pkts[0], tcp(0, B, A, 80, 40000, "RA", 0, 8), *pkts])
    whole = loss_table(folded(pkts))
    assert acks_gaps_mid(whole)[0] == 0
    assert acks_gaps_mid(loss_table(folded(pkts[1:], first_frame=2)))[:2] == (HEAD_MAX, 2)
    merged = parts_merged(pkts, [1])
    assert merged.flows.inexact_joins == 0 and rule_of(merged).unsettled == 0
    assert loss_table(merged) == whole


def test_a_syn_retransmitted_across_the_cut_is_counted_at_once_and_said_so():
    # the later part sees the connection open with its SYN (the retransmission of the earlier part's): it counts
    # the connection's events at once, the same here as one pass, and `unsettled` says one was not settled
    pkts = transfer(2 * HEAD_MAX, missing=(6,))
    pkts = spread([pkts[0], *pkts])
    merged = parts_merged(pkts, [1])
    assert merged.flows.inexact_joins == 0 and rule_of(merged).unsettled == 1
    assert loss_table(merged) == loss_table(folded(pkts))


def test_a_later_part_keeps_aside_only_connections_picked_up_without_their_syn():
    # a connection that opens in the later part counts there at once; one cut mid-stream is set aside, bounded
    first = spread(transfer(3 * HEAD_MAX, missing=(4,)))
    fresh = [dict(p, sport=41000 if p["sport"] == 40000 else p["sport"],
                  dport=41000 if p["dport"] == 40000 else p["dport"], t=p["t"] + 0.001) for p in first]
    packets = sorted(first + fresh, key=lambda p: p["t"])
    at = next(i for i, p in enumerate(packets) if p.get("sport") == 41000)     # the second one's SYN
    later = rule_of(folded(packets[at:], first_frame=at + 1))
    (flow,) = np.unique(later.aside[0]["flow"])
    assert flow == at + 2         # the first connection's packet after the second's SYN
    assert np.count_nonzero(later.aside[0]["slot"] < capture_loss.SLOT_SEGMENT) == HEAD_MAX
    assert loss_table(parts_merged(packets, [at])) == loss_table(folded(packets))


def test_past_the_bound_connections_count_as_their_part_saw_them(monkeypatch):
    # more rows aside than ASIDE_ROWS_MAX: the connections that started last are counted at once, each said in
    # `unsettled`, and the rows kept stay within the bound
    monkeypatch.setattr(capture_loss, "ASIDE_ROWS_MAX", 3 * HEAD_MAX)      # a connection's head takes 2 * HEAD_MAX
    packets = []
    for k in range(3):
        one = transfer(2 * HEAD_MAX, missing=(30,), isn_a=1000 * k)
        packets += [dict(p, sport=40000 + k if p["sport"] == 40000 else 80,
                         dport=40000 + k if p["dport"] == 40000 else 80, t=0.5 + 0.02 * i + 0.003 * k)
                    for i, p in enumerate(one)]
    packets.sort(key=lambda p: p["t"])
    state = AnalysisState(rules())
    state.update(make_batch(packets[:10]))
    later = AnalysisState(rules())
    for lo in range(10, len(packets), 40):        # batches: the rows aside are folded and bounded as they come
        later.update(make_batch(packets[lo:lo + 40], first_frame=lo + 1))
        later_rule = rule_of(later)
        later_rule._fold_aside()
        held = len(later_rule.aside[0]["flow"]) + len(later_rule.aside_frames[0]["flow"])
        assert held <= capture_loss.ASIDE_ROWS_MAX
    assert later_rule.unsettled == 2 and len(later_rule.released) == 2
    merged = state.merge(later)
    assert merged.flows.inexact_joins == 0 and rule_of(merged).unsettled == 2
    # the two released connections count as the later part saw them (partial: no ack events): fewer than one pass
    assert acks_gaps_mid(loss_table(merged))[0] < acks_gaps_mid(loss_table(folded(packets)))[0]


def test_a_watch_counts_a_connection_in_the_slice_where_it_opened():
    # a watch's slices merge their rules, not their flow tables: the slices after the one where a connection
    # opened see it mid-stream and count none of its events, as the later part of a cut does on its own
    pkts = spread(transfer(3 * HEAD_MAX, missing=(5, 60)))
    window = SlidingWindow(rules(), now=0.0, slice_s=1.0, slices=10)
    for lo in range(0, len(pkts), 30):
        window.update(make_batch(pkts[lo:lo + 30], first_frame=lo + 1), now=lo / 30)
    (loss,) = [f for f in window.analysis().findings if f.rule == RULE]
    first_slice = acks_gaps_mid(loss_table(folded(pkts[:30])))
    assert (loss.evidence["ack_events"], loss.evidence["gap_events"]) == first_slice[:2]
    assert first_slice[1] == 1 and loss.evidence["ack_events"] < acks_gaps_mid(loss_table(folded(pkts)))[0]


# ---- the bundled captures cut at the worst places (editcap) -------------------------------------------------
@pytest.mark.parametrize(("name", "starts"), [
    (EVERY_NTH.name, [2]),              # right after the first connection's SYN
    (EVERY_NTH.name, [129, 300]),       # right after the second's SYN; inside the third, mid-bin (one bin of 60 s)
    (MIRROR_PEAK.name, [2, 1790]),      # after a SYN; in the middle of the peak minute, inside a connection
    ("loss-storage-writes.pcap", [100, 2000]),   # inside the capture's first 5 s; between two writes later on
    ("loss-storage-writes.pcap", [603, 604, 3000]),     # one write's last segment and its ack in parts of their own
])
def test_the_bundled_lossy_captures_cut_at_the_worst_places(name, starts, tmp_path):
    paths = cut(CAPTURES / name, tmp_path, starts)
    one, many = one_and_merged(paths, RULE)
    assert one == many
    (finding,) = one
    assert finding["severity"] in ("medium", "high") and finding["evidence"]["gap_events"] > 0
    assert finding["evidence"]["evidence_frames"]
    assert all(frame > 0 for frame in finding["evidence"]["evidence_frames"])


def test_gap_frames_of_a_later_part_are_settled_in_frame_order():
    # the evidence frames are one pass's first gaps, some of them in the later part's head: the merge keeps the
    # frames of the head's packets it settles as gaps (the later part's own run saw none there)
    pkts = spread(transfer(3 * HEAD_MAX, missing=tuple(range(2, 3 * HEAD_MAX, 3))))
    whole = loss_table(folded(pkts))
    later = loss_table(folded(pkts[1:], first_frame=2))
    assert later[2] == [] and len(whole[2]) > 10
    assert loss_table(parts_merged(pkts, [1]))[2] == whole[2]

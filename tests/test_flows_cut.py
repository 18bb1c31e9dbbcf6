"""A TCP connection cut by partition boundaries merges to the flow records of one pass (flows/merge.py).

Each scenario is cut into 2, 3 and 7 parts at every position (or many), each part folded into its own table, the
tables merged in capture order: every column equals one table's over all packets, and the merge says it was
exact. The residual cases merge.py names are kept as strict tests below: they fail once made exact.
"""
from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from detector.flows import FlowTable
from detector.flows.kernel import ENTRIES_MAX, HEAD_MAX
from tests.test_flows import A, B, assert_same_flows, flows_of, handshake_close, make_batch, tcp, transfer


def merged_parts(packets, cuts) -> FlowTable:
    """Tables over the packets between consecutive `cuts`, merged in capture order."""
    bounds = [0, *cuts, len(packets)]
    merged = None
    for lo, hi in pairwise(bounds):
        table = FlowTable()
        table.update(make_batch(packets[lo:hi], first_frame=lo + 1))
        merged = table if merged is None else merged.merge(table)
    return merged


def every_cut(n: int, parts=(2, 3, 7), step=1):
    """The cuts of `n` packets into each number of `parts` of equal width, at every `step`-th offset."""
    for k in parts:
        width = max(n // k, 1)
        for offset in range(1, width + 1, step):
            yield list(range(offset, n, width))[:k - 1]


def cut_everywhere(packets, parts=(2, 3, 7), step=1):
    """Every column of the merge equals one pass's, for each number of parts and each offset of the cuts."""
    whole = flows_of(packets).finish()
    tried = list(every_cut(len(packets), parts, step))
    assert tried
    for cuts in tried:
        merged = merged_parts(packets, cuts)
        assert merged.inexact_joins == 0, cuts
        assert_same_flows(merged.finish(), whole)
    return whole


def test_a_retransmission_after_the_cut_of_a_segment_before_it():
    pkts = transfer(12)
    again = next(i for i, p in enumerate(pkts) if p["payload"] and p["seq"] > 4000)
    resent = [*pkts[:again + 4], dict(pkts[again], t=pkts[again + 3]["t"] + 0.0005), *pkts[again + 4:]]
    whole = cut_everywhere(resent)
    assert whole["src2dst_retransmits"][0] == 1 and "T" in whole["history"][0]


def go_back(resent: int):
    """A transfer whose sender resends its first `resent` segments before closing."""
    pkts = transfer(2 * HEAD_MAX)
    data = [p for p in pkts if p["payload"]][:resent]
    packets = [*pkts[:-3], *data, *pkts[-3:]]
    return [dict(p, t=round(0.001 * i, 6)) for i, p in enumerate(packets)]


def test_a_go_back_retransmission_across_the_cut():
    whole = cut_everywhere(go_back(HEAD_MAX // 2), step=5)
    assert whole["src2dst_retransmits"][0] == HEAD_MAX // 2


@pytest.mark.parametrize("segments", [16, 4 * HEAD_MAX])
def test_holes_open_across_the_cut(segments):
    # segments missing: some acked over within the head, some after it; a cut right after a missing segment
    # leaves the bytes missing at the cut to neither part's own run
    missing = (2, 8, segments - 6)     # even: the next segment is captured before the ack over it (a hole)
    whole = cut_everywhere(transfer(segments, missing=missing), step=1 if segments <= 16 else 9)
    assert whole["src2dst_gap_events"][0] > 0 and whole["src2dst_seq_holes"][0] > 0


def test_a_cut_between_the_syn_ack_and_its_ack():
    pkts = handshake_close(0.0)
    whole = flows_of(pkts).finish()
    for parts in ([2], [1, 2], [2, 3]):
        merged = merged_parts(pkts, parts)
        assert merged.inexact_joins == 0
        assert_same_flows(merged.finish(), whole)
    assert whole["handshake_rtt_ms"][0] == pytest.approx(20.0)


def test_a_connection_picked_up_mid_stream_and_continued():
    # no handshake: the first part sees it partial, the later parts continue it (Zeek: OTH, no gap events)
    pkts = transfer(3 * HEAD_MAX, missing=(5, 40), handshake=False)
    whole = cut_everywhere(pkts, step=7)
    assert not whole["history"][0].startswith("S")


def test_an_elephant_flow_whose_acks_count_after_the_head():
    # a long established connection cut far from its start: the later part alone sees it partial (Zeek counts
    # no ack event there), one pass counts every ack; FIN and RST after the head change the endpoint states
    pkts = transfer(6 * HEAD_MAX, missing=(70, 150))
    pkts.append(tcp(pkts[-1]["t"] + 0.01, B, A, 80, 40000, "R", pkts[-2]["seq"] + 1))
    whole = cut_everywhere(pkts, parts=(2, 3, 7), step=23)
    assert whole["src2dst_ack_events"][0] >= 3 * HEAD_MAX and whole["src2dst_gap_events"][0] == 2


def resets_after_the_head():
    """A transfer closed by more RSTs, both ways, than the log holds entries after the head."""
    pkts = transfer(2 * HEAD_MAX)
    t, end = pkts[-1]["t"], pkts[-1]["seq"]
    return pkts + [tcp(t + 0.001 * (i + 1), A if i % 2 else B, B if i % 2 else A, 40000 if i % 2 else 80,
                       80 if i % 2 else 40000, "RA", end, end) for i in range(ENTRIES_MAX + 4)]


def test_more_state_changes_after_the_head_than_the_log_holds():
    # the log overflows: exact where the continuation's endpoint states (and previous states) meet the later
    # part's own at the overflow, as when the later part holds the handshake's SYN-ACK
    pkts = resets_after_the_head()
    whole = flows_of(pkts).finish()
    merged = merged_parts(pkts, [1])
    assert merged.inexact_joins == 0
    assert_same_flows(merged.finish(), whole)


def test_one_direction_with_holes_and_no_acks():
    # a capture of one direction (the acks take another path): every other segment missing, nothing acked, so
    # the holes the parts opened never close; what is counted, the holes, follows the reach alone
    pkts = [tcp(0.001 * i, A, B, 46000, 443, "PA", 1 + 100 * i, 1, payload=100) for i in range(0, 6 * HEAD_MAX, 2)]
    whole = cut_everywhere(pkts, step=5)
    assert whole["src2dst_seq_holes"][0] == 3 * HEAD_MAX - 1


# ---- the residual cases merge.py names: strict, they fail once the merge makes them exact ----------------------
def test_residual_gaps_still_open_after_the_head():
    # A sends every other segment into the capture and B acks nothing for more than HEAD_MAX packets after the
    # cut: the hole open at the cut stays open past the head, the continuation's tracking never meets the later
    # part's own run there, and the merge falls back to adding the parts' counters
    pkts = [tcp(0.0, A, B, 40000, 80, "S", 0), tcp(0.01, B, A, 80, 40000, "SA", 0, 1),
            tcp(0.02, A, B, 40000, 80, "A", 1, 1)]
    for i in range(0, 4 * HEAD_MAX, 2):
        pkts.append(tcp(0.03 + 0.001 * i, A, B, 40000, 80, "PA", 1 + 100 * i, 1, payload=100))
    pkts.append(tcp(1.0, B, A, 80, 40000, "A", 1, 1 + 100 * 4 * HEAD_MAX))
    whole = flows_of(pkts).finish()
    merged = merged_parts(pkts, [10])
    assert merged.inexact_joins == 1
    got = merged.finish()
    assert len(got["first_frame"]) == 1
    assert got["src2dst_seq_holes"][0] < whole["src2dst_seq_holes"][0]


def test_residual_a_retransmission_burst_longer_than_the_head():
    # the sender resends more segments than the head holds, from right after the cut: after the head the later
    # part's run still takes them for new data, the continuation for retransmissions
    packets = go_back(HEAD_MAX + 8)
    first_resent = len(packets) - 3 - (HEAD_MAX + 8)
    whole = flows_of(packets).finish()
    merged = merged_parts(packets, [first_resent])
    assert merged.inexact_joins == 1
    assert merged.finish()["src2dst_retransmits"][0] < whole["src2dst_retransmits"][0] == HEAD_MAX + 8


def test_residual_an_overflow_in_states_that_differ():
    # cut inside the established transfer: at the overflow the later part's own run has reset endpoints that
    # came from partial ones, the continuation's came from established ones (their previous states differ)
    pkts = resets_after_the_head()
    merged = merged_parts(pkts, [10])
    assert merged.inexact_joins == 1


def test_a_split_the_later_part_makes_and_one_pass_does_not():
    # A's SYN, then (after the cut) B's RST and A's SYN again with the same number: the later part's own run has
    # an ended connection and a SYN from a side with none, a new flow; one pass knows that SYN number (a
    # retransmission: the same flow). The merge continues the connection through the flow split off
    pkts = [tcp(0.0, A, B, 40000, 80, "S", 7), tcp(0.1, B, A, 80, 40000, "RA", 0, 8),
            tcp(0.2, A, B, 40000, 80, "S", 7)]
    whole = cut_everywhere(pkts)
    assert len(whole["first_frame"]) == 1


def test_a_flood_of_one_syn_and_its_reset():
    # the same SYN and RST, over and over (a frame flood, one connection to Zeek): a cut after a RST makes the
    # later part start with the SYN, after a SYN with the RST (an ended flow, then a SYN it splits on)
    pkts = []
    for i in range(3 * HEAD_MAX):
        pkts += [tcp(0.01 * i, A, B, 6666, 80, "S", 7), tcp(0.01 * i + 0.005, B, A, 80, 6666, "RA", 0, 8)]
    whole = cut_everywhere(pkts, step=7)
    assert len(whole["first_frame"]) == 1 and whole["state"][0] == "REJ"


def test_logs_stay_bounded():
    # one log row per TCP flow that starts without an open flow of its key, of a fixed width; a merged flow's
    # is dropped
    pkts = transfer(3 * HEAD_MAX)
    left, right = FlowTable(), FlowTable()
    left.update(make_batch(pkts[:20]))
    right.update(make_batch(pkts[20:], first_frame=21))
    assert int(right._counts[3]) == 1
    merged = left.merge(right)
    assert int(merged._counts[3]) == 0 and np.all(merged.finish()["src2dst_packets"] > 0)


def test_a_table_that_begins_the_capture_ships_and_keeps_no_cut_log():
    # no merge reads the log of a table whose first packet is frame 1 (it is never the later side): pickled as a
    # cluster ships it, it carries none, and merging a later table into it keeps none of the later one's either
    import pickle
    pkts = transfer(3 * HEAD_MAX)
    pkts += handshake_close(t=pkts[-1]["t"] + 1.0, sport=40001)      # a connection of the later part alone
    left, right = FlowTable(), FlowTable()
    left.update(make_batch(pkts[:20]))
    right.update(make_batch(pkts[20:], first_frame=21))
    assert left.begins_capture and not right.begins_capture
    assert int(left._counts[3]) >= 1 and int(right._counts[3]) >= 2
    shipped, later = (pickle.loads(pickle.dumps(t)) for t in (left, right))
    assert int(shipped._counts[3]) == len(shipped._CL) == 0 and np.all(shipped.finish()["src2dst_packets"] > 0)
    assert int(later._counts[3]) == int(right._counts[3])
    merged = shipped.merge(later)
    assert merged.begins_capture and int(merged._counts[3]) == 0 and merged.inexact_joins == 0
    assert_same_flows(merged.finish(), flows_of(pkts).finish())

"""syn-flood on the bundled captures (figures counted by tshark too), on the real captures the spec names, and its
state: merged partitions, the early exit, the source sketch, the capture-loss seam."""
from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from detector.analysis import analyze
from detector.decode import decode
from detector.detect.sketch import hll_cells, hll_estimate, hll_merge, top_counts, top_merge
from detector.detectors import active_detectors
from detector.detectors import syn_flood as sf
from detector.ingest import read_captures
from detector.rules import load_rules
from detector.schema import PacketBatch
from tests._cuts import cut as cut_at
from tests._cuts import findings, one_and_merged

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
RULE = "syn-flood"
T0 = 1_767_225_600
SPOOFED = CAPTURES / "syn-flood-spoofed.pcap"
SURICATA = "suricata-verify/tests/firewall/tcp-session-syn-flood-drop-precedence/input.pcap"


def run(path, rules=None):
    rules = load_rules() if rules is None else rules
    return analyze([str(path)], {RULE: rules[RULE]}).findings


def _rules_with(tmp_path, **params):
    lines = "".join(f"  {k}: {v}\n" for k, v in params.items())
    (tmp_path / "syn.yaml").write_text(f"id: {RULE}\nparams:\n{lines}")
    return load_rules(tmp_path)


def test_spoofed_flood_is_high_and_distributed(tshark):
    [f] = run(SPOOFED)
    ev = f.evidence
    assert f.severity == "high" and (f.dest_ip, f.dest_port) == ("10.30.0.80", 443)
    assert f.identifier == "10.30.0.80:443" and f.src_ip is None
    assert ev["flooding_seconds"] == 3 and len(ev["episodes"]) == 1
    assert ev["distributed"] is True and "distributed" in f.msg
    # each spoofed source sent one SYN: none stands out, none is named
    assert ev["top_sources"] == [] and "top source" not in f.msg
    # the flooding seconds are T0+1 .. T0+4: tshark counts the same SYNs and SYN-ACKs there
    window = f"frame.time_epoch >= {T0 + 1} && frame.time_epoch < {T0 + 4}"
    syns = tshark.count(SPOOFED, f"{window} && tcp.flags.syn == 1 && tcp.flags.ack == 0 && ip.dst == 10.30.0.80")
    synacks = tshark.count(SPOOFED, f"{window} && tcp.flags.syn == 1 && tcp.flags.ack == 1 && ip.src == 10.30.0.80")
    assert ev["syn_packets"] == ev["new_syn"] == f.n == syns
    assert ev["synack"] == synacks and ev["synack_per_syn_ratio"] < sf.SYNACK_RATIO_HIGH
    sources = {row[0] for row in tshark.fields(SPOOFED, "ip.src", display_filter=f"{window} && tcp.flags.syn == 1 "
                                                                                   f"&& tcp.flags.ack == 0")}
    assert abs(ev["sources_estimate"] - len(sources)) < 0.05 * len(sources)
    # the genuine clients' handshakes complete; the flood's never: all but those are half-open
    assert 30 < ev["completed_handshakes"] < 60
    assert ev["half_open_estimate"] == ev["new_syn"] - ev["completed_handshakes"]
    assert ev["peak_syn_per_s"] >= 2_560
    # the first and last SYN of each flooding second
    frames = [int(row[0]) for row in tshark.fields(SPOOFED, "frame.number", display_filter=f"{window} && "
                                                   f"tcp.flags.syn == 1 && tcp.flags.ack == 0")]
    assert ev["first_syn_frame"] == frames[0] and ev["last_syn_frame"] == frames[-1]
    assert len(ev["evidence_frames"]) == 6 and set(ev["evidence_frames"]) <= set(frames)


def test_flash_crowd_completing_its_handshakes_is_quiet():
    path = CAPTURES / "syn-flash-crowd.pcap"
    assert run(path) == []
    # it does reach the rate: only the completions keep it quiet
    d = _detector()
    for batch in _batches(path):
        d.update(batch)
    d._compact()
    assert d.bins["syn"].max() >= 2 * d.params["min_syn_pps"]


@pytest.mark.parametrize("name", ["syn-flood-spoofed.pcap", "syn-flood-spoofed-ingress.pcap",
                                  "syn-flood-ingress-only.pcap"])
def test_the_sources_estimate_never_exceeds_the_syns_it_counts(name, tshark):
    """About 9,338 sources for 9,043 new SYNs read as a contradiction: the estimate (a HyperLogLog, ~2 %) is at
    most the SYNs sent to the victim, tshark's count, and the message says so where it is above the flood's."""
    [f] = run(CAPTURES / name)
    ev = f.evidence
    syns = tshark.count(CAPTURES / name, f"tcp.flags.syn == 1 && tcp.flags.ack == 0 && ip.dst == {f.dest_ip} "
                                         f"&& tcp.dstport == {f.dest_port}")
    assert ev["sources_estimate"] <= syns
    if ev["sources_estimate"] > ev["new_syn"]:
        assert f"about {ev['sources_estimate']:,} sources (distributed) over its {syns:,} SYNs in the capture" \
            in f.msg
    else:
        assert "SYNs in the capture" not in f.msg


def test_ingress_only_mirror_is_low_completion_unknown(tshark):
    path = CAPTURES / "syn-flood-ingress-only.pcap"
    [f] = run(path)
    assert f.severity == "low" and "completion unknown" in f.msg
    assert f.evidence["completion_known"] is False and "half_open_estimate" not in f.evidence
    assert f.evidence["sources_estimate"] in range(38, 42) and f.evidence["distributed"] is False
    # 40 sources of about 45 SYNs each in 32 places: every count kept is bounded by the truth (tshark's)
    sources, counts = np.unique([row[0] for row in tshark.fields(path, "ip.src")], return_counts=True)
    true = dict(zip(sources.tolist(), counts.tolist()))
    top = f.evidence["top_sources"]
    assert len(top) > 16 and all(s["syn"] - s["syn_error"] <= true[s["src_ip"]] <= s["syn"] for s in top)


# ---- the spoofed-source signature: no answer needed ------------------------------------------------------

SPOOFED_INGRESS = CAPTURES / "syn-flood-spoofed-ingress.pcap"


def test_a_spoofed_flood_on_an_ingress_mirror_is_high_on_its_own_signature(tshark):
    [f] = run(SPOOFED_INGRESS)
    # the mirror holds no packet from the victim at all: no completion data
    assert tshark.count(SPOOFED_INGRESS, "ip.src == 10.30.0.80") == 0
    ev, sig = f.evidence, f.evidence["spoofing"]
    assert f.severity == "high" and ev["completion_known"] is False and (f.dest_ip, f.dest_port) == ("10.30.0.80", 443)
    # the flood's 15,000 SYNs (every source outside the genuine clients' 10.31/16) are each one SYN, never sent
    # again, never followed by an ACK from their source, each from its own address
    flood = "tcp.flags.syn == 1 && !(ip.src == 10.31.0.0/16)"
    lone = tshark.count(SPOOFED_INGRESS, flood)
    sources = {row[0] for row in tshark.fields(SPOOFED_INGRESS, "ip.src", display_filter=flood)}
    assert lone == 15_000 and len(sources) == 15_000
    assert tshark.count(SPOOFED_INGRESS, "tcp.flags.ack == 1 && !(ip.src == 10.31.0.0/16)") == 0
    assert sig["spoofed"] is True and sig["lone_syn"] == lone and sig["lone_sources"] == len(sources)
    # the genuine clients in the flood's seconds went on to ACK: judged, not lone
    genuine = tshark.count(SPOOFED_INGRESS, "tcp.flags.syn == 1 && ip.src == 10.31.0.0/16 && "
                                            f"frame.time_epoch >= {T0 + 2} && frame.time_epoch < {T0 + 12}")
    assert sig["judged_attempts"] == lone + genuine == ev["new_syn"]
    assert sig["client_acked_attempts"] == genuine == ev["client_acked"] and sig["retried_attempts"] == 0
    assert sig["syn_per_lone_source"] == 1.0 and sig["retry_wait_s"] == sf.RETRY_WAIT_S
    assert (f"spoofed sources: 15,000 of the {lone + genuine:,} attempts seen for 4 s or more (99%) stayed one SYN"
            in f.msg) and "from 15,000 addresses (1.00 per address)" in f.msg and "completion unknown" not in f.msg


def test_the_spoofing_signature_stays_sure_on_a_one_direction_mirror_where_unanswered_syns_do_not():
    """A one-direction capture undermines what rests on answers (the busy server: medium confidence), not the
    lone SYNs of forged sources, which the mirror's own direction shows (high, its basis naming them)."""
    [spoofed] = run(SPOOFED_INGRESS)
    [busy] = run(CAPTURES / "syn-busy-server-ingress.pcap")
    assert (spoofed.severity, spoofed.confidence) == ("high", "high")
    assert any(b.factor == "rule" and "stayed one SYN" in b.why for b in spoofed.confidence_basis)
    assert (busy.severity, busy.confidence) == ("low", "medium")
    assert any("captured one way only" in b.why for b in busy.confidence_basis)


def test_a_busy_server_whose_clients_retry_as_stacks_do_is_low(tshark):
    path = CAPTURES / "syn-busy-server-ingress.pcap"
    [f] = run(path)
    sig = f.evidence["spoofing"]
    assert f.severity == "low" and "completion unknown" in f.msg and "spoofed" not in f.msg
    # every unanswered SYN was sent again with its port and sequence number, after 1 s or 3 s
    retried = tshark.count(path, "tcp.flags.syn == 1 && tcp.analysis.retransmission")
    assert retried > 0 and sig["lone_syn"] == 0 and sig["spoofed"] is False
    assert sig["retried_attempts"] + sig["client_acked_attempts"] >= sig["judged_attempts"] == f.evidence["new_syn"]
    # the clients' ACKs say how many completed: fewer than half, so the rule fires
    acked = f.evidence["client_acked"]
    assert acked == sig["client_acked_attempts"] and acked < 0.5 * f.evidence["new_syn"]


def test_a_flash_crowd_on_an_ingress_mirror_is_quiet():
    # one connection per client, as a spoofed flood has one SYN per source; their ACKs say they completed
    assert run(CAPTURES / "syn-flash-crowd-ingress.pcap") == []


def test_attempts_too_close_to_the_captures_end_are_not_judged(tmp_path, tshark):
    # the spoofed flood cut 3 s after it starts: no attempt had 4 s to be retried, so none is judged lone
    first_after = int(tshark.fields(SPOOFED_INGRESS, "frame.number", display_filter=f"frame.time_epoch >= {T0 + 5}")
                      [0][0])
    path = cut_at(SPOOFED_INGRESS, tmp_path, [first_after])[0]
    [f] = run(path)
    assert f.evidence["spoofing"]["judged_attempts"] == 0 and f.severity == "low"
    assert "completion unknown" in f.msg


def test_a_few_hosts_firing_lone_syns_are_no_spoofed_flood(tmp_path):
    # Mirai's default: a few bots from their own addresses, a new port and sequence number for every SYN, for 8 s
    from scapy.all import IP, TCP, Ether, wrpcap
    packets = []
    for k in range(2_400):
        syn = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src=f"192.0.2.{1 + k % 20}",
                                                                           dst="10.30.0.80") / TCP(
            sport=1024 + k, dport=443, flags="S", seq=k * 7919)
        syn.time = T0 + k / 300
        packets.append(syn)
    wrpcap(str(tmp_path / "bots.pcap"), packets)
    [f] = run(tmp_path / "bots.pcap")
    sig = f.evidence["spoofing"]
    assert sig["lone_syn"] == sig["judged_attempts"] > 0 and sig["lone_sources"] == 20
    assert sig["spoofed"] is False and f.severity == "low"


def test_evidence_lists_are_capped_and_say_what_they_left_out(monkeypatch):
    monkeypatch.setattr(sf, "BINS_IN_EVIDENCE", 4)
    monkeypatch.setattr(sf, "EPISODES_IN_EVIDENCE", 0)
    [f] = run(SPOOFED_INGRESS)
    ev = f.evidence
    assert len(ev["per_second"]) == 4 and ev["per_second_left_out"] == ev["flooding_seconds"] - 4
    assert ev["episodes"] == [] and ev["episodes_left_out"] == 1
    assert ev["top_sources"] == [] and ev["top_sources_left_out"] == ev["sources_estimate"]


def test_critical_above_a_hundred_times_the_rate(monkeypatch):
    monkeypatch.setattr(sf, "CRITICAL_SYN_PPS", 3_000)
    [f] = run(SPOOFED)
    assert f.severity == "critical"


def test_capture_loss_makes_a_flood_critical():
    [f] = run(SPOOFED)
    lossy = sf.SynFlood.with_capture_loss(f, 0.25)
    assert lossy.severity == "critical" and lossy.evidence["capture_loss_ratio"] == 0.25
    assert sf.SynFlood.with_capture_loss(f, 0.01).severity == "high"
    [low] = run(CAPTURES / "syn-flood-ingress-only.pcap")
    assert sf.SynFlood.with_capture_loss(low, 0.5).severity == "low"


# ---- the real captures the spec names ----------------------------------------------------------------

def test_suricatas_200_syns_silent_at_defaults_found_at_100(captures_real, tmp_path):
    path = captures_real / SURICATA
    assert run(path) == []
    [f] = run(path, _rules_with(tmp_path, min_syn_pps=100))
    # 198.51.100.5 never answers in the capture: completion unknown
    assert f.severity == "low" and (f.dest_ip, f.dest_port) == ("198.51.100.5", 443) and f.n == 200
    assert f.evidence["top_sources"][0] == {"src_ip": "192.0.2.10", "syn": 200, "syn_error": 0}
    assert f.evidence["sources_estimate"] == 1 and f.src_ip == "192.0.2.10"


@pytest.mark.parametrize("name", ["zeek/testing/btest/Traces/tcp/syn.pcap",
                                  "zeek/testing/btest/Traces/tcp/syn-bad.pcap",
                                  "zeek/testing/btest/Traces/tcp/syn-synack.pcap",
                                  "zeek/testing/btest/Traces/tcp/syn-then-rst.pcap",
                                  "zeek/testing/btest/Traces/tcp/syn-then-ack-then-rst.pcap",
                                  "zeek/testing/btest/Traces/tcp/syn-then-stuff-then-rst.pcap",
                                  "lucaderi-sgr/2022/Favilli/tests/hs-tcp_ackPingSweepRand.pcapng"])
def test_real_negatives(captures_real, name):
    assert run(captures_real / name) == []


# ---- state -----------------------------------------------------------------------------------------------

def _detector():
    return next(d for d in active_detectors(load_rules()) if d.rule_id == RULE)


def _batches(path):
    return [decode(raw) for _, raw in read_captures([str(path)])]


def _slice(batch, start, stop):
    return PacketBatch(data=batch.data, cols={k: v[start:stop] for k, v in batch.cols.items()})


def _comparable(findings):
    # the top sources too: a victim's sources up to SOURCES_COUNTED are counted exactly whatever the cut, and the
    # spoofed flood's 9,000 (one SYN each) name none either way
    return [f.to_json() for f in findings]


@pytest.mark.parametrize("name", ["syn-flood-spoofed.pcap", "syn-flood-ingress-only.pcap"])
def test_two_halves_merged_give_one_pass(name):
    path = CAPTURES / name
    ctx = analyze([str(path)], {RULE: load_rules()[RULE]}).context
    batches = _batches(path)
    whole = _detector()
    for batch in batches:
        whole.update(batch)
    one = _comparable(whole.findings(ctx))
    assert one
    (batch,) = batches
    for cut in (1, len(batch) // 3, len(batch) // 2):
        left, right = _detector(), _detector()
        left.update(_slice(batch, 0, cut))
        right.update(_slice(batch, cut, len(batch)))
        assert _comparable(left.merge(right).findings(ctx)) == one
        # the later half first: merge does not depend on the order it is called in
        left, right = _detector(), _detector()
        left.update(_slice(batch, 0, cut))
        right.update(_slice(batch, cut, len(batch)))
        assert _comparable(right.merge(left).findings(ctx)) == one
    # batch by batch through one state, as a watch feeds it, with the folds of pending rows in between
    stream = _detector()
    for start in range(0, len(batch), 700):
        stream.update(_slice(batch, start, start + 700))
    assert _comparable(stream.findings(ctx)) == one


@pytest.mark.parametrize("tree", [False, True], ids=["in-order", "tree"])
def test_cuts_inside_the_flood_merge_to_the_top_sources_of_one_pass(tmp_path, tree):
    # the flood's 40 sources each in every part, the parts cut inside its flooding seconds: every part counts
    # all of them, so the merged counts are exact (as one pass's, and tshark's) and bound by no error
    path = CAPTURES / "syn-flood-ingress-only.pcap"
    whole = findings(analyze([str(path)], load_rules()), RULE)
    one, many = one_and_merged(cut_at(path, tmp_path, [400, 401, 900, 1_333]), RULE, tree=tree)
    assert len(whole) == 1 and one == whole and many == whole
    top = whole[0]["evidence"]["top_sources"]
    assert len(top) == sf.TOP_SOURCES and {s["syn_error"] for s in top} == {0}


def test_without_a_flow_table_the_syn_packets_are_the_attempts():
    from detector.detectors import AnalysisContext
    from detector.stats import CaptureStats
    d = _detector()
    for batch in _batches(SPOOFED):
        d.update(batch)
    [f] = d.findings(AnalysisContext(flows=None, stats=CaptureStats()))
    assert f.severity == "high" and f.evidence["new_syn"] == f.evidence["syn_packets"]
    assert f.evidence["completed_handshakes"] == 0 and "retransmissions counted again" in f.evidence["new_syn_from"]


def test_batches_without_syn_cost_nothing():
    (batch,) = _batches(CAPTURES / "syn-flash-crowd.pcap")
    no_syn = np.flatnonzero((batch["tcp_flags"] & 0x02) == 0)
    cols = {k: v[no_syn] for k, v in batch.cols.items()}
    # the clients' ACKs turned into RSTs: what the rule counts, but only in a batch with SYNs
    cols["tcp_flags"] = np.full(len(no_syn), 0x14, dtype=cols["tcp_flags"].dtype)
    d = _detector()
    d.update(PacketBatch(data=batch.data, cols=cols))
    assert d.pending == [] and len(d.bins["key"]) == 0 and len(d.cells["group"]) == 0


def test_bin_rows_are_bounded(monkeypatch):
    monkeypatch.setattr(sf, "MAX_BIN_ROWS", 2)
    monkeypatch.setattr(sf, "FOLD_EVERY_ROWS", 1)
    d = _detector()
    (batch,) = _batches(CAPTURES / "syn-flood-spoofed.pcap")
    for start in range(0, len(batch), 1000):
        d.update(_slice(batch, start, start + 1000))
    d._compact()
    assert len(d.bins["key"]) == 2 and d.dropped_rows > 0
    # the busiest seconds of the flood are the rows kept
    assert (d.bins["syn"] > 2_000).all()


def test_source_sketches_are_bounded(monkeypatch):
    monkeypatch.setattr(sf, "MAX_CELLS", 100)
    d = _detector()
    (batch,) = _batches(CAPTURES / "syn-flood-spoofed.pcap")
    d.update(batch)
    d._compact()
    # the flood's victim alone has some 3,600 registers set (9,000 sources over 4,096): it does not fit
    assert len(d.cells["group"]) == 0 and d.dropped_cells > 3_000
    ingress = _detector()
    (batch,) = _batches(CAPTURES / "syn-flood-ingress-only.pcap")
    ingress.update(batch)
    ingress._compact()
    assert 30 < len(ingress.cells["group"]) <= 40 and ingress.dropped_cells == 0


def test_live_counter_counts_syns_and_synacks(tshark):
    (batch,) = _batches(SPOOFED)
    [counter] = _detector().live_counters()
    syn, synack = counter.count(batch)
    assert syn == tshark.count(SPOOFED, "tcp.flags.syn == 1 && tcp.flags.ack == 0")
    assert synack == tshark.count(SPOOFED, "tcp.flags.syn == 1 && tcp.flags.ack == 1")


def test_figure_draws_the_numbers_of_the_message():
    """One number, one source: the figure's new-SYN line is the per-second count the finding's message and
    evidence give (its highest point in the flood is the peak, its sum over the flood the new SYNs), the
    completed line sums to the completed handshakes, and the SYN-ACK line to the SYN-ACKs."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from detector.detect.figure import TimeBins
    analysis = analyze([str(SPOOFED)], {RULE: load_rules()[RULE]})
    [f] = analysis.findings
    [detector] = [d for d in analysis.detectors if d.rule_id == RULE]
    # a report axis of 10 ms bins: the figure stays per second, as the message counts
    bins = TimeBins(T0 * 10**9, 10**7, 600)
    [figure] = detector.figures([f], bins)
    fig, ax = plt.subplots()
    figure.draw(ax, analysis.context.flows)
    new, synack, completed = ax.get_lines()
    assert [line.get_label() for line in (new, synack, completed)] == \
        ["new SYNs to 10.30.0.80:443", "its SYN-ACKs", "completed handshakes"]
    x, y = new.get_xdata(), new.get_ydata()
    first, last = (f.first_seen - bins.start_ns) / 1e9, (f.last_seen - bins.start_ns) / 1e9
    inside = (x >= np.floor(first)) & (x <= last)
    assert y[inside].max() == f.evidence["peak_syn_per_s"] and f"peak {y[inside].max():,}/s" in f.msg
    assert y[inside].sum() == f.evidence["new_syn"] and f"received {y[inside].sum():,} new SYNs" in f.msg
    assert completed.get_ydata()[inside].sum() == f.evidence["completed_handshakes"]
    assert completed.get_ydata().sum() == 75          # the capture's legitimate handshakes, in the flood and out of it
    assert synack.get_ydata()[inside].sum() == f.evidence["synack"]
    plt.close(fig)


# ---- the sketch -------------------------------------------------------------------------------------------

def test_hyperloglog_counts_and_merges_by_maximum():
    rng = np.random.default_rng(7)
    for n in (1, 37, 3_000, 200_000):
        items = rng.integers(0, 2**63, n).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        groups = np.zeros(n, np.uint64)
        cells = hll_cells(groups, items)
        estimate = hll_estimate(cells, np.array([0, 1], np.uint64))
        assert abs(estimate[0] - n) <= max(1, 0.05 * n) and estimate[1] == 0
        halves = hll_merge(hll_cells(groups[: n // 3], items[: n // 3]), hll_cells(groups[n // 3:], items[n // 3:]))
        assert all(np.array_equal(halves[k], cells[k]) for k in cells)


def test_space_saving_keeps_the_heavy_hitter_with_bounded_error():
    rng = np.random.default_rng(8)
    items = np.concatenate([np.full(500, 42), rng.integers(1000, 5000, 5000)]).astype(np.uint64)
    rng.shuffle(items)
    groups = np.zeros(len(items), np.uint64)
    summary = top_counts(groups[:0], items[:0], 4)
    for start in range(0, len(items), 900):
        # the summaries of three batches merged at once into the running one
        batches = [top_counts(groups[at:at + 300], items[at:at + 300], 4) for at in range(start, start + 900, 300)]
        summary = top_merge([summary, *batches], 4)
    assert len(summary["item"]) == 4 and summary["item"][0] == 42
    true = {int(v): int(c) for v, c in zip(*np.unique(items, return_counts=True))}
    for item, count, error in zip(summary["item"], summary["count"], summary["error"]):
        assert count - error <= true[int(item)] <= count


def _summary(groups, items, k, cuts, tree=False):
    """top_counts of the stream cut at `cuts`, merged one after the other or (`tree`) neighbours in pairs."""
    bounds = [0, *cuts, len(items)]
    parts = [top_counts(groups[a:b], items[a:b], k) for a, b in pairwise(bounds)]
    while len(parts) > 1:
        parts = ([top_merge(parts[i:i + 2], k) for i in range(0, len(parts), 2)] if tree
                 else [top_merge(parts[:2], k), *parts[2:]])
    return parts[0]


def _check_bounds(summary, groups, items):
    """count - error <= true <= count for every item kept; an item not kept sent at most its group's floor."""
    pairs, true = np.unique(np.stack([groups, items]), axis=1, return_counts=True)
    true = {(int(g), int(i)): int(c) for (g, i), c in zip(pairs.T, true)}
    kept = {(int(g), int(i)): (int(c), int(e)) for g, i, c, e in
            zip(summary["group"], summary["item"], summary["count"], summary["error"])}
    floors = {int(g): int(f) for g, f in zip(summary["group"], summary["floor"])}
    for pair, n in true.items():
        if pair in kept:
            count, error = kept[pair]
            assert count - error <= n <= count, (pair, n, count, error)
        else:
            assert n <= floors.get(pair[0], 0), (pair, n, floors.get(pair[0]))
    return true, kept


def test_top_k_summaries_that_dropped_nothing_merge_to_the_exact_counts():
    rng = np.random.default_rng(9)
    k = 8
    # three groups of at most k items each (the first exactly k, so its summaries are full): whatever the cuts,
    # sequential or tree, the merge is the one summary of the whole stream, exact
    groups = rng.integers(0, 3, 600).astype(np.uint64)
    items = np.where(groups == 0, rng.integers(0, k, 600), rng.integers(100, 100 + k - 3, 600)).astype(np.uint64)
    whole = top_counts(groups, items, k)
    true, kept = _check_bounds(whole, groups, items)
    assert kept == {pair: (n, 0) for pair, n in true.items()} and not whole["floor"].any()
    for trial in range(40):
        cuts = sorted(rng.choice(np.arange(1, 600), size=rng.integers(1, 12), replace=False).tolist())
        got = _summary(groups, items, k, cuts, tree=bool(trial % 2))
        assert all(np.array_equal(got[name], whole[name]) for name in whole), cuts
    # a full summary that never dropped an item lacks another one for sure: a merge adds no error for it, and
    # the item then dropped bounds what is left out
    groups = np.zeros(k + 1 + 3, np.uint64)
    items = np.array([*range(k), k, k, k, 0], np.uint64)
    merged = _summary(groups, items, k, [k])
    true, kept = _check_bounds(merged, groups, items)
    assert kept[(0, k)] == (3, 0) and kept[(0, 0)] == (2, 0)
    assert set(merged["floor"].tolist()) == {1} and len(kept) == k


def test_top_k_merge_keeps_its_bounds_where_summaries_dropped_items():
    rng = np.random.default_rng(10)
    k = 8
    # a heavy hitter, a few medium items and a long tail, in two groups: every cut drops items somewhere
    n = 4_000
    items = np.concatenate([np.full(600, 7), rng.integers(20, 26, 900), rng.zipf(1.3, n - 1_500) + 1_000])
    items = items.astype(np.uint64)
    rng.shuffle(items)
    groups = rng.integers(0, 2, n).astype(np.uint64)
    for trial in range(30):
        cuts = sorted(rng.choice(np.arange(1, n), size=rng.integers(1, 40), replace=False).tolist())
        summary = _summary(groups, items, k, cuts, tree=bool(trial % 2))
        _, kept = _check_bounds(summary, groups, items)
        assert (0, 7) in kept and (1, 7) in kept and summary["floor"].max() > 0
    # a part that kept all its items adds no error to those another part counted exactly
    groups = np.zeros(40, np.uint64)
    items = np.array([*([1] * 10), *([2] * 9), *range(100, 110), 1, 2, 1, 2, 1, 2, 1, 2, 3, 3, 1], np.uint64)
    summary = _summary(groups, items, 4, [29])
    _, kept = _check_bounds(summary, groups, items)
    assert kept[(0, 1)] == (15, 0) and kept[(0, 2)] == (13, 0)


# ---- live -------------------------------------------------------------------------------------------------

def test_watch_alerts_once_on_the_victim_while_the_flood_grows():
    from detector.ingest import open_capture
    from detector.live.alerts import AlertBook
    from detector.live.window import SlidingWindow
    rules = {RULE: load_rules()[RULE]}
    window = SlidingWindow(rules, now=0.0, slice_s=1.0, slices=1000)
    book = AlertBook(rules)
    events = []
    with open_capture(SPOOFED, batch_packets=1000) as reader:
        for k, raw in enumerate(reader):
            window.update(decode(raw), now=float(k))
            events += book.observe(window.analysis().findings, float(k), 0.0)
    alerts = [e for e in events if e.kind == "alert"]
    assert [(e.tracked.finding.rule, e.tracked.finding.identifier) for e in alerts] == [(RULE, "10.30.0.80:443")]
    assert alerts[0].tracked.finding.severity == "high"


def test_ipv6_victim_on_a_vlan_with_completions_counted(tmp_path):
    """The victim's address as the flow table writes it (IPv6 text) is the one its handshakes are looked up
    by: 400 SYNs in a second from 400 sources, 30 answered and completed."""
    from scapy.all import TCP, Dot1Q, Ether, IPv6, wrpcap
    victim, packets = "2001:db8:30::80", []
    # both MACs given: scapy would otherwise resolve them on the network
    eth, eth_r = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02"), Ether(src="02:00:00:00:00:02",
                                                                                 dst="02:00:00:00:00:01")
    for k in range(400):
        client = f"2001:db8:99::{k + 1:x}"
        t = T0 + 10 + k / 400
        syn = eth / Dot1Q(vlan=30) / IPv6(src=client, dst=victim) / TCP(sport=40000 + k, dport=80, flags="S",
                                                                            seq=1000)
        syn.time = t
        packets.append(syn)
        if k % 13 == 0:
            answer = eth_r / Dot1Q(vlan=30) / IPv6(src=victim, dst=client) / TCP(sport=80, dport=40000 + k,
                                                                                  flags="SA", seq=5000, ack=1001)
            answer.time = t + 0.0005
            ack = eth / Dot1Q(vlan=30) / IPv6(src=client, dst=victim) / TCP(sport=40000 + k, dport=80,
                                                                                flags="A", seq=1001, ack=5001)
            ack.time = t + 0.0010
            packets += [answer, ack]
    wrpcap(str(tmp_path / "v6.pcap"), packets)
    [f] = run(tmp_path / "v6.pcap")
    assert (f.dest_ip, f.dest_port, f.n) == (victim, 80, 400)
    assert f.evidence["completed_handshakes"] == f.evidence["synack"] == 31
    assert f.severity == "high" and f.evidence["synack_per_syn_ratio"] < 0.1


def test_a_flood_the_capture_could_not_keep_up_with_is_critical():
    # seed 002: "mostly SYN flood, but our mirror port couldn't keep up": the spoofed flood read together with a
    # transfer that lost every n-th segment from the capture in the same seconds
    rules = {k: v for k, v in load_rules().items() if k in ("syn-flood", "capture-loss")}
    findings = analyze([CAPTURES / "syn-flood-spoofed.pcap", CAPTURES / "loss-every-nth-segment.pcap"], rules,
                       label="test").findings
    (flood,) = [f for f in findings if f.rule == "syn-flood"]
    (loss,) = [f for f in findings if f.rule == "capture-loss" and f.severity != "info"]
    assert flood.severity == "critical" and loss.severity == "high"
    assert flood.evidence["capture_loss_ratio"] == pytest.approx(loss.evidence["loss_ratio"], abs=1e-4)
    # alone, the same flood is high
    assert [f.severity for f in run(CAPTURES / "syn-flood-spoofed.pcap")] == ["high"]

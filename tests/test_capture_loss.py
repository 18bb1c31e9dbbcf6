"""capture-loss: ACK gaps per bin from the flow pass's per-packet events, drop counters, the loss ratio
other findings carry, and the near-misses (mid-stream, one-sided, snapshot length)."""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from detector import engine
from detector.analysis import analyze
from detector.commands import analyze as analyze_command
from detector.decode import decode
from detector.detectors import REGISTRY
from detector.flows import FlowTable
from detector.flows.kernel import EV_ACK, EV_GAP, EV_MID_STREAM, EV_NONE, EV_SNAPPED
from detector.ingest import open_capture
from detector.live.window import SlidingWindow
from detector.rules import load_rules

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
sys.path.insert(0, str(CAPTURES))
import build_loss  # noqa: E402 - the capture builders, for variants of the bundled captures
import build_tcp_calibration as calibration  # noqa: E402

RULE = "capture-loss"
EVERY_NTH = CAPTURES / "loss-every-nth-segment.pcap"
MIRROR_PEAK = CAPTURES / "loss-mirror-peak.pcap"
DROPS = CAPTURES / "loss-interface-drops.pcapng"
NEAR_MISSES = CAPTURES / "loss-near-misses.pcap"
SNAPLEN = CAPTURES / "loss-snaplen-96.pcap"
STORAGE = CAPTURES / "loss-storage-writes.pcap"
FEW_ACKS = CAPTURES / "loss-http-few-acks.pcap"
PICKUP = CAPTURES / "loss-pickup-near-misses.pcap"
LOOP = CAPTURES / "echo-loop-rip-ipv4.pcapng"


def only_rule(*extra):
    rules = load_rules()
    return {rule_id: rule for rule_id, rule in rules.items() if rule_id in (RULE, *extra)}


def found(*paths, extra=()):
    return [f for f in analyze([str(p) for p in paths], only_rule(*extra), label="test").findings if f.rule == RULE]


def events_of(path) -> np.ndarray:
    """Every packet's capture-gap event as the flow pass marks it."""
    table, out = FlowTable(), []

    class Collect:
        needs_fingerprint = False

        def update(self, batch):
            table.update(batch)
            out.append(batch.flow_events.copy())

    engine.run([str(path)], [Collect()])
    return np.concatenate(out)


# ---- the flow pass's events ---------------------------------------------------------------------------------
def test_the_flow_pass_marks_ack_and_gap_events_per_packet():
    events = events_of(EVERY_NTH)
    counts = np.bincount(events, minlength=8)
    # 4 downloads x 60 acks of the client, each over a missing segment; 4 acks of the request and FINs
    assert counts[EV_GAP] == 240 and counts[EV_ACK] == 4
    assert counts[EV_SNAPPED] == 0 and counts[EV_MID_STREAM:].sum() == 0


def test_bytes_cut_by_the_snapshot_length_are_snapped_gaps_not_loss():
    counts = np.bincount(events_of(SNAPLEN), minlength=8)
    assert counts[EV_SNAPPED] > 200 and counts[EV_GAP] == 0
    # Zeek counts them as content gaps all the same: the flow columns stay Zeek's
    flows = FlowTable()
    engine.run([str(SNAPLEN)], [flows])
    frame = flows.to_frame()
    assert (frame["dst2src_gap_bytes"] > 0).all()


def test_a_snapped_capture_that_also_lost_segments_counts_the_lost_ones(tmp_path):
    # tcpdump -s 96 of a download whose every fourth segment the capture also lost: an ack over a cut segment
    # alone is no loss, an ack over a cut one and a lost one is
    frames = build_loss.transfer(0.5, "10.30.0.10", build_loss.SERVER, 40000, 120, missing=lambda i: i % 4 == 1)
    path = tmp_path / "both.pcap"
    build_loss.write_pcap(path, frames, snaplen=build_loss.SHORT_SNAPLEN)
    counts = np.bincount(events_of(path), minlength=8)
    assert counts[EV_GAP] == 30 and counts[EV_SNAPPED] >= 30


def test_connections_picked_up_mid_stream_are_marked_so():
    # partial on both sides (no handshake): Zeek's reassembler counts no ack event there; the flow pass marks them
    # mid-stream where the capture holds payload of the end acknowledged (the four downloads picked up, not the
    # one-sided ones)
    events = events_of(NEAR_MISSES)
    assert np.count_nonzero((events > EV_NONE) & (events < EV_MID_STREAM)) == 0
    assert np.count_nonzero(events == EV_GAP + EV_MID_STREAM) > 100
    flows = FlowTable()
    engine.run([str(NEAR_MISSES)], [flows])
    assert flows.to_frame()[["src2dst_ack_events", "dst2src_ack_events"]].to_numpy().sum() == 0


def test_a_connection_whose_syn_was_not_captured_is_marked_mid_stream(captures_real):
    # the capture starts at the SYN-ACK: the flow pass counts its gaps (Zeek would), marked mid-stream
    events = events_of(captures_real / "ndpi/tests/cfgs/default/pcap/tls_missing_ch_frag.pcap")
    assert np.count_nonzero(events == EV_GAP + EV_MID_STREAM) == 2 and np.count_nonzero(events == EV_GAP) == 0


# ---- findings on the bundled captures --------------------------------------------------------------------
def test_every_second_segment_missing_is_high_with_evidence():
    (f,) = found(EVERY_NTH)
    assert f.severity == "high" and f.identifier == "tcp ack gaps"
    ev = f.evidence
    assert ev["gap_events"] == 240 and ev["ack_events"] == 244 and ev["lossy_bins"] == 1
    assert ev["loss_ratio"] == pytest.approx(240 / 244, abs=1e-4)
    # the first gap events' frames: the client's acks over missing segments, at most 64
    assert len(ev["evidence_frames"]) == 64 and ev["evidence_frames"] == sorted(ev["evidence_frames"])
    events = events_of(EVERY_NTH)
    assert all(events[frame - 1] == EV_GAP for frame in ev["evidence_frames"])
    assert ev["evidence_frames"] == (np.flatnonzero(events == EV_GAP)[:64] + 1).tolist()
    worst = ev["worst_flows"]
    assert len(worst) == 4 and all(w["gap_bytes"] == 60 * build_loss.SEGMENT for w in worst)
    assert worst[0]["dest"].startswith("10.30.0.") or worst[0]["src"].startswith("10.30.0.")


def test_a_mirror_port_losing_at_its_peak_minute_is_medium_over_that_minute_only():
    (f,) = found(MIRROR_PEAK)
    assert f.severity == "medium"
    ev = f.evidence
    assert ev["bins"] == 3 and ev["lossy_bins"] == 1
    assert ev["loss_ratio"] == pytest.approx(120 / 492, abs=1e-4)
    (peak,) = ev["per_bin"]
    assert peak["start"] == "2026-01-01T00:01:00.000000Z" and peak["gap_events"] == 120
    assert f.first_seen == (build_loss.T0 + 60) * 10**9 and f.last_seen == (build_loss.T0 + 120) * 10**9 - 1
    assert "the capture lost traffic" in f.msg and "packets/s" in f.msg


def test_near_misses_mid_stream_and_one_sided_are_silent():
    assert found(NEAR_MISSES) == []


def test_connections_whose_syn_the_capture_missed_are_left_out(tmp_path):
    # the capture starts between each SYN and its SYN-ACK: what the connection sent before is unknown
    frames = []
    for k, (client, port) in enumerate(build_loss._clients(4)):
        frames += build_loss.transfer(0.5 + k * 0.7, client, build_loss.SERVER, port, 120,
                                      missing=lambda i: i % 2 == 1)[1:]
    path = tmp_path / "no-syn.pcap"
    build_loss.write_pcap(path, frames)
    assert np.count_nonzero(events_of(path) == EV_GAP + EV_MID_STREAM) == 240
    assert found(path) == []


def test_a_snaplen_96_capture_is_silent():
    assert found(SNAPLEN) == []


def test_bins_below_min_acks_are_not_judged(tmp_path):
    # one download losing every second segment: 60 gap events in 61 acks, fewer than min_acks: lost traffic (low),
    # how much unknown
    frames = build_loss.transfer(0.5, "10.30.0.10", build_loss.SERVER, 40000, 120, missing=lambda i: i % 2 == 1)
    path = tmp_path / "small.pcap"
    build_loss.write_pcap(path, frames)
    (f,) = found(path)
    assert f.severity == "low" and "too few acks to say how much" in f.msg and f.evidence["lossy_bins"] == 0
    # two lost segments of them are a fact (info)
    frames = build_loss.transfer(0.5, "10.30.0.10", build_loss.SERVER, 40000, 120, missing=lambda i: i in (9, 71))
    build_loss.write_pcap(path, frames)
    (f,) = found(path)
    assert f.severity == "info" and "too few acks to judge" in f.msg and f.evidence["gap_events"] == 2


def test_loss_spread_thin_over_small_bins_is_judged_overall(tmp_path):
    # five downloads a minute apart, each losing every fourth segment: 30 acks a bin, 150 overall
    rng = random.Random(1)
    frames = []
    for k in range(5):
        frames += build_loss.transfer(5 + 60 * k, f"10.30.0.{10 + k}", build_loss.SERVER, 40000 + k, 60,
                                      missing=lambda i: i % 4 == 1, rng=rng)
    path = tmp_path / "thin.pcap"
    build_loss.write_pcap(path, frames)
    (f,) = found(path)
    assert f.severity == "medium" and f.evidence["bins"] == 5 and f.evidence["lossy_bins"] == 5


# ---- issue 27, miss 5: storage writes, a short download ---------------------------------------------------------
def test_storage_writes_missing_all_but_their_last_segment_are_high(tshark):
    # two iSCSI sessions picked up mid-stream (no handshake: Zeek counts nothing), each 64 KB write missing but its
    # last segment, which the target acks: one gap event in four, 99 % of the bytes
    (f,) = found(STORAGE)
    ev = f.evidence
    assert f.severity == "high" and ev["loss_ratio"] == 0.25 and ev["byte_loss_ratio"] > 0.99
    # the writes of the capture's first 5 s are left out: 25 a session of 350
    assert (ev["mid_stream_judged_gap_events"], ev["mid_stream_judged_ack_events"]) == (650, 2600)
    assert ev["mid_stream_ack_events"] == 200 and ev["gap_events"] == 650 and ev["lossy_bins"] == 2
    assert "picked up mid-stream" in f.msg and "99.2% of the bytes" in f.msg
    # tshark: each last segment follows bytes never captured, and the target's ack after it is a gap event
    assert tshark.count(STORAGE, "tcp.analysis.lost_segment") == 700
    acks = {int(n) for [n] in tshark.fields(STORAGE, "frame.number", display_filter="tcp.srcport == 3260 && "
                                                                                     "tcp.len == 0")}
    assert len(ev["evidence_frames"]) == 64 and set(ev["evidence_frames"]) <= acks
    first_judged = min(int(n) for [n, t] in tshark.fields(STORAGE, "frame.number", "frame.time_relative",
                                                          display_filter="tcp.srcport == 3260 && tcp.len == 0")
                       if float(t) >= 5.0)
    assert ev["evidence_frames"][0] == first_judged


def test_storage_writes_whose_sessions_opened_in_the_capture_are_high_by_their_bytes(tmp_path):
    # the same writes with their handshakes: one ack event in four passes over lost bytes (medium by the events),
    # 99 % of the bytes (high)
    rng = random.Random(2704)
    target = calibration.Host("10.42.0.50", calibration.MAC["server"], 1)
    frames = calibration.iscsi_writes(0.01, calibration.Host("10.42.0.11", calibration.MAC["client"], 5), target,
                                      51000, 350, 0.2, rng, kept=lambda i, last: last, pickup=False)
    path = tmp_path / "opened.pcap"
    calibration.write_records(path, calibration.in_time_order(frames))
    (f,) = found(path)
    assert f.severity == "high" and f.evidence["loss_ratio"] == 0.25 and f.evidence["byte_loss_ratio"] > 0.99
    assert f.evidence["mid_stream_judged_ack_events"] == 0 and f.evidence["gap_events"] == 350
    # writes that lost one segment in eight of each burst: medium by the events and the bytes alike
    frames = calibration.iscsi_writes(0.01, calibration.Host("10.42.0.11", calibration.MAC["client"], 5), target,
                                      51000, 350, 0.2, rng, kept=lambda i, last: i % 8 != 3, pickup=False)
    calibration.write_records(path, calibration.in_time_order(frames))
    (f,) = found(path)
    assert f.severity == "medium" and f.evidence["byte_loss_ratio"] < 0.2


def test_connections_picked_up_mid_stream_are_left_out_in_the_capture_s_first_seconds(tmp_path):
    # the storage writes for 4 s only: every write in the capture's first 5 s, none judged
    rng = random.Random(2704)
    target = calibration.Host("10.42.0.50", calibration.MAC["server"], 1)
    frames = calibration.iscsi_writes(0.01, calibration.Host("10.42.0.11", calibration.MAC["client"], 5), target,
                                      51000, 20, 0.2, rng, kept=lambda i, last: last)
    path = tmp_path / "short.pcap"
    calibration.write_records(path, calibration.in_time_order(frames))
    assert np.count_nonzero(events_of(path) == EV_GAP + EV_MID_STREAM) == 20
    assert found(path) == []


def test_a_short_download_missing_five_segments_is_low(tshark):
    (f,) = found(FEW_ACKS)
    ev = f.evidence
    assert f.severity == "low" and (ev["gap_events"], ev["ack_events"]) == (5, 15)
    assert "too few acks to say how much (min_acks 100)" in f.msg
    # tshark's client acks (relative numbers): the gaps are the first ack at or past the end of each segment the
    # capture lost (4, 9, 14, 19, 24 of 1,448 bytes each, after the 1-byte SYN)
    acks = [(int(n), int(a)) for n, a in tshark.fields(FEW_ACKS, "frame.number", "tcp.ack",
                                                      display_filter="tcp.srcport == 50123 && tcp.len == 0 && "
                                                                     "tcp.flags.fin == 0 && frame.number > 3")]
    ends = [1 + calibration.SEGMENT * (i + 1) for i in (4, 9, 14, 19, 24)]
    assert ev["evidence_frames"] == [next(n for n, a in acks if a >= end) for end in ends]


def test_a_short_download_none_of_whose_data_the_capture_holds_is_info(tmp_path):
    # every ack passes over bytes never captured, but of an end none of whose payload the capture holds (its segments
    # elsewhere, unreadable, or never sent): in so few acks, no sign of the capture's loss
    rng = random.Random(2705)
    client = calibration.Host("10.43.0.20", calibration.MAC["client"], 1)
    server = calibration.Host("198.51.100.80", calibration.MAC["server"], 2)
    path = tmp_path / "unseen.pcap"
    calibration.write_records(path, calibration.in_time_order(
        calibration.http_download(0.1, client, server, 50123, 28, rng, lost=set(range(28)))))
    (f,) = found(path)
    assert f.severity == "info" and f.evidence["gap_events"] == 14 and "too few acks to judge" in f.msg


def test_long_lived_connections_picked_up_mid_stream_and_one_sided_are_quiet():
    # bulk transfers whose first acks pass over bytes in flight when the capture started (in its first seconds),
    # a session mirrored in one direction (acks of bytes none of which the capture holds), one lost segment
    (f,) = found(PICKUP)
    ev = f.evidence
    assert f.severity == "info" and ev["gap_events"] == 1
    assert ev["mid_stream_judged_ack_events"] == 600 and ev["mid_stream_judged_gap_events"] == 0
    events = events_of(PICKUP)
    frames = FlowTable()
    engine.run([str(PICKUP)], [frames])
    flows = frames.to_frame()
    (lone,) = flows.index[(flows["src_port"] == 873) | (flows["dest_port"] == 873)]
    assert flows.loc[lone, "src2dst_payload_bytes"] + flows.loc[lone, "dst2src_payload_bytes"] == 0
    assert np.count_nonzero(events == EV_GAP + EV_MID_STREAM) == 20      # the in-flight windows, in the first 5 s


# ---- drop counters ---------------------------------------------------------------------------------------
def test_pcapng_interface_drops_over_five_percent_are_medium():
    findings = found(DROPS)
    (drops,) = [f for f in findings if f.identifier.startswith("drops")]
    assert drops.severity == "medium" and drops.n == 73
    assert drops.evidence["received"] == 364 and drops.evidence["drop_ratio"] == pytest.approx(73 / 364, abs=1e-4)
    assert drops.evidence["interface"] == "eth1"
    # the TCP in the file lost nothing: no ack-gap finding above info
    assert all(f.severity == "info" for f in findings if f.identifier == "tcp ack gaps")


def test_drops_of_an_idle_interface_are_info(tmp_path):
    frames = build_loss.transfer(1, "10.30.0.10", build_loss.SERVER, 40000, 10)
    path = tmp_path / "idle.pcapng"
    build_loss.write_pcapng_with_drops(path, frames, received=len(frames) + 10, dropped=10)
    (drops,) = [f for f in found(path) if f.identifier.startswith("drops")]
    assert len(frames) + 10 < 100 and drops.severity == "info"


def test_live_capture_drops_in_the_window_are_medium():
    rules = only_rule()
    window = SlidingWindow(rules, now=0.0, slice_s=10.0, slices=6)
    with open_capture(str(SNAPLEN)) as reader:
        for raw in reader:
            window.update(decode(raw), 1.0)
    assert [f for f in window.analysis().findings if f.rule == RULE] == []
    window.note_drops(300, "eth0")
    (f,) = [f for f in window.analysis().findings if f.rule == RULE]
    assert f.severity == "medium" and f.n == 300 and "eth0" in f.msg and f.identifier == "drops on eth0"


# ---- the loss ratio on other findings --------------------------------------------------------------------
def test_other_findings_during_loss_carry_the_loss_ratio(tmp_path):
    rules = only_rule("echo-loop")
    lossy = analyze([str(LOOP), str(EVERY_NTH)], rules, label="test").findings
    loops = [f for f in lossy if f.rule == "echo-loop"]
    (loss,) = [f for f in lossy if f.rule == RULE]
    # the loop's own background TCP counts in the lossy bin too: the ratio is the bin's, the finding's
    assert loss.severity == "high" and 0.5 < loss.evidence["loss_ratio"] < 240 / 244
    assert loops and all(f.capture_loss_ratio == loss.evidence["loss_ratio"] for f in loops)
    assert all(f.capture_loss_ratio is None for f in lossy if f.rule == RULE)
    clean = analyze([str(LOOP), str(SNAPLEN)], rules, label="test").findings
    assert all(f.capture_loss_ratio is None for f in clean)
    # a loop an hour after the lossy minute is no lower bound
    later = analyze([str(LOOP), str(MIRROR_PEAK)], rules, label="test").findings
    assert all(f.capture_loss_ratio is None for f in later if f.rule == "echo-loop")


def test_reports_and_findings_json_show_the_loss_ratio(tmp_path):
    _findings, _analysis, path = analyze_command([str(LOOP), str(EVERY_NTH)], tmp_path / "out")
    document = json.loads(Path(path).read_text())
    loops = [f for f in document["findings"] if f["rule"] == "echo-loop"]
    assert loops and all(f["capture_loss_ratio"] > 0.5 for f in loops)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "of the traffic was lost by the capture meanwhile: the counts are lower bounds" in report
    html = (tmp_path / "out" / "report.html").read_text()
    assert "capture_loss_ratio" in html
    # the loss beside the packet rate per bin
    assert 'alt="Capture loss (TCP ack gaps) and packet rate per bin"' in html


# ---- state -------------------------------------------------------------------------------------------------
def _batches(path, size=500):
    table = FlowTable()
    with open_capture(str(path), batch_packets=size) as reader:
        for raw in reader:
            batch = decode(raw)
            table.update(batch)
            yield batch


def test_two_halves_merged_are_one_pass():
    rule = load_rules()[RULE]
    batches = list(_batches(MIRROR_PEAK))
    assert len(batches) > 4
    whole, first, second = (REGISTRY[RULE](rule) for _ in range(3))
    for b in batches:
        whole.update(b)
    for b in batches[:len(batches) // 2]:
        first.update(b)
    for b in batches[len(batches) // 2:]:
        second.update(b)
    merged = first.merge(second)
    for a, b in zip(merged.table(), whole.table()):
        assert np.array_equal(a, b)
    assert np.array_equal(merged.gap_frames, whole.gap_frames) and len(whole.gap_frames) == 64


def test_batches_without_flow_events_count_packets_only():
    rule = load_rules()[RULE]
    detector = REGISTRY[RULE](rule)
    with open_capture(str(EVERY_NTH)) as reader:
        for raw in reader:
            detector.update(decode(raw))
    _bins, counts = detector.table()
    assert counts[:, 0].sum() > 0 and counts[:, 1:].sum() == 0


# ---- named real captures -----------------------------------------------------------------------------------
def test_ndpi_http_ipv6_below_min_acks_and_without_a_gap_is_silent(captures_real):
    # tshark flags 6 acks of unseen segments (frames 2, 31, 137, 141, 143, 171), each in a connection picked up
    # at the capture's start ("common at capture start"): 43 ack events are counted, none over lost bytes
    path = captures_real / "ndpi/tests/cfgs/default/pcap/http_ipv6.pcap"
    assert found(path) == []
    events = events_of(path)
    assert np.count_nonzero((events > 0) & (events < EV_MID_STREAM)) == 43 and not np.any(events == EV_GAP)


def test_ndpi_tls_missing_client_hello_fragment_is_mid_stream_and_left_out(captures_real):
    # tshark: frames 3 and 14 ack segments never captured, but the capture starts at the SYN-ACK
    assert found(captures_real / "ndpi/tests/cfgs/default/pcap/tls_missing_ch_frag.pcap") == []


def test_ipcomp_compressed_segments_are_no_loss_in_too_few_acks(captures_real, tshark):
    # the server's data segments are IPComp-compressed inside AH (tshark decompresses them), its acks and the client's
    # are not: the client's four acks pass over bytes the decoder could not read as TCP, none of whose payload it holds
    path = captures_real / "libpcap/tests/filter/AH-IPcomp-IPv6.pcap"
    assert tshark.count(path, "ipcomp && tcp.srcport == 80") == 6
    (f,) = found(path)
    assert f.severity == "info" and f.evidence["gap_events"] == 4


def test_zeek_entity_gap_is_one_gap_in_too_few_acks_info(captures_real):
    # one real gap (frame 7: previous segment not captured; frame 9 acks it) in three ack events: too few to judge
    (f,) = found(captures_real / "zeek/testing/btest/Traces/http/entity_gap.pcap")
    assert f.severity == "info" and f.evidence["evidence_frames"] == [9] and "too few acks" in f.msg


def test_a_watch_counts_ack_and_gap_events_live():
    (counter,) = REGISTRY[RULE](load_rules()[RULE]).live_counters()
    assert counter.name == "tcp_ack_events" and counter.values == 2
    totals = np.zeros(2, dtype=np.int64)
    for batch in _batches(EVERY_NTH):
        totals += counter.count(batch)
    assert totals.tolist() == [244, 240]


def test_the_loss_figure_draws_the_messages_rates_and_ratio():
    """One number, one source: the worst bin's loss ratio and packet rate in the message are the figure's bar and
    line for that bin, and the message's peak rate its highest line. The rule's 60 s bin is longer than this
    2-second capture: the rate is over the part of the bin the capture covers, in the message (233/s) and now
    in the figure too (it drew packets over the whole 60 s, 8/s)."""
    import re

    from tests._figures import drawn

    d = drawn("loss-every-nth-segment.pcap", "capture-loss")
    loss, ax = d.finding, d.ax
    said = re.search(r"worst bin \S+: ([\d.]+)% at ([\d,]+) packets/s \(all bins: median [\d,]+, peak ([\d,]+) "
                     r"packets/s\)", loss.msg)
    assert said, loss.msg
    ratio, rate, peak = float(said[1]), int(said[2].replace(",", "")), int(said[3].replace(",", ""))
    bars = [patch.get_height() for patch in ax.patches]
    assert f"{max(bars):.1%}" == f"{ratio / 100:.1%}"
    lines = [float(segment[0][1]) for collection in d.twin().collections for segment in collection.get_segments()]
    assert round(max(lines)) == peak and rate in {round(r) for r in lines}
    assert [row["packet_rate_pps"] for row in loss.evidence["per_bin"]] == [round(r, 1) for r in lines]
    d.close()


def test_the_flow_tables_numbers_and_its_frame_tell_the_same_flows():
    """The rule reads the flow table as numbers (no pandas) where the context holds the table, and its DataFrame
    view where that is all there is (the API's, a test's): the same worst flows, gaps, byte loss and Community
    ID either way."""
    from detector import analysis
    from detector.detect.detector import AnalysisContext
    from detector.detect.display import flow_community_id
    from detector.detectors import capture_loss

    done = analysis.analyze([str(Path(__file__).resolve().parents[1] / "captures" / "loss-every-nth-segment.pcap")])
    table = done.flow_table
    numbers = AnalysisContext(flows=table, stats=done.stats)
    frame = AnalysisContext(flows=table.to_frame(), stats=done.stats)
    assert numbers.flow_columns() is not None and frame.flow_columns() is None
    worst = capture_loss._worst_flows(numbers)
    assert worst and worst == capture_loss._worst_flows(frame)
    assert capture_loss._gaps_over_seen_ends(numbers) == capture_loss._gaps_over_seen_ends(frame) > 0
    assert capture_loss._byte_loss(numbers, 0, 1 << 62) == capture_loss._byte_loss(frame, 0, 1 << 62) > 0
    for flow in worst:
        src, sport = flow["src"].rsplit(":", 1)
        dst, dport = flow["dest"].rsplit(":", 1)
        ids = {flow_community_id(ctx, src, int(sport), dst, int(dport), 6) for ctx in (numbers, frame)}
        assert ids == {flow["community_id"]}

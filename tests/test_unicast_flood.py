"""unicast-flood on real bytes: floods after an onset, the seed 002 chain, direct proof, and the near-misses."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from detector.analysis import analyze
from detector.decode import decode
from detector.detect.detector import AnalysisContext
from detector.detect.figure import TimeBins
from detector.detectors import active_detectors
from detector.detectors import unicast_flood as rule
from detector.ingest import read_captures
from detector.rules import load_rules
from detector.schema import PacketBatch
from detector.stats import CaptureStats

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
sys.path.insert(0, str(CAPTURES))
import build_unicast_flood as build  # noqa: E402 - the capture builders' frame helpers

RULE = "unicast-flood"
CHAIN = ("unicast-flood", "vrrp-dual-master", "garp-war")


def run(path, rules=(RULE,)) -> list:
    chosen = {k: v for k, v in load_rules().items() if k in rules}
    return [f for f in analyze([path], chosen, label="test").findings if f.rule == RULE]


def severity(findings) -> str | None:
    return max((f.severity for f in findings), key=lambda s: ["info", "low", "medium", "high", "critical"].index(s),
               default=None)


def _detector():
    return next(d for d in active_detectors(load_rules()) if d.rule_id == RULE)


def _fed(path, detector=None):
    detector = detector or _detector()
    for _, raw in read_captures([str(path)]):
        detector.update(decode(raw))
    return detector


def _flood_capture(tmp_path, flood_start, name="flood.pcap", span=None, rate=1000.0, seconds=4.0, targets=8):
    rng = np.random.default_rng(5)
    end = span or flood_start + 10
    timed = build._background(rng, 0, end) + build._flood(rng, flood_start, flood_start + seconds, rate, targets)
    path = tmp_path / name
    build._write_pcap(path, timed)
    return path


# ---- the bundled captures ----------------------------------------------------------------------

@pytest.mark.parametrize("name, expected", [
    ("unicast-flood-mirror.pcap", "high"),
    ("unicast-flood-partial.pcap", "medium"),
    ("unicast-flood-vrrp-chain.pcapng", "critical"),
    ("unicast-flood-sll-otherhost.pcap", "high"),
    ("unicast-flood-asymmetric.pcap", "info"),
    ("unicast-flood-silent-printer.pcap", "info"),
    ("unicast-flood-ingress-span.pcap", None),
])
def test_bundled_captures(name, expected):
    assert severity(run(CAPTURES / name, CHAIN)) == expected


def test_a_flood_names_its_onset_destinations_and_evidence():
    (f,) = run(CAPTURES / "unicast-flood-mirror.pcap")
    ev = f.evidence
    assert ev["onset"].startswith("2026-01-01T00:01:10") and ev["duration_s"] == 4
    assert ev["foreign_frames"] == 4000 and ev["baseline_foreign_share_ratio"] == 0
    assert len(ev["destinations"]) == rule.TOP_DESTINATIONS
    top = ev["destinations"][0]
    assert top["mac"].startswith("02:00:5e:71:00:") and top["ip"].startswith("10.70.1.")
    # the gateway's TCP toward them, and nothing from them: one-sided
    assert top["one_sided_tcp"] and top["frames_sent_by_it"] == 0
    assert 0 < len(ev["evidence_frames"]) <= 64
    assert len(ev["series"]["second"]) == len(ev["series"]["frames"]) == len(ev["series"]["foreign"])
    assert ev["series"]["second"][0] == -60


def test_the_chain_needs_the_rules_it_reads():
    """Without the VRRP and ARP rules the flood of the chain capture is high: the chain makes it critical."""
    assert severity(run(CAPTURES / "unicast-flood-vrrp-chain.pcapng")) == "high"
    (f,) = run(CAPTURES / "unicast-flood-vrrp-chain.pcapng", CHAIN)
    assert {c["rule"] for c in f.evidence["chained"]} >= {"vrrp-dual-master"}
    assert all(c["macs"] == ["00:00:5e:00:01:3c"] for c in f.evidence["chained"])


def test_a_chain_on_another_mac_is_no_chain(tmp_path):
    """Two VRRP masters in the same capture whose virtual MAC is not among the flooded destinations."""
    rng = np.random.default_rng(9)
    timed = [(t, frame, None) for t, frame in build._background(rng, 0, 100)]
    vrrp = build._adverts(build.LB1, 200, 0, 100) + build._adverts(build.LB2, 100, 70, 100)
    timed += [(t, bytes(pkt), None) for t, pkt in vrrp]
    timed += [(t, frame, None) for t, frame in build._flood(rng, 70, 75, 1000, 8)]
    path = tmp_path / "other-mac.pcapng"
    build._write_pcapng(path, timed)
    assert severity(run(path, CHAIN)) == "high"


# ---- the onset -----------------------------------------------------------------------------------

@pytest.mark.parametrize("start, expected", [(30, "info"), (59, "info"), (61, "high"), (90, "high")])
def test_a_flood_needs_a_quiet_baseline_of_60_s(tmp_path, start, expected):
    assert severity(run(_flood_capture(tmp_path, start))) == expected


@pytest.mark.parametrize("rate, seconds, expected", [
    (1000.0, 2.0, None),        # two seconds: a table relearning
    (240.0, 4.0, None),         # 960 frames
    (260.0, 4.0, "high"),       # 1,040 frames, most of the frames
    (20.0, 55.0, "medium"),     # 1,100 frames, a share of about 0.3
])
def test_medium_needs_1000_frames_for_3_s(tmp_path, rate, seconds, expected):
    path = _flood_capture(tmp_path, 70, rate=rate, seconds=seconds, span=70 + seconds + 5)
    assert severity(run(path)) == expected


@pytest.mark.parametrize("high_rate_fps, expected", [(40.0, "medium"), (30.0, "high")])
def test_a_rate_of_high_rate_fps_is_high_at_any_share(high_rate_fps, expected):
    """The partial flood (a third of the frames, up to 36 foreign frames a second) against the rate threshold
    (10,000 frames a second by default, scaled down here: the capture stays small)."""
    detector = _fed(CAPTURES / "unicast-flood-partial.pcap")
    detector.params.update(high_rate_fps=high_rate_fps)
    (f,) = detector.findings(AnalysisContext(flows=None, stats=CaptureStats()))
    assert f.severity == expected and f.evidence["foreign_share_ratio"] < 0.5


# ---- ageing and the MAC table --------------------------------------------------------------------

@pytest.mark.parametrize("after_s, foreign", [(299.5, 0), (300.5, 0), (301.5, 5)])
def test_a_destination_ages_out_after_300_s(tmp_path, after_s, foreign):
    timed = [(0.5, build._tcp_frame(2, 1, 0))]                                      # host 2 speaks once
    timed += [(t + 0.1, build._tcp_frame(3, 4, t)) for t in range(320)]          # others keep talking
    timed += [(t + 0.2, build._tcp_frame(4, 3, t)) for t in range(320)]
    timed += [(after_s + k * 0.01, build._tcp_frame(1, 2, k)) for k in range(5)]    # then host 1 writes to it
    path = tmp_path / "ageing.pcap"
    build._write_pcap(path, timed)
    bins = _fed(path)._bins()
    late = bins["bin"] >= bins["bin"][0] + 299
    assert int(bins["foreign"][late].sum() + bins["pending"][late].sum()) == foreign


def test_the_mac_table_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(rule, "MAX_MACS", 6)
    path = _flood_capture(tmp_path, 70)
    detector = _fed(path)
    assert detector.used == 6 and detector.refused > 0
    (f,) = detector.findings(AnalysisContext(flows=None, stats=CaptureStats()))
    assert f.evidence["macs_not_learnt"] == detector.refused


def test_the_cells_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(rule, "MAX_CELLS", 10)
    detector = _fed(_flood_capture(tmp_path, 70, targets=64))
    assert len(detector._cells_table()["bin"]) == 10 and detector.cells_dropped > 0
    bins = detector._bins()
    assert int(bins["foreign"].sum() + bins["pending"].sum()) >= 4000      # the counts stay exact


# ---- direct proof --------------------------------------------------------------------------------

@pytest.mark.parametrize("reception, expected", [(build.EPB_RX_UNICAST, None), (build.EPB_RX_PROMISCUOUS, "high")])
def test_epb_flags_reception_type_replaces_the_inference(tmp_path, reception, expected):
    """Frames to a MAC this port knows as a source, marked promiscuous, are foreign; frames to a MAC never seen,
    marked as received for this host, are not."""
    rng = np.random.default_rng(7)
    timed = [(t, frame, None) for t, frame in build._background(rng, 0, 80)]
    other = build._mac(0x02005E710077) if reception == build.EPB_RX_UNICAST else build._host_mac(5)
    for k, t in enumerate(np.sort(rng.uniform(70, 75, 3000)).tolist()):
        timed.append((t, build._tcp_frame(1, 5, k, dst_mac=other), reception << 2 | 1))
    path = tmp_path / "epb.pcapng"
    build._write_pcapng(path, timed)
    assert severity(run(path)) == expected


def test_sll_otherhost_is_counted_live():
    detector = _detector()
    (counter,) = detector.live_counters()
    path = CAPTURES / "unicast-flood-sll-otherhost.pcap"
    counts = sum(counter.count(decode(raw)) for _, raw in read_captures([str(path)]))
    assert counts.tolist() == [4000, 2000]


# ---- near-misses ---------------------------------------------------------------------------------

def test_a_silent_receiver_flooded_before_the_onset_is_left_out(tmp_path):
    """The printer of the bundled capture is info; the same job to a printer never polled before is a flood."""
    assert severity(run(CAPTURES / "unicast-flood-silent-printer.pcap")) == "info"
    rng = np.random.default_rng(76)
    printer = build._mac(0x02005E700099)
    timed = build._background(rng, 0, 100)
    timed += [(t, build._tcp_frame(5, 0, k, dst_mac=printer)) for k, t in
              enumerate(np.sort(rng.uniform(80, 95, 1500)).tolist())]
    path = tmp_path / "new-printer.pcap"
    build._write_pcap(path, timed)
    assert severity(run(path)) in ("medium", "high")


def test_real_asymmetric_routing_is_info_at_most(captures_real):
    """ndpi http_ipv6.pcap: the host sends through 50:c5:8d:ac:41:01, the replies come from f4:b5:2f:fc:af:c2
    (tshark eth.src/eth.dst): half the frames go to a MAC never heard, from the first second. Silent at the
    defaults (24 s, 193 frames); with thresholds scaled to its size, info naming that router, never a flood."""
    path = captures_real / "ndpi/tests/cfgs/default/pcap/http_ipv6.pcap"
    assert run(path) == []
    detector = _fed(path)
    detector.params.update(min_foreign_frames=20, baseline_s=5, min_duration_s=2)
    findings = detector.findings(AnalysisContext(flows=None, stats=CaptureStats()))
    assert [f.severity for f in findings] == ["info"]
    assert findings[0].evidence["destinations"][0]["mac"] == "50:c5:8d:ac:41:01"


@pytest.mark.parametrize("name", ["lucaderi-sgr/2022/Favilli/tests/hs-udpScan.pcap",
                                  "ndpi/tests/cfgs/default/pcap/EAQ.pcap"])
def test_real_one_sided_captures_are_not_reported(captures_real, name):
    """One-sided captures (every unicast frame to a MAC that never answers here) are ingress-only: nothing."""
    detector = _fed(captures_real / name)
    detector.params.update(min_foreign_frames=20, baseline_s=5, min_duration_s=2)
    bins = detector._bins()
    assert bins["foreign"].sum() + bins["pending"].sum() > 0.9 * bins["frames"].sum()
    assert detector.findings(AnalysisContext(flows=None, stats=CaptureStats())) == []


# ---- merge ---------------------------------------------------------------------------------------

def _halves(path, cut_ratio):
    (batch,) = [decode(raw) for _, raw in read_captures([str(path)])]
    cut = int(len(batch) * cut_ratio)
    left = PacketBatch(data=batch.data, cols={k: v[:cut] for k, v in batch.cols.items()})
    right = PacketBatch(data=batch.data, cols={k: v[cut:] for k, v in batch.cols.items()})
    return batch, left, right


def _state(detector) -> list:
    bins, cells = detector._bins(), detector._cells_table()
    keys, values = detector._rows()
    order = np.argsort(keys)
    return [{k: v.tolist() for k, v in bins.items()}, {k: v.tolist() for k, v in cells.items()},
            keys[order].tolist(), values[order].tolist(), detector.first_bin]


@pytest.mark.parametrize("name", ["unicast-flood-partial.pcap", "unicast-flood-sll-otherhost.pcap",
                                  "unicast-flood-vrrp-chain.pcapng", "ageing"])
@pytest.mark.parametrize("cut_ratio", [0.004, 0.3, 0.6])
@pytest.mark.parametrize("reverse", [False, True])
def test_two_halves_merged_give_one_pass(tmp_path, name, cut_ratio, reverse):
    if name == "ageing":
        # host 2 heard at 0.5 s and at 10 s; host 1 writes to it at 200 s (known) and at 400 s (aged out), and
        # host 6, never heard, gets frames all along: the later half must ask the earlier what it saw
        timed = [(0.5, build._tcp_frame(2, 1, 0)), (10, build._tcp_frame(2, 1, 1))]
        timed += [(t + 0.1, build._tcp_frame(3, 4, t)) for t in range(420)]
        timed += [(t + 0.2, build._tcp_frame(4, 3, t)) for t in range(420)]
        timed += [(t + 0.3, build._tcp_frame(1, 6, t)) for t in range(0, 420, 7)]
        timed += [(s + k * 0.01, build._tcp_frame(1, 2, k)) for s in (200, 400) for k in range(5)]
        path = tmp_path / "ageing.pcap"
        build._write_pcap(path, timed)
    else:
        path = CAPTURES / name
    batch, left, right = _halves(path, cut_ratio)
    whole = _detector()
    whole.update(batch)
    first, second = _detector(), _detector()
    first.update(left)
    second.update(right)
    merged = first.merge(second) if not reverse else second.merge(first)
    ctx = AnalysisContext(flows=None, stats=CaptureStats())
    assert _state(merged) == _state(whole)
    assert [f.to_json() for f in merged.findings(ctx)] == [f.to_json() for f in whole.findings(ctx)]


def test_an_empty_state_merges_either_way():
    whole = _fed(CAPTURES / "unicast-flood-mirror.pcap")
    ctx = AnalysisContext(flows=None, stats=CaptureStats())
    expected = [f.to_json() for f in whole.findings(ctx)]
    assert [f.to_json() for f in _detector().merge(whole).findings(ctx)] == expected
    assert [f.to_json() for f in whole.merge(_detector()).findings(ctx)] == expected


# ---- report --------------------------------------------------------------------------------------

def test_the_figure_draws_share_and_rate():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    detector = _fed(CAPTURES / "unicast-flood-mirror.pcap")
    findings = detector.findings(AnalysisContext(flows=None, stats=CaptureStats()))
    (figure,) = detector.figures(findings, TimeBins(start_ns=0, bin_ns=10**9, count=10))
    fig, ax = plt.subplots()
    figure.draw(ax, None)
    assert ax.get_ylabel() == "foreign share" and len(ax.lines) == 1
    plt.close(fig)


def test_the_later_half_asks_the_earlier_at_the_ageing_boundary(tmp_path):
    """Host 7 speaks at 100.2 s, just before the cut at 100.5 s; 300 s later (same second + 300) a frame to it is
    still known, one second later it is foreign: the later half holds the first as pending until the merge."""
    timed = [(100.2, build._tcp_frame(7, 1, 0)), (100.6, build._tcp_frame(3, 4, 0))]     # the later half's first
    timed += [(t + 0.1, build._tcp_frame(3, 4, t)) for t in range(410)]
    timed += [(t + 0.2, build._tcp_frame(4, 3, t)) for t in range(410)]
    timed += [(s + 0.3, build._tcp_frame(1, 7, k)) for k, s in enumerate((400, 401))]
    path = tmp_path / "boundary.pcap"
    build._write_pcap(path, timed)
    (batch,) = [decode(raw) for _, raw in read_captures([str(path)])]
    cut = int(np.searchsorted(batch["ts_ns"], (build.T0 + 100.5) * 10**9))
    first, second = _detector(), _detector()
    first.update(PacketBatch(data=batch.data, cols={k: v[:cut] for k, v in batch.cols.items()}))
    second.update(PacketBatch(data=batch.data, cols={k: v[cut:] for k, v in batch.cols.items()}))
    whole = _detector()
    whole.update(batch)
    assert _state(first.merge(second)) == _state(whole)
    bins = whole._bins()
    late = bins["bin"] >= build.T0 + 400
    assert (bins["foreign"][late] + bins["pending"][late]).tolist() == [0, 1] + [0] * (int(late.sum()) - 2)


@pytest.mark.parametrize("local, routed", [(None, False), (["10.70.0.0/16"], True), (["198.51.100.0/24"], False)])
def test_local_networks_label_the_destinations(tmp_path, local, routed):
    """With the site's local_networks the destinations are labelled, and frames mostly to off-net addresses
    without onset are named as a router's (asymmetric routing); without it nothing is labelled."""
    from detector.site import load_site

    site = None
    if local:
        path = tmp_path / "site.yaml"
        path.write_text("local_networks:\n" + "".join(f"  - {net}\n" for net in local))
        site = load_site(path)
    chosen = {k: v for k, v in load_rules().items() if k == RULE}
    (f,) = analyze([CAPTURES / "unicast-flood-asymmetric.pcap"], chosen, label="test", site=site).findings
    top = f.evidence["destinations"][0]
    assert f.severity == "info" and top["ip"] == "198.51.100.7"
    assert ("local" in top) == bool(local)
    assert ("off-net" in f.msg) == routed


def test_the_flood_figure_draws_the_messages_flooded_frames(tshark):
    """One number, one source: the message's 'up to N/s' and its frame count are the figure's flooded-frames
    line (its peak and sum over the flood), drawn from the same per-second values; the frames line is tshark's
    count of each second's frames."""
    from tests._figures import drawn

    path = CAPTURES / "unicast-flood-mirror.pcap"
    d = drawn(path.name, "unicast-flood", pick=lambda f: f.severity != "info")
    flood, figure = d.finding, d.figure
    lines = {line.get_label(): line.get_ydata() for line in d.twin().get_lines()}
    flooded = lines["flooded frames/s"]
    peak = flood.evidence["peak_foreign_fps"]
    assert flooded.max() == peak and f"up to {peak:,}/s" in flood.msg
    assert flooded.sum() == flood.evidence["foreign_frames"] and f"{flooded.sum():,} frames to MACs" in flood.msg
    times = [float(row[0]) for row in tshark.fields(path, "frame.time_epoch")]
    onset = np.floor(min(t for t in times if t >= flood.first_seen / 1e9))
    seconds = np.asarray(figure.seconds) + onset
    per_second = dict(zip(*np.unique(np.floor(times).astype(np.int64), return_counts=True), strict=True))
    assert lines["frames/s"].tolist() == [per_second.get(int(s), 0) for s in seconds]
    d.close()

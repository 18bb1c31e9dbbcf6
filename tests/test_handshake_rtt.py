"""handshake-rtt on the bundled captures (legs checked against tshark), with a site file, and on flow tables built
for the thresholds the captures do not reach."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from detector import engine
from detector.analysis import analyze
from detector.detectors import AnalysisContext, active_detectors
from detector.detectors import handshake_rtt as hr
from detector.rules import load_rules
from detector.site import load_site
from detector.stats import CaptureStats

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
sys.path.insert(0, str(CAPTURES))
import build_tcp_calibration  # noqa: E402 - the capture builders, for the trace the duplicated captures repeat

RULE = "handshake-rtt"
T0 = 1_767_225_600
JUMP = CAPTURES / "handshake-rtt-jump.pcap"
DISTANT = CAPTURES / "handshake-rtt-distant.pcap"
APPENDED = CAPTURES / "handshake-rtt-appended.pcap"
MERGED_TWICE = CAPTURES / "handshake-rtt-merged-twice.pcap"
LOST_SYNS = CAPTURES / "handshake-rtt-lost-syns.pcap"
ONE_RETRIED = CAPTURES / "handshake-rtt-one-retried.pcap"


def run(path, site=None, rules=None):
    rules = load_rules() if rules is None else rules
    return analyze([str(path)], {RULE: rules[RULE]}, site=site).findings


def test_rtt_jump_is_high_on_the_servers_side(tshark):
    [f] = run(JUMP)
    ev = f.evidence
    assert f.severity == "high" and f.identifier == "external handshakes"
    assert ev["class"] == "external" and "RFC 1918" in ev["classes_from"]
    assert ev["slow_bins"] == 4 and ev["slow_seconds"] == 40
    assert 19 < ev["baseline_p50_ms"] < 21 and 330 < ev["peak_p50_ms"] < 370
    assert ev["leg_grown"] == "syn_synack" and "the server's side of the capture point" in f.msg
    assert ev["leg_growth_ms"]["syn_synack"] > 300 and abs(ev["leg_growth_ms"]["synack_ack"]) < 1
    # the handshakes of the slow bins (from 80 s on), as tshark counts their SYNs
    assert f.n == ev["handshakes"] == tshark.count(JUMP, f"tcp.flags.syn == 1 && tcp.flags.ack == 0 && "
                                                        f"frame.time_epoch >= {T0 + 80}")
    # tshark's initial RTT of the slowest handshake named (no SYN was retransmitted: from the first SYN or the
    # last is the same)
    slowest = ev["slowest"][0]
    [[rtt], *_] = tshark.fields(JUMP, "tcp.analysis.initial_rtt",
                                display_filter=f"ip.src == {slowest['src_ip']} && tcp.srcport == "
                                               f"{slowest['src_port']} && tcp.analysis.initial_rtt")
    assert abs(float(rtt) * 1000 - slowest["rtt_ms"]) < 0.05
    assert slowest["rtt_ms"] == max(s["rtt_ms"] for s in ev["slowest"])
    assert len(ev["evidence_frames"]) == 64 and f.first_seen >= (T0 + 80) * 10**9


def test_distant_servers_slow_all_along_are_quiet(monkeypatch):
    analysis = analyze([str(DISTANT)], {RULE: load_rules()[RULE]})
    assert analysis.findings == []
    d = next(d for d in active_detectors(load_rules()) if d.rule_id == RULE)
    hs = hr.handshakes(analysis.context.flows, d.site)
    distant = ["203.0.113.7", "203.0.113.8", "203.0.113.9"]
    assert d._distant_servers(hs, ~hs["internal"]) == (distant, distant)
    monkeypatch.setattr(hr, "MAX_DISTANT_SERVERS", 1)
    judged, kept_apart = d._distant_servers(hs, ~hs["internal"])
    assert len(judged) == 1 and kept_apart == distant
    # the per-server baselines are what keeps it so: without them the shift of handshakes toward the distant
    # servers moves the class's median from 20 to 300 ms
    monkeypatch.setattr(hr.HandshakeRtt, "_distant_servers", lambda self, hs, cls: ([], []))
    [f] = run(DISTANT)
    assert f.severity in ("medium", "high") and f.evidence["slow_bins"] == 4


def test_site_local_networks_decide_the_class(tmp_path):
    (tmp_path / "site.yaml").write_text("local_networks: [10.40.0.0/16, 198.51.100.0/24]\n")
    [f] = run(JUMP, site=load_site(tmp_path / "site.yaml"))
    assert f.identifier == "internal handshakes" and f.evidence["classes_from"] == "the site's local_networks"


def test_bins_need_enough_handshakes(tmp_path):
    (tmp_path / "rtt.yaml").write_text(f"id: {RULE}\nparams:\n  min_flows: 45\n")
    assert run(JUMP, rules=load_rules(tmp_path)) == []


def _flows(bins_ms: list[float], per_bin: int = 25, retx: list[float] | None = None, server="198.51.100.9"):
    """A flow table of handshakes from 10.1.0.x to `server`: per 10 s bin, `per_bin` handshakes of the given
    SYN -> SYN-ACK time, and the share of them `retx` that retransmitted their SYN."""
    rows: list[dict] = []
    for b, ms in enumerate(bins_ms):
        for k in range(per_bin):
            share = 0.0 if retx is None else retx[b]
            rows.append({"src_ip": f"10.1.0.{k + 1}", "src_port": 40000 + k, "dest_ip": server, "dest_port": 443,
                         "proto": "tcp",
                         "first_seen": pd.Timestamp((T0 + 10 * b + k * 0.3) * 10**9, unit="ns", tz="UTC"),
                         "handshake_syn_synack_ms": ms, "handshake_synack_ack_ms": 0.2,
                         # a retransmitted SYN was first sent 1 s before the one answered
                         "handshake_rtt_ms": ms + 0.2 + 1000 * (k < share * per_bin),
                         "syn_retransmits": int(k < share * per_bin),
                         "first_frame": 1 + len(rows), "community_id": "1:x"})
    return pd.DataFrame(rows)


def _findings(flows):
    d = next(d for d in active_detectors(load_rules()) if d.rule_id == RULE)
    return d.findings(AnalysisContext(flows=flows, stats=CaptureStats()))


def test_thresholds_medium_critical_and_the_run_length():
    # 30 -> 150 ms: grown (>= max(3 x 30, 30 + 100)), below 300 ms: medium
    [f] = _findings(_flows([30] * 6 + [150] * 3))
    assert f.severity == "medium" and f.evidence["slow_bins"] == 3
    assert [b["p50_ms"] for b in f.evidence["per_bin"]] == [30.2] * 6 + [150.2] * 3
    # a long capture: the bins shown are the run's and the twelve before it
    [f] = _findings(_flows([30] * 100 + [150] * 3))
    assert [b["p50_ms"] for b in f.evidence["per_bin"]] == [30.2] * 12 + [150.2] * 3
    # two slow bins are a hiccup
    assert _findings(_flows([30] * 6 + [150] * 2 + [30])) == []
    # 120 ms is no growth over 30 (below baseline + 100 ms)
    assert _findings(_flows([30] * 6 + [120] * 4)) == []
    assert _findings(_flows([30] * 6 + [1200] * 3))[0].severity == "critical"
    # SYN retransmissions in more than 10 % of the handshakes: critical (measured from the last SYN, the RTT
    # itself need not grow)
    [f] = _findings(_flows([30] * 9, retx=[0] * 6 + [0.6] * 3))
    assert f.severity == "critical" and f.evidence["syn_retransmit_ratio"] == 0.6
    assert f.evidence["peak_p50_ms"] < 31 and f.msg.startswith("60% of external handshakes needed a SYN "
                                                                 "retransmission")
    assert "leg_grown" not in f.evidence


def test_the_client_leg_names_the_clients_side():
    flows = _flows([30] * 6 + [30] * 3)
    slow = flows.index[flows["first_seen"] >= pd.Timestamp((T0 + 60) * 10**9, unit="ns", tz="UTC")]
    flows.loc[slow, "handshake_synack_ack_ms"] = 400.0
    [f] = _findings(flows)
    assert f.evidence["leg_grown"] == "synack_ack" and "the client's side of the capture point" in f.msg


def test_no_flow_table_no_findings():
    assert _findings(pd.DataFrame()) == []
    assert _findings(None) == []


def test_state_merges_as_nothing():
    rules = load_rules()
    a, b = (next(d for d in active_detectors(rules) if d.rule_id == RULE) for _ in range(2))
    assert a.merge(b) is a
    with pytest.raises(ValueError):
        a.merge(next(d for d in active_detectors(rules) if d.rule_id == "syn-flood"))


def test_figure_draws_p50_and_p90_the_finding_judged():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from detector.detect.figure import TimeBins
    analysis = analyze([str(JUMP)], {RULE: load_rules()[RULE]})
    [f] = analysis.findings
    [d] = [d for d in analysis.detectors if d.rule_id == RULE]
    [figure] = d.figures(analysis.findings, TimeBins(T0 * 10**9, 10**9, 120))
    fig, (mine, again) = plt.subplots(2)
    figure.draw(mine, None)             # the rule's own tables: the report reads no flow table again
    p50 = mine.get_lines()[0]
    assert p50.get_label() == "external p50" and np.max(p50.get_ydata()) > 300
    # one number, one source: the peak the finding states is the peak plotted, and each bin it lists a point
    assert round(float(np.max(p50.get_ydata())), 1) == f.evidence["peak_p50_ms"]
    assert {b["p50_ms"] for b in f.evidence["per_bin"]} <= {round(float(y), 1) for y in p50.get_ydata()}
    # drawn from a flow table (the notebook's way), the same lines
    hr.RttFigure(figure.bins, figure.site).draw(again, analysis.context.flows)
    for a, b in zip(mine.get_lines(), again.get_lines(), strict=True):
        assert a.get_label() == b.get_label() and np.array_equal(a.get_ydata(), b.get_ydata())
    plt.close(fig)


def test_private_addresses_without_a_site_file():
    texts = np.array(["10.1.2.3", "100.1.2.3", "172.15.0.1", "172.16.0.1", "172.31.255.1", "172.32.0.1",
                      "192.168.1.1", "192.169.0.1", "fd00::1", "fc12:3::1", "fe80::1", "2001:db8::fc", "fd1::1"])
    assert texts[hr._private(texts)].tolist() == ["10.1.2.3", "172.16.0.1", "172.31.255.1", "192.168.1.1",
                                                   "fd00::1", "fc12:3::1"]


def test_watch_alerts_on_the_slow_class():
    from detector.decode import decode
    from detector.ingest import open_capture
    from detector.live.alerts import AlertBook
    from detector.live.window import SlidingWindow
    rules = {RULE: load_rules()[RULE]}
    window = SlidingWindow(rules, now=0.0, slice_s=1.0, slices=1000)
    book = AlertBook(rules)
    events = []
    with open_capture(JUMP, batch_packets=100) as reader:
        for k, raw in enumerate(reader):
            window.update(decode(raw), now=float(k))
            events += book.observe(window.analysis().findings, float(k), 0.0)
    alerts = [e for e in events if e.kind == "alert"]
    assert [e.tracked.finding.identifier for e in alerts] == ["external handshakes"]


@pytest.mark.parametrize("name", ["handshake-rtt-jump.pcap", "handshake-rtt-distant.pcap",
                                  "handshake-rtt-lost-syns.pcap"])
def test_the_flow_table_read_as_numbers_gives_the_findings_of_its_frame(name):
    # analyze reads the flow table without pandas (coded columns); a notebook or test hands the DataFrame: both
    # must give the same handshakes, distant servers and findings
    from detector.decode import decode
    from detector.flows import FlowTable
    from detector.ingest import read_captures
    table = FlowTable()
    for _, raw in read_captures([str(CAPTURES / name)]):
        table.update(decode(raw))
    (det,) = [d for d in active_detectors(load_rules()) if d.rule_id == "handshake-rtt"]
    coded, frame = hr.handshakes(table.coded_columns(), det.site), hr.handshakes(table.to_frame(), det.site)
    assert len(coded["rtt"]) == len(frame["rtt"]) > 60
    for key in ("time", "rtt", "rtt_first", "syn_retx", "port", "frame", "bin", "internal"):
        assert np.array_equal(coded[key], frame[key]), key
    for key in ("client", "server", "community_id"):
        assert coded[key].astype(str).tolist() == frame[key].astype(str).tolist(), key
    distant = []
    for internal in (False, True):
        cls = coded["internal"] == internal
        if cls.any():
            distant.append(det._distant_servers(coded, cls))
            assert distant[-1] == det._distant_servers(frame, cls)
    assert any(judged for judged, _ in distant) == (name == "handshake-rtt-distant.pcap")
    stats = CaptureStats()
    by_table = [f.to_json() for f in det.findings(AnalysisContext(flows=table, stats=stats))]
    by_frame = [f.to_json() for f in det.findings(AnalysisContext(flows=table.to_frame(), stats=stats))]
    assert by_table == by_frame


def test_group_medians_are_numpys():
    rng = np.random.default_rng(7)
    server, bin_ = rng.integers(0, 5, 500), rng.integers(0, 7, 500)
    rtt = rng.exponential(40.0, 500).round(1)
    keys, median, size = hr._medians(np.stack([server, bin_]), rtt)
    for (s, b), m, n in zip(keys.T, median, size):
        mine = rtt[(server == s) & (bin_ == b)]
        assert (m, n) == (np.median(mine), len(mine))
    assert size.sum() == 500 and len(size) == len({(s, b) for s, b in zip(server, bin_)})


# ---- a capture holding its packets twice (issue 27, pattern 7) -----------------------------------------------------
def flow_frame(*paths):
    from detector.flows import FlowTable
    table = FlowTable()
    engine.run([str(p) for p in paths], [table])
    return table.to_frame()


HANDSHAKE_COLUMNS = ["src_ip", "src_port", "dest_ip", "dest_port", "handshake_rtt_ms", "handshake_syn_synack_ms",
                     "handshake_synack_ack_ms", "syn_retransmits"]


@pytest.mark.parametrize("path", [APPENDED, MERGED_TWICE], ids=["appended", "merged-twice"])
def test_a_capture_holding_its_packets_twice_has_no_syn_retransmission(path, tmp_path, tshark):
    # the trace twice: every SYN reappears with its bytes and time (tshark calls the copies retransmissions)
    once = tmp_path / "once.pcap"
    build_tcp_calibration.write_records(once, build_tcp_calibration._web_trace(2701))
    assert tshark.count(path, "tcp.flags.syn == 1 && tcp.flags.ack == 0") == \
        2 * tshark.count(once, "tcp.flags.syn == 1 && tcp.flags.ack == 0") == 2 * 121
    assert run(path) == []
    twice, single = flow_frame(path), flow_frame(once)
    # the copies fold into the flows of the first: the same connections, handshakes and RTTs, no SYN sent again
    assert len(twice) == len(single) == 121 and twice["syn_retransmits"].sum() == 0
    pd.testing.assert_frame_equal(twice[HANDSHAKE_COLUMNS], single[HANDSHAKE_COLUMNS])
    assert twice["handshake_rtt_ms"].dropna().between(15, 25).all() and twice["handshake_rtt_ms"].notna().sum() == 120


def test_a_syn_copy_is_no_retransmission_and_a_late_syn_still_is():
    from tests.test_flows import A, B, flows_of, tcp
    syn, synack, ack = (tcp(0.0, A, B, 1, 80, "S", 10), tcp(0.05, B, A, 80, 1, "SA", 50, 11),
                        tcp(0.06, A, B, 1, 80, "A", 11, 51))
    merged = [syn, syn, synack, synack, ack, ack]
    appended = [syn, synack, ack, syn, synack, ack]
    # relayed by a host in the middle 50 us later (an ARP spoofer), or mirrored twice: sooner than any stack resends
    relayed = [syn, dict(syn, t=0.00005), synack, dict(synack, t=0.05005), ack, dict(ack, t=0.06005)]
    for copies in (merged, appended, relayed):
        f = flows_of(copies).to_frame().iloc[0]
        # (the relayed copy is the SYN the server answered, 50 us later)
        assert f.syn_retransmits == 0 and f.handshake_syn_synack_ms == pytest.approx(50.0, abs=0.06)
    # a SYN sent again 1 s later, then a copy of the first (time gone back): one retransmission, the leg from the
    # SYN answered
    resent = [syn, tcp(1.0, A, B, 1, 80, "S", 10), syn, tcp(1.05, B, A, 80, 1, "SA", 50, 11),
              tcp(1.06, A, B, 1, 80, "A", 11, 51)]
    f = flows_of(resent).to_frame().iloc[0]
    assert f.syn_retransmits == 1 and f.handshake_syn_synack_ms == pytest.approx(50.0, abs=1e-3)
    assert f.handshake_rtt_ms == pytest.approx(1060.0, abs=1e-3)


def test_time_running_backwards_inside_a_handshake_gives_no_rtt():
    from tests.test_flows import A, B, flows_of, tcp
    # the clock stepped back 60 s between the SYN and its SYN-ACK: no leg, rather than a negative or huge one
    f = flows_of([tcp(100.0, A, B, 1, 80, "S", 10), tcp(40.02, B, A, 80, 1, "SA", 50, 11),
                  tcp(40.03, A, B, 1, 80, "A", 11, 51)]).to_frame().iloc[0]
    assert np.isnan(f.handshake_rtt_ms) and np.isnan(f.handshake_syn_synack_ms) and f.syn_retransmits == 0


def test_a_capture_appended_to_itself_cut_anywhere_is_quiet_as_one_pass(tmp_path):
    from tests._cuts import cut, merged
    # cut right at the copy's start (time jumps back at the later part's first packet) and inside the copy
    paths = cut(APPENDED, tmp_path, [1202, 1900])
    result = merged(paths, {RULE: load_rules()[RULE]})
    assert [f for f in result.findings if f.rule == RULE] == []
    assert int(result.flows["syn_retransmits"].sum()) == 0 and len(result.flows) == 121


# ---- lost first SYNs (issue 27, miss 6) ------------------------------------------------------------------------
def test_handshakes_retried_after_lost_first_syns_are_low_and_named(tshark):
    [f] = run(LOST_SYNS)
    ev = f.evidence
    assert f.severity == "low" and f.identifier == "external handshakes retried" and f.n == 9
    assert (ev["handshakes"], ev["retried_handshakes"]) == (67, 9) and 15 < ev["median_handshake_ms"] < 21
    assert ev["retried_ms"]["min"] == pytest.approx(3000, abs=30) and ev["retried_ms"]["max"] == pytest.approx(
        13000, abs=30)
    assert "9 of 67 external handshakes (13%) needed their SYN sent again" in f.msg and "and 6 more" in f.msg
    # tshark: the SYNs sent again, and the connections they belong to, are the retried ones named
    resent = tshark.fields(LOST_SYNS, "tcp.srcport", display_filter="tcp.flags.syn == 1 && tcp.flags.ack == 0 && "
                                                                     "tcp.analysis.retransmission")
    ports = [int(port) for [port] in resent]
    assert len(ports) == 17 == sum(r["syns_sent"] - 1 for r in ev["retried"])
    assert sorted(set(ports)) == sorted(r["src_port"] for r in ev["retried"])
    for r in ev["retried"]:
        # tshark's initial RTT runs from the SYN answered; the retried handshake's time from the first SYN
        [[rtt], *_] = tshark.fields(LOST_SYNS, "tcp.analysis.initial_rtt",
                                    display_filter=f"tcp.srcport == {r['src_port']} && tcp.analysis.initial_rtt")
        syns = [float(t) for [t] in tshark.fields(LOST_SYNS, "frame.time_epoch", display_filter=(
            f"tcp.srcport == {r['src_port']} && tcp.flags.syn == 1 && tcp.flags.ack == 0"))]
        assert len(syns) == r["syns_sent"]
        assert abs((syns[-1] - syns[0] + float(rtt)) * 1000 - r["handshake_ms"]) < 0.05
    assert ev["retried_left_out"] == 0 and len(ev["evidence_frames"]) == 9


def test_one_handshake_retried_among_hundreds_is_quiet():
    assert run(ONE_RETRIED) == []
    frame = flow_frame(ONE_RETRIED)
    assert int((frame["syn_retransmits"] > 0).sum()) == 1 and len(frame) == 240


def test_retried_thresholds_and_the_bins_that_say_it_already():
    flows = _flows([20] * 12, per_bin=5)                      # 60 handshakes, too few a bin for medians
    retried = flows.index[[3, 17, 41]]
    flows.loc[retried, "syn_retransmits"] = 1
    flows.loc[retried, "handshake_rtt_ms"] += 1000.0
    [f] = _findings(flows)
    assert f.severity == "low" and f.evidence["retried_handshakes"] == 3 and f.evidence["retried_ratio"] == 0.05
    assert [r["src_port"] for r in f.evidence["retried"]] == [40003, 40002, 40001]
    assert f.dest_ip == "198.51.100.9" and f.evidence["retried_ms"]["min"] == pytest.approx(1020.2)
    # two are a SYN or two lost; three among 61 are below 5 %
    flows.loc[retried[:1], "syn_retransmits"] = 0
    assert _findings(flows) == []
    many = _flows([20] * 12, per_bin=5)
    many = pd.concat([many, many.iloc[:1]])
    many["syn_retransmits"] = [1, 1, 1] + [0] * 58
    assert _findings(many) == []
    # bins whose SYN retransmissions made the series critical say it already: no second finding
    [f] = _findings(_flows([30] * 9, retx=[0] * 6 + [0.6] * 3))
    assert f.severity == "critical"

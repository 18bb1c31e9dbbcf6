"""conntrack-pressure: the table model on crafted flow tables, the severities, and the bundled captures."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from detector import analysis
from detector.detect.conntrack import PROFILES, occupancy, parse_untracked
from detector.detect.figure import TimeBins
from detector.detectors import REGISTRY, AnalysisContext
from detector.errors import RuleError
from detector.rules import explain_text, load_rules
from detector.stats import CaptureStats

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
SWEEP = CAPTURES / "conntrack-sweep.pcap"
RESOLVER = CAPTURES / "conntrack-busy-resolver.pcap"
NAT = CAPTURES / "conntrack-nat-gateway.pcap"
RULE = "conntrack-pressure"
NS = 10**9
T0 = 1_767_225_600 * NS


def flows(*rows) -> pd.DataFrame:
    """A flow-table frame of (src, sport, dst, dport, proto, first_s, last_s, state, replies) rows."""
    cols = {name: [] for name in ("src_ip", "src_port", "dest_ip", "dest_port", "proto", "first_seen", "last_seen",
                                  "state", "src2dst_packets", "dst2src_packets", "first_frame")}
    for i, (src, sport, dst, dport, proto, first, last, state, replies) in enumerate(rows):
        for name, value in zip(cols, (src, sport, dst, dport, proto, T0 + int(first * NS), T0 + int(last * NS),
                                      state, 1, replies, i + 1)):
            cols[name].append(value)
    frame = pd.DataFrame(cols)
    for name in ("first_seen", "last_seen"):
        frame[name] = pd.to_datetime(frame[name], unit="ns", utc=True)
    return frame.astype({"src_port": np.uint16, "dest_port": np.uint16})


def detector(**params):
    rule = load_rules()[RULE]
    return REGISTRY[RULE](dataclasses.replace(rule, param_values=params))


def judge(frame, **params):
    [finding] = detector(**params).findings(AnalysisContext(frame, CaptureStats()))
    return finding


def run(path, **params):
    rules = load_rules()
    rule = dataclasses.replace(rules[RULE], param_values=params)
    return [f for f in analysis.analyze([str(path)], {RULE: rule}).findings if f.rule == RULE]


# ---- the model ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("profile, state, proto, replies, timeout_s", [
    ("linux", "S0", "tcp", 0, 120), ("linux", "SF", "tcp", 3, 120), ("linux", "REJ", "tcp", 1, 10),
    ("linux", "S2", "tcp", 2, 60), ("linux", "S0", "udp", 0, 30), ("linux", "SF", "udp", 1, 120),
    ("linux", "OTH", "icmp", 0, 30), ("linux", "OTH", "47", 1, 600),
    ("seed-003", "S0", "tcp", 0, 60), ("seed-003", "SF", "udp", 1, 60), ("seed-003", "OTH", "47", 0, 300),
    ("suricata", "S0", "tcp", 0, 60), ("suricata", "SF", "tcp", 3, 60), ("suricata", "SF", "udp", 1, 300),
])
def test_an_entry_lives_its_end_states_timeout_after_the_last_packet(profile, state, proto, replies, timeout_s):
    occ = occupancy(flows(("10.0.0.1", 40000, "192.0.2.1", 80, proto, 0, 2, state, replies)), profile)
    last = T0 + 2 * NS
    assert occ.alive_at(np.array([last + timeout_s * NS - 1, last + timeout_s * NS])).tolist() == [1, 0]


def test_established_outlives_the_capture_and_is_censored():
    occ = occupancy(flows(("10.0.0.1", 40000, "192.0.2.1", 443, "tcp", 0, 5, "S1", 4),
                          ("10.0.0.2", 40001, "192.0.2.1", 443, "tcp", 1, 900, "SF", 4)))
    assert occ.censored == 2 and occ.entries == 2
    assert occ.ends[-1] == T0 + 5 * NS + PROFILES["linux"]["established"] * NS


def test_rows_of_one_5tuple_share_an_entry_while_it_lives():
    # the same 5-tuple (once seen from the other side) again after 100 s: within SYN_SENT's 120 s
    joined = occupancy(flows(("10.0.0.1", 40000, "192.0.2.1", 80, "tcp", 0, 1, "S0", 0),
                             ("192.0.2.1", 80, "10.0.0.1", 40000, "tcp", 101, 102, "S0", 0)))
    assert joined.entries == 1 and joined.peak == 1
    assert joined.ends.tolist() == [T0 + 222 * NS]
    # after 130 s the first entry has expired: a new one
    apart = occupancy(flows(("10.0.0.1", 40000, "192.0.2.1", 80, "tcp", 0, 1, "S0", 0),
                            ("10.0.0.1", 40000, "192.0.2.1", 80, "tcp", 131, 132, "S0", 0)))
    assert apart.entries == 2 and apart.peak == 1


def test_a_joined_entry_ends_in_its_last_rows_state_and_counts_as_answered_once_answered():
    # an unanswered SYN, then the same 5-tuple's connection completes: one entry, answered, in TIME_WAIT
    occ = occupancy(flows(("10.0.0.1", 40000, "192.0.2.1", 80, "tcp", 0, 0, "S0", 0),
                          ("10.0.0.1", 40000, "192.0.2.1", 80, "tcp", 3, 4, "SF", 5)))
    assert occ.entries == 1 and occ.state_mix == {"time_wait": 1}
    assert occ.top_sources == [{"source": "10.0.0.1", "entries": 1, "unreplied_ratio": 0.0}]


def test_rows_out_of_time_order_join_from_the_earliest():
    # flow tables merged from several files need not come in time order
    occ = occupancy(flows(("10.0.0.1", 40000, "192.0.2.1", 80, "tcp", 101, 102, "S0", 0),
                          ("10.0.0.9", 40000, "192.0.2.1", 80, "tcp", 50, 50, "S0", 0),
                          ("10.0.0.1", 40000, "192.0.2.1", 80, "tcp", 0, 1, "S0", 0)))
    assert occ.entries == 2 and occ.starts.tolist() == [T0, T0 + 50 * NS]
    assert occ.peak == 2 and occ.peak_ns == T0 + 50 * NS


def test_a_row_joins_while_any_earlier_row_of_its_5tuple_keeps_the_entry():
    # a long established row, a short reset one inside it, then a third after the reset one's 10 s but while
    # the established row's entry still lives: one entry throughout
    occ = occupancy(flows(("10.0.0.1", 40000, "192.0.2.1", 80, "tcp", 0, 50, "S1", 5),
                          ("10.0.0.1", 40000, "192.0.2.1", 80, "tcp", 2, 3, "RSTO", 1),
                          ("10.0.0.1", 40000, "192.0.2.1", 80, "tcp", 30, 31, "SF", 1)), "seed-003")
    assert occ.entries == 1
    assert occ.ends.tolist() == [T0 + 650 * NS]


def test_peak_insert_rate_state_mix_and_top_sources():
    rows = [("10.0.0.66", 30000 + i, f"198.18.0.{i}", 445, "tcp", 10 + i / 100, 10 + i / 100, "S0", 0)
            for i in range(90)]
    rows += [("10.0.0.7", 50000 + i, "192.0.2.80", 443, "tcp", i, i + 1, "SF", 3) for i in range(5)]
    rows += [("10.0.0.66", 20000, "192.0.2.53", 53, "udp", 1, 1.1, "SF", 1)]
    occ = occupancy(flows(*rows))
    assert occ.peak == 96 and occ.peak_ns == T0 + int((10 + 89 / 100) * NS)
    assert occ.peak_insert_rate == 90 and occ.peak_insert_ns == T0 + 10 * NS
    assert occ.state_mix == {"syn_sent": 90, "time_wait": 5, "udp_replied": 1}
    assert occ.top_sources[:2] == [{"source": "10.0.0.66", "entries": 91, "unreplied_ratio": round(90 / 91, 4)},
                                   {"source": "10.0.0.7", "entries": 5, "unreplied_ratio": 0.0}]
    # the evidence: the first frames of the top source's flows alive at the peak
    assert occ.top_source_frames[:3] == [1, 2, 3] and len(occ.top_source_frames) == 64


def test_untracked_listeners_are_left_out():
    rows = [("10.0.0.1", 1000 + i, "192.0.2.53", 53, "udp", i, i, "SF", 1) for i in range(10)]
    rows += [("10.0.0.1", 2000 + i, "192.0.2.54", 53, "udp", i, i, "SF", 1) for i in range(3)]
    rows += [("10.0.0.1", 3000, "2001:db8::53", 53, "udp", 0, 0, "SF", 1)]
    assert occupancy(flows(*rows)).entries == 14
    assert occupancy(flows(*rows), untracked=parse_untracked(["192.0.2.53:53"])).entries == 4
    occ = occupancy(flows(*rows), untracked=parse_untracked(["192.0.2.0/24", "[2001:db8::53]:53"]))
    assert occ.entries == 0 and occ.untracked_flows == 14
    assert occupancy(flows(*rows), untracked=parse_untracked(["*:53"])).untracked_flows == 14
    assert occupancy(flows(*rows), untracked=parse_untracked(["192.0.2.53:80"])).entries == 14


@pytest.mark.parametrize("value, reason", [
    ("192.0.2.1:99999", "entry 2: the port must be a number 0-65535"),
    ("*", "entry 2: names neither an address nor a port"),
    ("[2001:db8::1]53", r"entry 2: an IPv6 listener is written \[ADDRESS\]:PORT"),
    ("300.1.2.3", "entry 2: not an address or a network in CIDR notation"),
])
def test_bad_untracked_entries_are_rule_errors_that_never_repeat_them(value, reason):
    with pytest.raises(RuleError, match=f"key 'params.untracked': {reason}$") as info:
        detector(untracked=["192.0.2.53:53", value])
    assert value not in str(info.value)


def test_unknown_profile_is_a_rule_error():
    with pytest.raises(RuleError, match=r"not one of linux, seed-003, suricata$") as info:
        detector(profile="bsd")
    assert "bsd" not in str(info.value)
    with pytest.raises(RuleError, match=re.escape("not one of linux, seed-003, suricata (did you mean 'suricata'?)")):
        detector(profile="suricat")


def test_empty_flow_table_gives_no_finding():
    assert detector(report_fill_ratio=0.0).findings(AnalysisContext(flows(), CaptureStats())) == []


def test_an_idle_table_gets_no_capacity_report():
    # 2,622 entries are 1 % of the default table: the least a capacity report needs
    assert detector().findings(AnalysisContext(flows(*sweep_rows(2621)), CaptureStats())) == []
    assert judge(flows(*sweep_rows(2622))).severity == "info"
    # medium and high are written whatever the floor
    assert judge(flows(*sweep_rows(80)), table_size=100, source_ratio=1.0, report_fill_ratio=0.9).severity == "medium"


def test_series_peaks_within_bins_and_counts_inserts():
    occ = occupancy(flows(*[("10.0.0.1", 1000 + i, "192.0.2.1", 80, "tcp", 0.5, 0.5, "REJ", 1) for i in range(4)],
                          ("10.0.0.1", 999, "192.0.2.1", 80, "tcp", 30, 30, "REJ", 1)))
    peaks, inserts = occ.series(T0, 10 * NS, 4)
    # four entries live 0.5 .. 10.5 s: the first bin peaks at 4 and the second still starts with them
    assert peaks.tolist() == [4, 4, 0, 1] and inserts.tolist() == [4, 0, 0, 1]


# ---- severities --------------------------------------------------------------------------------------------

def sweep_rows(n, source="100.64.7.7"):
    return [(source, 1024 + i, f"198.18.{i // 250}.{i % 250}", 445, "tcp", i / 1000, i / 1000, "S0", 0)
            for i in range(n)]


def test_info_below_the_warning_with_the_numbers():
    finding = judge(flows(*sweep_rows(69)), table_size=100, source_ratio=1.0)
    assert finding.severity == "info" and finding.n == 69
    assert finding.evidence["peak_fill_ratio"] == 0.69
    assert finding.evidence["average_chain_length"] == round(69 / 262144, 6)
    assert "capacity report" in finding.msg


def test_medium_from_seventy_percent():
    finding = judge(flows(*sweep_rows(70)), table_size=100, source_ratio=1.0)
    assert finding.severity == "medium" and "above 70% of the table" in finding.msg


def test_high_when_full():
    finding = judge(flows(*sweep_rows(100)), table_size=100, source_ratio=1.0, hashsize=25)
    assert finding.severity == "high" and "table full" in finding.msg
    assert finding.evidence["average_chain_length"] == 4.0


def test_high_when_one_source_holds_a_tenth():
    rows = sweep_rows(10) + [(f"10.1.0.{i}", 5000, "192.0.2.1", 80, "tcp", 0, 1, "SF", 2) for i in range(40)]
    finding = judge(flows(*rows), table_size=100)
    assert finding.severity == "high" and finding.src_ip == "100.64.7.7"
    assert "one source, 100.64.7.7, holds 10.0% of the table (100% of its entries unanswered)" in finding.msg
    below = judge(flows(*sweep_rows(9), *rows[10:]), table_size=100)
    assert below.severity == "info"


def test_merge_takes_nothing_but_refuses_other_params():
    mine, theirs = detector(), detector()
    assert mine.merge(theirs) is mine
    with pytest.raises(ValueError):
        mine.merge(detector(table_size=1000))


# ---- bundled captures ----------------------------------------------------------------------------------------

def test_sweep_capture_counts_are_tsharks(tshark):
    assert tshark.count(SWEEP, "ip.src == 100.64.7.7 && tcp.flags == 0x002") == 26400
    assert tshark.count(SWEEP, "ip.dst == 100.64.7.7") == 0
    assert tshark.count(SWEEP, "tcp.flags.syn == 1 && tcp.flags.ack == 0") == 26440


def test_sweep_holds_a_tenth_of_a_default_table():
    [finding] = run(SWEEP)
    assert finding.severity == "high" and finding.src_ip == "100.64.7.7"
    ev = finding.evidence
    assert ev["peak_entries"] == finding.n == 26440 and ev["table_size"] == 262144
    assert ev["top_sources_at_peak"][0] == {"source": "100.64.7.7", "entries": 26400, "unreplied_ratio": 1.0}
    assert ev["state_mix_at_peak"] == {"syn_sent": 26400, "time_wait": 40}
    assert ev["peak_insert_rate_per_s"] >= 13200
    # the sweep's first SYNs, frames 1.. (the neighbours' first packets come later)
    assert ev["evidence_frames"][:4] == [1, 2, 3, 4] and len(ev["evidence_frames"]) == 64


def test_sweep_is_medium_short_of_the_source_share_on_a_smaller_table():
    [finding] = run(SWEEP, table_size=30000, source_ratio=1.0)
    assert finding.severity == "medium"


@pytest.mark.parametrize("path, source, total, shorter_profile", [(RESOLVER, "192.0.2.53", 2000, "seed-003"),
                                                                  (NAT, "203.0.113.1", 1000, "suricata")])
def test_busy_hosts_entries_expire(path, source, total, shorter_profile):
    # under 1 % of a default table: no capacity report; the model is read with the report's floor at 0
    assert run(path) == []
    [finding] = run(path, report_fill_ratio=0.0)
    assert finding.severity == "info" and finding.src_ip == source
    assert finding.evidence["entries"] == total
    # over 200 s at a steady rate the entries of the first 80 s have expired at the end
    assert finding.evidence["peak_entries"] < 0.7 * total
    # UDP replied 60 s in seed 003's tuning, TIME_WAIT 60 s as Suricata's closed timeout
    [shorter] = run(path, profile=shorter_profile, report_fill_ratio=0.0)
    assert shorter.evidence["peak_entries"] < finding.evidence["peak_entries"]


def test_figure_draws_the_model_against_the_table():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    det = detector(table_size=4000)
    frame = flows(*sweep_rows(2000))
    bins = TimeBins(T0, NS, 4)
    assert det.figures([], bins) == []
    [figure] = det.figures(det.findings(AnalysisContext(frame, CaptureStats())), bins)
    fig, ax = plt.subplots()
    figure.draw(ax, frame)
    line = ax.get_lines()[0]
    assert line.get_ydata().tolist() == [1000, 2000, 2000, 2000]
    plt.close(fig)


def test_explain_says_watch_sees_a_lower_bound():
    text = " ".join(explain_text(load_rules()[RULE]).split())
    assert "in `detector watch` the rule reads only the window's flows" in text
    assert "is a lower bound" in text


def test_the_flow_tables_columns_and_its_frame_give_one_model():
    from detector import engine
    from detector.flows import FlowTable

    table = FlowTable()
    engine.run([str(SWEEP), str(NAT)], [table])
    coded, frame = occupancy(table.coded_columns()), occupancy(table.to_frame())
    for name in ("entries", "peak", "peak_ns", "peak_insert_rate", "censored", "state_mix", "top_sources",
                 "top_source_frames"):
        assert getattr(coded, name) == getattr(frame, name), name
    assert coded.top_sources[0]["source"] == "100.64.7.7"


def test_findings_read_the_flow_table_without_building_its_frame():
    from detector import engine
    from detector.flows import FlowTable

    table = FlowTable()
    engine.run([str(NAT)], [table])
    ctx = AnalysisContext(table, CaptureStats())
    [finding] = detector(report_fill_ratio=0.0).findings(ctx)
    assert finding.src_ip == "203.0.113.1" and ctx._flows is table


def test_clock_at_the_end_of_int64_saturates_instead_of_wrapping():
    frame = flows(("10.0.0.1", 40000, "192.0.2.1", 80, "tcp", 0, 1, "S0", 0))
    frame["last_seen"] = pd.to_datetime([np.iinfo(np.int64).max - 5], unit="ns", utc=True)
    occ = occupancy(frame)
    assert occ.ends.tolist() == [np.iinfo(np.int64).max] and occ.peak == 1
    finding = judge(frame, report_fill_ratio=0.0)
    assert len(finding.evidence["concurrency_series"]) <= 61


# ---- real captures (../shared/captures-real) ---------------------------------------------------------------

SYN_FLOOD = "suricata-verify/tests/firewall/tcp-session-syn-flood-drop-precedence/input.pcap"
ICMP_SCAN = "lucaderi-sgr/2022/Favilli/tests/hs-icmpScan.pcapng"


def test_suricata_verify_syn_flood_is_a_capacity_report_of_unanswered_syns(captures_real, tshark):
    path = captures_real / SYN_FLOOD
    assert tshark.count(path, "ip.src == 192.0.2.10 && tcp.flags == 0x002") == 200
    assert tshark.count(path, "ip.dst == 192.0.2.10") == 0
    # 200 entries are under the 1 % of a default table a capacity report needs
    assert run(path) == []
    [finding] = run(path, report_fill_ratio=0.0)
    assert finding.severity == "info" and finding.n == 200
    ev = finding.evidence
    assert ev["state_mix_at_peak"] == {"syn_sent": 200} and ev["peak_insert_rate_per_s"] == 200
    assert ev["top_sources_at_peak"] == [{"source": "192.0.2.10", "entries": 200, "unreplied_ratio": 1.0}]
    # on a box with a 1,000-entry table the one source holds a fifth of it
    [small] = run(path, table_size=1000)
    assert small.severity == "high" and "192.0.2.10, holds 20.0% of the table" in small.msg


def test_ntop_icmp_scan_names_the_scanner_and_its_unanswered_share(captures_real, tshark):
    path = captures_real / ICMP_SCAN
    # 512 echo requests from 10.0.0.128, two to each of 256 hosts; only 10.0.0.1 and 10.0.0.3 answer
    assert tshark.count(path, "ip.src == 10.0.0.128 && icmp.type == 8") == 512
    assert {row[0] for row in tshark.fields(path, "ip.src", display_filter="icmp.type == 0")} == \
        {"10.0.0.1", "10.0.0.3"}
    [finding] = run(path, table_size=16384)
    assert finding.severity == "info" and finding.src_ip == "10.0.0.128"
    top = finding.evidence["top_sources_at_peak"][0]
    assert top == {"source": "10.0.0.128", "entries": 256, "unreplied_ratio": round(254 / 256, 4)}


# ---- what a finding is about: a flood's victim, or the source that fills the table ----------------------------

def test_a_listener_drawing_the_table_from_many_sources_is_named_with_its_sources_counted():
    # 150 forged sources, one unanswered SYN each, to one web server; one host sweeping 20 addresses beside them
    rows = [(f"203.0.{i // 250}.{i % 250 + 1}", 40000 + i, "192.0.2.80", 443, "tcp", 10 + i / 1000, 10 + i / 1000,
             "S0", 0) for i in range(150)]
    rows += [("10.0.0.66", 30000 + i, f"198.18.0.{i}", 445, "tcp", 10, 10, "S0", 0) for i in range(20)]
    occ = occupancy(flows(*rows))
    assert occ.top_destinations[0] == {"destination": "192.0.2.80", "port": 443, "entries": 150, "sources": 150,
                                       "unreplied_ratio": 1.0}
    assert occ.sources_at_peak == 151 and occ.destinations_at_peak == 21
    finding = judge(flows(*rows), report_fill_ratio=0.0)
    assert (finding.dest_ip, finding.dest_port, finding.src_ip) == ("192.0.2.80", 443, None)
    assert "150 of the entries (88%) toward 192.0.2.80:443 from 150 sources (100% unanswered)" in finding.msg
    ev = finding.evidence
    assert ev["top_destinations_at_peak_left_out"] == 21 - 5 and ev["top_sources_at_peak_left_out"] == 151 - 5
    # the evidence frames are the victim's: the forged SYNs, frames 1..150
    assert ev["evidence_frames"][:3] == [1, 2, 3]


@pytest.mark.parametrize("forged, swept", [(99, 0), (100, 101)], ids=["too-few-sources", "a-sweep-holds-more"])
def test_the_busiest_source_stays_named_short_of_a_listener_that_draws_the_table(forged, swept):
    rows = [(f"203.0.{i // 250}.{i % 250 + 1}", 40000 + i, "192.0.2.80", 443, "tcp", 10, 10, "S0", 0)
            for i in range(forged)]
    rows += [("10.0.0.66", 30000 + i, f"198.18.0.{i % 250}", 445 + i // 250, "tcp", 10, 10, "S0", 0)
             for i in range(max(swept, 1))]
    finding = judge(flows(*rows), report_fill_ratio=0.0)
    assert finding.src_ip == ("10.0.0.66" if swept else "203.0.0.1") and finding.dest_ip is None
    assert "toward" not in finding.msg


@pytest.mark.parametrize("name", ["syn-flood-spoofed.pcap", "syn-flood-spoofed-ingress.pcap"])
def test_a_syn_flood_and_the_table_it_fills_are_one_incident(name, tmp_path):
    # the conntrack finding names the flood's victim, not one of its forged sources: the two share an entity, and
    # syn-flood's `causes: [conntrack-pressure]` joins them with the flood as the root cause
    import json

    from detector.commands import analyze
    _, _, out = analyze([CAPTURES / name], tmp_path)
    document = json.loads(out.read_text())
    table = next(f for f in document["findings"] if f["rule"] == RULE)
    assert table["dest_ip"] == "10.30.0.80" and table["dest_port"] == 443 and "src_ip" not in table
    [incident] = document["incidents"]
    assert [(f["rule"], f["role"]) for f in incident["findings"]] == [("syn-flood", "root cause"),
                                                                       (RULE, "effect")]
    assert incident["root_cause"]["rule"] == "syn-flood" and "Where: 10.30.0.80," in incident["summary"]


def test_the_concurrency_figure_draws_the_messages_peaks():
    """One number, one source: the message's 'at most N entries at once' is the entries line's highest point and
    its 'up to M new entries in one second' the grey per-second line's, at the report's 2 ms bins too (the grey
    line was inserts per 2 ms bin scaled to a rate)."""
    from tests._figures import drawn

    d = drawn("session-storm-flood.pcap", "conntrack-pressure")
    pressure = d.finding
    assert d.bins.width_s < 1
    entries = next(line for line in d.ax.get_lines() if line.get_label() == "entries (model)")
    peak, rate = pressure.evidence["peak_entries"], pressure.evidence["peak_insert_rate_per_s"]
    assert entries.get_ydata().max() == peak and f"at most {peak:,} entries at once" in pressure.msg
    [inserts] = d.twin().get_lines()
    assert inserts.get_ydata().max() == rate and f"up to {rate:,} new entries in one second" in pressure.msg
    assert inserts.get_ydata().sum() == pressure.evidence["entries"]
    d.close()

"""ospf-instability on real bytes: the bundled seed-000 storm and its near-misses, each threshold with its neighbour."""
from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.contrib.ospf import (
    OSPF_DBDesc,
    OSPF_Hdr,
    OSPF_Hello,
    OSPF_LSAck,
    OSPF_LSUpd,
    OSPF_Router_LSA,
    OSPF_SummaryIP_LSA,
)
from scapy.data import DLT_EN10MB
from scapy.layers.inet import IP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.utils import PcapWriter

from detector.analysis import analyze
from detector.decode import decode
from detector.detect.figure import TimeBins
from detector.detectors import AnalysisContext, active_detectors, ospf_instability
from detector.ingest import read_captures
from detector.rules import load_rules
from detector.schema import PacketBatch
from detector.stats import CaptureStats
from detector.units import NS
from tests.test_oracle_app import NAMED

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
RULE = "ospf-instability"
T0 = 1_767_225_600
STORM = CAPTURES / "ospf-storm-flapping.pcap"
R1 = ("1.1.1.1", "10.0.0.1", "02:00:5e:0f:01:01")
R2 = ("2.2.2.2", "10.0.0.2", "02:00:5e:0f:01:02")


def rules(tmp_path=None, **params):
    """The rule alone (others would only slow the crafted cases down), its params overridden."""
    if params:
        folder = tmp_path / "rules"
        folder.mkdir(exist_ok=True)
        lines = "".join(f"  {name}: {value}\n" for name, value in params.items())
        (folder / "ospf.yaml").write_text(f"id: {RULE}\nparams:\n{lines}")
        return {RULE: load_rules(folder)[RULE]}
    return {RULE: load_rules()[RULE]}


def found(paths, rule_set=None) -> list:
    return [f for f in analyze([Path(p) for p in paths], rule_set or rules(), label="test").findings
            if f.rule == RULE]


def kinds(findings) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in findings:
        out.setdefault(f.evidence["kind"], []).append(f)
    return out


def ospf(router, body, dst="224.0.0.5", ident=0, vlan=None) -> bytes:
    eth = Ether(src=router[2], dst="01:00:5e:00:00:05" if dst == "224.0.0.5" else "02:00:5e:0f:01:99")
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    return bytes(eth / IP(src=router[1], dst=dst, ttl=1, id=ident) / OSPF_Hdr(src=router[0]) / body)


def hello(router, neighbors=(), interval=10, dead=40) -> bytes:
    return ospf(router, OSPF_Hello(mask="255.255.255.0", hellointerval=interval, deadinterval=dead,
                                   neighbors=list(neighbors)))


def exstart(router, peer, seq, mtu=1500) -> bytes:
    return ospf(router, OSPF_DBDesc(mtu=mtu, dbdescr=0x07, ddseq=seq), dst=peer[1])


def write(path: Path, timed) -> Path:
    writer = PcapWriter(str(path), linktype=DLT_EN10MB, sync=False)
    writer.write_header(None)
    for offset, frame in sorted(timed, key=lambda item: item[0]):
        stamp_us = round((T0 + offset) * 1e6)
        writer.write_packet(frame, sec=stamp_us // 10**6, usec=stamp_us % 10**6, caplen=len(frame),
                            wirelen=len(frame))
    writer.close()
    return path


# ---- the bundled captures ---------------------------------------------------

def test_seed_000_storm_is_high_and_counts_what_tshark_counts(tshark):
    (storm,) = kinds(found([STORM]))["storm"]
    assert storm.severity == "high" and storm.identifier == "storm 10.255.0.1"
    assert storm.evidence["storm_seconds"] == 15 and storm.evidence["peak_pps"] == 321
    assert (storm.src_ip, storm.src_mac) == ("10.0.12.1", "02:00:5e:0f:00:01")
    window = f"frame.time_epoch >= {T0 + 335} && frame.time_epoch < {T0 + 350}"
    assert storm.n == tshark.count(STORM, f"ospf.srcrouter == 10.255.0.1 && {window}") == 4801
    assert "99 % LS Updates" in storm.msg
    assert len(storm.evidence["evidence_frames"]) <= 64


def test_seed_000_adjacency_flaps_four_times(tshark):
    (adjacency,) = kinds(found([STORM]))["adjacency"]
    assert adjacency.severity == "high" and adjacency.identifier == "adjacency 10.255.0.1 - 10.255.0.2"
    ev = adjacency.evidence
    assert (ev["flaps"], ev["exstarts"], ev["exstarts_in_window"], ev["hello_drops"]) == (4, 4, 4, 4)
    assert {d["how"] for d in ev["drops"]} == {"dropped", "silent"}
    starts = {int(n) for n, in tshark.fields(STORM, "frame.number", display_filter="ospf.dbd == 0x07")}
    assert len(starts) == 8                      # four starts from each side
    assert starts <= set(ev["evidence_frames"])


def test_seed_000_reflooded_instances_are_medium(tshark):
    (reflood,) = kinds(found([STORM]))["reflood"]
    assert reflood.severity == "medium" and reflood.identifier == "reflood 10.0.12.1"
    worst = reflood.evidence["worst"]
    copies = tshark.count(STORM, f"ip.src == 10.0.12.1 && ospf.msg == 4 && ospf.lsa.id == {worst['ls_id']}")
    assert worst["copies"] == copies and worst["quick_copies"] == copies - 1
    assert reflood.evidence["instances"] == 41


def test_an_lsa_war_of_two_routers_sharing_a_router_id_is_medium(tshark):
    path = CAPTURES / "ospf-duplicate-router-id.pcapng"
    (war,) = found([path])
    assert war.severity == "medium" and war.evidence["kind"] == "reorigination"
    assert war.evidence["originations"] == 40 == tshark.count(path, "ospf.advrouter == 9.9.9.9")
    assert war.evidence["fast_originations"] == 39 and war.evidence["shortest_interval_s"] == 1.5
    assert "two routers use router id 9.9.9.9" in war.msg


def test_mismatched_timers_and_mtus_are_low():
    findings = found([CAPTURES / "ospf-mismatches.pcap"])
    assert sorted((f.evidence["kind"], f.severity) for f in findings) == [("hello-mismatch", "low"),
                                                                          ("mtu-mismatch", "low")]
    by_kind = kinds(findings)
    assert "network 10.0.20.0/24 area 0.0.0.0 VLAN 20" in by_kind["hello-mismatch"][0].msg
    assert by_kind["mtu-mismatch"][0].evidence["mtus"] == ["7.7.7.7 1500", "9.9.9.9 9000"]


def test_a_healthy_adjacency_forming_is_silent():
    """ExStart retransmitted once, the Exchange, a Loading burst the mirror sees twice, one re-origination."""
    assert found([CAPTURES / "ospf-adjacency-forming.pcapng"]) == []


@pytest.mark.parametrize("path", sorted(NAMED["ospf"]))
def test_real_ospf_captures_are_parsed_and_stay_quiet(captures_real, path):
    assert found([captures_real / path]) == []


# ---- thresholds, each with its neighbour -------------------------------------

@pytest.mark.parametrize("seconds, pps, severity", [(5, 101, "high"), (4, 101, None), (5, 100, None)])
def test_storm_needs_more_than_storm_pps_for_storm_seconds(tmp_path, seconds, pps, severity):
    ack = ospf(R1, OSPF_LSAck())
    timed = [(10 + k / pps, ack) for k in range(seconds * pps)]
    storms = kinds(found([write(tmp_path / "storm.pcap", timed)])).get("storm", [])
    assert [f.severity for f in storms] == ([severity] if severity else [])


@pytest.mark.parametrize("starts, severity, exstarts", [
    ([0, 100, 200], "medium", 3),          # three starts in 5 minutes: min_exstarts
    ([0, 100], "low", 2),                  # one restart: slower than a flap
    ([0, 150, 301], "low", 3),             # three starts, never three within 300 s
    ([0, 100, 200, 250], "high", 4),       # three flaps: high_flaps
])
def test_adjacency_starts_count_new_dd_sequence_numbers(tmp_path, starts, severity, exstarts):
    timed = []
    for k, t in enumerate(starts):
        seq = 0x100 + k
        # each start retransmitted after RxmtInterval with its sequence number: still one start
        timed += [(t, exstart(R1, R2, seq)), (t + 5, exstart(R1, R2, seq)), (t + 0.01, exstart(R2, R1, 0x900 + k))]
    (adjacency,) = found([write(tmp_path / "starts.pcap", timed)])
    assert adjacency.severity == severity and adjacency.evidence["exstarts"] == exstarts
    assert adjacency.identifier == "adjacency 1.1.1.1 - 2.2.2.2"
    assert (adjacency.src_ip, adjacency.dest_ip) == ("10.0.0.1", "10.0.0.2")


def test_retransmitted_exstarts_are_one_start(tmp_path):
    timed = [(5 * k, exstart(R1, R2, 0x77)) for k in range(12)] + [(0.01, exstart(R2, R1, 0x99))]
    assert found([write(tmp_path / "stuck.pcap", timed)]) == []


def test_only_init_and_master_together_start_an_adjacency(tmp_path):
    """I and M without MS (RFC 2328 section 10.8 sends all three to start): four of them are no restarts."""
    timed = [(50 * k, ospf(R1, OSPF_DBDesc(mtu=1500, dbdescr=0x06, ddseq=0x500 + k), dst=R2[1])) for k in range(4)]
    assert found([write(tmp_path / "init.pcap", timed)]) == []


def _hellos(r1_unlisted=(), r1_missing=(), r2_missing=(), r1_always_lists=False, end=200):
    timed = []
    for t in range(0, end, 10):
        if t not in r1_missing:
            listed = r1_always_lists or t not in r1_unlisted
            timed.append((t + 0.5, hello(R1, [R2[0]] if listed else [])))
        if t not in r2_missing:
            timed.append((t + 1.0, hello(R2, [R1[0]])))
    return timed


@pytest.mark.parametrize("case, expected", [
    ({}, None),                                                        # steady Hellos
    ({"r1_unlisted": [100]}, ("low", 1)),                              # dropped from one Hello, r2's all there
    ({"r1_unlisted": [100], "r1_missing": [110]}, None),               # the Hello after it lost: no proof
    ({"r1_unlisted": [100, 110], "r1_missing": [90]}, None),           # ... nor before it
    ({"r1_unlisted": [50, 100, 150]}, ("medium", 3)),                  # three quick ones: min_exstarts
    ({"r2_missing": [50, 60, 70, 80], "r1_always_lists": True}, ("medium", 1)),   # silent 50 s > dead 40
    ({"r2_missing": [50, 60, 70], "r1_always_lists": True}, None),                # silent 40 s: not longer
    ({"r2_missing": [50, 60, 70, 80], "r1_missing": [60, 70], "r1_always_lists": True}, None),  # capture gap
])
def test_hellos_show_an_adjacency_down_only_with_the_speaker_heard_throughout(tmp_path, case, expected):
    findings = found([write(tmp_path / "hellos.pcap", _hellos(**case))])
    if expected is None:
        assert findings == []
    else:
        (adjacency,) = findings
        assert (adjacency.severity, adjacency.evidence["flaps"]) == expected
        assert adjacency.evidence["exstarts"] == 0


QUICK = CAPTURES / "ospf-quick-resets.pcap"


def test_two_quick_resets_of_a_standing_adjacency_are_low():
    """arkime's ospf.pcap, re-created: one router drops its neighbour from two Hellos while the neighbour's Hellos
    keep coming, and each time the adjacency is back through its exchange within milliseconds (issue 27)."""
    (adjacency,) = kinds(found([QUICK]))["adjacency"]
    assert adjacency.severity == "low" and adjacency.identifier == "adjacency 172.16.0.1 - 172.16.0.2"
    ev = adjacency.evidence
    assert (ev["flaps"], ev["exstarts"], ev["hello_drops"]) == (2, 2, 1)
    assert ev["restarted_a_standing_adjacency"] and ev["quick_resets"] and ev["came_back"]
    assert not ev["hellos_lost"] and ev["hellos_throughout"]
    assert len(ev["exchange_done_after_s"]) == 2 and max(ev["exchange_done_after_s"]) < 0.05
    assert "quick resets" in adjacency.msg and "not a failing link" in adjacency.msg


def _resets(resets, r1_silent=(), answered=True, end=None):
    """A standing adjacency between R1 and R2 (Hellos every 10 s); R2 leaves R1 out of its Hello just before each
    reset and starts over after R1's next Hello, R1 answering as slave (`answered`) or not; R1 sends no Hello at
    the times `r1_silent`."""
    end = end or max(resets) + 40
    timed = []
    for t in range(0, end, 10):
        if t not in r1_silent:
            timed.append((t + 0.95, hello(R1, [R2[0]])))
        dropped = any(r - 10 < t <= r for r in resets)
        timed.append((t + 0.55, hello(R2, [] if dropped else [R1[0]])))
    for k, r in enumerate(resets):
        seq = 0x400 + k
        timed.append((r + 0.96, ospf(R2, OSPF_DBDesc(mtu=1500, dbdescr=0x07, ddseq=seq))))
        if answered:
            timed += [(r + 0.961, ospf(R1, OSPF_DBDesc(mtu=1500, dbdescr=0x00, ddseq=seq))),
                      (r + 0.963, ospf(R2, OSPF_DBDesc(mtu=1500, dbdescr=0x01, ddseq=seq + 1))),
                      (r + 0.964, ospf(R1, OSPF_DBDesc(mtu=1500, dbdescr=0x00, ddseq=seq + 1)))]
    return timed


@pytest.mark.parametrize("case, severity, quick", [
    ({"resets": [70, 80]}, "low", True),                                  # a couple, straight back
    ({"resets": [70, 80], "r1_silent": [30, 40, 50, 60]}, "medium", False),   # R1's Hellos lost: a dead interval
    ({"resets": [70, 80], "answered": False}, "medium", False),           # starts that never get an exchange
    ({"resets": [70, 80, 90]}, "medium", True),                           # again and again: min_exstarts
    ({"resets": [70, 140, 210]}, "high", True),                           # ... and for minutes: sustained
])
def test_quick_resets_against_what_makes_an_adjacency_flap(tmp_path, case, severity, quick):
    (adjacency,) = kinds(found([write(tmp_path / "resets.pcap", _resets(**case))]))["adjacency"]
    assert adjacency.severity == severity, adjacency.msg
    assert adjacency.evidence["quick_resets"] is quick


def _lsa_update(router, seq, age=1, ident=0, vlan=None) -> bytes:
    lsa = OSPF_SummaryIP_LSA(id="172.16.1.0", adrouter="3.3.3.3", seq=seq, age=age, mask="255.255.255.0")
    return ospf(router, OSPF_LSUpd(lsalist=[lsa]), ident=ident, vlan=vlan)


@pytest.mark.parametrize("intervals, fast", [
    ([4.9, 4.9, 4.9], 3),      # min_fast_reoriginations below MinLSInterval
    ([4.9, 4.9, 6.0], 2),
    ([5.0, 5.0, 5.0], 0),      # exactly MinLSInterval is allowed
])
def test_reoriginations_sooner_than_min_ls_interval(tmp_path, intervals, fast):
    times = np.concatenate(([0.0], np.cumsum(intervals)))
    timed = [(10 + t, _lsa_update(R1, 0x80000001 + k)) for k, t in enumerate(times)]
    timed.append((40.0, _lsa_update(R2, 0x80000002)))      # an old copy flooded back: no origination
    findings = kinds(found([write(tmp_path / "lsa.pcap", timed)])).get("reorigination", [])
    assert [(f.severity, f.evidence["fast_originations"]) for f in findings] == ([("medium", 3)] if fast >= 3 else [])


def test_old_copies_flooded_back_are_no_originations(tmp_path):
    """Neighbours returning two older instances (RFC 2328 section 13 step 8), the second newer than the first,
    before each origination, read in one batch and one packet at a time (each older copy then opens a batch of
    its own): the intervals run from origination to origination, 6 s each."""
    timed = []
    for k in range(4):
        seq = 0x80000003 + k
        timed += [(10 + 6 * k, _lsa_update(R1, seq)), (14 + 6 * k, _lsa_update(R2, seq - 2)),
                  (14.5 + 6 * k, _lsa_update(R2, seq - 1))]
    (batch,) = [decode(raw) for _, raw in read_captures([str(write(tmp_path / "old.pcap", timed))])]
    for size in (len(batch), 1):
        detector = _detector()
        for start in range(0, len(batch), size):
            cols = {k: v[start:start + size] for k, v in batch.cols.items()}
            detector.update(PacketBatch(data=batch.data, cols=cols))
        origins = detector.origins
        assert (origins["originations"].tolist(), origins["fast"].tolist()) == ([4], [0]), size


@pytest.mark.parametrize("copies, spacing, vlans, severity", [
    (11, 0.5, [None], "medium"),           # 10 copies within MinLSArrival of the one before
    (10, 0.5, [None], None),               # 9
    (11, 1.0, [None], None),               # a second apart: not within MinLSArrival
    (6, 0.5, [10, 20], None),              # one copy per link of a mirror of two links, 5 quick each
])
def test_refloods_count_quick_copies_per_sender_and_link(tmp_path, copies, spacing, vlans, severity):
    timed = [(10 + k * spacing, _lsa_update(R1, 0x80000005, ident=k, vlan=vlan))
             for vlan in vlans for k in range(copies)]
    refloods = kinds(found([write(tmp_path / "flood.pcap", timed)])).get("reflood", [])
    assert [f.severity for f in refloods] == ([severity] if severity else [])
    if severity:
        assert refloods[0].evidence["quick_copies"] == copies - 1


def test_one_router_changing_its_timers_is_no_mismatch(tmp_path):
    timed = [(1 + t, hello(R1, interval=10, dead=40)) for t in range(0, 60, 10)] + \
            [(61 + t, hello(R1, interval=5, dead=20)) for t in range(0, 60, 5)]
    assert found([write(tmp_path / "retimed.pcap", timed)]) == []
    timed.append((65.5, hello(R2, interval=10, dead=40)))
    (mismatch,) = found([write(tmp_path / "mismatch.pcap", timed)])
    assert mismatch.evidence["timers"] == ["1.1.1.1 Hello 5 s / dead 20 s", "1.1.1.1, 2.2.2.2 Hello 10 s / dead 40 s"]


def test_equal_timers_and_mtus_are_no_mismatch(tmp_path):
    timed = [(1 + t, hello(R1, [R2[0]])) for t in range(0, 60, 10)] + \
            [(2 + t, hello(R2, [R1[0]])) for t in range(0, 60, 10)] + \
            [(5, exstart(R1, R2, 1)), (5.1, exstart(R2, R1, 2))]
    assert found([write(tmp_path / "ok.pcap", timed)]) == []
    timed[-1] = (5.1, exstart(R2, R1, 2, mtu=1400))
    (mtu,) = found([write(tmp_path / "mtu.pcap", timed)])
    assert mtu.evidence["mtus"] == ["1.1.1.1 1500", "2.2.2.2 1400"]


def test_a_param_moves_its_threshold(tmp_path):
    ack = ospf(R1, OSPF_LSAck())
    path = write(tmp_path / "storm.pcap", [(10 + k / 60, ack) for k in range(5 * 60)])
    assert found([path]) == []
    (storm,) = found([path], rules(tmp_path, storm_pps=50))
    assert storm.severity == "high"


# ---- one pass, batches and partitions ------------------------------------------

def _detector():
    return next(d for d in active_detectors(rules()) if d.rule_id == RULE)


def _json(findings) -> list:
    return [f.to_json() for f in findings]


def test_small_batches_and_merged_partitions_equal_one_pass():
    (batch,) = [decode(raw) for _, raw in read_captures([str(STORM)])]
    ctx = AnalysisContext(flows=None, stats=CaptureStats())
    whole = _detector()
    whole.update(batch)
    expected = _json(whole.findings(ctx))
    assert len(expected) == 3

    def part(lo, hi):
        return PacketBatch(data=batch.data, cols={k: v[lo:hi] for k, v in batch.cols.items()})

    stream = _detector()
    for start in range(0, len(batch), 250):
        stream.update(part(start, start + 250))
    assert _json(stream.findings(ctx)) == expected
    ts = batch["ts_ns"] - T0 * NS
    # cuts inside a flap's Hello gap, inside an exchange, inside the storm
    for cut_s in (60.0, 162.5, 341.3):
        cut = int((ts < cut_s * NS).sum())
        left, right = _detector(), _detector()
        left.update(part(0, cut))
        right.update(part(cut, len(batch)))
        assert _json(left.merge(right).findings(ctx)) == expected, cut_s


def test_a_storm_second_split_between_partitions_counts_whole(tmp_path):
    """101 packets a second for 5 s, cut in the middle of a second: each half holds about 50 of it."""
    ack = ospf(R1, OSPF_LSAck())
    path = write(tmp_path / "storm.pcap", [(10 + k / 101, ack) for k in range(5 * 101)])
    (batch,) = [decode(raw) for _, raw in read_captures([str(path)])]
    for cut in (50, 152, 303):
        left, right = _detector(), _detector()
        left.update(PacketBatch(data=batch.data, cols={k: v[:cut] for k, v in batch.cols.items()}))
        right.update(PacketBatch(data=batch.data, cols={k: v[cut:] for k, v in batch.cols.items()}))
        (storm,) = left.merge(right).findings(AnalysisContext(flows=None, stats=CaptureStats()))
        assert storm.severity == "high" and storm.n == 505, cut


def test_the_state_stays_bounded_under_forged_router_ids(monkeypatch):
    """Hellos and Updates from 3,000 forged routers do not push the storm and the flapping adjacency out."""
    monkeypatch.setattr(ospf_instability, "MAX_ROWS", 500)
    forged = []
    for k in range(3000):
        router = (f"172.31.{k >> 8}.{k & 255}", f"10.9.{k >> 8}.{k & 255}", "02:00:5e:0f:09:09")
        forged.append(hello(router, [f"192.0.2.{k & 255}"]))
        forged.append(_lsa_update(router, 0x80000001 + k))
    (batch,) = [decode(raw) for _, raw in read_captures([str(STORM)])]
    detector = _detector()
    step = len(batch) // 10
    for k in range(10):
        detector.update(PacketBatch(data=batch.data, cols={c: v[k * step:(k + 1) * step if k < 9 else None]
                                                           for c, v in batch.cols.items()}))
        if k == 4:
            noise = decode(_raw_batch(forged, T0 + 200))
            detector.update(noise)
    for table in (detector.rates, detector.routers, detector.addresses, detector.speakers, detector.stream,
                  detector.listed, detector.dbds, detector.origins, detector.floods):
        assert len(table["last_ns"]) <= 500
    got = kinds(detector.findings(AnalysisContext(flows=None, stats=CaptureStats())))
    assert got["storm"][0].severity == "high" and got["adjacency"][0].severity == "high"


def _raw_batch(frames, start_s):
    from tests.test_decode import make_batch
    raw = make_batch([(1, f) for f in frames])
    raw.cols["ts_ns"] = start_s * NS + np.arange(len(frames), dtype=np.int64) * 1000
    raw.cols["frame"] = raw.cols["frame"] + 10**6
    return raw


# ---- the report's figure -------------------------------------------------------

def test_the_figure_counts_each_routers_packets(tshark):
    findings = found([STORM])
    (batch,) = [decode(raw) for _, raw in read_captures([str(STORM)])]
    bins = TimeBins(start_ns=int(batch["ts_ns"].min()), bin_ns=NS, count=400)
    (figure,) = _detector().figures(findings, bins)
    assert figure.routers == ["10.255.0.1", "10.255.0.2"]
    figure.add(batch)
    assert figure.packets[0].sum() == tshark.count(STORM, "ospf.srcrouter == 10.255.0.1")
    assert figure.packets[1].sum() == tshark.count(STORM, "ospf.srcrouter == 10.255.0.2")
    assert figure.packets[0].max() == 321 and figure.packets[2].sum() == 0


# ---- hostile bytes ---------------------------------------------------------------

SHAPES = [hello(R1, [R2[0], "3.3.3.3"]), exstart(R1, R2, 5), _lsa_update(R1, 0x80000001),
          ospf(R1, OSPF_LSUpd(lsalist=[OSPF_Router_LSA(id=R1[0], adrouter=R1[0], seq=0x80000002)]))]
OSPF_AT = 14 + 20


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(writes=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 255), st.sampled_from([0, 1, 4, 19, 20, 0x7F,
                                                                                          0x80, 0xFF])),
                       min_size=1, max_size=8))
def test_hostile_ospf_never_breaks_the_rule(writes):
    frames = [bytearray(f) for f in SHAPES]
    for which, at, value in writes:
        frame = frames[which]
        frame[OSPF_AT + at % (len(frame) - OSPF_AT)] = value
    buffer = io.BytesIO()
    buffer.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, DLT_EN10MB))
    for k in range(40):
        frame = bytes(frames[k % len(frames)])
        buffer.write(struct.pack("<IIII", T0 + k // 4, (k % 4) * 250000, len(frame), len(frame)) + frame)
    analyze([io.BytesIO(buffer.getvalue())], rules(), label="fuzz")


def test_state_tables_keep_their_declared_dtypes():
    """A column that turned float or signed (a rate times 1.5, a mask) would make the kernel compile again and
    merges upcast: every table holds exactly its declared columns and dtypes after real traffic."""
    detector = _detector()
    for path in (STORM, CAPTURES / "ospf-duplicate-router-id.pcapng", CAPTURES / "ospf-mismatches.pcap"):
        for _, raw in read_captures([str(path)]):
            detector.update(decode(raw))
    declared = {"rates": ospf_instability.RATE_COLUMNS, "routers": ospf_instability.ROUTER_COLUMNS,
                "addresses": ospf_instability.ADDRESS_COLUMNS, "speakers": ospf_instability.SPEAKER_COLUMNS,
                "stream": ospf_instability.RUN_COLUMNS, "listed": ospf_instability.RUN_COLUMNS,
                "dbds": ospf_instability.DBD_COLUMNS, "origins": ospf_instability.ORIGIN_COLUMNS,
                "floods": ospf_instability.FLOOD_COLUMNS}
    for name, columns in declared.items():
        table = getattr(detector, name)
        assert len(table["last_ns"]) > 0, name
        assert {c: table[c].dtype for c in table} == {c: np.dtype(t) for c, t in columns.items()}, name


def test_the_storm_figure_shows_the_messages_numbers(tshark):
    """One number, one source: the storm finding's peak is the highest of the figure's storm-second points (the
    rule's own count per second), its packets their sum, and tshark counts as many OSPF packets of that router in
    those seconds; the rate line is per bin of the report's axis and says its width."""
    from tests._figures import drawn

    path = CAPTURES / "ospf-storm-flapping.pcap"
    d = drawn(path.name, "ospf-instability", pick=lambda f: f.evidence.get("kind") == "storm")
    storm, bins, ax = d.finding, d.bins, d.ax
    assert bins.width_s != 1                         # the report's bins are not the rule's seconds
    router = storm.evidence["router_id"]
    [points] = [line for line in ax.lines if line.get_label() == f"{router}: packets in each storm second"]
    y = points.get_ydata()
    assert y.max() == storm.evidence["peak_pps"] and f"peak {int(y.max()):,}/s" in storm.msg
    assert y.sum() == storm.evidence["packets"] == storm.n and f"{int(y.sum()):,} packets over" in storm.msg
    seconds = np.round(points.get_xdata() - 0.5 + bins.start_ns / NS).astype(np.int64)
    per_second = tshark.fields(path, "frame.time_epoch", display_filter=f"ospf.srcrouter == {router}")
    second, count = np.unique(np.floor([float(row[0]) for row in per_second]).astype(np.int64), return_counts=True)
    counted = dict(zip(second.tolist(), count.tolist()))
    assert [counted[s] for s in seconds.tolist()] == y.tolist()
    assert any(line.get_label() == f"{router} ({bins.width_s:g} s bins)" for line in ax.lines)
    d.close()

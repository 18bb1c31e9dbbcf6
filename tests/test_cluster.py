"""detector on a Dask cluster (detector.cluster): one capture cut into partitions, the answer of one process.

Captures are split into files with editcap (Wireshark's tool, beside tshark). The partition merge is first
checked in process over every bundled capture (scan, fold, a pickle round trip as the cluster ships states,
merge in capture order), then end to end on real clusters the tests start: an embedded LocalCluster of two
worker processes (one per module) and, through the command line, `dask scheduler` with two `dask worker`
processes.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from detector import cluster, commands, ordering
from detector.analysis import analyze as analyze_in_process
from detector.analysis import conclude
from detector.errors import DetectorError
from detector.ordering import capture_order
from detector.report import findings_document
from detector.rules import load_rules
from detector.site import load_site
from tests._cli import run_in_process
from tests.test_manifest import site_file

pytest.importorskip("distributed")

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
MANIFEST = json.loads((CAPTURES / "MANIFEST.json").read_text())["captures"]
BIN = Path(sys.executable).parent

# Bundled captures whose partitioned answer still differs from one pass: a merge that is not exact. The flow
# table's merge redoes a cut connection's tracking from a bounded log (detector/flows/merge.py), and every
# detector carries across a cut what it watches for (the cut tests of each detector, tests/_cuts.py; capture-loss
# settles the events of connections picked up mid-stream by what the flow merge redid): none today. Strict: a
# merge made exact turns its capture's test red until it leaves this list.
INEXACT: set[str] = set()
# Bundled captures whose merge is exact at the three file cuts above but not at the byte ranges' cuts (3 and 7
# partitions of the whole file fall elsewhere): none. echo-loop's evidence frames, a loop's first and last copies
# in capture order, no longer follow where batches (and partitions) begin; rss-saturation keeps every flow of a
# bin a cut may split and judges it once whole; syn-flood's sketch counts sources exactly until one is dropped.
# Strict as INEXACT.
INEXACT_IN_RANGES: set[str] = set()
# the flow counters a cut makes lower bounds, left out where a test compares the rest: none since the flow merge
# redoes a cut connection's tracking (flows/merge.py)
CUT_COUNTERS: list[str] = []


def packets_of(path) -> int:
    return cluster.count_records(str(path)).packets


def split(capture: Path, folder: Path, parts: int) -> list[str]:
    """`capture` cut by editcap into `parts` files of consecutive packets, in time order."""
    if shutil.which("editcap") is None:
        pytest.fail("editcap is missing (Debian package wireshark-common, installed with tshark)")
    folder.mkdir(parents=True, exist_ok=True)
    per = max(1, -(-packets_of(capture) // parts))
    suffix = capture.name.rsplit(".", 1)[1]
    subprocess.run(["editcap", "-c", str(per), str(capture), str(folder / f"part.{suffix}")], check=True)
    return sorted(str(p) for p in folder.glob("part_*"))


def normalised(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def merged_in_process(paths, rules, site, per_file: int = 1):
    """What a cluster computes, without one: survey each file (cut into `per_file` byte ranges), lay out the
    partitions, fold each, ship its state (pickle), merge in capture order."""
    surveys = [cluster.survey(path, per_file) for path in paths]
    parts, _, warnings = cluster.lay_out(list(paths), surveys)
    folds = (pickle.loads(pickle.dumps(cluster.fold(part, "analyze", rules, site))) for part in parts)
    merged, run = cluster.merge_in_order(folds)
    run.warnings.extend(warnings)
    return conclude(merged.detectors, merged.flows, merged.stats, run, quality=merged.quality)


def document(result) -> str:
    return json.dumps(findings_document(result.captures, {**result.stats.to_json(), "flows": result.flow_count},
                                        result.findings, result.failures), sort_keys=True, default=str)


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"] for e in MANIFEST])
def test_partitions_merge_to_the_answer_of_one_pass(entry, tmp_path):
    # in capture order, as `detector analyze` and the cluster read them (a capture whose time runs back has a
    # later part that begins earlier)
    paths = capture_order(split(CAPTURES / entry["file"], tmp_path, 3))
    rules, site = load_rules(), load_site(site_file(entry))
    one = analyze_in_process(paths, rules, site=site)
    many = merged_in_process(paths, rules, site)
    same = document(one) == document(many) and one.flow_table.to_frame().equals(many.flow_table.to_frame())
    if entry["file"] in INEXACT:
        assert not same, f"{entry['file']}: now merges exactly: take it out of INEXACT"
        return
    assert document(one) == document(many)
    pd.testing.assert_frame_equal(one.flow_table.to_frame(), many.flow_table.to_frame())


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"] for e in MANIFEST])
def test_byte_ranges_merge_to_the_answer_of_one_pass(entry):
    # one file cut into 3 and into 7 byte ranges at record boundaries: frame numbers, interfaces, pcapng
    # headers and the times of simple packet blocks as in one pass, so the merge meets the answer of one pass
    path = str(CAPTURES / entry["file"])
    rules, site = load_rules(), load_site(site_file(entry))
    one = analyze_in_process([path], rules, site=site)
    same = {}
    for per_file in (3, 7):
        many = merged_in_process([path], rules, site, per_file)
        assert many.stats.packets == one.stats.packets
        assert many.captures == one.captures          # one entry for the file: packets, interfaces, warnings
        same[per_file] = document(one) == document(many) and \
            one.flow_table.to_frame().equals(many.flow_table.to_frame())
    if entry["file"] in INEXACT | INEXACT_IN_RANGES:
        assert not all(same.values()), f"{entry['file']}: now merges exactly: take it out of INEXACT"
        return
    assert same == {3: True, 7: True}


def test_a_range_reads_as_the_whole_file_reads_its_records(tmp_path):
    # a pcapng of two sections whose second declares its interfaces with another time resolution and offset,
    # and a damaged tail: each range's records, interfaces and warnings are the whole file's
    from detector.ingest import open_capture
    from tests.test_ingest import multi_section_capture
    data = multi_section_capture()[0]
    path = tmp_path / "sections.pcapng"
    path.write_bytes(data + data + data[:-5])      # a third copy cut short: damage in the last range
    with open_capture(str(path)) as reader:
        whole = [(raw["frame"].tolist(), raw["ts_ns"].tolist(), raw["iface"].tolist()) for raw in reader]
        warnings = reader.warnings
    found = cluster.survey(str(path), 4)
    assert len(found.ranges) >= 3 and found.extent.packets == sum(len(f) for f, _, _ in whole)
    got, said = [], []
    for part in pickle.loads(pickle.dumps(found.ranges)):       # as a cluster ships them
        with open_capture(part) as reader:
            got += [(raw["frame"].tolist(), raw["ts_ns"].tolist(), raw["iface"].tolist()) for raw in reader]
            said += reader.warnings
    flat = [[record for batch in rows for record in zip(*batch)] for rows in (whole, got)]
    assert flat[0] == flat[1]
    assert said == warnings and warnings and f"{path} at byte " in warnings[0]


def test_a_compressed_capture_is_one_partition(tmp_path):
    # reading a gzip capture at an offset means decompressing all before it: it is never cut
    import gzip
    packed = tmp_path / "scan.pcap.gz"
    packed.write_bytes(gzip.compress((CAPTURES / "scan-port-scan.pcap").read_bytes()))
    plain = cluster.survey(str(CAPTURES / "scan-port-scan.pcap"), 3)
    found = cluster.survey(str(packed), 3)
    assert len(plain.ranges) == 3 and found.ranges == []
    assert (found.extent.packets, found.extent.first_ns, found.extent.last_ns) == \
        (plain.extent.packets, plain.extent.first_ns, plain.extent.last_ns)
    parts, _, _ = cluster.lay_out([str(packed)], [found])
    assert [(p.part, p.first_frame) for p in parts] == [(None, 1)]


# ---- a real embedded cluster ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as local, \
            Client(local) as dask_client:
        yield dask_client


def crafted(tmp_path: Path) -> list[str]:
    """A routing loop, a PMTUD black hole and TCP connections whose SYN and end fall in different files: the
    bundled captures merged in time (mergecap) and cut into 7 files."""
    whole = tmp_path / "whole.pcapng"
    subprocess.run(["mergecap", "-w", str(whole), str(CAPTURES / "routing-loop-ipv6-vlan.pcap"),
                    str(CAPTURES / "pmtud-blackhole-ipv4.pcapng"), str(CAPTURES / "handshake-rtt-distant.pcap")],
                   check=True)
    return split(whole, tmp_path / "parts", 7)


@pytest.mark.parametrize("per_file", [1, 3, 7])
def test_a_loop_a_black_hole_and_syn_spanning_flows_across_files(client, tmp_path, per_file):
    paths = crafted(tmp_path)
    _, one, one_path = commands.analyze(paths, tmp_path / "one")
    _, many, many_path = commands.analyze(paths, tmp_path / "many", client=client, partitions_per_file=per_file)
    assert many.captures == one.captures
    extents = [cluster.count_records(p) for p in paths]
    bounds = [e.first_ns for e in extents[1:]]
    a, b = normalised(one_path), normalised(many_path)
    loops = [f for f in a["findings"] if f["rule"] == "routing-loop"]
    # the cut falls inside the loop, and inside connections that began with a SYN
    assert loops and any(loops[0]["first_seen"] < pd.Timestamp(t, unit="ns", tz="UTC").isoformat() for t in bounds)
    flows = one.flow_table.to_frame()
    cut = [(flows.first_seen.astype("int64") < t) & (flows.last_seen.astype("int64") > t) for t in bounds]
    spanning = flows[pd.concat(cut, axis=1).any(axis=1) & flows.history.str.startswith("S")]
    assert len(spanning) >= 1
    # the black hole and the MSS violation too, with the counts, times and frames of one pass
    assert [f["rule"] for f in a["findings"]] == ["routing-loop", "pmtud-blackhole", "mss-violation"]
    # cut into byte ranges too (a partition's head holds the last copies of packets the one before it tracks)
    assert b["findings"] == a["findings"]
    pd.testing.assert_frame_equal(flows.drop(columns=CUT_COUNTERS),
                                  many.flow_table.to_frame().drop(columns=CUT_COUNTERS))
    # an evidence pcap per finding, as in one pass
    evidence = [sorted(p.name for p in (tmp_path / run / "evidence").iterdir()) for run in ("one", "many")]
    assert evidence[1] == evidence[0] == [f"{rule}-1.pcap" for rule in sorted(f["rule"] for f in a["findings"])]

EXACT = ["scan-port-scan.pcap", "syn-flood-ingress-only.pcap", "routing-loop-ipv6-vlan.pcap",
         "ospf-storm-flapping.pcap", "dhcp-rogue-server.pcapng"]


@pytest.mark.parametrize(("name", "per_file"), [(name, per_file) for name in EXACT for per_file in (1, 3, 7)
                                                 if per_file == 1 or name not in INEXACT_IN_RANGES])
def test_the_cluster_writes_the_findings_of_one_process(client, tmp_path, name, per_file):
    paths = split(CAPTURES / name, tmp_path / "parts", 3)
    *_, one = commands.analyze(paths, tmp_path / "one")
    *_, many = commands.analyze(paths, tmp_path / "many", client=client, partitions_per_file=per_file)
    assert one.read_text() == many.read_text()
    assert (tmp_path / "one" / "report.md").read_text() == (tmp_path / "many" / "report.md").read_text()


def test_files_are_ordered_by_first_packet_not_name(client, tmp_path):
    paths = split(CAPTURES / "scan-port-scan.pcap", tmp_path / "parts", 3)
    shuffled = []
    for path, name in zip(paths, ["c.pcap", "a.pcap", "b.pcap"]):       # names sort against time
        shuffled.append(str(Path(path).rename(tmp_path / name)))
    assert ordering.capture_order(sorted(shuffled)) == shuffled
    *_, whole = commands.analyze([str(CAPTURES / "scan-port-scan.pcap")], tmp_path / "whole")
    for label, client_or_none in (("one", None), ("many", client)):
        _, result, path = commands.analyze(sorted(shuffled), tmp_path / label, client=client_or_none)
        assert [c["file"] for c in result.captures] == shuffled
        assert not any("overlaps" in w for w in result.warnings)
        got = normalised(path)
        want = normalised(whole)
        assert got["findings"][0]["evidence"]["evidence_frames"] == want["findings"][0]["evidence"]["evidence_frames"]
        assert got["stats"] == want["stats"]


def test_an_embedded_cluster_folds_a_file_while_it_surveys_the_later_ones(tmp_path, monkeypatch):
    # files named against time; the survey of the last one in time is held until the test lets it go: every
    # other file's partition must be given before that (each needs only the surveys of the files before it),
    # in time order with the frames of one pass, and laying out must not start the cluster
    paths = split(CAPTURES / "scan-port-scan.pcap", tmp_path / "parts", 4)
    named = [str(Path(path).rename(tmp_path / name)) for path, name in zip(paths, ["d", "c", "b", "a"])]
    last = os.path.abspath(named[-1])
    release, surveyed, real = threading.Event(), [], cluster.survey

    def held(path, parts=1):
        if path == last:
            assert release.wait(30), "the last file's survey was waited for before the others were given"
        surveyed.append(path)
        return real(path, parts)

    monkeypatch.setattr(cluster, "survey", held)
    with cluster.connect(2, None) as embedded:
        layout = cluster.Layout(embedded, sorted(named))
        given = iter(layout)
        early = [next(given) for _ in range(4)]
        assert last not in surveyed
        release.set()
        assert list(given) == []
        assert embedded._client is None
    frames = [1 + sum(packets_of(p) for p in named[:k]) for k in range(4)]
    assert [(part.name, part.first_frame) for part in early] == list(zip(named, frames))
    assert layout.parts == early and [e.path for e in layout.extents] == named and layout.warnings == []


def test_a_layout_closed_early_leaves_no_survey_behind(tmp_path, monkeypatch):
    # a run that stops before folding (an error, Ctrl-C): the surveys not yet begun are cancelled, so none keeps
    # the process from exiting
    paths = split(CAPTURES / "scan-port-scan.pcap", tmp_path / "parts", 4)
    release, surveyed, real = threading.Event(), [], cluster.survey

    def held(path, parts=1):
        assert release.wait(30)
        surveyed.append(path)
        return real(path, parts)

    monkeypatch.setattr(cluster, "survey", held)
    with cluster.connect(2, None) as embedded:
        layout = cluster.Layout(embedded, paths)
        layout.close()
        release.set()
        layout._pool.shutdown(wait=True)
    assert len(surveyed) <= 1


def test_overlapping_captures_are_warned_about(client, tmp_path):
    a, b = str(CAPTURES / "scan-port-scan.pcap"), str(CAPTURES / "syn-flood-ingress-only.pcap")
    for label, client_or_none in (("one", None), ("many", client)):
        _, result, _ = commands.analyze([a, b], tmp_path / label, report=False, client=client_or_none)
        overlaps = [w for w in result.warnings if "overlaps" in w]
        assert len(overlaps) == 1 and "read as one capture ordered by first packet" in overlaps[0]


def test_flows_dataset_reads_back_as_one_table(client, tmp_path):
    import dask.dataframe as dd
    paths = split(CAPTURES / "syn-flood-ingress-only.pcap", tmp_path / "parts", 3)
    commands.write_flows(paths, tmp_path / "one.parquet")
    commands.write_flows(paths, tmp_path / "set", client=client, dataset=True)
    files = sorted(p.name for p in (tmp_path / "set").iterdir())
    assert files == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    one = pd.read_parquet(tmp_path / "one.parquet")
    by_pandas = pd.read_parquet(tmp_path / "set").sort_values("first_frame", kind="stable").reset_index(drop=True)
    by_dask = dd.read_parquet(str(tmp_path / "set")).compute().sort_values("first_frame").reset_index(drop=True)
    pd.testing.assert_frame_equal(one, by_pandas)
    pd.testing.assert_frame_equal(one, by_dask, check_dtype=False)   # dask reads text as string[pyarrow]
    # each file cut into 2 byte ranges: a Parquet file per range, each flow in the range of its first packet
    commands.write_flows(paths, tmp_path / "ranges", client=client, dataset=True, partitions_per_file=2)
    assert len(list((tmp_path / "ranges").iterdir())) == 6
    by_range = pd.read_parquet(tmp_path / "ranges").sort_values("first_frame", kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(one.drop(columns=CUT_COUNTERS), by_range.drop(columns=CUT_COUNTERS))
    try:
        import duckdb
    except ImportError:
        return
    assert duckdb.sql(f"select count(*) from '{tmp_path / 'set'}/*.parquet'").fetchone()[0] == len(one)


def test_each_with_a_broken_capture(client, tmp_path):
    broken = tmp_path / "<i>broken&.pcap"       # a hostile name: the index escapes it
    broken.write_bytes(b"not a capture" * 4)
    captures = [str(CAPTURES / "scan-port-scan.pcap"), str(broken), str(CAPTURES / "routing-loop-ipv6-vlan.pcap")]
    entries = commands.analyze_each(captures, tmp_path / "out", report=False, client=client)
    assert [e["capture"] for e in entries] == captures
    assert entries[1]["error"].startswith(f"{broken}") and "not a pcap or pcapng" in entries[1]["error"]
    assert entries[0]["worst"]["rule"] == "scan" and entries[2]["worst"]["rule"] == "routing-loop"
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert index["failed"] == 1 and index["analysed"] == 2
    page = (tmp_path / "out" / "index.html").read_text()
    assert "<i>" not in page and "&lt;i&gt;broken&amp;.pcap" in page
    assert 'href="scan-port-scan/findings.json"' in page
    assert (tmp_path / "out" / "scan-port-scan" / "findings.json").exists()
    assert not (tmp_path / "out" / "<i>broken&").exists()


# The two tests below kill workers of the module's cluster: its nannies start others in their place, which the
# tests wait for, so the tests after them find two workers as before.
def test_a_worker_killed_mid_run_is_replaced_and_its_partitions_rerun(client, tmp_path):
    paths = split(CAPTURES / "scan-port-scan.pcap", tmp_path / "parts", 3)
    *_, one = commands.analyze(paths, tmp_path / "one", report=False)
    pids = client.run(os.getpid)
    killed, done = {}, threading.Event()

    def kill_a_folding_worker():
        while not done.is_set():
            for address, keys in client.processing().items():
                if address in pids and any(str(key).startswith("fold-") for key in keys):
                    os.kill(pids[address], signal.SIGKILL)
                    killed[address] = keys
                    return
            time.sleep(0.002)

    killer = threading.Thread(target=kill_a_folding_worker)
    killer.start()
    try:
        *_, many = commands.analyze(paths, tmp_path / "many", report=False, client=client, partitions_per_file=7)
    finally:
        done.set()
        killer.join()
    assert killed, "no worker was killed while folding"
    client.wait_for_workers(2, timeout=60)      # the nanny started another in its place
    assert set(pids.values()) != set(client.run(os.getpid).values())
    assert many.read_text() == one.read_text()


def test_what_every_task_takes_outlives_the_workers_that_held_it(client):
    # the rules and site every fold takes (cluster._shared): every worker holding them killed, the next fold
    # still gets them (Dask computes them again; scattered data, even broadcast, would be lost for good)
    from distributed import wait
    shared = cluster._shared(client, {"scan": load_rules()["scan"]})
    wait(shared)
    pids = client.run(os.getpid)
    holders = set(client.who_has(shared)[shared.key])
    for address in holders:
        os.kill(pids[address], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while set(client.scheduler_info()["workers"]) & holders and time.monotonic() < deadline:
        time.sleep(0.05)
    client.wait_for_workers(2, timeout=60)
    assert client.submit(lambda rules: rules["scan"].id, shared, pure=False).result(timeout=60) == "scan"


def test_a_damaged_capture_among_many_is_one_line(client, tmp_path):
    paths = split(CAPTURES / "scan-port-scan.pcap", tmp_path / "parts", 3)
    damaged = Path(paths[1])
    damaged.write_bytes(b"\xd4\xc3\xb2\xa1" + b"\x09\x00" * 10)     # a pcap header of an unknown version
    with pytest.raises(DetectorError) as alone:
        commands.analyze(paths, tmp_path / "one", report=False)
    with pytest.raises(DetectorError) as cluster_said:
        commands.analyze(paths, tmp_path / "many", report=False, client=client, partitions_per_file=3)
    assert str(cluster_said.value) == str(alone.value) == f"{damaged} at byte 4: unsupported pcap version 9.9"
    assert "\n" not in str(cluster_said.value) and not (tmp_path / "many" / "findings.json").exists()
    proc = run_cli("analyze", *paths, "-o", str(tmp_path / "cli"), "--workers", "2", "--partitions-per-file", "3")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"detector: error: {alone.value}"


def test_damage_in_a_cut_file_warns_as_one_pass(client, tmp_path):
    # the last record cut short: the last byte range reads to the end of the file, so its reader meets the
    # damage at the same byte of the file and says so in the same words
    cut = tmp_path / "cut.pcap"
    cut.write_bytes((CAPTURES / "scan-port-scan.pcap").read_bytes()[:-7])
    _, one, _ = commands.analyze([str(cut)], tmp_path / "one", report=False)
    _, many, _ = commands.analyze([str(cut)], tmp_path / "many", report=False, client=client, partitions_per_file=3)
    assert one.warnings and "capture cut short" in one.warnings[0]
    assert many.warnings == one.warnings and many.captures == one.captures


def test_a_warning_said_once_per_file_is_said_once_across_its_byte_ranges(tmp_path):
    # two packet times past 2262 far apart in a pcapng file: one pass warns at the first only (once per file);
    # cut into 3 byte ranges, the later range that meets the second says nothing either
    from tests.test_ingest import epb, idb, shb
    blocks = [epb(0, (1 << 64) - 1 if i in (5, 290) else 10**15 + i, bytes(range(60))) for i in range(300)]
    path = tmp_path / "times.pcapng"
    path.write_bytes(shb() + idb(1, tsresol=9) + b"".join(blocks))
    rules = load_rules()
    one = analyze_in_process([str(path)], rules)
    many = merged_in_process([str(path)], rules, None, 3)
    assert len(one.warnings) == 1 and "1677-2262" in one.warnings[0]
    assert len(cluster.survey(str(path), 3).ranges) == 3
    assert many.warnings == one.warnings and many.captures == one.captures


def test_a_worker_on_this_machine_that_cannot_open_a_capture_says_why(client, tmp_path):
    # the embedded cluster's workers are this machine's: a missing file is missing, not a shared filesystem's
    # fault (a worker elsewhere names itself: tests/test_each.py)
    missing = str(tmp_path / "gone.pcap")
    extent = client.submit(cluster.count_records, missing, pure=False).result()
    assert extent.error == f"{missing}: no such file"


# ---- the command line ------------------------------------------------------------------------------------------
def run_cli(*args, env=None):
    """The installed program: a cluster's runs go through it as a user's do (flags, environment, the fork
    server it starts); the answers of one process they are compared with run in this process (tests._cli)."""
    return subprocess.run([str(BIN / "detector"), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_each_on_the_command_line_exits_2_when_one_failed(tmp_path):
    broken = tmp_path / "broken.pcap"
    broken.write_bytes(b"\x00" * 40)
    proc = run_cli("analyze", "--each", "--no-report", str(CAPTURES / "scan-port-scan.pcap"), str(broken),
                   "-o", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    assert f"detector: error: {broken}" in proc.stderr and "Traceback" not in proc.stderr
    assert "1 of 2 captures analysed" in proc.stderr


def test_workers_flag_runs_an_embedded_cluster(tmp_path):
    paths = split(CAPTURES / "routing-loop-ipv6-vlan.pcap", tmp_path / "parts", 3)
    one = run_in_process("analyze", "--no-report", *paths, "-o", str(tmp_path / "one"))
    many = run_cli("analyze", "--no-report", *paths, "-o", str(tmp_path / "many"), "--workers", "2")
    assert one.returncode == many.returncode == 0, many.stderr
    assert (tmp_path / "one" / "findings.json").read_text() == (tmp_path / "many" / "findings.json").read_text()
    bad = run_cli("analyze", *paths, "-o", str(tmp_path / "x"), "--workers", "none")
    assert bad.returncode == 2 and "--workers: 'none' is not a number" in bad.stderr
    for flag, env in ((["--partitions-per-file", "0"], None), ([], {"DETECTOR_PARTITIONS_PER_FILE": "many"})):
        bad = run_cli("analyze", *paths, "-o", str(tmp_path / "x"), "--workers", "2", *flag, env=env)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
        assert "--partitions-per-file" in bad.stderr and "is not a number of partitions (1 to 1024" in bad.stderr
    assert not (tmp_path / "x").exists()


def test_files_are_cut_to_keep_every_worker_busy():
    mib = 1 << 20
    # a ring of 8 files of 764 MiB on 2 workers: one partition each; one 1.6 GB file: four
    assert cluster.auto_partitions([764 * mib] * 8, 2) == [1] * 8
    assert cluster.auto_partitions([1600 * mib], 2) == [4]
    assert cluster.auto_partitions([1600 * mib], 16) == [25]       # none under 64 MiB
    assert cluster.auto_partitions([10 * mib, 3000 * mib], 4) == [1, 8]
    assert cluster.auto_partitions([mib] * 3, 2) == [1, 1, 1]


@pytest.fixture()
def dask_cluster(tmp_path):
    """`dask scheduler --port 0` and two `dask worker` processes, started in another folder than the tests'."""
    address_file = tmp_path / "scheduler.json"
    home = tmp_path / "elsewhere"
    home.mkdir()
    procs = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(address_file)], cwd=home,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while not address_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(address_file.read_text())["address"]
        for _ in range(2):
            procs.append(subprocess.Popen([str(BIN / "dask"), "worker", address, "--nthreads", "1",
                                           "--no-dashboard", "--no-nanny"], cwd=home,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        from distributed import Client
        with Client(address) as probe:
            probe.wait_for_workers(2, timeout=60)
        yield address
    finally:
        # one at a time, the workers first: a worker stopped with its scheduler keeps trying to say goodbye to it,
        # and took the 10 s below to be killed
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_scheduler_flag_and_environment_use_an_existing_cluster(dask_cluster, tmp_path):
    whole = tmp_path / "whole.pcapng"
    subprocess.run(["mergecap", "-w", str(whole), str(CAPTURES / "scan-port-scan.pcap"),
                    str(CAPTURES / "syn-flood-ingress-only.pcap")], check=True)
    # relative paths: the workers run in another folder, the client sends where the files are
    paths = [os.path.relpath(p) for p in split(whole, tmp_path / "parts", 4)]
    one = run_in_process("analyze", *paths, "-o", str(tmp_path / "one"))
    many = run_cli("analyze", *paths, "-o", str(tmp_path / "many"), "--scheduler", dask_cluster)
    assert one.returncode == many.returncode == 0, many.stderr
    assert (tmp_path / "one" / "findings.json").read_text() == (tmp_path / "many" / "findings.json").read_text()
    # each file cut into byte ranges that the workers read in another folder (a capture whose merge is exact
    # at those cuts: INEXACT_IN_RANGES)
    scan = [os.path.relpath(p) for p in split(CAPTURES / "scan-port-scan.pcap", tmp_path / "scan", 2)]
    alone = run_in_process("analyze", *scan, "-o", str(tmp_path / "alone"))
    ranges = run_cli("analyze", *scan, "-o", str(tmp_path / "ranges"), "--scheduler", dask_cluster,
                     "--partitions-per-file", "3")
    assert alone.returncode == ranges.returncode == 0, ranges.stderr
    assert (tmp_path / "alone" / "findings.json").read_text() == (tmp_path / "ranges" / "findings.json").read_text()
    flows = run_cli("flows", *paths, "-o", str(tmp_path / "flows.csv"),
                    env={"DETECTOR_SCHEDULER": dask_cluster, "DETECTOR_PARTITIONS_PER_FILE": "3"})
    single = run_in_process("flows", *paths, "-o", str(tmp_path / "single.csv"))
    assert flows.returncode == single.returncode == 0, flows.stderr
    got, want = pd.read_csv(tmp_path / "flows.csv"), pd.read_csv(tmp_path / "single.csv")
    assert len(got) == len(want) > 100
    pd.testing.assert_frame_equal(got.drop(columns=CUT_COUNTERS), want.drop(columns=CUT_COUNTERS))


def test_a_pickled_flow_table_ships_its_rows_only_and_reads_on(tmp_path):
    from detector import engine
    from detector.flows import FlowTable
    first, second = split(CAPTURES / "syn-flood-ingress-only.pcap", tmp_path, 2)
    kept, shipped = FlowTable(), FlowTable()
    engine.run([first], [kept], show_progress=False)
    engine.run([first], [shipped], show_progress=False)
    arrived = pickle.loads(pickle.dumps(shipped))
    assert len(pickle.dumps(shipped)) < len(pickle.dumps(shipped.__dict__))
    frame = 1 + packets_of(first)
    engine.run([second], [kept], first_frame=frame, show_progress=False)
    engine.run([second], [arrived], first_frame=frame, show_progress=False)
    pd.testing.assert_frame_equal(kept.to_frame(), arrived.to_frame())


def test_a_fold_and_an_each_analysis_import_no_pandas(tmp_path):
    # the embedded cluster's fork server leaves pandas out of what it imports before forking the workers
    # (cluster.FORKSERVER_PRELOAD): a worker's fold, and an --each analysis without a report, never need it
    capture = str(CAPTURES / "routing-loop-ipv6-vlan.pcap")
    probe = ("import sys\nfrom detector import cluster\nfrom detector.commands import analyze_one\n"
             "from detector.rules import load_rules\n"
             f"cluster.fold(cluster.Partition({capture!r}, 'x', 0, 1), 'analyze', load_rules())\n"
             f"entry = analyze_one({capture!r}, {str(tmp_path / 'one')!r}, report=False)\n"
             "assert entry['findings'] and entry['error'] is None, entry\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pandas', 'matplotlib')))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    assert "pandas" not in cluster.FORKSERVER_PRELOAD


def test_the_command_line_starts_the_fork_server_before_importing_the_engine(tmp_path):
    # its imports are in front of the first worker: they run beside the command's own only if it starts first
    capture = str(CAPTURES / "routing-loop-ipv6-vlan.pcap")
    probe = ("import sys\nfrom multiprocessing import forkserver\nseen = []\nreal = forkserver.ensure_running\n"
             "def noted():\n    seen.append('detector.engine' in sys.modules)\n    real()\n"
             "forkserver.ensure_running = noted\nfrom detector.cli import main\n"
             f"code = main(['analyze', '--no-report', {capture!r}, '-o', {str(tmp_path / 'o')!r}, '--workers', '1'])\n"
             "print(code, seen[0])")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["0", "False"]


def test_without_dask_the_flag_names_the_extra(tmp_path):
    probe = ("import sys\nsys.modules['distributed'] = None\nfrom detector.cli import main\n"
             f"sys.exit(main(['analyze', {str(CAPTURES / 'scan-port-scan.pcap')!r}, '-o', {str(tmp_path / 'o')!r},"
             " '--workers', '2']))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "detector: error: --workers needs Dask: pip install 'detector[dask]'"
    assert not (tmp_path / "o").exists()


def test_a_terminal_sees_the_partitions_counted(client, tmp_path, monkeypatch):
    import io

    from detector import progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    monkeypatch.setattr(progress, "SHOW_AFTER_S", 0.0)
    monkeypatch.setattr(progress, "REDRAW_EVERY_S", 0.0)
    paths = split(CAPTURES / "scan-port-scan.pcap", tmp_path, 4)
    cluster.flow_table(client, paths)
    shown = screen.getvalue()
    assert "\rflows [" in shown and "100.0%" in shown and "25.0%" in shown
    # the last line drawn stays on screen, complete: every packet of the partitions counted
    last = shown.rsplit("\r", 1)[-1]
    assert last.startswith("flows [") and " 100.0% " in last and last.endswith("\033[K\n"), last

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
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from detector import cluster, commands, ordering
from detector.analysis import analyze as analyze_in_process
from detector.analysis import conclude
from detector.report import findings_document
from detector.rules import load_rules
from detector.site import load_site
from tests.test_manifest import site_file

pytest.importorskip("distributed")

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
MANIFEST = json.loads((CAPTURES / "MANIFEST.json").read_text())["captures"]
BIN = Path(sys.executable).parent

# Bundled captures whose partitioned answer still differs from one pass: a merge that is not exact. The flow
# table's merge redoes a cut connection's tracking from a bounded log (detector/flows/merge.py), exact on every
# bundled capture. The pmtud-blackhole, echo-loop, mss-violation and capture-loss detectors do not carry what they
# watch for across a cut (capture-loss bins each packet's ack event as its part saw it). Strict: a merge made
# exact turns its capture's test red until it leaves this list.
INEXACT = {
    "echo-loop-buried.pcapng", "hostile-markup.pcapng",
    "loss-every-nth-segment.pcap", "loss-mirror-peak.pcap",
    "pmtud-blackhole-busy.pcapng", "pmtud-blackhole-ipv4.pcapng", "pmtud-blackhole-ipv6-vlan.pcapng",
    "tso-host-capture.pcapng",
    # mss-violation's merge loses the segments of a connection cut at a file boundary (medium with 9 segments
    # in one pass, low with 1 from the parts), as on the PMTUD captures above
    "two-incidents-at-once.pcapng",
}
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


def merged_in_process(paths, rules, site):
    """What a cluster computes, without one: scan, fold each partition, ship the state (pickle), merge."""
    extents = [cluster.count_records(p) for p in paths]
    frame, merged, run = 1, None, None
    from detector.engine import RunResult
    run = RunResult()
    for index, extent in enumerate(extents):
        folded = cluster.fold(cluster.Partition(extent.path, extent.path, index, frame), "analyze", rules, site)
        frame += extent.packets
        folded = pickle.loads(pickle.dumps(folded))
        run.captures += folded.captures
        run.warnings += folded.warnings
        merged = folded.state if merged is None else merged.merge(folded.state)
    return conclude(merged.detectors, merged.flows, merged.stats, run)


def document(result) -> str:
    return json.dumps(findings_document(result.captures, {**result.stats.to_json(), "flows": result.flow_count},
                                        result.findings, result.failures), sort_keys=True, default=str)


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"] for e in MANIFEST])
def test_partitions_merge_to_the_answer_of_one_pass(entry, tmp_path):
    paths = split(CAPTURES / entry["file"], tmp_path, 3)
    rules, site = load_rules(), load_site(site_file(entry))
    one = analyze_in_process(paths, rules, site=site)
    many = merged_in_process(paths, rules, site)
    same = document(one) == document(many) and one.flow_table.to_frame().equals(many.flow_table.to_frame())
    if entry["file"] in INEXACT:
        assert not same, f"{entry['file']}: now merges exactly: take it out of INEXACT"
        return
    assert document(one) == document(many)
    pd.testing.assert_frame_equal(one.flow_table.to_frame(), many.flow_table.to_frame())


# ---- a real embedded cluster ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as local, \
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


def test_a_loop_a_black_hole_and_syn_spanning_flows_across_files(client, tmp_path):
    paths = crafted(tmp_path)
    _, one, one_path = commands.analyze(paths, tmp_path / "one")
    _, many, many_path = commands.analyze(paths, tmp_path / "many", client=client)
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
    assert [f for f in b["findings"] if f["rule"] == "routing-loop"] == loops
    # the black hole and the MSS violation are found either way; their counts across a cut are not exact yet
    assert [f["rule"] for f in b["findings"]] == [f["rule"] for f in a["findings"]] \
        == ["routing-loop", "pmtud-blackhole", "mss-violation"]
    pd.testing.assert_frame_equal(flows.drop(columns=CUT_COUNTERS),
                                  many.flow_table.to_frame().drop(columns=CUT_COUNTERS))
    # the evidence pcaps hold the same frames
    assert sorted(p.name for p in (tmp_path / "one" / "evidence").iterdir()) == \
        sorted(p.name for p in (tmp_path / "many" / "evidence").iterdir())


EXACT = ["scan-port-scan.pcap", "syn-flood-ingress-only.pcap", "routing-loop-ipv6-vlan.pcap",
         "ospf-storm-flapping.pcap", "dhcp-rogue-server.pcapng"]


@pytest.mark.parametrize("name", EXACT)
def test_the_cluster_writes_the_findings_of_one_process(client, tmp_path, name):
    paths = split(CAPTURES / name, tmp_path / "parts", 3)
    *_, one = commands.analyze(paths, tmp_path / "one")
    *_, many = commands.analyze(paths, tmp_path / "many", client=client)
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


def test_a_worker_that_cannot_open_a_capture_says_so(client, tmp_path):
    missing = str(tmp_path / "gone.pcap")
    extent = client.submit(cluster.count_records, missing, pure=False).result()
    assert extent.error.startswith(f"{missing}: cannot be opened on worker tcp://")
    assert "same path (a shared filesystem)" in extent.error


# ---- the command line ------------------------------------------------------------------------------------------
def run_cli(*args, env=None):
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
    one = run_cli("analyze", "--no-report", *paths, "-o", str(tmp_path / "one"))
    many = run_cli("analyze", "--no-report", *paths, "-o", str(tmp_path / "many"), "--workers", "2")
    assert one.returncode == many.returncode == 0, many.stderr
    assert (tmp_path / "one" / "findings.json").read_text() == (tmp_path / "many" / "findings.json").read_text()
    bad = run_cli("analyze", *paths, "-o", str(tmp_path / "x"), "--workers", "none")
    assert bad.returncode == 2 and "--workers: 'none' is not a number" in bad.stderr


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
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_scheduler_flag_and_environment_use_an_existing_cluster(dask_cluster, tmp_path):
    whole = tmp_path / "whole.pcapng"
    subprocess.run(["mergecap", "-w", str(whole), str(CAPTURES / "scan-port-scan.pcap"),
                    str(CAPTURES / "syn-flood-ingress-only.pcap")], check=True)
    # relative paths: the workers run in another folder, the client sends where the files are
    paths = [os.path.relpath(p) for p in split(whole, tmp_path / "parts", 4)]
    one = run_cli("analyze", *paths, "-o", str(tmp_path / "one"))
    many = run_cli("analyze", *paths, "-o", str(tmp_path / "many"), "--scheduler", dask_cluster)
    assert one.returncode == many.returncode == 0, many.stderr
    assert (tmp_path / "one" / "findings.json").read_text() == (tmp_path / "many" / "findings.json").read_text()
    flows = run_cli("flows", *paths, "-o", str(tmp_path / "flows.csv"), env={"DETECTOR_SCHEDULER": dask_cluster})
    single = run_cli("flows", *paths, "-o", str(tmp_path / "single.csv"))
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
    assert shown.endswith("\r\033[K")       # the line is cleared at the end

"""The command line on real bytes: exit codes, outputs, and one-line errors for bad input."""
from __future__ import annotations

import gzip
import io
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from scapy.all import ICMP, IP, TCP, UDP, Ether, Raw, wrpcap

from detector.schema import LINKTYPE_NAMES
from tests._cli import run_in_process


def run_cli(*args, cwd=None):
    """The command line in this process (tests._cli); `watch`, which captures until it is stopped, in its own."""
    if args and args[0] == "watch":
        return run_program(*args, cwd=cwd)
    return run_in_process(*args, cwd=cwd)


def run_program(*args, cwd=None):
    """`python -m detector` in a process of its own: the program's own exit status and output."""
    return subprocess.run([sys.executable, "-m", "detector", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


CAPTURES = Path(__file__).resolve().parents[1] / "captures"


def run_piped(data: bytes, *args, env=None, preexec_fn=None):
    """The command line with `data` on its standard input (a pipe); stdout and stderr as text."""
    proc = subprocess.run([sys.executable, "-m", "detector", *map(str, args)], input=data,
                          capture_output=True, timeout=300, env=env, preexec_fn=preexec_fn)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def assert_one_line_error(proc, *fragments):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture
def small_pcap(tmp_path):
    """A TCP handshake + data + close, one DNS exchange, one ping: 3 flows, 11 packets."""
    a, b = "10.0.0.1", "192.0.2.80"
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    eth_r = Ether(src="02:00:00:00:00:02", dst="02:00:00:00:00:01")
    pkts = [
        eth / IP(src=a, dst=b) / TCP(sport=40000, dport=80, flags="S", seq=100, options=[("MSS", 1460)]),
        eth_r / IP(src=b, dst=a) / TCP(sport=80, dport=40000, flags="SA", seq=500, ack=101,
                                       options=[("MSS", 1400)]),
        eth / IP(src=a, dst=b) / TCP(sport=40000, dport=80, flags="A", seq=101, ack=501),
        eth / IP(src=a, dst=b) / TCP(sport=40000, dport=80, flags="PA", seq=101, ack=501)
        / Raw(b"GET / HTTP/1.0\r\n\r\n"),
        eth_r / IP(src=b, dst=a) / TCP(sport=80, dport=40000, flags="FA", seq=501, ack=119),
        eth / IP(src=a, dst=b) / TCP(sport=40000, dport=80, flags="FA", seq=119, ack=502),
        eth_r / IP(src=b, dst=a) / TCP(sport=80, dport=40000, flags="A", seq=502, ack=120),
        eth / IP(src=a, dst="192.0.2.53") / UDP(sport=5353, dport=53) / Raw(b"\x12\x34" + b"\x00" * 10),
        eth_r / IP(src="192.0.2.53", dst=a) / UDP(sport=53, dport=5353) / Raw(b"\x12\x34" + b"\x80" * 10),
        eth / IP(src=a, dst=b) / ICMP(type=8, id=7, seq=1),
        eth_r / IP(src=b, dst=a) / ICMP(type=0, id=7, seq=1),
    ]
    for i, p in enumerate(pkts):
        p.time = 1_700_000_000 + i * 0.01
    path = tmp_path / "small.pcap"
    wrpcap(str(path), pkts)
    return path


def test_info_text_and_json(small_pcap):
    proc = run_cli("info", small_pcap)
    assert proc.returncode == 0, proc.stderr
    assert "Packets:       11" in proc.stdout
    assert "ether (11)" in proc.stdout
    assert "2023-11-14T22:13:20.000000Z" in proc.stdout

    proc = run_cli("info", small_pcap, "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert {"file", "packets", "bytes", "first_seen", "last_seen", "linktypes", "warnings", "error"} <= set(record)
    assert record["packets"] == 11
    assert record["linktypes"] == {"ether": 11}
    assert record["error"] is None
    assert record["last_seen"] == "2023-11-14T22:13:20.100000Z"


def _capinfos(capinfos: str, path: Path) -> tuple[list[tuple], bool] | None:
    """capinfos' interfaces (name or None, short encapsulation name, capture length, packets) and strict time
    order of one file; None where capinfos refuses the file."""
    proc = subprocess.run([capinfos, "-M", str(path)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return None
    interfaces = []
    for block in re.split(r"^Interface #\d+ info:\n", proc.stdout, flags=re.M)[1:]:
        fields = dict(re.findall(r"^\s+(\w[\w -]*?) = (.*)$", block, flags=re.M))
        name = fields.get("Name", "-")
        interfaces.append((None if name == "-" else name, re.search(r"\(-?\d+ - ([\w-]+)\)$",
                           fields["Encapsulation"]).group(1), int(fields["Capture length"]),
                           int(fields["Number of packets"])))
    strict = re.search(r"^Strict time order:\s+(True|False)$", proc.stdout, flags=re.M).group(1) == "True"
    return interfaces, strict


def test_info_lists_interfaces_and_time_order_as_capinfos_does(captures_real, tshark):
    """Every bundled capture, and real pcapngs of 2 and 126 interfaces (Windows and Linux names, loopback, Linux
    cooked, an unnamed link type): the same interfaces, snap lengths, packets per interface and time order as
    capinfos; where time runs backwards, the steps and the first frame are tshark's negative frame.time_delta."""
    capinfos = shutil.which("capinfos")
    assert capinfos, "capinfos is missing (Debian package wireshark-common, a dependency of tshark)"
    real = [captures_real / name for name in (
        "zeek/testing/btest/Traces/ldap/gap-data-missing.pcapng", "zeek/testing/btest/Traces/snap-arp.pcapng",
        "ndpi/tests/cfgs/default/pcap/knxip.pcapng", "ndpi/tests/cfgs/default/pcap/openwire.pcapng")]
    paths = sorted(CAPTURES.glob("*.pcap*")) + real
    proc = run_cli("info", "--json", *paths)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["file"] for r in records] == [str(p) for p in paths]
    backwards = []
    for path, record in zip(paths, records):
        interfaces, strict = _capinfos(capinfos, path)
        assert [(i["name"] if i["name"] != "-" else None,
                 i["linktype_name"] if i["linktype"] in LINKTYPE_NAMES else encapsulation,
                 i["snaplen"], i["packets"]) for i, (_, encapsulation, _, _) in zip(record["interfaces"], interfaces)] \
            == interfaces, path
        assert sum(i["packets"] for i in record["interfaces"]) == record["packets"]
        assert record["time_order"]["strict"] == strict, path
        if not strict:
            steps = [int(row[0]) for row in tshark.fields(path, "frame.number", display_filter="frame.time_delta < 0")]
            order = record["time_order"]
            assert (order["backwards"], order["first_frame"]) == (len(steps), steps[0]), path
            backwards.append(path.name)
    assert len(records[-4]["interfaces"]) == 126 and "knxip.pcapng" in backwards and len(backwards) >= 3
    # the text says it too, on one line per interface, names made safe for a terminal
    text = run_cli("info", real[2]).stdout
    assert "Time order:    runs backwards 1 time: first at frame 3, by up to 83486911.771117 s\n" in text
    assert "Interface 0:   enp6s0, ether (link type 1), snap length 262,144, 2 packets\n" in text
    assert "Interface 1:   \\Device\\NPF_{3E58F396-95FB-40D4-B895-E4898F0F3206}, ether (link type 1), " \
           "snap length 262,144, 1 packet\n" in text


def test_info_puts_damage_first_and_escapes_interface_names(tmp_path):
    from tests.test_ingest import epb, idb, shb
    frame = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP() / UDP())
    data = shb() + idb(name="eth0\x1b[2J\x07", snaplen=96) + epb(0, 1, frame) + epb(0, 2, frame)
    path = tmp_path / "cut.pcapng"
    path.write_bytes(data[:-10])
    proc = run_cli("info", path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    warning = f"Warning:       {path} at byte {len(data) - len(epb(0, 2, frame))}: "
    assert lines[2].startswith(warning) and "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    assert "Interface 0:   eth0\\x1b[2J\\x07, ether (link type 1), snap length 96, 1 packet" in lines
    assert json.loads(run_cli("info", "--json", path).stdout)["interfaces"][0]["name"] == "eth0\x1b[2J\x07"


def test_info_broken_file_reports_and_others_still_print(small_pcap, tmp_path):
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"this is not a capture at all" * 4)
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    missing = tmp_path / "missing.pcap"
    proc = run_cli("info", "--json", junk, small_pcap, empty, missing)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["file"] for r in records] == [str(junk), str(small_pcap), str(empty), str(missing)]
    assert all(set(r) == set(records[1]) for r in records)
    assert records[0]["error"] and str(junk) in records[0]["error"]
    assert records[1]["error"] is None and records[1]["packets"] == 11
    assert records[2]["error"] and str(empty) in records[2]["error"]
    assert "no such file" in records[3]["error"]
    # each error is one line on stderr, naming its file; stdout holds only the records
    assert proc.stderr.splitlines() == [f"detector: error: {r['error']}" for r in records if r["error"]]
    text = run_cli("info", junk, small_pcap, missing)
    assert text.returncode == 2
    assert text.stdout.startswith(f"File:          {small_pcap}\n") and text.stdout.count("File:") == 1
    assert "rror" not in text.stdout
    assert text.stderr.splitlines() == [f"detector: error: {records[0]['error']}",
                                        f"detector: error: {records[3]['error']}"]


def test_info_of_a_capture_damaged_before_its_first_packet(small_pcap, tmp_path):
    # a cut inside the first record: a valid pcap of 0 packets, with a warning at the record's offset
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(small_pcap.read_bytes()[:24 + 20])
    proc = run_cli("info", "--json", cut)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert (record["format"], record["packets"], record["error"]) == ("pcap", 0, None)
    assert record["warnings"] == [f"{cut} at byte 24: capture cut short: 20 bytes of an incomplete last record"]
    # a header that fails after its magic: an error, and the format the magic named
    bad = tmp_path / "bad.pcapng"
    bad.write_bytes(b"\x0a\x0d\x0d\x0a" + b"\x1c\0\0\0" + b"\xff" * 20)
    proc = run_cli("info", "--json", bad)
    assert proc.returncode == 2
    record = json.loads(proc.stdout)
    assert record["format"] == "pcapng" and record["packets"] == 0
    assert record["error"] == f"{bad} at byte 8: section header block has no valid byte-order magic"
    assert proc.stderr == f"detector: error: {record['error']}\n"


def test_flows_csv_and_parquet(small_pcap, tmp_path):
    out = tmp_path / "flows.csv"
    proc = run_cli("flows", small_pcap, "-o", out)
    assert proc.returncode == 0, proc.stderr
    flows = pd.read_csv(out)
    assert len(flows) == 3
    tcp = flows[flows.proto == "tcp"].iloc[0]
    assert (tcp.src_ip, tcp.src_port, tcp.dest_ip, tcp.dest_port) == ("10.0.0.1", 40000, "192.0.2.80", 80)
    assert (tcp.src2dst_packets, tcp.dst2src_packets) == (4, 3)
    assert (tcp.src_mss, tcp.dest_mss) == (1460, 1400)
    assert tcp.state == "SF"
    assert set(flows.proto) == {"tcp", "udp", "icmp"}
    assert dict(zip(flows.proto, flows.ip_proto)) == {"tcp": 6, "udp": 17, "icmp": 1}

    pq = tmp_path / "flows.parquet"
    proc = run_cli("flows", small_pcap, "-o", pq)
    assert proc.returncode == 0, proc.stderr
    again = pd.read_parquet(pq)
    assert sorted(again.community_id) == sorted(flows.community_id)


def test_flows_proto_is_a_name_and_ip_proto_the_number(tmp_path, tshark):
    """One vocabulary: `proto` holds the packets table's names only (empty where a protocol has none), and
    `ip_proto` every flow's IANA number, as tshark's ip.proto / ipv6.nxt read it."""
    from scapy.all import IPv6
    eth = Ether(src="02:00:00:00:00:01", dst="01:00:5e:00:00:0d")
    pkts = [eth / IP(src="10.0.0.1", dst="224.0.0.13", proto=103) / Raw(b"\x20\x00" + bytes(30)),    # PIM
            eth / IP(src="10.0.0.1", dst="224.0.0.22", proto=2) / Raw(bytes(8)),                      # IGMP
            eth / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=40000, dport=80, flags="S"),
            eth / IPv6(src="2001:db8::1", dst="2001:db8::2", nh=132) / Raw(bytes(12)),              # SCTP
            eth / IPv6(src="2001:db8::1", dst="2001:db8::2", nh=47) / Raw(bytes(4))]                # GRE
    capture = tmp_path / "protocols.pcap"
    wrpcap(str(capture), pkts)
    proc = run_cli("flows", capture, "-o", "-")
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.splitlines()
    columns = header.split(",")
    fields = [dict(zip(columns, row.split(","))) for row in rows]
    assert [(f["proto"], f["ip_proto"]) for f in fields] == [("", "103"), ("", "2"), ("tcp", "6"), ("sctp", "132"),
                                                             ("", "47")]
    oracle = [row[0] or row[1] for row in tshark.fields(capture, "ip.proto", "ipv6.nxt")]
    assert [f["ip_proto"] for f in fields] == oracle
    frame = pd.read_csv(io.StringIO(proc.stdout))
    assert frame.proto.isna().tolist() == [True, True, False, False, True]
    assert frame.ip_proto.tolist() == [103, 2, 6, 132, 47]


def test_flows_several_files_are_one_capture(small_pcap, tmp_path):
    from scapy.all import rdpcap
    pkts = rdpcap(str(small_pcap))
    first, second = tmp_path / "ring_00001.pcap", tmp_path / "ring_00002.pcap"
    wrpcap(str(first), pkts[:3])
    wrpcap(str(second), pkts[3:])
    out = tmp_path / "flows.csv"
    proc = run_cli("flows", first, second, "-o", out)
    assert proc.returncode == 0, proc.stderr
    flows = pd.read_csv(out)
    tcp = flows[flows.proto == "tcp"]
    assert len(tcp) == 1 and int(tcp.src2dst_packets.iloc[0] + tcp.dst2src_packets.iloc[0]) == 7


def test_flows_bad_usage(small_pcap, tmp_path):
    assert_one_line_error(run_cli("flows", small_pcap, "-o", tmp_path / "flows.txt"), ".csv or .parquet")
    assert_one_line_error(run_cli("flows", tmp_path / "nope.pcap", "-o", tmp_path / "f.csv"), "nope.pcap")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_one_line_error(run_cli("flows", small_pcap, "-o", blocker / "sub" / "f.csv"), "error")


def test_truncated_capture_keeps_packets_and_warns(small_pcap, tmp_path):
    data = small_pcap.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:-5])            # last record cut short
    out = tmp_path / "flows.csv"
    proc = run_cli("flows", cut, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "cut.pcap at byte" in proc.stderr
    flows = pd.read_csv(out)
    assert int((flows.src2dst_packets + flows.dst2src_packets).sum()) == 10


def test_analyze_writes_findings_json(small_pcap, tmp_path):
    out = tmp_path / "report"
    proc = run_cli("analyze", small_pcap, "-o", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "findings.json").read_text())
    assert doc["version"] == 1
    assert set(doc) == {"version", "captures", "capture_quality", "stats", "incidents", "findings", "failures"}
    assert doc["failures"] == []
    assert doc["captures"][0]["file"] == str(small_pcap)
    assert doc["captures"][0]["packets"] == 11
    assert doc["stats"]["packets"] == 11 and doc["stats"]["flows"] == 3
    assert isinstance(doc["findings"], list) and len(doc["incidents"]) <= len(doc["findings"])


def test_analyze_bad_fail_on_and_garbage_input(small_pcap, tmp_path):
    assert_one_line_error(run_cli("analyze", small_pcap, "-o", tmp_path / "r", "--fail-on", "urgent"), "urgent")
    junk = tmp_path / "junk.pcapng"
    junk.write_bytes(b"\x0a\x0d\x0d\x0a" + b"\xff" * 40)
    proc = run_cli("analyze", junk, "-o", tmp_path / "r2")
    assert_one_line_error(proc, "junk.pcapng")
    assert not (tmp_path / "r2" / "findings.json").exists()


def test_version_is_the_installed_packages():
    from importlib.metadata import version
    proc = run_program("--version")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"detector {version('detector')}\n", "")


def test_severities_are_read_in_any_case(tmp_path):
    capture = CAPTURES / "pmtud-blackhole-ipv4.pcapng"       # one high finding, one medium
    proc = run_cli("analyze", capture, "-o", tmp_path / "r", "--no-report", "--fail-on", "HIGH")
    assert proc.returncode == 3, proc.stderr
    proc = run_cli("analyze", capture, "-o", tmp_path / "r", "--no-report", "--fail-on", "Critical")
    assert proc.returncode == 0, proc.stderr
    wrong = run_cli("analyze", capture, "-o", tmp_path / "r", "--fail-on", "urgent")
    assert_one_line_error(wrong, "--fail-on: unknown severity 'urgent'", "info, low, medium, high, critical")
    wrong = run_cli("watch", "lo", "-o", tmp_path / "w", "--alert-severity", "HIGHEST")
    assert_one_line_error(wrong, "--alert-severity: unknown severity 'HIGHEST'", "info, low, medium, high, critical")


def test_flows_to_standard_output_as_tshark_and_zeek_cut_write(small_pcap, tmp_path):
    out = tmp_path / "flows.csv"
    assert run_cli("flows", small_pcap, "-o", out).returncode == 0
    # truncated: a warning, which must go to stderr with the count, never into the CSV
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(small_pcap.read_bytes()[:-5])
    assert run_cli("flows", cut, "-o", tmp_path / "cut.csv").returncode == 0
    for capture, file in ((small_pcap, out), (cut, tmp_path / "cut.csv")):
        for args in (("-o", "-"), ()):
            proc = subprocess.run([sys.executable, "-m", "detector", "flows", capture, *args],
                                  capture_output=True, timeout=300)
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout == file.read_bytes()
            assert proc.stderr.decode().splitlines()[-1] == \
                   f"{len(pd.read_csv(file)):,} flows written to standard output"
    assert "cut.pcap at byte" in proc.stderr.decode()


def test_usage_errors_exit_2():
    proc = run_program("frobnicate")
    assert proc.returncode == 2
    proc = run_program()
    assert proc.returncode == 2


def test_analyze_no_report_writes_findings_only(tmp_path):
    capture = Path(__file__).resolve().parents[1] / "captures" / "echo-loop-rip-ipv4.pcapng"
    full, bare = tmp_path / "full", tmp_path / "bare"
    assert run_cli("analyze", capture, "-o", full).returncode == 0
    proc = run_cli("analyze", capture, "-o", bare, "--no-report")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in bare.iterdir()) == ["findings.json", "findings.jsonl"]
    assert (full / "report.html").exists() and (full / "evidence").is_dir()
    with_report = json.loads((full / "findings.json").read_text())["findings"]
    without = json.loads((bare / "findings.json").read_text())["findings"]
    assert [(f["rule"], f["severity"], f["n"]) for f in without] == \
           [(f["rule"], f["severity"], f["n"]) for f in with_report]
    loop = next(f for f in without if f["rule"] == "echo-loop")
    # the frame is shown decoded, not as "N bytes of link type 1"
    assert loop["evidence"]["frame"].startswith("Ether / IP / UDP 198.18.44.201:44123 > 192.0.2.61")


def test_analyze_builds_the_flow_frame_only_for_findings_that_read_it(tmp_path):
    """pandas and the flow DataFrame cost half a second of every analysis: a capture whose findings never
    consult the flow table, or read it as numbers (AnalysisContext.flow_columns), must not load them; one whose
    findings read its text does."""
    captures = Path(__file__).resolve().parents[1] / "captures"
    probe = ("import sys\nfrom detector.cli import main\n"
             "code = main(['analyze', '--no-report', sys.argv[1], '-o', sys.argv[2]])\n"
             "print(code, 'pandas' in sys.modules)")
    quiet = subprocess.run([sys.executable, "-c", probe, captures / "benign-office.pcapng", tmp_path / "q"],
                           capture_output=True, text=True, timeout=300)
    assert quiet.stdout.split()[-2:] == ["0", "False"], quiet.stderr
    # capture-loss names its worst flows and mss-violation its flow's Community ID from the table's numbers
    for name, rule, field in (("loss-every-nth-segment.pcap", "capture-loss", "worst_flows"),
                              ("tso-host-capture.pcapng", "mss-violation", None)):
        numbers = subprocess.run([sys.executable, "-c", probe, captures / name, tmp_path / name], capture_output=True,
                                 text=True, timeout=300)
        assert numbers.stdout.split()[-2:] == ["0", "False"], (name, numbers.stderr)
        found = [f for f in json.loads((tmp_path / name / "findings.json").read_text())["findings"]
                 if f["rule"] == rule]
        assert found and all(f["evidence"][field] if field else f["community_id"] for f in found), name
    # nor does the report, whose figures read the table's numbers too
    reported = subprocess.run([sys.executable, "-c", probe.replace("'--no-report', ", ""),
                               captures / "loss-every-nth-segment.pcap", tmp_path / "r"],
                              capture_output=True, text=True, timeout=300)
    assert reported.stdout.split()[-2:] == ["0", "False"], reported.stderr
    assert re.search(r'alt="Top \d+ talkers"', (tmp_path / "r" / "report.html").read_text())
    blackhole = subprocess.run([sys.executable, "-c", probe, captures / "pmtud-blackhole-ipv4.pcapng",
                                tmp_path / "b"], capture_output=True, text=True, timeout=300)
    assert blackhole.stdout.split()[-2:] == ["0", "True"], blackhole.stderr
    found = json.loads((tmp_path / "b" / "findings.json").read_text())["findings"]
    blackholes = [f for f in found if f["rule"] == "pmtud-blackhole"]
    assert blackholes and blackholes[0]["evidence"]["affected_flows"]


# ---- standard input ---------------------------------------------------------
STDIN_SAMPLE = "zeek/testing/btest/Traces/ldap/gap-data-missing.pcapng"


def test_info_and_flows_read_standard_input_like_the_file(captures_real, tmp_path):
    capture = captures_real / STDIN_SAMPLE
    data = capture.read_bytes()
    by_path = json.loads(run_cli("info", "--json", capture).stdout)
    assert by_path["packets"] > 0
    for payload, compression in ((data, None), (gzip.compress(data), "gzip")):
        proc = run_piped(payload, "info", "--json", "-")
        assert proc.returncode == 0, proc.stderr
        piped = json.loads(proc.stdout)
        assert piped == {**by_path, "file": "<stdin>", "compression": compression}
    text = run_piped(data, "info", "-")
    assert text.returncode == 0 and text.stdout.startswith("File:          <stdin>\n")

    assert run_cli("flows", capture, "-o", tmp_path / "file.csv").returncode == 0
    proc = run_piped(data, "flows", "-", "-o", tmp_path / "pipe.csv")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "pipe.csv").read_bytes() == (tmp_path / "file.csv").read_bytes()


def test_analyze_reads_standard_input_twice_through_a_temporary_copy(tmp_path):
    # findings whose evidence does not depend on where batches end (a pipe gives smaller ones):
    # echo-loop's and rss-saturation's evidence frames do, see the detectors
    capture = CAPTURES / "pmtud-blackhole-ipv4.pcapng"
    spool = tmp_path / "tmpdir"
    spool.mkdir()
    env = {**os.environ, "TMPDIR": str(spool)}
    assert run_cli("analyze", capture, "-o", tmp_path / "file").returncode == 0
    # outputs go through the output folder as a file's do: a link placed at an output's name is replaced
    victim = tmp_path / "victim.html"
    victim.write_text("precious\n")
    (tmp_path / "pipe").mkdir()
    (tmp_path / "pipe" / "report.html").symlink_to(victim)
    # compressed on the pipe: the copy holds the bytes as they came, and the report pass decompresses again
    proc = run_piped(gzip.compress(capture.read_bytes()), "analyze", "-", "-o", tmp_path / "pipe", env=env)
    assert proc.returncode == 0, proc.stderr
    file_doc = json.loads((tmp_path / "file" / "findings.json").read_text())
    pipe_doc = json.loads((tmp_path / "pipe" / "findings.json").read_text())
    assert pipe_doc["captures"] == [{**file_doc["captures"][0], "file": "<stdin>", "compression": "gzip"}]
    assert pipe_doc["stats"] == file_doc["stats"]
    for finding in file_doc["findings"]:
        assert finding["evidence"]["pcap_filename"] == str(capture)
        finding["evidence"]["pcap_filename"] = "<stdin>"
    assert pipe_doc["findings"] == file_doc["findings"] and len(pipe_doc["findings"]) == 2
    # the second pass found the same packets: the evidence pcaps are byte for byte the same
    evidence = sorted(p.name for p in (tmp_path / "file" / "evidence").iterdir())
    assert evidence and sorted(p.name for p in (tmp_path / "pipe" / "evidence").iterdir()) == evidence
    for name in evidence:
        assert (tmp_path / "pipe" / "evidence" / name).read_bytes() == \
               (tmp_path / "file" / "evidence" / name).read_bytes()
    assert "<stdin>" in (tmp_path / "pipe" / "findings.jsonl").read_text()
    assert not (tmp_path / "pipe" / "report.html").is_symlink() and (tmp_path / "pipe" / "report.html").is_file()
    assert victim.read_text() == "precious\n"
    # the copy never had a name in TMPDIR, and nothing is left there
    assert list(spool.iterdir()) == []


def test_analyze_stops_with_one_line_when_the_copy_cannot_be_written(tmp_path):
    # a file size limit makes writing the copy fail as a full disk would (EFBIG instead of ENOSPC)
    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    data = (CAPTURES / "echo-loop-rip-ipv4.pcapng").read_bytes()
    assert len(data) > 300_000
    out = tmp_path / "out"
    proc = run_piped(data, "analyze", "-", "-o", out, preexec_fn=small_files)
    assert_one_line_error(proc, "<stdin>: cannot keep a copy of the capture for the report pass",
                          "File too large", "--no-report")
    assert not (out / "findings.json").exists()
    # without the report pass nothing is copied
    proc = run_piped(data, "analyze", "-", "-o", out, "--no-report", preexec_fn=small_files)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "findings.json").read_text())["captures"][0]["file"] == "<stdin>"


def test_standard_input_misuse_is_a_usage_error(small_pcap, tmp_path):
    data = small_pcap.read_bytes()
    for args in (("info", "-", "-"), ("flows", "-", small_pcap, "-", "-o", tmp_path / "f.csv"),
                 ("analyze", "-", "-", "-o", tmp_path / "r")):
        assert_one_line_error(run_piped(data, *args), "standard input can be named only once")
    assert not (tmp_path / "f.csv").exists() and not (tmp_path / "r").exists()
    # a terminal on standard input: refused, instead of waiting for a capture that is not coming
    controller, terminal = os.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "detector", "info", "-"], stdin=terminal,
                              capture_output=True, text=True, timeout=300)
    finally:
        os.close(controller)
        os.close(terminal)
    assert_one_line_error(proc, "standard input is a terminal")
    # not a capture on the pipe: the usual one-line error, naming <stdin>
    assert_one_line_error(run_piped(b"not a capture", "flows", "-", "-o", tmp_path / "g.csv"),
                          "<stdin> at byte 0: not a pcap or pcapng capture")


@pytest.mark.parametrize("command", [["info"], ["flows"], ["analyze", "-o", "OUT"]], ids=lambda c: c[0])
def test_a_capture_that_cannot_be_opened_is_said_as_what_it_is(tmp_path, command):
    # a loop of symbolic links is no missing file (ELOOP), a link to a missing file is a link, a folder no capture
    loop, other = tmp_path / "loop-a", tmp_path / "loop-b"
    os.symlink(other, loop)
    os.symlink(loop, other)
    dangling = tmp_path / "dangling.pcap"
    os.symlink(tmp_path / "removed.pcap", dangling)
    folder = tmp_path / "folder"
    folder.mkdir()
    out = tmp_path / "out"
    args = [str(out) if a == "OUT" else a for a in command]
    for path, says in ((loop, f"detector: error: {loop}: symbolic link loop"),
                       (dangling, f"detector: error: {dangling}: symbolic link to a missing file "
                                  f"({tmp_path / 'removed.pcap'})"),
                       (folder, f"detector: error: {folder}: is a folder, not a capture file"),
                       (tmp_path / "absent.pcap", f"detector: error: {tmp_path / 'absent.pcap'}: no such file")):
        proc = run_cli(*args, path)
        assert_one_line_error(proc)
        assert proc.stderr.strip() == says
        assert proc.stdout == "" and not out.exists()

"""`detector analyze --each` (a fuzz campaign: many unrelated captures) tells damage as a single analyze does.

A capture read up to damage once stood in index.json and index.html as clean (its packets, `"error": null`,
no byte offset) and said nothing on stderr: its warning was only in its own findings.json. Each capture here
is crafted (a real capture cut short, a pcapng block naming an interface never described) and its damage
offset found by walking the bytes independently of the reader; what the index, the page and stderr say is
asserted line for line. Files that cannot be opened (missing, a loop of symbolic links) are said in the words
that are true on this machine, with or without an embedded cluster.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from detector import cluster, commands
from tests.test_ingest import epb, idb, shb

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
SCAN = CAPTURES / "scan-port-scan.pcap"
BIN = Path(sys.executable).parent


def last_record_offset(data: bytes) -> tuple[int, int]:
    """(byte offset of the last record, records) of a little-endian classic pcap, walked by its lengths."""
    offset, records, last = 24, 0, None
    while offset < len(data):
        last = offset
        offset += 16 + struct.unpack_from("<I", data, offset + 8)[0]
        records += 1
    assert offset == len(data)
    return last, records


@pytest.fixture
def damaged(tmp_path):
    """A capture cut 7 bytes short of its end (hostile name), and a pcapng whose second packet block names an
    interface never described: (paths, byte offsets of their damage, packets read before it, the warnings)."""
    data = SCAN.read_bytes()
    last, records = last_record_offset(data)
    cut = tmp_path / "<b>cut&.pcap"
    cut.write_bytes(data[:-7])
    blocks = [shb(), idb(1), epb(0, 10**15, bytes(60)), epb(1, 10**15 + 1, bytes(60)), epb(0, 10**15 + 2, bytes(60))]
    orphan = tmp_path / "orphan.pcapng"
    orphan.write_bytes(b"".join(blocks))
    offsets = [last, sum(map(len, blocks[:3]))]
    said = [f"{cut} at byte {last}: capture cut short: {len(data) - 7 - last} bytes of an incomplete last record",
            f"{orphan} at byte {offsets[1]}: packet block names interface 1, not described in this section"]
    return [str(cut), str(orphan)], offsets, [records - 1, 1], said


def test_a_damaged_capture_is_never_clean(damaged, tmp_path):
    paths, offsets, packets, said = damaged
    broken = tmp_path / "broken.pcap"
    broken.write_bytes(b"not a capture" * 4)
    entries = commands.analyze_each([*paths, str(SCAN), str(broken)], tmp_path / "out", report=False)
    assert [e["status"] for e in entries] == ["damaged", "damaged", "clean", "failed"]
    assert [e["packets"] for e in entries] == [*packets, records_of(SCAN), None]
    assert entries[0]["warnings"] == [{"message": said[0], "byte": offsets[0]}]
    assert entries[1]["warnings"] == [{"message": said[1], "byte": offsets[1]}]
    assert entries[2]["warnings"] == [] and entries[0]["error"] is None and entries[3]["warnings"] == []
    # the index says what each capture's own findings.json says
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert (index["analysed"], index["damaged"], index["failed"]) == (3, 2, 1)
    assert index["captures"] == entries
    own = json.loads((tmp_path / "out" / "orphan" / "findings.json").read_text())
    assert [w["message"] for w in entries[1]["warnings"]] == own["captures"][0]["warnings"]
    page = (tmp_path / "out" / "index.html").read_text()
    assert "<p>4 captures, 1 failed, 2 damaged</p>" in page
    assert "<b>" not in page
    escaped = "&lt;b&gt;cut&amp;.pcap"
    row = (f'<tr class="damaged"><td>{tmp_path}/{escaped}</td><td>damaged</td><td class=n>{packets[0]}</td>'
           f"<td class=n>1</td><td>low</td><td>warning: {tmp_path}/{escaped}{said[0][len(paths[0]):]}<br>scan: ")
    assert row in page
    assert f'<tr class="clean"><td>{SCAN}</td><td>clean</td>' in page
    assert f'<tr class="failed"><td>{broken}</td><td>failed</td>' in page


def records_of(path) -> int:
    return last_record_offset(Path(path).read_bytes())[1]


def run_cli(*args):
    return subprocess.run([str(BIN / "detector"), *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]], ids=["here", "embedded-cluster"])
def test_the_command_line_says_each_warning_and_what_is_true_here(damaged, tmp_path, workers):
    paths, offsets, _, said = damaged
    missing = str(tmp_path / "gone.pcap")
    loop = tmp_path / "loop-a"
    os.symlink(tmp_path / "loop-b", loop)
    os.symlink(loop, tmp_path / "loop-b")
    proc = run_cli("analyze", "--each", "--no-report", paths[0], str(SCAN), missing, str(loop), paths[1],
                   "-o", str(tmp_path / "out"), *workers)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-5:] == [      # after the kernels' first-run notice, if any
        f"detector: warning: {said[0]}",
        f"detector: error: {missing}: no such file",
        f"detector: error: {loop}: symbolic link loop",
        f"detector: warning: {said[1]}",
        f"3 of 5 captures analysed into {tmp_path / 'out'} (index.html), 2 damaged (the warnings above)",
    ]
    assert proc.stdout.splitlines() == [f"{paths[0]}: damaged low       scan", f"{SCAN}: clean   low       scan",
                                        f"{missing}: failed", f"{loop}: failed", f"{paths[1]}: damaged no finding"]
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert [c["status"] for c in index["captures"]] == ["damaged", "clean", "failed", "failed", "damaged"]
    assert [w["byte"] for c in index["captures"] for w in c["warnings"]] == offsets


def test_a_worker_elsewhere_names_itself_and_what_every_worker_needs(monkeypatch, tmp_path):
    missing = tmp_path / "gone.pcap"
    try:
        open(missing, "rb")
    except OSError as exc:
        error = exc
    for address, said in (("tcp://127.0.0.1:40123", f"{missing}: no such file"),
                          ("tcp://[::1]:40123", f"{missing}: no such file"),
                          ("tcp://localhost:40123", f"{missing}: no such file"),
                          ("tcp://10.1.2.3:40123", f"{missing}: no such file on worker tcp://10.1.2.3:40123: every "
                                                   "worker must see the captures at the same path (a shared "
                                                   "filesystem)"),
                          ("tls://capture-store:8786", f"{missing}: no such file on worker tls://capture-store:8786: "
                                                       "every worker must see the captures at the same path (a "
                                                       "shared filesystem)")):
        monkeypatch.setattr(cluster, "_worker", lambda address=address: address)
        assert cluster.unopenable(missing, error) == said

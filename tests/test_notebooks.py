"""Every notebook in notebooks/ runs top to bottom without an error, and is committed with its outputs stripped;
the triage notebook also runs on captures a user brings (its first cell names the capture, nothing else)."""
from __future__ import annotations

import ast
import gzip
import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbformat is in the test extra: run `make venv`")
nbclient = pytest.importorskip("nbclient", reason="nbclient is in the test extra: run `make venv`")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TRIAGE = ROOT / "notebooks" / "triage.ipynb"
# what each notebook must print on the capture it names: the point of its story
EXPECTED = {"postmortem.ipynb": ["6,000 of 6,532 packets go to UDP 520",
                                 # Capture.dissect inside the kernel's running event loop (where pyshark's
                                 # FileCapture fails)
                                 "Wireshark reads frame 258 as eth:ethertype:ip:udp:rip: TTL 242, IP ID 0xd431"],
            "triage.ipynb": ["[high] pmtud-blackhole:", "23 frames written to", "Where: "]}
# the capture of the new user: a real ARP spoofer, not one of ours
ARP_SPOOFING = "lucaderi-sgr/2022/Favilli/tests/na-arpSpoofing.pcap"


def _run(notebook, tmp_path, monkeypatch) -> tuple[str, list]:
    """Execute `notebook` (TMPDIR: tmp_path); returns its printed text and outputs."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT / "notebooks")}})
    client.execute()   # raises CellExecutionError, naming the cell, on any error
    outputs = [o for cell in code for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    return "".join(o.get("text", "") for o in outputs if o.output_type == "stream"), outputs


def test_there_are_the_notebooks():
    assert [p.name for p in NOTEBOOKS] == ["postmortem.ipynb", "triage.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path, monkeypatch):
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code), "strip outputs"
    text, outputs = _run(notebook, tmp_path, monkeypatch)
    for expected in EXPECTED[path.name]:
        assert expected in text
    assert any("image/png" in o.get("data", {}) for o in outputs)


def _triage_on(capture: Path) -> object:
    """The triage notebook with its first cell naming `capture` (that cell is one assignment, of CAPTURE)."""
    notebook = nbformat.read(TRIAGE, as_version=4)
    first = notebook.cells[0]
    tree = ast.parse(first.source)
    assert first.cell_type == "code" and len(tree.body) == 1
    assert [t.id for t in tree.body[0].targets] == ["CAPTURE"]
    first.source = f"CAPTURE = {str(capture)!r}"
    return notebook


def test_triage_drills_into_a_real_arp_spoofer(captures_real, tshark, tmp_path, monkeypatch):
    text, outputs = _run(_triage_on(captures_real / ARP_SPOOFING), tmp_path, monkeypatch)
    assert "[high] arp-spoof: One IP address claimed by two MACs" in text
    assert "4 frames written to" in text
    # a capture without IP: protocols and talkers still summarised (by MAC)
    shown = "".join(o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "(not IP)" in shown and "00:e0:4d:3c:25:7b       36   1512" in shown
    # the spoofer's evidence frames, as Wireshark will read them
    written = tmp_path / "detector-triage" / "arp-spoof-evidence.pcap"
    rows = tshark.fields(written, "arp.opcode", "arp.src.hw_mac")
    assert rows == [["2", "00:e0:4d:3c:25:7b"]] * 4
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 3


def test_triage_of_a_quiet_compressed_capture_says_so(tmp_path, monkeypatch):
    quiet = tmp_path / "quiet.pcapng.gz"
    with open(ROOT / "captures" / "pmtud-works.pcapng", "rb") as plain, gzip.open(quiet, "wb") as packed:
        shutil.copyfileobj(plain, packed)
    text, _ = _run(_triage_on(quiet), tmp_path, monkeypatch)
    assert "0 findings: no rule fired on this capture" in text
    assert "nothing to drill into" in text and "frames written" not in text

"""report.md and report.html on real bytes: the postmortem order, the numbers, figures inline, and packet text
that is HTML markup shown as text (the hostile capture)."""
from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from detector.commands import analyze
from detector.report.evidence import collect
from detector.rules import load_rules

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
HOSTILE = ("<script>alert(1)</script>", '"><img src=x onerror=alert(2)>')


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile")
    findings, _result, _path = analyze([str(CAPTURES / "hostile-markup.pcapng")], out)
    return out, findings


@pytest.fixture(scope="module")
def incident(tmp_path_factory):
    out = tmp_path_factory.mktemp("incident")
    findings, _result, _path = analyze([str(CAPTURES / "echo-loop-rip-ipv4.pcapng")], out)
    return out, findings


def test_hostile_text_is_escaped_in_html(hostile):
    out, findings = hostile
    assert [f.rule for f in findings] == ["echo-loop"]
    page = (out / "report.html").read_text()
    for raw in HOSTILE:
        assert raw not in page
    assert "<script" not in page.lower() and "onerror=alert(2)>" not in page
    # the string is there, as text: html.escape of the DNS name as scapy decodes it
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    # the only tag carrying a source is an inline figure, and nothing is fetched
    assert re.findall(r'<(\w+)[^>]*\s(?:src|href)="(?!data:image/png;base64,|#f\d)', page) == []
    assert "default-src 'none'" in page


def test_hostile_text_is_escaped_in_markdown(hostile):
    out, _findings = hostile
    text = (out / "report.md").read_text()
    for raw in HOSTILE:
        assert raw not in text
    assert "&lt;script&gt;alert(1)" in text


def test_figures_are_inline_pngs(hostile):
    out, _findings = hostile
    page = (out / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    alts = re.findall(r'<img alt="([^"]+)"', page)
    # packets/s timeline, the loop's copies/s, top talkers
    assert len(images) == 3
    assert alts[0].startswith("Packets per second") and "copies per second" in alts[1] and "talkers" in alts[2]
    for data in images:
        assert base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")


def test_markdown_reads_top_down_with_the_numbers(incident):
    out, findings = incident
    text = (out / "report.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:2] == ["## Capture summary", "## Findings by severity"]
    assert headings[2].startswith("## 1. CRITICAL: Identical frame looping (echo-loop)")
    assert headings[3].startswith("## 2. CRITICAL: Probe to the RIP ports (rip-trigger)")
    assert "| Packets | 6,532 |" in text
    assert "| 1 | critical | echo-loop | 6,000 |" in text
    rules = load_rules()
    for f in findings:
        assert " ".join(rules[f.rule].why.split())[:80] in " ".join(text.split()).replace("&#x27;", "'")
    assert "evidence/echo-loop-1.pcap: 64 packets" in text
    assert "evidence/rip-trigger-1-reproduce.py" in text
    assert "- copies: 6,000" in text


def test_series_count_every_packet_and_every_loop_copy(incident):
    _out, findings = incident
    from detector.stats import CaptureStats
    from detector import engine

    stats = CaptureStats()
    engine.run([str(CAPTURES / "echo-loop-rip-ipv4.pcapng")], [stats])
    records, series = collect([str(CAPTURES / "echo-loop-rip-ipv4.pcapng")], findings, stats.first_ns, stats.last_ns)
    assert int(series.packets.sum()) == stats.packets == 6532
    (loop_index,) = [i for i, f in enumerate(findings) if f.rule == "echo-loop"]
    assert int(series.loops[loop_index].sum()) == 6000
    # the loop lasts 0.24 s at 25,000/s: its bins carry it, the rest of the capture none
    busy = series.loops[loop_index] > 0
    assert busy.sum() * series.bin_ns <= 0.26e9
    wanted = {n for f in findings for n in f.evidence["evidence_frames"]}
    assert set(records) == wanted


def _analyzed_series(name, tmp_path):
    from detector.detectors import active_detectors
    from detector.stats import CaptureStats
    from detector import engine

    path = str(CAPTURES / name)
    findings, _result, _out = analyze([path], tmp_path)
    stats = CaptureStats()
    engine.run([path], [stats])
    rss = next(d.model for d in active_detectors(load_rules()) if d.rule_id == "rss-saturation")
    _records, series = collect([path], findings, stats.first_ns, stats.last_ns, rss_model=rss)
    return findings, series, stats, (tmp_path / "report.html").read_text()


def test_pmtud_figure_plots_every_packet_of_the_flow(tmp_path):
    import pandas as pd
    from detector.flows import FlowTable
    from detector import engine

    findings, series, _stats, page = _analyzed_series("pmtud-blackhole-ipv4.pcapng", tmp_path)
    (index,) = [i for i, f in enumerate(findings) if f.rule == "pmtud-blackhole"]
    t, size, forward = series.segments[index]
    table = FlowTable()
    engine.run([str(CAPTURES / "pmtud-blackhole-ipv4.pcapng")], [table])
    flows: pd.DataFrame = table.to_frame()
    row = flows[flows["community_id"] == findings[index].community_id].iloc[0]
    assert len(t) == row["src2dst_packets"] + row["dst2src_packets"]
    # the host keeps sending full-size segments past the reported MTU's payload (1420 - 40)
    assert size[forward].max() == 1460 and (size[forward] > 1380).sum() >= 6
    assert 'alt="Segment sizes of the PMTUD flow vs MSS and MTU"' in page


def test_rss_heat_map_shows_the_saturated_queue(tmp_path):
    findings, series, stats, page = _analyzed_series("rss-single-flow-flood.pcap", tmp_path)
    (finding,) = [f for f in findings if f.rule == "rss-saturation"]
    assert series.rss.sum() == stats.layers["ipv4"] + stats.layers.get("ipv6", 0)
    window = slice(int((finding.first_seen - series.start_ns) // series.bin_ns),
                   int((finding.last_seen - series.start_ns) // series.bin_ns) + 1)
    per_queue = series.rss[window].sum(axis=0)
    assert per_queue.argmax() == finding.evidence["queue"]
    assert per_queue.max() / per_queue.sum() > 0.8
    assert 'alt="Share of packets per receive queue' in page

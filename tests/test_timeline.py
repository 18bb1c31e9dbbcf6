"""The findings' time axis (detector.report.timeline) on real findings: a lane per rule, a bar per finding
spanning its first to its last packet, coloured by incident (grey without one), beside report.md as
timeline.png and first in report.html; a run without findings leaves no stale timeline.png."""
from __future__ import annotations

import base64
import re
from dataclasses import replace
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from detector import analysis
from detector.commands import analyze
from detector.report import timeline

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def chain():
    """seed 002's chain: two VRRP masters, their gratuitous ARP war, the switch flooding."""
    return analysis.analyze([str(CAPTURES / "unicast-flood-vrrp-chain.pcapng")])


def _drawn(findings, incidents=(), start_ns=None):
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    timeline.draw_timeline(ax, findings, incidents, start_ns)
    fig.canvas.draw()
    return ax


def test_a_bar_per_finding_from_its_first_to_its_last_packet(chain):
    # the findings as the rules give them, before the correlator groups them (the next test colours them)
    findings, start = [replace(f, incident_id=None) for f in chain.findings], chain.stats.first_ns
    assert {f.rule for f in findings} == {"vrrp-dual-master", "garp-war", "unicast-flood"}
    ax = _drawn(findings, start_ns=start)
    bars = [c.patches[0] for c in ax.containers if c.get_label() in {f.rule for f in findings}]
    assert len(bars) == len(findings)
    # lanes top to bottom in order of first appearance: the masters, then their ARP war, then the flood
    assert [t.get_text() for t in ax.get_yticklabels()] == ["vrrp-dual-master", "garp-war", "unicast-flood"]
    for f, bar in zip(findings, bars):
        assert bar.get_x() == pytest.approx((f.first_seen - start) / 1e9)
        assert bar.get_x() + bar.get_width() == pytest.approx((f.last_seen - start) / 1e9, abs=0.5)
        lane = ["vrrp-dual-master", "garp-war", "unicast-flood"].index(f.rule)
        assert lane - 0.5 < bar.get_y() < bar.get_y() + bar.get_height() < lane + 0.5
    # two garp-war findings share their lane side by side, not on top of each other
    garp = [b for b, f in zip(bars, findings) if f.rule == "garp-war"]
    assert len(garp) == 2 and garp[0].get_y() != garp[1].get_y()
    # no incident: every bar grey, no legend
    assert {to_hex(b.get_facecolor()) for b in bars} == {timeline.NO_INCIDENT}
    assert ax.get_legend() is None
    assert ax.get_xlabel() == "seconds after 2026-01-01T00:00:00.000000Z"


def test_bars_take_their_incidents_colour(chain):
    findings = chain.findings
    loner = [f for f in findings if f.rule == "garp-war"][-1]
    # the correlator's output as the report reads it: Finding.incident_id and findings.json's incidents
    wanted = {}
    for f in findings:
        f.incident_id = None if f is loner else "incident-2" if f.rule == "unicast-flood" else "incident-1"
        # colours go by first appearance in time: the masters' incident (from 0 s) before the flood's (75 s)
        wanted[id(f)] = (timeline.NO_INCIDENT if f is loner else
                         timeline.INCIDENT_COLOURS[1] if f.rule == "unicast-flood" else timeline.INCIDENT_COLOURS[0])
    incidents = [{"id": "incident-1", "title": "Two VRRP masters of VRID 60 cost $5 and $"},
                 {"id": "incident-2", "title": "x" * 200}]
    try:
        ax = _drawn(findings, incidents, chain.stats.first_ns)
    finally:
        for f in findings:
            f.incident_id = None
    bars = [c.patches[0] for c in ax.containers if c.get_label() in {f.rule for f in findings}]
    assert [to_hex(bar.get_facecolor()) for bar in bars] == [wanted[id(f)] for f in findings]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    # the "$" of a title is literal, not matplotlib's math; a long title is cut
    assert labels[0] == r"incident-1: Two VRRP masters of VRID 60 cost \$5 and \$"
    assert len(labels[1]) == timeline.LABEL_CHARS_MAX and labels[1].endswith("...")
    assert labels[-1] == "no incident"


def test_report_carries_the_timeline(tmp_path):
    analyze([str(CAPTURES / "echo-loop-rip-ipv4.pcapng")], tmp_path)
    png = (tmp_path / timeline.TIMELINE_PNG).read_bytes()
    assert png.startswith(PNG)
    text = (tmp_path / "report.md").read_text()
    assert f"![Findings on one time axis]({timeline.TIMELINE_PNG})" in text
    # before the findings, where the incidents open the report
    assert text.index(timeline.TIMELINE_PNG) < text.index("## Findings by severity")
    page = (tmp_path / "report.html").read_text()
    first = re.search(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', page)
    assert first.group(1) == timeline.TITLE and base64.b64decode(first.group(2)) == png


def test_no_findings_no_timeline_and_none_left_over(tmp_path):
    analyze([str(CAPTURES / "echo-loop-rip-ipv4.pcapng")], tmp_path)
    assert (tmp_path / timeline.TIMELINE_PNG).is_file()
    findings, _result, _path = analyze([str(CAPTURES / "benign-office.pcapng")], tmp_path)
    assert findings == [] or all(f.first_seen is None for f in findings)
    assert not (tmp_path / timeline.TIMELINE_PNG).exists()
    assert "timeline.png" not in (tmp_path / "report.md").read_text()



def test_a_capture_of_years_reads_dates_and_the_legend_stays_in_the_figure(chain):
    """A multi-year capture's timeline read "1e8" seconds, and a legend of many incidents beside few lanes ran
    off the figure's foot: the axis writes UTC years, and the figure grows to hold its legend."""
    from detector.report.render import figure_of

    start = chain.findings[0].first_seen
    half_year = 365 * 86_400 * 10**9 // 2
    # one rule's finding again and again over five years: one lane, twelve incidents and some findings in none,
    # a legend of 13 entries (LEGEND_MAX incidents and "no incident") beside a single lane
    findings = [replace(chain.findings[0], first_seen=start + k * half_year, last_seen=start + k * half_year + 10**9,
                        incident_id=f"incident-{k + 1}" if k < 12 else None) for k in range(14)]
    ax = _drawn(findings, start_ns=start)
    assert ax.get_xlabel() == "time (UTC)"
    years = [t.get_text() for t in ax.get_xticklabels()]
    assert 3 <= len(years) <= 8 and all(re.fullmatch(r"20\d\d", y) for y in years), years
    assert years == sorted(set(years)) and ax.xaxis.get_offset_text().get_text() == ""
    # the figure as the report draws it: every entry of the legend inside the image
    size = timeline.figure_size(findings)
    fig = figure_of([(lambda a: timeline.draw_timeline(a, findings, (), start), timeline.TITLE, size)])
    fig.canvas.draw()
    legend = fig.axes[0].get_legend()
    assert len(legend.get_texts()) == 13
    box = legend.get_window_extent()
    width, height = fig.canvas.get_width_height()
    assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width and box.y1 <= height, (box, width, height)


@pytest.mark.parametrize(("days", "pattern"), [(0.5, None), (3, r"01-0\d [01][02]:00"), (40, r"\d\d\d\d-\d\d-\d\d"),
                                              (400, r"\d\d\d\d-\d\d"), (40_000, r"\d{4}")])
def test_the_time_axis_writes_dates_past_a_day(days, pattern):
    from detector.detect.figure import DATE_TICKS_MAX, time_axis

    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot([0, days * 86_400], [0, 1])
    time_axis(ax, 1_767_225_600 * 10**9)            # 2026-01-01T00:00:00Z
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels()]
    if pattern is None:                             # half a day: seconds, as every short capture
        assert ax.get_xlabel() == "seconds after 2026-01-01T00:00:00.000000Z"
        return
    assert ax.get_xlabel() == ("time (UTC, 2026)" if days == 3 else "time (UTC)")
    assert 1 <= len(labels) <= DATE_TICKS_MAX
    assert all(re.fullmatch(pattern, text) for text in labels), labels

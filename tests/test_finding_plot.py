"""finding.plot(): one finding's figure is what report.html draws for it, drawn by the report's own code, and its
lines count what tshark counts in the capture."""
from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

import detector
from detector.errors import UsageError
from detector.report.render import TIMELINE_TITLE

CAPTURES = Path(__file__).resolve().parents[1] / "captures"


def _steps_total(line, width_s: float) -> float:
    """What a packets-per-second step line counts: its rates times the bin width."""
    return float(np.sum(line.get_ydata())) * width_s


def _width(ax) -> float:
    x = ax.lines[0].get_xdata()
    return float(x[1] - x[0])


def _report_titles(tmp_path, name: str) -> set[str]:
    """The titles of the figures `detector analyze` puts in report.html for capture `name`."""
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "detector", "analyze", str(CAPTURES / name), "-o", str(out)], check=True,
                   capture_output=True)
    page = (out / "report.html").read_text()
    return {html.unescape(t) for t in re.findall(r'<img alt="([^"]*)"', page)}


def test_a_looping_frame_is_drawn_as_the_report_draws_it(tshark, tmp_path):
    name = "echo-loop-rip-ipv4.pcapng"
    capture = detector.open(CAPTURES / name)
    finding = capture.finding(0)
    assert finding.rule == "echo-loop"
    fig = finding.plot()
    assert isinstance(fig, Figure)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0] == TIMELINE_TITLE and titles[1].startswith("Looping frame ")
    assert set(titles) <= _report_titles(tmp_path, name)
    timeline, copies = fig.axes
    # the traffic panel counts every packet; the shaded span is the finding's first to last copy
    assert _steps_total(timeline.lines[0], _width(timeline)) == pytest.approx(tshark.count(CAPTURES / name, "frame"))
    span = timeline.patches[0].get_extents().transformed(timeline.transData.inverted())
    start = capture.packets["time"].min().value
    assert span.x0 == pytest.approx((finding.first_seen - start) / 1e9, abs=1e-6)
    # the rule's panel counts the copies of the one frame the finding names
    assert _steps_total(copies.lines[0], _width(copies)) == pytest.approx(finding.n)


def test_a_syn_flood_is_drawn_with_its_victims_syns(tshark, tmp_path):
    name = "syn-flood-spoofed.pcap"
    capture = detector.open(CAPTURES / name)
    finding = capture.finding(0)
    assert finding.rule == "syn-flood"
    fig = finding.plot()
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [TIMELINE_TITLE, "New SYNs, SYN-ACKs and completed handshakes per second"]
    assert set(titles) <= _report_titles(tmp_path, name)
    ax = fig.axes[1]
    syn = next(line for line in ax.lines if line.get_label().startswith("new SYNs to "))
    # per second (a point per second with SYNs, 0 where a run ends), whatever the report's bins: the total is
    # the SYNs that opened an attempt, tshark's SYNs less its retransmissions
    expected = tshark.count(CAPTURES / name, f"tcp.flags.syn == 1 and tcp.flags.ack == 0 and not icmp and "
                                             f"ip.dst == {finding.dest_ip} and tcp.dstport == {finding.dest_port} "
                                             "and not tcp.analysis.retransmission")
    assert float(np.sum(syn.get_ydata())) == expected and expected > 1000


def test_a_pmtud_black_hole_is_drawn_with_the_flows_segments(tshark):
    name = "pmtud-blackhole-ipv4.pcapng"
    finding = detector.open(CAPTURES / name).finding(0)
    assert finding.rule == "pmtud-blackhole"
    fig = finding.plot()
    ax = fig.axes[1]
    assert ax.get_title() == "Segment sizes of the PMTUD flow vs MSS and MTU"
    points = sum(len(line.get_xdata()) for line in ax.lines if line.get_label().startswith("from "))
    flow = (f"tcp and not icmp and ip.addr == {finding.src_ip} and ip.addr == {finding.dest_ip} and "
            f"tcp.port == {finding.src_port} and tcp.port == {finding.dest_port}")
    assert points == tshark.count(CAPTURES / name, flow) > 0
    # the MTU the routers reported, as the report draws it
    assert any(line.get_label().startswith(f"reported MTU {finding.evidence['reported_mtu']}") for line in ax.lines)


def test_a_rule_without_a_figure_of_its_own_gets_the_traffic_panel():
    capture = detector.open(CAPTURES / "arp-spoof-mitm.pcapng", site=CAPTURES / "arp-spoof-mitm.site.yaml")
    finding = capture.finding(0)
    assert finding.rule == "arp-spoof"
    fig = finding.plot()
    assert [ax.get_title() for ax in fig.axes] == [TIMELINE_TITLE]
    assert len(fig.axes[0].patches) == 1     # this finding's interval only


def test_finding_numbers_out_of_range_are_a_clear_error():
    quiet = detector.open(CAPTURES / "pmtud-works.pcapng")
    with pytest.raises(UsageError, match="no finding 0: no rule fired"):
        quiet.finding(0)
    capture = detector.open(CAPTURES / "pmtud-blackhole-ipv4.pcapng")
    count = len(capture.findings)
    with pytest.raises(UsageError, match=f"no finding {count}: the findings are rows 0 to {count - 1}"):
        capture.finding(count)
    assert capture.finding(-1).rule == capture.findings["rule"].iloc[-1]

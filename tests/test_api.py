"""The notebook API on the bundled captures: lazy, typed DataFrames that agree with tshark, findings as the CLI
reports them, plots that draw, and a curated public namespace."""
from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

import detector
from detector.errors import CaptureError, UsageError

matplotlib.use("Agg")
CAPTURES = Path(__file__).resolve().parents[1] / "captures"


@pytest.fixture(autouse=True)
def _close_figures():
    """pyplot keeps every figure a plot draws until closed: close them after each test."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def test_public_names_are_curated():
    assert detector.__all__ == ["open", "Capture", "DetectorError", "CaptureError", "RuleError", "UsageError"]
    for name in detector.__all__:
        assert getattr(detector, name) is not None
    from detector import api
    assert api.__all__ == ["open", "Capture"]
    with pytest.raises(AttributeError):
        detector.not_a_name  # noqa: B018


def test_open_is_lazy_and_refuses_missing_files(tmp_path):
    capture = detector.open(CAPTURES / "echo-loop-rip-ipv4.pcapng")
    assert capture._packets is None and capture._flows is None and capture._findings is None
    with pytest.raises(UsageError):
        detector.open(tmp_path / "absent.pcap")
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"this is not a capture at all, not even close")
    with pytest.raises(CaptureError):
        _ = detector.open(junk).packets


def test_packets_agree_with_tshark(tshark):
    path = CAPTURES / "echo-loop-rip-ipv6-vlan.pcap"
    packets = detector.open(path).packets
    rows = tshark.fields(path, "frame.number", "ipv6.src", "ip.src", "vlan.id", "udp.dstport", "tcp.dstport",
                         "eth.src", "eth.dst")
    assert len(packets) == len(rows)
    assert packets["frame"].tolist() == [int(r[0]) for r in rows]
    assert packets["src_ip"].fillna("").tolist() == [r[1] or r[2] for r in rows]
    assert packets["vlan"].astype("Int64").astype(str).replace("<NA>", "").tolist() == \
        [r[3].split(",")[0] for r in rows]
    assert packets["dest_port"].astype("Int64").astype(str).replace("<NA>", "").tolist() == \
        [r[4] or r[5] for r in rows]
    assert packets["src_mac"].tolist() == [r[6] for r in rows] and packets["dest_mac"].tolist() == [r[7] for r in rows]
    assert str(packets["time"].dtype) == "datetime64[ns, UTC]"
    assert packets["src_ip"].dtype == "string" and packets["ttl"].dtype == "UInt8"


def test_findings_and_flows_match_the_cli():
    capture = detector.open(CAPTURES / "echo-loop-rip-ipv4.pcapng")
    findings = capture.findings
    assert findings["rule"].tolist() == ["echo-loop", "rip-trigger"]
    assert findings["n"].tolist() == [6000, 1]
    assert findings["src_ip"].tolist() == ["198.18.44.201", "198.18.44.201"]
    assert str(findings["first_seen"].dtype) == "datetime64[ns, UTC]"
    assert len(capture.flows) == 77
    assert capture.flows["src_ip"].map(type).eq(str).all()


def test_analyze_with_rules_folder_overrides_defaults(tmp_path):
    (tmp_path / "echo-loop.yaml").write_text("id: echo-loop\nenabled: false\n")
    capture = detector.open(CAPTURES / "echo-loop-rip-ipv4.pcapng")
    assert "echo-loop" not in capture.analyze(rules=tmp_path)["rule"].tolist()


def test_plots_draw():
    capture = detector.open(CAPTURES / "echo-loop-rip-ipv4.pcapng")
    ax = capture.plot.timeline()
    # one shaded interval per finding
    assert len(ax.patches) == len(capture.findings) == 2
    ax = capture.plot.rss_queues()
    assert len(ax.images) == 1
    flows = capture.flows
    tcp = flows.index[flows["proto"] == "tcp"][0]
    ax = capture.plot.segments(flows.loc[tcp, "community_id"], mtu=1400)
    points = [line for line in ax.lines if line.get_linestyle() == "None"]
    plotted = sum(len(line.get_xdata()) for line in points)
    assert plotted == flows.loc[tcp, "src2dst_packets"] + flows.loc[tcp, "dst2src_packets"]
    # on the date axis too: the flow's first packet at its time
    first = min(line.get_xdata().min() for line in points if len(line.get_xdata()))
    assert first == np.datetime64(flows.loc[tcp, "first_seen"].tz_localize(None)) and ax.get_xlabel() == "time (UTC)"
    with pytest.raises(UsageError):
        capture.plot.segments("1:no-such-flow")
    assert isinstance(flows, pd.DataFrame)


def test_timeline_and_rate_show_one_rate_for_a_second_as_the_report_does(tshark):
    """plot.timeline() and plot.rate() drew 3,500 and 10,000 packets/s for one second (200 equal bins against
    1 s bins): both now draw on the report's time axis (report.evidence.time_bins) unless told otherwise, say
    the bin width, and count every packet."""
    import matplotlib
    matplotlib.use("Agg")
    from detector.report.evidence import time_bins

    path = CAPTURES / "syn-flood-spoofed.pcap"
    capture = detector.open(path)
    line, = capture.plot.timeline().lines
    rate, = capture.plot.rate().lines
    ns = capture.packets["time"].astype("int64")
    axis = time_bins(int(ns.min()), int(ns.max()))
    assert axis.width_s < 1                          # a short capture: the report's bins are milliseconds
    assert np.array_equal(line.get_ydata(), rate.get_ydata())
    # on a date axis: each bin's start as a time, the report's bins
    starts = (axis.start_ns + np.arange(axis.count, dtype=np.int64) * axis.bin_ns).astype("datetime64[ns]")
    assert np.array_equal(line.get_xdata(), rate.get_xdata()) and np.array_equal(line.get_xdata(), starts)
    assert float(np.sum(line.get_ydata())) * axis.width_s == pytest.approx(tshark.count(path, "frame"))
    assert line.axes.get_ylabel() == rate.axes.get_ylabel() == f"packets/s ({axis.width_s * 1e3:g} ms bins)"
    # asked for 1 s bins, rate says so, and its peak second is lower than a millisecond bin's
    wide, = capture.plot.rate(bin_s=1.0).lines
    assert wide.axes.get_ylabel() == "packets/s (1 s bins)" and wide.get_ydata().max() < line.get_ydata().max()


def _capture_of_years(path: Path) -> None:
    """Three packets a week (HTTP, DNS, HTTPS from three hosts) for five years, from 2019-03-01 (UTC)."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    start = pd.Timestamp("2019-03-01", tz="UTC")
    packets = []
    for day in range(0, 5 * 365, 7):
        for k, layer in enumerate((TCP(dport=80), UDP(dport=53), TCP(dport=443))):
            packet = Ether() / IP(src=f"10.0.0.{k + 1}", dst="10.0.1.1") / layer
            packet.time = (start + pd.Timedelta(days=day, seconds=k)).timestamp()
            packets.append(packet)
    wrpcap(str(path), packets)


def _inside(artist, figure) -> bool:
    box, page = artist.get_window_extent(), figure.bbox
    return page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1


def test_a_capture_of_years_has_dates_on_its_axis_and_its_legend_inside_the_figure(tmp_path):
    """A multi-year capture's axis read "1e8" (seconds after the first packet) and its legend was cut off."""
    path = tmp_path / "years.pcap"
    _capture_of_years(path)
    capture = detector.open(path)
    first, last = capture.packets["time"].min(), capture.packets["time"].max()
    for ax in (capture.plot.timeline(), capture.plot.rate(by="dest_port"), capture.plot.rss_queues(bin_ms=86_400_000)):
        figure = ax.figure
        figure.tight_layout()       # what a notebook does next (postmortem.ipynb), colorbar or not
        figure.canvas.draw()
        ticks = [label.get_text() for label in ax.get_xticklabels()]
        offset = ax.xaxis.get_offset_text().get_text()
        assert not any("1e" in text or "e+" in text for text in [*ticks, offset]), (ticks, offset)
        assert {"2020", "2021", "2022", "2023"} <= set(ticks), ticks
        assert ax.get_xlabel() == "time (UTC)" and _inside(ax.xaxis.label, figure)
        left, right = matplotlib.dates.num2date(ax.get_xlim())
        assert left <= first < last <= right and (last - first).days > 4 * 365
        if ax.lines:
            # the first bin starts at the first packet, as a time
            assert ax.lines[0].get_xdata()[0] == np.datetime64(first.tz_localize(None))
    legend = capture.plot.rate(by="src_ip").get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    legend.figure.canvas.draw()
    assert _inside(legend, legend.figure)
    # a bin width that would make billions of bins over five years is refused, not allocated
    with pytest.raises(UsageError, match="bins over this capture"):
        capture.plot.rate(bin_s=0.001)
    with pytest.raises(UsageError, match="bins over this capture"):
        capture.plot.rss_queues(bin_ms=1)


def test_the_timeline_names_each_rule_once_in_a_legend_inside_the_figure():
    capture = detector.open(CAPTURES / "echo-loop-rip-ipv4.pcapng")
    ax = capture.plot.timeline()
    rules = list(dict.fromkeys(capture.findings["rule"]))
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["packets", *rules]
    assert len({patch.get_facecolor() for patch in ax.patches}) == len(rules)
    ax.figure.canvas.draw()
    assert _inside(legend, ax.figure)


def test_application_tables_as_dataframes(tmp_path):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Dot1Q, Ether
    from scapy.layers.vrrp import VRRP
    from scapy.utils import wrpcap

    master = (Ether(src="00:00:5e:00:01:33", dst="01:00:5e:00:00:12") / Dot1Q(vlan=20)
              / IP(src="192.0.2.2", dst="224.0.0.18", ttl=255, proto=112)
              / VRRP(vrid=51, priority=200, addrlist=["192.0.2.1", "192.0.2.9"]))
    other = Ether() / IP(src="192.0.2.7", dst="192.0.2.8") / UDP(sport=1, dport=2)
    empty = Ether(src="00:00:5e:00:01:34") / IP(src="192.0.2.3", dst="224.0.0.18", ttl=5, proto=112)
    path = tmp_path / "vrrp.pcap"
    wrpcap(str(path), [other, master, empty])
    capture = detector.open(path)
    messages = capture.app("vrrp")
    assert messages["frame"].tolist() == [2, 3]
    assert messages["src_ip"].tolist() == ["192.0.2.2", "192.0.2.3"]
    assert messages["src_mac"].tolist() == ["00:00:5e:00:01:33", "00:00:5e:00:01:34"]
    assert messages["vlan"].tolist() == [20, pd.NA]
    assert messages["vrid"].tolist() == [51, pd.NA] and str(messages["vrid"].dtype) == "UInt8"
    assert messages["truncated"].tolist() == [False, True]
    addresses = capture.app("vrrp_addr")
    assert addresses[["frame", "ip"]].values.tolist() == [[2, "192.0.2.1"], [2, "192.0.2.9"]]
    with pytest.raises(UsageError, match="vrrp_addr"):
        capture.app("vrp")
    none = detector.open(CAPTURES / "echo-loop-rip-ipv4.pcapng")
    assert len(none.app("vrrp")) == 0 and {"frame", "time", "vrid"} <= set(none.app("vrrp").columns)
    assert list(none.app("vrrp_addr").columns) == ["frame", "ip", "truncated"]


def test_incidents_group_the_findings_as_findings_json_does():
    # a loop started by a RIP probe and, at the same seconds, a PMTUD black hole between other hosts
    capture = detector.open(CAPTURES / "two-incidents-at-once.pcapng")
    incidents = capture.incidents
    assert list(incidents["root_cause"]) == ["rip-trigger", "mss-violation"]
    assert [sorted(rules) for rules in incidents["rules"]] == [["echo-loop", "rip-trigger", "rss-saturation"],
                                                               ["mss-violation", "pmtud-blackhole"]]
    assert str(incidents["severity"].iloc[0]) in ("high", "critical")
    findings = capture.findings
    for row in incidents.itertuples():
        members = findings[findings["incident_id"] == row.id]
        assert sorted(members["rule"]) == sorted(row.rules) and row.findings == len(members)
    assert incidents["first_seen"].dt.tz is not None and incidents["summary"].str.count("\n").min() >= 2

"""report.md and report.html on real bytes: the postmortem order, the numbers, figures inline, and packet text
that is HTML markup shown as text (the hostile capture)."""
from __future__ import annotations

import base64
import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from detector.commands import analyze
from detector.detectors.echo_loop import CopiesFigure
from detector.detectors.pmtud_blackhole import SegmentsFigure
from detector.detectors.rss_saturation import QueueShareFigure
from detector.report.evidence import collect, rule_figures, time_bins
from detector.report.timeline import TITLE as TIMELINE_TITLE
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
    # the only tag carrying a source is an inline figure, the only links lead within the page (to a finding, to
    # an incident), and nothing is fetched
    assert re.findall(r'<(\w+)[^>]*\s(?:src|href)="(?!data:image/png;base64,|#f\d|#incident-\d)', page) == []
    assert "default-src 'none'" in page


def test_hostile_text_is_code_in_markdown(hostile):
    out, _findings = hostile
    text = (out / "report.md").read_text()
    # tshark's packet details are fenced code blocks (test_dissect.py) and a frame's summary a code span, where
    # a viewer shows text as it is; outside them the packet text never appears
    outside = _outside_code(text)
    for raw in HOSTILE:
        assert raw in text and raw not in outside
    assert "&lt;" not in text and "&#x27;" not in text            # no HTML entity: code needs none
    page = _Elements()
    page.feed(_renderer().render(text))
    assert page.tags <= REPORT_TAGS, page.tags - REPORT_TAGS
    assert HOSTILE[0] in "".join(page.text)


def _outside_code(text: str) -> str:
    """report.md without its fenced blocks and code spans (a span's fence: a run of backticks, closed by as many)."""
    text = re.sub(r"^(`{3,})text\n.*?\n\1$", "", text, flags=re.S | re.M)
    return re.sub(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)", "", text)


def _renderer():
    """What renders report.md in these tests: CommonMark with GitHub's tables, strikethrough and autolinks."""
    from markdown_it import MarkdownIt
    return MarkdownIt("commonmark", {"linkify": True}).enable(["table", "strikethrough", "linkify"])


# Packet text in the markdown capture below: each string is markdown that a viewer would turn into an
# image, a link, an HTML element, a heading, emphasis or a table cell if report.md let it through.
MARKDOWN_NAMES = ("![x](http://evil.example/x.png)",
                  "[click](http://evil.example/c) <img src=http://evil.example/i.png> www.evil.com",
                  "# h *em* _u_ `c` ~~s~~ $m$ | p <http://evil.com/a> a@evil.com")
# A capture file name with line breaks and markdown: it reaches report.md as the capture's name.
HOSTILE_FILE = "y.png)\n# heading | cell <img src=x> *em*\n- item.pcap"
# What markdown itself makes of report.md: anything else (img, em, del, script, a link to anywhere but a rule's
# reference, ...) came from text. "pre>code" is a fenced block (tshark's packet details), "code" a span (an
# address, a name, a file), "timeline-img" the report's own figure, timeline.png, "reference-a" a link to one of
# the rule files' references.
REPORT_TAGS = {"h1", "h2", "h3", "p", "ul", "ol", "li", "table", "thead", "tbody", "tr", "th", "td", "strong", "pre",
               "pre>code", "code", "timeline-img", "reference-a"}
REFERENCES = {ref for rule in load_rules().values() for ref in rule.references}


def _markdown_loops(path: Path) -> None:
    """One echo loop per hostile DNS name (1,500 copies at 5,000/s each), so each becomes a finding whose
    decoded frame lands in the report."""
    from scapy.all import DNS, DNSQR, IP, UDP, Ether, wrpcap

    packets = []
    for k, name in enumerate(MARKDOWN_NAMES):
        query = (Ether(src="02:00:5e:66:00:02", dst="02:00:5e:66:00:01")
                 / IP(src="198.18.66.6", dst="192.0.2.66", ttl=64, id=700 + k)
                 / UDP(sport=5300 + k, dport=53) / DNS(id=k, rd=1, qd=DNSQR(qname=name)))
        for i in range(1500):
            copy = query.copy()
            copy.time = 1_767_225_600 + k + i / 5000
            packets.append(copy)
    wrpcap(str(path), packets)


class _Elements(__import__("html.parser").parser.HTMLParser):
    """The tags and the text of rendered HTML, and each table row's cell count."""

    def __init__(self):
        super().__init__()
        self.tags: set[str] = set()
        self.text: list[str] = []
        self.rows: list[int] = []
        self._last: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "code" and self._last == "pre":
            tag = "pre>code"
        elif tag == "img" and dict(attrs).get("src") == "timeline.png":
            tag = "timeline-img"
        elif tag == "a" and dict(attrs).get("href") in REFERENCES:
            tag = "reference-a"
        self._last = tag
        self.tags.add(tag)
        if tag == "tr":
            self.rows.append(0)
        elif tag in ("td", "th"):
            self.rows[-1] += 1

    def handle_data(self, data):
        self.text.append(data)


def test_packet_and_file_text_stays_text_in_a_markdown_viewer(tmp_path):
    """report.md rendered by a CommonMark/GFM renderer (tables, strikethrough, linkify): no image, link or
    HTML element from packet text or a file name, every table row whole, and each hostile string shown as
    itself."""
    folder = tmp_path / "![y](http:" / "evil.example"
    folder.mkdir(parents=True)
    (folder / HOSTILE_FILE).write_bytes((CAPTURES / "hostile-markup.pcapng").read_bytes())
    loops = tmp_path / "loops.pcap"
    _markdown_loops(loops)
    named = f"{tmp_path}/![y](http://evil.example/{HOSTILE_FILE}"      # as a user would type it
    findings, _result, _path = analyze([named, str(loops)], tmp_path / "out")
    assert [f.rule for f in findings].count("echo-loop") == 1 + len(MARKDOWN_NAMES)
    text = (tmp_path / "out" / "report.md").read_text()

    page = _Elements()
    page.feed(_renderer().render(text))
    assert page.tags <= REPORT_TAGS, page.tags - REPORT_TAGS
    header, *rows = page.rows
    assert header == 2 and set(rows[:9]) == {2}                      # the capture summary: two cells a row
    assert set(rows[9:]) == {7}                                      # the findings table: seven
    shown = " ".join("".join(page.text).split())
    for name in MARKDOWN_NAMES:
        assert name in shown
    assert named.replace("\n", " ") in shown
    assert "<script>alert(1)</script>" in shown


def test_markdown_escaping_is_what_keeps_the_viewer_from_acting(tmp_path, monkeypatch):
    """Without the escaping the same report renders images, links and HTML: the test above can fail."""
    from detector.report import render

    loops = tmp_path / "loops.pcap"
    _markdown_loops(loops)
    monkeypatch.setattr(render, "markdown_text", lambda value, **_: str(value))
    monkeypatch.setattr(render, "markdown_code", lambda value, **_: str(value))
    analyze([str(loops)], tmp_path / "out")
    page = _Elements()
    page.feed(_renderer().render((tmp_path / "out" / "report.md").read_text()))
    assert {"img", "a", "em"} <= page.tags


def test_figures_are_inline_pngs(hostile):
    out, _findings = hostile
    page = (out / "report.html").read_text()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    alts = re.findall(r'<img alt="([^"]+)"', page)
    # the findings' time axis, packets/s, the loop's copies/s, top talkers
    assert len(images) == 4
    assert alts[0] == TIMELINE_TITLE
    assert alts[1].startswith("Packets per second") and "copies per second" in alts[2] and "talkers" in alts[3]
    for data in images:
        assert base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n")


def test_markdown_reads_top_down_with_the_numbers(incident):
    out, findings = incident
    text = (out / "report.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:4] == ["## Incidents", "## Incident chains", "## Capture summary", "## Findings by severity"]
    assert headings[4].startswith("## 1. CRITICAL: Identical frame looping (echo-loop)")
    assert headings[5].startswith("## 2. CRITICAL: Probe to the RIP ports (rip-trigger)")
    # the report opens with the incident: its summary, then its chain from the root cause to the effect
    opening = text[:text.index("## Capture summary")]
    assert "### incident-1: CRITICAL: Probe to the RIP ports -> echo-loop\n" in opening
    what, where, first = [line for line in opening.splitlines() if line.startswith("- ")]
    assert what.startswith("- What: rip-trigger (critical): `198.18.44.201` sent") and what.endswith("; then echo-loop")
    assert where == ("- Where: `198.18.44.201` -> `192.0.2.61` (`00:1b:54:c2:00:02` -> `00:1b:54:c2:00:01`), "
                     "from 2026-01-01T00:00:01.500000Z for 0.24 s")
    assert first.startswith("- First: Drop UDP 520 and 521 from outside")
    chain = opening[opening.index("### incident-1 chain"):].splitlines()
    assert chain[2].startswith("1. **root cause: rip-trigger (critical)**, finding 2: ")
    assert chain[3].startswith("2. **effect: echo-loop (critical)**, finding 1: one frame seen 6,000 times")
    assert "- incident: incident-1" in text[text.index("## 1. CRITICAL"):]
    assert "| Packets | 6,532 |" in text
    assert "| 1 | critical | high | echo-loop | 6,000 |" in text
    assert "| Findings | 2 of low or above |" in text
    rules = load_rules()
    for f in findings:
        assert " ".join(rules[f.rule].why.split())[:80] in " ".join(text.split())
    # a file name is code (no viewer makes a link of it), a reference a link under its own heading, nested
    # evidence a list of its own, a yes/no a word: nothing escaped, no Python repr
    assert "- `evidence/echo-loop-1.pcap`: 64 packets" in text
    assert "- `evidence/rip-trigger-1-reproduce.py`: rebuilds" in text
    assert "### References\n\n- <https://www.rfc-editor.org/rfc/rfc2453>\n" in text
    assert "- copies: 6,000" in text and "- loop: yes" in text
    assert "- loop_evidence: unicast_destination: yes, unicast_source: yes," in text
    outside = _outside_code(text)
    for noise in ("True", "False", "None", "{'", "\\.", "\\_", "&gt;", "&#"):
        assert noise not in outside, noise
    assert "**Frame 258 of the capture** (frame 1 of `evidence/echo-loop-1.pcap`)" in text


def test_html_opens_with_the_incidents_and_links_each_step_to_its_finding(incident, hostile):
    out, _findings = incident
    page = (out / "report.html").read_text()
    assert page.index("<h2>Incidents</h2>") < page.index("<h2>Incident chains</h2>") < page.index(
        "<h2>Capture summary</h2>") < page.index("<h2>Findings by severity</h2>")
    assert ('<h3 id="incident-1"><span class="critical">incident-1: CRITICAL</span>: Probe to the RIP ports '
            "-&gt; echo-loop</h3>") in page
    chain = page[page.index("<h3>incident-1 chain</h3>"):page.index("</ol>")]
    assert re.findall(r'<li><strong>([^<]+)</strong> \(<a href="#f(\d)">', chain) == [
        ("root cause: rip-trigger (critical)", "2"), ("effect: echo-loop (critical)", "1")]
    assert page.count('<li>incident: <a href="#incident-1">incident-1</a></li>') == 2
    # the hostile capture's loop is its own incident; its packet text is escaped in the opening too
    hostile_page = (hostile[0] / "report.html").read_text()
    opening = hostile_page[:hostile_page.index("<h2>Capture summary</h2>")]
    assert "<h3>incident-1 chain</h3>" in opening and "<script" not in opening.lower()


def test_incident_text_from_packets_stays_text(incident):
    """The incidents' titles, summaries and chains quote findings' messages and identifiers, which quote packets:
    in report.md they render as text only, in report.html they are escaped."""
    import json

    from detector.incidents import correlate
    from detector.report.evidence import EvidenceResult
    from detector.report.render import html_report, markdown

    out, findings = incident
    document = json.loads((out / "findings.json").read_text())
    hostile = " ".join(MARKDOWN_NAMES) + " <script>alert(1)</script>"
    crafted = [dataclasses.replace(f, msg=f"{hostile} {f.msg}", identifier=f"{HOSTILE_FILE} {f.identifier}",
                                   incident_id=None) for f in findings]
    rules = load_rules()
    incidents = correlate(crafted, rules)
    assert len(incidents) == 1
    text = markdown(document, crafted, rules, EvidenceResult(None), incidents)
    opening = text[:text.index("## Capture summary")]
    page = _Elements()
    page.feed(_renderer().render(opening))
    assert page.tags <= REPORT_TAGS, page.tags - REPORT_TAGS
    shown = " ".join("".join(page.text).split())
    for name in MARKDOWN_NAMES:
        assert name in shown
    html_page = html_report(document, crafted, rules, EvidenceResult(None), [], incidents)
    html_opening = html_page[:html_page.index("<h2>Capture summary</h2>")]
    assert "<script" not in html_opening and "<img" not in html_opening
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html_opening


def test_ipv6_endpoints_keep_their_port_readable(tmp_path):
    # "2001:db8:10::80:443" reads as one address; the report writes [2001:db8:10::80]:443, as the findings do
    analyze([str(CAPTURES / "pmtud-blackhole-ipv6-vlan.pcapng")], tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "- endpoints: `TCP [2001:db8:10::80]:443 -> [2001:db8:77::23]:52020`" in text
    assert "2001:db8:10::80:443" not in text


def _evidence_pass(name, tmp_path):
    """`detector analyze` of one bundled capture, then its evidence pass again with the rules' figures at hand:
    (analysis, records, series, figures, report.html)."""
    path = str(CAPTURES / name)
    _findings, result, _out = analyze([path], tmp_path)
    bins = time_bins(result.stats.first_ns, result.stats.last_ns)
    figures = rule_figures(result.detectors, result.findings, bins)
    records, series = collect([path], result.findings, bins, figures)
    return result, records, series, figures, (tmp_path / "report.html").read_text()


def test_series_count_every_packet_and_every_loop_copy(tmp_path):
    result, records, series, figures, page = _evidence_pass("echo-loop-rip-ipv4.pcapng", tmp_path)
    assert int(series.packets.sum()) == result.stats.packets == 6532
    (loop,) = [f for f in result.findings if f.rule == "echo-loop"]
    (copies,) = figures         # the probe's rule draws nothing of its own
    assert isinstance(copies, CopiesFigure) and copies.title == f"Looping frame {loop.identifier}: copies per second"
    assert int(copies.copies.sum()) == 6000
    # the loop lasts 0.24 s at 25,000/s: its bins carry it, the rest of the capture none
    busy = copies.copies > 0
    assert busy.sum() * series.bin_ns <= 0.26e9
    assert f'alt="{copies.title}"' in page
    wanted = {n for f in result.findings for n in f.evidence["evidence_frames"]}
    assert set(records) == wanted


def test_pmtud_figure_plots_every_packet_of_the_flow(tmp_path):
    result, _records, _series, figures, page = _evidence_pass("pmtud-blackhole-ipv4.pcapng", tmp_path)
    (segments,) = [f for f in figures if isinstance(f, SegmentsFigure)]
    assert segments.finding.rule == "pmtud-blackhole"
    t, size, forward = segments.points()
    flows = result.flows
    row = flows[flows["community_id"] == segments.finding.community_id].iloc[0]
    assert len(t) == row["src2dst_packets"] + row["dst2src_packets"]
    # the host keeps sending full-size segments past the reported MTU's payload (1420 - 40)
    assert size[forward].max() == 1460 and (size[forward] > 1380).sum() >= 6
    assert 'alt="Segment sizes of the PMTUD flow vs MSS and MTU"' in page


def test_rss_heat_map_shows_the_saturated_queue(tmp_path):
    result, _records, _series, figures, page = _evidence_pass("rss-single-flow-flood.pcap", tmp_path)
    (finding,) = [f for f in result.findings if f.rule == "rss-saturation"]
    (heat,) = [f for f in figures if isinstance(f, QueueShareFigure)]
    stats = result.stats
    assert heat.packets.sum() == stats.layers["ipv4"] + stats.layers.get("ipv6", 0)
    # the heat map's columns are the rule's own bins (bin_ms), not the report's
    assert heat.width_ns == finding.evidence["bin_ms"] * 1_000_000
    # the saturated bin's column: the queue's share there is the message's
    (start,) = finding.evidence["bin_starts"]
    column = int((np.datetime64(start.rstrip("Z"), "ns").astype(np.int64) - heat.first_ns) // heat.width_ns)
    per_queue = heat.packets[column]
    assert per_queue.argmax() == finding.evidence["queue"]
    assert round(per_queue.max() / per_queue.sum(), 4) == finding.evidence["share_ratio"] > 0.5
    assert f"took {finding.evidence['share_ratio']:.0%} of {per_queue.sum():,} packets" in finding.msg
    assert 'alt="Share of packets per receive queue' in page


def test_no_rule_figure_without_its_findings(tmp_path):
    """The balanced capture has traffic on every queue but no saturation: the RSS rule draws nothing, and the
    report holds only the traffic and the talkers."""
    result, _records, _series, figures, page = _evidence_pass("rss-balanced-busy.pcap", tmp_path)
    assert result.findings == [] and figures == []
    assert re.findall(r'<img alt="([^"]*)"', page) == ["Packets per second (finding intervals shaded)",
                                                       "Top 10 talkers"]


def test_info_findings_alone_give_a_short_report_with_an_appendix(tmp_path):
    """The near-misses are all info: no incident, no section each, one appendix row each (rule, where, what,
    count) in both reports; findings.json keeps them whole."""
    import json

    findings, result, _path = analyze([str(CAPTURES / "scan-near-misses.pcap")], tmp_path)
    assert findings and {f.severity for f in findings} == {"info"} and result.incidents == []
    text = (tmp_path / "report.md").read_text()
    assert "## Incidents" not in text and "\n## 1. " not in text
    assert f"No finding of low or above, so no incident: {len(findings)} info findings in the appendix" in text
    appendix = text[text.index("## Appendix: info findings"):].splitlines()
    rows = [line for line in appendix if re.match(r"\| \d+ \|", line)]
    assert len(rows) == len(findings)
    for (number, f), row in zip(enumerate(findings, 1), rows):
        assert row.startswith(f"| {number} | {f.rule} | ") and row.endswith(f" | {f.n:,} |")
    assert len(text.splitlines()) <= 60
    assert "Wireshark's view" not in text          # no frame is dissected for a table row
    page = (tmp_path / "report.html").read_text()
    assert "<h2>Incidents</h2>" not in page and '<h2 id="f' not in page
    assert len(re.findall(r'<tr id="f\d+">', page)) == len(findings)
    document = json.loads((tmp_path / "findings.json").read_text())
    assert len(document["findings"]) == len(findings) and document["incidents"] == []
    assert {f.get("incident_id") for f in document["findings"]} == {None}


def test_a_many_interface_pcapng_of_info_findings_has_a_short_report(tmp_path, captures_real):
    # a real pcapng of 126 interfaces (Zeek's test traces): its only finding is info, its report short
    findings, result, _path = analyze([str(captures_real / "zeek/testing/btest/Traces/ldap/gap-data-missing.pcapng")],
                                      tmp_path)
    assert len(result.captures[0]["interfaces"]) == 126
    assert findings and {f.severity for f in findings} == {"info"} and result.incidents == []
    text = (tmp_path / "report.md").read_text()
    assert len(text.splitlines()) <= 400 and "## Incidents" not in text and "## Appendix: info findings" in text
    # its capture-loss finding counts ack gaps over the whole capture: its place is the capture point, in words
    assert "| 1 | capture-loss | the capture point | " in text
    page = (tmp_path / "report.html").read_text()
    assert '<tr id="f1"><td>1</td><td>capture-loss</td><td>the capture point</td>' in page


def _two_incidents_the_worst_later():
    """two-incidents-at-once with its loop (critical) moved ten minutes later: the black hole (high) is now
    incident-1 by time, the loop incident-2. (document, findings, incidents)."""
    from detector.analysis import analyze as analysis
    from detector.findings import canonical_order
    from detector.incidents import correlate
    from detector.report import findings_document

    rules = load_rules()
    result = analysis([CAPTURES / "two-incidents-at-once.pcapng"], rules)
    later = 600 * 10**9
    moved = [dataclasses.replace(f, incident_id=None, **({"first_seen": f.first_seen + later,
                                                          "last_seen": f.last_seen + later}
                                                         if f.rule in ("rip-trigger", "echo-loop", "rss-saturation")
                                                         else {})) for f in result.findings]
    moved = canonical_order(moved)
    incidents = correlate(moved, rules)
    assert [(i.id, i.severity) for i in incidents] == [("incident-1", "high"), ("incident-2", "critical")]
    document = findings_document(result.captures, {**result.stats.to_json(), "flows": result.flow_count}, moved,
                                 incidents=incidents)
    return document, moved, incidents


def test_both_reports_open_with_the_worst_incident():
    from detector.report.evidence import EvidenceResult
    from detector.report.render import html_report, markdown

    document, findings, incidents = _two_incidents_the_worst_later()
    text = markdown(document, findings, load_rules(), EvidenceResult(None), incidents)
    assert re.findall(r"^### (incident-\d): (\w+)", text, flags=re.M) == [("incident-2", "CRITICAL"),
                                                                          ("incident-1", "HIGH")]
    assert re.findall(r"^### (incident-\d) chain", text, flags=re.M) == ["incident-2", "incident-1"]
    page = html_report(document, findings, load_rules(), EvidenceResult(None), [], incidents)
    assert re.findall(r'<h3 id="(incident-\d)"', page) == ["incident-2", "incident-1"]


def test_the_terminal_summary_lists_incidents_worst_first_in_twenty_lines():
    from detector.commands import SUMMARY_LINES_MAX, analyze_summary

    _document, findings, incidents = _two_incidents_the_worst_later()
    loose = [dataclasses.replace(findings[0], severity="low", incident_id=None, msg=f"loose {k}\n finding")
             for k in range(30)]
    info = [dataclasses.replace(findings[0], severity="info", incident_id=None) for _ in range(3)]
    lines = analyze_summary(findings + loose + info, incidents, "out")
    assert lines[0].startswith("critical  incident-2   Probe to the RIP ports -> echo-loop")
    assert lines[1].startswith("high      incident-1   ")
    assert lines[2] == f"low       {findings[0].rule:<12} loose 0 finding"
    assert len(lines) == SUMMARY_LINES_MAX + 1
    assert lines[SUMMARY_LINES_MAX - 1] == f"... and {2 + 30 - SUMMARY_LINES_MAX + 1} more in out/report.md"
    assert lines[-1] == "3 info findings (a description of the network, no incident) in out/findings.json"
    assert analyze_summary(findings[:1], incidents[1:], "out") == [lines[0]]


def test_a_cut_capture_says_so_first_in_both_reports(tmp_path):
    import html

    cut = tmp_path / "cut.pcapng"
    cut.write_bytes((CAPTURES / "echo-loop-rip-ipv4.pcapng").read_bytes()[:-5])
    _findings, result, _path = analyze([str(cut)], tmp_path / "out")
    (warning,) = result.warnings
    assert warning.startswith(f"{cut} at byte ") and result.incidents
    text = (tmp_path / "out" / "report.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:2] == ["## What is wrong with the capture", "## Incidents"]
    facts = text[text.index("## What is wrong"):text.index("## Incidents")]
    offset = re.search(r"at byte \d+: .*", warning).group()
    assert f"- `{cut}` {offset}" in facts
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.index("<h2>What is wrong with the capture</h2>") < page.index(html.escape(warning)) < page.index(
        "<h2>Incidents</h2>")


def test_a_syn_flood_report_reads_without_escapes_or_reprs(tmp_path):
    """report.md of the spoofed SYN flood: addresses as code, booleans as yes/no, nested evidence as a sub-list,
    an empty list as none; no backslash, HTML entity or Python repr outside code."""
    analyze([str(CAPTURES / "syn-flood-spoofed.pcap")], tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "- endpoints: `TCP - -> 10.30.0.80:443`" in text
    assert "\n- completion_known: yes\n" in text and "\n- distributed: yes\n" in text
    assert "\n- spoofing:\n  - judged_attempts: 0\n" in text and "\n  - spoofed: no\n" in text
    assert "\n- top_sources: none\n" in text
    outside = _outside_code(text)
    for noise in ("True", "False", "None", "{'", "['", "\\", "&gt;", "&lt;", "&#", "&amp;"):
        assert noise not in outside, noise


@pytest.mark.parametrize("text, shown", [
    ("10.10.10.10:25565 sent 1 probe", "`10.10.10.10:25565` sent 1 probe"),
    ("TCP - -> 10.10.10.10:25565", "TCP - -> `10.10.10.10:25565`"),
    ("completion_known: no", "completion_known: no"),
    ("see https://github.com/x/y.", "see `https://github.com/x/y`."),
    ("Duration 23.684 s", "Duration 23.684 s"),
    ("1. not a list", "1\\. not a list"),
    ("# not a heading, *not em* _nor_ this", "\\# not a heading, \\*not em\\* \\_nor\\_ this"),
    ("<b>x</b> & &amp; a<b", "\\<b>x\\</b> & \\&amp; a\\<b"),
    ("a ` b ``", "a \\` b \\`\\`"),
])
def test_markdown_text_escapes_only_what_a_viewer_acts_on(text, shown):
    from detector.report.render import markdown_code, markdown_text

    assert markdown_text(text) == shown
    assert markdown_code("a``b|c", cell=True) == "```a``b\\|c```"
    assert markdown_code("`x") == "`` `x ``"


def test_a_rule_texts_code_spans_stay_code():
    from detector.report.render import markdown_paragraphs

    shown = markdown_paragraphs("Find the port (`show mac address-table`, `bridge fdb show`) and shut it.\n\n"
                                "# not a heading `a|b` - c\n  d")
    assert shown == ("Find the port (`show mac address-table`, `bridge fdb show`) and shut it.\n\n"
                     "\\# not a heading `a|b` - c d")


def test_top_talkers_from_the_tables_numbers_match_its_frame():
    """The report reads the flow table as numbers (no pandas); the notebook hands its DataFrame: the same
    addresses and bytes, the most first and equal ones by their text, IPv4 and IPv6 alike."""
    from detector import analysis
    from detector.report.render import TOP_TALKERS, _top_talkers

    captures = Path(__file__).resolve().parents[1] / "captures"
    done = analysis.analyze([str(captures / "benign-office.pcapng")])
    names, sent = _top_talkers(done.context.flow_columns())
    frame_names, frame_sent = _top_talkers(done.flow_table.to_frame())
    assert names == frame_names and sent.tolist() == frame_sent.tolist()
    assert len(names) == TOP_TALKERS and any(":" in name for name in names)
    assert sent.tolist() == sorted(sent.tolist(), reverse=True)

"""Wireshark's view of the cited frames (detector.report.dissect) and Capture.dissect, against tshark's own
output: the packet details report.md and report.html show for a frame are `tshark -V`'s for that frame of its
evidence pcap, line for line; the Expert Info is tshark's (severity, group, message); packet text stays text;
a missing, hung or failing tshark leaves a note and a complete report."""
from __future__ import annotations

import html
import os
import re
import stat
from html.parser import HTMLParser
from pathlib import Path

import pytest

import detector
from detector.commands import analyze
from detector.errors import UsageError
from detector.report import dissect
from tests._real import require_real

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
# a real capture with Expert Info that depends on the frames before it: frame 27 is an out-of-order segment
REAL_SMTP = "suricata-verify/tests/bug-3616-smtp/input.pcap"


class _Views(HTMLParser):
    """report.html's Wireshark sections: per dissected frame its heading, Expert Info items and <pre> text."""

    def __init__(self):
        super().__init__()
        self.frames: list[dict] = []
        self._into: str | None = None

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class")
        if tag == "p" and cls == "dissected":
            self.frames.append({"heading": "", "expert": [], "tree": ""})
            self._into = "heading"
        elif tag == "li" and self.frames and self._into in ("expert", None) and self._in_expert:
            self.frames[-1]["expert"].append("")
            self._into = "expert"
        elif tag == "pre" and cls == "dissection":
            self._into = "tree"
        if tag == "ul":
            self._in_expert = cls == "expert"

    _in_expert = False

    def handle_endtag(self, tag):
        if tag in ("p", "li", "pre"):
            self._into = None
        if tag == "ul":
            self._in_expert = False

    def handle_data(self, data):
        if self._into == "heading":
            self.frames[-1]["heading"] += data
        elif self._into == "expert":
            self.frames[-1]["expert"][-1] += data
        elif self._into == "tree":
            self.frames[-1]["tree"] += data


def _html_views(out: Path) -> list[dict]:
    parser = _Views()
    parser.feed((out / "report.html").read_text())
    return parser.frames


def _markdown_trees(out: Path) -> list[str]:
    """The fenced code blocks of report.md (the packet details), in order."""
    text = (out / "report.md").read_text()
    return [body for _fence, body in re.findall(r"^(`{3,})text\n(.*?)\n\1$", text, flags=re.S | re.M)]


def _tshark_frames(tshark, pcap: Path, count: int) -> dict[int, list[str]]:
    """`tshark -2 -V` of the first `count` frames of `pcap` (both passes, as Wireshark shows the file): frame
    number -> its lines."""
    frames: dict[int, list[str]] = {}
    shown = tshark.run(pcap, "-2", "-V", "-Y", f"frame.number <= {count}")
    for block in re.split(r"\n(?=Frame \d+: )", shown.strip("\n")):
        lines = [line for line in block.split("\n") if line.strip()]
        frames[int(re.match(r"Frame (\d+): ", lines[0]).group(1))] = lines
    return frames


def _as_shown(line: str, brackets: bool = True) -> tuple[int, str]:
    """A `tshark -V` line as the report shows it: its depth and its text; without `brackets` (tshark's PDML,
    which does not mark generated fields), a generated field's [brackets] off."""
    text = line.lstrip(" ")
    depth = (len(line) - len(text)) // 4
    if not brackets and text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return depth, text


def _shown(tree: str) -> list[tuple[int, str]]:
    return [((len(line) - len(line.lstrip(" "))) // 4, line.lstrip(" ")) for line in tree.split("\n")]


def _heading_numbers(heading: str) -> tuple[int, int, str, str]:
    """(capture frame, evidence frame, evidence pcap, protocols) of a frame's heading."""
    match = re.fullmatch(r"Frame ([\d,]+) of the capture \(frame (\d+) of (\S+)\): (\S+)", heading)
    assert match, heading
    return int(match.group(1).replace(",", "")), int(match.group(2)), match.group(3), match.group(4)


@pytest.fixture(scope="module")
def pmtud(tmp_path_factory):
    out = tmp_path_factory.mktemp("pmtud")
    findings, _result, _path = analyze([str(CAPTURES / "pmtud-blackhole-ipv4.pcapng")], out)
    return out, findings


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile")
    findings, _result, _path = analyze([str(CAPTURES / "hostile-markup.pcapng")], out)
    return out, findings


@pytest.fixture(scope="module")
def pmtud_by_tshark(tmp_path_factory):
    """The pmtud report where sharkd is missing: one tshark run per evidence pcap."""
    out = tmp_path_factory.mktemp("pmtud-tshark")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dissect, "sharkd_path", lambda tshark=None: None)
        findings, _result, _path = analyze([str(CAPTURES / "pmtud-blackhole-ipv4.pcapng")], out)
    return out, findings


def test_sharkd_is_the_tsharks_sibling(tshark):
    """Debian's tshark depends on wireshark-common, which ships sharkd: CI dissects with it."""
    assert dissect.sharkd_path(tshark.path) is not None


@pytest.mark.parametrize("case", ["pmtud", "hostile", "pmtud_by_tshark"])
def test_shown_details_are_tsharks_for_that_frame_of_the_evidence_pcap(case, request, tshark):
    out, findings = request.getfixturevalue(case)
    by = "sharkd" if case != "pmtud_by_tshark" else "tshark"
    assert f"dissected by {by} (wireshark/" in (out / "report.md").read_text()
    views = _html_views(out)
    trees = _markdown_trees(out)
    with_pcap = [f for f in findings if f.evidence_pcap]
    assert len(views) == len(trees) == sum(min(dissect.FRAMES_PER_FINDING, f.evidence["evidence_packets"])
                                           for f in with_pcap)
    checked = 0
    for view, md_tree in zip(views, trees):
        capture_frame, number, pcap, protocols = _heading_numbers(" ".join(html.unescape(view["heading"]).split()))
        (finding,) = [f for f in with_pcap if f.evidence_pcap == pcap]
        # the frame the heading names is that finding's cited frame at that place of its evidence pcap
        assert capture_frame == sorted(set(finding.evidence["evidence_frames"]))[number - 1]
        expected = _tshark_frames(tshark, out / pcap, number)[number]
        shown = _shown(view["tree"])
        assert view["tree"] == md_tree                                     # both reports show the same text
        assert len(shown) == min(len(expected), dissect.LINES_PER_FRAME_MAX)
        for (depth, text), line in zip(shown, expected):
            want_depth, want = _as_shown(line, brackets=by == "sharkd")
            assert depth == want_depth, (text, line)
            assert text == want or (text.endswith("...") and want.startswith(text[:-3])), (text, line)
        assert protocols == tshark.fields(out / pcap, "frame.protocols",
                                          display_filter=f"frame.number == {number}")[0][0]
        checked += 1
    assert checked >= 2


def _tshark_expert(tshark, pcap: Path, number: int) -> list[tuple[str, str, str]]:
    """(severity, group, message) of `tshark -V`'s Expert Info lines for frame `number`."""
    lines = _tshark_frames(tshark, pcap, number)[number]
    found = [re.fullmatch(r"\s*\[Expert Info \((\w+)/([\w ]+)\): (.*)\]", line) for line in lines]
    return [m.groups() for m in found if m]


@pytest.mark.parametrize("case", ["pmtud", "hostile", "pmtud_by_tshark"])
def test_expert_info_is_tsharks(case, request, tshark):
    out, _findings = request.getfixturevalue(case)
    raised = 0
    for view in _html_views(out):
        _frame, number, pcap, _protocols = _heading_numbers(" ".join(html.unescape(view["heading"]).split()))
        shown = [re.fullmatch(r"Expert Info \((\w+)/([\w ]+)\), [\w.]+: (.*)", html.unescape(item))
                 for item in view["expert"]]
        if view["expert"] == ["Expert Info: none"]:
            shown = []
        assert None not in shown, view["expert"]
        assert [m.groups() for m in shown] == _tshark_expert(tshark, out / pcap, number)
        raised += len(shown)
    assert raised >= 1     # the retransmitted segments (Note/Sequence), the repeated DNS query (Warning/Protocol)


def test_expert_info_severities_of_the_bundled_captures(pmtud, hostile):
    severities = {re.match(r"Expert Info \((\w+)/", html.unescape(item)).group(1)
                  for out, _ in (pmtud, hostile) for view in _html_views(out) for item in view["expert"]
                  if item != "Expert Info: none"}
    assert {"Note", "Warning"} <= severities
    assert severities <= set(dissect.SEVERITIES)


def test_hostile_dissection_shows_markup_as_text(hostile):
    out, _findings = hostile
    page = (out / "report.html").read_text()
    assert HOSTILE not in page and "<script" not in page.lower()
    trees = [view["tree"] for view in _html_views(out)]
    # the DNS name tshark decodes is in the packet details, as text
    assert any(f"Name: {HOSTILE}" in tree for tree in trees)
    # report.md: the raw name only inside the fenced blocks and code spans, where a viewer shows it as it is
    text = (out / "report.md").read_text()
    outside = re.sub(r"^(`{3,})text\n.*?\n\1$", "", text, flags=re.S | re.M)
    outside = re.sub(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)", "", outside)
    assert HOSTILE not in outside and any(HOSTILE in tree for tree in _markdown_trees(out))


def test_markdown_viewer_keeps_the_dissection_a_code_block(hostile):
    """report.md through a CommonMark/GFM renderer: each packet-details block is one <pre><code>, its markup
    text, nothing else of the section becomes an element."""
    from markdown_it import MarkdownIt

    out, _findings = hostile
    rendered = MarkdownIt("commonmark", {"linkify": True}).enable(["table", "strikethrough", "linkify"]).render(
        (out / "report.md").read_text())
    blocks = re.findall(r'<pre><code class="language-text">(.*?)</code></pre>', rendered, flags=re.S)
    assert len(blocks) == len(_markdown_trees(out))
    assert any(html.escape(HOSTILE, quote=False) in block.replace("&quot;", '"') for block in blocks)
    assert "<script" not in rendered
    assert re.findall(r"<img[^>]*>", rendered) == ['<img src="timeline.png" alt="Findings on one time axis" />']


def test_a_fence_no_packet_text_can_close(tmp_path):
    # a line of backticks in packet text (an HTTP method, a DNS label) would end a ``` block early
    lines = dissect._fenced("GET / HTTP/1.1\n```\nstill inside ````` here\x1b[2J")
    assert lines[0] == "``````text" and lines[-1] == "``````"
    assert "\x1b" not in "".join(lines) and "\\x1b[2J" in lines[-2]


def test_bounds_cut_long_trees_and_lines(tmp_path, tshark):
    """A DNS answer of 100 records dissects to more lines than a frame may show, and a query for a 243-character
    name to a line longer than one may be: both are cut, and say so."""
    from scapy.all import DNS, DNSQR, DNSRR, IP, UDP, Ether, wrpcap

    answers = DNSRR(rrname="a.example", rdata="192.0.2.1")
    for k in range(2, 101):
        answers = answers / DNSRR(rrname="a.example", rdata=f"192.0.2.{k}")
    wrpcap(str(tmp_path / "big.pcap"), [
        Ether(src="02:00:5e:00:00:01", dst="02:00:5e:00:00:02") / IP(src="192.0.2.53", dst="192.0.2.9")
        / UDP(sport=53, dport=5353) / DNS(id=1, qr=1, qd=DNSQR(qname="a.example"), ancount=100, an=answers),
        Ether(src="02:00:5e:00:00:01", dst="02:00:5e:00:00:02") / IP(src="192.0.2.7", dst="192.0.2.53")
        / UDP(sport=40000, dport=53) / DNS(id=2, qd=DNSQR(qname=".".join(["x" * 60] * 4)))])
    big, query = dissect.dissect_file(tshark.path, tmp_path / "big.pcap", 2)
    full = _tshark_frames(tshark, tmp_path / "big.pcap", 2)
    assert len(big.tree) == dissect.LINES_PER_FRAME_MAX
    assert big.lines_cut == len(full[1]) - dissect.LINES_PER_FRAME_MAX > 0
    assert "more lines: tshark -n -2 -V -r x.pcap -Y frame.number==1" in dissect._shown_tree(big, "x.pcap")
    # tshark cuts the name at 240 characters ("Name [truncated]: xxx..."), the report at LINE_CHARS_MAX
    (name,) = [text for _depth, text in query.tree if text.startswith("Name [truncated]: ")]
    assert len(name) == dissect.LINE_CHARS_MAX and name.endswith("...")
    assert any(len(line.strip()) > dissect.LINE_CHARS_MAX and line.strip().startswith(name[:-3]) for line in full[2])
    assert max(len(text) for _depth, text in query.tree) <= dissect.LINE_CHARS_MAX


def test_pdml_past_its_bound_is_refused_not_held(tmp_path, tshark, monkeypatch):
    from scapy.all import DNS, DNSQR, IP, UDP, Ether, wrpcap

    wrpcap(str(tmp_path / "q.pcap"), [Ether(src="02:00:5e:00:00:01", dst="02:00:5e:00:00:02")
                                      / IP(src="192.0.2.7", dst="192.0.2.53") / UDP(sport=40000, dport=53)
                                      / DNS(id=2, qd=DNSQR(qname="a.example"))])
    size = len(tshark.run(tmp_path / "q.pcap", "-T", "pdml"))
    monkeypatch.setattr(dissect, "PDML_BYTES_MAX", size - 1)
    with pytest.raises(dissect.DissectError, match="is over 0 MiB: left out"):
        dissect.dissect_file(tshark.path, tmp_path / "q.pcap", 1)
    monkeypatch.setattr(dissect, "PDML_BYTES_MAX", size + 4096)     # the PDML header carries the time it ran
    assert len(dissect.dissect_file(tshark.path, tmp_path / "q.pcap", 1)) == 1


def test_without_tshark_the_report_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    findings, _result, _path = analyze([str(CAPTURES / "pmtud-blackhole-ipv4.pcapng")], tmp_path / "out")
    assert findings
    for name in ("report.md", "report.html"):
        text = (tmp_path / "out" / name).read_text()
        assert "Wireshark&#x27;s view of the cited frames is left out: tshark is not installed" in text \
            or "Wireshark's view of the cited frames is left out: tshark is not installed" in text
        assert "Packet details" not in text and "```text" not in text


def _fake_tshark(folder: Path, body: str, name: str = "tshark") -> None:
    folder.mkdir(exist_ok=True)
    script = folder / name
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def _with_sharkd(folder: Path, tshark, body: str) -> None:
    """A tshark that is the real one and a sharkd beside it that does `body` (the real one is $SHARKD)."""
    real = Path(tshark.path).resolve()
    _fake_tshark(folder, f'exec "{real}" "$@"')
    _fake_tshark(folder, f'SHARKD="{real.parent / "sharkd"}"\n{body}', name="sharkd")


@pytest.mark.parametrize("body, by", [
    ("exit 1", "tshark"),                                              # sharkd fails at once: tshark does it all
    ('echo "not json"; exit 0', "tshark"),                             # sharkd answers nonsense
    # it ends after one file: its answers past the first file's are lost and its output closes (the shell lets go
    # of the pipes, which it would otherwise hold until sharkd, still reading its requests, ends)
    ('exec 3>&1 4<&0 >/dev/null 2>&1\n"$SHARKD" - <&4 3>&- 4<&- | head -n 13 >&3 3>&- 4<&- &\nexec 3>&- 4<&-\nwait',
     "sharkd and tshark"),
    # a line that answers nothing (a banner, a warning on stdout) shifts no answer: they are known by id
    ('echo "a stray line"; echo \'{"jsonrpc":"2.0","id":999}\'; exec "$SHARKD" - 2>/dev/null', "sharkd"),
])
def test_a_failing_sharkd_leaves_it_to_tshark(tmp_path, monkeypatch, tshark, body, by):
    _with_sharkd(tmp_path / "bin", tshark, body)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    findings, _result, _path = analyze([str(CAPTURES / "pmtud-blackhole-ipv4.pcapng")], tmp_path / "out")
    text = (tmp_path / "out" / "report.md").read_text()
    assert f"dissected by {by} (wireshark/" in text and "Not shown" not in text
    assert len(_markdown_trees(tmp_path / "out")) == sum(min(dissect.FRAMES_PER_FINDING,
                                                             f.evidence["evidence_packets"])
                                                         for f in findings if f.evidence_pcap)


@pytest.mark.parametrize("body, says", [
    # a hung tshark, with a child of its own: the timeout ends both (the child is looked at below)
    ("sleep 600 >/dev/null 2>&1 & echo $! >> \"$0.children\"; sleep 30", "tshark took longer than 1 s"),
    ("echo 'tshark: The file \"x\" appears to be damaged' >&2; exit 2", "(exit 2): tshark: The file"),
    ("echo 'not xml at all'", "tshark gave no PDML"),
])
def test_a_failing_tshark_costs_only_the_view(tmp_path, monkeypatch, body, says):
    _fake_tshark(tmp_path / "bin", body)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(dissect, "TSHARK_TIMEOUT_S", 1.0)
    findings, _result, _path = analyze([str(CAPTURES / "pmtud-blackhole-ipv4.pcapng")], tmp_path / "out")
    text = (tmp_path / "out" / "report.html").read_text()
    notes = re.findall(r"<p>Not shown: (.*?)</p>", text)
    assert len(notes) == len([f for f in findings if f.evidence_pcap]) and all(says in n for n in notes), notes
    assert f"tshark failed on {len(notes)} evidence files" in text
    assert (tmp_path / "out" / "findings.json").is_file()
    children = tmp_path / "bin" / "tshark.children"
    pids = [int(pid) for pid in (children.read_text().split() if children.exists() else ())]
    alive = [pid for pid in pids if not _ended(pid)]
    for pid in alive:
        os.kill(pid, 9)
    assert body[:5] != "sleep" or pids, "the fake tshark did not run"
    assert alive == [], "tshark's children outlived its timeout"


def test_a_sharkd_answer_past_its_bound_is_left_out_not_held(tmp_path, monkeypatch, tshark):
    """Each answer is bounded as tshark's PDML is, and made a bounded Dissection as it comes: one past the bound
    is a note in its finding's view, and sharkd's others still show."""
    monkeypatch.setattr(dissect, "PDML_BYTES_MAX", 12_000)      # a TCP segment's answer is 12-17 KB here
    findings, _result, _path = analyze([str(CAPTURES / "pmtud-blackhole-ipv4.pcapng")], tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "dissected by sharkd (wireshark" in text
    notes = re.findall(r"Not shown: sharkd.s dissection of frame (\d+) is over 0 MiB: left out", text)
    assert 0 < len(notes) < len([f for f in findings if f.evidence_pcap])
    assert _markdown_trees(tmp_path), "the frames under the bound are still shown"


def test_the_reports_deadline_for_tshark_bounds_them_all(tmp_path, monkeypatch, tshark):
    # a sharkd that hangs takes the whole deadline; no tshark run starts after it
    _with_sharkd(tmp_path / "bin", tshark, "sleep 30")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(dissect, "REPORT_DEADLINE_S", 0.5)
    findings, _result, _path = analyze([str(CAPTURES / "pmtud-blackhole-ipv4.pcapng")], tmp_path)
    notes = re.findall(r"<p>Not shown: (.*?)</p>", (tmp_path / "report.html").read_text())
    assert notes == ["the report&#x27;s 0.5 s for tshark ran out"] * len([f for f in findings if f.evidence_pcap])


def _ended(pid: int) -> bool:
    """The process is gone or a zombie (killed, its parent not yet reaped it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_the_budget_dissects_root_causes_first(pmtud):
    _out, findings = pmtud
    from detector.report.evidence import EvidenceResult

    evidence = EvidenceResult(None, frames={i: [1, 2, 3, 4] for i in range(len(findings))})
    everyone = dissect.plan(findings, evidence)
    assert everyone == dict.fromkeys(range(len(findings)), dissect.FRAMES_PER_FINDING)
    last = len(findings) - 1
    incidents = [{"id": "incident-1", "root_cause": last}]
    original = dissect.FRAMES_MAX
    try:
        dissect.FRAMES_MAX = 1
        assert dissect.plan(findings, evidence) == {0: 1}
        assert dissect.plan(findings, evidence, dissect.root_causes(findings, incidents)) == {last: 1}
        # a root cause named by its rule among the incident's findings (Finding.incident_id)
        findings[last].incident_id = "incident-1"
        by_rule = [{"id": "incident-1", "root_cause": findings[last].rule}]
        assert dissect.root_causes(findings, by_rule) == {last}
        assert dissect.root_causes(findings, [{"id": "incident-2", "root_cause": findings[last].rule}]) == set()
    finally:
        dissect.FRAMES_MAX = original
        findings[last].__dict__.pop("incident_id", None)


def test_at_most_twenty_frames_in_a_report(pmtud):
    _out, findings = pmtud
    from detector.report.evidence import EvidenceResult

    many = findings * 6                     # more findings than the budget has frames for three each
    counts = dissect.plan(many, EvidenceResult(None, frames={i: [1, 2, 3, 4] for i in range(len(many))}))
    assert sum(counts.values()) == dissect.FRAMES_MAX == 20
    assert set(counts) == set(range(len(many)))              # every finding gets its first frame
    assert max(counts.values()) <= dissect.FRAMES_PER_FINDING
    assert [counts[i] for i in range(len(many))] == sorted(counts.values(), reverse=True)    # canonical order


# ---- Capture.dissect ---------------------------------------------------------------------------------------
def test_capture_dissect_is_tsharks_packet_on_a_real_capture(tshark):
    path = require_real() / REAL_SMTP
    cap = detector.open(path)
    packet = cap.dissect(27)
    assert int(packet.number) == 27
    fields = ("frame.protocols", "ip.src", "ip.dst", "tcp.srcport", "tcp.dstport", "tcp.seq_raw", "tcp.len")
    (row,) = tshark.fields(path, *fields, display_filter="frame.number == 27")
    assert [packet.frame_info.protocols, packet.ip.src, packet.ip.dst, packet.tcp.srcport, packet.tcp.dstport,
            packet.tcp.seq_raw, packet.tcp.len] == row
    # Wireshark's out-of-order verdict needs the 26 frames before it: dissected in context, as tshark does
    expert = [(e.severity, e.group, e.message) for e in dissect._expert(packet)]
    assert expert == _tshark_expert(tshark, path, 27)
    assert ("Warning", "Sequence", "This frame is a (suspected) out-of-order segment") in expert
    assert packet.tcp.analysis_out_of_order is not None        # as a notebook reads it (pyshark's names)


def test_capture_dissect_across_files_and_its_errors(tshark):
    first, second = CAPTURES / "pmtud-blackhole-ipv4.pcapng", CAPTURES / "hostile-markup.pcapng"
    cap = detector.open(first, second)
    frames = cap.packets["frame"]
    before = len(detector.open(first).packets)
    packet = cap.dissect(before + 2)                 # the second file's frame 2
    assert int(packet.number) == 2
    (row,) = tshark.fields(second, "dns.qry.name", "ip.id", display_filter="frame.number == 2")
    assert [packet.dns.qry_name, packet.ip.id] == row
    assert int(cap.dissect(1).number) == 1 and frames.iloc[0] == 1
    for bad in (0, -1, "3", 2.0, True):
        with pytest.raises(UsageError, match="frame number from 1"):
            cap.dissect(bad)
    with pytest.raises(UsageError, match=f"the capture has {len(frames):,} frames"):
        cap.dissect(len(frames) + 1)
    with pytest.raises(UsageError, match="has no frame 999"):
        detector.open(first).dissect(999)


def test_capture_dissect_without_tshark(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UsageError, match="tshark is not installed"):
        detector.open(CAPTURES / "hostile-markup.pcapng").dissect(1)

"""report.md and report.html: the postmortem a responder reads top-down, from the findings and the evidence pass.

Order: the incidents first (detector.incidents: a three-line summary each,
then each one's chain from root cause to effects), then what was captured,
the findings by severity, then per finding what was seen (with its numbers
and its incident), why it matters and what to do (from the rule file), and
where the evidence is. The HTML is one self-contained file:
figures are inline base64 PNG and a Content-Security-Policy forbids any
request or script, so it opens safely offline. Every string that can come
from a packet or a file name goes through html.escape in the HTML, and
through `markdown_text` in report.md: there a DNS name such as
`![x](http://evil.example/x.png)` must not become a remote image in the
reader's markdown viewer, nor a file name with a line break end a table.

Both say first, before the findings, when a rule did not run to the end
(its detector failed: a bug in detector), since its findings may be missing.
"""
from __future__ import annotations

import base64
import html
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import TYPE_CHECKING

import numpy as np

from ..detect.columns import endpoint, ip_text
from ..findings import Finding, iso_time
from ..incidents import NO_PLACE, where, worst_first
from ..rules import Rule
from ..units import plural
from .escape import markdown_code, markdown_text, one_line
from .evidence import EvidenceResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure as MplFigure

    from .dissect import Dissections

# Addresses in the top-talkers figure: enough to name the heavy hitters, few enough to read.
TOP_TALKERS = 10
# Evidence values longer than this are cut in the report (full values stay in findings.json).
VALUE_CHARS_MAX = 300


@dataclass
class Figure:
    title: str
    png: bytes


def _short(value) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= VALUE_CHARS_MAX else text[:VALUE_CHARS_MAX - 3] + "..."


# A list in a finding's evidence shows at most this many items in the report, and nesting at most this deep:
# the rest is in findings.json, and the report says so.
LIST_ITEMS_MAX = 10
DEPTH_MAX = 3
# A mapping of at most this many plain values reads on one line ("syn: 2, ack: 0"), a longer one as a list.
INLINE_KEYS_MAX = 6
MORE_IN_FINDINGS = "findings.json has the rest"


@dataclass
class Value:
    """One shown value of a finding's evidence: `text` in words; `code` when it is a string, which may come from
    a packet (shown as code), not a number or a yes/no; `label`: the key it is under, when it shares a line."""
    text: str
    code: bool = False
    label: str | None = None


@dataclass
class Item:
    """One line of a finding's evidence (a nested list in both reports): its key, the plain values it holds
    (several for a short list or mapping), and the lines under it."""
    label: str | None
    values: list[Value]
    children: list[Item]


def _plain(value) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _value(value, label: str | None = None) -> Value:
    """A plain evidence value in words: yes/no for booleans, thousands separators, strings cut (as code)."""
    if isinstance(value, bool):
        return Value("yes" if value else "no", label=label)
    if value is None:
        return Value("-", label=label)
    if isinstance(value, float):
        return Value(f"{value:,.6g}", label=label)
    if isinstance(value, int):
        return Value(f"{value:,}", label=label)
    return Value(_short(value), code=True, label=label)


def _more(total: int) -> Value:
    return Value(f"and {total - LIST_ITEMS_MAX:,} more: {MORE_IN_FINDINGS}")


def _item(label: str | None, value, depth: int = 0) -> Item:
    """`value` (of a finding's evidence, under `label`) as report lines: plain values on the line, a short list
    of them or a small mapping of them on one line, anything else as lines under it."""
    if _plain(value):
        return Item(label, [_value(value)], [])
    if not value:
        return Item(label, [Value("none")], [])
    if depth >= DEPTH_MAX:
        return Item(label, [Value(MORE_IN_FINDINGS)], [])
    if isinstance(value, dict):
        if len(value) <= INLINE_KEYS_MAX and all(_plain(v) for v in value.values()):
            return Item(label, [_value(v, str(k)) for k, v in value.items()], [])
        return Item(label, [], [_item(str(k), v, depth + 1) for k, v in value.items()])
    items = list(value) if isinstance(value, (list, tuple)) else [str(value)]
    more = [_more(len(items))] if len(items) > LIST_ITEMS_MAX else []
    if all(_plain(v) for v in items):
        return Item(label, [_value(v) for v in items[:LIST_ITEMS_MAX]] + more, [])
    children = [_item(None, v, depth + 1) for v in items[:LIST_ITEMS_MAX]]
    return Item(label, [], children + ([Item(None, more, [])] if more else []))


def _numbers(f: Finding) -> list[Item]:
    """The finding's evidence worth a line in the report (not its frame numbers), nested as it is."""
    return [_item(key, value) for key, value in f.evidence.items() if key not in ("evidence_frames", "related")]


def _values_markdown(values: list[Value]) -> str:
    return ", ".join((f"{markdown_text(v.label)}: " if v.label is not None else "")
                     + (markdown_code(v.text) if v.code else markdown_text(v.text)) for v in values)


def _items_markdown(items: list[Item], indent: str = "") -> list[str]:
    lines = []
    for item in items:
        said = _values_markdown(item.values)
        head = markdown_text(item.label) + (":" if said or item.children else "") if item.label is not None else ""
        lines.append(f"{indent}- " + " ".join(part for part in (head, said) if part))
        lines += _items_markdown(item.children, indent + "  ")
    return lines


def _values_html(values: list[Value]) -> str:
    return ", ".join((f"{_e(v.label)}: " if v.label is not None else "")
                     + (f"<code>{_e(v.text)}</code>" if v.code else _e(v.text)) for v in values)


def _items_html(items: list[Item]) -> str:
    out = []
    for item in items:
        said = _values_html(item.values)
        head = _e(item.label) + (":" if said or item.children else "") if item.label is not None else ""
        under = f"<ul>{_items_html(item.children)}</ul>" if item.children else ""
        out.append("<li>" + " ".join(part for part in (head, said) if part) + under + "</li>")
    return "".join(out)


def figure_of(panels: list[tuple]) -> MplFigure:
    """A matplotlib Figure of `panels`, (draw, title, size in inches) each, stacked top to bottom: `draw(ax)`
    draws one panel. A bare Figure on the Agg canvas: no pyplot (a fifth of a second to import, a GUI
    backend to pick, and a global registry of open figures to close); a notebook shows it as it is."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    width = max(size[0] for _, _, size in panels)
    fig = MplFigure(figsize=(width, sum(size[1] for _, _, size in panels)), dpi=90)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=[size[1] for _, _, size in panels])[:, 0]
    for ax, (draw, title, _size) in zip(axes, panels):
        draw(ax)
        ax.set_title(title)
    fig.tight_layout()
    return fig


@dataclass
class FigureJob:
    """A figure of the report still to draw: its title, `draw(ax)` of its one panel and its size in inches."""

    title: str
    draw: Callable
    size: tuple[float, float] = (8.0, 3.0)

    def png(self) -> bytes:
        buffer = io.BytesIO()
        figure_of([(self.draw, self.title, self.size)]).savefig(buffer, format="png")
        return buffer.getvalue()


def _figure(draw, title: str, size=(8.0, 3.0)) -> Figure:
    return Figure(title, FigureJob(title, draw, size).png())


def _seconds(ns: int | None, start_ns: int) -> float:
    return 0.0 if ns is None else (ns - start_ns) / 1e9


TIMELINE_TITLE = "Packets per second (finding intervals shaded)"


def _timeline(series, findings: list[Finding]):
    """The report's traffic panel: packets per second of the evidence pass, each finding's interval shaded."""
    bins = series.bins

    def draw(ax):
        ax.plot(bins.starts_s, series.packets / bins.width_s, drawstyle="steps-post", lw=1, color="#245")
        for f in findings:
            ax.axvspan(_seconds(f.first_seen, series.start_ns), _seconds(f.last_seen, series.start_ns) + bins.width_s,
                       color="#d33" if f.rank >= 3 else "#e92", alpha=0.25)
        bins.time_axis(ax)
        ax.set_ylabel("packets/s")
    return draw


def figure_jobs(findings: list[Finding], evidence: EvidenceResult, flows) -> list[FigureJob]:
    """The report's figures, to draw: the traffic of the evidence pass, the rules' own figures, the flow table's
    top talkers. `flows`: the flow table as numbers (AnalysisContext.flow_columns: what the report reads, no
    pandas) or its DataFrame view."""
    out = []
    series = evidence.series
    if series is not None and len(series.packets):
        out.append(FigureJob(TIMELINE_TITLE, _timeline(series, findings)))
        for figure in evidence.figures:
            out.append(FigureJob(figure.title, partial(figure.draw, flows=flows), figure.size))
    names, sent = _top_talkers(flows)
    if len(names):
        def bars(ax):
            ax.barh(names[::-1], sent[::-1], color="#245")
            ax.set_xlabel("bytes sent")
        out.append(FigureJob(f"Top {len(names)} talkers", bars, (8.0, 0.35 * len(names) + 1.2)))
    return out


def figures(findings: list[Finding], evidence: EvidenceResult, flows) -> list[Figure]:
    """The report's figures (figure_jobs()) drawn here, one after the other."""
    return [Figure(job.title, job.png()) for job in figure_jobs(findings, evidence, flows)]


def finding_figure(finding: Finding, series, rule_figures: list, flows) -> MplFigure | None:
    """What the report draws for one finding, as one matplotlib Figure: the traffic panel with its interval
    shaded, then its rule's figures (fed by an evidence pass, report.evidence.collect). None when the capture
    has no packets on the time axis, where the report draws neither."""
    if series is None or not len(series.packets):
        return None
    panels = [(_timeline(series, [finding]), TIMELINE_TITLE, (8.0, 3.0))]
    panels += [(partial(figure.draw, flows=flows), figure.title, figure.size) for figure in rule_figures]
    return figure_of(panels)


def _top_talkers(flows) -> tuple[list[str], np.ndarray]:
    """Bytes sent per address (both directions of every flow), the TOP_TALKERS largest: (addresses, bytes), the
    most first, equal ones in the order of their text. `flows`: as figure_jobs takes them."""
    if isinstance(flows, dict):
        halves = np.concatenate([np.stack([flows[f"{side}_ip_hi"], flows[f"{side}_ip_lo"]], axis=1)
                                 for side in ("src", "dest")])
        volume = np.concatenate([flows["src2dst_bytes"], flows["dst2src_bytes"]]).astype(np.int64)
        if len(volume) == 0:
            return [], np.zeros(0, dtype=np.int64)
        unique, at = np.unique(halves, axis=0, return_inverse=True)
        totals = np.bincount(at.reshape(-1), weights=volume, minlength=len(unique)).astype(np.int64)
        texts = [ip_text(hi, lo) for hi, lo in unique.tolist()]
    else:
        if len(flows) == 0:
            return [], np.zeros(0, dtype=np.int64)
        totals_of: dict[str, int] = {}
        for column, count in (("src_ip", "src2dst_bytes"), ("dest_ip", "dst2src_bytes")):
            for text, value in zip(flows[column].astype(str).tolist(), flows[count].tolist()):
                totals_of[text] = totals_of.get(text, 0) + int(value)
        texts, totals = list(totals_of), np.array(list(totals_of.values()), dtype=np.int64)
    order = sorted(range(len(texts)), key=lambda i: (-int(totals[i]), texts[i]))[:TOP_TALKERS]
    return [texts[i] for i in order], totals[order]


def _summary_rows(document: dict) -> list[tuple[str, str, bool]]:
    """The capture summary: (what, its value, whether the value is a file's or packet's text, shown as code)."""
    stats = document["stats"]
    files = ", ".join(c["file"] for c in document["captures"])
    linktypes = ", ".join(f"{k} ({v:,})" for k, v in stats.get("linktypes", {}).items())
    findings = document["findings"]
    info = sum(1 for f in findings if f.get("severity") == "info")
    counted = f"{len(findings) - info:,} of low or above" + (f", {info:,} info (appendix)" if info else "")
    return [("Captures", files, True), ("Packets", f"{stats['packets']:,}", False),
            ("Bytes", f"{stats['bytes']:,} captured, {stats['wire_bytes']:,} on the wire", False),
            ("First packet", stats.get("first_seen") or "-", False),
            ("Last packet", stats.get("last_seen") or "-", False),
            ("Duration", f"{stats.get('duration_s', 0.0):.3f} s", False), ("Link types", linktypes or "-", False),
            ("Flows", f"{stats.get('flows', 0):,}", False), ("Findings", counted, False)]


def _endpoints(f: Finding) -> str:
    src = f.src_ip or f.src_mac or "-"
    dst = f.dest_ip or f.dest_mac or "-"
    if f.src_port is not None and f.src_ip:
        src = endpoint(f.src_ip, f.src_port)
    if f.dest_port is not None and f.dest_ip:
        dst = endpoint(f.dest_ip, f.dest_port)
    return f"{(f.proto or '').upper()} {src} -> {dst}".strip()


@lru_cache(maxsize=1024)
def _rule_text(paragraph: str) -> str:
    """One paragraph of a rule's text: its `code spans` (commands, option names) stay code, the rest is
    markdown_text."""
    out = []
    for index, part in enumerate(re.split(r"`([^`]+)`", one_line(paragraph))):
        if index % 2:
            out.append(markdown_code(part))
        elif part.strip():
            text = markdown_text(part, line_start=index == 0)
            out.append((" " if part[0] == " " else "") + text + (" " if part[-1] == " " else ""))
        else:
            out.append(part)
    return "".join(out)


def markdown_paragraphs(value) -> str:
    """Text of several paragraphs (blank-line separated) written as a rule file's `why` and remediation are: each
    paragraph one line, its backtick spans code, the rest markdown_text."""
    paragraphs = [_rule_text(part) for part in re.split(r"\n\s*\n", str(value)) if part.strip()]
    return "\n\n".join(paragraphs) or "-"


def _failure_text(failure: dict) -> str:
    """What a failure record says, in words (not escaped)."""
    where = f"in {failure['stage']}()"
    if failure.get("frames"):
        first, last = failure["frames"]
        where += f" at frames {first}-{last} (batch {failure.get('batch')}"
        where += f" of {failure['capture']})" if failure.get("capture") else ")"
    return (f"Its detector raised {failure['error']} {where}: {failure['message']}. This is a bug in detector, "
            "not in the capture: please report it with the traceback under \"failures\" in findings.json. "
            "The other rules ran to the end.")


NO_FINDINGS = "No rule fired on these captures."
# a finding whose packets passed while the capture lost traffic (Finding.capture_loss_ratio)
LOSS_NOTE = ("capture_loss_ratio: {ratio:.1%} of the traffic was lost by the capture meanwhile: the counts are "
             "lower bounds")
NO_FINDINGS_PARTIAL = "No finding from the rules that ran to the end."
ONLY_INFO = "No finding of low or above, so no incident: {info} in the appendix below."
QUALITY_HEADING = "What is wrong with the capture"
APPENDIX_HEADING = "Appendix: info findings"
APPENDIX_NOTE = ("Descriptions of the network rather than problems: no incident is made of them alone. "
                 "findings.json holds each in full.")
# The appendix quotes at most this much of an info finding's message.
APPENDIX_MSG_CHARS = 200
# A reference a report shows as a link (a rule file's `references`): a web address and nothing else.
_WEB_ADDRESS = re.compile(r"https?://[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")


def capture_facts(document: dict) -> list[str]:
    """What is wrong with the capture itself, in sentences, for the top of a report: each file's warnings
    (damage with its byte offset, a cut last record, times out of range), then the capture-quality notes
    (findings.json's capture_quality: time going backwards, drops, duplicates, cut frames)."""
    warnings = [w for capture in document.get("captures") or [] for w in capture.get("warnings") or []]
    return warnings + list((document.get("capture_quality") or {}).get("notes") or [])


def _seen(f: Finding) -> str:
    times = "once" if f.n == 1 else f"{f.n:,} times"
    return f"seen {times} from {iso_time(f.first_seen) or '-'} to {iso_time(f.last_seen) or '-'}"


def _confidence_lines(f: Finding) -> list[str]:
    """A finding's confidence and the evidence it rests on, in words (not escaped)."""
    head = f"confidence: {f.confidence or '-'}"
    if f.rule_severity:
        head += f" (the rule said {f.rule_severity}; low confidence keeps it at low)"
    return [head] + [f"{b.factor}, {b.level}: {b.why}" for b in f.confidence_basis]


def _numbered(findings: list[Finding]) -> tuple[list[tuple[int, Finding]], list[tuple[int, Finding]]]:
    """The findings with their numbers in the report (their place in findings.json, from 1): those of low or
    above, each with a section, and the info ones, listed in the appendix."""
    numbered = list(enumerate(findings, 1))
    return [(i, f) for i, f in numbered if f.severity != "info"], [(i, f) for i, f in numbered if f.severity == "info"]


def _numbers_of(findings: list[Finding]) -> dict[int, int]:
    """Each finding's number in the report (its place in the findings list, from 1), by identity."""
    return {id(f): i for i, f in enumerate(findings, 1)}


def _chain_line(f: Finding, role: str) -> tuple[str, str]:
    """One step of an incident's chain in words (not escaped): its role and rule, then what and when."""
    return (f"{role}: {f.rule} ({f.severity})",
            f"{f.msg} ({iso_time(f.first_seen) or '-'} to {iso_time(f.last_seen) or '-'})")


def _appendix_row(f: Finding) -> tuple[str, str, str]:
    """An info finding in the appendix: its rule, where it is, what it says (cut to APPENDIX_MSG_CHARS)."""
    what = " ".join(f.msg.split())
    if len(what) > APPENDIX_MSG_CHARS:
        what = what[:APPENDIX_MSG_CHARS - 3] + "..."
    return f.rule, where(f), what


def _reference_markdown(ref: str) -> str:
    return f"<{ref}>" if _WEB_ADDRESS.fullmatch(ref) else markdown_text(ref)


def _incidents_markdown(incidents, findings: list[Finding], timeline: str | None = None) -> list[str]:
    """The report's opening: each incident's three-line summary, the worst first, the findings' time axis
    (`timeline`: its image file), then each incident's chain (root cause first)."""
    if not incidents:
        return []
    incidents = worst_first(incidents)
    lines = ["## Incidents", ""]
    for incident in incidents:
        lines += [f"### {markdown_text(incident.id)}: {markdown_text(incident.severity.upper())}: "
                  f"{markdown_text(incident.title)}", ""]
        lines += [f"- {markdown_text(line)}" for line in incident.summary.splitlines()]
        lines.append("")
    if timeline:
        lines += [f"![Findings on one time axis]({timeline})", ""]
    lines += ["## Incident chains", ""]
    numbers = _numbers_of(findings)
    for incident in incidents:
        lines += [f"### {markdown_text(incident.id)} chain", ""]
        for step, (f, role) in enumerate(zip(incident.findings, incident.roles), 1):
            head, text = _chain_line(f, role)
            lines.append(f"{step}. **{markdown_text(head)}**, finding {numbers.get(id(f), '-')}: "
                         f"{markdown_text(text)}")
        lines.append("")
    return lines


def _incidents_html(incidents, findings: list[Finding], timeline: Figure | None = None) -> list[str]:
    """_incidents_markdown's sections in HTML, each chain step linked to its finding's section."""
    if not incidents:
        return []
    incidents = worst_first(incidents)
    out = ["<h2>Incidents</h2>"]
    for incident in incidents:
        out += [f'<h3 id="{_e(incident.id)}"><span class="{_e(incident.severity)}">{_e(incident.id)}: '
                f"{_e(incident.severity.upper())}</span>: {_e(incident.title)}</h3><ul>"]
        out += [f"<li>{_e(line)}</li>" for line in incident.summary.splitlines()]
        out.append("</ul>")
    if timeline is not None:
        out.append(_img(timeline))
    out.append("<h2>Incident chains</h2>")
    numbers = _numbers_of(findings)
    for incident in incidents:
        out.append(f"<h3>{_e(incident.id)} chain</h3><ol>")
        for f, role in zip(incident.findings, incident.roles):
            head, text = _chain_line(f, role)
            number = numbers.get(id(f))
            link = f' (<a href="#f{number}">finding {number}</a>)' if number else ""
            out.append(f"<li><strong>{_e(head)}</strong>{link}: {_e(text)}</li>")
        out.append("</ol>")
    return out


def markdown(document: dict, findings: list[Finding], rules: dict[str, Rule], evidence: EvidenceResult,
             incidents=(), views: Dissections | None = None, timeline: str | None = None) -> str:
    """report.md, opening with what is wrong with the capture, then the incidents, the worst first; info
    findings in the appendix. `timeline`: the findings' time-axis figure beside it (timeline.py), None: none."""
    failures = document.get("failures") or []
    facts = capture_facts(document)
    quality = [f"## {QUALITY_HEADING}", "", *[f"- {markdown_text(fact)}" for fact in facts], ""] if facts else []
    lines = ["# Incident report", "", *quality, *_incidents_markdown(incidents, findings, timeline),
             "## Capture summary", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {markdown_code(v, cell=True) if code else markdown_text(v, cell=True)} |"
              for k, v, code in _summary_rows(document)]
    if views is not None and views.status:
        lines += ["", markdown_text(views.status)]
    if failures:
        lines += ["", "## Rules that did not run to the end", ""]
        for failure in failures:
            lines += [f"- **{markdown_text(failure['rule'])} failed: its findings may be missing.** "
                      f"{markdown_text(_failure_text(failure))}"]
    if timeline and not incidents:
        lines += ["", f"![Findings on one time axis]({timeline})"]
    alerting, described = _numbered(findings)
    lines += ["", "## Findings by severity", ""]
    if not alerting:
        lines.append(ONLY_INFO.format(info=plural(len(described), "info finding")) if described else
                     NO_FINDINGS_PARTIAL if failures else NO_FINDINGS)
    else:
        lines += ["| # | severity | confidence | rule | n | first seen | endpoints |",
                  "|---|---|---|---|---|---|---|"]
        for i, f in alerting:
            lines.append(f"| {i} | {f.severity} | {f.confidence or '-'} | {markdown_text(f.rule, cell=True)} "
                         f"| {f.n:,} | {iso_time(f.first_seen) or '-'} | {markdown_code(_endpoints(f), cell=True)} |")
    for i, f in alerting:
        rule = rules.get(f.rule)
        lines += ["", f"## {i}. {f.severity.upper()}: {markdown_text(f.title)} ({markdown_text(f.rule)})", "",
                  "### What was seen", "", markdown_text(f.msg), "", f"- {_seen(f)}",
                  f"- endpoints: {markdown_code(_endpoints(f))}"]
        if f.incident_id:
            lines.append(f"- incident: {markdown_text(f.incident_id)}")
        if f.community_id:
            lines.append(f"- community_id: {markdown_code(f.community_id)}")
        if f.capture_loss_ratio is not None:
            lines.append(f"- {markdown_text(LOSS_NOTE.format(ratio=f.capture_loss_ratio))}")
        head, *basis = _confidence_lines(f)
        lines.append(f"- {markdown_text(head)}")
        lines += [f"  - {markdown_text(line)}" for line in basis]
        lines += _items_markdown(_numbers(f))
        if i - 1 in evidence.summaries:
            lines.append(f"- first evidence frame: {markdown_code(evidence.summaries[i - 1])}")
        if rule is not None:
            lines += ["", "### Why it matters", "", markdown_paragraphs(rule.why)]
        lines += ["", "### What to do", "", markdown_paragraphs(f.remediation or "-")]
        shown = []
        if f.evidence_pcap:
            packets = plural(f.evidence.get("evidence_packets", 0), "packet")
            shown.append(f"- {markdown_code(f.evidence_pcap)}: {packets} (original bytes and timestamps)")
        if i - 1 in evidence.reproducers:
            script, what = evidence.reproducers[i - 1]
            shown.append(f"- {markdown_code(script)}: rebuilds {markdown_text(what)}; sends only with `--send`")
        if shown:
            lines += ["", "### Evidence", "", *shown]
        if f.references:
            lines += ["", "### References", "", *[f"- {_reference_markdown(ref)}" for ref in f.references]]
        lines += views.markdown(i - 1) if views is not None else []
    if described:
        lines += ["", f"## {APPENDIX_HEADING}", "", APPENDIX_NOTE, "", "| # | rule | where | what | count |",
                  "|---|---|---|---|---|"]
        for i, f in described:
            rule_id, place, what = _appendix_row(f)
            lines.append(f"| {i} | {markdown_text(rule_id, cell=True)} | {markdown_text(place, cell=True)} "
                         f"| {markdown_text(what, cell=True)} | {f.n:,} |")
    return "\n".join(lines) + "\n"


CSS = """body{font:15px/1.45 system-ui,sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;
vertical-align:top}img{max-width:100%}.critical{color:#b00}.high{color:#d50}.medium{color:#a80}
code{white-space:pre-wrap;word-break:break-all}pre{font-size:13px;overflow-x:auto;background:#f6f6f6;padding:.5em}
.expert .error{color:#b00}.expert .warning{color:#a80}"""
# No request of any kind, no script: the page is read offline and packet text may be hostile.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _img(fig: Figure) -> str:
    data = base64.b64encode(fig.png).decode("ascii")
    return f'<figure><img alt="{_e(fig.title)}" src="data:image/png;base64,{data}"></figure>'


def html_report(document: dict, findings: list[Finding], rules: dict[str, Rule], evidence: EvidenceResult,
                figs: list[Figure], incidents=(), views: Dissections | None = None,
                timeline: Figure | None = None) -> str:
    """report.html, one self-contained page: what is wrong with the capture, the incidents, the worst first
    (with the findings' time axis, `timeline`, between their summaries and chains; first among the figures
    without incidents), the figures, the findings of low or above, the info findings in an appendix."""
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
           "<title>Incident report</title>", f"<style>{CSS}</style></head><body>",
           "<h1>Incident report</h1>"]
    facts = capture_facts(document)
    if facts:
        out += [f"<h2>{_e(QUALITY_HEADING)}</h2><ul>", *[f"<li>{_e(fact)}</li>" for fact in facts], "</ul>"]
    out += [*_incidents_html(incidents, findings, timeline),
            "<h2>Capture summary</h2><table>"]
    out += [f"<tr><th>{_e(k)}</th><td>{f'<code>{_e(v)}</code>' if code else _e(v)}</td></tr>"
            for k, v, code in _summary_rows(document)]
    out.append("</table>")
    if views is not None and views.status:
        out.append(f"<p>{_e(views.status)}</p>")
    failures = document.get("failures") or []
    if failures:
        out.append('<h2 class="critical">Rules that did not run to the end</h2><ul>')
        out += [f'<li><strong class="critical">{_e(failure["rule"])} failed: its findings may be missing.'
                f"</strong> {_e(_failure_text(failure))}</li>" for failure in failures]
        out.append("</ul>")
    out += [_img(fig) for fig in ([timeline] if timeline is not None and not incidents else []) + list(figs)]
    alerting, described = _numbered(findings)
    out.append("<h2>Findings by severity</h2>")
    if not alerting:
        out.append(f"<p>{_e(ONLY_INFO.format(info=plural(len(described), 'info finding')))}</p>" if described else
                   f"<p>{NO_FINDINGS_PARTIAL if failures else NO_FINDINGS}</p>")
    else:
        out.append("<table><tr><th>#</th><th>severity</th><th>confidence</th><th>rule</th><th>n</th>"
                   "<th>first seen</th><th>endpoints</th></tr>")
        for i, f in alerting:
            out.append(f'<tr><td><a href="#f{i}">{i}</a></td><td class="{_e(f.severity)}">{_e(f.severity)}</td>'
                       f"<td>{_e(f.confidence or '-')}</td>"
                       f"<td>{_e(f.rule)}</td><td>{f.n:,}</td><td>{_e(iso_time(f.first_seen) or '-')}</td>"
                       f"<td><code>{_e(_endpoints(f))}</code></td></tr>")
        out.append("</table>")
    for i, f in alerting:
        rule = rules.get(f.rule)
        out += [f'<h2 id="f{i}">{i}. <span class="{_e(f.severity)}">{_e(f.severity.upper())}</span>: '
                f"{_e(f.title)} ({_e(f.rule)})</h2>", "<h3>What was seen</h3>", f"<p>{_e(f.msg)}</p><ul>",
                f"<li>{_e(_seen(f))}</li>", f"<li>endpoints: <code>{_e(_endpoints(f))}</code></li>"]
        if f.incident_id:
            out.append(f'<li>incident: <a href="#{_e(f.incident_id)}">{_e(f.incident_id)}</a></li>')
        if f.community_id:
            out.append(f"<li>community_id: <code>{_e(f.community_id)}</code></li>")
        if f.capture_loss_ratio is not None:
            out.append(f"<li>{_e(LOSS_NOTE.format(ratio=f.capture_loss_ratio))}</li>")
        head, *basis = _confidence_lines(f)
        out.append(f"<li>{_e(head)}<ul>" + "".join(f"<li>{_e(line)}</li>" for line in basis) + "</ul></li>")
        out.append(_items_html(_numbers(f)))
        if i - 1 in evidence.summaries:
            out.append(f"<li>first evidence frame: <code>{_e(evidence.summaries[i - 1])}</code></li>")
        out.append("</ul>")
        if rule is not None:
            out += ["<h3>Why it matters</h3>", f"<p>{_e(rule.why.strip())}</p>"]
        out += ["<h3>What to do</h3>", f"<p>{_e((f.remediation or '').strip() or '-')}</p>"]
        shown = []
        if f.evidence_pcap:
            packets = plural(f.evidence.get("evidence_packets", 0), "packet")
            shown.append(f"<li><code>{_e(f.evidence_pcap)}</code>: {packets} (original bytes and timestamps)</li>")
        if i - 1 in evidence.reproducers:
            script, what = evidence.reproducers[i - 1]
            shown.append(f"<li><code>{_e(script)}</code>: rebuilds {_e(what)}; sends only with "
                         "<code>--send</code></li>")
        if shown:
            out += ["<h3>Evidence</h3><ul>", *shown, "</ul>"]
        # references are printed, not linked: the page makes no request, and a rule file may be the user's
        if f.references:
            out += ["<h3>References</h3><ul>", *[f"<li>{_e(ref)}</li>" for ref in f.references], "</ul>"]
        out += views.html(i - 1) if views is not None else []
    if described:
        out += [f"<h2 id=\"appendix\">{_e(APPENDIX_HEADING)}</h2>", f"<p>{_e(APPENDIX_NOTE)}</p>",
                "<table><tr><th>#</th><th>rule</th><th>where</th><th>what</th><th>count</th></tr>"]
        for i, f in described:
            rule_id, place, what = _appendix_row(f)
            place = _e(place) if place in (NO_PLACE, f.place) else f"<code>{_e(place)}</code>"     # words or addresses
            out.append(f'<tr id="f{i}"><td>{i}</td><td>{_e(rule_id)}</td><td>{place}</td>'
                       f"<td>{_e(what)}</td><td>{f.n:,}</td></tr>")
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"

"""The findings on one time axis: one lane per rule, each finding a bar from its first to its last packet,
coloured by the incident it belongs to (grey: none).

What the reader takes from it is order and overlap: the RIP probe's tick at the left edge of the echo loop's
bar, the receive-queue saturation starting with it, the unrelated PMTUD black hole in a colour of its own
beside them. Drawn with matplotlib (imported only when a report is written, as the other figures); the
markdown report links it as timeline.png, the HTML report carries it inline.

Incidents come from the correlator (findings.json's "incidents", each finding's `incident_id`); a finding
without one is drawn grey, and so is every finding when there are no incidents.
"""
from __future__ import annotations

from ..detect.figure import time_axis
from .render import Figure, FigureJob

# The file report.md links (output.TOP_NAMES lists it, so a later run without findings removes it).
TIMELINE_PNG = "timeline.png"
TITLE = "Findings on one time axis (one lane per rule, coloured by incident)"
# One colour per incident (matplotlib's tab10 less its grey): past ten, colours repeat in the same order.
INCIDENT_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
                    "#17becf", "#aec7e8")
NO_INCIDENT = "#9a9a9a"
# Incidents named in the legend (the rest are coloured but not listed, so the figure keeps its size).
LEGEND_MAX = 12
# Characters of an incident's legend label ("incident-3: Frame looping between ..."): the report has the rest.
LABEL_CHARS_MAX = 60
# Share of a lane its bars fill (the findings of one rule split it between them).
LANE_HEIGHT = 0.7
# Inches of the figure per lane, per legend entry (7-point text and its spacing), and for the title and the axis.
LANE_INCHES = 0.4
LEGEND_ENTRY_INCHES = 0.19
FRAME_INCHES = 1.4
# A finding of one instant still shows as a bar this share of the axis wide.
MIN_BAR_RATIO = 0.004


def _field(incident, name: str):
    return incident.get(name) if isinstance(incident, dict) else getattr(incident, name, None)


def _label(incident_id: str, title) -> str:
    text = " ".join(f"{incident_id}: {title}".split()) if title else str(incident_id)
    if len(text) > LABEL_CHARS_MAX:
        text = text[:LABEL_CHARS_MAX - 3] + "..."
    # a "$" would start matplotlib's math mode (and an unbalanced one raise): titles may carry packet text
    return text.replace("$", r"\$")


def incident_colours(findings) -> dict[str, str]:
    """Each incident id of `findings` (their `incident_id`) -> its colour, in order of first appearance in
    time."""
    ordered = sorted((f for f in findings if f.first_seen is not None), key=lambda f: f.first_seen)
    ids = dict.fromkeys(getattr(f, "incident_id", None) for f in ordered)
    ids.pop(None, None)
    return {ident: INCIDENT_COLOURS[k % len(INCIDENT_COLOURS)] for k, ident in enumerate(ids)}


def lanes(findings) -> list[str]:
    """The rules with a timed finding, the earliest first (the top lane)."""
    timed = sorted((f for f in findings if f.first_seen is not None), key=lambda f: (f.first_seen, f.rule))
    return list(dict.fromkeys(f.rule for f in timed))


def draw_timeline(ax, findings, incidents=(), start_ns: int | None = None) -> None:
    """Draw the findings that have a time on `ax`: a lane per rule (lanes()), a bar per finding (findings of one
    rule side by side within its lane), a tick where each began, the incidents' legend. `incidents`:
    findings.json's incident records (or Incident objects) for the legend's titles; `start_ns`: the axis' zero
    (the capture's first packet; None: the first finding's start)."""
    from matplotlib.patches import Patch

    timed = [f for f in findings if f.first_seen is not None]
    rules = lanes(timed)
    colours = incident_colours(timed)
    titles = {_field(i, "id"): _field(i, "title") for i in incidents or ()}
    zero = start_ns if start_ns is not None else min(f.first_seen for f in timed)
    starts = [(f.first_seen - zero) / 1e9 for f in timed]
    ends = [((f.last_seen if f.last_seen is not None else f.first_seen) - zero) / 1e9 for f in timed]
    span = max(max(ends) - min(0.0, min(starts)), 1e-3)
    per_lane = {rule: [f for f in timed if f.rule == rule] for rule in rules}
    for f, start, end in zip(timed, starts, ends):
        lane, mates = rules.index(f.rule), per_lane[f.rule]
        height = LANE_HEIGHT / len(mates)
        y = lane - LANE_HEIGHT / 2 + height * (mates.index(f) + 0.5)
        colour = colours.get(getattr(f, "incident_id", None), NO_INCIDENT)
        ax.barh(y, max(end - start, span * MIN_BAR_RATIO), left=start, height=height * 0.9, color=colour,
                edgecolor="#333", linewidth=0.5, label=f.rule)
        ax.plot([start], [y], marker="|", markersize=max(4.0, 14 * height), color="#222")   # where it began
    ax.set_yticks(range(len(rules)), labels=rules, fontsize=8)
    ax.set_ylim(len(rules) - 0.5, -0.5)
    time_axis(ax, zero)
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=colour, label=_label(ident, titles.get(ident)))
               for ident, colour in list(colours.items())[:LEGEND_MAX]]
    if legend_entries(timed) > len(handles):
        handles.append(Patch(color=NO_INCIDENT, label="no incident"))
    if handles:
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def legend_entries(timed) -> int:
    """Entries of the timeline's legend: the incidents (LEGEND_MAX at most), and "no incident" where some
    finding has none beside them."""
    colours = incident_colours(timed)
    loose = bool(colours) and any(getattr(f, "incident_id", None) is None for f in timed)
    return min(len(colours), LEGEND_MAX) + int(loose)


def timeline_job(findings, incidents=(), start_ns: int | None = None) -> FigureJob | None:
    """The figure (draw_timeline) of figure_size() to draw, or None without a finding that has a time."""
    timed = [f for f in findings if f.first_seen is not None]
    if not timed:
        return None
    return FigureJob(TITLE, lambda ax: draw_timeline(ax, timed, incidents, start_ns), figure_size(timed))


def timeline_figure(findings, incidents=(), start_ns: int | None = None) -> Figure | None:
    """The figure (draw_timeline) as a PNG of figure_size(), or None without a finding that has a time."""
    job = timeline_job(findings, incidents, start_ns)
    return None if job is None else Figure(job.title, job.png())


def figure_size(findings) -> tuple[float, float]:
    """Inches (width, height) of the timeline of `findings`: wider with a legend, tall enough for its lanes and
    for its legend, which stands to the right of the lanes."""
    timed = [f for f in findings if f.first_seen is not None]
    width = 10.0 if incident_colours(timed) else 8.0
    return width, max(LANE_INCHES * len(lanes(timed)), LEGEND_ENTRY_INCHES * legend_entries(timed)) + FRAME_INCHES

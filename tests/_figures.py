"""A rule's report figure drawn as the report draws it, for the tests that hold a finding's numbers to its figure's
data (one number, one source).

`drawn(capture, rule)` analyses a bundled capture with every rule, builds the rule's figures on the report's time
axis (report.evidence.time_bins: milliseconds on a short capture, which is the point: a figure must show the
rule's numbers whatever the axis' bins), feeds them the evidence pass when they keep batches, and draws the
first on a fresh Agg figure.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CAPTURES = Path(__file__).resolve().parents[1] / "captures"


@dataclass
class Drawn:
    result: object          # analysis.Analysis
    finding: object         # the rule's finding the figure is of (the first matching `pick`)
    figure: object          # the ReportFigure
    bins: object            # the report's TimeBins
    fig: object             # the matplotlib Figure
    ax: object              # the Axes it drew on

    def twin(self):
        """The other Axes of the figure (a twinx): the one that is not `ax`."""
        (other,) = [axes for axes in self.fig.axes if axes is not self.ax and axes.bbox.bounds == self.ax.bbox.bounds]
        return other

    def close(self) -> None:
        import matplotlib.pyplot as plt
        plt.close(self.fig)


def drawn(capture: str, rule: str, pick=lambda finding: True, bins=None) -> Drawn:
    """The figure of `rule`'s finding (the first `pick` keeps) on bundled `capture`, drawn; `bins`: another time
    axis than the report's."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from detector.analysis import analyze
    from detector.report.evidence import collect, time_bins
    from detector.rules import load_rules
    from detector.site import load_site

    path = CAPTURES / capture
    site = CAPTURES / (capture.split(".")[0] + ".site.yaml")
    result = analyze([str(path)], load_rules(), site=load_site(site if site.exists() else None))
    finding = next(f for f in result.findings if f.rule == rule and pick(f))
    (detector,) = [d for d in result.detectors if d.rule_id == rule]
    bins = bins or time_bins(result.stats.first_ns, result.stats.last_ns)
    figure = detector.figures([finding], bins)[0]
    if figure.needs_batches:
        collect([str(path)], result.findings, bins, [figure])
    fig, ax = plt.subplots()
    figure.draw(ax, result.flows)
    return Drawn(result, finding, figure, bins, fig, ax)

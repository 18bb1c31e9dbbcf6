"""The report's figures drawn by forked helpers (detector.report.drawing): the same bytes as drawn in one
process, and a complete report when a helper dies, hangs or fails a figure."""
from __future__ import annotations

import base64
import os
import re
import time
from pathlib import Path

import pytest

from detector import commands
from detector.report import drawing
from detector.report.render import FigureJob

CAPTURES = Path(__file__).resolve().parent.parent / "captures"
# a loop with its trigger: the timeline, the traffic panel, the rules' own figures and the top talkers
CAPTURE = CAPTURES / "echo-loop-rip-ipv4.pcapng"
_IMG = re.compile(rb'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def _report(out: Path) -> tuple[list[bytes], bytes, bytes]:
    """The figures embedded in report.html (timeline.png among them), timeline.png, and report.md of the run
    written to `out`."""
    page = (out / "report.html").read_bytes()
    return ([base64.b64decode(m) for m in _IMG.findall(page)], (out / "timeline.png").read_bytes(),
            (out / "report.md").read_bytes())


@pytest.fixture(scope="module")
def alone(tmp_path_factory) -> tuple[list[bytes], bytes, bytes]:
    """The report drawn in this process alone, figure after figure."""
    out = tmp_path_factory.mktemp("alone")
    saved = drawing.HELPERS_MAX
    drawing.HELPERS_MAX = 0
    try:
        commands.analyze([str(CAPTURE)], out)
    finally:
        drawing.HELPERS_MAX = saved
    figures, timeline, md = _report(out)
    assert len(figures) >= 4, "the capture should draw several figures for the helpers to share"
    return figures, timeline, md


@pytest.fixture
def forks(monkeypatch) -> list[int]:
    """Two helpers whatever the machine's cores; the pids of the helpers forked."""
    monkeypatch.setattr(drawing, "usable_cores", lambda: 3)
    monkeypatch.setattr(drawing, "HELPERS_MAX", 2)
    pids: list[int] = []
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            pids.append(pid)
        return pid
    monkeypatch.setattr(drawing.os, "fork", fork)
    return pids


def _in_helper(parent: int) -> bool:
    return os.getpid() != parent


def test_helpers_draw_the_same_bytes_as_one_process(tmp_path, monkeypatch, alone, forks):
    parent, png = os.getpid(), FigureJob.png
    drawn_here: list[str] = []

    def counted(self):
        if not _in_helper(parent):
            drawn_here.append(self.title)
        return png(self)
    monkeypatch.setattr(FigureJob, "png", counted)
    commands.analyze([str(CAPTURE)], tmp_path)
    assert len(forks) == 2
    assert _report(tmp_path) == alone
    # a third of the figures drawn here, round robin: the helpers' shares came back from them
    assert len(drawn_here) == len(alone[0]) // 3
    for pid in forks:                       # every helper reaped
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_a_helper_that_dies_leaves_its_share_to_this_process(tmp_path, monkeypatch, alone, forks):
    parent, png = os.getpid(), FigureJob.png

    def dying(self):
        if _in_helper(parent):
            os._exit(7)
        return png(self)
    monkeypatch.setattr(FigureJob, "png", dying)
    commands.analyze([str(CAPTURE)], tmp_path)
    assert len(forks) == 2
    assert _report(tmp_path) == alone


def test_a_helper_that_hangs_is_killed_and_its_share_drawn_here(tmp_path, monkeypatch, alone, forks):
    parent, png = os.getpid(), FigureJob.png

    def hanging(self):
        if _in_helper(parent):
            time.sleep(3600)
        return png(self)
    monkeypatch.setattr(FigureJob, "png", hanging)
    monkeypatch.setattr(drawing, "HELPER_TIMEOUT_S", 2.0)
    commands.analyze([str(CAPTURE)], tmp_path)
    assert _report(tmp_path) == alone
    for pid in forks:                       # killed and reaped, not left asleep
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_a_figure_that_fails_in_a_helper_is_drawn_again_here(tmp_path, monkeypatch, alone, forks):
    parent, png = os.getpid(), FigureJob.png
    drawn_here: list[str] = []

    def failing(self):
        if _in_helper(parent):
            raise RuntimeError("a font went missing")
        drawn_here.append(self.title)
        return png(self)
    monkeypatch.setattr(FigureJob, "png", failing)
    commands.analyze([str(CAPTURE)], tmp_path)
    figures, timeline, md = _report(tmp_path)
    assert (figures, timeline, md) == alone
    assert len(drawn_here) == len(figures)      # every figure (the page embeds timeline.png too), drawn here


def test_one_core_draws_everything_here_without_a_fork(tmp_path, monkeypatch, alone):
    monkeypatch.setattr(drawing, "usable_cores", lambda: 1)
    monkeypatch.setattr(drawing.os, "fork", lambda: pytest.fail("forked on one core"))
    commands.analyze([str(CAPTURE)], tmp_path)
    assert _report(tmp_path) == alone


def test_an_unreadable_answer_is_drawn_here(monkeypatch):
    """A helper cut short while it wrote: what arrives does not unpickle, and this process draws the share."""
    monkeypatch.setattr(drawing, "usable_cores", lambda: 2)
    jobs = [FigureJob(f"panel {i}", lambda ax, i=i: ax.plot([0, 1], [i, 1])) for i in range(3)]
    real_dumps = drawing.pickle.dumps
    monkeypatch.setattr(drawing.pickle, "dumps", lambda obj, protocol=None: real_dumps(obj, protocol)[:-5])
    assert drawing.draw_all(jobs) == drawing.draw_all(jobs, helpers=0)

"""The report's figures, drawn on the cores there are.

Drawing is most of the report pass: matplotlib lays out text and rasterises each figure in Python, a fifth of a
second each, and the GIL keeps threads from sharing it. So `Drawing` forks copies of this process, which
inherit every figure's data as it is (nothing pickled on the way in), each draws its share and sends back the
PNG bytes. The forks are made before anything else starts a process or a thread of its own for the report (the
sharkd of Wireshark's view), so none of them holds another process' pipe or a lock a thread had taken: the
matplotlib warm-up thread (report.prepare) is joined first.

A helper that dies, sends something unreadable or takes longer than HELPER_TIMEOUT_S is killed and its share
drawn here; so is a figure whose drawing failed there, which fails here again and is handled as before. Where
fork is missing or there is one core, every figure is drawn in this process, in order. The PNG bytes are the
same whichever process draws them: same code, same fonts, same data.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import time
from collections.abc import Sequence

from .render import FigureJob

# Processes drawing besides this one, at most: beyond a few, the fork and the copy of the PNG bytes cost more
# than a share of a dozen figures saves.
HELPERS_MAX = 3
# A helper that has not sent its figures by then is killed and its share drawn here (a figure takes well under
# a second; this only bounds a helper stuck for a reason of its own).
HELPER_TIMEOUT_S = 120.0
# The most a helper may send back: its figures' PNG bytes (a report figure is tens of KiB).
ANSWER_BYTES_MAX = 256 << 20


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which a container's cpuset narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Drawing:
    """Draw `jobs` (render.FigureJob) on up to `helpers` forked processes besides this one (None: one fewer than
    the usable cores, HELPERS_MAX at most). The helpers start at once; pngs() draws this process' share and
    gathers theirs. Use it as a context manager: leaving it ends any helper still running."""

    def __init__(self, jobs: Sequence[FigureJob], helpers: int | None = None):
        self.jobs = list(jobs)
        if helpers is None:
            helpers = min(usable_cores() - 1, HELPERS_MAX)
        helpers = max(0, min(helpers, len(self.jobs) - 1)) if hasattr(os, "fork") else 0
        # round robin, in job order; this process takes the last share: the report's other work (the answers
        # of sharkd, read in a thread) runs here too
        shares = [list(range(k, len(self.jobs), helpers + 1)) for k in range(helpers + 1)]
        self.mine = shares[-1]
        self.helpers: list[tuple[int, int, list[int]]] = []      # (pid, read end of its pipe, its share)
        if helpers:
            from . import prepare
            prepare.wait()
        for share in shares[:-1]:
            helper = self._fork(share)
            if helper is None:
                self.mine = sorted(self.mine + share)
            else:
                self.helpers.append(helper)

    def __enter__(self) -> Drawing:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """End and reap every helper not gathered yet."""
        while self.helpers:
            pid, fd, _share = self.helpers.pop()
            _end(pid, fd)

    def _fork(self, share: list[int]) -> tuple[int, int, list[int]] | None:
        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:          # no memory or process left for it: this process draws its share
            os.close(read)
            os.close(write)
            return None
        if pid == 0:             # the helper: draw, send, leave without running anything of the parent's
            status = 1
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.close(read)
                drawn = {}
                for index in share:
                    try:
                        drawn[index] = self.jobs[index].png()
                    except Exception:       # drawn again by the parent, which meets the error where it is handled
                        pass
                data = memoryview(pickle.dumps(drawn, protocol=pickle.HIGHEST_PROTOCOL))
                while data:
                    data = data[os.write(write, data):]
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        return pid, read, share

    def pngs(self) -> list[bytes]:
        """Every job's PNG bytes, in the jobs' order: this process' share drawn here, the helpers' gathered (and
        drawn here where a helper did not deliver them)."""
        drawn: dict[int, bytes] = {index: self.jobs[index].png() for index in self.mine}
        deadline = time.monotonic() + HELPER_TIMEOUT_S
        while self.helpers:
            pid, fd, share = self.helpers.pop(0)
            answer = _gather(pid, fd, deadline)
            drawn.update((index, answer[index]) for index in share if isinstance(answer.get(index), bytes))
        for index in range(len(self.jobs)):
            if index not in drawn:
                drawn[index] = self.jobs[index].png()
        return [drawn[index] for index in range(len(self.jobs))]


def draw_all(jobs: Sequence[FigureJob], helpers: int | None = None) -> list[bytes]:
    """Every job's PNG bytes, in order, drawn on the usable cores (Drawing)."""
    with Drawing(jobs, helpers) as drawing:
        return drawing.pngs()


def _gather(pid: int, fd: int, deadline: float) -> dict:
    """What helper `pid` sent on `fd` ({job index: PNG bytes}), or {} where it sent nothing readable in time
    (it is killed then). The helper is reaped either way."""
    chunks, size = [], 0
    answer: dict = {}
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return answer
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > ANSWER_BYTES_MAX:
                return answer
            chunks.append(chunk)
        try:
            # our own fork's answer, through a pipe nothing else holds: trusted as this process' own memory
            loaded = pickle.loads(b"".join(chunks))
        except Exception:       # cut short: the helper died while it wrote
            return answer
        if isinstance(loaded, dict):
            answer = loaded
        return answer
    finally:
        _end(pid, fd)


def _end(pid: int, fd: int) -> None:
    """Kill helper `pid` if it still runs, reap it, close its pipe."""
    try:
        os.close(fd)
    except OSError:
        pass
    try:
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    except (ChildProcessError, ProcessLookupError):
        pass

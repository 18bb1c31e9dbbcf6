"""matplotlib made ready while the analysis runs: its import and its first text (fonts found, loaded, laid out)
take about a second of one core on their own, and the analysis leaves part of a second core idle (its compiled
kernels release the GIL), so the report's figures need not wait for them."""
from __future__ import annotations

import threading

_started: threading.Thread | None = None


def _prepare() -> None:
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2.0, 1.0), dpi=30)
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    axes.plot([0, 1], [0, 1])
    axes.set_title("warm-up")
    figure.savefig(io.BytesIO(), format="png")


def warm_up() -> None:
    """Start preparing matplotlib in a daemon thread (once a process); a failure there is left for the report to
    meet, where it is handled."""
    global _started
    if _started is None:
        _started = threading.Thread(target=_safe, name="matplotlib-warm-up", daemon=True)
        _started.start()


def _safe() -> None:
    try:
        _prepare()
    except Exception:       # the report imports matplotlib again and meets the same error where it is handled
        pass

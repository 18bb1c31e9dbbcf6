"""detector: network incident forensics on packet captures. In a notebook: `detector.open(path)`.

The notebook API loads on first use (PEP 562), so the command line does not
pay for pandas and matplotlib when it does not need them.
"""
from __future__ import annotations

from .errors import CaptureError, DetectorError, RuleError, UsageError

__all__ = ["open", "Capture", "DetectorError", "CaptureError", "RuleError", "UsageError"]


def __getattr__(name):
    if name in ("open", "Capture"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'detector' has no attribute {name!r}")

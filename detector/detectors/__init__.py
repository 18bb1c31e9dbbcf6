"""Detectors: one module per signature, each a mergeable state over decoded batches.

Every module of this package defines a `@register`ed `Detector` subclass (detector.detect.detector) and
nothing else: importing the package imports each, so `REGISTRY` maps each rule id to its class. A rule file
in rules/ with the same id configures it (detector.rules). The framework they stand on (the interface, the
runner, views of a batch, state helpers, shared models) is detector.detect; its runner is re-exported here,
the package the rest of detector loads the rules through.
"""
from __future__ import annotations

import importlib
import pkgutil

from ..detect.detector import REGISTRY, AnalysisContext, Detector, register
from ..detect.runner import (
    RAISE_ENV,
    DetectorFailure,
    DetectorSet,
    active_detectors,
    raise_failures,
    run_findings,
)

__all__ = ["REGISTRY", "AnalysisContext", "Detector", "register", "active_detectors", "run_findings",
           "DetectorSet", "DetectorFailure", "RAISE_ENV", "raise_failures"]

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

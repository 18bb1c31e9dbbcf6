"""Detectors: one module per signature, each a mergeable state over decoded batches.

Every module of this package that defines a `@register`ed `Detector` subclass
is imported here, so `REGISTRY` maps each rule id to its class. A rule file
in rules/ with the same id configures it (detector.rules).
"""
from __future__ import annotations

import importlib
import pkgutil

from .base import REGISTRY, AnalysisContext, Detector, register

__all__ = ["REGISTRY", "AnalysisContext", "Detector", "register", "active_detectors", "run_findings"]

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")


def _finding_order(rule_ids: list[str]) -> list[str]:
    """Rule ids sorted, each after the rules named in its AFTER (those that are present)."""
    present = set(rule_ids)
    done: list[str] = []
    visiting: set[str] = set()

    def visit(rule_id: str) -> None:
        if rule_id in done:
            return
        if rule_id in visiting:
            raise ValueError(f"detectors wait on each other in a cycle through '{rule_id}'")
        visiting.add(rule_id)
        for before in sorted(REGISTRY[rule_id].AFTER):
            if before in present:
                visit(before)
        visiting.discard(rule_id)
        done.append(rule_id)

    for rule_id in sorted(present):
        visit(rule_id)
    return done


def active_detectors(rules=None) -> list[Detector]:
    """Fresh instances of every registered detector whose rule is enabled, in findings order.

    `rules` is the mapping of `detector.rules.load_rules`; None loads the defaults.
    """
    if rules is None:
        from ..rules import load_rules
        rules = load_rules()
    chosen = [rule_id for rule_id, rule in rules.items() if rule.enabled and rule_id in REGISTRY]
    return [REGISTRY[rule_id](rules[rule_id]) for rule_id in _finding_order(chosen)]


def run_findings(detectors: list[Detector], ctx: AnalysisContext) -> list:
    """Ask each detector for its findings in order, recording them in `ctx` for those that follow."""
    out = []
    for det in detectors:
        found = det.findings(ctx)
        ctx.findings[det.rule_id] = found
        out.extend(found)
    return out

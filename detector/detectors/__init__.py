"""Detectors: one module per signature, each a mergeable state over decoded batches.

A detector class provides `update(batch)`, `merge(other)` and `findings()`;
`REGISTRY` lists the classes `detector analyze` runs, by rule id.
"""
from __future__ import annotations

REGISTRY: dict[str, type] = {}


def active_detectors() -> list:
    """Fresh instances of every registered detector, in rule-id order."""
    return [REGISTRY[rule]() for rule in sorted(REGISTRY)]

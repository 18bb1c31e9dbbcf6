"""Shared fixtures: `captures_real`, the real captures folder (the test skips without it).

Helpers to import live in tests/_real.py (`from tests._real import ...`); the
repository root goes on sys.path here so that import works under a bare
`pytest` as well as `python -m pytest`.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests._real import require_real  # noqa: E402  (needs the path above)


@pytest.fixture
def captures_real() -> Path:
    """../shared/captures-real, or skip with the reason."""
    return require_real()

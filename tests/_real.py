"""Where the shared real captures live, and how a test skips cleanly without them.

    from tests._real import CAPTURES_REAL, manifest_rows, require_real
"""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

# ../shared/captures-real beside the repository; a fresh clone has none.
CAPTURES_REAL = Path(__file__).resolve().parents[1].parent / "shared" / "captures-real"
MANIFEST = CAPTURES_REAL / "MANIFEST.tsv"


def require_real() -> Path:
    """The captures-real folder, or skip the calling test with the reason."""
    if not MANIFEST.is_file():
        pytest.skip(f"real captures not present at {CAPTURES_REAL}")
    return CAPTURES_REAL


def manifest_rows() -> list[dict]:
    """MANIFEST.tsv as dicts (empty list when the folder is absent)."""
    if not MANIFEST.is_file():
        return []
    with MANIFEST.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))

"""A count and its noun as messages write them: singular for one, thousands separated, irregular plurals as
given."""
from __future__ import annotations

import pytest

from detector.units import plural


@pytest.mark.parametrize("n, one, many, text", [
    (1, "probe", None, "1 probe"),
    (0, "probe", None, "0 probes"),
    (2, "probe", None, "2 probes"),
    (1234, "probe", None, "1,234 probes"),
    (1, "address", "addresses", "1 address"),
    (3, "address", "addresses", "3 addresses"),
    (1_000_000, "RA", None, "1,000,000 RAs"),
    (-1, "second", None, "-1 seconds"),
])
def test_plural(n, one, many, text):
    assert plural(n, one, many) == text

"""Units and counts as the tree keeps and writes them: times in int64 nanoseconds since the epoch (the `ts_ns`
column); a count with its noun as a person reads it (`plural`)."""
from __future__ import annotations

NS = 1_000_000_000      # nanoseconds per second


def plural(n: int, one: str, many: str | None = None) -> str:
    """`n` with thousands separators and its noun, singular for exactly one: "1 probe", "2 probes",
    "1,234 probes". `many` spells an irregular plural ("address", "addresses"); without it an "s" is added."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"

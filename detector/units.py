"""The unit every time in the tree is counted in: int64 nanoseconds since the epoch (the `ts_ns` column)."""
from __future__ import annotations

NS = 1_000_000_000      # nanoseconds per second

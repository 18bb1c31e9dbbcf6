"""Start-up of detector on a small capture: the first run after install (compiling) and warm runs.

    .venv/bin/python bench/startup.py [CAPTURE]      # default: captures/echo-loop-rip-ipv4.pcapng

Cold: a fresh, empty numba cache folder (NUMBA_CACHE_DIR), as after a new
install without `make venv`'s warm-up: `info` (which compiles every kernel),
then `analyze` with the report, each timed as a whole process; and
`analyze` alone in another empty cache. Warm: the same commands on the cache
`make venv` filled, and `rules` and `explain RULE`, which load no compiled
code (target: under 0.3 s), the best of RUNS runs each, beside `cat FILE` and
`capinfos FILE` in the same run (this host's speed drifts, so the ratio to
capinfos says more than seconds). Prints a Markdown table (docs/manual/performance.md says what it measures).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DETECTOR = REPO / ".venv" / "bin" / "detector"
RUNS = 5


def _seconds(command: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def _best(command: list[str]) -> float:
    return min(_seconds(command) for _ in range(RUNS))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", nargs="?", default=str(REPO / "captures" / "echo-loop-rip-ipv4.pcapng"))
    args = parser.parse_args()
    capture = args.capture
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        out = str(Path(scratch) / "out")
        info = [str(DETECTOR), "info", capture]
        analyze = [str(DETECTOR), "analyze", capture, "-o", out]
        cold_env = dict(os.environ, NUMBA_CACHE_DIR=str(Path(scratch) / "numba-cache"))
        cold_info = _seconds(info, cold_env)
        cold_analyze = _seconds(analyze, cold_env)
        rows.append(("first `info` after install (compiles every kernel, in two processes)", cold_info))
        rows.append(("then first `analyze` with report", cold_analyze))
        cold_env = dict(os.environ, NUMBA_CACHE_DIR=str(Path(scratch) / "numba-cache-2"))
        rows.append(("first `analyze` alone after install", _seconds(analyze, cold_env)))
        _seconds(analyze)   # the warm cache may lack a signature the file's format needs
        rows.append(("warm `info`", _best(info)))
        rows.append(("warm `analyze` with report", _best(analyze)))
    rows.append(("warm `rules`", _best([str(DETECTOR), "rules"])))
    rows.append(("warm `explain echo-loop`", _best([str(DETECTOR), "explain", "echo-loop"])))
    rows.append(("`cat` (reference)", _best(["cat", capture])))
    reference = "capinfos" if shutil.which("capinfos") else "cat"
    if reference == "capinfos":
        rows.append(("`capinfos` (peer)", _best(["capinfos", capture])))
    base = rows[-1][1]
    size = Path(capture).stat().st_size
    print(f"capture: {Path(capture).name} ({size:,} bytes); {os.cpu_count()} cores; best of {RUNS} for warm runs")
    print()
    print(f"| run | seconds | x {reference} |")
    print("|---|---:|---:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.2f} | {seconds / base:,.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

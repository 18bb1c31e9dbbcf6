"""Times detector.incidents.correlate on many findings: it must stay linear (after one sort) in the findings.

    .venv/bin/python bench/incidents.py                   # the default sizes
    .venv/bin/python bench/incidents.py --sizes 20000 40000 80000

The findings are the five of captures/two-incidents-at-once.pcapng (a probe,
the loop it starts and the receive queue it saturates; a black-holed flow
seen by two rules), copied N/5 times in two shapes:
- apart: each copy an hour after the one before (N/5 x 2 incidents), the
  entities the same in every copy: the sweep must drop what time left behind;
- together: every copy at the same seconds, each with a source address of
  its own but the loop's frame and the flow's community_id shared by all:
  two incidents however many copies, every finding meeting the others.

A linear correlator takes about twice as long for twice the findings; the
ratio column says how far each size is from the one before it. Seconds are
the median of 3 runs of correlate() alone, in this process.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

from detector.analysis import analyze  # noqa: E402
from detector.incidents import correlate  # noqa: E402
from detector.rules import load_rules  # noqa: E402
from detector.units import NS  # noqa: E402

CAPTURE = BENCH_DIR.parent / "captures" / "two-incidents-at-once.pcapng"
RUNS = 3
DEFAULT_SIZES = (10_000, 20_000, 40_000)


def _apart(findings, copies: int) -> list:
    out = []
    for k in range(copies):
        shift = k * 3600 * NS
        out += [dataclasses.replace(f, first_seen=f.first_seen + shift, last_seen=f.last_seen + shift)
                for f in findings]
    return out


def _together(findings, copies: int) -> list:
    out = []
    for k in range(copies):
        own = f"10.{k >> 16 & 255}.{k >> 8 & 255}.{k & 255}"
        out += [dataclasses.replace(f, src_ip=own, identifier=f"{f.identifier}/{k}") for f in findings]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES))
    args = parser.parse_args()
    rules = load_rules()
    findings = analyze([CAPTURE], rules).findings
    print(f"{'shape':<9} {'findings':>9} {'incidents':>9} {'seconds':>8} {'ratio':>6}")
    for shape, build in (("apart", _apart), ("together", _together)):
        before = None
        for size in args.sizes:
            many = build(findings, max(1, size // len(findings)))
            times = []
            for _ in range(RUNS):
                start = time.perf_counter()
                incidents = correlate(many, rules)
                times.append(time.perf_counter() - start)
            seconds = statistics.median(times)
            ratio = f"{seconds / before:.2f}" if before else "-"
            print(f"{shape:<9} {len(many):>9,} {len(incidents):>9,} {seconds:>8.3f} {ratio:>6}")
            before = seconds


if __name__ == "__main__":
    main()

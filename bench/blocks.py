"""Times `detector info` on pcapng files made of many small header blocks: the reader must stay linear.

    .venv/bin/python bench/blocks.py                       # the default shapes and sizes
    .venv/bin/python bench/blocks.py --interfaces 2000 8000 --sections 50000

Shapes (each built in memory, written to bench/out/, read by a fresh process):
- interfaces N: one section, N interface description blocks, then one packet
  on the last interface (a 16,000-interface file is 320 KB);
- sections N: N sections of one interface and one packet each.

A linear reader takes about twice as long for twice the blocks; the ratio
column says how far each size is from the one before it. Seconds are the
wall time of the whole `detector info --json` process, start-up included:
the median of 3 runs, or one run when the first takes longer than 20 s.
"""
from __future__ import annotations

import argparse
import json
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
OUT_DIR = BENCH_DIR / "out"
DETECTOR = BENCH_DIR.parent / ".venv" / "bin" / "detector"

RUNS = 3
SLOW_RUN_S = 20.0           # a first run longer than this is not repeated
RUN_TIMEOUT_S = 300.0       # the quadratic reader took > 100 s on 16,000 interfaces
DEFAULT_INTERFACES = (2_000, 8_000, 16_000)
DEFAULT_SECTIONS = (12_500, 25_000, 50_000)


def _block(kind: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


SHB = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
IDB = _block(1, struct.pack("<HHI", 1, 0, 0))
FRAME = bytes(range(60))


def _epb(iface: int, units: int) -> bytes:
    return _block(6, struct.pack("<IIIII", iface, units >> 32, units & 0xFFFFFFFF, len(FRAME), len(FRAME)) + FRAME)


def many_interfaces(n: int) -> bytes:
    return SHB + IDB * n + _epb(n - 1, 1_700_000_000_000_000)


def many_sections(n: int) -> bytes:
    return (SHB + IDB + _epb(0, 1_700_000_000_000_000)) * n


def time_info(path: Path) -> tuple[float, str, dict | None]:
    """(seconds, how it was taken, the JSON record) of `detector info --json PATH`."""
    taken = []
    record = None
    for _ in range(RUNS):
        began = time.perf_counter()
        try:
            proc = subprocess.run([str(DETECTOR), "info", "--json", str(path)], capture_output=True,
                                  text=True, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return RUN_TIMEOUT_S, f"killed after {RUN_TIMEOUT_S:.0f} s", None
        taken.append(time.perf_counter() - began)
        record = json.loads(proc.stdout) if proc.stdout.strip() else None
        if taken[0] > SLOW_RUN_S:
            return taken[0], "1 run", record
    return statistics.median(taken), f"median of {RUNS}", record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interfaces", type=int, nargs="*", default=list(DEFAULT_INTERFACES))
    parser.add_argument("--sections", type=int, nargs="*", default=list(DEFAULT_SECTIONS))
    args = parser.parse_args(argv)
    if not DETECTOR.exists():
        print(f"bench/blocks.py: {DETECTOR} is missing: run 'make venv' first", file=sys.stderr)
        return 2
    OUT_DIR.mkdir(exist_ok=True)
    # warm the compiled cache so the first size does not pay for compilation
    warm = OUT_DIR / "blocks-warm.pcapng"
    warm.write_bytes(many_interfaces(2))
    time_info(warm)
    print(f"{'shape':<11} {'blocks':>7} {'bytes':>10} {'seconds':>9} {'x prev':>7} {'packets':>8}  runs")
    for shape, build, sizes in (("interfaces", many_interfaces, args.interfaces),
                                ("sections", many_sections, args.sections)):
        previous = None
        for n in sizes:
            path = OUT_DIR / f"blocks-{shape}-{n}.pcapng"
            data = build(n)
            path.write_bytes(data)
            seconds, how, record = time_info(path)
            ratio = f"{seconds / previous:.1f}" if previous else "-"
            packets = record["packets"] if record else "-"
            print(f"{shape:<11} {n:>7,} {len(data):>10,} {seconds:>9.2f} {ratio:>7} {packets:>8}  {how}",
                  flush=True)
            previous = seconds
            path.unlink()
    warm.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())

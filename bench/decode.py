"""Times the compiled header decoder alone, in ns per record, against another tree's in the same run.

    .venv/bin/python bench/decode.py                             # a 1 M-packet bench capture
    .venv/bin/python bench/decode.py CAPTURE --against /tmp/main --rounds 7

The capture's records are read into memory once per process; each round
runs the decoder (`decode_batch`, with and without the fingerprint) over
every batch in a fresh process of each tree in turn, kernels already
compiled, and keeps the best pass of PASSES (a small capture is decoded
over again within a pass, to PASS_RECORDS records). This host's speed
drifts with its other load, so the ratio of two trees measured side by
side says more than either figure: a refactor of the decoder must keep it
at 1.00 or below. Without --against, only this tree is timed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_capture

REPO = Path(__file__).resolve().parents[1]
PACKETS = 1_000_000         # the bench capture's size, when no capture is named
PASSES = 3                  # passes over the capture per process; the fastest counts
PASS_RECORDS = 1_000_000    # a smaller capture is decoded over again within a pass, to this many records
ROUNDS = 5


def measure(tree: Path, capture: Path) -> dict:
    """ns per record of `tree`'s decoder over `capture`, with and without the fingerprint (a worker's job)."""
    sys.path.insert(0, str(tree))
    import numpy as np

    from detector.decode import columns, decode_batch
    from detector.ingest import open_capture

    with open_capture(capture) as reader:
        raws = list(reader)
    records = sum(len(raw) for raw in raws)
    repeats = max(1, PASS_RECORDS // max(records, 1))
    prepared = []
    for raw in raws:
        args = (np.ascontiguousarray(raw.data), raw["offset"], raw["caplen"], raw["wirelen"], raw["linktype"])
        prepared.append((args, columns.allocate(len(raw))))
    args, groups = prepared[0]      # compiled (or loaded from the cache) before the clock starts
    decode_batch(*args, 0, True, groups[np.uint8], groups[np.uint16], groups[np.uint32], groups[np.uint64])
    result = {"records": records}
    for label, fingerprint in (("headers", False), ("with_fingerprint", True)):
        best = float("inf")
        for _ in range(PASSES):
            start = time.perf_counter()
            for _ in range(repeats):
                for args, groups in prepared:
                    decode_batch(*args, 0, fingerprint, groups[np.uint8], groups[np.uint16], groups[np.uint32],
                                 groups[np.uint64])
            best = min(best, time.perf_counter() - start)
        result[label] = best / (records * repeats) * 1e9
    return result


def _worker(tree: Path, capture: Path) -> dict:
    done = subprocess.run([sys.executable, __file__, "--worker", str(tree), str(capture)], cwd=tree,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("capture", nargs="?", type=Path, help="default: the bench capture of make_capture.py")
    parser.add_argument("--against", type=Path, metavar="TREE", help="another checkout of detector to compare with")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(measure(args.worker, args.capture)))
        return 0
    capture = args.capture or make_capture.ensure_capture(PACKETS,
                                                           log=lambda m: print(m, file=sys.stderr))[0]
    trees = {"this tree": REPO} | ({"against": args.against.resolve()} if args.against else {})
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            runs[name].append(_worker(tree, capture))
    print(f"{capture}: {runs['this tree'][0]['records']:,} records, best of {PASSES} passes, median of "
          f"{args.rounds} rounds (ns per record)")
    for label in ("headers", "with_fingerprint"):
        medians = {name: statistics.median(r[label] for r in rs) for name, rs in runs.items()}
        line = f"  {label:17} " + "  ".join(f"{name}: {ns:6.1f}" for name, ns in medians.items())
        if args.against:
            ratios = [a[label] / b[label] for a, b in zip(runs["this tree"], runs["against"])]
            line += f"  ratio {statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Times `detector analyze` on a ring of capture files: one process against an embedded Dask cluster.

    .venv/bin/python bench/cluster.py                        # the 2M-packet bench capture in 8 files
    .venv/bin/python bench/cluster.py --packets 400000 --parts 4 --workers 1,2

The bench capture (bench/make_capture.py) is cut into --parts files with editcap in a scratch folder, as a
ring buffer would write them, and read once before timing (the page cache holds it). Each command runs as a
separate process, start-up and the cluster's own start included, --no-report (the evidence pass runs in the
client either way); the median of --runs runs. Printed: seconds, packets/s, the ratio to one process and to
`cat` of the files, and the bytes of state each partition shipped back (measured by pickling the states of an
in-process fold of the first file, as Dask does).
"""
from __future__ import annotations

import argparse
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_capture

ROOT = Path(__file__).resolve().parents[1]
DETECTOR = ROOT / ".venv" / "bin" / "detector"


def timed(command: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append(time.perf_counter() - began)
        if proc.returncode not in (0, 3):
            sys.exit(f"{' '.join(command)} failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return statistics.median(times)


def state_bytes(path: str) -> int:
    from detector import cluster
    from detector.rules import load_rules
    folded = cluster.fold(cluster.Partition(path, path, 0, 1), "analyze", load_rules())
    return len(pickle.dumps(folded.state, protocol=pickle.HIGHEST_PROTOCOL))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=2_000_000)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--workers", default="2", help="comma-separated worker counts to time (default 2)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    if shutil.which("editcap") is None:
        sys.exit("editcap is missing (Debian package wireshark-common)")
    capture, manifest = make_capture.ensure_capture(args.packets)
    scratch = Path(tempfile.mkdtemp(prefix="detector-cluster-bench-"))
    try:
        per = -(-manifest["packets"] // args.parts)
        subprocess.run(["editcap", "-c", str(per), str(capture), str(scratch / "ring.pcap")], check=True)
        files = sorted(str(p) for p in scratch.glob("ring_*.pcap"))
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)     # into the page cache
        cat = timed(["cat", *files], args.runs)
        base = [str(DETECTOR), "analyze", "--no-report", *files]
        rows = [("one process", timed([*base, "-o", str(scratch / "one")], args.runs))]
        for workers in args.workers.split(","):
            rows.append((f"--workers {workers}", timed([*base, "-o", str(scratch / f"w{workers}"), "--workers",
                                                        workers], args.runs)))
        packets = manifest["packets"]
        print(f"{packets:,} packets in {len(files)} files; cat {cat:.2f} s")
        one = rows[0][1]
        for label, seconds in rows:
            print(f"{label:<14} {seconds:7.2f} s  {packets / seconds:12,.0f} packets/s  "
                  f"x{one / seconds:4.2f} vs one process  x{seconds / cat:6.1f} of cat")
        shipped = state_bytes(files[0])
        per_file = packets / len(files)
        print(f"state shipped per partition: {shipped:,} bytes ({shipped / per_file * 1e6:,.0f} per million packets)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Times `detector analyze` on a ring of capture files: one process against an embedded Dask cluster.

    .venv/bin/python bench/cluster.py                                  # 8 files of 1 M packets, 200 for --each
    .venv/bin/python bench/cluster.py --packets-per-file 200000 --files 4 --each 40 --runs 1   # a quick look

The ring: the bench capture (bench/make_capture.py) of --packets-per-file packets, copied --files times by
editcap with its times moved on by a minute a copy (a ring buffer's consecutive files), in a scratch folder,
read once before timing (the page cache holds it). Each command runs as a separate process, start-up and the
cluster's own start included, --no-report; the median of --runs runs. Printed: seconds, packets/s, the
ratios the issue sets targets for (2 workers >= 1.8x one worker; one worker <= 15 % slower than no cluster),
`cat` of the files for scale; then one file alone, whole in one process and cut into byte ranges on 2
workers; then `analyze --each` over --each small captures, in sequence and on 2 workers
(target >= 1.8x); then the bytes of state a partition ships back (the pickled state of an in-process fold of
one ring file, as Dask ships it) and, from them and the measured rate of one worker, a paper estimate of 10
and 100 machines of 16 cores on a 10 Gbit/s network. Timings are of this machine at this moment: a loaded
machine gives meaningless ratios.
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
# the paper estimate's cluster: machines of CORES cores on a network of LINK_BITS_S a machine
MACHINES = (10, 100)
CORES = 16
LINK_BITS_S = 10e9
# packets of each small capture of the --each run
EACH_PACKETS = 2_000


def timed(command: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        proc = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append(time.perf_counter() - began)
        if proc.returncode not in (0, 3):
            sys.exit(f"{' '.join(command[:4])}... failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return statistics.median(times)


def ring(capture: Path, folder: Path, files: int) -> list[str]:
    """`files` copies of `capture`, each a minute after the one before (editcap -t), as a ring buffer's."""
    out = []
    for k in range(files):
        path = folder / f"ring_{k:05d}.pcap"
        subprocess.run(["editcap", "-t", str(60 * k), str(capture), str(path)], check=True)
        out.append(str(path))
    return out


def shipped_and_merged(first: str, second: str, runs: int) -> tuple[int, float]:
    """The bytes of the analysis state one fold of `second` (a whole-file partition after `first`) ships back,
    pickled as Dask does, and the seconds the client takes to load it and merge it into the state of `first`
    (median of `runs`; the first merge, which loads the merge kernels, left out)."""
    from detector import cluster
    from detector.rules import load_rules
    rules = load_rules()
    earlier = cluster.fold(cluster.Partition(first, first, 0, 1), "analyze", rules)
    later = cluster.fold(cluster.Partition(second, second, 1, 1 + earlier.packets, 1), "analyze", rules)
    kept, shipped = (pickle.dumps(f, protocol=pickle.HIGHEST_PROTOCOL) for f in (earlier, later))
    times = []
    for _ in range(runs + 1):
        state = pickle.loads(kept).state
        began = time.perf_counter()
        state.merge(pickle.loads(shipped).state)
        times.append(time.perf_counter() - began)
    return len(shipped), statistics.median(times[1:])


def estimate(per_core_pps: float, bytes_per_packet: float, state_per_mpkt: float, merge_pps: float) -> list[str]:
    """A paper estimate (module docstring): cores at the measured rate of one worker, capped by each machine
    reading its captures over its link, by the client's link receiving the states and by the client merging
    them one after the other (the merge is a fold in capture order, on one core)."""
    lines = []
    for machines in MACHINES:
        compute = machines * CORES * per_core_pps
        read = machines * LINK_BITS_S / 8 / bytes_per_packet
        ship = LINK_BITS_S / 8 / (state_per_mpkt / 1e6)
        rate = min(compute, read, ship, merge_pps)
        bound = {compute: "cores", read: "reading the captures over each machine's link",
                 ship: "the client's link receiving states", merge_pps: "the client merging the states"}[rate]
        lines.append(f"  {machines:>3} machines x {CORES} cores: ~{rate / 1e6:,.0f} M packets/s "
                     f"(~{rate * bytes_per_packet * 8 / 1e9:,.0f} Gbit/s of capture), bound by {bound}; "
                     f"cores alone {compute / 1e6:,.0f} M/s, links {read / 1e6:,.0f} M/s, states {ship / 1e6:,.0f} "
                     f"M/s, merges {merge_pps / 1e6:,.0f} M/s")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets-per-file", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--each", type=int, default=200, help="small captures for the --each run (0: none)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    if shutil.which("editcap") is None:
        sys.exit("editcap is missing (Debian package wireshark-common)")
    capture, manifest = make_capture.ensure_capture(args.packets_per_file)
    scratch = Path(tempfile.mkdtemp(prefix="detector-cluster-bench-"))
    try:
        files = ring(capture, scratch, args.files)
        subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)     # into the page cache
        cat = timed(["cat", *files], args.runs)
        base = [str(DETECTOR), "analyze", "--no-report", *files]
        one = timed([*base, "-o", str(scratch / "one")], args.runs)
        w1 = timed([*base, "-o", str(scratch / "w1"), "--workers", "1"], args.runs)
        w2 = timed([*base, "-o", str(scratch / "w2"), "--workers", "2"], args.runs)
        packets = manifest["packets"] * args.files
        print(f"{packets:,} packets in {len(files)} files of {manifest['bytes'] / 2**20:,.0f} MiB; "
              f"cat {cat:.2f} s")
        for label, seconds in (("one process", one), ("--workers 1", w1), ("--workers 2", w2)):
            print(f"  {label:<12} {seconds:7.2f} s  {packets / seconds:12,.0f} packets/s  x{seconds / cat:6.1f} of cat")
        print(f"  --workers 2 is x{w1 / w2:.2f} as fast as --workers 1 (target >= 1.8); --workers 1 takes "
              f"{(w1 / one - 1) * 100:+.0f} % of one process's time (target <= +15 %)")
        # one file alone: --workers 2 cuts it into byte ranges (auto_partitions), one process reads it whole
        single = [str(DETECTOR), "analyze", "--no-report", files[0]]
        alone = timed([*single, "-o", str(scratch / "file-one")], args.runs)
        ranges = timed([*single, "-o", str(scratch / "file-w2"), "--workers", "2"], args.runs)
        print(f"one file of {manifest['packets']:,} packets: one process {alone:.2f} s, --workers 2 (byte ranges) "
              f"{ranges:.2f} s: x{alone / ranges:.2f}")
        if args.each:
            small, _ = make_capture.ensure_capture(EACH_PACKETS)
            each = []
            for k in range(args.each):
                path = scratch / "each" / f"case-{k:04d}.pcap"
                path.parent.mkdir(exist_ok=True)
                shutil.copyfile(small, path)
                each.append(str(path))
            command = [str(DETECTOR), "analyze", "--each", "--no-report", *each]
            alone = timed([*command, "-o", str(scratch / "each-1")], args.runs)
            two = timed([*command, "-o", str(scratch / "each-2"), "--workers", "2"], args.runs)
            print(f"analyze --each over {args.each} captures of {EACH_PACKETS:,} packets: in sequence {alone:.2f} s, "
                  f"--workers 2 {two:.2f} s: x{alone / two:.2f} (target >= 1.8)")
        shipped, merge_s = shipped_and_merged(files[0], files[1], args.runs)
        per_mpkt = shipped / manifest["packets"] * 1e6
        print(f"state shipped per partition (one file of {manifest['packets']:,} packets): {shipped:,} bytes, "
              f"{per_mpkt:,.0f} bytes per million packets; loaded and merged by the client in {merge_s:.3f} s "
              f"({manifest['packets'] / merge_s / 1e6:,.1f} M packets/s)")
        print("paper estimate (not measured): one worker's rate on every core")
        for line in estimate(packets / w1, manifest["bytes"] / manifest["packets"], per_mpkt,
                             manifest["packets"] / merge_s):
            print(line)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

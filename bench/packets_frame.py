"""The notebook's packet table against its targets (issue 15), in one run on the bench capture.

    .venv/bin/python bench/packets_frame.py                       # the 2 M-packet capture of bench/run.py
    .venv/bin/python bench/packets_frame.py --capture FILE --small captures/echo-loop-rip-ipv4.pcapng

Three figures, each a ratio to a peer or a size measured in the same run:
- `capture.packets_frame(FIVE)` in a process of its own against `detector flows -o flows.csv` on the same
  file: wall time, start-up included for both (target: within 3x);
- that call's memory: the process's peak RSS above what it held before the call (imports, compiled kernels),
  against the five columns' own size (DataFrame.memory_usage(deep=True); target: within 2x); the whole
  process's peak is shown too, and what the peak is made of: whether it came during the read or while the
  batches' pieces are joined, the columns kept by then, the capture's mapped pages, the other anonymous
  memory (batches in flight, freed memory the allocator keeps, the join's new arrays);
- the full-schema frame (`capture.packets`) of a small capture, timed in the process once it is warm
  (imports done, kernels cached; target: under 1 s), and the process's wall time from a cold start.

Each child process first asks the same of the small capture, so that the call measured finds its modules
loaded and its memory baseline includes them; the process's wall time includes that (a fraction of a second).

Every figure is printed; nothing is asserted (timing belongs in bench/, not in the tests).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_capture
from run import DETECTOR, GNU_TIME, OUT_DIR, REPO, measure

# The five columns of a typical question ("who talked to whom on which port, when").
FIVE = ["time", "src_ip", "dest_ip", "dest_port", "proto"]
SMALL = REPO / "captures" / "echo-loop-rip-ipv4.pcapng"
TARGET_TIME_RATIO = 3.0
TARGET_MEMORY_RATIO = 2.0
TARGET_SMALL_S = 1.0

# Run in a process of its own: the packet table's columns of one capture, and what they cost. The batches'
# columns (packet_view.arrays_of: all kept, no `where`) and the consumer's frame are wrapped (measurement only)
# to know, at each sample, the bytes of columns kept so far and whether the read is over (the kept blocks and
# chunks then being joined into the table).
CHILD = """
import json, resource, sys, threading, time
import detector
from detector import api, packet_view
from detector.ingest import reader

def memory():
    out = {}
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(("VmRSS:", "RssAnon:", "RssFile:")):
                name, value = line.split(":")
                out[name] = int(value.split()[0])
    return out

path, columns, warm = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
detector.open(warm).packets_frame(columns)      # warm on a small capture: modules loaded, kernels from the cache
kept = [0]
read_over = {}
arrays_of, frame_of_kept = packet_view.arrays_of, api._PacketColumns.frame

def counted_arrays(cols, names):
    arrays = arrays_of(cols, names)
    kept[0] += sum(array.nbytes for array in arrays.values())
    return arrays

def timed_frame(self):
    read_over["memory"] = memory()
    return frame_of_kept(self)

packet_view.arrays_of, api._PacketColumns.frame = counted_arrays, timed_frame
capture = detector.open(path)
before = memory()
peak = dict(before)
at_peak = {"memory": dict(before), "kept_kib": 0, "joining": False}
reading = {"file": 0, "other_anon": 0}      # during the read: the most mapped, the most anonymous beyond the kept
done = threading.Event()

def sample():
    while not done.wait(0.002):
        now, kept_kib, joining = memory(), kept[0] // 1024, bool(read_over)
        for name, value in now.items():
            peak[name] = max(peak[name], value)
        if now["VmRSS"] > at_peak["memory"]["VmRSS"]:
            at_peak.update(memory=now, kept_kib=kept_kib, joining=joining)
        if not joining:
            reading["file"] = max(reading["file"], now["RssFile"] - before["RssFile"])
            reading["other_anon"] = max(reading["other_anon"], now["RssAnon"] - before["RssAnon"] - kept_kib)

sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
began = time.perf_counter()
frame = capture.packets_frame(columns)
seconds = time.perf_counter() - began
done.set()
sampler.join()
print(json.dumps({"rows": len(frame), "columns": frame.shape[1], "seconds": seconds, "before": before,
                  "peak": peak, "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "frame_bytes": int(frame.memory_usage(deep=True).sum()), "at_peak": at_peak,
                  "read_over": read_over.get("memory", before), "reading": reading,
                  "batch_packets": api.FRAME_BATCH_PACKETS, "keep_batches": reader.MAP_KEEP_BATCHES}))
"""


def child(capture: Path, columns, warm: Path) -> tuple[dict, object]:
    """Run CHILD under GNU time (warmed up on the capture `warm`); (what it printed, the run)."""
    out = OUT_DIR / "packets_frame.json"
    run = measure([sys.executable, "-c", CHILD, str(capture), json.dumps(columns), str(warm)], stdout_path=out)
    if run.code:
        raise SystemExit(f"packets_frame run failed ({run.code}): {run.stderr[-2000:]}")
    report = json.loads(out.read_text())
    out.unlink()
    return report, run


def peak_parts(five: dict, frame_mib: float) -> list[str]:
    """What the call's peak is made of, from the child's samples: when it came (reading, or joining the pieces
    into the table), the columns kept by then, the capture's mapped pages, the rest of the anonymous memory; and
    the most each of the last two reached during the read."""
    before, at = five["before"], five["at_peak"]
    kept = at["kept_kib"] / 1024
    mapped = (at["memory"]["RssFile"] - before["RssFile"]) / 1024
    other = (at["memory"]["RssAnon"] - before["RssAnon"]) / 1024 - kept
    over = five["read_over"]
    left = (over["RssAnon"] - before["RssAnon"]) / 1024 - frame_mib
    when = "while joining the batches' pieces into the table" if at["joining"] else "during the read"
    return [
        f"  the peak came {when}: {kept:,.1f} MiB of columns kept, {mapped:,.1f} MiB of the capture mapped, "
        f"{other:,.1f} MiB other anonymous memory"
        + (f" (the read over, {left:,.1f} MiB beyond the columns: freed batch memory the allocator keeps; the "
           "join copies a fixed-width column's blocks into it a block at a time)"
           if at["joining"] else " (decoded batches in flight, freed batch memory the allocator keeps)"),
        f"  during the read ({five['batch_packets']:,}-packet batches): at most {five['reading']['file'] / 1024:,.1f} "
        f"MiB of the capture mapped (the pages of the reader's last {five['keep_batches']} batches) and "
        f"{five['reading']['other_anon'] / 1024:,.1f} MiB anonymous beyond the columns kept (decoded batches in "
        "flight, what glibc's arenas keep of freed decode arrays)",
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", type=Path, help="default: bench/out's 2 M-packet capture (built if missing)")
    parser.add_argument("--small", type=Path, default=SMALL)
    args = parser.parse_args(argv)
    if not Path(GNU_TIME).exists():
        raise SystemExit(f"{GNU_TIME} is missing (apt-get install time)")
    OUT_DIR.mkdir(exist_ok=True)
    capture = args.capture or make_capture.ensure_capture(make_capture.DEFAULT_PACKETS)[0]
    subprocess.run(["cat", str(capture)], stdout=subprocess.DEVNULL, check=True)    # into the page cache

    flows_csv = OUT_DIR / "packets_frame-flows.csv"
    flows = measure([str(DETECTOR), "flows", str(capture), "-o", str(flows_csv)])
    flows_csv.unlink(missing_ok=True)
    five, five_run = child(capture, FIVE, args.small)
    small, small_run = child(args.small, None, args.small)

    before, peak = five["before"], five["peak"]
    grown_mib = (max(five["peak_rss_kib"], peak["VmRSS"]) - before["VmRSS"]) / 1024
    anon_mib = (peak["RssAnon"] - before["RssAnon"]) / 1024
    file_mib = (peak["RssFile"] - before["RssFile"]) / 1024
    frame_mib = five["frame_bytes"] / 2 ** 20
    time_ratio = five_run.seconds / flows.seconds
    memory_ratio = grown_mib / frame_mib
    lines = [
        f"capture: {capture} ({five['rows']:,} packets)",
        f"detector flows -o flows.csv: {flows.seconds:.2f} s, peak RSS {flows.rss_mib:,.0f} MiB",
        f"packets_frame({FIVE}): {five_run.seconds:.2f} s for the process ({five['seconds']:.2f} s in the call), "
        f"{time_ratio:.2f}x detector flows (target <= {TARGET_TIME_RATIO:g}x)",
        f"  the five columns: {frame_mib:,.1f} MiB; the call's peak RSS above the {before['VmRSS'] / 1024:,.0f} MiB "
        f"held before it: {grown_mib:,.1f} MiB = {memory_ratio:.2f}x (target <= {TARGET_MEMORY_RATIO:g}x); "
        f"process peak {five_run.rss_mib:,.0f} MiB",
        f"  of which anonymous memory (columns, batches): {anon_mib:,.1f} MiB = {anon_mib / frame_mib:.2f}x; "
        f"pages of the mapped capture (page cache, the reader's window): {file_mib:,.1f} MiB",
        *peak_parts(five, frame_mib),
        f"full schema of {args.small.name} ({small['rows']:,} packets, {small['columns']} columns): "
        f"{small['seconds']:.3f} s warm (target < {TARGET_SMALL_S:g} s), {small_run.seconds:.2f} s for the "
        f"process (started cold, two reads)",
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

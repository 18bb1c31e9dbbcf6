"""What Wireshark's view of the cited frames adds to `detector analyze` (issue 13: at most 2 s with up to 20
dissected frames, on the bundled captures).

    .venv/bin/python bench/dissect.py [CAPTURE ...]      # default: the bundled captures listed in CAPTURES

Each capture is analysed as a user runs it, a whole `detector analyze CAPTURE -o DIR` process (with its site
file where captures/NAME.site.yaml exists), the best of RUNS runs each way: with tshark on PATH (the report
dissects the first frames of each finding's evidence pcap, report.dissect) and with a PATH that has no tshark
(the report says so and dissects nothing). The difference is what the dissections cost; the frames dissected
are counted in the report. Beside the wall time, the CPU time the run and its children (tshark) used, which
a loaded host changes less. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DETECTOR = REPO / ".venv" / "bin" / "detector"
RUNS = 3
# the budget for the dissections of one report
BUDGET_S = 2.0
# The bundled captures with the most evidence pcaps (one tshark run each: rip-authenticated's 11 findings
# dissect the budget's 20 frames in 11 runs), and the seed incidents: a RIP echo loop, PMTUD, seed 002's chain.
CAPTURES = ("rip-authenticated.pcapng", "rip-routers.pcapng", "rip-poisoning.pcapng", "arp-spoof-mitm.pcapng",
            "rip-injection.pcapng", "unicast-flood-vrrp-chain.pcapng", "identical-frame-floods.pcapng",
            "echo-loop-rip-ipv4.pcapng", "pmtud-blackhole-ipv4.pcapng", "hostile-markup.pcapng")


def _run(command: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and every process it ran, tshark included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _best(command: list[str], env: dict) -> tuple[float, float]:
    """The best wall time of RUNS runs, and the least CPU time."""
    runs = [_run(command, env) for _ in range(RUNS)]
    return min(wall for wall, _cpu in runs), min(cpu for _wall, cpu in runs)


def _analyze(capture: Path, out: Path) -> list[str]:
    site = capture.with_name(capture.name.split(".")[0] + ".site.yaml")
    return [str(DETECTOR), "analyze", str(capture), "-o", str(out), *(["--site", str(site)] if site.exists() else [])]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captures", nargs="*", default=[str(REPO / "captures" / name) for name in CAPTURES])
    args = parser.parse_args()
    if shutil.which("tshark") is None:
        print("tshark is not installed (apt-get install tshark): nothing to measure", file=sys.stderr)
        return 1
    with_tshark = dict(os.environ)
    # the venv's programs and nothing else: no tshark (detector needs no other program on PATH)
    without = dict(os.environ, PATH=str(DETECTOR.parent))
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.captures:
            capture = Path(name)
            out = Path(scratch) / capture.name
            command = _analyze(capture, out)
            _run(command, with_tshark)          # warm the page cache and the kernels' cache
            plain, plain_cpu = _best(command, without)
            dissected, dissected_cpu = _best(command, with_tshark)
            page = (out / "report.html").read_text()
            frames = len(re.findall(r'<p class="dissected">', page))
            runs = len(re.findall(r"<h3>Wireshark's view</h3>", page))
            rows.append((capture.name, frames, runs, plain, dissected, plain_cpu, dissected_cpu))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; best of {RUNS} runs\n")
    print("| capture | frames dissected | tshark runs | analyze without tshark (s) | with (s) | added (s) "
          "| added CPU (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, frames, runs, plain, dissected, plain_cpu, dissected_cpu in rows:
        print(f"| {name} | {frames} | {runs} | {plain:.2f} | {dissected:.2f} | {dissected - plain:+.2f} "
              f"| {dissected_cpu - plain_cpu:+.2f} |")
    worst = max(rows, key=lambda row: row[4] - row[3])
    print(f"\nworst: {worst[4] - worst[3]:+.2f} s for {worst[1]} frames ({worst[0]}); budget {BUDGET_S:.1f} s: "
          f"{'met' if worst[4] - worst[3] <= BUDGET_S else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What Wireshark's view of the cited frames adds to `detector analyze` (issue 13: at most 2 s with up to 20
dissected frames, on the bundled captures).

    .venv/bin/python bench/dissect.py [CAPTURE ...]      # default: the bundled captures listed in CAPTURES

Each capture is analysed as a user runs it, a whole `detector analyze CAPTURE -o DIR` process (with its site
file where captures/NAME.site.yaml exists), the best of RUNS runs each way: with tshark on PATH (the report
dissects the first frames of each finding's evidence pcap, report.dissect) and with a PATH that has no tshark
(the report says so and dissects nothing). The difference is what the dissections cost; the frames dissected
are counted in the report. `cat FILE` in the same run says how loaded the host is. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import os
import re
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


def _seconds(command: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


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
            _seconds(command, with_tshark)          # warm the page cache and the kernels' cache
            plain = min(_seconds(command, without) for _ in range(RUNS))
            dissected = min(_seconds(command, with_tshark) for _ in range(RUNS))
            frames = len(re.findall(r'<p class="dissected">', (out / "report.html").read_text()))
            cat = min(_seconds(["cat", str(capture)], with_tshark) for _ in range(RUNS))
            rows.append((capture.name, frames, plain, dissected, dissected - plain, cat))
    print("| capture | frames dissected | analyze without tshark (s) | with (s) | added (s) | cat (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, frames, plain, dissected, added, cat in rows:
        print(f"| {name} | {frames} | {plain:.2f} | {dissected:.2f} | {added:+.2f} | {cat:.3f} |")
    worst = max(rows, key=lambda row: row[4])
    print(f"\nworst: {worst[4]:+.2f} s for {worst[1]} frames ({worst[0]}); budget {BUDGET_S:.1f} s: "
          f"{'met' if worst[4] <= BUDGET_S else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Builds the real-traffic mix the report pass is measured on: other projects' captures, merged and repeated.

The Ethernet captures of ../shared/captures-real (MANIFEST.tsv) holding at
least MIN_PACKETS packets over at most MAX_SPAN_S of capture time are each
moved to start STAGGER_S after the one before (editcap -t) and merged into
one pcapng (mergecap); that base is then copied COPY_GAP_S apart until the
mix holds about the packets asked for. What a user feeds the tool on a bad
day: many protocols, real incidents (scans, spoofing, storms) among benign
traffic, dozens of findings and evidence files, a report that cites them.

    .venv/bin/python bench/real_mix.py                   # ~500k packets, cached in bench/out/
    .venv/bin/python bench/real_mix.py --packets 100000

The file is cached in bench/out/ under a name holding its size and a digest
of the captures it was built from, so a changed corpus builds a new one.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
OUT_DIR = BENCH_DIR / "out"
CORPUS = BENCH_DIR.parent.parent / "shared" / "captures-real"
DEFAULT_PACKETS = 500_000
MIN_PACKETS = 100               # smaller captures add files, not traffic
MAX_SPAN_S = 86_400             # a capture spanning years (clock jumps) would stretch every bin of the mix
STAGGER_S = 7                   # between the starts of two captures in the base
COPY_GAP_S = 400                # between two copies of the base
BASE_EPOCH = 1_700_000_000      # where the base starts (2023-11-14)


class MixError(Exception):
    """Why the mix cannot be built (one line)."""


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise MixError(f"{name} is missing (Debian package wireshark-common; `make venv` installs tshark with it)")
    return path


def chosen(corpus: Path = CORPUS) -> list[tuple[Path, int]]:
    """The corpus captures the mix is built from, with their packet counts, in the manifest's order."""
    manifest = corpus / "MANIFEST.tsv"
    if not manifest.is_file():
        raise MixError(f"{manifest}: no such file (the real captures live in ../shared/captures-real)")
    with manifest.open(newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return [(corpus / row["path"], int(row["packet_count"])) for row in rows
            if row["linktype"] == "ether" and int(row["packet_count"] or 0) >= MIN_PACKETS]


def _times(path: Path) -> tuple[float, float] | None:
    """The first and last packet time of `path` (capinfos), None where it cannot tell."""
    run = subprocess.run([_tool("capinfos"), "-a", "-e", "-S", "-T", "-r", str(path)], capture_output=True, text=True)
    try:
        first, last = (float(v) for v in run.stdout.strip().split("\t")[1:3])
    except ValueError:
        return None
    return first, last


def build(packets: int = DEFAULT_PACKETS, log=print) -> tuple[Path, int]:
    """The cached mix of about `packets` packets (built if missing): (its path, its packet count)."""
    sources = chosen()
    digest = hashlib.sha256("\n".join(f"{p.relative_to(CORPUS)}:{n}" for p, n in sources).encode()).hexdigest()[:10]
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    target = OUT_DIR / f"real-mix-{packets}-{digest}.pcapng"
    count = target.with_suffix(".count")
    if target.is_file() and count.is_file():
        return target, int(count.read_text())
    editcap, mergecap = _tool("editcap"), _tool("mergecap")
    with tempfile.TemporaryDirectory(dir=OUT_DIR) as scratch:
        work = Path(scratch)
        parts, base_packets = [], 0
        for k, (path, n) in enumerate(sources):
            times = _times(path)
            if times is None or times[1] - times[0] > MAX_SPAN_S:
                continue
            part = work / f"part-{k}.pcapng"
            shift = BASE_EPOCH + STAGGER_S * len(parts) - int(times[0])
            if subprocess.run([editcap, "-F", "pcapng", "-t", str(shift), str(path), str(part)],
                              capture_output=True).returncode == 0:
                parts.append(part)
                base_packets += n
        if not parts:
            raise MixError(f"no capture of {CORPUS} qualifies for the mix")
        base = work / "base.pcapng"
        subprocess.run([mergecap, "-F", "pcapng", "-w", str(base), *map(str, parts)], check=True)
        copies = max(1, round(packets / base_packets))
        shifted = []
        for k in range(copies):
            copy = work / f"copy-{k}.pcapng"
            subprocess.run([editcap, "-t", str(COPY_GAP_S * k), str(base), str(copy)], check=True)
            shifted.append(copy)
        partial = work / "mix.pcapng"
        subprocess.run([mergecap, "-F", "pcapng", "-w", str(partial), *map(str, shifted)], check=True)
        partial.replace(target)
    count.write_text(str(base_packets * copies))
    log(f"real mix: {len(parts)} captures, {copies} copies, {base_packets * copies:,} packets -> {target.name}")
    return target, base_packets * copies


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=DEFAULT_PACKETS, metavar="N")
    args = parser.parse_args(argv)
    path, n = build(args.packets)
    print(f"{path} ({n:,} packets)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except MixError as exc:
        print(f"real_mix: {exc}", file=sys.stderr)
        sys.exit(2)

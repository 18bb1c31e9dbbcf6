"""Times detector against its peers on one generated capture, in one run: wall time, packets/s, peak RSS.

    make bench                                   # = .venv/bin/python bench/run.py
    .venv/bin/python bench/run.py --packets 200000 --tools cat,flows,dpkt
    .venv/bin/python bench/run.py --skip-slow --memory-check

Every tool reads the same cached capture (bench/make_capture.py), already in
the page cache, as a separate process. Seconds are wall clock for the whole
process, start-up included: the median of 3 runs, or a single run when the
first one takes longer than SLOW_RUN_S. Peak RSS is the process's maximum
resident set size as GNU time reports it (for a tool that forks workers, the
largest single process). The table goes to stdout and, as Markdown, into the
manual's docs/manual/performance.md, between the markers of its block (PAGE_BEGIN,
PAGE_END), so the page always shows the latest run and its history is git's; a
--packets N trial writes bench/out/results-N.md instead.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import json
import mmap
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_capture
import real_mix

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
OUT_DIR = make_capture.OUT_DIR
VENV_BIN = REPO / ".venv" / "bin"
DETECTOR = VENV_BIN / "detector"
# scapy, dpkt and nfstream run from a venv of their own (make bench builds it):
# their dependencies must not weigh on the detector's start-up.
PEERS_PYTHON = REPO / ".venv-peers" / "bin" / "python"
PEERS = BENCH_DIR / "peers.py"
GNU_TIME = "/usr/bin/time"
# The manual's page of figures, and the markers of the block this script rewrites in it (nothing else there)
PAGE = REPO / "docs" / "manual" / "performance.md"
PAGE_BEGIN = "<!-- begin: written by bench/run.py (make bench); do not edit by hand -->"
PAGE_END = "<!-- end: written by bench/run.py -->"

RUNS = 3                        # median of this many runs per tool
SLOW_RUN_S = 60.0               # a first run longer than this is not repeated
RUN_TIMEOUT_S = 3600.0          # a run still going after this is killed and reported
SCAPY_SAMPLE = 200_000          # scapy reads this many packets when the whole file ...
SCAPY_FULL_LIMIT_S = 180.0      # ... would take longer than this; packets/s are extrapolated
MEMORY_CHECK_PACKETS = 10_000_000

# Targets, printed beside the figures (not asserted: timing belongs here, not in tests).
# Issues 11 and 12: `analyze --no-report` with every rule within this many times `cat FILE` in the same run.
TARGET_ANALYZE_CAT_RATIO = 8.0
# Issue 28: the rules together add at most this many times `cat FILE` to analyze --no-report; on the real-traffic
# mix (real_mix.py) `analyze` with its report takes at most this many times `analyze --no-report`.
TARGET_RULES_CAT_RATIO = 3.0
TARGET_REPORT_RATIO = 1.5
TARGET_FLOWS_PPS = 2_000_000
TARGET_ANALYZE_PPS = 1_000_000
TARGET_PEAK_RSS_MIB = 1536

# The fields asked of tshark: what a flow table needs, nothing more.
TSHARK_FIELDS = ("ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "tcp.srcport", "tcp.dstport",
                 "udp.srcport", "udp.dstport", "frame.len")
# tshark's fairest setting keeps only these dissectors (plus its internal _ws.*
# ones). tshark 4.0 has no --disable-all-protocols, so every other protocol is
# disabled by name; "data" is the sink for undissected payload.
TSHARK_KEEP = {"frame", "eth", "ethertype", "vlan", "ip", "ipv6", "tcp", "udp", "icmp", "icmpv6",
               "data"}

ALL_TOOLS = ("cat", "flows", "analyze", "analyze-core", "startup", "tshark", "tshark-fair", "scapy", "dpkt", "nfstream",
             "mix-cat", "mix-analyze", "mix-report", "mix-tshark-expert")
SLOW_TOOLS = ("scapy", "nfstream")
LABELS = {
    "cat": "cat FILE > /dev/null (page-cache floor)",
    "flows": "detector flows -o flows.csv",
    "analyze": "detector analyze --no-report -o DIR",
    "analyze-core": "detector analyze --no-report, every rule disabled (capture core + start-up)",
    "startup": "detector analyze --no-report of a 1-packet capture (start-up alone)",
    "tshark": "tshark -T fields (defaults)",
    "tshark-fair": "tshark -T fields (no reassembly, L2-L4 dissectors only)",
    "scapy": "scapy PcapReader (IP, ports)",
    "dpkt": "dpkt Reader + Ethernet + 5-tuple dict",
    "nfstream": "nfstream NFStreamer().to_pandas()",
    "mix-cat": "real mix: cat FILE > /dev/null",
    "mix-analyze": "real mix: detector analyze --no-report -o DIR",
    "mix-report": "real mix: detector analyze -o DIR (report.md, report.html, evidence, tshark's view)",
    "mix-tshark-expert": "real mix: tshark -q -z expert",
}
# the tools timed on the real-traffic mix (real_mix.py) rather than the generated capture
MIX_TOOLS = ("mix-cat", "mix-analyze", "mix-report", "mix-tshark-expert")


class BenchError(Exception):
    """A reason the benchmark cannot run at all (one line for the terminal)."""


@dataclass
class Run:
    seconds: float
    cpu_s: float
    rss_mib: float
    code: int
    stderr: str


@dataclass
class Result:
    tool: str
    packets: int                    # packets the figures stand for (the whole file)
    seconds: float | None = None
    cpu_s: float | None = None
    rss_mib: float | None = None
    runs: str = ""
    flows: int | None = None        # flows the tool reported, where it groups flows
    note: str = ""
    failed: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def pps(self) -> float | None:
        return self.packets / self.seconds if self.seconds else None


def measure(cmd: list[str], stdout_path: Path | None = None) -> Run:
    """Run one process to completion; its wall time, CPU time, peak RSS, exit code, stderr tail.

    The process is started by GNU time, not by this one: Linux carries a
    process's RSS high-water mark across exec, so a child forked from this
    large Python process would report at least this process's size.
    """
    err_path = OUT_DIR / "stderr.tmp"
    usage_path = OUT_DIR / "usage.tmp"
    with open(err_path, "wb") as err, open(stdout_path or os.devnull, "wb") as out:
        began = time.perf_counter()
        proc = subprocess.Popen([GNU_TIME, "-f", "%M %U %S", "-o", str(usage_path), *cmd],
                                stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        killer = threading.Timer(RUN_TIMEOUT_S, os.killpg, (proc.pid, signal.SIGKILL))
        killer.start()
        try:
            code = proc.wait()
        except BaseException:
            # interrupted: the run sits in its own session, so take it down too
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        finally:
            killer.cancel()
        seconds = time.perf_counter() - began
    tail = err_path.read_text(errors="replace").strip().splitlines()
    err_path.unlink()
    # GNU time writes "Command exited with non-zero status N" before the figures,
    # and nothing when the run was killed
    usage = usage_path.read_text().split()
    usage_path.unlink()
    if len(usage) < 3:
        return Run(seconds, 0.0, 0.0, code or 1, f"killed after {RUN_TIMEOUT_S:.0f} s")
    max_rss_kib, user_s, sys_s = int(usage[-3]), float(usage[-2]), float(usage[-1])
    return Run(seconds, user_s + sys_s, max_rss_kib / 1024, code, tail[-1] if tail else "")


def repeat(cmd: list[str], runs: int, stdout_path: Path | None = None) -> tuple[Run, str]:
    """The median run of `runs` (one when the first is slow), and how it was taken."""
    first = measure(cmd, stdout_path)
    if first.code != 0 or first.seconds > SLOW_RUN_S or runs == 1:
        return first, "1 run"
    taken = [first] + [measure(cmd, stdout_path) for _ in range(runs - 1)]
    failed = [r for r in taken if r.code != 0]
    if failed:
        return failed[0], f"{runs} runs"
    taken.sort(key=lambda r: r.seconds)
    median = taken[len(taken) // 2]
    median.rss_mib = max(r.rss_mib for r in taken)
    return median, f"median of {runs}"


def _failure(result: Result, run: Run) -> Result:
    result.failed = True
    result.note = f"failed: exit {run.code}: {run.stderr[:160]}"
    return result


def _fill(result: Result, run: Run, how: str) -> Result:
    result.seconds, result.cpu_s, result.rss_mib, result.runs = run.seconds, run.cpu_s, run.rss_mib, how
    return result


def _count_lines(path: Path) -> int:
    lines = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            lines += chunk.count(b"\n")
    return lines


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            sha.update(chunk)
    return sha.hexdigest()


def tshark_disabled_protocols() -> list[str]:
    listing = subprocess.run(["tshark", "-G", "protocols"], capture_output=True, text=True,
                             check=True).stdout
    names = (line.split("\t")[2] for line in listing.splitlines() if line.count("\t") >= 2)
    return sorted(n for n in names if n not in TSHARK_KEEP and not n.startswith("_ws"))


def bench_cat(capture: Path, packets: int, runs: int) -> Result:
    result = Result("cat", packets)
    run, how = repeat(["cat", str(capture)], runs)
    return _failure(result, run) if run.code else _fill(result, run, how)


def bench_flows(capture: Path, packets: int, runs: int) -> Result:
    result = Result("flows", packets)
    out = OUT_DIR / "flows.csv"
    run, how = repeat([str(DETECTOR), "flows", str(capture), "-o", str(out)], runs)
    if run.code:
        return _failure(result, run)
    result.flows = _count_lines(out) - 1
    out.unlink()
    return _fill(result, run, how)


def bench_analyze(capture: Path, packets: int, runs: int) -> Result:
    result = Result("analyze", packets)
    out = OUT_DIR / "analyze"
    shutil.rmtree(out, ignore_errors=True)
    run, how = repeat([str(DETECTOR), "analyze", "--no-report", str(capture), "-o", str(out)], runs)
    if run.code:
        return _failure(result, run)
    document = json.loads((out / "findings.json").read_text())
    result.flows = document["stats"].get("flows")
    rules = sorted({f["rule"] for f in document["findings"]})
    result.note = f"{len(document['findings'])} findings on this benign traffic" \
        + (f" ({', '.join(rules)})" if rules else "")
    shutil.rmtree(out, ignore_errors=True)
    return _fill(result, run, how)


def _rules_disabled(folder: Path) -> Path:
    """A --rules folder that disables every default rule (each file: the rule's id and `enabled: false`)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for rule_file in sorted((REPO / "rules").glob("*.yaml")):
        rule_id = next(line.split(":", 1)[1].strip() for line in rule_file.read_text().splitlines()
                       if line.startswith("id:"))
        (folder / rule_file.name).write_text(f"id: {rule_id}\nenabled: false\n")
    return folder


def bench_analyze_core(capture: Path, packets: int, runs: int) -> Result:
    """What `analyze` costs before any rule: start-up, reading, decoding, the flow table, findings.json. The
    floor under the `analyze` figure; the rules' share is the difference."""
    result = Result("analyze-core", packets)
    out = OUT_DIR / "analyze-core"
    rules = _rules_disabled(OUT_DIR / "rules-disabled")
    shutil.rmtree(out, ignore_errors=True)
    run, how = repeat([str(DETECTOR), "analyze", "--no-report", "--rules", str(rules), str(capture), "-o", str(out)],
                      runs)
    shutil.rmtree(rules, ignore_errors=True)
    if run.code:
        return _failure(result, run)
    result.flows = json.loads((out / "findings.json").read_text())["stats"].get("flows")
    shutil.rmtree(out, ignore_errors=True)
    return _fill(result, run, how)


def bench_startup(capture: Path, packets: int, runs: int) -> Result:
    """`analyze --no-report` with every rule over a capture of one packet: the interpreter, the imports, the
    rule files, numba's set-up and the cached kernels, the findings of empty states. Its packets/s is not a
    rate; the table shows the seconds."""
    result = Result("startup", packets)
    out = OUT_DIR / "startup"
    tiny = OUT_DIR / "one-packet.pcap"
    with capture.open("rb") as source:
        header = source.read(24)
        record = source.read(16)
        caplen = int.from_bytes(record[8:12], "big" if header[:4] in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d")
                                else "little")
        tiny.write_bytes(header + record + source.read(caplen))
    shutil.rmtree(out, ignore_errors=True)
    run, how = repeat([str(DETECTOR), "analyze", "--no-report", str(tiny), "-o", str(out)], runs)
    shutil.rmtree(out, ignore_errors=True)
    tiny.unlink()
    if run.code:
        return _failure(result, run)
    filled = _fill(result, run, how)
    filled.note = "start-up: one packet, every rule"
    return filled


def _bench_tshark(tool: str, capture: Path, packets: int, runs: int, options: list[str]) -> Result:
    result = Result(tool, packets)
    out = OUT_DIR / f"{tool}.tsv"
    fields = [arg for name in TSHARK_FIELDS for arg in ("-e", name)]
    run, how = repeat(["tshark", "-r", str(capture), *options, "-T", "fields", *fields], runs, out)
    if run.code:
        return _failure(result, run)
    lines = _count_lines(out)
    if lines != packets:
        result.note = f"printed {lines:,} lines for {packets:,} packets"
    result.extra["digest"] = _digest(out)
    out.unlink()
    return _fill(result, run, how)


def bench_tshark(capture: Path, packets: int, runs: int) -> Result:
    return _bench_tshark("tshark", capture, packets, runs, [])


def bench_tshark_fair(capture: Path, packets: int, runs: int) -> Result:
    disabled = [arg for name in tshark_disabled_protocols() for arg in ("--disable-protocol", name)]
    return _bench_tshark("tshark-fair", capture, packets, runs,
                         ["-o", "tcp.desegment_tcp_streams:FALSE", *disabled])


def _peer(tool: str, capture: Path, packets: int, runs: int, limit: int | None = None) -> tuple[Result, dict]:
    result = Result(tool, packets)
    out = OUT_DIR / f"{tool}.json"
    cmd = [str(PEERS_PYTHON), str(PEERS), tool, str(capture)] + (["--limit", str(limit)] if limit else [])
    run, how = repeat(cmd, runs, out)
    if run.code:
        return _failure(result, run), {}
    report = json.loads(out.read_text())
    out.unlink()
    result.flows = report.get("flows")
    if report["packets"] != (limit or packets):
        result.note = f"read {report['packets']:,} of {limit or packets:,} packets"
    return _fill(result, run, how), report


def bench_scapy(capture: Path, packets: int, runs: int) -> Result:
    if packets > SCAPY_SAMPLE:
        sample, _report = _peer("scapy", capture, packets, 1, SCAPY_SAMPLE)
        if sample.failed:
            return sample
        projected = sample.seconds * packets / SCAPY_SAMPLE
        if projected > SCAPY_FULL_LIMIT_S:
            sample.seconds = projected
            sample.cpu_s = None
            sample.note = (f"extrapolated: read the first {SCAPY_SAMPLE:,} packets in "
                           f"{projected * SCAPY_SAMPLE / packets:.1f} s; seconds = packets / that rate")
            return sample
    return _peer("scapy", capture, packets, runs)[0]


def bench_dpkt(capture: Path, packets: int, runs: int) -> Result:
    return _peer("dpkt", capture, packets, runs)[0]


def bench_nfstream(capture: Path, packets: int, runs: int) -> Result:
    if not _peer_module("nfstream"):
        return Result("nfstream", packets, note="not runnable here: nfstream is not installed "
                      f"in {PEERS_PYTHON.parent.parent} (make bench installs the bench extra there)")
    result = _peer("nfstream", capture, packets, runs)[0]
    if result.failed:
        result.note = "not runnable here: " + result.note
    result.failed = False                       # a peer that cannot run is reported, not fatal
    return result


def _mix_analyze(tool: str, capture: Path, packets: int, runs: int, report: bool) -> Result:
    result = Result(tool, packets)
    out = OUT_DIR / tool
    shutil.rmtree(out, ignore_errors=True)
    run, how = repeat([str(DETECTOR), "analyze", *([] if report else ["--no-report"]), str(capture), "-o", str(out)],
                      runs)
    if run.code:
        return _failure(result, run)
    document = json.loads((out / "findings.json").read_text())
    result.flows = document["stats"].get("flows")
    result.note = f"{len(document['findings'])} findings, {len(document.get('incidents') or [])} incidents"
    shutil.rmtree(out, ignore_errors=True)
    return _fill(result, run, how)


def bench_mix_cat(capture: Path, packets: int, runs: int) -> Result:
    result = bench_cat(capture, packets, runs)
    result.tool = "mix-cat"
    return result


def bench_mix_analyze(capture: Path, packets: int, runs: int) -> Result:
    return _mix_analyze("mix-analyze", capture, packets, runs, report=False)


def bench_mix_report(capture: Path, packets: int, runs: int) -> Result:
    return _mix_analyze("mix-report", capture, packets, runs, report=True)


def bench_mix_tshark_expert(capture: Path, packets: int, runs: int) -> Result:
    result = Result("mix-tshark-expert", packets)
    run, how = repeat(["tshark", "-n", "-q", "-r", str(capture), "-z", "expert"], runs)
    return _failure(result, run) if run.code else _fill(result, run, how)


BENCHES = {"cat": bench_cat, "flows": bench_flows, "analyze": bench_analyze, "analyze-core": bench_analyze_core,
           "startup": bench_startup, "tshark": bench_tshark,
           "tshark-fair": bench_tshark_fair, "scapy": bench_scapy, "dpkt": bench_dpkt,
           "nfstream": bench_nfstream, "mix-cat": bench_mix_cat, "mix-analyze": bench_mix_analyze,
           "mix-report": bench_mix_report, "mix-tshark-expert": bench_mix_tshark_expert}


def _peer_module(name: str) -> bool:
    """Whether the peers' Python can import `name`."""
    probe = subprocess.run([str(PEERS_PYTHON), "-c", f"import {name}"], capture_output=True)
    return probe.returncode == 0


def check_requirements(tools: list[str]) -> None:
    """Raise BenchError naming the first required tool that is missing."""
    if not os.access(GNU_TIME, os.X_OK):
        raise BenchError(f"required tool missing: {GNU_TIME} (apt-get install time)")
    if shutil.which("cat") is None:                 # also pulls the capture into the page cache
        raise BenchError("required tool missing: cat (coreutils)")
    if {"flows", "analyze", "analyze-core", "startup", "mix-analyze", "mix-report"} & set(tools) \
            and not os.access(DETECTOR, os.X_OK):
        raise BenchError(f"required tool missing: {DETECTOR} (run `make venv`)")
    if {"tshark", "tshark-fair", "mix-tshark-expert", "mix-report"} & set(tools) and shutil.which("tshark") is None:
        raise BenchError("required tool missing: tshark (apt-get install tshark, or `make venv` as root)")
    if any(t in tools for t in ("scapy", "dpkt", "nfstream")) and not os.access(PEERS_PYTHON, os.X_OK):
        raise BenchError(f"required tool missing: {PEERS_PYTHON} (run `make bench`, which builds it)")
    for module in ("scapy", "dpkt"):
        if module in tools and not _peer_module(module):
            raise BenchError(f"required tool missing: python module {module} in {PEERS_PYTHON} "
                             "(run `make bench`)")


# ---- reporting -----------------------------------------------------------------------

# the floor and our own commands: no "flows vs tool" ratio, never a peer
OURS = ("cat", "flows", "analyze", "analyze-core", "startup", *MIX_TOOLS)


def _fmt(value, spec: str, missing: str = "—") -> str:
    return missing if value is None else format(value, spec)


def _versus(speedup: float) -> str:
    return f"{speedup:,.1f}× faster" if speedup >= 1 else f"{1 / speedup:,.1f}× slower"


def table_rows(results: list[Result]) -> list[list[str]]:
    ours = next((r for r in results if r.tool == "flows" and r.pps), None)
    rows = []
    for r in results:
        if ours is None or r.pps is None or r.tool in OURS:
            ratio = "—"
        else:
            ratio = _versus(ours.pps / r.pps)
        rows.append([LABELS[r.tool], _fmt(r.seconds, ",.2f"), _fmt(r.pps, ",.0f"), ratio,
                     _fmt(r.rss_mib, ",.0f"), _fmt(r.cpu_s, ",.1f"), _fmt(r.flows, ","),
                     r.runs or "—", r.note])
    return rows


HEADER = ["tool", "seconds", "packets/s", "detector flows vs tool", "peak RSS MiB", "CPU s",
          "flows", "runs", "notes"]


def text_table(rows: list[list[str]]) -> str:
    cols = HEADER[:-1]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cols, widths)))]
    for row in rows:
        cells = [cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells) + (f"  {row[-1]}" if row[-1] else ""))
    return "\n".join(lines)


def markdown_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(HEADER) - 2) + ["---"]) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def verdicts(results: list[Result], memory: list[Result]) -> list[str]:
    """The targets, each with the measured figure and whether it is met."""
    by_tool = {r.tool: r for r in results}
    lines = []
    cat, flows, analyze = by_tool.get("cat"), by_tool.get("flows"), by_tool.get("analyze")
    if flows and flows.pps:
        met = "met" if flows.pps >= TARGET_FLOWS_PPS else "NOT met"
        lines.append(f"detector flows: {flows.pps / 1e6:.2f} M packets/s whole process "
                     f"(target >= {TARGET_FLOWS_PPS / 1e6:.0f} M: {met})")
        peers = [r for r in results if r.tool not in OURS and r.pps]
        if peers:
            fastest = max(peers, key=lambda r: r.pps)
            lines.append(f"fastest peer: {fastest.tool}, {fastest.pps / 1e3:,.0f} k packets/s; "
                         f"detector flows is {_versus(flows.pps / fastest.pps)}")
        if cat and cat.seconds:
            lines.append(f"detector flows is within {flows.seconds / cat.seconds:,.1f}× of page-cache "
                         f"read (cat: {cat.seconds:.2f} s)")
    if analyze and analyze.pps:
        met = "met" if analyze.pps >= TARGET_ANALYZE_PPS else "NOT met"
        lines.append(f"detector analyze: {analyze.pps / 1e6:.2f} M packets/s "
                     f"(target >= {TARGET_ANALYZE_PPS / 1e6:.0f} M: {met})")
    lines += _analyze_shares(cat, analyze, by_tool.get("analyze-core"), by_tool.get("startup"))
    lines += _report_share(by_tool)
    for r in memory:
        if r.rss_mib is not None:
            met = "met" if r.rss_mib < TARGET_PEAK_RSS_MIB else "NOT met"
            lines.append(f"detector {r.tool} peak RSS on {r.packets / 1e6:.0f} M packets: "
                         f"{r.rss_mib:,.0f} MiB (target < {TARGET_PEAK_RSS_MIB / 1024:.1f} GiB: {met}; "
                         f"{r.seconds:.1f} s, {r.pps / 1e6:.2f} M packets/s)")
        else:
            lines.append(f"detector {r.tool} on {r.packets / 1e6:.0f} M packets: {r.note}")
    tshark, fair = by_tool.get("tshark"), by_tool.get("tshark-fair")
    if tshark and fair and "digest" in tshark.extra and "digest" in fair.extra:
        same = tshark.extra["digest"] == fair.extra["digest"]
        lines.append("tshark's fair setting prints the same fields as its defaults: "
                     + ("yes (identical output)" if same else "NO: outputs differ"))
    return lines


def _analyze_shares(cat, analyze, core, startup) -> list[str]:
    """`analyze` as a multiple of `cat` against its budget, and the parts of it: start-up, the capture core
    (every rule disabled) and the rules (the rest)."""
    if not (cat and cat.seconds):
        return []
    lines = []
    if analyze and analyze.seconds:
        ratio = analyze.seconds / cat.seconds
        met = "met" if ratio <= TARGET_ANALYZE_CAT_RATIO else "NOT met"
        lines.append(f"detector analyze --no-report: {ratio:,.1f}× cat (budget {TARGET_ANALYZE_CAT_RATIO:g}×: {met})")
    parts = []
    if startup and startup.seconds:
        parts.append(f"start-up {startup.seconds:.2f} s ({startup.seconds / cat.seconds:,.1f}× cat)")
    if core and core.seconds:
        parts.append(f"every rule disabled {core.seconds:.2f} s ({core.seconds / cat.seconds:,.1f}× cat)")
        if analyze and analyze.seconds:
            rules = analyze.seconds - core.seconds
            met = "met" if rules / cat.seconds <= TARGET_RULES_CAT_RATIO else "NOT met"
            parts.append(f"the rules {rules:+.2f} s ({rules / cat.seconds:+,.1f}× cat; budget "
                         f"+{TARGET_RULES_CAT_RATIO:g}×: {met})")
    if parts:
        lines.append("where analyze's time goes: " + "; ".join(parts))
    return lines


def _report_share(by_tool: dict) -> list[str]:
    """On the real-traffic mix: the report pass as a multiple of analyze --no-report, against its budget, and
    beside tshark's expert summary of the same file."""
    bare, full = by_tool.get("mix-analyze"), by_tool.get("mix-report")
    if not (bare and bare.seconds and full and full.seconds):
        return []
    ratio = full.seconds / bare.seconds
    met = "met" if ratio <= TARGET_REPORT_RATIO else "NOT met"
    line = (f"real mix ({full.packets:,} packets): analyze with its report {full.seconds:.2f} s = {ratio:,.2f}× "
            f"analyze --no-report {bare.seconds:.2f} s (budget {TARGET_REPORT_RATIO:g}×: {met}); the report pass "
            f"{full.seconds - bare.seconds:.2f} s")
    cat, expert = by_tool.get("mix-cat"), by_tool.get("mix-tshark-expert")
    if cat and cat.seconds:
        line += f"; analyze --no-report {bare.seconds / cat.seconds:,.1f}× cat of the mix"
    if expert and expert.seconds:
        line += f"; tshark -z expert {expert.seconds:.2f} s"
    return [line]


def environment(capture: Path, manifest: dict) -> list[str]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "unknown cpu")
    mem_kib = next((int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                    if line.startswith("MemTotal:")), 0)
    tshark = subprocess.run(["tshark", "--version"], capture_output=True, text=True).stdout.splitlines() \
        if shutil.which("tshark") else []
    load1 = os.getloadavg()[0]
    lines = [
        f"capture: {capture.name}: {manifest['packets']:,} packets, {manifest['bytes'] / 2**20:,.0f} MiB, "
        f"{manifest['flows']:,} flows ({manifest['flows_tcp']:,} TCP, {manifest['flows_udp']:,} UDP, "
        f"{manifest['flows_icmp']:,} ICMP echo; {manifest['flows_ipv6']:,} IPv6, "
        f"{manifest['flows_vlan']:,} VLAN-tagged), 60 s of traffic",
        f"machine: {cpu}, {os.cpu_count()} cores, {mem_kib / 2**20:.0f} GiB; "
        f"load average {load1:.2f} at start; Python {platform.python_version()}; "
        f"{tshark[0] if tshark else 'tshark missing'}",
        f"method: wall clock of the whole process incl. start-up, file in page cache; median of "
        f"{RUNS} runs (1 run when the first takes > {SLOW_RUN_S:.0f} s); peak RSS and CPU from GNU time",
    ]
    if load1 > (os.cpu_count() or 1) / 2:
        lines.append(f"warning: the machine was busy (load {load1:.2f}); figures may be slow and noisy")
    return lines


def memory_check(log) -> list[Result]:
    """detector's peak RSS on a 10 M packet capture, flows and analyze, one run each."""
    capture, manifest = make_capture.ensure_capture(MEMORY_CHECK_PACKETS, log=log)
    read_ahead(capture)
    results = []
    for tool in ("flows", "analyze"):
        log(f"memory check: detector {tool} on {capture.name} ...")
        results.append(BENCHES[tool](capture, manifest["packets"], 1))
    return results


def read_ahead(capture: Path) -> None:
    """Pull the capture into the page cache, so no tool pays for the disk."""
    subprocess.run(["cat", str(capture)], stdout=subprocess.DEVNULL, check=True)


@contextlib.contextmanager
def resident(capture: Path, log):
    """The capture read into the page cache and locked there (mlock of a read-only mapping) while the block runs.

    Reading it once is not enough on this machine: its kernel pages out memory
    not touched for a few seconds (DAMON's proactive reclaim), page cache
    included, so a tool timed after another could read part of the file from
    disk again (a run measured 6 s of wall for 0.6 s of CPU). Locked pages are
    not paged out. Without the privilege to lock (CAP_IPC_LOCK or a large
    enough RLIMIT_MEMLOCK) the run goes on with a warning in its log.
    """
    read_ahead(capture)
    with capture.open("rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = np.frombuffer(mapped, dtype=np.uint8)
    libc = ctypes.CDLL(None, use_errno=True)
    locked = libc.mlock(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(len(view))) == 0
    if not locked:
        log(f"warning: could not lock {capture.name} in memory ({os.strerror(ctypes.get_errno())}); "
            "the kernel may page it out between runs and the figures then include disk reads")
    try:
        yield locked
    finally:
        if locked:
            libc.munlock(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(len(view)))
        del view
        mapped.close()


def page_around_block(page: Path) -> tuple[str, str]:
    """The page before its block's PAGE_BEGIN marker and after its PAGE_END marker."""
    try:
        text = page.read_text()
    except OSError as exc:
        raise BenchError(f"{page}: cannot read the page of figures: {exc.strerror}") from None
    if text.count(PAGE_BEGIN) != 1 or text.count(PAGE_END) != 1 or text.index(PAGE_BEGIN) > text.index(PAGE_END):
        raise BenchError(f"{page}: needs one '{PAGE_BEGIN}' line, then one '{PAGE_END}' line")
    head, rest = text.split(PAGE_BEGIN)
    return head, rest.split(PAGE_END)[1]


def write_page_block(page: Path, lines: list[str]) -> None:
    """Replaces what lies between the page's PAGE_BEGIN and PAGE_END markers by `lines`, the rest of the page
    kept byte for byte; written under a temporary name and renamed, so an interruption leaves the old page."""
    head, tail = page_around_block(page)
    scratch = page.with_name(f".{page.name}.tmp")
    scratch.write_text("\n".join([head + PAGE_BEGIN, "", *lines, "", PAGE_END]) + tail)
    os.replace(scratch, page)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=make_capture.DEFAULT_PACKETS, metavar="N",
                        help=f"packets in the capture (default {make_capture.DEFAULT_PACKETS:,})")
    parser.add_argument("--tools", metavar="A,B,C",
                        help=f"comma-separated subset of {','.join(ALL_TOOLS)}")
    parser.add_argument("--skip-slow", action="store_true", help="skip " + " and ".join(SLOW_TOOLS))
    parser.add_argument("--memory-check", action="store_true",
                        help=f"also report detector's peak RSS on a {MEMORY_CHECK_PACKETS / 1e6:.0f} M "
                             "packet capture")
    parser.add_argument("--runs", type=int, default=RUNS, metavar="K", help=f"runs per tool (default {RUNS})")
    args = parser.parse_args(argv)

    tools = list(ALL_TOOLS)
    if args.tools:
        tools = [t.strip() for t in args.tools.split(",") if t.strip()]
        unknown = [t for t in tools if t not in ALL_TOOLS]
        if unknown:
            raise BenchError(f"--tools: unknown tool '{unknown[0]}' (known: {', '.join(ALL_TOOLS)})")
    if args.skip_slow:
        tools = [t for t in tools if t not in SLOW_TOOLS]
    if args.packets < 1 or args.runs < 1:
        raise BenchError("--packets and --runs must be at least 1")
    check_requirements(tools + (["flows", "analyze"] if args.memory_check else []))
    if args.packets == make_capture.DEFAULT_PACKETS:
        page_around_block(PAGE)  # a page the figures cannot go into is said before the hour of runs

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    capture, manifest = make_capture.ensure_capture(args.packets, log=log)
    results = []
    with resident(capture, log) as locked:
        env = environment(capture, manifest)
        if locked:
            env.append("the capture was locked in memory (mlock) for the timed runs: no run reads it from disk")
        for tool in tools:
            if tool in MIX_TOOLS:
                continue
            log(f"timing {tool} ...")
            results.append(BENCHES[tool](capture, manifest["packets"], args.runs))
    mixed = [tool for tool in tools if tool in MIX_TOOLS]
    if mixed:
        try:
            mix, mix_packets = real_mix.build(log=log)
        except real_mix.MixError as exc:
            raise BenchError(f"the real-traffic mix: {exc}") from None
        with resident(mix, log):
            env.append(f"real mix: {mix.name}: {mix_packets:,} packets, {mix.stat().st_size / 2**20:,.0f} MiB: "
                       f"other projects' captures ({real_mix.CORPUS.name}) merged and repeated (bench/real_mix.py)")
            for tool in mixed:
                log(f"timing {tool} ...")
                results.append(BENCHES[tool](mix, mix_packets, args.runs))
    memory = memory_check(log) if args.memory_check else []

    rows = table_rows(results)
    summary = verdicts(results, memory)
    print("\n".join(env))
    print()
    print(text_table(rows))
    print()
    print("\n".join(summary))
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    markdown = [f"Latest run: {stamp}, `bench/run.py {' '.join(argv if argv is not None else sys.argv[1:])}`.",
                "", *[f"- {line}" for line in env], "", markdown_table(rows), "",
                *[f"- {line}" for line in summary]]
    # Only the default-size run feeds the manual; smaller trial runs keep their own file.
    if args.packets == make_capture.DEFAULT_PACKETS:
        write_page_block(PAGE, markdown)
        log(f"written to {PAGE}")
    else:
        trial = OUT_DIR / f"results-{args.packets}.md"
        trial.write_text("\n".join(markdown) + "\n")
        log(f"written to {trial}")

    ours_failed = [r for r in results + memory if r.tool in OURS[1:] and r.failed]
    if ours_failed:
        log(f"bench: detector {ours_failed[0].tool} {ours_failed[0].note}")
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        sys.exit(130)

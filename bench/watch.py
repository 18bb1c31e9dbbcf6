"""Benchmark of `detector watch` on a veth pair: the packets/s it sustains without capture drops, and alert latency.

    .venv/bin/python bench/watch.py          (as root; make bench runs it after bench/run.py)

Set-up: a network namespace with a veth pair made here, `detector watch vb`
capturing one end through dumpcap (as in production), tcpreplay sending
into the other. Traffic: the benchmark's deterministic capture of ordinary
traffic (bench/make_capture.py, 200,000 packets of TCP, UDP and ICMP, 60-1518
bytes, looped as needed), replayed at rising rates (tcpreplay --pps) for STEP_S
seconds each.

A rate is *sustained* when, over its step, the kernel dropped no packet for
the capture (dumpcap's socket counter, which /metrics exports), every packet
sent was read, and the watch had read them all within CATCH_UP_S of the
last one being sent (so a backlog hidden in the kernel ring does not pass
for keeping up). The ladder stops at the first rate that fails.

Alert latency: the bundled echo-loop captures replayed at their own pace;
latency is the time from sending the loop's first frame (replay start plus
its offset in the file) to the alert line on the watch's stdout - once on an
idle link, once while the benchmark traffic runs at half the sustained rate.

Both tools share the machine's cores, as on a monitoring box that also
replays nothing: the figures are a floor. Results: a table on stdout and
bench/out/watch.md. Without root, ip or tcpreplay it says why and exits 0.
"""
from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from make_capture import ensure_capture  # noqa: E402  (bench/ is on the path above)

from detector import engine  # noqa: E402
from detector.detectors import AnalysisContext, active_detectors  # noqa: E402
from detector.rules import load_rules  # noqa: E402
from detector.stats import CaptureStats  # noqa: E402

OUT = ROOT / "bench" / "out"
DETECTOR = Path(sys.executable).with_name("detector")
IP = shutil.which("ip") or "/usr/sbin/ip"
TCPREPLAY = shutil.which("tcpreplay")
BENCH_PACKETS = 200_000
# Each rate is held this long (bounded by the capture's packets); long enough
# that a shortfall outgrows dumpcap's 64 MiB kernel ring.
STEP_S = 4.0
RATES = (25_000, 50_000, 100_000, 200_000, 300_000, 400_000, 600_000, 800_000)
CATCH_UP_S = 1.0
LOOP_CAPTURES = ("echo-loop-rip-ipv4.pcapng", "echo-loop-buried.pcapng", "echo-loop-rip-ipv6-vlan.pcap")


def run(*command, check=True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, check=check, timeout=600,
                          **kwargs)


class Namespace:
    def __init__(self):
        self.name = f"dtbench{os.getpid()}"

    def __enter__(self) -> str:
        run(IP, "netns", "add", self.name)
        run(IP, "-n", self.name, "link", "add", "va", "type", "veth", "peer", "name", "vb")
        for dev in ("lo", "va", "vb"):
            run(IP, "-n", self.name, "link", "set", dev, "up")
        run(IP, "netns", "exec", self.name, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
        return self.name

    def __exit__(self, *exc) -> None:
        for pid in run(IP, "netns", "pids", self.name, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        run(IP, "netns", "del", self.name, check=False)


class Watch:
    def __init__(self, ns: str, out: Path):
        self.ns = ns
        self.err_path = out.with_suffix(".stderr")
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen([IP, "netns", "exec", ns, str(DETECTOR), "watch", "vb", "-o", str(out),
                                      "--metrics", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=self.err, text=True)
        self.alerts: list[tuple[float, dict]] = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 120
        while not re.search(r"metrics at (http://\S+)", self.err_path.read_text()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"detector watch did not start: {self.err_path.read_text()}")
            time.sleep(0.1)
        self.url = re.search(r"metrics at (http://\S+)", self.err_path.read_text()).group(1)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.alerts.append((time.monotonic(), json.loads(line)))

    def metrics(self) -> dict[str, float]:
        code = f"import urllib.request; print(urllib.request.urlopen({self.url!r}, timeout=10).read().decode())"
        text = run(IP, "netns", "exec", self.ns, sys.executable, "-c", code).stdout
        return {name: float(value) for line in text.splitlines() if line and not line.startswith("#")
                for name, value in [line.rsplit(" ", 1)]}

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=300)
        self.err.close()
        return code


def replay(ns: str, capture: Path, *extra: str) -> tuple[float, float, str]:
    """(start, end) monotonic times of a tcpreplay run, and its report."""
    began = time.monotonic()
    done = run(IP, "netns", "exec", ns, TCPREPLAY, "-i", "va", *extra, capture)
    return began, time.monotonic(), done.stdout


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def step(ns: str, watch: Watch, capture: Path, rate: int) -> dict:
    count = int(rate * STEP_S)
    loops = -(-count // BENCH_PACKETS)        # the capture again as often as the step needs
    before = watch.metrics()
    cpu_before, clock_before = cpu_seconds(watch.proc.pid), time.monotonic()
    _began, ended, report = replay(ns, capture, "-K", f"--pps={rate}", f"--loop={loops}", f"--limit={count}")
    achieved = re.search(r"Rated: .*?([\d.]+) pps", report)
    sent = int(re.search(r"Actual: (\d+) packets", report).group(1))
    caught_up = None
    seen = drops = 0.0
    stable_since, last = time.monotonic(), -1.0
    while time.monotonic() - stable_since < 3.0:
        now = watch.metrics()
        seen = now["detector_packets_total"] - before["detector_packets_total"]
        drops = now["detector_capture_drops_total"] - before["detector_capture_drops_total"]
        if seen >= sent and caught_up is None:
            caught_up = time.monotonic() - ended
        if seen != last:
            stable_since, last = time.monotonic(), seen
        if caught_up is not None:
            break
        time.sleep(0.05)
    # cores the watch used, on average, from the step's start until it had read everything
    cpu = (cpu_seconds(watch.proc.pid) - cpu_before) / (time.monotonic() - clock_before)
    time.sleep(1.2)      # the drop counter is read once a second
    drops = watch.metrics()["detector_capture_drops_total"] - before["detector_capture_drops_total"]
    ok = drops == 0 and seen >= sent and caught_up is not None and caught_up <= CATCH_UP_S
    return {"rate": rate, "sent": sent, "pps": float(achieved.group(1)) if achieved else float("nan"),
            "seen": int(seen), "drops": int(drops), "catch_up_s": caught_up, "sustained": ok,
            "cpu_cores": cpu}


def loop_offset(capture: Path) -> float:
    """Seconds from the capture's first frame to the loop's first copy, as `detector analyze` finds it."""
    stats, loop = CaptureStats(), active_detectors({"echo-loop": load_rules()["echo-loop"]})[0]
    engine.run([capture], [stats, loop])
    finding = loop.findings(AnalysisContext(flows=None, stats=stats))[0]
    return (finding.first_seen - stats.first_ns) / 1e9


def latency(ns: str, watch: Watch, capture: Path) -> float | None:
    known = len([a for a in watch.alerts if a[1]["rule"] == "echo-loop" and a[1]["event_type"] == "alert"])
    offset = loop_offset(capture)
    began, _ended, _report = replay(ns, capture)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        loops = [t for t, a in watch.alerts if a["rule"] == "echo-loop" and a["event_type"] == "alert"]
        if len(loops) > known:
            return loops[known] - (began + offset)
        time.sleep(0.01)
    return None


def main() -> int:
    why = ("needs root" if os.geteuid() != 0 else "needs iproute2's ip" if not os.path.exists(IP)
           else "needs tcpreplay (make system-tools)" if TCPREPLAY is None else None)
    if why:
        print(f"bench/watch.py: skipped: {why}")
        return 0
    capture, manifest = ensure_capture(BENCH_PACKETS)
    loops = [ROOT / "captures" / name for name in LOOP_CAPTURES]
    rows, latencies = [], []
    with Namespace() as ns, tempfile.TemporaryDirectory() as folder:
        watch = Watch(ns, Path(folder) / "watch")
        try:
            for rate in RATES:
                row = step(ns, watch, capture, rate)
                rows.append(row)
                print(f"  {rate:>9,} pps asked: {row['pps']:>11,.0f} sent/s, {row['seen']:,} read, "
                      f"{row['drops']:,} dropped, caught up in "
                      f"{row['catch_up_s'] if row['catch_up_s'] is None else round(row['catch_up_s'], 2)} s",
                      flush=True)
                if not row["sustained"]:
                    break
            sustained = max((r["pps"] for r in rows if r["sustained"]), default=0.0)
            latencies.append(("idle link", loops[0].name, latency(ns, watch, loops[0])))
            background_rate = max(int(sustained / 2), 1000)
            background = threading.Thread(target=replay, args=(ns, capture, "-K", f"--pps={background_rate}",
                                                               f"--limit={min(background_rate * 8, BENCH_PACKETS)}"))
            background.start()
            time.sleep(2.0)
            latencies.append((f"under {background_rate:,} packets/s of other traffic", loops[1].name,
                              latency(ns, watch, loops[1])))
            background.join()
            latencies.append(("idle link", loops[2].name, latency(ns, watch, loops[2])))
        finally:
            code = watch.stop()
    report = render(rows, latencies, manifest, capture, code)
    print(report)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "watch.md").write_text(report)
    return 0


def render(rows, latencies, manifest, capture: Path, exit_code: int) -> str:
    sustained = max((r["pps"] for r in rows if r["sustained"]), default=0.0)
    load = os.getloadavg()[0]
    lines = [
        "## detector watch on a veth pair (bench/watch.py)", "",
        f"- traffic: {capture.name}, {manifest.get('packets', BENCH_PACKETS):,} packets "
        f"(TCP, UDP, ICMP; 60-1518 bytes), replayed with tcpreplay --pps for {STEP_S:g} s a rate (looped as needed)",
        f"- machine: {platform.machine()}, {os.cpu_count()} cores, load average {load:.2f}; Python "
        f"{platform.python_version()}; capture through dumpcap; tcpreplay on the same cores",
        f"- sustained: a rate with no capture drop, every packet read, and caught up within {CATCH_UP_S:g} s",
        "",
        "| asked packets/s | sent packets/s | packets read | capture drops | caught up after (s) "
        "| detector CPU (cores) | sustained |",
        "|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for r in rows:
        catch = "—" if r["catch_up_s"] is None else f"{r['catch_up_s']:.2f}"
        lines.append(f"| {r['rate']:,} | {r['pps']:,.0f} | {r['seen']:,} | {r['drops']:,} | {catch} | "
                     f"{r['cpu_cores']:.2f} | {'yes' if r['sustained'] else 'no'} |")
    lines += ["", f"- sustained without capture drops: **{sustained:,.0f} packets/s**"]
    if rows and rows[-1]["sustained"] and rows[-1]["pps"] < 0.95 * rows[-1]["rate"]:
        lines.append("- the sender (tcpreplay, on the same cores) reached its limit before detector watch "
                     "did: the sustained rate is a floor, not the watch's ceiling")
    lines += ["",
              "| alert latency (loop's first frame -> alert line) | capture | seconds |", "|---|---|---:|"]
    for where, name, seconds in latencies:
        lines.append(f"| {where} | {name} | {'no alert' if seconds is None else f'{seconds:.2f}'} |")
    lines += ["", f"- detector watch exited with status {exit_code} on SIGTERM", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

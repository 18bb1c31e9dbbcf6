"""Outputs on a hostile or full file system: links are replaced, never written through; a full disk leaves no
half file and loses nothing written before; a folder holds one run's outputs; modes follow the umask.

Everything runs the real command line on the bundled captures: detector.cli.main in this process (the same
parsing, exit codes and error lines as the program), `watch` and a run under a file-size limit in a process of
their own. The full disk is real: a small tmpfs this test mounts (as root), and a file-size limit
(RLIMIT_FSIZE) on the process, which fails writes the same way for anyone.
"""
from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests import test_watch as live
from tests._cli import run_in_process
from tests.test_watch import netns, watchers  # noqa: F401  (fixtures of the live test: a namespace, its watches)

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "captures"
LOOP = CAPTURES / "echo-loop-rip-ipv4.pcapng"
# The same incident in another capture: the same output names, other bytes (an earlier run to keep intact).
LOOP_V6 = CAPTURES / "echo-loop-rip-ipv6-vlan.pcap"
BENIGN = CAPTURES / "benign-office.pcapng"
# Flows enough for a flow table larger than every file-size limit below.
BUSY = CAPTURES / "rss-balanced-busy.pcap"
# What analyze writes for LOOP (evidence for both findings, the reproduce script of the RIP probe, the findings'
# time axis report.md links).
LOOP_OUTPUTS = {"findings.json", "findings.jsonl", "report.md", "report.html", "timeline.png",
                "evidence/echo-loop-1.pcap", "evidence/rip-trigger-1.pcap", "evidence/rip-trigger-1-reproduce.py"}


def run_cli(*args, umask=None, file_limit=None, cwd=None) -> subprocess.CompletedProcess:
    """The command line with `args`, its exit status and output: in this process, or in a process of its own
    for `watch` (it captures until stopped) and under a file-size limit (it would stop the test's writes too)."""
    args = [str(arg) for arg in args]
    if file_limit is not None or args[0] == "watch":
        return _run_process(args, umask, file_limit, cwd)
    return run_in_process(*args, umask=umask, cwd=cwd)


def _run_process(args, umask, file_limit, cwd) -> subprocess.CompletedProcess:
    def limits():
        if umask is not None:
            os.umask(umask)
        if file_limit is not None:
            # past the limit a write fails with EFBIG instead of killing the process (SIG_IGN survives exec)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))
    return subprocess.run([sys.executable, "-m", "detector", *args], capture_output=True, text=True, timeout=300,
                          preexec_fn=limits, cwd=cwd)


def one_line_error(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("detector: error: ")
    return lines[0]


def tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` (relative name -> sha256), hidden ones included."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() or p.is_symlink()}


def test_links_in_the_output_folder_are_replaced_not_followed(tmp_path):
    victims = tmp_path / "victims"
    victims.mkdir()
    out = tmp_path / "out"
    (out / "evidence").mkdir(parents=True)
    placed = {"report.html": "html", "findings.json": "json", "evidence/rip-trigger-1.pcap": "pcap",
              "evidence/rip-trigger-1-reproduce.py": "script"}
    for name, victim in placed.items():
        target = victims / victim
        target.write_text(f"precious {victim}\n")
        target.chmod(0o600)
        (out / name).symlink_to(target)
    before = {p.name: (p.read_text(), stat.S_IMODE(p.stat().st_mode)) for p in victims.iterdir()}
    proc = run_cli("analyze", LOOP, "-o", out)
    assert proc.returncode == 0, proc.stderr
    after = {p.name: (p.read_text(), stat.S_IMODE(p.stat().st_mode)) for p in victims.iterdir()}
    assert after == before
    for name in placed:
        assert not (out / name).is_symlink() and (out / name).is_file(), name
    assert (out / "report.html").read_text().startswith("<!DOCTYPE html>")
    flows = tmp_path / "flows.csv"
    flows.symlink_to(victims / "html")
    assert run_cli("flows", LOOP, "-o", flows).returncode == 0
    assert not flows.is_symlink() and (victims / "html").read_text() == "precious html\n"


@pytest.mark.parametrize("command", ["analyze", "watch"])
def test_an_output_folder_or_evidence_that_is_a_link_is_refused(tmp_path, command):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    args = (LOOP,) if command == "analyze" else ("lo",)
    line = one_line_error(run_cli(command, *args, "-o", link))
    assert str(link) in line and "symbolic link" in line
    out = tmp_path / "out"
    out.mkdir()
    (out / "evidence").symlink_to(real)
    line = one_line_error(run_cli(command, *args, "-o", out))
    assert str(out / "evidence") in line and "symbolic link" in line
    assert list(real.iterdir()) == [] and sorted(p.name for p in out.iterdir()) == ["evidence"]


def test_an_empty_output_name_is_refused(tmp_path):
    for command, args in (("analyze", (LOOP,)), ("watch", ("lo",)), ("flows", (LOOP,))):
        line = one_line_error(run_cli(command, *args, "-o", "", cwd=tmp_path))
        assert "-o" in line or "output" in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("umask", [0o002, 0o022, 0o077])
def test_modes_follow_the_umask(tmp_path, umask):
    out = tmp_path / "out"
    assert run_cli("analyze", LOOP, "-o", out, umask=umask).returncode == 0
    assert run_cli("flows", LOOP, "-o", out / "flows.csv", umask=umask).returncode == 0
    assert run_cli("flows", LOOP, "-o", out / "flows.parquet", umask=umask).returncode == 0
    for path in [out / name for name in LOOP_OUTPUTS] + [out / "flows.csv", out / "flows.parquet"]:
        wanted = (0o777 if path.name.endswith("-reproduce.py") else 0o666) & ~umask
        assert stat.S_IMODE(path.stat().st_mode) == wanted, (path.name, oct(path.stat().st_mode))
    for folder in (out, out / "evidence"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~umask


def test_a_second_run_replaces_the_first_and_touches_nothing_else(tmp_path):
    out = tmp_path / "out"
    assert run_cli("analyze", LOOP, "-o", out).returncode == 0
    assert set(tree(out)) == LOOP_OUTPUTS
    # the user's own files, files of this tool an earlier run or watch left, and a killed run's leftovers
    mine = {"notes.txt": "mine", "evidence/capture-1.pcap": "mine too", "evidence/echo-loop-x.pcap": "not ours",
            "report.html.bak": "a copy"}
    stale = {"alerts.jsonl": "{}", "timeline.png": "old", "evidence/echo-loop-7.pcapng": "old",
             "evidence/routing-loop-1-20260101T000000000Z.pcap": "old watch", ".report.md.0123456789abcdef.tmp": "half",
             ".detector-run-0123456789abcdef/report.md": "x",
             ".detector-run-0123456789abcdef/evidence/echo-loop-1.pcap": "x"}
    for name, text in {**mine, **stale}.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    proc = run_cli("analyze", BENIGN, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert set(tree(out)) == {"findings.json", "findings.jsonl", "report.md", "report.html", *mine}
    for name, text in mine.items():
        assert (out / name).read_text() == text
    assert json.loads((out / "findings.json").read_text())["findings"] == []
    # and the evidence folder goes when nothing is left in it
    for name in mine:
        (out / name).unlink()
    assert run_cli("analyze", LOOP, "-o", out).returncode == 0
    assert run_cli("analyze", BENIGN, "-o", out, "--no-report").returncode == 0
    assert sorted(p.name for p in out.iterdir()) == ["findings.json", "findings.jsonl"]


def _check_failed_run(proc, out: Path, before: dict[str, str], written: set[str]) -> str:
    """A run that hit a full disk: one line naming an output, nothing half-written, the earlier run intact."""
    line = one_line_error(proc)
    named = line[len("detector: error: "):].split(": ")[0]
    assert named in {str(out / name) for name in written}, line
    assert tree(out) == before
    return named


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    """What the tests below find in place before the run that fails: LOOP analysed (its outputs' sizes),
    LOOP_V6 analysed (the earlier run the failed one must leave intact: same names, other bytes), and the flows
    of a busy capture. Each test copies what it needs; a copy is these bytes under these names."""
    folder = tmp_path_factory.mktemp("earlier")
    assert run_cli("analyze", LOOP, "-o", folder / "loop").returncode == 0
    assert run_cli("analyze", LOOP_V6, "-o", folder / "loop-v6").returncode == 0
    assert run_cli("flows", BUSY, "-o", folder / "flows.csv").returncode == 0
    return folder



@pytest.mark.parametrize("limit", [3_000, 20_000, 60_000])
def test_a_file_size_limit_fails_the_run_without_half_files(tmp_path, earlier, limit):
    """RLIMIT_FSIZE: a write past it fails (EFBIG) as on a full disk; the error names the file and the
    previous run's outputs stay as they were."""
    sizes = {name: (earlier / "loop" / name).stat().st_size for name in LOOP_OUTPUTS}
    assert max(sizes.values()) > limit
    out = shutil.copytree(earlier / "loop-v6", tmp_path / "out")
    before = tree(out)
    assert set(before) == LOOP_OUTPUTS and before != tree(earlier / "loop")
    proc = run_cli("analyze", LOOP, "-o", out, file_limit=limit)
    named = _check_failed_run(proc, out, before, LOOP_OUTPUTS)
    assert sizes[str(Path(named).relative_to(out))] > limit
    assert "File too large" in proc.stderr

    flows = shutil.copyfile(earlier / "flows.csv", tmp_path / "flows.csv")
    kept = flows.read_bytes()
    assert len(kept) > limit
    line = one_line_error(run_cli("flows", BUSY, "-o", flows, file_limit=limit))
    assert line.startswith(f"detector: error: {flows}: ")
    assert flows.read_bytes() == kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flows.csv", "out"]


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs mounted for the test (root only), unmounted after."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the RLIMIT_FSIZE test covers a full disk for anyone)")
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path, leave: int) -> None:
    """Fill the file system up to `leave` free bytes."""
    filler = disk / "filler"
    with open(filler, "ab") as handle:
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        handle.write(b"\0" * max(0, free - leave))
        while True:           # tmpfs rounds to pages: fill what rounding left
            free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
            if free <= leave:
                break
            try:
                handle.write(b"\0" * 4096)
                handle.flush()
            except OSError:
                break


@pytest.mark.parametrize("leave", [0, 16 << 10, 64 << 10, 100 << 10])
def test_a_full_disk_leaves_no_half_file_and_loses_nothing(small_disk, earlier, leave):
    out = shutil.copytree(earlier / "loop-v6", small_disk / "out")
    before = tree(out)
    assert set(before) == LOOP_OUTPUTS
    _fill(small_disk, leave)
    proc = run_cli("analyze", LOOP, "-o", out)
    _check_failed_run(proc, out, before, LOOP_OUTPUTS)
    assert "No space left on device" in proc.stderr


def test_flows_on_a_full_disk_keep_the_previous_file(small_disk):
    for name in ("flows.csv", "flows.parquet"):
        path = small_disk / name
        assert run_cli("flows", BUSY, "-o", path).returncode == 0
    kept = tree(small_disk)
    _fill(small_disk, 0)
    for name in ("flows.csv", "flows.parquet"):
        path = small_disk / name
        line = one_line_error(run_cli("flows", BUSY, "-o", path))
        assert line.startswith(f"detector: error: {path}: No space left on device"), line
    (small_disk / "filler").unlink()
    assert tree(small_disk) == dict(kept.items())


@pytest.mark.skipif(live._why_not() is not None, reason=live._why_not() or "")
def test_watch_starts_on_a_folder_of_its_own(netns, watchers, tmp_path):  # noqa: F811 - fixtures
    """A watch removes an earlier run's outputs when it starts, keeps the user's files, and replaces a link
    where its log goes instead of appending through it."""
    out = tmp_path / "watch"
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    stale = ("findings.json", "report.md", "evidence/echo-loop-1.pcap", "evidence/rip-trigger-1-reproduce.py",
             "evidence/echo-loop-3-20260101T000000000Z.pcap")
    for name in (*stale, "notes.txt"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("old")
    (out / "alerts.jsonl").symlink_to(victim)
    watcher = live.Watcher(netns, out)
    watchers.append(watcher)
    live.replay(netns, BENIGN, "--topspeed")
    assert watcher.terminate() == 0
    assert victim.read_text() == "precious\n"
    assert not (out / "alerts.jsonl").is_symlink()
    assert set(tree(out)) == {"alerts.jsonl", "findings.json", "findings.jsonl", "report.md", "report.html",
                              "notes.txt"}
    assert (out / "notes.txt").read_text() == "old"
    assert (out / "evidence").is_dir()

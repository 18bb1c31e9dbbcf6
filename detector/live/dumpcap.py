"""Capture through dumpcap: the child process that holds the privileges, the kernel ring and the BPF filter.

dumpcap (Wireshark's capture engine) runs as `dumpcap -i IFACE -w - -n -q
-B MiB [-f FILTER]` and writes pcapng to its standard output, which the
watch loop reads with the same CaptureReader as an offline file. It runs in
a session of its own, so a Ctrl-C at the terminal reaches only `detector
watch`, which then stops dumpcap in order (SIGTERM: dumpcap flushes what it
holds and exits) and reads the pipe to its end. Should `detector` itself be
killed, dumpcap's next write to the closed pipe ends it (SIGPIPE).

Before the capture starts, `dumpcap -d` (print the compiled filter) opens
the interface with the filter: a missing interface, missing privileges or an
invalid filter become one line here instead of a dead child later. dumpcap
exits 0 even then, so its verdict is read from what it prints.

Drops. dumpcap writes its capture statistics (an Interface Statistics Block,
and a "received/dropped" line on stderr) only when it stops, which is too
late for a monitor. The counter behind them is the kernel's, kept per
AF_PACKET socket and read with getsockopt(PACKET_STATISTICS) - read-and-
clear. So once dumpcap runs, this module borrows a duplicate of dumpcap's
packet socket (pidfd_getfd(2), allowed to the parent unless dumpcap gained
privileges from file capabilities) and reads that counter every second.
What it reads, dumpcap no longer counts, so at the end dumpcap's own final
"dropped" figure is the remainder since the last read and is added; the
borrowed socket is closed before dumpcap is stopped, so it never keeps the
socket (and its ring) alive after dumpcap. Where borrowing is refused, drops
are known only from that final figure, and the watch says so at start.
"""
from __future__ import annotations

import collections
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import threading

from ..errors import UsageError
from .netdev import borrow_fd, packet_socket_fds, packet_statistics

# Kernel buffer for dumpcap's ring, in MiB (dumpcap -B; its default is 2).
# A larger ring rides out longer stalls of the reader (a findings pass, a
# burst) without drops, at that much locked kernel memory.
KERNEL_BUFFER_MIB = 64
# The pipe from dumpcap, in bytes (fcntl F_SETPIPE_SZ; Linux's default is 64 KiB and its default
# limit for unprivileged users 1 MiB). At 200 MB/s a 64 KiB pipe is full in a third of a millisecond,
# and every time it is, dumpcap stops draining its ring to wait for us.
PIPE_BYTES = 1 << 20
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
# Lines of dumpcap's stderr kept to explain why it stopped.
STDERR_LINES_KEPT = 20
# Seconds dumpcap gets to flush and exit after SIGTERM before it is killed.
STOP_TIMEOUT_S = 5.0
# dumpcap's last words: "Packets received/dropped on interface 'eth0': 1399/12 (...)"
FINAL_STATS = re.compile(r"received/dropped on interface .*: (\d+)/(\d+)")
CAPABILITY_HINT = ("capturing needs CAP_NET_RAW and CAP_NET_ADMIN: run as root, or give dumpcap "
                   "those capabilities (setcap cap_net_raw,cap_net_admin=eip {path})")


def find_dumpcap() -> str | None:
    return shutil.which("dumpcap")


def explain(iface: str, bpf: str | None, text: str, path: str = "dumpcap") -> str:
    """One line for a user from dumpcap's error output (several paragraphs)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if re.search(r"no device named|no such device", text, re.IGNORECASE):
        return f"{iface}: no such interface"
    if re.search(r"permission|not permitted", text, re.IGNORECASE):
        return f"{iface}: no permission to capture; " + CAPABILITY_HINT.format(path=path)
    if "capture filter" in text:
        reason = next((m.group(1) for line in lines for m in [re.fullmatch(r"That string isn't a valid capture "
                                                                         r"filter \((.*)\)\.?", line)] if m), None)
        return f"--bpf {bpf!r}: invalid capture filter" + (f" ({reason})" if reason else "")
    said = [line for line in lines if line.startswith("dumpcap:")]
    return (said[0] if said else lines[-1] if lines else "dumpcap stopped without saying why")[:300]


class DumpcapCapture:
    """One interface captured by a dumpcap child; start() again after it stopped (a restart)."""

    method = "dumpcap"

    def __init__(self, iface: str, bpf: str | None, path: str):
        self.iface, self.bpf, self.path = iface, bpf, path
        self.proc: subprocess.Popen | None = None
        self.drops = 0                      # every drop counted so far, over all runs
        self.live_drops: bool | None = None  # None until the first attach
        self.live_drops_reason = ""
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES_KEPT)
        self._stderr_thread: threading.Thread | None = None
        self._borrowed: socket.socket | None = None
        self._lock = threading.Lock()

    def _command(self, *extra: str) -> list[str]:
        command = [self.path, "-i", self.iface, *extra]
        if self.bpf:
            command += ["-f", self.bpf]
        return command

    def preflight(self) -> None:
        """Open the interface with the filter once (dumpcap -d); UsageError with one line if that fails."""
        try:
            done = subprocess.run(self._command("-d"), capture_output=True, text=True, timeout=30,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UsageError(f"{self.path}: cannot run dumpcap ({exc})") from None
        if "(000)" not in done.stdout:
            raise UsageError(explain(self.iface, self.bpf, done.stderr, self.path))

    def start(self):
        """Start dumpcap; returns the binary stream of its pcapng output."""
        self._stderr.clear()
        self.proc = subprocess.Popen(
            self._command("-w", "-", "-n", "-q", "-B", str(KERNEL_BUFFER_MIB)),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            bufsize=0, start_new_session=True)
        try:
            fcntl.fcntl(self.proc.stdout.fileno(), F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:     # above /proc/sys/fs/pipe-max-size for this user: the default pipe still works
            pass
        self._stderr_thread = threading.Thread(target=self._read_stderr, args=(self.proc.stderr,),
                                               name="detector-dumpcap-stderr", daemon=True)
        self._stderr_thread.start()
        return self.proc.stdout

    def _read_stderr(self, stream) -> None:
        for raw in iter(stream.readline, b""):
            self._stderr.append(raw.decode("utf-8", "replace").rstrip())
        stream.close()

    def attach_stats(self) -> None:
        """Borrow dumpcap's packet socket for live drop counts (once its output has begun)."""
        if self.proc is None or self._borrowed is not None:
            return
        fds = packet_socket_fds(self.proc.pid)
        if not fds:
            self.live_drops, self.live_drops_reason = False, "dumpcap's packet socket was not found in /proc"
            return
        try:
            dup = borrow_fd(self.proc.pid, fds[0])
        except OSError as exc:
            self.live_drops = False
            self.live_drops_reason = f"pidfd_getfd on dumpcap refused: {exc.strerror}"
            return
        self._borrowed = socket.socket(fileno=dup)
        self.live_drops = True
        self.poll_drops()

    def poll_drops(self) -> int:
        """Read the kernel's drop counter of dumpcap's socket; returns the total so far."""
        with self._lock:
            if self._borrowed is not None:
                try:
                    self.drops += packet_statistics(self._borrowed)[1]
                except OSError:
                    self._release()
            return self.drops

    def _release(self) -> None:
        if self._borrowed is not None:
            self._borrowed.close()
            self._borrowed = None

    def stop(self) -> None:
        """Ask dumpcap to finish (it flushes and exits); the reader then meets the end of the stream."""
        self.poll_drops()
        with self._lock:
            self._release()
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def wait(self) -> int | None:
        """Reap dumpcap (killed if it does not stop in time); add its final drop figure. Returns its exit code."""
        if self.proc is None:
            return None
        with self._lock:
            self._release()
        try:
            code = self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            code = self.proc.wait()
        if self._stderr_thread is not None:
            self._stderr_thread.join(timeout=STOP_TIMEOUT_S)
        for line in self._stderr:
            match = FINAL_STATS.search(line)
            if match:
                self.drops += int(match.group(2))
        self.proc.stdout.close()
        self.proc = None
        return code

    def failure(self) -> str:
        """Why the last run ended, in one line."""
        return explain(self.iface, self.bpf, "\n".join(self._stderr), self.path)

"""The command line run in this process: `detector.cli.main(argv)` with its standard output and error captured.

    from tests._cli import run_in_process

The same parsing, exit statuses and error lines as `python -m detector`, without the interpreter's start and
imports, a second or more a command on a loaded machine. A test of what only a process shows (standard input,
signals, the program's own exit, its environment, a resource limit) starts one instead.
"""
from __future__ import annotations

import contextlib
import io
import os
import subprocess

from detector import cli


def run_in_process(*args, cwd=None, umask: int | None = None) -> subprocess.CompletedProcess:
    """The command line with `args` (run in `cwd`, under `umask`): its exit status, standard output and error."""
    argv = [str(arg) for arg in args]
    # text streams over bytes: a command may write bytes to sys.stdout.buffer
    stdout, stderr = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="") for _ in range(2))
    mask = os.umask(umask) if umask is not None else None
    try:
        with contextlib.chdir(cwd or os.getcwd()), contextlib.redirect_stdout(stdout), \
                contextlib.redirect_stderr(stderr):
            try:
                status = cli.main(argv)
            except SystemExit as exit_:     # argparse's usage errors
                status = exit_.code
    finally:
        if mask is not None:
            os.umask(mask)
    stdout.flush()
    stderr.flush()
    return subprocess.CompletedProcess(argv, status, stdout.buffer.getvalue().decode(),
                                       stderr.buffer.getvalue().decode())

"""The project's exception hierarchy: what a user can be told about bad input.

    DetectorError               base; its str() is one line fit for a terminal
     ├── CaptureError           an unreadable capture (file, byte offset, reason)
     ├── RuleError              a broken rule file (file, key, reason)
     └── UsageError             a bad command line or option value
          └── QueryError        a notebook query naming no column of its table, or not an
                                expression (also a ValueError, as pandas' own query errors)

Anything else that escapes is a bug in the project, not the user's mistake.
The exit statuses are here too, for the commands and `watch` alike; cli.py's
docstring says when each is given.
"""
from __future__ import annotations

import errno
import os

__all__ = ["DetectorError", "CaptureError", "RuleError", "UsageError", "QueryError", "EXIT_OK", "EXIT_BAD_INPUT",
           "EXIT_FINDINGS", "EXIT_RULE_FAILED", "capture_problem", "open_reason"]

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_FINDINGS = 3
EXIT_RULE_FAILED = 4


class DetectorError(Exception):
    """Base of every error the project raises on purpose."""


class CaptureError(DetectorError):
    """A capture file that cannot be read (any further).

    `format` ("pcap", "pcapng") and `compression` are what the reader had
    recognised before the error, or None.
    """

    def __init__(self, path, reason: str, offset: int | None = None):
        self.path = str(path)
        self.reason = reason
        self.offset = offset
        self.format: str | None = None
        self.compression: str | None = None
        where = f" at byte {offset}" if offset is not None else ""
        super().__init__(f"{self.path}{where}: {reason}")


class RuleError(DetectorError):
    """A rule file with an unknown key or a bad value."""

    def __init__(self, path, key: str | None, reason: str):
        self.path = str(path)
        self.key = key
        self.reason = reason
        where = f": key '{key}'" if key else ""
        super().__init__(f"{self.path}{where}: {reason}")


class UsageError(DetectorError):
    """A command line or API call that asks for something impossible."""


class QueryError(UsageError, ValueError):
    """A notebook query (`columns=`, `where=`, `by=`) that names a column the table does not have, or is not an
    expression: its message names what is wrong and what to write instead."""


# why a file cannot be opened, in a few plain words: Python's "Too many levels of symbolic links" (ELOOP) reads
# as a depth limit, where it is nearly always a loop of links
OPEN_REASONS = {errno.ENOENT: "no such file", errno.ELOOP: "symbolic link loop", errno.EACCES: "permission denied",
                errno.EISDIR: "is a folder, not a file", errno.ENOTDIR: "a folder in its path is a file"}


def open_reason(exc: OSError, path=None) -> str:
    """Why a file could not be opened or examined, in a few words; with its `path`, a symbolic link whose target
    is missing is said as one (ENOENT alone reads as if the link were)."""
    if path is not None and exc.errno == errno.ENOENT and os.path.islink(path):
        return f"symbolic link to a missing file ({os.path.realpath(path)})"
    return OPEN_REASONS.get(exc.errno) or exc.strerror or str(exc)


def capture_problem(path) -> str | None:
    """Why `path` cannot be read as a capture file, in open_reason's words (a symbolic link loop, a link to a
    missing file, no such file, permission denied), or a folder; None when it can be opened."""
    try:
        os.stat(path)
    except OSError as exc:
        return open_reason(exc, path)
    if os.path.isdir(path):
        return "is a folder, not a capture file"
    if not os.access(path, os.R_OK):
        return open_reason(PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
    return None

"""Writing outputs safely: every file is written aside in its own folder and renamed into place, no link followed.

An output folder may be shared, or left behind by an earlier run of another
user. A name there that is a symbolic link (`DIR/report.html` -> /etc/shadow)
must not make a run as root write through it, and a full disk or a killed
process must not leave half a file where a complete one is expected. So:

- a folder is opened once, refusing a link (O_NOFOLLOW), and everything after
  is done relative to that descriptor (openat, renameat, unlinkat): swapping
  the folder for a link in the meantime changes nothing;
- each file is created under a fresh name (O_CREAT|O_EXCL|O_NOFOLLOW: never an
  existing file, never a link), written completely, then renamed over its
  real name. A rename replaces a link instead of following it, and a reader
  sees the old file or the new one, never a part. A write that fails (a full
  disk) removes the new file and raises OSError naming the file it was for;
- files are created with mode 0666 (0777 for a script) less the umask, as
  any other program's outputs.

`OutputDir` is the folder of one `analyze` or `watch` run; `atomic_file`
writes one file the user named (`detector flows -o FILE`).
"""
from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path

from .errors import UsageError

EVIDENCE = "evidence"
# What a run writes at the top of its folder (analyze all but alerts.jsonl, watch all of them; timeline.png, the
# figure report.md links, only with findings).
TOP_NAMES = ("findings.json", "findings.jsonl", "report.md", "report.html", "alerts.jsonl", "timeline.png")
# Where a run of analyze gathers its outputs before they replace the previous run's (see OutputDir).
STAGING_PREFIX = ".detector-run-"
FILE_MODE = 0o666
SCRIPT_MODE = 0o777
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{16}\.tmp$")
_STAGING = re.compile(rf"^{re.escape(STAGING_PREFIX)}[0-9a-f]{{16}}$")


def _temp_name(name: str) -> str:
    return f".{name}.{secrets.token_hex(8)}.tmp"


def _named(exc: OSError, display: str) -> OSError:
    """The same error, naming the output it was for (a write to a full disk names no file)."""
    if exc.filename == display:
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), display)


@contextmanager
def _replacing(dir_fd: int, name: str, display: str, executable: bool = False):
    """A binary handle on a new file in the folder `dir_fd`; on success it replaces `name` there."""
    while True:
        temp = _temp_name(name)
        try:
            fd = os.open(temp, _CREATE, SCRIPT_MODE if executable else FILE_MODE, dir_fd=dir_fd)
            break
        except FileExistsError:      # 64 random bits taken: draw again
            continue
        except OSError as exc:
            raise _named(exc, display) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise _named(exc, display) from exc
        raise


@contextmanager
def atomic_file(path, executable: bool = False):
    """A binary handle whose bytes replace `path` in one rename once the block ends without an error.

    The folder is the one the user named (created if missing); the file's
    own name may be a link, which is replaced, never written through.
    """
    path = Path(path)
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with _replacing(dir_fd, path.name, str(path), executable) as handle:
            yield handle
    finally:
        os.close(dir_fd)


def _is_link(name: str, dir_fd: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_folder(name: str, display: str, dir_fd: int | None = None, create: bool = False,
                 mode: int = 0o777) -> tuple[int, bool]:
    """(descriptor, created) of a folder that is not a link; UsageError naming it otherwise."""
    created = False
    while True:
        try:
            return os.open(name, _OPEN_DIR, dir_fd=dir_fd), created
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(name, mode, dir_fd=dir_fd)
                created = True
            except FileExistsError:   # made by someone else meanwhile: open whatever it is
                pass
        except OSError as exc:
            if _is_link(name, dir_fd):
                raise UsageError(f"{display}: is a symbolic link; refusing to write through it "
                                 "(give the folder it points to)") from None
            if exc.errno == errno.ENOTDIR:
                raise UsageError(f"{display}: not a folder") from None
            raise _named(exc, display) from None


def _remove(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


class OutputDir:
    """The folder of one run's outputs: findings, reports, evidence/ (and a watch's alerts.jsonl).

    The folder holds one run's outputs and nothing stale: a file an earlier
    run wrote there (a name of TOP_NAMES, or `evidence/<rule>-<n>...` of a
    known rule, or a temporary file a killed run left) that this run does not
    write is removed. Anything else the user keeps there is never touched.

    `staged=True` (analyze): the files are written into a hidden folder inside
    the output folder and moved into place by `commit()` once all of them are
    complete, then the previous run's leftovers are removed; if the run fails
    first (a full disk, a damaged capture), `abort()` removes what it wrote
    and the previous run's outputs stay as they were. `staged=False` (watch):
    `clear()` removes the previous run's outputs when the run starts and
    each file is written into place as it is ready.
    """

    def __init__(self, path, rule_ids, staged: bool = True):
        if os.fspath(path) == "":
            raise UsageError("-o: the output folder name is empty (give a folder, e.g. -o report)")
        self.path = Path(path)
        self.staged = staged
        ids = "|".join(re.escape(rule_id) for rule_id in sorted(rule_ids, key=len, reverse=True))
        # evidence/<rule>-<n>.pcap(ng) and <rule>-<n>-reproduce.py (analyze), <rule>-<n>-<UTC time>.pcap (watch)
        self._evidence_name = re.compile(
            rf"^(?:{ids})-\d+(?:\.pcap(?:ng)?|-reproduce\.py|-\d{{8}}T\d{{9}}Z\.pcap)$" if ids else r"(?!)")
        parent = self.path.parent
        if not parent.exists():
            parent.mkdir(parents=True, exist_ok=True)
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.fd, self._created = _open_folder(self.path.name or ".", str(self.path), parent_fd, create=True)
        finally:
            os.close(parent_fd)
        self._evidence_fd: int | None = None
        self._stage_fd: int | None = None
        self._stage_name: str | None = None
        self._stage_evidence_fd: int | None = None
        self.written: set[str] = set()          # relative names written by this run ("evidence/x.pcap")
        try:
            self._evidence_fd = self._evidence_folder(create=False)
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(self.fd)
            raise

    # ---- folders ---------------------------------------------------------------
    def _evidence_folder(self, create: bool) -> int:
        fd, _created = _open_folder(EVIDENCE, str(self.path / EVIDENCE), self.fd, create=create)
        return fd

    def _folder_of(self, relative: str) -> tuple[int, str]:
        """(descriptor of the folder the file goes to in this run, file name)."""
        folder, _, name = relative.rpartition("/")
        if folder not in ("", EVIDENCE) or name in ("", ".", ".."):
            raise ValueError(f"not an output name: {relative!r}")
        if self.staged:
            if self._stage_fd is None:
                self._stage_name = f"{STAGING_PREFIX}{secrets.token_hex(8)}"
                os.mkdir(self._stage_name, 0o700, dir_fd=self.fd)
                self._stage_fd, _ = _open_folder(self._stage_name, str(self.path / self._stage_name), self.fd)
            if not folder:
                return self._stage_fd, name
            if self._stage_evidence_fd is None:
                os.mkdir(EVIDENCE, 0o700, dir_fd=self._stage_fd)
                self._stage_evidence_fd, _ = _open_folder(EVIDENCE, EVIDENCE, self._stage_fd)
            return self._stage_evidence_fd, name
        if not folder:
            return self.fd, name
        return self.evidence_folder(), name

    def evidence_folder(self) -> int:
        """The descriptor of `evidence/`, made if missing (a watch makes it when it starts)."""
        if self._evidence_fd is None:
            self._evidence_fd = self._evidence_folder(create=True)
        return self._evidence_fd

    # ---- writing ---------------------------------------------------------------
    @contextmanager
    def open(self, relative: str, executable: bool = False):
        """A binary handle on output `relative` ("report.md", "evidence/x.pcap"), complete or absent."""
        try:
            dir_fd, name = self._folder_of(relative)
        except OSError as exc:
            raise _named(exc, str(self.path / relative)) from None
        with _replacing(dir_fd, name, str(self.path / relative), executable) as handle:
            yield handle
        self.written.add(relative)

    def write(self, relative: str, data, executable: bool = False) -> str:
        """Write bytes or text (UTF-8) as output `relative`; returns `relative`."""
        with self.open(relative, executable) as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        return relative

    def written_path(self, relative: str) -> Path:
        """Where output `relative`, written by this run, lies now (staged: in the hidden folder until commit()), for
        a program that reads it by name (tshark dissecting an evidence pcap)."""
        if relative not in self.written:
            raise ValueError(f"not written by this run: {relative!r}")
        if self.staged:
            return self.path / self._stage_name / relative
        return self.path / relative

    def link(self, existing: str, relative: str) -> None:
        """Output `relative` as a hard link to output `existing` (same packets), a copy where links fail."""
        src_fd, src_name = self._folder_of(existing)
        dst_fd, dst_name = self._folder_of(relative)
        temp = _temp_name(dst_name)
        try:
            os.link(src_name, temp, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
            os.replace(temp, dst_name, src_dir_fd=dst_fd, dst_dir_fd=dst_fd)
        except OSError:
            _remove(temp, dst_fd)
            source = os.open(src_name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_fd)
            with os.fdopen(source, "rb") as src, self.open(relative) as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        self.written.add(relative)

    # ---- one run's outputs -------------------------------------------------------
    def _ours(self, name: str, in_evidence: bool) -> bool:
        """Is `name` a file this tool writes (or a temporary one it left)?"""
        temp = _TEMP.match(name)
        if temp:
            name = temp.group("name")
        return bool(self._evidence_name.match(name)) if in_evidence else name in TOP_NAMES

    def _sweep(self, keep: set[str]) -> None:
        """Remove this tool's outputs that are not in `keep`, and staging folders of killed runs."""
        for name in os.listdir(self.fd):
            if _STAGING.match(name) and name != self._stage_name:
                self._remove_staging(name)
            elif name not in keep and self._ours(name, in_evidence=False) and not _is_dir(name, self.fd):
                _remove(name, self.fd)
        if self._evidence_fd is None:
            return
        left = False
        for name in os.listdir(self._evidence_fd):
            if f"{EVIDENCE}/{name}" in keep or not self._ours(name, in_evidence=True) \
                    or _is_dir(name, self._evidence_fd):
                left = True
            else:
                _remove(name, self._evidence_fd)
        if not left:
            os.close(self._evidence_fd)
            self._evidence_fd = None
            try:
                os.rmdir(EVIDENCE, dir_fd=self.fd)
            except OSError:          # something appeared meanwhile: it stays
                pass

    def _remove_staging(self, name: str) -> None:
        """A staging folder (ours by name): its files, its evidence/ folder, itself; links are removed, not followed."""
        try:
            fd, _ = _open_folder(name, str(self.path / name), self.fd)
        except (OSError, UsageError):
            return
        try:
            for entry in os.listdir(fd):
                if entry == EVIDENCE and _is_dir(entry, fd):
                    inner, _ = _open_folder(entry, entry, fd)
                    try:
                        for item in os.listdir(inner):
                            _remove(item, inner)
                    finally:
                        os.close(inner)
                    os.rmdir(entry, dir_fd=fd)
                else:
                    _remove(entry, fd)
        finally:
            os.close(fd)
        try:
            os.rmdir(name, dir_fd=self.fd)
        except OSError:
            pass

    def clear(self) -> None:
        """Remove the outputs of an earlier run (watch, before it writes anything)."""
        self._sweep(keep=set())

    def commit(self) -> None:
        """Move the staged outputs into place (evidence first, findings.json before the reports), then remove
        the previous run's outputs that this run did not write."""
        if self._stage_fd is not None:
            if self._stage_evidence_fd is not None:
                evidence = self.evidence_folder()
                for name in sorted(os.listdir(self._stage_evidence_fd)):
                    self._move_in(self._stage_evidence_fd, evidence, name, f"{EVIDENCE}/{name}")
            staged = set(os.listdir(self._stage_fd)) - {EVIDENCE}
            for name in [n for n in TOP_NAMES if n in staged] + sorted(staged - set(TOP_NAMES)):
                self._move_in(self._stage_fd, self.fd, name, name)
        self._sweep(keep=self.written)
        self._drop_staging()

    def _move_in(self, src_fd: int, dst_fd: int, name: str, relative: str) -> None:
        try:
            os.replace(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        except OSError as exc:
            raise _named(exc, str(self.path / relative)) from None

    def abort(self) -> None:
        """Remove what this run staged; a folder this run created and left empty goes too."""
        self._drop_staging()
        if self._created and not os.listdir(self.fd):
            try:
                os.rmdir(self.path)
            except OSError:
                pass

    def _drop_staging(self) -> None:
        for fd in (self._stage_evidence_fd, self._stage_fd):
            if fd is not None:
                os.close(fd)
        self._stage_evidence_fd = self._stage_fd = None
        if self._stage_name is not None:
            self._remove_staging(self._stage_name)
            self._stage_name = None

    def close(self) -> None:
        for fd in (self._evidence_fd, self.fd):
            if fd is not None:
                os.close(fd)
        self._evidence_fd = None

    def __enter__(self) -> OutputDir:
        return self

    def __exit__(self, kind, _value, _traceback) -> None:
        try:
            if self.staged and kind is None:
                try:
                    self.commit()
                except BaseException:
                    self.abort()
                    raise
            elif self.staged:
                self.abort()
        finally:
            self.close()


def _is_dir(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False

"""Shared fixtures: `captures_real` (the real captures folder) and `tshark` (the one tshark oracle).

An oracle a fresh clone may lack — tshark, chromium, tcpreplay, the real
captures of ../shared/captures-real — makes the tests that need it skip
with the reason. CI has all of them, so `.ci/run` sets
DETECTOR_STRICT_ORACLES=1, under which every skip is a failure: an oracle
that drops out there is a broken install, not a lighter test run.

A detector that raises is recorded by `detector analyze` and the others go
on (detectors.DetectorSet); here DETECTOR_RAISE_FAILURES=1 makes it raise
instead, in this process and every command a test starts, so no test can
pass over a recorded failure. tests/test_detector_failures.py tests the
isolation itself with the switch off.

Helpers to import live in tests/_real.py (`from tests._real import ...`); the
repository root goes on sys.path here so that import works under a bare
`pytest` as well as `python -m pytest`.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests._real import require_real  # noqa: E402  (needs the path above)

STRICT_ENV = "DETECTOR_STRICT_ORACLES"
# detectors.RAISE_ENV, set before any test runs (the detectors' import would load numba here)
os.environ["DETECTOR_RAISE_FAILURES"] = "1"


def _asked_once(resolve):
    """`resolve` (an address -> the MAC to send to, or None) asking the network once per address."""
    answers = {}

    def once(address, *args, **kwargs):
        key = str(address)
        if key not in answers:
            answers[key] = resolve(address, *args, **kwargs)
        return answers[key]
    return once


# scapy fills the destination MAC of an Ether() left without one (an IP packet, an ARP reply) by asking the network,
# at every frame built: an ARP request and 2 s of waiting for an IPv4 address of the local network that nobody
# answers (this machine's is 192.0.2.0/24, the documentation network the tests use), a Neighbor Solicitation and 1 s
# for an IPv6 address. The answer, or its absence (scapy then writes the broadcast address), is kept for the
# process: the same bytes as before, without the wait at every frame.
from scapy.layers import inet, inet6, l2  # noqa: E402

l2.getmacbyip = inet.getmacbyip = _asked_once(l2.getmacbyip)
inet6.getmacbyip6 = _asked_once(inet6.getmacbyip6)


def strict() -> bool:
    """True where every oracle must be present (CI): a skip is then a failure."""
    return os.environ.get(STRICT_ENV) == "1"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and strict() and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"{STRICT_ENV}=1, where every oracle must be present; this test skipped: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    # a module that skips as a whole never reaches pytest_runtest_makereport
    outcome = yield
    report = outcome.get_result()
    if report.skipped and strict():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"{STRICT_ENV}=1, where every oracle must be present; this module skipped: {reason}"


class Tshark:
    """tshark as an oracle: fields and counts of what it dissects in a capture."""

    def __init__(self, path: str):
        self.path = path

    def run(self, capture, *args, timeout: float = 600) -> str:
        """tshark's standard output for `-n -r CAPTURE ARGS...` (an error of tshark fails the test)."""
        proc = subprocess.run([self.path, "-n", "-r", str(capture), *args], capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0:
            raise AssertionError(f"tshark failed on {capture} ({proc.returncode}): {proc.stderr.strip()[:500]}")
        return proc.stdout

    def fields(self, capture, *fields: str, display_filter: str | None = None,
               options: tuple[str, ...] = ()) -> list[list[str]]:
        """One row per dissected frame (matching `display_filter`), one column per field."""
        args = [*options, "-T", "fields", *(a for f in fields for a in ("-e", f))]
        if display_filter:
            args += ["-Y", display_filter]
        return [line.split("\t") for line in self.run(capture, *args).splitlines() if line]

    def count(self, capture, display_filter: str) -> int:
        """Frames matching `display_filter`."""
        return len(self.fields(capture, "frame.number", display_filter=display_filter))


@pytest.fixture(scope="session")
def tshark() -> Tshark:
    """The tshark oracle, or skip: Debian's package tshark (`make venv` installs it as root)."""
    path = shutil.which("tshark")
    if path is None:
        pytest.skip("tshark is not installed (Debian package tshark)")
    return Tshark(path)


@pytest.fixture(scope="session")
def captures_real() -> Path:
    """../shared/captures-real, or skip with the reason."""
    return require_real()

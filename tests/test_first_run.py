"""The first run compiles the packet kernels for this machine, and says so once, before the wait."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from detector.cpu import cold_kernels

ROOT = Path(__file__).resolve().parents[1]
DETECTOR = [sys.executable, "-m", "detector"]
KERNEL = """
from numba import njit


@njit(cache=True)
def twice(x):
    return {factor} * x
"""


def _load(path: Path, factor: int):
    path.write_text(KERNEL.format(factor=factor))
    spec = importlib.util.spec_from_file_location(f"kernel_{factor}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.twice


def test_a_kernel_is_cold_until_compiled_and_again_once_its_source_changes(tmp_path):
    twice = _load(tmp_path / "kernel.py", 2)
    assert cold_kernels(twice) == ["twice"]
    assert twice(21) == 42
    assert cold_kernels(twice) == []
    # an edited source leaves an index for the old one, which must read as nothing compiled
    edited = _load(tmp_path / "kernel.py", 30)
    assert cold_kernels(edited) == ["twice"]


def test_the_first_command_says_it_compiles_and_the_second_does_not(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    command = DETECTOR + ["info", str(ROOT / "captures" / "rip-scan.pcap")]
    first = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    said = [line for line in first.stderr.splitlines() if "compiling the packet kernels" in line]
    assert len(said) == 1 and "once" in said[0] and said[0].startswith("detector: ")
    assert "Packets:       21" in first.stdout
    second = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0 and second.stderr == "" and second.stdout == first.stdout

"""The first run compiles the packet kernels for this machine, says so once, before the wait, and
compiles every kernel a command calls; an edit of a module a kernel imports recompiles it."""
from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from detector import warmup
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


def test_the_first_command_says_it_compiles_and_compiles_what_every_later_one_calls(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    command = [*DETECTOR, "info", str(ROOT / "captures" / "rip-scan.pcap")]
    first = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    said = [line for line in first.stderr.splitlines() if "compiling the packet kernels" in line]
    assert len(said) == 1 and "once" in said[0] and said[0].startswith("detector: ")
    assert "Packets:       21" in first.stdout
    second = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0 and second.stderr == "" and second.stdout == first.stdout
    # the kernels' declared signatures are the ones callers pass: nothing is compiled (saved) again
    # by analyze and flows over every bundled capture (tunnels, 802.11, pcap and pcapng among them)
    captures = sorted(str(p) for p in (ROOT / "captures").iterdir() if p.suffix in (".pcap", ".pcapng"))
    debug = dict(env, NUMBA_DEBUG_CACHE="1")
    for later in (["analyze", *captures, "-o", str(tmp_path / "out")], ["flows", *captures, "-o", "flows.csv"]):
        run = subprocess.run(DETECTOR + later, cwd=tmp_path, env=debug, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        saved = [line for line in run.stdout.splitlines() if line.startswith("[cache] data saved")]
        assert not saved, f"{later[0]} compiled kernels the first run did not: {saved}"


def _kernel_modules() -> set[str]:
    """Modules of the package that declare a kernel (`@kernel(...)`)."""
    found = set()
    for path in (ROOT / "detector").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(d, ast.Call) and getattr(d.func, "id", None) == "kernel" for d in node.decorator_list):
                found.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return found


def test_every_cached_kernel_is_declared_and_compiled_on_a_first_run():
    first, second = warmup.KERNEL_MODULES
    assert _kernel_modules() == set(first) | set(second) and not set(first) & set(second)
    # numba's own cache=True would miss both the first-run compile and the key over imported modules
    bare = [str(p.relative_to(ROOT)) for p in (ROOT / "detector").rglob("*.py")
            if p.name != "cpu.py" and re.search(r"cache\s*=\s*True", p.read_text())]
    assert not bare


STALE_PROBE = """
import numpy as np
from detector import schema
from detector.flows.keys import transport_ports
one = np.ones(1, np.uint8)
sport, dport = transport_ports(np.array([schema.L_PORTS], np.uint32), one, np.array([80], np.uint16),
                               np.array([443], np.uint16), one, one)
print(int(sport[0]), int(dport[0]))
"""


def test_an_edited_constant_in_an_imported_module_recompiles_the_kernel(tmp_path):
    # the ports kernel reads L_PORTS from schema.py, a module of its own source file imports
    shutil.copytree(ROOT / "detector", tmp_path / "detector", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}     # the copy's own __pycache__
    env["PYTHONPATH"] = str(tmp_path)

    def probe() -> str:
        run = subprocess.run([sys.executable, "-c", STALE_PROBE], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=600)
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    assert probe() == "80 443"
    schema = tmp_path / "detector" / "schema.py"
    text = schema.read_text()
    assert "L_PORTS = 1 << 12" in text
    schema.write_text(text.replace("L_PORTS = 1 << 12", "L_PORTS = 1 << 30"))
    # a kernel still cached for bit 12 would see no ports in a packet that has bit 30
    assert probe() == "80 443"

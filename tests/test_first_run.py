"""The first run compiles the packet kernels for this machine, says so once, before the wait, and
compiles every kernel a command calls; an edit of a module a kernel imports recompiles it.

No test here compiles every kernel again from a cold cache: `make venv` has just done so. A first run
compiles the declared signatures of every declared kernel (detector.cpu.kernel, warmup.KERNEL_MODULES), so
"it compiles what every later command calls" is three facts, each checked on what it needs: every kernel
module is declared (read from the sources), every kernel a later command calls is called with a declared
signature (seen on the kernels after analyze and flows over every bundled capture), and what a first run
compiles, in both of its processes, is what those calls load (a first run in a copy of the package whose
decoder and one kernel of the second process are cold, after which nothing is compiled again)."""
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


def _copy_package(folder: Path) -> None:
    """The package copied into `folder` with the kernels compiled so far (`make venv` compiled them all), its
    files' times kept: numba's cache checks a kernel's source by its time and size."""
    # a cache file being written has a name of its own until numba renames it
    shutil.copytree(ROOT / "detector", folder / "detector", ignore=shutil.ignore_patterns("*.tmp.*"))


# The second process of a first run compiles this module's kernel (warmup.KERNEL_MODULES): a rule's, cheap to
# compile, that `info` never calls (it does call the flow table's) and `analyze` does.
SECOND_PROCESS_PROBE = "detector.detectors.mss_violation"

# Run in a later process: load what the first run compiled, run analyze and flows over every bundled capture
# (tunnels, 802.11, pcap and pcapng among them), then name each kernel a call compiled for a signature its
# declaration lacks: a first run compiles the declared signatures only.
LATER = """
import importlib, sys
from numba.core import sigutils
from detector import cli, cpu, warmup
for module in warmup.KERNEL_MODULES[0] + warmup.KERNEL_MODULES[1]:
    importlib.import_module(module)
print("cold:", cpu.cold_kernels(*(dispatcher for dispatcher, _ in cpu.KERNELS)))
out, captures = sys.argv[1], sys.argv[2:]
print("analyze:", cli.main(["analyze", *captures, "-o", out]))
print("flows:", cli.main(["flows", *captures, "-o", "flows.csv"]))
for dispatcher, signatures in cpu.KERNELS:
    declared = {tuple(sigutils.normalize_signature(signature)[0]) for signature in signatures}
    for called in dispatcher.overloads:
        if called not in declared:
            print("undeclared:", dispatcher.py_func.__module__, dispatcher.__name__, called)
"""


def test_the_first_command_says_it_compiles_and_compiles_what_every_later_one_calls(tmp_path):
    # The kernels as `make venv` left them, but for the decoder (every command's first, whose cache says
    # whether this is a first run) and one module of the second process's half: the first command compiles
    # those, in both processes, and loads the rest; every later call must find what it compiled.
    _copy_package(tmp_path)
    cold = [tmp_path.joinpath(*module.split(".")) for module in ("detector.decode.kernel", SECOND_PROCESS_PROBE)]
    for module in cold:
        for cached in module.parent.glob(f"__pycache__/{module.name}.*.nb[ic]"):
            cached.unlink()
    assert SECOND_PROCESS_PROBE in warmup.KERNEL_MODULES[1]
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}     # the copy's own __pycache__
    env["PYTHONPATH"] = str(tmp_path)
    command = [*DETECTOR, "info", str(ROOT / "captures" / "rip-scan.pcap")]
    first = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    said = [line for line in first.stderr.splitlines() if "compiling the packet kernels" in line]
    assert len(said) == 1 and "once" in said[0] and said[0].startswith("detector: ")
    assert "Packets:       21" in first.stdout
    second = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0 and second.stderr == "" and second.stdout == first.stdout
    captures = sorted(str(p) for p in (ROOT / "captures").iterdir() if p.suffix in (".pcap", ".pcapng"))
    later = subprocess.run([sys.executable, "-c", LATER, str(tmp_path / "out"), *captures], cwd=tmp_path,
                           env=dict(env, NUMBA_DEBUG_CACHE="1"), capture_output=True, text=True, timeout=600)
    assert later.returncode == 0, later.stderr[-2000:]
    lines = later.stdout.splitlines()
    assert "analyze: 0" in lines and "flows: 0" in lines, later.stderr[-2000:]
    [cold] = [line for line in lines if line.startswith("cold:")]
    assert cold == "cold: []", f"the first run left kernels to compile: {cold}"
    undeclared = [line for line in lines if line.startswith("undeclared:")]
    assert not undeclared, f"kernels called with signatures they do not declare: {undeclared}"
    saved = [line for line in lines if line.startswith("[cache] data saved")]
    assert not saved, f"a later command compiled kernels the first run did not: {saved}"


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
    # with the kernels compiled before the edit: the one cached for bit 12 must not be loaded after it
    _copy_package(tmp_path)
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

"""The wheel as a user installs it: built from this tree, installed into a fresh venv, run from another folder.

The default rules travel as package data (the package detector.default_rules,
whose folder is the repository's rules/) and are read through
importlib.resources, so a wheel finds them wherever pip puts it: a venv, the
user site of `pip install --user`, a system prefix. Nothing here may come
from the checkout: the wheel is built from a copy of the tree, and the
commands run in a folder of their own with the venv's console script.

The packet kernels run interpreted here (NUMBA_DISABLE_JIT=1, as in the
mutation run): compiling them for the new install costs a minute, and the
rest of the suite runs them compiled; what is tested here is what the wheel
holds and where it finds it.

No index is needed. The wheel is built by this venv's own setuptools
(`--no-build-isolation`), and the fresh venv gets only the wheel: it borrows
this venv's dependencies through a .pth file, as `--system-site-packages`
would from a system Python that holds them. A .pth line adds a folder to
sys.path without running the .pth files inside it, so the editable install
of this venv stays out of the fresh one.
"""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "captures" / "pmtud-blackhole-ipv4.pcapng"
# what the build reads (setup.cfg's metadata takes README.md as the long description)
SOURCES = ("setup.cfg", "pyproject.toml", "README.md", "detector", "rules")


def run(*command, cwd=None, timeout=300, env=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{command} exited {proc.returncode}: {proc.stderr[-3000:]}"
    return proc


def tree_packages() -> set[str]:
    """The packages of the tree, as a wheel names their folders."""
    found = {str(init.parent.relative_to(ROOT)) for init in (ROOT / "detector").rglob("__init__.py")}
    return found | {"detector/default_rules"}


def test_the_wheel_installs_and_runs_with_its_rules_from_another_folder(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, source / name)
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
        "-w", tmp_path / "dist", source)
    (wheel,) = (tmp_path / "dist").glob("detector-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert {name.rpartition("/")[0] for name in names if name.endswith("/__init__.py")} == tree_packages()
    assert {f"detector/default_rules/{path.name}" for path in (ROOT / "rules").glob("*.yaml")} <= names

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    purelib = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    borrowed = [path for path in {*site.getsitepackages(), sysconfig.get_paths()["purelib"]} if Path(path).is_dir()]
    (Path(purelib) / "borrowed-dependencies.pth").write_text("\n".join(borrowed) + "\n")
    run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index", wheel)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "PYTHONHOME")}
    detector = venv / "bin" / "detector"
    where = run(python, "-c", "import detector.rules as r; print(r.__file__); print(r.RULES_DIR)",
                cwd=elsewhere, env=env).stdout.split()
    assert all(Path(path).is_relative_to(purelib) for path in where), where

    listed = run(detector, "rules", cwd=elsewhere, env=env).stdout
    assert {line.split()[0] for line in listed.splitlines()[1:]} == {p.stem for p in (ROOT / "rules").glob("*.yaml")}
    explained = run(detector, "explain", "echo-loop", cwd=elsewhere, env=env).stdout
    assert f"file: {Path(purelib) / 'detector' / 'default_rules' / 'echo-loop.yaml'}\n" in explained
    assert "min_copies = 1000  [int, " in explained

    run(detector, "analyze", CAPTURE, "-o", "out", cwd=elsewhere, env=dict(env, NUMBA_DISABLE_JIT="1"))
    findings = json.loads((elsewhere / "out" / "findings.json").read_text())
    assert {"pmtud-blackhole", "mss-violation"} <= {finding["rule"] for finding in findings["findings"]}

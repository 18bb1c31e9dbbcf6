"""The manual (docs/): MkDocs builds it with warnings as errors, its rules reference is what `detector explain`
prints, and README.md stays a front door that links into it.

The build runs `mkdocs build --strict` as `make test` does through this file, into a temporary folder: a link
to a page or an anchor that does not exist, or a page left out of the navigation, fails it. One build of a
copy with a broken link shows the check can fail.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def _build(docs: Path, site: Path) -> subprocess.CompletedProcess:
    # never --quiet: it silences the warnings before --strict counts them, and a broken link passes
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                           str(docs / "mkdocs.yml"), "-d", str(site)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def generator():
    spec = importlib.util.spec_from_file_location("rules_reference", DOCS / "rules_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rules_reference_is_what_explain_prints(generator):
    committed = (DOCS / "manual" / "rules-reference.md").read_text()
    assert committed == generator.page(), (
        "docs/manual/rules-reference.md is out of date with rules/*.yaml or a detector's PARAMS/ALERTS: "
        "run `.venv/bin/python docs/rules_reference.py` and commit the page")


def test_the_rules_reference_holds_every_rule_once(generator):
    from detector.rules import explain_text, load_rules

    page = (DOCS / "manual" / "rules-reference.md").read_text()
    rules = load_rules()
    assert re.findall(r"^## (\S+)$", page, flags=re.MULTILINE) == sorted(rules)
    # the explain text itself, the install path replaced by the repository's
    explain = explain_text(rules["echo-loop"], rules).split("\n", 3)[3]
    assert explain in page and "file: rules/echo-loop.yaml" in page


def test_the_manual_builds_with_warnings_as_errors(tmp_path):
    proc = _build(DOCS, tmp_path / "site")
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-4000:]}"
    reference = (tmp_path / "site" / "rules-reference" / "index.html").read_text()
    assert 'id="vrrp-dual-master"' in reference and "Master_Down_Interval" in reference


def test_a_broken_link_fails_the_build(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    page = docs / "manual" / "watch.md"
    page.write_text(page.read_text() + "\nSee [the alerts](outputs.md#no-such-section) and [x](gone.md).\n")
    proc = _build(docs, tmp_path / "site")
    assert proc.returncode != 0
    assert "gone.md" in proc.stderr and "no-such-section" in proc.stderr


# a path of the repository where the manual names one: `detector/ingest/index.py`, `tests/test_eve.py`
REPO_PATH = re.compile(r"(?<![\w/.])((?:detector|tests|bench|captures|notebooks|rules|docs|\.ci)/[\w/.<>*-]+)")


def test_every_file_the_manual_names_exists():
    """Files move (the layout issue moves most of them): a page naming one that is gone fails here, not in a
    reader's hands. Placeholders (`bench/NAME.py`, `evidence/<rule>-<n>.pcap`, globs) are not paths."""
    pages = [*sorted((DOCS / "manual").glob("*.md")), README]
    missing = []
    for page in pages:
        for match in REPO_PATH.finditer(page.read_text()):
            path = match.group(1).rstrip(".,;:)")
            if re.search(r"[<>*]|\b[A-Z]+\b", path):
                continue
            if not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "the manual names files that do not exist:\n" + "\n".join(missing)


def test_the_readme_is_a_front_door():
    readme = README.read_text()
    assert len(readme.splitlines()) <= 200
    # no dated diary: figures and their dates belong to docs/manual/performance.md, written by the benchmark
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", readme)
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).is_file(), f"README.md links to {target}, which does not exist"
    assert "make demo" in readme and "make test" in readme and "report.html" in readme


def test_the_readmes_sample_is_what_analyze_writes():
    """The sample is the incident summary findings.json holds for the bundled capture it names (its snapshot,
    held byte for byte by test_snapshots.py), and the rules it names are the rules there are."""
    from detector.rules import load_rules

    readme = README.read_text()
    snapshot = json.loads((ROOT / "tests" / "snapshots" / "echo-loop-rip-ipv4.pcapng.json").read_text())
    (incident,) = snapshot["findings.json"]["incidents"]
    assert "detector analyze captures/echo-loop-rip-ipv4.pcapng -o out/" in readme
    assert f"{incident['severity']:<9} {incident['id']:<12} {incident['title']}" in readme
    assert incident["summary"] in readme
    section = readme[readme.index("## What it finds"):readme.index("## The manual")]
    rules = load_rules()
    assert set(re.findall(r"`([a-z0-9-]+)`", section)) == set(rules)
    assert f"{len(rules)} rules" in section

"""The layers of the package: live/ and report/ sit below the command line and never import it.

`detector watch` and the report writers share the output layer
(report.document, output.OutputDir) with `analyze`; reaching into
commands.py or cli.py from there would tie them to argument parsing and make
an import cycle one edit away. Every import counts, also one inside a function.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "detector"
COMMAND_LINE = ("detector.commands", "detector.cli")


def imported_modules(path: Path, root: Path = PACKAGE) -> set[str]:
    """Absolute names of every module `path` (a file of the package at `root`) imports: relative imports
    resolved, and `from X import y` gives X.y too, since y may be a module."""
    package = ["detector", *path.relative_to(root).parent.parts]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def test_imports_are_resolved(tmp_path):
    folder = tmp_path / "live"
    folder.mkdir()
    (folder / "x.py").write_text("from ..commands import analyze\nfrom .. import cli\n\n\ndef f():\n"
                                 "    import detector.report.eve\n    from .ring import PacketRing\n")
    names = imported_modules(folder / "x.py", root=tmp_path)
    assert {"detector.commands", "detector.cli", "detector.report.eve", "detector.live.ring"} <= names


@pytest.mark.parametrize("layer", ["live", "report"])
def test_layer_never_imports_the_command_line(layer):
    files = sorted((PACKAGE / layer).rglob("*.py"))
    assert files
    offending = {f"{path.relative_to(PACKAGE)}: {name}" for path in files for name in imported_modules(path)
                 if any(name == top or name.startswith(top + ".") for top in COMMAND_LINE)}
    assert not offending

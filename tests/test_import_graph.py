"""The package's import graph has no cycle.

The graph is read from the source with `ast`, without importing anything:
each `import` and `from ... import` in detector/**/*.py is an edge to the
module of the package it loads. Imports inside functions count too:
deferring an import hides a cycle from Python, not from the next reader,
and the module still needs the other one to work. Imports under
`if TYPE_CHECKING:` serve type checkers only and do not count.
"""
from __future__ import annotations

import ast
import itertools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "detector"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _import_nodes(node: ast.AST):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif not _type_checking_only(child):
            yield from _import_nodes(child)


def import_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """Each module of the package -> {module of the package it imports: line of the first such import}."""
    paths = {_module_name(path, root): path for path in sorted((root / PACKAGE).rglob("*.py"))}

    def known(name: str) -> str | None:
        # `import a.b.c` loads a.b.c; a name imported from a module is that module
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                # `from a import b` loads the module a.b where there is one, else takes a name of a
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base for alias in node.names]
            for target in filter(None, map(known, targets)):
                if target != module:
                    edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(module: str) -> list[str] | None:
        path.append(module)
        on_path.add(module)
        for target in sorted(graph[module]):
            if target in on_path:
                return [*path[path.index(target):], target]
            if target not in done:
                found = visit(target)
                if found:
                    return found
        on_path.discard(path.pop())
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done:
            found = visit(module)
            if found:
                return found
    return None


def test_the_package_imports_without_cycles():
    graph = import_graph()
    cycle = find_cycle(graph)
    if cycle:
        steps = [f"{a} (line {graph[a][b]}) -> {b}" for a, b in itertools.pairwise(cycle)]
        raise AssertionError("import cycle: " + "; ".join(steps))


def test_the_graph_sees_deferred_imports_and_skips_type_checking_ones(tmp_path):
    # the reader itself, on a package made for it: a cycle closed inside a function is found,
    # one closed under TYPE_CHECKING is not
    package = tmp_path / PACKAGE
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .leaf import VALUE\n")
    (package / "sub" / "leaf.py").write_text("from ..top import helper\nVALUE = 1\n")
    (package / "top.py").write_text("def helper():\n    from .sub import VALUE\n    return VALUE\n")
    (package / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                      "    from .other import Thing\n")
    (package / "other.py").write_text("from . import typed\n")
    graph = import_graph(tmp_path)
    assert graph["detector.top"] == {"detector.sub": 2}
    assert graph["detector.sub.leaf"] == {"detector.top": 1}
    assert graph["detector.typed"] == {}
    assert find_cycle(graph) == ["detector.sub", "detector.sub.leaf", "detector.top", "detector.sub"]


def rule_modules(root: Path = ROOT) -> set[str]:
    """The modules of detector/detectors/ that register a rule (`@register` above a class)."""
    found = set()
    for path in sorted((root / PACKAGE / "detectors").glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            registered = any(getattr(d, "id", None) == "register" for d in getattr(node, "decorator_list", ()))
            if isinstance(node, ast.ClassDef) and registered:
                found.add(_module_name(path, root))
    return found


def test_no_rule_imports_another_rule_and_the_framework_imports_no_rule():
    # rules meet through ids (AFTER, the rule files' relations) and the shared models of detector.detect, never
    # through each other's modules; the framework room stands under the rules, not beside them
    graph, rules = import_graph(), rule_modules()
    assert len(rules) >= 23
    crossing = [(module, target) for module in sorted(rules) for target in graph[module] if target in rules]
    assert not crossing, crossing
    upward = [(module, target) for module, edges in graph.items() if module.startswith(f"{PACKAGE}.detect.")
              for target in edges if target.startswith(f"{PACKAGE}.detectors")]
    assert not upward, upward


def test_the_rules_room_holds_rule_modules_only():
    # detector/detectors/ is one module per rule; the interface, the runner, grouping, figures and display
    # helpers are the framework's (detector.detect), and the package's __init__ only loads the rules
    rules = rule_modules()
    others = sorted(_module_name(path, ROOT) for path in (ROOT / PACKAGE / "detectors").glob("*.py")
                    if path.name != "__init__.py" and _module_name(path, ROOT) not in rules)
    assert not others, others
    init = ast.parse((ROOT / PACKAGE / "detectors" / "__init__.py").read_text(encoding="utf-8"))
    defined = [node.name for node in init.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    assert not defined, defined


def private_imports(root: Path = ROOT) -> list[str]:
    """`module:line name` for each private name (a leading underscore, not a dunder) one module of the package
    imports from another: what a module keeps to itself is not another's to lean on (the report's escaping
    once sat, private, in render.py, and dissect.py imported it from there)."""
    found = []
    for path in sorted((root / PACKAGE).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
                continue
            if not node.level and not (node.module or "").startswith(PACKAGE):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{_module_name(path, root)}:{node.lineno} {alias.name}")
    return found


def test_no_module_imports_another_modules_private_names():
    assert private_imports() == []


def test_the_private_import_reader_sees_one(tmp_path):
    package = tmp_path / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("_HIDDEN = 1\n")
    (package / "b.py").write_text("from .a import _HIDDEN\nfrom os import _exit\n")
    assert private_imports(tmp_path) == [f"{PACKAGE}.b:1 _HIDDEN"]

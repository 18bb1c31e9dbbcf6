"""Narrow a cosmic-ray session to the code whose mutants must all die, and list the survivors.

cosmic-ray applies each of its ~200 operators everywhere: some 7,000 mutants
for the decoder alone, most of them a second or third spelling of the same
fault (`a + b` becomes `a - b`, `a * b`, `a / b`, ... eleven times over). A
run of that size takes most of a day on two cores, so `make mutation` keeps
one natural fault per site, as mutmut does (`+` to `-`, `<` to `<=`, `|` to
`&`, a number off by one, a condition negated, `and` to `or`), and only the
lines that decide what the tool reports:

- `flags`: statements that name a layer or flag bit (`L_...`, `layers`,
  `flags`) and the conditions of the `if`s, `while`s and conditional
  expressions that guard them: the decoder's layer and flag logic;
- `severity`: the same for a rule's severity (`severity`, a level name, a call that builds a finding), the
  conditions that choose one, and every line of the functions named in
  `definitions` (the rules' own tests of what they saw).

Everything else is marked skipped. `report` prints one line per surviving
mutant (file:line, function, operator, the mutated line) and exits 1 when
any survives, so a make target fails on a survivor.

`run` is a session's test command: it runs the test files listed in the
config's `[focus] tests`, the mutated module's own (`tests/test_<module>.py`)
first, stopping at the first failure. The mutant is the module cosmic-ray
wrote last; most mutants die in their own module's tests within seconds,
where the whole list would first run every other rule's tests.

    python focus.py filter SESSION CONFIG
    python focus.py report SESSION
    python focus.py run CONFIG
"""
from __future__ import annotations

import argparse
import ast
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import toml
from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

# One fault per site: the mutation a reviewer would write by hand.
OPERATORS = re.compile("|".join([
    r"core/ReplaceBinaryOperator_(Add_Sub|Sub_Add|Mul_Div|Div_Mul|FloorDiv_Mul|Mod_FloorDiv|LShift_RShift"
    r"|RShift_LShift|BitOr_BitAnd|BitAnd_BitOr|BitXor_BitOr)$",
    r"core/ReplaceComparisonOperator_(Eq_NotEq|NotEq_Eq|Lt_LtE|LtE_Lt|Gt_GtE|GtE_Gt|Is_IsNot|IsNot_Is|In_NotIn"
    r"|NotIn_In)$",
    r"core/ReplaceUnaryOperator_(Delete_Not|Delete_Invert|USub_UAdd)$",
    r"core/(AddNot|ReplaceTrueWithFalse|ReplaceFalseWithTrue|ReplaceAndWithOr|ReplaceOrWithAnd|NumberReplacer"
    r"|ZeroIterationForLoop|ReplaceBreakWithContinue|ReplaceContinueWithBreak)$",
]))

SCOPES = {
    "flags": re.compile(r"\bL_[A-Z0-9_]+\b|\blayers\[|\b[A-Z0-9_]*FLAGS\b|\bflags\b|\bIP_(MF|DF)\b"),
    "severity": re.compile(r"\bseverity\b|[\"'](info|low|medium|high|critical)[\"']|\b\w*finding\w*\("),
}


def _mentions(source: str, node: ast.AST, pattern: re.Pattern) -> bool:
    return bool(pattern.search(ast.get_source_segment(source, node) or ""))


@functools.cache
def unread_numbers(source: str) -> frozenset[tuple[int, int]]:
    """(line, column) of the numbers a decoder returns beside L_TRUNCATED: placeholders no caller reads.

    `return 0, p, layers | L_TRUNCATED` hands back a network type that the
    caller never looks at once the truncation bit is set; 0 or 1 or -1 there
    are the same program, so a mutant of it cannot die (an equivalent mutant).
    """
    spots = set()
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple)):
            continue
        elements = node.value.elts
        if not any("L_TRUNCATED" in (ast.get_source_segment(source, e) or "") for e in elements):
            continue
        for element in elements:
            number = element.operand if isinstance(element, ast.UnaryOp) else element
            if isinstance(number, ast.Constant) and isinstance(number.value, int):
                spots.add((element.lineno, element.col_offset))
                spots.add((number.lineno, number.col_offset))
    return frozenset(spots)


@functools.cache
def annotation_spans(source: str) -> tuple[tuple[int, int, int, int], ...]:
    """(first line, column, last line, end column) of every annotation: with `from __future__ import
    annotations` (PEP 563) they are strings never evaluated, so a mutant inside one is the same program."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs + [node.args.vararg, node.args.kwarg]
            notes = [node.returns] + [arg.annotation for arg in args if arg is not None]
        elif isinstance(node, ast.AnnAssign):
            notes = [node.annotation]
        else:
            continue
        spans += [(n.lineno, n.col_offset, n.end_lineno, n.end_col_offset) for n in notes if n is not None]
    return tuple(spans)


@functools.cache
def zero_offsets(source: str) -> frozenset[tuple[int, int]]:
    """(line, column) of the operator of each `x + NAME` / `x - NAME` whose NAME is a module constant equal
    to 0: a header field at offset 0, named as the others are (`u8(b, q + VXLAN_FLAGS)`); + and - are then
    one program."""
    tree = ast.parse(source)
    lines = source.splitlines()
    zeros = {target.id for node in tree.body if isinstance(node, ast.Assign)
             and isinstance(node.value, ast.Constant) and node.value.value == 0
             for target in node.targets if isinstance(target, ast.Name)}
    spots = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub))
                and isinstance(node.right, ast.Name) and node.right.id in zeros):
            # cosmic-ray places a binary operator's mutant at the operator: the first + or - after the left
            line, column = node.left.end_lineno, node.left.end_col_offset
            while column >= len(lines[line - 1]) or lines[line - 1][column] not in "+-":
                line, column = (line + 1, 0) if column >= len(lines[line - 1]) else (line, column + 1)
            spots.add((line, column))
    return frozenset(spots)


def equivalent(source: str, position: tuple[int, int]) -> bool:
    """Whether a mutant at `position` cannot change what the program does (see the three functions above)."""
    if position in unread_numbers(source) or position in zero_offsets(source):
        return True
    return "from __future__ import annotations" in source and any(
        (first, column) <= position <= (last, end) for first, column, last, end in annotation_spans(source))


def focus_lines(source: str, scope: str, definitions: frozenset[str] = frozenset()) -> set[int]:
    """Line numbers of `source` whose mutants must die under `scope`."""
    pattern = SCOPES[scope]
    tree = ast.parse(source)
    lines: set[int] = set()

    def span(node: ast.AST) -> range:
        return range(node.lineno, node.end_lineno + 1)

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in definitions:
            lines.update(span(node))
        elif isinstance(node, (ast.If, ast.While)):
            # a guard counts when a statement it directly governs names the scope
            governed = [stmt for stmt in node.body + node.orelse if not isinstance(stmt, (ast.If, ast.While))]
            if any(_mentions(source, stmt, pattern) for stmt in governed):
                lines.update(span(node.test))
        elif isinstance(node, ast.IfExp) and (_mentions(source, node.body, pattern)
                                              or _mentions(source, node.orelse, pattern)):
            lines.update(span(node.test))
        elif isinstance(node, ast.stmt) and not isinstance(node, (ast.If, ast.While, ast.For, ast.With, ast.Try,
                                                                  ast.FunctionDef, ast.ClassDef)):
            if _mentions(source, node, pattern):
                lines.update(span(node))
    return lines


def _filter(session: str, config_path: str) -> None:
    config = toml.load(config_path)
    focus = config.get("focus", {})
    scope = focus["scope"]
    definitions = frozenset(focus.get("definitions", ()))
    paths = config["cosmic-ray"]["module-path"]
    wanted = {path: focus_lines(Path(path).read_text(), scope, definitions) for path in paths}
    sources = {path: Path(path).read_text() for path in paths}
    kept = skipped = 0
    with use_db(session, WorkDB.Mode.open) as db:
        out = []
        for item in db.pending_work_items:
            inside = all(OPERATORS.match(m.operator_name) and m.start_pos[0] in wanted.get(str(m.module_path), ())
                         and not equivalent(sources[str(m.module_path)], tuple(m.start_pos))
                         for m in item.mutations)
            if inside:
                kept += 1
            else:
                out.append(item.job_id)
        skipped = len(out)
        db.set_multiple_results(out, WorkResult(output=f"outside the {scope} focus",
                                                worker_outcome=WorkerOutcome.SKIPPED))
    print(f"{session}: {kept} mutants in the {scope} focus, {skipped} skipped")


def _report(session: str) -> int:
    survivors = []
    equivalents = 0
    sources: dict[str, str] = {}
    counts = dict.fromkeys(TestOutcome, 0)
    with use_db(session, WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            counts[result.test_outcome] = counts.get(result.test_outcome, 0) + 1
            if result.test_outcome == TestOutcome.SURVIVED:
                mutation = item.mutations[0]
                path = str(mutation.module_path)
                if path not in sources:
                    sources[path] = Path(path).read_text()
                if equivalent(sources[path], tuple(mutation.start_pos)):
                    equivalents += 1
                    continue
                added = [line[1:].strip() for line in (result.diff or "").splitlines()
                         if line.startswith("+") and not line.startswith("+++")]
                survivors.append(f"{mutation.module_path}:{mutation.start_pos[0]} {mutation.definition_name} "
                                 f"{mutation.operator_name.removeprefix('core/')}: {added[0] if added else ''}")
        pending = len(db.pending_work_items)
    total = sum(counts.values())
    print(f"{session}: {total} mutants run, {counts[TestOutcome.KILLED]} killed, "
          f"{counts[TestOutcome.INCOMPETENT]} incompetent (did not load), {len(survivors)} survived"
          + (f" (and {equivalents} equivalent: placeholders beside L_TRUNCATED, annotations)" if equivalents else "")
          + (f", {pending} not run yet" if pending else ""))
    for line in sorted(survivors):
        print("  survived " + line)
    return 1 if survivors or pending else 0


def _run(config_path: str) -> int:
    config = toml.load(config_path)
    tests = list(config["focus"]["tests"])
    modules = [Path(path) for path in config["cosmic-ray"]["module-path"]]
    mutated = max(modules, key=lambda path: path.stat().st_mtime_ns)
    own = f"tests/test_{mutated.stem}.py"
    ordered = sorted(tests, key=lambda test: test != own)
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:warnings",
               *config["focus"].get("pytest-args", ()), *ordered]
    return subprocess.run(command, env=dict(os.environ, **config["focus"].get("env", {}))).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    filter_command = commands.add_parser("filter")
    filter_command.add_argument("session")
    filter_command.add_argument("config")
    report_command = commands.add_parser("report")
    report_command.add_argument("session")
    run_command = commands.add_parser("run")
    run_command.add_argument("config")
    args = parser.parse_args(argv)
    if args.command == "filter":
        _filter(args.session, args.config)
        return 0
    if args.command == "run":
        return _run(args.config)
    return _report(args.session)


if __name__ == "__main__":
    sys.exit(main())

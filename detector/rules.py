"""Rules: the text of each rule in a YAML file, its tunables declared by its detector, and the files that change them.

A rule is a detector's documentation and configuration. Its text (title,
severity, what it detects, why it matters, remediation, references, false
positives, and what it reads of the site file, if anything) is the YAML
file of the repository's `rules/` folder, shipped inside the package as
`detector.default_rules` (setup.cfg maps the folder) and read through
importlib.resources, wherever pip put it. Its tunables are
declared once, by the detector: `PARAMS` (thresholds and model settings) and
`ALERTS` (how `detector watch` de-duplicates its alerts), each a `Param` with
type, default, meaning, allowed range and trade-off. `detector explain RULE`
prints all of it.

`load_rules(DIR)` lays the files of DIR over the defaults: a user writes a
file with `id` and the keys to change (`params`, `alerts`, `severity`,
`enabled`...) and passes `--rules DIR`. Anything wrong in a file is a
`RuleError` naming the file, the key and why.

This module never imports a detector: a detector module loads numba and its
compiled kernels, and `detector rules` and `detector explain` need none of
that. The declarations are read from the detector's source (`declarations`),
and only when they are needed: a rule file changes a tunable, `explain`
prints them, `watch` asks for a rule's alert intervals.
"""
from __future__ import annotations

import ast
import difflib
import functools
import operator
import re
import sys
import textwrap
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from .detect.confidence import MODEL as CONFIDENCE_MODEL
from .detect.confidence import needs_text
from .errors import RuleError
from .findings import SEVERITIES

# The default rule files (the repository's rules/, installed as package data) and the detectors' sources.
RULES_DIR = resources.files("detector.default_rules")
DETECTORS_DIR = resources.files(__package__) / "detectors"
# libyaml's parser where PyYAML was built with it (its wheels are): a tenth of the pure-Python one's time,
# the same YAML 1.1 safe constructor
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# A rule file is a page of text; anything larger is not a rule file and is
# refused before the YAML parser spends time and memory on it.
MAX_RULE_FILE_BYTES = 256 * 1024

TEXT_KEYS = ("id", "title", "severity", "description", "why", "remediation")
LIST_KEYS = ("references", "false_positives")
# what every default rule file states
REQUIRED_KEYS = (*TEXT_KEYS, *LIST_KEYS)
# text a rule states only if it has it: `site`, what the rule does with and without the site file
# (--site, detector.site), printed by `detector explain` under its own heading
OPTIONAL_TEXT_KEYS = ("site",)
# what a file may change besides: the detector's tunables (`params`, `alerts`), `enabled: false`, which
# switches a rule off without deleting it, and `relations` to other rules (below)
OPTIONAL_KEYS = ("params", "alerts", "enabled", "relations")

# `relations:` says how a rule's findings join those of other rules into one incident (detector.incidents):
# each kind maps to the rule ids it relates to. A relation is read both ways for grouping (declared once, in
# either file); `explain` prints it under both rules.
RELATION_KINDS = {
    "causes": "a finding of this rule can cause one of these: joined when they share an entity (address, MAC, "
              "flow, frame) and overlap in time, this one the cause",
    "same_flow": "these report the same flow from another angle: joined when they share a flow (community_id) "
                 "and overlap in time",
    "same_host": "these report the same host from another angle: joined when they share an address or MAC and "
                 "overlap in time",
    "weakens": "this rule's finding makes the counts of these rules' findings during its span lower bounds "
               "(`all`: every rule): it joins the incident it overlaps most, never links two, and is never a "
               "root cause",
}
# `weakens: all`
ALL_RULES = "all"
# the inverse of each kind, as `explain` names it under the rule at the other end
RELATION_INVERSE = {"causes": "caused by", "same_flow": "same flow", "same_host": "same host",
                    "weakens": "weakened by"}


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    severity: str           # the rule's base severity; a detector may raise it with the evidence
    description: str
    why: str
    remediation: str
    references: list[str]
    false_positives: list[str]
    path: str               # the file the rule came from (the last one, for an override)
    site: str | None = None  # what it does with and without the site file; None: it reads nothing of it
    enabled: bool = True
    # the tunables rule files set, checked against the detector's declarations; its defaults fill the rest
    param_values: dict[str, Any] = field(default_factory=dict)
    alert_values: dict[str, float] = field(default_factory=dict)
    # kind (RELATION_KINDS) -> the rule ids it relates to, or ALL_RULES for `weakens: all`
    relations: dict[str, tuple[str, ...] | str] = field(default_factory=dict)

    @property
    def params(self) -> dict[str, Any]:
        """Every parameter of the detector: the rule files' values over the defaults it declares."""
        return {name: param.default for name, param in declarations(self.id).params.items()} | self.param_values

    @property
    def suppress_s(self) -> float:
        """Live alerts: the least seconds between two events about one entity (see ALERT_PARAMS)."""
        return self._alert("suppress_s")

    @property
    def resolve_s(self) -> float:
        """Live alerts: the seconds an entity must go unseen before it is resolved."""
        return self._alert("resolve_s")

    def _alert(self, name: str) -> float:
        if name in self.alert_values:
            return self.alert_values[name]
        return declarations(self.id).alerts[name].default


@dataclass(frozen=True)
class Range:
    """The values a parameter may take, bounds included: a number between `low` and `high` (powers of two
    only, where `power_of_two`), the number of items of a list, the length of a string."""
    low: float
    high: float
    power_of_two: bool = False

    def __contains__(self, value) -> bool:
        if isinstance(value, (list, str)):
            value = len(value)
        if self.power_of_two and (value < 1 or value & (value - 1)):
            return False
        # a NaN compares false both ways: it is outside every range
        return bool(self.low <= value <= self.high)

    def __str__(self) -> str:
        span = f"{_number(self.low)}..{_number(self.high)}"
        return f"a power of two in {span}" if self.power_of_two else span


def _number(value: float) -> str:
    """A bound as a reader writes it: 1,024 and 3,600,000, 0.001."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


class Param(NamedTuple):
    """A tunable as a detector declares it (PARAMS, ALERTS): type, default, what it means, the values
    allowed (None for a bool, which has only two), and what raising or lowering it costs."""
    kind: type
    default: Any
    doc: str
    range: Range | None
    tradeoff: str

    def allowed(self) -> str:
        """The range in words: of the value, or of a list's items or a string's characters."""
        unit = {list: " items", str: " characters"}.get(self.kind, "")
        return f"{self.range}{unit}"


# Ranges shared by the detectors' declarations (a value outside is a RuleError naming it).
# A count of packets, messages or hosts: one to a billion, more than a day of a 10,000/s flood; a
# threshold above it would never fire and only hides a typo.
COUNT = Range(1, 10**9)
# A packet rate: one per second to ten billion, above the minimum-frame rate of 800 Gb/s Ethernet
# (84 bytes a frame on the wire with preamble and inter-frame gap: 1.19 billion per second).
RATE_PPS = Range(1, 1e10)
RATIO = Range(0, 1)
# An alert interval: from a millisecond (the live window's resolution is coarser) to a week (an incident
# unseen for longer is over).
ALERT_SECONDS = Range(0.001, 7 * 86400)

# `alerts:` tunes how `detector watch` de-duplicates a rule's live alerts (detector.live.alerts). A detector's
# ALERTS declares its own values and trade-offs; these serve a rule whose detector declares none.
ALERT_PARAMS = {
    "suppress_s": Param(float, 300.0, "least seconds between two events about one entity (its alert, then "
                                      "updates while it goes on)", ALERT_SECONDS,
                        "Shorter shows an incident's course sooner but repeats itself during a long one."),
    "resolve_s": Param(float, 10.0, "seconds an entity must go unseen before it is resolved", ALERT_SECONDS,
                       "Shorter gives the all-clear sooner but resolves, then raises again, an incident that "
                       "pauses."),
}
ALERT_KEYS = {name: param.default for name, param in ALERT_PARAMS.items()}


class Declarations(NamedTuple):
    """A detector's tunables: its PARAMS, and its ALERTS over ALERT_PARAMS; what its findings rest on
    (QUALITY_NEEDS, detect.confidence.NEEDS) and whether they are context only (CONTEXT_ONLY)."""
    params: dict[str, Param]
    alerts: dict[str, Param]
    quality_needs: frozenset = frozenset()
    context_only: bool = False


def detector_source(rule_id: str):
    """The source file of the detector serving `rule_id` (detectors.register holds each to this name)."""
    return DETECTORS_DIR / f"{rule_id.replace('-', '_')}.py"


# What a declaration is built of: literals, the arithmetic of bounds (10**9, 7 * 86400), Param and Range,
# the value types and the shared ranges above. Nothing else resolves: a declaration is data.
DECLARATION_NAMES = {"Param": Param, "Range": Range, "COUNT": COUNT, "RATE_PPS": RATE_PPS, "RATIO": RATIO,
                     "ALERT_SECONDS": ALERT_SECONDS, "int": int, "float": float, "bool": bool, "str": str,
                     "list": list}
DECLARATION_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
                         ast.Pow: operator.pow, ast.USub: operator.neg}


def _declared_value(node: ast.AST, source) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in DECLARATION_NAMES:
        return DECLARATION_NAMES[node.id]
    if isinstance(node, ast.List):
        return [_declared_value(item, source) for item in node.elts]
    if isinstance(node, ast.Set):
        return frozenset(_declared_value(item, source) for item in node.elts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "frozenset":
        return frozenset(*(_declared_value(arg, source) for arg in node.args))
    if isinstance(node, ast.Dict) and None not in node.keys:
        return {_declared_value(key, source): _declared_value(value, source)
                for key, value in zip(node.keys, node.values)}
    if isinstance(node, ast.UnaryOp) and type(node.op) in DECLARATION_OPERATORS:
        return DECLARATION_OPERATORS[type(node.op)](_declared_value(node.operand, source))
    if isinstance(node, ast.BinOp) and type(node.op) in DECLARATION_OPERATORS:
        return DECLARATION_OPERATORS[type(node.op)](_declared_value(node.left, source),
                                                    _declared_value(node.right, source))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("Param", "Range"):
        return DECLARATION_NAMES[node.func.id](*(_declared_value(arg, source) for arg in node.args),
                                               **{kw.arg: _declared_value(kw.value, source) for kw in node.keywords})
    raise ValueError(f"{source}, line {node.lineno}: a declaration is built of literals, Param, Range and the "
                     f"shared ranges of detector.rules, not `{ast.unparse(node)}`")


@functools.cache
def declarations(rule_id: str) -> Declarations:
    """The PARAMS and ALERTS of the detector serving `rule_id`: the class's own where its module is imported
    already (an analysis), else read from its source without importing it (source_declarations)."""
    module = sys.modules.get(f"{__package__}.detectors.{rule_id.replace('-', '_')}")
    for cls in vars(module).values() if module is not None else ():
        if isinstance(cls, type) and cls.__module__ == module.__name__ and getattr(cls, "rule_id", None) == rule_id:
            return Declarations(cls.PARAMS, ALERT_PARAMS | cls.ALERTS, frozenset(cls.QUALITY_NEEDS),
                                bool(cls.CONTEXT_ONLY))
    return source_declarations(rule_id)


@functools.cache
def source_declarations(rule_id: str) -> Declarations:
    """The PARAMS and ALERTS of the detector serving `rule_id`, read from its source without importing it.

    Importing a detector module loads numba and its kernels; its declarations
    are data (see DECLARATION_NAMES), read here as setuptools reads a version
    attribute (parsing the 23 sources costs half a second: an analysis, which
    has imported them, reads the classes). tests/test_rules.py holds them
    equal to the imported class's.
    """
    source = detector_source(rule_id)
    tree = ast.parse(source.read_text(encoding="utf-8"), str(source))
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        assigned = {target.id: statement.value for statement in node.body if isinstance(statement, ast.Assign)
                    for target in statement.targets if isinstance(target, ast.Name)}
        # `NAME: ClassVar[...] = value` declares as well
        assigned |= {statement.target.id: statement.value for statement in node.body
                     if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                     and statement.value is not None}
        serves = assigned.get("rule_id")
        if isinstance(serves, ast.Constant) and serves.value == rule_id:
            params = _declared_value(assigned["PARAMS"], source) if "PARAMS" in assigned else {}
            alerts = _declared_value(assigned["ALERTS"], source) if "ALERTS" in assigned else {}
            needs = _declared_value(assigned["QUALITY_NEEDS"], source) if "QUALITY_NEEDS" in assigned else frozenset()
            context_only = _declared_value(assigned["CONTEXT_ONLY"], source) if "CONTEXT_ONLY" in assigned else False
            return Declarations(params, ALERT_PARAMS | alerts, frozenset(needs), bool(context_only))
    raise LookupError(f"{source} declares no detector with rule_id '{rule_id}'")


# PyYAML reads YAML 1.1, where a float needs a dot: `1e-3` is a string there and a float in YAML 1.2
# (core schema, section 10.3.2), as a user means it.
YAML12_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")


def did_you_mean(written, known) -> str:
    """A hint naming the known word nearest one written wrong, or nothing. An error says what a user's file should
    hold, never the text it holds: a file named by mistake (a password file) must not reach a terminal or a CI log;
    only keys, the places in the file, are named."""
    close = difflib.get_close_matches(written, list(known), n=1) if isinstance(written, str) else []
    return f" (did you mean '{close[0]}'?)" if close else ""


def _shown(value) -> str:
    """A value for a one-line error: a huge number by its size (a 400-digit number fills a terminal)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 20:
        return f"a {len(str(abs(value)))}-digit number"
    return f"{value!r:.60}"


def _param_value(path, key: str, param: Param, value):
    """Check one value against its declared type and range; ints are accepted where floats are."""
    expected = param.kind
    if expected is float and isinstance(value, str) and YAML12_FLOAT.fullmatch(value.strip()):
        value = float(value)
    if expected is bool:
        ok = isinstance(value, bool)
    elif expected is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif expected is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif expected is list:
        ok = isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value)
    else:
        ok = isinstance(value, expected)
    if not ok:
        shown = f" {_shown(value)}" if isinstance(value, (int, float)) else ""    # a number, never a text
        raise RuleError(path, key, f"expected {expected.__name__}, got {type(value).__name__}{shown}")
    # the range is checked on the value as written: an int too large for a float compares exactly
    if param.range is not None and value not in param.range:
        raise RuleError(path, key, f"{_shown(value)} is outside the allowed range {param.allowed()}")
    return float(value) if expected is float else value


def _read_document(path) -> dict:
    """A rule file's mapping; `path` is a Path or an importlib.resources Traversable (the defaults)."""
    try:
        with path.open("rb") as stream:
            data = stream.read(MAX_RULE_FILE_BYTES + 1)
        if len(data) > MAX_RULE_FILE_BYTES:
            raise RuleError(path, None, f"larger than a rule file can be ({MAX_RULE_FILE_BYTES} bytes)")
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RuleError(path, None, f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise RuleError(path, None, exc.strerror or str(exc)) from None
    try:
        document = yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "nesting depth" in problem:
            # libyaml (0.2.5 and later) refuses more than 1,000 levels before anything recurses
            problem = "nested more than 1,000 levels deep"
        raise RuleError(path, None, f"not valid YAML: {where}{problem}") from None
    if not isinstance(document, dict):
        raise RuleError(path, None, "a rule file holds one mapping (id: ..., title: ..., params: ...)")
    return document


def _parse(path, document: dict, known: list[str] | None, base: Rule | None,
           relatable: list[str] | None = None) -> Rule:
    """One validated rule from a file's mapping; keys the file lacks come from `base`, if any.

    `known` are the rule ids a file may change, None for a default rule file,
    which needs a detector module of its name. `relatable` are the rule ids its
    relations may name (default: `known`). The detector's declarations are read
    only if the file sets one of its tunables.
    """
    allowed = REQUIRED_KEYS + OPTIONAL_TEXT_KEYS + OPTIONAL_KEYS
    for key in document:
        if key not in allowed:
            raise RuleError(path, str(key), f"unknown key (allowed: {', '.join(allowed)})")
    rule_id = document.get("id")
    if not isinstance(rule_id, str) or not rule_id:
        raise RuleError(path, "id", "missing or not a string")
    if known is None:
        if not detector_source(rule_id).is_file():
            raise RuleError(path, "id", f"no detector implements '{rule_id}' (no module "
                                        f"detector/detectors/{detector_source(rule_id).name})")
        if Path(path.name).stem != rule_id:
            raise RuleError(path, "id", f"'{rule_id}' differs from the file name '{Path(path.name).stem}'")
    elif rule_id not in known:
        raise RuleError(path, "id", f"no detector implements this id{did_you_mean(rule_id, known)} "
                                    f"(known: {', '.join(sorted(known))})")
    values: dict[str, Any] = {}
    for key in REQUIRED_KEYS:
        if key in document:
            continue
        if base is None:
            raise RuleError(path, key, "missing")
    for key in TEXT_KEYS:
        value = document.get(key, getattr(base, key, None))
        if not isinstance(value, str) or not value.strip():
            raise RuleError(path, key, "must be a non-empty string")
        values[key] = value.strip()
    for key in OPTIONAL_TEXT_KEYS:
        value = document.get(key, getattr(base, key, None))
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise RuleError(path, key, "must be a non-empty string")
        values[key] = value.strip() if value is not None else None
    if values["severity"] not in SEVERITIES:
        raise RuleError(path, "severity", f"not one of {', '.join(SEVERITIES)}"
                                          f"{did_you_mean(values['severity'], SEVERITIES)}")
    for key in LIST_KEYS:
        value = document.get(key, getattr(base, key, None))
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise RuleError(path, key, "must be a list of strings")
        values[key] = [v.strip() for v in value]
    enabled = document.get("enabled", getattr(base, "enabled", True))
    if not isinstance(enabled, bool):
        raise RuleError(path, "enabled", "must be true or false")
    param_values = dict(base.param_values) if base is not None else {}
    given = document.get("params", {})
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise RuleError(path, "params", "must be a mapping of parameter name to value")
    if given:
        declared = declarations(rule_id).params
        for name, value in given.items():
            key = f"params.{name}"
            if name not in declared:
                raise RuleError(path, key, f"unknown parameter (known: {', '.join(sorted(declared))})")
            param_values[name] = _param_value(path, key, declared[name], value)
    alert_values = _alert_settings(path, document.get("alerts"), base)
    relations = _relations(path, rule_id, document.get("relations"), base, relatable or known or [])
    return Rule(path=str(path), enabled=enabled, param_values=param_values, alert_values=alert_values,
                relations=relations, **values)


def _relations(path, rule_id: str, given, base: Rule | None, known: list[str]) -> dict:
    """The `relations:` mapping checked, kind by kind over the base rule's (an override may change one kind)."""
    values = dict(base.relations) if base is not None else {}
    if given is None:
        return values
    if not isinstance(given, dict):
        raise RuleError(path, "relations", f"must be a mapping of {', '.join(RELATION_KINDS)} to lists of rule ids")
    for kind, targets in given.items():
        key = f"relations.{kind}"
        if kind not in RELATION_KINDS:
            raise RuleError(path, key, f"unknown relation (known: {', '.join(RELATION_KINDS)})")
        if kind == "weakens" and targets == ALL_RULES:
            values[kind] = ALL_RULES
            continue
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            also = f" or `{ALL_RULES}`" if kind == "weakens" else ""
            raise RuleError(path, key, f"must be a list of rule ids{also}")
        for target in targets:
            if target == rule_id:
                raise RuleError(path, key, f"'{target}' is this rule: a relation names other rules")
            if target not in known:
                raise RuleError(path, key, f"names no rule{did_you_mean(target, known)} "
                                           f"(known: {', '.join(sorted(known))})")
        if len(set(targets)) != len(targets):
            raise RuleError(path, key, "names a rule twice")
        values[kind] = tuple(targets)
    return values


def _alert_settings(path, given, base: Rule | None) -> dict[str, float]:
    """The `alerts:` mapping checked, over the base rule's values (an override may give one key)."""
    values = dict(base.alert_values) if base is not None else {}
    if given is None:
        return values
    if not isinstance(given, dict):
        raise RuleError(path, "alerts", f"must be a mapping of {' and '.join(ALERT_PARAMS)} to seconds")
    for name, value in given.items():
        key = f"alerts.{name}"
        if name not in ALERT_PARAMS:
            raise RuleError(path, key, f"unknown setting (known: {', '.join(ALERT_PARAMS)})")
        values[name] = _param_value(path, key, ALERT_PARAMS[name], value)
    return values


def _rule_files(directory) -> list:
    if not directory.is_dir():
        raise RuleError(directory, None, "not a folder of rule files")
    return sorted((p for p in directory.iterdir() if p.name.endswith((".yaml", ".yml")) and p.is_file()),
                  key=lambda p: p.name)


def load_rules(directory=None) -> dict[str, Rule]:
    """The default rules, with the files of `directory` (if given) laid over them, by rule id.

    A file in `directory` may hold only `id` and the keys it changes; its
    `params` and `alerts` are merged over the default ones.
    """
    rules: dict[str, Rule] = {}
    defaults = _rule_files(RULES_DIR)
    default_ids = [Path(path.name).stem for path in defaults]
    for path in defaults:
        rule = _parse(path, _read_document(path), None, None, default_ids)
        rules[rule.id] = rule
    if directory is not None:
        seen: dict[str, Path] = {}
        for path in _rule_files(Path(directory)):
            document = _read_document(path)
            rule_id = document.get("id")
            if isinstance(rule_id, str) and rule_id in seen:
                raise RuleError(path, "id", f"'{rule_id}' is defined in {seen[rule_id].name} too")
            base = rules.get(rule_id) if isinstance(rule_id, str) else None
            rule = _parse(path, document, list(rules), base)
            seen[rule.id] = path
            rules[rule.id] = rule
    return rules


def rules_table(rules: dict[str, Rule]) -> str:
    """One line per rule: id, severity, title (what `detector rules` prints)."""
    lines = [f"{'rule':<18} {'severity':<9} title"]
    for rule in sorted(rules.values(), key=lambda r: r.id):
        state = "" if rule.enabled else "  (disabled)"
        lines.append(f"{rule.id:<18} {rule.severity:<9} {rule.title}{state}")
    return "\n".join(lines) + "\n"


def related_rules(rule: Rule, rules: dict[str, Rule]) -> list[tuple[str, list[str]]]:
    """The rule's relations in words: those it declares, then those other rules declare toward it (by the
    inverse's name: "caused by"), kind by kind in RELATION_KINDS' order; `weakens: all` reads "all rules"."""
    declared: dict[str, list[str]] = {}
    inverse: dict[str, list[str]] = {}
    for kind in RELATION_KINDS:
        targets = rule.relations.get(kind)
        if targets:
            declared[kind.replace("_", " ")] = ["all rules"] if targets == ALL_RULES else list(targets)
        for other in sorted(rules.values(), key=lambda r: r.id):
            targets = other.relations.get(kind, ())
            if other.id != rule.id and (targets == ALL_RULES or rule.id in targets):
                inverse.setdefault(RELATION_INVERSE[kind], []).append(other.id)
    for name, ids in inverse.items():
        # a symmetric kind reads the same from both ends: one line
        declared.setdefault(name, []).extend(i for i in ids if i not in declared.get(name, []))
    return list(declared.items())


def explain_text(rule: Rule, rules: dict[str, Rule] | None = None) -> str:
    """A rule's full documentation, in fixed sections (what `detector explain RULE` prints); `rules`, the
    whole set, adds the relations other rules declare toward this one."""
    declared = declarations(rule.id)
    out = [f"{rule.id}: {rule.title}", f"severity: {rule.severity}" + ("" if rule.enabled else " (disabled)"),
           f"file: {rule.path}", "", "What it detects", _indent(rule.description), "",
           "Why it matters", _indent(rule.why), "", "Parameters"]
    params = rule.params
    out += [_setting(name, params[name], declared.params[name]) for name in sorted(params)] or [
        "  None: what it judges by is fixed by the protocol and the site file."]
    example = next((name for name, param in declared.params.items() if param.kind is not list), None)
    if example is not None:
        snippet = yaml.safe_dump({"id": rule.id, "params": {example: declared.params[example].default}},
                                 sort_keys=False)
        out += ["  To change one, pass --rules DIR with a file in DIR such as:",
                textwrap.indent(snippet.rstrip("\n"), " " * 6)]
    out += ["", "Site file (--site)", _indent(rule.site or "Not read: this rule judges by the packets and its "
                                                             "parameters alone.")]
    out += ["", "Relations (how its findings join others' into incidents)"]
    relations = related_rules(rule, rules if rules is not None else {rule.id: rule})
    out += [_wrap(f"{kind}: {', '.join(names)}", "  ", "      ") for kind, names in relations] or [
        "  None: its findings are incidents of their own."]
    out += ["", "Confidence (how sure its findings are)", _indent(needs_text(declared.quality_needs)),
            "", textwrap.indent(CONFIDENCE_MODEL.rstrip(), "  ")]
    out += ["", "Live alerts (detector watch)"]
    out += [_setting(name, getattr(rule, name), declared.alerts[name]) for name in ALERT_PARAMS]
    out += ["", "False positives"] + [_wrap(item, "  - ", "    ") for item in rule.false_positives]
    out += ["", "Remediation", _indent(rule.remediation), "", "References"]
    out += [f"  - {item}" for item in rule.references]
    return "\n".join(out) + "\n"


def _setting(name: str, value, param: Param) -> str:
    """One tunable: its value (and default, if changed), type and range, then its meaning and trade-off."""
    changed = "" if value == param.default else f" (default {param.default!r})"
    allowed = "" if param.range is None else f", {param.allowed()}"
    meaning = param.doc[:1].upper() + param.doc[1:]
    return "\n".join([_wrap(f"{name} = {value!r}{changed}  [{param.kind.__name__}{allowed}]", "  ", "      "),
                      _indent(f"{meaning}. {param.tradeoff}", 6)])


def _wrap(text: str, first: str, rest: str) -> str:
    return textwrap.fill(text, 80, initial_indent=first, subsequent_indent=rest, break_long_words=False,
                         break_on_hyphens=False)


def _indent(text: str, width: int = 2) -> str:
    """Paragraphs of `text` wrapped to the terminal's customary 80 columns, indented."""
    pad = " " * width
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    return "\n\n".join(textwrap.fill(" ".join(p.split()), 80, initial_indent=pad, subsequent_indent=pad,
                                     break_on_hyphens=False) for p in paragraphs)


__all__ = ["Rule", "Param", "Range", "Declarations", "RULES_DIR", "ALERT_KEYS", "ALERT_PARAMS", "COUNT", "RATE_PPS",
           "RATIO", "ALERT_SECONDS", "RELATION_KINDS", "ALL_RULES", "declarations", "load_rules", "rules_table",
           "explain_text", "related_rules", "MAX_RULE_FILE_BYTES"]

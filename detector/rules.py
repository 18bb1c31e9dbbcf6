"""Rule files: one YAML document per detector in rules/, validated against the detector's parameters.

A rule holds the text a user reads (`detector rules`, `detector explain RULE`)
and the thresholds the detector runs with. The default rules live in the
repository's `rules/` folder; `load_rules(DIR)` lays the files of DIR over
them, so a user copies one file, edits a threshold and passes `--rules DIR`.
Anything wrong in a file is a `RuleError` naming the file, the key and why.
"""
from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from .errors import RuleError
from .findings import SEVERITIES



def _default_rules_dir() -> Path:
    """The repository's rules/ (a checkout or editable install), else the copy a wheel installs."""
    checkout = Path(__file__).resolve().parents[1] / "rules"
    if checkout.is_dir():
        return checkout
    return Path(sys.prefix) / "share" / "detector" / "rules"


RULES_DIR = _default_rules_dir()

# A rule file is a page of text; anything larger is not a rule file and is
# refused before the YAML parser spends time and memory on it.
MAX_RULE_FILE_BYTES = 256 * 1024

TEXT_KEYS = ("id", "title", "severity", "description", "why", "remediation")
LIST_KEYS = ("references", "false_positives")
REQUIRED_KEYS = (*TEXT_KEYS, *LIST_KEYS, "params", "alerts")
# `enabled: false` in an override file switches a rule off without deleting it.
OPTIONAL_KEYS = ("enabled",)
# `alerts:` tunes how `detector watch` de-duplicates the rule's live alerts (detector.live.alerts):
# suppress_s is the least time between two events about one entity (an `alert`, then `update`s),
# resolve_s how long an entity must go unseen before it is `resolved`. Seconds: from a millisecond (the
# live window's resolution is coarser) to a week (an incident unseen for longer is over).
ALERT_KEYS = {"suppress_s": 300.0, "resolve_s": 10.0}
ALERT_RANGE_S = (0.001, 7 * 86400.0)


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
    params: dict[str, Any]  # every parameter of the detector: the file's values over the defaults
    path: str               # the file the rule came from (the last one, for an override)
    enabled: bool = True
    suppress_s: float = ALERT_KEYS["suppress_s"]   # live alerts: see ALERT_KEYS
    resolve_s: float = ALERT_KEYS["resolve_s"]


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
    """A detector parameter as declared in its PARAMS: type, default, what it means, the values allowed
    (None for a bool, which has only two)."""
    kind: type
    default: Any
    doc: str
    range: Range | None

    def allowed(self) -> str:
        """The range in words: of the value, or of a list's items or a string's characters."""
        unit = {list: " items", str: " characters"}.get(self.kind, "")
        return f"{self.range}{unit}"


# PyYAML reads YAML 1.1, where a float needs a dot: `1e-3` is a string there and a float in YAML 1.2
# (core schema, section 10.3.2), as a user means it.
YAML12_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")


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
        raise RuleError(path, key, f"expected {expected.__name__}, got {type(value).__name__} {value!r:.60}")
    # the range is checked on the value as written: an int too large for a float compares exactly
    if param.range is not None and value not in param.range:
        raise RuleError(path, key, f"{_shown(value)} is outside the allowed range {param.allowed()}")
    return float(value) if expected is float else value


def _read_document(path: Path) -> dict:
    try:
        size = path.stat().st_size
        if size > MAX_RULE_FILE_BYTES:
            raise RuleError(path, None, f"{size} bytes: larger than a rule file can be ({MAX_RULE_FILE_BYTES})")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise RuleError(path, None, f"not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise RuleError(path, None, exc.strerror or str(exc)) from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RuleError(path, None, f"not valid YAML: {where}{problem}") from None
    if not isinstance(document, dict):
        raise RuleError(path, None, "a rule file holds one mapping (id: ..., title: ..., params: ...)")
    return document


def _parse(path: Path, document: dict, registry: dict, base: Rule | None) -> Rule:
    """One validated rule from a file's mapping; keys the file lacks come from `base`, if any."""
    for key in document:
        if key not in REQUIRED_KEYS and key not in OPTIONAL_KEYS:
            raise RuleError(path, str(key), f"unknown key (allowed: {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)})")
    rule_id = document.get("id")
    if not isinstance(rule_id, str) or not rule_id:
        raise RuleError(path, "id", "missing or not a string")
    if rule_id not in registry:
        raise RuleError(path, "id", f"no detector implements '{rule_id}' (known: {', '.join(sorted(registry))})")
    if base is None and path.stem != rule_id:
        raise RuleError(path, "id", f"'{rule_id}' differs from the file name '{path.stem}'")
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
    if values["severity"] not in SEVERITIES:
        raise RuleError(path, "severity", f"'{values['severity']}' is not one of {', '.join(SEVERITIES)}")
    for key in LIST_KEYS:
        value = document.get(key, getattr(base, key, None))
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise RuleError(path, key, "must be a list of strings")
        values[key] = [v.strip() for v in value]
    enabled = document.get("enabled", getattr(base, "enabled", True))
    if not isinstance(enabled, bool):
        raise RuleError(path, "enabled", "must be true or false")
    declared = registry[rule_id].PARAMS
    params = {name: spec[1] for name, spec in declared.items()}
    if base is not None:
        params.update(base.params)
    given = document.get("params", {})
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise RuleError(path, "params", "must be a mapping of parameter name to value")
    for name, value in given.items():
        key = f"params.{name}"
        if name not in declared:
            raise RuleError(path, key, f"unknown parameter (known: {', '.join(sorted(declared))})")
        params[name] = _param_value(path, key, declared[name], value)
    alerts = _alert_settings(path, document.get("alerts"), base)
    return Rule(params=params, path=str(path), enabled=enabled, **alerts, **values)


def _alert_settings(path, given, base: Rule | None) -> dict[str, float]:
    """The `alerts:` mapping checked, over the base rule's values (an override may give one key)."""
    values = {key: getattr(base, key) if base is not None else default for key, default in ALERT_KEYS.items()}
    if given is None:
        return values
    if not isinstance(given, dict):
        raise RuleError(path, "alerts", f"must be a mapping of {' and '.join(ALERT_KEYS)} to seconds")
    for name, value in given.items():
        key = f"alerts.{name}"
        if name not in ALERT_KEYS:
            raise RuleError(path, key, f"unknown setting (known: {', '.join(ALERT_KEYS)})")
        values[name] = _param_value(path, key, ALERT_PARAM, value)
    return values


ALERT_PARAM = Param(float, None, "seconds", Range(*ALERT_RANGE_S))


def _rule_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise RuleError(directory, None, "not a folder of rule files")
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def load_rules(directory=None) -> dict[str, Rule]:
    """The default rules, with the files of `directory` (if given) laid over them, by rule id.

    A file in `directory` may hold only `id` and the keys it changes; its
    `params` are merged over the default ones.
    """
    from .detectors import REGISTRY   # the detectors import this module for `Rule`

    rules: dict[str, Rule] = {}
    for path in _rule_files(RULES_DIR):
        rule = _parse(path, _read_document(path), REGISTRY, None)
        rules[rule.id] = rule
    if directory is not None:
        seen: dict[str, Path] = {}
        for path in _rule_files(Path(directory)):
            document = _read_document(path)
            rule_id = document.get("id")
            if isinstance(rule_id, str) and rule_id in seen:
                raise RuleError(path, "id", f"'{rule_id}' is defined in {seen[rule_id].name} too")
            base = rules.get(rule_id) if isinstance(rule_id, str) else None
            rule = _parse(path, document, REGISTRY, base)
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


def explain_text(rule: Rule) -> str:
    """A rule's full documentation, in fixed sections (what `detector explain RULE` prints)."""
    from .detectors import REGISTRY

    declared = REGISTRY[rule.id].PARAMS
    out = [f"{rule.id}: {rule.title}", f"severity: {rule.severity}" + ("" if rule.enabled else " (disabled)"),
           f"file: {rule.path}", "", "What it detects", _indent(rule.description), "",
           "Why it matters", _indent(rule.why), "", "Parameters"]
    for name in sorted(rule.params):
        param = declared[name]
        changed = "" if rule.params[name] == param.default else f" (default {param.default!r})"
        allowed = "" if param.range is None else f", {param.allowed()}"
        out.append(_wrap(f"{name} = {rule.params[name]!r}{changed}  [{param.kind.__name__}{allowed}]", "  ", "      "))
        out.append(_indent(param.doc, 6))
    out += ["", "Live alerts (detector watch)",
            f"  suppress_s = {rule.suppress_s:g}: least seconds between two events about one entity "
            f"[{ALERT_PARAM.allowed()}]",
            f"  resolve_s = {rule.resolve_s:g}: seconds unseen before the entity is resolved [{ALERT_PARAM.allowed()}]"]
    out += ["", "False positives"] + [_wrap(item, "  - ", "    ") for item in rule.false_positives]
    out += ["", "Remediation", _indent(rule.remediation), "", "References"]
    out += [f"  - {item}" for item in rule.references]
    return "\n".join(out) + "\n"


def _wrap(text: str, first: str, rest: str) -> str:
    return textwrap.fill(text, 80, initial_indent=first, subsequent_indent=rest, break_long_words=False)


def _indent(text: str, width: int = 2) -> str:
    """Paragraphs of `text` wrapped to the terminal's customary 80 columns, indented."""
    pad = " " * width
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    return "\n\n".join(textwrap.fill(" ".join(p.split()), 80, initial_indent=pad, subsequent_indent=pad)
                       for p in paragraphs)


__all__ = ["Rule", "Param", "Range", "RULES_DIR", "ALERT_KEYS", "load_rules", "rules_table", "explain_text",
           "MAX_RULE_FILE_BYTES"]

"""A rule is known only to its own detector: no other module of the package names its id.

What a rule needs beyond its findings (the entity its alerts de-duplicate on,
the report's figures, a reproducer script, live metrics) are hooks on its
detector class (detect/detector.py), so adding a rule means adding its module,
its rule file, its capture builder and its test. A module elsewhere that
spells a rule id out ("rip-trigger" in an `if`, a table keyed by rule ids, a
comment that explains one rule's case) is knowledge in the wrong place.
Rule files, captures and tests may name rules; the package may not, outside
the rule's own module, but for the rules a detector declares it reads (its
AFTER: ordering and relations go by id, never by importing another rule's
module, tests/test_import_graph.py).
"""
from __future__ import annotations

import re
from pathlib import Path

from detector.detectors import REGISTRY
from detector.rules import load_rules

PACKAGE = Path(__file__).resolve().parents[1] / "detector"
DETECTORS = PACKAGE / "detectors"


def _own_module(rule_id: str) -> Path:
    return DETECTORS / f"{rule_id.replace('-', '_')}.py"


def _named(rule_id: str, text: str) -> bool:
    """Whether `text` spells the id as a word of its own (not inside a longer id or name)."""
    return re.search(rf"(?<![\w-]){re.escape(rule_id)}(?![\w-])", text) is not None


def _declared_reads() -> dict[Path, set[str]]:
    """Each rule module -> the rule ids its detector declares it reads (AFTER)."""
    return {_own_module(rule_id): set(cls.AFTER) for rule_id, cls in REGISTRY.items()}


def test_rule_ids_appear_only_in_their_own_detector_module():
    rule_ids = set(load_rules()) | set(REGISTRY)
    assert len(rule_ids) >= 6
    reads = _declared_reads()
    assert any(reads.values())
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for rule_id in sorted(rule_ids):
            if path != _own_module(rule_id) and rule_id not in reads.get(path, ()) and _named(rule_id, text):
                offenders.append(f"{path.relative_to(PACKAGE.parent)} names {rule_id}")
    assert not offenders, "\n".join(offenders)


def test_every_rule_has_its_own_module_that_names_it():
    for rule_id in REGISTRY:
        assert _named(rule_id, _own_module(rule_id).read_text(encoding="utf-8")), rule_id


def test_the_word_match_is_exact():
    assert _named("echo-loop", 'rule_id = "echo-loop"')
    assert _named("echo-loop", "an echo-loop finding")
    assert not _named("echo-loop", "echo_loop.py and echo-loops and the echo loop")
    assert not _named("echo-loop", "pre-echo-loop")

"""Writes the manual's rules reference (docs/manual/rules-reference.md) from rules/*.yaml and `detector explain`.

    .venv/bin/python docs/rules_reference.py           # rewrite the page after changing a rule
    .venv/bin/python docs/rules_reference.py --check   # exit 1 if the committed page differs

Each rule's section is exactly what `detector explain RULE` prints (its YAML text, its detector's declared
parameters and alert intervals, its relations from both ends, what its confidence rests on), so the page
cannot say anything the command line does not. tests/test_docs.py fails when the committed page differs.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from detector.rules import explain_text, load_rules

PAGE = Path(__file__).resolve().parent / "manual" / "rules-reference.md"

HEADER = """\
# Rules reference

<!-- Written by docs/rules_reference.py from rules/*.yaml and `detector explain`: edit those, not this page,
     then run `.venv/bin/python docs/rules_reference.py`. -->

Every default rule as `detector explain RULE` prints it: what it detects, why it matters, each parameter
and live-alert interval with its default, range and trade-off, what it reads of the
[site file](site-file.md), its [relations](rules.md#incidents) to other rules, what its confidence rests
on, false positives, remediation and references. How to change a parameter or turn a rule off is in
[Rules](rules.md#configuring-a-rule).

| rule | severity | title |
|---|---|---|
"""


def _fence(text: str) -> str:
    """A fence longer than any backtick run in `text`, so the rule's text cannot close it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _cell(text: str) -> str:
    """Text for a table cell: a `|` would end the cell."""
    return text.replace("|", "\\|")


def page() -> str:
    """The whole page, from the rules as installed (the repository's rules/ and the detectors' sources)."""
    rules = load_rules()
    ordered = sorted(rules.values(), key=lambda rule: rule.id)
    out = [HEADER.rstrip("\n")]
    out += [f"| [`{rule.id}`](#{rule.id}) | {rule.severity} | {_cell(rule.title)} |" for rule in ordered]
    for rule in ordered:
        # the file line names where the text lives in the repository, not this machine's install path
        text = re.sub(r"^file: .*$", f"file: rules/{Path(str(rule.path)).name}", explain_text(rule, rules),
                      count=1, flags=re.MULTILINE)
        fence = _fence(text)
        out += ["", f"## {rule.id}", "", f"{fence}text", text.rstrip("\n"), fence]
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = page()
    if argv == ["--check"]:
        if PAGE.exists() and PAGE.read_text() == text:
            return 0
        print(f"{PAGE}: out of date with rules/*.yaml; run .venv/bin/python docs/rules_reference.py",
              file=sys.stderr)
        return 1
    if argv:
        print("usage: docs/rules_reference.py [--check]", file=sys.stderr)
        return 2
    PAGE.write_text(text)
    print(f"written to {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

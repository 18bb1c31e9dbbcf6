"""Regenerate the bundled captures deterministically with scapy.

Run `python captures/generate.py` from anywhere; every file it writes is
byte-for-byte the same on every run (fixed times, addresses, seeds). The
builders live in `captures/build_*.py`; each module lists its builder
functions in `CAPTURES`, and each builder writes one file into the folder it
is given and returns that file's manifest entry:

    {"file": NAME, "packets": N, "what": "one line",
     "must_yield": [{"rule": RULE, "severity_at_least": SEVERITY}, ...],
     "must_not_yield": [{"rule": RULE or "*", "severity_above": SEVERITY}, ...]}

The entries are collected into captures/MANIFEST.json, which the tests check.
"""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(out_dir: Path = HERE) -> list[dict]:
    sys.path.insert(0, str(HERE))
    manifest = []
    for module_path in sorted(HERE.glob("build_*.py")):
        module = importlib.import_module(module_path.stem)
        for builder in module.CAPTURES:
            manifest.append(builder(out_dir))
    manifest.sort(key=lambda entry: entry["file"])
    (out_dir / "MANIFEST.json").write_text(json.dumps({"captures": manifest}, indent=2) + "\n")
    return manifest


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)

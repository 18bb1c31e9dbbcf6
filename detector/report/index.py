"""The index of `detector analyze --each`: DIR/index.json and DIR/index.html, one line per capture.

Each line: the capture, its packets, its findings and the worst of them (severity, rule, message), a link
to its report, or its error. Capture names and messages come from hostile input (file names, packet text):
every one goes through html.escape, links are relative folder names percent-encoded, and the page loads
nothing (no script, no style sheet, no image).
"""
from __future__ import annotations

import html
import json
from pathlib import Path
from urllib.parse import quote

from ..output import atomic_file

INDEX_VERSION = 1


def index_document(entries: list[dict]) -> dict:
    failed = [e for e in entries if e.get("error")]
    return {"version": INDEX_VERSION, "captures": entries, "failed": len(failed),
            "analysed": len(entries) - len(failed)}


def _cell(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def index_html(entries: list[dict]) -> str:
    rows = []
    for entry in entries:
        name = _cell(entry.get("capture"))
        if entry.get("error"):
            rows.append(f'<tr class="failed"><td>{name}</td><td></td><td></td>'
                        f'<td colspan="2">error: {_cell(entry["error"])}</td></tr>')
            continue
        worst = entry.get("worst") or {}
        link = entry.get("report")
        report = f'<a href="{_cell(quote(link))}">report</a>' if link else ""
        what = f"{_cell(worst.get('rule'))}: {_cell(worst.get('msg'))}" if worst else "no finding"
        failures = entry.get("failures") or []
        if failures:
            what += f" (rule failed: {_cell(', '.join(failures))})"
        rows.append(f"<tr><td>{name}</td><td class=n>{_cell(entry.get('packets'))}</td>"
                    f"<td class=n>{_cell(entry.get('findings'))}</td>"
                    f"<td>{_cell(worst.get('severity', ''))}</td><td>{what} {report}</td></tr>")
    failed = sum(1 for e in entries if e.get("error"))
    summary = f"{len(entries)} captures, {failed} failed" if failed else f"{len(entries)} captures"
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            "<title>detector: captures</title><style>"
            "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}"
            "td.n{text-align:right}tr.failed td{background:#fdd}</style></head><body>\n"
            f"<h1>Captures</h1><p>{summary}</p>\n<table><tr><th>capture</th><th>packets</th><th>findings</th>"
            "<th>worst</th><th>worst finding</th></tr>\n" + "\n".join(rows) + "\n</table></body></html>\n")


def write_index(out_dir, entries: list[dict]) -> Path:
    """Write DIR/index.json and DIR/index.html (each replaced whole); returns index.json's path."""
    out_dir = Path(out_dir)
    with atomic_file(out_dir / "index.json") as handle:
        handle.write((json.dumps(index_document(entries), indent=2) + "\n").encode())
    with atomic_file(out_dir / "index.html") as handle:
        handle.write(index_html(entries).encode())
    return out_dir / "index.json"

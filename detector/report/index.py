"""The index of `detector analyze --each`: DIR/index.json and DIR/index.html, one line per capture.

Each line: the capture, its status (clean; damaged: read up to the damage its warnings name, with their byte
offsets; failed: not read, its error), its packets, its findings and the worst of them (severity, rule,
message) and a link to its report. Capture names and messages come from hostile input (file names, packet text):
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
    failed = sum(1 for e in entries if e.get("status") == "failed")
    damaged = sum(1 for e in entries if e.get("status") == "damaged")
    return {"version": INDEX_VERSION, "captures": entries, "failed": failed, "damaged": damaged,
            "analysed": len(entries) - failed}


def _cell(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _warnings(entry: dict) -> str:
    """The capture's warnings and notes, one line each, before its findings: a damaged capture says so first."""
    lines = [f"warning: {_cell(w['message'])}" for w in entry.get("warnings") or []]
    lines += [f"capture: {_cell(note)}" for note in entry.get("notes") or []]
    return "".join(f"{line}<br>" for line in lines)


def index_html(entries: list[dict]) -> str:
    rows = []
    for entry in entries:
        name = _cell(entry.get("capture"))
        status = entry.get("status", "failed")
        if status == "failed":
            rows.append(f'<tr class="failed"><td>{name}</td><td>failed</td><td></td><td></td><td></td>'
                        f'<td>error: {_cell(entry["error"])}</td></tr>')
            continue
        worst = entry.get("worst") or {}
        link = entry.get("report")
        report = f'<a href="{_cell(quote(link))}">report</a>' if link else ""
        what = f"{_cell(worst.get('rule'))}: {_cell(worst.get('msg'))}" if worst else "no finding"
        failures = entry.get("failures") or []
        if failures:
            what += f" (rule failed: {_cell(', '.join(failures))})"
        rows.append(f'<tr class="{_cell(status)}"><td>{name}</td><td>{_cell(status)}</td>'
                    f"<td class=n>{_cell(entry.get('packets'))}</td><td class=n>{_cell(entry.get('findings'))}</td>"
                    f"<td>{_cell(worst.get('severity', ''))}</td><td>{_warnings(entry)}{what} {report}</td></tr>")
    document = index_document(entries)
    said = [f"{document[key]} {key}" for key in ("failed", "damaged") if document[key]]
    summary = ", ".join([f"{len(entries)} captures", *said])
    return ("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
            "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            "<title>detector: captures</title><style>"
            "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}"
            "td.n{text-align:right}tr.failed td{background:#fdd}tr.damaged td{background:#ffd}</style></head>"
            f"<body>\n<h1>Captures</h1><p>{summary}</p>\n<table><tr><th>capture</th><th>status</th><th>packets</th>"
            "<th>findings</th><th>worst</th><th>worst finding</th></tr>\n" + "\n".join(rows)
            + "\n</table></body></html>\n")


def write_index(out_dir, entries: list[dict]) -> Path:
    """Write DIR/index.json and DIR/index.html (each replaced whole); returns index.json's path."""
    out_dir = Path(out_dir)
    with atomic_file(out_dir / "index.json") as handle:
        handle.write((json.dumps(index_document(entries), indent=2) + "\n").encode())
    with atomic_file(out_dir / "index.html") as handle:
        handle.write(index_html(entries).encode())
    return out_dir / "index.json"

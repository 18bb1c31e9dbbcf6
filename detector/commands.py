"""What the CLI commands do, apart from argument parsing: info, flows, analyze."""
from __future__ import annotations

import os
from pathlib import Path

from . import engine
from .errors import CaptureError, UsageError
from .flows import FlowTable
from .flows.export import write_csv, write_parquet
from .ingest.reader import interface_totals
from .output import OutputDir
from .stats import CaptureStats


def info_one(source) -> tuple[dict, str]:
    """Summarise one capture, a path or an ingest.StreamCapture: (JSON record, human-readable text).

    The record always has the same keys; on an error its `error` is the
    one-line message, `format` and `compression` what was recognised before
    it, and the text is empty (the caller reports the error).
    """
    name = str(source)
    stats = CaptureStats()
    record = {"file": name, "format": None, "compression": None, "packets": 0, "bytes": 0, "wire_bytes": 0,
              "first_seen": None, "last_seen": None, "duration_s": 0.0, "linktypes": {},
              "decoded_ratio": 0.0, "layers": {}, "interface_stats": [], "warnings": [], "error": None}
    try:
        if isinstance(source, (str, os.PathLike)):
            if os.path.isdir(source):
                raise UsageError(f"{name}: is a folder, not a capture file")
            if not os.path.exists(source):
                raise UsageError(f"{name}: no such file")
        result = engine.run([source], [stats], label=os.path.basename(name))
    except (CaptureError, UsageError) as exc:
        record["error"] = str(exc)
        if isinstance(exc, CaptureError):
            record["format"], record["compression"] = exc.format, exc.compression or None
        return record, ""
    summary = stats.to_json()
    capture = result.captures[0]
    record.update({
        "format": capture["format"], "compression": capture["compression"] or None,
        "packets": stats.packets, "bytes": stats.bytes, "wire_bytes": stats.wire_bytes,
        "first_seen": summary["first_seen"], "last_seen": summary["last_seen"],
        "duration_s": summary["duration_s"], "linktypes": summary["linktypes"],
        "decoded_ratio": summary["decoded_ratio"], "layers": summary["layers"],
        "interface_stats": interface_totals(capture["interfaces"], capture["interface_stats"]),
        "warnings": result.warnings,
    })
    fmt = record["format"]
    if record["compression"]:
        fmt += f" ({record['compression']})"
    linktypes = ", ".join(f"{kind} ({count:,})" for kind, count in summary["linktypes"].items())
    layers = ", ".join(f"{layer} {count:,}" for layer, count in summary["layers"].items())
    lines = [
        f"File:          {name}",
        f"Format:        {fmt}",
        f"Link types:    {linktypes or '-'}",
        f"Packets:       {stats.packets:,}",
        f"Bytes:         {stats.bytes:,} captured, {stats.wire_bytes:,} on the wire",
        f"First packet:  {summary['first_seen'] or '-'}",
        f"Last packet:   {summary['last_seen'] or '-'}",
        f"Duration:      {summary['duration_s']:.6f} s",
        f"Decoded:       {summary['decoded_ratio']:.1%} of packets (network layer)",
        f"Layers:        {layers or '-'}",
    ]
    lines += [f"{'Interface ' + str(i['interface']) + ':':<15}{_counters(i)}" for i in record["interface_stats"]]
    lines += [f"Warning:       {w}" for w in result.warnings]
    return record, "\n".join(lines) + "\n"


def _counters(stats: dict) -> str:
    """One interface's statistics block totals in words (pcapng isb_* options; absent ones left out)."""
    name = f"{stats['name']}: " if stats["name"] else ""
    said = [f"{stats[key]:,} {words}" for key, words in (
        ("ifrecv", "received"), ("ifdrop", "dropped by the interface"), ("osdrop", "dropped by the OS"),
        ("filteraccept", "accepted by the filter"), ("usrdeliv", "delivered to the capture")) if stats[key] is not None]
    return name + (", ".join(said) or "statistics without counters")


def write_flows(paths, out: Path):
    """The flow table of `paths` (one capture) to `out`, .csv or .parquet, replaced whole or not at all."""
    table = FlowTable()
    result = engine.run(paths, [table], label="flows")
    if out.suffix.lower() == ".parquet":
        write_parquet(table.to_frame(), out)
    else:
        write_csv(table.text_columns(coded=True), out)
    return result, table.flow_count


def analyze(paths, out_dir, rules_dir=None, report: bool = True, site_file=None):
    """Run every enabled detector over the captures and write DIR/findings.json, findings.jsonl and
    DIR/evidence/ (one pcap per finding), report.md and report.html.

    `rules_dir` holds rule files laid over the defaults (`--rules DIR`), and
    `site_file` is the site file (`--site FILE`, detector.site); a bad file
    is refused before any capture is read, and so is an output folder that
    cannot be used (output.OutputDir). With `report=False` only the
    findings files are written: no second pass for evidence and figures.
    The outputs replace those of an earlier run in the folder only once all
    of them are written. A detector that fails is recorded, not raised
    (detectors.DetectorSet), in the analysis' `failures`. Returns
    (findings, the analysis.Analysis, findings.json path).
    """
    # detectors (and the pandas they use) load only here: `info` and `flows` start faster without them
    from . import analysis
    from .rules import load_rules
    from .site import load_site

    rules = load_rules(rules_dir)
    site = load_site(site_file)
    with OutputDir(out_dir, rule_ids=rules) as out:
        result = analysis.analyze(paths, rules, label="analyze", site=site)
        findings, stats = result.findings, result.stats
        # the evidence pass fills in each finding's evidence_pcap, so it runs before findings.json is written
        from .report import findings_document, write_evidence, write_findings, write_reports

        evidence = None
        if report:
            evidence = write_evidence(paths, findings, out, stats.first_ns, stats.last_ns, result.detectors)
        document = findings_document(result.captures, {**stats.to_json(), "flows": result.flow_count}, findings,
                                     result.failures, result.incidents)
        path = write_findings(out, document, findings, str(paths[0]) if paths else None, result.incidents)
        if report:
            write_reports(out, document, findings, rules, evidence, result.flows, result.incidents)
    return findings, result, path

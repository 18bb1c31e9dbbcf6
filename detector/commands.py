"""What the CLI commands do, apart from argument parsing: info, flows, analyze."""
from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np

from . import engine
from .detect.quality import CaptureQuality, one_direction
from .errors import CaptureError, DetectorError, UsageError, capture_problem
from .flows import FlowTable
from .flows.export import write_csv, write_csv_to, write_parquet
from .ingest.reader import interface_totals
from .output import OutputDir
from .schema import linktype_name
from .stats import CaptureStats
from .units import NS, plural


class InterfacesAndTimeOrder:
    """A consumer of decoded batches (engine.run) for `info`: packets per interface, and every step back in time
    from one record to the next in file order (capinfos' "strict time order"), the first one's frame and the
    largest. Steps of any size count here; detect.quality judges which ones matter."""

    needs_fingerprint = False

    def __init__(self):
        self.packets = np.zeros(0, dtype=np.int64)     # by interface number
        self.last_ns: int | None = None
        self.backwards = 0
        self.first_backwards_frame: int | None = None
        self.largest_step_ns = 0

    def update(self, batch) -> None:
        if not len(batch):
            return
        counts = np.bincount(batch["iface"], minlength=len(self.packets))
        counts[:len(self.packets)] += self.packets
        self.packets = counts
        ts = batch["ts_ns"]
        before = np.concatenate(([ts[0] if self.last_ns is None else self.last_ns], ts[:-1]))
        step = before - ts
        back = np.flatnonzero(step > 0)
        if len(back):
            self.backwards += len(back)
            self.largest_step_ns = max(self.largest_step_ns, int(step[back].max()))
            if self.first_backwards_frame is None:
                self.first_backwards_frame = int(batch["frame"][back[0]])
        self.last_ns = int(ts[-1])

    def time_order(self) -> dict:
        return {"strict": self.backwards == 0, "backwards": self.backwards,
                "first_frame": self.first_backwards_frame, "largest_step_s": round(self.largest_step_ns / NS, 9)}

    def interfaces(self, described: list[dict]) -> list[dict]:
        """capinfos' interface list: each described interface's number, name, link type, snap length, packets."""
        return [{"interface": number, "name": i["name"], "linktype": i["linktype"],
                 "linktype_name": linktype_name(i["linktype"]), "snaplen": i["snaplen"],
                 "packets": int(self.packets[number]) if number < len(self.packets) else 0}
                for number, i in enumerate(described)]


def _printable(text: str, limit: int = 120) -> str:
    """A name a capture carries, safe on a terminal: control characters as escapes, cut to `limit` characters."""
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text[:limit])
    return shown + ("..." if len(text) > limit else "")


def info_one(source) -> tuple[dict, str]:
    """Summarise one capture, a path or an ingest.StreamCapture: (JSON record, human-readable text).

    The record always has the same keys; on an error its `error` is the
    one-line message, `format` and `compression` what was recognised before
    it, and the text is empty (the caller reports the error).
    """
    name = str(source)
    stats, quality, flows, tally = CaptureStats(), CaptureQuality(), FlowTable(), InterfacesAndTimeOrder()
    record = {"file": name, "format": None, "compression": None, "packets": 0, "bytes": 0, "wire_bytes": 0,
              "first_seen": None, "last_seen": None, "duration_s": 0.0, "linktypes": {},
              "decoded_ratio": 0.0, "layers": {}, "interfaces": [], "interface_stats": [], "time_order": None,
              "capture_quality": None, "warnings": [], "error": None}
    try:
        if isinstance(source, (str, os.PathLike)):
            problem = capture_problem(source)
            if problem:
                raise UsageError(f"{name}: {problem}")
        result = engine.run([source], [stats, quality, flows, tally], label=os.path.basename(name))
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
        "interfaces": tally.interfaces(result.interfaces[0]),
        "interface_stats": interface_totals(capture["interfaces"], capture["interface_stats"]),
        "time_order": tally.time_order(),
        "capture_quality": quality.to_json(one_direction(flows.coded_columns())),
        "warnings": result.warnings,
    })
    fmt = record["format"]
    if record["compression"]:
        fmt += f" ({record['compression']})"
    linktypes = ", ".join(f"{kind} ({count:,})" for kind, count in summary["linktypes"].items())
    layers = ", ".join(f"{layer} {count:,}" for layer, count in summary["layers"].items())
    notes = record["capture_quality"]["notes"] if stats.packets else []
    order = record["time_order"]
    if order["strict"]:
        time_order = "strict: no record is stamped earlier than the one before it"
    else:
        time_order = (f"runs backwards {plural(order['backwards'], 'time')}: first at frame {order['first_frame']:,}, "
                      f"by up to {order['largest_step_s']:.6f} s")
    lines = [
        f"File:          {name}",
        f"Format:        {fmt}",
        *[f"Warning:       {w}" for w in result.warnings],
        *([f"Capture:       {note}" for note in notes] or (
            ["Capture:       clean: no duplicate, out-of-order, corrupted or cut frames"] if stats.packets else [])),
        f"Link types:    {linktypes or '-'}",
        f"Packets:       {stats.packets:,}",
        f"Bytes:         {stats.bytes:,} captured, {stats.wire_bytes:,} on the wire",
        f"First packet:  {summary['first_seen'] or '-'}",
        f"Last packet:   {summary['last_seen'] or '-'}",
        f"Duration:      {summary['duration_s']:.6f} s",
        f"Decoded:       {summary['decoded_ratio']:.1%} of packets (network layer)",
        f"Layers:        {layers or '-'}",
    ]
    lines.insert(lines.index(f"Packets:       {stats.packets:,}") + 1, f"Time order:    {time_order}")
    counters = {i["interface"]: _counters(i) for i in record["interface_stats"]}
    for i in record["interfaces"]:
        said = (f"{_printable(i['name']) if i['name'] else '-'}, {i['linktype_name']} (link type {i['linktype']}), "
                f"{'snap length ' + format(i['snaplen'], ',') if i['snaplen'] else 'no snap length'}, "
                f"{plural(i['packets'], 'packet')}")
        if i["interface"] in counters:
            said += f"; interface statistics: {counters[i['interface']]}"
        lines.append(f"{'Interface ' + str(i['interface']) + ':':<15}{said}")
    return record, "\n".join(lines) + "\n"


def _counters(stats: dict) -> str:
    """One interface's statistics block totals in words (pcapng isb_* options; absent ones left out)."""
    said = [f"{stats[key]:,} {words}" for key, words in (
        ("ifrecv", "received"), ("ifdrop", "dropped by the interface"), ("osdrop", "dropped by the OS"),
        ("filteraccept", "accepted by the filter"), ("usrdeliv", "delivered to the capture")) if stats[key] is not None]
    return ", ".join(said) or "no counters"


def write_flows(paths, out: Path | None, client=None, dataset: bool | None = None, partitions_per_file=None):
    """The flow table of `paths` (one capture, its files in the order of their first packet) to `out`: None for
    CSV on standard output (as tshark and zeek-cut write; nothing else goes there), a .csv
    or .parquet file, or a folder (a name ending in /, or an existing folder): a Parquet dataset of one file
    per partition (detector.cluster), each flow in the partition of its first packet. Replaced whole or not at
    all. `client`: a distributed.Client to fold the partitions on, each file cut into `partitions_per_file`
    (cluster.partitions_per_file); None: this process. `dataset`: whether `out` is a dataset folder (None:
    is_dataset says)."""
    from .cluster import flow_table
    from .ordering import FileSpans, capture_order, overlap_warnings
    if dataset is None:
        dataset = out is not None and is_dataset(out)
    if dataset:
        _need_pyarrow()
    if client is not None:
        table, result, parts = flow_table(client, paths, partitions_per_file)
        bounds = [p.first_frame for p in parts]
    else:
        paths = capture_order(paths)
        table, spans = FlowTable(), FileSpans()
        result = engine.run(paths, [table, spans], label="flows")
        result.warnings.extend(overlap_warnings(spans.extents(result.captures)))
        bounds, frame = [], 1
        for capture in result.captures:
            bounds.append(frame)
            frame += int(capture.get("packets") or 0)
    if out is None:
        sys.stdout.flush()
        write_csv_to(table.text_columns(coded=True), sys.stdout.buffer)
        sys.stdout.buffer.flush()
    elif dataset:
        write_dataset(table.to_frame(), bounds, out)
    elif out.suffix.lower() == ".parquet":
        write_parquet(table.to_frame(), out)
    else:
        write_csv(table.text_columns(coded=True), out)
    return result, table.flow_count


def is_dataset(out) -> bool:
    """`flows -o` names a folder: a trailing slash, or a folder that exists."""
    text = os.fspath(out)
    return text.endswith((os.sep, "/")) or os.path.isdir(text)


def _need_pyarrow() -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise UsageError("a Parquet dataset needs pyarrow: pip install 'detector[parquet]'") from None


def write_dataset(frame, bounds: list[int], out) -> None:
    """`frame` (the merged flow table) as a Parquet dataset in folder `out`: part-00000.parquet... one file per
    partition (first global frames `bounds`), each flow in the file of the partition of its first packet, every
    file with the same schema (an empty partition writes an empty file). The files are written into a hidden
    folder beside `out` and swapped in at the end: a failed or interrupted run leaves the old dataset."""
    import numpy as np
    out = os.fspath(out).rstrip("/" + os.sep) or "."
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    staging = os.path.join(parent, f".{os.path.basename(out)}.{os.getpid()}.partial")
    old = os.path.join(parent, f".{os.path.basename(out)}.{os.getpid()}.old")
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    try:
        bounds = bounds or [1]
        owner = np.searchsorted(np.asarray(bounds, dtype=np.int64), frame["first_frame"].to_numpy(), side="right") - 1
        for index in range(len(bounds)):
            rows = frame[owner == index]
            rows.to_parquet(os.path.join(staging, f"part-{index:05d}.parquet"), index=False)
        if os.path.isdir(out):
            _refuse_foreign(out)
            os.rename(out, old)
        elif os.path.exists(out):
            raise UsageError(f"{out}: exists and is not a folder (a Parquet dataset is a folder)")
        os.rename(staging, out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if os.path.isdir(old) and not os.path.exists(out):
            os.rename(old, out)
        raise


def _refuse_foreign(folder: str) -> None:
    """An existing dataset folder is replaced whole: only if it holds nothing but an earlier dataset's parts."""
    foreign = [name for name in os.listdir(folder) if not (name.startswith("part-") and name.endswith(".parquet"))]
    if foreign:
        raise UsageError(f"{folder}: holds files that are not an earlier flow dataset's ({foreign[0]}); "
                         "give an empty or new folder")


def analyze(paths, out_dir, rules_dir=None, report: bool = True, site_file=None, client=None,
            partitions_per_file=None):
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

    Several files are one capture in the order of their first packet (cluster.capture_order). `client`: a
    distributed.Client whose workers fold the partitions (detector.cluster), each file cut into
    `partitions_per_file` (cluster.partitions_per_file); None: this process.
    """
    # detectors (and the pandas they use) load only here: `info` and `flows` start faster without them
    from . import analysis
    from .rules import load_rules
    from .site import load_site

    rules = load_rules(rules_dir)
    site = load_site(site_file)
    if report:
        from .report.prepare import warm_up
        warm_up()
    with OutputDir(out_dir, rule_ids=rules) as out:
        collector = None
        if client is not None:
            from . import cluster
            result, paths, parts = cluster.analyze_partitions(client, paths, rules, site, partitions_per_file)
            collector = cluster.evidence_collector(client, parts)      # the evidence pass on the workers too
        else:
            from .ordering import capture_order
            paths = capture_order(paths)
            result = analysis.analyze(paths, rules, label="analyze", site=site)
        findings, stats = result.findings, result.stats
        # the evidence pass fills in each finding's evidence_pcap, so it runs before findings.json is written
        from .report import findings_document, write_evidence, write_findings, write_reports

        evidence = None
        if report:
            evidence = write_evidence(paths, findings, out, stats.first_ns, stats.last_ns, result.detectors,
                                      collector=collector)
        document = findings_document(result.captures, {**stats.to_json(), "flows": result.flow_count}, findings,
                                     result.failures, result.incidents, result.quality)
        path = write_findings(out, document, findings, str(paths[0]) if paths else None, result.incidents)
        if report:
            # the flow table as numbers where the analysis holds it: the report's figures need no pandas
            numbers = result.context.flow_columns()
            write_reports(out, document, findings, rules, evidence, result.flows if numbers is None else numbers,
                          result.incidents)
    return findings, result, path


# The terminal summary of `analyze` lists at most this many incidents and findings: a screen read at a glance;
# report.md has the rest.
SUMMARY_LINES_MAX = 20


def analyze_summary(findings, incidents, out) -> list[str]:
    """What `analyze` prints on stdout: the incidents, the worst first (severity, then time), then the findings
    of low or above that no incident holds, one line each, at most SUMMARY_LINES_MAX, and how many info findings
    findings.json holds beside them (the reports list those in an appendix). The capture's own faults go to
    stderr before it (cmd_analyze)."""
    from .incidents import worst_first
    lines = [f"{incident.severity:<9} {incident.id:<12} {incident.title}" for incident in worst_first(incidents)]
    lines += [f"{f.severity:<9} {f.rule:<12} {' '.join(f.msg.split())}" for f in findings
              if f.severity != "info" and not f.incident_id]
    if len(lines) > SUMMARY_LINES_MAX:
        more = f"... and {len(lines) - SUMMARY_LINES_MAX + 1:,} more in {os.path.join(os.fspath(out), 'report.md')}"
        lines = [*lines[:SUMMARY_LINES_MAX - 1], more]
    info = sum(1 for f in findings if f.severity == "info")
    if info:
        noun = "info finding" if info == 1 else "info findings"
        lines.append(f"{info:,} {noun} (a description of the network, no incident) in "
                     f"{os.path.join(os.fspath(out), 'findings.json')}")
    return lines


# ---- analyze --each -------------------------------------------------------------------------------------------
def each_name(path, taken: set[str]) -> str:
    """The folder of one capture under analyze --each's DIR: its file name up to the first dot (as `make demo`
    names them), made unique with -2, -3... when two captures share it."""
    base = os.path.basename(os.fspath(path)).split(".")[0] or "capture"
    name, n = base, 1
    while name in taken or name in ("index.json", "index.html"):
        n += 1
        name = f"{base}-{n}"
    taken.add(name)
    return name


def analyze_one(path, out_dir, rules_dir=None, report: bool = True, site_file=None) -> dict:
    """One capture of analyze --each, analysed alone into `out_dir` (in this process or on a cluster worker):
    its line of the index. A capture that cannot be read gives its error, never an exception."""
    from .cluster import unopenable
    entry = {"capture": os.fspath(path), "status": "failed", "report": None, "packets": None, "findings": None,
             "worst": None, "failures": [], "warnings": [], "notes": [], "error": None}
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        entry["error"] = unopenable(path, exc)
        return entry
    try:
        findings, result, _ = analyze([path], out_dir, rules_dir=rules_dir, report=report, site_file=site_file)
    except DetectorError as exc:
        entry["error"] = str(exc)
        return entry
    except OSError as exc:
        where = exc.filename or path
        entry["error"] = f"{where}: {exc.strerror or exc}"
        return entry
    warnings = [each_warning(path, warning) for warning in result.warnings]
    entry.update(status="damaged" if warnings else "clean", packets=result.stats.packets, findings=len(findings),
                 failures=[failure.rule_id for failure in result.failures], warnings=warnings,
                 notes=list((result.quality or {}).get("notes", [])))
    if findings:
        worst = max(findings, key=lambda f: f.rank)     # the first of the worst severity, in canonical order
        entry["worst"] = {"severity": worst.severity, "rule": worst.rule, "msg": worst.msg}
    return entry


def each_warning(path, text: str) -> dict:
    """One warning of a capture as analyze --each's index holds it: the line as said (naming the file) and the
    byte offset of the damage it names, None when it names none (ingest's "PATH at byte N: reason")."""
    said = re.match(re.escape(os.fspath(path)) + r" at byte (\d+): ", text)
    return {"message": text, "byte": int(said.group(1)) if said else None}


def analyze_each(paths, out_dir, rules_dir=None, report: bool = True, site_file=None, client=None) -> list[dict]:
    """analyze --each: every capture its own analysis in DIR/<name>/ (on the cluster's workers when `client` is
    given, one task per capture), then DIR/index.json and DIR/index.html listing them all. Returns the entries."""
    from .cluster import each_entries
    from .report.index import write_index
    from .rules import load_rules
    from .site import load_site
    load_rules(rules_dir)       # a bad rules folder or site file: one error before any capture is read
    load_site(site_file)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    taken: set[str] = set()
    jobs = [(path, each_name(path, taken)) for path in paths]
    if client is not None:
        entries = each_entries(client, analyze_one, [(os.fspath(p), str(out_dir / name)) for p, name in jobs],
                               rules_dir, report, site_file)
    else:
        entries = [analyze_one(path, out_dir / name, rules_dir, report, site_file) for path, name in jobs]
    for entry, (_, name) in zip(entries, jobs):
        entry["folder"] = name
        if entry["error"] is None:
            entry["report"] = f"{name}/report.html" if report else f"{name}/findings.json"
    write_index(out_dir, entries)
    return entries

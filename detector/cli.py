"""The `detector` command line: info, flows, analyze, watch, rules, explain, site-template.

Exit codes:
  0  success
  2  bad input or usage, or an output that cannot be written (one line on
     stderr naming the file, no traceback; nothing half-written is left)
  3  `analyze --fail-on SEVERITY` given and a finding reaches it
  4  a rule failed: a bug in detector. Its detector raised, so its findings
     may be missing; the other rules ran to the end, and findings.json,
     findings.jsonl and the reports were written with the failure recorded
     under "failures". One line on stderr per failed rule. Wins over 3: a
     gate that passed may have missed what the failed rule would have found.
     `watch` ends with it too when a rule failed while it ran.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from .errors import (
    EXIT_BAD_INPUT,
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_RULE_FAILED,
    DetectorError,
    UsageError,
    capture_problem,
)
from .units import plural

SITE_HELP = ("site file (YAML): local_networks, routers, dhcp_servers, bindings (IP-MAC registry: entries, "
             "ethers, dhcpd host blocks, CSV), dynamic_pools; `detector site-template` prints an example, "
             "`detector explain RULE` what the rule reads of it")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="detector",
        description="Network incident forensics on packet captures: flows, findings, evidence.")
    parser.add_argument("--version", action=_Version, help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    info = sub.add_parser("info", help="summarise captures (like capinfos)")
    info.add_argument("captures", nargs="+", metavar="CAPTURE")
    info.add_argument("--json", action="store_true", help="one JSON object per line and file")

    flows = sub.add_parser("flows", help="write the flow table of one continuous capture")
    flows.add_argument("captures", nargs="+", metavar="CAPTURE",
                       help="several files are read as one capture (e.g. a ring buffer)")
    flows.add_argument("-o", "--output", default=STDOUT, metavar="OUT",
                       help="output file: .csv or .parquet; or a folder (ending in /): a Parquet dataset, "
                            "one file per partition; - (the default): CSV on standard output")
    _cluster_flags(flows)

    analyze = sub.add_parser("analyze", help="run the detectors and write findings")
    analyze.add_argument("captures", nargs="+", metavar="CAPTURE")
    analyze.add_argument("-o", "--output", required=True, metavar="DIR",
                         help="output folder; it then holds this run's outputs only (an earlier run's "
                              "findings, reports and evidence are replaced, nothing else is touched)")
    analyze.add_argument("--no-report", action="store_true",
                         help="write findings.json and findings.jsonl only: no evidence pcaps, "
                              "no report.md/report.html (skips the second pass over the captures)")
    analyze.add_argument("--fail-on", metavar="SEVERITY",
                         help="exit 3 when a finding reaches this severity "
                              "(info, low, medium, high, critical)")
    analyze.add_argument("--rules", metavar="DIR",
                         help="folder of rule files laid over the default rules (same id replaces)")
    analyze.add_argument("--site", metavar="FILE", help=SITE_HELP)
    analyze.add_argument("--each", action="store_true",
                         help="unrelated captures: one analysis each, into DIR/<capture name>/, and "
                              "DIR/index.json and DIR/index.html listing them (without it several "
                              "captures are one, in the order of their first packet)")
    _cluster_flags(analyze)

    watch = sub.add_parser("watch", help="monitor an interface (a mirror port) live: alerts, evidence, metrics")
    watch.add_argument("iface", metavar="IFACE", help="interface to capture on")
    watch.add_argument("-o", "--output", required=True, metavar="DIR",
                       help="output folder: alerts.jsonl and evidence/ while running; findings.json and "
                            "the reports of the watched period on exit")
    watch.add_argument("--bpf", metavar="FILTER", help="capture filter (libpcap syntax), applied in the kernel")
    watch.add_argument("--rules", metavar="DIR",
                       help="folder of rule files laid over the default rules (same id replaces)")
    watch.add_argument("--site", metavar="FILE", help=SITE_HELP)
    watch.add_argument("--metrics", metavar="HOST:PORT",
                       help="serve Prometheus metrics at http://HOST:PORT/metrics (port 0: any free port)")
    watch.add_argument("--ring-seconds", type=float, default=30.0, metavar="N",
                       help="seconds of packets kept in memory for the evidence of an alert (default 30)")
    watch.add_argument("--alert-severity", default="low", metavar="SEVERITY",
                       help="least severity a finding needs to raise an alert (default low: info findings "
                            "are reported in findings.json only)")

    rules = sub.add_parser("rules", help="list the detection rules")
    rules.add_argument("--rules", metavar="DIR", help="folder of rule files laid over the default rules")

    explain = sub.add_parser("explain", help="print one rule's documentation and parameters")
    explain.add_argument("rule", metavar="RULE")
    explain.add_argument("--rules", metavar="DIR", help="folder of rule files laid over the default rules")

    sub.add_parser("site-template", help="print a commented example site file (for --site)")
    return parser


class _Version(argparse.Action):
    """`--version`: `detector X.Y.Z` from the installed package's metadata (what pip installed, not a copy)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version
        try:
            said = version("detector")
        except PackageNotFoundError:
            parser.exit(EXIT_BAD_INPUT, "detector: error: the package is not installed, so it has no version "
                                        "(pip install -e . in the source tree)\n")
        print(f"detector {said}")
        parser.exit(EXIT_OK)


def severity(flag: str, value: str) -> str:
    """A severity the command line was given, in any case (`--fail-on HIGH`), as findings spell it."""
    from .findings import SEVERITY_RANK
    said = value.strip().lower()
    if said not in SEVERITY_RANK:
        raise UsageError(f"{flag}: unknown severity '{value}' (one of {', '.join(SEVERITY_RANK)}, in any case)")
    return said


def _cluster_flags(command) -> None:
    command.add_argument("--workers", metavar="N",
                         help="run on an embedded Dask cluster of N worker processes (auto: one per core); "
                              "needs detector[dask]")
    command.add_argument("--scheduler", metavar="ADDRESS",
                         help="run on an existing Dask cluster (tcp://HOST:8786, or $DETECTOR_SCHEDULER); "
                              "every worker must see the captures at the same path")
    command.add_argument("--partitions-per-file", metavar="N",
                         help="on a cluster, cut each uncompressed capture file into N partitions at record "
                              "boundaries (or $DETECTOR_PARTITIONS_PER_FILE; default auto: from the files' sizes "
                              "and the workers)")


@contextlib.contextmanager
def _client(args, paths):
    """A distributed.Client for --workers/--scheduler (detector.cluster), or None for this process."""
    from .cluster import connect, partitions_per_file, wanted
    workers, scheduler = wanted(args.workers, args.scheduler)
    partitions_per_file(getattr(args, "partitions_per_file", None))     # a bad number: said before any work
    if workers is None and scheduler is None:
        yield None
        return
    if any(path == STDIN for path in paths):
        raise UsageError("-: standard input cannot be sent to a cluster's workers (drop --workers/--scheduler)")
    for path in paths:
        if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
            raise UsageError(f"{path}: not a regular file (a pipe?); a cluster's workers read capture files "
                             "(drop --workers/--scheduler)")
    with connect(workers, scheduler) as client:
        yield client


def _start_embedded(args) -> None:
    """Start the fork server of the embedded cluster the command line asks for (--workers auto or N >= 1, no
    --scheduler, Dask installed; else cluster.wanted says what is wrong later), before anything heavy is
    imported: its own imports, in front of the first worker, then run beside this process's (detector.forkserver).
    On a first run, with no compiled kernels yet, it compiles them too, as _prepare_kernels does."""
    from importlib.util import find_spec
    workers = args.workers
    if workers is None or args.scheduler is not None:
        return
    if workers != "auto" and not (workers.isdigit() and int(workers) >= 1):
        return
    if find_spec("distributed") is not None:
        from .forkserver import start
        start()


# A capture named `-` is read from standard input; `flows -o -` writes to standard output.
STDIN = STDOUT = "-"


def _stdin(keep: bool):
    """Standard input as a capture; `keep`: copied as it is read, for a second pass."""
    from .ingest import StreamCapture
    if sys.stdin is None:
        raise UsageError("-: there is no standard input to read a capture from")
    if sys.stdin.isatty():
        raise UsageError("-: standard input is a terminal; pipe a capture into it "
                         "(e.g. tcpdump -w - | detector ...)")
    # the descriptor itself, unbuffered: each read returns what the pipe holds instead of waiting for more
    return StreamCapture(open(sys.stdin.fileno(), "rb", buffering=0, closefd=False), keep=keep)


def _stdin_at_most_once(paths) -> None:
    if list(paths).count(STDIN) > 1:
        raise UsageError("-: standard input can be named only once")


def _inputs(paths, keep: bool = False) -> list:
    """The captures of the command line, checked; `-` is standard input, at most once.

    `keep`: the command reads its captures twice (analyze's report pass), so
    standard input and any other stream that cannot be read again (a FIFO,
    bash's <(...)) are copied as they are read (ingest.StreamCapture).
    """
    _stdin_at_most_once(paths)
    captures = []
    for path in paths:
        if path == STDIN:
            captures.append(_stdin(keep))
            continue
        problem = capture_problem(path)
        if problem:
            raise UsageError(f"{path}: {problem}")
        if keep and not os.path.isfile(path):
            from .ingest import StreamCapture
            try:
                stream = open(path, "rb", buffering=0)
            except OSError as exc:
                raise UsageError(f"{path}: {exc.strerror or exc}") from None
            captures.append(StreamCapture(stream, name=path, keep=True))
            continue
        captures.append(path)
    return captures


def _prepare_kernels() -> None:
    from .warmup import prepare_kernels  # numba: not for `rules`, `explain` or --help
    prepare_kernels(sys.stderr)


def cmd_info(args) -> int:
    from .commands import info_one
    _stdin_at_most_once(args.captures)
    _prepare_kernels()
    status = EXIT_OK
    for path in args.captures:
        record, text = info_one(_stdin(keep=False) if path == STDIN else path)
        if record["error"]:
            status = EXIT_BAD_INPUT
            print(f"detector: error: {record['error']}", file=sys.stderr, flush=True)
        if args.json:
            print(json.dumps(record), flush=True)
        elif text:
            print(text, flush=True)
    return status


def cmd_flows(args) -> int:
    _start_embedded(args)
    from .commands import is_dataset, write_flows
    captures = _inputs(args.captures)
    out = None if args.output == STDOUT else Path(args.output)
    dataset = out is not None and is_dataset(args.output)
    if out is not None and not dataset and out.suffix.lower() not in (".csv", ".parquet"):
        raise UsageError(f"{out}: output must end in .csv or .parquet, or be a folder (ending in /)")
    _prepare_kernels()
    with _client(args, args.captures) as client:
        result, count = write_flows(captures, out, client=client, dataset=dataset,
                                    partitions_per_file=args.partitions_per_file)
    for warning in result.warnings:
        print(f"detector: warning: {warning}", file=sys.stderr)
    print(f"{plural(count, 'flow')} written to {out or 'standard output'}", file=sys.stderr)
    return EXIT_OK


def cmd_analyze(args) -> int:
    if args.fail_on is not None:
        args.fail_on = severity("--fail-on", args.fail_on)
    _start_embedded(args)
    from .commands import analyze, analyze_summary
    from .findings import SEVERITY_RANK
    if args.each:       # a capture that is missing or broken is listed as failed, the others go on
        _prepare_kernels()
        return _analyze_each(args)
    captures = _inputs(args.captures, keep=not args.no_report)
    _prepare_kernels()
    with _client(args, args.captures) as client:
        findings, result, out = analyze(captures, args.output, rules_dir=args.rules, report=not args.no_report,
                                        site_file=args.site, client=client,
                                        partitions_per_file=args.partitions_per_file)
    for warning in result.warnings:
        print(f"detector: warning: {warning}", file=sys.stderr)
    for note in (result.quality or {}).get("notes", []):
        print(f"detector: capture: {note}", file=sys.stderr)
    for line in analyze_summary(findings, result.incidents, out.parent):
        print(line)
    noun = "finding" if len(findings) == 1 else "findings"
    print(f"{len(findings)} {noun} written to {out}", file=sys.stderr)
    for failure in result.failures:
        print(f"detector: error: {failure.bug_line(out)}", file=sys.stderr)
    if result.failures:
        return EXIT_RULE_FAILED
    if args.fail_on is not None and any(f.rank >= SEVERITY_RANK[args.fail_on] for f in findings):
        return EXIT_FINDINGS
    return EXIT_OK


def _analyze_each(args) -> int:
    """analyze --each: exit 2 when a capture failed, else 4 when a rule failed, else 3 for --fail-on."""
    from .commands import analyze_each
    from .findings import SEVERITY_RANK
    if STDIN in args.captures:
        raise UsageError("-: --each analyses capture files; standard input has no name to file it under")
    with _client(args, args.captures) as client:
        entries = analyze_each(args.captures, args.output, rules_dir=args.rules, report=not args.no_report,
                               site_file=args.site, client=client)
    status = EXIT_OK
    for entry in entries:       # each warning and note names its capture: the lines of many runs interleave
        if entry["error"]:
            print(f"detector: error: {entry['error']}", file=sys.stderr)
        for warning in entry["warnings"]:
            print(f"detector: warning: {warning['message']}", file=sys.stderr)
        for note in entry["notes"]:
            print(f"detector: capture: {entry['capture']}: {note}", file=sys.stderr)
        worst = entry["worst"]
        said = "" if entry["error"] else (f"{worst['severity']:<9} {worst['rule']}" if worst else "no finding")
        print(f"{entry['capture']}: {entry['status']:<7} {said}".rstrip())
    failed = sum(1 for entry in entries if entry["error"])
    damaged = sum(1 for entry in entries if entry["status"] == "damaged")
    print(f"{len(entries) - failed:,} of {plural(len(entries), 'capture')} analysed into {args.output} (index.html)"
          + (f", {damaged} damaged (the warnings above)" if damaged else ""), file=sys.stderr)
    if failed:
        return EXIT_BAD_INPUT
    if any(entry["failures"] for entry in entries):
        return EXIT_RULE_FAILED
    if args.fail_on is not None and any(entry["worst"] and SEVERITY_RANK[entry["worst"]["severity"]] >=
                                        SEVERITY_RANK[args.fail_on] for entry in entries):
        return EXIT_FINDINGS
    return status


def cmd_watch(args) -> int:
    from .live import WatchOptions, watch
    args.alert_severity = severity("--alert-severity", args.alert_severity)
    return watch(WatchOptions(iface=args.iface, out_dir=args.output, bpf=args.bpf, rules_dir=args.rules,
                              site=args.site, metrics=args.metrics, ring_seconds=args.ring_seconds,
                              min_severity=args.alert_severity))


def cmd_rules(args) -> int:
    from .rules import load_rules, rules_table
    print(rules_table(load_rules(args.rules)), end="")
    return EXIT_OK


def cmd_explain(args) -> int:
    from .rules import explain_text, load_rules
    rules = load_rules(args.rules)
    if args.rule not in rules:
        raise UsageError(f"unknown rule '{args.rule}' (known: {', '.join(sorted(rules))})")
    print(explain_text(rules[args.rule], rules), end="")
    return EXIT_OK


def cmd_site_template(args) -> int:
    from .site import SITE_TEMPLATE
    print(SITE_TEMPLATE, end="")
    return EXIT_OK


COMMANDS = {"info": cmd_info, "flows": cmd_flows, "analyze": cmd_analyze, "watch": cmd_watch, "rules": cmd_rules,
            "explain": cmd_explain, "site-template": cmd_site_template}


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except DetectorError as exc:
        print(f"detector: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        # the reader of our stdout went away (e.g. `| head`): not an error of ours
        sys.stderr.close()
        return EXIT_OK
    except OSError as exc:
        # an output we cannot write (missing folder, no permission, disk full)
        where = exc.filename if exc.filename else "output"
        print(f"detector: error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("detector: interrupted", file=sys.stderr)
        return 130


def console() -> None:
    """The `detector` program: run main(), flush the standard streams, and leave at once.

    Python's orderly shutdown tears down every imported module one by one;
    with numba, llvmlite and pandas loaded that takes 0.2-0.3 s, as long as
    reading a million packets. By the time main() returns every output file
    is written and closed (they are all written inside `with` blocks or by
    rename), so only the standard streams still hold buffered text.
    """
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe or stream: nothing more can reach it
            pass
    os._exit(code)


if __name__ == "__main__":
    console()

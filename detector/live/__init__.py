"""Live mirror-port monitoring: `detector watch IFACE -o DIR`.

The same pipeline as `detector analyze`, fed by a capture instead of a file:

    dumpcap -w - (or an AF_PACKET socket)  ->  CaptureReader  ->  decode  ->  batches
        -> sliding window of detector states (window)  ->  findings every 0.5 s
        -> alert book: de-duplicated alert/update/resolved/merged events (alerts)  ->  stdout, DIR/alerts.jsonl
        -> packet ring of the last N seconds (ring, segments)  ->  DIR/evidence/<alert>.pcap (evidence)
        -> Prometheus text at --metrics (metrics)
    SIGINT/SIGTERM  ->  DIR/findings.json, findings.jsonl, report.md, report.html (period)

Modules: `dumpcap` and `packet_socket` are the two captures (one interface
each, the same duck type: preflight, start, attach_stats, poll_drops, stop,
wait, failure), `netdev` the kernel's view of the interface, `watch` the
loop that ties everything together. Each module's docstring gives its
choices and their reasons.
"""
from __future__ import annotations

from .watch import WatchOptions, watch

__all__ = ["WatchOptions", "watch"]

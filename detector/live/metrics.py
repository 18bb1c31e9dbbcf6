"""Prometheus metrics of a watch, served as text at http://HOST:PORT/metrics (prometheus_client).

    detector_packets_total                    packets read from the capture
    detector_bytes_total                      their captured bytes
    detector_capture_drops_total              packets the kernel dropped before the capture read them
                                              (the capture socket's PACKET_STATISTICS; see dumpcap.py)
    detector_interface_rx_dropped             the interface's own receive drops (sysfs), NIC and driver
    detector_capture_up                       1 while a capture runs, 0 between a failure and its restart
    detector_interface_up                     1 while the interface is up (sysfs operstate)
    detector_capture_restarts_total           captures restarted after a failure
    detector_capture_lag_seconds              wall clock minus the newest packet's time at the last batch
    detector_<counter>_total                  what a rule counts in every batch, per label value
                                              (detect.detector.LiveCounter; the RSS rule counts packets per
                                              receive queue of its NIC model: detector_rss_queue_packets)
    detector_<counter>_per_second             the same over the last second
    detector_open_findings                    entities with an open alert, per rule
    detector_alert_events_total               alert, update and resolved events, per rule
    detector_rule_failures_total              rules whose detector failed (a bug; the rule stops), per rule
                                              and stage (update, merge, findings)
    detector_evaluation_seconds               how long the last findings evaluation of the window took
    detector_ring_bytes                       memory held by the packet ring

The registry is this watch's own (not the process-global default), so
nothing else in the process leaks into the page.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from ..errors import UsageError


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 in brackets: [::1]:9100) -> (host, port); UsageError naming the option otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--metrics {text!r}: expected HOST:PORT (e.g. 127.0.0.1:9100 or [::1]:9100)")
    return host.strip("[]"), int(port)


class Metrics:
    def __init__(self, counters, rules):
        """`counters`: the rules' LiveCounters; `rules`: the rule ids, each with its open findings."""
        self.registry = registry = CollectorRegistry()
        self.packets = Counter("detector_packets", "Packets read from the capture", registry=registry)
        self.bytes = Counter("detector_bytes", "Captured bytes of the packets read", registry=registry)
        self.drops = Counter("detector_capture_drops", "Packets the kernel dropped before the capture read them",
                             registry=registry)
        self.rx_dropped = Gauge("detector_interface_rx_dropped",
                                "Receive drops of the interface's driver (sysfs rx_dropped)", registry=registry)
        self.up = Gauge("detector_capture_up", "1 while the capture runs", registry=registry)
        self.iface_up = Gauge("detector_interface_up", "1 while the interface is up (sysfs operstate)",
                              registry=registry)
        self.restarts = Counter("detector_capture_restarts", "Captures restarted after a failure", registry=registry)
        self.lag = Gauge("detector_capture_lag_seconds", "Wall clock minus the newest packet time at the last batch",
                         registry=registry)
        # counter name -> (its total, its rate per second), each with one child per label value
        self.counted: dict[str, tuple[Counter, Gauge]] = {}
        for counter in counters:
            total = Counter(f"detector_{counter.name}", counter.help, [counter.label], registry=registry)
            rate = Gauge(f"detector_{counter.name}_per_second", f"{counter.help}, per second", [counter.label],
                         registry=registry)
            for value in range(counter.values):
                total.labels(str(value))
                rate.labels(str(value)).set(0)
            self.counted[counter.name] = (total, rate)
        self.open_findings = Gauge("detector_open_findings", "Entities with an open alert", ["rule"],
                                   registry=registry)
        self.events = Counter("detector_alert_events", "Alert events written", ["rule", "event_type"],
                              registry=registry)
        self.rule_failures = Counter("detector_rule_failures", "Rules whose detector failed (a bug in detector; "
                                     "the rule stopped)", ["rule", "stage"], registry=registry)
        self.evaluation = Gauge("detector_evaluation_seconds", "Time the last findings evaluation of the window took",
                                registry=registry)
        self.ring_bytes = Gauge("detector_ring_bytes", "Memory held by the packet ring", registry=registry)
        for rule in rules:
            self.open_findings.labels(rule=rule).set(0)
        self._server = None
        self._drops_told = 0

    def serve(self, address: str) -> str:
        """Start the HTTP endpoint; returns its URL (the real port when 0 was asked for)."""
        host, port = parse_address(address)
        try:
            self._server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise UsageError(f"--metrics {address}: {exc.strerror or exc}") from None
        bound_host, bound_port = self._server.server_address[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        return f"http://{shown}:{bound_port}/metrics"

    def set_drops(self, total: int) -> None:
        """The capture's cumulative drops (counters only grow: the difference is added)."""
        if total > self._drops_told:
            self.drops.inc(total - self._drops_told)
            self._drops_told = total

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

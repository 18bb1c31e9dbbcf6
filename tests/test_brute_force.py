"""brute-force on a password guesser and on the short sessions that are none (page loads, a poller, a mail relay)."""
from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
import yaml

from detector.analysis import analyze
from detector.rules import load_rules
from detector.site import Site
from tests.test_scan import ANALYSIS_KEYS

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
RULE = "brute-force"


def rules(tmp_path=None, **params):
    if params:
        (tmp_path / "brute-force.yaml").write_text(yaml.safe_dump({"id": RULE, "params": params}))
    return {k: v for k, v in load_rules(tmp_path if params else None).items() if k == RULE}


def guessers(path, rule_set=None, site=None) -> dict:
    found = analyze([path], rule_set or rules(), label="test", site=site).findings
    return {f.identifier: f for f in found if f.rule == RULE}


def test_hydra_against_ftp_is_a_low_brute_force_from_outside():
    # 704 logins refused in 44 s, 16 at a time: nothing before issue 27
    (f,) = guessers(CAPTURES / "brute-force-ftp.pcap").values()
    assert (f.identifier, f.severity) == ("198.51.100.23 -> 10.40.2.21:21", "low")
    assert (f.src_ip, f.dest_ip, f.dest_port, f.proto, f.n) == ("198.51.100.23", "10.40.2.21", 21, "tcp", 704)
    ev = f.evidence
    assert (ev["sessions"], ev["busiest_60s_sessions"], ev["server_payload_bytes_median"]) == (704, 704, 76)
    assert ev["same_exchange_ratio"] == 1.0 and ev["most_at_once"] == 14 and ev["closed_by"] == {"reset": 0,
                                                                                                "fin": 704}
    assert ev["sessions_per_second"] == 16.0 and len(ev["evidence_frames"]) == 64
    assert ("opened 704 short sessions to 21/tcp of 10.40.2.21 in 43.9 s (16.0/s, 704 within 60 s), 100% of them "
            "the same exchange") in f.msg


def test_the_same_guesser_from_a_local_host_is_medium():
    site = Site(path="site.yaml", local_networks=(ipaddress.ip_network("198.51.100.0/24"),))
    (f,) = guessers(CAPTURES / "brute-force-ftp.pcap", site=site).values()
    assert f.severity == "medium" and f.evidence["local_by"] == "local: site local_networks"


def test_page_loads_a_poller_and_a_mail_relay_are_no_guessing():
    # 180 connections a minute of objects of every size; 60 a minute to /health; 100 a minute of mails of
    # every length, each below one of the three tests
    assert guessers(CAPTURES / "brute-force-near-misses.pcap") == {}


def test_a_lower_rate_reports_the_poller(tmp_path):
    # the trade-off of min_sessions: a poller's identical sessions once a second are the shape of a slow guesser
    (f,) = guessers(CAPTURES / "brute-force-near-misses.pcap", rules(tmp_path, min_sessions=60)).values()
    assert f.identifier == "10.40.5.11 -> 10.40.5.81:8080" and f.severity == "medium"


@pytest.mark.parametrize("params", [{"min_sessions": 705}, {"allowlist": ["198.51.100.0/24"]}])
def test_more_sessions_than_the_run_or_an_allowed_client_are_quiet(tmp_path, params):
    assert guessers(CAPTURES / "brute-force-ftp.pcap", rules(tmp_path, **params)) == {}


def test_the_flow_tables_numbers_and_its_dataframe_view_give_the_same_finding():
    from detector.detect.detector import AnalysisContext
    from detector.detectors import active_detectors

    result = analyze([CAPTURES / "brute-force-ftp.pcap"], rules(), label="view")
    from_view = AnalysisContext(flows=result.flows, stats=result.stats)
    (again,) = (f for d in active_detectors(rules()) for f in d.findings(from_view))
    (once,) = result.findings
    assert {k: v for k, v in again.to_json().items() if k not in ANALYSIS_KEYS} == \
        {k: v for k, v in once.to_json().items() if k not in ANALYSIS_KEYS}

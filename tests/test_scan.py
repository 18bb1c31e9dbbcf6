"""scan on real scans (their severity decided by who scans whom), the bundled sweeps and near-misses, crafted flows."""
from __future__ import annotations

import ipaddress
from pathlib import Path

import numpy as np
import pytest
import yaml
from scapy.all import IP, TCP, UDP, Ether, IPv6, wrpcap

from detector.analysis import analyze
from detector.detectors.scan import busiest_window
from detector.rules import load_rules
from detector.site import Site

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
FAVILLI = "lucaderi-sgr/2022/Favilli/tests"
T0 = 1_767_225_600
RULE = "scan"


def rules(tmp_path=None, **params):
    """The scan rule alone, with `params` changed through a rule file as a user would."""
    if params:
        (tmp_path / "scan.yaml").write_text(yaml.safe_dump({"id": RULE, "params": params}))
    return {k: v for k, v in load_rules(tmp_path if params else None).items() if k == RULE}


def scans(path, site=None, rule_set=None) -> dict:
    """scan's findings by scanner."""
    found = analyze([path], rule_set or rules(), label="test", site=site).findings
    return {f.identifier: f for f in found if f.rule == RULE}


def local(*cidrs) -> Site:
    return Site(path="site.yaml", local_networks=tuple(ipaddress.ip_network(c) for c in cidrs))


def capture(tmp_path, timed, name="scan.pcap") -> Path:
    packets = []
    for t, pkt in sorted(timed, key=lambda item: item[0]):
        pkt.time = T0 + t
        packets.append(pkt)
    wrpcap(str(tmp_path / name), packets)
    return tmp_path / name


def syn(src, dst, dport, sport=40000):
    return Ether() / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, flags="S")


# ---- the real scans named by the spec --------------------------------------------------------------

def test_chris_sanders_port_scan_is_a_local_vertical_scan(captures_real):
    (f,) = scans(captures_real / "chrissanders-packets/ppa1e/portscan.pcap").values()
    assert f.identifier == "10.100.25.14" and f.severity == "medium" and f.dest_ip == "10.100.18.12"
    assert f.evidence["kind"] == "vertical" and f.evidence["ports"] == 29 and f.evidence["hosts"] == 1
    assert f.evidence["probes"] == {"TCP SYN": 29} and len(f.evidence["evidence_frames"]) == 29
    assert "29 unique ports of host 10.100.18.12" in f.msg


def test_the_same_port_scan_from_outside_the_sites_networks_is_low(captures_real):
    (f,) = scans(captures_real / "chrissanders-packets/ppa1e/portscan.pcap", site=local("10.100.18.0/24")).values()
    assert f.severity == "low" and not f.evidence["local"] and "site's local_networks" in f.evidence["local_by"]


@pytest.mark.parametrize("name,hosts", [("hs-icmpScan.pcap", 256), ("hs-icmpScan.pcapng", 254)])
def test_favillis_icmp_sweeps_are_local_and_medium(captures_real, name, hosts):
    (f,) = scans(captures_real / FAVILLI / name).values()
    assert (f.identifier, f.severity, f.evidence["kind"]) == ("10.0.0.128", "medium", "ICMP sweep")
    assert f.evidence["hosts"] == hosts and f.evidence["crossed"] == ["targets"]
    assert len(f.evidence["evidence_frames"]) == 64


def test_favillis_ack_sweep_counts_unanswered_acks(captures_real):
    (f,) = scans(captures_real / FAVILLI / "hs-tcp_ackPingSweepRand.pcapng").values()
    assert (f.identifier, f.severity, f.evidence["kind"]) == ("10.0.0.128", "medium", "ACK sweep")
    assert f.evidence["probes"] == {"TCP ACK": 256}


def test_favillis_udp_scan_is_a_remote_knock_on_one_port(captures_real):
    (f,) = scans(captures_real / FAVILLI / "hs-udpScan.pcap").values()
    assert (f.identifier, f.severity, f.dest_port) == ("246.237.45.150", "low", 40125)
    assert f.evidence["hosts"] == 96 and set(f.evidence["crossed"]) == {"targets", "knock"}


def test_favillis_udp_scan_from_a_local_source_stays_below_250_targets(captures_real):
    # local sources have no knock-knock and need 250 targets: 96 hosts are not enough
    assert scans(captures_real / FAVILLI / "hs-udpScan.pcap", site=local("246.237.0.0/16")) == {}


def test_favillis_ip_protocol_scan_holds_only_the_victims_answers(captures_real):
    # 252 ICMP protocol-unreachable messages from the scanned host: the probes themselves are not in the file
    assert scans(captures_real / FAVILLI / "hs-sh-IPscan.pcapng") == {}


# ---- the bundled captures ------------------------------------------------------------------------------

def test_an_infected_host_sweeping_a_16_on_one_port():
    found = scans(CAPTURES / "scan-local-sweep.pcap")
    f = found.pop("10.30.0.66")
    assert not found and f.severity == "medium" and f.dest_port == 445
    assert f.evidence["kind"] == "horizontal" and f.evidence["hosts"] == 5970      # 30 of 6,000 were open
    assert f.evidence["failed_ratio"] == pytest.approx(5970 / 6000, abs=1e-3)
    assert "5,970 unique hosts on 445/tcp" in f.msg


def test_a_remote_port_scan_is_low():
    (f,) = scans(CAPTURES / "scan-port-scan.pcap").values()
    assert (f.identifier, f.severity, f.dest_ip, f.evidence["kind"]) == ("203.0.113.50", "low", "10.30.0.10",
                                                                           "vertical")
    assert f.evidence["ports"] == 997


def test_a_resolver_and_a_nat_gateway_are_busy_clients_and_backscatter_is_nothing():
    found = scans(CAPTURES / "scan-near-misses.pcap")
    assert set(found) == {"198.51.100.53", "198.51.100.1"}      # the backscatter's receiver 10.30.0.80 sent nothing
    assert {f.severity for f in found.values()} == {"info"}
    assert found["198.51.100.53"].evidence["failed_ratio"] == pytest.approx(0.1)
    assert "busy client" in found["198.51.100.1"].msg


def test_without_the_failure_share_the_resolver_would_be_a_knock(tmp_path):
    found = scans(CAPTURES / "scan-near-misses.pcap", rule_set=rules(tmp_path, min_failed_ratio=0.0))
    assert found["198.51.100.53"].severity == "low" and "knock" in found["198.51.100.53"].evidence["crossed"]


def test_the_allowlist_silences_a_source(tmp_path):
    found = scans(CAPTURES / "scan-near-misses.pcap", rule_set=rules(tmp_path, allowlist=["198.51.100.0/28"]))
    assert set(found) == {"198.51.100.53"}


# what the analysis adds to a rule's finding: the incident it was grouped into and the confidence model's judgement
ANALYSIS_KEYS = ("incident_id", "confidence", "confidence_basis", "rule_severity")


def _record(finding) -> dict:
    """A finding's findings.json record as the rule made it (without ANALYSIS_KEYS)."""
    return {k: v for k, v in finding.to_json().items() if k not in ANALYSIS_KEYS}


def test_two_files_of_one_capture_give_the_findings_of_one():
    from detector.ingest import read_captures  # noqa: F401 - the engine reads several files as one capture
    whole = analyze([CAPTURES / "scan-port-scan.pcap"], rules(), label="one").findings
    split = analyze([CAPTURES / "scan-port-scan.pcap", CAPTURES / "scan-near-misses.pcap"], rules(),
                    label="two").findings
    # the scan's own records (incident ids number each run's incidents, which differ with the other file's)
    mine = [_record(f) for f in split if f.identifier == "203.0.113.50"]
    assert mine == [_record(f) for f in whole]


# ---- crafted flows: the window, the probes, the near-misses -------------------------------------------

def test_targets_count_within_15_minutes(tmp_path):
    # 30 remote SYNs to 30 hosts on 30 ports: within 10 minutes a scan, spread over 29 minutes not
    fast = [(k * 20.0, syn("203.0.113.9", f"10.30.1.{k + 1}", 1000 + k)) for k in range(30)]
    slow = [(k * 60.0, syn("203.0.113.9", f"10.30.1.{k + 1}", 1000 + k)) for k in range(30)]
    (f,) = scans(capture(tmp_path, fast)).values()
    assert f.severity == "low" and f.evidence["kind"] == "random" and f.evidence["busiest_15min_targets"] == 30
    assert scans(capture(tmp_path, slow, "slow.pcap")) == {}


def test_a_target_that_answered_once_is_no_scan_target(tmp_path):
    packets = [(k * 0.1, syn("203.0.113.9", f"10.30.1.{k + 1}", 1000 + k)) for k in range(30)]
    # six of the hosts answered an earlier attempt on the same port: 24 targets remain, below 25
    for k in range(6):
        packets.append((10.0 + k, syn("203.0.113.9", f"10.30.1.{k + 1}", 1000 + k, sport=41000)))
        packets.append((10.01 + k, Ether() / IP(src=f"10.30.1.{k + 1}", dst="203.0.113.9") /
                        TCP(sport=1000 + k, dport=41000, flags="SA")))
    assert scans(capture(tmp_path, packets)) == {}


def test_idle_connections_picked_up_mid_stream_are_no_ack_probes(tmp_path):
    # keepalives of 300 idle connections (three bare ACKs each, no answer in this one-sided capture)
    packets = [(k * 0.01 + j, Ether() / IP(src="10.30.0.5", dst=f"198.18.{k // 250}.{k % 250 + 1}") /
                TCP(sport=50000 + k, dport=443, flags="A")) for k in range(300) for j in range(3)]
    assert scans(capture(tmp_path, packets)) == {}
    probes = [(k * 0.01, Ether() / IP(src="10.30.0.5", dst=f"198.18.{k // 250}.{k % 250 + 1}") /
               TCP(sport=50000, dport=443, flags="A")) for k in range(300)]
    assert scans(capture(tmp_path, probes, "sweep.pcap"))["10.30.0.5"].evidence["kind"] == "ACK sweep"


def test_udp_to_many_hosts_on_many_high_ports_reads_as_p2p(tmp_path):
    rng = np.random.default_rng(7)
    packets = [(k * 0.05, Ether() / IP(src="203.0.113.77", dst=f"198.18.{k}.{k + 1}") /
                UDP(sport=6881, dport=int(rng.integers(1025, 65535)))) for k in range(60)]
    (f,) = scans(capture(tmp_path, packets)).values()
    assert f.severity == "info" and f.evidence["kind"] == "random" and "P2P" in f.msg


def test_multicast_and_broadcast_are_no_targets(tmp_path):
    packets = [(k * 0.05, Ether() / IP(src="203.0.113.77", dst=f"239.1.{k}.1") / UDP(sport=5000, dport=5000 + k))
               for k in range(60)]
    packets += [(k * 0.05, Ether() / IP(src="203.0.113.77", dst="255.255.255.255") / UDP(sport=40000, dport=2000 + k))
                for k in range(60)]
    packets += [(k * 0.05, Ether() / IPv6(src="2001:db8::77", dst=f"ff05::{k + 1:x}") /
                 UDP(sport=40000, dport=5000 + k)) for k in range(60)]
    assert scans(capture(tmp_path, packets)) == {}


def test_busiest_window_per_group():
    groups = np.array([1, 1, 1, 2, 2, 1], dtype=np.int64)
    times = np.array([0, 5, 20, 3, 4, 11], dtype=np.int64)
    values, counts, starts = busiest_window(groups, times, 10)
    assert values.tolist() == [1, 2] and counts.tolist() == [2, 2] and starts.tolist() == [0, 3]
    values, counts, starts = busiest_window(groups, times, 16)
    assert counts.tolist() == [3, 2] and starts.tolist() == [0, 3]


# ---- live and report --------------------------------------------------------------------------------------

def test_a_watch_names_the_sweeping_host_under_one_identifier():
    from detector.decode import decode
    from detector.ingest import open_capture
    from detector.live.alerts import entity_key
    from detector.live.window import SlidingWindow

    window = SlidingWindow(rules(), now=0.0, slice_s=1.0, slices=1000)
    seen = []
    with open_capture(CAPTURES / "scan-local-sweep.pcap", batch_packets=1000) as reader:
        for k, raw in enumerate(reader):
            window.update(decode(raw), now=float(k))
            seen += [(entity_key(f), f.severity) for f in window.analysis().findings]
    assert seen and set(seen) == {(("scan", "10.30.0.66"), "medium")}


def test_the_report_figure_draws_attempts_and_targets():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from detector.detect.figure import TimeBins
    from detector.detectors import active_detectors

    result = analyze([CAPTURES / "scan-port-scan.pcap"], rules(), label="fig")
    (detector,) = active_detectors(rules())
    bins = TimeBins(start_ns=T0 * 10**9, bin_ns=10**9, count=10)
    (figure,) = detector.figures(result.findings, bins)
    fig, ax = plt.subplots()
    figure.draw(ax, result.flows)
    attempts, = ax.get_lines()
    assert attempts.get_ydata().sum() == 1000 - 3
    plt.close(fig)


def test_icmp_errors_are_answers_never_attempts(tmp_path):
    # a local router telling 300 hosts their UDP ports are unreachable is no ICMP sweep
    from scapy.all import ICMP, IPerror, UDPerror
    packets = [(k * 0.01, Ether() / IP(src="10.30.0.1", dst=f"198.18.{k // 250}.{k % 250 + 1}") /
                ICMP(type=3, code=3) / IPerror(src=f"198.18.{k // 250}.{k % 250 + 1}", dst="10.30.0.1") /
                UDPerror(sport=40000, dport=33434 + k)) for k in range(300)]
    assert scans(capture(tmp_path, packets)) == {}


@pytest.mark.parametrize("name", ["scan-local-sweep.pcap", "session-storm-flood.pcap", "scan-near-misses.pcap"])
def test_the_flow_tables_numbers_and_its_dataframe_view_give_the_same_findings(name):
    from detector.detect.detector import AnalysisContext
    from detector.detectors import active_detectors

    both = {k: v for k, v in load_rules().items() if k in (RULE, "session-storm")}
    result = analyze([CAPTURES / name], both, label="view")
    from_view = AnalysisContext(flows=result.flows, stats=result.stats)
    again = sorted((_record(f) for d in active_detectors(both) for f in d.findings(from_view)), key=str)
    assert again and again == sorted((_record(f) for f in result.findings), key=str)


# ---- issue 27: path traces are no scans ------------------------------------------------------------------

def test_a_udp_traceroute_is_a_path_not_a_vertical_scan():
    # 30 UDP probes to 33434-33463 of one host, TTL 1-10, time-exceeded from 8 routers: was a medium vertical scan
    (f,) = scans(CAPTURES / "scan-traceroute-udp.pcap").values()
    assert (f.identifier, f.severity, f.evidence["kind"]) == ("10.40.0.15", "info", "traceroute")
    assert f.evidence["traces"] | {"top_hosts": None} == {"hosts": 1, "probes": 30, "protocols": ["udp"],
                                                          "highest_ttl": 10, "time_exceeded_from": 8,
                                                          "top_hosts": None}
    assert "traceroute, not a scan" in f.msg


def test_paths_to_many_hosts_in_a_row_are_traces_in_every_protocol():
    found = scans(CAPTURES / "scan-traceroute-many.pcap")
    assert {name: (f.severity, f.evidence["kind"], f.evidence["traces"]["protocols"], f.evidence["traces"]["hosts"])
            for name, f in found.items()} == {"10.40.0.5": ("info", "traceroute", ["udp"], 12),
                                              "203.0.113.40": ("info", "traceroute", ["icmp"], 40),
                                              "203.0.113.41": ("info", "traceroute", ["tcp"], 30)}


def test_a_udp_port_scan_stays_a_scan_beside_its_own_traceroute():
    # nmap -sU draws TTLs of 37-59 (no ladder), and its --traceroute's five probes to the host are a sliver of
    # the 1,005 packets the scanner sent it
    (f,) = scans(CAPTURES / "scan-udp-ports.pcap").values()
    assert (f.identifier, f.severity, f.evidence["kind"], f.dest_ip) == ("10.40.0.66", "medium", "vertical",
                                                                          "10.40.3.10")
    assert f.evidence["probes"] == {"UDP": f.evidence["unique_targets"]} and "path_traces_left_out" not in f.evidence


def _ladder_rows(pairs_ttls):
    pair = np.array([p for p, _, _ in pairs_ttls], np.uint64)
    return {"pair": pair, "ttl": np.array([t for _, t, _ in pairs_ttls], np.int64),
            "packets": np.array([n for _, _, n in pairs_ttls], np.int64),
            "key": pair}


def test_a_ladder_climbs_by_one_from_a_low_ttl():
    from detector.detectors.scan import ladders
    rows = _ladder_rows([(1, 1, 3), (1, 2, 3), (1, 3, 3), (1, 7, 1),      # climbs 1-3, then a stray 7: a ladder
                         (2, 1, 3), (2, 2, 3),                            # two steps only
                         (3, 4, 3), (3, 5, 3), (3, 6, 3), (3, 7, 3),      # starts at 4: a far scanner's TTLs
                         (4, 2, 1), (4, 3, 1), (4, 5, 1), (4, 6, 1)])     # 2, 3, then a gap
    found = ladders(rows)
    assert found["pair"].tolist() == [1] and found["packets"].tolist() == [10] and found["top"].tolist() == [3]


def test_a_scan_at_random_low_ttls_from_far_away_is_no_ladder(tmp_path):
    # nmap's 37-59 arriving over 30 hops: 7-29, never from 1
    rng = np.random.default_rng(27)
    packets = [(k * 0.01, Ether() / IP(src="10.30.9.9", dst="10.30.1.1", ttl=int(rng.integers(7, 30))) /
                UDP(sport=40000, dport=1000 + k)) for k in range(40)]
    (f,) = scans(capture(tmp_path, packets)).values()
    assert (f.severity, f.evidence["kind"]) == ("medium", "vertical")


# ---- issue 27: ARP sweeps ------------------------------------------------------------------------------

def test_nmaps_arp_host_discovery_is_a_low_sweep():
    (f,) = scans(CAPTURES / "scan-arp-sweep.pcap").values()
    assert (f.identifier, f.severity, f.src_ip, f.src_mac) == ("10.40.1.66", "low", "10.40.1.66",
                                                               "02:00:5e:00:41:66")
    ev = f.evidence
    assert (ev["kind"], ev["addresses"], ev["requests"], ev["answered"], ev["replies_seen"]) == (
        "ARP sweep", 245, 500, 30, True)
    assert (ev["first_address"], ev["last_address"], ev["busiest_30s_addresses"]) == ("10.40.1.9", "10.40.1.254", 215)
    assert "swept 245 addresses of 10.40.1.9-10.40.1.254 by ARP in 1.9 s: 500 requests, 30 answered" in f.msg


def test_favillis_arp_scan_is_a_sweep_of_a_whole_24(captures_real):
    # 509 requests for all 256 addresses of 10.0.0.0/24 in 1 s, none answered; the two for its own address
    # 10.0.0.128 ask nobody else (sender and target alike, as a gratuitous ARP)
    (f,) = scans(captures_real / FAVILLI / "hs-arpScan.pcap").values()
    assert (f.identifier, f.severity, f.evidence["kind"]) == ("10.0.0.128", "low", "ARP sweep")
    assert (f.evidence["addresses"], f.evidence["requests"], f.evidence["replies_seen"]) == (255, 507, False)
    assert (f.evidence["first_address"], f.evidence["last_address"]) == ("10.0.0.0", "10.0.0.255")
    assert "no ARP reply to it in the capture" in f.msg


def test_ordinary_arp_is_no_sweep():
    # a router resolving 40 hosts, a rebooted router resolving 150 that answer, DHCP probes from 0.0.0.0, GARPs
    assert scans(CAPTURES / "scan-arp-ordinary.pcap") == {}


def _arp(t, op, sha, spa, tpa, tha="00:00:00:00:00:00"):
    from scapy.all import ARP
    return t, Ether(src=sha, dst="ff:ff:ff:ff:ff:ff" if op == 1 else tha) / ARP(op=op, hwsrc=sha, psrc=spa,
                                                                                  hwdst=tha, pdst=tpa)


def test_answered_addresses_count_only_where_replies_are_unseen(tmp_path):
    # a router asking for 100 live hosts in 10 s: with their replies in the capture nothing, without them a sweep
    router = "02:00:5e:00:00:01"
    asks = [_arp(k * 0.1, 1, router, "10.30.5.1", f"10.30.5.{k + 2}") for k in range(100)]
    answers = [_arp(k * 0.1 + 0.001, 2, f"02:00:5e:00:05:{k:02x}", f"10.30.5.{k + 2}", "10.30.5.1", router)
               for k in range(100)]
    assert scans(capture(tmp_path, asks + answers)) == {}
    (f,) = scans(capture(tmp_path, asks, "asks.pcap")).values()
    assert (f.severity, f.evidence["replies_seen"], f.evidence["answered"]) == ("low", False, None)


def test_a_site_router_sweeping_by_arp_is_info(tmp_path):
    router = "02:00:5e:00:00:01"
    asks = [_arp(k * 0.02, 1, router, "10.30.5.1", f"10.30.5.{k + 2}") for k in range(100)]
    site = Site(path="site.yaml", routers=frozenset({"10.30.5.1"}))
    (f,) = scans(capture(tmp_path, asks), site=site).values()
    assert f.severity == "info" and "a router of the site file" in f.msg


def test_an_arp_sweep_and_a_ping_sweep_of_one_host_are_one_finding(tmp_path):
    from scapy.all import ICMP
    mac = "02:00:5e:00:00:66"
    asks = [_arp(k * 0.004, 1, mac, "10.30.5.66", f"10.30.{6 + k // 250}.{k % 250 + 1}") for k in range(300)]
    pings = [(2.0 + k * 0.004, Ether(src=mac) / IP(src="10.30.5.66", dst=f"10.30.{6 + k // 250}.{k % 250 + 1}") /
              ICMP()) for k in range(300)]
    (f,) = scans(capture(tmp_path, asks + pings)).values()
    assert (f.severity, f.evidence["kind"], f.evidence["also"]["kind"]) == ("medium", "ICMP sweep", "ARP sweep")
    assert f.src_mac == mac and "Also: 10.30.5.66 (02:00:5e:00:00:66) swept 300 addresses" in f.msg
    assert f.n == 600


def test_the_state_of_two_halves_merges_to_that_of_one_pass():
    from detector.decode import decode
    from detector.detectors import active_detectors
    from detector.ingest import open_capture

    whole, first, second = (active_detectors(rules())[0] for _ in range(3))
    with open_capture(CAPTURES / "scan-arp-sweep.pcap", batch_packets=100) as reader:
        for k, raw in enumerate(reader):
            batch = decode(raw)
            whole.update(batch)
            (first if k < 3 else second).update(batch)
    merged = first.merge(second)
    for name in ("ttls", "expired", "requests", "replies"):
        a, b = getattr(whole, name).fold(), getattr(merged, name).fold()
        assert all(np.array_equal(a[col], b[col]) for col in a), name


def test_the_attempts_figure_counts_the_scanners_attempts_per_second():
    """One number, one source: the figure's failed attempts are counted per whole second as the rule counts
    (the report's bins here are 2 ms), they sum to the attempts the finding gives, and the distinct-targets line
    ends at its unique targets."""
    from tests._figures import drawn

    d = drawn("session-storm-flood.pcap", "scan")
    scan = d.finding
    assert d.bins.width_s < 1
    [attempts] = d.ax.get_lines()
    assert attempts.get_ydata().sum() == scan.evidence["attempts"] == 3_000
    assert attempts.get_ydata().max() == 3_000          # all of them in one second, not 2 ms scaled to a rate
    assert d.twin().get_lines()[0].get_ydata()[-1] == scan.evidence["unique_targets"]
    assert f"at least {scan.evidence['unique_targets']:,} unique hosts" in scan.msg
    d.close()

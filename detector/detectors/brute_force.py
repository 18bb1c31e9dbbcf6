"""brute-force: one client repeating the same short TCP session to one service, for tens of seconds.

Password guessing (Hydra, Medusa, Ncrack, bots against SSH, FTP, RDP,
telnet, mail logins) opens one connection after another to one service:
each a handshake, a banner, a login and its refusal, a close; the same
exchange again and again, several at a time, for as long as the word list
lasts. Issue 27: 704 connections in 44 s from one client to one FTP
server (16 a second, every login refused) gave nothing.

Without reading the protocol (Zeek's protocols/ssh/detect-bruteforcing
counts failed SSH logins, 30 within 30 minutes; Suricata's ET SCAN rules
count refusals such as FTP's "530" with a threshold by source), the flow
table shows the shape. A try is a TCP connection the capture saw begin
(the client's SYN, the server's SYN-ACK), in which both sides sent data,
at most TRY_PAYLOAD_MAX bytes each, and which closed (FIN or RST) within
TRY_SECONDS_MAX. A client guesses at a service (server address and port)
when, within TRY_WINDOW_S:

- at least `min_sessions` tries start (100 a minute: a poller connecting
  every second makes 60);
- they span at least SUSTAIN_S (a page load's burst of connections does
  not, and a run of a word list does);
- they are the same exchange: at least SAME_SHARE_MIN of them carry the
  median payload of each side within SIZE_SLACK (the same banner and
  refusal, a user name and a password of a few more or fewer characters),
  where page loads fetch objects of every size and a mail relay sends
  messages of every length.

Severity by locality, as for sources of failed attempts: a remote client
is low (the Internet's background against every exposed login), a local
one medium (a host of ours guessing passwords is infected or misused). The rule cannot see whether a login
worked; the message says what was seen. Residuals: guessing over one
kept-alive connection (HTTP forms, several SSH passwords a connection)
makes few sessions; a guesser slower than `min_sessions` a minute passes
(Zeek's protocol-aware scripts catch those); a client hammering one
endpoint with identical short requests without keep-alive (a broken
poller at two a second) is reported, at its locality's severity.

Local clients are those of the site file's `local_networks` when it gives
them (`--site`), else those of the rule's `local_networks` parameter.

State: none of its own; the flow table is read in findings(), merged across
files and cluster partitions; a watch sees its live window.
"""
from __future__ import annotations

import numpy as np

from ..detect.attempts import busiest_window, duration_text, flow_numbers, in_networks, most_open, parse_networks
from ..detect.columns import ip_text
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.hashing import mix64
from ..findings import Finding
from ..rules import ALERT_SECONDS, COUNT, Param, Range
from ..schema import PROTO_TCP, TH_ACK, TH_FIN, TH_RST, TH_SYN
from ..units import NS

# The most payload one side of a try carries: a login exchange is a few hundred bytes (FTP, telnet, POP3), a
# few kilobytes with a key exchange (SSH with post-quantum keys, RDP's TLS and CredSSP). More admits page
# loads and downloads as tries; less misses RDP.
TRY_PAYLOAD_MAX = 16 * 1024
# The longest a try lasts from SYN to close: servers delay a refusal (vsftpd 1 s, OpenSSH 2-3 s a password,
# several passwords a connection). Longer admits interactive sessions; shorter misses slow servers.
TRY_SECONDS_MAX = 30.0
# Tries are counted within one minute (the busiest one). Longer lets a slow guesser add up, and a poller too.
TRY_WINDOW_S = 60.0
# The tries within that minute must span this long: a page load opens its connections within a second or two,
# a word list runs on. Shorter reports bursts of connections; longer misses a short run of a fast tool.
SUSTAIN_S = 20.0
# The share of tries carrying each side's median payload (within SIZE_SLACK) that makes them one exchange
# repeated: higher lets a guesser with passwords of very different lengths pass, lower reports a crawler.
SAME_SHARE_MIN = 0.8
# "The same payload": within this many bytes, or this share of the median, whichever is more. Passwords
# differ by a few characters, SSH pads to its cipher block.
SIZE_SLACK_BYTES = 64
SIZE_SLACK_RATIO = 0.1
# Findings per run, the busiest services first; samples named in a finding's evidence.
FINDINGS_MAX = 256


@register
class BruteForce(Detector):
    rule_id = "brute-force"
    EVE_SIGNATURE = (2, "Misc Attack")
    # what its findings rest on beyond what it saw (detect.confidence): sessions a minute, sustained
    QUALITY_NEEDS = frozenset({"timing"})
    PARAMS = {
        "min_sessions": Param(int, 100, "(ours) short sessions of one client to one service (server and port) "
                                        "starting within one minute from which it is guessing", COUNT,
                              "A poller connecting every second makes 60 a minute, Hydra with 16 tasks against "
                              "FTP 960. Lower catches slower guessers (SSH bots at one a second) and reports "
                              "pollers; higher misses a guesser with few tasks."),
        "local_networks": Param(list, ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                                       "127.0.0.0/8", "fe80::/10", "fc00::/7", "::1/128"],
                                "client networks counted as local (CIDR) unless the site file gives "
                                "local_networks, which then take precedence (Zeek's private_address_space)",
                                Range(0, 4096),
                                "A local client guessing is medium, a remote one low; add your public networks so "
                                "that your own hosts are judged as local."),
        "allowlist": Param(list, [], "clients never judged (CIDR): monitoring that logs in on purpose, load "
                                     "balancer health checks", Range(0, 4096),
                           "Each entry silences everything its clients do, a guesser behind the same address "
                           "included."),
    }
    ALERTS = {
        "suppress_s": Param(float, 300.0, "least seconds between two events about one client and service",
                            ALERT_SECONDS,
                            "A word list runs for hours; longer keeps one guesser from raising an update every "
                            "few minutes, shorter shows its progress."),
        "resolve_s": Param(float, 120.0, "seconds without the guessing in the window before it is resolved",
                           ALERT_SECONDS,
                           "Guessers pause between word lists; shorter resolves and raises one guesser again."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.local_nets = parse_networks(rule, "local_networks", self.params["local_networks"])
        self.allowed = parse_networks(rule, "allowlist", self.params["allowlist"])

    def update(self, batch) -> None:
        return None     # the flow table is the state

    def merge(self, other: BruteForce) -> BruteForce:
        check_merge(self, other)
        return self

    def is_local(self, address: str) -> bool:
        if self.site.given("local_networks"):
            return self.site.is_local(address)
        return in_networks(address, self.local_nets)

    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        columns = ctx.flow_columns()
        cols = flow_numbers(columns if columns is not None else ctx.flows)
        tries = _tries(cols)
        if len(tries) < self.params["min_sessions"]:
            return []
        first = np.asarray(cols["first_seen"], np.int64)[tries]
        halves = {name: np.asarray(cols[name], np.uint64)[tries] for name in
                  ("src_ip_hi", "src_ip_lo", "dest_ip_hi", "dest_ip_lo")}
        port = np.asarray(cols["dest_port"], np.int64)[tries]
        service = mix64(halves["src_ip_hi"], halves["src_ip_lo"], halves["dest_ip_hi"], halves["dest_ip_lo"], port)
        code = np.unique(service, return_inverse=True)[1]
        codes, busiest, starts = busiest_window(code, first, int(TRY_WINDOW_S * NS))
        out = []
        for k in np.argsort(-busiest, kind="stable").tolist():
            if busiest[k] < self.params["min_sessions"] or len(out) >= FINDINGS_MAX:
                break
            mine = tries[code == codes[k]]
            finding = self._judge(cols, mine, int(starts[k]), int(busiest[k]))
            if finding is not None:
                out.append(finding)
        return out

    def _judge(self, cols: dict, mine: np.ndarray, start_ns: int, busiest: int) -> Finding | None:
        """The finding of one client and service, `mine` its tries (flow rows in first-packet order), or None when
        they are no guessing: not sustained, or not one exchange repeated."""
        first = np.asarray(cols["first_seen"], np.int64)[mine]
        last = np.asarray(cols["last_seen"], np.int64)[mine]
        inside = (first >= start_ns) & (first < start_ns + int(TRY_WINDOW_S * NS))
        span_s = (first[inside].max() - first[inside].min()) / NS
        if span_s < SUSTAIN_S:
            return None
        sent = np.asarray(cols["src2dst_payload_bytes"], np.int64)[mine]
        back = np.asarray(cols["dst2src_payload_bytes"], np.int64)[mine]
        same = float(np.mean(_near_median(sent) & _near_median(back)))
        if same < SAME_SHARE_MIN:
            return None
        client = _address(cols, "src", mine[0])
        if in_networks(client, self.allowed):
            return None
        server, port = _address(cols, "dest", mine[0]), int(np.asarray(cols["dest_port"])[mine[0]])
        local = self.is_local(client)
        side = self._side(local)
        whole_s = max((first.max() - first.min()) / NS, 1e-9)
        closes = _closers(cols, mine)
        duration = float(np.median((last - first) / NS))
        msg = (f"{client} ({side}) opened {len(mine):,} short sessions to {port}/tcp of {server} in "
               f"{duration_text(whole_s)} ({len(mine) / whole_s:.1f}/s, {busiest:,} within {TRY_WINDOW_S:.0f} s), "
               f"{same:.0%} of them the same exchange: {int(np.median(sent)):,} bytes from the client, "
               f"{int(np.median(back)):,} from the server, closed after {duration:.1f} s: password guessing "
               f"(brute force) against the service")
        evidence = {
            "client": client, "server": server, "port": port, "local": local, "local_by": side,
            "sessions": len(mine), f"busiest_{TRY_WINDOW_S:.0f}s_sessions": busiest,
            "span_s": round(float(whole_s), 3), "sessions_per_second": round(len(mine) / whole_s, 1),
            "client_payload_bytes_median": int(np.median(sent)), "server_payload_bytes_median": int(np.median(back)),
            "same_exchange_ratio": round(float(same), 3), "duration_s_median": round(duration, 3),
            "most_at_once": most_open(first, last), "closed_by": closes,
            "evidence_frames": evidence_frames(np.sort(np.asarray(cols["first_frame"], np.int64)[mine])),
        }
        return self.finding("medium" if local else "low", msg, identifier=f"{client} -> {server}:{port}",
                            first_seen=int(first.min()), last_seen=int(last.max()), n=len(mine), src_ip=client,
                            dest_ip=server, dest_port=port, proto="tcp", evidence=evidence)

    def _side(self, local: bool) -> str:
        if self.site.given("local_networks"):
            return "local: site local_networks" if local else "remote: outside the site's local_networks"
        return "local: private address space" if local else "remote: outside the local_networks parameter"


def _tries(cols: dict) -> np.ndarray:
    """The flow rows that look like one login try: TCP begun with the client's SYN and answered by a SYN-ACK,
    data both ways (each at most TRY_PAYLOAD_MAX), closed by FIN or RST within TRY_SECONDS_MAX."""
    proto = np.asarray(cols["proto"], np.int64)
    if len(proto) == 0:
        return np.zeros(0, np.int64)
    o_flags = np.asarray(cols["src2dst_tcp_flags"], np.int64)
    r_flags = np.asarray(cols["dst2src_tcp_flags"], np.int64)
    sent = np.asarray(cols["src2dst_payload_bytes"], np.int64)
    back = np.asarray(cols["dst2src_payload_bytes"], np.int64)
    seconds = (np.asarray(cols["last_seen"], np.int64) - np.asarray(cols["first_seen"], np.int64)) / NS
    ok = ((proto == PROTO_TCP) & np.asarray(cols["syn_first"], bool)
          & ((r_flags & (TH_SYN | TH_ACK)) == (TH_SYN | TH_ACK))
          & (sent > 0) & (back > 0) & (sent <= TRY_PAYLOAD_MAX) & (back <= TRY_PAYLOAD_MAX)
          & (((o_flags | r_flags) & (TH_FIN | TH_RST)) != 0) & (seconds <= TRY_SECONDS_MAX))
    return np.flatnonzero(ok)


def _near_median(sizes: np.ndarray) -> np.ndarray:
    """Which sizes lie within SIZE_SLACK of their median."""
    median = float(np.median(sizes))
    return np.abs(sizes - median) <= max(SIZE_SLACK_BYTES, SIZE_SLACK_RATIO * median)


def _closers(cols: dict, rows: np.ndarray) -> dict[str, int]:
    """How the tries ended: with a reset, or with FINs."""
    o_flags = np.asarray(cols["src2dst_tcp_flags"], np.int64)[rows]
    r_flags = np.asarray(cols["dst2src_tcp_flags"], np.int64)[rows]
    reset = ((o_flags | r_flags) & TH_RST) != 0
    return {"reset": int(reset.sum()), "fin": int((~reset).sum())}


def _address(cols: dict, side: str, row: int) -> str:
    return ip_text(np.asarray(cols[f"{side}_ip_hi"])[row], np.asarray(cols[f"{side}_ip_lo"])[row])

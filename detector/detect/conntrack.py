"""The connection-table model: how many entries a stateful box (nf_conntrack, Suricata's flow table) would hold
for the flows of a flow table, and who holds them.

Each flow occupies [first_seen, last_seen + the timeout of its end state]
(end states from Zeek's conn_state, `END_STATE_OF`; timeouts per `PROFILES`),
rows of one 5-tuple (either orientation) joined when the gap between them is
shorter than that timeout, as the kernel's entry would have lived on.
Counting the entries alive at each insert gives the concurrency (`occupancy`).
Flows to listeners the box does not track (`untracked`: NOTRACK rules) are
left out. Shared by the rules that report the table's load and that judge a
burst of new flows by the entries it would take.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import numpy as np

from ..schema import PROTO_ICMP, PROTO_ICMP6, PROTO_TCP, PROTO_UDP
from ..units import NS
from .columns import flow_time_ns, ip_text
from .hashing import mix64

# ---- end states and timeout profiles --------------------------------------------------------------------
# The states an entry ends in, as the model knows them: TCP states of nf_conntrack_proto_tcp.c, and
# replied/unreplied for the other protocols (Linux's UDP "stream" vs "unreplied"; Suricata's established vs
# new for every protocol).
END_STATES = ("syn_sent", "syn_recv", "established", "fin_wait", "close_wait", "last_ack", "time_wait", "close",
              "udp_unreplied", "udp_replied", "icmp_unreplied", "icmp_replied", "other_unreplied",
              "other_replied")
_STATE_CODE = {name: i for i, name in enumerate(END_STATES)}
ESTABLISHED = _STATE_CODE["established"]

# Zeek's conn_state of a TCP flow -> the conntrack state its entry ends in.
END_STATE_OF = {
    "S0": "syn_sent", "SH": "syn_sent",            # SYN unanswered (SH: then a FIN): SYN_SENT
    "S1": "established",                           # open at the capture's end: censored there
    "SF": "time_wait",                             # closed normally: TIME_WAIT
    "REJ": "close", "RSTO": "close", "RSTR": "close", "RSTOS0": "close", "RSTRH": "close",   # reset: CLOSE
    "S2": "close_wait", "S3": "close_wait", "SHR": "close_wait",   # one FIN seen and acknowledged: CLOSE_WAIT
    # OTH: picked up mid-stream, which Linux tracks as ESTABLISHED (nf_conntrack_tcp_loose=1, the default)
    "OTH": "established",
}

DAY_S = 86400
# Timeouts in seconds per end state.
PROFILES: dict[str, dict[str, float]] = {
    # Linux defaults: net/netfilter/nf_conntrack_proto_tcp.c tcp_timeouts[], nf_conntrack_proto_udp.c
    # udp_timeouts[] (unreplied 30 s, stream 120 s; older kernels kept streams 180 s), nf_conntrack_proto_icmp.c (30 s),
    # nf_conntrack_proto_generic.c (600 s)
    "linux": {"syn_sent": 120, "syn_recv": 60, "established": 5 * DAY_S, "fin_wait": 120, "close_wait": 60,
              "last_ack": 30, "time_wait": 120, "close": 10, "udp_unreplied": 30, "udp_replied": 120,
              "icmp_unreplied": 30, "icmp_replied": 30, "other_unreplied": 600, "other_replied": 600},
    # seed 003's CGNAT (net.netfilter.nf_conntrack_*_timeout): established 600, syn_sent/syn_recv/fin_wait 60,
    # close_wait 45, last_ack 30, time_wait 120, close 10, udp 30, udp_stream 60, icmp 30, generic 300
    "seed-003": {"syn_sent": 60, "syn_recv": 60, "established": 600, "fin_wait": 60, "close_wait": 45,
                 "last_ack": 30, "time_wait": 120, "close": 10, "udp_unreplied": 30, "udp_replied": 60,
                 "icmp_unreplied": 30, "icmp_replied": 30, "other_unreplied": 300, "other_replied": 300},
    # Suricata's flow-timeouts defaults (suricata.yaml.in): tcp new 60, established 600, closed 60; udp, icmp
    # and the default new 30, established 300. A half-closed TCP flow is still established there.
    "suricata": {"syn_sent": 60, "syn_recv": 60, "established": 600, "fin_wait": 600, "close_wait": 600,
                 "last_ack": 600, "time_wait": 60, "close": 60, "udp_unreplied": 30, "udp_replied": 300,
                 "icmp_unreplied": 30, "icmp_replied": 300, "other_unreplied": 30, "other_replied": 300},
}

# ---- what a finding names ------------------------------------------------------------------------------
TOP_SOURCES = 5
TOP_DESTINATIONS = 5
# A listener (address and port) holding at least this share of the entries at the peak, from at least
# TARGET_SOURCES sources, is what the table's load is about: a flood's victim, whose forged sources hold one entry
# each (naming the busiest of them would name one random address), or a busy server's clients. The finding then
# names the listener and counts the sources. Higher names a listener only when it draws nearly everything; lower
# names one beside a sweep or a NAT gateway that holds as much.
TARGET_SHARE = 0.5
TARGET_SOURCES = 100   # a distributed flood's sources, as the SYN flood rule counts them
# Points of the concurrency series a finding carries (the report's figure draws it at full resolution).
SERIES_POINTS = 60


@dataclass
class Occupancy:
    """The modelled table over the capture (see `occupancy`)."""

    profile: str
    flows: int = 0                  # rows of the flow table read
    untracked_flows: int = 0        # of those, flows to `untracked` listeners, left out
    entries: int = 0                # table entries after joining rows of one 5-tuple
    first_ns: int = 0               # the capture span the model covers
    last_ns: int = 0
    peak: int = 0                   # most entries alive at once
    peak_ns: int = 0
    peak_insert_rate: int = 0       # most entries created in one second
    peak_insert_ns: int = 0         # that second's start
    censored: int = 0               # entries whose timeout runs past the capture's end
    state_mix: dict[str, int] = field(default_factory=dict)           # at the peak
    top_sources: list[dict] = field(default_factory=list)             # at the peak, most entries first
    top_source_frames: list[int] = field(default_factory=list)        # first frames of its flows alive then
    sources_at_peak: int = 0                                          # distinct sources holding entries then
    # the listeners (responder address and port) holding most entries at the peak, with their distinct sources
    top_destinations: list[dict] = field(default_factory=list)
    destinations_at_peak: int = 0
    top_destination_frames: list[int] = field(default_factory=list)   # first frames of the top one's entries
    # arrays of the entries (sorted starts and ends, ns), for series at any resolution
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    ends: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)

    def series(self, start_ns: int, bin_ns: int, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Per bin [start_ns + i*bin_ns, + bin_ns): the most entries alive at once, and the entries created."""
        edges = start_ns + np.arange(count + 1, dtype=np.int64) * bin_ns
        alive = self.alive_at(edges)                     # at each bin's start (and the last one's end)
        peak = alive[:-1].copy()
        inserts = np.zeros(count, np.int64)
        if len(self.starts) and count:
            idx = (self.starts - start_ns) // bin_ns
            inside = np.flatnonzero((idx >= 0) & (idx < count))
            if len(inside):
                # the level right after each insert; within a bin the highest is its peak
                level = inside + 1 - np.searchsorted(self.ends, self.starts[inside], side="right")
                bins = idx[inside]
                first = np.flatnonzero(np.concatenate(([True], bins[1:] != bins[:-1])))
                peak[bins[first]] = np.maximum(peak[bins[first]], np.maximum.reduceat(level, first))
                inserts = np.bincount(bins, minlength=count).astype(np.int64)
        return peak, inserts

    def alive_at(self, times: np.ndarray) -> np.ndarray:
        """Entries alive at each time (created at or before it, not yet expired)."""
        return (np.searchsorted(self.starts, times, side="right")
                - np.searchsorted(self.ends, times, side="right")).astype(np.int64)


def parse_untracked(values) -> list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network | None, int | None]]:
    """`untracked` entries as (network or None for any, port or None for any); ValueError on a bad one.

    Each entry is `ADDRESS[/PREFIX]`, `ADDRESS[/PREFIX]:PORT` (IPv6 in brackets: `[2001:db8::53]:53`) or
    `*:PORT`: the listener a NOTRACK rule exempts, matched against a flow's responder. An error names the entry
    by its place in the list, never by its text (the rule file's text stays out of terminals and logs).
    """
    out = []
    for number, value in enumerate(values, 1):
        text = str(value).strip()
        port = None
        if text.startswith("["):
            address, sep, rest = text[1:].partition("]")
            if not sep or (rest and not rest.startswith(":")):
                raise ValueError(f"entry {number}: an IPv6 listener is written [ADDRESS]:PORT")
            text, port_text = address, rest[1:] if rest else ""
        elif text.count(":") == 1:
            text, port_text = text.split(":")
        else:
            port_text = ""
        if port_text:
            if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
                raise ValueError(f"entry {number}: the port must be a number 0-65535")
            port = int(port_text)
        try:
            network = None if text in ("*", "") else ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ValueError(f"entry {number}: not an address or a network in CIDR notation") from None
        if network is None and port is None:
            raise ValueError(f"entry {number}: names neither an address nor a port")
        out.append((network, port))
    return out


def _column(flows, name: str) -> np.ndarray:
    column = flows[name]
    return column.to_numpy() if hasattr(column, "to_numpy") else np.asarray(column)


def _factorize(flows, *names: str) -> tuple[np.ndarray, ...]:
    """Codes of the columns `names` (one code per distinct value across all of them: an address has the same
    code as source and as destination), then the distinct values. Hashing, not sorting, and on the frame's
    own columns (Arrow strings), never a million Python strings; the columns' distinct values, far fewer
    than their rows, are then matched to each other."""
    import pandas as pd
    parts = [pd.factorize(flows[name] if isinstance(flows[name], pd.Series) else np.asarray(flows[name]),
                          use_na_sentinel=False) for name in names]
    if len(parts) == 1:
        codes, uniques = parts[0]
        return codes.astype(np.int64, copy=False), np.asarray(uniques, dtype=object)
    joint, uniques = pd.factorize(pd.concat([pd.Series(np.asarray(u, dtype=object)) for _, u in parts],
                                            ignore_index=True), use_na_sentinel=False)
    joint = joint.astype(np.int64, copy=False)
    out, offset = [], 0
    for codes, distinct in parts:
        out.append(joint[offset:offset + len(distinct)][codes])
        offset += len(distinct)
    return (*out, np.asarray(uniques, dtype=object))


@dataclass
class _Flows:
    """What the model reads of each flow, from either shape of the flow table."""

    src: np.ndarray             # address codes, one space for sources and destinations
    dest: np.ndarray
    sport: np.ndarray
    dport: np.ndarray
    proto: np.ndarray           # IANA numbers
    first: np.ndarray           # ns
    last: np.ndarray
    replied: np.ndarray         # the responder sent something
    state_codes: np.ndarray     # Zeek conn_state, as codes into state_names
    state_names: np.ndarray
    frames: np.ndarray          # first frame of each flow
    address_text: object        # address code -> text

    @classmethod
    def read(cls, flows) -> _Flows:
        if "src_ip_hi" in flows:
            return cls._from_coded(flows)
        src, dest, addresses = _factorize(flows, "src_ip", "dest_ip")
        if "ip_proto" in flows:
            proto = _column(flows, "ip_proto").astype(np.int64)
        else:                           # a frame of its own, with names (or numbers) in proto
            proto_codes, proto_names = _factorize(flows, "proto")
            proto = _proto_numbers(proto_names)[proto_codes]
        state_codes, state_names = _factorize(flows, "state")
        return cls(src=src, dest=dest, sport=_column(flows, "src_port").astype(np.int64),
                   dport=_column(flows, "dest_port").astype(np.int64), proto=proto,
                   first=flow_time_ns(flows["first_seen"]), last=flow_time_ns(flows["last_seen"]),
                   replied=_column(flows, "dst2src_packets") > 0, state_codes=state_codes, state_names=state_names,
                   frames=_column(flows, "first_frame").astype(np.int64), address_text=lambda code: addresses[code])

    @classmethod
    def _from_coded(cls, cols: dict) -> _Flows:
        """FlowTable.coded_columns(): addresses as uint64 halves, protocol numbers, conn_state as TextCodes."""
        n = len(cols["first_seen"])
        hi = np.concatenate([cols["src_ip_hi"], cols["dest_ip_hi"]]).astype(np.uint64)
        lo = np.concatenate([cols["src_ip_lo"], cols["dest_ip_lo"]]).astype(np.uint64)
        order = np.lexsort((lo, hi))
        fresh = np.concatenate(([True], (hi[order][1:] != hi[order][:-1]) | (lo[order][1:] != lo[order][:-1])))
        codes = np.empty(2 * n, np.int64)
        codes[order] = np.cumsum(fresh) - 1
        first_row = order[fresh]                   # a row holding each address, by code
        state = cols["state"]
        return cls(src=codes[:n], dest=codes[n:], sport=np.asarray(cols["src_port"], np.int64),
                   dport=np.asarray(cols["dest_port"], np.int64), proto=np.asarray(cols["proto"], np.int64),
                   first=np.asarray(cols["first_seen"], np.int64), last=np.asarray(cols["last_seen"], np.int64),
                   replied=np.asarray(cols["dst2src_packets"]) > 0, state_codes=np.asarray(state.codes, np.int64),
                   state_names=state.value_texts(), frames=np.asarray(cols["first_frame"], np.int64),
                   address_text=lambda code: ip_text(hi[first_row[code]], lo[first_row[code]]))

    def address_texts(self) -> np.ndarray:
        """Every address code's text (only where listeners must be matched against them)."""
        count = int(max(self.src.max(initial=-1), self.dest.max(initial=-1))) + 1
        return np.array([self.address_text(code) for code in range(count)], dtype=object)


def _proto_numbers(texts) -> np.ndarray:
    """IANA numbers of the flow table's protocol names ('tcp', 'udp', '47'...), 0 for anything else."""
    names = {"tcp": PROTO_TCP, "udp": PROTO_UDP, "icmp": PROTO_ICMP, "icmpv6": PROTO_ICMP6}
    out = np.zeros(len(texts), np.int64)
    for i, text in enumerate(texts):
        text = str(text).lower()
        out[i] = names.get(text, int(text) if text.isdigit() and int(text) < 256 else 0)
    return out


def _untracked_mask(dest_codes, addresses, dest_ports, listeners) -> np.ndarray:
    """Rows whose responder (address, port) a NOTRACK listener covers."""
    mask = np.zeros(len(dest_codes), bool)
    for network, port in listeners:
        if network is None:
            hit_address = np.ones(len(addresses), bool)
        else:
            hit_address = np.zeros(len(addresses), bool)
            for i, text in enumerate(addresses):
                try:
                    hit_address[i] = ipaddress.ip_address(str(text)) in network
                except ValueError:
                    continue
        rows = hit_address[dest_codes]
        if port is not None:
            rows &= dest_ports == port
        mask |= rows
    return mask


def _end_states(proto: np.ndarray, state_codes: np.ndarray, state_names: np.ndarray,
                replied: np.ndarray) -> np.ndarray:
    """Each flow's END_STATES code from its protocol, Zeek conn_state and whether its responder answered."""
    tcp_state = np.array([_STATE_CODE[END_STATE_OF.get(str(name), "established")] for name in state_names]
                         + [ESTABLISHED], np.int64)
    code = np.where(replied, _STATE_CODE["other_replied"], _STATE_CODE["other_unreplied"])
    code = np.where(proto == PROTO_UDP, np.where(replied, _STATE_CODE["udp_replied"], _STATE_CODE["udp_unreplied"]),
                    code)
    icmp = (proto == PROTO_ICMP) | (proto == PROTO_ICMP6)
    code = np.where(icmp, np.where(replied, _STATE_CODE["icmp_replied"], _STATE_CODE["icmp_unreplied"]), code)
    return np.where(proto == PROTO_TCP, tcp_state[state_codes], code)


def _running_max_per_group(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Running maximum of `values` restarting at each group (rows sorted by group)."""
    order = np.argsort(values, kind="stable")
    rank = np.empty(len(values), np.int64)
    rank[order] = np.arange(len(values))
    # a group's ranks lifted above every earlier group's: one accumulate restarts at each group
    lifted = np.maximum.accumulate(groups * len(values) + rank)
    return values[order[lifted - groups * len(values)]]


def occupancy(flows, profile: str = "linux", untracked=(), top_sources: int = TOP_SOURCES) -> Occupancy:
    """The connection table a box with timeout `profile` (a PROFILES key) would have held for `flows`.

    `flows` is the flow table (FlowTable.to_frame(), or a mapping of its columns): src_ip, dest_ip, src_port,
    dest_port, proto, first_seen, last_seen, state, src2dst_packets, dst2src_packets, first_frame.
    `untracked` is parse_untracked()'s list. Vectorised: a million flows take well under a second
    (bench/conntrack_model.py).
    """
    timeouts = np.array([PROFILES[profile][name] * NS for name in END_STATES], np.int64)
    rows = len(flows["first_seen"])
    out = Occupancy(profile=profile, flows=rows)
    if rows == 0:
        return out
    f = _Flows.read(flows)
    src, dest, sport, dport, proto, first, last, replied, frames = (
        f.src, f.dest, f.sport, f.dport, f.proto, f.first, f.last, f.replied, f.frames)
    end_state = _end_states(proto, f.state_codes, f.state_names, replied)
    out.first_ns, out.last_ns = int(first.min()), int(last.max())

    if untracked:
        tracked = ~_untracked_mask(dest, f.address_texts(), dport, untracked)
        out.untracked_flows = int(np.count_nonzero(~tracked))
        if not tracked.any():
            return out
        src, dest, sport, dport, proto, first, last, replied, end_state, frames = (
            col[tracked] for col in (src, dest, sport, dport, proto, first, last, replied, end_state, frames))

    # one key per 5-tuple, whichever side originated: the kernel's entry holds both directions
    a, b = (src << 16) | sport, (dest << 16) | dport
    key = mix64(np.minimum(a, b), np.maximum(a, b), proto)
    # rows of one key in time order (the flow table comes in first-packet order; a stable sort keeps it)
    order = np.argsort(key, kind="stable") if np.all(first[1:] >= first[:-1]) else np.lexsort((first, key))
    key = key[order]
    start = first[order]
    # a timestamp near the end of int64 (a damaged pcapng clock) saturates instead of wrapping to the past
    last_sorted = last[order]
    end = last_sorted + np.minimum(timeouts[end_state[order]], np.iinfo(np.int64).max - np.maximum(last_sorted, 0))
    new_entry = np.concatenate(([True], key[1:] != key[:-1]))
    repeated = np.flatnonzero(~new_entry)
    if len(repeated):
        # a row continues its 5-tuple's entry when it starts before every earlier row's entry expired; only
        # the rows of repeated 5-tuples take part (a few, in most captures)
        members = np.unique(np.concatenate([repeated - 1, repeated]))
        group = np.cumsum(new_entry[members]) - 1
        reach = _running_max_per_group(end[members], group)
        at = np.searchsorted(members, repeated)
        new_entry[repeated] = start[repeated] >= reach[at - 1]
    heads = np.flatnonzero(new_entry)
    entry_start = start[heads]
    entry_end = np.maximum.reduceat(end, heads)
    tails = np.append(heads[1:], len(order)) - 1
    entry_state = end_state[order[tails]]                 # the state its last row ended in
    entry_replied = np.logical_or.reduceat(replied[order], heads)
    entry_src = src[order[heads]]
    entry_dest = dest[order[heads]]
    entry_dport = dport[order[heads]]
    entry_frame = frames[order[heads]]
    out.entries = len(heads)
    out.censored = int(np.count_nonzero(entry_end > out.last_ns))

    out.starts, out.ends = np.sort(entry_start), np.sort(entry_end)
    level = np.arange(1, len(out.starts) + 1) - np.searchsorted(out.ends, out.starts, side="right")
    at = int(np.argmax(level))
    out.peak, out.peak_ns = int(level[at]), int(out.starts[at])
    seconds = (out.starts - out.starts[0]) // NS
    runs = np.flatnonzero(np.concatenate(([True], seconds[1:] != seconds[:-1])))
    counts = np.diff(np.append(runs, len(seconds)))
    busiest = int(np.argmax(counts))
    out.peak_insert_rate = int(counts[busiest])
    out.peak_insert_ns = int(out.starts[0] + seconds[runs[busiest]] * NS)

    alive = (entry_start <= out.peak_ns) & (entry_end > out.peak_ns)
    mix = np.bincount(entry_state[alive], minlength=len(END_STATES))
    out.state_mix = {END_STATES[i]: int(mix[i]) for i in np.flatnonzero(mix)}
    unreplied = ~entry_replied
    held = np.bincount(entry_src[alive])
    held_unreplied = np.bincount(entry_src[alive & unreplied], minlength=len(held))
    ranked = np.lexsort((np.arange(len(held)), -held))[:top_sources]
    out.top_sources = [{"source": str(f.address_text(i)), "entries": int(held[i]),
                        "unreplied_ratio": round(float(held_unreplied[i] / held[i]), 4)}
                       for i in ranked if held[i] > 0]
    if out.top_sources:
        mine = alive & (entry_src == ranked[0])
        out.top_source_frames = np.sort(entry_frame[mine])[:64].tolist()
    out.sources_at_peak = int(np.count_nonzero(held))
    _top_destinations(out, f, alive, entry_src, entry_dest, entry_dport, entry_replied, entry_frame)
    return out


def _top_destinations(out: Occupancy, f: _Flows, alive, src, dest, dport, replied, frames) -> None:
    """The listeners holding most entries at the peak (alive), each with its distinct sources and the share of its
    entries unanswered, into `out`."""
    rows = np.flatnonzero(alive)
    if len(rows) == 0:
        return
    listener = (dest[rows].astype(np.int64) << 16) | dport[rows].astype(np.int64)
    order = np.lexsort((src[rows], listener))
    listener, source = listener[order], src[rows][order]
    starts = np.flatnonzero(np.concatenate(([True], listener[1:] != listener[:-1])))
    fresh = np.concatenate(([True], (listener[1:] != listener[:-1]) | (source[1:] != source[:-1])))
    entries = np.diff(np.append(starts, len(listener)))
    sources = np.add.reduceat(fresh.astype(np.int64), starts)
    unreplied = np.add.reduceat((~replied[rows][order]).astype(np.int64), starts)
    out.destinations_at_peak = len(starts)
    ranked = np.lexsort((listener[starts], -entries))[:TOP_DESTINATIONS]
    out.top_destinations = [{"destination": str(f.address_text(int(listener[starts[i]] >> 16))),
                             "port": int(listener[starts[i]] & 0xFFFF), "entries": int(entries[i]),
                             "sources": int(sources[i]), "unreplied_ratio": round(float(unreplied[i] / entries[i]), 4)}
                            for i in ranked]
    first = starts[ranked[0]]
    mine = rows[order[first:first + entries[ranked[0]]]]
    out.top_destination_frames = np.sort(frames[mine])[:64].tolist()

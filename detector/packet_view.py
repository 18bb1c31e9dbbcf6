"""The packet table of the notebook API: every decoded column (detector.schema) as a typed pandas column.

One spelling of names throughout (`src_`/`dest_`, as the decoded columns and
the flow table); addresses and MACs as strings, times as UTC timestamps,
small vocabularies (protocol, ARP operation, tunnel kind, SLL packet type) as
categoricals, every other field a nullable integer or boolean that is <NA>
where the packet does not carry it (its layer bit is clear), never a made-up
0. `COLUMNS` documents each column (what it is, its unit); `LAYERS` names the
bits of the raw `layers` column for `has()`. `OTHER_NAMES` says which column
holds what Wireshark (or Zeek, or scapy) calls a field, for the error that
names a column the table does not have (`check_names`).

`frame_of(batch, names)` builds the named columns of one decoded batch, so a
reader can keep only what a question needs, batch by batch (api.Capture.
packets_frame): the decoder is the engine's, never a second parser.
"""
from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .decode.addr import ip_text_codes, mac_to_str
from .errors import QueryError
from .flows.view import FLOW_PROTO_NAMES
from .schema import (
    IP,
    IP_DF,
    IP_MF,
    L_AMSDU,
    L_ARP,
    L_DST_MAC,
    L_ETHERTYPE,
    L_FRAG,
    L_ICMP,
    L_ICMP6,
    L_IP4,
    L_IP6,
    L_MSS,
    L_MTU,
    L_PAYLOAD,
    L_PKT_TYPE,
    L_PORTS,
    L_QINQ,
    L_QUOTE,
    L_QUOTE_PORTS,
    L_SACK_PERM,
    L_SCTP,
    L_SRC_MAC,
    L_TCP,
    L_TCP_TS,
    L_TRUNCATED,
    L_TUNNEL,
    L_UDP,
    L_VLAN,
    L_WSCALE,
    TUNNEL_NAMES,
    PacketBatch,
)
from .text import TextCodes

ICMP_ANY = L_ICMP | L_ICMP6

# readable names of the `layers` bits (Capture.has)
LAYERS = {
    "src_mac": L_SRC_MAC, "dest_mac": L_DST_MAC, "vlan": L_VLAN, "qinq": L_QINQ, "ethertype": L_ETHERTYPE,
    "ip": IP, "ipv4": L_IP4, "ipv6": L_IP6, "tcp": L_TCP, "udp": L_UDP, "sctp": L_SCTP, "icmp": L_ICMP,
    "icmpv6": L_ICMP6, "arp": L_ARP, "ports": L_PORTS, "fragment": L_FRAG, "mss": L_MSS, "wscale": L_WSCALE,
    "sack_permitted": L_SACK_PERM, "tcp_timestamps": L_TCP_TS, "mtu": L_MTU, "quote": L_QUOTE,
    "quote_ports": L_QUOTE_PORTS, "tunnel": L_TUNNEL, "truncated": L_TRUNCATED, "payload": L_PAYLOAD,
    "amsdu": L_AMSDU, "pkt_type": L_PKT_TYPE,
}

ARP_OPS = {1: "request", 2: "reply", 3: "rarp-request", 4: "rarp-reply", 8: "inarp-request", 9: "inarp-reply"}
# Linux cooked capture packet types (linux/if_packet.h)
PKT_TYPES = {0: "host", 1: "broadcast", 2: "multicast", 3: "otherhost", 4: "outgoing"}


@dataclass(frozen=True)
class Column:
    """One column of the packet table: built by `kind` from the decoded `source` column(s), valid where any bit
    of `bit` is set in `layers` (0: always)."""

    name: str
    kind: str           # int, bool, flag, time, mac, ip, ipv4, category, layers
    source: str
    bit: int
    dtype: str          # the pandas dtype
    doc: str
    unit: str = ""
    names: dict | None = None   # category: value -> name (others: the number as text, unless number_column)
    number_column: str = ""     # category: the column holding the number; a value without a name is <NA> here
    flag: int = 0               # flag: the bit of `source` that makes it True
    fragment_v6: bool = False   # an IPv6 packet carries the field only in a fragment header


def _int(name, source, bit, dtype, doc, unit=""):
    return Column(name, "int", source, bit, dtype, doc, unit)


COLUMNS: dict[str, Column] = {c.name: c for c in (
    Column("frame", "int", "frame", 0, "Int64", "Frame number across the whole input, from 1 (tshark frame.number)"),
    Column("time", "time", "ts_ns", 0, "datetime64[ns, UTC]", "Capture time of the packet", "UTC"),
    _int("caplen", "caplen", 0, "UInt32", "Bytes captured of the frame", "bytes"),
    _int("wirelen", "wirelen", 0, "UInt32", "Length of the frame on the wire", "bytes"),
    _int("iface", "iface", 0, "UInt16", "Interface number (pcapng interface index across sections; 0 in pcap)"),
    _int("linktype", "linktype", 0, "UInt16", "LINKTYPE_* of the frame's interface (tcpdump.org/linktypes)"),
    _int("epb_flags", "epb_flags", 0, "UInt32",
         "pcapng epb_flags word: bits 0-1 direction, 2-4 reception type, 5-8 FCS length, 16-31 link errors "
         "(0 where the record has none, and in pcap)"),
    Column("layers", "layers", "layers", 0, "UInt32", "Bitmask of the decoded layers (Capture.has reads it)"),
    Column("src_mac", "mac", "src_mac", L_SRC_MAC, "string", "Source MAC address"),
    Column("dest_mac", "mac", "dest_mac", L_DST_MAC, "string", "Destination MAC address"),
    Column("pkt_type", "category", "pkt_type", L_PKT_TYPE, "category",
           "Linux cooked capture (SLL/SLL2) packet type: host, broadcast, multicast, otherhost, outgoing",
           names=PKT_TYPES),
    _int("vlan", "vlan_outer", L_VLAN, "UInt16", "Outer 802.1Q/802.1ad VLAN ID"),
    _int("vlan_inner", "vlan_inner", L_QINQ, "UInt16", "Inner VLAN ID (Q-in-Q)"),
    _int("ethertype", "ethertype", L_ETHERTYPE, "UInt16", "EtherType of the innermost link header"),
    _int("ip_version", "ip_version", IP, "UInt8", "IP version (4 or 6) of the (innermost) IP header"),
    Column("src_ip", "ip", "src_ip", IP, "string", "Source IP address (of the innermost IP header in a tunnel)"),
    Column("dest_ip", "ip", "dest_ip", IP, "string", "Destination IP address"),
    Column("proto", "category", "proto", IP, "category",
           "Name of the transport protocol after IPv6 extension headers, as the flow table's proto: tcp, udp, "
           "icmp, icmpv6, sctp; <NA> for another (its number is in ip_proto)",
           names=FLOW_PROTO_NAMES, number_column="ip_proto"),
    _int("ip_proto", "proto", IP, "UInt8", "IANA number of the transport protocol after IPv6 extension headers "
         "(tshark ip.proto, or the last IPv6 next header)"),
    _int("ttl", "ttl", IP, "UInt8", "IPv4 TTL or IPv6 hop limit", "hops"),
    Column("ip_id", "int", "ip_id", IP, "UInt32", "IPv4 identification; IPv6 fragment header identification "
           "(<NA> without one; an atomic fragment's ID 0 reads <NA>)", fragment_v6=True),
    _int("ip_len", "ip_len", IP, "UInt32", "IPv4 total length; IPv6 40 + payload length", "bytes"),
    Column("ip_df", "flag", "ip_flags", L_IP4, "boolean", "IPv4 Don't Fragment flag", flag=IP_DF),
    Column("ip_mf", "flag", "ip_flags", IP, "boolean", "More Fragments flag (IPv4 header or IPv6 fragment header)",
           flag=IP_MF, fragment_v6=True),
    Column("frag_offset", "int", "frag_offset", IP, "UInt32", "Fragment offset (tshark's ip.frag_offset times 8)",
           "bytes", fragment_v6=True),
    _int("flow_label", "flow_label", L_IP6, "UInt32", "IPv6 flow label, 20 bits (RFC 6437; tshark ipv6.flow); <NA> "
         "for IPv4"),
    _int("src_port", "src_port", L_PORTS, "UInt16", "Source port (TCP, UDP, SCTP, DCCP, UDP-Lite)"),
    _int("dest_port", "dest_port", L_PORTS, "UInt16", "Destination port"),
    _int("tcp_flags", "tcp_flags", L_TCP, "UInt16", "TCP flags, 9 bits: NS CWR ECE URG ACK PSH RST SYN FIN"),
    _int("tcp_seq", "tcp_seq", L_TCP, "UInt32", "TCP sequence number (raw, not relative)"),
    _int("tcp_ack", "tcp_ack", L_TCP, "UInt32", "TCP acknowledgement number (raw)"),
    _int("tcp_window", "tcp_window", L_TCP, "UInt16", "TCP window field, unscaled", "bytes"),
    _int("tcp_mss", "tcp_mss", L_MSS, "UInt16", "TCP MSS option", "bytes"),
    _int("tcp_wscale", "tcp_wscale", L_WSCALE, "UInt8", "TCP window scale option (shift count)"),
    Column("tcp_sack_permitted", "flag", "layers", L_TCP, "boolean", "TCP SACK-permitted option present",
           flag=L_SACK_PERM),
    _int("tcp_tsval", "tcp_tsval", L_TCP_TS, "UInt32", "TCP timestamp option value (sender's clock ticks)"),
    _int("tcp_tsecr", "tcp_tsecr", L_TCP_TS, "UInt32", "TCP timestamp echo reply"),
    _int("payload_len", "payload_len", L_PAYLOAD, "UInt32",
         "Transport payload per the headers' lengths (on the wire, not captured)", "bytes"),
    _int("l3_off", "l3_off", IP, "UInt16", "Offset of the (innermost) IP header in the frame", "bytes"),
    _int("l4_off", "l4_off", IP, "UInt16", "Offset of the transport header in the frame", "bytes"),
    _int("payload_off", "payload_off", L_PAYLOAD, "UInt16", "Offset of the transport payload in the frame",
         "bytes"),
    _int("icmp_type", "icmp_type", ICMP_ANY, "UInt8", "ICMP or ICMPv6 type"),
    _int("icmp_code", "icmp_code", ICMP_ANY, "UInt8", "ICMP or ICMPv6 code"),
    _int("icmp_mtu", "icmp_mtu", L_MTU, "UInt32",
         "Next-hop MTU of ICMP 3/4 (fragmentation needed) or ICMPv6 Packet Too Big", "bytes"),
    Column("quote_src_ip", "ip", "quote_src_ip", L_QUOTE, "string", "Source address of the IP header an ICMP "
           "error quotes"),
    Column("quote_dest_ip", "ip", "quote_dest_ip", L_QUOTE, "string", "Destination address of the quoted header"),
    Column("quote_proto", "category", "quote_proto", L_QUOTE, "category", "Name of the quoted header's protocol, "
           "as proto (<NA> for one without a name: its number is in quote_ip_proto)",
           names=FLOW_PROTO_NAMES, number_column="quote_ip_proto"),
    _int("quote_ip_proto", "quote_proto", L_QUOTE, "UInt8", "IANA number of the quoted header's protocol"),
    _int("quote_src_port", "quote_src_port", L_QUOTE_PORTS, "UInt16", "Source port of the quoted packet"),
    _int("quote_dest_port", "quote_dest_port", L_QUOTE_PORTS, "UInt16", "Destination port of the quoted packet"),
    Column("arp_op", "category", "arp_op", L_ARP, "category", "ARP operation: request, reply, ...",
           names=ARP_OPS),
    Column("arp_sha", "mac", "arp_sha", L_ARP, "string", "ARP sender hardware address"),
    Column("arp_spa", "ipv4", "arp_spa", L_ARP, "string", "ARP sender protocol address"),
    Column("arp_tha", "mac", "arp_tha", L_ARP, "string", "ARP target hardware address"),
    Column("arp_tpa", "ipv4", "arp_tpa", L_ARP, "string", "ARP target protocol address"),
    _int("msdu_count", "msdu_count", L_AMSDU, "UInt16", "Subframes of an 802.11 A-MSDU (the row is the first)"),
    Column("tunnel", "category", "tunnel", L_TUNNEL, "category",
           "Outermost encapsulation removed: ipip, gre, vxlan, geneve, teredo, gtp, ayiya, erspan",
           names=TUNNEL_NAMES),
    Column("outer_src_ip", "ip", "outer_src_ip", L_TUNNEL, "string", "Source address of a tunnel's outer IP "
           "header"),
    Column("outer_dest_ip", "ip", "outer_dest_ip", L_TUNNEL, "string", "Destination address of the outer header"),
    Column("outer_proto", "category", "outer_proto", L_TUNNEL, "category", "Name of the protocol the outer IP "
           "header carries, as proto (udp for VXLAN or Geneve; <NA> for GRE, IP in IP: its number is in "
           "outer_ip_proto)", names=FLOW_PROTO_NAMES, number_column="outer_ip_proto"),
    _int("outer_ip_proto", "outer_proto", L_TUNNEL, "UInt8", "IANA number of the protocol the outer IP header "
         "carries (47 GRE, 4 IPv4 in IP, 41 IPv6 in IP, 17 UDP)"),
    _int("outer_src_port", "outer_src_port", L_TUNNEL, "UInt16", "Outer UDP source port (0 unless the tunnel "
         "rides on UDP)"),
    _int("outer_dest_port", "outer_dest_port", L_TUNNEL, "UInt16", "Outer UDP destination port"),
    Column("truncated", "flag", "layers", 0, "boolean", "Headers cut short by the snapshot length, or malformed",
           flag=L_TRUNCATED),
    _int("fingerprint", "fingerprint", 0, "UInt64",
         "64-bit hash of the frame's captured bytes (equal frames, e.g. a loop's copies, share it)"),
    _int("rss_queue", "rss_queue", IP, "UInt16",
         "Receive queue a NIC's Toeplitz RSS would pick (detector.rss defaults: 16 queues)"),
)}

# columns built from two decoded columns (an address's halves)
_HALVES = ("src_ip", "dest_ip", "quote_src_ip", "quote_dest_ip", "outer_src_ip", "outer_dest_ip")


def sources(names) -> set[str]:
    """The decoded columns (detector.schema) that the packet columns `names` are built from."""
    out = {"layers"}
    for name in names:
        column = COLUMNS[name]
        if column.fragment_v6:
            out.add("ip_id")
        if column.source in _HALVES:
            out |= {f"{column.source}_hi", f"{column.source}_lo"}
        else:
            out.add(column.source)
    return out


_BOTH_PORTS = "src_port or dest_port (src_port == 80 or dest_port == 80)"
_BOTH_IPS = "src_ip or dest_ip (src_ip == '10.0.0.1' or dest_ip == '10.0.0.1')"
_BOTH_MACS = "src_mac or dest_mac"
_PROTO_NUMBER = "ip_proto (the number; proto is its name: ip_proto == 6 or proto == 'tcp')"
# pandas' query reads `&` as `and`: a bit is tested with // and % (SYN, 0x002: tcp_flags // 2 % 2 == 1)
_FLAG_BITS = ("tcp_flags (9 bits: NS CWR ECE URG ACK PSH RST SYN FIN); SYN set: tcp_flags // 2 % 2 == 1, "
              "RST (0x004): tcp_flags // 4 % 2 == 1")
# What Wireshark's display filters (and Zeek's conn.log, scapy) call the fields of the packet table: the hint of
# the error naming a column the table does not have. Wireshark's tcp.seq and tcp.ack are relative to the
# connection's first; the table's are the raw numbers (tcp.seq_raw).
OTHER_NAMES = {
    "frame.number": "frame", "frame.time": "time", "frame.time_epoch": "time", "frame.len": "wirelen",
    "frame.cap_len": "caplen", "frame.interface_id": "iface", "eth.src": "src_mac", "eth.dst": "dest_mac",
    "eth.addr": _BOTH_MACS, "eth.type": "ethertype", "sll.pkttype": "pkt_type", "vlan.id": "vlan",
    "ip.src": "src_ip", "ip.dst": "dest_ip", "ip.addr": _BOTH_IPS, "ipv6.src": "src_ip", "ipv6.dst": "dest_ip",
    "ipv6.addr": _BOTH_IPS, "ip.version": "ip_version", "ip.proto": _PROTO_NUMBER, "ipv6.nxt": _PROTO_NUMBER,
    "ip.ttl": "ttl", "ipv6.hlim": "ttl", "ip.id": "ip_id", "ip.len": "ip_len", "ip.flags.df": "ip_df",
    "ip.flags.mf": "ip_mf", "ip.frag_offset": "frag_offset", "ipv6.flow": "flow_label", "tcp.port": _BOTH_PORTS,
    "udp.port": _BOTH_PORTS,
    "sctp.port": _BOTH_PORTS, "tcp.srcport": "src_port", "udp.srcport": "src_port", "sctp.srcport": "src_port",
    "tcp.dstport": "dest_port", "udp.dstport": "dest_port", "sctp.dstport": "dest_port", "tcp.flags": _FLAG_BITS,
    "tcp.seq": "tcp_seq (the raw number, Wireshark's tcp.seq_raw)", "tcp.seq_raw": "tcp_seq",
    "tcp.ack": "tcp_ack (the raw number, Wireshark's tcp.ack_raw)", "tcp.ack_raw": "tcp_ack",
    "tcp.window_size_value": "tcp_window", "tcp.options.mss_val": "tcp_mss", "tcp.options.wscale.shift": "tcp_wscale",
    "tcp.options.timestamp.tsval": "tcp_tsval", "tcp.options.timestamp.tsecr": "tcp_tsecr", "tcp.len": "payload_len",
    "icmp.type": "icmp_type", "icmpv6.type": "icmp_type", "icmp.code": "icmp_code", "icmpv6.code": "icmp_code",
    "icmp.mtu": "icmp_mtu", "icmpv6.mtu": "icmp_mtu", "arp.opcode": "arp_op", "arp.src.hw_mac": "arp_sha",
    "arp.src.proto_ipv4": "arp_spa", "arp.dst.hw_mac": "arp_tha", "arp.dst.proto_ipv4": "arp_tpa",
    "id.orig_h": "src_ip", "id.resp_h": "dest_ip", "id.orig_p": "src_port", "id.resp_p": "dest_port",
    "sport": "src_port", "dport": "dest_port",
}
# Names close enough to a column's (difflib's ratio) to be offered as what was meant.
NEAREST_CUTOFF = 0.6


def unknown_column(name: str) -> str:
    """What to write instead of `name`, a column the packet table does not have: the column holding Wireshark's
    (or Zeek's, scapy's) field of that name, the layer test for a protocol's name, else the nearest columns."""
    if name in OTHER_NAMES:
        return f"no packet column '{name}': here that is {OTHER_NAMES[name]}"
    if name.startswith("tcp.flags."):
        return f"no packet column '{name}': here that is {_FLAG_BITS}"
    layer = name.lower()
    if layer in LAYERS and layer not in COLUMNS:
        keep = f"proto == '{layer}' keeps its packets; " if layer in FLOW_PROTO_NAMES.values() else ""
        return f"no packet column '{name}': {layer} is a layer, not a column: {keep}Capture.has('{layer}') reads it"
    nearest = difflib.get_close_matches(name.replace(".", "_"), COLUMNS, n=3, cutoff=NEAREST_CUTOFF)
    hint = f" (nearest: {', '.join(nearest)})" if nearest else ""
    return f"no packet column '{name}'{hint}; Capture.describe() lists the columns"


def check_names(names) -> list[str]:
    """`names` as a list, each a packet column; a QueryError names the first unknown one and what to write
    instead."""
    names = list(names)
    unknown = [n for n in names if n not in COLUMNS]
    if unknown:
        raise QueryError(unknown_column(str(unknown[0])))
    return names


def frame_of(cols: dict[str, np.ndarray], names) -> pd.DataFrame:
    """The packet columns `names` of one batch's decoded columns `cols` (at least `sources(names)`)."""
    return pd.DataFrame(arrays_of(cols, names), copy=False)


def arrays_of(cols: dict[str, np.ndarray], names) -> dict[str, object]:
    """frame_of's columns as pandas arrays, without a DataFrame (which costs a batch more than its columns)."""
    layers = np.asarray(cols["layers"], dtype=np.uint32)
    return {name: _build(COLUMNS[name], cols, layers) for name in names}


def _strings(text: TextCodes, valid: np.ndarray):
    """A string column of `text`'s rows, <NA> where not `valid`.

    With pandas' Arrow strings (pyarrow installed) the column's buffers are
    made here: each row's bytes gathered from its distinct value's, one
    exactly sized data buffer and its offsets, no Python str per row and no
    builder growing as it goes (packets_frame keeps one such piece a batch).
    """
    if pd.StringDtype().storage != "pyarrow":
        return pd.array(np.where(valid, text.text(), None) if len(valid) else np.zeros(0, object), dtype="string")
    import pyarrow as pa

    blob, starts, lengths = text.value_bytes()
    codes = np.asarray(text.codes, dtype=np.intp)
    sizes = np.where(valid, lengths[codes], 0) if len(codes) else np.zeros(0, dtype=np.int64)
    offsets = np.zeros(len(codes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    # byte j of row i is byte j of its value: one index per byte of the column
    at = np.repeat(starts[codes] - offsets[:-1], sizes) + np.arange(offsets[-1])
    nulls = len(valid) - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    array = pa.Array.from_buffers(pa.large_string(), len(codes), [bitmap, pa.py_buffer(offsets),
                                                                  pa.py_buffer(blob[at])], null_count=nulls)
    return pd.arrays.ArrowStringArray(array)


def _valid(column: Column, cols: dict, layers: np.ndarray) -> np.ndarray:
    if column.bit == 0:
        return np.ones(len(layers), dtype=bool)
    valid = (layers & np.uint32(column.bit)) != 0
    if column.fragment_v6:
        # IPv6 has these fields only in a fragment header: a fragment, or an atomic one (its ID non-zero)
        v6 = (layers & np.uint32(L_IP6)) != 0
        fragment = ((layers & np.uint32(L_FRAG)) != 0) | (np.asarray(cols["ip_id"]) != 0)
        valid &= ~v6 | fragment
    return valid


_UTC = pd.DatetimeTZDtype("ns", "UTC")


@functools.lru_cache(maxsize=256)
def _category_dtype(categories: tuple[str, ...]) -> pd.CategoricalDtype:
    """The dtype of these categories, made (and checked) once, not once a batch."""
    return pd.CategoricalDtype(list(categories))


def _build(column: Column, cols: dict, layers: np.ndarray):
    valid = _valid(column, cols, layers)
    kind = column.kind
    if kind == "time":
        # the nanoseconds as they are (batch_columns copied them), seen as UTC times: no conversion pass
        return pd.array(np.asarray(cols["ts_ns"], dtype=np.int64).view("M8[ns]"), copy=False).view(_UTC)
    if kind in ("int", "layers"):
        values = np.asarray(cols[column.source]).astype(column.dtype.lower(), copy=False)
        return pd.arrays.IntegerArray(values, ~valid)
    if kind == "flag":
        values = (np.asarray(cols[column.source]).astype(np.uint32) & np.uint32(column.flag)) != 0
        return pd.arrays.BooleanArray(values, ~valid)
    if kind == "mac":
        distinct, codes = np.unique(np.asarray(cols[column.source], dtype=np.uint64), return_inverse=True)
        return _strings(TextCodes(codes.reshape(-1), mac_to_str(distinct)), valid)
    if kind in ("ip", "ipv4"):
        if kind == "ip":
            hi, lo = cols[f"{column.source}_hi"], cols[f"{column.source}_lo"]
        else:   # an IPv4 address as the schema's IPv4-mapped halves
            lo = np.asarray(cols[column.source], dtype=np.uint64) | np.uint64(0xFFFF_0000_0000)
            hi = np.zeros(len(lo), dtype=np.uint64)
        return _strings(ip_text_codes(hi, lo), valid)
    if kind == "category":
        values = np.asarray(cols[column.source])
        if len(values) and values.dtype.kind == "u" and values.dtype.itemsize <= 2:
            # small numbers (protocol, ARP op, ...): the distinct ones counted in order, not sorted
            distinct = np.flatnonzero(np.bincount(values))
            lookup = np.zeros(int(distinct[-1]) + 1, dtype=np.int64)
            lookup[distinct] = np.arange(len(distinct))
            codes = lookup[values]
        else:
            distinct, codes = np.unique(values.astype(np.int64), return_inverse=True)
        if column.number_column:
            # names only, a number without one <NA> (its number is in number_column); every name a category, so
            # that the dtype is the same in every batch and capture, and a table without any (ARP only) keeps it
            labels = [column.names.get(int(v)) for v in distinct]
            categories = list(dict.fromkeys(column.names.values()))
        else:
            labels = [column.names.get(int(v), str(int(v))) for v in distinct]
            # two numbers may share a label (a TUNNEL_NAMES entry of ""): categories must be unique
            categories = list(dict.fromkeys(labels))
        remap = np.array([categories.index(label) if label is not None else -1 for label in labels], dtype=np.int64)
        codes = np.where(valid, remap[codes.reshape(-1)] if len(values) else codes, -1)
        return pd.Categorical.from_codes(codes, dtype=_category_dtype(tuple(categories)))
    raise AssertionError(f"unknown column kind {kind}")


def describe() -> pd.DataFrame:
    """One row per packet column: name, dtype, unit, when it is <NA>, what it is."""
    rows = []
    for c in COLUMNS.values():
        valid_when = "always" if c.bit == 0 else " or ".join(
            name for name, bit in LAYERS.items() if bit == c.bit and name != "ip") or \
            " or ".join(name for name, bit in LAYERS.items() if bit & c.bit and bit != IP)
        rows.append({"column": c.name, "dtype": c.dtype, "unit": c.unit, "valid_when": valid_when,
                     "description": c.doc})
    return pd.DataFrame(rows)


def batch_columns(batch: PacketBatch, names, extra: dict | None = None) -> dict[str, np.ndarray]:
    """The decoded columns of `batch` that `names` need (copies: the batch's buffers are reused), plus
    `extra` (computed columns such as rss_queue)."""
    need = sources(names) - set(extra or ())
    out = {name: np.array(batch[name]) for name in need}
    out.update(extra or {})
    return out

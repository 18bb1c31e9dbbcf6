"""The notebook's packet table: every decoded column, typed, <NA> where the packet lacks the field, against
tshark on real and bundled captures; projection and filtering batch by batch; where= read before the capture,
its mistakes named; layers by name."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

import detector
from detector import api, engine, packet_view
from detector.errors import QueryError, UsageError
from detector.flows.view import FLOW_PROTO_NAMES
from detector.schema import PACKET_COLUMNS, RAW_COLUMNS
from tests._rules import batch_of, rows

CAPTURES = Path(__file__).resolve().parents[1] / "captures"
ARP_SPOOFING = "lucaderi-sgr/2022/Favilli/tests/na-arpSpoofing.pcap"
ZEEK = "zeek/testing/btest/Traces"
# each packet as it came: tshark dissects a fragmented segment's TCP header in its first fragment, as the decoder
NO_REASSEMBLY = ("-o", "ip.defragment:FALSE", "-o", "ipv6.defragment:FALSE")
IP_TCP = ["ttl", "flow_label", "ip_id", "ip_len", "ip_df", "ip_mf", "frag_offset", "proto", "ip_proto", "tcp_seq",
          "tcp_ack", "tcp_window", "tcp_mss", "tcp_wscale", "tcp_tsval", "tcp_tsecr"]


NEXT_HEADER = ("ip.proto", "ipv6.fraghdr.nxt", "ipv6.routing.nxt", "ipv6.dstopts.nxt", "ipv6.hopopts.nxt", "ipv6.nxt")


def _number(text: str, field: str = "") -> str:
    return str(int(text, 0)) if text else ""


def _flag(text: str, field: str = "") -> str:
    return {"1": "True", "0": "False", "True": "True", "False": "False"}.get(text, text)


# packet column -> (tshark fields, first non-empty wins; converter of tshark's text)
ORACLE = {
    "ttl": (("ip.ttl", "ipv6.hlim"), _number),
    "flow_label": (("ipv6.flow",), _number),
    "ip_id": (("ip.id", "ipv6.fraghdr.ident"), _number),
    "ip_len": (("ip.len", "ipv6.plen"), lambda t, f: str(int(t, 0) + (40 if f == "ipv6.plen" else 0)) if t else ""),
    "ip_df": (("ip.flags.df",), _flag),
    "ip_mf": (("ip.flags.mf", "ipv6.fraghdr.more"), _flag),
    # tshark 4.0 gives the offset in 8-byte units, the packet table in bytes
    "frag_offset": (("ip.frag_offset", "ipv6.fraghdr.offset"), lambda t, f: str(int(t, 0) * 8) if t else ""),
    "tcp_seq": (("tcp.seq_raw",), _number),
    "tcp_ack": (("tcp.ack_raw",), _number),
    "tcp_window": (("tcp.window_size_value",), _number),
    "tcp_mss": (("tcp.options.mss_val",), _number),
    "tcp_wscale": (("tcp.options.wscale.shift",), _number),
    "tcp_tsval": (("tcp.options.timestamp.tsval",), _number),
    "tcp_tsecr": (("tcp.options.timestamp.tsecr",), _number),
    "icmp_type": (("icmp.type", "icmpv6.type"), _number),
    "icmp_code": (("icmp.code", "icmpv6.code"), _number),
    "icmp_mtu": (("icmp.mtu", "icmpv6.mtu"), _number),
    "arp_op": (("arp.opcode",), lambda t, f: packet_view.ARP_OPS.get(int(t), t) if t else ""),
    "arp_sha": (("arp.src.hw_mac",), lambda t, f: t),
    "arp_spa": (("arp.src.proto_ipv4",), lambda t, f: t),
    "arp_tha": (("arp.dst.hw_mac",), lambda t, f: t),
    "arp_tpa": (("arp.dst.proto_ipv4",), lambda t, f: t),
    "ethertype": (("eth.type",), _number),
    # the transport after IPv6 extension headers: the next header of the last one; its name where the flow table
    # has one (empty where it has none), its number always
    "proto": (NEXT_HEADER, lambda t, f: FLOW_PROTO_NAMES.get(int(t), "") if t else ""),
    "ip_proto": (NEXT_HEADER, _number),
}


def _ours(series: pd.Series) -> list[str]:
    return ["" if pd.isna(v) else str(v) for v in series.astype(object)]


def _compare(tshark, path, names, display_filter=None):
    """Each of `names` (ORACLE) agrees with tshark on every frame of `path` that `display_filter` keeps (tshark's
    first occurrence of a field: the outer header where an ICMP error quotes another)."""
    fields = list(dict.fromkeys(f for name in names for f in ORACLE[name][0]))     # proto and ip_proto share theirs
    rows = tshark.fields(path, "frame.number", *fields, display_filter=display_filter,
                         options=("-E", "occurrence=f", *NO_REASSEMBLY))
    packets = detector.open(path).packets.set_index("frame")
    assert rows, "the filter keeps no frame"
    checked = 0
    for name in names:
        tfields, convert = ORACLE[name]
        at = [fields.index(f) + 1 for f in tfields]
        expected = [convert(*next(((r[i], fields[i - 1]) for i in at if r[i]), ("", ""))) for r in rows]
        got = _ours(packets.loc[[int(r[0]) for r in rows], name])
        bad = [(int(r[0]), e, g) for r, e, g in zip(rows, expected, got) if e != g]
        assert not bad, f"{path.name} {name}: (frame, tshark, ours) {bad[:5]}"
        checked += sum(1 for e in expected if e)
    assert checked > 0


def test_every_decoded_column_is_a_packet_column():
    built = {c.source for c in packet_view.COLUMNS.values()} | {f"{s}_{h}" for s in packet_view._HALVES
                                                                  for h in ("hi", "lo")}
    left_out = set(PACKET_COLUMNS) | set(RAW_COLUMNS) - built - {"offset"}
    assert left_out - built == {"offset"} - {"offset"}, left_out - built
    described = packet_view.describe()
    assert described["column"].tolist() == list(packet_view.COLUMNS)
    assert described["description"].str.len().min() > 10


def test_arp_fields_agree_with_tshark_on_a_real_arp_spoofing_capture(tshark, captures_real):
    # the new user's capture of the issue: the spoofer's replies must be readable without leaving the notebook
    _compare(tshark, captures_real / ARP_SPOOFING, ["arp_op", "arp_sha", "arp_spa", "arp_tha", "arp_tpa", "ethertype"])


@pytest.mark.parametrize("name", ["tcp/options.pcap", "tcp/option-sack.pcap", "tcp/window-scale-range.pcap",
                                  "ipv4/fragmented-syn.pcap", "ipv4/fragmented-4.pcap", "ipv6-http-atomic-frag.pcap"])
def test_ip_and_tcp_fields_agree_with_tshark_on_real_captures(tshark, captures_real, name):
    path = captures_real / ZEEK / name
    # named exception: the decoder keeps no bit for an IPv6 fragment header that fragments nothing (an atomic
    # fragment, RFC 6946); with identification 0 the table cannot tell it from no header and its fragment
    # fields read <NA>
    _compare(tshark, path, IP_TCP, "(ip or ipv6) and not ipv6.fraghdr.ident == 0")
    atomic = [int(r[0]) for r in tshark.fields(path, "frame.number", display_filter="ipv6.fraghdr.ident == 0")]
    fields = detector.open(path).packets.set_index("frame").loc[atomic, ["ip_id", "ip_mf", "frag_offset"]]
    assert fields.isna().all().all()
    sack = tshark.fields(path, "frame.number", display_filter="tcp.options.sack_perm", options=NO_REASSEMBLY)
    packets = detector.open(path).packets
    sack_permitted = packets["tcp_sack_permitted"].fillna(False).astype(bool)
    assert packets.loc[sack_permitted, "frame"].tolist() == [int(r[0]) for r in sack]


@pytest.mark.parametrize("name", ["pmtud-blackhole-ipv4.pcapng", "pmtud-blackhole-ipv6-vlan.pcapng"])
def test_icmp_errors_and_their_quotes_agree_with_tshark(tshark, name):
    path = CAPTURES / name
    # the outer header's flow label, not the quoted packet's (tshark's first occurrence)
    _compare(tshark, path, ["icmp_type", "icmp_code", "icmp_mtu", "ttl", "flow_label", "proto", "ip_proto"],
             "icmp or icmpv6")
    _compare(tshark, path, ["tcp_seq", "tcp_ack", "tcp_window", "tcp_mss"], "tcp and not icmp and not icmpv6")
    errors = detector.open(path).packets.dropna(subset=["icmp_mtu"])
    quoted = tshark.fields(path, "frame.number", "ip.src", "ipv6.src", "tcp.srcport",
                           display_filter="icmp.type == 3 or icmpv6.type == 2", options=("-E", "occurrence=l"))
    assert len(errors) == len(quoted) > 0
    assert errors["quote_src_ip"].tolist() == [r[1] or r[2] for r in quoted]
    assert errors["quote_src_port"].astype(str).tolist() == [r[3] for r in quoted]
    # the quoted header's protocol, its name and number as proto and ip_proto have them
    numbers = tshark.fields(path, "ip.proto", "ipv6.nxt", display_filter="icmp.type == 3 or icmpv6.type == 2",
                            options=("-E", "occurrence=l"))
    assert errors["quote_ip_proto"].astype(str).tolist() == [r[0] or r[1] for r in numbers]
    assert errors["quote_proto"].astype(str).tolist() == [FLOW_PROTO_NAMES[int(r[0] or r[1])] for r in numbers]


@pytest.mark.parametrize("name", ["suricata-verify/tests/firewall/ruletype-firewall-117-ftp-all-data-ipv6/input.pcap",
                                  "ndpi/tests/cfgs/default/pcap/custom_rules_ipv6.pcapng"])
def test_the_ipv6_flow_label_agrees_with_tshark(tshark, captures_real, name):
    # real IPv6 captures whose senders set flow labels (RFC 6437): 20 bits, <NA> on every IPv4 or ARP frame
    path = captures_real / name
    _compare(tshark, path, ["flow_label"])
    labels = detector.open(path).packets["flow_label"].dropna()
    assert (labels > 0xFFFF).any() and (labels < 1 << 20).all()


def test_a_tunnelled_packet_has_its_outer_header(tshark):
    path = CAPTURES / "rss-vxlan-tunnel.pcap"
    packets = detector.open(path).packets
    rows = tshark.fields(path, "frame.number", "ip.src", "ip.dst", "udp.dstport", display_filter="vxlan",
                         options=("-E", "occurrence=f"))
    tunnelled = packets[packets["tunnel"] == "vxlan"]
    assert tunnelled["frame"].tolist() == [int(r[0]) for r in rows] and len(rows) > 0
    assert tunnelled["outer_src_ip"].tolist() == [r[1] for r in rows]
    assert tunnelled["outer_dest_ip"].tolist() == [r[2] for r in rows]
    assert tunnelled["outer_dest_port"].astype(str).tolist() == [r[3] for r in rows]
    assert (tunnelled["outer_proto"] == "udp").all() and (tunnelled["outer_ip_proto"] == 17).all()
    assert (tunnelled["src_ip"] != tunnelled["outer_src_ip"]).all()
    plain = packets[packets["tunnel"].isna()]
    assert len(plain) and plain[["outer_src_ip", "outer_proto", "outer_dest_port"]].isna().all().all()


def test_a_gre_tunnels_outer_protocol_has_a_number_and_no_name(tshark, captures_real):
    # GRE (47) has no name in proto's vocabulary: outer_proto <NA>, its number in outer_ip_proto, as tshark's
    # outer ip.proto; "udp" and "47" never share a column
    path = captures_real / "packetlife/pcaps/GRE.cap"
    rows = tshark.fields(path, "frame.number", "ip.proto", display_filter="gre", options=("-E", "occurrence=f"))
    packets = detector.open(path).packets.set_index("frame")
    tunnelled = packets.loc[[int(r[0]) for r in rows]]
    assert len(rows) > 0 and (tunnelled["tunnel"] == "gre").all()
    assert tunnelled["outer_ip_proto"].astype(str).tolist() == [r[1] for r in rows] == ["47"] * len(rows)
    assert tunnelled["outer_proto"].isna().all()


def _address_batch():
    """Decoded columns of six packets: IPv4 and IPv6 (compressed, full, mapped) addresses, one packet without IP
    (its halves hold a stale value that must not show), MACs on all but the last."""
    from detector.decode.addr import str_to_ip
    from detector.schema import L_IP4, L_IP6, L_SRC_MAC

    texts = ["10.0.0.1", "2001:db8::1", "10.0.0.1", "fe80::1:2:3:4", None, "2001:db8:1:2:3:4:5:6"]
    halves = [str_to_ip(t or "192.0.2.9") for t in texts]
    layers = [0 if t is None else (L_IP6 if ":" in t else L_IP4) for t in texts]
    layers = np.array([bits | (L_SRC_MAC if i < 5 else 0) for i, bits in enumerate(layers)], dtype=np.uint32)
    macs = np.array([0x0200_0000_0001, 0x0200_0000_0002, 0x0200_0000_0001, 0xFFFF_FFFF_FFFF, 0x0A0B_0C0D_0E0F, 7],
                    dtype=np.uint64)
    cols = {"layers": layers, "src_ip_hi": np.array([h for h, _ in halves], dtype=np.uint64),
            "src_ip_lo": np.array([lo for _, lo in halves], dtype=np.uint64), "src_mac": macs}
    mac_texts = ["02:00:00:00:00:01", "02:00:00:00:00:02", "02:00:00:00:00:01", "ff:ff:ff:ff:ff:ff",
                 "0a:0b:0c:0d:0e:0f", None]
    return cols, texts, mac_texts


@pytest.mark.parametrize("storage", ["pyarrow", "python"])
def test_address_columns_are_the_addresses_text_and_na_without_the_layer(storage):
    cols, ips, macs = _address_batch()
    with pd.option_context("mode.string_storage", storage):
        frame = packet_view.frame_of(cols, ["src_ip", "src_mac"])
    assert frame["src_ip"].dtype == pd.StringDtype(storage)
    assert [None if pd.isna(v) else v for v in frame["src_ip"]] == ips
    assert [None if pd.isna(v) else v for v in frame["src_mac"]] == macs


def test_arrow_address_columns_hold_their_bytes_exactly():
    # the Arrow path makes the column's buffers itself: its data buffer is the rows' text, no more
    cols, ips, _macs = _address_batch()
    column = packet_view.frame_of(cols, ["src_ip"])["src_ip"].array
    (chunk,) = column._pa_array.chunks
    bitmap, offsets, data = chunk.buffers()
    assert data.size == sum(len(t) for t in ips if t) and offsets.size == 8 * (len(ips) + 1)
    assert chunk.null_count == 1 and bitmap is not None


def test_types_and_masks():
    packets = detector.open(CAPTURES / "arp-spoof-mitm.pcapng").packets
    dtypes = {name: str(dtype) for name, dtype in packets.dtypes.items()}
    assert dtypes["proto"] == dtypes["arp_op"] == dtypes["tunnel"] == "category"
    assert dtypes["src_ip"] == dtypes["arp_spa"] == "string"
    assert dtypes["tcp_seq"] == "UInt32" and dtypes["ip_df"] == "boolean"
    arp = packets["arp_op"].notna()
    assert arp.any() and (~arp).any()
    # an ARP frame has no IP fields and an IP frame no ARP fields: <NA>, never 0
    assert packets.loc[arp, ["ttl", "src_ip", "ip_df"]].isna().all().all()
    assert packets.loc[~arp, ["arp_sha", "arp_spa", "arp_op"]].isna().all().all()
    assert set(packets.loc[arp, "arp_op"]) <= {"request", "reply"}


def test_has_names_the_layers():
    capture = detector.open(CAPTURES / "arp-spoof-mitm.pcapng")
    packets = capture.packets
    assert capture.has("arp").tolist() == packets["arp_op"].notna().tolist()
    assert capture.has("ip").tolist() == packets["src_ip"].notna().tolist()
    with pytest.raises(UsageError):
        capture.has("carrier-pigeon")


def test_projection_and_filter_give_the_rows_and_columns_of_the_whole_table(monkeypatch):
    path = CAPTURES / "pmtud-blackhole-ipv4.pcapng"
    whole = detector.open(path).packets
    # small batches: the filter runs batch by batch, and categories differ from one batch to the next
    batch = batch_of(path)
    real_run = engine.run

    def run_in_small_batches(paths, consumers, label="reading", **options):
        for start in range(0, len(batch), 7):
            for consumer in consumers:
                consumer.update(rows(batch, start, start + 7))
        return real_run([], [])

    monkeypatch.setattr(engine, "run", run_in_small_batches)
    # blocks of 8 int64 (5 uint16): a batch's rows straddle them
    monkeypatch.setattr(api, "BLOCK_BYTES", 64)
    capture = detector.open(path)
    assert_frame_equal(capture.packets_frame(list(whole.columns)), whole)
    part = capture.packets_frame(["frame", "proto", "dest_port"], where="proto == 'tcp' and tcp_mss > 1400")
    expected = whole[(whole["proto"] == "tcp") & (whole["tcp_mss"] > 1400).fillna(False).astype(bool)]
    assert 0 < len(part) < len(whole)
    assert list(part.columns) == ["frame", "proto", "dest_port"]
    assert part["frame"].tolist() == expected["frame"].tolist()
    assert part["dest_port"].tolist() == expected["dest_port"].tolist()
    assert str(part["proto"].dtype) == "category"
    called = capture.packets_frame("frame", where=lambda frame: frame["frame"] % 2 == 0)
    assert called["frame"].tolist() == [f for f in whole["frame"] if f % 2 == 0]
    with pytest.raises(ValueError, match="no packet column 'dst_port'"):
        capture.packets_frame(["dst_port"])


@pytest.mark.parametrize("columns, where, says", [
    # the three: a name pandas does not know, `=`, and (below) a protocol's name in capitals
    (["time"], "dst_port == 80", ["no packet column 'dst_port'", "nearest: dest_port, src_port"]),
    (["time"], "dest_port = 80", ["`=` assigns", "dest_port == 80"]),
    (["time"], "tcp.port == 80", ["'tcp.port'", "src_port or dest_port"]),
    (["time"], "ip.src == 10.0.0.1", ["'ip.src'", "that is src_ip"]),
    (["time"], "eth.dst == 'ff:ff:ff:ff:ff:ff'", ["'eth.dst'", "that is dest_mac"]),
    (["time"], "frame.len > 1000", ["'frame.len'", "that is wirelen"]),
    (["time"], "udp.srcport == 53 and dest_port == 53", ["'udp.srcport'", "that is src_port"]),
    (["time"], "tcp.flags.syn == 1", ["'tcp.flags.syn'", "tcp_flags", "tcp_flags // 2 % 2 == 1"]),
    (["time"], "id.resp_h == '10.0.0.1'", ["'id.resp_h'", "dest_ip"]),
    (["time"], "tcp", ["'tcp'", "a layer", "proto == 'tcp'", "Capture.has('tcp')"]),
    (["time"], "proto == 'tpc'", ["proto has no value 'tpc'", "icmp, tcp, udp, icmpv6, sctp", "ip_proto == 47"]),
    # proto holds names only: a protocol without one is compared by its number, in ip_proto
    (["time"], "proto == 89", ["proto holds names and 89 has none", "write ip_proto == 89"]),
    (["time"], "ip.proto == 89", ["'ip.proto'", "ip_proto (the number; proto is its name"]),
    (["time"], "dest_port == 80 && proto == 'tcp'", ["write `and`"]),
    (["time"], "src_ip == 10.0.0.1", ["quote the address: '10.0.0.1'"]),
    (["time"], "dest_port is None", ["dest_port.isna()"]),
    (["time"], "dest_port == 'http'", ["dest_port is a number"]),
    (["time"], "src_ip == '10.0.0'", ["'10.0.0' is not an IP address for src_ip"]),
    (["time"], "src_mac == '02:00:5e'", ["not a MAC address"]),
    (["time"], "time > 'yesterday-ish'", ["'yesterday-ish' is not a time"]),
    (["time"], "dest_port + 1", ["not a condition"]),
    (["time"], "proto < 'tcp'", ["proto < 'tcp'", "Unordered Categoricals"]),
    (["time"], "dest_port == @absent", ["@absent is no variable"]),
    (["dst_port", "time"], None, ["no packet column 'dst_port' (nearest: dest_port"]),
    (["ip.dst"], None, ["no packet column 'ip.dst': here that is dest_ip"]),
])
def test_a_mistake_in_where_or_columns_is_one_line_saying_what_to_write(monkeypatch, columns, where, says):
    def no_reading(*args, **kwargs):
        raise AssertionError("the capture was read before the query was checked")

    monkeypatch.setattr(engine, "run", no_reading)
    with pytest.raises(QueryError) as caught:
        detector.open(CAPTURES / "pmtud-blackhole-ipv6-vlan.pcapng").packets_frame(columns, where=where)
    message = str(caught.value)
    # one ValueError (pandas' own query errors are) of the project's user errors, one line
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, UsageError)
    assert "\n" not in message and message.startswith("where: " if where else "no packet column")
    for text in says:
        assert text in message


def test_where_reads_names_addresses_and_times_as_the_table_spells_them():
    path = CAPTURES / "pmtud-blackhole-ipv6-vlan.pcapng"
    capture = detector.open(path)
    whole = capture.packets
    mac, ip = "02:00:5e:10:00:80", "2001:db8:10::80"
    middle = whole["time"].iloc[len(whole) // 2]
    cases = {
        # the findings spell a protocol TCP, the packets tcp: either reads the same packets, as a number does
        "proto == 'TCP'": whole["proto"] == "tcp",
        "proto == 6": whole["proto"] == "tcp",
        "proto != 'Tcp'": whole["proto"] != "tcp",
        "proto.isin(['TCP'])": whole["proto"] == "tcp",
        "proto in ['TCP', 'ICMPv6'] and dest_port == 443": whole["proto"].isin(["tcp", "icmpv6"])
        & (whole["dest_port"] == 443),
        f"src_mac == '{mac.upper().replace(':', '-')}'": whole["src_mac"] == mac,
        "src_ip == '2001:DB8:10:0:0:0:0:80'": whole["src_ip"] == ip,
        f"dest_ip in ['{ip.upper()}'] or src_ip == '2001:db8:77::23'": whole["dest_ip"].isin([ip])
        | (whole["src_ip"] == "2001:db8:77::23"),
        f"time >= '{middle.tz_localize(None).isoformat()}'": whole["time"] >= middle,
        f"time < '{middle.tz_convert('Europe/Paris').isoformat()}'": whole["time"] < middle,
    }
    for where, expected in cases.items():
        expected = expected.fillna(False).astype(bool)
        # the columns where= reads need not be among those asked for
        got = capture.packets_frame(["frame"], where=where)
        assert 0 < len(got) < len(whole), where
        assert got["frame"].tolist() == whole.loc[expected.to_numpy(), "frame"].tolist(), where
    port = 443
    assert capture.packets_frame(["frame"], where="dest_port == @port")["frame"].tolist() == \
        whole.loc[(whole["dest_port"] == port).fillna(False).to_numpy(), "frame"].tolist()
    # the flag test the hint for Wireshark's tcp.flags.syn gives
    syn = (whole["tcp_flags"].fillna(0).astype(int) & 0x002) > 0
    assert 0 < syn.sum() < len(whole)
    assert capture.packets_frame(["frame"], where="tcp_flags // 2 % 2 == 1")["frame"].tolist() == \
        whole.loc[syn.to_numpy(), "frame"].tolist()


def test_proto_is_a_name_and_ip_proto_its_number_as_tshark_and_the_flow_table_have_them(tshark):
    # VRRP (112) and OSPF (89) have no name in the flow table's proto: <NA> in both tables, the number beside it
    path = CAPTURES / "malformed-control-plane.pcap"
    _compare(tshark, path, ["proto", "ip_proto"], "ip or ipv6")
    capture = detector.open(path)
    packets = capture.packets.dropna(subset=["ip_proto"])
    assert {112, 89, 17, 58} <= set(packets["ip_proto"].astype(int))
    assert packets.loc[packets["ip_proto"].isin([89, 112]), "proto"].isna().all()
    assert str(packets["ip_proto"].dtype) == "UInt8" and str(packets["proto"].dtype) == "category"
    flows = capture.flows
    flow_proto = {(frozenset((f.src_ip, f.dest_ip)), int(f.ip_proto)): f.proto for f in flows.itertuples()}
    for row in packets.itertuples():
        expected = flow_proto[(frozenset((row.src_ip, row.dest_ip)), int(row.ip_proto))]
        assert (pd.isna(row.proto) and pd.isna(expected)) or row.proto == expected, (row.frame, row.proto, expected)
    assert len(capture.packets_frame(["frame"], where="ip_proto == 112")) == int((packets["ip_proto"] == 112).sum())


def test_a_findings_protocol_selects_its_packets():
    capture = detector.open(CAPTURES / "pmtud-blackhole-ipv4.pcapng")
    proto = capture.findings["proto"].iloc[0]
    assert proto == "tcp"       # one vocabulary: findings name protocols as packets do
    whole = capture.packets
    got = capture.packets_frame(["frame"], where="proto == @proto")
    assert 0 < len(got) == int((whole["proto"] == "tcp").sum())


def test_the_wireshark_names_of_the_hints_are_wireshark_fields(tshark):
    listed = subprocess.run([tshark.path, "-G", "fields"], capture_output=True, text=True, check=True).stdout
    fields = {line.split("\t")[2] for line in listed.splitlines() if line.startswith("F\t")}
    dotted = [name for name in packet_view.OTHER_NAMES if "." in name and not name.startswith("id.")]
    assert len(dotted) > 40
    assert [name for name in dotted if name not in fields] == []
    # and every hint names columns of the table
    for hint in packet_view.OTHER_NAMES.values():
        assert hint.split(" ")[0] in packet_view.COLUMNS


@pytest.mark.parametrize("count", [5, 200, 40_000])
def test_kept_categories_are_the_union_of_the_batches_as_pandas_makes_it(count):
    # each batch names its own categories; the kept column maps every batch's codes onto their union, in order
    # of appearance, with codes as narrow as pandas gives that many categories (int8, int16, int32)
    rng = np.random.default_rng(count)
    labels = np.array([f"p{i}" for i in range(count)], dtype=object)
    pieces = []
    step = max(1, count // 7)
    for start in range(0, count, step):
        present = labels[start:start + step + 3]        # overlapping the next batch's
        codes = rng.integers(-1, len(present), size=50)
        pieces.append(pd.Categorical.from_codes(codes, categories=list(present)))
    kept = api._kept(pieces[0])
    for piece in pieces:
        kept.append(piece)
    joined = kept.join()
    expected = pd.api.types.union_categoricals(pieces)
    assert list(joined.categories) == list(expected.categories) == list(labels)
    assert joined.codes.dtype == expected.codes.dtype and joined.codes.tolist() == expected.codes.tolist()


def test_an_empty_selection_is_an_empty_typed_table():
    part = detector.open(CAPTURES / "arp-spoof-mitm.pcapng").packets_frame(["frame", "src_ip", "proto"],
                                                                         where="frame < 0")
    assert len(part) == 0 and list(part.columns) == ["frame", "src_ip", "proto"]


@pytest.mark.parametrize("columns", [None, ["time", "src_ip", "proto", "flow_label", "ip_df", "arp_op", "vlan"]])
def test_the_packet_table_round_trips_through_parquet(tmp_path, columns):
    # pyarrow is in the test extra (and the parquet one): every chosen type survives, categories and <NA> too
    path = CAPTURES / "pmtud-blackhole-ipv6-vlan.pcapng"
    packets = detector.open(path).packets_frame(columns)
    packets.to_parquet(tmp_path / "p.parquet")
    back = pd.read_parquet(tmp_path / "p.parquet")
    pd.testing.assert_frame_equal(back, packets)
    assert str(back["proto"].dtype) == "category" and str(back["time"].dtype) == "datetime64[ns, UTC]"
    assert back["vlan"].notna().any() and back["ip_df"].isna().any()


@pytest.mark.parametrize("by", [None, "src_mac", "proto", "dest_port"])
def test_the_packet_rate_by_any_column_counts_every_packet_of_it(by):
    import matplotlib
    matplotlib.use("Agg")
    capture = detector.open(CAPTURES / "benign-office.pcapng")     # 3 MACs, 4 protocols, 15 ports: "other"
    ax = capture.plot.rate(by=by, bin_s=0.5, top=2)
    packets = capture.packets
    expected = len(packets) if by is None else int(packets[by].notna().sum())
    # each line's steps are packets per second of 0.5 s bins: their sum times the bin is every packet counted
    drawn = sum(float(np.sum(line.get_ydata())) * 0.5 for line in ax.lines)
    assert drawn == pytest.approx(expected) and expected > 0
    labels = [line.get_label() for line in ax.lines]
    if by is None:
        assert labels == ["all packets"]
    else:
        counts = packets[by].dropna().astype(str).value_counts()
        assert labels[:2] == counts.index[:2].tolist() or sorted(labels[:2]) == sorted(counts.index[:2].tolist())
        assert "other" in labels and len(counts) > 2
    with pytest.raises(ValueError):
        capture.plot.rate(by="no_such_column")

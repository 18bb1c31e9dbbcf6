"""The flow table on crafted packet columns: direction, splitting, state, counters, merging.

Batches are built column by column from a list of packet descriptions (what
the decoder produces for those packets), so every case pins one behaviour.
The merge is also checked on real captures, cut at every packet.
"""
from __future__ import annotations

import ipaddress

import numpy as np
import pytest

from detector.decode import decode
from detector.flows import FLOW_COLUMNS, IDLE_TIMEOUT_S, FlowTable
from detector.ingest import open_capture
from detector.schema import (
    IP_MF,
    L_FRAG,
    L_ICMP,
    L_ICMP6,
    L_IP4,
    L_IP6,
    L_MSS,
    L_PAYLOAD,
    L_PORTS,
    L_TCP,
    L_TUNNEL,
    L_UDP,
    L_VLAN,
    PACKET_COLUMNS,
    RAW_COLUMNS,
    TUNNEL_VXLAN,
    PacketBatch,
)

T0 = 1_700_000_000
TCP_FLAGS = {"F": 0x01, "S": 0x02, "R": 0x04, "P": 0x08, "A": 0x10}


def addr128(text: str) -> tuple[int, int]:
    ip = ipaddress.ip_address(text)
    value = int(ipaddress.IPv6Address(f"::ffff:{ip}")) if ip.version == 4 else int(ip)
    return value >> 64, value & ((1 << 64) - 1)


def make_batch(packets: list[dict], first_frame: int = 1) -> PacketBatch:
    """PACKET_COLUMNS for packets described as dicts (t in seconds from T0, src/dst, proto, ports...)."""
    n = len(packets)
    cols = {name: np.zeros(n, dtype) for name, dtype in RAW_COLUMNS.items()}
    cols.update({name: np.zeros(n, dtype) for name, (dtype, _) in PACKET_COLUMNS.items()})
    for i, p in enumerate(packets):
        cols["frame"][i] = p.get("frame", first_frame + i)
        cols["ts_ns"][i] = round((T0 + p.get("t", i * 0.001)) * 1e9)
        cols["linktype"][i] = 1
        if "src" not in p:           # not IP (e.g. ARP)
            continue
        v6 = ":" in p["src"]
        layers = L_IP6 if v6 else L_IP4
        cols["ip_version"][i] = 6 if v6 else 4
        cols["src_ip_hi"][i], cols["src_ip_lo"][i] = addr128(p["src"])
        cols["dest_ip_hi"][i], cols["dest_ip_lo"][i] = addr128(p["dst"])
        proto = p.get("proto", 6)
        cols["proto"][i] = proto
        payload = p.get("payload", 0)
        l4 = {6: 20, 17: 8}.get(proto, 8)
        cols["ip_len"][i] = p.get("ip_len", (40 if v6 else 20) + l4 + payload)
        cols["ip_id"][i] = p.get("ip_id", 0)
        cols["frag_offset"][i] = p.get("frag_offset", 0)
        if p.get("mf"):
            cols["ip_flags"][i] = IP_MF
        if p.get("mf") or p.get("frag_offset"):
            layers |= L_FRAG
        later_fragment = p.get("frag_offset", 0) > 0
        if proto in (6, 17) and not later_fragment:
            layers |= L_PORTS | L_PAYLOAD
            cols["src_port"][i], cols["dest_port"][i] = p["sport"], p["dport"]
            cols["payload_len"][i] = payload
            if proto == 6:
                layers |= L_TCP
                cols["tcp_flags"][i] = sum(TCP_FLAGS[c] for c in p.get("flags", "A"))
                cols["tcp_seq"][i] = p.get("seq", 0)
                cols["tcp_ack"][i] = p.get("ack", 0)
                if "mss" in p:
                    layers |= L_MSS
                    cols["tcp_mss"][i] = p["mss"]
            else:
                layers |= L_UDP
        if proto in (1, 58) and not later_fragment:
            layers |= (L_ICMP6 if proto == 58 else L_ICMP) | L_PAYLOAD
            cols["icmp_type"][i], cols["icmp_code"][i] = p["type"], p.get("code", 0)
            cols["payload_len"][i] = payload
        if "vlan" in p:
            layers |= L_VLAN
            cols["vlan_outer"][i] = p["vlan"]
        if "outer" in p:
            osrc, odst, osport, odport = p["outer"]
            layers |= L_TUNNEL
            cols["tunnel"][i] = TUNNEL_VXLAN
            cols["outer_src_ip_hi"][i], cols["outer_src_ip_lo"][i] = addr128(osrc)
            cols["outer_dest_ip_hi"][i], cols["outer_dest_ip_lo"][i] = addr128(odst)
            cols["outer_proto"][i] = 17
            cols["outer_src_port"][i], cols["outer_dest_port"][i] = osport, odport
            cols["l3_off"][i] = 14 + 20 + 8 + 8 + 14
        else:
            cols["l3_off"][i] = 14
        # captured in full unless the packet says how many bytes the snapshot length kept
        cols["payload_off"][i] = cols["l3_off"][i] + (40 if v6 else 20) + l4
        cols["caplen"][i] = p.get("caplen", cols["l3_off"][i] + cols["ip_len"][i])
        cols["layers"][i] = layers
    return PacketBatch(data=np.zeros(0, np.uint8), cols=cols)


def flows_of(packets, batch_size=None, **kwargs):
    table = FlowTable(**kwargs)
    step = batch_size or max(len(packets), 1)
    for start in range(0, len(packets), step):
        table.update(make_batch(packets[start:start + step], first_frame=start + 1))
    return table


def tcp(t, src, dst, sport, dport, flags, seq=0, ack=0, payload=0, **extra):
    return {"t": t, "src": src, "dst": dst, "sport": sport, "dport": dport, "flags": flags,
            "seq": seq, "ack": ack, "payload": payload, **extra}


A, B = "10.0.0.1", "192.0.2.80"


def handshake_close(t=0.0, sport=40000, isn_a=1000, isn_b=5000, data=100):
    """A full TCP connection from A to B port 80: handshake, one request, FIN both ways."""
    a, b = isn_a, isn_b
    return [
        tcp(t + 0.000, A, B, sport, 80, "S", a, mss=1460),
        tcp(t + 0.010, B, A, 80, sport, "SA", b, a + 1, mss=1400),
        tcp(t + 0.020, A, B, sport, 80, "A", a + 1, b + 1),
        tcp(t + 0.030, A, B, sport, 80, "PA", a + 1, b + 1, payload=data),
        tcp(t + 0.040, B, A, 80, sport, "FA", b + 1, a + 1 + data),
        tcp(t + 0.050, A, B, sport, 80, "FA", a + 1 + data, b + 2),
        tcp(t + 0.060, B, A, 80, sport, "A", b + 2, a + 2 + data),
    ]


def frame(table):
    return table.to_frame()


def test_full_connection_counters_state_and_direction():
    df = frame(flows_of(handshake_close()))
    assert len(df) == 1
    f = df.iloc[0]
    assert (f.src_ip, f.src_port, f.dest_ip, f.dest_port, f.proto) == (A, 40000, B, 80, "tcp")
    assert (f.src2dst_packets, f.dst2src_packets) == (4, 3)
    assert (f.src2dst_payload_bytes, f.dst2src_payload_bytes) == (100, 0)
    assert (f.src2dst_bytes, f.dst2src_bytes) == (4 * 40 + 100, 3 * 40)
    assert (f.src_mss, f.dest_mss) == (1460, 1400)
    assert f.state == "SF"
    assert f.history == "ShADfFa"
    assert f.src2dst_tcp_flags_str == "SAFP" and f.dst2src_tcp_flags_str == "SAF"
    assert f.handshake_rtt_ms == pytest.approx(20.0)
    assert f.first_frame == 1 and f.duration_s == pytest.approx(0.06)
    assert str(f.first_seen) == "2023-11-14 22:13:20+00:00"
    assert f.community_id.startswith("1:") and (f.src2dst_retransmits, f.dst2src_retransmits) == (0, 0)


def test_finish_columns_and_types():
    cols = flows_of(handshake_close()).finish()
    assert list(cols) == list(FLOW_COLUMNS)
    for name, dtype in FLOW_COLUMNS.items():
        assert cols[name].dtype == np.dtype(dtype), name
    assert IDLE_TIMEOUT_S["tcp"] == 300.0 and IDLE_TIMEOUT_S["udp"] == 60.0


def test_src_is_syn_sender_even_when_first_packet_is_synack():
    pkts = handshake_close()
    df = frame(flows_of(pkts[1:]))          # SYN missed: the SYN-ACK comes first
    f = df.iloc[0]
    assert (f.src_ip, f.src_port, f.dest_port) == (A, 40000, 80)
    assert f.history.startswith("^")


def test_midstream_flow_flips_to_the_server_port():
    pkts = handshake_close()
    df = frame(flows_of(pkts[4:]))          # starts with B:80 -> A FIN
    f = df.iloc[0]
    assert (f.src_ip, f.dest_port) == (A, 80)


def test_reuse_after_close_starts_new_flow_but_syn_retransmission_does_not():
    first = handshake_close(0.0, isn_a=1000)
    second = handshake_close(1.0, isn_a=90000)
    df = frame(flows_of(first + second))
    assert len(df) == 2 and list(df.state) == ["SF", "SF"]
    assert list(df.first_frame) == [1, 8]
    syn = tcp(0.0, A, B, 40000, 80, "S", 1000)
    retry = [syn, dict(syn, t=1.0), dict(syn, t=3.0)]
    df = frame(flows_of(retry))
    assert len(df) == 1 and df.iloc[0].src2dst_packets == 3 and df.iloc[0].state == "S0"


def test_reuse_after_rst():
    pkts = [tcp(0.0, A, B, 40000, 80, "S", 1000), tcp(0.01, B, A, 80, 40000, "RA", 0, 1001),
            tcp(0.50, A, B, 40000, 80, "S", 1000),             # the same attempt retransmitted
            tcp(5.00, A, B, 40000, 80, "S", 7777)]             # a new attempt
    df = frame(flows_of(pkts))
    assert list(df.src2dst_packets + df.dst2src_packets) == [3, 1]
    assert list(df.state) == ["REJ", "S0"]


def test_idle_timeout_splits_flows():
    pkts = [{"t": 0.0, "src": A, "dst": B, "proto": 17, "sport": 5000, "dport": 53, "payload": 30},
            {"t": 59.0, "src": B, "dst": A, "proto": 17, "sport": 53, "dport": 5000, "payload": 60},
            {"t": 200.0, "src": A, "dst": B, "proto": 17, "sport": 5000, "dport": 53, "payload": 30}]
    df = frame(flows_of(pkts))
    assert list(df.src2dst_packets) == [1, 1] and list(df.dst2src_packets) == [1, 0]
    assert list(df.state) == ["SF", "S0"]
    assert len(frame(flows_of(pkts, idle_timeout_s=1000))) == 1
    assert len(frame(flows_of(pkts, idle_timeout_s={"udp": 30}))) == 3


@pytest.mark.parametrize("case,expected", [
    ([tcp(0, A, B, 1, 80, "S", 10)], "S0"),
    ([tcp(0, A, B, 1, 80, "S", 10), tcp(0.1, B, A, 80, 1, "RA", 0, 11)], "REJ"),
    ([tcp(0, A, B, 1, 80, "S", 10), tcp(0.1, B, A, 80, 1, "SA", 50, 11), tcp(0.2, A, B, 1, 80, "A", 11, 51),
      tcp(0.3, A, B, 1, 80, "RA", 11, 51)], "RSTO"),
    ([tcp(0, A, B, 1, 80, "S", 10), tcp(0.1, B, A, 80, 1, "SA", 50, 11), tcp(0.2, A, B, 1, 80, "A", 11, 51),
      tcp(0.3, B, A, 80, 1, "R", 51)], "RSTR"),
    ([tcp(0, A, B, 1, 80, "S", 10), tcp(0.1, B, A, 80, 1, "SA", 50, 11), tcp(0.2, A, B, 1, 80, "A", 11, 51)],
     "S1"),
    ([tcp(0, A, B, 1, 80, "S", 10), tcp(0.1, A, B, 1, 80, "R", 11)], "RSTOS0"),
    ([tcp(0, A, B, 1, 80, "S", 10), tcp(0.1, A, B, 1, 80, "F", 11)], "SH"),
    ([tcp(0, A, B, 5000, 6000, "PA", 10, 20, payload=5), tcp(0.1, B, A, 6000, 5000, "A", 20, 15)], "OTH"),
    ([tcp(0, A, B, 1, 80, "S", 10), tcp(0.1, B, A, 80, 1, "SA", 50, 11), tcp(0.2, A, B, 1, 80, "FA", 11, 51)],
     "S2"),
])
def test_zeek_states(case, expected):
    assert frame(flows_of(case)).iloc[0].state == expected


def test_retransmits_exclude_keepalives_and_window_probes():
    a, b = 1000, 5000
    pkts = [
        *handshake_close(isn_a=a, isn_b=b)[:3],
        tcp(0.10, A, B, 40000, 80, "PA", a + 1, b + 1, payload=500),
        tcp(0.20, A, B, 40000, 80, "PA", a + 1, b + 1, payload=500),       # retransmission
        tcp(0.30, A, B, 40000, 80, "PA", a + 201, b + 1, payload=100),     # inside old range: retransmission
        tcp(0.40, A, B, 40000, 80, "PA", a + 501, b + 1, payload=1000),    # new data
        tcp(9.00, A, B, 40000, 80, "A", a + 1500, b + 1, payload=1),       # keep-alive (1 byte, old)
        tcp(9.50, A, B, 40000, 80, "A", a + 1500, b + 1, payload=1),       # again
        tcp(9.60, A, B, 40000, 80, "A", a + 1501, b + 1, payload=0),       # pure ACK
        tcp(9.70, B, A, 80, 40000, "PA", b + 1, a + 1501, payload=300),
        tcp(9.80, B, A, 80, 40000, "PA", b + 1, a + 1501, payload=300),    # responder retransmission
    ]
    f = frame(flows_of(pkts)).iloc[0]
    assert (f.src2dst_retransmits, f.dst2src_retransmits) == (2, 1)
    assert (f.src2dst_max_payload_bytes, f.dst2src_max_payload_bytes) == (1000, 300)
    assert "T" in f.history and "t" in f.history


def test_handshake_rtt_from_first_syn_and_nan_without_handshake():
    pkts = [tcp(0.0, A, B, 1, 80, "S", 10), tcp(1.0, A, B, 1, 80, "S", 10),
            tcp(1.05, B, A, 80, 1, "SA", 50, 11), tcp(1.08, A, B, 1, 80, "A", 11, 51)]
    f = frame(flows_of(pkts)).iloc[0]
    assert f.handshake_rtt_ms == pytest.approx(1080.0, abs=1e-3)
    # the legs: from the SYN the SYN-ACK answers (the retransmission), then to the client's ACK
    assert f.handshake_syn_synack_ms == pytest.approx(50.0, abs=1e-3)
    assert f.handshake_synack_ack_ms == pytest.approx(30.0, abs=1e-3)
    assert f.syn_retransmits == 1
    f = frame(flows_of(pkts[:3])).iloc[0]
    assert np.isnan(f.handshake_rtt_ms) and np.isnan(f.handshake_synack_ack_ms)
    assert f.handshake_syn_synack_ms == pytest.approx(50.0, abs=1e-3)
    f = frame(flows_of(pkts[:2])).iloc[0]
    assert np.isnan(f.handshake_syn_synack_ms) and f.syn_retransmits == 1


def test_handshake_legs_only_in_handshake_order():
    # a SYN-ACK before any SYN (the capture started mid-handshake), a SYN after the SYN-ACK, data ACKs
    late = [tcp(0.0, B, A, 80, 2, "SA", 50, 11), tcp(0.5, A, B, 2, 80, "A", 11, 51),
            tcp(0.6, A, B, 2, 80, "PA", 11, 51, payload=10)]
    f = frame(flows_of(late)).iloc[0]
    assert np.isnan(f.handshake_rtt_ms) and np.isnan(f.handshake_syn_synack_ms)
    assert np.isnan(f.handshake_synack_ack_ms) and f.syn_retransmits == 0
    # a SYN retransmitted after the SYN-ACK (the SYN-ACK was lost on its way): the leg keeps the SYN it answered
    lost = [tcp(0.0, A, B, 3, 80, "S", 10), tcp(0.2, B, A, 80, 3, "SA", 50, 11), tcp(1.0, A, B, 3, 80, "S", 10),
            tcp(1.2, B, A, 80, 3, "SA", 50, 11), tcp(1.3, A, B, 3, 80, "A", 11, 51)]
    f = frame(flows_of(lost)).iloc[0]
    assert (f.handshake_syn_synack_ms, f.handshake_synack_ack_ms, f.handshake_rtt_ms, f.syn_retransmits) == (
        pytest.approx(200.0, abs=1e-3), pytest.approx(1100.0, abs=1e-3), pytest.approx(1300.0, abs=1e-3), 1)


def test_handshake_rtt_agrees_with_wireshark_initial_rtt(captures_real, tshark):
    """tcp.analysis.initial_rtt (first SYN -> the ACK of the SYN-ACK) per TCP stream, on real connections."""
    names = ("zeek/testing/btest/Traces/modbus/modbusSmall.pcap", "chrissanders-packets/sessionhijacking.pcapng",
             "suricata-verify/tests/firewall/ruletype-firewall-117-ftp-all-data-ipv6/input.pcap",
             "ndpi/tests/cfgs/default/pcap/webdav.pcap", "zeek/testing/btest/Traces/socks-auth-10080.pcap")
    compared = 0
    for name in names:
        table = FlowTable()
        with open_capture(captures_real / name) as reader:
            for raw in reader:
                table.update(decode(raw, fingerprint=False))
        ours = {(f.src_ip, f.src_port, f.dest_ip, f.dest_port): f.handshake_rtt_ms
                for f in table.to_frame().itertuples() if f.proto == "tcp"}
        keys, rtts = {}, {}
        for stream, src4, src6, sport, dst4, dst6, dport, syn, ack, rtt in tshark.fields(
                captures_real / name, "tcp.stream", "ip.src", "ipv6.src", "tcp.srcport", "ip.dst", "ipv6.dst",
                "tcp.dstport", "tcp.flags.syn", "tcp.flags.ack", "tcp.analysis.initial_rtt", display_filter="tcp"):
            if syn in ("1", "True") and ack in ("0", "False"):
                keys.setdefault(stream, (src4 or src6, int(sport), dst4 or dst6, int(dport)))
            if rtt:
                rtts.setdefault(stream, float(rtt) * 1000)
        for stream, rtt in rtts.items():
            if stream in keys:
                assert ours[keys[stream]] == pytest.approx(rtt, abs=1e-3), (name, keys[stream])
                compared += 1
    assert compared >= 40, compared


GAP_COLUMNS = ("ack_events", "gap_events", "gap_bytes", "seq_holes", "seq_hole_bytes")


def gaps(f, prefix="src2dst"):
    return tuple(int(getattr(f, f"{prefix}_{name}")) for name in GAP_COLUMNS)


def transfer(segments=20, missing=(), isn_a=1000, isn_b=5000, mss=1000, handshake=True, t=0.0):
    """A to B port 80: handshake, `segments` data segments of `mss` bytes (those indexed in `missing` absent
    from the capture), B acking every second one, FIN both ways. Sequence numbers wrap modulo 2**32."""
    a, b = isn_a % 2**32, isn_b % 2**32

    def at(n):
        return (a + 1 + n) % 2**32

    def bt(n):
        return (b + n) % 2**32

    pkts = [tcp(t, A, B, 40000, 80, "S", a), tcp(t + 0.01, B, A, 80, 40000, "SA", b, at(0)),
            tcp(t + 0.02, A, B, 40000, 80, "A", at(0), bt(1))] if handshake else []
    t += 0.03
    for i in range(segments):
        if i not in missing:
            pkts.append(tcp(t, A, B, 40000, 80, "PA", at(i * mss), bt(1), payload=mss))
        t += 0.001
        if i % 2:
            pkts.append(tcp(t, B, A, 80, 40000, "A", bt(1), at((i + 1) * mss)))
            t += 0.001
    end = at(segments * mss)
    after_fin = (end + 1) % 2**32
    return [*pkts, tcp(t, A, B, 40000, 80, "FA", end, bt(1)),
            tcp(t + 0.01, B, A, 80, 40000, "FA", bt(1), after_fin),
            tcp(t + 0.02, A, B, 40000, 80, "A", after_fin, bt(2))]


def test_every_nth_segment_missing_is_one_gap_per_ack_over_it():
    # every fifth segment missing: 4, 9, 14, 19. B's acks (after each odd segment) pass each of them once:
    # 4 and 14 as holes (the next segment was captured first), 9 and 19 beyond the last captured byte
    f = frame(flows_of(transfer(20, missing=(4, 9, 14, 19)))).iloc[0]
    assert gaps(f) == (10, 4, 4000, 2, 2000)
    assert gaps(f, "dst2src") == (0, 0, 0, 0, 0)      # the acks of the FINs advance over no byte
    assert f.state == "SF" and f.src2dst_retransmits == 0
    whole = frame(flows_of(transfer(20))).iloc[0]
    assert gaps(whole) == (10, 0, 0, 0, 0)


def test_gaps_are_the_same_across_a_sequence_number_wrap():
    # wrapping inside a captured segment, right after the SYN, and between a hole's two edges
    for isn in (2**32 - 5500, 2**32 - 1, 2**32 - 2, 2**32 - 4500):
        f = frame(flows_of(transfer(20, missing=(4, 9, 14, 19), isn_a=isn, isn_b=isn))).iloc[0]
        assert gaps(f) == (10, 4, 4000, 2, 2000), isn


def test_flow_picked_up_mid_stream_has_no_false_gaps():
    pkts = transfer(20, missing=(14,))
    # B's ack first (of bytes before the capture started), then A's next segments: no hole at the start
    late = [p for p in pkts if p["t"] >= pkts[8]["t"]]
    assert late[0]["src"] == B
    f = frame(flows_of(late)).iloc[0]
    assert not f.history.startswith("S") and (f.src2dst_seq_holes, f.src2dst_seq_hole_bytes) == (1, 1000)
    # a partial connection: Zeek reports no content gap in it (report_gaps_for_partial is off)
    assert (f.src2dst_ack_events, f.src2dst_gap_events, f.src2dst_gap_bytes) == (0, 0, 0)


def test_retransmission_filling_a_hole_is_no_gap():
    pkts = transfer(20, missing=(4,))
    # segment 4 sent again after segment 5, before B's ack of both
    resent = dict(pkts[9], t=pkts[9]["t"] + 0.0005, seq=pkts[9]["seq"] - 1000)
    assert pkts[9]["src"] == A and pkts[10]["src"] == B
    f = frame(flows_of([*pkts[:10], resent, *pkts[10:]])).iloc[0]
    assert gaps(f) == (10, 0, 0, 1, 1000)
    # a retransmission filling half the hole leaves the other half to the ack
    half = dict(resent, payload=400)
    f = frame(flows_of([*pkts[:10], half, *pkts[10:]])).iloc[0]
    assert gaps(f) == (10, 1, 600, 1, 1000)


def test_keepalives_and_fin_are_no_gap():
    pkts = transfer(4)
    fin_ack = pkts[-1]["ack"]
    end = pkts[-3]["seq"]
    keepalive = tcp(pkts[-3]["t"] - 0.005, A, B, 40000, 80, "A", end - 1, pkts[-3]["ack"], payload=1)
    its_ack = tcp(pkts[-3]["t"] - 0.004, B, A, 80, 40000, "A", pkts[-3]["ack"], end)
    f = frame(flows_of([*pkts[:-3], keepalive, its_ack, *pkts[-3:]])).iloc[0]
    assert gaps(f) == (2, 0, 0, 0, 0) and gaps(f, "dst2src") == (0, 0, 0, 0, 0)
    assert fin_ack == (pkts[-2]["seq"] + 1) and f.src2dst_retransmits == 0
    # B's ACK after its FIN (at the FIN's sequence number + 1) before A acknowledges that FIN
    after = [*pkts[:-1], tcp(pkts[-1]["t"] - 0.005, B, A, 80, 40000, "A", pkts[-2]["seq"] + 1, fin_ack), pkts[-1]]
    assert gaps(frame(flows_of(after)).iloc[0], "dst2src") == (0, 0, 0, 0, 0)
    # the data a FIN carries is captured data, the FIN itself no byte
    with_data = [*pkts[:-3], dict(pkts[-3], payload=300), dict(pkts[-2], ack=end + 301), dict(pkts[-1], seq=end + 301)]
    f = frame(flows_of(with_data)).iloc[0]
    assert gaps(f) == (3, 0, 0, 0, 0)


def test_syn_data_is_captured_data_and_a_cut_segment_is_not():
    a, b = 1000, 5000
    fast_open = [tcp(0.0, A, B, 40000, 80, "S", a, payload=100), tcp(0.01, B, A, 80, 40000, "SA", b, a + 101),
                 tcp(0.02, A, B, 40000, 80, "A", a + 101, b + 1),
                 tcp(0.03, A, B, 40000, 80, "PA", a + 101, b + 1, payload=50),
                 tcp(0.04, B, A, 80, 40000, "A", b + 1, a + 151)]
    f = frame(flows_of(fast_open)).iloc[0]
    assert gaps(f) == (2, 0, 0, 0, 0)          # the SYN-ACK acknowledges the SYN's 100 bytes
    # the same segment cut by a 96-byte snapshot length: its bytes were not captured (Zeek: truncated_tcp_payload)
    cut = [*fast_open[:3], dict(fast_open[3], caplen=96), *fast_open[4:]]
    f = frame(flows_of(cut)).iloc[0]
    assert gaps(f) == (2, 1, 50, 0, 0)


def test_gap_tracking_follows_a_role_flip():
    # B's first packet has no readable TCP header (B stays the originator, in no state), then B's SYN-ACK and
    # A's bare SYN: Zeek's SYN/SYN-ACK reversal makes A the originator; each side's tracking moves with it
    pkts = [tcp(0.0, B, A, 40000, 6000, "A", 2000, 1001), tcp(0.1, B, A, 40000, 6000, "SA", 2000, 1001),
            tcp(0.2, A, B, 6000, 40000, "S", 1000), tcp(0.3, A, B, 6000, 40000, "PA", 1001, 2001, payload=100),
            tcp(0.4, B, A, 40000, 6000, "A", 2001, 1101)]
    batch = make_batch(pkts)
    batch.cols["layers"][0] &= ~np.uint32(L_TCP)
    table = FlowTable()
    table.update(batch)
    f = frame(table).iloc[0]
    assert f.src_ip == A and "^" in f.history
    assert gaps(f) == (1, 0, 0, 0, 0) and gaps(f, "dst2src") == (0, 0, 0, 0, 0)


# Real traces whose own project put a gap (or a near-miss) in them, with our counts (ack events, gap events,
# gap bytes, holes, hole bytes) per direction, summed over their TCP flows; reviewed like code
GAP_TRACES = {
    # Zeek's HTTP entity-gap test: one 1,448-byte segment of the response missing, the next one captured first
    "zeek/testing/btest/Traces/http/entity_gap.pcap": ((1, 0, 0, 0, 0), (2, 1, 1448, 1, 1448)),
    # Zeek's LDAP gap test (its conn.log history has 'g'): the server's bytes acked but never captured
    "zeek/testing/btest/Traces/ldap/gap-data-missing.pcapng": ((3, 0, 0, 0, 0), (4, 1, 1342, 0, 0)),
    # Suricata's http-gap-simple: its fileinfo says the third response body has gaps (14 bytes here)
    "suricata-verify/tests/http-gap-simple/input.pcap": ((3, 0, 0, 0, 0), (9, 1, 14, 0, 0)),
    # near-misses: an HTTP body shorter than announced (no TCP gap), a one-sided capture (no acks at all)
    "zeek/testing/btest/Traces/http/http-large-gap.pcap": ((1, 0, 0, 0, 0), (1, 0, 0, 0, 0)),
    "zeek/testing/btest/Traces/tcp/one-sided-2745.pcap": ((0, 0, 0, 0, 0), (0, 0, 0, 0, 0)),
}


@pytest.mark.parametrize("name", GAP_TRACES)
def test_gaps_where_other_projects_put_them(name, captures_real):
    table = FlowTable()
    with open_capture(captures_real / name) as reader:
        for raw in reader:
            table.update(decode(raw, fingerprint=False))
    flows = table.finish()
    tcp = flows["proto"] == 6
    counts = tuple(tuple(int(flows[f"{prefix}_{column}"][tcp].sum()) for column in GAP_COLUMNS)
                   for prefix in ("src2dst", "dst2src"))
    assert counts == GAP_TRACES[name]


def test_icmp_echo_request_and_reply_form_one_flow_and_errors_do_not():
    pkts = [{"t": 0.0, "src": A, "dst": B, "proto": 1, "type": 8, "payload": 56},
            {"t": 0.01, "src": B, "dst": A, "proto": 1, "type": 0, "payload": 56},
            {"t": 0.02, "src": B, "dst": A, "proto": 1, "type": 3, "code": 3, "payload": 28}]
    df = frame(flows_of(pkts))
    assert len(df) == 2
    echo = df.iloc[0]
    assert (echo.src_ip, echo.src_port, echo.dest_port, echo.src2dst_packets, echo.dst2src_packets) == \
        (A, 8, 0, 1, 1)
    unreachable = df.iloc[1]
    assert (unreachable.src_ip, unreachable.src_port, unreachable.dest_port) == (B, 3, 3)
    # the spec's echo vector: 1.2.3.4 -> 5.6.7.8 type 8 and its reply share this ID
    pair = [{"t": 0, "src": "1.2.3.4", "dst": "5.6.7.8", "proto": 1, "type": 8},
            {"t": 1, "src": "5.6.7.8", "dst": "1.2.3.4", "proto": 1, "type": 0}]
    assert list(frame(flows_of(pair)).community_id) == ["1:crodRHL2FEsHjbv3UkRrfbs4bZ0="]


def test_ipv6_tcp_and_icmpv6():
    x, y = "2001:db8::1", "2001:db8::2"
    pkts = [tcp(0, x, y, 1111, 443, "S", 1), tcp(0.1, y, x, 443, 1111, "SA", 9, 2),
            {"t": 0.2, "src": x, "dst": y, "proto": 58, "type": 128},
            {"t": 0.3, "src": y, "dst": x, "proto": 58, "type": 129}]
    df = frame(flows_of(pkts))
    assert list(df.proto) == ["tcp", "icmpv6"]
    assert set(df.ip_version) == {6} and list(df.src_ip) == [x, x]
    assert list(df.src2dst_bytes) == [60, 48] and list(df.state) == ["S1", "OTH"]


def test_fragments_join_their_first_fragment_in_same_or_later_batch():
    base = {"src": A, "dst": B, "proto": 17, "ip_id": 77}
    pkts = [dict(base, t=0.0, sport=5000, dport=53, mf=True, payload=1472, ip_len=1500),
            dict(base, t=0.001, frag_offset=1480, ip_len=520),
            dict(base, t=0.002, frag_offset=1480, ip_id=78, ip_len=520)]   # first fragment never seen
    for size in (None, 1):
        df = frame(flows_of(pkts, batch_size=size))
        assert list(df.src2dst_packets) == [2, 1]
        assert list(df.dest_port) == [53, 0]
        assert list(df.src2dst_bytes) == [2020, 520]


def test_non_ip_packets_are_counted_not_flows():
    table = flows_of([{"t": 0.0}, {"t": 0.1}, *handshake_close(1.0)])
    assert table.non_ip_packets == 2 and table.flow_count == 1


def test_udp_tunnel_counts_inner_and_carrier_flows():
    inner = {"proto": 17, "sport": 5000, "dport": 53, "payload": 20, "outer": ("198.51.100.1", "198.51.100.2",
                                                                                 33333, 4789)}
    pkts = [dict(inner, t=0.0, src=A, dst=B), dict(inner, t=0.1, src=A, dst=B)]
    df = frame(flows_of(pkts))
    assert len(df) == 2
    carrier = df[df.dest_port == 4789].iloc[0]
    assert (carrier.src_ip, carrier.src2dst_packets) == ("198.51.100.1", 2)
    # inner IP 48 bytes + outer IP, UDP, VXLAN, inner Ethernet headers
    assert carrier.src2dst_bytes == 2 * (48 + 20 + 8 + 8 + 14)


def random_traffic(seed: int, n: int = 3000):
    """Many short TCP/UDP/ICMP conversations, interleaved in time, with reuse and idle gaps."""
    rng = np.random.default_rng(seed)
    hosts = [f"10.1.{i // 250}.{i % 250 + 1}" for i in range(40)]
    pkts = []
    t = 0.0
    for _ in range(n):
        t += float(rng.exponential(0.5))
        a, b = rng.choice(len(hosts), 2, replace=False)
        kind = rng.integers(0, 4)
        sport = int(rng.integers(1024, 1034))
        fwd = bool(rng.integers(0, 2))
        src, dst = (hosts[a], hosts[b]) if fwd else (hosts[b], hosts[a])
        if kind == 0:
            pkts.append({"t": t, "src": src, "dst": dst, "proto": 17, "sport": sport, "dport": 53,
                         "payload": int(rng.integers(0, 500))})
        elif kind == 1:
            pkts.append({"t": t, "src": src, "dst": dst, "proto": 1, "type": int(rng.choice([8, 0, 3]))})
        else:
            flags = str(rng.choice(["S", "SA", "A", "PA", "FA", "RA"]))
            pkts.append(tcp(t, src, dst, sport, 80, flags, int(rng.integers(0, 3)) * 1000,
                            payload=int(rng.integers(0, 2)) * 100, mss=1460))
    return pkts


def assert_same_flows(x: dict, y: dict, skip=()):
    assert list(x) == list(y)
    for name in x:
        if name in skip:
            continue
        if x[name].dtype == np.float64:
            np.testing.assert_array_equal(x[name], y[name], err_msg=name)
        else:
            assert x[name].tolist() == y[name].tolist(), name


@pytest.mark.parametrize("size", [1, 7, 256, 1000])
def test_batch_boundaries_do_not_change_flows(size):
    pkts = random_traffic(1)
    whole = flows_of(pkts).finish()
    assert len(whole["first_frame"]) > 200
    assert_same_flows(flows_of(pkts, batch_size=size).finish(), whole)


def test_merge_of_partitions_equals_one_table():
    pkts = handshake_close(0.0) + handshake_close(0.5, sport=40001) + random_traffic(2, 800)
    pkts.sort(key=lambda p: p["t"])
    for p in pkts:
        p.pop("frame", None)
    whole = flows_of(pkts).finish()
    # cut inside the two crafted connections too
    for cut in (3, 5, 9, 400):
        left = FlowTable()
        left.update(make_batch(pkts[:cut]))
        right = FlowTable()
        right.update(make_batch(pkts[cut:], first_frame=cut + 1))
        assert_same_flows(left.merge(right).finish(), whole)


def test_merge_reads_the_later_part_by_the_earlier_flows_sides():
    """After a cut, each side of a connection between ports that name no server is the side it was before.

    The later part has its own originator (the first sender after the cut, B
    here): B's data must still count as the responder's ('d', not 'D'), and a
    bare SYN from B (whose SYN number the earlier part never saw) continues
    the connection as one pass does, instead of starting a new one, whose
    SYN-ACK then is the originator's.
    """
    talk = [tcp(0.000, A, B, 40000, 50000, "S", 1000), tcp(0.010, B, A, 50000, 40000, "SA", 5000, 1001),
            tcp(0.020, A, B, 40000, 50000, "A", 1001, 5001),
            tcp(0.030, B, A, 50000, 40000, "PA", 5001, 1001, payload=20),
            tcp(0.040, A, B, 40000, 50000, "FA", 1001, 5021), tcp(0.050, B, A, 50000, 40000, "FA", 5021, 1002),
            tcp(0.060, A, B, 40000, 50000, "A", 1002, 5022)]
    syn_back = [tcp(1.000, A, B, 40001, 50001, "S", 2000), tcp(1.010, B, A, 50001, 40001, "SA", 6000, 2001),
                tcp(1.020, A, B, 40001, 50001, "A", 2001, 6001), tcp(1.030, B, A, 50001, 40001, "S", 9000),
                tcp(1.040, A, B, 40001, 50001, "SA", 2001, 9001)]
    for packets, cut in ((talk, 3), (syn_back, 3)):
        whole = flows_of(packets).finish()
        left = FlowTable()
        left.update(make_batch(packets[:cut]))
        right = FlowTable()
        right.update(make_batch(packets[cut:], first_frame=cut + 1))
        assert_same_flows(left.merge(right).finish(), whole)


def test_merge_counts_the_gaps_of_one_pass_wherever_the_cut_falls():
    """A cut before a connection or anywhere inside it (between the holes, right after a missing segment, before
    the acks that pass over the holes) merges to the capture-gap counters of one pass: the later part's
    tracking is redone from the state the earlier part left (flows/merge.py)."""
    pkts = transfer(16, missing=(2, 12), t=1.0)      # two holes: segments 3 and 13 captured before the acks
    before = [tcp(0.0, A, B, 40001, 80, "S", 1), *pkts]
    for packets in (before, pkts):
        whole = flows_of(packets).finish()
        assert whole["src2dst_gap_events"][0] > 0 or packets is before
        for cut in range(1, len(packets)):
            left, right = FlowTable(), FlowTable()
            left.update(make_batch(packets[:cut]))
            right.update(make_batch(packets[cut:], first_frame=cut + 1))
            merged = left.merge(right)
            assert merged.inexact_joins == 0, cut
            assert_same_flows(merged.finish(), whole)
    assert flows_of(pkts).finish()["src2dst_seq_holes"][0] == 2


# Real TCP connections that open, exchange data, close, reset and flip roles (histories '^h', '^dR',
# 'ShADdaR', 'Sr', 'ShADadfF', 'Q'...).
MERGE_CAPTURES = ("chrissanders-packets/activeosfingerprinting.pcapng",
                  "chrissanders-packets/sessionhijacking.pcapng",
                  "ndpi/tests/cfgs/default/pcap/threema.pcap",
                  "suricata-verify/tests/smb2-named-pipe-unicode/input.pcap",
                  "packetlife/pcaps/BGP_hard_reset.cap")
@pytest.mark.parametrize("name", MERGE_CAPTURES)
def test_merged_partitions_record_the_history_of_one_pass_on_real_captures(name, captures_real):
    """Two tables over the packets before and after any cut, merged: every column of every flow is that of one
    table over all packets."""
    with open_capture(captures_real / name) as reader:
        (batch,) = [decode(raw, fingerprint=False) for raw in reader]
    whole = FlowTable()
    whole.update(batch)
    expected = whole.finish()

    def part(rows):
        return PacketBatch(batch.data, {column: values[rows] for column, values in batch.cols.items()})

    for cut in range(1, len(batch)):
        left, right = FlowTable(), FlowTable()
        left.update(part(slice(0, cut)))
        right.update(part(slice(cut, None)))
        merged = left.merge(right).finish()
        for column in expected:
            ours, one_pass = np.asarray(merged[column]), np.asarray(expected[column])
            if ours.dtype.kind == "f":
                assert np.array_equal(ours, one_pass, equal_nan=True), (cut, column)
            else:
                assert ours.tolist() == one_pass.tolist(), (cut, column)


def test_hash_collisions_are_resolved(monkeypatch):
    from detector.flows import keys
    pkts = random_traffic(3, 600)
    honest = flows_of(pkts).finish()
    real = keys.hash_rows
    monkeypatch.setattr(keys, "hash_rows", lambda K, seed: real(K, seed) & np.uint64(0x7) if seed < 2
                        else real(K, seed))
    assert_same_flows(flows_of(pkts, batch_size=100).finish(), honest)


def test_history_text_survives_colliding_history_hashes(monkeypatch):
    # finish() decodes each distinct history once, grouped by a hash of the
    # letters: a hash shared by different histories must not mix them up
    from detector.flows import keys, view
    pkts = random_traffic(4, 600)
    honest = flows_of(pkts).finish()
    assert len(set(honest["history"])) > 5
    real = keys.hash_rows
    monkeypatch.setattr(keys, "hash_rows", lambda K, seed: real(K, seed) & np.uint64(0x3)
                        if seed == view._HISTORY_SEED else real(K, seed))
    assert_same_flows(flows_of(pkts).finish(), honest)

"""The Python peers that bench/run.py times, each run in its own process: scapy, dpkt, nfstream.

    python bench/peers.py scapy|dpkt|nfstream CAPTURE [--limit N]

Each reads the capture the way its users do and prints one JSON line: the
packets it read and, where it groups them, the flows it found (so a run that
silently did nothing shows). `--limit` stops after N packets (scapy on a
large file; run.py then extrapolates).
"""
from __future__ import annotations

import argparse
import json
import sys


def run_scapy(path: str, limit: int | None) -> dict:
    """PcapReader over every packet, touching the addresses and ports."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.utils import PcapReader

    packets = 0
    with PcapReader(path) as reader:
        for pkt in reader:
            if limit is not None and packets >= limit:
                break
            packets += 1
            net = pkt.getlayer(IP) or pkt.getlayer(IPv6)
            if net is None:
                continue
            _ = (net.src, net.dst)
            l4 = pkt.getlayer(TCP) or pkt.getlayer(UDP)
            if l4 is not None:
                _ = (l4.sport, l4.dport)
    return {"packets": packets}


def run_dpkt(path: str, limit: int | None) -> dict:
    """pcap.Reader, Ethernet decode, and a direction-independent 5-tuple table (packets, bytes).

    ICMP echo uses its identifier in place of ports, as flow tables do, so the
    count is comparable with detector's.
    """
    import dpkt

    flows: dict = {}
    packets = 0
    with open(path, "rb") as fh:
        for _ts, frame in dpkt.pcap.Reader(fh):
            if limit is not None and packets >= limit:
                break
            packets += 1
            eth = dpkt.ethernet.Ethernet(frame)
            net = eth.data
            if isinstance(net, dpkt.ip.IP):
                proto = net.p
            elif isinstance(net, dpkt.ip6.IP6):
                proto = net.nxt
            else:
                continue
            l4 = net.data
            if isinstance(l4, (dpkt.tcp.TCP, dpkt.udp.UDP)):
                sport, dport = l4.sport, l4.dport
            elif isinstance(l4, (dpkt.icmp.ICMP, dpkt.icmp6.ICMP6)) and hasattr(l4.data, "id"):
                sport = dport = l4.data.id
            else:
                sport = dport = 0
            a, b = (net.src, sport), (net.dst, dport)
            key = (a, b, proto) if a <= b else (b, a, proto)
            entry = flows.get(key)
            if entry is None:
                flows[key] = [1, len(frame)]
            else:
                entry[0] += 1
                entry[1] += len(frame)
    return {"packets": packets, "flows": len(flows)}


def run_nfstream(path: str, limit: int | None) -> dict:
    """NFStreamer without statistics or application dissection, to a DataFrame."""
    from nfstream import NFStreamer

    if limit is not None:
        raise SystemExit("peers: nfstream reads whole files only (no --limit)")
    df = NFStreamer(source=path, statistical_analysis=False, n_dissections=0).to_pandas()
    return {"packets": int(df["bidirectional_packets"].sum()), "flows": len(df)}


PEERS = {"scapy": run_scapy, "dpkt": run_dpkt, "nfstream": run_nfstream}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("capture")
    parser.add_argument("--limit", type=int, metavar="N", help="stop after N packets")
    args = parser.parse_args(argv)
    print(json.dumps(PEERS[args.peer](args.capture, args.limit)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the capture builders share: the time origin and the writers."""
from __future__ import annotations

from pathlib import Path

from scapy.all import TCP, Raw
from scapy.utils import PcapNgWriter, PcapWriter

T0 = 1_767_225_600  # 2026-01-01T00:00:00Z: every capture starts here, so runs are byte-identical


def write_capture(path: Path, timed_packets) -> int:
    """Write (seconds after T0, packet) pairs in time order; pcapng or pcap by the file's suffix."""
    ordered = sorted(timed_packets, key=lambda item: item[0])
    writer = PcapNgWriter(str(path)) if path.suffix == ".pcapng" else PcapWriter(str(path), sync=False)
    for offset, pkt in ordered:
        pkt.time = T0 + round(offset, 6)
        writer.write(pkt)
    writer.close()
    return len(ordered)


def tcp_session(eth, eth_r, ip, ip_r, sport, dport, t, payloads, rng):
    """A full TCP connection: handshake, request/response segments, FIN close."""
    out = []
    cseq, sseq = rng.randrange(1 << 31), rng.randrange(1 << 31)
    out.append((t, eth / ip / TCP(sport=sport, dport=dport, flags="S", seq=cseq,
                                  options=[("MSS", 1460), ("SAckOK", b""), ("WScale", 7)])))
    out.append((t + 0.020, eth_r / ip_r / TCP(sport=dport, dport=sport, flags="SA", seq=sseq, ack=cseq + 1,
                                              options=[("MSS", 1400), ("SAckOK", b""), ("WScale", 7)])))
    cseq += 1
    sseq += 1
    out.append((t + 0.021, eth / ip / TCP(sport=sport, dport=dport, flags="A", seq=cseq, ack=sseq)))
    now = t + 0.03
    for request, response in payloads:
        out.append((now, eth / ip / TCP(sport=sport, dport=dport, flags="PA", seq=cseq, ack=sseq) / Raw(request)))
        cseq += len(request)
        now += 0.02
        out.append((now, eth_r / ip_r / TCP(sport=dport, dport=sport, flags="PA", seq=sseq, ack=cseq) / Raw(response)))
        sseq += len(response)
        now += 0.001
        out.append((now, eth / ip / TCP(sport=sport, dport=dport, flags="A", seq=cseq, ack=sseq)))
        now += 0.05
    out.append((now, eth / ip / TCP(sport=sport, dport=dport, flags="FA", seq=cseq, ack=sseq)))
    out.append((now + 0.02, eth_r / ip_r / TCP(sport=dport, dport=sport, flags="FA", seq=sseq, ack=cseq + 1)))
    out.append((now + 0.021, eth / ip / TCP(sport=sport, dport=dport, flags="A", seq=cseq + 1, ack=sseq + 1)))
    return out

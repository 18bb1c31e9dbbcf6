"""Field-by-field agreement of detector.decode with tshark on real captures written by others.

The sample: every capture MANIFEST.tsv labels icmp-fragneeded, icmp6-ptb,
vlan, sll, sll2, rawip or ipv6-ext, every Zeek tunnel trace, every 802.11
and radiotap capture, and a fixed pseudo-random (sha1 of the path) draw of
the rest. For each frame tshark's
`frame.protocols` says which layers it dissected, in order; the layer the
decoder must describe is found by walking that list through the
encapsulations the decoder removes (ENCAPSULATIONS) and stopping at an ICMP
layer, whose next IP layer is the quote. Occurrence k of a field (`-E
occurrence=a`) belongs to the k-th layer of that protocol.

Compared: innermost source/destination address, TTL/hop limit, TCP/UDP/SCTP
ports, TCP flags and MSS, ICMP/ICMPv6 type, code and MTU, the quoted
addresses and ports of ICMP errors, ARP opcode and addresses. Accepted
divergence classes are listed in DIVERGENCES, each with its reason; a frame
is excused from a field only when its class's predicate holds for it.
"""
from __future__ import annotations

import hashlib
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from detector.decode import decode
from detector.decode.addr import str_to_ip
from detector.errors import CaptureError
from detector.ingest import open_capture
from detector.schema import (
    L_ARP,
    L_ICMP,
    L_ICMP6,
    L_IP4,
    L_IP6,
    L_MSS,
    L_MTU,
    L_PORTS,
    L_QUOTE,
    L_QUOTE_PORTS,
    L_TCP,
    L_TUNNEL,
    PROTO_SCTP,
    PROTO_TCP,
    PROTO_UDP,
)
from tests._real import CAPTURES_REAL as CAPTURES

LABELS = {"icmp-fragneeded", "icmp6-ptb", "vlan", "sll", "sll2", "rawip", "ipv6-ext"}
TUNNEL_TRACES = "zeek/testing/btest/Traces/tunnels/"
WIRELESS_LINKTYPES = {"ieee-802-11", "ieee-802-11-radiotap"}
SAMPLE_OTHERS = 40           # files drawn from the unlabelled rest
MAX_TUNNELS = 4              # detector.decode.kernel.MAX_TUNNEL_DEPTH

FIELDS = ["frame.number", "frame.protocols", "ip.src", "ip.dst", "ip.ttl", "ipv6.src", "ipv6.dst", "ipv6.hlim",
          "tcp.srcport", "tcp.dstport", "tcp.flags", "tcp.options.mss_val", "udp.srcport", "udp.dstport",
          "sctp.srcport", "sctp.dstport", "icmp.type", "icmp.code", "icmp.mtu", "icmpv6.type", "icmpv6.code",
          "icmpv6.mtu", "arp.opcode", "arp.src.proto_ipv4", "arp.dst.proto_ipv4"]
# Reassembly off: with it, tshark shows a fragmented datagram's transport
# header on its last fragment; the decoder (and Zeek) read it from the first.
TSHARK_OPTIONS = ["-o", "ip.defragment:FALSE", "-o", "ipv6.defragment:FALSE"]

# tshark protocol names the decoder walks through to reach an inner IP layer (wlan and llc: Aruba's
# GRE tunnels carry 802.11 frames; cfp: Cisco FabricPath)
ENCAPSULATIONS = {"ah", "udp", "gre", "erspan", "vxlan", "geneve", "teredo", "gtp", "ayiya", "eth", "ethertype",
                  "vlan", "mpls", "ppp", "pppoes", "wlan", "llc", "cfp"}
TRANSPORTS = {"tcp", "udp", "sctp", "icmp", "icmpv6"}
UNALIGNED = object()         # a field whose occurrences cannot be matched to this layer, or that no column keeps


def _manifest() -> list[dict]:
    lines = (CAPTURES / "MANIFEST.tsv").read_text().splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1:]]


def sample() -> list[str]:
    rows = [r for r in _manifest() if "unsupported" not in r["linktype"] and "unreadable" not in r["linktype"]]
    chosen = [r["path"] for r in rows
              if LABELS & set(r["labels"].split(",")) or r["path"].startswith(TUNNEL_TRACES)
              or r["linktype"] in WIRELESS_LINKTYPES]
    rest = sorted((r["path"] for r in rows if r["path"] not in set(chosen)),
                  key=lambda p: hashlib.sha1(p.encode()).hexdigest())
    return sorted(chosen) + rest[:SAMPLE_OTHERS]


def run_tshark(tshark: str, path: Path) -> dict[int, dict[str, list[str]]]:
    """frame number -> field -> occurrences, as tshark dissects the file (a damaged file: up to the damage)."""
    cmd = [tshark, "-r", str(path), "-n", *TSHARK_OPTIONS, "-T", "fields", "-E", "separator=/t",
           "-E", "occurrence=a", "-E", "aggregator=;"]
    for name in FIELDS:
        cmd += ["-e", name]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    frames = {}
    for line in out.splitlines():
        values = line.split("\t")
        if len(values) != len(FIELDS) or not values[0].isdigit():
            continue
        frames[int(values[0])] = {name: (v.split(";") if v else []) for name, v in zip(FIELDS, values)}
    return frames


def _occurrence(protocols: list[str], index: int) -> int:
    """Which occurrence of its protocol's fields the layer at `index` owns."""
    return protocols[:index].count(protocols[index])


def _get(fields: dict, name: str, k: int):
    values = fields.get(name, [])
    return values[k] if k < len(values) else None


def _next_layer(protocols: list[str], index: int) -> int | None:
    """The layer after `index`, skipping IPv6 extension headers (ipv6.hopopts and such)."""
    j = index + 1
    while j < len(protocols) and protocols[j].startswith("ipv6."):
        j += 1
    return j if j < len(protocols) else None


def expected(fields: dict) -> tuple[dict, bool]:
    """tshark's values for the decoder's columns, and whether the layers align with the occurrences."""
    protocols = _protocols(fields)
    ips = [i for i, p in enumerate(protocols) if p in ("ip", "ipv6")]
    aligned = (len(fields["ip.src"]) == protocols.count("ip")
               and len(fields["ipv6.src"]) == protocols.count("ipv6"))
    want = {}
    if "arp" in protocols:
        want["arp"] = (_get(fields, "arp.opcode", 0), _get(fields, "arp.src.proto_ipv4", 0),
                       _get(fields, "arp.dst.proto_ipv4", 0))
    if not ips:
        return want, aligned
    cur = ips[0]
    for nxt in ips[1:]:
        between = protocols[cur + 1:nxt]
        if len([i for i in ips if i <= cur]) > MAX_TUNNELS:
            break
        if any(p in ("icmp", "icmpv6") for p in between):
            break
        if not all(p in ENCAPSULATIONS or p.startswith("ipv6.") for p in between):
            break
        cur = nxt
    want.update(_ip_layer(fields, protocols, cur, ""))
    t = _next_layer(protocols, cur)
    if t is None or protocols[t] not in TRANSPORTS:
        return want, aligned
    name = protocols[t]
    k = _occurrence(protocols, t)
    if name in ("tcp", "udp", "sctp"):
        want["ports"] = (name, _get(fields, f"{name}.srcport", k), _get(fields, f"{name}.dstport", k))
    if name == "tcp":
        flags = _get(fields, "tcp.flags", k)
        want["tcp_flags"] = None if flags is None else int(flags, 16) & 0x1FF
        # the MSS field has no occurrence for a layer without the option: only a lone TCP layer aligns
        want["mss"] = _get(fields, "tcp.options.mss_val", 0) if protocols.count("tcp") == 1 else UNALIGNED
    if name in ("icmp", "icmpv6"):
        want["icmp"] = (name, _get(fields, f"{name}.type", k), _get(fields, f"{name}.code", k))
        want["mtu"] = _get(fields, f"{name}.mtu", 0) if protocols.count(name) == 1 else UNALIGNED
        q = _next_layer(protocols, t)
        if q is not None and protocols[q] in ("ip", "ipv6"):
            want.update(_ip_layer(fields, protocols, q, "quote_"))
            qt = _next_layer(protocols, q)
            if qt is not None and protocols[qt] in ("tcp", "udp", "sctp"):
                kq = _occurrence(protocols, qt)
                want["quote_ports"] = (_get(fields, f"{protocols[qt]}.srcport", kq),
                                       _get(fields, f"{protocols[qt]}.dstport", kq))
    return want, aligned


def _ip_layer(fields: dict, protocols: list[str], index: int, prefix: str) -> dict:
    name = protocols[index]
    k = _occurrence(protocols, index)
    src, dst = _get(fields, f"{name}.src", k), _get(fields, f"{name}.dst", k)
    # as numbers: text cannot tell IPv4 from an IPv4-mapped IPv6 address, the columns cannot either
    out = {prefix + "addrs": None if src is None or dst is None else (str_to_ip(src), str_to_ip(dst))}
    if not prefix:
        out["ttl"] = _get(fields, "ip.ttl" if name == "ip" else "ipv6.hlim", k)
    return out


def ours(batch, i: int) -> dict:
    """The decoder's values for row i, in the shape `expected` returns."""
    layers = int(batch["layers"][i])
    got = {}
    if layers & L_ARP:
        ip4 = lambda v: f"{v >> 24}.{(v >> 16) & 255}.{(v >> 8) & 255}.{v & 255}"  # noqa: E731
        got["arp"] = (str(int(batch["arp_op"][i])), ip4(int(batch["arp_spa"][i])), ip4(int(batch["arp_tpa"][i])))
    if layers & (L_IP4 | L_IP6):
        got["addrs"] = ((int(batch["src_ip_hi"][i]), int(batch["src_ip_lo"][i])),
                        (int(batch["dest_ip_hi"][i]), int(batch["dest_ip_lo"][i])))
        got["ttl"] = str(int(batch["ttl"][i]))
    elif layers & L_TUNNEL:
        # a tunnel whose payload is not IP (ARP in GRE, Geneve, ERSPAN; a mirrored frame that is no IP packet):
        # tshark's last IP layer is the outer one, whose addresses the outer columns keep and whose TTL none does
        got["addrs"] = ((int(batch["outer_src_ip_hi"][i]), int(batch["outer_src_ip_lo"][i])),
                        (int(batch["outer_dest_ip_hi"][i]), int(batch["outer_dest_ip_lo"][i])))
        got["ttl"] = UNALIGNED
        if int(batch["outer_proto"][i]) == PROTO_UDP:
            got["ports"] = ("udp", str(int(batch["outer_src_port"][i])), str(int(batch["outer_dest_port"][i])))
    proto = int(batch["proto"][i])
    if layers & L_PORTS and proto in (PROTO_TCP, PROTO_UDP, PROTO_SCTP):
        name = {PROTO_TCP: "tcp", PROTO_UDP: "udp", PROTO_SCTP: "sctp"}[proto]
        got["ports"] = (name, str(int(batch["src_port"][i])), str(int(batch["dest_port"][i])))
    if layers & L_TCP:
        got["tcp_flags"] = int(batch["tcp_flags"][i])
    if layers & L_MSS:
        got["mss"] = str(int(batch["tcp_mss"][i]))
    if layers & (L_ICMP | L_ICMP6):
        got["icmp"] = ("icmp" if layers & L_ICMP else "icmpv6", str(int(batch["icmp_type"][i])),
                       str(int(batch["icmp_code"][i])))
    if layers & L_MTU:
        got["mtu"] = str(int(batch["icmp_mtu"][i]))
    if layers & L_QUOTE:
        got["quote_addrs"] = ((int(batch["quote_src_ip_hi"][i]), int(batch["quote_src_ip_lo"][i])),
                              (int(batch["quote_dest_ip_hi"][i]), int(batch["quote_dest_ip_lo"][i])))
    if layers & L_QUOTE_PORTS:
        got["quote_ports"] = (str(int(batch["quote_src_port"][i])), str(int(batch["quote_dest_port"][i])))
    return got


def compare_file(rel: str, tshark_frames: dict) -> tuple[Counter, list]:
    """(per-field agreement counts, mismatches) of one capture."""
    counts, mismatches = Counter(), []
    try:
        reader = open_capture(CAPTURES / rel)
    except CaptureError:
        return counts, mismatches
    with reader:
        for raw in reader:
            batch = decode(raw)
            for i in range(len(batch)):
                frame = int(batch["frame"][i])
                if frame not in tshark_frames:
                    continue
                want, aligned = expected(tshark_frames[frame])
                if not aligned:
                    counts["frames_unaligned"] += 1
                    continue
                counts["frames"] += 1
                got = ours(batch, i)
                for key in sorted(set(want) | set(got)):
                    if want.get(key) is UNALIGNED or got.get(key) is UNALIGNED:
                        continue
                    a, b = got.get(key), want.get(key)
                    if a == b:
                        counts[key + ":agree"] += 1
                        continue
                    excuse = excused(key, a, b, tshark_frames[frame], batch, i)
                    if excuse:
                        counts[f"{key}:excused:{excuse}"] += 1
                    else:
                        counts[key + ":differ"] += 1
                        mismatches.append((rel, frame, key, a, b, tshark_frames[frame]["frame.protocols"]))
    return counts, mismatches


def _protocols(fields: dict) -> list[str]:
    return fields["frame.protocols"][0].split(":") if fields["frame.protocols"] else []


def _has_source_route(batch, i) -> bool:
    """Whether the frame's IPv4 header carries a loose or strict source route option (RFC 791)."""
    frame = batch.frame_bytes(i)
    l3 = int(batch["l3_off"][i])
    q, end = l3 + 20, l3 + (frame[l3] & 15) * 4
    while q < min(end, len(frame)):
        kind = frame[q]
        if kind in (0x83, 0x89):
            return True
        if kind == 0:
            return False
        if kind == 1:
            q += 1
            continue
        if q + 1 >= len(frame) or frame[q + 1] < 2:
            return False
        q += frame[q + 1]
    return False


# Link types the decoder parses; frames of the others keep only their raw columns.
DECODED_LINKTYPES = {0, 1, 9, 50, 51, 101, 104, 105, 108, 113, 127, 228, 229, 276}

# name -> (reason, predicate(key, ours, tshark's, tshark fields, batch, row))
DIVERGENCES = {
    "undecoded-link-type": (
        "frame relay, PPI, IEEE 802.15.4 and the other link types outside DECODED_LINKTYPES are counted, "
        "timed and sized, never decoded: their network fields stay masked by design",
        lambda key, a, b, fields, batch, i: a is None and int(batch["linktype"][i]) not in DECODED_LINKTYPES),
    "ppp-vj-compression": (
        "PPP Van Jacobson TCP/IP header compression (RFC 1144): compressed headers hold no IP header and "
        "uncompressed ones overwrite the protocol field with a slot number; the decoder leaves them masked",
        lambda key, a, b, fields, batch, i: a is None and "vjc" in _protocols(fields)),
    "ipv4-source-route": (
        "IPv4 loose/strict source route option: tshark reports the route's last hop as ip.dst ('via' the "
        "header's); the decoder keeps the header's destination, as tcpdump and Zeek do",
        lambda key, a, b, fields, batch, i: (key == "addrs" and a is not None and b is not None
                                             and a[0] == b[0] and int(batch["ip_version"][i]) == 4
                                             and _has_source_route(batch, i))),
    "ipv6-option-overrun": (
        "an option inside an IPv6 hop-by-hop/destination options header runs past the header: tshark stops "
        "(malformed); the decoder skips the header by its own length field (RFC 8200 section 4.2), as Zeek",
        lambda key, a, b, fields, batch, i: (b is None and a is not None
                                             and _protocols(fields)[-1] in ("ipv6.dstopts", "ipv6.hopopts"))),
    "srv6-ethernet": (
        "Ethernet directly in IPv6 (next header 143, SRv6 End.DX2, RFC 8986) is not decapsulated",
        lambda key, a, b, fields, batch, i: "ipv6.routing:eth" in ":".join(_protocols(fields))),
}


def excused(key, a, b, fields, batch, i) -> str | None:
    for name, (_reason, applies) in DIVERGENCES.items():
        if applies(key, a, b, fields, batch, i):
            return name
    return None


def run_all(tshark: str, files: list[str]) -> tuple[Counter, list]:
    counts, mismatches = Counter(), []
    with ThreadPoolExecutor(2) as pool:
        futures = [(rel, pool.submit(run_tshark, tshark, CAPTURES / rel)) for rel in files]
        for rel, future in futures:
            c, m = compare_file(rel, future.result())
            counts.update(c)
            mismatches.extend(m)
    return counts, mismatches


@pytest.fixture(scope="module")
def oracle(captures_real, tshark):
    files = sample()
    counts, mismatches = run_all(tshark.path, files)
    return files, counts, mismatches


def test_fields_agree_with_tshark(oracle):
    files, counts, mismatches = oracle
    assert len(files) >= 250
    assert counts["frames"] >= 1500
    detail = "\n".join(f"{rel} frame {frame} {key}: ours {a} tshark {b} ({protos})"
                       for rel, frame, key, a, b, protos in mismatches[:40])
    assert not mismatches, f"{len(mismatches)} disagreements:\n{detail}"


def test_every_compared_field_was_exercised(oracle):
    _files, counts, _ = oracle
    for key in ("addrs", "ttl", "ports", "tcp_flags", "mss", "icmp", "mtu", "quote_addrs", "quote_ports", "arp"):
        assert counts[key + ":agree"] > 0, key

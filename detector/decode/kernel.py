"""The compiled header decoder: one pass over a batch's records, filling every decoded column.

`decode_batch` walks each record once: its fingerprint (XXH64 of all captured
bytes, detector.decode.xxh64), then the link layer of its link type
(detector.decode.link: Ethernet with its tags and FabricPath, 802.11 with
radiotap, SLL, PPP, ...), the network layer (detector.decode.ip: IPv4, IPv6
with its extension-header chain, ARP), the transport header and ICMP error
quotes (detector.decode.transport), and tunnels (detector.decode.tunnels),
which it removes (to `MAX_TUNNEL_DEPTH`) so the network columns describe the
innermost packet and the outer_* columns the outermost one. A tunnel found
by a UDP port is validated as its own analyzer (Zeek's, Wireshark's, the
RFC's receiver) would before it is removed; a payload that fails stays a UDP
datagram.

Every read is bounded by the record's captured length, and within an IP
packet also by the IP length (so Ethernet padding never parses as a header).
A header cut short or malformed sets L_TRUNCATED and ends the decode there;
the fields already decoded keep their layer bits. The layers' functions are
plain `njit` helpers compiled into the two kernels here, whose cache is keyed
by the modules they import as well (detector.cpu), so an edit of any of them
recompiles the kernels.

Speed (about 120 ns of CPU per Ethernet/IPv4/TCP packet, a quarter of it the
fingerprint): every function is compiled without numba's reference counting
(`_nrt=False`), since none allocates and the arrays belong to the caller;
with it, each call paid atomic increments and decrements for each array it
was passed, which more than doubled the time. Byte reads go through `u8`,
`u16`... (detector.decode.read) with an unsigned offset, so LLVM merges them
into single loads.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..cpu import kernel, prefetch
from ..schema import LINKTYPE_IEEE802_11, LINKTYPE_IEEE802_11_RADIOTAP
from .columns import FINGERPRINT, LAYERS
from .ip import NO_TRANSPORT, arp, ip4, ip6
from .link import (
    ETHERTYPE_ARP,
    ETHERTYPE_IP4,
    ETHERTYPE_IP6,
    ETHERTYPE_MPLS,
    ETHERTYPE_NSH,
    ETHERTYPE_RARP,
    ETHERTYPE_TEB,
    INNER,
    INNER_IEEE80211,
    ethernet,
    ieee80211,
    l2_walk,
    link,
    wlan_link,
)
from .transport import transport
from .tunnels import begin_tunnel
from .xxh64 import xxh64

MAX_TUNNEL_DEPTH = 4          # tunnels removed per frame; deeper ones stay as they are
# The headers of the record this many places ahead are requested from memory
# while the current one decodes (detector.cpu): two cache lines hold the link,
# network and transport headers of nearly every frame.
PREFETCH_RECORDS = 6
HEADER_LINE = 64
# Seed 0, so a fingerprint equals `xxhsum -H64` of the frame's bytes.
FINGERPRINT_SEED = np.uint64(0)


@kernel("(u1[::1], i8[::1], u4[::1], u8[::1])", _nrt=False, nogil=True)
def fingerprint_rows(data, offset, caplen, out):
    """XXH64 of each record's captured bytes, for callers that hash without decoding."""
    for i in range(offset.shape[0]):
        out[i] = xxh64(data, offset[i], offset[i] + np.int64(caplen[i]), FINGERPRINT_SEED)


@njit(_nrt=False)
def _frame(b, s, end, wire, lt, msdu, i, c8, c16, c32, c64):
    """Decode one record, captured to `end`, `wire` on the wire (A-MSDU subframe `msdu` of an 802.11
    frame); returns its layer bits."""
    if lt == LINKTYPE_IEEE802_11 or lt == LINKTYPE_IEEE802_11_RADIOTAP:
        net, p, layers, end, wire = wlan_link(b, s, end, wire, lt, msdu, i, c16, c64)
    else:
        net, p, layers = link(b, s, end, lt, i, c16, c64)
    depth = 0
    while True:
        if net == ETHERTYPE_IP4 or net == ETHERTYPE_IP6:
            if net == ETHERTYPE_IP4:
                layers, proto, q, lim, ip_end, whole = ip4(b, s, p, end, wire, layers, i, c8, c16, c32, c64)
            else:
                layers, proto, q, lim, ip_end, whole = ip6(b, s, p, end, wire, layers, i, c8, c16, c32, c64)
            if proto == NO_TRANSPORT:
                return layers
            # a tunnel is removed from a whole packet only: a fragment's payload is not a packet yet
            layers, net, p, kind = transport(b, s, q, lim, proto, ip_end - q, depth < MAX_TUNNEL_DEPTH and whole,
                                             layers, i, c8, c16, c32, c64)
            if kind == 0:
                return layers
            layers = begin_tunnel(kind, layers, i, c8, c16, c32, c64)
            depth += 1
            # the tunnel's payload ends with its carrier (not with the frame's padding or trailer)
            wire = ip_end
            end = min(end, ip_end)
            if net == ETHERTYPE_TEB:
                net, p, layers = ethernet(b, p, end, INNER, layers, i, c16, c64)
            elif net == ETHERTYPE_MPLS or net == ETHERTYPE_NSH:
                net, p, layers = l2_walk(b, p, end, net, INNER, layers, i, c16)
            elif net == INNER_IEEE80211:
                net, p, layers, end, wire = ieee80211(b, p, end, wire, msdu, INNER, layers, i, c16, c64)
        elif net == ETHERTYPE_ARP or net == ETHERTYPE_RARP:
            return arp(b, p, end, layers, i, c16, c32, c64)
        elif net == ETHERTYPE_TEB and depth < MAX_TUNNEL_DEPTH:
            # an Ethernet frame behind a Network Service Header (detector.decode.link.l2_walk): no outer IP
            # packet to keep, so no tunnel; its nesting counts against the same bound
            depth += 1
            net, p, layers = ethernet(b, p, end, INNER, layers, i, c16, c64)
        else:
            return layers


@kernel("(u1[::1], i8[::1], u4[::1], u4[::1], u2[::1], i8, b1, u1[:, ::1], u2[:, ::1], u4[:, ::1], "
        "u8[:, ::1])", _nrt=False, nogil=True)
def decode_batch(data, offset, caplen, wirelen, linktype, msdu, with_fingerprint, c8, c16, c32, c64):
    """Decode every record of a batch into the (column, record) arrays c8, c16, c32 and c64.

    Without the GIL, so reading and decoding the next batch overlaps the
    consumers' work on this one. The fingerprint reads every captured byte,
    the rest only headers: it is skipped when no consumer asked for it.
    `msdu` says which subframe of an 802.11 A-MSDU the rows describe (0, the
    first, for records read from a capture; a constant, so the common path
    loads nothing more per record).
    """
    n = offset.shape[0]
    for i in range(n):
        if i + PREFETCH_RECORDS < n:
            ahead = offset[i + PREFETCH_RECORDS]
            prefetch(data, ahead)
            prefetch(data, ahead + HEADER_LINE)
        s = offset[i]
        end = s + np.int64(caplen[i])
        if with_fingerprint:
            c64[FINGERPRINT, i] = xxh64(data, s, end, FINGERPRINT_SEED)
        wire = s + max(np.int64(wirelen[i]), np.int64(caplen[i]))
        c32[LAYERS, i] = _frame(data, s, end, wire, np.int64(linktype[i]), msdu, i, c8, c16, c32, c64)

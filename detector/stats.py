"""Capture-wide counters (capinfos-like): a mergeable summary of decoded batches."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .findings import iso_time
from .schema import IP, L_ARP, L_ICMP, L_ICMP6, L_IP4, L_IP6, L_TCP, L_TUNNEL, L_UDP, L_VLAN, PacketBatch, linktype_name

# Layer bits counted in the summary, by the name shown to the user.
COUNTED_LAYERS = {
    "ipv4": L_IP4, "ipv6": L_IP6, "tcp": L_TCP, "udp": L_UDP, "icmp": L_ICMP,
    "icmpv6": L_ICMP6, "arp": L_ARP, "vlan": L_VLAN, "tunnelled": L_TUNNEL,
}


@dataclass
class CaptureStats:
    needs_fingerprint = False   # a ClassVar (no annotation): not a dataclass field

    packets: int = 0
    bytes: int = 0            # captured bytes
    wire_bytes: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    decoded: int = 0          # packets whose network layer (IP or ARP) was decoded
    linktypes: Counter = field(default_factory=Counter)   # linktype number -> packets
    layers: Counter = field(default_factory=Counter)      # COUNTED_LAYERS name -> packets

    def update(self, batch: PacketBatch) -> None:
        n = len(batch)
        if n == 0:
            return
        ts = batch["ts_ns"]
        self.packets += n
        self.bytes += int(batch["caplen"].sum(dtype=np.int64))
        self.wire_bytes += int(batch["wirelen"].sum(dtype=np.int64))
        lo, hi = int(ts.min()), int(ts.max())
        self.first_ns = lo if self.first_ns is None else min(self.first_ns, lo)
        self.last_ns = hi if self.last_ns is None else max(self.last_ns, hi)
        layers = batch["layers"]
        self.decoded += int(np.count_nonzero(layers & np.uint32(IP | L_ARP)))
        kinds, counts = np.unique(batch["linktype"], return_counts=True)
        self.linktypes.update(dict(zip(kinds.tolist(), counts.tolist())))
        for name, bit in COUNTED_LAYERS.items():
            hits = int(np.count_nonzero(layers & np.uint32(bit)))
            if hits:
                self.layers[name] += hits

    def merge(self, other: CaptureStats) -> CaptureStats:
        self.packets += other.packets
        self.bytes += other.bytes
        self.wire_bytes += other.wire_bytes
        for attr, pick in (("first_ns", min), ("last_ns", max)):
            mine, theirs = getattr(self, attr), getattr(other, attr)
            setattr(self, attr, theirs if mine is None else mine if theirs is None else pick(mine, theirs))
        self.decoded += other.decoded
        self.linktypes.update(other.linktypes)
        self.layers.update(other.layers)
        return self

    @property
    def duration_s(self) -> float:
        if self.first_ns is None:
            return 0.0
        return (self.last_ns - self.first_ns) / 1e9

    @property
    def decoded_ratio(self) -> float:
        return self.decoded / self.packets if self.packets else 0.0

    def to_json(self) -> dict:
        return {
            "packets": self.packets,
            "bytes": self.bytes,
            "wire_bytes": self.wire_bytes,
            "first_seen": iso_time(self.first_ns),
            "last_seen": iso_time(self.last_ns),
            "duration_s": round(self.duration_s, 6),
            "linktypes": {linktype_name(k): v for k, v in sorted(self.linktypes.items())},
            "decoded_ratio": round(self.decoded_ratio, 6),
            "layers": dict(sorted(self.layers.items())),
        }

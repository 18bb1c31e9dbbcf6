"""Links as the neighbour rules tell them apart: the capture interface and the VLAN tags a frame came with.

One link is one L2 broadcast domain as far as the capture can tell: two
frames on different interfaces, or with different outer or inner VLAN ids,
are on different links even where their addresses agree (the ARP and VRRP
rules, and the one of malformed messages, key their state by it).
"""
from __future__ import annotations

import numpy as np

from ..schema import L_QINQ, L_VLAN, PacketBatch


def links_of(batch: PacketBatch, rows: np.ndarray) -> np.ndarray:
    """Each row's link: interface << 32 | outer VLAN << 16 | inner VLAN (0 where untagged)."""
    layers = batch["layers"][rows]
    outer = np.where((layers & np.uint32(L_VLAN)) != 0, batch["vlan_outer"][rows], 0).astype(np.uint64)
    inner = np.where((layers & np.uint32(L_QINQ)) != 0, batch["vlan_inner"][rows], 0).astype(np.uint64)
    return (batch["iface"][rows].astype(np.uint64) << np.uint64(32)) | (outer << np.uint64(16)) | inner


def link_text(link: int) -> str:
    """A link as an engineer names it: "VLAN 10", "VLAN 10.20 on interface 1", "" for untagged interface 0."""
    iface, outer, inner = link >> 32, (link >> 16) & 0xFFFF, link & 0xFFFF
    parts = []
    if outer:
        parts.append(f"VLAN {outer}" + (f".{inner}" if inner else ""))
    if iface:
        parts.append(f"interface {iface}")
    return " on ".join(parts)

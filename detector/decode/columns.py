"""Where each decoded column lives while the compiled decoder fills it.

The decoder writes into four 2-D arrays, one per dtype, each row one column of
PACKET_COLUMNS (C order, so every column is a contiguous row). Passing four
arrays instead of fifty-odd keeps the compiled signature small and the
compile fast; the rows are handed out as the batch's columns without a copy.
The decoder's modules name each column's row below (`c16[SRC_PORT, i]`).
"""
from __future__ import annotations

import numpy as np

from ..schema import PACKET_COLUMNS

GROUP_DTYPES = (np.uint8, np.uint16, np.uint32, np.uint64)
GROUP_NAMES: dict[type, tuple[str, ...]] = {
    dtype: tuple(name for name, (dt, _) in PACKET_COLUMNS.items() if dt is dtype) for dtype in GROUP_DTYPES
}
# column name -> its row in the array of its dtype
ROW: dict[str, int] = {name: names.index(name) for names in GROUP_NAMES.values() for name in names}

# ---- the rows the decoder writes -------------------------------------------
LAYERS = ROW["layers"]
SRC_MAC, DST_MAC = ROW["src_mac"], ROW["dest_mac"]
VLAN_OUTER, VLAN_INNER, ETHERTYPE = ROW["vlan_outer"], ROW["vlan_inner"], ROW["ethertype"]
PKT_TYPE = ROW["pkt_type"]
IP_VERSION, PROTO, TTL = ROW["ip_version"], ROW["proto"], ROW["ttl"]
SRC_IP_HI, SRC_IP_LO = ROW["src_ip_hi"], ROW["src_ip_lo"]
DST_IP_HI, DST_IP_LO = ROW["dest_ip_hi"], ROW["dest_ip_lo"]
IP_ID, IP_LEN, IP_FLAGS, FRAG_OFFSET = ROW["ip_id"], ROW["ip_len"], ROW["ip_flags"], ROW["frag_offset"]
FLOW_LABEL = ROW["flow_label"]
SRC_PORT, DST_PORT = ROW["src_port"], ROW["dest_port"]
TCP_FLAGS, TCP_SEQ, TCP_ACK, TCP_WINDOW = ROW["tcp_flags"], ROW["tcp_seq"], ROW["tcp_ack"], ROW["tcp_window"]
TCP_MSS, TCP_WSCALE, TCP_TSVAL, TCP_TSECR = ROW["tcp_mss"], ROW["tcp_wscale"], ROW["tcp_tsval"], ROW["tcp_tsecr"]
PAYLOAD_LEN, PAYLOAD_OFF = ROW["payload_len"], ROW["payload_off"]
L3_OFF, L4_OFF = ROW["l3_off"], ROW["l4_off"]
ICMP_TYPE, ICMP_CODE, ICMP_MTU = ROW["icmp_type"], ROW["icmp_code"], ROW["icmp_mtu"]
QUOTE_SRC_HI, QUOTE_SRC_LO = ROW["quote_src_ip_hi"], ROW["quote_src_ip_lo"]
QUOTE_DST_HI, QUOTE_DST_LO = ROW["quote_dest_ip_hi"], ROW["quote_dest_ip_lo"]
QUOTE_PROTO, QUOTE_SRC_PORT, QUOTE_DST_PORT = ROW["quote_proto"], ROW["quote_src_port"], ROW["quote_dest_port"]
ARP_OP, ARP_SHA, ARP_THA, ARP_SPA, ARP_TPA = (ROW["arp_op"], ROW["arp_sha"], ROW["arp_tha"], ROW["arp_spa"],
                                              ROW["arp_tpa"])
TUNNEL = ROW["tunnel"]
MSDU_COUNT = ROW["msdu_count"]
OUTER_SRC_HI, OUTER_SRC_LO = ROW["outer_src_ip_hi"], ROW["outer_src_ip_lo"]
OUTER_DST_HI, OUTER_DST_LO = ROW["outer_dest_ip_hi"], ROW["outer_dest_ip_lo"]
OUTER_PROTO, OUTER_SRC_PORT, OUTER_DST_PORT = ROW["outer_proto"], ROW["outer_src_port"], ROW["outer_dest_port"]
FINGERPRINT = ROW["fingerprint"]

# Columns that describe the link a frame was captured on; everything else is
# network-layer and is cleared when a tunnel is removed.
_LINK_COLUMNS = {"layers", "src_mac", "dest_mac", "pkt_type", "vlan_outer", "vlan_inner", "ethertype", "fingerprint",
                 "msdu_count", "tunnel", "outer_src_ip_hi", "outer_src_ip_lo", "outer_dest_ip_hi", "outer_dest_ip_lo",
                 "outer_proto", "outer_src_port", "outer_dest_port"}
NET_ROWS_U8, NET_ROWS_U16, NET_ROWS_U32, NET_ROWS_U64 = (
    tuple(ROW[name] for name in GROUP_NAMES[dtype] if name not in _LINK_COLUMNS)
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64))


def allocate(n: int) -> dict[type, np.ndarray]:
    """Zeroed (columns, n) arrays, one per dtype: a column nobody writes stays masked at 0."""
    return {dtype: np.zeros((len(GROUP_NAMES[dtype]), n), dtype=dtype) for dtype in GROUP_DTYPES}


def columns(groups: dict[type, np.ndarray]) -> dict[str, np.ndarray]:
    """Name -> column view of the arrays `allocate` returned."""
    return {name: groups[dtype][ROW[name]] for dtype, names in GROUP_NAMES.items() for name in names}

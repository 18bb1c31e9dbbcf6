"""The columns every stage shares: raw record batches and decoded packet batches.

A reader (detector.ingest) yields `RawBatch`es: the captured bytes of up to
`BATCH_PACKETS` records in one contiguous uint8 buffer plus per-record arrays.
The decoder (detector.decode) turns one into a `PacketBatch`: the same records
with one numpy array per decoded field (`PACKET_COLUMNS`).

Absent fields are *masked*, never guessed: each column belongs to a layer bit
in the `layers` column (`VALID_WHEN`), and a value is meaningful only in the
rows where that bit is set. The array itself holds 0 there.

Addresses: IPv4 and IPv6 share one 128-bit representation, stored big-endian
as two uint64 halves (`*_hi`, `*_lo`); IPv4 is IPv4-mapped IPv6
(::ffff:a.b.c.d), so ordering and equality work across both families.
MAC addresses are uint64 holding the 48-bit address big-endian.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Records per batch: bounds memory (about 200 bytes of columns per packet plus
# the captured bytes) independent of file size. Larger batches amortise
# per-batch overhead; smaller ones give lower latency in live capture.
BATCH_PACKETS = 1 << 18
# Captured bytes per batch; a batch ends at whichever limit comes first.
BATCH_BYTES = 64 << 20
# Largest record accepted (as Wireshark: WTAP_MAX_PACKET_SIZE_STANDARD).
MAX_CAPLEN = 262144

# ---- layer bits (the `layers` column) -----------------------------------
L_SRC_MAC = 1 << 0      # src_mac valid (Ethernet, SLL with a 6-byte address)
L_DST_MAC = 1 << 1      # dest_mac valid (Ethernet)
L_VLAN = 1 << 2         # vlan_outer valid (one or more 802.1Q/802.1ad tags)
L_QINQ = 1 << 3         # vlan_inner valid (two or more tags)
L_ETHERTYPE = 1 << 4    # ethertype valid (of the innermost link header)
L_IP4 = 1 << 5          # an IPv4 header was decoded
L_IP6 = 1 << 6          # an IPv6 header was decoded
L_TCP = 1 << 7          # TCP header decoded: tcp_* columns valid
L_UDP = 1 << 8          # UDP header decoded
L_ICMP = 1 << 9         # ICMPv4: icmp_type/icmp_code valid
L_ICMP6 = 1 << 10       # ICMPv6: icmp_type/icmp_code valid
L_ARP = 1 << 11         # ARP: arp_* columns valid
L_PORTS = 1 << 12       # src_port/dest_port valid (TCP, UDP, SCTP, DCCP, UDP-Lite)
L_FRAG = 1 << 13        # IP fragment (MF set or offset > 0); non-first ones carry no ports
L_MSS = 1 << 14         # tcp_mss valid (MSS option present)
L_WSCALE = 1 << 15      # tcp_wscale valid
L_SACK_PERM = 1 << 16   # SACK-permitted option present (no column: the bit is the value)
L_TCP_TS = 1 << 17      # tcp_tsval/tcp_tsecr valid
L_MTU = 1 << 18         # icmp_mtu valid (ICMP 3/4 next-hop MTU, ICMPv6 Packet Too Big MTU)
L_QUOTE = 1 << 19       # quote_* address/proto columns valid (ICMP error quoting an IP header)
L_QUOTE_PORTS = 1 << 20 # quote_src_port/quote_dest_port valid
L_TUNNEL = 1 << 21      # network fields are those of the innermost packet; `tunnel` says which
L_TRUNCATED = 1 << 22   # headers cut short by the snapshot length or malformed
L_SCTP = 1 << 23        # SCTP common header decoded (ports valid)
L_PAYLOAD = 1 << 24     # payload_len/payload_off valid
L_AMSDU = 1 << 25       # an 802.11 A-MSDU: msdu_count valid; the other columns describe one subframe
L_PKT_TYPE = 1 << 26    # pkt_type valid (a Linux cooked capture, SLL or SLL2)
# an IPv4 header (any of the frame's, tunnels included) whose checksum does not verify: a frame damaged on the
# way (its FCS would have dropped it) or fuzzed; 0 in the field is a checksum left to an offloading NIC, not this
L_BAD_CHECKSUM = 1 << 27

IP = L_IP4 | L_IP6
ICMP_ANY = L_ICMP | L_ICMP6

# ---- tunnel kinds (the `tunnel` column; outermost encapsulation removed) --
TUNNEL_NONE = 0
TUNNEL_IPIP = 1      # IPv4/IPv6 in IPv4/IPv6 (protocols 4 and 41)
TUNNEL_GRE = 2
TUNNEL_VXLAN = 3
TUNNEL_GENEVE = 4
TUNNEL_TEREDO = 5
TUNNEL_GTP = 6
TUNNEL_AYIYA = 7
TUNNEL_ERSPAN = 8
TUNNEL_NAMES = {
    TUNNEL_NONE: "", TUNNEL_IPIP: "ipip", TUNNEL_GRE: "gre", TUNNEL_VXLAN: "vxlan",
    TUNNEL_GENEVE: "geneve", TUNNEL_TEREDO: "teredo", TUNNEL_GTP: "gtp",
    TUNNEL_AYIYA: "ayiya", TUNNEL_ERSPAN: "erspan",
}

# ---- raw records --------------------------------------------------------
RAW_COLUMNS = {
    "frame": np.int64,      # 1-based record number across the whole input (tshark frame.number)
    "offset": np.int64,     # start of the record's captured bytes in `data`
    "caplen": np.uint32,    # captured bytes
    "wirelen": np.uint32,   # original length on the wire
    "ts_ns": np.int64,      # time, nanoseconds since the Unix epoch (UTC)
    "iface": np.uint16,     # interface number (pcapng IDB index across sections; 0 for pcap)
    "linktype": np.uint16,  # LINKTYPE_* of the record's interface
    # pcapng epb_flags (0 where the record has none, and in pcap): bits 0-1 direction (EPB_INBOUND,
    # EPB_OUTBOUND), 2-4 reception type (EPB_RX_*), 5-8 FCS length in octets, 16-31 link-layer errors
    "epb_flags": np.uint32,
}
# epb_flags fields (pcapng section 4.3.1)
EPB_DIRECTION_MASK = 0x3
EPB_INBOUND, EPB_OUTBOUND = 1, 2
EPB_RX_SHIFT, EPB_RX_MASK = 2, 0x7
EPB_RX_UNICAST, EPB_RX_MULTICAST, EPB_RX_BROADCAST, EPB_RX_PROMISCUOUS = 1, 2, 3, 4
EPB_FCS_SHIFT, EPB_FCS_MASK = 5, 0xF
EPB_ERRORS_SHIFT = 16

# ---- decoded columns: name -> (dtype, layer bits any of which make it valid)
# A mask of 0 means "always valid".
PACKET_COLUMNS: dict[str, tuple[type, int]] = {
    "layers": (np.uint32, 0),
    "src_mac": (np.uint64, L_SRC_MAC),
    "dest_mac": (np.uint64, L_DST_MAC),
    # Linux cooked capture packet type (SLL, SLL2): PKT_HOST 0, PKT_BROADCAST 1, PKT_MULTICAST 2, PKT_OTHERHOST 3
    # (another host's unicast, seen in promiscuous mode), PKT_OUTGOING 4 (sent by the capturing host)
    "pkt_type": (np.uint16, L_PKT_TYPE),
    "vlan_outer": (np.uint16, L_VLAN),
    "vlan_inner": (np.uint16, L_QINQ),
    "ethertype": (np.uint16, L_ETHERTYPE),
    "ip_version": (np.uint8, IP),
    "src_ip_hi": (np.uint64, IP),
    "src_ip_lo": (np.uint64, IP),
    "dest_ip_hi": (np.uint64, IP),
    "dest_ip_lo": (np.uint64, IP),
    "proto": (np.uint8, IP),          # after walking IPv6 extension headers and an IPv4 AH
    "ttl": (np.uint8, IP),            # TTL or hop limit
    "ip_id": (np.uint32, IP),         # IPv4 identification; IPv6 fragment identification (0 if none)
    "ip_len": (np.uint32, IP),        # IPv4 total length; IPv6 40 + payload length
    "ip_flags": (np.uint8, IP),       # IP_DF | IP_MF
    "frag_offset": (np.uint32, IP),   # fragment offset in bytes
    "flow_label": (np.uint32, L_IP6), # IPv6 flow label, 20 bits (RFC 6437)
    "src_port": (np.uint16, L_PORTS),
    "dest_port": (np.uint16, L_PORTS),
    "tcp_flags": (np.uint16, L_TCP),  # 9 bits: NS CWR ECE URG ACK PSH RST SYN FIN
    "tcp_seq": (np.uint32, L_TCP),
    "tcp_ack": (np.uint32, L_TCP),
    "tcp_window": (np.uint16, L_TCP), # raw window field, not scaled
    "tcp_mss": (np.uint16, L_MSS),
    "tcp_wscale": (np.uint8, L_WSCALE),
    "tcp_tsval": (np.uint32, L_TCP_TS),
    "tcp_tsecr": (np.uint32, L_TCP_TS),
    "payload_len": (np.uint32, L_PAYLOAD),  # transport payload bytes per the headers' lengths (wire, not captured)
    "l3_off": (np.uint16, IP),        # offset of the (innermost) IP header in the frame
    "l4_off": (np.uint16, IP),        # offset of the transport header
    "payload_off": (np.uint16, L_PAYLOAD),  # offset of the transport payload
    "icmp_type": (np.uint8, ICMP_ANY),
    "icmp_code": (np.uint8, ICMP_ANY),
    "icmp_mtu": (np.uint32, L_MTU),
    "quote_src_ip_hi": (np.uint64, L_QUOTE),
    "quote_src_ip_lo": (np.uint64, L_QUOTE),
    "quote_dest_ip_hi": (np.uint64, L_QUOTE),
    "quote_dest_ip_lo": (np.uint64, L_QUOTE),
    "quote_proto": (np.uint8, L_QUOTE),
    "quote_src_port": (np.uint16, L_QUOTE_PORTS),
    "quote_dest_port": (np.uint16, L_QUOTE_PORTS),
    "arp_op": (np.uint16, L_ARP),
    "arp_sha": (np.uint64, L_ARP),
    "arp_tha": (np.uint64, L_ARP),
    "arp_spa": (np.uint32, L_ARP),
    "arp_tpa": (np.uint32, L_ARP),
    # 802.11 aggregate MSDUs: the subframes the frame carries (IEEE 802.11-2020 9.3.2.2.2). A row
    # describes the first; detector.decode.expand_msdus gives the others rows of their own
    "msdu_count": (np.uint16, L_AMSDU),
    "tunnel": (np.uint8, L_TUNNEL),
    # the outermost IP header and transport ports of a tunnelled packet (Zeek
    # logs a UDP tunnel such as VXLAN as a connection of its own)
    "outer_src_ip_hi": (np.uint64, L_TUNNEL),
    "outer_src_ip_lo": (np.uint64, L_TUNNEL),
    "outer_dest_ip_hi": (np.uint64, L_TUNNEL),
    "outer_dest_ip_lo": (np.uint64, L_TUNNEL),
    "outer_proto": (np.uint8, L_TUNNEL),
    "outer_src_port": (np.uint16, L_TUNNEL),  # 0 unless the tunnel rides on UDP
    "outer_dest_port": (np.uint16, L_TUNNEL),
    "fingerprint": (np.uint64, 0),    # 64-bit hash of the frame's captured bytes
}

IP_MF = 1  # more fragments
IP_DF = 2  # don't fragment

# TCP flag bits (RFC 9293, RFC 3168, RFC 3540)
TH_FIN = 0x001
TH_SYN = 0x002
TH_RST = 0x004
TH_PSH = 0x008
TH_ACK = 0x010
TH_URG = 0x020
TH_ECE = 0x040  # ECN echo, RFC 3168
TH_CWR = 0x080  # congestion window reduced, RFC 3168
TH_NS = 0x100   # ECN nonce, RFC 3540 (historic)

# IANA protocol numbers used by name
PROTO_ICMP = 1
PROTO_TCP = 6
PROTO_UDP = 17
PROTO_ICMP6 = 58
PROTO_SCTP = 132
PROTO_NAMES = {PROTO_ICMP: "icmp", PROTO_TCP: "tcp", PROTO_UDP: "udp", PROTO_ICMP6: "icmpv6"}

# LINKTYPE_* values (https://www.tcpdump.org/linktypes.html)
LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_PPP = 9
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108
LINKTYPE_PPP_HDLC = 50
LINKTYPE_PPP_ETHER = 51
LINKTYPE_C_HDLC = 104
LINKTYPE_IEEE802_11 = 105
LINKTYPE_IEEE802_11_RADIOTAP = 127
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
LINKTYPE_NAMES = {
    0: "null", 1: "ether", 9: "ppp", 50: "ppp-hdlc", 51: "pppoes", 101: "rawip",
    104: "chdlc", 105: "ieee-802-11", 108: "loop", 113: "linux-sll", 127: "ieee-802-11-radiotap",
    228: "rawip4", 229: "rawip6", 276: "linux-sll2",
}


def linktype_name(linktype: int) -> str:
    return LINKTYPE_NAMES.get(int(linktype), f"LINKTYPE_{int(linktype)}")


@dataclass
class RawBatch:
    """Captured records, not yet decoded. `data[offset[i]:offset[i]+caplen[i]]` is record i."""

    data: np.ndarray                      # uint8 buffer holding the captured bytes
    cols: dict[str, np.ndarray]           # RAW_COLUMNS, all of equal length
    source: str = ""                      # file or interface the records came from

    def __len__(self) -> int:
        return len(self.cols["frame"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]


@dataclass
class PacketBatch:
    """Decoded records: RAW_COLUMNS plus PACKET_COLUMNS, and the raw bytes for evidence."""

    data: np.ndarray
    cols: dict[str, np.ndarray]
    source: str = ""
    warnings: list[str] = field(default_factory=list)
    # application side-tables built for these rows (detector.decode.app.table), by name
    app: dict = field(default_factory=dict)
    # what each packet did to TCP's capture gaps (flows.kernel.EV_*, int8), set by the flow table's update for
    # the consumers after it; None where no flow table saw the batch
    flow_events: np.ndarray | None = None
    # where a partition merge may settle those events again (flows.kernel.update_flows' cut_flow, cut_slot,
    # cut_kind: where the packet's flow may continue one of an earlier partition, the flow's first frame, the
    # packet's kernel.SLOT_* and its event had both endpoints been clean; elsewhere cut_slot is -1 and the others
    # undefined), set with flow_events; None: no flow table's, or an A-MSDU's batch
    flow_cuts: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.cols["frame"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    def valid(self, name: str) -> np.ndarray:
        """Boolean mask of the rows where column `name` carries a value."""
        bits = PACKET_COLUMNS.get(name, (None, 0))[1]
        if not bits:
            return np.ones(len(self), dtype=bool)
        return (self.cols["layers"] & np.uint32(bits)) != 0

    def frame_bytes(self, i: int) -> bytes:
        off = int(self.cols["offset"][i])
        return self.data[off:off + int(self.cols["caplen"][i])].tobytes()

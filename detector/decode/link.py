"""The link layer of the compiled decoder: from a record's first byte to its network header.

Ethernet with its tags (802.1Q, 802.1ad, VN-Tag, 802.1ah, Cisco MetaData),
Cisco FabricPath, LLC/SNAP, PPPoE, MPLS stacks and Network Service Headers;
802.11 data frames with radiotap and A-MSDUs; Linux cooked captures (SLL,
SLL2), BSD loopback, PPP, Cisco HDLC and raw IP. Each function returns the
ethertype of what follows (0 when nothing the decoder knows does) and where
it starts, and fills the link columns. Header fields are named by their
offset from the header's start, as the standard that defines the header
draws it.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ..schema import (
    L_AMSDU,
    L_DST_MAC,
    L_ETHERTYPE,
    L_PKT_TYPE,
    L_QINQ,
    L_SRC_MAC,
    L_TRUNCATED,
    L_VLAN,
    LINKTYPE_C_HDLC,
    LINKTYPE_ETHERNET,
    LINKTYPE_IEEE802_11,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_LOOP,
    LINKTYPE_NULL,
    LINKTYPE_PPP,
    LINKTYPE_PPP_ETHER,
    LINKTYPE_PPP_HDLC,
    LINKTYPE_RAW,
)
from .columns import DST_MAC, ETHERTYPE, MSDU_COUNT, PKT_TYPE, SRC_MAC, VLAN_INNER, VLAN_OUTER
from .read import MAC_BYTES, mac, u8, u16, u32

# ---- ethertypes (IEEE Registration Authority) ----------------------------------
ETHERTYPE_IP4 = 0x0800        # RFC 894
ETHERTYPE_ARP = 0x0806        # RFC 826
ETHERTYPE_RARP = 0x8035       # RFC 903, same layout as ARP
ETHERTYPE_IP6 = 0x86DD        # RFC 8200
ETHERTYPE_VLAN = 0x8100       # IEEE 802.1Q customer tag
ETHERTYPE_QINQ = 0x88A8       # IEEE 802.1ad service tag
ETHERTYPE_QINQ_OLD = 0x9100   # pre-standard QinQ tag, still common
ETHERTYPE_PPPOE_SESSION = 0x8864  # RFC 2516
ETHERTYPE_MPLS = 0x8847       # RFC 3032 unicast
ETHERTYPE_MPLS_MC = 0x8848    # RFC 3032 multicast (RFC 5332)
ETHERTYPE_TEB = 0x6558        # transparent Ethernet bridging (GRE, Geneve: an Ethernet frame follows)
ETHERTYPE_ERSPAN_2 = 0x88BE   # ERSPAN type I (no header) and II (8-byte header), draft-foschiano-erspan
ETHERTYPE_ERSPAN_3 = 0x22EB   # ERSPAN type III (12-byte header, optional 8-byte subheader)
ETHERTYPE_PPP = 0x880B        # PPP in enhanced GRE, RFC 2637
ETHERTYPE_PBB = 0x88E7        # IEEE 802.1ah I-TAG: 4-byte tag, then customer destination and source MAC
ETHERTYPE_VNTAG = 0x8926      # Cisco VN-Tag: 4-byte tag, then a type field as after a VLAN tag
# Cisco FabricPath (Wireshark's packet-cisco-fp-mim.c): switch-ID addresses, this type, a 2-byte
# FTAG/TTL, then the classical Ethernet frame; an 802.1ad or 802.1Q tag may come before the type
ETHERTYPE_FABRICPATH = 0x8903
ETHERTYPE_CMD = 0x8909        # Cisco MetaData (TrustSec's SGT tag): 6-byte header, then a type field
ETHERTYPE_NSH = 0x894F        # Network Service Header, RFC 8300 section 11.1
ETHERTYPE_BYTES = 2           # a type field, wherever it stands
# not an ethertype: an 802.11 frame follows the tunnel header
INNER_IEEE80211 = 0x10000

# ---- Ethernet (IEEE 802.3-2022 clause 3.1.1): destination, source, type or length ----
ETH_DESTINATION = 0
ETH_SOURCE = 6
ETH_TYPE = 12
ETH_HEADER = 14
ETH_MAX_LENGTH = 1500         # a type field at or below this is a length (LLC follows)
# ---- tags: 802.1Q/802.1ad (IEEE 802.1Q-2022 section 9.6), VN-Tag, 802.1ah, FabricPath --
VLAN_TCI = 0                  # priority, drop eligible, VLAN identifier
VLAN_TYPE = 2
VLAN_TAG = 4
VLAN_VID_MASK = 0x0FFF
FABRICPATH_FTAG_TTL = 2
PBB_HEADER = 4 + 2 * MAC_BYTES  # I-TAG, then the customer's destination and source
VNTAG_HEADER = 4
# Cisco MetaData (Wireshark's packet-cisco-metadata.c, as it reads it whatever the version and length
# fields say): version, length, option type (2 bytes), SGT (2 bytes), then the type of what follows
CMD_HEADER = 6
MAX_L2_HEADERS = 8            # tags, PPPoE and MPLS stacks walked before giving up
# ---- LLC/SNAP (IEEE 802.2, RFC 1042 and IEEE 802.1H) ------------------------------
SNAP_LLC = 0                  # DSAP, SSAP, control: the top three bytes of this word
SNAP_CONTROL = 2              # control and OUI: the OUI is the low three bytes of this word
SNAP_TYPE = 6
SNAP_HEADER = 8
LLC_SNAP = 0xAAAA03           # RFC 1042: DSAP/SSAP 0xAA, UI control, then OUI and type
OUI_MASK = 0xFFFFFF
OUI_BRIDGE_TUNNEL = 0x0000F8  # IEEE 802.1H: the other OUI whose SNAP type is an ethertype (Wireshark)
# ---- MPLS (RFC 3032 section 2.1): label, traffic class, S, TTL ------------------------
MPLS_TC_S = 2                 # the byte holding the traffic class and the bottom-of-stack bit
MPLS_BOTTOM_OF_STACK = 0x01   # S bit
MPLS_LABEL = 4
# ---- Network Service Header (RFC 8300 section 2): base header, service path header, context headers --
NSH_VERSION_LENGTH = 0        # 16 bits: version (top 2), O, U, TTL (6 bits), length in 4-byte words (low 6)
NSH_MD_TYPE = 2               # its low 4 bits, after 4 unassigned ones
NSH_NEXT_PROTOCOL = 3
NSH_FIXED = 8                 # the base and the service path header (SPI, service index)
NSH_VERSION_SHIFT = 14        # version 0, the only one (section 2.2)
NSH_LENGTH_MASK = 0x003F
NSH_WORD = 4
NSH_MD_TYPE_MASK = 0x0F
NSH_MD_TYPE_1 = 1             # section 2.4: four fixed context headers; the length must be 6 words
NSH_MD_TYPE_2 = 2             # section 2.5: variable context headers; the length at least 2 words
NSH_MD_TYPE_1_LENGTH = 6 * NSH_WORD
NSH_IP4 = 1                   # next protocol (section 11.2.5)
NSH_IP6 = 2
NSH_ETHERNET = 3
NSH_NSH = 4
NSH_MPLS = 5
# ---- PPP (RFC 1661, RFC 1662) and PPPoE (RFC 2516) --------------------------------
PPPOE_HEADER = 6              # RFC 2516 section 4: version/type, code, session id, length
PPP_IP4 = 0x0021              # RFC 1332
PPP_IP6 = 0x0057              # RFC 5072
PPP_MPLS = 0x0281             # RFC 3032 section 4.3
PPP_ADDRESS_CONTROL = 0xFF03  # RFC 1662 HDLC-like framing, optional before the protocol
PPP_PROTOCOL_END = 0x01       # RFC 1661 section 2: the protocol field's last byte is odd, the others even
# ---- Cisco HDLC: address, control, ethertype --------------------------------------
CHDLC_PROTOCOL = 2
CHDLC_HEADER = 4
# ---- Linux cooked captures (https://www.tcpdump.org/linktypes/LINKTYPE_LINUX_SLL.html, _SLL2.html) --
SLL_PACKET_TYPE = 0           # 16 bits: PKT_HOST .. PKT_OUTGOING (schema: pkt_type)
SLL_HATYPE = 2                # after the packet type
SLL_ADDRESS_LENGTH = 4
SLL_ADDRESS = 6               # 8 bytes, of which the address length are the address
SLL_PROTOCOL = 14
SLL_HEADER = 16
SLL2_PROTOCOL = 0
SLL2_HATYPE = 8               # after the reserved bytes and the interface index
SLL2_PACKET_TYPE = 10         # 8 bits
SLL2_ADDRESS_LENGTH = 11      # after the packet type
SLL2_ADDRESS = 12
SLL2_HEADER = 20
ARPHRD_CAN = 280              # SLL protocol field is not an ethertype for these devices
ARPHRD_NETLINK = 824
# ---- BSD loopback (https://www.tcpdump.org/linktypes/LINKTYPE_NULL.html) ------------
NULL_FAMILY = 0               # 4 bytes: in the capturing host's order for NULL, big-endian for LOOP
NULL_HEADER = 4
BSD_AF_INET = 2
BSD_AF_INET6_NETBSD = 24      # also OpenBSD
BSD_AF_INET6_FREEBSD = 28
BSD_AF_INET6_DARWIN = 30
# ---- 802.11 MAC header (IEEE 802.11-2020 section 9.3.2.1): frame control, duration, addresses --
WLAN_FRAME_CONTROL = 0        # protocol version, type, subtype
WLAN_FLAGS = 1                # frame control, second byte: DS bits, more fragments, ..., protected, order
WLAN_ADDRESS_1 = 4            # after the duration
WLAN_ADDRESS_2 = 10
WLAN_ADDRESS_3 = 16
WLAN_SEQUENCE_CONTROL = 22    # little-endian: the fragment number is the low nibble of its first byte
WLAN_ADDRESS_4 = 24           # present when both DS bits are set
WLAN_HEADER = 24
WLAN_VERSION_MASK = 0x03      # protocol version 0, the only one
WLAN_TYPE_DATA = 0x08         # type bits of the first byte: data frame
WLAN_TYPE_MASK = 0x0C
WLAN_SUBTYPE_NO_DATA = 0x40   # Null, CF-Ack/Poll without data, QoS Null: no frame body
WLAN_SUBTYPE_QOS = 0x80       # QoS data subtypes: a 2-byte QoS control field follows the addresses
WLAN_TO_DS = 0x01             # second byte: the DS bits say which addresses are which (Table 9-30)
WLAN_FROM_DS = 0x02
WLAN_PROTECTED = 0x40         # the body is encrypted: left undecoded
WLAN_ORDER = 0x80             # in a QoS data frame: a 4-byte HT Control field follows (+HTC)
WLAN_QOS_AMSDU = 0x80         # QoS control, first byte: the body is an A-MSDU (9.2.4.5.9)
WLAN_QOS = 2
WLAN_HT_CONTROL = 4
WLAN_FRAGMENT_MASK = 0x0F
# A-MSDU subframe header (section 9.3.2.2.2): the end stations' addresses, then the MSDU's length
AMSDU_DESTINATION = 0
AMSDU_SOURCE = 6
AMSDU_LENGTH = 12
AMSDU_SUBHEADER = 14
AMSDU_ALIGN = 4               # every subframe but the last is padded to a multiple of 4 bytes
# ---- radiotap (https://www.radiotap.org): version 0, pad, little-endian length, present words --
RADIOTAP_VERSION = 0
RADIOTAP_LENGTH = 2
RADIOTAP_PRESENT = 4
RADIOTAP_HEADER = 8
RADIOTAP_PRESENT_WORD = 4
RADIOTAP_EXT_BYTE = 0x80      # bit 31 of a (little-endian) present word, in its last byte: another word follows
MAX_RADIOTAP_PRESENT = 16
RADIOTAP_TSFT = 0x01          # first present byte, field 0: 8-byte TSF timer, aligned to 8
RADIOTAP_FLAGS = 0x02         # field 1: flags byte
RADIOTAP_TSFT_LEN = 8
RADIOTAP_F_FCS = 0x10         # flags: the 802.11 frame ends with its 4-byte FCS
FCS_LEN = 4
# ---- IP, where a link has no type field (raw IP, MPLS) ----------------------------------
IP_VERSION_BYTE = 0           # RFC 791 section 3.1, RFC 8200 section 3: the version is the high nibble
IP_VERSION_SHIFT = 4

# Constant arguments of the helpers, as numpy scalars: numba compiles a helper once per distinct
# Python literal it is called with (the VLAN/MPLS walk four times, the 802.11 parser twice), a few
# seconds of every first run for branches that cost nothing to take at run time.
OUTER, INNER = np.bool_(True), np.bool_(False)      # the frame's own link header, or one inside a tunnel
NO_LAYERS = np.int64(0)


@njit(_nrt=False)
def ppp_protocol(b, p, end):
    """(network ethertype or 0, offset after the PPP header); optional FF03 and 1-byte protocols."""
    if p + 2 <= end and u16(b, p) == PPP_ADDRESS_CONTROL:
        p += 2
    if p + 1 > end:
        return -1, p
    if u8(b, p) & PPP_PROTOCOL_END:   # protocol field compression, RFC 1661 section 6.5
        proto = u8(b, p)
        p += 1
    else:
        if p + 2 > end:
            return -1, p
        proto = u16(b, p)
        p += 2
    if proto == PPP_IP4:
        return ETHERTYPE_IP4, p
    if proto == PPP_IP6:
        return ETHERTYPE_IP6, p
    if proto == PPP_MPLS:
        return ETHERTYPE_MPLS, p
    return 0, p


@njit(_nrt=False)
def _is_snap(b, p, end):
    """Whether an LLC/SNAP header whose type field is an ethertype (RFC 1042, IEEE 802.1H) is at `p`."""
    if p + SNAP_HEADER > end or (u32(b, p + SNAP_LLC) >> 8) != LLC_SNAP:
        return False
    oui = u32(b, p + SNAP_CONTROL) & OUI_MASK
    return oui == 0 or oui == OUI_BRIDGE_TUNNEL


@njit(_nrt=False)
def ip_by_version(b, p, end):
    """The ethertype of the IP header at `p` by its version (0 for none): a link without a type field."""
    if p + 1 > end:
        return 0
    version = u8(b, p + IP_VERSION_BYTE) >> IP_VERSION_SHIFT
    if version == 4:
        return ETHERTYPE_IP4
    if version == 6:
        return ETHERTYPE_IP6
    return 0


@njit(_nrt=False)
def nsh(b, p, end):
    """A Network Service Header (RFC 8300) at `p`: (ethertype of what follows, or 0 when the header is not one
    a service function forwarder takes or says nothing the decoder follows; -1 when it is cut; its end).

    Version 0 and MD type 1 with its fixed length of 6 words or MD type 2
    with at least the 2 words of the fixed headers (section 2.2), as
    Suricata's decoder checks; the header is skipped by its length field. An
    Ethernet frame after it is announced as transparent Ethernet bridging.
    """
    if p + NSH_FIXED > end:
        return -1, p
    word = u16(b, p + NSH_VERSION_LENGTH)
    length = (word & NSH_LENGTH_MASK) * NSH_WORD
    md_type = u8(b, p + NSH_MD_TYPE) & NSH_MD_TYPE_MASK
    if word >> NSH_VERSION_SHIFT or not ((md_type == NSH_MD_TYPE_1 and length == NSH_MD_TYPE_1_LENGTH)
                                         or (md_type == NSH_MD_TYPE_2 and length >= NSH_FIXED)):
        return 0, p
    if p + length > end:
        return -1, p
    proto = u8(b, p + NSH_NEXT_PROTOCOL)
    q = p + length
    if proto == NSH_IP4:
        return ETHERTYPE_IP4, q
    if proto == NSH_IP6:
        return ETHERTYPE_IP6, q
    if proto == NSH_ETHERNET:
        return ETHERTYPE_TEB, q
    if proto == NSH_NSH:
        return ETHERTYPE_NSH, q
    if proto == NSH_MPLS:
        return ETHERTYPE_MPLS, q
    return 0, q


@njit(_nrt=False)
def l2_walk(b, p, end, etype, outer, layers, i, c16):
    """Walk VLAN tags, PPPoE, MPLS, FabricPath, Cisco MetaData and NSH from `etype` at `p`: (network
    ethertype or 0, offset, layers).

    Tags are recorded only on the outer link; the ethertype column always
    ends up holding the innermost link-layer type field read. A Cisco
    FabricPath header (after the addresses and any tag, as Wireshark's
    heuristic finds it) is stepped over to the classical Ethernet frame it
    carries. The MAC columns keep the addresses the frame was captured with,
    FabricPath's switch IDs: rewriting them here would hand this function
    another array, which costs the Ethernet path about 20 ns a packet. A
    Network Service Header that carries an Ethernet frame returns
    ETHERTYPE_TEB: the frame's own walk (detector.decode.kernel) takes it on.
    """
    tags = 0
    for _ in range(MAX_L2_HEADERS):
        if etype > ETH_MAX_LENGTH:
            c16[ETHERTYPE, i] = etype
            layers |= L_ETHERTYPE
            if etype == ETHERTYPE_IP4 or etype == ETHERTYPE_IP6:
                return etype, p, layers      # the common case first: no tag or shim header to walk
        if etype == ETHERTYPE_VLAN or etype == ETHERTYPE_QINQ or etype == ETHERTYPE_QINQ_OLD:
            if p + VLAN_TAG > end:
                return 0, p, layers | L_TRUNCATED
            tags += 1
            if outer and tags == 1:
                c16[VLAN_OUTER, i] = u16(b, p + VLAN_TCI) & VLAN_VID_MASK
                layers |= L_VLAN
            elif outer and tags == 2:
                c16[VLAN_INNER, i] = u16(b, p + VLAN_TCI) & VLAN_VID_MASK
                layers |= L_QINQ
            etype = u16(b, p + VLAN_TYPE)
            p += VLAN_TAG
        elif etype == ETHERTYPE_FABRICPATH:
            if p + FABRICPATH_FTAG_TTL + ETH_HEADER > end:
                return 0, p, layers | L_TRUNCATED
            etype = u16(b, p + FABRICPATH_FTAG_TTL + ETH_TYPE)
            p += FABRICPATH_FTAG_TTL + ETH_HEADER
        elif etype == ETHERTYPE_VNTAG or etype == ETHERTYPE_PBB or etype == ETHERTYPE_CMD:
            skip = VNTAG_HEADER if etype == ETHERTYPE_VNTAG else PBB_HEADER if etype == ETHERTYPE_PBB else CMD_HEADER
            if p + skip + ETHERTYPE_BYTES > end:
                return 0, p, layers | L_TRUNCATED
            etype = u16(b, p + skip)
            p += skip + ETHERTYPE_BYTES
        elif etype <= ETH_MAX_LENGTH:
            # a length, not a type: only an LLC/SNAP header carries a type on
            if not _is_snap(b, p, end):
                return 0, p, layers
            etype = u16(b, p + SNAP_TYPE)
            p += SNAP_HEADER
        elif etype == ETHERTYPE_PPPOE_SESSION:
            # ppp_protocol bounds the PPP protocol field it reads after the 6-byte PPPoE header
            net, p = ppp_protocol(b, p + PPPOE_HEADER, end)
            if net < 0:
                return 0, p, layers | L_TRUNCATED
            if net != ETHERTYPE_MPLS:
                return net, p, layers
            etype = net
        elif etype == ETHERTYPE_MPLS or etype == ETHERTYPE_MPLS_MC:
            for _label in range(MAX_L2_HEADERS):
                # a label is followed by at least one byte: the next label, or the version nibble of the
                # packet under the bottom one
                if p + MPLS_LABEL + 1 > end:
                    return 0, p, layers | L_TRUNCATED
                bottom = u8(b, p + MPLS_TC_S) & MPLS_BOTTOM_OF_STACK
                p += MPLS_LABEL
                if bottom:
                    break
            else:
                return 0, p, layers | L_TRUNCATED
            # RFC 3032 section 2.2: what the bottom label carries is known from its binding, which a
            # capture lacks; the IP version nibble says it
            version = u8(b, p + IP_VERSION_BYTE) >> IP_VERSION_SHIFT
            if version == 4:
                return ETHERTYPE_IP4, p, layers
            if version == 6:
                return ETHERTYPE_IP6, p, layers
            return 0, p, layers
        elif etype == ETHERTYPE_NSH:
            net, p = nsh(b, p, end)
            if net < 0:
                return 0, p, layers | L_TRUNCATED
            if net != ETHERTYPE_MPLS and net != ETHERTYPE_NSH:
                return net, p, layers
            etype = net
        else:
            return etype, p, layers
    return 0, p, layers | L_TRUNCATED


@njit(_nrt=False)
def ethernet(b, p, end, outer, layers, i, c16, c64):
    """An Ethernet header at `p`: (network ethertype or 0, offset, layers).

    A Cisco FabricPath header is taken off first, as Wireshark's heuristic
    does (its type at the Ethernet type's place, or after one 802.1ad/802.1Q
    tag); its addresses are switch IDs, so the MAC columns hold those of the
    classical Ethernet frame inside.
    """
    if p + ETH_HEADER > end:
        return 0, p, layers | L_TRUNCATED
    etype = u16(b, p + ETH_TYPE)
    if outer:
        c64[DST_MAC, i] = mac(b, p + ETH_DESTINATION)
        c64[SRC_MAC, i] = mac(b, p + ETH_SOURCE)
        layers |= L_SRC_MAC | L_DST_MAC
    return l2_walk(b, p + ETH_HEADER, end, etype, outer, layers, i, c16)


@njit(_nrt=False)
def ieee80211(b, p, end, wire, msdu, outer, layers, i, c16, c64):
    """An 802.11 frame at `p`, captured to `end`, `wire` on the wire (its FCS excluded): (network
    ethertype or 0, offset, layers, end, wire) of its body, or of A-MSDU subframe number `msdu`.

    Data frames only (IEEE 802.11-2020 9.3.2): the header with a fourth
    address when both DS bits are set, QoS control in QoS subtypes and HT
    Control after it when the Order bit is set there (+HTC), then LLC/SNAP.
    Frames without a body (Null, QoS Null), protected (encrypted) bodies and
    fragments after the first stop after the addresses. Source and
    destination MACs follow the DS bits (Table 9-30), as Zeek's analyzer
    takes them, or come from the A-MSDU subframe header, which holds the end
    stations' addresses where address 3 is the BSSID. An A-MSDU's subframes
    are counted in msdu_count; `end` and `wire` then bound the subframe.
    """
    if p + WLAN_HEADER > end:
        return 0, p, layers | L_TRUNCATED, end, wire
    fc = u8(b, p + WLAN_FRAME_CONTROL)
    flags = u8(b, p + WLAN_FLAGS)
    if fc & WLAN_VERSION_MASK or (fc & WLAN_TYPE_MASK) != WLAN_TYPE_DATA:
        return 0, p, layers, end, wire
    ds = flags & (WLAN_TO_DS | WLAN_FROM_DS)
    header = WLAN_HEADER + (MAC_BYTES if ds == WLAN_TO_DS | WLAN_FROM_DS else 0)
    qos = header                  # where the QoS control field is, in a QoS data frame
    if fc & WLAN_SUBTYPE_QOS:
        header += WLAN_QOS + (WLAN_HT_CONTROL if flags & WLAN_ORDER else 0)
    if p + header > end:
        return 0, p, layers | L_TRUNCATED, end, wire
    amsdu = (fc & WLAN_SUBTYPE_QOS) != 0 and (u8(b, p + qos) & WLAN_QOS_AMSDU) != 0
    if outer and not amsdu:
        c64[DST_MAC, i] = mac(b, p + (WLAN_ADDRESS_3 if ds & WLAN_TO_DS else WLAN_ADDRESS_1))
        c64[SRC_MAC, i] = mac(b, p + (WLAN_ADDRESS_4 if ds == WLAN_TO_DS | WLAN_FROM_DS else
                                      WLAN_ADDRESS_3 if ds & WLAN_FROM_DS else WLAN_ADDRESS_2))
        layers |= L_SRC_MAC | L_DST_MAC
    if (fc & WLAN_SUBTYPE_NO_DATA or flags & WLAN_PROTECTED
            or u8(b, p + WLAN_SEQUENCE_CONTROL) & WLAN_FRAGMENT_MASK):
        return 0, p, layers, end, wire
    body = p + header
    if not amsdu:
        net, q, layers = _llc(b, body, end, outer, layers, i, c16)
        return net, q, layers, end, wire
    count = 0
    target = body                 # the subframe asked for (msdu), once found
    stop = body
    a = body
    while a + AMSDU_SUBHEADER <= end:
        subframe_end = a + AMSDU_SUBHEADER + u16(b, a + AMSDU_LENGTH)
        if subframe_end > wire:
            break
        if count == msdu:
            target = a
            stop = subframe_end
        count += 1
        a += (subframe_end - a + AMSDU_ALIGN - 1) & ~(AMSDU_ALIGN - 1)
    c16[MSDU_COUNT, i] = count
    layers |= L_AMSDU
    if count <= msdu:             # no such subframe (none at all: the frame was cut inside the first)
        return 0, p, layers | (L_TRUNCATED if count == 0 else 0), end, wire
    if outer:
        c64[DST_MAC, i] = mac(b, target + AMSDU_DESTINATION)
        c64[SRC_MAC, i] = mac(b, target + AMSDU_SOURCE)
        layers |= L_SRC_MAC | L_DST_MAC
    end = min(end, stop)
    net, q, layers = _llc(b, target + AMSDU_SUBHEADER, end, outer, layers, i, c16)
    return net, q, layers, end, stop


@njit(_nrt=False)
def _llc(b, p, end, outer, layers, i, c16):
    """An 802.2 LLC header at `p` (an 802.11 body): (network ethertype or 0, offset, layers)."""
    if p + SNAP_HEADER > end:
        return 0, p, layers | L_TRUNCATED
    if not _is_snap(b, p, end):
        return 0, p, layers
    return l2_walk(b, p + SNAP_HEADER, end, u16(b, p + SNAP_TYPE), outer, layers, i, c16)


@njit(_nrt=False)
def wlan_link(b, s, end, wire, lt, msdu, i, c16, c64):
    """An 802.11 record, with its radiotap header first for LINKTYPE_IEEE802_11_RADIOTAP: (network
    ethertype or 0, offset, layers, end, wire).

    Radiotap: version 0, its length, and the Flags field (after the present
    words and, when present, the 8-aligned TSFT) saying whether the frame
    ends with an FCS, which is then not part of the frame body. Zeek skips
    the header by its length and ignores the flag; Wireshark honours it.
    LINKTYPE_IEEE802_11 frames carry no FCS (Wireshark's default).
    """
    if lt == LINKTYPE_IEEE802_11:
        return ieee80211(b, s, end, wire, msdu, OUTER, NO_LAYERS, i, c16, c64)
    if s + RADIOTAP_HEADER > end or u8(b, s + RADIOTAP_VERSION) != 0:
        return 0, s, L_TRUNCATED, end, wire
    length = u8(b, s + RADIOTAP_LENGTH) | (u8(b, s + RADIOTAP_LENGTH + 1) << 8)
    # a length under the 8-byte header leaves no room for the first present word: truncated below
    if s + length > end:
        return 0, s, L_TRUNCATED, end, wire
    q = s + RADIOTAP_PRESENT
    for _ in range(MAX_RADIOTAP_PRESENT):
        if q + RADIOTAP_PRESENT_WORD > s + length:
            return 0, s, L_TRUNCATED, end, wire
        if not u8(b, q + RADIOTAP_PRESENT_WORD - 1) & RADIOTAP_EXT_BYTE:
            break
        q += RADIOTAP_PRESENT_WORD
    else:
        return 0, s, L_TRUNCATED, end, wire
    q += RADIOTAP_PRESENT_WORD
    present = u8(b, s + RADIOTAP_PRESENT)
    if present & RADIOTAP_TSFT:
        q = s + ((q - s + RADIOTAP_TSFT_LEN - 1) & ~(RADIOTAP_TSFT_LEN - 1)) + RADIOTAP_TSFT_LEN
    if present & RADIOTAP_FLAGS and q < s + length and u8(b, q) & RADIOTAP_F_FCS:
        wire -= FCS_LEN
        end = min(end, wire)
    return ieee80211(b, s + length, end, wire, msdu, OUTER, NO_LAYERS, i, c16, c64)


@njit(_nrt=False)
def link(b, s, end, lt, i, c16, c64):
    """The record's link header: (network ethertype or 0, offset of the network header, layers)."""
    layers = NO_LAYERS
    if lt == LINKTYPE_ETHERNET:
        return ethernet(b, s, end, OUTER, layers, i, c16, c64)
    if lt == LINKTYPE_RAW:
        return ip_by_version(b, s, end), s, layers
    if lt == LINKTYPE_IPV4:
        return ETHERTYPE_IP4, s, layers
    if lt == LINKTYPE_IPV6:
        return ETHERTYPE_IP6, s, layers
    if lt == LINKTYPE_LINUX_SLL or lt == LINKTYPE_LINUX_SLL2:
        if lt == LINKTYPE_LINUX_SLL:
            header = SLL_HEADER
            if s + header > end:
                return 0, s, layers | L_TRUNCATED
            c16[PKT_TYPE, i] = u16(b, s + SLL_PACKET_TYPE)
            hatype = u16(b, s + SLL_HATYPE)
            addr_len = u16(b, s + SLL_ADDRESS_LENGTH)
            addr = s + SLL_ADDRESS
            proto = u16(b, s + SLL_PROTOCOL)
        else:
            header = SLL2_HEADER
            if s + header > end:
                return 0, s, layers | L_TRUNCATED
            proto = u16(b, s + SLL2_PROTOCOL)
            c16[PKT_TYPE, i] = u8(b, s + SLL2_PACKET_TYPE)
            hatype = u16(b, s + SLL2_HATYPE)
            addr_len = u8(b, s + SLL2_ADDRESS_LENGTH)
            addr = s + SLL2_ADDRESS
        layers |= L_PKT_TYPE
        if addr_len == MAC_BYTES:
            c64[SRC_MAC, i] = mac(b, addr)
            layers |= L_SRC_MAC
        if hatype == ARPHRD_CAN or hatype == ARPHRD_NETLINK or proto <= ETH_MAX_LENGTH:
            return 0, s + header, layers
        return l2_walk(b, s + header, end, proto, OUTER, layers, i, c16)
    if lt == LINKTYPE_NULL or lt == LINKTYPE_LOOP:
        if s + NULL_HEADER > end:
            return 0, s, layers | L_TRUNCATED
        family = u32(b, s + NULL_FAMILY)
        if lt == LINKTYPE_NULL and family > 0xFFFF:
            # written in the capturing host's byte order; a little-endian writer's family
            # reads as a huge big-endian number
            family = u8(b, s + NULL_FAMILY) | (u8(b, s + NULL_FAMILY + 1) << 8)
        if family == BSD_AF_INET:
            return ETHERTYPE_IP4, s + NULL_HEADER, layers
        if family == BSD_AF_INET6_NETBSD or family == BSD_AF_INET6_FREEBSD or family == BSD_AF_INET6_DARWIN:
            return ETHERTYPE_IP6, s + NULL_HEADER, layers
        return 0, s + NULL_HEADER, layers
    if lt == LINKTYPE_PPP or lt == LINKTYPE_PPP_HDLC:
        net, p = ppp_protocol(b, s, end)
        if net < 0:
            return 0, p, layers | L_TRUNCATED
        if net == ETHERTYPE_MPLS:
            return l2_walk(b, p, end, net, OUTER, layers, i, c16)
        return net, p, layers
    if lt == LINKTYPE_PPP_ETHER:
        return l2_walk(b, s, end, np.int64(ETHERTYPE_PPPOE_SESSION), OUTER, layers, i, c16)
    if lt == LINKTYPE_C_HDLC:
        if s + CHDLC_HEADER > end:
            return 0, s, layers | L_TRUNCATED
        return l2_walk(b, s + CHDLC_HEADER, end, u16(b, s + CHDLC_PROTOCOL), OUTER, layers, i, c16)
    return 0, s, layers

"""The application side-tables (detector.decode.app) against tshark on every real capture that carries them.

Which captures: every file of ../shared/captures-real our reader opens is
decoded once and each table of `ORACLES` built over it; the files where a
table has entries are its candidates, and the files the specification names
for a protocol (`NAMED`) must be among them. For each candidate tshark
dissects the protocol (`Oracle.display_filter`) and each mapped field is
compared frame by frame: our entry's value where its validity bit is set,
tshark's first occurrence of the field (or the list of all occurrences for
a child table's field). A disagreement fails the test unless a named
exclusion (`Oracle.exclusions`: file -> reason) covers the file.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from detector.decode import app, decode
from detector.decode.app import nd
from detector.decode.app.ospf import B_LSA_HEADER as OSPF_LSA_HEADER
from detector.decode.app.table import MORE, TRUNCATED
from detector.errors import CaptureError
from detector.ingest import open_capture
from tests._real import CAPTURES_REAL, manifest_rows


def _ip_text(hi: int, lo: int) -> str:
    value = ipaddress.IPv6Address((int(hi) << 64) | int(lo))
    return str(value.ipv4_mapped or value)


def _ipv4_text(value: int) -> str:
    return str(ipaddress.IPv4Address(int(value)))


def _ipv4_half(value: int) -> str:
    """An IPv4 address held as the schema's low half (IPv4-mapped), as tshark prints it."""
    return _ipv4_text(int(value) & 0xFFFF_FFFF)


def _mac_text(value: int) -> str:
    return ":".join(f"{byte:02x}" for byte in int(value).to_bytes(6, "big"))


def _nd_option(name: str, bit: int, text: Callable[[dict], str] | None = None) -> Callable[[dict], str | None]:
    """Text of an nd_opt field where the option holds it (`bit`); None for the other options."""
    return lambda e: (text(e) if text else str(e[name])) if e["valid"] & bit else None


def _lsa_header(name: str) -> Callable[[dict], str | None]:
    """Text of an ospf_lsa field of an LSA header; None for a request's entry, which has no header."""
    return lambda e: str(e[name]) if e["valid"] & OSPF_LSA_HEADER else None


@dataclass(frozen=True)
class Oracle:
    display_filter: str
    # our field -> the tshark fields that carry it (the first one present in the frame is compared)
    fields: dict[str, tuple[str, ...]]
    # child table (or "table#aspect", to compare several of its fields) -> (text of one child entry from its
    # columns, None where tshark lists nothing for it; the tshark fields listing them)
    children: dict[str, tuple[Callable[[dict], str | None], tuple[str, ...]]] = field(default_factory=dict)
    options: tuple[str, ...] = ()
    # our field -> how tshark prints our value (default: the decimal integer)
    formats: dict[str, Callable[[int], str]] = field(default_factory=dict)
    exclusions: dict[str, str] = field(default_factory=dict)   # file -> why tshark and we differ there


ORACLES: dict[str, Oracle] = {
    # Wireshark dissects IP protocol 112 as VRRP unless its CARP heuristic runs first (packet-carp.c)
    "vrrp": Oracle(
        display_filter="vrrp or carp",
        options=("-o", "ip.try_heuristic_first:TRUE"),
        fields={"version": ("vrrp.version", "carp.version"), "vrid": ("vrrp.virt_rtr_id", "carp.vhid"),
                "priority": ("vrrp.prio",), "addr_count": ("vrrp.addr_count",), "auth_type": ("vrrp.auth_type",),
                "carp_advskew": ("carp.advskew",), "carp_advbase": ("carp.adver_int",),
                "carp_demote": ("carp.demotion",), "checksum_ok": ("vrrp.checksum.status", "carp.checksum.status")},
        children={"vrrp_addr": (lambda e: _ip_text(e["ip_hi"], e["ip_lo"]), ("vrrp.ip_addr", "vrrp.ipv6_addr"))},
    ),
    # RIP on UDP 520 and RIPng on 521, either direction, as Wireshark registers them (packet-rip.c,
    # packet-ripng.c); the entries compared by metric, which tshark lists for every entry of family 0 or
    # 2 and every RIPng entry (tests/test_app_rip.py compares the prefixes, masks and next hops)
    "rip": Oracle(
        display_filter="rip or ripng",
        fields={"command": ("rip.command", "ripng.cmd"), "version": ("rip.version", "ripng.version"),
                "auth_type": ("rip.auth.type",), "auth_packet_length": ("rip.digest_offset",),
                "auth_key_id": ("rip.key_id",), "auth_data_len": ("rip.auth_data_len",),
                "auth_seq": ("rip.seq_num",)},
        children={"rip_entry": (lambda e: str(e["metric"]), ("rip.metric", "ripng.rte.metric"))},
        exclusions={"tcpdump/tests/ripv2-invalid-length.pcap":
                    "the UDP length (160 bytes of RIP) is shorter than the IP length (164): tshark reads the "
                    "first, the decoder the second, and lists an eighth entry (family 37, no metric) "
                    "(tests/test_app_rip.py checks the seven both read)"},
    ),
    "ospf": Oracle(
        display_filter="ospf",
        fields={"version": ("ospf.version",), "type": ("ospf.msg",), "length": ("ospf.packet_length",),
                "router_id": ("ospf.srcrouter",), "area_id": ("ospf.area_id",), "checksum": ("ospf.checksum",),
                "auth_type": ("ospf.auth.type",), "instance_id": ("ospf.instance_id",),
                "network_mask": ("ospf.hello.network_mask",), "interface_id": ("ospf.hello.interface_id",),
                "hello_interval": ("ospf.hello.hello_interval",),
                "dead_interval": ("ospf.hello.router_dead_interval",),
                "priority": ("ospf.hello.router_priority",), "dr": ("ospf.hello.designated_router",),
                "bdr": ("ospf.hello.backup_designated_router",), "options": ("ospf.v2.options", "ospf.v3.options"),
                "mtu": ("ospf.db.interface_mtu",), "dd_flags": ("ospf.dbd",), "dd_seq": ("ospf.db.dd_sequence",),
                "lsa_count": ("ospf.ls.number_of_lsas",)},
        formats=dict.fromkeys(("router_id", "area_id", "network_mask", "dr", "bdr"), _ipv4_text),
        children={"ospf_nbr": (lambda e: _ipv4_text(e["router_id"]), ("ospf.hello.active_neighbor",)),
                  "ospf_lsa#adv_router": (lambda e: _ipv4_text(e["adv_router"]), ("ospf.advrouter",)),
                  # an LSA is named by its type, link state id and advertising router, in a header or in an LS
                  # Request alike: tshark lists a requested type in the same field (packet-ospf.c's
                  # hf_ospf_ls_type, hf_ospf_v3_ls_type), as the table lists it in the same column
                  "ospf_lsa#type": (lambda e: str(e["type"]), ("ospf.lsa", "ospf.v3.lsa")),
                  "ospf_lsa#age": (_lsa_header("age"), ("ospf.lsa.age",)),
                  "ospf_lsa#seq": (_lsa_header("seq"), ("ospf.lsa.seqnum",)),
                  "ospf_lsa#checksum": (_lsa_header("checksum"), ("ospf.lsa.chksum",)),
                  "ospf_lsa#length": (_lsa_header("length"), ("ospf.lsa.length",))},
    ),
    # BOOTP/DHCPv4 on UDP 67/68 (packet-dhcp.c); the options compared by code, as tshark lists them in order
    # (pad left out, end included; with option 52 those in `file`, then in `sname`)
    "dhcp4": Oracle(
        display_filter="dhcp",
        fields={"op": ("dhcp.type",), "htype": ("dhcp.hw.type",), "hlen": ("dhcp.hw.len",), "hops": ("dhcp.hops",),
                "xid": ("dhcp.id",), "secs": ("dhcp.secs",), "flags": ("dhcp.flags",),
                "ciaddr_lo": ("dhcp.ip.client",), "yiaddr_lo": ("dhcp.ip.your",), "siaddr_lo": ("dhcp.ip.server",),
                "giaddr_lo": ("dhcp.ip.relay",), "chaddr": ("dhcp.hw.mac_addr",), "msg_type": ("dhcp.option.dhcp",),
                "server_id_lo": ("dhcp.option.dhcp_server_id",),
                "requested_ip_lo": ("dhcp.option.requested_ip_address",),
                "lease_s": ("dhcp.option.ip_address_lease_time",), "overload": ("dhcp.option.option_overload",),
                "router_lo": ("dhcp.option.router",), "dns_lo": ("dhcp.option.domain_name_server",)},
        formats={**dict.fromkeys(("ciaddr_lo", "yiaddr_lo", "siaddr_lo", "giaddr_lo", "server_id_lo",
                                  "requested_ip_lo", "router_lo", "dns_lo"), _ipv4_half), "chaddr": _mac_text},
        # packet-dhcp.c gives the End option's dhcp.option.type the value 0 (255 is in dhcp.option.end)
        children={"dhcp_opt": (lambda e: "0" if e["code"] == 255 else str(e["code"]), ("dhcp.option.type",))},
        exclusions={
            **dict.fromkeys(("suricata-verify/tests/dhcp-option-52-overload/input.pcap",
                             "suricata-verify/tests/dhcp-option-52-overload-both/input.pcap"),
                            "option overload: tshark lists the options of sname and file where option 52 stands, "
                            "sname before file; the table lists them after the options field, file then sname "
                            "(RFC 2132 section 9.3); tests/test_app_dhcp4.py compares these files region by "
                            "region"),
            **dict.fromkeys(("tcpdump/tests/bootp_asan.pcap", "tcpdump/tests/bootp_asan-2.pcap",
                             "tcpdump/tests/rx_serviceid_oobr.pcap"),
                            "fuzzed first fragments whose UDP length claims far more than was captured: tshark "
                            "adds no BOOTP field to them ('DHCP/BOOTP truncated'), the table reads the fixed "
                            "header's captured bytes (tests/test_app_dhcp4.py checks these files)")},
    ),
    # DHCPv6 on UDP 546/547 (packet-dhcpv6.c); a relay's type and hop count are the outermost's, the
    # transaction id and IA addresses the inner message's (tshark lists the relays' first)
    "dhcp6": Oracle(
        display_filter="dhcpv6",
        fields={"msg_type": ("dhcpv6.msgtype",), "hop_count": ("dhcpv6.hopcount",), "xid": ("dhcpv6.xid",),
                "preference": ("dhcpv6.option_preference",)},
        children={"dhcp6_ia#addr": (lambda e: _ip_text(e["addr_hi"], e["addr_lo"]),
                                    ("dhcpv6.iaaddr.ip", "dhcpv6.iaprefix.pref_addr")),
                  "dhcp6_ia#valid": (lambda e: str(e["valid_s"]),
                                     ("dhcpv6.iaaddr.valid_lifetime", "dhcpv6.iaprefix.valid_lifetime")),
                  "dhcp6_ia#prefix_len": (lambda e: str(e["prefix_len"]) if e["ia_type"] == 25 else None,
                                          ("dhcpv6.iaprefix.pref_len",))},
    ),
    # ICMPv6 Neighbor Discovery (packet-icmpv6.c); addresses (targets, Redirect destinations) are compared in
    # tests/test_app_nd.py, as the oracle compares one column per field and they are two halves
    "nd": Oracle(
        display_filter="icmpv6.type >= 133 and icmpv6.type <= 137",
        fields={"type": ("icmpv6.type",), "code": ("icmpv6.code",), "hop_limit": ("ipv6.hlim",),
                "checksum": ("icmpv6.checksum",), "checksum_ok": ("icmpv6.checksum.status",),
                "cur_hop_limit": ("icmpv6.nd.ra.cur_hop_limit",), "ra_flags": ("icmpv6.nd.ra.flag",),
                "managed": ("icmpv6.nd.ra.flag.m",), "other": ("icmpv6.nd.ra.flag.o",),
                "preference": ("icmpv6.nd.ra.flag.prf",), "router_lifetime": ("icmpv6.nd.ra.router_lifetime",),
                "reachable_time": ("icmpv6.nd.ra.reachable_time",), "retrans_timer": ("icmpv6.nd.ra.retrans_timer",),
                "na_router": ("icmpv6.nd.na.flag.r",), "na_solicited": ("icmpv6.nd.na.flag.s",),
                "na_override": ("icmpv6.nd.na.flag.o",), "src_lladdr": ("icmpv6.opt.src_linkaddr",),
                "tgt_lladdr": ("icmpv6.opt.target_linkaddr",), "mtu": ("icmpv6.opt.mtu",)},
        formats={"src_lladdr": _mac_text, "tgt_lladdr": _mac_text},
        children={"nd_opt#type": (lambda e: str(e["type"]), ("icmpv6.opt.type",)),
                  "nd_opt#length": (lambda e: str(e["length"]), ("icmpv6.opt.length",)),
                  "nd_opt#lladdr": (_nd_option("lladdr", nd.B_LLADDR, lambda e: _mac_text(e["lladdr"])),
                                    ("icmpv6.opt.linkaddr",)),
                  "nd_opt#prefix": (_nd_option("prefix", nd.B_PREFIX, lambda e: _ip_text(e["prefix_hi"],
                                                                                          e["prefix_lo"])),
                                    ("icmpv6.opt.prefix",)),
                  "nd_opt#prefix_len": (_nd_option("prefix_len", nd.B_PREFIX), ("icmpv6.opt.prefix.length",)),
                  "nd_opt#on_link": (_nd_option("on_link", nd.B_PIO), ("icmpv6.opt.prefix.flag.l",)),
                  "nd_opt#autonomous": (_nd_option("autonomous", nd.B_PIO), ("icmpv6.opt.prefix.flag.a",)),
                  "nd_opt#valid_lifetime": (_nd_option("valid_lifetime", nd.B_PIO),
                                            ("icmpv6.opt.prefix.valid_lifetime",)),
                  "nd_opt#preferred_lifetime": (_nd_option("preferred_lifetime", nd.B_PIO),
                                                ("icmpv6.opt.prefix.preferred_lifetime",)),
                  "nd_opt#route_preference": (_nd_option("route_preference", nd.B_ROUTE),
                                              ("icmpv6.opt.route_info.flag.route_preference",)),
                  "nd_opt#route_lifetime": (_nd_option("lifetime", nd.B_ROUTE), ("icmpv6.opt.route_lifetime",)),
                  "nd_opt#rdnss_lifetime": (lambda e: str(e["lifetime"]) if e["type"] == nd.OPT_RDNSS
                                            and e["valid"] & nd.B_LIFETIME else None, ("icmpv6.opt.rdnss.lifetime",)),
                  "nd_opt#mtu": (_nd_option("mtu", nd.B_OPT_MTU), ("icmpv6.opt.mtu",))},
        exclusions={"tcpdump/tests/icmpv6-length-zero.pcapng":
                    "an IPv6 payload length of 0 without a jumbo option: the decoder takes the frame as holding the "
                    "packet (detector.decode.ip, as for segmentation offload), tshark dissects ICMPv6 over 0 bytes "
                    "(Malformed) and tcpdump prints 'length 0 (invalid)'; our entry, 32 bytes of the frame's tail, "
                    "has a failing checksum and an option running past it (TRUNCATED) (tests/test_app_nd.py)"},
    ),
}
# files the specification names for a table: each must be a candidate (or say why not)
NAMED: dict[str, dict[str, str | None]] = {
    "vrrp": {"libpcap/tests/filter/carp.pcap": None, "zeek/testing/btest/Traces/pbb.pcap": None,
             "packetlife/pcaps/VRRP_Malformed_DoS.cap": None,
             "tcpdump/tests/vrrp-vrrp_print-oobr.pcap": "Frame Relay (DLT_FRELAY): a link type the reader refuses"},
    # no capture of ../shared/captures-real carries RIPng or RIPv2 authentication (all 1,823 decoded: RIP is
    # in these five only); tests/test_app_rip.py crafts them
    "rip": {"packetlife/pcaps/RIPv2.cap": None, "packetlife/pcaps/RIPv1_subnet_down.cap": None,
            "tcpdump/tests/ripv1v2.pcap": None, "tcpdump/tests/ripv2-invalid-length.pcap": None,
            "tcpdump/tests/rip_error_hexdump.pcap": None},
    "ospf": dict.fromkeys((
        "tcpdump/tests/ospf-ack.pcap", "tcpdump/tests/ospf-gmpls.pcap", "tcpdump/tests/ospf-nssa-bitnt.pcap",
        "tcpdump/tests/ospf-signed-integer-ubsan.pcap", "tcpdump/tests/ospf-sr-ri-sid.pcap",
        "tcpdump/tests/ospf-sr.pcapng", "tcpdump/tests/ospf-sr2.pcapng", "tcpdump/tests/ospf2-seg-fault-1.pcapng",
        "tcpdump/tests/ospf3_auth.pcapng", "tcpdump/tests/ospf6_decode_v3_asan.pcap",
        "tcpdump/tests/ospf_graceful_restart_rfc3623.pcap",
        "networklessons/packet-captures/ospf-lsa-type-1-router-asbr-e-bit-set.pcapng",
        "networklessons/packet-captures/ospf-lsa-type-1-router-point-to-point.pcapng",
        "networklessons/packet-captures/ospf-lsa-type-1-router-stub-network.pcapng",
        "networklessons/packet-captures/ospf-lsa-type-3-summary-lsa.pcapng",
        "networklessons/packet-captures/ospf-lsa-type-4-asbr-summary-lsa.pcapng",
        "networklessons/packet-captures/ospf-ttl-security-check.pcapng",
        "networklessons/packet-captures/ospfv3-authentication-trailer-hello.pcapng",
        "ndpi/tests/cfgs/default/pcap/ospfv2_add_new_prefix.pcap", "zeek/testing/btest/Traces/pbb.pcap")),
    "dhcp4": dict.fromkeys((
        "suricata-verify/tests/dhcp-option-52-overload/input.pcap",
        "suricata-verify/tests/dhcp-option-52-overload-both/input.pcap", "tcpdump/tests/bootp_asan.pcap",
        "tcpdump/tests/bootp_asan-2.pcap", "suricata/rust/src/dhcp/offer.pcap", "packetlife/pcaps/dhcp-auth.cap")),
    "dhcp6": dict.fromkeys(("tcpdump/tests/dhcpv6-ia-na.pcap", "tcpdump/tests/dhcpv6-ia-pd.pcap",
                            "tcpdump/tests/dhcpv6-ia-ta.pcap")),
    "nd": dict.fromkeys(("suricata-verify/tests/ipv6-evasion/ipv6-kill-router-gateway/kill_router6.pcap",
                         "zeek/testing/btest/Traces/icmp/icmp6-router-advert.pcap",
                         "networklessons/packet-captures/ipv6-router-advertisement-leaving.pcapng",
                         "packetlife/pcaps/ipv6_neighbor_spoofing.cap")),
}


@pytest.fixture(scope="module")
def candidates() -> dict[str, dict[str, dict]]:
    """table -> file -> {frame: [entries as dicts, children under their table's name]} for every table in
    ORACLES, over every real capture the reader opens."""
    if not manifest_rows():
        pytest.skip(f"real captures not present at {CAPTURES_REAL}")
    found: dict[str, dict[str, dict]] = {name: {} for name in ORACLES}
    for row in manifest_rows():
        try:
            with open_capture(CAPTURES_REAL / row["path"]) as reader:
                for raw in reader:
                    batch = decode(raw, fingerprint=False)
                    for name in ORACLES:
                        tab = app.table(batch, name)
                        if len(tab):
                            _collect(found[name].setdefault(row["path"], {}), tab)
        except CaptureError:
            continue
    return found


def _same_text(ours: list[str], theirs: list[str]) -> bool:
    """Value lists equal as tshark prints them; a hexadecimal field (BASE_HEX: "0x02") compared as a number."""
    def number(text: str) -> str:
        return str(int(text, 16)) if text.startswith("0x") else text
    return [number(t) for t in ours] == [number(t) for t in theirs]


def _collect(frames: dict, tab) -> None:
    for k in range(len(tab)):
        entry = {"_valid": {f: bool(tab.valid(f)[k]) for f in tab.fields}}
        entry.update({f: int(tab[f][k]) for f in tab.fields})
        for child_name, child in tab.children.items():
            rows = np.flatnonzero(child["parent"] == k)
            entry[child_name] = [{f: int(child[f][j]) for f in child.fields} for j in rows]
        frames.setdefault(int(tab["frame"][k]), []).append(entry)


@pytest.mark.parametrize("name", sorted(NAMED))
def test_the_named_captures_are_candidates(candidates, name):
    missing = {path: why for path, why in NAMED[name].items() if path not in candidates[name]}
    unexplained = [path for path, why in missing.items() if why is None]
    assert not unexplained, f"{name}: no entries in {unexplained}"


def _tshark_rows(tshark, path, oracle: Oracle) -> dict[int, dict[str, list[str]]]:
    names = sorted({f for fs in oracle.fields.values() for f in fs}
                   | {f for _, fs in oracle.children.values() for f in fs})
    rows = tshark.fields(CAPTURES_REAL / path, "frame.number", *names, display_filter=oracle.display_filter,
                         options=(*oracle.options, "-E", "occurrence=a", "-E", "aggregator=,"))
    return {int(r[0]): {n: [v for v in r[i + 1].split(",") if v] for i, n in enumerate(names)} for r in rows}


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_the_tables_agree_with_tshark(candidates, tshark, name):
    oracle = ORACLES[name]
    if not candidates[name]:
        pytest.fail(f"no real capture carries table {name}: the oracle compared nothing")
    disagreements = []
    for path, frames in sorted(candidates[name].items()):
        if path in oracle.exclusions:
            continue
        theirs = _tshark_rows(tshark, path, oracle)
        for frame, entries in frames.items():
            entry = entries[0]
            seen = theirs.get(frame)
            if seen is None:
                if not any(entry["_valid"][ours] for ours in oracle.fields):
                    continue        # an empty message (no field read): tshark does not call the dissector
                disagreements.append(f"{path}#{frame}: tshark has no {oracle.display_filter}")
                continue
            for ours, tshark_fields in oracle.fields.items():
                values = next((seen[f] for f in tshark_fields if seen[f]), [])
                if not entry["_valid"][ours]:
                    continue
                expected = oracle.formats.get(ours, str)(entry[ours])
                if not _same_text(values[:1], [expected]):
                    disagreements.append(f"{path}#{frame} {ours}: ours {expected}, tshark {values[:1]}")
            for child_name, (text, tshark_fields) in oracle.children.items():
                listed = next((seen[f] for f in tshark_fields if seen[f]), [])
                mine = [t for t in (text(e) for e in entry[child_name.split("#")[0]]) if t is not None]
                # a message cut short or over the cap lists a prefix of what tshark lists; else all of it
                partial = entry["valid"] & int(TRUNCATED | MORE)
                if not _same_text(mine, listed[:len(mine)] if partial else listed):
                    disagreements.append(f"{path}#{frame} {child_name}: ours {mine}, tshark {listed}")
    assert not disagreements, "\n".join(disagreements[:40])

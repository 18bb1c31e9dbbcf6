"""rogue-dhcp: DHCP servers that should not be answering, and DHCP storms.

A DHCP server tells every client that asks which address, router and DNS
servers to use; a second server on the segment (a home router plugged into
a wall socket, an attacker's dhcpd) hands out its own, and the clients that
hear it first follow it (seed 004's campus ran DHCP snooping against exactly
this, logging an illegal server at most once a minute). This rule reads the
server messages of the `dhcp4` and `dhcp6` application tables: DHCPv4
OFFER, ACK and NAK sent from port 67, DHCPv6 ADVERTISE, REPLY and
RECONFIGURE sent from port 547, bare or inside a RELAY-REPL.

A server is known by its identity on one VLAN: the DHCPv4 server identifier
(option 54; else the source address), the DHCPv6 server DUID (else the
source address). A relay agent forwards a server's replies from its own
address and MAC, with the server identifier (DUID) unchanged, so a relayed
server stays one server whichever relay or path its replies take; its MACs
are reported, not keyed on. Per server the state keeps what it offered
(routers and DNS servers, lease times) and to whom (the addresses it gave,
yiaddr or the IA addresses, with the client's MAC).

Severity of a server's finding (ntopng src/flow_checks/UnexpectedDHCPServer.cpp
for the site list, include/ntop_defines.h DHCP_STORM_PPS_THSHOLD for the storm):

- with the site file's `dhcp_servers`: a server matching none of them (by
  server identifier, source address, MAC or DUID): high; one that matches: info;
- without it: a second server of the same IP version answering on one VLAN
  within `window_s` of another: medium, high when both offered routers (or
  DNS servers) and these differ; servers of one VLAN that never answered
  within `window_s` of each other: medium too (a replaced server, a failover
  pair, or a rogue that came and went: the site file tells which); a server
  alone on its VLAN: info;
- more than FORGED_SERVERS servers answering on one VLAN (one IP version):
  a storm of forged servers, one finding for those the site file does not
  list (counts, and a sample of the busiest), high when they compete with
  different routers or DNS servers, else medium; linear in the servers,
  where a finding per server naming every other grew with their square;
- more than `storm_pps` DHCP messages (all of both tables, any type) in one
  second: a storm, medium. It counts the clients' and the servers'
  messages and names the busiest sender (a space-saving count per role,
  detector/detect/sketch.py) when it surely sent a tenth of them, else
  counts the MACs that sent them (a HyperLogLog): a starvation tool forges
  one per DISCOVER. Its advice follows from what it names.

State: one row per server, per (server, offer) and per (server, client
address), and per second of DHCP traffic, merged like the other detectors'
tables (counts summed, earliest first, latest last), bounded by MAX_* (the
rows first seen are kept, the others counted); the senders' summaries per
role, SENDERS_COUNTED rows and 4,096 registers at most each. Every list in
a finding's evidence is capped and says how many it left out.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..decode import app
from ..decode.addr import mac_to_str
from ..decode.app import dhcp4 as v4
from ..decode.app import dhcp6 as v6
from ..detect import sketch
from ..detect.columns import ip_text
from ..detect.detector import AnalysisContext, Detector, check_merge, register
from ..detect.evidence import evidence_frames
from ..detect.grouping import find_sorted
from ..detect.hashing import mix64
from ..detect.state import empty_table, fold_rows
from ..findings import Finding, iso_time
from ..rules import ALERT_SECONDS, COUNT, Param
from ..schema import L_QINQ, L_SRC_MAC, L_VLAN, PacketBatch
from ..site import parse_mac
from ..units import NS, plural

NEVER, NEVER_LAST = np.iinfo(np.int64).max, -1
NO_LEASE_MIN, NO_LEASE_MAX = np.uint32(0xFFFF_FFFF), np.uint32(0)
DUID_NAMES = {1: "DUID-LLT", 2: "DUID-EN", 3: "DUID-LL", 4: "DUID-UUID"}

# Rows kept. A VLAN has one or two DHCP servers; a flood of spoofed server identifiers keeps the first seen and
# counts the others (each server kept is a finding). Offers: a server hands out one router/DNS set per scope;
# clients: one row per address given, a campus's leases.
MAX_SERVERS = 4096
MAX_OFFERS = 65_536
MAX_CLIENTS = 262_144
# Seconds of DHCP traffic counted for the storm test: a week of capture; past it the busiest seconds are kept
MAX_SECONDS = 604_800
# Listed in a finding's message; its evidence lists up to IN_EVIDENCE of each
LISTED = 4
IN_EVIDENCE = 64
# More servers than this answering on one VLAN (one IP version) are a storm of forged servers (a rogue-server
# tool, a fuzz campaign): one finding for all of them, with counts and a sample of the busiest SAMPLE_SERVERS,
# instead of a finding per server naming every other. A VLAN has one DHCP server, two for a failover pair, a few
# while one is replaced; higher brings back a finding per forged server, each listing the others (quadratic).
FORGED_SERVERS = 8
SAMPLE_SERVERS = 16
# Senders counted per role for a storm's finding, and listed in it
SENDERS_COUNTED = 64
SENDERS_LISTED = 8
# A storm's busiest sender is named as its source when it surely sent this share of the storm's messages of its
# role (space-saving counts are upper bounds; count - error is a lower one); else the storm comes from many
# MACs, as a starvation tool forges them
STORM_SENDER_SHARE = 0.1

SERVER_COLUMNS = {
    "key": np.uint64, "link": np.uint32, "family": np.uint8, "id_hi": np.uint64, "id_lo": np.uint64,
    "has_duid": np.bool_, "duid_hash": np.uint64, "duid_type": np.uint16, "duid_mac": np.uint64,
    "has_duid_mac": np.bool_, "src_ip_hi": np.uint64, "src_ip_lo": np.uint64, "src_mac": np.uint64,
    "has_mac": np.bool_, "mac_min": np.uint64, "mac_max": np.uint64, "src_port": np.uint16,
    "messages": np.int64, "offers": np.int64, "acks": np.int64, "naks": np.int64, "reconfigures": np.int64,
    "relayed": np.int64, "lease_min": np.uint32, "lease_max": np.uint32,
    "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64, "last_frame": np.int64,
}
SERVER_REDUCE = {"messages": np.add, "offers": np.add, "acks": np.add, "naks": np.add, "reconfigures": np.add,
                 "relayed": np.add, "mac_min": np.minimum, "mac_max": np.maximum, "lease_min": np.minimum,
                 "lease_max": np.maximum, "last_ns": np.maximum, "first_frame": np.minimum,
                 "last_frame": np.maximum}
OFFER_COLUMNS = {
    "key": np.uint64, "server": np.uint64, "has_router": np.bool_, "router_lo": np.uint64,
    "router_count": np.uint8, "has_dns": np.bool_, "dns_hi": np.uint64, "dns_lo": np.uint64, "dns_count": np.uint8,
    "count": np.int64, "first_ns": np.int64, "last_ns": np.int64, "first_frame": np.int64, "last_frame": np.int64,
}
OFFER_REDUCE = {"count": np.add, "router_count": np.maximum, "dns_count": np.maximum, "last_ns": np.maximum,
                "first_frame": np.minimum, "last_frame": np.maximum}
CLIENT_COLUMNS = {
    "key": np.uint64, "server": np.uint64, "addr_hi": np.uint64, "addr_lo": np.uint64, "client_mac": np.uint64,
    "has_client_mac": np.bool_, "count": np.int64, "first_ns": np.int64, "last_ns": np.int64,
    "first_frame": np.int64,
}
CLIENT_REDUCE = {"count": np.add, "last_ns": np.maximum, "first_frame": np.minimum}
SECOND_COLUMNS = {"key": np.int64, "count": np.int64, "server": np.int64, "first_ns": np.int64,
                  "first_frame": np.int64, "last_frame": np.int64}
SECOND_REDUCE = {"count": np.add, "server": np.add, "first_frame": np.minimum, "last_frame": np.maximum}
# Who sends DHCP messages, per role (0: clients' messages, 1: servers' and relays' replies): a space-saving count of
# the busiest senders (by MAC, else by address) and a HyperLogLog of the distinct ones (detector.detect.sketch),
# so that a storm's finding can name its sender or count the MACs a starvation tool forged
SENDER_PAYLOAD = {"mac": np.uint64, "has_mac": np.bool_, "ip_hi": np.uint64, "ip_lo": np.uint64}
CLIENT_ROLE, SERVER_ROLE = 0, 1

V4_SERVER_TYPES = (v4.OFFER, v4.ACK, v4.NAK)
V6_SERVER_TYPES = (v6.ADVERTISE, v6.REPLY, v6.RECONFIGURE)


def _bounded(rows: dict, limit: int, by: str = "first_ns") -> tuple[dict, int]:
    """The `limit` rows first seen (or, for `by`="count", the busiest), and how many were dropped."""
    extra = len(rows["key"]) - limit
    if extra <= 0:
        return rows, 0
    order = np.argsort(-rows["count"], kind="stable") if by == "count" else np.argsort(rows["first_ns"],
                                                                                       kind="stable")
    keep = np.sort(order[:limit])
    return {name: col[keep] for name, col in rows.items()}, extra


def _typed(rows: dict, columns: dict) -> dict:
    return {name: np.asarray(col).astype(columns[name]) for name, col in rows.items()}


def fnv1a(data: bytes) -> int:
    """The dhcp6 table's DUID hash (detector.decode.app.dhcp4.fnv1a) of `data`, in Python."""
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFF_FFFF_FFFF_FFFF
    return h


def _link(batch: PacketBatch, rows: np.ndarray) -> np.ndarray:
    """The (VLAN, inner VLAN) of each row as one number: servers are compared within one link only."""
    layers = batch["layers"][rows]
    outer = np.where((layers & np.uint32(L_VLAN)) != 0, batch["vlan_outer"][rows], 0).astype(np.uint32)
    inner = np.where((layers & np.uint32(L_QINQ)) != 0, batch["vlan_inner"][rows], 0).astype(np.uint32)
    return (outer << np.uint32(16)) | inner


def _vlan_text(link: int) -> str:
    """VLAN 10, VLAN 10.20 (QinQ), or "no VLAN" for untagged frames."""
    if link == 0:
        return "no VLAN"
    return f"VLAN {link >> 16}" + (f".{link & 0xFFFF}" if link & 0xFFFF else "")


@register
class RogueDhcp(Detector):
    rule_id = "rogue-dhcp"
    EVE_SIGNATURE = (15, "Potentially Bad Traffic")
    # what its findings rest on beyond what it saw (detect.confidence): the options servers hand out
    QUALITY_NEEDS = frozenset({"payload"})
    APP_TABLES = ("dhcp4", "dhcp6")
    PARAMS = {
        "window_s": Param(float, 60.0, "seconds within which two servers answering on one VLAN compete",
                          ALERT_SECONDS,
                          "Clients take the first offer they hear: two servers answering within this window both "
                          "reach clients. Longer catches a rogue that answers rarely; shorter tells a replaced "
                          "server from a competing one more often. Either way a second server is medium; only "
                          "competing servers with different routers or DNS are high."),
        "storm_pps": Param(int, 2048, "DHCP messages in one second above which it is a storm", COUNT,
                           "ntopng's DHCP_STORM_PPS_THSHOLD. A network booting thousands of clients at once can "
                           "come near it; lower it on a small segment."),
    }
    ALERTS = {
        "suppress_s": Param(float, 60.0, "least seconds between two events about one server", ALERT_SECONDS,
                            "Seed 004's switches log an illegal DHCP server at most once a minute "
                            "(illegal_server_log_suppress_duration 1min); shorter repeats every offer."),
        "resolve_s": Param(float, 600.0, "seconds without a message from the server before it is resolved",
                           ALERT_SECONDS,
                           "A server speaks only when clients ask; a shorter interval resolves a rogue that is "
                           "still plugged in but unasked."),
    }

    def __init__(self, rule, site=None):
        super().__init__(rule, site)
        self.servers = empty_table(SERVER_COLUMNS)
        self.offers = empty_table(OFFER_COLUMNS)
        self.clients = empty_table(CLIENT_COLUMNS)
        self.seconds = empty_table(SECOND_COLUMNS)
        self.senders = {**sketch.empty(sketch.TOP_COLUMNS), **sketch.empty(SENDER_PAYLOAD)}
        self.sender_cells = sketch.empty(sketch.CELL_COLUMNS)
        self.dropped = {"servers": 0, "offers": 0, "clients": 0, "seconds": 0}

    # ---- update -----------------------------------------------------------
    def update(self, batch: PacketBatch) -> None:
        t4, t6 = app.table(batch, "dhcp4"), app.table(batch, "dhcp6")
        rows = np.concatenate([t4["row"], t6["row"]])
        if len(rows):
            server = np.concatenate([t4.valid("op") & (t4["op"] == v4.BOOTREPLY),
                                     t6.valid("msg_type") & np.isin(t6["msg_type"], (*V6_SERVER_TYPES,
                                                                                     v6.RELAY_REPL))])
            self._count_seconds(batch, rows, server)
            self._count_senders(batch, rows, server)
        self._add_v4(batch, t4)
        self._add_v6(batch, t6)

    def _count_seconds(self, batch, rows, server) -> None:
        ts, frame = batch["ts_ns"][rows], batch["frame"][rows]
        second = ts // NS
        new = _typed({"key": second, "count": np.ones(len(rows), dtype=np.int64), "server": server,
                      "first_ns": second * NS, "first_frame": frame, "last_frame": frame}, SECOND_COLUMNS)
        self._fold("seconds", new, SECOND_REDUCE, MAX_SECONDS, by="count")

    def _count_senders(self, batch, rows, server) -> None:
        src_hi, src_lo, mac, has_mac = self._sources(batch, rows)
        sender = np.where(has_mac, mac, mix64(src_hi, src_lo))
        role = server.astype(np.uint64)
        self.senders = sketch.top_merge([self.senders, sketch.top_counts(role, sender, SENDERS_COUNTED, mac=mac,
                                                                         has_mac=has_mac, ip_hi=src_hi,
                                                                         ip_lo=src_lo)], SENDERS_COUNTED)
        self.sender_cells = sketch.hll_merge(self.sender_cells, sketch.hll_cells(role, mix64(sender)))

    def _sources(self, batch, rows):
        layers = batch["layers"][rows]
        has_mac = (layers & np.uint32(L_SRC_MAC)) != 0
        mac = np.where(has_mac, batch["src_mac"][rows], np.uint64(0))
        return batch["src_ip_hi"][rows], batch["src_ip_lo"][rows], mac, has_mac

    def _add_v4(self, batch, tab) -> None:
        rows_all = tab["row"]
        server = (tab.valid("msg_type") & np.isin(tab["msg_type"], V4_SERVER_TYPES) & tab.valid("op")
                  & (tab["op"] == v4.BOOTREPLY) & (batch["src_port"][rows_all] == v4.SERVER_PORT))
        m = np.flatnonzero(server)
        if len(m) == 0:
            return
        rows = rows_all[m]
        src_hi, src_lo, mac, has_mac = self._sources(batch, rows)
        has_id = tab.valid("server_id_lo")[m]
        id_hi = np.where(has_id, tab["server_id_hi"][m], src_hi)
        id_lo = np.where(has_id, tab["server_id_lo"][m], src_lo)
        link = _link(batch, rows)
        key = mix64(link, np.full(len(m), 4), id_hi, id_lo)
        kind = tab["msg_type"][m]
        relayed = tab.valid("giaddr_lo")[m] & ((tab["giaddr_lo"][m] & np.uint64(0xFFFF_FFFF)) != 0)
        has_lease = tab.valid("lease_s")[m]
        lease = tab["lease_s"][m]
        zeros = np.zeros(len(m), dtype=np.uint64)
        self._add_servers(batch, rows, key, link, 4, id_hi, id_lo, np.zeros(len(m), bool), zeros, zeros, zeros,
                          np.zeros(len(m), bool), src_hi, src_lo, mac, has_mac, kind == v4.OFFER,
                          kind == v4.ACK, kind == v4.NAK, np.zeros(len(m), bool), relayed,
                          np.where(has_lease, lease, NO_LEASE_MIN), np.where(has_lease, lease, NO_LEASE_MAX))
        self._add_offers(batch, rows, key, tab.valid("router_lo")[m], tab["router_lo"][m], tab["router_count"][m],
                         tab.valid("dns_lo")[m], tab["dns_hi"][m], tab["dns_lo"][m], tab["dns_count"][m])
        given = tab.valid("yiaddr_lo")[m] & ((tab["yiaddr_lo"][m] & np.uint64(0xFFFF_FFFF)) != 0) & (kind != v4.NAK)
        g = np.flatnonzero(given)
        self._add_clients(batch, rows[g], key[g], tab["yiaddr_hi"][m][g], tab["yiaddr_lo"][m][g],
                          tab["chaddr"][m][g], tab.valid("chaddr")[m][g])

    def _add_v6(self, batch, tab) -> None:
        rows_all = tab["row"]
        kind = np.where(tab.valid("inner_type") & (tab["msg_type"] == v6.RELAY_REPL), tab["inner_type"],
                        tab["msg_type"])
        server = (tab.valid("msg_type") & np.isin(kind, V6_SERVER_TYPES)
                  & (batch["src_port"][rows_all] == v6.SERVER_PORT))
        m = np.flatnonzero(server)
        if len(m) == 0:
            return
        rows = rows_all[m]
        kind = kind[m]
        src_hi, src_lo, mac, has_mac = self._sources(batch, rows)
        has_duid = tab.valid("server_duid_hash")[m]
        duid = tab["server_duid_hash"][m]
        link = _link(batch, rows)
        zero = np.zeros(len(m), dtype=np.uint64)
        key = mix64(link, np.full(len(m), 6), np.where(has_duid, duid, zero), np.where(has_duid, zero, src_hi),
                    np.where(has_duid, zero, src_lo), has_duid)
        relayed = tab["msg_type"][m] == v6.RELAY_REPL
        self._add_servers(batch, rows, key, link, 6, src_hi, src_lo, has_duid, duid, tab["server_duid_type"][m],
                          tab["server_mac"][m], tab.valid("server_mac")[m], src_hi, src_lo, mac, has_mac,
                          kind == v6.ADVERTISE, kind == v6.REPLY, np.zeros(len(m), bool), kind == v6.RECONFIGURE,
                          relayed, np.full(len(m), NO_LEASE_MIN), np.full(len(m), NO_LEASE_MAX))
        self._add_offers(batch, rows, key, np.zeros(len(m), bool), zero, np.zeros(len(m), np.uint8),
                         tab.valid("dns_lo")[m], tab["dns_hi"][m], tab["dns_lo"][m], tab["dns_count"][m])
        child = tab.children["dhcp6_ia"]
        position = np.full(len(tab), -1, dtype=np.int64)
        position[m] = np.arange(len(m))
        owner = position[child["parent"]]
        e = np.flatnonzero((owner >= 0) & child.valid("addr_lo"))
        o = owner[e]
        self._add_clients(batch, rows[o], key[o], child["addr_hi"][e], child["addr_lo"][e],
                          tab["client_mac"][m][o], tab.valid("client_mac")[m][o])

    def _add_servers(self, batch, rows, key, link, family, id_hi, id_lo, has_duid, duid, duid_type, duid_mac,
                     has_duid_mac, src_hi, src_lo, mac, has_mac, offer, ack, nak, reconfigure, relayed, lease_min,
                     lease_max) -> None:
        ts, frame = batch["ts_ns"][rows], batch["frame"][rows]
        n = len(rows)
        new = {"key": key, "link": link, "family": np.full(n, family), "id_hi": id_hi, "id_lo": id_lo,
               "has_duid": has_duid, "duid_hash": duid, "duid_type": duid_type, "duid_mac": duid_mac,
               "has_duid_mac": has_duid_mac, "src_ip_hi": src_hi, "src_ip_lo": src_lo, "src_mac": mac,
               "has_mac": has_mac, "mac_min": np.where(has_mac, mac, np.uint64(0xFFFF_FFFF_FFFF)),
               "mac_max": mac, "src_port": batch["src_port"][rows], "messages": np.ones(n, dtype=np.int64),
               "offers": offer, "acks": ack, "naks": nak, "reconfigures": reconfigure, "relayed": relayed,
               "lease_min": lease_min, "lease_max": lease_max, "first_ns": ts, "last_ns": ts, "first_frame": frame,
               "last_frame": frame}
        self._fold("servers", _typed(new, SERVER_COLUMNS), SERVER_REDUCE, MAX_SERVERS)

    def _add_offers(self, batch, rows, server, has_router, router_lo, router_count, has_dns, dns_hi, dns_lo,
                    dns_count) -> None:
        said = np.flatnonzero(has_router | has_dns)
        if len(said) == 0:
            return
        rows = rows[said]
        ts, frame = batch["ts_ns"][rows], batch["frame"][rows]
        has_router, has_dns = has_router[said], has_dns[said]
        router_lo = np.where(has_router, router_lo[said], np.uint64(0))
        dns_hi = np.where(has_dns, dns_hi[said], np.uint64(0))
        dns_lo = np.where(has_dns, dns_lo[said], np.uint64(0))
        new = {"key": mix64(server[said], has_router, router_lo, has_dns, dns_hi, dns_lo), "server": server[said],
               "has_router": has_router, "router_lo": router_lo, "router_count": router_count[said],
               "has_dns": has_dns, "dns_hi": dns_hi, "dns_lo": dns_lo, "dns_count": dns_count[said],
               "count": np.ones(len(rows), dtype=np.int64), "first_ns": ts, "last_ns": ts, "first_frame": frame,
               "last_frame": frame}
        self._fold("offers", _typed(new, OFFER_COLUMNS), OFFER_REDUCE, MAX_OFFERS)

    def _add_clients(self, batch, rows, server, hi, lo, client_mac, has_client_mac) -> None:
        if len(rows) == 0:
            return
        ts, frame = batch["ts_ns"][rows], batch["frame"][rows]
        new = {"key": mix64(server, hi, lo), "server": server, "addr_hi": hi, "addr_lo": lo,
               "client_mac": np.where(has_client_mac, client_mac, np.uint64(0)), "has_client_mac": has_client_mac,
               "count": np.ones(len(rows), dtype=np.int64), "first_ns": ts, "last_ns": ts, "first_frame": frame}
        self._fold("clients", _typed(new, CLIENT_COLUMNS), CLIENT_REDUCE, MAX_CLIENTS)

    def _fold(self, name: str, new: dict, reduce: dict, limit: int, by: str = "first_ns") -> None:
        folded, dropped = _bounded(fold_rows(getattr(self, name), new, "key", reduce), limit, by)
        setattr(self, name, folded)
        self.dropped[name] += dropped

    def merge(self, other: RogueDhcp) -> RogueDhcp:
        check_merge(self, other)
        for name, reduce, limit, by in (("servers", SERVER_REDUCE, MAX_SERVERS, "first_ns"),
                                        ("offers", OFFER_REDUCE, MAX_OFFERS, "first_ns"),
                                        ("clients", CLIENT_REDUCE, MAX_CLIENTS, "first_ns"),
                                        ("seconds", SECOND_REDUCE, MAX_SECONDS, "count")):
            self.dropped[name] += other.dropped[name]
            self._fold(name, getattr(other, name), reduce, limit, by)
        self.senders = sketch.top_merge([self.senders, other.senders], SENDERS_COUNTED)
        self.sender_cells = sketch.hll_merge(self.sender_cells, other.sender_cells)
        return self

    # ---- findings ---------------------------------------------------------
    def findings(self, ctx: AnalysisContext) -> list[Finding]:
        out = []
        if len(self.servers["key"]):
            out += _Judgement(self).findings()
        storm = self._storm()
        if storm is not None:
            out.append(storm)
        return out

    def _storm(self) -> Finding | None:
        sec = self.seconds
        limit = self.params["storm_pps"]
        over = np.flatnonzero(sec["count"] > limit)
        if len(over) == 0:
            return None
        over = over[np.argsort(sec["key"][over])]
        peak = over[np.argmax(sec["count"][over])]
        total = int(sec["count"][over].sum())
        from_servers = int(sec["server"][over].sum())
        role = SERVER_ROLE if from_servers > total - from_servers else CLIENT_ROLE
        of_role = from_servers if role == SERVER_ROLE else total - from_servers
        what = "server" if role == SERVER_ROLE else "client"
        t0, t1 = int(sec["first_ns"][over[0]]), int(sec["first_ns"][over[-1]]) + NS - 1
        frames = np.unique(np.concatenate([sec["first_frame"][over], sec["last_frame"][over]]))
        macs = round(float(sketch.hll_estimate(self.sender_cells, np.array([role], np.uint64))[0]))
        senders = self._senders(role)
        msg = (f"DHCP storm: {plural(len(over), 'second')} with more than {limit:,} DHCP messages, at most "
               f"{int(sec['count'][peak]):,} in the second from {iso_time(int(sec['first_ns'][peak]))}; "
               f"{total:,} messages in those seconds between {iso_time(t0)} and {iso_time(t1)}, "
               f"{total - from_servers:,} from clients and {from_servers:,} from servers or relays")
        busiest = senders[0] if senders else None
        named = busiest is not None and busiest["messages"] - busiest["messages_error"] >= STORM_SENDER_SHARE * of_role
        if named:
            who = busiest["mac"] or busiest["ip"]
            msg += (f"; the busiest {what} sender, {who}" + (f" ({busiest['ip']})" if busiest["mac"] else "")
                    + f", sent at least {busiest['messages'] - busiest['messages_error']:,} of the capture's "
                      f"{what} messages")
            remediation = (STORM_ONE_SENDER if role == CLIENT_ROLE else STORM_ONE_SERVER).format(
                who=who, role=what, address=f" (show mac address-table address {who})" if busiest["mac"] else "")
        else:
            msg += (f"; the capture's {what} messages came from about {plural(macs, 'different sender')}, none with a "
                    f"tenth of the storm's: forged addresses")
            remediation = (STORM_FORGED_CLIENTS if role == CLIENT_ROLE else STORM_FORGED_SERVERS).format(macs=macs)
        evidence = {"seconds_over": len(over), "peak_per_second": int(sec["count"][peak]),
                    "peak_second": iso_time(int(sec["first_ns"][peak])), "messages": total,
                    "client_messages": total - from_servers, "server_messages": from_servers,
                    "storm_pps": limit, "sender_role": what, "senders_estimate": macs,
                    "busiest_senders": senders[:SENDERS_LISTED],
                    **_left_out("busiest_senders", macs - min(len(senders), SENDERS_LISTED)),
                    "senders_counted_over": "the whole capture (the storm's seconds hold most of a storm's)",
                    "evidence_frames": evidence_frames(frames)}
        fields = {"src_mac": busiest["mac"]} if named and busiest["mac"] else {}
        if named:
            fields["src_ip"] = busiest["ip"]
        finding = self.finding("medium", msg, identifier="dhcp-storm", first_seen=t0, last_seen=t1, n=total,
                               evidence=evidence, proto="UDP", place=STORM_PLACE, **fields)
        return dataclasses.replace(finding, remediation=remediation)

    def _senders(self, role: int) -> list[dict]:
        """The busiest senders of `role` (most messages first): MAC (None without one), address, count and its
        error bound; only those that surely sent more than any sender not counted may have (the summary's floor):
        none of a starvation tool's forged MACs, each sending one message among thousands."""
        t = self.senders
        mine = np.flatnonzero(t["group"] == role)
        mine = mine[np.lexsort((t["item"][mine], -t["count"][mine]))]
        mine = mine[t["count"][mine] - t["error"][mine] > t["floor"][mine]]
        return [{"mac": mac_to_str(t["mac"][k]) if t["has_mac"][k] else None,
                 "ip": ip_text(t["ip_hi"][k], t["ip_lo"][k]), "messages": int(t["count"][k]),
                 "messages_error": int(t["error"][k])} for k in mine]


# A storm's seconds are counted over every link the capture saw, not one VLAN's
STORM_PLACE = "the links the capture point sees"
# What to do about a storm, by what its finding knows (the rule's remediation is about a server it names)
STORM_ONE_SENDER = (
    "Find {who}, the busiest sender of the storm's DHCP {role} messages, by its MAC address on the switch{address} "
    "and stop it: a client or a relay agent looping, or a tool. Then rate-limit DHCP on the access ports (Cisco "
    "`ip dhcp snooping limit rate`), so that one port cannot flood the servers again.")
STORM_ONE_SERVER = (
    "Find {who}, the busiest sender of the storm's DHCP {role} messages, by its MAC address on the switch{address} "
    "and stop it: a server or relay agent looping, or a rogue. Then enable DHCP snooping: trust only the ports "
    "toward the real servers and relays (Cisco `ip dhcp snooping trust` on the uplinks), so a server message from "
    "any other port is dropped.")
STORM_FORGED_CLIENTS = (
    "The storm's client messages come from about {macs:,} MAC addresses: a tool forging them (DHCP starvation: "
    "Yersinia, dhcpstarv) to empty the servers' pools, or a fuzzer. Find the access port where these MACs appear in "
    "the switch's MAC address table (`show mac address-table`, `bridge fdb show`) and shut it; then cap the MACs "
    "per port (port security) and rate-limit DHCP on the access ports (Cisco `ip dhcp snooping limit rate`).")
STORM_FORGED_SERVERS = (
    "The storm's server messages come from about {macs:,} MAC addresses: a tool forging DHCP servers, or a fuzzer. "
    "Find the access port where these MACs appear in the switch's MAC address table (`show mac address-table`, "
    "`bridge fdb show`) and shut it; then enable DHCP snooping, trusting only the ports toward the real servers "
    "and relays (Cisco `ip dhcp snooping trust` on the uplinks), so a server message from any other port is "
    "dropped (DHCPv6-Shield, RFC 7610, for DHCPv6).")
FORGED_REMEDIATION = (
    "So many servers on one VLAN are forged: a tool or fuzzer sending server messages from made-up addresses and "
    "MACs. Find the access port where the MACs of the sample appear in the switch's MAC address table (`show mac "
    "address-table`, `bridge fdb show`) and shut it; then enable DHCP snooping, trusting only the ports toward the "
    "real servers and relays (Cisco `ip dhcp snooping trust` on the uplinks), so a server message from any other "
    "port is dropped (DHCPv6-Shield, RFC 7610, for DHCPv6). List the real servers in the site file's "
    "dhcp_servers so that they are told apart from the forged ones.")


class _Judgement:
    """The servers of each VLAN compared with each other and with the site file, once for all findings.

    A VLAN (and IP version) with up to FORGED_SERVERS servers gets a finding per server, each compared with the
    others (a few); one with more is a storm of forged servers, one finding for those the site file does not
    list: linear in the servers, whatever their number."""

    def __init__(self, detector: RogueDhcp):
        self.detector = detector
        self.site = detector.site
        sv = self.sv = detector.servers
        n = len(sv["key"])
        self.window_ns = int(detector.params["window_s"] * NS)
        self.ip = [ip_text(h, lo) for h, lo in zip(sv["id_hi"].tolist(), sv["id_lo"].tolist())]
        self.src = [ip_text(h, lo) for h, lo in zip(sv["src_ip_hi"].tolist(), sv["src_ip_lo"].tolist())]
        self.mac = [mac_to_str(m) if has else None for m, has in zip(sv["src_mac"].tolist(), sv["has_mac"].tolist())]
        self.offered = self._per_server(detector.offers)
        self.given = self._per_server(detector.clients)
        self.site_given = self.site.given("dhcp_servers")
        site_duids = {fnv1a(bytes.fromhex(text)) for text in self.site.dhcp_servers
                      if parse_mac(text) is None and _is_hex(text)}
        self.allowed = [self.site_given and self._allowed(s, site_duids) for s in range(n)]
        # the servers of each (VLAN, IP version): a DHCPv4 and a DHCPv6 server side by side are no rivals
        # each VLAN's servers in the order they first answered
        self.peers: dict[tuple[int, int], list[int]] = {}
        for s in np.lexsort((sv["key"], sv["first_ns"])).tolist():
            self.peers.setdefault((int(sv["link"][s]), int(sv["family"][s])), []).append(s)

    def findings(self) -> list[Finding]:
        out = []
        for (link, family), servers in self.peers.items():
            if len(servers) <= FORGED_SERVERS:
                out += [self.finding(s) for s in servers]
                continue
            # a storm of forged servers: the site's own servers keep their findings, the others are one
            listed = [s for s in servers if self.allowed[s]]
            out += [self.finding(s) for s in listed]
            forged = np.array([s for s in servers if not self.allowed[s]], dtype=np.int64)
            if len(forged):
                out.append(self._forged(link, family, forged, len(listed)))
        return out

    def _per_server(self, rows: dict) -> dict[int, np.ndarray]:
        """Each server's rows of an offers or clients table (by its key), in order of first_ns."""
        keys = self.sv["key"]
        order = np.argsort(keys, kind="stable")
        at, found = find_sorted(keys[order], rows["server"])
        owner = np.where(found, order[np.minimum(at, len(order) - 1)], -1)
        rows_in_order = np.argsort(rows["first_ns"], kind="stable")
        rows_in_order = rows_in_order[owner[rows_in_order] >= 0]
        by_owner = rows_in_order[np.argsort(owner[rows_in_order], kind="stable")]
        owners, starts = np.unique(owner[by_owner], return_index=True)
        return dict(zip(owners.tolist(), np.split(by_owner, starts[1:])))

    def _allowed(self, s: int, site_duids: set) -> bool:
        sv = self.sv
        if self.site.is_dhcp_server(ip=self.ip[s]) or self.site.is_dhcp_server(ip=self.src[s]):
            return True
        if self.mac[s] is not None and self.site.is_dhcp_server(mac=self.mac[s]):
            return True
        if sv["has_duid_mac"][s] and self.site.is_dhcp_server(mac=int(sv["duid_mac"][s])):
            return True
        return bool(sv["has_duid"][s]) and int(sv["duid_hash"][s]) in site_duids

    # ---- what a server offered
    def _routers(self, s: int) -> set[str]:
        of = self.detector.offers
        return {ip_text(0, of["router_lo"][r]) for r in self.offered.get(s, []) if of["has_router"][r]}

    def _dns(self, s: int) -> set[str]:
        of = self.detector.offers
        return {ip_text(of["dns_hi"][r], of["dns_lo"][r]) for r in self.offered.get(s, []) if of["has_dns"][r]}

    def _differ(self, s: int, o: int) -> list[str]:
        """What servers s and o both offered, differently: ["routers", "DNS servers"] or a part of it."""
        out = []
        for what, of in (("routers", self._routers), ("DNS servers", self._dns)):
            mine, theirs = of(s), of(o)
            if mine and theirs and mine != theirs:
                out.append(what)
        return out

    def _overlap(self, s: int, o: int) -> bool:
        sv, w = self.sv, self.window_ns
        return bool(sv["first_ns"][o] <= sv["last_ns"][s] + w and sv["first_ns"][s] <= sv["last_ns"][o] + w)

    def _duid(self, s: int) -> str:
        sv = self.sv
        name = DUID_NAMES.get(int(sv["duid_type"][s]), f"DUID type {int(sv['duid_type'][s])}")
        if sv["has_duid_mac"][s]:
            return f"{name} {mac_to_str(sv['duid_mac'][s])}"
        return f"{name} #{int(sv['duid_hash'][s]):016x}"

    def _name(self, s: int) -> str:
        sv = self.sv
        if sv["family"][s] == 4:
            return self.ip[s]
        return self._duid(s) if sv["has_duid"][s] else self.src[s]

    # ---- a storm of forged servers
    def _forged(self, link: int, family: int, forged: np.ndarray, listed: int) -> Finding:
        """One finding for the `forged` servers of a VLAN (more than FORGED_SERVERS; `listed` more are the site's):
        counts over all of them, the busiest SAMPLE_SERVERS named."""
        sv, det = self.sv, self.detector
        version = "DHCPv4" if family == 4 else "DHCPv6"
        first, last = sv["first_ns"][forged], sv["last_ns"][forged]
        t0, t1 = int(first.min()), int(last.max())
        messages = sv["messages"][forged]
        sample = forged[np.lexsort((first, -messages))][:SAMPLE_SERVERS]
        keys = sv["key"][forged]
        of, cl = det.offers, det.clients
        offers = np.isin(of["server"], keys)
        routers = np.unique(of["router_lo"][offers & of["has_router"]])
        dns = np.unique(np.stack([of["dns_hi"], of["dns_lo"]])[:, offers & of["has_dns"]], axis=1)
        given = int(np.count_nonzero(np.isin(cl["server"], keys)))
        counts = {"offers": int(sv["offers"][forged].sum()), "acks": int(sv["acks"][forged].sum()),
                  "naks": int(sv["naks"][forged].sum()), "reconfigures": int(sv["reconfigures"][forged].sum())}
        # competing: answering within window_s of another forged server (sorted by first answer, a server's
        # next one starts before its own last answer plus the window)
        order = np.argsort(first, kind="stable")
        reach = np.maximum.accumulate(last[order])
        competing = int(np.count_nonzero(first[order][1:] <= reach[:-1] + self.window_ns))
        if self.site_given:
            severity, verdict = "high", "none of them among the site's DHCP servers"
        elif competing and (len(routers) > 1 or dns.shape[1] > 1):
            offered = " and ".join(f"{count:,} different {what}" for count, what in
                                   ((len(routers), "routers"), (dns.shape[1], "DNS servers")) if count > 1)
            severity, verdict = "high", f"answering within {self.window_ns // NS} s of each other with {offered}"
        else:
            severity, verdict = "medium", f"more than {FORGED_SERVERS} servers on one VLAN"
        where = "untagged" if link == 0 else _vlan_text(link)
        kinds = ("OFFER", "ACK", "NAK") if family == 4 else ("ADVERTISE", "REPLY", "RECONFIGURE")
        said = ", ".join(f"{counts[name]:,} {kind}" for name, kind in zip(("offers", "acks",
                                                                            "naks" if family == 4 else "reconfigures"),
                                                                           kinds))
        msg = (f"a storm of {len(forged):,} forged {version} servers, {where}: {verdict}; {int(messages.sum()):,} "
               f"messages ({said}) in {(t1 - t0) / NS:.1f} s, at most {int(messages.max()):,} from one server, "
               f"{plural(given, 'address', 'addresses')} given; the busiest: "
               f"{', '.join(self._name(o) for o in sample[:LISTED].tolist())} ({len(sample)} in the evidence)")
        if listed:
            msg += f"; {plural(listed, 'server')} the site file lists answered beside them"
        sample_rows = [{"server": self._name(s), "source_ip": self.src[s], "mac": self.mac[s],
                        "messages": int(sv["messages"][s]), "first_seen": iso_time(int(sv["first_ns"][s]))}
                       for s in sample.tolist()]
        evidence = {
            "family": version, "servers": len(forged), "messages": int(messages.sum()), **counts,
            "addresses_given": given, "distinct_routers": len(routers), "distinct_dns": int(dns.shape[1]),
            "competing_servers": competing + 1 if competing else 0, "site_servers_beside": listed,
            "sample": sample_rows, **_left_out("sample", len(forged) - len(sample_rows)),
            "evidence_frames": evidence_frames(np.unique(sv["first_frame"][sample])),
        }
        if link:
            evidence["vlan"] = link >> 16
        if not self.site_given:
            evidence["not_judged"] = ["which server is allowed: the site file names no dhcp_servers"]
        if any(det.dropped.values()):
            evidence["not_kept"] = dict(det.dropped)
        finding = det.finding(severity, msg, identifier=f"{version} server storm {_vlan_text(link)}", first_seen=t0,
                              last_seen=t1, n=int(messages.sum()), evidence=evidence, proto="UDP",
                              place="the untagged link" if link == 0 else _vlan_text(link),
                              src_port=v4.SERVER_PORT if family == 4 else v6.SERVER_PORT)
        return dataclasses.replace(finding, remediation=FORGED_REMEDIATION)

    # ---- the finding
    def finding(self, s: int) -> Finding:
        sv = self.sv
        link, family = int(sv["link"][s]), int(sv["family"][s])
        others = [o for o in self.peers[(link, family)] if o != s]
        competing = [o for o in others if self._overlap(s, o)]
        differing = {o: self._differ(s, o) for o in competing}
        differing = {o: what for o, what in differing.items() if what}
        not_judged = []
        if self.site_given:
            if self.allowed[s]:
                severity, verdict = "info", "one of the site's DHCP servers"
            else:
                severity, verdict = "high", "not among the site's DHCP servers"
        elif differing:
            severity = "high"
            o, what = next(iter(differing.items()))
            verdict = (f"one of {len(others) + 1} DHCP servers answering on this VLAN within "
                       f"{self.window_ns // NS} s of each other, with other {' and '.join(what)} than "
                       f"{self._name(o)} ({self._offer_text(s)} against {self._offer_text(o)})")
            not_judged.append("which server is allowed: the site file names no dhcp_servers")
        elif competing:
            severity = "medium"
            verdict = (f"one of {len(others) + 1} DHCP servers answering on this VLAN within "
                       f"{self.window_ns // NS} s of each other (also {self._names(competing)})")
            not_judged.append("which server is allowed: the site file names no dhcp_servers")
        elif others:
            severity = "medium"
            verdict = (f"one of {len(others) + 1} DHCP servers seen on this VLAN (also "
                       f"{self._names(others)}), never within "
                       f"{self.window_ns // NS} s of each other: a replaced server, a failover pair or a rogue "
                       f"that came and went")
            not_judged.append("which server is allowed: the site file names no dhcp_servers")
        else:
            severity, verdict = "info", "the only DHCP server answering on this VLAN"
            not_judged.append("whether it is allowed: the site file names no dhcp_servers")
        return self._finding(s, severity, verdict, others, competing, differing, not_judged)

    def _names(self, servers: list[int]) -> str:
        """The first LISTED servers' names, and how many more."""
        more = len(servers) - LISTED
        return ", ".join(self._name(o) for o in servers[:LISTED]) + (f" and {more:,} more" if more > 0 else "")

    def _offer_text(self, s: int) -> str:
        """router 10.0.0.1; DNS 10.0.0.53 (first of 2): the first of each list the server offered."""
        of = self.detector.offers
        rows = self.offered.get(s, np.zeros(0, dtype=np.int64))
        parts = []
        for what, values, count in (("router", sorted(self._routers(s)), of["router_count"][rows]),
                                    ("DNS", sorted(self._dns(s)), of["dns_count"][rows])):
            if values:
                most = int(count.max()) if len(count) else 1
                parts.append(f"{what} {', '.join(values[:LISTED])}" + (f" (first of {most})" if most > 1 else ""))
        return "; ".join(parts) or "no router or DNS"

    def _finding(self, s, severity, verdict, others, competing, differing, not_judged) -> Finding:
        sv, det = self.sv, self.detector
        link, family = int(sv["link"][s]), int(sv["family"][s])
        t0, t1 = int(sv["first_ns"][s]), int(sv["last_ns"][s])
        version = "DHCPv4" if family == 4 else "DHCPv6"
        cl = det.clients
        given = self.given.get(s, np.zeros(0, dtype=np.int64))
        addresses = [ip_text(cl["addr_hi"][r], cl["addr_lo"][r]) for r in given[:IN_EVIDENCE]]
        if family == 4:
            counts = (f"{int(sv['offers'][s]):,} OFFER, {int(sv['acks'][s]):,} ACK, {int(sv['naks'][s]):,} NAK")
        else:
            counts = (f"{int(sv['offers'][s]):,} ADVERTISE, {int(sv['acks'][s]):,} REPLY, "
                      f"{int(sv['reconfigures'][s]):,} RECONFIGURE")
        lease = ""
        if sv["lease_max"][s] >= sv["lease_min"][s] and family == 4:
            low, high = int(sv["lease_min"][s]), int(sv["lease_max"][s])
            lease = f", lease {low:,} s" if low == high else f", leases {low:,}-{high:,} s"
        mac = f" {self.mac[s]}" if self.mac[s] else ""
        if family == 4 and self.src[s] == self.ip[s]:
            who = self.ip[s] + mac
        else:       # a relay's or the server's own address, and the MAC the answers came from
            who = f"{self._name(s)} (from {self.src[s]}{mac})"
        relayed = int(sv["relayed"][s])
        where = ", untagged" if link == 0 else f", {_vlan_text(link)}"
        msg = (f"{version} server {who}{where}: {verdict}. Offered {self._offer_text(s)}{lease}; "
               f"gave {plural(len(given), 'address', 'addresses')}" + (f" ({', '.join(addresses[:LISTED])}"
                                                      + (", ..." if len(given) > LISTED else "") + ")" if given.size
                                                      else "")
               + f"; {counts}" + (f", {relayed:,} relayed" if relayed else "")
               + f", {(t1 - t0) / NS:.1f} s")
        if not_judged:
            msg += f". Not judged: {'; '.join(not_judged)}"
        frames = [sv["first_frame"][s], sv["last_frame"][s]]
        of = det.offers
        for r in self.offered.get(s, [])[:IN_EVIDENCE // 4]:
            frames += [of["first_frame"][r], of["last_frame"][r]]
        frames += [cl["first_frame"][r] for r in given[:IN_EVIDENCE // 2]]
        for o in competing[:LISTED]:
            frames.append(sv["first_frame"][o])
        routers, dns = self._routers(s), self._dns(s)
        macs = sorted({m for m in (self.mac[s],) if m})
        if sv["has_mac"][s] and sv["mac_min"][s] != sv["mac_max"][s]:
            macs = sorted({mac_to_str(sv["mac_min"][s]), mac_to_str(sv["mac_max"][s]), *macs})
        evidence = {
            "family": version, "server": self._name(s), "source_ip": self.src[s], "macs": macs,
            "messages": int(sv["messages"][s]), "offers": int(sv["offers"][s]), "acks": int(sv["acks"][s]),
            "naks": int(sv["naks"][s]), "reconfigures": int(sv["reconfigures"][s]), "relayed": relayed,
            **_listed("routers", sorted(routers)), **_listed("dns", sorted(dns)),
            "clients": [{"address": a, "mac": (mac_to_str(cl["client_mac"][r]) if cl["has_client_mac"][r] else None),
                         "first_seen": iso_time(int(cl["first_ns"][r]))} for a, r in zip(addresses, given.tolist())],
            "clients_total": len(given), **_left_out("clients", len(given) - len(addresses)),
            **_listed("other_servers", [self._name(o) for o in others]),
            **_listed("competing", [self._name(o) for o in competing]),
            "allowed_server": self.allowed[s] if self.site_given else None,
            "evidence_frames": evidence_frames(np.unique(np.array(frames, dtype=np.int64))),
        }
        if family == 4 and sv["lease_max"][s] >= sv["lease_min"][s]:
            evidence["lease_s"] = [int(sv["lease_min"][s]), int(sv["lease_max"][s])]
        if sv["has_duid"][s]:
            evidence["duid"] = self._duid(s)
        if differing:
            evidence["differs_from"] = {self._name(o): what for o, what in list(differing.items())[:IN_EVIDENCE]}
            evidence.update(_left_out("differs_from", len(differing) - IN_EVIDENCE))
        if link:
            evidence["vlan"] = link >> 16
        if not_judged:
            evidence["not_judged"] = not_judged
        if any(det.dropped.values()):
            evidence["not_kept"] = dict(det.dropped)
        fields = {"src_ip": self.src[s], "src_port": int(sv["src_port"][s]), "proto": "UDP"}
        if self.mac[s] is not None:
            fields["src_mac"] = self.mac[s]
        identifier = f"{self._name(s)} {_vlan_text(link)}"
        return det.finding(severity, msg, identifier=identifier, first_seen=t0, last_seen=t1,
                           n=int(sv["messages"][s]), evidence=evidence, **fields)


def _listed(name: str, values: list) -> dict:
    """An evidence list capped at IN_EVIDENCE, and how many it left out."""
    return {name: values[:IN_EVIDENCE], **_left_out(name, len(values) - IN_EVIDENCE)}


def _left_out(name: str, count: int) -> dict:
    """`<name>_left_out`: how many a capped evidence list left out, when it left any (detector.findings's
    convention)."""
    return {f"{name}_left_out": int(count)} if count > 0 else {}


def _is_hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True

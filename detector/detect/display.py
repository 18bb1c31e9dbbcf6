"""What a finding shows of a frame or a flow for a human: scapy's one-line summary, the flow table's row."""
from __future__ import annotations

import importlib

import numpy as np

from ..schema import PROTO_NAMES

# scapy dissectors loaded for frame summaries: every link type the decoder reads (they fill
# conf.l2types), the tunnels it removes and the protocols the rules name. scapy.layers.all would load
# some 80 more (TLS, X.509, Kerberos, SMB...), 0.7 s of every run that writes a finding.
SUMMARY_LAYERS = ("l2", "inet", "inet6", "ppp", "dot11", "vxlan", "l2tp", "sctp", "rip", "dns", "dhcp", "dhcp6",
                  "ntp", "snmp", "hsrp", "vrrp", "llmnr", "netbios", "isakmp", "eap")


def load_dissectors():
    """scapy's configuration, with the dissectors of SUMMARY_LAYERS registered; loaded once."""
    from scapy.config import conf

    for name in SUMMARY_LAYERS:
        importlib.import_module(f"scapy.layers.{name}")
    return conf


def frame_summary(frame: bytes, linktype: int) -> str:
    """A one-line decode of hostile frame bytes (scapy's summary), for a human reading the finding."""
    cls = load_dissectors().l2types.get(int(linktype))
    if cls is None:
        return f"{len(frame)} bytes of link type {int(linktype)}"
    try:
        text = cls(frame).summary()
    except Exception:   # scapy's dissectors raise all kinds of errors on crafted bytes; the finding stands
        return f"{len(frame)} bytes (scapy could not decode them)"
    # one line, bounded: the text comes from packet bytes
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def match_flow(table, src: str, sport: int, dst: str, dport: int, proto: int) -> dict | None:
    """The row of the flow table (FlowTable.to_frame()) of src:sport -> dst:dport over `proto`, in either
    orientation, as a dict; None when it has none."""
    if table is None or len(table) == 0 or "src_ip" not in table:
        return None
    forward = ((table["src_ip"] == src) & (table["src_port"] == sport) &
               (table["dest_ip"] == dst) & (table["dest_port"] == dport))
    backward = ((table["src_ip"] == dst) & (table["src_port"] == dport) &
                (table["dest_ip"] == src) & (table["dest_port"] == sport))
    hit = table[forward | backward]
    if "proto" in hit and len(hit):
        name = PROTO_NAMES.get(proto, "")
        hit = hit[hit["proto"].isin([proto, name, name.upper()])]
    return hit.iloc[0].to_dict() if len(hit) else None


def flow_community_id(ctx, src: str, sport: int, dst: str, dport: int, proto: int) -> str | None:
    """The flow table's Community ID of src:sport -> dst:dport over `proto` (either orientation), None when the
    table has no such flow: read from the context's numeric columns (AnalysisContext.flow_columns: no pandas, no
    text of every flow) where it holds the table, else from its DataFrame view (match_flow)."""
    from .columns import ip_halves

    cols = ctx.flow_columns()
    if cols is None:
        match = match_flow(ctx.flows, src, sport, dst, dport, proto)
        return None if match is None or "community_id" not in match else str(match["community_id"])
    a, b = ip_halves(src), ip_halves(dst)
    if a is None or b is None or "community_id" not in cols:
        return None

    def side(name: str, address: tuple[int, int], port: int):
        return ((cols[f"{name}_ip_hi"] == address[0]) & (cols[f"{name}_ip_lo"] == address[1])
                & (cols[f"{name}_port"] == port))
    either = (side("src", a, sport) & side("dest", b, dport)) | (side("src", b, dport) & side("dest", a, sport))
    hit = np.flatnonzero(either & (cols["proto"] == proto))
    if len(hit) == 0:
        return None
    column = cols["community_id"]
    return str(column.value_texts()[int(column.codes[hit[0]])])

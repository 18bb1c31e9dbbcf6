"""The notebook API: `detector.open(path)` gives a Capture whose packets, flows and findings are pandas DataFrames.

Everything is lazy: opening reads nothing; the first use of `.packets`
reads the capture once into columns, the first use of `.flows` or
`.findings` runs the flow table and the detectors in one pass. Addresses are
strings, times are UTC timestamps, fields a packet does not carry are <NA>
(pandas nullable integers), never a made-up 0.

The packet table holds every packet of the capture in memory (about 100
bytes a packet): meant for incident captures, not for multi-gigabyte ones,
which `detector analyze` streams.

A rule whose detector fails (a bug in detector) does not cost the others'
findings: it is left out with a RuntimeWarning naming it, and
`Capture.failures` lists what failed where, as findings.json does.

`detector.open(path, site="site.yaml")` gives the detectors a site file, as
`detector analyze --site` does (detector.site); a Site already loaded with
`detector.site.load_site` serves as well.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from . import engine
from .decode import app
from .decode.addr import ip_to_str, mac_to_str
from .errors import UsageError
from .findings import Finding
from .rss import DEFAULT_QUEUES, RssModel
from .schema import IP, L_DST_MAC, L_MSS, L_PAYLOAD, L_PORTS, L_SRC_MAC, L_TCP, L_VLAN, PROTO_NAMES, PacketBatch
from .site import EMPTY, Site, load_site

__all__ = ["open", "Capture"]

# decoded column -> (packet table column, layer bits that make it valid, pandas dtype)
_MASKED = {
    "vlan_outer": ("vlan", L_VLAN, "UInt16"),
    "ttl": ("ttl", IP, "UInt8"),
    "src_port": ("src_port", L_PORTS, "UInt16"),
    "dest_port": ("dest_port", L_PORTS, "UInt16"),
    "tcp_flags": ("tcp_flags", L_TCP, "UInt16"),
    "tcp_mss": ("tcp_mss", L_MSS, "UInt16"),
    "payload_len": ("payload_len", L_PAYLOAD, "UInt32"),
    "ip_len": ("ip_len", IP, "UInt32"),
}
_RAW = {"frame": "int64", "caplen": "uint32", "wirelen": "uint32", "linktype": "uint16"}


class _PacketColumns:
    """Consumer that keeps the packet table's columns of every batch (vectorised slices, no per-packet work)."""

    needs_fingerprint = False

    def __init__(self, rss: RssModel):
        self.rss = rss
        self.parts: list[dict[str, np.ndarray]] = []

    def update(self, batch: PacketBatch) -> None:
        layers = batch["layers"]
        part = {name: batch[name].copy() for name in _RAW}
        part["ts_ns"] = batch["ts_ns"].copy()
        part["layers"] = layers.copy()
        for name in ("src_mac", "dest_mac", "src_ip_hi", "src_ip_lo", "dest_ip_hi", "dest_ip_lo", "proto",
                     *_MASKED):
            part[name] = batch[name].copy()
        part["rss_queue"] = self.rss.queue(batch)
        self.parts.append(part)

    def frame(self) -> pd.DataFrame:
        cols = {k: np.concatenate([p[k] for p in self.parts]) if self.parts else np.zeros(0)
                for k in ("frame", "ts_ns", "caplen", "wirelen", "linktype", "layers", "src_mac", "dest_mac",
                          "src_ip_hi", "src_ip_lo", "dest_ip_hi", "dest_ip_lo", "proto", "rss_queue", *_MASKED)}
        layers = cols["layers"].astype(np.uint32)
        has_ip = (layers & np.uint32(IP)) != 0
        out = {name: pd.array(cols[name].astype(dtype), dtype=dtype) for name, dtype in _RAW.items()}
        out.update(_addresses(cols))
        proto = cols["proto"].astype(np.uint8)
        out["proto"] = pd.array(np.where(has_ip, _proto_texts(proto), None), dtype="string")
        for source, (name, bit, dtype) in _MASKED.items():
            valid = (layers & np.uint32(bit)) != 0
            out[name] = pd.arrays.IntegerArray(cols[source].astype(dtype.lower()), ~valid)
        # a NIC hashes IP packets only; the model's queue of anything else means nothing
        out["rss_queue"] = pd.arrays.IntegerArray(cols["rss_queue"].astype(np.uint16), ~has_ip)
        return pd.DataFrame(out)


def _addresses(cols: dict[str, np.ndarray]) -> dict[str, object]:
    """time, src_mac, dest_mac, src_ip, dest_ip of packet columns (ts_ns, layers, the MACs, the address halves),
    masked where the packet has none."""
    layers = cols["layers"].astype(np.uint32)
    has_ip = (layers & np.uint32(IP)) != 0
    out = {"time": pd.to_datetime(cols["ts_ns"].astype(np.int64), unit="ns", utc=True)}
    for name, bit in (("src_mac", L_SRC_MAC), ("dest_mac", L_DST_MAC)):
        valid = (layers & np.uint32(bit)) != 0
        out[name] = pd.array(np.where(valid, mac_to_str(cols[name].astype(np.uint64)), None), dtype="string")
    for side in ("src", "dest"):
        texts = ip_to_str(cols[f"{side}_ip_hi"].astype(np.uint64), cols[f"{side}_ip_lo"].astype(np.uint64))
        out[f"{side}_ip"] = pd.array(np.where(has_ip, texts, None), dtype="string")
    return out


# the packet columns an application table's rows carry into its DataFrame
_APP_CONTEXT = ("frame", "ts_ns", "layers", "src_mac", "dest_mac", "vlan_outer", "src_ip_hi", "src_ip_lo",
                "dest_ip_hi", "dest_ip_lo")


class _AppColumns:
    """Consumer that keeps one application table (detector.decode.app) of every batch, with the packet
    columns of its rows, and the child tables linked by frame number."""

    needs_fingerprint = False

    def __init__(self, name: str):
        self.name = name
        self.app_tables = (name,)
        self.parts: list[tuple[dict[str, np.ndarray], object]] = []

    def update(self, batch: PacketBatch) -> None:
        found = app.table(batch, self.name)
        if len(found):
            rows = found["row"]
            self.parts.append(({name: batch[name][rows] for name in _APP_CONTEXT}, found))

    def frame(self, child: str | None = None) -> pd.DataFrame:
        parts = self.parts or [({name: np.zeros(0, np.uint64) for name in _APP_CONTEXT}, app.spec(self.name).empty())]
        if child is None:
            context = {k: np.concatenate([c[k] for c, _ in parts]) for k in _APP_CONTEXT}
            out = {"frame": context["frame"].astype(np.int64), **_addresses(context)}
            vlan = (context["layers"] & np.uint32(L_VLAN)) != 0
            out["vlan"] = pd.arrays.IntegerArray(context["vlan_outer"].astype(np.uint16), ~vlan)
            fields = pd.concat([t.to_frame() for _, t in parts], ignore_index=True)
            return pd.concat([pd.DataFrame(out), fields.drop(columns=["row", "frame"])], axis=1)
        frames = []
        for _, found in parts:
            kids = found.children[child].to_frame()
            kids.insert(0, "frame", found["frame"][kids.pop("parent").to_numpy(np.int64)])
            frames.append(kids)
        return pd.concat(frames, ignore_index=True)


def _proto_texts(proto: np.ndarray) -> np.ndarray:
    """Protocol names, formatted once per distinct number."""
    if not len(proto):
        return np.zeros(0, dtype=object)
    values, inverse = np.unique(proto, return_inverse=True)
    names = np.array([PROTO_NAMES.get(int(v), str(int(v))) for v in values], dtype=object)
    return names[inverse.reshape(-1)]


def _findings_frame(findings: list[Finding]) -> pd.DataFrame:
    columns = ["rule", "severity", "title", "msg", "identifier", "first_seen", "last_seen", "n", "src_ip", "dest_ip",
               "src_port", "dest_port", "proto", "community_id", "evidence", "remediation"]
    rows = [{k: getattr(f, k) for k in columns} for f in findings]
    frame = pd.DataFrame(rows, columns=columns)
    for name in ("first_seen", "last_seen"):
        frame[name] = pd.to_datetime(frame[name].astype("Int64"), unit="ns", utc=True)
    for name in ("rule", "severity", "title", "msg", "identifier", "src_ip", "dest_ip", "proto", "community_id",
                 "remediation"):
        frame[name] = frame[name].astype("string")
    for name in ("src_port", "dest_port"):
        frame[name] = frame[name].astype("UInt16")
    frame["n"] = frame["n"].astype("int64")
    return frame


class Capture:
    """One capture (or several read as one) opened for exploration; see the module docstring."""

    def __init__(self, paths, site: Site = EMPTY):
        self.paths = [str(p) for p in paths]
        self.site = site            # the site file the detectors are given (detector.site), EMPTY: none
        self._packets: pd.DataFrame | None = None
        self._flows: pd.DataFrame | None = None
        self._findings: list[Finding] | None = None
        self._failures: list[dict] = []
        self._app: dict[str, _AppColumns] = {}
        self.plot = _Plots(self)

    def __repr__(self) -> str:
        return f"Capture({', '.join(self.paths)})"

    @property
    def packets(self) -> pd.DataFrame:
        """One row per packet: frame, time, lengths, link type, MACs, addresses, ports, TCP fields, RSS queue."""
        if self._packets is None:
            columns = _PacketColumns(RssModel(queues=DEFAULT_QUEUES))
            engine.run(self.paths, [columns], label="packets")
            self._packets = columns.frame()
        return self._packets

    def app(self, name: str) -> pd.DataFrame:
        """An application table (detector.decode.app: "vrrp", ...) as a DataFrame, one row per message: its
        frame, time, MACs, VLAN and addresses, then the protocol's fields (<NA> where the message lacks one),
        `truncated`, `more`. A child table's name ("vrrp_addr", ...) gives its elements, each with the frame
        of its message. Read in one pass of the capture, kept for the next call."""
        parent = next((table for table in app.TABLES
                       if name == table or name in {c.name for c in app.spec(table).children}), None)
        if parent is None:
            known = sorted({*app.TABLES, *(c.name for table in app.TABLES for c in app.spec(table).children)})
            raise UsageError(f"no application table '{name}' (known: {', '.join(known)})")
        if parent not in self._app:
            columns = _AppColumns(parent)
            engine.run(self.paths, [columns], label=parent)
            self._app[parent] = columns
        return self._app[parent].frame(None if name == parent else name)

    @property
    def flows(self) -> pd.DataFrame:
        """The flow table (as `detector flows` writes it)."""
        if self._flows is None:
            self.analyze()
        return self._flows

    @property
    def findings(self) -> pd.DataFrame:
        """The findings of the default rules, most severe first."""
        if self._findings is None:
            self.analyze()
        return _findings_frame(self._findings)

    @property
    def failures(self) -> list[dict]:
        """The rules whose detector failed in the last analysis (a bug in detector), as findings.json lists
        them: rule, stage, error, message, batch, frames, capture, traceback. Empty when every rule ran."""
        if self._findings is None:
            self.analyze()
        return self._failures

    def analyze(self, rules=None) -> pd.DataFrame:
        """Run the detectors (`rules`: a folder of rule files laid over the defaults), with the site file given to
        open(), and return the findings.

        A rule whose detector raises is left out with a RuntimeWarning; see `failures`.
        """
        from . import analysis
        from .rules import load_rules

        result = analysis.analyze(self.paths, load_rules(rules), label="analyze", site=self.site)
        self._flows = result.flows
        self._findings = result.findings
        self._failures = [failure.to_json() for failure in result.failures]
        for failure in result.failures:
            warnings.warn(f"{failure.summary()} -- a bug in detector: this rule did not run to the end and its "
                          "findings may be missing (the other rules' are here); Capture.failures has the "
                          "traceback", RuntimeWarning, stacklevel=2)
        return _findings_frame(self._findings)


class _Plots:
    """Figures of a Capture (matplotlib; each returns the Axes it drew on)."""

    def __init__(self, capture: Capture):
        self._capture = capture

    @staticmethod
    def _axes(ax):
        if ax is None:
            import matplotlib.pyplot as plt

            _fig, ax = plt.subplots(figsize=(9, 3))
        return ax

    def timeline(self, bins: int = 200, ax=None):
        """Packets per second over the capture, with each finding's first-to-last interval shaded."""
        ax = self._axes(ax)
        packets = self._capture.packets
        if len(packets) == 0:
            return ax
        seconds = (packets["time"] - packets["time"].min()).dt.total_seconds().to_numpy()
        counts, edges = np.histogram(seconds, bins=bins)
        width = max(edges[1] - edges[0], 1e-9)
        ax.step(edges[:-1], counts / width, where="post", lw=1)
        start = packets["time"].min()
        for _, f in self._capture.findings.iterrows():
            if pd.notna(f["first_seen"]):
                ax.axvspan((f["first_seen"] - start).total_seconds(), (f["last_seen"] - start).total_seconds()
                           + width, alpha=0.25, color="#d33", label=f["rule"])
        ax.set_xlabel(f"seconds after {start}")
        ax.set_ylabel("packets/s")
        return ax

    def rss_queues(self, bin_ms: float = 100.0, ax=None):
        """Heat map of each receive queue's share of the packets per time bin (RSS model, default key)."""
        ax = self._axes(ax)
        packets = self._capture.packets
        ip = packets[packets["rss_queue"].notna()]
        if len(ip) == 0:
            return ax
        t = (ip["time"] - ip["time"].min()).dt.total_seconds().to_numpy()
        bins = (t // (bin_ms / 1000)).astype(np.int64)
        queue = ip["rss_queue"].to_numpy(dtype=np.int64)
        counts = np.zeros((bins.max() + 1, DEFAULT_QUEUES))
        np.add.at(counts, (bins, queue), 1)
        share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
        image = ax.imshow(share.T, aspect="auto", origin="lower", vmin=0, vmax=1, interpolation="nearest",
                          extent=(0, len(share) * bin_ms / 1000, -0.5, DEFAULT_QUEUES - 0.5))
        ax.figure.colorbar(image, ax=ax, label="share of packets")
        ax.set_xlabel("seconds")
        ax.set_ylabel("receive queue")
        return ax

    def segments(self, flow, mtu: int | None = None, ax=None):
        """Payload size of each packet of one flow (a row index of .flows or a community_id) vs the MSS/MTU."""
        ax = self._axes(ax)
        flows = self._capture.flows
        if isinstance(flow, str):
            match = flows.index[flows["community_id"] == flow]
            if len(match) == 0:
                raise UsageError(f"no flow with community_id {flow}")
            flow = match[0]
        row = flows.loc[flow]
        packets = self._capture.packets
        forward = ((packets["src_ip"] == row["src_ip"]) & (packets["dest_ip"] == row["dest_ip"])
                   & (packets["src_port"] == row["src_port"]) & (packets["dest_port"] == row["dest_port"]))
        backward = ((packets["src_ip"] == row["dest_ip"]) & (packets["dest_ip"] == row["src_ip"])
                    & (packets["src_port"] == row["dest_port"]) & (packets["dest_port"] == row["src_port"]))
        start = row["first_seen"]
        for mask, label in ((forward.fillna(False), "src -> dest"), (backward.fillna(False), "dest -> src")):
            part = packets[mask.to_numpy(dtype=bool)]
            ax.plot((part["time"] - start).dt.total_seconds(), part["payload_len"].astype("float"), ".",
                    label=label)
        for name in ("src_mss", "dest_mss"):
            if int(row[name]):
                ax.axhline(int(row[name]), ls="--", lw=1, color="grey")
                ax.annotate(f"{name} {int(row[name])}", (0, int(row[name])), fontsize=8)
        if mtu:
            ax.axhline(mtu - 40, ls=":", color="#d33", label=f"MTU {mtu} - 40")
        ax.set_xlabel("seconds after the flow's first packet")
        ax.set_ylabel("payload bytes")
        ax.legend()
        return ax


def open(path, *more, site=None) -> Capture:
    """Open one capture, or several read as one continuous capture. Reads nothing until a table is used.

    `site` is a site file (a path, read and checked now: a bad one raises its RuleError) or a
    detector.site.Site; None: none.
    """
    paths = [path, *more]
    for p in paths:
        if not os.path.isfile(p):
            raise UsageError(f"{p}: no such file" if not os.path.exists(p) else f"{p}: not a regular file")
    return Capture([Path(p) for p in paths], site if isinstance(site, Site) else load_site(site))

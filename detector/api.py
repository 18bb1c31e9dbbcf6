"""The notebook API: `detector.open(path)` gives a Capture whose packets, flows and findings are pandas DataFrames.

Everything is lazy: opening reads nothing; the first use of `.packets`
reads the capture once into columns, the first use of `.flows` or
`.findings` runs the flow table and the detectors in one pass. Addresses are
strings, times are UTC timestamps, fields a packet does not carry are <NA>
(pandas nullable integers), never a made-up 0.

`.packets` holds every decoded column of every packet in memory (detector.
packet_view documents each; `Capture.describe()` lists them): meant for
incident captures. For a large one, `packets_frame(columns=[...], where=...)`
builds only the asked columns of the kept rows, batch by batch, so memory
holds what the question needs; `has("tcp")` reads the layer bits by name.

Frames on demand: `frames([12, 40])` reads those frames alone at their offsets
(detector.frames: an index of the capture's records, built by one walk of
the record headers on first use) as raw bytes and scapy packets;
`write_pcap(frames, path)` writes them for Wireshark. `finding(i)` is row i of
`.findings` as an object: its `plot()` draws what the report draws for it,
its `frames()` are its evidence frames.

A rule whose detector fails (a bug in detector) does not cost the others'
findings: it is left out with a RuntimeWarning naming it, and
`Capture.failures` lists what failed where, as findings.json does.

`Capture.dissect(frame)` is Wireshark's opinion of one frame: the pyshark Packet tshark makes of it
(detector.report.dissect), for the fields detector does not decode and the Expert Info Wireshark raises.

`detector.open(path, site="site.yaml")` gives the detectors a site file, as
`detector analyze --site` does (detector.site); a Site already loaded with
`detector.site.load_site` serves as well.
"""
from __future__ import annotations

import mmap
import os
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from . import engine, packet_query, packet_view
from .decode import app
from .decode.addr import ip_to_str, mac_to_str
from .errors import UsageError, capture_problem
from .findings import Finding
from .frames import CaptureFrames, Frames
from .rss import DEFAULT_QUEUES, RssModel
from .schema import IP, L_DST_MAC, L_SRC_MAC, L_VLAN, PacketBatch
from .site import EMPTY, Site, load_site

__all__ = ["open", "Capture"]

# Seconds Capture.dissect gives tshark: it dissects every frame of the file up to the one asked for.
DISSECT_TIMEOUT_S = 120.0
# Packets a batch of packets_frame holds at most: batches in flight (decoded columns, a mapped file's pages, what
# the allocator keeps of them) cost memory in proportion, and each batch a fixed time (bench/packets_frame.py).
FRAME_BATCH_PACKETS = 1 << 12
# A kept fixed-width column grows in blocks of this many bytes at most, each its own memory map: the table is
# made a block at a time, so it holds one block twice, not a column.
BLOCK_BYTES = 4 << 20
# Time bins a notebook figure (plot.rate, plot.rss_queues) draws at most: a bin width asked of a capture of years
# must not allocate billions of them; a million is more than a screen's pixels.
PLOT_BINS_MAX = 1_000_000

def _own_memory(nbytes: int) -> np.ndarray:
    """`nbytes` bytes in an anonymous private memory map of their own, whose pages go back to the system when
    it is freed; from the allocator where the platform has no such maps."""
    if hasattr(mmap, "MAP_PRIVATE"):
        return np.frombuffer(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE), dtype=np.uint8)
    return np.empty(nbytes, dtype=np.uint8)


class _Blocks:
    """A column of fixed-width values appended batch by batch, joined at the end into one array.

    The values go into blocks that are anonymous memory maps of their own (up to BLOCK_BYTES, growing from
    the first batch's size), so a block freed returns its pages at once, whatever the allocator keeps; the
    join copies them into the column a block at a time, freeing each as it is copied: it holds one block
    twice, not the column (per-batch pieces, freed into holes among the string pieces, stayed resident).
    """

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        self.blocks: list[np.ndarray] = []
        self.used = 0           # rows filled in the last block
        self.rows = 0

    def append(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=self.dtype)
        at = 0
        while at < len(values):
            if not self.blocks or self.used == len(self.blocks[-1]):
                rows = min(BLOCK_BYTES // self.dtype.itemsize, max(len(values) - at, self.rows, 1))
                self.blocks.append(_own_memory(rows * self.dtype.itemsize).view(self.dtype))
                self.used = 0
            block = self.blocks[-1]
            n = min(len(block) - self.used, len(values) - at)
            block[self.used:self.used + n] = values[at:at + n]
            self.used += n
            at += n
        self.rows += len(values)

    def join(self, dtype=None) -> np.ndarray:
        """The column (as `dtype`, default its own); the blocks are gone after."""
        out = np.empty(self.rows, dtype=dtype or self.dtype)
        at = 0
        while self.blocks:
            block = self.blocks.pop(0)
            n = min(len(block), self.rows - at)
            out[at:at + n] = block[:n]
            at += n
            del block
        return out


class _Datetimes:
    """A kept datetime column: its int64 nanoseconds in blocks, the dtype (UTC) given back without a copy."""

    def __init__(self, first):
        self.dtype = first.dtype
        self.values = _Blocks(np.int64)

    def append(self, array) -> None:
        self.values.append(array.asi8)

    def join(self):
        return pd.array(self.values.join().view(f"M8[{self.dtype.unit}]"), copy=False).view(self.dtype)


class _Masked:
    """A kept nullable integer or boolean column: values and mask in blocks."""

    def __init__(self, first):
        self.kind = type(first)
        self.values = _Blocks(first.dtype.numpy_dtype)
        self.mask = _Blocks(bool)

    def append(self, array) -> None:
        self.values.append(array.to_numpy(dtype=self.values.dtype, na_value=0))
        self.mask.append(array.isna())

    def join(self):
        return self.kind(self.values.join(), self.mask.join())


class _Categories:
    """A kept categorical column: the union of the batches' categories in order of appearance (as pandas'
    union_categoricals), each batch's codes mapped onto it into blocks, as narrow as the union allows."""

    def __init__(self, first):
        self.categories: list = []
        self.index: dict = {}
        self.codes = _Blocks(np.int8)

    def append(self, array) -> None:
        for category in array.categories:
            if category not in self.index:
                self.index[category] = len(self.categories)
                self.categories.append(category)
        need = _codes_dtype(len(self.categories))
        if need.itemsize > self.codes.dtype.itemsize:     # more categories than the codes can number
            wider = _Blocks(need)
            wider.append(self.codes.join())
            self.codes = wider
        mapping = np.array([self.index[c] for c in array.categories] + [-1], dtype=self.codes.dtype)
        self.codes.append(mapping[array.codes])     # code -1 (<NA>) picks the last entry, -1

    def join(self):
        codes = self.codes.join(_codes_dtype(len(self.categories)))
        return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(self.categories))


def _codes_dtype(categories: int) -> np.dtype:
    """The narrowest codes pandas gives a categorical of that many categories."""
    return np.dtype(np.int8 if categories < 1 << 7 else np.int16 if categories < 1 << 15 else np.int32)


class _Pieces:
    """A kept column of any other type (strings): its pieces, joined by pandas at the end; Arrow strings stay
    in their chunks, uncopied."""

    def __init__(self, first):
        self.pieces: list = []

    def append(self, array) -> None:
        self.pieces.append(array)

    def join(self):
        pieces = self.pieces
        self.pieces = []
        return type(pieces[0])._concat_same_type(pieces) if len(pieces) > 1 else pieces[0]


def _kept(first):
    """How a column like `first` (one batch's pandas array) is kept until the table is made."""
    if isinstance(first.dtype, pd.DatetimeTZDtype):
        return _Datetimes(first)
    if isinstance(first, (pd.arrays.IntegerArray, pd.arrays.BooleanArray)):
        return _Masked(first)
    if isinstance(first, pd.Categorical):
        return _Categories(first)
    return _Pieces(first)


class _PacketColumns:
    """Consumer that keeps the packet table's columns `names` of every batch, only the rows `where` keeps (a
    packet_query.Where, or a callable from a batch's frame to a boolean mask): one batch's columns at a time
    are built, so memory holds what is kept.

    The engine reads for it in batches of FRAME_BATCH_PACKETS, so what is in flight (decoded batches, the
    capture's mapped pages) stays small beside what is kept. Fixed-width columns are kept in blocks of their
    own memory (_Blocks), string columns as their batches' Arrow chunks; the table is made one column at a
    time, each from its blocks or chunks without a second copy of the table (bench/packets_frame.py says what
    the peak is made of)."""

    needs_fingerprint = False

    def __init__(self, rss: RssModel, names, where=None):
        self.rss = rss
        self.names = list(names)
        self.where = where
        built = self.names
        if isinstance(where, packet_query.Where):
            built = list(dict.fromkeys([*self.names, *where.columns]))
        self.built = built
        self.needs_fingerprint = "fingerprint" in built
        self.kept: dict[str, object] = {}
        self.rows = 0

    def update(self, batch: PacketBatch) -> None:
        extra = {"rss_queue": self.rss.queue(batch)} if "rss_queue" in self.built else None
        arrays = packet_view.arrays_of(packet_view.batch_columns(batch, self.built, extra), self.built)
        if self.where is not None:
            part = pd.DataFrame(arrays, copy=False)
            # a comparison with a field the packet lacks is <NA>: not kept
            keep = self.where.mask(part) if isinstance(self.where, packet_query.Where) else \
                pd.array(self.where(part), dtype="boolean").fillna(False).to_numpy(dtype=bool)
            arrays = {name: arrays[name][keep] for name in self.names}
        for name in self.names:
            if name not in self.kept:
                self.kept[name] = _kept(arrays[name])
            self.kept[name].append(arrays[name])
        self.rows += len(arrays[self.names[0]])

    def frame(self) -> pd.DataFrame:
        if not self.rows:
            empty = {name: np.zeros(0, dtype=np.uint64) for name in packet_view.sources(self.names) | {"rss_queue"}}
            return packet_view.frame_of(empty, self.names)
        return pd.DataFrame({name: self.kept.pop(name).join() for name in self.names}, copy=False)


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


def _findings_frame(findings: list[Finding]) -> pd.DataFrame:
    columns = ["rule", "severity", "confidence", "rule_severity", "title", "msg", "identifier", "first_seen",
               "last_seen", "n", "src_ip", "dest_ip", "src_port", "dest_port", "proto", "community_id", "place",
               "evidence", "confidence_basis", "remediation", "incident_id"]
    rows = [{k: getattr(f, k) for k in columns} for f in findings]
    for row in rows:    # the basis as findings.json has it: records of level, why and factor
        row["confidence_basis"] = [b.to_json() for b in row["confidence_basis"]]
    frame = pd.DataFrame(rows, columns=columns)
    for name in ("first_seen", "last_seen"):
        frame[name] = pd.to_datetime(frame[name].astype("Int64"), unit="ns", utc=True)
    for name in ("rule", "severity", "confidence", "rule_severity", "title", "msg", "identifier", "src_ip", "dest_ip",
                 "proto", "community_id", "place", "remediation", "incident_id"):
        frame[name] = frame[name].astype("string")
    for name in ("src_port", "dest_port"):
        frame[name] = frame[name].astype("UInt16")
    frame["n"] = frame["n"].astype("int64")
    return frame


def _incidents_frame(incidents) -> pd.DataFrame:
    """One row per incident (detector.incidents.Incident), in findings.json's order: id, severity, title, the
    root cause's rule and identifier, the rules of its findings (root cause first), how many, its span, and the
    three-line summary."""
    columns = ["id", "severity", "title", "root_cause", "root_identifier", "rules", "findings", "first_seen",
               "last_seen", "summary"]
    rows = [{"id": i.id, "severity": i.severity, "title": i.title, "root_cause": i.root_cause.rule,
             "root_identifier": i.root_cause.identifier, "rules": [f.rule for f in i.findings],
             "findings": len(i.findings), "first_seen": i.first_seen, "last_seen": i.last_seen,
             "summary": i.summary} for i in incidents]
    frame = pd.DataFrame(rows, columns=columns)
    for name in ("first_seen", "last_seen"):
        frame[name] = pd.to_datetime(frame[name].astype("Int64"), unit="ns", utc=True)
    for name in ("id", "severity", "title", "root_cause", "root_identifier", "summary"):
        frame[name] = frame[name].astype("string")
    frame["findings"] = frame["findings"].astype("int64")
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
        self._analysis = None       # the last analysis.Analysis: its detectors draw finding(i).plot()
        self._app: dict[str, _AppColumns] = {}
        self._frames = CaptureFrames(self.paths)
        self._file_frames: list[int] | None = None     # frames per file, for dissect() across several files
        self.plot = _Plots(self)

    def __repr__(self) -> str:
        return f"Capture({', '.join(self.paths)})"

    @property
    def packets(self) -> pd.DataFrame:
        """One row per packet, every decoded column (`describe()` says what each is): read in one pass, kept."""
        if self._packets is None:
            self._packets = self.packets_frame()
        return self._packets

    def packets_frame(self, columns=None, where=None) -> pd.DataFrame:
        """The packet table's `columns` (default all) of the packets `where` keeps, read batch by batch so
        that memory holds only what is asked for.

        `where` is a pandas query string over any packet columns (`"proto == 'tcp' and dest_port == 443"`;
        the columns it names need not be among `columns`; `@name` is a variable of the caller), read before
        the capture is (detector.packet_query: names of text columns compared in any case, a number as its
        name, `proto == 6` as `proto == 'tcp'`), or a callable from a batch's frame of `columns` to a boolean
        mask. A column the table does not have, here or in `where`, raises QueryError (a ValueError) naming it
        and the column that holds what was meant (Wireshark's `tcp.port`, `ip.src`, ... included)."""
        names = packet_view.check_names(packet_view.COLUMNS if columns is None else
                                        ([columns] if isinstance(columns, str) else columns))
        if isinstance(where, str):
            scope = {}
            if "@" in where:    # the caller's variables, as DataFrame.query sees them
                caller = sys._getframe(1)
                scope = {**caller.f_globals, **caller.f_locals}
            where = packet_query.compile_where(where, scope)
        elif where is not None and not callable(where):
            raise UsageError("where: a query string or a callable")
        consumer = _PacketColumns(RssModel(queues=DEFAULT_QUEUES), names, where)
        engine.run(self.paths, [consumer], label="packets", batch_packets=FRAME_BATCH_PACKETS)
        return consumer.frame()

    def has(self, layer: str) -> pd.Series:
        """Boolean per packet of `packets`: whether it carries `layer` (packet_view.LAYERS: "tcp", "vlan",
        "arp", "tunnel", "truncated", ...)."""
        if layer not in packet_view.LAYERS:
            raise UsageError(f"no layer '{layer}' (known: {', '.join(packet_view.LAYERS)})")
        layers = self.packets["layers"].to_numpy(dtype=np.uint32)
        return pd.Series((layers & np.uint32(packet_view.LAYERS[layer])) != 0, name=layer)

    @staticmethod
    def describe() -> pd.DataFrame:
        """What each packet column is: dtype, unit, when it is <NA>, description."""
        return packet_view.describe()

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

    def frames(self, numbers) -> Frames:
        """The frames numbered `numbers` (tshark's frame.number: from 1, continuing across files), in that
        order, each read alone at its offset: `.data` (bytes as captured), `.packet` (scapy), time, lengths,
        link type, interface. A number the capture does not have raises UsageError."""
        return self._frames.frames(numbers)

    def write_pcap(self, frames, path) -> str:
        """Write `frames` (Frames, or frame numbers) to `path` for Wireshark, bytes, lengths, link types and
        times (ns) as captured, in the order given; returns the format written: "pcap", or "pcapng" when
        the frames come from interfaces or link types that differ (Wireshark reads either by its content,
        whatever the file's name)."""
        return self._frames.write(frames, path)

    def finding(self, i: int = 0) -> CaptureFinding:
        """Row `i` of `.findings` (0: the most severe) as a CaptureFinding: its fields, `plot()`, `frames()`."""
        if self._findings is None:
            self.analyze()
        if not -len(self._findings) <= i < len(self._findings):
            count = len(self._findings)
            raise UsageError(f"no finding {i}: " + (f"the findings are rows 0 to {count - 1} of .findings" if count
                                                    else "no rule fired on this capture"))
        return CaptureFinding(self, self._findings[i])

    def dissect(self, frame: int, timeout_s: float = DISSECT_TIMEOUT_S):
        """Wireshark's dissection of frame `frame` (1-based, the `frame` column of `packets`, tshark's
        frame.number): the pyshark Packet tshark makes of it, dissected after the frames before it in its file
        as Wireshark would (TCP analysis, retransmissions), its Expert Info in each layer's `_ws.expert` fields.

        Needs tshark (Debian package tshark). Raises UsageError without it, for a frame the capture does not
        have, or when tshark fails or takes longer than `timeout_s` (it reads the file up to the frame).
        """
        from .report import dissect

        if isinstance(frame, bool) or not isinstance(frame, (int, np.integer)) or frame < 1:
            raise UsageError(f"dissect: a frame number from 1, not {frame!r}")
        tshark = dissect.tshark_path()
        if tshark is None:
            raise UsageError(f"dissect: {dissect.INSTALL_HINT}")
        path, number = self._file_of(int(frame))
        try:
            found = dissect.dissect_file(tshark, path, number, display_filter=f"frame.number == {number}",
                                         timeout=timeout_s)
        except dissect.DissectError as exc:
            raise UsageError(f"dissect: {exc}") from None
        if not found:
            raise UsageError(f"dissect: {path} has no frame {number}")
        return found[0].packet

    def _file_of(self, frame: int) -> tuple[str, int]:
        """(file, frame number within it) of the capture's frame `frame` (frames count on across files)."""
        if len(self.paths) == 1:
            return self.paths[0], frame
        if self._file_frames is None:
            self._file_frames = [c["packets"] for c in engine.run(self.paths, [], label="counting").captures]
        before = 0
        for path, count in zip(self.paths, self._file_frames):
            if frame <= before + count:
                return path, frame - before
            before += count
        raise UsageError(f"dissect: the capture has {before:,} frames, not {frame:,}")

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
    def incidents(self) -> pd.DataFrame:
        """The findings grouped into incidents (detector.incidents: declared relations, shared entities, time),
        as findings.json lists them; `findings.incident_id` says which finding belongs to which."""
        if self._findings is None:
            self.analyze()
        return _incidents_frame(self._analysis.incidents if self._analysis is not None else [])

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
        self._analysis = result
        self._flows = result.flows
        self._findings = result.findings
        self._failures = [failure.to_json() for failure in result.failures]
        for failure in result.failures:
            warnings.warn(f"{failure.summary()} -- a bug in detector: this rule did not run to the end and its "
                          "findings may be missing (the other rules' are here); Capture.failures has the "
                          "traceback", RuntimeWarning, stacklevel=2)
        return _findings_frame(self._findings)


class CaptureFinding:
    """One finding of a Capture: the Finding's fields (`rule`, `msg`, `evidence`, ...) and what a notebook does
    with it next."""

    def __init__(self, capture: Capture, finding: Finding):
        self.capture = capture
        self.finding = finding

    def __getattr__(self, name):
        return getattr(self.finding, name)

    def __repr__(self) -> str:
        return f"{self.finding.severity} {self.finding.rule}: {self.finding.msg}"

    @property
    def evidence_frames(self) -> list[int]:
        """The frame numbers the detector kept as evidence (what `analyze` writes to the evidence pcap)."""
        return [int(n) for n in self.finding.evidence.get("evidence_frames", [])]

    def frames(self) -> Frames:
        """The evidence frames (Capture.frames)."""
        return self.capture.frames(self.evidence_frames)

    def write_pcap(self, path) -> str:
        """The evidence frames written to `path` (Capture.write_pcap), as `analyze` writes its evidence pcap."""
        return self.capture.write_pcap(self.frames(), path)

    def plot(self):
        """What report.html draws for this finding, as one matplotlib Figure: packets per second with the
        finding's interval shaded, then its rule's own figures (the report's code, fed by one more read of the
        capture). None for a capture with no packets on the time axis."""
        from .report.evidence import collect, rule_figures, time_bins
        from .report.render import finding_figure

        result = self.capture._analysis
        bins = time_bins(result.stats.first_ns, result.stats.last_ns)
        detectors = [det for det in result.detectors if det.rule_id == self.finding.rule]
        figures = rule_figures(detectors, [self.finding], bins)
        _records, series = collect(self.capture.paths, [], bins, figures)
        return finding_figure(self.finding, series, figures, self.capture.flows)


class _Plots:
    """Figures of a Capture (matplotlib; each returns the Axes it drew on). Time runs on a date axis in UTC,
    its ticks as concise as the span allows (a second's read 00:00:01, a multi-year capture's 2021, 2022: never
    seconds counted in 1e8); legends stay inside the figure."""

    def __init__(self, capture: Capture):
        self._capture = capture

    @staticmethod
    def _axes(ax):
        if ax is None:
            import matplotlib.pyplot as plt

            # the tight layout keeps the axis labels and tick labels inside the figure at each draw; a user's
            # own fig.tight_layout() after it is the same engine (the constrained one refuses it with a colorbar)
            _fig, ax = plt.subplots(figsize=(9, 3), layout="tight")
        return ax

    @staticmethod
    def _date_axis(ax) -> None:
        """Dates (UTC) on the x axis: matplotlib's concise formatter, its date written once beside the ticks."""
        import matplotlib.dates as mdates

        locator = mdates.AutoDateLocator(tz="UTC")
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz="UTC"))
        ax.set_xlabel("time (UTC)")

    @staticmethod
    def _dates(start_ns: int, offsets_ns: np.ndarray) -> np.ndarray:
        """Times `offsets_ns` after `start_ns` as datetime64 (UTC, as the table's times), for the date axis."""
        return (np.int64(start_ns) + np.asarray(offsets_ns, dtype=np.int64)).astype("datetime64[ns]")

    def _report_bins(self, times: pd.Series):
        """The report's time axis over `times` (report.evidence.time_bins: whole milliseconds, at most 600 bins):
        what timeline() and rate() draw on by default, so a second shows one rate in both and in the report."""
        from .report.evidence import time_bins

        ns = times.astype("int64").to_numpy()
        return time_bins(int(ns.min()), int(ns.max()))

    @staticmethod
    def _rate_label(width_s: float) -> str:
        width = f"{width_s * 1e3:,.6g} ms" if width_s < 1 else f"{width_s:,.6g} s"
        return f"packets/s ({width} bins)"

    def timeline(self, bins: int | None = None, ax=None):
        """Packets per second over the capture, with each finding's first-to-last interval shaded (a colour and
        a legend entry per rule): on the report's time axis (its traffic panel, the same bins; `bins`: that many
        equal bins instead). The y label says the bin width: a rate over 10 ms bins peaks higher than one over
        1 s bins."""
        ax = self._axes(ax)
        packets = self._capture.packets
        if len(packets) == 0:
            return ax
        ns = packets["time"].astype("int64").to_numpy()
        start = int(ns.min())
        if bins is None:
            axis = self._report_bins(packets["time"])
            width_ns = axis.bin_ns
            counts = axis.counts(ns)
            lefts_ns = np.arange(axis.count, dtype=np.int64) * axis.bin_ns
        else:
            counts, edges = np.histogram(ns - start, bins=bins)
            width_ns = max(int(edges[1] - edges[0]), 1)
            lefts_ns = edges[:-1].astype(np.int64)
        width_s = width_ns / 1e9
        ax.step(self._dates(start, lefts_ns), counts / width_s, where="post", lw=1, color="#333", label="packets")
        colors = {}
        for _, f in self._capture.findings.iterrows():
            if pd.isna(f["first_seen"]):
                continue
            rule = str(f["rule"])
            new = rule not in colors
            colors.setdefault(rule, f"C{len(colors) % 10}")
            first, last = f["first_seen"].value - start, f["last_seen"].value - start + width_ns
            ax.axvspan(*self._dates(start, [first, last]), alpha=0.25, color=colors[rule],
                       label=rule if new else None)
        self._date_axis(ax)
        ax.set_ylabel(self._rate_label(width_s))
        if colors:
            ax.legend(title="findings", fontsize="small", loc="upper right", ncols=min(len(colors) + 1, 4))
        return ax

    def rate(self, by: str | None = None, bin_s: float | None = None, top: int = 8, ax=None):
        """Packets per second over time, one line per value of the packet column `by` ("src_mac", "dest_ip",
        "proto", "vlan", ...; None: all packets): the `top` busiest values, the rest summed as "other", packets
        without the field left out. Reads only the time and `by` columns (Capture.packets_frame). `bin_s`: the
        bin width in seconds (at most PLOT_BINS_MAX bins over the capture); None: the report's and
        timeline()'s, so the same second shows the same rate."""
        ax = self._axes(ax)
        if (bin_s is not None and bin_s <= 0) or top < 1:
            raise UsageError("rate: bin_s must be > 0 and top >= 1")
        columns = ["time"] if by is None else ["time", by]
        frame = self._capture.packets_frame(columns) if self._capture._packets is None \
            else self._capture._packets[packet_view.check_names(columns)]
        if len(frame) == 0:
            return ax
        # the axis starts at the capture's first packet, as timeline()'s and the report's
        start = frame["time"].min()
        span_ns = frame["time"].max().value - start.value
        if bin_s is None:
            bin_s = self._report_bins(frame["time"]).width_s
        bin_ns = max(round(float(bin_s) * 1e9), 1)        # whole nanoseconds, as the report's bins count
        if span_ns // bin_ns + 1 > PLOT_BINS_MAX:
            raise UsageError(f"rate: bin_s={bin_s:g} makes {span_ns // bin_ns + 1:,} bins over this capture's "
                             f"{span_ns / 1e9:,.0f} s; at most {PLOT_BINS_MAX:,}: a wider bin_s")
        if by is not None:
            frame = frame[frame[by].notna()]
        if len(frame) == 0:
            return ax
        bins = (frame["time"].astype("int64").to_numpy() - start.value) // bin_ns
        x = self._dates(start.value, np.arange(bins.max() + 1, dtype=np.int64) * bin_ns)
        if by is None:
            series = {"all packets": np.bincount(bins, minlength=len(x))}
        else:
            values = frame[by].astype(str).to_numpy()
            names, codes = np.unique(values, return_inverse=True)
            totals = np.bincount(codes, minlength=len(names))
            busiest = np.argsort(-totals, kind="stable")[:top]
            series = {str(names[k]): np.bincount(bins[codes == k], minlength=len(x)) for k in busiest}
            rest = ~np.isin(codes, busiest)
            if rest.any():
                series["other"] = np.bincount(bins[rest], minlength=len(x))
        for label, counts in series.items():
            ax.step(x, counts / bin_s, where="post", lw=1, label=label)
        if by is not None:
            ax.legend(title=by, fontsize="small", loc="upper right", ncols=min(len(series), 4))
        self._date_axis(ax)
        ax.set_ylabel(self._rate_label(bin_s))
        return ax

    def rss_queues(self, bin_ms: float = 100.0, ax=None):
        """Heat map of each receive queue's share of the packets per time bin of `bin_ms` (RSS model, default
        key; at most PLOT_BINS_MAX bins over the capture)."""
        import matplotlib.dates as mdates

        ax = self._axes(ax)
        if bin_ms <= 0:
            raise UsageError("rss_queues: bin_ms must be > 0")
        packets = self._capture.packets
        ip = packets[packets["rss_queue"].notna()]
        if len(ip) == 0:
            return ax
        ns = ip["time"].astype("int64").to_numpy()
        start = int(ns.min())
        bin_ns = max(round(bin_ms * 1e6), 1)
        count = (int(ns.max()) - start) // bin_ns + 1
        if count > PLOT_BINS_MAX:
            raise UsageError(f"rss_queues: bin_ms={bin_ms:g} makes {count:,} bins over this capture; at most "
                             f"{PLOT_BINS_MAX:,}: a wider bin_ms")
        bins = (ns - start) // bin_ns
        queue = ip["rss_queue"].to_numpy(dtype=np.int64)
        counts = np.zeros((count, DEFAULT_QUEUES))
        np.add.at(counts, (bins, queue), 1)
        share = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
        left, right = mdates.date2num(self._dates(start, [0, count * bin_ns]))
        image = ax.imshow(share.T, aspect="auto", origin="lower", vmin=0, vmax=1, interpolation="nearest",
                          extent=(left, right, -0.5, DEFAULT_QUEUES - 0.5))
        ax.figure.colorbar(image, ax=ax, label="share of packets")
        self._date_axis(ax)
        ax.set_ylabel("receive queue")
        return ax

    def segments(self, flow, mtu: int | None = None, ax=None):
        """Payload size of each packet of one flow (a row index of .flows or a community_id) over time, vs the
        MSS/MTU."""
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
        import matplotlib.dates as mdates

        for mask, label in ((forward.fillna(False), "src -> dest"), (backward.fillna(False), "dest -> src")):
            part = packets[mask.to_numpy(dtype=bool)]
            ax.plot(self._dates(0, part["time"].astype("int64").to_numpy()), part["payload_len"].astype("float"),
                    ".", label=label)
        first = mdates.date2num(self._dates(row["first_seen"].value, [0]))[0]
        for name in ("src_mss", "dest_mss"):
            if int(row[name]):
                ax.axhline(int(row[name]), ls="--", lw=1, color="grey")
                ax.annotate(f"{name} {int(row[name])}", (first, int(row[name])), fontsize=8)
        if mtu:
            ax.axhline(mtu - 40, ls=":", color="#d33", label=f"MTU {mtu} - 40")
        self._date_axis(ax)
        ax.set_ylabel("payload bytes")
        ax.legend(fontsize="small", loc="best")
        return ax


def open(path, *more, site=None) -> Capture:
    """Open one capture, or several read as one continuous capture. Reads nothing until a table is used.

    `site` is a site file (a path, read and checked now: a bad one raises its RuleError) or a
    detector.site.Site; None: none.
    """
    paths = [path, *more]
    for p in paths:
        problem = capture_problem(p) or (None if os.path.isfile(p) else "not a regular file")
        if problem:
            raise UsageError(f"{p}: {problem}")
    return Capture([Path(p) for p in paths], site if isinstance(site, Site) else load_site(site))

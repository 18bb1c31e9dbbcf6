"""The shape every application table shares: its fields, where a kernel writes them, the table it becomes.

A protocol module declares its table as a `Spec`: fields (`Field`: dtype,
validity bit, meaning with units), child tables (`Child`: fields and a cap
per message), which rows of a batch are candidates, and the compiled pass
that parses them. As with the packet columns (detector.decode.columns), the
kernel writes into one 2-D array per dtype, a row per field (`Layout`), so
its signature stays small whatever the number of fields; the rows become
the table's columns without a copy. Child elements are written into `cap`
slots per message and compacted afterwards, so a kernel never allocates.

Bits of `valid` (uint32): one per field, numbered by the protocol module
(0-29); `TRUNCATED` and `MORE` are common to every table.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...schema import IP, L_FRAG, L_PAYLOAD, L_UDP, PacketBatch

GROUP_DTYPES = (np.uint8, np.uint16, np.uint32, np.uint64)
NULLABLE = {np.dtype(np.uint8): "UInt8", np.dtype(np.uint16): "UInt16", np.dtype(np.uint32): "UInt32",
            np.dtype(np.uint64): "UInt64", np.dtype(np.int64): "Int64"}
TRUNCATED = np.uint32(1 << 31)   # the message (or child element) was cut short or lied about a length
MORE = np.uint32(1 << 30)        # the message had more child elements than its table's cap
IPV4_MAPPED = np.uint64(0xFFFF_0000_0000)   # the low half of ::ffff:0.0.0.0: an IPv4 address in the schema's halves


@dataclass(frozen=True)
class Field:
    dtype: type
    bit: int            # its validity bit in `valid` (a power of two); 0: valid in every entry
    doc: str            # what it is, with units
    # how a DataFrame shows it: "ip" for the halves NAME_hi/NAME_lo of an address (the schema's IPv4-mapped
    # 128 bits), one text column NAME; "mac" for a 48-bit MAC, as text; "" as the number it is
    kind: str = ""


@dataclass(frozen=True)
class Layout:
    """Where each field of a table lives while a kernel fills it: row `row[name]` of the array of its dtype."""

    fields: dict[str, Field]
    names: dict[type, tuple[str, ...]] = field(init=False)
    row: dict[str, int] = field(init=False)

    def __post_init__(self):
        names = {dtype: tuple(n for n, f in self.fields.items() if f.dtype is dtype) for dtype in GROUP_DTYPES}
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "row", {n: group.index(n) for group in names.values() for n in group})

    def allocate(self, n: int) -> tuple[np.ndarray, ...]:
        """Zeroed (fields, n) arrays, one per dtype of GROUP_DTYPES: a field nobody writes stays masked at 0."""
        return tuple(np.zeros((max(len(self.names[dtype]), 1), n), dtype=dtype) for dtype in GROUP_DTYPES)

    def columns(self, groups: tuple[np.ndarray, ...]) -> dict[str, np.ndarray]:
        """Field name -> its column, a view of the arrays `allocate` returned."""
        return {name: groups[k][self.row[name]] for k, dtype in enumerate(GROUP_DTYPES)
                for name in self.names[dtype]}


def with_valid(fields: dict[str, Field]) -> dict[str, Field]:
    """`fields` plus the `valid` bits every table has (uint32, always present)."""
    return {**fields, "valid": Field(np.uint32, 0, "validity bits of the fields; TRUNCATED, MORE")}


@dataclass(frozen=True)
class Child:
    """A table of repeated elements: at most `cap` per message; its kernel slots are parent * cap + k."""

    name: str
    fields: dict[str, Field]
    cap: int
    doc: str

    @property
    def layout(self) -> Layout:
        return Layout(with_valid(self.fields))


@dataclass
class AppTable:
    """One application table of one batch: `cols` (field name -> array, one entry per message)."""

    name: str
    fields: dict[str, Field]
    cols: dict[str, np.ndarray]
    children: dict[str, AppTable] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.cols["valid"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    def valid(self, name: str) -> np.ndarray:
        """Boolean mask of the entries where field `name` carries a value."""
        bit = self.fields[name].bit if name in self.fields else 0
        if not bit:
            return np.ones(len(self), dtype=bool)
        return (self.cols["valid"] & np.uint32(bit)) != 0

    @property
    def truncated(self) -> np.ndarray:
        return (self.cols["valid"] & TRUNCATED) != 0

    @property
    def more(self) -> np.ndarray:
        return (self.cols["valid"] & MORE) != 0

    def take(self, index: np.ndarray) -> AppTable:
        """The entries at `index` (children keep only theirs, `parent` renumbered)."""
        index = np.asarray(index, dtype=np.int64)
        cols = {name: col[index] for name, col in self.cols.items()}
        children = {}
        for name, child in self.children.items():
            new_parent = np.full(len(self), -1, dtype=np.int64)
            new_parent[index] = np.arange(len(index))
            keep = np.flatnonzero(new_parent[child.cols["parent"]] >= 0)
            kept = child.take(keep)
            kept.cols["parent"] = new_parent[kept.cols["parent"]]
            children[name] = kept
        return AppTable(self.name, self.fields, cols, children)

    def to_frame(self):
        """A pandas DataFrame: masked fields as <NA> (nullable integers), `truncated` and `more` as booleans."""
        import pandas as pd

        from ..addr import ip_to_str, mac_to_str

        out = {}
        for name, col in self.cols.items():
            kind = self.fields[name].kind if name in self.fields else ""
            if name == "valid" or (kind == "ip" and name.endswith("_lo")):
                continue
            bit = self.fields[name].bit if name in self.fields else 0
            if kind:
                texts = (ip_to_str(col, self.cols[name[:-3] + "_lo"]) if kind == "ip" else mac_to_str(col))
                out[name[:-3] if kind == "ip" else name] = pd.array(np.where(self.valid(name), texts, None),
                                                                    dtype="string")
            elif bit:
                values = pd.array(col, dtype=NULLABLE[col.dtype])
                values[~self.valid(name)] = pd.NA
                out[name] = values
            else:
                out[name] = col
        out["truncated"] = self.truncated
        if self.children:
            out["more"] = self.more
        return pd.DataFrame(out)


def candidate_rows(batch: PacketBatch, mask: np.ndarray) -> np.ndarray:
    """Rows of `mask` that carry a whole first fragment's worth of IP payload: non-first fragments are out."""
    layers = batch["layers"]
    first = ((layers & np.uint32(L_FRAG)) == 0) | (batch["frag_offset"] == 0)
    return np.flatnonzero(mask & ((layers & np.uint32(IP)) != 0) & first)


def udp_port_mask(batch: PacketBatch, ports) -> np.ndarray:
    """UDP rows with a payload whose source or destination port is one of `ports`."""
    layers = batch["layers"]
    udp = (layers & np.uint32(L_UDP | L_PAYLOAD)) == np.uint32(L_UDP | L_PAYLOAD)
    return udp & (np.isin(batch["dest_port"], ports) | np.isin(batch["src_port"], ports))


def service_port(batch: PacketBatch, ports, rows: np.ndarray | None = None) -> np.ndarray:
    """The port of `ports` each row (of `rows`, default all) speaks: its destination port if that is one,
    else its source port if that is one, else 0 (uint16). A message's kind (request or reply, RIP or RIPng)
    depends on it."""
    dport, sport = batch["dest_port"], batch["src_port"]
    if rows is not None:
        dport, sport = dport[rows], sport[rows]
    return np.where(np.isin(dport, ports), dport, np.where(np.isin(sport, ports), sport, 0)).astype(np.uint16)


UDP_LENGTH_FIELD = 4              # RFC 768: source port, destination port, length, checksum
UDP_HEADER_BYTES = 8
JUMBO_UDP_LENGTH = 0              # RFC 2675 section 4: a jumbogram's UDP length field is 0


def udp_length_differs(batch: PacketBatch, rows: np.ndarray) -> np.ndarray:
    """Which UDP datagrams of `rows` (their UDP header decoded) have a UDP length field other than the length
    their IP header gives them (a receiver's stack trims the datagram to the shorter or drops it: malformed).
    A row without a decoded payload, or a jumbogram, is not judged."""
    layers = batch["layers"][rows]
    udp = (layers & np.uint32(L_UDP | L_PAYLOAD)) == np.uint32(L_UDP | L_PAYLOAD)
    at = batch["offset"][rows] + batch["l4_off"][rows].astype(np.int64) + UDP_LENGTH_FIELD
    data = batch.data
    at = np.where(udp, at, 0)
    field = (data[at].astype(np.int64) << 8) | data[at + 1].astype(np.int64)
    said = batch["payload_len"][rows].astype(np.int64) + UDP_HEADER_BYTES
    jumbo = (field == JUMBO_UDP_LENGTH) & (said > 0xFFFF)
    return udp & ~jumbo & (field != said)


def message_bounds(batch: PacketBatch, rows: np.ndarray, start_column: str) -> tuple[np.ndarray, np.ndarray,
                                                                                        np.ndarray]:
    """(start, captured end, claimed end) of each candidate's message as offsets into the batch's buffer.

    The message starts at `start_column` (l4_off for a message carried by IP
    directly, payload_off for one carried by UDP) and ends with its carrier:
    the IP packet, or the UDP payload. The claimed end may lie past the
    captured bytes (a snapshot length); the captured end never does.
    """
    base = batch["offset"][rows]
    start = base + batch[start_column][rows].astype(np.int64)
    claimed = base + batch["l3_off"][rows].astype(np.int64) + batch["ip_len"][rows].astype(np.int64)
    if start_column == "payload_off":
        claimed = np.minimum(claimed, start + batch["payload_len"][rows].astype(np.int64))
    captured = np.minimum(claimed, base + batch["caplen"][rows].astype(np.int64))
    return start, np.maximum(captured, start), np.maximum(claimed, start)


def ip_endpoints(batch: PacketBatch, rows: np.ndarray) -> tuple[np.ndarray, ...]:
    """(family, src_hi, src_lo, dst_hi, dst_lo) of each candidate's IP header, contiguous, for a kernel.

    `family` is 4 or 6 (uint8); the addresses are the schema's halves (an
    IPv4 address IPv4-mapped), as a pseudo-header checksum or a message that
    depends on its carrier's addresses needs them.
    """
    family = np.where(batch["ip_version"][rows] == 4, 4, 6).astype(np.uint8)
    return (family, *(np.ascontiguousarray(batch[name][rows])
                      for name in ("src_ip_hi", "src_ip_lo", "dest_ip_hi", "dest_ip_lo")))


@dataclass(frozen=True)
class Spec:
    """How a protocol's table is built: `candidates(batch)` gives the rows, `parse` fills the arrays.

    `parse(batch, rows, groups, child_groups, counts)` runs the compiled pass:
    `groups` are the table's arrays (Layout.allocate of len(rows)),
    `child_groups[name]` those of each child (len(rows) * cap slots), and
    `counts[name]` (uint16, one per message) how many slots it filled.
    """

    name: str
    doc: str
    fields: dict[str, Field]
    candidates: Callable[[PacketBatch], np.ndarray]
    parse: Callable
    children: tuple[Child, ...] = ()

    @property
    def layout(self) -> Layout:
        return Layout(with_valid(self.fields))

    def build(self, batch: PacketBatch) -> AppTable:
        """The table of `batch`'s candidate rows."""
        rows = self.candidates(batch)
        n = len(rows)
        groups = self.layout.allocate(n)
        child_groups = {child.name: child.layout.allocate(n * child.cap) for child in self.children}
        counts = {child.name: np.zeros(n, dtype=np.uint16) for child in self.children}
        if n:
            self.parse(batch, rows, groups, child_groups, counts)
        return self._assemble(rows, batch["frame"][rows], groups, child_groups, counts)

    def empty(self) -> AppTable:
        """The table without entries (its columns and children, each of length 0)."""
        none = np.zeros(0, dtype=np.int64)
        return self._assemble(none, none, self.layout.allocate(0),
                              {child.name: child.layout.allocate(0) for child in self.children},
                              {child.name: np.zeros(0, dtype=np.uint16) for child in self.children})

    def _assemble(self, rows, frames, groups, child_groups, counts) -> AppTable:
        n = len(rows)
        layout = self.layout
        fields = {"row": Field(np.int64, 0, "the message's row in its batch"),
                  "frame": Field(np.int64, 0, "frame number (tshark frame.number)"), **with_valid(self.fields)}
        cols = {"row": rows.astype(np.int64), "frame": frames.astype(np.int64),
                **layout.columns(groups)}
        children = {}
        for child in self.children:
            count = np.minimum(counts[child.name], child.cap)
            slots = (np.arange(child.cap)[None, :] < count[:, None]).ravel()
            child_cols = {"parent": np.repeat(np.arange(n, dtype=np.int64), count),
                          **{name: col[slots] for name, col in child.layout.columns(child_groups[child.name]).items()}}
            child_fields = {"parent": Field(np.int64, 0, f"index of the message in table '{self.name}'"),
                            **with_valid(child.fields)}
            children[child.name] = AppTable(child.name, child_fields, child_cols)
        return AppTable(self.name, fields, cols, children)

"""Application side-tables: the control-plane protocols' fields, decoded over candidate rows only.

The packet columns (detector.schema) end at the transport header. The rules
of the control plane need more: a VRRP advertisement's virtual router and
addresses, a DHCP message's options, a RIP response's entries. Each such
protocol gets a table of its own, built per batch by a second compiled pass
over the rows that can carry it (its candidate rows: IP protocol 112, UDP to
port 520, ...), starting from the offsets the header decoder found, so
VLAN tags, PBB and tunnels are handled once, there.

A table (`AppTable`) is a struct of arrays, one entry per message:

- `row` (the message's row in its batch) and `frame` (its frame number);
- the protocol's fields, each with a bit in `valid`: a field is meaningful
  only where its bit is set, as the packet columns are masked by `layers`;
  a masked field holds 0, never a guess;
- `truncated`: the message was cut short by the snapshot length, or one of
  its lengths or counts ran past the message; the fields read before the
  damage keep their bits;
- repeated elements (VRRP addresses, RIP entries, ...) in child tables,
  linked to their message by `parent` (its index in the parent table) and
  capped per message (`more`: the message had more than the cap).

Tables are built only when asked for: `table(batch, name)` builds one on
first use and keeps it with the batch; a consumer that declares
`app_tables` (a tuple of names) has them built in the engine's decode
threads, beside the header decode. `TABLES` lists every table by name and
the module that builds it, imported only when the table is asked for.
"""
from __future__ import annotations

import importlib

from ...schema import PacketBatch
from .table import AppTable, Spec

__all__ = ["TABLES", "AppTable", "build", "spec", "table"]

# table name -> the module (in this package) whose SPEC builds it
TABLES: dict[str, str] = {
    "vrrp": "vrrp",
    "rip": "rip",
    "ospf": "ospf",
    "dhcp4": "dhcp4",
    "dhcp6": "dhcp6",
}


def spec(name: str) -> Spec:
    """The Spec of table `name`; KeyError naming the known tables for another name."""
    if name not in TABLES:
        raise KeyError(f"no application table '{name}' (known: {', '.join(sorted(TABLES))})")
    return importlib.import_module(f"{__name__}.{TABLES[name]}").SPEC


def table(batch: PacketBatch, name: str) -> AppTable:
    """Table `name` of `batch`: built on first use, then kept with the batch."""
    built = batch.app.get(name)
    if built is None:
        built = spec(name).build(batch)
        batch.app[name] = built
    return built


def build(batch: PacketBatch, names) -> PacketBatch:
    """`batch` with the tables `names` built (those it has already are kept)."""
    for name in names:
        table(batch, name)
    return batch

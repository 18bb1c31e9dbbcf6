"""Flow-table and address columns as findings name them: times in ns, addresses from the schema's halves.

Pure functions the rules and the shared models (detect.conntrack, detect.attempts...) read the flow table and
write their messages with; the rules import them from detect.columns.
"""
from __future__ import annotations

import ipaddress

import numpy as np


def ip_text(hi, lo) -> str:
    """An address from the two uint64 halves of the schema; IPv4-mapped ones in dotted form."""
    value = ipaddress.IPv6Address((int(hi) << 64) | int(lo))
    return str(value.ipv4_mapped) if value.ipv4_mapped is not None else str(value)


def ip_halves(text) -> tuple[int, int] | None:
    """The schema's (hi, lo) halves of an address text (IPv4 as IPv4-mapped IPv6); None if it is no address."""
    try:
        value = ipaddress.ip_address(text)
    except ValueError:
        return None
    number = int(value) | (0xFFFF << 32) if value.version == 4 else int(value)
    return number >> 64, number & 0xFFFFFFFFFFFFFFFF


def endpoint(address: str, port: int) -> str:
    """address:port, with an IPv6 address in brackets so the port stays readable."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def flow_time_ns(column) -> np.ndarray:
    """Flow-table times (datetimes, aware or naive UTC, or integer nanoseconds) as ns since the epoch."""
    import pandas as pd
    if pd.api.types.is_numeric_dtype(column):
        return column.to_numpy(np.int64)
    stamps = pd.to_datetime(column, utc=True)
    return ((stamps - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(1, "ns")).to_numpy(np.int64)

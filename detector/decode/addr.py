"""Address columns to text and back: IP (two uint64 halves) and MAC (uint64) values.

Formatting works per *unique* value: a batch of a million packets usually
holds a few thousand addresses, so the cost follows the address count, not
the packet count. IPv4 addresses are stored IPv4-mapped (::ffff:a.b.c.d) and
shown as dotted quads; IPv6 ones as Python's ipaddress compresses them
(RFC 5952).
"""
from __future__ import annotations

import ipaddress

import numpy as np

IP4_MAPPED_PREFIX = 0xFFFF    # bits 32..63 of the low half of ::ffff:0:0/96 (RFC 4291 section 2.5.5.2)


def _ip_text(hi: int, lo: int) -> str:
    if hi == 0 and lo >> 32 == IP4_MAPPED_PREFIX:
        v = lo & 0xFFFFFFFF
        return f"{v >> 24}.{(v >> 16) & 255}.{(v >> 8) & 255}.{v & 255}"
    return ipaddress.IPv6Address((hi << 64) | lo).compressed


def ip_to_str(hi, lo):
    """Text of one address (two ints) or of arrays of halves (an object array of str)."""
    if np.ndim(hi) == 0 and np.ndim(lo) == 0:
        return _ip_text(int(hi), int(lo))
    pairs = np.empty(np.shape(hi), dtype=[("hi", np.uint64), ("lo", np.uint64)])
    pairs["hi"] = hi
    pairs["lo"] = lo
    unique, inverse = np.unique(pairs.ravel(), return_inverse=True)
    texts = np.array([_ip_text(int(h), int(v)) for h, v in zip(unique["hi"], unique["lo"])], dtype=object)
    return texts[inverse].reshape(pairs.shape)


def str_to_ip(text: str) -> tuple[int, int]:
    """(hi, lo) of an IPv4 or IPv6 address in text; IPv4 becomes IPv4-mapped. Raises ValueError."""
    address = ipaddress.ip_address(text.strip())
    if address.version == 4:
        return 0, (IP4_MAPPED_PREFIX << 32) | int(address)
    value = int(address)
    return value >> 64, value & 0xFFFFFFFFFFFFFFFF


def _mac_text(value: int) -> str:
    return ":".join(f"{(value >> shift) & 255:02x}" for shift in range(40, -8, -8))


def mac_to_str(mac):
    """Text (aa:bb:cc:dd:ee:ff) of one MAC value or of an array of them (an object array of str)."""
    if np.ndim(mac) == 0:
        return _mac_text(int(mac))
    values = np.asarray(mac, dtype=np.uint64)
    unique, inverse = np.unique(values.ravel(), return_inverse=True)
    texts = np.array([_mac_text(int(v)) for v in unique], dtype=object)
    return texts[inverse].reshape(values.shape)

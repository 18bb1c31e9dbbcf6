"""Address columns to text and back: IP (two uint64 halves) and MAC (uint64) values.

Formatting works per *unique* value: a batch of a million packets usually
holds a few thousand addresses, so the cost follows the address count, not
the packet count. IPv4 addresses are stored IPv4-mapped (::ffff:a.b.c.d) and
shown as dotted quads; IPv6 ones as Python's ipaddress compresses them
(RFC 5952: lower-case hex, no leading zeros, the longest run of two or more
zero groups as "::", the first one on a tie). Columns are formatted by a
compiled kernel, single values in Python; the tests hold the two equal.
"""
from __future__ import annotations

import ipaddress

import numpy as np
from numba import njit

from ..cpu import kernel
from ..text import TextCodes

IP4_MAPPED_PREFIX = 0xFFFF    # bits 32..63 of the low half of ::ffff:0:0/96 (RFC 4291 section 2.5.5.2)


def _ip_text(hi: int, lo: int) -> str:
    if hi == 0 and lo >> 32 == IP4_MAPPED_PREFIX:
        v = lo & 0xFFFFFFFF
        return f"{v >> 24}.{(v >> 16) & 255}.{(v >> 8) & 255}.{v & 255}"
    return ipaddress.IPv6Address((hi << 64) | lo).compressed


# Longest text: eight groups of four hex digits and seven colons.
IP_TEXT_MAX = 39
# writable, as every array the kernel is called with: one compiled signature
_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8).copy()
_COLON, _DOT = ord(":"), ord(".")


@njit
def _group(hi, lo, g):
    """The g-th 16-bit group (0-7) of the address."""
    half = hi if g < 4 else lo
    return np.int64((half >> np.uint64(48 - 16 * (g % 4))) & np.uint64(0xFFFF))


@kernel("(u8[::1], u8[::1], u1[::1], u1[:, ::1], i8[::1])", nogil=True)
def _format_ips(hi, lo, hex_digits, out, lengths):
    """Text of each address into the rows of `out` (n x IP_TEXT_MAX), its length into `lengths`."""
    for i in range(hi.shape[0]):
        high, low = hi[i], lo[i]
        p = 0
        if high == 0 and (low >> np.uint64(32)) == np.uint64(IP4_MAPPED_PREFIX):
            for shift in (24, 16, 8, 0):
                octet = np.int64((low >> np.uint64(shift)) & np.uint64(255))
                if octet >= 100:
                    out[i, p] = 48 + octet // 100
                    p += 1
                if octet >= 10:
                    out[i, p] = 48 + octet // 10 % 10
                    p += 1
                out[i, p] = 48 + octet % 10
                p += 1
                if shift:
                    out[i, p] = _DOT
                    p += 1
            lengths[i] = p
            continue
        best_start, best_len, run = -1, 1, 0
        for g in range(8):
            run = run + 1 if _group(high, low, g) == 0 else 0
            if run > best_len:
                best_start, best_len = g - run + 1, run
        g = 0
        while g < 8:
            if g == best_start:
                out[i, p] = _COLON
                out[i, p + 1] = _COLON
                p += 2
                g += best_len
                continue
            if g and g != best_start + best_len:
                out[i, p] = _COLON
                p += 1
            value = _group(high, low, g)
            for shift in (12, 8, 4, 0):
                if value >> shift or shift == 0:
                    out[i, p] = hex_digits[(value >> shift) & 15]
                    p += 1
            g += 1
        lengths[i] = p


def ip_text_codes(hi, lo) -> TextCodes:
    """Text of address columns (1-D halves) as TextCodes: each distinct address formatted once."""
    hi = np.ascontiguousarray(hi, dtype=np.uint64).ravel()
    lo = np.ascontiguousarray(lo, dtype=np.uint64).ravel()
    order = np.lexsort((lo, hi))
    shi, slo = hi[order], lo[order]
    new = np.ones(len(hi), bool)
    new[1:] = (shi[1:] != shi[:-1]) | (slo[1:] != slo[:-1])
    codes = np.empty(len(hi), np.intp)
    codes[order] = np.cumsum(new) - 1
    unique_hi, unique_lo = shi[new], slo[new]
    raw = np.zeros((len(unique_hi), IP_TEXT_MAX), dtype=np.uint8)
    lengths = np.empty(len(unique_hi), dtype=np.int64)
    _format_ips(unique_hi, unique_lo, _HEX_DIGITS, raw, lengths)
    return TextCodes(codes, raw, lengths)


def ip_to_str(hi, lo):
    """Text of one address (two ints) or of arrays of halves (an object array of str, same shape)."""
    if np.ndim(hi) == 0 and np.ndim(lo) == 0:
        return _ip_text(int(hi), int(lo))
    shape = np.shape(hi)
    return ip_text_codes(hi, lo).text().reshape(shape)


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

"""Receive-side scaling model: the Toeplitz hash a NIC computes per packet, and the queue it picks.

A NIC spreads received packets over its queues by hashing the flow's
addresses (and, for TCP and optionally UDP, ports) with the Toeplitz hash of
Microsoft's RSS specification, then looking the low bits of the hash up in an
indirection table. Each queue is served by one CPU core, so a traffic mix
whose packets share one hash loads one core while the others idle.

The hash is linear over GF(2): the hash of a byte string is the XOR of the
contributions of its bytes, and the contribution of byte value v at position
i depends only on (i, v). `RssModel` precomputes that 32-bit contribution for
every (position, value) pair once, so hashing a packet is one table lookup
and one XOR per input byte (a compiled loop over the batch's rows). A zero
byte contributes nothing, which is why rows hashed without ports simply leave
the port bytes at zero.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .cpu import kernel
from .errors import UsageError
from .schema import L_FRAG, L_IP4, L_IP6, L_PORTS, L_TUNNEL, PROTO_TCP, PROTO_UDP, PacketBatch

# The 40-byte key of Microsoft's RSS verification suite, also the default key
# of many NIC drivers (ixgbe, i40e, DPDK's rte_thash examples).
MICROSOFT_KEY = bytes.fromhex(
    "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa")
# A key whose 16-bit period makes the hash symmetric: swapping source and
# destination (address and port) gives the same hash, so both directions of a
# flow land on one queue (Woo and Park, "Scalable TCP Session Monitoring with
# Symmetric Receive-side Scaling", 2012).
SYMMETRIC_KEY = bytes.fromhex("6d5a" * 20)

# Hash input: source address, destination address, source port, destination
# port, all in network byte order (RSS specification, "RSS Hashing Types").
IPV4_INPUT_BYTES = 4 + 4 + 2 + 2
IPV6_INPUT_BYTES = 16 + 16 + 2 + 2
# Linux's default indirection table has 128 entries filled round robin
# (ethtool_rxfh_indir_default: entry i -> queue i % queues).
DEFAULT_TABLE_SIZE = 128
DEFAULT_QUEUES = 8


def toeplitz_tables(key: bytes, input_bytes: int) -> np.ndarray:
    """(input_bytes, 256) uint32: the hash contribution of each byte value at each input position.

    Input bit k (0 = most significant bit of byte 0) XORs the 32-bit window
    of the key that starts at key bit k into the hash.
    """
    if len(key) < input_bytes + 4:
        raise UsageError(f"an RSS key of {len(key)} bytes hashes at most {len(key) - 4} input bytes, "
                         f"{input_bytes} needed")
    key_int = int.from_bytes(key, "big")
    key_bits = len(key) * 8
    windows = np.array([(key_int >> (key_bits - 32 - k)) & 0xFFFFFFFF for k in range(input_bytes * 8)],
                       dtype=np.uint32).reshape(input_bytes, 8)
    values = np.arange(256, dtype=np.uint32)
    tables = np.zeros((input_bytes, 256), dtype=np.uint32)
    for bit in range(8):               # bit 0 is the byte's most significant bit
        has_bit = ((values >> np.uint32(7 - bit)) & np.uint32(1)).astype(bool)
        tables[:, has_bit] ^= windows[:, bit:bit + 1]
    return tables


def toeplitz_hash(key: bytes, data: bytes) -> int:
    """The Toeplitz hash of one byte string (reference form, for tests and single lookups)."""
    tables = toeplitz_tables(key, len(data))
    result = 0
    for position, value in enumerate(data):
        result ^= int(tables[position, value])
    return result


@njit
def _xor_word(tables, word, first_position, n_bytes, h):
    """`h` XOR the contributions of the low `n_bytes` bytes of `word` (big-endian) from `first_position` on."""
    for k in range(n_bytes):
        h ^= tables[first_position + k, (word >> np.uint64(8 * (n_bytes - 1 - k))) & np.uint64(0xFF)]
    return h


@njit
def _toeplitz_row(tables, src_hi, src_lo, dst_hi, dst_lo, ports, is_v6):
    h = np.uint32(0)
    if is_v6:
        h = _xor_word(tables, src_hi, 0, 8, h)
        h = _xor_word(tables, src_lo, 8, 8, h)
        h = _xor_word(tables, dst_hi, 16, 8, h)
        h = _xor_word(tables, dst_lo, 24, 8, h)
        return _xor_word(tables, ports, 32, 4, h)
    low32 = np.uint64(0xFFFFFFFF)
    h = _xor_word(tables, src_lo & low32, 0, 4, h)
    h = _xor_word(tables, dst_lo & low32, 4, 4, h)
    return _xor_word(tables, ports, 8, 4, h)


@kernel("(u4[:, ::1], u8[::1], u8[::1], u8[::1], u8[::1], u8[::1], b1[::1], u4[::1])")
def _hash_rows(tables, src_hi, src_lo, dst_hi, dst_lo, ports, is_v6, out):
    for i in range(len(out)):
        out[i] = _toeplitz_row(tables, src_hi[i], src_lo[i], dst_hi[i], dst_lo[i], ports[i], is_v6[i])


@njit
def _hash_input(i, layers, proto, src_hi, src_lo, dst_hi, dst_lo, sport, dport, outer_src_hi, outer_src_lo,
                outer_dst_hi, outer_dst_lo, outer_sport, outer_dport, outer_proto, tcp_ports, udp_ports, inner):
    """What the NIC hashes of packet `i`: (src hi, lo, dst hi, lo, sport, dport, proto, is_v6, hash ports).

    A tunnelled packet offers its outer header (the schema's outer_* columns)
    unless the NIC hashes inner headers. Ports are those of the header, also
    where they are not hashed (a flow is still named by them).
    """
    bits = layers[i]
    if bits & np.uint32(L_TUNNEL) and not inner:
        s_hi, s_lo, d_hi, d_lo = outer_src_hi[i], outer_src_lo[i], outer_dst_hi[i], outer_dst_lo[i]
        sp, dp, pr = outer_sport[i], outer_dport[i], outer_proto[i]
        is_v6 = not (s_hi == 0 and (s_lo >> np.uint64(32)) == np.uint64(0xFFFF))
        has_ports = sp != 0 or dp != 0
    else:
        s_hi, s_lo, d_hi, d_lo = src_hi[i], src_lo[i], dst_hi[i], dst_lo[i]
        sp, dp, pr = sport[i], dport[i], proto[i]
        is_v6 = bits & np.uint32(L_IP6) != 0
        has_ports = bits & np.uint32(L_PORTS) != 0
    # every fragment of a datagram hashes alike: addresses only
    hashed = (has_ports and bits & np.uint32(L_FRAG) == 0
              and ((pr == PROTO_TCP and tcp_ports) or (pr == PROTO_UDP and udp_ports)))
    return s_hi, s_lo, d_hi, d_lo, sp, dp, pr, is_v6, hashed


@kernel("(u4[:, ::1], u4[::1], u1[::1], u8[::1], u8[::1], u8[::1], u8[::1], u2[::1], u2[::1], "
        "u8[::1], u8[::1], u8[::1], u8[::1], u2[::1], u2[::1], u1[::1], b1, b1, b1, u4[::1])")
def _hash_packets(tables, layers, proto, src_hi, src_lo, dst_hi, dst_lo, sport, dport, outer_src_hi, outer_src_lo,
                  outer_dst_hi, outer_dst_lo, outer_sport, outer_dport, outer_proto, tcp_ports, udp_ports, inner,
                  out):
    ip_bits = np.uint32(L_IP4 | L_IP6)
    for i in range(len(out)):
        if layers[i] & ip_bits == 0:
            out[i] = 0        # not IP: nothing a NIC hashes
            continue
        s_hi, s_lo, d_hi, d_lo, sp, dp, _proto, is_v6, hashed = _hash_input(
            i, layers, proto, src_hi, src_lo, dst_hi, dst_lo, sport, dport, outer_src_hi, outer_src_lo,
            outer_dst_hi, outer_dst_lo, outer_sport, outer_dport, outer_proto, tcp_ports, udp_ports, inner)
        ports = (np.uint64(sp) << np.uint64(16)) | np.uint64(dp) if hashed else np.uint64(0)
        out[i] = _toeplitz_row(tables, s_hi, s_lo, d_hi, d_lo, ports, is_v6)


@kernel("(i8[::1], u4[::1], u1[::1], u8[::1], u8[::1], u8[::1], u8[::1], u2[::1], u2[::1], u8[::1], "
        "u8[::1], u8[::1], u8[::1], u2[::1], u2[::1], u1[::1], b1, b1, b1, u8[::1], u8[::1], "
        "u8[::1], u8[::1], u2[::1], u2[::1], u1[::1])")
def _hashed_headers(rows, layers, proto, src_hi, src_lo, dst_hi, dst_lo, sport, dport, outer_src_hi, outer_src_lo,
                    outer_dst_hi, outer_dst_lo, outer_sport, outer_dport, outer_proto, tcp_ports, udp_ports, inner,
                    o_src_hi, o_src_lo, o_dst_hi, o_dst_lo, o_sport, o_dport, o_proto):
    for k in range(len(rows)):
        s_hi, s_lo, d_hi, d_lo, sp, dp, pr, _, _ = _hash_input(
            rows[k], layers, proto, src_hi, src_lo, dst_hi, dst_lo, sport, dport, outer_src_hi, outer_src_lo,
            outer_dst_hi, outer_dst_lo, outer_sport, outer_dport, outer_proto, tcp_ports, udp_ports, inner)
        o_src_hi[k], o_src_lo[k], o_dst_hi[k], o_dst_lo[k] = s_hi, s_lo, d_hi, d_lo
        o_sport[k], o_dport[k], o_proto[k] = sp, dp, pr


# the batch columns the hash reads, in the kernels' argument order
HASH_COLUMNS = ("layers", "proto", "src_ip_hi", "src_ip_lo", "dest_ip_hi", "dest_ip_lo", "src_port", "dest_port",
                "outer_src_ip_hi", "outer_src_ip_lo", "outer_dest_ip_hi", "outer_dest_ip_lo", "outer_src_port",
                "outer_dest_port", "outer_proto")


class RssModel:
    """A NIC's RSS configuration: key, queue count, indirection table, which packets hash ports.

    `hash(batch)` gives each packet's 32-bit hash, `queue(batch)` its receive
    queue. Non-IP packets get hash 0 and land on queue 0, as on real NICs.
    Fragments hash addresses only (a non-first fragment carries no ports, and
    NICs hash every fragment of a datagram alike). Tunnelled packets (VXLAN,
    Geneve, GRE, IP-in-IP, ...) hash the outer header, which is what a NIC
    parses, unless `inner_headers`: NICs configured for inner-header RSS of
    tunnels hash the decapsulated packet instead.
    """

    def __init__(self, key: bytes = MICROSOFT_KEY, queues: int = DEFAULT_QUEUES,
                 tcp_ports: bool = True, udp_ports: bool = False,
                 table_size: int = DEFAULT_TABLE_SIZE, inner_headers: bool = False):
        if queues < 1:
            raise UsageError(f"an RSS model needs at least one queue, got {queues}")
        if table_size < 1 or table_size & (table_size - 1):
            raise UsageError(f"the indirection table size must be a power of two, got {table_size}")
        self.key = bytes(key)
        self.queues = int(queues)
        self.tcp_ports = bool(tcp_ports)
        self.udp_ports = bool(udp_ports)
        self.inner_headers = bool(inner_headers)
        self.table_size = int(table_size)
        self.indirection = (np.arange(table_size, dtype=np.int64) % queues).astype(np.uint16)
        self.tables = toeplitz_tables(self.key, IPV6_INPUT_BYTES)

    def hash_tuples(self, src_hi, src_lo, dst_hi, dst_lo, src_port, dest_port, is_v6, hash_ports) -> np.ndarray:
        """Hashes of address/port columns (addresses as the schema's 128-bit halves; IPv4 mapped).

        Rows with `hash_ports` False hash addresses only; IPv4 rows hash the
        low 32 bits of each address.
        """
        out = np.empty(len(src_lo), dtype=np.uint32)
        ports = np.where(hash_ports, (src_port.astype(np.uint64) << np.uint64(16)) | dest_port.astype(np.uint64),
                         np.uint64(0))
        _hash_rows(self.tables, np.ascontiguousarray(src_hi, dtype=np.uint64),
                   np.ascontiguousarray(src_lo, dtype=np.uint64), np.ascontiguousarray(dst_hi, dtype=np.uint64),
                   np.ascontiguousarray(dst_lo, dtype=np.uint64), ports,
                   np.ascontiguousarray(is_v6, dtype=np.bool_), out)
        return out

    def hash(self, batch: PacketBatch) -> np.ndarray:
        """Each packet's RSS hash (uint32), 0 for packets the NIC cannot hash (non-IP)."""
        out = np.empty(len(batch), dtype=np.uint32)
        columns = [np.ascontiguousarray(batch[name]) for name in HASH_COLUMNS]
        _hash_packets(self.tables, *columns, self.tcp_ports, self.udp_ports, self.inner_headers, out)
        return out

    def hashed_headers(self, batch: PacketBatch, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The header of each of `rows` that the NIC hashes (outer or inner), as columns: addresses in the
        schema's halves, ports (also where they are not hashed) and protocol: the flow the NIC sees."""
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        n = len(rows)
        out = {"src_ip_hi": np.empty(n, np.uint64), "src_ip_lo": np.empty(n, np.uint64),
               "dest_ip_hi": np.empty(n, np.uint64), "dest_ip_lo": np.empty(n, np.uint64),
               "src_port": np.empty(n, np.uint16), "dest_port": np.empty(n, np.uint16), "proto": np.empty(n, np.uint8)}
        columns = [np.ascontiguousarray(batch[name]) for name in HASH_COLUMNS]
        _hashed_headers(rows, *columns, self.tcp_ports, self.udp_ports, self.inner_headers, *out.values())
        return out

    def queue_of(self, hashes: np.ndarray) -> np.ndarray:
        """Receive queue (uint16) of each hash through the indirection table."""
        return self.indirection[(hashes & np.uint32(self.table_size - 1)).astype(np.intp)]

    def queue(self, batch: PacketBatch) -> np.ndarray:
        return self.queue_of(self.hash(batch))


__all__ = ["RssModel", "MICROSOFT_KEY", "SYMMETRIC_KEY", "toeplitz_tables", "toeplitz_hash",
           "DEFAULT_QUEUES", "DEFAULT_TABLE_SIZE"]

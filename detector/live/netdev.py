"""The capture interface as the kernel sees it: does it exist, what link layer, how many drops.

`check_interface` turns a name into a one-line error before any capture
process starts, so a typo says `eth9: no such interface` rather than a
capture tool's paragraph. `rx_dropped` reads the interface's own drop
counter from sysfs: packets the NIC or driver discarded before any capture
socket saw them (a mirror port sending more than the box takes in shows up
there, not in the capture socket's drops).

Packet socket statistics (`packet_statistics`) are the counters libpcap's
pcap_stats reports: packets the kernel handed to one AF_PACKET socket and
packets it dropped because the socket's buffer or ring was full. The kernel
clears them on every read, so callers accumulate.
"""
from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct
from pathlib import Path

from ..errors import UsageError

SYS_CLASS_NET = Path("/sys/class/net")
# <linux/if_arp.h>: the device types a capture can frame as Ethernet or raw IP
ARPHRD_ETHER = 1
ARPHRD_LOOPBACK = 772
ARPHRD_NONE = 0xFFFE          # tun devices: bare IP packets
# <linux/if_packet.h>
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_STATISTICS = 6
ETH_P_ALL = 0x0003
# struct tpacket_stats_v3: tp_packets, tp_drops, tp_freeze_q_cnt (the first two are tpacket_stats)
TPACKET_STATS = struct.Struct("=III")
# pidfd_getfd(2): the same number on every architecture (the unified syscall table, Linux 5.6)
SYS_PIDFD_GETFD = 438


def check_interface(name: str) -> int:
    """The interface's index; UsageError with one line when it does not exist here."""
    if not name or "/" in name or len(name.encode()) >= 16:    # IFNAMSIZ
        raise UsageError(f"{name!r}: not an interface name")
    try:
        return socket.if_nametoindex(name)
    except OSError:
        raise UsageError(f"{name}: no such interface") from None


def link_type(name: str) -> int:
    """The interface's ARPHRD_* device type (sysfs `type`); -1 when it cannot be read."""
    try:
        return int((SYS_CLASS_NET / name / "type").read_text().strip())
    except (OSError, ValueError):
        return -1


def is_up(name: str) -> bool:
    """The interface exists and its operational state is not down (sysfs `operstate`)."""
    try:
        return (SYS_CLASS_NET / name / "operstate").read_text().strip() != "down"
    except OSError:
        return False


def rx_dropped(name: str) -> int | None:
    """Packets the interface's driver dropped on receive (sysfs statistics), None where unreadable."""
    try:
        return int((SYS_CLASS_NET / name / "statistics" / "rx_dropped").read_text().strip())
    except (OSError, ValueError):
        return None


def packet_statistics(sock: socket.socket) -> tuple[int, int]:
    """(packets, drops) of an AF_PACKET socket since the previous call (the kernel clears them)."""
    raw = sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, TPACKET_STATS.size)
    raw = raw.ljust(TPACKET_STATS.size, b"\0")
    packets, drops, _frozen = TPACKET_STATS.unpack(raw)
    return packets, drops


def packet_socket_fds(pid: int) -> list[int]:
    """Descriptor numbers of process `pid` that are AF_PACKET sockets (matched by inode in /proc/net/packet)."""
    try:
        lines = Path(f"/proc/{pid}/net/packet").read_text().splitlines()[1:]
    except OSError:
        return []
    inodes = {line.split()[-1] for line in lines if line.split()}
    found = []
    try:
        entries = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    for entry in entries:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{entry}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            found.append(int(entry))
    return sorted(found)


_libc = None


def borrow_fd(pid: int, fd: int) -> int:
    """A duplicate, in this process, of descriptor `fd` of process `pid` (pidfd_getfd(2)).

    Raises OSError: EPERM where this process may not trace `pid` (a
    capture tool that gained privileges from file capabilities), ENOSYS
    before Linux 5.6.
    """
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        dup = _libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
        if dup < 0:
            code = ctypes.get_errno() or errno.EPERM
            raise OSError(code, os.strerror(code))
        return dup
    finally:
        os.close(pidfd)

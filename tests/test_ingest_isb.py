"""pcapng interface statistics blocks (ISB, pcapng section 4.6): read, kept per interface, told by `info`.

The counters (isb_ifrecv, isb_ifdrop, isb_filteraccept, isb_osdrop,
isb_usrdeliv) are what a capture-loss judgement needs beside the packets;
a damaged statistics block costs its statistics, never the packets after it.
Crafted blocks check every field in both byte orders; capinfos (Wireshark's
wiretap) counts each interface's blocks on the real captures.
"""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys

import pytest

from detector.ingest.reader import interface_totals
from tests._real import manifest_rows
from tests.test_ingest import block, end_of_options, epb, idb, option, read_all, shb, write

T_NS = 1_700_000_000_123_456_789


def isb(iface, units, counters=None, start=None, end=None, big=False, raw_options=None) -> bytes:
    """An ISB; `counters` maps option code (4-8) to its 64-bit value."""
    o = ">" if big else "<"
    opts = b""
    for code, units_at in ((2, start), (3, end)):
        if units_at is not None:
            opts += option(code, struct.pack(o + "II", units_at >> 32, units_at & 0xFFFFFFFF), big)
    for code, value in (counters or {}).items():
        opts += option(code, struct.pack(o + "Q", value), big)
    if raw_options is not None:
        opts = raw_options
    elif opts:
        opts += end_of_options(big)
    return block(5, struct.pack(o + "III", iface, units >> 32, units & 0xFFFFFFFF) + opts, big)


def frame(i: int) -> bytes:
    return bytes(range(i, i + 60))


@pytest.mark.parametrize("big", [False, True])
def test_counters_times_and_interfaces(tmp_path, big):
    us = T_NS // 1000
    data = (shb(big) + idb(tsresol=9, name="eth0", big=big) + idb(name="wlan0", big=big)
            + epb(0, T_NS, frame(0), big=big) + epb(1, us + 5, frame(1), big=big)
            # eth0: every counter, start and end times in its nanoseconds
            + isb(0, T_NS + 10**9, {4: 1_000_000, 5: 12, 6: 999_000, 7: 2**40 + 3, 8: 998_988},
                  start=T_NS - 5 * 10**9, end=T_NS + 10**9, big=big)
            + epb(0, T_NS + 2 * 10**9, frame(2), big=big)
            # wlan0 (microseconds): two blocks; the later totals stand, a counter only the first gave stays
            + isb(1, us + 10, {4: 50, 5: 1}, big=big)
            + isb(1, us + 20, {4: 70}, big=big))
    reader, cols, frames = read_all(write(tmp_path, "isb.pcapng", data))
    assert reader.warnings == []
    assert reader.packets == 3 and frames == [frame(0), frame(1), frame(2)]
    assert cols["iface"].tolist() == [0, 1, 0]
    none = dict.fromkeys(("ifrecv", "ifdrop", "filteraccept", "osdrop", "usrdeliv"))
    assert reader.interface_stats == [
        {"interface": 0, "time_ns": T_NS + 10**9, "start_ns": T_NS - 5 * 10**9, "end_ns": T_NS + 10**9,
         "ifrecv": 1_000_000, "ifdrop": 12, "filteraccept": 999_000, "osdrop": 2**40 + 3, "usrdeliv": 998_988},
        {**none, "interface": 1, "time_ns": (us + 10) * 1000, "start_ns": None, "end_ns": None,
         "ifrecv": 50, "ifdrop": 1},
        {**none, "interface": 1, "time_ns": (us + 20) * 1000, "start_ns": None, "end_ns": None, "ifrecv": 70},
    ]
    totals = interface_totals(reader.interfaces, reader.interface_stats)
    assert [(t["interface"], t["name"], t["ifrecv"], t["ifdrop"], t["time_ns"]) for t in totals] == [
        (0, "eth0", 1_000_000, 12, T_NS + 10**9), (1, "wlan0", 70, 1, (us + 20) * 1000)]


def test_interface_numbers_are_per_section(tmp_path):
    # the second section's interface 0 is the file's interface 1
    data = (shb() + idb(name="a") + epb(0, 1, frame(0)) + isb(0, 2, {4: 1})
            + shb(big=True) + idb(name="b", big=True) + epb(0, 3, frame(1), big=True)
            + isb(0, 4, {4: 2, 5: 0}, big=True))
    reader, _, _ = read_all(write(tmp_path, "sections.pcapng", data))
    assert reader.warnings == []
    assert [(s["interface"], s["ifrecv"], s["ifdrop"]) for s in reader.interface_stats] == [(0, 1, None), (1, 2, 0)]


def test_binary_resolution_and_offset(tmp_path):
    # if_tsresol 0x8A: units of 2^-10 s; if_tsoffset 100 s
    data = shb() + idb(tsresol=0x8A, tsoffset=100) + isb(0, 1024 * 7 + 512, {4: 1}) + epb(0, 0, frame(0))
    reader, _, _ = read_all(write(tmp_path, "binary.pcapng", data))
    assert reader.interface_stats[0]["time_ns"] == 107_500_000_000


@pytest.mark.parametrize("damage, said", [
    (lambda: isb(3, 1, {4: 1}), "interface statistics for interface 3, but this section describes 1 interface; "
                                "passed over"),
    (lambda: isb(0, 1, raw_options=struct.pack("<HH", 4, 200) + b"\0" * 8),
     "interface statistics block damaged: option 4 of length 200 runs past the end of its block; passed over"),
    (lambda: block(5, b"\0" * 8), "interface statistics block of 20 bytes, shorter than its fixed fields (24); "
                                  "passed over"),
])
def test_a_damaged_block_costs_its_statistics_not_the_packets(tmp_path, damage, said):
    head = shb() + idb() + epb(0, 1, frame(0))
    data = head + damage() + epb(0, 2, frame(1))
    path = write(tmp_path, "damaged.pcapng", data)
    reader, _, frames = read_all(path)
    assert frames == [frame(0), frame(1)]
    assert reader.interface_stats == []
    assert reader.warnings == [f"{path} at byte {len(head)}: {said}"]


def test_counters_that_are_not_64_bits_are_not_read(tmp_path):
    opts = option(4, b"\1\2\3\4") + option(5, struct.pack("<Q", 9)) + end_of_options()
    reader, _, _ = read_all(write(tmp_path, "short.pcapng", shb() + idb() + isb(0, 1, raw_options=opts)))
    assert reader.warnings == []
    assert (reader.interface_stats[0]["ifrecv"], reader.interface_stats[0]["ifdrop"]) == (None, 9)


def test_statistics_blocks_kept_are_bounded(tmp_path, monkeypatch):
    import detector.ingest.reader as reader_module
    monkeypatch.setattr(reader_module, "MAX_INTERFACE_STATS", 3)
    head = shb() + idb()
    data = head + b"".join(isb(0, k, {4: k}) for k in range(5)) + epb(0, 9, frame(0))
    path = write(tmp_path, "many.pcapng", data)
    reader, _, frames = read_all(path)
    assert frames == [frame(0)]
    assert [s["ifrecv"] for s in reader.interface_stats] == [0, 1, 2]
    fourth = len(head) + 3 * len(isb(0, 0, {4: 0}))
    assert reader.warnings == [f"{path} at byte {fourth}: more than 3 interface statistics blocks; the rest are "
                               "not kept"]


def _info(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "detector", "info", str(path)], capture_output=True, text=True,
                          timeout=300)


def test_info_tells_each_interfaces_totals(tmp_path):
    data = (shb() + idb(name="eth0") + idb() + epb(0, 1, frame(0)) + isb(0, 5, {4: 1_234_567, 5: 89, 7: 3})
            + isb(1, 6, {}))
    path = write(tmp_path, "told.pcapng", data)
    done = _info(path)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("Interface")]
    assert lines == ["Interface 0:   eth0, ether (link type 1), no snap length, 1 packet; interface statistics: "
                     "1,234,567 received, 89 dropped by the interface, 3 dropped by the OS",
                     "Interface 1:   -, ether (link type 1), no snap length, 0 packets; interface statistics: "
                     "no counters"]
    record = json.loads(subprocess.run([sys.executable, "-m", "detector", "info", "--json", str(path)],
                                       capture_output=True, text=True, timeout=300).stdout)
    assert [(s["interface"], s["name"], s["ifrecv"], s["ifdrop"], s["osdrop"]) for s in record["interface_stats"]] \
        == [(0, "eth0", 1_234_567, 89, 3), (1, None, None, None, None)]


def test_dumpcaps_statistics_on_a_real_capture(captures_real):
    # dumpcap's block, read byte by byte: "Counters provided by dumpcap", ifrecv 736, ifdrop 0
    reader, _, _ = read_all(captures_real / "packetlife/pcaps/DNS Question & Answer.pcapng.cap")
    assert reader.warnings == []
    (stats,) = reader.interface_stats
    assert (stats["interface"], stats["ifrecv"], stats["ifdrop"], stats["osdrop"]) == (0, 736, 0, None)
    # isb_starttime 2014-04-11T02:53:48.625039Z, isb_endtime and the block's own time 02:54:23.415087Z
    assert (stats["start_ns"], stats["end_ns"], stats["time_ns"]) == (
        1397184828_625039_000, 1397184863_415087_000, 1397184863_415087_000)


def test_capinfos_counts_the_same_blocks_on_every_real_pcapng(captures_real):
    """capinfos (Wireshark's wiretap) says "Number of stat entries" per interface: ours agree on every file."""
    capinfos = shutil.which("capinfos")
    assert capinfos, "capinfos is missing (Debian package wireshark-common, a dependency of tshark)"
    files = [captures_real / row["path"] for row in manifest_rows()]
    pcapng = [p for p in files if p.is_file() and p.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"]
    assert len(pcapng) > 100
    checked = with_stats = 0
    for path in pcapng:
        try:
            reader, _, _ = read_all(path)
        except Exception:         # unreadable files are the ingest tests' business
            continue
        done = subprocess.run([capinfos, "-I", str(path)], capture_output=True, text=True, timeout=120)
        theirs = [int(n) for n in re.findall(r"Number of stat entries = (\d+)", done.stdout)]
        if done.returncode != 0 or len(theirs) != len(reader.interfaces):
            continue              # capinfos stopped at damage we read past, or counts interfaces otherwise
        ours = [sum(1 for s in reader.interface_stats if s["interface"] == gid) for gid in range(len(theirs))]
        assert ours == theirs, path
        checked += 1
        with_stats += any(theirs)
    assert checked > 100 and with_stats >= 45, (checked, with_stats)

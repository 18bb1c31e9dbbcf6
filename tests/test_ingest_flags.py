"""Per-packet capture metadata: pcapng epb_flags (direction, reception type, FCS length, link errors) and the
Linux cooked capture packet type, as the columns `epb_flags` and `pkt_type`.

A mirror port's capture says little about who sent what; these two say where
a frame came from (inbound or outbound, unicast, broadcast, another host's
frame seen in promiscuous mode) and whether the NIC saw it damaged, which the
capture-loss and flooding judgements read. Crafted blocks check the option
walk at its edges; tshark (frame.packet_flags, sll.pkttype) is the oracle on
the real captures.
"""
from __future__ import annotations

import shutil
import struct
import subprocess

import numpy as np
import pytest

from detector.decode import decode
from detector.ingest import open_capture
from detector.schema import L_PKT_TYPE
from tests._real import manifest_rows
from tests.test_ingest import (
    block,
    end_of_options,
    epb,
    idb,
    opb,
    option,
    pcap_file,
    pcap_header,
    pcap_record,
    read_all,
    shb,
    spb,
    write,
)

INBOUND_MULTICAST_FCS4 = 1 | 2 << 2 | 4 << 5
OUTBOUND_CRC_ERROR = 2 | 1 << 24


def frame(i: int) -> bytes:
    return bytes(range(i, i + 61))          # odd length: the options start after padding


def epb_with(iface, units, data, options: bytes, big=False) -> bytes:
    plain = epb(iface, units, data, big=big)
    # the EPB's body is the packet block without its trailer and length words, then the options
    body = plain[8:-4] + options
    return block(6, body, big)


@pytest.mark.parametrize("big", [False, True])
def test_epb_flags_among_other_options(tmp_path, big):
    o = ">" if big else "<"
    data = (shb(big) + idb(big=big)
            + epb_with(0, 1, frame(0), option(2, struct.pack(o + "I", INBOUND_MULTICAST_FCS4), big)
                       + end_of_options(big), big)
            # a comment and a hash before the flags; no end-of-options
            + epb_with(0, 2, frame(1), option(1, b"seen on span port 3", big) + option(3, b"\2" + b"\0" * 4, big)
                       + option(2, struct.pack(o + "I", OUTBOUND_CRC_ERROR), big), big)
            + epb(0, 3, frame(2), big=big)                                          # no options at all
            # the flags after an end-of-options do not count
            + epb_with(0, 4, frame(3), end_of_options(big) + option(2, struct.pack(o + "I", 1), big), big)
            # a flags option of the wrong length is no flags
            + epb_with(0, 5, frame(4), option(2, b"\1\0", big) + end_of_options(big), big)
            # an option running past its block ends the search; the packet stands
            + epb_with(0, 6, frame(5), struct.pack(o + "HH", 1, 400) + option(2, struct.pack(o + "I", 1), big), big)
            + opb(0, 7, frame(6), big=big)
            + spb(frame(7), 61, big=big))
    reader, cols, frames = read_all(write(tmp_path, "flags.pcapng", data))
    assert reader.warnings == []
    assert frames == [frame(i) for i in range(8)]
    assert cols["epb_flags"].tolist() == [INBOUND_MULTICAST_FCS4, OUTBOUND_CRC_ERROR, 0, 0, 0, 0, 0, 0]


def test_obsolete_packet_blocks_pack_flags(tmp_path):
    body = opb(0, 1, frame(0))[8:-4] + option(2, struct.pack("<I", 2)) + end_of_options()
    reader, cols, _ = read_all(write(tmp_path, "opb.pcapng", shb() + idb() + block(2, body)))
    assert reader.warnings == [] and cols["epb_flags"].tolist() == [2]


def test_pcap_records_have_no_flags(tmp_path):
    _, cols, _ = read_all(write(tmp_path, "plain.pcap", pcap_file(3)))
    assert cols["epb_flags"].tolist() == [0, 0, 0]


def _sll(packet_type: int) -> bytes:
    # packet type, ARPHRD_ETHER, address length 6, address (8 bytes), IPv4
    return struct.pack(">HHH8sH", packet_type, 1, 6, bytes.fromhex("020000000001") + b"\0\0", 0x0800)


def _sll2(packet_type: int) -> bytes:
    # protocol IPv4, reserved, interface index, ARPHRD_ETHER, packet type, address length, address
    return struct.pack(">HHIHBB8s", 0x0800, 0, 7, 1, packet_type, 6, bytes.fromhex("020000000001") + b"\0\0")


IPV4_UDP = bytes.fromhex("4500001c000100004011f9cc0a0000010a00000204d2162e00080000")


@pytest.mark.parametrize("linktype, header", [(113, _sll), (276, _sll2)])
def test_cooked_capture_packet_types(tmp_path, linktype, header):
    data = pcap_header(linkfield=linktype) + b"".join(
        pcap_record(1, k, header(kind) + IPV4_UDP) for k, kind in enumerate((0, 1, 2, 3, 4)))
    batch = decode(next(iter(open_capture(write(tmp_path, "cooked.pcap", data)))))
    assert batch["pkt_type"].tolist() == [0, 1, 2, 3, 4]
    assert np.all(batch["layers"] & L_PKT_TYPE)
    assert batch["src_mac"].tolist() == [0x020000000001] * 5
    assert batch["dest_port"].tolist() == [5678] * 5


def test_ethernet_frames_have_no_packet_type(tmp_path):
    ether = bytes.fromhex("ffffffffffff020000000001") + b"\x08\x00" + IPV4_UDP
    batch = decode(next(iter(open_capture(write(tmp_path, "ether.pcap", pcap_header() + pcap_record(1, 0, ether))))))
    assert batch["layers"][0] & L_PKT_TYPE == 0 and batch["pkt_type"][0] == 0


def _columns(path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {"epb_flags": [], "pkt_type": [], "layers": []}
    for raw in open_capture(path):
        batch = decode(raw)
        for name in out:
            out[name] += batch[name].tolist()
    return out


def test_epb_flags_as_text2pcap_writes_and_tshark_reads_them(tmp_path, tshark):
    """Wireshark's own writer and reader as the oracle: text2pcap -D marks each packet inbound or outbound.

    (The real pcapng captures carry no flags but 0: ndpi's six files with the option all say 0.)
    """
    text2pcap = shutil.which("text2pcap")
    assert text2pcap, "text2pcap is missing (Debian package wireshark-common, a dependency of tshark)"
    ether = bytes.fromhex("ffffffffffff020000000001") + b"\x08\x00" + IPV4_UDP
    dump = "".join(f"{mark} " + "\n".join(f"{at:06x} " + " ".join(f"{b:02x}" for b in ether[at:at + 16])
                                           for at in range(0, len(ether), 16)) + "\n"
                   for mark in "IOIIO")
    (tmp_path / "dump.txt").write_text(dump)
    path = tmp_path / "directions.pcapng"
    subprocess.run([text2pcap, "-q", "-n", "-D", str(tmp_path / "dump.txt"), str(path)], check=True, timeout=60)
    theirs = [int(row[0], 16) for row in tshark.fields(path, "frame.packet_flags")]
    assert theirs == [1, 2, 1, 1, 2]
    assert _columns(path)["epb_flags"] == theirs


def test_cooked_packet_types_agree_with_tshark(captures_real, tshark):
    rows = [row for row in manifest_rows() if {"sll", "sll2"} & set(row["labels"].split(","))]
    assert len(rows) >= 10
    kinds = set()
    for row in rows:
        path = captures_real / row["path"]
        ours = _columns(path)
        theirs = tshark.fields(path, "frame.number", "sll.pkttype")
        assert len(theirs) == len(ours["pkt_type"]), path
        for value, layers, (number, field) in zip(ours["pkt_type"], ours["layers"], theirs):
            if field:
                assert layers & L_PKT_TYPE and value == int(field), (path, number)
                kinds.add(value)
            else:
                assert not layers & L_PKT_TYPE, (path, number)
    assert {0, 4} <= kinds, kinds

"""Frames on demand for the notebook API: a few frames of a capture, by number, read at their offsets.

    frames = capture.frames([12, 40])     # Frames: raw bytes, times, lengths, link type, scapy packets
    frames[0].data, frames[0].packet      # the bytes as captured; scapy's dissection of them
    capture.write_pcap(frames, "x.pcap")  # for Wireshark: original bytes, lengths, link types, ns times

The first call indexes every file of the capture (detector.ingest.index: one
walk of the record headers, 10 bytes a record); each frame is then read
alone at its offset, so asking for frame 9,000,000 of a large capture reads
that record, not the file up to it. A file that changed since it was
indexed is indexed again. Compressed files are decompressed once into a
temporary copy (see detector.ingest.index).

scapy is loaded only when a packet is asked for (`Frame.packet`,
`Frames.packets`), with the dissectors of every link type the decoder reads.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .capfile import Segment, capture_format, write_capture
from .errors import UsageError
from .ingest.index import RecordIndex, build_index
from .schema import linktype_name
from .units import NS


@dataclass(frozen=True, repr=False)
class Frame:
    """One frame as captured: its number across the capture, time (ns since the epoch, UTC), length on the
    wire, link type, interface (pcapng's file-wide number; 0 in pcap) and the captured bytes."""

    number: int
    ts_ns: int
    wirelen: int
    linktype: int
    interface: int
    data: bytes
    source: str

    @property
    def caplen(self) -> int:
        return len(self.data)

    @property
    def time(self):
        """The capture time as a pandas Timestamp (UTC, nanoseconds)."""
        import pandas as pd

        return pd.Timestamp(self.ts_ns, unit="ns", tz="UTC")

    @property
    def packet(self):
        """scapy's dissection of the bytes (Raw for a link type scapy does not know), with the frame's time
        and length on the wire, so scapy's own wrpcap writes it as captured. Packet bytes are hostile: a
        dissector that fails leaves the bytes as Raw."""
        from scapy.config import conf
        from scapy.utils import EDecimal

        from .detect.display import load_dissectors

        cls = load_dissectors().l2types.get(self.linktype)
        try:
            packet = cls(self.data) if cls is not None else conf.raw_layer(self.data)
        except Exception:   # scapy's dissectors raise all kinds of errors on crafted bytes
            packet = conf.raw_layer(self.data)
        packet.time = EDecimal(self.ts_ns) / NS
        packet.wirelen = self.wirelen
        return packet

    def decoded(self) -> str:
        """scapy's one-line summary of the bytes (bounded: the text is from packets)."""
        from .detect.display import frame_summary

        return frame_summary(self.data, self.linktype)

    def __repr__(self) -> str:
        return f"Frame({self.summary()})"

    def summary(self) -> str:
        """One line: number, time, captured/wire lengths, link type and scapy's summary."""
        return (f"{self.number} {self.time.isoformat()} {self.caplen}/{self.wirelen} bytes "
                f"{linktype_name(self.linktype)}: {self.decoded()}")


class Frames(list):
    """Frames in the order asked for (a list of Frame), with their scapy packets and a table of them."""

    def __getitem__(self, key):
        got = super().__getitem__(key)
        return Frames(got) if isinstance(key, slice) else got

    @property
    def numbers(self) -> list[int]:
        return [f.number for f in self]

    @property
    def packets(self):
        """scapy's PacketList of the frames (Frame.packet each)."""
        from scapy.plist import PacketList

        return PacketList([f.packet for f in self], name="frames")

    def to_frame(self):
        """A DataFrame, one row per frame: frame, time, caplen, wirelen, linktype, interface, summary."""
        import pandas as pd

        return pd.DataFrame({
            "frame": pd.array([f.number for f in self], dtype="Int64"),
            "time": pd.to_datetime(np.array([f.ts_ns for f in self], dtype=np.int64), unit="ns", utc=True),
            "caplen": pd.array([f.caplen for f in self], dtype="UInt32"),
            "wirelen": pd.array([f.wirelen for f in self], dtype="UInt32"),
            "linktype": pd.array([f.linktype for f in self], dtype="UInt16"),
            "interface": pd.array([f.interface for f in self], dtype="UInt16"),
            "summary": pd.array([f.decoded() for f in self], dtype="string"),
        })

    def __repr__(self) -> str:
        return "\n".join(f.summary() for f in self) or "Frames([])"


def frame_numbers(numbers) -> list[int]:
    """`numbers` (an int, or an iterable of ints such as a DataFrame's frame column) as a list of ints; a
    UsageError names what is not a frame number."""
    if isinstance(numbers, (int, np.integer)):
        numbers = [numbers]
    if isinstance(numbers, (str, bytes)):
        raise UsageError(f"frames: frame numbers, not {numbers!r}")
    out = []
    for value in numbers:
        try:
            out.append(operator.index(value))
        except TypeError:
            raise UsageError(f"frames: {value!r} is not a frame number (an integer from 1)") from None
    return out


class CaptureFrames:
    """The record indexes of a capture's files (frame numbers continue from file to file), built on first use."""

    def __init__(self, paths):
        self.paths = [str(p) for p in paths]
        self._indexes: list[RecordIndex] | None = None

    def indexes(self) -> list[RecordIndex]:
        if self._indexes is not None and all(index.current() for index in self._indexes):
            return self._indexes
        self.close()
        indexes, first = [], 1
        for path in self.paths:
            index = build_index(path, first_frame=first)
            indexes.append(index)
            first += len(index)
        self._indexes = indexes
        return indexes

    def close(self) -> None:
        for index in self._indexes or []:
            index.close()
        self._indexes = None

    @property
    def count(self) -> int:
        """Frames in the capture."""
        return sum(len(index) for index in self.indexes())

    def frames(self, numbers) -> Frames:
        """The frames numbered `numbers` (from 1, as tshark's frame.number), in that order; a number the
        capture does not have raises UsageError saying how many it has."""
        numbers = frame_numbers(numbers)
        indexes = self.indexes()
        total = sum(len(index) for index in indexes)
        bad = [n for n in numbers if not 1 <= n <= total]
        if bad:
            shown = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
            raise UsageError(f"no frame {shown} in {', '.join(self.paths)}: its frames are numbered 1 to "
                             f"{total:,}" if total else f"no frame {shown}: {', '.join(self.paths)} has none")
        starts = np.array([index.first_frame for index in indexes], dtype=np.int64)
        asked = np.asarray(numbers, dtype=np.int64)
        which = np.searchsorted(starts, asked, side="right") - 1
        records: dict[int, tuple] = {}
        for k in np.unique(which):
            index = indexes[int(k)]
            mine = np.unique(asked[which == k])
            for number, record in zip(mine.tolist(), index.read(mine - index.first_frame)):
                records[number] = (*record, index.path)
        return Frames(Frame(n, *records[n]) for n in numbers)

    def write(self, frames, path) -> str:
        """Write `frames` (Frames, or frame numbers) to the capture file `path` as they were captured; returns
        the format written: "pcap", or "pcapng" when they come from interfaces (or link types) that differ."""
        if not isinstance(frames, Frames):
            frames = self.frames(frames)
        if not len(frames):
            raise UsageError("write_pcap: no frames to write")
        records = [(f.ts_ns, f.wirelen, f.linktype, f.data) for f in frames]
        segment = Segment.of_records(frames.numbers, records, iface=[f.interface for f in frames])
        write_capture(Path(path), [segment])
        return capture_format([segment])

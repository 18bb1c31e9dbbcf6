"""Mutated control-plane frames through the whole analysis: every rule ends, none fails, findings stay sane.

The application tables (VRRP, DHCP, ND, RIP, OSPF) each have a property test
of their own over lying lengths and counts (tests/test_app_*.py); this one
mutates the frames of the bundled control-plane captures and of the real
captures that carry these protocols (flipped bytes, 8- and 16-bit fields set
to hostile values, cut frames, inserted bytes) and runs every default rule
over them, with the campus site file where a capture has one, so the
detectors that read the tables meet the damage too: a rule that raises is
recorded as a failure (exit 4 from analyze), which this test forbids.
"""
from __future__ import annotations

import io
import json
import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detector.analysis import analyze
from detector.capfile import pcap_file_header
from detector.findings import SEVERITIES, SEVERITY_RANK
from detector.ingest import open_capture
from detector.rules import load_rules
from detector.site import load_site
from tests._real import CAPTURES_REAL, manifest_rows

BUNDLED = Path(__file__).resolve().parents[1] / "captures"
PREFIXES = ("vrrp", "carp", "arp", "dhcp", "nd-", "rip", "ospf", "malformed")
REAL_LABELS = {"vrrp", "dhcp", "rip", "ospf", "garp", "arp-spoof", "arp-storm"}
FRAMES_PER_SEED = 200          # enough to hold an exchange, few enough for a quick analysis


def _frames(path) -> tuple[int, list[tuple[int, bytes]]]:
    """(link type, [(ts_ns, frame)]) of the first FRAMES_PER_SEED records of one link type."""
    out, linktype = [], None
    with open_capture(path) as reader:
        for raw in reader:
            for k in range(len(raw)):
                lt = int(raw["linktype"][k])
                if linktype is None:
                    linktype = lt
                if lt != linktype:
                    continue
                at, n = int(raw["offset"][k]), int(raw["caplen"][k])
                out.append((int(raw["ts_ns"][k]), raw.data[at:at + n].tobytes()))
                if len(out) == FRAMES_PER_SEED:
                    return linktype, out
    return linktype or 1, out


def _seeds() -> list[tuple[str, int, list, object]]:
    seeds = []
    for path in sorted(BUNDLED.glob("*.pcap*")):
        if path.name.startswith(PREFIXES):
            site = path.with_name(path.name.split(".")[0] + ".site.yaml")
            seeds.append((path.name, *_frames(path), load_site(site) if site.is_file() else None))
    for row in manifest_rows():
        if REAL_LABELS & set(row["labels"].split(",")) and int(row["size_bytes"] or 0) <= 200_000:
            try:
                seeds.append((row["path"], *_frames(CAPTURES_REAL / row["path"]), None))
            except Exception:      # unreadable files are the ingest tests' business
                continue
    return seeds


SEEDS = _seeds()
RULES = load_rules()
HOSTILE8 = [0, 1, 2, 3, 4, 7, 8, 16, 25, 64, 127, 128, 254, 255]
HOSTILE16 = [0, 1, 4, 8, 20, 24, 36, 0x7FFF, 0x8000, 0xFFFE, 0xFFFF]

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(0, 1 << 16), st.integers(1, 255)),
    st.tuples(st.just("u8"), st.integers(0, 1 << 16), st.integers(0, 1 << 16), st.sampled_from(HOSTILE8)),
    st.tuples(st.just("u16"), st.integers(0, 1 << 16), st.integers(0, 1 << 16), st.sampled_from(HOSTILE16)),
    st.tuples(st.just("cut"), st.integers(0, 1 << 16), st.integers(14, 1 << 16), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 16), st.integers(0, 1 << 16), st.integers(1, 40)),
)


def test_the_campaign_holds_every_protocol_and_real_captures(captures_real):
    names = [name for name, *_ in SEEDS]
    for prefix in PREFIXES:
        assert any(name.startswith(prefix) for name in names), prefix
    assert sum("/" in name for name in names) >= 20      # real captures, by their path
    assert sum(site is not None for *_, site in SEEDS) >= 3


def _mutate(frames: list[tuple[int, bytes]], ops) -> list[tuple[int, bytes]]:
    frames = list(frames)
    for kind, which, where, value in ops:
        k = which % len(frames)
        ts, frame = frames[k]
        buf = bytearray(frame)
        # past the link header most of the time: that is where the tables read
        at = (14 + where % max(1, len(buf) - 14)) if len(buf) > 15 else where % max(1, len(buf))
        if kind == "flip" and buf:
            buf[at % len(buf)] ^= value
        elif kind == "u8" and buf:
            buf[at % len(buf)] = value
        elif kind == "u16" and len(buf) >= 2:
            at = min(at, len(buf) - 2)
            buf[at:at + 2] = struct.pack(">H", value)
        elif kind == "cut":
            del buf[min(where, len(buf)):]
        elif kind == "insert":
            buf[at:at] = bytes((where + i) & 0xFF for i in range(value))
        frames[k] = (ts, bytes(buf))
    return frames


def _pcap(linktype: int, frames) -> bytes:
    out = [pcap_file_header(linktype)]
    for ts, frame in frames:
        out.append(struct.pack("<IIII", ts // 1_000_000_000, ts % 1_000_000_000, len(frame), len(frame)) + frame)
    return b"".join(out)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1 << 16), ops=st.lists(mutation, min_size=1, max_size=6))
def test_mutated_control_plane_frames_end_every_rule_cleanly(seed, ops):
    name, linktype, frames, site = SEEDS[seed % len(SEEDS)]
    data = _pcap(linktype, _mutate(frames, ops))
    analysis = analyze([io.BytesIO(data)], RULES, label="fuzz", site=site)
    failed = [f"{f.rule} {f.stage}: {f.error}: {f.message}" for f in analysis.failures]
    assert not failed, (name, ops, failed)
    for finding in analysis.findings:
        assert finding.severity in SEVERITIES and finding.msg
        # a damaged message is a fact about its sender or the capture, never more than low (issue 27)
        assert finding.rule != "malformed-message" or finding.rank <= SEVERITY_RANK["low"], finding.msg
        # every record is one JSON line's worth: nothing a packet says survives unescaped into it
        assert "\n" not in json.dumps(finding.to_json())

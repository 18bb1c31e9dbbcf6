"""Helpers for the application side-table tests (detector.decode.app): build, bound, mask.

    from tests._app import app_table, assert_app_reads_stop_at_the_capture
"""
from __future__ import annotations

import numpy as np
from scapy.packet import raw

from detector.decode import app, decode
from tests.test_decode import cut_everywhere, make_batch


def app_table(frames, name: str, caplens=None, tail: bytes = b""):
    """Table `name` of (linktype, frame) records (scapy packets or bytes), decoded as one batch."""
    frames = [(linktype, raw(frame) if not isinstance(frame, bytes) else frame) for linktype, frame in frames]
    return app.table(decode(make_batch(frames, tail=tail, caplens=caplens), fingerprint=False), name)


def assert_masks_consistent(table) -> None:
    """A masked field holds 0, in the table and in each child table."""
    for name in table.fields:
        if name not in ("row", "frame", "valid", "parent"):
            assert not np.any(table[name][~table.valid(name)]), f"{table.name}.{name} holds a value where masked"
    for child in table.children.values():
        assert_masks_consistent(child)


def _same(a, b) -> None:
    for name in a.cols:
        assert np.array_equal(a[name], b[name]), f"{a.name}.{name} depends on bytes past the capture"
    for name in a.children:
        _same(a.children[name], b.children[name])


def assert_app_reads_stop_at_the_capture(frames, name: str) -> None:
    """Every cut of every frame gives the same table whatever bytes follow it in the buffer, masks kept."""
    cuts = cut_everywhere([(lt, raw(f) if not isinstance(f, bytes) else f) for lt, f in frames])
    zeros = app_table(cuts, name, tail=b"\x00" * 256)
    ones = app_table(cuts, name, tail=b"\xff" * 256)
    assert_masks_consistent(zeros)
    _same(zeros, ones)


def assert_snapshot_cuts_are_no_fault(frames, name: str) -> None:
    """Each well-formed frame cut at every length by a snapshot length (caplen < wirelen) has `fault` 0: a
    message the capture cut short is not malformed for being cut."""
    frames = [(lt, raw(f) if not isinstance(f, bytes) else f) for lt, f in frames]
    records = [(lt, frame) for lt, frame in frames for _ in range(len(frame) + 1)]
    caplens = [cut for _, frame in frames for cut in range(len(frame) + 1)]
    tab = app_table(records, name, caplens=caplens)
    assert len(tab) and not tab["fault"].any(), f"{name}: a snapshot cut reads as a fault"

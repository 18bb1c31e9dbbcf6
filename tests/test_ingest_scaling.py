"""The reader's work grows linearly with pcapng header blocks: counted calls, never wall time.

Wall-clock figures for the same shapes are in bench/blocks.py. Here the work
is counted: the compiled walk's calls, the Python functions the reader runs
(sys.setprofile events, which are deterministic), and the batches it yields.
"""
from __future__ import annotations

import sys

from detector.ingest import open_capture
from detector.ingest import walk as walk_module
from tests.test_ingest import epb, idb, shb, write


def many_interfaces(n: int) -> bytes:
    return shb() + idb(1, tsresol=9) * n + epb(n - 1, 1_700_000_000 * 10**9, b"p" * 60)


def many_sections(n: int) -> bytes:
    return (shb() + idb(1, tsresol=9) + epb(0, 1_700_000_000 * 10**9, b"p" * 60)) * n


def python_calls(path) -> int:
    """Python and C function calls made while opening and reading `path`."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(count)
    try:
        reader = open_capture(path)
        for _ in reader:
            pass
    finally:
        sys.setprofile(None)
    return calls


def test_interface_blocks_cost_constant_work_each(tmp_path, monkeypatch):
    small, large = write(tmp_path, "a.pcapng", many_interfaces(500)), write(tmp_path, "b.pcapng", many_interfaces(2000))
    python_calls(small)                 # compile or load the walk before counting
    walks = []
    real_walk = walk_module.walk_pcapng

    def counted(*args):
        walks.append(args[6])           # n_if: the interfaces the walk was given
        return real_walk(*args)

    monkeypatch.setattr(walk_module, "walk_pcapng", counted)
    reader = open_capture(large)
    batches = list(reader)
    assert len(batches) == 1 and reader.packets == 1 and len(reader.interfaces) == 2000
    assert batches[0]["iface"].tolist() == [1999] and reader.warnings == []
    # one walk per interface block, plus the one that finds the packet and the one that finds the end
    assert len(walks) == 2000 + 2
    # four times the interfaces, four times the work (plus a constant): rebuilding the section's
    # interface table at every block made it sixteen times
    monkeypatch.setattr(walk_module, "walk_pcapng", real_walk)
    assert python_calls(large) <= 4 * python_calls(small) + 500


def test_sections_cost_constant_work_each_and_share_batches(tmp_path):
    small, large = write(tmp_path, "a.pcapng", many_sections(500)), write(tmp_path, "b.pcapng", many_sections(2000))
    python_calls(small)
    reader = open_capture(large)
    batches = list(reader)
    # the blocks between packets no longer end a batch: 2,000 sections are one batch, not 2,000
    assert [len(b) for b in batches] == [2000] and reader.warnings == []
    assert batches[0]["iface"].tolist() == list(range(2000))
    assert python_calls(large) <= 4 * python_calls(small) + 500

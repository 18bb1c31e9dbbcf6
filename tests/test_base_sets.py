"""The set helpers the loop rules pick a batch's rows with, against numpy's own definitions."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.detect.evidence import append_ends, keep_ends
from detector.detect.grouping import member, rank_by_key, repeated_rows

# small alphabets make repeats and hash collisions (keys equal modulo the table) likely; the extremes of uint64
# and 0 are keys like any other
KEYS = st.lists(st.sampled_from([0, 1, 2, 3, 1 << 32, (1 << 32) + 1, 2**63, 2**64 - 1, 0x9E3779B97F4A7C15])
                | st.integers(0, 2**64 - 1), max_size=300)


@settings(max_examples=300, deadline=None)
@given(KEYS)
def test_repeated_rows_are_the_rows_whose_key_occurs_twice(values):
    keys = np.array(values, dtype=np.uint64)
    distinct, counts = np.unique(keys, return_counts=True)
    expected = np.isin(keys, distinct[counts >= 2])
    assert np.array_equal(repeated_rows(keys), expected)


def test_repeated_rows_of_a_batch_of_copies_and_uniques():
    keys = np.arange(20_000, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    keys[5_000:5_100] = keys[4_999]          # a burst of one frame's copies
    keys[-1] = keys[0]                       # a repeat at both ends of the batch
    got = repeated_rows(keys)
    assert got[4_999:5_100].all() and got[0] and got[-1]
    assert got.sum() == 101 + 2


@settings(max_examples=300, deadline=None)
@given(KEYS, KEYS)
def test_member_is_isin(values, chosen):
    keys = np.array(values, dtype=np.uint64)
    sorted_set = np.unique(np.array(chosen, dtype=np.uint64))
    assert np.array_equal(member(keys, sorted_set), np.isin(keys, sorted_set))


@settings(max_examples=300, deadline=None)
@given(KEYS)
def test_rank_by_key_numbers_groups_by_first_appearance_and_rows_within_them(values):
    keys = np.array(values, dtype=np.uint64)
    group, rank, firsts = rank_by_key(keys)
    first_rows = np.unique(keys, return_index=True)[1]
    assert np.array_equal(firsts, np.sort(first_rows))              # one group per key, in order of appearance
    assert np.array_equal(keys[firsts][group], keys)                # each row's group is its key's
    for g, first in enumerate(firsts.tolist()):
        rows = np.flatnonzero(keys == keys[first])
        assert np.array_equal(rank[rows], np.arange(len(rows)))     # its rows numbered in row order
        assert (group[rows] == g).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 300), max_size=8))
def test_append_ends_is_keep_ends_for_frames_that_follow(chunks):
    # frames as a part's batches bring them: increasing, in chunks
    kept_sorted = kept_appended = np.zeros(0, dtype=np.int64)
    start = 1
    for size in chunks:
        later = np.arange(start, start + size, dtype=np.int64)
        start += size + 3
        kept_sorted, kept_appended = keep_ends(kept_sorted, later), append_ends(kept_appended, later)
        assert np.array_equal(kept_sorted, kept_appended)

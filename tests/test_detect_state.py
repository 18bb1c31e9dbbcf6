"""The columnar state tables every rule folds batches into (detector.detect.state): one module, the rules' copies
gone. A table is a dict of equal-length numpy columns."""
from __future__ import annotations

import numpy as np
import pytest

from detector.detect.state import concat_tables, empty_table, fold_rows, join_adjacent, take_rows

COLUMNS = {"key": np.uint64, "first_ns": np.int64, "count": np.int64}


def table(keys, firsts, counts) -> dict:
    return {"key": np.array(keys, np.uint64), "first_ns": np.array(firsts, np.int64),
            "count": np.array(counts, np.int64)}


def test_an_empty_table_has_every_column_of_its_dtype():
    empty = empty_table(COLUMNS)
    assert list(empty) == list(COLUMNS)
    assert all(len(col) == 0 and col.dtype == COLUMNS[name] for name, col in empty.items())


def test_rows_are_taken_by_index_mask_or_slice():
    t = table([5, 6, 7], [30, 10, 20], [1, 2, 3])
    assert take_rows(t, np.array([2, 0]))["key"].tolist() == [7, 5]
    assert take_rows(t, t["count"] > 1)["first_ns"].tolist() == [10, 20]
    assert take_rows(t, slice(0, 1))["count"].tolist() == [1]


def test_tables_concatenate_in_order_and_typed_when_columns_are_given():
    a, b = table([1], [10], [1]), table([2, 3], [20, 30], [1, 1])
    assert concat_tables(a, b)["key"].tolist() == [1, 2, 3]
    widened = {name: col.astype(np.int32) for name, col in b.items()}
    typed = concat_tables(a, widened, columns=COLUMNS)
    assert typed["first_ns"].dtype == np.int64 and typed["first_ns"].tolist() == [10, 20, 30]
    assert concat_tables(columns=COLUMNS)["key"].dtype == np.uint64
    with pytest.raises(IndexError):
        concat_tables()             # no table, no columns: nothing says what the table holds


def test_folding_rows_is_one_pass_over_both_in_any_order():
    a, b = table([7, 5], [30, 10], [1, 2]), table([5, 9], [5, 40], [3, 1])
    reductions = {"count": np.add}
    one = fold_rows(a, b, "key", reductions)
    other = fold_rows(b, a, "key", reductions)
    # one row per key; the earliest row describes it, the counts add
    assert one["key"].tolist() == [5, 7, 9] and one["first_ns"].tolist() == [5, 30, 40]
    assert one["count"].tolist() == [5, 1, 1]
    assert all(np.array_equal(one[name], other[name]) for name in one)


def test_spans_within_the_larger_gap_join_into_one_run_per_key():
    # key 1: spans at 0-10 and 25-30 with gaps 10 and 20 join (25 <= 10 + 20); 60 is past 30 + 20: a new run.
    # key 2 stays apart from key 1 whatever its times.
    rows = {"key": np.array([1, 1, 1, 2], np.uint64), "first_ns": np.array([60, 0, 25, 5], np.int64),
            "last_ns": np.array([61, 10, 30, 6], np.int64), "gap_ns": np.array([5, 10, 20, 100], np.int64),
            "count": np.array([1, 1, 1, 1], np.int64)}
    runs = join_adjacent(rows, {"last_ns": np.maximum, "count": np.add})
    assert runs["key"].tolist() == [1, 1, 2]
    assert runs["first_ns"].tolist() == [0, 60, 5] and runs["last_ns"].tolist() == [30, 61, 6]
    assert runs["count"].tolist() == [2, 1, 1]
    assert join_adjacent(take_rows(rows, slice(0, 0)), {})["key"].tolist() == []

"""read/validate.duplicate_mask: exactly ``DataFrame.duplicated(keep="first")`` of the op rows read,
on rows sorted by start (pairs compared within runs of equal starts, or the 64-bit mix where a run
is too long) and unsorted (the mix), with NULLs (NaN) equal to NULLs as pandas has them."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from analyze.read import validate

rows = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2), st.integers(0, 2),
                          st.one_of(st.none(), st.integers(0, 1))), max_size=60)


def frame_of(values: list[tuple]) -> pd.DataFrame:
    """Op-table-like columns: start, a process, a stream, a nullable graph node (float with NaN, as
    a NULL integer column reads)."""
    return pd.DataFrame({"start_ns": np.array([v[0] for v in values], dtype="int64"),
                         "global_pid": np.array([v[1] for v in values], dtype="int64"),
                         "stream_id": np.array([v[2] for v in values], dtype="int64"),
                         "graph_node_id": np.array([np.nan if v[3] is None else v[3] for v in values],
                                                   dtype="float64")})


@settings(max_examples=300, deadline=None)
@given(values=rows, sort=st.booleans(), run_max=st.sampled_from([1, 2, 16]))
def test_duplicate_mask_is_pandas_duplicated(values, sort, run_max):
    frame = frame_of(values)
    if sort:
        frame = frame.sort_values("start_ns", kind="stable").reset_index(drop=True)
    want = frame.duplicated(keep="first").to_numpy()
    with pytest.MonkeyPatch.context() as mp:          # runs longer than run_max take the mix
        mp.setattr(validate, "RUN_PAIRS_MAX", run_max)
        got = validate.duplicate_mask(frame, frame["start_ns"].to_numpy())
    np.testing.assert_array_equal(got, want)


def test_equal_timestamps_on_every_rank_are_no_duplicates(monkeypatch):
    """Eight ranks with the same timestamps (the synthetic benchmark file): no row is a repeat, and
    the pairs are told apart by the process column without the mix; one real repeat is found."""
    def no_mix(frame):
        raise AssertionError("runs of 8 rows are compared pair by pair, not mixed")

    monkeypatch.setattr(validate, "row_mix", no_mix)
    n = 10_000
    start = np.repeat(np.arange(n, dtype="int64") * 100, 8)
    frame = pd.DataFrame({"global_pid": np.tile(np.arange(8, dtype="int64"), n), "stream_id": 7,
                          "start_ns": start, "end_ns": start + 50})
    assert not validate.duplicate_mask(frame, start).any()
    # a repeat of row 5 at the end of its run of equal starts: still in start order
    frame = pd.concat([frame.iloc[:8], frame.iloc[[5]], frame.iloc[8:]], ignore_index=True)
    got = validate.duplicate_mask(frame, frame["start_ns"].to_numpy())
    assert np.flatnonzero(got).tolist() == [8]


ranges = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(0, 3)), max_size=80)


@settings(max_examples=300, deadline=None)
@given(values=ranges, run_max=st.sampled_from([1, 2, 16]))
def test_identical_range_count_is_the_sorted_neighbours(values, run_max):
    """run/checks.identical_range_count (ranges in start order, pairs within runs of equal starts;
    longer runs: the full sort) counts the repeats of (thread, start, end) that sorting every range
    by all three and comparing neighbours counts, in whatever order the ranges come."""
    from analyze.run import checks

    tid, start, end = (np.array([v[i] for v in values], dtype="int64") for i in range(3))
    end = start + end
    want = len(values) - len(set(values and zip(tid.tolist(), start.tolist(), end.tolist())))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(validate, "RUN_PAIRS_MAX", run_max)
        assert checks.identical_range_count(tid, start, end) == want


def test_identical_ranges_note_counts_repeats_across_threads():
    """Three threads with equal bounds (no repeat across threads); each thread's (10, 15) twice, and
    three rows added again: 3 + 3 repeats."""
    from analyze import notes as N
    from analyze.run import checks

    base = pd.DataFrame({"global_tid": [1, 2, 3] * 4, "start_ns": [10] * 6 + [20] * 6,
                         "end_ns": [15] * 6 + [25] * 3 + [26] * 3})
    frame = pd.concat([base, base.iloc[[0, 4, 8]]], ignore_index=True).sample(frac=1, random_state=3)
    (note,) = checks.identical_ranges(frame)
    assert note.code == N.IDENTICAL_RANGES and note.count == 3 + 3
    assert checks.identical_ranges(base.drop_duplicates()) == []

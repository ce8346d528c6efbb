"""analyze/codes.py: factorize_objects gives exactly pd.factorize's codes and uniques (the same
objects, first-appearance order), whatever mix of shared and distinct objects, NA kinds, types and
strides the column has; the identity path is taken where it pays and pd.factorize's own elsewhere."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from analyze import codes

POOL = ["draft", "verify", "draft_extend", "", "NCCL", "é", None, float("nan"), pd.NA, 3, 3.0, ("a", 1)]


def same_unique(a, b) -> bool:
    """The same object, or both NA."""
    return a is b or (pd.isna(a) is True and pd.isna(b) is True)


def assert_as_pandas(values: np.ndarray, use_na_sentinel: bool) -> None:
    want_codes, want_uniq = pd.factorize(values, use_na_sentinel=use_na_sentinel)
    got_codes, got_uniq = codes.factorize_objects(values, use_na_sentinel=use_na_sentinel)
    np.testing.assert_array_equal(got_codes, want_codes)
    assert got_codes.dtype == want_codes.dtype
    assert type(got_uniq) is type(want_uniq) and len(got_uniq) == len(want_uniq)
    assert all(same_unique(a, b) for a, b in zip(got_uniq, want_uniq)), (list(got_uniq), list(want_uniq))


def object_column(picks: list[int], copies: list[bool]) -> np.ndarray:
    """Rows from POOL; where ``copies`` says so a text row is a new string object equal to the pooled
    one (a reader that does not share texts), a NaN row a new NaN."""
    out = np.empty(len(picks), dtype=object)
    for i, (p, fresh) in enumerate(zip(picks, copies)):
        v = POOL[p]
        if fresh and isinstance(v, str):
            v = (v + "x")[:-1]          # equal, not the same object (CPython shares the empty text)
        elif fresh and isinstance(v, float) and math.isnan(v):
            v = float("nan")
        out[i] = v
    return out


@settings(max_examples=200, deadline=None)
@given(picks=st.lists(st.integers(0, len(POOL) - 1), max_size=80),
       copies=st.lists(st.booleans(), min_size=80, max_size=80),
       step=st.sampled_from([1, 2, 3]), use_na_sentinel=st.booleans(), share=st.sampled_from([1, 16]))
def test_identity_path_equals_pandas(picks, copies, step, use_na_sentinel, share):
    column = object_column(picks, copies[:len(picks)])
    with pytest.MonkeyPatch.context() as mp:         # every length takes the identity path
        mp.setattr(codes, "IDENTITY_MIN_ROWS", 0)
        mp.setattr(codes, "DISTINCT_SHARE", share)
        assert_as_pandas(column[::step], use_na_sentinel)


def test_long_shared_column_takes_the_identity_path(monkeypatch):
    """A column of a few shared texts (as the readers give them) is coded by identity: pd.factorize
    sees the distinct objects only; equal texts held by other objects join their code."""
    rng = np.random.default_rng(7)
    pool = np.array(["draft_step", "verify", "decode_cycle", None, "allreduce"], dtype=object)
    column = pool[rng.integers(0, len(pool), 100_000)]
    column[5::1000] = ["".join(["ver", "ify"]) for _ in range(len(column[5::1000]))]   # new objects
    seen = []
    real = pd.factorize

    def spy(values, *a, **k):
        seen.append(len(values))
        return real(values, *a, **k)

    monkeypatch.setattr(codes.pd, "factorize", spy)
    for sentinel in (True, False):
        got_codes, got_uniq = codes.factorize_objects(column, use_na_sentinel=sentinel)
        want_codes, want_uniq = real(column, use_na_sentinel=sentinel)
        np.testing.assert_array_equal(got_codes, want_codes)
        assert len(got_uniq) == len(want_uniq) and all(a == b or same_unique(a, b) for a, b in zip(got_uniq, want_uniq))
    # per call: the addresses (every row), then the distinct objects (5 pooled + the fresh "verify"s)
    assert seen[0] == len(column) and seen[1] == 5 + len(column[5::1000])


def test_mostly_distinct_or_short_columns_go_to_pandas(monkeypatch):
    seen = []
    real = pd.factorize
    monkeypatch.setattr(codes.pd, "factorize", lambda v, *a, **k: (seen.append(v.dtype), real(v, *a, **k))[1])
    distinct = np.array([f"t{i}" for i in range(100_000)], dtype=object)
    assert_as_pandas(distinct, True)
    assert seen[-1] == object                                # the whole column by value after the addresses
    seen.clear()
    short = np.array(["a", "b", "a"], dtype=object)
    codes.factorize_objects(short)
    assert seen == [np.dtype(object)]                        # no address pass
    seen.clear()
    ints = np.arange(100_000) % 7
    np.testing.assert_array_equal(codes.factorize_objects(ints)[0], real(ints)[0])
    assert seen == [ints.dtype]


@pytest.mark.parametrize("lo,hi,want", [(0, 0, np.int8), (-1, 127, np.int8), (0, 255, np.uint8),
                                        (-1, 255, np.int16), (-1, 32_767, np.int16), (0, 65_535, np.uint16),
                                        (-1, 65_535, np.int32), (0, 2 ** 32 - 1, np.uint32),
                                        (-1, 2 ** 32 - 1, np.int64), (-2 ** 40, 0, np.int64)])
def test_code_dtype_is_the_narrowest_holding_the_bounds(lo, hi, want):
    assert codes.code_dtype(lo, hi) == np.dtype(want)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 70_000), st.integers(-3, 3), st.integers(0, 3000), st.booleans(), st.integers(0, 2 ** 31))
def test_stable_order_equals_the_stable_argsort(n_codes, offset, n, bounds_given, seed):
    """Equal to ``np.argsort(codes, kind="stable")`` of the int64 codes (ties in row order) across
    every width: a few codes, 256 and 65,536 boundaries, negatives, bounds given or found."""
    rng = np.random.default_rng(seed)
    values = rng.integers(offset, offset + n_codes, size=n).astype(np.int64)
    lo, hi = (offset, offset + n_codes - 1) if bounds_given else (None, None)
    got = codes.stable_order(values, lo, hi)
    np.testing.assert_array_equal(got, np.argsort(values, kind="stable"))
    if n:
        width = codes.code_dtype(int(values.min()), int(values.max())).itemsize
        assert width <= (1 if n_codes <= 128 else 2 if n_codes <= 32_768 else 4)


def test_stable_order_of_nothing():
    assert codes.stable_order(np.zeros(0, dtype=np.int64)).dtype == np.intp
    assert len(codes.stable_order(np.zeros(0, dtype=np.int64), 0, -1)) == 0

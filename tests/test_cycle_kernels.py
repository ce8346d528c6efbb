"""views.kernels.cycle_kernels_of (a --json table, and diff's kernel lists): integer codes and one sort,
equal to pandas' groupby over the texts it replaced (10M ops: 20 s and 8.7 GB peak before); values that
are no text (None, NaN, numbers) go to that groupby itself."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyze.views import kernels as K

TEXTS = ["gemm", "None", "nan", "_fwd_kernel", "draft", "verify", ""]


def _ops(rng, n, phases, names) -> pd.DataFrame:
    start = rng.integers(0, 10 ** 15, n)
    return pd.DataFrame({"rank": rng.choice([0, 3, 7], n).astype("int32"), "phase": pd.Series(phases, dtype=object),
                         "name": pd.Series(names, dtype=object), "start_ns": start,
                         "end_ns": start + rng.integers(0, 10 ** 9, n), "cycle_range": rng.integers(-1, 5, n).astype("int32")})


def _reference(ops: pd.DataFrame) -> pd.DataFrame:
    return K._cycle_kernels_by_groupby(ops[ops["cycle_range"].to_numpy() >= 0])


def _fast(monkeypatch, ops: pd.DataFrame) -> pd.DataFrame:
    """cycle_kernels_of with the groupby path forbidden (the codes must serve it)."""
    def forbidden(*args, **kwargs):
        raise AssertionError("the groupby path was taken")

    with monkeypatch.context() as m:
        m.setattr(K, "_cycle_kernels_by_groupby", forbidden)
        return K.cycle_kernels_of(ops)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 2 ** 32 - 1), shared=st.booleans())
def test_codes_equal_the_groupby_of_texts(n, seed, shared):
    """Ranks, phases and names in any mix (equal texts held by different string objects one group),
    ops outside cycles left out, groups in order of first appearance, counts and exact integer sums."""
    rng = np.random.default_rng(seed)
    names = [TEXTS[i] for i in rng.integers(0, len(TEXTS), n)]
    if not shared:                        # equal texts held by different string objects
        names = [("" + t + " ")[:-1] for t in names]
    ops = _ops(rng, n, [TEXTS[i] for i in rng.integers(0, len(TEXTS), n)], names)
    ops.loc[0, "cycle_range"] = 0                   # one op in a cycle at least (none: the empty table)
    with pytest.MonkeyPatch.context() as m:
        got = _fast(m, ops)
    # values and order equal (pandas' own text dtype of a groupby key varies with its groups: object or str)
    pd.testing.assert_frame_equal(got, _reference(ops), check_dtype=False, check_index_type=False)


@pytest.mark.parametrize("names", [[1, 1.0], [True, 1], [0.0, -0.0], [b"k", "b'k'"], ["a", None], ["a", np.nan]],
                         ids=["int-float", "bool-int", "zeros", "bytes", "None", "NaN"])
def test_values_that_are_no_text_go_to_the_groupby(names):
    """Values that compare equal but print differently, and missing ones (whose groups pandas 2 and 3
    keep or drop differently): the groupby's own table, whatever the pandas."""
    rng = np.random.default_rng(3)
    ops = _ops(rng, 40, ["verify"] * 40, [names[i % len(names)] for i in range(40)]).assign(cycle_range=0)
    pd.testing.assert_frame_equal(K.cycle_kernels_of(ops), _reference(ops))


def test_a_large_table_is_coded_by_identity(monkeypatch):
    """Above factorize_objects' row threshold (texts coded by the object first): the same table."""
    rng = np.random.default_rng(1)
    n = 100_000
    names = np.array(["a", "b", "nan", "c"], dtype=object)[rng.integers(0, 4, n)]
    ops = pd.DataFrame({"rank": rng.integers(0, 8, n), "phase": pd.Series(names[::-1], dtype=object),
                        "name": pd.Series(names, dtype=object), "start_ns": np.arange(n), "end_ns": np.arange(n) + 5,
                        "cycle_range": rng.integers(-1, 3, n)})
    got = _fast(monkeypatch, ops)
    pd.testing.assert_frame_equal(got, _reference(ops), check_dtype=False)
    assert got["instances"].sum() == int((ops["cycle_range"] >= 0).sum()) and len(got) == 8 * 4 * 4

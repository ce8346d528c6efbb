"""views.kernels.cycle_kernels_of (a --json table, and diff's kernel lists): integer codes and one sort,
equal to pandas' groupby over the texts it replaced (10M ops: 20 s and 8.7 GB peak before)."""
from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from analyze.views import kernels as K

TEXTS = ["gemm", "None", None, np.nan, "nan", "_fwd_kernel", "draft", "verify"]


@settings(max_examples=150, deadline=None)
@given(n=st.integers(0, 300), seed=st.integers(0, 2 ** 32 - 1), shared=st.booleans())
def test_codes_equal_the_groupby_of_texts(n, seed, shared):
    """Ranks, phases and names in any mix (None, NaN and the texts "None" / "nan" that astype(str)
    makes of them fall in one group each), ops outside cycles left out, groups in order of first
    appearance, counts and exact integer sums."""
    rng = np.random.default_rng(seed)
    pick = [TEXTS[i] for i in rng.integers(0, len(TEXTS), n)]
    if not shared:                        # equal texts held by different string objects
        pick = [("" + t + " ")[:-1] if isinstance(t, str) else t for t in pick]
    start = rng.integers(0, 10 ** 15, n)
    ops = pd.DataFrame({"rank": rng.choice([0, 3, 7], n).astype("int32"),
                        "phase": pd.Series([TEXTS[i] for i in rng.integers(0, len(TEXTS), n)], dtype=object),
                        "name": pd.Series(pick, dtype=object), "start_ns": start,
                        "end_ns": start + rng.integers(0, 10 ** 9, n),
                        "cycle_range": rng.integers(-1, 5, n).astype("int32")})
    got = K.cycle_kernels_of(ops)
    if not n:                                        # no per-op rows: the table's columns, no row
        assert got.empty and list(got.columns) == K.CYCLE_KERNEL_COLUMNS
        return
    # values and order equal (pandas' own text dtype of a groupby key varies with its groups: object or str)
    want = K._cycle_kernels_by_groupby(ops[ops["cycle_range"].to_numpy() >= 0])
    pd.testing.assert_frame_equal(got, want, check_dtype=False, check_index_type=False)


def test_a_large_table_is_coded_by_identity():
    """Above factorize_objects' row threshold (texts coded by the object first): the same table."""
    rng = np.random.default_rng(1)
    n = 100_000
    names = np.array(["a", "b", None, "c"], dtype=object)[rng.integers(0, 4, n)]
    ops = pd.DataFrame({"rank": rng.integers(0, 8, n), "phase": pd.Series(names[::-1], dtype=object),
                        "name": pd.Series(names, dtype=object), "start_ns": np.arange(n), "end_ns": np.arange(n) + 5,
                        "cycle_range": rng.integers(-1, 3, n)})
    got = K.cycle_kernels_of(ops)
    pd.testing.assert_frame_equal(got, K._cycle_kernels_by_groupby(ops[ops["cycle_range"] >= 0]))
    counted = (ops["cycle_range"] >= 0) & ops["name"].notna() & ops["phase"].notna()   # groupby drops NA keys
    assert got["instances"].sum() == int(counted.sum()) and len(got) == 8 * 3 * 3

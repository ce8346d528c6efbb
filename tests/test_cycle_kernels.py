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
@given(n=st.integers(1, 300), seed=st.integers(0, 2 ** 32 - 1), shared=st.booleans(),
       block=st.sampled_from([1, 7, 64, 10 ** 9]))
def test_codes_equal_the_groupby_of_texts(n, seed, shared, block):
    """Ranks, phases and names in any mix (equal texts held by different string objects one group),
    ops outside cycles left out, groups in order of first appearance, counts and exact integer sums;
    the table coded a block of rows at a time (BLOCK_ROWS) or in one."""
    rng = np.random.default_rng(seed)
    names = [TEXTS[i] for i in rng.integers(0, len(TEXTS), n)]
    if not shared:                        # equal texts held by different string objects
        names = [("" + t + " ")[:-1] for t in names]
    ops = _ops(rng, n, [TEXTS[i] for i in rng.integers(0, len(TEXTS), n)], names)
    ops.loc[0, "cycle_range"] = 0                   # one op in a cycle at least (none: the empty table)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(K, "BLOCK_ROWS", block)
        got = _fast(m, ops)
    # values and order equal (pandas' own text dtype of a groupby key varies with its groups: object or str)
    pd.testing.assert_frame_equal(got, _reference(ops), check_dtype=False, check_index_type=False)


@pytest.mark.parametrize("names", [[1, 1.0], [True, 1], [0.0, -0.0], [b"k", "b'k'"], ["a", None], ["a", np.nan]],
                         ids=["int-float", "bool-int", "zeros", "bytes", "None", "NaN"])
def test_values_that_are_no_text_go_to_the_groupby(names, monkeypatch):
    """Values that compare equal but print differently, and missing ones (whose groups pandas 2 and 3
    keep or drop differently): the groupby's own table, whatever the pandas; in blocks too (blocks of
    texts alone coded, the others grouped: summed into the same groups)."""
    rng = np.random.default_rng(3)
    ops = _ops(rng, 40, ["verify"] * 40, [names[i % len(names)] for i in range(40)]).assign(cycle_range=0)
    want = _reference(ops)
    pd.testing.assert_frame_equal(K.cycle_kernels_of(ops), want)
    monkeypatch.setattr(K, "BLOCK_ROWS", 3)
    pd.testing.assert_frame_equal(K.cycle_kernels_of(ops), want, check_dtype=False)


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


REAL = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "real"


@pytest.mark.parametrize("reports", [["h200_4proc_eager.sqlite"], ["sglang_graphs.sqlite"],
                                     [f"h200_shim_4rank_rank{i}.sqlite" for i in range(4)]],
                         ids=["eager-4proc", "sglang-graphs", "4-reports"])
def test_chunked_analysis_has_the_cycle_kernels_of_the_whole(monkeypatch, reports):
    """A report analysed in chunks keeps no per-op table; its cycle_kernels (the --json table, diff's kernel
    lists) come from the spilled op store, a rank and a part at a time: the same rows and figures as the
    whole analysis' (dozens of chunks, cycles cut between them; several reports combined)."""
    import analyze
    from analyze import notes as N
    from analyze.run import api
    from analyze.tools import sides
    from analyze.views.registry import get

    paths = [str(REAL / r) for r in reports]
    if not all(__import__("os").path.exists(p) for p in paths):
        pytest.skip("real fixtures not unpacked")
    target = paths if len(paths) > 1 else paths[0]
    whole = analyze.load(target)
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 97)
    chunked = analyze.load(target, memory_budget=1)
    assert chunked.gpu_ops.empty and chunked.ops.frame is None
    assert min(n.count for n in chunked.notes if n.code == N.CHUNKED) >= 3
    key = ["rank", "phase", "name"]
    want = get(whole, "cycle_kernels")
    got = get(chunked, "cycle_kernels")
    assert len(want) >= 20 and int(want["instances"].sum()) > 0
    pd.testing.assert_frame_equal(got.sort_values(key).reset_index(drop=True),
                                  want.sort_values(key).reset_index(drop=True), check_dtype=False)
    # diff's kernel lists: the ops inside decode cycles, not every op of the report (set-up included)
    side_w, side_c = sides.side_from_analysis(whole), sides.side_from_analysis(chunked)
    pd.testing.assert_frame_equal(side_c.kernels.sort_values(key).reset_index(drop=True),
                                  side_w.kernels.sort_values(key).reset_index(drop=True), check_dtype=False)
    assert int(side_c.kernels["instances"].sum()) < len(whole.gpu_ops)
    assert not any("no per-op table" in n for n in side_c.notes)

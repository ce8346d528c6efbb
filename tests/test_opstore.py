"""The one op store (analyze/opstore.py): the per-op table in memory and the spilled Parquet file of a
chunked analysis answer every query alike; pickled, a spilled store carries its file; reports combine."""
from __future__ import annotations

import gc
import os
import pickle

import numpy as np
import pandas as pd
import pytest

from analyze import opstore
from analyze.attribute.attribution import KIND_NAMES

PHASES = ["draft", "verify", "draft_extend", "other"]
NAMES = np.array(["gemm", "_fwd_kernel", "allreduce", "rmsnorm"], dtype=object)


def _table(n=3000, seed=0) -> pd.DataFrame:
    """A per-op table of three ranks (ties in start included), graph nodes on some, ops outside cycles."""
    rng = np.random.default_rng(seed)
    start = np.sort(rng.integers(0, 1_000_000, n)) // 7 * 7
    ph, nc, kc = rng.integers(0, 4, n), rng.integers(0, 4, n), rng.choice([0, 0, 0, 1, 3], n)
    return pd.DataFrame({
        "kind": pd.Categorical.from_codes(kc, categories=list(KIND_NAMES)),
        "rank": rng.choice([0, 2, 5], n).astype("int32"), "start_ns": start, "end_ns": start + rng.integers(0, 3000, n),
        "phase": pd.Series(np.array(PHASES, dtype=object)[ph], dtype=object),
        "name": pd.Series(NAMES[nc], dtype=object),
        "cycle_range": np.where(rng.random(n) < 0.2, -1, start // 50_000).astype("int32"),
        "graph_node_id": pd.array(np.where(rng.random(n) < 0.3, 7, pd.NA), dtype="Int64"),
        "phase_code": ph, "name_code": nc, "kind_code": kc})


def _spilled(t: pd.DataFrame, cuts=(-10**9, 250_000, 600_000, 10**9)) -> opstore.SpilledOps:
    """The table spilled as a chunked map step writes it: time chunks, a rank each, in start order."""
    def parts():
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            chunk = t[(t["start_ns"] >= lo) & (t["start_ns"] < hi)]
            for rank, g in chunk.groupby("rank", sort=True):
                g = g.sort_values("start_ns", kind="stable")
                yield int(rank), {"start_ns": g["start_ns"].to_numpy(), "end_ns": g["end_ns"].to_numpy(),
                                  "phase_code": g["phase_code"].to_numpy(), "name_code": g["name_code"].to_numpy(),
                                  "kind_code": g["kind_code"].to_numpy(), "cycle_range": g["cycle_range"].to_numpy(),
                                  "graph_node": g["graph_node_id"].notna().to_numpy()}
    return opstore.spill(parts(), PHASES, NAMES, KIND_NAMES)


QUERIES = [dict(), dict(ranks=[2]), dict(ranks=[5, 0]), dict(window=(300_000, 310_000)), dict(in_cycles=True),
           dict(ranks=[0], window=(240_000, 700_000), in_cycles=True), dict(ranks=[9]), dict(window=(2 * 10**6, 3 * 10**6))]


@pytest.mark.parametrize("q", QUERIES, ids=[str(q) for q in QUERIES])
def test_spilled_and_in_memory_stores_answer_alike(q):
    t = _table()
    whole, spilled = opstore.FrameOps(t), _spilled(t)
    cols = list(opstore.COLUMNS)
    a, b = whole.query(cols, **q), spilled.query(cols, **q)
    pd.testing.assert_frame_equal(a, b)
    # the answer by hand: the rows asked for, in (rank, start) order, ties as read
    keep = np.ones(len(t), dtype=bool)
    if "ranks" in q:
        keep &= t["rank"].isin(q["ranks"]).to_numpy()
    if "window" in q:
        keep &= ((t["end_ns"] > q["window"][0]) & (t["start_ns"] < q["window"][1])).to_numpy()
    if q.get("in_cycles"):
        keep &= (t["cycle_range"] >= 0).to_numpy()
    want = t[keep].sort_values(["rank", "start_ns"], kind="stable")
    assert a["start_ns"].tolist() == want["start_ns"].tolist() and a["name"].tolist() == want["name"].tolist()
    assert a["graph_node"].tolist() == want["graph_node_id"].notna().tolist()
    assert a["kind"].tolist() == want["kind"].tolist() and a["rank"].tolist() == want["rank"].tolist()


def test_scan_gives_a_rank_at_a_time_in_time_order_and_where_filters_part_by_part():
    t = _table()
    spilled = _spilled(t)
    parts = list(spilled.scan(["rank", "start_ns"]))
    assert len(parts) == 9                                       # 3 chunks x 3 ranks
    ranks = [int(p["rank"].iloc[0]) for p in parts]
    assert ranks == sorted(ranks) and all(p["rank"].nunique() == 1 for p in parts)
    for r in (0, 2, 5):
        s = np.concatenate([p["start_ns"].to_numpy() for p in parts if p["rank"].iloc[0] == r])
        assert (np.diff(s) >= 0).all()
    calls = []

    def draft(frame):
        calls.append(len(frame))
        return (frame["phase"] == "draft").to_numpy()

    got = spilled.query(["rank", "phase", "start_ns"], where=draft)
    assert len(calls) == 9 and max(calls) < len(t) / 2           # called per part, never on the whole
    assert len(got) == int((t["phase"] == "draft").sum()) and set(got["phase"]) == {"draft"}
    with pytest.raises(KeyError, match="no column duration_ns"):
        spilled.query(["duration_ns"])
    assert spilled.extent() == opstore.FrameOps(t).extent() == (int(t["start_ns"].min()), int(t["end_ns"].max()))
    assert len(spilled) == len(t) and spilled.frame is None


def test_a_pickled_store_carries_its_file_and_each_copy_owns_its_own():
    t = _table(500)
    spilled = _spilled(t)
    path = spilled.path
    copy = pickle.loads(pickle.dumps(spilled))
    assert copy.path != path and os.path.exists(copy.path)
    del spilled
    gc.collect()
    assert not os.path.exists(path)                               # the original's file went with it
    pd.testing.assert_frame_equal(copy.query(list(opstore.COLUMNS)), opstore.FrameOps(t).query(list(opstore.COLUMNS)))
    other = copy.path
    del copy
    gc.collect()
    assert not os.path.exists(other)


def test_reports_combine_by_rank_with_their_clock_offsets():
    t = _table()
    low, high = t[t["rank"] < 3].reset_index(drop=True), t[t["rank"] == 5].reset_index(drop=True)
    spilled = _spilled(high.assign(start_ns=high["start_ns"] - 1000, end_ns=high["end_ns"] - 1000))
    spilled.offset_ns = 1000                                      # the reducer's clock offset of that report
    both = opstore.combined([opstore.FrameOps(low), spilled])
    cols = ["rank", "start_ns", "end_ns", "kind", "phase", "name", "cycle_range", "graph_node"]
    pd.testing.assert_frame_equal(both.query(cols), opstore.FrameOps(t).query(cols))
    pd.testing.assert_frame_equal(both.query(["start_ns"], window=(500_000, 520_000)),
                                  opstore.FrameOps(t).query(["start_ns"], window=(500_000, 520_000)))
    assert both.frame is None and len(both) == len(t) and both.extent() == opstore.FrameOps(t).extent()
    assert opstore.combined([opstore.FrameOps(t)]).frame is t
    empty = opstore.FrameOps(None).query(["rank", "kind", "name"])
    assert list(empty.columns) == ["rank", "kind", "name"] and empty.empty


def test_large_parts_are_cut_into_row_groups_the_index_knows(monkeypatch):
    """A part longer than SPILL_GROUP_ROWS (a writer cuts row groups it finds too long, and the index
    has a row a group): cut into groups of that many, every one in the index; the answers unchanged."""
    import pyarrow.parquet as pq

    monkeypatch.setattr(opstore, "SPILL_GROUP_ROWS", 97)
    t = _table()
    spilled = _spilled(t)
    assert pq.ParquetFile(spilled.path).num_row_groups == len(spilled.index) > 9
    assert spilled.index["rows"].max() == 97
    cols = list(opstore.COLUMNS)
    for q in QUERIES:
        pd.testing.assert_frame_equal(spilled.query(cols, **q), opstore.FrameOps(t).query(cols, **q))


def test_a_forked_child_leaves_its_parents_file_alone():
    """The finalizer that removes a spilled store's file runs in the process that made the store only:
    a forked child exiting normally (which runs the finalizers it inherited) leaves the file."""
    spilled = _spilled(_table(200))
    pid = os.fork()
    if pid == 0:                                  # the child: what a normal exit runs (atexit: finalizers)
        import atexit
        try:
            atexit._run_exitfuncs()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0 and os.path.exists(spilled.path)
    assert len(spilled.query(["rank"])) == 200

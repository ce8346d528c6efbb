"""The GPU op parts read into their places in the op table's columns (read/report.OpTableBuilder.for_plan
and .slot, pages.read_table(into=)): with two readers each part of rowids [lo, hi) is written by
pages.py straight into rows [first, first + hi - lo) of the table's columns, and the builder only
moves a part up behind a shorter one before it. The tables are the same as one reader's (no parts,
no places) and the stdlib reader's (no writing in place: every part copied), on a real H200 export,
a copy with a third of its kernel rows deleted (parts shorter than their places), and a copy with a
row of bad timestamps and a repeated row (parts the validation filters: copied, not in place)."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyze.read import fastread, report

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"


def _copy(tmp_path, name: str, *statements: str) -> str:
    path = tmp_path / f"{name}.sqlite"
    shutil.copyfile(REAL / "h200_4proc_eager.sqlite", path)
    with sqlite3.connect(path) as conn:
        for sql in statements:
            conn.execute(sql)
    return str(path)


@pytest.fixture(params=["export", "gaps", "filtered"])
def export(request, tmp_path):
    if request.param == "export":
        return _copy(tmp_path, "export")
    if request.param == "gaps":
        return _copy(tmp_path, "gaps", f"DELETE FROM {KERNELS} WHERE rowid % 3 = 0")
    return _copy(tmp_path, "filtered", f"UPDATE {KERNELS} SET end = start - 5 WHERE rowid = 700",
                 f"INSERT INTO {KERNELS} SELECT * FROM {KERNELS} WHERE rowid = 1500")


def _in_place(monkeypatch) -> list[bool]:
    """Every column a part hands the builder: written in place by its reader or not."""
    seen: list[bool] = []
    real = report._starts_at
    monkeypatch.setattr(report, "_starts_at", lambda src, dst, first: seen.append(real(src, dst, first)) or seen[-1])
    return seen


def test_parts_read_into_their_places_make_the_same_table(export, monkeypatch):
    monkeypatch.delenv("SPECPROF_READER", raising=False)
    whole = report.read_report(export, threads=1)            # one read per op table: no places
    monkeypatch.setattr(report, "SPLIT_MIN_ROWS", 1)         # the kernels cut in 4 rowid ranges
    with report.open_report(export) as conn:
        plan = report.plan_gpu_op_reads(conn, split=4)
        builder = report.OpTableBuilder.for_plan(plan)
    kernel_parts = [p for p in plan if p.kind == "kernel"]
    assert len(kernel_parts) == 4 and len(builder.slots) == len(plan)
    assert [s for _, s in builder.slots] == [p.rowid_hi - p.rowid_lo for p in plan]
    seen = _in_place(monkeypatch)
    fastread.SERVED.clear()
    split = report.read_report(export, threads=2)
    assert set(fastread.SERVED) == {"pages"}
    pd.testing.assert_frame_equal(split.gpu_ops, whole.gpu_ops)
    assert split.gpu_ops.attrs == whole.gpu_ops.attrs
    assert split.meta == whole.meta                          # what the validation left out, the same
    n_cols = len(report._OP_INT64)
    assert len(seen) == n_cols * len(plan)                   # every part handed over (none empty here)
    # a memcpy part's name is the literal NULL (no column to write in place): that column is copied
    copied = len(plan) - len(kernel_parts)
    if export.endswith("filtered.sqlite"):
        # the part with the bad row is filtered, so copied; the repeat (of a row of another part)
        # is dropped when the parts are joined
        assert len(seen) - sum(seen) == copied + n_cols
        assert len(split.meta[report.EXCLUDED]) == 2
    else:                                                    # every other column written in place
        assert len(seen) - sum(seen) == copied
    monkeypatch.setenv("SPECPROF_READER", "stdlib")          # nothing in place: each part copied
    seen.clear()
    by_stdlib = report.read_report(export, threads=2)
    assert not any(seen) and len(seen) == n_cols * len(plan)
    pd.testing.assert_frame_equal(by_stdlib.gpu_ops, whole.gpu_ops, check_dtype=False)


def test_sparse_rowids_get_no_places(tmp_path):
    """Rowid ranges holding over twice the rows read copy their parts (places would be mostly empty)."""
    path = _copy(tmp_path, "strided", f"UPDATE {KERNELS} SET rowid = -rowid", f"UPDATE {KERNELS} SET rowid = -rowid * 1000")
    with report.open_report(path) as conn:
        plan = [p for p in report.plan_gpu_op_reads(conn, split=4) if p.kind == "kernel"]
    assert plan and report.OpTableBuilder.for_plan(plan).slots == []


def test_a_part_moves_up_behind_a_shorter_one():
    """Two parts of one table, places of 5 and 4 rows: the first holds 3 rows, so the second (written
    in place) moves up 2 rows; a part over its place is refused."""
    kinds = ["kernel", "kernel"]
    plan = [report.OpRead(k, "T", "SELECT 1 WHERE 1", lo, hi, hi - lo) for k, (lo, hi) in zip(kinds, [(1, 6), (6, 10)])]
    b = report.OpTableBuilder.for_plan(plan)
    assert b.slots == [(0, 5), (5, 4)]

    def part(i, rows, start):
        cols = {c: np.arange(start, start + rows, dtype="int64") for c in report._OP_INT64}
        slot = b.slot(i)
        for c in report._OP_INT64:                            # the reader writes in place
            slot[c][:rows] = cols[c]
            cols[c] = slot[c][:rows]
        return pd.DataFrame({**cols, "graph_node_id": np.full(rows, np.nan)})

    b.add("kernel", part(0, 3, 100), slot=0)
    b.add("kernel", part(1, 4, 200), slot=1)
    ops = b.table()
    assert ops["start_ns"].tolist() == [100, 101, 102, 200, 201, 202, 203]
    assert ops["graph_node_id"].isna().all() and len(ops) == 7
    big = report.OpTableBuilder.for_plan(plan)
    with pytest.raises(ValueError, match="rows in a place of"):
        big.add("kernel", pd.DataFrame({**{c: np.arange(6) for c in report._OP_INT64},
                                        "graph_node_id": np.zeros(6)}), slot=0)

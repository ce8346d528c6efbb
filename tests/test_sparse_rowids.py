"""Tables whose rowids have gaps (rows deleted, rowids set by hand: nsys itself writes 1, 2, 3, ...)
are sized, split and cut by their rows, not by their rowid range (read/report.rowid_span,
rowid_cuts): a real H200 export with its kernel and NVTX rows moved 2**40 rowids up from the middle
gives the same tables, notes and chunks as the export itself, whole and under a budget. Before,
a span of 2**40 rowids sized arrays of 2**40 rows and cut 2**40 / chunk rows chunks (minutes, or
an allocation error)."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from analyze import notes as N
from analyze.read import report
from analyze.read.connection import open_report
from analyze.run import api, chunks

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
GAP = 2 ** 40
TABLES = ("ranks", "phases", "kernels", "totals", "nvtx_projection", "cycles", "collectives", "alignment")
KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(the real eager 4-process export, a copy with the upper half of its kernel and NVTX rows
    moved GAP rowids up)."""
    d = tmp_path_factory.mktemp("sparse")
    orig, sparse = d / "orig.sqlite", d / "sparse.sqlite"
    shutil.copyfile(REAL / "h200_4proc_eager.sqlite", orig)
    shutil.copyfile(orig, sparse)
    conn = sqlite3.connect(sparse)
    for table in (KERNELS, "NVTX_EVENTS"):
        conn.execute(f"UPDATE {table} SET rowid = rowid + {GAP} WHERE rowid > (SELECT max(rowid) / 2 FROM {table})")
    conn.commit()
    conn.close()
    return str(orig), str(sparse)


@pytest.fixture(scope="module")
def strided(pair, tmp_path_factory):
    """The export with every rowid of its op, call and NVTX tables multiplied by 1000: gaps
    everywhere, the range still short enough for the file to hold."""
    path = tmp_path_factory.mktemp("strided") / "strided.sqlite"
    shutil.copyfile(pair[0], path)
    conn = sqlite3.connect(path)
    for table in (KERNELS, "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
        conn.execute(f"UPDATE {table} SET rowid = -rowid")
        conn.execute(f"UPDATE {table} SET rowid = -rowid * 1000")
    conn.commit()
    conn.close()
    return str(path)


def _count(conn, table: str, lo: int, hi: int) -> int:
    return conn.execute(f"SELECT count(*) FROM {table} WHERE rowid >= ? AND rowid < ?", (lo, hi)).fetchone()[0]


def test_span_counts_rows_where_rowids_have_gaps(pair):
    orig, sparse = pair
    with sqlite3.connect(orig) as a, sqlite3.connect(sparse) as b:
        dense, gapped = report.rowid_span(a, KERNELS), report.rowid_span(b, KERNELS)
        n = a.execute(f"SELECT count(*) FROM {KERNELS}").fetchone()[0]
    assert dense == report.RowidSpan(1, n + 1, n, True)
    assert gapped.rows == n and not gapped.dense and gapped.hi - gapped.lo > GAP


def test_cuts_hold_the_asked_rows(pair):
    orig, sparse = pair
    with sqlite3.connect(orig) as a, sqlite3.connect(sparse) as b:
        dense = report.rowid_span(a, KERNELS)
        assert report.rowid_cuts(a, KERNELS, dense, 500) == list(range(1, dense.hi, 500))
        span = report.rowid_span(b, KERNELS)
        cuts = report.rowid_cuts(b, KERNELS, span, 500)
        counts = [_count(b, KERNELS, lo, hi) for lo, hi in zip(cuts, cuts[1:] + [span.hi])]
    assert counts[:-1] == [500] * (len(counts) - 1) and 0 < counts[-1] <= 500
    assert sum(counts) == span.rows


def test_op_reads_split_by_rows(pair, monkeypatch):
    monkeypatch.setattr(report, "SPLIT_MIN_ROWS", 1)
    _, sparse = pair
    conn = open_report(sparse)
    try:
        plan = [p for p in report.plan_gpu_op_reads(conn, split=4) if p.table == KERNELS]
        n = report.rowid_span(conn, KERNELS).rows
        counts = [_count(conn, KERNELS, p.rowid_lo, p.rowid_hi) for p in plan]
    finally:
        conn.close()
    assert len(plan) == 4 and sum(counts) == n
    assert [p.rows_hint for p in plan] == counts          # each part sized by its rows, not its span


def test_memory_estimate_counts_rows(pair):
    orig, sparse = pair
    assert api.estimate_whole_bytes(sparse) == api.estimate_whole_bytes(orig)


def _own(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without the column that names its report's file."""
    return frame.drop(columns=[c for c in ("input",) if c in frame.columns])


def _same(a, b) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(_own(a.table(name)), _own(b.table(name)), obj=name)
    pd.testing.assert_frame_equal(_own(a.ranges), _own(b.ranges), obj="ranges")
    assert [(n.code, n.count, n.rank) for n in a.notes] == [(n.code, n.count, n.rank) for n in b.notes]


def test_whole_analysis_equal(pair):
    orig, sparse = pair
    a, b = api.load(orig, memory_budget=None), api.load(sparse, memory_budget=None)
    _same(a, b)
    pd.testing.assert_frame_equal(_own(a.gpu_ops), _own(b.gpu_ops))


def test_chunked_analysis_equal(pair, monkeypatch):
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 97)          # a few dozen chunks of the 2728 kernels
    orig, sparse = pair
    with sqlite3.connect(sparse) as conn:
        plan, _ = report.plan_chunks(conn, 97)
    assert 20 < len(plan) <= 2728 // 97 + 1
    a, b = api.load(orig, memory_budget=1), api.load(sparse, memory_budget=1)
    (n_a,), (n_b,) = ([n.count for n in x.notes if n.code == N.CHUNKED] for x in (a, b))
    assert n_a == n_b == len(plan)
    _same(a, b)


def test_nvtx_read_in_chunks_equal(pair):
    orig, sparse = pair
    with open_report(orig) as a, open_report(sparse) as b:
        strings = report.read_strings(a)
        whole = report.read_nvtx(a, strings)
        chunked = report.read_nvtx(b, strings, chunk_rows=50)
    for x, y in zip(whole, chunked):
        pd.testing.assert_frame_equal(x, y)


def test_regular_gaps_are_found_by_the_probes(pair, strided):
    with sqlite3.connect(pair[0]) as a, sqlite3.connect(strided) as b:
        n = a.execute(f"SELECT count(*) FROM {KERNELS}").fetchone()[0]
        span = report.rowid_span(b, KERNELS)
    assert span == report.RowidSpan(1000, n * 1000 + 1, n, False)


def test_strided_export_equal_whole_and_in_chunks(pair, strided, monkeypatch):
    orig, _ = pair
    _same(api.load(orig, memory_budget=None), api.load(strided, memory_budget=None))
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 97)
    a, b = api.load(orig, memory_budget=1), api.load(strided, memory_budget=1)
    (n_a,), (n_b,) = ([n.count for n in x.notes if n.code == N.CHUNKED] for x in (a, b))
    assert n_a == n_b > 20                                 # cut by rows: as many chunks as the export's
    _same(a, b)
    with open_report(orig) as conn_a, open_report(strided) as conn_b:
        strings = report.read_strings(conn_a)
        for x, y in zip(report.read_nvtx(conn_a, strings), report.read_nvtx(conn_b, strings, chunk_rows=50)):
            pd.testing.assert_frame_equal(x, y)


def test_chunks_are_cut_by_the_table_with_most_rows(pair, tmp_path):
    """A small op table with gaps (25 memcpy rows over 72,000 rowids) beside the kernels (2728
    rows, a 2**40 gap): the kernels drive the chunks, so none holds more than the chunk's rows."""
    path = tmp_path / "driver.sqlite"
    shutil.copyfile(pair[1], path)
    conn = sqlite3.connect(path)
    memcpy = "CUPTI_ACTIVITY_KIND_MEMCPY"
    t = conn.execute(f"SELECT start FROM {KERNELS} ORDER BY start LIMIT 1 OFFSET 270").fetchone()[0]
    conn.execute(f"DELETE FROM {memcpy} WHERE rowid NOT IN (SELECT rowid FROM {memcpy} WHERE start < ? "
                 "ORDER BY rowid LIMIT 25)", (t,))
    conn.execute(f"UPDATE {memcpy} SET rowid = -rowid")
    conn.execute(f"UPDATE {memcpy} SET rowid = -rowid * 3000")
    conn.commit()
    try:
        plan, _ = report.plan_chunks(conn, 500)
        kernels_per_chunk = [sum(_count(conn, KERNELS, p.rowid_lo, p.rowid_hi) for p in parts if p.table == KERNELS)
                             for parts in plan]
    finally:
        conn.close()
    assert max(kernels_per_chunk) <= 500 and sum(kernels_per_chunk) == 2728


def test_rows_counted_once_per_file(strided, monkeypatch):
    """The estimate, the plan and the reads of a report with gaps count each table once (a pass
    over its B-tree each time); a report not opened ``immutable`` (a WAL beside it) every time."""
    monkeypatch.setattr(report, "_COUNTED", {})
    scans: list[str] = []

    def counting(execute):
        def run(sql, *args):
            if sql.startswith("SELECT count(*)") and "rowid IN" not in sql:
                scans.append(sql)
            return execute(sql, *args)
        return run

    for immutable, expected in ((True, 1), (False, 2)):
        scans.clear()
        with open_report(strided, immutable=immutable) as conn:
            monkeypatch.setattr(conn, "execute", counting(conn.execute))
            spans = [report.rowid_span(conn, KERNELS) for _ in range(2)]
        assert spans[0] == spans[1] and not spans[0].dense
        assert len(scans) == expected, immutable

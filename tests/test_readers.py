"""The readers: pages.py (the default: the file's pages decoded with NumPy) and the stdlib cursor
(where pages.py does not read a statement, or SPECPROF_READER=stdlib) give the same tables, values
and dtypes; neither can write the report; the op columns assembled straight from Arrow batches equal
the frame-by-frame assembly, short and odd parts included."""
from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyze import cli
from analyze.errors import UsageError
from analyze.read import fastread, pages, report
from fixtures.synth import TraceSpec, write_trace
from helpers import frames

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def scale_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("readers")
    paths, _ = write_trace(TraceSpec(ranks=4, total_kernels=40_000, cuda_graph_mode="node"), out)
    return str(paths[0])


def state(path) -> tuple:
    p = Path(path)
    return sha(p), p.stat().st_mtime_ns, sorted(os.listdir(p.parent))


def frames_equal(a: report.ReportTables, b: report.ReportTables) -> None:
    """Same tables: values and dtypes."""
    pd.testing.assert_series_equal(a.strings, b.strings)
    for name in ("gpu_ops", "calls", "ranges", "marks", "processes", "devices"):
        frames.assert_frame_equal(getattr(a, name), getattr(b, name), obj=name)
    assert a.meta == b.meta and a.cross_thread_ranges == b.cross_thread_ranges


# ---------------------------------------------------------------------------------------------
# the order of the readers, SPECPROF_READER
# ---------------------------------------------------------------------------------------------

def test_pages_first_and_specprof_reader_stdlib_forces_the_cursor(monkeypatch, scale_file):
    monkeypatch.delenv("SPECPROF_READER", raising=False)
    assert fastread.backend() == "pages"
    conn = report.open_report(scale_file)
    try:
        assert conn.immutable and fastread.backend_for(conn) == "pages"
        for word, want in (("pages", "pages"), ("stdlib", "stdlib"), (" Stdlib ", "stdlib")):
            monkeypatch.setenv("SPECPROF_READER", word)
            assert fastread.backend() == want and fastread.backend_for(conn) == want
            fastread.SERVED.clear()
            frame = fastread.read_frame(conn, "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL", ["s", "e"])
            assert dict(fastread.SERVED) == {want: 1} and len(frame) > 10_000
    finally:
        conn.close()


@pytest.mark.parametrize("word", ["connectorx", "adbc", "bogus"])
def test_a_reader_that_is_not_one_is_a_usage_error(word, monkeypatch, scale_file, tmp_path, capsys):
    """connectorx and ADBC are gone (issue 42): naming them, or anything else but pages/stdlib, is a
    one-line UsageError (exit code 10), not a silent change of reader."""
    monkeypatch.setenv("SPECPROF_READER", word)
    with pytest.raises(UsageError, match=f"SPECPROF_READER='{word}' is not a reader"):
        fastread.backend()
    out = tmp_path / "r.json"
    assert cli.main([scale_file, "-q", "--json", str(out)]) == UsageError.exit_code == 10
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"SPECPROF_READER='{word}'" in err[0] and "stdlib" in err[0]
    assert not out.exists()


def test_odd_path_reads_the_same(tmp_path, scale_file):
    odd = tmp_path / "dir with #%?" / "r é.sqlite"
    odd.parent.mkdir()
    shutil.copyfile(scale_file, odd)
    before = state(odd)
    fastread.SERVED.clear()
    got = report.read_report(str(odd))
    assert set(fastread.SERVED) == {"pages"}
    frames_equal(got, report.read_report(scale_file))
    assert state(odd) == before


# ---------------------------------------------------------------------------------------------
# the same tables whichever reader
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["h200_4proc_eager", "h200_shim_graphs_node", "sglang_graphs",
                                  "h200_1proc_graphs_graphlevel", "cpu2022_shim"])
@pytest.mark.parametrize("threads", [1, 2])
def test_every_reader_gives_the_same_tables(name, threads, monkeypatch):
    path = str(REAL / f"{name}.sqlite")
    before = state(path)
    got = {}
    for reader in ("stdlib", ""):
        if reader:
            monkeypatch.setenv("SPECPROF_READER", reader)
        else:
            monkeypatch.delenv("SPECPROF_READER", raising=False)
        fastread.SERVED.clear()
        got[reader or "default"] = report.read_report(path, threads=threads)
        used = set(fastread.SERVED)
        assert used == ({reader} if reader else {"pages"}), used
    frames_equal(got["default"], got["stdlib"])
    assert len(got["default"].strings) > 0 and len(got["default"].ranges) > 0   # (cpu2022_shim: no GPU ops)
    assert state(path) == before


def test_scale_file_same_tables_every_reader(scale_file, monkeypatch):
    monkeypatch.setenv("SPECPROF_READER", "stdlib")
    fastread.SERVED.clear()
    ref = report.read_report(scale_file)
    assert set(fastread.SERVED) == {"stdlib"}
    monkeypatch.delenv("SPECPROF_READER")
    for threads in (1, 2):
        fastread.SERVED.clear()
        frames_equal(report.read_report(scale_file, threads=threads), ref)
        assert set(fastread.SERVED) == {"pages"}


def test_parts_of_a_split_table_are_bounded(scale_file, monkeypatch):
    """A big op table read in parallel comes in parts of at most PART_MAX_ROWS rows: the same tables
    as one reader reading each table whole."""
    one = report.read_report(scale_file, threads=1)
    monkeypatch.setattr(report, "SPLIT_MIN_ROWS", 1_000)
    monkeypatch.setattr(report, "PART_MAX_ROWS", 997)
    conn = report.open_report(scale_file)
    try:
        plan = report.plan_gpu_op_reads(conn, None, split=4)
        kernel_rows = report.table_rows(conn, report.GPU_OP_TABLES["kernel"])
    finally:
        conn.close()
    kernels = [p for p in plan if p.kind == "kernel"]
    assert len(kernels) == -(-kernel_rows // 997) > 4
    assert all(p.rowid_hi - p.rowid_lo <= 997 for p in kernels)
    assert all(a.rowid_hi == b.rowid_lo for a, b in zip(kernels, kernels[1:]))
    frames_equal(report.read_report(scale_file, threads=2), one)


def test_text_that_is_not_utf8_falls_back(tmp_path):
    """pages.py refuses text that is not UTF-8; the stdlib cursor reads it (the report's connection
    decodes with replacement characters)."""
    db = tmp_path / "u.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (x INTEGER, s TEXT)")
    con.execute("INSERT INTO t VALUES (1, 'ok')")
    con.execute("INSERT INTO t VALUES (2, CAST(X'66EA6F' AS TEXT))")
    con.commit()
    con.close()
    raw = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    raw.text_factory = lambda b: b.decode("utf-8", "replace")

    class Conn:       # what fastread needs of an analyze connection
        path, immutable = str(db), True

        def execute(self, *a):
            return raw.execute(*a)
    fastread.SERVED.clear()
    pages.FELL_BACK.clear()
    frame = fastread.read_frame(Conn(), "SELECT x, s FROM t", ["x", "s"])
    assert frame["s"].tolist() == ["ok", "f\ufffdo"] and frame["s"].dtype == object
    assert frame["x"].tolist() == [1, 2] and frame["x"].dtype == np.int64
    assert dict(fastread.SERVED) == {"stdlib": 1} and dict(pages.FELL_BACK) == {"Unsupported": 1}
    raw.close()


@pytest.mark.parametrize("batch_rows", [3, 1_000_000])
def test_the_stdlib_cursor_types_columns_like_pages(tmp_path, monkeypatch, batch_rows):
    """The stdlib cursor's frames have pages.py's dtypes, NULLs and big integers included, whether
    the rows come in one fetchmany batch or in many (a batch of NULLs only among batches of values);
    what pages.py refuses (floats, a column of text and integers) keeps SQLite's values."""
    db = tmp_path / "t.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (i INTEGER, n INTEGER, big INTEGER, s TEXT, z INTEGER, f REAL, m)")
    rows = [(k, None if k % 4 == 0 else k, None if k % 5 == 1 else 2 ** 62 + k, None if k % 3 == 0 else f"x{k % 2}",
             None, k + 0.5 if k % 2 else k, "a" if k == 7 else k) for k in range(12)]
    rows[3:6] = [(k, None, None, None, None, None, None) for k in range(3, 6)]     # one batch of NULLs (batch_rows=3)
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    monkeypatch.setattr(fastread, "STDLIB_BATCH_ROWS", batch_rows)
    raw = sqlite3.connect(f"file:{db}?mode=ro", uri=True)

    class Conn:       # what fastread needs of an analyze connection (open_report wants an nsys export)
        path, immutable = str(db), True

        def execute(self, *a):
            return raw.execute(*a)

        def close(self):
            raw.close()
    conn = Conn()
    cols = ["i", "n", "big", "s", "z"]
    sql = "SELECT i, n, big, s, z FROM t"
    try:
        fastread.SERVED.clear()
        pages_frame = fastread.read_frame(conn, sql, cols)
        monkeypatch.setenv("SPECPROF_READER", "stdlib")
        stdlib_frame = fastread.read_frame(conn, sql, cols)
        mixed = fastread.read_frame(conn, "SELECT f, m FROM t", ["f", "m"])
        empty = fastread.read_frame(conn, "SELECT i, s FROM t WHERE i < 0", ["i", "s"])
    finally:
        conn.close()
    assert dict(fastread.SERVED) == {"pages": 1, "stdlib": 3}
    frames.assert_frame_equal(stdlib_frame, pages_frame)
    assert [str(t) for t in stdlib_frame.dtypes] == ["int64", "float64", "object", "object", "float64"]
    assert stdlib_frame["big"].tolist() == [r[2] for r in rows]          # exact past 2**53: objects
    assert stdlib_frame["n"].isna().tolist() == [r[1] is None for r in rows]
    assert stdlib_frame["s"].tolist() == [r[3] for r in rows] and stdlib_frame["z"].isna().all()
    assert mixed["f"].dtype == np.float64 and mixed["f"].isna().sum() == 3
    assert mixed["f"].tolist()[:3] == [0.0, 1.5, 2.0]
    assert mixed["m"].dtype == object and mixed["m"].tolist()[6:9] == [6, "a", 8]
    assert empty.empty and list(empty.columns) == ["i", "s"]


def test_cross_thread_ranges_counted_from_the_rows_read(tmp_path):
    """Start/end ranges that end on another thread are counted from the NVTX rows the reader
    fetched (no second scan), equal to the SQL count, whole or in rowid chunks."""
    path = tmp_path / "x.sqlite"
    shutil.copyfile(REAL / "h200_4proc_eager.sqlite", path)
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET eventType = 60, endGlobalTid = globalTid + 1 "
                "WHERE eventType = 59 AND rowid % 7 = 0")
    con.execute("UPDATE NVTX_EVENTS SET endGlobalTid = globalTid WHERE eventType = 34")   # a mark: not counted
    # a cross-thread range whose start is not a timestamp: left out of the ranges, still counted
    con.execute("UPDATE NVTX_EVENTS SET start = 'late' WHERE rowid = (SELECT min(rowid) FROM NVTX_EVENTS "
                "WHERE eventType = 60 AND endGlobalTid IS NOT NULL)")
    con.commit()
    con.close()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    types = ",".join(map(str, report.RANGE_EVENT_STYLES))
    expected = con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE endGlobalTid IS NOT NULL "
                           f"AND eventType IN ({types})").fetchone()[0]
    con.close()
    assert expected > 100
    for threads in (1, 2):
        for chunk in (None, 97):
            assert report.read_report(str(path), threads=threads, nvtx_chunk_rows=chunk).cross_thread_ranges == expected


# ---------------------------------------------------------------------------------------------
# op columns straight from Arrow
# ---------------------------------------------------------------------------------------------

def _old_assembly(path: str, chunk_rows=None) -> pd.DataFrame:
    conn = report.open_report(path)
    try:
        plan = report.plan_gpu_op_reads(conn, chunk_rows)
        return report.assemble_gpu_ops(plan, [report.read_op_part(conn, p) for p in plan])
    finally:
        conn.close()


def _odd_copy(src: str, dst: Path) -> str:
    """A copy whose kernel table has holes in its rowids (parts shorter than their rowid range),
    NULL graph node ids, a correlation id beyond 2**53 and memcpys with NULL process ids."""
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 97 = 3")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphNodeId = NULL WHERE rowid % 5 = 1")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = 9007199254740993 WHERE rowid = 10")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET globalPid = NULL WHERE rowid % 3 = 0")
    con.commit()
    con.close()
    return str(dst)


@pytest.mark.parametrize("reader", ["", "stdlib"])
def test_op_columns_equal_frame_assembly(scale_file, tmp_path, monkeypatch, reader):
    if reader:
        monkeypatch.setenv("SPECPROF_READER", reader)
    odd = _odd_copy(scale_file, tmp_path / "odd.sqlite")
    for path in (scale_file, odd):
        ref = _old_assembly(path)
        for chunk_rows in (None, 7_001):
            conn = report.open_report(path)
            try:
                got = report.read_gpu_ops(conn, chunk_rows)
            finally:
                conn.close()
            frames.assert_frame_equal(got, ref, obj=f"{path} chunk_rows={chunk_rows}")
        for threads in (1, 2):
            frames.assert_frame_equal(report.read_report(path, threads=threads).gpu_ops, ref)
    got = report.read_report(odd).gpu_ops
    assert got["correlation_id"].max() == 9007199254740993
    assert got["graph_node_id"].isna().any() and (got["global_pid"] == -1).any()


def test_op_columns_fall_back_for_a_real_column(scale_file, tmp_path):
    path = tmp_path / "real.sqlite"
    shutil.copyfile(scale_file, path)
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 1.5 WHERE rowid = 2")
    con.commit()
    con.close()
    frames.assert_frame_equal(report.read_report(str(path)).gpu_ops, _old_assembly(str(path)))


def test_empty_op_tables(tmp_path):
    path = tmp_path / "empty.sqlite"
    shutil.copyfile(REAL / "h200_4proc_eager.sqlite", path)
    con = sqlite3.connect(path)
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    con.commit()
    con.close()
    got = report.read_report(str(path)).gpu_ops
    ref = _old_assembly(str(path))
    assert got.empty and ref.empty
    assert list(got.columns) == list(ref.columns) and list(got.dtypes) == list(ref.dtypes)
    assert np.array_equal(got.columns, report.GPU_OP_COLUMNS)


def _reference_assembly(parts):
    """The op table by plain pandas: kinds in order, parts concatenated, exact repeats dropped per
    kind (keep the first), graph node ids nullable."""
    frames = []
    for kind in report.GPU_OP_KINDS:
        mine = [f for k, f in parts if k == kind]
        if not mine:
            continue
        f = pd.concat(mine, ignore_index=True)
        f = f[~f.duplicated(keep="first")].reset_index(drop=True)
        f.insert(0, "kind", report.kind_column(kind, len(f)))
        frames.append(f)
    ops = pd.concat(frames, ignore_index=True)
    ops["graph_node_id"] = pd.to_numeric(ops["graph_node_id"], errors="coerce").astype("Int64")
    for c in report.NARROW_OP_COLUMNS:       # int32 where every value fits, else int64
        fits = ops[c].between(np.iinfo(np.int32).min, np.iinfo(np.int32).max).all()
        ops[c] = ops[c].astype("int32" if fits else "int64")
    return ops[report.GPU_OP_COLUMNS]


@pytest.mark.parametrize("ordered", [True, False])
def test_assembly_drops_repeats_across_parts_like_pandas(ordered):
    """Repeats across the rowid parts of one table (a row read twice at a part boundary, or
    anywhere when the table is not in start order) are dropped and counted; graph node ids with
    NULLs stay nullable; the kinds come in their order."""
    rng = np.random.default_rng(3)

    def part(n, t0, node_null=False):
        start = np.sort(rng.integers(t0, t0 + 1000, n)) if ordered else rng.integers(0, 3000, n)
        f = pd.DataFrame({"global_pid": rng.integers(1, 3, n), "device_id": 0, "stream_id": 7,
                          "correlation_id": rng.integers(0, 50, n), "graph_node_id": rng.integers(0, 4, n).astype(float),
                          "name_id": rng.integers(0, 3, n), "start_ns": start, "end_ns": start + 5})
        if node_null:
            f.loc[f.index % 3 == 0, "graph_node_id"] = np.nan
        return f.drop_duplicates().reset_index(drop=True)      # read_op_part leaves none within a part

    k1, k2 = part(400, 0, node_null=True), part(400, 1000)
    if ordered:       # the table in start order: the part boundary cuts a run of equal starts
        last = k1.iloc[[-1]]
        twin = last.assign(correlation_id=last["correlation_id"] + 100)     # same start, not a repeat
        k1 = pd.concat([k1, twin], ignore_index=True)
        k2 = pd.concat([last, twin, last.assign(end_ns=last["end_ns"] + 1), k2], ignore_index=True)
        assert (np.diff(np.r_[k1["start_ns"], k2["start_ns"]]) >= 0).all()
    else:
        k2 = pd.concat([k1.iloc[[3, 50]], k2], ignore_index=True)
    m1 = part(50, 0)
    parts = [("memcpy", m1), ("kernel", k1), ("kernel", k2)]
    want = _reference_assembly(parts)
    got = report.assemble_kinds([(k, f.copy()) for k, f in parts])
    frames.assert_frame_equal(got, want)
    repeats = len(k1) + len(k2) + len(m1) - len(want)
    assert repeats == 2
    assert [tuple(x) for x in got.attrs["excluded_rows"]] == [("kernel", "duplicate_rows", repeats)]


@pytest.mark.parametrize("column", report.NARROW_OP_COLUMNS)
@pytest.mark.parametrize("big", [2 ** 31, -(2 ** 31) - 1, 2 ** 40])
def test_narrow_id_column_widens_for_a_value_int32_cannot_hold(column, big):
    """The op table's small-id columns are int32 while every value fits; a later part with one
    value outside int32 makes the column int64 with every earlier value kept (no wrap-around)."""
    def part(n, t0):
        start = np.arange(t0, t0 + n, dtype="int64")
        return pd.DataFrame({"global_pid": 1, "device_id": 3, "stream_id": 7, "correlation_id": np.arange(n),
                             "graph_node_id": np.nan, "name_id": 5, "start_ns": start, "end_ns": start + 2})
    small = part(300, 0)
    assert report.assemble_kinds([("kernel", small.copy())])[column].dtype == np.int32
    wide = part(200, 1000)
    wide.loc[150, column] = big
    got = report.assemble_kinds([("kernel", small.copy()), ("kernel", wide.copy())])
    assert got[column].dtype == np.int64
    assert got[column].tolist() == small[column].tolist() + wide[column].tolist()
    assert got[column].iloc[300 + 150] == big
    for other in set(report.NARROW_OP_COLUMNS) - {column}:
        assert got[other].dtype == np.int32
    frames.assert_frame_equal(got, _reference_assembly([("kernel", small), ("kernel", wide)]))


def test_op_table_from_the_cache_has_the_read_dtypes(tmp_path):
    """The op table of a cache entry is the table the export's read gives, dtypes too (the narrow
    id columns int32 both ways)."""
    from analyze.read import cache

    path = tmp_path / "eager.sqlite"
    shutil.copyfile(REAL / "h200_4proc_eager.sqlite", path)
    read, note = cache.load_or_read(str(path))
    assert note is None and cache.find_entry(str(path))[0] is not None
    cached, _ = cache.load_or_read(str(path))
    assert cached is not read and len(read.gpu_ops) > 1000
    assert all(read.gpu_ops[c].dtype == np.int32 for c in report.NARROW_OP_COLUMNS)
    frames.assert_frame_equal(cached.gpu_ops, read.gpu_ops)


# ---------------------------------------------------------------------------------------------
# a report with a WAL beside it: the stdlib cursor only (a second SQLite library must not share it)
# ---------------------------------------------------------------------------------------------

def test_a_report_with_a_wal_is_read_by_the_stdlib_cursor_only(tmp_path, monkeypatch):
    """pages.py reads the file, and the rows a WAL holds are not in it yet. With a writer holding
    the WAL open, every statement goes to the stdlib cursor, and the tables equal the ones read
    from the same rows without a WAL."""
    import analyze

    change = "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + 7 WHERE rowid = 1"
    plain = tmp_path / "plain.sqlite"
    shutil.copyfile(REAL / "h200_1proc_graphs_graphlevel.sqlite", plain)
    run = tmp_path / "w.sqlite"
    shutil.copyfile(plain, run)
    with sqlite3.connect(plain) as con:
        con.execute(change)
    con.close()
    writer = sqlite3.connect(run)
    try:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute(change)                      # the change is in the -wal only
        writer.commit()
        assert (tmp_path / "w.sqlite-wal").stat().st_size > 0
        monkeypatch.delenv("SPECPROF_READ_THREADS", raising=False)
        from analyze.read.connection import open_report
        live = open_report(str(run))
        try:             # the stdlib cursor holds the GIL: one reader
            assert fastread.backend_for(live) == "stdlib" and report.read_threads(live) == 1
        finally:
            live.close()
        fastread.SERVED.clear()
        for threads in (1, 2):
            with_wal = report.read_report(str(run), threads=threads)
            assert set(fastread.SERVED) == {"stdlib"}, dict(fastread.SERVED)
        walled = analyze.load(run)
    finally:
        writer.close()
    fastread.SERVED.clear()
    without = report.read_report(str(plain), threads=2)
    assert set(fastread.SERVED) == {"pages"}
    frames_equal(without, with_wal)
    frames.assert_frame_equal(analyze.load(plain).totals, walled.totals)


def test_stdlib_batches_of_large_integers_and_floats_in_one_column(tmp_path, monkeypatch):
    """One batch holds an integer beyond 2**53, the next a float: no exact common type, so the column is
    the values as they are (before: ArrowInvalid from the cast), whatever the batch split."""
    import sqlite3

    from analyze.read import fastread

    p = tmp_path / "mixed.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (a INTEGER, b)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(1, 2 ** 60), (2, 1.5)])
    con.commit()
    monkeypatch.setattr(fastread, "STDLIB_BATCH_ROWS", 1)
    frame = fastread._read_stdlib(con, "SELECT a, b FROM t", ["a", "b"])
    con.close()
    assert frame["a"].tolist() == [1, 2]
    assert frame["b"].tolist() == [2 ** 60, 1.5]

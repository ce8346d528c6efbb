"""The readers: pages.py (the default: the file's pages decoded with NumPy), connectorx (next, where
it is installed and checked read-only), ADBC and the stdlib cursor give the same tables; none of them can write the report; the op columns assembled
straight from Arrow batches equal the frame-by-frame assembly, short and odd parts included."""
from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyze.read import cxread, fastread, report
from fixtures.synth import TraceSpec, write_trace

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"

HAVE_CX = cxread._import() is not None
needs_cx = pytest.mark.skipif(not HAVE_CX, reason="connectorx not installed")


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


def frames_equal(a: report.ReportTables, b: report.ReportTables, exact: bool = True) -> None:
    """Same tables; ``exact=False``: values only (the stdlib reader's text columns come back in
    pandas' inferred string dtype, the Arrow readers' as objects)."""
    pd.testing.assert_series_equal(a.strings, b.strings, check_dtype=exact)
    for name in ("gpu_ops", "calls", "ranges", "marks", "processes", "devices"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), obj=name, check_dtype=exact)
    assert a.meta == b.meta and a.cross_thread_ranges == b.cross_thread_ranges


# ---------------------------------------------------------------------------------------------
# connectorx: read-only, checked
# ---------------------------------------------------------------------------------------------

@needs_cx
def test_connectorx_passes_its_self_test_and_comes_after_pages(monkeypatch):
    monkeypatch.delenv("SPECPROF_READER", raising=False)
    assert cxread._self_test()
    assert fastread.backend() == "pages"
    assert fastread._after("pages") == "connectorx" and fastread._after("connectorx") == "adbc"
    monkeypatch.setenv("SPECPROF_READER", "connectorx")
    assert fastread.backend() == "connectorx"
    monkeypatch.setenv("SPECPROF_READER", "adbc")
    assert fastread.backend() == "adbc"
    monkeypatch.setenv("SPECPROF_READER", "stdlib")
    assert fastread.backend() == "stdlib"


@needs_cx
def test_connectorx_cannot_write_the_report(tmp_path):
    """Through the connection string analyze-trace uses, every write fails (SQLite: readonly), and
    the file's bytes, its mtime and its directory are as before; reads work."""
    import connectorx as cx
    src = tmp_path / "r.sqlite"
    shutil.copyfile(REAL / "h200_4proc_eager.sqlite", src)
    before = state(src)
    for immutable in (True, False):
        conn = cxread.connection_string(str(src), immutable)
        assert conn.startswith("sqlite:rofile:/") and "mode=ro" in conn
        assert cx.read_sql(conn, "SELECT count(*) AS n FROM CUPTI_ACTIVITY_KIND_KERNEL",
                           return_type="arrow").column(0)[0].as_py() == 2728
        for write in ("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL RETURNING start",
                      "UPDATE StringIds SET value = 'x' RETURNING id",
                      "INSERT INTO StringIds (id, value) VALUES (999999, 'x') RETURNING id",
                      "CREATE TABLE probe AS SELECT 1 AS x"):
            with pytest.raises(Exception) as info:
                cx.read_sql(conn, write, return_type="arrow")
            if not write.startswith("CREATE"):      # (connectorx rejects a result without columns first)
                assert "readonly" in str(info.value).lower()
    assert state(src) == before
    ro = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    assert ro.execute("SELECT count(*) FROM sqlite_master WHERE name = 'probe'").fetchone()[0] == 0
    ro.close()


@needs_cx
def test_connectorx_default_url_writes_which_is_why_it_is_not_used(tmp_path):
    """The claim behind cxread.py, checked: connectorx's documented ``sqlite://PATH`` opens the
    file read-write (a DELETE through it deletes rows), and ``?mode=ro`` on it names another file."""
    import connectorx as cx
    src = tmp_path / "w.sqlite"
    db = sqlite3.connect(src)
    db.execute("CREATE TABLE t (x INTEGER)")
    db.execute("INSERT INTO t VALUES (1), (2)")
    db.commit()
    db.close()
    cx.read_sql(f"sqlite://{src}", "DELETE FROM t RETURNING x", return_type="arrow")
    db = sqlite3.connect(src)
    assert db.execute("SELECT count(*) FROM t").fetchone()[0] == 0
    db.close()
    with pytest.raises(Exception):
        cx.read_sql(f"sqlite://{src}?mode=ro", "SELECT x FROM t", return_type="arrow")
    assert (tmp_path / "w.sqlite?mode=ro").exists()


@needs_cx
def test_self_test_rejects_a_writable_connection(monkeypatch):
    monkeypatch.setattr(cxread, "connection_string", lambda path, immutable=True: f"sqlite://{path}")
    assert not cxread._self_test()


def test_paths_connectorx_could_misread_are_not_given_to_it(tmp_path):
    for name in ("a b.sqlite", "a#1.sqlite", "a%20.sqlite", "a?x.sqlite", "é.sqlite"):
        assert cxread.connection_string(str(tmp_path / name)) is None
    assert cxread.connection_string(str(tmp_path / "ok-1_2.sqlite")).endswith("ok-1_2.sqlite?mode=ro&immutable=1")


def test_odd_path_reads_the_same_through_adbc(tmp_path, scale_file):
    odd = tmp_path / "dir with #%?" / "r é.sqlite"
    odd.parent.mkdir()
    shutil.copyfile(scale_file, odd)
    before = state(odd)
    fastread.SERVED.clear()
    frames_equal(report.read_report(str(odd)), report.read_report(scale_file))
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
    for reader in ("stdlib", "adbc", "connectorx", "") if HAVE_CX else ("stdlib", "adbc", ""):
        if reader:
            monkeypatch.setenv("SPECPROF_READER", reader)
        else:
            monkeypatch.delenv("SPECPROF_READER", raising=False)
        fastread.SERVED.clear()
        got[reader or "default"] = report.read_report(path, threads=threads)
        used = set(fastread.SERVED)
        assert used == ({reader} if reader else {"pages"}), used
    for k, v in got.items():
        frames_equal(v, got["stdlib"], exact=False)
    for k in ("adbc", "connectorx"):
        if k in got:
            frames_equal(got["default"], got[k])
    assert state(path) == before


def test_scale_file_same_tables_every_reader(scale_file, monkeypatch):
    monkeypatch.setenv("SPECPROF_READER", "stdlib")
    ref = report.read_report(scale_file)
    monkeypatch.setenv("SPECPROF_READER", "adbc")
    adbc = report.read_report(scale_file)
    frames_equal(adbc, ref, exact=False)
    monkeypatch.delenv("SPECPROF_READER")
    for threads in (1, 2):
        fastread.SERVED.clear()
        frames_equal(report.read_report(scale_file, threads=threads), adbc)
        assert set(fastread.SERVED) == {"pages"}


def test_parts_of_a_split_table_are_bounded_and_read_a_few_ahead(scale_file, monkeypatch):
    """A big op table read in parallel comes in parts of at most PART_MAX_ROWS rows, and only
    PARTS_AHEAD_PER_READER parts per reader are read ahead of the op table's copying (what the read
    holds beside the op table): the same tables as one reader reading each table whole."""
    one = report.read_report(scale_file, threads=1)
    monkeypatch.setattr(report, "SPLIT_MIN_ROWS", 1_000)
    monkeypatch.setattr(report, "PART_MAX_ROWS", 997)
    conn = report.open_report(scale_file)
    try:
        plan = report.plan_gpu_op_reads(conn, None, split=4)
        kernel_rows = report.table_rows(conn, report.GPU_OP_TABLES["kernel"])
    finally:
        fastread.close(conn)
        conn.close()
    kernels = [p for p in plan if p.kind == "kernel"]
    assert len(kernels) == -(-kernel_rows // 997) > 4
    assert all(p.rowid_hi - p.rowid_lo <= 997 for p in kernels)
    assert all(a.rowid_hi == b.rowid_lo for a, b in zip(kernels, kernels[1:]))
    started, added, ahead = [0], [0], []
    read_op_part, add = report.read_op_part, report.OpTableBuilder.add
    lock = threading.Lock()

    def counted_read(conn, part):
        with lock:
            started[0] += 1
        return read_op_part(conn, part)

    def slow_add(self, kind, frame):          # the readers would run far ahead of a slow first copy
        if not added[0]:
            time.sleep(0.5)
        ahead.append(started[0] - added[0])
        added[0] += 1
        return add(self, kind, frame)

    monkeypatch.setattr(report, "read_op_part", counted_read)
    monkeypatch.setattr(report.OpTableBuilder, "add", slow_add)
    two = report.read_report(scale_file, threads=2)
    assert added[0] == len(plan) and max(ahead) <= report.PARTS_AHEAD_PER_READER * 2
    frames_equal(two, one)


@needs_cx
def test_connectorx_expressions_and_nulls(tmp_path):
    """Literal NULL columns and expressions whose first value is NULL (which connectorx cannot type
    on its own) come back as ADBC returns them."""
    db = tmp_path / "e.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (a INTEGER, b INTEGER, c INTEGER, s TEXT)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)",
                    [(None, None, 5, None), (1, None, None, "x"), (None, 7, 2, "y"), (2 ** 62, 3, 1, None)])
    con.commit()
    con.close()
    sql = "SELECT NULL, COALESCE(a, b), c & ~1, s, a FROM t"
    table = cxread.read_table(cxread.connection_string(str(db)), sql)
    import adbc_driver_sqlite.dbapi as dbapi
    aconn = dbapi.connect(db.resolve().as_uri() + "?mode=ro")
    cur = aconn.cursor()
    cur.execute(sql)
    ref = cur.fetch_arrow_table()
    cur.close()
    aconn.close()
    assert [c.to_pylist() for c in table.columns] == [c.to_pylist() for c in ref.columns]
    assert table.column(1).to_pylist() == [None, 1, 7, 2 ** 62]
    assert [str(c.type) for c in table.columns[:3]] == ["int64"] * 3


@needs_cx
def test_text_that_is_not_utf8_falls_back(tmp_path):
    db = tmp_path / "u.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (x INTEGER, s TEXT)")
    con.execute("INSERT INTO t VALUES (1, 'ok')")
    con.execute("INSERT INTO t VALUES (2, CAST(X'66EA6F' AS TEXT))")
    con.commit()
    con.close()
    with pytest.raises(Exception):
        cxread.read_table(cxread.connection_string(str(db)), "SELECT x, s FROM t")
    raw = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    raw.text_factory = lambda b: b.decode("utf-8", "replace")

    class Conn:       # what fastread needs of an analyze connection
        path, immutable = str(db), True

        def execute(self, *a):
            return raw.execute(*a)
    fastread.SERVED.clear()
    conn = Conn()
    try:
        frame = fastread.read_frame(conn, "SELECT x, s FROM t", ["x", "s"])
    finally:
        fastread.close(conn)
    assert frame["s"].tolist() == ["ok", "f\ufffdo"]
    assert "connectorx" not in fastread.SERVED
    raw.close()


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
        fastread.close(conn)
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


@pytest.mark.parametrize("reader", ["", "connectorx", "adbc", "stdlib"])
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
                fastread.close(conn)
                conn.close()
            pd.testing.assert_frame_equal(got, ref, obj=f"{path} chunk_rows={chunk_rows}")
        for threads in (1, 2):
            pd.testing.assert_frame_equal(report.read_report(path, threads=threads).gpu_ops, ref)
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
    pd.testing.assert_frame_equal(report.read_report(str(path)).gpu_ops, _old_assembly(str(path)))


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


def _read_in_forked_child(path: str):
    tables = report.read_report(path)
    return fastread.backend(), len(tables.gpu_ops), len(tables.calls)


def test_a_forked_worker_does_not_run_connectorx_after_its_parent_did():
    """connectorx's Rust runtime does not survive fork(): a --jobs worker forked from a process that
    had read with it segfaulted in its next read (seen in a full test run). Such a child reads with
    ADBC, and gets the same tables."""
    if not cxread.available():
        pytest.skip("connectorx not usable here")
    os.environ["SPECPROF_READER"] = "connectorx"        # (inherited by the forked children)
    try:
        _fork_after_connectorx()
    finally:
        del os.environ["SPECPROF_READER"]


def _fork_after_connectorx():
    import multiprocessing

    path = str(REAL / "h200_4proc_eager.sqlite")
    parent = report.read_report(path)
    assert fastread.backend() == "connectorx" and fastread.SERVED["connectorx"] > 0
    with multiprocessing.get_context("fork").Pool(2) as pool:
        got = pool.map(_read_in_forked_child, [path, path])
    assert got == [("adbc", len(parent.gpu_ops), len(parent.calls))] * 2
    assert fastread.backend() == "connectorx"          # the parent keeps it


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
    pd.testing.assert_frame_equal(got, want)
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
    pd.testing.assert_frame_equal(got, _reference_assembly([("kernel", small), ("kernel", wide)]))


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
    pd.testing.assert_frame_equal(cached.gpu_ops, read.gpu_ops)


# ---------------------------------------------------------------------------------------------
# a report with a WAL beside it: the stdlib cursor only (a second SQLite library must not share it)
# ---------------------------------------------------------------------------------------------

def test_a_report_with_a_wal_is_read_by_the_stdlib_cursor_only(tmp_path, monkeypatch):
    """connectorx and ADBC link their own SQLite; on a WAL database two SQLite libraries in one
    process cannot see each other's POSIX locks, and one truncating the ``-shm`` the other maps is a
    SIGBUS (what CI hit). With a writer holding the WAL open, every statement goes to the stdlib
    cursor, and the tables equal the ones read from the same rows without a WAL."""
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
    assert fastread.backend() == "stdlib" or set(fastread.SERVED) - {"stdlib"}
    frames_equal(without, with_wal, exact=False)
    pd.testing.assert_frame_equal(analyze.load(plain).totals, walled.totals)

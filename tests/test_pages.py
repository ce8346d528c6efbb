"""read/pages.py, SQLite's file format decoded with NumPy: every statement the analysis issues on
the real exports gives the rows SQLite gives (values, NULLs, types, order); crafted files cover
what real exports rarely hold (page sizes, deep B-trees, rowid holes and ranges, integers of every
width, long text, columns added later); what it does not read is refused (Unsupported) and read by
the next backend; the report is opened read-only and never changes."""
from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyze.read import fastread, pages, report, statement
from helpers import frames, real_fixtures

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"
REAL_FILES = [p.name for p in real_fixtures.reports()]


class Conn:
    """What pages.read_table needs of a report connection: its path and the schema."""

    def __init__(self, path):
        self.path = str(path)
        self.raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        self.raw.text_factory = lambda b: b.decode("utf-8", "replace")     # as analyze's connection

    def execute(self, *a):
        return self.raw.execute(*a)

    def close(self):
        self.raw.close()


def sqlite_rows(path, sql) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def pages_rows(path, sql, **kw) -> list[tuple]:
    conn = Conn(path)
    try:
        table = pages.read_table(conn, sql, **kw)
    finally:
        conn.close()
    cols = [c.to_pylist() for c in table.columns]
    return list(zip(*cols)) if cols else []


def same_rows(path, sql, **kw) -> int:
    want = sqlite_rows(path, sql)
    got = pages_rows(path, sql, **kw)
    assert got == want, sql
    return len(want)


def issued_statements(path) -> list[str]:
    """Every SELECT the analysis' reader issues on ``path`` (the benchmark's bare read records them
    the same way)."""
    from bench.bare_read import record
    return record(str(path))


# ---------------------------------------------------------------------------------------------
# real exports
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", REAL_FILES)
def test_every_statement_of_the_analysis_equals_sqlite_on_real_exports(name):
    path = REAL / name
    before = hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns
    pages.FELL_BACK.clear()
    read = 0
    for sql in issued_statements(path):
        try:
            read += same_rows(path, sql)
        except pages.Unsupported:
            pass
    assert read > 0
    assert (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns) == before


def test_the_big_real_statements_are_read_by_pages():
    """On the real H200 export the GPU ops, API calls, NVTX events and strings all go through
    pages.py (none falls back), small batches included (many batches, the output grown)."""
    path = REAL / "h200_4proc_eager.sqlite"
    sqls = issued_statements(path)
    big = [s for s in sqls if any(t in s for t in ("KERNEL", "RUNTIME", "NVTX_EVENTS", "StringIds"))]
    assert len(big) >= 4
    for sql in big:
        assert same_rows(path, sql) > 0
        same_rows(path, sql, batch_bytes=1)          # one page a batch


def test_frames_equal_the_stdlib_frames_on_real_exports(monkeypatch):
    """The analysis' tables read by pages.py equal those read by the stdlib cursor: values and
    dtypes; on the sglang_v2 exports one statement pages.py refuses goes to the stdlib cursor."""
    for name in ("h200_4proc_eager.sqlite", "h200_1proc_graphs_graphlevel.sqlite", "sglang_graphs.sqlite",
                 "sglang_v2_l8_s0.sqlite"):
        path = str(REAL / name)
        monkeypatch.delenv("SPECPROF_READER", raising=False)
        fastread.SERVED.clear()
        mine = report.read_report(path, threads=2)
        want = {"pages": 7, "stdlib": 1} if name.startswith("sglang_v2") else {"pages": fastread.SERVED["pages"]}
        assert dict(fastread.SERVED) == want and want["pages"] >= 7
        monkeypatch.setenv("SPECPROF_READER", "stdlib")
        fastread.SERVED.clear()
        theirs = report.read_report(path, threads=2)
        assert set(fastread.SERVED) == {"stdlib"}
        for table in ("gpu_ops", "calls", "ranges", "marks", "processes", "devices"):
            frames.assert_frame_equal(getattr(mine, table), getattr(theirs, table), obj=f"{name} {table}")
        pd.testing.assert_series_equal(mine.strings, theirs.strings)
        assert len(mine.gpu_ops) > 100 and len(mine.calls) > 100


# ---------------------------------------------------------------------------------------------
# crafted files
# ---------------------------------------------------------------------------------------------

def make_db(path, page_size=4096, schema="CREATE TABLE t (a INTEGER, b INTEGER, s TEXT, c INTEGER)",
            rows=(), table="t"):
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size={page_size}")
    con.execute(schema)
    if rows:
        marks = ", ".join("?" * len(rows[0]))
        con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
    con.commit()
    con.close()
    return path


INTS = [0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 32767, 32768, -32768, -32769, 2**23 - 1, 2**23, -2**23,
        2**31 - 1, 2**31, -2**31 - 1, 2**47 - 1, 2**47, -2**47, 2**53 + 1, 2**62, 2**63 - 1, -2**63]


@pytest.mark.parametrize("page_size", [512, 4096, 65536])
def test_integers_of_every_width_nulls_and_text(tmp_path, page_size):
    rng = np.random.default_rng(page_size)
    rows = []
    for i in range(6000):
        a = INTS[i % len(INTS)]
        b = None if i % 7 == 0 else int(rng.integers(-2**40, 2**40))
        s = None if i % 5 == 0 else ("x" * int(rng.integers(0, 90)) + "é€😀"[i % 3])
        rows.append((a, b, s, i))
    path = make_db(tmp_path / "t.sqlite", page_size, rows=rows)
    for sql in ("SELECT a, b, s, c FROM t", "SELECT c, NULL, -1, 7, (a & ~16777215), COALESCE(b, a) FROM t",
                "SELECT s FROM t WHERE rowid >= 100 AND rowid < 2000", "SELECT a, s FROM t WHERE c = 77",
                "SELECT a FROM t WHERE 1 AND rowid >= 5990", "SELECT a FROM t WHERE rowid >= 7000",
                "SELECT b FROM t WHERE rowid < 1"):
        same_rows(path, sql)
        same_rows(path, sql, batch_bytes=page_size)


def test_headers_of_two_words_take_the_fast_path(tmp_path, monkeypatch):
    """Eleven integer columns (a header of two 8-byte words: constant columns, columns whose width
    varies row by row, NULLs) and then a text of 60 to 90 bytes (a two-byte serial type, its high
    bit set, in the bytes after the wanted ones): read with the general header path switched off,
    so every batch goes through _header_fast, and equal to SQLite's rows."""
    names = [f"i{k}" for k in range(11)]
    schema = "CREATE TABLE w (" + ", ".join(f"{n} INTEGER" for n in names) + ", s TEXT, z INTEGER)"
    rows = []
    for r in range(3000):
        ints = [7, 0, 1, INTS[r % len(INTS)], None if r % 3 == 0 else r, 2**40, -5,
                INTS[(r * 7) % len(INTS)], 300, r % 2, INTS[(r * 5) % len(INTS)]]
        rows.append((*ints, "t" * (60 + r % 31), r))
    path = make_db(tmp_path / "w.sqlite", 4096, schema=schema, rows=rows, table="w")

    def general_off(*a, **kw):
        raise AssertionError("the general header path was taken")

    monkeypatch.setattr(pages, "_header_general", general_off)
    assert same_rows(path, "SELECT " + ", ".join(names) + " FROM w") == 3000
    assert same_rows(path, "SELECT i10, i3, i0 FROM w WHERE rowid >= 17 AND rowid < 2500", batch_bytes=4096) == 2483
    assert same_rows(path, "SELECT i1, i9 FROM w WHERE i6 = -5") == 3000


def test_text_of_every_length(tmp_path):
    """Texts 0 to 40 bytes long, with multi-byte characters and NULLs, in batches of many pages
    and of one."""
    texts = []
    for n in range(41):
        texts += ["a" * n, ("é" * n)[:n], "€" + "b" * n, "😀" * (n // 4) + "c" * (n % 4), None]
    rows = [(i, i, t, i) for i, t in enumerate(texts * 20)]
    path = make_db(tmp_path / "s.sqlite", 1024, rows=rows)
    same_rows(path, "SELECT s, a FROM t")
    same_rows(path, "SELECT s FROM t WHERE rowid >= 77 AND rowid < 3000", batch_bytes=1024)


def test_deep_b_tree_with_holes_and_rowid_ranges(tmp_path):
    """512-byte pages and 60k rows: a B-tree three interior levels deep; deleted rows leave holes
    (parts of a rowid range shorter than the range); every range is cut at leaf boundaries
    correctly."""
    path = make_db(tmp_path / "d.sqlite", 512, rows=[(i, i * 3, None, -i) for i in range(60_000)])
    con = sqlite3.connect(path)
    con.execute("DELETE FROM t WHERE rowid % 13 = 0 OR (rowid > 20000 AND rowid < 26000)")
    con.commit()
    con.close()
    conn = Conn(path)
    try:
        layout = pages.table_layout(conn, "t")
        fd = os.open(path, os.O_RDONLY)
        try:
            pg = pages.Pages(fd, pages.read_header(fd), 4)
            leaves, lo, hi = pages.leaf_pages(pg, layout.root)
        finally:
            os.close(fd)
    finally:
        conn.close()
    assert len(leaves) > 1000 and (lo[1:] == hi[:-1] + 1).all() and (lo <= hi).all()
    same_rows(path, "SELECT a, b, c FROM t")
    for lo_, hi_ in ((1, 2), (0, 1), (13, 14), (19_990, 26_010), (59_000, 90_000), (-5, 3), (40_000, 40_000)):
        same_rows(path, f"SELECT a, c FROM t WHERE 1 AND rowid >= {lo_} AND rowid < {hi_}")


def test_rowids_at_both_ends_of_64_bits(tmp_path):
    """The largest and smallest rowids are rows like any other (a bound is inclusive inside the
    reader, and a leaf whose keys start at 2**63-1 is read), with and without rowid conditions."""
    path = tmp_path / "e.sqlite"
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size=512")
    con.execute("CREATE TABLE t (a INTEGER)")
    con.executemany("INSERT INTO t(rowid, a) VALUES (?, ?)", [(2**63 - 34 + i, i) for i in range(33)])
    con.executemany("INSERT INTO t(rowid, a) VALUES (?, ?)", [(2**63 - 1, -1), (-2**63, -2), (1, 1)])
    con.commit()
    con.close()
    assert same_rows(path, "SELECT a FROM t") == 36
    for cond in ("rowid >= 0", "rowid < 9223372036854775807", "rowid >= 9223372036854775806",
                 "rowid >= -9223372036854775808 AND rowid < -9223372036854775807", "rowid < -9223372036854775808",
                 "rowid >= 9223372036854775807", "rowid >= 5 AND rowid < 5", "rowid >= 9 AND rowid < 3"):
        same_rows(path, f"SELECT a FROM t WHERE 1 AND {cond}")
        same_rows(path, f"SELECT a FROM t WHERE {cond}", batch_bytes=512)


def test_a_column_named_rowid_is_refused(tmp_path):
    """SQLite takes ``rowid`` in a statement to mean such a column, not the rowid."""
    path = make_db(tmp_path / "r.sqlite", schema="CREATE TABLE t (a INTEGER, rowid INTEGER)",
                   rows=[(i, 1000 - i) for i in range(100)])
    with pytest.raises(pages.Unsupported, match="rowid"):
        pages_rows(path, "SELECT a FROM t WHERE rowid >= 950")


def test_integer_primary_key_and_columns_added_later(tmp_path):
    path = tmp_path / "k.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i * 5 + 3, f"name {i}" * (i % 11)) for i in range(3000)])
    con.execute("CREATE TABLE t (a INTEGER)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(500)])
    con.execute("ALTER TABLE t ADD COLUMN later INTEGER")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, i + 1) for i in range(500)])
    con.execute("ALTER TABLE t ADD COLUMN named TEXT")
    con.execute("UPDATE t SET named = 'n' WHERE rowid % 3 = 0")
    con.execute("ALTER TABLE t ADD COLUMN fixed INTEGER DEFAULT 4")
    con.commit()
    con.close()
    assert same_rows(path, "SELECT id, value FROM StringIds") == 3000
    same_rows(path, "SELECT a, later, named FROM t")
    with pytest.raises(pages.Unsupported, match="default"):
        pages_rows(path, "SELECT a, fixed FROM t")


@pytest.mark.parametrize("case, why", [
    ("float", "not an integer"), ("blob", "not an integer"), ("text_in_int", "not an integer"),
    ("overflow", "overflow"), ("without_rowid", "rowid"), ("real_column", "another type"),
    ("not_utf8", "UTF-8"), ("utf16", "UTF-8"), ("view", "no such table"), ("function", "select item"),
    ("order_by", "condition"), ("unknown_column", "lacks"), ("truncated", ""), ("text_over_limit", "2 GiB"),
])
def test_what_pages_does_not_read_is_refused_and_read_by_the_next_backend(tmp_path, monkeypatch, case, why):
    path = tmp_path / "r.sqlite"
    sql = "SELECT a, s FROM t"
    schema = "CREATE TABLE t (a INTEGER, s TEXT, r REAL)"
    rows = [(i, f"s{i}", 0.5) for i in range(2000)]
    if case == "utf16":
        con = sqlite3.connect(path)
        con.execute("PRAGMA encoding = 'UTF-16le'")
        con.execute(schema)
        con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
        con.commit()
        con.close()
    else:
        make_db(path, 1024, schema="CREATE TABLE t (a INTEGER PRIMARY KEY, s TEXT, r REAL) WITHOUT ROWID"
                if case == "without_rowid" else schema, rows=rows)
    con = sqlite3.connect(path)
    if case == "float":
        con.execute("UPDATE t SET a = 1.5 WHERE rowid = 700")
    elif case == "blob":
        con.execute("UPDATE t SET a = X'00FF' WHERE rowid = 700")
    elif case == "text_in_int":
        con.execute("UPDATE t SET a = 'abc' WHERE rowid = 700")
    elif case == "overflow":
        con.execute("UPDATE t SET s = ? WHERE rowid = 700", ("long " * 1000,))
    elif case == "real_column":
        sql = "SELECT r FROM t"
    elif case == "not_utf8":
        con.execute("UPDATE t SET s = CAST(X'66EA6F' AS TEXT) WHERE rowid = 700")
    elif case == "view":
        con.execute("CREATE VIEW v AS SELECT a, s FROM t")
        sql = "SELECT a, s FROM v"
    elif case == "function":
        sql = "SELECT abs(a), s FROM t"
    elif case == "order_by":
        sql = "SELECT a, s FROM t WHERE 1 ORDER BY a"
    elif case == "unknown_column":
        sql = "SELECT a, nope FROM t"
    elif case == "text_over_limit":                # (2 GiB of text, scaled down: 2000 texts > 5000 bytes)
        monkeypatch.setattr(pages, "TEXT_BYTES_MAX", 5000)
    con.commit()
    con.close()
    if case == "truncated":
        with open(path, "r+b") as f:
            f.truncate(path.stat().st_size - 1024)
    if case == "truncated":          # the schema read may already fail: SQLite's own error (not a crash)
        with pytest.raises((pages.Unsupported, sqlite3.DatabaseError)):
            pages_rows(path, sql)
        return
    with pytest.raises(pages.Unsupported, match=why):
        pages_rows(path, sql)
    if case == "unknown_column":
        return                                     # SQLite refuses them too: the analysis' own error
    conn = Conn(path)
    conn.immutable = True                          # (no journal beside it: what pages.py needs)
    fastread.SERVED.clear()
    pages.FELL_BACK.clear()
    try:
        frame = fastread.read_frame(conn, sql, ["x", "y"][:len(sql.split("FROM")[0].split(","))])
    finally:
        conn.close()
    assert dict(fastread.SERVED) == {"stdlib": 1} and sum(pages.FELL_BACK.values()) == 1
    assert len(frame) == len(sqlite_rows(path, sql))


def test_a_page_past_the_end_of_the_file_is_refused(tmp_path):
    path = make_db(tmp_path / "r.sqlite", rows=[(i, i, "x", i) for i in range(100)])
    fd = os.open(path, os.O_RDONLY)
    try:
        pg = pages.Pages(fd, pages.read_header(fd), 2)
        with pytest.raises(pages.Unsupported, match="outside the file"):
            pg.load(np.array([pg.header.pages + 1]))
        with pytest.raises(pages.Unsupported, match="outside the file"):
            pg.load(np.array([0]))
    finally:
        os.close(fd)


def test_the_report_is_opened_read_only_and_left_as_it_was(tmp_path, monkeypatch):
    path = make_db(tmp_path / "r.sqlite", rows=[(i, -i, "x", i) for i in range(5000)])
    before = hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns, sorted(os.listdir(tmp_path))
    flags = []
    real_open = os.open

    def spy(file, fl, *a, **k):
        if str(file) == str(path):
            flags.append(fl)
        return real_open(file, fl, *a, **k)

    monkeypatch.setattr(os, "open", spy)
    same_rows(path, "SELECT a, b, s, c FROM t")
    assert flags and all(fl & os.O_ACCMODE == os.O_RDONLY for fl in flags)
    assert (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns,
            sorted(os.listdir(tmp_path))) == before


def test_statement_grammar():
    s = statement.parse("SELECT a, NULL, -1, (g & ~16777215), COALESCE(x, y , z) FROM T WHERE 1 AND "
                              "rowid >= 5 AND rowid < 9 AND k = -3")
    assert s.table == "T" and (s.rowid_lo, s.rowid_hi) == (5, 8) and s.equal == (("k", -3),)   # inclusive
    assert [i.kind for i in s.items] == ["column", "null", "int", "mask", "coalesce"]
    assert s.items[3] == statement.Item("mask", ("g",), 16777215) and s.items[4].columns == ("x", "y", "z")
    for bad in ("SELECT a FROM t ORDER BY a", "SELECT a + 1 FROM t", "SELECT rowid FROM t", "SELECT a FROM t, u",
                "SELECT a FROM t WHERE a > 3", "SELECT a FROM t WHERE rowid = 3", "DELETE FROM t",
                "SELECT a FROM t WHERE ", "SELECT a FROM t WHERE", "SELECT COALESCE(a) FROM t", "SELECT a FROM tWHERE 1"):
        with pytest.raises(pages.Unsupported):
            statement.parse(bad)


# ---------------------------------------------------------------------------------------------
# random tables
# ---------------------------------------------------------------------------------------------

values = st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.sampled_from(INTS))
texts = st.one_of(st.none(), st.text(max_size=80))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(values, values, texts, values), min_size=0, max_size=400),
       page_size=st.sampled_from([512, 1024, 4096]), drop=st.integers(2, 9),
       lo=st.integers(-3, 420), width=st.integers(0, 500), batch=st.sampled_from([1, 3, 64]))
def test_random_tables_equal_sqlite(tmp_path, rows, page_size, drop, lo, width, batch):
    path = tmp_path / f"h{abs(hash((tuple(rows), page_size, drop)))}.sqlite"
    make_db(path, page_size, rows=rows)
    con = sqlite3.connect(path)
    con.execute(f"DELETE FROM t WHERE rowid % {drop} = 1")
    con.commit()
    con.close()
    kw = dict(batch_bytes=batch * page_size)
    same_rows(path, "SELECT a, b, s, c FROM t", **kw)
    same_rows(path, f"SELECT c, COALESCE(a, b), s FROM t WHERE 1 AND rowid >= {lo} AND rowid < {lo + width}", **kw)
    path.unlink()

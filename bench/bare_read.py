"""Bare read: the SELECTs analyze-trace issues on a report, fetched into Arrow and dropped.

    python bench/bare_read.py record REPORT STATEMENTS.json      # once, not timed
    python bench/bare_read.py read --backend adbc|connectorx|pages --threads N STATEMENTS.json REPORT

(adbc and connectorx: ``pip install .[bench]``; analyze-trace itself reads with pages.py and the
stdlib cursor only, issue 42.)

``record`` runs analyze.read.report's reader on the report with every statement cut to ``LIMIT 0``
(its one entry point: fastread.read_frame) and writes the statements
it issued (so the columns and rowid parts are exactly those the analysis
reads). ``read`` is what is timed (in a fresh process, by bench/run.py): it imports only the
backend and pyarrow (``pages``: analyze/read/pages.py, specprof's own reader of the file's pages,
with NumPy, and the stdlib sqlite3 for the schema), runs every statement into an Arrow table and
drops it; nothing is converted
to NumPy or pandas, nothing is analysed. With ``--threads N`` the statements go to N threads, each
statement on its own read-only connection, in the order analyze-trace submits them (NVTX events,
API calls, then the GPU-op parts).

connectorx cannot type a result column whose first value is NULL unless SQLite knows the column's
declared type, so for it the literal ``NULL`` columns are left out (they carry no data) and
computed columns (the NVTX ``COALESCE`` of the payload columns) are wrapped in ``IFNULL(.., 0)``:
the same rows and the same data columns.
"""
from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path


def record(path: str) -> list[str]:
    """The statements analyze.read.report.read_report issues on ``path`` (run with LIMIT 0)."""
    from analyze.read import fastread, report

    seen: list[str] = []
    frame = fastread.read_frame

    def spy_frame(conn, stmt, columns, params=(), **kw):
        sql = stmt if isinstance(stmt, str) else stmt.sql()      # read/statement.Statement: its SQL text
        seen.append(sql)
        return frame(conn, sql + " LIMIT 0", columns, params, **kw)

    fastread.read_frame = spy_frame
    try:
        report.read_report(path, threads=1)
    finally:
        fastread.read_frame = frame
    return seen


def split_select(sql: str) -> tuple[list[str], str]:
    """``SELECT a, f(b, c), d FROM ...`` -> (['a', 'f(b, c)', 'd'], 'FROM ...')."""
    m = re.match(r"\s*SELECT\s+(.*?)\s+(FROM\s.*)$", sql, re.S | re.I)
    if not m:
        raise ValueError(f"not a SELECT ... FROM: {sql[:60]}")
    from analyze.read.statement import split_items

    return split_items(m.group(1)), m.group(2)


def for_connectorx(sql: str) -> str:
    """The same statement as connectorx can type it (see the module docstring)."""
    items, rest = split_select(sql)
    kept = []
    for it in items:
        if it.upper() == "NULL":
            continue
        kept.append(it if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", it) else f"IFNULL({it}, 0)")
    return "SELECT " + ", ".join(kept) + " " + rest


def _order(sqls: list[str]) -> list[str]:
    # analyze-trace's submission order: NVTX events, API calls, then the op parts (plan order)
    def rank(s: str) -> int:
        return 0 if "NVTX_EVENTS" in s else (1 if "CUPTI_ACTIVITY_KIND_RUNTIME" in s else 2)
    return sorted(sqls, key=rank)


def connectorx_uri(path: str) -> str:
    """A read-only connectorx connection string for ``path``. connectorx hands SQLite the text after
    the 9th character of the URL it parses (``sqlite://`` is 9 long) and opens it with SQLite's URI
    flag; ``sqlite:<2 chars>file:...?mode=ro`` is left intact by URL parsing, so SQLite opens a
    ``file:`` URI read-only (a ``sqlite://`` URL would lose the colon of ``file:``; connectorx's
    documented ``sqlite://PATH`` opens the file read-write). connectorx is no reader of
    analyze-trace's (issue 42); the benchmark times it as the reference its speed bar is stated
    against."""
    return "sqlite:ro" + Path(path).resolve().as_uri().replace("file:///", "file:/", 1) + "?mode=ro&immutable=1"


def read(backend: str, threads: int, sqls: list[str], path: str) -> int:
    """Run every statement into Arrow; returns the number of rows fetched."""
    uri = Path(path).resolve().as_uri() + "?mode=ro&immutable=1"
    if backend == "adbc":
        import adbc_driver_sqlite.dbapi as dbapi

        def one(sql: str) -> int:
            conn = dbapi.connect(uri)
            try:
                cur = conn.cursor()
                try:   # the batch size analyze-trace uses for big tables (the driver's default is 1024)
                    cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": "65536"})
                except Exception:  # noqa: BLE001 - an older driver
                    pass
                cur.execute(sql)
                n = cur.fetch_arrow_table().num_rows
                cur.close()
                return n
            finally:
                conn.close()
    elif backend == "connectorx":
        import connectorx as cx

        conn = connectorx_uri(path)
        sqls = [for_connectorx(s) for s in sqls]

        def one(sql: str) -> int:
            return cx.read_sql(conn, sql, return_type="arrow").num_rows
    elif backend == "pages":
        import sqlite3

        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from analyze import memory
        from analyze.read import pages

        memory.small_pages()     # as analyze-trace runs it (no huge-page faults for its big arrays)

        class Conn:             # what pages.read_table needs: the path and the schema
            def __init__(self):
                self.path = path
                self.raw = sqlite3.connect(uri, uri=True, check_same_thread=False)

            def execute(self, *a):
                return self.raw.execute(*a)

        def one(sql: str) -> int:
            conn = Conn()
            try:
                return pages.read_table(conn, sql).num_rows
            finally:
                conn.raw.close()
    else:
        raise SystemExit(f"unknown backend {backend!r}")
    sqls = _order(sqls)
    if threads <= 1:
        return sum(one(s) for s in sqls)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return sum(pool.map(one, sqls))


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    if argv and argv[0] == "record":
        _, path, out = argv
        Path(out).write_text(json.dumps(record(path), indent=1))
        return 0
    # NumPy's OpenBLAS as analyze-trace loads it, before any backend imports NumPy: the floor gets
    # what the tool gets (analyze.processes imports only the standard library)
    from analyze.processes import single_threaded_blas
    single_threaded_blas()
    import argparse
    ap = argparse.ArgumentParser(prog="bench/bare_read.py read")
    ap.add_argument("what", choices=["read"])
    ap.add_argument("--backend", default="adbc", choices=["adbc", "connectorx", "pages"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("statements")
    ap.add_argument("report")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = read(a.backend, a.threads, json.loads(Path(a.statements).read_text()), a.report)
    print(f"{a.backend} x{a.threads}: {rows} rows in {time.perf_counter() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Bare read: the SELECTs analyze-trace issues on a report, fetched into Arrow (ADBC) and dropped.

    python bench/bare_read.py REPORT.sqlite

The statements are recorded from analyze.read.report on a tiny export of the same schema, so the
columns are exactly those the analysis reads; nothing is converted to pandas or analysed.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import adbc_driver_sqlite.dbapi as dbapi

from analyze.read import fastread, report
from analyze.read.connection import open_report


def statements(path: str) -> list[str]:
    seen: list[str] = []
    orig = fastread.read_frame

    def record(conn, sql, columns, params=(), **kw):
        seen.append(sql)
        return orig(conn, sql + " LIMIT 0" if "PRAGMA" not in sql else sql, columns, params, **kw)

    fastread.read_frame = record
    try:
        report.read_report(path)
    finally:
        fastread.read_frame = orig
    return seen


def main(path: str) -> None:
    t0 = time.perf_counter()
    sqls = statements(path)
    uri = Path(path).resolve().as_uri() + "?mode=ro&immutable=1"
    conn = dbapi.connect(uri)
    rows = 0
    for sql in sqls:
        cur = conn.cursor()
        cur.execute(sql)
        rows += cur.fetch_arrow_table().num_rows
        cur.close()
    conn.close()
    print(f"{len(sqls)} statements, {rows} rows in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    open_report(sys.argv[1]).close()
    main(sys.argv[1])

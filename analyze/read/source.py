"""One report as the map step reads it (issue 42's seam): a :class:`ReportSource` opens the export
once, read-only, and is all the map task asks of it: its sizes (the memory policy), why it has no
usable GPU activity (if so), its tables, and its time-ordered op chunks. The parallel readers of the
big tables open their own read-only connections (SQLite connections are not shared across threads);
everything else goes through this one.

The integrity check ``open_report`` runs on a small file (``PRAGMA quick_check``) runs here before the
tables are read, after the sizes and the capture check, the order in which those errors were always
raised."""
from __future__ import annotations

import contextlib
import os
import sqlite3

from analyze.errors import TraceError
from analyze.read import capture, report
from analyze.read.connection import open_report, quick_check_if_small


class ReportSource:
    """An nsys SQLite export, opened on first use and closed by :meth:`close` (or ``with``)."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        self._conn = None
        self._checked = False

    def _open(self):
        if self._conn is None:
            self._conn = open_report(self.path, quick_check=False)
        return self._conn

    def _checked_conn(self):
        conn = self._open()
        if not self._checked:
            quick_check_if_small(conn)
            self._checked = True
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> ReportSource:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # what the map task reads
    def row_counts(self) -> dict | None:
        """:func:`analyze.read.report.row_counts`: None when the report does not open or read (the
        analysis then says why)."""
        try:
            conn = self._open()
        except (TraceError, OSError, sqlite3.Error):
            return None
        return report.row_counts_of(conn)

    def require_gpu_activity(self, usable_ops: int | None = None) -> None:
        """:func:`analyze.read.capture.require_gpu_activity`."""
        capture.require_gpu_activity(self.path, usable_ops=usable_ops, conn=self._open())

    def tables(self, **kw) -> report.ReportTables:
        """:func:`analyze.read.report.read_report` (its keyword arguments)."""
        return report.read_report(self.path, conn=self._checked_conn(), **kw)

    def time_chunks(self, chunk_rows: int) -> report.TimeChunkPlan:
        """:func:`analyze.read.report.plan_time_chunks`."""
        return report.plan_time_chunks(self.path, chunk_rows, conn=self._open())


@contextlib.contextmanager
def opened(report_or_source):
    """A :class:`ReportSource` for a path (closed at the end), or the source given (left open)."""
    if isinstance(report_or_source, ReportSource):
        yield report_or_source
        return
    src = ReportSource(report_or_source)
    try:
        yield src
    finally:
        src.close()

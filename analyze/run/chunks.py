"""Time-ordered chunks of a report's GPU ops, for the map step (mapstep.py) under a memory budget.

Chunk k holds, from every op table, the ops that start in [T_k, T_k+1): the biggest op table is
cut every ``chunk_rows`` rows, the others at the same times. Two sources give them:

* :class:`SqliteChunks`: the export itself. nsys writes every activity table in start order
  (checked on every real export we have), so a chunk of a table is a rowid range, found by binary
  search on rowid; each chunk is checked to lie in its time slice after it is read, and
  :class:`NotTimeOrdered` is raised when it does not (the report is then analysed in one piece).
* :class:`CachedChunks`: the Parquet cache (read/cache.py), whose op tables are kept per kind in
  read order, in row groups with start statistics: a chunk of a table is the rows of the row
  groups that overlap its time slice, cut by start.

:func:`iter_chunks` reads the next chunk in a thread while one is analysed.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import numpy as np

from analyze.attribute.intervals import INT64_MIN
from analyze.read import report
from analyze.read.connection import open_report
from analyze.run.mapstep import OpChunk, chunk_of_parts

INT64_MAX = np.iinfo(np.int64).max


class NotTimeOrdered(Exception):
    """An op table's rows are not in start order: chunks by row would not cut time."""


# ------------------------------------------------------------------------------------------
# the export: rowid ranges

def _start_at(conn, table: str, rowid: int) -> tuple[int, int] | None:
    row = conn.execute(f"SELECT rowid, start FROM {table} WHERE rowid >= ? AND start IS NOT NULL "
                       "ORDER BY rowid LIMIT 1", (rowid,)).fetchone()
    return (int(row[0]), int(row[1])) if row else None


def _first_rowid_at(conn, table: str, t: int, lo: int, hi: int) -> int:
    """Smallest rowid in [lo, hi] whose start is >= t (hi when none), rows in start order."""
    while lo < hi:
        mid = (lo + hi) // 2
        found = _start_at(conn, table, mid)
        if found is None or found[0] >= hi:
            hi = mid
        elif found[1] >= t:
            hi = mid
        else:
            lo = found[0] + 1
    return lo


def plan_chunks(conn, chunk_rows: int) -> tuple[list[list[report.OpRead]], list[int]]:
    """(reads per chunk, chunk start times): the biggest op table cut every ``chunk_rows`` rows,
    the others cut at the same times."""
    whole = report.plan_gpu_op_reads(conn)
    tables = []
    for part in whole:
        span = report.rowid_span(conn, part.table)
        if span is not None:
            tables.append((part, span))
    if not tables:
        return [], []
    driver, d_span = max(tables, key=lambda t: t[1].rows)
    times = [INT64_MIN]
    for a in report.rowid_cuts(conn, driver.table, d_span, chunk_rows)[1:]:
        found = _start_at(conn, driver.table, a)
        if found is not None and found[1] > times[-1]:
            times.append(found[1])
    chunks: list[list[report.OpRead]] = [[] for _ in times]
    for part, span in tables:
        lo, hi = span.lo, span.hi
        cuts = [lo] + [_first_rowid_at(conn, part.table, t, lo, hi) for t in times[1:]] + [hi]
        for k in range(len(times)):
            a, b = cuts[k], max(cuts[k], cuts[k + 1])
            if b > a:
                chunks[k].append(report.OpRead(part.kind, part.table, part.sql, a, b, min(b - a, span.rows)))
    return chunks, times


class SqliteChunks:
    """The chunks of an export (``chunk_rows`` rows of its biggest op table each). ``on_read``:
    called with every part read, (op kind, frame), e.g. to write the cache as the chunks go by."""

    def __init__(self, path: str, chunk_rows: int, on_read=None):
        self.path, self.on_read = str(path), on_read
        conn = open_report(self.path, quick_check=False)
        try:
            self.immutable = conn.immutable
            self.reads, self.times = plan_chunks(conn, chunk_rows)
        finally:
            from analyze.read import fastread
            fastread.close(conn)
            conn.close()

    def __len__(self) -> int:
        return len(self.times)

    def read(self, k: int) -> OpChunk:
        from analyze.read import fastread
        own = open_report(self.path, immutable=self.immutable, quick_check=False)
        try:
            parts = [(r.kind, report.read_op_part(own, r)) for r in self.reads[k]]
        finally:
            fastread.close(own)
            own.close()
        if self.on_read is not None:
            for kind, frame in parts:
                self.on_read(kind, frame)
        return chunk_of_parts(parts)


class CachedChunks:
    """The chunks of a report's cached op tables (:class:`analyze.read.cache.CachedOps`)."""

    def __init__(self, ops, chunk_rows: int):
        self.ops = ops
        rows = {kind: ops.rows(kind) for kind in ops.kinds}
        self.times = [INT64_MIN]
        if rows:
            driver = max(rows, key=rows.get)
            for j in range(chunk_rows, rows[driver], chunk_rows):
                t = ops.start_at(driver, j)
                if t > self.times[-1]:
                    self.times.append(t)

    def __len__(self) -> int:
        return len(self.times)

    def read(self, k: int) -> OpChunk:
        lo = self.times[k]
        hi = self.times[k + 1] if k + 1 < len(self.times) else INT64_MAX
        try:
            parts = [(kind, self.ops.read_between(kind, lo, hi)) for kind in self.ops.kinds]
        except ValueError as exc:              # the cached rows of a kind are not in start order
            raise NotTimeOrdered(str(exc)) from exc
        return chunk_of_parts(parts)


def iter_chunks(source) -> Iterator[OpChunk]:
    """Every chunk of ``source`` in order, the next one read in a thread while the caller works on
    this one; raises :class:`NotTimeOrdered` when a chunk's ops do not lie in its time slice."""
    times = source.times
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="specprof-chunk") as pool:
        pending = pool.submit(source.read, 0) if len(source) else None
        for k in range(len(source)):
            chunk = pending.result()
            pending = pool.submit(source.read, k + 1) if k + 1 < len(source) else None
            lo_t = times[k]
            hi_t = times[k + 1] if k + 1 < len(times) else INT64_MAX
            start = chunk.start_ns
            if len(start) and (start.min() < lo_t or start.max() >= hi_t):
                if pending is not None:
                    pending.cancel()
                raise NotTimeOrdered(f"{getattr(source, 'path', 'the report')}: GPU op rows are not in start order")
            yield chunk
            del chunk

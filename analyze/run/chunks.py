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
from analyze.run.mapstep import OpChunk, chunk_of_parts

INT64_MAX = np.iinfo(np.int64).max


class NotTimeOrdered(Exception):
    """An op table's rows are not in start order: chunks by row would not cut time."""


# ------------------------------------------------------------------------------------------
# the export: rowid ranges (read/report.py plans and reads them)

class SqliteChunks:
    """The chunks of an export (``chunk_rows`` rows of its biggest op table each: the plan of
    :func:`analyze.read.report.plan_time_chunks`, ``ReportSource.time_chunks``). ``on_read``: called with every part read, (op
    kind, frame), e.g. to write the cache as the chunks go by."""

    def __init__(self, plan: report.TimeChunkPlan, on_read=None):
        self.path, self.on_read = plan.path, on_read
        self.plan = plan
        self.times = self.plan.times

    def __len__(self) -> int:
        return len(self.times)

    def read(self, k: int) -> OpChunk:
        parts = report.read_time_chunk(self.plan, k)
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

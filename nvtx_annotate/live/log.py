"""The per-cycle timing log of one process: Parquet files written in row groups, rotated by size.

A file is written under a temporary name (``<name>.parquet.tmp``) and renamed to ``<name>.parquet``
once its footer is written (rotation or close): a ``.parquet`` file is always complete. After each
rotation only the newest ``max_files`` complete files of this process are kept. pyarrow is imported
when the first row group is written. Schema and metadata: docs/live.md (``SCHEMA_VERSION``).
"""

from __future__ import annotations

import json
import os
import time
from operator import itemgetter

from .events import ROW_FIELDS
from .sink import SINK_FIELDS

LOG_FIELDS = ROW_FIELDS + SINK_FIELDS
"""The log's columns, in order: the timer's row, then the sink's."""
_ROW_VALUES = itemgetter(*LOG_FIELDS)

SCHEMA_VERSION = 1
META_PREFIX = "specprof."
"""File-level metadata keys: ``specprof.schema_version``, ``specprof.spec_config`` (JSON object),
``specprof.rank``, ``specprof.pid``, ``specprof.wall_offset_ns`` (``time.time_ns() -
time.perf_counter_ns()`` when the file was opened: add it to the host columns for wall-clock ns)."""

INT32_FIELDS = ("rank", "pid", "steps", "timed")
STRING_FIELDS = ("accept_lens",)
NON_NULL_FIELDS = ("rank", "pid", "cycle", "host_start_ns", "host_end_ns")
SUFFIX = ".parquet"
TMP_SUFFIX = ".parquet.tmp"


def arrow_schema(metadata: dict[str, str] | None = None):
    """The log's pyarrow schema (column order :data:`LOG_FIELDS`)."""
    import pyarrow as pa

    def kind(name):
        return pa.string() if name in STRING_FIELDS else pa.int32() if name in INT32_FIELDS else pa.int64()

    fields = [pa.field(name, kind(name), nullable=name not in NON_NULL_FIELDS) for name in LOG_FIELDS]
    return pa.schema(fields, metadata=metadata)


def file_metadata(rank: int, pid: int, spec_config, wall_offset_ns: int) -> dict[str, str]:
    """The file-level key/value metadata (all values strings)."""
    spec = spec_config._asdict() if hasattr(spec_config, "_asdict") else spec_config
    return {
        META_PREFIX + "schema_version": str(SCHEMA_VERSION),
        META_PREFIX + "spec_config": json.dumps(spec, sort_keys=True),
        META_PREFIX + "rank": str(int(rank)),
        META_PREFIX + "pid": str(int(pid)),
        META_PREFIX + "wall_offset_ns": str(int(wall_offset_ns)),
    }


def file_stem(rank: int, pid: int, seq: int) -> str:
    return f"specprof_live-r{int(rank)}-p{int(pid)}-{int(seq):05d}"


class LogWriter:
    """Rows in, Parquet row groups out: :meth:`add` buffers, every ``row_group_rows`` rows (or at
    :meth:`flush`) one row group is written; past ``max_bytes``, or once the file is ``max_age_s``
    old, the file is completed (readers see complete files only: a reader of the log, the trigger,
    gets fresh cycles every ``max_age_s`` whatever the cycle rate) and a new one opened at the next
    write. Not thread-safe: one thread (the sink's) calls it. ``clock``: seconds (tests)."""

    def __init__(self, directory: str, rank: int, pid: int, spec_config=None, row_group_rows: int = 1024,
                 max_bytes: int = 64 << 20, max_files: int = 240, compression: str = "zstd",
                 max_age_s: float = 60.0, clock=time.monotonic):
        if row_group_rows < 1 or max_bytes < 1 or max_files < 1 or not max_age_s > 0:
            raise ValueError("row_group_rows, max_bytes, max_files and max_age_s must be >= 1 (> 0)")
        self.max_age_s, self._clock, self._opened_s = float(max_age_s), clock, 0.0
        self.directory, self.rank, self.pid, self.spec_config = str(directory), int(rank), int(pid), spec_config
        self.row_group_rows, self.max_bytes, self.max_files, self.compression = (
            row_group_rows, max_bytes, max_files, compression)
        self._rows: list[dict] = []
        self._writer = self._out = None
        self._tmp = self._final = None
        self._seq = 0
        self.completed: list[str] = []  # this process's complete files, oldest first
        self.deleted: list[str] = []
        self.row_groups = 0

    def add(self, row: dict) -> None:
        self._rows.append(row)
        if len(self._rows) >= self.row_group_rows:
            self.flush()

    def buffered(self) -> int:
        return len(self._rows)

    def flush(self) -> None:
        """Write the buffered rows as one row group (nothing when none); rotate past ``max_bytes``."""
        if not self._rows:
            return
        import pyarrow as pa

        if self._writer is None:
            self._open()
        try:        # rows with every column (the timer's, through the sink): transposed at C speed
            cols = dict(zip(LOG_FIELDS, map(list, zip(*map(_ROW_VALUES, self._rows)))))
        except KeyError:
            cols = {name: [r.get(name) for r in self._rows] for name in LOG_FIELDS}
        table = pa.Table.from_pydict(cols, schema=self._writer.schema)
        self._writer.write_table(table, row_group_size=len(self._rows))
        self._rows = []
        self.row_groups += 1
        if self.bytes_written() >= self.max_bytes or self._clock() - self._opened_s >= self.max_age_s:
            self._complete()

    def complete_if_old(self) -> bool:
        """Complete the open file once it is ``max_age_s`` old when nothing is buffered (an idle server:
        no row group comes to complete it); True when it did."""
        return self._writer is not None and self._clock() - self._opened_s >= self.max_age_s and self.complete()

    def complete(self) -> bool:
        """Complete the open file now when nothing is buffered (a server gone idle); True when it did."""
        if self._writer is None or self._rows:
            return False
        self._complete()
        return True

    def abandon(self) -> None:
        """The log is given up (its output failed): complete the open file where that still works, else
        close its descriptor (the ``.tmp`` stays, unreadable); the buffered rows are dropped."""
        self._rows = []
        if self._writer is None:
            return
        try:
            self._complete()
        except Exception:  # noqa: BLE001 - the disk that failed the write may fail the footer too
            try:
                self._out.close()
            except Exception:  # noqa: BLE001
                pass
            self._writer = self._out = None

    def bytes_written(self) -> int:
        """Bytes of the open file so far (its row groups; the footer comes at completion)."""
        return self._out.tell() if self._writer is not None else 0

    def close(self) -> None:
        """Flush and complete the open file."""
        self.flush()
        if self._writer is not None:
            self._complete()

    # ------------------------------------------------------------------ files
    def _open(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        os.makedirs(self.directory, exist_ok=True)
        self._seq += 1
        self._opened_s = self._clock()
        stem = file_stem(self.rank, self.pid, self._seq)
        self._final = os.path.join(self.directory, stem + SUFFIX)
        self._tmp = os.path.join(self.directory, stem + TMP_SUFFIX)
        meta = file_metadata(self.rank, self.pid, self.spec_config, time.time_ns() - time.perf_counter_ns())
        self._out = pa.OSFile(self._tmp, "wb")
        self._writer = pq.ParquetWriter(self._out, arrow_schema(meta), compression=self.compression)

    def _complete(self) -> None:
        self._writer.close()  # footer written: the file is complete
        self._out.close()
        self._writer = self._out = None
        os.replace(self._tmp, self._final)
        self.completed.append(self._final)
        while len(self.completed) > self.max_files:
            old = self.completed.pop(0)
            try:
                os.remove(old)
                self.deleted.append(old)
            except FileNotFoundError:
                pass

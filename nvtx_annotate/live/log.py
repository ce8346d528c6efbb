"""The per-cycle timing log of one process: Parquet files, rotated by size and age.

The open file is an Arrow IPC stream (``<name>.arrows``): each flush appends one record batch, written to
the file at once (no buffer in this process), so a process killed with SIGKILL (SGLang's way of ending its
schedulers) leaves every batch but a cut-off last one readable: ``analyze-trace`` reads such a file's
complete batches and says so. At completion (rotation, close, an idle server) the stream becomes
``<name>.parquet`` (written as ``<name>.parquet.tmp``, renamed once its footer is written, then the stream
removed): a ``.parquet`` file is always complete, and a ``.parquet`` beside a ``.arrows`` of the same name
is the same rows. After each completion only the newest ``max_files`` complete files of this process are
kept. pyarrow is imported when the first batch is written. Schema and metadata: docs/live.md
(``SCHEMA_VERSION``).
"""

from __future__ import annotations

import json
import os
import time
from operator import itemgetter

from .sink import LOG_FIELDS  # noqa: F401 - the log's columns, in order (sink.py, the one definition)
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
OPEN_SUFFIX = ".arrows"
"""The open file: an Arrow IPC stream (Arrow's name for the stream format's files)."""
TMP_SUFFIX = ".parquet.tmp"
"""A Parquet file being written from a completed stream (renamed to ``.parquet`` once whole)."""


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
    """Rows in, record batches out: :meth:`add` buffers, every ``row_group_rows`` rows (or at
    :meth:`flush`) one batch is appended to the open stream; past ``max_bytes`` (the open stream's
    bytes), or once the file is ``max_age_s`` old, the file is completed (as Parquet, batches put together
    into row groups of ``row_group_rows`` or more: a reader of complete files, the trigger, gets fresh
    cycles every ``max_age_s`` whatever the cycle rate) and a new one opened at the next write. Not
    thread-safe: one thread (the sink's) calls it. ``clock``: seconds (tests)."""

    def __init__(self, directory: str, rank: int, pid: int, spec_config=None, row_group_rows: int = 1024,
                 max_bytes: int = 64 << 20, max_files: int = 240, compression: str = "zstd",
                 max_age_s: float = 60.0, clock=time.monotonic):
        if row_group_rows < 1 or max_bytes < 1 or max_files < 1 or not max_age_s > 0:
            raise ValueError("row_group_rows, max_bytes, max_files and max_age_s must be >= 1 (> 0)")
        self.max_age_s, self._clock, self._opened_s = float(max_age_s), clock, 0.0
        self.directory, self.rank, self.pid, self.spec_config = str(directory), int(rank), int(pid), spec_config
        self.row_group_rows, self.max_bytes, self.max_files, self.compression = (
            row_group_rows, max_bytes, max_files, compression)
        self._rows: list[tuple] = []   # each row's values in LOG_FIELDS order
        self._writer = self._out = None
        self._open_path = self._final = self._schema = None
        self._seq = 0
        self.completed: list[str] = []  # this process's complete files, oldest first
        self.deleted: list[str] = []
        self.row_groups = 0

    def add(self, row: dict) -> None:
        """A row as a dict of :data:`LOG_FIELDS` (a missing one null)."""
        try:
            values = _ROW_VALUES(row)
        except KeyError:
            values = tuple(map(row.get, LOG_FIELDS))
        self.add_values(values)

    def add_values(self, values: tuple) -> None:
        """A row as its values in :data:`LOG_FIELDS` order (the sink's rows: no dict a cycle)."""
        if len(values) != len(LOG_FIELDS):      # a short row would cut every column at the flush
            raise ValueError(f"a log row has {len(LOG_FIELDS)} values, not {len(values)}")
        self._rows.append(values)
        if len(self._rows) >= self.row_group_rows:
            self.flush()

    def buffered(self) -> int:
        return len(self._rows)

    def flush(self) -> None:
        """Append the buffered rows to the open stream as one batch (nothing when none); complete the file
        past ``max_bytes`` or ``max_age_s``."""
        if not self._rows:
            return
        import pyarrow as pa

        if self._writer is None:
            self._open()
        cols = dict(zip(LOG_FIELDS, map(list, zip(*self._rows))))     # transposed at C speed
        self._writer.write_table(pa.Table.from_pydict(cols, schema=self._schema))
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
        close its descriptor (the ``.arrows`` stays, readable up to its last whole batch); the buffered rows
        are dropped."""
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
        """Bytes of the open stream so far (its batches, uncompressed)."""
        return self._out.tell() if self._writer is not None else 0

    def close(self) -> None:
        """Flush and complete the open file."""
        self.flush()
        if self._writer is not None:
            self._complete()

    # ------------------------------------------------------------------ files
    def _open(self) -> None:
        import pyarrow as pa

        os.makedirs(self.directory, exist_ok=True)
        self._seq += 1
        self._opened_s = self._clock()
        stem = file_stem(self.rank, self.pid, self._seq)
        self._final = os.path.join(self.directory, stem + SUFFIX)
        self._open_path = os.path.join(self.directory, stem + OPEN_SUFFIX)
        meta = file_metadata(self.rank, self.pid, self.spec_config, time.time_ns() - time.perf_counter_ns())
        self._schema = arrow_schema(meta)
        self._out = pa.OSFile(self._open_path, "wb")     # unbuffered: a written batch is in the file
        self._writer = pa.ipc.new_stream(self._out, self._schema)

    def _complete(self) -> None:
        self._writer.close()  # the stream's end marker
        self._out.close()
        self._writer = self._out = None
        stream_to_parquet(self._open_path, self._final, self.row_group_rows, self.compression)
        os.remove(self._open_path)
        self.completed.append(self._final)
        while len(self.completed) > self.max_files:
            old = self.completed.pop(0)
            try:
                os.remove(old)
                self.deleted.append(old)
            except FileNotFoundError:
                pass


def stream_to_parquet(stream_path: str, parquet_path: str, row_group_rows: int, compression: str = "zstd") -> None:
    """A complete stream's batches -> a Parquet file (its schema and metadata), consecutive batches put together
    into row groups of ``row_group_rows`` or more; written beside it as ``.tmp`` and renamed once whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = parquet_path[: -len(SUFFIX)] + TMP_SUFFIX
    try:
        with pa.OSFile(stream_path, "rb") as src:
            reader = pa.ipc.open_stream(src)
            with pq.ParquetWriter(tmp, reader.schema, compression=compression) as out:
                group, rows = [], 0
                for batch in reader:
                    group.append(batch)
                    rows += batch.num_rows
                    if rows >= row_group_rows:
                        out.write_table(pa.Table.from_batches(group, reader.schema), row_group_size=rows)
                        group, rows = [], 0
                if group:
                    out.write_table(pa.Table.from_batches(group, reader.schema), row_group_size=rows)
        os.replace(tmp, parquet_path)
    except BaseException:       # a full disk: the stream stays (readable), no partial Parquet beside it
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def read_stream(path: str):
    """An open log file's whole batches, as a reader finds it (its writer running, or killed): (schema, batches,
    cut). ``cut``: the file ends inside a batch (a write cut short, or one being made now): that batch is left out.
    A stream ends at a batch or at Arrow's end marker otherwise. A schema that does not read (the file too short:
    its process killed before its first batch; damaged) gives (None, [], True). A missing file raises
    FileNotFoundError (completed meanwhile: its ``.parquet`` holds the rows), another unreadable one OSError."""
    import pyarrow as pa

    with pa.OSFile(str(path), "rb") as f:
        size = f.size()
        try:
            reader = pa.ipc.open_stream(f)
            schema = reader.schema
            schema.names       # noqa: B018 - a damaged schema's names may not decode
        except (pa.ArrowException, UnicodeDecodeError):
            return None, [], True
        batches, end = [], f.tell()
        while True:
            try:
                batches.append(reader.read_next_batch())
            except StopIteration:
                return schema, batches, False           # the end marker: its writer closed it
            except (pa.ArrowException, OSError):        # a batch cut short, or damaged: the ones before it kept
                return schema, batches, size > end
            end = f.tell()

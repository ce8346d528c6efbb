"""Optional cache of the tables extracted from a report, as Parquet (``--cache``).

Reading a big export is most of the cost of an analysis; the extracted tables
(:class:`analyze.read.report.ReportTables`) are small in comparison and load from Parquet in a
fraction of the time. The cache sits next to the report, in ``<report>.specprof-cache/<key>/``;
when the report's directory is not writable it goes to ``~/.cache/specprof/<key>/`` (or
``$SPECPROF_CACHE_DIR``) and :func:`load_or_read` says so in its note. The report itself is never
written to (it is only read, and opened read-only).

The key is the report's size, its mtime (ns) and the SHA-256 of its first MiB (the SQLite header
and the first pages, which change whenever SQLite rewrites the file), the same of a ``-wal`` file
beside it (a WAL database's newest pages are there, not in the main file), plus the cache format
version. Any change to the report gives a new key; stale entries are simply never read.
Entries are written to a fresh temporary directory and renamed into place, so a crash never leaves a
half-written entry that would be read later, and no existing file is ever written over (the output
policy of analyze/output_policy.py holds trivially: every file written is new).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from analyze import notes as N
from analyze.atomic import user_cache_dir
from analyze.notes import Note
from analyze.read import connection, ids, nccl_payloads, report, validate
from analyze.read.inputs import display_path

# 2: rows left out at the read (meta excluded_rows), session end, host name; 3: GPU ops in row groups
# of one kind each, with a kind code column; 4: the synchronize calls kept with the needed calls (the
# cycle table's host_wait_ns); 5: the NCCL ranges with a decoded message size (nccl_messages; their info
# in meta)
FORMAT = 5
HEADER_BYTES = 1 << 20
TABLES = ("calls", "ranges", "marks", "processes", "devices", "nccl_messages")
# rows per row group of gpu_ops.parquet: a chunk of a budgeted analysis reads the row groups that
# overlap its time slice (their start statistics say which)
OPS_ROW_GROUP_ROWS = 65_536
OPS_FILE = "gpu_ops.parquet"
_OP_COLUMNS = report.GPU_OP_COLUMNS[1:]


def cache_key(path: str | os.PathLike) -> str:
    """The entry's name: the report's size, mtime and first MiB, and the same of any ``-wal`` file
    beside it (a WAL database's newest pages live in the ``-wal``: a change there changes the key)."""
    p = Path(path)
    connection.require_regular_file(p)      # a FIFO would block the read below
    st = p.stat()
    h = hashlib.sha256()
    with open(p, "rb") as f:
        h.update(f.read(HEADER_BYTES))
    key = f"v{FORMAT}-{st.st_size}-{st.st_mtime_ns}"
    wal = Path(str(p) + "-wal")
    if wal.is_file():
        wst = wal.stat()
        with open(wal, "rb") as f:
            h.update(f.read(HEADER_BYTES))
        key += f"-wal{wst.st_size}-{wst.st_mtime_ns}"
    return f"{key}-{h.hexdigest()[:24]}"


def _writable(d: Path) -> bool:
    return d.is_dir() and os.access(d, os.W_OK | os.X_OK)


def candidates(path: str | os.PathLike) -> list[Path]:
    """Where the entry for ``path`` may live: next to the report, then the user cache."""
    p = Path(path).resolve()
    key = cache_key(p)
    return [p.parent / (p.name + ".specprof-cache") / key,
            user_cache_dir() / (hashlib.sha256(os.fsencode(str(p))).hexdigest()[:16] + "-" + p.name) / key]


def _kind_file(directory: Path, kind: str) -> Path:
    return directory / f"ops.{kind}.parquet"


def _op_arrow(frame: pd.DataFrame, kind: str | None = None):
    """One part of an op table (GPU_OP_COLUMNS but ``kind``) as Arrow, every column int64
    (``graph_node_id`` nullable); with ``kind``, a first column ``kind`` (int8 code into
    report.GPU_OP_KINDS)."""
    import pyarrow as pa

    arrays = [pa.array(pd.to_numeric(frame[c], errors="coerce").astype("Int64" if c == "graph_node_id" else "int64"),
                       type=pa.int64(), from_pandas=True) for c in _OP_COLUMNS]
    names = list(_OP_COLUMNS)
    if kind is not None:
        arrays.insert(0, pa.array(np.full(len(frame), report.GPU_OP_KINDS.index(kind), dtype="int8")))
        names.insert(0, "kind")
    return pa.Table.from_arrays(arrays, names=names)


def _parquet_writer(path: Path, schema):
    """A ParquetWriter on a file object (any path, UTF-8 or not); closing it closes the file."""
    import pyarrow.parquet as pq

    sink = open(path, "wb")
    try:
        writer = pq.ParquetWriter(sink, schema)
    except BaseException:
        sink.close()
        raise
    close = writer.close

    def close_both():
        try:
            close()
        finally:
            sink.close()
    writer.close = close_both
    return writer


def _parquet_file(path: Path):
    """A ParquetFile on an open file object of ``path`` (any path, UTF-8 or not; the file is closed
    with the ParquetFile)."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(open(path, "rb"))  # noqa: SIM115 - owned by the ParquetFile


def _read_parquet(path: Path) -> pd.DataFrame:
    with open(path, "rb") as f:
        return pd.read_parquet(f)


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    with open(path, "wb") as f:          # a file object: any path, UTF-8 or not
        frame.to_parquet(f, index=False)


class EntryWriter:
    """A cache entry being written: a temporary directory, renamed into place by :meth:`commit`
    (another process that wrote the same entry first wins), removed by :meth:`abort`. The op
    tables are appended part by part (:meth:`append_ops`, one file per kind meanwhile), so a
    budgeted analysis writes its chunks as they go by; :meth:`commit` joins them into one file,
    the kinds one after the other, row group by row group."""

    def __init__(self, entry: Path):
        self.entry = entry
        entry.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
        self._writers: dict = {}

    def write_tables(self, tables: report.ReportTables) -> None:
        """Everything but the GPU ops."""
        for name in TABLES:
            frame = getattr(tables, name)
            if frame is None:             # (nccl_messages of tables not read by read_report)
                frame = nccl_payloads.empty_frame()
            _write_parquet(frame.reset_index(drop=True), self.tmp / f"{name}.parquet")
        _write_parquet(pd.DataFrame({"id": tables.strings.index.to_numpy(dtype="int64"),
                                     "value": tables.strings.to_numpy(dtype=object)}), self.tmp / "strings.parquet")
        self.write_meta(tables.meta, tables.cross_thread_ranges)

    def write_meta(self, meta: dict, cross_thread_ranges: int) -> None:
        (self.tmp / "meta.json").write_text(json.dumps({"meta": meta, "cross_thread_ranges": int(cross_thread_ranges)}))

    def append_ops(self, kind: str, frame: pd.DataFrame) -> None:
        if not len(frame):
            return
        table = _op_arrow(frame, kind)
        writer = self._writers.get(kind)
        if writer is None:
            writer = self._writers[kind] = _parquet_writer(_kind_file(self.tmp, kind), table.schema)
        writer.write_table(table, row_group_size=OPS_ROW_GROUP_ROWS)

    def write_ops(self, ops: pd.DataFrame) -> None:
        """A whole op table (kinds in blocks, as the reader assembles it)."""
        codes = ops["kind"].cat.codes.to_numpy() if len(ops) else np.zeros(0, dtype="int8")
        for i, kind in enumerate(ops["kind"].cat.categories):
            rows = np.flatnonzero(codes == i)
            if len(rows):
                contiguous = rows[-1] - rows[0] + 1 == len(rows)
                self.append_ops(kind, ops.iloc[rows[0]:rows[-1] + 1] if contiguous else ops.iloc[rows])

    def _join_ops(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers = {}
        out = None
        try:
            for kind in report.GPU_OP_KINDS:
                part = _kind_file(self.tmp, kind)
                if not part.is_file():
                    continue
                f = _parquet_file(part)
                for g in range(f.num_row_groups):
                    table = f.read_row_group(g)
                    if out is None:
                        out = _parquet_writer(self.tmp / OPS_FILE, table.schema)
                    out.write_table(table, row_group_size=OPS_ROW_GROUP_ROWS)
                part.unlink()
            if out is None:           # no ops: the file with its columns, no rows
                out = _parquet_writer(self.tmp / OPS_FILE, _op_arrow(pd.DataFrame({c: [] for c in _OP_COLUMNS}),
                                                                     "kernel").schema)
        finally:
            if out is not None:
                out.close()

    def commit(self) -> None:
        self._join_ops()
        try:
            os.rename(self.tmp, self.entry)
        except OSError:          # another process wrote the same entry first: keep theirs
            shutil.rmtree(self.tmp, ignore_errors=True)

    def abort(self) -> None:
        for writer in self._writers.values():
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - the entry is thrown away anyway
                pass
        self._writers = {}
        shutil.rmtree(self.tmp, ignore_errors=True)
        try:
            self.entry.parent.rmdir()        # the cache folder beside the report, when nothing else is in it
        except OSError:
            pass


def _save(tables: report.ReportTables, entry: Path) -> None:
    writer = EntryWriter(entry)
    try:
        writer.write_tables(tables)
        writer.write_ops(tables.gpu_ops)
        writer.commit()
    except BaseException:
        writer.abort()
        raise


def _object_strings(frame: pd.DataFrame) -> pd.DataFrame:
    # Parquet gives back pandas' string dtype; the reader hands out object columns
    for c in frame.columns:
        if pd.api.types.is_string_dtype(frame[c]) and not pd.api.types.is_object_dtype(frame[c]):
            frame[c] = frame[c].astype(object).where(frame[c].notna(), None)
    return frame


def load_tables(path: str, entry: Path, ops: bool = True) -> report.ReportTables:
    """The tables of a cache entry (``ops=False``: the GPU ops left out, an empty table; a
    budgeted analysis reads them in chunks through :class:`CachedOps`)."""
    frames = {name: _object_strings(_read_parquet(entry / f"{name}.parquet")) for name in TABLES}
    s = _read_parquet(entry / "strings.parquet")
    strings = pd.Series(s["value"].to_numpy(dtype=object), index=s["id"].to_numpy(dtype="int64"), name="value")
    saved = json.loads((entry / "meta.json").read_text())
    if ops:
        table = _parquet_file(entry / OPS_FILE).read()
        gpu_ops = _ops_frame(table)
        for c in report.NARROW_OP_COLUMNS:      # the whole op table, as report.OpTableBuilder holds it
            gpu_ops[c] = ids.narrow_ids(gpu_ops[c].to_numpy())
        gpu_ops.insert(0, "kind", pd.Categorical.from_codes(table.column("kind").to_numpy().astype("int8"),
                                                            categories=list(report.GPU_OP_KINDS)))
        del table
    else:
        gpu_ops = report.assemble_kinds([])
    return report.ReportTables(path=display_path(path), strings=strings, meta=saved["meta"], gpu_ops=gpu_ops,
                               cross_thread_ranges=int(saved.get("cross_thread_ranges", 0)), **frames)


def _ops_frame(table) -> pd.DataFrame:
    """GPU_OP_COLUMNS but ``kind`` from an Arrow table of the op file, typed as read_op_part types a part
    (int64; the whole table's small ids are narrowed by load_tables, as the read's assembly does)."""
    out = {}
    for name in _OP_COLUMNS:
        col = table.column(name)
        if name == "graph_node_id":
            values = col.fill_null(0).to_numpy().astype("int64", copy=False)
            missing = col.is_null().to_numpy()
            out[name] = pd.arrays.IntegerArray(values, np.asarray(missing, dtype=bool))
        else:
            out[name] = col.to_numpy().astype("int64", copy=False)
    return pd.DataFrame(out, copy=False)


class CachedOps:
    """The op table of a cache entry, read by kind and time slice: per kind, the rows in read
    order, in row groups whose start statistics (min, max) say which ones a slice needs."""

    def __init__(self, entry: Path):
        self.file = entry / OPS_FILE
        meta = _parquet_file(self.file).metadata
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        at_kind, at_start = names.index("kind"), names.index("start_ns")
        groups: dict[str, list] = {}
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            if not rg.num_rows:
                continue
            k, st = rg.column(at_kind).statistics, rg.column(at_start).statistics
            kind = report.GPU_OP_KINDS[int(k.min)]
            groups.setdefault(kind, []).append((g, rg.num_rows, int(st.min), int(st.max)))
        self.kinds = [k for k in report.GPU_OP_KINDS if k in groups]
        self._groups = {k: tuple(np.array(col, dtype="int64") for col in zip(*groups[k])) for k in self.kinds}
        self._start_cache: tuple[str, int, np.ndarray] | None = None

    def rows(self, kind: str) -> int:
        return int(self._groups[kind][1].sum())

    def _read(self, row_groups: list[int], columns=None):
        import pyarrow.parquet as pq

        with open(self.file, "rb") as f:      # a file object: any path, UTF-8 or not
            return pq.ParquetFile(f).read_row_groups(row_groups, columns=columns)

    def start_at(self, kind: str, j: int) -> int:
        """The start of row ``j`` (in read order) of ``kind``."""
        ids, rows, _, _ = self._groups[kind]
        first = np.r_[0, np.cumsum(rows)]
        g = int(np.searchsorted(first, j, side="right") - 1)
        if self._start_cache is None or self._start_cache[:2] != (kind, g):
            col = self._read([int(ids[g])], columns=["start_ns"])
            self._start_cache = (kind, g, col.column(0).to_numpy())
        return int(self._start_cache[2][j - first[g]])

    def keys(self):
        """Per row group, the ops' (process, correlation id) as int64 arrays: what the chunked
        analysis needs to prepare only the launching calls (run/launches.needed_calls_in_blocks)."""
        for kind in self.kinds:
            for g in self._groups[kind][0].tolist():
                t = self._read([int(g)], columns=["global_pid", "correlation_id"])
                yield (t.column(0).to_numpy().astype("int64", copy=False),
                       t.column(1).to_numpy().astype("int64", copy=False))

    def total_rows(self) -> int:
        return sum(self.rows(k) for k in self.kinds)

    def read_between(self, kind: str, lo: int, hi: int) -> pd.DataFrame:
        """The rows of ``kind`` that start in [lo, hi). Raises ValueError when the rows are not in
        start order (a chunk could not be cut from them)."""
        ids, rows, g_lo, g_hi = self._groups[kind]
        if len(rows) > 1 and (g_lo[1:] < g_hi[:-1]).any():
            raise ValueError(f"{self.file}: the cached {kind} rows are not in start order")
        pick = np.flatnonzero((g_hi >= lo) & (g_lo < hi))
        if not len(pick):
            return _ops_frame(_empty_ops_table())
        frame = _ops_frame(self._read(ids[pick].tolist(), columns=list(_OP_COLUMNS)))
        start = frame["start_ns"].to_numpy()
        if len(start) > 1 and (start[1:] < start[:-1]).any():
            raise ValueError(f"{self.file}: the cached {kind} rows are not in start order")
        a, b = np.searchsorted(start, lo, side="left"), np.searchsorted(start, hi, side="left")
        return frame.iloc[a:b].reset_index(drop=True)


def _empty_ops_table():
    import pyarrow as pa
    return pa.Table.from_arrays([pa.array([], type=pa.int64()) for _ in _OP_COLUMNS], names=_OP_COLUMNS)


class ChunkFill:
    """The cache entry of a report analysed in chunks, filled as the chunks are read: the tables
    first, then every part of the op tables (:meth:`append`), with the rows their read left out
    (read/validate.py) added to the entry's meta at :meth:`commit`, as a whole read records them. A
    failure to write drops the entry and says so (:attr:`note`); the analysis is not affected."""

    def __init__(self, path: str, tables: report.ReportTables):
        self.note: Note | None = None
        self.meta, self.cross_thread_ranges = dict(tables.meta or {}), int(tables.cross_thread_ranges)
        self.excluded: list = list(self.meta.get(report.EXCLUDED) or [])
        entry, self.where = writable_entry(path)
        try:
            self.writer: EntryWriter | None = EntryWriter(entry)
            self.writer.write_tables(tables)
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        if self.writer is not None:
            self.writer.abort()
        self.writer = None
        self.note = Note(N.CACHE_NOT_WRITTEN, f"cache: could not write a cache entry ({exc}); analysis not affected")

    def append(self, kind: str, frame: pd.DataFrame) -> None:
        if self.writer is None:
            return
        self.excluded += list(frame.attrs.get(report.EXCLUDED) or [])
        try:
            self.writer.append_ops(kind, frame)
        except OSError as exc:
            self._failed(exc)

    def commit(self) -> Note | None:
        """Put the entry in place; the note to show (where it went, or why there is none)."""
        if self.writer is None:
            return self.note
        try:
            self.meta[report.EXCLUDED] = [list(x) for x in validate.merge(self.excluded)]
            self.writer.write_meta(self.meta, self.cross_thread_ranges)
            self.writer.commit()
        except OSError as exc:
            self._failed(exc)
            return self.note
        return self.where

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()
        self.writer = None


def find_entry(path: str) -> tuple[Path | None, Note | None]:
    """The readable entry of ``path`` (next to the report, else in the user cache) and the note
    that says where it was found when not next to the report; (None, None) when there is none."""
    near, far = candidates(path)
    for entry in (near, far):
        if (entry / "meta.json").is_file():
            return entry, (None if entry == near else Note(N.CACHE_READ_ELSEWHERE, f"cache: read from {entry}"))
    return None, None


def writable_entry(path: str) -> tuple[Path, Note | None]:
    """Where a new entry of ``path`` goes: next to the report when its directory is writable, else in
    the user cache (with the note that says so)."""
    near, far = candidates(path)
    if _writable(near.parent.parent):
        return near, None
    return far, Note(N.CACHE_WRITTEN_ELSEWHERE, f"cache: {near.parent.parent} is not writable; cached the tables "
                     f"in {far.parent} instead")


def load_or_read(path: str, reader=None) -> tuple[report.ReportTables, Note | None]:
    """Tables of ``path`` from the cache, else read (``reader(path)``) and cached. Returns
    (tables, note): note says where the entry came from or went, None when next to the report."""
    reader = reader or report.read_report
    entry, note = find_entry(path)
    if entry is not None:
        try:
            return load_tables(path, entry), note
        except Exception:  # noqa: BLE001 - unreadable entry: read the report again
            shutil.rmtree(entry, ignore_errors=True)
    tables = reader(path)
    near, far = candidates(path)
    if _writable(near.parent.parent):
        try:
            _save(tables, near)
            return tables, None
        except OSError:
            pass
    try:
        _save(tables, far)
        note = Note(N.CACHE_WRITTEN_ELSEWHERE, f"cache: {near.parent.parent} is not writable; cached the tables in "
                    f"{far.parent} instead")
    except OSError as exc:
        note = Note(N.CACHE_NOT_WRITTEN, f"cache: could not write a cache entry ({exc}); analysis not affected")
    return tables, note

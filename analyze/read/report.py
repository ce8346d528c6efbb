"""Reading one nsys SQLite export into plain DataFrames.

Tables and columns are detected by name (``PRAGMA table_info``), never by position: exports from
nsys 2022.4 (schema 3.0) to 2026.x (3.25) differ in both. A missing table means "no such events".
Only the columns the analysis needs are read; strings stay integer ids until they are needed.

Everything here is a small function returning a DataFrame; :func:`read_report` bundles them in a
:class:`ReportTables` (a named tuple, nothing more).
"""
from __future__ import annotations

import os
import sqlite3
from typing import NamedTuple

import numpy as np
import pandas as pd

from analyze.errors import CorruptReport, TraceError
from analyze.read import connection
from analyze.read import capture
from analyze.read import fastread
from analyze.read import ids
from analyze.read import nccl_payloads
from analyze.read import statement as S
from analyze.read import validate
from analyze.read.connection import export_schema_version, open_report
from analyze.read.inputs import display_path

TID_MASK = 0xFFFFFF
# the low 24 bits of a globalTid are the thread id; clearing them gives the globalPid
PID_OF_TID = ~np.int64(TID_MASK)

RANGE_EVENT_STYLES = {59: "PushPop", 70: "PushPop", 60: "StartEnd", 71: "StartEnd"}
MARK_EVENTS = (34,)
DOMAIN_CREATE_EVENT = 75

GPU_OP_TABLES = {
    "kernel": "CUPTI_ACTIVITY_KIND_KERNEL",
    "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "memset": "CUPTI_ACTIVITY_KIND_MEMSET",
    "graph": "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
}
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
CALL_COLUMNS = ("globalTid", "correlationId", "start", "end")

GPU_OP_COLUMNS = ["kind", "global_pid", "device_id", "stream_id", "correlation_id", "graph_node_id",
                  "name_id", "start_ns", "end_ns"]


class ReportTables(NamedTuple):
    """What one export holds, as DataFrames (times in ns on the report's own clock)."""

    path: str                   # the report as results name it: read.inputs.display_path (UTF-8 always)
    strings: pd.Series          # index: string id, value: text
    gpu_ops: pd.DataFrame       # GPU_OP_COLUMNS (NARROW_OP_COLUMNS int32 where every value fits)
    calls: pd.DataFrame         # global_tid, global_pid, correlation_id, name_id, start_ns, end_ns
    ranges: pd.DataFrame        # global_tid, global_pid, domain, name, style, start_ns, end_ns, end_missing
    marks: pd.DataFrame         # global_tid, global_pid, domain, text, time_ns, int_value
    processes: pd.DataFrame     # global_pid, pid, name
    devices: pd.DataFrame       # pid, cuda_id, gpu_id, gpu_name, bus
    meta: dict                  # schema_version, utc_start_ns, cuda_graph_trace, nsys_version
    cross_thread_ranges: int = 0  # start/end ranges that end on another thread (left out, as nsys does)
    prepared: object = None     # the launches run/ prepared from these tables (run/launches.py); never set here
    nccl_messages: pd.DataFrame | None = None   # nccl_payloads.COLUMNS (its info: meta[nccl_payloads.INFO])
    op_keys: object = None      # read_report(ops=False, op_keys=True): the GPU ops' keys (OpKeyBlocks)


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return connection.table_columns(conn, table)


def _read(conn: sqlite3.Connection, stmt: S.Statement, columns: list[str], copy: bool = True) -> pd.DataFrame:
    """Read ``stmt`` (read/statement.py: a statement as data, never SQL text) into a DataFrame with
    ``columns`` (the one place rows are fetched).

    The readers (pages.py; the stdlib cursor where it does not read a statement) are in fastread.py.
    ``copy=False``: integer columns may be read-only views of the Arrow buffers."""
    return fastread.read_frame(conn, stmt, columns, copy=copy)


def table_rows(conn: sqlite3.Connection, table: str) -> int | None:
    """The rows of ``table`` (:func:`rowid_span`: an upper bound where the probes miss gaps); None
    when the table is missing or empty."""
    if not connection.has_table(conn, table):
        return None
    span = rowid_span(conn, table)
    return span.rows if span is not None else None


# bytes a row of a rowid table takes at least in the file: its cell pointer (2), payload size and
# rowid varints and record header size (one byte each at least; a record may hold fewer columns
# than the table, written before an ALTER TABLE ADD COLUMN, and values of serial types 0, 8 and 9,
# NULL, 0 and 1, take no bytes)
_MIN_CELL_BYTES = 5


class RowidSpan(NamedTuple):
    """A table's rowids: [lo, hi), and how many rows it has (``dense``: taken to be hi - lo, as
    nsys writes its tables, 1, 2, 3, ...; else counted)."""

    lo: int
    hi: int
    rows: int
    dense: bool


# rowids looked up, evenly spaced over a table's rowid range, to tell a dense range from one with gaps
GAP_PROBES = 32


def rowid_span(conn: sqlite3.Connection, table: str) -> RowidSpan | None:
    """The rowid range of ``table`` and its row count, None when it is empty. The range's length
    is the count when the range is dense: no longer than the file could hold (every page full of
    the smallest rows a table can have) and every one of GAP_PROBES evenly spaced rowids present
    (B-tree seeks, no scan). Else the rowids have gaps (rows deleted, rowids set by hand) and the
    rows are counted (one pass over the table's B-tree), so that nothing is sized or cut by a span
    of, say, 2**40 rowids or every thousandth rowid that holds a few thousand rows. (Gaps the
    probes miss leave the count an upper bound: arrays a little too big, chunks a little small.)"""
    lo, hi = rowid_bounds(conn, table)
    if lo is None:
        return None
    lo, hi = int(lo), int(hi) + 1
    page_count = int(conn.execute("PRAGMA page_count").fetchone()[0])
    page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
    if hi - lo <= page_count * page_size // _MIN_CELL_BYTES:
        probes = sorted({lo + k * (hi - 1 - lo) // (GAP_PROBES - 1) for k in range(GAP_PROBES)})
        found = conn.execute(f"SELECT count(*) FROM {table} WHERE rowid IN ({', '.join(map(str, probes))})")
        if int(found.fetchone()[0]) == len(probes):
            return RowidSpan(lo, hi, hi - lo, True)
    return RowidSpan(lo, hi, _counted_rows(conn, table), False)


_COUNTED: dict[tuple, int] = {}       # (file, its size and mtime, table) -> rows counted


def _counted_rows(conn: sqlite3.Connection, table: str) -> int:
    """``count(*)`` of ``table`` (a pass over its B-tree), once per unchanged file: a report's
    estimate, plan and reads each ask for it. (Remembered for a report opened ``immutable`` only:
    with a WAL or journal beside it, rows may change without the file changing.)"""
    path = getattr(conn, "path", None) if getattr(conn, "immutable", False) else None
    try:
        st = os.stat(path) if path else None
    except OSError:
        st = None
    key = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, table) if st else None
    if key is not None and key in _COUNTED:
        return _COUNTED[key]
    rows = int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    if key is not None:
        _COUNTED[key] = rows
    return rows


def rowid_cuts(conn: sqlite3.Connection, table: str, span: RowidSpan, every_rows: int) -> list[int]:
    """Rowids that cut ``table`` into ranges of ``every_rows`` rows, [cuts[i], cuts[i + 1]) and the
    last one up to ``span.hi``: arithmetic on a dense span, else walked (a seek and ``every_rows``
    steps of the B-tree per cut)."""
    every_rows = max(int(every_rows), 1)
    if span.dense:
        return list(range(span.lo, span.hi, every_rows))
    cuts = [span.lo]
    while True:
        row = conn.execute(f"SELECT rowid FROM {table} WHERE rowid >= ? ORDER BY rowid LIMIT 1 OFFSET ?",
                           (cuts[-1], every_rows)).fetchone()
        if row is None:
            return cuts
        cuts.append(int(row[0]))


def rowid_bounds(conn: sqlite3.Connection, table: str) -> tuple[int | None, int | None]:
    """(min rowid, max rowid) of ``table``: two B-tree seeks. (One ``SELECT min(rowid), max(rowid)``
    is a full scan: SQLite's min/max shortcut takes a single aggregate only.)"""
    lo = conn.execute(f"SELECT min(rowid) FROM {table}").fetchone()[0]
    hi = conn.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0]
    return lo, hi


def _concat_columns(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """``pd.concat(frames, ignore_index=True)``, one column at a time: every part's column is
    released as soon as it is copied, so the peak is the result plus one column, not twice the
    table. Columns of one dtype across parts are joined by NumPy; anything else by pandas."""
    frames = [f for f in frames if len(f)] or frames[:1]
    if len(frames) == 1:
        return frames[0]
    out = {}
    for c in list(frames[0].columns):
        parts = [f[c] for f in frames]
        if all(p.dtype == np.int64 for p in parts):
            out[c] = np.concatenate([p.to_numpy() for p in parts])
        else:
            out[c] = pd.concat(parts, ignore_index=True)
        del parts
        for f in frames:
            del f[c]
    return pd.DataFrame(out, copy=False)


def _int64(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    for c in cols:
        if frame[c].dtype == np.int64:      # already clean (the usual case): no copy
            continue
        # text, NULL, non-finite or out-of-range values (never written by nsys) become -1: no process,
        # no correlation (the op stays unlinked and is counted in the unlinked_ops note)
        values, ok = validate.integer_values(frame[c].to_numpy())
        frame[c] = np.where(ok, values, -1)
    return frame


GPU_OP_KINDS = tuple(GPU_OP_TABLES)


def kind_column(kind: str, n: int) -> pd.Categorical:
    """The ``kind`` column: a categorical over the four op kinds (one byte per op, not a string)."""
    return pd.Categorical.from_codes(np.full(n, GPU_OP_KINDS.index(kind), dtype="int8"),
                                     categories=list(GPU_OP_KINDS))


def read_strings(conn: sqlite3.Connection) -> pd.Series:
    cols = table_columns(conn, "StringIds")
    if not {"id", "value"} <= set(cols):
        return pd.Series(dtype="object", name="value")
    frame = _read(conn, S.select("StringIds", [S.column("id"), S.column("value")]), ["id", "value"])
    # nsys writes each id once, as an integer; text, real or NULL ids and a second row of an id (a
    # damaged or hand-edited export) are left out and counted: the first row of an id names it
    ids, ok = validate.integer_values(frame["id"].to_numpy())
    first = ok.copy()
    if ok.any():
        dup = pd.Index(ids[ok]).duplicated(keep="first")
        first[np.flatnonzero(ok)[dup]] = False
    strings = pd.Series(frame["value"].to_numpy(dtype=object)[first], index=ids[first], name="value")
    bad = int(len(frame) - first.sum())
    if bad:
        strings.attrs[EXCLUDED] = validate.exclusions("strings", {validate.BAD_IDS: bad})
    return strings


def _name_item(cols: list[str]) -> S.Item:
    # nsys' kernel summaries name kernels by their demangled name; fall back to the short one
    return S.present(cols, "demangledName", "shortName", "mangledName", "nameId", "name")


class OpRead(NamedTuple):
    """One SELECT of GPU ops: a table (an op kind), optionally one rowid range of it."""

    kind: str
    table: str
    stmt: S.Statement           # every row of the table (the range below narrows it)
    rowid_lo: int | None        # [rowid_lo, rowid_hi) or None for the whole table
    rowid_hi: int | None
    rows_hint: int | None
    key_stmt: S.Statement | None = None   # the ops' process and correlation id only (read_op_keys)


def plan_gpu_op_reads(conn: sqlite3.Connection, chunk_rows: int | None = None,
                      split: int = 1) -> list[OpRead]:
    """The SELECTs that read every GPU op, in the order their rows make the op table: one per op
    table, or rowid ranges of ``chunk_rows`` rows (bounded memory), or a table of SPLIT_MIN_ROWS
    rows or more cut in ``split`` rowid ranges (parallel readers), more where they would exceed
    PART_MAX_ROWS rows.

    rowid is the table's B-tree key, so every range is a seek (a ``start`` range would be a full
    scan per chunk: nsys creates no index on start); ranges come in rowid order, the order of a
    full scan, so the parts make the same table as one read."""
    plan: list[OpRead] = []
    for kind, table in GPU_OP_TABLES.items():
        cols = table_columns(conn, table)
        if not {"start", "end", "correlationId"} <= set(cols):
            continue
        pid = S.present(cols, "globalPid", default=S.mask("globalTid", 16777215) if "globalTid" in cols
                        else S.const(0))
        dev = S.present(cols, "deviceId", default=S.const(-1))
        stream = S.present(cols, "streamId", default=S.const(-1))
        node = S.present(cols, "graphNodeId")
        if kind == "kernel":
            name = _name_item(cols)
        elif kind == "graph":
            name = S.present(cols, "graphId")
        else:
            name = S.NULL
        # every row is read, NULL timestamps too: read_op_part counts what it leaves out
        stmt = S.select(table, [pid, dev, stream, S.column("correlationId"), node, name, S.column("start"),
                                S.column("end")])
        key_stmt = S.select(table, [pid, S.column("correlationId")])
        span = rowid_span(conn, table)
        if span is None:
            plan.append(OpRead(kind, table, stmt, None, None, None, key_stmt))
            continue
        step = int(chunk_rows) if chunk_rows else (min(-(-span.rows // split), PART_MAX_ROWS)
                                                   if split > 1 and span.rows >= SPLIT_MIN_ROWS else None)
        if not step:   # the row count (an upper bound), so arrays are sized once
            plan.append(OpRead(kind, table, stmt, None, None, span.rows, key_stmt))
            continue
        cuts = rowid_cuts(conn, table, span, step) + [span.hi]
        plan += [OpRead(kind, table, stmt, a, b, min(step, b - a), key_stmt) for a, b in zip(cuts, cuts[1:])]
    return plan


# a table smaller than this is read by one reader (threads cost more than they save)
SPLIT_MIN_ROWS = 1_000_000
# (issue 42, 2026-12-05: one reader instead on sglang_k1000000 1.12x peak, synth 1.06x; wall 0.96-1.01x)
# rows of a part of a table read in parallel at most: the parts read, and read but not yet copied
# into the op table, are what the read holds beside the op table (10M ops: with 1M-row parts instead of four of 2.5M rows, and the
# window, the heap's bytes in use at the read's peak went from 1712 to 1413 MiB, docs/performance.md)
PART_MAX_ROWS = 1 << 20
_OP_INT_COLUMNS = [c for c in GPU_OP_COLUMNS[1:] if c.endswith(("_ns", "_id", "_pid")) and c != "graph_node_id"]


def session_end_ns(conn: sqlite3.Connection) -> int | None:
    """The capture session's length (``ANALYSIS_DETAILS.duration``, ns from t=0); None when the
    export does not say (older exports, synthetic ones)."""
    if "duration" not in table_columns(conn, "ANALYSIS_DETAILS"):
        return None
    row = conn.execute("SELECT max(duration) FROM ANALYSIS_DETAILS WHERE typeof(duration) = 'integer'").fetchone()
    return int(row[0]) if row and row[0] is not None and int(row[0]) > 0 else None


# where the rows a read left out travel with the rows (a list of validate.Exclusion)
EXCLUDED = "excluded_rows"
CROSS_THREAD = "cross_thread_ranges"     # read_nvtx's count of ranges ending on another thread


def read_op_part(conn: sqlite3.Connection, part: OpRead) -> pd.DataFrame:
    """The rows of one planned read (GPU_OP_COLUMNS but ``kind``), without the rows nsys never writes
    (read/validate.py: bad timestamps, end < start, outside the session, exact duplicates), which
    are counted in ``frame.attrs["excluded_rows"]``."""
    frame = _read(conn, part.stmt.rowids(part.rowid_lo, part.rowid_hi), GPU_OP_COLUMNS[1:], copy=False)
    frame, excluded = _valid_ops(frame, part.kind, session_end_ns(conn))
    frame = _int64(frame, _OP_INT_COLUMNS)
    frame.attrs[EXCLUDED] = excluded
    return frame


# rows per read of the ops' keys (read_op_keys): 16 MiB of arrays at a time
OP_KEY_CHUNK_ROWS = 1 << 20
_KEY_COLUMNS = ["global_pid", "correlation_id"]


def read_op_keys(conn: sqlite3.Connection, plan: list[OpRead]):
    """Per planned read, the ops' (process, correlation id) as int64 arrays, -1 where NULL: what
    run/launches.needed_calls_in_blocks needs to tell the calls that launched an op, without
    reading the ops (``--memory-budget``; the chunks read them later). Every row is read, the ones
    read_op_part leaves out too: a call kept for an op that is then left out launched nothing
    the analysis sees, as a call of a report prepared whole."""
    for part in plan:
        frame = _int64(_read(conn, part.key_stmt.rowids(part.rowid_lo, part.rowid_hi), _KEY_COLUMNS, copy=False),
                       _KEY_COLUMNS)
        yield frame["global_pid"].to_numpy(), frame["correlation_id"].to_numpy()
        del frame


class OpKeyBlocks:
    """:func:`read_op_keys` of a report as an iterable that reads when iterated (on its own read-only
    connection, a planned read at a time): what ``read_report(ops=False, op_keys=True)`` hands back,
    so that the keys are never all in memory at once (``--memory-budget``)."""

    def __init__(self, path: str, immutable: bool, plan: list[OpRead]):
        self.path, self.immutable, self.plan = path, immutable, plan

    def __iter__(self):
        conn = open_report(self.path, immutable=self.immutable, quick_check=False)
        try:
            yield from read_op_keys(conn, self.plan)
        finally:
            conn.close()


def _valid_ops(frame: pd.DataFrame, kind: str, session_end: int | None) -> tuple[pd.DataFrame, list]:
    """(the valid rows with int64 timestamps, what was left out)."""
    if not len(frame):
        return frame, []
    start, end, ok, negative = validate.timestamp_mask(frame["start_ns"], frame["end_ns"])
    inside = validate.session_mask(start, end, session_end)
    keep = ok & ~negative & inside
    counts = {validate.BAD_TIMESTAMPS: int((~ok).sum()), validate.NEGATIVE_DURATION: int(negative.sum()),
              validate.OUTSIDE_SESSION: int((ok & ~negative & ~inside).sum())}
    if not keep.all():
        frame = frame[keep].reset_index(drop=True)
        start, end = start[keep], end[keep]
    if frame["start_ns"].dtype != np.int64:
        frame["start_ns"], frame["end_ns"] = start, end
    dup = validate.duplicate_mask(frame, start)
    if dup.any():
        counts[validate.DUPLICATE_ROWS] = int(dup.sum())
        frame = frame[~dup].reset_index(drop=True)
    return frame, validate.exclusions(kind, counts)


def assemble_gpu_ops(plan: list[OpRead], parts) -> pd.DataFrame:
    """The op table from the parts of :func:`plan_gpu_op_reads`: ``parts`` in plan order, a list
    or an iterator (then each part is copied in and let go of as it comes: the peak is the table
    plus the parts still being read, not twice the table). The plan's row counts size the columns
    once."""
    hint = sum(p.rows_hint or 0 for p in plan)
    builder = OpTableBuilder(hint if all(p.rows_hint is not None for p in plan) else None)
    parts = iter(parts)
    for p in plan:                 # (not zip: its result tuple would hold the last part until the next)
        builder.add(p.kind, next(parts))
    return builder.table()


def assemble_kinds(parts: list[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """The op table from (op kind, frame of GPU_OP_COLUMNS but ``kind``) parts: the kinds in
    :data:`GPU_OP_KINDS` order, each kind's parts in the order given, every column joined once;
    what the parts left out (and duplicates across the parts of one table) in
    ``attrs["excluded_rows"]``."""
    ordered = [(k, f) for kind in GPU_OP_KINDS for k, f in parts if k == kind]
    builder = OpTableBuilder(sum(len(f) for _, f in ordered))
    for k, f in ordered:
        builder.add(k, f)
    return builder.table()


_OP_INT64 = ["global_pid", "device_id", "stream_id", "correlation_id", "name_id", "start_ns", "end_ns"]
# the op table's columns held as int32 while every value fits (read/ids.py): small ids in any real
# export (the correlation id stays int64, as the per-op table of the results has it)
NARROW_OP_COLUMNS = ("device_id", "stream_id", "name_id")


class OpTableBuilder:
    """The op table filled part by part (parts of one kind one after the other, kinds in
    :data:`GPU_OP_KINDS` order): every column allocated once (``capacity`` rows, an upper bound;
    grown when short) and each part copied into it, so a part can be freed as soon as it is in.
    The :data:`NARROW_OP_COLUMNS` are int32 while every value fits (read/ids.py), a column widened
    to int64 by the first part with one that does not. :meth:`table` then drops the rows that
    repeat a row of another part of the same table."""

    def __init__(self, capacity: int | None = None):
        self.capacity = max(int(capacity or 0), 0)
        self.cols = {c: np.empty(self.capacity, dtype=ids.ID_DTYPE if c in NARROW_OP_COLUMNS else "int64")
                     for c in _OP_INT64 + ["graph_node_id"]}
        self.node_missing = np.empty(self.capacity, dtype=bool)
        self.kind = np.empty(self.capacity, dtype="int8")
        self.n = 0
        self.bounds: list[tuple[str, int, int]] = []     # (kind, first row, end row) per part
        self.excluded: list = []

    def _grow(self, need: int) -> None:
        cap = max(need, 2 * self.capacity, 1024)
        for c, arr in self.cols.items():
            grown = np.empty(cap, dtype=arr.dtype)
            grown[:self.n] = arr[:self.n]
            self.cols[c] = grown
        for name in ("node_missing", "kind"):
            arr = getattr(self, name)
            grown = np.empty(cap, dtype=arr.dtype)
            grown[:self.n] = arr[:self.n]
            setattr(self, name, grown)
        self.capacity = cap

    def add(self, kind: str, frame: pd.DataFrame) -> None:
        self.excluded += list(frame.attrs.get(EXCLUDED, []))
        m = len(frame)
        if not m:
            return
        frame = _int64(frame, _OP_INT64)
        node = _nullable_int64(frame["graph_node_id"])
        if self.n + m > self.capacity:
            self._grow(self.n + m)
        at, to = self.n, self.n + m
        for c in _OP_INT64:
            values = frame[c].to_numpy()
            if c in NARROW_OP_COLUMNS and self.cols[c].dtype != values.dtype and not ids.fits(values):
                self.cols[c] = self.cols[c].astype("int64")      # a value int32 cannot hold: int64 from here on
            self.cols[c][at:to] = values
        self.cols["graph_node_id"][at:to] = node._data
        self.node_missing[at:to] = node._mask
        self.kind[at:to] = GPU_OP_KINDS.index(kind)
        self.bounds.append((kind, at, to))
        self.n = to

    def table(self) -> pd.DataFrame:
        n = self.n
        excluded = self.excluded
        ops = pd.DataFrame({"kind": pd.Categorical.from_codes(self.kind[:n], categories=list(GPU_OP_KINDS)),
                            **{c: self.cols[c][:n] for c in _OP_INT64[:4]},
                            "graph_node_id": pd.arrays.IntegerArray(self.cols["graph_node_id"][:n],
                                                                    self.node_missing[:n]),
                            **{c: self.cols[c][:n] for c in _OP_INT64[4:]}}, copy=False)
        self.cols = {}
        # a table read in several rowid ranges: duplicates across its parts (within a part,
        # read_op_part left them out already)
        drop = np.zeros(n, dtype=bool)
        for kind in GPU_OP_KINDS:
            at = [(a, b) for k, a, b in self.bounds if k == kind]
            if len(at) < 2:
                continue
            lo, hi = at[0][0], at[-1][1]
            dup = _duplicates_across(ops.iloc[lo:hi], np.array([a for a, _ in at] + [hi], dtype="int64") - lo)
            if dup.any():
                drop[lo:hi] = dup
                excluded += validate.exclusions(kind, {validate.DUPLICATE_ROWS: int(dup.sum())})
        if drop.any():
            ops = ops[~drop].reset_index(drop=True)
        ops.attrs[EXCLUDED] = validate.merge(excluded)
        return ops[GPU_OP_COLUMNS]


_EXACT_FLOAT = float(2 ** 53)       # integers a float64 holds exactly
NULLABLE_BLOCK_ROWS = 1 << 16       # rows converted at once by _nullable_int64


def _nullable_int64(column: pd.Series) -> pd.arrays.IntegerArray:
    """``pd.to_numeric(column, errors="coerce").astype("Int64")``, without the generic path for the
    usual columns (int64, or float64 with NaN for NULL)."""
    v = column.to_numpy()
    if v.dtype == np.int64:
        return pd.arrays.IntegerArray(v, np.zeros(len(v), dtype=bool))
    if v.dtype == np.float64:
        # a block at a time: the temporaries stay in cache instead of four fresh column-sized arrays
        missing = np.isnan(v)
        ints = np.empty(len(v), dtype="int64")
        for a in range(0, len(v), NULLABLE_BLOCK_ROWS):
            whole = np.where(missing[a:a + NULLABLE_BLOCK_ROWS], 0.0, v[a:a + NULLABLE_BLOCK_ROWS])
            with np.errstate(invalid="ignore"):          # inf: not whole, pandas' path decides
                block = whole.astype("int64")
            if not (block == whole).all() or (np.abs(whole) >= _EXACT_FLOAT).any():
                break
            ints[a:a + NULLABLE_BLOCK_ROWS] = block
        else:
            return pd.arrays.IntegerArray(ints, missing)
    # text, non-finite, fractional or out-of-range values (never written by nsys): NULL, like a missing one
    values, ok = validate.integer_values(np.asarray(column))
    return pd.arrays.IntegerArray(np.where(ok, values, 0).astype("int64"), ~ok)


def _duplicates_across(frame: pd.DataFrame, bounds: np.ndarray) -> np.ndarray:
    """Rows of one op table (its parts one after the other, part i = rows [bounds[i], bounds[i+1]))
    that repeat an earlier row of another part. Each part has no repeats of its own. When the
    table is in start order across the parts (nsys writes it so), a repeat across two parts has the
    start at which they meet: only the rows with that start on either side are compared; otherwise
    every row is (validate.duplicate_mask)."""
    start = frame["start_ns"].to_numpy(dtype="int64")
    n = len(start)
    dup = np.zeros(n, dtype=bool)
    if n < 2:
        return dup
    if not (np.diff(start) >= 0).all():
        return validate.duplicate_mask(frame, start)
    cand = np.zeros(n, dtype=bool)
    for b in bounds[1:-1]:
        b = int(b)
        if 0 < b < n and start[b - 1] == start[b]:
            v = start[b]
            lo, hi = np.searchsorted(start, v, side="left"), np.searchsorted(start, v, side="right")
            cand[lo:hi] = True
    rows = np.flatnonzero(cand)
    if len(rows):
        dup[rows[validate.duplicate_mask(frame.iloc[rows], start[rows])]] = True
    return dup


def read_gpu_ops(conn: sqlite3.Connection, chunk_rows: int | None = None) -> pd.DataFrame:
    """Kernels, memcpys, memsets and graph-level launches as one table (read in rowid chunks of
    ``chunk_rows`` rows when given: bounded memory, same table)."""
    plan = plan_gpu_op_reads(conn, chunk_rows)
    return assemble_gpu_ops(plan, [read_op_part(conn, p) for p in plan])


def calls_statement(columns: list[str]) -> S.Statement | None:
    """The read of the CUDA runtime/driver API calls for a RUNTIME table with ``columns``
    (None: the table lacks what the analysis needs)."""
    if not set(CALL_COLUMNS) <= set(columns):
        return None
    return S.select(RUNTIME_TABLE, [S.column("globalTid"), S.column("correlationId"), S.present(columns, "nameId"),
                                    S.column("start"), S.column("end")])


def read_calls(conn: sqlite3.Connection) -> pd.DataFrame:
    """CUDA runtime and driver API calls (the launch side of every GPU op)."""
    names = ["global_tid", "correlation_id", "name_id", "start_ns", "end_ns"]
    stmt = calls_statement(table_columns(conn, RUNTIME_TABLE))
    if stmt is None:
        frame = pd.DataFrame({c: pd.Series(dtype="int64") for c in names})
    else:
        frame = _read(conn, stmt, names, copy=False)
        frame, excluded = _valid_calls(frame, session_end_ns(conn))
        frame = _int64(frame, names)
        frame.attrs[EXCLUDED] = excluded
    frame["global_pid"] = frame["global_tid"].to_numpy(dtype="int64") & PID_OF_TID
    return frame


def _valid_calls(frame: pd.DataFrame, session_end: int | None = None) -> tuple[pd.DataFrame, list]:
    """API calls with integer timestamps, end >= start, inside the capture session (when its length
    is known: a call ending at 2**62 ns spans no real session); what was left out."""
    if not len(frame):
        return frame, []
    start, end, ok, negative = validate.timestamp_mask(frame["start_ns"], frame["end_ns"])
    keep = ok & ~negative
    inside = validate.session_mask(start, end, session_end) | ~keep
    keep &= inside
    if not keep.all():
        frame = frame[keep].reset_index(drop=True)
    if frame["start_ns"].dtype != np.int64 or not inside.all():
        frame["start_ns"], frame["end_ns"] = start[keep], end[keep]
    return frame, validate.exclusions("api_call", {validate.BAD_TIMESTAMPS: int((~ok).sum()),
                                                   validate.NEGATIVE_DURATION: int(negative.sum()),
                                                   validate.OUTSIDE_SESSION: int((~inside).sum())})


RANGE_COLUMNS = ["global_tid", "global_pid", "domain", "name", "style", "start_ns", "end_ns", "end_missing",
                 "int_value"]
MARK_COLUMNS = ["global_tid", "global_pid", "domain", "text", "time_ns", "int_value"]


def read_nvtx(conn: sqlite3.Connection, strings: pd.Series, chunk_rows: int | None = None,
              counts: dict | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """NVTX ranges (push/pop and start/end, nsys' projection rules) and marks (events read in rowid
    chunks of ``chunk_rows`` when given: the same frames in less memory). ``counts``, when given,
    gets ``cross_thread_ranges``: the start/end ranges left out because they end on another thread,
    counted from the rows read (what ``SELECT count(*) FROM NVTX_EVENTS WHERE endGlobalTid IS NOT
    NULL AND eventType IN`` the range types counts, without a second scan of the table)."""
    if counts is not None:
        counts[CROSS_THREAD] = 0
    cols = set(table_columns(conn, "NVTX_EVENTS"))
    range_cols, mark_cols = RANGE_COLUMNS, MARK_COLUMNS
    if not {"start", "eventType"} <= cols:
        return (pd.DataFrame({c: pd.Series(dtype="object") for c in range_cols}),
                pd.DataFrame({c: pd.Series(dtype="object") for c in mark_cols}))
    values = [c for c in ("int64Value", "uint64Value", "int32Value", "uint32Value") if c in cols]
    sel = {
        "start": S.column("start"),
        "end": S.present(cols, "end"),
        "eventType": S.column("eventType"),
        "text": S.present(cols, "text"),
        "textId": S.present(cols, "textId"),
        "globalTid": S.present(cols, "globalTid", default=S.const(0)),
        "endGlobalTid": S.present(cols, "endGlobalTid"),
        "domainId": S.present(cols, "domainId", default=S.const(0)),
        "intValue": S.coalesce(*values) if values else S.NULL,
    }
    stmt = S.select("NVTX_EVENTS", sel.values())
    empty = (pd.DataFrame({c: pd.Series(dtype="object") for c in range_cols}),
             pd.DataFrame({c: pd.Series(dtype="object") for c in mark_cols}))
    span = rowid_span(conn, "NVTX_EVENTS")
    if not chunk_rows or span is None or span.rows <= chunk_rows:
        events = _read(conn, stmt, list(sel), copy=False)
        if events.empty:
            return empty
        range_frame, mark_frame, info = _nvtx_frames(events, strings)
        range_frame.attrs[EXCLUDED] = info["excluded"]
        if counts is not None:
            counts[CROSS_THREAD] = info[CROSS_THREAD]
        return range_frame, mark_frame
    # in rowid chunks (bounded memory): domain names first, from every domain-create event
    created = _read(conn, stmt.where("eventType", DOMAIN_CREATE_EVENT), list(sel))
    domain_names = _nvtx_frames(created, strings)[2]["domains"] if len(created) else {}
    parts, max_ts, excluded = [], None, []
    cuts = rowid_cuts(conn, "NVTX_EVENTS", span, chunk_rows) + [span.hi]
    for a, b in zip(cuts, cuts[1:]):
        events = _read(conn, stmt.rowids(a, b), list(sel), copy=False)
        if len(events):
            r, m, info = _nvtx_frames(events, strings, domain_names)
            parts.append((r, m))
            excluded += info["excluded"]
            if counts is not None:
                counts[CROSS_THREAD] += info[CROSS_THREAD]
            if info["max_ts"] is not None:
                max_ts = info["max_ts"] if max_ts is None else max(max_ts, info["max_ts"])
        del events
    if not parts:
        empty[0].attrs[EXCLUDED] = validate.merge(excluded)
        return empty
    range_frame = _concat_columns([r for r, _ in parts])
    mark_frame = _concat_columns([m for _, m in parts])
    missing = range_frame["end_missing"].to_numpy(dtype=bool)
    if missing.any():        # a missing end is the largest NVTX timestamp of the whole report
        end = range_frame["end_ns"].to_numpy(dtype="int64").copy()
        end[missing] = max_ts
        range_frame["end_ns"] = end
    for frame in (range_frame, mark_frame):
        for c in ("domain", "name", "style", "text"):
            if c in frame.columns and frame[c].dtype != object:
                frame[c] = frame[c].astype(object)
    range_frame.attrs[EXCLUDED] = validate.merge(excluded)
    return range_frame, mark_frame


def _nvtx_frames(events: pd.DataFrame, strings: pd.Series, domain_names: dict | None = None):
    """(ranges, marks, {"max_ts", "domains", "excluded", "cross_thread_ranges"}) from a frame of NVTX
    events (all of them or a rowid chunk; ``domain_names`` from every domain-create event when a
    chunk). Events whose start is not an integer, and ranges that end before they start, are left out
    and counted; ranges that end on another thread are counted over every event given (as SQL
    would count them, whatever else is wrong with the row)."""
    cross_thread = int((np.isin(pd.to_numeric(events["eventType"], errors="coerce").to_numpy(), list(RANGE_EVENT_STYLES))
                        & pd.notna(events["endGlobalTid"].to_numpy())).sum())
    start_values, start_ok = validate.integer_values(events["start"])
    end_values, end_ok = validate.integer_values(events["end"])
    backwards = start_ok & end_ok & (end_values < start_values)
    end_bad = ~end_ok & pd.notna(events["end"]).to_numpy()       # a text or fractional end (NULL is unclosed)
    keep = start_ok & ~backwards & ~end_bad
    excluded = validate.exclusions("nvtx", {validate.BAD_TIMESTAMPS: int((~start_ok | end_bad).sum()),
                                            validate.NEGATIVE_DURATION: int((backwards & ~end_bad).sum())})
    if not keep.all():
        events = events[keep].reset_index(drop=True)
        start_values = start_values[keep]
    if events["start"].dtype != np.int64:
        events["start"] = start_values
    if not len(events):
        empty = (pd.DataFrame({c: pd.Series(dtype="object") for c in RANGE_COLUMNS}),
                 pd.DataFrame({c: pd.Series(dtype="object") for c in MARK_COLUMNS}))
        return (*empty, {"max_ts": None, "domains": domain_names or {}, "excluded": excluded,
                         CROSS_THREAD: cross_thread})
    events = _int64(events, ["start", "eventType", "globalTid", "domainId"])
    # plain NumPy from here: no boolean indexing of a frame with text columns, no str inference
    etype = events["eventType"].to_numpy(dtype="int64")
    tid = events["globalTid"].to_numpy(dtype="int64")
    pid = tid & PID_OF_TID
    dom = events["domainId"].to_numpy(dtype="int64")
    start = events["start"].to_numpy(dtype="int64")
    end_f = _float_or_nan(events["end"])
    label = np.array(events["text"].to_numpy(dtype=object), dtype=object)   # a writable copy
    text_ids = _float_or_nan(events["textId"])
    need = pd.isna(label) & ~np.isnan(text_ids)
    if need.any():      # registered strings: one hash lookup per event, texts shared
        at = pd.Index(strings.index).get_indexer(text_ids[need].astype("int64"))
        label[need] = np.append(strings.to_numpy(dtype=object), None)[at]
    int_value = pd.to_numeric(events["intValue"], errors="coerce").to_numpy()
    end_other_thread = pd.notna(events["endGlobalTid"].to_numpy())
    del events

    # domain names: a domain-create event per process ("domainId is unique only per process")
    if domain_names is None:
        created = np.flatnonzero(etype == DOMAIN_CREATE_EVENT)
        domain_names = {(int(pid[i]), int(dom[i])): (str(label[i]) if label[i] is not None and label[i] == label[i]
                                                       else "") for i in created}

    def domain_of(sel: np.ndarray) -> np.ndarray:
        # per distinct (process, domain) pair, not per event (millions of ranges)
        pcode, puniq = pd.factorize(pid[sel])
        dcode, duniq = pd.factorize(dom[sel])
        codes, uniq = pd.factorize(pcode.astype("int64") * (len(duniq) + 1) + dcode)
        uniq = [(int(np.asarray(puniq)[u // (len(duniq) + 1)]), int(np.asarray(duniq)[u % (len(duniq) + 1)]))
                for u in np.asarray(uniq)]
        names = np.array([("" if d == 0 else domain_names.get((int(p), int(d)), f"domain{d}"))
                          for p, d in uniq] + [""], dtype=object)
        return names[codes] if len(codes) else np.zeros(0, dtype=object)

    def text_of(sel: np.ndarray) -> np.ndarray:
        out = label[sel]
        out[pd.isna(out)] = ""
        return out

    def obj(values: np.ndarray) -> pd.Series:
        return pd.Series(values, dtype=object, copy=False)

    # nsys' projection keeps ranges that end on their own thread; a missing end becomes the
    # largest NVTX timestamp of the report
    is_range = np.isin(etype, list(RANGE_EVENT_STYLES)) & ~end_other_thread
    ranges = np.flatnonzero(is_range)
    max_ts = int(max(start.max(), np.nanmax(end_f) if (~np.isnan(end_f)).any() else start.max()))
    end = end_f[ranges]
    range_frame = pd.DataFrame({
        "global_tid": tid[ranges],
        "global_pid": pid[ranges],
        "domain": obj(domain_of(ranges)),
        "name": obj(text_of(ranges)),
        "style": obj(range_styles(etype[ranges])),
        "start_ns": start[ranges],
        "end_ns": np.where(np.isnan(end), max_ts, end).astype("int64"),
        "end_missing": np.isnan(end),
        "int_value": int_value[ranges],
    }, copy=False)
    marks = np.flatnonzero(np.isin(etype, MARK_EVENTS))
    mark_frame = pd.DataFrame({
        "global_tid": tid[marks],
        "global_pid": pid[marks],
        "domain": obj(domain_of(marks)),
        "text": obj(text_of(marks)),
        "time_ns": start[marks],
        "int_value": int_value[marks],
    }, copy=False)
    return (range_frame.reset_index(drop=True), mark_frame.reset_index(drop=True),
            {"max_ts": max_ts, "domains": domain_names, "excluded": excluded, CROSS_THREAD: cross_thread})


def range_styles(event_type: np.ndarray) -> np.ndarray:
    """Per NVTX range event, its style (:data:`RANGE_EVENT_STYLES` of its event type), as objects:
    through a table indexed by the type where types are small non-negative integers (nsys' are),
    else through the distinct types (``np.unique`` hashes every row: 80 ms per 2.5M ranges)."""
    if not len(event_type):
        return np.zeros(0, dtype=object)
    lo, hi = int(event_type.min()), int(event_type.max())
    if lo >= 0 and hi < 1 << 16:
        table = np.array([RANGE_EVENT_STYLES.get(t) for t in range(hi + 1)], dtype=object)
        return table[event_type]
    kinds = np.unique(event_type)
    style_of = np.array([RANGE_EVENT_STYLES.get(int(t)) for t in kinds], dtype=object)
    return style_of[np.searchsorted(kinds, event_type)]


def _float_or_nan(column: pd.Series) -> np.ndarray:
    """A numeric column with NULLs as float64 NaN (ints stay exact below 2**53, like nsys' own)."""
    if column.dtype == object:
        return pd.to_numeric(column, errors="coerce").to_numpy(dtype="float64")
    return column.to_numpy(dtype="float64")


def read_processes(conn: sqlite3.Connection) -> pd.DataFrame:
    cols = table_columns(conn, "PROCESSES")
    names = ["global_pid", "pid", "name"]
    if not {"globalPid", "pid"} <= set(cols):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in names})
    frame = _read(conn, S.select("PROCESSES", [S.column("globalPid"), S.column("pid"), S.present(cols, "name")]),
                  names)
    return _int64(frame, ["global_pid", "pid"])


def read_devices(conn: sqlite3.Connection) -> pd.DataFrame:
    """CUDA ordinals as each process saw them, mapped to physical GPUs where nsys recorded it."""
    names = ["pid", "cuda_id", "gpu_id", "gpu_name", "bus"]
    gpu_cols = table_columns(conn, "TARGET_INFO_GPU")
    gpus = pd.DataFrame(columns=["gpu_id", "gpu_name", "bus"])
    if "id" in gpu_cols:
        gpus = _read(conn, S.select("TARGET_INFO_GPU", [S.column("id"), S.present(gpu_cols, "name"),
                                                        S.present(gpu_cols, "busLocation")]),
                     ["gpu_id", "gpu_name", "bus"])
    dev_cols = table_columns(conn, "TARGET_INFO_CUDA_DEVICE")
    if {"gpuId", "cudaId", "pid"} <= set(dev_cols):
        mapping = _read(conn, S.select("TARGET_INFO_CUDA_DEVICE", [S.column("pid"), S.column("cudaId"),
                                                                 S.column("gpuId")]),
                        ["pid", "cuda_id", "gpu_id"])
        return mapping.merge(gpus, on="gpu_id", how="left")[names]
    return pd.DataFrame({c: pd.Series(dtype="object") for c in names})


def read_meta(conn: sqlite3.Connection) -> dict:
    meta: dict = {"schema_version": None, "nsys_version": None, "utc_start_ns": None,
                  "cuda_graph_trace": None}
    version = export_schema_version(conn)
    meta["schema_version"] = ".".join(map(str, version)) if version else None
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if {"name", "value"} <= set(table_columns(conn, table)):
            row = conn.execute(f"SELECT value FROM {table} WHERE name='EXPORT_PRODUCT_VERSION'").fetchone()
            if row:
                meta["nsys_version"] = row[0]
    meta["session_end_ns"] = session_end_ns(conn)
    meta["hostname"] = read_hostname(conn)
    meta["diagnostics"] = capture.diagnostics(conn)
    meta["uvm_migrations"] = capture.uvm_migrations(conn)
    meta["unified_memory_events"] = capture.unified_memory_events(conn)
    if "utcEpochNs" in table_columns(conn, "TARGET_INFO_SESSION_START_TIME"):
        row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        if row and row[0] is not None:
            meta["utc_start_ns"] = int(row[0])
    if {"name", "value"} <= set(table_columns(conn, "META_DATA_CAPTURE")):
        row = conn.execute("SELECT value FROM META_DATA_CAPTURE "
                           "WHERE name LIKE '%CUDA_GRAPH_TRACE_OPTIONS:MODE' LIMIT 1").fetchone()
        if row:
            meta["cuda_graph_trace"] = str(row[0]).lower()
    return meta


def read_hostname(conn: sqlite3.Connection) -> str | None:
    """The profiled machine's name (``TARGET_INFO_SYSTEM_ENV`` ``Hostname``; ``<host>`` once scrubbed)."""
    if not {"name", "value"} <= set(table_columns(conn, "TARGET_INFO_SYSTEM_ENV")):
        return None
    row = conn.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1").fetchone()
    return str(row[0]) if row and row[0] is not None else None


def read_threads(conn=None) -> int:
    """Readers working at once: one per core, at most two (SQLite pages are decoded in parallel, the
    rest is copying: measured 1.3x faster with two, no better with more); ``SPECPROF_READ_THREADS``
    overrides. The stdlib cursor reads in one thread (it holds the GIL); pages.py in two.
    ``conn``: the report to read (one with a WAL beside it is read by the stdlib cursor)."""
    env = os.environ.get("SPECPROF_READ_THREADS")
    if env:
        return max(1, int(env))
    if (fastread.backend() if conn is None else fastread.backend_for(conn)) == "stdlib":
        return 1
    return max(1, min(2, os.cpu_count() or 1))


def take_excluded(frame: pd.DataFrame | None) -> list:
    """What the read of ``frame`` left out (validate.Exclusion list), removed from the frame (pandas
    would copy ``attrs`` into every frame derived from it)."""
    if frame is None:
        return []
    return list(frame.attrs.pop(EXCLUDED, None) or [])


def read_report(path: str, chunk_rows: int | None = None, threads: int | None = None,
                ops: bool = True, op_keys: bool = False, nvtx_chunk_rows: int | None = None,
                conn=None) -> ReportTables:
    """Open ``path`` read-only and read every table the analysis uses (GPU ops in chunks of
    ``chunk_rows`` rows when given, see :func:`read_gpu_ops`). With ``threads`` > 1 the big reads
    (GPU ops, in rowid ranges; API calls; NVTX events) run in a thread pool, each on its own
    read-only connection: the same tables as one reader. ``ops=False`` leaves the GPU ops out (an
    empty table; chunked analysis reads them itself); ``op_keys`` then hands back their (process,
    correlation id) keys instead (:class:`OpKeyBlocks`, read block by block when iterated: which
    calls launched something), as ``op_keys``. Nothing here calls back into the analysis: run/ prepares the launches from the
    tables (issue 42: the preparation once overlapped the op reads through a callback; it has run
    after them since a switch for that overlap gained under 5% on every benchmark file). ``conn``: the
    report already open (read/source.py), left open; else it is opened and closed here."""
    own = conn is None
    conn = open_report(path) if own else conn
    try:
        threads = read_threads(conn) if threads is None else threads
        strings = read_strings(conn)
        # at least twice as many op parts as readers (the reader done with NVTX and the preparation
        # takes the last parts, so both finish together), more where a part would exceed PART_MAX_ROWS
        plan = plan_gpu_op_reads(conn, chunk_rows, split=2 * threads if threads > 1 else 1) if ops else []
        nvtx_counts: dict = {}
        if threads <= 1:
            calls = read_calls(conn)
            ranges, marks = read_nvtx(conn, strings, nvtx_chunk_rows, nvtx_counts)
            op_table = assemble_gpu_ops(plan, (read_op_part(conn, p) for p in plan))
        else:
            op_table, calls, (ranges, marks) = _read_parallel(path, conn.immutable, plan, strings, threads,
                                                              nvtx_chunk_rows, nvtx_counts)
        # without the ops (chunked analysis): their keys alone tell the launching calls
        keys = (OpKeyBlocks(path, conn.immutable, plan_gpu_op_reads(conn, OP_KEY_CHUNK_ROWS))
                if op_keys and not ops else None)
        meta = read_meta(conn)
        nccl_messages, meta[nccl_payloads.INFO] = nccl_payloads.read_message_sizes(conn)
        meta[EXCLUDED] = [list(x) for x in validate.merge(take_excluded(op_table) + take_excluded(calls)
                                                          + take_excluded(ranges) + take_excluded(strings))]
        return ReportTables(path=display_path(path), strings=strings, gpu_ops=op_table, calls=calls, ranges=ranges,
                            marks=marks, processes=read_processes(conn), devices=read_devices(conn),
                            meta=meta, cross_thread_ranges=nvtx_counts[CROSS_THREAD],
                            nccl_messages=nccl_messages, op_keys=keys)
    except sqlite3.DatabaseError as exc:
        raise CorruptReport(f"{path}: cannot read the report ({exc})") from exc
    finally:
        if own:
            conn.close()


def _results_in_order(futures: list):
    """The futures' results in order, each let go of (by the list too) once handed over."""
    while futures:
        yield futures.pop(0).result()


def _read_parallel(path: str, immutable: bool, plan: list[OpRead], strings: pd.Series, threads: int,
                   nvtx_chunk_rows: int | None = None, nvtx_counts: dict | None = None):
    """(ops, calls, (ranges, marks)) read by ``threads`` readers, each with its own connection."""
    from concurrent.futures import ThreadPoolExecutor

    def on_own_connection(fn, *args):
        own = open_report(path, immutable=immutable, quick_check=False)
        try:
            return fn(own, *args)
        finally:
            own.close()

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="specprof-read") as pool:
        # NVTX first: its conversion to pandas holds the GIL longest, so it overlaps the op reads
        nvtx = pool.submit(on_own_connection, read_nvtx, strings, nvtx_chunk_rows, nvtx_counts)
        calls = pool.submit(on_own_connection, read_calls)
        # every part submitted at once (a window of two parts per reader went in issue 42: on the
        # synthetic 10M file 1.02x wall, 0.99x peak without it; the 1M files 1.00-1.01x)
        parts = [pool.submit(on_own_connection, read_op_part, p) for p in plan]
        ops = assemble_gpu_ops(plan, _results_in_order(parts))
        return ops, calls.result(), nvtx.result()

# ------------------------------------------------------------------------------------------
# time-ordered chunks of the GPU ops (run/chunks.py's SqliteChunks): rowid ranges cut at times

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


def plan_chunks(conn, chunk_rows: int) -> tuple[list[list[OpRead]], list[int]]:
    """(reads per chunk, chunk start times): the biggest op table cut every ``chunk_rows`` rows,
    the others cut at the same times."""
    whole = plan_gpu_op_reads(conn)
    tables = []
    for part in whole:
        span = rowid_span(conn, part.table)
        if span is not None:
            tables.append((part, span))
    if not tables:
        return [], []
    driver, d_span = max(tables, key=lambda t: t[1].rows)
    times = [int(np.iinfo(np.int64).min)]
    for a in rowid_cuts(conn, driver.table, d_span, chunk_rows)[1:]:
        found = _start_at(conn, driver.table, a)
        if found is not None and found[1] > times[-1]:
            times.append(found[1])
    chunks: list[list[OpRead]] = [[] for _ in times]
    for part, span in tables:
        lo, hi = span.lo, span.hi
        cuts = [lo] + [_first_rowid_at(conn, part.table, t, lo, hi) for t in times[1:]] + [hi]
        for k in range(len(times)):
            a, b = cuts[k], max(cuts[k], cuts[k + 1])
            if b > a:
                chunks[k].append(OpRead(part.kind, part.table, part.stmt, a, b, min(b - a, span.rows)))
    return chunks, times


class TimeChunkPlan(NamedTuple):
    """The chunks of an export: per chunk the op reads (rowid ranges), the chunk start times, and
    how the export was opened (the same way for every read)."""

    path: str
    immutable: bool
    reads: list
    times: list


def plan_time_chunks(path: str, chunk_rows: int, conn=None) -> TimeChunkPlan:
    """The chunks of ``path``: its biggest op table cut every ``chunk_rows`` rows, the others at
    the same times (nsys writes activity tables in start order; run/chunks.py checks each chunk).
    ``conn``: the report already open (left open)."""
    own = conn is None
    conn = open_report(path, quick_check=False) if own else conn
    try:
        reads, times = plan_chunks(conn, chunk_rows)
        return TimeChunkPlan(str(path), bool(conn.immutable), reads, times)
    finally:
        if own:
            conn.close()


def read_time_chunk(plan: TimeChunkPlan, k: int) -> list[tuple[str, pd.DataFrame]]:
    """(op kind, frame) of every op read of chunk ``k`` (:func:`read_op_part`), on its own connection
    (chunks are read in a thread)."""
    own = open_report(plan.path, immutable=plan.immutable, quick_check=False)
    try:
        return [(r.kind, read_op_part(own, r)) for r in plan.reads[k]]
    finally:
        own.close()


def row_counts(path: str) -> dict | None:
    """Rows of the tables an analysis' memory grows with: ``ops`` (every GPU op table), ``calls``
    (CUDA API calls), ``ranges`` (NVTX events); None when the report cannot be opened or read (the
    analysis then says why). A few seeks, no scan."""
    try:
        conn = open_report(path, quick_check=False)
    except (TraceError, OSError, sqlite3.Error):
        return None
    try:
        return row_counts_of(conn)
    finally:
        conn.close()


def row_counts_of(conn) -> dict | None:
    """:func:`row_counts` of a report already open (None where a table does not read)."""
    try:
        return {"ops": sum(p.rows_hint or 0 for p in plan_gpu_op_reads(conn)),
                "calls": table_rows(conn, "CUPTI_ACTIVITY_KIND_RUNTIME") or 0,
                "ranges": table_rows(conn, "NVTX_EVENTS") or 0}
    except (TraceError, sqlite3.Error):
        return None

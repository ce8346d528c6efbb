"""Column reads from an nsys SQLite export into NumPy-backed frames, read-only.

:func:`analyze.read.report._read` is where rows are fetched; it calls :func:`read_frame` here.
Two readers, tried in this order:

======  ==================================================================================
reader  notes
======  ==================================================================================
pages   the file's B-tree pages decoded with NumPy, a batch of pages at a time (pages.py):
        no SQLite, no row-at-a-time step; ``pread`` on an ``O_RDONLY`` descriptor. Simple
        SELECTs of integer and text columns of rowid tables whose rows fit their page;
        anything else (and any page that does not parse) goes to the stdlib cursor
stdlib  the report's own ``sqlite3`` connection (read-only URI, analyze.read.connection),
        ``fetchmany``; reads anything. Its rows are typed the way pages.py's are (through
        Arrow, batch by batch: :func:`_read_stdlib`)
======  ==================================================================================

A report with a ``-wal``/``-shm``/``-journal`` beside it is read by the stdlib cursor only: the
file alone may not hold every committed row (pages.py reads the file, not the WAL).

connectorx and ADBC were readers here too, between the two, until issue 42: on the three benchmark
files (synthetic, real H200 and real SGLang, 1M kernels each) pages.py serves every statement of an
analysis; on the real fixtures one statement of the ``sglang_v2`` exports falls back, and there the
stdlib cursor instead of connectorx took 0.80 s against 0.82 s for the analysis: no win of 5% or
more, so they went (and with them a second SQLite library in the process).

Whichever reader reads a statement, the frames have the same values and dtypes (integers
``int64``; with NULLs ``float64``, or objects where a value is beyond 2**53; text as ``object``;
tests/test_readers.py, tests/test_pages.py). ``SPECPROF_READER=stdlib`` makes every statement go
to the stdlib cursor (``pages`` or unset: the default order); any other value is a UsageError.
:data:`SERVED` counts the statements each reader served.
"""
from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pandas as pd

from analyze.errors import UsageError

EXACT_FLOAT = 2 ** 53
READERS = ("pages", "stdlib")

# statements served per reader in this process (tests and the benchmark look at it)
SERVED: Counter = Counter()

# rows per fetchmany of the stdlib cursor (each batch typed into Arrow and its rows let go)
STDLIB_BATCH_ROWS = 262_144


def forced_reader() -> str:
    """``SPECPROF_READER`` (lower case; "" when unset): ``pages`` (the default order) or ``stdlib``
    (the stdlib cursor reads everything); any other value is a UsageError (connectorx and ADBC, which
    it once also named, are gone: module doc)."""
    word = os.environ.get("SPECPROF_READER", "").strip().lower()
    if word not in ("",) + READERS:
        raise UsageError(f"SPECPROF_READER={os.environ['SPECPROF_READER']!r} is not a reader: "
                         "leave it unset, or set it to 'stdlib' (the stdlib sqlite3 cursor reads everything)")
    return word


def backend() -> str:
    """The reader :func:`read_frame` tries first: ``pages``, or ``stdlib`` where
    ``SPECPROF_READER=stdlib``."""
    return "stdlib" if forced_reader() == "stdlib" else "pages"


def backend_for(conn) -> str:
    """The reader :func:`read_frame` tries first for this report: :func:`backend`, or ``stdlib``
    where the report was not opened ``immutable`` (a journal or WAL beside it: the file alone may
    not hold every committed row)."""
    return backend() if getattr(conn, "immutable", False) else "stdlib"


def _frame(out: dict, columns: list[str]) -> pd.DataFrame:
    """DataFrame of fresh NumPy columns, no copy; object columns stay ``object`` (pandas 3 would
    otherwise infer its ``str`` dtype: a copy of every text into Arrow, seconds per million rows)."""
    cols = {name: (pd.Series(v, dtype=object, copy=False) if v.dtype == object else v)
            for name, v in out.items()}
    return pd.DataFrame(cols, columns=columns, copy=False)


def _column_to_numpy(col, copy: bool = True) -> np.ndarray:
    """One Arrow column (chunked or not) -> NumPy, typed like pages.py's columns."""
    import pyarrow as pa

    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    t = col.type
    if pa.types.is_integer(t):
        if col.null_count == 0:
            # a copy unless asked: zero-copy views of Arrow buffers are read-only
            vals = col.to_numpy(zero_copy_only=False)
            return np.array(vals, dtype="int64") if copy or vals.dtype != np.int64 else vals
        vals = col.to_numpy(zero_copy_only=False)          # float64 with NaN
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        if valid.any() and np.nanmax(np.abs(vals)) >= EXACT_FLOAT:
            obj = np.full(len(col), None, dtype=object)
            obj[valid] = np.asarray(col.drop_null().to_numpy(), dtype=object)
            return obj
        return np.array(vals, dtype="float64")
    if pa.types.is_floating(t):
        return np.array(col.to_numpy(zero_copy_only=False), dtype="float64")
    if pa.types.is_null(t):
        return np.full(len(col), None, dtype=object)
    if len(col) < 4096:
        return np.asarray(col.to_pylist(), dtype=object)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _strings_to_numpy(col)
    return col.to_pandas(types_mapper=None).to_numpy(dtype=object)


def _strings_to_numpy(col) -> np.ndarray:
    """Text column -> object array in which equal texts share one Python string: dictionary-encoded
    in Arrow (C++), the few distinct texts converted once, then one gather. NVTX names and marks
    repeat a handful of texts millions of times; converting every row makes millions of strings."""
    import pyarrow.compute as pc

    enc = pc.dictionary_encode(col)
    uniq = np.asarray(enc.dictionary.to_pylist() + [None], dtype=object)
    idx = enc.indices.fill_null(len(uniq) - 1).to_numpy(zero_copy_only=False)
    return uniq[idx]


def _read_stdlib(conn, sql: str, columns: list[str], params=(), copy: bool = True) -> pd.DataFrame:
    """The rows through the report's own ``sqlite3`` cursor, typed like pages.py's: each batch of
    ``fetchmany`` rows is made one Arrow array per column (:func:`_arrow_or_objects`) and let go; at
    the end each column's arrays become one NumPy column the way pages.py's Arrow columns do
    (:func:`_column_to_numpy`). A column whose values SQLite gives in more than one type (text and
    integers, say) stays the Python values SQLite gave (``object``)."""
    cur = conn.execute(sql, params)
    parts: list[list] = [[] for _ in columns]
    rows_read = 0
    while True:
        rows = cur.fetchmany(STDLIB_BATCH_ROWS)
        if not rows:
            break
        rows_read += len(rows)
        grid = np.array(rows, dtype=object)          # rows x columns, built in C (zip(*rows) took 2x)
        del rows
        for i in range(len(columns)):
            parts[i].append(_arrow_or_objects(grid[:, i]))
        del grid
    if rows_read == 0:
        return _empty(columns)
    out = {}
    for i, name in enumerate(columns):
        out[name] = _stdlib_column(parts[i], copy)
        parts[i] = None
    return _frame(out, columns)


def _arrow_or_objects(values: np.ndarray):
    """One batch of one column (an object array): an Arrow array where Arrow types every value
    alike (integers, floats, integers and floats as floats, text, blobs, NULLs), else the values as
    they are."""
    import pyarrow as pa

    try:
        return pa.array(values, from_pandas=False)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return values.tolist()


def _stdlib_column(parts: list, copy: bool) -> np.ndarray:
    """A column's batches (:func:`_arrow_or_objects`) -> NumPy, typed like pages.py's column."""
    import pyarrow as pa

    types = {p.type for p in parts if isinstance(p, pa.Array) and not pa.types.is_null(p.type)}
    if len(types) == 2 and all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in types):
        types = {pa.float64()}                 # what Arrow types one array of both as
    if all(isinstance(p, pa.Array) for p in parts) and len(types) <= 1:
        t = types.pop() if types else pa.int64()       # all NULL: an integer column (as pages.py's NULL item)
        try:
            col = pa.chunked_array([p.cast(t) if p.type != t else p for p in parts], type=t)
        except pa.ArrowInvalid:        # an integer batch beyond 2**53 beside a float one: no exact float
            col = None
        if col is not None:
            return _column_to_numpy(col, copy)
    out = np.empty(sum(len(p) for p in parts), dtype=object)
    pos = 0
    for p in parts:
        vals = p.to_pylist() if isinstance(p, pa.Array) else p
        out[pos:pos + len(vals)] = vals
        pos += len(vals)
    return out


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


def _read_pages(conn, stmt, columns: list[str], copy: bool) -> pd.DataFrame | None:
    """The rows through pages.py, or None where it does not read them (then the stdlib cursor)."""
    table = _pages_table(conn, stmt)
    if table is None:
        return None
    if table.num_rows == 0:
        return _empty(columns)
    return _table_frame(table, columns, copy)


def _pages_table(conn, stmt):
    """pages.py's Arrow table of ``stmt``, or None where it does not read the statement."""
    from analyze.read import pages

    try:
        table = pages.read_table(conn, stmt)
    except Exception as exc:  # noqa: BLE001 - what it does not read (or a page that does not parse): the stdlib cursor
        with pages.FELL_BACK_LOCK:
            pages.FELL_BACK[type(exc).__name__] += 1
        return None
    SERVED["pages"] += 1
    return table


def _table_frame(table, columns: list[str], copy: bool) -> pd.DataFrame:
    arrays = list(table.columns)
    del table
    out = {}
    for i, name in enumerate(columns):     # one column at a time, each Arrow column freed once converted
        col, arrays[i] = arrays[i], None
        out[name] = _column_to_numpy(col, copy)
        del col
    return _frame(out, columns)


def read_frame(conn, stmt, columns: list[str], params=(), copy: bool = True) -> pd.DataFrame:
    """Rows of ``stmt`` (a read/statement.Statement, or SQL text) as a DataFrame with ``columns``:
    pages.py where it reads the statement, else the stdlib cursor (its SQL text; same values and dtypes
    whichever reads them). A report with a journal/WAL beside it, or ``SPECPROF_READER=stdlib``: the
    stdlib cursor only (:func:`backend_for`). ``copy=False``: integer columns may be read-only views
    of Arrow buffers."""
    if backend_for(conn) == "pages" and not params:
        frame = _read_pages(conn, stmt, columns, copy)
        if frame is not None:
            return frame
    SERVED["stdlib"] += 1
    return _read_stdlib(conn, stmt if isinstance(stmt, str) else stmt.sql(), columns, params, copy)

"""Fast column reads from an nsys SQLite export: SQLite -> Arrow -> NumPy, read-only.

:func:`analyze.read.report._read` is where rows are fetched; it calls :func:`read_frame` here (the
benchmark's bare reads call :func:`read_batches` too). Backends, tried in this order:

==========  ================================================================================
backend     notes
==========  ================================================================================
pages       the file's B-tree pages decoded with NumPy, a batch of pages at a time (pages.py):
            no SQLite, no row-at-a-time step; ``pread`` on an ``O_RDONLY`` descriptor. Simple
            SELECTs of integer and text columns of rowid tables whose rows fit their page;
            anything else (and any page that does not parse) goes to the next backend
connectorx  Rust, no GIL, into Arrow (cxread.py). Opened read-only through a ``file:...?mode=ro``
            URI that cxread checks before its first use in a process (a write through it must
            fail, the scratch file must stay as it was); paths it could misread, and anything it
            cannot type (non-UTF-8 text, mixed column types) go to the next backend
ADBC        ``adbc_driver_sqlite.dbapi`` on the same read-only URI as :func:`analyze.open_report`
            (``mode=ro``, plus ``immutable=1`` when no journal/WAL sits next to the file),
            ``trusted_schema=OFF``, ``query_only=ON``; closed with the report
stdlib      ``sqlite3`` cursor, ``fetchmany``; reads anything (the report's own connection)
==========  ================================================================================

A second SQLite in the process (connectorx and the ADBC driver each link their own) reads only a
report opened ``immutable=1``: without it SQLite locks the file and maps its ``-shm`` with POSIX
locks, which belong to the process, so two SQLite libraries in one process cannot see each other's
locks and one may truncate the ``-shm`` the other has mapped (SIGBUS; sqlite.org/howtocorrupt.html,
2.2.1). A report with a ``-wal``/``-shm``/``-journal`` beside it is read by the stdlib cursor only.

Measured (bench/results.md, bare reads of analyze-trace's statements into Arrow, 10M kernels, one
thread): connectorx 4.1 s, ADBC 5.5 s; the stdlib cursor was 2.8x slower than ADBC at 1M kernels.
Whichever backend reads a statement, the frames have the same values and dtypes
(tests/test_readers.py, tests/test_pages.py); ``SPECPROF_READER=connectorx``, ``adbc`` or
``stdlib`` starts further down the list.
:data:`SERVED` counts the statements each backend served.
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

EXACT_FLOAT = 2 ** 53

# statements served per backend in this process (tests and the benchmark look at it)
SERVED: Counter = Counter()
_ADBC: dict[tuple, object] = {}    # (id(sqlite connection), its URI) -> ADBC connection
_FAILED: set[tuple] = set()


def _forget_connections_in_child() -> None:
    """A forked child must not use its parent's ADBC connections (their keys hold ``id()``s a new
    connection of the child can take again): it opens its own."""
    _ADBC.clear()
    _FAILED.clear()


os.register_at_fork(after_in_child=_forget_connections_in_child)


def backend() -> str:
    """The backend :func:`read_frame` tries first: ``pages`` (pyarrow is all it needs), else
    ``connectorx`` when installed and checked read-only (cxread.available), else ``adbc`` when
    installed, else ``stdlib``. ``SPECPROF_READER=connectorx|adbc|stdlib`` starts further down."""
    from analyze.read import cxread

    forced = cxread.forced_reader()
    if forced == "stdlib":
        return "stdlib"
    if forced not in ("adbc", "connectorx") and _have_pyarrow():
        return "pages"
    if forced != "adbc":
        if cxread.available():
            return "connectorx"
    try:
        import adbc_driver_sqlite.dbapi  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        return "stdlib"
    return "adbc"


def _have_pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def _after(be: str) -> str:
    """The backend after ``be`` in the list (connectorx only where available)."""
    from analyze.read import cxread

    if be == "pages" and cxread.forced_reader() != "adbc" and cxread.available():
        return "connectorx"
    return "adbc" if be in ("pages", "connectorx") else "stdlib"


def second_sqlite_allowed(conn) -> bool:
    """May connectorx/ADBC (their own SQLite libraries) open this report? Only when it was opened
    ``immutable=1`` (no journal/WAL beside it): no locks and no ``-shm`` to share (module doc)."""
    return bool(getattr(conn, "immutable", False))


def backend_for(conn) -> str:
    """The backend :func:`read_frame` tries first for this report: :func:`backend`, or ``stdlib``
    where a second SQLite may not open it (:func:`second_sqlite_allowed`)."""
    return backend() if second_sqlite_allowed(conn) else "stdlib"


def readonly_uri(conn) -> str | None:
    """The read-only URI the report was opened with (None for a connection not from analyze.read.connection)."""
    path = getattr(conn, "path", "")
    if not path:
        return None
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    return uri + ("&immutable=1" if getattr(conn, "immutable", False) else "")


def _adbc_conn(conn):
    # keyed by the connection and its file: a closed connection's id can be reused by a new one
    uri = readonly_uri(conn)
    key = (id(conn), uri)
    if key in _ADBC:
        return _ADBC[key]
    if uri is None or key in _FAILED:
        return None
    try:
        import adbc_driver_sqlite.dbapi as dbapi
        aconn = dbapi.connect(uri)
        cur = aconn.cursor()
        cur.execute("PRAGMA trusted_schema=OFF")
        cur.execute("PRAGMA query_only=ON")
        cur.close()
    except Exception:  # noqa: BLE001 - any failure: use the stdlib path
        _FAILED.add(key)
        return None
    _ADBC[key] = aconn
    return aconn


def close(conn) -> None:
    """Close the ADBC connection opened for ``conn`` (if any)."""
    key = (id(conn), readonly_uri(conn))
    _FAILED.discard(key)
    aconn = _ADBC.pop(key, None)
    if aconn is not None:
        try:
            aconn.close()
        except Exception:  # noqa: BLE001
            pass


def arrow_to_frame(table, columns: list[str], copy: bool = True) -> pd.DataFrame:
    """Arrow table -> DataFrame typed like the stdlib path (ints; floats where NULLs; objects).
    ``copy=False``: integer columns without NULLs are read-only views of the Arrow buffers."""
    out = {name: _column_to_numpy(col, copy) for name, col in zip(columns, table.columns)}
    return _frame(out, columns)


def _frame(out: dict, columns: list[str]) -> pd.DataFrame:
    """DataFrame of fresh NumPy columns, no copy; object columns stay ``object`` (pandas 3 would
    otherwise infer its ``str`` dtype: a copy of every text into Arrow, seconds per million rows)."""
    cols = {name: (pd.Series(v, dtype=object, copy=False) if v.dtype == object else v)
            for name, v in out.items()}
    return pd.DataFrame(cols, columns=columns, copy=False)


def _column_to_numpy(col, copy: bool = True) -> np.ndarray:
    """One Arrow column (chunked or not) -> NumPy, typed like the stdlib path."""
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


def _stream_to_frame(cur, columns: list[str], rows_hint: int | None = None) -> pd.DataFrame | None:
    """Record batches of an executed ADBC cursor -> DataFrame. Integer columns are copied batch by
    batch into NumPy arrays sized ``rows_hint`` (grown when short), so the peak is the result
    itself (``fetch_arrow_table`` + conversion holds the table twice, and the driver's thousands
    of small batch buffers more). Typed exactly like :func:`arrow_to_frame`. None when no rows."""
    import pyarrow as pa

    reader = cur.fetch_record_batch()
    schema = reader.schema
    k = len(columns)
    is_int = [pa.types.is_integer(schema.field(i).type) for i in range(k)]
    cap = max(int(rows_hint or 0), 1024)
    bufs = [np.empty(cap, dtype="int64") if is_int[i] else None for i in range(k)]
    valid: list = [None] * k
    others: list = [[] if not is_int[i] else None for i in range(k)]
    pos = 0
    for batch in reader:
        m = batch.num_rows
        if pos + m > cap:
            cap = max(2 * cap, pos + m)
            for i in range(k):
                if bufs[i] is not None:
                    grown = np.empty(cap, dtype="int64")
                    grown[:pos] = bufs[i][:pos]
                    bufs[i] = grown
                if valid[i] is not None:
                    grown = np.ones(cap, dtype=bool)
                    grown[:pos] = valid[i][:pos]
                    valid[i] = grown
        for i in range(k):
            arr = batch.column(i)
            if not is_int[i]:
                others[i].append(arr)
            elif arr.null_count:
                if valid[i] is None:
                    valid[i] = np.ones(cap, dtype=bool)
                valid[i][pos:pos + m] = arr.is_valid().to_numpy(zero_copy_only=False)
                bufs[i][pos:pos + m] = arr.fill_null(0).to_numpy(zero_copy_only=False)
            else:
                bufs[i][pos:pos + m] = arr.to_numpy(zero_copy_only=False)
        pos += m
        del batch
    if pos == 0:
        return None
    out = {}
    for i, name in enumerate(columns):
        if not is_int[i]:
            out[name] = _column_to_numpy(pa.chunked_array(others[i], type=schema.field(i).type), copy=False)
            others[i] = None
            continue
        vals = bufs[i][:pos] if cap == pos else bufs[i][:pos].copy()
        bufs[i] = None
        ok = valid[i][:pos] if valid[i] is not None else None
        if ok is None or ok.all():
            out[name] = vals
        elif ok.any() and int(np.abs(vals[ok]).max()) >= EXACT_FLOAT:
            obj = np.full(pos, None, dtype=object)
            obj[ok] = vals[ok].astype(object)
            out[name] = obj
        else:
            f = vals.astype("float64")
            f[~ok] = np.nan
            out[name] = f
    return _frame(out, columns)


# rows per Arrow batch when streaming a big table (the driver's default is 1024: ten thousand
# Python-level batch steps per 10M rows; 64k measured 13% faster on a 10M-kernel read)
STREAM_BATCH_ROWS = 65_536


def _set_batch_rows(cur, rows: int) -> None:
    try:
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(rows)})
    except Exception:  # noqa: BLE001 - an older driver without the option: its default
        pass


def _read_stdlib(conn, sql: str, columns: list[str], params=()) -> pd.DataFrame:
    cur = conn.execute(sql, params)
    parts = []
    while True:
        rows = cur.fetchmany(262_144)
        if not rows:
            break
        parts.append(pd.DataFrame.from_records(rows, columns=columns))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})
    return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


def _read_pages(conn, sql: str, columns: list[str], copy: bool) -> pd.DataFrame | None:
    """The rows through pages.py, or None where it does not read them (then the next backend)."""
    table = _pages_table(conn, sql)
    if table is None:
        return None
    if table.num_rows == 0:
        return _empty(columns)
    return _table_frame(table, columns, copy)


def _pages_table(conn, sql: str):
    """pages.py's Arrow table of ``sql`` (the CLI's early read where it made it: prefetch.py), or
    None where it does not read the statement."""
    from analyze.read import pages, prefetch

    path = getattr(conn, "path", "")
    try:
        table = prefetch.take(path, sql, "pages") if path else None
        if table is None:
            if path and prefetch.refused(path, sql, "pages"):
                raise pages.Unsupported("refused by the early read already")
            table = pages.read_table(conn, sql)
    except Exception as exc:  # noqa: BLE001 - what it does not read (or a page that does not parse): next backend
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


def _read_connectorx(conn, sql: str, columns: list[str], copy: bool) -> pd.DataFrame | None:
    """The rows through connectorx (cxread.py), or None where it cannot read them (then ADBC does).
    Rows the CLI read before the analysis started (prefetch.py, same statement and file) are taken
    from there."""
    from analyze.read import cxread, prefetch

    path = getattr(conn, "path", "")
    cs = cxread.connection_string(path, getattr(conn, "immutable", False)) if path else None
    if cs is None:
        return None
    try:
        table = prefetch.take(path, sql, "connectorx")
        if table is None:
            table = cxread.read_table(cs, sql)
    except Exception:  # noqa: BLE001 - odd typing, text or SQL: ADBC / stdlib read anything
        return None
    SERVED["connectorx"] += 1
    if table.num_rows == 0:
        return _empty(columns)
    return _table_frame(table, columns, copy)


def read_batches(conn, sql: str):
    """The rows of ``sql`` as an iterator of Arrow record batches from pages.py, connectorx or ADBC
    (the first that reads it), or None where none can (then :func:`read_frame`, whose stdlib path
    reads anything). Batches
    are handed over one at a time and not kept, so a consumer that copies them out holds one."""
    be = backend_for(conn)
    if be == "pages":
        table = _pages_table(conn, sql)
        if table is not None:
            batches = table.to_batches()
            del table
            return _drain(batches)
        be = _after(be)
    if be == "connectorx":
        from analyze.read import cxread
        path = getattr(conn, "path", "")
        cs = cxread.connection_string(path, getattr(conn, "immutable", False)) if path else None
        if cs is not None:
            try:
                table = cxread.read_table(cs, sql)
            except Exception:  # noqa: BLE001 - odd typing, text or SQL: ADBC next
                table = None
            if table is not None:
                SERVED["connectorx"] += 1
                batches = table.to_batches()
                del table
                return _drain(batches)
        be = "adbc"
    if be != "adbc":
        return None
    aconn = _adbc_conn(conn)
    if aconn is None:
        return None
    cur = aconn.cursor()
    try:
        _set_batch_rows(cur, STREAM_BATCH_ROWS)
        cur.execute(sql)
        reader = cur.fetch_record_batch()
    except Exception:  # noqa: BLE001
        cur.close()
        return None
    SERVED["adbc"] += 1
    return _stream(cur, reader)


def _drain(batches: list):
    while batches:
        yield batches.pop(0)


def _stream(cur, reader):
    try:
        for batch in reader:
            yield batch
    finally:
        cur.close()


def read_frame(conn, sql: str, columns: list[str], params=(), copy: bool = True,
               rows_hint: int | None = None) -> pd.DataFrame:
    """Rows of ``sql`` as a DataFrame with ``columns``: pages.py where it reads the statement, else
    connectorx, else ADBC, else the stdlib cursor (same values and dtypes whichever reads them). A report with a journal/WAL beside
    it: the stdlib cursor only (:func:`backend_for`)."""
    be = backend_for(conn)
    if be == "pages":
        frame = _read_pages(conn, sql, columns, copy) if not params else None
        if frame is not None:
            return frame
        be = _after(be)
    if be == "connectorx" and not params:
        frame = _read_connectorx(conn, sql, columns, copy)
        if frame is not None:
            return frame
        be = "adbc"
    if be == "adbc":
        aconn = _adbc_conn(conn)
        if aconn is not None:
            try:
                cur = aconn.cursor()
                try:
                    if not copy:      # big tables: bigger batches (fewer Python steps per row)
                        _set_batch_rows(cur, STREAM_BATCH_ROWS)
                    cur.execute(sql, params) if params else cur.execute(sql)
                    if not copy:      # big tables: streamed, column by column
                        frame = _stream_to_frame(cur, columns, rows_hint)
                        SERVED["adbc"] += 1
                        return frame if frame is not None else _empty(columns)
                    table = cur.fetch_arrow_table()
                finally:
                    cur.close()
                SERVED["adbc"] += 1
                if table.num_rows == 0:
                    return _empty(columns)
                return arrow_to_frame(table, columns, copy=copy)
            except Exception:  # noqa: BLE001 - odd typing or text: the stdlib path reads anything
                pass
    SERVED["stdlib"] += 1
    return _read_stdlib(conn, sql, columns, params)

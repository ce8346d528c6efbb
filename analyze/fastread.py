"""Fast column reads from an nsys SQLite export: SQLite -> Arrow -> NumPy, read-only.

:func:`analyze.report._read` is the one place rows are fetched; it calls :func:`read_frame` here.
Backends, fastest first (measured, docs/performance.md; 1M kernels x 8 columns, warm cache):

=============  =======  ===========================================================================
backend        time     notes
=============  =======  ===========================================================================
sqlite3 CLI    0.48 s   no rows leave SQLite (``SELECT sum(...)``): the floor of any reader
ADBC sqlite    0.69 s   ``adbc_driver_sqlite.dbapi`` + ``fetch_arrow_table``; opens a
                        ``file:...?mode=ro`` URI, so the input stays read-only (**used**)
connectorx     1.06 s   cannot open read-only: ``sqlite://path?mode=ro`` is taken as a file name
                        (it creates an empty file of that name), so it is **not used**
stdlib         1.95 s   ``sqlite3`` cursor, ``fetchmany`` (3.4 s with one ``fetchall``); fallback
pandas         6.27 s   ``pandas.read_sql``
=============  =======  ===========================================================================

The ADBC connection opens the same URI as :func:`analyze.safety.open_report` (``mode=ro``, plus
``immutable=1`` when no journal/WAL sits next to the file), sets ``trusted_schema=OFF`` and
``query_only=ON`` and is closed with the report. Whatever ADBC cannot type (a column whose type
changes mid-table, text that is not UTF-8) falls back to the stdlib cursor, so results never depend
on the backend. ``SPECPROF_READER=stdlib`` forces the fallback (tests compare both).
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

EXACT_FLOAT = 2 ** 53

_ADBC: dict[int, object] = {}      # id(sqlite connection) -> ADBC connection
_FAILED: set[int] = set()


def backend() -> str:
    """The backend :func:`read_frame` tries first: ``adbc`` when installed, else ``stdlib``."""
    if os.environ.get("SPECPROF_READER", "").lower() == "stdlib":
        return "stdlib"
    try:
        import adbc_driver_sqlite.dbapi  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        return "stdlib"
    return "adbc"


def readonly_uri(conn) -> str | None:
    """The read-only URI the report was opened with (None for a connection not from safety)."""
    path = getattr(conn, "path", "")
    if not path:
        return None
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    return uri + ("&immutable=1" if getattr(conn, "immutable", False) else "")


def _adbc_conn(conn):
    key = id(conn)
    if key in _ADBC:
        return _ADBC[key]
    uri = readonly_uri(conn)
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
    _FAILED.discard(id(conn))
    aconn = _ADBC.pop(id(conn), None)
    if aconn is not None:
        try:
            aconn.close()
        except Exception:  # noqa: BLE001
            pass


def arrow_to_frame(table, columns: list[str]) -> pd.DataFrame:
    """Arrow table -> DataFrame typed like the stdlib path (ints; floats where NULLs; objects)."""
    import pyarrow as pa

    out = {}
    for name, col in zip(columns, table.columns):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        t = col.type
        if pa.types.is_integer(t):
            if col.null_count == 0:
                # a copy: zero-copy views of Arrow buffers are read-only, and callers write in place
                out[name] = np.array(col.to_numpy(zero_copy_only=False), dtype="int64")
            else:
                vals = col.to_numpy(zero_copy_only=False)          # float64 with NaN
                valid = col.is_valid().to_numpy(zero_copy_only=False)
                if valid.any() and np.nanmax(np.abs(vals)) >= EXACT_FLOAT:
                    obj = np.full(len(col), None, dtype=object)
                    obj[valid] = np.asarray(col.drop_null().to_numpy(), dtype=object)
                    out[name] = obj
                else:
                    out[name] = np.array(vals, dtype="float64")
        elif pa.types.is_floating(t):
            out[name] = np.array(col.to_numpy(zero_copy_only=False), dtype="float64")
        elif pa.types.is_null(t):
            out[name] = np.full(len(col), None, dtype=object)
        else:
            out[name] = np.asarray(col.to_pylist(), dtype=object) if len(col) < 4096 else \
                col.to_pandas(types_mapper=None).to_numpy(dtype=object)
    return pd.DataFrame(out, columns=columns)


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


def read_frame(conn, sql: str, columns: list[str], params=()) -> pd.DataFrame:
    """Rows of ``sql`` as a DataFrame with ``columns``: ADBC where it can, else the stdlib cursor."""
    if backend() == "adbc":
        aconn = _adbc_conn(conn)
        if aconn is not None:
            try:
                cur = aconn.cursor()
                try:
                    cur.execute(sql, params) if params else cur.execute(sql)
                    table = cur.fetch_arrow_table()
                finally:
                    cur.close()
                if table.num_rows == 0:
                    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})
                return arrow_to_frame(table, columns)
            except Exception:  # noqa: BLE001 - odd typing or text: the stdlib path reads anything
                pass
    return _read_stdlib(conn, sql, columns, params)

"""connectorx as a read-only reader: SQLite rows straight into Arrow, in Rust, without the GIL.

connectorx opens SQLite files read-write by default (a ``sqlite://PATH`` URL: a write through it
succeeds, and ``sqlite://PATH?mode=ro`` is taken as a file *name*, created empty). What it does
with the URL: it hands SQLite the text after the URL's 9th character (``sqlite://`` is 9 long) and
SQLite opens it with its URI flag on. So ``sqlite:ro`` + ``file:/PATH?mode=ro&immutable=1`` reaches
SQLite as the URI ``file:/PATH?mode=ro&immutable=1``: opened read-only (SQLite refuses every
write: "attempt to write a readonly database"), exactly like analyze.read.connection's own URI.

Because that relies on how connectorx passes the URL on, it is checked, not trusted: before the
first read in a process, :func:`_self_test` builds the same string for a scratch database in a
temporary directory, reads it, tries a write through it and checks that the write fails with a
read-only error and that the scratch file's bytes are unchanged. Any failure (or an older/newer
connectorx that treats the URL differently) turns this reader off for the process; the caller
then reads with ADBC. connectorx also percent-decodes the path, so a path with characters outside
``[A-Za-z0-9/._+-]`` (where decoding or URI parsing could change the file named) is not given to
it at all (None: the caller uses ADBC).

connectorx types a result column from its declared type or, for an expression, from its first
value, and fails on an expression whose first value is NULL; :func:`read_table` therefore rewrites
the select list (literal NULLs left out, expressions read with a NULL flag) and rebuilds the
columns, so the result is what ADBC returns for the original statement.
"""
from __future__ import annotations

import os
import re
import tempfile
import threading
from pathlib import Path

SAFE_PATH = re.compile(r"[A-Za-z0-9/._+\-]+")
_STATE: dict = {}          # "ok": bool, set by the first call of available(); "ran": connectorx has run here
_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    """connectorx's Rust runtime (its worker threads) does not survive ``fork()``: a child of a
    process in which it ran segfaults in its next read (seen in a ``--jobs`` worker). Such a child
    reads with the next backend (ADBC) instead."""
    if _STATE.get("ran"):
        _STATE["ok"] = False


os.register_at_fork(after_in_child=_after_fork_in_child)


def connection_string(path: str, immutable: bool = True) -> str | None:
    """The read-only connectorx connection string for ``path``, or None when the resolved path has
    characters connectorx or SQLite's URI parsing could reinterpret."""
    p = str(Path(path).resolve())
    if not SAFE_PATH.fullmatch(p) or not p.startswith("/"):
        return None
    return "sqlite:ro" + "file:" + p + "?mode=ro" + ("&immutable=1" if immutable else "")


def _import():
    try:
        import connectorx  # noqa: F401
        import pyarrow  # noqa: F401
    except ImportError:
        return None
    return connectorx


def _self_test() -> bool:
    """True when a write through :func:`connection_string` fails and the file stays as it was."""
    cx = _import()
    if cx is None:
        return False
    import sqlite3
    with tempfile.TemporaryDirectory(prefix="specprof-cx-") as d:
        db = Path(d) / "probe.sqlite"
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE t (x INTEGER)")
        con.execute("INSERT INTO t VALUES (1), (2)")
        con.commit()
        con.close()
        before, mtime = db.read_bytes(), db.stat().st_mtime_ns
        for immutable in (True, False):
            conn = connection_string(str(db), immutable)
            if conn is None:
                return False
            try:
                if cx.read_sql(conn, "SELECT x FROM t", return_type="arrow").num_rows != 2:
                    return False
            except Exception:  # noqa: BLE001 - cannot read: not usable
                return False
            try:
                cx.read_sql(conn, "DELETE FROM t RETURNING x", return_type="arrow")
                return False                    # the write went through: never use it
            except Exception as exc:  # noqa: BLE001
                if "readonly" not in str(exc).lower():
                    return False
        if db.read_bytes() != before or db.stat().st_mtime_ns != mtime or sorted(os.listdir(d)) != ["probe.sqlite"]:
            return False
    return True


def available() -> bool:
    """connectorx is installed and opens files read-only here (checked once per process; the
    early read of read/prefetch.py may ask from another thread)."""
    with _LOCK:
        if "ok" not in _STATE:
            _STATE["ran"] = True          # the self-test starts connectorx's runtime
            _STATE["ok"] = _self_test()
        return _STATE["ok"]


def forced_reader() -> str:
    """``SPECPROF_READER`` (lower case, "" when unset): ``connectorx``, ``adbc`` or ``stdlib`` start
    fastread's list of backends further down (past pages.py; past connectorx too for the last two)."""
    return os.environ.get("SPECPROF_READER", "").lower()


def connectorx_missing() -> bool:
    """connectorx is not installed (found without importing it)."""
    import importlib.util

    return importlib.util.find_spec("connectorx") is None


_NULL_ITEM = re.compile(r"^\s*NULL\s*$", re.I)


def split_select(sql: str) -> tuple[list[str], str]:
    """``SELECT a, f(b, c), d FROM ...`` -> (['a', 'f(b, c)', 'd'], 'FROM ...')."""
    m = re.match(r"\s*SELECT\s+(.*?)\s+(FROM\s.*)$", sql, re.S | re.I)
    if not m:
        raise ValueError(f"not a SELECT ... FROM: {sql[:60]}")
    items, depth, cur = [], 0, ""
    for ch in m.group(1):
        if ch == "," and depth == 0:
            items.append(cur.strip())
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    items.append(cur.strip())
    return items, m.group(2)


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def read_table(conn_string: str, sql: str):
    """Rows of ``sql`` as a pyarrow Table, one column per select item. Literal ``NULL`` items are
    left out of the statement and come back as all-null int64 columns (what ADBC types them as);
    every other computed item ``E`` is read as ``IFNULL(E, 0)`` with ``(E) IS NULL`` beside it, and
    its NULLs put back from that flag (connectorx cannot type an expression whose first value is
    NULL). Raises whatever connectorx raises (the caller falls back to another reader)."""
    import connectorx as cx
    import pyarrow as pa
    import pyarrow.compute as pc

    items, rest = split_select(sql)
    select, plan = [], []          # plan: per item, ("null",) | ("col", j) | ("expr", j, flag j)
    for it in items:
        if _NULL_ITEM.match(it):
            plan.append(("null",))
        elif _IDENT.fullmatch(it):
            plan.append(("col", len(select)))
            select.append(it)
        else:
            plan.append(("expr", len(select), len(select) + 1))
            select += [f"IFNULL({it}, 0)", f"({it}) IS NULL"]
    if not select:
        raise ValueError("nothing but NULL columns")
    _STATE["ran"] = True
    table = cx.read_sql(conn_string, "SELECT " + ", ".join(select) + " " + rest, return_type="arrow")
    if table.num_rows == 0 or all(p[0] == "col" for p in plan):
        return table          # (no rows: connectorx types every column as text; the caller ignores them)
    cols = []
    for p in plan:
        if p[0] == "null":
            cols.append(pa.nulls(table.num_rows, pa.int64()))
        elif p[0] == "col":
            cols.append(table.column(p[1]))
        else:
            values, flag = table.column(p[1]), table.column(p[2])
            if pc.any(pc.not_equal(flag, 0)).as_py():
                values = pc.if_else(pc.not_equal(flag, 0), pa.scalar(None, values.type), values)
            cols.append(values)
    return pa.table(cols, names=[f"c{i}" for i in range(len(items))])

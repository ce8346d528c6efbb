"""The report's API calls read while analyze-trace is still starting up.

The calls are the longest single read of a report (4M rows of the real H200 eager trace tiled to
1M kernels: 0.8 s on one core, the critical path of the read), and until the first statement runs
the process spends about 0.35 s on one core importing pandas and checking its inputs. So the CLI,
given one report, starts reading the calls in a background thread right after parsing its
arguments (:func:`start_calls`); connectorx reads in Rust without the GIL, on the core the imports
leave idle. When the analysis reaches the same statement on the same file, the reader takes the
rows from here (:func:`take`) instead of reading them again.

Nothing else changes: the statement is the one read/statements.py gives read/report.py, the
reader is the one fastread would use (connectorx on the ``immutable`` read-only URI, checked by
cxread before its first read), and rows are used only if the file is still the one that was read
(device, inode, size and modification time). Where anything is off (not an nsys export, a
``-wal``/``-journal`` beside it, connectorx absent or turned off, an error while reading) there is
no prefetch and the analysis reads as before; its errors are the analysis' own, and nothing that
goes wrong here stops a run. The module imports neither NumPy nor pandas (it runs before them;
the read's own thread imports pyarrow, and NumPy with it, while the CLI imports the rest).

Where the early read's rows are not taken the analysis reads the calls itself; a report the
analysis then refuses (a corrupt page found by its ``quick_check``) may have been read by connectorx
in vain, read-only. While the rows wait to be taken they take memory the ``--memory-budget auto``
estimate sees as used (the calls of the real 1M-kernel trace: about 0.15 GB).
"""
from __future__ import annotations

import os
import threading
import warnings

from analyze.read import connection, cxread
from analyze.read.statements import RUNTIME_TABLE, calls_statement

_LOCK = threading.Lock()
_PENDING: dict[tuple[str, str], "_Read"] = {}


class _Read:
    """One background read: its thread, the file it read, and its result (an Arrow table)."""

    def __init__(self, path: str, conn_string: str, sql: str):
        self.path, self.conn_string, self.sql = path, conn_string, sql
        self.identity = _identity(path)
        self.table = None
        self.thread = threading.Thread(target=self._run, name="specprof-prefetch", daemon=True)

    def _run(self) -> None:
        try:
            if cxread.available():
                self.table = cxread.read_table(self.conn_string, self.sql)
        except Exception:  # noqa: BLE001 - the analysis reads them itself (and reports its own errors)
            self.table = None


def _identity(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def start_calls(path: str | os.PathLike) -> bool:
    """Start reading the API calls of the report at ``path`` in the background; False (nothing
    started) where the analysis' own read would not use connectorx on an immutable report."""
    try:
        return _start_calls(path)
    except Exception:  # noqa: BLE001 - an early read is only ever an optimisation
        return False


def _start_calls(path) -> bool:
    if cxread.forced_reader() in ("adbc", "stdlib") or cxread.connectorx_missing():
        return False
    try:
        with warnings.catch_warnings():          # the analysis warns about the report itself
            warnings.simplefilter("ignore")
            conn = connection.open_report(path, quick_check=False)
    except Exception:  # noqa: BLE001 - a bad input: the analysis says why
        return False
    try:
        sql = calls_statement(connection.table_columns(conn, RUNTIME_TABLE)) if conn.immutable else None
        conn_string = cxread.connection_string(conn.path, True) if sql else None
        report_path = conn.path
    finally:
        conn.close()
    if conn_string is None:
        return False
    read = _Read(report_path, conn_string, sql)
    if read.identity is None:
        return False
    with _LOCK:
        _PENDING[(conn_string, sql)] = read
    try:
        read.thread.start()
    except RuntimeError:                          # no thread to be had: the analysis reads them
        with _LOCK:
            _PENDING.pop((conn_string, sql), None)
        return False
    return True


def take(conn_string: str, sql: str):
    """The prefetched rows of ``sql`` on the file of ``conn_string`` (a pyarrow Table), waiting for
    the read to end; None when there is none, it failed, or the file changed since it was read."""
    with _LOCK:
        read = _PENDING.pop((conn_string, sql), None)
    if read is None:
        return None
    read.thread.join()
    table, read.table = read.table, None
    if table is None or _identity(read.path) != read.identity:
        return None
    return table


def forget() -> None:
    """Drop every read not taken (the analysis ended before it read the calls, e.g. on an error):
    not waited for, so an error is reported at once; a read still running ends on its own and its
    rows go with it (the ``analyze-trace`` process ends without waiting for it: cli.console_main)."""
    with _LOCK:
        _PENDING.clear()


def pending() -> int:
    """How many prefetched reads wait to be taken (tests)."""
    with _LOCK:
        return len(_PENDING)

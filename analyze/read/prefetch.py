"""The report's API calls read while analyze-trace is still starting up.

The calls are the longest single read of a report (4M rows of the real H200 eager trace tiled to
1M kernels), and until the first statement runs the process spends about 0.35 s on one core
importing pandas and checking its inputs. So the CLI, given one report, starts reading the calls in
a background thread right after parsing its arguments (:func:`start_calls`), on the core the
imports leave idle. When the analysis reaches the same statement on the same file, the reader
takes the rows from here (:func:`take`) instead of reading them again.

Nothing else changes: the statement is the one read/statements.py gives read/report.py, the
reader is the first fastread would use (pages.py, NumPy letting go of the GIL between its steps),
on an ``immutable`` report only, and rows are used only by that reader, for that statement,
if the file is still the one that was read (device, inode, size and modification time). Where
anything is off (not an nsys export, a ``-wal``/``-journal`` beside it, ``SPECPROF_READER=stdlib``,
an error while reading) there is no prefetch and the analysis reads as before; its errors
are the analysis' own, and nothing that goes wrong here stops a run. The module imports neither
NumPy nor pandas (it runs before them; the read's own thread imports what its reader needs while
the CLI imports the rest).

Where the early read's rows are not taken the analysis reads the calls itself; a report the
analysis then refuses (a corrupt page found by its ``quick_check``) may have been read in vain,
read-only. While the rows wait to be taken they hold memory (the calls of the real 1M-kernel
trace: about 0.15 GB); the ``--memory-budget auto`` decision takes the available memory from
before the early read started (:func:`available_before`): its estimate counts the calls already.
"""
from __future__ import annotations

import os
import threading
import warnings

from analyze import memory
from analyze.read import connection
from analyze.read.statements import RUNTIME_TABLE, calls_statement

_LOCK = threading.Lock()
_PENDING: dict[tuple[str, str], "_Read"] = {}
_AVAILABLE_BEFORE: dict[str, int] = {}        # per file read early: available memory at the start


class _Read:
    """One background read: its thread, the file it read, and its result (an Arrow table) with the
    reader that made it (``pages``)."""

    def __init__(self, path: str, sql: str, readers: tuple[str, ...]):
        self.path, self.sql, self.readers = path, sql, readers
        self.identity = _identity(path)
        self.table, self.reader = None, None
        self.refused: set[str] = set()          # readers that could not read the statement
        self.thread = threading.Thread(target=self._run, name="specprof-prefetch", daemon=True)

    def _run(self) -> None:
        for reader in self.readers:
            try:
                self.table = _READERS[reader](self.path, self.sql)
            except Exception:  # noqa: BLE001 - the analysis reads them itself (and reports its own errors)
                self.table = None
                self.refused.add(reader)
            if self.table is not None:
                self.reader = reader
                return


def _read_pages(path: str, sql: str):
    from analyze.read import pages

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conn = connection.open_report(path, immutable=True, quick_check=False)
    try:
        return pages.read_table(conn, sql)
    finally:
        conn.close()


_READERS = {"pages": _read_pages}


def readers() -> tuple[str, ...]:
    """The readers an early read tries: pages.py, unless ``SPECPROF_READER=stdlib``."""
    # (fastread.forced_reader's rule, read here without importing NumPy and pandas)
    return ("pages",) if os.environ.get("SPECPROF_READER", "").strip().lower() in ("", "pages") else ()


def _identity(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def start_calls(path: str | os.PathLike) -> bool:
    """Start reading the API calls of the report at ``path`` in the background; False (nothing
    started) where the analysis' own read would not use pages.py on an
    immutable report."""
    try:
        return _start_calls(path)
    except Exception:  # noqa: BLE001 - an early read is only ever an optimisation
        return False


def _start_calls(path) -> bool:
    tried = readers()
    if not tried:
        return False
    try:
        with warnings.catch_warnings():          # the analysis warns about the report itself
            warnings.simplefilter("ignore")
            conn = connection.open_report(path, quick_check=False)
    except Exception:  # noqa: BLE001 - a bad input: the analysis says why
        return False
    try:
        sql = calls_statement(connection.table_columns(conn, RUNTIME_TABLE)) if conn.immutable else None
        report_path = conn.path
    finally:
        conn.close()
    if sql is None:
        return False
    key = _key(report_path, sql)
    read = _Read(key[0], sql, tried)
    if read.identity is None:
        return False
    available = memory.available_bytes()
    with _LOCK:
        _PENDING[key] = read
        if available is not None:
            _AVAILABLE_BEFORE[key[0]] = available
    try:
        read.thread.start()
    except RuntimeError:                          # no thread to be had: the analysis reads them
        with _LOCK:
            _PENDING.pop(key, None)
            _AVAILABLE_BEFORE.pop(key[0], None)
        return False
    return True


def _key(path: str, sql: str) -> tuple[str, str]:
    return os.path.realpath(path), sql


def take(path: str, sql: str, reader: str):
    """The rows of ``sql`` on the file at ``path`` (a pyarrow Table) read early by ``reader``,
    waiting for the read to end; None when there is none, another reader made it (left for that
    one), it failed, or the file changed since it was read."""
    key = _key(path, sql)
    with _LOCK:
        read = _PENDING.get(key)
    if read is None:
        return None
    read.thread.join()
    with _LOCK:
        if read.reader not in (reader, None) or _PENDING.get(key) is not read:
            return None
        _PENDING.pop(key)
    table, read.table = read.table, None
    if table is None or _identity(read.path) != read.identity:
        return None
    return table


def refused(path: str, sql: str, reader: str) -> bool:
    """Whether the early read of ``sql`` on the file at ``path`` (still waiting to be taken by
    another reader) found that ``reader`` cannot read it (waiting for the read to end): the
    analysis then goes straight to the next reader, which takes the early rows."""
    with _LOCK:
        read = _PENDING.get(_key(path, sql))
    if read is None:
        return False
    read.thread.join()
    return reader in read.refused and _identity(read.path) == read.identity


def available_before(path: str) -> int | None:
    """The available memory (memory.available_bytes) when the early read of the file at ``path``
    started, before the CLI imported its libraries and before any row was read; None when there
    was no early read of it. run/api.auto_budget decides from it: its estimate of the whole analysis
    holds the interpreter, its libraries and the calls already, and the kernel's figure taken later
    would count the rows read early (or being read) as used."""
    with _LOCK:
        return _AVAILABLE_BEFORE.get(os.path.realpath(path))


def forget() -> None:
    """Drop every read not taken (the analysis ended before it read the calls, e.g. on an error):
    not waited for, so an error is reported at once; a read still running ends on its own and its
    rows go with it (the ``analyze-trace`` process ends without waiting for it: cli.console_main)."""
    with _LOCK:
        _PENDING.clear()
        _AVAILABLE_BEFORE.clear()


def pending() -> int:
    """How many prefetched reads wait to be taken (tests)."""
    with _LOCK:
        return len(_PENDING)

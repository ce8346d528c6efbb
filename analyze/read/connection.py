"""The one place that opens an input report: read-only, safely, with one clear error per bad input
(the TraceError subclasses of analyze/errors.py).

Choices made here (and why):

* ``mode=ro`` always: the input file's bytes are never changed (no journal, no header rewrite).
* ``immutable=1`` only when no ``-journal``/``-wal``/``-shm`` file sits next to the report.
  Immutable tells SQLite the file cannot change: it takes no locks and never looks for a hot
  journal or WAL. That is right for a finished export (and lets us read reports on read-only
  media and network filesystems with broken locking), but wrong while ``nsys export`` is still
  writing the file or after it crashed mid-transaction: then a journal/WAL file exists, and we
  open without ``immutable`` so SQLite's locking and recovery rules apply.
* ``text_factory`` decodes with ``errors='replace'`` rather than ``surrogateescape``: names end up
  in CSV / Parquet / terminal output, and a surrogate-escaped string raises UnicodeEncodeError in
  every UTF-8 writer (pyarrow, csv with utf-8, print). U+FFFD is always encodable; the cost is that
  the exact invalid bytes are lost, which does not matter for names used for display and matching.
* ``PRAGMA trusted_schema=OFF`` and no extension loading: a report is untrusted input; SQL
  functions in views/triggers of a crafted file must not run with side effects.
* ``PRAGMA query_only=ON``: belt and braces on top of ``mode=ro``.
* Truncation is detected without reading the whole file: the header's in-header database size
  (pages) times the page size must not exceed the file size. A full ``PRAGMA quick_check`` is only
  run for files up to :data:`QUICK_CHECK_MAX_BYTES` (it reads every page).
"""
from __future__ import annotations

import contextlib
import os
import shlex
import sqlite3
import stat
import struct
import warnings
from pathlib import Path
from typing import Iterator

from analyze.errors import (CorruptReport, MissingInput, NotAFile, NotNsysExport, NotSqlite, NsysRepGiven,
                            SchemaWarning, TraceError)
from analyze.read.inputs import NSYS_REP_SUFFIXES, find_reports, nsys_export_command, refuse_empty

NEWEST_TESTED_SCHEMA = (3, 25)
OLDEST_TESTED_SCHEMA = (3, 0)
QUICK_CHECK_MAX_BYTES = 64 * 1024 * 1024
SQLITE_MAGIC = b"SQLite format 3\x00"
# The first bytes of every .nsys-rep / .qdrep seen so far (nsys 2021.3 .. 2025.3).
NSYS_REP_MAGIC = b"NVIDIA Tegra Pro"
# compressed files, by their first bytes: (magic, what, the tool that writes the data to stdout with -dc)
COMPRESSED = ((b"\xfd7zXZ\x00", "xz-compressed", "xz"), (b"\x1f\x8b", "gzip-compressed", "gzip"),
              (b"\x28\xb5\x2f\xfd", "zstd-compressed", "zstd"), (b"BZh", "bzip2-compressed", "bzip2"))
COMPRESSED_SUFFIXES = (".xz", ".gz", ".zst", ".bz2")
NSYS_MARKER_TABLES = ("StringIds", "NVTX_EVENTS", "META_DATA_EXPORT", "EXPORT_META_DATA",
                      "TARGET_INFO_SESSION_START_TIME")
NSYS_MARKER_PREFIX = "CUPTI_ACTIVITY_KIND_"


class ReportConnection(sqlite3.Connection):
    """sqlite3 connection returned by :func:`open_report`; knows where it came from."""

    path: str = ""
    schema_version: tuple | None = None
    immutable: bool = False


FILE_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
              (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def require_regular_file(path: str | os.PathLike) -> int:
    """The size of ``path`` when it is a regular file (through symbolic links); NotAFile for a FIFO,
    device or socket (refused before anything opens it: reading a FIFO blocks, /dev/zero never
    ends), MissingInput when it cannot be looked at."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise MissingInput(f"{p}: cannot stat ({e.strerror})", p) from None
    if stat.S_ISREG(st.st_mode):
        return st.st_size
    if stat.S_ISDIR(st.st_mode):
        raise MissingInput(f"{p}: is a directory, not a report file", p)
    kind = next((what for test, what in FILE_KINDS if test(st.st_mode)), "not a regular file")
    raise NotAFile(f"{p}: is {kind}, not a report file: give the .sqlite export itself", p)


def _decompressed_name(p: Path) -> str:
    """The name a decompressed copy of ``p`` gets: without its compression suffix, else with
    ``.sqlite`` added."""
    text = str(p)
    for suffix in COMPRESSED_SUFFIXES:
        if text.endswith(suffix) and len(text) > len(suffix):
            return text[: -len(suffix)]
    return text + ".sqlite"


def _read_header(p: Path, size: int) -> bytes:
    try:
        with open(p, "rb") as f:
            return f.read(100)
    except IsADirectoryError:
        raise MissingInput(f"{p}: is a directory, not a report file", p) from None
    except PermissionError as e:
        raise MissingInput(f"{p}: cannot read ({e.strerror})", p) from None
    except OSError as e:
        raise CorruptReport(f"{p}: cannot read ({e.strerror or e})", p) from None


def _check_header(p: Path, head: bytes, size: int, wal_present: bool) -> None:
    """Raise NotSqlite / NsysRepGiven / CorruptReport from the 100-byte header alone."""
    if size == 0:
        raise CorruptReport(f"{p}: empty file (0 bytes): the export did not finish or the "
                            "copy failed", p)
    if head.startswith(NSYS_REP_MAGIC):
        raise NsysRepGiven(f"{p}: is an Nsight Systems report, not its SQLite export; run "
                           f"`{nsys_export_command(p)}`", p)
    if not (head.startswith(SQLITE_MAGIC) or (len(head) < 16 and SQLITE_MAGIC.startswith(head))):
        packed = next(((what, tool) for magic, what, tool in COMPRESSED if head.startswith(magic)
                       and (tool != "bzip2" or head[3:4] in b"123456789")), None)
        if packed is not None:
            raise NotSqlite(f"{p}: not an SQLite database ({packed[0]}); decompress it first (`{packed[1]} -dc "
                            f"{shlex.quote(str(p))} > {shlex.quote(_decompressed_name(p))}`) and give that file", p)
        kind = "a text file" if _looks_text(head) else "binary data"
        raise NotSqlite(f"{p}: not an SQLite database ({kind}); expected an "
                        "`nsys export --type sqlite` file", p)
    if len(head) < 100:
        raise CorruptReport(f"{p}: truncated SQLite file ({size} bytes, shorter than its "
                            "100-byte header)", p)
    page_size = struct.unpack(">H", head[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise CorruptReport(f"{p}: corrupt SQLite header (page size {page_size})", p)
    change_counter, n_pages = struct.unpack(">II", head[24:32])
    valid_for = struct.unpack(">I", head[92:96])[0]
    if wal_present:
        return  # pages may live in the WAL; the main file may legitimately be shorter
    if n_pages and valid_for == change_counter and n_pages * page_size > size:
        raise CorruptReport(
            f"{p}: truncated: {size} bytes but its header says {n_pages} pages of {page_size} "
            f"bytes ({n_pages * page_size} bytes); copy or export it again", p)
    if size % page_size:
        raise CorruptReport(f"{p}: truncated or padded: {size} bytes is not a whole number of "
                            f"{page_size}-byte pages", p)


def _looks_text(head: bytes) -> bool:
    if not head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(b >= 32 or b in (9, 10, 13) for b in head)


def _decode_text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def _sqlite_uri(p: Path, immutable: bool) -> str:
    uri = p.resolve().as_uri() + "?mode=ro"
    return uri + ("&immutable=1" if immutable else "")


_SNAPSHOTS: dict[tuple, Path] = {}      # (path, size, mtime of it and its sidecars) -> private copy


def private_snapshot(p: Path) -> Path:
    """A copy of report ``p`` with its ``-wal``/``-journal`` in a private temporary directory (made
    once per process and unchanged file, removed at exit): SQLite may write the snapshot's -shm,
    never one beside the input."""
    import atexit
    import shutil
    import tempfile

    parts = [p] + [q for q in (Path(str(p) + s) for s in ("-wal", "-journal")) if q.exists()]
    key = tuple((str(q.resolve()), q.stat().st_size, q.stat().st_mtime_ns) for q in parts)
    snap = _SNAPSHOTS.get(key)
    if snap is not None and snap.exists():
        return snap
    d = Path(tempfile.mkdtemp(prefix="specprof-snapshot-"))
    atexit.register(shutil.rmtree, d, True)
    snap = d / p.name
    shutil.copyfile(p, snap)
    for q in parts[1:]:
        shutil.copyfile(q, d / (p.name + q.name[len(p.name):]))
    _SNAPSHOTS[key] = snap
    return snap


def _sidecars(p: Path) -> list[Path]:
    return [q for q in (Path(str(p) + s) for s in ("-journal", "-wal", "-shm")) if q.exists()]


def table_names(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]


def has_table(conn: sqlite3.Connection, table: str) -> bool:
    """Whether ``table`` is a table of the export: matched without regard to case, as SQLite resolves
    names in statements; a view of that name is no table (its SQL is never run: a view named like
    an nsys table, over a missing table or calling a function, would fail or run code)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND lower(name) = lower(?)",
                        (table,)).fetchone() is not None


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """Column names of ``table`` in order (PRAGMA table_info); [] when the table is missing."""
    if not has_table(conn, table):
        return []
    q = '"' + table.replace('"', '""') + '"'
    return [r[1] for r in conn.execute(f"PRAGMA table_info({q})")]


def export_schema_version(conn: sqlite3.Connection) -> tuple | None:
    """EXPORT_SCHEMA_VERSION of META_DATA_EXPORT (2023.3+) or EXPORT_META_DATA (2022.x) as a
    tuple of ints, e.g. (3, 20, 3); None for older exports that have neither table."""
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        cols = table_columns(conn, table)
        if "name" not in cols or "value" not in cols:
            continue
        row = conn.execute(f"SELECT value FROM {table} WHERE name='EXPORT_SCHEMA_VERSION'"
                           ).fetchone()
        if row and row[0] is not None:
            parts = []
            for piece in str(row[0]).strip().split("."):
                digits = "".join(ch for ch in piece if ch.isdigit())
                if not digits:
                    break
                parts.append(int(digits))
            if parts:
                return tuple(parts)
    return None


def open_report(path: str | os.PathLike, *, immutable: bool | None = None,
                quick_check: bool | None = None) -> ReportConnection:
    """Open one nsys SQLite export read-only and safely; return the connection.

    ``immutable``: None = decide (immutable unless a journal/WAL sits next to the file).
    ``quick_check``: None = run ``PRAGMA quick_check(1)`` only for files up to
    QUICK_CHECK_MAX_BYTES. Raises a TraceError subclass for every bad input; warns with
    SchemaWarning for an export schema newer than NEWEST_TESTED_SCHEMA."""
    refuse_empty(path)
    p = Path(path)
    if not p.exists():
        if p.is_symlink():
            raise MissingInput(f"{p}: broken symbolic link", p)
        raise MissingInput(f"{p}: no such file", p)
    if p.is_dir():
        n = len(find_reports(p))  # raises MissingInput / NsysRepGiven when there is none
        raise MissingInput(f"{p}: is a directory holding {n} report(s); give one file", p)
    if p.name.endswith(NSYS_REP_SUFFIXES):
        raise NsysRepGiven(f"{p}: is an Nsight Systems report, not its SQLite export; run "
                           f"`{nsys_export_command(p)}`", p)
    size = require_regular_file(p)
    sidecars = _sidecars(p)
    wal_present = any(str(q).endswith(("-wal", "-shm")) for q in sidecars)
    _check_header(p, _read_header(p, size), size, wal_present)
    if immutable is None:
        immutable = not sidecars
    # with a journal or WAL beside it SQLite reads them and rewrites (or creates) the -shm: a report
    # with sidecars is read from a private snapshot of the file and its journal/WAL, so that no byte
    # beside the input changes (the -shm is never copied: SQLite rebuilds it from the WAL)
    opened = private_snapshot(p) if sidecars and not immutable else p
    try:
        conn = sqlite3.connect(_sqlite_uri(opened, immutable), uri=True,
                               factory=ReportConnection, check_same_thread=False)
    except sqlite3.Error as e:
        raise CorruptReport(f"{p}: SQLite cannot open it ({e})", p) from None
    try:
        if hasattr(conn, "enable_load_extension"):
            conn.enable_load_extension(False)
        conn.text_factory = _decode_text
        conn.execute("PRAGMA trusted_schema=OFF")
        conn.execute("PRAGMA query_only=ON")
        tables = table_names(conn)
        if quick_check or (quick_check is None and size <= QUICK_CHECK_MAX_BYTES):
            _quick_check(conn, p)
        upper_markers = {m.upper() for m in NSYS_MARKER_TABLES}
        if not any(t.upper() in upper_markers or t.upper().startswith(NSYS_MARKER_PREFIX.upper()) for t in tables):
            shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
            raise NotNsysExport(f"{p}: SQLite database without Nsight Systems tables "
                                f"({len(tables)} table(s): {shown or 'none'})", p)
        version = export_schema_version(conn)
    except TraceError:
        conn.close()
        raise
    except sqlite3.DatabaseError as e:
        conn.close()
        msg = str(e)
        if "not a database" in msg or "encrypted" in msg:
            raise NotSqlite(f"{p}: not an SQLite database ({msg})", p) from None
        raise CorruptReport(f"{p}: corrupt or truncated SQLite file ({msg})", p) from None
    conn.path = str(p)
    conn.schema_version = version
    conn.immutable = bool(immutable)
    if version is not None and tuple(version[:2]) > NEWEST_TESTED_SCHEMA:
        warnings.warn(f"{p}: export schema {'.'.join(map(str, version))} is newer than the "
                      f"newest tested ({'.'.join(map(str, NEWEST_TESTED_SCHEMA))}); results may "
                      "miss renamed columns", SchemaWarning, stacklevel=2)
    return conn


def _quick_check(conn, p: Path) -> None:
    row = conn.execute("PRAGMA quick_check(1)").fetchone()
    if not row or row[0] != "ok":
        raise CorruptReport(f"{p}: corrupt SQLite file ({row[0] if row else '?'})", p)


def quick_check_if_small(conn: ReportConnection) -> None:
    """The check :func:`open_report` runs by default (``PRAGMA quick_check(1)`` on a file up to
    QUICK_CHECK_MAX_BYTES), on a connection opened without it: CorruptReport when it fails."""
    p = Path(conn.path)
    if p.stat().st_size <= QUICK_CHECK_MAX_BYTES:
        try:
            _quick_check(conn, p)
        except sqlite3.DatabaseError as e:
            raise CorruptReport(f"{p}: corrupt or truncated SQLite file ({e})", p) from None


@contextlib.contextmanager
def reading(path: str | os.PathLike | None = None) -> Iterator[None]:
    """Turn sqlite3.DatabaseError raised while reading a report into CorruptReport
    (a page that fails to read deep inside a big file shows up only when it is queried)."""
    try:
        yield
    except sqlite3.DatabaseError as e:
        where = f"{path}: " if path is not None else ""
        raise CorruptReport(f"{where}cannot read the report ({e})", path) from None

"""The one place that opens an input report, and the error vocabulary of specprof.

Every input goes through :func:`open_report`; every output through :func:`atomic_write`,
:func:`atomic_path` or :func:`atomic_dir_write`. Errors a user can fix are :class:`TraceError`
subclasses, each with its own process exit code (exit code 1 is reserved for internal bugs):

====  ==================  =====================================================================
code  class               situation
====  ==================  =====================================================================
2     MissingInput        path does not exist / directory holding no ``.sqlite`` report
3     NsysRepGiven        a ``.nsys-rep`` / ``.qdrep`` was given (or ``nsys export`` failed)
4     NotSqlite           the file is not an SQLite database (text, binary, ...)
5     NotNsysExport       an SQLite database without any Nsight Systems table
6     CorruptReport       truncated / corrupt / empty file: SQLite cannot read it
7     NoCudaActivity      a valid export that holds no GPU activity (raised by the analyzer)
8     OutputError         an output cannot be written (read-only, not a directory, ...)
====  ==================  =====================================================================

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
import errno
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import IO, Iterator

__all__ = [
    "TraceError", "MissingInput", "NsysRepGiven", "NotSqlite", "NotNsysExport", "CorruptReport",
    "NoCudaActivity", "OutputError", "SchemaWarning", "EXIT_INTERNAL_ERROR",
    "NEWEST_TESTED_SCHEMA", "OLDEST_TESTED_SCHEMA", "QUICK_CHECK_MAX_BYTES", "SQLITE_MAGIC",
    "NSYS_REP_SUFFIXES", "ReportConnection",
    "open_report", "find_reports", "export_schema_version", "table_columns", "table_names",
    "has_table", "nsys_export_command", "export_nsys_rep", "reading", "atomic_write",
    "atomic_path", "atomic_dir_write", "AtomicDir",
]

EXIT_INTERNAL_ERROR = 1
NEWEST_TESTED_SCHEMA = (3, 25)
OLDEST_TESTED_SCHEMA = (3, 0)
QUICK_CHECK_MAX_BYTES = 64 * 1024 * 1024
SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_REP_SUFFIXES = (".nsys-rep", ".qdrep")
# The first bytes of every .nsys-rep / .qdrep seen so far (nsys 2021.3 .. 2025.3).
NSYS_REP_MAGIC = b"NVIDIA Tegra Pro"
NSYS_MARKER_TABLES = ("StringIds", "NVTX_EVENTS", "META_DATA_EXPORT", "EXPORT_META_DATA",
                      "TARGET_INFO_SESSION_START_TIME")
NSYS_MARKER_PREFIX = "CUPTI_ACTIVITY_KIND_"
REPORT_SUFFIXES = (".sqlite", ".sqlite3", ".db")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class TraceError(Exception):
    """A problem with the user's input or output that the user can fix. ``exit_code`` is the
    process exit status the CLI returns; ``str(err)`` is a single line."""

    exit_code = EXIT_INTERNAL_ERROR

    def __init__(self, message: str, path: str | os.PathLike | None = None):
        self.path = None if path is None else str(path)
        self.message = _one_line(message)
        super().__init__(self.message)


class MissingInput(TraceError):
    exit_code = 2


class NsysRepGiven(TraceError):
    exit_code = 3


class NotSqlite(TraceError):
    exit_code = 4


class NotNsysExport(TraceError):
    exit_code = 5


class CorruptReport(TraceError):
    exit_code = 6


class NoCudaActivity(TraceError):
    exit_code = 7


class OutputError(TraceError):
    exit_code = 8


class SchemaWarning(UserWarning):
    """The export schema is newer than the newest one specprof was tested with."""


class ReportConnection(sqlite3.Connection):
    """sqlite3 connection returned by :func:`open_report`; knows where it came from."""

    path: str = ""
    schema_version: tuple | None = None
    immutable: bool = False


# --------------------------------------------------------------------------------------------
# input


def nsys_export_command(path: str | os.PathLike) -> str:
    """The exact command that turns a .nsys-rep into the .sqlite export specprof reads."""
    p = Path(path)
    out = _sqlite_name_for(p)
    return f"nsys export --type sqlite -o {_shell_quote(str(out))} {_shell_quote(str(p))}"


def _shell_quote(s: str) -> str:
    import shlex
    return shlex.quote(s)


def _sqlite_name_for(rep: Path) -> Path:
    name = rep.name
    for suf in NSYS_REP_SUFFIXES:
        if name.endswith(suf):
            return rep.with_name(name[: -len(suf)] + ".sqlite")
    return rep.with_name(name + ".sqlite")


def find_reports(path: str | os.PathLike) -> list[Path]:
    """A file -> [file]; a directory -> its ``*.sqlite`` files (not recursive), sorted by name.
    Raises MissingInput when the path is missing or the directory holds no report, and
    NsysRepGiven when a directory holds only .nsys-rep files."""
    p = Path(path)
    if not p.exists():
        raise MissingInput(f"{p}: no such file or directory", p)
    if not p.is_dir():
        return [p]
    found = sorted(q for q in p.iterdir() if q.is_file() and q.suffix.lower() in REPORT_SUFFIXES)
    if found:
        return found
    reps = sorted(q for q in p.iterdir() if q.is_file() and q.name.endswith(NSYS_REP_SUFFIXES))
    if reps:
        raise NsysRepGiven(
            f"{p}: holds {len(reps)} .nsys-rep file(s) but no .sqlite export; run "
            f"`{nsys_export_command(reps[0])}` for each", p)
    raise MissingInput(f"{p}: directory holds no .sqlite report", p)


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


def _sidecars(p: Path) -> list[Path]:
    return [q for q in (Path(str(p) + s) for s in ("-journal", "-wal", "-shm")) if q.exists()]


def table_names(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]


def has_table(conn: sqlite3.Connection, table: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type IN ('table','view') AND name=?",
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
    try:
        size = p.stat().st_size
    except OSError as e:
        raise MissingInput(f"{p}: cannot stat ({e.strerror})", p) from None
    sidecars = _sidecars(p)
    wal_present = any(str(q).endswith(("-wal", "-shm")) for q in sidecars)
    _check_header(p, _read_header(p, size), size, wal_present)
    if immutable is None:
        immutable = not sidecars
    try:
        conn = sqlite3.connect(_sqlite_uri(p, immutable), uri=True,
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
            row = conn.execute("PRAGMA quick_check(1)").fetchone()
            if not row or row[0] != "ok":
                raise CorruptReport(f"{p}: corrupt SQLite file ({row[0] if row else '?'})", p)
        if not any(t in NSYS_MARKER_TABLES or t.startswith(NSYS_MARKER_PREFIX) for t in tables):
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


@contextlib.contextmanager
def reading(path: str | os.PathLike | None = None) -> Iterator[None]:
    """Turn sqlite3.DatabaseError raised while reading a report into CorruptReport
    (a page that fails to read deep inside a big file shows up only when it is queried)."""
    try:
        yield
    except sqlite3.DatabaseError as e:
        where = f"{path}: " if path is not None else ""
        raise CorruptReport(f"{where}cannot read the report ({e})", path) from None


def export_nsys_rep(path: str | os.PathLike, progress: bool = True, *,
                    output: str | os.PathLike | None = None, nsys: str | None = None,
                    force: bool = False) -> Path:
    """Run ``nsys export --type sqlite`` on a .nsys-rep and return the .sqlite path.

    The export is written to a temporary name in the target directory and renamed into place
    only when nsys succeeded and the result opens as an nsys export; an existing export is
    reused unless ``force``. nsys's progress goes to stderr when ``progress``. Raises
    NsysRepGiven (with the manual command) when nsys is not on PATH or fails, MissingInput when
    the report is missing and OutputError when the directory is not writable."""
    rep = Path(path)
    if not rep.is_file():
        raise MissingInput(f"{rep}: no such file", rep)
    out = Path(output) if output is not None else _sqlite_name_for(rep)
    if out.exists() and not force:
        return out
    exe = nsys or shutil.which("nsys")
    if not exe:
        raise NsysRepGiven(f"{rep}: is an Nsight Systems report and nsys is not on PATH; run "
                           f"`{nsys_export_command(rep)}` where nsys is installed", rep)
    _check_dir_writable(out.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.stem}.", suffix=".tmp.sqlite", dir=out.parent)
    os.close(fd)
    tmp_p = Path(tmp)
    cmd = [exe, "export", "--type", "sqlite", "--force-overwrite", "true",
           "--quiet", "false" if progress else "true", "-o", str(tmp_p), str(rep)]
    try:
        try:
            proc = subprocess.run(cmd, stdout=sys.stderr if progress else subprocess.DEVNULL,
                                  stderr=sys.stderr if progress else subprocess.PIPE, text=True)
        except OSError as e:
            raise NsysRepGiven(f"{rep}: cannot run {exe} ({e.strerror or e}); run "
                               f"`{nsys_export_command(rep)}`", rep) from None
        if proc.returncode != 0 or not tmp_p.exists() or tmp_p.stat().st_size == 0:
            tail = ""
            if not progress and proc.stderr:
                tail = ": " + proc.stderr.strip().splitlines()[-1]
            raise NsysRepGiven(f"{rep}: `nsys export` failed (exit {proc.returncode}){tail}; "
                               f"try `{nsys_export_command(rep)}`", rep)
        open_report(tmp_p).close()
        os.replace(tmp_p, out)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp_p.unlink()
        raise
    return out


# --------------------------------------------------------------------------------------------
# output


def _output_error(path: Path, e: OSError) -> OutputError:
    reason = e.strerror or str(e)
    if e.errno == errno.ENOTDIR:
        reason = "a parent of it is a file, not a directory"
    elif e.errno in (errno.EROFS,):
        reason = "read-only file system"
    return OutputError(f"cannot write {path}: {reason}", path)


def _check_dir_writable(d: Path) -> None:
    d = d if str(d) else Path(".")
    if not d.exists():
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise _output_error(d, e) from None
    elif not d.is_dir():
        raise OutputError(f"cannot write into {d}: it is a file, not a directory", d)


def _mkstemp_near(path: Path, binary: bool = True) -> tuple[int, Path]:
    parent = path.parent if str(path.parent) else Path(".")
    _check_dir_writable(parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise _output_error(path, e) from None
    return fd, Path(tmp)


def _commit(tmp: Path, path: Path) -> None:
    try:
        mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except OSError as e:
        raise _output_error(path, e) from None


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` for writers that want a file name (pyarrow,
    sqlite, nsys); on success it is renamed onto ``path``, on any exception (KeyboardInterrupt
    included) it is removed and ``path`` is left as it was."""
    target = Path(path)
    if target.is_dir():
        raise OutputError(f"cannot write {target}: it is a directory", target)
    fd, tmp = _mkstemp_near(target)
    os.close(fd)
    try:
        yield tmp
        _commit(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, encoding: str | None = "utf-8",
                 newline: str | None = None) -> Iterator[IO]:
    """``with atomic_write(p) as f: f.write(...)``: writes a temp file in the same directory and
    ``os.replace``s it onto ``p`` when the block succeeds; on any exception (KeyboardInterrupt
    included) the temp file is removed and an existing ``p`` is left untouched. Raises
    OutputError (one line) when the location cannot be written."""
    if mode not in ("w", "wb", "wt", "x", "xb", "xt"):
        raise ValueError(f"atomic_write: unsupported mode {mode!r}")
    target = Path(path)
    if mode.startswith("x") and target.exists():
        raise OutputError(f"cannot write {target}: it already exists", target)
    if target.is_dir():
        raise OutputError(f"cannot write {target}: it is a directory", target)
    fd, tmp = _mkstemp_near(target)
    binary = "b" in mode
    try:
        f = os.fdopen(fd, "wb" if binary else "w",
                      **({} if binary else {"encoding": encoding, "newline": newline}))
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    try:
        with f:
            yield f
            f.flush()
            try:
                os.fsync(f.fileno())
            except OSError as e:
                raise _output_error(target, e) from None
        _commit(tmp, target)
    except OSError as e:  # a failed write/flush of the output (ENOSPC, EIO, ...)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _output_error(target, e) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class AtomicDir:
    """Files staged by :func:`atomic_dir_write`. ``open(name)`` / ``path(name)`` stage one file;
    all staged files are renamed into place (each rename atomic) when the ``with`` block ends
    without an exception, and all removed otherwise."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._staged: dict[str, Path] = {}
        self._files: list[IO] = []

    def _stage(self, name: str) -> Path:
        if os.sep in name or (os.altsep and os.altsep in name) or name in ("", ".", ".."):
            raise ValueError(f"AtomicDir: plain file name expected, got {name!r}")
        if name in self._staged:
            raise ValueError(f"AtomicDir: {name!r} written twice")
        fd, tmp = _mkstemp_near(self.directory / name)
        os.close(fd)
        self._staged[name] = tmp
        return tmp

    def path(self, name: str) -> Path:
        """A temporary path to hand to a writer that wants a file name (e.g. df.to_parquet)."""
        return self._stage(name)

    def open(self, name: str, mode: str = "w", *, encoding: str | None = "utf-8",
             newline: str | None = None) -> IO:
        if mode not in ("w", "wb", "wt"):
            raise ValueError(f"AtomicDir.open: unsupported mode {mode!r}")
        tmp = self._stage(name)
        try:
            if "b" in mode:
                f = open(tmp, "wb")
            else:
                f = open(tmp, "w", encoding=encoding, newline=newline)
        except OSError as e:
            raise _output_error(self.directory / name, e) from None
        self._files.append(f)
        return f

    def _close_files(self) -> None:
        for f in self._files:
            if not f.closed:
                f.close()
        self._files.clear()

    @property
    def names(self) -> list[str]:
        return list(self._staged)

    def _commit_all(self) -> None:
        try:
            self._close_files()
        except OSError as e:
            raise _output_error(self.directory, e) from None
        for name, tmp in self._staged.items():
            _commit(tmp, self.directory / name)
        self._staged.clear()

    def _discard(self) -> None:
        with contextlib.suppress(OSError):
            self._close_files()
        for tmp in self._staged.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._staged.clear()


@contextlib.contextmanager
def atomic_dir_write(directory: str | os.PathLike) -> Iterator[AtomicDir]:
    """Write several files into ``directory`` (created if missing)::

        with atomic_dir_write(out) as d:
            df.to_csv(d.open("phases.csv"), index=False)   # caller closes or lets pandas close
            df.to_parquet(d.path("phases.parquet"))

    Every file is staged under a temporary name and renamed into place when the block ends
    successfully; on an exception none of the staged files replaces an existing one."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise OutputError(f"cannot write into {d}: it is a file, not a directory", d)
    _check_dir_writable(d)
    staged = AtomicDir(d)
    try:
        yield staged
        staged._commit_all()
    except BaseException:
        staged._discard()
        raise

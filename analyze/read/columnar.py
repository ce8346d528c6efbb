"""nsys's columnar exports as inputs: ``nsys export --type parquetdir`` (a directory, one Parquet file
per table), ``--type arrowdir`` (one Arrow IPC file per table) and ``--type arrow`` (one file, a stream
per table, each naming its table in the schema metadata ``table_name``: nsys 2022.4's).

They hold the SQLite export's tables under the same table and column names, NULLs kept (checked on
nsys 2022.4's ``arrow`` export of a real report: ``nestingLevel`` NULL where SQLite has NULL); their
types differ (unsigned integers for ids, text as ``binary`` in 2022.4). The analysis reads them through
a SQLite copy made once per export (:func:`to_sqlite`), the way a ``.nsys-rep`` is read through the
SQLite file ``nsys export`` writes: the same readers, the same checks, so results equal the SQLite
export's wherever both hold the same rows. The copy is written atomically beside the export
(``<export>.sqlite``) or, where that directory is not writable, in the user cache
(``$SPECPROF_CACHE_DIR`` or ``~/.cache/specprof``), and reused while the export is unchanged (its
files' names, sizes and mtimes are the copy's key). The export itself is only read.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
from pathlib import Path

from analyze.atomic import replace_when_done, temp_beside, user_cache_dir
from analyze.errors import CorruptReport, MissingInput

PARQUET_SUFFIXES = (".parquet",)
ARROW_SUFFIXES = (".arrow", ".feather", ".ipc")
ARROW_STREAM_MAGIC = b"\xff\xff\xff\xff"      # an Arrow IPC stream's first message (continuation marker)
ARROW_FILE_MAGIC = b"ARROW1"
PARQUET_MAGIC = b"PAR1"
# tables every nsys export has: a directory holding one of them (as .parquet/.arrow) is an export
MARKER_TABLES = ("StringIds", "TARGET_INFO_SESSION_START_TIME", "ANALYSIS_DETAILS", "EXPORT_META_DATA")
# columns SQLite holds as BLOB (NCCL's NVTX payloads); every other binary column is text
BLOB_COLUMNS = frozenset({"binaryData"})
INSERT_BATCH_ROWS = 65_536
COPY_SUFFIX = ".sqlite"


def table_files(path: str | os.PathLike) -> dict[str, Path] | None:
    """{table: file} of a parquetdir/arrowdir export, None where ``path`` is not a directory holding
    one (a file per table named ``<TABLE>.parquet`` or ``<TABLE>.arrow``, one of them a table every
    nsys export has)."""
    p = Path(path)
    if not p.is_dir():
        return None
    files = {}
    for q in sorted(p.iterdir()):
        if q.is_file() and q.suffix.lower() in PARQUET_SUFFIXES + ARROW_SUFFIXES:
            files.setdefault(q.stem, q)
    return files if any(t in files for t in MARKER_TABLES) else None


def is_arrow_stream_file(path: str | os.PathLike) -> bool:
    """A single file of concatenated Arrow IPC streams (``nsys export --type arrow``)."""
    p = Path(path)
    if not p.is_file() or p.suffix.lower() in (".sqlite", ".sqlite3", ".db", ".nsys-rep", ".qdrep"):
        return False
    try:
        with open(p, "rb") as f:
            head = f.read(8)
    except OSError:
        return False
    return head[:4] == ARROW_STREAM_MAGIC


def is_columnar_export(path: str | os.PathLike) -> bool:
    return table_files(path) is not None or is_arrow_stream_file(path)


def _tables(path: Path):
    """(table name, Arrow schema, its record batches) for every table of the export, in a stable
    order; batches of at most INSERT_BATCH_ROWS rows, read as they are consumed (a table is never held
    whole: the copy's memory is a batch's)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    files = table_files(path)
    if files is not None:
        for name, f in files.items():
            if f.suffix.lower() in PARQUET_SUFFIXES:
                try:                    # opening a file reads its footer: a damaged one fails here, named
                    pf = pq.ParquetFile(f)
                except (pa.ArrowException, OSError, ValueError) as e:
                    raise CorruptReport(f"{path}: the columnar export does not read (table {name}, {f.name}): "
                                        f"{e}", path) from None
                yield name, pf.schema_arrow, pf.iter_batches(batch_size=INSERT_BATCH_ROWS)
            else:
                with pa.memory_map(str(f), "r") as src:
                    head = src.read(6)
                    src.seek(0)
                    try:
                        if head == ARROW_FILE_MAGIC:
                            reader = ipc.open_file(src)
                            batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
                        else:
                            reader = ipc.open_stream(src)
                            batches = iter(reader)
                    except (pa.ArrowException, OSError, ValueError) as e:
                        raise CorruptReport(f"{path}: the columnar export does not read (table {name}, {f.name}): "
                                            f"{e}", path) from None
                    yield name, reader.schema, batches
        return
    size = os.path.getsize(path)
    with pa.OSFile(str(path), "rb") as src:        # nsys 2022.4 --type arrow: a stream per table
        while src.tell() < size:
            at = src.tell()
            try:
                reader = ipc.open_stream(src)
            except pa.ArrowInvalid:
                if _end_of_streams(path, at, size):
                    return
                raise CorruptReport(f"{path}: the Arrow export breaks off at byte {at:,} of {size:,} "
                                    "(truncated or damaged)", path) from None
            name = (reader.schema.metadata or {}).get(b"table_name")
            yield name.decode("utf-8", "replace") if name else None, reader.schema, iter(reader)


def _end_of_streams(path: Path, at: int, size: int) -> bool:
    """Whether the bytes from ``at`` are only Arrow's end-of-stream marker (0xFFFFFFFF then a zero
    length, or the old zero length alone): the file's regular end, not a truncation."""
    with open(path, "rb") as f:
        f.seek(at)
        rest = f.read(16)
    return at < size and (rest == b"\xff\xff\xff\xff\x00\x00\x00\x00" or rest == b"\x00\x00\x00\x00")


def _sql_type(field) -> str:
    import pyarrow as pa

    t = field.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return "INTEGER"
    if pa.types.is_floating(t):
        return "REAL"
    if field.name in BLOB_COLUMNS:
        return "BLOB"
    return "TEXT"


def _is_binary(t) -> bool:
    import pyarrow as pa

    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _column_values(column) -> list:
    """One Arrow column as the Python values SQLite stores for it: text kept as the bytes it has
    (a binary column bound as bytes and cast to TEXT in the INSERT: its bytes stored as they are, as
    nsys's own SQLite export holds them, invalid UTF-8 included), booleans as 0/1."""
    import pyarrow as pa

    if pa.types.is_boolean(column.type):
        return [int(v) if v is not None else None for v in column.to_pylist()]
    if pa.types.is_unsigned_integer(column.type) and column.type.bit_width == 64:
        # nsys's own SQLite export stores a 64-bit id at or above 2**63 as the signed integer of the same
        # bits (nsys 2025.3: DIAGNOSTIC_EVENT.globalPid 0xfe00000000000000 is -144115188075855872 in the
        # SQLite export of the report whose parquetdir holds it unsigned): the same here
        column = column.cast(pa.int64(), safe=False)
    return column.to_pylist()


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


KEY_TABLE = "specprof_columnar_source"      # the copy's one table of its own: the export's key


def write_sqlite(path: str | os.PathLike, out: str | os.PathLike, key: str = "") -> int:
    """The export's tables into a new SQLite file ``out`` (which must not exist), and ``key`` in
    :data:`KEY_TABLE`; returns the tables written. Raises CorruptReport where a table of the export
    does not read or holds what no SQLite export can (the message names it)."""
    import pyarrow as pa

    n = 0
    conn = sqlite3.connect(out)
    try:
        conn.execute("PRAGMA journal_mode=OFF")
        conn.execute("PRAGMA synchronous=OFF")
        name = None
        try:
            for name, schema, batches in _tables(Path(path)):
                if name is None:
                    for _ in batches:
                        pass
                    continue
                fields = list(schema)
                types = [_sql_type(f) for f in fields]
                cols = ", ".join(f"{_quote(f.name)} {t}" for f, t in zip(fields, types))
                conn.execute(f"CREATE TABLE {_quote(name)} ({cols})")
                marks = ", ".join("CAST(? AS TEXT)" if t == "TEXT" and _is_binary(f.type) else "?"
                                  for f, t in zip(fields, types))
                for batch in batches:
                    columns = [_column_values(batch.column(i)) for i in range(len(fields))]
                    conn.executemany(f"INSERT INTO {_quote(name)} VALUES ({marks})", zip(*columns))
                n += 1
            conn.execute(f"CREATE TABLE {KEY_TABLE} (key TEXT)")
            conn.execute(f"INSERT INTO {KEY_TABLE} VALUES (?)", (key,))
        except CorruptReport:
            raise
        except (pa.ArrowException, OSError, ValueError, OverflowError, sqlite3.Error) as e:
            where = f" (table {name})" if name else ""
            raise CorruptReport(f"{path}: the columnar export does not read{where}: {e}", path) from None
        conn.commit()
    finally:
        conn.close()
    return n


def export_key(path: str | os.PathLike) -> str:
    """Changes whenever a file of the export does (names, sizes, mtimes)."""
    p = Path(path)
    files = [p] if p.is_file() else sorted(q for q in p.iterdir() if q.is_file())
    h = hashlib.sha256()
    for q in files:
        st = q.stat()
        h.update(f"{q.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:16]


def _copy_places(path: Path, key: str) -> list[Path]:
    """Beside the export, then the user cache (named with the export's ``key``)."""
    path = Path(os.path.abspath(path))          # "." and "dir/" name the export too
    beside = path.with_name(path.name + COPY_SUFFIX)
    return [beside, user_cache_dir() / "columnar" / f"{path.name}-{key}{COPY_SUFFIX}"]


def copy_key(copy: Path) -> str | None:
    """The key a SQLite copy was written for (None: not a copy, or unreadable)."""
    try:
        conn = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
        try:
            row = conn.execute(f"SELECT key FROM {KEY_TABLE}").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def sqlite_copy(path: str | os.PathLike, progress: bool = False) -> Path:
    """The SQLite copy of a columnar export: an existing one whose key matches, else written now
    (atomically: a temporary file renamed into place) beside the export or in the user cache; a line
    on stderr says so when ``progress``."""
    p = Path(path)
    if not p.exists():
        raise MissingInput(f"{p}: no such file or directory", p)
    key = export_key(p)
    places = _copy_places(p, key)
    for copy in places:
        if copy.is_file() and copy_key(copy) == key:
            return copy
    last_error: OSError | None = None
    for copy in places:
        if copy.exists() and copy_key(copy) is None:
            continue                    # a file of the user's under that name (not a copy): never replaced
        try:
            copy.parent.mkdir(parents=True, exist_ok=True)
            tmp_p = temp_beside(copy)
        except OSError as e:
            last_error = e
            continue
        tmp_p.unlink()                  # the writer makes the database itself
        with replace_when_done(tmp_p, copy):
            if progress:                # before the work: a large export takes seconds
                print(f"specprof: {p}: a columnar nsys export, read through its SQLite copy (made once, reused "
                      f"while the export is unchanged): writing {copy}", file=sys.stderr, flush=True)
            write_sqlite(p, tmp_p, key)
        return copy
    from analyze.errors import OutputError
    raise OutputError(f"cannot write the SQLite copy of {p} beside it or in the user cache ({last_error})", p)

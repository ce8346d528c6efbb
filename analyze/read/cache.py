"""Optional cache of the tables extracted from a report, as Parquet (``--cache``).

Reading a big export is most of the cost of an analysis; the extracted tables
(:class:`analyze.read.report.ReportTables`) are small in comparison and load from Parquet in a
fraction of the time. The cache sits next to the report, in ``<report>.specprof-cache/<key>/``;
when the report's directory is not writable it goes to ``~/.cache/specprof/<key>/`` (or
``$SPECPROF_CACHE_DIR``) and :func:`load_or_read` says so in its note. The report itself is never
written to (it is only read, and opened read-only).

The key is the report's size, its mtime (ns) and the SHA-256 of its first MiB (the SQLite header
and the first pages, which change whenever SQLite rewrites the file), the same of a ``-wal`` file
beside it (a WAL database's newest pages are there, not in the main file), plus the cache format
version. Any change to the report gives a new key; stale entries are simply never read.
Entries are written to a fresh temporary directory and renamed into place, so a crash never leaves a
half-written entry that would be read later, and no existing file is ever written over (the output
policy of analyze/output_policy.py holds trivially: every file written is new).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd

from analyze import notes as N
from analyze.notes import Note
from analyze.read import connection, report
from analyze.read.inputs import display_path

FORMAT = 2      # 2: rows left out at the read (meta excluded_rows), session end, host name
HEADER_BYTES = 1 << 20
TABLES = ("gpu_ops", "calls", "ranges", "marks", "processes", "devices")


def cache_key(path: str | os.PathLike) -> str:
    """The entry's name: the report's size, mtime and first MiB, and the same of any ``-wal`` file
    beside it (a WAL database's newest pages live in the ``-wal``: a change there changes the key)."""
    p = Path(path)
    connection.require_regular_file(p)      # a FIFO would block the read below
    st = p.stat()
    h = hashlib.sha256()
    with open(p, "rb") as f:
        h.update(f.read(HEADER_BYTES))
    key = f"v{FORMAT}-{st.st_size}-{st.st_mtime_ns}"
    wal = Path(str(p) + "-wal")
    if wal.is_file():
        wst = wal.stat()
        with open(wal, "rb") as f:
            h.update(f.read(HEADER_BYTES))
        key += f"-wal{wst.st_size}-{wst.st_mtime_ns}"
    return f"{key}-{h.hexdigest()[:24]}"


def user_cache_dir() -> Path:
    env = os.environ.get("SPECPROF_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "specprof"


def _writable(d: Path) -> bool:
    return d.is_dir() and os.access(d, os.W_OK | os.X_OK)


def candidates(path: str | os.PathLike) -> list[Path]:
    """Where the entry for ``path`` may live: next to the report, then the user cache."""
    p = Path(path).resolve()
    key = cache_key(p)
    return [p.parent / (p.name + ".specprof-cache") / key,
            user_cache_dir() / (hashlib.sha256(os.fsencode(str(p))).hexdigest()[:16] + "-" + p.name) / key]


def _save(tables: report.ReportTables, entry: Path) -> None:
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    try:
        for name in TABLES:
            frame = getattr(tables, name)
            with open(tmp / f"{name}.parquet", "wb") as f:     # a file object: any path, UTF-8 or not
                frame.reset_index(drop=True).to_parquet(f, index=False)
        with open(tmp / "strings.parquet", "wb") as f:
            pd.DataFrame({"id": tables.strings.index.to_numpy(dtype="int64"),
                          "value": tables.strings.to_numpy(dtype=object)}).to_parquet(f, index=False)
        (tmp / "meta.json").write_text(json.dumps(tables.meta))
        try:
            os.rename(tmp, entry)
        except OSError:          # another process wrote the same entry first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _object_strings(frame: pd.DataFrame) -> pd.DataFrame:
    # Parquet gives back pandas' string dtype; the reader hands out object columns
    for c in frame.columns:
        if pd.api.types.is_string_dtype(frame[c]) and not pd.api.types.is_object_dtype(frame[c]):
            frame[c] = frame[c].astype(object).where(frame[c].notna(), None)
    return frame


def _read_parquet(path: Path) -> pd.DataFrame:
    with open(path, "rb") as f:
        return pd.read_parquet(f)


def _load(path: str, entry: Path) -> report.ReportTables:
    frames = {name: _object_strings(_read_parquet(entry / f"{name}.parquet")) for name in TABLES}
    s = _read_parquet(entry / "strings.parquet")
    strings = pd.Series(s["value"].to_numpy(dtype=object), index=s["id"].to_numpy(dtype="int64"), name="value")
    meta = json.loads((entry / "meta.json").read_text())
    return report.ReportTables(path=display_path(path), strings=strings, meta=meta, **frames)


def load_or_read(path: str, reader=None) -> tuple[report.ReportTables, Note | None]:
    """Tables of ``path`` from the cache, else read (``reader(path)``) and cached. Returns
    (tables, note): note says where the entry came from or went, None when next to the report."""
    reader = reader or report.read_report
    near, far = candidates(path)
    for entry in (near, far):
        if (entry / "meta.json").is_file():
            try:
                return _load(path, entry), (None if entry == near else
                                            Note(N.CACHE_READ_ELSEWHERE, f"cache: read from {entry}"))
            except Exception:  # noqa: BLE001 - unreadable entry: read the report again
                shutil.rmtree(entry, ignore_errors=True)
    tables = reader(path)
    if _writable(near.parent.parent):
        try:
            _save(tables, near)
            return tables, None
        except OSError:
            pass
    try:
        _save(tables, far)
        note = Note(N.CACHE_WRITTEN_ELSEWHERE, f"cache: {near.parent.parent} is not writable; cached the tables in "
                    f"{far.parent} instead")
    except OSError as exc:
        note = Note(N.CACHE_NOT_WRITTEN, f"cache: could not write a cache entry ({exc}); analysis not affected")
    return tables, note

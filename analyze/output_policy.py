"""The one output policy of specprof: what an output path may be, decided in one place for every writer
(JSON, CSV, Parquet, HTML, figures, scrub, diff, whatif, the cache, profile-trace).

* An output is never an input: a target that is the same file as an input of the run (same device and
  inode: through symbolic links and hard links, and the ``-wal``/``-shm``/``-journal`` files beside
  an input report) is refused with :class:`OutputError` (exit 8), with or without ``--force``.
* An existing Nsight Systems report (an SQLite database or a ``.nsys-rep`` by its first bytes) is not
  overwritten without ``--force``; a target that must not exist at all (``scrub -o``) is refused when
  it exists, unless ``--force``.
* Two outputs of one run never name the same file (or a file output the same path as an output
  directory): refused before any work, as one would replace the other.
* A file output given with a trailing ``/`` names a directory, not a file: refused.
* Only regular files are written under a temporary name and renamed into place (analyze/atomic.py).
  ``-`` is standard output; a target that exists and is not a regular file (a character or block
  device such as ``/dev/null``, a FIFO) is written to as a stream: opened and written, never renamed
  over, never replaced. A socket or a directory is refused.

The inputs of a run are declared with :func:`protect` (a context manager the command lines open around
their work; renderers add the inputs of the result they write): nested scopes add up. Nothing here
imports pandas (profile-trace uses it at server start).
"""
from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Iterable, Iterator

from analyze.errors import OutputError

__all__ = ["STDOUT", "text_stream", "SIDECAR_SUFFIXES", "REPORT_SUFFIXES", "protect", "protected_inputs", "forced",
           "target_kind", "check_output", "check_outputs", "refuse_existing", "identities",
           "same_file_as_input", "is_report_file"]

STDOUT = "-"


def text_stream(*outputs):
    """Where a command's text report goes: standard error when one of its ``outputs`` (a JSON, say)
    is written to standard output (``-``), so that stdout holds that document alone; else stdout."""
    import sys

    return sys.stderr if any(o is not None and os.fspath(o) == STDOUT for o in outputs) else sys.stdout


def wrote_lines(*outputs) -> str:
    """The "wrote:" section a command's text report ends with (as the report's): each of ``outputs`` given
    and not standard output, one a line; empty when none."""
    paths = [os.fspath(o) for o in outputs if o is not None and os.fspath(o) != STDOUT]
    return "\nwrote:\n" + "".join(f"  {p}\n" for p in paths) if paths else ""


SIDECAR_SUFFIXES = ("-wal", "-shm", "-journal")
# files of a directory that count as its reports (read/inputs.py lists the same suffixes)
REPORT_SUFFIXES = (".sqlite", ".sqlite3", ".db", ".nsys-rep", ".qdrep")
SQLITE_MAGIC = b"SQLite format 3\x00"
NSYS_REP_MAGIC = b"NVIDIA Tegra Pro"

# kinds of target
STREAM = "stream"       # standard output, a device, a FIFO: written to, never renamed over
FILE = "file"           # a regular file (or none yet): temporary name, then renamed into place

_scopes: list[tuple[dict, bool | None]] = []      # (identity -> input path, force) per open scope


def _identity(path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def identities(paths: Iterable) -> dict[tuple[int, int], str]:
    """(device, inode) -> path for every input in ``paths``: files (and the ``-wal``/``-shm``/
    ``-journal`` files beside them), directories (each report file inside and its sidecars, and
    the directory itself). Paths that do not exist are left out."""
    out: dict[tuple[int, int], str] = {}

    def add(p: str) -> None:
        ident = _identity(p)
        if ident is not None:
            out.setdefault(ident, p)
        for suffix in SIDECAR_SUFFIXES:
            side = _identity(p + suffix)
            if side is not None:
                out.setdefault(side, p + suffix)

    for p in paths:
        if p is None:
            continue
        p = os.fspath(p)
        if os.path.isdir(p):
            ident = _identity(p)
            if ident is not None:
                out.setdefault(ident, p)
            try:
                names = sorted(os.listdir(p))
            except OSError:
                names = []
            for name in names:
                if name.endswith(REPORT_SUFFIXES):
                    add(os.path.join(p, name))
        else:
            add(p)
    return out


@contextlib.contextmanager
def protect(paths: Iterable = (), *, force: bool | None = None) -> Iterator[None]:
    """Within the block, every output is checked against ``paths`` (and those of enclosing blocks);
    ``force`` (None: as the enclosing block says) allows replacing existing reports."""
    _scopes.append((identities(list(paths)), force))
    try:
        yield
    finally:
        _scopes.pop()


def protected_inputs() -> dict[tuple[int, int], str]:
    out: dict[tuple[int, int], str] = {}
    for ids, _ in _scopes:
        for k, v in ids.items():
            out.setdefault(k, v)
    return out


def forced() -> bool:
    """Whether the innermost scope that says so allows replacing existing reports (``--force``)."""
    for _, force in reversed(_scopes):
        if force is not None:
            return force
    return False


def same_file_as_input(path) -> str | None:
    """The input ``path`` is the same file as (through links), or None."""
    ident = _identity(path)
    return None if ident is None else protected_inputs().get(ident)


def is_report_file(path) -> bool:
    """An SQLite database or an Nsight Systems report, by its first bytes (regular files only)."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return False
    return head.startswith(SQLITE_MAGIC) or head.startswith(NSYS_REP_MAGIC)


def target_kind(path) -> str:
    """:data:`STREAM` for ``-`` and for an existing device or FIFO, :data:`FILE` for a regular file
    or a path that does not exist yet; OutputError for a directory or a socket."""
    if os.fspath(path) == STDOUT:
        return STREAM
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return FILE
    except NotADirectoryError:
        raise OutputError(f"cannot write {path}: a parent of it is a file, not a directory", path) from None
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}", path) from None
    if stat.S_ISREG(st.st_mode):
        return FILE
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(f"cannot write {path}: it is a directory", path)
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return STREAM
    raise OutputError(f"cannot write {path}: it is a socket or other special file, not a file", path)


def check_output(path, *, overwrite: str = "reports") -> str:
    """The policy for one output file; returns its kind (:func:`target_kind`). Raises OutputError
    (exit 8) when ``path`` is an input of the run, or when it exists and ``overwrite`` forbids
    replacing it without ``--force``: ``"reports"`` (default) refuses an existing SQLite database or
    nsys report, ``"never"`` any existing file, ``"always"`` nothing."""
    kind = target_kind(path)
    if kind == STREAM:
        return kind
    same = same_file_as_input(path)
    if same is not None:
        shown = "" if os.path.abspath(same) == os.path.abspath(os.fspath(path)) else f" ({same})"
        raise OutputError(f"cannot write {path}: it is an input of this run{shown}; choose another output "
                          "path", path)
    if os.path.lexists(path) and not forced():
        if overwrite == "never":
            raise OutputError(f"cannot write {path}: it exists; choose another path, or --force to replace it",
                              path)
        if overwrite == "reports" and os.path.exists(path) and is_report_file(path):
            raise OutputError(f"cannot write {path}: it is an existing Nsight Systems report (SQLite); refusing to "
                              "overwrite it without --force", path)
    return kind


def _where(path) -> tuple:
    """What two output paths are compared by: the file's identity when it exists, else its resolved
    absolute path (symbolic links followed before any '..' is applied, as the system does)."""
    ident = _identity(path)
    return ("inode", *ident) if ident is not None else ("path", os.path.realpath(path))


def check_outputs(files: dict | None = None, dirs: dict | None = None) -> None:
    """Every output path of one run (``files``: option -> file path, ``dirs``: option -> directory;
    None where not given) against the policy before any work: each file by :func:`check_output`; a
    file path ending in ``/`` (a directory, not a file); a directory that is an input of the run; and
    no two file outputs, nor a file output and a directory, naming one target (``-`` counts; a device
    such as ``/dev/null`` may take several; directories may be shared: their writers' names differ)."""
    files = {k: v for k, v in (files or {}).items() if v}
    dirs = {k: v for k, v in (dirs or {}).items() if v}
    for option, path in files.items():
        text = os.fspath(path)
        if text != STDOUT and (text.endswith(("/", os.sep)) or os.path.basename(text) in ("", ".", "..")):
            raise OutputError(f"cannot write {path} ({option}): a path ending in '/' names a directory; give a "
                              "file name", path)
        check_output(path)
    for option, path in dirs.items():
        if same_file_as_input(path):
            raise OutputError(f"cannot write into {path} ({option}): it is an input of this run; choose another "
                              "directory", path)
    seen: dict[tuple, tuple[str, bool]] = {}           # target -> (the first option naming it, a file?)
    for option, path in [*files.items(), *dirs.items()]:
        is_file = option in files
        if is_file and os.fspath(path) != STDOUT and target_kind(path) == STREAM:
            continue                                    # /dev/null and other devices: any number of outputs
        key = ("stdout",) if os.fspath(path) == STDOUT else _where(path)
        if key in seen and (is_file or seen[key][1]):
            raise OutputError(f"cannot write {path}: both {seen[key][0]} and {option} name it and one would "
                              "replace the other; give each output its own path", path)
        seen.setdefault(key, (option, is_file))


def refuse_existing(paths: Iterable, *, force: bool = False) -> None:
    """profile-trace's rule for the files a run creates: none may exist already unless ``force``; none
    may be an input, ever. Raises OutputError naming the first clash."""
    with protect((), force=force):
        for p in paths:
            if os.path.lexists(p) or same_file_as_input(p):
                check_output(p, overwrite="never")


def resolved_file(path) -> Path:
    """Where a regular-file output is renamed to: through a symbolic link to its target (the link
    stays a link)."""
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def inputs_of(result) -> list[str]:
    """The input reports an analysis result names (``result.inputs``: dicts with ``path``, or paths),
    which a renderer protects while it writes."""
    out = []
    for item in getattr(result, "inputs", None) or []:
        path = item.get("path") if isinstance(item, dict) else item
        if path:
            out.append(str(path))
    return out

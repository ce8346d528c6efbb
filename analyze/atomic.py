"""Atomic outputs: every file specprof writes goes through :func:`atomic_write`, :func:`atomic_path`
or :func:`atomic_dir_write`, under the one output policy of :mod:`analyze.output_policy` (never an input,
no existing report replaced without ``--force``, only regular files renamed over).

A regular-file target is written under a temporary name in its directory and renamed into place when
complete (through a symbolic link: onto the link's target, so the link stays), removed on any
exception (KeyboardInterrupt and SIGTERM included), so no output is ever left half-written and an
existing file is only replaced by a complete one. A stream target (``-`` for standard output, a
device such as ``/dev/null``, a FIFO) is staged in a temporary file and copied into the stream when
complete: it is written to, never renamed over or replaced. A location that cannot be written raises
OutputError (one line)."""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import IO, Iterator

from analyze import output_policy as policy
from analyze.errors import OutputError

__all__ = ["atomic_write", "atomic_path", "atomic_dir_write", "AtomicDir", "check_dir_writable", "temp_beside",
           "replace_when_done"]


def _output_error(path: Path, e: OSError) -> OutputError:
    reason = e.strerror or str(e)
    if e.errno == errno.ENOTDIR:
        reason = "a parent of it is a file, not a directory"
    elif e.errno in (errno.EROFS,):
        reason = "read-only file system"
    return OutputError(f"cannot write {path}: {reason}", path)


def user_cache_dir() -> Path:
    """Where specprof keeps what it derives from an input it cannot write beside (the ``--cache``
    entries, columnar exports' SQLite copies): ``$SPECPROF_CACHE_DIR``, else ``$XDG_CACHE_HOME/specprof``
    or ``~/.cache/specprof``."""
    env = os.environ.get("SPECPROF_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "specprof"


def check_dir_writable(d: Path) -> None:
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
    check_dir_writable(parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise _output_error(path, e) from None
    return fd, Path(tmp)


def _mkstemp_for_stream(path) -> tuple[int, Path]:
    """A temporary file (in the system's temporary directory) staging a stream output."""
    name = Path(os.fspath(path)).name or "stdout"
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".specprof-{name}.", suffix=".tmp" + Path(name).suffix)
    except OSError as e:
        raise _output_error(Path(os.fspath(path)), e) from None
    return fd, Path(tmp)


def _commit(tmp: Path, path: Path, overwrite: str = "reports") -> None:
    """Rename ``tmp`` onto ``path`` (a regular-file target), the policy checked once more first."""
    policy.check_output(path, overwrite=overwrite)
    try:
        mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, policy.resolved_file(path))
    except OSError as e:
        raise _output_error(path, e) from None


def _copy_to_stream(tmp: Path, path) -> None:
    """The staged bytes into ``path`` (``-``: standard output), written as a stream."""
    try:
        if os.fspath(path) == policy.STDOUT:
            sys.stdout.flush()
            out = getattr(sys.stdout, "buffer", None)
            with open(tmp, "rb") as src:
                if out is None:          # a text-only stdout (redirected in-process): text, as is
                    sys.stdout.write(src.read().decode("utf-8", "replace"))
                    return
                shutil.copyfileobj(src, out)
            out.flush()
            return
        with open(tmp, "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
    except BrokenPipeError:
        raise
    except OSError as e:
        raise _output_error(Path(os.fspath(path)), e) from None


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def temp_beside(target: Path, suffix: str = ".tmp") -> Path:
    """A new empty temporary file beside ``target`` (``.NAME.XXXX<suffix>``); OSError when it cannot be made."""
    parent = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=parent)
    os.close(fd)
    return Path(tmp)


@contextlib.contextmanager
def replace_when_done(tmp: Path, target: Path) -> Iterator[Path]:
    """``tmp`` renamed onto ``target`` (with the usual permissions) when the block completes, removed on
    any exception (KeyboardInterrupt and SIGTERM included). For the files specprof derives from an input
    (an ``.nsys-rep``'s or a columnar export's SQLite), which the user-output policy of
    :func:`atomic_path` does not govern."""
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())        # mkstemp makes 0600
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _stage(path, overwrite: str) -> tuple[str, int, Path]:
    """(kind, fd, temporary path) for one output, after the policy's checks."""
    kind = policy.check_output(path, overwrite=overwrite)
    if kind == policy.STREAM:
        return (kind, *_mkstemp_for_stream(path))
    return (kind, *_mkstemp_near(policy.resolved_file(path)))


def _finish(kind: str, tmp: Path, path, overwrite: str) -> None:
    if kind == policy.STREAM:
        try:
            _copy_to_stream(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                tmp.unlink()
    else:
        _commit(tmp, Path(path), overwrite)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, overwrite: str = "reports") -> Iterator[Path]:
    """Yield a temporary path next to ``path`` for writers that want a file name (pyarrow,
    sqlite, nsys); on success it is renamed onto ``path`` (copied into it when ``path`` is a
    stream), on any exception (KeyboardInterrupt included) it is removed and ``path`` is left as it
    was. ``overwrite``: see :func:`analyze.output_policy.check_output`."""
    kind, fd, tmp = _stage(path, overwrite)
    os.close(fd)
    try:
        yield tmp
        _finish(kind, tmp, path, overwrite)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, encoding: str | None = "utf-8",
                 newline: str | None = None, overwrite: str = "reports") -> Iterator[IO]:
    """``with atomic_write(p) as f: f.write(...)``: writes a temp file in the same directory and
    ``os.replace``s it onto ``p`` when the block succeeds (``p`` a stream: copies it into ``p``);
    on any exception (KeyboardInterrupt included) the temp file is removed and an existing ``p`` is
    left untouched. Mode ``x``: ``p`` must not exist (``overwrite="never"``). Raises OutputError
    (one line) when the location cannot be written or the policy refuses it."""
    if mode not in ("w", "wb", "wt", "x", "xb", "xt"):
        raise ValueError(f"atomic_write: unsupported mode {mode!r}")
    if mode.startswith("x"):
        overwrite = "never"
    kind, fd, tmp = _stage(path, overwrite)
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
            if kind == policy.FILE:
                try:
                    os.fsync(f.fileno())
                except OSError as e:
                    raise _output_error(Path(path), e) from None
        _finish(kind, tmp, path, overwrite)
    except OutputError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    except BrokenPipeError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    except OSError as e:  # a failed write/flush of the output (ENOSPC, EIO, ...)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _output_error(Path(path), e) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class AtomicDir:
    """Files staged by :func:`atomic_dir_write`. ``open(name)`` / ``path(name)`` stage one file;
    all staged files are put into place (each rename atomic; a file of the directory that is a
    device or FIFO is written to as a stream) when the ``with`` block ends without an exception,
    and all removed otherwise."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._staged: dict[str, tuple[str, Path]] = {}
        self._files: list[IO] = []

    def _stage(self, name: str) -> Path:
        if os.sep in name or (os.altsep and os.altsep in name) or name in ("", ".", ".."):
            raise ValueError(f"AtomicDir: plain file name expected, got {name!r}")
        if name in self._staged:
            raise ValueError(f"AtomicDir: {name!r} written twice")
        kind, fd, tmp = _stage(self.directory / name, "reports")
        os.close(fd)
        self._staged[name] = (kind, tmp)
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
        for name in list(self._staged):
            kind, tmp = self._staged[name]
            _finish(kind, tmp, self.directory / name, "reports")
            del self._staged[name]

    def _discard(self) -> None:
        with contextlib.suppress(OSError):
            self._close_files()
        for _, tmp in self._staged.values():
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
    check_dir_writable(d)
    staged = AtomicDir(d)
    try:
        yield staged
        staged._commit_all()
    except BaseException:
        staged._discard()
        raise
